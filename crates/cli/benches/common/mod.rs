//! What the end-to-end and steps benches share: the host and batches they
//! measure (the comparison with Nova's `numa_fit_instance_to_host` in
//! `scripts/bench-vs-nova`) and how they read their flags.

/// The host of the comparison.
pub const HOST: &str = "8 nodes x 16 cores x 2 threads, 64GiB per node";
/// The larger batch; the smaller is one VM.
pub const BATCH: usize = 128;

/// A request file of `n` two-vCPU VMs of 2 GiB.
pub fn requests(n: usize) -> String {
    let vms: Vec<String> =
        (0..n).map(|i| format!("{{\"name\": \"vm{i}\", \"vcpus\": 2, \"memory\": \"2GiB\"}}")).collect();
    format!("[{}]\n", vms.join(",\n"))
}

pub fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// The value after `flag` on the command line.
pub fn value(flag: &str) -> Option<String> {
    let mut args = std::env::args().skip_while(|a| a != flag);
    args.next()?;
    args.next()
}

/// `--rounds N`, else `benching` rounds under `cargo bench` (which passes
/// `--bench`) and 3 when `cargo test --all-targets` runs the file once as
/// a smoke test.
pub fn rounds(benching: usize) -> usize {
    match value("--rounds") {
        Some(n) => n.parse().expect("--rounds N"),
        None if std::env::args().any(|a| a == "--bench") => benching,
        None => 3,
    }
}
