//! For the workspace's own tests, not for users: whether a test that needs
//! an outside program (QEMU, libvirt, virt-xml-validate) runs, skips or
//! fails, by the rule of `numaplace_testkit`: a developer without QEMU may
//! skip those tests, but a skip must be seen, and CI (`scripts/test` sets
//! [`REQUIRE_TOOLS`]) must never pass a test that did not run.

use std::process::Command;

pub use numaplace_testkit::{skip, REQUIRE_TOOLS};

/// Whether `tool` is an executable on `PATH`. When it is not: panics if
/// [`REQUIRE_TOOLS`] is set, else tells stderr which test skips (and from
/// which line: a test may skip only its last part) and returns false.
#[track_caller]
pub fn require_tool(tool: &str) -> bool {
    numaplace_testkit::on_path(tool) || skip(&format!("`{tool}` is not installed"))
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
        Ok(o) => skip(&format!(
            "libvirtd is not answering (`virsh -c qemu:///system version` failed: {}; scripts/libvirt-up starts it)",
            String::from_utf8_lossy(&o.stderr).trim()
        )),
        Err(e) => skip(&format!("libvirtd is not answering (`virsh` did not run: {e})")),
    }
}
