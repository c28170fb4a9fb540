//! The libvirt domain emitter: what each kind of placement turns into,
//! checked on the parsed XML, and (when `virt-xml-validate` is installed,
//! as in CI) validity against libvirt's own schema.

// The hand-built placements emit's QEMU and plan text tests use too: one
// set of shapes for every writer of a placement.
#[path = "../../emit/tests/common/mod.rs"]
mod common;

use common::*;
use numaplace_guest::testing::require_tool;
use numaplace_libvirt::domain::{domain_xml, domains_xml, LibvirtOptions};
use numaplace_plan::Placement;

fn parse(xml: &str) -> roxmltree::Document<'_> {
    roxmltree::Document::parse(xml).unwrap_or_else(|e| panic!("emitted XML does not parse: {e}\n{xml}"))
}

fn attrs<'a>(doc: &'a roxmltree::Document, tag: &str, attr: &str) -> Vec<&'a str> {
    doc.descendants().filter(|n| n.has_tag_name(tag)).filter_map(|n| n.attribute(attr)).collect()
}

fn text<'a>(doc: &'a roxmltree::Document, tag: &str) -> Option<&'a str> {
    doc.descendants().find(|n| n.has_tag_name(tag)).and_then(|n| n.text())
}

#[test]
fn dedicated_wide_vm_is_pinned_bound_and_mirrored() {
    let xml = domain_xml(&wide_dedicated("db1"), &LibvirtOptions::default());
    let doc = parse(&xml);
    assert_eq!(doc.root_element().attribute("type"), Some("kvm"));
    assert_eq!(text(&doc, "name"), Some("db1"));
    // <memory> is the cell sum: 2 x 4 GiB in KiB.
    assert_eq!(text(&doc, "memory"), Some("8388608"));
    assert_eq!(attrs(&doc, "vcpu", "cpuset"), ["0-7"]);
    assert_eq!(text(&doc, "vcpu"), Some("8"));
    let pins: Vec<(&str, &str)> = doc
        .descendants()
        .filter(|n| n.has_tag_name("vcpupin"))
        .map(|n| (n.attribute("vcpu").unwrap_or(""), n.attribute("cpuset").unwrap_or("")))
        .collect();
    assert_eq!(pins, [("0", "0"), ("1", "1"), ("2", "2"), ("3", "3"), ("4", "4"), ("5", "5"), ("6", "6"), ("7", "7")]);
    assert_eq!(attrs(&doc, "emulatorpin", "cpuset"), ["0-7"]);
    // Each guest cell's memory is bound to the host node it mirrors.
    assert_eq!(attrs(&doc, "memory", "nodeset"), ["0-1"]);
    assert_eq!(attrs(&doc, "memory", "mode"), ["strict"]);
    assert_eq!(attrs(&doc, "memnode", "nodeset"), ["0", "1"]);
    assert_eq!(attrs(&doc, "memnode", "mode"), ["strict", "strict"]);
    // The guest sees 2 x 4 x 1 and two cells with the host's distances.
    assert_eq!(attrs(&doc, "cpu", "mode"), ["host-passthrough"]);
    assert_eq!(attrs(&doc, "topology", "sockets"), ["2"]);
    assert_eq!(attrs(&doc, "topology", "cores"), ["4"]);
    assert_eq!(attrs(&doc, "topology", "threads"), ["1"]);
    assert_eq!(attrs(&doc, "cell", "cpus"), ["0-3", "4-7"]);
    assert_eq!(attrs(&doc, "cell", "memory"), ["4194304", "4194304"]);
    assert_eq!(attrs(&doc, "sibling", "value"), ["10", "21", "21", "10"]);
    // ACPI is what makes the guest see its nodes at all.
    assert!(doc.descendants().any(|n| n.has_tag_name("acpi")));
    assert_eq!(attrs(&doc, "type", "machine"), ["q35"]);
    assert!(!xml.contains("memoryBacking"));
}

