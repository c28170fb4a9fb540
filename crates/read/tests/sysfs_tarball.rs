//! The sysfs reader on tarballs: every compression, cut and corrupt
//! files, decompression bombs, old tar formats, and damaged or random
//! input (the directory tree and hand-built trees are `tests/sysfs.rs`).

use numaplace_read::sysfs::{read_tree, MemTree, Tree};
use numaplace_topo::Topology;
use proptest::prelude::*;
use std::path::PathBuf;
use std::sync::OnceLock;

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/topologies/hwloc").join(name)
}

fn tar_of(entries: &[(&str, &str)]) -> Vec<u8> {
    let mut builder = tar::Builder::new(Vec::new());
    for (path, contents) in entries {
        let mut header = tar::Header::new_gnu();
        header.set_size(contents.len() as u64);
        header.set_mode(0o644);
        header.set_cksum();
        builder.append_data(&mut header, path, contents.as_bytes()).expect("append");
    }
    builder.into_inner().expect("tar")
}

#[test]
fn tarballs_are_checked() {
    let good = tar_of(&[("box/sys/devices/system/cpu/online", "0\n"), ("box/proc/meminfo", "MemTotal: 4 kB\n")]);
    let tree = MemTree::from_tarball(&good[..]).expect("plain tar loads");
    assert_eq!(tree.read("/proc/meminfo").expect("reads").as_deref(), Some("MemTotal: 4 kB\n"));
    // Unused subtrees are not kept.
    let extra = tar_of(&[("box/sys/devices/system/cpu/online", "0\n"), ("box/sys/firmware/acpi/tables/DSDT", "x")]);
    assert_eq!(MemTree::from_tarball(&extra[..]).expect("loads").files(), ["/sys/devices/system/cpu/online"]);

    let two = tar_of(&[("a/sys/devices/system/cpu/online", "0\n"), ("b/sys/devices/system/cpu/online", "0\n")]);
    let msg = MemTree::from_tarball(&two[..]).expect_err("two trees").to_string();
    assert!(msg.contains("several top directories"), "{msg}");
    let gzip_header_only = [0x1f, 0x8b, 8, 0, 0, 0, 0, 0];
    let msg = MemTree::from_tarball(&gzip_header_only[..]).expect_err("cut gzip").to_string();
    assert!(msg.contains("gzip data is corrupt or cut short"), "{msg}");
    assert!(MemTree::from_tarball(&[][..]).is_err());
    let no_sys = tar_of(&[("box/etc/hostname", "x\n")]);
    assert!(MemTree::from_tarball(&no_sys[..]).is_err());
}

/// A multi-node machine (8 nodes, 64 PUs, one node with half the memory).
const MULTI_NODE: &str = "linux/64amd64-4s2n4ca2co.tar.bz2";

/// The plain tar inside a fixture, unpacked here so the other forms are
/// made from it by the test itself, with no outside tool.
fn plain_tar(name: &str) -> Vec<u8> {
    let mut tar = Vec::new();
    let file = std::fs::File::open(fixture(name)).expect("fixture");
    std::io::Read::read_to_end(&mut bzip2::read::MultiBzDecoder::new(file), &mut tar).expect("bzip2");
    tar
}

fn gzip(bytes: &[u8]) -> Vec<u8> {
    let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    std::io::Write::write_all(&mut encoder, bytes).expect("gzip");
    encoder.finish().expect("gzip")
}

fn xz(bytes: &[u8]) -> Vec<u8> {
    let options = lzma_rust2::XzOptions::with_preset(6);
    let mut encoder = lzma_rust2::XzWriter::new(Vec::new(), options).expect("xz");
    std::io::Write::write_all(&mut encoder, bytes).expect("xz");
    encoder.finish().expect("xz")
}

/// A fresh directory for files a test writes, removed when dropped.
struct Scratch(PathBuf);

