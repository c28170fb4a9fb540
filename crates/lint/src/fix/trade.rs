//! "Better as a whole": when the joint fix writes, and what it traded.
//!
//! A set of fixes is written when the set of files gets strictly better:
//! no error the input lacked, and fewer errors, or as many errors and a
//! lower cost-weighted sum of warnings. Each warning weighs the share of
//! performance its measured cost quotes at the low end
//! ([`rule_cost`]); errors are counted, never weighed against warnings.
//! `--strict` keeps the older rule: no error or warning the input lacked.

use crate::finding::{Finding, Severity};
use std::collections::BTreeMap;
use std::fmt;

/// An error or warning a fix would have added to the set.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NewFinding {
    /// The rule id.
    pub rule: &'static str,
    /// Its severity.
    pub severity: Severity,
    /// The VM it is on.
    pub vm: String,
    /// The file of that VM.
    pub file: String,
}

/// The weight of one warning of a rule: the share of performance (in
/// percent) its measured cost loses at the low end of the range its
/// impact quotes (docs/background.md). `None` for a rule this table does
/// not know (a test keeps every rule in it).
pub fn rule_weight(rule: &str) -> Option<u32> {
    Some(match rule {
        // 40-75% lost to sibling contention [004].
        "smt-contention" | "siblings-shared" | "floating-on-dedicated" | "reserved-cpus" => 40,
        // Two VMs on one CPU: each gets at most half.
        "pinning-overlap" => 50,
        // One guest node over two: PassMark Memory Threaded -46% [001].
        "cpu-hotadd-wide" | "guest-cells-missing" => 46,
        // Remote memory: half the bandwidth [002].
        "memory-exceeds-node" | "affinity-too-narrow" | "memory-binding-remote" | "device-remote" => 50,
        // PhotoWorxx 23600 vs 53000 (3 guest nodes on 2) [000]: about half.
        "guest-cells-uneven" | "socket-spans-cells" => 55,
        // 23900 vs 53000 for 25 vCPUs [000].
        "odd-vcpus-wide" => 55,
        // 35800 vs 53000 for 24 guest nodes [000].
        "guest-cells-per-node" => 32,
        // Memory-only or empty guest cells are reported for information
        // (issue 52): how the guest uses them is its own choice.
        "guest-cells-cpuless" => 0,
        // No mirrored guest topology: +15% TPM given up [003].
        "vcpu-spans-nodes" | "partial-pinning" => 15,
        // A VM that does not run as written (these are errors).
        "unknown-reference"
        | "hugepages-missing"
        | "vm-exceeds-host"
        | "dedicated-in-shared-pool"
        | "floating-over-reserved" => 100,
        _ => return None,
    })
}

/// [`rule_weight`], with an unknown rule weighing as much as an error.
pub fn rule_cost(rule: &str) -> u32 {
    rule_weight(rule).unwrap_or(100)
}

/// Errors and the cost-weighted sum of warnings of a set of findings.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Score {
    /// Errors.
    pub errors: usize,
    /// Warnings.
    pub warnings: usize,
    /// The warnings' weights summed ([`rule_cost`]).
    pub warning_cost: u64,
}

impl Score {
    /// The score of a set of findings (infos count for nothing).
    pub fn of(findings: &[Finding]) -> Score {
        let mut s = Score::default();
        for f in findings {
            match f.severity {
                Severity::Error => s.errors += 1,
                Severity::Warning => {
                    s.warnings += 1;
                    s.warning_cost += u64::from(rule_cost(f.rule));
                }
                Severity::Info => {}
            }
        }
        s
    }

    /// Strictly better than `before`: fewer errors, or as many and a
    /// lower weighted sum of warnings.
    pub fn better_than(&self, before: &Score) -> bool {
        self.errors < before.errors || (self.errors == before.errors && self.warning_cost < before.warning_cost)
    }
}

