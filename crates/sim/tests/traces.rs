//! Trace readers on the real Azure V1 test split (copied into
//! `fixtures/traces/azure-v1`), on Huawei Cloud's Huawei-East-1 trace
//! (`fixtures/traces/huawei-east-1`) and on arbitrary input (never a
//! panic).

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

/// Issue 48's second public trace, read as published (SPANE's
/// `vmid,cpu,mem,at,lt`): every VM, its sizes and its times.
#[test]
fn huawei_east_1_has_every_vm() {
    let trace = load_trace(fixture("huawei-east-1/Huawei-East-1-lt.csv").to_str().unwrap(), 0).unwrap();
    // The dataset's README: 116,313 deletions, each a VM with a lifetime.
    assert_eq!(trace.vms.len(), 116_313);
    assert!(trace.vms.iter().all(|v| v.lifetime_s.is_some_and(|l| l >= 1)));
    assert_eq!(trace.start_s, 0);
    // The last arrival is at 2,678,081 s (31 days); one VM runs 2,540,293 s.
    assert_eq!(trace.vms.last().map(|v| v.arrival_s), Some(2_678_081));
    assert_eq!(trace.end_s, trace.vms.iter().filter_map(|v| v.departure_s()).max().unwrap() + 1);
    // 1 vCPU with 2 GiB is the most common size; the largest is 64 / 128 GiB.
    let size = |c: u32, g: u64| trace.vms.iter().filter(|v| v.vcpus == c && v.memory_bytes == g << 30).count();
    assert_eq!(size(1, 2), 53_934);
    assert_eq!(size(1, 1), 25_447);
    assert_eq!(size(64, 128), 252);
    assert_eq!(trace.vms.iter().map(|v| v.vcpus).max(), Some(64));
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

/// A CSV trace's line 1 with `arrival_s` and `lifetime_s` as given.
fn csv_times(arrival: &str, lifetime: &str) -> Result<numaplace_sim::Trace, TraceError> {
    csv::parse("t.csv", &format!("vmid,vcpus,memory_gib,arrival_s,lifetime_s\na,2,4,{arrival},{lifetime}\n"))
}

#[test]
fn decimal_seconds_are_read_as_published_traces_write_them() {
    // Huawei Cloud's and Alibaba's traces write `0.0`, `12.5`: the replay's
    // clock counts whole seconds, so they round to the nearest.
    let t = csv_times("0.0", "3600.0").unwrap();
    assert_eq!((t.vms[0].arrival_s, t.vms[0].lifetime_s), (0, Some(3600)));
    let t = csv_times("12.5", "0.4").unwrap();
    assert_eq!((t.vms[0].arrival_s, t.vms[0].lifetime_s), (13, Some(0)));
    let t = csv_times("1.7e9", "").unwrap();
    assert_eq!((t.vms[0].arrival_s, t.vms[0].lifetime_s), (1_700_000_000, None));
    assert_eq!(csv_times("-0.0", "5").unwrap().vms[0].arrival_s, 0);
    // Whole numbers written as decimals (pandas does so for columns with
    // gaps) are whole numbers for vCPUs too.
    let t = csv::parse("t.csv", "a,4.0,2,0,10\n").unwrap();
    assert_eq!(t.vms[0].vcpus, 4);
}

#[test]
fn bad_seconds_are_named_for_what_they_are() {
    let words = |arrival: &str, lifetime: &str| csv_times(arrival, lifetime).unwrap_err().to_string();
    assert_eq!(
        words("abc", "10"),
        "t.csv:2: arrival_s: \"abc\" is not a number of seconds (expected a whole or decimal number such as 120 or \
         0.5)"
    );
    assert_eq!(words("0", "-5"), "t.csv:2: lifetime_s: -5 is negative; expected 0 or more");
    assert_eq!(words("-0.5", "5"), "t.csv:2: arrival_s: -0.5 is negative; expected 0 or more");
    assert_eq!(words("NaN", "5"), "t.csv:2: arrival_s: NaN is not a finite number");
    assert_eq!(words("0", "inf"), "t.csv:2: lifetime_s: inf is not a finite number");
    assert_eq!(
        words("1e300", "5"),
        "t.csv:2: arrival_s: 1e300 s is out of range: at most 10000000000 s (about 317 years)"
    );
    assert_eq!(
        words("99999999999", "5"),
        "t.csv:2: arrival_s: 99999999999 s is out of range: at most 10000000000 s (about 317 years)"
    );
}

#[test]
fn sizes_per_vm_are_bounded() {
    let words = |line: &str| csv::parse("t.csv", line).unwrap_err().to_string();
    assert_eq!(
        words("a,99999999999999999999,2,0,10\n"),
        "t.csv:1: vcpus: 99999999999999999999 is out of range: 1 to 4096 vCPUs"
    );
    assert_eq!(words("a,two,2,0,10\n"), "t.csv:1: vcpus: \"two\" is not a number");
    assert_eq!(words("a,-2,2,0,10\n"), "t.csv:1: vcpus: -2 is out of range: 1 to 4096 vCPUs");
    assert_eq!(
        words("a,2,2000000,0,10\n"),
        "t.csv:1: memory_gib: 2000000 GiB is out of range: more than 0 and at most 1048576 GiB (1 PiB)"
    );
    assert_eq!(words("a,2,NaN,0,10\n"), "t.csv:1: memory_gib: NaN is not a finite number");
}

#[test]
fn generated_traces_are_bounded_before_they_allocate() {
    let e = load_trace("synthetic:4000000000", 0).unwrap_err();
    assert_eq!(e.to_string(), "synthetic:4000000000:0: count: 4000000000 is out of range: at most 10000000");
    let e = load_trace("synthetic:lots", 0).unwrap_err();
    assert_eq!(e.to_string(), "synthetic:lots:0: count: \"lots\" is not a number");
    assert!(load_trace("synthetic:0", 0).is_err());
    assert_eq!(load_trace("synthetic:3", 0).unwrap().vms.len(), 3);
}

#[test]
fn azure_timestamps_may_be_decimal_too() {
    let texts = azure::AzureTexts {
        flavors: ("f", "300.0 a,g\n"),
        durations: ("d", "300 U0,C1\n"),
        flavor_map: ("m", FLAV),
        interval_map: ("i", "0.0 0\n300 1\n"),
        end_s: Some(900),
    };
    let t = azure::parse(texts, 1).unwrap();
    assert_eq!(t.vms.len(), 2);
    assert_eq!(t.start_s, 0);
    let bad = azure::AzureTexts { flavors: ("f", "soon a\n"), durations: ("d", "300 U0\n"), ..texts };
    assert_eq!(
        azure::parse(bad, 1).unwrap_err().to_string(),
        "f:1: timestamp: \"soon\" is not a number of seconds (expected a whole or decimal number such as 120 or 0.5)"
    );
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

    /// Lines under Huawei-East-1's header, with any numbers or junk in
    /// its fields: read or refused naming the line, never a panic, and
    /// what is read is in range.
    #[test]
    fn huawei_lines_never_panic(rows in proptest::collection::vec(
        ("[0-9]{0,3}", "(-?[0-9]{0,12}(\\.[0-9]{0,3})?|nan|inf|1e999|x)",
         "(-?[0-9]{0,8}(\\.[0-9]{0,2})?|nan|)", "(-?[0-9]{0,11}(\\.[0-9]{0,2})?|inf|)",
         "(-?[0-9]{0,11}(\\.[0-9]{0,2})?|)"), 0..8)) {
        let mut text = String::from("vmid,cpu,mem,at,lt\n");
        for (id, c, m, a, l) in &rows {
            text.push_str(&format!("{id},{c},{m},{a},{l}\n"));
        }
        match csv::parse("h.csv", &text) {
            Ok(trace) => {
                prop_assert_eq!(trace.vms.len(), rows.len());
                prop_assert!(trace.vms.iter().all(|v| (1..=4096).contains(&v.vcpus) && v.memory_bytes > 0));
                prop_assert!(trace.vms.iter().all(|v| v.arrival_s <= 10_000_000_000));
            }
            Err(e) => {
                let words = e.to_string();
                prop_assert!(words.starts_with("h.csv:"), "{}", words);
            }
        }
    }

    #[test]
    fn csv_never_panics(t in "[0-9a-z,.\\-\\n ]{0,200}") {
        if let Ok(trace) = csv::parse("t.csv", &t) {
            prop_assert!(trace.vms.iter().all(|v| v.vcpus >= 1 && v.memory_bytes > 0));
        }
    }
}

#[test]
fn a_header_reorders_columns_of_published_traces() {
    let t = csv::parse("t.csv", "start,tenant,duration,cores,memory\n12.5,a,3600.4,4,8\n").unwrap();
    let vm = t.vms[0];
    assert_eq!((vm.vcpus, vm.memory_bytes, vm.arrival_s, vm.lifetime_s), (4, 8 << 30, 13, Some(3600)));
    assert_eq!(
        csv::parse("t.csv", "start,tenant,duration,memory\n0,a,1,2\n").unwrap_err().to_string(),
        "t.csv:1: header: no vcpus column (expected one of vcpus, vcpu, cores, cpus, cpu)"
    );
    assert_eq!(
        csv::parse("t.csv", "cpus,start,duration,memory,mem\n1,0,1,2,2\n").unwrap_err().to_string(),
        "t.csv:1: header: columns memory and mem both give memory_gib; keep one"
    );
}

#[test]
fn huge_numbers_in_any_column_are_out_of_range() {
    let huge = "9".repeat(40);
    let words = |row: [&str; 4]| {
        let text = format!("start,tenant,duration,cores,memory\n{},a,{},{},{}\n", row[0], row[1], row[2], row[3]);
        csv::parse("t.csv", &text).unwrap_err().to_string()
    };
    let seconds = "is out of range: at most 10000000000 s (about 317 years)";
    assert_eq!(words([&huge, "1", "1", "1"]), format!("t.csv:2: start: {huge} s {seconds}"));
    assert_eq!(words(["1", &huge, "1", "1"]), format!("t.csv:2: duration: {huge} s {seconds}"));
    assert_eq!(words(["1", "1", &huge, "1"]), format!("t.csv:2: cores: {huge} is out of range: 1 to 4096 vCPUs"));
    assert_eq!(
        words(["1", "1", "1", &huge]),
        format!("t.csv:2: memory: {huge} GiB is out of range: more than 0 and at most 1048576 GiB (1 PiB)")
    );
    // Past f64's range a number reads as infinite, refused as such.
    let past = "9".repeat(400);
    assert_eq!(words([&past, "1", "1", "1"]), format!("t.csv:2: start: {past} is not a finite number"));
    assert_eq!(words(["1", "1", "1", "1e999"]), "t.csv:2: memory: 1e999 is not a finite number");
}

proptest! {
    #[test]
    fn csv_with_a_header_never_panics(t in "[0-9a-z,.e\\-\\n ]{0,200}") {
        let text = format!("duration,id,MEM,start,cores\n{t}");
        if let Ok(trace) = csv::parse("t.csv", &text) {
            prop_assert!(trace.vms.iter().all(|v| v.vcpus >= 1 && v.memory_bytes > 0));
        }
    }
}
