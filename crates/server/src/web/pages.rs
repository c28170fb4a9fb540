//! The pages' view-models, each built from the fleet: [`FleetPage`],
//! [`HostPage`], [`VmPage`]; rendered by their askama templates
//! (`templates/`), which escape every value.

use super::assets::{Assets, Forms};
use crate::command::{FleetView, HostCondition, HostFilter};
use crate::service::Service;
use askama::Template;
use numaplace_emit::text::{noun, plural};
use numaplace_fleet::FleetHost;
use numaplace_plan::Placement;
use numaplace_topo::{format_size, Topology};
use numaplace_wire::fleet::{path_escape, FleetPageQuery, LocalitySampleDoc, PlaceForm};

/// Hosts per page of the fleet view: a 10,000-host fleet is shown a page
/// at a time, with totals over all of it.
pub const HOSTS_PER_PAGE: usize = 100;

/// A small bar: `used` of `total`, with the figures as text beside it and
/// as its accessible name.
#[derive(Clone, Debug)]
pub struct Bar {
    /// What it measures (`node0 threads`).
    pub label: String,
    /// Its figures as words.
    pub text: String,
    /// The used part's width, of 40.
    pub used: String,
}

impl Bar {
    pub(crate) fn new(label: String, free: u64, total: u64, text: String) -> Bar {
        let used = if total == 0 { 0.0 } else { total.saturating_sub(free) as f64 / total as f64 * 40.0 };
        Bar { label, text, used: format!("{used:.1}") }
    }
}

/// Hosts in one condition, on the fleet page's summary.
#[derive(Clone, Debug)]
pub struct ConditionCount {
    /// The condition's name, as the filter takes it.
    pub name: &'static str,
    /// Its hosts.
    pub hosts: u64,
    /// The filter's address for it.
    pub link: String,
    /// Whether the filter asks for it.
    pub selected: bool,
}

/// A host kind in the fleet page's filter.
#[derive(Clone, Debug)]
pub struct KindOption {
    /// The kind.
    pub name: String,
    /// Its hosts.
    pub hosts: u64,
    /// Whether the filter asks for it.
    pub selected: bool,
}

/// A host's row on the fleet page.
#[derive(Clone, Debug)]
pub struct HostRow {
    /// Its name.
    pub name: String,
    /// Its name as a path segment.
    pub link: String,
    /// Whether it is drained.
    pub drained: bool,
    /// Its kind.
    pub kind: String,
    /// Free cores.
    pub free_cores: u32,
    /// Free threads.
    pub free_threads: u32,
    /// Free memory, in words.
    pub free_memory: String,
    /// Each node's threads.
    pub threads: Vec<Bar>,
    /// Each node's memory.
    pub memory: Vec<Bar>,
    /// Free huge pages per node, in words, or `-`.
    pub hugepages: String,
    /// VMs on it.
    pub vms: usize,
}

/// The place form's fields.
#[derive(Clone, Debug, Default)]
pub struct PlaceFormView {
    /// The form's heading.
    pub heading: &'static str,
    /// Field values, as given.
    pub name: String,
    /// vCPUs.
    pub vcpus: String,
    /// Memory.
    pub memory: String,
    /// Whether `shared` is chosen.
    pub shared: bool,
    /// Max nodes.
    pub max_nodes: String,
    /// Hosts.
    pub hosts: String,
    /// Anti-affinity group.
    pub group: String,
    /// Whether the dry run box is ticked.
    pub dry: bool,
}

impl PlaceFormView {
    pub(crate) fn of(heading: &'static str, f: &PlaceForm) -> PlaceFormView {
        let v = |o: &Option<String>| o.clone().unwrap_or_default();
        PlaceFormView {
            heading,
            name: v(&f.name),
            vcpus: v(&f.vcpus),
            memory: v(&f.memory),
            shared: f.cpu.as_deref() == Some("shared"),
            max_nodes: v(&f.max_nodes),
            hosts: v(&f.hosts),
            group: v(&f.anti_affinity),
            dry: f.dry_run.as_deref() == Some("true"),
        }
    }
}

