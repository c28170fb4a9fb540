//! The Azure Public Dataset V1 as huaweicloud/trace_generation_rnn
//! processed it: a flavor file (`v1.test.txt`), a token-aligned duration
//! file (`v1.test.c2591400.txt`), a flavor map (`flav_map.txt`) and an
//! interval map (`v1.interval_map.txt`).
//!
//! Semantics (from the dataset's `INPUT.md`):
//! - a flavor line is `<t> <tokens>`: the VMs that arrived since the
//!   previous line, i.e. in the 300 s bin `(t-300, t]`; `,` separates VMs,
//!   `|` ends one tenant's batch (batches only group, they carry no VM);
//! - the duration line with the same timestamp has one token per VM, in
//!   the same order: `U<k>` ran for a duration in bin `k` and ended before
//!   the trace's right boundary; `C<k>` was still running there;
//! - the interval map lists `<seconds> <bin>` for every 300 s step, so bin
//!   `k` holds the durations from its lowest to its highest row plus one
//!   step (durations were rounded down to 300 s).
//!
//! Replay choices (documented in `docs/simulate.md`): the VMs of one line
//! arrive evenly spaced over its bin, in file order; a `U<k>` lifetime is
//! drawn uniformly within bin `k` from the seed and ends no later than the
//! boundary; a `C<k>` VM never leaves. Flavor memory is read as GiB.

use super::{parse_gib, parse_seconds, parse_vcpus, parse_whole, Problem, Trace, TraceError, Vm, MAX_VMS};
use crate::rng::Rng;
use std::collections::BTreeMap;

/// Width of a trace line's time bin, seconds.
pub const BIN_S: u64 = 300;

/// The four texts of one Azure trace, with the names errors should use.
#[derive(Clone, Copy, Debug)]
pub struct AzureTexts<'a> {
    /// The flavor file's name and text.
    pub flavors: (&'a str, &'a str),
    /// The duration file's name and text.
    pub durations: (&'a str, &'a str),
    /// The flavor map's name and text.
    pub flavor_map: (&'a str, &'a str),
    /// The interval map's name and text.
    pub interval_map: (&'a str, &'a str),
    /// The right boundary (censoring time), when known from the duration
    /// file's name; otherwise the last line's timestamp.
    pub end_s: Option<u64>,
}

/// A flavor's size.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Flavor {
    /// vCPUs.
    pub vcpus: u32,
    /// Memory, bytes.
    pub memory_bytes: u64,
}

/// Parses `flav_map.txt`: lines of `<vcpus>,<memory GiB> <letter>`.
pub fn parse_flavor_map(file: &str, text: &str) -> Result<BTreeMap<String, Flavor>, TraceError> {
    let mut map = BTreeMap::new();
    for (i, raw) in text.lines().enumerate() {
        let line = i + 1;
        let l = raw.trim();
        if l.is_empty() {
            continue;
        }
        let mut parts = l.split_whitespace();
        let (Some(size), Some(name), None) = (parts.next(), parts.next(), parts.next()) else {
            let found = l.split_whitespace().count();
            return Err(TraceError::line(file, line, "line", Problem::FieldCount { found, expected: 2 }));
        };
        let Some((cpus, mem)) = size.split_once(',') else {
            return Err(TraceError::line(file, line, "size", Problem::FieldCount { found: 1, expected: 2 }));
        };
        let vcpus = parse_vcpus(cpus, file, line, "vcpus")?;
        let memory_bytes = parse_gib(mem, file, line, "memory")?;
        map.insert(name.to_string(), Flavor { vcpus, memory_bytes });
    }
    if map.is_empty() {
        return Err(TraceError::line(file, 0, "file", Problem::Empty));
    }
    Ok(map)
}

/// Parses the interval map into each bin's `[low, high)` duration range,
/// seconds.
pub fn parse_interval_map(file: &str, text: &str) -> Result<BTreeMap<u32, (u64, u64)>, TraceError> {
    let mut bins: BTreeMap<u32, (u64, u64)> = BTreeMap::new();
    for (i, raw) in text.lines().enumerate() {
        let line = i + 1;
        let l = raw.trim();
        if l.is_empty() {
            continue;
        }
        let mut parts = l.split_whitespace();
        let (Some(secs), Some(bin), None) = (parts.next(), parts.next(), parts.next()) else {
            let found = l.split_whitespace().count();
            return Err(TraceError::line(file, line, "line", Problem::FieldCount { found, expected: 2 }));
        };
        let secs = parse_seconds(secs, file, line, "seconds")?;
        // Bins are u32 in the duration tokens (`U<k>`) too.
        let bin = parse_whole(bin, u64::from(u32::MAX), file, line, "bin")? as u32;
        let end = secs.saturating_add(BIN_S);
        let e = bins.entry(bin).or_insert((secs, end));
        e.0 = e.0.min(secs);
        e.1 = e.1.max(end);
    }
    if bins.is_empty() {
        return Err(TraceError::line(file, 0, "file", Problem::Empty));
    }
    Ok(bins)
}

