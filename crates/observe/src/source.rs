//! Where the sampler reads from: a small trait over "the process tree and
//! the node directory", so tests feed recorded trees (or trees they change
//! between samples) and the live host is just the tree rooted at `/`.

use crate::error::ReadError;
use std::path::{Path, PathBuf};

/// Read access to `/proc` and `/sys/devices/system/node`.
pub trait Source {
    /// The process ids present now.
    fn pids(&self) -> Result<Vec<u32>, ReadError>;
    /// The thread ids of one process.
    fn tids(&self, pid: u32) -> Result<Vec<u32>, ReadError>;
    /// A file under `/proc/PID/` (`numa_maps`, `task/TID/stat`, ...).
    fn proc_file(&self, pid: u32, rel: &str) -> Result<Vec<u8>, ReadError>;
    /// A host-wide file relative to the root (`proc/stat`,
    /// `sys/devices/system/node/node0/meminfo`).
    fn host_file(&self, rel: &str) -> Result<String, ReadError>;
    /// The NUMA node ids the kernel exposes (empty without CONFIG_NUMA).
    fn node_ids(&self) -> Result<Vec<u32>, ReadError>;
}

/// A directory tree laid out like the root file system: `/` for the live
/// host, or a recorded copy holding `proc/...` and `sys/...`.
#[derive(Clone, Debug)]
pub struct FsSource {
    root: PathBuf,
}

impl FsSource {
    /// A tree rooted at `root`.
    pub fn new(root: impl Into<PathBuf>) -> Self {
        FsSource { root: root.into() }
    }

    /// The live host.
    pub fn live() -> Self {
        FsSource::new("/")
    }

    /// The root.
    pub fn root(&self) -> &Path {
        &self.root
    }
}

fn numeric_entries(dir: &Path, process_dir: bool) -> Result<Vec<u32>, ReadError> {
    let rd = std::fs::read_dir(dir).map_err(|e| ReadError::from_io(dir.to_path_buf(), e, process_dir))?;
    let mut ids: Vec<u32> = rd.flatten().filter_map(|e| e.file_name().to_str().and_then(|n| n.parse().ok())).collect();
    ids.sort_unstable();
    Ok(ids)
}

impl Source for FsSource {
    fn pids(&self) -> Result<Vec<u32>, ReadError> {
        numeric_entries(&self.root.join("proc"), false)
    }

    fn tids(&self, pid: u32) -> Result<Vec<u32>, ReadError> {
        numeric_entries(&self.root.join(format!("proc/{pid}/task")), true)
    }

    fn proc_file(&self, pid: u32, rel: &str) -> Result<Vec<u8>, ReadError> {
        let path = self.root.join(format!("proc/{pid}/{rel}"));
        std::fs::read(&path).map_err(|e| ReadError::from_io(path, e, true))
    }

    fn host_file(&self, rel: &str) -> Result<String, ReadError> {
        let path = self.root.join(rel);
        std::fs::read_to_string(&path).map_err(|e| ReadError::from_io(path, e, false))
    }

    fn node_ids(&self) -> Result<Vec<u32>, ReadError> {
        let dir = self.root.join("sys/devices/system/node");
        let rd = match std::fs::read_dir(&dir) {
            Ok(rd) => rd,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(ReadError::from_io(dir, e, false)),
        };
        let mut ids: Vec<u32> = rd
            .flatten()
            .filter_map(|e| e.file_name().to_str().and_then(|n| n.strip_prefix("node")).and_then(|d| d.parse().ok()))
            .collect();
        ids.sort_unstable();
        Ok(ids)
    }
}
