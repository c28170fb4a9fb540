//! For the workspace's own tests, not for users: a real PostgreSQL server
//! run as an ordinary process for the length of a test binary, and the
//! skip-or-fail rule of `numaplace_testkit` for machines that lack it: a
//! developer without PostgreSQL's server sees the tests that need it skip,
//! loudly; CI (`scripts/test` sets [`REQUIRE_TOOLS`]) fails them instead,
//! so it never passes a test that did not run.
//!
//! The server lives in a fresh directory under the system's temporary
//! directory, listens on a free port of 127.0.0.1 with `trust`
//! authentication, and keeps `fsync` on: tests that kill servers expect
//! what was committed to stay committed. As root (CI) it runs as the
//! `postgres` user, or `nobody`, since PostgreSQL refuses to run as root.

use std::os::unix::fs::MetadataExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Mutex, OnceLock, PoisonError};
use std::time::{Duration, Instant};

pub use numaplace_testkit::{skip, REQUIRE_TOOLS};

/// How long a starting server may take to accept connections.
const START_TIMEOUT: Duration = Duration::from_secs(30);

/// A PostgreSQL server of its own for a test binary. Stopped, and its
/// directory removed, on drop; a helper process does the same if the test
/// binary dies first or the server sits in a `static` (which Rust never
/// drops).
pub struct Postgres {
    bin: PathBuf,
    /// Holds the data directory, the socket and the log.
    dir: PathBuf,
    port: u16,
    /// The uid and gid the server runs as, when not as this process's own.
    user: Option<Ids>,
    /// The helper that cleans up after a dead test binary: it waits for
    /// its standard input, which only this process holds, to close.
    reaper: Mutex<Option<Child>>,
    /// CREATE DATABASE copies a template: one at a time.
    creating: Mutex<()>,
}

impl Postgres {
    /// Starts a server, or returns None after [`skip`] when PostgreSQL's
    /// server programs are not installed. Panics when they are but the
    /// server does not start.
    #[track_caller]
    pub fn start() -> Option<Postgres> {
        match prerequisites() {
            Ok((bin, user)) => Some(Postgres::init(bin, user)),
            Err(why) => {
                skip(why);
                None
            }
        }
    }

