//! A libvirt host as state, plans applied to it, drift (issue 16).
//!
//! Multi-node behaviour runs on a directory of domain XML files against
//! a real 8-node fixture host; the rest runs against the real libvirtd of
//! this machine with TCG domains the tests define with `virsh` (not with
//! numaplace), so what numaplace reads is what libvirt says. The libvirt
//! tests share one daemon and take turns (`LIBVIRT`).

use numaplace_guest::testing::require_libvirt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::Mutex;

/// One libvirt test at a time: each reads every domain of the daemon.
static LIBVIRT: Mutex<()> = Mutex::new(());

const URI: &str = "qemu:///system";

fn corona() -> String {
    format!("{}/../../fixtures/topologies/mpibind/epyc-corona.xml", env!("CARGO_MANIFEST_DIR"))
}

fn numaplace(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_numaplace"))
        .env("NUMAPLACE_HOST_CONFIG", concat!(env!("CARGO_TARGET_TMPDIR"), "/no-host-profile.toml"))
        .args(args)
        .output()
        .expect("run numaplace")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn workdir(test: &str) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("libvirt-state").join(test);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("temp dir");
    dir
}

/// A domain as `virsh dumpxml` prints one, with the given tuning.
fn domain(name: &str, vcpus: u32, memory_mib: u64, inner: &str) -> String {
    format!(
        "<domain type='qemu'>\n  <name>{name}</name>\n  <memory unit='KiB'>{kib}</memory>\n  <currentMemory unit='KiB'>{kib}</currentMemory>\n  <vcpu placement='static'>{vcpus}</vcpu>\n{inner}  <os>\n    <type arch='x86_64' machine='q35'>hvm</type>\n  </os>\n  <devices>\n    <memballoon model='none'/>\n  </devices>\n</domain>\n",
        kib = memory_mib * 1024
    )
}

fn pins(cpus: &[u32]) -> String {
    cpus.iter().enumerate().map(|(v, c)| format!("    <vcpupin vcpu='{v}' cpuset='{c}'/>\n")).collect()
}

fn json(o: &Output) -> serde_json::Value {
    serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("{e}: {}{}", text(&o.stdout), text(&o.stderr)))
}

