//! VM traces: who arrives when, how big, for how long. Parsers for the
//! Azure V1 flavor traces ([`azure`]) and a plain CSV ([`csv`]), and a
//! generator for tests ([`synthetic`]). All are pure functions over text;
//! `crate::load` opens the files.

pub mod azure;
pub mod csv;
pub mod synthetic;

use std::fmt;

/// Most VMs a trace may hold. The replay keeps a few words per VM and per
/// policy and numbers VMs with `u32`; ten million is far above the public
/// traces numaplace reads (the Azure V1 test split has 410,276) and keeps a
/// replay's memory near a gigabyte however long a file is.
pub const MAX_VMS: usize = 10_000_000;

/// Largest time a trace may give, seconds (about 317 years): Unix
/// timestamps (1.7 x 10^9 today) fit, and sums of arrival and lifetime
/// stay far from overflow.
pub const MAX_SECONDS: u64 = 10_000_000_000;

/// Largest trace file read, bytes: ten million CSV lines are about 400 MB.
pub const MAX_FILE_BYTES: u64 = 1 << 30;

/// One VM of a trace.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Vm {
    /// vCPUs (>= 1).
    pub vcpus: u32,
    /// Memory, bytes (> 0).
    pub memory_bytes: u64,
    /// Arrival, seconds on the trace's clock.
    pub arrival_s: u64,
    /// How long it runs; `None` when it is still running at the trace's
    /// end (censored).
    pub lifetime_s: Option<u64>,
}

impl Vm {
    /// When it leaves, if it does before the end of time.
    pub fn departure_s(&self) -> Option<u64> {
        self.lifetime_s.map(|l| self.arrival_s.saturating_add(l))
    }
}

/// A whole trace, VMs by arrival (ties keep the file's order).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Trace {
    /// Where it came from (a file name or a generator's parameters).
    pub name: String,
    /// The VMs; a VM's id is its position here.
    pub vms: Vec<Vm>,
    /// The trace's clock at its start, seconds (the bin before the first
    /// arrival).
    pub start_s: u64,
    /// The trace's clock at its end: the replay stops here and censored
    /// VMs are still running.
    pub end_s: u64,
}

impl Trace {
    /// Keeps only the first `n` VMs (by arrival); the end moves to the
    /// last kept arrival's bin when that is earlier, so a short replay
    /// does not idle for days.
    pub fn truncate(&mut self, n: usize) {
        if n < self.vms.len() {
            self.vms.truncate(n);
            if let Some(last) = self.vms.last() {
                self.end_s = self.end_s.min(last.arrival_s.saturating_add(1));
            }
        }
    }
}

