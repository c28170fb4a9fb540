//! NUMA distance matrices in both hwloc formats.
//!
//! v2 (`<distances2 type="NUMANode" name="NUMALatency">` after the root
//! object) holds the firmware's SLIT values with `<indexes>` naming the
//! nodes. v1 (`<distances>` inside the root object) holds floats relative
//! to the local latency, one `<latency value>` per pair, in the document
//! order of the NUMA nodes; like hwloc 2, a v1 matrix is taken as the NUMA
//! matrix when it has one row per node.

use super::tree::{attr_u64, field, parse_u64};
use crate::ParseError;
use numaplace_topo::{NodeId, LOCAL_DISTANCE};
use roxmltree::Node;
use std::collections::HashMap;

/// How a v2 matrix names its objects.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Indexing {
    Os,
    Gp,
}

/// The NUMA latency matrix of a v2 file, rows and columns in the order of
/// `nodes`; `None` when the file has none or it covers only some nodes.
/// `gp_nodes` maps `gp_index` to node for matrices indexed that way.
pub(super) fn v2(
    topology: Node<'_, '_>,
    nodes: &[NodeId],
    gp_nodes: &HashMap<u64, NodeId>,
) -> Result<Option<Vec<Vec<u32>>>, ParseError> {
    let numa: Vec<Node<'_, '_>> = topology
        .children()
        .filter(|c| c.has_tag_name("distances2"))
        .filter(|c| {
            c.attribute("type").is_some_and(|t| t.eq_ignore_ascii_case("NUMANode") || t.eq_ignore_ascii_case("Node"))
        })
        .collect();
    // hwloc >= 2.1 names the firmware matrix; 2.0 wrote it unnamed.
    let chosen = numa
        .iter()
        .find(|d| d.attribute("name") == Some("NUMALatency"))
        .or_else(|| numa.iter().find(|d| d.attribute("name").is_none()));
    let Some(&el) = chosen else {
        return Ok(None);
    };
    let n = attr_u64(el, "nbobjs")?.ok_or_else(|| ParseError::Missing(field(el, "nbobjs")))?;
    let indexing = match el.attribute("indexing").map(str::trim) {
        Some("os") => Indexing::Os,
        Some("gp") => Indexing::Gp,
        Some(other) => return Err(ParseError::bad(field(el, "indexing"), "`os` or `gp`", other)),
        None => return Err(ParseError::Missing(field(el, "indexing"))),
    };
    let indexes = numbers(el, "indexes")?;
    let values = numbers(el, "u64values")?;
    let count = |what: &str, found: usize, expected: Option<u64>, description: &'static str| {
        if expected == Some(found as u64) {
            Ok(())
        } else {
            Err(ParseError::bad(field(el, what), description, &format!("{found} values for nbobjs={n}")))
        }
    };
    count("indexes", indexes.len(), Some(n), "one index per object (nbobjs)")?;
    count("u64values", values.len(), n.checked_mul(n), "nbobjs x nbobjs values")?;
    if n < 2 {
        return Ok(None);
    }
    let mut ids = Vec::with_capacity(indexes.len());
    for &index in &indexes {
        let id = match indexing {
            Indexing::Os => u32::try_from(index).ok().map(NodeId).filter(|id| nodes.contains(id)),
            Indexing::Gp => gp_nodes.get(&index).copied(),
        };
        let id = id.ok_or_else(|| {
            ParseError::bad(field(el, "indexes"), "indexes of NUMA nodes of this file", &index.to_string())
        })?;
        if ids.contains(&id) {
            return Err(ParseError::bad(field(el, "indexes"), "each node once", &index.to_string()));
        }
        ids.push(id);
    }
    let u32_values: Vec<u32> = values
        .iter()
        .map(|&v| {
            u32::try_from(v)
                .map_err(|_| ParseError::bad(field(el, "u64values"), "distances below 2^32", &v.to_string()))
        })
        .collect::<Result<_, _>>()?;
    Ok(reorder(&ids, &u32_values, nodes))
}

