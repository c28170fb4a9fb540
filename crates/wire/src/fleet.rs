//! The fleet service's JSON (docs/serve.md): hosts with their free
//! capacity per node, placements with their host and links, and errors,
//! including the fleet-wide rejection. Built from the fleet crate's typed
//! values; the sentences come from their `Display`.

use crate::plan::{PlacementDoc, ReservedDoc};
use numaplace_fleet::{FleetHost, FleetRejection, HostSkip, NodeSummary};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Free huge pages of one size on a node.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct HugePagesFreeDoc {
    /// Page size, bytes.
    pub size_bytes: u64,
    /// Free pages.
    pub free: u64,
}

/// One node's capacity and what is free of it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeCapacityDoc {
    /// Node number.
    pub node: u32,
    /// Cores.
    pub cores: u32,
    /// Online threads.
    pub threads: u32,
    /// Memory for VMs, bytes.
    pub memory_bytes: u64,
    /// Cores with every thread free.
    pub free_cores: u32,
    /// Free threads.
    pub free_threads: u32,
    /// Free memory for VMs, bytes.
    pub free_memory_bytes: u64,
    /// Free huge pages per size.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub hugepages: Vec<HugePagesFreeDoc>,
    /// The node's kind of memory (`dram`, `hbm`, `cxl`, `gpu`, `nvm`,
    /// `other`), as the registered topology says (a host profile's
    /// `[node_kinds]` applied by its agent). Always given by the service;
    /// optional for readers of documents written before it was.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_kind: Option<String>,
}

impl From<&NodeSummary> for NodeCapacityDoc {
    fn from(n: &NodeSummary) -> NodeCapacityDoc {
        NodeCapacityDoc {
            node: n.id.0,
            cores: n.cores,
            threads: n.threads,
            memory_bytes: n.memory,
            free_cores: n.free_cores,
            free_threads: n.free_threads,
            free_memory_bytes: n.free_memory,
            hugepages: n.hugepages.iter().map(|&(size_bytes, free)| HugePagesFreeDoc { size_bytes, free }).collect(),
            memory_kind: None,
        }
    }
}

/// A host in `GET /v1/hosts`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct HostDoc {
    /// Name.
    pub name: String,
    /// Its shape (packages/nodes/cores/threads/memory).
    pub kind: String,
    /// The store generation, bumped by every change.
    pub generation: i64,
    /// Takes no new VMs.
    pub drained: bool,
    /// Labels.
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
    /// Reservations, when any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reserved: Option<ReservedDoc>,
    /// The planning rules its profile gives beside the reservations,
    /// when any differs from the default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rules: Option<HostRulesDoc>,
    /// Free cores over the host.
    pub free_cores: u32,
    /// Free threads over the host.
    pub free_threads: u32,
    /// Free memory over the host, bytes.
    pub free_memory_bytes: u64,
    /// Per node.
    pub nodes: Vec<NodeCapacityDoc>,
    /// VMs on the host, by name.
    pub vms: Vec<String>,
}

impl HostDoc {
    /// The document of a fleet host.
    pub fn new(h: &FleetHost) -> HostDoc {
        let mut vms: Vec<String> = h.state.placements().iter().map(|p| p.vm.clone()).collect();
        vms.sort();
        HostDoc {
            name: h.name.clone(),
            kind: h.kind(),
            generation: h.generation,
            drained: h.drained,
            labels: h.labels.clone(),
            reserved: ReservedDoc::new(h.state.reservations()),
            rules: HostRulesDoc::new(h.state.reservations()),
            free_cores: h.summary.free_cores,
            free_threads: h.summary.free_threads,
            free_memory_bytes: h.summary.free_memory,
            nodes: h
                .summary
                .nodes
                .iter()
                .map(|n| {
                    let kind = h.topology.node_index(n.id).map(|i| h.topology.memory_kind(i).as_str().to_string());
                    NodeCapacityDoc { memory_kind: kind, ..NodeCapacityDoc::from(n) }
                })
                .collect(),
            vms,
        }
    }
}

