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
mod tests;
