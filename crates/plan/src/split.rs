//! Splitting a wide VM over its nodes: vCPUs as evenly as the nodes'
//! free capacity allows, memory in proportion to vCPUs in whole blocks.
//!
//! Both splits are max-min fair water-fills: every node gets the same
//! share unless its capacity is lower, and only then do the others take
//! more. So an even split is used whenever one fits (the field notes'
//! 3-or-5-cell guests on 2-node hosts ran at half speed), and an uneven
//! one only when capacities force it.

/// Splits `total` units over nodes with capacities `caps` (in the same
/// units), max-min fair. Integer leftovers go to the last nodes. `None`
/// when the capacities do not add up to `total`.
pub(crate) fn water_fill(total: u64, caps: &[u64]) -> Option<Vec<u64>> {
    let sum: u64 = caps.iter().fold(0u64, |a, &c| a.saturating_add(c));
    if sum < total {
        return None;
    }
    let mut order: Vec<usize> = (0..caps.len()).collect();
    // Smallest capacity first so that later (larger) nodes absorb what
    // small ones cannot take; equal capacities keep position order, which
    // gives integer leftovers to the last cells.
    order.sort_by_key(|&i| (caps[i], i));
    let mut out = vec![0u64; caps.len()];
    let mut remaining = total;
    let mut left = caps.len() as u64;
    for &i in &order {
        let fair = remaining / left.max(1);
        let give = fair.min(caps[i]);
        out[i] = give;
        remaining -= give;
        left -= 1;
    }
    // Equal-capacity nodes share the same fair value; the integer division
    // above already pushed leftovers onto later nodes, and `remaining` is 0
    // because the last node took everything that fitted its capacity.
    if remaining > 0 {
        for i in (0..caps.len()).rev() {
            let room = caps[i] - out[i];
            let give = room.min(remaining);
            out[i] += give;
            remaining -= give;
            if remaining == 0 {
                break;
            }
        }
    }
    (remaining == 0).then_some(out)
}

/// Re-splits `total` vCPUs (a split `counts` already made within `caps`)
/// so every node's count is a multiple of the largest step possible,
/// keeping the same nodes in use and the split as even as that step
/// allows. The guest shows each cell as whole dies of one size, the
/// common divisor of the cells: 5+5+5+5+6+6 would be 32 dies of one core,
/// 4+4+6+6+6+6 is 16 dies of two. Steps are multiples of `gran` dividing
/// `total`; `counts` comes back unchanged when no larger step fits.
pub(crate) fn coarsen(total: u64, gran: u64, counts: &[u64], caps: &[u64]) -> Vec<u64> {
    let used = counts.iter().filter(|&&n| n > 0).count();
    if used < 2 || gran == 0 {
        return counts.to_vec();
    }
    let base = counts.iter().fold(0u64, |g, &n| gcd(g, n));
    let smallest = counts.iter().copied().filter(|&n| n > 0).min().unwrap_or(0);
    // Largest step first; a step above the smallest cell would empty it.
    let mut step = smallest - smallest % gran;
    while step > base {
        if total.is_multiple_of(step) {
            let unit_caps: Vec<u64> =
                caps.iter().zip(counts).map(|(&cap, &n)| if n > 0 { cap / step } else { 0 }).collect();
            if let Some(units) = water_fill(total / step, &unit_caps) {
                if units.iter().zip(counts).all(|(&u, &n)| (u > 0) == (n > 0)) {
                    return units.iter().map(|u| u * step).collect();
                }
            }
        }
        step -= gran;
    }
    counts.to_vec()
}

/// Greatest common divisor (0 with 0 gives 0).
pub(crate) fn gcd(mut a: u64, mut b: u64) -> u64 {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
}

