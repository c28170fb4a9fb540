//! The extender's `bind` verb (docs/adapters.md) through the real router
//! and service, the Kubernetes API answered by a stand-in that answers
//! the pod and then the Binding as each case needs: created, refused, or
//! never answered (the outcome-unknown case a real API server cannot be
//! made to produce on demand). The real kube-apiserver's cases are in
//! adapters/kubernetes/apiserver.
#![allow(clippy::unwrap_used)]

mod common;

use axum::http::StatusCode;
use numaplace_server::app::{router, AppState};
use numaplace_server::kube::{KubeClient, KubeConfig};
use numaplace_server::Service;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

const POD: &str = r#"{"apiVersion":"v1","kind":"Pod","metadata":{"name":"db","namespace":"vms","uid":"u-1"},
  "spec":{"containers":[{"name":"c","resources":{"limits":{"cpu":"4","memory":"4Gi"}}}]}}"#;

/// How the stand-in answers `POST .../binding`.
#[derive(Clone, Copy, PartialEq)]
enum Binding {
    Created,
    Refused,
    Silent,
    /// Silent for corona, created elsewhere.
    SilentOnCorona,
    /// Silent the first time, created when sent again.
    SilentOnce,
    /// Silent, though it landed: the pod then reads bound to corona.
    SilentButLanded,
    /// Silent the first time; the pod is then deleted and created again
    /// under its name ([`RECREATED`], UID u-2, 8 CPUs), whose Bindings are
    /// created.
    SilentThenRecreated,
}

/// Pod vms/db made again after the first was deleted: another UID, and
/// twice the CPUs.
const RECREATED: &str = r#"{"apiVersion":"v1","kind":"Pod","metadata":{"name":"db","namespace":"vms","uid":"u-2"},
  "spec":{"containers":[{"name":"c","resources":{"limits":{"cpu":"8","memory":"4Gi"}}}]}}"#;

/// A stand-in API server on a free port: GET of the pod answers [`POD`],
/// the Binding as `binding` says. Answers the paths it was asked.
fn api(binding: Binding) -> (String, Arc<Mutex<Vec<String>>>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let asked = Arc::new(Mutex::new(Vec::new()));
    let seen = asked.clone();
    let bindings = Arc::new(AtomicUsize::new(0));
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut conn) = conn else { return };
            let (seen, bindings) = (seen.clone(), bindings.clone());
            // One thread a connection: a silent Binding holds only its own.
            std::thread::spawn(move || {
                let mut reader = BufReader::new(conn.try_clone().unwrap());
                let mut line = String::new();
                reader.read_line(&mut line).unwrap();
                let mut length = 0;
                loop {
                    let mut h = String::new();
                    reader.read_line(&mut h).unwrap();
                    if h.trim().is_empty() {
                        break;
                    }
                    if let Some(v) = h.to_ascii_lowercase().strip_prefix("content-length:") {
                        length = v.trim().parse().unwrap();
                    }
                }
                let mut body = vec![0; length];
                reader.read_exact(&mut body).unwrap();
                seen.lock().unwrap().push(line.trim().to_string());
                let (status, text) = if line.starts_with("GET /api/v1/namespaces/vms/pods/db ") {
                    if binding == Binding::SilentThenRecreated && bindings.load(Ordering::SeqCst) > 0 {
                        ("200 OK", RECREATED.to_string())
                    } else if binding == Binding::SilentButLanded && bindings.load(Ordering::SeqCst) > 0 {
                        ("200 OK", POD.replace(r#""spec":{"#, r#""spec":{"nodeName":"corona","#))
                    } else {
                        ("200 OK", POD.to_string())
                    }
                } else if line.starts_with("POST /api/v1/namespaces/vms/pods/db/binding ") {
                    let sent: serde_json::Value = serde_json::from_slice(&body).unwrap();
                    let corona = sent["target"]["name"] == "corona";
                    let first = bindings.fetch_add(1, Ordering::SeqCst) == 0;
                    let uid = if binding == Binding::SilentThenRecreated && !first { "u-2" } else { "u-1" };
                    assert_eq!(sent["metadata"]["uid"], uid);
                    match binding {
                    Binding::SilentButLanded => {
                        std::thread::sleep(Duration::from_secs(2));
                        return;
                    }
                    Binding::SilentOnce | Binding::SilentThenRecreated if first => {
                        std::thread::sleep(Duration::from_secs(2));
                        return;
                    }
                    Binding::SilentOnCorona if corona => {
                        std::thread::sleep(Duration::from_secs(2));
                        return;
                    }
                    Binding::Created | Binding::SilentOnCorona | Binding::SilentOnce | Binding::SilentThenRecreated => {
                        ("201 Created", r#"{"kind":"Status","status":"Success"}"#.to_string())
                    }
                    Binding::Refused => (
                        "403 Forbidden",
                        r#"{"kind":"Status","status":"Failure","message":"pods \"db\" is forbidden: cannot create pods/binding","code":403}"#.to_string(),
                    ),
                    Binding::Silent => {
                        std::thread::sleep(Duration::from_secs(2));
                        return;
                    }
                }
                } else {
                    ("404 Not Found", r#"{"kind":"Status","message":"not found"}"#.to_string())
                };
                let _ = write!(
                conn,
                "HTTP/1.1 {status}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{text}",
                text.len()
            );
            });
        }
    });
    (url, asked)
}

