use super::super::request::{CellDoc as RequestCellDoc, DeviceWishDoc, RequestDoc, SizeDoc};
use super::super::{
    AlternativeDoc, CellDoc, CodedNoteDoc, CostDoc, FloatingDoc, GuestDoc, HeldDoc, HostNodeDoc, HostTopologyDoc,
    MemoryDoc, NoteDoc, PlacementDoc, RejectionDoc, ReservedDoc, VcpuDoc,
};
use super::*;
use proptest::collection::vec;
use proptest::option;
use proptest::prelude::*;

/// Strings with what must be escaped, and what must not be.
fn text() -> impl Strategy<Value = String> {
    "[a-z0-9 \"\\\\\n\t\u{1}\u{7f}é:,{}\\[\\]]{0,12}"
}

fn nums() -> impl Strategy<Value = Vec<u32>> {
    vec(any::<u32>(), 0..4)
}

fn memory() -> impl Strategy<Value = Vec<MemoryDoc>> {
    vec((any::<u32>(), any::<u64>()).prop_map(|(node, bytes)| MemoryDoc { node, bytes }), 0..3)
}

fn size() -> impl Strategy<Value = SizeDoc> {
    prop_oneof![any::<u64>().prop_map(SizeDoc::Bytes), text().prop_map(SizeDoc::Text)]
}

fn float() -> impl Strategy<Value = f64> {
    prop_oneof![Just(1.0), Just(0.5), any::<f64>()]
}

fn request() -> impl Strategy<Value = RequestDoc> {
    (
        (text(), any::<u32>(), size(), text(), text(), text(), option::of(size()), float()),
        (
            option::of(any::<u32>()),
            vec((option::of(text()), option::of(any::<u32>()), any::<bool>()), 0..2),
            any::<bool>(),
            option::of(any::<u32>()),
            any::<bool>(),
            text(),
        ),
        (
            vec((any::<u32>(), size()), 0..2),
            option::of(any::<u32>()),
            any::<bool>(),
            option::of(float()),
            option::of(text()),
        ),
    )
        .prop_map(|(a, b, c)| RequestDoc {
            name: a.0,
            vcpus: a.1,
            memory: a.2,
            cpu: a.3,
            smt: a.4,
            policy: a.5,
            hugepages: a.6,
            overcommit: a.7,
            max_nodes: b.0,
            devices: b
                .1
                .into_iter()
                .map(|(address, node, required)| DeviceWishDoc { address, node, required })
                .collect(),
            cpu_hotadd: b.2,
            max_vcpus: b.3,
            force: b.4,
            emulator: b.5,
            cells: c
                .0
                .into_iter()
                .map(|(vcpus, memory)| RequestCellDoc {
                    vcpus: super::super::request::CellVcpusDoc::Count(vcpus),
                    memory,
                })
                .collect(),
            guest_nodes: c.1,
            cells_share_nodes: c.2,
            memory_overcommit: c.3,
            shared_vcpus: c.4,
            memory_kind: None,
            memory_tiers: None,
        })
}

fn guest() -> impl Strategy<Value = GuestDoc> {
    let cell = (any::<u32>(), nums(), any::<u64>(), any::<u32>(), nums(), memory()).prop_map(
        |(id, vcpus, memory_bytes, host_node, distances, memory_nodes)| CellDoc {
            id,
            vcpus,
            memory_bytes,
            host_node,
            distances,
            memory_nodes,
        },
    );
    (any::<u32>(), prop_oneof![Just(1u32), any::<u32>()], any::<u32>(), any::<u32>(), vec(cell, 0..3))
        .prop_map(|(sockets, dies, cores, threads, cells)| GuestDoc { sockets, dies, cores, threads, cells })
}

