//! Issue 47: `lint --fix` on a whole host gives the same fix whatever the
//! order of the files, writes when the set is better as a whole, names a
//! VM that cannot exist on the host (and never lets it hold room against
//! the others), and reports a collision on the VM that breaks the host's
//! rules.

use numaplace_lint::{
    fix_all, fix_all_reserved, lint, lint_held, lint_reserved, parse_file, FixError, FixOptions, FixReport, Severity,
    VmFile,
};
use numaplace_plan::Reservations;
use numaplace_topo::Topology;

fn host(text: &str) -> Topology {
    numaplace_read::read_source(text).unwrap_or_else(|e| panic!("{text}: {e}"))
}

fn fixture_host(rel: &str) -> Topology {
    host(&format!("{}/../../fixtures/topologies/{rel}", env!("CARGO_MANIFEST_DIR")))
}

fn file(name: &str, text: &str) -> VmFile {
    parse_file(name, text.as_bytes()).unwrap_or_else(|e| panic!("{e}"))
}

fn data(name: &str) -> VmFile {
    let path = format!("{}/tests/data/{name}", env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    file(name.rsplit('/').next().unwrap_or(name), &text)
}

/// Every order of `0..n` (Heap's algorithm).
fn permutations(n: usize) -> Vec<Vec<usize>> {
    fn go(k: usize, a: &mut Vec<usize>, out: &mut Vec<Vec<usize>>) {
        if k <= 1 {
            out.push(a.clone());
            return;
        }
        for i in 0..k {
            go(k - 1, a, out);
            let j = if k.is_multiple_of(2) { i } else { 0 };
            a.swap(j, k - 1);
        }
    }
    let mut out = Vec::new();
    go(n, &mut (0..n).collect(), &mut out);
    out
}

/// What a run gives each file, by name: its text after the fix, its
/// notes, why no fix was written; and the set's trade. Byte for byte what
/// the command writes and says for that file.
fn outcome(files: &[VmFile], report: &FixReport) -> Vec<(String, String, Vec<String>, Option<String>)> {
    let mut out: Vec<_> = files
        .iter()
        .enumerate()
        .map(|(i, f)| {
            let notes = report.notes.iter().filter(|n| n.0 == i).map(|n| n.1.clone()).collect();
            let failed = report.failed.iter().find(|e| e.0 == i).map(|e| e.1.to_string());
            (f.name.clone(), f.text.clone(), notes, failed)
        })
        .collect();
    out.sort();
    out
}

fn loud(found: &[numaplace_lint::Finding], file: &str) -> Vec<&'static str> {
    found.iter().filter(|f| f.file == file && f.severity >= Severity::Warning).map(|f| f.rule).collect()
}

/// The four files on a real 2 x 18-core host (Xeon E5-2695 v4,
/// 2 x 125.5 GiB, no 1 GiB page reserved): a VM pinned across the two
/// nodes, 3 guest cells on 2 nodes, CPU hot-add on a 24-vCPU VM, and a
/// 160 GiB VM wanting 1 GiB pages the host lacks. In each of the 24
/// orders the three fixable files are fixed, the fourth is named as too
/// large for the host and left as it is, and the outputs are the same
/// bytes.
#[test]
fn the_four_file_set_fixes_its_three_fixable_files_in_every_order() {
    let topo = fixture_host("mpibind/cts1-pascal.xml");
    let names = ["four/app-across-nodes.xml", "four/batch-3cells.xml", "four/erp-hotadd.xml", "four/db-hugepages.xml"];
    let input: Vec<VmFile> = names.iter().map(|n| data(n)).collect();
    let before = lint(&input, &topo);
    assert!(loud(&before, "app-across-nodes.xml").contains(&"guest-cells-missing"), "{before:#?}");
    assert!(loud(&before, "batch-3cells.xml").contains(&"guest-cells-uneven"), "{before:#?}");
    assert!(loud(&before, "erp-hotadd.xml").contains(&"cpu-hotadd-wide"), "{before:#?}");
    assert!(loud(&before, "db-hugepages.xml").contains(&"vm-exceeds-host"), "{before:#?}");
    let mut first: Option<Vec<_>> = None;
    for order in permutations(input.len()) {
        let mut files: Vec<VmFile> = order.iter().map(|&i| input[i].clone()).collect();
        let report = fix_all(&mut files, &topo, FixOptions::default());
        let fixed: Vec<&str> = report.fixed.iter().map(|(i, _)| files[*i].name.as_str()).collect();
        let mut fixed_sorted = fixed.clone();
        fixed_sorted.sort_unstable();
        assert_eq!(
            fixed_sorted,
            ["app-across-nodes.xml", "batch-3cells.xml", "erp-hotadd.xml"],
            "order {order:?}: {:?}",
            report.failed.iter().map(|(i, e)| format!("{}: {e}", files[*i].name)).collect::<Vec<_>>()
        );
        match report.failed.as_slice() {
            [(i, FixError::CannotExist { vm, .. })] => {
                assert_eq!((files[*i].name.as_str(), vm.as_str()), ("db-hugepages.xml", "db-hugepages"));
            }
            other => panic!("order {order:?}: {:?}", other.iter().map(|(_, e)| e.to_string()).collect::<Vec<_>>()),
        }
        let after = lint(&files, &topo);
        for f in ["app-across-nodes.xml", "batch-3cells.xml", "erp-hotadd.xml"] {
            assert!(
                !loud(&after, f).iter().any(|r| loud(&before, f).contains(r) && *r != "smt-contention"),
                "{after:#?}"
            );
        }
        assert!(
            after.iter().filter(|f| f.severity == Severity::Error).count()
                < before.iter().filter(|f| f.severity == Severity::Error).count()
        );
        let got = outcome(&files, &report);
        match &first {
            None => first = Some(got),
            Some(want) => assert_eq!(&got, want, "order {order:?} gives other outputs"),
        }
    }
}