#[test]
fn shared_vm_floats_without_per_vcpu_pins() {
    let doc_text = domain_xml(&shared_small("web"), &LibvirtOptions::default());
    let doc = parse(&doc_text);
    assert_eq!(attrs(&doc, "vcpu", "cpuset"), ["0-3,8-11"]);
    assert_eq!(doc.descendants().filter(|n| n.has_tag_name("vcpupin")).count(), 0);
    assert_eq!(attrs(&doc, "emulatorpin", "cpuset"), ["0-3,8-11"]);
    assert_eq!(text(&doc, "memory"), Some("786432"));
}

#[test]
fn huge_pages_and_sibling_pairs() {
    let doc_text = domain_xml(&pairs_hugepages("hp"), &LibvirtOptions::default());
    let doc = parse(&doc_text);
    // 1 GiB pages for guest cell 0 (the nodeset names guest cells).
    assert_eq!(attrs(&doc, "page", "size"), ["1048576"]);
    assert_eq!(attrs(&doc, "page", "unit"), ["KiB"]);
    assert_eq!(attrs(&doc, "page", "nodeset"), ["0"]);
    assert_eq!(attrs(&doc, "topology", "threads"), ["2"]);
    assert_eq!(attrs(&doc, "vcpupin", "cpuset"), ["4", "12", "5", "13"]);
    assert_eq!(attrs(&doc, "memnode", "nodeset"), ["1"]);
    // A single cell has no distances element.
    assert!(!doc_text.contains("<distances>"));
}

#[test]
fn spread_vm_interleaves_every_cell_over_all_nodes() {
    let doc_text = domain_xml(&spread("bw"), &LibvirtOptions::default());
    let doc = parse(&doc_text);
    assert_eq!(attrs(&doc, "memory", "mode"), ["interleave"]);
    assert_eq!(attrs(&doc, "memnode", "mode"), ["interleave", "interleave"]);
    assert_eq!(attrs(&doc, "memnode", "nodeset"), ["0-1", "0-1"]);
}

#[test]
fn tcg_test_guest_uses_qemu64_with_intel_vendor() {
    let doc_text = domain_xml(&wide_dedicated("t"), &LibvirtOptions::tcg());
    let doc = parse(&doc_text);
    assert_eq!(doc.root_element().attribute("type"), Some("qemu"));
    assert_eq!(attrs(&doc, "cpu", "mode"), ["custom"]);
    assert_eq!(attrs(&doc, "model", "vendor_id"), ["GenuineIntel"]);
    assert_eq!(attrs(&doc, "model", "fallback"), ["allow"]);
    assert_eq!(text(&doc, "model"), Some("qemu64"));
}

#[test]
fn odd_names_are_escaped() {
    for name in ["a<b>&c", "it's \"quoted\"", "db-1--x", "ünïcödé ☃"] {
        let xml = domain_xml(&wide_dedicated(name), &LibvirtOptions::default());
        let doc = parse(&xml);
        assert_eq!(text(&doc, "name"), Some(name), "{xml}");
        // The multi-domain stream's comment must stay a valid comment.
        let stream = domains_xml(&[&wide_dedicated(name), &shared_small("other")], &LibvirtOptions::default());
        for piece in stream.split("\n\n") {
            parse(piece);
        }
    }
}

#[test]
fn several_domains_are_separated_by_comments() {
    let (a, b) = (wide_dedicated("a"), shared_small("b"));
    let stream = domains_xml(&[&a, &b], &LibvirtOptions::default());
    assert_eq!(stream.matches("<!-- numaplace: domain ").count(), 2);
    assert_eq!(stream.matches("<domain ").count(), 2);
    assert!(stream.find("domain a -->") < stream.find("domain b -->"));
}

