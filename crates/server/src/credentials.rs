//! Who may do what (docs/serve.md, "Credentials"): a credential per
//! operator and per host, as Kubernetes' node authorizer lets a kubelet
//! write only its own Node.
//!
//! - operators hold `operator-read` (every read) or `operator-write`
//!   (everything) credentials;
//! - each host's agent holds an `agent` credential bound to its host name:
//!   it may register that host, report that host's domains and read that
//!   host and its placements, and nothing else.
//!
//! The server keeps only each credential's SHA-256 digest, in a TOML file
//! it reads again on SIGHUP. Why SHA-256 and not a password hash (argon2,
//! bcrypt): a credential is a machine-made random token of at least
//! [`MIN_TOKEN_LEN`] characters (128 bits and more), not a word a person
//! chose, so guessing it from its digest is as hard as guessing it; a slow
//! salted hash protects guessable secrets and would cost tens of
//! milliseconds of CPU on every request (100,000 agents reporting every
//! 30 s are 3,300 a second), which also hands unauthenticated floods a
//! lever. An unsalted digest is also a key: a request's credential is
//! found by one map lookup, whatever the number of hosts.
//!
//! [`authorize`] is the one decision, a pure function of the principal,
//! the method, the route and its host; its refusals are typed
//! ([`Forbidden`]).

use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;

/// The shortest token taken: 32 characters (`openssl rand -hex 16`, 128
/// bits). A shorter one is refused where the server or the agent reads
/// one, so a guessable token is never put in service by mistake.
pub const MIN_TOKEN_LEN: usize = 32;

/// What a credential may do.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Role {
    /// Every read (`GET`), no change.
    OperatorRead,
    /// Everything.
    OperatorWrite,
    /// One host's agent: register the host, report its domains, read the
    /// host and its placements.
    Agent {
        /// The host it is bound to.
        host: String,
    },
}

impl Role {
    /// The word logged and written in the file.
    pub fn as_str(&self) -> &'static str {
        match self {
            Role::OperatorRead => "operator-read",
            Role::OperatorWrite => "operator-write",
            Role::Agent { .. } => "agent",
        }
    }
}

/// Who made a request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Principal {
    /// No credential (or the server has none configured).
    Anonymous,
    /// A credential of the file (or `--token-file`'s, named `token`).
    Credential {
        /// The credential's name (an agent's: its host's, unless the
        /// file names it otherwise).
        name: Arc<str>,
        /// What it may do.
        role: Role,
    },
}

impl Principal {
    /// The name logged as `principal`.
    pub fn name(&self) -> &str {
        match self {
            Principal::Anonymous => "anonymous",
            Principal::Credential { name, .. } => name,
        }
    }

    /// The role logged as `role`.
    pub fn role(&self) -> &'static str {
        match self {
            Principal::Anonymous => "anonymous",
            Principal::Credential { role, .. } => role.as_str(),
        }
    }

    /// The host an agent's credential is bound to.
    pub fn agent_host(&self) -> Option<&str> {
        match self {
            Principal::Credential { role: Role::Agent { host }, .. } => Some(host),
            _ => None,
        }
    }
}

/// The credentials a server takes: SHA-256 digests to principals.
#[derive(Clone, Debug, Default)]
pub struct Credentials {
    by_digest: HashMap<[u8; 32], Principal>,
}

/// The name of `--token-file`'s token among the credentials (an
/// operator-write credential, as the single token always was).
pub const LEGACY_TOKEN_NAME: &str = "token";

impl Credentials {
    /// Whether any credential is configured (else every request is
    /// anonymous and allowed: a loopback server).
    pub fn is_empty(&self) -> bool {
        self.by_digest.is_empty()
    }

    /// How many credentials.
    pub fn len(&self) -> usize {
        self.by_digest.len()
    }

    /// Adds `--token-file`'s token as the operator-write credential
    /// `token`.
    pub fn with_token(mut self, token: &str) -> Credentials {
        self.by_digest.insert(
            digest(token),
            Principal::Credential { name: Arc::from(LEGACY_TOKEN_NAME), role: Role::OperatorWrite },
        );
        self
    }

    /// The principal a presented token is, if it is one of these.
    pub fn lookup(&self, token: &str) -> Option<&Principal> {
        self.by_digest.get(&digest(token))
    }

