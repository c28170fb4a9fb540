//! `numaplace serve` and `numaplace agent`: thin wrappers over the server
//! crate (docs/serve.md, docs/agent.md).

use anyhow::{anyhow, Context};
use numaplace_agent::{AgentConfig, AgentError};
use std::net::SocketAddr;
use std::process::ExitCode;
use std::time::Duration;

const SERVE_HELP: &str = "\
The API (docs/serve.md; the OpenAPI document at /openapi.json):
  PUT    /v1/hosts/NAME            register a host (body: topology JSON, hwloc XML,
                                   libvirt capabilities or a sysfs tarball); what the
                                   query leaves out (labels, reservations) is kept
  PATCH  /v1/hosts/NAME            change labels or reservations only (JSON body)
  GET    /v1/hosts[/NAME]          hosts with free cores, threads, memory per node
  POST   /v1/placements            place one VM (body: one element of plan --vms)
  GET    /v1/placements/VM         one placement (?format=libvirt|qemu)
  DELETE /v1/placements/VM         free it
  POST   /v1/placements/VM/move    move it to another host
  GET    /healthz                  liveness: the process answers
  GET    /readyz                   readiness: the database answers within the deadline

Logs go to stderr: one access line per request, one audit line per change
(--log-format json for log shippers). SIGTERM or SIGINT drains the requests
in flight (up to --drain-timeout) and exits 0.

EXAMPLES:
  numaplace serve                                     SQLite in ~/.local/share/numaplace
  numaplace serve --db sqlite:/var/lib/numaplace/fleet.db --listen 127.0.0.1:7478
  numaplace serve --db postgres://numaplace@db/fleet --listen 0.0.0.0:7478 --token-file /etc/numaplace/token
  numaplace serve --db postgres://numaplace@db/fleet --replicas 5    one of five servers on one database
  numaplace serve --log-format json --log-level info --request-timeout 3s --drain-timeout 20s
  numaplace serve --listen 0.0.0.0:7478 --token-file /etc/numaplace/token --allowed-host fleet.example.com
  numaplace serve --listen 127.0.0.1:7478 --credentials /etc/numaplace/credentials.toml --trusted-proxy 127.0.0.1
  numaplace serve --kube-api in-cluster               read KubeVirt VMIs and bind pods as the scheduler extender
  kill -HUP $(pidof numaplace)                        reload the credentials file
  curl -X PUT --data-binary @host.xml localhost:7478/v1/hosts/host1
  curl -H 'Content-Type: application/json' -d '{\"name\":\"db1\",\"vcpus\":16,\"memory\":\"64GiB\"}' localhost:7478/v1/placements
  curl -X PATCH -H 'Content-Type: application/json' -d '{\"labels\":{\"rack\":\"r7\"}}' localhost:7478/v1/hosts/host1";

