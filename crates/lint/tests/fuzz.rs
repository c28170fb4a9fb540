//! Arbitrary input and mutated fixtures never panic the parsers, the
//! rules or the fixes; malformed files give an error naming a line.

mod common;

use common::*;
use numaplace_lint::{fix, held, host_state, lint, parse_file, FixOptions, VmError};
use numaplace_plan::Reservations;
use proptest::prelude::*;

const FIXTURES: [&str; 8] = [
    "hotadd-16vcpu-200g.xml",
    "sockets-3x8-two-cells.xml",
    "hugepages-1g.xml",
    "device-remote.xml",
    "esxi-maxper-socket-span.vmx",
    "device-remote.vmx",
    "request-hotadd.json",
    "partial-pinning.xml",
];

fn fixture_bytes(name: &str) -> Vec<u8> {
    std::fs::read(format!("{}/tests/data/{name}", env!("CARGO_MANIFEST_DIR"))).unwrap_or_default()
}

/// Parses, lints and fixes whatever parses; only panics matter.
fn exercise(name: &str, bytes: &[u8]) {
    if let Ok(file) = parse_file(name, bytes) {
        let host = esxi_2x12();
        let files = vec![file];
        let _ = lint(&files, &host);
        let _ = fix(&files[0], &files, &host, FixOptions::default());
        // As a domain already on the host (`--state DIR`), twice over, so
        // the second copy collides with the first.
        if let Ok((held, _)) = held(&files[0], &host) {
            let mut twice = held.clone();
            for mut h in held {
                h.placement.vm.push_str("-again");
                twice.push(h);
            }
            let _ = host_state(&host, Reservations::default(), twice);
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn arbitrary_text_never_panics(text in "\\PC{0,400}", ext in prop::sample::select(vec!["xml", "vmx", "json", "txt"])) {
        exercise(&format!("f.{ext}"), text.as_bytes());
    }

    #[test]
    fn arbitrary_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..300)) {
        exercise("f.vmx", &bytes);
        exercise("f.xml", &bytes);
    }

    #[test]
    fn mutated_fixtures_never_panic(
        which in 0..FIXTURES.len(),
        edits in prop::collection::vec((any::<prop::sample::Index>(), 0u8..3, "[0-9<>='\"/ a-z\\-,^]{0,4}"), 1..6),
    ) {
        let name = FIXTURES[which];
        let mut text = String::from_utf8(fixture_bytes(name)).unwrap_or_default();
        for (at, op, piece) in edits {
            if text.is_empty() { break; }
            let mut pos = at.index(text.len());
            while !text.is_char_boundary(pos) { pos -= 1; }
            match op {
                0 => text.insert_str(pos, &piece),
                1 => { let end = (pos + piece.len().max(1)).min(text.len()); if text.is_char_boundary(end) { text.replace_range(pos..end, ""); } }
                _ => { let end = (pos + piece.len()).min(text.len()); if text.is_char_boundary(end) { text.replace_range(pos..end, &piece); } }
            }
        }
        exercise(name, text.as_bytes());
    }
}

#[test]
fn malformed_files_name_the_line() {
    let cases: [(&str, &str, u32); 6] = [
        ("a.xml", "<domain>\n  <vcpu>4</vcpu>\n  <memory>1</memory\n</domain>\n", 4),
        ("b.xml", "<domain>\n  <vcpu>four</vcpu>\n  <memory>1</memory>\n</domain>\n", 2),
        ("c.xml", "<domain>\n  <vcpu>4</vcpu>\n  <memory unit='parsecs'>1</memory>\n</domain>\n", 3),
        ("d.vmx", "numvcpus = \"8\"\nmemSize = \"1024\nx = \"1\"\n", 2),
        ("e.vmx", "numvcpus = \"24\"\ncpuid.coresPerSocket = \"7\"\nmemSize = \"1024\"\n", 2),
        ("f.xml", "<domain>\n  <vcpu>4</vcpu>\n  <memory>1</memory>\n  <cputune>\n    <vcpupin vcpu='0' cpuset='0-x'/>\n  </cputune>\n</domain>\n", 5),
    ];
    for (name, text, line) in cases {
        let err = parse_file(name, text.as_bytes()).expect_err(name);
        assert_eq!(err.error.line(), Some(line), "{name}: {err}");
        assert!(err.to_string().starts_with(name), "{err}");
    }
    let err = parse_file("g.xml", b"<capabilities/>").expect_err("not a domain");
    assert!(
        matches!(err.error, VmError::Definition(numaplace_libvirt::domain::DomainError::NotADomain { .. })),
        "{err}"
    );
    let err = parse_file("h.vmx", b"memSize = \"1024\"\n\xff").expect_err("not utf-8");
    assert!(matches!(err.error, VmError::NotUtf8 { offset: 17 }), "{err}");
}

#[test]
fn oversized_counts_are_refused_or_bounded() {
    let huge_vcpus = "<domain>\n  <vcpu>4000000000</vcpu>\n  <memory>1048576</memory>\n</domain>\n";
    let err = parse_file("v.xml", huge_vcpus.as_bytes()).expect_err("too many vCPUs");
    assert_eq!(err.error.line(), Some(2));
    let err = parse_file("v.vmx", b"numvcpus = \"100000\"\nmemSize = \"1024\"\n").expect_err("too many vCPUs");
    assert_eq!(err.error.line(), Some(1));
    // A shape far larger than the VM must not make the rules walk it.
    let shape = "<domain>\n  <vcpu>8</vcpu>\n  <memory>8388608</memory>\n  <cpu>\n    \
        <topology sockets='1' dies='1' cores='4000000000' threads='4000000000'/>\n    <numa>\n      \
        <cell id='0' cpus='0-3' memory='4194304'/>\n      <cell id='1' cpus='4-7' memory='4194304'/>\n    \
        </numa>\n  </cpu>\n</domain>\n";
    let file = parse_file("s.xml", shape.as_bytes()).expect("parses");
    let findings = lint(&[file], &esxi_2x12());
    assert!(findings.iter().any(|f| f.rule == "socket-spans-cells"), "{findings:#?}");
}
