//! `numaplace balance` (issue 6): every interval, samples the VMs (or
//! processes), lets `numaplace_observe::balance` decide which ones have
//! stayed remote for long enough and where they should go, then pins
//! their threads there (libvirt `vcpupin`/`emulatorpin` for libvirt
//! domains when `virsh` exists, else `sched_setaffinity` per thread) and
//! migrates their pages at a bounded rate. Every decision and action is
//! logged to stderr, and as JSON lines on stdout with `--format json`.
//!
//! Also the hidden `__touch` workload the end-to-end test runs inside a
//! guest: it faults memory in on one set of CPUs and then lives on
//! another, which puts its memory on the wrong node without needing a
//! memory policy (first touch decides placement).

use numaplace_observe::act::{self, Outcome};
use numaplace_observe::balance::{Balancer, Config, Decision, Event};
use numaplace_observe::sample::{Options, Sampler, Snapshot};
use numaplace_observe::{numa_maps, procfs, units, FsSource};
use numaplace_topo::CpuSet;
use numaplace_wire::observe::{EventDoc, OutcomeDoc};
use std::process::{Command, ExitCode};
use std::time::{Duration, Instant};

/// Log format.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum LogFormat {
    /// Lines on stderr only.
    Text,
    /// Also one JSON object per event on stdout.
    Json,
}

const AFTER_HELP: &str = "\
EXAMPLES:
  numaplace balance --dry-run                      say what would move, move nothing
  numaplace balance --threshold 80 --rate 256MiB/s
  numaplace balance --interval 5s --max-moves 1 --format json";

/// Moves VMs whose memory stays remote to a better home node.
#[derive(clap::Args, Debug)]
#[command(after_help = AFTER_HELP)]
pub struct Args {
    /// Decide and log, but move nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Time between samples.
    #[arg(long, default_value = "2s", value_parser = units::parse_duration)]
    pub interval: Duration,
    /// Move when local memory (N%L) stays below this percentage.
    #[arg(long, default_value_t = 80.0)]
    pub threshold: f64,
    /// Samples in a row below the threshold before moving.
    #[arg(long, default_value_t = 3)]
    pub hysteresis: u32,
    /// Page migration rate limit, e.g. 256MiB/s (MB/s is 10^6 bytes a second,
    /// MiB/s 2^20: docs/formats/request.md#sizes).
    #[arg(long, default_value = "256MiB/s", value_parser = units::parse_rate)]
    pub rate: u64,
    /// At most this many moves per interval.
    #[arg(long, default_value_t = 1)]
    pub max_moves: usize,
    /// Samples to leave a moved VM alone.
    #[arg(long, default_value_t = 5)]
    pub cooldown: u32,
    /// Ignore VMs/processes with less resident memory than this (16MiB or 16M
    /// is 16 x 2^20 bytes, 16MB 16 x 10^6: docs/formats/request.md#sizes).
    #[arg(long, default_value = "16MiB", value_parser = units::parse_bytes)]
    pub min_memory: u64,
    /// Include processes that are not QEMU VMs.
    #[arg(long)]
    pub all: bool,
    /// Only these process ids.
    #[arg(long = "pid", value_name = "PID")]
    pub pids: Vec<u32>,
    /// Stop after this many intervals (default: run until killed).
    #[arg(long)]
    pub rounds: Option<u64>,
    /// Never use virsh, even for libvirt domains.
    #[arg(long)]
    pub no_libvirt: bool,
    /// Log format.
    #[arg(long, value_enum, default_value = "text")]
    pub format: LogFormat,
}

struct Log {
    json: bool,
    start: Instant,
}

impl Log {
    fn event(&self, text: &str, mut json: serde_json::Value) {
        eprintln!("numaplace balance: {text}");
        if self.json {
            if let Some(o) = json.as_object_mut() {
                o.insert("time_seconds".into(), serde_json::json!(self.start.elapsed().as_secs_f64()));
            }
            let _ = super::print(&format!("{json}\n"));
        }
    }
}

