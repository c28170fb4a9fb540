//! What a dedicated VM's placement is expected to cost it, used by the
//! `balanced` policy to choose between spreading over more nodes and
//! sharing sibling threads (issues 13 and 48). Every term is the
//! performance model's ([`Model::STANDARD`], the one the simulator
//! predicts with), for the VM alone on the host: one minus the throughput
//! the model predicts, in thousandths of the VM's, split by cause
//! (`docs/background.md` names each figure's source):
//!
//! - a vCPU on a core whose other thread is another VM's busy vCPU (or the
//!   VM's own, the guest not told it has threads) loses the sibling loss,
//!   XAPI's 40-75% at its midpoint: 0.575 per such vCPU, as a share of the
//!   VM;
//! - a vCPU whose sibling is a vCPU of its own VM, the guest told
//!   `threads=2`, loses the model's own-pair share of that (0.625): the
//!   guest's scheduler puts work on one thread per core first, so the pair
//!   loses only while both threads are busy: 0.359;
//! - memory: a guest whose cells mirror the host nodes keeps all but the
//!   cross-cell share (10%) of its accesses in its own cell, and reaches
//!   the rest over the distance to the other cells (remote latency 1.55x
//!   and half the bandwidth at SLIT 20.5, linear in the distance), half
//!   its time memory-bound: two cells at 21 cost 0.020. Until issue 48 the
//!   planner priced this as if the guest spread its accesses evenly over
//!   its cells (`(1 - 1/k) x 0.400 x (d - 10) / 11`: 0.200 for two nodes
//!   at 21), ten times the model's figure, and so took sibling pairs of
//!   one node where whole cores of two were free;
//! - a vCPU in a guest cell of one or two vCPUs of a VM that spans nodes
//!   has its memory time floored as ESXi's 24 virtual nodes of 2 measured
//!   (0.733 of the throughput): 0.154 per such vCPU;
//! - a vCPU away from the node of a device the VM asked for reaches it
//!   (DMA into buffers by its own memory, interrupts, doorbells) over the
//!   interconnect, as remote memory is reached and more: each such vCPU
//!   costs the sibling loss `x (d - 10) / 10` as a share of the VM, `d`
//!   the distance from the device's node (issue 39 item 5): the nearest
//!   other socket firmware reports (SLIT 20) costs as much as sibling
//!   threads shared with another VM (0.575), and the tie goes to the
//!   device's node; a node of the same EPYC package (16, 0.345) comes
//!   before the VM's own pairs (0.359). The simulator has no devices, so
//!   this term is the planner's alone.
//!
//! Costs add up (the model multiplies factors; for the small figures that
//! decide a ranking the sum is within a few thousandths of the product).
//! With them, whole cores on more nodes come before sibling threads
//! whenever the cores are free: 32 vCPUs on two 16-core nodes at 21 cost
//! 0.020 against 0.359 as their own pairs on one node (XAPI's measured
//! case); pairs are taken only when no set of whole cores holds the VM.

use crate::model::{GuestView, Model};
use std::fmt;

/// The model the planner ranks with.
const MODEL: Model = Model::STANDARD;

/// A VM's guest cells as the cost reads them: for each cell, its node
/// position and vCPU count; the VM's memory per node position; and the
/// distance between two node positions.
pub(crate) struct Shape<'a, D: Fn(usize, usize) -> u32> {
    pub(crate) cells: &'a [(usize, usize)],
    pub(crate) memory: &'a [(usize, u64)],
    pub(crate) distance: D,
}

/// The expected cost of a placement, in thousandths, by cause.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord)]
pub struct Cost {
    /// vCPUs sharing a physical core with another VM's busy thread (or
    /// with their own VM's, the guest not told it has threads).
    pub siblings: u64,
    /// vCPUs sharing a physical core with a vCPU of their own VM, the
    /// guest told `threads=2` (its own sibling pairs).
    pub pairs: u64,
    /// Memory accesses to other nodes than the vCPU's, weighted by
    /// distance.
    pub remote: u64,
    /// vCPUs in guest cells of one or two of a VM over several nodes.
    pub small_cells: u64,
    /// vCPUs away from the node of a device the VM asked for, weighted by
    /// distance.
    pub device: u64,
}

