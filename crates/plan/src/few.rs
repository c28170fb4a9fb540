//! A short list kept on the stack: the planner's per-decision lists (a
//! cost's cells and memory nodes, a guest's packages, the PUs and cores
//! pinning picks) hold a few entries for almost every VM, and a heap
//! allocation for each was a measurable share of a decision
//! (docs/performance.md § Issue 48: under 3 µs). A list that outgrows
//! its room moves to the heap, so any length works.

/// A list of up to `N` values kept inline, or on the heap beyond that.
pub(crate) enum Few<T: Copy + Default, const N: usize = 8> {
    Inline(usize, [T; N]),
    Heap(Vec<T>),
}

impl<T: Copy + Default, const N: usize> Few<T, N> {
    /// Room for `most` values (on the heap at once when above `N`).
    #[inline]
    pub(crate) fn new(most: usize) -> Few<T, N> {
        if most <= N {
            Few::Inline(0, [T::default(); N])
        } else {
            Few::Heap(Vec::with_capacity(most))
        }
    }

    /// Adds a value at the end.
    #[inline]
    pub(crate) fn push(&mut self, value: T) {
        match self {
            Few::Inline(len, items) if *len < N => {
                items[*len] = value;
                *len += 1;
            }
            Few::Inline(len, items) => {
                let mut v = Vec::with_capacity(2 * N);
                v.extend_from_slice(&items[..*len]);
                v.push(value);
                *self = Few::Heap(v);
            }
            Few::Heap(v) => v.push(value),
        }
    }

    #[inline]
    pub(crate) fn len(&self) -> usize {
        self.as_slice().len()
    }

    #[inline]
    pub(crate) fn as_mut_slice(&mut self) -> &mut [T] {
        match self {
            Few::Inline(len, items) => &mut items[..*len],
            Few::Heap(v) => v,
        }
    }

    #[inline]
    pub(crate) fn as_slice(&self) -> &[T] {
        match self {
            Few::Inline(len, items) => &items[..*len],
            Few::Heap(v) => v,
        }
    }
}

impl<T: Copy + Default, const N: usize> std::ops::Deref for Few<T, N> {
    type Target = [T];
    #[inline]
    fn deref(&self) -> &[T] {
        self.as_slice()
    }
}

#[cfg(test)]
mod tests {
    use super::Few;

    /// Past its inline room a list keeps every value, in order.
    #[test]
    fn a_list_keeps_its_values_past_its_inline_room() {
        for n in [0usize, 1, 3, 4, 5, 9] {
            for most in [0usize, 3, 4, 20] {
                let mut few: Few<usize, 4> = Few::new(most);
                (0..n).for_each(|i| few.push(i * 7));
                let want: Vec<usize> = (0..n).map(|i| i * 7).collect();
                assert_eq!(few.as_slice(), &want[..]);
                assert_eq!(few.len(), n);
                few.as_mut_slice().reverse();
                assert_eq!(few.as_slice().iter().rev().copied().collect::<Vec<_>>(), want);
            }
        }
    }
}