/// The fleet page (`/`).
#[derive(Template)]
#[template(path = "fleet.html")]
pub struct FleetPage {
    /// The files the page loads.
    pub assets: Assets,
    /// Its forms' fields.
    pub forms: Forms,
    /// The fleet's capacity (`metrics::capacity`, as `/metrics` shows it).
    pub total: crate::metrics::Capacity,
    /// Free memory, in words.
    pub free_memory: String,
    /// Memory, in words.
    pub memory: String,
    /// What free capacity is stranded below.
    pub stranded_below: &'static str,
    /// The kinds to filter by.
    pub kinds: Vec<KindOption>,
    /// Hosts per condition, each a link to the hosts in it.
    pub conditions: Vec<ConditionCount>,
    /// The address of every host matching the other filters.
    pub all_hosts: String,
    /// The label filter, as given.
    pub label: String,
    /// The free threads filter, as given.
    pub min_free_threads: String,
    /// Hosts the filters match.
    pub matched: usize,
    /// This page's number, from 1.
    pub page_no: usize,
    /// Pages.
    pub pages: usize,
    /// Hosts per page.
    pub per_page: usize,
    /// This page's hosts.
    pub hosts: Vec<HostRow>,
    /// The previous page's address.
    pub prev: Option<String>,
    /// The next page's address.
    pub next: Option<String>,
    /// Recent rejections, newest first.
    pub rejections: Vec<String>,
    /// The place form.
    pub place: PlaceFormView,
}

pub(crate) fn fleet_page(s: &Service, q: &FleetPageQuery, view: &FleetView, f: &Forms) -> FleetPage {
    let mut page = s.with_fleet(|fleet| {
        // The one computation of free and stranded capacity, as
        // `/metrics` shows it per kind.
        let (by_kind, total) = crate::metrics::capacity(fleet);
        let kinds = by_kind
            .iter()
            .map(|(k, c)| KindOption { name: k.clone(), hosts: c.hosts, selected: q.kind.as_deref() == Some(k) })
            .collect();
        // One pass over the hosts, keeping references only: a zone of
        // 100,000 hosts renders one page of rows, never every host. The
        // kind filter compares each host's kind worded once per topology.
        let kind = q.kind.as_deref().filter(|k| !k.is_empty());
        let filter = HostFilter { kind: None, ..view.filter.clone() };
        let mut names = crate::metrics::KindNames::default();
        let shown: Vec<&FleetHost> =
            fleet.hosts().filter(|h| kind.is_none_or(|k| names.of(h) == k) && filter.matches(h)).collect();
        let per_page = view.per_page;
        let pages = shown.len().div_ceil(per_page).max(1);
        let page_no = view.page.min(pages);
        let hosts = shown.iter().skip((page_no - 1) * per_page).take(per_page).map(|h| host_row(h)).collect();
        let link = |p: usize, state: Option<HostCondition>| {
            let mut l = format!(
                "/?page={p}&kind={}&label={}&min_free_threads={}&state={}",
                path_escape(q.kind.as_deref().unwrap_or("")),
                path_escape(q.label.as_deref().unwrap_or("")),
                view.filter.min_free_threads.map(|m| m.to_string()).unwrap_or_default(),
                state.map_or("", HostCondition::name),
            );
            if per_page != HOSTS_PER_PAGE {
                l.push_str(&format!("&per_page={per_page}"));
            }
            l
        };
        let in_service = total.hosts - total.drained;
        let conditions = HostCondition::ALL
            .into_iter()
            .map(|c| ConditionCount {
                name: c.name(),
                hosts: match c {
                    HostCondition::InService => in_service,
                    HostCondition::Empty => total.empty_hosts,
                    HostCondition::Stranded => total.stranded_hosts,
                    HostCondition::Drained => total.drained,
                },
                link: link(1, Some(c)),
                selected: view.filter.state == Some(c),
            })
            .collect();
        FleetPage {
            assets: Assets::default(),
            forms: f.clone(),
            total,
            free_memory: format_size(total.free_memory),
            memory: format_size(total.memory),
            stranded_below: crate::metrics::STRANDED_BELOW,
            kinds,
            conditions,
            all_hosts: link(1, None),
            label: q.label.clone().unwrap_or_default(),
            min_free_threads: view.filter.min_free_threads.map(|m| m.to_string()).unwrap_or_default(),
            matched: shown.len(),
            page_no,
            pages,
            per_page,
            hosts,
            prev: (page_no > 1).then(|| link(page_no - 1, view.filter.state)),
            next: (page_no < pages).then(|| link(page_no + 1, view.filter.state)),
            rejections: Vec::new(),
            place: PlaceFormView::of("Place a VM", &PlaceForm::default()),
        }
    });
    page.rejections = s.recent_rejections().into_iter().rev().collect();
    page
}

