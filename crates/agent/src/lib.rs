//! `numaplace agent`: runs on each host, a client of the service's API.
//! Each round it registers the host's live topology (when it changed),
//! reports every domain libvirt defines there (so VMs the service did
//! not place count as taken: the service reconciles instead of trusting
//! a stale picture; a service VM whose domain is pinned elsewhere than
//! placed, live or in its definition, comes back as a conflict and the
//! service holds where it runs), and, with `apply`, defines the domains
//! the service placed on this host that libvirt does not have yet and
//! pins re-pinned ones back to their placements.
//!
//! Its own crate, not the server's: it shares no code with the service
//! (only the API's documents, from `numaplace-wire`), and it brings
//! libvirt, `/proc` reading and an HTTP client that the server does not
//! need.

use numaplace_emit::text::plural;
use numaplace_libvirt::domain::LibvirtOptions;
use numaplace_libvirt::Libvirt;
use numaplace_topo::Topology;
use numaplace_wire::fleet::{DomainsAnswerDoc, DomainsReportDoc, ErrorDoc, PlacedDoc, VmMemoryDoc};
use numaplace_wire::plan::{MemoryDoc, PlacementDoc};
use std::time::Duration;

/// How the agent runs.
#[derive(Clone, Debug)]
pub struct AgentConfig {
    /// The service, e.g. `http://10.0.0.5:7478`.
    pub server: String,
    /// This host's name in the fleet.
    pub name: String,
    /// The token for writes, when the service asks for one.
    pub token: Option<String>,
    /// Query parameters for registration (`reserved_cpus=0,48&...`).
    pub host_query: String,
    /// libvirt's URI, or a directory of domain XML files (read-only).
    pub libvirt: String,
    /// Define the service's placements that libvirt lacks.
    pub apply: bool,
    /// Guest type for the domains it defines (`kvm` or `tcg`).
    pub accel: String,
    /// How the service's VMs are matched to libvirt's domains.
    pub names: DomainNames,
}

/// How the agent matches the service's VMs to libvirt's domains.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum DomainNames {
    /// A VM is the domain of its name (numaplace defines its domains).
    #[default]
    Name,
    /// A VM is the domain whose `<uuid>` is its name: an orchestrator
    /// (OpenStack Nova) claims by instance UUID and defines the domain
    /// under a name of its own (`instance-0000002a`). Domains are
    /// reported by UUID; the service's placements are pinned onto the
    /// domain of that UUID, and none is defined here (the orchestrator
    /// defines them: a claimed VM whose domain is not there yet is
    /// waiting).
    Uuid,
}

/// What one round did.
#[derive(Clone, Debug, Default)]
pub struct Round {
    /// Whether the topology was (re-)registered.
    pub registered: bool,
    /// The service's answer to the domains report.
    pub answer: DomainsAnswerDoc,
    /// Domains defined from the service's placements.
    pub defined: Vec<String>,
    /// Domains pinned back to their placements (`--apply`).
    pub repinned: Vec<String>,
    /// Placements whose domain the orchestrator has not defined yet
    /// ([`DomainNames::Uuid`]: none is defined here).
    pub waiting: Vec<String>,
}

/// Why a round failed.
#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    /// The service could not be reached or answered an error.
    #[error("{0}")]
    Http(String),
    /// libvirt could not be read or written.
    #[error("libvirt: {0}")]
    Libvirt(String),
    /// The service answered something this agent does not read.
    #[error("the service answered: {0}")]
    Answer(String),
    /// The round found domains the service could not record as they are
    /// (each a possible double booking: a pin on a CPU another VM holds, a
    /// service VM pinned elsewhere than placed).
    #[error("{} the service could not record as they are: {}", plural(.0.len(), "domain"), .0.join("; "))]
    Conflicts(Vec<String>),
}