/// Thousandths of `x`, rounded.
fn milli(x: f64) -> u64 {
    (x.max(0.0) * 1000.0).round() as u64
}

impl Cost {
    /// The total, in thousandths.
    pub fn total(&self) -> u64 {
        self.siblings + self.pairs + self.remote + self.small_cells + self.device
    }

    /// The device term for vCPUs at `excess` (the sum, over vCPUs, of
    /// distance minus 10 from a device's node, averaged over the devices'
    /// nodes) out of `vcpus`: the sibling loss per 10 of distance.
    pub(crate) fn device_away(vcpus: u64, excess: u64) -> u64 {
        milli(MODEL.sibling_loss * excess as f64 / (10.0 * vcpus.max(1) as f64))
    }

    /// The part due to sibling threads, the VM's own pairs included: on a
    /// tie of totals, the option with less of it wins.
    pub fn shared_cores(&self) -> u64 {
        self.siblings + self.pairs
    }

    /// The cost of `vcpus` vCPUs of which `doubled` share a core with
    /// another VM (or unannounced) and `paired` with their own VM's vCPU
    /// (the guest told), in the guest cells and memory of `shape`.
    pub(crate) fn of<D: Fn(usize, usize) -> u32>(vcpus: u64, doubled: u64, paired: u64, shape: &Shape<'_, D>) -> Cost {
        let m = &MODEL;
        let v = vcpus.max(1) as f64;
        let doubled = doubled.min(vcpus);
        let paired = paired.min(vcpus - doubled);
        let siblings = milli(m.sibling_loss * doubled as f64 / v);
        let pairs = milli((1.0 - m.own_pair_factor(true)) * paired as f64 / v);
        let k = shape.cells.iter().filter(|c| c.1 > 0).count();
        let (mut remote, mut small) = (0.0, 0.0);
        // One node holding everything is local: most VMs stop here.
        if k > 1 || shape.memory.len() > 1 {
            let has_vcpus = |j: usize| shape.cells.iter().any(|&(n, c)| n == j && c > 0);
            for &(i, n) in shape.cells.iter().filter(|c| c.1 > 0) {
                let mut stretch = 0.0;
                m.access_shares(i, true, shape.memory, has_vcpus, |j, share| {
                    let d = (shape.distance)(i, j);
                    stretch += share * (m.latency_at(d) + m.bandwidth_penalty_at(d)) / 2.0;
                });
                let plain = m.speed(stretch, GuestView::Mirrors);
                remote += n as f64 * (1.0 - plain);
                small += n as f64 * (plain - m.cell_speed(stretch, GuestView::Mirrors, n, k));
            }
        }
        Cost { siblings, pairs, remote: milli(remote / v), small_cells: milli(small / v), device: 0 }
    }
}

/// Thousandths as a decimal: `0.236`.
struct Milli(u64);

impl fmt::Display for Milli {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{:03}", self.0 / 1000, self.0 % 1000)
    }
}

