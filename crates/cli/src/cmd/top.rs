//! `numaplace top` (issue 6): esxtop's NUMA view for running VMs (and,
//! with `--all`, any process), refreshed in the terminal, or printed once
//! as text or JSON for scripts.
//!
//! The live view is a plain ANSI redraw loop rather than ratatui +
//! crossterm: the view is one table redrawn every interval, which needs
//! only "clear screen" and single key presses; the two crates would add
//! a dozen dependencies and minutes of build time on a 2-core builder for
//! widgets we do not use. Key presses are read by switching the terminal
//! to non-canonical mode with `stty` (and back on exit, including on
//! Ctrl-C, which arrives as a key because `isig` is off).

use numaplace_observe::sample::{Options, Sampler};
use numaplace_observe::text::{self, SortKey};
use numaplace_observe::{units, FsSource};
use numaplace_plan::Reservations;
use numaplace_topo::CpuSet;
use numaplace_wire::observe::SnapshotDoc;
use std::io::{IsTerminal, Read};
use std::process::{Command, ExitCode, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// Output of `--once`.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum OnceFormat {
    /// The table.
    Text,
    /// The snapshot as JSON (docs/top.md).
    Json,
}

/// Row orders.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Sort {
    /// Lowest N%L first.
    Locality,
    /// Most memory first.
    Memory,
    /// Most remote memory first.
    Remote,
    /// By name.
    Name,
    /// By pid.
    Pid,
}

impl From<Sort> for SortKey {
    fn from(s: Sort) -> SortKey {
        match s {
            Sort::Locality => SortKey::Locality,
            Sort::Memory => SortKey::Memory,
            Sort::Remote => SortKey::Remote,
            Sort::Name => SortKey::Name,
            Sort::Pid => SortKey::Pid,
        }
    }
}

const AFTER_HELP: &str = "\
Columns: NHN home node(s), NMIG home changes seen, NRMEM/NLMEM remote/local
memory, N%L local share, GST_ND(x) memory on node x. A VM homed on several
nodes shows its per-node balance instead of a misleading 100%.

EXAMPLES:
  numaplace top                          refreshing view; keys l m r n p sort, q quits
  numaplace top --once --format json     one sample for scripts
  numaplace top --all --once             include every process, not only VMs
  numaplace top --state libvirt --host-config /etc/numaplace/host.toml   VMs beside their definitions and the reserved CPUs";

/// Shows per-VM NUMA locality (esxtop's NUMA view).
#[derive(clap::Args, Debug)]
#[command(after_help = AFTER_HELP)]
pub struct Args {
    /// Include processes that are not QEMU VMs.
    #[arg(long)]
    pub all: bool,
    /// Only these process ids (any kind of process).
    #[arg(long = "pid", value_name = "PID")]
    pub pids: Vec<u32>,
    /// The VMs' definitions: `libvirt`, `libvirt:URI` or a directory of
    /// `virsh dumpxml` files. The text view then shows, for each VM, the
    /// nodes and CPUs its definition plans beside where it runs.
    #[arg(long, value_name = "DIR|libvirt[:URI]")]
    pub state: Option<String>,
    /// Print one view and exit.
    #[arg(long)]
    pub once: bool,
    /// Format of `--once`.
    #[arg(long, value_enum, default_value = "text")]
    pub format: OnceFormat,
    /// Refresh interval (live view), or the gap between samples with
    /// `--samples`.
    #[arg(long, default_value = "2s", value_parser = units::parse_duration)]
    pub interval: Duration,
    /// With `--once`: samples to take before printing (2 or more fill in
    /// the CPU load column).
    #[arg(long, default_value_t = 1)]
    pub samples: u32,
    /// Initial row order (keys l, m, r, n, p change it live).
    #[arg(long, value_enum, default_value = "locality")]
    pub sort: Sort,
    /// Read a recorded tree (holding `proc/` and `sys/`) instead of `/`.
    #[arg(long, hide = true, default_value = "/")]
    pub root: std::path::PathBuf,
    /// The host profile and the reservation flags (with --state: VMs
    /// pinned onto reserved CPUs are marked).
    #[command(flatten)]
    pub reserve: super::profile::HostArgs,
}

