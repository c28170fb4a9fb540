//! The service without HTTP, on an in-memory SQLite store: what hostile
//! bodies get (a 4xx kind of error naming the field, never a panic or an
//! internal error), and that a decision made on a stale cache is remade,
//! never double-booked.
#![allow(clippy::unwrap_used)]

use numaplace_server::command::{Delete, Move, Patch, Place, Register, RemoveHost, Report, Reserve};
use numaplace_server::error::{Conflict, NOT_PLACED_HERE, PINNED_CPU};
use numaplace_server::service::{Placed, Service};
use numaplace_server::ApiError;
use numaplace_store::{Changes, Expect, HostChange, HostRow, PlacementRow, Store, StoreError};
use numaplace_wire::fleet::HostDoc;
use proptest::prelude::*;

fn corona() -> Vec<u8> {
    std::fs::read(format!("{}/../../fixtures/topologies/mpibind/epyc-corona.xml", env!("CARGO_MANIFEST_DIR"))).unwrap()
}

/// How a host is registered in these tests: the upload and the query's
/// values, read into the command as `PUT /v1/hosts/{name}` reads them.
#[derive(Clone, Default)]
struct HostUpload {
    body: Vec<u8>,
    reserved_cpus: Option<String>,
    shared_cpus: Option<String>,
    reserved_memory: Option<String>,
    labels: Option<String>,
}

trait Calls {
    fn put_upload(&self, name: &str, up: HostUpload) -> Result<(HostDoc, bool), ApiError>;
    fn place_json(&self, body: &[u8], dry_run: bool) -> Result<Placed, ApiError>;
    fn move_json(&self, vm: &str, body: &[u8], dry_run: bool) -> Result<Placed, ApiError>;
    fn report_json(&self, host: &str, body: &[u8]) -> Result<numaplace_wire::fleet::DomainsAnswerDoc, ApiError>;
}

impl Calls for Service {
    fn put_upload(&self, name: &str, up: HostUpload) -> Result<(HostDoc, bool), ApiError> {
        let reserve = Reserve {
            reserved_cpus: up.reserved_cpus,
            shared_cpus: up.shared_cpus,
            reserved_memory: up.reserved_memory,
        };
        self.put_host(Register::from_upload(name.to_string(), up.body, reserve, up.labels.as_deref())?)
    }
    fn place_json(&self, body: &[u8], dry_run: bool) -> Result<Placed, ApiError> {
        self.place(&Place::from_json(body, dry_run)?)
    }
    fn move_json(&self, vm: &str, body: &[u8], dry_run: bool) -> Result<Placed, ApiError> {
        self.move_vm(&Move::from_json(vm.to_string(), body, dry_run)?)
    }
    fn report_json(&self, host: &str, body: &[u8]) -> Result<numaplace_wire::fleet::DomainsAnswerDoc, ApiError> {
        self.report_domains(&Report::from_json(host.to_string(), body)?)
    }
}

fn service() -> Service {
    let svc = Service::new(numaplace_store::open("sqlite::memory:").unwrap(), 1, 1).unwrap();
    svc.put_upload("h1", HostUpload { body: corona(), ..Default::default() }).unwrap();
    svc
}

fn is_client_error(e: &ApiError) -> bool {
    matches!(e, ApiError::BadRequest(_) | ApiError::Unplaceable(_) | ApiError::NoHost(_) | ApiError::Conflict(_))
}