#[test]
fn hot_add_boots_some_vcpus_and_devices_are_passed_through() {
    let xml = domain_xml(&hot_add_with_gpu("hot"), &LibvirtOptions::default());
    let doc = parse(&xml);
    // 8 vCPUs exist (all pinned, all in a guest cell), 3 are online.
    assert_eq!(text(&doc, "vcpu"), Some("8"));
    assert_eq!(attrs(&doc, "vcpu", "current"), ["3"]);
    let vcpus: Vec<(&str, &str, &str)> = doc
        .descendants()
        .filter(|n| n.has_tag_name("vcpu") && n.attribute("id").is_some())
        .map(|n| {
            (
                n.attribute("id").unwrap_or(""),
                n.attribute("enabled").unwrap_or(""),
                n.attribute("hotpluggable").unwrap_or(""),
            )
        })
        .collect();
    assert_eq!(vcpus.len(), 8);
    // vCPU 0 can never be unplugged; the online ones stay, the rest plug in.
    assert_eq!(vcpus[0], ("0", "yes", "no"));
    assert_eq!(vcpus[2], ("2", "yes", "no"));
    assert_eq!(vcpus[3], ("3", "no", "yes"));
    assert_eq!(attrs(&doc, "vcpupin", "vcpu").len(), 8);
    assert_eq!(attrs(&doc, "cell", "cpus"), ["0-3", "4-7"]);
    let hostdev = doc.descendants().find(|n| n.has_tag_name("hostdev")).expect("a hostdev");
    assert_eq!(
        (hostdev.attribute("mode"), hostdev.attribute("type"), hostdev.attribute("managed")),
        (Some("subsystem"), Some("pci"), Some("yes"))
    );
    let addr = hostdev.descendants().find(|n| n.has_tag_name("address")).expect("source address");
    assert_eq!(
        ["domain", "bus", "slot", "function"].map(|a| addr.attribute(a).unwrap_or("")),
        ["0x0000", "0x3b", "0x00", "0x0"]
    );
}

#[test]
fn a_memoryless_cell_is_declared_without_a_backend() {
    let xml = domain_xml(&memoryless_cell("ml"), &LibvirtOptions::tcg());
    let doc = parse(&xml);
    assert_eq!(attrs(&doc, "cell", "memory"), ["8388608", "0"]);
    // Bound as a whole to the one node with memory; no per-cell binding,
    // which would make libvirt give the empty cell a backend QEMU refuses.
    assert_eq!(attrs(&doc, "memory", "nodeset"), ["0"]);
    assert!(attrs(&doc, "memnode", "nodeset").is_empty());
    assert_eq!(attrs(&doc, "type", "machine"), ["pc-q35-5.0"]);
}
/// A cell backed by a hidden HBM tier is bound, strict, to every node
/// holding its memory (its own DRAM and the HBM: `0,2`; the HBM alone:
/// `3`), and the guest sees two cells only; `<memory>` names all four.
#[test]
fn a_cell_backed_by_a_hidden_tier_is_bound_to_the_nodes_holding_its_memory() {
    let doc_xml = domain_xml(&hidden_tier("hbm"), &LibvirtOptions::default());
    let doc = parse(&doc_xml);
    assert_eq!(attrs(&doc, "memnode", "nodeset"), ["0,2", "3"]);
    assert_eq!(attrs(&doc, "memnode", "mode"), ["strict", "strict"]);
    assert_eq!(attrs(&doc, "memory", "nodeset"), ["0,2-3"]);
    assert_eq!(attrs(&doc, "cell", "memory"), ["4194304", "4194304"]);
    assert_eq!(attrs(&doc, "type", "machine"), ["q35"]);
}

/// Listed cells keep their vCPUs in `cpus` (`0,2,4,6`), each pinned on
/// its cell's node, and the topology the planner gave.
#[test]
fn interleaved_cells_list_their_vcpus() {
    let xml = domain_xml(&interleaved("nova"), &LibvirtOptions::default());
    let doc = parse(&xml);
    assert_eq!(attrs(&doc, "cell", "cpus"), ["0,2,4,6", "1,3,5,7"]);
    assert_eq!(attrs(&doc, "topology", "dies"), ["8"]);
    assert_eq!(attrs(&doc, "vcpupin", "cpuset"), ["0", "4", "1", "5", "2", "6", "3", "7"]);
}