    /// One server for the whole test binary, started by the first test
    /// that asks; None (after [`skip`]) as [`Postgres::start`]. Tests that
    /// share it should each use their own database
    /// ([`Postgres::fresh_database`]) and must not stop it.
    #[track_caller]
    pub fn shared() -> Option<&'static Postgres> {
        static SHARED: OnceLock<Result<Postgres, &'static str>> = OnceLock::new();
        match SHARED.get_or_init(|| prerequisites().map(|(bin, user)| Postgres::init(bin, user))) {
            Ok(server) => Some(server),
            Err(why) => {
                skip(why);
                None
            }
        }
    }

    fn init(bin: PathBuf, user: Option<Ids>) -> Postgres {
        static SERIAL: AtomicU32 = AtomicU32::new(0);
        let dir = std::env::temp_dir().join(format!(
            "numaplace-pg-{}-{}",
            std::process::id(),
            SERIAL.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&dir);
        if let Err(e) = std::fs::create_dir_all(&dir) {
            panic!("cannot create {}: {e}", dir.display());
        }
        if let Some((uid, gid)) = user {
            if let Err(e) = std::os::unix::fs::chown(&dir, Some(uid), Some(gid)) {
                panic!("cannot hand {} to uid {uid}: {e}", dir.display());
            }
        }
        let reaper = spawn_reaper(&dir);
        let mut server = Postgres { bin, dir, port: 0, user, reaper: Mutex::new(reaper), creating: Mutex::new(()) };
        let data = server.data();
        let mut initdb = server.command("initdb");
        initdb.arg("-D").arg(&data).args([
            "-U",
            "postgres",
            "--auth=trust",
            "-E",
            "UTF8",
            "--no-locale",
            // Only skips syncing initdb's own files; the server fsyncs.
            "--no-sync",
        ]);
        run(&mut initdb, "initdb");
        // A port that was free a moment ago may be taken by the time the
        // server binds it: try a few.
        let mut last = String::new();
        for _ in 0..5 {
            server.port = free_port();
            match server.try_start() {
                Ok(()) => return server,
                Err(log) => last = log,
            }
        }
        panic!("PostgreSQL did not start:\n{last}");
    }

    /// The URL of the `postgres` database, as user `postgres`.
    pub fn url(&self) -> String {
        self.url_for("postgres")
    }

    /// The URL of database `db`.
    pub fn url_for(&self, db: &str) -> String {
        format!("postgres://postgres@127.0.0.1:{}/{db}", self.port)
    }

    /// The port the server listens on.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Creates database `name` (letters, digits and `_`) and returns its
    /// URL. Panics if it cannot.
    pub fn create_database(&self, name: &str) -> String {
        assert!(name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'), "bad database name {name:?}");
        let _one = self.creating.lock().unwrap_or_else(PoisonError::into_inner);
        let mut client = match postgres::Client::connect(&self.url(), postgres::NoTls) {
            Ok(c) => c,
            Err(e) => panic!("cannot connect to {}: {e}", self.url()),
        };
        if let Err(e) = client.batch_execute(&format!("CREATE DATABASE \"{name}\"")) {
            panic!("cannot create database {name}: {e}");
        }
        self.url_for(name)
    }

    /// Creates a database no other caller gets, and returns its URL.
    pub fn fresh_database(&self) -> String {
        static SERIAL: AtomicU32 = AtomicU32::new(0);
        self.create_database(&format!("test_{}", SERIAL.fetch_add(1, Ordering::Relaxed)))
    }

    /// Stops the server as an administrator would (`pg_ctl stop -m
    /// fast`): connected clients are told it is shutting down. Waits until
    /// it has.
    pub fn stop(&self) {
        self.pg_ctl_stop("fast");
    }

    /// Stops the server at once, as a crash would (`pg_ctl stop -m
    /// immediate`): the next start recovers from the WAL.
    pub fn stop_immediate(&self) {
        self.pg_ctl_stop("immediate");
    }

    /// Starts the stopped server again, on the same port; returns once it
    /// accepts connections. Panics if it does not.
    pub fn start_again(&self) {
        if let Err(log) = self.try_start() {
            panic!("PostgreSQL did not start again:\n{log}");
        }
    }

    /// Freezes the server, as a stalled host, a full disk or a stuck
    /// storage array would: SIGSTOP to the postmaster and every backend.
    /// Connections stay open and the kernel still accepts new ones, but
    /// nothing answers until [`Postgres::resume`]. Panics if it cannot.
    pub fn pause(&self) {
        self.signal_all("STOP");
    }

    /// Lets a [`Postgres::pause`]d server run again (SIGCONT).
    pub fn resume(&self) {
        self.signal_all("CONT");
    }

    /// The server's processes: the postmaster first, then its children
    /// (backends, checkpointer, WAL writer...). Benches read their CPU
    /// time from /proc. Panics when the server is not running.
    pub fn pids(&self) -> Vec<u32> {
        let pid_file = self.data().join("postmaster.pid");
        let postmaster: u32 = std::fs::read_to_string(&pid_file)
            .ok()
            .and_then(|t| t.lines().next().and_then(|l| l.trim().parse().ok()))
            .unwrap_or_else(|| panic!("no server pid in {}", pid_file.display()));
        let mut pids = vec![postmaster];
        for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
            let Some(pid) = entry.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else { continue };
            // `pid (comm) state ppid ...`; comm may hold spaces and parentheses.
            let stat = std::fs::read_to_string(entry.path().join("stat")).unwrap_or_default();
            let ppid = stat.rsplit_once(')').and_then(|(_, rest)| rest.split_whitespace().nth(1)?.parse::<u32>().ok());
            if ppid == Some(postmaster) {
                pids.push(pid);
            }
        }
        pids
    }

    /// Sends `signal` to the postmaster first (so it forks no backend in
    /// between), then to its children.
    fn signal_all(&self, signal: &str) {
        let pids = self.pids();
        let status = Command::new("kill")
            .arg(format!("-{signal}"))
            .args(pids.iter().map(u32::to_string))
            .status()
            .unwrap_or_else(|e| panic!("kill -{signal} did not run: {e}"));
        assert!(status.success(), "kill -{signal} {pids:?} failed");
    }

    /// [`Postgres::stop`] then [`Postgres::start_again`].
    pub fn restart(&self) {
        self.stop();
        self.start_again();
    }

    fn data(&self) -> PathBuf {
        self.dir.join("data")
    }

    fn log(&self) -> PathBuf {
        self.dir.join("log")
    }

    /// A command for one of the server's programs, run as the server's
    /// user.
    fn command(&self, program: &str) -> Command {
        let mut cmd = Command::new(self.bin.join(program));
        // The test's working directory may be closed to the server's user.
        cmd.current_dir(&self.dir);
        if let Some((uid, gid)) = self.user {
            cmd.uid(uid).gid(gid);
        }
        cmd
    }

    /// Starts the server; on failure returns its log.
    fn try_start(&self) -> Result<(), String> {
        // Tests run in parallel, each store with a pool of its own: more
        // connections than the default 100 may be open at once.
        let options = format!(
            "-p {} -k '{}' -c listen_addresses=127.0.0.1 -c fsync=on -c synchronous_commit=on -c max_connections=300",
            self.port,
            self.dir.display()
        );
        let mut cmd = self.command("pg_ctl");
        // -l sends the server's output to the log: without it the server
        // would hold pg_ctl's stdout, and reading it would never end.
        cmd.args(["start", "-w", "-t", "60", "-D"]).arg(self.data()).arg("-l").arg(self.log()).args(["-o", &options]);
        let out = match cmd.output() {
            Ok(o) => o,
            Err(e) => return Err(format!("pg_ctl did not run: {e}")),
        };
        if !out.status.success() {
            let _ = self.command("pg_ctl").args(["stop", "-m", "immediate", "-D"]).arg(self.data()).output();
            return Err(format!(
                "{}{}\n{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr),
                std::fs::read_to_string(self.log()).unwrap_or_default()
            ));
        }
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            match postgres::Client::connect(&self.url(), postgres::NoTls) {
                Ok(_) => return Ok(()),
                Err(e) if Instant::now() > deadline => {
                    return Err(format!(
                        "not accepting connections after {} s: {e}\n{}",
                        START_TIMEOUT.as_secs(),
                        std::fs::read_to_string(self.log()).unwrap_or_default()
                    ))
                }
                Err(_) => std::thread::sleep(Duration::from_millis(50)),
            }
        }
    }

    fn pg_ctl_stop(&self, mode: &str) {
        let mut cmd = self.command("pg_ctl");
        cmd.args(["stop", "-w", "-t", "60", "-m", mode, "-D"]).arg(self.data());
        run(&mut cmd, "pg_ctl stop");
    }
}

