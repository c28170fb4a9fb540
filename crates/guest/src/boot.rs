//! Runs a guest to completion with a time limit and returns what it
//! printed on its serial console. The guest powers itself off after its
//! report; the limit only catches guests that hang.

use std::io::Read;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Why a boot produced no output to check.
#[derive(Debug, thiserror::Error)]
pub enum BootError {
    /// The emulator could not be started.
    #[error("could not start `{program}`: {source} (install the `qemu-system-x86` package)")]
    Spawn {
        /// The program.
        program: String,
        /// The OS error.
        source: std::io::Error,
    },
    /// The emulator refused the configuration.
    #[error("`{program}` failed: {stderr}")]
    Failed {
        /// The program.
        program: String,
        /// What it printed on stderr.
        stderr: String,
    },
    /// The guest did not power off in time.
    #[error("the guest did not finish within {limit:?}; {}", console_tail(console))]
    Timeout {
        /// The limit.
        limit: Duration,
        /// What the guest printed before it was stopped.
        console: String,
    },
}

/// The last lines a guest printed, for an error that must say where it
/// stopped (a hang in firmware, in the kernel or in `/init` look alike
/// from outside).
pub fn console_tail(console: &str) -> String {
    const LINES: usize = 12;
    let lines: Vec<&str> = console.lines().map(str::trim_end).filter(|l| !l.is_empty()).collect();
    if lines.is_empty() {
        return "its console stayed empty".to_string();
    }
    let tail = &lines[lines.len().saturating_sub(LINES)..];
    let tail: Vec<String> = tail
        .iter()
        .map(|l| format!("  | {}", l.chars().filter(|c| !c.is_control()).take(160).collect::<String>()))
        .collect();
    format!("its console ended with:\n{}", tail.join("\n"))
}

/// Runs `program args...` until it exits or `limit` passes; returns its
/// standard output.
pub fn run_to_end(program: &str, args: &[String], limit: Duration) -> Result<String, BootError> {
    let mut child = Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|source| BootError::Spawn { program: program.to_string(), source })?;
    // Drain both pipes on threads so a chatty guest never blocks on a full
    // pipe while we wait.
    let mut stdout = child.stdout.take();
    let mut stderr = child.stderr.take();
    let out = std::thread::spawn(move || {
        let mut s = Vec::new();
        if let Some(o) = stdout.as_mut() {
            let _ = o.read_to_end(&mut s);
        }
        s
    });
    let err = std::thread::spawn(move || {
        let mut s = Vec::new();
        if let Some(e) = stderr.as_mut() {
            let _ = e.read_to_end(&mut s);
        }
        s
    });
    let start = Instant::now();
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break Some(status),
            Ok(None) if start.elapsed() > limit => {
                let _ = child.kill();
                let _ = child.wait();
                break None;
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(50)),
            Err(_) => break None,
        }
    };
    let stdout = String::from_utf8_lossy(&out.join().unwrap_or_default()).into_owned();
    let stderr = String::from_utf8_lossy(&err.join().unwrap_or_default()).into_owned();
    match status {
        None => Err(BootError::Timeout { limit, console: stdout }),
        Some(s) if !s.success() && !stdout.contains(crate::report::BEGIN) => {
            Err(BootError::Failed { program: program.to_string(), stderr: stderr.trim().chars().take(800).collect() })
        }
        Some(_) => Ok(stdout),
    }
}

/// The arguments that make QEMU boot the test kernel and initramfs
/// headless, exit on poweroff, and print the console on stdout.
pub fn boot_args(kernel: &Path, initrd: &Path) -> Vec<String> {
    [
        "-nographic",
        "-no-reboot",
        "-nodefaults",
        "-serial",
        "stdio",
        "-kernel",
        &kernel.to_string_lossy(),
        "-initrd",
        &initrd.to_string_lossy(),
        "-append",
        // no_timer_check: under TCG on a busy host the kernel's IO-APIC
        // timer check can miss its ticks and panic at boot ("IO-APIC +
        // timer doesn't work!"), as a test run here saw; the check proves
        // nothing about an emulated timer.
        "console=ttyS0 quiet panic=-1 no_timer_check",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()
}
