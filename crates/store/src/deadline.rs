//! A request's deadline, as the store sees it.
//!
//! The HTTP layer answers 503 when a request passes its deadline, while the
//! thread doing the request's store calls may still be waiting on the
//! database. Without more, that thread could commit after the 503 was
//! sent: the client was told "nothing changed" and something did. A
//! [`Deadline`] is shared by both sides and settles the race with one
//! atomic state: the store moves it to *committing* just before it sends
//! COMMIT, the HTTP layer moves it to *expired* before it answers 503, and
//! only the first move wins. So either the 503 is sent and the transaction
//! is rolled back, or the commit goes ahead and the HTTP layer waits for
//! its outcome and answers that.
//!
//! The deadline reaches the store through [`scope`] (a thread-local for
//! the length of one call), so the [`Store`](crate::Store) trait keeps its
//! methods; a call made outside any scope has no deadline.

use std::cell::RefCell;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const RUNNING: u8 = 0;
const COMMITTING: u8 = 1;
const EXPIRED: u8 = 2;

/// When a request must be answered by, and whether its answer is already
/// decided. Clones share the state.
#[derive(Clone, Debug)]
pub struct Deadline {
    at: Instant,
    state: Arc<AtomicU8>,
}

impl Deadline {
    /// A deadline `after` from now.
    pub fn after(after: Duration) -> Deadline {
        Deadline { at: Instant::now() + after, state: Arc::new(AtomicU8::new(RUNNING)) }
    }

    /// The instant it passes.
    pub fn at(&self) -> Instant {
        self.at
    }

    /// Time left (zero once passed).
    pub fn remaining(&self) -> Duration {
        self.at.saturating_duration_since(Instant::now())
    }

    /// Whether the request may still start store work: the deadline has
    /// not passed and no 503 has been sent for it.
    pub fn open(&self) -> bool {
        self.state.load(Ordering::Acquire) != EXPIRED && Instant::now() < self.at
    }

    /// Called by the HTTP layer once the deadline passed, before it
    /// answers 503: true when it may (nothing was or will be committed);
    /// false when a commit is already under way, whose outcome must then
    /// be the answer.
    pub fn expire(&self) -> bool {
        match self.state.compare_exchange(RUNNING, EXPIRED, Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => true,
            Err(now) => now == EXPIRED,
        }
    }

    /// Called by the store just before COMMIT: true when it may commit
    /// (the deadline has not passed, and from now on no 503 will be sent
    /// for this request); false when it must roll back.
    pub fn begin_commit(&self) -> bool {
        if Instant::now() >= self.at {
            // Passed, even if the HTTP layer's timer has not fired yet: the
            // 503 it is about to send must stay true.
            self.expire();
            return self.state.load(Ordering::Acquire) == COMMITTING;
        }
        match self.state.compare_exchange(RUNNING, COMMITTING, Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => true,
            // A second transaction of a request that already committed one.
            Err(now) => now == COMMITTING,
        }
    }
}

thread_local! {
    static CURRENT: RefCell<Option<Deadline>> = const { RefCell::new(None) };
}

/// Runs `f` with `deadline` applying to every store call it makes on this
/// thread.
pub fn scope<T>(deadline: Deadline, f: impl FnOnce() -> T) -> T {
    struct Reset(Option<Deadline>);
    impl Drop for Reset {
        fn drop(&mut self) {
            let previous = self.0.take();
            CURRENT.with(|c| *c.borrow_mut() = previous);
        }
    }
    let previous = CURRENT.with(|c| c.borrow_mut().replace(deadline));
    let _reset = Reset(previous);
    f()
}

/// Runs `f` with no deadline on this thread (the caller's set aside for
/// its length): for work that must be done whatever the request's fate,
/// such as a cache repairing itself after a claim it recorded failed.
pub fn unbounded<T>(f: impl FnOnce() -> T) -> T {
    struct Reset(Option<Deadline>);
    impl Drop for Reset {
        fn drop(&mut self) {
            let previous = self.0.take();
            CURRENT.with(|c| *c.borrow_mut() = previous);
        }
    }
    let previous = CURRENT.with(|c| c.borrow_mut().take());
    let _reset = Reset(previous);
    f()
}

/// The deadline of the call running on this thread, if any.
pub fn current() -> Option<Deadline> {
    CURRENT.with(|c| c.borrow().clone())
}

/// [`StoreError::DeadlineExceeded`](crate::StoreError::DeadlineExceeded)
/// when this thread's deadline has passed (or been answered): store work
/// started then could not be used.
pub(crate) fn check() -> Result<(), crate::StoreError> {
    match current() {
        Some(d) if !d.open() => Err(crate::StoreError::DeadlineExceeded),
        _ => Ok(()),
    }
}

/// Whether this thread's call may commit now (see [`Deadline::begin_commit`]).
pub(crate) fn may_commit() -> bool {
    current().is_none_or(|d| d.begin_commit())
}

/// How long a wait may take: `limit`, or less when this thread's deadline
/// is nearer (never zero, so a timeout always means "passed").
pub(crate) fn bounded(limit: Duration) -> Duration {
    match current() {
        Some(d) => limit.min(d.remaining()).max(Duration::from_millis(1)),
        None => limit,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_commit_and_a_503_never_both_happen() {
        let d = Deadline::after(Duration::from_secs(60));
        assert!(d.begin_commit());
        assert!(!d.expire(), "a commit under way: the HTTP layer waits for it");
        let d = Deadline::after(Duration::from_secs(60));
        assert!(d.expire());
        assert!(!d.begin_commit(), "a 503 sent: the transaction rolls back");
        assert!(!d.open());
    }

    #[test]
    fn a_passed_deadline_refuses_the_commit_before_the_timer_fires() {
        let d = Deadline::after(Duration::ZERO);
        assert!(!d.begin_commit());
        assert!(d.expire(), "the 503 may still be sent");
    }

    #[test]
    fn the_scope_ends_with_the_call() {
        assert!(current().is_none());
        scope(Deadline::after(Duration::ZERO), || assert!(check().is_err()));
        assert!(current().is_none());
        assert!(check().is_ok());
    }
}