    /// Reads the credentials file `path` names (its text `text`). Every
    /// error names the file, the entry and the field.
    pub fn parse(path: &str, text: &str) -> Result<Credentials, String> {
        // Read by hand from TOML's values (only numaplace-wire derives
        // serde), each field checked and named.
        let table: toml::Table = text.parse().map_err(|e| format!("{path}: {e}"))?;
        if let Some(k) = table.keys().find(|k| *k != "credential") {
            return Err(format!("{path}: unknown key `{k}`; expected [[credential]] tables"));
        }
        let entries = match table.get("credential") {
            None => Vec::new(),
            Some(toml::Value::Array(a)) => a.clone(),
            Some(_) => return Err(format!("{path}: `credential` must be a list of tables ([[credential]])")),
        };
        let mut out = Credentials::default();
        let mut names = std::collections::HashSet::new();
        for (i, entry) in entries.into_iter().enumerate() {
            let at = |field: &str| format!("{path}: credential {} ({field})", i + 1);
            let toml::Value::Table(entry) = entry else {
                return Err(format!("{path}: credential {}: expected a table", i + 1));
            };
            if let Some(k) = entry.keys().find(|k| !matches!(k.as_str(), "name" | "role" | "host" | "sha256")) {
                return Err(format!("{}: unknown field; expected name, role, host or sha256", at(k)));
            }
            let text = |field: &str| -> Result<Option<String>, String> {
                match entry.get(field) {
                    None => Ok(None),
                    Some(toml::Value::String(v)) => Ok(Some(v.clone())),
                    Some(_) => Err(format!("{}: expected a string", at(field))),
                }
            };
            let role_text = text("role")?.ok_or_else(|| format!("{}: missing", at("role")))?;
            let sha256 = text("sha256")?.ok_or_else(|| format!("{}: missing", at("sha256")))?;
            let (name, host) = (text("name")?, text("host")?);
            let role = match (role_text.as_str(), host) {
                ("operator-read", None) => Role::OperatorRead,
                ("operator-write", None) => Role::OperatorWrite,
                ("agent", Some(h)) if !h.is_empty() => Role::Agent { host: h },
                ("agent", _) => return Err(format!("{}: an agent credential names its host", at("host"))),
                ("operator-read" | "operator-write", Some(_)) => {
                    return Err(format!("{}: only an agent credential is bound to a host", at("host")))
                }
                (other, _) => {
                    return Err(format!(
                        "{}: expected operator-read, operator-write or agent, found `{other}`",
                        at("role")
                    ))
                }
            };
            let name = match (name, &role) {
                (Some(n), _) if !n.is_empty() && n.chars().all(|c| c.is_ascii_graphic()) => n,
                (None, Role::Agent { host }) => host.clone(),
                (n, _) => {
                    return Err(format!(
                        "{}: expected a name of printable characters without spaces{}",
                        at("name"),
                        n.map_or(String::new(), |n| format!(", found `{}`", n.escape_debug()))
                    ))
                }
            };
            let hex = sha256.trim().to_ascii_lowercase();
            let digest = parse_hex(&hex).ok_or_else(|| {
                format!(
                    "{}: expected the token's SHA-256 as 64 hex digits (printf %s \"$TOKEN\" | sha256sum)",
                    at("sha256")
                )
            })?;
            if !names.insert(name.clone()) {
                return Err(format!("{}: `{name}` is named twice", at("name")));
            }
            let principal = Principal::Credential { name: Arc::from(name.as_str()), role };
            if out.by_digest.insert(digest, principal).is_some() {
                return Err(format!("{}: the same token as an earlier credential", at("sha256")));
            }
        }
        Ok(out)
    }

    /// Reads the credentials file at `path`.
    pub fn load(path: &str) -> Result<Credentials, String> {
        let text = std::fs::read_to_string(path).map_err(|e| format!("{path}: cannot read: {e}"))?;
        Credentials::parse(path, &text)
    }
}

/// The SHA-256 digest of a token.
pub fn digest(token: &str) -> [u8; 32] {
    let mut out = [0u8; 32];
    out.copy_from_slice(&Sha256::digest(token.as_bytes()));
    out
}

/// The SHA-256 digest of a token as 64 lowercase hex digits, as the
/// credentials file holds it.
pub fn digest_hex(token: &str) -> String {
    digest(token).iter().map(|b| format!("{b:02x}")).collect()
}

