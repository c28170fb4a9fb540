//! One VM as every part of numaplace keeps it: where it is (the
//! [`Placement`]), what was asked for (the [`Request`] it answered), the
//! hosts it may be on ([`HostConstraints`]), who put it there
//! ([`Origin`]) and its anti-affinity group. The CLI's plan document, the
//! service's stored rows and API bodies and the simulator's hosts all
//! hold this one value; wire encodes and decodes it (`numaplace_wire::record`).

use crate::engine::Decision;
use crate::placement::Placement;
use crate::request::Request;
use std::collections::BTreeMap;
use std::sync::Arc;

/// Who put a VM where it is.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Origin {
    /// numaplace planned it (the CLI's `plan`, the service, the
    /// simulator): stored and answered as `service`.
    #[default]
    Planned,
    /// Found on the host: a domain numaplace did not place (an agent's
    /// report, a domain read from libvirt); stored as `agent`.
    Found,
}

/// The hosts a VM may be on, besides capacity: what a placement request
/// carries under `constraints`, kept with the VM so a move decides under
/// the same ones.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HostConstraints {
    /// Only these hosts (empty: any).
    pub hosts: Vec<String>,
    /// Only hosts carrying every one of these labels with these values.
    pub labels: BTreeMap<String, String>,
    /// No host that already runs a VM of this group.
    pub anti_affinity: Option<String>,
}

impl HostConstraints {
    /// Whether the request named no constraint at all.
    pub fn is_empty(&self) -> bool {
        self.hosts.is_empty() && self.labels.is_empty() && self.anti_affinity.is_none()
    }
}

/// A placed VM with everything kept about it.
#[derive(Clone, Debug, PartialEq)]
pub struct PlacementRecord {
    /// Where it is (shared with the host state that holds it).
    pub placement: Arc<Placement>,
    /// The request it answered; `None` for a VM found on a host, or
    /// stored before requests were kept.
    pub request: Option<Request>,
    /// The hosts it may be on.
    pub constraints: HostConstraints,
    /// Who put it there.
    pub origin: Origin,
    /// Its anti-affinity group, when any.
    pub group: Option<String>,
}

impl PlacementRecord {
    /// The record of a VM numaplace planned: the decision's placement and
    /// the request it answered, with no constraints or group.
    pub fn planned(decision: &Decision, request: &Request) -> PlacementRecord {
        PlacementRecord {
            placement: Arc::clone(&decision.placement),
            request: Some(request.clone()),
            constraints: HostConstraints::default(),
            origin: Origin::Planned,
            group: None,
        }
    }

    /// A record of `placement` put there by `origin`, with no request,
    /// constraints or group.
    pub fn new(placement: impl Into<Arc<Placement>>, origin: Origin) -> PlacementRecord {
        PlacementRecord {
            placement: placement.into(),
            request: None,
            constraints: HostConstraints::default(),
            origin,
            group: None,
        }
    }

    /// The record of a VM found on a host (no request, no constraints).
    pub fn found(placement: impl Into<Arc<Placement>>) -> PlacementRecord {
        PlacementRecord::new(placement, Origin::Found)
    }

    /// The same record under `constraints`, its group the constraints'
    /// anti-affinity group (as the service keeps them).
    pub fn under(mut self, constraints: HostConstraints) -> PlacementRecord {
        self.group = constraints.anti_affinity.clone();
        self.constraints = constraints;
        self
    }

    /// The VM's name.
    pub fn vm(&self) -> &str {
        &self.placement.vm
    }
}
