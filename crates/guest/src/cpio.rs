//! A writer for the kernel's initramfs format (cpio "newc"), so building
//! the test initramfs needs neither root (device nodes are just headers)
//! nor a cpio program (Debian's is not installed by default).

/// One entry of the archive.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Entry {
    /// A directory.
    Dir(String),
    /// A regular file with its mode bits (e.g. 0o755) and contents.
    File(String, u32, Vec<u8>),
    /// A character device (`dev/console` is 5:1).
    CharDev(String, u32, u32),
}

fn header(out: &mut Vec<u8>, ino: u32, mode: u32, size: usize, rdev: (u32, u32), name: &str) {
    let name_len = name.len() + 1;
    let fields = [ino, mode, 0, 0, 1, 0, size as u32, 0, 0, rdev.0, rdev.1, name_len as u32, 0];
    out.extend_from_slice(b"070701");
    for f in fields {
        out.extend_from_slice(format!("{f:08X}").as_bytes());
    }
    out.extend_from_slice(name.as_bytes());
    out.push(0);
    pad(out);
}

fn pad(out: &mut Vec<u8>) {
    while !out.len().is_multiple_of(4) {
        out.push(0);
    }
}

/// Packs entries into a newc archive (uncompressed; the kernel accepts it).
pub fn pack(entries: &[Entry]) -> Vec<u8> {
    let mut out = Vec::new();
    for (i, e) in entries.iter().enumerate() {
        let ino = i as u32 + 1;
        match e {
            Entry::Dir(name) => header(&mut out, ino, 0o040_755, 0, (0, 0), name),
            Entry::File(name, mode, data) => {
                header(&mut out, ino, 0o100_000 | mode, data.len(), (0, 0), name);
                out.extend_from_slice(data);
                pad(&mut out);
            }
            Entry::CharDev(name, major, minor) => header(&mut out, ino, 0o020_600, 0, (*major, *minor), name),
        }
    }
    header(&mut out, 0, 0, 0, (0, 0), "TRAILER!!!");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_are_aligned_and_terminated() {
        let archive = pack(&[Entry::Dir("bin".into()), Entry::File("init".into(), 0o755, b"#!x\n".to_vec())]);
        assert!(archive.starts_with(b"070701"));
        assert_eq!(archive.len() % 4, 0);
        let text = String::from_utf8_lossy(&archive);
        assert!(text.contains("TRAILER!!!"));
        // The file's header says 4 bytes of data and its name length with NUL.
        let file_header = text.find("init").expect("file entry");
        let head = &text[file_header - 110..file_header];
        assert_eq!(&head[54..62], "00000004", "file size field");
        assert_eq!(&head[94..102], "00000005", "name size field");
    }
}
