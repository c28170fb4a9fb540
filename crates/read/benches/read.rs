//! Reader speed: the largest hwloc XML in the fixtures (24 nodes, 384 PUs)
//! and a real sysfs tree, parsed from memory so disk speed does not count;
//! plus a whole tarball read (decompression included) for scale, as bzip2,
//! gzip and xz.
//!
//! Run: `cargo bench -p numaplace-read --bench read`. Figures go in
//! docs/performance.md.

use criterion::{criterion_group, criterion_main, Criterion};
use numaplace_read::{hwloc, sysfs};
use std::hint::black_box;
use std::io::{Read, Write};
use std::path::PathBuf;

fn fixture(rel: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/topologies").join(rel)
}

fn readers(c: &mut Criterion) {
    let xml = std::fs::read_to_string(fixture("hwloc/xml/192em64t-24n8c2t.xml")).expect("fixture");
    c.bench_function("hwloc xml 24 nodes 384 PUs", |b| b.iter(|| hwloc::parse(black_box(&xml)).expect("parses")));
    let v1 = std::fs::read_to_string(fixture("mpibind/epyc-corona-hwloc1.xml")).expect("fixture");
    c.bench_function("hwloc v1 xml 8 nodes 96 PUs", |b| b.iter(|| hwloc::parse(black_box(&v1)).expect("parses")));
    let tarball = fixture("hwloc/linux/256ia64-64n2s2c.tar.bz2");
    let tree = sysfs::MemTree::from_tarball_file(&tarball).expect("tarball");
    c.bench_function("sysfs tree 64 nodes 256 PUs (in memory)", |b| {
        b.iter(|| sysfs::read_tree(black_box(&tree)).expect("parses"))
    });
    c.bench_function("sysfs tarball 64 nodes 256 PUs (bzip2 + parse)", |b| {
        b.iter(|| {
            let tree = sysfs::MemTree::from_tarball_file(black_box(&tarball)).expect("tarball");
            sysfs::read_tree(&tree).expect("parses")
        })
    });
    // The same tree as gzip and xz (made here from the bzip2 fixture), for
    // the cost of each decoder against bzip2's.
    let mut tar = Vec::new();
    let bz2 = std::fs::File::open(&tarball).expect("fixture");
    bzip2::read::MultiBzDecoder::new(bz2).read_to_end(&mut tar).expect("bzip2");
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    gz.write_all(&tar).expect("gzip");
    let gz = gz.finish().expect("gzip");
    let mut xz = lzma_rust2::XzWriter::new(Vec::new(), lzma_rust2::XzOptions::with_preset(6)).expect("xz");
    xz.write_all(&tar).expect("xz");
    let xz = xz.finish().expect("xz");
    for (label, bytes) in [("gzip", &gz), ("xz", &xz)] {
        c.bench_function(&format!("sysfs tarball 64 nodes 256 PUs ({label} + parse)"), |b| {
            b.iter(|| {
                let tree = sysfs::MemTree::from_tarball(black_box(&bytes[..])).expect("tarball");
                sysfs::read_tree(&tree).expect("parses")
            })
        });
    }
}

criterion_group!(benches, readers);
criterion_main!(benches);
