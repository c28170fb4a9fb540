//! VM traces: who arrives when, how big, for how long. Parsers for the
//! Azure V1 flavor traces ([`azure`]) and a plain CSV ([`csv`]), and a
//! generator for tests ([`synthetic`]). All are pure functions over text;
//! `crate::load` opens the files.

pub mod azure;
pub mod csv;
pub mod synthetic;

use std::fmt;

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
    /// Not a number where one was expected.
    NotANumber(String),
    /// A number outside what the field allows.
    OutOfRange(String),
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
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Problem::NotANumber(s) => write!(f, "{s:?} is not a number"),
            Problem::OutOfRange(s) => write!(f, "{s} is out of range"),
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

/// Parses an unsigned integer field.
pub(crate) fn parse_u64(text: &str, file: &str, line: usize, field: &str) -> Result<u64, TraceError> {
    text.trim()
        .parse::<u64>()
        .map_err(|_| TraceError::line(file, line, field, Problem::NotANumber(text.trim().to_string())))
}

/// Parses a size in GiB into bytes (finite, > 0, at most 1 PiB).
pub(crate) fn parse_gib(text: &str, file: &str, line: usize, field: &str) -> Result<u64, TraceError> {
    let t = text.trim();
    let v: f64 = t.parse().map_err(|_| TraceError::line(file, line, field, Problem::NotANumber(t.to_string())))?;
    if !(v.is_finite() && v > 0.0 && v <= (1u64 << 20) as f64) {
        return Err(TraceError::line(file, line, field, Problem::OutOfRange(format!("{t} GiB"))));
    }
    Ok((v * (1u64 << 30) as f64).round() as u64)
}
