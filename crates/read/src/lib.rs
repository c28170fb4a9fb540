//! Readers that turn what operators have (a live host, a copy of its
//! sysfs, `lstopo` XML, `virsh capabilities`, a few typed words, numaplace's
//! own JSON) into one [`Topology`].
//!
//! Each format has a pure parser over text or an in-memory tree; the only
//! file-system contact is in [`read_source`] and [`sysfs::DirTree`], so the
//! parsers are tested and fuzzed on captured real data.

pub mod error;
pub mod hwloc;
pub mod json;
mod kinds;
pub mod libvirt;
pub mod synthetic;
pub mod sysfs;

pub use error::{ParseError, ReadError};
use numaplace_topo::Topology;
use std::io::Read;
use std::path::Path;

/// The kinds of source a topology can be read from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SourceKind {
    /// A sysfs/procfs tree: a directory (`/` for the live host) or a
    /// tarball of one, plain or compressed with gzip, xz or bzip2 (told
    /// apart by content, not by name).
    Sysfs,
    /// hwloc XML, v1 or v2 (`lstopo --of xml`).
    Hwloc,
    /// libvirt capabilities XML (`virsh capabilities`).
    Libvirt,
    /// A synthetic description (`2 sockets x 8 cores x 2 threads, ...`).
    Synthetic,
    /// numaplace's own JSON (`numaplace topology --format json`).
    Json,
}

impl SourceKind {
    /// The prefix that forces this kind (`hwloc:FILE`).
    pub fn prefix(&self) -> &'static str {
        match self {
            SourceKind::Sysfs => "sysfs",
            SourceKind::Hwloc => "hwloc",
            SourceKind::Libvirt => "libvirt",
            SourceKind::Synthetic => "synthetic",
            SourceKind::Json => "json",
        }
    }

    fn from_prefix(p: &str) -> Option<SourceKind> {
        [SourceKind::Sysfs, SourceKind::Hwloc, SourceKind::Libvirt, SourceKind::Synthetic, SourceKind::Json]
            .into_iter()
            .find(|k| k.prefix() == p)
    }
}

/// Guesses the kind of a file's text from its first bytes.
pub fn detect_text(text: &str) -> Option<SourceKind> {
    let head: String = text.trim_start_matches('\u{feff}').chars().take(4096).collect();
    let head = head.trim_start();
    if head.starts_with('{') {
        return Some(SourceKind::Json);
    }
    if head.starts_with('<') {
        if head.contains("<topology") && !head.contains("<capabilities") {
            return Some(SourceKind::Hwloc);
        }
        if head.contains("<capabilities") || head.contains("<host") {
            return Some(SourceKind::Libvirt);
        }
        return None;
    }
    None
}

/// A host as a source describes it: its topology and, when a topology JSON
/// carries them, its reservations and shared pool.
#[derive(Clone, Debug)]
pub struct Host {
    /// The topology.
    pub topology: Topology,
    /// The document's `reserved` object, if any.
    pub reserved: Option<numaplace_wire::topology::ReservedDoc>,
}

impl From<Topology> for Host {
    fn from(topology: Topology) -> Host {
        Host { topology, reserved: None }
    }
}

/// Reads a topology from a source as the command line names it:
/// `KIND:REST` forces a kind (`hwloc:box.xml`, `synthetic:2 sockets x 8
/// cores`); otherwise a directory is a sysfs tree, a file whose first bytes
/// are gzip, xz or bzip2 data or a tar header is a sysfs tree in a tarball
/// (whatever its name), another file is sniffed as text, and text that is
/// no file but reads as a synthetic description is one.
pub fn read_source(source: &str) -> Result<Topology, ReadError> {
    read_host(source).map(|h| h.topology)
}

/// [`read_source`], keeping the reservations a topology JSON carries: the
/// source is read once, so a pipe works as well as a file.
pub fn read_host(source: &str) -> Result<Host, ReadError> {
    if let Some((prefix, rest)) = source.split_once(':') {
        if let Some(kind) = SourceKind::from_prefix(prefix) {
            return read_as(kind, rest);
        }
    }
    let path = Path::new(source);
    if path.is_dir() {
        return read_as(SourceKind::Sysfs, source);
    }
    if !path.exists() {
        if synthetic::looks_synthetic(source) {
            return read_as(SourceKind::Synthetic, source);
        }
        return Err(ReadError::new(source, ParseError::NotFound));
    }
    // Opened once and sniffed from the stream, so a pipe
    // (`--from <(virsh capabilities)`) reads as well as a file.
    let mut file = std::fs::File::open(path).map_err(|e| ReadError::io(source, e))?;
    let mut bytes = Vec::new();
    (&mut file).take(512).read_to_end(&mut bytes).map_err(|e| ReadError::io(source, e))?;
    if sysfs::MemTree::is_tarball(&bytes) {
        return read_tarball(source, std::io::Cursor::new(bytes).chain(file)).map(Host::from);
    }
    file.read_to_end(&mut bytes).map_err(|e| ReadError::io(source, e))?;
    let text = utf8(source, bytes)?;
    match detect_text(&text) {
        Some(kind) => parse_host(kind, source, &text),
        None => Err(ReadError::new(source, ParseError::UnknownFormat)),
    }
}

