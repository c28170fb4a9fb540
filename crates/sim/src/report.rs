//! Results for people and tools: the JSON document (wire types), a text
//! table, and a report of SVG charts with an `index.html`. Pure: callers
//! write the strings where they want.

use crate::engine::{PolicyResult, Sample};
use crate::fleet::HostMix;
use crate::host::KindFacts;
use crate::model::Model;
use crate::model::RANGES;
use crate::trace::Trace;
use numaplace_topo::format_size;
use numaplace_topo::text::xml_escape;
use numaplace_wire::sim::{
    FleetSummaryDoc, ModelDoc, PolicyResultDoc, SampleDoc, SensitivityDoc, SimulationDoc, SizeDoc, TraceSummaryDoc,
    FORMAT, VERSION,
};
use std::fmt::Write;

/// The fleet's size for the report header.
pub fn fleet_summary(fleet: &HostMix) -> FleetSummaryDoc {
    let facts: Vec<KindFacts> = fleet.kinds.iter().map(KindFacts::new).collect();
    let mut s = FleetSummaryDoc { hosts: fleet.len() as u64, nodes: 0, pus: 0, memory_bytes: 0 };
    for &k in &fleet.hosts {
        if let Some(f) = facts.get(k) {
            s.nodes += f.nodes.len() as u64;
            s.pus += u64::from(f.total_pus);
            s.memory_bytes += f.total_memory;
        }
    }
    s
}

fn sample_doc(s: &Sample) -> SampleDoc {
    SampleDoc {
        t_s: s.t_s,
        running_vms: s.running_vms,
        accepted: s.accepted,
        rejected: s.rejected,
        cpu_utilisation: s.cpu_utilisation,
        memory_utilisation: s.memory_utilisation,
        smt_shared_vcpu_share: s.smt_shared_vcpu_share,
        remote_share: s.remote_share,
        congested_share: s.congested_share,
        predicted_performance: s.predicted_performance,
        cpu_imbalance: s.cpu_imbalance,
        memory_imbalance: s.memory_imbalance,
    }
}

/// One policy's results as wire data.
pub fn policy_doc(r: &PolicyResult) -> PolicyResultDoc {
    PolicyResultDoc {
        policy: r.policy.name().to_string(),
        hosts: r.hosts.name().to_string(),
        remote_share: r.remote_share(),
        congested_share: r.congested_share(),
        accepted: r.accepted,
        rejected: r.rejected,
        single_node_share: r.single_node_share(),
        memory_locality: r.memory_locality(),
        smt_shared_vcpu_share: r.smt_shared_vcpu_share(),
        predicted_performance: r.predicted_performance(),
        cpu_imbalance: r.cpu_imbalance(),
        memory_imbalance: r.memory_imbalance(),
        stranded_cpu_share: r.stranded_cpu_share(),
        stranded_memory_share: r.stranded_memory_share(),
        peak_running_vms: r.peak_running_vms,
        planner_calls: r.planner_calls,
        final_node_cpu_histogram: r.final_cpu_histogram.to_vec(),
        final_node_memory_histogram: r.final_memory_histogram.to_vec(),
        samples: r.samples.iter().map(sample_doc).collect(),
    }
}

/// The whole results document.
pub fn document(trace: &Trace, fleet: &HostMix, seed: u64, model: &Model, results: &[PolicyResult]) -> SimulationDoc {
    SimulationDoc {
        format: FORMAT.to_string(),
        version: VERSION,
        seed,
        trace: TraceSummaryDoc {
            name: trace.name.clone(),
            vms: trace.vms.len() as u64,
            start_s: trace.start_s,
            end_s: trace.end_s,
        },
        fleet: fleet_summary(fleet),
        model: ModelDoc {
            memory_bound_share: model.memory_bound_share,
            remote_latency: model.remote_latency,
            remote_bandwidth: model.remote_bandwidth,
            sibling_loss: model.sibling_loss,
            hidden_topology_memory: model.hidden_topology_memory,
            reference_distance: model.reference_distance,
            mismatched_topology_memory: model.mismatched_topology_memory,
            bandwidth_per_core: model.bandwidth_per_core,
            cross_cell_share: model.cross_cell_share,
        },
        common_sizes: crate::engine::common_sizes(trace)
            .into_iter()
            .map(|(vcpus, memory_bytes)| SizeDoc { vcpus, memory_bytes })
            .collect(),
        sensitivity: sensitivity(results),
        policies: results.iter().map(policy_doc).collect(),
    }
}