#[test]
fn a_dump_directory_on_an_eight_node_host_is_planned_around() {
    let dir = workdir("dump");
    // db: 12 vCPUs pinned to node0's six cores and their siblings,
    // memory bound there.
    let db_cpus: Vec<u32> = (0..6).chain(48..54).collect();
    std::fs::write(
        dir.join("db.xml"),
        domain(
            "db",
            12,
            16 << 10,
            &format!(
                "  <cputune>\n{}    <emulatorpin cpuset='0'/>\n  </cputune>\n  <numatune>\n    <memory mode='strict' nodeset='0'/>\n  </numatune>\n",
                pins(&db_cpus)
            ),
        ),
    )
    .expect("write");
    // web: 4 vCPUs pinned nowhere, 8 GiB: floating load, memory spread.
    std::fs::write(dir.join("web.xml"), domain("web", 4, 8 << 10, "")).expect("write");
    // cells: two guest cells bound to nodes 2 and 3.
    let cells = format!(
        "  <cputune>\n{}  </cputune>\n  <numatune>\n    <memory mode='strict' nodeset='2-3'/>\n    <memnode cellid='0' mode='strict' nodeset='2'/>\n    <memnode cellid='1' mode='strict' nodeset='3'/>\n  </numatune>\n  <cpu>\n    <numa>\n      <cell id='0' cpus='0-1' memory='4' unit='GiB'/>\n      <cell id='1' cpus='2-3' memory='4' unit='GiB'/>\n    </numa>\n  </cpu>\n",
        pins(&[12, 13, 18, 19])
    );
    std::fs::write(dir.join("cells.xml"), domain("cells", 4, 8 << 10, &cells)).expect("write");
    // late: pinned by hand onto a CPU db holds.
    std::fs::write(
        dir.join("late.xml"),
        domain("late", 1, 1024, &format!("  <cputune>\n{}  </cputune>\n", pins(&[0]))),
    )
    .expect("write");
    let d = dir.to_string_lossy().into_owned();
    let host = corona();

    let o = numaplace(&[
        "plan",
        "--host",
        &host,
        "--state",
        &d,
        "--vm",
        "name=new,vcpus=12,memory=16GiB",
        "--format",
        "json",
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    assert!(text(&o.stderr).contains("late pins a vCPU to CPU 0, which db also holds"), "{}", text(&o.stderr));
    let doc = json(&o);
    let new = &doc["placements"][0];
    assert_eq!(new["vm"], "new");
    let taken: Vec<u64> = db_cpus.iter().map(|&c| u64::from(c)).chain([12, 13, 18, 19]).collect();
    for pin in new["pins"].as_array().expect("pins") {
        assert!(!taken.contains(&pin.as_u64().expect("cpu")), "new is pinned to {pin}, which a domain holds");
    }
    let held = doc["held"].as_array().expect("held");
    let by = |name: &str| held.iter().find(|h| h["vm"] == name).unwrap_or_else(|| panic!("{name} held"));
    assert_eq!(by("db")["cpu_mode"], "dedicated");
    assert_eq!(by("db")["managed"], false);
    assert_eq!(by("db")["memory"], serde_json::json!([{"node": 0, "bytes": 16u64 << 30}]));
    assert_eq!(by("web")["cpu_mode"], "floating");
    // The kernel spreads an unbound VM's memory over every node its
    // vCPUs may use: all eight, 1 GiB each.
    assert_eq!(by("web")["memory"].as_array().map(Vec::len), Some(8));
    assert!(by("web")["memory"].as_array().expect("memory").iter().all(|m| m["bytes"] == 1u64 << 30));
    assert_eq!(
        by("cells")["memory"],
        serde_json::json!([{"node": 2, "bytes": 4u64 << 30}, {"node": 3, "bytes": 4u64 << 30}])
    );
    assert_eq!(by("late")["cpu_mode"], "floating");

    // A VM too big for what is left names the domains that hold the CPUs.
    let o = numaplace(&["plan", "--host", &host, "--state", &d, "--vm", "name=big,vcpus=80,memory=16GiB"]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o.stderr));
    assert!(text(&o.stdout).contains("CPUs held by db (CPUs 0-5,48-53)"), "{}", text(&o.stdout));

    // A name already defined is planned again only when asked.
    let o = numaplace(&["plan", "--host", &host, "--state", &d, "--vm", "name=db,vcpus=4,memory=4GiB"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(text(&o.stderr).contains("add --remove db"), "{}", text(&o.stderr));
    let o =
        numaplace(&["plan", "--host", &host, "--state", &d, "--remove", "db", "--vm", "name=db,vcpus=4,memory=4GiB"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));

    // lint checks a file against the directory's domains.
    std::fs::write(
        dir.join("../clash.xml"),
        domain("clash", 1, 1024, &format!("  <cputune>\n{}  </cputune>\n", pins(&[1]))),
    )
    .expect("write");
    let clash = dir.join("../clash.xml").to_string_lossy().into_owned();
    let o = numaplace(&["lint", "--host", &host, "--state", &d, &clash]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o.stdout));
    assert!(text(&o.stdout).contains("pinning-overlap"), "{}", text(&o.stdout));
}

/// Runs `virsh -c qemu:///system ARGS`, panicking with what it said.
fn virsh(args: &[&str]) -> String {
    let o = Command::new("virsh").arg("-c").arg(URI).args(args).output().expect("virsh");
    assert!(o.status.success(), "virsh {}: {}", args.join(" "), text(&o.stderr));
    text(&o.stdout)
}

/// Domains a test defined, destroyed and undefined when it ends.
struct Domains(Vec<String>);

impl Domains {
    fn define(&mut self, dir: &Path, xml: &str, name: &str) {
        let _ = Command::new("virsh").args(["-c", URI, "destroy", name]).output();
        let _ = Command::new("virsh").args(["-c", URI, "undefine", name]).output();
        let path = dir.join(format!("{name}.xml"));
        std::fs::write(&path, xml).expect("write");
        virsh(&["define", &path.to_string_lossy()]);
        self.0.push(name.to_string());
    }
}

impl Drop for Domains {
    fn drop(&mut self) {
        for name in &self.0 {
            let _ = Command::new("virsh").args(["-c", URI, "destroy", name]).output();
            let _ = Command::new("virsh").args(["-c", URI, "undefine", name]).output();
        }
    }
}

/// The CPUs of this machine other than 0 and 1, reserved so that the
/// tests see a two-CPU host on any machine.
fn reserve_all_but_two() -> Vec<String> {
    let online = std::fs::read_to_string("/sys/devices/system/cpu/online").expect("online CPUs");
    let cpus: numaplace_topo::CpuSet = online.trim().parse().expect("CPU list");
    let rest: numaplace_topo::CpuSet = cpus.iter().filter(|&c| c > 1).collect();
    if rest.is_empty() {
        Vec::new()
    } else {
        vec!["--reserved-cpus".to_string(), rest.to_list()]
    }
}

fn plan(extra: &[&str]) -> Output {
    let mut args: Vec<String> = ["plan", "--state", "libvirt"].iter().map(|s| s.to_string()).collect();
    args.extend(reserve_all_but_two());
    args.extend(extra.iter().map(|s| s.to_string()));
    let refs: Vec<&str> = args.iter().map(String::as_str).collect();
    numaplace(&refs)
}

#[test]
fn hand_pinned_domains_hold_their_cpus() {
    if !require_libvirt() {
        return;
    }
    let _turn = LIBVIRT.lock().unwrap_or_else(|e| e.into_inner());
    let dir = workdir("hand-pinned");
    let mut doms = Domains(Vec::new());
    for (name, cpu) in [("np-test-held-a", 0), ("np-test-held-b", 1)] {
        doms.define(&dir, &domain(name, 1, 64, &format!("  <cputune>\n{}  </cputune>\n", pins(&[cpu]))), name);
    }
    let o = plan(&["--vm", "name=np-test-new,vcpus=1,memory=64MiB"]);
    assert_eq!(o.status.code(), Some(1), "{}{}", text(&o.stdout), text(&o.stderr));
    let out = text(&o.stdout);
    assert!(out.contains("np-test-new: REJECTED"), "{out}");
    assert!(out.contains("np-test-held-a (CPU 0)") && out.contains("np-test-held-b (CPU 1)"), "{out}");

    // With b gone, the new VM takes the CPU b held, and nothing else.
    virsh(&["undefine", "np-test-held-b"]);
    let o = plan(&["--vm", "name=np-test-new,vcpus=1,memory=64MiB", "--format", "json"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    assert_eq!(json(&o)["placements"][0]["pins"], serde_json::json!([1]));
}

/// Each vCPU's pin in `virsh vcpupin NAME` (live for a running domain).
fn vcpupin(name: &str) -> Vec<String> {
    virsh(&["vcpupin", name])
        .lines()
        .filter_map(|l| {
            let mut words = l.split_whitespace();
            let vcpu = words.next()?.parse::<u32>().ok()?;
            Some(format!("{vcpu}:{}", words.next()?))
        })
        .collect()
}

#[test]
fn apply_defines_repins_live_and_drift_sees_hand_changes() {
    if !require_libvirt() {
        return;
    }
    let _turn = LIBVIRT.lock().unwrap_or_else(|e| e.into_inner());
    let dir = workdir("apply");
    let name = "np-test-apply";
    let doms = Domains(vec![name.to_string()]);
    let _ = Command::new("virsh").args(["-c", URI, "destroy", name]).output();
    let _ = Command::new("virsh").args(["-c", URI, "undefine", name]).output();

    let o = plan(&["--vm", &format!("name={name},vcpus=2,memory=64MiB"), "--format", "json"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    let plan_path = dir.join("plan.json");
    std::fs::write(&plan_path, &o.stdout).expect("write");
    let plan_file = plan_path.to_string_lossy().into_owned();
    let planned = json(&o)["placements"][0].clone();

    // A new domain from the plan: what libvirt stores carries the plan's
    // pins, cells and memory binding exactly.
    let o = numaplace(&["apply", "--plan", &plan_file, "--accel", "tcg"]);
    assert_eq!(o.status.code(), Some(0), "{}{}", text(&o.stdout), text(&o.stderr));
    assert!(text(&o.stdout).contains(&format!("{name} (not running): applied")), "{}", text(&o.stdout));
    let stored = virsh(&["dumpxml", "--inactive", name]);
    for (v, pu) in planned["pins"].as_array().expect("pins").iter().enumerate() {
        assert!(stored.contains(&format!("<vcpupin vcpu='{v}' cpuset='{pu}'/>")), "{stored}");
    }
    for cell in planned["guest"]["cells"].as_array().expect("cells") {
        let cpus: numaplace_topo::CpuSet =
            cell["vcpus"].as_array().expect("vcpus").iter().filter_map(|c| c.as_u64()).map(|c| c as u32).collect();
        assert!(stored.contains(&format!("<cell id='{}' cpus='{}'", cell["id"], cpus.to_list())), "{stored}");
        assert!(
            stored
                .contains(&format!("<memnode cellid='{}' mode='strict' nodeset='{}'/>", cell["id"], cell["host_node"])),
            "{stored}"
        );
    }
    let nodes: Vec<String> =
        planned["memory"].as_array().expect("memory").iter().map(|m| m["node"].to_string()).collect();
    assert!(stored.contains(&format!("<memory mode='strict' nodeset='{}'/>", nodes.join(","))), "{stored}");
    // What apply wrote lints clean on this host.
    let dumped = dir.join("stored.xml");
    std::fs::write(&dumped, &stored).expect("write");
    let o = numaplace(&["lint", &dumped.to_string_lossy()]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stdout));

    // Running as planned: no drift.
    virsh(&["start", name]);
    let o = numaplace(&["drift", "--plan", &plan_file, "--vm", name]);
    assert_eq!(o.status.code(), Some(0), "{}{}", text(&o.stdout), text(&o.stderr));
    assert!(text(&o.stdout).contains(&format!("{name} (running): as planned")), "{}", text(&o.stdout));

    // A hand change with virsh is drift, in the plan's terms and in the
    // domain's own.
    virsh(&["vcpupin", name, "--vcpu", "1", "--cpulist", "0-1", "--live"]);
    for args in [vec!["drift", "--plan", &plan_file, "--vm", name], vec!["drift", "--vm", name]] {
        let o = numaplace(&args);
        assert_eq!(o.status.code(), Some(1), "{}{}", text(&o.stdout), text(&o.stderr));
        assert!(text(&o.stdout).contains("drift: vCPU 1 may run on CPUs 0-1"), "{}", text(&o.stdout));
    }
    let o = numaplace(&["drift", "--plan", &plan_file, "--vm", name, "--format", "json"]);
    assert_eq!(json(&o)["vms"][0]["differences"][0]["code"], "vcpu");

    // apply puts it back, live; vcpupin shows it and drift sees nothing.
    let o = numaplace(&["apply", "--plan", &plan_file, "--vm", name, "--format", "json"]);
    assert_eq!(o.status.code(), Some(0), "{}{}", text(&o.stdout), text(&o.stderr));
    let log = json(&o);
    assert_eq!(log["vms"][0]["outcome"], "applied");
    let step = &log["vms"][0]["steps"][0];
    assert_eq!((step["action"].as_str(), step["before"].as_str()), (Some("vcpupin"), Some("0-1")));
    let pu1 = planned["pins"][1].to_string();
    assert!(vcpupin(name).contains(&format!("1:{pu1}")), "{:?}", vcpupin(name));
    let o = numaplace(&["drift", "--plan", &plan_file, "--vm", name]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stdout));
    drop(doms);
}

#[test]
fn a_base_domain_keeps_its_disk_and_nic_byte_for_byte() {
    // A base copied from another domain carries that domain's uuid.
    const UUID: &str = "4dea22b3-1d52-d8f3-2516-782e98ab3fa0";
    if !require_libvirt() {
        return;
    }
    let _turn = LIBVIRT.lock().unwrap_or_else(|e| e.into_inner());
    let dir = workdir("base");
    let name = "np-test-base";
    let _doms = Domains(vec![name.to_string()]);
    let _ = Command::new("virsh").args(["-c", URI, "undefine", name]).output();
    let disk_path = dir.join("disk.raw");
    std::fs::write(&disk_path, vec![0u8; 1 << 20]).expect("disk");
    let disk = format!(
        "<disk type='file'   device='disk'>\n      <driver name='qemu' type='raw'/>\n      <source file='{}'/>\n      <target dev='vda' bus='virtio'/>\n    </disk>",
        disk_path.display()
    );
    let nic = "<interface type='network'>\n      <mac address='52:54:00:12:34:56'/>\n      <source network='default'/>\n      <model type='virtio'/>\n    </interface>";
    let base = format!(
        "<!-- the operator's domain -->\n<domain type='qemu'>\n  <name>{name}</name>\n  <uuid>{UUID}</uuid>\n  <memory unit='KiB'>65536</memory>\n  <vcpu>2</vcpu>\n  <os>\n    <type arch='x86_64' machine='q35'>hvm</type>\n  </os>\n  <devices>\n    {disk}\n    {nic}\n  </devices>\n</domain>\n"
    );
    let base_path = dir.join("base.xml");
    std::fs::write(&base_path, &base).expect("write");
    let base_file = base_path.to_string_lossy().into_owned();

    let o = plan(&["--vm", &format!("name={name},vcpus=2,memory=64MiB"), "--format", "json"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    let plan_path = dir.join("plan.json");
    std::fs::write(&plan_path, &o.stdout).expect("write");
    let plan_file = plan_path.to_string_lossy().into_owned();

    let o = numaplace(&["apply", "--plan", &plan_file, "--base", &base_file, "--dry-run", "--format", "json"]);
    assert_eq!(o.status.code(), Some(0), "{}{}", text(&o.stdout), text(&o.stderr));
    let merged = json(&o)["vms"][0]["steps"][0]["after"].as_str().expect("definition").to_string();
    // Every byte of the base other than the NUMA elements is kept, but
    // its uuid: libvirt gives the new domain its own.
    assert!(!merged.contains(UUID), "{merged}");
    for kept in [disk.as_str(), nic, "<!-- the operator's domain -->", "<memory unit='KiB'>65536</memory>"] {
        assert!(merged.contains(kept), "{kept} lost:\n{merged}");
    }
    assert!(merged.contains("<vcpupin vcpu='0'") && merged.contains("<numa>"), "{merged}");
    assert!(virsh(&["list", "--all", "--name"]).lines().all(|l| l.trim() != name), "a dry run defined the domain");

    let o = numaplace(&["apply", "--plan", &plan_file, "--base", &base_file]);
    assert_eq!(o.status.code(), Some(0), "{}{}", text(&o.stdout), text(&o.stderr));
    let stored = virsh(&["dumpxml", "--inactive", name]);
    assert!(stored.contains(&disk_path.display().to_string()) && stored.contains("52:54:00:12:34:56"), "{stored}");
    assert!(stored.contains("numaplace:vm"), "the domain is marked as numaplace's:\n{stored}");

    // A base for a domain already defined is refused.
    let o = numaplace(&["apply", "--plan", &plan_file, "--base", &base_file]);
    assert_eq!(o.status.code(), Some(1));
    assert!(text(&o.stdout).contains("already defined"), "{}", text(&o.stdout));
    // A base of another size is refused, nothing defined.
    virsh(&["undefine", name]);
    let other = base.replace("<vcpu>2</vcpu>", "<vcpu>4</vcpu>");
    std::fs::write(&base_path, other).expect("write");
    let o = numaplace(&["apply", "--plan", &plan_file, "--base", &base_file]);
    assert_eq!(o.status.code(), Some(1));
    assert!(text(&o.stdout).contains("refused") && text(&o.stdout).contains("4 vCPUs"), "{}", text(&o.stdout));
    assert!(virsh(&["list", "--all", "--name"]).lines().all(|l| l.trim() != name), "a refused base was defined");
}

#[test]
fn balance_pins_a_libvirt_domain_through_virsh_and_restores_it() {
    use numaplace_libvirt::LivePin;
    use numaplace_observe::act::{Affinity, Live, Pin};
    use numaplace_observe::host::{Pins, Target};
    if !require_libvirt() {
        return;
    }
    let _turn = LIBVIRT.lock().unwrap_or_else(|e| e.into_inner());
    let dir = workdir("balance");
    let name = "np-test-balance";
    let mut doms = Domains(Vec::new());
    doms.define(&dir, &domain(name, 2, 64, ""), name);
    virsh(&["start", name]);
    let source = numaplace_observe::FsSource::live();
    let pid = numaplace_libvirt::drift::qemu_pid(&source, name).expect("the domain's QEMU process");
    let mut pin = LivePin::live(Affinity::default());
    let mut sys = Live::default();
    let online = std::fs::read_to_string("/sys/devices/system/cpu/online").expect("online");
    let set = |s: &str| s.trim().parse::<numaplace_topo::CpuSet>().expect("list");
    let floating = Target { before: Pins::Floating(set(&online)), after: Pins::Floating(set("0")) };
    let done = pin.pin(&mut sys, pid, &floating);
    assert!(done.error.is_none(), "{done:?}");
    assert_eq!(vcpupin(name), vec!["0:0", "1:0"]);
    assert!(virsh(&["emulatorpin", name]).contains("*: 0\n"), "{}", virsh(&["emulatorpin", name]));
    assert!(pin.restore(&mut sys));
    assert_eq!(vcpupin(name), vec![format!("0:{}", online.trim()), format!("1:{}", online.trim())]);

    // A dedicated domain re-planned elsewhere gets its vCPUs one CPU
    // each, and a restore puts its own 1:1 pins back, never every CPU.
    let last = set(&online).iter().last().expect("a CPU");
    let dedicated = Target {
        before: Pins::Dedicated { vcpus: vec![(0, 0), (1, last)], emulator: set("0") },
        after: Pins::Dedicated { vcpus: vec![(0, last), (1, 0)], emulator: set(&last.to_string()) },
    };
    pin.pin(&mut sys, pid, &Target { before: floating.before.clone(), after: dedicated.before.clone() });
    let done = pin.pin(&mut sys, pid, &dedicated);
    assert!(done.error.is_none(), "{done:?}");
    assert_eq!(vcpupin(name), vec![format!("0:{last}"), "1:0".to_string()]);
    assert!(virsh(&["emulatorpin", name]).contains(&format!("*: {last}\n")), "{}", virsh(&["emulatorpin", name]));
    assert!(pin.restore(&mut sys));
    assert_eq!(vcpupin(name), vec!["0:0".to_string(), format!("1:{last}")]);
}

// Issue 37: a live host read while VMs come and go, apply that never
// leaves the host worse, drift that tells a stopped domain from drift.
// These tests' domains are named `np-live-*`.

/// Writes `xml` to `dir/NAME.xml` and returns the path.
fn write_domain(dir: &Path, name: &str, xml: &str) -> String {
    let path = dir.join(format!("{name}.xml"));
    std::fs::write(&path, xml).expect("write");
    path.to_string_lossy().into_owned()
}

#[test]
fn reading_the_host_while_a_domain_comes_and_goes_never_fails() {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    if !require_libvirt() {
        return;
    }
    let _turn = LIBVIRT.lock().unwrap_or_else(|e| e.into_inner());
    let dir = workdir("churn");
    let name = "np-live-churn";
    let _doms = Domains(vec![name.to_string()]);
    let path = write_domain(&dir, name, &domain(name, 1, 64, ""));
    let stop = Arc::new(AtomicBool::new(false));
    // Defines and undefines the domain, starting and stopping it every
    // third round, until told to stop or for at most 3000 rounds.
    let churn = {
        let stop = Arc::clone(&stop);
        std::thread::spawn(move || {
            let run = |args: &[&str]| {
                let _ = Command::new("virsh").arg("-c").arg(URI).args(args).output();
            };
            let mut rounds = 0u32;
            while !stop.load(Ordering::Relaxed) && rounds < 3000 {
                run(&["define", &path]);
                if rounds.is_multiple_of(3) {
                    run(&["start", name]);
                    run(&["destroy", name]);
                }
                run(&["undefine", name]);
                rounds += 1;
            }
            rounds
        })
    };
    let mut failures = Vec::new();
    for i in 0..20 {
        let vm = format!("name=np-live-churn-new{i},vcpus=1,memory=64MiB");
        let runs = [plan(&["--vm", &vm]), numaplace(&["lint", "--state", "libvirt"]), numaplace(&["drift"])];
        for (what, o) in ["plan --state libvirt", "lint --state libvirt", "drift"].iter().zip(runs) {
            if o.status.code() == Some(2) || text(&o.stderr).contains("error") {
                failures.push(format!("{what} (run {i}): exit {:?}: {}", o.status.code(), text(&o.stderr)));
            }
        }
    }
    stop.store(true, Ordering::Relaxed);
    let rounds = churn.join().expect("the churn loop");
    assert!(rounds > 0, "the domain was never defined beside the runs");
    assert!(failures.is_empty(), "{} of 60 runs failed:\n{}", failures.len(), failures.join("\n"));
}

/// The findings `lint --state libvirt` has on this tests' domains (the
/// daemon is shared: other domains are not these tests' to judge).
fn lint_findings_on(prefix: &str) -> Vec<serde_json::Value> {
    let o = numaplace(&["lint", "--state", "libvirt", "--format", "json"]);
    assert_ne!(o.status.code(), Some(2), "{}", text(&o.stderr));
    let doc = json(&o);
    let all = doc.as_array().cloned().or_else(|| doc["findings"].as_array().cloned()).unwrap_or_default();
    all.into_iter().filter(|f| f.to_string().contains(prefix)).collect()
}

#[test]
fn a_dedicated_vm_applied_beside_a_shared_one_narrows_it_and_lints_clean() {
    if !require_libvirt() {
        return;
    }
    let _turn = LIBVIRT.lock().unwrap_or_else(|e| e.into_inner());
    let dir = workdir("narrow");
    let (shared, dedicated) = ("np-live-shared", "np-live-dedicated");
    let _doms = Domains(vec![shared.to_string(), dedicated.to_string()]);
    for name in [shared, dedicated] {
        let _ = Command::new("virsh").args(["-c", URI, "destroy", name]).output();
        let _ = Command::new("virsh").args(["-c", URI, "undefine", name]).output();
    }
    let save = |o: &Output, file: &str| -> String {
        assert_eq!(o.status.code(), Some(0), "{}{}", text(&o.stdout), text(&o.stderr));
        let path = dir.join(file);
        std::fs::write(&path, &o.stdout).expect("write");
        path.to_string_lossy().into_owned()
    };

    // A shared VM planned with --accel tcg, applied without it: the plan
    // says how the guest runs.
    let o = plan(&[
        "--vm",
        &format!("name={shared},vcpus=1,memory=64MiB,cpu=shared"),
        "--accel",
        "tcg",
        "--format",
        "json",
    ]);
    let first = save(&o, "shared.json");
    assert_eq!(json(&o)["accel"], "tcg");
    let o = numaplace(&["apply", "--plan", &first, "--accel", "kvm", "--dry-run"]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o.stderr));
    assert!(text(&o.stderr).contains("was planned with --accel tcg"), "{}", text(&o.stderr));
    let o = numaplace(&["apply", "--plan", &first]);
    assert_eq!(o.status.code(), Some(0), "{}{}", text(&o.stdout), text(&o.stderr));
    let stored = virsh(&["dumpxml", "--inactive", shared]);
    assert!(stored.contains("<domain type='qemu'"), "{stored}");
    virsh(&["start", shared]);

    // A dedicated VM beside it takes one of the CPUs it floats over; the
    // plan records the shared VM's narrower set, and apply makes it.
    let o = plan(&["--vm", &format!("name={dedicated},vcpus=1,memory=64MiB"), "--accel", "tcg", "--format", "json"]);
    let second = save(&o, "dedicated.json");
    let doc = json(&o);
    let pu = doc["placements"][0]["pins"][0].as_u64().expect("pinned");
    let held = doc["held"].as_array().expect("held");
    let entry = held.iter().find(|h| h["vm"] == shared).expect("the shared VM is held");
    assert_eq!(entry["managed"], true);
    let after: Vec<u64> =
        entry["cpus_after"].as_array().expect("cpus_after").iter().filter_map(|c| c.as_u64()).collect();
    assert!(!after.is_empty() && !after.contains(&pu), "{entry}");

    // The dry run shows the shared VM's live pins as before and the very
    // definition it would write.
    let o = numaplace(&["apply", "--plan", &second, "--dry-run"]);
    assert_eq!(o.status.code(), Some(0), "{}{}", text(&o.stdout), text(&o.stderr));
    let out = text(&o.stdout);
    assert!(out.contains(&format!("{shared} (running): dry-run")), "{out}");
    assert!(out.contains("changed by the plan: it floats over CPUs"), "{out}");
    assert!(out.contains("    | <domain type='qemu'>"), "{out}");
    // Naming only the new VM still narrows the shared one: nothing is
    // left floating over a dedicated CPU.
    let o = numaplace(&["apply", "--plan", &second, "--vm", dedicated, "--dry-run"]);
    assert_eq!(o.status.code(), Some(0), "{}{}", text(&o.stdout), text(&o.stderr));
    assert!(text(&o.stdout).contains(&format!("{shared} (running): dry-run")), "{}", text(&o.stdout));

    let o = numaplace(&["apply", "--plan", &second, "--format", "json"]);
    assert_eq!(o.status.code(), Some(0), "{}{}", text(&o.stdout), text(&o.stderr));
    let log = json(&o);
    let vms = log["vms"].as_array().expect("vms");
    assert_eq!(vms.iter().map(|v| v["vm"].as_str().unwrap_or("")).collect::<Vec<_>>(), vec![shared, dedicated]);
    assert!(vms.iter().all(|v| v["outcome"] == "applied"), "{log}");
    let list = |v: &[u64]| v.iter().map(u64::to_string).collect::<Vec<_>>().join(",");
    // Live and persistent, the shared VM keeps off the dedicated CPU.
    for line in virsh(&["vcpupin", shared]).lines().filter(|l| l.trim_start().starts_with('0')) {
        assert!(line.trim_end().ends_with(&list(&after)), "{line}");
    }
    assert!(virsh(&["dumpxml", "--inactive", shared]).contains(&format!("cpuset='{}'", list(&after))));
    let findings = lint_findings_on("np-live-");
    assert!(findings.is_empty(), "lint --state libvirt after apply: {findings:?}");
}

#[test]
fn a_plan_for_another_host_is_refused_unless_forced() {
    if !require_libvirt() {
        return;
    }
    let _turn = LIBVIRT.lock().unwrap_or_else(|e| e.into_inner());
    let dir = workdir("foreign");
    let name = "np-live-foreign";
    let _doms = Domains(vec![name.to_string()]);
    let _ = Command::new("virsh").args(["-c", URI, "undefine", name]).output();
    // Two nodes of two CPUs: not this machine, whose VM still fits it
    // (CPU 0) when forced.
    let o = numaplace(&[
        "plan",
        "--host",
        "2 sockets x 2 cores x 1 thread, 4GiB per node",
        "--reserved-cpus",
        "1-3",
        "--vm",
        &format!("name={name},vcpus=1,memory=64MiB"),
        "--accel",
        "tcg",
        "--format",
        "json",
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    assert_eq!(json(&o)["host_topology"]["nodes"][1]["cpus"], serde_json::json!([2, 3]));
    let path = dir.join("foreign.json");
    std::fs::write(&path, &o.stdout).expect("write");
    let file = path.to_string_lossy().into_owned();

    let o = numaplace(&["apply", "--plan", &file]);
    assert_eq!(o.status.code(), Some(2), "{}{}", text(&o.stdout), text(&o.stderr));
    let err = text(&o.stderr);
    assert!(err.contains("was made for host `2 sockets x 2 cores x 1 thread, 4GiB per node`, not this one"), "{err}");
    assert!(err.contains("--force-host"), "{err}");
    assert!(virsh(&["list", "--all", "--name"]).lines().all(|l| l.trim() != name), "a refused plan was applied");

    let o = numaplace(&["apply", "--plan", &file, "--force-host"]);
    assert_eq!(o.status.code(), Some(0), "{}{}", text(&o.stdout), text(&o.stderr));
    assert!(text(&o.stderr).contains("WARNING: --force-host"), "{}", text(&o.stderr));
    assert!(virsh(&["dumpxml", "--inactive", name]).contains("<vcpupin vcpu='0' cpuset='0'/>"));
}

#[test]
fn a_stopped_domain_is_stopped_not_drift() {
    if !require_libvirt() {
        return;
    }
    let _turn = LIBVIRT.lock().unwrap_or_else(|e| e.into_inner());
    let dir = workdir("stopped");
    let name = "np-live-stopped";
    let mut doms = Domains(Vec::new());
    doms.define(&dir, &domain(name, 1, 64, &format!("  <cputune>\n{}  </cputune>\n", pins(&[0]))), name);
    let o = numaplace(&["drift", "--vm", name]);
    assert_eq!(o.status.code(), Some(0), "{}{}", text(&o.stdout), text(&o.stderr));
    assert!(text(&o.stdout).contains(&format!("{name} (shut off): stopped (not drift)")), "{}", text(&o.stdout));
    let o = numaplace(&["drift", "--vm", name, "--format", "json"]);
    assert_eq!(o.status.code(), Some(0));
    assert_eq!(json(&o)["vms"][0]["verdict"], "stopped");
    // A check that every VM runs asks for it.
    let o = numaplace(&["drift", "--vm", name, "--stopped-is-drift"]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o.stdout));
    assert!(text(&o.stdout).contains("drift: the domain is defined but not running"), "{}", text(&o.stdout));
}

#[test]
fn a_dump_directory_that_is_empty_or_truncated_is_named() {
    let dir = workdir("bad-dump");
    let host = corona();
    let d = dir.to_string_lossy().into_owned();
    let o = numaplace(&["plan", "--host", &host, "--state", &d, "--vm", "name=a,vcpus=1,memory=1GiB"]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o.stdout));
    assert!(text(&o.stderr).contains("no domain XML file"), "{}", text(&o.stderr));
    let whole = domain("cut", 2, 1024, "");
    std::fs::write(dir.join("cut.xml"), &whole[..whole.len() - 30]).expect("write");
    // plan leaves the domain that does not read out, names it and plans
    // (issue 52); lint reports it and ends with exit 2.
    let o = numaplace(&["plan", "--host", &host, "--state", &d, "--vm", "name=a,vcpus=1,memory=1GiB"]);
    assert_eq!(o.status.code(), Some(0), "{}{}", text(&o.stdout), text(&o.stderr));
    let err = text(&o.stderr);
    assert!(err.contains(&format!("{d}/cut.xml: left out")), "{err}");
    assert!(!err.contains("line 1, column 1"), "{err}");
    let o = numaplace(&["lint", "--host", &host, "--state", &d]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o.stdout));
    let err = text(&o.stderr);
    assert!(err.contains(&format!("{d}/cut.xml")), "{err}");
    assert!(!err.contains("line 1, column 1"), "{err}");
}

#[test]
fn numaplace_vms_read_back_count_as_planned() {
    // A mixed VM and an overcommitting shared VM, written as domains by
    // `plan --format libvirt`, then read back from a dump directory: the
    // state counts them as the plan did (pins, floating vCPUs, charged
    // memory), through numaplace's mark.
    let dir = workdir("read-back");
    let host = corona();
    let pool = ["--shared-cpus", "0-2,48-50"];
    let vms = [
        "--vm",
        "name=m,vcpus=4,memory=4GiB,shared_vcpus=0-1",
        "--vm",
        "name=s,vcpus=4,memory=8GiB,cpu=shared,overcommit=4,memory_overcommit=2",
    ];
    let args = |format: &str| -> Vec<String> {
        let mut a: Vec<String> = ["plan", "--host", &host].iter().map(|s| s.to_string()).collect();
        a.extend(pool.iter().chain(&vms).map(|s| s.to_string()));
        a.extend(["--format".to_string(), format.to_string()]);
        a
    };
    let run = |a: Vec<String>| numaplace(&a.iter().map(String::as_str).collect::<Vec<_>>());
    let o = run(args("json"));
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    let planned = json(&o);
    let o = run(args("libvirt"));
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    for part in text(&o.stdout).split("<!-- numaplace: domain ").skip(1) {
        let (name, xml) = part.split_once(" -->").expect("a domain after its comment");
        std::fs::write(dir.join(format!("{name}.xml")), xml.trim()).expect("write");
    }
    let d = dir.to_string_lossy().into_owned();
    let mut a: Vec<&str> = vec!["plan", "--host", &host, "--state", &d];
    a.extend(pool);
    a.extend(["--vm", "name=new,vcpus=2,memory=1GiB", "--format", "json"]);
    let o = numaplace(&a);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    assert!(!text(&o.stderr).contains("warning"), "{}", text(&o.stderr));
    let doc = json(&o);
    let find = |list: &serde_json::Value, vm: &str| -> serde_json::Value {
        list.as_array().and_then(|l| l.iter().find(|e| e["vm"] == vm).cloned()).unwrap_or_else(|| panic!("{vm}"))
    };
    let (m, held_m) = (find(&planned["placements"], "m"), find(&doc["held"], "m"));
    assert_eq!(held_m["cpu_mode"], "mixed");
    assert_eq!(held_m["pins"], m["pins"]);
    assert_eq!(held_m["cpus"], m["cpuset"]);
    let (s, held_s) = (find(&planned["placements"], "s"), find(&doc["held"], "s"));
    assert_eq!(held_s["pins"], s["pins"]);
    assert_eq!(held_s["memory"], s["charged"], "the shared VM is charged what the plan charged it");
}

#[test]
fn a_plan_chained_from_a_plan_document_narrows_the_shared_vm_it_carries() {
    // The operator's way without --state libvirt: plan, apply, plan again
    // with the first plan as --state, apply with the default flags.
    if !require_libvirt() {
        return;
    }
    let _turn = LIBVIRT.lock().unwrap_or_else(|e| e.into_inner());
    let dir = workdir("chained");
    let (shared, dedicated) = ("np-live-chain-shared", "np-live-chain-dedicated");
    let _doms = Domains(vec![shared.to_string(), dedicated.to_string()]);
    for name in [shared, dedicated] {
        let _ = Command::new("virsh").args(["-c", URI, "undefine", name]).output();
    }
    let mut args: Vec<String> = vec!["plan".into()];
    args.extend(reserve_all_but_two());
    args.extend(
        ["--vm", &format!("name={shared},vcpus=1,memory=64MiB,cpu=shared"), "--accel", "tcg"].map(String::from),
    );
    args.extend(["--format", "json"].map(String::from));
    let o = numaplace(&args.iter().map(String::as_str).collect::<Vec<_>>());
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    let first = dir.join("first.json");
    std::fs::write(&first, &o.stdout).expect("write");
    let first = first.to_string_lossy().into_owned();
    let o = numaplace(&["apply", "--plan", &first]);
    assert_eq!(o.status.code(), Some(0), "{}{}", text(&o.stdout), text(&o.stderr));

    let o = numaplace(&[
        "plan",
        "--state",
        &first,
        "--vm",
        &format!("name={dedicated},vcpus=1,memory=64MiB"),
        "--format",
        "json",
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    let doc = json(&o);
    // The first plan's guest type is carried with its VMs.
    assert_eq!(doc["accel"], "tcg");
    let carried = doc["placements"].as_array().and_then(|l| l.iter().find(|p| p["vm"] == shared).cloned());
    let carried = carried.expect("the shared VM is carried");
    let pu = doc["placements"][1]["pins"][0].clone();
    assert!(!carried["cpuset"].as_array().expect("cpuset").contains(&pu), "{carried}");
    let second = dir.join("second.json");
    std::fs::write(&second, &o.stdout).expect("write");
    let second = second.to_string_lossy().into_owned();

    let o = numaplace(&["apply", "--plan", &second, "--format", "json"]);
    assert_eq!(o.status.code(), Some(0), "{}{}", text(&o.stdout), text(&o.stderr));
    let log = json(&o);
    assert_eq!(log["vms"][0]["vm"], shared);
    assert_eq!(log["vms"][0]["outcome"], "applied");
    assert_eq!(log["vms"][1]["vm"], dedicated);
    let cpus: Vec<String> = carried["cpuset"].as_array().expect("cpuset").iter().map(|c| c.to_string()).collect();
    let stored = virsh(&["dumpxml", "--inactive", shared]);
    assert!(stored.contains(&format!("cpuset='{}'", cpus.join(","))), "{stored}");
    assert!(stored.contains("<domain type='qemu'"), "{stored}");
    let new = virsh(&["dumpxml", "--inactive", dedicated]);
    assert!(new.contains("<domain type='qemu'"), "{new}");
}

#[test]
fn a_hand_made_floating_domain_is_narrowed_by_default_vcpus_and_emulator_live_and_persistent() {
    if !require_libvirt() {
        return;
    }
    let _turn = LIBVIRT.lock().unwrap_or_else(|e| e.into_inner());
    let dir = workdir("not-ours");
    let (other, dedicated) = ("np-live-not-ours", "np-live-beside");
    let mut doms = Domains(Vec::new());
    let _ = Command::new("virsh").args(["-c", URI, "undefine", dedicated]).output();
    doms.0.push(dedicated.to_string());
    // Floating over CPUs 0-1, defined by hand (not numaplace's), with no
    // <emulatorpin>, running.
    doms.define(
        &dir,
        &domain(other, 1, 64, "").replace("<vcpu placement='static'>", "<vcpu placement='static' cpuset='0-1'>"),
        other,
    );
    virsh(&["start", other]);
    let o = plan(&["--vm", &format!("name={dedicated},vcpus=1,memory=64MiB"), "--accel", "tcg", "--format", "json"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    let doc = json(&o);
    let pu = doc["placements"].as_array().and_then(|l| l.iter().find(|p| p["vm"] == dedicated).cloned());
    let pu = pu.expect("placed")["pins"][0].as_u64().expect("pinned") as u32;
    let left: u32 = 1 - pu.min(1);
    let path = dir.join("plan.json");
    std::fs::write(&path, &o.stdout).expect("write");
    let file = path.to_string_lossy().into_owned();

    // The dry run shows each write: the vCPU, and the emulator threads
    // that had no pin, live; the definition with <emulatorpin> added.
    let o = numaplace(&["apply", "--plan", &file, "--dry-run"]);
    assert_eq!(o.status.code(), Some(0), "{}{}", text(&o.stdout), text(&o.stderr));
    let out = text(&o.stdout);
    assert!(out.contains(&format!("{other} (running): dry-run")), "{out}");
    assert!(out.contains(&format!("vcpupin --live vCPU 0: CPUs 0-1 -> {left}")), "{out}");
    assert!(out.contains(&format!("emulatorpin --live: CPUs 0-1 -> {left}")), "{out}");
    assert!(out.contains(&format!("<emulatorpin cpuset='{left}'/>")), "{out}");
    assert!(virsh(&["dumpxml", "--inactive", other]).contains("cpuset='0-1'"), "a dry run wrote");

    let o = numaplace(&["apply", "--plan", &file]);
    assert_eq!(o.status.code(), Some(0), "{}{}", text(&o.stdout), text(&o.stderr));
    let stored = virsh(&["dumpxml", "--inactive", other]);
    assert!(stored.contains(&format!("cpuset='{left}'>1</vcpu>")), "{stored}");
    assert!(stored.contains(&format!("<emulatorpin cpuset='{left}'/>")), "{stored}");
    assert!(!stored.contains("numaplace:vm"), "{stored}");
    assert!(vcpupin(other).contains(&format!("0:{left}")), "{:?}", vcpupin(other));
    assert!(virsh(&["emulatorpin", other]).contains(&format!("*: {left}")), "{}", virsh(&["emulatorpin", other]));

    // drift --plan checks the narrowed domain too: as planned now, drift
    // once its vCPU floats over the dedicated CPU again.
    let o = numaplace(&["drift", "--plan", &file, "--vm", other]);
    assert_eq!(o.status.code(), Some(0), "{}{}", text(&o.stdout), text(&o.stderr));
    assert!(text(&o.stdout).contains(&format!("{other} (running): as planned")), "{}", text(&o.stdout));
    virsh(&["vcpupin", other, "--vcpu", "0", "--cpulist", "0-1", "--live"]);
    let o = numaplace(&["drift", "--plan", &file, "--vm", other, "--format", "json"]);
    assert_eq!(o.status.code(), Some(1), "{}{}", text(&o.stdout), text(&o.stderr));
    let codes = json(&o)["vms"][0]["differences"].to_string();
    assert!(codes.contains("\"vcpu\"") || codes.contains("\"on-dedicated\""), "{}", text(&o.stdout));
    // Its emulator threads floating back over the dedicated CPU is drift
    // too, though the plan wrote no pin for them.
    virsh(&["vcpupin", other, "--vcpu", "0", "--cpulist", &left.to_string(), "--live"]);
    virsh(&["emulatorpin", other, "--cpulist", "0-1", "--live"]);
    let o = numaplace(&["drift", "--plan", &file, "--vm", other, "--format", "json"]);
    assert_eq!(o.status.code(), Some(1), "{}{}", text(&o.stdout), text(&o.stderr));
    assert!(
        json(&o)["vms"][0]["differences"].to_string().contains("emulator threads may run on CPUs"),
        "{}",
        text(&o.stdout)
    );
}

/// A running domain pinned 1:1 to `cpu`, defined and started by hand.
fn pinned_running(doms: &mut Domains, dir: &Path, name: &str, cpu: u32) {
    doms.define(dir, &domain(name, 1, 64, &format!("  <cputune>\n{}  </cputune>\n", pins(&[cpu]))), name);
    virsh(&["start", name]);
}

/// `numaplace serve` on a SQLite file in `dir`, stopped when dropped.
struct Serve {
    child: std::process::Child,
    url: String,
}

impl Serve {
    fn start(dir: &Path) -> Serve {
        use std::io::{BufRead, BufReader};
        let db = format!("sqlite:{}", dir.join("fleet.db").display());
        let mut child = Command::new(env!("CARGO_BIN_EXE_numaplace"))
            .args(["serve", "--db", &db, "--listen", "127.0.0.1:0"])
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("serve");
        let mut lines = BufReader::new(child.stderr.take().expect("stderr")).lines();
        let url = loop {
            let line = lines.next().expect("serve stopped").expect("read");
            if let Some(u) = line.split("listening on ").nth(1) {
                break u.trim().to_string();
            }
        };
        // Keep draining its log, so it never blocks on a full pipe.
        std::thread::spawn(move || for _ in lines {});
        Serve { child, url }
    }

    /// One JSON POST: the status and the body.
    fn post(&self, path: &str, body: &str) -> (u16, String) {
        use std::io::{Read, Write};
        let addr = self.url.trim_start_matches("http://");
        let mut s = std::net::TcpStream::connect(addr).expect("connect");
        let head = format!(
            "POST {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
            body.len()
        );
        s.write_all(head.as_bytes()).and_then(|_| s.write_all(body.as_bytes())).expect("send");
        let mut out = String::new();
        s.read_to_string(&mut out).expect("read");
        let (head, body) = out.split_once("\r\n\r\n").unwrap_or((&out, ""));
        let status = head.split_whitespace().nth(1).and_then(|c| c.parse().ok()).unwrap_or(0);
        (status, body.to_string())
    }
}

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn defined(name: &str) -> bool {
    virsh(&["list", "--all", "--name"]).lines().any(|l| l.trim() == name)
}

#[test]
fn a_stale_plan_is_refused_naming_the_holder_and_nothing_is_written() {
    // Issue 45's case: a plan made from a dump that left out a running
    // domain pinned to CPU 1 puts a new dedicated VM there.
    if !require_libvirt() {
        return;
    }
    let _turn = LIBVIRT.lock().unwrap_or_else(|e| e.into_inner());
    let dir = workdir("stale");
    let (stopped, running, new) = ("np-stale-ds", "np-stale-dr", "np-stale-da");
    let mut doms = Domains(Vec::new());
    let _ = Command::new("virsh").args(["-c", URI, "undefine", new]).output();
    doms.0.push(new.to_string());
    doms.define(&dir, &domain(stopped, 1, 64, ""), stopped);
    pinned_running(&mut doms, &dir, running, 1);
    let dump = dir.join("dump");
    std::fs::create_dir_all(&dump).expect("dump dir");
    let before = virsh(&["dumpxml", "--inactive", stopped]);
    std::fs::write(dump.join(format!("{stopped}.xml")), &before).expect("write");
    // Every CPU but 1 reserved: the plan can only pick CPU 1.
    let online: numaplace_topo::CpuSet =
        std::fs::read_to_string("/sys/devices/system/cpu/online").expect("online").trim().parse().expect("list");
    let reserved: numaplace_topo::CpuSet = online.iter().filter(|&c| c != 1).collect();
    let o = numaplace(&[
        "plan",
        "--state",
        &dump.to_string_lossy(),
        "--reserved-cpus",
        &reserved.to_list(),
        "--vm",
        &format!("name={new},vcpus=1,memory=64MiB"),
        "--accel",
        "tcg",
        "--format",
        "json",
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    let doc = json(&o);
    let placed = doc["placements"].as_array().and_then(|l| l.iter().find(|p| p["vm"] == new).cloned());
    assert_eq!(placed.expect("placed")["pins"], serde_json::json!([1]));
    // What the plan assumed: the stopped domain it planned around.
    assert!(doc["held"].as_array().expect("held").iter().any(|h| h["vm"] == stopped), "{doc}");
    let stale = dir.join("stale.json");
    std::fs::write(&stale, &o.stdout).expect("write");
    let stale = stale.to_string_lossy().into_owned();

    for extra in [&["--dry-run"][..], &[]] {
        let mut args = vec!["apply", "--plan", &stale];
        args.extend(extra);
        let o = numaplace(&args);
        assert_eq!(o.status.code(), Some(1), "{}{}", text(&o.stdout), text(&o.stderr));
        let out = text(&o.stdout);
        assert!(out.contains("refused: nothing was written"), "{out}");
        assert!(out.contains(&format!("\n{new} (not running): refused\n")), "{out}");
        assert!(out.contains(&format!("{new} is planned on CPUs 1, which domain {running} holds now")), "{out}");
    }
    let o = numaplace(&["apply", "--plan", &stale, "--format", "json"]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o.stderr));
    let log = json(&o);
    let held = log["refusals"].as_array().expect("refusals").iter().find(|r| r["code"] == "held").cloned();
    let held = held.unwrap_or_else(|| panic!("{log}"));
    assert_eq!((held["vm"].as_str(), held["holder"].as_str()), (Some(new), Some(running)));
    assert_eq!(log["vms"][0]["outcome"], "refused");
    // Nothing written: the new VM is not defined, the others are as they were.
    assert!(!defined(new), "a refused plan was applied");
    assert_eq!(virsh(&["dumpxml", "--inactive", stopped]), before);
    assert!(vcpupin(running).contains(&"0:1".to_string()), "{:?}", vcpupin(running));
}

#[test]
fn force_host_never_widens_a_dedicated_vm() {
    // Issue 45's case: a plan for a larger twin pins a running VM to a
    // CPU this host lacks; --force-host used to float it over every CPU.
    if !require_libvirt() {
        return;
    }
    let _turn = LIBVIRT.lock().unwrap_or_else(|e| e.into_inner());
    let dir = workdir("force-wide");
    let name = "np-live-forced";
    let mut doms = Domains(Vec::new());
    pinned_running(&mut doms, &dir, name, 1);
    let persistent = virsh(&["dumpxml", "--inactive", name]);
    let online: numaplace_topo::CpuSet =
        std::fs::read_to_string("/sys/devices/system/cpu/online").expect("online").trim().parse().expect("list");
    let beyond = online.last().expect("a CPU") + 1;
    // A twin with one CPU more than this machine, every other reserved.
    let o = numaplace(&[
        "plan",
        "--host",
        &format!("1 socket x {} cores x 1 thread, 4GiB per node", beyond + 1),
        "--reserved-cpus",
        &format!("0-{}", beyond - 1),
        "--vm",
        &format!("name={name},vcpus=1,memory=64MiB"),
        "--accel",
        "tcg",
        "--format",
        "json",
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    assert_eq!(json(&o)["placements"][0]["pins"], serde_json::json!([beyond]));
    let path = dir.join("twin.json");
    std::fs::write(&path, &o.stdout).expect("write");
    let file = path.to_string_lossy().into_owned();

    let o = numaplace(&["apply", "--plan", &file, "--force-host", "--format", "json"]);
    assert_eq!(o.status.code(), Some(1), "{}{}", text(&o.stdout), text(&o.stderr));
    let log = json(&o);
    assert_eq!(log["refusals"][0]["code"], "not-on-host", "{log}");
    assert!(log["refusals"][0]["text"].as_str().unwrap_or("").contains(&format!("CPUs {beyond}")), "{log}");
    // Neither live nor persistent was touched.
    assert_eq!(vcpupin(name), vec!["0:1".to_string()]);
    assert_eq!(virsh(&["dumpxml", "--inactive", name]), persistent);
    // drift --plan does not call it "as planned".
    let o = numaplace(&["drift", "--plan", &file, "--vm", name, "--format", "json"]);
    assert_eq!(o.status.code(), Some(1), "{}{}", text(&o.stdout), text(&o.stderr));
    assert_eq!(json(&o)["vms"][0]["differences"][0]["code"], "not-on-host", "{}", text(&o.stdout));
}

#[test]
fn apply_refuses_a_vm_named_like_a_path() {
    let dir = workdir("path-name");
    let o = numaplace(&["plan", "--host", &corona(), "--vm", "name=okname,vcpus=1,memory=1GiB", "--format", "json"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    let doc = text(&o.stdout).replace("\"okname\"", "\"x/../y\"");
    let path = dir.join("plan.json");
    std::fs::write(&path, doc).expect("write");
    let o = numaplace(&["apply", "--plan", &path.to_string_lossy(), "--host", &corona(), "--dry-run"]);
    assert_eq!(o.status.code(), Some(2), "{}{}", text(&o.stdout), text(&o.stderr));
    let err = text(&o.stderr);
    assert!(err.contains("placements[0].vm: \"x/../y\" is not a domain name libvirt accepts"), "{err}");
}

#[test]
fn the_operators_round_on_one_host_refuses_the_stale_plan_and_writes_nothing() {
    // docs/operator.md's order on a real libvirtd: profile, lint, plan,
    // apply --dry-run, apply, drift, top, balance --dry-run; and a plan
    // made stale on purpose (planned before another was applied).
    if !require_libvirt() {
        return;
    }
    let _turn = LIBVIRT.lock().unwrap_or_else(|e| e.into_inner());
    let dir = workdir("round");
    let (float, db, late) = ("np-round-float", "np-round-db", "np-round-late");
    let mut doms = Domains(Vec::new());
    for name in [db, late] {
        let _ = Command::new("virsh").args(["-c", URI, "destroy", name]).output();
        let _ = Command::new("virsh").args(["-c", URI, "undefine", name]).output();
        doms.0.push(name.to_string());
    }
    // A hand-made VM floating over every CPU, running.
    doms.define(&dir, &domain(float, 1, 64, ""), float);
    virsh(&["start", float]);

    // 1. The profile.
    let profile = dir.join("host.toml");
    std::fs::write(&profile, "reserved_memory = \"64MiB\"\naccel = \"tcg\"\n").expect("write");
    let profile = profile.to_string_lossy().into_owned();
    let cfg = ["--host-config", profile.as_str()];
    let run = |args: &[&str]| numaplace(&[args, &cfg[..]].concat());
    // 2. lint what is there.
    let o = run(&["lint", "--state", "libvirt", "--format", "json"]);
    assert_ne!(o.status.code(), Some(2), "{}", text(&o.stderr));
    // 3. plan a dedicated VM, and (the stale one) another from the same
    // picture of the host.
    let save = |o: &Output, file: &str| -> String {
        assert_eq!(o.status.code(), Some(0), "{}{}", text(&o.stdout), text(&o.stderr));
        let path = dir.join(file);
        std::fs::write(&path, &o.stdout).expect("write");
        path.to_string_lossy().into_owned()
    };
    let vm = |name: &str| format!("name={name},vcpus=1,memory=64MiB");
    let o = run(&["plan", "--state", "libvirt", "--vm", &vm(db), "--format", "json"]);
    let plan = save(&o, "plan.json");
    let pu = json(&o)["placements"].as_array().and_then(|l| l.iter().find(|p| p["vm"] == db).cloned());
    let pu = pu.expect("placed")["pins"][0].clone();
    let o = run(&["plan", "--state", "libvirt", "--vm", &vm(late), "--format", "json"]);
    let stale = save(&o, "late.json");
    let late_pu = json(&o)["placements"].as_array().and_then(|l| l.iter().find(|p| p["vm"] == late).cloned());
    assert_eq!(late_pu.expect("placed")["pins"][0], pu, "both plans take the same free CPU");
    // 4. apply --dry-run shows the floating VM narrowed, writes nothing.
    let o = run(&["apply", "--plan", &plan, "--dry-run"]);
    assert_eq!(o.status.code(), Some(0), "{}{}", text(&o.stdout), text(&o.stderr));
    assert!(text(&o.stdout).contains(&format!("{float} (running): dry-run")), "{}", text(&o.stdout));
    assert!(!defined(db));
    // 5. apply.
    let o = run(&["apply", "--plan", &plan]);
    assert_eq!(o.status.code(), Some(0), "{}{}", text(&o.stdout), text(&o.stderr));
    virsh(&["start", db]);
    // Applied twice, nothing changes the second time (the narrowed VM,
    // now pinned live to its one CPU, is what the plan assumed).
    let o = run(&["apply", "--plan", &plan]);
    assert_eq!(o.status.code(), Some(0), "{}{}", text(&o.stdout), text(&o.stderr));
    assert!(text(&o.stdout).contains(&format!("{db} (running): unchanged")), "{}", text(&o.stdout));
    // The stale plan: refused, the holder named, nothing written.
    let float_before = virsh(&["dumpxml", "--inactive", float]);
    let o = run(&["apply", "--plan", &stale, "--format", "json"]);
    assert_eq!(o.status.code(), Some(1), "{}{}", text(&o.stdout), text(&o.stderr));
    let log = json(&o);
    let refusals = log["refusals"].as_array().expect("refusals");
    assert!(refusals.iter().any(|r| r["code"] == "held" && r["holder"] == db && r["vm"] == late), "{log}");
    assert!(!defined(late), "the stale plan was applied");
    assert_eq!(virsh(&["dumpxml", "--inactive", float]), float_before);
    // 6. drift: both VMs as planned (the floating one narrowed).
    let o = numaplace(&["drift", "--plan", &plan, "--vm", db, "--vm", float]);
    assert_eq!(o.status.code(), Some(0), "{}{}", text(&o.stdout), text(&o.stderr));
    // 7. top, beside the definitions.
    let o = run(&["top", "--once", "--state", "libvirt"]);
    assert_eq!(o.status.code(), Some(0), "{}{}", text(&o.stdout), text(&o.stderr));
    assert!(text(&o.stdout).contains(db), "{}", text(&o.stdout));
    // 8. balance --dry-run: one look, nothing moved.
    let o = run(&["balance", "--dry-run", "--rounds", "0", "--interval", "10ms"]);
    assert_eq!(o.status.code(), Some(0), "{}{}", text(&o.stdout), text(&o.stderr));
    // 9. The agent against a fleet service: registers the host with its
    // profile, reports the domains (no conflict: the narrowed VM and the
    // dedicated one agree with what the service is told), and with
    // --apply defines the VM the service places here.
    let agent_vm = "np-round-agent";
    let _ = Command::new("virsh").args(["-c", URI, "undefine", agent_vm]).output();
    doms.0.push(agent_vm.to_string());
    let server = Serve::start(&dir);
    let agent = |apply: bool| {
        let mut a = vec!["agent", "--server", server.url.as_str(), "--name", "here", "--once", "--accel", "tcg"];
        if apply {
            a.push("--apply");
        }
        run(&a)
    };
    let o = agent(false);
    assert_eq!(o.status.code(), Some(0), "{}{}", text(&o.stdout), text(&o.stderr));
    assert!(text(&o.stderr).contains("0 conflicts"), "{}", text(&o.stderr));
    let body =
        format!(r#"{{"name": "{agent_vm}", "vcpus": 1, "memory": "64MiB", "constraints": {{"hosts": ["here"]}}}}"#);
    // Every CPU is held (the dedicated VM's, and the narrowed one's, now
    // pinned to its one CPU): the service knows, and places nothing.
    let (status, answer) = server.post("/v1/placements", &body);
    assert_eq!(status, 409, "{answer}");
    // The operator retires the dedicated VM; the next report frees its CPU.
    let _ = Command::new("virsh").args(["-c", URI, "destroy", db]).output();
    virsh(&["undefine", db]);
    let o = agent(false);
    assert_eq!(o.status.code(), Some(0), "{}{}", text(&o.stdout), text(&o.stderr));
    let (status, answer) = server.post("/v1/placements", &body);
    assert_eq!(status, 201, "{answer}");
    let placed: serde_json::Value = serde_json::from_str(&answer).expect("json");
    assert_eq!(placed["placement"]["pins"][0], pu, "the retired VM's CPU: {answer}");
    let o = agent(true);
    assert_eq!(o.status.code(), Some(0), "{}{}", text(&o.stdout), text(&o.stderr));
    assert!(text(&o.stderr).contains("1 defined"), "{}", text(&o.stderr));
    assert!(defined(agent_vm));
    drop(server);
    let lint = lint_findings_on("np-round-");
    assert!(lint.iter().all(|f| !f.to_string().contains("floating-on-dedicated")), "{lint:?}");
}

#[test]
fn two_operators_applying_at_once_cannot_double_book() {
    // Two plans made from the same picture of the host, each taking the
    // same free CPU, applied at the same moment: one is written, the
    // other refused (at its check, or at its commit's second read), and
    // no CPU ends held twice.
    if !require_libvirt() {
        return;
    }
    let _turn = LIBVIRT.lock().unwrap_or_else(|e| e.into_inner());
    let dir = workdir("race");
    let names = ["np-race-a", "np-race-b"];
    let mut doms = Domains(Vec::new());
    for name in names {
        let _ = Command::new("virsh").args(["-c", URI, "undefine", name]).output();
        doms.0.push(name.to_string());
    }
    let mut files = Vec::new();
    for name in names {
        let o = plan(&["--vm", &format!("name={name},vcpus=1,memory=64MiB"), "--accel", "tcg", "--format", "json"]);
        assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
        let path = dir.join(format!("{name}.json"));
        std::fs::write(&path, &o.stdout).expect("write");
        files.push((path.to_string_lossy().into_owned(), json(&o)["placements"].clone()));
    }
    let pin = |placements: &serde_json::Value, name: &str| {
        placements.as_array().and_then(|l| l.iter().find(|p| p["vm"] == name).map(|p| p["pins"][0].clone()))
    };
    assert_eq!(pin(&files[0].1, names[0]), pin(&files[1].1, names[1]), "both plans take the same CPU");
    let children: Vec<std::process::Child> = files
        .iter()
        .map(|(file, _)| {
            Command::new(env!("CARGO_BIN_EXE_numaplace"))
                .env("NUMAPLACE_HOST_CONFIG", concat!(env!("CARGO_TARGET_TMPDIR"), "/no-host-profile.toml"))
                .args(["apply", "--plan", file, "--format", "json"])
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .expect("run numaplace")
        })
        .collect();
    let outs: Vec<Output> = children.into_iter().map(|c| c.wait_with_output().expect("wait")).collect();
    let codes: Vec<Option<i32>> = outs.iter().map(|o| o.status.code()).collect();
    let all = outs.iter().map(|o| format!("{}{}", text(&o.stdout), text(&o.stderr))).collect::<Vec<_>>().join("\n");
    assert!(codes.contains(&Some(0)) && codes.contains(&Some(1)), "{codes:?}\n{all}");
    let loser = if codes[0] == Some(1) { 0 } else { 1 };
    let log = json(&outs[loser]);
    let winner = names[1 - loser];
    let refusal = log["refusals"].as_array().and_then(|r| r.iter().find(|r| r["holder"] == winner).cloned());
    let refusal = refusal.unwrap_or_else(|| panic!("{log}"));
    assert!(refusal["code"] == "held" || refusal["code"] == "moved", "{refusal}");
    assert!(defined(winner) && !defined(names[loser]), "{all}");
}

/// A running VM that apply refuses by the reservation check (before
/// libvirt is asked anything) is labelled as libvirt has it, running (it
/// was labelled "not running").
#[test]
fn a_running_vm_refused_by_the_reservation_check_is_labelled_running() {
    if !require_libvirt() {
        return;
    }
    let _turn = LIBVIRT.lock().unwrap_or_else(|e| e.into_inner());
    let dir = workdir("refused-label");
    let name = "np-test-refused-label";
    let doms = Domains(vec![name.to_string()]);
    let _ = Command::new("virsh").args(["-c", URI, "destroy", name]).output();
    let _ = Command::new("virsh").args(["-c", URI, "undefine", name]).output();
    let o = plan(&["--vm", &format!("name={name},vcpus=1,memory=64MiB"), "--format", "json"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    let pu = json(&o)["placements"][0]["pins"][0].to_string();
    let plan_path = dir.join("plan.json");
    std::fs::write(&plan_path, &o.stdout).expect("write");
    let plan_file = plan_path.to_string_lossy().into_owned();
    let o = numaplace(&["apply", "--plan", &plan_file, "--accel", "tcg"]);
    assert_eq!(o.status.code(), Some(0), "{}{}", text(&o.stdout), text(&o.stderr));
    virsh(&["start", name]);
    let o = numaplace(&["apply", "--plan", &plan_file, "--accel", "tcg", "--reserved-cpus", &pu]);
    let out = text(&o.stdout);
    assert_eq!(o.status.code(), Some(1), "{out}{}", text(&o.stderr));
    assert!(out.contains(&format!("{name} (running): refused")), "{out}");
    assert!(out.contains("which the host reserves for itself"), "{out}");
    drop(doms);
}

/// A Nova compute host on a real libvirtd: the service's VM is claimed
/// by instance UUID before the domain exists (the agent waits and defines
/// nothing); Nova then defines `np-nova-instance-0000002a` with that UUID
/// on a CPU of its own choosing, and `agent --apply --match-domains-by
/// uuid` pins that domain, by its libvirt name, to the claim.
#[test]
fn the_agent_pins_the_domain_an_orchestrator_defined_by_uuid_to_the_claim() {
    if !require_libvirt() {
        return;
    }
    let _turn = LIBVIRT.lock().unwrap_or_else(|e| e.into_inner());
    let dir = workdir("agent-uuid");
    let nova = "np-nova-instance-0000002a";
    let uuid = "6a1b4c2d-0000-4e5f-8a9b-0c1d2e3f4a5b";
    let mut doms = Domains(Vec::new());
    let _ = Command::new("virsh").args(["-c", URI, "undefine", nova]).output();
    let server = Serve::start(&dir);
    let reserved = reserve_all_but_two();
    let agent = |apply: bool| {
        let mut a: Vec<&str> =
            vec!["agent", "--server", server.url.as_str(), "--name", "here", "--once", "--accel", "tcg"];
        a.extend(["--match-domains-by", "uuid"]);
        a.extend(reserved.iter().map(String::as_str));
        if apply {
            a.push("--apply");
        }
        numaplace(&a)
    };
    let o = agent(false);
    assert_eq!(o.status.code(), Some(0), "{}{}", text(&o.stdout), text(&o.stderr));
    let body = format!(r#"{{"name": "{uuid}", "vcpus": 1, "memory": "64MiB", "constraints": {{"hosts": ["here"]}}}}"#);
    let (status, answer) = server.post("/v1/placements", &body);
    assert_eq!(status, 201, "{answer}");
    let placed: serde_json::Value = serde_json::from_str(&answer).expect("json");
    let pu = placed["placement"]["pins"][0].as_u64().expect("a pinned CPU") as u32;
    // Claimed, not defined yet: waiting; nothing is defined here.
    let o = agent(true);
    assert_eq!(o.status.code(), Some(0), "{}{}", text(&o.stdout), text(&o.stderr));
    assert!(
        text(&o.stderr).contains(&format!("waiting for the orchestrator to define: {uuid}")),
        "{}",
        text(&o.stderr)
    );
    assert!(!defined(uuid) && !defined(nova));
    // Nova defines the instance's domain under its own name, pinned to the
    // other CPU.
    let xml = domain(nova, 1, 64, &format!("  <cputune>\n{}  </cputune>\n", pins(&[1 - pu])))
        .replace("</name>", &format!("</name>\n  <uuid>{uuid}</uuid>"));
    doms.define(&dir, &xml, nova);
    let o = agent(true);
    assert_eq!(o.status.code(), Some(0), "{}{}", text(&o.stdout), text(&o.stderr));
    assert!(text(&o.stderr).contains("1 re-pinned"), "{}", text(&o.stderr));
    let now = virsh(&["dumpxml", "--inactive", nova]);
    assert!(now.contains(&format!("<vcpupin vcpu='0' cpuset='{pu}'/>")), "{now}");
    assert!(now.contains(&format!("<uuid>{uuid}</uuid>")), "{now}");
    assert!(!defined(uuid), "a domain named by the UUID was defined");
    // The next round finds the domain where the claim is.
    let o = agent(false);
    assert_eq!(o.status.code(), Some(0), "{}{}", text(&o.stdout), text(&o.stderr));
    assert!(text(&o.stderr).contains("0 conflicts"), "{}", text(&o.stderr));
    drop(server);
}
