//! A plain CSV trace: `vmid,vcpus,memory_gib,arrival_s,lifetime_s`, one VM
//! per line, an optional header line starting with `vmid`, `#` comments.
//! An empty `lifetime_s` means the VM runs past the end of the trace.
//! Times are seconds, whole or decimal (`0.0`, `12.5`: published traces
//! such as Huawei Cloud's and Alibaba's carry fractions), rounded to the
//! nearest second. No quoting: VM ids are plain words.

use super::{parse_gib, parse_seconds, parse_vcpus, Problem, Trace, TraceError, Vm, MAX_VMS};

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
        if vms.len() == MAX_VMS {
            return Err(TraceError::line(file, line, "line", Problem::TooManyVms));
        }
        let vcpus = parse_vcpus(cols[1], file, line, FIELDS[1])?;
        let memory_bytes = parse_gib(cols[2], file, line, FIELDS[2])?;
        let arrival_s = parse_seconds(cols[3], file, line, FIELDS[3])?;
        let lifetime_s = match cols[4] {
            "" => None,
            s => Some(parse_seconds(s, file, line, FIELDS[4])?),
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
}
