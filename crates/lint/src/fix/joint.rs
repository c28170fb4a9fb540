//! The joint fix: every file of a set with a finding of warning or
//! worse, planned together against one host state per hypervisor, and
//! written only when the set as a whole gets better ([`super::trade`]).
//! Each file is fixed alone by [`super::fix_one`].

use super::error::FixError;
use super::trade::{self, NewFinding, Trade};
use super::{fix_one, state_with, FixOptions};
use crate::finding::{Finding, Severity};
use crate::host::HostView;
use crate::rules;
use crate::vm::{SourceFormat, Vm};
use crate::{hypervisor, Hypervisor, VmFile};
use numaplace_plan::Reservations;
use numaplace_topo::{CpuSet, Topology};
use std::collections::BTreeMap;

/// What fixing a set of files did.
#[derive(Debug, Default)]
pub struct FixReport {
    /// (index into the files, the fixed text), in file order; only
    /// files whose text changed. Besides the files with findings, a
    /// floating domain another fix put a dedicated VM under is here,
    /// narrowed off that VM's CPUs.
    pub fixed: Vec<(usize, String)>,
    /// (index, remark) for the operator: what each fix changed, or why a
    /// file was left as it was.
    pub notes: Vec<(usize, String)>,
    /// (index, why no fix was written): that file keeps its findings, and
    /// the fixes written were planned around it as it is.
    pub failed: Vec<(usize, FixError)>,
    /// What the fixes written traded, for the whole set (`None` when
    /// nothing was written).
    pub trade: Option<Trade>,
}

/// Fixes every file with a finding of warning or worse, planned together:
/// the VMs of the other files keep their pins and count as taken (their
/// CPUs and idle sibling threads), and each file to fix is planned in
/// the canonical order ([`crate::canonical_order`]) against one host
/// state that holds them and every fix before it. `files` is updated in
/// place with each fix read back. A VM the planner cannot place keeps its
/// findings and the other files are still fixed.
pub fn fix_all(files: &mut [VmFile], topology: &Topology, opts: FixOptions) -> FixReport {
    fix_all_reserved(files, topology, &Reservations::default(), opts)
}

/// [`fix_all`] on a host with reservations (the planner's, as `plan`
/// resolves them from the host profile and its flags): the findings are
/// [`crate::lint_held`]'s, and no fix plans a vCPU onto a reserved CPU
/// (or a dedicated one into the shared pool) or into the memory the host
/// keeps.
///
/// The answer depends on the set of files, not on their order: they are
/// fixed in the canonical order, and the report is given back in the
/// order of `files`.
///
/// The guarantee, as a property of the whole set: no error the input
/// lacked (per file, VM and rule), and the set is strictly better
/// ([`trade::Score::better_than`]), or nothing is written; with
/// [`FixOptions::strict`], no error or warning the input lacked. A file
/// whose fix cannot be made (the planner finds no room, it would resize,
/// it would add an error) is left as it was and counts as kept: the fixes
/// are planned again, from the start, around it as it is, until the set
/// as it would be written is acceptable. A file whose VM cannot exist on
/// the host is left as it is from the start, and holds no memory. Files
/// of the two hypervisors (KVM domains and requests, ESXi `.vmx`) are
/// held in two host states: they never share a host.
pub fn fix_all_reserved(
    files: &mut [VmFile],
    topology: &Topology,
    reservations: &Reservations,
    opts: FixOptions,
) -> FixReport {
    let order = crate::canonical_order(files, opts.held.min(files.len()));
    let mut sorted: Vec<VmFile> = order.iter().map(|&i| files[i].clone()).collect();
    let report = fix_in_order(&mut sorted, topology, reservations, opts);
    for (k, file) in sorted.into_iter().enumerate() {
        files[order[k]] = file;
    }
    let back = |k: usize| order[k];
    let mut out = FixReport {
        fixed: report.fixed.into_iter().map(|(k, t)| (back(k), t)).collect(),
        notes: report.notes.into_iter().map(|(k, n)| (back(k), n)).collect(),
        failed: report.failed.into_iter().map(|(k, e)| (back(k), e)).collect(),
        trade: report.trade,
    };
    // Stable: each file's notes keep their order.
    out.fixed.sort_by_key(|f| f.0);
    out.notes.sort_by_key(|n| n.0);
    out.failed.sort_by_key(|f| f.0);
    out
}

