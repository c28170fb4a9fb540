//! Issue 47 item 5: lint finds everything `numaplace apply` refuses about
//! a domain's own content. apply refuses a placement that uses CPUs the
//! host's reservations keep from it (`ApplyError::Reserved`, the
//! planner's `Reservations::conflict`): each kind of conflict has a lint
//! rule, and this test feeds each refusal's input (the domain, as a host
//! state reads it into the placement apply checks) to lint.
//!
//! apply's other refusals are about plans, not domain files: a base given
//! for a domain already defined (`BaseForExisting`), a plan whose sizes
//! differ from the domain's (`Sizes`), a stale plan (issue 45); a domain
//! that does not read (`Xml`) is an unreadable FILE for lint too (exit 2).

use numaplace_lint::{held, lint_reserved, parse_file, Severity, VmFile};
use numaplace_plan::{ReservationConflict, Reservations};
use numaplace_topo::Topology;

fn topo() -> Topology {
    numaplace_read::read_source("2 sockets x 12 cores x 2 threads, 128GiB per node").expect("host")
}

fn domain(name: &str, vcpu: &str, tune: &str) -> VmFile {
    let text = format!(
        "<domain type='kvm'>\n  <name>{name}</name>\n  <memory unit='GiB'>4</memory>\n  {vcpu}\n{tune}  <os>\n    <type arch='x86_64'>hvm</type>\n  </os>\n</domain>\n"
    );
    parse_file(&format!("{name}.xml"), text.as_bytes()).expect("domain")
}

fn pins(cpus: &[u32]) -> String {
    let lines: String =
        cpus.iter().enumerate().map(|(v, c)| format!("    <vcpupin vcpu='{v}' cpuset='{c}'/>\n")).collect();
    format!("  <cputune>\n{lines}  </cputune>\n")
}

/// The rule that reports a refusal, for a VM with or without any CPU
/// restriction.
fn rule_for(conflict: &ReservationConflict) -> &'static str {
    match conflict {
        ReservationConflict::ReservedCpu { vcpu: Some(_), .. } => "reserved-cpus",
        ReservationConflict::ReservedCpu { vcpu: None, .. } => "floating-over-reserved|reserved-cpus",
        ReservationConflict::SharedPool { .. } => "dedicated-in-shared-pool",
    }
}

/// What apply would refuse for this domain on a host with these
/// reservations: the conflict of the placement a host state reads it as.
fn refusal(file: &VmFile, topo: &Topology, res: &Reservations) -> Option<ReservationConflict> {
    let (held, _) = held(file, topo).expect("a domain");
    held.iter().find_map(|h| res.conflict(&h.placement))
}

fn errors_or_warnings(file: &VmFile, topo: &Topology, res: &Reservations) -> Vec<&'static str> {
    lint_reserved(std::slice::from_ref(file), topo, res)
        .into_iter()
        .filter(|f| f.severity >= Severity::Warning)
        .map(|f| f.rule)
        .collect()
}

/// One input per refusal, each found by its rule.
#[test]
fn each_refusal_of_apply_is_a_lint_finding() {
    let topo = topo();
    let res = Reservations {
        cpus: "0,24".parse().expect("list"),
        shared_cpus: "1-3,25-27".parse().expect("list"),
        ..Default::default()
    };
    let cases = [
        // A vCPU pinned on a reserved CPU.
        (domain("on-reserved", "<vcpu placement='static'>2</vcpu>", &pins(&[0, 4])), "reserved-cpus"),
        // A VM pinned 1:1 into the shared pool.
        (domain("in-pool", "<vcpu placement='static'>2</vcpu>", &pins(&[1, 2])), "dedicated-in-shared-pool"),
        // An unpinned VM floating over the reserved CPUs of a host with a
        // shared pool (Nova's cpu_shared_set rule).
        (domain("unpinned", "<vcpu placement='static'>2</vcpu>", ""), "floating-over-reserved"),
        // A floating VM whose cpuset takes in a reserved CPU.
        (domain("wide", "<vcpu placement='static' cpuset='0-5'>2</vcpu>", ""), "reserved-cpus"),
    ];
    for (file, rule) in &cases {
        let refused = refusal(file, &topo, &res);
        assert!(refused.is_some(), "{}: apply would not refuse it", file.name);
        let found = errors_or_warnings(file, &topo, &res);
        assert!(found.contains(rule), "{}: apply refuses it ({refused:?}) and lint says {found:?}", file.name);
    }
    // The same domains on a host that reserves nothing: nothing refused,
    // nothing found.
    for (file, rule) in &cases {
        assert_eq!(refusal(file, &topo, &Reservations::default()), None);
        assert!(!errors_or_warnings(file, &topo, &Reservations::default()).contains(rule), "{}", file.name);
    }
}

/// Over every libvirt fixture and a few host profiles: whenever apply
/// would refuse the domain, lint has the matching finding.
#[test]
fn lint_finds_every_refusal_over_the_fixtures() {
    let topo = topo();
    let dir = format!("{}/tests/data", env!("CARGO_MANIFEST_DIR"));
    let mut files: Vec<VmFile> = Vec::new();
    for entry in std::fs::read_dir(&dir).expect("fixtures") {
        let path = entry.expect("entry").path();
        if path.extension().is_some_and(|e| e == "xml") {
            let text = std::fs::read(&path).expect("read");
            files.push(parse_file(&path.display().to_string(), &text).expect("fixture parses"));
        }
    }
    files.push(domain("unpinned", "<vcpu placement='static'>4</vcpu>", ""));
    let profiles = [
        Reservations { cpus: "0".parse().expect("list"), ..Default::default() },
        Reservations { shared_cpus: "0-5,24-29".parse().expect("list"), ..Default::default() },
        Reservations {
            cpus: "0,24".parse().expect("list"),
            shared_cpus: "12-17,36-41".parse().expect("list"),
            ..Default::default()
        },
    ];
    let mut refused = 0;
    for res in &profiles {
        for file in &files {
            let Some(conflict) = refusal(file, &topo, res) else { continue };
            // An unpinned VM without a shared pool floats over the whole
            // host by definition: apply narrows it, and refuses nothing of
            // a domain's own content there.
            if matches!(conflict, ReservationConflict::ReservedCpu { vcpu: None, .. }) && res.shared_cpus.is_empty() {
                continue;
            }
            refused += 1;
            let found = errors_or_warnings(file, &topo, res);
            let want = rule_for(&conflict);
            assert!(
                want.split('|').any(|r| found.contains(&r)),
                "{}: apply refuses it ({conflict}) and lint says {found:?}",
                file.name
            );
        }
    }
    assert!(refused >= 5, "too few refusals exercised: {refused}");
}
