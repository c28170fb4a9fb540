//! What a rule reports: the rule id, severity, message, evidence lines,
//! the measured cost with its source, and the fix.

use crate::vm::Evidence;
use std::fmt;

/// How bad a finding is. Ordered: `Info < Warning < Error`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Severity {
    /// Worth knowing; no measured loss.
    Info,
    /// A measured loss under some conditions.
    Warning,
    /// A measured loss, or a VM that will not start as configured.
    Error,
}

impl Severity {
    /// The lower-case name used in text.
    fn as_str(&self) -> &'static str {
        match self {
            Severity::Info => "info",
            Severity::Warning => "warning",
            Severity::Error => "error",
        }
    }
}

impl fmt::Display for Severity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One problem found in one VM.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Finding {
    /// Stable rule id (`cpu-hotadd-wide`).
    pub rule: &'static str,
    /// Severity.
    pub severity: Severity,
    /// The VM's name.
    pub vm: String,
    /// The file the VM came from.
    pub file: String,
    /// What is wrong, with this VM's numbers.
    pub message: String,
    /// The lines that say so.
    pub evidence: Vec<Evidence>,
    /// The expected cost: the measured figure and its source.
    pub impact: String,
    /// The concrete change that removes the problem.
    pub fix: String,
    /// The only fix changes the VM's size (its vCPU count or memory):
    /// `--fix` makes it only when allowed to resize, and otherwise leaves
    /// the file alone.
    pub resize: bool,
    /// Where the VM's cells and memory are, as the rule read them
    /// ([`crate::Layout`]), for findings about where cells or memory are;
    /// every such finding on one VM carries the same layout.
    pub layout: Option<crate::Layout>,
}

impl Finding {
    /// The first evidence line, for one-line views.
    pub(crate) fn line(&self) -> Option<u32> {
        self.evidence.first().map(|e| e.line)
    }
}
