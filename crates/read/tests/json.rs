//! numaplace's own topology JSON reads back exactly: for every real machine
//! in the fixtures, read -> JSON -> read gives the same topology and the
//! same JSON; broken JSON gives an error with line and column, never a
//! panic.

use numaplace_read::{json, read_source, ParseError};
use proptest::prelude::*;
use std::path::PathBuf;

fn fixtures() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/topologies")
}

fn fixture_files() -> Vec<PathBuf> {
    let index = std::fs::read_to_string(fixtures().join("INDEX.csv")).expect("index");
    index.lines().skip(1).filter_map(|l| l.split(',').next()).map(|f| fixtures().join(f)).collect()
}

#[test]
fn every_fixture_round_trips_exactly() {
    let mut checked = 0;
    for path in fixture_files() {
        let original = read_source(path.to_str().expect("utf-8")).expect("fixture reads");
        let text = json::to_string(&original);
        let back = json::parse(&text).unwrap_or_else(|e| panic!("{}: own JSON refused: {e}", path.display()));
        assert_eq!(back, original, "{}: topology changed in the round trip", path.display());
        assert_eq!(json::to_string(&back), text, "{}: JSON changed in the round trip", path.display());
        checked += 1;
    }
    assert!(checked > 80, "only {checked} fixtures");
}

#[test]
fn the_documented_fields_are_there() {
    let t = read_source(fixtures().join("mpibind/epyc-corona.xml").to_str().expect("utf-8")).expect("reads");
    let v: serde_json::Value = serde_json::from_str(&json::to_string(&t)).expect("json");
    assert_eq!(v["packages"], 2);
    assert_eq!(v["cores"], 48);
    assert_eq!(v["pus"], 96);
    let nodes = v["nodes"].as_array().expect("nodes");
    assert_eq!(nodes.len(), 8);
    assert_eq!(nodes[0]["id"], 0);
    assert_eq!(nodes[0]["cpus"].as_array().expect("cpus").len(), 12);
    assert_eq!(nodes[0]["distances"], serde_json::json!([10, 16, 16, 16, 32, 32, 32, 32]));
    assert!(nodes[0]["memory_bytes"].as_u64().expect("bytes") > 30 << 30);
}

#[test]
fn errors_say_where() {
    let err = json::parse("{\n  \"format\": \"numaplace-topology\",\n  \"version\": 1,\n  oops\n}").expect_err("bad");
    assert!(matches!(err, ParseError::Json { line: 4, .. }), "{err}");
    let err =
        json::parse(r#"{"format": "something-else", "version": 1, "packages": 0, "cores": 0, "pus": 0, "nodes": []}"#)
            .expect_err("wrong format");
    assert!(err.to_string().contains("format: expected \"numaplace-topology\""), "{err}");
    let err = json::parse(r#"{"format": "numaplace-topology", "version": 1, "packages": 0, "cores": 0, "pus": 0, "nodes": [], "extra": 1}"#)
        .expect_err("unknown field");
    assert!(err.to_string().contains("unknown field `extra`"), "{err}");
    // A contradiction inside well-formed JSON is caught by the model.
    let t = read_source(fixtures().join("mpibind/epyc-corona.xml").to_str().expect("utf-8")).expect("reads");
    let mut v: serde_json::Value = serde_json::from_str(&json::to_string(&t)).expect("json");
    v["nodes"][1]["distances"][1] = serde_json::json!(12);
    let err = json::parse(&v.to_string()).expect_err("self distance");
    assert!(err.to_string().contains("distance of node1 to itself is 12, expected 10"), "{err}");
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]

    #[test]
    fn arbitrary_text_never_panics(s in "\\PC{0,200}") {
        let _ = json::parse(&s);
    }

    #[test]
    fn mutated_json_never_panics(pos in 0usize..4000, byte in any::<u8>(), cut in 0usize..4000) {
        let t = read_source(fixtures().join("hwloc/xml/32em64t-2n8c2t-pci-normalio.xml").to_str().expect("utf-8")).expect("reads");
        let mut bytes = json::to_string(&t).into_bytes();
        let at = pos % bytes.len();
        bytes[at] = byte;
        bytes.truncate(bytes.len() - cut % (bytes.len() / 2));
        let text = String::from_utf8_lossy(&bytes);
        let _ = json::parse(&text);
    }
}