impl Drop for Postgres {
    fn drop(&mut self) {
        let _ = self.command("pg_ctl").args(["stop", "-w", "-m", "immediate", "-D"]).arg(self.data()).output();
        let _ = std::fs::remove_dir_all(&self.dir);
        let reaper = self.reaper.get_mut().unwrap_or_else(PoisonError::into_inner).take();
        if let Some(mut reaper) = reaper {
            // Closing its input lets it finish (finding nothing to do).
            drop(reaper.stdin.take());
            let _ = reaper.wait();
        }
    }
}

/// A user's uid and gid.
type Ids = (u32, u32);

/// Where the server's programs are, and whom to run them as; or why the
/// server cannot run here.
fn prerequisites() -> Result<(PathBuf, Option<Ids>), &'static str> {
    let bin = find_bin().ok_or("PostgreSQL's server (`initdb`, `pg_ctl`, `postgres`) is not installed")?;
    if !running_as_root() {
        return Ok((bin, None));
    }
    match unprivileged_user() {
        Some(ids) => Ok((bin, Some(ids))),
        None => Err("running as root, and neither a `postgres` nor a `nobody` user exists to run PostgreSQL as"),
    }
}

/// The directory holding `initdb`, `pg_ctl` and `postgres`: on `PATH`, or
/// where Debian's packages put them (newest version first).
fn find_bin() -> Option<PathBuf> {
    let complete = |d: &Path| ["initdb", "pg_ctl", "postgres"].iter().all(|p| executable(&d.join(p)));
    if let Some(paths) = std::env::var_os("PATH") {
        if let Some(d) = std::env::split_paths(&paths).find(|d| complete(d)) {
            return Some(d);
        }
    }
    let mut versions: Vec<(Vec<u32>, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .ok()?
        .filter_map(Result::ok)
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            let version = name.split('.').map(|p| p.parse::<u32>().ok()).collect::<Option<Vec<u32>>>()?;
            Some((version, e.path().join("bin")))
        })
        .filter(|(_, d)| complete(d))
        .collect();
    versions.sort();
    versions.pop().map(|(_, d)| d)
}

