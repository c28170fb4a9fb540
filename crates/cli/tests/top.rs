//! `numaplace top --once` on this machine's own processes: a pid that is
//! not there is named and fails the run; one that is, is shown.

use std::process::Command;

fn top(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_numaplace"))
        .env("NUMAPLACE_HOST_CONFIG", concat!(env!("CARGO_TARGET_TMPDIR"), "/no-host-profile.toml"))
        .arg("top")
        .args(args)
        .output()
        .expect("run numaplace")
}

#[test]
fn a_pid_that_is_not_there_is_named_and_exits_1() {
    // Above any kernel's pid_max.
    let o = top(&["--once", "--pid", "4000000000"]);
    assert_eq!(o.status.code(), Some(1));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("pid 4000000000: no such process"), "{err}");
}

#[test]
fn a_pid_that_is_there_is_shown() {
    let me = std::process::id().to_string();
    let o = top(&["--once", "--format", "json", "--pid", &me, "--pid", "4000000000"]);
    assert_eq!(o.status.code(), Some(0), "{}", String::from_utf8_lossy(&o.stderr));
    let snap: serde_json::Value = serde_json::from_slice(&o.stdout).expect("JSON");
    let pids: Vec<u64> = snap["processes"].as_array().into_iter().flatten().filter_map(|p| p["pid"].as_u64()).collect();
    assert_eq!(pids, [u64::from(std::process::id())]);
}

#[test]
fn state_shows_each_vm_beside_its_definition_in_text_and_json() {
    // A process named `sleep` stands in for a VM, and a dump directory
    // holds a domain of that name pinned to CPU 0 of this machine.
    let mut child = Command::new("sleep").arg("30").spawn().expect("sleep runs");
    let dir = std::env::temp_dir().join(format!("numaplace-top-state-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("temp dir");
    std::fs::write(
        dir.join("sleep.xml"),
        "<domain type='kvm'><name>sleep</name><memory unit='MiB'>64</memory><vcpu placement='static'>1</vcpu>\
         <cputune><vcpupin vcpu='0' cpuset='0'/></cputune></domain>",
    )
    .expect("write domain");
    let pid = child.id().to_string();
    let state = dir.to_string_lossy().into_owned();
    let o = top(&["--once", "--format", "json", "--pid", &pid, "--state", &state]);
    let _ = child.kill();
    let _ = child.wait();
    assert_eq!(o.status.code(), Some(0), "{}", String::from_utf8_lossy(&o.stderr));
    let snap: serde_json::Value = serde_json::from_slice(&o.stdout).expect("JSON");
    let vms = snap["planned"]["vms"].as_array().expect("a planned view");
    assert_eq!(vms.len(), 1, "{snap}");
    assert_eq!(vms[0]["name"], "sleep");
    assert_eq!(vms[0]["planned_cpus"], "0");
    assert_eq!(vms[0]["pinned"], true);
    assert!(snap["planned"]["source"].as_str().is_some_and(|s| s.contains("numaplace-top-state")), "{snap}");

    // Without --state there is no planned view at all.
    let mut child = Command::new("sleep").arg("30").spawn().expect("sleep runs");
    let pid = child.id().to_string();
    let text = top(&["--once", "--pid", &pid, "--state", &state]);
    let plain = top(&["--once", "--format", "json", "--pid", &pid]);
    let _ = child.kill();
    let _ = child.wait();
    let shown = String::from_utf8_lossy(&text.stdout);
    assert!(shown.contains("As defined in") && shown.lines().any(|l| l.trim_start().starts_with("sleep")), "{shown}");
    let plain: serde_json::Value = serde_json::from_slice(&plain.stdout).expect("JSON");
    assert!(plain.get("planned").is_none());
    let _ = std::fs::remove_dir_all(dir);
}
