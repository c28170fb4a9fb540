//! Why a fix could not be written, and who held the room it needed.

use super::trade::{NewFinding, Trade};
use crate::error::VmError;

/// Why a fix could not be written.
#[derive(Debug, thiserror::Error)]
pub enum FixError {
    /// The planner found no placement for the VM on this host.
    #[error("the planner cannot place {vm} on this host: {reason}; {}", holders(.held_by))]
    NoPlacement {
        /// VM name.
        vm: String,
        /// The planner's reason.
        reason: numaplace_plan::RejectReason,
        /// The VMs holding the host's room when it was asked, largest
        /// first: who a "no room" is owed to.
        held_by: Vec<RoomHolder>,
    },
    /// The VM cannot exist on this host (larger than its memory, CPUs or
    /// huge pages): it is left as it is and holds no memory against the
    /// other fixes.
    #[error("{vm} cannot run on this host at all: {}", beyond(.why))]
    CannotExist {
        /// VM name.
        vm: String,
        /// What exceeds the host.
        why: Vec<crate::rules::Beyond>,
    },
    /// With this fix the set would not be strictly better (as many
    /// errors, and no lower cost-weighted sum of warnings).
    #[error("it would not make the set better: {0}")]
    NoGain(Trade),
    /// The format has no automatic fix (request JSON: `numaplace plan`
    /// applies it).
    #[error("{0} files have no automatic fix; run `numaplace plan` on the request instead")]
    Unsupported(&'static str),
    /// The file did not parse.
    #[error(transparent)]
    Parse(#[from] VmError),
    /// The host state refused the change (a bug in the fixer, or two VMs
    /// of one name).
    #[error("the host state refused the fix: {0}")]
    State(String),
    /// The fix would change the VM's size without leave (a bug in the
    /// fixer, caught before anything is written).
    #[error("the fix would change what the VM has, which needs --allow-resize: {0}")]
    WouldResize(String),
    /// The fixed text did not read back (a bug in the fixer).
    #[error("the fixed text does not read back: {0}")]
    Unreadable(String),
    /// With this fix written, the whole set of files would have errors
    /// or warnings the input set did not have (checked on the texts about
    /// to be written): the file is left as it was and the other fixes
    /// are planned around it.
    #[error("it would leave the set with {} the input did not have: {}", plural_findings(.0.len()), worded(.0))]
    WouldWorsen(Vec<NewFinding>),
}

fn plural_findings(n: usize) -> String {
    numaplace_emit::text::plural(n as u64, "new finding")
}

fn worded(found: &[NewFinding]) -> String {
    found.iter().map(|f| format!("{} {} on {} ({})", f.severity, f.rule, f.vm, f.file)).collect::<Vec<_>>().join(", ")
}

/// A VM holding room on the host when a fix found none.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RoomHolder {
    /// The VM.
    pub vm: String,
    /// The CPUs it holds (pinned, with the idle siblings a dedicated VM
    /// keeps; a floating VM's CPUs are shared and not counted).
    pub cpus: u32,
    /// The memory it holds, bytes.
    pub memory: u64,
}

fn holders(held: &[RoomHolder]) -> String {
    if held.is_empty() {
        return "no other VM holds any of the host (the VM is too large for it as it is)".into();
    }
    let each: Vec<String> = held
        .iter()
        .map(|h| {
            format!(
                "{} ({}, {})",
                h.vm,
                numaplace_emit::text::plural(u64::from(h.cpus), "CPU"),
                numaplace_topo::format_size(h.memory)
            )
        })
        .collect();
    format!("the room is held by {}", each.join(", "))
}

fn beyond(why: &[crate::rules::Beyond]) -> String {
    why.iter().map(ToString::to_string).collect::<Vec<_>>().join("; ")
}
