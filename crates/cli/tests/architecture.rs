//! The crate graph ARCHITECTURE.md states, held by a test: each crate may
//! depend only on the numaplace crates listed for it, so the model and the
//! readers never grow a dependency on the planner, and the pure crates
//! never on the edges. Read from the manifests, so no tool is needed.

use std::collections::BTreeMap;
use std::path::PathBuf;

/// The numaplace crates each crate may use (normal dependencies; tests and
/// benches may use more).
const ALLOWED: &[(&str, &[&str])] = &[
    ("topo", &[]),
    // The skip-or-fail rule of the workspace's own tests.
    ("testkit", &[]),
    // The binaries' global allocator.
    ("alloc", &[]),
    ("wire", &["topo", "plan", "observe", "fleet"]),
    ("read", &["topo", "wire"]),
    ("plan", &["topo"]),
    ("emit", &["topo", "plan"]),
    // The proof harness: boots QEMU with emit's arguments, or a domain
    // written and defined through the libvirt edge.
    ("guest", &["topo", "plan", "emit", "libvirt", "testkit"]),
    // Reads libvirt domains through the edge that owns the format.
    ("lint", &["topo", "plan", "emit", "wire", "libvirt"]),
    // The balancer keeps to the planner's reservations and re-plans
    // dedicated VMs through it.
    ("observe", &["topo", "plan"]),
    // The simulator replays traces through the fleet crate's rankings and
    // its one definition of free and stranded capacity.
    ("sim", &["topo", "plan", "wire", "fleet"]),
    // The edge to libvirt: owns the domain format (read, write, splice)
    // and the one virsh runner; words counts through emit's text, finds
    // QEMU processes and pins them through observe's traits.
    ("libvirt", &["topo", "plan", "emit", "observe"]),
    // The fleet inventory and host selection: pure, on the planner.
    ("fleet", &["topo", "plan"]),
    // The only crate that knows SQL; it stores documents as text.
    ("store", &["testkit"]),
    // The workspace's HTTP server: the fleet service (writing domain XML
    // through the libvirt edge's writer) and the exporter's `/metrics`.
    // It knows no agent, no `/proc` and no HTTP client.
    ("server", &["topo", "read", "wire", "plan", "emit", "fleet", "store", "libvirt"]),
    // The host agent: a client of the server's API, reading its host's
    // domains through the libvirt edge and their memory through observe.
    ("agent", &["topo", "read", "wire", "emit", "libvirt", "observe"]),
    (
        "cli",
        &[
            "topo", "read", "wire", "emit", "guest", "plan", "sim", "lint", "observe", "libvirt", "server", "agent",
            "alloc",
        ],
    ),
];

/// Crates that sit below the planner: none may reach it, even through
/// wire's optional plan shapes.
const BELOW_PLAN: &[&str] = &["topo", "read"];

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The `[dependencies]` section of a manifest: numaplace crate -> its line.
fn normal_deps(manifest: &str) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let mut in_deps = false;
    for line in manifest.lines() {
        let t = line.trim();
        if t.starts_with('[') {
            in_deps = t == "[dependencies]";
            continue;
        }
        if let (true, Some(rest)) = (in_deps, t.strip_prefix("numaplace-")) {
            let name: String = rest.chars().take_while(|c| c.is_ascii_alphanumeric()).collect();
            out.insert(name, t.to_string());
        }
    }
    out
}

