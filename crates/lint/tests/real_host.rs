//! The rules and the fix on a real host: hwloc XML of a 2 x 8-core x
//! 2-thread Xeon E5-2650 with 32 GB per node and its PCI devices
//! (`fixtures/topologies/hwloc/xml/32em64t-2n8c2t-pci-wholeio.xml`).

mod common;

use common::fixture;
use numaplace_lint::{fix, lint, parse_file, FixOptions};
use numaplace_topo::Topology;

fn host() -> Topology {
    let path =
        format!("{}/../../fixtures/topologies/hwloc/xml/32em64t-2n8c2t-pci-wholeio.xml", env!("CARGO_MANIFEST_DIR"));
    numaplace_read::read_source(&path).unwrap_or_else(|e| panic!("{e}"))
}

#[test]
fn hotadd_on_sixteen_vcpus_is_wider_than_an_eight_core_node() {
    let findings = lint(&[fixture("hotadd-16vcpu-200g.xml")], &host());
    let ids: Vec<&str> = findings.iter().map(|f| f.rule).collect();
    assert!(ids.contains(&"cpu-hotadd-wide"), "{ids:?}");
    // 200 GiB on 32 GB nodes does not fit one node either: the hot-add
    // finding covers it (its fix declares a guest cell per host node), so
    // the memory is not reported twice.
    assert!(!ids.contains(&"memory-exceeds-node"), "{ids:?}");
}

#[test]
fn a_device_on_the_other_node_is_reported_and_fixed() {
    let host = host();
    let node0 = host.nodes()[0].cpus.clone();
    let unique = |a: &str| host.devices().iter().filter(|d| d.address == a).count() == 1;
    let Some(dev) =
        host.devices().iter().find(|d| d.node.is_some_and(|n| n != host.nodes()[0].id) && unique(&d.address))
    else {
        panic!("the fixture has PCI devices on node 1");
    };
    let (bus, rest) = dev.address[5..].split_once(':').expect("dddd:bb:dd.f");
    let (slot, function) = rest.split_once('.').expect("dd.f");
    let pins: String = node0
        .iter()
        .take(4)
        .enumerate()
        .map(|(v, cpu)| format!("    <vcpupin vcpu='{v}' cpuset='{cpu}'/>\n"))
        .collect();
    let xml = format!(
        "<domain type='kvm'>\n  <name>nic-vm</name>\n  <memory unit='GiB'>8</memory>\n  <vcpu>4</vcpu>\n  <cputune>\n{pins}  </cputune>\n  \
         <devices>\n    <hostdev mode='subsystem' type='pci' managed='yes'>\n      <source>\n        \
         <address domain='0x0000' bus='0x{bus}' slot='0x{slot}' function='0x{function}'/>\n      </source>\n    </hostdev>\n  </devices>\n</domain>\n"
    );
    let file = parse_file("nic-vm.xml", xml.as_bytes()).expect("parses");
    let findings = lint(std::slice::from_ref(&file), &host);
    assert_eq!(findings.iter().map(|f| f.rule).collect::<Vec<_>>(), vec!["device-remote"], "{findings:#?}");
    assert!(findings[0].message.contains(&dev.address), "{}", findings[0].message);
    let fixed = fix(&file, std::slice::from_ref(&file), &host, FixOptions::default()).expect("fix");
    let again = parse_file("nic-vm.xml", fixed.text.as_bytes()).expect("fixed parses");
    let rest = lint(&[again], &host);
    assert!(rest.is_empty(), "{rest:#?}\n{}", fixed.text);
}