/// Runs `virt-xml-validate` on a domain written to `name` in the test's
/// directory: `Err` with what it printed when libvirt's schema refuses it.
fn validate(name: &str, xml: &str) -> Result<(), String> {
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("libvirt-validate");
    std::fs::create_dir_all(&dir).expect("temp dir");
    let path = dir.join(name);
    std::fs::write(&path, xml).expect("write domain");
    let out = std::process::Command::new("virt-xml-validate")
        .arg(&path)
        .arg("domain")
        .output()
        .expect("run virt-xml-validate");
    if out.status.success() {
        Ok(())
    } else {
        Err(format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr)))
    }
}

/// Runs libvirt's schema check on every kind of domain the emitter
/// writes. Skipped with a notice where the tool is missing (CI installs
/// libvirt-clients, which ships it, and sets NUMAPLACE_REQUIRE_TOOLS, so
/// there it fails instead).
#[test]
fn domains_validate_against_libvirt_schema() {
    if !require_tool("virt-xml-validate") {
        return;
    }
    let cases: Vec<(&str, Placement, LibvirtOptions)> = vec![
        ("wide-kvm", wide_dedicated("db1"), LibvirtOptions::default()),
        ("wide-tcg", wide_dedicated("db1"), LibvirtOptions::tcg()),
        ("shared", shared_small("web"), LibvirtOptions::default()),
        ("hugepages", pairs_hugepages("hp"), LibvirtOptions::default()),
        ("spread", spread("bw"), LibvirtOptions::tcg()),
        ("odd-name", wide_dedicated("a<b>&'c\" d"), LibvirtOptions::default()),
        ("hot-add-gpu", hot_add_with_gpu("hot"), LibvirtOptions::default()),
        ("memoryless", memoryless_cell("ml"), LibvirtOptions::tcg()),
        ("hidden-tier", hidden_tier("hbm"), LibvirtOptions::default()),
        ("interleaved", interleaved("nova"), LibvirtOptions::default()),
    ];
    for (label, placement, opts) in cases {
        if let Err(e) = validate(&format!("{label}.xml"), &domain_xml(&placement, &opts)) {
            panic!("{label}: virt-xml-validate failed:\n{e}");
        }
    }
}

/// `verify`'s test guest: direct kernel boot, the console in a file and
/// no restart, as typed options (they were string edits of the emitted
/// text), still a domain libvirt's schema accepts.
#[test]
fn a_test_guest_boots_its_kernel_once_with_its_console_in_a_file() {
    use numaplace_libvirt::domain::Boot;
    let boot = Boot {
        kernel: "/cache/vmlinuz".into(),
        initrd: "/cache/initrd & co.cpio".into(),
        cmdline: "console=ttyS0 quiet panic=-1".into(),
        serial_log: "/cache/libvirt/t.log".into(),
    };
    let opts = LibvirtOptions { boot: Some(boot), ..LibvirtOptions::tcg() };
    let xml = domain_xml(&wide_dedicated("t"), &opts);
    let doc = parse(&xml);
    assert_eq!(text(&doc, "kernel"), Some("/cache/vmlinuz"));
    assert_eq!(text(&doc, "initrd"), Some("/cache/initrd & co.cpio"));
    assert_eq!(text(&doc, "cmdline"), Some("console=ttyS0 quiet panic=-1"));
    let os = doc.descendants().find(|n| n.has_tag_name("os")).expect("<os>");
    let in_os: Vec<&str> = os.children().filter(|n| n.is_element()).map(|n| n.tag_name().name()).collect();
    assert_eq!(in_os, ["type", "kernel", "initrd", "cmdline"]);
    assert_eq!(attrs(&doc, "serial", "type"), ["file"]);
    assert_eq!(attrs(&doc, "source", "path"), ["/cache/libvirt/t.log"]);
    assert_eq!(text(&doc, "on_reboot"), Some("destroy"));
    // Without them, a VM that boots its own disk, as before.
    let plain_xml = domain_xml(&wide_dedicated("t"), &LibvirtOptions::tcg());
    let plain = parse(&plain_xml);
    assert_eq!(text(&plain, "kernel"), None);
    assert_eq!(attrs(&plain, "serial", "type"), ["pty"]);
    assert_eq!(text(&plain, "on_reboot"), Some("restart"));

    if !require_tool("virt-xml-validate") {
        return;
    }
    if let Err(e) = validate("boot.xml", &xml) {
        panic!("virt-xml-validate failed:\n{e}");
    }
}