/// Runs `numaplace balance`.
pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    if !(0.0..=100.0).contains(&args.threshold) {
        anyhow::bail!("--threshold {} is not a percentage", args.threshold);
    }
    let log = Log { json: args.format == LogFormat::Json, start: Instant::now() };
    let mut sampler = Sampler::new(
        FsSource::live(),
        Options { all: args.all, pids: args.pids.clone(), window: args.hysteresis.max(2) as usize },
    );
    let mut balancer = Balancer::new(Config {
        threshold_percent: args.threshold,
        hysteresis: args.hysteresis.max(1),
        max_moves: args.max_moves,
        cooldown: args.cooldown,
        min_memory_bytes: args.min_memory,
    });
    let first = sampler.sample()?;
    if !first.numa || first.nodes.len() < 2 {
        let why = if first.numa { "this host has one NUMA node" } else { "this kernel exposes no NUMA nodes" };
        log.event(&format!("nothing to balance: {why}"), serde_json::json!({"event": "idle", "reason": why}));
        return Ok(ExitCode::SUCCESS);
    }
    let virsh = !args.no_libvirt && have("virsh");
    let mut round = 0u64;
    loop {
        round += 1;
        if args.rounds.is_some_and(|r| round > r) {
            return Ok(ExitCode::SUCCESS);
        }
        std::thread::sleep(args.interval);
        let snap = match sampler.sample() {
            Ok(s) => s,
            Err(e) => {
                log.event(
                    &format!("sample failed: {e}"),
                    serde_json::json!({"event": "error", "error": e.to_string()}),
                );
                continue;
            }
        };
        if snap.skipped.permission_denied > 0 && round == 1 {
            let n = snap.skipped.permission_denied;
            log.event(
                &format!("{n} processes are not readable (permission denied); run as root to balance them"),
                serde_json::json!({"event": "warning", "permission_denied": n}),
            );
        }
        for event in balancer.step(&snap) {
            match &event {
                Event::Watching { pid, name, local_percent, samples_below } => log.event(
                    &format!(
                        "{name} (pid {pid}): {local_percent:.1}% local, below {} for {samples_below} sample(s)",
                        args.threshold
                    ),
                    serde_json::to_value(EventDoc::from(&event))?,
                ),
                Event::Skip { pid, name, reason, .. } => log.event(
                    &format!("{name} (pid {pid}): not moved: {reason}"),
                    serde_json::to_value(EventDoc::from(&event))?,
                ),
                Event::Decide(d) => {
                    log.event(
                        &format!(
                            "{} (pid {}): {:.1}% local on node(s) {:?}; new home node {} ({} MiB to migrate){}",
                            d.name,
                            d.pid,
                            d.local_percent_before,
                            d.from,
                            d.to,
                            d.bytes_to_move >> 20,
                            if args.dry_run { " [dry run]" } else { "" }
                        ),
                        serde_json::to_value(EventDoc::from(&event))?,
                    );
                    if !args.dry_run {
                        carry_out(d, &snap, args.rate, virsh, &log);
                        balancer.moved(d.pid);
                    }
                }
            }
        }
    }
}

fn have(program: &str) -> bool {
    std::env::var_os("PATH").is_some_and(|p| std::env::split_paths(&p).any(|d| d.join(program).is_file()))
}

/// Local share after a move, read back from the kernel.
fn local_after(pid: u32, node: u32) -> Option<(f64, u64)> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/numa_maps")).ok()?;
    let per = numa_maps::bytes_per_node(&numa_maps::parse(&text).ok()?);
    let total: u64 = per.values().sum();
    let here = per.get(&node).copied().unwrap_or(0);
    (total > 0).then(|| (here as f64 * 100.0 / total as f64, here))
}

fn carry_out(d: &Decision, snap: &Snapshot, rate: u64, virsh: bool, log: &Log) {
    let Some(cpus) = snap.nodes.iter().find(|n| n.node == d.to).and_then(|n| n.cpus.parse::<CpuSet>().ok()) else {
        log.event(&format!("{}: node {} vanished", d.name, d.to), serde_json::json!({"event": "error", "pid": d.pid}));
        return;
    };
    let domain = if virsh { libvirt_domain(d.pid) } else { None };
    let mut sys = act::Live::default();
    let mut outcome = match &domain {
        Some(dom) => match libvirt_pin(dom, d.pid, &cpus) {
            Ok(()) => act::move_process(&mut sys, d.pid, d.to, &cpus, rate, false),
            Err(e) => Outcome { error: Some(format!("virsh: {e}")), restored: true, ..Outcome::default() },
        },
        None => act::move_process(&mut sys, d.pid, d.to, &cpus, rate, true),
    };
    if let (Some(dom), Some(_)) = (&domain, &outcome.error) {
        // Pinning went through libvirt; put the old pins back the same way.
        outcome.restored = libvirt_unpin(dom, d.pid).is_ok();
    }
    let after = local_after(d.pid, d.to);
    let achieved =
        if outcome.migrate_seconds > 0.0 { outcome.bytes_moved as f64 / outcome.migrate_seconds } else { 0.0 };
    let json = serde_json::json!({
        "event": "moved",
        "pid": d.pid,
        "name": d.name,
        "to": d.to,
        "via": if domain.is_some() { "libvirt" } else { "sched_setaffinity" },
        "local_percent_before": d.local_percent_before,
        "local_percent_after": after.map(|a| a.0),
        "outcome": OutcomeDoc::from(&outcome),
        "rate_limit_bytes_per_second": rate,
        "achieved_bytes_per_second": achieved,
    });
    let text = match &outcome.error {
        None => format!(
            "{} (pid {}): moved to node {}: {} threads pinned, {} MiB migrated in {:.1} s ({:.0} MiB/s, limit {} MiB/s), {:.1}% -> {}% local",
            d.name,
            d.pid,
            d.to,
            outcome.threads_pinned,
            outcome.bytes_moved >> 20,
            outcome.migrate_seconds,
            achieved / f64::from(1u32 << 20),
            rate >> 20,
            d.local_percent_before,
            after.map_or("?".into(), |a| format!("{:.1}", a.0)),
        ),
        Some(e) => format!(
            "{} (pid {}): move to node {} failed: {e}; {}",
            d.name,
            d.pid,
            d.to,
            if outcome.restored { "CPU placement restored" } else { "CPU placement could not be fully restored" }
        ),
    };
    log.event(&text, json);
}

