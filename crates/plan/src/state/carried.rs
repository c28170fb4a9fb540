//! A slot where the node-set search keeps its ranking of one-node sets
//! between decisions (`nodeset/carried.rs`), so a decision scores again
//! only the nodes whose inputs changed since the last one (issue 48 item
//! 5: ranking eight nodes afresh was an eighth of a decision).
//!
//! The state holds the slot and knows nothing of what is in it (the state
//! never imports the search that reads it). What the search keeps there
//! carries every input each node's rank was computed from and is checked
//! against them on every use, so no change to the state has to forget
//! anything here. The slot is locked with `try_lock`: a state shared
//! between threads (the fleet's hosts) ranks afresh when another thread
//! holds it, and a poisoned slot is never read.

use std::any::Any;
use std::sync::Mutex;

/// What the search kept, if anything.
pub(crate) type Kept = Option<Box<dyn Any + Send>>;

/// The slot.
#[derive(Default)]
pub(crate) struct Carried {
    slot: Mutex<Kept>,
}

impl Carried {
    /// Runs `f` on what is kept, or returns `None` when the slot is in use
    /// elsewhere or was poisoned.
    pub(crate) fn with<R>(&self, f: impl FnOnce(&mut Kept) -> R) -> Option<R> {
        let mut kept = self.slot.try_lock().ok()?;
        Some(f(&mut kept))
    }
}

/// A copy of a state starts with an empty slot: what is kept is only a
/// shortcut, and the copy's first search ranks afresh.
impl Clone for Carried {
    fn clone(&self) -> Carried {
        Carried::default()
    }
}

/// What was kept is no part of what a state records.
impl PartialEq for Carried {
    fn eq(&self, _: &Carried) -> bool {
        true
    }
}

impl Eq for Carried {}

impl std::fmt::Debug for Carried {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Carried")
    }
}
