//! One VM of a file as the rules read it: numaplace-libvirt's
//! [`Definition`], whatever the file's format (the libvirt reader, the
//! `.vmx` reader and the request reader each produce one), with the file
//! it came from so that a setting's line becomes evidence quoting the file.
//!
//! Rules never look at XML or `.vmx` text, so one rule covers every format
//! that can express its trap.

use numaplace_libvirt::domain::Definition;
use std::fmt;
use std::ops::{Deref, DerefMut};
use std::sync::Arc;

pub use numaplace_libvirt::domain::{BindMode, Binding, Cell};

/// Which kind of file a VM came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SourceFormat {
    /// libvirt domain XML (`virsh dumpxml`).
    Libvirt,
    /// VMware `.vmx`.
    Vmx,
    /// numaplace's own request JSON.
    Request,
}

/// A line of a file that a finding points at.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Evidence {
    /// The file as named on the command line.
    pub file: String,
    /// 1-based line.
    pub line: u32,
    /// The line's text, trimmed.
    pub text: String,
}

impl fmt::Display for Evidence {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}: {}", self.file, self.line, self.text)
    }
}

/// Where a setting was read: a line, or nothing when it is a default.
pub type Source = Option<Evidence>;

/// Longest evidence text quoted from a domain or request line (a `.vmx`
/// line is one setting and is quoted whole).
const QUOTE_CHARS: usize = 200;

/// One VM of a file: its [`Definition`] (read through `Deref`, so a rule
/// says `vm.vcpus`), the file's name and format, and the file's lines,
/// shared by the VMs of one file, for quoting.
#[derive(Clone, Debug, PartialEq)]
pub struct Vm {
    /// The file it came from.
    pub file: String,
    /// The format of that file.
    pub format: SourceFormat,
    /// What the file defines.
    pub def: Definition,
    /// The file's lines, as `str::lines` splits them.
    lines: Arc<[Box<str>]>,
}

impl Vm {
    /// A VM of a file whose lines are `lines` (see [`Vm::lines_of`]).
    pub(crate) fn new(file: &str, format: SourceFormat, def: Definition, lines: Arc<[Box<str>]>) -> Vm {
        Vm { file: file.to_string(), format, def, lines }
    }

    /// A file's lines, to share among its VMs.
    pub(crate) fn lines_of(text: &str) -> Arc<[Box<str>]> {
        text.lines().map(Box::from).collect()
    }

    /// The evidence for a line of the definition (0: none).
    pub fn ev(&self, line: u32) -> Source {
        if line == 0 {
            return None;
        }
        let content = self.lines.get(line as usize - 1).map_or("", |l| l.trim());
        let text = match self.format {
            SourceFormat::Vmx => content.to_string(),
            SourceFormat::Libvirt | SourceFormat::Request => content.chars().take(QUOTE_CHARS).collect(),
        };
        Some(Evidence { file: self.file.clone(), line, text })
    }
}

impl Deref for Vm {
    type Target = Definition;
    fn deref(&self) -> &Definition {
        &self.def
    }
}

impl DerefMut for Vm {
    fn deref_mut(&mut self) -> &mut Definition {
        &mut self.def
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn evidence_quotes_the_files_own_line() {
        let long = "x".repeat(300);
        let text = format!("<domain>\n  <vcpu>2</vcpu>  \n{long}\n</domain>\n");
        let lines = Vm::lines_of(&text);
        let xml = Vm::new("db.xml", SourceFormat::Libvirt, Definition::default(), lines.clone());
        // Line 0 is "no line": a default, or derived from nothing written.
        assert_eq!(xml.ev(0), None);
        let vcpu = xml.ev(2).expect("line 2");
        assert_eq!((vcpu.file.as_str(), vcpu.line, vcpu.text.as_str()), ("db.xml", 2, "<vcpu>2</vcpu>"));
        // A domain's or a request's line is cut for reading; a .vmx line is
        // one setting and is quoted whole.
        assert_eq!(xml.ev(3).map(|e| e.text.len()), Some(200));
        let vmx = Vm::new("db.vmx", SourceFormat::Vmx, Definition::default(), lines);
        assert_eq!(vmx.ev(3).map(|e| e.text.len()), Some(300));
    }
}