/// [`fix_all_reserved`] on files already in the canonical order.
fn fix_in_order(files: &mut [VmFile], topology: &Topology, reservations: &Reservations, opts: FixOptions) -> FixReport {
    let host = HostView::reserved(topology, reservations);
    let lint = |files: &[VmFile]| crate::lint_held(files, opts.held, topology, reservations);
    let before = lint(files);
    let (to_fix, mut left) = triage(files, &before, &host, opts);
    let mut notes_left: Vec<(usize, String)> = Vec::new();
    // Each pass leaves at least one more file alone, or ends.
    loop {
        let mut round = fix_round(files, &to_fix, &left, &host, opts);
        if !round.left.is_empty() {
            for (i, why) in std::mem::take(&mut round.left) {
                match why {
                    Left::Failed(e) => left.insert(i, Some(e)),
                    Left::Unchanged(notes) => {
                        notes_left.extend(notes.into_iter().map(|n| (i, n)));
                        left.insert(i, None)
                    }
                };
            }
            // A file left as it was holds its CPUs: plan the others again
            // around it.
            continue;
        }
        let trial = trial_of(files, &mut round, opts.held, &left, &host);
        let after = lint(&trial);
        let (added, errors_fixed, warnings_fixed) = trade::diff(&before, &after);
        let (was, now) = (trade::Score::of(&before), trade::Score::of(&after));
        let new_errors: Vec<NewFinding> = added.iter().filter(|f| f.severity == Severity::Error).cloned().collect();
        let acceptable = round.fixed.is_empty()
            || if opts.strict { added.is_empty() } else { new_errors.is_empty() && now.better_than(&was) };
        if acceptable {
            let mut report = FixReport::default();
            if !round.fixed.is_empty() {
                let needs = needs_cores(&added, &trial, &host);
                report.trade = Some(Trade { before: was, after: now, errors_fixed, warnings_fixed, added, needs });
            }
            for (i, file, text, notes) in round.fixed {
                report.notes.extend(notes.into_iter().map(|n| (i, n)));
                files[i] = file;
                report.fixed.push((i, text));
            }
            report.notes.extend(notes_left);
            report.notes.sort_by_key(|n| n.0);
            report.failed = left.into_iter().filter_map(|(i, e)| Some((i, e?))).collect();
            return report;
        }
        // What is blamed: the errors the input lacked; without any (the
        // set is merely not better), every finding the input lacked.
        let worse = if opts.strict || new_errors.is_empty() { added } else { new_errors };
        let fixed: Vec<usize> = round.fixed.iter().map(|f| f.0).collect();
        if worse.is_empty() {
            // Nothing added, and still no better: no fix is worth writing.
            let t = Trade { before: was, after: now, errors_fixed, warnings_fixed, added: Vec::new(), needs: None };
            for i in fixed {
                left.insert(i, Some(FixError::NoGain(t.clone())));
            }
            continue;
        }
        for (i, found) in blame(files, &fixed, &worse, &after) {
            left.insert(i, Some(FixError::WouldWorsen(found)));
        }
    }
}

/// The files to fix (from `held` on, with a finding of warning or worse,
/// not requests) and the ones left alone from the start: a VM that
/// cannot exist on this host is named, not planned (its file is left as
/// it is and holds no memory in the host states), and a floating domain
/// whose only findings are about where it floats keeps floating: it is
/// narrowed ([`narrow_floating`]) rather than planned 1:1.
fn triage(
    files: &[VmFile],
    before: &[Finding],
    host: &HostView<'_>,
    opts: FixOptions,
) -> (Vec<usize>, BTreeMap<usize, Option<FixError>>) {
    let mut left: BTreeMap<usize, Option<FixError>> = BTreeMap::new();
    let warned = |i: usize| before.iter().filter(move |f| f.file == files[i].name && f.severity >= Severity::Warning);
    let candidates: Vec<usize> = (opts.held.min(files.len())..files.len())
        .filter(|&i| files[i].format != SourceFormat::Request)
        .filter(|&i| warned(i).next().is_some())
        .collect();
    let views = crate::views(files, host);
    let mut to_fix = Vec::new();
    for i in candidates {
        let beyond = views.iter().filter(|v| v.file == files[i].name).find_map(|v| {
            let why = rules::cannot_exist(v, host);
            // Pages the host lacks are what a resizing fix drops.
            let resizable = opts.allow_resize && why.iter().all(|b| matches!(b, rules::Beyond::Pages { .. }));
            (!why.is_empty() && !resizable).then(|| (v.name.clone(), why))
        });
        match beyond {
            Some((vm, why)) => {
                left.insert(i, Some(FixError::CannotExist { vm, why }));
            }
            None => to_fix.push(i),
        }
    }
    let floating_only = ["floating-on-dedicated", "floating-over-reserved"];
    let narrow_only =
        |i: usize| files[i].format == SourceFormat::Libvirt && warned(i).all(|f| floating_only.contains(&f.rule));
    (to_fix.into_iter().filter(|&i| !narrow_only(i)).collect(), left)
}