fn parse_hex(hex: &str) -> Option<[u8; 32]> {
    if hex.len() != 64 || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    let mut out = [0u8; 32];
    for (i, o) in out.iter_mut().enumerate() {
        *o = u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).ok()?;
    }
    Some(out)
}

/// Whether a token is long enough to be put in service; `Err` says why
/// not, for the file `what` names.
pub fn check_token(what: &str, token: &str) -> Result<(), String> {
    if token.is_empty() || token.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(format!("{what}: expected one token on one line"));
    }
    if token.chars().count() < MIN_TOKEN_LEN {
        return Err(format!(
            "{what}: the token has {} characters; expected at least {MIN_TOKEN_LEN} (e.g. openssl rand -hex 32): a \
             short token can be guessed",
            token.chars().count()
        ));
    }
    Ok(())
}

/// Why a credential may not do what it asked (403, typed).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Forbidden {
    /// A read-only credential asked for a change.
    ReadOnly {
        /// The credential.
        name: String,
    },
    /// An agent's credential asked about another host.
    OtherHost {
        /// The host it is bound to.
        own: String,
        /// The host it asked about (for a placement: the VM's host).
        asked: String,
        /// The VM, when the request was about one.
        vm: Option<String>,
    },
    /// An agent's credential asked for something agents never do
    /// (placing, moving, deleting, draining, patching, the pages).
    NotForAgents {
        /// The host it is bound to.
        own: String,
        /// The method.
        method: String,
        /// The route (its pattern).
        route: String,
    },
}

impl Forbidden {
    /// The stable code of the error shape.
    pub fn code(&self) -> &'static str {
        match self {
            Forbidden::ReadOnly { .. } => "read-only-credential",
            Forbidden::OtherHost { .. } => "other-host",
            Forbidden::NotForAgents { .. } => "not-for-agents",
        }
    }

    /// The VM the refusal is about, when known.
    pub fn vm(&self) -> Option<&str> {
        match self {
            Forbidden::OtherHost { vm, .. } => vm.as_deref(),
            _ => None,
        }
    }
}

impl fmt::Display for Forbidden {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Forbidden::ReadOnly { name } => {
                write!(f, "credential {name} is read-only (operator-read): changes need an operator-write credential")
            }
            Forbidden::OtherHost { own, asked, vm: Some(vm) } => {
                write!(f, "the agent credential of host {own} may act only on its own host; VM {vm} is on host {asked}")
            }
            Forbidden::OtherHost { own, asked, vm: None } => {
                write!(f, "the agent credential of host {own} may act only on its own host, not on {asked}")
            }
            Forbidden::NotForAgents { own, method, route } => write!(
                f,
                "the agent credential of host {own} may register its host, report its domains and read its \
                 placements; not {method} {route}"
            ),
        }
    }
}

/// What a request asks, as [`authorize`] judges it.
#[derive(Clone, Copy, Debug)]
pub struct Asked<'a> {
    /// The method.
    pub method: &'a str,
    /// The route's pattern as matched (`/v1/hosts/{name}`).
    pub route: &'a str,
    /// The route's `{name}` (a host), decoded.
    pub host: Option<&'a str>,
    /// `GET /v1/placements`'s `host` parameter.
    pub host_query: Option<&'a str>,
}

/// What [`authorize`] decides.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Decision {
    /// Go on.
    Allow,
    /// Go on, but the answer must be about this host only (an agent
    /// reading a placement: the handler checks the VM's host).
    AllowOnHost(String),
    /// 401: a change (or, without anonymous reads, a read) without a
    /// credential.
    Unauthenticated,
    /// 403.
    Forbidden(Forbidden),
}

/// Routes anyone may call, whatever the credentials: the probes, the
/// scrape, the API's description and the pages' static files (none
/// reveals a placement).
pub fn always_open(route: &str) -> bool {
    matches!(route, "/healthz" | "/readyz" | "/metrics" | "/openapi.json" | "/static/{file}")
}

/// The POST routes that change nothing (an evaluation, Kubernetes'
/// filter and prioritize; docs/adapters.md): reads, whatever their method.
/// Kubernetes' extender configuration cannot send a bearer token, and
/// these answer only what `GET /v1/hosts` already shows.
pub fn asks_only(route: &str) -> bool {
    matches!(route, "/v1/evaluate" | "/v1/k8s/filter" | "/v1/k8s/prioritize")
}