/// Checks the service's URL before any round: `http://HOST[:PORT][/]`.
/// The agent speaks plain HTTP only (no TLS stack is linked), so an
/// `https://` URL is refused with what to do instead; the one place this
/// advice is worded. Returns why not.
pub fn check_server(url: &str) -> Result<(), String> {
    let lower = url.to_ascii_lowercase();
    if lower.starts_with("https://") {
        return Err(format!(
            "`{url}`: plain HTTP only: put a TLS proxy in front of the service (on the host, or a sidecar) and give \
             the agent its http:// address on the local side"
        ));
    }
    let Some(rest) = lower.strip_prefix("http://") else {
        return Err(format!("`{url}`: expected the service's URL, http://HOST[:PORT], e.g. http://10.0.0.5:7478"));
    };
    let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
    // `[v6 address]:port`, or `host:port`.
    let (host, port) = match authority.strip_prefix('[') {
        Some(inner) => match inner.split_once(']') {
            Some((h, "")) => (h, None),
            Some((h, tail)) => (h, Some(tail.strip_prefix(':').unwrap_or(tail))),
            None => ("", None),
        },
        None => match authority.rsplit_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (authority, None),
        },
    };
    if let Some(port) = port.filter(|p| p.parse::<u16>().is_err()) {
        return Err(format!("`{url}`: the port `{port}` is not a number from 0 to 65535"));
    }
    if host.is_empty() || host.contains('@') || host.chars().any(char::is_whitespace) {
        return Err(format!("`{url}`: expected a host name or address after http://, e.g. http://10.0.0.5:7478"));
    }
    Ok(())
}

/// A client of the API.
pub struct Client {
    agent: ureq::Agent,
    base: String,
    token: Option<String>,
}

impl Client {
    /// A client of the service at `base`.
    pub fn new(base: &str, token: Option<String>) -> Client {
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .timeout_global(Some(Duration::from_secs(30)))
            .http_status_as_error(false)
            .build()
            .into();
        Client { agent, base: base.trim_end_matches('/').to_string(), token }
    }

    /// Sends a request; returns the status and body.
    pub fn call(&self, method: &str, path: &str, body: Option<&[u8]>) -> Result<(u16, String), AgentError> {
        let url = format!("{}{path}", self.base);
        let auth = self.token.as_ref().map(|t| format!("Bearer {t}"));
        let result = match (method, body) {
            ("GET", _) => self.with_auth(self.agent.get(&url), auth.as_deref()).call(),
            ("DELETE", _) => self.with_auth(self.agent.delete(&url), auth.as_deref()).call(),
            ("PUT", b) => self
                .with_auth(self.agent.put(&url), auth.as_deref())
                .header("Content-Type", kind(method, path))
                .send(b.unwrap_or_default()),
            ("PATCH", b) => self
                .with_auth(self.agent.patch(&url), auth.as_deref())
                .header("Content-Type", kind(method, path))
                .send(b.unwrap_or_default()),
            (_, b) => self
                .with_auth(self.agent.post(&url), auth.as_deref())
                .header("Content-Type", kind(method, path))
                .send(b.unwrap_or_default()),
        };
        let mut resp = result.map_err(|e| AgentError::Http(format!("{method} {url}: {e}")))?;
        let status = resp.status().as_u16();
        let text = resp
            .body_mut()
            .with_config()
            .limit(64 << 20)
            .read_to_string()
            .map_err(|e| AgentError::Http(format!("{method} {url}: reading the answer: {e}")))?;
        Ok((status, text))
    }

    fn with_auth<B>(&self, req: ureq::RequestBuilder<B>, auth: Option<&str>) -> ureq::RequestBuilder<B> {
        match auth {
            Some(a) => req.header("Authorization", a),
            None => req,
        }
    }

    /// As [`Client::call`], with a non-2xx status as an error carrying the
    /// service's message.
    pub fn ok(&self, method: &str, path: &str, body: Option<&[u8]>) -> Result<String, AgentError> {
        let (status, text) = self.call(method, path, body)?;
        if (200..300).contains(&status) {
            return Ok(text);
        }
        let why = serde_json::from_str::<ErrorDoc>(&text).map(|e| e.error.message).unwrap_or(text);
        Err(AgentError::Http(format!("{method} {path}: {status}: {why}")))
    }
}

/// The content type of a body this client sends to `path`: a topology
/// upload (`PUT /v1/hosts/NAME`, in any format, which the service reads by
/// its content) or else one of the API's JSON documents.
fn kind(method: &str, path: &str) -> &'static str {
    let path = path.split('?').next().unwrap_or(path);
    match path.strip_prefix("/v1/hosts/") {
        Some(name) if method == "PUT" && !name.contains('/') => "application/octet-stream",
        _ => "application/json",
    }
}