fn placement() -> impl Strategy<Value = PlacementDoc> {
    let cost = (
        any::<u64>(),
        any::<u64>(),
        prop_oneof![Just(0u64), any::<u64>()],
        any::<u64>(),
        any::<u64>(),
        prop_oneof![Just(0u64), any::<u64>()],
    )
        .prop_map(|(total, siblings, pairs, remote, small_cells, device)| CostDoc {
            total,
            siblings,
            pairs,
            remote,
            small_cells,
            device,
        });
    let number = prop_oneof![
        any::<u64>().prop_map(serde_json::Number::from),
        (0u64..3000).prop_map(|t| serde_json::Number::from_f64(t as f64 / 10.0).expect("finite")),
    ];
    let alternative = (
        (nums(), option::of(text()), text()),
        (option::of(number.clone()), option::of(number), option::of(any::<u64>()), option::of(any::<u64>())),
        (option::of(cost.clone()), option::of(cost.clone())),
    )
        .prop_map(|(a, b, c)| AlternativeDoc {
            alt: b.0,
            chosen: b.1,
            have: b.2,
            need: b.3,
            alt_cost: c.0,
            chosen_cost: c.1,
            ..AlternativeDoc::new(a.0, a.1, a.2)
        });
    let count = || option::of(any::<u64>());
    let list = || option::of(nums());
    let coded = (
        (text(), text(), option::of(text()), option::of(text()), option::of(vec(text(), 0..3))),
        (count(), count(), count(), option::of(vec(any::<usize>(), 0..3)), count()),
        (option::of(any::<u32>()), option::of(any::<u32>()), list(), list(), count(), list(), list()),
        (option::of(float()), count(), count(), option::of(float()), option::of(cost.clone()), option::of(cost)),
    )
        .prop_map(|(a, b, c, d)| CodedNoteDoc {
            code: a.0,
            text: a.1,
            device: a.2,
            vm: a.3,
            vms: a.4,
            vcpus: b.0,
            cpus: b.1,
            cells: b.2,
            cell_vcpus: b.3,
            max_nodes: b.4,
            node: c.0,
            cpu: c.1,
            floating: c.2,
            pool: c.3,
            pinned: c.4,
            lost: c.5,
            now: c.6,
            overcommit: d.0,
            charged_bytes: d.1,
            memory_bytes: d.2,
            ratio: d.3,
            cost: d.4,
            spread_cost: d.5,
        });
    let note = prop_oneof![coded.prop_map(|c| NoteDoc::Coded(Box::new(c))), text().prop_map(NoteDoc::Text)];
    let vcpu = (any::<u32>(), any::<u32>(), any::<u32>()).prop_map(|(vcpu, pu, node)| VcpuDoc { vcpu, pu, node });
    let floating = (any::<u32>(), nums(), nums()).prop_map(|(node, vcpus, cpus)| FloatingDoc { node, vcpus, cpus });
    (
        (text(), any::<bool>(), nums(), text(), nums(), option::of(any::<u32>()), vec(vcpu, 0..2), nums()),
        (nums(), memory(), any::<u64>(), text(), option::of(any::<u64>()), guest(), vec(text(), 0..2)),
        (vec(floating, 0..2), memory(), vec(alternative, 0..3), vec(note, 0..3), option::of(request())),
    )
        .prop_map(|(a, b, c)| PlacementDoc {
            vm: a.0,
            new: a.1,
            nodes: a.2,
            cpu_mode: a.3,
            pins: a.4,
            online_vcpus: a.5,
            vcpus: a.6,
            cpuset: a.7,
            emulator: b.0,
            memory: b.1,
            memory_bytes: b.2,
            memory_mode: b.3,
            hugepage_bytes: b.4,
            guest: b.5,
            devices: b.6,
            floating: c.0,
            charged: c.1,
            alternatives: c.2,
            notes: c.3,
            request: c.4,
        })
}

