//! Gets a guest kernel and builds the test initramfs, once, into a cache.
//!
//! The kernel is the distribution's own (`linux-image-amd64` from the
//! package repository, downloaded with `apt-get download`, never
//! installed), unpacked to its uncompressed ELF image because QEMU boots
//! that through its PVH note 3-5 s faster under software emulation than
//! the compressed bzImage. Every missing tool or package is named in the
//! error, with the command that fixes it.

use crate::cpio::{self, Entry};
use crate::report::INIT_SCRIPT;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The kernel and initramfs to boot.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Assets {
    /// Uncompressed kernel image (ELF).
    pub kernel: PathBuf,
    /// The initramfs (cpio newc).
    pub initrd: PathBuf,
}

/// What could not be prepared.
#[derive(Debug, thiserror::Error)]
pub enum PrepareError {
    /// A program the preparation runs is not installed.
    #[error("`{program}` is needed to {purpose} but is not installed (install the `{package}` package)")]
    MissingTool {
        /// The program.
        program: &'static str,
        /// What it is for.
        purpose: &'static str,
        /// The Debian package that has it.
        package: &'static str,
    },
    /// A step ran and failed.
    #[error("{step} failed: {detail}")]
    Step {
        /// The step.
        step: String,
        /// Its error output.
        detail: String,
    },
    /// A file could not be read or written.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> PrepareError + '_ {
    move |source| PrepareError::Io { path: path.to_path_buf(), source }
}

fn run(cmd: &mut Command, step: &str) -> Result<Vec<u8>, PrepareError> {
    let out = cmd.output().map_err(|e| PrepareError::Step { step: step.to_string(), detail: e.to_string() })?;
    if !out.status.success() {
        let detail = String::from_utf8_lossy(&out.stderr).trim().chars().take(600).collect();
        return Err(PrepareError::Step { step: step.to_string(), detail });
    }
    Ok(out.stdout)
}

fn have(program: &str) -> bool {
    std::env::var_os("PATH").is_some_and(|paths| std::env::split_paths(&paths).any(|d| d.join(program).is_file()))
}

fn need(program: &'static str, purpose: &'static str, package: &'static str) -> Result<(), PrepareError> {
    if have(program) {
        Ok(())
    } else {
        Err(PrepareError::MissingTool { program, purpose, package })
    }
}

/// The default cache: `$NUMAPLACE_CACHE_DIR`, else `$XDG_CACHE_HOME/numaplace`,
/// else `~/.cache/numaplace`.
pub fn default_cache() -> PathBuf {
    if let Some(dir) = std::env::var_os("NUMAPLACE_CACHE_DIR") {
        return PathBuf::from(dir);
    }
    let base = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
        .unwrap_or_else(std::env::temp_dir);
    base.join("numaplace")
}

/// Prepares (or finds in `cache`) the kernel and initramfs.
pub fn prepare(cache: &Path) -> Result<Assets, PrepareError> {
    let dir = cache.join("guest");
    std::fs::create_dir_all(&dir).map_err(io(&dir))?;
    let kernel = match std::env::var_os("NUMAPLACE_GUEST_KERNEL") {
        Some(k) => PathBuf::from(k),
        None => kernel(&dir)?,
    };
    let initrd = dir.join("initrd.cpio");
    let busybox = busybox(&dir)?;
    let data = std::fs::read(&busybox).map_err(io(&busybox))?;
    let archive = cpio::pack(&[
        Entry::Dir("bin".into()),
        Entry::Dir("dev".into()),
        Entry::Dir("proc".into()),
        Entry::Dir("sys".into()),
        Entry::CharDev("dev/console".into(), 5, 1),
        Entry::File("bin/busybox".into(), 0o755, data),
        Entry::File("init".into(), 0o755, INIT_SCRIPT.as_bytes().to_vec()),
    ]);
    // Rewritten each time (it takes milliseconds) so a changed script is
    // never masked by a stale cache.
    let tmp = dir.join(format!("initrd.cpio.{}.tmp", unique()));
    std::fs::write(&tmp, archive).map_err(io(&tmp))?;
    std::fs::rename(&tmp, &initrd).map_err(io(&initrd))?;
    Ok(Assets { kernel, initrd })
}

