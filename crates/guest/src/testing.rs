//! For the workspace's own tests, not for users: whether a test that needs
//! an outside program (QEMU, libvirt, virt-xml-validate) runs, skips or
//! fails, by the rule of `numaplace_testkit`: a developer without QEMU may
//! skip those tests, but a skip must be seen, and CI (`scripts/test` sets
//! [`REQUIRE_TOOLS`]) must never pass a test that did not run.

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
    match numaplace_libvirt::Virsh::new(numaplace_libvirt::DEFAULT_URI).version() {
        Ok(_) => true,
        Err(e) => skip(&format!("libvirtd is not answering ({e}; scripts/libvirt-up starts it)")),
    }
}
