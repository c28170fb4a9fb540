//! The host profile is read from a file an operator edits by hand: any
//! text, and any damage to a valid profile, is read or refused with the
//! file and key named, never a panic; what is read has every key's value.

use numaplace_wire::profile::{Expected, HostProfile};
use proptest::prelude::*;

const VALID: &str = "reserved_cpus = \"0,40,20,60\"\nreserved_memory = \"2GiB\"\nshared_cpus = \"1-3,41-43\"\naccel = \"kvm\"\n\n[qemu_overhead]\nfixed = \"64MiB\"\nper_gib = \"8MiB\"\n";

#[test]
fn the_documented_example_reads() {
    let p = HostProfile::parse("host.toml", VALID).expect("the example of docs/formats/host-profile.md");
    assert_eq!(p.reserved_cpus.map(|c| c.to_string()).as_deref(), Some("0,20,40,60"));
    assert_eq!(p.reserved_memory, Some(2 << 30));
    assert_eq!(p.overhead, numaplace_plan::Overhead::default());
}

#[test]
fn a_type_mismatch_names_the_key() {
    for (text, at) in [
        ("reserved_cpus = 3", "f.toml: reserved_cpus"),
        ("reserved_memory = -1", "f.toml: reserved_memory"),
        ("reserved_memory = true", "f.toml: reserved_memory"),
        ("accel = 1", "f.toml: accel"),
        ("qemu_overhead = \"64MiB\"", "f.toml: qemu_overhead"),
        ("[qemu_overhead]\nper_gib = [1]", "f.toml: qemu_overhead.per_gib"),
        ("node_kinds = [\"hbm\"]", "f.toml: node_kinds"),
        ("[node_kinds]\n8 = 1", "f.toml: node_kinds.8"),
    ] {
        let e = HostProfile::parse("f.toml", text).expect_err(text);
        assert_eq!(e.at, at, "{text}: {e}");
        assert!(!matches!(e.expected, Expected::Toml(_)), "{text}: {e}");
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]

    /// Any text: a profile or an error naming the file.
    #[test]
    fn any_text_is_read_or_refused(text in "\\PC{0,200}") {
        if let Err(e) = HostProfile::parse("f.toml", &text) {
            prop_assert!(e.to_string().starts_with("f.toml"), "{}", e);
        }
    }

    /// A valid profile with a few bytes replaced: read or refused.
    #[test]
    fn a_damaged_profile_is_read_or_refused(edits in proptest::collection::vec((any::<prop::sample::Index>(), any::<char>()), 1..4)) {
        let mut chars: Vec<char> = VALID.chars().collect();
        for (at, c) in edits {
            let i = at.index(chars.len());
            chars[i] = c;
        }
        let text: String = chars.into_iter().collect();
        if let Err(e) = HostProfile::parse("f.toml", &text) {
            prop_assert!(e.to_string().starts_with("f.toml"), "{}", e);
        }
    }
}

/// `memory_kinds` lists the kinds beside DRAM a VM may use by default;
/// a name that is not a kind, or a value that is not a list, names the
/// key.
#[test]
fn memory_kinds_are_read_and_bad_ones_name_the_key() {
    use numaplace_topo::MemoryKind;
    let p = HostProfile::parse("h.toml", "memory_kinds = [\"hbm\", \"CXL\", \"dram\"]").expect("valid");
    assert_eq!(p.memory_kinds, vec![MemoryKind::Hbm, MemoryKind::Cxl]);
    assert!(HostProfile::parse("h.toml", "").expect("empty").memory_kinds.is_empty());
    for text in ["memory_kinds = \"hbm\"", "memory_kinds = [\"fast\"]", "memory_kinds = [1]"] {
        let e = HostProfile::parse("h.toml", text).expect_err(text);
        assert_eq!((e.at.as_str(), &e.expected), ("h.toml: memory_kinds", &Expected::MemoryKinds), "{text}");
        assert!(e.to_string().contains("expected a list of memory kinds"), "{e}");
    }
}
