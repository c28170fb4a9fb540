//! Kubernetes' scheduler extender protocol (`k8s.io/kube-scheduler/extender/v1`)
//! and the part of a Pod numaplace reads (docs/adapters.md).
//!
//! The extender's types carry no JSON tags in Go, so their keys are the Go
//! field names (`Pod`, `NodeNames`, `FailedAndUnresolvableNodes`, ...);
//! the Pod and Node objects inside them are Kubernetes' own, whose keys
//! are lower camel case. Unlike numaplace's own documents these are
//! foreign objects of which numaplace reads a few fields: unknown fields
//! are ignored, never refused, or every new Kubernetes field would break
//! scheduling. Nodes are kept as opaque JSON so a filter answers them back
//! unchanged.

use numaplace_plan::{CpuMode, EmulatorPlacement, Placement, Request};
use numaplace_topo::format_size;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

pub mod vmi;

/// `ExtenderArgs`: the pod and the nodes the scheduler asks about.
#[derive(Clone, Debug, Default, Deserialize)]
pub struct ExtenderArgs {
    /// The pod being scheduled.
    #[serde(rename = "Pod")]
    pub pod: Option<Pod>,
    /// The candidate nodes, whole (an extender without `nodeCacheCapable`).
    #[serde(rename = "Nodes")]
    pub nodes: Option<NodeList>,
    /// The candidate nodes' names (with `nodeCacheCapable: true`).
    #[serde(rename = "NodeNames")]
    pub node_names: Option<Vec<String>>,
}

/// A `v1.NodeList`, its items kept as they came.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct NodeList {
    /// The nodes, unchanged.
    #[serde(default)]
    pub items: Vec<serde_json::Value>,
}

impl NodeList {
    /// The nodes' `metadata.name`s, in order (a node without one is `None`).
    pub fn names(&self) -> Vec<Option<String>> {
        self.items
            .iter()
            .map(|n| n.get("metadata").and_then(|m| m.get("name")).and_then(|v| v.as_str()).map(str::to_string))
            .collect()
    }
}

/// `ExtenderFilterResult`.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct ExtenderFilterResult {
    /// The nodes that passed, whole (when they were sent whole).
    #[serde(rename = "Nodes", skip_serializing_if = "Option::is_none")]
    pub nodes: Option<NodeList>,
    /// The names of the nodes that passed (when names were sent).
    #[serde(rename = "NodeNames", skip_serializing_if = "Option::is_none")]
    pub node_names: Option<Vec<String>>,
    /// Nodes refused for now, with the reason: preemption may help.
    #[serde(rename = "FailedNodes")]
    pub failed_nodes: BTreeMap<String, String>,
    /// Nodes refused whatever is preempted there, with the reason.
    #[serde(rename = "FailedAndUnresolvableNodes")]
    pub failed_and_unresolvable_nodes: BTreeMap<String, String>,
    /// An error that fails the whole call (empty when none).
    #[serde(rename = "Error")]
    pub error: String,
}

/// One node's score (`HostPriority`), 0 to 10.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct HostPriority {
    /// The node.
    #[serde(rename = "Host")]
    pub host: String,
    /// Its score, 0 (worst) to 10 (`MaxExtenderPriority`).
    #[serde(rename = "Score")]
    pub score: i64,
}

/// The part of a `v1.Pod` numaplace reads.
#[derive(Clone, Debug, Default, Deserialize)]
pub struct Pod {
    /// Name, namespace, UID, labels.
    #[serde(default)]
    pub metadata: ObjectMeta,
    /// Containers and their resources.
    #[serde(default)]
    pub spec: PodSpec,
}

/// The part of a `metav1.ObjectMeta` numaplace reads.
#[derive(Clone, Debug, Default, Deserialize)]
pub struct ObjectMeta {
    /// The pod's name.
    #[serde(default)]
    pub name: String,
    /// Its namespace (`default` when empty).
    #[serde(default)]
    pub namespace: String,
    /// Its UID.
    #[serde(default)]
    pub uid: String,
    /// Its labels (`kubevirt.io: virt-launcher` marks a KubeVirt VM's pod).
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
    /// Its annotations (`kubevirt.io/domain` names a launcher pod's VMI).
    #[serde(default)]
    pub annotations: BTreeMap<String, String>,
    /// The objects that own it (a launcher pod's VMI is its controller).
    #[serde(default, rename = "ownerReferences")]
    pub owner_references: Vec<OwnerReference>,
}

