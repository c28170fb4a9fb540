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

/// CPU numbers above this are refused when parsing: Linux caps `NR_CPUS` at
/// 8192 today, and a bound keeps a hostile `0-4294967295` from allocating
/// half a gigabyte.
pub const MAX_CPU: u32 = 1 << 16;

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
    /// A CPU number beyond [`MAX_CPU`].
    #[error("CPU {0} is beyond the supported maximum of {MAX_CPU}")]
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

    /// The set `start..=end`.
    pub fn range(start: u32, end: u32) -> Self {
        (start..=end).collect()
    }

    fn trim(&mut self) {
        while self.words.last() == Some(&0) {
            self.words.pop();
        }
    }

    /// Adds one CPU.
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
                    for cpu in a..=b {
                        set.insert(cpu);
                    }
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
}
