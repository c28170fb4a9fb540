//! Pure parsers for the small `/proc` and sysfs files the sampler reads
//! besides `numa_maps`: thread `stat`, process `status`, `cmdline`, thread
//! `comm`, `maps` (address ranges for page migration), `/proc/stat` (CPU
//! time per CPU) and a node's `meminfo`.

use crate::error::ParseError;
use numaplace_topo::CpuSet;

/// The fields of `/proc/PID/task/TID/stat` the sampler uses.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TaskStat {
    /// The thread name (field 2, without parentheses).
    pub comm: String,
    /// Scheduler state letter (field 3).
    pub state: char,
    /// CPU the thread last ran on (field 39).
    pub processor: u32,
}

/// Parses a thread's `stat`. The name may hold spaces and parentheses
/// (`CPU 0/KVM`, or anything a program sets), so the fields after it are
/// found from the last `)`.
pub fn parse_task_stat(text: &str) -> Result<TaskStat, ParseError> {
    let err = |reason: &str| ParseError::File { file: "stat", reason: reason.to_string() };
    let open = text.find('(').ok_or_else(|| err("no '(' before the name"))?;
    let close = text.rfind(')').ok_or_else(|| err("no ')' after the name"))?;
    let comm = text.get(open + 1..close).ok_or_else(|| err("name out of order"))?.to_string();
    let rest: Vec<&str> = text.get(close + 1..).unwrap_or("").split_whitespace().collect();
    // `rest[0]` is field 3 (state), so field N is rest[N - 3].
    let state = rest.first().and_then(|s| s.chars().next()).ok_or_else(|| err("no state field"))?;
    let processor = rest
        .get(39 - 3)
        .ok_or_else(|| err("fewer than 39 fields"))?
        .parse()
        .map_err(|_| err("field 39 (processor) is not a number"))?;
    Ok(TaskStat { comm, state, processor })
}

/// The CPU and memory restrictions from `/proc/PID/status`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Status {
    /// `Name:`.
    pub name: String,
    /// `Cpus_allowed_list:`.
    pub cpus_allowed: CpuSet,
    /// `Mems_allowed_list:` (node ids).
    pub mems_allowed: CpuSet,
    /// `VmRSS:` in bytes (absent for kernel threads).
    pub rss_bytes: Option<u64>,
}

/// Parses `/proc/PID/status`.
pub fn parse_status(text: &str) -> Result<Status, ParseError> {
    let field = |key: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(key).and_then(|r| r.strip_prefix(':')).map(str::trim))
            .ok_or_else(|| ParseError::File { file: "status", reason: format!("no {key} line") })
    };
    let list = |key: &str| -> Result<CpuSet, ParseError> {
        let v = field(key)?;
        CpuSet::parse_list(v).map_err(|e| ParseError::File { file: "status", reason: format!("{key} {v:?}: {e}") })
    };
    Ok(Status {
        name: field("Name")?.to_string(),
        cpus_allowed: list("Cpus_allowed_list")?,
        mems_allowed: list("Mems_allowed_list")?,
        rss_bytes: field("VmRSS")
            .ok()
            .and_then(|v| v.trim_end_matches("kB").trim().parse::<u64>().ok())
            .map(|kb| kb * 1024),
    })
}

/// What the command line says about a QEMU virtual machine.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QemuInfo {
    /// The guest name from `-name` (`guest=NAME,...` or a bare `NAME`), if
    /// given.
    pub name: Option<String>,
    /// Configured memory from `-m` (`512M`, `4G`, `size=2G,...`, or a bare
    /// number of MiB), in bytes.
    pub memory_bytes: Option<u64>,
}

/// Splits a NUL-separated `/proc/PID/cmdline`.
pub fn split_cmdline(raw: &[u8]) -> Vec<String> {
    raw.split(|&b| b == 0).filter(|a| !a.is_empty()).map(|a| String::from_utf8_lossy(a).into_owned()).collect()
}

/// Recognises a QEMU process by its program name and reads its name and
/// memory size. Returns `None` for other programs.
pub fn qemu_info(args: &[String]) -> Option<QemuInfo> {
    let prog = args.first()?;
    let base = prog.rsplit('/').next().unwrap_or(prog);
    if !(base.starts_with("qemu-system-") || base == "qemu-kvm" || base == "kvm") {
        return None;
    }
    let value =
        |flag: &str| args.windows(2).find(|w| w[0] == flag || w[0] == format!("-{flag}")).map(|w| w[1].as_str());
    let name = value("-name").and_then(|v| {
        // QEMU option syntax: a leading bare value is the implied key
        // (`guest`); `,,` escapes a comma inside a value.
        let unescaped = v.replace(",,", "\u{0}");
        let mut parts = unescaped.split(',');
        let first = parts.next().unwrap_or("");
        let guest = if let Some(g) = first.strip_prefix("guest=") {
            Some(g)
        } else if !first.contains('=') {
            Some(first)
        } else {
            unescaped.split(',').find_map(|p| p.strip_prefix("guest="))
        };
        guest.filter(|g| !g.is_empty()).map(|g| g.replace('\u{0}', ","))
    });
    let memory_bytes = value("-m").and_then(|v| {
        let size = v
            .split(',')
            .find_map(|p| p.strip_prefix("size="))
            .or_else(|| v.split(',').next().filter(|p| !p.contains('=')))?;
        parse_qemu_size(size)
    });
    Some(QemuInfo { name, memory_bytes })
}