impl fmt::Display for Cost {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", Milli(self.total()))?;
        let parts = [
            ("sibling threads", self.siblings),
            ("own pairs", self.pairs),
            ("remote memory", self.remote),
            ("small cells", self.small_cells),
            ("device away", self.device),
        ];
        let mut first = true;
        for (name, v) in parts.iter().filter(|(_, v)| *v > 0) {
            f.write_str(if first { " (" } else { ", " })?;
            write!(f, "{name} {}", Milli(*v))?;
            first = false;
        }
        if !first {
            f.write_str(")")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::{Cost, Shape};

    /// Cells of `sizes` vCPUs, one per node position, each with memory in
    /// proportion, every pair of nodes `d` apart.
    fn cost(vcpus: u64, doubled: u64, paired: u64, sizes: &[usize], d: u32) -> Cost {
        let cells: Vec<(usize, usize)> = sizes.iter().copied().enumerate().collect();
        let memory: Vec<(usize, u64)> = sizes.iter().enumerate().map(|(i, &n)| (i, n as u64 * 1024)).collect();
        let shape =
            Shape { cells: &cells, memory: &memory, distance: |i: usize, j: usize| if i == j { 10 } else { d } };
        Cost::of(vcpus, doubled, paired, &shape)
    }

    #[test]
    fn the_documented_cases() {
        // XAPI's case: 32 vCPUs on two 16-core nodes at 21 against one
        // node's own pairs (told) or the same threads shared with another VM.
        let two_nodes = cost(32, 0, 0, &[16, 16], 21);
        assert_eq!(two_nodes.to_string(), "0.020 (remote memory 0.020)");
        assert_eq!(cost(32, 0, 32, &[32], 10).to_string(), "0.359 (own pairs 0.359)");
        assert_eq!(cost(32, 32, 0, &[32], 10).total(), 575);
        assert_eq!(cost(32, 0, 32, &[32], 10).shared_cores(), 359);
        // A 4-vCPU VM: two cores on each socket costs its small cells,
        // still less than two own pairs of one node.
        assert_eq!(cost(4, 0, 0, &[2, 2], 21).to_string(), "0.154 (remote memory 0.020, small cells 0.134)");
        // A 2-vCPU VM as two 1-vCPU cells at 11: the small cells' floor.
        assert_eq!(cost(2, 0, 0, &[1, 1], 11).total(), 154);
        // Eight cells of 4 over both packages of an EPYC pair: the mean
        // distance is what the guest's cross-cell share sees.
        let epyc = cost(32, 0, 0, &[4, 4, 4, 4, 4, 4, 4, 4], 32);
        assert!(epyc.total() < 100 && epyc.total() > 40, "{epyc}");
        assert!(two_nodes.total() < cost(8, 0, 0, &[4, 4], 32).total());
        assert_eq!(Cost::default().to_string(), "0.000");
        // One node: nothing remote, however large.
        assert_eq!(cost(64, 0, 0, &[64], 10).total(), 0);
        // 4 vCPUs on the other socket (SLIT 32) from their GPU, against
        // two sibling pairs on its node; on a node of its package (16);
        // at 20, a foreign sibling's cost.
        assert_eq!(Cost::device_away(4, 4 * 22), 1265);
        assert_eq!(Cost::device_away(4, 4 * 6), 345);
        assert_eq!(Cost::device_away(4, 4 * 10), 575);
        assert!(Cost::device_away(4, 4 * 6) < cost(4, 0, 4, &[4], 10).total());
    }

    /// The planner's figures are the model's: the cost of a placement is
    /// one minus what the simulator's model predicts for the VM alone.
    #[test]
    fn costs_are_the_models_prediction() {
        let m = crate::model::Model::STANDARD;
        let pairs = cost(8, 0, 8, &[8], 10).total() as f64 / 1000.0;
        assert!((pairs - (1.0 - m.own_pair_factor(true))).abs() < 0.001);
        let shared = cost(8, 8, 0, &[8], 10).total() as f64 / 1000.0;
        assert!((shared - (1.0 - m.smt_factor(true))).abs() < 0.001);
        // Two cells at 21: 95% local, 5% at 21.
        let stretch = 0.95 + 0.05 * m.remote_cost_at(21);
        let want = 1.0 - m.speed(stretch, crate::model::GuestView::Mirrors);
        assert!((cost(16, 0, 0, &[8, 8], 21).total() as f64 / 1000.0 - want).abs() < 0.001);
    }
}
