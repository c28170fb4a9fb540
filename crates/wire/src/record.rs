//! The one codec of a [`PlacementRecord`]: every form a placed VM takes
//! outside the process is encoded and decoded here, one function pair
//! each, so the plan document, the service's stored rows and its API
//! bodies cannot drift apart.
//!
//! - the plan document's entry ([`PlacementDoc`], `placements[]`):
//!   [`to_doc`] / [`from_doc`];
//! - the service's stored row, text the store keeps and never parses
//!   ([`RowText`]): [`to_row`] / [`from_row`];
//! - the API's placement body ([`PlacedDoc`], `POST` and `GET
//!   /v1/placements/{vm}`): [`to_body`] / [`from_body`]; a stored VM is
//!   answered with its stored entry ([`from_stored_row`], [`stored_body`]),
//!   which keeps the reasoning it was planned with.
//!
//! A placed VM's entry may carry the planner's reasoning (alternatives
//! and notes), which is an answer's, not the VM's: the encoders take the
//! [`Decision`] when there is one to show, and the decoders leave it.

use crate::plan::{PlacementDoc, PlanDocError};
use numaplace_plan::{Decision, Origin, PlacementRecord};
use std::fmt;
#[cfg(feature = "fleet")]
use {
    crate::fleet::{ConstraintsDoc, LinksDoc, PlacedDoc},
    numaplace_plan::HostConstraints,
};

/// Why a stored or sent form of a VM could not be read: `what` names it
/// (`stored placement of VM web1`), `message` says what was wrong and
/// where.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RecordError {
    /// The form and the VM.
    pub what: String,
    /// What was expected and found.
    pub message: String,
}

impl fmt::Display for RecordError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.what, self.message)
    }
}

impl std::error::Error for RecordError {}

#[cfg(feature = "fleet")]
fn error(what: impl Into<String>, message: impl fmt::Display) -> RecordError {
    RecordError { what: what.into(), message: message.to_string() }
}

/// The name an origin is stored and answered under: `service` for a VM
/// numaplace planned, `agent` for one found on its host.
pub fn origin_name(o: Origin) -> &'static str {
    match o {
        Origin::Planned => "service",
        Origin::Found => "agent",
    }
}

/// The origin a stored or answered name stands for.
pub fn origin_of(name: &str) -> Option<Origin> {
    match name {
        "service" => Some(Origin::Planned),
        "agent" => Some(Origin::Found),
        _ => None,
    }
}

/// The plan document's entry for a record: its placement and the request
/// it answered, with `decision`'s alternatives and notes when given.
pub fn to_doc(record: &PlacementRecord, decision: Option<&Decision>) -> PlacementDoc {
    match decision {
        Some(d) => PlacementDoc::from_decision(d, record.request.as_ref()),
        None => {
            let mut doc = PlacementDoc::from(&*record.placement);
            doc.request = record.request.as_ref().map(crate::plan::RequestDoc::from);
            doc
        }
    }
}

/// The record a plan document's entry stands for (`at` names the entry in
/// errors: `placements[0]`). A document keeps no constraints or group;
/// its VMs are numaplace's (`Origin::Planned`).
pub fn from_doc(doc: &PlacementDoc, at: &str) -> Result<PlacementRecord, PlanDocError> {
    // The request first, as `PlanDoc::to_placements` checks them.
    let request = match &doc.request {
        Some(r) => Some(r.to_request(&format!("{at}.request")).map_err(PlanDocError::Request)?),
        None => None,
    };
    let placement = doc.to_placement(at)?;
    Ok(PlacementRecord { request, ..PlacementRecord::new(placement, Origin::Planned) })
}

/// A record as the service's store keeps it: text the store never parses.
#[cfg(feature = "fleet")]
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RowText {
    /// The VM.
    pub vm: String,
    /// The placement and its request, as one entry of a plan document's
    /// `placements` (compact JSON).
    pub doc: String,
    /// The constraints it was placed under, as a request carries them
    /// (`{"constraints": {...}}`); absent for a VM found on its host.
    pub request: Option<String>,
    /// Its anti-affinity group.
    pub group: Option<String>,
    /// Who put it there.
    pub origin: Origin,
}

/// The stored row of a record (with `decision`'s reasoning in the
/// entry when given, as the service stores a VM it has just planned).
#[cfg(feature = "fleet")]
pub fn to_row(record: &PlacementRecord, decision: Option<&Decision>) -> RowText {
    let doc = to_doc(record, decision);
    // Plain data with string keys: serialising cannot fail.
    let doc = serde_json::to_string(&doc).unwrap_or_default();
    let request = (record.origin == Origin::Planned).then(|| stored_constraints(&record.constraints));
    RowText { vm: record.vm().to_string(), doc, request, group: record.group.clone(), origin: record.origin }
}

/// The text a stored row keeps of a VM's constraints.
#[cfg(feature = "fleet")]
fn stored_constraints(c: &HostConstraints) -> String {
    let mut obj = serde_json::Map::new();
    let doc = ConstraintsDoc::from(c);
    obj.insert("constraints".into(), serde_json::to_value(doc).unwrap_or_default());
    serde_json::Value::Object(obj).to_string()
}