/// A directory removed at the end of the test.
struct Dir(std::path::PathBuf);

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A server with corona registered, its Kubernetes API at `kube`.
async fn server(kube: Option<&str>, tag: &str) -> (axum::Router, Dir) {
    let dir = Dir(std::env::temp_dir().join(format!("numaplace-k8s-bind-{}-{tag}", std::process::id())));
    let _ = std::fs::remove_dir_all(&dir.0);
    std::fs::create_dir_all(&dir.0).unwrap();
    let store = numaplace_store::open(&format!("sqlite:{}", dir.0.join("f.db").display())).unwrap();
    let mut st = AppState::new(Arc::new(Service::new(store, 1, 1).unwrap()), None);
    st.kube = kube.map(|api| {
        let config =
            KubeConfig { api: api.to_string(), token_file: None, ca_file: None, timeout: Duration::from_millis(500) };
        Arc::new(KubeClient::new(&config).unwrap())
    });
    let app = router(st);
    let topology =
        std::fs::read(format!("{}/../../fixtures/topologies/mpibind/epyc-corona.xml", env!("CARGO_MANIFEST_DIR")))
            .unwrap();
    let (status, body) = send(&app, "PUT", "/v1/hosts/corona", topology.clone()).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let (status, body) = send(&app, "PUT", "/v1/hosts/corona2", topology).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    (app, dir)
}

async fn send(app: &axum::Router, method: &str, uri: &str, body: Vec<u8>) -> (StatusCode, String) {
    let (status, bytes) = common::send_bytes(app, method, uri, body).await;
    (status, String::from_utf8_lossy(&bytes).into_owned())
}

/// Binds pod vms/db to corona: the answer's `Error`, and whether the
/// service then holds the claim.
async fn bind(app: &axum::Router) -> (String, bool) {
    bind_to(app, "corona").await
}

async fn bind_to(app: &axum::Router, node: &str) -> (String, bool) {
    bind_as(app, node, "u-1").await
}