/// A passed-through device near guest cell 1 (its host node is the one
/// cell 1 mirrors) sits behind a root port on a PCIe expander bus that
/// names the cell, so the guest learns which cell its device is near; the
/// domain validates against libvirt's schema and libvirtd defines it.
#[test]
fn a_device_sits_on_an_expander_bus_naming_the_cell_it_is_near() {
    use numaplace_libvirt::Libvirt;
    let mut p = hot_add_with_gpu("numaplace-test-p39c-pxb");
    p.online_vcpus = None;
    let node = p.guest.cells[1].host_node;
    let opts = LibvirtOptions { device_nodes: vec![("0000:3b:00.0".into(), node)], ..LibvirtOptions::default() };
    let xml = domain_xml(&p, &opts);
    let doc = parse(&xml);
    let pxb = doc
        .descendants()
        .find(|n| n.attribute("model") == Some("pcie-expander-bus"))
        .unwrap_or_else(|| panic!("an expander bus:\n{xml}"));
    let index = pxb.attribute("index").expect("index");
    let target = pxb.children().find(|n| n.has_tag_name("target")).expect("target");
    assert_eq!(target.attribute("busNr"), Some("254"), "one bus above it for its root port");
    assert_eq!(target.children().find(|n| n.has_tag_name("node")).and_then(|n| n.text()), Some("1"));
    // The root port is on the expander bus; the device is behind the port.
    let port = doc
        .descendants()
        .find(|n| n.attribute("model") == Some("pcie-root-port"))
        .unwrap_or_else(|| panic!("a root port:\n{xml}"));
    let port_bus = port.children().find(|n| n.has_tag_name("address")).and_then(|a| a.attribute("bus"));
    assert_eq!(port_bus.map(|b| u32::from_str_radix(b.trim_start_matches("0x"), 16).expect("hex")), index.parse().ok());
    let hostdev = doc.descendants().find(|n| n.has_tag_name("hostdev")).expect("a hostdev");
    let guest_addr = hostdev.children().find(|n| n.has_tag_name("address")).expect("guest address");
    let bus = guest_addr.attribute("bus").map(|b| u32::from_str_radix(b.trim_start_matches("0x"), 16).expect("hex"));
    assert_eq!(bus, port.attribute("index").and_then(|i| i.parse().ok()));
    // Without the device's node the domain is as before: no expander.
    let plain = domain_xml(&p, &LibvirtOptions::default());
    assert!(!plain.contains("pcie-expander-bus") && plain.contains("<hostdev"));

    if !require_tool("virt-xml-validate") {
        return;
    }
    if let Err(e) = validate("pxb.xml", &xml) {
        panic!("virt-xml-validate failed:\n{e}\n{xml}");
    }
    if !numaplace_guest::testing::require_libvirt() {
        return;
    }
    let mut virsh = numaplace_libvirt::Virsh::new(numaplace_libvirt::DEFAULT_URI);
    let _ = virsh.undefine(&p.vm);
    let defined = virsh.define(&xml);
    let back = virsh.persistent_xml(&p.vm);
    let _ = virsh.undefine(&p.vm);
    defined.unwrap_or_else(|e| panic!("libvirtd refused the domain: {e}\n{xml}"));
    let back = back.expect("the defined domain");
    assert!(back.contains("pcie-expander-bus") && back.contains("<node>1</node>"), "{back}");
}