/// Serve the fleet placement API: one decision for host, nodes and CPUs,
/// claimed atomically in SQLite or PostgreSQL.
#[derive(clap::Args, Debug)]
#[command(after_help = SERVE_HELP)]
pub struct ServeArgs {
    /// The database: `sqlite:PATH` (or a path), or `postgres://...` for
    /// several servers sharing one (default: a SQLite file in the user's
    /// data directory).
    #[arg(long, value_name = "URL")]
    db: Option<String>,
    /// Address and port to listen on (port 0: any free port, printed).
    #[arg(long, value_name = "ADDR:PORT", default_value = "127.0.0.1:7478")]
    listen: SocketAddr,
    /// A file holding one token of at least 32 characters: an
    /// operator-write credential named `token` (`Authorization: Bearer
    /// TOKEN`), kept for compatibility; see --credentials.
    #[arg(long, value_name = "FILE")]
    token_file: Option<String>,
    /// The credentials file (TOML): per operator (operator-read,
    /// operator-write) and per host (agent, bound to its host), each as
    /// its token's SHA-256; read again on SIGHUP. A credential (this or
    /// --token-file) is required off loopback.
    #[arg(long, value_name = "FILE")]
    credentials: Option<String>,
    /// Whether reads (GET) need no credential when credentials are set:
    /// true keeps the web view and today's clients reading without one.
    #[arg(long, value_name = "BOOL", default_value_t = true, action = clap::ArgAction::Set)]
    anonymous_reads: bool,
    /// A proxy (IP address) whose X-Forwarded-For is believed and logged
    /// as the client's address, and which the per-address connection cap
    /// spares. Repeat for several.
    #[arg(long, value_name = "IP")]
    trusted_proxy: Vec<std::net::IpAddr>,
    /// Connections one address may hold at once (trusted proxies
    /// excepted); more from it are closed at once.
    #[arg(long, value_name = "N", default_value_t = numaplace_server::DEFAULT_MAX_CONNECTIONS_PER_ADDRESS)]
    max_connections_per_address: usize,
    /// Request bodies held in memory at once, all connections together
    /// (at least 16MiB, the largest body); a body waits for its share.
    #[arg(long, value_name = "SIZE", default_value = "64MiB", value_parser = size)]
    max_body_memory: u64,
    /// How long a request may take before it is answered 503 with
    /// Retry-After (nothing is committed after that answer): seconds, or
    /// a number with ms or s.
    #[arg(long, value_name = "DURATION", default_value = "5s", value_parser = duration)]
    request_timeout: Duration,
    /// On SIGTERM or SIGINT, how long the requests in flight may take to
    /// finish before their connections are closed.
    #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = duration)]
    drain_timeout: Duration,
    /// How log lines on stderr are written.
    #[arg(long, value_enum, default_value_t = LogFormatArg::Text)]
    log_format: LogFormatArg,
    /// Which log lines are written: a level (error, warn, info, debug,
    /// trace) or a filter such as `numaplace::access=off,info` (default:
    /// RUST_LOG, else info).
    #[arg(long, value_name = "FILTER")]
    log_level: Option<String>,
    /// How long a connection may take to send a request's headers, and
    /// stay idle between requests, before it is closed.
    #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = duration)]
    header_timeout: Duration,
    /// How long a request's body may take to arrive (else 408).
    #[arg(long, value_name = "DURATION", default_value = "20s", value_parser = duration)]
    body_timeout: Duration,
    /// Connections served at once; more wait in the listen backlog.
    #[arg(long, value_name = "N", default_value_t = numaplace_server::DEFAULT_MAX_CONNECTIONS)]
    max_connections: usize,
    /// A name clients reach the server by (the Host header), besides IP
    /// addresses and localhost: NAME for any port, NAME:PORT for one.
    /// Repeat for several. Other names are refused (DNS rebinding).
    #[arg(long, value_name = "NAME[:PORT]")]
    allowed_host: Vec<String>,
    /// How many servers share the database: each decision then picks at
    /// random among the best 20 x (N - 1) hosts (at most a sixteenth of
    /// the fleet), so replicas rarely claim the same host at once
    /// (default: 1 on SQLite, 3 on PostgreSQL).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u16).range(1..))]
    replicas: Option<u16>,
    /// The Kubernetes API server (https://HOST:PORT, or in-cluster: the
    /// pod's service account): the scheduler extender then reads a
    /// KubeVirt launcher pod's VirtualMachineInstance, and answers bind
    /// (docs/adapters.md).
    #[arg(long, value_name = "URL")]
    kube_api: Option<String>,
    /// A file holding the bearer token for --kube-api, read on every
    /// call (a rotated service-account token is picked up).
    #[arg(long, value_name = "PATH", requires = "kube_api")]
    kube_token_file: Option<std::path::PathBuf>,
    /// The PEM CA bundle --kube-api's certificate is checked against
    /// (default: the Mozilla roots).
    #[arg(long, value_name = "PATH", requires = "kube_api")]
    kube_ca_file: Option<std::path::PathBuf>,
    /// How long one call to --kube-api may take.
    #[arg(long, value_name = "DURATION", default_value = "5s", value_parser = duration, requires = "kube_api")]
    kube_timeout: Duration,
}

/// `--log-format`.
#[derive(clap::ValueEnum, Clone, Copy, Debug)]
enum LogFormatArg {
    /// key=value text, one event a line.
    Text,
    /// one JSON object a line, for log shippers.
    Json,
}

