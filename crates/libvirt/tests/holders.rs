//! The one map of CPU holders (`numaplace_plan::CpuMap`) built through
//! each path that reads one: the planner's host state, the libvirt edge's
//! reading of the same VMs written as domains (into a host state, and
//! into apply's check), and emit's picture and text. They must agree on
//! every CPU, above all on an emulator's own CPU and on the idle siblings
//! a VM keeps, where three maps once disagreed.

#[path = "../../emit/tests/common/mod.rs"]
mod common;

use common::host_2n4c2t;
use numaplace_libvirt::check::{cpu_map, iothreads_of, Holder, HostFacts};
use numaplace_libvirt::domain::{domain_xml, read, LibvirtOptions};
use numaplace_plan::{
    plan, CpuMap, CpuMode, EmulatorPlacement, HeldAs, HostState, Placement, Request, Reservations, SmtPolicy,
};
use numaplace_topo::{CpuSet, Topology};

const GIB: u64 = 1 << 30;

/// Every (CPU, VM, what) of a map, sorted: the map's content whatever
/// order its VMs were added in.
fn entries(map: &CpuMap) -> Vec<(u32, String, HeldAs)> {
    let mut out: Vec<(u32, String, HeldAs)> =
        map.iter().flat_map(|(pu, on)| on.iter().map(move |h| (pu, h.vm.clone(), h.what))).collect();
    out.sort();
    out
}

/// The host with CPU 0 reserved, and the planner's state after three VMs:
/// `iso` (smt isolate with its emulator on a CPU of its own: whole
/// cores, the siblings kept idle), `rt` (its emulator isolated on one
/// more CPU) and `web` (shared, floating).
fn planned(topo: &Topology) -> (Reservations, HostState) {
    let reserved = Reservations { cpus: "0".parse().expect("set"), ..Reservations::default() };
    let mut state = HostState::with_reservations(topo, reserved.clone()).expect("state");
    let mut iso = Request::new("iso", 2, GIB);
    iso.smt = SmtPolicy::Isolate;
    iso.emulator = EmulatorPlacement::Isolate;
    let mut rt = Request::new("rt", 2, GIB);
    rt.emulator = EmulatorPlacement::Isolate;
    let mut web = Request::new("web", 2, GIB);
    web.cpu_mode = CpuMode::Shared;
    for r in [iso, rt, web] {
        let d = plan(topo, &state, &r).unwrap_or_else(|e| panic!("{}: {e}", r.name));
        state.place(&d.placement).expect("records");
    }
    (reserved, state)
}

/// Each placement as numaplace writes its domain, read back as libvirt
/// would give it: (the domain's XML, what `held` reads of it).
fn written(topo: &Topology, placements: &[std::sync::Arc<Placement>]) -> Vec<(String, numaplace_libvirt::Held)> {
    let opts = LibvirtOptions::default().for_host(topo);
    placements
        .iter()
        .map(|p| {
            let xml = domain_xml(p, &opts);
            let definition = read(&p.vm, &xml).unwrap_or_else(|e| panic!("{}: {e}", p.vm));
            let (held, warnings) = numaplace_libvirt::held(&definition, &format!("libvirt:{}", p.vm), topo);
            assert!(warnings.is_empty(), "{}: {warnings:?}", p.vm);
            (xml, held)
        })
        .collect()
}