/// Each result's label: the policy, and its host order when the results
/// compare more than one.
pub fn labels(policies: &[PolicyResultDoc]) -> Vec<String> {
    let several = policies.windows(2).any(|w| w[0].hosts != w[1].hosts);
    policies.iter().map(|p| if several { format!("{}/{}", p.policy, p.hosts) } else { p.policy.clone() }).collect()
}

/// Labels best first by performance (ties keep the given order).
fn ranking(labels: &[String], perf: &[f64]) -> Vec<String> {
    let mut order: Vec<usize> = (0..labels.len()).collect();
    order.sort_by(|&a, &b| perf[b].partial_cmp(&perf[a]).unwrap_or(std::cmp::Ordering::Equal));
    order.into_iter().map(|i| labels[i].clone()).collect()
}

/// The sensitivity study: for each parameter of [`RANGES`], every
/// result's predicted performance at both ends and the rankings they give.
/// Empty unless every result followed the variants.
fn sensitivity(results: &[PolicyResult]) -> Vec<SensitivityDoc> {
    let variants: Vec<Vec<f64>> = results.iter().map(PolicyResult::performance_variants).collect();
    if results.is_empty() || variants.iter().any(|v| v.len() != 2 * RANGES.len()) {
        return Vec::new();
    }
    let docs: Vec<PolicyResultDoc> =
        results.iter().map(|r| PolicyResultDoc { samples: Vec::new(), ..policy_doc(r) }).collect();
    let names = labels(&docs);
    let base: Vec<f64> = results.iter().map(|r| r.predicted_performance().unwrap_or(0.0)).collect();
    let base_rank = ranking(&names, &base);
    RANGES
        .iter()
        .enumerate()
        .map(|(k, r)| {
            let low: Vec<f64> = variants.iter().map(|v| v[2 * k]).collect();
            let high: Vec<f64> = variants.iter().map(|v| v[2 * k + 1]).collect();
            let ranking_low = ranking(&names, &low);
            let ranking_high = ranking(&names, &high);
            SensitivityDoc {
                parameter: r.name.to_string(),
                low: r.low,
                high: r.high,
                source: r.source.to_string(),
                ranking_holds: ranking_low == base_rank && ranking_high == base_rank,
                performance_low: low,
                performance_high: high,
                ranking_low,
                ranking_high,
            }
        })
        .collect()
}

fn pct(x: f64) -> String {
    format!("{:.1}%", x * 100.0)
}

/// A figure that may have nothing behind it (no VM placed): `-`.
fn maybe(x: Option<f64>, show: fn(f64) -> String) -> String {
    x.map_or_else(|| "-".to_string(), show)
}

/// Refused share of a policy's VMs above which the run warns that the
/// fleet is saturated: past it most figures describe a full fleet turning
/// VMs away rather than how a policy places them.
pub const SATURATED_SHARE: f64 = 0.10;