/// Splits `blocks` memory units over nodes in proportion to `weights`
/// (their vCPUs; all ones for interleave), within `caps` units each.
/// Rounding leftovers go to the last weighted nodes; what a node cannot
/// hold goes to the other weighted nodes first, then to memory-only ones,
/// nearest first by `far` (the distance from the nearest weighted node;
/// issue 48: a VM whose vCPUs' own HBM node had room took another
/// quadrant's first), then in position order.
pub(crate) fn split_memory(blocks: u64, weights: &[u64], caps: &[u64], far: &[u32]) -> Option<Vec<u64>> {
    let total_weight: u64 = weights.iter().sum();
    let n = weights.len();
    let mut out = vec![0u64; n];
    if total_weight == 0 {
        return water_fill(blocks, caps);
    }
    let mut given = 0u64;
    for i in 0..n {
        let share = (u128::from(blocks) * u128::from(weights[i]) / u128::from(total_weight)) as u64;
        out[i] = share;
        given += share;
    }
    let mut leftover = blocks - given;
    // A cell with vCPUs whose share rounded to nothing would look like a
    // memory-less node to the guest: rounding leftovers go there first.
    for i in 0..n {
        if leftover > 0 && weights[i] > 0 && out[i] == 0 && caps[i] > 0 {
            out[i] = 1;
            leftover -= 1;
        }
    }
    for i in (0..n).rev() {
        if leftover == 0 {
            break;
        }
        if weights[i] > 0 {
            out[i] += 1;
            leftover -= 1;
        }
    }
    let mut excess = leftover;
    for i in 0..n {
        if out[i] > caps[i] {
            excess += out[i] - caps[i];
            out[i] = caps[i];
        }
    }
    if excess > 0 {
        // Weighted nodes first (memory next to the vCPUs), then memory-only
        // nodes, nearest first; within each, position order.
        let mut memory_only: Vec<usize> = (0..n).filter(|&i| weights[i] == 0).collect();
        memory_only.sort_by_key(|&i| (far.get(i).copied().unwrap_or(0), i));
        let order = (0..n).filter(|&i| weights[i] > 0).chain(memory_only);
        for i in order {
            let give = (caps[i] - out[i]).min(excess);
            out[i] += give;
            excess -= give;
            if excess == 0 {
                break;
            }
        }
    }
    (excess == 0).then_some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn even_when_possible() {
        assert_eq!(water_fill(24, &[16, 16]), Some(vec![12, 12]));
        assert_eq!(water_fill(31, &[16, 16]), Some(vec![15, 16]));
        assert_eq!(water_fill(32, &[12, 20]), Some(vec![12, 20]));
        assert_eq!(water_fill(33, &[12, 20]), None);
        assert_eq!(water_fill(10, &[2, 8, 8]), Some(vec![2, 4, 4]));
    }

    #[test]
    fn memory_follows_vcpus_and_caps() {
        assert_eq!(split_memory(100, &[1, 1], &[100, 100], &[]), Some(vec![50, 50]));
        assert_eq!(split_memory(101, &[1, 1], &[100, 100], &[]), Some(vec![50, 51]));
        assert_eq!(split_memory(100, &[1, 1], &[10, 100], &[]), Some(vec![10, 90]));
        assert_eq!(split_memory(100, &[1, 0], &[60, 100], &[]), Some(vec![60, 40]));
        // A VM on a node without room: the nearer memory-only node first.
        assert_eq!(split_memory(100, &[1, 0, 0], &[0, 90, 90], &[0, 14, 13]), Some(vec![0, 10, 90]));
        assert_eq!(split_memory(100, &[1, 1], &[10, 10], &[]), None);
        // 2 blocks for cells of 1 and 2 vCPUs: one each, never 0 + 2.
        assert_eq!(split_memory(2, &[1, 2], &[100, 100], &[]), Some(vec![1, 1]));
    }

    #[test]
    fn coarsen_finds_the_largest_common_step() {
        // The 32 vCPUs over six 6-core nodes: 16 dies of 2.
        assert_eq!(coarsen(32, 1, &[5, 5, 5, 5, 6, 6], &[6; 6]), vec![4, 4, 6, 6, 6, 6]);
        // Already even, or nothing larger fits: unchanged.
        assert_eq!(coarsen(24, 1, &[6, 6, 6, 6], &[6; 4]), vec![6, 6, 6, 6]);
        assert_eq!(coarsen(12, 1, &[8, 4], &[8, 4]), vec![8, 4]);
        assert_eq!(coarsen(11, 1, &[5, 6], &[6, 6]), vec![5, 6]);
        // Pairs stay pairs, and a node never drops out of the set.
        assert_eq!(coarsen(20, 2, &[6, 6, 8], &[6, 6, 8]), vec![6, 6, 8]);
        assert_eq!(coarsen(16, 1, &[6, 2, 2, 6], &[6, 2, 2, 6]), vec![6, 2, 2, 6]);
        assert_eq!(coarsen(18, 1, &[0, 9, 9], &[4, 9, 9]), vec![0, 9, 9]);
    }
}