/// One round: register (when `topology_json` differs from `last`), report
/// the domains, apply. `last` is updated.
pub fn round(
    client: &Client,
    config: &AgentConfig,
    topology: &Topology,
    last: &mut Option<String>,
) -> Result<Round, AgentError> {
    let mut lv = numaplace_libvirt::open(&config.libvirt)
        .ok_or_else(|| AgentError::Libvirt(format!("`{}` is neither libvirt[:URI] nor a directory", config.libvirt)))?;
    round_with(client, config, topology, last, lv.as_mut())
}

/// [`round`] on a libvirt of the caller's (tests give an in-memory one).
pub fn round_with(
    client: &Client,
    config: &AgentConfig,
    topology: &Topology,
    last: &mut Option<String>,
    lv: &mut dyn Libvirt,
) -> Result<Round, AgentError> {
    let mut out = Round::default();
    let json = numaplace_read::json::to_string(topology);
    let name = numaplace_wire::fleet::path_escape(&config.name);
    if last.as_deref() != Some(json.as_str()) {
        let query = if config.host_query.is_empty() { String::new() } else { format!("?{}", config.host_query) };
        client.ok("PUT", &format!("/v1/hosts/{name}{query}"), Some(json.as_bytes()))?;
        *last = Some(json);
        out.registered = true;
    }
    let (mut held, warnings, mut running, skipped) = numaplace_libvirt::state::held_domains(&*lv, topology, false)
        .map_err(|e| AgentError::Libvirt(e.to_string()))?;
    // The domain's libvirt name for each name the service knows it by.
    let names = domain_names(&*lv, config.names, &mut held, &mut running);
    let domain = |vm: &str| names.get(vm).cloned().unwrap_or_else(|| vm.to_string());
    for w in warnings {
        eprintln!("numaplace agent: warning: {w}");
    }
    for s in skipped {
        eprintln!("numaplace agent: warning: {s}");
    }
    // A running domain's definition may be pinned otherwise than it runs
    // (`virsh vcpupin --config`): what its next start takes is reported
    // too, so the service compares both with its placement.
    let mut defined = Vec::new();
    for vm in &running {
        let Some(live) = held.iter().find(|h| &h.placement.vm == vm) else { continue };
        let Ok(xml) = lv.persistent_xml(&domain(vm)) else { continue };
        let Ok(definition) = numaplace_libvirt::domain::read(vm, &xml) else { continue };
        let (persistent, _) = numaplace_libvirt::held(&definition, vm, topology);
        if persistent.vcpu_cpus != live.vcpu_cpus {
            defined.push(PlacementDoc::from(&persistent.placement));
        }
    }
    // Where each running domain's memory is now, from its QEMU process
    // (a domain whose process cannot be read is left out, not an error).
    let proc = numaplace_observe::FsSource::live();
    let memory = running
        .iter()
        .filter_map(|vm| {
            let seen = numaplace_libvirt::drift::observe(&*lv, &proc, &domain(vm)).ok()?;
            let nodes = seen.memory?.into_iter().map(|(node, bytes)| MemoryDoc { node, bytes }).collect();
            Some(VmMemoryDoc { vm: vm.clone(), nodes })
        })
        .collect();
    let report =
        DomainsReportDoc { domains: held.iter().map(|h| PlacementDoc::from(&h.placement)).collect(), memory, defined };
    let body = serde_json::to_vec(&report).map_err(|e| AgentError::Answer(e.to_string()))?;
    let text = client.ok("PUT", &format!("/v1/hosts/{name}/domains"), Some(&body))?;
    out.answer = serde_json::from_str(&text).map_err(|e| AgentError::Answer(e.to_string()))?;
    for c in &out.answer.conflicts {
        eprintln!("numaplace agent: warning: {}", c.message);
    }
    if config.apply {
        for vm in &out.answer.to_apply {
            if config.names == DomainNames::Uuid {
                out.waiting.push(vm.clone());
                continue;
            }
            let xml = client.ok("GET", &placement_path(vm, &config.accel), None)?;
            lv.define(&xml).map_err(|e| AgentError::Libvirt(format!("defining {vm}: {e}")))?;
            out.defined.push(vm.clone());
        }
        for vm in &out.answer.to_repin {
            repin(client, config, topology, lv, vm, &domain(vm))?;
            out.repinned.push(vm.clone());
        }
    }
    Ok(out)
}

