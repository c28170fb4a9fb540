//! For the workspace's own tests, not for users: whether a test that needs
//! an outside program (QEMU, libvirt, virt-xml-validate) runs, skips or
//! fails. A developer without QEMU may skip those tests, but a skip must
//! be seen, and CI (`scripts/test` sets [`REQUIRE_TOOLS`]) must never pass
//! a test that did not run.

use std::io::Write;
use std::panic::Location;
use std::path::Path;
use std::process::Command;

/// The environment variable that turns a missing tool from a skip into a
/// failure.
pub const REQUIRE_TOOLS: &str = "NUMAPLACE_REQUIRE_TOOLS";

/// Whether `tool` is an executable on `PATH`. When it is not: panics if
/// [`REQUIRE_TOOLS`] is set, else tells stderr which test skips (and from
/// which line: a test may skip only its last part) and returns false.
#[track_caller]
pub fn require_tool(tool: &str) -> bool {
    let found =
        std::env::var_os("PATH").is_some_and(|paths| std::env::split_paths(&paths).any(|d| executable(&d.join(tool))));
    found || missing(&format!("`{tool}` is not installed"))
}

/// Whether libvirtd answers on `qemu:///system` (and QEMU, which it
/// drives, is installed); otherwise as [`require_tool`].
#[track_caller]
pub fn require_libvirt() -> bool {
    if !require_tool("virsh") || !require_tool("qemu-system-x86_64") {
        return false;
    }
    match Command::new("virsh").args(["-c", "qemu:///system", "version"]).output() {
        Ok(o) if o.status.success() => true,
        Ok(o) => missing(&format!(
            "libvirtd is not answering (`virsh -c qemu:///system version` failed: {}; scripts/libvirt-up starts it)",
            String::from_utf8_lossy(&o.stderr).trim()
        )),
        Err(e) => missing(&format!("libvirtd is not answering (`virsh` did not run: {e})")),
    }
}

fn executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    path.metadata().is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// Fails under [`REQUIRE_TOOLS`], else reports the skip; returns false.
#[track_caller]
fn missing(why: &str) -> bool {
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