/// The libvirt domain a QEMU process runs, if `virsh` knows it.
fn libvirt_domain(pid: u32) -> Option<String> {
    let raw = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
    let name = procfs::qemu_info(&procfs::split_cmdline(&raw))?.name?;
    let ok = Command::new("virsh").args(["domstate", &name]).output().ok()?.status.success();
    ok.then_some(name)
}

/// vCPU index -> thread id, from QEMU's thread names.
fn vcpu_threads(pid: u32) -> Vec<(u32, u32)> {
    let Ok(rd) = std::fs::read_dir(format!("/proc/{pid}/task")) else { return Vec::new() };
    let mut out: Vec<(u32, u32)> = rd
        .flatten()
        .filter_map(|e| {
            let tid: u32 = e.file_name().to_str()?.parse().ok()?;
            let comm = std::fs::read_to_string(e.path().join("comm")).ok()?;
            let idx = comm.trim().strip_prefix("CPU ")?.split('/').next()?.parse().ok()?;
            Some((idx, tid))
        })
        .collect();
    out.sort_unstable();
    out
}

fn virsh(args: &[&str]) -> Result<(), String> {
    let out = Command::new("virsh").args(args).output().map_err(|e| e.to_string())?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!("virsh {}: {}", args.join(" "), String::from_utf8_lossy(&out.stderr).trim()))
    }
}

fn libvirt_pin(domain: &str, pid: u32, cpus: &CpuSet) -> Result<(), String> {
    let list = cpus.to_list();
    for (vcpu, _) in vcpu_threads(pid) {
        virsh(&["vcpupin", domain, "--vcpu", &vcpu.to_string(), "--cpulist", &list, "--live"])?;
    }
    virsh(&["emulatorpin", domain, "--cpulist", &list, "--live"])
}

/// Unpins a domain (every host CPU) after a failed move: libvirt keeps
/// no history of earlier pins, so "as it was" here means unpinned unless
/// the domain XML pins it, which `virsh` reapplies on the next start.
fn libvirt_unpin(domain: &str, pid: u32) -> Result<(), String> {
    let all = std::fs::read_to_string("/sys/devices/system/cpu/online").map_err(|e| e.to_string())?;
    let all = all.trim();
    for (vcpu, _) in vcpu_threads(pid) {
        virsh(&["vcpupin", domain, "--vcpu", &vcpu.to_string(), "--cpulist", all, "--live"])?;
    }
    virsh(&["emulatorpin", domain, "--cpulist", all, "--live"])
}

/// A test workload: memory faulted in on some CPUs, then held on others.
#[derive(clap::Args, Debug)]
pub struct TouchArgs {
    /// Memory to allocate and touch.
    #[arg(long, default_value = "64MiB", value_parser = units::parse_bytes)]
    pub bytes: u64,
    /// CPUs to touch the memory on (its pages land on their node).
    #[arg(long)]
    pub touch_cpus: Option<CpuSet>,
    /// CPUs to run on afterwards.
    #[arg(long)]
    pub run_cpus: Option<CpuSet>,
    /// Spin on the CPU instead of sleeping while holding.
    #[arg(long)]
    pub spin: bool,
    /// How long to hold the memory.
    #[arg(long, default_value = "30s", value_parser = units::parse_duration)]
    pub hold: Duration,
    /// A file to create once the memory is placed.
    #[arg(long)]
    pub ready: Option<std::path::PathBuf>,
}

/// Runs the hidden `__touch` workload.
pub fn run_touch(args: TouchArgs) -> anyhow::Result<ExitCode> {
    let me = std::process::id();
    if let Some(c) = &args.touch_cpus {
        numaplace_observe::sys::set_affinity(me, c)?;
    }
    let len = usize::try_from(args.bytes)?;
    // Writing every page is what makes the kernel place it (first touch).
    let mut buf = vec![0u8; len];
    for i in (0..len).step_by(4096) {
        if let Some(b) = buf.get_mut(i) {
            *b = 1;
        }
    }
    if let Some(c) = &args.run_cpus {
        numaplace_observe::sys::set_affinity(me, c)?;
    }
    eprintln!("touch: pid {me} holds {} MiB", args.bytes >> 20);
    if let Some(path) = &args.ready {
        std::fs::write(path, format!("{me}\n"))?;
    }
    let end = Instant::now() + args.hold;
    while Instant::now() < end {
        if args.spin {
            std::hint::spin_loop();
        } else {
            std::thread::sleep(Duration::from_millis(200));
        }
    }
    // Keep the buffer alive (and observed) until the end.
    let sum: u64 = buf.iter().step_by(4096).map(|b| u64::from(*b)).sum();
    eprintln!("touch: done ({sum} pages)");
    Ok(ExitCode::SUCCESS)
}
