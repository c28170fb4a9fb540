//! The exporter's output checked by a strict parser of the Prometheus
//! text format (0.0.4): names and label syntax, HELP/TYPE before a
//! family's samples, families contiguous, no duplicate series, `_total`
//! only on counters, values that parse; then the values themselves, and
//! the HTTP server answering a real scrape.

use numaplace_observe::sample::{Options, Sampler};
use numaplace_observe::{prom, FsSource};
use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

type Series = BTreeMap<(String, BTreeMap<String, String>), f64>;

fn valid_name(n: &str) -> bool {
    let mut c = n.chars();
    c.next().is_some_and(|f| f.is_ascii_alphabetic() || f == '_' || f == ':')
        && c.all(|x| x.is_ascii_alphanumeric() || x == '_' || x == ':')
}

/// Parses `{a="x",b="y\"z"}`; returns the labels and the rest of the line.
fn parse_labels(s: &str) -> Result<(BTreeMap<String, String>, &str), String> {
    let mut labels = BTreeMap::new();
    let Some(mut rest) = s.strip_prefix('{') else { return Ok((labels, s)) };
    loop {
        if let Some(r) = rest.strip_prefix('}') {
            return Ok((labels, r));
        }
        let eq = rest.find('=').ok_or("label without =")?;
        let name = &rest[..eq];
        if !valid_name(name) || name.contains(':') || name.starts_with("__") {
            return Err(format!("bad label name {name:?}"));
        }
        rest = rest[eq + 1..].strip_prefix('"').ok_or("label value not quoted")?;
        let mut value = String::new();
        let mut chars = rest.char_indices();
        let end = loop {
            match chars.next() {
                Some((_, '\\')) => match chars.next() {
                    Some((_, 'n')) => value.push('\n'),
                    Some((_, '\\')) => value.push('\\'),
                    Some((_, '"')) => value.push('"'),
                    other => return Err(format!("bad escape {other:?}")),
                },
                Some((i, '"')) => break i,
                Some((_, c)) => value.push(c),
                None => return Err("unterminated label value".into()),
            }
        };
        if labels.insert(name.to_string(), value).is_some() {
            return Err(format!("label {name} twice"));
        }
        rest = &rest[end + 1..];
        rest = rest.strip_prefix(',').unwrap_or(rest);
    }
}

/// A strict validator; returns every series and the family types.
fn validate(text: &str) -> Result<(Series, BTreeMap<String, String>), String> {
    let mut types: BTreeMap<String, String> = BTreeMap::new();
    let mut helped = BTreeSet::new();
    let mut closed = BTreeSet::new();
    let mut current: Option<String> = None;
    let mut series = Series::new();
    if !text.ends_with('\n') {
        return Err("output must end with a newline".into());
    }
    for (i, line) in text.lines().enumerate() {
        let at = |m: String| format!("line {}: {m}: {line:?}", i + 1);
        if let Some(rest) = line.strip_prefix("# ") {
            let mut f = rest.splitn(3, ' ');
            let (kw, name, tail) = (f.next().unwrap_or(""), f.next().unwrap_or(""), f.next().unwrap_or(""));
            if !valid_name(name) {
                return Err(at("bad metric name".into()));
            }
            if current.as_deref() != Some(name) {
                if let Some(c) = current.take() {
                    closed.insert(c);
                }
                if closed.contains(name) {
                    return Err(at("family split in two".into()));
                }
                current = Some(name.to_string());
            }
            match kw {
                "HELP" if helped.insert(name.to_string()) && !tail.is_empty() => {}
                "TYPE" if ["counter", "gauge", "untyped", "summary", "histogram"].contains(&tail) => {
                    if series.keys().any(|(n, _)| n == name)
                        || types.insert(name.to_string(), tail.to_string()).is_some()
                    {
                        return Err(at("TYPE after samples or twice".into()));
                    }
                }
                _ => return Err(at("bad comment".into())),
            }
            continue;
        }
        let name_end = line.find(['{', ' ']).ok_or_else(|| at("no value".into()))?;
        let name = &line[..name_end];
        if !valid_name(name) {
            return Err(at("bad metric name".into()));
        }
        if current.as_deref() != Some(name) {
            return Err(at("sample outside its family (no TYPE line right before)".into()));
        }
        if !types.contains_key(name) || !helped.contains(name) {
            return Err(at("sample without HELP and TYPE".into()));
        }
        let (labels, rest) = parse_labels(&line[name_end..]).map_err(at)?;
        let mut f = rest.split(' ').filter(|s| !s.is_empty());
        let value = f.next().ok_or_else(|| at("no value".into()))?;
        let v: f64 = match value {
            "NaN" => f64::NAN,
            "+Inf" => f64::INFINITY,
            "-Inf" => f64::NEG_INFINITY,
            v => v.parse().map_err(|_| at("value is not a number".into()))?,
        };
        if let Some(ts) = f.next() {
            ts.parse::<i64>().map_err(|_| at("bad timestamp".into()))?;
        }
        if series.insert((name.to_string(), labels), v).is_some() {
            return Err(at("duplicate series".into()));
        }
    }
    for (name, t) in &types {
        if (t == "counter") != name.ends_with("_total") {
            return Err(format!("{name}: counters, and only counters, end in _total"));
        }
    }
    Ok((series, types))
}

fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
}

fn data(rel: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/data").join(rel)
}

#[test]
fn the_validator_rejects_what_prometheus_rejects() {
    assert!(validate("# HELP a x\n# TYPE a gauge\na 1\n").is_ok());
    assert!(validate("a 1\n").is_err(), "no TYPE");
    assert!(validate("# HELP a x\n# TYPE a gauge\na{b=\"1} 1\n").is_err());
    assert!(validate("# HELP a x\n# TYPE a gauge\na 1\na 2\n").is_err());
    assert!(validate("# HELP a_total x\n# TYPE a_total gauge\na_total 1\n").is_err());
    assert!(validate("# HELP a x\n# TYPE a gauge\na one\n").is_err());
}

#[test]
fn vm_metrics_are_valid_and_carry_the_figures() {
    let mut s = Sampler::new(FsSource::new(data("host-qemu")), Options::default());
    let snap = s.sample().expect("sample");
    let text = prom::render(&snap);
    let (series, types) = validate(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
    let get = |name: &str, l: &[(&str, &str)]| series.get(&(name.to_string(), labels(l))).copied();
    assert_eq!(
        get("numaplace_vm_memory_bytes", &[("vm", "app3"), ("pid", "32218"), ("node", "0")]),
        Some(208_822_272.0)
    );
    assert_eq!(get("numaplace_vm_local_memory_ratio", &[("vm", "db1"), ("pid", "31386")]), Some(1.0));
    assert_eq!(get("numaplace_vm_configured_memory_bytes", &[("vm", "web2"), ("pid", "31885")]), Some(536_870_912.0));
    assert_eq!(get("numaplace_vm_home_node_migrations_total", &[("vm", "db1"), ("pid", "31386")]), Some(0.0));
    assert_eq!(get("numaplace_vm_threads", &[("vm", "app3"), ("pid", "32218"), ("node", "0")]), Some(2.0));
    assert_eq!(types.get("numaplace_vm_home_node_migrations_total").map(String::as_str), Some("counter"));
    assert_eq!(get("numaplace_node_cpus", &[("node", "0")]), Some(2.0));
    assert_eq!(get("numaplace_numa_nodes", &[]), Some(1.0));
}

#[test]
fn process_metrics_and_label_escaping() {
    let mut s = Sampler::new(FsSource::new(data("guest-a")), Options { all: true, ..Options::default() });
    let mut snap = s.sample().expect("sample");
    snap.processes[0].name = "odd \"name\"\\ with\nnewline".into();
    let text = prom::render(&snap);
    let (series, _) = validate(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
    let key = ("numaplace_process_remote_memory_bytes".to_string(), labels(&[("process", "memhog"), ("pid", "101")]));
    assert_eq!(series.get(&key), Some(&8_511_488.0));
    let ratio = ("numaplace_process_local_memory_ratio".to_string(), labels(&[("process", "memhog"), ("pid", "101")]));
    assert!((series[&ratio] - 0.14975).abs() < 1e-4);
    assert!(series.keys().any(|(_, l)| l.get("process").is_some_and(|v| v == "odd \"name\"\\ with\nnewline")));
}