fn placement_path(vm: &str, accel: &str) -> String {
    format!("/v1/placements/{}?format=libvirt&accel={accel}", numaplace_wire::fleet::path_escape(vm))
}

/// Renames the domains read from libvirt to the names the service knows
/// them by, as `names` says, and returns the libvirt name of each
/// renamed one. With [`DomainNames::Uuid`], a domain without a readable
/// UUID keeps its name (it is still reported: its CPUs are taken).
fn domain_names(
    lv: &dyn Libvirt,
    names: DomainNames,
    held: &mut [numaplace_libvirt::Held],
    running: &mut [String],
) -> std::collections::BTreeMap<String, String> {
    let mut libvirt_name = std::collections::BTreeMap::new();
    if names == DomainNames::Name {
        return libvirt_name;
    }
    for h in held.iter_mut() {
        let name = h.placement.vm.clone();
        // A domain undefined since it was listed is simply not renamed.
        let Ok(Some(d)) = lv.domain(&name) else { continue };
        let Some(uuid) = numaplace_libvirt::state::domain_uuid(&d.xml) else { continue };
        if let Some(r) = running.iter_mut().find(|r| **r == name) {
            r.clone_from(&uuid);
        }
        h.placement.vm.clone_from(&uuid);
        libvirt_name.insert(uuid, name);
    }
    libvirt_name
}

/// Pins a service VM's domain (`domain`, libvirt's name for it) back to
/// its placement, live (a running domain's vCPUs and emulator threads)
/// and in its definition, as `numaplace apply` does (each step undone if
/// a later one fails).
fn repin(
    client: &Client,
    config: &AgentConfig,
    topology: &Topology,
    lv: &mut dyn Libvirt,
    vm: &str,
    domain: &str,
) -> Result<(), AgentError> {
    let text = client.ok("GET", &format!("/v1/placements/{}", numaplace_wire::fleet::path_escape(vm)), None)?;
    let placed: PlacedDoc = serde_json::from_str(&text).map_err(|e| AgentError::Answer(e.to_string()))?;
    let mut placement = placed.placement.to_placement("placement").map_err(|e| AgentError::Answer(e.to_string()))?;
    placement.vm = domain.to_string();
    let emit = match config.accel.as_str() {
        "tcg" => LibvirtOptions::tcg(),
        _ => LibvirtOptions::default(),
    }
    .for_host(topology);
    let opts = numaplace_libvirt::apply::ApplyOptions { topology, emit, base: None };
    let prepared = numaplace_libvirt::apply::prepare(&*lv, &placement, &opts)
        .map_err(|e| AgentError::Libvirt(format!("pinning {vm} back to its placement: {e}")))?;
    let outcome = numaplace_libvirt::apply::carry_out(lv, &prepared, false);
    if !outcome.ok() {
        return Err(AgentError::Libvirt(format!("pinning {vm} back to its placement: {outcome:?}")));
    }
    Ok(())
}

/// The conflicts that fail a round: the answer's failures, less the
/// re-pinned domains this round pinned back.
/// Nodes whose VMs use more memory than the node now has for VMs.
fn over_memory(r: &Round) -> usize {
    r.answer.conflicts.iter().filter(|c| c.code == DomainsAnswerDoc::RESERVED_MEMORY).count()
}

fn failures(r: &Round) -> impl Iterator<Item = &numaplace_wire::fleet::SkipDoc> {
    let pinned_back = !r.repinned.is_empty() && r.repinned.len() == r.answer.to_repin.len();
    r.answer.failures().filter(move |c| !(pinned_back && c.code == DomainsAnswerDoc::REPINNED))
}

