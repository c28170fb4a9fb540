//! `lint --fix` never loses output (issue 15): several fixed files go to a
//! directory, made if missing, each under its own name; a bad `--output`
//! is refused before anything is written; `--in-place` keeps each
//! original as FILE.bak.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The ESXi-style host of the lint fixtures: 2 sockets x 12 cores x 2
/// threads.
const HOST: &str = "2 sockets x 12 cores x 2 threads, 128GiB per node, hugepages 2MiB:4096 per node";

/// Fixtures with findings that `--fix` fixes on that host: three libvirt
/// domains and three `.vmx` files.
const FIXABLE: [&str; 6] = [
    "six-cells-24vcpu.xml",
    "vcpu-spans-nodes.xml",
    "numatune-remote.xml",
    "esxi-24vcpu-3x8.vmx",
    "esxi-20vcpu-5x4.vmx",
    "esxi-24vcpu-6x4.vmx",
];

fn numaplace(dir: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_numaplace")).current_dir(dir).args(args).output().expect("run numaplace")
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// A fresh directory holding copies of `names` from the lint fixtures.
fn workdir(test: &str, names: &[&str]) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("lint-fix").join(test);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("temp dir");
    for name in names {
        let from = format!("{}/../lint/tests/data/{name}", env!("CARGO_MANIFEST_DIR"));
        std::fs::copy(&from, dir.join(name)).unwrap_or_else(|e| panic!("{from}: {e}"));
    }
    dir
}

fn lint_fix(dir: &Path, files: &[&str], extra: &[&str]) -> Output {
    let mut args = vec!["lint", "--host", HOST];
    args.extend_from_slice(files);
    args.push("--fix");
    args.extend_from_slice(extra);
    numaplace(dir, &args)
}

#[test]
fn several_fixed_files_go_to_a_new_directory_each_under_its_name() {
    let dir = workdir("several", &FIXABLE);
    let o = lint_fix(&dir, &FIXABLE, &["--output", "newdir"]);
    assert!(o.status.code() == Some(0) || o.status.code() == Some(1), "{}", stderr(&o));
    for name in FIXABLE {
        let fixed = std::fs::read_to_string(dir.join("newdir").join(name)).unwrap_or_else(|e| panic!("{name}: {e}"));
        let original = std::fs::read_to_string(dir.join(name)).expect("input");
        assert_ne!(fixed, original, "{name} was fixed");
        assert!(stderr(&o).contains(&format!("wrote newdir/{name}")), "{}", stderr(&o));
    }
}

#[test]
fn a_bad_output_is_refused_before_anything_is_written() {
    let dir = workdir("bad-output", &FIXABLE);
    // A file where several outputs need a directory: refused, untouched.
    std::fs::write(dir.join("taken"), "keep me\n").expect("write");
    let o = lint_fix(&dir, &FIXABLE[..2], &["--output", "taken"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("--output taken: is a file, and 2 inputs need a directory"), "{}", stderr(&o));
    assert_eq!(std::fs::read_to_string(dir.join("taken")).expect("read"), "keep me\n");
    // Two inputs of one name would overwrite each other in the directory.
    std::fs::create_dir_all(dir.join("other")).expect("dir");
    std::fs::copy(dir.join(FIXABLE[0]), dir.join("other").join(FIXABLE[0])).expect("copy");
    let twin = format!("other/{}", FIXABLE[0]);
    let o = lint_fix(&dir, &[FIXABLE[0], &twin], &["--output", "out"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("would overwrite each other"), "{}", stderr(&o));
    assert!(!dir.join("out").exists(), "nothing written, no directory made");
    // One input may still be written to a file name.
    let o = lint_fix(&dir, &[FIXABLE[0]], &["--output", "one.xml"]);
    assert!(o.status.code() != Some(2), "{}", stderr(&o));
    assert!(std::fs::read_to_string(dir.join("one.xml")).expect("written").contains("<domain"));
}

#[test]
fn in_place_keeps_the_original_as_a_backup_unless_told_not_to() {
    let dir = workdir("in-place", &FIXABLE[..2]);
    let before = std::fs::read(dir.join(FIXABLE[0])).expect("input");
    let o = lint_fix(&dir, &FIXABLE[..1], &["--in-place"]);
    assert!(o.status.code() != Some(2), "{}", stderr(&o));
    assert_eq!(std::fs::read(dir.join(format!("{}.bak", FIXABLE[0]))).expect("backup"), before);
    assert_ne!(std::fs::read(dir.join(FIXABLE[0])).expect("fixed"), before);
    let o = lint_fix(&dir, &FIXABLE[1..2], &["--in-place", "--no-backup"]);
    assert!(o.status.code() != Some(2), "{}", stderr(&o));
    assert!(!dir.join(format!("{}.bak", FIXABLE[1])).exists());
    // No temporary file is left beside them.
    let left: Vec<String> = std::fs::read_dir(&dir)
        .expect("list")
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".tmp"))
        .collect();
    assert!(left.is_empty(), "{left:?}");
}
