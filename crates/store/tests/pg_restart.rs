//! PostgreSQL going away and coming back under a running store: calls in
//! between are `Unavailable`, and the store recovers by itself. A binary
//! of its own, with a server of its own, because it stops the server.
#![allow(clippy::unwrap_used)]

mod common;

use common::{host, vm};
use numaplace_store::testing::{Postgres, Session};
use numaplace_store::{HostChange, PgStore, Store, StoreError};
use std::sync::Arc;
use std::time::{Duration, Instant};

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

/// Makes every COMMIT on `pg` wait, once written to its log, for a standby
/// that does not exist (synchronous replication): the window between a
/// commit and its answer, held open for as long as a test needs.
fn hold_commits(admin: &mut Session, hold: bool) {
    if hold {
        admin.run("ALTER SYSTEM SET synchronous_standby_names = 'nobody'");
    } else {
        admin.run("ALTER SYSTEM RESET synchronous_standby_names");
    }
    admin.run("SELECT pg_reload_conf()");
    // Backends read the new setting at their next command.
    std::thread::sleep(Duration::from_millis(300));
}

/// Waits until a session is held in its COMMIT.
fn until_a_commit_is_held(admin: &mut Session) {
    let start = Instant::now();
    while admin.int("SELECT count(*) FROM pg_stat_activity WHERE wait_event = 'SyncRep'") == 0 {
        assert!(start.elapsed() < Duration::from_secs(30), "no COMMIT was held");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Issue 46: a COMMIT whose session is terminated (or whose server stops)
/// before its answer arrives had committed, and the store said
/// "unavailable, nothing written". It now asks what became of the
/// transaction and answers that; when it cannot find out, it says the
/// outcome is unknown, and [`Store::outcome`] tells later.
#[test]
fn a_commit_that_lost_its_connection_answers_what_the_database_holds() {
    let Some(pg) = Postgres::start() else { return };
    let store = Arc::new(PgStore::connect(&pg.url()).unwrap());
    store.put_host(&host("a")).unwrap();
    let mut admin = Session::connect(&pg.url());

    // A transaction rolled back is known as such.
    admin.run("BEGIN");
    let rolled_back = admin.int("SELECT pg_current_xact_id()::text::bigint");
    admin.run("ROLLBACK");
    assert_eq!(store.outcome(rolled_back).unwrap(), Some(false));

    // The session terminated while its COMMIT waits: committed, and the
    // call says so.
    hold_commits(&mut admin, true);
    let committing = {
        let store = store.clone();
        std::thread::spawn(move || add(store.as_ref(), "vm1", &[1]))
    };
    until_a_commit_is_held(&mut admin);
    admin.run("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE wait_event = 'SyncRep'");
    let answered = committing.join().unwrap();
    assert!(answered.is_ok(), "the commit was made, and is answered so: {answered:?}");
    assert_eq!(store.placement("vm1").unwrap().map(|p| p.host), Some("a".to_owned()));

    // The server stopped while the COMMIT waits, and down for longer than
    // the store keeps asking: the outcome is unknown, and known later.
    let committing = {
        let store = store.clone();
        std::thread::spawn(move || add(store.as_ref(), "vm2", &[2]))
    };
    until_a_commit_is_held(&mut admin);
    drop(admin);
    pg.stop();
    let transaction = match committing.join().unwrap() {
        Err(StoreError::OutcomeUnknown { transaction }) => transaction,
        other => panic!("expected OutcomeUnknown, got {other:?}"),
    };
    pg.start_again();
    let mut admin = Session::connect(&pg.url());
    hold_commits(&mut admin, false);
    assert_eq!(store.outcome(transaction).unwrap(), Some(true));
    assert_eq!(store.placement("vm2").unwrap().map(|p| p.host), Some("a".to_owned()));
    // And writes go on.
    add(store.as_ref(), "vm3", &[3]).unwrap();
}
