//! The service's typed commands and the edge's parsers that make them
//! (issue 40 item 6, the shape Firecracker's API server has): the HTTP
//! layer reads a body, a form or a query once, here, into one of these
//! values, and [`crate::Service`] takes only values, never bytes. The web
//! view's forms and the API's JSON reach the service as the same command.
//!
//! Every parser refuses with [`ApiError::BadRequest`] naming the field;
//! none panics on any input (`tests/service.rs` feeds them hostile bodies).

use crate::error::ApiError;
use numaplace_fleet::Constraints;
use numaplace_plan::{HostConstraints, Placement, Policy, Request};
use numaplace_topo::Topology;
use numaplace_wire::fleet::{
    ConstraintsDoc, DomainsReportDoc, HostPatchDoc, HostRulesDoc, OverheadDoc, PlaceForm, VmMemoryDoc,
};
use numaplace_wire::plan::request::{request_from_fields, request_from_value};
use numaplace_wire::plan::PlacementDoc;
use numaplace_wire::topology::ReservedDoc;
use serde_json::Value;
use std::collections::BTreeMap;

/// `POST /v1/placements` (and the web view's place form): one VM to
/// place, or with `dry_run` only to decide.
#[derive(Clone, Debug, PartialEq)]
pub struct Place {
    /// The VM request.
    pub request: Request,
    /// Which hosts may take it (`hosts`, `labels`; the group is
    /// [`Place::group`]).
    pub constraints: Constraints,
    /// The anti-affinity group: no host that runs a VM of it.
    pub group: Option<String>,
    /// Decide only; claim nothing.
    pub dry_run: bool,
}

impl Place {
    /// A placement request from a JSON body: one element of `plan --vms`
    /// with optional `constraints`.
    pub fn from_json(body: &[u8], dry_run: bool) -> Result<Place, ApiError> {
        let value: Value =
            serde_json::from_slice(body).map_err(|e| ApiError::BadRequest(format!("request body: not JSON: {e}")))?;
        Place::from_value(value, dry_run)
    }

    /// A placement request from a JSON value (the API's body, or the one
    /// a web form is read into).
    pub fn from_value(value: Value, dry_run: bool) -> Result<Place, ApiError> {
        let Value::Object(mut obj) = value else {
            return Err(ApiError::BadRequest("request body: expected one VM request object".into()));
        };
        let constraints: ConstraintsDoc = match obj.remove("constraints") {
            Some(c) => serde_json::from_value(c).map_err(|e| ApiError::BadRequest(format!("constraints: {e}")))?,
            None => ConstraintsDoc::default(),
        };
        let request = request_from_value(&Value::Object(obj), "request", Policy::Balanced)
            .map_err(|e| ApiError::BadRequest(e.to_string()))?;
        check_vm_name(&request.name).map_err(|why| ApiError::BadRequest(format!("name: {why}")))?;
        let group = constraints.anti_affinity.clone();
        Ok(Place { request, constraints: host_constraints(&constraints), group, dry_run })
    }

    /// The web view's place form as a command, built from its fields: the
    /// request read by the request reader's rules for texts
    /// (`request_from_fields`), the VM name checked as for the API, the
    /// hosts a comma-separated list. A field left blank is not given.
    pub fn from_form(form: &PlaceForm, dry_run: bool) -> Result<Place, ApiError> {
        fn text(o: &Option<String>) -> Option<&str> {
            o.as_deref().map(str::trim).filter(|s| !s.is_empty())
        }
        let given = [("name", &form.name), ("vcpus", &form.vcpus), ("memory", &form.memory), ("cpu", &form.cpu)];
        let mut fields: Vec<(&str, &str)> = given.iter().filter_map(|(k, v)| Some((*k, text(v)?))).collect();
        if let Some(m) = text(&form.max_nodes) {
            fields.push(("max_nodes", m));
        }
        let request = request_from_fields("request", &fields, Policy::Balanced)
            .map_err(|e| ApiError::BadRequest(e.to_string()))?;
        check_vm_name(&request.name).map_err(|why| ApiError::BadRequest(format!("name: {why}")))?;
        let hosts = text(&form.hosts)
            .map(|h| h.split(',').map(str::trim).filter(|h| !h.is_empty()).map(str::to_string).collect())
            .unwrap_or_default();
        let group = text(&form.anti_affinity).map(str::to_string);
        Ok(Place { request, constraints: Constraints { hosts, ..Constraints::default() }, group, dry_run })
    }

