//! Issue 38 items 2 and 4: a VM without 1:1 pins beside a dedicated one
//! is flagged as `plan --state` counts it (`floating-on-dedicated`), and
//! the joint fix never leaves the set worse: a file whose fix is skipped
//! keeps its CPUs, and a fix that would add an error or warning to the set
//! is not written.

use numaplace_lint::{fix_all, held, lint, parse_file, FixError, FixOptions, Severity, VmFile};
use numaplace_topo::{CpuSet, Topology};

fn host(text: &str) -> Topology {
    numaplace_read::read_source(text).unwrap_or_else(|e| panic!("{text}: {e}"))
}

fn file(name: &str, text: &str) -> VmFile {
    parse_file(name, text.as_bytes()).unwrap_or_else(|e| panic!("{e}"))
}

/// A domain as virt-install writes it: `vcpu` is the `<vcpu>` element,
/// `tune` the `<cputune>` (and `<numatune>`, memory backing) lines.
fn domain(name: &str, vcpu: &str, memory_gib: u64, tune: &str) -> String {
    format!(
        "<domain type='kvm'>\n  <name>{name}</name>\n  <memory unit='GiB'>{memory_gib}</memory>\n  {vcpu}\n{tune}  <os>\n    <type arch='x86_64' machine='pc-q35-6.2'>hvm</type>\n  </os>\n</domain>\n"
    )
}

fn pins(cpus: impl IntoIterator<Item = u32>) -> String {
    let lines: String =
        cpus.into_iter().enumerate().map(|(v, c)| format!("    <vcpupin vcpu='{v}' cpuset='{c}'/>\n")).collect();
    format!("  <cputune>\n{lines}  </cputune>\n")
}

fn rules_of<'a>(findings: &'a [numaplace_lint::Finding], file: &str) -> Vec<&'a str> {
    findings.iter().filter(|f| f.file == file && f.severity >= Severity::Warning).map(|f| f.rule).collect()
}

/// The case: on a 2-CPU host, a domain pinned to CPU 1 and a
/// 2-vCPU domain with no pinning. Both the unpinned VM and the same VM
/// with `cpuset='0-1'` or `placement='auto'` are flagged, on the floating
/// VM, as a warning; and lint's floating CPUs are the ones `plan --state`
/// counts the domain over (`held`).
#[test]
fn an_unpinned_vm_beside_a_pinned_one_is_flagged() {
    let topo = host("1 socket x 2 cores x 1 thread, 8GiB per node");
    let pinned = file("pinned.xml", &domain("pinned", "<vcpu placement='static'>1</vcpu>", 1, &pins([1])));
    for (how, vcpu) in [
        ("no pins", "<vcpu placement='static'>2</vcpu>"),
        ("a wide cpuset", "<vcpu placement='static' cpuset='0-1'>2</vcpu>"),
        ("placement auto", "<vcpu placement='auto'>2</vcpu>"),
    ] {
        let floating = file("floating.xml", &domain("floating", vcpu, 1, ""));
        let found = lint(&[pinned.clone(), floating.clone()], &topo);
        let on: Vec<_> = found.iter().filter(|f| f.rule == "floating-on-dedicated").collect();
        assert_eq!(on.len(), 1, "{how}: {found:#?}");
        assert_eq!(on[0].file, "floating.xml", "{how}");
        assert_eq!(on[0].severity, Severity::Warning, "{how}");
        assert!(on[0].message.contains("CPU 1, dedicated to VM pinned (pinned.xml)"), "{how}: {}", on[0].message);
        assert!(on[0].impact.contains("40-75%"), "{}", on[0].impact);
        // Not an error on top: the overlap of two dedicated VMs is
        // pinning-overlap's, a floating one's is this rule's.
        assert!(!found.iter().any(|f| f.rule == "pinning-overlap"), "{how}: {found:#?}");
        // What plan --state counts: the domain floats over both CPUs.
        let (counted, _) = held(&floating, &topo).expect("held");
        assert!(!counted[0].pinned);
        assert_eq!(counted[0].floating_cpus(), CpuSet::range(0, 1), "{how}");
    }
    // Alone, or beside another floating VM, nothing to say.
    let floating = file("floating.xml", &domain("floating", "<vcpu placement='static'>2</vcpu>", 1, ""));
    assert!(lint(std::slice::from_ref(&floating), &topo).iter().all(|f| f.rule != "floating-on-dedicated"));
}

