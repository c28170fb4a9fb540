//! A plain CSV trace, one VM per line, `#` comments.
//!
//! A header line names the columns, in any order and in any case; other
//! columns (tenant, priority...) are ignored, so published traces replay
//! as they are. Accepted names: vCPUs `vcpus`, `vcpu`, `cores`, `cpus`,
//! `cpu`; memory in GiB `memory_gib`, `memory`, `mem`, `memory_gb`;
//! arrival `arrival_s`, `arrival`, `start`, `start_s`, `submit`, `at`;
//! lifetime `lifetime_s`, `lifetime`, `duration`, `duration_s`, `lt`;
//! optionally a VM id
//! `vmid` or `id` (not read: a VM's id is its place in the trace). The
//! first non-comment line is the header when none of its fields is a
//! number; a file without one is `vmid,vcpus,memory_gib,arrival_s,
//! lifetime_s`.
//!
//! An empty lifetime means the VM runs past the end of the trace. Times
//! are seconds, whole or decimal (`0.0`, `12.5`: published traces such as
//! Huawei Cloud's and Alibaba's carry fractions), rounded to the nearest
//! second. No quoting: a `"` is refused rather than misread.

use super::{number, parse_gib, parse_seconds, parse_vcpus, Problem, Trace, TraceError, Vm, MAX_VMS};
use std::fmt;

/// One field a trace gives: its name in errors and the header names that
/// mean it (the first is the name itself).
struct Field {
    name: &'static str,
    accepted: &'static [&'static str],
}

/// The fields, in the order of a file without a header.
const FIELDS: [Field; 5] = [
    Field { name: "vmid", accepted: &["vmid", "id"] },
    Field { name: "vcpus", accepted: &["vcpus", "vcpu", "cores", "cpus", "cpu"] },
    // `memory_gb` is read as GiB too: traces write GB for the binary unit
    // that VM flavors are sized in.
    Field { name: "memory_gib", accepted: &["memory_gib", "memory", "mem", "memory_gb"] },
    // `at` and `lt` (arrival time, length of time) are Huawei Cloud's
    // Huawei-East-1 trace as SPANE republished it (fixtures/traces/huawei-east-1).
    Field { name: "arrival_s", accepted: &["arrival_s", "arrival", "start", "start_s", "submit", "at"] },
    Field { name: "lifetime_s", accepted: &["lifetime_s", "lifetime", "duration", "duration_s", "lt"] },
];

/// What is wrong with a CSV trace's header or line beyond its values.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CsvProblem {
    /// The header lacks a column the replay needs.
    MissingColumn {
        /// The field (`vcpus`).
        column: &'static str,
        /// The header names that would have given it.
        accepted: &'static [&'static str],
    },
    /// Two header columns give the same field.
    DuplicateColumn {
        /// The field (`vcpus`).
        column: &'static str,
        /// The first column's name as written.
        first: String,
        /// The second one's.
        second: String,
    },
    /// A `"`: quoted fields are not supported.
    Quoted,
}

impl fmt::Display for CsvProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CsvProblem::MissingColumn { column, accepted } => {
                write!(f, "no {column} column (expected one of {})", accepted.join(", "))
            }
            CsvProblem::DuplicateColumn { column, first, second } => {
                write!(f, "columns {first} and {second} both give {column}; keep one")
            }
            CsvProblem::Quoted => write!(f, "quoted fields are not read"),
        }
    }
}

