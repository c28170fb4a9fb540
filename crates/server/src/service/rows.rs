//! A placement record at the service's store: the store's row
//! ([`PlacementRow`], text the store never parses) to and from the
//! record, through wire's record codec (`numaplace_wire::record`), the
//! one codec of a placed VM. [`decode`] is the service's one reading of
//! a stored placement row (each row's text parsed once), and [`encode`]
//! its one writing; the cache (`cache.rs`) is the only caller of
//! [`decode`]. What is here besides is the store's own: its origin names
//! and the PUs a row claims.

use crate::error::ApiError;
use numaplace_plan::{CpuMode, Decision, Origin as RecordOrigin, Placement, PlacementRecord};
use numaplace_store::{Answer, Origin, PlacementRow};
use numaplace_wire::fleet::PlacedDoc;
use numaplace_wire::record::{self, RowText, StoredRow};
use serde::Serialize;

/// How the row that holds the CPUs a re-pinned domain runs on beyond its
/// placement is named: the VM's name and this, which no VM name has (the
/// API and libvirt refuse `/` in names), so it never meets a real VM.
pub const HOLD_SUFFIX: &str = "/as-running";

/// A stored placement, read: the host it is on, its record and its entry
/// as stored (the reasoning the API answers it with).
#[derive(Clone, Debug)]
pub struct Record {
    /// The host it is on.
    pub host: String,
    /// What the row holds.
    pub stored: StoredRow,
    /// Whom it was claimed for (a Kubernetes pod's UID), when known.
    pub owner: Option<String>,
}

impl Record {
    /// The VM.
    pub fn vm(&self) -> &str {
        self.stored.record.vm()
    }

    /// The placed VM, as everything keeps it.
    pub fn record(&self) -> &PlacementRecord {
        &self.stored.record
    }

    /// Where it is.
    pub fn placement(&self) -> &Placement {
        &self.stored.record.placement
    }

    /// Whether the service placed it (not an agent's).
    pub fn is_service(&self) -> bool {
        self.stored.record.origin == RecordOrigin::Planned
    }

    /// The record as the API answers it.
    pub fn body(&self) -> PlacedDoc {
        record::stored_body(&self.stored, &self.host)
    }
}

/// The record's origin for the store's.
fn record_origin(o: Origin) -> RecordOrigin {
    match o {
        Origin::Service => RecordOrigin::Planned,
        Origin::Agent => RecordOrigin::Found,
    }
}

/// The store's origin for the record's.
fn store_origin(o: RecordOrigin) -> Origin {
    match o {
        RecordOrigin::Planned => Origin::Service,
        RecordOrigin::Found => Origin::Agent,
    }
}

/// Reads a stored placement row through wire's codec. A row that does
/// not read is the server's fault (it wrote it), answered 500 naming the
/// VM and the part of the row.
pub fn decode(row: PlacementRow) -> Result<Record, ApiError> {
    let PlacementRow { vm, host, doc, request, group, origin, pus: _, owner } = row;
    let text = RowText { vm, doc, request, group, origin: record_origin(origin) };
    let stored = record::from_stored_row(&text).map_err(|e| ApiError::Internal(e.to_string()))?;
    Ok(Record { host, stored, owner })
}

/// The row that stores `record` on `host`, through wire's codec (with
/// `decision`'s reasoning in the entry when given, as for a VM just
/// planned), and the dedicated PUs it claims.
pub fn encode(host: &str, record: &PlacementRecord, decision: Option<&Decision>) -> PlacementRow {
    let RowText { vm, doc, request, group, origin } = record::to_row(record, decision);
    PlacementRow {
        vm,
        host: host.to_string(),
        doc,
        request,
        group,
        origin: store_origin(origin),
        pus: claimed_pus(&record.placement),
        owner: None,
    }
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

/// JSON text of a document the service writes (a stored row, a kept
/// answer).
pub fn to_json<T: Serialize>(v: &T) -> Result<String, ApiError> {
    serde_json::to_string(v).map_err(|e| ApiError::Internal(e.to_string()))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use numaplace_plan::{plan, HostConstraints, HostState, Request};
    use std::sync::Arc;

    fn placed() -> (PlacementRecord, Decision) {
        let path = format!("{}/../../fixtures/topologies/mpibind/epyc-corona.xml", env!("CARGO_MANIFEST_DIR"));
        let topology = numaplace_read::read_bytes("h1", std::fs::read(path).unwrap()).unwrap().topology;
        let request = Request::new("db1", 4, 4 << 30);
        let decision = plan(&topology, &HostState::new(&topology), &request).unwrap();
        (PlacementRecord::planned(&decision, &request), decision)
    }

    /// What a placement is stored with reads back as it was: the
    /// placement, and the constraints a move decides under again.
    #[test]
    fn a_stored_row_reads_back_what_was_written() {
        let (record, decision) = placed();
        let constraints = HostConstraints {
            hosts: vec!["h1".into(), "h2".into()],
            labels: [("rack".to_string(), "a".to_string())].into(),
            anti_affinity: Some("db".into()),
        };
        let record = record.under(constraints.clone());
        let row = encode("h1", &record, Some(&decision));
        assert_eq!(row.request.as_deref().map(|t| t.starts_with(r#"{"constraints":"#)), Some(true));
        assert_eq!(row.pus, claimed_pus(&record.placement));
        assert_eq!((row.host.as_str(), row.group.as_deref(), row.origin), ("h1", Some("db"), Origin::Service));
        let r = decode(row.clone()).unwrap();
        assert_eq!((r.placement(), &r.record().constraints, r.host.as_str()), (&*record.placement, &constraints, "h1"));
        assert_eq!(r.record(), &record);
        // Written again, the row is the same text (a move keeps it).
        assert_eq!(encode(&r.host, r.record(), None).request, row.request);
        // The answer keeps the reasoning it was planned with.
        assert!(r.body().placement.new);
        // An agent's row keeps no constraints; it reads back none.
        let agent = encode("h1", &PlacementRecord::found(Arc::clone(&record.placement)), None);
        assert_eq!(agent.origin, Origin::Agent);
        let back = decode(agent).unwrap();
        assert_eq!((back.record().constraints.clone(), back.is_service()), (HostConstraints::default(), false));
    }

    /// A row the server cannot read is its own fault: 500, naming the VM
    /// and which part of the row.
    #[test]
    fn a_row_that_does_not_read_is_refused_naming_the_vm() {
        let (record, _) = placed();
        let good = encode("h1", &record, None);
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
