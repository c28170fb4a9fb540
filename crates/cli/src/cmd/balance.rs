//! `numaplace balance` (issue 6): every interval, samples the VMs (or
//! processes), lets `numaplace_observe::balance` decide which ones have
//! stayed remote for long enough and where they should go, then has
//! `numaplace_observe::act::carry_out` pin their threads there (libvirt
//! `vcpupin`/`emulatorpin` for libvirt domains when `virsh` exists, else
//! the process's own cgroup v2 cpuset and `sched_setaffinity` per thread) and migrate their pages at a bounded
//! rate. Every decision and action is logged to stderr, and as JSON lines
//! (`numaplace_wire::observe::EventDoc`) on stdout with `--format json`.
//!
//! Where a VM may go on its new node is the host's to say
//! (`numaplace_observe::host`): the reservations (from [`reservations`])
//! and, on a libvirt host, the running domains read as the planner's
//! state each round a move is due, so a floating VM keeps off reserved
//! and dedicated CPUs and a dedicated VM is re-planned 1:1 or stays.

use numaplace_libvirt::{LivePin, Virsh};
use numaplace_observe::act::{self, Cgroup, Live, Moved, Pin};
use numaplace_observe::balance::{Balancer, Config, Event, Judge};
use numaplace_observe::host::{Host, Kept, Target};
use numaplace_observe::sample::{Options, ProcInfo, Sampler};
use numaplace_observe::{units, FsSource, Source};
use numaplace_plan::{HostState, Reservations};
use numaplace_topo::Topology;
use numaplace_wire::observe::EventDoc;
use std::collections::BTreeSet;
use std::process::ExitCode;
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
  numaplace balance --dry-run                      say what would move (and its pins before and after), move nothing
  numaplace balance --threshold 80 --rate 256MiB/s
  numaplace balance --interval 5s --max-moves 1 --format json
  numaplace balance --reserved-cpus 0,48 --dry-run   (the host profile's reservations, overridden)
  numaplace balance --dry-run --root DUMP --host host.xml --state domains/ --rounds 3 --format json
                                                   the moves a recorded host (its proc/ and sys/) would get";

/// Moves VMs whose memory stays remote to a better home node.
///
/// A floating VM floats over the new node's CPUs that are neither reserved
/// for the host nor held by a dedicated VM; a dedicated VM is re-planned
/// 1:1 there through the planner or stays where it is, with the reason
/// logged (docs/balance.md).
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
    /// The host's domains: `libvirt`, `libvirt:URI` or a directory of
    /// `virsh dumpxml` files (default: libvirt when virsh exists, unless
    /// --no-libvirt). Dedicated domains are re-planned 1:1 against them.
    #[arg(long, value_name = "DIR|libvirt[:URI]")]
    pub state: Option<String>,
    /// The host's topology, any source `topology --from` reads (default:
    /// the live host).
    #[arg(long, value_name = "SOURCE")]
    pub host: Option<String>,
    /// Read the processes and NUMA nodes from a recorded tree (holding
    /// `proc/` and `sys/`, as a copy of the host's) instead of `/`; only
    /// with --dry-run, since nothing recorded can be moved.
    #[arg(long, value_name = "DIR", default_value = "/")]
    pub root: std::path::PathBuf,
    /// Log format.
    #[arg(long, value_enum, default_value = "text")]
    pub format: LogFormat,
    /// The host profile and the reservation flags: what a move keeps off.
    #[command(flatten)]
    pub reserve: super::profile::HostArgs,
}

/// The live host's reservations (host profile, flags), resolved before
/// the first sample so a bad value stops the run (exit 2). Without a
/// profile or a flag, nothing is reserved and the host is not read here;
/// when it was read, it is handed on, so the run reads it once.
fn host_reservations(args: &Args) -> anyhow::Result<(numaplace_plan::Reservations, Option<Topology>)> {
    let profile = args.reserve.profile()?;
    if profile.is_none() && args.reserve.overrides() == Default::default() {
        return Ok((numaplace_plan::Reservations::default(), None));
    }
    let host = super::topology::load(args.host.as_deref())?;
    let reserved = args.reserve.resolve(&host, profile.as_ref(), None)?;
    Ok((reserved, Some(args.reserve.declared(host, profile.as_ref())?)))
}

