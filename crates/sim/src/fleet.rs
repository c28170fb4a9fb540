//! The fleet: groups of identical hosts, each group a topology and a CPU
//! overcommit ratio. Topologies are read once per distinct source, however
//! many groups or hosts name it, and shared by all its hosts.

use numaplace_topo::Topology;
use numaplace_wire::sim::FleetDoc;
use std::collections::BTreeMap;
use std::sync::Arc;

/// Most hosts a fleet may have (keeps a typo from allocating the world).
pub const MAX_HOSTS: u64 = 1_000_000;

/// Largest fleet file read, bytes: a million one-host entries would fit;
/// a fleet that large is written as groups with a `count`.
pub const MAX_FLEET_FILE_BYTES: u64 = 64 << 20;

/// Why a fleet cannot be used. Every variant names the fleet file, and
/// those about one host group its entry and field (`hosts[1].count`).
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum FleetError {
    /// The fleet file could not be read.
    #[error("{file}: {message}")]
    Io {
        /// The fleet file.
        file: String,
        /// The operating system's words.
        message: String,
    },
    /// The fleet file is not valid fleet JSON.
    #[error("{file}: {message}")]
    Json {
        /// The fleet file.
        file: String,
        /// What is wrong, with the entry and field (`hosts[0].count: ...`)
        /// or serde's line and column.
        message: String,
    },
    /// A topology source could not be read.
    #[error("{file}: hosts[{group}].topology {source_name:?}: {message}")]
    Topology {
        /// The fleet file.
        file: String,
        /// Position of the group in `hosts`, 0-based.
        group: usize,
        /// The source as written.
        source_name: String,
        /// The reader's words.
        message: String,
    },
    /// A topology has no online CPU or no memory on any node.
    #[error("{file}: hosts[{group}].topology {source_name:?} has no {missing} to place VMs on")]
    Unusable {
        /// The fleet file.
        file: String,
        /// Position of the group.
        group: usize,
        /// The source as written.
        source_name: String,
        /// `CPUs in NUMA nodes` or `memory`.
        missing: &'static str,
    },
    /// An overcommit ratio below 1 or not a number.
    #[error("{file}: hosts[{group}].cpu_overcommit: expected a number from 1 to 64, found {value}")]
    Overcommit {
        /// The fleet file.
        file: String,
        /// Position of the group.
        group: usize,
        /// The value given.
        value: f64,
    },
    /// One group with more hosts than a fleet may have.
    #[error("{file}: hosts[{group}].count: expected at most {MAX_HOSTS} hosts, found {count}")]
    Count {
        /// The fleet file.
        file: String,
        /// Position of the group.
        group: usize,
        /// The count given.
        count: u64,
    },
    /// No hosts at all, or too many.
    #[error("{file}: the fleet has {hosts} hosts in all; it needs 1 to {MAX_HOSTS}")]
    Size {
        /// The fleet file.
        file: String,
        /// Hosts counted.
        hosts: u64,
    },
}

/// One kind of host.
#[derive(Clone, Debug)]
pub struct HostKind {
    /// The topology source as the fleet names it.
    pub source: String,
    /// The topology, shared by every host of the kind.
    pub topology: Arc<Topology>,
    /// vCPUs per CPU thread; 1.0 means pinned, one thread per vCPU.
    pub cpu_overcommit: f64,
}

/// The hosts a simulation runs on: host kinds and, for every host, its
/// kind (named apart from `numaplace_fleet::Fleet`, the inventory the
/// replay builds from it).
#[derive(Clone, Debug)]
pub struct HostMix {
    /// Distinct kinds.
    pub kinds: Vec<HostKind>,
    /// Kind position of each host; a host's id is its position here.
    pub hosts: Vec<usize>,
}

impl HostMix {
    /// `count` identical hosts.
    pub fn uniform(source: &str, topology: Topology, count: usize, cpu_overcommit: f64) -> HostMix {
        HostMix {
            kinds: vec![HostKind { source: source.to_string(), topology: Arc::new(topology), cpu_overcommit }],
            hosts: vec![0; count],
        }
    }

