//! numaplace's edge to libvirt: owns the libvirt domain format
//! ([`domain`]: read a domain into what it holds, write a whole domain,
//! splice NUMA elements into an operator's own), turns a domain into the
//! placement a host state records ([`held`], [`host_state`]), reads a
//! host's domains as host state ([`state`]), applies plans to domains
//! ([`apply`]) and compares what runs with a plan ([`drift`]).
//!
//! Everything libvirt is reached through the small [`Libvirt`] trait. The
//! live implementation, [`Virsh`], is the workspace's one runner of the
//! `virsh` program: the guest harness defines, starts and removes its test
//! domains through it, and the balancer's live pinning ([`LivePin`],
//! observe's `Pin` for libvirt domains) re-pins through the trait (see
//! ARCHITECTURE.md for why not the `virt` binding: it links libvirt's C
//! library, which the first command of the README must not need);
//! [`DumpDir`] is a directory of `virsh dumpxml` files, read-only, for
//! hosts out of reach and for tests on multi-node fixtures. The decisions
//! (what to change, what differs) are pure functions over the values the
//! trait returns.

pub mod apply;
pub mod check;
pub mod domain;
pub mod drift;
mod held;
mod parse;
mod pin;
pub mod state;

use numaplace_topo::CpuSet;
use std::path::{Path, PathBuf};
use std::process::Command;

pub use held::{held, host_state, Held, HeldHost, HeldWarning};
pub use parse::{parse_emulatorpin, parse_vcpuinfo, VcpuInfo};
pub use pin::LivePin;

/// The URI `--state libvirt` and `--connect` use when none is given.
pub const DEFAULT_URI: &str = "qemu:///system";

/// A libvirt failure: which command, and what libvirt said.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum VirtError {
    /// A command failed.
    #[error("{command}: {message}")]
    Command {
        /// The command (`virsh -c qemu:///system define /tmp/...`).
        command: String,
        /// What it printed on standard error.
        message: String,
    },
    /// A reply that does not read as expected.
    #[error("{command}: unexpected reply: {message}")]
    Reply {
        /// The command.
        command: String,
        /// What was wrong with the reply.
        message: String,
    },
    /// A change asked of a read-only source (a dump directory).
    #[error("{0} is a directory of domain XML files: it can be read, not changed")]
    ReadOnly(String),
    /// A file of a dump directory could not be read.
    #[error("{path}: {message}")]
    File {
        /// The file.
        path: String,
        /// Why.
        message: String,
    },
}

impl VirtError {
    /// libvirt said no domain of the name is defined (`failed to get
    /// domain`, `Domain not found`): on a live host, one undefined since
    /// it was listed.
    pub fn is_no_domain(&self) -> bool {
        match self {
            VirtError::Command { message, .. } => {
                message.contains("failed to get domain") || message.contains("Domain not found")
            }
            _ => false,
        }
    }
}

impl VirtError {
    /// libvirt said the domain does not run (it stopped since it was
    /// read): its live threads cannot be read or pinned.
    pub fn is_not_running(&self) -> bool {
        matches!(self, VirtError::Command { message, .. } if message.contains("domain is not running"))
    }
}

/// One defined domain.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Domain {
    /// Its name.
    pub name: String,
    /// Whether it runs (or is paused): its live definition is in force.
    pub running: bool,
    /// Its definition: the live one when it runs, else the persistent one.
    pub xml: String,
    /// Where its definition was read, for messages: `libvirt:URI/NAME`,
    /// or the dump directory's file (`DIR/NAME.xml`).
    pub file: String,
}

/// A host's domains as one listing found them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Listing {
    /// The domains read, by name.
    pub domains: Vec<Domain>,
    /// Domains listed but undefined before their definition could be
    /// read: on a busy host VMs come and go between two virsh calls, and
    /// one that is gone holds nothing.
    pub vanished: Vec<String>,
}