/// What is wrong with a trace line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Problem {
    /// Not a number at all where one was expected.
    NotANumber(String),
    /// Not a number where seconds were expected (whole or decimal).
    NotSeconds(String),
    /// A number with a fraction where a whole one was expected.
    NotWhole(String),
    /// A negative number where only 0 or more makes sense.
    Negative(String),
    /// NaN or an infinity.
    NotFinite(String),
    /// A number outside what the field allows.
    OutOfRange {
        /// The value as written (with its unit when it has one).
        found: String,
        /// What the field allows.
        allowed: String,
    },
    /// More VMs than [`MAX_VMS`].
    TooManyVms,
    /// A flavor letter that the flavor map does not define.
    UnknownFlavor(String),
    /// A duration bin that the interval map does not define.
    UnknownBin(u32),
    /// A duration token that is neither `U<k>` nor `C<k>`.
    BadDuration(String),
    /// The flavor and duration lines disagree on the VM count.
    CountMismatch {
        /// VMs on the flavor line.
        flavors: usize,
        /// Durations on the duration line.
        durations: usize,
    },
    /// The flavor and duration lines disagree on the timestamp.
    TimeMismatch {
        /// The flavor line's timestamp.
        flavors: u64,
        /// The duration line's timestamp.
        durations: u64,
    },
    /// The line has no partner in the other file.
    MissingLine,
    /// A timestamp lower than the previous line's.
    NotIncreasing {
        /// The previous timestamp.
        previous: u64,
    },
    /// The wrong number of comma-separated fields.
    FieldCount {
        /// Fields found.
        found: usize,
        /// Fields expected.
        expected: usize,
    },
    /// The file defines nothing.
    Empty,
    /// A CSV trace's header or line is not one the reader takes.
    Csv(csv::CsvProblem),
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Problem::NotANumber(s) => write!(f, "{s:?} is not a number"),
            Problem::NotSeconds(s) => {
                write!(f, "{s:?} is not a number of seconds (expected a whole or decimal number such as 120 or 0.5)")
            }
            Problem::NotWhole(s) => write!(f, "{s} is not a whole number"),
            Problem::Negative(s) => write!(f, "{s} is negative; expected 0 or more"),
            Problem::NotFinite(s) => write!(f, "{s} is not a finite number"),
            Problem::OutOfRange { found, allowed } => write!(f, "{found} is out of range: {allowed}"),
            Problem::TooManyVms => write!(f, "more than {MAX_VMS} VMs, the most a trace may have; split it"),
            Problem::UnknownFlavor(s) => write!(f, "flavor {s:?} is not in the flavor map"),
            Problem::UnknownBin(k) => write!(f, "duration bin {k} is not in the interval map"),
            Problem::BadDuration(s) => write!(f, "{s:?} is not a duration (U<bin> or C<bin>)"),
            Problem::CountMismatch { flavors, durations } => {
                write!(f, "{flavors} flavors but {durations} durations on this line")
            }
            Problem::TimeMismatch { flavors, durations } => {
                write!(f, "timestamp {flavors} in the flavor file but {durations} in the duration file")
            }
            Problem::MissingLine => write!(f, "the other file has no line here"),
            Problem::NotIncreasing { previous } => write!(f, "timestamp goes back (previous line: {previous})"),
            Problem::FieldCount { found, expected } => write!(f, "{found} fields, expected {expected}"),
            Problem::Empty => write!(f, "no entries"),
            Problem::Csv(p) => write!(f, "{p}"),
        }
    }
}

/// A trace that cannot be read, naming the file, line (1-based; 0 for the
/// whole file) and field.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum TraceError {
    /// A line's content is wrong.
    #[error("{file}:{line}: {field}: {problem}")]
    Line {
        /// The file, as named to the parser.
        file: String,
        /// Line number, 1-based (0: the file as a whole).
        line: usize,
        /// Which field (`timestamp`, `token 3`, `vcpus`).
        field: String,
        /// What is wrong.
        problem: Problem,
    },
    /// A file could not be opened or read.
    #[error("{file}: {message}")]
    Io {
        /// The file.
        file: String,
        /// The operating system's words.
        message: String,
    },
    /// A companion file of an Azure trace was not found.
    #[error("{file}: cannot find its {what} (looked for {looked})")]
    MissingCompanion {
        /// The flavor file.
        file: String,
        /// `duration file`, `flavor map`, `interval map`.
        what: String,
        /// Where it looked.
        looked: String,
    },
}

impl TraceError {
    pub(crate) fn line(file: &str, line: usize, field: impl Into<String>, problem: Problem) -> TraceError {
        TraceError::Line { file: file.to_string(), line, field: field.into(), problem }
    }
}

/// A number as a trace writes it: digits with an optional fraction or
/// exponent, and the `NaN`/`inf` spellings (recognised so they can be
/// refused by name rather than called "not a number").
fn number(t: &str) -> Option<f64> {
    t.parse::<f64>().ok()
}

/// Why `t`, which is not a plain unsigned integer, was refused as one.
fn not_whole(t: &str, max: u64) -> Problem {
    match number(t) {
        None => Problem::NotANumber(t.to_string()),
        Some(v) if !v.is_finite() => Problem::NotFinite(t.to_string()),
        Some(v) if v < 0.0 => Problem::Negative(t.to_string()),
        Some(v) if v.fract() != 0.0 => Problem::NotWhole(t.to_string()),
        Some(_) => Problem::OutOfRange { found: t.to_string(), allowed: format!("at most {max}") },
    }
}

