//! CPUs: which are online, and how they group into cores, packages, dies
//! and last-level caches (`/sys/devices/system/cpu/cpuN/{online,topology,cache}`).
//!
//! Grouping follows the sibling masks, as hwloc does: a core is the
//! `thread_siblings` (`core_cpus`) set of its first CPU, a package the
//! `core_siblings` (`package_cpus`) set. The sets are cut down to the CPUs
//! actually read, so a partial or buggy tree still yields a partition, and
//! disagreements between CPUs are reported with
//! [`Warning::InconsistentSiblings`].

use super::{cpu_set, number, numbered, value, CPU_DIR};
use crate::ParseError;
use numaplace_topo::{parse_size, Cache, Core, CpuSet, Package, Warning, MAX_CPU, MAX_SETS_BYTES};
use std::collections::{BTreeMap, BTreeSet, HashSet};

/// What the CPU directories say.
pub(super) struct Cpus {
    /// Online CPUs with topology information: the PUs.
    pub pus: CpuSet,
    /// CPUs the kernel lists but that are offline.
    pub offline: CpuSet,
    pub cores: Vec<Core>,
    pub packages: Vec<Package>,
    pub dies: Vec<(u32, u32)>,
    pub caches: Vec<Cache>,
}

/// The topology files of one CPU.
#[derive(Default)]
struct Raw {
    core_id: Option<i64>,
    package_id: Option<i64>,
    die_id: Option<i64>,
    core_set: Option<CpuSet>,
    package_set: Option<CpuSet>,
}

// Masks before lists, as hwloc reads them: the kernel prints both from one
// cpumask, so they only differ in hand-made trees, where agreeing with
// hwloc keeps the counts comparable.
const CORE_FILES: [&str; 4] = ["core_cpus", "thread_siblings", "core_cpus_list", "thread_siblings_list"];
const PACKAGE_FILES: [&str; 4] = ["package_cpus", "core_siblings", "package_cpus_list", "core_siblings_list"];

pub(super) fn read(
    tree: &dyn super::Tree,
    amd_compute_units: bool,
    warnings: &mut Vec<Warning>,
) -> Result<Cpus, ParseError> {
    let (pus, offline, no_topology) = online_states(tree)?;
    if pus.is_empty() {
        // A kernel without topology directories (before 2.6.16): every
        // CPU is its own core, in no package.
        warnings.push(Warning::NoCoreInfo);
        let cores = no_topology.iter().map(single_core).collect();
        return Ok(Cpus {
            pus: no_topology,
            offline,
            cores,
            packages: Vec::new(),
            dies: Vec::new(),
            caches: Vec::new(),
        });
    }
    if let Some(first) = no_topology.first() {
        // hwloc leaves these out too: without a topology directory nothing
        // says which core they belong to.
        warnings.push(Warning::Skipped {
            path: format!("{CPU_DIR}/cpu{first}/topology"),
            reason: format!("missing for online CPUs {no_topology}, which are left out"),
        });
    }

    let raws = read_raws(tree, &pus)?;
    let mut inconsistent = CpuSet::new();
    let core_sets = core_sets(&pus, &raws, amd_compute_units, &mut inconsistent, warnings);
    let package_groups = package_groups(&pus, &raws, &mut inconsistent);
    let packages = number_packages(&package_groups, &raws, &mut inconsistent);
    let dies = dies(&packages, &raws);
    let package_of = |cpu: u32| packages.iter().find(|p| p.cpus.contains(cpu)).map(|p| p.id);
    let cores = core_sets
        .into_iter()
        .filter_map(|cpus| {
            let first = cpus.first()?;
            let raw = raws.get(&first);
            let id = |v: Option<i64>| v.and_then(|v| u32::try_from(v).ok());
            Some(Core {
                package: package_of(first),
                die: if dies.is_empty() { None } else { id(raw.and_then(|r| r.die_id)) },
                core_id: id(raw.and_then(|r| r.core_id)),
                cpus,
            })
        })
        .collect();

    if !inconsistent.is_empty() {
        warnings.push(Warning::InconsistentSiblings(inconsistent));
    }
    let caches = read_caches(tree, &pus, &raws, warnings);
    Ok(Cpus { pus, offline, cores, packages, dies, caches })
}

