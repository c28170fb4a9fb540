//! Loading a `hwloc-gather-topology` tarball (`.tar` or `.tar.bz2`) into a
//! [`MemTree`].
//!
//! Such tarballs hold `<name>/sys/...` and `<name>/proc/...` (sometimes
//! with a leading `./`). Only the subtrees the reader uses are kept, and
//! every size is capped, so a hostile or corrupt archive ends in an error
//! rather than in exhausted memory: decompressed bytes scanned, bytes
//! stored, entries stored, and the size of each file.

use super::tree::{MemTree, Tree, MAX_FILE_BYTES};
use crate::{ParseError, ReadError};
use std::io::{BufRead, BufReader, Read};
use std::path::Path;

/// Decompressed bytes scanned before giving up (real trees are < 100 MiB).
const MAX_SCANNED_BYTES: u64 = 1 << 30;
/// File contents kept in memory.
const MAX_STORED_BYTES: u64 = 128 << 20;
/// Entries (files, directories, links) kept in memory.
const MAX_STORED_ENTRIES: usize = 1 << 20;

/// Names of files kept inside PCI device directories; the rest of a
/// device's attributes (config space, resources) is of no use here.
const PCI_FILES: [&str; 6] = ["class", "vendor", "device", "numa_node", "local_cpulist", "local_cpus"];

const FIELD: &str = "tarball";
const EXPECTED: &str = "a tar or tar.bz2 archive of a sysfs tree (hwloc-gather-topology)";

/// Counts what the decompressor hands out and stops at the cap.
struct Capped<R> {
    inner: R,
    left: u64,
}

impl<R: Read> Read for Capped<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        if self.left == 0 {
            return Err(std::io::Error::other("archive decompresses to more than 1 GiB"));
        }
        let max = buf.len().min(usize::try_from(self.left).unwrap_or(usize::MAX));
        let n = self.inner.read(&mut buf[..max])?;
        self.left -= n as u64;
        Ok(n)
    }
}

/// Whether a path inside the tree (without the top directory) is worth
/// keeping, and whether its contents are (directories and links are kept
/// for their names).
fn wanted(rel: &[&str]) -> Option<bool> {
    match rel {
        ["sys"] | ["proc"] | ["sys", "devices"] | ["sys", "devices", "system"] | ["sys", "bus"] => Some(false),
        ["sys", "bus", "pci"] | ["sys", "bus", "pci", "devices"] | ["sys", "bus", "pci", "devices", _] => Some(false),
        // Usually links into sys/devices/pci*, but some captures hold
        // the device directories here.
        ["sys", "bus", "pci", "devices", _, rest @ ..] => Some(rest.last().is_some_and(|n| PCI_FILES.contains(n))),
        ["sys", "devices", "system", "cpu" | "node", ..] => Some(true),
        ["sys", "kernel"] | ["sys", "kernel", "mm"] => Some(false),
        ["sys", "kernel", "mm", "hugepages", ..] => Some(true),
        ["sys", "devices", top, rest @ ..] if top.starts_with("pci") => {
            Some(rest.last().is_some_and(|name| PCI_FILES.contains(name)))
        }
        ["proc", "meminfo" | "cpuinfo"] => Some(true),
        ["proc", "driver"] | ["proc", "driver", "nvidia"] | ["proc", "driver", "nvidia", "gpus"] => Some(false),
        ["proc", "driver", "nvidia", "gpus", _] => Some(false),
        ["proc", "driver", "nvidia", "gpus", _, "numa_status"] => Some(true),
        _ => None,
    }
}

/// Splits an archive path into the top directory and the rest. Archives
/// of a tree's root itself (`sys/...` at the top) have no top directory.
fn split_top(path: &str) -> Option<(Option<String>, Vec<&str>)> {
    let comps: Vec<&str> = path.split('/').filter(|c| !c.is_empty() && *c != ".").collect();
    if comps.contains(&"..") {
        return None;
    }
    match comps.split_first() {
        Some((first, _)) if *first == "sys" || *first == "proc" => Some((None, comps)),
        Some((first, rest)) => Some((Some((*first).to_string()), rest.to_vec())),
        None => None,
    }
}

