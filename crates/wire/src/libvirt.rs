//! The reports of `numaplace apply` and `numaplace drift` (docs/apply.md,
//! docs/drift.md): output only, in plain values so this crate needs no
//! libvirt.

use serde::{Deserialize, Serialize};

/// `apply --format json`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ApplyDoc {
    /// Where it applied (`libvirt:qemu:///system`).
    pub connect: String,
    /// Whether nothing was changed on purpose (`--dry-run`).
    pub dry_run: bool,
    /// One entry per VM, in plan order.
    pub vms: Vec<ApplyVmDoc>,
    /// Why nothing was written, when the check against the host as it is
    /// now refused the plan (each names the plan's VM and the domain
    /// holding what it needs).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub refusals: Vec<RefusalDoc>,
}

/// One reason apply wrote nothing.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RefusalDoc {
    /// A stable code: `held`, `changed`, `not-on-host`, `reserved`,
    /// `overlap`, `memory`, `device-held`, `no-device`,
    /// `holder-on-reserved`, `no-cpu-left`, `moved`.
    pub code: String,
    /// The plan's VM it is about, when one is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vm: Option<String>,
    /// The domain of the host at fault, when one is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub holder: Option<String>,
    /// The sentence.
    pub text: String,
}

/// One VM applied.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ApplyVmDoc {
    /// The VM.
    pub vm: String,
    /// `applied`, `unchanged`, `dry-run`, `rolled-back`, `broken` or
    /// `refused` (nothing was tried).
    pub outcome: String,
    /// Why it was rolled back, broken or refused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Why a VM the plan did not place in its run is changed: the plan
    /// narrowed its floating CPUs (a dedicated VM of the plan takes some).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub changed_by_plan: Option<String>,
    /// The domain ran when applied.
    pub running: bool,
    /// Its NUMA placement before (absent for a new domain), summarised.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub before: Option<String>,
    /// After.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub after: Option<String>,
    /// The actions, in order.
    pub steps: Vec<StepDoc>,
    /// What takes effect only at the next start.
    pub restart_needed: Vec<String>,
}

/// One action.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StepDoc {
    /// `define`, `vcpupin`, `emulatorpin` or `numatune`.
    pub action: String,
    /// The sentence.
    pub text: String,
    /// The vCPU, for `vcpupin`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vcpu: Option<u32>,
    /// CPUs or nodes before (for `define`: the whole definition before,
    /// absent for a new domain).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub before: Option<String>,
    /// After.
    pub after: String,
}

/// `drift --format json`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DriftDoc {
    /// Where it looked.
    pub connect: String,
    /// The plan compared with (absent: each domain's own definition).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub plan: Option<String>,
    /// One entry per VM.
    pub vms: Vec<DriftVmDoc>,
}

/// One VM's comparison.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DriftVmDoc {
    /// The VM.
    pub vm: String,
    /// `running`, `shut-off` or `not-defined`.
    pub state: String,
    /// `as-planned`, `stopped` (defined, not running: not drift unless
    /// `--stopped-is-drift`) or `drift`.
    pub verdict: String,
    /// Planned CPUs of each vCPU, in vCPU order.
    pub planned: Vec<Vec<u32>>,
    /// The vCPUs running: where each may run and ran last.
    pub vcpus: Vec<DriftVcpuDoc>,
    /// Memory per node now, bytes, when readable.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub memory: Vec<(u32, u64)>,
    /// The differences.
    pub differences: Vec<DifferenceDoc>,
}

/// A running vCPU.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DriftVcpuDoc {
    /// The vCPU.
    pub vcpu: u32,
    /// The CPU it ran on last.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu: Option<u32>,
    /// The CPUs it may use.
    pub affinity: Vec<u32>,
}

/// One difference.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DifferenceDoc {
    /// `not-defined`, `not-running`, `vcpu-count`, `vcpu`, `emulator` or
    /// `memory-off-plan`.
    pub code: String,
    /// The sentence.
    pub text: String,
}