/// What a written set of fixes traded, as typed values (worded by
/// [`fmt::Display`]): what it removed, and what it added and why that
/// was accepted.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Trade {
    /// The set before the fix.
    pub before: Score,
    /// The set as written.
    pub after: Score,
    /// Errors of the input the fix removed.
    pub errors_fixed: usize,
    /// Warnings of the input the fix removed.
    pub warnings_fixed: usize,
    /// Findings (warnings: an added error is never written) the input
    /// lacked.
    pub added: Vec<NewFinding>,
    /// When a warning about shared sibling threads was added and the VMs
    /// of the set have more vCPUs than the host has cores: (vCPUs, cores).
    /// No placement then gives every vCPU a core of its own.
    pub needs: Option<(u64, u32)>,
}

/// The findings of `after` beyond those of `before`, counted per (file,
/// VM, rule, severity), and the number of `before`'s that `after` lacks,
/// by severity: (added, errors removed, warnings removed).
pub(crate) fn diff(before: &[Finding], after: &[Finding]) -> (Vec<NewFinding>, usize, usize) {
    let key = |f: &Finding| (f.file.clone(), f.vm.clone(), f.rule, f.severity);
    let mut had: BTreeMap<_, usize> = BTreeMap::new();
    for f in before.iter().filter(|f| f.severity >= Severity::Warning) {
        *had.entry(key(f)).or_default() += 1;
    }
    let mut added = Vec::new();
    for f in after.iter().filter(|f| f.severity >= Severity::Warning) {
        match had.get_mut(&key(f)) {
            Some(n) if *n > 0 => *n -= 1,
            _ => added.push(NewFinding { rule: f.rule, severity: f.severity, vm: f.vm.clone(), file: f.file.clone() }),
        }
    }
    let removed = |s: Severity| had.iter().filter(|(k, _)| k.3 == s).map(|(_, n)| *n).sum();
    (added, removed(Severity::Error), removed(Severity::Warning))
}

impl fmt::Display for Trade {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let n = |k: usize, what: &str| numaplace_emit::text::plural(k as u64, what);
        let mut fixed = Vec::new();
        if self.errors_fixed > 0 {
            fixed.push(n(self.errors_fixed, "error"));
        }
        if self.warnings_fixed > 0 {
            fixed.push(n(self.warnings_fixed, "warning"));
        }
        if fixed.is_empty() {
            f.write_str("fixes nothing")?;
        } else {
            write!(f, "fixes {}", fixed.join(" and "))?;
        }
        if !self.added.is_empty() {
            let what: Vec<String> = self.added.iter().map(|a| format!("{} on {} ({})", a.rule, a.vm, a.file)).collect();
            write!(f, "; adds {}: {}", n(self.added.len(), "warning"), what.join(", "))?;
            if let Some((vcpus, cores)) = self.needs {
                write!(f, ": sibling threads shared, the set needs {vcpus} threads on {cores} cores")?;
            }
        }
        write!(
            f,
            " (errors {} -> {}, cost-weighted warnings {} -> {})",
            self.before.errors, self.after.errors, self.before.warning_cost, self.after.warning_cost
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every rule of the catalogue has a weight of its own (a new rule
    /// without one would weigh as an error by accident).
    #[test]
    fn every_rule_has_a_weight() {
        for rule in crate::rules::all() {
            assert!(rule_weight(rule.id()).is_some(), "{} has no weight", rule.id());
        }
    }

    /// The example: an error removed, a warning added.
    #[test]
    fn a_trade_says_what_it_fixed_and_added() {
        let t = Trade {
            before: Score { errors: 3, warnings: 2, warning_cost: 61 },
            after: Score { errors: 1, warnings: 1, warning_cost: 40 },
            errors_fixed: 2,
            warnings_fixed: 2,
            added: vec![NewFinding {
                rule: "smt-contention",
                severity: Severity::Warning,
                vm: "db".into(),
                file: "db.xml".into(),
            }],
            needs: Some((52, 36)),
        };
        assert!(t.after.better_than(&t.before));
        assert_eq!(
            t.to_string(),
            "fixes 2 errors and 2 warnings; adds 1 warning: smt-contention on db (db.xml): sibling threads shared, \
             the set needs 52 threads on 36 cores (errors 3 -> 1, cost-weighted warnings 61 -> 40)"
        );
    }
}
