//! numaplace's host topology model: CPU sets, packages, NUMA nodes, cores,
//! PUs, caches, memory and huge pages, distances and devices.
//!
//! This crate knows no file, no path and no format: readers (the
//! `numaplace-read` crate) build a [`Parts`] from whatever they parse, and
//! [`Topology::from_parts`] checks it. Everything here is pure data and
//! pure queries, so the planner can be tested on literal topologies.

mod cpuset;
mod error;
mod model;
mod warning;

pub use cpuset::{CpuSet, CpuSetError, MAX_CPU};
pub use error::ModelError;
pub use model::{
    Cache, Core, Device, DeviceKind, HugePages, Node, NodeId, Package, Parts, Pu, Topology, DEFAULT_REMOTE_DISTANCE,
    LOCAL_DISTANCE,
};
pub use warning::Warning;

/// Parses a byte size as users and files write it: `64GiB`, `512 MiB`,
/// `1.5TiB`, `2048kB`, `4096` (bytes). Decimal units (`GB`) are taken as
/// powers of 1000, binary ones (`GiB`) as powers of 1024, except `kB`,
/// which the kernel writes for KiB.
pub fn parse_size(text: &str) -> Option<u64> {
    let t = text.trim();
    let split = t.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let unit = unit.trim();
    let mult: u64 = match unit.to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kib" => 1 << 10,
        "kb" if unit == "kB" => 1 << 10,
        "kb" => 1000,
        "m" | "mib" => 1 << 20,
        "mb" => 1_000_000,
        "g" | "gib" => 1 << 30,
        "gb" => 1_000_000_000,
        "t" | "tib" => 1 << 40,
        "tb" => 1_000_000_000_000,
        _ => return None,
    };
    if num.is_empty() {
        return None;
    }
    if let Ok(v) = num.parse::<u64>() {
        return v.checked_mul(mult);
    }
    let v: f64 = num.parse().ok()?;
    let bytes = v * mult as f64;
    (bytes.is_finite() && bytes >= 0.0 && bytes < u64::MAX as f64).then(|| bytes.round() as u64)
}

/// Formats bytes for people: `64 GiB`, `1.5 GiB`, `512 MiB`.
pub fn format_size(bytes: u64) -> String {
    const UNITS: [(&str, u64); 5] = [("TiB", 1 << 40), ("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10), ("B", 1)];
    for (name, size) in UNITS {
        if bytes >= size {
            let whole = bytes / size;
            let tenth = (bytes % size) * 10 / size;
            return if tenth == 0 || whole >= 100 {
                format!("{whole} {name}")
            } else {
                format!("{whole}.{tenth} {name}")
            };
        }
    }
    "0 B".to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse() {
        assert_eq!(parse_size("64GiB"), Some(64 << 30));
        assert_eq!(parse_size("512 MiB"), Some(512 << 20));
        assert_eq!(parse_size("1.5TiB"), Some(3 << 39));
        assert_eq!(parse_size("2048 kB"), Some(2 << 20));
        assert_eq!(parse_size("10GB"), Some(10_000_000_000));
        assert_eq!(parse_size("4096"), Some(4096));
        assert_eq!(parse_size("GiB"), None);
        assert_eq!(parse_size("12 parsecs"), None);
        assert_eq!(parse_size("99999999999999TiB"), None);
    }

    #[test]
    fn sizes_format() {
        assert_eq!(format_size(64 << 30), "64 GiB");
        assert_eq!(format_size(3 << 29), "1.5 GiB");
        assert_eq!(format_size(0), "0 B");
    }
}