/// What a reader of the results should be told before the figures: no VM
/// replayed or placed (the per-VM figures are then `-`, null in JSON), and
/// a saturated fleet. One sentence each, without a `warning:` prefix.
pub fn warnings(doc: &SimulationDoc) -> Vec<String> {
    let mut out = Vec::new();
    if doc.trace.vms == 0 {
        out.push("nothing ran: the trace has no VM to replay (is --limit 0?)".to_string());
        return out;
    }
    let names = labels(&doc.policies);
    let none: Vec<&str> =
        doc.policies.iter().zip(&names).filter(|(p, _)| p.accepted == 0).map(|(_, n)| n.as_str()).collect();
    if !none.is_empty() {
        out.push(format!(
            "no VM was placed by {}: 1-node, remote, smt-shared, congested and perf have nothing to measure \
             and show as - (null in JSON); every VM was refused while the fleet stood empty, so no host fits any \
             of them",
            none.join(", ")
        ));
    }
    // A policy that placed nothing is not short of hosts but of hosts big
    // enough: more of the same would not help, and the note above says so.
    let saturated: Vec<String> = doc
        .policies
        .iter()
        .zip(&names)
        .filter(|(p, _)| p.accepted > 0)
        .map(|(p, n)| (n, p.rejected as f64 / (p.accepted + p.rejected) as f64))
        .filter(|(_, share)| *share > SATURATED_SHARE)
        .map(|(n, share)| format!("{n} {}", pct(share)))
        .collect();
    if !saturated.is_empty() {
        out.push(format!(
            "the fleet is saturated: refused VMs {} (warned above {:.0}%); the figures describe a full fleet more \
             than the policies; try a bigger fleet (more hosts, or larger counts in the fleet file) or fewer VMs \
             (--limit)",
            saturated.join(", "),
            SATURATED_SHARE * 100.0
        ));
    }
    out
}

/// The text table.
pub fn text(doc: &SimulationDoc) -> String {
    let mut out = String::new();
    let days = doc.trace.end_s.saturating_sub(doc.trace.start_s) as f64 / 86400.0;
    let _ = writeln!(out, "trace  {} ({} VMs over {days:.1} days, seed {})", doc.trace.name, doc.trace.vms, doc.seed);
    let _ = writeln!(
        out,
        "fleet  {} hosts, {} nodes, {} CPU threads, {}",
        doc.fleet.hosts,
        doc.fleet.nodes,
        doc.fleet.pus,
        format_size(doc.fleet.memory_bytes)
    );
    let names = labels(&doc.policies);
    if let Some(first) = doc.policies.first() {
        if names.first() == Some(&first.policy) {
            let _ = writeln!(out, "hosts  {} first", first.hosts.trim_end_matches("-first"));
        }
    }
    out.push('\n');
    let head = [
        "policy",
        "accepted",
        "rejected",
        "1-node",
        "remote",
        "smt-shared",
        "congested",
        "perf",
        "cpu-imb",
        "mem-imb",
        "strand-cpu",
        "strand-mem",
    ];
    let rows: Vec<Vec<String>> = doc
        .policies
        .iter()
        .zip(&names)
        .map(|(p, name)| {
            vec![
                name.clone(),
                p.accepted.to_string(),
                p.rejected.to_string(),
                maybe(p.single_node_share, pct),
                maybe(p.remote_share, pct),
                maybe(p.smt_shared_vcpu_share, pct),
                maybe(p.congested_share, pct),
                maybe(p.predicted_performance, |x| format!("{x:.3}")),
                pct(p.cpu_imbalance),
                pct(p.memory_imbalance),
                pct(p.stranded_cpu_share),
                pct(p.stranded_memory_share),
            ]
        })
        .collect();
    let widths: Vec<usize> =
        (0..head.len()).map(|c| rows.iter().map(|r| r[c].len()).chain([head[c].len()]).max().unwrap_or(0)).collect();
    let line = |cells: Vec<&str>| -> String {
        let mut l = String::new();
        for (c, cell) in cells.iter().enumerate() {
            if c == 0 {
                let _ = write!(l, "{cell:<w$}", w = widths[c]);
            } else {
                let _ = write!(l, "  {cell:>w$}", w = widths[c]);
            }
        }
        l.push('\n');
        l
    };
    out.push_str(&line(head.to_vec()));
    for r in &rows {
        out.push_str(&line(r.iter().map(String::as_str).collect()));
    }
    out.push_str(
        "\n1-node: VMs on one node; remote: memory accesses remote; smt-shared: vCPUs sharing a core;\n\
         congested: vCPUs on nodes over their memory bandwidth; perf: predicted throughput per vCPU\n\
         (1 = alone, local, idle memory); imb: node max-min use; strand: free on hosts no common size fits.\n\
         Shares of vCPUs are time means; the model is docs/performance-model.md.\n",
    );
    if !doc.sensitivity.is_empty() {
        let base: Vec<f64> = doc.policies.iter().map(|p| p.predicted_performance.unwrap_or(0.0)).collect();
        let base_rank = ranking(&names, &base);
        let _ = writeln!(out, "\nsensitivity: the ranking by perf, best first, is {}", base_rank.join(" > "));
        let _ = writeln!(out, "with the model above; moving each parameter over its range (perf of each, low - high):");
        let width = names.iter().map(String::len).max().unwrap_or(0);
        for sd in &doc.sensitivity {
            let verdict = if sd.ranking_holds { "the ranking holds" } else { "the ranking CHANGES" };
            let _ = writeln!(out, "  {} {} - {}: {verdict}", sd.parameter, sd.low, sd.high);
            for (end, value, rank) in [("low", sd.low, &sd.ranking_low), ("high", sd.high, &sd.ranking_high)] {
                if *rank != base_rank {
                    let _ = writeln!(out, "    at {end} ({value}): {}", rank.join(" > "));
                }
            }
            let mut line = String::from("   ");
            for (k, name) in names.iter().enumerate() {
                let (lo, hi) = (
                    sd.performance_low.get(k).copied().unwrap_or(0.0),
                    sd.performance_high.get(k).copied().unwrap_or(0.0),
                );
                let _ = write!(line, " {name:>width$} {lo:.3}-{hi:.3}");
                if (k + 1) % 3 == 0 && k + 1 < names.len() {
                    line.push_str("\n   ");
                }
            }
            let _ = writeln!(out, "{line}");
        }
    }
    for w in warnings(doc) {
        let _ = writeln!(out, "\nwarning: {w}.");
    }
    out
}