/// The set as a round would write it: the round's fixes, and the
/// floating domains of the run (not the host's, which lint never writes)
/// taken off the CPUs the set dedicates, as `apply` narrows a floating
/// domain under a plan's dedicated VM (added to the round's fixes).
fn trial_of(
    files: &[VmFile],
    round: &mut Round,
    held: usize,
    left: &BTreeMap<usize, Option<FixError>>,
    host: &HostView<'_>,
) -> Vec<VmFile> {
    let mut trial = files.to_vec();
    for (i, file, _, _) in &round.fixed {
        trial[*i] = file.clone();
    }
    for (i, file, text, note) in narrow_floating(&trial, held, left, host) {
        trial[i] = file.clone();
        round.fixed.retain(|f| f.0 != i);
        round.fixed.push((i, file, text, vec![note]));
    }
    round.fixed.sort_by_key(|f| f.0);
    trial
}

/// When the fixes add SMT findings because the set has more vCPUs than
/// the host has cores: (vCPUs of the set, the host's cores).
fn needs_cores(added: &[NewFinding], trial: &[VmFile], host: &HostView<'_>) -> Option<(u64, u32)> {
    let needs = added.iter().any(|a| a.rule == "smt-contention" || a.rule == "siblings-shared").then(|| {
        let vcpus: u64 = crate::views(trial, host)
            .iter()
            .filter(|v| hypervisor(v.format) == Hypervisor::Kvm)
            .map(|v| u64::from(v.vcpus))
            .sum();
        (vcpus, host.total_cores())
    });
    needs.filter(|(v, c)| *v > u64::from(*c))
}

/// Who each finding the fixes added is owed to: the fixed file it is on,
/// else the fixed files its evidence names, else the last fix made.
fn blame(
    files: &[VmFile],
    fixed: &[usize],
    worse: &[NewFinding],
    after: &[Finding],
) -> BTreeMap<usize, Vec<NewFinding>> {
    let index = |name: &str| fixed.iter().copied().find(|&i| files[i].name == name);
    let mut blamed: BTreeMap<usize, Vec<NewFinding>> = BTreeMap::new();
    for f in worse {
        let mut culprits: Vec<usize> = index(&f.file).into_iter().collect();
        if culprits.is_empty() {
            let found = after.iter().find(|a| a.file == f.file && a.vm == f.vm && a.rule == f.rule);
            culprits = found.map(|a| a.evidence.iter().filter_map(|e| index(&e.file)).collect()).unwrap_or_default();
        }
        if culprits.is_empty() {
            culprits.extend(fixed.last().copied());
        }
        for c in culprits {
            blamed.entry(c).or_default().push(f.clone());
        }
    }
    blamed
}

/// The floating libvirt domains of `files` (from `held` on, not left
/// alone) that may run on CPUs another VM of the set holds dedicated,
/// each narrowed to the CPUs it may use that no dedicated VM holds, nor
/// their idle sibling threads, nor the host's reserved CPUs (the sibling
/// threads are given back when without them too few CPUs are left for its
/// vCPUs): (index, the file read back, its text, a note).
fn narrow_floating(
    files: &[VmFile],
    held: usize,
    left: &BTreeMap<usize, Option<FixError>>,
    host: &HostView<'_>,
) -> Vec<(usize, VmFile, String, String)> {
    let views: Vec<Vm> =
        crate::views(files, host).into_iter().filter(|v| hypervisor(v.format) == Hypervisor::Kvm).collect();
    let counted = rules::counted(&views, host);
    let mut out = Vec::new();
    for (i, file) in files.iter().enumerate().skip(held) {
        if file.format != SourceFormat::Libvirt || left.contains_key(&i) {
            continue;
        }
        let Some(me) = views.iter().position(|v| v.file == file.name) else { continue };
        let (vm, mine) = (&views[me], &counted[me]);
        let was = mine.floating_cpus();
        let dedicated = counted
            .iter()
            .enumerate()
            .filter(|&(j, _)| j != me && views[j].format != SourceFormat::Request)
            .fold(CpuSet::new(), |u, (_, h)| u.union(&h.held_cpus()));
        // Also a VM floating over the reserved CPUs of a host with a
        // shared pool (floating-over-reserved): it belongs in the pool.
        let pool = &host.reservations.shared_cpus;
        let over_reserved = !pool.is_empty() && !was.is_disjoint(&host.reservations.cpus);
        if was.is_disjoint(&dedicated) && !over_reserved {
            continue;
        }
        let topology = host.topology;
        let siblings: CpuSet = dedicated
            .iter()
            .filter_map(|c| topology.pu(c).and_then(|p| p.core).and_then(|k| topology.cores().get(k)))
            .fold(CpuSet::new(), |u, core| u.union(&core.cpus));
        let off = dedicated.union(&host.reservations.cpus);
        let mut after = was.difference(&off).difference(&siblings);
        if (after.len() as u32) < vm.vcpus {
            after = was.difference(&off);
        }
        // Where the host declares a shared pool, floating VMs belong in
        // it, when it holds enough of the CPUs left for the vCPUs.
        let pool = after.intersection(&host.reservations.shared_cpus);
        if pool.len() as u32 >= vm.vcpus {
            after = pool;
        }
        if after.is_empty() {
            continue;
        }
        let text = numaplace_libvirt::apply::narrow_xml(&file.text, &was, &after);
        let Ok(reread) = crate::parse_file(&file.name, text.as_bytes()) else { continue };
        if text == file.text || reread.sizes() != file.sizes() {
            continue;
        }
        let note = format!(
            "kept floating, over CPUs {after} now: the CPUs {} that dedicated VMs hold (and the host's reserved \
             CPUs) taken out of its CPU sets, as `numaplace apply` narrows a floating domain",
            was.intersection(&dedicated.union(&host.reservations.cpus))
        );
        out.push((i, reread, text, note));
    }
    out
}