/// `--fix` takes a floating VM off the dedicated CPUs and keeps it
/// floating (a shared set of CPUs no dedicated VM holds, nor their
/// sibling threads); the set lints clean.
#[test]
fn the_floating_vm_is_narrowed_off_the_dedicated_cpus() {
    let topo = host("1 socket x 4 cores x 2 threads, 16GiB per node");
    // CPUs 0-3 are cores 0-3, 4-7 their sibling threads.
    let mut files = vec![
        file("db.xml", &domain("db", "<vcpu placement='static'>2</vcpu>", 2, &pins([0, 1]))),
        file("web.xml", &domain("web", "<vcpu placement='static'>2</vcpu>", 2, "")),
    ];
    assert_eq!(rules_of(&lint(&files, &topo), "web.xml"), ["floating-on-dedicated"]);
    let report = fix_all(&mut files, &topo, FixOptions::default());
    assert!(report.failed.is_empty(), "{:?}", report.failed);
    assert_eq!(report.fixed.iter().map(|f| f.0).collect::<Vec<_>>(), [1]);
    assert!(files[1].text.contains("<vcpu placement='static' cpuset='2-3,6-7'>2</vcpu>"), "{}", files[1].text);
    let again = lint(&files, &topo);
    assert!(again.iter().all(|f| f.severity < Severity::Warning), "{again:#?}");
}

/// The case: four domains fixed together on a 2 x 18-core host,
/// one of which (160 GiB on 1 GiB pages the host has none of) can only
/// be fixed by a resize. Its fix is skipped, and the others are planned
/// around its CPUs: the fixed set has no pinning-overlap with it, and no
/// error or warning the input set did not have.
#[test]
fn a_skipped_fix_keeps_its_cpus_and_the_set_is_never_worse() {
    let topo = host("2 sockets x 18 cores x 2 threads, 192GiB per node, hugepages 2MiB:0, 1GiB:0 per node");
    let huge = "  <memoryBacking>\n    <hugepages>\n      <page size='1048576' unit='KiB'/>\n    </hugepages>\n  </memoryBacking>\n";
    let numatune = "  <numatune>\n    <memory mode='strict' nodeset='0'/>\n  </numatune>\n";
    let mut files = vec![
        file(
            "db.xml",
            &domain("db", "<vcpu placement='static'>8</vcpu>", 160, &format!("{}{numatune}{huge}", pins(0..8))),
        ),
        // 20 vCPUs, no guest cells: wider than a node.
        file("web.xml", &domain("web", "<vcpu placement='static'>20</vcpu>", 32, "")),
        // On the sibling threads of db's cores 0 and 1.
        file("app.xml", &domain("app", "<vcpu placement='static'>2</vcpu>", 4, &pins([36, 37]))),
        // On db's own CPUs 4 and 5.
        file("cache.xml", &domain("cache", "<vcpu placement='static'>2</vcpu>", 4, &pins([4, 5]))),
    ];
    let input = files.clone();
    let before = lint(&files, &topo);
    assert!(rules_of(&before, "db.xml").contains(&"hugepages-missing"), "{before:#?}");
    assert!(rules_of(&before, "cache.xml").contains(&"pinning-overlap"), "{before:#?}");
    let report = fix_all(&mut files, &topo, FixOptions::default());
    // db cannot exist on this host (1 GiB pages it has none of): named,
    // left as it was, and it keeps its CPUs (issue 47).
    assert!(
        matches!(report.failed.as_slice(), [(0, FixError::CannotExist { .. })]),
        "{:?}",
        report.failed.iter().map(|(i, e)| format!("{i}: {e}")).collect::<Vec<_>>()
    );
    assert_eq!(files[0].text, input[0].text);
    let fixed: Vec<usize> = report.fixed.iter().map(|f| f.0).collect();
    assert_eq!(fixed, [1, 2, 3]);
    let after = lint(&files, &topo);
    assert!(!after.iter().any(|f| f.rule == "pinning-overlap"), "{after:#?}");
    assert!(!after.iter().any(|f| f.rule == "siblings-shared" && f.severity >= Severity::Warning), "{after:#?}");
    let loud = |fs: &[numaplace_lint::Finding]| fs.iter().filter(|f| f.severity >= Severity::Warning).count();
    assert!(loud(&after) < loud(&before), "{after:#?}");
    // No fixed vCPU on db's CPUs 0-7 or their siblings 36-43.
    for (i, text) in &report.fixed {
        for c in (0..8).chain(36..44) {
            assert!(!text.contains(&format!("cpuset='{c}'/>")), "{}: on CPU {c}\n{text}", files[*i].name);
        }
    }
}