/// What numaplace asks of libvirt.
pub trait Libvirt {
    /// Where it connects (`qemu:///system`, or the directory).
    fn describe(&self) -> String;
    /// Every defined domain, running or not, by name, and those that
    /// vanished while they were read.
    fn domains(&self) -> Result<Listing, VirtError>;
    /// One domain (live definition when it runs), `None` when undefined.
    fn domain(&self, name: &str) -> Result<Option<Domain>, VirtError>;
    /// The persistent definition of a domain (what the next start uses).
    fn persistent_xml(&self, name: &str) -> Result<String, VirtError>;
    /// Defines (or redefines) a domain from XML; libvirt validates it.
    fn define(&mut self, xml: &str) -> Result<(), VirtError>;
    /// Pins one vCPU of a running domain, now (not its definition).
    fn pin_vcpu_live(&mut self, name: &str, vcpu: u32, cpus: &CpuSet) -> Result<(), VirtError>;
    /// Pins a running domain's emulator threads, now.
    fn pin_emulator_live(&mut self, name: &str, cpus: &CpuSet) -> Result<(), VirtError>;
    /// Changes a running domain's memory nodes (strict mode), now.
    fn numatune_live(&mut self, name: &str, nodes: &CpuSet) -> Result<(), VirtError>;
    /// Where each vCPU of a running domain runs and may run.
    fn vcpu_info(&self, name: &str) -> Result<Vec<VcpuInfo>, VirtError>;
    /// The CPUs a running domain's emulator threads may use.
    fn emulator_affinity(&self, name: &str) -> Result<CpuSet, VirtError>;
    /// Pins one I/O thread of a running domain, now. (Sources that
    /// cannot change anything keep the default refusal.)
    fn pin_iothread_live(&mut self, name: &str, iothread: u32, cpus: &CpuSet) -> Result<(), VirtError> {
        let _ = (name, iothread, cpus);
        Err(VirtError::ReadOnly(self.describe()))
    }
    /// The CPUs each I/O thread of a running domain may use, by id.
    fn iothread_affinity(&self, name: &str) -> Result<Vec<(u32, CpuSet)>, VirtError> {
        let _ = name;
        Err(VirtError::ReadOnly(self.describe()))
    }
    /// Removes a domain's persistent definition (apply's undo of a domain
    /// it defined, when a later write of the same transaction fails).
    fn undefine(&mut self, name: &str) -> Result<(), VirtError> {
        let _ = name;
        Err(VirtError::ReadOnly(self.describe()))
    }
}

/// libvirt through the `virsh` program: the one place numaplace runs it.
#[derive(Clone, Debug)]
pub struct Virsh {
    /// `None`: libvirt's default connection (`LIBVIRT_DEFAULT_URI`, else
    /// `qemu:///system` for root), as a bare `virsh` reaches it.
    uri: Option<String>,
}

impl Virsh {
    /// A connection to `uri` (`qemu:///system`).
    pub fn new(uri: &str) -> Virsh {
        Virsh { uri: Some(uri.to_string()) }
    }

    /// libvirt's default connection, as `virsh` without `-c` chooses it.
    pub fn default_connection() -> Virsh {
        Virsh { uri: None }
    }

    /// Whether a `virsh` program is on `PATH`.
    pub fn available() -> bool {
        std::env::var_os("PATH").is_some_and(|p| std::env::split_paths(&p).any(|d| d.join("virsh").is_file()))
    }

    /// Starts a defined domain.
    pub fn start(&mut self, name: &str) -> Result<(), VirtError> {
        self.run(&["start", "--", name]).map(|_| ())
    }

    /// Stops a running domain at once (`virsh destroy`: the power cut,
    /// not a shutdown request).
    pub fn destroy(&mut self, name: &str) -> Result<(), VirtError> {
        self.run(&["destroy", "--", name]).map(|_| ())
    }

    /// Removes a domain's persistent definition.
    pub fn undefine(&mut self, name: &str) -> Result<(), VirtError> {
        self.run(&["undefine", "--", name]).map(|_| ())
    }