fn manifest(krate: &str) -> String {
    let path = root().join("crates").join(krate).join("Cargo.toml");
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The workspace's crates, by directory name.
fn crates_on_disk() -> Vec<String> {
    std::fs::read_dir(root().join("crates"))
        .expect("crates/")
        .flatten()
        .filter(|e| e.path().join("Cargo.toml").exists())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect()
}

#[test]
fn every_crate_depends_only_on_the_crates_below_it() {
    let on_disk = crates_on_disk();
    for krate in &on_disk {
        let allowed = ALLOWED
            .iter()
            .find(|(k, _)| k == krate)
            .unwrap_or_else(|| panic!("crate {krate} is not in ARCHITECTURE.md's graph (add it here and there)"))
            .1;
        for dep in normal_deps(&manifest(krate)).keys() {
            assert!(allowed.contains(&dep.as_str()), "{krate} depends on {dep}, which ARCHITECTURE.md does not allow");
        }
    }
}

#[test]
fn the_crates_below_the_planner_never_reach_it() {
    // wire's plan shapes are behind its `plan` feature; the workspace
    // declares wire without default features, so a crate gets them only
    // by asking.
    let workspace = std::fs::read_to_string(root().join("Cargo.toml")).expect("Cargo.toml");
    let wire = workspace.lines().find(|l| l.starts_with("numaplace-wire")).expect("wire in the workspace");
    assert!(wire.contains("default-features = false"), "{wire}");
    let wire_manifest = manifest("wire");
    let plan_dep = normal_deps(&wire_manifest).remove("plan").expect("wire uses plan for plan shapes");
    assert!(plan_dep.contains("optional = true"), "{plan_dep}");
    for krate in BELOW_PLAN {
        let deps = normal_deps(&manifest(krate));
        assert!(!deps.contains_key("plan"), "{krate} depends on plan");
        if let Some(line) = deps.get("wire") {
            assert!(!line.contains("plan"), "{krate} asks wire for its plan shapes: {line}");
        }
    }
}

/// Library and binary sources under `crates/` (tests and benches may build
/// JSON however they like), as (path from the root, text), sorted by path;
/// `skip` leaves out directories by their path from the root.
fn sources(skip: &[&str]) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut stack = vec![root().join("crates")];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).expect("readable").flatten() {
            let path = entry.path();
            let rel = path.strip_prefix(root()).unwrap_or(&path).to_string_lossy().into_owned();
            if path.is_dir() {
                if !rel.ends_with("/tests") && !rel.ends_with("/benches") && !skip.iter().any(|s| rel.starts_with(s)) {
                    stack.push(path);
                }
            } else if rel.ends_with(".rs") {
                out.push((rel, std::fs::read_to_string(&path).expect("utf-8 source")));
            }
        }
    }
    out.sort();
    out
}

/// The workspace forbids unsafe code; two places need it and allow it
/// themselves: the system calls of `observe::sys` and the global
/// allocator. A third is a change ARCHITECTURE.md has to state.
#[test]
fn unsafe_code_stays_in_the_two_places_that_need_it() {
    let allowed = ["crates/observe/src/sys.rs", "crates/alloc/src/lib.rs"];
    let mut offenders = Vec::new();
    for (rel, text) in sources(&[]) {
        if text.contains("allow(unsafe_code)") && !allowed.contains(&rel.as_str()) {
            offenders.push(rel);
        }
    }
    assert!(offenders.is_empty(), "unsafe code allowed outside observe::sys and numaplace-alloc: {offenders:?}");
    for krate in crates_on_disk() {
        let text = manifest(&krate);
        let own = text.contains("unsafe_code =");
        assert_eq!(own, krate == "observe" || krate == "alloc", "{krate}: sets its own unsafe_code lint");
        if !own {
            assert!(text.contains("[lints]\nworkspace = true"), "{krate}: does not take the workspace's lints");
        }
    }
}

#[test]
fn only_wire_derives_serde() {
    let mut offenders = Vec::new();
    for (rel, text) in sources(&["crates/wire"]) {
        for (n, line) in text.lines().enumerate() {
            if line.contains("derive(") && (line.contains("Serialize") || line.contains("Deserialize")) {
                offenders.push(format!("{rel}:{}", n + 1));
            }
        }
    }
    assert!(offenders.is_empty(), "serde derives outside numaplace-wire: {offenders:?}");
}

