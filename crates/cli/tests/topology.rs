//! `numaplace topology` and `numaplace lint` as a user runs them: the
//! formats, the exit codes, and errors that name the file and the problem.

use std::process::Command;

fn run(args: &[&str]) -> (i32, String, String) {
    let o = Command::new(env!("CARGO_BIN_EXE_numaplace"))
        .env("NUMAPLACE_HOST_CONFIG", concat!(env!("CARGO_TARGET_TMPDIR"), "/no-host-profile.toml"))
        .args(args)
        .output()
        .expect("runs");
    (
        o.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&o.stdout).into(),
        String::from_utf8_lossy(&o.stderr).into(),
    )
}

fn fixture(rel: &str) -> String {
    format!("{}/../../fixtures/topologies/{rel}", env!("CARGO_MANIFEST_DIR"))
}

fn tmp(name: &str, text: &str) -> String {
    let dir = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("cli-topology");
    std::fs::create_dir_all(&dir).expect("dir");
    let p = dir.join(name);
    std::fs::write(&p, text).expect("write");
    p.to_string_lossy().into_owned()
}

#[test]
fn json_has_the_documented_counts_and_nodes() {
    let (code, out, _) =
        run(&["topology", "--from", &fixture("hwloc/xml/32em64t-2n8c2t-pci-normalio.xml"), "--format", "json"]);
    assert_eq!(code, 0);
    let v: serde_json::Value = serde_json::from_str(&out).expect("json");
    assert_eq!((v["packages"].as_u64(), v["cores"].as_u64(), v["pus"].as_u64()), (Some(2), Some(16), Some(32)));
    assert_eq!(v["nodes"][1]["distances"].as_array().map(Vec::len), Some(2));
    // The JSON reads back as a source.
    let again = tmp("back.json", &out);
    let (code, back, _) = run(&["topology", "--from", &again, "--format", "json"]);
    assert_eq!(code, 0);
    assert_eq!(back, out);
}

#[test]
fn text_and_svg_views() {
    let (code, out, _) = run(&["topology", "--from", "2 sockets x 4 cores x 2 threads, 16GiB per node"]);
    assert_eq!(code, 0);
    assert!(out.contains("2 packages, 2 NUMA nodes, 8 cores, 16 PUs (SMT2), 32 GiB memory"), "{out}");
    let (code, svg, _) = run(&["topology", "--from", &fixture("mpibind/epyc-corona.xml"), "--format", "svg"]);
    assert_eq!(code, 0);
    assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
}

#[test]
fn bad_input_names_the_file_and_exits_2() {
    let truncated =
        tmp("truncated.xml", "<?xml version=\"1.0\"?>\n<topology version=\"2.0\">\n  <object type=\"Machine\"");
    let (code, _, err) = run(&["topology", "--from", &truncated]);
    assert_eq!(code, 2);
    assert!(err.contains("truncated.xml") && err.contains("malformed XML"), "{err}");
    let (code, _, err) = run(&["topology", "--from", "/no/such/file.xml"]);
    assert_eq!(code, 2);
    assert!(err.contains("/no/such/file.xml"), "{err}");
    let (code, _, err) = run(&["topology", "--from", "2 sockets x 4 cores, distances 10/x"]);
    assert_eq!(code, 2);
    assert!(err.contains("distances"), "{err}");
}

#[test]
fn every_command_has_help_with_an_example() {
    for cmd in ["topology", "plan", "verify", "lint", "top", "exporter", "balance", "simulate"] {
        let (code, out, _) = run(&[cmd, "--help"]);
        assert_eq!(code, 0, "{cmd} --help");
        assert!(
            out.contains("numaplace ") && out.to_lowercase().contains("example"),
            "{cmd} --help has no example:\n{out}"
        );
    }
}

#[test]
fn lint_exit_codes_fit_ci_use() {
    let data = format!("{}/../lint/tests/data", env!("CARGO_MANIFEST_DIR"));
    let host = "2 sockets x 8 cores x 2 threads, 128GiB per node";
    let (code, _, _) = run(&["lint", &format!("{data}/clean-small.xml"), "--host", host]);
    assert_eq!(code, 0, "a clean VM");
    let (code, out, _) = run(&["lint", &format!("{data}/hotadd-16vcpu-200g.xml"), "--host", host, "--format", "json"]);
    assert_eq!(code, 1, "findings");
    let v: serde_json::Value = serde_json::from_str(&out).expect("json");
    assert!(v["findings"].as_array().expect("findings").iter().any(|f| f["rule"] == "cpu-hotadd-wide"));
    let broken = tmp("broken.vmx", "numvcpus = \"16\"\nthis is not vmx\n");
    let (code, _, err) = run(&["lint", &broken, "--host", host]);
    assert_eq!(code, 2, "unreadable input");
    assert!(err.contains("broken.vmx") && err.contains("line 2"), "{err}");
}

/// Issue 39: a KNL in SNC4 flat mode shows each MCDRAM node with its kind
/// and the quadrant's CPU node it is local to (from hwloc's groups; the
/// file has no distances), in the text view and in the JSON, which reads
/// back as the same topology.
#[test]
fn memory_only_nodes_show_their_kind_and_local_cpu_node() {
    let knl = fixture("mpibind/knl-snc4-flat-hwloc1.xml");
    let (status, out, err) = run(&["topology", "--from", &knl]);
    assert_eq!(status, 0, "{err}");
    for k in 0..4 {
        let line = format!("node{}  package 0  [MCDRAM, local to node{k}]  0 cores, 0 PUs  memory 4 GiB", 4 + k);
        assert!(out.contains(&line), "{line}\n{out}");
    }
    let (status, json, err) = run(&["topology", "--from", &knl, "--format", "json"]);
    assert_eq!(status, 0, "{err}");
    let doc: serde_json::Value = serde_json::from_str(&json).expect("json");
    let node4 = doc["nodes"].as_array().expect("nodes").iter().find(|n| n["id"] == 4).expect("node4").clone();
    assert_eq!((node4["kind"].as_str(), node4["local_to"].clone()), (Some("MCDRAM"), serde_json::json!([0])));
    let saved = tmp("knl.json", &json);
    let (status, again, err) = run(&["topology", "--from", &saved]);
    assert_eq!(status, 0, "{err}");
    assert!(again.contains("node5  package 0  [MCDRAM, local to node1]"), "{again}");
}

/// An EPYC node holds two L3 groups (CCX): the text lists them per node
/// and the SVG outlines them; an Intel node of one L3 shows none.
#[test]
fn epyc_nodes_show_their_l3_groups() {
    let (code, out, err) = run(&["topology", "--from", &fixture("mpibind/epyc-corona.xml")]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("  l3 0-2,48-50 3-5,51-53\n"), "{out}");
    assert_eq!(out.matches("  l3 ").count(), 8, "one line per node");
    let (_, svg, _) = run(&["topology", "--from", &fixture("mpibind/epyc-corona.xml"), "--format", "svg"]);
    assert!(svg.contains("2 L3 groups") && svg.contains(r#"data-l3="1""#));
    let (_, intel, _) = run(&["topology", "--from", &fixture("hwloc/xml/32em64t-2n8c2t-pci-normalio.xml")]);
    assert!(!intel.contains("  l3 "), "{intel}");
}