/// The VM tokens of a line (batch separators and empty tokens dropped),
/// with their position among the line's comma-separated tokens.
fn tokens(rest: &str) -> impl Iterator<Item = (usize, &str)> {
    rest.split(',').map(str::trim).enumerate().filter(|(_, t)| !t.is_empty() && *t != "|")
}

/// Splits `<t> <rest>`.
fn split_line<'t>(file: &str, line: usize, raw: &'t str) -> Result<(u64, &'t str), TraceError> {
    let l = raw.trim();
    let (t, rest) = l.split_once(char::is_whitespace).unwrap_or((l, ""));
    Ok((parse_seconds(t, file, line, "timestamp")?, rest.trim()))
}

/// Parses a whole Azure trace; `seed` decides the lifetimes within bins.
pub fn parse(texts: AzureTexts<'_>, seed: u64) -> Result<Trace, TraceError> {
    let (ffile, ftext) = texts.flavors;
    let (dfile, dtext) = texts.durations;
    let flavors = parse_flavor_map(texts.flavor_map.0, texts.flavor_map.1)?;
    let bins = parse_interval_map(texts.interval_map.0, texts.interval_map.1)?;
    let mut rng = Rng::new(seed);
    let mut vms = Vec::new();
    let mut flines = ftext.lines().enumerate().filter(|(_, l)| !l.trim().is_empty());
    let mut dlines = dtext.lines().enumerate().filter(|(_, l)| !l.trim().is_empty());
    let mut previous: Option<u64> = None;
    let mut first: Option<u64> = None;
    // Durations are drawn after the line's VMs are known, so collect them
    // first and give every VM its end once the boundary is known.
    let mut pending: Vec<(u64, (u64, u64), bool)> = Vec::new();
    loop {
        let (f, d) = (flines.next(), dlines.next());
        let ((fi, fraw), (di, draw)) = match (f, d) {
            (None, None) => break,
            (Some((fi, _)), None) => return Err(TraceError::line(ffile, fi + 1, "line", Problem::MissingLine)),
            (None, Some((di, _))) => return Err(TraceError::line(dfile, di + 1, "line", Problem::MissingLine)),
            (Some(f), Some(d)) => (f, d),
        };
        let (fl, dl) = (fi + 1, di + 1);
        let (t, frest) = split_line(ffile, fl, fraw)?;
        let (td, drest) = split_line(dfile, dl, draw)?;
        if t != td {
            return Err(TraceError::line(dfile, dl, "timestamp", Problem::TimeMismatch { flavors: t, durations: td }));
        }
        if let Some(p) = previous {
            if t < p {
                return Err(TraceError::line(ffile, fl, "timestamp", Problem::NotIncreasing { previous: p }));
            }
        }
        previous = Some(t);
        first.get_or_insert(t);
        let fts: Vec<(usize, &str)> = tokens(frest).collect();
        let dts: Vec<(usize, &str)> = tokens(drest).collect();
        if fts.len() != dts.len() {
            return Err(TraceError::line(
                dfile,
                dl,
                "tokens",
                Problem::CountMismatch { flavors: fts.len(), durations: dts.len() },
            ));
        }
        if vms.len() + fts.len() > MAX_VMS {
            return Err(TraceError::line(ffile, fl, "line", Problem::TooManyVms));
        }
        let n = fts.len() as u64;
        for (i, ((fpos, ftok), (dpos, dtok))) in fts.iter().zip(&dts).enumerate() {
            let flavor = flavors.get(*ftok).ok_or_else(|| {
                TraceError::line(ffile, fl, format!("token {}", fpos + 1), Problem::UnknownFlavor(ftok.to_string()))
            })?;
            let field = || format!("token {}", dpos + 1);
            let (kind, num) = dtok.split_at(dtok.char_indices().nth(1).map_or(dtok.len(), |(p, _)| p));
            let censored = match kind {
                "U" => false,
                "C" => true,
                _ => return Err(TraceError::line(dfile, dl, field(), Problem::BadDuration(dtok.to_string()))),
            };
            let k = num
                .parse::<u32>()
                .map_err(|_| TraceError::line(dfile, dl, field(), Problem::BadDuration(dtok.to_string())))?;
            // A censored VM's bin only says how long it had run; it is
            // not needed, so bins the map lacks (the dataset's own example
            // has C46) are accepted there.
            let range = if censored {
                (0, 0)
            } else {
                *bins.get(&k).ok_or_else(|| TraceError::line(dfile, dl, field(), Problem::UnknownBin(k)))?
            };
            let arrival = t.saturating_sub(BIN_S) + BIN_S * (i as u64 + 1) / n.max(1);
            vms.push(Vm {
                vcpus: flavor.vcpus,
                memory_bytes: flavor.memory_bytes,
                arrival_s: arrival,
                lifetime_s: None,
            });
            pending.push((arrival, range, censored));
        }
    }
    let Some(first) = first else {
        return Err(TraceError::line(ffile, 0, "file", Problem::Empty));
    };
    let end_s = texts.end_s.unwrap_or(previous.unwrap_or(first)).max(previous.unwrap_or(first));
    for (vm, (arrival, (lo, hi), censored)) in vms.iter_mut().zip(pending) {
        if censored {
            continue;
        }
        let drawn = lo + rng.below(hi.saturating_sub(lo).max(1));
        // `U` means it ended before the boundary: keep it so.
        let room = end_s.saturating_sub(arrival);
        vm.lifetime_s = Some(drawn.min(room));
    }
    Ok(Trace { name: ffile.to_string(), vms, start_s: first.saturating_sub(BIN_S), end_s })
}

