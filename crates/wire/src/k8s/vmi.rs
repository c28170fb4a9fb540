//! KubeVirt's VirtualMachineInstance (`kubevirt.io/v1`), the part of it
//! that decides where a VM's CPUs and memory go, read as a placement
//! request (docs/adapters.md, "Reading the VMI").
//!
//! The keys are KubeVirt's (`kubevirt.io/api/core/v1`, `schema.go`):
//! `spec.domain.cpu` (`sockets`, `cores`, `threads`, `maxSockets`,
//! `dedicatedCpuPlacement`, `isolateEmulatorThread`,
//! `numa.guestMappingPassthrough`), `spec.domain.memory` (`guest`,
//! `maxGuest`, `hugepages.pageSize`) and `spec.domain.resources`. As for
//! a pod, other fields are foreign and ignored; a field among these that
//! numaplace cannot honour is refused by name ([`VmiRefusal`]), never
//! dropped.

use super::quantity_milli;
use numaplace_plan::{CpuMode, EmulatorPlacement, Request, SmtPolicy};
use serde::Deserialize;
use std::collections::BTreeMap;

/// The part of a `VirtualMachineInstance` numaplace reads.
#[derive(Clone, Debug, Default, Deserialize)]
pub struct Vmi {
    /// Name, namespace, UID.
    #[serde(default)]
    pub metadata: VmiMeta,
    /// The spec.
    #[serde(default)]
    pub spec: VmiSpec,
}

/// The VMI's `metadata`, the part numaplace reads.
#[derive(Clone, Debug, Default, Deserialize)]
pub struct VmiMeta {
    /// Its name.
    #[serde(default)]
    pub name: String,
    /// Its UID (a launcher pod's `kubevirt.io/created-by` label).
    #[serde(default)]
    pub uid: String,
}

/// `spec`.
#[derive(Clone, Debug, Default, Deserialize)]
pub struct VmiSpec {
    /// `spec.domain`.
    #[serde(default)]
    pub domain: Domain,
}

/// `spec.domain`.
#[derive(Clone, Debug, Default, Deserialize)]
pub struct Domain {
    /// `resources`: requests and limits, as a pod's.
    #[serde(default)]
    pub resources: QuantityMaps,
    /// `cpu`.
    #[serde(default)]
    pub cpu: Option<Cpu>,
    /// `memory`.
    #[serde(default)]
    pub memory: Option<Memory>,
}

/// Requests and limits by resource name.
#[derive(Clone, Debug, Default, Deserialize)]
pub struct QuantityMaps {
    /// `requests`.
    #[serde(default)]
    pub requests: BTreeMap<String, Quantity>,
    /// `limits`.
    #[serde(default)]
    pub limits: BTreeMap<String, Quantity>,
}

/// A Kubernetes quantity as JSON carries it: a string (`4Gi`), or a
/// number, which `resource.Quantity` also accepts.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(untagged)]
pub enum Quantity {
    /// `"4Gi"`.
    Text(String),
    /// `4`.
    Number(serde_json::Number),
}

impl Quantity {
    fn text(&self) -> String {
        match self {
            Quantity::Text(s) => s.clone(),
            Quantity::Number(n) => n.to_string(),
        }
    }
}

/// `spec.domain.cpu` (KubeVirt's `CPU`).
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Cpu {
    /// Cores per socket (0: 1).
    #[serde(default)]
    pub cores: u32,
    /// Sockets (0: 1).
    #[serde(default)]
    pub sockets: u32,
    /// The sockets the VM may grow to by CPU hot-plug (0: none).
    #[serde(default)]
    pub max_sockets: u32,
    /// Threads per core (0: 1).
    #[serde(default)]
    pub threads: u32,
    /// Each vCPU pinned to a CPU of its own.
    #[serde(default)]
    pub dedicated_cpu_placement: bool,
    /// The emulator thread on one more dedicated CPU of its own.
    #[serde(default)]
    pub isolate_emulator_thread: bool,
    /// `numa`.
    #[serde(default)]
    pub numa: Option<Numa>,
}