    /// The constraints as the fleet selects with them (the group in).
    pub fn selection(&self) -> Constraints {
        Constraints { group: self.group.clone(), ..self.constraints.clone() }
    }

    /// The constraints as a placement keeps them, so a move decides under
    /// them again.
    pub fn host_constraints(&self) -> HostConstraints {
        HostConstraints {
            hosts: self.constraints.hosts.clone(),
            labels: self.constraints.labels.clone(),
            anti_affinity: self.group.clone(),
        }
    }
}

/// `DELETE /v1/placements/{vm}` (and the web view's delete button): free a
/// VM's placement.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Delete {
    /// The VM.
    pub vm: String,
}

/// `POST`/`DELETE /v1/hosts/{name}/drain` (and the web view's buttons):
/// take a host out of placement, or back in.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Drain {
    /// The host.
    pub host: String,
    /// Drained (`true`) or back in service.
    pub drained: bool,
}

/// `DELETE /v1/hosts/{name}`: remove a host, with `force` its placements
/// too.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RemoveHost {
    /// The host.
    pub host: String,
    /// Remove its placements with it (else a host with VMs is refused).
    pub force: bool,
}

/// `POST /v1/placements/{vm}/move` (and the web view's move button): a VM
/// to another host. Each constraint given replaces the one the VM was
/// placed under; those not given are kept.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Move {
    /// The VM.
    pub vm: String,
    /// Only these hosts (empty: the VM's own constraint).
    pub hosts: Vec<String>,
    /// Only hosts with these labels (empty: the VM's own constraint).
    pub labels: BTreeMap<String, String>,
    /// Another anti-affinity group (`None`: the VM's).
    pub group: Option<String>,
    /// Decide only; claim nothing.
    pub dry_run: bool,
}

impl Move {
    /// A move from its JSON body (empty: no constraints of its own).
    pub fn from_json(vm: String, body: &[u8], dry_run: bool) -> Result<Move, ApiError> {
        let extra: ConstraintsDoc = if body.iter().all(u8::is_ascii_whitespace) {
            ConstraintsDoc::default()
        } else {
            serde_json::from_slice(body).map_err(|e| ApiError::BadRequest(format!("move body: {e}")))?
        };
        Ok(Move { vm, hosts: extra.hosts, labels: extra.labels, group: extra.anti_affinity, dry_run })
    }
}

/// `PUT /v1/hosts/{name}`: a host registered or its topology replaced.
#[derive(Clone, Debug)]
pub struct Register {
    /// The host's name.
    pub host: String,
    /// Its topology.
    pub topology: Topology,
    /// The upload's own `reserved` object (a topology JSON may carry one).
    pub reserved: Option<ReservedDoc>,
    /// The query's reservations, over the upload's.
    pub overrides: Reserve,
    /// The labels, all of them (`None`: keep the stored ones).
    pub labels: Option<BTreeMap<String, String>>,
    /// The planning rules the query gives (the profile's `memory_kinds`
    /// and `[qemu_overhead]`; [`rules_of`]); `None`: none given.
    pub rules: Option<HostRulesDoc>,
}