/// QEMU's `-m` sizes: a bare number means MiB; suffixes K, M, G, T (also
/// with a trailing `B`/`iB`) are binary.
fn parse_qemu_size(s: &str) -> Option<u64> {
    let s = s.trim();
    let digits_end = s.find(|c: char| !c.is_ascii_digit() && c != '.').unwrap_or(s.len());
    let (num, unit) = s.split_at(digits_end);
    let num: f64 = num.parse().ok()?;
    let shift = match unit.trim_end_matches("iB").trim_end_matches('B').to_ascii_uppercase().as_str() {
        "" | "M" => 20,
        "K" => 10,
        "G" => 30,
        "T" => 40,
        _ => return None,
    };
    Some((num * (1u64 << shift) as f64) as u64)
}

/// Whether a thread name is one of QEMU's vCPU threads (`CPU 3/KVM`,
/// `CPU 0/TCG`, or `ALL CPUs/TCG` for single-threaded TCG). QEMU names
/// threads only with `-name ...,debug-threads=on` (libvirt always sets it).
pub fn is_vcpu_thread(comm: &str) -> bool {
    let comm = comm.trim();
    (comm.starts_with("CPU ") && comm.contains('/')) || comm.starts_with("ALL CPUs/")
}

/// One line of `/proc/PID/maps`: an address range.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Range {
    /// First byte.
    pub start: u64,
    /// One past the last byte.
    pub end: u64,
}

/// Parses the address ranges of `/proc/PID/maps`.
pub fn parse_maps(text: &str) -> Result<Vec<Range>, ParseError> {
    text.lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
        .map(|(i, l)| {
            let bad = || ParseError::Line { file: "maps", line: i + 1, reason: format!("bad range in {l:?}") };
            let range = l.split_whitespace().next().ok_or_else(bad)?;
            let (a, b) = range.split_once('-').ok_or_else(bad)?;
            let start = u64::from_str_radix(a, 16).map_err(|_| bad())?;
            let end = u64::from_str_radix(b, 16).map_err(|_| bad())?;
            if end < start {
                return Err(bad());
            }
            Ok(Range { start, end })
        })
        .collect()
}

/// Busy and total CPU time of one CPU from `/proc/stat`, in clock ticks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct CpuTimes {
    /// Ticks not idle and not waiting for I/O.
    pub busy: u64,
    /// All ticks.
    pub total: u64,
}

/// Parses the `cpuN` lines of `/proc/stat` into (cpu, times).
pub fn parse_proc_stat(text: &str) -> Vec<(u32, CpuTimes)> {
    text.lines()
        .filter_map(|l| {
            let mut f = l.split_whitespace();
            let cpu: u32 = f.next()?.strip_prefix("cpu")?.parse().ok()?;
            let v: Vec<u64> = f.filter_map(|x| x.parse().ok()).collect();
            let total: u64 = v.iter().take(8).sum();
            // idle (4th) and iowait (5th) are not busy.
            let idle = v.get(3).copied().unwrap_or(0) + v.get(4).copied().unwrap_or(0);
            Some((cpu, CpuTimes { busy: total.saturating_sub(idle), total }))
        })
        .collect()
}

/// `MemTotal` and `MemFree` in bytes from a node's `meminfo`
/// (`Node 0 MemFree:  185644 kB`).
pub fn parse_node_meminfo(text: &str) -> Result<(u64, u64), ParseError> {
    let get = |key: &str| {
        text.lines()
            .find_map(|l| {
                let mut f = l.split_whitespace();
                let (_, _, k, v) = (f.next()?, f.next()?, f.next()?, f.next()?);
                (k.trim_end_matches(':') == key).then(|| v.parse::<u64>().ok()).flatten()
            })
            .map(|kb| kb * 1024)
            .ok_or_else(|| ParseError::File { file: "meminfo", reason: format!("no {key}") })
    };
    Ok((get("MemTotal")?, get("MemFree")?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_name_with_spaces_and_parentheses() {
        let mut line = String::from("42 (a) b) (CPU 1/KVM)) R");
        for i in 4..=52 {
            line.push_str(&format!(" {}", if i == 39 { 7 } else { i }));
        }
        let s = parse_task_stat(&line).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(s.comm, "a) b) (CPU 1/KVM)");
        assert_eq!(s.state, 'R');
        assert_eq!(s.processor, 7);
        assert!(parse_task_stat("42 (x) R 1 2").is_err());
    }

    #[test]
    fn qemu_names_and_sizes() {
        let a = |s: &str| s.split(' ').map(String::from).collect::<Vec<_>>();
        let q = qemu_info(&a("/usr/bin/qemu-system-x86_64 -name guest=db1,debug-threads=on -m 4G"))
            .unwrap_or_else(|| panic!());
        assert_eq!(q.name.as_deref(), Some("db1"));
        assert_eq!(q.memory_bytes, Some(4 << 30));
        let q = qemu_info(&a("qemu-kvm -name web,,2 -m size=2048M,slots=4,maxmem=8G")).unwrap_or_else(|| panic!());
        assert_eq!(q.name.as_deref(), Some("web,2"));
        assert_eq!(q.memory_bytes, Some(2 << 30));
        let q = qemu_info(&a("qemu-system-aarch64 -m 512")).unwrap_or_else(|| panic!());
        assert_eq!((q.name, q.memory_bytes), (None, Some(512 << 20)));
        assert!(qemu_info(&a("/usr/bin/bash -m 1")).is_none());
    }

    #[test]
    fn vcpu_thread_names() {
        assert!(is_vcpu_thread("CPU 0/KVM"));
        assert!(is_vcpu_thread("CPU 12/TCG\n"));
        assert!(is_vcpu_thread("ALL CPUs/TCG"));
        assert!(!is_vcpu_thread("qemu-system-x86"));
        assert!(!is_vcpu_thread("IO mon_iothread"));
    }
}