fn executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    path.metadata().is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

fn running_as_root() -> bool {
    // /proc/self belongs to the process's user; no libc call needed.
    std::fs::metadata("/proc/self").is_ok_and(|m| m.uid() == 0)
}

/// The uid and gid of `postgres` (which Debian's package creates) or else
/// `nobody`.
fn unprivileged_user() -> Option<Ids> {
    let id = |flag: &str, user: &str| -> Option<u32> {
        let out = Command::new("id").args([flag, user]).stderr(Stdio::null()).output().ok()?;
        if !out.status.success() {
            return None;
        }
        String::from_utf8_lossy(&out.stdout).trim().parse().ok()
    };
    ["postgres", "nobody"].iter().find_map(|user| Some((id("-u", user)?, id("-g", user)?)))
}

fn free_port() -> u16 {
    match std::net::TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()) {
        Ok(addr) => addr.port(),
        Err(e) => panic!("no free port on 127.0.0.1: {e}"),
    }
}

fn run(cmd: &mut Command, what: &str) {
    match cmd.output() {
        Ok(out) if out.status.success() => {}
        Ok(out) => panic!(
            "{what} failed ({}):\n{}{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
        Err(e) => panic!("{what} did not run: {e}"),
    }
}

/// A shell that waits for its standard input to close, which happens when
/// this process drops the [`Postgres`] or dies, however it dies; it then
/// stops the server the quickest way and removes the directory.
fn spawn_reaper(dir: &Path) -> Option<Child> {
    const SCRIPT: &str = r#"
        read -r _
        pid=$(head -n 1 "$1/data/postmaster.pid" 2>/dev/null)
        if [ -n "$pid" ] && kill -QUIT "$pid" 2>/dev/null; then
            i=0
            while kill -0 "$pid" 2>/dev/null && [ "$i" -lt 100 ]; do sleep 0.1; i=$((i + 1)); done
        fi
        rm -rf "$1"
    "#;
    Command::new("sh")
        .args(["-c", SCRIPT, "numaplace-pg-reaper"])
        .arg(dir)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        // Its own process group: a ^C to the tests does not kill it before
        // it has cleaned up.
        .process_group(0)
        .spawn()
        .ok()
}

/// A raw connection to a test database, for tests outside this crate that
/// must act as another writer would (hold a transaction open, read a
/// row) without a SQL client of their own.
pub struct Session(postgres::Client);

impl Session {
    /// Connects to `url`. Panics if it cannot.
    pub fn connect(url: &str) -> Session {
        match postgres::Client::connect(url, postgres::NoTls) {
            Ok(c) => Session(c),
            Err(e) => panic!("cannot connect to {url}: {e}"),
        }
    }

    /// Runs statements (several, `;`-separated, may open a transaction
    /// left open until a later call). Panics on error.
    pub fn run(&mut self, sql: &str) {
        if let Err(e) = self.0.batch_execute(sql) {
            panic!("{sql}: {e}");
        }
    }

    /// The first column of the one row `sql` returns, as an integer.
    pub fn int(&mut self, sql: &str) -> i64 {
        match self.0.query_one(sql, &[]) {
            Ok(row) => row.get(0),
            Err(e) => panic!("{sql}: {e}"),
        }
    }
}
