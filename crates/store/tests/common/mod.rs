//! Rows the store tests write: a host and a placement with distinctive
//! contents, so a round trip that mixes up columns shows.

use std::collections::BTreeMap;

use numaplace_store::{HostRow, Origin, PlacementRow};

pub fn host(name: &str) -> HostRow {
    HostRow {
        name: name.to_owned(),
        topology: format!(r#"{{"host":"{name}","nodes":[]}}"#),
        reserved: None,
        labels: BTreeMap::from([("rack".to_owned(), "r1".to_owned())]),
        drained: false,
        generation: 0,
        changed: 0,
        rules: None,
    }
}

pub fn vm(name: &str, host: &str, pus: &[u32]) -> PlacementRow {
    PlacementRow {
        vm: name.to_owned(),
        host: host.to_owned(),
        doc: format!(r#"{{"vm":"{name}"}}"#),
        request: Some(format!(r#"{{"name":"{name}","vcpus":{}}}"#, pus.len())),
        group: None,
        origin: Origin::Service,
        pus: pus.to_vec(),
        owner: None,
    }
}