/// A fresh directory for one test's SQLite file, and the file's `--db` URL
/// with the fixture corona host registered as `h1`.
fn database(name: &str) -> (std::path::PathBuf, String) {
    let dir = std::env::temp_dir().join(format!("numaplace-service-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let db = format!("sqlite:{}", dir.join("f.db").display());
    let setup = Service::new(numaplace_store::open(&db).unwrap(), 1, 1).unwrap();
    setup.put_upload("h1", HostUpload { body: corona(), ..Default::default() }).unwrap();
    (dir, db)
}

/// A registration resolves its reservations as the CLI does
/// (`numaplace_wire::profile::resolve`): each query value over the body's
/// `reserved`, the rest of the body's kept, every CPU checked against the
/// host, a refusal naming the parameter.
#[test]
fn a_registration_resolves_its_reservations_as_the_cli_does() {
    let svc = service();
    let topology = numaplace_read::read_bytes("corona", corona()).unwrap().topology;
    let mut doc: serde_json::Value = serde_json::from_str(&numaplace_read::json::to_string(&topology)).unwrap();
    doc["reserved"] = serde_json::json!({"cpus": [0], "shared_cpus": [1, 49], "memory_per_node": 1024});
    let body = doc.to_string().into_bytes();
    let up = |cpus: Option<&str>, shared: Option<&str>| HostUpload {
        body: body.clone(),
        reserved_cpus: cpus.map(str::to_string),
        shared_cpus: shared.map(str::to_string),
        ..Default::default()
    };
    let (host, _) = svc.put_upload("r1", up(Some("48"), None)).unwrap();
    let reserved = host.reserved.expect("reserved");
    assert_eq!(reserved.cpus, vec![48], "the query's CPUs over the body's");
    assert_eq!(reserved.shared_cpus, vec![1, 49], "the body's pool kept");
    assert_eq!(reserved.memory_per_node, 1024);
    let (host, _) = svc.put_upload("r2", up(None, None)).unwrap();
    assert_eq!(host.reserved.expect("reserved").cpus, vec![0], "the body's own");
    let message = |e: ApiError| match e {
        ApiError::BadRequest(m) => m,
        other => panic!("{other:?}"),
    };
    let e = message(svc.put_upload("r3", up(Some("0,200"), None)).unwrap_err());
    assert!(e.starts_with("reserved_cpus: expected CPUs this host has online"), "{e}");
    let e = message(svc.put_upload("r3", up(None, Some("0"))).unwrap_err());
    assert!(e.contains("shared_cpus: expected CPUs not also reserved by r3: reserved.cpus"), "{e}");
    let e = message(svc.put_upload("r3", up(Some("x"), None)).unwrap_err());
    assert_eq!(e, "reserved_cpus: expected a CPU list such as 0-1,32-33, found \"x\"");
}

#[test]
fn two_caches_on_one_database_remake_stale_decisions() {
    let (dir, db) = database("caches");
    let a = Service::new(numaplace_store::open(&db).unwrap(), 1, 1).unwrap();
    let b = Service::new(numaplace_store::open(&db).unwrap(), 1, 1).unwrap();
    // Both caches see an empty host; each decides the same best PUs.
    let x = a.place_json(br#"{"name":"x","vcpus":8,"memory":"8GiB"}"#, false).unwrap();
    let y = b.place_json(br#"{"name":"y","vcpus":8,"memory":"8GiB"}"#, false).unwrap();
    let pins = |p: &Placed| p.doc.placement.pins.clone();
    assert!(pins(&x).iter().all(|p| !pins(&y).contains(p)), "{:?} {:?}", pins(&x), pins(&y));
    let _ = std::fs::remove_dir_all(dir);
}

/// A hook of [`Hooked`]: runs on the database under test before a call,
/// and answers an error to fail the call as a lost race does.
type Hook<T> = Box<dyn Fn(&dyn Store, &T) -> Result<(), StoreError> + Send + Sync>;

/// The database under test with what another writer does just before a
/// guarded host write or a commit of this one: the races the service
/// must lose without double-booking.
struct Hooked {
    inner: Box<dyn Store>,
    before_put: Hook<HostRow>,
    before_commit: Hook<[HostChange]>,
    /// When set, reading the changes since a watermark fails (a replica
    /// that cannot read what it missed), while `ping` still answers.
    behind: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

impl Hooked {
    fn new(inner: Box<dyn Store>) -> Hooked {
        Hooked {
            inner,
            before_put: Box::new(|_, _| Ok(())),
            before_commit: Box::new(|_, _| Ok(())),
            behind: Default::default(),
        }
    }
}

impl Store for Hooked {
    fn put_host_if(&self, host: &HostRow, expect: Expect) -> Result<i64, StoreError> {
        (self.before_put)(self.inner.as_ref(), host)?;
        self.inner.put_host_if(host, expect)
    }
    fn set_drained(&self, name: &str, drained: bool) -> Result<i64, StoreError> {
        self.inner.set_drained(name, drained)
    }
    fn remove_host(&self, name: &str, force: bool) -> Result<numaplace_store::Removed, StoreError> {
        self.inner.remove_host(name, force)
    }
    fn host(&self, name: &str) -> Result<Option<HostRow>, StoreError> {
        self.inner.host(name)
    }
    fn hosts(&self) -> Result<Vec<HostRow>, StoreError> {
        self.inner.hosts()
    }
    fn placements(&self, host: Option<&str>) -> Result<Vec<PlacementRow>, StoreError> {
        self.inner.placements(host)
    }
    fn placement(&self, vm: &str) -> Result<Option<PlacementRow>, StoreError> {
        self.inner.placement(vm)
    }
    fn claims(&self) -> Result<Vec<(String, u32, String)>, StoreError> {
        self.inner.claims()
    }
    fn commit_answered(
        &self,
        changes: &[HostChange],
        answer: Option<&numaplace_store::Answer>,
    ) -> Result<(), StoreError> {
        (self.before_commit)(self.inner.as_ref(), changes)?;
        self.inner.commit_answered(changes, answer)
    }
    fn answer(&self, key: &str) -> Result<Option<numaplace_store::Answer>, StoreError> {
        self.inner.answer(key)
    }
    fn changed_since(&self, since: i64) -> Result<Changes, StoreError> {
        if self.behind.load(std::sync::atomic::Ordering::SeqCst) {
            return Err(StoreError::TimedOut("reading the changes took longer than the deadline".into()));
        }
        self.inner.changed_since(since)
    }
}

/// Issue 46: ready means the store answers and this server has read what
/// other servers changed meanwhile; a replica still catching up (here,
/// one whose read of the changes times out while the database answers a
/// ping) is not ready, and is again once it has caught up.
#[test]
fn a_replica_that_has_not_caught_up_with_the_store_is_not_ready() {
    let (dir, db) = database("ready");
    let store = Hooked::new(numaplace_store::open(&db).unwrap());
    let behind = store.behind.clone();
    let svc = Service::new(Box::new(store), 1, 1).unwrap();
    assert!(svc.ready().is_ok());
    behind.store(true, std::sync::atomic::Ordering::SeqCst);
    assert!(svc.ready().is_err(), "ready while the changes it missed cannot be read");
    behind.store(false, std::sync::atomic::Ordering::SeqCst);
    assert!(svc.ready().is_ok());
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn a_host_update_is_checked_against_a_placement_made_while_it_was_checked() {
    let (dir, db) = database("race");
    let setup = Service::new(numaplace_store::open(&db).unwrap(), 1, 1).unwrap();
    let other = Service::new(numaplace_store::open(&db).unwrap(), 1, 1).unwrap();
    // Another scheduler places a VM on the host just before the first
    // guarded host write, as a race would.
    let other = std::sync::Mutex::new(Some(other));
    let mut store = Hooked::new(numaplace_store::open(&db).unwrap());
    store.before_put = Box::new(move |_, _| {
        if let Some(other) = other.lock().unwrap().take() {
            other.place_json(br#"{"name":"x","vcpus":8,"memory":"8GiB"}"#, false).unwrap();
        }
        Ok(())
    });
    let svc = Service::new(Box::new(store), 1, 1).unwrap();
    // A smaller machine (2 nodes, 32 threads) fits the empty host, so the
    // first check passes; x arrives before the write, on threads the
    // smaller machine does not have.
    let small = std::fs::read(format!(
        "{}/../../fixtures/topologies/hwloc/xml/32em64t-2n8c2t-pci-normalio.xml",
        env!("CARGO_MANIFEST_DIR")
    ))
    .unwrap();
    let shrink = HostUpload { body: small, ..Default::default() };
    match svc.put_upload("h1", shrink) {
        Err(ApiError::Conflict(Conflict::DoesNotFit { host, vm, .. })) => {
            assert_eq!((host.as_str(), vm.as_str()), ("h1", "x"));
        }
        other => panic!("the update must see x and refuse: {other:?}"),
    }
    // x kept its place and the host its description.
    assert!(setup.placement("x").is_ok());
    assert_eq!(setup.host("h1").unwrap().host.kind, "2p/8n/48c/96t/255GiB");
    let _ = std::fs::remove_dir_all(dir);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn hostile_placement_bodies_are_refused_not_crashed(bytes in prop::collection::vec(any::<u8>(), 0..256)) {
        let svc = service();
        if let Err(e) = svc.place_json(&bytes, true) {
            prop_assert!(is_client_error(&e), "{e:?}");
        }
    }

    #[test]
    fn hostile_request_fields_are_refused_not_crashed(
        key in prop::sample::select(vec!["vcpus", "memory", "max_nodes", "overcommit", "hugepages", "cells", "max_vcpus", "constraints", "name"]),
        value in prop::sample::select(vec![
            "18446744073709551615", "-1", "1e308", "\"99999999999TiB\"", "null", "[]", "{}", "\"\"", "4294967296",
            "{\"hosts\": 5}", "{\"anti_affinity\": 1}", "\"16EiB\"", "0",
        ]),
    ) {
        let svc = service();
        let body = format!("{{\"name\":\"v\",\"vcpus\":2,\"memory\":\"2GiB\",\"{key}\":{value}}}");
        if let Err(e) = svc.place_json(body.as_bytes(), false) {
            prop_assert!(is_client_error(&e), "{body}: {e:?}");
        }
    }

    #[test]
    fn hostile_host_uploads_are_refused_not_crashed(
        bytes in prop::collection::vec(any::<u8>(), 0..256),
        reserved in prop::option::of("[0-9,x-]{0,12}"),
        labels in prop::option::of("[a-z=,]{0,12}"),
        memory in prop::option::of(prop::sample::select(vec!["2GiB", "18446744073709551615", "-1", "x"])),
    ) {
        let svc = service();
        let up = HostUpload {
            body: bytes,
            reserved_cpus: reserved,
            shared_cpus: None,
            reserved_memory: memory.map(str::to_string),
            labels,
        };
        if let Err(e) = svc.put_upload("h2", up) {
            prop_assert!(is_client_error(&e), "{e:?}");
        }
    }
}

fn code_of(e: ApiError) -> (&'static str, String) {
    match e {
        ApiError::Conflict(c) => (c.code(), c.to_string()),
        ApiError::BadRequest(m) => ("bad-request", m),
        other => panic!("expected a conflict or a bad request, not {other:?}"),
    }
}

/// An agent restarting re-registers its topology with no labels and no
/// reservations in the query: what the operator set stays. A value given
/// replaces it; an empty `labels` clears them.
#[test]
fn a_re_registration_keeps_what_it_does_not_give() {
    let svc = service();
    let up = |labels: Option<&str>, cpus: Option<&str>| HostUpload {
        body: corona(),
        labels: labels.map(str::to_string),
        reserved_cpus: cpus.map(str::to_string),
        ..Default::default()
    };
    svc.put_upload("h1", up(Some("rack=r7"), Some("0,48"))).unwrap();
    let (host, created) = svc.put_upload("h1", up(None, None)).unwrap();
    assert!(!created);
    assert_eq!(host.labels.get("rack").map(String::as_str), Some("r7"));
    assert_eq!(host.reserved.expect("kept").cpus, vec![0, 48]);
    let (host, _) = svc.put_upload("h1", up(Some(""), Some("1"))).unwrap();
    assert!(host.labels.is_empty(), "an empty labels clears them");
    assert_eq!(host.reserved.expect("replaced").cpus, vec![1]);
}

/// `PATCH` changes the fields it gives and keeps the others; a
/// reservation over a CPU a VM is pinned on is refused naming the VM by
/// `PATCH`, and nothing changes; a registration (`PUT`, the agent's, from
/// its host profile) records it, and the next report names the VM in the
/// way (a warning, as lint words it).
#[test]
fn a_patch_changes_only_what_it_gives_and_never_reserves_a_pinned_cpu() {
    use numaplace_wire::fleet::HostPatchDoc;
    let svc = service();
    svc.put_upload("h1", HostUpload { body: corona(), reserved_memory: Some("1GiB".into()), ..Default::default() })
        .unwrap();
    let labels = [("rack".to_string(), "r7".to_string())].into_iter().collect();
    let patch = |doc: HostPatchDoc| Patch::from_doc("h1".to_string(), doc).unwrap();
    let host = svc.patch_host(patch(HostPatchDoc { labels: Some(labels), ..Default::default() })).unwrap();
    assert_eq!(host.labels.get("rack").map(String::as_str), Some("r7"));
    assert_eq!(host.reserved.as_ref().expect("kept").memory_per_node, 1 << 30, "the reservation kept");
    let placed = svc.place_json(br#"{"name":"p","vcpus":2,"memory":"1GiB"}"#, false).unwrap();
    let pu = placed.doc.placement.pins[0];
    let pinned = HostPatchDoc { reserved_cpus: Some(pu.to_string()), ..Default::default() };
    let (code, message) = code_of(svc.patch_host(patch(pinned)).unwrap_err());
    assert_eq!(code, PINNED_CPU);
    assert!(message.contains("VM p") && message.contains(&format!("CPU {pu} ")), "{message}");
    let host = svc.host("h1").unwrap().host;
    assert_eq!(host.labels.get("rack").map(String::as_str), Some("r7"));
    assert!(host.reserved.expect("kept").cpus.is_empty(), "nothing reserved");
    let put = HostUpload { body: corona(), reserved_cpus: Some(pu.to_string()), ..Default::default() };
    let (host, _) = svc.put_upload("h1", put).unwrap();
    assert_eq!(host.reserved.expect("recorded").cpus, vec![pu]);
    assert_eq!(host.labels.get("rack").map(String::as_str), Some("r7"));
    let report = serde_json::json!({ "domains": [placed.doc.placement] }).to_string();
    let answer = svc.report_json("h1", report.as_bytes()).unwrap();
    let warned: Vec<_> = answer.conflicts.iter().map(|c| (c.code.as_str(), c.message.as_str())).collect();
    assert_eq!(warned.len(), 1, "{warned:?}");
    assert_eq!(warned[0].0, "reserved-cpus");
    assert!(
        warned[0].1.starts_with(&format!("VM p: vCPUs may run on CPU {pu}, which the host reserves")),
        "{warned:?}"
    );
    assert_eq!(answer.failures().count(), 0, "a warning, not a failed round");
    // The VM keeps its CPUs; no other VM is given them.
    let other = svc.place_json(br#"{"name":"n","vcpus":90,"memory":"1GiB"}"#, true).unwrap().doc.placement;
    assert!(other.pins.iter().all(|c| !placed.doc.placement.pins.contains(c)), "{:?}", other.pins);
    assert!(svc.patch_host(Patch::from_doc("nope".to_string(), HostPatchDoc::default()).unwrap()).is_err());
}

/// A VM the agent reported cannot be deleted or moved through the API:
/// its domain still runs there, and freeing its CPUs would double-book
/// them. Its claim ends when the agent reports it gone.
#[test]
fn a_vm_the_agent_reported_is_neither_deleted_nor_moved_through_the_api() {
    let svc = service();
    // A placement document for a domain on h1, then freed: the agent
    // reports it as a domain the service did not place.
    let doc = svc.place_json(br#"{"name":"hand","vcpus":2,"memory":"1GiB"}"#, false).unwrap().doc.placement;
    let pins = doc.pins.clone();
    svc.delete(&Delete { vm: "hand".into() }).unwrap();
    let report = serde_json::json!({ "domains": [doc] }).to_string();
    let answer = svc.report_json("h1", report.as_bytes()).unwrap();
    assert_eq!(answer.recorded, vec!["hand".to_string()]);
    let (code, message) = code_of(svc.delete(&Delete { vm: "hand".into() }).unwrap_err());
    assert_eq!(code, NOT_PLACED_HERE);
    assert!(message.contains("agent"), "{message}");
    assert_eq!(code_of(svc.move_json("hand", b"", false).unwrap_err()).0, NOT_PLACED_HERE);
    // Its CPUs stay taken.
    let other = svc.place_json(br#"{"name":"n","vcpus":94,"memory":"1GiB"}"#, true).unwrap().doc.placement;
    assert!(other.pins.iter().all(|p| !pins.contains(p)), "{:?} over {pins:?}", other.pins);
    // Reported gone: the claim ends.
    svc.report_json("h1", br#"{"domains": []}"#).unwrap();
    assert!(svc.placement("hand").is_err());
}

/// A floating domain the agent reported is counted against a CPU, not
/// pinned there: reserving that CPU is no conflict with it (the refusal
/// used to name the floating VM as pinned, blaming the wrong VM), while a
/// pinned VM's CPU is still refused naming that VM.
#[test]
fn a_reservation_never_blames_a_floating_domain() {
    use numaplace_wire::fleet::HostPatchDoc;
    let svc = service();
    let floating =
        svc.place_json(br#"{"name":"floater","vcpus":1,"memory":"1GiB","cpu":"shared"}"#, true).unwrap().doc.placement;
    let counted = floating.pins[0];
    let report = serde_json::json!({ "domains": [floating] }).to_string();
    assert_eq!(svc.report_json("h1", report.as_bytes()).unwrap().recorded, vec!["floater".to_string()]);
    let pinned = svc.place_json(br#"{"name":"p","vcpus":1,"memory":"1GiB"}"#, false).unwrap().doc.placement.pins[0];
    let patch = |cpus: String| {
        svc.patch_host(
            Patch::from_doc("h1".into(), HostPatchDoc { reserved_cpus: Some(cpus), ..Default::default() }).unwrap(),
        )
    };
    let (code, message) = code_of(patch(format!("{counted},{pinned}")).unwrap_err());
    assert_eq!(code, PINNED_CPU);
    assert!(message.contains("VM p ") && !message.contains("floater"), "{message}");
    assert_eq!(patch(counted.to_string()).unwrap().reserved.expect("reserved").cpus, vec![counted]);
}

/// A service VM whose domain the agent reports pinned elsewhere (live, or
/// in its definition): a `repinned` conflict naming the vCPU and both
/// CPUs, the VM listed to re-pin, and the CPU it runs on held
/// (`p/as-running`, an agent row the API cannot delete) so no decision
/// gives it out; reported as placed again, the hold ends.
#[test]
fn a_service_vm_reported_pinned_elsewhere_holds_where_it_runs() {
    let svc = service();
    let placed = svc.place_json(br#"{"name":"p","vcpus":1,"memory":"1GiB"}"#, false).unwrap().doc.placement;
    let pu = placed.pins[0];
    let moved = if pu == 10 { 11 } else { 10 };
    let mut elsewhere = placed.clone();
    elsewhere.pins = vec![moved];
    elsewhere.vcpus.iter_mut().for_each(|v| v.pu = moved);
    for (report, how) in [
        (serde_json::json!({ "domains": [elsewhere] }), "live"),
        (serde_json::json!({ "domains": [placed], "defined": [elsewhere] }), "defined"),
    ] {
        let answer = svc.report_json("h1", report.to_string().as_bytes()).unwrap();
        assert_eq!(answer.to_repin, vec!["p".to_string()], "{how}");
        assert_eq!(answer.conflicts.len(), 1, "{how}: {:?}", answer.conflicts);
        assert_eq!(answer.conflicts[0].code, "repinned");
        let message = &answer.conflicts[0].message;
        assert!(message.contains(&format!("{how}: vCPU 0 on CPUs {moved}, placed on CPU {pu}")), "{message}");
        assert_eq!(answer.failures().count(), 1, "a failed round");
        let hold = svc.placement("p/as-running").unwrap().0;
        assert_eq!((hold.origin.as_str(), hold.placement.pins.clone()), ("agent", vec![moved]));
        assert_eq!(code_of(svc.delete(&Delete { vm: "p/as-running".into() }).unwrap_err()).0, NOT_PLACED_HERE);
        let other = svc.place_json(br#"{"name":"n","vcpus":94,"memory":"1GiB"}"#, true).unwrap().doc.placement;
        assert!(!other.pins.contains(&moved) && !other.pins.contains(&pu), "{:?}", other.pins);
    }
    let answer = svc.report_json("h1", serde_json::json!({ "domains": [placed] }).to_string().as_bytes()).unwrap();
    assert!(answer.conflicts.is_empty() && answer.to_repin.is_empty(), "{:?}", answer.conflicts);
    assert!(svc.placement("p/as-running").is_err(), "the hold ends");
}

/// Names that are path segments, carry invisible format characters, or
/// run past the cap are refused as VM names and host names.
#[test]
fn path_segments_format_characters_and_long_names_are_refused() {
    let svc = service();
    let long = "v".repeat(254);
    for name in [".", "..", "a/b", "evil\u{202e}gnp", "zero\u{200b}width", long.as_str()] {
        let body = serde_json::json!({"name": name, "vcpus": 1, "memory": "1GiB"}).to_string();
        let e = svc.place_json(body.as_bytes(), true).unwrap_err();
        assert!(matches!(&e, ApiError::BadRequest(m) if m.contains("name:")), "{name:?}: {e:?}");
    }
    let fine = serde_json::json!({"name": "v".repeat(253), "vcpus": 1, "memory": "1GiB"}).to_string();
    assert!(svc.place_json(fine.as_bytes(), true).is_ok());
    for name in [".", ".."] {
        let e = svc.put_upload(name, HostUpload { body: corona(), ..Default::default() }).unwrap_err();
        assert!(matches!(e, ApiError::BadRequest(_)), "{name}");
    }
}

/// A move decides under the constraints the VM was placed with (here its
/// label), not only under the move's own.
#[test]
fn a_move_keeps_the_vms_host_and_label_constraints() {
    let svc = service();
    for (name, rack) in [("a1", "a"), ("a2", "a"), ("b1", "b")] {
        let up = HostUpload { body: corona(), labels: Some(format!("rack={rack}")), ..Default::default() };
        svc.put_upload(name, up).unwrap();
    }
    let placed = svc
        .place_json(br#"{"name":"m","vcpus":4,"memory":"4GiB","constraints":{"labels":{"rack":"a"}}}"#, false)
        .unwrap();
    let first = placed.doc.host.clone();
    assert!(first.starts_with('a'), "{first}");
    let moved = svc.move_json("m", b"", false).unwrap();
    let other = if first == "a1" { "a2" } else { "a1" };
    assert_eq!(moved.doc.host, other, "the move stays on rack a");
    // And back: still rack a, never rack b.
    let again = svc.move_json("m", b"", false).unwrap();
    assert!(again.doc.host.starts_with('a'), "{}", again.doc.host);
    assert!(placed.doc.links.is_some());
    assert!(svc.place_json(br#"{"name":"d","vcpus":1,"memory":"1GiB"}"#, true).unwrap().doc.links.is_none());
}

/// Rejections read as sentences: hosts ruled out by a constraint "lack a
/// required label", a host in use "holds 2 VMs".
#[test]
fn rejections_are_worded_as_sentences() {
    let svc = service();
    svc.put_upload("h2", HostUpload { body: corona(), ..Default::default() }).unwrap();
    let e = svc.place_json(br#"{"name":"l","vcpus":1,"memory":"1GiB","constraints":{"labels":{"rack":"r7"}}}"#, true);
    let message = e.unwrap_err().to_string();
    assert!(message.contains("2 hosts lack a required label (e.g. "), "{message}");
    for vm in ["a", "b"] {
        let body = format!(r#"{{"name":"{vm}","vcpus":1,"memory":"1GiB","constraints":{{"hosts":["h2"]}}}}"#);
        svc.place_json(body.as_bytes(), false).unwrap();
    }
    let message = svc.remove_host(&RemoveHost { host: "h2".into(), force: false }).unwrap_err().to_string();
    assert!(message.contains("host h2 still holds 2 VMs"), "{message}");
}

/// Every change (a placement, a delete, a move, a host's write, an
/// agent's report) is decided again when its commit loses a race, at
/// most `MAX_ATTEMPTS` times through one helper, and then answers 503
/// naming the change, having written nothing.
#[test]
fn every_change_that_keeps_losing_its_race_answers_unavailable_naming_it() {
    use numaplace_server::error::{Change, Unavailable};
    use numaplace_server::service::MAX_ATTEMPTS;
    use numaplace_wire::fleet::HostPatchDoc;
    use std::sync::atomic::Ordering;
    use std::sync::Arc;
    // Once `lose` is set, every commit and guarded host write loses its
    // race, as if another replica always got there first.
    #[derive(Default)]
    struct Beaten {
        lose: std::sync::atomic::AtomicBool,
        tries: std::sync::atomic::AtomicUsize,
    }
    impl Beaten {
        fn check(&self, host: &str) -> Result<(), StoreError> {
            if !self.lose.load(Ordering::SeqCst) {
                return Ok(());
            }
            self.tries.fetch_add(1, Ordering::SeqCst);
            Err(StoreError::Conflict { host: host.to_string() })
        }
    }
    let store = Arc::new(Beaten::default());
    let mut hooked = Hooked::new(numaplace_store::open("sqlite::memory:").unwrap());
    let (put, commit) = (store.clone(), store.clone());
    hooked.before_put = Box::new(move |_, host| put.check(&host.name));
    hooked.before_commit = Box::new(move |_, changes| commit.check(&changes[0].host));
    let svc = Service::new(Box::new(hooked), 1, 1).unwrap();
    svc.put_upload("h1", HostUpload { body: corona(), ..Default::default() }).unwrap();
    svc.put_upload("h2", HostUpload { body: corona(), ..Default::default() }).unwrap();
    let placed = svc.place_json(br#"{"name":"p","vcpus":2,"memory":"1GiB"}"#, false).unwrap();
    store.lose.store(true, Ordering::SeqCst);
    let contended = |e: ApiError| match e {
        ApiError::Unavailable(Unavailable::Contended { change, attempts }) => {
            assert_eq!(attempts, MAX_ATTEMPTS);
            assert_eq!(store.tries.swap(0, Ordering::SeqCst), MAX_ATTEMPTS, "{change:?}: one commit per attempt");
            change
        }
        other => panic!("expected a contended change, not {other:?}"),
    };
    let e = svc.place_json(br#"{"name":"q","vcpus":2,"memory":"1GiB"}"#, false).unwrap_err();
    assert_eq!(e.code(), "unavailable");
    assert_eq!(e.to_string(), format!("placing VM q conflicted with other writers {MAX_ATTEMPTS} times; try again"));
    assert_eq!(contended(e), Change::Place("q".into()));
    assert_eq!(contended(svc.delete(&Delete { vm: "p".into() }).unwrap_err()), Change::Delete("p".into()));
    assert_eq!(contended(svc.move_json("p", b"", false).unwrap_err()), Change::Move("p".into()));
    let labels = HostPatchDoc { labels: Some(Default::default()), ..Default::default() };
    let patch = Patch::from_doc("h1".into(), labels).unwrap();
    assert_eq!(contended(svc.patch_host(patch).unwrap_err()), Change::Host("h1".into()));
    assert_eq!(contended(svc.report_json("h2", br#"{"domains": []}"#).unwrap_err()), Change::Report("h2".into()));
    // Nothing was written: p is where it was placed, q nowhere.
    store.lose.store(false, Ordering::SeqCst);
    assert_eq!(svc.placement("p").unwrap().0.host, placed.doc.host);
    assert!(matches!(svc.placement("q"), Err(ApiError::NotFound(_))));
}

/// The database under test where another writer touches host h1 (a drain
/// flag set to what it is: a new generation, the same room) just before
/// the first commit, so that commit conflicts.
fn commit_racer(db: &str) -> Hooked {
    let raced = std::sync::atomic::AtomicBool::new(false);
    let mut store = Hooked::new(numaplace_store::open(db).unwrap());
    store.before_commit = Box::new(move |inner, _| {
        if !raced.swap(true, std::sync::atomic::Ordering::Relaxed) {
            inner.set_drained("h1", false)?;
        }
        Ok(())
    });
    store
}

/// The remake after a conflict leaves out the host that conflicted (the
/// replica that won it ranks hosts the same way and will likely take it
/// again), though that host is still the best; the conflict is counted in
/// the conflict ratio `/metrics` shows.
#[test]
fn the_remake_after_a_conflict_leaves_the_conflicted_host_out() {
    let (dir, db) = database("remake");
    let setup = Service::new(numaplace_store::open(&db).unwrap(), 1, 1).unwrap();
    setup.put_host(Register::from_upload("h2".into(), corona(), Reserve::default(), None).unwrap()).unwrap();
    let svc = Service::new(Box::new(commit_racer(&db)), 1, 1).unwrap();
    let placed = svc.place(&Place::from_json(br#"{"name":"x","vcpus":8,"memory":"8GiB"}"#, false).unwrap()).unwrap();
    assert_eq!(placed.doc.host, "h2", "h1 (first by name among equals) conflicted and was left out");
    assert_eq!((svc.metrics.conflicts(), svc.metrics.claims()), (1, 2));
    let text = svc.with_fleet(|f| svc.metrics.render(f));
    assert!(text.contains("\nnumaplace_claim_conflict_ratio 0.500000\n"), "{text}");
    // When only the conflicted host can take the VM, it is chosen again.
    let svc = Service::new(Box::new(commit_racer(&db)), 1, 1).unwrap();
    let only_h1 = br#"{"name":"y","vcpus":8,"memory":"8GiB","constraints":{"hosts":["h1"]}}"#;
    assert_eq!(svc.place(&Place::from_json(only_h1, false).unwrap()).unwrap().doc.host, "h1");
    let _ = std::fs::remove_dir_all(dir);
}

/// A move's remake leaves out the destination whose claim conflicted, as
/// a placement's does (the one retry helper carries the conflicted hosts).
#[test]
fn a_moves_remake_after_a_conflict_leaves_the_conflicted_host_out() {
    let dir = std::env::temp_dir().join(format!("numaplace-service-move-remake-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let db = format!("sqlite:{}", dir.join("f.db").display());
    let setup = Service::new(numaplace_store::open(&db).unwrap(), 1, 1).unwrap();
    let register = |h: &str| {
        setup.put_host(Register::from_upload(h.into(), corona(), Reserve::default(), None).unwrap()).unwrap();
    };
    // x is placed on h3 while it is the only host (so its request rules
    // out no other host), then h1 and h2 come.
    register("h3");
    setup.place(&Place::from_json(br#"{"name":"x","vcpus":8,"memory":"8GiB"}"#, false).unwrap()).unwrap();
    register("h1");
    register("h2");
    // h2 a little fuller: h1 is the best destination, alone.
    let filler = br#"{"name":"filler","vcpus":2,"memory":"2GiB","constraints":{"hosts":["h2"]}}"#;
    setup.place(&Place::from_json(filler, false).unwrap()).unwrap();
    // Each of the 32 seeds varies the remake's random pick among the two
    // best hosts (a retry looks wider); h1 conflicts every time.
    for seed in (1..=32u64).map(|n| n.wrapping_mul(0x9E37_79B9_7F4A_7C15)) {
        let svc = Service::new(Box::new(commit_racer(&db)), 1, seed).unwrap();
        let moved = svc.move_vm(&Move::from_json("x".into(), b"", false).unwrap()).unwrap();
        assert_eq!(moved.doc.host, "h2", "seed {seed}: h1, the best, conflicted and was left out");
        assert_eq!((svc.metrics.conflicts(), svc.metrics.claims()), (1, 2));
        // Back to h3 for the next seed.
        let back = br#"{"hosts":["h3"]}"#;
        assert_eq!(setup.move_vm(&Move::from_json("x".into(), back, false).unwrap()).unwrap().doc.host, "h3");
    }
    let _ = std::fs::remove_dir_all(dir);
}

/// A claim is committed after the claim lock is released, so the next
/// decision may be made on a cache holding it uncommitted. Such a decision
/// reaches the database only once the claim under it committed: here that
/// claim (p) loses its race to another server's placement (x), and the
/// decision made on top of it (q) is remade without ever being sent, since
/// its host's next generation is now x's, not p's: sent, it would have
/// matched x's generation and been written on a host it was not decided
/// for. All three end placed, no CPU twice.
#[test]
fn a_claim_decided_on_an_uncommitted_one_that_fails_is_never_sent() {
    use std::sync::{Arc, Condvar, Mutex};
    let dir = std::env::temp_dir().join(format!("numaplace-service-chain-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let db = format!("sqlite:{}", dir.join("f.db").display());
    let other = Service::new(numaplace_store::open(&db).unwrap(), 1, 1).unwrap();
    other.put_upload("h1", HostUpload { body: corona(), ..Default::default() }).unwrap();
    // (commits that reached the store: each VM and whether `go` was given
    // then; whether p's first commit is in the hook; whether it may go on)
    #[derive(Default)]
    struct Gate {
        sent: Vec<(String, bool)>,
        p_waiting: bool,
        go: bool,
    }
    let gate = Arc::new((Mutex::new(Gate::default()), Condvar::new()));
    let mut hooked = Hooked::new(numaplace_store::open(&db).unwrap());
    let hook = gate.clone();
    hooked.before_commit = Box::new(move |_, changes| {
        let vm = changes[0].add.first().map_or(String::new(), |p| p.vm.clone());
        let (lock, cv) = &*hook;
        let mut g = lock.lock().unwrap();
        let first_p = vm == "p" && !g.sent.iter().any(|(v, _)| v == "p");
        let go = g.go;
        g.sent.push((vm, go));
        if first_p {
            g.p_waiting = true;
            cv.notify_all();
            while !g.go {
                g = cv.wait(g).unwrap();
            }
        }
        Ok(())
    });
    let svc = Arc::new(Service::new(Box::new(hooked), 1, 1).unwrap());
    let place = |svc: &Arc<Service>, vm: &str| {
        let svc = svc.clone();
        let body = format!(r#"{{"name":"{vm}","vcpus":8,"memory":"8GiB"}}"#);
        std::thread::spawn(move || svc.place_json(body.as_bytes(), false).map(|p| p.doc.host))
    };
    let p = place(&svc, "p");
    {
        let (lock, cv) = &*gate;
        let mut g = lock.lock().unwrap();
        while !g.p_waiting {
            g = cv.wait(g).unwrap();
        }
    }
    // Another server takes h1 meanwhile: p's generation is gone.
    other.place_json(br#"{"name":"x","vcpus":16,"memory":"16GiB"}"#, false).unwrap();
    // q is decided on the cache holding p, and waits for p's outcome.
    let q = place(&svc, "q");
    std::thread::sleep(std::time::Duration::from_millis(300));
    {
        let (lock, cv) = &*gate;
        lock.lock().unwrap().go = true;
        cv.notify_all();
    }
    assert_eq!(p.join().unwrap().unwrap(), "h1");
    assert_eq!(q.join().unwrap().unwrap(), "h1");
    let sent = gate.0.lock().unwrap().sent.clone();
    assert!(sent.iter().all(|(vm, go)| vm != "q" || *go), "q was sent before p's outcome: {sent:?}");
    // (After p's outcome, p's and q's remakes may still conflict with each
    // other once, as the host is read again between them.)
    assert!(sent.iter().filter(|(vm, _)| vm == "p").count() >= 2, "p lost its first race: {sent:?}");
    // Every VM's CPUs, and none twice.
    let claims = numaplace_store::open(&db).unwrap().claims().unwrap();
    let mut pus: Vec<u32> = claims.iter().map(|(_, pu, _)| *pu).collect();
    assert_eq!(pus.len(), 32);
    pus.dedup();
    assert_eq!(pus.len(), 32, "no CPU twice");
    let _ = std::fs::remove_dir_all(dir);
}

/// A decision goes to another host than one this server has a claim in
/// flight on, when another host takes it: a claim decided there would wait
/// for that commit (one server filling its best host chained its claims
/// one commit after another). Here the big host (h1, corona) stays the
/// best after p's 8 vCPUs, and q is answered on the small one while p's
/// commit is held.
#[test]
fn a_decision_passes_over_a_host_with_a_claim_in_flight() {
    use std::sync::mpsc;
    use std::sync::{Arc, Condvar, Mutex};
    let (dir, db) = database("busy");
    let small = std::fs::read(format!(
        "{}/../../fixtures/topologies/hwloc/xml/24em64t-2n6c2t-pci.xml",
        env!("CARGO_MANIFEST_DIR")
    ))
    .unwrap();
    let admin = Service::new(numaplace_store::open(&db).unwrap(), 1, 1).unwrap();
    admin.put_upload("small", HostUpload { body: small, ..Default::default() }).unwrap();
    let gate = Arc::new((Mutex::new((false, false)), Condvar::new()));
    let mut hooked = Hooked::new(numaplace_store::open(&db).unwrap());
    let hook = gate.clone();
    hooked.before_commit = Box::new(move |_, changes| {
        if changes[0].add.first().is_some_and(|p| p.vm == "p") {
            let (lock, cv) = &*hook;
            let mut g = lock.lock().unwrap();
            g.0 = true;
            cv.notify_all();
            while !g.1 {
                g = cv.wait(g).unwrap();
            }
        }
        Ok(())
    });
    let svc = Arc::new(Service::new(Box::new(hooked), 1, 1).unwrap());
    let place = |vm: &str| {
        let (svc, (tx, rx)) = (svc.clone(), mpsc::channel());
        let body = format!(r#"{{"name":"{vm}","vcpus":8,"memory":"8GiB"}}"#);
        std::thread::spawn(move || tx.send(svc.place_json(body.as_bytes(), false).map(|p| p.doc.host)));
        rx
    };
    let p = place("p");
    {
        let (lock, cv) = &*gate;
        let mut g = lock.lock().unwrap();
        while !g.0 {
            g = cv.wait(g).unwrap();
        }
    }
    let q = place("q").recv_timeout(std::time::Duration::from_secs(20));
    {
        let (lock, cv) = &*gate;
        lock.lock().unwrap().1 = true;
        cv.notify_all();
    }
    assert_eq!(p.recv().unwrap().unwrap(), "h1");
    let q = q.expect("q answered while p's commit was held").unwrap();
    assert_eq!(q, "small");
    let _ = std::fs::remove_dir_all(dir);
}

/// The spread of decisions between replicas: one server takes the best
/// host; replicas pick among 20 x (replicas - 1) of the best, at most a
/// sixteenth of the fleet (but a few hosts on a small fleet).
#[test]
fn replicas_spread_over_a_number_of_hosts_set_by_fleet_size_and_replicas() {
    use numaplace_server::service::spread_k;
    assert_eq!(spread_k(10_000, 1), 1);
    assert_eq!(spread_k(10_000, 3), 40);
    assert_eq!(spread_k(10_000, 5), 80);
    assert_eq!(spread_k(100_000, 5), 80);
    assert_eq!(spread_k(320, 3), 20, "a sixteenth of the fleet");
    assert_eq!(spread_k(8, 3), 4, "a small fleet: replicas + 1");
    assert_eq!(spread_k(2, 3), 2);
    assert_eq!(spread_k(0, 3), 1);
}

/// A fleet as a cache holds it: each host's generation, drained flag,
/// VMs with their groups and PUs, and free capacity.
fn cached(svc: &Service) -> Vec<String> {
    svc.with_fleet(|f| {
        f.hosts()
            .map(|h| {
                let vms: Vec<String> = h
                    .state
                    .placements()
                    .iter()
                    .map(|p| format!("{}:{:?}:{:?}", p.vm, h.groups.get(&p.vm), p.vcpus))
                    .collect();
                format!("{} g{} d{} {vms:?} {:?}", h.name, h.generation, h.drained, h.summary)
            })
            .collect()
    })
}

/// A start loads the cache a server that made the changes holds (hosts,
/// generations, drained flags, VMs with their groups and CPUs, free
/// capacity), hosts of one kind sharing one topology: what the zone
/// bench's restart (`crates/cli/benches/zone_serve.rs`) times at 100,000
/// hosts.
#[test]
fn a_start_loads_the_cache_the_running_server_holds() {
    let (dir, db) = database("load");
    let a = Service::new(numaplace_store::open(&db).unwrap(), 1, 1).unwrap();
    for h in ["h2", "h3", "h0"] {
        a.put_upload(h, HostUpload { body: corona(), ..Default::default() }).unwrap();
    }
    for (i, size) in [8, 16, 4, 32, 2, 8].into_iter().enumerate() {
        let group = if i % 2 == 0 { r#","constraints":{"anti_affinity":"g"}"# } else { "" };
        let body = format!(r#"{{"name":"vm{i}","vcpus":{size},"memory":"{size}GiB"{group}}}"#);
        a.place_json(body.as_bytes(), false).unwrap();
    }
    a.drain(&numaplace_server::command::Drain { host: "h3".to_string(), drained: true }).unwrap();
    let b = Service::new(numaplace_store::open(&db).unwrap(), 1, 1).unwrap();
    let (was, now) = (cached(&a), cached(&b));
    assert_eq!(was.len(), 4);
    assert_eq!(now, was);
    b.with_fleet(|f| {
        let t: Vec<_> = f.hosts().map(|h| std::sync::Arc::as_ptr(&h.topology)).collect();
        assert!(t.windows(2).all(|w| w[0] == w[1]), "one topology for hosts of one kind");
    });
    let _ = std::fs::remove_dir_all(dir);
}

/// A server whose claims are in flight (committed after its next decisions
/// are made) spreads wider, as its replicas do: the chance of a collision
/// stays where `spread_k` puts it, within a sixteenth of the fleet.
#[test]
fn the_spread_widens_with_the_claims_in_flight() {
    use numaplace_server::service::spread_among;
    assert_eq!(spread_among(10_000, 3, 0), 40);
    assert_eq!(spread_among(10_000, 3, 4), 200);
    assert_eq!(spread_among(10_000, 3, 100), 625, "a sixteenth of the fleet");
    assert_eq!(spread_among(8, 3, 10), 4, "a small fleet keeps spread_k's");
    assert_eq!(spread_among(10_000, 1, 5), 1, "one server takes the best host");
}