/// Issue 47 item 6: two identical 200 GiB `.vmx` VMs on a 187 GiB host
/// get the same answer: each is told it is bigger than the host, and
/// neither is "fixed".
#[test]
fn two_identical_vms_larger_than_the_host_get_the_same_answer() {
    let topo = host("2 sockets x 12 cores x 2 threads, 93.5GiB per node");
    let vmx = "displayName = \"sap-hana\"\nnumvcpus = \"16\"\nmemSize = \"204800\"\nvcpu.hotadd = \"TRUE\"\n";
    let input = vec![file("a/sap-hana.vmx", vmx), file("b/sap-hana.vmx", vmx)];
    let found = lint(&input, &topo);
    for name in ["a/sap-hana.vmx", "b/sap-hana.vmx"] {
        let f = found.iter().find(|f| f.file == name && f.rule == "vm-exceeds-host").expect("named as too large");
        assert_eq!(f.severity, Severity::Error);
        assert!(f.message.contains("bigger than this host"), "{}", f.message);
        assert!(f.message.contains("200 GiB"), "{}", f.message);
    }
    for order in [[0, 1], [1, 0]] {
        let mut files: Vec<VmFile> = order.iter().map(|&i| input[i].clone()).collect();
        let report = fix_all(&mut files, &topo, FixOptions::default());
        assert!(report.fixed.is_empty(), "{:?}", report.fixed);
        assert_eq!(report.failed.len(), 2);
        for (_, e) in &report.failed {
            assert!(matches!(e, FixError::CannotExist { .. }), "{e}");
            assert!(e.to_string().contains("cannot run on this host at all"), "{e}");
        }
        assert!(files.iter().all(|f| f.text == vmx));
    }
}

/// Issue 47 item 3: a VM larger than the host holds no memory against
/// the others' fixes. A 300 GiB VM on a 2 x 93.5 GiB host beside a VM
/// whose memory needs both nodes: the second is fixed.
#[test]
fn a_vm_larger_than_the_host_holds_no_room_against_the_others() {
    let topo = host("2 sockets x 8 cores x 1 thread, 93.5GiB per node");
    let domain = |name: &str, gib: u64, vcpu: &str| {
        format!(
            "<domain type='kvm'>\n  <name>{name}</name>\n  <memory unit='GiB'>{gib}</memory>\n  {vcpu}\n  <os>\n    <type arch='x86_64'>hvm</type>\n  </os>\n</domain>\n"
        )
    };
    let mut files = vec![
        file("huge.xml", &domain("huge", 300, "<vcpu placement='static'>4</vcpu>")),
        file("wide.xml", &domain("wide", 120, "<vcpu placement='static' current='2'>8</vcpu>")),
    ];
    let report = fix_all(&mut files, &topo, FixOptions::default());
    assert_eq!(report.fixed.iter().map(|f| f.0).collect::<Vec<_>>(), [1], "{:?}", report.failed);
    assert!(matches!(report.failed.as_slice(), [(0, FixError::CannotExist { .. })]));
}

