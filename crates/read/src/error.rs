//! Read errors: what went wrong (syntax or meaning) and in which file.

use numaplace_topo::{CpuSetError, ModelError};

/// What was wrong with a source, without saying which file it was.
#[derive(Debug, thiserror::Error)]
pub enum ParseError {
    /// The file is not XML that parses.
    #[error("malformed XML at line {line}, column {column}: {message}")]
    Xml {
        /// 1-based line.
        line: u32,
        /// 1-based column.
        column: u32,
        /// The XML parser's message.
        message: String,
    },
    /// JSON that does not parse or does not fit the schema.
    #[error("malformed JSON at line {line}, column {column}: {message}")]
    Json {
        /// 1-based line.
        line: usize,
        /// 1-based column.
        column: usize,
        /// serde_json's message.
        message: String,
    },
    /// A value of the wrong form.
    #[error("{field}: expected {expected}, found `{found}`")]
    BadValue {
        /// Where: an element/attribute path or a file inside a tree.
        field: String,
        /// What a valid value looks like.
        expected: &'static str,
        /// What was there (cut to 80 characters).
        found: String,
    },
    /// A required element, attribute or file is absent.
    #[error("{0} is missing")]
    Missing(String),
    /// A CPU list or mask that does not parse.
    #[error("{field}: {source}")]
    CpuSet {
        /// Where.
        field: String,
        /// Why.
        source: CpuSetError,
    },
    /// The data parses but contradicts itself.
    #[error(transparent)]
    Model(#[from] ModelError),
    /// A contradiction traced to one file of a tree (a distance row of the
    /// wrong length, a CPU that two nodes list).
    #[error("{path}: {source}")]
    Contradiction {
        /// The file inside the tree.
        path: String,
        /// What it contradicts.
        source: ModelError,
    },
    /// The bytes are not UTF-8.
    #[error("not UTF-8 text (invalid byte at offset {offset})")]
    NotUtf8 {
        /// Byte offset of the first invalid byte.
        offset: usize,
    },
    /// Not a format numaplace reads.
    #[error("not a topology numaplace can read (expected hwloc XML, libvirt capabilities XML, numaplace JSON, a sysfs directory or tarball, or a synthetic description such as `2 sockets x 8 cores x 2 threads, 64GiB per node`)")]
    UnknownFormat,
    /// The source names no file, directory or synthetic description.
    #[error("no such file or directory, and not a synthetic description (such as `2 sockets x 8 cores x 2 threads, 64GiB per node`)")]
    NotFound,
    /// The source itself cannot be read.
    #[error("cannot read: {0}")]
    Open(std::io::Error),
    /// An I/O error on a file inside a tree.
    #[error("{path}: {source}")]
    Io {
        /// The file inside the tree.
        path: String,
        /// The OS error.
        source: std::io::Error,
    },
}

impl ParseError {
    /// A [`ParseError::BadValue`], cutting `found` to a readable length.
    pub fn bad(field: impl Into<String>, expected: &'static str, found: &str) -> ParseError {
        ParseError::BadValue { field: field.into(), expected, found: found.chars().take(80).collect() }
    }

    /// Attaches the file name.
    pub fn in_file(self, file: &str) -> ReadError {
        ReadError::new(file, self)
    }
}

/// A [`ParseError`] with the file (or source) it came from.
#[derive(Debug, thiserror::Error)]
#[error("{file}: {error}")]
pub struct ReadError {
    /// The file or source named on the command line.
    pub file: String,
    /// What was wrong.
    pub error: ParseError,
}

impl ReadError {
    /// Wraps a parse error with its file.
    pub fn new(file: &str, error: ParseError) -> ReadError {
        ReadError { file: file.to_string(), error }
    }

    /// An I/O error opening the source itself (the file is named once).
    pub fn io(file: &str, source: std::io::Error) -> ReadError {
        ReadError::new(file, ParseError::Open(source))
    }
}
