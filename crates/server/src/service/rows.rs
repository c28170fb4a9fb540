//! A placement record's shapes at the service's two edges: the store's
//! row (text) and the API's answer. [`decode`] is the one place a stored
//! placement row is read (its placement document and its request text,
//! each parsed once), and [`encode`] the one place one is written; the
//! cache (`cache.rs`) is the only caller of [`decode`]. When wire's record
//! codec takes over, these two functions are what it replaces.

use crate::error::ApiError;
use numaplace_plan::{CpuMode, Placement};
use numaplace_store::{Answer, Origin, PlacementRow};
use numaplace_wire::fleet::{ConstraintsDoc, LinksDoc, PlacedDoc, StoredRequestDoc};
use numaplace_wire::plan::PlacementDoc;
use serde::Serialize;

/// How the row that holds the CPUs a re-pinned domain runs on beyond its
/// placement is named: the VM's name and this, which no VM name has (the
/// API and libvirt refuse `/` in names), so it never meets a real VM.
pub const HOLD_SUFFIX: &str = "/as-running";

/// A stored placement, read: the row as the store keeps it, and what its
/// text says.
#[derive(Clone, Debug)]
pub struct Record {
    /// The row, as stored (written back unchanged by a move).
    pub row: PlacementRow,
    /// Its placement document.
    pub doc: PlacementDoc,
    /// The placement the document describes.
    pub placement: Placement,
    /// The constraints it was placed under (none for an agent's, or one
    /// stored before they were kept).
    pub constraints: ConstraintsDoc,
}

/// Reads a stored placement row: the one decoder of the store's
/// placement text. A row that does not read is the server's fault (it
/// wrote it), answered 500 naming the VM.
pub fn decode(row: PlacementRow) -> Result<Record, ApiError> {
    let vm = row.vm.as_str();
    let doc: PlacementDoc =
        serde_json::from_str(&row.doc).map_err(|e| ApiError::Internal(format!("stored placement of VM {vm}: {e}")))?;
    let placement =
        doc.to_placement(vm).map_err(|e| ApiError::Internal(format!("stored placement of VM {vm}: {e}")))?;
    let constraints = match &row.request {
        Some(text) => {
            serde_json::from_str::<StoredRequestDoc>(text)
                .map_err(|e| ApiError::Internal(format!("stored constraints of VM {vm}: {e}")))?
                .constraints
        }
        None => ConstraintsDoc::default(),
    };
    Ok(Record { row, doc, placement, constraints })
}

/// A placement row to store: the one encoder of the store's placement
/// text. `constraints`: the service's placements keep theirs (`None`:
/// an agent's, or a hold).
pub fn encode(
    host: &str,
    doc: &PlacementDoc,
    placement: &Placement,
    constraints: Option<&ConstraintsDoc>,
    group: Option<String>,
    origin: Origin,
) -> Result<PlacementRow, ApiError> {
    let request = constraints.map(|c| to_json(&StoredRequestDoc { constraints: c.clone() })).transpose()?;
    Ok(PlacementRow {
        vm: placement.vm.clone(),
        host: host.to_string(),
        doc: to_json(doc)?,
        request,
        group,
        origin,
        pus: claimed_pus(placement),
    })
}

/// The dedicated PUs a placement holds alone: its pinned vCPUs (a mixed
/// VM's floating ones and every shared VM's float and claim nothing).
pub fn claimed_pus(p: &Placement) -> Vec<u32> {
    if p.cpu_mode != CpuMode::Dedicated {
        return Vec::new();
    }
    let mut pus: Vec<u32> = p.vcpus.iter().filter(|v| p.floats(v.vcpu).is_none()).map(|v| v.pu).collect();
    pus.sort_unstable();
    pus.dedup();
    pus
}

/// The result of a placement call.
#[derive(Clone, Debug)]
pub struct Placed {
    /// The document answered.
    pub doc: PlacedDoc,
    /// The answer kept under the request's `Idempotency-Key`, given again
    /// (nothing was done this time).
    pub replayed: bool,
}

/// A placement's or move's answer, kept under its key, given again.
pub fn replay_placed(a: &Answer) -> Result<Placed, ApiError> {
    let doc: PlacedDoc = serde_json::from_str(&a.body)
        .map_err(|e| ApiError::Internal(format!("the answer kept under idempotency key {:?}: {e}", a.key)))?;
    Ok(Placed { doc, replayed: true })
}

