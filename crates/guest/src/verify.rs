//! Boots a plan's guest through QEMU or libvirt and checks it: the one
//! function `verify` behind `numaplace verify`.

use crate::adapt::{adapt, Adapted};
use crate::boot::{boot_args, run_to_end, BootError};
use crate::check::{compare, Verdict};
use crate::prepare::{prepare, Assets, PrepareError};
use crate::report::{parse, ReportError};
use numaplace_emit::qemu::{args as qemu_args, QemuOptions};
use numaplace_libvirt::domain::{domain_xml, LibvirtOptions};
use numaplace_plan::Placement;
use numaplace_topo::Topology;
use std::path::PathBuf;
use std::process::Command;
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
    let Adapted { placement: p, notes, host_side_verified } = adapt(placement, local, opts.max_memory);
    let assets = prepare(&opts.cache)?;
    let serial = match opts.via {
        Via::Qemu => boot_qemu(&p, &assets, opts.timeout)?,
        Via::Libvirt => boot_libvirt(&p, &assets, opts)?,
    };
    let report = parse(&serial)?;
    Ok(Outcome {
        vm: placement.vm.clone(),
        verdict: compare(&p.guest, p.online_vcpus, &report),
        notes,
        host_side_verified,
    })
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

fn virsh(args: &[&str]) -> Result<String, VerifyError> {
    let out = Command::new("virsh").args(args).output().map_err(|e| VerifyError::Libvirt {
        step: format!("virsh {}", args.join(" ")),
        detail: format!("{e} (install the libvirt-clients package)"),
    })?;
    if !out.status.success() {
        return Err(VerifyError::Libvirt {
            step: format!("virsh {}", args.first().copied().unwrap_or("")),
            detail: String::from_utf8_lossy(&out.stderr).trim().chars().take(600).collect(),
        });
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
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
    let _ = Command::new("virsh").args(["destroy", name]).output();
    let _ = Command::new("virsh").args(["undefine", name]).output();
}

fn boot_libvirt(p: &Placement, assets: &Assets, opts: &Options) -> Result<String, VerifyError> {
    let name = format!("numaplace-verify-{}-{}", sanitize(&p.vm), std::process::id());
    let dir = opts.cache.join("libvirt");
    std::fs::create_dir_all(&dir)
        .map_err(|e| VerifyError::Libvirt { step: "creating the log folder".into(), detail: e.to_string() })?;
    // One log file per domain: two domains sharing one fail to start.
    let log = dir.join(format!("{name}.log"));
    let _ = std::fs::remove_file(&log);
    let mut renamed = p.clone();
    renamed.vm = name.clone();
    let xml = domain_xml(&renamed, &LibvirtOptions::tcg());
    let xml = with_boot(&xml, assets, &log);
    let file = dir.join(format!("{name}.xml"));
    std::fs::write(&file, &xml)
        .map_err(|e| VerifyError::Libvirt { step: "writing the domain XML".into(), detail: e.to_string() })?;
    let guard = DomainGuard { name: name.clone(), log: log.clone() };
    install_interrupt_cleanup(&name);
    let defined = virsh(&["define", &file.to_string_lossy()]);
    let _ = std::fs::remove_file(&file);
    defined?;
    virsh(&["start", &name])?;
    let start = std::time::Instant::now();
    loop {
        let state = virsh(&["domstate", &name])?;
        if state.trim() == "shut off" {
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

/// Adds direct kernel boot and a file-backed serial console to a domain.
fn with_boot(xml: &str, assets: &Assets, log: &std::path::Path) -> String {
    let esc = numaplace_libvirt::domain::escape;
    let boot = format!(
        "</type>\n    <kernel>{}</kernel>\n    <initrd>{}</initrd>\n    <cmdline>console=ttyS0 quiet panic=-1</cmdline>",
        esc(&assets.kernel.to_string_lossy()),
        esc(&assets.initrd.to_string_lossy())
    );
    let serial = format!(
        "<serial type='file'>\n      <source path='{}'/>\n      <target port='0'/>\n    </serial>",
        esc(&log.to_string_lossy())
    );
    let xml = xml.replacen("</type>", &boot, 1);
    // A guest that panics or reboots ends its domain, as `-no-reboot`
    // ends QEMU: restarting it would only run into the time limit.
    let xml = xml.replacen("<on_reboot>restart</on_reboot>", "<on_reboot>destroy</on_reboot>", 1);
    match (xml.find("<serial type='pty'>"), xml.find("</serial>")) {
        (Some(a), Some(b)) if a < b => format!("{}{}{}", &xml[..a], serial, &xml[b + "</serial>".len()..]),
        _ => xml,
    }
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