fn bad(found: impl AsRef<str>) -> ParseError {
    ParseError::bad(FIELD, EXPECTED, found.as_ref())
}

fn io(source: std::io::Error) -> ParseError {
    ParseError::Io { path: FIELD.to_string(), source }
}

impl MemTree {
    /// Loads a tarball file (`.tar` or `.tar.bz2`, told apart by content).
    pub fn from_tarball_file(path: &Path) -> Result<MemTree, ReadError> {
        let name = path.display().to_string();
        let file = std::fs::File::open(path).map_err(|e| ReadError::io(&name, e))?;
        MemTree::from_tarball(file).map_err(|e| ReadError::new(&name, e))
    }

    /// Loads a tarball from a reader; bzip2 compression is recognised by
    /// its magic bytes.
    pub fn from_tarball(reader: impl Read) -> Result<MemTree, ParseError> {
        let mut buffered = BufReader::new(reader);
        let head = buffered.fill_buf().map_err(io)?;
        if head.starts_with(b"BZh") {
            let decoder = bzip2::read::MultiBzDecoder::new(buffered);
            load(Capped { inner: decoder, left: MAX_SCANNED_BYTES })
        } else if head.starts_with(&[0x1f, 0x8b]) || head.starts_with(&[0xfd, b'7', b'z', b'X', b'Z']) {
            Err(bad("a gzip or xz archive (recompress it with bzip2 or unpack it)"))
        } else {
            load(Capped { inner: buffered, left: MAX_SCANNED_BYTES })
        }
    }
}

fn load(reader: impl Read) -> Result<MemTree, ParseError> {
    let mut archive = tar::Archive::new(reader);
    let mut tree = MemTree::new();
    let mut top: Option<Option<String>> = None;
    let (mut stored_bytes, mut stored_entries, mut seen) = (0u64, 0usize, 0usize);
    for entry in archive.entries().map_err(io)? {
        let mut entry = entry.map_err(io)?;
        seen += 1;
        let raw_path = entry.path().map_err(io)?.to_string_lossy().into_owned();
        let Some((this_top, rel)) = split_top(&raw_path) else {
            continue;
        };
        match &top {
            None => top = Some(this_top.clone()),
            Some(t) if *t != this_top => {
                return Err(bad(format!(
                    "several top directories ({} and {})",
                    t.as_deref().unwrap_or("/"),
                    this_top.as_deref().unwrap_or("/")
                )));
            }
            Some(_) => {}
        }
        let Some(keep_contents) = wanted(&rel) else {
            continue;
        };
        let tree_path = format!("/{}", rel.join("/"));
        stored_entries += 1;
        if stored_entries > MAX_STORED_ENTRIES {
            return Err(bad("more than a million sysfs entries"));
        }
        let kind = entry.header().entry_type();
        if kind.is_dir() {
            tree.insert_dir(&tree_path);
        } else if kind.is_symlink() || kind.is_hard_link() {
            let target = entry.link_name().map_err(io)?.map(|t| t.to_string_lossy().into_owned());
            let Some(target) = target else { continue };
            if kind.is_hard_link() {
                // Hard links name another archive member, not a path
                // relative to the link.
                if let Some((_, t)) = split_top(&target) {
                    tree.insert_link(&tree_path, &format!("/{}", t.join("/")));
                }
            } else {
                tree.insert_link(&tree_path, &target);
            }
        } else if kind.is_file() && keep_contents {
            let size = entry.header().size().map_err(io)?;
            if size > MAX_FILE_BYTES {
                return Err(ParseError::bad(tree_path, "a file under 16 MiB", &format!("{size} bytes")));
            }
            stored_bytes += size;
            if stored_bytes > MAX_STORED_BYTES {
                return Err(bad("more than 128 MiB of sysfs files"));
            }
            let mut contents = Vec::with_capacity(usize::try_from(size).unwrap_or(0));
            entry.read_to_end(&mut contents).map_err(io)?;
            tree.insert_file(&tree_path, contents);
        }
    }
    if seen == 0 {
        return Err(bad("an empty archive"));
    }
    if !tree.exists("/sys") {
        return Err(bad("an archive without a sys/ directory"));
    }
    Ok(tree)
}