/// The planning rules a registration's query gives: `None` when it gives
/// none of `memory_kinds`, `qemu_overhead_fixed`, `qemu_overhead_per_gib`;
/// else all of them, each one not given at its default. 400 naming the
/// parameter for a value that does not read.
pub fn rules_of(
    memory_kinds: Option<&str>,
    fixed: Option<&str>,
    per_gib: Option<&str>,
) -> Result<Option<HostRulesDoc>, ApiError> {
    if memory_kinds.is_none() && fixed.is_none() && per_gib.is_none() {
        return Ok(None);
    }
    let mut kinds = Vec::new();
    for name in memory_kinds.unwrap_or("").split(',').map(str::trim).filter(|n| !n.is_empty()) {
        let kind = numaplace_topo::MemoryKind::from_name(name).ok_or_else(|| {
            ApiError::BadRequest(format!(
                "memory_kinds: expected memory kinds from dram, hbm, cxl, gpu, nvm, other, found {name:?}"
            ))
        })?;
        if kind != numaplace_topo::MemoryKind::Dram && !kinds.contains(&kind.as_str().to_string()) {
            kinds.push(kind.as_str().to_string());
        }
    }
    let default = numaplace_plan::Overhead::default();
    let size = |key: &str, text: Option<&str>, or: u64| -> Result<u64, ApiError> {
        text.map_or(Ok(or), |t| {
            numaplace_topo::try_parse_size(t)
                .map_err(|e| ApiError::BadRequest(format!("{key}: expected a size such as 64MiB, found {t:?} ({e})")))
        })
    };
    let overhead = OverheadDoc {
        fixed_bytes: size("qemu_overhead_fixed", fixed, default.fixed_bytes)?,
        per_gib_bytes: size("qemu_overhead_per_gib", per_gib, default.per_gib_bytes)?,
    };
    let is_default = overhead.fixed_bytes == default.fixed_bytes && overhead.per_gib_bytes == default.per_gib_bytes;
    Ok(Some(HostRulesDoc { memory_kinds: kinds, qemu_overhead: (!is_default).then_some(overhead) }))
}

/// Reservations given as the CLI's flags give them (CPU lists and a
/// size, each `None` when not given, `""` for none), resolved by the
/// service over the stored or uploaded ones with the CLI's rules
/// (`numaplace_wire::profile::resolve`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Reserve {
    /// `reserved_cpus`.
    pub reserved_cpus: Option<String>,
    /// `shared_cpus`.
    pub shared_cpus: Option<String>,
    /// `reserved_memory`.
    pub reserved_memory: Option<String>,
}

impl Reserve {
    /// Whether any is given.
    pub fn any(&self) -> bool {
        self.reserved_cpus.is_some() || self.shared_cpus.is_some() || self.reserved_memory.is_some()
    }
}

impl Register {
    /// A registration from the host's name, the upload (any format
    /// `numaplace topology --from` reads) and the query's values.
    pub fn from_upload(
        host: String,
        body: Vec<u8>,
        overrides: Reserve,
        labels: Option<&str>,
    ) -> Result<Register, ApiError> {
        check_host_name(&host)?;
        let read = numaplace_read::read_bytes(&host, body).map_err(|e| ApiError::BadRequest(e.to_string()))?;
        let labels = labels.map(parse_labels).transpose()?;
        Ok(Register { host, topology: read.topology, reserved: read.reserved, overrides, labels, rules: None })
    }
}

/// `PATCH /v1/hosts/{name}`: some of a host's settings.
#[derive(Clone, Debug)]
pub struct Patch {
    /// The host's name.
    pub host: String,
    /// The labels, all of them (`None`: keep).
    pub labels: Option<BTreeMap<String, String>>,
    /// The reservations given (the rest kept).
    pub reserve: Reserve,
}

impl Patch {
    /// A patch from its JSON body.
    pub fn from_json(host: String, body: &[u8]) -> Result<Patch, ApiError> {
        let doc: HostPatchDoc =
            serde_json::from_slice(body).map_err(|e| ApiError::BadRequest(format!("host patch: {e}")))?;
        Patch::from_doc(host, doc)
    }

    /// A patch from its document, each label checked.
    pub fn from_doc(host: String, doc: HostPatchDoc) -> Result<Patch, ApiError> {
        if let Some(l) = &doc.labels {
            for (k, v) in l {
                check_label(k, v)?;
            }
        }
        Ok(Patch {
            host,
            labels: doc.labels,
            reserve: Reserve {
                reserved_cpus: doc.reserved_cpus,
                shared_cpus: doc.shared_cpus,
                reserved_memory: doc.reserved_memory,
            },
        })
    }
}

