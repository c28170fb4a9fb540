//! Trace readers on the real Azure V1 test split (copied into
//! `fixtures/traces/azure-v1`) and on arbitrary input (never a panic).

#![allow(clippy::unwrap_used)]

use numaplace_sim::load::{azure_companions, load_trace};
use numaplace_sim::trace::{azure, csv, TraceError};
use proptest::prelude::*;
use std::path::PathBuf;

fn fixture(rel: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/traces").join(rel)
}

#[test]
fn azure_test_split_has_every_vm() {
    let path = fixture("azure-v1/v1.test.txt");
    let files = azure_companions(&path).unwrap();
    assert!(files.durations.ends_with("v1.test.c2591400.txt"));
    let trace = load_trace(path.to_str().unwrap(), 0).unwrap();
    // The dataset's README: 410,276 VMs in the test split.
    assert_eq!(trace.vms.len(), 410_276);
    // C<k> tokens: still running at the censoring time 2,591,400 s.
    assert_eq!(trace.vms.iter().filter(|v| v.lifetime_s.is_none()).count(), 23_311);
    assert_eq!(trace.end_s, 2_591_400);
    assert_eq!(trace.start_s, 2_100_000 - 300);
    assert!(trace.vms.windows(2).all(|w| w[0].arrival_s <= w[1].arrival_s));
    assert!(trace.vms.iter().all(|v| v.departure_s().is_none_or(|d| d <= trace.end_s)));
    // Flavor b (1 vCPU, 1.75 GiB) is the most common one.
    let b = trace.vms.iter().filter(|v| v.vcpus == 1 && v.memory_bytes == 7 << 28).count();
    assert_eq!(b, 223_557);
    assert_eq!(trace.vms.iter().map(|v| v.vcpus).max(), Some(16));
}

#[test]
fn missing_companions_are_named() {
    let dir = std::env::temp_dir().join(format!("numaplace-sim-trace-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let f = dir.join("v1.x.txt");
    std::fs::write(&f, "300 a\n").unwrap();
    let e = load_trace(f.to_str().unwrap(), 0).unwrap_err();
    assert!(matches!(e, TraceError::MissingCompanion { ref what, .. } if what == "duration file"), "{e}");
    std::fs::remove_dir_all(&dir).unwrap();
}

const FLAV: &str = "1,0.75 a\n2,3.5 g\n";
const IMAP: &str = "0 0\n300 1\n";

proptest! {
    #[test]
    fn azure_never_panics(f in "[0-9 a-z,|UC\\n]{0,200}", d in "[0-9 a-z,|UC\\n]{0,200}") {
        let texts = azure::AzureTexts {
            flavors: ("f", &f),
            durations: ("d", &d),
            flavor_map: ("m", FLAV),
            interval_map: ("i", IMAP),
            end_s: None,
        };
        let _ = azure::parse(texts, 1);
    }

    #[test]
    fn maps_never_panic(m in "\\PC{0,120}") {
        let _ = azure::parse_flavor_map("m", &m);
        let _ = azure::parse_interval_map("i", &m);
    }

    #[test]
    fn csv_never_panics(t in "[0-9a-z,.\\-\\n ]{0,200}") {
        if let Ok(trace) = csv::parse("t.csv", &t) {
            prop_assert!(trace.vms.iter().all(|v| v.vcpus >= 1 && v.memory_bytes > 0));
        }
    }
}
