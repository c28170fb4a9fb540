//! Narrowing a floating domain off the CPUs a plan dedicates (or the
//! host reserves): the check decides what each floating thread may use
//! after ([`crate::check::narrowing`]); this writes it into the domain's
//! text, every other byte kept, and works out the live re-pins for a
//! running domain. Apart from [`super`] because it edits a domain the
//! plan does not place, and `lint --fix` narrows with [`narrow_xml`] too.

use super::{child, parse, summary, ApplyError, Prepared, Step};
use crate::Libvirt;
use numaplace_topo::{CpuSet, Topology};

/// Works out how to narrow a floating domain off `taken` (the CPUs
/// dedicated VMs hold after the plan, and the reserved ones), as
/// [`crate::check::decide`] asked: its persistent definition's floating
/// vCPU sets, `<emulatorpin>` (written where there was none) and
/// `<iothreadpin>`s (written for each I/O thread without one), every
/// other byte kept and no mark added (the domain stays whoever's it
/// was); when it runs, the same for its live threads, each from what
/// libvirt reports it may use now. `None`: the domain is no longer
/// defined, so nothing is left to narrow.
pub fn prepare_narrowing(
    lv: &dyn Libvirt,
    vm: &str,
    taken: &CpuSet,
    topology: &Topology,
) -> Result<Option<Prepared>, ApplyError> {
    use crate::check::{iothreads_of, narrowing, Holder, Write};
    let at = format!("{}/{vm}", lv.describe());
    let Some(domain) = lv.domain(vm)? else { return Ok(None) };
    let persistent = lv.persistent_xml(vm)?;
    let (old, _) = parse(&at, &persistent, topology)?;
    let mut steps = Vec::new();
    let mut will = old.clone();
    let holder = Holder::of(&old, false, iothreads_of(&persistent));
    if let Some(Write::Narrow { vcpus, emulator, iothreads, .. }) =
        narrowing(&holder, taken).map_err(ApplyError::Refused)?
    {
        let text = narrowed_xml(&persistent, &vcpus, &emulator, &iothreads);
        let (after, _) = parse(&at, &text, topology)?;
        will = after;
        steps.push(Step::Define { before: Some(persistent), after: text });
    }
    let mut before = summary(&old.placement, &old.vcpu_cpus);
    if domain.running {
        let (live, _) = parse(&at, &domain.xml, topology)?;
        let live_holder = Holder::of(&live, true, iothreads_of(&domain.xml));
        // What the live threads may use now, less the CPUs taken; a
        // thread left nothing goes where the decision put it.
        let decided = narrowing(&live_holder, taken).map_err(ApplyError::Refused)?;
        let Some(Write::Narrow { vcpus, emulator, iothreads, .. }) = decided else {
            return Ok(Some(Prepared {
                vm: vm.to_string(),
                running: true,
                steps,
                restart: Vec::new(),
                before: Some(summary(&live.placement, &live.vcpu_cpus)),
                after: summary(&will.placement, &will.vcpu_cpus),
            }));
        };
        let keep = |now: &CpuSet, fallback: &CpuSet| {
            let kept = now.difference(taken);
            if kept.is_empty() {
                fallback.clone()
            } else {
                kept
            }
        };
        // Stopped since it was read: only its definition is narrowed here,
        // and the commit's second read sees it stopped and voids the run.
        let info = match lv.vcpu_info(vm) {
            Err(e) if e.is_not_running() => Vec::new(),
            other => other?,
        };
        let running = !info.is_empty();
        for v in &info {
            let Some(fallback) = vcpus.get(v.vcpu as usize) else { continue };
            // A vCPU pinned 1:1 (a mixed VM's dedicated one) stays.
            if live_holder.cpus.pinned && v.affinity.len() == 1 {
                continue;
            }
            let target = keep(&v.affinity, fallback);
            if target != v.affinity {
                steps.push(Step::PinVcpu { vcpu: v.vcpu, before: v.affinity.clone(), after: target });
            }
        }
        let now = if running { Some(lv.emulator_affinity(vm)?) } else { None };
        if let Some(now) = now {
            let target = keep(&now, &emulator);
            if target != now {
                steps.push(Step::PinEmulator { before: now, after: target });
            }
        }
        if running && !iothreads.is_empty() {
            for (id, now) in lv.iothread_affinity(vm)? {
                let Some((_, fallback)) = iothreads.iter().find(|t| t.0 == id) else { continue };
                let target = keep(&now, fallback);
                if target != now {
                    steps.push(Step::PinIothread { iothread: id, before: now, after: target });
                }
            }
        }
        before = summary(&live.placement, &info.iter().map(|v| v.affinity.clone()).collect::<Vec<_>>());
    }
    Ok(Some(Prepared {
        vm: vm.to_string(),
        running: domain.running,
        steps,
        restart: Vec::new(),
        before: Some(before),
        after: summary(&will.placement, &will.vcpu_cpus),
    }))
}