struct Log {
    json: bool,
    start: Instant,
}

impl Log {
    /// Logs `text` on stderr and, with `--format json`, the line `doc`
    /// makes for the time since the start on stdout.
    fn event<'a>(&self, text: &str, doc: impl FnOnce(f64) -> EventDoc<'a>) {
        eprintln!("numaplace balance: {text}");
        if self.json {
            if let Ok(line) = serde_json::to_string(&doc(self.start.elapsed().as_secs_f64())) {
                let _ = super::print(&format!("{line}\n"));
            }
        }
    }
}

/// The host as a move sees it, read when a round first asks (reading the
/// domains costs a virsh call each, and most rounds move nothing).
struct RoundHost<'a> {
    topology: &'a Topology,
    reservations: &'a Reservations,
    /// Where the domains are read (None: no domain, every process floats).
    domains: Option<&'a dyn numaplace_libvirt::Libvirt>,
    source: &'a dyn Source,
    host: Option<Result<Host<'a>, String>>,
    /// What reading the domains left out, said once per run.
    warned: &'a mut BTreeSet<String>,
}

impl<'a> RoundHost<'a> {
    fn load(&mut self) -> Result<Host<'a>, String> {
        let state = if let Some(lv) = self.domains {
            let domains = numaplace_libvirt::state::read_state(lv, self.topology, self.reservations.clone(), true)
                .map_err(|e| e.to_string())?;
            for w in &domains.host.warnings {
                if self.warned.insert(w.to_string()) {
                    eprintln!("numaplace balance: warning: {w}");
                }
            }
            domains.host.state
        } else {
            HostState::with_reservations(self.topology, self.reservations.clone()).map_err(|e| e.to_string())?
        };
        Ok(Host::new(self.topology, state, self.source))
    }
}

impl Judge for RoundHost<'_> {
    fn target(&mut self, p: &ProcInfo, node: u32) -> Result<Target, Kept> {
        if self.host.is_none() {
            self.host = Some(self.load());
        }
        match &self.host {
            Some(Ok(host)) => host.target(p, node),
            Some(Err(error)) => Err(Kept::StateUnread { error: error.clone() }),
            None => Err(Kept::StateUnread { error: "not read".into() }),
        }
    }
    fn memory_reserve(&self) -> u64 {
        self.reservations.memory_per_node
    }
}

/// Runs `numaplace balance`.
pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    if !(0.0..=100.0).contains(&args.threshold) {
        anyhow::bail!("--threshold {} is not a percentage", args.threshold);
    }
    let recorded = args.root != std::path::Path::new("/");
    if recorded && !args.dry_run {
        anyhow::bail!(
            "--root {}: a recorded tree is only read with --dry-run (nothing in it can be moved)",
            args.root.display()
        );
    }
    // Opened before the first sample so a wrong path stops the run (exit 2).
    let state = open_state(&args)?;
    let (reserved, read) = host_reservations(&args)?;
    let log = Log { json: args.format == LogFormat::Json, start: Instant::now() };
    let mut sampler = Sampler::new(
        FsSource::new(&args.root),
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
        log.event(&format!("nothing to balance: {why}"), |t| EventDoc::idle(why, t));
        return Ok(ExitCode::SUCCESS);
    }
    let topology = match read {
        Some(t) => t,
        None => super::topology::load(args.host.as_deref())?,
    };
    HostState::with_reservations(&topology, reserved.clone()).map_err(|e| anyhow::anyhow!("reservations: {e}"))?;
    // The actors: libvirt domains through virsh when it exists, every
    // other process through its own cgroup's cpuset and its threads'
    // affinity (the kernel paths libvirt's live vcpupin and numatune
    // drive for a domain).
    let mut kernel = Live::default();
    let mut by_thread = Cgroup::default();
    let mut by_libvirt = LivePin::live(Cgroup::default());
    let libvirt = !args.no_libvirt && Virsh::available();
    let pinner: &mut dyn Pin = if libvirt { &mut by_libvirt } else { &mut by_thread };
    let default_domains =
        (libvirt && state.is_none()).then(|| numaplace_libvirt::Virsh::new(numaplace_libvirt::DEFAULT_URI));
    let domains: Option<&dyn numaplace_libvirt::Libvirt> = match (&state, &default_domains) {
        (Some(lv), _) => Some(lv.as_ref()),
        (None, Some(v)) => Some(v),
        (None, None) => None,
    };
    let mut warned = BTreeSet::new();
    let mut round = 0u64;
    loop {
        round += 1;
        if args.rounds.is_some_and(|r| round > r) {
            return Ok(ExitCode::SUCCESS);
        }
        if !recorded {
            // A recorded tree does not change: its rounds need no wait.
            std::thread::sleep(args.interval);
        }
        let snap = match sampler.sample() {
            Ok(s) => s,
            Err(e) => {
                let error = e.to_string();
                log.event(&format!("sample failed: {e}"), |t| EventDoc::sample_failed(&error, t));
                continue;
            }
        };
        if snap.skipped.permission_denied > 0 && round == 1 {
            let n = snap.skipped.permission_denied;
            log.event(
                &format!("{n} processes are not readable (permission denied); run as root to balance them"),
                |t| EventDoc::permission_denied(n, t),
            );
        }
        let mut judge = RoundHost {
            topology: &topology,
            reservations: &reserved,
            domains,
            source: sampler.source(),
            host: None,
            warned: &mut warned,
        };
        let events = balancer.step(&snap, &mut judge);
        drop(judge);
        for event in events {
            log.event(&event_text(&event, &args), |t| EventDoc::balancer(&event, t));
            let Event::Decide(d) = &event else { continue };
            if args.dry_run {
                continue;
            }
            match act::carry_out(pinner, &mut kernel, d, &snap, args.rate) {
                Ok(m) => log.event(&moved_text(&m), |t| EventDoc::moved(&m, t)),
                Err(e) => log.event(&format!("{}: {e}", d.name), |t| EventDoc::vanished(&e, t)),
            }
            balancer.moved(d.pid);
        }
    }
}