/// `spec.domain.cpu.numa`.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Numa {
    /// Present (an empty object): the guest is shown the host's NUMA
    /// nodes its CPUs and memory are on.
    #[serde(default)]
    pub guest_mapping_passthrough: Option<serde_json::Value>,
}

/// `spec.domain.memory`.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Memory {
    /// The guest's memory.
    #[serde(default)]
    pub guest: Option<Quantity>,
    /// The most the guest's memory may grow to by hot-plug.
    #[serde(default)]
    pub max_guest: Option<Quantity>,
    /// Huge pages backing the guest.
    #[serde(default)]
    pub hugepages: Option<Hugepages>,
}

/// `spec.domain.memory.hugepages`.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Hugepages {
    /// `2Mi`, `1Gi`.
    #[serde(default)]
    pub page_size: String,
}

/// Why a VMI cannot be placed as asked: the field, and what numaplace
/// would need. Each has a code, like the planner's reasons.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum VmiRefusal {
    /// A quantity that does not parse.
    BadQuantity {
        /// The field.
        field: String,
        /// Its value.
        value: String,
    },
    /// More than two threads per core: numaplace pairs sibling threads,
    /// it does not group four or eight.
    Threads(u32),
    /// `isolateEmulatorThread` without `dedicatedCpuPlacement` (KubeVirt
    /// refuses it too: there is no dedicated CPU to add one to).
    IsolateNeedsDedicated,
    /// `numa.guestMappingPassthrough` without `dedicatedCpuPlacement`:
    /// a floating VM's CPUs are on no node in particular.
    PassthroughNeedsDedicated,
    /// `memory.maxGuest` above the guest's memory: numaplace plans no
    /// memory hot-plug.
    MemoryHotplug {
        /// `maxGuest`, bytes.
        max: u64,
        /// The guest's memory, bytes.
        guest: u64,
    },
    /// No memory in `memory.guest` nor in the resources.
    NoMemory,
    /// Too many vCPUs to count.
    TooManyVcpus,
}

impl VmiRefusal {
    /// The code, as reasons spell it.
    pub fn code(&self) -> &'static str {
        match self {
            VmiRefusal::BadQuantity { .. } => "vmi-bad-quantity",
            VmiRefusal::Threads(_) => "vmi-threads",
            VmiRefusal::IsolateNeedsDedicated => "vmi-isolate-needs-dedicated",
            VmiRefusal::PassthroughNeedsDedicated => "vmi-passthrough-needs-dedicated",
            VmiRefusal::MemoryHotplug { .. } => "vmi-memory-hotplug",
            VmiRefusal::NoMemory => "vmi-no-memory",
            VmiRefusal::TooManyVcpus => "vmi-too-many-vcpus",
        }
    }
}

impl std::fmt::Display for VmiRefusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            VmiRefusal::BadQuantity { field, value } => {
                write!(f, "{field}: expected a Kubernetes quantity, found {value:?}")
            }
            VmiRefusal::Threads(n) => write!(
                f,
                "spec.domain.cpu.threads: numaplace places at most 2 threads per core (sibling pairs), not {n}"
            ),
            VmiRefusal::IsolateNeedsDedicated => {
                f.write_str("spec.domain.cpu.isolateEmulatorThread: needs dedicatedCpuPlacement: true")
            }
            VmiRefusal::PassthroughNeedsDedicated => {
                f.write_str("spec.domain.cpu.numa.guestMappingPassthrough: needs dedicatedCpuPlacement: true")
            }
            VmiRefusal::MemoryHotplug { max, guest } => write!(
                f,
                "spec.domain.memory.maxGuest: {max} bytes above the guest's {guest}: numaplace plans no memory hot-plug"
            ),
            VmiRefusal::NoMemory => {
                f.write_str("spec.domain.memory.guest: expected the guest's memory (or resources.requests.memory)")
            }
            VmiRefusal::TooManyVcpus => {
                f.write_str("spec.domain.cpu: sockets x cores x threads is more than numaplace reads")
            }
        }
    }
}

