//! Synthetic descriptions: the documented examples give the machines they
//! promise (counts, SMT pairs, node CPUs, memory, distances), every kind of
//! mistake is named in its error, and no input makes the parser panic.

use numaplace_read::{read_source, synthetic, ParseError};
use numaplace_topo::{CpuSet, ModelError, NodeId, Topology, Warning};
use proptest::prelude::*;

fn parse(text: &str) -> Topology {
    synthetic::parse(text).unwrap_or_else(|e| panic!("{text:?}: {e}"))
}

fn cpus(list: &str) -> CpuSet {
    CpuSet::parse_list(list).expect("test cpu list")
}

fn counts(t: &Topology) -> (usize, usize, usize, usize) {
    (t.package_count(), t.nodes().len(), t.core_count(), t.pu_count())
}

/// The error's field and found text, for a description that must fail.
fn bad(text: &str) -> (String, String) {
    match synthetic::parse(text) {
        Err(ParseError::BadValue { field, found, .. }) => (field, found),
        Err(other) => panic!("{text:?}: expected BadValue, got {other:?}"),
        Ok(_) => panic!("{text:?}: parsed but should not"),
    }
}

#[test]
fn the_issue_example() {
    let t = parse("2 sockets x 2 nodes x 8 cores x 2 threads, 64GiB per node, distances 10/12/32");
    assert_eq!(counts(&t), (2, 4, 32, 64));
    // Linux x86 numbering: cpu N and N+32 are the two threads of one core.
    assert_eq!(t.cores()[0].cpus, cpus("0,32"));
    assert_eq!(t.cores()[31].cpus, cpus("31,63"));
    assert_eq!(t.nodes()[0].cpus, cpus("0-7,32-39"));
    assert_eq!(t.nodes()[3].cpus, cpus("24-31,56-63"));
    assert_eq!(t.packages()[1].cpus, cpus("16-31,48-63"));
    assert_eq!(t.package_of_node(2), Some(1));
    assert!(t.nodes().iter().all(|n| n.memory_bytes == 64 << 30 && n.free_bytes == Some(64 << 30)));
    assert_eq!(
        t.distance_rows(),
        &[vec![10, 12, 32, 32], vec![12, 10, 32, 32], vec![32, 32, 10, 12], vec![32, 32, 12, 10]]
    );
    assert!(t.warnings().is_empty(), "{:?}", t.warnings());
    assert_eq!(t.name(), Some("2 sockets x 2 nodes x 8 cores x 2 threads, 64GiB per node, distances 10/12/32"));
}

/// The examples table of docs/formats/synthetic.md, row for row.
#[test]
fn documented_examples() {
    let table = [
        ("2 sockets x 2 nodes x 8 cores x 2 threads, 64GiB per node, distances 10/12/32", (2, 4, 32, 64)),
        ("16 cores per socket, 2 threads per core, 128 GiB in total", (1, 1, 16, 32)),
        ("2 sockets x 4 dies x 2 l3 x 4 cores x 2 threads, 256GiB per socket, distances 10/32", (2, 2, 64, 128)),
        ("8 sockets × 8 nodes × 4 cores, 32GiB per node, distances 10/16/22", (8, 64, 256, 256)),
        ("2 sockets x 4 cores; memory 64GiB,32GiB; hugepages 1GiB:16; distances 10,21;21,10", (2, 2, 8, 8)),
        (
            "1 socket x 4 nodes x 16 cores x 4 threads, 24GiB per node + 4 memory-only nodes of 4GiB mcdram",
            (1, 8, 64, 256),
        ),
        ("2 sockets x 8 cores x 2 threads, 64GiB per node", (2, 2, 16, 32)),
    ];
    for (text, want) in table {
        assert_eq!(counts(&parse(text)), want, "{text}");
    }
}

#[test]
fn linear_numbering_puts_siblings_side_by_side() {
    let t = parse("2 sockets x 4 cores x 2 threads, 16GiB per node, numbering linear");
    assert_eq!(t.cores()[0].cpus, cpus("0-1"));
    assert_eq!(t.nodes()[1].cpus, cpus("8-15"));
}

#[test]
fn a_64_node_machine() {
    let t = parse("8 sockets × 8 nodes × 4 cores, 32GiB per node, distances 10/16/22");
    assert_eq!(counts(&t), (8, 64, 256, 256));
    assert_eq!(t.max_threads_per_core(), 1);
    assert_eq!(t.nodes()[63].cpus, cpus("252-255"));
    assert_eq!(t.distance(0, 7), 16);
    assert_eq!(t.distance(0, 8), 22);
    assert_eq!(t.distance(63, 63), 10);
    assert_eq!(t.total_memory(), 64 * (32 << 30));
}

