//! libvirt's own test domains (fixtures/libvirt-domains, from libvirt's
//! `tests/qemuxmlconfdata`) through the command line on real hosts:
//! `lint` never panics on any of them and reads every one libvirt
//! accepts, and `plan --state DIR` plans around a folder of them, naming
//! and leaving out a domain that does not read (issue 52).

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn hosts() -> Vec<String> {
    ["hwloc/linux/32em64t-2n8c+dax+nvme+mic+dimms.xml", "mpibind/epyc-corona.xml"]
        .iter()
        .map(|f| root().join("fixtures/topologies").join(f).display().to_string())
        .collect()
}

fn numaplace(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_numaplace"))
        .env("NUMAPLACE_HOST_CONFIG", concat!(env!("CARGO_TARGET_TMPDIR"), "/no-host-profile.toml"))
        .args(args)
        .output()
        .expect("run numaplace")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn xml_files(dir: &Path) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == "xml"))
        .collect();
    out.sort();
    out
}

/// `lint` over every domain libvirt accepts, on each host: no panic, no
/// domain refused (exit 2), JSON out.
#[test]
fn lint_reads_every_domain_libvirt_accepts_on_real_hosts() {
    let files: Vec<String> =
        xml_files(&root().join("fixtures/libvirt-domains/accepted")).iter().map(|p| p.display().to_string()).collect();
    assert!(files.len() > 900);
    for host in hosts() {
        let mut args = vec!["lint", "--host", host.as_str(), "--format", "json"];
        args.extend(files.iter().map(String::as_str));
        let o = numaplace(&args);
        let err = text(&o.stderr);
        assert!(matches!(o.status.code(), Some(0 | 1)), "{host}: exit {:?}: {err}", o.status.code());
        assert!(!err.contains("panicked"), "{host}: {err}");
        let doc: serde_json::Value = serde_json::from_slice(&o.stdout).expect("lint JSON");
        assert!(doc.is_object() || doc.is_array(), "{host}");
    }
}

/// `lint` over the domains libvirt refuses: each is read or refused with
/// its file named, never a panic.
#[test]
fn lint_never_panics_on_domains_libvirt_refuses() {
    let files: Vec<String> =
        xml_files(&root().join("fixtures/libvirt-domains/rejected")).iter().map(|p| p.display().to_string()).collect();
    let host = &hosts()[1];
    let mut args = vec!["lint", "--host", host.as_str()];
    args.extend(files.iter().map(String::as_str));
    let o = numaplace(&args);
    assert!(matches!(o.status.code(), Some(0..=2)), "exit {:?}: {}", o.status.code(), text(&o.stderr));
    assert!(!text(&o.stderr).contains("panicked"), "{}", text(&o.stderr));
}

/// `plan --state DIR` with libvirt's domains in DIR plans on both hosts;
/// with one file that does not read beside them it still plans, and names
/// that file.
#[test]
fn plan_state_plans_around_libvirts_domains_and_names_an_unreadable_one() {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("libvirt-corpus-state");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("temp dir");
    // Every domain about CPUs, memory, NUMA and huge pages, under a name
    // of its own (many of libvirt's test domains share `QEMUGuest1`).
    let topics = ["numa", "hugepages", "memory", "cpu", "vcpu", "iothread", "cachetune", "smp", "numad"];
    let mut copied = 0;
    for p in xml_files(&root().join("fixtures/libvirt-domains/accepted")) {
        let stem = p.file_stem().and_then(|s| s.to_str()).unwrap_or("").to_string();
        if !topics.iter().any(|t| stem.contains(t)) {
            continue;
        }
        let xml = std::fs::read_to_string(&p).expect("read");
        let renamed = match (xml.find("<name>"), xml.find("</name>")) {
            (Some(a), Some(b)) if a < b => format!("{}<name>corpus-{stem}{}", &xml[..a], &xml[b..]),
            _ => xml,
        };
        std::fs::write(dir.join(format!("{stem}.xml")), renamed).expect("write");
        copied += 1;
    }
    assert!(copied > 150, "{copied} domains");
    let d = dir.display().to_string();
    for host in hosts() {
        let o = numaplace(&["plan", "--host", &host, "--state", &d, "--vm", "name=new,vcpus=1,memory=256MiB"]);
        let err = text(&o.stderr);
        assert!(matches!(o.status.code(), Some(0 | 1)), "{host}: exit {:?}: {err}", o.status.code());
        assert!(!err.contains("panicked") && !err.contains("left out, its definition"), "{host}: {err}");
    }
    std::fs::write(dir.join("zz-broken.xml"), "<domain type='kvm'><name>broken</name><vcpu>2</vcpu>").expect("write");
    for host in hosts() {
        let o = numaplace(&["plan", "--host", &host, "--state", &d, "--vm", "name=new,vcpus=1,memory=256MiB"]);
        let err = text(&o.stderr);
        assert!(matches!(o.status.code(), Some(0 | 1)), "{host}: exit {:?}: {err}", o.status.code());
        assert!(err.contains(&format!("{d}/zz-broken.xml: left out")), "{host}: {err}");
        assert!(text(&o.stdout).contains("new"), "{host}: {}", text(&o.stdout));
    }
}
