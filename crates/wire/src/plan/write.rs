//! The plan document written by hand, byte for byte as serde would write
//! it through [`crate::layout`]: a plan is the one document written per
//! VM in bulk (issue 12's end-to-end target), and serde_json spent most of
//! a VM's writing time escaping the same forty constant keys. Here the
//! keys and separators are constant bytes, numbers go through `itoa`, and
//! only the strings a VM brings (its name, sentences, addresses) are
//! scanned. Fields that are rare in bulk plans (devices, floating vCPUs,
//! version 1 pins, request cells) are handed back to serde at their depth.
//!
//! The serde layout stays the reference: a property test in this module
//! writes arbitrary documents both ways and compares the bytes.

use super::figures::Fig;
use super::view::{AltView, CellView, Mem, NoteView, Nums, PlacementView, RequestView, SizeView, Words};
use super::PlanDoc;
use numaplace_plan::Pieces;
use serde::Serialize;
use std::io::{self, Write};

/// Levels laid out one member per line in the pretty form: the document,
/// its lists, and each list entry (as [`PlanDoc::write_json`] documents).
const OUTER: usize = 3;

/// Bytes gathered before they are written out. Each 4 KiB page of the
/// buffer a run first writes costs a page fault, about 2 µs on the
/// machines of docs/performance.md, while a write to a pipe or a file of
/// this size costs 0.2-1 µs: a small buffer, refilled, is cheaper than a
/// large one touched once (a 128-VM plan takes 12 fewer faults than with
/// 64 KiB, for 17 more writes).
const FLUSH_AT: usize = 8 * 1024;

/// The buffer's room: a flush's worth plus a large VM's entry (a typical
/// entry is about 1 KiB), so that it is rarely regrown.
const BUFFER: usize = FLUSH_AT + 8 * 1024;

/// Writes `doc` as [`crate::layout::write`] would with `outer` 3 (pretty)
/// or 0 (compact), streaming one placement at a time into `out`.
pub(super) fn plan_doc<'p, W: Write>(
    out: &mut W,
    doc: &PlanDoc,
    placed: impl IntoIterator<Item = PlacementView<'p>>,
    compact: bool,
) -> io::Result<()> {
    if compact {
        write_doc::<false, W>(out, doc, placed)
    } else {
        write_doc::<true, W>(out, doc, placed)
    }
}

/// [`plan_doc`] in one layout: with the layout a constant, every key and
/// separator is a constant of known length, copied without a call.
fn write_doc<'p, const PRETTY: bool, W: Write>(
    out: &mut W,
    doc: &PlanDoc,
    placed: impl IntoIterator<Item = PlacementView<'p>>,
) -> io::Result<()> {
    let mut j = Json::<PRETTY> { buf: Vec::with_capacity(BUFFER), words: String::with_capacity(256) };
    j.buf.push(b'{');
    j.top_key("format", true);
    j.str(&doc.format);
    j.top_key("version", false);
    j.num(u64::from(doc.version));
    if let Some(host) = &doc.host {
        j.top_key("host", false);
        j.str(host);
    }
    if let Some(host_topology) = &doc.host_topology {
        j.top_key("host_topology", false);
        j.serde(host_topology, 1)?;
    }
    if let Some(reserved) = &doc.reserved {
        j.top_key("reserved", false);
        j.serde(reserved, 1)?;
    }
    if let Some(accel) = &doc.accel {
        j.top_key("accel", false);
        j.str(accel);
    }
    j.top_key("placements", false);
    j.buf.push(b'[');
    let mut first = true;
    for p in &doc.placements {
        j.listed(out, first, &PlacementView::of_doc(p))?;
        first = false;
    }
    for p in placed {
        j.listed(out, first, &p)?;
        first = false;
    }
    j.end_list(!first);
    j.top_key("rejected", false);
    j.list_of(&doc.rejected)?;
    if !doc.held.is_empty() {
        j.top_key("held", false);
        j.list_of(&doc.held)?;
    }
    if PRETTY {
        j.buf.push(b'\n');
    }
    j.buf.push(b'}');
    out.write_all(&j.buf)
}

/// A member of an object nested inside a placement, key and separators as
/// one constant (`first`: no separator before it).
macro_rules! inner {
    ($j:expr, $key:literal) => {
        $j.raw(if $j.pretty() { concat!(", \"", $key, "\": ") } else { concat!(",\"", $key, "\":") })
    };
    ($j:expr, first $key:literal) => {
        $j.raw(if $j.pretty() { concat!("\"", $key, "\": ") } else { concat!("\"", $key, "\":") })
    };
}