#[test]
fn levels_can_be_written_loosely() {
    // Singular words, `*`, `packages`, any order, `per` counts.
    let a = parse("1 package * 16 core * 2 thread, memory 128GiB total");
    let b = parse("2 threads x 16 cores x 1 socket, 128GiB total");
    let c = parse("16 cores per socket, 2 threads per core, 128 GiB in total");
    for t in [&a, &b, &c] {
        assert_eq!(counts(t), (1, 1, 16, 32));
        assert_eq!(t.nodes()[0].memory_bytes, 128 << 30);
    }
    let d = parse("2 sockets x 2 nodes, 16 cores per socket");
    assert_eq!(counts(&d), (2, 4, 32, 32));
    assert_eq!(d.nodes()[0].cpus, cpus("0-7"));
}

#[test]
fn dies_and_l3_groups() {
    let t = parse("2 sockets x 4 dies x 2 l3 x 4 cores x 2 threads, 256GiB per socket, distances 10/32");
    assert_eq!(counts(&t), (2, 2, 64, 128));
    assert_eq!(t.die_count(), 8);
    assert_eq!(t.caches().len(), 16);
    assert_eq!(t.caches()[0].cpus, cpus("0-3,64-67"));
    assert_eq!(t.nodes()[0].memory_bytes, 256 << 30);
    assert_eq!(t.distance_rows(), &[vec![10, 32], vec![32, 10]]);
    // Dies written after nodes sit inside them: one node per die here.
    let t = parse("1 socket x 2 dies x 1 node x 8 cores, 32GiB per node");
    assert_eq!(t.nodes().len(), 2);
    assert_eq!(t.die_count(), 2);
}

#[test]
fn memory_lists_hugepages_and_matrices() {
    let t = parse(
        "2 sockets x 2 nodes x 4 cores; memory 64GiB,64GiB,32GiB,32GiB; \
         hugepages 1GiB:16, 2MiB:1024 per node; distances 10,11,21,21;11,10,21,21;21,21,10,11;21,21,11,10",
    );
    let mem: Vec<u64> = t.nodes().iter().map(|n| n.memory_bytes >> 30).collect();
    assert_eq!(mem, vec![64, 64, 32, 32]);
    let pools: Vec<(u64, u64)> = t.nodes()[3].hugepages.iter().map(|h| (h.size_bytes, h.total)).collect();
    assert_eq!(pools, vec![(2 << 20, 1024), (1 << 30, 16)]);
    assert_eq!(t.distance(1, 0), 11);
    assert_eq!(t.distance(3, 0), 21);

    let t = parse("2 sockets x 8 cores, 100GiB total, hugepages 1GiB:5 total");
    let pools: Vec<u64> = t.nodes().iter().map(|n| n.hugepages[0].total).collect();
    assert_eq!(pools, vec![3, 2]);
    assert_eq!(t.total_memory(), 100 << 30);
}

#[test]
fn memory_only_nodes() {
    let t = parse("2 sockets x 8 cores, 64GiB per node, distances 10/21 + 2 memory-only nodes of 16GiB HBM");
    assert_eq!(t.nodes().len(), 4);
    let hbm = &t.nodes()[2];
    assert_eq!((hbm.id, hbm.memory_bytes, hbm.kind.as_deref()), (NodeId(2), 16 << 30, Some("HBM")));
    assert!(hbm.cpus.is_empty());
    assert!(t.warnings().contains(&Warning::CpulessNode(NodeId(3))));
    assert_eq!(t.distance(0, 2), 21);
    let t = parse("1 socket x 4 cores, 8GiB per node, plus 1 cxl node of 256GiB");
    assert_eq!(t.nodes()[1].kind.as_deref(), Some("CXL-DRAM"));
    assert!(t.warnings().contains(&Warning::NoDistances));
}

#[test]
fn without_memory_the_reader_says_so() {
    let t = parse("4 cores");
    assert_eq!(counts(&t), (1, 1, 4, 4));
    assert!(t.warnings().contains(&Warning::NoMemoryInfo));
}