/// `--state`, opened: the domains the balancer keeps to (none without
/// the flag).
fn open_state(args: &Args) -> anyhow::Result<Option<Box<dyn numaplace_libvirt::Libvirt>>> {
    let Some(spec) = &args.state else { return Ok(None) };
    let lv = numaplace_libvirt::open_state(spec).map_err(|e| anyhow::anyhow!("--state {spec}: {e}"))?;
    lv.map(Some)
        .ok_or_else(|| anyhow::anyhow!("--state {spec}: expected libvirt, libvirt:URI or a directory of domain XML"))
}

/// The log sentence for one of the balancer's events.
fn event_text(event: &Event, args: &Args) -> String {
    match event {
        Event::Watching { pid, name, local_percent, samples_below } => format!(
            "{name} (pid {pid}): {local_percent:.1}% local, below {} for {samples_below} sample(s)",
            args.threshold
        ),
        Event::Skip { pid, name, reason, .. } => format!("{name} (pid {pid}): not moved: {reason}"),
        Event::Decide(d) => format!(
            "{} (pid {}): {:.1}% local on node(s) {:?}; new home node {} ({} MiB to migrate; {} -> {}){}",
            d.name,
            d.pid,
            d.local_percent_before,
            d.from,
            d.to,
            d.bytes_to_move >> 20,
            d.target.before,
            d.target.after,
            if args.dry_run { " [dry run]" } else { "" }
        ),
    }
}

/// The log sentence for a move.
fn moved_text(m: &Moved) -> String {
    let o = &m.outcome;
    match &o.error {
        None => format!(
            "{} (pid {}): moved to node {}: {} -> {}, {} threads pinned, {} MiB migrated in {:.1} s ({:.0} MiB/s, limit {} MiB/s), {:.1}% -> {}% local",
            m.name,
            m.pid,
            m.to,
            m.before,
            m.after,
            o.threads_pinned,
            o.bytes_moved >> 20,
            o.migrate_seconds,
            o.bytes_per_second() / f64::from(1u32 << 20),
            m.rate_limit_bytes_per_second >> 20,
            m.local_percent_before,
            m.local_percent_after.map_or("?".into(), |a| format!("{a:.1}")),
        ),
        Some(e) => format!(
            "{} (pid {}): move to node {} ({} -> {}) failed: {e}; {}",
            m.name,
            m.pid,
            m.to,
            m.before,
            m.after,
            if o.restored { "CPU placement restored" } else { "CPU placement could not be fully restored" }
        ),
    }
}