fn single_core(cpu: u32) -> Core {
    Core { package: None, die: None, core_id: None, cpus: std::iter::once(cpu).collect() }
}

/// Sorts the CPUs the kernel lists into online ones with topology files
/// (the PUs), offline ones, and online ones without topology files.
/// `cpu/online` wins over the per-CPU `online` files, as in hwloc.
fn online_states(tree: &dyn super::Tree) -> Result<(CpuSet, CpuSet, CpuSet), ParseError> {
    let known = numbered(tree, CPU_DIR, "cpu", MAX_CPU, "a CPU number below 65536")?;
    if known.is_empty() {
        return Err(ParseError::Missing(format!("{CPU_DIR}/cpu0")));
    }
    let online_list = cpu_set(tree, CPU_DIR, &["online"])?.map(|(set, _)| set);
    let (mut pus, mut offline, mut no_topology) = (CpuSet::new(), CpuSet::new(), CpuSet::new());
    for &cpu in &known {
        let online = match &online_list {
            Some(set) => set.contains(cpu),
            None => {
                let path = format!("{CPU_DIR}/cpu{cpu}/online");
                match value(tree, &path)?.as_deref() {
                    // cpu0 often has no file (it cannot go offline), and
                    // old captures hold empty ones: no news is online.
                    None | Some("") | Some("1") => true,
                    Some("0") => false,
                    Some(other) => return Err(ParseError::bad(path, "0 or 1", other)),
                }
            }
        };
        if !online {
            offline.insert(cpu);
        } else if tree.exists(&format!("{CPU_DIR}/cpu{cpu}/topology")) {
            pus.insert(cpu);
        } else {
            no_topology.insert(cpu);
        }
    }
    if pus.is_empty() && no_topology.is_empty() {
        return Err(ParseError::bad(format!("{CPU_DIR}/online"), "at least one online CPU", "none"));
    }
    Ok((pus, offline, no_topology))
}

fn read_raws(tree: &dyn super::Tree, pus: &CpuSet) -> Result<BTreeMap<u32, Raw>, ParseError> {
    let mut raws = BTreeMap::new();
    // Two sibling sets per CPU, each a bitmap up to its highest number: a
    // tree whose every mask names CPU 65535 would take 1 GiB, so the sets
    // are counted against the readers' budget as they are read.
    let mut bytes = 0usize;
    for cpu in pus.iter() {
        let dir = format!("{CPU_DIR}/cpu{cpu}/topology");
        let id = |name: &str| number::<i64>(tree, &format!("{dir}/{name}"), "an integer");
        let raw = Raw {
            core_id: id("core_id")?,
            package_id: id("physical_package_id")?,
            die_id: id("die_id")?,
            core_set: cpu_set(tree, &dir, &CORE_FILES)?.map(|(s, _)| s),
            package_set: cpu_set(tree, &dir, &PACKAGE_FILES)?.map(|(s, _)| s),
        };
        bytes += raw.core_set.as_ref().map_or(0, CpuSet::bytes) + raw.package_set.as_ref().map_or(0, CpuSet::bytes);
        if bytes > MAX_SETS_BYTES {
            return Err(ParseError::bad(
                dir,
                "sibling masks that fit in 128 MiB of bitmaps (one bit per CPU number up to the highest)",
                "more",
            ));
        }
        raws.insert(cpu, raw);
    }
    Ok(raws)
}

/// The CPU sets of the cores. Threads of one sibling set with different
/// core ids are AMD compute units (one core per thread, as hwloc shows
/// them) or a kernel bug (the same, with a warning).
fn core_sets(
    pus: &CpuSet,
    raws: &BTreeMap<u32, Raw>,
    amd_compute_units: bool,
    inconsistent: &mut CpuSet,
    warnings: &mut Vec<Warning>,
) -> Vec<CpuSet> {
    let (groups, coreless) = partition(pus, raws, |r| r.core_set.as_ref(), inconsistent);
    if !coreless.is_empty() {
        warnings.push(Warning::NoCoreInfo);
    }
    let mut sets: Vec<CpuSet> = coreless.iter().map(|c| std::iter::once(c).collect()).collect();
    for group in groups {
        let ids: BTreeSet<Option<i64>> = group.iter().map(|c| raws.get(&c).and_then(|r| r.core_id)).collect();
        if ids.len() > 1 {
            if !amd_compute_units {
                *inconsistent = inconsistent.union(&group);
            }
            sets.extend(group.iter().map(|c| std::iter::once(c).collect()));
        } else {
            sets.push(group);
        }
    }
    sets
}