/// A member of a placement (level 3).
macro_rules! field {
    ($j:expr, $key:literal) => {
        $j.raw(if $j.pretty() { concat!(",\n      \"", $key, "\": ") } else { concat!(",\"", $key, "\":") })
    };
}

struct Json<const PRETTY: bool> {
    buf: Vec<u8>,
    /// Where a planner value is put into words before it is escaped.
    words: String,
}

impl<const PRETTY: bool> Json<PRETTY> {
    /// Laid out for people (the layout is the type's constant).
    #[inline(always)]
    const fn pretty(&self) -> bool {
        PRETTY
    }

    /// A member of the document object (level 1).
    fn top_key(&mut self, key: &str, first: bool) {
        if !first {
            self.buf.push(b',');
        }
        if PRETTY {
            self.buf.extend_from_slice(b"\n  ");
        }
        self.key(key);
    }

    /// An entry of one of the document's lists (level 2).
    fn entry(&mut self, first: bool) {
        if !first {
            self.buf.push(b',');
        }
        if PRETTY {
            self.buf.extend_from_slice(b"\n    ");
        }
    }

    /// A VM's entry of the document's `placements`. A plan of thousands
    /// of VMs is never held whole.
    fn listed<W: Write>(&mut self, out: &mut W, first: bool, p: &PlacementView<'_>) -> io::Result<()> {
        self.entry(first);
        self.placement(p)?;
        if self.buf.len() >= FLUSH_AT {
            out.write_all(&self.buf)?;
            self.buf.clear();
        }
        Ok(())
    }

    /// Closes a document list.
    fn end_list(&mut self, any: bool) {
        if PRETTY && any {
            self.buf.extend_from_slice(b"\n  ");
        }
        self.buf.push(b']');
    }

    /// A document list whose entries serde writes.
    fn list_of<T: Serialize>(&mut self, items: &[T]) -> io::Result<()> {
        self.buf.push(b'[');
        for (i, item) in items.iter().enumerate() {
            self.entry(i == 0);
            self.serde(item, 2)?;
        }
        self.end_list(!items.is_empty());
        Ok(())
    }

    // Inlined, so a constant's length is known where it is copied.
    #[inline(always)]
    fn raw(&mut self, s: &str) {
        self.buf.extend_from_slice(s.as_bytes());
    }

    /// The separator between inline members or list items.
    fn sep(&mut self) {
        self.buf.extend_from_slice(if PRETTY { b", " } else { b"," });
    }

    /// A key from this module: plain ASCII, never escaped.
    fn key(&mut self, key: &str) {
        self.buf.push(b'"');
        self.buf.extend_from_slice(key.as_bytes());
        self.buf.extend_from_slice(if PRETTY { b"\": " } else { b"\":" });
    }

    fn num(&mut self, n: u64) {
        push_num(&mut self.buf, n);
    }

    fn boolean(&mut self, b: bool) {
        self.buf.extend_from_slice(if b { b"true" } else { b"false" });
    }

    /// A string, escaped as serde_json escapes it; the common string with
    /// nothing to escape is copied whole.
    fn str(&mut self, s: &str) {
        if !needs_escape(s.as_bytes()) {
            self.buf.push(b'"');
            self.buf.extend_from_slice(s.as_bytes());
            self.buf.push(b'"');
        } else {
            // Writing a string into memory cannot fail.
            let _ = serde_json::to_writer(&mut self.buf, s);
        }
    }

    /// An inline list of `len` entries, each got by `get` and written by
    /// `write` (the view's lists are indexed, whatever form they are kept in).
    fn entries<T>(&mut self, len: usize, get: impl Fn(usize) -> Option<T>, write: impl Fn(&mut Self, &T)) {
        self.buf.push(b'[');
        for i in 0..len {
            if i > 0 {
                self.sep();
            }
            if let Some(x) = get(i) {
                write(self, &x);
            }
        }
        self.buf.push(b']');
    }

    /// A value serde writes, `depth` containers deep (inline inside a
    /// placement, indented at the document's outer levels).
    fn serde<T: Serialize + ?Sized>(&mut self, value: &T, depth: usize) -> io::Result<()> {
        crate::layout::write_at(&mut self.buf, value, if PRETTY { OUTER } else { 0 }, depth)
    }

    /// A value nested inside a placement, written by serde.
    fn nested<T: Serialize + ?Sized>(&mut self, value: &T) -> io::Result<()> {
        self.serde(value, OUTER + 1)
    }

