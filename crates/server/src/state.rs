//! What every handler shares ([`AppState`]): the service, the credentials,
//! the limits a request is held to; and [`blocking`], which runs a
//! service call on a blocking thread under the request's deadline. Below
//! the handlers and the layers, above the service: nothing here knows a
//! route.

use crate::credentials::Credentials;
use crate::error::ApiError;
use crate::service::Service;
use numaplace_store::deadline::Deadline;
use std::net::IpAddr;
use std::sync::atomic::AtomicUsize;
use std::sync::{Arc, RwLock};
use std::time::Duration;

/// Largest topology upload: an hwloc XML export of a 24-node host is a
/// few hundred KiB, a sysfs tarball a few MiB.
pub const MAX_HOST_BODY: usize = 16 << 20;

/// How long a request's body may take to arrive unless `--body-timeout`
/// says otherwise: a 16 MiB topology over a slow management link fits,
/// a client trickling a byte a second does not hold a connection longer.
pub const DEFAULT_BODY_TIMEOUT: Duration = Duration::from_secs(20);

/// What handlers share.
#[derive(Clone)]
pub struct AppState {
    /// The service.
    pub service: Arc<Service>,
    /// The credentials requests are checked against (`--credentials`,
    /// `--token-file`), replaced whole on SIGHUP.
    pub credentials: Arc<RwLock<Arc<Credentials>>>,
    /// Whether reads need no credential (`--anonymous-reads`).
    pub anonymous_reads: bool,
    /// Proxies whose `X-Forwarded-For` is believed (`--trusted-proxy`).
    pub trusted_proxies: Arc<[IpAddr]>,
    /// Bytes of request bodies the server holds at once
    /// (`--max-body-memory`): a body waits for its share before it is
    /// read.
    pub body_budget: Arc<tokio::sync::Semaphore>,
    /// The budget's size, for the error that names it.
    pub body_budget_bytes: usize,
    /// How long a request may take before it is answered 503.
    pub request_timeout: Duration,
    /// Requests being answered now (the drain at stop reports them).
    pub in_flight: Arc<AtomicUsize>,
    /// How long a request's body may take to arrive.
    pub body_timeout: Duration,
    /// Names besides IP addresses and `localhost` that the `Host` header
    /// may carry (`--allowed-host`).
    pub allowed_hosts: Arc<[String]>,
    /// The Kubernetes API client (`--kube-api`), for the extender's VMI
    /// reads and `bind`.
    pub kube: Option<Arc<crate::kube::KubeClient>>,
}

impl AppState {
    /// The state of a server over `service`, with `token` (an
    /// operator-write credential named `token`) and the default deadline.
    pub fn new(service: Arc<Service>, token: Option<Arc<str>>) -> AppState {
        let credentials = match token {
            Some(t) => Credentials::default().with_token(&t),
            None => Credentials::default(),
        };
        AppState {
            service,
            credentials: Arc::new(RwLock::new(Arc::new(credentials))),
            anonymous_reads: true,
            trusted_proxies: Arc::from(Vec::new()),
            body_budget: Arc::new(tokio::sync::Semaphore::new(DEFAULT_BODY_MEMORY)),
            body_budget_bytes: DEFAULT_BODY_MEMORY,
            request_timeout: DEFAULT_REQUEST_TIMEOUT,
            in_flight: Arc::default(),
            body_timeout: DEFAULT_BODY_TIMEOUT,
            allowed_hosts: Arc::from(Vec::new()),
            kube: None,
        }
    }

    /// The credentials in force now.
    pub fn credentials(&self) -> Arc<Credentials> {
        self.credentials.read().map_or_else(|p| p.into_inner().clone(), |c| c.clone())
    }

    /// Replaces the credentials (a SIGHUP's reload).
    pub fn set_credentials(&self, c: Credentials) {
        let mut slot = self.credentials.write().unwrap_or_else(std::sync::PoisonError::into_inner);
        *slot = Arc::new(c);
    }

    /// Sets the bytes of bodies held at once.
    pub fn set_body_budget(&mut self, bytes: usize) {
        self.body_budget_bytes = bytes.max(MAX_HOST_BODY);
        self.body_budget = Arc::new(tokio::sync::Semaphore::new(self.body_budget_bytes));
    }
}

/// Bytes of request bodies held at once unless `--max-body-memory` says
/// otherwise: four of the largest (a 16 MiB topology), or 256 requests
/// of 256 KiB. The server's memory for bodies is this figure, whatever
/// the number of clients; a body waits for its share (within
/// `--body-timeout`) rather than pile up.
pub const DEFAULT_BODY_MEMORY: usize = 64 << 20;

/// A request's deadline unless `--request-timeout` says otherwise. A
/// placement takes milliseconds, so this is only ever reached when the
/// database stalls; it is shorter than the usual client and proxy
/// timeouts (10 s and more), so the client hears 503 and retries instead
/// of giving up on a request that might still commit.
pub const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(5);

tokio::task_local! {
    /// The deadline of the request this task answers: [`blocking`] hands
    /// it to the store's calls.
    pub(crate) static DEADLINE: Deadline;
}

/// Runs a service call on a blocking thread (the pages' forms too), in
/// the request's span and under its deadline.
pub async fn blocking<T: Send + 'static>(
    st: &AppState,
    f: impl FnOnce(&Service) -> Result<T, ApiError> + Send + 'static,
) -> Result<T, ApiError> {
    let svc = st.service.clone();
    let deadline = DEADLINE.try_with(Deadline::clone).ok();
    let span = tracing::Span::current();
    tokio::task::spawn_blocking(move || {
        span.in_scope(|| match deadline {
            Some(d) => numaplace_store::deadline::scope(d, || f(&svc)),
            None => f(&svc),
        })
    })
    .await
    .unwrap_or_else(|e| Err(ApiError::Internal(format!("the request's worker failed: {e}"))))
}