/// One `metav1.OwnerReference`, the part numaplace reads.
#[derive(Clone, Debug, Default, Deserialize)]
pub struct OwnerReference {
    /// `kubevirt.io/v1` for a VMI.
    #[serde(default, rename = "apiVersion")]
    pub api_version: String,
    /// `VirtualMachineInstance` for a launcher pod's owner.
    #[serde(default)]
    pub kind: String,
    /// The owner's name.
    #[serde(default)]
    pub name: String,
    /// The owner's UID.
    #[serde(default)]
    pub uid: String,
    /// Whether the owner is the pod's managing controller.
    #[serde(default)]
    pub controller: Option<bool>,
}

/// `ExtenderBindingArgs`: the pod the scheduler binds, and to which node.
#[derive(Clone, Debug, Default, Deserialize)]
pub struct ExtenderBindingArgs {
    /// The pod's name.
    #[serde(rename = "PodName")]
    pub pod_name: String,
    /// Its namespace.
    #[serde(rename = "PodNamespace")]
    pub pod_namespace: String,
    /// Its UID.
    #[serde(rename = "PodUID")]
    pub pod_uid: String,
    /// The node chosen.
    #[serde(rename = "Node")]
    pub node: String,
}

/// A `v1.Binding`: what binds a pod to a node
/// (`POST /api/v1/namespaces/NS/pods/NAME/binding`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Binding {
    /// `v1`.
    #[serde(rename = "apiVersion")]
    pub api_version: &'static str,
    /// `Binding`.
    pub kind: &'static str,
    /// The pod's name, namespace and UID (the UID a precondition: the API
    /// server refuses the Binding for a pod recreated under the name).
    pub metadata: BindingMeta,
    /// The node.
    pub target: BindingTarget,
}

/// A Binding's `metadata`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct BindingMeta {
    /// The pod's name.
    pub name: String,
    /// Its namespace.
    pub namespace: String,
    /// Its UID; none when not known.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub uid: String,
}

/// A Binding's `target`: a node (`v1`, `Node`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct BindingTarget {
    /// `v1`.
    #[serde(rename = "apiVersion")]
    pub api_version: &'static str,
    /// `Node`.
    pub kind: &'static str,
    /// The node's name.
    pub name: String,
}

impl Binding {
    /// The Binding of pod `namespace/name` (UID `uid`, empty when not
    /// known) to `node`.
    pub fn new(namespace: &str, name: &str, uid: &str, node: &str) -> Binding {
        Binding {
            api_version: "v1",
            kind: "Binding",
            metadata: BindingMeta { name: name.into(), namespace: namespace.into(), uid: uid.into() },
            target: BindingTarget { api_version: "v1", kind: "Node", name: node.into() },
        }
    }
}

/// `ExtenderBindingResult`: empty `Error` when the pod was bound.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct ExtenderBindingResult {
    /// Why the pod was not bound, or whether that is unknown.
    #[serde(rename = "Error")]
    pub error: String,
}

/// The part of a `v1.PodSpec` numaplace reads.
#[derive(Clone, Debug, Default, Deserialize)]
pub struct PodSpec {
    /// The containers.
    #[serde(default)]
    pub containers: Vec<Container>,
    /// The node the pod is bound to (empty: not yet).
    #[serde(default, rename = "nodeName")]
    pub node_name: String,
}

/// One container's resources.
#[derive(Clone, Debug, Default, Deserialize)]
pub struct Container {
    /// Its name.
    #[serde(default)]
    pub name: String,
    /// Its requests and limits.
    #[serde(default)]
    pub resources: Resources,
}

/// `v1.ResourceRequirements`: quantities by resource name.
#[derive(Clone, Debug, Default, Deserialize)]
pub struct Resources {
    /// Limits.
    #[serde(default)]
    pub limits: BTreeMap<String, String>,
    /// Requests.
    #[serde(default)]
    pub requests: BTreeMap<String, String>,
}