/// Runs `numaplace top`.
pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let options = Options { all: args.all, pids: args.pids.clone(), window: 3 };
    let mut sampler = Sampler::new(FsSource::new(&args.root), options);
    let plan = load_planned(&args)?;
    if args.once || !std::io::stdout().is_terminal() {
        let mut snap = sampler.sample()?;
        for _ in 1..args.samples.max(1) {
            std::thread::sleep(args.interval);
            snap = sampler.sample()?;
        }
        let out = match args.format {
            OnceFormat::Json => {
                let mut doc = SnapshotDoc::from(&snap);
                doc.planned = plan.as_ref().map(|p| planned_doc(&snap, p));
                serde_json::to_string_pretty(&doc)? + "\n"
            }
            OnceFormat::Text => text::render(&snap, args.sort.into()) + &planned(&plan, &snap),
        };
        super::print(&out)?;
        // A pid asked for by name that is not in the view is worth saying:
        // a script would otherwise read an empty table as "no VMs".
        let missing: Vec<u32> =
            args.pids.iter().copied().filter(|pid| !snap.processes.iter().any(|p| p.pid == *pid)).collect();
        for pid in &missing {
            eprintln!("numaplace top: pid {pid}: no such process now (it exited, or is a kernel thread)");
        }
        if !args.pids.is_empty() && missing.len() == args.pids.len() {
            return Ok(ExitCode::from(1));
        }
        return Ok(ExitCode::SUCCESS);
    }
    live(&mut sampler, args.interval, args.sort.into(), &plan)
}

/// Restores the terminal settings saved at start when dropped.
struct Terminal {
    saved: Option<String>,
}

impl Terminal {
    fn raw() -> Terminal {
        let saved = Command::new("stty")
            .arg("-g")
            .stdin(Stdio::inherit())
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string());
        if saved.is_some() {
            let _ =
                Command::new("stty").args(["-icanon", "-echo", "-isig", "min", "1"]).stdin(Stdio::inherit()).status();
        }
        print!("\x1b[?25l");
        Terminal { saved }
    }
}

impl Drop for Terminal {
    fn drop(&mut self) {
        println!("\x1b[?25h");
        if let Some(s) = &self.saved {
            let _ = Command::new("stty").arg(s).stdin(Stdio::inherit()).status();
        }
    }
}

fn live(
    sampler: &mut Sampler<FsSource>,
    interval: Duration,
    mut key: SortKey,
    plan: &Planned,
) -> anyhow::Result<ExitCode> {
    let interactive = std::io::stdin().is_terminal();
    let _term = interactive.then(Terminal::raw);
    let (tx, rx) = mpsc::channel::<u8>();
    if interactive {
        std::thread::spawn(move || {
            let mut b = [0u8; 1];
            while let Ok(1) = std::io::stdin().read(&mut b) {
                if tx.send(b[0]).is_err() {
                    break;
                }
            }
        });
    }
    let mut snap = sampler.sample()?;
    loop {
        let mut screen = String::from("\x1b[H\x1b[2J");
        screen.push_str(&format!("numaplace top  sample {}  every {:?}\n\n", snap.sequence, interval));
        // Output post-processing stays on (only input modes change), so
        // plain newlines still return the carriage.
        screen.push_str(&text::render(&snap, key));
        screen.push_str(&planned(plan, &snap));
        screen.push_str("\nsort: [l]ocality [m]emory [r]emote [n]ame [p]id   [q]uit\n");
        super::print(&screen)?;
        let next = Instant::now() + interval;
        loop {
            let left = next.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            match rx.recv_timeout(left) {
                Ok(b'q' | 3 | 4) => return Ok(ExitCode::SUCCESS),
                Ok(c) => {
                    if let Some(k) = SortKey::from_key(char::from(c)) {
                        key = k;
                        break;
                    }
                }
                Err(mpsc::RecvTimeoutError::Timeout) => break,
                // No keyboard (stdin closed): just keep refreshing.
                Err(mpsc::RecvTimeoutError::Disconnected) => std::thread::sleep(left),
            }
        }
        if Instant::now() >= next {
            snap = sampler.sample()?;
        }
    }
}