/// A sysfs tarball, named after its file without the archive extension.
/// Reads a host from bytes already in memory (an upload), detected as
/// [`read_host`] detects a file's content: a sysfs tarball, hwloc XML,
/// libvirt capabilities or numaplace's topology JSON (with its
/// `reserved`). `name` names the source in errors and is the host's name
/// when the content gives none.
pub fn read_bytes(name: &str, bytes: Vec<u8>) -> Result<Host, ReadError> {
    if sysfs::MemTree::is_tarball(&bytes) {
        return read_tarball(name, std::io::Cursor::new(bytes)).map(Host::from);
    }
    let text = utf8(name, bytes)?;
    match detect_text(&text) {
        Some(kind) => parse_host(kind, name, &text),
        None => Err(ReadError::new(name, ParseError::UnknownFormat)),
    }
}

fn read_tarball(source: &str, reader: impl Read) -> Result<Topology, ReadError> {
    let tree = sysfs::MemTree::from_tarball(reader).map_err(|e| ReadError::new(source, e))?;
    let topology = sysfs::read_tree(&tree).map_err(|e| e.in_file(source))?;
    let exts = [".tar.bz2", ".tar.gz", ".tar.xz", ".tbz2", ".tbz", ".tgz", ".txz", ".tar"];
    let name = exts.iter().find_map(|ext| source.strip_suffix(ext)).unwrap_or(source);
    Ok(with_default_name(topology, name))
}

fn read_text(path: &str) -> Result<String, ReadError> {
    let bytes = std::fs::read(path).map_err(|e| ReadError::io(path, e))?;
    utf8(path, bytes)
}

fn utf8(path: &str, bytes: Vec<u8>) -> Result<String, ReadError> {
    String::from_utf8(bytes)
        .map_err(|e| ReadError::new(path, ParseError::NotUtf8 { offset: e.utf8_error().valid_up_to() }))
}

fn read_as(kind: SourceKind, rest: &str) -> Result<Host, ReadError> {
    match kind {
        // Anything but a directory is taken for a tarball, which says what
        // it found when it is none.
        SourceKind::Sysfs if !Path::new(rest).is_dir() => {
            let file = std::fs::File::open(rest).map_err(|e| ReadError::io(rest, e))?;
            read_tarball(rest, file).map(Host::from)
        }
        SourceKind::Sysfs => {
            let topology = sysfs::read_tree(&sysfs::DirTree::new(rest)).map_err(|e| e.in_file(rest))?;
            Ok(with_default_name(topology, rest.trim_end_matches('/')).into())
        }
        SourceKind::Synthetic => {
            synthetic::parse(rest).map(Host::from).map_err(|e| ReadError::new("synthetic description", e))
        }
        _ => {
            let text = read_text(rest)?;
            parse_host(kind, rest, &text)
        }
    }
}

/// Parses text of a known kind; `name` is used in errors and as the
/// topology's name when the text carries none.
pub fn parse_text(kind: SourceKind, name: &str, text: &str) -> Result<Topology, ReadError> {
    parse_host(kind, name, text).map(|h| h.topology)
}

/// [`parse_text`], keeping a topology JSON's reservations.
fn parse_host(kind: SourceKind, name: &str, text: &str) -> Result<Host, ReadError> {
    let result = match kind {
        SourceKind::Hwloc => hwloc::parse(text).map(Host::from),
        SourceKind::Libvirt => libvirt::parse(text).map(Host::from),
        SourceKind::Synthetic => synthetic::parse(text).map(Host::from),
        SourceKind::Json => json::parse_with_reserved(text).map(|(topology, reserved)| Host { topology, reserved }),
        SourceKind::Sysfs => Err(ParseError::UnknownFormat),
    };
    result
        .map(|h| Host { topology: with_default_name(h.topology, name), reserved: h.reserved })
        .map_err(|e| ReadError::new(name, e))
}

fn with_default_name(t: Topology, name: &str) -> Topology {
    if t.name().is_some() {
        return t;
    }
    let mut parts = t.to_parts();
    let base = Path::new(name).file_name().and_then(|s| s.to_str()).unwrap_or(name);
    parts.name = Some(base.to_string());
    // Re-checking data that was already checked cannot fail.
    Topology::from_parts(parts).unwrap_or(t)
}

/// Reads the live host through `/sys` and `/proc`.
pub fn read_live() -> Result<Topology, ReadError> {
    let topology = sysfs::read_tree(&sysfs::DirTree::new("/")).map_err(|e| e.in_file("/sys"))?;
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
    let host = host.trim();
    Ok(if host.is_empty() { topology } else { with_default_name(topology, host) })
}