/// A Kubernetes quantity (`500m`, `2`, `4Gi`, `1.5G`, `1e9`) in
/// thousandths of its unit, so CPUs (in millicores) and bytes (times
/// 1000) parse alike; `None` for anything else, or a value too large.
pub fn quantity_milli(q: &str) -> Option<u128> {
    let q = q.trim();
    let split = q.find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '+')).unwrap_or(q.len());
    let (number, suffix) = q.split_at(split);
    let (whole, frac) = number.trim_start_matches('+').split_once('.').unwrap_or((number.trim_start_matches('+'), ""));
    if whole.is_empty() && frac.is_empty() || frac.len() > 9 {
        return None;
    }
    let digits = |s: &str| -> Option<u128> {
        if s.is_empty() {
            Some(0)
        } else {
            s.parse().ok()
        }
    };
    // The number in billionths, then scaled by the suffix.
    let nanos = digits(whole)?.checked_mul(1_000_000_000)? + digits(frac)? * 10u128.pow(9 - frac.len() as u32);
    let (mul, div): (u128, u128) = match suffix {
        "" => (1, 1),
        "m" => (1, 1000),
        "k" => (1_000, 1),
        "M" => (1_000_000, 1),
        "G" => (1_000_000_000, 1),
        "T" => (1_000_000_000_000, 1),
        "P" => (1_000_000_000_000_000, 1),
        "Ki" => (1 << 10, 1),
        "Mi" => (1 << 20, 1),
        "Gi" => (1 << 30, 1),
        "Ti" => (1 << 40, 1),
        "Pi" => (1 << 50, 1),
        s if s.starts_with(['e', 'E']) => {
            let exp: u32 = s[1..].parse().ok().filter(|e: &u32| *e <= 18)?;
            (10u128.pow(exp), 1)
        }
        _ => return None,
    };
    // billionths x mul / div / 10^6 = thousandths, rounded up (a request
    // of 1.5 bytes needs 2).
    let scaled = nanos.checked_mul(mul)?;
    Some(scaled.div_ceil(div * 1_000_000))
}

/// Why a pod could not be read as a VM request: the field and what was
/// expected.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PodError(pub String);

impl std::fmt::Display for PodError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl Pod {
    /// The VM name the service keeps the pod under: `namespace.name`
    /// (namespaces are DNS labels, without dots, so the two never mix).
    pub fn vm_name(&self) -> String {
        format!("{}.{}", self.namespace(), self.metadata.name)
    }

    /// Whether this is a KubeVirt VM's launcher pod.
    pub fn is_virt_launcher(&self) -> bool {
        self.metadata.labels.get("kubevirt.io").map(String::as_str) == Some("virt-launcher")
    }

    /// The namespace, `default` when empty.
    pub fn namespace(&self) -> &str {
        if self.metadata.namespace.is_empty() {
            "default"
        } else {
            &self.metadata.namespace
        }
    }

    /// The VirtualMachineInstance a launcher pod runs: the owner
    /// KubeVirt's virt-controller sets as the pod's controller
    /// (`kubevirt.io/v1`, kind `VirtualMachineInstance`), else the
    /// `kubevirt.io/domain` annotation it also writes. `None` for any
    /// other pod.
    pub fn vmi_name(&self) -> Option<&str> {
        if !self.is_virt_launcher() {
            return None;
        }
        let owner = self.metadata.owner_references.iter().find(|o| {
            o.kind == "VirtualMachineInstance" && o.api_version.starts_with("kubevirt.io/") && !o.name.is_empty()
        });
        owner
            .map(|o| o.name.as_str())
            .or_else(|| self.metadata.annotations.get("kubevirt.io/domain").map(String::as_str))
            .filter(|n| !n.is_empty())
    }

    /// The UID of the VMI the pod was created for (the
    /// `kubevirt.io/created-by` label, else the owner's UID), to tell a
    /// VMI recreated under the same name from the pod's own.
    pub fn vmi_uid(&self) -> Option<&str> {
        self.metadata
            .labels
            .get("kubevirt.io/created-by")
            .map(String::as_str)
            .or_else(|| {
                self.metadata
                    .owner_references
                    .iter()
                    .find(|o| o.kind == "VirtualMachineInstance")
                    .map(|o| o.uid.as_str())
            })
            .filter(|u| !u.is_empty())
    }