/// A placement as the API answers it: always with `pins`, whoever
/// placed it. A domain pinned by hand (reported by an agent) has guest
/// cells that do not name its host nodes, so it is stored with `vcpus`
/// (each vCPU's PU and node); its answer carries `pins` as well, the
/// nodes staying in `vcpus`.
pub fn answer_doc(mut doc: PlacementDoc) -> PlacementDoc {
    if doc.pins.is_empty() && !doc.vcpus.is_empty() {
        doc.pins = doc.vcpus.iter().map(|v| v.pu).collect();
    }
    doc
}

/// A placement as the API answers it, with its host and links.
pub fn placed_doc(
    host: &str,
    placement: PlacementDoc,
    origin: Origin,
    group: Option<String>,
    dry_run: bool,
) -> PlacedDoc {
    let placement = answer_doc(placement);
    PlacedDoc {
        host: host.to_string(),
        dry_run,
        origin: origin.as_str().to_string(),
        group,
        links: (!dry_run).then(|| LinksDoc::new(&placement.vm)),
        placement,
    }
}

/// A stored record as the API answers it.
pub fn record_doc(r: &Record) -> PlacedDoc {
    placed_doc(&r.row.host, r.doc.clone(), r.row.origin, r.row.group.clone(), false)
}

/// JSON text of a document the service writes (a stored row, a kept
/// answer).
pub fn to_json<T: Serialize>(v: &T) -> Result<String, ApiError> {
    serde_json::to_string(v).map_err(|e| ApiError::Internal(e.to_string()))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use numaplace_plan::{plan, HostState, Request};

    fn placed() -> (PlacementDoc, Placement) {
        let path = format!("{}/../../fixtures/topologies/mpibind/epyc-corona.xml", env!("CARGO_MANIFEST_DIR"));
        let topology = numaplace_read::read_bytes("h1", std::fs::read(path).unwrap()).unwrap().topology;
        let request = Request::new("db1", 4, 4 << 30);
        let decision = plan(&topology, &HostState::new(&topology), &request).unwrap();
        (PlacementDoc::from_decision(&decision, Some(&request)), (*decision.placement).clone())
    }

    /// What a placement is stored with reads back as it was: the
    /// placement, and the constraints a move decides under again.
    #[test]
    fn a_stored_row_reads_back_what_was_written() {
        let (doc, placement) = placed();
        let constraints = ConstraintsDoc {
            hosts: vec!["h1".into(), "h2".into()],
            labels: [("rack".to_string(), "a".to_string())].into(),
            anti_affinity: Some("db".into()),
        };
        let row = encode("h1", &doc, &placement, Some(&constraints), Some("db".into()), Origin::Service).unwrap();
        assert_eq!(row.request.as_deref().map(|t| t.starts_with(r#"{"constraints":"#)), Some(true));
        assert_eq!(row.pus, claimed_pus(&placement));
        let r = decode(row.clone()).unwrap();
        assert_eq!((r.placement, r.constraints, r.row), (placement.clone(), constraints, row));
        // An agent's row keeps no constraints; it reads back none.
        let agent = encode("h1", &doc, &placement, None, None, Origin::Agent).unwrap();
        assert_eq!(decode(agent).unwrap().constraints, ConstraintsDoc::default());
    }

    /// A row the server cannot read is its own fault: 500, naming the VM
    /// and which part of the row.
    #[test]
    fn a_row_that_does_not_read_is_refused_naming_the_vm() {
        let (doc, placement) = placed();
        let good = encode("h1", &doc, &placement, None, None, Origin::Service).unwrap();
        let message = |row: PlacementRow| match decode(row).unwrap_err() {
            ApiError::Internal(m) => m,
            other => panic!("{other:?}"),
        };
        let bad_doc = PlacementRow { doc: "{".into(), ..good.clone() };
        assert!(message(bad_doc).starts_with("stored placement of VM db1: "));
        let bad_request = PlacementRow { request: Some(r#"{"constraints": {"hosts": 1}}"#.into()), ..good };
        assert!(message(bad_request).starts_with("stored constraints of VM db1: "));
    }
}