/// `PUT /v1/hosts/{name}/domains`: an agent's report of the domains on
/// its host.
#[derive(Clone, Debug)]
pub struct Report {
    /// The host.
    pub host: String,
    /// Each domain reported: its document (kept as reported) and the
    /// placement it holds, by VM name.
    pub domains: BTreeMap<String, (PlacementDoc, Placement)>,
    /// Where each running domain's memory is now.
    pub memory: Vec<VmMemoryDoc>,
    /// The persistent definitions of running domains whose pins differ
    /// from the live ones, by VM name.
    pub defined: BTreeMap<String, Placement>,
}

impl Report {
    /// A report from its JSON body.
    pub fn from_json(host: String, body: &[u8]) -> Result<Report, ApiError> {
        let report: DomainsReportDoc =
            serde_json::from_slice(body).map_err(|e| ApiError::BadRequest(format!("domains report: {e}")))?;
        Report::from_doc(host, report)
    }

    /// A report from its document, each domain read into a placement.
    pub fn from_doc(host: String, report: DomainsReportDoc) -> Result<Report, ApiError> {
        let mut domains = BTreeMap::new();
        for (i, d) in report.domains.into_iter().enumerate() {
            let p = d.to_placement(&format!("domains[{i}]")).map_err(|e| ApiError::BadRequest(e.to_string()))?;
            domains.insert(p.vm.clone(), (d, p));
        }
        let mut defined = BTreeMap::new();
        for (i, d) in report.defined.into_iter().enumerate() {
            let p = d.to_placement(&format!("defined[{i}]")).map_err(|e| ApiError::BadRequest(e.to_string()))?;
            defined.insert(p.vm.clone(), p);
        }
        Ok(Report { host, domains, memory: report.memory, defined })
    }
}

/// Which hosts a list shows: the API's `?label=&kind=` and the fleet
/// page's filters, read one way.
#[derive(Clone, Debug, Default)]
pub struct HostFilter {
    /// Only hosts in this condition.
    pub state: Option<HostCondition>,
    /// Only hosts of this kind (empty: any).
    pub kind: Option<String>,
    /// Only hosts with this label: `key` (any value) or `key=value`.
    pub label: Option<String>,
    /// Only hosts with at least this many free threads.
    pub min_free_threads: Option<u32>,
}

impl HostFilter {
    /// Whether `h` is shown.
    pub fn matches(&self, h: &numaplace_fleet::FleetHost) -> bool {
        if let Some(kind) = self.kind.as_deref().filter(|k| !k.is_empty()) {
            if h.kind() != kind {
                return false;
            }
        }
        if let Some(label) = self.label.as_deref().filter(|l| !l.is_empty()) {
            let (k, v) = match label.split_once('=') {
                Some((k, v)) => (k, Some(v)),
                None => (label, None),
            };
            if h.labels.get(k).is_none_or(|have| v.is_some_and(|v| have != v)) {
                return false;
            }
        }
        if let Some(want) = self.state {
            let have = HostCondition::of(h);
            let ok = have == want || (want == HostCondition::InService && have != HostCondition::Drained);
            if !ok {
                return false;
            }
        }
        self.min_free_threads.is_none_or(|min| h.summary.free_threads >= min)
    }
}

/// A host's condition as the fleet page counts and filters hosts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HostCondition {
    /// Taking VMs, with some and room for the smallest common one. As a
    /// filter: every host not drained.
    InService,
    /// Drained: taking no new VMs.
    Drained,
    /// In service, but unable to take the smallest common VM
    /// ([`numaplace_fleet::STRANDED_PROBE`]): its free capacity is
    /// stranded.
    Stranded,
    /// In service, with no VM (and room for one).
    Empty,
}

