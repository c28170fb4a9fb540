//! Hosts bucketed by what the prefilter reads first (free threads and
//! free memory, whole host), kept beside the rank order and moved on every
//! claim and release, so a request that few hosts or none can take looks
//! only at the hosts that may fit instead of every host's per-node
//! summary (issue 41 item 3).
//!
//! A cell holds the hosts with one exact count of free threads and free
//! memory within one bucket (four buckets per doubling: a bucket's top is
//! at most 25% above its bottom). A cell whose every host is short of the
//! request's threads or memory is ruled out whole; the prefilter would
//! refuse each of its hosts with the same code (threads are compared
//! before memory, and a host's best nodes hold at most its total), so its
//! hosts are counted in a rejection without being visited.

use crate::summary::{Needs, Summary};
use crate::Place;
use std::collections::{BTreeMap, BTreeSet};

/// One cell: exact free threads, then the free-memory bucket.
type Cell = (u32, u16);

/// The index; drained hosts are kept apart, since they take nothing.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Index {
    cells: BTreeMap<Cell, BTreeSet<Place>>,
    drained: BTreeSet<Place>,
}

/// The bucket of a free-memory figure: exact below 4 MiB, then four
/// buckets per doubling of MiB.
pub(crate) fn bucket(bytes: u64) -> u16 {
    let mib = bytes >> 20;
    if mib < 4 {
        return mib as u16;
    }
    let e = 63 - mib.leading_zeros();
    let frac = (mib >> (e - 2)) & 3;
    (4 * (e - 1)) as u16 + frac as u16
}

/// One past the largest byte count in bucket `b` (as u128: the top bucket
/// ends past u64).
pub(crate) fn bucket_end(b: u16) -> u128 {
    let mib_end: u128 = if b < 4 {
        u128::from(b) + 1
    } else {
        let (e, frac) = (u32::from(b / 4) + 1, u128::from(b % 4));
        (5 + frac) << (e - 2)
    };
    mib_end << 20
}

fn cell(summary: &Summary) -> Cell {
    (summary.free_threads, bucket(summary.free_memory))
}

/// Where a request stands against the index.
pub(crate) struct Query<'a> {
    /// Hosts that may pass the prefilter (not drained), unsorted.
    pub(crate) maybe: Vec<&'a Place>,
    /// Cells ruled out whole, each with whether it is short of threads
    /// (else of memory).
    pub(crate) short: Vec<(&'a BTreeSet<Place>, bool)>,
    /// Drained hosts.
    pub(crate) drained: &'a BTreeSet<Place>,
}

impl Index {
    pub(crate) fn add(&mut self, place: Place, summary: &Summary, drained: bool) {
        if drained {
            self.drained.insert(place);
        } else {
            self.cells.entry(cell(summary)).or_default().insert(place);
        }
    }

    pub(crate) fn remove(&mut self, place: &Place, summary: &Summary, drained: bool) {
        if drained {
            self.drained.remove(place);
            return;
        }
        let c = cell(summary);
        if let Some(set) = self.cells.get_mut(&c) {
            set.remove(place);
            if set.is_empty() {
                self.cells.remove(&c);
            }
        }
    }

    /// The hosts that may take a request needing `needs`, if there are at
    /// most `limit` of them (beyond that a walk in rank order finds a
    /// host sooner than sorting them would).
    pub(crate) fn query(&self, needs: &Needs, limit: usize) -> Option<Query<'_>> {
        let mut maybe_count = 0usize;
        let mut short = Vec::new();
        let mut open = Vec::new();
        for (&(threads, mem), set) in &self.cells {
            let short_threads = needs.threads.is_some_and(|t| u64::from(threads) < t);
            let short_memory = needs.memory.is_some_and(|m| bucket_end(mem) <= u128::from(m));
            if short_threads || short_memory {
                short.push((set, short_threads));
            } else {
                maybe_count += set.len();
                if maybe_count > limit {
                    return None;
                }
                open.push(set);
            }
        }
        let maybe = open.into_iter().flatten().collect();
        Some(Query { maybe, short, drained: &self.drained })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bucket_holds_its_figure_and_ends_within_a_quarter_above_its_start() {
        let mut values: Vec<u64> = vec![0, 1, (1 << 20) - 1, 1 << 20, 3 << 20, 4 << 20, 5 << 20, u64::MAX];
        for shift in 20..64 {
            for k in [0u64, 1, 3] {
                let v = (1u64 << shift).saturating_add(k * (1 << (shift - 3)));
                values.extend([v, v - 1, v.saturating_add(1)]);
            }
        }
        for v in values {
            let b = bucket(v);
            assert!(u128::from(v) < bucket_end(b), "{v} in bucket {b} ending {}", bucket_end(b));
            if b > 0 {
                assert!(u128::from(v) >= bucket_end(b - 1), "{v} below bucket {b}'s start");
            }
            if v >= 4 << 20 {
                assert!(bucket_end(b) - bucket_end(b - 1) <= bucket_end(b - 1) / 4, "bucket {b} too wide");
            }
        }
    }
}