    /// Parses fleet JSON; `file` names it in errors.
    pub fn parse_doc(file: &str, text: &str) -> Result<FleetDoc, FleetError> {
        FleetDoc::from_json(text).map_err(|message| FleetError::Json { file: file.to_string(), message })
    }

    /// Builds a fleet, reading each distinct topology source once with
    /// `read` (which resolves and opens it); `file` names the fleet file in
    /// errors. Counts are checked before anything is allocated for hosts.
    pub fn from_doc<F>(file: &str, doc: &FleetDoc, mut read: F) -> Result<HostMix, FleetError>
    where
        F: FnMut(&str) -> Result<Topology, String>,
    {
        let file = file.to_string();
        let mut total: u64 = 0;
        for (group, g) in doc.hosts.iter().enumerate() {
            if g.count > MAX_HOSTS {
                return Err(FleetError::Count { file, group, count: g.count });
            }
            // No overflow: each count is at most MAX_HOSTS and the sum is
            // checked as it grows.
            total += g.count;
            if total > MAX_HOSTS {
                return Err(FleetError::Size {
                    file,
                    hosts: doc.hosts.iter().map(|g| g.count).fold(0, u64::saturating_add),
                });
            }
        }
        if total == 0 {
            return Err(FleetError::Size { file, hosts: 0 });
        }
        let mut topologies: BTreeMap<String, Arc<Topology>> = BTreeMap::new();
        let mut kinds: Vec<HostKind> = Vec::new();
        let mut hosts = Vec::with_capacity(total as usize);
        for (group, g) in doc.hosts.iter().enumerate() {
            let oc = g.cpu_overcommit;
            if !(oc.is_finite() && (1.0..=64.0).contains(&oc)) {
                return Err(FleetError::Overcommit { file, group, value: oc });
            }
            let topology = match topologies.get(&g.topology) {
                Some(t) => Arc::clone(t),
                None => {
                    let t = read(&g.topology).map_err(|message| FleetError::Topology {
                        file: file.clone(),
                        group,
                        source_name: g.topology.clone(),
                        message,
                    })?;
                    let unusable = |missing| FleetError::Unusable {
                        file: file.clone(),
                        group,
                        source_name: g.topology.clone(),
                        missing,
                    };
                    if !t.pus().any(|p| p.online && p.node.is_some()) {
                        return Err(unusable("CPUs in NUMA nodes"));
                    }
                    if t.total_memory() == 0 {
                        return Err(unusable("memory"));
                    }
                    let t = Arc::new(t);
                    topologies.insert(g.topology.clone(), Arc::clone(&t));
                    t
                }
            };
            if g.count == 0 {
                continue;
            }
            let kind =
                match kinds.iter().position(|k| k.source == g.topology && k.cpu_overcommit.to_bits() == oc.to_bits()) {
                    Some(k) => k,
                    None => {
                        kinds.push(HostKind { source: g.topology.clone(), topology, cpu_overcommit: oc });
                        kinds.len() - 1
                    }
                };
            hosts.extend(std::iter::repeat_n(kind, g.count as usize));
        }
        Ok(HostMix { kinds, hosts })
    }

    /// Number of hosts.
    pub fn len(&self) -> usize {
        self.hosts.len()
    }

