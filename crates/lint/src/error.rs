//! Why a VM file could not be read, with the line at fault (why a fix
//! could not be written is `fix::error`).

use numaplace_libvirt::domain::DomainError;
use numaplace_wire::plan::RequestError;

/// What was wrong with a VM file, without the file name.
#[derive(Debug, thiserror::Error)]
pub enum VmError {
    /// What a definition of any format can get wrong (malformed XML, a
    /// root that is not `<domain>`, a value of the wrong form, a required
    /// setting absent): numaplace-libvirt's error, which the `.vmx` and
    /// request readers use too.
    #[error(transparent)]
    Definition(#[from] DomainError),
    /// A `.vmx` line that is not `key = "value"`.
    #[error("line {line}: expected `key = \"value\"`, found `{text}`")]
    VmxSyntax {
        /// 1-based line.
        line: u32,
        /// The line (cut to 80 characters).
        text: String,
    },
    /// A numaplace request file that does not parse.
    #[error("{0}")]
    Request(RequestError),
    /// The bytes are not UTF-8.
    #[error("not UTF-8 text (invalid byte at offset {offset})")]
    NotUtf8 {
        /// Byte offset of the first invalid byte.
        offset: usize,
    },
    /// Not a format the linter reads.
    #[error("not a VM definition numaplace can lint (expected libvirt domain XML, a VMware .vmx file or numaplace request JSON)")]
    UnknownFormat,
    /// The file could not be read.
    #[error("{0}")]
    Io(#[from] std::io::Error),
}

impl VmError {
    /// A [`DomainError::BadValue`], cutting `found` to a readable length.
    pub(crate) fn bad(line: u32, field: impl Into<String>, expected: &'static str, found: &str) -> VmError {
        VmError::Definition(DomainError::bad(line, field, expected, found))
    }

    /// The line at fault, when there is one.
    pub fn line(&self) -> Option<u32> {
        match self {
            VmError::Definition(e) => e.line(),
            VmError::VmxSyntax { line, .. } => Some(*line),
            VmError::Request(RequestError::Json { line, .. }) => u32::try_from(*line).ok(),
            _ => None,
        }
    }
}

/// A [`VmError`] with the file it came from.
#[derive(Debug, thiserror::Error)]
#[error("{file}: {error}")]
pub struct FileError {
    /// The file as named on the command line.
    pub file: String,
    /// What was wrong.
    pub error: VmError,
}

impl FileError {
    /// Wraps an error with its file.
    pub fn new(file: &str, error: VmError) -> FileError {
        FileError { file: file.to_string(), error }
    }
}
