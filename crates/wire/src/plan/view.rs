//! A VM's entry of the plan document as borrowed values: the one mapping
//! from the planner's types to the document's fields. A placement, a
//! decision and a document entry all become a [`PlacementView`] for free
//! (nothing is copied in the common case), and the view is either written
//! straight out ([`super::write`]) or turned into an owned
//! [`PlacementDoc`]. Writing a fresh decision therefore never builds the
//! forty strings and lists of a `PlacementDoc` first (issue 12's
//! end-to-end cost), and the two forms cannot drift apart.
//!
//! Kept for speed only: [`PlacementView`] and `RequestView` are not more
//! shapes of a VM but the borrowing half of [`PlacementDoc`] and
//! [`RequestDoc`], which stay the one owned form (serde reads them, and
//! the record codec, `crate::record`, encodes and decodes every stored
//! or sent VM through them). Every `PlacementDoc` is built here
//! (`to_doc`), so a field is mapped once. Collapsing the views into the
//! owned documents would put a `PlacementDoc`'s allocations back on
//! every decision `plan --format json` writes: 6,700 instructions per VM
//! (docs/performance.md, "A fresh decision is written straight from the
//! planner's values"). The plan document's `held[]` entry
//! (`HeldDoc`, a domain as read: its source, whether it runs, its CPUs)
//! and the API's body (`PlacedDoc`, the record's host, origin and group
//! around a `PlacementDoc`) are other documents' shapes, not views of
//! this entry.

use super::figures::{AltFigs, NoteFigs};
use super::request::{cpu_mode_name, smt_name, CellDoc as RequestCellDoc, CellVcpusDoc, DeviceWishDoc, SizeDoc};
use super::{
    memory_mode_name, sentence, AlternativeDoc, CellDoc, CodedNoteDoc, FloatingDoc, GuestDoc, MemoryDoc, NoteDoc,
    PlacementDoc, RequestDoc, VcpuDoc,
};
use numaplace_plan::{
    Alternative, Decision, EmulatorPlacement, GuestCell, Note, Placement, Request, Sentence, VcpuPin,
};
use numaplace_topo::{CpuSet, NodeId};
use std::borrow::Cow;

