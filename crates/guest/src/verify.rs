//! Boots a plan's guest through QEMU or libvirt and checks it: the one
//! function `verify` behind `numaplace verify`.

use crate::adapt::{adapt, Adapted};
use crate::boot::{boot_args, run_to_end, BootError};
use crate::check::{compare, Verdict};
use crate::prepare::{prepare, Assets, PrepareError};
use crate::report::{parse, ReportError};
use numaplace_emit::qemu::{args as qemu_args, QemuOptions};
use numaplace_libvirt::domain::{domain_xml, Boot, LibvirtOptions};
use numaplace_libvirt::{Libvirt, Virsh, VirtError};
use numaplace_plan::Placement;
use numaplace_topo::Topology;
use std::path::PathBuf;
use std::time::Duration;

/// Which way the guest is started.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Via {
    /// QEMU directly, with numaplace's QEMU arguments.
    Qemu,
    /// A libvirt domain defined from numaplace's libvirt XML.
    Libvirt,
}

/// How to verify.
#[derive(Clone, Debug)]
pub struct Options {
    /// QEMU or libvirt.
    pub via: Via,
    /// Where the kernel and initramfs are cached.
    pub cache: PathBuf,
    /// How long a guest may take.
    pub timeout: Duration,
    /// The most guest memory to give a test guest.
    pub max_memory: u64,
    /// The planning host's passthrough devices and their nodes. Under
    /// libvirt, each device of the plan near a guest cell is stood in for
    /// by a virtio-rng device behind that cell's expander bus, and the
    /// guest's `numa_node` of it is checked (`device cells`); empty: no
    /// device is checked.
    pub device_nodes: Vec<(String, numaplace_topo::NodeId)>,
}

/// The outcome for one VM.
#[derive(Clone, Debug)]
pub struct Outcome {
    /// The VM.
    pub vm: String,
    /// What matched and what did not.
    pub verdict: Verdict,
    /// What was adapted to this machine.
    pub notes: Vec<String>,
    /// Whether host pinning and binding were the plan's own.
    pub host_side_verified: bool,
}

