//! numaplace's own topology JSON reads back exactly: for every real machine
//! in the fixtures, read -> JSON -> read gives the same topology and the
//! same JSON; broken JSON gives an error with line and column, never a
//! panic.

use numaplace_read::{json, parse_text, read_source, ParseError, SourceKind};
use numaplace_topo::{Topology, MAX_CPU, MAX_NODE, MAX_NODE_BYTES};
use proptest::prelude::*;
use std::path::PathBuf;

fn fixtures() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/topologies")
}

fn fixture_files() -> Vec<PathBuf> {
    let index = std::fs::read_to_string(fixtures().join("INDEX.csv")).expect("index");
    index.lines().skip(1).filter_map(|l| l.split(',').next()).map(|f| fixtures().join(f)).collect()
}

/// Reads a fixture. libvirt's test file gives its 1 GiB cells terabytes of
/// huge pages, which the model refuses; it is read with cells that hold
/// them (as `real_topologies.rs` checks it).
fn read_fixture(path: &std::path::Path) -> Topology {
    let name = path.to_str().expect("utf-8");
    if !name.ends_with("vircaps-x86_64-resctrl-amd.xml") {
        return read_source(name).expect("fixture reads");
    }
    let text = std::fs::read_to_string(path)
        .expect("fixture")
        .replace("<memory unit='KiB'>1048576</memory>", "<memory unit='KiB'>8589934592</memory>")
        .replace("<memory unit='KiB'>2097152</memory>", "<memory unit='KiB'>17179869184</memory>");
    parse_text(SourceKind::Libvirt, name, &text).expect("fixture with room reads")
}

