//! `numaplace lint`: check existing VM definitions (libvirt domain XML,
//! VMware .vmx, numaplace request JSON) against a host's NUMA topology,
//! and with `--fix` write corrected files. Exit code 0 when clean, 1 when
//! a finding reaches `--fail-on`, 2 when an input cannot be read.

use anyhow::{bail, Context as _};
use clap::ValueEnum;
use numaplace_lint::{
    fix_all_reserved, lint_held, output, read_file, Finding, FixOptions, Severity, SourceFormat, VmFile,
};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

const AFTER_HELP: &str = "\
RULES (docs/lint.md has the trigger, cost, source and fix of each):
  unknown-reference, vm-exceeds-host, cpu-hotadd-wide, guest-cells-uneven, guest-cells-missing,
  guest-cells-per-node, guest-cells-cpuless, socket-spans-cells, odd-vcpus-wide, memory-exceeds-node,
  affinity-too-narrow, smt-contention, vcpu-spans-nodes, partial-pinning, memory-binding-remote,
  hugepages-missing, device-remote, pinning-overlap, floating-on-dedicated, siblings-shared, reserved-cpus,
  dedicated-in-shared-pool, floating-over-reserved

FIX SAFETY:
  Files with a warning or error are fixed together against one host state
  per hypervisor, in one order of their own (by VM name), so the same set
  of files gives the same result whatever order they are named in; the
  other files, and those whose fix is skipped, keep their pins and count as
  taken. A VM larger than the host (vm-exceeds-host) is left as it is and
  holds no memory. The fixes are written only if the whole set is then
  better: no error it did not have, and fewer errors or a lower
  cost-weighted sum of warnings (with --strict: no error or warning it did
  not have); the trade is said on stderr. A fix never changes a
  VM's vCPU count, memory or huge pages (unless --allow-resize) and never
  drops a device; writes go to a temporary file renamed into place. With
  --output DIR every input is written there, fixed or copied unchanged,
  and the summary (stderr) lists which.

EXIT STATUS:
  0 no finding at or above --fail-on; 1 some finding at or above it (after
  --fix: in the fixed files); 2 an input or the host could not be read (the
  file and line are named)

EXAMPLES:
  virsh dumpxml db1 > db1.xml && numaplace lint db1.xml
  numaplace lint /vmfs/volumes/ds1/sql01/sql01.vmx --host '2 sockets x 12 cores x 2 threads, 128GiB per node'
  numaplace lint vm1.xml vm2.xml --host host.xml --format sarif > lint.sarif
  numaplace lint db1.xml --host host.xml --fix --output db1.fixed.xml
  numaplace lint *.xml *.vmx --host host.xml --fix --output fixed/
  numaplace lint *.xml --host host.xml --fix --in-place   (originals kept as FILE.bak)
  numaplace lint *.xml --host host.xml --fix --strict --output fixed/   (no new warning either)
  numaplace lint *.xml --host host.xml --reserved-cpus 0,40 --fix --output fixed/
  numaplace lint *.xml --host-config /etc/numaplace/host.toml   (the default profile, named)";

/// Output format of the findings.
#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum LintFormat {
    /// Findings with their lines, cost and fix, for people.
    Text,
    /// `{"findings": [...]}` for programs.
    Json,
    /// SARIF 2.1.0 for code-scanning tools.
    Sarif,
}

/// The lowest severity that fails the run.
#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum FailOn {
    /// Errors only.
    Error,
    /// Warnings and errors.
    Warning,
    /// Any finding.
    Info,
}

impl FailOn {
    fn severity(self) -> Severity {
        match self {
            FailOn::Error => Severity::Error,
            FailOn::Warning => Severity::Warning,
            FailOn::Info => Severity::Info,
        }
    }
}

