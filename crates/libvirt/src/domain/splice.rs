//! Splices a planner placement into a libvirt domain's text: only
//! `<vcpu>`, `<vcpus>` (removed), `<cputune>` pins, `<numatune>`, `<cpu>`'s
//! `<topology>` and `<numa>`, and `<memoryBacking>`'s `<hugepages>`
//! change; every other byte of the file stays as it was. Positions come
//! from roxmltree's byte ranges, so nothing is re-serialised.

use super::read::{child, parse_xml};
use super::write::{self as render, Indent, LibvirtOptions};
use super::DomainError;
use numaplace_plan::Placement;
use numaplace_topo::text::xml_escape as escape;
use roxmltree::Node;

/// One text edit: replace `start..end` by `text`.
#[derive(Clone, Debug)]
struct Edit {
    start: usize,
    end: usize,
    text: String,
}

/// The whitespace before a node on its line, if only whitespace is there.
fn indent_of(text: &str, pos: usize) -> Option<&str> {
    let line_start = text.get(..pos)?.rfind('\n').map_or(0, |i| i + 1);
    let before = text.get(line_start..pos)?;
    before.chars().all(|c| c == ' ' || c == '\t').then_some(before)
}

/// The range that removes a node together with its own line, when it sits
/// alone on that line.
fn line_range(text: &str, node: Node<'_, '_>) -> (usize, usize) {
    let r = node.range();
    let Some(ind) = indent_of(text, r.start) else { return (r.start, r.end) };
    let rest = text.get(r.end..).unwrap_or("");
    let trail = rest.len() - rest.trim_start_matches([' ', '\t']).len();
    let after = &rest[trail..];
    if after.starts_with("\r\n") {
        (r.start - ind.len(), r.end + trail + 2)
    } else if after.starts_with('\n') || after.is_empty() {
        (r.start - ind.len(), r.end + trail + usize::from(!after.is_empty()))
    } else {
        (r.start, r.end)
    }
}

fn elements<'a, 'i>(node: Node<'a, 'i>) -> impl Iterator<Item = Node<'a, 'i>> {
    node.children().filter(|c| c.is_element())
}

/// The text of the child elements of `node` not named in `drop`.
fn kept(text: &str, node: Node<'_, '_>, drop: &[&str]) -> Vec<String> {
    elements(node)
        .filter(|c| !drop.contains(&c.tag_name().name()))
        .filter_map(|c| text.get(c.range()).map(str::to_string))
        .collect()
}

fn start_tag(node: Node<'_, '_>) -> String {
    node.attributes().map(|a| format!(" {}='{}'", a.name(), escape(a.value()))).collect()
}

/// Returns a libvirt domain's text with a planner placement spliced in
/// (what `lint --fix` writes): only `<vcpu>`, `<vcpus>` (removed),
/// `<cputune>` pins, `<numatune>`, `<cpu>`'s `<topology>` and `<numa>`,
/// and `<memoryBacking>`'s `<hugepages>` change, written at the file's own
/// indentation; every other byte stays as it was. Fails when the text is
/// not well-formed XML or its root element has no `<vcpu>`.
pub fn splice(text: &str, p: &Placement) -> Result<String, DomainError> {
    let doc = parse_xml(text)?;
    let root = doc.root_element();
    let vcpu = child(root, "vcpu").ok_or(DomainError::Missing("<vcpu>"))?;
    let base = indent_of(text, vcpu.range().start).unwrap_or("  ").to_string();
    let step = if base.is_empty() { "  ".to_string() } else { base.clone() };
    let mut sp = Splice {
        text,
        ind: Indent { base: base.clone(), step },
        base,
        nl: if text.contains("\r\n") { "\r\n" } else { "\n" },
        after_vcpu: vcpu.range().end,
        edits: Vec::new(),
    };
    sp.replace(vcpu, render::vcpu_element(p));
    if let Some(vcpus) = child(root, "vcpus") {
        sp.remove(vcpus);
    }
    sp.cputune(root, p);
    sp.numatune(root, p);
    sp.memory_backing(root, vcpu, p);
    sp.cpu(root, vcpu, p);
    let out = sp.apply();
    // The splice must leave well-formed XML; anything else is a bug here.
    parse_xml(&out)?;
    Ok(out)
}