/// The versioned kernel package behind `linux-image-amd64`.
fn kernel_package() -> Result<String, PrepareError> {
    need("apt-cache", "find the distribution's kernel package", "apt")?;
    let out =
        run(Command::new("apt-cache").args(["depends", "linux-image-amd64"]), "apt-cache depends linux-image-amd64")?;
    String::from_utf8_lossy(&out)
        .lines()
        .find_map(|l| l.trim().strip_prefix("Depends: ").filter(|p| p.starts_with("linux-image-")).map(str::to_string))
        .ok_or_else(|| PrepareError::Step {
            step: "finding the kernel package".into(),
            detail: "apt-cache knows no linux-image-amd64 dependency; run `apt-get update` once".into(),
        })
}

fn kernel(dir: &Path) -> Result<PathBuf, PrepareError> {
    if let Some(found) = cached(dir, "vmlinux-") {
        return Ok(found);
    }
    let package = kernel_package()?;
    let image = dir.join(format!("vmlinux-{}", package.trim_start_matches("linux-image-")));
    need("apt-get", "download the kernel package", "apt")?;
    need("dpkg-deb", "unpack the kernel package", "dpkg")?;
    need("xz", "decompress the kernel image", "xz-utils")?;
    // Several verifications may prepare at once (parallel tests): each
    // downloads and unpacks in a folder of its own and renames the result
    // into place, which is atomic.
    let work = dir.join(format!("work-{}", unique()));
    std::fs::create_dir_all(&work).map_err(io(&work))?;
    let result = kernel_in(&work, &package, &image);
    let _ = std::fs::remove_dir_all(&work);
    result?;
    Ok(image)
}

fn kernel_in(work: &Path, package: &str, image: &Path) -> Result<(), PrepareError> {
    run(
        Command::new("apt-get").arg("download").arg(package).current_dir(work),
        &format!("apt-get download {package}"),
    )?;
    let deb = std::fs::read_dir(work)
        .map_err(io(work))?
        .flatten()
        .map(|e| e.path())
        .find(|p| p.extension().is_some_and(|e| e == "deb") && p.to_string_lossy().contains(package))
        .ok_or_else(|| PrepareError::Step {
            step: format!("apt-get download {package}"),
            detail: "no .deb appeared".into(),
        })?;
    let unpack = work.join("unpack");
    std::fs::create_dir_all(&unpack).map_err(io(&unpack))?;
    run(Command::new("dpkg-deb").arg("-x").arg(&deb).arg(&unpack), "dpkg-deb -x")?;
    let boot = unpack.join("boot");
    let bz = std::fs::read_dir(&boot)
        .map_err(io(&boot))?
        .flatten()
        .map(|e| e.path())
        .find(|p| p.file_name().is_some_and(|n| n.to_string_lossy().starts_with("vmlinuz-")))
        .ok_or_else(|| PrepareError::Step {
            step: "unpacking the kernel".into(),
            detail: "no boot/vmlinuz-*".into(),
        })?;
    let bytes = std::fs::read(&bz).map_err(io(&bz))?;
    const XZ_MAGIC: [u8; 6] = [0xFD, b'7', b'z', b'X', b'Z', 0x00];
    let at = bytes.windows(6).position(|w| w == XZ_MAGIC).ok_or_else(|| PrepareError::Step {
        step: "extracting the kernel".into(),
        detail: format!("{} holds no xz stream", bz.display()),
    })?;
    let xz_path = work.join("vmlinux.xz");
    std::fs::write(&xz_path, &bytes[at..]).map_err(io(&xz_path))?;
    let elf = run(Command::new("xz").args(["-dc", "--single-stream"]).arg(&xz_path), "xz -dc")?;
    let tmp = work.join("vmlinux");
    std::fs::write(&tmp, elf).map_err(io(&tmp))?;
    std::fs::rename(&tmp, image).map_err(io(image))?;
    Ok(())
}

fn busybox_in(work: &Path, ours: &Path) -> Result<(), PrepareError> {
    run(
        Command::new("apt-get").args(["download", "busybox-static"]).current_dir(work),
        "apt-get download busybox-static",
    )?;
    let deb = cached(work, "busybox-static").ok_or_else(|| PrepareError::Step {
        step: "apt-get download busybox-static".into(),
        detail: "no .deb appeared".into(),
    })?;
    let unpack = work.join("unpack");
    run(Command::new("dpkg-deb").arg("-x").arg(&deb).arg(&unpack), "dpkg-deb -x busybox-static")?;
    let bin = unpack.join("bin/busybox");
    let tmp = work.join("busybox");
    std::fs::copy(&bin, &tmp).map_err(io(&bin))?;
    std::fs::rename(&tmp, ours).map_err(io(ours))?;
    Ok(())
}

/// A name part no other process or thread uses at the same time.
fn unique() -> String {
    static COUNTER: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = COUNTER.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    format!("{}-{n}", std::process::id())
}

