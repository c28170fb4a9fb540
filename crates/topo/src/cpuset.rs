//! `CpuSet`: an immutable-by-convention set of CPU (PU) numbers.
//!
//! Its text form is the kernel's list syntax (`0-3,8-11`), the form that
//! `/sys/devices/system/node/node0/cpulist`, `taskset -c`, libvirt's
//! `cpuset=` and QEMU's `cpus=` all share, so a set printed here can be pasted
//! into any of them. The hex mask forms (`cpumap` in sysfs, hwloc's
//! `0x000000ff,0xffffffff`) parse too, because old kernels and hwloc XML only
//! carry masks.

use std::fmt;
use std::str::FromStr;

/// CPU numbers from this one up are refused by every reader and by
/// [`crate::Topology::from_parts`]: Linux caps `NR_CPUS` at 8192 today, and
/// a set is a bitmap as long as its highest number, so the bound keeps a
/// hostile `0-4294967295` (or one CPU numbered 4000000000) from allocating
/// half a gigabyte per set.
pub const MAX_CPU: u32 = 1 << 16;

/// What all the CPU sets a reader builds from one source may take together:
/// 128 MiB of bitmap. A set costs one bit per number up to its highest, so
/// a few bytes of text (`[65535]`) can cost 8 KiB, and a file listing that
/// set a million times would cost 8 GiB; readers that build a set per entry
/// count [`CpuSet::bytes_for`] against this before building (or right after
/// each set, so they stop within 8 KiB of it). Real machines need far less:
/// 16384 CPUs with SMT, numbered the Linux way, take 64 MiB in the worst
/// reader (sysfs, two sets per CPU).
pub const MAX_SETS_BYTES: usize = 128 << 20;

/// A set of CPU numbers, stored as a bitmap. Equal sets compare equal
/// whatever way they were built (the bitmap never keeps trailing zero words).
#[derive(Clone, Default, PartialEq, Eq, Hash)]
pub struct CpuSet {
    words: Vec<u64>,
}

/// Why a CPU list or mask did not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CpuSetError {
    /// A piece of the list is not a number or a range.
    #[error("`{piece}` is not a CPU number or range (expected e.g. `0-3,8`)")]
    BadPiece {
        /// The offending comma-separated piece.
        piece: String,
    },
    /// A range runs backwards.
    #[error("range `{start}-{end}` runs backwards")]
    Backwards {
        /// Range start.
        start: u32,
        /// Range end.
        end: u32,
    },
    /// A CPU number from [`MAX_CPU`] up.
    #[error("CPU {0} is beyond the largest supported CPU number, {max}", max = MAX_CPU - 1)]
    TooLarge(u64),
    /// A hex mask with a character that is not a hex digit.
    #[error("`{0}` is not a hexadecimal CPU mask")]
    BadMask(String),
}

impl CpuSet {
    /// The empty set.
    pub fn new() -> Self {
        CpuSet { words: Vec::new() }
    }

    /// The set `start..=end` (empty when `start > end`).
    pub fn range(start: u32, end: u32) -> Self {
        let mut set = CpuSet::new();
        set.insert_range(start, end);
        set
    }

    /// Adds `start..=end` a word at a time, so a list repeating
    /// `0-65535` costs a thousand operations per piece, not 65536.
    fn insert_range(&mut self, start: u32, end: u32) {
        if start > end {
            return;
        }
        let (first, last) = ((start / 64) as usize, (end / 64) as usize);
        if self.words.len() <= last {
            self.words.resize(last + 1, 0);
        }
        for (w, word) in self.words.iter_mut().enumerate().take(last + 1).skip(first) {
            let lo = if w == first { start % 64 } else { 0 };
            let hi = if w == last { end % 64 } else { 63 };
            *word |= (u64::MAX << lo) & (u64::MAX >> (63 - hi));
        }
    }

    fn trim(&mut self) {
        while self.words.last() == Some(&0) {
            self.words.pop();
        }
    }

    /// Bytes of bitmap a set whose highest CPU is `highest` takes (0 for
    /// the empty set), for budgets against [`MAX_SETS_BYTES`].
    pub fn bytes_for(highest: Option<u32>) -> usize {
        highest.map_or(0, |h| (h as usize / 64 + 1) * 8)
    }

    /// Bytes of bitmap this set takes.
    pub fn bytes(&self) -> usize {
        self.words.len() * 8
    }