/// A splice under way: the domain's text, its indentation and line
/// ending, and the edits so far.
struct Splice<'t> {
    text: &'t str,
    ind: Indent,
    /// The indentation of `<vcpu>`: the domain's children's.
    base: String,
    nl: &'static str,
    /// Where an element the domain lacks is added (after `<vcpu>`).
    after_vcpu: usize,
    edits: Vec<Edit>,
}

impl Splice<'_> {
    /// Replaces a node by `text`.
    fn replace(&mut self, node: Node<'_, '_>, text: String) {
        let r = node.range();
        self.edits.push(Edit { start: r.start, end: r.end, text });
    }

    /// Removes a node, with its own line when it sits alone on one.
    fn remove(&mut self, node: Node<'_, '_>) {
        let (start, end) = line_range(self.text, node);
        self.edits.push(Edit { start, end, text: String::new() });
    }

    /// Adds a block on a line of its own after `<vcpu>`.
    fn add_after_vcpu(&mut self, block: String) {
        let at = self.after_vcpu;
        self.edits.push(Edit { start: at, end: at, text: format!("{}{}{block}", self.nl, self.base) });
    }

    /// `<cputune>`: new pins, other tuning kept.
    fn cputune(&mut self, root: Node<'_, '_>, p: &Placement) {
        // A fix plans dedicated vCPUs: their pins need no host CPU map.
        let mut lines = render::cputune_lines(p, &LibvirtOptions::default());
        match child(root, "cputune") {
            Some(tune) => {
                lines.extend(kept(self.text, tune, &["vcpupin", "emulatorpin"]));
                let block = render::block("cputune", &start_tag(tune), &lines, &self.ind, 0);
                self.replace(tune, block);
            }
            None if !lines.is_empty() => {
                let block = render::block("cputune", "", &lines, &self.ind, 0);
                self.add_after_vcpu(block);
            }
            None => {}
        }
    }

    /// `<numatune>`: replaced whole.
    fn numatune(&mut self, root: Node<'_, '_>, p: &Placement) {
        let numa_lines = render::numatune_lines(p);
        match child(root, "numatune") {
            Some(nt) if numa_lines.is_empty() => self.remove(nt),
            Some(nt) => {
                let block = render::block("numatune", "", &numa_lines, &self.ind, 0);
                self.replace(nt, block);
            }
            None if !numa_lines.is_empty() => {
                let block = render::block("numatune", "", &numa_lines, &self.ind, 0);
                self.add_after_vcpu(block);
            }
            None => {}
        }
    }

    /// `<memoryBacking>`: huge pages replaced, other backing kept.
    fn memory_backing(&mut self, root: Node<'_, '_>, vcpu: Node<'_, '_>, p: &Placement) {
        let huge = render::hugepages_element(p, &self.ind, 1);
        match child(root, "memoryBacking") {
            Some(mb) => {
                let mut lines: Vec<String> = huge.into_iter().collect();
                lines.extend(kept(self.text, mb, &["hugepages"]));
                if lines.is_empty() {
                    self.remove(mb);
                } else {
                    let block = render::block("memoryBacking", &start_tag(mb), &lines, &self.ind, 0);
                    self.replace(mb, block);
                }
            }
            None => {
                if let Some(h) = huge {
                    let block = render::block("memoryBacking", "", &[h], &self.ind, 0);
                    let at = vcpu.range().start;
                    self.edits.push(Edit { start: at, end: at, text: format!("{block}{}{}", self.nl, self.base) });
                }
            }
        }
    }

    /// `<cpu>`: topology and cells replaced, model and features kept.
    fn cpu(&mut self, root: Node<'_, '_>, vcpu: Node<'_, '_>, p: &Placement) {
        let cpu_lines = render::cpu_children(p, &self.ind, 0);
        match child(root, "cpu") {
            Some(cpu) => {
                let keep_first = kept(self.text, cpu, &["topology", "numa", "feature", "cache", "maxphysaddr"]);
                let keep_rest: Vec<String> = elements(cpu)
                    .filter(|c| matches!(c.tag_name().name(), "feature" | "cache" | "maxphysaddr"))
                    .filter_map(|c| self.text.get(c.range()).map(str::to_string))
                    .collect();
                let mut lines = keep_first;
                let mut cl = cpu_lines.into_iter();
                lines.extend(cl.next());
                lines.extend(keep_rest);
                lines.extend(cl);
                let block = render::block("cpu", &start_tag(cpu), &lines, &self.ind, 0);
                self.replace(cpu, block);
            }
            None => {
                let anchor = child(root, "features").or_else(|| child(root, "os")).unwrap_or(vcpu);
                let at = anchor.range().end;
                let block = render::block("cpu", " mode='host-passthrough' check='none'", &cpu_lines, &self.ind, 0);
                self.edits.push(Edit { start: at, end: at, text: format!("{}{}{block}", self.nl, self.base) });
            }
        }
    }

    /// The text with the edits made.
    fn apply(mut self) -> String {
        // Later insertions at the same point come after earlier ones.
        self.edits.sort_by_key(|e| (e.start, e.end));
        let (text, nl) = (self.text, self.nl);
        let mut out = String::with_capacity(text.len() + 1024);
        let mut pos = 0usize;
        for e in &self.edits {
            if e.start < pos {
                continue;
            }
            out.push_str(text.get(pos..e.start).unwrap_or(""));
            out.push_str(&e.text.replace('\n', nl).replace("\r\r\n", "\r\n"));
            pos = e.end;
        }
        out.push_str(text.get(pos..).unwrap_or(""));
        out
    }
}