/// A duration: `5`, `5s`, `2.5s` or `500ms`, above zero.
fn duration(text: &str) -> Result<Duration, String> {
    let t = text.trim();
    let (number, scale) = match (t.strip_suffix("ms"), t.strip_suffix('s')) {
        (Some(n), _) => (n, 0.001),
        (None, Some(n)) => (n, 1.0),
        (None, None) => (t, 1.0),
    };
    match number.trim().parse::<f64>() {
        Ok(n) if n.is_finite() && n > 0.0 && n * scale <= 86_400.0 => Ok(Duration::from_secs_f64(n * scale)),
        _ => Err(format!("expected a duration above zero such as 5s or 500ms, not `{text}`")),
    }
}

/// A size such as `64MiB`.
fn size(text: &str) -> Result<u64, String> {
    numaplace_topo::try_parse_size(text).map_err(|e| e.to_string())
}

/// One token of at least 32 characters from the file `flag` names.
fn read_token(flag: &str, path: &str) -> anyhow::Result<String> {
    let text = std::fs::read_to_string(path).with_context(|| format!("{flag} {path}: cannot read"))?;
    let token = text.trim().to_string();
    numaplace_server::credentials::check_token(&format!("{flag} {path}"), &token).map_err(|e| anyhow!(e))?;
    Ok(token)
}

fn default_db() -> anyhow::Result<String> {
    let base = match std::env::var_os("XDG_DATA_HOME").filter(|v| !v.is_empty()) {
        Some(d) => std::path::PathBuf::from(d),
        None => std::path::PathBuf::from(std::env::var_os("HOME").ok_or_else(|| anyhow!("no HOME: give --db"))?)
            .join(".local/share"),
    };
    let dir = base.join("numaplace");
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    Ok(format!("sqlite:{}", dir.join("fleet.sqlite").display()))
}

/// Runs `numaplace serve`.
pub fn serve(args: ServeArgs) -> anyhow::Result<ExitCode> {
    let db = match args.db {
        Some(db) => db,
        None => default_db()?,
    };
    let token = args.token_file.as_deref().map(|p| read_token("--token-file", p)).transpose()?;
    let mut config = numaplace_server::Config::new(db, args.listen);
    config.token = token;
    config.credentials = args.credentials;
    config.anonymous_reads = args.anonymous_reads;
    config.trusted_proxies = args.trusted_proxy;
    config.max_connections_per_address = args.max_connections_per_address;
    config.max_body_memory = usize::try_from(args.max_body_memory).unwrap_or(usize::MAX);
    config.request_timeout = args.request_timeout;
    config.drain_timeout = args.drain_timeout;
    config.log_format = match args.log_format {
        LogFormatArg::Text => numaplace_server::LogFormat::Text,
        LogFormatArg::Json => numaplace_server::LogFormat::Json,
    };
    config.log_level = args.log_level;
    config.header_timeout = args.header_timeout;
    config.body_timeout = args.body_timeout;
    config.max_connections = args.max_connections;
    config.allowed_hosts = args.allowed_host;
    config.replicas = args.replicas.map(usize::from);
    config.kube = args.kube_api.map(|api| numaplace_server::kube::KubeConfig {
        api,
        token_file: args.kube_token_file,
        ca_file: args.kube_ca_file,
        timeout: args.kube_timeout,
    });
    numaplace_server::serve(config)?;
    Ok(ExitCode::SUCCESS)
}

const AGENT_HELP: &str = "\
Each round: registers this host's topology (when it changed), reports every
domain libvirt defines here (VMs the service did not place count as taken),
and with --apply defines the service's placements for this host that libvirt
lacks. A domain the service placed but pinned elsewhere (virsh vcpupin) is
reported (the round fails) and the CPUs it runs on are held by the service;
--apply pins it back to its placement. A VM on a CPU the profile reserves is
a warning. See docs/agent.md.