/// QEMU's memory beside each VM's own (the host profile's
/// `[qemu_overhead]`), in bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OverheadDoc {
    /// Bytes for every VM whatever its size.
    pub fixed_bytes: u64,
    /// Bytes per GiB of the VM's memory.
    pub per_gib_bytes: u64,
}

/// A host's planning rules beside its reservations, from its host
/// profile (docs/formats/host-profile.md): the kinds of memory beside
/// DRAM a VM naming none may use (`memory_kinds`), and QEMU's memory
/// overhead (`[qemu_overhead]`). The service stores it with the host as
/// the agent registers it; absent, the defaults (DRAM only; 64 MiB plus
/// 8 MiB per GiB).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HostRulesDoc {
    /// Memory kinds beside DRAM (`hbm`, `cxl`, ...); empty: DRAM only.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub memory_kinds: Vec<String>,
    /// QEMU's overhead; absent: the default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub qemu_overhead: Option<OverheadDoc>,
}

impl HostRulesDoc {
    /// The rules of a host's reservations (`None` when all are the
    /// defaults).
    pub fn new(r: &numaplace_plan::Reservations) -> Option<HostRulesDoc> {
        let overhead = (r.overhead != numaplace_plan::Overhead::default())
            .then_some(OverheadDoc { fixed_bytes: r.overhead.fixed_bytes, per_gib_bytes: r.overhead.per_gib_bytes });
        let doc = HostRulesDoc {
            memory_kinds: r.memory_kinds.iter().map(|k| k.as_str().to_string()).collect(),
            qemu_overhead: overhead,
        };
        (doc != HostRulesDoc::default()).then_some(doc)
    }

    /// Puts the rules into a host's reservations; `Err` names the field
    /// that does not read.
    pub fn apply(&self, r: &mut numaplace_plan::Reservations) -> Result<(), String> {
        let mut kinds = Vec::new();
        for (i, name) in self.memory_kinds.iter().enumerate() {
            let kind = numaplace_topo::MemoryKind::from_name(name)
                .ok_or_else(|| format!("memory_kinds[{i}]: expected a memory kind, found {name:?}"))?;
            if kind != numaplace_topo::MemoryKind::Dram && !kinds.contains(&kind) {
                kinds.push(kind);
            }
        }
        r.memory_kinds = kinds;
        r.overhead = self.qemu_overhead.map_or_else(numaplace_plan::Overhead::default, |o| numaplace_plan::Overhead {
            fixed_bytes: o.fixed_bytes,
            per_gib_bytes: o.per_gib_bytes,
        });
        Ok(())
    }
}

/// One host with its placements and host map (`GET /v1/hosts/{name}`).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct HostDetailDoc {
    /// The host.
    #[serde(flatten)]
    pub host: HostDoc,
    /// Its placements.
    pub placements: Vec<PlacementDoc>,
    /// The host map as `numaplace plan` prints it (one line per node).
    pub map: String,
}

/// Where a placement's renderings are.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LinksDoc {
    /// The placement.
    #[serde(rename = "self")]
    pub this: String,
    /// Its libvirt domain XML.
    pub libvirt: String,
    /// Its QEMU arguments.
    pub qemu: String,
}

impl LinksDoc {
    /// The links of a VM's placement.
    pub fn new(vm: &str) -> LinksDoc {
        let this = format!("/v1/placements/{}", path_escape(vm));
        LinksDoc { libvirt: format!("{this}?format=libvirt"), qemu: format!("{this}?format=qemu"), this }
    }
}

/// Percent-escapes a path segment (VM names may hold any character the
/// request reader accepts).
pub fn path_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// A placement with its host (`POST` and `GET /v1/placements/{vm}`).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct PlacedDoc {
    /// The host.
    pub host: String,
    /// True when nothing was claimed (`?dry_run=true`).
    #[serde(default)]
    pub dry_run: bool,
    /// Who put it there: `service`, or `agent` for a VM the host's agent
    /// reported and the service did not place.
    pub origin: String,
    /// The anti-affinity group, when any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group: Option<String>,
    /// The placement, as one element of a plan document's `placements`.
    pub placement: PlacementDoc,
    /// Its renderings; absent for a dry run (nothing is stored there to
    /// link to).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub links: Option<LinksDoc>,
}