/// A domain's text with a placement merged in, for `numaplace apply`: the
/// NUMA elements spliced as [`splice`] does, numaplace's mark set in
/// `<metadata>` (so a host's state reader knows the domain as
/// numaplace's), and a `<hostdev>` added for each of the placement's
/// devices the domain lacks. Every other byte is kept.
pub fn merge(text: &str, p: &Placement, opts: &render::LibvirtOptions) -> Result<String, DomainError> {
    let marked = mark(&splice(text, p)?, p, opts)?;
    let out = add_hostdevs(&marked, p)?;
    parse_xml(&out)?;
    Ok(out)
}

/// One indentation step: the base's own, or two spaces at column 0.
fn step_of(base: &str) -> String {
    if base.is_empty() {
        "  ".to_string()
    } else {
        base.to_string()
    }
}

/// Sets numaplace's mark in `<metadata>` (replacing an older one),
/// creating the element after `<uuid>` or `<name>` when there is none.
fn mark(text: &str, p: &Placement, opts: &render::LibvirtOptions) -> Result<String, DomainError> {
    let doc = parse_xml(text)?;
    let root = doc.root_element();
    let element = render::metadata_element(p, opts);
    let mut out = text.to_string();
    if let Some(meta) = child(root, "metadata") {
        let base = indent_of(text, meta.range().start).unwrap_or("").to_string();
        let step = step_of(&base);
        match meta.children().find(|c| c.tag_name().namespace() == Some(render::METADATA_NS)) {
            Some(old) => out.replace_range(old.range(), &element),
            // `<metadata/>`: written whole.
            None if meta.first_child().is_none() => {
                out.replace_range(meta.range(), &format!("<metadata>\n{base}{step}{element}\n{base}</metadata>"))
            }
            None => {
                let open_end = text[meta.range()].find('>').map_or(meta.range().start, |i| meta.range().start + i + 1);
                out.insert_str(open_end, &format!("\n{base}{step}{element}"));
            }
        }
    } else if let Some(anchor) = child(root, "uuid").or_else(|| child(root, "name")) {
        let base = indent_of(text, anchor.range().start).unwrap_or("").to_string();
        let step = step_of(&base);
        out.insert_str(anchor.range().end, &format!("\n{base}<metadata>\n{base}{step}{element}\n{base}</metadata>"));
    }
    Ok(out)
}

/// Adds a `<hostdev>` before `</devices>` for each of the placement's
/// devices the domain does not pass through yet.
fn add_hostdevs(text: &str, p: &Placement) -> Result<String, DomainError> {
    if p.devices.is_empty() {
        return Ok(text.to_string());
    }
    let have = super::read("domain", text)?.devices;
    let missing: Vec<&String> = p.devices.iter().filter(|d| !have.iter().any(|h| &h.address == *d)).collect();
    let doc = parse_xml(text)?;
    let Some(devices) = child(doc.root_element(), "devices").filter(|_| !missing.is_empty()) else {
        return Ok(text.to_string());
    };
    let base = indent_of(text, devices.range().start).unwrap_or("").to_string();
    let step = step_of(&base);
    let ind = Indent { base: base.clone(), step: step.clone() };
    let mut add = String::new();
    for d in missing {
        add.push_str(&format!("{step}{}\n{base}", render::hostdev_element(d, &ind, 1)));
    }
    // `</devices>` sits on its own line after `base`: insert before it.
    let mut out = text.to_string();
    out.insert_str(devices.range().end - "</devices>".len(), &add);
    Ok(out)
}
