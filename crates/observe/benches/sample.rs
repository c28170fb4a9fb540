//! How long one `numa_maps` parse and one whole-host sample take on real
//! captures (a QEMU process's 347-mapping `numa_maps`; the recorded host
//! tree with three QEMU processes): `top` and the exporter do this every
//! interval for every VM.

use criterion::{criterion_group, criterion_main, Criterion};
use numaplace_observe::sample::{Options, Sampler};
use numaplace_observe::{numa_maps, FsSource};
use std::path::PathBuf;

fn data(rel: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/data").join(rel)
}

fn bench(c: &mut Criterion) {
    let text = std::fs::read_to_string(data("host-qemu/proc/32218/numa_maps")).expect("sample");
    c.bench_function("parse qemu numa_maps (347 mappings)", |b| {
        b.iter(|| numa_maps::bytes_per_node(&numa_maps::parse(std::hint::black_box(&text)).expect("parse")))
    });
    let mut sampler = Sampler::new(FsSource::new(data("host-qemu")), Options::default());
    c.bench_function("sample recorded host with 3 VMs", |b| b.iter(|| sampler.sample().expect("sample")));
}

criterion_group!(benches, bench);
criterion_main!(benches);