/// Why a verification could not run (as opposed to ran and mismatched).
#[derive(Debug, thiserror::Error)]
pub enum VerifyError {
    /// Kernel or initramfs could not be prepared.
    #[error(transparent)]
    Prepare(#[from] PrepareError),
    /// QEMU could not run the guest.
    #[error(transparent)]
    Boot(#[from] BootError),
    /// The guest printed no usable report.
    #[error(transparent)]
    Report(#[from] ReportError),
    /// A libvirt step failed.
    #[error("libvirt: {step} failed: {detail}")]
    Libvirt {
        /// The step (`virsh define`, ...).
        step: String,
        /// What virsh said.
        detail: String,
    },
    /// The plan has nothing to boot.
    #[error("placement of {0} has no guest cells to verify")]
    NoCells(String),
}

/// Boots `placement`'s guest on this machine (`local`) and compares what
/// its kernel reports with the plan.
pub fn verify(placement: &Placement, local: &Topology, opts: &Options) -> Result<Outcome, VerifyError> {
    if placement.guest.cells.is_empty() {
        return Err(VerifyError::NoCells(placement.vm.clone()));
    }
    // The cells the plan's devices are near, worked out on the planning
    // host's nodes before the guest is fitted to this machine.
    let near = numaplace_emit::pcie::expanders(placement, &opts.device_nodes);
    let Adapted { placement: p, notes, host_side_verified } = adapt(placement, local, opts.max_memory);
    let assets = prepare(&opts.cache)?;
    // Under libvirt each device near a cell gets a stand-in there (the
    // fitted placement has none of the devices: this machine lacks them).
    let stand_ins: Vec<(String, u32)> = if opts.via == Via::Libvirt {
        near.iter().flat_map(|e| e.devices.iter().map(|d| (d.clone(), e.cell))).collect()
    } else {
        Vec::new()
    };
    let serial = match opts.via {
        Via::Qemu => boot_qemu(&p, &assets, opts.timeout)?,
        Via::Libvirt => boot_libvirt(&p, &assets, opts, &stand_ins)?,
    };
    let report = parse(&serial)?;
    let mut verdict = compare(&p.guest, p.online_vcpus, &report);
    let cells: Vec<u32> = near.iter().flat_map(|e| e.devices.iter().map(|_| e.cell)).collect();
    if !stand_ins.is_empty() {
        verdict.checks.extend(crate::check::compare_devices(&cells, &report));
    }
    Ok(Outcome { vm: placement.vm.clone(), verdict, notes, host_side_verified })
}

fn boot_qemu(p: &Placement, assets: &Assets, timeout: Duration) -> Result<String, VerifyError> {
    let mut args = qemu_args(p, &QemuOptions::tcg());
    // Single-threaded TCG boots faster than multi-threaded on small
    // machines (measured: 2 cores).
    if let Some(i) = args.iter().position(|a| a == "-accel") {
        if let Some(v) = args.get_mut(i + 1) {
            *v = "tcg,thread=single".to_string();
        }
    }
    args.extend(boot_args(&assets.kernel, &assets.initrd));
    Ok(run_to_end("qemu-system-x86_64", &args, timeout)?)
}

/// A libvirt failure as a verification error: the command and what
/// libvirt said.
fn failed(e: VirtError) -> VerifyError {
    match e {
        VirtError::Command { command, message } | VirtError::Reply { command, message } => {
            VerifyError::Libvirt { step: command, detail: message.chars().take(600).collect() }
        }
        other => VerifyError::Libvirt { step: "libvirt".into(), detail: other.to_string() },
    }
}

/// Removes the test domain however the verification ends: normally, by an
/// error, or by Ctrl-C (see `install_interrupt_cleanup`).
struct DomainGuard {
    name: String,
    log: PathBuf,
}

impl Drop for DomainGuard {
    fn drop(&mut self) {
        cleanup_domain(&self.name);
        forget_domain(&self.name);
        let _ = std::fs::remove_file(&self.log);
    }
}

fn cleanup_domain(name: &str) {
    let mut virsh = Virsh::default_connection();
    let _ = virsh.destroy(name);
    let _ = virsh.undefine(name);
}

fn boot_libvirt(
    p: &Placement,
    assets: &Assets,
    opts: &Options,
    stand_ins: &[(String, u32)],
) -> Result<String, VerifyError> {
    let name = format!("numaplace-verify-{}-{}", sanitize(&p.vm), std::process::id());
    let dir = opts.cache.join("libvirt");
    std::fs::create_dir_all(&dir)
        .map_err(|e| VerifyError::Libvirt { step: "creating the log folder".into(), detail: e.to_string() })?;
    // One log file per domain: two domains sharing one fail to start.
    let log = dir.join(format!("{name}.log"));
    let _ = std::fs::remove_file(&log);
    let mut renamed = p.clone();
    renamed.vm = name.clone();
    let boot = Boot {
        kernel: assets.kernel.clone(),
        initrd: assets.initrd.clone(),
        // no_timer_check: see boot::boot_args (a TCG guest on a busy
        // host can fail the IO-APIC timer check and panic at boot).
        cmdline: "console=ttyS0 quiet panic=-1 no_timer_check".to_string(),
        serial_log: log.clone(),
    };
    let xml = domain_xml(
        &renamed,
        &LibvirtOptions { boot: Some(boot), stand_ins: stand_ins.to_vec(), ..LibvirtOptions::tcg() },
    );
    let guard = DomainGuard { name: name.clone(), log: log.clone() };
    install_interrupt_cleanup(&name);
    let mut virsh = Virsh::default_connection();
    virsh.define(&xml).map_err(failed)?;
    virsh.start(&name).map_err(failed)?;
    let start = std::time::Instant::now();
    loop {
        if virsh.state(&name).map_err(failed)? == "shut off" {
            break;
        }
        if start.elapsed() > opts.timeout {
            let console = std::fs::read_to_string(&log).unwrap_or_default();
            return Err(VerifyError::Boot(BootError::Timeout { limit: opts.timeout, console }));
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    let serial = std::fs::read_to_string(&log)
        .map_err(|e| VerifyError::Libvirt { step: format!("reading {}", log.display()), detail: e.to_string() })?;
    drop(guard);
    Ok(serial)
}

fn sanitize(name: &str) -> String {
    name.chars().map(|c| if c.is_ascii_alphanumeric() || c == '-' { c } else { '_' }).take(40).collect()
}

/// Test domains alive right now, for the interrupt handler.
static LIVE_DOMAINS: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());

/// On Ctrl-C or SIGTERM, removes every live test domain before exiting, so
/// an interrupted verification leaves nothing behind.
fn install_interrupt_cleanup(name: &str) {
    if let Ok(mut live) = LIVE_DOMAINS.lock() {
        live.push(name.to_string());
    }
    static INSTALLED: std::sync::Once = std::sync::Once::new();
    INSTALLED.call_once(|| {
        let _ = ctrlc::set_handler(|| {
            if let Ok(live) = LIVE_DOMAINS.lock() {
                live.iter().for_each(|n| cleanup_domain(n));
            }
            std::process::exit(130);
        });
    });
}

fn forget_domain(name: &str) {
    if let Ok(mut live) = LIVE_DOMAINS.lock() {
        live.retain(|n| n != name);
    }
}
