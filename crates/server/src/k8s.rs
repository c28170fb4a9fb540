//! Kubernetes' scheduler extender verbs (docs/adapters.md): `POST
//! /v1/k8s/filter` and `POST /v1/k8s/prioritize` ask the fleet, like
//! `/v1/evaluate`, and change nothing; `POST /v1/k8s/bind` claims the
//! placement on the node the scheduler chose, then creates the pod's
//! Binding through the Kubernetes API (`serve --kube-api`), releasing the
//! claim when the Binding is known to have failed.
//!
//! A KubeVirt launcher pod is read from its VirtualMachineInstance when
//! the service reads the Kubernetes API, else from the pod's resources.

use crate::adapters::{check_hosts, json};
use crate::command::{check_vm_name, Delete, Move, Place};
use crate::error::{ApiError, Conflict};
use crate::kube::{check_name, KubeClient, KubeError};
use crate::state::{blocking, AppState};
use axum::body::Bytes;
use axum::extract::State;
use axum::response::Response;
use numaplace_fleet::{Evaluation, Fleet, Verdict};
use numaplace_plan::{Rejection, Request};
use numaplace_wire::k8s::{
    ExtenderArgs, ExtenderBindingArgs, ExtenderBindingResult, ExtenderFilterResult, HostPriority, NodeList, Pod,
};
use std::sync::Arc;

/// Runs a Kubernetes API call on a blocking thread.
async fn kube_call<T: Send + 'static>(
    kube: &Arc<KubeClient>,
    f: impl FnOnce(&KubeClient) -> Result<T, KubeError> + Send + 'static,
) -> Result<T, KubeError> {
    let kube = kube.clone();
    tokio::task::spawn_blocking(move || f(&kube))
        .await
        .unwrap_or_else(|e| Err(KubeError::Unknown(format!("the call's worker failed: {e}"))))
}

/// The VM request a pod asks for. A launcher pod's VMI decides when the
/// service reads the Kubernetes API and the VMI reads (its UID the one
/// the pod was made for); a VMI field numaplace cannot honour is an
/// `Err` reason (`numaplace CODE: sentence`) every node is refused with.
/// A VMI that does not read falls back to the pod's resources, and says
/// so in the log. A pod that does not read is 400.
pub(crate) async fn pod_request(st: &AppState, pod: &Pod) -> Result<Result<Request, String>, ApiError> {
    let from_pod = || -> Result<Result<Request, String>, ApiError> {
        let r = pod.request().map_err(|e| ApiError::BadRequest(e.to_string()))?;
        Ok(Ok(r))
    };
    let (Some(kube), Some(vmi)) = (st.kube.as_ref(), pod.vmi_name()) else { return from_pod() };
    let (ns, name) = (pod.namespace().to_string(), vmi.to_string());
    let why = if let Err(e) = check_name("the VMI's name", &name).and_then(|()| check_name("namespace", &ns)) {
        e
    } else {
        let (n, m) = (ns.clone(), name.clone());
        match kube_call(kube, move |k| k.vmi(&n, &m)).await {
            Ok(v) if pod.vmi_uid().is_some_and(|u| !v.metadata.uid.is_empty() && u != v.metadata.uid) => {
                format!(
                    "VMI {ns}/{name} is UID {}, not the pod's {}: recreated since",
                    v.metadata.uid,
                    pod.vmi_uid().unwrap_or("")
                )
            }
            Ok(v) => {
                return Ok(v.request(&pod.vm_name()).map_err(|r| format!("numaplace {}: {r}", r.code())));
            }
            Err(e) => e.to_string(),
        }
    };
    tracing::warn!(pod = %pod.vm_name(), vmi = %format!("{ns}/{name}"), "the VMI did not read ({why}): the pod's resources decide");
    from_pod()
}

