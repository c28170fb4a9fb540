//! The figures of a note and of an alternative's verdict: the numbers
//! (and names) its sentence is made of, as members of its JSON object, so
//! a program reads `"vm": "vm64", "vcpus": 2` instead of parsing words.
//!
//! Each figure is visited as a key and a borrowed value, from a planner
//! value ([`note`], [`verdict`]) or from a document read back
//! ([`coded_note`], [`alternative`]). The hand writer writes what it is
//! given, in the order given; an owned document is filled by `set`. The
//! serde structs' field order is the written order, so a planner value's
//! keys are visited in that order too (a test in `write` holds every
//! variant to it).

use super::view::Nums;
use super::{AlternativeDoc, CodedNoteDoc, CostDoc};
use numaplace_plan::{Note, Verdict, VerdictFigures};

/// One figure, borrowed from where it is kept.
#[derive(Clone, Copy, Debug)]
pub(super) enum Fig<'a> {
    Num(u64),
    /// A number as it was read.
    Number(&'a serde_json::Number),
    /// Tenths, written as a number with one decimal.
    Tenths(u64),
    Float(f64),
    Str(&'a str),
    Strs(&'a [String]),
    Nums(Nums<'a>),
    Counts(&'a [usize]),
    Cost(CostDoc),
}

/// A note's figures, in the order [`CodedNoteDoc`] writes them.
#[derive(Clone, Copy, Debug)]
pub(super) enum NoteFigs<'a> {
    Plan(&'a Note),
    Doc(&'a CodedNoteDoc),
}

impl<'a> NoteFigs<'a> {
    pub(super) fn each(self, f: &mut impl FnMut(&'static str, Fig<'a>)) {
        match self {
            NoteFigs::Plan(n) => note(n, f),
            NoteFigs::Doc(d) => coded_note(d, f),
        }
    }
}

/// An alternative's figures, in the order [`AlternativeDoc`] writes them.
#[derive(Clone, Copy, Debug)]
pub(super) enum AltFigs<'a> {
    Plan(&'a Verdict),
    Doc(&'a AlternativeDoc),
}

impl<'a> AltFigs<'a> {
    pub(super) fn each(self, f: &mut impl FnMut(&'static str, Fig<'a>)) {
        match self {
            AltFigs::Plan(v) => verdict(v, f),
            AltFigs::Doc(a) => alternative(a, f),
        }
    }
}

/// A planner note's figures.
pub(super) fn note<'a>(n: &'a Note, f: &mut impl FnMut(&'static str, Fig<'a>)) {
    use Fig::{Num, Str};
    let count = |n: usize| Num(n as u64);
    match n {
        Note::DeviceNodeUnknown { device } | Note::DeviceMissing { device } => f("device", Str(device)),
        Note::DeviceTaken { device, holder } => {
            f("device", Str(device));
            f("vm", Str(holder));
        }
        Note::SiblingThreads { vcpus, max_nodes } => {
            f("vcpus", Num(*vcpus));
            f("max_nodes", count(*max_nodes));
        }
        Note::SiblingsCheaper { chosen, spread } => {
            f("cost", Fig::Cost((**chosen).into()));
            f("spread_cost", Fig::Cost((**spread).into()));
        }
        Note::OddPairs { vcpus } => f("vcpus", Num(*vcpus)),
        Note::SharedCores { vcpus } => f("vcpus", count(*vcpus)),
        Note::SharedFloat { vcpus, cpus, overcommit } => {
            f("vcpus", Num(*vcpus));
            f("cpus", count(*cpus));
            f("overcommit", Fig::Float(*overcommit));
        }
        Note::ShrinksShared { vm, lost, now } => {
            f("vm", Str(vm));
            f("lost", Fig::Nums(Nums::Set(lost)));
            f("now", Fig::Nums(Nums::Set(now)));
        }
        Note::EmulatorIsolated { cpu, node } => {
            f("node", Num(u64::from(node.0)));
            f("cpu", Num(u64::from(*cpu)));
        }
        Note::Mixed { floating, cpus, pinned } => {
            f("floating", Fig::Nums(Nums::Set(floating)));
            f("pool", Fig::Nums(Nums::Set(cpus)));
            f("pinned", count(*pinned));
        }
        Note::MemoryOvercommitted { charged, memory, ratio } => {
            f("charged_bytes", Num(*charged));
            f("memory_bytes", Num(*memory));
            f("ratio", Fig::Float(*ratio));
        }
        Note::CellsShareNode { node } | Note::DeviceOutside { node } => f("node", Num(u64::from(node.0))),
        Note::Spans { cells } => f("cell_vcpus", Fig::Counts(cells)),
        Note::Indivisible { vcpus, cells } => {
            f("vcpus", Num(*vcpus));
            f("cells", count(*cells));
        }
        Note::SiblingsOf { vms, vcpus } => {
            f("vms", Fig::Strs(vms));
            f("vcpus", count(*vcpus));
        }
        Note::SiblingsTakenBy { vm, vcpus } => {
            f("vm", Str(vm));
            f("vcpus", count(*vcpus));
        }
        Note::NoSmtForPairs
        | Note::SmtIgnoredForShared
        | Note::EmulatorOnVcpus
        | Note::EmulatorOnIdleSiblings
        | Note::EmulatorInPool
        | Note::HotAddForced
        | Note::UnevenSplit
        | Note::MemoryOnlyCells
        | Note::MemorylessCells
        | Note::Text(_) => {}
    }
}

/// A note read back: its figures in field order.
pub(super) fn coded_note<'a>(d: &'a CodedNoteDoc, f: &mut impl FnMut(&'static str, Fig<'a>)) {
    let num = |key, v: Option<u64>, f: &mut dyn FnMut(&'static str, Fig<'a>)| {
        if let Some(v) = v {
            f(key, Fig::Num(v));
        }
    };
    let nums = |key, v: &'a Option<Vec<u32>>, f: &mut dyn FnMut(&'static str, Fig<'a>)| {
        if let Some(v) = v {
            f(key, Fig::Nums(Nums::Slice(v)));
        }
    };
    if let Some(v) = &d.device {
        f("device", Fig::Str(v));
    }
    if let Some(v) = &d.vm {
        f("vm", Fig::Str(v));
    }
    if let Some(v) = &d.vms {
        f("vms", Fig::Strs(v));
    }
    num("vcpus", d.vcpus, f);
    num("cpus", d.cpus, f);
    num("cells", d.cells, f);
    if let Some(v) = &d.cell_vcpus {
        f("cell_vcpus", Fig::Counts(v));
    }
    num("max_nodes", d.max_nodes, f);
    num("node", d.node.map(u64::from), f);
    num("cpu", d.cpu.map(u64::from), f);
    nums("floating", &d.floating, f);
    nums("pool", &d.pool, f);
    num("pinned", d.pinned, f);
    nums("lost", &d.lost, f);
    nums("now", &d.now, f);
    if let Some(v) = d.overcommit {
        f("overcommit", Fig::Float(v));
    }
    num("charged_bytes", d.charged_bytes, f);
    num("memory_bytes", d.memory_bytes, f);
    if let Some(v) = d.ratio {
        f("ratio", Fig::Float(v));
    }
    if let Some(v) = d.cost {
        f("cost", Fig::Cost(v));
    }
    if let Some(v) = d.spread_cost {
        f("spread_cost", Fig::Cost(v));
    }
}

/// A planner verdict's figures.
pub(super) fn verdict<'a>(v: &'a Verdict, f: &mut impl FnMut(&'static str, Fig<'a>)) {
    match v.figures() {
        VerdictFigures::None => {}
        VerdictFigures::Counts { alt, chosen } => {
            f("alt", Fig::Num(alt));
            f("chosen", Fig::Num(chosen));
        }
        VerdictFigures::Tenths { alt, chosen } => {
            f("alt", Fig::Tenths(alt));
            f("chosen", Fig::Tenths(chosen));
        }
        VerdictFigures::Room { have, need } => {
            f("have", Fig::Num(have));
            f("need", Fig::Num(need));
        }
        VerdictFigures::Costs { alt, chosen } => {
            f("alt_cost", Fig::Cost(alt.into()));
            f("chosen_cost", Fig::Cost(chosen.into()));
        }
    }
}

/// An alternative read back: its figures in field order.
pub(super) fn alternative<'a>(a: &'a AlternativeDoc, f: &mut impl FnMut(&'static str, Fig<'a>)) {
    if let Some(v) = &a.alt {
        f("alt", Fig::Number(v));
    }
    if let Some(v) = &a.chosen {
        f("chosen", Fig::Number(v));
    }
    if let Some(v) = a.have {
        f("have", Fig::Num(v));
    }
    if let Some(v) = a.need {
        f("need", Fig::Num(v));
    }
    if let Some(v) = a.alt_cost {
        f("alt_cost", Fig::Cost(v));
    }
    if let Some(v) = a.chosen_cost {
        f("chosen_cost", Fig::Cost(v));
    }
}

/// A whole number that fits its field (node and CPU numbers come from
/// `u32`s, so they always do).
fn small(n: u64) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

fn number(fig: Fig<'_>) -> Option<serde_json::Number> {
    match fig {
        Fig::Num(n) => Some(n.into()),
        Fig::Number(n) => Some(n.clone()),
        Fig::Tenths(t) => serde_json::Number::from_f64(t as f64 / 10.0),
        Fig::Float(x) => serde_json::Number::from_f64(x),
        _ => None,
    }
}

impl CodedNoteDoc {
    /// Stores one figure under its key.
    pub(super) fn set(&mut self, key: &str, fig: Fig<'_>) {
        let list = |n: Nums<'_>| Some(n.to_vec());
        match (key, fig) {
            ("device", Fig::Str(s)) => self.device = Some(s.to_string()),
            ("vm", Fig::Str(s)) => self.vm = Some(s.to_string()),
            ("vms", Fig::Strs(v)) => self.vms = Some(v.to_vec()),
            ("vcpus", Fig::Num(n)) => self.vcpus = Some(n),
            ("cpus", Fig::Num(n)) => self.cpus = Some(n),
            ("cells", Fig::Num(n)) => self.cells = Some(n),
            ("cell_vcpus", Fig::Counts(v)) => self.cell_vcpus = Some(v.to_vec()),
            ("max_nodes", Fig::Num(n)) => self.max_nodes = Some(n),
            ("node", Fig::Num(n)) => self.node = Some(small(n)),
            ("cpu", Fig::Num(n)) => self.cpu = Some(small(n)),
            ("floating", Fig::Nums(n)) => self.floating = list(n),
            ("pool", Fig::Nums(n)) => self.pool = list(n),
            ("pinned", Fig::Num(n)) => self.pinned = Some(n),
            ("lost", Fig::Nums(n)) => self.lost = list(n),
            ("now", Fig::Nums(n)) => self.now = list(n),
            ("overcommit", Fig::Float(x)) => self.overcommit = Some(x),
            ("charged_bytes", Fig::Num(n)) => self.charged_bytes = Some(n),
            ("memory_bytes", Fig::Num(n)) => self.memory_bytes = Some(n),
            ("ratio", Fig::Float(x)) => self.ratio = Some(x),
            ("cost", Fig::Cost(c)) => self.cost = Some(c),
            ("spread_cost", Fig::Cost(c)) => self.spread_cost = Some(c),
            // The visitors above give only these pairs (a test writes
            // every note both ways).
            _ => debug_assert!(false, "note figure {key}: {fig:?}"),
        }
    }
}

impl AlternativeDoc {
    /// Stores one figure under its key.
    pub(super) fn set(&mut self, key: &str, fig: Fig<'_>) {
        match (key, fig) {
            ("alt", fig) => self.alt = number(fig),
            ("chosen", fig) => self.chosen = number(fig),
            ("have", Fig::Num(n)) => self.have = Some(n),
            ("need", Fig::Num(n)) => self.need = Some(n),
            ("alt_cost", Fig::Cost(c)) => self.alt_cost = Some(c),
            ("chosen_cost", Fig::Cost(c)) => self.chosen_cost = Some(c),
            _ => debug_assert!(false, "alternative figure {key}: {fig:?}"),
        }
    }
}
