//! Parsing of the sizes, rates and durations the commands take
//! (`256MiB`, `256MiB/s`, `2s`, `500ms`), with errors that name the input.

use std::time::Duration;

/// A size, rate or duration that could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{input:?} is not a valid {what} (examples: {examples})")]
pub struct UnitError {
    /// The text given.
    pub input: String,
    /// What was expected.
    pub what: &'static str,
    /// Valid examples.
    pub examples: &'static str,
}

/// Bytes from `4096`, `64KiB`, `256MiB`, `2GiB`, `1G` (binary multiples;
/// `K`/`M`/`G`/`T` alone are read as binary too, like numactl and QEMU).
pub fn parse_bytes(s: &str) -> Result<u64, UnitError> {
    let err = || UnitError { input: s.to_string(), what: "size", examples: "4096, 64KiB, 256MiB, 2GiB" };
    let t = s.trim();
    let split = t.find(|c: char| !c.is_ascii_digit() && c != '.').unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let num: f64 = num.parse().map_err(|_| err())?;
    let mult: u64 = match unit.trim() {
        "" | "B" => 1,
        "K" | "KiB" | "k" | "KB" => 1 << 10,
        "M" | "MiB" | "MB" => 1 << 20,
        "G" | "GiB" | "GB" => 1 << 30,
        "T" | "TiB" | "TB" => 1 << 40,
        _ => return Err(err()),
    };
    let v = num * mult as f64;
    if !v.is_finite() || v < 0.0 || v > u64::MAX as f64 {
        return Err(err());
    }
    Ok(v as u64)
}

/// Bytes per second from `256MiB/s` (the `/s` may be left out).
pub fn parse_rate(s: &str) -> Result<u64, UnitError> {
    let t = s.trim();
    let body = t.strip_suffix("/s").unwrap_or(t);
    parse_bytes(body).map_err(|_| UnitError { input: s.to_string(), what: "rate", examples: "256MiB/s, 1GiB/s" })
}

/// A duration from `2s`, `500ms`, `1.5s`, `2m`, or a bare number of seconds.
pub fn parse_duration(s: &str) -> Result<Duration, UnitError> {
    let err = || UnitError { input: s.to_string(), what: "duration", examples: "2s, 500ms, 1m" };
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