/// The pod of an extender call, and the nodes it names.
fn read_args(body: &[u8]) -> Result<(Pod, Vec<String>, Option<NodeList>), ApiError> {
    let args: ExtenderArgs =
        serde_json::from_slice(body).map_err(|e| ApiError::BadRequest(format!("ExtenderArgs: {e}")))?;
    let pod = args.pod.ok_or_else(|| ApiError::BadRequest("ExtenderArgs.Pod: expected the pod".into()))?;
    if pod.metadata.name.is_empty() {
        return Err(ApiError::BadRequest("Pod.metadata.name: expected the pod's name".into()));
    }
    check_vm_name(&pod.vm_name()).map_err(|why| ApiError::BadRequest(format!("Pod.metadata.name: {why}")))?;
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
    Ok((pod, names, nodes))
}

/// What the fleet says of a pod on the nodes asked: each node's verdict,
/// or one reason every node is refused with (a request the planner calls
/// wrong whatever the node, a VMI field numaplace cannot honour).
enum Asked {
    Evaluated(Evaluation),
    Refused(String),
}

async fn ask(st: &AppState, pod: &Pod, names: &[String]) -> Result<Asked, ApiError> {
    let request = match pod_request(st, pod).await? {
        Ok(r) => r,
        Err(why) => return Ok(Asked::Refused(why)),
    };
    let place = Place { request, constraints: Default::default(), group: None, dry_run: true };
    let hosts = names.to_vec();
    let uid = pod.metadata.uid.clone();
    let asked = blocking(st, move |s| {
        s.sync()?;
        let vm = place.request.name.as_str();
        // Whom a claim under the pod's name was made for (read only when
        // there is one: the store is asked, not the cache).
        let owner = if s.with_fleet(|f| f.host_of(vm).is_some()) { s.holder(vm)?.and_then(|(_, o)| o) } else { None };
        s.with_fleet(|f| match owner {
            Some(o) if !uid.is_empty() && o != uid => without_stale_claim(f, &place, &hosts),
            _ => Ok(own_claim(f, vm, f.evaluate(&place.request, &place.selection(), &hosts)?)),
        })
        .map_err(ApiError::Unplaceable)
    })
    .await;
    match asked {
        Ok(e) => Ok(Asked::Evaluated(e)),
        Err(ApiError::Unplaceable(r)) => Ok(Asked::Refused(format!("numaplace {}: {r}", r.reason.code()))),
        Err(e) => Err(e),
    }
}

/// The evaluation of a pod recreated under the name of a claim kept for
/// another pod (another UID): names are unique in a namespace, so that
/// pod is gone, and bind frees its claim before claiming afresh. So the
/// pod is judged as if the claim were freed already (on a copy of the
/// fleet; nothing is changed here), and the claim's node is no first
/// choice of its.
fn without_stale_claim(fleet: &Fleet, place: &Place, hosts: &[String]) -> Result<Evaluation, Rejection> {
    let vm = place.request.name.as_str();
    let mut freed = fleet.clone();
    if let Some(host) = fleet.host_of(vm).and_then(|h| fleet.host(h)) {
        let _ = freed.unplace(&host.name, host.generation, vm);
        tracing::info!(vm = %vm, host = %host.name, "a claim kept for another pod of this name: judged as freed");
    }
    freed.evaluate(&place.request, &place.selection(), hosts)
}

/// The evaluation with the pod's own kept claim counted as its own. A
/// claim under the pod's VM key (`NS.NAME`) made for this pod (its UID;
/// or for no recorded pod) is one an earlier bind made and kept when its
/// Binding's outcome was unknown; the scheduler's retry
/// of that pod must not find the node refused for the pod's own CPUs. So
/// the host holding it, when asked, fits at the claim's cost and is the
/// one chosen: filter passes it, prioritize scores it 10, and a bind there
/// completes the Binding on the claim. The other hosts keep their own
/// verdicts: a bind to one of them moves the claim in one transaction
/// (see [`bind`]), so the pod never holds two.
fn own_claim(fleet: &Fleet, vm: &str, mut e: Evaluation) -> Evaluation {
    let Some(host) = fleet.host_of(vm).and_then(|h| fleet.host(h)) else { return e };
    let Some(claim) = host.state.placement(vm) else { return e };
    let cost = numaplace_plan::cost_of(&host.state, claim);
    let mut asked = false;
    for v in e.verdicts.iter_mut().filter(|v| v.host == host.name) {
        v.verdict = Verdict::Fits { cost, generation: host.generation };
        asked = true;
    }
    if asked {
        tracing::info!(vm = %vm, host = %host.name, "the pod's own claim is kept there: that node is its first choice");
        e.chosen = Some(host.name.clone());
    }
    e
}