impl HostCondition {
    /// Every condition, in the order the page lists them.
    pub const ALL: [HostCondition; 4] =
        [HostCondition::InService, HostCondition::Empty, HostCondition::Stranded, HostCondition::Drained];

    /// The name in query strings and on the page.
    pub fn name(self) -> &'static str {
        match self {
            HostCondition::InService => "in-service",
            HostCondition::Drained => "drained",
            HostCondition::Stranded => "stranded",
            HostCondition::Empty => "empty",
        }
    }

    /// The most specific condition of a host (drained, then stranded,
    /// then empty; in service otherwise).
    pub fn of(h: &numaplace_fleet::FleetHost) -> HostCondition {
        if h.drained {
            HostCondition::Drained
        } else if h.free().stranded(&[numaplace_fleet::STRANDED_PROBE]) {
            HostCondition::Stranded
        } else if h.state.placements().is_empty() {
            HostCondition::Empty
        } else {
            HostCondition::InService
        }
    }
}

/// Most hosts on one page of the fleet page.
pub const MAX_PER_PAGE: usize = 500;

/// The fleet page's query, read and checked: what to show and which page.
#[derive(Clone, Debug)]
pub struct FleetView {
    /// Which hosts.
    pub filter: HostFilter,
    /// The page, from 1 (a page past the last shows the last).
    pub page: usize,
    /// Hosts per page, 1 to [`MAX_PER_PAGE`].
    pub per_page: usize,
}

impl FleetView {
    /// Reads the page's query string; a bad value is refused naming the
    /// parameter and what it takes.
    pub fn from_query(
        q: &numaplace_wire::fleet::FleetPageQuery,
        default_per_page: usize,
    ) -> Result<FleetView, ApiError> {
        let state = match q.state.as_deref().map(str::trim).filter(|s| !s.is_empty()) {
            None => None,
            Some(s) => Some(HostCondition::ALL.into_iter().find(|c| c.name() == s).ok_or_else(|| {
                let names: Vec<&str> = HostCondition::ALL.iter().map(|c| c.name()).collect();
                ApiError::BadRequest(format!("query parameter state: expected one of {}, got {s:?}", names.join(", ")))
            })?),
        };
        let page = number(q.page.as_deref(), "page")?.unwrap_or(1);
        if page == 0 {
            return Err(ApiError::BadRequest("query parameter page: pages count from 1, got 0".to_string()));
        }
        let per_page = number(q.per_page.as_deref(), "per_page")?.unwrap_or(default_per_page);
        if per_page == 0 || per_page > MAX_PER_PAGE {
            return Err(ApiError::BadRequest(format!(
                "query parameter per_page: expected 1 to {MAX_PER_PAGE} hosts, got {per_page}"
            )));
        }
        let min_free_threads = number(q.min_free_threads.as_deref(), "min_free_threads")?;
        let filter = HostFilter { state, kind: q.kind.clone(), label: q.label.clone(), min_free_threads };
        Ok(FleetView { filter, page, per_page })
    }
}

/// A query parameter's whole number; an empty field (a form left blank) is
/// none.
fn number<T: std::str::FromStr>(given: Option<&str>, name: &str) -> Result<Option<T>, ApiError> {
    match given.map(str::trim) {
        None | Some("") => Ok(None),
        Some(v) => v
            .parse()
            .map(Some)
            .map_err(|_| ApiError::BadRequest(format!("query parameter {name}: expected a whole number, got {v:?}"))),
    }
}

fn host_constraints(doc: &ConstraintsDoc) -> Constraints {
    Constraints { group: None, ..doc.to_constraints() }
}

/// Longest host name accepted (a DNS name).
pub const MAX_HOST_NAME: usize = 253;

/// Longest VM name accepted, as for host names.
pub const MAX_VM_NAME: usize = 253;