    /// The VM request the pod's resources ask for, as the kubelet's CPU
    /// manager would read them: a Guaranteed pod (every container's
    /// requests equal to its limits for CPU and memory) with whole CPUs is
    /// pinned (`cpu: dedicated`), any other pod floats (`cpu: shared`);
    /// `hugepages-2Mi`/`hugepages-1Gi` back the guest with pages of that
    /// size, their amount its memory; vCPUs are the CPUs rounded up.
    pub fn request(&self) -> Result<Request, PodError> {
        if self.metadata.name.is_empty() {
            return Err(PodError("Pod.metadata.name: expected the pod's name".into()));
        }
        let mut cpu_milli: u128 = 0;
        let mut memory: u128 = 0;
        let mut huge: Option<(u64, u128)> = None;
        let mut guaranteed = !self.spec.containers.is_empty();
        for (i, c) in self.spec.containers.iter().enumerate() {
            let field = |key: &str| format!("Pod.spec.containers[{i}].resources: {key}");
            let get = |key: &str| -> Result<Option<u128>, PodError> {
                let q = c.resources.limits.get(key).or_else(|| c.resources.requests.get(key));
                match q {
                    None => Ok(None),
                    Some(q) => quantity_milli(q).map(Some).ok_or_else(|| {
                        PodError(format!("{}: expected a Kubernetes quantity, found {q:?}", field(key)))
                    }),
                }
            };
            cpu_milli += get("cpu")?.unwrap_or(0);
            memory += get("memory")?.unwrap_or(0) / 1000;
            for (size, key) in [(2u64 << 20, "hugepages-2Mi"), (1 << 30, "hugepages-1Gi")] {
                if let Some(bytes) = get(key)? {
                    match huge {
                        Some((s, _)) if s != size => {
                            return Err(PodError(format!("{}: one huge page size per VM", field(key))));
                        }
                        _ => huge = Some((size, huge.map_or(0, |h| h.1) + bytes / 1000)),
                    }
                }
            }
            for key in ["cpu", "memory"] {
                let (l, r) = (c.resources.limits.get(key), c.resources.requests.get(key));
                let same = match (l, r) {
                    (Some(l), Some(r)) => quantity_milli(l) == quantity_milli(r),
                    // A limit alone sets the request to it.
                    (Some(_), None) => true,
                    _ => false,
                };
                guaranteed &= same;
            }
        }
        if cpu_milli == 0 {
            return Err(PodError(
                "Pod.spec.containers: expected a cpu request or limit (numaplace places CPUs)".into(),
            ));
        }
        let vcpus = u32::try_from(cpu_milli.div_ceil(1000))
            .map_err(|_| PodError(format!("Pod.spec.containers: cpu {cpu_milli}m is more than numaplace reads")))?;
        let memory_bytes = match huge {
            Some((_, bytes)) => bytes,
            None => memory,
        };
        let memory_bytes = u64::try_from(memory_bytes)
            .ok()
            .filter(|b| *b > 0)
            .ok_or_else(|| PodError("Pod.spec.containers: expected a memory request or limit above 0".into()))?;
        let mut r = Request::new(self.vm_name(), vcpus, memory_bytes);
        r.cpu_mode = if guaranteed && cpu_milli.is_multiple_of(1000) { CpuMode::Dedicated } else { CpuMode::Shared };
        r.hugepage_bytes = huge.map(|(size, _)| size);
        r.emulator = EmulatorPlacement::VmNodes;
        Ok(r)
    }
}