/// Every "no room" names who holds the room.
#[test]
fn no_room_names_who_holds_it() {
    let topo = host("1 socket x 4 cores x 1 thread, 8GiB per node");
    let domain = |name: &str, pins: &[u32]| {
        let lines: String =
            pins.iter().enumerate().map(|(v, c)| format!("    <vcpupin vcpu='{v}' cpuset='{c}'/>\n")).collect();
        format!(
            "<domain type='kvm'>\n  <name>{name}</name>\n  <memory unit='GiB'>1</memory>\n  <vcpu placement='static'>{}</vcpu>\n  <cputune>\n{lines}  </cputune>\n  <os>\n    <type arch='x86_64'>hvm</type>\n  </os>\n</domain>\n",
            pins.len()
        )
    };
    // `web` holds CPUs 0-2; `db` has two vCPUs on CPU 3 and needs two
    // cores: only one is free.
    let mut files = vec![file("web.xml", &domain("web", &[0, 1, 2])), file("db.xml", &domain("db", &[3, 3]))];
    let report = fix_all(&mut files, &topo, FixOptions::default());
    match report.failed.as_slice() {
        [(1, e @ FixError::NoPlacement { held_by, .. })] => {
            assert_eq!(held_by.iter().map(|h| (h.vm.as_str(), h.cpus)).collect::<Vec<_>>(), [("web", 3)]);
            assert!(e.to_string().contains("the room is held by web (3 CPUs"), "{e}");
        }
        other => panic!("{:?}", other.iter().map(|(i, e)| format!("{i}: {e}")).collect::<Vec<_>>()),
    }
}

fn pinned(name: &str, cpus: &[u32]) -> String {
    let lines: String =
        cpus.iter().enumerate().map(|(v, c)| format!("    <vcpupin vcpu='{v}' cpuset='{c}'/>\n")).collect();
    format!(
        "<domain type='kvm'>\n  <name>{name}</name>\n  <memory unit='GiB'>2</memory>\n  <vcpu placement='static'>{}</vcpu>\n  <cputune>\n{lines}  </cputune>\n  <os>\n    <type arch='x86_64'>hvm</type>\n  </os>\n</domain>\n",
        cpus.len()
    )
}

/// Issue 47 item 4: two dedicated VMs on the same CPUs are reported on the
/// same one whatever the order of the files (nothing else deciding: the
/// later by name), the message says why, and the fix moves that one.
#[test]
fn an_overlap_is_reported_on_the_intruder_whatever_the_order() {
    let topo = host("1 socket x 8 cores x 1 thread, 16GiB per node");
    let a = file("a.xml", &pinned("zeta", &[0, 1]));
    let b = file("b.xml", &pinned("alpha", &[0, 1]));
    for files in [vec![a.clone(), b.clone()], vec![b.clone(), a.clone()]] {
        let found = lint(&files, &topo);
        let overlaps: Vec<_> = found.iter().filter(|f| f.rule == "pinning-overlap").collect();
        assert_eq!(overlaps.len(), 1, "{found:#?}");
        assert_eq!(overlaps[0].vm, "zeta");
        assert!(overlaps[0].message.contains("nothing else decides"), "{}", overlaps[0].message);
        let mut fixed = files.clone();
        let report = fix_all(&mut fixed, &topo, FixOptions::default());
        let moved: Vec<&str> = report.fixed.iter().map(|(i, _)| fixed[*i].name.as_str()).collect();
        assert_eq!(moved, ["a.xml"]);
        assert_eq!(fixed.iter().find(|f| f.name == "b.xml").map(|f| &f.text), Some(&b.text));
    }
    // A dedicated VM in the host's shared pool breaks its rules: two VMs
    // on the two threads of a core are its finding, whatever the names.
    let topo = host("1 socket x 4 cores x 2 threads, 16GiB per node");
    let pool = Reservations { shared_cpus: "0".parse().expect("list"), ..Reservations::default() };
    let inside = file("in.xml", &pinned("aaa", &[0]));
    let outside = file("out.xml", &pinned("zzz", &[4]));
    for files in [vec![outside.clone(), inside.clone()], vec![inside.clone(), outside.clone()]] {
        let found = lint_reserved(&files, &topo, &pool);
        let shared: Vec<_> = found.iter().filter(|f| f.rule == "siblings-shared").collect();
        assert_eq!(shared.len(), 1, "{found:#?}");
        assert_eq!(shared[0].vm, "aaa", "{found:#?}");
        assert!(shared[0].message.contains("CPUs the host keeps"), "{}", shared[0].message);
    }
}