impl Scratch {
    fn new(test: &str) -> Scratch {
        let dir = std::env::temp_dir().join(format!("numaplace-tarball-test-{}-{test}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("temp dir");
        Scratch(dir)
    }

    /// Writes a file and returns its path as the command line would name it.
    fn write(&self, name: &str, bytes: &[u8]) -> String {
        let path = self.0.join(name);
        std::fs::write(&path, bytes).expect("write");
        path.to_str().expect("UTF-8 temp dir").to_string()
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The topology without its name, which comes from the file name.
fn unnamed(topology: &Topology) -> numaplace_topo::Parts {
    let mut parts = topology.to_parts();
    parts.name = None;
    parts
}

#[test]
fn every_compression_reads_the_same_topology_whatever_the_file_name() {
    let bz2_path = fixture(MULTI_NODE);
    let expected = numaplace_read::read_source(bz2_path.to_str().expect("UTF-8 path")).expect("bz2 reads");
    assert_eq!((expected.nodes().len(), expected.pu_count()), (8, 64));
    assert!(expected.nodes()[5].memory_bytes < expected.nodes()[4].memory_bytes, "node 5 has half the memory");

    let tar = plain_tar(MULTI_NODE);
    let (gz, xz) = (gzip(&tar), xz(&tar));
    let bz2 = std::fs::read(&bz2_path).expect("fixture");
    let scratch = Scratch::new("forms");
    let files = [
        ("host.tar", &tar),
        ("host.tar.gz", &gz),
        ("host.tgz", &gz),
        ("host.tar.xz", &xz),
        // Names that lie or say nothing: content decides.
        ("plain-named.tar.gz", &tar),
        ("gzip-named.tar.bz2", &gz),
        ("xz-named.tar.gz", &xz),
        ("bzip2-named.tar.xz", &bz2),
        ("gzip-no-extension", &gz),
        ("xz-no-extension", &xz),
    ];
    for (name, bytes) in files {
        let path = scratch.write(name, bytes);
        let topology = numaplace_read::read_source(&path).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(unnamed(&topology), unnamed(&expected), "{name}");
        let forced = numaplace_read::read_source(&format!("sysfs:{path}")).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(unnamed(&forced), unnamed(&expected), "sysfs:{name}");
    }
    // The archive extension is not part of the machine's name.
    let named = numaplace_read::read_source(&scratch.write("box7.tar.xz", &xz)).expect("reads");
    assert_eq!(named.name(), Some("box7"));
}

#[test]
fn a_cut_or_corrupt_compressed_tarball_is_an_error_naming_file_and_compression() {
    let tar = plain_tar(MULTI_NODE);
    let scratch = Scratch::new("corrupt");
    for (kind, packed) in [("gzip", gzip(&tar)), ("xz", xz(&tar))] {
        let cut = scratch.write(&format!("cut-{kind}.tar.gz"), &packed[..packed.len() / 2]);
        let msg = numaplace_read::read_source(&cut).expect_err("cut").to_string();
        assert!(msg.starts_with(&cut), "{msg}");
        assert!(msg.contains(&format!("{kind} data is corrupt or cut short")), "{msg}");

        // Damage near the end, where most of the archive has been read:
        // the decoder's own checks (CRC, index) must catch what the tar
        // reader would not.
        let mut damaged = packed.clone();
        let at = damaged.len() - 40;
        damaged[at] ^= 0x55;
        let path = scratch.write(&format!("damaged-{kind}.tar.gz"), &damaged);
        let msg = numaplace_read::read_source(&path).expect_err("damaged").to_string();
        assert!(msg.contains(&format!("{kind} data is corrupt or cut short")), "{msg}");
    }
    // A plain tar cut between two entries still lacks its end-of-archive block.
    let header_at = tar.len() / 2 / 512 * 512;
    let cut = scratch.write("cut.tar", &tar[..header_at]);
    let msg = numaplace_read::read_source(&cut).expect_err("cut tar").to_string();
    assert!(msg.contains("cut short"), "{msg}");
}

/// A tar holding one large file of zeros in a subtree the reader skips:
/// its bytes must still be decompressed to be skipped.
fn zero_bomb_header(size: u64) -> Vec<u8> {
    let mut header = tar::Header::new_gnu();
    header.set_path("box/sys/firmware/blob").expect("path");
    header.set_size(size);
    header.set_mode(0o644);
    header.set_cksum();
    header.as_bytes().to_vec()
}

#[test]
fn a_decompression_bomb_is_refused_at_the_cap() {
    // 2 GiB of zeros as gzip members of 16 MiB each (members may be
    // concatenated, as `pigz` does): 2 MiB on disk, so only the reader's
    // cap of 1 GiB stops it.
    let chunk = gzip(&vec![0u8; 16 << 20]);
    let mut bomb = gzip(&zero_bomb_header(2 << 30));
    for _ in 0..128 {
        bomb.extend_from_slice(&chunk);
    }
    assert!(bomb.len() < 4 << 20);
    let scratch = Scratch::new("bomb");
    let path = scratch.write("bomb.tar.gz", &bomb);
    let msg = numaplace_read::read_source(&path).expect_err("bomb").to_string();
    assert!(msg.starts_with(&path), "{msg}");
    assert!(msg.contains("unpacks to more than 1 GiB"), "{msg}");
}

/// Sets the LZMA2 dictionary size code of an xz stream's first block to
/// `code` (40 is 4 GiB), with the block header's CRC32 fixed to match.
fn with_xz_dictionary(mut xz: Vec<u8>, code: u8) -> Vec<u8> {
    const BLOCK: usize = 12; // after the stream header
    let size = (usize::from(xz[BLOCK]) + 1) * 4;
    let filters = &xz[BLOCK + 2..BLOCK + size - 4];
    // LZMA2's filter id and the length of its one-byte properties.
    let at = BLOCK + 2 + filters.windows(2).position(|w| w == [0x21, 0x01]).expect("LZMA2 filter") + 2;
    xz[at] = code;
    let mut crc = flate2::Crc::new();
    crc.update(&xz[BLOCK..BLOCK + size - 4]);
    xz[BLOCK + size - 4..BLOCK + size].copy_from_slice(&crc.sum().to_le_bytes());
    xz
}

#[test]
fn an_xz_stream_asking_for_a_huge_dictionary_is_refused_before_allocating() {
    let tar = tar_of(&[("box/sys/devices/system/cpu/online", "0\n")]);
    let packed = xz(&tar);
    // The patch itself is sound: a small dictionary still reads.
    assert!(MemTree::from_tarball(&with_xz_dictionary(packed.clone(), 20)[..]).is_ok());
    let msg = MemTree::from_tarball(&with_xz_dictionary(packed, 40)[..]).expect_err("4 GiB").to_string();
    assert!(msg.contains("more than 256 MiB of memory"), "{msg}");
}

#[test]
fn compressed_files_that_are_no_tarball_say_what_they_are() {
    let xml = b"<?xml version=\"1.0\"?>\n<topology version=\"2.0\"></topology>\n";
    let msg = MemTree::from_tarball(&gzip(xml)[..]).expect_err("gzipped XML").to_string();
    assert!(msg.contains("gzip data that holds no tar archive"), "{msg}");
    let msg = MemTree::from_tarball(&xz(b"")[..]).expect_err("empty xz").to_string();
    assert!(msg.contains("xz data that holds nothing"), "{msg}");
    let zstd = [0x28, 0xb5, 0x2f, 0xfd, 0, 0, 0, 0];
    assert!(MemTree::from_tarball(&zstd[..]).expect_err("zstd").to_string().contains("zstd data"));
    let msg = MemTree::from_tarball(&b"MemTotal: 4 kB\n"[..]).expect_err("text").to_string();
    assert!(msg.contains("neither a tar archive nor gzip, xz or bzip2 data"), "{msg}");
    // Sniffing never takes text for an archive.
    assert!(!MemTree::is_tarball(xml));
    assert!(!MemTree::is_tarball(b"{\"nodes\": []}"));
    assert!(MemTree::is_tarball(&tar_of(&[("box/sys/x", "0\n")])[..512]));
}

#[test]
fn an_old_tar_without_the_ustar_magic_is_told_by_its_checksum() {
    let mut tar = tar::Builder::new(Vec::new());
    for (path, contents) in [("box/sys/devices/system/cpu/online", "0\n"), ("box/proc/meminfo", "MemTotal: 4 kB\n")] {
        let mut header = tar::Header::new_old();
        header.set_size(contents.len() as u64);
        header.set_mode(0o644);
        header.set_cksum();
        tar.append_data(&mut header, path, contents.as_bytes()).expect("append");
    }
    let tar = tar.into_inner().expect("tar");
    assert_ne!(&tar[257..262], b"ustar");
    assert!(MemTree::is_tarball(&tar[..512]));
    let tree = MemTree::from_tarball(&gzip(&tar)[..]).expect("v7 tar in gzip loads");
    assert_eq!(tree.read("/sys/devices/system/cpu/online").expect("reads").as_deref(), Some("0\n"));
}

/// A small capture as bzip2 (as shipped), gzip and xz.
fn small_tarballs() -> &'static [Vec<u8>; 3] {
    static BYTES: OnceLock<[Vec<u8>; 3]> = OnceLock::new();
    BYTES.get_or_init(|| {
        let name = "linux/2i386-2c-nohugepage.tar.bz2";
        let tar = plain_tar(name);
        [std::fs::read(fixture(name)).expect("fixture"), gzip(&tar), xz(&tar)]
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

    #[test]
    fn random_bytes_are_no_tarball(bytes in prop::collection::vec(any::<u8>(), 0..2048), magic in 0..4usize) {
        // Behind each compression's magic, so the decoders see garbage too.
        let magics: [&[u8]; 4] = [b"", b"BZh9", &[0x1f, 0x8b, 8], &[0xfd, b'7', b'z', b'X', b'Z', 0]];
        let mut input = magics[magic].to_vec();
        input.extend_from_slice(&bytes);
        prop_assert!(MemTree::from_tarball(&input[..]).is_err());
    }

    #[test]
    fn truncated_tarballs_never_panic(cut in any::<prop::sample::Index>(), packing in 0..3usize) {
        let bytes = &small_tarballs()[packing];
        let end = cut.index(bytes.len());
        if let Ok(tree) = MemTree::from_tarball(&bytes[..end]) {
            let _ = read_tree(&tree);
        }
    }

    #[test]
    fn damaged_compressed_tarballs_never_panic(
        edits in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..4),
        packing in 0..3usize,
    ) {
        let mut bytes = small_tarballs()[packing].clone();
        for (at, byte) in &edits {
            let i = at.index(bytes.len());
            bytes[i] = *byte;
        }
        if let Ok(tree) = MemTree::from_tarball(&bytes[..]) {
            let _ = read_tree(&tree);
        }
    }
}