#[test]
fn every_fixture_round_trips_exactly() {
    let mut checked = 0;
    for path in fixture_files() {
        let original = read_fixture(&path);
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

/// A real machine's JSON (2 nodes, 16 cores, caches, PCI devices) with
/// huge pages, free memory, an offline CPU and warnings added, so every
/// numeric field of the format is there.
fn full_doc() -> serde_json::Value {
    let t = read_source(fixtures().join("hwloc/xml/32em64t-2n8c2t-pci-normalio.xml").to_str().expect("utf-8"))
        .expect("reads");
    let mut v: serde_json::Value = serde_json::from_str(&json::to_string(&t)).expect("json");
    v["nodes"][0]["free_bytes"] = serde_json::json!(1u64 << 30);
    v["nodes"][0]["hugepages"] = serde_json::json!([{"size_bytes": 2u64 << 20, "total": 16, "free": 8}]);
    v["offline_cpus"] = serde_json::json!([40]);
    v["warnings"] = serde_json::json!([
        {"code": "cpuless-node", "message": "m", "node": 1},
        {"code": "core-spans-nodes", "message": "m", "cpus": [0, 16]},
    ]);
    v
}

fn parse_with(edit: impl FnOnce(&mut serde_json::Value)) -> Result<Topology, String> {
    let mut v = full_doc();
    edit(&mut v);
    json::parse(&v.to_string()).map_err(|e| e.to_string())
}

#[test]
fn the_full_document_reads() {
    let t = parse_with(|_| {}).expect("valid");
    assert_eq!(t.nodes()[0].hugepages.len(), 1);
    assert_eq!(t.offline_cpus().to_string(), "40");
}

#[test]
fn a_cpu_numbered_4000000000_is_refused_by_its_field() {
    let err = parse_with(|v| v["nodes"][0]["cpus"] = serde_json::json!([0, 4000000000u64])).expect_err("refused");
    assert_eq!(err, "nodes[0].cpus: expected CPU numbers below 65536, found `4000000000`");
}

/// A change to a document.
type Edit = fn(&mut serde_json::Value);

#[test]
fn numbers_beyond_the_bounds_name_their_field() {
    let cases: [(&str, Edit); 9] = [
        ("core_list[3].cpus: expected CPU numbers below 65536, found `65536`", |v| {
            v["core_list"][3]["cpus"] = serde_json::json!([65536])
        }),
        ("offline_cpus: expected CPU numbers below 65536", |v| v["offline_cpus"] = serde_json::json!([70000])),
        ("warnings[1].cpus: expected CPU numbers below 65536", |v| {
            v["warnings"][1]["cpus"] = serde_json::json!([4294967295u32])
        }),
        ("nodes[1].id: expected a node number below 4096, found `4096`", |v| v["nodes"][1]["id"] = 4096.into()),
        ("devices[0].node: expected a node number below 4096", |v| v["devices"][0]["node"] = 99999.into()),
        ("nodes[0].memory_bytes: expected at most 1 PiB", |v| v["nodes"][0]["memory_bytes"] = u64::MAX.into()),
        ("nodes[0].free_bytes: expected at most 1 PiB", |v| v["nodes"][0]["free_bytes"] = ((1u64 << 50) + 1).into()),
        // Pools are held to the node's memory by the model: u64::MAX pages
        // of 2 MiB are counted without overflow.
        ("node0 has a pool of 18446744073709551615 x 2 MiB huge pages", |v| {
            v["nodes"][0]["hugepages"][0]["total"] = u64::MAX.into()
        }),
        ("node0 has 17 free 2 MiB huge pages in a pool of 16", |v| v["nodes"][0]["hugepages"][0]["free"] = 17.into()),
    ];
    for (want, edit) in cases {
        let err = parse_with(edit).expect_err(want);
        assert!(err.starts_with(want), "expected `{want}...`, got `{err}`");
    }
}

#[test]
fn more_nodes_than_node_numbers_are_refused_before_the_matrix() {
    // 5000 nodes without distances would get a 5000 x 5000 default matrix.
    let err = parse_with(|v| {
        v["distances_known"] = false.into();
        v["nodes"] =
            (0..5000).map(|i| serde_json::json!({"id": i, "cpus": [], "memory_bytes": 0, "distances": []})).collect();
    })
    .expect_err("too many nodes");
    assert_eq!(err, "nodes: expected at most 4096 nodes, found `5000 entries`");
}

#[test]
fn repeated_high_cpu_lists_stop_at_the_set_budget() {
    // `[65535]` is 7 bytes of text and an 8 KiB bitmap: 20000 of them would
    // take 160 MiB, and are refused before any is built.
    let err = parse_with(|v| {
        v["caches"] = (0..20_000).map(|_| serde_json::json!({"level": 3, "cpus": [65535]})).collect();
    })
    .expect_err("over budget");
    assert!(err.starts_with("cpus: expected CPU lists that fit in 128 MiB"), "{err}");
}

/// Replaces the numeric leaves of `v`, numbered in document order, for
/// which `pick` gives a value, counting them in `next`.
fn replace_numbers(v: &mut serde_json::Value, pick: &mut dyn FnMut(usize) -> Option<u64>, next: &mut usize) {
    match v {
        serde_json::Value::Number(_) => {
            if let Some(n) = pick(*next) {
                *v = serde_json::Value::from(n);
            }
            *next += 1;
        }
        serde_json::Value::Array(items) => items.iter_mut().for_each(|i| replace_numbers(i, pick, next)),
        serde_json::Value::Object(map) => map.values_mut().for_each(|i| replace_numbers(i, pick, next)),
        _ => {}
    }
}

/// Numbers a hostile or broken file holds: edges of every bound and of
/// every integer type, and anything at all.
fn hostile() -> impl Strategy<Value = u64> {
    prop_oneof![
        Just(0u64),
        Just(1),
        Just(10),
        Just(4095),
        Just(4096),
        Just(65535),
        Just(65536),
        Just(4_000_000_000),
        Just(u64::from(u32::MAX)),
        Just(1 << 32),
        Just(1 << 50),
        Just((1 << 50) + 1),
        Just(u64::MAX),
        any::<u64>(),
    ]
}

/// What a topology that reads must satisfy whatever the file said.
fn within_bounds(t: &Topology) -> bool {
    t.pus().all(|p| p.id < MAX_CPU)
        && t.nodes().iter().all(|n| n.id.0 < MAX_NODE && n.memory_bytes <= MAX_NODE_BYTES)
        && t.nodes().iter().flat_map(|n| &n.hugepages).all(|h| h.free.is_none_or(|f| f <= h.total))
        && t.nodes().iter().all(|n| {
            n.hugepages
                .iter()
                .map(|h| u128::from(h.total) * u128::from(h.size_bytes))
                .all(|b| b <= n.memory_bytes.into())
        })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]

    /// One to three numeric fields take hostile values: the file is refused
    /// or reads as a topology within the bounds, and either way quickly
    /// (nothing is sized by a number before it is checked).
    #[test]
    fn hostile_numbers_in_a_few_fields(
        picks in proptest::collection::vec((any::<prop::sample::Index>(), hostile()), 1..4),
    ) {
        let mut v = full_doc();
        let mut count = 0;
        replace_numbers(&mut v, &mut |_| None, &mut count);
        let picks: Vec<(usize, u64)> = picks.iter().map(|(i, n)| (i.index(count), *n)).collect();
        replace_numbers(&mut v, &mut |at| picks.iter().find(|(i, _)| *i == at).map(|&(_, n)| n), &mut 0);
        if let Ok(t) = json::parse(&v.to_string()) {
            prop_assert!(within_bounds(&t));
        }
    }

    /// Every numeric field hostile at once (format and version kept, so
    /// the document gets past its header).
    #[test]
    fn hostile_numbers_everywhere(values in proptest::collection::vec(hostile(), 256)) {
        let mut v = full_doc();
        replace_numbers(&mut v, &mut |at| values.get(at).copied(), &mut 0);
        v["version"] = 1.into();
        if let Ok(t) = json::parse(&v.to_string()) {
            prop_assert!(within_bounds(&t));
        }
    }
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