/// A page of placements (`GET /v1/placements`).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct PlacementPageDoc {
    /// The placements, by VM name.
    pub placements: Vec<PlacedDoc>,
    /// The `after` to ask for the next page, when there is one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next: Option<String>,
}

/// The host constraints a placement request may carry, under
/// `constraints` beside the VM request's fields.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConstraintsDoc {
    /// Only these hosts.
    #[serde(default)]
    pub hosts: Vec<String>,
    /// Only hosts with every one of these labels.
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
    /// No host that already runs a VM of this group.
    #[serde(default)]
    pub anti_affinity: Option<String>,
}

impl ConstraintsDoc {
    /// The fleet's constraints.
    pub fn to_constraints(&self) -> numaplace_fleet::Constraints {
        numaplace_fleet::Constraints::of(&self.to_host_constraints())
    }

    /// The typed constraints a placement record keeps.
    pub fn to_host_constraints(&self) -> numaplace_plan::HostConstraints {
        numaplace_plan::HostConstraints {
            hosts: self.hosts.clone(),
            labels: self.labels.clone(),
            anti_affinity: self.anti_affinity.clone(),
        }
    }
}

impl From<&numaplace_plan::HostConstraints> for ConstraintsDoc {
    fn from(c: &numaplace_plan::HostConstraints) -> ConstraintsDoc {
        ConstraintsDoc { hosts: c.hosts.clone(), labels: c.labels.clone(), anti_affinity: c.anti_affinity.clone() }
    }
}

/// Why one host was ruled out.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SkipDoc {
    /// Stable code (a constraint's, the prefilter's `short-*`, or the
    /// planner's rejection code).
    pub code: String,
    /// The sentence with its figures.
    pub message: String,
}

impl From<&HostSkip> for SkipDoc {
    fn from(s: &HostSkip) -> SkipDoc {
        SkipDoc { code: s.code().to_string(), message: s.to_string() }
    }
}

/// Hosts ruled out for one reason.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SkipCountDoc {
    /// The reason's code.
    pub code: String,
    /// How many hosts.
    pub hosts: usize,
    /// The first such host in rank order.
    pub example_host: String,
    /// Its reason.
    pub example: SkipDoc,
}

/// The host nearest to taking the VM.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NearestDoc {
    /// The host.
    pub host: String,
    /// What it lacks, from the planner.
    #[serde(flatten)]
    pub why: SkipDoc,
}

/// No host took a VM, summarised over the fleet.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FleetRejectionDoc {
    /// The VM.
    pub vm: String,
    /// Hosts in the fleet.
    pub hosts: usize,
    /// Hosts per reason, most first.
    pub reasons: Vec<SkipCountDoc>,
    /// The nearest host, when one was short of capacity.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nearest: Option<NearestDoc>,
}

impl From<&FleetRejection> for FleetRejectionDoc {
    fn from(r: &FleetRejection) -> FleetRejectionDoc {
        FleetRejectionDoc {
            vm: r.vm.clone(),
            hosts: r.hosts,
            reasons: r
                .counts
                .iter()
                .map(|c| SkipCountDoc {
                    code: c.code.to_string(),
                    hosts: c.hosts,
                    example_host: c.example_host.clone(),
                    example: SkipDoc::from(&c.example),
                })
                .collect(),
            nearest: r.nearest.as_ref().map(|(host, why)| NearestDoc { host: host.clone(), why: SkipDoc::from(why) }),
        }
    }
}

/// Every error the API answers: `{"error": {...}}`.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ErrorDoc {
    /// The error.
    pub error: ErrorBody,
}

/// An error's body.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ErrorBody {
    /// Stable code: `bad-request`, `not-found`, `no-host`, `conflict`,
    /// `unauthorized`, `unavailable`, or the planner's rejection code for
    /// a request no host could ever take.
    pub code: String,
    /// The sentence, naming the field or what is short.
    pub message: String,
    /// With `no-host`: the fleet-wide summary.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rejection: Option<FleetRejectionDoc>,
}

