//! The topology as a picture: packages framing their NUMA nodes, nodes
//! holding their cores, cores holding their hardware threads. Nodes that
//! belong to no single package (memory-only nodes, nodes spanning sockets)
//! are drawn in a frame of their own.
//!
//! Layout is a simple flow (left to right, wrapping), computed from sizes
//! alone, so the same topology always gives the same bytes.
//!
//! One renderer draws both pictures: [`topology`] (the CLI's standalone
//! document) and [`host`] (the web view's host page: the same drawing with
//! each thread's VM, hatched per VM, and the host's reserved CPUs). Every
//! name drawn is escaped here.

use numaplace_plan::HostState;
use numaplace_topo::text::xml_escape;
use numaplace_topo::{format_size, CpuSet, Topology};
use std::collections::BTreeMap;
use std::fmt::Write;

const MAX_ROW: f64 = 1400.0;
const GAP: f64 = 6.0;
const CORES_PER_ROW: usize = 8;
const PALETTE: [&str; 8] = ["#dbeafe", "#dcfce7", "#fef3c7", "#fce7f3", "#e0e7ff", "#ccfbf1", "#fee2e2", "#f3e8ff"];

/// The classes the drawing uses: inside the standalone document as its
/// `<style>`, and served as a file for the web view (whose
/// Content-Security-Policy refuses inline style).
pub const STYLE: &str = ".title{font-size:13px;font-weight:bold} .sub{font-size:11px;fill:#334155} \
.frame-title{font-size:13px;font-weight:bold;fill:#0f172a} .pu-label{font-size:10px;text-anchor:middle} \
.heading{font-size:15px;font-weight:bold}";

/// Colours and hatch angles for VMs, assigned in name order on a host:
/// readable without colour, each VM has its own hatch too.
const COLOURS: [&str; 8] = ["#4e79a7", "#f28e2b", "#59a14f", "#b07aa1", "#76b7b2", "#edc948", "#ff9da7", "#9c755f"];
const ANGLES: [u32; 4] = [45, 135, 0, 90];

/// A VM's look in the host picture and beside it (the web view's list of
/// VMs draws the same swatch): the pattern `#vmN`, its colour and hatch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct VmStyle {
    /// N of the pattern's id, `vmN`.
    pub index: usize,
    /// Its colour.
    pub colour: &'static str,
    /// Its hatch's angle, degrees.
    pub angle: u32,
}

/// The VMs on a host in name order, each with its style.
pub fn vm_styles(state: &HostState) -> BTreeMap<String, VmStyle> {
    let mut names: Vec<&str> = state.placements().iter().map(|p| p.vm.as_str()).collect();
    names.sort_unstable();
    names.dedup();
    names
        .into_iter()
        .enumerate()
        .map(|(i, n)| {
            let style = VmStyle {
                index: i,
                colour: COLOURS[i % COLOURS.len()],
                angle: ANGLES[(i / COLOURS.len()) % ANGLES.len()],
            };
            (n.to_string(), style)
        })
        .collect()
}

/// Who holds each thread: the VM and what of it (`v3` for vCPU 3, `emu`
/// for its emulator's own CPU, `idle` for a sibling it keeps idle), read
/// from the state's one map of holders ([`numaplace_plan::CpuMap`]).
pub fn holders(state: &HostState) -> BTreeMap<u32, Vec<(String, String)>> {
    let map = state.cpu_map();
    map.iter().map(|(pu, on)| (pu, on.iter().map(|h| (h.vm.clone(), h.what.to_string())).collect())).collect()
}

/// What the host picture adds to the topology's: who is on each thread.
struct Occupancy {
    styles: BTreeMap<String, VmStyle>,
    on_pu: BTreeMap<u32, Vec<(String, String)>>,
    reserved: CpuSet,
    free_memory: BTreeMap<u32, u64>,
}

/// Sizes of the drawing: the topology alone has narrow threads; the host
/// picture writes a VM's name in each, so its threads are wider.
#[derive(Clone, Copy)]
struct Scale {
    pu_w: f64,
    core_h: f64,
}

const TOPOLOGY: Scale = Scale { pu_w: 30.0, core_h: 22.0 };
const HOST: Scale = Scale { pu_w: 64.0, core_h: 30.0 };

struct Block {
    w: f64,
    h: f64,
    body: String,
}