/// Every JSON shape numaplace writes is a wire type: no crate builds one
/// with `serde_json::json!` outside its tests (a `#[cfg(test)]` module
/// ends a file's scanned part, as it is written last by convention).
#[test]
fn no_json_shapes_outside_wire_types() {
    let mut offenders = Vec::new();
    for (rel, text) in sources(&[]) {
        for (n, line) in text.lines().enumerate() {
            if line.trim_start().starts_with("#[cfg(test)]") {
                break;
            }
            let code = line.split("//").next().unwrap_or("");
            if code.contains("json!(") || code.contains("json!({") {
                offenders.push(format!("{rel}:{}", n + 1));
            }
        }
    }
    assert!(offenders.is_empty(), "JSON built with json! outside tests: {offenders:?}");
}

/// External crates that only the crates named may use: SQL lives in the
/// store, HTTP's server side in the server (the service and the exporter
/// alike) and its client in the agent and the server's Kubernetes client,
/// so the pure crates stay testable on data.
const EDGE_CRATES: &[(&str, &str)] = &[
    ("rusqlite", "store"),
    ("postgres", "store"),
    ("tokio-postgres", "store"),
    ("axum", "server"),
    ("tokio", "server"),
    ("hyper", "server"),
    ("hyper-util", "server"),
    ("http-body-util", "server"),
    ("ureq", "agent"),
    // The Kubernetes API client of `serve --kube-api` (server/src/kube.rs).
    ("ureq", "server"),
    // The log subscriber is the server's (the process's one output set-up);
    // other crates may emit `tracing` events for it.
    ("tracing-subscriber", "server"),
];

#[test]
fn sql_stays_in_the_store_and_http_at_the_server_and_agent_edge() {
    let on_disk = crates_on_disk();
    for krate in &on_disk {
        let text = manifest(krate);
        let mut in_deps = false;
        for line in text.lines() {
            let t = line.trim();
            if t.starts_with('[') {
                in_deps = t == "[dependencies]";
                continue;
            }
            let name: String = t.chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '-' || *c == '_').collect();
            let owners: Vec<&str> = EDGE_CRATES.iter().filter(|(dep, _)| *dep == name).map(|(_, o)| *o).collect();
            if in_deps && !owners.is_empty() {
                assert!(owners.contains(&krate.as_str()), "{krate} depends on {name}, which only {owners:?} may use");
            }
        }
    }
}

/// One `virsh` runner: `numaplace-libvirt`'s `Virsh` is the only code
/// outside tests that starts the program (the state reader, apply, drift,
/// the balancer's live pinning and the guest harness all go through it),
/// so every libvirt call is made, logged and worded one way.
#[test]
fn only_the_libvirt_edge_runs_virsh() {
    let runs = |text: &str| -> Vec<usize> {
        let mut at = Vec::new();
        for (n, line) in text.lines().enumerate() {
            if line.trim_start().starts_with("#[cfg(test)]") {
                break;
            }
            let code = line.split("//").next().unwrap_or("");
            if code.contains("Command::new(\"virsh\")") {
                at.push(n + 1);
            }
        }
        at
    };
    let mut offenders = Vec::new();
    let mut edge = Vec::new();
    for (rel, text) in sources(&[]) {
        for n in runs(&text) {
            if rel.starts_with("crates/libvirt/") {
                edge.push(format!("{rel}:{n}"));
            } else {
                offenders.push(format!("{rel}:{n}"));
            }
        }
    }
    assert!(offenders.is_empty(), "virsh run outside numaplace-libvirt: {offenders:?}");
    assert_eq!(edge.len(), 1, "numaplace-libvirt runs virsh in one place (Virsh::run): {edge:?}");
}

/// One HTTP server: `numaplace serve` and `numaplace exporter` both run
/// the server crate's stack (its accept loop, header timeout and
/// connection cap). No other crate accepts connections or writes an
/// HTTP status line by hand, as observe's exporter once did.
#[test]
fn only_the_server_crate_serves_http() {
    let mut offenders = Vec::new();
    for (rel, text) in sources(&["crates/server"]) {
        for (n, line) in text.lines().enumerate() {
            if line.trim_start().starts_with("#[cfg(test)]") {
                break;
            }
            let code = line.split("//").next().unwrap_or("");
            if code.contains(".accept()") || code.contains("\"HTTP/1.1 ") {
                offenders.push(format!("{rel}:{}", n + 1));
            }
        }
    }
    assert!(offenders.is_empty(), "HTTP served outside numaplace-server: {offenders:?}");
}