    /// A domain's state as `virsh domstate` words it (`running`, `shut
    /// off`, ...).
    pub fn state(&self, name: &str) -> Result<String, VirtError> {
        Ok(self.run(&["domstate", "--", name])?.trim().to_string())
    }

    /// libvirt's and the hypervisor's versions (`virsh version`): whether
    /// the daemon answers.
    pub fn version(&self) -> Result<String, VirtError> {
        self.run(&["version"])
    }

    /// Runs `virsh [-c URI] args...`: its standard output, or the command
    /// and what virsh said.
    fn run(&self, args: &[&str]) -> Result<String, VirtError> {
        let connect: Vec<&str> = self.uri.as_deref().map_or_else(Vec::new, |uri| vec!["-c", uri]);
        let command = format!("virsh {}", connect.iter().chain(args).copied().collect::<Vec<_>>().join(" "));
        let out = Command::new("virsh").args(&connect).args(args).output().map_err(|e| VirtError::Command {
            command: command.clone(),
            message: format!("cannot run virsh: {e} (install the libvirt-clients package)"),
        })?;
        if out.status.success() {
            Ok(String::from_utf8_lossy(&out.stdout).into_owned())
        } else {
            Err(VirtError::Command { command, message: String::from_utf8_lossy(&out.stderr).trim().to_string() })
        }
    }

    /// Every defined domain's name, running or not.
    fn names(&self) -> Result<Vec<String>, VirtError> {
        let out = self.run(&["list", "--all", "--name"])?;
        Ok(out.lines().map(str::trim).filter(|l| !l.is_empty()).map(str::to_string).collect())
    }

    /// A domain's definition (the live one when it runs), `None` when no
    /// domain of that name is defined any more: libvirt says so, or the
    /// domain is no longer listed after `dumpxml` failed. Any other
    /// failure of a listed domain is an error.
    fn dump(&self, name: &str) -> Result<Option<Domain>, VirtError> {
        let file = format!("{}/{name}", self.describe());
        match self.run(&["dumpxml", "--", name]) {
            Ok(xml) => Ok(Some(Domain { name: name.to_string(), running: parse::is_live(&xml), xml, file })),
            // Undefined since it was listed (and perhaps defined again
            // since: that one is read next time).
            Err(e) if e.is_no_domain() => Ok(None),
            Err(e) => {
                if self.names()?.iter().any(|n| n == name) {
                    return Err(e);
                }
                Ok(None)
            }
        }
    }
}

impl Libvirt for Virsh {
    fn describe(&self) -> String {
        match &self.uri {
            Some(uri) => format!("libvirt:{uri}"),
            None => "libvirt".to_string(),
        }
    }

    fn domains(&self) -> Result<Listing, VirtError> {
        // One listing, then each definition: a domain undefined in between
        // is skipped (and said), one defined in between is read next time.
        // Whether a domain runs is read from the definition itself (a live
        // one carries its `id`), not from a second listing, so a domain
        // that starts or stops meanwhile is read in the state it is found.
        let mut all = self.names()?;
        all.sort();
        let mut out = Listing::default();
        for name in all {
            match self.dump(&name)? {
                Some(d) => out.domains.push(d),
                None => out.vanished.push(name),
            }
        }
        Ok(out)
    }

    fn domain(&self, name: &str) -> Result<Option<Domain>, VirtError> {
        self.dump(name)
    }

    fn persistent_xml(&self, name: &str) -> Result<String, VirtError> {
        self.run(&["dumpxml", "--inactive", "--", name])
    }