/// Dies per package, only when some package holds more than one (a
/// `die_id` equal across a package says nothing placement can use).
fn dies(packages: &[Package], raws: &BTreeMap<u32, Raw>) -> Vec<(u32, u32)> {
    let per_package: Vec<(u32, BTreeSet<i64>)> = packages
        .iter()
        .map(|p| {
            let ids = p.cpus.iter().filter_map(|c| raws.get(&c).and_then(|r| r.die_id));
            (p.id, ids.filter(|&d| d >= 0).collect())
        })
        .collect();
    if !per_package.iter().any(|(_, d)| d.len() > 1) {
        return Vec::new();
    }
    per_package.into_iter().map(|(p, d)| (p, u32::try_from(d.len().max(1)).unwrap_or(u32::MAX))).collect()
}

/// Cuts the CPUs into groups by a sibling set, first CPU first: each group
/// is the first free CPU's set, less CPUs already taken. A CPU whose own
/// set disagrees with its group's marks the group inconsistent. Also
/// returns the CPUs without the file, which form no group.
fn partition(
    pus: &CpuSet,
    raws: &BTreeMap<u32, Raw>,
    set_of: impl Fn(&Raw) -> Option<&CpuSet>,
    inconsistent: &mut CpuSet,
) -> (Vec<CpuSet>, CpuSet) {
    let mut taken = CpuSet::new();
    let mut groups = Vec::new();
    let mut without = CpuSet::new();
    let own = |cpu: u32| -> Option<CpuSet> {
        let mut s = set_of(raws.get(&cpu)?)?.intersection(pus);
        s.insert(cpu);
        Some(s)
    };
    for cpu in pus.iter() {
        if taken.contains(cpu) {
            continue;
        }
        let Some(mine) = own(cpu) else {
            without.insert(cpu);
            continue;
        };
        let group = mine.difference(&taken);
        if group != mine || group.iter().any(|c| own(c).as_ref() != Some(&mine)) {
            *inconsistent = inconsistent.union(&group);
        }
        taken = taken.union(&group);
        groups.push(group);
    }
    (groups, without)
}

/// Packages as hwloc makes them: a package is the sibling set of its first
/// CPU. A CPU whose set starts elsewhere makes none, so a CPU that no set
/// starting at a lower CPU covers stays outside every package (hwloc's
/// behaviour on corrupt masks, which keeps package counts comparable).
fn package_groups(pus: &CpuSet, raws: &BTreeMap<u32, Raw>, inconsistent: &mut CpuSet) -> Vec<CpuSet> {
    let own = |cpu: u32| raws.get(&cpu).and_then(|r| r.package_set.as_ref()).map(|s| s.intersection(pus));
    let mut taken = CpuSet::new();
    let mut groups: Vec<CpuSet> = Vec::new();
    for cpu in pus.iter() {
        let Some(set) = own(cpu) else { continue };
        if set.first() != Some(cpu) {
            continue;
        }
        let group = set.difference(&taken);
        taken = taken.union(&group);
        groups.push(group);
    }
    for cpu in pus.iter() {
        let Some(set) = own(cpu) else { continue };
        if !groups.iter().any(|g| g.contains(cpu) && *g == set) {
            inconsistent.insert(cpu);
        }
    }
    groups
}