/// `POST /v1/k8s/filter`: `ExtenderArgs` in, `ExtenderFilterResult` out.
/// Every node refused is `FailedAndUnresolvableNodes`: the CPUs and memory
/// a node lacks are held by numaplace's placements, which preempting pods
/// does not release, so the scheduler must not evict pods hoping it would.
/// A request refused whatever the node fails every node so, with the
/// reason, rather than the whole call: the scheduler then says why the pod
/// is pending.
pub(crate) async fn k8s_filter(State(st): State<AppState>, body: Bytes) -> Result<Response, ApiError> {
    let (pod, names, nodes) = read_args(&body)?;
    let sent_names = nodes.is_none();
    let mut result = ExtenderFilterResult::default();
    let mut passed = Vec::new();
    match ask(&st, &pod, &names).await? {
        Asked::Evaluated(evaluation) => {
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
        Asked::Refused(why) => {
            result.failed_and_unresolvable_nodes = names.iter().map(|n| (n.clone(), why.clone())).collect();
        }
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
    let (pod, names, _) = read_args(&body)?;
    let list: Vec<HostPriority> = match ask(&st, &pod, &names).await? {
        Asked::Evaluated(e) => {
            let scores = numaplace_fleet::scores(&e.verdicts, e.chosen.as_deref());
            e.verdicts
                .iter()
                .zip(scores)
                .map(|(v, s)| HostPriority { host: v.host.clone(), score: i64::from(s) })
                .collect()
        }
        Asked::Refused(_) => names.iter().map(|n| HostPriority { host: n.clone(), score: 0 }).collect(),
    };
    Ok(json(&list))
}

/// `POST /v1/k8s/bind`: `ExtenderBindingArgs` in, `ExtenderBindingResult`
/// out, its `Error` empty when the pod is bound and the claim made. Every
/// outcome is answered 200 with `Error` saying it, as the scheduler reads
/// it; only a body that is not `ExtenderBindingArgs` is 400.
pub(crate) async fn k8s_bind(State(st): State<AppState>, body: Bytes) -> Result<Response, ApiError> {
    let args: ExtenderBindingArgs =
        serde_json::from_slice(&body).map_err(|e| ApiError::BadRequest(format!("ExtenderBindingArgs: {e}")))?;
    let ns = if args.pod_namespace.is_empty() { "default" } else { args.pod_namespace.as_str() };
    check_name("ExtenderBindingArgs.PodNamespace", ns)
        .and_then(|()| check_name("ExtenderBindingArgs.PodName", &args.pod_name))
        .and_then(|()| check_name("ExtenderBindingArgs.Node", &args.node))
        .map_err(ApiError::BadRequest)?;
    let error = match bind(&st, &args, ns).await {
        Ok(vm) => {
            tracing::info!(pod = %format!("{ns}/{}", args.pod_name), node = %args.node, vm = %vm, "bound");
            String::new()
        }
        Err(why) => {
            tracing::warn!(pod = %format!("{ns}/{}", args.pod_name), node = %args.node, "not bound: {why}");
            why
        }
    };
    Ok(json(&ExtenderBindingResult { error }))
}

/// Claims the pod's placement on the node (through the service's place,
/// all or nothing, store conflicts retried there), then creates the
/// Binding. The VM's name when bound; else why not, and what became of
/// the claim. A claim kept for another pod of the name (another UID) is
/// freed first: the API shows the name is another pod's now, and names
/// are unique in a namespace, so that pod is gone.
async fn bind(st: &AppState, args: &ExtenderBindingArgs, ns: &str) -> Result<String, String> {
    let kube = st.kube.clone().ok_or_else(|| {
        "numaplace serve was started without --kube-api: bind creates the pod's Binding through the Kubernetes API \
         (give --kube-api, or leave bindVerb out of the extender's configuration)"
            .to_string()
    })?;
    let pod_name = args.pod_name.clone();
    let pod = {
        let (n, p) = (ns.to_string(), pod_name.clone());
        kube_call(&kube, move |k| k.pod(&n, &p)).await.map_err(|e| format!("reading pod {ns}/{pod_name}: {e}"))?
    };
    let (held, released) = release_stale(st, &pod).await?;
    if !args.pod_uid.is_empty() && pod.metadata.uid != args.pod_uid {
        return Err(format!(
            "pod {ns}/{pod_name} is UID {}, not {}: it was recreated; nothing claimed for {}; {held}",
            pod.metadata.uid, args.pod_uid, args.pod_uid
        ));
    }
    // Any refusal below also says the stale claim was freed (its own
    // words say what became of the pod's claim).
    claim_and_bind(st, &kube, &pod, &args.node).await.map_err(|e| if released { format!("{e}; {held}") } else { e })
}

/// Frees a claim under the pod's name kept for another pod (another
/// UID), in one generation-checked write that frees it only while it is
/// still held for that pod. What is held under the name afterwards, in
/// words, and whether a stale claim was freed; `Err` when it could not
/// be (nothing else done).
async fn release_stale(st: &AppState, pod: &Pod) -> Result<(String, bool), String> {
    let vm = pod.vm_name();
    let uid = pod.metadata.uid.clone();
    let v = vm.clone();
    let held = blocking(st, move |s| s.holder(&v))
        .await
        .map_err(|e| format!("reading the claim of {vm}: {e}; nothing claimed"))?;
    let (host, owner) = match held {
        None => return Ok((format!("no claim is held as {vm}"), false)),
        Some((host, Some(owner))) if !uid.is_empty() && owner != uid => (host, owner),
        Some((host, Some(owner))) => {
            return Ok((format!("the claim of {vm} on {host}, made for UID {owner}, is kept"), false));
        }
        Some((host, None)) => {
            return Ok((format!("the claim of {vm} on {host} (made for no recorded pod) is kept"), false));
        }
    };
    let (v, o) = (vm.clone(), owner.clone());
    match blocking(st, move |s| s.release_owned(&v, &o)).await {
        Ok(true) => {
            tracing::info!(vm = %vm, host = %host, owner = %owner, uid = %uid, "freed the claim kept for a pod that is gone");
            let said = format!(
                "the claim of {vm} on {host}, kept for UID {owner} (gone: the name is UID {uid}'s now), was released"
            );
            Ok((said, true))
        }
        Ok(false) => {
            Ok((format!("the claim of {vm} on {host}, kept for UID {owner}, was freed or changed meanwhile"), false))
        }
        Err(ApiError::OutcomeUnknown) => Err(format!(
            "outcome unknown: the release of the claim of {vm} on {host}, kept for UID {owner} (gone: the name is \
             UID {uid}'s now), was sent to the database and not confirmed; nothing claimed for UID {uid} (read GET \
             /v1/placements/{vm} before retrying)"
        )),
        Err(e) => Err(format!(
            "numaplace claims nothing for {vm}: the claim of {vm} on {host} is kept for UID {owner}, whose pod is \
             gone (the name is UID {uid}'s now), and freeing it failed ({e}); it is still held"
        )),
    }
}

/// Claims the pod's placement on `node` and creates its Binding (see
/// [`bind`]).
async fn claim_and_bind(st: &AppState, kube: &Arc<KubeClient>, pod: &Pod, node: &str) -> Result<String, String> {
    let (ns, pod_name, node) = (pod.namespace().to_string(), pod.metadata.name.clone(), node.to_string());
    let pod_ns = ns.clone();
    let kube = kube.clone();
    let request = match pod_request(st, pod).await {
        Ok(Ok(r)) => r,
        Ok(Err(why)) => return Err(format!("{why}; nothing claimed")),
        Err(e) => return Err(format!("{e}; nothing claimed")),
    };
    let vm = request.name.clone();
    let mut place = Place { request, constraints: Default::default(), group: None, dry_run: false };
    place.constraints.hosts = vec![node.clone()];
    let owner = pod.metadata.uid.clone();
    let placed = blocking(st, move |s| if owner.is_empty() { s.place(&place) } else { s.place_for(&place, &owner) });
    match placed.await {
        Ok(_) => {}
        // A bind sent again (its answer lost): the claim is there already.
        Err(ApiError::Conflict(Conflict::AlreadyPlaced { host: Some(h), .. })) if h == node => {}
        // A claim an earlier bind left on another node (its Binding's
        // outcome unknown, then the scheduler chose again): the pod is
        // bound nowhere, so the claim moves, in one transaction.
        Err(ApiError::Conflict(Conflict::AlreadyPlaced { host: Some(h), .. })) if pod.spec.node_name.is_empty() => {
            let mv = Move { vm: vm.clone(), hosts: vec![node.clone()], ..Move::default() };
            if let Err(e) = blocking(st, move |s| s.move_vm(&mv)).await {
                return Err(format!("numaplace cannot move the claim of {vm} from {h} to {node}: {e}"));
            }
        }
        // Bound already (an earlier Binding landed, its answer lost): the
        // claim stays where the pod runs.
        Err(ApiError::Conflict(Conflict::AlreadyPlaced { host: Some(h), .. })) => {
            return Err(format!(
                "numaplace claims nothing for {vm} on {node}: its claim is held on {h} and pod {ns}/{pod_name} reads \
                 bound to {}; nothing moved",
                pod.spec.node_name
            ));
        }
        Err(ApiError::OutcomeUnknown) => {
            return Err(format!(
                "outcome unknown: the claim of {vm} on {node} was sent to the database and not confirmed; \
                 the pod was not bound (read GET /v1/placements/{vm} before retrying)"
            ));
        }
        Err(e) => return Err(format!("numaplace claims nothing for {vm} on {node}: {e}")),
    }
    let uid = pod.metadata.uid.clone();
    let (n, p, nd) = (pod_ns.clone(), pod_name.clone(), node.clone());
    let failure = match kube_call(&kube, move |k| k.bind(&n, &p, &uid, &nd)).await {
        Ok(()) => return Ok(vm),
        Err(KubeError::Unknown(why)) => {
            return Err(format!(
                "outcome unknown: the Binding of {ns}/{pod_name} to {node} was sent and not answered ({why}); \
                 the claim of {vm} on {node} is kept: if the pod is not bound there, free it with \
                 DELETE /v1/placements/{vm}"
            ));
        }
        Err(e) => e,
    };
    // Already bound (409): to this node, a bind sent again; elsewhere, not ours.
    if let KubeError::Status { status: 409, .. } = failure {
        let (n, p) = (pod_ns.clone(), pod_name.clone());
        if kube_call(&kube, move |k| k.pod(&n, &p)).await.is_ok_and(|p| p.spec.node_name == node) {
            return Ok(vm);
        }
    }
    let freed = vm.clone();
    match blocking(st, move |s| s.delete(&Delete { vm: freed })).await {
        Ok(()) => Err(format!("binding {ns}/{pod_name} to {node} failed: {failure}; the claim of {vm} was released")),
        Err(e) => Err(format!(
            "binding {ns}/{pod_name} to {node} failed: {failure}; releasing the claim of {vm} failed too ({e}): \
             free it with DELETE /v1/placements/{vm}"
        )),
    }
}