/// The code part of a source: up to its `#[cfg(test)]` module (written last
/// by convention), each line without its `//` comment.
fn code_lines(text: &str) -> impl Iterator<Item = (usize, &str)> {
    text.lines()
        .enumerate()
        .take_while(|(_, line)| !line.trim_start().starts_with("#[cfg(test)]"))
        .map(|(n, line)| (n + 1, line.split("//").next().unwrap_or("")))
}

/// What a pure crate never does: open files, sockets or processes, read
/// the environment, the clock or the terminal, or sleep. The plan depends
/// on its inputs alone, so the same input gives the same plan and tests
/// run the core on captured data.
const IMPURE: &[&str] = &[
    "std::fs",
    "fs::File",
    "std::net",
    "std::process",
    "std::env",
    "Instant::now",
    "SystemTime",
    "thread::sleep",
    "stdin()",
];

/// The crates ARCHITECTURE.md calls pure, and in `read` and `sim` the
/// files that may touch the file system (read's source opening and its
/// directory and tarball trees; sim's loading of traces). Neither may
/// read the clock.
const PURE: &[(&str, &[&str])] = &[
    ("topo", &[]),
    ("plan", &[]),
    ("fleet", &[]),
    ("emit", &[]),
    ("wire", &[]),
    ("read", &["crates/read/src/lib.rs", "crates/read/src/sysfs/tree.rs", "crates/read/src/sysfs/tarball.rs"]),
    ("sim", &["crates/sim/src/load.rs"]),
];

#[test]
fn the_pure_crates_touch_no_file_clock_or_environment() {
    let mut offenders = Vec::new();
    for (krate, file_system) in PURE {
        let prefix = format!("crates/{krate}/src/");
        for (rel, text) in sources(&[]).into_iter().filter(|(rel, _)| rel.starts_with(&prefix)) {
            for (n, code) in code_lines(&text) {
                for word in IMPURE {
                    let allowed = file_system.contains(&rel.as_str()) && word.contains("fs");
                    if code.contains(word) && !allowed {
                        offenders.push(format!("{rel}:{n}: {word}"));
                    }
                }
            }
        }
    }
    assert!(offenders.is_empty(), "I/O, clock or environment in a pure crate: {offenders:?}");
}

/// ARCHITECTURE.md's code map gives each crate an `Imports:` line; it must
/// name exactly the crates [`ALLOWED`] lists (which the manifests are held
/// to above), so the map cannot drift from the graph the build enforces.
#[test]
fn the_code_map_in_architecture_md_is_the_graph_the_manifests_keep() {
    let doc = std::fs::read_to_string(root().join("ARCHITECTURE.md")).expect("ARCHITECTURE.md");
    let mut map: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut current: Option<String> = None;
    for line in doc.lines() {
        if let Some(rest) = line.strip_prefix("### `crates/") {
            current = rest.split('`').next().map(str::to_string);
            continue;
        }
        if line.starts_with('#') {
            current = None;
        }
        if let (Some(krate), Some(rest)) = (&current, line.strip_prefix("Imports:")) {
            let names = rest.split('`').skip(1).step_by(2).map(str::to_string).collect();
            assert!(map.insert(krate.clone(), names).is_none(), "{krate}: two Imports: lines");
        }
    }
    for krate in crates_on_disk() {
        let allowed = ALLOWED.iter().find(|(k, _)| *k == krate).map(|(_, a)| *a).unwrap_or_default();
        let mut want: Vec<String> = allowed.iter().map(|s| s.to_string()).collect();
        want.sort();
        let mut said = map.remove(&krate).unwrap_or_else(|| panic!("ARCHITECTURE.md has no Imports: line for {krate}"));
        said.sort();
        assert_eq!(said, want, "ARCHITECTURE.md's imports of {krate} against the allowed graph");
    }
    assert!(map.is_empty(), "ARCHITECTURE.md maps crates that do not exist: {:?}", map.keys());
}