#[test]
fn each_mistake_is_named() {
    assert_eq!(bad("2 sockets x 8 cores, distances 10/x"), ("distances".into(), "10/x".into()));
    assert_eq!(bad("2 sockets x 8 cores, distances 12/21").0, "distances");
    assert_eq!(bad("2 sockets x 8 cores, distances 10/11/12/13"), ("distances".into(), "10/11/12/13".into()));
    assert_eq!(bad("2 sockets x 8 cors"), ("levels".into(), "cors".into()));
    assert_eq!(bad("2 sockets x"), ("levels".into(), "end of description".into()));
    assert_eq!(bad("0 sockets x 8 cores"), ("levels".into(), "0".into()));
    assert_eq!(bad("2 sockets x 0 cores"), ("levels".into(), "0".into()));
    assert_eq!(bad("2 sockets x 8 cores x 2 sockets"), ("levels".into(), "2 sockets".into()));
    assert_eq!(bad("2 sockets x 8 cores, 64GiB"), ("memory".into(), "64GiB".into()));
    assert_eq!(bad("2 sockets x 8 cores, 64 parsecs per node").0, "description");
    assert_eq!(bad("2 sockets x 8 cores, 64GiB per core"), ("memory".into(), "core".into()));
    assert_eq!(bad("2 sockets x 8 cores, memory 64GiB"), ("memory".into(), "1 sizes for 2 nodes".into()));
    assert_eq!(bad("2 sockets x 8 cores, 64GiB per node, 32GiB total").0, "memory");
    assert_eq!(bad("2 sockets x 8 cores, hugepages 2MiB"), ("hugepages".into(), "2MiB".into()));
    assert_eq!(bad("2 sockets x 8 cores, numbering sideways"), ("numbering".into(), "sideways".into()));
    assert_eq!(bad("6 cores per socket x 4 nodes").0, "levels");
    assert_eq!(bad("2 sockets x 8 cores, + 2 fast nodes of 1GiB"), ("memory-only nodes".into(), "fast".into()));
    assert_eq!(bad("banana"), ("description".into(), "banana".into()));
    assert_eq!(bad("2 sockets x 8 cores, 9000TiB per node").0, "memory");
    assert_eq!(bad("2 sockets x 8 cores, hugepages 1GiB:99999999999").0, "hugepages");
    assert_eq!(bad("").0, "levels");
    assert_eq!(bad("1024 sockets x 1024 cores").0, "levels");
    assert_eq!(bad("99999999999 sockets x 99999999999 nodes x 99999999999 dies, 5 cores per socket").0, "levels");
    assert_eq!(bad("2 cores + 99999999999999 hbm nodes of 1GiB + 99999999999999 hbm nodes of 1GiB").0, "levels");
    // Shapes that parse but contradict themselves are the model's errors.
    let err = synthetic::parse("2 sockets x 8 cores, distances 10,21;21,10;10,10").expect_err("3 rows");
    assert!(matches!(err, ParseError::Model(ModelError::DistanceRowCount { rows: 3, nodes: 2 })), "{err:?}");
    let err = synthetic::parse("2 sockets x 8 cores, distances 10/10").expect_err("remote 10");
    assert!(matches!(err, ParseError::Model(ModelError::RemoteTooClose { .. })), "{err:?}");
}

#[test]
fn sizes_stop_at_the_bounds_every_reader_has() {
    // The description of the issue: 10^10 PUs.
    assert_eq!(bad("100000 sockets x 100000 cores"), ("levels".into(), "100000 sockets x 100000 cores".into()));
    // Node numbers stop at 4096, as in every reader.
    assert_eq!(bad("4097 nodes x 1 cores"), ("levels".into(), "4097 nodes x 1 cores".into()));
    // 65536 CPU numbers, but their sets (a bitmap each, up to its highest
    // CPU) would take 256 MiB: refused before any is built.
    assert_eq!(bad("65536 cores"), ("levels".into(), "65536 CPUs, whose CPU sets would take 256 MiB".into()));
    assert_eq!(counts(&parse("8192 cores x 2 threads")), (1, 1, 8192, 16384));
}

#[test]
fn pools_must_fit_the_memory_given() {
    let err = synthetic::parse("2 sockets x 8 cores, 1GiB per node, hugepages 1GiB:6144").expect_err("6 TiB on 1 GiB");
    assert!(
        matches!(
            err,
            ParseError::Model(ModelError::HugePagesBeyondMemory {
                node: NodeId(0),
                size_bytes: 1073741824,
                pages: 6144,
                memory_bytes: Some(1073741824)
            })
        ),
        "{err:?}"
    );
    // Without memory sizes there is nothing to hold the pools to.
    let t = parse("2 sockets x 8 cores, hugepages 1GiB:6144");
    assert!(t.warnings().contains(&Warning::NoMemoryInfo));
    assert_eq!(t.nodes()[0].hugepages[0].total, 6144);
}