const COLORS: [&str; 8] = ["#1b9e77", "#d95f02", "#7570b3", "#e7298a", "#66a61e", "#e6ab02", "#a6761d", "#666666"];
const W: f64 = 760.0;
const H: f64 = 380.0;
const LEFT: f64 = 70.0;
const RIGHT: f64 = 150.0;
const TOP: f64 = 40.0;
const BOTTOM: f64 = 50.0;

/// Tick values: about five round steps from `lo` up to the first one at
/// or above `hi` (so the axis ends on a labelled tick).
fn ticks(lo: f64, hi: f64) -> Vec<f64> {
    let span = (hi - lo).max(1e-9);
    let raw = span / 5.0;
    let mag = 10f64.powf(raw.log10().floor());
    let step = [1.0, 2.0, 2.5, 5.0, 10.0].iter().map(|m| m * mag).find(|s| *s >= raw).unwrap_or(10.0 * mag);
    let mut v = (lo / step).ceil() * step;
    let mut out = Vec::new();
    while out.len() < 20 {
        out.push(v);
        if v >= hi - step * 1e-6 {
            break;
        }
        v += step;
    }
    out
}

fn fmt_tick(v: f64, percent: bool) -> String {
    if percent {
        format!("{:.0}%", v * 100.0)
    } else if v.abs() >= 1000.0 {
        format!("{:.0}k", v / 1000.0)
    } else if v.fract().abs() < 1e-9 {
        format!("{v:.0}")
    } else {
        format!("{v:.2}")
    }
}

fn frame(out: &mut String, title: &str, y_label: &str) {
    let _ = write!(
        out,
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{W}\" height=\"{H}\" viewBox=\"0 0 {W} {H}\" \
         font-family=\"sans-serif\" font-size=\"12\">\n<rect width=\"{W}\" height=\"{H}\" fill=\"white\"/>\n\
         <text x=\"{}\" y=\"22\" font-size=\"15\" font-weight=\"bold\">{}</text>\n\
         <text transform=\"translate(16 {}) rotate(-90)\" text-anchor=\"middle\">{}</text>\n",
        LEFT,
        xml_escape(title),
        TOP + (H - TOP - BOTTOM) / 2.0,
        xml_escape(y_label)
    );
}

