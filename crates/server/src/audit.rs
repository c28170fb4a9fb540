//! The audit lines (target `numaplace::audit`, docs/serve.md "Logs"): one
//! per state change, written by the service's commands once the store
//! committed it, inside the request's span.

/// A state change, as its audit line names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    /// A VM placed (`vm`, `after_host`, `after_pins`).
    Placed,
    /// A VM freed (`vm`, `before_host`).
    Deleted,
    /// A VM moved (`vm`, `before_host`, `after_host`, `after_pins`).
    Moved,
    /// A host registered (`host`, `after_labels`, `after_reserved`).
    HostRegistered,
    /// A host's description replaced (`host`, labels and reservations
    /// before and after, `topology_changed`).
    HostReplaced,
    /// A host drained or undrained (`host`, `before_drained`,
    /// `after_drained`).
    Drained,
    /// A host removed (`host`, `before_vms`: the VMs removed with it).
    HostRemoved,
    /// An agent's report changed the VMs it holds (`host`, `before_vms`,
    /// `after_vms`: the agent's, not the service's).
    AgentReport,
}

impl Action {
    /// The word logged as `action`.
    pub fn as_str(self) -> &'static str {
        match self {
            Action::Placed => "placed",
            Action::Deleted => "deleted",
            Action::Moved => "moved",
            Action::HostRegistered => "host-registered",
            Action::HostReplaced => "host-replaced",
            Action::Drained => "drained",
            Action::HostRemoved => "host-removed",
            Action::AgentReport => "agent-report",
        }
    }
}

/// The audit lines. Each takes what changed, before and after; fields
/// that do not apply are left out. Each carries the generation its change
/// gave each host it changed (`host_generation`, or
/// `before_host_generation` and `after_host_generation`): one host's
/// changes are numbered in the database's commit order, whichever replica
/// made them, so lines from several replicas sorted by host and
/// generation replay to what the database holds (timestamps do not: two
/// replicas' clocks and log writes disagree).
pub(crate) mod line {
    use super::Action;
    use std::collections::BTreeMap;

    fn list<T: std::fmt::Display>(items: &[T]) -> String {
        items.iter().map(ToString::to_string).collect::<Vec<_>>().join(",")
    }

    fn labels(l: &BTreeMap<String, String>) -> String {
        l.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join(",")
    }

    /// A VM placed on `host`, holding `pins` (dedicated PUs; empty when it
    /// floats); `generation`: the host's, as the placement left it.
    pub fn placed(vm: &str, host: &str, generation: i64, pins: &[u32]) {
        let a = Action::Placed.as_str();
        tracing::info!(target: "numaplace::audit", action = a, vm, after_host = host, after_host_generation = generation, after_pins = %list(pins), "{a} {vm} on {host}");
    }

    /// A VM freed from `host`, leaving it at `generation`.
    pub fn deleted(vm: &str, host: &str, generation: i64) {
        let a = Action::Deleted.as_str();
        tracing::info!(target: "numaplace::audit", action = a, vm, before_host = host, before_host_generation = generation, "{a} {vm} from {host}");
    }

    /// A VM moved from `from` to `to`, each host's generation as the move
    /// left it.
    pub fn moved(vm: &str, (from, from_generation): (&str, i64), (to, to_generation): (&str, i64), pins: &[u32]) {
        let a = Action::Moved.as_str();
        tracing::info!(target: "numaplace::audit", action = a, vm, before_host = from, before_host_generation = from_generation, after_host = to, after_host_generation = to_generation, after_pins = %list(pins), "{a} {vm} from {from} to {to}");
    }

    /// A host's row before (`None`: new) and after a registration, which
    /// left it at `generation`.
    pub fn host_put(before: Option<&numaplace_store::HostRow>, after: &numaplace_store::HostRow, generation: i64) {
        let host = after.name.as_str();
        match before {
            None => {
                let a = Action::HostRegistered.as_str();
                tracing::info!(
                    target: "numaplace::audit",
                    action = a,
                    host,
                    host_generation = generation,
                    after_labels = %labels(&after.labels),
                    after_reserved = after.reserved.as_deref().unwrap_or("{}"),
                    "{a} {host}"
                );
            }
            Some(b) => {
                let a = Action::HostReplaced.as_str();
                tracing::info!(
                    target: "numaplace::audit",
                    action = a,
                    host,
                    host_generation = generation,
                    before_labels = %labels(&b.labels),
                    after_labels = %labels(&after.labels),
                    before_reserved = b.reserved.as_deref().unwrap_or("{}"),
                    after_reserved = after.reserved.as_deref().unwrap_or("{}"),
                    topology_changed = b.topology != after.topology,
                    "{a} {host}"
                );
            }
        }
    }

    /// A host drained or undrained, left at `generation`.
    pub fn drained(host: &str, generation: i64, before: bool, after: bool) {
        let a = Action::Drained.as_str();
        tracing::info!(target: "numaplace::audit", action = a, host, host_generation = generation, before_drained = before, after_drained = after, "{a} {host}: {after}");
    }

    /// A host removed (its row left at `generation`), with the VMs removed
    /// with it.
    pub fn host_removed(host: &str, generation: i64, vms: &[String]) {
        let a = Action::HostRemoved.as_str();
        tracing::info!(target: "numaplace::audit", action = a, host, host_generation = generation, before_vms = %list(vms), "{a} {host}");
    }

    /// An agent's report: the VMs it holds on `host` before and after; the
    /// host left at `generation`.
    pub fn agent_report(host: &str, generation: i64, before: &[String], after: &[String]) {
        let a = Action::AgentReport.as_str();
        tracing::info!(target: "numaplace::audit", action = a, host, host_generation = generation, before_vms = %list(before), after_vms = %list(after), "{a} {host}");
    }
}
