//! The cost of a placement as a program sees it: the `numaplace` binary
//! started, the host built, the VMs decided and the plan written, measured
//! from outside. Runs a batch of 1 and a batch of 128 two-vCPU VMs on an
//! 8-node host of 16 cores x 2 threads, alternately so that drift in the
//! machine hits both alike, and reports the marginal cost per VM
//! (`(t128 - t1) / 127`, medians) for the text, JSON and compact JSON
//! outputs.
//!
//! `cargo bench -p numaplace --bench end_to_end [-- --rounds N] [-- --peer-us X] [-- --peer-fill-us Y] [-- --host TEXT]`
//! With `--host`, another synthetic host in place of Nova's (issue 48
//! measured the same fill on `8 nodes x 4 l3 x 4 cores x 2 threads, 64GiB
//! per node`: the same cores in 32 L3 groups).
//! With `--peer-us`, the time of one call of a peer (OpenStack Nova's
//! `numa_fit_instance_to_host` on an empty host, timed by
//! `benches/nova_fit.py` in the same run by `scripts/bench-vs-nova`) is
//! divided by each marginal cost; with `--peer-fill-us`, the peer's mean
//! call over the same 128 VMs placed one after another, the like-for-like
//! figure.

mod common;

use common::{median, requests, BATCH, HOST};
use std::process::{Command, Stdio};
use std::time::Instant;

/// One run's wall time, in microseconds.
fn run(bin: &str, host: &str, vms: &str, format: &[&str]) -> f64 {
    let start = Instant::now();
    let status = Command::new(bin)
        .args(["plan", "--host", host, "--vms", vms, "--format"])
        .args(format)
        .stdout(Stdio::null())
        .status()
        .expect("numaplace runs");
    let us = start.elapsed().as_secs_f64() * 1e6;
    assert!(status.success(), "every VM of the bench fits: {status}");
    us
}

fn main() {
    let rounds = common::rounds(300);
    let peer_us: Option<f64> = common::value("--peer-us").and_then(|v| v.parse().ok());
    let peer_fill_us: Option<f64> = common::value("--peer-fill-us").and_then(|v| v.parse().ok());
    let bin = env!("CARGO_BIN_EXE_numaplace");
    let host = common::value("--host").unwrap_or_else(|| HOST.to_string());
    let host = host.as_str();
    let dir = std::env::temp_dir().join(format!("numaplace-e2e-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let one = dir.join("one.json");
    let many = dir.join("many.json");
    std::fs::write(&one, requests(1)).expect("write");
    std::fs::write(&many, requests(BATCH)).expect("write");
    let (one, many) = (one.to_string_lossy().into_owned(), many.to_string_lossy().into_owned());

    println!("end to end on {host}: median of {rounds} alternating runs");
    println!(
        "{:<14} {:>10} {:>12} {:>12} {:>12} {:>12}",
        "output", "batch 1", "batch 128", "per VM", "empty/us", "fill/us"
    );
    let mut report = Vec::new();
    for (name, format) in
        [("text", &["text"][..]), ("json", &["json"][..]), ("json compact", &["json", "--compact"][..])]
    {
        // Warm the page cache and the binary.
        for _ in 0..rounds.min(5) {
            run(bin, host, &one, format);
            run(bin, host, &many, format);
        }
        let (mut t1, mut tn) = (Vec::with_capacity(rounds), Vec::with_capacity(rounds));
        for _ in 0..rounds {
            t1.push(run(bin, host, &one, format));
            tn.push(run(bin, host, &many, format));
        }
        let (m1, mn) = (median(&mut t1), median(&mut tn));
        let per = (mn - m1) / (BATCH - 1) as f64;
        let ratio = peer_us.map(|p| p / per.max(f64::MIN_POSITIVE));
        let fill_ratio = peer_fill_us.map(|p| p / per.max(f64::MIN_POSITIVE));
        let shown = |r: Option<f64>| r.map_or("-".to_string(), |r| format!("{r:.0}x"));
        println!("{name:<14} {m1:>8.0}us {mn:>10.0}us {per:>10.2}us {:>12} {:>12}", shown(ratio), shown(fill_ratio));
        report.push(format!(
            "{{\"output\": \"{name}\", \"batch1_us\": {m1:.1}, \"batch{BATCH}_us\": {mn:.1}, \"per_vm_us\": {per:.3}{}{}}}",
            ratio.map_or(String::new(), |r| format!(", \"peer_ratio\": {r:.1}")),
            fill_ratio.map_or(String::new(), |r| format!(", \"peer_fill_ratio\": {r:.1}"))
        ));
    }
    let _ = std::fs::remove_dir_all(&dir);
    // For scripts/bench-vs-nova and docs/performance.md.
    let out = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("end_to_end.json");
    let _ = std::fs::write(&out, format!("[{}]\n", report.join(",\n")));
    println!("written to {}", out.display());
}