    fn placement(&mut self, p: &PlacementView<'_>) -> io::Result<()> {
        self.buf.push(b'{');
        if PRETTY {
            self.buf.extend_from_slice(b"\n      ");
        }
        self.key("vm");
        self.str(p.vm);
        field!(self, "new");
        self.boolean(p.new);
        field!(self, "nodes");
        self.nums(p.nodes);
        field!(self, "cpu_mode");
        self.str(p.cpu_mode);
        if !p.pins.is_empty() {
            field!(self, "pins");
            self.nums(p.pins);
        }
        if let Some(n) = p.online_vcpus {
            field!(self, "online_vcpus");
            self.num(u64::from(n));
        }
        if !p.vcpus.is_empty() {
            field!(self, "vcpus");
            self.nested(&*p.vcpus)?;
        }
        field!(self, "cpuset");
        self.nums(p.cpuset);
        field!(self, "emulator");
        self.nums(p.emulator);
        field!(self, "memory");
        self.memory(p.memory);
        field!(self, "memory_bytes");
        self.num(p.memory_bytes);
        field!(self, "memory_mode");
        self.str(p.memory_mode);
        if let Some(n) = p.hugepage_bytes {
            field!(self, "hugepage_bytes");
            self.num(n);
        }
        field!(self, "guest");
        self.guest(p);
        if !p.devices.is_empty() {
            field!(self, "devices");
            self.nested(p.devices)?;
        }
        if !p.floating.is_empty() {
            field!(self, "floating");
            self.nested(&*p.floating)?;
        }
        if !p.charged.is_empty() {
            field!(self, "charged");
            self.memory(p.charged);
        }
        field!(self, "alternatives");
        self.entries(p.alternatives.len(), |i| p.alternatives.get(i), Self::alternative);
        field!(self, "notes");
        self.entries(p.notes.len(), |i| p.notes.get(i), Self::note);
        if let Some(r) = &p.request {
            field!(self, "request");
            self.request(r)?;
        }
        if PRETTY {
            self.buf.extend_from_slice(b"\n    ");
        }
        self.buf.push(b'}');
        Ok(())
    }

    fn memory(&mut self, memory: Mem<'_>) {
        self.buf.push(b'[');
        for (i, (node, bytes)) in memory.iter().enumerate() {
            if i > 0 {
                self.sep();
            }
            self.buf.push(b'{');
            inner!(self, first "node");
            self.num(u64::from(node));
            inner!(self, "bytes");
            self.num(bytes);
            self.buf.push(b'}');
        }
        self.buf.push(b']');
    }

    fn guest(&mut self, g: &PlacementView<'_>) {
        self.buf.push(b'{');
        inner!(self, first "sockets");
        self.num(u64::from(g.sockets));
        if g.dies != 1 {
            inner!(self, "dies");
            self.num(u64::from(g.dies));
        }
        inner!(self, "cores");
        self.num(u64::from(g.cores));
        inner!(self, "threads");
        self.num(u64::from(g.threads));
        inner!(self, "cells");
        self.entries(g.cells.len(), |i| g.cells.get(i), Self::cell);
        self.buf.push(b'}');
    }

    fn cell(&mut self, c: &CellView<'_>) {
        self.buf.push(b'{');
        inner!(self, first "id");
        self.num(u64::from(c.id));
        inner!(self, "vcpus");
        self.nums(c.vcpus);
        inner!(self, "memory_bytes");
        self.num(c.memory_bytes);
        inner!(self, "host_node");
        self.num(u64::from(c.host_node));
        inner!(self, "distances");
        self.seq(c.distances.iter().copied());
        if !c.memory_nodes.is_empty() {
            inner!(self, "memory_nodes");
            self.memory(c.memory_nodes);
        }
        self.buf.push(b'}');
    }

    fn alternative(&mut self, a: &AltView<'_>) {
        self.buf.push(b'{');
        inner!(self, first "nodes");
        self.nums(a.nodes);
        if let Some(code) = a.code {
            inner!(self, "code");
            self.str(code);
        }
        inner!(self, "verdict");
        self.words(&a.verdict);
        a.figs.each(&mut |key, fig| self.figure(key, fig));
        self.buf.push(b'}');
    }

    fn note(&mut self, n: &NoteView<'_>) {
        match n {
            NoteView::Coded { code, text, figs } => {
                self.buf.push(b'{');
                inner!(self, first "code");
                self.str(code);
                inner!(self, "text");
                self.words(text);
                figs.each(&mut |key, fig| self.figure(key, fig));
                self.buf.push(b'}');
            }
            NoteView::Text(text) => self.str(text),
        }
    }