    fn define(&mut self, xml: &str) -> Result<(), VirtError> {
        // virsh reads the definition from a file: a private temporary one,
        // removed whatever happens; one per call, as threads of one
        // process (the guest harness's tests) define at once.
        static DEFINES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let n = DEFINES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("numaplace-define-{}-{n}", std::process::id()));
        std::fs::create_dir_all(&dir)
            .map_err(|e| VirtError::File { path: dir.display().to_string(), message: e.to_string() })?;
        let path = dir.join("domain.xml");
        let result = std::fs::write(&path, xml)
            .map_err(|e| VirtError::File { path: path.display().to_string(), message: e.to_string() })
            .and_then(|()| self.run(&["define", "--validate", &path.to_string_lossy()]));
        let _ = std::fs::remove_dir_all(&dir);
        result.map(|_| ())
    }

    fn pin_vcpu_live(&mut self, name: &str, vcpu: u32, cpus: &CpuSet) -> Result<(), VirtError> {
        let v = vcpu.to_string();
        let list = cpus.to_list();
        self.run(&["vcpupin", "--domain", name, "--vcpu", &v, "--cpulist", &list, "--live"]).map(|_| ())
    }

    fn pin_emulator_live(&mut self, name: &str, cpus: &CpuSet) -> Result<(), VirtError> {
        self.run(&["emulatorpin", "--domain", name, "--cpulist", &cpus.to_list(), "--live"]).map(|_| ())
    }

    fn numatune_live(&mut self, name: &str, nodes: &CpuSet) -> Result<(), VirtError> {
        self.run(&["numatune", "--domain", name, "--nodeset", &nodes.to_list(), "--live"]).map(|_| ())
    }

    fn vcpu_info(&self, name: &str) -> Result<Vec<VcpuInfo>, VirtError> {
        let out = self.run(&["vcpuinfo", "--pretty", "--domain", name])?;
        parse_vcpuinfo(&out).map_err(|message| VirtError::Reply { command: format!("virsh vcpuinfo {name}"), message })
    }

    fn emulator_affinity(&self, name: &str) -> Result<CpuSet, VirtError> {
        let out = self.run(&["emulatorpin", "--domain", name, "--live"])?;
        parse_emulatorpin(&out)
            .map_err(|message| VirtError::Reply { command: format!("virsh emulatorpin {name}"), message })
    }

    fn pin_iothread_live(&mut self, name: &str, iothread: u32, cpus: &CpuSet) -> Result<(), VirtError> {
        let id = iothread.to_string();
        self.run(&["iothreadpin", "--domain", name, "--iothread", &id, "--cpulist", &cpus.to_list(), "--live"])
            .map(|_| ())
    }

    fn iothread_affinity(&self, name: &str) -> Result<Vec<(u32, CpuSet)>, VirtError> {
        let out = self.run(&["iothreadinfo", "--domain", name, "--live"])?;
        parse::parse_iothreadinfo(&out)
            .map_err(|message| VirtError::Reply { command: format!("virsh iothreadinfo {name}"), message })
    }

    fn undefine(&mut self, name: &str) -> Result<(), VirtError> {
        Virsh::undefine(self, name)
    }
}

/// A directory of domain XML files (`virsh dumpxml NAME > DIR/NAME.xml`),
/// a domain running when its dump has the live `id=`: read-only.
#[derive(Clone, Debug)]
pub struct DumpDir {
    dir: PathBuf,
}

/// Largest domain XML file a dump directory may hold: real definitions
/// are a few KiB; anything near this is not one.
const MAX_DUMP_BYTES: u64 = 16 << 20;

impl DumpDir {
    /// The directory.
    pub fn new(dir: &Path) -> DumpDir {
        DumpDir { dir: dir.to_path_buf() }
    }

    fn files(&self) -> Result<Vec<PathBuf>, VirtError> {
        let err = |e: std::io::Error| VirtError::File { path: self.dir.display().to_string(), message: e.to_string() };
        let mut out: Vec<PathBuf> = std::fs::read_dir(&self.dir)
            .map_err(err)?
            .filter_map(Result::ok)
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|x| x == "xml") && p.is_file())
            .collect();
        out.sort();
        Ok(out)
    }
}

impl Libvirt for DumpDir {
    fn describe(&self) -> String {
        self.dir.display().to_string()
    }

