//! The file trees the sysfs reader walks: a directory on disk ([`DirTree`],
//! `/` being the live host) or a tree held in memory ([`MemTree`]), built
//! by hand in tests or loaded from a `hwloc-gather-topology` tarball.
//!
//! Paths are always absolute inside the tree (`/sys/devices/system/cpu`),
//! so the parser reads the same paths whatever the tree is.

use crate::ParseError;
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::io::Read;
use std::path::{Path, PathBuf};

/// Files longer than this are refused: sysfs attributes are one page at
/// most, and only `/proc/cpuinfo` of a huge machine comes close.
pub const MAX_FILE_BYTES: u64 = 16 << 20;

/// Symlinks followed while resolving one path, as the kernel's own limit.
const MAX_LINK_HOPS: usize = 40;

/// A read-only view of a file tree rooted where `/` would be.
pub trait Tree {
    /// Reads a file as text; `Ok(None)` when it does not exist (or is a
    /// directory).
    fn read(&self, path: &str) -> Result<Option<String>, ParseError>;
    /// Names of the entries of a directory, sorted (empty when it does not
    /// exist).
    fn list(&self, path: &str) -> Vec<String>;
    /// Whether a file or directory exists at `path` (symlinks followed).
    fn exists(&self, path: &str) -> bool {
        matches!(self.read(path), Ok(Some(_))) || !self.list(path).is_empty()
    }
    /// The tree path `path` leads to once its symlinks are followed (where
    /// sysfs puts a device its bus links to); `None` when it leads nowhere
    /// or outside the tree.
    fn canonical(&self, path: &str) -> Option<String> {
        let _ = path;
        None
    }
}

fn not_utf8(path: &str, bytes: &[u8]) -> ParseError {
    ParseError::bad(path, "UTF-8 text", &String::from_utf8_lossy(bytes))
}

/// A directory on disk; `DirTree::new("/")` reads the live host.
#[derive(Debug, Clone)]
pub struct DirTree {
    root: PathBuf,
}

impl DirTree {
    /// A tree rooted at `root`.
    pub fn new(root: impl AsRef<Path>) -> DirTree {
        DirTree { root: root.as_ref().to_path_buf() }
    }

    /// The on-disk path of a tree path. `..` components are dropped so a
    /// name read from the tree cannot lead outside it.
    fn host_path(&self, path: &str) -> PathBuf {
        let mut out = self.root.clone();
        for comp in path.split('/').filter(|c| !c.is_empty() && *c != "." && *c != "..") {
            out.push(comp);
        }
        out
    }
}

impl Tree for DirTree {
    fn read(&self, path: &str) -> Result<Option<String>, ParseError> {
        let host = self.host_path(path);
        if host.is_dir() {
            return Ok(None);
        }
        let file = match std::fs::File::open(&host) {
            Ok(f) => f,
            Err(e) if is_absent(&e) => return Ok(None),
            Err(source) => return Err(ParseError::Io { path: path.to_string(), source }),
        };
        let mut bytes = Vec::new();
        // sysfs files report a size of 4096 whatever they hold, so the
        // limit is on what is read, not on the metadata.
        file.take(MAX_FILE_BYTES + 1)
            .read_to_end(&mut bytes)
            .map_err(|source| ParseError::Io { path: path.to_string(), source })?;
        if bytes.len() as u64 > MAX_FILE_BYTES {
            return Err(ParseError::bad(path, "a file under 16 MiB", "a larger file"));
        }
        String::from_utf8(bytes).map(Some).map_err(|e| not_utf8(path, e.as_bytes()))
    }

    fn list(&self, path: &str) -> Vec<String> {
        let Ok(dir) = std::fs::read_dir(self.host_path(path)) else {
            return Vec::new();
        };
        let mut names: Vec<String> =
            dir.filter_map(|e| e.ok()).filter_map(|e| e.file_name().into_string().ok()).collect();
        names.sort();
        names
    }

    fn exists(&self, path: &str) -> bool {
        self.host_path(path).exists()
    }

    fn canonical(&self, path: &str) -> Option<String> {
        let root = std::fs::canonicalize(&self.root).ok()?;
        let real = std::fs::canonicalize(self.host_path(path)).ok()?;
        let inside = real.strip_prefix(&root).ok()?;
        Some(format!("/{}", inside.to_str()?))
    }
}

fn is_absent(e: &std::io::Error) -> bool {
    // ENOTDIR: a path through a file; ENODEV/ENXIO: attributes whose
    // device is gone. All mean "no such attribute" to the reader.
    matches!(e.kind(), std::io::ErrorKind::NotFound | std::io::ErrorKind::NotADirectory)
        || matches!(e.raw_os_error(), Some(6 | 19))
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Entry {
    File(Vec<u8>),
    Dir(BTreeSet<String>),
    Link(String),
}

/// A tree held in memory: files, directories and symlinks by absolute
/// path. Symlinks are resolved inside the tree (relative ones against the
/// link's directory, absolute ones against the tree root).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemTree {
    entries: BTreeMap<String, Entry>,
}

impl Default for MemTree {
    fn default() -> Self {
        MemTree::new()
    }
}

/// Splits a path into its normal components, applying `.` and `..`.
fn components(path: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for comp in path.split('/') {
        match comp {
            "" | "." => {}
            ".." => {
                out.pop();
            }
            c => out.push(c.to_string()),
        }
    }
    out
}

