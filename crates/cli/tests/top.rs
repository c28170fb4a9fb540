//! `numaplace top --once` on this machine's own processes: a pid that is
//! not there is named and fails the run; one that is, is shown.

use std::process::Command;

fn top(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_numaplace")).arg("top").args(args).output().expect("run numaplace")
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
