//! The balancer's live pinning through libvirt: observe's [`Pin`]
//! implemented for libvirt domains. A domain's threads are pinned with
//! `virsh vcpupin --live` (one call per vCPU) and `virsh emulatorpin
//! --live`, through the same [`Libvirt`] calls `apply` re-pins with, so
//! libvirt's view of the domain stays true; pinning its threads behind
//! libvirt's back would be contradicted by what libvirt reports and
//! reapplies. Any other process goes to a fallback pinner.

use crate::{Libvirt, Virsh};
use numaplace_observe::act::{Pin, Pinned, System, Via};
use numaplace_observe::host::{Pins, Target};
use numaplace_observe::procfs;
use numaplace_observe::{FsSource, Source};
use numaplace_topo::CpuSet;

/// What the last `pin` went through, for `restore`.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Last {
    Nothing,
    Fallback,
    Domain { name: String, pid: u32, before: Pins },
}

/// Pins libvirt domains through [`Libvirt`] (`virsh`) and every other
/// process with the `fallback` pinner. A process is a libvirt domain when
/// its command line is QEMU's with `-name guest=NAME` and libvirt knows a
/// domain of that name.
///
/// Undoing a libvirt pin applies the target's `before` pins: libvirt
/// keeps no history of earlier live pins, and unpinning onto every CPU
/// would put a dedicated VM on other VMs' and the host's CPUs.
pub struct LivePin<P, S = FsSource> {
    source: S,
    fallback: P,
    libvirt: Box<dyn Libvirt>,
    last: Last,
}

impl<P> LivePin<P, FsSource> {
    /// The live host's domains (libvirt's default connection, as a bare
    /// `virsh` reaches it), with `fallback` for other processes.
    pub fn live(fallback: P) -> Self {
        LivePin::new(FsSource::live(), Box::new(Virsh::default_connection()), fallback)
    }
}

impl<P, S: Source> LivePin<P, S> {
    /// Reads process command lines and thread names from `source`, and
    /// pins domains through `libvirt`.
    pub fn new(source: S, libvirt: Box<dyn Libvirt>, fallback: P) -> Self {
        LivePin { source, fallback, libvirt, last: Last::Nothing }
    }

    /// The libvirt domain process `pid` runs, if libvirt knows it.
    fn domain(&mut self, pid: u32) -> Option<String> {
        let raw = self.source.proc_file(pid, "cmdline").ok()?;
        let name = procfs::qemu_info(&procfs::split_cmdline(&raw))?.name?;
        self.libvirt.domain(&name).ok().flatten().map(|d| d.name)
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

    /// Pins the vCPUs and the emulator threads of `domain` as `pins`
    /// says: a dedicated VM's vCPUs one CPU each, a floating VM's every
    /// vCPU (as its threads name them) over the set.
    fn pin_domain(&mut self, domain: &str, pid: u32, pins: &Pins) -> Result<(), String> {
        let (vcpus, emulator): (Vec<(u32, CpuSet)>, &CpuSet) = match pins {
            Pins::Floating(cpus) => (self.vcpus(pid).into_iter().map(|v| (v, cpus.clone())).collect(), cpus),
            Pins::Dedicated { vcpus, emulator } => {
                (vcpus.iter().map(|&(v, pu)| (v, std::iter::once(pu).collect())).collect(), emulator)
            }
        };
        for (vcpu, cpus) in vcpus {
            self.libvirt.pin_vcpu_live(domain, vcpu, &cpus).map_err(|e| e.to_string())?;
        }
        self.libvirt.pin_emulator_live(domain, emulator).map_err(|e| e.to_string())
    }
}

impl<P, S> std::fmt::Debug for LivePin<P, S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LivePin").field("last", &self.last).finish_non_exhaustive()
    }
}

