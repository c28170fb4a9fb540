//! Rewrites `key = "value"` lines of a `.vmx`: a changed key keeps its
//! line (and spelling), a new key is appended, and every other line stays
//! byte for byte.

use crate::error::VmError;
use crate::vmx::entries;
use std::collections::BTreeMap;

/// Sets keys (given in ESXi's spelling) to values.
pub fn apply(text: &str, set: &BTreeMap<String, String>) -> Result<String, VmError> {
    let parsed = entries(text)?;
    // The line (0-based) of the last entry of each key: ESXi reads that one.
    let mut line_of: BTreeMap<String, usize> = BTreeMap::new();
    for e in &parsed {
        line_of.insert(e.key.clone(), e.line as usize - 1);
    }
    let mut by_line: BTreeMap<usize, (&str, &str)> = BTreeMap::new();
    let mut append: Vec<(&str, &str)> = Vec::new();
    for (key, value) in set {
        match line_of.get(&key.to_ascii_lowercase()) {
            Some(&l) => {
                by_line.insert(l, (key.as_str(), value.as_str()));
            }
            None => append.push((key.as_str(), value.as_str())),
        }
    }
    let nl = if text.contains("\r\n") { "\r\n" } else { "\n" };
    let mut out = String::with_capacity(text.len() + 128);
    for (i, line) in text.split_inclusive('\n').enumerate() {
        match by_line.get(&i) {
            Some((key, value)) => {
                let body = line.trim_end_matches(['\r', '\n']);
                let ending = &line[body.len()..];
                let indent_len = body.len() - body.trim_start().len();
                let written_key = body.trim_start().split('=').next().map(str::trim).unwrap_or(key);
                out.push_str(&body[..indent_len]);
                out.push_str(&format!("{written_key} = \"{value}\""));
                out.push_str(ending);
            }
            None => out.push_str(line),
        }
    }
    if !append.is_empty() && !out.is_empty() && !out.ends_with('\n') {
        out.push_str(nl);
    }
    for (key, value) in append {
        out.push_str(&format!("{key} = \"{value}\"{nl}"));
    }
    Ok(out)
}
