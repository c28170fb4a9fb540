//! Errors: `ParseError` for text the kernel printed that we could not
//! understand, `ReadError` for files we could not read (with the cases a
//! user must tell apart: the process is gone, or we may not look).

use std::path::PathBuf;

/// A `/proc` or sysfs text that does not have the expected shape.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ParseError {
    /// One line of a line-oriented file.
    #[error("{file} line {line}: {reason}")]
    Line {
        /// Which kind of file (`numa_maps`, `stat`, ...).
        file: &'static str,
        /// 1-based line number.
        line: usize,
        /// What was wrong.
        reason: String,
    },
    /// A whole-file problem (missing field, truncated record).
    #[error("{file}: {reason}")]
    File {
        /// Which kind of file.
        file: &'static str,
        /// What was wrong.
        reason: String,
    },
}

/// Why a file under the process tree could not be read.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    /// The process or thread exited between listing and reading it
    /// (ENOENT/ESRCH): normal on a live host, callers skip it.
    #[error("{0}: the process has exited")]
    Vanished(PathBuf),
    /// Reading another user's process needs root (or CAP_SYS_PTRACE).
    #[error("{0}: permission denied (run as root to see other users' processes)")]
    Permission(PathBuf),
    /// The file does not exist on this kernel (no CONFIG_NUMA, no sysfs).
    #[error("{0}: not provided by this kernel")]
    Missing(PathBuf),
    /// Any other I/O error.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// The file was read but not understood.
    #[error("{path}: {source}")]
    Parse {
        /// The file.
        path: PathBuf,
        /// What was wrong.
        source: ParseError,
    },
}

impl ReadError {
    /// Classifies an I/O error on `path`. `process_file` says whether the
    /// path lies under `/proc/PID`, where "not found" means the process
    /// went away rather than that the kernel lacks the file.
    pub(crate) fn from_io(path: PathBuf, e: std::io::Error, process_file: bool) -> Self {
        match (e.kind(), e.raw_os_error()) {
            (std::io::ErrorKind::NotFound, _) if process_file => ReadError::Vanished(path),
            (std::io::ErrorKind::NotFound, _) => ReadError::Missing(path),
            (_, Some(libc::ESRCH)) => ReadError::Vanished(path),
            (std::io::ErrorKind::PermissionDenied, _) => ReadError::Permission(path),
            _ => ReadError::Io { path, source: e },
        }
    }

    /// Whether the process simply went away.
    pub fn is_vanished(&self) -> bool {
        matches!(self, ReadError::Vanished(_))
    }
}