impl ErrorDoc {
    /// An error with a code and sentence.
    pub fn new(code: impl Into<String>, message: impl Into<String>) -> ErrorDoc {
        ErrorDoc { error: ErrorBody { code: code.into(), message: message.into(), rejection: None } }
    }

    /// The fleet-wide rejection.
    pub fn no_host(r: &FleetRejection) -> ErrorDoc {
        ErrorDoc {
            error: ErrorBody {
                code: "no-host".into(),
                message: r.to_string(),
                rejection: Some(FleetRejectionDoc::from(r)),
            },
        }
    }
}

/// An agent's report of the VMs libvirt runs on its host
/// (`PUT /v1/hosts/{name}/domains`).
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DomainsReportDoc {
    /// Every domain defined there, as placements (numaplace's own ones
    /// included: the service recognises them by name).
    pub domains: Vec<PlacementDoc>,
    /// Where each running domain's memory is now (read from its QEMU
    /// process), for the esxtop-style locality view.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub memory: Vec<VmMemoryDoc>,
    /// The persistent definitions of running domains whose pins differ
    /// from the live ones (`domains` holds the live one): what the next
    /// start takes, which the service compares with its placement too.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub defined: Vec<PlacementDoc>,
}

/// A running VM's memory per host node, as its QEMU process holds it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VmMemoryDoc {
    /// The VM.
    pub vm: String,
    /// Bytes per node.
    pub nodes: Vec<crate::plan::MemoryDoc>,
}

/// One locality sample of a VM (the web view's history).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LocalitySampleDoc {
    /// When the agent's report came, seconds since the Unix epoch.
    pub at: u64,
    /// Percent of the VM's memory on the nodes its vCPUs run on (esxtop's
    /// N%L).
    pub local_percent: u32,
    /// Bytes per node.
    pub nodes: Vec<crate::plan::MemoryDoc>,
}

/// What the service made of an agent's report.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct DomainsAnswerDoc {
    /// Domains recorded as taken (the service did not place them).
    pub recorded: Vec<String>,
    /// Placements of the service the host does not define (yet): the
    /// agent applies them.
    pub to_apply: Vec<String>,
    /// Domains that could not be recorded, with why (a pin on a CPU the
    /// service gave to another VM, memory over a node's capacity), the
    /// service's VMs whose domains run elsewhere than placed (`repinned`),
    /// the VMs on CPUs the host reserves (`reserved-cpus`, `shared-cpus`)
    /// and nodes whose VMs use more memory than the node now has for VMs
    /// (`reserved-memory`): warnings; the others are double bookings.
    pub conflicts: Vec<SkipDoc>,
    /// The service's VMs whose domains are pinned elsewhere than placed:
    /// `agent --apply` pins them back to their placements.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub to_repin: Vec<String>,
}

impl DomainsAnswerDoc {
    /// Conflict codes that only warn: a VM on CPUs the host reserves is
    /// known to the service and held where it runs, so no CPU is given
    /// twice; the operator moves it when convenient (as `lint` says).
    pub const WARNING_CODES: [&'static str; 3] = ["reserved-cpus", "shared-cpus", Self::RESERVED_MEMORY];

    /// The warning of a node whose VMs use more memory than it now has for
    /// VMs (its reserve or QEMU overhead grew under them).
    pub const RESERVED_MEMORY: &'static str = "reserved-memory";

    /// The conflict code of a service VM whose domain is pinned elsewhere
    /// than placed (listed in `to_repin` too).
    pub const REPINNED: &'static str = "repinned";

    /// The conflicts that are possible double bookings (all but the
    /// warnings).
    pub fn failures(&self) -> impl Iterator<Item = &SkipDoc> {
        self.conflicts.iter().filter(|c| !Self::WARNING_CODES.contains(&c.code.as_str()))
    }
}

/// A page of hosts (`GET /v1/hosts`).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct HostPageDoc {
    /// The hosts, by name.
    pub hosts: Vec<HostDoc>,
    /// The `after` to ask for the next page, when there is one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next: Option<String>,
}

