//! Subcommands and their shared flags.

pub mod apply;
pub mod balance;
pub mod drift;
pub mod exporter;
pub mod lint;
pub mod plan;
pub mod profile;
pub mod serve;
pub mod simulate;
pub mod top;
pub mod topology;
pub mod verify;

use clap::{Parser, Subcommand, ValueEnum};
use std::process::ExitCode;

/// NUMA placement for KVM/libvirt virtual machines.
#[derive(Parser, Debug)]
#[command(name = "numaplace", version, about, long_about = None)]
pub struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    Topology(topology::Args),
    Plan(plan::Args),
    Lint(lint::Args),
    Simulate(simulate::Args),
    Top(top::Args),
    Exporter(exporter::Args),
    Balance(balance::Args),
    Verify(verify::Args),
    Apply(apply::Args),
    Drift(drift::Args),
    Serve(serve::ServeArgs),
    Agent(serve::AgentArgs),
}

/// Output formats shared by the commands that show one thing.
#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// A compact view for people.
    Text,
    /// Stable JSON for programs (documented under docs/).
    Json,
    /// An SVG picture.
    Svg,
}

/// Output of the commands that report for people or programs
/// (`apply`, `drift`).
#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum TextOrJson {
    /// The view for people.
    Text,
    /// The same as JSON (documented on the command's page under docs/).
    Json,
}

/// Runs a parsed command line.
pub fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    match cli.command {
        Command::Topology(args) => topology::run(args),
        Command::Plan(args) => plan::run(args),
        Command::Lint(args) => lint::run(args),
        Command::Simulate(args) => simulate::run(args),
        Command::Top(args) => top::run(args),
        Command::Exporter(args) => exporter::run(args),
        Command::Balance(args) => balance::run(args),
        Command::Verify(args) => verify::run(args),
        Command::Apply(args) => apply::run(args),
        Command::Drift(args) => drift::run(args),
        Command::Serve(args) => serve::serve(args),
        Command::Agent(args) => serve::agent(args),
    }
}

/// Writes a file whole or not at all: the text goes to a temporary file
/// beside it, which is flushed to disk and then renamed over the target,
/// so a run interrupted at any point leaves the old file (or none) and
/// never half of the new one. The temporary file is removed on failure.
pub fn write_atomic(path: &std::path::Path, bytes: impl AsRef<[u8]>) -> std::io::Result<()> {
    write_then(path, bytes.as_ref(), |from, to| std::fs::rename(from, to))
}

/// [`write_atomic`] with the last step given, so a test can make it fail
/// where a crash or a full disk would.
fn write_then(
    path: &std::path::Path,
    bytes: &[u8],
    finish: impl FnOnce(&std::path::Path, &std::path::Path) -> std::io::Result<()>,
) -> std::io::Result<()> {
    use std::io::Write;
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let tmp = path.with_file_name(format!(".{name}.numaplace-{}.tmp", std::process::id()));
    let result = (|| {
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
        finish(&tmp, path)
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

/// Writes to stdout, treating a closed pipe (`| head`) as success.
pub fn print(text: &str) -> anyhow::Result<()> {
    use std::io::Write;
    quiet_pipe(stdout_raw().and_then(|mut out| out.write_all(text.as_bytes())))
}

/// A closed pipe (`| head`) is success: the reader has what it wanted.
pub fn quiet_pipe(result: std::io::Result<()>) -> anyhow::Result<()> {
    match result {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        other => Ok(other?),
    }
}

/// Standard output for text gathered before it is written: a second
/// handle on the same file, so each write is one system call. Std's own
/// handle is line buffered, which searches every chunk for its last
/// newline and copies what follows it; for a plan document that was a
/// twentieth of the cost of each VM (docs/performance.md).
#[cfg(unix)]
pub fn stdout_raw() -> std::io::Result<std::fs::File> {
    use std::io::Write;
    use std::os::fd::AsFd;
    let out = std::io::stdout();
    // Whatever was printed through std's handle goes out first.
    out.lock().flush()?;
    Ok(std::fs::File::from(out.as_fd().try_clone_to_owned()?))
}

#[cfg(not(unix))]
pub fn stdout_raw() -> std::io::Result<std::io::StdoutLock<'static>> {
    Ok(std::io::stdout().lock())
}

#[cfg(test)]
mod tests {
    use super::{write_atomic, write_then};

    /// A run interrupted between writing the new text and renaming it
    /// over the old file (here the rename fails, after the temporary file
    /// was written in full) leaves the old file whole and no temporary
    /// file behind.
    #[test]
    fn an_interrupted_write_leaves_the_old_file_whole() {
        let dir = std::env::temp_dir().join(format!("numaplace-interrupted-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let target = dir.join("db1.xml");
        std::fs::write(&target, "<domain>old</domain>\n").expect("write");
        let mut written = String::new();
        let result = write_then(&target, b"<domain>new</domain>\n", |tmp, _| {
            written = std::fs::read_to_string(tmp)?;
            Err(std::io::Error::other("interrupted"))
        });
        assert!(result.is_err());
        assert_eq!(written, "<domain>new</domain>\n", "the new text was complete before the rename");
        assert_eq!(std::fs::read_to_string(&target).expect("read"), "<domain>old</domain>\n");
        let names: Vec<String> =
            std::fs::read_dir(&dir).expect("list").flatten().map(|e| e.file_name().to_string_lossy().into()).collect();
        assert_eq!(names, vec!["db1.xml".to_string()], "no temporary file left");
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// A write that fails after the temporary file was written (here the
    /// rename, onto a directory that is not empty) leaves the target as
    /// it was and no temporary file behind.
    #[test]
    fn a_failed_write_leaves_the_old_target_and_no_temporary_file() {
        let dir = std::env::temp_dir().join(format!("numaplace-atomic-{}", std::process::id()));
        let target = dir.join("domain.xml");
        std::fs::create_dir_all(target.join("inside")).expect("dirs");
        assert!(write_atomic(&target, "<domain/>").is_err());
        assert!(target.join("inside").is_dir(), "the old target is whole");
        let names: Vec<String> =
            std::fs::read_dir(&dir).expect("list").flatten().map(|e| e.file_name().to_string_lossy().into()).collect();
        assert_eq!(names, vec!["domain.xml".to_string()], "no temporary file left");
        // A good write replaces a file whole.
        let file = dir.join("plain.xml");
        std::fs::write(&file, "old").expect("write");
        write_atomic(&file, "new").expect("written");
        assert_eq!(std::fs::read_to_string(&file).expect("read"), "new");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