fn node_block(t: &Topology, i: usize, occ: Option<&Occupancy>) -> Block {
    let Scale { pu_w, core_h } = if occ.is_some() { HOST } else { TOPOLOGY };
    let node = &t.nodes()[i];
    let cores: Vec<usize> = t.cores_of_node(i).collect();
    let threads = cores.iter().map(|&c| t.cores()[c].cpus.len()).max().unwrap_or(1).max(1);
    let core_w = threads as f64 * pu_w + 4.0;
    let cols = cores.len().clamp(1, CORES_PER_ROW);
    let rows = cores.len().div_ceil(CORES_PER_ROW);
    let w = (cols as f64 * (core_w + GAP) + GAP).max(190.0);
    let h = 44.0 + rows as f64 * (core_h + GAP) + GAP;
    let fill = if cores.is_empty() { "#f1f5f9" } else { PALETTE[i % PALETTE.len()] };
    let mut body = String::new();
    let _ = write!(
        body,
        r##"<g class="node" data-node="{id}"><rect x="0" y="0" width="{w}" height="{h}" rx="6" fill="{fill}" stroke="#334155"/>"##,
        id = node.id.0
    );
    let kind = if t.has_cpus(i) || !cores.is_empty() {
        node.kind.as_deref().map(|k| format!(" {k}")).unwrap_or_default()
    } else {
        // Memory-only: its kind and the CPU nodes it is local to.
        let (_, label) = crate::text::memory_only_label(t, i);
        format!(" {}", label.trim().trim_start_matches('[').trim_end_matches(']'))
    };
    let free = occ.and_then(|o| o.free_memory.get(&node.id.0)).map(|f| format!(" · {} free", format_size(*f)));
    // The L3 group (cache position) of each core; on a node of several
    // (an EPYC CCX), neighbouring groups are outlined in two colours and
    // each core carries its group, as the planner keeps small VMs in one.
    let l3_of = |c: usize| t.cores()[c].cpus.first().and_then(|pu| t.caches().iter().position(|x| x.cpus.contains(pu)));
    let mut l3: Vec<usize> = cores.iter().filter_map(|&c| l3_of(c)).collect();
    l3.dedup();
    let l3_note = if l3.len() > 1 { format!(" · {} L3 groups", l3.len()) } else { String::new() };
    let _ = write!(
        body,
        r##"<text x="8" y="17" class="title">{} · {}{}{}</text><text x="8" y="33" class="sub">{} cores · {} PUs{l3_note}</text>"##,
        node.id,
        format_size(node.memory_bytes),
        free.unwrap_or_default(),
        xml_escape(&kind),
        cores.len(),
        t.node_online_cpus(i).len()
    );
    for (k, &c) in cores.iter().enumerate() {
        let x = GAP + (k % CORES_PER_ROW) as f64 * (core_w + GAP);
        let y = 42.0 + (k / CORES_PER_ROW) as f64 * (core_h + GAP);
        let cpus = &t.cores()[c].cpus;
        let (group, stroke) = match l3_of(c).and_then(|g| l3.iter().position(|&x| x == g)).filter(|_| l3.len() > 1) {
            Some(n) => (format!(r#" data-l3="{n}""#), if n % 2 == 0 { "#64748b" } else { "#b45309" }),
            None => (String::new(), "#64748b"),
        };
        let _ = write!(
            body,
            r##"<g class="core"{group} transform="translate({x},{y})"><rect width="{core_w}" height="{core_h}" rx="3" fill="#ffffff" stroke="{stroke}"/>"##
        );
        for (j, pu) in cpus.iter().enumerate() {
            let px = 2.0 + j as f64 * pu_w;
            // A thread: its number, and on a host its VM (the name's
            // first 7 characters drawn, the whole name in its title and
            // `data-vm`) or "host" for a reserved CPU.
            let (fill, label, vm_attr, title) = match occ {
                None => ("#e2e8f0".to_string(), String::new(), String::new(), None),
                Some(o) => match o.on_pu.get(&pu).and_then(|h| h.first()) {
                    Some((vm, what)) => {
                        let i = o.styles.get(vm).map_or(0, |s| s.index);
                        let short: String = vm.chars().take(7).collect();
                        (
                            format!("url(#vm{i})"),
                            format!(" {short}"),
                            format!(r#" data-vm="{}""#, xml_escape(vm)),
                            Some(format!("PU {pu}: {vm} {what}")),
                        )
                    }
                    None if o.reserved.contains(pu) => (
                        "url(#resv)".into(),
                        " host".into(),
                        String::new(),
                        Some(format!("PU {pu}: reserved for the host")),
                    ),
                    None => ("#ffffff".into(), " -".into(), String::new(), Some(format!("PU {pu}: free"))),
                },
            };
            let title = title.map(|t| format!("<title>{}</title>", xml_escape(&t))).unwrap_or_default();
            let _ = write!(
                body,
                r##"<g class="pu" data-pu="{pu}"{vm_attr}>{title}<rect class="fill" x="{px}" y="2" width="{}" height="{}" fill="{fill}" stroke="#64748b"/>"##,
                pu_w - 2.0,
                core_h - 4.0,
            );
            if occ.is_some() {
                // A white band under the words keeps them readable on
                // any hatch.
                let _ = write!(
                    body,
                    r##"<rect x="{}" y="{}" width="{}" height="12" fill="#ffffff" opacity=".85"/>"##,
                    px + 2.0,
                    core_h / 2.0 - 6.0,
                    pu_w - 6.0
                );
            }
            let _ = write!(
                body,
                r##"<text x="{}" y="{}" class="pu-label">{pu}{}</text></g>"##,
                px + (pu_w - 2.0) / 2.0,
                core_h / 2.0 + 4.0,
                xml_escape(&label)
            );
        }
        body.push_str("</g>");
    }
    body.push_str("</g>");
    Block { w, h, body }
}

/// Lays blocks out left to right, wrapping at `max_w`; returns the
/// combined size and markup.
fn flow(blocks: Vec<Block>, max_w: f64, pad: f64, top: f64) -> Block {
    let (mut x, mut y, mut row_h, mut w) = (pad, top, 0.0f64, 0.0f64);
    let mut body = String::new();
    for b in blocks {
        if x > pad && x + b.w + pad > max_w {
            x = pad;
            y += row_h + pad;
            row_h = 0.0;
        }
        let _ = write!(body, r##"<g transform="translate({x},{y})">{}</g>"##, b.body);
        x += b.w + pad;
        w = w.max(x);
        row_h = row_h.max(b.h);
    }
    Block { w, h: y + row_h + pad, body }
}

fn frame(title: &str, inner: Block, class: &str) -> Block {
    let (w, h) = (inner.w, inner.h);
    let body = format!(
        r##"<g class="{class}"><rect x="0" y="0" width="{w}" height="{h}" rx="8" fill="#f8fafc" stroke="#0f172a" stroke-width="1.5"/><text x="10" y="18" class="frame-title">{}</text>{}</g>"##,
        xml_escape(title),
        inner.body
    );
    Block { w, h, body }
}

/// The packages' frames with their nodes, laid out.
fn drawing(t: &Topology, occ: Option<&Occupancy>, top: f64) -> Block {
    let mut by_pkg: Vec<(Option<u32>, Vec<usize>)> = Vec::new();
    for i in 0..t.nodes().len() {
        let pkg = t.package_of_node(i);
        match by_pkg.iter_mut().find(|(p, _)| *p == pkg) {
            Some((_, v)) => v.push(i),
            None => by_pkg.push((pkg, vec![i])),
        }
    }
    // Packages in id order, the package-less group last.
    by_pkg.sort_by_key(|(p, _)| (p.is_none(), *p));
    let frames: Vec<Block> = by_pkg
        .into_iter()
        .map(|(pkg, nodes)| {
            let inner = flow(nodes.iter().map(|&i| node_block(t, i, occ)).collect(), MAX_ROW - 40.0, 10.0, 28.0);
            match pkg {
                Some(p) => frame(&format!("package {p}"), inner, "package"),
                None if t.package_count() == 0 => frame("machine", inner, "machine"),
                None => frame("nodes outside a single package", inner, "machine"),
            }
        })
        .collect();
    flow(frames, MAX_ROW, 14.0, top)
}

/// Renders a topology as a standalone SVG document.
pub fn topology(t: &Topology) -> String {
    let all = drawing(t, None, 50.0);
    let title =
        format!("{} — {}, {}", t.name().unwrap_or("host"), crate::text::counts(t), format_size(t.total_memory()));
    let (w, h) = (all.w.max(420.0), all.h);
    let mut out = String::new();
    let _ = write!(
        out,
        r##"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" viewBox="0 0 {w} {h}" font-family="sans-serif"><style>{STYLE}</style><rect width="100%" height="100%" fill="#ffffff"/><text x="14" y="30" class="heading">{}</text>{}</svg>"##,
        xml_escape(&title),
        all.body
    );
    out.push('\n');
    out
}

/// The host picture for a page: the topology drawn as [`topology`] draws
/// it, each thread with the VM on it (its name, its hatch, `data-vm`) or
/// "host" when it is reserved, each node with its free memory. An `<svg>`
/// element to put in HTML (`id="hostmap"`), styled by [`STYLE`], which the
/// page loads; it holds no `<style>` of its own.
pub fn host(t: &Topology, state: &HostState) -> String {
    let free_memory = t.nodes().iter().filter_map(|n| state.free_memory_bytes(n.id).map(|f| (n.id.0, f))).collect();
    let occ = Occupancy {
        styles: vm_styles(state),
        on_pu: holders(state),
        reserved: state.reservations().cpus.clone(),
        free_memory,
    };
    let all = drawing(t, Some(&occ), 10.0);
    let mut defs = String::from(
        r##"<pattern id="resv" width="6" height="6" patternUnits="userSpaceOnUse"><rect width="6" height="6" fill="#ddd"/><path d="M0 0L6 6M6 0L0 6" stroke="#777"/></pattern>"##,
    );
    for s in occ.styles.values() {
        let _ = write!(
            defs,
            r##"<pattern id="vm{i}" width="6" height="6" patternUnits="userSpaceOnUse" patternTransform="rotate({a})"><rect width="6" height="6" fill="{c}"/><line x1="0" y1="0" x2="0" y2="6" stroke="#fff" stroke-width="1.5" opacity=".7"/></pattern>"##,
            i = s.index,
            a = s.angle,
            c = s.colour
        );
    }
    let (w, h) = (all.w.max(420.0), all.h);
    format!(
        r##"<svg id="hostmap" xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" viewBox="0 0 {w} {h}" font-family="sans-serif" role="img" aria-label="Host map: each thread with its PU number and the VM pinned there"><defs>{defs}</defs>{}</svg>"##,
        all.body
    )
}