/// A one-line account of what a pod was read as, for logs and reasons.
pub fn describe(r: &Request) -> String {
    let mode = match r.cpu_mode {
        CpuMode::Dedicated => "dedicated",
        CpuMode::Shared => "shared",
    };
    format!("{} vCPUs {mode}, {}", r.vcpus, format_size(r.memory_bytes))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn quantities_read_as_kubernetes_writes_them() {
        assert_eq!(quantity_milli("500m"), Some(500));
        assert_eq!(quantity_milli("2"), Some(2000));
        assert_eq!(quantity_milli("1.5"), Some(1500));
        assert_eq!(quantity_milli("4Gi"), Some(4 * 1000 * (1 << 30)));
        assert_eq!(quantity_milli("1G"), Some(1000 * 1_000_000_000));
        assert_eq!(quantity_milli("1e3"), Some(1_000_000));
        for bad in ["", "x", "1Qi", "--1", "1e99", "1.0000000001"] {
            assert_eq!(quantity_milli(bad), None, "{bad:?}");
        }
    }

    fn pod(json: &str) -> Pod {
        serde_json::from_str(json).unwrap()
    }

    #[test]
    fn a_guaranteed_pod_of_whole_cpus_is_dedicated_any_other_shared() {
        let r = pod(r#"{"metadata":{"name":"db","namespace":"prod"},"spec":{"containers":[
            {"resources":{"limits":{"cpu":"4","memory":"8Gi"},"requests":{"cpu":"4","memory":"8Gi"}}}]}}"#)
        .request()
        .unwrap();
        assert_eq!((r.name.as_str(), r.vcpus, r.memory_bytes, r.cpu_mode), ("prod.db", 4, 8 << 30, CpuMode::Dedicated));
        let r = pod(r#"{"metadata":{"name":"web"},"spec":{"containers":[
            {"resources":{"limits":{"cpu":"1500m","memory":"1Gi"},"requests":{"cpu":"1","memory":"1Gi"}}}]}}"#)
        .request()
        .unwrap();
        assert_eq!((r.name.as_str(), r.vcpus, r.cpu_mode), ("default.web", 2, CpuMode::Shared));
        let r = pod(r#"{"metadata":{"name":"vm"},"spec":{"containers":[
            {"resources":{"limits":{"cpu":"2","memory":"9Gi","hugepages-1Gi":"8Gi"}}}]}}"#)
        .request()
        .unwrap();
        assert_eq!((r.memory_bytes, r.hugepage_bytes), (8 << 30, Some(1 << 30)));
    }

    #[test]
    fn a_launcher_pod_names_its_vmi_by_its_controller_else_by_the_domain_annotation() {
        // As KubeVirt's virt-controller writes a launcher pod.
        let p = pod(r#"{"metadata":{"name":"virt-launcher-db-x7k2p","namespace":"vms",
            "labels":{"kubevirt.io":"virt-launcher","kubevirt.io/created-by":"5f0c","vm.kubevirt.io/name":"db"},
            "annotations":{"kubevirt.io/domain":"db-annotated"},
            "ownerReferences":[{"apiVersion":"kubevirt.io/v1","kind":"VirtualMachineInstance","name":"db",
                "uid":"5f0c","controller":true,"blockOwnerDeletion":true}]}}"#);
        assert_eq!(
            (p.vmi_name(), p.vmi_uid(), p.vm_name().as_str()),
            (Some("db"), Some("5f0c"), "vms.virt-launcher-db-x7k2p")
        );
        let p = pod(r#"{"metadata":{"name":"l","labels":{"kubevirt.io":"virt-launcher"},
            "annotations":{"kubevirt.io/domain":"db"}}}"#);
        assert_eq!((p.vmi_name(), p.vmi_uid(), p.namespace()), (Some("db"), None, "default"));
        // Not a launcher pod: no VMI, whatever it carries.
        let p = pod(r#"{"metadata":{"name":"l","annotations":{"kubevirt.io/domain":"db"}}}"#);
        assert_eq!(p.vmi_name(), None);
    }

    #[test]
    fn a_pod_numaplace_cannot_read_names_the_field() {
        let e = pod(r#"{"metadata":{"name":"p"},"spec":{"containers":[{"resources":{"limits":{"memory":"1Gi"}}}]}}"#)
            .request()
            .unwrap_err();
        assert!(e.0.contains("expected a cpu request or limit"), "{e}");
        let e = pod(r#"{"metadata":{"name":"p"},"spec":{"containers":[{"resources":{"limits":{"cpu":"two"}}}]}}"#)
            .request()
            .unwrap_err();
        assert!(e.0.starts_with("Pod.spec.containers[0].resources: cpu: expected a Kubernetes quantity"), "{e}");
    }
}

/// The DRA CPU driver's default name (`dra.cpu`, kubernetes-sigs'
/// dra-driver-cpu).
pub const DRA_CPU_DRIVER: &str = "dra.cpu";

/// One entry of a ResourceClaim's `status.allocation.devices.config`
/// (`k8s.io/api/resource/v1` `DeviceAllocationConfiguration`) carrying the
/// DRA CPU driver's opaque parameters: the exact CPUs a placement holds,
/// as a cpuset the driver pins the container to (its `v1alpha1` schema:
/// `apiVersion` and `cpuConfig.cpuset`, a Linux CPU list). A scheduler
/// that binds the claim writes this entry into the claim's allocation;
/// the driver checks the CPUs are online, allocatable and not reserved
/// when the kubelet prepares the claim (docs/adapters.md).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct DraCpuConfig {
    /// Always `FromClaim`: a cpuset is per claim, never per DeviceClass.
    pub source: &'static str,
    /// The claim's one request these CPUs answer.
    pub requests: [String; 1],
    /// The driver's opaque configuration.
    pub opaque: DraOpaque,
}