pub(crate) fn host_row(h: &FleetHost) -> HostRow {
    let mut threads = Vec::new();
    let mut memory = Vec::new();
    let mut hp = Vec::new();
    for n in &h.summary.nodes {
        threads.push(Bar::new(
            format!("node{} threads", n.id.0),
            u64::from(n.free_threads),
            u64::from(n.threads),
            format!("{} of {} free", n.free_threads, n.threads),
        ));
        memory.push(Bar::new(
            format!("node{} memory", n.id.0),
            n.free_memory,
            n.memory,
            format!("{} of {} free", format_size(n.free_memory), format_size(n.memory)),
        ));
        for (size, free) in n.hugepages.iter().filter(|(_, f)| *f > 0) {
            hp.push(format!("node{}: {free} x {}", n.id.0, format_size(*size)));
        }
    }
    HostRow {
        name: h.name.clone(),
        link: path_escape(&h.name),
        drained: h.drained,
        kind: h.kind(),
        free_cores: h.summary.free_cores,
        free_threads: h.summary.free_threads,
        free_memory: format_size(h.summary.free_memory),
        threads,
        memory,
        hugepages: if hp.is_empty() { "-".to_string() } else { hp.join(", ") },
        vms: h.state.placements().len(),
    }
}

/// A VM in a host page's list.
#[derive(Clone, Debug)]
pub struct VmItem {
    /// Its name.
    pub name: String,
    /// Its name as a path segment.
    pub link: String,
    /// Its pattern in the picture (`#vmN`).
    pub style: usize,
    /// Its colour.
    pub colour: &'static str,
    /// What it takes, in words.
    pub line: String,
}

/// A node's row in a host page's memory table.
#[derive(Clone, Debug)]
pub struct NodeRow {
    /// The node's number.
    pub id: u32,
    /// Memory, in words.
    pub memory: String,
    /// Free memory, in words.
    pub free: String,
    /// Free threads.
    pub free_threads: u32,
    /// Threads.
    pub threads: u32,
    /// Free huge pages, in words, or `-`.
    pub hugepages: String,
    /// Its kind of memory (`dram`, `hbm`, ...).
    pub kind: &'static str,
}

/// A device in a host page's list.
#[derive(Clone, Debug)]
pub struct DeviceItem {
    /// The VM holding it, when any.
    pub holder: Option<String>,
    /// What it is, in words.
    pub text: String,
}

/// A host's page (`/hosts/{name}`).
#[derive(Template)]
#[template(path = "host.html")]
pub struct HostPage {
    /// The files the page loads.
    pub assets: Assets,
    /// Its forms' fields.
    pub forms: Forms,
    /// The host's name.
    pub name: String,
    /// Its name as a path segment.
    pub link: String,
    /// Its kind.
    pub kind: String,
    /// The store's generation.
    pub generation: i64,
    /// Whether it is drained.
    pub drained: bool,
    /// Its labels, in words.
    pub labels: String,
    /// Its reserved CPUs, in words.
    pub reserved: String,
    /// Its VMs in name order.
    pub vms: Vec<VmItem>,
    /// The picture of its threads (`numaplace_emit::svg::host`, which
    /// escapes every name it draws).
    pub picture: String,
    /// Its nodes.
    pub nodes: Vec<NodeRow>,
    /// Distances, node by node, when known.
    pub distances: Vec<(u32, Vec<u32>)>,
    /// Its devices.
    pub devices: Vec<DeviceItem>,
    /// The agent's last report, in words.
    pub report: Option<String>,
    /// The action offered: `drain` or `undrain`.
    pub action: &'static str,
    /// Its button's words.
    pub action_label: &'static str,
}