/// Gives each package group its `physical_package_id`, or a fresh number
/// when the id is missing, `-1` (s390, some ARM) or already taken (two
/// sibling sets claiming one id: the Xeon E5 v3 cluster-on-die bug).
fn number_packages(groups: &[CpuSet], raws: &BTreeMap<u32, Raw>, inconsistent: &mut CpuSet) -> Vec<Package> {
    let claimed = |g: &CpuSet| {
        let first = g.first()?;
        raws.get(&first)?.package_id.and_then(|id| u32::try_from(id).ok())
    };
    let mut used: BTreeMap<u32, usize> = BTreeMap::new();
    let mut ids: Vec<Option<u32>> = Vec::with_capacity(groups.len());
    for (i, g) in groups.iter().enumerate() {
        match claimed(g) {
            Some(id) => match used.get(&id) {
                Some(&owner) => {
                    if let Some(first) = groups.get(owner) {
                        *inconsistent = inconsistent.union(first).union(g);
                    }
                    ids.push(None);
                }
                None => {
                    used.insert(id, i);
                    ids.push(Some(id));
                }
            },
            None => ids.push(None),
        }
    }
    let mut next = used.keys().next_back().map_or(0, |&m| m.saturating_add(1));
    groups
        .iter()
        .zip(ids)
        .map(|(g, id)| {
            let id = id.unwrap_or_else(|| {
                let fresh = next;
                next = next.saturating_add(1);
                fresh
            });
            Package { id, cpus: g.clone() }
        })
        .collect()
}

/// Each PU's last-level data or unified cache, one entry per distinct
/// (level, CPU set). Unreadable cache files are skipped with a warning.
fn read_caches(
    tree: &dyn super::Tree,
    pus: &CpuSet,
    raws: &BTreeMap<u32, Raw>,
    warnings: &mut Vec<Warning>,
) -> Vec<Cache> {
    let mut caches: Vec<Cache> = Vec::new();
    // Distinct (level, CPUs) pairs, looked up by hash: a broken tree can
    // give every CPU a cache of its own.
    let mut seen: HashSet<(u8, CpuSet)> = HashSet::new();
    let mut bytes = 0usize;
    let mut skipped = 0usize;
    for cpu in pus.iter() {
        let dir = format!("{CPU_DIR}/cpu{cpu}/cache");
        let mut best: Option<Cache> = None;
        for index in tree.list(&dir).into_iter().filter(|n| n.starts_with("index")) {
            let idir = format!("{dir}/{index}");
            match read_cache(tree, &idir, cpu, pus, raws) {
                Ok(Some(c)) if best.as_ref().is_none_or(|b| c.level > b.level) => best = Some(c),
                Ok(_) => {}
                Err(e) => {
                    // One warning per broken file is plenty; a tree with
                    // hundreds of CPUs repeats the same fault.
                    if skipped < 4 {
                        warnings.push(Warning::Skipped { path: idir, reason: e.to_string() });
                    }
                    skipped += 1;
                }
            }
        }
        if let Some(c) = best {
            if seen.insert((c.level, c.cpus.clone())) {
                bytes += c.cpus.bytes();
                if bytes > MAX_SETS_BYTES {
                    // Caches are extras: too many of them is a warning.
                    let reason = "cache CPU lists beyond 128 MiB of bitmaps; no caches are used".to_string();
                    warnings.push(Warning::Skipped { path: dir, reason });
                    return Vec::new();
                }
                caches.push(c);
            }
        }
    }
    caches
}

fn read_cache(
    tree: &dyn super::Tree,
    dir: &str,
    cpu: u32,
    pus: &CpuSet,
    raws: &BTreeMap<u32, Raw>,
) -> Result<Option<Cache>, ParseError> {
    let Some(level) = number::<u8>(tree, &format!("{dir}/level"), "a cache level")? else {
        return Ok(None);
    };
    if value(tree, &format!("{dir}/type"))?.as_deref() == Some("Instruction") {
        return Ok(None);
    }
    let size_path = format!("{dir}/size");
    let size_bytes = match value(tree, &size_path)? {
        None => None,
        Some(s) => Some(parse_size(&s).ok_or_else(|| ParseError::bad(size_path, "a size such as 32K", &s))?),
    };
    let mut cpus = match cpu_set(tree, dir, &["shared_cpu_list", "shared_cpu_map"])? {
        Some((set, _)) => set.intersection(pus),
        None => CpuSet::new(),
    };
    if cpus.is_empty() {
        // ia64 reports empty masks for some caches: hwloc takes the core.
        cpus = raws.get(&cpu).and_then(|r| r.core_set.clone()).unwrap_or_default().intersection(pus);
    }
    cpus.insert(cpu);
    Ok(Some(Cache { level, size_bytes: size_bytes.filter(|&s| s > 0), cpus }))
}