EXIT STATUS (--once):
  0 the round succeeded; 1 it failed (service, libvirt) or found a conflict;
  2 bad input (an --server that is not http://HOST[:PORT], a bad profile)

EXAMPLES:
  numaplace agent --server http://10.0.0.5:7478 --token-file /etc/numaplace/agent-token --apply
  numaplace agent --server http://127.0.0.1:7478 --name h1 --from host.xml --libvirt dumps/ --once
  numaplace agent --server http://10.0.0.5:7478 --host-config /etc/numaplace/host.toml   (the default, named)
  numaplace agent --server http://10.0.0.5:7478 --apply --match-domains-by uuid   (a Nova compute host)";

/// Keep the fleet service's picture of this host true: topology, the
/// domains libvirt runs, and the placements to define.
#[derive(clap::Args, Debug)]
#[command(after_help = AGENT_HELP)]
pub struct AgentArgs {
    /// The service's URL, http://HOST[:PORT] (plain HTTP only: put a TLS
    /// proxy in front).
    #[arg(long, value_name = "URL")]
    server: String,
    /// This host's name in the fleet (default: the topology's name, else
    /// the hostname).
    #[arg(long)]
    name: Option<String>,
    /// The topology (default: the live host), as for `topology --from`.
    #[arg(long, value_name = "SOURCE")]
    from: Option<String>,
    /// Where the domains are: `libvirt` or `libvirt:URI`, or a directory
    /// of `virsh dumpxml` files.
    #[arg(long, value_name = "libvirt[:URI]|DIR", default_value = "libvirt")]
    libvirt: String,
    /// Labels for request constraints: key=value,key=value.
    #[arg(long, value_name = "LIST")]
    labels: Option<String>,
    /// Define the service's placements for this host that libvirt lacks,
    /// and pin domains re-pinned elsewhere back to their placements.
    #[arg(long)]
    apply: bool,
    /// Guest type of the domains defined with --apply (default: the host
    /// profile's accel, else kvm).
    #[arg(long, value_parser = super::profile::accel_values())]
    accel: Option<numaplace_topo::Accel>,
    /// A file holding this host's credential (its agent token, or an
    /// operator's token). Default: `agent-token` beside the host profile
    /// (/etc/numaplace/agent-token), when it exists.
    #[arg(long, value_name = "FILE", alias = "credential-file")]
    token_file: Option<String>,
    /// How the service's VMs are matched to libvirt's domains: `name`
    /// (numaplace defines them), or `uuid` when an orchestrator claims by
    /// instance UUID and defines the domains itself (OpenStack Nova with
    /// numaplace's claims listener: docs/adapters.md). With `uuid` the
    /// agent reports each domain by its `<uuid>`, pins the domain of that
    /// UUID to its claim with --apply, and defines none.
    #[arg(long, value_enum, value_name = "name|uuid", default_value = "name")]
    match_domains_by: MatchBy,
    /// Seconds between rounds.
    #[arg(long, default_value_t = 30)]
    interval: u64,
    /// One round, then exit (1 when it failed or found a domain the
    /// service could not record).
    #[arg(long)]
    once: bool,
    /// The host profile and the reservation flags: the reservations the
    /// host is registered with.
    #[command(flatten)]
    reserve: super::profile::HostArgs,
}

/// `--match-domains-by`.
#[derive(clap::ValueEnum, Clone, Copy, Debug)]
enum MatchBy {
    Name,
    Uuid,
}

/// The file name of an agent's credential beside its host profile.
pub const AGENT_TOKEN_FILE: &str = "agent-token";

/// The agent's credential: `--token-file`, else `agent-token` beside the
/// host profile (`--host-config`, `NUMAPLACE_HOST_CONFIG`, else
/// /etc/numaplace/host.toml) when that file exists, else none.
fn agent_token(args: &AgentArgs) -> anyhow::Result<Option<String>> {
    if let Some(p) = &args.token_file {
        return read_token("--token-file", p).map(Some);
    }
    let profile = match (&args.reserve.host_config, std::env::var(super::profile::ENV)) {
        (Some(p), _) => p.clone(),
        (None, Ok(p)) if !p.is_empty() => p,
        _ => numaplace_wire::profile::DEFAULT_PATH.to_string(),
    };
    let beside = std::path::Path::new(&profile).with_file_name(AGENT_TOKEN_FILE);
    if !beside.exists() {
        return Ok(None);
    }
    read_token("the agent's credential", &beside.display().to_string()).map(Some)
}

/// Runs `numaplace agent`.
pub fn agent(args: AgentArgs) -> anyhow::Result<ExitCode> {
    numaplace_agent::check_server(&args.server).map_err(|why| anyhow!("--server {why}"))?;
    let topology = super::topology::load(args.from.as_deref())?;
    let name = match args.name.clone().or_else(|| topology.name().map(str::to_string)) {
        Some(n) => n,
        None => return Err(anyhow!("--name: the topology names no host; give one")),
    };
    // The reservations registered are the profile's and the flags',
    // resolved and checked here (exit 2 on a bad value) as every command
    // resolves them; the service is sent the result.
    let (reserved, profile) = args.reserve.load(&topology)?;
    // The host is registered as the profile declares its memory kinds, as
    // plan and apply read it (exit 2 naming the key for a bad one), so the
    // service keeps ordinary VMs off a declared HBM node and places
    // `memory_kind` requests there. Checked here, before any round; each
    // round's reading (below) is declared the same way.
    args.reserve.declared(topology, profile.as_ref())?;
    let mut query = Vec::new();
    // Sent only when the agent is told about reservations (a profile or
    // a flag): then all three, an empty one meaning none. Otherwise the
    // service keeps what an operator set through the API.
    let told = profile.is_some()
        || args.reserve.reserved_cpus.is_some()
        || args.reserve.shared_cpus.is_some()
        || args.reserve.reserved_memory.is_some();
    let cpus = told.then(|| reserved.cpus.to_string());
    let shared = told.then(|| reserved.shared_cpus.to_string());
    let memory = told.then(|| reserved.memory_per_node.to_string());
    // The profile's planning rules beside the reservations, so that the
    // service plans for this host as `numaplace plan --profile` does: each
    // sent only when it differs from the default (a service that predates
    // them is then still answered by an agent whose profile has none; one
    // that knows them takes reservations sent without them as the
    // defaults).
    let rules = profile.as_ref().map(|_| numaplace_wire::fleet::HostRulesDoc::new(&reserved)).unwrap_or_default();
    let kinds = rules.as_ref().filter(|r| !r.memory_kinds.is_empty()).map(|r| r.memory_kinds.join(","));
    let overhead = rules.as_ref().and_then(|r| r.qemu_overhead);
    let fixed = overhead.map(|o| o.fixed_bytes.to_string());
    let per_gib = overhead.map(|o| o.per_gib_bytes.to_string());
    for (key, value) in [
        ("reserved_cpus", &cpus),
        ("shared_cpus", &shared),
        ("reserved_memory", &memory),
        ("labels", &args.labels),
        ("memory_kinds", &kinds),
        ("qemu_overhead_fixed", &fixed),
        ("qemu_overhead_per_gib", &per_gib),
    ] {
        if let Some(v) = value {
            query.push(format!("{key}={}", numaplace_wire::fleet::path_escape(v)));
        }
    }
    let config = AgentConfig {
        server: args.server.clone(),
        name,
        token: agent_token(&args)?,
        host_query: query.join("&"),
        libvirt: args.libvirt.clone(),
        apply: args.apply,
        accel: super::profile::accel(args.accel, profile.as_ref()).name().into(),
        names: match args.match_domains_by {
            MatchBy::Name => numaplace_agent::DomainNames::Name,
            MatchBy::Uuid => numaplace_agent::DomainNames::Uuid,
        },
    };
    let from = args.from.clone();
    // The profile is read once, at start.
    let read = move || {
        let live = super::topology::load(from.as_deref()).map_err(|e| format!("{e:#}"))?;
        numaplace_wire::profile::declare_kinds(live, profile.as_ref()).map_err(|e| e.to_string())
    };
    let interval = (!args.once).then(|| Duration::from_secs(args.interval.max(1)));
    match numaplace_agent::run(&config, interval, read) {
        Ok(()) => Ok(ExitCode::SUCCESS),
        Err(e @ (AgentError::Http(_) | AgentError::Answer(_) | AgentError::Libvirt(_) | AgentError::Conflicts(_))) => {
            eprintln!("numaplace agent: {e}");
            Ok(ExitCode::from(1))
        }
    }
}