/// Parses a whole-number field (vCPUs, bins, counts) of at most `max`.
/// `4.0` is taken as 4: CSV writers (pandas among them) print whole
/// numbers so when a column has gaps.
pub(crate) fn parse_whole(text: &str, max: u64, file: &str, line: usize, field: &str) -> Result<u64, TraceError> {
    let t = text.trim();
    let v = match t.parse::<u64>() {
        Ok(v) => v,
        Err(_) => match number(t) {
            Some(v) if v.is_finite() && v >= 0.0 && v.fract() == 0.0 && v <= max as f64 => v as u64,
            _ => return Err(TraceError::line(file, line, field, not_whole(t, max))),
        },
    };
    if v > max {
        return Err(TraceError::line(file, line, field, not_whole(t, max)));
    }
    Ok(v)
}

/// Most vCPUs a trace's VM may have: more than any cloud flavor has.
pub const MAX_VCPUS: u64 = 4096;

/// Parses a VM's vCPU count: 1 to [`MAX_VCPUS`].
pub(crate) fn parse_vcpus(text: &str, file: &str, line: usize, field: &str) -> Result<u32, TraceError> {
    let range = |found: String| Problem::OutOfRange { found, allowed: format!("1 to {MAX_VCPUS} vCPUs") };
    let v = parse_whole(text, MAX_VCPUS, file, line, field).map_err(|e| match e {
        TraceError::Line { problem: Problem::OutOfRange { found, .. } | Problem::Negative(found), .. } => {
            TraceError::line(file, line, field, range(found))
        }
        other => other,
    })?;
    match u32::try_from(v) {
        Ok(n) if n >= 1 => Ok(n),
        _ => Err(TraceError::line(file, line, field, range(text.trim().to_string()))),
    }
}

/// Parses a time in seconds, whole or decimal (`0`, `0.0`, `12.5`,
/// `1.7e9`), rounded to the nearest second: the replay's clock counts
/// whole seconds. 0 to [`MAX_SECONDS`].
pub(crate) fn parse_seconds(text: &str, file: &str, line: usize, field: &str) -> Result<u64, TraceError> {
    let t = text.trim();
    let err = |p| TraceError::line(file, line, field, p);
    let range = || Problem::OutOfRange {
        found: format!("{t} s"),
        allowed: format!("at most {MAX_SECONDS} s (about 317 years)"),
    };
    if let Ok(v) = t.parse::<u64>() {
        return if v <= MAX_SECONDS { Ok(v) } else { Err(err(range())) };
    }
    match number(t) {
        None => Err(err(Problem::NotSeconds(t.to_string()))),
        Some(v) if !v.is_finite() => Err(err(Problem::NotFinite(t.to_string()))),
        // `-0.0` and `-0` are 0, not negative.
        Some(v) if v < 0.0 => Err(err(Problem::Negative(t.to_string()))),
        Some(v) if v.round() > MAX_SECONDS as f64 => Err(err(range())),
        Some(v) => Ok(v.round() as u64),
    }
}

/// Parses a size in GiB into bytes (more than 0, at most 1 PiB).
pub(crate) fn parse_gib(text: &str, file: &str, line: usize, field: &str) -> Result<u64, TraceError> {
    let t = text.trim();
    let err = |p| TraceError::line(file, line, field, p);
    let v = number(t).ok_or_else(|| err(Problem::NotANumber(t.to_string())))?;
    if !v.is_finite() {
        return Err(err(Problem::NotFinite(t.to_string())));
    }
    if v < 0.0 {
        return Err(err(Problem::Negative(t.to_string())));
    }
    let bytes = (v * (1u64 << 30) as f64).round();
    if !(bytes >= 1.0 && v <= (1u64 << 20) as f64) {
        return Err(err(Problem::OutOfRange {
            found: format!("{t} GiB"),
            allowed: "more than 0 and at most 1048576 GiB (1 PiB)".to_string(),
        }));
    }
    Ok(bytes as u64)
}