    /// The set of `cpus`, refusing a number from [`MAX_CPU`] up before
    /// anything is allocated: the way to build a set from numbers read
    /// from a file ([`CpuSet::insert`] takes whatever it is given).
    pub fn try_from_cpus(cpus: impl IntoIterator<Item = u32> + Clone) -> Result<CpuSet, CpuSetError> {
        if let Some(cpu) = cpus.clone().into_iter().find(|&c| c >= MAX_CPU) {
            return Err(CpuSetError::TooLarge(u64::from(cpu)));
        }
        Ok(cpus.into_iter().collect())
    }

    /// Adds one CPU. The bitmap grows to `cpu / 8` bytes: numbers read
    /// from untrusted input go through [`CpuSet::try_from_cpus`] or the
    /// parsers, which stop at [`MAX_CPU`].
    pub fn insert(&mut self, cpu: u32) {
        let (w, b) = ((cpu / 64) as usize, cpu % 64);
        if self.words.len() <= w {
            self.words.resize(w + 1, 0);
        }
        self.words[w] |= 1 << b;
    }

    /// Removes one CPU.
    pub fn remove(&mut self, cpu: u32) {
        let (w, b) = ((cpu / 64) as usize, cpu % 64);
        if let Some(word) = self.words.get_mut(w) {
            *word &= !(1 << b);
            self.trim();
        }
    }

    /// Whether `cpu` is in the set.
    pub fn contains(&self, cpu: u32) -> bool {
        let (w, b) = ((cpu / 64) as usize, cpu % 64);
        self.words.get(w).is_some_and(|word| word & (1 << b) != 0)
    }

    /// Number of CPUs in the set.
    pub fn len(&self) -> usize {
        self.words.iter().map(|w| w.count_ones() as usize).sum()
    }

    /// Whether the set is empty.
    pub fn is_empty(&self) -> bool {
        self.words.is_empty()
    }

    /// The lowest CPU, if any.
    pub fn first(&self) -> Option<u32> {
        self.iter().next()
    }

    /// The highest CPU, if any.
    pub fn last(&self) -> Option<u32> {
        let w = self.words.len().checked_sub(1)?;
        let word = self.words[w];
        Some(w as u32 * 64 + 63 - word.leading_zeros())
    }

    /// CPUs in increasing order.
    pub fn iter(&self) -> impl Iterator<Item = u32> + '_ {
        self.words.iter().enumerate().flat_map(|(i, &word)| {
            let mut rest = word;
            std::iter::from_fn(move || {
                if rest == 0 {
                    return None;
                }
                let b = rest.trailing_zeros();
                rest &= rest - 1;
                Some(i as u32 * 64 + b)
            })
        })
    }

    fn zip_with(&self, other: &CpuSet, f: impl Fn(u64, u64) -> u64) -> CpuSet {
        let n = self.words.len().max(other.words.len());
        let get = |v: &Vec<u64>, i: usize| v.get(i).copied().unwrap_or(0);
        let mut out = CpuSet { words: (0..n).map(|i| f(get(&self.words, i), get(&other.words, i))).collect() };
        out.trim();
        out
    }

    /// Set union.
    pub fn union(&self, other: &CpuSet) -> CpuSet {
        self.zip_with(other, |a, b| a | b)
    }

    /// Set intersection.
    pub fn intersection(&self, other: &CpuSet) -> CpuSet {
        self.zip_with(other, |a, b| a & b)
    }

    /// CPUs in `self` but not in `other`.
    pub fn difference(&self, other: &CpuSet) -> CpuSet {
        self.zip_with(other, |a, b| a & !b)
    }

    /// Whether every CPU of `self` is in `other`.
    pub fn is_subset(&self, other: &CpuSet) -> bool {
        self.difference(other).is_empty()
    }

    /// Whether the sets share no CPU.
    pub fn is_disjoint(&self, other: &CpuSet) -> bool {
        self.intersection(other).is_empty()
    }

    /// Parses the kernel's list syntax: `0-3,8-11`, `5`, or empty. Spaces
    /// and a trailing newline (as read from sysfs) are ignored.
    pub fn parse_list(text: &str) -> Result<CpuSet, CpuSetError> {
        let mut set = CpuSet::new();
        for piece in text.trim().split(',') {
            let piece = piece.trim();
            if piece.is_empty() {
                continue;
            }
            let num = |s: &str| -> Result<u32, CpuSetError> {
                let v: u64 = s.trim().parse().map_err(|_| CpuSetError::BadPiece { piece: piece.to_string() })?;
                if v >= u64::from(MAX_CPU) {
                    return Err(CpuSetError::TooLarge(v));
                }
                Ok(v as u32)
            };
            // The kernel also prints strided ranges (`0-15:2/4`) for
            // isolcpus-style arguments; those never appear in topology files.
            match piece.split_once('-') {
                Some((a, b)) => {
                    let (a, b) = (num(a)?, num(b)?);
                    if a > b {
                        return Err(CpuSetError::Backwards { start: a, end: b });
                    }
                    set.insert_range(a, b);
                }
                None => set.insert(num(piece)?),
            }
        }
        Ok(set)
    }

    /// Parses a hex mask as sysfs prints it (`00000000,0000ffff`, 32-bit
    /// groups, most significant first) or as hwloc writes it
    /// (`0x0000ffff,0xffffffff`). hwloc's infinite sets (`0xf...f,...`)
    /// keep only their finite part.
    pub fn parse_mask(text: &str) -> Result<CpuSet, CpuSetError> {
        let text = text.trim();
        let mut set = CpuSet::new();
        let groups: Vec<&str> = text.split(',').collect();
        let bad = || CpuSetError::BadMask(text.chars().take(80).collect());
        for (i, group) in groups.iter().rev().enumerate() {
            let g = group.trim();
            let g = g.strip_prefix("0x").or_else(|| g.strip_prefix("0X")).unwrap_or(g);
            if g == "f...f" {
                break;
            }
            if g.is_empty() || g.len() > 8 {
                // A single unsplit group longer than 32 bits is still valid
                // in hwloc's v1 writer for small sets; handle it digit-wise.
                if g.is_empty() || !g.chars().all(|c| c.is_ascii_hexdigit()) {
                    return Err(bad());
                }
            }
            let mut bit = i as u64 * 32;
            for c in g.chars().rev() {
                let d = c.to_digit(16).ok_or_else(bad)?;
                for b in 0..4 {
                    if d & (1 << b) != 0 {
                        let cpu = bit + b;
                        if cpu >= u64::from(MAX_CPU) {
                            return Err(CpuSetError::TooLarge(cpu));
                        }
                        set.insert(cpu as u32);
                    }
                }
                bit += 4;
            }
            if g.len() > 8 && i + 1 < groups.len() {
                return Err(bad());
            }
        }
        Ok(set)
    }

    /// The kernel list form, e.g. `0-3,8-11` (empty string for the empty
    /// set).
    pub fn to_list(&self) -> String {
        self.to_string()
    }

    /// Contiguous runs as `(start, end)` pairs, inclusive.
    pub fn ranges(&self) -> Vec<(u32, u32)> {
        let mut out: Vec<(u32, u32)> = Vec::new();
        for cpu in self.iter() {
            match out.last_mut() {
                Some((_, end)) if *end + 1 == cpu => *end = cpu,
                _ => out.push((cpu, cpu)),
            }
        }
        out
    }
}

