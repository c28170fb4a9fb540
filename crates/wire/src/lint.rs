//! The JSON `numaplace lint` writes: `--format json` ([`LintDoc`],
//! documented in `docs/lint.md`) and `--format sarif` ([`SarifLog`], a
//! SARIF 2.1.0 log, documented in `docs/formats/sarif.md`).
//!
//! These are plain data; `numaplace-lint` converts its findings into them,
//! so this crate does not depend on the linter.
//!
//! Fields are declared in the alphabetical order of their JSON names (the
//! order the documents have always been written in, byte for byte), since
//! serde writes a struct's fields in declaration order.

use serde::{Deserialize, Serialize};

/// The value of a SARIF log's `$schema` field.
pub const SARIF_SCHEMA: &str = "https://json.schemastore.org/sarif-2.1.0.json";
/// The SARIF version written (`version`).
pub const SARIF_VERSION: &str = "2.1.0";

/// A finding's severity, as `--format json` writes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SeverityDoc {
    /// `info`: worth knowing; no measured loss.
    Info,
    /// `warning`: a measured loss under some conditions.
    Warning,
    /// `error`: a measured loss, or a VM that will not start as configured.
    Error,
}

/// `lint --format json`: `{"findings": [...], "summary": {...}}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LintDoc {
    /// The findings, by file (command-line order), then line, then rule id.
    pub findings: Vec<FindingDoc>,
    /// How many findings of each severity.
    pub summary: SummaryDoc,
}

/// One problem found in one VM.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FindingDoc {
    /// The lines that say so, by line.
    pub evidence: Vec<EvidenceDoc>,
    /// The file the VM came from, as named on the command line.
    pub file: String,
    /// The concrete change that removes the problem.
    pub fix: String,
    /// The expected cost: the measured figure and its source.
    pub impact: String,
    /// The first evidence line; null when there is no evidence.
    pub line: Option<u32>,
    /// What is wrong, with this VM's numbers.
    pub message: String,
    /// The only fix changes the VM's size (vCPU count or memory): `lint
    /// --fix` leaves the file alone unless `--allow-resize` is given.
    #[serde(default)]
    pub resize: bool,
    /// Stable rule id (`cpu-hotadd-wide`).
    pub rule: String,
    /// Severity.
    pub severity: SeverityDoc,
    /// The VM's name.
    pub vm: String,
}

/// A line of a file that a finding points at.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EvidenceDoc {
    /// The file, as named on the command line (another VM's file for
    /// findings across VMs).
    pub file: String,
    /// 1-based line.
    pub line: u32,
    /// The line's text, trimmed.
    pub text: String,
}

/// Findings per severity.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SummaryDoc {
    /// Findings of severity `error`.
    pub error: u64,
    /// Findings of severity `info`.
    pub info: u64,
    /// Findings of severity `warning`.
    pub warning: u64,
}

/// `lint --format sarif`: a SARIF 2.1.0 log with one run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SarifLog {
    /// Always [`SARIF_SCHEMA`].
    #[serde(rename = "$schema")]
    pub schema: String,
    /// The runs; numaplace writes one.
    pub runs: Vec<SarifRun>,
    /// Always [`SARIF_VERSION`].
    pub version: String,
}

/// One run of the linter.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SarifRun {
    /// One result per finding, in the findings' order.
    pub results: Vec<SarifResult>,
    /// The tool that ran.
    pub tool: SarifTool,
}

/// The tool of a run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SarifTool {
    /// Its driver: numaplace itself.
    pub driver: SarifDriver,
}

/// The program that produced the results.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SarifDriver {
    /// `numaplace`.
    pub name: String,
    /// Every rule, whether or not it fired, in documentation order.
    pub rules: Vec<SarifRule>,
    /// numaplace's version.
    pub version: String,
}

/// One lint rule as SARIF describes it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct SarifRule {
    /// The rule's default level (`defaultConfiguration`).
    pub default_configuration: SarifConfiguration,
    /// Where the rule is documented (`helpUri`, `docs/lint.md#RULE`).
    pub help_uri: String,
    /// Stable rule id (`cpu-hotadd-wide`).
    pub id: String,
    /// One line saying what it checks (`shortDescription`).
    pub short_description: SarifText,
}

/// A rule's default configuration.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SarifConfiguration {
    /// The level of the rule's findings.
    pub level: SarifLevel,
}

/// A SARIF level: severities map `error` to `error`, `warning` to
/// `warning` and `info` to `note`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SarifLevel {
    /// `note` (severity `info`).
    Note,
    /// `warning`.
    Warning,
    /// `error`.
    Error,
}

/// A text, as SARIF wraps texts (`{"text": "..."}`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SarifText {
    /// The text.
    pub text: String,
}

/// One finding as a SARIF result.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct SarifResult {
    /// The finding's level.
    pub level: SarifLevel,
    /// The first evidence line (none when there is no evidence).
    pub locations: Vec<SarifLocation>,
    /// VM name, message, impact and fix in one text (viewers show only
    /// this).
    pub message: SarifText,
    /// The rule id (`ruleId`).
    pub rule_id: String,
}

/// Where a result points.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct SarifLocation {
    /// A place in a file (`physicalLocation`).
    pub physical_location: SarifPhysicalLocation,
}

/// A file and a region of it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct SarifPhysicalLocation {
    /// The file (`artifactLocation`).
    pub artifact_location: SarifArtifactLocation,
    /// The line in it.
    pub region: SarifRegion,
}

/// A file a result points into.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SarifArtifactLocation {
    /// The file as named on the command line.
    pub uri: String,
}

/// A line of a file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct SarifRegion {
    /// The line's text, trimmed.
    pub snippet: SarifText,
    /// 1-based line (`startLine`).
    pub start_line: u32,
}
