//! Loading a `hwloc-gather-topology` tarball into a [`MemTree`]: plain
//! tar, or tar compressed with gzip, xz or bzip2, told apart by the first
//! bytes (never by the file name, which archives often outlive).
//!
//! Such tarballs hold `<name>/sys/...` and `<name>/proc/...` (sometimes
//! with a leading `./`). Only the subtrees the reader uses are kept, and
//! every size is capped, so a hostile or corrupt archive ends in an error
//! rather than in exhausted memory: decompressed bytes scanned (whatever
//! the compression), the xz decoder's dictionary, bytes stored, entries
//! stored, and the size of each file.

use super::tree::{MemTree, Tree, MAX_FILE_BYTES};
use crate::{ParseError, ReadError};
use std::io::{BufReader, Cursor, Read};
use std::path::Path;

/// Decompressed bytes scanned before giving up (real trees are < 100 MiB).
const MAX_SCANNED_BYTES: u64 = 1 << 30;
/// File contents kept in memory.
const MAX_STORED_BYTES: u64 = 128 << 20;
/// Entries (files, directories, links) kept in memory.
const MAX_STORED_ENTRIES: usize = 1 << 20;
/// Memory the xz decoder may take, in MiB: the dictionary size is read from
/// the stream, and a forged header could ask for 4 GiB. `xz -9` needs 65 MiB.
const MAX_XZ_MEMORY_MIB: u32 = 256;
/// A tar header block, which is also as much as sniffing needs.
const BLOCK: u64 = 512;

/// Names of files kept inside PCI device directories; the rest of a
/// device's attributes (config space, resources) is of no use here.
const PCI_FILES: [&str; 6] = ["class", "vendor", "device", "numa_node", "local_cpulist", "local_cpus"];

const FIELD: &str = "tarball";
const EXPECTED: &str = "a sysfs tree (hwloc-gather-topology) as .tar, .tar.gz, .tar.xz or .tar.bz2";

/// How an archive is packed, from its magic bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Packing {
    Tar,
    Gzip,
    Xz,
    Bzip2,
    /// Recognised only to name it in the error: hwloc-gather-topology does
    /// not make it, and a decoder is one more dependency.
    Zstd,
}

impl Packing {
    fn sniff(head: &[u8]) -> Option<Packing> {
        if head.starts_with(&[0x1f, 0x8b]) {
            Some(Packing::Gzip)
        } else if head.starts_with(&[0xfd, b'7', b'z', b'X', b'Z', 0]) {
            Some(Packing::Xz)
        } else if head.len() >= 4 && head.starts_with(b"BZh") && (b'1'..=b'9').contains(&head[3]) {
            Some(Packing::Bzip2)
        } else if head.starts_with(&[0x28, 0xb5, 0x2f, 0xfd]) {
            Some(Packing::Zstd)
        } else if is_tar_header(head) {
            Some(Packing::Tar)
        } else {
            None
        }
    }

    fn name(self) -> &'static str {
        match self {
            Packing::Tar => "tar",
            Packing::Gzip => "gzip",
            Packing::Xz => "xz",
            Packing::Bzip2 => "bzip2",
            Packing::Zstd => "zstd",
        }
    }
}

/// Whether a block is a tar header: POSIX and GNU headers say `ustar` at
/// offset 257; older (v7) ones have no magic, so their checksum decides.
fn is_tar_header(block: &[u8]) -> bool {
    let Some(block) = block.get(..BLOCK as usize) else { return false };
    if &block[257..262] == b"ustar" {
        return true;
    }
    let field = &block[148..156];
    let digits: Vec<u8> = field.iter().copied().filter(|b| *b != 0 && *b != b' ').collect();
    let Some(stored) = std::str::from_utf8(&digits).ok().and_then(|s| u32::from_str_radix(s, 8).ok()) else {
        return false;
    };
    // The checksum is the byte sum with its own field counted as spaces.
    let sum: u32 = block[..148].iter().chain(&block[156..]).map(|b| u32::from(*b)).sum::<u32>() + 8 * u32::from(b' ');
    block[0] != 0 && stored == sum
}

/// What a start that is no tar header is, for an error; `inside` is the
/// compression it came out of.
fn not_tar(head: &[u8], inside: Option<Packing>) -> String {
    let empty_tar = head.len() == BLOCK as usize && head.iter().all(|b| *b == 0);
    match (inside, head.is_empty(), empty_tar) {
        (None, true, _) => "an empty file".to_string(),
        (None, _, true) => "an empty tar archive".to_string(),
        (None, ..) => "neither a tar archive nor gzip, xz or bzip2 data".to_string(),
        (Some(p), true, _) => format!("{} data that holds nothing", p.name()),
        (Some(p), _, true) => format!("{} data that holds an empty tar archive", p.name()),
        (Some(p), ..) => format!("{} data that holds no tar archive", p.name()),
    }
}

/// Up to one block from the start of a stream.
fn read_head(reader: &mut impl Read) -> std::io::Result<Vec<u8>> {
    let mut head = Vec::with_capacity(BLOCK as usize);
    reader.take(BLOCK).read_to_end(&mut head)?;
    Ok(head)
}

/// A decompressor whose errors say which compression failed, and which
/// fails the same way again once it has failed (decoders are not promised
/// to be sound after an error).
struct Decoded<R> {
    inner: R,
    packing: Packing,
    failed: Option<(std::io::ErrorKind, String)>,
}