impl<P: Pin, S: Source> Pin for LivePin<P, S> {
    fn pin(&mut self, sys: &mut dyn System, pid: u32, target: &Target) -> Pinned {
        let Some(name) = self.domain(pid) else {
            self.last = Last::Fallback;
            return self.fallback.pin(sys, pid, target);
        };
        self.last = Last::Domain { name: name.clone(), pid, before: target.before.clone() };
        match self.pin_domain(&name, pid, &target.after) {
            Ok(()) => Pinned { via: Via::Libvirt, threads: 0, error: None, restored: false },
            Err(e) => Pinned {
                via: Via::Libvirt,
                threads: 0,
                error: Some(e),
                restored: self.pin_domain(&name, pid, &target.before).is_ok(),
            },
        }
    }

    fn restore(&mut self, sys: &mut dyn System) -> bool {
        match self.last.clone() {
            Last::Nothing => true,
            Last::Fallback => self.fallback.restore(sys),
            Last::Domain { name, pid, before } => self.pin_domain(&name, pid, &before).is_ok(),
        }
    }

    // A domain's memory nodes are libvirt's (numatune); only a process
    // the fallback pinned has its memory let onto the new node by it.
    fn allow_memory(&mut self, sys: &mut dyn System, pid: u32, node: u32) -> Result<(), String> {
        match self.last {
            Last::Fallback => self.fallback.allow_memory(sys, pid, node),
            _ => Ok(()),
        }
    }