fn cached(dir: &Path, prefix: &str) -> Option<PathBuf> {
    let mut found: Vec<PathBuf> = std::fs::read_dir(dir)
        .ok()?
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            p.file_name().is_some_and(|n| {
                let n = n.to_string_lossy();
                n.starts_with(prefix) && !n.ends_with(".tmp")
            })
        })
        .collect();
    found.sort();
    found.pop()
}

/// Whether an ELF file has no program interpreter (is statically linked).
fn is_static_elf(bytes: &[u8]) -> bool {
    let u16_at = |o: usize| bytes.get(o..o + 2).map(|b| u16::from_le_bytes([b[0], b[1]]) as usize);
    let u64_at =
        |o: usize| bytes.get(o..o + 8).and_then(|b| b.try_into().ok()).map(u64::from_le_bytes).map(|v| v as usize);
    if bytes.get(..4) != Some(b"\x7fELF") || bytes.get(4) != Some(&2) {
        return false;
    }
    let (Some(phoff), Some(phentsize), Some(phnum)) = (u64_at(0x20), u16_at(0x36), u16_at(0x3a)) else {
        return false;
    };
    (0..phnum).all(|i| {
        let off = phoff + i * phentsize;
        bytes.get(off..off + 4).is_some_and(|t| t != [3, 0, 0, 0])
    })
}

/// A statically linked busybox: the system's if it is static, else one
/// unpacked from the `busybox-static` package.
fn busybox(dir: &Path) -> Result<PathBuf, PrepareError> {
    for candidate in ["/bin/busybox", "/usr/bin/busybox"] {
        if std::fs::read(candidate).is_ok_and(|b| is_static_elf(&b)) {
            return Ok(PathBuf::from(candidate));
        }
    }
    let ours = dir.join("busybox");
    if ours.is_file() {
        return Ok(ours);
    }
    need("apt-get", "download busybox-static", "apt")?;
    need("dpkg-deb", "unpack busybox-static", "dpkg")?;
    let work = dir.join(format!("work-{}", unique()));
    std::fs::create_dir_all(&work).map_err(io(&work))?;
    let result = busybox_in(&work, &ours);
    let _ = std::fs::remove_dir_all(&work);
    result?;
    Ok(ours)
}

/// Builds a custom initramfs into `cache/guest/<name>.cpio`: the static
/// busybox as `bin/busybox`, every `(guest path, host file)` in `files`
/// (made executable; parent directories created), and `init` as `/init`.
/// For tests that run their own programs in the guest (copy a dynamic
/// binary together with the libraries `ldd` names for it).
pub fn initramfs_with(
    cache: &Path,
    name: &str,
    files: &[(String, PathBuf)],
    init: &str,
) -> Result<PathBuf, PrepareError> {
    let dir = cache.join("guest");
    std::fs::create_dir_all(&dir).map_err(io(&dir))?;
    let busybox = busybox(&dir)?;
    let mut entries = vec![
        Entry::Dir("bin".into()),
        Entry::Dir("dev".into()),
        Entry::Dir("proc".into()),
        Entry::Dir("sys".into()),
        Entry::Dir("tmp".into()),
        Entry::CharDev("dev/console".into(), 5, 1),
        Entry::File("bin/busybox".into(), 0o755, std::fs::read(&busybox).map_err(io(&busybox))?),
    ];
    let mut dirs: Vec<String> = ["bin", "dev", "proc", "sys", "tmp"].iter().map(|s| s.to_string()).collect();
    for (guest, host) in files {
        let guest = guest.trim_start_matches('/');
        let mut parent = String::new();
        for part in guest.split('/').collect::<Vec<_>>().iter().rev().skip(1).rev() {
            parent = if parent.is_empty() { part.to_string() } else { format!("{parent}/{part}") };
            if !dirs.contains(&parent) {
                dirs.push(parent.clone());
                entries.push(Entry::Dir(parent.clone()));
            }
        }
        entries.push(Entry::File(guest.to_string(), 0o755, std::fs::read(host).map_err(io(host))?));
    }
    entries.push(Entry::File("init".into(), 0o755, init.as_bytes().to_vec()));
    let path = dir.join(format!("{name}.cpio"));
    let tmp = dir.join(format!("{name}.cpio.tmp"));
    std::fs::write(&tmp, cpio::pack(&entries)).map_err(io(&tmp))?;
    std::fs::rename(&tmp, &path).map_err(io(&path))?;
    Ok(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn static_elf_detection() {
        assert!(!is_static_elf(b"not an elf"));
        assert!(!is_static_elf(b"\x7fELF\x02"));
    }
}
