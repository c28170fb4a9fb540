//! Issue 11, items 2, 5 and 6 at the command line: traces with decimal
//! seconds, fleet counts refused by name, what `simulate` says when nothing
//! was placed or the fleet is saturated, and one size grammar for every
//! flag, request and libvirt unit (`4GB` is 4 x 10^9 bytes everywhere,
//! `4G` and `4GiB` 4 x 2^30).

use std::path::PathBuf;
use std::process::{Command, Output};

fn numaplace(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_numaplace"))
        .env("NUMAPLACE_HOST_CONFIG", concat!(env!("CARGO_TARGET_TMPDIR"), "/no-host-profile.toml"))
        .args(args)
        .output()
        .expect("numaplace runs")
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// A file under this test binary's scratch directory.
fn write(name: &str, text: &str) -> String {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("sizes-and-words");
    std::fs::create_dir_all(&dir).expect("scratch dir");
    let path = dir.join(name);
    std::fs::write(&path, text).expect("write");
    path.to_str().expect("utf-8 path").to_string()
}

fn fixture(rel: &str) -> String {
    format!("{}/../../fixtures/{rel}", env!("CARGO_MANIFEST_DIR"))
}

const HOST: &str = "synthetic:2 sockets x 4 cores x 2 threads, 16GiB per node";

fn fleet(name: &str, count: &str) -> String {
    write(name, &format!(r#"{{"hosts": [{{"topology": "{HOST}", "count": {count}}}]}}"#))
}

#[test]
fn a_trace_with_decimal_seconds_is_replayed() {
    let trace = write("decimal.csv", "vmid,vcpus,memory_gib,arrival_s,lifetime_s\na,2,4,0.0,3600.5\nb,2,4,10.25,\n");
    let o = numaplace(&["simulate", "--fleet", &fleet("two.json", "2"), "--trace", &trace, "--policies", "balanced"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stdout(&o).contains("(2 VMs over"), "{}", stdout(&o));
    let row = stdout(&o).lines().find(|l| l.starts_with("balanced")).map(str::to_string).unwrap_or_default();
    assert_eq!(row.split_whitespace().nth(1), Some("2"), "both accepted: {row}");
}

#[test]
fn the_old_tries_flag_is_accepted_and_says_it_no_longer_acts() {
    // The replay runs the service's fleet engine, which tries every host
    // that passes its filters; scripts that still pass --tries keep working.
    let trace = write("tries.csv", "a,2,4,0,10\nb,2,4,1,10\n");
    let o = numaplace(&[
        "simulate",
        "--fleet",
        &fleet("tries.json", "2"),
        "--trace",
        &trace,
        "--policies",
        "balanced",
        "--tries",
        "3",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stderr(&o).contains("--tries no longer has an effect"), "{}", stderr(&o));
    let row = stdout(&o).lines().find(|l| l.starts_with("balanced")).map(str::to_string).unwrap_or_default();
    assert_eq!(row.split_whitespace().nth(1), Some("2"), "both accepted: {row}");
}

#[test]
fn a_time_that_is_not_a_number_is_refused_in_true_words() {
    let trace = write("abc.csv", "a,2,4,abc,10\n");
    let o = numaplace(&["simulate", "--fleet", &fleet("two-b.json", "2"), "--trace", &trace]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains(
            "abc.csv:1: arrival_s: \"abc\" is not a number of seconds (expected a whole or decimal number such as 120 \
             or 0.5)"
        ),
        "{}",
        stderr(&o)
    );
}

#[test]
fn fleet_counts_are_refused_naming_file_entry_and_field() {
    let trace = write("one.csv", "a,2,4,0,10\n");
    for (name, count, words) in [
        ("minus.json", "-1", "hosts[0].count: expected a whole number of hosts (0 or more), found -1"),
        ("huge.json", "4000000000", "hosts[0].count: expected at most 1000000 hosts, found 4000000000"),
    ] {
        let file = fleet(name, count);
        let o = numaplace(&["simulate", "--fleet", &file, "--trace", &trace]);
        assert_eq!(o.status.code(), Some(2), "{name}");
        assert!(stderr(&o).contains(&format!("{file}: {words}")), "{name}: {}", stderr(&o));
    }
}

#[test]
fn nothing_placed_says_so_instead_of_perfect_figures() {
    // 64 vCPUs do not fit a 16-thread host.
    let trace = write("too-big.csv", "a,64,4,0,10\n");
    let fleet = fleet("two-c.json", "2");
    let o = numaplace(&["simulate", "--fleet", &fleet, "--trace", &trace, "--policies", "balanced"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let text = stdout(&o);
    let row = text.lines().find(|l| l.starts_with("balanced")).unwrap_or_default();
    // No perfect-looking locality or performance; the only 100% figures
    // are the stranded shares, which are right: no VM of the trace's
    // sizes fits any host.
    assert!(!row.contains("1.000"), "{row}");
    assert_eq!(row.matches("100.0%").count(), 2, "{row}");
    assert!(text.contains("warning: no VM was placed by balanced"), "{text}");

    let o =
        numaplace(&["simulate", "--fleet", &fleet, "--trace", &trace, "--policies", "balanced", "--format", "json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let doc: serde_json::Value = serde_json::from_slice(&o.stdout).expect("stdout is one JSON document");
    let p = &doc["policies"][0];
    assert_eq!(p["accepted"], 0);
    assert!(p["memory_locality"].is_null() && p["predicted_performance"].is_null(), "{p}");
    assert!(p["single_node_share"].is_null() && p["smt_shared_vcpu_share"].is_null(), "{p}");
    assert!(p["remote_share"].is_null() && p["congested_share"].is_null(), "{p}");
    assert!(stderr(&o).contains("numaplace: warning: no VM was placed by balanced"), "{}", stderr(&o));
}

#[test]
fn the_help_example_warns_that_its_fleet_is_saturated() {
    // The example `numaplace simulate --help` gives refuses about 91%.
    let o = numaplace(&[
        "simulate",
        "--fleet",
        &fixture("traces/fleet-small.json"),
        "--trace",
        &fixture("traces/azure-v1/v1.test.txt"),
        "--limit",
        "20000",
        "--policies",
        "balanced",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let text = stdout(&o);
    assert!(text.contains("warning: the fleet is saturated: refused VMs balanced 9"), "{text}");
    assert!(text.contains("(warned above 10%)") && text.contains("try a bigger fleet"), "{text}");
}

#[test]
fn request_sizes_follow_the_one_grammar() {
    let memory = |size: &str| -> serde_json::Value {
        let vm = format!("name=a,vcpus=1,memory={size}");
        let o = numaplace(&["plan", "--host", HOST, "--vm", &vm, "--format", "json"]);
        assert!(o.status.success(), "{size}: {}", stderr(&o));
        let doc: serde_json::Value = serde_json::from_slice(&o.stdout).expect("plan JSON");
        doc["placements"][0]["memory_bytes"].clone()
    };
    assert_eq!(memory("4GB"), 4_000_000_000u64);
    assert_eq!(memory("4G"), 4u64 << 30);
    assert_eq!(memory("4GiB"), 4u64 << 30);
    assert_eq!(memory("1.5GiB"), 3u64 << 29);
    let o = numaplace(&["plan", "--host", HOST, "--vm", "name=a,vcpus=1,memory=4gb"]);
    assert_eq!(o.status.code(), Some(2), "lower-case gb is not a unit");
}

#[test]
fn size_flags_follow_the_one_grammar() {
    // verify's and balance's flags are parsed before anything runs: a unit
    // outside the grammar is bad input (exit 2) that names it.
    for args in [
        vec!["verify", "--plan", "no-such-plan.json", "--max-memory", "4gb"],
        vec!["balance", "--min-memory", "4gb", "--rounds", "0"],
        vec!["balance", "--rate", "4gb/s", "--rounds", "0"],
    ] {
        let o = numaplace(&args);
        assert_eq!(o.status.code(), Some(2), "{args:?}");
        assert!(stderr(&o).contains("unknown unit `gb`; units are case-sensitive"), "{args:?}: {}", stderr(&o));
    }
    // `4GB` is a size: verify gets as far as reading the plan.
    let o = numaplace(&["verify", "--plan", "no-such-plan.json", "--max-memory", "4GB"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("reading no-such-plan.json"), "{}", stderr(&o));
}

/// A libvirt domain with `<memory unit='UNIT'>VALUE</memory>`, linted on
/// 16 GiB nodes: the finding names the size numaplace read.
fn lint_memory(name: &str, unit: &str, value: &str) -> Output {
    let xml = format!(
        "<domain type='kvm'>\n  <name>db1</name>\n  <memory unit='{unit}'>{value}</memory>\n  \
         <vcpu placement='static'>4</vcpu>\n</domain>\n"
    );
    numaplace(&["lint", &write(name, &xml), "--host", "2 sockets x 4 cores x 2 threads, 16GiB per node"])
}

#[test]
fn libvirt_units_are_libvirts() {
    let said = |name: &str, unit: &str, value: &str| stdout(&lint_memory(name, unit, value));
    assert!(said("g.xml", "G", "20").contains("but 20 GiB of memory"));
    assert!(said("gb.xml", "GB", "20").contains("but 18.6 GiB of memory"));
    assert!(said("pib.xml", "PiB", "1").contains("but 1024 TiB of memory"));
    // 10^18 bytes are 909494.7 TiB: rounded to the nearest, not down.
    assert!(said("eb.xml", "EB", "1").contains("but 909495 TiB of memory"));
    // libvirt reads units case-insensitively (virScaleInteger), so `kib` is
    // KiB to libvirt and to numaplace.
    assert!(said("kib.xml", "kib", "20971520").contains("but 20 GiB of memory"));
    let o = lint_memory("kibs.xml", "KiBs", "20");
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("line 3: memory unit: expected a libvirt unit"), "{}", stderr(&o));
}

#[test]
fn host_orders_are_compared_side_by_side_and_a_wrong_one_is_named() {
    let trace = write("orders.csv", "start,cores,memory,duration\n0,2,4,100\n1.5,4,8,100\n2,2,4,100\n");
    let fleet = fleet("orders.json", "3");
    let o = numaplace(&[
        "simulate",
        "--fleet",
        &fleet,
        "--trace",
        &trace,
        "--policies",
        "balanced",
        "--hosts",
        "memory-first,cost",
        "--sensitivity",
        "--format",
        "json",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let doc: serde_json::Value = serde_json::from_slice(&o.stdout).expect("stdout is one JSON document");
    let policies = doc["policies"].as_array().expect("a list of results");
    let hosts: Vec<&str> = policies.iter().map(|p| p["hosts"].as_str().expect("a host order")).collect();
    assert_eq!(hosts, ["memory-first", "cost"]);
    assert_eq!(doc["policies"][0]["accepted"], 3);
    let sens = doc["sensitivity"].as_array().expect("a sensitivity study");
    // Nine parameters since issue 48 (own_pair_share, small_cell_memory).
    assert_eq!(sens.len(), 9);
    assert_eq!(sens[0]["parameter"], "sibling_loss");
    assert_eq!(sens[0]["performance_low"].as_array().map(Vec::len), Some(2));

    let o = numaplace(&["simulate", "--fleet", &fleet, "--trace", &trace, "--hosts", "memory-first,cost"]);
    let text = stdout(&o);
    assert!(text.lines().any(|l| l.starts_with("balanced/cost")), "{text}");

    let o = numaplace(&["simulate", "--fleet", &fleet, "--trace", &trace, "--hosts", "cheapest"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("--hosts: unknown host order \"cheapest\""), "{}", stderr(&o));
}