/// A list of numbers, in whichever form its owner keeps it.
#[derive(Clone, Copy, Debug)]
pub(super) enum Nums<'a> {
    Slice(&'a [u32]),
    Set(&'a CpuSet),
    Nodes(&'a [NodeId]),
    /// Each pin's PU.
    Pins(&'a [VcpuPin]),
}

impl Nums<'_> {
    pub(super) fn is_empty(&self) -> bool {
        match self {
            Nums::Slice(s) => s.is_empty(),
            Nums::Set(s) => s.is_empty(),
            Nums::Nodes(s) => s.is_empty(),
            Nums::Pins(s) => s.is_empty(),
        }
    }

    pub(super) fn to_vec(self) -> Vec<u32> {
        match self {
            Nums::Slice(s) => s.to_vec(),
            Nums::Set(s) => {
                // Sized first: collecting the set's iterator grows the
                // list 4, 8, 16.
                let mut v = Vec::with_capacity(s.len());
                v.extend(s.iter());
                v
            }
            Nums::Nodes(s) => s.iter().map(|n| n.0).collect(),
            Nums::Pins(s) => s.iter().map(|p| p.pu).collect(),
        }
    }
}

/// Memory per node.
#[derive(Clone, Copy, Debug)]
pub(super) enum Mem<'a> {
    Docs(&'a [MemoryDoc]),
    Pairs(&'a [(NodeId, u64)]),
}

impl Mem<'_> {
    pub(super) fn is_empty(&self) -> bool {
        match self {
            Mem::Docs(s) => s.is_empty(),
            Mem::Pairs(s) => s.is_empty(),
        }
    }

    pub(super) fn iter(&self) -> impl Iterator<Item = (u32, u64)> + '_ {
        let (docs, pairs) = match *self {
            Mem::Docs(s) => (s, &[][..]),
            Mem::Pairs(s) => (&[][..], s),
        };
        docs.iter().map(|m| (m.node, m.bytes)).chain(pairs.iter().map(|&(n, b)| (n.0, b)))
    }

    fn to_vec(self) -> Vec<MemoryDoc> {
        self.iter().map(|(node, bytes)| MemoryDoc { node, bytes }).collect()
    }
}

/// The guest's cells.
#[derive(Clone, Copy, Debug)]
pub(super) enum Cells<'a> {
    Docs(&'a [CellDoc]),
    Plan(&'a [GuestCell]),
}

/// One guest cell.
pub(super) struct CellView<'a> {
    pub(super) id: u32,
    pub(super) vcpus: Nums<'a>,
    pub(super) memory_bytes: u64,
    pub(super) host_node: u32,
    pub(super) distances: &'a [u32],
    pub(super) memory_nodes: Mem<'a>,
}

impl<'a> Cells<'a> {
    pub(super) fn len(&self) -> usize {
        match self {
            Cells::Docs(s) => s.len(),
            Cells::Plan(s) => s.len(),
        }
    }

    pub(super) fn get(&self, i: usize) -> Option<CellView<'a>> {
        Some(match *self {
            Cells::Docs(s) => {
                let c = s.get(i)?;
                CellView {
                    id: c.id,
                    vcpus: Nums::Slice(&c.vcpus),
                    memory_bytes: c.memory_bytes,
                    host_node: c.host_node,
                    distances: &c.distances,
                    memory_nodes: Mem::Docs(&c.memory_nodes),
                }
            }
            Cells::Plan(s) => {
                let c = s.get(i)?;
                CellView {
                    id: c.id,
                    vcpus: Nums::Set(&c.vcpus),
                    memory_bytes: c.memory_bytes,
                    host_node: c.host_node.0,
                    distances: &c.distances,
                    memory_nodes: Mem::Pairs(&c.memory_nodes),
                }
            }
        })
    }
}

/// A sentence: already words (read from a document), or a planner value
/// put into words as it is written.
pub(super) enum Words<'a> {
    Text(&'a str),
    Said(&'a dyn Sentence),
}

impl Words<'_> {
    fn words(&self) -> String {
        match self {
            Words::Text(t) => (*t).to_string(),
            Words::Said(d) => sentence(d),
        }
    }
}

/// The node sets considered.
#[derive(Clone, Copy, Debug)]
pub(super) enum Alts<'a> {
    Docs(&'a [AlternativeDoc]),
    Plan(&'a [Alternative]),
}

/// One alternative: its nodes, its code, why it lost.
pub(super) struct AltView<'a> {
    pub(super) nodes: Nums<'a>,
    pub(super) code: Option<&'a str>,
    pub(super) verdict: Words<'a>,
    pub(super) figs: AltFigs<'a>,
}

impl<'a> Alts<'a> {
    pub(super) fn len(&self) -> usize {
        match self {
            Alts::Docs(s) => s.len(),
            Alts::Plan(s) => s.len(),
        }
    }

    pub(super) fn get(&self, i: usize) -> Option<AltView<'a>> {
        Some(match *self {
            Alts::Docs(s) => {
                let a = s.get(i)?;
                AltView {
                    nodes: Nums::Slice(&a.nodes),
                    code: a.code.as_deref(),
                    verdict: Words::Text(&a.verdict),
                    figs: AltFigs::Doc(a),
                }
            }
            Alts::Plan(s) => {
                let a = s.get(i)?;
                AltView {
                    nodes: Nums::Nodes(&a.nodes),
                    code: Some(a.verdict.code()),
                    verdict: Words::Said(&a.verdict),
                    figs: AltFigs::Plan(&a.verdict),
                }
            }
        })
    }
}