impl std::error::Error for VmiRefusal {}

fn quantity(q: &Quantity, field: &str) -> Result<u128, VmiRefusal> {
    let text = q.text();
    quantity_milli(&text).ok_or(VmiRefusal::BadQuantity { field: field.to_string(), value: text })
}

/// A byte quantity, rounded up to whole bytes.
fn bytes(q: &Quantity, field: &str) -> Result<u64, VmiRefusal> {
    let text = q.text();
    u64::try_from(quantity(q, field)?.div_ceil(1000))
        .map_err(|_| VmiRefusal::BadQuantity { field: field.to_string(), value: text })
}

impl Vmi {
    /// The VM request this VMI asks for, kept under `vm` (the launcher
    /// pod's VM name, so filter, prioritize and bind agree):
    ///
    /// - vCPUs: `sockets x cores x threads` when any is given, else the
    ///   CPUs of `resources` (limits, else requests) rounded up, else 1,
    ///   as KubeVirt counts them; `maxSockets` above `sockets` plans the
    ///   hot-pluggable vCPUs too (`max_vcpus`).
    /// - `dedicatedCpuPlacement`: pinned (`cpu: dedicated`), else floating.
    /// - `threads: 2` on a dedicated VM: sibling pairs (the guest is told
    ///   its vCPUs are threads of one core); more than 2 is refused.
    /// - `isolateEmulatorThread`: the emulator on one more dedicated CPU.
    /// - `numa.guestMappingPassthrough`: the guest is shown the host nodes
    ///   its vCPUs are on, so the VM may span nodes; a dedicated VM
    ///   without it is shown one NUMA node, so it is kept on one
    ///   (`max_nodes: 1`).
    /// - memory: `memory.guest`, else `resources` memory (requests, else
    ///   limits); `hugepages.pageSize` backs it with pages of that size;
    ///   `maxGuest` above it is refused.
    pub fn request(&self, vm: &str) -> Result<Request, VmiRefusal> {
        let d = &self.spec.domain;
        let default_cpu = Cpu::default();
        let cpu = d.cpu.as_ref().unwrap_or(&default_cpu);
        let one = |n: u32| n.max(1);
        let topology_given = cpu.sockets > 0 || cpu.cores > 0 || cpu.threads > 0;
        let vcpus = if topology_given {
            u64::from(one(cpu.sockets)) * u64::from(one(cpu.cores)) * u64::from(one(cpu.threads))
        } else {
            let q = d
                .resources
                .limits
                .get("cpu")
                .map(|q| (q, "limits"))
                .or_else(|| d.resources.requests.get("cpu").map(|q| (q, "requests")));
            match q {
                Some((q, which)) => {
                    let milli = quantity(q, &format!("spec.domain.resources.{which}.cpu"))?;
                    u64::try_from(milli.div_ceil(1000)).map_err(|_| VmiRefusal::TooManyVcpus)?.max(1)
                }
                None => 1,
            }
        };
        let vcpus = u32::try_from(vcpus).map_err(|_| VmiRefusal::TooManyVcpus)?;
        let dedicated = cpu.dedicated_cpu_placement;
        if cpu.threads > 2 {
            return Err(VmiRefusal::Threads(cpu.threads));
        }
        if cpu.isolate_emulator_thread && !dedicated {
            return Err(VmiRefusal::IsolateNeedsDedicated);
        }
        let passthrough = cpu.numa.as_ref().is_some_and(|n| n.guest_mapping_passthrough.is_some());
        if passthrough && !dedicated {
            return Err(VmiRefusal::PassthroughNeedsDedicated);
        }
        let mem = d.memory.as_ref();
        let guest = match mem.and_then(|m| m.guest.as_ref()) {
            Some(q) => Some(bytes(q, "spec.domain.memory.guest")?),
            None => match (d.resources.requests.get("memory"), d.resources.limits.get("memory")) {
                (Some(q), _) => Some(bytes(q, "spec.domain.resources.requests.memory")?),
                (None, Some(q)) => Some(bytes(q, "spec.domain.resources.limits.memory")?),
                (None, None) => None,
            },
        };
        let guest = guest.filter(|b| *b > 0).ok_or(VmiRefusal::NoMemory)?;
        if let Some(q) = mem.and_then(|m| m.max_guest.as_ref()) {
            let max = bytes(q, "spec.domain.memory.maxGuest")?;
            if max > guest {
                return Err(VmiRefusal::MemoryHotplug { max, guest });
            }
        }
        let page = match mem.and_then(|m| m.hugepages.as_ref()) {
            Some(h) => Some(bytes(&Quantity::Text(h.page_size.clone()), "spec.domain.memory.hugepages.pageSize")?),
            None => None,
        };
        let mut r = Request::new(vm, vcpus, guest);
        r.cpu_mode = if dedicated { CpuMode::Dedicated } else { CpuMode::Shared };
        r.hugepage_bytes = page;
        if dedicated && cpu.threads == 2 {
            r.smt = SmtPolicy::Pairs;
        }
        r.emulator = if cpu.isolate_emulator_thread { EmulatorPlacement::Isolate } else { EmulatorPlacement::VmNodes };
        if dedicated && !passthrough {
            r.max_nodes = Some(1);
        }
        if cpu.max_sockets > one(cpu.sockets) {
            let max = u64::from(cpu.max_sockets) * u64::from(one(cpu.cores)) * u64::from(one(cpu.threads));
            r.max_vcpus = Some(u32::try_from(max).map_err(|_| VmiRefusal::TooManyVcpus)?);
        }
        Ok(r)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn vmi(json: &str) -> Vmi {
        serde_json::from_str(json).unwrap()
    }

    /// A VMI as the apiserver answers it (KubeVirt's own example
    /// `vmi-fedora` with a dedicated, passthrough NUMA CPU), fields
    /// numaplace does not read included.
    const DEDICATED: &str = r#"{
      "apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstance",
      "metadata": {"name": "db", "namespace": "vms", "uid": "5f0c6b1e-0d51-4a9e-9a51-0e3f2b7c9a10",
                   "labels": {"special": "vmi-fedora"}, "generation": 1},
      "spec": {
        "domain": {
          "cpu": {"sockets": 2, "cores": 4, "threads": 2, "model": "host-passthrough",
                  "dedicatedCpuPlacement": true, "isolateEmulatorThread": true,
                  "numa": {"guestMappingPassthrough": {}}},
          "memory": {"guest": "8Gi", "hugepages": {"pageSize": "1Gi"}},
          "resources": {"requests": {"memory": "8392Mi"}},
          "devices": {"disks": [{"name": "containerdisk", "disk": {"bus": "virtio"}}]},
          "machine": {"type": "q35"}
        },
        "volumes": [{"name": "containerdisk", "containerDisk": {"image": "quay.io/containerdisks/fedora:latest"}}]
      },
      "status": {"phase": "Scheduling"}
    }"#;