/// Check VM definitions for NUMA traps: CPU hot-add on wide VMs, guest
/// NUMA cells that do not fit the host, sibling contention, remote memory
/// or devices, huge pages the host lacks, pins or cores shared between VMs,
/// references to CPUs, nodes or devices the host does not have.
#[derive(clap::Args, Debug)]
#[command(after_help = AFTER_HELP)]
pub struct Args {
    /// libvirt domain XML, .vmx or numaplace request JSON files.
    #[arg(value_name = "FILE", required_unless_present = "state")]
    files: Vec<String>,
    /// The VMs already on the host: `libvirt` or `libvirt:URI` (every
    /// domain defined there) or a directory of `virsh dumpxml` files. The
    /// FILEs are checked against them (a domain of the same name is the
    /// FILE's older self and is left out); without FILEs, every domain is
    /// checked. They are never fixed.
    #[arg(long, value_name = "DIR|libvirt[:URI]")]
    state: Option<String>,
    /// The host topology (any `numaplace topology --from` source; default:
    /// the live host).
    #[arg(long, value_name = "SOURCE")]
    host: Option<String>,
    /// Output format.
    #[arg(long, value_enum, default_value_t = LintFormat::Text)]
    format: LintFormat,
    /// Lowest severity that makes the exit code 1.
    #[arg(long, value_enum, default_value_t = FailOn::Warning)]
    fail_on: FailOn,
    /// Write corrected files (libvirt XML via the planner, .vmx settings);
    /// without --output or --in-place a single fixed file goes to stdout.
    #[arg(long)]
    fix: bool,
    /// Where fixed files go: a directory (created if missing) that gets
    /// each fixed file under its own name; with one input, a file name
    /// of the input's kind (ending .xml, .vmx) may be given instead
    /// (anything else is refused: write a directory as DIR/).
    #[arg(long, value_name = "PATH", requires = "fix", conflicts_with = "in_place")]
    output: Option<PathBuf>,
    /// Overwrite the inputs with their fixed versions, keeping each
    /// original as FILE.bak.
    #[arg(long, requires = "fix")]
    in_place: bool,
    /// With --in-place, keep no FILE.bak.
    #[arg(long, requires = "in_place")]
    no_backup: bool,
    /// Let --fix change a VM's size: round its vCPU count to one that
    /// splits evenly over its nodes, shrink its memory to fit a node, drop
    /// huge pages the host has not reserved. Without it a fix keeps every
    /// vCPU, byte and device, and a finding only a resize removes stays.
    #[arg(long, requires = "fix")]
    allow_resize: bool,
    /// Write fixes only when the set then has no error or warning it did
    /// not have (without it: when the set is better as a whole, see
    /// docs/lint.md).
    #[arg(long, requires = "fix")]
    strict: bool,
    /// The host profile and the reservation flags: the rules and fixes
    /// count the reserved CPUs and memory as `plan` does.
    #[command(flatten)]
    reserve: super::profile::HostArgs,
}

/// Where each fixed file goes (`None`: stdout), worked out and checked
/// before anything is written: several inputs need a directory, two
/// inputs of one name would overwrite each other there, and no output
/// may be an input.
/// `names` are the files read (an unreadable one has no fix and no
/// target); `to_fix` indexes them.
fn targets(args: &Args, names: &[&str], to_fix: &[usize]) -> anyhow::Result<Vec<Option<PathBuf>>> {
    let several = args.files.len() > 1;
    let mut out: Vec<Option<PathBuf>> = Vec::with_capacity(to_fix.len());
    for &i in to_fix {
        let name = names[i];
        let target = match &args.output {
            _ if args.in_place => Some(PathBuf::from(name)),
            None => None,
            Some(dir) if several || dir.is_dir() || dir.as_os_str().to_string_lossy().ends_with('/') => {
                if dir.exists() && !dir.is_dir() {
                    bail!(
                        "--output {}: is a file, and {} inputs need a directory to write each fixed file to",
                        dir.display(),
                        args.files.len()
                    );
                }
                Some(dir.join(Path::new(name).file_name().unwrap_or_default()))
            }
            // One input and a path that is neither a directory nor a file
            // of the input's kind (`fx`): which one was meant is a guess,
            // so neither is written.
            Some(file) if file.extension() != Path::new(name).extension() => bail!(
                "--output {}: with one input, give a directory as {}/ (or one that exists) or a file name ending \
                 .{} like the input's",
                file.display(),
                file.display(),
                Path::new(name).extension().map(|e| e.to_string_lossy().into_owned()).unwrap_or_default()
            ),
            Some(file) => Some(file.clone()),
        };
        if let Some(path) = &target {
            if !args.in_place && args.files.iter().any(|f| Path::new(f) == path) {
                bail!("--output {} is an input file; use --in-place to overwrite inputs", path.display());
            }
            if out.iter().flatten().any(|p| p == path) {
                bail!("--output {}: two inputs named {} would overwrite each other", path.display(), name);
            }
        }
        out.push(target);
    }
    Ok(out)
}

