//! Pinning through libvirt. A libvirt domain's threads are pinned with
//! `virsh vcpupin --live` (one call per vCPU) and `virsh emulatorpin
//! --live`, so libvirt's view of the domain stays true; pinning its threads
//! behind libvirt's back would be contradicted by what libvirt reports and
//! reapplies. Any other process goes to a fallback pinner.
//!
//! Also `virsh`, the crate's one way of running the program. (The guest
//! harness, `numaplace-guest`, keeps its own: it may not depend on this
//! crate.)

use crate::act::{Pin, Pinned, System, Via};
use crate::procfs;
use crate::source::{FsSource, Source};
use numaplace_topo::CpuSet;
use std::process::Command;

/// Runs `virsh` with `args`: its standard output, or an error that names
/// the command and holds what virsh printed on standard error.
pub(crate) fn virsh(args: &[&str]) -> Result<String, String> {
    let out = Command::new("virsh").args(args).output().map_err(|e| e.to_string())?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(format!("virsh {}: {}", args.join(" "), String::from_utf8_lossy(&out.stderr).trim()))
    }
}

/// How a [`Virsh`] runs virsh (replaced by a recorder in tests).
type Runner = Box<dyn FnMut(&[&str]) -> Result<String, String> + Send>;

/// What the last `pin` went through, for `restore`.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Last {
    Nothing,
    Fallback,
    Domain { name: String, pid: u32 },
}

/// Pins libvirt domains through `virsh` and every other process with the
/// `fallback` pinner. A process is a libvirt domain when its command line
/// is QEMU's with `-name guest=NAME` and `virsh domstate NAME` succeeds.
///
/// Undoing a libvirt pin unpins (every online CPU): libvirt keeps no
/// history of earlier live pins, so "as it was" means unpinned unless the
/// domain XML pins it, which libvirt reapplies on the next start.
pub struct Virsh<P, S = FsSource> {
    source: S,
    fallback: P,
    run: Runner,
    last: Last,
}

impl<P> Virsh<P, FsSource> {
    /// The live host's domains, with `fallback` for other processes.
    pub fn live(fallback: P) -> Self {
        Virsh::new(FsSource::live(), fallback)
    }
}

impl<P, S: Source> Virsh<P, S> {
    /// Reads process command lines, thread names and the online CPUs
    /// from `source`.
    pub fn new(source: S, fallback: P) -> Self {
        Virsh { source, fallback, run: Box::new(virsh), last: Last::Nothing }
    }

    /// Whether a `virsh` program is on `PATH`.
    pub fn available() -> bool {
        std::env::var_os("PATH").is_some_and(|p| std::env::split_paths(&p).any(|d| d.join("virsh").is_file()))
    }

    /// The libvirt domain process `pid` runs, if libvirt knows it.
    fn domain(&mut self, pid: u32) -> Option<String> {
        let raw = self.source.proc_file(pid, "cmdline").ok()?;
        let name = procfs::qemu_info(&procfs::split_cmdline(&raw))?.name?;
        (self.run)(&["domstate", &name]).is_ok().then_some(name)
    }

    /// The vCPU indexes of a QEMU process, from its thread names
    /// (`CPU 3/KVM`), in order.
    fn vcpus(&self, pid: u32) -> Vec<u32> {
        let Ok(tids) = self.source.tids(pid) else { return Vec::new() };
        let mut out: Vec<u32> = tids
            .iter()
            .filter_map(|tid| {
                let comm = self.source.proc_file(pid, &format!("task/{tid}/comm")).ok()?;
                String::from_utf8_lossy(&comm).trim().strip_prefix("CPU ")?.split('/').next()?.parse().ok()
            })
            .collect();
        out.sort_unstable();
        out
    }

    /// Pins every vCPU and the emulator threads of `domain` to `list`.
    fn pin_domain(&mut self, domain: &str, pid: u32, list: &str) -> Result<(), String> {
        for vcpu in self.vcpus(pid) {
            (self.run)(&["vcpupin", domain, "--vcpu", &vcpu.to_string(), "--cpulist", list, "--live"])?;
        }
        (self.run)(&["emulatorpin", domain, "--cpulist", list, "--live"]).map(|_| ())
    }

    /// Pins `domain` to every online CPU.
    fn unpin_domain(&mut self, domain: &str, pid: u32) -> Result<(), String> {
        let all = self.source.host_file("sys/devices/system/cpu/online").map_err(|e| e.to_string())?;
        self.pin_domain(domain, pid, all.trim())
    }
}

impl<P, S> std::fmt::Debug for Virsh<P, S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Virsh").field("last", &self.last).finish_non_exhaustive()
    }
}

impl<P: Pin, S: Source> Pin for Virsh<P, S> {
    fn pin(&mut self, sys: &mut dyn System, pid: u32, cpus: &CpuSet) -> Pinned {
        let Some(name) = self.domain(pid) else {
            self.last = Last::Fallback;
            return self.fallback.pin(sys, pid, cpus);
        };
        self.last = Last::Domain { name: name.clone(), pid };
        match self.pin_domain(&name, pid, &cpus.to_list()) {
            Ok(()) => Pinned { via: Via::Libvirt, threads: 0, error: None, restored: false },
            Err(e) => Pinned {
                via: Via::Libvirt,
                threads: 0,
                error: Some(format!("virsh: {e}")),
                restored: self.unpin_domain(&name, pid).is_ok(),
            },
        }
    }