/// Where each field sits in a line, and what to call it in errors (the
/// header's own word when there is a header).
struct Layout<'a> {
    /// Fields a line must have.
    count: usize,
    /// vCPUs, memory, arrival, lifetime: column and name.
    at: [(usize, &'a str); 4],
}

impl<'a> Layout<'a> {
    /// A file without a header.
    fn fixed() -> Layout<'a> {
        Layout { count: FIELDS.len(), at: [1, 2, 3, 4].map(|i| (i, FIELDS[i].name)) }
    }

    /// A header's columns, trimmed.
    fn from_header(file: &str, line: usize, cols: &[&'a str]) -> Result<Layout<'a>, TraceError> {
        let err = |p| TraceError::line(file, line, "header", Problem::Csv(p));
        let mut found: [Option<(usize, &'a str)>; 5] = [None; 5];
        for (i, &name) in cols.iter().enumerate() {
            let Some(f) = FIELDS.iter().position(|f| f.accepted.iter().any(|a| a.eq_ignore_ascii_case(name))) else {
                continue;
            };
            if let Some((_, first)) = found[f] {
                return Err(err(CsvProblem::DuplicateColumn {
                    column: FIELDS[f].name,
                    first: first.to_string(),
                    second: name.to_string(),
                }));
            }
            found[f] = Some((i, name));
        }
        let mut at = [(0, ""); 4];
        for (slot, f) in at.iter_mut().zip(1..) {
            *slot = found[f].ok_or_else(|| {
                err(CsvProblem::MissingColumn { column: FIELDS[f].name, accepted: FIELDS[f].accepted })
            })?;
        }
        Ok(Layout { count: cols.len(), at })
    }
}

/// Whether the first non-comment line is a header: none of its fields is
/// a number (a data line has at least its sizes and times).
fn is_header(cols: &[&str]) -> bool {
    cols.iter().all(|c| number(c).is_none())
}

/// Parses a CSV trace; the end of the replay is the last departure or
/// arrival.
pub fn parse(file: &str, text: &str) -> Result<Trace, TraceError> {
    // Spreadsheets save CSV with a byte-order mark.
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let mut vms = Vec::new();
    let mut layout = None;
    // One vector for every line's fields.
    let mut cols: Vec<&str> = Vec::new();
    for (i, raw) in text.lines().enumerate() {
        let line = i + 1;
        let l = raw.trim();
        if l.is_empty() || l.starts_with('#') {
            continue;
        }
        if l.contains('"') {
            return Err(TraceError::line(file, line, "line", Problem::Csv(CsvProblem::Quoted)));
        }
        cols.clear();
        cols.extend(l.split(',').map(str::trim));
        if layout.is_none() && is_header(&cols) {
            layout = Some(Layout::from_header(file, line, &cols)?);
            continue;
        }
        let lay = layout.get_or_insert_with(Layout::fixed);
        if cols.len() != lay.count {
            return Err(TraceError::line(
                file,
                line,
                "line",
                Problem::FieldCount { found: cols.len(), expected: lay.count },
            ));
        }
        if vms.len() == MAX_VMS {
            return Err(TraceError::line(file, line, "line", Problem::TooManyVms));
        }
        let [(vc, vc_name), (mem, mem_name), (arr, arr_name), (life, life_name)] = lay.at;
        let vcpus = parse_vcpus(cols[vc], file, line, vc_name)?;
        let memory_bytes = parse_gib(cols[mem], file, line, mem_name)?;
        let arrival_s = parse_seconds(cols[arr], file, line, arr_name)?;
        let lifetime_s = match cols[life] {
            "" => None,
            s => Some(parse_seconds(s, file, line, life_name)?),
        };
        vms.push(Vm { vcpus, memory_bytes, arrival_s, lifetime_s });
    }
    if vms.is_empty() {
        return Err(TraceError::line(file, 0, "file", Problem::Empty));
    }
    // Stable: equal arrivals keep the file's order.
    vms.sort_by_key(|v| v.arrival_s);
    let start_s = vms.first().map_or(0, |v| v.arrival_s);
    let end_s = vms.iter().map(|v| v.departure_s().unwrap_or(v.arrival_s)).max().unwrap_or(0).saturating_add(1);
    Ok(Trace { name: file.to_string(), vms, start_s, end_s })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn reads_and_sorts() {
        let t = parse("t.csv", "vmid,vcpus,memory_gib,arrival_s,lifetime_s\nb,2,4,50,100\na,1,0.5,10,\n").unwrap();
        assert_eq!(t.vms.len(), 2);
        assert_eq!(t.vms[0], Vm { vcpus: 1, memory_bytes: 512 << 20, arrival_s: 10, lifetime_s: None });
        assert_eq!(t.vms[1].departure_s(), Some(150));
        assert_eq!((t.start_s, t.end_s), (10, 151));
    }

    #[test]
    fn errors_name_the_field() {
        let e = parse("t.csv", "a,1,4,10,5\nb,two,4,10,5\n").unwrap_err();
        assert_eq!(e.to_string(), "t.csv:2: vcpus: \"two\" is not a number");
        let e = parse("t.csv", "a,1,-4,10,5\n").unwrap_err();
        assert_eq!(e.to_string(), "t.csv:1: memory_gib: -4 is negative; expected 0 or more");
        let e = parse("t.csv", "a,1,0,10,5\n").unwrap_err();
        assert_eq!(
            e.to_string(),
            "t.csv:1: memory_gib: 0 GiB is out of range: more than 0 and at most 1048576 GiB (1 PiB)"
        );
        let e = parse("t.csv", "a,0,4,10,5\n").unwrap_err();
        assert_eq!(e.to_string(), "t.csv:1: vcpus: 0 is out of range: 1 to 4096 vCPUs");
        let e = parse("t.csv", "a,5000,4,10,5\n").unwrap_err();
        assert_eq!(e.to_string(), "t.csv:1: vcpus: 5000 is out of range: 1 to 4096 vCPUs");
        let e = parse("t.csv", "a,2.5,4,10,5\n").unwrap_err();
        assert_eq!(e.to_string(), "t.csv:1: vcpus: 2.5 is not a whole number");
        let e = parse("t.csv", "a,1,4,10\n").unwrap_err();
        assert!(matches!(e, TraceError::Line { problem: Problem::FieldCount { found: 4, expected: 5 }, .. }));
        assert!(parse("t.csv", "vmid,vcpus\n").is_err());
    }

    #[test]
    fn a_header_names_columns_in_any_order() {
        let text = "# from a published trace\n\nStart , tenant,DURATION,cores,memory\n12.5,a,3600.4,4,8\n0,b,,1,0.5\n";
        let t = parse("t.csv", text).unwrap();
        assert_eq!(t.vms[0], Vm { vcpus: 1, memory_bytes: 512 << 20, arrival_s: 0, lifetime_s: None });
        assert_eq!(t.vms[1], Vm { vcpus: 4, memory_bytes: 8 << 30, arrival_s: 13, lifetime_s: Some(3600) });
        // Every accepted name, with a byte-order mark and an id.
        for (c, m, a, l) in [
            ("vcpu", "mem", "arrival", "lifetime"),
            ("cpus", "memory_gb", "start_s", "duration_s"),
            ("VCPUS", "Memory_GiB", "submit", "lifetime_s"),
            ("cpu", "mem", "at", "lt"),
        ] {
            let text = format!("\u{feff}{l},{a},id,{m},{c}\n5,1,x,2,3\n");
            let t = parse("t.csv", &text).unwrap();
            assert_eq!(t.vms[0], Vm { vcpus: 3, memory_bytes: 2 << 30, arrival_s: 1, lifetime_s: Some(5) });
        }
        // Errors name the header's own word and the line.
        let e = parse("t.csv", "start,cores,mem,duration\n0,2,4,x\n").unwrap_err();
        assert!(e.to_string().starts_with("t.csv:2: duration: \"x\" is not a number of seconds"), "{e}");
        let e = parse("t.csv", "start,cores,mem,duration,tenant\n0,2,4,5\n").unwrap_err();
        assert_eq!(e.to_string(), "t.csv:2: line: 4 fields, expected 5");
    }

    #[test]
    fn header_errors_name_the_column() {
        let e = parse("t.csv", "start,tenant,duration,memory\n0,a,1,2\n").unwrap_err();
        assert_eq!(e.to_string(), "t.csv:1: header: no vcpus column (expected one of vcpus, vcpu, cores, cpus, cpu)");
        let e = parse("t.csv", "# c\nstart,cores,duration\n").unwrap_err();
        assert_eq!(
            e.to_string(),
            "t.csv:2: header: no memory_gib column (expected one of memory_gib, memory, mem, memory_gb)"
        );
        let e = parse("t.csv", "cores,mem,start,lifetime\n").unwrap_err();
        assert_eq!(e.to_string(), "t.csv:0: file: no entries");
        let e = parse("t.csv", "cores,mem,start,duration,vcpus\n1,1,1,1,1\n").unwrap_err();
        assert_eq!(e.to_string(), "t.csv:1: header: columns cores and vcpus both give vcpus; keep one");
        let e = parse("t.csv", "id,cores,mem,start,duration,vmid\n").unwrap_err();
        assert_eq!(e.to_string(), "t.csv:1: header: columns id and vmid both give vmid; keep one");
        let e = parse("t.csv", "\"start\",cores,mem,duration\n").unwrap_err();
        assert_eq!(e.to_string(), "t.csv:1: line: quoted fields are not read");
        let e = parse("t.csv", "start,cores,mem,duration,tenant\n0,2,4,5,\"a,b\"\n").unwrap_err();
        assert_eq!(e.to_string(), "t.csv:2: line: quoted fields are not read");
    }

    #[test]
    fn a_file_without_a_header_keeps_the_fixed_order() {
        let t = parse("t.csv", "# none\na,2,4,10,5\n").unwrap();
        assert_eq!(t.vms[0], Vm { vcpus: 2, memory_bytes: 4 << 30, arrival_s: 10, lifetime_s: Some(5) });
        // Only the first line may be a header.
        let e = parse("t.csv", "a,2,4,10,5\nstart,cores,mem,duration,x\n").unwrap_err();
        assert_eq!(e.to_string(), "t.csv:2: vcpus: \"cores\" is not a number");
    }
}