/// A fix that would add a finding to the set is not written: a domain on
/// the host (`--state`, never rewritten) floats over CPUs 0-3, so pinning
/// the broken VM 1:1 there would put a dedicated VM under it. Given as a
/// FILE instead, the floating domain is narrowed and both are written.
#[test]
fn a_fix_that_would_add_a_finding_is_not_written() {
    let topo = host("1 socket x 4 cores x 1 thread, 8GiB per node");
    let floating = file("held.xml", &domain("held", "<vcpu placement='static' cpuset='0-3'>2</vcpu>", 1, ""));
    // Two vCPUs on one CPU.
    let broken = file("vm.xml", &domain("vm", "<vcpu placement='static'>2</vcpu>", 1, &pins([0, 0])));
    let mut files = vec![floating.clone(), broken.clone()];
    let report = fix_all(&mut files, &topo, FixOptions { held: 1, ..FixOptions::default() });
    match report.failed.as_slice() {
        [(1, FixError::WouldWorsen(found))] => {
            assert_eq!(found[0].rule, "floating-on-dedicated");
            assert_eq!(found[0].file, "held.xml");
        }
        other => panic!("{:?}", other.iter().map(|(i, e)| format!("{i}: {e}")).collect::<Vec<_>>()),
    }
    assert!(report.fixed.is_empty());
    assert_eq!(files[1].text, broken.text);

    let mut files = vec![floating, broken];
    let report = fix_all(&mut files, &topo, FixOptions::default());
    assert!(report.failed.is_empty(), "{:?}", report.failed.iter().map(|(_, e)| e.to_string()).collect::<Vec<_>>());
    assert_eq!(report.fixed.len(), 2, "{:?}", report.notes);
    let again = lint(&files, &topo);
    assert!(again.iter().all(|f| f.severity < Severity::Warning), "{again:#?}");
}

/// An ESXi `.vmx` and a KVM domain never share a host, so the fixer keeps
/// them in two host states: a `.vmx` whose affinity covers CPUs 0-3 is no
/// load for a libvirt fix, which takes the first CPUs as on an empty host.
#[test]
fn esxi_and_kvm_files_are_fixed_in_separate_host_states() {
    let topo = host("1 socket x 8 cores x 1 thread, 16GiB per node");
    let vmx = file(
        "esxi.vmx",
        "displayName = \"esxi\"\nnumvcpus = \"2\"\nmemSize = \"1024\"\nsched.cpu.affinity = \"0-3\"\n",
    );
    assert!(lint(std::slice::from_ref(&vmx), &topo).iter().all(|f| f.severity < Severity::Warning));
    let broken = file("vm.xml", &domain("vm", "<vcpu placement='static'>2</vcpu>", 1, &pins([0, 0])));
    let mut files = vec![vmx, broken];
    let report = fix_all(&mut files, &topo, FixOptions::default());
    assert!(report.failed.is_empty(), "{:?}", report.failed.iter().map(|(_, e)| e.to_string()).collect::<Vec<_>>());
    let text = &files[1].text;
    assert!(
        text.contains("<vcpupin vcpu='0' cpuset='0'/>") && text.contains("<vcpupin vcpu='1' cpuset='1'/>"),
        "{text}"
    );
    assert!(report.notes.iter().all(|(_, n)| !n.contains("esxi")), "{:?}", report.notes);
}