/// A VM name the API takes: it is a path segment of its links and a
/// libvirt domain name, and it is shown on pages and in logs. Returns
/// why not.
pub fn check_vm_name(name: &str) -> Result<(), String> {
    if name.is_empty() || name.len() > MAX_VM_NAME {
        return Err(format!("expected 1 to {MAX_VM_NAME} bytes, found {}", name.len()));
    }
    if name == "." || name == ".." {
        return Err(format!("`{name}` names a path, not a VM"));
    }
    if let Some(c) = name.chars().find(|&c| c == '/' || c.is_control() || is_format_char(c)) {
        return Err(format!(
            "U+{:04X} is not allowed (no '/', control characters, or invisible format characters such as \
             bidi controls)",
            c as u32
        ));
    }
    Ok(())
}

/// Unicode's format characters (category Cf) and the line and paragraph
/// separators: invisible, and the bidi controls among them can make a
/// name read as another (CVE-2021-42574).
fn is_format_char(c: char) -> bool {
    matches!(c as u32,
        0x00AD | 0x0600..=0x0605 | 0x061C | 0x06DD | 0x070F | 0x0890..=0x0891 | 0x08E2 | 0x180E
        | 0x200B..=0x200F | 0x2028..=0x202E | 0x2060..=0x2064 | 0x2066..=0x206F | 0xFEFF | 0xFFF9..=0xFFFB
        | 0x110BD | 0x110CD | 0x13430..=0x1343F | 0x1BCA0..=0x1BCA3 | 0x1D173..=0x1D17A | 0xE0001
        | 0xE0020..=0xE007F)
}

/// A label given through `PATCH`: as the query form reads them.
fn check_label(key: &str, value: &str) -> Result<(), ApiError> {
    if key.is_empty() || key.contains([',', '=']) || value.contains(',') {
        return Err(ApiError::BadRequest(format!(
            "labels: `{key}`: expected a non-empty key without ',' or '=', and a value without ','"
        )));
    }
    Ok(())
}

/// A host name the API takes.
pub fn check_host_name(name: &str) -> Result<(), ApiError> {
    // `.` and `..` are path segments: their links would resolve to
    // another page.
    let ok = !name.is_empty()
        && name.len() <= MAX_HOST_NAME
        && name != "."
        && name != ".."
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || b"-._".contains(&b));
    if ok {
        Ok(())
    } else {
        Err(ApiError::BadRequest(format!(
            "host name `{}`: expected 1 to {MAX_HOST_NAME} letters, digits, '-', '.' or '_' (not `.` or `..`)",
            name.chars().take(64).collect::<String>()
        )))
    }
}

