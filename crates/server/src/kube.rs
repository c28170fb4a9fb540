//! The service's Kubernetes API client (`serve --kube-api`), used by the
//! scheduler extender (docs/adapters.md): it reads a launcher pod's
//! VirtualMachineInstance, reads the pod a `bind` names, and creates the
//! pod's Binding. Blocking (ureq), so handlers call it on a blocking
//! thread, never on the async runtime.
//!
//! Every failure says whether the API server may have acted on the call
//! ([`KubeError::NotSent`] never reached it, [`KubeError::Status`] was
//! answered, [`KubeError::Unknown`] was sent and not answered): `bind`
//! releases its claim only when the Binding is known not to exist.

use numaplace_wire::k8s::vmi::Vmi;
use numaplace_wire::k8s::{Binding, Pod};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

/// How long one call to the API server may take unless `--kube-timeout`
/// says otherwise: below the scheduler's default extender `httpTimeout`
/// (30 s), so an extender call answers before the scheduler gives up.
pub const DEFAULT_KUBE_TIMEOUT: Duration = Duration::from_secs(5);

/// The largest answer read from the API server (a VMI or a pod is a few
/// KiB; one with large annotations far below this).
const MAX_ANSWER: u64 = 4 << 20;

/// Where the service finds the Kubernetes API (`--kube-api` and its
/// companions).
#[derive(Clone, Debug)]
pub struct KubeConfig {
    /// The API server's URL (`https://10.0.0.1:6443`), or `in-cluster`:
    /// `KUBERNETES_SERVICE_HOST`/`_PORT`, with the pod's service-account
    /// token and CA unless the files are given.
    pub api: String,
    /// A file holding the bearer token, read again on every call (a
    /// projected service-account token is rotated in place).
    pub token_file: Option<PathBuf>,
    /// The PEM CA bundle the API server's certificate is checked
    /// against; `None`: the Mozilla roots.
    pub ca_file: Option<PathBuf>,
    /// How long one call may take.
    pub timeout: Duration,
}

/// The service-account files a pod is given.
const SA_DIR: &str = "/var/run/secrets/kubernetes.io/serviceaccount";

/// Why a call to the API server did not succeed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum KubeError {
    /// Answered with this status (the `Status` object's message).
    Status {
        /// The HTTP status.
        status: u16,
        /// The API server's message.
        message: String,
    },
    /// The call never reached the API server (connection refused, TLS
    /// handshake failed, the token file unreadable): nothing was done.
    NotSent(String),
    /// The call was sent and not answered (timeout, connection lost): the
    /// API server may have acted on it.
    Unknown(String),
    /// Answered 2xx with a body that is not the expected object.
    BadAnswer(String),
}

impl std::fmt::Display for KubeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            KubeError::Status { status, message } => write!(f, "the Kubernetes API answered {status}: {message}"),
            KubeError::NotSent(why) => write!(f, "the Kubernetes API was not reached: {why}"),
            KubeError::Unknown(why) => write!(f, "the Kubernetes API did not answer: {why}"),
            KubeError::BadAnswer(why) => write!(f, "the Kubernetes API's answer did not read: {why}"),
        }
    }
}

/// A client of one API server.
pub struct KubeClient {
    agent: ureq::Agent,
    base: String,
    token_file: Option<PathBuf>,
}

impl std::fmt::Debug for KubeClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KubeClient").field("base", &self.base).finish_non_exhaustive()
    }
}

/// A DNS subdomain (`[a-z0-9.-]`, at most 253): every name a path below
/// carries, so none can leave its path segment.
pub fn check_name(field: &str, name: &str) -> Result<(), String> {
    let ok = !name.is_empty()
        && name.len() <= 253
        && name.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.')
        && !name.starts_with(['-', '.']);
    if ok {
        Ok(())
    } else {
        Err(format!("{field}: expected a Kubernetes name (a DNS subdomain: a-z, 0-9, '-', '.'), found {name:?}"))
    }
}

impl KubeClient {
    /// A client for `config`; the CA file is read now, so a wrong path
    /// stops `serve` at start, naming the flag.
    pub fn new(config: &KubeConfig) -> Result<KubeClient, String> {
        let mut config = config.clone();
        if config.api == "in-cluster" {
            let host = std::env::var("KUBERNETES_SERVICE_HOST")
                .map_err(|_| "--kube-api in-cluster: KUBERNETES_SERVICE_HOST is not set (not in a pod?)".to_string())?;
            let port = std::env::var("KUBERNETES_SERVICE_PORT").unwrap_or_else(|_| "443".into());
            let host = if host.contains(':') { format!("[{host}]") } else { host };
            config.api = format!("https://{host}:{port}");
            config.token_file.get_or_insert_with(|| Path::new(SA_DIR).join("token"));
            config.ca_file.get_or_insert_with(|| Path::new(SA_DIR).join("ca.crt"));
        }
        let base = config.api.trim_end_matches('/').to_string();
        if !(base.starts_with("https://") || base.starts_with("http://")) {
            return Err(format!("--kube-api {}: expected an http:// or https:// URL, or in-cluster", config.api));
        }
        let mut tls = ureq::tls::TlsConfig::builder();
        if let Some(ca) = &config.ca_file {
            let pem = std::fs::read(ca).map_err(|e| format!("--kube-ca-file {}: {e}", ca.display()))?;
            let mut certs = Vec::new();
            for item in ureq::tls::parse_pem(&pem) {
                match item {
                    Ok(ureq::tls::PemItem::Certificate(c)) => certs.push(c),
                    Ok(_) => {}
                    Err(e) => return Err(format!("--kube-ca-file {}: {e}", ca.display())),
                }
            }
            if certs.is_empty() {
                return Err(format!("--kube-ca-file {}: expected PEM certificates, found none", ca.display()));
            }
            tls = tls.root_certs(ureq::tls::RootCerts::Specific(Arc::new(certs)));
        }
        if let Some(t) = &config.token_file {
            read_token(t).map_err(|e| format!("--kube-token-file {e}"))?;
        }
        let t = Some(config.timeout);
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .tls_config(tls.build())
            .http_status_as_error(false)
            .max_redirects(0)
            .timeout_connect(t)
            .timeout_send_request(t)
            .timeout_send_body(t)
            .timeout_recv_response(t)
            .timeout_recv_body(t)
            .build()
            .into();
        Ok(KubeClient { agent, base, token_file: config.token_file })
    }