/// The notes on a VM.
#[derive(Clone, Copy, Debug)]
pub(super) enum Notes<'a> {
    Docs(&'a [NoteDoc]),
    Plan(&'a [Note]),
}

/// One note: `{code, text, figures...}`, or a bare sentence (version 1).
pub(super) enum NoteView<'a> {
    Coded { code: &'a str, text: Words<'a>, figs: NoteFigs<'a> },
    Text(&'a str),
}

impl<'a> Notes<'a> {
    pub(super) fn len(&self) -> usize {
        match self {
            Notes::Docs(s) => s.len(),
            Notes::Plan(s) => s.len(),
        }
    }

    pub(super) fn get(&self, i: usize) -> Option<NoteView<'a>> {
        Some(match *self {
            Notes::Docs(s) => match s.get(i)? {
                NoteDoc::Coded(d) => {
                    NoteView::Coded { code: &d.code, text: Words::Text(&d.text), figs: NoteFigs::Doc(d) }
                }
                NoteDoc::Text(text) => NoteView::Text(text),
            },
            Notes::Plan(s) => {
                let n = s.get(i)?;
                NoteView::Coded { code: n.code(), text: Words::Said(n), figs: NoteFigs::Plan(n) }
            }
        })
    }
}

/// A size: bytes, or text with a unit.
#[derive(Clone, Copy, Debug)]
pub(super) enum SizeView<'a> {
    Bytes(u64),
    Text(&'a str),
}

impl SizeView<'_> {
    fn of(s: &SizeDoc) -> SizeView<'_> {
        match s {
            SizeDoc::Bytes(n) => SizeView::Bytes(*n),
            SizeDoc::Text(t) => SizeView::Text(t),
        }
    }

    fn to_doc(self) -> SizeDoc {
        match self {
            SizeView::Bytes(n) => SizeDoc::Bytes(n),
            SizeView::Text(t) => SizeDoc::Text(t.to_string()),
        }
    }
}

/// The request a VM was planned from, in the document's keys.
#[derive(Clone)]
pub(super) struct RequestView<'a> {
    pub(super) name: &'a str,
    pub(super) vcpus: u32,
    pub(super) memory: SizeView<'a>,
    pub(super) cpu: &'a str,
    pub(super) smt: &'a str,
    pub(super) policy: &'a str,
    pub(super) hugepages: Option<SizeView<'a>>,
    pub(super) overcommit: f64,
    pub(super) max_nodes: Option<u32>,
    pub(super) devices: Cow<'a, [DeviceWishDoc]>,
    pub(super) cpu_hotadd: bool,
    pub(super) max_vcpus: Option<u32>,
    pub(super) force: bool,
    pub(super) emulator: Cow<'a, str>,
    pub(super) cells: Cow<'a, [RequestCellDoc]>,
    pub(super) guest_nodes: Option<u32>,
    pub(super) cells_share_nodes: bool,
    pub(super) memory_overcommit: Option<f64>,
    pub(super) shared_vcpus: Option<Cow<'a, str>>,
    pub(super) memory_kind: Option<Cow<'a, str>>,
    pub(super) memory_tiers: Option<Cow<'a, str>>,
}

