//! `lint --fix` never loses output (issue 15): several fixed files go to a
//! directory, made if missing, each under its own name; a bad `--output`
//! is refused before anything is written; `--in-place` keeps each
//! original as FILE.bak.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The ESXi-style host of the lint fixtures: 2 sockets x 12 cores x 2
/// threads.
const HOST: &str = "2 sockets x 12 cores x 2 threads, 128GiB per node, hugepages 2MiB:4096 per node";

/// Fixtures with findings that `--fix` fixes on that host: three libvirt
/// domains and three `.vmx` files.
const FIXABLE: [&str; 6] = [
    "six-cells-24vcpu.xml",
    "vcpu-spans-nodes.xml",
    "numatune-remote.xml",
    "esxi-24vcpu-3x8.vmx",
    "esxi-20vcpu-5x4.vmx",
    "esxi-24vcpu-6x4.vmx",
];

fn numaplace(dir: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_numaplace"))
        .env("NUMAPLACE_HOST_CONFIG", concat!(env!("CARGO_TARGET_TMPDIR"), "/no-host-profile.toml"))
        .current_dir(dir)
        .args(args)
        .output()
        .expect("run numaplace")
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// A fresh directory holding copies of `names` from the lint fixtures.
fn workdir(test: &str, names: &[&str]) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("lint-fix").join(test);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("temp dir");
    for name in names {
        let from = format!("{}/../lint/tests/data/{name}", env!("CARGO_MANIFEST_DIR"));
        std::fs::copy(&from, dir.join(name)).unwrap_or_else(|e| panic!("{from}: {e}"));
    }
    dir
}

fn lint_fix(dir: &Path, files: &[&str], extra: &[&str]) -> Output {
    let mut args = vec!["lint", "--host", HOST];
    args.extend_from_slice(files);
    args.push("--fix");
    args.extend_from_slice(extra);
    numaplace(dir, &args)
}

#[test]
fn several_fixed_files_go_to_a_new_directory_each_under_its_name() {
    let dir = workdir("several", &FIXABLE);
    let o = lint_fix(&dir, &FIXABLE, &["--output", "newdir"]);
    assert!(o.status.code() == Some(0) || o.status.code() == Some(1), "{}", stderr(&o));
    for name in FIXABLE {
        let fixed = std::fs::read_to_string(dir.join("newdir").join(name)).unwrap_or_else(|e| panic!("{name}: {e}"));
        let original = std::fs::read_to_string(dir.join(name)).expect("input");
        assert_ne!(fixed, original, "{name} was fixed");
        assert!(stderr(&o).contains(&format!("wrote newdir/{name}")), "{}", stderr(&o));
    }
}