fn legend(out: &mut String, names: &[&str]) {
    for (i, name) in names.iter().enumerate() {
        let y = TOP + 10.0 + 20.0 * i as f64;
        let x = W - RIGHT + 15.0;
        let _ = writeln!(
            out,
            "<rect x=\"{x}\" y=\"{}\" width=\"14\" height=\"10\" fill=\"{}\"/><text x=\"{}\" y=\"{y}\" dominant-baseline=\"middle\">{}</text>",
            y - 5.0,
            COLORS[i % COLORS.len()],
            x + 20.0,
            xml_escape(name)
        );
    }
}

/// A line chart of one quantity over time, one line per policy. `x` in
/// seconds (shown in days), `percent` formats the y axis as shares.
pub fn line_chart(title: &str, y_label: &str, series: &[(&str, Vec<(f64, f64)>)], percent: bool) -> String {
    let mut out = String::new();
    frame(&mut out, title, y_label);
    let xs = series.iter().flat_map(|(_, p)| p.iter().map(|q| q.0));
    let ys = series.iter().flat_map(|(_, p)| p.iter().map(|q| q.1)).filter(|y| y.is_finite());
    let (x0, x1) = xs.fold((f64::MAX, f64::MIN), |(a, b), x| (a.min(x), b.max(x)));
    let (mut y0, mut y1) = ys.fold((f64::MAX, f64::MIN), |(a, b), y| (a.min(y), b.max(y)));
    let (x0, x1) = if x0 <= x1 { (x0.min(0.0), x1.max(x0 + 1.0)) } else { (0.0, 1.0) };
    if y0 > y1 {
        (y0, y1) = (0.0, 1.0);
    }
    y0 = y0.min(0.0);
    if y1 - y0 < 1e-9 {
        y1 = y0 + 1.0;
    }
    let tks = ticks(y0, y1);
    y1 = y1.max(tks.last().copied().unwrap_or(y1));
    let pw = W - LEFT - RIGHT;
    let ph = H - TOP - BOTTOM;
    let sx = |x: f64| LEFT + (x - x0) / (x1 - x0) * pw;
    let sy = |y: f64| TOP + ph - (y - y0) / (y1 - y0) * ph;
    out.push_str("<g class=\"axes\" stroke=\"#999\">\n");
    for t in &tks {
        let _ = writeln!(
            out,
            "<line x1=\"{LEFT}\" x2=\"{}\" y1=\"{y:.1}\" y2=\"{y:.1}\" stroke=\"#e5e5e5\"/>",
            LEFT + pw,
            y = sy(*t)
        );
    }
    let _ = writeln!(out, "<line x1=\"{LEFT}\" x2=\"{LEFT}\" y1=\"{TOP}\" y2=\"{}\"/>", TOP + ph);
    let _ = writeln!(out, "<line x1=\"{LEFT}\" x2=\"{}\" y1=\"{y}\" y2=\"{y}\"/>", LEFT + pw, y = TOP + ph);
    out.push_str("</g>\n<g class=\"labels\">\n");
    for t in &tks {
        let _ = writeln!(
            out,
            "<text x=\"{}\" y=\"{:.1}\" text-anchor=\"end\" dominant-baseline=\"middle\">{}</text>",
            LEFT - 6.0,
            sy(*t),
            fmt_tick(*t, percent)
        );
    }
    let day = 86400.0;
    for t in ticks(x0 / day, x1 / day).into_iter().filter(|t| *t * day <= x1 + 1e-6) {
        let _ = writeln!(
            out,
            "<text x=\"{:.1}\" y=\"{}\" text-anchor=\"middle\">{}</text>",
            sx(t * day),
            TOP + ph + 18.0,
            fmt_tick(t, false)
        );
    }
    let _ = writeln!(
        out,
        "<text x=\"{}\" y=\"{}\" text-anchor=\"middle\">days since the trace's start</text>",
        LEFT + pw / 2.0,
        H - 10.0
    );
    out.push_str("</g>\n");
    for (i, (name, pts)) in series.iter().enumerate() {
        let points: Vec<String> =
            pts.iter().filter(|p| p.1.is_finite()).map(|&(x, y)| format!("{:.1},{:.1}", sx(x), sy(y))).collect();
        let _ = writeln!(
            out,
            "<polyline class=\"series\" data-policy=\"{}\" fill=\"none\" stroke=\"{}\" stroke-width=\"2\" points=\"{}\"><title>{}</title></polyline>",
            xml_escape(name),
            COLORS[i % COLORS.len()],
            points.join(" "),
            xml_escape(name)
        );
    }
    let names: Vec<&str> = series.iter().map(|(n, _)| *n).collect();
    legend(&mut out, &names);
    out.push_str("</svg>\n");
    out
}