/// One pass of the joint fix.
struct Round {
    /// (index, the fixed file read back, its text, notes), in order.
    fixed: Vec<(usize, VmFile, String, Vec<String>)>,
    /// Files left as they were in this pass, and why.
    left: Vec<(usize, Left)>,
}

/// Why a file of a pass was left as it was.
enum Left {
    /// No fix could be written.
    Failed(FixError),
    /// The fix changed nothing (the fixer's notes, which say why).
    Unchanged(Vec<String>),
}

/// Fixes the files of `to_fix` not in `left`, in order, against one host
/// state per hypervisor holding every other VM as it is.
fn fix_round(
    files: &[VmFile],
    to_fix: &[usize],
    left: &BTreeMap<usize, Option<FixError>>,
    host: &HostView<'_>,
    opts: FixOptions,
) -> Round {
    let mut round = Round { fixed: Vec::new(), left: Vec::new() };
    let attempt: Vec<usize> = to_fix.iter().copied().filter(|i| !left.contains_key(i)).collect();
    let views = crate::views(files, host);
    let kept = |kind: Hypervisor| -> Vec<Vm> {
        views
            .iter()
            .filter(|v| hypervisor(v.format) == kind)
            .filter(|v| !attempt.iter().any(|&i| files[i].name == v.file))
            .cloned()
            .collect()
    };
    let mut states = [
        (Hypervisor::Kvm, state_with(host, &kept(Hypervisor::Kvm))),
        (Hypervisor::Esxi, state_with(host, &kept(Hypervisor::Esxi))),
    ];
    let mut work = files.to_vec();
    for i in attempt {
        let kind = hypervisor(work[i].format);
        let same: Vec<Vm> = crate::views(&work, host).into_iter().filter(|v| hypervisor(v.format) == kind).collect();
        let Some((_, state)) = states.iter_mut().find(|(k, _)| *k == kind) else { continue };
        let state = match state {
            Ok(state) => state,
            Err(e) => {
                round.left.push((i, Left::Failed(FixError::State(e.clone()))));
                continue;
            }
        };
        let fixed = match fix_one(&work[i], &same, state, host, opts) {
            Ok(f) => f,
            Err(e) => {
                round.left.push((i, Left::Failed(e)));
                continue;
            }
        };
        if fixed.text == work[i].text {
            let mut notes = fixed.notes;
            notes.push("left as it was: nothing a fix may change would remove its findings".into());
            round.left.push((i, Left::Unchanged(notes)));
            continue;
        }
        let reparsed = match crate::parse_file(&work[i].name, fixed.text.as_bytes()) {
            Ok(r) => r,
            Err(e) => {
                // A fix that does not read back is a bug; the file is
                // left as it was rather than written half-understood.
                round.left.push((i, Left::Failed(FixError::Unreadable(e.to_string()))));
                continue;
            }
        };
        // The guarantee, checked on the text to be written rather than
        // trusted to each fixer: no vCPU, byte of memory, huge page size
        // or device is lost or added unless resizing was allowed.
        let (before, after) = (work[i].sizes(), reparsed.sizes());
        if !opts.allow_resize && before != after {
            round.left.push((i, Left::Failed(FixError::WouldResize(format!("{before:?} -> {after:?}")))));
            continue;
        }
        work[i] = reparsed.clone();
        round.fixed.push((i, reparsed, fixed.text, fixed.notes));
    }
    round
}