impl<'a> RequestView<'a> {
    pub(super) fn of_doc(r: &'a RequestDoc) -> RequestView<'a> {
        RequestView {
            name: &r.name,
            vcpus: r.vcpus,
            memory: SizeView::of(&r.memory),
            cpu: &r.cpu,
            smt: &r.smt,
            policy: &r.policy,
            hugepages: r.hugepages.as_ref().map(SizeView::of),
            overcommit: r.overcommit,
            max_nodes: r.max_nodes,
            devices: Cow::Borrowed(&r.devices),
            cpu_hotadd: r.cpu_hotadd,
            max_vcpus: r.max_vcpus,
            force: r.force,
            emulator: Cow::Borrowed(&r.emulator),
            cells: Cow::Borrowed(&r.cells),
            guest_nodes: r.guest_nodes,
            cells_share_nodes: r.cells_share_nodes,
            memory_overcommit: r.memory_overcommit,
            shared_vcpus: r.shared_vcpus.as_deref().map(Cow::Borrowed),
            memory_kind: r.memory_kind.as_deref().map(Cow::Borrowed),
            memory_tiers: r.memory_tiers.as_deref().map(Cow::Borrowed),
        }
    }

    /// A request with every default written out, so a plan replays the
    /// same way whatever the defaults become.
    pub(super) fn of_request(r: &'a Request) -> RequestView<'a> {
        RequestView {
            name: &r.name,
            vcpus: r.vcpus,
            memory: SizeView::Bytes(r.memory_bytes),
            cpu: cpu_mode_name(r.cpu_mode),
            smt: smt_name(r.smt),
            policy: r.policy.name(),
            hugepages: r.hugepage_bytes.map(SizeView::Bytes),
            overcommit: r.overcommit,
            max_nodes: r.max_nodes,
            devices: r
                .devices
                .iter()
                .map(|d| DeviceWishDoc { address: d.address.clone(), node: d.node.map(|n| n.0), required: d.required })
                .collect(),
            cpu_hotadd: r.cpu_hotadd(),
            max_vcpus: r.max_vcpus,
            force: r.force,
            emulator: match &r.emulator {
                EmulatorPlacement::VmNodes => Cow::Borrowed("vm-nodes"),
                EmulatorPlacement::Housekeeping(set) => Cow::Owned(set.to_list()),
                EmulatorPlacement::HostReserved => Cow::Borrowed("housekeeping"),
                EmulatorPlacement::Isolate => Cow::Borrowed("isolate"),
            },
            cells: r
                .cells
                .iter()
                .map(|c| RequestCellDoc {
                    vcpus: match &c.listed {
                        Some(list) => CellVcpusDoc::List(list.iter().collect()),
                        None => CellVcpusDoc::Count(c.vcpus),
                    },
                    memory: SizeDoc::Bytes(c.memory_bytes),
                })
                .collect(),
            guest_nodes: r.guest_nodes,
            cells_share_nodes: r.cells_share_nodes,
            memory_overcommit: (r.memory_overcommit != 1.0).then_some(r.memory_overcommit),
            shared_vcpus: (!r.shared_vcpus.is_empty()).then(|| Cow::Owned(r.shared_vcpus.to_list())),
            memory_kind: r.memory_kinds.as_deref().map(|k| Cow::Owned(super::request::memory_kinds_name(k))),
            // Written only when not the default, as `memory_kind`.
            memory_tiers: (r.memory_tiers == numaplace_plan::MemoryTiers::Visible).then_some(Cow::Borrowed("visible")),
        }
    }

    pub(super) fn to_doc(&self) -> RequestDoc {
        RequestDoc {
            name: self.name.to_string(),
            vcpus: self.vcpus,
            memory: self.memory.to_doc(),
            cpu: self.cpu.to_string(),
            smt: self.smt.to_string(),
            policy: self.policy.to_string(),
            hugepages: self.hugepages.map(SizeView::to_doc),
            overcommit: self.overcommit,
            max_nodes: self.max_nodes,
            devices: self.devices.to_vec(),
            cpu_hotadd: self.cpu_hotadd,
            max_vcpus: self.max_vcpus,
            force: self.force,
            emulator: self.emulator.to_string(),
            cells: self.cells.to_vec(),
            guest_nodes: self.guest_nodes,
            cells_share_nodes: self.cells_share_nodes,
            memory_overcommit: self.memory_overcommit,
            shared_vcpus: self.shared_vcpus.as_ref().map(|s| s.to_string()),
            memory_kind: self.memory_kind.as_ref().map(|s| s.to_string()),
            memory_tiers: self.memory_tiers.as_ref().map(|s| s.to_string()),
        }
    }
}

/// A VM's entry of the plan document, borrowed from a placement, a
/// decision or a document entry.
#[derive(Clone)]
pub struct PlacementView<'a> {
    pub(super) vm: &'a str,
    pub(super) new: bool,
    pub(super) nodes: Nums<'a>,
    pub(super) cpu_mode: &'a str,
    /// Version 2's pinning (empty: not written).
    pub(super) pins: Nums<'a>,
    pub(super) online_vcpus: Option<u32>,
    /// Version 1's pinning (empty: not written).
    pub(super) vcpus: Cow<'a, [VcpuDoc]>,
    pub(super) cpuset: Nums<'a>,
    pub(super) emulator: Nums<'a>,
    pub(super) memory: Mem<'a>,
    pub(super) memory_bytes: u64,
    pub(super) memory_mode: &'a str,
    pub(super) hugepage_bytes: Option<u64>,
    pub(super) sockets: u32,
    pub(super) dies: u32,
    pub(super) cores: u32,
    pub(super) threads: u32,
    pub(super) cells: Cells<'a>,
    pub(super) devices: &'a [String],
    pub(super) floating: Cow<'a, [FloatingDoc]>,
    pub(super) charged: Mem<'a>,
    pub(super) alternatives: Alts<'a>,
    pub(super) notes: Notes<'a>,
    pub(super) request: Option<RequestView<'a>>,
}

impl<'a> PlacementView<'a> {
    /// A placement, as a VM carried from a state is written.
    pub fn of_placement(p: &'a Placement) -> PlacementView<'a> {
        // `pins` takes each vCPU's node from its guest cell. A placement
        // read from a domain an operator pinned by hand has no cells (or
        // cells on other nodes): it is written with `vcpus`, which names
        // each node, so that it reads back as it was.
        let cells_say_nodes = p
            .vcpus
            .iter()
            .all(|v| p.guest.cells.iter().find(|c| c.vcpus.contains(v.vcpu)).is_some_and(|c| c.host_node == v.node));
        let in_order = p.vcpus.iter().enumerate().all(|(i, v)| v.vcpu as usize == i);
        let (pins, vcpus) = if cells_say_nodes || !in_order {
            (Nums::Pins(&p.vcpus), Cow::Borrowed(&[][..]))
        } else {
            let objects = p.vcpus.iter().map(|v| VcpuDoc { vcpu: v.vcpu, pu: v.pu, node: v.node.0 }).collect();
            (Nums::Pins(&[]), Cow::Owned(objects))
        };
        PlacementView {
            vm: &p.vm,
            new: false,
            nodes: Nums::Nodes(&p.nodes),
            cpu_mode: if p.is_mixed() { "mixed" } else { cpu_mode_name(p.cpu_mode) },
            pins,
            online_vcpus: p.online_vcpus,
            vcpus,
            cpuset: Nums::Set(&p.cpuset),
            emulator: Nums::Set(&p.emulator),
            memory: Mem::Pairs(&p.memory),
            memory_bytes: p.memory_bytes,
            memory_mode: memory_mode_name(p.memory_mode),
            hugepage_bytes: p.hugepage_bytes,
            sockets: p.guest.sockets,
            dies: p.guest.dies,
            cores: p.guest.cores,
            threads: p.guest.threads,
            cells: Cells::Plan(&p.guest.cells),
            devices: &p.devices,
            floating: if p.floating.is_empty() {
                Cow::Borrowed(&[])
            } else {
                p.floating
                    .iter()
                    .map(|f| FloatingDoc {
                        node: f.node.0,
                        vcpus: Nums::Set(&f.vcpus).to_vec(),
                        cpus: Nums::Set(&f.cpus).to_vec(),
                    })
                    .collect()
            },
            charged: Mem::Pairs(&p.charged),
            alternatives: Alts::Plan(&[]),
            notes: Notes::Plan(&[]),
            request: None,
        }
    }

    /// A VM placed by this run, with the planner's reasoning; `request` is
    /// what it was planned from.
    pub fn of_decision(d: &'a Decision, request: Option<&'a Request>) -> PlacementView<'a> {
        PlacementView {
            new: true,
            alternatives: Alts::Plan(&d.alternatives),
            notes: Notes::Plan(&d.notes),
            request: request.map(RequestView::of_request),
            ..PlacementView::of_placement(&d.placement)
        }
    }