/// The one authorization decision. `configured`: whether the server has
/// any credential (a loopback server without one allows everything);
/// `anonymous_reads`: whether reads need no credential (the default, as
/// before credentials: the web view reads without one).
pub fn authorize(who: &Principal, asked: &Asked<'_>, configured: bool, anonymous_reads: bool) -> Decision {
    let read = matches!(asked.method, "GET" | "HEAD" | "OPTIONS") || asks_only(asked.route);
    if !configured || always_open(asked.route) {
        return Decision::Allow;
    }
    match who {
        Principal::Anonymous if read && anonymous_reads => Decision::Allow,
        Principal::Anonymous => Decision::Unauthenticated,
        Principal::Credential { role: Role::OperatorWrite, .. } => Decision::Allow,
        Principal::Credential { role: Role::OperatorRead, .. } if read => Decision::Allow,
        Principal::Credential { role: Role::OperatorRead, name } => {
            Decision::Forbidden(Forbidden::ReadOnly { name: name.to_string() })
        }
        Principal::Credential { role: Role::Agent { host: own }, .. } => {
            let other = |asked: &str| {
                Decision::Forbidden(Forbidden::OtherHost { own: own.clone(), asked: asked.to_string(), vm: None })
            };
            match (asked.method, asked.route) {
                ("PUT", "/v1/hosts/{name}") | ("PUT", "/v1/hosts/{name}/domains") | ("GET", "/v1/hosts/{name}") => {
                    match asked.host {
                        Some(h) if h == own => Decision::Allow,
                        Some(h) => other(h),
                        None => other("?"),
                    }
                }
                ("GET", "/v1/placements") => match asked.host_query {
                    Some(h) if h == own => Decision::Allow,
                    Some(h) => other(h),
                    None => other("every host"),
                },
                ("GET", "/v1/placements/{vm}") => Decision::AllowOnHost(own.clone()),
                (method, route) => Decision::Forbidden(Forbidden::NotForAgents {
                    own: own.clone(),
                    method: method.to_string(),
                    route: route.to_string(),
                }),
            }
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    const FILE: &str = r#"
[[credential]]
name = "alice"
role = "operator-write"
sha256 = "2bb80d537b1da3e38bd30361aa855686bde0eacd7162fef6a25fe97bf527a25b"

[[credential]]
name = "grafana"
role = "operator-read"
sha256 = "A665A45920422F9D417E4867EFDC4FB8A04A1F3FFF1FA07E998E86F7F7A27AE3"

[[credential]]
role = "agent"
host = "h1"
sha256 = "d4735e3a265e16eee03f59718b9b5d03019c07d8b6c51f90da3a666eec13ab35"
"#;

    #[test]
    fn the_file_maps_digests_to_named_roles() {
        let c = Credentials::parse("c.toml", FILE).unwrap();
        assert_eq!(c.len(), 3);
        assert_eq!(c.lookup("secret").map(Principal::name), Some("alice"));
        assert_eq!(c.lookup("123").map(Principal::role), Some("operator-read"), "hex read in either case");
        let agent = c.lookup("2").unwrap();
        assert_eq!((agent.name(), agent.agent_host()), ("h1", Some("h1")), "an agent is named after its host");
        assert!(c.lookup("secreT").is_none());
        assert_eq!(digest_hex("secret"), "2bb80d537b1da3e38bd30361aa855686bde0eacd7162fef6a25fe97bf527a25b");
    }

    #[test]
    fn a_bad_file_names_the_entry_and_the_field() {
        let bad = |text: &str| Credentials::parse("c.toml", text).unwrap_err();
        let e = bad("[[credential]]\nrole = \"agent\"\nsha256 = \"00\"\n");
        assert_eq!(e, "c.toml: credential 1 (host): an agent credential names its host");
        let e = bad("[[credential]]\nrole = \"admin\"\nname = \"x\"\nsha256 = \"00\"\n");
        assert!(e.starts_with("c.toml: credential 1 (role): expected operator-read"), "{e}");
        let e = bad("[[credential]]\nrole = \"operator-read\"\nname = \"x\"\nsha256 = \"00\"\n");
        assert!(e.starts_with("c.toml: credential 1 (sha256): expected the token's SHA-256"), "{e}");
        let twice = format!(
            "{FILE}\n[[credential]]\nname = \"alice\"\nrole = \"operator-read\"\nsha256 = \"{}\"\n",
            "0".repeat(64)
        );
        assert_eq!(bad(&twice), "c.toml: credential 4 (name): `alice` is named twice");
        let e = bad("[[credential]]\nrole = \"agent\"\nhost = \"h\"\nsha256 = \"00\"\ncolour = 1\n");
        assert_eq!(e, "c.toml: credential 1 (colour): unknown field; expected name, role, host or sha256");
        assert!(bad("[[credential]]\nrole = 1\n").ends_with("(role): expected a string"));
        assert!(bad("token = \"x\"\n").contains("unknown key `token`"));
    }

    #[test]
    fn an_agent_may_touch_its_own_host_only() {
        let agent = Principal::Credential { name: Arc::from("h1"), role: Role::Agent { host: "h1".into() } };
        let ask = |method, route, host| Asked { method, route, host, host_query: None };
        let decide = |a: Asked<'_>| authorize(&agent, &a, true, true);
        assert_eq!(decide(ask("PUT", "/v1/hosts/{name}", Some("h1"))), Decision::Allow);
        assert_eq!(decide(ask("PUT", "/v1/hosts/{name}/domains", Some("h1"))), Decision::Allow);
        assert_eq!(decide(ask("GET", "/v1/hosts/{name}", Some("h1"))), Decision::Allow);
        assert_eq!(decide(ask("GET", "/healthz", None)), Decision::Allow);
        for (method, route, host) in [
            ("PUT", "/v1/hosts/{name}", Some("h2")),
            ("PUT", "/v1/hosts/{name}/domains", Some("h2")),
            ("GET", "/v1/hosts/{name}", Some("h2")),
        ] {
            let d = decide(ask(method, route, host));
            assert!(matches!(&d, Decision::Forbidden(f) if f.code() == "other-host"), "{method} {route}: {d:?}");
        }
        for (method, route) in [
            ("POST", "/v1/placements"),
            ("DELETE", "/v1/placements/{vm}"),
            ("POST", "/v1/placements/{vm}/move"),
            ("PATCH", "/v1/hosts/{name}"),
            ("DELETE", "/v1/hosts/{name}"),
            ("POST", "/v1/hosts/{name}/drain"),
            ("GET", "/v1/hosts"),
            ("GET", "/"),
        ] {
            let d = decide(ask(method, route, Some("h1")));
            assert!(matches!(&d, Decision::Forbidden(f) if f.code() == "not-for-agents"), "{method} {route}: {d:?}");
        }
        let list = |q| authorize(&agent, &Asked { host_query: q, ..ask("GET", "/v1/placements", None) }, true, true);
        assert_eq!(list(Some("h1")), Decision::Allow);
        assert!(matches!(list(Some("h2")), Decision::Forbidden(Forbidden::OtherHost { .. })));
        assert!(matches!(list(None), Decision::Forbidden(Forbidden::OtherHost { .. })));
        assert_eq!(decide(ask("GET", "/v1/placements/{vm}", None)), Decision::AllowOnHost("h1".into()));
    }

    #[test]
    fn operators_read_or_write_and_strangers_only_read() {
        let read = Principal::Credential { name: Arc::from("g"), role: Role::OperatorRead };
        let write = Principal::Credential { name: Arc::from("a"), role: Role::OperatorWrite };
        let place = Asked { method: "POST", route: "/v1/placements", host: None, host_query: None };
        let list = Asked { method: "GET", route: "/v1/hosts", host: None, host_query: None };
        assert_eq!(authorize(&write, &place, true, true), Decision::Allow);
        assert_eq!(authorize(&read, &list, true, true), Decision::Allow);
        assert!(matches!(authorize(&read, &place, true, true), Decision::Forbidden(Forbidden::ReadOnly { .. })));
        assert_eq!(authorize(&Principal::Anonymous, &place, true, true), Decision::Unauthenticated);
        assert_eq!(authorize(&Principal::Anonymous, &list, true, true), Decision::Allow);
        assert_eq!(authorize(&Principal::Anonymous, &list, true, false), Decision::Unauthenticated);
        assert_eq!(authorize(&Principal::Anonymous, &place, false, true), Decision::Allow, "no credentials: loopback");
    }

    #[test]
    fn short_tokens_are_refused() {
        assert!(check_token("t", "s3cret").unwrap_err().contains("at least 32"));
        assert!(check_token("t", &"a".repeat(32)).is_ok());
        assert!(check_token("t", "a b").is_err());
    }
}