/// The record a stored row holds; the errors name the VM and the part
/// (`stored placement of VM web1: ...`).
#[cfg(feature = "fleet")]
pub fn from_row(row: &RowText) -> Result<PlacementRecord, RecordError> {
    from_stored_row(row).map(|s| s.record)
}

/// A stored row read: its record, and its entry as stored, which keeps
/// the reasoning the VM was planned with (`new`, alternatives, notes);
/// the record leaves that out, the API answers a stored VM with it
/// ([`stored_body`]).
#[cfg(feature = "fleet")]
#[derive(Clone, Debug, PartialEq)]
pub struct StoredRow {
    /// What the row holds.
    pub record: PlacementRecord,
    /// The placement entry as stored.
    pub entry: PlacementDoc,
}

/// [`from_row`], keeping the stored entry too (the one parse of the row's
/// text).
#[cfg(feature = "fleet")]
pub fn from_stored_row(row: &RowText) -> Result<StoredRow, RecordError> {
    let vm = &row.vm;
    let placement_of = || format!("stored placement of VM {vm}");
    let doc: PlacementDoc = serde_json::from_str(&row.doc).map_err(|e| error(placement_of(), e))?;
    let placement = doc.to_placement(vm).map_err(|e| error(placement_of(), e))?;
    let request = match &doc.request {
        Some(r) => Some(r.to_request("request").map_err(|e| error(format!("stored request of VM {vm}"), e))?),
        None => None,
    };
    let constraints = match &row.request {
        None => HostConstraints::default(),
        Some(text) => {
            let value: serde_json::Value =
                serde_json::from_str(text).map_err(|e| error(format!("stored request of VM {vm}"), e))?;
            match value.get("constraints") {
                Some(c) => serde_json::from_value::<ConstraintsDoc>(c.clone())
                    .map_err(|e| error(format!("stored constraints of VM {vm}"), e))?
                    .to_host_constraints(),
                None => HostConstraints::default(),
            }
        }
    };
    let record = PlacementRecord {
        placement: placement.into(),
        request,
        constraints,
        origin: row.origin,
        group: row.group.clone(),
    };
    Ok(StoredRow { record, entry: doc })
}

/// The API's body for a record on `host`: the entry always with `pins`
/// (a domain pinned by hand is stored with `vcpus`; its answer carries
/// `pins` too), `decision`'s reasoning when given, and the links unless
/// it is a dry run (nothing is stored there to link to).
#[cfg(feature = "fleet")]
pub fn to_body(record: &PlacementRecord, host: &str, dry_run: bool, decision: Option<&Decision>) -> PlacedDoc {
    body(to_doc(record, decision), record, host, dry_run)
}

/// The API's body for a stored row on `host`: as [`to_body`], its entry
/// the stored one (with the reasoning the VM was planned with).
#[cfg(feature = "fleet")]
pub fn stored_body(stored: &StoredRow, host: &str) -> PlacedDoc {
    body(stored.entry.clone(), &stored.record, host, false)
}

/// An entry as the API answers it: with `pins` always, its host, origin,
/// group and (unless a dry run) links.
#[cfg(feature = "fleet")]
fn body(placement: PlacementDoc, record: &PlacementRecord, host: &str, dry_run: bool) -> PlacedDoc {
    let placement = with_pins(placement);
    PlacedDoc {
        host: host.to_string(),
        dry_run,
        origin: origin_name(record.origin).to_string(),
        group: record.group.clone(),
        links: (!dry_run).then(|| LinksDoc::new(&placement.vm)),
        placement,
    }
}

/// A record's entry as the API answers it (a host's placements): with
/// `pins` always, as in [`to_body`].
pub fn to_answer_entry(record: &PlacementRecord) -> PlacementDoc {
    with_pins(to_doc(record, None))
}

/// An entry with `pins`: a domain pinned by hand is stored with `vcpus`
/// (each vCPU's PU and node); its answer carries `pins` as well.
fn with_pins(mut placement: PlacementDoc) -> PlacementDoc {
    if placement.pins.is_empty() && !placement.vcpus.is_empty() {
        placement.pins = placement.vcpus.iter().map(|v| v.pu).collect();
    }
    placement
}

/// The host and record an API body names (a body keeps no constraints).
#[cfg(feature = "fleet")]
pub fn from_body(body: &PlacedDoc) -> Result<(String, PlacementRecord), RecordError> {
    let what = || format!("placement of VM {}", body.placement.vm);
    let origin = origin_of(&body.origin)
        .ok_or_else(|| error(what(), format!("origin: expected service or agent, found {:?}", body.origin)))?;
    let mut record = from_doc(&body.placement, "placement").map_err(|e| error(what(), e))?;
    record.origin = origin;
    record.group = body.group.clone();
    Ok((body.host.clone(), record))
}