/// Programs are started at the edges only: the guest harness (QEMU, and
/// `apt-get`, `dpkg-deb` and `xz` for its kernel), the libvirt edge
/// (`virsh`, once), `top`'s terminal mode (`stty`) and the store's test
/// PostgreSQL (`testing`). Everything else reaches the system through
/// them or through observe's traits.
#[test]
fn only_the_edges_start_programs() {
    let edges =
        ["crates/guest/src/", "crates/libvirt/src/", "crates/cli/src/cmd/top.rs", "crates/store/src/testing.rs"];
    let mut offenders = Vec::new();
    for (rel, text) in sources(&[]) {
        if edges.iter().any(|e| rel.starts_with(e)) {
            continue;
        }
        for (n, code) in code_lines(&text) {
            if code.contains("Command::new(") {
                offenders.push(format!("{rel}:{n}"));
            }
        }
    }
    assert!(offenders.is_empty(), "a program started outside guest, libvirt and top: {offenders:?}");
}

/// The store keeps a placement's document and request as text it never
/// parses: the service's cache decodes them. Its one use of JSON is a
/// host's labels (`schema.rs`).
#[test]
fn the_store_parses_no_placement_text() {
    let mut offenders = Vec::new();
    for (rel, text) in sources(&[]).into_iter().filter(|(rel, _)| rel.starts_with("crates/store/src/")) {
        for (n, code) in code_lines(&text) {
            if code.contains("serde_json") && rel != "crates/store/src/schema.rs" {
                offenders.push(format!("{rel}:{n}"));
            }
        }
    }
    assert!(offenders.is_empty(), "the store reads JSON outside its labels: {offenders:?}");
}

/// The planner's entry points other than `Session` that `text` names
/// through `numaplace_plan::` (in a `use` list or a path).
fn planning_outside_a_session(text: &str) -> Vec<&'static str> {
    const BANNED: [&str; 3] = ["plan", "plan_batch", "apply_change"];
    let code: String = code_lines(text).map(|(_, c)| format!("{c}\n")).collect();
    let mut found = Vec::new();
    let mut rest = code.as_str();
    while let Some(at) = rest.find("numaplace_plan::") {
        let after = &rest[at + "numaplace_plan::".len()..];
        // A `use` list up to its first `}`, or one path segment.
        let end = match after.strip_prefix('{') {
            Some(list) => list.find('}').map_or(after.len(), |e| e + 1),
            None => after.find(|c: char| !(c.is_alphanumeric() || c == '_')).unwrap_or(after.len()),
        };
        for word in after[..end].split(|c: char| !(c.is_alphanumeric() || c == '_')) {
            if let Some(b) = BANNED.iter().find(|b| **b == word) {
                found.push(*b);
            }
        }
        rest = after;
    }
    found
}

#[test]
fn the_session_check_sees_imports_and_calls() {
    assert_eq!(planning_outside_a_session("use numaplace_plan::{plan, Request};"), ["plan"]);
    assert_eq!(
        planning_outside_a_session("use numaplace_plan::{\n    apply_change,\n    Change,\n};"),
        ["apply_change"]
    );
    assert_eq!(planning_outside_a_session("let d = numaplace_plan::plan_batch(t, s, r);"), ["plan_batch"]);
    assert!(planning_outside_a_session("use numaplace_plan::{planner_note, Session};").is_empty());
    assert!(planning_outside_a_session("// numaplace_plan::plan( in a comment").is_empty());
}

/// Outside the planner, code plans only through `numaplace_plan::Session`
/// (the CLI's plan, lint's fixer, balance, the fleet, the simulator, the
/// libvirt edge): nothing imports or calls `plan`, `plan_batch` or the
/// old `apply_change` directly, so "remove these, place these" and "this
/// VM is already here" mean one thing everywhere. Checked once the
/// planner has a `Session` (issue 49; until that branch merges, the old
/// entry points are still in use).
#[test]
fn code_outside_the_planner_plans_through_a_session() {
    let plan_lib = std::fs::read_to_string(root().join("crates/plan/src/lib.rs")).expect("plan's lib.rs");
    if !plan_lib.contains("Session") {
        return;
    }
    let mut offenders = Vec::new();
    for (rel, text) in sources(&["crates/plan"]) {
        for word in planning_outside_a_session(&text) {
            offenders.push(format!("{rel}: numaplace_plan::{word}"));
        }
    }
    assert!(offenders.is_empty(), "planning outside a Session: {offenders:?}");
}