    #[test]
    fn a_dedicated_passthrough_vmi_reads_as_pinned_pairs_with_an_isolated_emulator() {
        let r = vmi(DEDICATED).request("vms.virt-launcher-db-x7k2p").unwrap();
        assert_eq!(r.name, "vms.virt-launcher-db-x7k2p");
        assert_eq!((r.vcpus, r.memory_bytes, r.hugepage_bytes), (16, 8 << 30, Some(1 << 30)));
        assert_eq!(
            (r.cpu_mode, r.smt, r.emulator.clone()),
            (CpuMode::Dedicated, SmtPolicy::Pairs, EmulatorPlacement::Isolate)
        );
        // Passthrough: the guest sees the host nodes, so it may span them.
        assert_eq!((r.max_nodes, r.max_vcpus), (None, None));
    }

    #[test]
    fn a_dedicated_vmi_without_passthrough_is_kept_on_one_node() {
        let r = vmi(r#"{"spec":{"domain":{"cpu":{"cores":6,"dedicatedCpuPlacement":true},
            "resources":{"requests":{"memory":"4Gi"}}}}}"#)
        .request("a.b")
        .unwrap();
        assert_eq!((r.vcpus, r.memory_bytes, r.cpu_mode, r.max_nodes), (6, 4 << 30, CpuMode::Dedicated, Some(1)));
        assert_eq!((r.smt, r.emulator, r.hugepage_bytes), (SmtPolicy::PreferCores, EmulatorPlacement::VmNodes, None));
    }

    #[test]
    fn without_a_cpu_topology_the_vcpus_are_the_resources_cpus_and_the_vm_floats() {
        let r = vmi(r#"{"spec":{"domain":{"resources":{"requests":{"cpu":"1500m","memory":"2Gi"},
            "limits":{"cpu":3}}}}}"#)
        .request("a.b")
        .unwrap();
        assert_eq!((r.vcpus, r.cpu_mode, r.max_nodes), (3, CpuMode::Shared, None));
        let r = vmi(r#"{"spec":{"domain":{"memory":{"guest":"1Gi"}}}}"#).request("a.b").unwrap();
        assert_eq!((r.vcpus, r.memory_bytes), (1, 1 << 30));
    }

    #[test]
    fn max_sockets_plans_the_hot_pluggable_vcpus() {
        let r = vmi(r#"{"spec":{"domain":{"cpu":{"sockets":2,"cores":2,"maxSockets":8,"dedicatedCpuPlacement":true,
            "numa":{"guestMappingPassthrough":{}}},"memory":{"guest":"4Gi"}}}}"#)
        .request("a.b")
        .unwrap();
        assert_eq!((r.vcpus, r.max_vcpus), (4, Some(16)));
    }

    #[test]
    fn a_field_numaplace_cannot_honour_is_refused_by_name() {
        let cases = [
            (
                r#"{"cpu":{"threads":4,"dedicatedCpuPlacement":true},"memory":{"guest":"1Gi"}}"#,
                "vmi-threads",
                "spec.domain.cpu.threads",
            ),
            (
                r#"{"cpu":{"isolateEmulatorThread":true},"memory":{"guest":"1Gi"}}"#,
                "vmi-isolate-needs-dedicated",
                "isolateEmulatorThread",
            ),
            (
                r#"{"cpu":{"numa":{"guestMappingPassthrough":{}}},"memory":{"guest":"1Gi"}}"#,
                "vmi-passthrough-needs-dedicated",
                "guestMappingPassthrough",
            ),
            (r#"{"memory":{"guest":"1Gi","maxGuest":"4Gi"}}"#, "vmi-memory-hotplug", "spec.domain.memory.maxGuest"),
            (r#"{"memory":{"guest":"1Gi","hugepages":{"pageSize":"huge"}}}"#, "vmi-bad-quantity", "hugepages.pageSize"),
            (r#"{"cpu":{"cores":2}}"#, "vmi-no-memory", "spec.domain.memory.guest"),
            (
                r#"{"cpu":{"sockets":65536,"cores":65536},"memory":{"guest":"1Gi"}}"#,
                "vmi-too-many-vcpus",
                "spec.domain.cpu",
            ),
        ];
        for (domain, code, field) in cases {
            let e = vmi(&format!(r#"{{"spec":{{"domain":{domain}}}}}"#)).request("a.b").unwrap_err();
            assert_eq!(e.code(), code, "{domain}");
            assert!(e.to_string().contains(field), "{domain}: {e}");
        }
        // maxGuest equal to the guest's memory plans nothing more: accepted.
        assert!(vmi(r#"{"spec":{"domain":{"memory":{"guest":"1Gi","maxGuest":"1Gi"}}}}"#).request("a.b").is_ok());
    }
}
