//! A plain CSV trace: `vmid,vcpus,memory_gib,arrival_s,lifetime_s`, one VM
//! per line, an optional header line starting with `vmid`, `#` comments.
//! An empty `lifetime_s` means the VM runs past the end of the trace.
//! No quoting: VM ids are plain words.

use super::{parse_gib, parse_u64, Problem, Trace, TraceError, Vm};

const FIELDS: [&str; 5] = ["vmid", "vcpus", "memory_gib", "arrival_s", "lifetime_s"];

/// Parses a CSV trace; the end of the replay is the last departure or
/// arrival.
pub fn parse(file: &str, text: &str) -> Result<Trace, TraceError> {
    let mut vms = Vec::new();
    for (i, raw) in text.lines().enumerate() {
        let line = i + 1;
        let l = raw.trim();
        if l.is_empty() || l.starts_with('#') || (vms.is_empty() && l.starts_with("vmid")) {
            continue;
        }
        let cols: Vec<&str> = l.split(',').map(str::trim).collect();
        if cols.len() != FIELDS.len() {
            return Err(TraceError::line(
                file,
                line,
                "line",
                Problem::FieldCount { found: cols.len(), expected: FIELDS.len() },
            ));
        }
        let vcpus = parse_u64(cols[1], file, line, FIELDS[1])?;
        if vcpus == 0 || vcpus > 4096 {
            return Err(TraceError::line(file, line, FIELDS[1], Problem::OutOfRange(vcpus.to_string())));
        }
        let memory_bytes = parse_gib(cols[2], file, line, FIELDS[2])?;
        let arrival_s = parse_u64(cols[3], file, line, FIELDS[3])?;
        let lifetime_s = match cols[4] {
            "" => None,
            s => Some(parse_u64(s, file, line, FIELDS[4])?),
        };
        vms.push(Vm { vcpus: vcpus as u32, memory_bytes, arrival_s, lifetime_s });
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
        assert!(
            matches!(e, TraceError::Line { line: 1, ref field, problem: Problem::OutOfRange(_), .. } if field == "memory_gib")
        );
        let e = parse("t.csv", "a,1,4,10\n").unwrap_err();
        assert!(matches!(e, TraceError::Line { problem: Problem::FieldCount { found: 4, expected: 5 }, .. }));
        assert!(parse("t.csv", "vmid,vcpus\n").is_err());
    }
}