/// A domain already on the host (`--state`) is the incumbent: a FILE on
/// its CPUs is the intruder, though larger, and the fix moves the FILE.
#[test]
fn a_file_on_a_host_domains_cpus_is_the_intruder() {
    let topo = host("1 socket x 8 cores x 1 thread, 16GiB per node");
    let on_host = file("small.xml", &pinned("small", &[0, 1]));
    let new = file("big.xml", &pinned("big", &[0, 1, 2, 3]));
    let files = vec![on_host.clone(), new];
    let found = lint_held(&files, 1, &topo, &Reservations::default());
    let overlap: Vec<_> = found.iter().filter(|f| f.rule == "pinning-overlap").collect();
    assert_eq!(overlap.len(), 1, "{found:#?}");
    assert_eq!(overlap[0].vm, "big");
    assert!(overlap[0].message.contains("small is already on the host"), "{}", overlap[0].message);
    let mut fixed = files.clone();
    let report = fix_all(&mut fixed, &topo, FixOptions { held: 1, ..FixOptions::default() });
    assert_eq!(report.fixed.iter().map(|f| f.0).collect::<Vec<_>>(), [1], "{:?}", report.failed);
    assert_eq!(fixed[0].text, on_host.text);
    // Without --state the smaller is the one moved.
    let found = lint(&files, &topo);
    assert_eq!(found.iter().find(|f| f.rule == "pinning-overlap").map(|f| f.vm.as_str()), Some("small"));
}

/// Issue 47 item 2: a fix that removes an error is written though it adds
/// a warning the set cannot avoid, and says what it traded; `--strict`
/// refuses it. A domain of the host (`--state`, never rewritten) floats
/// over every CPU of a 4-CPU host; the FILE is pinned to CPUs the host
/// lacks (an error). Pinned 1:1 where it can be, it puts a dedicated VM
/// under the floating one: a warning, on the host's domain.
#[test]
fn a_fix_that_removes_errors_is_written_though_it_adds_a_warning() {
    let topo = host("1 socket x 4 cores x 1 thread, 8GiB per node");
    let floating = file(
        "held.xml",
        "<domain type='kvm'>\n  <name>held</name>\n  <memory unit='GiB'>1</memory>\n  <vcpu placement='static' cpuset='0-3'>2</vcpu>\n</domain>\n",
    );
    let input = vec![floating, file("vm.xml", &pinned("vm", &[8, 9]))];
    let before = lint(&input, &topo);
    assert_eq!(loud(&before, "vm.xml"), ["unknown-reference"], "{before:#?}");
    let mut files = input.clone();
    let report = fix_all(&mut files, &topo, FixOptions { held: 1, ..FixOptions::default() });
    assert_eq!(report.fixed.iter().map(|f| f.0).collect::<Vec<_>>(), [1], "{:?}", report.failed);
    let trade = report.trade.expect("a trade");
    assert_eq!((trade.errors_fixed, trade.added.len()), (1, 1), "{trade}");
    assert_eq!((trade.added[0].rule, trade.added[0].file.as_str()), ("floating-on-dedicated", "held.xml"));
    assert!(
        trade.to_string().starts_with("fixes 1 error; adds 1 warning: floating-on-dedicated on held (held.xml)"),
        "{trade}"
    );
    let after = lint(&files, &topo);
    assert!(after.iter().all(|f| f.severity < Severity::Error), "{after:#?}");
    // --strict: nothing the input lacked, so nothing is written.
    let mut strict = input.clone();
    let report = fix_all(&mut strict, &topo, FixOptions { held: 1, strict: true, ..FixOptions::default() });
    assert!(report.fixed.is_empty(), "strict wrote {:?}", report.fixed);
    assert!(matches!(report.failed.as_slice(), [(1, FixError::WouldWorsen(_))]), "{:?}", report.failed);
    assert_eq!(strict[1].text, input[1].text);
}

/// With a shared pool declared, an unpinned VM is narrowed into it.
#[test]
fn an_unpinned_vm_floating_over_reserved_cpus_is_narrowed_into_the_pool() {
    let topo = host("1 socket x 8 cores x 1 thread, 16GiB per node");
    let res = Reservations {
        cpus: "0".parse().expect("list"),
        shared_cpus: "4-7".parse().expect("list"),
        ..Default::default()
    };
    let text = "<domain type='kvm'>\n  <name>web</name>\n  <memory unit='GiB'>2</memory>\n  <vcpu placement='static'>2</vcpu>\n  <os>\n    <type arch='x86_64'>hvm</type>\n  </os>\n</domain>\n";
    let mut files = vec![file("web.xml", text)];
    assert_eq!(loud(&lint_reserved(&files, &topo, &res), "web.xml"), ["floating-over-reserved"]);
    let report = fix_all_reserved(&mut files, &topo, &res, FixOptions::default());
    assert_eq!(report.fixed.len(), 1, "{:?}", report.failed);
    assert!(files[0].text.contains("cpuset='4-7'"), "{}", files[0].text);
    assert!(loud(&lint_reserved(&files, &topo, &res), "web.xml").is_empty());
}
