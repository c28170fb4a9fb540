//! The topology as a picture: packages framing their NUMA nodes, nodes
//! holding their cores, cores holding their hardware threads. Nodes that
//! belong to no single package (memory-only nodes, nodes spanning sockets)
//! are drawn in a frame of their own.
//!
//! Layout is a simple flow (left to right, wrapping), computed from sizes
//! alone, so the same topology always gives the same bytes.

use numaplace_topo::{format_size, Topology};
use std::fmt::Write;

const MAX_ROW: f64 = 1400.0;
const PU_W: f64 = 30.0;
const CORE_H: f64 = 22.0;
const GAP: f64 = 6.0;
const CORES_PER_ROW: usize = 8;
const PALETTE: [&str; 8] = ["#dbeafe", "#dcfce7", "#fef3c7", "#fce7f3", "#e0e7ff", "#ccfbf1", "#fee2e2", "#f3e8ff"];

struct Block {
    w: f64,
    h: f64,
    body: String,
}

fn esc(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;")
}

fn node_block(t: &Topology, i: usize) -> Block {
    let node = &t.nodes()[i];
    let cores: Vec<usize> = t.cores_of_node(i).collect();
    let threads = cores.iter().map(|&c| t.cores()[c].cpus.len()).max().unwrap_or(1).max(1);
    let core_w = threads as f64 * PU_W + 4.0;
    let cols = cores.len().clamp(1, CORES_PER_ROW);
    let rows = cores.len().div_ceil(CORES_PER_ROW);
    let w = (cols as f64 * (core_w + GAP) + GAP).max(190.0);
    let h = 44.0 + rows as f64 * (CORE_H + GAP) + GAP;
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
    // The L3 group (cache position) of each core; on a node of several
    // (an EPYC CCX), neighbouring groups are outlined in two colours and
    // each core carries its group, as the planner keeps small VMs in one.
    let l3_of = |c: usize| t.cores()[c].cpus.first().and_then(|pu| t.caches().iter().position(|x| x.cpus.contains(pu)));
    let mut l3: Vec<usize> = cores.iter().filter_map(|&c| l3_of(c)).collect();
    l3.dedup();
    let l3_note = if l3.len() > 1 { format!(" · {} L3 groups", l3.len()) } else { String::new() };
    let _ = write!(
        body,
        r##"<text x="8" y="17" class="title">{} · {}{}</text><text x="8" y="33" class="sub">{} cores · {} PUs{l3_note}</text>"##,
        node.id,
        format_size(node.memory_bytes),
        esc(&kind),
        cores.len(),
        t.node_online_cpus(i).len()
    );
    for (k, &c) in cores.iter().enumerate() {
        let x = GAP + (k % CORES_PER_ROW) as f64 * (core_w + GAP);
        let y = 42.0 + (k / CORES_PER_ROW) as f64 * (CORE_H + GAP);
        let cpus = &t.cores()[c].cpus;
        let (group, stroke) = match l3_of(c).and_then(|g| l3.iter().position(|&x| x == g)).filter(|_| l3.len() > 1) {
            Some(n) => (format!(r#" data-l3="{n}""#), if n % 2 == 0 { "#64748b" } else { "#b45309" }),
            None => (String::new(), "#64748b"),
        };
        let _ = write!(
            body,
            r##"<g class="core"{group} transform="translate({x},{y})"><rect width="{core_w}" height="{CORE_H}" rx="3" fill="#ffffff" stroke="{stroke}"/>"##
        );
        for (j, pu) in cpus.iter().enumerate() {
            let px = 2.0 + j as f64 * PU_W;
            let _ = write!(
                body,
                r##"<rect class="pu" x="{px}" y="2" width="{}" height="{}" fill="#e2e8f0"/><text x="{}" y="15" class="pu-label">{pu}</text>"##,
                PU_W - 2.0,
                CORE_H - 4.0,
                px + (PU_W - 2.0) / 2.0
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
        esc(title),
        inner.body
    );
    Block { w, h, body }
}

/// Renders a topology as a standalone SVG document.
pub fn topology(t: &Topology) -> String {
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
            let inner = flow(nodes.iter().map(|&i| node_block(t, i)).collect(), MAX_ROW - 40.0, 10.0, 28.0);
            match pkg {
                Some(p) => frame(&format!("package {p}"), inner, "package"),
                None if t.package_count() == 0 => frame("machine", inner, "machine"),
                None => frame("nodes outside a single package", inner, "machine"),
            }
        })
        .collect();
    let all = flow(frames, MAX_ROW, 14.0, 50.0);
    let title =
        format!("{} — {}, {}", t.name().unwrap_or("host"), crate::text::counts(t), format_size(t.total_memory()));
    let (w, h) = (all.w.max(420.0), all.h);
    let mut out = String::new();
    let _ = write!(
        out,
        r##"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" viewBox="0 0 {w} {h}" font-family="sans-serif"><style>.title{{font-size:13px;font-weight:bold}} .sub{{font-size:11px;fill:#334155}} .frame-title{{font-size:13px;font-weight:bold;fill:#0f172a}} .pu-label{{font-size:10px;text-anchor:middle}} .heading{{font-size:15px;font-weight:bold}}</style><rect width="100%" height="100%" fill="#ffffff"/><text x="14" y="30" class="heading">{}</text>{}</svg>"##,
        esc(&title),
        all.body
    );
    out.push('\n');
    out
}