/// Reads the censoring time out of a duration file's name
/// (`v1.test.c2591400.txt` -> 2591400).
pub fn end_from_name(name: &str) -> Option<u64> {
    let base = name.rsplit(['/', '\\']).next()?;
    let stem = base.strip_suffix(".txt").unwrap_or(base);
    let last = stem.rsplit('.').next()?;
    last.strip_prefix('c')?.parse().ok().filter(|&t| t <= super::MAX_SECONDS)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    const FLAV: &str = "1,0.75 a\n2,3.5 g\n16,112 d\n";
    const IMAP: &str = "0 0\n300 1\n600 2\n900 2\n";

    fn texts<'a>(f: &'a str, d: &'a str) -> AzureTexts<'a> {
        AzureTexts {
            flavors: ("f.txt", f),
            durations: ("d.txt", d),
            flavor_map: ("flav_map.txt", FLAV),
            interval_map: ("imap.txt", IMAP),
            end_s: Some(3000),
        }
    }

    #[test]
    fn reads_tokens_batches_and_bins() {
        let t = parse(texts("300 a,g,|,d,|,\n600 g,|,\n", "300 U0,U2,|,C7,|,\n600 U1,|,\n"), 1).unwrap();
        assert_eq!(t.vms.len(), 4);
        assert_eq!(t.start_s, 0);
        assert_eq!(t.end_s, 3000);
        // Three VMs spread over (0, 300], in file order.
        let arrivals: Vec<u64> = t.vms.iter().map(|v| v.arrival_s).collect();
        assert_eq!(arrivals, vec![100, 200, 300, 600]);
        assert_eq!((t.vms[0].vcpus, t.vms[0].memory_bytes), (1, 768 << 20));
        assert_eq!((t.vms[2].vcpus, t.vms[2].memory_bytes), (16, 112 << 30));
        let l0 = t.vms[0].lifetime_s.unwrap();
        assert!(l0 < 300, "bin 0 is [0, 300): {l0}");
        let l1 = t.vms[1].lifetime_s.unwrap();
        assert!((600..1200).contains(&l1), "bin 2 is [600, 1200): {l1}");
        assert_eq!(t.vms[2].lifetime_s, None, "censored VMs never leave");
        assert!((300..600).contains(&t.vms[3].lifetime_s.unwrap()));
    }

    #[test]
    fn lifetimes_depend_on_the_seed_only() {
        let f = "300 g,g,g,g,g,g,g,g\n";
        let d = "300 U2,U2,U2,U2,U2,U2,U2,U2\n";
        let a = parse(texts(f, d), 5).unwrap();
        assert_eq!(a, parse(texts(f, d), 5).unwrap());
        assert_ne!(a, parse(texts(f, d), 6).unwrap());
    }

    #[test]
    fn errors_name_file_line_and_field() {
        let e = parse(texts("300 a,g\n600 a,x\n", "300 U0,U1\n600 U0,U1\n"), 0).unwrap_err();
        assert_eq!(e.to_string(), "f.txt:2: token 2: flavor \"x\" is not in the flavor map");
        let e = parse(texts("300 a,g\n", "300 U0\n"), 0).unwrap_err();
        assert!(matches!(
            e,
            TraceError::Line { line: 1, problem: Problem::CountMismatch { flavors: 2, durations: 1 }, .. }
        ));
        let e = parse(texts("300 a\n", "300 U9\n"), 0).unwrap_err();
        assert!(matches!(e, TraceError::Line { problem: Problem::UnknownBin(9), .. }));
        let e = parse(texts("300 a\n", "300 X1\n"), 0).unwrap_err();
        assert!(matches!(e, TraceError::Line { problem: Problem::BadDuration(_), .. }));
        let e = parse(texts("300 a\n600 a\n", "300 U0\n"), 0).unwrap_err();
        assert!(matches!(e, TraceError::Line { line: 2, problem: Problem::MissingLine, .. }));
        let e = parse(texts("300 a\n", "600 U0\n"), 0).unwrap_err();
        assert!(matches!(e, TraceError::Line { problem: Problem::TimeMismatch { flavors: 300, durations: 600 }, .. }));
    }

    #[test]
    fn censoring_time_comes_from_the_file_name() {
        assert_eq!(end_from_name("traces/v1.test.c2591400.txt"), Some(2_591_400));
        assert_eq!(end_from_name("v1.test.txt"), None);
    }
}
