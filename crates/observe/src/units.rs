//! Parsing of the sizes, rates and durations the commands take
//! (`256MiB`, `256MiB/s`, `2s`, `500ms`), with errors that name the input.

use std::time::Duration;

/// A size, rate or duration that could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{input:?} is not a valid {what}: {reason} (examples: {examples})")]
pub struct UnitError {
    /// The text given.
    pub input: String,
    /// What was expected.
    pub what: &'static str,
    /// What is wrong with it.
    pub reason: String,
    /// Valid examples.
    pub examples: &'static str,
}

/// Bytes from `4096`, `64KiB`, `256MiB`, `2GiB`, `1G`, `4GB`: the one size
/// grammar of the workspace ([`numaplace_topo::parse_size`],
/// `docs/formats/request.md#sizes`), so `balance --min-memory 4GB` is the
/// same 4 x 10^9 bytes that `verify --max-memory 4GB` is, and `4G` the same
/// 4 GiB as numactl and QEMU mean.
pub fn parse_bytes(s: &str) -> Result<u64, UnitError> {
    numaplace_topo::try_parse_size(s).map_err(|e| UnitError {
        input: s.to_string(),
        what: "size",
        reason: e.to_string(),
        examples: "4096, 64KiB, 256MiB, 2GiB, 4GB",
    })
}

/// Bytes per second from `256MiB/s` (the `/s` may be left out).
pub fn parse_rate(s: &str) -> Result<u64, UnitError> {
    let t = s.trim();
    let body = t.strip_suffix("/s").unwrap_or(t);
    parse_bytes(body).map_err(|e| UnitError {
        input: s.to_string(),
        what: "rate",
        reason: e.reason,
        examples: "256MiB/s, 1GiB/s",
    })
}

/// A duration from `2s`, `500ms`, `1.5s`, `2m`, or a bare number of seconds.
pub fn parse_duration(s: &str) -> Result<Duration, UnitError> {
    let err = || UnitError {
        input: s.to_string(),
        what: "duration",
        reason: "expected a number with an optional unit: s, ms, m or min, h".to_string(),
        examples: "2s, 500ms, 1m",
    };
    let t = s.trim();
    let split = t.find(|c: char| !c.is_ascii_digit() && c != '.').unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let num: f64 = num.parse().map_err(|_| err())?;
    let secs = match unit {
        "" | "s" => num,
        "ms" => num / 1000.0,
        "m" | "min" => num * 60.0,
        "h" => num * 3600.0,
        _ => return Err(err()),
    };
    Duration::try_from_secs_f64(secs).map_err(|_| err())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn units() {
        assert_eq!(parse_bytes("256MiB"), Ok(256 << 20));
        assert_eq!(parse_bytes("4096"), Ok(4096));
        assert_eq!(parse_rate("32MiB/s"), Ok(32 << 20));
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("2"), Ok(Duration::from_secs(2)));
        assert!(parse_bytes("12 parsecs").is_err());
        assert!(parse_rate("fast").is_err());
        assert!(parse_duration("-1s").is_err());
    }
}