/// `key=value,key=value`.
fn parse_labels(text: &str) -> Result<BTreeMap<String, String>, ApiError> {
    let mut out = BTreeMap::new();
    for item in text.split(',').filter(|s| !s.is_empty()) {
        let (k, v) = item
            .split_once('=')
            .filter(|(k, _)| !k.is_empty())
            .ok_or_else(|| ApiError::BadRequest(format!("labels: `{item}`: expected key=value")))?;
        out.insert(k.to_string(), v.to_string());
    }
    Ok(out)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    /// The web view's form and the API's JSON are one command: the
    /// service cannot tell them apart, so they are placed and refused
    /// alike.
    #[test]
    fn a_form_and_a_json_body_are_the_same_command() {
        let form = PlaceForm {
            name: Some("db1".into()),
            vcpus: Some("4".into()),
            memory: Some("8GiB".into()),
            cpu: Some("dedicated".into()),
            hosts: Some("h1, h2".into()),
            anti_affinity: Some("db".into()),
            ..PlaceForm::default()
        };
        let from_form = Place::from_form(&form, true).unwrap();
        let body = br#"{"name":"db1","vcpus":4,"memory":"8GiB","cpu":"dedicated","constraints":{"hosts":["h1","h2"],"anti_affinity":"db"}}"#;
        let from_json = Place::from_json(body, true).unwrap();
        assert_eq!(from_form, from_json);
        assert_eq!(from_json.group.as_deref(), Some("db"));
        assert_eq!(from_json.constraints.hosts, ["h1", "h2"]);
        assert_eq!(from_json.selection().group.as_deref(), Some("db"), "the fleet selects with the group");
        let bad = PlaceForm { vcpus: Some("four".into()), ..form.clone() };
        // The form builds its command without JSON in between, refused by
        // the request reader's own words, naming the field.
        let m = match Place::from_form(&bad, true).unwrap_err() {
            ApiError::BadRequest(m) => m,
            other => panic!("{other:?}"),
        };
        assert!(m.contains("vcpus") && m.contains("`four`"), "{m}");
        let unnamed = PlaceForm { name: Some("  ".into()), ..form.clone() };
        assert!(matches!(Place::from_form(&unnamed, true), Err(ApiError::BadRequest(m)) if m.contains("name")));
        let dotted = PlaceForm { name: Some("..".into()), ..form };
        assert!(matches!(Place::from_form(&dotted, true), Err(ApiError::BadRequest(m)) if m.starts_with("name: ")));
    }

    #[test]
    fn bodies_are_refused_naming_what_is_wrong() {
        let message = |e: ApiError| match e {
            ApiError::BadRequest(m) => m,
            other => panic!("{other:?}"),
        };
        assert!(message(Place::from_json(b"[1]", false).unwrap_err()).contains("one VM request object"));
        assert!(message(Place::from_json(br#"{"name":"..","vcpus":1,"memory":"1GiB"}"#, false).unwrap_err())
            .starts_with("name: "));
        let m = message(Move::from_json("v".into(), br#"{"host":["h1"]}"#, false).unwrap_err());
        assert!(m.starts_with("move body: unknown field `host`"), "{m}");
        assert_eq!(
            Move::from_json("v".into(), b"  ", true).unwrap(),
            Move { vm: "v".into(), dry_run: true, ..Move::default() }
        );
        let m = message(Patch::from_json("h1".into(), br#"{"labels":{"a=b":"c"}}"#).unwrap_err());
        assert!(m.starts_with("labels: `a=b`"), "{m}");
        let m = message(Register::from_upload("..".into(), Vec::new(), Reserve::default(), None).unwrap_err());
        assert!(m.starts_with("host name `..`"), "{m}");
        let m = message(Report::from_json("h1".into(), br#"{"domains": 1}"#).unwrap_err());
        assert!(m.starts_with("domains report: "), "{m}");
    }
}

/// A client's `Idempotency-Key` header and the request it came with
/// (docs/serve.md, "Retries"): the answer of the change it made is kept
/// under it, and a retry with the same key is answered that again.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IdempotencyKey {
    /// The key as sent.
    pub key: String,
    /// The request: method, path and a digest of the body, so a key sent
    /// again with another request is refused rather than answered another
    /// request's answer.
    pub request: String,
}

impl IdempotencyKey {
    /// The header's value for a request: 1 to 255 visible ASCII
    /// characters (a UUID, say), else 400 naming the header.
    pub fn new(key: &str, method: &str, path: &str, body: &[u8]) -> Result<IdempotencyKey, ApiError> {
        if key.is_empty() || key.len() > numaplace_store::MAX_KEY || !key.bytes().all(|b| b.is_ascii_graphic()) {
            return Err(ApiError::BadRequest(format!(
                "Idempotency-Key: expected 1 to {} visible ASCII characters (a UUID, say), found {} bytes",
                numaplace_store::MAX_KEY,
                key.len()
            )));
        }
        Ok(IdempotencyKey { key: key.to_owned(), request: format!("{method} {path} fnv1a64:{:016x}", fnv1a64(body)) })
    }

    /// The answer to keep under this key.
    pub(crate) fn answer(&self, status: u16, body: String) -> Result<numaplace_store::Answer, ApiError> {
        Ok(numaplace_store::Answer { key: self.key.clone(), request: self.request.clone(), status, body })
    }
}

/// FNV-1a, 64 bits: a digest that tells a body from another one sent by
/// mistake under the same key (not a defence against a client forging
/// collisions with its own requests, which would gain it nothing), stable
/// across Rust versions and replicas, as a stored value must be.
fn fnv1a64(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in bytes {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}