    /// One figure of a note or alternative, as a member of its object.
    fn figure(&mut self, key: &str, fig: Fig<'_>) {
        self.sep();
        self.key(key);
        match fig {
            Fig::Num(n) => self.num(n),
            Fig::Str(s) => self.str(s),
            Fig::Strs(v) => self.entries(v.len(), |i| v.get(i), |j, s| j.str(s)),
            Fig::Nums(n) => self.nums(n),
            Fig::Counts(v) => self.entries(v.len(), |i| v.get(i).copied(), |j, &n| j.num(n as u64)),
            Fig::Cost(c) => {
                self.buf.push(b'{');
                inner!(self, first "total");
                self.num(c.total);
                inner!(self, "siblings");
                self.num(c.siblings);
                if c.pairs > 0 {
                    inner!(self, "pairs");
                    self.num(c.pairs);
                }
                inner!(self, "remote");
                self.num(c.remote);
                inner!(self, "small_cells");
                self.num(c.small_cells);
                if c.device > 0 {
                    inner!(self, "device");
                    self.num(c.device);
                }
                self.buf.push(b'}');
            }
            // Rare (ratios, mean distances): serde_json's own number
            // writing, so the bytes are the reference's. Writing into
            // memory cannot fail.
            Fig::Float(x) => {
                let _ = self.float(x);
            }
            Fig::Tenths(t) => {
                let _ = self.float(t as f64 / 10.0);
            }
            Fig::Number(n) => {
                let _ = serde_json::to_writer(&mut self.buf, n);
            }
        }
    }

    /// A sentence. A planner value is written piece by piece into the
    /// document ([`Sentence::pieces`]); the rare one worded only through
    /// `Display` goes into a buffer kept for the purpose, then is escaped
    /// like any string.
    fn words(&mut self, w: &Words<'_>) {
        match w {
            Words::Text(t) => self.str(t),
            Words::Said(d) => {
                let start = self.buf.len();
                self.buf.push(b'"');
                if d.pieces(&mut InString(&mut self.buf)) {
                    self.buf.push(b'"');
                    return;
                }
                self.buf.truncate(start);
                use std::fmt::Write as _;
                let mut s = std::mem::take(&mut self.words);
                s.clear();
                // Writing into a string cannot fail.
                let _ = write!(s, "{d}");
                self.str(&s);
                self.words = s;
            }
        }
    }

    /// A list in whichever form it is kept.
    fn nums(&mut self, n: Nums<'_>) {
        match n {
            Nums::Slice(s) => self.seq(s.iter().copied()),
            Nums::Set(s) => self.seq(s.iter()),
            Nums::Nodes(s) => self.seq(s.iter().map(|n| n.0)),
            Nums::Pins(s) => self.seq(s.iter().map(|p| p.pu)),
        }
    }

    fn seq(&mut self, items: impl Iterator<Item = u32>) {
        self.buf.push(b'[');
        for (i, n) in items.enumerate() {
            if i > 0 {
                self.sep();
            }
            self.num(u64::from(n));
        }
        self.buf.push(b']');
    }

    fn size(&mut self, s: SizeView<'_>) {
        match s {
            SizeView::Bytes(n) => self.num(n),
            SizeView::Text(t) => self.str(t),
        }
    }

    fn float(&mut self, f: f64) -> io::Result<()> {
        if f == 1.0 {
            // The default, in almost every request.
            self.buf.extend_from_slice(b"1.0");
            Ok(())
        } else {
            self.nested(&f)
        }
    }