pub(crate) fn host_page(h: &FleetHost, report: Option<&str>, f: &Forms) -> HostPage {
    let t = &h.topology;
    let styles = numaplace_emit::svg::vm_styles(&h.state);
    let mut placements: Vec<&Placement> = h.state.placements().iter().map(|p| &**p).collect();
    placements.sort_by(|a, b| a.vm.cmp(&b.vm));
    let vms = placements
        .into_iter()
        .map(|p| {
            let style = styles.get(&p.vm).copied();
            VmItem {
                name: p.vm.clone(),
                link: path_escape(&p.vm),
                style: style.map_or(0, |s| s.index),
                colour: style.map_or("#000", |s| s.colour),
                line: format!(
                    "{} {} on {} {}, CPUs {}, {}{}",
                    plural(p.vcpus.len(), "vCPU"),
                    numaplace_wire::plan::request::cpu_mode_name(p.cpu_mode),
                    noun(p.nodes.len(), "node"),
                    p.nodes.iter().map(|n| n.0.to_string()).collect::<Vec<_>>().join(","),
                    p.cpuset.to_list(),
                    format_size(p.memory_bytes),
                    if p.devices.is_empty() { String::new() } else { format!(", devices {}", p.devices.join(" ")) },
                ),
            }
        })
        .collect();
    let nodes = h
        .summary
        .nodes
        .iter()
        .map(|n| {
            let hp: Vec<String> = n.hugepages.iter().map(|(s, f)| format!("{f} x {}", format_size(*s))).collect();
            NodeRow {
                id: n.id.0,
                memory: format_size(n.memory),
                free: format_size(n.free_memory),
                free_threads: n.free_threads,
                threads: n.threads,
                hugepages: if hp.is_empty() { "-".into() } else { hp.join(", ") },
                kind: t.node_index(n.id).map_or("-", |i| t.memory_kind(i).as_str()),
            }
        })
        .collect();
    let distances = if t.distances_known() {
        t.nodes()
            .iter()
            .enumerate()
            .map(|(i, n)| (n.id.0, (0..t.nodes().len()).map(|j| t.distance(i, j)).collect()))
            .collect()
    } else {
        Vec::new()
    };
    let devices = t
        .devices()
        .iter()
        .map(|d| {
            let holder = h.state.device_holder(&d.address).map(str::to_string);
            DeviceItem {
                text: format!(
                    "{} {}{} on {}{}",
                    d.address,
                    d.kind.as_str(),
                    d.name.as_deref().map(|n| format!(" ({n})")).unwrap_or_default(),
                    d.node.map_or("an unknown node".to_string(), |n| format!("node{}", n.0)),
                    holder.as_deref().map(|v| format!(", held by {v}")).unwrap_or_default(),
                ),
                holder,
            }
        })
        .collect();
    let (action, action_label) = if h.drained { ("undrain", "Undrain") } else { ("drain", "Drain (no new VMs)") };
    HostPage {
        assets: Assets::default(),
        forms: f.clone(),
        name: h.name.clone(),
        link: path_escape(&h.name),
        kind: h.kind(),
        generation: h.generation,
        drained: h.drained,
        labels: if h.labels.is_empty() {
            "none".to_string()
        } else {
            h.labels.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join(", ")
        },
        reserved: if h.state.reservations().cpus.is_empty() {
            "none".to_string()
        } else {
            h.state.reservations().cpus.to_list()
        },
        vms,
        // The CLI's renderer (`topology --format svg`), with the VMs drawn on.
        picture: numaplace_emit::svg::host(t, &h.state),
        nodes,
        distances,
        devices,
        report: report.map(str::to_string),
        action,
        action_label,
    }
}

/// A guest cell on a VM's page.
#[derive(Clone, Debug)]
pub struct CellRow {
    /// The guest node.
    pub id: u32,
    /// The host node under it.
    pub host_node: u32,
    /// Its vCPUs, as a list.
    pub vcpus: String,
    /// Its memory, in words.
    pub memory: String,
}

/// esxtop's NUMA view over time on a VM's page: N%L (memory on the VM's
/// own nodes) as a line, and the latest memory per node, from the
/// agent's reports.
#[derive(Clone, Debug, Default)]
pub struct LocalityView {
    /// N%L now, when the agent has reported the VM.
    pub now: Option<u32>,
    /// The VM's own nodes, in words.
    pub home: String,
    /// How many reports, in words.
    pub reports: String,
    /// How many reports.
    pub count: usize,
    /// The line's points.
    pub points: String,
    /// The latest memory per node.
    pub nodes: Vec<(u32, String)>,
}

impl LocalityView {
    pub(crate) fn of(p: &Placement, samples: &[LocalitySampleDoc]) -> LocalityView {
        let Some(last) = samples.last() else { return LocalityView::default() };
        let (w, h) = (480.0, 80.0);
        let n = samples.len().max(2) as f64 - 1.0;
        let points: Vec<String> = samples
            .iter()
            .enumerate()
            .map(|(i, s)| {
                format!(
                    "{:.1},{:.1}",
                    30.0 + i as f64 / n * (w - 40.0),
                    10.0 + (100 - s.local_percent.min(100)) as f64 / 100.0 * (h - 20.0)
                )
            })
            .collect();
        let home: Vec<String> = p.nodes.iter().map(|n| n.0.to_string()).collect();
        LocalityView {
            now: Some(last.local_percent),
            home: format!("{} {}", noun(home.len(), "node"), home.join(",")),
            reports: plural(samples.len(), "report"),
            count: samples.len(),
            points: points.join(" "),
            nodes: last.nodes.iter().map(|m| (m.node, format_size(m.bytes))).collect(),
        }
    }
}

