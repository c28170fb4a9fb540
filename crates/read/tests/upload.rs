//! `read_bytes`, the reader of topologies uploaded to the fleet service:
//! every format it detects, and hostile bytes (arbitrary, truncated,
//! mutated, huge numbers) give an error naming the upload, never a panic.
#![allow(clippy::unwrap_used)]

use numaplace_read::read_bytes;
use proptest::prelude::*;

fn fixture(path: &str) -> Vec<u8> {
    std::fs::read(format!("{}/../../fixtures/topologies/{path}", env!("CARGO_MANIFEST_DIR"))).unwrap()
}

#[test]
fn every_format_reads_from_bytes() {
    let xml = read_bytes("h1", fixture("mpibind/epyc-corona.xml")).unwrap();
    assert_eq!(xml.topology.nodes().len(), 8);
    let tarball = read_bytes("h2", fixture("hwloc/linux/32intel64-2p8co2t+8ve.tar.bz2")).unwrap();
    assert_eq!(tarball.topology.pu_count(), 32);
    let json = read_bytes("h3", fixture("derived/2n8c2t-memoryless-node1.json")).unwrap();
    assert_eq!(json.topology.nodes().len(), 2);
    let text = numaplace_read::json::to_string(&xml.topology);
    let again = read_bytes("h4", text.into_bytes()).unwrap();
    assert_eq!(again.topology, xml.topology);
    let e = read_bytes("upload", b"hello".to_vec()).unwrap_err().to_string();
    assert!(e.starts_with("upload"), "{e}");
    let e = read_bytes("upload", vec![0xff, 0xfe, b'<']).unwrap_err().to_string();
    assert!(e.contains("upload"), "{e}");
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn arbitrary_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..512)) {
        let _ = read_bytes("upload", bytes);
    }

    #[test]
    fn truncated_uploads_never_panic(which in 0..2usize, at in any::<prop::sample::Index>()) {
        let bytes = fixture(["hwloc/linux/32intel64-2p8co2t+8ve.tar.bz2", "derived/2n8c2t-memoryless-node1.json"][which]);
        let cut = at.index(bytes.len());
        let _ = read_bytes("upload", bytes[..cut].to_vec());
    }

    /// Every number of a topology JSON replaced, one at a time, by a huge
    /// or odd one.
    #[test]
    fn huge_numbers_in_a_json_upload_never_panic(
        which in any::<prop::sample::Index>(),
        value in prop::sample::select(vec!["18446744073709551615", "4294967296", "-1", "1e308", "0", "99999999999"]),
    ) {
        let text = String::from_utf8(fixture("derived/2n8c2t-memoryless-node1.json")).unwrap();
        let digits: Vec<(usize, usize)> = {
            let b = text.as_bytes();
            let mut out = Vec::new();
            let mut i = 0;
            while i < b.len() {
                if b[i].is_ascii_digit() && (i == 0 || !b[i - 1].is_ascii_alphanumeric()) {
                    let start = i;
                    while i < b.len() && b[i].is_ascii_digit() {
                        i += 1;
                    }
                    out.push((start, i));
                } else {
                    i += 1;
                }
            }
            out
        };
        let (s, e) = digits[which.index(digits.len())];
        let mutated = format!("{}{}{}", &text[..s], value, &text[e..]);
        let _ = read_bytes("upload", mutated.into_bytes());
    }
}
