//! Readiness on SQLite (issue 46): `/readyz`'s check must fail while
//! another process holds the database's write lock, since every write then
//! waits its whole deadline and fails, and pass again once it is given
//! back. (Before, it read one row, which the lock never blocks, and said
//! ready.)
#![allow(clippy::unwrap_used)]

use numaplace_server::{ApiError, Service};
use numaplace_store::deadline::{self, Deadline};
use std::time::Duration;

#[test]
fn sqlite_is_not_ready_while_another_process_holds_the_write_lock() {
    let dir = std::env::temp_dir().join(format!("numaplace-ready-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("f.db");
    let svc = Service::new(numaplace_store::open(&format!("sqlite:{}", path.display())).unwrap(), 1, 1).unwrap();
    let ready = || deadline::scope(Deadline::after(Duration::from_millis(300)), || svc.ready());
    ready().unwrap();
    // Another process's writer, holding the lock.
    let mut other = rusqlite::Connection::open(&path).unwrap();
    let tx = other.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate).unwrap();
    match ready() {
        Err(ApiError::Unavailable(_) | ApiError::DeadlineExceeded) => {}
        other => panic!("ready while another writer holds the lock: {other:?}"),
    }
    tx.rollback().unwrap();
    ready().unwrap();
    let _ = std::fs::remove_dir_all(dir);
}