/// The whitespace-separated numbers of all `tag` children, concatenated
/// (hwloc splits long lists over several elements).
fn numbers(el: Node<'_, '_>, tag: &str) -> Result<Vec<u64>, ParseError> {
    let mut out = Vec::new();
    for child in el.children().filter(|c| c.has_tag_name(tag)) {
        for word in child.text().unwrap_or("").split_ascii_whitespace() {
            let v = parse_u64(word).ok_or_else(|| ParseError::bad(field(el, tag), "unsigned integers", word))?;
            out.push(v);
        }
    }
    Ok(out)
}

/// Lays a matrix over `ids` out over `nodes`; `None` when the matrix does
/// not cover every node (hwloc drops distances of removed nodes, and a
/// partial matrix cannot be completed honestly).
fn reorder(ids: &[NodeId], values: &[u32], nodes: &[NodeId]) -> Option<Vec<Vec<u32>>> {
    let n = ids.len();
    if n != nodes.len() {
        return None;
    }
    let pos: Vec<usize> = nodes.iter().map(|id| ids.iter().position(|x| x == id)).collect::<Option<_>>()?;
    Some(pos.iter().map(|&i| pos.iter().map(|&j| values.get(i * n + j).copied().unwrap_or(0)).collect()).collect())
}

/// The NUMA matrix of a v1 file, rows in the order of `nodes` (document
/// order, as v1 matrices are). Every root matrix is checked for its value
/// count, as hwloc refuses the whole file when one is short.
pub(super) fn v1(root: Node<'_, '_>, nodes: &[NodeId]) -> Result<Option<Vec<Vec<u32>>>, ParseError> {
    let mut chosen = None;
    for el in root.children().filter(|c| c.has_tag_name("distances")) {
        let n = attr_u64(el, "nbobjs")?.ok_or_else(|| ParseError::Missing(field(el, "nbobjs")))?;
        let base = match el.attribute("latency_base") {
            None => 1.0,
            Some(v) => {
                parse_float(v).ok_or_else(|| ParseError::bad(field(el, "latency_base"), "a finite number", v))?
            }
        };
        let mut values = Vec::new();
        for latency in el.children().filter(|c| c.has_tag_name("latency")) {
            let raw = latency.attribute("value").ok_or_else(|| ParseError::Missing(field(latency, "value")))?;
            let v = parse_float(raw).ok_or_else(|| ParseError::bad(field(latency, "value"), "a finite number", raw))?;
            values.push(v * base);
        }
        if n.checked_mul(n) != Some(values.len() as u64) {
            return Err(ParseError::bad(
                field(el, "latency"),
                "nbobjs x nbobjs latency values",
                &format!("{} values for nbobjs={n}", values.len()),
            ));
        }
        if chosen.is_none() && n >= 2 && n == nodes.len() as u64 {
            chosen = Some((el, values));
        }
    }
    let Some((el, values)) = chosen else {
        return Ok(None);
    };
    let n = nodes.len();
    let slit = to_slit(&values, n).ok_or_else(|| {
        ParseError::bad(field(el, "latency"), "latencies that scale to SLIT distances", "out of range")
    })?;
    Ok(Some(slit.chunks(n).map(<[u32]>::to_vec).collect()))
}

/// Scales v1 relative latencies (1.0 = local, often with a base of 10) to
/// SLIT values (10 = local). When every node's self-latency is the same,
/// that value becomes 10; otherwise values are taken as they are.
fn to_slit(values: &[f64], n: usize) -> Option<Vec<u32>> {
    let diagonal: Vec<f64> = (0..n).filter_map(|i| values.get(i * n + i).copied()).collect();
    let first = *diagonal.first()?;
    let uniform = first > 0.0 && diagonal.iter().all(|&d| (d - first).abs() <= first * 1e-6);
    let scale = if uniform { f64::from(LOCAL_DISTANCE) / first } else { 1.0 };
    values
        .iter()
        .map(|&v| {
            let s = (v * scale).round();
            (s.is_finite() && (0.0..=f64::from(u32::MAX)).contains(&s)).then_some(s as u32)
        })
        .collect()
}

fn parse_float(s: &str) -> Option<f64> {
    s.trim().parse::<f64>().ok().filter(|v| v.is_finite())
}