fn join(comps: &[String]) -> String {
    let mut s = String::with_capacity(comps.iter().map(|c| c.len() + 1).sum::<usize>().max(1));
    for c in comps {
        s.push('/');
        s.push_str(c);
    }
    if s.is_empty() {
        s.push('/');
    }
    s
}

impl MemTree {
    /// An empty tree (just `/`).
    pub fn new() -> MemTree {
        let mut entries = BTreeMap::new();
        entries.insert("/".to_string(), Entry::Dir(BTreeSet::new()));
        MemTree { entries }
    }

    /// Makes sure the directory `comps` exists, creating parents; returns
    /// false when a file or link is in the way.
    fn ensure_dir(&mut self, comps: &[String]) -> bool {
        for i in 0..comps.len() {
            let parent = join(&comps[..i]);
            let name = comps[i].clone();
            match self.entries.get_mut(&parent) {
                Some(Entry::Dir(children)) => {
                    children.insert(name);
                }
                _ => return false,
            }
            let path = join(&comps[..=i]);
            match self.entries.get(&path) {
                None => {
                    self.entries.insert(path, Entry::Dir(BTreeSet::new()));
                }
                Some(Entry::Dir(_)) => {}
                // A link or file already there: later entries beneath it
                // are ignored, as the first one wins.
                Some(_) => return false,
            }
        }
        true
    }

    fn put(&mut self, path: &str, entry: Entry) {
        let comps = components(path);
        let Some((name, parents)) = comps.split_last() else {
            return;
        };
        if !self.ensure_dir(parents) {
            return;
        }
        if let Some(Entry::Dir(children)) = self.entries.get_mut(&join(parents)) {
            children.insert(name.clone());
        }
        let key = join(&comps);
        match (self.entries.get(&key), &entry) {
            // Keep what a directory already holds.
            (Some(Entry::Dir(_)), Entry::Dir(_)) => {}
            _ => {
                self.entries.insert(key, entry);
            }
        }
    }

    /// Adds (or replaces) a file, creating its directories.
    pub fn insert_file(&mut self, path: &str, contents: impl Into<Vec<u8>>) {
        self.put(path, Entry::File(contents.into()));
    }

    /// Adds a directory (and its parents).
    pub fn insert_dir(&mut self, path: &str) {
        self.put(path, Entry::Dir(BTreeSet::new()));
    }

    /// Adds a symlink whose target is relative to the link's directory
    /// (`../../../devices/pci0000:00/0000:00:01.0`) or absolute in the tree.
    pub fn insert_link(&mut self, path: &str, target: &str) {
        self.put(path, Entry::Link(target.to_string()));
    }

    /// Removes a file, directory or link (not what a link points to).
    pub fn remove(&mut self, path: &str) {
        let comps = components(path);
        let Some((name, parents)) = comps.split_last() else {
            return;
        };
        let key = join(&comps);
        let prefix = format!("{key}/");
        self.entries.retain(|k, _| k != &key && !k.starts_with(&prefix));
        if let Some(Entry::Dir(children)) = self.entries.get_mut(&join(parents)) {
            children.remove(name);
        }
    }

    /// Paths of all regular files, sorted.
    pub fn files(&self) -> Vec<String> {
        self.entries.iter().filter(|(_, e)| matches!(e, Entry::File(_))).map(|(k, _)| k.clone()).collect()
    }

    /// The tree path `path` leads to once every symlink on the way is
    /// followed; `None` when something on the way is missing or the links
    /// loop.
    pub fn resolve(&self, path: &str) -> Option<String> {
        let mut pending: VecDeque<String> = components(path).into();
        let mut current: Vec<String> = Vec::new();
        let mut hops = 0;
        while let Some(comp) = pending.pop_front() {
            match comp.as_str() {
                "" | "." => continue,
                ".." => {
                    current.pop();
                    continue;
                }
                _ => {}
            }
            current.push(comp);
            match self.entries.get(&join(&current)) {
                Some(Entry::Link(target)) => {
                    hops += 1;
                    if hops > MAX_LINK_HOPS {
                        return None;
                    }
                    current.pop();
                    if target.starts_with('/') {
                        current.clear();
                    }
                    for c in target.split('/').rev() {
                        pending.push_front(c.to_string());
                    }
                }
                Some(_) => {}
                None => return None,
            }
        }
        Some(join(&current))
    }

    fn entry(&self, path: &str) -> Option<&Entry> {
        self.entries.get(&self.resolve(path)?)
    }
}

impl Tree for MemTree {
    fn read(&self, path: &str) -> Result<Option<String>, ParseError> {
        match self.entry(path) {
            Some(Entry::File(bytes)) => {
                String::from_utf8(bytes.clone()).map(Some).map_err(|e| not_utf8(path, e.as_bytes()))
            }
            _ => Ok(None),
        }
    }

    fn list(&self, path: &str) -> Vec<String> {
        match self.entry(path) {
            Some(Entry::Dir(children)) => children.iter().cloned().collect(),
            _ => Vec::new(),
        }
    }

    fn exists(&self, path: &str) -> bool {
        self.entry(path).is_some()
    }

    fn canonical(&self, path: &str) -> Option<String> {
        self.resolve(path)
    }
}