    /// The VM's CPUs as a host state has them now: a shared VM's floating
    /// set shrinks when a later dedicated VM takes some of its CPUs.
    pub fn with_cpus_of(self, now: &'a Placement) -> PlacementView<'a> {
        PlacementView { cpuset: Nums::Set(&now.cpuset), emulator: Nums::Set(&now.emulator), ..self }
    }

    /// A document entry.
    pub fn of_doc(p: &'a PlacementDoc) -> PlacementView<'a> {
        PlacementView {
            vm: &p.vm,
            new: p.new,
            nodes: Nums::Slice(&p.nodes),
            cpu_mode: &p.cpu_mode,
            pins: Nums::Slice(&p.pins),
            online_vcpus: p.online_vcpus,
            vcpus: Cow::Borrowed(&p.vcpus),
            cpuset: Nums::Slice(&p.cpuset),
            emulator: Nums::Slice(&p.emulator),
            memory: Mem::Docs(&p.memory),
            memory_bytes: p.memory_bytes,
            memory_mode: &p.memory_mode,
            hugepage_bytes: p.hugepage_bytes,
            sockets: p.guest.sockets,
            dies: p.guest.dies,
            cores: p.guest.cores,
            threads: p.guest.threads,
            cells: Cells::Docs(&p.guest.cells),
            devices: &p.devices,
            floating: Cow::Borrowed(&p.floating),
            charged: Mem::Docs(&p.charged),
            alternatives: Alts::Docs(&p.alternatives),
            notes: Notes::Docs(&p.notes),
            request: p.request.as_ref().map(RequestView::of_doc),
        }
    }

    /// The entry as an owned document entry.
    pub fn to_doc(&self) -> PlacementDoc {
        PlacementDoc {
            vm: self.vm.to_string(),
            new: self.new,
            nodes: self.nodes.to_vec(),
            cpu_mode: self.cpu_mode.to_string(),
            pins: self.pins.to_vec(),
            online_vcpus: self.online_vcpus,
            vcpus: self.vcpus.to_vec(),
            cpuset: self.cpuset.to_vec(),
            emulator: self.emulator.to_vec(),
            memory: self.memory.to_vec(),
            memory_bytes: self.memory_bytes,
            memory_mode: self.memory_mode.to_string(),
            hugepage_bytes: self.hugepage_bytes,
            guest: GuestDoc {
                sockets: self.sockets,
                dies: self.dies,
                cores: self.cores,
                threads: self.threads,
                cells: (0..self.cells.len())
                    .filter_map(|i| self.cells.get(i))
                    .map(|c| CellDoc {
                        id: c.id,
                        vcpus: c.vcpus.to_vec(),
                        memory_bytes: c.memory_bytes,
                        host_node: c.host_node,
                        distances: c.distances.to_vec(),
                        memory_nodes: c.memory_nodes.to_vec(),
                    })
                    .collect(),
            },
            devices: self.devices.to_vec(),
            floating: self.floating.to_vec(),
            charged: self.charged.to_vec(),
            alternatives: (0..self.alternatives.len())
                .filter_map(|i| self.alternatives.get(i))
                .map(|a| {
                    let mut doc = AlternativeDoc::new(a.nodes.to_vec(), a.code.map(str::to_string), a.verdict.words());
                    a.figs.each(&mut |key, fig| doc.set(key, fig));
                    doc
                })
                .collect(),
            notes: (0..self.notes.len())
                .filter_map(|i| self.notes.get(i))
                .map(|n| match n {
                    NoteView::Coded { code, text, figs } => {
                        let mut doc =
                            CodedNoteDoc { code: code.to_string(), text: text.words(), ..CodedNoteDoc::default() };
                        figs.each(&mut |key, fig| doc.set(key, fig));
                        NoteDoc::Coded(Box::new(doc))
                    }
                    NoteView::Text(text) => NoteDoc::Text(text.to_string()),
                })
                .collect(),
            request: self.request.as_ref().map(RequestView::to_doc),
        }
    }
}