    fn bind_memory(
        &mut self,
        sys: &mut dyn System,
        pid: u32,
        node: u32,
        left: &std::collections::BTreeMap<u32, u64>,
        limit: u64,
    ) -> Result<(), String> {
        match self.last {
            Last::Fallback => self.fallback.bind_memory(sys, pid, node, left, limit),
            _ => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Domain, VcpuInfo, VirtError};
    use numaplace_observe::act::{move_process, Affinity, Live};
    use numaplace_observe::ReadError;
    use std::path::PathBuf;
    use std::sync::{Arc, Mutex};

    /// The recorded host (QEMU pid 32218 runs domain `app3` with vCPU
    /// threads `CPU 0/TCG` and `CPU 1/TCG`), plus the online CPUs. The
    /// tree is observe's test data.
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

    /// A libvirt that knows `app3`, records each call as the virsh
    /// arguments it stands for and fails any containing `fail_on`.
    struct Recorder {
        log: Log,
        fail_on: Option<&'static str>,
    }

    impl Recorder {
        fn call(&self, line: String) -> Result<(), VirtError> {
            if let Ok(mut log) = self.log.lock() {
                log.push(line.clone());
            }
            match self.fail_on {
                Some(f) if line.contains(f) => {
                    Err(VirtError::Command { command: format!("virsh {line}"), message: "refused".into() })
                }
                _ => Ok(()),
            }
        }
    }

    impl Libvirt for Recorder {
        fn describe(&self) -> String {
            "recorder".into()
        }
        fn domains(&self) -> Result<crate::Listing, VirtError> {
            Ok(crate::Listing { domains: Vec::new(), vanished: Vec::new() })
        }
        fn domain(&self, name: &str) -> Result<Option<Domain>, VirtError> {
            self.call(format!("domstate {name}"))?;
            Ok((name == "app3").then(|| Domain {
                name: name.into(),
                file: format!("recorder/{name}"),
                running: true,
                xml: String::new(),
            }))
        }
        fn persistent_xml(&self, _: &str) -> Result<String, VirtError> {
            Err(VirtError::ReadOnly(self.describe()))
        }
        fn define(&mut self, _: &str) -> Result<(), VirtError> {
            Err(VirtError::ReadOnly(self.describe()))
        }
        fn pin_vcpu_live(&mut self, name: &str, vcpu: u32, cpus: &CpuSet) -> Result<(), VirtError> {
            self.call(format!("vcpupin {name} --vcpu {vcpu} --cpulist {cpus} --live"))
        }
        fn pin_emulator_live(&mut self, name: &str, cpus: &CpuSet) -> Result<(), VirtError> {
            self.call(format!("emulatorpin {name} --cpulist {cpus} --live"))
        }
        fn numatune_live(&mut self, _: &str, _: &CpuSet) -> Result<(), VirtError> {
            Err(VirtError::ReadOnly(self.describe()))
        }
        fn vcpu_info(&self, _: &str) -> Result<Vec<VcpuInfo>, VirtError> {
            Err(VirtError::ReadOnly(self.describe()))
        }
        fn emulator_affinity(&self, _: &str) -> Result<CpuSet, VirtError> {
            Err(VirtError::ReadOnly(self.describe()))
        }
    }

    fn recorded(fail_on: Option<&'static str>) -> (LivePin<Affinity, Host>, Log) {
        let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../observe/tests/data/host-qemu");
        let log: Log = Arc::default();
        let libvirt = Recorder { log: Arc::clone(&log), fail_on };
        (LivePin::new(Host(FsSource::new(root)), Box::new(libvirt), Affinity::default()), log)
    }

    /// From floating over `before` to floating over `after`.
    fn floating(before: &str, after: &str) -> Target {
        let set = |s: &str| s.parse::<CpuSet>().expect("set");
        Target { before: Pins::Floating(set(before)), after: Pins::Floating(set(after)) }
    }

    fn calls(log: &Log) -> Vec<String> {
        log.lock().map(|l| l.clone()).unwrap_or_default()
    }

    #[test]
    fn a_domain_is_pinned_per_vcpu_and_emulator_through_libvirt() {
        let (mut v, log) = recorded(None);
        let p = v.pin(&mut Live::default(), 32218, &floating("0-3", "2-3"));
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
        // A later failure puts the domain back where it was.
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
    fn a_dedicated_domain_is_pinned_vcpu_by_vcpu_and_restored_to_its_own_pins() {
        let (mut v, log) = recorded(None);
        let dedicated = Target {
            before: Pins::Dedicated { vcpus: vec![(0, 1), (1, 2)], emulator: "0".parse().expect("set") },
            after: Pins::Dedicated { vcpus: vec![(0, 5), (1, 6)], emulator: "4".parse().expect("set") },
        };
        assert_eq!(v.pin(&mut Live::default(), 32218, &dedicated).error, None);
        assert!(v.restore(&mut Live::default()));
        assert_eq!(
            calls(&log),
            [
                "domstate app3",
                "vcpupin app3 --vcpu 0 --cpulist 5 --live",
                "vcpupin app3 --vcpu 1 --cpulist 6 --live",
                "emulatorpin app3 --cpulist 4 --live",
                // Back to its 1:1 pins, not onto every CPU.
                "vcpupin app3 --vcpu 0 --cpulist 1 --live",
                "vcpupin app3 --vcpu 1 --cpulist 2 --live",
                "emulatorpin app3 --cpulist 0 --live",
            ]
        );
    }

    #[test]
    fn a_refused_pin_is_undone_and_reported() {
        let (mut v, log) = recorded(Some("--vcpu 1 --cpulist 2-3"));
        let p = v.pin(&mut Live::default(), 32218, &floating("0-3", "2-3"));
        assert_eq!(p.via, Via::Libvirt);
        assert_eq!(
            p.error.as_deref(),
            Some("virsh vcpupin app3 --vcpu 1 --cpulist 2-3 --live: refused"),
            "{:?}",
            calls(&log)
        );
        assert!(p.restored);
        assert_eq!(calls(&log).last().map(String::as_str), Some("emulatorpin app3 --cpulist 0-3 --live"));
    }

    #[test]
    fn other_processes_go_to_the_fallback() {
        // A process the recorded host lacks has no QEMU command line: no
        // libvirt call at all, and the fallback pins thread by thread
        // (here it finds no threads on this kernel either, so pinning
        // fails before changing anything).
        let (mut v, log) = recorded(None);
        let out = move_process(&mut v, &mut Live::default(), 999_999_999, 0, &floating("0-3", "0"), 0);
        assert_eq!(out.via, Via::SchedSetaffinity);
        assert!(out.error.as_deref().is_some_and(|e| e.starts_with("pinning threads")), "{out:?}");
        assert!(calls(&log).is_empty());
    }
}
