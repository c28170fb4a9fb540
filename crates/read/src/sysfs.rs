//! sysfs/procfs reader.
use crate::{ParseError, ReadError};
use numaplace_topo::Topology;
use std::path::{Path, PathBuf};

/// A read-only view of a file tree rooted where `/` would be.
pub trait Tree {
    /// Reads a file as text; `Ok(None)` when it does not exist.
    fn read(&self, path: &str) -> Result<Option<String>, ParseError>;
    /// Names of the entries of a directory (empty when it does not exist).
    fn list(&self, path: &str) -> Vec<String>;
}

/// A directory on disk.
pub struct DirTree {
    root: PathBuf,
}

impl DirTree {
    /// A tree rooted at `root`.
    pub fn new(root: impl AsRef<Path>) -> DirTree {
        DirTree { root: root.as_ref().to_path_buf() }
    }
}

impl Tree for DirTree {
    fn read(&self, _path: &str) -> Result<Option<String>, ParseError> {
        Ok(None)
    }
    fn list(&self, _path: &str) -> Vec<String> {
        Vec::new()
    }
}

/// A tree held in memory (from a tarball).
pub struct MemTree {}

impl MemTree {
    /// Loads a tarball.
    pub fn from_tarball_file(path: &Path) -> Result<MemTree, ReadError> {
        let _ = path;
        Ok(MemTree {})
    }
}

impl Tree for MemTree {
    fn read(&self, _path: &str) -> Result<Option<String>, ParseError> {
        Ok(None)
    }
    fn list(&self, _path: &str) -> Vec<String> {
        Vec::new()
    }
}

/// Reads a topology from a tree.
pub fn read_tree(_tree: &dyn Tree) -> Result<Topology, ParseError> {
    Err(ParseError::UnknownFormat)
}