/// Binds pod vms/db of UID `uid` to `node`.
async fn bind_as(app: &axum::Router, node: &str, uid: &str) -> (String, bool) {
    let args = format!(r#"{{"PodName":"db","PodNamespace":"vms","PodUID":"{uid}","Node":"{node}"}}"#).into_bytes();
    let (status, body) = send(app, "POST", "/v1/k8s/bind", args).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let result: serde_json::Value = serde_json::from_str(&body).unwrap();
    let keys: Vec<&String> = result.as_object().unwrap().keys().collect();
    assert_eq!(keys, ["Error"], "ExtenderBindingResult has Error alone: {body}");
    let (placed, _) = send(app, "GET", "/v1/placements/vms.db", Vec::new()).await;
    (result["Error"].as_str().unwrap().to_string(), placed == StatusCode::OK)
}

#[tokio::test(flavor = "multi_thread")]
async fn bind_claims_then_binds() {
    let (url, asked) = api(Binding::Created);
    let (app, _dir) = server(Some(&url), "created").await;
    let (error, claimed) = bind(&app).await;
    assert_eq!((error.as_str(), claimed), ("", true));
    let asked = asked.lock().unwrap().clone();
    assert!(asked.iter().any(|l| l.starts_with("POST /api/v1/namespaces/vms/pods/db/binding")), "{asked:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_binding_the_api_refuses_releases_the_claim() {
    let (url, _) = api(Binding::Refused);
    let (app, _dir) = server(Some(&url), "refused").await;
    let (error, claimed) = bind(&app).await;
    assert!(error.contains("403") && error.contains("was released"), "{error}");
    assert!(!claimed, "the claim was kept after a refused Binding");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_binding_never_answered_keeps_the_claim_and_says_the_outcome_is_unknown() {
    let (url, _) = api(Binding::Silent);
    let (app, _dir) = server(Some(&url), "silent").await;
    let (error, claimed) = bind(&app).await;
    assert!(error.starts_with("outcome unknown") && error.contains("is kept"), "{error}");
    assert!(claimed, "the claim of a pod that may be bound was released");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_claim_left_by_an_unknown_outcome_moves_when_the_scheduler_chooses_another_node() {
    let (url, _) = api(Binding::SilentOnCorona);
    let (app, _dir) = server(Some(&url), "moved").await;
    let (error, claimed) = bind_to(&app, "corona").await;
    assert!(error.starts_with("outcome unknown") && claimed, "{error}");
    // The pod is still unbound (the stand-in's pod has no nodeName).
    let (error, claimed) = bind_to(&app, "corona2").await;
    assert_eq!((error.as_str(), claimed), ("", true));
    let (_, body) = send(&app, "GET", "/v1/placements/vms.db", Vec::new()).await;
    let doc: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(doc["host"], "corona2", "{body}");
    assert_eq!(claims(&app).await, [("vms.db".to_string(), "corona2".to_string())], "one claim, moved");
}

/// The scheduler's filter and prioritize for pod vms/db on both nodes.
async fn filter_and_prioritize(app: &axum::Router) -> (serde_json::Value, Vec<(String, i64)>) {
    filter_and_prioritize_pod(app, POD).await
}

/// The scheduler's filter and prioritize for `pod` on both nodes.
async fn filter_and_prioritize_pod(app: &axum::Router, pod: &str) -> (serde_json::Value, Vec<(String, i64)>) {
    let pod: serde_json::Value = serde_json::from_str(pod).unwrap();
    let args = serde_json::json!({"Pod": pod, "NodeNames": ["corona", "corona2"]}).to_string().into_bytes();
    let (status, body) = send(app, "POST", "/v1/k8s/filter", args.clone()).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let filtered = serde_json::from_str(&body).unwrap();
    let (status, body) = send(app, "POST", "/v1/k8s/prioritize", args).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let list: Vec<serde_json::Value> = serde_json::from_str(&body).unwrap();
    let scores = list.iter().map(|p| (p["Host"].as_str().unwrap().to_string(), p["Score"].as_i64().unwrap())).collect();
    (filtered, scores)
}

/// The service's claims: (VM, host) each.
async fn claims(app: &axum::Router) -> Vec<(String, String)> {
    let (status, body) = send(app, "GET", "/v1/placements", Vec::new()).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let doc: serde_json::Value = serde_json::from_str(&body).unwrap();
    let list = doc.as_array().or_else(|| doc["placements"].as_array()).unwrap_or_else(|| panic!("{body}"));
    list.iter()
        .map(|p| (p["placement"]["vm"].as_str().unwrap().to_string(), p["host"].as_str().unwrap().to_string()))
        .collect()
}

/// The claim a bind kept when its Binding went unanswered is the pod's
/// own: the scheduler's retry finds that node passed and scored first,
/// and the bind sent again there completes the Binding on that claim (no
/// second one, the kept one not released).
#[tokio::test(flavor = "multi_thread")]
async fn the_retry_of_a_pod_whose_binding_went_unanswered_takes_its_own_kept_claim() {
    let (url, asked) = api(Binding::SilentOnce);
    let (app, _dir) = server(Some(&url), "retried").await;
    let (error, claimed) = bind(&app).await;
    assert!(error.starts_with("outcome unknown") && claimed, "{error}");
    let (filtered, scores) = filter_and_prioritize(&app).await;
    assert_eq!(filtered["NodeNames"], serde_json::json!(["corona", "corona2"]), "{filtered}");
    assert_eq!(filtered["FailedAndUnresolvableNodes"], serde_json::json!({}), "{filtered}");
    assert_eq!(scores[0], ("corona".to_string(), 10), "{scores:?}");
    assert!(scores[1].0 == "corona2" && scores[1].1 < 10, "{scores:?}");
    let (error, claimed) = bind(&app).await;
    assert_eq!((error.as_str(), claimed), ("", true));
    assert_eq!(claims(&app).await, [("vms.db".to_string(), "corona".to_string())]);
    let asked = asked.lock().unwrap().clone();
    let sent = asked.iter().filter(|l| l.starts_with("POST /api/v1/namespaces/vms/pods/db/binding")).count();
    assert_eq!(sent, 2, "{asked:?}");
}

/// A Binding whose answer was lost but which landed: the pod reads bound
/// to corona, so a bind to another node moves nothing and says where the
/// claim is held; the pod keeps its one claim, where it runs.
#[tokio::test(flavor = "multi_thread")]
async fn a_pod_bound_where_its_claim_is_kept_is_not_moved_elsewhere() {
    let (url, _) = api(Binding::SilentButLanded);
    let (app, _dir) = server(Some(&url), "landed").await;
    let (error, claimed) = bind_to(&app, "corona").await;
    assert!(error.starts_with("outcome unknown") && claimed, "{error}");
    let (error, _) = bind_to(&app, "corona2").await;
    assert!(error.contains("its claim is held on corona") && error.contains("nothing moved"), "{error}");
    assert_eq!(claims(&app).await, [("vms.db".to_string(), "corona".to_string())]);
}

/// The claim's host and how many CPUs it pins.
async fn claim_of_db(app: &axum::Router) -> (String, usize) {
    let (status, body) = send(app, "GET", "/v1/placements/vms.db", Vec::new()).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let doc: serde_json::Value = serde_json::from_str(&body).unwrap();
    let vcpus = doc["placement"]["pins"].as_array().unwrap_or_else(|| panic!("{body}")).len();
    (doc["host"].as_str().unwrap().to_string(), vcpus)
}

/// A claim kept for pod u-1 (its Binding unanswered) is not the own claim
/// of pod u-2, made under the same name after u-1 was deleted: bind
/// frees it and claims afresh, at u-2's size, on the node chosen (the
/// claim's own node, or another: never the old claim reused or moved).
#[tokio::test(flavor = "multi_thread")]
async fn a_pod_recreated_under_the_name_of_a_kept_claim_is_claimed_afresh() {
    for node in ["corona", "corona2"] {
        let (url, _) = api(Binding::SilentThenRecreated);
        let (app, _dir) = server(Some(&url), &format!("recreated-{node}")).await;
        let (error, claimed) = bind_as(&app, "corona", "u-1").await;
        assert!(error.starts_with("outcome unknown") && claimed, "{error}");
        assert_eq!(claim_of_db(&app).await, ("corona".to_string(), 4));
        let (error, claimed) = bind_as(&app, node, "u-2").await;
        assert_eq!((error.as_str(), claimed), ("", true));
        assert_eq!(claim_of_db(&app).await, (node.to_string(), 8), "u-2's own claim, at its size");
        assert_eq!(claims(&app).await, [("vms.db".to_string(), node.to_string())], "one claim");
    }
}

/// Filter and prioritize judge pod u-2 on its own: the claim kept for
/// u-1 on corona does not pass corona for a u-2 too large for any node,
/// nor score it 10; a u-2 that fits is passed on both nodes; and neither
/// verb frees the stale claim (bind does).
#[tokio::test(flavor = "multi_thread")]
async fn a_claim_kept_for_a_deleted_pod_is_not_its_successors_own() {
    let (url, _) = api(Binding::SilentThenRecreated);
    let (app, _dir) = server(Some(&url), "successor").await;
    let (error, claimed) = bind_as(&app, "corona", "u-1").await;
    assert!(error.starts_with("outcome unknown") && claimed, "{error}");
    let huge = RECREATED.replace(r#""cpu":"8""#, r#""cpu":"200""#);
    let (filtered, scores) = filter_and_prioritize_pod(&app, &huge).await;
    assert_eq!(filtered["NodeNames"], serde_json::json!([]), "{filtered}");
    assert_eq!(scores, [("corona".to_string(), 0), ("corona2".to_string(), 0)]);
    let (filtered, _) = filter_and_prioritize_pod(&app, RECREATED).await;
    assert_eq!(filtered["NodeNames"], serde_json::json!(["corona", "corona2"]), "{filtered}");
    assert_eq!(claims(&app).await, [("vms.db".to_string(), "corona".to_string())], "filter freed nothing");
    assert_eq!(claim_of_db(&app).await, ("corona".to_string(), 4));
}

/// The scheduler binding pod u-1 after it was deleted and made again as
/// u-2: refused, and the answer says what is held and what was done
/// (u-1's kept claim freed: its pod is gone).
#[tokio::test(flavor = "multi_thread")]
async fn binding_a_deleted_pod_frees_its_kept_claim_and_says_so() {
    let (url, _) = api(Binding::SilentThenRecreated);
    let (app, _dir) = server(Some(&url), "stale-uid").await;
    let (error, claimed) = bind_as(&app, "corona", "u-1").await;
    assert!(error.starts_with("outcome unknown") && claimed, "{error}");
    let (error, claimed) = bind_as(&app, "corona", "u-1").await;
    assert!(error.contains("is UID u-2, not u-1") && error.contains("nothing claimed for u-1"), "{error}");
    assert!(
        error.contains("the claim of vms.db on corona, kept for UID u-1") && error.contains("was released"),
        "{error}"
    );
    assert!(!claimed, "the claim of a deleted pod is still held");
    // u-2's own claim is kept, and a stale bind of u-1 says so.
    let (error, claimed) = bind_as(&app, "corona2", "u-2").await;
    assert_eq!((error.as_str(), claimed), ("", true));
    let (error, claimed) = bind_as(&app, "corona", "u-1").await;
    assert!(error.contains("the claim of vms.db on corona2, made for UID u-2, is kept"), "{error}");
    assert!(claimed);
}

#[tokio::test(flavor = "multi_thread")]
async fn without_the_kubernetes_api_bind_claims_nothing_and_says_why() {
    let (app, _dir) = server(None, "none").await;
    let (error, claimed) = bind(&app).await;
    assert!(error.contains("--kube-api"), "{error}");
    assert!(!claimed);
}

#[tokio::test(flavor = "multi_thread")]
async fn an_api_that_is_down_claims_nothing() {
    // A port nothing listens on.
    let port = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let (app, _dir) = server(Some(&format!("http://127.0.0.1:{port}")), "down").await;
    let (error, claimed) = bind(&app).await;
    assert!(error.starts_with("reading pod vms/db"), "{error}");
    assert!(!claimed);
}