/// With a shared pool declared (`--shared-cpus`), a floating VM is
/// narrowed into the pool, where floating vCPUs belong.
#[test]
fn the_floating_vm_is_narrowed_into_the_shared_pool() {
    let topo = host("1 socket x 8 cores x 1 thread, 16GiB per node");
    let reserved = numaplace_plan::Reservations { shared_cpus: CpuSet::range(4, 7), ..Default::default() };
    let mut files = vec![
        file("db.xml", &domain("db", "<vcpu placement='static'>2</vcpu>", 2, &pins([0, 1]))),
        file("web.xml", &domain("web", "<vcpu placement='static'>2</vcpu>", 2, "")),
    ];
    let report = numaplace_lint::fix_all_reserved(&mut files, &topo, &reserved, FixOptions::default());
    assert!(report.failed.is_empty(), "{:?}", report.failed);
    assert!(files[1].text.contains("<vcpu placement='static' cpuset='4-7'>2</vcpu>"), "{}", files[1].text);
    let again = numaplace_lint::lint_reserved(&files, &topo, &reserved);
    assert!(again.iter().all(|f| f.severity < Severity::Warning), "{again:#?}");
}

/// Reservations the host cannot hold (here a CPU it has offline) are never
/// dropped: the fix is not written, with the reason, rather than planned
/// as if nothing were reserved (which put a vCPU on a reserved CPU).
#[test]
fn reservations_the_host_cannot_hold_stop_the_fix_instead_of_being_dropped() {
    let topo = numaplace_read::read_source(&format!(
        "{}/../../fixtures/topologies/hwloc/linux/16em64t-4s2c2t-offlines.tar.bz2",
        env!("CARGO_MANIFEST_DIR")
    ))
    .expect("host");
    assert!(!topo.online_cpus().contains(2), "CPU 2 is offline on this host");
    let mut files = vec![
        file("a.xml", &domain("a", "<vcpu>1</vcpu>", 1, &pins([0]))),
        file("b.xml", &domain("b", "<vcpu>1</vcpu>", 1, &pins([0]))),
    ];
    let before: Vec<String> = files.iter().map(|f| f.text.clone()).collect();
    let reserved = numaplace_plan::Reservations { cpus: "0-2".parse().expect("list"), ..Default::default() };
    let report = numaplace_lint::fix_all_reserved(&mut files, &topo, &reserved, FixOptions::default());
    assert!(report.fixed.is_empty(), "{:?}", report.fixed);
    assert!(
        report.failed.iter().any(|(_, e)| matches!(e, FixError::State(m) if m.contains("reservations"))),
        "{:?}",
        report.failed
    );
    assert_eq!(files.iter().map(|f| f.text.clone()).collect::<Vec<_>>(), before);
}

/// A floating VM whose CPUs are only the emulator's own CPU of a VM
/// numaplace wrote (one more dedicated CPU, `emulator=isolate`) runs on
/// a CPU `apply` counts as held: lint flags it as it flags one on the
/// pins, naming the holder's `<vcpu cpuset>` line.
#[test]
fn a_floating_vm_on_a_kept_emulator_cpu_is_flagged() {
    let topo = host("1 socket x 4 cores x 1 thread, 8GiB per node");
    let mut rt = numaplace_plan::Request::new("rt", 2, 1 << 30);
    rt.emulator = numaplace_plan::EmulatorPlacement::Isolate;
    let state = numaplace_plan::HostState::new(&topo);
    let placed = numaplace_plan::plan(&topo, &state, &rt).expect("placed").placement;
    let emu = placed.emulator.first().expect("one emulator CPU");
    assert!(!placed.vcpus.iter().any(|v| v.pu == emu), "{placed:?}");
    let opts = numaplace_libvirt::domain::LibvirtOptions::default().for_host(&topo);
    let written = file("rt.xml", &numaplace_libvirt::domain::domain_xml(&placed, &opts));
    let vcpu = format!("<vcpu placement='static' cpuset='{emu}'>1</vcpu>");
    let floating = file("floating.xml", &domain("floating", &vcpu, 1, ""));
    let found = lint(&[written, floating], &topo);
    let on: Vec<_> = found.iter().filter(|f| f.rule == "floating-on-dedicated").collect();
    assert_eq!(on.len(), 1, "{found:#?}");
    assert_eq!(on[0].file, "floating.xml");
    assert!(on[0].message.contains(&format!("CPU {emu}")), "{}", on[0].message);
    assert!(on[0].evidence.iter().any(|e| e.file == "rt.xml"), "{:#?}", on[0].evidence);
}