#[test]
fn the_planner_the_libvirt_edge_and_emit_agree_on_who_holds_each_cpu() {
    let topo = host_2n4c2t();
    let (reserved, state) = planned(&topo);
    let iso = state.placement("iso").expect("iso placed").clone();
    let rt = state.placement("rt").expect("rt placed").clone();
    // The cases the maps disagreed on are in the plan: an emulator on a
    // CPU of its own, and siblings kept idle.
    let iso_pins: CpuSet = iso.vcpus.iter().map(|v| v.pu).collect();
    let iso_idle = iso.cpuset.difference(&iso_pins).difference(&iso.emulator);
    assert_eq!((iso.emulator.len(), iso_idle.len()), (1, 3), "{iso:?}");
    assert_eq!(rt.emulator.len(), 1, "{rt:?}");
    let rt_emu = rt.emulator.first().expect("one");
    assert!(rt.cpuset.contains(rt_emu) && !rt.vcpus.iter().any(|v| v.pu == rt_emu), "{rt:?}");

    // 1. The planner's state.
    let planned_map = state.cpu_map();
    let on = |map: &CpuMap, pu: u32, vm: &str| map.on(pu).iter().find(|h| h.vm == vm).map(|h| h.what);
    assert_eq!(on(&planned_map, rt_emu, "rt"), Some(HeldAs::Emulator));
    assert_eq!(on(&planned_map, iso.emulator.first().expect("one"), "iso"), Some(HeldAs::Emulator));
    for pu in iso_idle.iter() {
        assert_eq!(on(&planned_map, pu, "iso"), Some(HeldAs::Idle), "CPU {pu}");
    }
    assert_eq!(planned_map.host(), &reserved.cpus);

    // 2. The libvirt edge: the same VMs written as domains and read back,
    // into a host state (what `plan --state libvirt` plans around) ...
    let read_back = written(&topo, state.placements());
    let helds = read_back.iter().map(|(_, h)| h.clone()).collect();
    let live = numaplace_libvirt::host_state(&topo, reserved.clone(), helds).expect("state");
    assert!(live.warnings.is_empty(), "{:?}", live.warnings);
    let live_map = live.state.cpu_map();
    assert_eq!(entries(&live_map), entries(&planned_map), "libvirt's host state");
    assert_eq!(live.state.taken_pus(), state.taken_pus());
    assert_eq!(live.state.cpu_holders(), state.cpu_holders());

    // ... and into apply's check, which knows no floating vCPU's CPU (it
    // holds none): every CPU held agrees, as what.
    let holders: Vec<Holder> = read_back.iter().map(|(xml, h)| Holder::of(h, true, iothreads_of(xml))).collect();
    let facts = HostFacts {
        cpus: topo.online_cpus(),
        reserved: reserved.cpus.clone(),
        memory: vec![(0, 16 * GIB), (1, 16 * GIB)],
        devices: Vec::new(),
    };
    let check_map = cpu_map(&holders, &[], &facts);
    let held_only =
        |map: &CpuMap| -> Vec<(u32, String, HeldAs)> { entries(map).into_iter().filter(|e| e.2.holds()).collect() };
    assert_eq!(held_only(&check_map), held_only(&planned_map), "apply's check");
    assert_eq!(check_map.held(), planned_map.held());
    let taken = numaplace_libvirt::check::taken(&holders, &[], &facts);
    assert_eq!(taken, state.taken_pus().union(&reserved.cpus), "what apply narrows floating domains off");

    // 3. emit: the picture's holders and the text's host map say the same
    // of the planner's state and of the state read back.
    let svg = numaplace_emit::svg::holders(&state);
    assert_eq!(svg, numaplace_emit::svg::holders(&live.state));
    assert_eq!(svg.get(&rt_emu), Some(&vec![("rt".to_string(), "emu".to_string())]));
    let text = numaplace_emit::plan_text::host_map_text(&topo, &state);
    assert_eq!(text, numaplace_emit::plan_text::host_map_text(&topo, &live.state));
    assert!(text.contains(&format!("{rt_emu}=rt:emu")), "{text}");
    for pu in iso_idle.iter() {
        assert_eq!(svg.get(&pu), Some(&vec![("iso".to_string(), "idle".to_string())]), "CPU {pu}");
        assert!(text.contains(&format!("{pu}=iso:idle")), "{text}");
    }
    assert!(text.contains("0=host"), "{text}");
}

/// A domain another tool wrote says with `<vcpu cpuset>` only where its
/// unpinned threads may run: it keeps no CPU beyond its pins, so nothing
/// else is held (only numaplace's mark says the set is the VM's own).
#[test]
fn a_foreign_domains_vcpu_cpuset_holds_nothing_beyond_its_pins() {
    let topo = host_2n4c2t();
    let (_, state) = planned(&topo);
    let iso = state.placement("iso").expect("iso placed");
    let xml = domain_xml(iso, &LibvirtOptions::default().for_host(&topo));
    let start = xml.find("<metadata>").expect("mark");
    let end = xml.find("</metadata>").expect("mark") + "</metadata>".len();
    let foreign = format!("{}{}", &xml[..start], &xml[end..]);
    let definition = read("iso", &foreign).expect("reads");
    let (held, _) = numaplace_libvirt::held(&definition, "libvirt:iso", &topo);
    let pins: CpuSet = iso.vcpus.iter().map(|v| v.pu).collect();
    assert_eq!(held.placement.cpuset, pins);
    let holder = Holder::of(&held, true, Vec::new());
    assert_eq!(holder.cpus.dedicated(), pins);
    // numaplace's own domain keeps its whole set.
    let (ours, _) = numaplace_libvirt::held(&read("iso", &xml).expect("reads"), "libvirt:iso", &topo);
    assert_eq!(ours.placement.cpuset, iso.cpuset);
    assert_eq!(Holder::of(&ours, true, Vec::new()).cpus.dedicated(), iso.cpuset);
}
