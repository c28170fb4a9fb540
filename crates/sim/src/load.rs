//! The simulator's only contact with the file system: reading a trace
//! (finding an Azure flavor file's companions) and a fleet file
//! (resolving its topology paths against the fleet file's directory).

use crate::fleet::{FleetError, HostMix, MAX_FLEET_FILE_BYTES};
use crate::trace::{azure, csv, synthetic, Problem, Trace, TraceError, MAX_FILE_BYTES, MAX_VMS};
use numaplace_topo::Topology;
use std::io::Read;
use std::path::{Path, PathBuf};

/// Reads a trace file whole, refusing one larger than [`MAX_FILE_BYTES`]
/// before holding it (a wrong path to a disk image must not fill memory).
fn read(path: &Path) -> Result<String, TraceError> {
    let io = |e: std::io::Error| TraceError::Io { file: path.display().to_string(), message: e.to_string() };
    let file = std::fs::File::open(path).map_err(io)?;
    let mut bytes = Vec::new();
    file.take(MAX_FILE_BYTES + 1).read_to_end(&mut bytes).map_err(io)?;
    if bytes.len() as u64 > MAX_FILE_BYTES {
        return Err(TraceError::Io {
            file: path.display().to_string(),
            message: format!(
                "larger than {} MiB, the most a trace file may have (about {MAX_VMS} VMs of CSV)",
                MAX_FILE_BYTES >> 20
            ),
        });
    }
    String::from_utf8(bytes).map_err(|e| TraceError::Io {
        file: path.display().to_string(),
        message: format!("not UTF-8 text (byte {} is not valid UTF-8)", e.utf8_error().valid_up_to()),
    })
}

/// Reads a trace named on the command line: `*.csv` is the plain CSV,
/// `synthetic:N` generates N VMs, anything else is an Azure V1 flavor
/// file whose duration file (`<stem>.c<T>.txt`), `flav_map.txt` and
/// `<prefix>.interval_map.txt` sit beside it (or in `../maps/`, the
/// dataset's own layout).
pub fn load_trace(name: &str, seed: u64) -> Result<Trace, TraceError> {
    if let Some(n) = name.strip_prefix("synthetic:") {
        let vms = crate::trace::parse_whole(n, MAX_VMS as u64, name, 0, "count")? as usize;
        if vms == 0 {
            let allowed = format!("1 to {MAX_VMS} VMs");
            return Err(TraceError::line(name, 0, "count", Problem::OutOfRange { found: "0".into(), allowed }));
        }
        return Ok(synthetic::generate(&synthetic::Spec { vms, ..synthetic::Spec::default() }, seed));
    }
    let path = Path::new(name);
    if path.extension().is_some_and(|e| e.eq_ignore_ascii_case("csv")) {
        return csv::parse(name, &read(path)?);
    }
    let files = azure_companions(path)?;
    let texts: Vec<String> = [path, &files.durations, &files.flavor_map, &files.interval_map]
        .iter()
        .map(|p| read(p))
        .collect::<Result<_, _>>()?;
    let names: Vec<String> = [path, &files.durations, &files.flavor_map, &files.interval_map]
        .iter()
        .map(|p| p.display().to_string())
        .collect();
    azure::parse(
        azure::AzureTexts {
            flavors: (&names[0], &texts[0]),
            durations: (&names[1], &texts[1]),
            flavor_map: (&names[2], &texts[2]),
            interval_map: (&names[3], &texts[3]),
            end_s: azure::end_from_name(&names[1]),
        },
        seed,
    )
}

/// Where an Azure flavor file's companions are.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AzureFiles {
    /// The duration file.
    pub durations: PathBuf,
    /// `flav_map.txt`.
    pub flavor_map: PathBuf,
    /// The interval map.
    pub interval_map: PathBuf,
}