    fn request(&mut self, r: &RequestView<'_>) -> io::Result<()> {
        self.buf.push(b'{');
        inner!(self, first "name");
        self.str(r.name);
        inner!(self, "vcpus");
        self.num(u64::from(r.vcpus));
        inner!(self, "memory");
        self.size(r.memory);
        inner!(self, "cpu");
        self.str(r.cpu);
        inner!(self, "smt");
        self.str(r.smt);
        inner!(self, "policy");
        self.str(r.policy);
        if let Some(h) = r.hugepages {
            inner!(self, "hugepages");
            self.size(h);
        }
        inner!(self, "overcommit");
        self.float(r.overcommit)?;
        if let Some(n) = r.max_nodes {
            inner!(self, "max_nodes");
            self.num(u64::from(n));
        }
        if !r.devices.is_empty() {
            inner!(self, "devices");
            self.nested(&*r.devices)?;
        }
        inner!(self, "cpu_hotadd");
        self.boolean(r.cpu_hotadd);
        if let Some(n) = r.max_vcpus {
            inner!(self, "max_vcpus");
            self.num(u64::from(n));
        }
        inner!(self, "force");
        self.boolean(r.force);
        inner!(self, "emulator");
        self.str(&r.emulator);
        if !r.cells.is_empty() {
            inner!(self, "cells");
            self.nested(&*r.cells)?;
        }
        if let Some(n) = r.guest_nodes {
            inner!(self, "guest_nodes");
            self.num(u64::from(n));
        }
        if r.cells_share_nodes {
            inner!(self, "cells_share_nodes");
            self.boolean(true);
        }
        if let Some(f) = r.memory_overcommit {
            inner!(self, "memory_overcommit");
            self.float(f)?;
        }
        if let Some(s) = &r.shared_vcpus {
            inner!(self, "shared_vcpus");
            self.str(s);
        }
        if let Some(s) = &r.memory_kind {
            inner!(self, "memory_kind");
            self.str(s);
        }
        if let Some(s) = &r.memory_tiers {
            inner!(self, "memory_tiers");
            self.str(s);
        }
        self.buf.push(b'}');
        Ok(())
    }
}

/// Whether `s` holds a byte serde_json escapes (a control character, `"`
/// or `\\`), eight bytes at a time: a VM's sentences are most of the
/// bytes of its entry. The word tests never miss such a byte (a false
/// alarm only sends the string through serde).
/// A whole number. Node numbers, vCPUs, most CPU numbers and distances
/// have one or two digits: written in place, not formatted and copied.
fn push_num(buf: &mut Vec<u8>, n: u64) {
    if n < 10 {
        buf.push(b'0' + n as u8);
    } else if n < 100 {
        buf.extend_from_slice(&[b'0' + (n / 10) as u8, b'0' + (n % 10) as u8]);
    } else {
        buf.extend_from_slice(itoa::Buffer::new().format(n).as_bytes());
    }
}

/// A sentence's pieces written inside a JSON string already opened.
struct InString<'a>(&'a mut Vec<u8>);

impl Pieces for InString<'_> {
    fn text(&mut self, s: &'static str) {
        // Plain text by the planner's contract (tested there).
        debug_assert!(!needs_escape(s.as_bytes()), "{s}");
        self.0.extend_from_slice(s.as_bytes());
    }

    fn name(&mut self, s: &str) {
        if !needs_escape(s.as_bytes()) {
            self.0.extend_from_slice(s.as_bytes());
        } else {
            // serde_json's escaping, without the quotes it adds. Writing
            // into memory cannot fail.
            let start = self.0.len();
            let _ = serde_json::to_writer(&mut *self.0, s);
            self.0.pop();
            self.0.remove(start);
        }
    }

    fn num(&mut self, n: u64) {
        push_num(self.0, n);
    }
}

fn needs_escape(s: &[u8]) -> bool {
    const ONES: u64 = u64::from_ne_bytes([1; 8]);
    const HIGH: u64 = ONES * 0x80;
    // A byte of `v` below `n` (n <= 128) sets its high bit here.
    let below = |v: u64, n: u64| v.wrapping_sub(ONES * n) & !v & HIGH;
    let hit = |chunk: &[u8]| {
        let mut word = [0u8; 8];
        word.copy_from_slice(chunk);
        let v = u64::from_ne_bytes(word);
        below(v, 0x20) | below(v ^ (ONES * u64::from(b'"')), 1) | below(v ^ (ONES * u64::from(b'\\')), 1) != 0
    };
    if s.len() < 8 {
        return s.iter().any(|&b| b < 0x20 || b == b'"' || b == b'\\');
    }
    let mut chunks = s.chunks_exact(8);
    if chunks.any(hit) {
        return true;
    }
    // The last eight bytes, overlapping the last whole chunk: no byte
    // by byte tail.
    !s.len().is_multiple_of(8) && hit(&s[s.len() - 8..])
}

#[cfg(test)]
mod tests {
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
        let rejected = (text(), text(), option::of(any::<u64>()), option::of(request())).prop_map(
            |(vm, reason, needed, request)| RejectionDoc {
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
            },
        );
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
        let host_topology = (any::<bool>(), vec((any::<u32>(), nums()), 0..3)).prop_map(|(live, nodes)| {
            HostTopologyDoc { live, nodes: nodes.into_iter().map(|(node, cpus)| HostNodeDoc { node, cpus }).collect() }
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
}