/// Runs rounds every `interval` (once with `None`), reading the topology
/// with `read` each time. A failed round is reported and retried at the
/// next one: the service may be restarting.
pub fn run(
    config: &AgentConfig,
    interval: Option<Duration>,
    read: impl Fn() -> Result<Topology, String>,
) -> Result<(), AgentError> {
    let client = Client::new(&config.server, config.token.clone());
    let mut last = None;
    loop {
        let result = read().map_err(AgentError::Libvirt).and_then(|t| round(&client, config, &t, &mut last));
        // A domain the service could not record, or one pinned elsewhere
        // than placed, is a double booking or may become one: the round
        // failed, whatever else it did. VMs on reserved CPUs only warn
        // (the service holds them where they are), and a round that
        // pinned every re-pinned domain back (`--apply`; one that could
        // not is an error) resolved those.
        let conflicts = match &result {
            Ok(r) => {
                let left: Vec<String> = failures(r).map(|c| c.message.clone()).collect();
                (!left.is_empty()).then_some(left)
            }
            _ => None,
        };
        match (&result, interval) {
            (Ok(r), _) => eprintln!(
                "numaplace agent: {}{} recorded as taken, {} to apply, {} defined{}, {} re-pinned, {}, {} on reserved \
                 CPUs{}",
                if r.registered { "registered the host; " } else { "" },
                plural(r.answer.recorded.len(), "domain"),
                plural(r.answer.to_apply.len(), "placement"),
                r.defined.len(),
                if r.waiting.is_empty() {
                    String::new()
                } else {
                    format!(" ({} waiting for the orchestrator to define: {})", r.waiting.len(), r.waiting.join(", "))
                },
                r.repinned.len(),
                plural(failures(r).count(), "conflict"),
                plural(r.answer.conflicts.len() - r.answer.failures().count() - over_memory(r), "VM"),
                match over_memory(r) {
                    0 => String::new(),
                    n => format!(", {} over its memory", plural(n, "node")),
                }
            ),
            (Err(e), Some(_)) => eprintln!("numaplace agent: {e}; retrying"),
            (Err(_), None) => {}
        }
        match (interval, conflicts) {
            (None, Some(c)) => return Err(AgentError::Conflicts(c)),
            (None, None) => return result.map(|_| ()),
            (Some(d), _) => std::thread::sleep(d),
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use numaplace_wire::fleet::SkipDoc;

    /// A round fails on a domain the service could not record or one
    /// pinned elsewhere than placed; not on a VM on reserved CPUs (a
    /// warning), nor on re-pinned domains it pinned back (`--apply`).
    #[test]
    fn a_round_fails_on_double_bookings_only() {
        let skip = |code: &str| SkipDoc { code: code.into(), message: format!("{code} message") };
        let mut r = Round::default();
        r.answer.conflicts = vec![skip("reserved-cpus"), skip("shared-cpus")];
        assert_eq!(failures(&r).count(), 0);
        r.answer.conflicts.push(skip(DomainsAnswerDoc::REPINNED));
        r.answer.to_repin = vec!["db1".into()];
        assert_eq!(failures(&r).count(), 1, "re-pinned, not pinned back");
        r.repinned = vec!["db1".into()];
        assert_eq!(failures(&r).count(), 0, "pinned back this round");
        r.answer.conflicts.push(skip("does-not-fit"));
        assert_eq!(failures(&r).map(|c| c.code.as_str()).collect::<Vec<_>>(), ["does-not-fit"]);
    }

    #[test]
    fn the_server_must_be_a_plain_http_url() {
        for ok in ["http://10.0.0.5:7478", "http://fleet.example", "HTTP://h:1/", "http://[::1]:7478", "http://[::1]"] {
            assert_eq!(check_server(ok), Ok(()), "{ok}");
        }
        let why = |url: &str| check_server(url).unwrap_err();
        assert!(why("https://h:7478").contains("plain HTTP only: put a TLS proxy in front"));
        assert!(why("notaurl").contains("expected the service's URL"));
        assert!(why("10.0.0.5:7478").contains("expected the service's URL"));
        assert!(why("http://h:99999").contains("the port `99999`"));
        assert!(why("http://user@h").contains("expected a host name"));
        assert!(why("http://[::1]x").contains("the port `x`"));
    }
}