/// Finds the companions of `v1.test.txt`: `v1.test.c<T>.txt`,
/// `flav_map.txt`, `v1.interval_map.txt`.
pub fn azure_companions(flavors: &Path) -> Result<AzureFiles, TraceError> {
    let shown = flavors.display().to_string();
    let dir = flavors.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let file = flavors.file_name().and_then(|f| f.to_str()).unwrap_or("");
    let stem = file.strip_suffix(".txt").unwrap_or(file);
    let prefix = stem.split('.').next().unwrap_or(stem);
    let missing = |what: &str, looked: String| TraceError::MissingCompanion {
        file: shown.clone(),
        what: what.to_string(),
        looked,
    };
    let mut durations: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(|e| TraceError::Io { file: dir.display().to_string(), message: e.to_string() })?
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .filter(|p| {
            p.file_name().and_then(|f| f.to_str()).is_some_and(|f| {
                f.strip_prefix(stem)
                    .and_then(|r| r.strip_prefix(".c"))
                    .and_then(|r| r.strip_suffix(".txt"))
                    .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
            })
        })
        .collect();
    durations.sort();
    let durations = durations
        .into_iter()
        .next()
        .ok_or_else(|| missing("duration file", dir.join(format!("{stem}.c<T>.txt")).display().to_string()))?;
    let find = |name: &str, what: &str| -> Result<PathBuf, TraceError> {
        let here = dir.join(name);
        let maps = dir.join("..").join("maps").join(name);
        [here.clone(), maps.clone()]
            .into_iter()
            .find(|p| p.is_file())
            .ok_or_else(|| missing(what, format!("{} and {}", here.display(), maps.display())))
    };
    Ok(AzureFiles {
        durations,
        flavor_map: find("flav_map.txt", "flavor map")?,
        interval_map: find(&format!("{prefix}.interval_map.txt"), "interval map")?,
    })
}

/// Kinds of topology source whose rest is a path.
const PATH_KINDS: [&str; 4] = ["sysfs", "hwloc", "libvirt", "json"];

/// Resolves a topology source of a fleet file against its directory:
/// relative paths (also after `hwloc:` and the like) that exist there are
/// joined to it; synthetic descriptions and absolute paths stay as they
/// are.
pub fn resolve_source(source: &str, base: &Path) -> String {
    let join = |rest: &str| -> Option<String> {
        let p = Path::new(rest);
        (p.is_relative() && base.join(p).exists()).then(|| base.join(p).display().to_string())
    };
    if let Some((kind, rest)) = source.split_once(':') {
        if PATH_KINDS.contains(&kind) {
            return join(rest).map_or_else(|| source.to_string(), |p| format!("{kind}:{p}"));
        }
        if kind == "synthetic" {
            return source.to_string();
        }
    }
    join(source).unwrap_or_else(|| source.to_string())
}

/// Reads a fleet file; `read` opens one (resolved) topology source.
pub fn load_fleet<F>(path: &Path, mut read: F) -> Result<HostMix, FleetError>
where
    F: FnMut(&str) -> Result<Topology, String>,
{
    let file = path.display().to_string();
    let io = |message: String| FleetError::Io { file: file.clone(), message };
    let mut bytes = Vec::new();
    std::fs::File::open(path)
        .and_then(|f| f.take(MAX_FLEET_FILE_BYTES + 1).read_to_end(&mut bytes))
        .map_err(|e| io(e.to_string()))?;
    if bytes.len() as u64 > MAX_FLEET_FILE_BYTES {
        return Err(io(format!("larger than {} MiB, the most a fleet file may have", MAX_FLEET_FILE_BYTES >> 20)));
    }
    let text = String::from_utf8(bytes)
        .map_err(|e| io(format!("not UTF-8 text (byte {} is not valid UTF-8)", e.utf8_error().valid_up_to())))?;
    let doc = HostMix::parse_doc(&file, &text)?;
    let base = path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new(".")).to_path_buf();
    HostMix::from_doc(&file, &doc, |source| read(&resolve_source(source, &base)))
}
