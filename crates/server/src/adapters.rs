//! The routes outside schedulers call (docs/adapters.md): `POST
//! /v1/evaluate`, which Nova's `NumaplaceFilter` and `NumaplaceWeigher`
//! ask, and Kubernetes' scheduler extender verbs, `POST /v1/k8s/filter`
//! and `POST /v1/k8s/prioritize`. Each asks the fleet what each named
//! host would do with one VM, through the service's own filters,
//! prefilter and planner, and changes nothing: these schedulers choose the
//! host themselves, so a claim is made where the choice is known (see
//! docs/adapters.md), never here.

use crate::command::{check_vm_name, Place};
use crate::error::ApiError;
use crate::state::{blocking, AppState};
use axum::body::Bytes;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use numaplace_fleet::{Evaluation, Verdict};
use numaplace_wire::fleet::{EvaluateDoc, EvaluationDoc};
use numaplace_wire::k8s::{ExtenderArgs, ExtenderFilterResult, HostPriority, NodeList};

/// Most hosts one evaluation may name (a Kubernetes cluster's largest
/// supported size is 5,000 nodes).
pub const MAX_EVALUATED_HOSTS: usize = 10_000;

fn json<T: serde::Serialize>(v: &T) -> Response {
    (StatusCode::OK, axum::Json(v)).into_response()
}

fn check_hosts(hosts: &[String], field: &str) -> Result<(), ApiError> {
    if hosts.len() > MAX_EVALUATED_HOSTS {
        return Err(ApiError::BadRequest(format!(
            "{field}: expected at most {MAX_EVALUATED_HOSTS} hosts, found {}",
            hosts.len()
        )));
    }
    Ok(())
}

/// Asks the fleet, on a blocking thread after catching up with the store.
async fn verdicts(st: &AppState, place: Place, hosts: Vec<String>) -> Result<Evaluation, ApiError> {
    blocking(st, move |s| {
        s.sync()?;
        s.with_fleet(|f| f.evaluate(&place.request, &place.selection(), &hosts)).map_err(ApiError::Unplaceable)
    })
    .await
}

/// `POST /v1/evaluate`: `{"vm": <a placement request>, "hosts": [...]}`
/// answered with one verdict per host, in the order asked.
pub(crate) async fn evaluate(State(st): State<AppState>, body: Bytes) -> Result<Response, ApiError> {
    let doc: EvaluateDoc =
        serde_json::from_slice(&body).map_err(|e| ApiError::BadRequest(format!("request body: {e}")))?;
    check_hosts(&doc.hosts, "hosts")?;
    let place = Place::from_value(doc.vm, true)?;
    let vm = place.request.name.clone();
    let v = verdicts(&st, place, doc.hosts).await?;
    Ok(json(&EvaluationDoc::new(&vm, &v)))
}

/// The pod of an extender call as a placement request, and the nodes it
/// names.
fn read_args(body: &[u8]) -> Result<(Place, Vec<String>, Option<NodeList>), ApiError> {
    let args: ExtenderArgs =
        serde_json::from_slice(body).map_err(|e| ApiError::BadRequest(format!("ExtenderArgs: {e}")))?;
    let pod = args.pod.ok_or_else(|| ApiError::BadRequest("ExtenderArgs.Pod: expected the pod".into()))?;
    let request = pod.request().map_err(|e| ApiError::BadRequest(e.to_string()))?;
    check_vm_name(&request.name).map_err(|why| ApiError::BadRequest(format!("Pod.metadata.name: {why}")))?;
    let (names, nodes) = match (args.node_names, args.nodes) {
        (Some(names), _) => (names, None),
        (None, Some(nodes)) => {
            let names = nodes
                .names()
                .into_iter()
                .enumerate()
                .map(|(i, n)| {
                    n.ok_or_else(|| {
                        ApiError::BadRequest(format!("ExtenderArgs.Nodes.items[{i}].metadata.name: missing"))
                    })
                })
                .collect::<Result<Vec<_>, _>>()?;
            (names, Some(nodes))
        }
        (None, None) => {
            return Err(ApiError::BadRequest("ExtenderArgs: expected NodeNames or Nodes".into()));
        }
    };
    check_hosts(&names, "ExtenderArgs.NodeNames")?;
    let place = Place { request, constraints: Default::default(), group: None, dry_run: true };
    Ok((place, names, nodes))
}

/// `POST /v1/k8s/filter`: `ExtenderArgs` in, `ExtenderFilterResult` out.
/// Every node refused is `FailedAndUnresolvableNodes`: the CPUs and memory
/// a node lacks are held by numaplace's placements, which preempting pods
/// does not release, so the scheduler must not evict pods hoping it would.
/// A request the planner calls wrong whatever the node fails every node
/// so, with the reason, rather than the whole call: the scheduler then
/// says why the pod is pending.
pub(crate) async fn k8s_filter(State(st): State<AppState>, body: Bytes) -> Result<Response, ApiError> {
    let (place, names, nodes) = read_args(&body)?;
    let sent_names = nodes.is_none();
    let mut result = ExtenderFilterResult::default();
    let mut passed = Vec::new();
    match verdicts(&st, place, names.clone()).await {
        Ok(evaluation) => {
            for v in &evaluation.verdicts {
                match &v.verdict {
                    Verdict::Fits { .. } => passed.push(v.host.clone()),
                    other => {
                        let why = match other {
                            Verdict::Refused(skip) => format!("numaplace {}: {skip}", skip.code()),
                            _ => format!("numaplace unknown-host: no host {} is registered", v.host),
                        };
                        result.failed_and_unresolvable_nodes.insert(v.host.clone(), why);
                    }
                }
            }
        }
        Err(ApiError::Unplaceable(r)) => {
            let why = format!("numaplace {}: {r}", r.reason.code());
            result.failed_and_unresolvable_nodes = names.iter().map(|n| (n.clone(), why.clone())).collect();
        }
        Err(e) => return Err(e),
    }
    if sent_names {
        result.node_names = Some(passed);
    } else if let Some(nodes) = nodes {
        let keep: std::collections::BTreeSet<&String> = passed.iter().collect();
        let items =
            nodes.items.iter().zip(&names).filter(|(_, n)| keep.contains(n)).map(|(item, _)| item.clone()).collect();
        result.nodes = Some(NodeList { items });
    }
    Ok(json(&result))
}

/// `POST /v1/k8s/prioritize`: `ExtenderArgs` in, `HostPriorityList` out,
/// 10 for the node the service's own selection would take, 9 to 1 for the
/// others that fit by cost, 0 for nodes that cannot take the pod.
pub(crate) async fn k8s_prioritize(State(st): State<AppState>, body: Bytes) -> Result<Response, ApiError> {
    let (place, names, _) = read_args(&body)?;
    let list: Vec<HostPriority> = match verdicts(&st, place, names.clone()).await {
        Ok(e) => {
            let scores = numaplace_fleet::scores(&e.verdicts, e.chosen.as_deref());
            e.verdicts
                .iter()
                .zip(scores)
                .map(|(v, s)| HostPriority { host: v.host.clone(), score: i64::from(s) })
                .collect()
        }
        Err(ApiError::Unplaceable(_)) => names.iter().map(|n| HostPriority { host: n.clone(), score: 0 }).collect(),
        Err(e) => return Err(e),
    };
    Ok(json(&list))
}