/// Paging and filtering of the placement list
/// (`GET /v1/placements?after=VM&limit=N&host=NAME`). Unknown parameters
/// are refused: a misspelt filter must not silently list everything.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PageQuery {
    /// Items whose name sorts after this.
    pub after: Option<String>,
    /// Items per page.
    pub limit: Option<usize>,
    /// Only this host's (placements).
    pub host: Option<String>,
}

/// Paging and filtering of the host list
/// (`GET /v1/hosts?after=NAME&limit=N&label=KEY[=VALUE]&kind=KIND`), the
/// filters the fleet page has.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HostListQuery {
    /// Hosts whose name sorts after this.
    pub after: Option<String>,
    /// Hosts per page.
    pub limit: Option<usize>,
    /// Only hosts with this label (`key` or `key=value`); repeated
    /// filters are not taken: one label per query.
    pub label: Option<String>,
    /// Only hosts of this kind (as `kind` in each host's document).
    pub kind: Option<String>,
}

/// Registration's query (`PUT /v1/hosts/{name}`): each value given
/// replaces the stored one; a value not given keeps what is stored (an
/// agent's restart never wipes what an operator set).
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HostQuery {
    /// CPUs kept for the host.
    pub reserved_cpus: Option<String>,
    /// The shared pool.
    pub shared_cpus: Option<String>,
    /// Memory kept free per node.
    pub reserved_memory: Option<String>,
    /// `key=value,key=value` (empty: no labels).
    pub labels: Option<String>,
    /// The profile's `memory_kinds`, comma-separated (`hbm,cxl`; empty:
    /// DRAM only).
    pub memory_kinds: Option<String>,
    /// The profile's `[qemu_overhead]` `fixed`, a size.
    pub qemu_overhead_fixed: Option<String>,
    /// The profile's `[qemu_overhead]` `per_gib`, a size.
    pub qemu_overhead_per_gib: Option<String>,
}

/// Removal's query (`DELETE /v1/hosts/{name}?force=true`).
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RemoveHostQuery {
    /// Delete the host's placements too.
    pub force: Option<bool>,
}

/// A partial update of a host (`PATCH /v1/hosts/{name}`, a JSON body):
/// the fields given replace the stored ones, the others are kept; the
/// topology is never changed here (`PUT` replaces it).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HostPatchDoc {
    /// The host's labels, all of them (`{}`: none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub labels: Option<BTreeMap<String, String>>,
    /// CPUs kept for the host, a CPU list (`""`: none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reserved_cpus: Option<String>,
    /// The shared pool, a CPU list (`""`: none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shared_cpus: Option<String>,
    /// Memory kept free per node, e.g. `2GiB` (`""`: none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reserved_memory: Option<String>,
}

/// `?dry_run=true`.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PlaceQuery {
    /// Decide, claim nothing.
    pub dry_run: Option<bool>,
}

/// `GET /v1/placements/{vm}?format=...&accel=...`.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GetQuery {
    /// `json`, `libvirt`, `qemu` or `dra`.
    pub format: Option<String>,
    /// `kvm` or `tcg`.
    pub accel: Option<String>,
    /// `format=dra`: the ResourceClaim's request the CPUs are for
    /// (default `cpu`).
    pub request: Option<String>,
    /// `format=dra`: the DRA driver's name (default `dra.cpu`).
    pub driver: Option<String>,
}

/// The fleet page's filters and page
/// (`GET /?kind=&label=&min_free_threads=&state=&page=&per_page=`).
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FleetPageQuery {
    /// Only hosts of this kind.
    pub kind: Option<String>,
    /// Only hosts with this label (`key` or `key=value`).
    pub label: Option<String>,
    /// Only hosts with at least this many free threads, as given (the
    /// numbers are read by the server, whose refusal names the parameter).
    pub min_free_threads: Option<String>,
    /// Only hosts in this state (`in-service`, `drained`, `stranded`,
    /// `empty`), as given; the server reads it into its typed filter.
    pub state: Option<String>,
    /// Page number, from 1, as given.
    pub page: Option<String>,
    /// Hosts per page, as given.
    pub per_page: Option<String>,
}

