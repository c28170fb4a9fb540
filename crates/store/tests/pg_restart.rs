//! PostgreSQL going away and coming back under a running store: calls in
//! between are `Unavailable`, and the store recovers by itself. A binary
//! of its own, with a server of its own, because it stops the server.
#![allow(clippy::unwrap_used)]

mod common;

use common::{host, vm};
use numaplace_store::testing::Postgres;
use numaplace_store::{HostChange, PgStore, Store, StoreError};

fn add(store: &dyn Store, name: &str, pus: &[u32]) -> Result<(), StoreError> {
    let generation = store.host("a")?.map_or(0, |h| h.generation);
    store.commit(&[HostChange { host: "a".to_owned(), generation, remove: vec![], add: vec![vm(name, "a", pus)] }])
}

#[track_caller]
fn assert_unavailable<T: std::fmt::Debug>(result: Result<T, StoreError>) {
    match result {
        Err(StoreError::Unavailable(_)) => {}
        other => panic!("expected Unavailable, got {other:?}"),
    }
}

/// Several connections in the pool, so that a restart leaves several dead.
fn fill_pool(store: &PgStore) {
    std::thread::scope(|s| {
        for _ in 0..4 {
            s.spawn(|| {
                for _ in 0..20 {
                    store.hosts().unwrap();
                }
            });
        }
    });
}

#[test]
fn postgres_restart_is_unavailable_then_recovers() {
    let Some(pg) = Postgres::start() else { return };
    let store = PgStore::connect(&pg.url()).unwrap();
    store.put_host(&host("a")).unwrap();
    add(&store, "vm1", &[1]).unwrap();
    fill_pool(&store);

    pg.stop();
    assert_unavailable(store.host("a"));
    assert_unavailable(store.hosts());
    assert_unavailable(store.commit(&[HostChange {
        host: "a".to_owned(),
        generation: 2,
        remove: vec![],
        add: vec![],
    }]));
    assert_unavailable(store.set_drained("a", true));
    assert_unavailable(store.changed_since(0));
    assert_unavailable(PgStore::connect(&pg.url()).map(|_| ()));
    assert_unavailable(numaplace_store::open(&pg.url()).map(|_| ()));

    pg.start_again();
    assert_eq!(store.host("a").unwrap().unwrap().generation, 2);
    add(&store, "vm2", &[2]).unwrap();
    assert_eq!(store.placements(None).unwrap().len(), 2);

    // Restarted between two calls, with every pooled connection dead: the
    // next call, a write first, succeeds all the same.
    fill_pool(&store);
    pg.restart();
    let change = HostChange { host: "a".to_owned(), generation: 3, remove: vec![], add: vec![vm("vm3", "a", &[3])] };
    store.commit(&[change]).unwrap();
    fill_pool(&store);
    pg.restart();
    assert_eq!(store.placements(Some("a")).unwrap().len(), 3);

    // A crash (immediate stop) loses nothing committed.
    fill_pool(&store);
    pg.stop_immediate();
    assert_unavailable(add(&store, "vm4", &[4]));
    pg.start_again();
    let names: Vec<String> = store.placements(None).unwrap().into_iter().map(|p| p.vm).collect();
    assert_eq!(names, ["vm1", "vm2", "vm3"]);
    add(&store, "vm4", &[4]).unwrap();
    assert_eq!(store.host("a").unwrap().unwrap().generation, 5);
}

#[test]
fn postgres_down_at_connect_is_unavailable() {
    // A port nothing listens on: bound, noted and released.
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    assert_unavailable(PgStore::connect(&format!("postgres://postgres@127.0.0.1:{port}/postgres")).map(|_| ()));
}
