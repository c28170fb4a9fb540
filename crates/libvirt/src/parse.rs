//! Readers of what `virsh` prints: pure, tested on captured replies.

use numaplace_topo::CpuSet;

/// One vCPU of a running domain, as `virsh vcpuinfo --pretty` reports it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VcpuInfo {
    /// The vCPU.
    pub vcpu: u32,
    /// The host CPU it ran on last (`None` when offline).
    pub cpu: Option<u32>,
    /// The CPUs it may run on.
    pub affinity: CpuSet,
}

fn list(text: &str) -> Result<CpuSet, String> {
    // `0-1 (out of 2)`: the list, then the host's CPU count.
    let t = text.split(" (").next().unwrap_or("").trim();
    t.parse::<CpuSet>().map_err(|e| format!("CPU list `{t}`: {e}"))
}

/// Reads `virsh vcpuinfo --pretty`: blocks of `Key: value` lines, one per
/// vCPU.
pub fn parse_vcpuinfo(text: &str) -> Result<Vec<VcpuInfo>, String> {
    let mut out: Vec<VcpuInfo> = Vec::new();
    for line in text.lines() {
        let Some((key, value)) = line.split_once(':') else { continue };
        let value = value.trim();
        match key.trim() {
            "VCPU" => {
                let vcpu = value.parse().map_err(|_| format!("vCPU number `{value}`"))?;
                out.push(VcpuInfo { vcpu, cpu: None, affinity: CpuSet::new() });
            }
            "CPU" => {
                if let Some(last) = out.last_mut() {
                    last.cpu = value.parse().ok();
                }
            }
            "CPU Affinity" => {
                let last = out.last_mut().ok_or("CPU Affinity before any VCPU")?;
                last.affinity = list(value)?;
            }
            _ => {}
        }
    }
    Ok(out)
}

/// Reads `virsh emulatorpin DOMAIN`: the CPU list on the `*:` line.
pub fn parse_emulatorpin(text: &str) -> Result<CpuSet, String> {
    let line = text
        .lines()
        .find_map(|l| l.trim().strip_prefix("*:"))
        .ok_or_else(|| "no `*:` line with the emulator's CPUs".to_string())?;
    list(line)
}

/// Reads `virsh iothreadinfo DOMAIN`: a header, a rule, then one line
/// per I/O thread, `ID   CPU-LIST`.
pub fn parse_iothreadinfo(text: &str) -> Result<Vec<(u32, CpuSet)>, String> {
    let mut out = Vec::new();
    for line in text.lines() {
        let mut words = line.split_whitespace();
        let Some(Ok(id)) = words.next().map(str::parse::<u32>) else { continue };
        let cpus = words.next().ok_or_else(|| format!("I/O thread {id} without a CPU list"))?;
        out.push((id, list(cpus)?));
    }
    Ok(out)
}

/// Whether a domain XML is a running domain's live definition: libvirt
/// gives the root element the domain's `id` only then.
pub(crate) fn is_live(xml: &str) -> bool {
    let opts = roxmltree::ParsingOptions { allow_dtd: false, ..Default::default() };
    roxmltree::Document::parse_with_options(xml, opts).is_ok_and(|d| d.root_element().attribute("id").is_some())
}

/// The `<name>` of a domain XML, when it reads.
pub(crate) fn domain_name(xml: &str) -> Option<String> {
    let opts = roxmltree::ParsingOptions { allow_dtd: false, ..Default::default() };
    let doc = roxmltree::Document::parse_with_options(xml, opts).ok()?;
    let name = doc.root_element().children().find(|c| c.has_tag_name("name"))?.text()?.trim().to_string();
    (!name.is_empty()).then_some(name)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Captured from libvirt 9.0 with a 2-vCPU TCG domain, vCPU 1
    /// repinned to 0-1 by hand.
    const VCPUINFO: &str = "VCPU:           0\nCPU:            0\nState:          running\nCPU time:       0.0s\nCPU Affinity:   0 (out of 2)\n\nVCPU:           1\nCPU:            1\nState:          running\nCPU Affinity:   0-1 (out of 2)\n\n";

    #[test]
    fn vcpuinfo_gives_each_vcpu_its_cpu_and_affinity() {
        let v = parse_vcpuinfo(VCPUINFO).expect("reads");
        assert_eq!(v.len(), 2);
        assert_eq!((v[0].vcpu, v[0].cpu, v[0].affinity.to_list()), (0, Some(0), "0".to_string()));
        assert_eq!((v[1].vcpu, v[1].cpu, v[1].affinity.to_list()), (1, Some(1), "0-1".to_string()));
    }

    #[test]
    fn iothreadinfo_gives_each_io_thread_its_cpus() {
        let text =
            " IOThread ID   CPU Affinity\n-----------------------------\n 1             0-1\n 3             1\n\n";
        let got = parse_iothreadinfo(text).expect("reads");
        assert_eq!(
            got.iter().map(|(i, c)| (*i, c.to_list())).collect::<Vec<_>>(),
            [(1, "0-1".into()), (3, "1".into())]
        );
        assert!(parse_iothreadinfo(" 2\n").is_err());
    }

    #[test]
    fn emulatorpin_reads_the_star_line_and_refuses_anything_else() {
        let text = "emulator: CPU Affinity\n----------------------------------\n       *: 0-1\n\n";
        assert_eq!(parse_emulatorpin(text).expect("reads").to_list(), "0-1");
        assert!(parse_emulatorpin("error: no domain").is_err());
        assert!(parse_vcpuinfo("VCPU: x").is_err());
        assert!(parse_vcpuinfo("CPU Affinity: 0").is_err());
    }
}