impl FromIterator<u32> for CpuSet {
    fn from_iter<I: IntoIterator<Item = u32>>(iter: I) -> Self {
        let mut set = CpuSet::new();
        for cpu in iter {
            set.insert(cpu);
        }
        set
    }
}

impl fmt::Display for CpuSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, (a, b)) in self.ranges().into_iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            if a == b {
                write!(f, "{a}")?;
            } else {
                write!(f, "{a}-{b}")?;
            }
        }
        Ok(())
    }
}

impl fmt::Debug for CpuSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "CpuSet({self})")
    }
}

impl FromStr for CpuSet {
    type Err = CpuSetError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        CpuSet::parse_list(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn list_round_trips() {
        for text in ["", "0", "0-3,8-11", "1,3,5", "0-63,128", "64-127"] {
            let set: CpuSet = text.parse().expect("valid list");
            assert_eq!(set.to_string(), text);
        }
    }

    #[test]
    fn list_normalises() {
        let set = CpuSet::parse_list(" 3,0-2,2\n").expect("valid");
        assert_eq!(set.to_string(), "0-3");
        assert_eq!(set.len(), 4);
    }

    #[test]
    fn bad_lists_are_refused() {
        assert!(matches!(CpuSet::parse_list("a"), Err(CpuSetError::BadPiece { .. })));
        assert!(matches!(CpuSet::parse_list("3-1"), Err(CpuSetError::Backwards { start: 3, end: 1 })));
        assert!(matches!(CpuSet::parse_list("0-4294967295"), Err(CpuSetError::TooLarge(_))));
        assert!(matches!(CpuSet::parse_list("1-2-3"), Err(CpuSetError::BadPiece { .. })));
        assert!(matches!(CpuSet::parse_list("-1"), Err(CpuSetError::BadPiece { .. })));
    }

    #[test]
    fn ranges_fill_whole_words_and_edges() {
        for (a, b) in [(0, 0), (0, 63), (0, 64), (5, 70), (63, 64), (64, 127), (100, 1000), (65535, 65535)] {
            let naive: CpuSet = (a..=b).collect();
            assert_eq!(CpuSet::range(a, b), naive, "{a}-{b}");
            assert_eq!(CpuSet::parse_list(&format!("{a}-{b}")).expect("valid"), naive, "{a}-{b}");
        }
        assert!(CpuSet::range(3, 2).is_empty());
    }

    #[test]
    fn masks_parse() {
        assert_eq!(CpuSet::parse_mask("00000000,0000ffff").expect("mask").to_string(), "0-15");
        assert_eq!(CpuSet::parse_mask("0x0000000f,0x00000001").expect("mask").to_string(), "0,32-35");
        assert_eq!(CpuSet::parse_mask("0xf...f,0x00000003").expect("mask").to_string(), "0-1");
        assert_eq!(CpuSet::parse_mask("0x0").expect("mask").to_string(), "");
        assert!(CpuSet::parse_mask("0xzz").is_err());
    }

    #[test]
    fn algebra() {
        let a: CpuSet = "0-7".parse().expect("valid");
        let b: CpuSet = "4-11".parse().expect("valid");
        assert_eq!(a.union(&b).to_string(), "0-11");
        assert_eq!(a.intersection(&b).to_string(), "4-7");
        assert_eq!(a.difference(&b).to_string(), "0-3");
        assert!(!a.is_disjoint(&b));
        assert!(CpuSet::range(5, 6).is_subset(&a));
        assert_eq!(a.difference(&a), CpuSet::new());
        assert_eq!(b.last(), Some(11));
    }

    /// One step of building a set, applied to a set and to a model of it.
    #[derive(Clone, Debug)]
    enum Step {
        Insert(u32),
        Remove(u32),
        Range(u32, u32),
        Union(Vec<u32>),
        Intersection(Vec<u32>),
        Difference(Vec<u32>),
    }

    fn step() -> impl proptest::strategy::Strategy<Value = Step> {
        use proptest::prelude::*;
        // Mostly the CPUs at the words' edges, so removals empty the
        // highest word often; then any number, well past the second word.
        let edges = vec![0u32, 1, 62, 63, 64, 65, 126, 127, 128, 129, 191, 192, 255, 256, 300];
        let cpu = prop_oneof![3 => proptest::sample::select(edges), 1 => 0u32..140, 1 => 0u32..400];
        let cpus = proptest::collection::vec(cpu.clone(), 0..6);
        prop_oneof![
            cpu.clone().prop_map(Step::Insert),
            cpu.clone().prop_map(Step::Remove),
            (cpu.clone(), 0u32..80).prop_map(|(a, n)| Step::Range(a, a + n)),
            cpus.clone().prop_map(Step::Union),
            cpus.clone().prop_map(Step::Intersection),
            cpus.prop_map(Step::Difference),
        ]
    }

    proptest::proptest! {
        /// A set built by any steps holds what a `BTreeSet` would, and
        /// equals (and hashes as) the same CPUs collected afresh, whatever
        /// words its removals left.
        #[test]
        fn sets_behave_as_the_model(steps in proptest::collection::vec(step(), 0..24)) {
            use std::collections::BTreeSet;
            use std::hash::{BuildHasher, RandomState};
            let mut set = CpuSet::new();
            let mut model: BTreeSet<u32> = BTreeSet::new();
            for s in steps {
                match s {
                    Step::Insert(c) => { set.insert(c); model.insert(c); }
                    Step::Remove(c) => { set.remove(c); model.remove(&c); }
                    Step::Range(a, b) => { set = set.union(&CpuSet::range(a, b)); model.extend(a..=b); }
                    Step::Union(v) => { set = set.union(&v.iter().copied().collect()); model.extend(v); }
                    Step::Intersection(v) => {
                        set = set.intersection(&v.iter().copied().collect());
                        let other: BTreeSet<u32> = v.into_iter().collect();
                        model = model.intersection(&other).copied().collect();
                    }
                    Step::Difference(v) => {
                        set = set.difference(&v.iter().copied().collect());
                        for c in v { model.remove(&c); }
                    }
                }
                proptest::prop_assert_eq!(set.iter().collect::<Vec<_>>(), model.iter().copied().collect::<Vec<_>>());
                proptest::prop_assert_eq!(set.len(), model.len());
                proptest::prop_assert_eq!(set.is_empty(), model.is_empty());
                proptest::prop_assert_eq!(set.last(), model.last().copied());
                let fresh: CpuSet = model.iter().copied().collect();
                proptest::prop_assert_eq!(&set, &fresh);
                let hasher = RandomState::new();
                proptest::prop_assert_eq!(hasher.hash_one(&set), hasher.hash_one(&fresh));
                proptest::prop_assert_eq!(set.bytes(), CpuSet::bytes_for(model.last().copied()));
            }
        }
    }
}