    fn restore(&mut self, sys: &mut dyn System) -> bool {
        match self.last.clone() {
            Last::Nothing => true,
            Last::Fallback => self.fallback.restore(sys),
            Last::Domain { name, pid } => self.unpin_domain(&name, pid).is_ok(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::act::{move_process, Affinity, Live};
    use crate::error::ReadError;
    use std::path::PathBuf;
    use std::sync::{Arc, Mutex};

    /// The recorded host (QEMU pid 32218 runs domain `app3` with vCPU
    /// threads `CPU 0/TCG` and `CPU 1/TCG`), plus the online CPUs.
    struct Host(FsSource);

    impl Source for Host {
        fn pids(&self) -> Result<Vec<u32>, ReadError> {
            self.0.pids()
        }
        fn tids(&self, pid: u32) -> Result<Vec<u32>, ReadError> {
            self.0.tids(pid)
        }
        fn proc_file(&self, pid: u32, rel: &str) -> Result<Vec<u8>, ReadError> {
            self.0.proc_file(pid, rel)
        }
        fn host_file(&self, rel: &str) -> Result<String, ReadError> {
            match rel {
                "sys/devices/system/cpu/online" => Ok("0-3\n".into()),
                _ => self.0.host_file(rel),
            }
        }
        fn node_ids(&self) -> Result<Vec<u32>, ReadError> {
            self.0.node_ids()
        }
    }

    type Log = Arc<Mutex<Vec<String>>>;

    /// A `Virsh` whose virsh knows `app3` and fails any call containing
    /// `fail_on`.
    fn recorded(fail_on: Option<&'static str>) -> (Virsh<Affinity, Host>, Log) {
        let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/data/host-qemu");
        let mut v = Virsh::new(Host(FsSource::new(root)), Affinity::default());
        let log: Log = Arc::default();
        let seen = Arc::clone(&log);
        v.run = Box::new(move |args: &[&str]| {
            let line = args.join(" ");
            seen.lock().map_err(|e| e.to_string())?.push(line.clone());
            match (args, fail_on) {
                (["domstate", name], _) if *name != "app3" => Err(format!("virsh {line}: no domain")),
                (_, Some(f)) if line.contains(f) => Err(format!("virsh {line}: refused")),
                _ => Ok(String::new()),
            }
        });
        (v, log)
    }

    fn calls(log: &Log) -> Vec<String> {
        log.lock().map(|l| l.clone()).unwrap_or_default()
    }

    #[test]
    fn a_domain_is_pinned_per_vcpu_and_emulator_through_libvirt() {
        let (mut v, log) = recorded(None);
        let p = v.pin(&mut Live::default(), 32218, &"2-3".parse().expect("set"));
        assert_eq!(p, Pinned { via: Via::Libvirt, threads: 0, error: None, restored: false });
        assert_eq!(
            calls(&log),
            [
                "domstate app3",
                "vcpupin app3 --vcpu 0 --cpulist 2-3 --live",
                "vcpupin app3 --vcpu 1 --cpulist 2-3 --live",
                "emulatorpin app3 --cpulist 2-3 --live",
            ]
        );
        // A later failure unpins the domain onto every online CPU.
        assert!(v.restore(&mut Live::default()));
        assert_eq!(
            calls(&log)[4..],
            [
                "vcpupin app3 --vcpu 0 --cpulist 0-3 --live",
                "vcpupin app3 --vcpu 1 --cpulist 0-3 --live",
                "emulatorpin app3 --cpulist 0-3 --live"
            ]
        );
    }

    #[test]
    fn a_refused_pin_is_undone_and_reported() {
        let (mut v, log) = recorded(Some("--vcpu 1 --cpulist 2-3"));
        let p = v.pin(&mut Live::default(), 32218, &"2-3".parse().expect("set"));
        assert_eq!(p.via, Via::Libvirt);
        assert_eq!(
            p.error.as_deref(),
            Some("virsh: virsh vcpupin app3 --vcpu 1 --cpulist 2-3 --live: refused"),
            "{:?}",
            calls(&log)
        );
        assert!(p.restored);
        assert_eq!(calls(&log).last().map(String::as_str), Some("emulatorpin app3 --cpulist 0-3 --live"));
    }

    #[test]
    fn other_processes_go_to_the_fallback() {
        // A process the recorded host lacks has no QEMU command line: no
        // virsh call at all, and the fallback pins thread by thread (here
        // it finds no threads on this kernel either, so pinning fails
        // before changing anything).
        let (mut v, log) = recorded(None);
        let out = move_process(&mut v, &mut Live::default(), 999_999_999, 0, &"0".parse().expect("set"), 0);
        assert_eq!(out.via, Via::SchedSetaffinity);
        assert!(out.error.as_deref().is_some_and(|e| e.starts_with("pinning threads")), "{out:?}");
        assert!(calls(&log).is_empty());
    }
}