/// A grouped bar chart: one group per category, one bar per policy.
pub fn bar_chart(title: &str, y_label: &str, categories: &[String], series: &[(&str, Vec<f64>)]) -> String {
    let mut out = String::new();
    frame(&mut out, title, y_label);
    let top = series.iter().flat_map(|(_, v)| v.iter().copied()).fold(0.0f64, f64::max).max(1e-9);
    let tks = ticks(0.0, top);
    let y1 = top.max(tks.last().copied().unwrap_or(top));
    let pw = W - LEFT - RIGHT;
    let ph = H - TOP - BOTTOM;
    let sy = |y: f64| TOP + ph - y / y1 * ph;
    let group = pw / categories.len().max(1) as f64;
    let bar = group * 0.8 / series.len().max(1) as f64;
    out.push_str("<g class=\"axes\" stroke=\"#999\">\n");
    for t in &tks {
        let _ = writeln!(
            out,
            "<line x1=\"{LEFT}\" x2=\"{}\" y1=\"{y:.1}\" y2=\"{y:.1}\" stroke=\"#e5e5e5\"/>",
            LEFT + pw,
            y = sy(*t)
        );
    }
    let _ = writeln!(out, "<line x1=\"{LEFT}\" x2=\"{}\" y1=\"{y}\" y2=\"{y}\"/>", LEFT + pw, y = TOP + ph);
    out.push_str("</g>\n<g class=\"labels\">\n");
    for t in &tks {
        let _ = writeln!(
            out,
            "<text x=\"{}\" y=\"{:.1}\" text-anchor=\"end\" dominant-baseline=\"middle\">{}</text>",
            LEFT - 6.0,
            sy(*t),
            fmt_tick(*t, true)
        );
    }
    for (c, cat) in categories.iter().enumerate() {
        let _ = writeln!(
            out,
            "<text x=\"{:.1}\" y=\"{}\" text-anchor=\"middle\">{}</text>",
            LEFT + group * (c as f64 + 0.5),
            TOP + ph + 18.0,
            xml_escape(cat)
        );
    }
    out.push_str("</g>\n");
    for (i, (name, values)) in series.iter().enumerate() {
        let _ = writeln!(
            out,
            "<g class=\"series\" data-policy=\"{}\" fill=\"{}\">",
            xml_escape(name),
            COLORS[i % COLORS.len()]
        );
        for (c, v) in values.iter().enumerate() {
            let x = LEFT + group * c as f64 + group * 0.1 + bar * i as f64;
            let _ = writeln!(
                out,
                "<rect x=\"{x:.1}\" y=\"{:.1}\" width=\"{:.1}\" height=\"{:.1}\"><title>{}: {}</title></rect>",
                sy(*v),
                bar.max(0.5),
                (TOP + ph - sy(*v)).max(0.0),
                xml_escape(name),
                pct(*v)
            );
        }
        out.push_str("</g>\n");
    }
    let names: Vec<&str> = series.iter().map(|(n, _)| *n).collect();
    legend(&mut out, &names);
    out.push_str("</svg>\n");
    out
}

type Pick = fn(&SampleDoc) -> f64;