fn render(findings: &[Finding], files: usize, format: LintFormat) -> String {
    match format {
        LintFormat::Text => output::text(findings, files),
        LintFormat::Json => output::json(findings),
        LintFormat::Sarif => output::sarif(findings),
    }
}

fn exit_for(findings: &[Finding], fail_on: FailOn) -> ExitCode {
    if findings.iter().any(|f| f.severity >= fail_on.severity()) {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    }
}

/// Reads the FILEs. A file that cannot be read is reported and the
/// others are still linted (and fixed): one bad file in a directory's
/// worth must not hide every finding. Also says how many were unreadable
/// (the run then ends with exit 2).
fn read_files(names: &[String]) -> (Vec<VmFile>, usize) {
    let mut files: Vec<VmFile> = Vec::new();
    let mut unreadable = 0usize;
    for name in names {
        match read_file(name) {
            Ok(f) => files.push(f),
            Err(e) => {
                eprintln!("numaplace: error: {e}");
                unreadable += 1;
            }
        }
    }
    (files, unreadable)
}

/// The domains of `--state`, without those named like a VM of the FILEs
/// (a FILE's older self); `None` when they cannot be read (said on
/// stderr: exit 2).
fn held_domains(spec: &str, files: &[VmFile]) -> anyhow::Result<Option<Vec<VmFile>>> {
    let lv = match numaplace_libvirt::open_state(spec) {
        Ok(lv) => lv,
        Err(e) => {
            eprintln!("numaplace: error: --state {spec}: {e}");
            return Ok(None);
        }
    };
    let lv = lv.ok_or_else(|| {
        anyhow::anyhow!("--state {spec}: expected libvirt, libvirt:URI or a directory of domain XML files")
    })?;
    let names: Vec<String> = files.iter().flat_map(|f| f.sizes()).map(|s| s.name).collect();
    let read = numaplace_libvirt::state::domain_files(lv.as_ref(), false).map_err(|e| e.to_string()).and_then(
        |(domains, vanished)| {
            for w in &vanished {
                eprintln!("numaplace: warning: {w}");
            }
            domains
                .into_iter()
                .map(|(name, d)| numaplace_lint::parse_file(&name, d.xml.as_bytes()).map_err(|e| e.to_string()))
                .collect::<Result<Vec<VmFile>, String>>()
        },
    );
    match read {
        Ok(domains) => {
            Ok(Some(domains.into_iter().filter(|f| !f.sizes().iter().any(|s| names.contains(&s.name))).collect()))
        }
        Err(e) => {
            eprintln!("numaplace: error: --state {spec}: {e}");
            Ok(None)
        }
    }
}

/// Fixes the FILEs (`files`, updated in place) planned around the held
/// domains, and says on stderr what the fix traded, what it could not
/// write and what it changed. The report's indexes are the FILEs'.
fn fix_files(
    args: &Args,
    files: &mut Vec<VmFile>,
    held: &[VmFile],
    host: &numaplace_topo::Topology,
    reserved: &numaplace_plan::Reservations,
) -> numaplace_lint::FixReport {
    let held_count = held.len();
    let mut all: Vec<VmFile> = held.iter().chain(files.iter()).cloned().collect();
    let report = fix_all_reserved(
        &mut all,
        host,
        reserved,
        FixOptions { allow_resize: args.allow_resize, held: held_count, strict: args.strict },
    );
    // Indexes of `all` are the FILEs' shifted by the held domains.
    *files = all.split_off(held_count);
    let report = numaplace_lint::FixReport {
        fixed: report.fixed.into_iter().map(|(i, t)| (i - held_count, t)).collect(),
        failed: report.failed.into_iter().map(|(i, e)| (i - held_count, e)).collect(),
        notes: report.notes.into_iter().map(|(i, n)| (i - held_count, n)).collect(),
        trade: report.trade,
    };
    if let Some(trade) = &report.trade {
        eprintln!("numaplace: fix trade for the set: {trade}");
    }
    for (i, e) in &report.failed {
        eprintln!("numaplace: {}: no fix written: {e}", files[*i].name);
    }
    for (i, note) in &report.notes {
        eprintln!("numaplace: {}: {note}", files[*i].name);
    }
    report
}