/// A domain's text with its floating threads set as a narrowing decided
/// (`vcpus`: each vCPU's CPUs after; `emulator`; each I/O thread's):
/// each `<vcpupin>` that changes is rewritten, the `<vcpu cpuset>` set to
/// what its unpinned vCPUs may use (added when it floated over every
/// CPU), `<emulatorpin>` and `<iothreadpin>` rewritten or added (with a
/// `<cputune>` when there was none). Every other byte is kept.
pub fn narrowed_xml(text: &str, vcpus: &[CpuSet], emulator: &CpuSet, iothreads: &[(u32, CpuSet)]) -> String {
    let opts = roxmltree::ParsingOptions { allow_dtd: false, ..Default::default() };
    let Ok(doc) = roxmltree::Document::parse_with_options(text, opts) else { return text.to_string() };
    let root = doc.root_element();
    let mut edits: Vec<(std::ops::Range<usize>, String)> = Vec::new();
    let vcpu = child(root, "vcpu");
    let cputune = child(root, "cputune");
    let pins: Vec<roxmltree::Node<'_, '_>> =
        cputune.map(|t| t.children().filter(|c| c.has_tag_name("vcpupin")).collect()).unwrap_or_default();
    let pinned = |v: usize| pins.iter().any(|p| p.attribute("vcpu").and_then(|a| a.parse::<usize>().ok()) == Some(v));
    // Set an attribute's value, or add the attribute to the start tag.
    let set_attr = |node: roxmltree::Node<'_, '_>, name: &str, value: &str, edits: &mut Vec<_>| {
        match node.attribute_node(name) {
            Some(a) if a.value() != value => edits.push((a.range_value(), value.to_string())),
            Some(_) => {}
            None => {
                let start = node.range().start;
                let open = text[start..].find(['>', '/']).map_or(start, |i| start + i);
                // `<tag/>`: before the slash; `<tag>`: before the bracket.
                edits.push((open..open, format!(" {name}='{value}'")));
            }
        }
    };
    for pin in &pins {
        let Some(v) = pin.attribute("vcpu").and_then(|a| a.parse::<usize>().ok()) else { continue };
        if let Some(after) = vcpus.get(v) {
            set_attr(*pin, "cpuset", &after.to_list(), &mut edits);
        }
    }
    let unpinned = (0..vcpus.len()).filter(|&v| !pinned(v)).fold(CpuSet::new(), |u, v| u.union(&vcpus[v]));
    if let (Some(v), false) = (vcpu, unpinned.is_empty()) {
        set_attr(v, "cpuset", &unpinned.to_list(), &mut edits);
    }
    // The thread pins: rewritten where present, else added.
    let mut added = String::new();
    let existing = |tag: &str, id: Option<u32>| {
        cputune.and_then(|t| {
            t.children().find(|c| {
                c.has_tag_name(tag)
                    && id.is_none_or(|id| c.attribute("iothread").and_then(|a| a.parse().ok()) == Some(id))
            })
        })
    };
    match existing("emulatorpin", None) {
        Some(e) => set_attr(e, "cpuset", &emulator.to_list(), &mut edits),
        None => added.push_str(&format!("<emulatorpin cpuset='{}'/>", emulator.to_list())),
    }
    for (id, cpus) in iothreads {
        match existing("iothreadpin", Some(*id)) {
            Some(e) => set_attr(e, "cpuset", &cpus.to_list(), &mut edits),
            None => added.push_str(&format!("<iothreadpin iothread='{id}' cpuset='{}'/>", cpus.to_list())),
        }
    }
    if !added.is_empty() {
        match cputune {
            Some(t) => {
                // Before `</cputune>`, indented as its last child is.
                let end = t.range().end;
                let close = text[..end].rfind("</").unwrap_or(end);
                let indent = line_indent(text, t.range().start);
                let inner = format!("{indent}  ");
                let body = added.replace("/><", &format!("/>\n{inner}<"));
                if text[t.range()].ends_with("/>") {
                    // `<cputune/>`: opened and closed around the pins.
                    edits.push((t.range(), format!("<cputune>\n{inner}{body}\n{indent}</cputune>")));
                } else {
                    let lead = text[..close].trim_end_matches([' ', '\t']);
                    let start = lead.len();
                    edits.push((start..close, format!("{inner}{body}\n{indent}")));
                }
            }
            None => {
                // A new `<cputune>` after `<vcpu>` (or first in the domain).
                let (at, indent) = match vcpu {
                    Some(v) => (v.range().end, line_indent(text, v.range().start)),
                    None => {
                        let start = root.range().start;
                        (text[start..].find('>').map_or(start, |i| start + i + 1), "  ".to_string())
                    }
                };
                let inner = format!("{indent}  ");
                let body = added.replace("/><", &format!("/>\n{inner}<"));
                edits.push((at..at, format!("\n{indent}<cputune>\n{inner}{body}\n{indent}</cputune>")));
            }
        }
    }
    edits.sort_by_key(|e| std::cmp::Reverse(e.0.start));
    let mut out = text.to_string();
    for (range, with) in edits {
        out.replace_range(range, &with);
    }
    out
}