impl<R: Read> Read for Decoded<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        if let Some((kind, message)) = &self.failed {
            return Err(std::io::Error::new(*kind, message.clone()));
        }
        match self.inner.read(buf) {
            Err(e) if e.kind() != std::io::ErrorKind::Interrupted && self.packing != Packing::Tar => {
                let message = if self.packing == Packing::Xz && e.kind() == std::io::ErrorKind::OutOfMemory {
                    format!("xz data that needs more than {MAX_XZ_MEMORY_MIB} MiB of memory to unpack")
                } else {
                    format!("{} data is corrupt or cut short ({e})", self.packing.name())
                };
                self.failed = Some((e.kind(), message.clone()));
                Err(std::io::Error::new(e.kind(), message))
            }
            other => other,
        }
    }
}

/// Counts what the decompressor hands out and stops at the cap.
struct Capped<R> {
    inner: R,
    left: u64,
}

impl<R: Read> Read for Capped<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        if self.left == 0 {
            return Err(std::io::Error::other(
                "the archive unpacks to more than 1 GiB, the limit for a sysfs tree (real ones are under 100 MiB)",
            ));
        }
        let max = buf.len().min(usize::try_from(self.left).unwrap_or(usize::MAX));
        let n = self.inner.read(&mut buf[..max])?;
        self.left -= n as u64;
        Ok(n)
    }
}

/// Makes the end of the data an error for the tar reader. It stops at the
/// end-of-archive block without reading further, so reaching the end means
/// that block is missing: the archive was cut short (between two entries,
/// the tar reader would otherwise take the end for a complete archive, and a
/// plain tar has no checksum that would tell).
struct Ends<R>(R);

impl<R: Read> Read for Ends<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        match self.0.read(buf)? {
            0 if !buf.is_empty() => Err(std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                "the archive is cut short (it ends before its end-of-archive block)",
            )),
            n => Ok(n),
        }
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
        // Memory tiers, and DAX devices with the node each is onlined as
        // (issue 48: what kind of memory a CPU-less node holds).
        ["sys", "devices", "virtual"] => Some(false),
        ["sys", "devices", "virtual", "memory_tiering", ..] => Some(true),
        ["sys", "bus", "dax"] | ["sys", "bus", "dax", "devices"] | ["sys", "bus", "dax", "devices", _] => Some(false),
        ["sys", "devices", .., dax, "target_node"] if dax.starts_with("dax") => Some(true),
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
    /// Whether the first bytes of a file (its first 512, or all of a
    /// shorter file) start an archive [`MemTree::from_tarball`] reads: gzip,
    /// xz or bzip2 data, or a tar header. zstd data counts too, so that
    /// reading it says what it is rather than that it is not text.
    pub fn is_tarball(head: &[u8]) -> bool {
        Packing::sniff(head).is_some()
    }

    /// Loads a tarball file (plain, gzip, xz or bzip2, told apart by content).
    pub fn from_tarball_file(path: &Path) -> Result<MemTree, ReadError> {
        let name = path.display().to_string();
        let file = std::fs::File::open(path).map_err(|e| ReadError::io(&name, e))?;
        MemTree::from_tarball(file).map_err(|e| ReadError::new(&name, e))
    }

    /// Loads a tarball from a reader; the compression (none, gzip, xz or
    /// bzip2, several concatenated streams included) is recognised by its
    /// magic bytes.
    pub fn from_tarball(mut reader: impl Read) -> Result<MemTree, ParseError> {
        let head = read_head(&mut reader).map_err(io)?;
        let packing = Packing::sniff(&head);
        let not_tar = not_tar(&head, None);
        let input = BufReader::new(Cursor::new(head).chain(reader));
        match packing {
            Some(Packing::Tar) => load(Packing::Tar, input),
            Some(Packing::Gzip) => load(Packing::Gzip, flate2::bufread::MultiGzDecoder::new(input)),
            Some(Packing::Xz) => {
                let limit_kib = MAX_XZ_MEMORY_MIB << 10;
                load(Packing::Xz, lzma_rust2::XzReader::new_mem_limit(input, true, limit_kib))
            }
            Some(Packing::Bzip2) => load(Packing::Bzip2, bzip2::bufread::MultiBzDecoder::new(input)),
            Some(Packing::Zstd) => Err(bad("zstd data (unpack it, or recompress it with gzip, xz or bzip2)")),
            None => Err(bad(not_tar)),
        }
    }
}

fn load(packing: Packing, decoder: impl Read) -> Result<MemTree, ParseError> {
    let mut data = Capped { inner: Decoded { inner: decoder, packing, failed: None }, left: MAX_SCANNED_BYTES };
    // What was compressed may be something else than a tar archive (an
    // `lstopo` XML gzipped, say): better said than left to the tar reader.
    let head = read_head(&mut data).map_err(io)?;
    if !is_tar_header(&head) {
        return Err(bad(not_tar(&head, Some(packing))));
    }
    let mut archive = tar::Archive::new(Ends(Cursor::new(head).chain(data)));
    let mut tree = MemTree::new();
    let mut top: Option<Option<String>> = None;
    let (mut stored_bytes, mut stored_entries) = (0u64, 0usize);
    for entry in archive.entries().map_err(io)? {
        let mut entry = entry.map_err(io)?;
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
        } else if (kind.is_file() || kind.is_gnu_sparse()) && keep_contents {
            // The entry's size, not the header's: a sparse file's holes or
            // a pax size make it larger than the bytes the archive holds.
            let size = entry.size();
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
    // The rest (the second end block, padding) is read through so that the
    // decompressor checks the whole stream's CRC or index: damage that
    // still decompresses would otherwise go unnoticed. The cap still holds.
    std::io::copy(&mut archive.into_inner().0, &mut std::io::sink()).map_err(io)?;
    if !tree.exists("/sys") {
        return Err(bad("an archive without a sys/ directory"));
    }
    Ok(tree)
}