    /// Whether the fleet has no host.
    pub fn is_empty(&self) -> bool {
        self.hosts.is_empty()
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use numaplace_topo::{Core, CpuSet, Node, NodeId, Parts};

    fn tiny() -> Topology {
        let cpus: CpuSet = (0..2).collect();
        Topology::from_parts(Parts {
            nodes: vec![Node {
                id: NodeId(0),
                cpus: cpus.clone(),
                memory_bytes: 1 << 30,
                free_bytes: None,
                hugepages: vec![],
                kind: None,
            }],
            cores: vec![Core { package: None, die: None, core_id: Some(0), cpus }],
            ..Parts::default()
        })
        .unwrap()
    }

    #[test]
    fn reads_each_topology_once() {
        let doc = HostMix::parse_doc(
            "f.json",
            r#"{"hosts": [{"topology": "a", "count": 2}, {"topology": "a", "count": 3, "cpu_overcommit": 2.0}]}"#,
        )
        .unwrap();
        let mut reads = 0;
        let fleet = HostMix::from_doc("f.json", &doc, |_| {
            reads += 1;
            Ok(tiny())
        })
        .unwrap();
        assert_eq!(reads, 1);
        assert_eq!(fleet.len(), 5);
        assert_eq!(fleet.kinds.len(), 2);
        assert_eq!(fleet.hosts, vec![0, 0, 1, 1, 1]);
    }

    fn refusal(json: &str) -> String {
        match HostMix::parse_doc("f.json", json) {
            Err(e) => e.to_string(),
            Ok(doc) => HostMix::from_doc("f.json", &doc, |_| Ok(tiny()))
                .map(|_| "accepted".into())
                .unwrap_or_else(|e| e.to_string()),
        }
    }

    #[test]
    fn refusals_name_the_file_the_entry_and_the_field() {
        assert_eq!(
            refusal(r#"{"hosts": [{"topology": "a", "count": 1}, {"topology": "a", "count": -1}]}"#),
            "f.json: hosts[1].count: expected a whole number of hosts (0 or more), found -1"
        );
        assert_eq!(
            refusal(r#"{"hosts": [{"topology": "a", "count": 4000000000}]}"#),
            "f.json: hosts[0].count: expected at most 1000000 hosts, found 4000000000"
        );
        assert_eq!(
            refusal(r#"{"hosts": [{"topology": "a", "count": 600000}, {"topology": "a", "count": 600000}]}"#),
            "f.json: the fleet has 1200000 hosts in all; it needs 1 to 1000000"
        );
        assert_eq!(
            refusal(r#"{"hosts": [{"topology": "a", "count": 2.5}]}"#),
            "f.json: hosts[0].count: expected a whole number of hosts (0 or more), found 2.5"
        );
        assert_eq!(
            refusal(r#"{"hosts": [{"topology": "a", "count": "ten"}]}"#),
            "f.json: hosts[0].count: expected a whole number of hosts (0 or more), found \"ten\""
        );
        assert_eq!(
            refusal(r#"{"hosts": [{"topology": 7, "count": 1}]}"#),
            "f.json: hosts[0].topology: expected a topology source as text, found 7"
        );
        assert_eq!(
            refusal(r#"{"hosts": [{"topology": "a", "count": 2, "extra": 1}]}"#),
            "f.json: hosts[0]: unknown field `extra`; expected `topology`, `count` or `cpu_overcommit`"
        );
        assert_eq!(refusal(r#"{"hosts": [{"topology": "a"}]}"#), "f.json: hosts[0]: missing field `count`");
        assert_eq!(refusal(r#"{"host": []}"#), "f.json: unknown field `host`; a fleet has only `hosts`");
        assert_eq!(
            refusal(r#"{"hosts": [{"topology": "a", "count": 1, "cpu_overcommit": 0.5}]}"#),
            "f.json: hosts[0].cpu_overcommit: expected a number from 1 to 64, found 0.5"
        );
        assert_eq!(refusal(r#"{"hosts": []}"#), "f.json: the fleet has 0 hosts in all; it needs 1 to 1000000");
        assert!(refusal(r#"{"hosts": [}"#).starts_with("f.json: expected value at line 1 column 12"));
        let doc = HostMix::parse_doc("f.json", r#"{"hosts": [{"topology": "nope", "count": 1}]}"#).unwrap();
        let e = HostMix::from_doc("f.json", &doc, |_| Err("no such file".to_string())).unwrap_err();
        assert_eq!(e.to_string(), "f.json: hosts[0].topology \"nope\": no such file");
    }
}