/// With `--state`: every domain's definition, read once, where from,
/// and what the host keeps for itself (host profile, flags).
struct Defined {
    held: Vec<numaplace_libvirt::Held>,
    from: String,
    reserved: Reservations,
}

type Planned = Option<Defined>;

fn load_planned(args: &Args) -> anyhow::Result<Planned> {
    let Some(spec) = &args.state else { return Ok(None) };
    let lv = numaplace_libvirt::open(spec)
        .ok_or_else(|| anyhow::anyhow!("--state {spec}: expected libvirt, libvirt:URI or a directory of domain XML"))?;
    let host = super::topology::load(None)?;
    let (reserved, profile) = args.reserve.load(&host)?;
    // The whole profile applies, its `[node_kinds]` too (exit 2 naming
    // the key for a bad one), as for plan and the agent.
    let host = args.reserve.declared(host, profile.as_ref())?;
    let (held, _, _, _) = numaplace_libvirt::state::held_domains(lv.as_ref(), &host, false)
        .map_err(|e| anyhow::anyhow!("--state {spec}: {e}"))?;
    Ok(Some(Defined { held, from: lv.describe(), reserved }))
}

/// The CPUs a row's pins put on CPUs the host reserves (a floating VM
/// may run anywhere, so only pinned ones count).
fn on_reserved(row: &numaplace_libvirt::drift::PlannedRow, reserved: &Reservations) -> CpuSet {
    if row.pinned {
        row.cpus.intersection(&reserved.cpus)
    } else {
        CpuSet::new()
    }
}

/// What each VM's definition plans, beside where it runs, and the VMs
/// pinned onto CPUs the host reserves.
fn planned(plan: &Planned, snap: &numaplace_observe::sample::Snapshot) -> String {
    use std::fmt::Write;
    let Some(p) = plan else { return String::new() };
    let rows = numaplace_libvirt::drift::planned_rows(snap, &p.held);
    let mut x = numaplace_libvirt::drift::render_planned(&rows, &p.from);
    let r = &p.reserved;
    if !r.cpus.is_empty() {
        let _ = writeln!(x, "  reserved for the host: CPUs {}", r.cpus.to_list());
    }
    if !r.shared_cpus.is_empty() {
        let _ = writeln!(x, "  shared CPU pool: CPUs {}", r.shared_cpus.to_list());
    }
    for row in &rows {
        let on = on_reserved(row, r);
        if !on.is_empty() {
            let _ = writeln!(x, "  ! {} is pinned to CPUs {} the host reserves for itself", row.name, on.to_list());
        }
    }
    x
}

/// The same for `--format json`.
fn planned_doc(snap: &numaplace_observe::sample::Snapshot, p: &Defined) -> numaplace_wire::observe::PlannedViewDoc {
    let vms = numaplace_libvirt::drift::planned_rows(snap, &p.held)
        .into_iter()
        .map(|r| numaplace_wire::observe::PlannedDoc {
            on_reserved_cpus: on_reserved(&r, &p.reserved).to_list(),
            planned_nodes: r.nodes.to_list(),
            planned_cpus: r.cpus.to_list(),
            home_nodes: r.home.to_list(),
            name: r.name,
            pinned: r.pinned,
            off_plan: r.off_plan,
            local_percent: r.local_percent,
        })
        .collect();
    numaplace_wire::observe::PlannedViewDoc {
        source: p.from.clone(),
        vms,
        reserved: numaplace_wire::plan::ReservedDoc::new(&p.reserved),
    }
}