#[test]
fn a_bad_output_is_refused_before_anything_is_written() {
    let dir = workdir("bad-output", &FIXABLE);
    // A file where several outputs need a directory: refused, untouched.
    std::fs::write(dir.join("taken"), "keep me\n").expect("write");
    let o = lint_fix(&dir, &FIXABLE[..2], &["--output", "taken"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("--output taken: is a file, and 2 inputs need a directory"), "{}", stderr(&o));
    assert_eq!(std::fs::read_to_string(dir.join("taken")).expect("read"), "keep me\n");
    // Two inputs of one name would overwrite each other in the directory.
    std::fs::create_dir_all(dir.join("other")).expect("dir");
    std::fs::copy(dir.join(FIXABLE[0]), dir.join("other").join(FIXABLE[0])).expect("copy");
    let twin = format!("other/{}", FIXABLE[0]);
    let o = lint_fix(&dir, &[FIXABLE[0], &twin], &["--output", "out"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("would overwrite each other"), "{}", stderr(&o));
    assert!(!dir.join("out").exists(), "nothing written, no directory made");
    // One input may still be written to a file name.
    let o = lint_fix(&dir, &[FIXABLE[0]], &["--output", "one.xml"]);
    assert!(o.status.code() != Some(2), "{}", stderr(&o));
    assert!(std::fs::read_to_string(dir.join("one.xml")).expect("written").contains("<domain"));
}

/// `--output fx` with one input: neither a directory nor a file of the
/// input's kind, so which was meant is not guessed (it used to be written
/// as a file `fx`, though the help says DIR): refused, nothing written;
/// `fx/` is the directory.
#[test]
fn an_output_that_is_neither_a_directory_nor_the_inputs_kind_is_refused() {
    let dir = workdir("ambiguous-output", &FIXABLE[..1]);
    let o = lint_fix(&dir, &FIXABLE[..1], &["--output", "fx"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("--output fx: with one input, give a directory as fx/"), "{}", stderr(&o));
    assert!(!dir.join("fx").exists(), "nothing written");
    let o = lint_fix(&dir, &FIXABLE[..1], &["--output", "fx/"]);
    assert!(o.status.code() != Some(2), "{}", stderr(&o));
    assert!(dir.join("fx").join(FIXABLE[0]).is_file(), "written into the directory");
}

#[test]
fn in_place_keeps_the_original_as_a_backup_unless_told_not_to() {
    let dir = workdir("in-place", &FIXABLE[..2]);
    let before = std::fs::read(dir.join(FIXABLE[0])).expect("input");
    let o = lint_fix(&dir, &FIXABLE[..1], &["--in-place"]);
    assert!(o.status.code() != Some(2), "{}", stderr(&o));
    assert_eq!(std::fs::read(dir.join(format!("{}.bak", FIXABLE[0]))).expect("backup"), before);
    assert_ne!(std::fs::read(dir.join(FIXABLE[0])).expect("fixed"), before);
    let o = lint_fix(&dir, &FIXABLE[1..2], &["--in-place", "--no-backup"]);
    assert!(o.status.code() != Some(2), "{}", stderr(&o));
    assert!(!dir.join(format!("{}.bak", FIXABLE[1])).exists());
    // No temporary file is left beside them.
    let left: Vec<String> = std::fs::read_dir(&dir)
        .expect("list")
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".tmp"))
        .collect();
    assert!(left.is_empty(), "{left:?}");
}

/// Every libvirt fixture with findings on the host (device-remote needs a
/// host that lists its NIC and the overlaps need both files: the lint
/// crate's tests fix those),
/// fixed alone with and
/// without --allow-resize: each written domain validates against libvirt's
/// schema and lints clean (a fix that cannot be made is not written).
#[test]
fn every_fixed_domain_validates_and_lints_clean() {
    const DOMAINS: [&str; 10] = [
        "sockets-3x8-cells.xml",
        "six-cells-24vcpu.xml",
        "sockets-3x8-two-cells.xml",
        "odd-17vcpu.xml",
        "vcpu-spans-nodes.xml",
        "partial-pinning.xml",
        "numatune-remote.xml",
        "hugepages-1g.xml",
        "hotadd-16vcpu-200g.xml",
        "xapi-32vcpu-one-node.xml",
    ];
    let validate = numaplace_guest::testing::require_tool("virt-xml-validate");
    let dir = workdir("validate", &DOMAINS);
    let mut written = 0;
    for (mode, extra) in [("keep", &[][..]), ("resize", &["--allow-resize"][..])] {
        for name in DOMAINS {
            let out = format!("{mode}-{name}");
            let mut args = vec!["--output", out.as_str()];
            args.extend_from_slice(extra);
            let o = lint_fix(&dir, &[name], &args);
            assert!(o.status.code() != Some(2), "{name}: {}", stderr(&o));
            if !dir.join(&out).exists() {
                // Only a host without the huge pages may refuse a fix.
                assert!(name == "hugepages-1g.xml" && mode == "keep", "{name} ({mode}): {}", stderr(&o));
                continue;
            }
            written += 1;
            let again = numaplace(&dir, &["lint", "--host", HOST, &out]);
            assert_eq!(
                again.status.code(),
                Some(0),
                "{out} does not lint clean:\n{}",
                String::from_utf8_lossy(&again.stdout)
            );
            if validate {
                let v = Command::new("virt-xml-validate").arg(dir.join(&out)).arg("domain").output().expect("run");
                assert!(v.status.success(), "{out}: {}{}", String::from_utf8_lossy(&v.stdout), stderr(&v));
            }
        }
    }
    assert_eq!(written, 2 * DOMAINS.len() - 1);
}

/// The blocks of a domain that say where it runs, trimmed line by line.
fn placement_blocks(xml: &str) -> Vec<String> {
    ["cputune", "numatune", "numa"]
        .iter()
        .map(|tag| {
            let open = format!("<{tag}>");
            let close = format!("</{tag}>");
            let start = xml.find(&open).unwrap_or_else(|| panic!("no {open} in\n{xml}"));
            let end = xml[start..].find(&close).map(|e| start + e + close.len()).expect("closed");
            xml[start..end].lines().map(str::trim).collect::<Vec<_>>().join("\n")
        })
        .collect()
}

/// What `lint --fix` writes for several files is what `plan` places for
/// the same VMs in the same order (lint's canonical order, by VM name,
/// whatever the order of the files): the fix is the planner's decision,
/// not a second opinion. (Where `plan` would add a warning the files did not
/// have, such as 16 vCPUs on 12 cores when the host fills up, the fix is
/// not written: tests/joint_fix.rs in numaplace-lint.)
#[test]
fn lint_fix_writes_what_plan_places() {
    let files = ["vcpu-spans-nodes.xml", "numatune-remote.xml"];
    let dir = workdir("agree", &files);
    let o = lint_fix(&dir, &files, &["--output", "fixed"]);
    assert!(o.status.code() != Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("fix summary: 2 fixed"), "{}", stderr(&o));
    // By name: db-remote (numatune-remote.xml) is planned first.
    let vms = [
        ("db-remote", "numatune-remote.xml", "name=db-remote,vcpus=8,memory=32GiB"),
        ("web-float", "vcpu-spans-nodes.xml", "name=web-float,vcpus=8,memory=16GiB"),
    ];
    for (name, file, _) in &vms {
        let fixed = std::fs::read_to_string(dir.join("fixed").join(file)).expect("fixed file");
        let mut args = vec!["plan", "--host", HOST, "--format", "libvirt", "--vm-name", name];
        for (_, _, spec) in &vms {
            args.extend(["--vm", spec]);
        }
        let planned = numaplace(&dir, &args);
        assert_eq!(planned.status.code(), Some(0), "{}", stderr(&planned));
        let planned = String::from_utf8_lossy(&planned.stdout);
        assert_eq!(placement_blocks(&fixed), placement_blocks(&planned), "{name}");
    }
}

/// Issue 38: one file that cannot be read (truncated XML) is reported by
/// name, and every other file is still linted and fixed; the run ends
/// with exit 2 so a script notices.
#[test]
fn one_unreadable_file_hides_nothing_else() {
    let dir = workdir("one-unreadable", &FIXABLE[..2]);
    std::fs::write(dir.join("broken.xml"), "<domain type='kvm'>\n  <name>broken</name>\n  <vcpu>4").expect("write");
    let mut files: Vec<&str> = FIXABLE[..2].to_vec();
    files.insert(1, "broken.xml");

    let mut args = vec!["lint", "--host", HOST, "--format", "json"];
    args.extend_from_slice(&files);
    let o = numaplace(&dir, &args);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("broken.xml"), "{}", stderr(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    for good in &FIXABLE[..2] {
        assert!(out.contains(good), "findings of {good} missing: {out}");
    }

    let o = lint_fix(&dir, &files, &["--output", "fixed"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    for good in &FIXABLE[..2] {
        assert!(dir.join("fixed").join(good).is_file(), "{good} not fixed: {}", stderr(&o));
    }
}

/// The case (issue 38): four domains fixed together on a 2 x
/// 18-core host, one of which (160 GiB on 1 GiB pages the host has none
/// of) only a resize would fix. Its fix is skipped and the others are
/// planned around it, so the fixed set has no new pinning-overlap; every
/// input is in the output directory, the skipped one copied unchanged, and
/// the summary says which.
#[test]
fn every_input_is_in_the_output_directory_and_a_skipped_fix_keeps_its_cpus() {
    let dir = workdir("skipped", &[]);
    let domain = |name: &str, vcpus: u32, gib: u32, tune: &str| {
        format!(
            "<domain type='kvm'>\n  <name>{name}</name>\n  <memory unit='GiB'>{gib}</memory>\n  <vcpu placement='static'>{vcpus}</vcpu>\n{tune}  <os>\n    <type arch='x86_64' machine='pc-q35-6.2'>hvm</type>\n  </os>\n</domain>\n"
        )
    };
    let pins = |cpus: &[u32]| {
        let lines: String =
            cpus.iter().enumerate().map(|(v, c)| format!("    <vcpupin vcpu='{v}' cpuset='{c}'/>\n")).collect();
        format!("  <cputune>\n{lines}  </cputune>\n")
    };
    let huge = "  <numatune>\n    <memory mode='strict' nodeset='0'/>\n  </numatune>\n  <memoryBacking>\n    <hugepages>\n      <page size='1048576' unit='KiB'/>\n    </hugepages>\n  </memoryBacking>\n";
    let db = domain("db", 8, 160, &format!("{}{huge}", pins(&[0, 1, 2, 3, 4, 5, 6, 7])));
    std::fs::write(dir.join("db.xml"), &db).expect("write");
    std::fs::write(dir.join("web.xml"), domain("web", 20, 32, "")).expect("write");
    std::fs::write(dir.join("app.xml"), domain("app", 2, 4, &pins(&[36, 37]))).expect("write");
    std::fs::write(dir.join("cache.xml"), domain("cache", 2, 4, &pins(&[4, 5]))).expect("write");
    let host = "2 sockets x 18 cores x 2 threads, 192GiB per node, hugepages 2MiB:0, 1GiB:0 per node";
    let files = ["db.xml", "web.xml", "app.xml", "cache.xml"];
    let mut args = vec!["lint", "--host", host];
    args.extend(files);
    args.extend(["--fix", "--output", "out"]);
    let o = numaplace(&dir, &args);
    let err = stderr(&o);
    // db keeps its hugepages-missing error: exit 1.
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(err.contains("db.xml: no fix written"), "{err}");
    assert!(err.contains("copied out/db.xml unchanged"), "{err}");
    assert!(
        err.contains("fix summary: 3 fixed: web.xml, app.xml, cache.xml; left as they were (no fix written): db.xml"),
        "{err}"
    );
    assert_eq!(std::fs::read_to_string(dir.join("out/db.xml")).expect("db copied"), db);
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(!stdout.contains("pinning-overlap"), "{stdout}");
    // The directory is the whole set: it lints with db's error only.
    let mut again = vec!["lint".to_string(), "--host".into(), host.into()];
    again.extend(files.iter().map(|f| format!("out/{f}")));
    let o = numaplace(&dir, &again.iter().map(String::as_str).collect::<Vec<_>>());
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains("hugepages-missing"), "{out}");
    assert!(!out.contains("pinning-overlap") && !out.contains("warning["), "{out}");
}

/// Issue 38: lint sees what `plan --state` sees. A FILE pinned 1:1 on a
/// host (`--state DIR`) where a domain with no pins floats over every CPU
/// is reported: the finding is on the floating domain, and names the
/// FILE's pins.
#[test]
fn a_file_pinned_under_a_floating_host_domain_is_reported() {
    let dir = workdir("floating-state", &[]);
    std::fs::create_dir_all(dir.join("host")).expect("dir");
    std::fs::write(
        dir.join("host/web.xml"),
        "<domain type='kvm'>\n  <name>web</name>\n  <memory unit='GiB'>1</memory>\n  <vcpu placement='static'>2</vcpu>\n</domain>\n",
    )
    .expect("write");
    std::fs::write(
        dir.join("db.xml"),
        "<domain type='kvm'>\n  <name>db</name>\n  <memory unit='GiB'>1</memory>\n  <vcpu placement='static'>1</vcpu>\n  <cputune>\n    <vcpupin vcpu='0' cpuset='1'/>\n  </cputune>\n</domain>\n",
    )
    .expect("write");
    let host = "1 socket x 2 cores x 1 thread, 8GiB per node";
    let o = numaplace(&dir, &["lint", "--host", host, "--state", "host", "db.xml", "--format", "json"]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let doc: serde_json::Value = serde_json::from_slice(&o.stdout).expect("json");
    let found = &doc["findings"][0];
    assert_eq!(found["rule"], "floating-on-dedicated", "{doc}");
    assert_eq!(found["vm"], "web", "{doc}");
    assert!(found["evidence"].as_array().expect("evidence").iter().any(|e| e["file"] == "db.xml"), "{doc}");
}

/// Issue 47: the four domain files on a 2 x 18-core host (an
/// E5-2695 v4) give the same files and the same report in any order of
/// the arguments; the three fixable ones are fixed, the fourth is named
/// as too large for the host, and the trade is said.
#[test]
fn the_same_files_in_another_order_give_the_same_output() {
    let four = ["app-across-nodes.xml", "batch-3cells.xml", "erp-hotadd.xml", "db-hugepages.xml"];
    let dir = workdir("order-free", &[]);
    for name in four {
        let from = format!("{}/../lint/tests/data/four/{name}", env!("CARGO_MANIFEST_DIR"));
        std::fs::copy(&from, dir.join(name)).unwrap_or_else(|e| panic!("{from}: {e}"));
    }
    let host = format!("{}/../../fixtures/topologies/mpibind/cts1-pascal.xml", env!("CARGO_MANIFEST_DIR"));
    let run = |order: &[&str], out: &str| {
        let mut args = vec!["lint", "--host", host.as_str()];
        args.extend_from_slice(order);
        args.extend(["--fix", "--output", out, "--format", "json"]);
        let o = numaplace(&dir, &args);
        assert_eq!(o.status.code(), Some(1), "db-hugepages keeps its errors: {}", stderr(&o));
        let written: Vec<(String, String)> = four
            .iter()
            .map(|f| (f.to_string(), std::fs::read_to_string(dir.join(out).join(f)).expect("every input written")))
            .collect();
        (written, String::from_utf8_lossy(&o.stdout).into_owned(), stderr(&o))
    };
    let (a, json_a, err_a) = run(&four, "a");
    let reversed: Vec<&str> = four.iter().rev().copied().collect();
    let (b, json_b, err_b) = run(&reversed, "b");
    assert_eq!(a, b, "the files written differ with the order");
    let sorted = |j: &str| {
        let doc: serde_json::Value = serde_json::from_str(j).expect("json");
        let mut f: Vec<String> =
            doc["findings"].as_array().expect("findings").iter().map(ToString::to_string).collect();
        f.sort();
        f
    };
    assert_eq!(sorted(&json_a), sorted(&json_b), "the findings after the fix differ with the order");
    for err in [&err_a, &err_b] {
        assert!(err.contains("db-hugepages.xml: no fix written: db-hugepages cannot run on this host at all"), "{err}");
        assert!(err.contains("fix trade for the set: fixes "), "{err}");
        assert!(err.contains("3 fixed"), "{err}");
    }
}