fn doc() -> impl Strategy<Value = PlanDoc> {
    let reserved = (nums(), any::<u64>(), nums()).prop_map(|(cpus, memory_per_node, shared_cpus)| ReservedDoc {
        cpus,
        memory_per_node,
        shared_cpus,
    });
    let rejected =
        (text(), text(), option::of(any::<u64>()), option::of(request())).prop_map(|(vm, reason, needed, request)| {
            RejectionDoc {
                vm,
                code: "cpu".to_string(),
                reason,
                resource: None,
                needed,
                memory_bytes: None,
                hugepage_bytes: None,
                max_nodes: Some(2),
                best_total: None,
                nodes: Vec::new(),
                held_by: Vec::new(),
                request,
            }
        });
    let held = (text(), any::<bool>(), nums(), memory()).prop_map(|(vm, running, pins, memory)| HeldDoc {
        vm,
        source: "libvirt:qemu:///system".to_string(),
        managed: false,
        running,
        cpu_mode: "floating".to_string(),
        cpus: pins.clone(),
        pins,
        emulator: Vec::new(),
        memory,
        devices: Vec::new(),
        cpus_after: Vec::new(),
    });
    let host_topology = (any::<bool>(), vec((any::<u32>(), nums()), 0..3)).prop_map(|(live, nodes)| HostTopologyDoc {
        live,
        nodes: nodes.into_iter().map(|(node, cpus)| HostNodeDoc { node, cpus }).collect(),
    });
    let extra = (option::of(host_topology), option::of(text()));
    (option::of(text()), option::of(reserved), vec(placement(), 0..4), vec(rejected, 0..2), vec(held, 0..2), extra)
        .prop_map(|(host, reserved, placements, rejected, held, (host_topology, accel))| PlanDoc {
            format: super::super::FORMAT.to_string(),
            version: super::super::VERSION,
            host,
            host_topology,
            reserved,
            accel,
            placements,
            rejected,
            held,
        })
}

fn by_hand(doc: &PlanDoc, compact: bool) -> String {
    let mut out = Vec::new();
    plan_doc(&mut out, doc, [], compact).expect("writes to memory");
    String::from_utf8(out).expect("utf-8")
}

fn by_serde(doc: &PlanDoc, compact: bool) -> String {
    let mut out = Vec::new();
    crate::layout::write(&mut out, doc, if compact { 0 } else { OUTER }).expect("writes to memory");
    String::from_utf8(out).expect("utf-8")
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    /// Every field, present or absent, escaped or not, comes out as
    /// serde's layout writes it, pretty and compact.
    #[test]
    fn the_hand_writer_is_byte_for_byte_serde(doc in doc()) {
        prop_assert_eq!(by_hand(&doc, false), by_serde(&doc, false));
        prop_assert_eq!(by_hand(&doc, true), by_serde(&doc, true));
    }
}

/// Records the size of each write it is handed.
struct Writes(Vec<u8>, Vec<usize>);

impl Write for Writes {
    fn write(&mut self, b: &[u8]) -> io::Result<usize> {
        self.0.extend_from_slice(b);
        self.1.push(b.len());
        Ok(b.len())
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(20))]

    /// A plan far larger than the buffer streams out in pieces of about
    /// `FLUSH_AT` bytes and comes out as serde writes it whole.
    #[test]
    fn a_large_plan_streams_in_pieces_and_reads_as_serde_writes_it(
        doc in doc(), entry in placement(), copies in 40usize..160,
    ) {
        let mut doc = doc;
        doc.placements.extend(std::iter::repeat_n(entry, copies));
        for compact in [false, true] {
            let mut out = Writes(Vec::new(), Vec::new());
            plan_doc(&mut out, &doc, [], compact).expect("writes to memory");
            prop_assert_eq!(String::from_utf8(out.0).expect("utf-8"), by_serde(&doc, compact));
            prop_assert!(out.1.len() >= 2, "{:?}", out.1);
            let (_, flushed) = out.1.split_last().expect("written");
            prop_assert!(flushed.iter().all(|&n| n >= FLUSH_AT), "{:?}", out.1);
        }
    }
}

#[test]
fn every_byte_that_needs_escaping_is_found_wherever_it_is() {
    for len in 0..20 {
        for at in 0..len {
            for b in 0..=255u8 {
                let mut s = vec![b'a'; len];
                s[at] = b;
                let needs = b < 0x20 || b == b'"' || b == b'\\';
                if needs {
                    assert!(needs_escape(&s), "byte {b:#x} at {at} of {len}");
                } else if b < 0x80 {
                    assert!(!needs_escape(&s), "false alarm on byte {b:#x} at {at} of {len}");
                }
            }
        }
    }
    assert!(!needs_escape("tie on every criterion: lower node numbers win é".as_bytes()));
}

#[test]
fn an_empty_plan_is_written_as_serde_writes_it() {
    let doc = PlanDoc::new(None);
    assert_eq!(by_hand(&doc, false), by_serde(&doc, false));
    assert_eq!(by_hand(&doc, true), by_serde(&doc, true));
}
