//! For the workspace's own tests, not for users: the one rule for a test
//! that needs an outside program (QEMU, libvirt, virt-xml-validate,
//! PostgreSQL's server). A developer without it sees the test skip, loudly;
//! CI (`scripts/test` sets [`REQUIRE_TOOLS`]) fails it instead, so it never
//! passes a test that did not run. The crates whose tests need such
//! programs (`numaplace_guest::testing`, `numaplace_store::testing`) build
//! their checks on [`skip`] and [`on_path`].

use std::io::Write;
use std::panic::Location;
use std::path::Path;

/// The environment variable that turns a missing tool from a skip into a
/// failure.
pub const REQUIRE_TOOLS: &str = "NUMAPLACE_REQUIRE_TOOLS";

/// Fails under [`REQUIRE_TOOLS`], else tells stderr which test skips (and
/// from which line: a test may skip only its last part) and why; returns
/// false, for `if !... { return; }`.
#[track_caller]
pub fn skip(why: &str) -> bool {
    let required = std::env::var_os(REQUIRE_TOOLS).is_some_and(|v| !v.is_empty() && v != "0");
    assert!(!required, "{REQUIRE_TOOLS} is set but {why}");
    // libtest names each test's thread after the test. Written to the
    // stderr handle rather than with eprintln!, which libtest captures and
    // shows only for a failing test: a skip passes, and must still be seen.
    let thread = std::thread::current();
    let test = thread.name().unwrap_or("a test");
    let line = format!("SKIPPED {test} (at {}): {why}; set {REQUIRE_TOOLS}=1 to fail instead\n", Location::caller());
    let _ = std::io::stderr().write_all(line.as_bytes());
    false
}

/// Whether `tool` is an executable file in a directory of `PATH`.
pub fn on_path(tool: &str) -> bool {
    std::env::var_os("PATH").is_some_and(|paths| std::env::split_paths(&paths).any(|d| executable(&d.join(tool))))
}

fn executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    path.metadata().is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_shell_is_on_the_path_and_a_made_up_tool_is_not() {
        assert!(on_path("sh"));
        assert!(!on_path("numaplace-no-such-tool"));
    }

    #[test]
    fn the_rule_fails_exactly_when_tools_are_required() {
        // Whichever way this run is set (CI sets the variable).
        let required = std::env::var_os(REQUIRE_TOOLS).is_some_and(|v| !v.is_empty() && v != "0");
        let outcome = std::panic::catch_unwind(|| skip("nothing: this test checks the skip rule itself"));
        assert_eq!(outcome.is_err(), required);
        if let Ok(ran) = outcome {
            assert!(!ran, "a skip says the test does not run");
        }
    }
}