#[test]
fn error_messages_read_well() {
    let err = synthetic::parse("2 sockets x 8 cores, distances 10/x").expect_err("bad");
    assert_eq!(
        err.to_string(),
        "distances: expected 10/12/32 (local/same socket/remote), 10/21, or a matrix such as 10,21;21,10, found `10/x`"
    );
}

#[test]
fn descriptions_are_told_from_paths() {
    assert!(synthetic::looks_synthetic("2 sockets x 8 cores x 2 threads, 64GiB per node"));
    assert!(synthetic::looks_synthetic("16 cores"));
    assert!(!synthetic::looks_synthetic("./hosts/2 sockets.xml"));
    assert!(!synthetic::looks_synthetic("box.xml"));
    assert!(!synthetic::looks_synthetic("/sys"));
    assert!(!synthetic::looks_synthetic("2sockets"));
    let t = read_source("2 sockets x 4 cores, 8GiB per node").expect("read_source takes descriptions");
    assert_eq!(counts(&t), (2, 2, 8, 8));
}

/// The levels a generated description may use, outermost first.
const LEVELS: [&str; 6] = ["sockets", "dies", "nodes", "l3", "cores", "threads"];

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]

    #[test]
    fn arbitrary_text_never_panics(text in "\\PC{0,120}") {
        let _ = synthetic::parse(&text);
        let _ = synthetic::looks_synthetic(&text);
    }

    #[test]
    fn word_salad_never_panics(words in proptest::collection::vec(
        prop_oneof![
            Just("2"), Just("0"), Just("x"), Just("×"), Just("sockets"), Just("nodes"), Just("cores"),
            Just("per"), Just("node"), Just("total"), Just("64GiB"), Just("memory"), Just("hugepages"),
            Just("2MiB:16"), Just("distances"), Just("10/21"), Just("10,21;21,10"), Just(","), Just("+"),
            Just("memory-only"), Just("of"), Just("hbm"), Just("numbering"), Just("linear"), Just("99999999999"),
        ], 0..16)) {
        let _ = synthetic::parse(&words.join(" "));
    }

    /// Any subset of levels with counts 1..=8 (at most five levels, so the
    /// machine stays under 65536 CPUs) parses, and the counts multiply.
    #[test]
    fn generated_descriptions_parse(
        picks in proptest::collection::vec(proptest::option::of(1u64..=8), 6),
        mem_gib in 1u64..=1024,
        sep in prop_oneof![Just(" x "), Just(" × "), Just(" * ")],
    ) {
        let chosen: Vec<(usize, u64)> =
            picks.iter().enumerate().filter_map(|(i, c)| c.map(|c| (i, c))).take(5).collect();
        prop_assume!(!chosen.is_empty());
        let levels: Vec<String> = chosen.iter().map(|&(i, c)| format!("{c} {}", LEVELS[i])).collect();
        let text = format!("{}, {mem_gib}GiB per node", levels.join(sep));
        let t = synthetic::parse(&text).map_err(|e| TestCaseError::fail(format!("{text}: {e}")))?;
        let of = |name: &str| chosen.iter().find(|&&(i, _)| LEVELS[i] == name).map_or(1, |&(_, c)| c) as usize;
        let product = |names: &[&str]| names.iter().map(|n| of(n)).product::<usize>();
        prop_assert_eq!(t.package_count(), of("sockets"));
        // Dies written before nodes hold them; with no nodes level the
        // node sits right under the socket and holds the dies.
        let has_nodes = chosen.iter().any(|&(i, _)| LEVELS[i] == "nodes");
        let nodes = if has_nodes { product(&["sockets", "dies", "nodes"]) } else { of("sockets") };
        prop_assert_eq!(t.nodes().len(), nodes);
        prop_assert_eq!(t.core_count(), product(&["sockets", "dies", "nodes", "l3", "cores"]));
        prop_assert_eq!(t.pu_count(), product(&LEVELS));
        prop_assert_eq!(t.total_memory(), t.nodes().len() as u64 * (mem_gib << 30));
        // Every core's threads are N, N + cores, ... (Linux numbering).
        let cores = t.core_count() as u32;
        for core in t.cores() {
            let first = core.cpus.first().unwrap_or(0);
            let want: CpuSet = (0..of("threads") as u32).map(|k| first + k * cores).collect();
            prop_assert_eq!(&core.cpus, &want);
        }
    }
}