/// The web view's placement form (`POST /ui/place`), every field as typed.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PlaceForm {
    /// VM name.
    pub name: Option<String>,
    /// vCPUs.
    pub vcpus: Option<String>,
    /// Memory, e.g. `16GiB`.
    pub memory: Option<String>,
    /// `dedicated` or `shared`.
    pub cpu: Option<String>,
    /// At most this many nodes.
    pub max_nodes: Option<String>,
    /// Only these hosts, comma-separated.
    pub hosts: Option<String>,
    /// Anti-affinity group.
    pub anti_affinity: Option<String>,
    /// `true`: plan only.
    pub dry_run: Option<String>,
    /// The service's token, when it has one.
    pub token: Option<String>,
    /// The form's CSRF token, the session cookie's value.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub csrf: Option<String>,
}

/// A form that carries only the tokens (delete, move, drain).
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TokenForm {
    /// The service's token, when it has one.
    pub token: Option<String>,
    /// The form's CSRF token, the session cookie's value.
    pub csrf: Option<String>,
}

/// `POST /v1/evaluate`: one VM request asked of named hosts, changing
/// nothing (docs/adapters.md).
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EvaluateDoc {
    /// The VM request, as `POST /v1/placements` takes it (its
    /// `constraints` included).
    pub vm: serde_json::Value,
    /// The hosts to ask, in the order the answer keeps.
    pub hosts: Vec<String>,
}

/// One host's answer to an evaluation.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct VerdictDoc {
    /// The host, as asked.
    pub host: String,
    /// Whether it can take the VM now.
    pub fits: bool,
    /// Its expected cost there (lower is better; the planner's, in the
    /// units `plan` shows); absent when it does not fit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost: Option<f64>,
    /// 0 to 10: 10 for the host the service's own selection would take,
    /// 9 to 1 for the others that fit by cost, 0 for one that does not
    /// (Kubernetes' extender scale; Nova's weigher uses it too).
    pub score: u8,
    /// The host's generation the answer was made against.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub generation: Option<i64>,
    /// Why it does not fit (`unknown-host` for a host not registered).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refused: Option<SkipDoc>,
}

/// The answer to `POST /v1/evaluate`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct EvaluationDoc {
    /// The VM's name.
    pub vm: String,
    /// The host the service's own selection would take among those
    /// asked (absent when none fits).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub chosen: Option<String>,
    /// One answer per host asked, in that order.
    pub hosts: Vec<VerdictDoc>,
}

impl EvaluationDoc {
    /// The document of the fleet's verdicts.
    pub fn new(vm: &str, evaluation: &numaplace_fleet::Evaluation) -> EvaluationDoc {
        use numaplace_fleet::Verdict;
        let verdicts = &evaluation.verdicts;
        let scores = numaplace_fleet::scores(verdicts, evaluation.chosen.as_deref());
        let hosts = verdicts
            .iter()
            .zip(scores)
            .map(|(v, score)| match &v.verdict {
                Verdict::Fits { cost, generation } => VerdictDoc {
                    host: v.host.clone(),
                    fits: true,
                    cost: Some(cost.total() as f64 / 1000.0),
                    score,
                    generation: Some(*generation),
                    refused: None,
                },
                Verdict::Refused(skip) => VerdictDoc {
                    host: v.host.clone(),
                    fits: false,
                    cost: None,
                    score,
                    generation: None,
                    refused: Some(SkipDoc::from(skip)),
                },
                Verdict::Unknown => VerdictDoc {
                    host: v.host.clone(),
                    fits: false,
                    cost: None,
                    score,
                    generation: None,
                    refused: Some(SkipDoc {
                        code: "unknown-host".into(),
                        message: format!("no host {} is registered", v.host),
                    }),
                },
            })
            .collect();
        EvaluationDoc { vm: vm.to_string(), chosen: evaluation.chosen.clone(), hosts }
    }
}
