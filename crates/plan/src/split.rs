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

/// Splits `blocks` memory units over nodes in proportion to `weights`
/// (their vCPUs; all ones for interleave), within `caps` units each.
/// Rounding leftovers go to the last weighted nodes; what a node cannot
/// hold goes to the other weighted nodes first, then to memory-only ones.
pub(crate) fn split_memory(blocks: u64, weights: &[u64], caps: &[u64]) -> Option<Vec<u64>> {
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
        // nodes; within each group, position order.
        let order = (0..n).filter(|&i| weights[i] > 0).chain((0..n).filter(|&i| weights[i] == 0));
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
        assert_eq!(split_memory(100, &[1, 1], &[100, 100]), Some(vec![50, 50]));
        assert_eq!(split_memory(101, &[1, 1], &[100, 100]), Some(vec![50, 51]));
        assert_eq!(split_memory(100, &[1, 1], &[10, 100]), Some(vec![10, 90]));
        assert_eq!(split_memory(100, &[1, 0], &[60, 100]), Some(vec![60, 40]));
        assert_eq!(split_memory(100, &[1, 1], &[10, 10]), None);
    }
}