    fn domains(&self) -> Result<Listing, VirtError> {
        let files = self.files()?;
        let domains = files
            .into_iter()
            .map(|path| {
                let shown = path.display().to_string();
                let len = path.metadata().map(|m| m.len()).unwrap_or(0);
                if len > MAX_DUMP_BYTES {
                    return Err(VirtError::File {
                        path: shown,
                        message: format!("{len} bytes: a domain XML file is expected, at most 16 MiB"),
                    });
                }
                let xml = std::fs::read_to_string(&path)
                    .map_err(|e| VirtError::File { path: shown.clone(), message: e.to_string() })?;
                let name = parse::domain_name(&xml)
                    .unwrap_or_else(|| path.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default());
                // Running only when the dump is a live definition (libvirt
                // gives a running domain's root element its `id`): `virsh
                // dumpxml --inactive`, or a stopped domain's, is not.
                Ok(Domain { name, running: parse::is_live(&xml), xml, file: shown })
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Listing { domains, vanished: Vec::new() })
    }

    fn domain(&self, name: &str) -> Result<Option<Domain>, VirtError> {
        Ok(self.domains()?.domains.into_iter().find(|d| d.name == name))
    }

    fn persistent_xml(&self, name: &str) -> Result<String, VirtError> {
        self.domain(name)?
            .map(|d| d.xml)
            .ok_or_else(|| VirtError::File { path: self.describe(), message: format!("no domain named {name}") })
    }

    fn define(&mut self, _: &str) -> Result<(), VirtError> {
        Err(VirtError::ReadOnly(self.describe()))
    }

    fn pin_vcpu_live(&mut self, _: &str, _: u32, _: &CpuSet) -> Result<(), VirtError> {
        Err(VirtError::ReadOnly(self.describe()))
    }

    fn pin_emulator_live(&mut self, _: &str, _: &CpuSet) -> Result<(), VirtError> {
        Err(VirtError::ReadOnly(self.describe()))
    }

    fn numatune_live(&mut self, _: &str, _: &CpuSet) -> Result<(), VirtError> {
        Err(VirtError::ReadOnly(self.describe()))
    }

    fn vcpu_info(&self, _: &str) -> Result<Vec<VcpuInfo>, VirtError> {
        Err(VirtError::ReadOnly(self.describe()))
    }

    fn emulator_affinity(&self, _: &str) -> Result<CpuSet, VirtError> {
        Err(VirtError::ReadOnly(self.describe()))
    }
}

/// [`open`] for a command's `--state`: a dump directory without any
/// domain XML file is refused, since for a command that plans or checks
/// against it, an empty directory is far likelier a wrong path or a dump
/// that failed than a host without domains, and taken as one it would
/// plan onto CPUs that VMs hold. (The agent, which watches a directory
/// that may be empty for a while, opens it with [`open`].)
pub fn open_state(spec: &str) -> Result<Option<Box<dyn Libvirt>>, VirtError> {
    let path = Path::new(spec);
    if path.is_dir() && !spec.starts_with("libvirt") && DumpDir::new(path).files()?.is_empty() {
        return Err(VirtError::File {
            path: spec.to_string(),
            message: "no domain XML file (NAME.xml, from `virsh dumpxml NAME`) in this directory; for a host \
                      without domains, leave out --state"
                .to_string(),
        });
    }
    Ok(open(spec))
}

/// Where `--state` and `--connect` point: `libvirt` or `libvirt:URI` is a
/// live connection, anything else a dump directory. `None`: neither
/// (a plan JSON file, for `plan --state`).
pub fn open(spec: &str) -> Option<Box<dyn Libvirt>> {
    if spec == "libvirt" {
        return Some(Box::new(Virsh::new(DEFAULT_URI)));
    }
    if let Some(uri) = spec.strip_prefix("libvirt:") {
        return Some(Box::new(Virsh::new(if uri.is_empty() { DEFAULT_URI } else { uri })));
    }
    let path = Path::new(spec);
    path.is_dir().then(|| Box::new(DumpDir::new(path)) as Box<dyn Libvirt>)
}
