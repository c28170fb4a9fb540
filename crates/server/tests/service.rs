//! The service without HTTP, on an in-memory SQLite store: what hostile
//! bodies get (a 4xx kind of error naming the field, never a panic or an
//! internal error), and that a decision made on a stale cache is remade,
//! never double-booked.
#![allow(clippy::unwrap_used)]

use numaplace_server::service::{HostUpload, Service};
use numaplace_server::ApiError;
use proptest::prelude::*;

fn corona() -> Vec<u8> {
    std::fs::read(format!("{}/../../fixtures/topologies/mpibind/epyc-corona.xml", env!("CARGO_MANIFEST_DIR"))).unwrap()
}

fn service() -> Service {
    let svc = Service::new(numaplace_store::open("sqlite::memory:").unwrap(), 1, 1).unwrap();
    svc.put_host("h1", HostUpload { body: corona(), ..Default::default() }).unwrap();
    svc
}

fn is_client_error(e: &ApiError) -> bool {
    matches!(e, ApiError::BadRequest(_) | ApiError::Unplaceable(_) | ApiError::NoHost(_) | ApiError::Conflict { .. })
}

#[test]
fn two_caches_on_one_database_remake_stale_decisions() {
    let dir = std::env::temp_dir().join(format!("numaplace-service-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let db = format!("sqlite:{}", dir.join("f.db").display());
    let a = Service::new(numaplace_store::open(&db).unwrap(), 1, 1).unwrap();
    a.put_host("h1", HostUpload { body: corona(), ..Default::default() }).unwrap();
    let b = Service::new(numaplace_store::open(&db).unwrap(), 1, 1).unwrap();
    // Both caches see an empty host; each decides the same best PUs.
    let x = a.place(br#"{"name":"x","vcpus":8,"memory":"8GiB"}"#, false).unwrap();
    let y = b.place(br#"{"name":"y","vcpus":8,"memory":"8GiB"}"#, false).unwrap();
    let pins = |p: &numaplace_server::service::Placed| p.doc.placement.pins.clone();
    assert!(pins(&x).iter().all(|p| !pins(&y).contains(p)), "{:?} {:?}", pins(&x), pins(&y));
    let _ = std::fs::remove_dir_all(dir);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn hostile_placement_bodies_are_refused_not_crashed(bytes in prop::collection::vec(any::<u8>(), 0..256)) {
        let svc = service();
        if let Err(e) = svc.place(&bytes, true) {
            prop_assert!(is_client_error(&e), "{e:?}");
        }
    }

    #[test]
    fn hostile_request_fields_are_refused_not_crashed(
        key in prop::sample::select(vec!["vcpus", "memory", "max_nodes", "overcommit", "hugepages", "cells", "max_vcpus", "constraints", "name"]),
        value in prop::sample::select(vec![
            "18446744073709551615", "-1", "1e308", "\"99999999999TiB\"", "null", "[]", "{}", "\"\"", "4294967296",
            "{\"hosts\": 5}", "{\"anti_affinity\": 1}", "\"16EiB\"", "0",
        ]),
    ) {
        let svc = service();
        let body = format!("{{\"name\":\"v\",\"vcpus\":2,\"memory\":\"2GiB\",\"{key}\":{value}}}");
        if let Err(e) = svc.place(body.as_bytes(), false) {
            prop_assert!(is_client_error(&e), "{body}: {e:?}");
        }
    }

    #[test]
    fn hostile_host_uploads_are_refused_not_crashed(
        bytes in prop::collection::vec(any::<u8>(), 0..256),
        reserved in prop::option::of("[0-9,x-]{0,12}"),
        labels in prop::option::of("[a-z=,]{0,12}"),
        memory in prop::option::of(prop::sample::select(vec!["2GiB", "18446744073709551615", "-1", "x"])),
    ) {
        let svc = service();
        let up = HostUpload {
            body: bytes,
            reserved_cpus: reserved,
            shared_cpus: None,
            reserved_memory: memory.map(str::to_string),
            labels,
        };
        if let Err(e) = svc.put_host("h2", up) {
            prop_assert!(is_client_error(&e), "{e:?}");
        }
    }
}