/// The report's charts: `(file name, title, SVG)`.
pub fn charts(doc: &SimulationDoc) -> Vec<(String, String, String)> {
    let names = labels(&doc.policies);
    let lines: [(&str, &str, &str, Pick, bool); 9] = [
        ("running-vms.svg", "VMs running", "VMs", |s| s.running_vms as f64, false),
        ("rejected.svg", "VMs refused so far", "VMs", |s| s.rejected as f64, false),
        ("cpu-utilisation.svg", "Fleet CPU use", "share of vCPU slots", |s| s.cpu_utilisation, true),
        (
            "smt-shared.svg",
            "vCPUs sharing a core with another busy vCPU",
            "share of running vCPUs",
            |s| s.smt_shared_vcpu_share,
            true,
        ),
        (
            "performance.svg",
            "Predicted throughput per vCPU",
            "relative to alone, local, idle memory",
            |s| s.predicted_performance,
            false,
        ),
        ("remote.svg", "Memory accesses to another node", "share of accesses", |s| s.remote_share, true),
        (
            "congested.svg",
            "vCPUs on nodes over their memory bandwidth",
            "share of running vCPUs",
            |s| s.congested_share,
            true,
        ),
        ("cpu-imbalance.svg", "Node CPU imbalance (max - min use, busy hosts)", "max - min", |s| s.cpu_imbalance, true),
        (
            "memory-imbalance.svg",
            "Node memory imbalance (max - min use, busy hosts)",
            "max - min",
            |s| s.memory_imbalance,
            true,
        ),
    ];
    let mut out = Vec::new();
    for (file, title, y, pick, percent) in lines {
        // Shares of running vCPUs mean nothing while none runs (the
        // replay's first instant): leave those samples out.
        let counts = file.starts_with("running") || file.starts_with("rejected");
        let series: Vec<(&str, Vec<(f64, f64)>)> = doc
            .policies
            .iter()
            .zip(&names)
            .map(|(p, name)| {
                let pts = p.samples.iter().filter(|s| counts || s.running_vms > 0);
                (name.as_str(), pts.map(|s| (s.t_s as f64, pick(s))).collect())
            })
            .collect();
        out.push((file.to_string(), title.to_string(), line_chart(title, y, &series, percent)));
    }
    let cats: Vec<String> = (0..10).map(|i| format!("{}-{}%", i * 10, i * 10 + 10)).collect();
    let hist = |h: &Vec<u64>| -> Vec<f64> {
        let n: u64 = h.iter().sum();
        h.iter().map(|&c| if n == 0 { 0.0 } else { c as f64 / n as f64 }).collect()
    };
    for (file, title, pick) in [
        (
            "node-cpu-use.svg",
            "Final node CPU use",
            (|p: &PolicyResultDoc| &p.final_node_cpu_histogram) as fn(&PolicyResultDoc) -> &Vec<u64>,
        ),
        ("node-memory-use.svg", "Final node memory use", |p: &PolicyResultDoc| &p.final_node_memory_histogram),
    ] {
        let series: Vec<(&str, Vec<f64>)> =
            doc.policies.iter().zip(&names).map(|(p, name)| (name.as_str(), hist(pick(p)))).collect();
        out.push((file.to_string(), title.to_string(), bar_chart(title, "share of nodes", &cats, &series)));
    }
    out
}

/// The report's `index.html`: the table and every chart.
pub fn index_html(doc: &SimulationDoc, charts: &[(String, String, String)]) -> String {
    let mut out = String::from(
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>numaplace simulate</title>\n\
         <style>body{font-family:sans-serif;margin:2em}pre{background:#f6f6f6;padding:1em}img{display:block;margin:1em 0}</style>\n\
         </head><body>\n<h1>numaplace simulate</h1>\n<pre>",
    );
    out.push_str(&xml_escape(&text(doc)));
    out.push_str("</pre>\n");
    for (file, title, _) in charts {
        let _ = writeln!(
            out,
            "<h2>{}</h2>\n<img src=\"{}\" alt=\"{}\">",
            xml_escape(title),
            xml_escape(file),
            xml_escape(title)
        );
    }
    out.push_str("</body></html>\n");
    out
}