/// Writes each fixed text to its target (stdout when it has none), with
/// the original kept as FILE.bak under --in-place unless --no-backup.
fn write_fixed(args: &Args, planned: &[Option<PathBuf>], fixed: &[(usize, String)]) -> anyhow::Result<()> {
    for (i, text) in fixed {
        match planned[*i].clone() {
            Some(path) => {
                if args.in_place && !args.no_backup {
                    let mut backup = path.clone().into_os_string();
                    backup.push(".bak");
                    let original =
                        std::fs::read(&path).with_context(|| format!("reading {} to back it up", path.display()))?;
                    super::write_atomic(Path::new(&backup), original)
                        .with_context(|| format!("writing the backup {}", Path::new(&backup).display()))?;
                }
                super::write_atomic(&path, text).with_context(|| format!("writing {}", path.display()))?;
                eprintln!("numaplace: wrote {}", path.display());
            }
            None => super::print(text)?,
        }
    }
    Ok(())
}

/// The fix summary line (stderr): what was fixed, and each file left as
/// it was with why.
fn summary(files: &[VmFile], report: &numaplace_lint::FixReport, unchanged: &[usize], to_fix: &[usize]) -> String {
    let list = |at: &mut dyn Iterator<Item = usize>| at.map(|i| files[i].name.as_str()).collect::<Vec<_>>().join(", ");
    let why = |i: usize| {
        if report.failed.iter().any(|(j, _)| *j == i) {
            "no fix written"
        } else if to_fix.contains(&i) {
            "nothing to change"
        } else {
            "no warning or error"
        }
    };
    let mut left = String::new();
    for reason in ["no fix written", "nothing to change", "no warning or error"] {
        let names = list(&mut unchanged.iter().copied().filter(|&i| why(i) == reason));
        if !names.is_empty() {
            left.push_str(&format!("; left as they were ({reason}): {names}"));
        }
    }
    let fixed_names = list(&mut report.fixed.iter().map(|(i, _)| *i));
    format!(
        "numaplace: fix summary: {} fixed{}{left}",
        report.fixed.len(),
        if fixed_names.is_empty() { String::new() } else { format!(": {fixed_names}") }
    )
}