/// A VM's page (`/vms/{name}`), or a dry run's.
#[derive(Template)]
#[template(path = "vm.html")]
pub struct VmPage {
    /// The files the page loads.
    pub assets: Assets,
    /// Its forms' fields.
    pub forms: Forms,
    /// Whether this is a dry run's plan, nothing claimed.
    pub dry_run: bool,
    /// The VM's name.
    pub name: String,
    /// Its name as a path segment.
    pub link: String,
    /// Its host.
    pub host: String,
    /// Its host as a path segment.
    pub host_link: String,
    /// Who placed it, in words.
    pub origin: &'static str,
    /// Its anti-affinity group.
    pub group: Option<String>,
    /// Its size and shape, in words.
    pub summary: String,
    /// Its guest cells.
    pub cells: Vec<CellRow>,
    /// vCPU, where it runs, host node.
    pub vcpus: Vec<(u32, String, u32)>,
    /// Memory per host node.
    pub memory: Vec<(u32, String)>,
    /// Why here: the alternatives' verdicts and the planner's notes.
    pub why: Vec<String>,
    /// Its locality (not on a dry run).
    pub locality: Option<LocalityView>,
    /// Its libvirt domain XML.
    pub xml: String,
    /// Its QEMU arguments.
    pub qemu: String,
    /// A dry run's form to place it for real.
    pub place: Option<PlaceFormView>,
    /// Whether move and delete are offered (a VM the service placed).
    pub actions: bool,
}

pub(crate) fn vm_page(
    doc: &numaplace_wire::fleet::PlacedDoc,
    p: &Placement,
    topology: &Topology,
    forms: &Forms,
    dry_run: Option<&PlaceForm>,
    samples: &[LocalitySampleDoc],
) -> VmPage {
    let g = &p.guest;
    let summary = format!(
        "{n}, {mode}; {mem}, memory {mm}; the guest sees {s} x {d} x {c} x {t} in {cells}.",
        n = plural(p.vcpus.len(), "vCPU"),
        mode = numaplace_wire::plan::request::cpu_mode_name(p.cpu_mode),
        mem = format_size(p.memory_bytes),
        mm = match p.memory_mode {
            numaplace_plan::MemoryMode::Strict => "bound strictly",
            numaplace_plan::MemoryMode::Interleave => "interleaved",
        },
        s = plural(g.sockets, "socket"),
        d = plural(g.dies, "die"),
        c = plural(g.cores, "core"),
        t = plural(g.threads, "thread"),
        cells = plural(g.cells.len(), "NUMA node"),
    );
    let mut why: Vec<String> = doc
        .placement
        .alternatives
        .iter()
        .map(|a| {
            let nodes: Vec<String> = a.nodes.iter().map(|n| n.to_string()).collect();
            format!("nodes {}: {}", nodes.join(","), a.verdict)
        })
        .collect();
    why.extend(doc.placement.notes.iter().map(|n| format!("note: {}", n.text())));
    let xml = numaplace_libvirt::domain::domain_xml(
        p,
        &numaplace_libvirt::domain::LibvirtOptions::default().for_host(topology),
    );
    let qemu_opts = numaplace_emit::qemu::QemuOptions::default();
    let qemu_opts = qemu_opts.clone().for_arch(topology.arch()).unwrap_or(qemu_opts);
    let place = dry_run.map(|form| {
        let mut claim = form.clone();
        claim.dry_run = None;
        claim.token = None;
        claim.csrf = None;
        PlaceFormView::of("Place it for real", &claim)
    });
    VmPage {
        assets: Assets::default(),
        forms: forms.clone(),
        dry_run: dry_run.is_some(),
        name: p.vm.clone(),
        link: path_escape(&p.vm),
        host: doc.host.clone(),
        host_link: path_escape(&doc.host),
        origin: if doc.origin == "agent" { "host's agent: the service did not place it" } else { "service" },
        group: doc.group.clone(),
        summary,
        cells: g
            .cells
            .iter()
            .map(|c| CellRow {
                id: c.id,
                host_node: c.host_node.0,
                vcpus: c.vcpus.to_list(),
                memory: format_size(c.memory_bytes),
            })
            .collect(),
        vcpus: p
            .vcpus
            .iter()
            .map(|v| {
                let runs = match p.floats(v.vcpu) {
                    Some(set) => format!("floats over {}", set.to_list()),
                    None => v.pu.to_string(),
                };
                (v.vcpu, runs, v.node.0)
            })
            .collect(),
        memory: p.memory.iter().map(|(n, b)| (n.0, format_size(*b))).collect(),
        why,
        locality: dry_run.is_none().then(|| LocalityView::of(p, samples)),
        xml,
        qemu: numaplace_emit::qemu::command_line(p, &qemu_opts),
        place,
        actions: dry_run.is_none() && doc.origin == "service",
    }
}