/// The whitespace before the element starting at `at` on its line.
fn line_indent(text: &str, at: usize) -> String {
    let start = text[..at].rfind('\n').map_or(0, |i| i + 1);
    text[start..at].chars().take_while(|c| c.is_whitespace()).collect()
}

/// A domain's text with the CPUs of `was` not in `after` taken out of its
/// floating sets: `<vcpu cpuset>` (added as `after` when the domain floats
/// over every CPU), each `<vcpupin cpuset>`, and `<emulatorpin cpuset>`
/// when it was the floating set. A set that would become empty is kept
/// (the planner never takes every CPU a floating vCPU may use). Every
/// other byte is kept.
pub fn narrow_xml(text: &str, was: &CpuSet, after: &CpuSet) -> String {
    let opts = roxmltree::ParsingOptions { allow_dtd: false, ..Default::default() };
    // The text was read as a domain before; if it somehow does not parse
    // now, it goes out unchanged and nothing is narrowed.
    let Ok(doc) = roxmltree::Document::parse_with_options(text, opts) else { return text.to_string() };
    let root = doc.root_element();
    let taken = was.difference(after);
    let narrow = |set: &CpuSet| -> Option<CpuSet> {
        let kept = set.difference(&taken);
        (kept != *set && !kept.is_empty()).then_some(kept)
    };
    // (byte range of an attribute's value, or an insertion point, new text)
    let mut edits: Vec<(std::ops::Range<usize>, String)> = Vec::new();
    let cpuset = |n: roxmltree::Node<'_, '_>| -> Option<(std::ops::Range<usize>, CpuSet)> {
        let value = n.attribute_node("cpuset")?;
        let range = value.range_value();
        Some((range, value.value().parse::<CpuSet>().ok()?))
    };
    let vcpu = child(root, "vcpu");
    let cputune = child(root, "cputune");
    let emulatorpin = cputune.and_then(|t| child(t, "emulatorpin"));
    let pins: Vec<roxmltree::Node<'_, '_>> =
        cputune.map(|t| t.children().filter(|c| c.has_tag_name("vcpupin")).collect()).unwrap_or_default();
    if let Some(v) = vcpu {
        match cpuset(v) {
            Some((range, set)) => {
                if let Some(kept) = narrow(&set) {
                    edits.push((range, kept.to_list()));
                }
            }
            None => {
                // Floating over every CPU: from now on over `after`.
                let start = v.range().start;
                let open = text[start..].find('>').map_or(start, |i| start + i);
                edits.push((open..open, format!(" cpuset='{}'", after.to_list())));
            }
        }
    }
    for pin in &pins {
        if let Some((range, set)) = cpuset(*pin) {
            if let Some(kept) = narrow(&set) {
                edits.push((range, kept.to_list()));
            }
        }
    }
    if let Some(e) = emulatorpin {
        if let Some((range, set)) = cpuset(e) {
            if set == *was {
                if let Some(kept) = narrow(&set) {
                    edits.push((range, kept.to_list()));
                }
            }
        }
    }
    edits.sort_by_key(|e| std::cmp::Reverse(e.0.start));
    let mut out = text.to_string();
    for (range, with) in edits {
        out.replace_range(range, &with);
    }
    out
}