/// Runs `numaplace lint`.
pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let (mut files, unreadable) = read_files(&args.files);
    if unreadable > 0 && files.is_empty() {
        return Ok(ExitCode::from(2));
    }
    let ending = |code: ExitCode| if unreadable > 0 { ExitCode::from(2) } else { code };
    let host = super::topology::load(args.host.as_deref())?;
    let (reserved, profile) = args.reserve.load(&host)?;
    let host = args.reserve.declared(host, profile.as_ref())?;
    let mut held = match &args.state {
        Some(spec) => match held_domains(spec, &files)? {
            Some(domains) => domains,
            None => return Ok(ExitCode::from(2)),
        },
        None => Vec::new(),
    };
    if args.fix && files.is_empty() {
        bail!("--fix writes files; the domains of --state are not changed by lint (plan them and `numaplace apply`)");
    }
    // With FILEs, the host's domains are context, ahead of them (a
    // cross-VM finding is reported on the later file: the FILE); only the
    // FILEs' findings are shown. Without, the domains are what is checked.
    let shown = if files.is_empty() { held.len() } else { files.len() };
    let only_files = !files.is_empty();
    let held_count = if only_files { held.len() } else { 0 };
    if !only_files {
        files = held;
        held = Vec::new();
    }
    let with_held = |files: &[VmFile]| -> Vec<VmFile> { held.iter().chain(files).cloned().collect() };
    // The host's domains (ahead of the FILEs) are the incumbents: a
    // collision between one and a FILE is reported on the FILE.
    let lint = |files: &[VmFile], host| lint_held(files, held_count, host, &reserved);
    // A finding on a host domain whose evidence quotes a FILE's lines is
    // about that FILE too (a FILE pinned 1:1 where an unpinned domain of
    // the host floats: floating-on-dedicated is on the floating one), so
    // it is shown.
    let keep = |findings: Vec<Finding>, files: &[VmFile]| -> Vec<Finding> {
        let mine: Vec<&str> = files.iter().map(|f| f.name.as_str()).collect();
        findings
            .into_iter()
            .filter(|f| mine.contains(&f.file.as_str()) || f.evidence.iter().any(|e| mine.contains(&e.file.as_str())))
            .collect()
    };
    let findings = keep(lint(&with_held(&files), &host), &files);
    if !args.fix {
        super::print(&render(&findings, shown, args.format))?;
        return Ok(ending(exit_for(&findings, args.fail_on)));
    }

    let to_fix: Vec<usize> = (0..files.len())
        .filter(|&i| {
            files[i].format != SourceFormat::Request
                && findings.iter().any(|f| f.file == files[i].name && f.severity >= Severity::Warning)
        })
        .collect();
    let to_stdout = args.output.is_none() && !args.in_place;
    if to_stdout && to_fix.len() > 1 {
        bail!("--fix would write {} files; give --output DIR or --in-place", to_fix.len());
    }
    // A directory is made when several inputs need one, or when the one
    // input's --output is written as a directory (`out/`); every input
    // goes there, fixed or copied unchanged.
    let as_dir = |d: &PathBuf| args.files.len() > 1 || d.as_os_str().to_string_lossy().ends_with('/');
    let to_dir = args.output.as_ref().filter(|d| as_dir(d) && !args.in_place);
    if to_fix.is_empty() && to_dir.is_none() {
        super::print(&render(&findings, shown, args.format))?;
        return Ok(ending(exit_for(&findings, args.fail_on)));
    }
    // Every target is settled (and the directory made) before the first
    // file is written, so a bad --output loses nothing.
    let names: Vec<&str> = files.iter().map(|f| f.name.as_str()).collect();
    let every: Vec<usize> = (0..files.len()).collect();
    let planned = targets(&args, &names, &every)?;
    if let Some(dir) = to_dir {
        std::fs::create_dir_all(dir)
            .with_context(|| format!("--output {}: cannot create the directory", dir.display()))?;
    }
    let report = fix_files(&args, &mut files, &held, &host, &reserved);
    if to_stdout && report.fixed.len() > 1 {
        // A floating file narrowed beside the one fixed: two files.
        bail!("--fix would write {} files; give --output DIR or --in-place", report.fixed.len());
    }
    write_fixed(&args, &planned, &report.fixed)?;
    // Every input is in the directory: those without a fix written are
    // copied as they are, so the directory is the whole set.
    let unchanged: Vec<usize> = (0..files.len()).filter(|i| !report.fixed.iter().any(|(j, _)| j == i)).collect();
    if to_dir.is_some() {
        for &i in &unchanged {
            let Some(path) = &planned[i] else { continue };
            super::write_atomic(path, &files[i].text).with_context(|| format!("writing {}", path.display()))?;
            eprintln!("numaplace: copied {} unchanged", path.display());
        }
    }
    eprintln!("{}", summary(&files, &report, &unchanged, &to_fix));
    let remaining = keep(lint(&with_held(&files), &host), &files);
    let rendered = render(&remaining, shown, args.format);
    if to_stdout && !report.fixed.is_empty() {
        eprint!("{rendered}");
    } else {
        super::print(&rendered)?;
    }
    Ok(ending(exit_for(&remaining, args.fail_on)))
}