/// The top-level modules of a crate's `src` (a file `x.rs` or a folder
/// `x/`), each with the top-level modules its code names as `crate::y`.
fn module_imports(krate: &str) -> BTreeMap<String, std::collections::BTreeSet<String>> {
    let prefix = format!("crates/{krate}/src/");
    let mut code: BTreeMap<String, String> = BTreeMap::new();
    for (rel, text) in sources(&[]).into_iter().filter(|(rel, _)| rel.starts_with(&prefix)) {
        let top = rel[prefix.len()..].split('/').next().unwrap_or("").trim_end_matches(".rs").to_string();
        if top == "lib" || top == "main" {
            continue;
        }
        let entry = code.entry(top).or_default();
        for (_, line) in code_lines(&text) {
            entry.push_str(line);
            entry.push('\n');
        }
    }
    let names: Vec<String> = code.keys().cloned().collect();
    let word = |c: char| c.is_alphanumeric() || c == '_';
    code.iter()
        .map(|(module, text)| {
            let mut uses = std::collections::BTreeSet::new();
            for (at, _) in text.match_indices("crate::") {
                let after = &text[at + "crate::".len()..];
                // `crate::x`, or each first segment of `crate::{x, y::z}`.
                let list = match after.strip_prefix('{') {
                    Some(list) => &list[..list.find('}').unwrap_or(list.len())],
                    None => &after[..after.find(|c: char| !word(c)).unwrap_or(after.len())],
                };
                for item in list.split(',') {
                    let first = item.trim().split("::").next().unwrap_or("").trim_start_matches('{');
                    if first != module && names.iter().any(|n| n == first) {
                        uses.insert(first.to_string());
                    }
                }
            }
            (module.clone(), uses)
        })
        .collect()
}

/// Modules of one crate that reach themselves through `crate::` imports.
fn modules_in_a_circle(graph: &BTreeMap<String, std::collections::BTreeSet<String>>) -> Vec<String> {
    let reaches = |from: &str, to: &str| {
        let mut seen = std::collections::BTreeSet::new();
        let mut stack = vec![from.to_string()];
        while let Some(m) = stack.pop() {
            for next in graph.get(&m).into_iter().flatten() {
                if next == to {
                    return true;
                }
                if seen.insert(next.clone()) {
                    stack.push(next.clone());
                }
            }
        }
        false
    };
    graph.keys().filter(|m| reaches(m, m)).cloned().collect()
}

/// No crate's modules import each other in a circle, so each module can
/// be read knowing only the ones below it (issue 49: the server's nine
/// modules were one circle, and lint's, plan's and libvirt's had some).
#[test]
fn no_crate_has_modules_that_import_each_other_in_a_circle() {
    let mut found = Vec::new();
    for krate in crates_on_disk() {
        let circle = modules_in_a_circle(&module_imports(&krate));
        if !circle.is_empty() {
            found.push(format!("{krate}: {circle:?}"));
        }
    }
    assert!(found.is_empty(), "modules importing each other in a circle: {found:?}");
}

#[test]
fn the_circle_check_finds_a_circle() {
    let graph = |edges: &[(&str, &str)]| {
        let mut g: BTreeMap<String, std::collections::BTreeSet<String>> = BTreeMap::new();
        for (a, b) in edges {
            g.entry(a.to_string()).or_default().insert(b.to_string());
            g.entry(b.to_string()).or_default();
        }
        g
    };
    assert_eq!(modules_in_a_circle(&graph(&[("a", "b"), ("b", "c"), ("c", "a"), ("c", "d")])), ["a", "b", "c"]);
    assert!(modules_in_a_circle(&graph(&[("a", "b"), ("b", "c"), ("a", "c")])).is_empty());
}