    /// The API server's URL.
    pub fn base(&self) -> &str {
        &self.base
    }

    fn bearer(&self) -> Result<Option<String>, KubeError> {
        match &self.token_file {
            None => Ok(None),
            Some(t) => read_token(t).map(|t| Some(format!("Bearer {t}"))).map_err(KubeError::NotSent),
        }
    }

    /// One call: the 2xx answer's body, else why not.
    fn call(&self, method: &str, path: &str, body: Option<&[u8]>) -> Result<Vec<u8>, KubeError> {
        let url = format!("{}{path}", self.base);
        let auth = self.bearer()?;
        let answer = if let Some(body) = body {
            let mut req = self.agent.post(&url).header("Accept", "application/json");
            req = req.header("Content-Type", "application/json");
            if let Some(a) = &auth {
                req = req.header("Authorization", a);
            }
            req.send(body)
        } else {
            let mut req = self.agent.get(&url).header("Accept", "application/json");
            if let Some(a) = &auth {
                req = req.header("Authorization", a);
            }
            req.call()
        };
        let mut resp = answer.map_err(|e| classify(&e, method, &url))?;
        let status = resp.status().as_u16();
        let text = match resp.body_mut().with_config().limit(MAX_ANSWER).read_to_vec() {
            Ok(t) => t,
            // A POST answered 2xx was done, whatever its body.
            Err(_) if method == "POST" && (200..300).contains(&status) => return Ok(Vec::new()),
            Err(e) if (200..300).contains(&status) => return Err(KubeError::Unknown(format!("{method} {url}: {e}"))),
            Err(e) => return Err(KubeError::Status { status, message: format!("{method} {path}: {e}") }),
        };
        if (200..300).contains(&status) {
            return Ok(text);
        }
        // A `Status` object's message, else the body as it came.
        let message = serde_json::from_slice::<serde_json::Value>(&text)
            .ok()
            .and_then(|v| v.get("message").and_then(|m| m.as_str()).map(str::to_string))
            .unwrap_or_else(|| String::from_utf8_lossy(&text).chars().take(300).collect());
        Err(KubeError::Status { status, message: format!("{method} {path}: {message}") })
    }

    /// GET a pod.
    pub fn pod(&self, namespace: &str, name: &str) -> Result<Pod, KubeError> {
        let body = self.call("GET", &format!("/api/v1/namespaces/{namespace}/pods/{name}"), None)?;
        serde_json::from_slice(&body).map_err(|e| KubeError::BadAnswer(format!("pod {namespace}/{name}: {e}")))
    }

    /// GET a VirtualMachineInstance (`kubevirt.io/v1`).
    pub fn vmi(&self, namespace: &str, name: &str) -> Result<Vmi, KubeError> {
        let path = format!("/apis/kubevirt.io/v1/namespaces/{namespace}/virtualmachineinstances/{name}");
        let body = self.call("GET", &path, None)?;
        serde_json::from_slice(&body).map_err(|e| KubeError::BadAnswer(format!("VMI {namespace}/{name}: {e}")))
    }

    /// Creates the pod's Binding to `node`, with the pod's UID as a
    /// precondition (the API server refuses it for a pod recreated under
    /// the same name).
    pub fn bind(&self, namespace: &str, name: &str, uid: &str, node: &str) -> Result<(), KubeError> {
        let binding = Binding::new(namespace, name, uid, node);
        let body = serde_json::to_vec(&binding).map_err(|e| KubeError::NotSent(format!("the Binding: {e}")))?;
        let path = format!("/api/v1/namespaces/{namespace}/pods/{name}/binding");
        self.call("POST", &path, Some(&body)).map(|_| ())
    }
}

/// The token in `path`, trimmed; an empty file is an error.
fn read_token(path: &Path) -> Result<String, String> {
    let t = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let t = t.trim();
    if t.is_empty() || t.contains(['\n', '\r']) {
        return Err(format!("{}: expected one bearer token", path.display()));
    }
    Ok(t.to_string())
}

/// Whether a failed call may have reached the API server.
fn classify(e: &ureq::Error, method: &str, url: &str) -> KubeError {
    use ureq::Error as E;
    let why = format!("{method} {url}: {e}");
    match e {
        E::HostNotFound | E::ConnectionFailed | E::BadUri(_) | E::Tls(_) | E::Rustls(_) | E::Pem(_) => {
            KubeError::NotSent(why)
        }
        E::Timeout(ureq::Timeout::Resolve | ureq::Timeout::Connect) => KubeError::NotSent(why),
        // Refused before a byte went out.
        E::Io(io) if io.kind() == std::io::ErrorKind::ConnectionRefused => KubeError::NotSent(why),
        _ => KubeError::Unknown(why),
    }
}