/// `OpaqueDeviceConfiguration`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct DraOpaque {
    /// The driver's name.
    pub driver: String,
    /// The driver's `v1alpha1` parameters.
    pub parameters: DraCpuParameters,
}

/// The DRA CPU driver's `v1alpha1` opaque parameters.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct DraCpuParameters {
    /// `v1alpha1`.
    #[serde(rename = "apiVersion")]
    pub api_version: &'static str,
    /// The CPUs.
    #[serde(rename = "cpuConfig")]
    pub cpu_config: DraCpuSet,
}

/// `cpuConfig`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct DraCpuSet {
    /// A Linux CPU list (`2-5`, `0,4-6`).
    pub cpuset: String,
}

/// Why a placement's CPUs cannot be handed to the DRA CPU driver.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DraError {
    /// A shared (floating) VM holds no CPU of its own to pin to.
    Floating(String),
    /// The request or driver name is not one Kubernetes accepts.
    BadName {
        /// `request` or `driver`.
        field: &'static str,
        /// What a valid name looks like.
        expected: &'static str,
        /// What was given.
        value: String,
    },
}

impl std::fmt::Display for DraError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DraError::Floating(vm) => write!(
                f,
                "{vm} floats over the shared CPUs and holds none of its own: there is no cpuset to hand the DRA CPU driver"
            ),
            DraError::BadName { field, expected, value } => write!(f, "{field}: expected {expected}, not `{value}`"),
        }
    }
}

impl std::error::Error for DraError {}

/// The DRA configuration entry pinning a claim's `request` to the CPUs
/// `placement` holds (its vCPUs' CPUs and the idle siblings it keeps; for
/// a mixed VM, its dedicated part).
pub fn dra_cpu_config(placement: &Placement, request: &str, driver: &str) -> Result<DraCpuConfig, DraError> {
    // A request name is a DNS label; a driver name a DNS subdomain.
    let label = |s: &str| {
        !s.is_empty()
            && s.len() <= 63
            && s.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
            && !s.starts_with('-')
            && !s.ends_with('-')
    };
    if !label(request) {
        let value = request.to_string();
        return Err(DraError::BadName { field: "request", expected: "a DNS label (a-z, 0-9, -)", value });
    }
    if driver.len() > 63 || !driver.split('.').all(label) {
        let value = driver.to_string();
        return Err(DraError::BadName { field: "driver", expected: "a DNS subdomain (dra.cpu)", value });
    }
    if placement.cpu_mode == CpuMode::Shared || placement.cpuset.is_empty() {
        return Err(DraError::Floating(placement.vm.clone()));
    }
    Ok(DraCpuConfig {
        source: "FromClaim",
        requests: [request.to_string()],
        opaque: DraOpaque {
            driver: driver.to_string(),
            parameters: DraCpuParameters {
                api_version: "v1alpha1",
                cpu_config: DraCpuSet { cpuset: placement.cpuset.to_list() },
            },
        },
    })
}
