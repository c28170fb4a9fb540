//! The fleet: groups of identical hosts, each group a topology and a CPU
//! overcommit ratio. Topologies are read once per distinct source, however
//! many groups or hosts name it, and shared by all its hosts.

use numaplace_topo::Topology;
use numaplace_wire::sim::FleetDoc;
use std::collections::BTreeMap;
use std::sync::Arc;

/// Most hosts a fleet may have (keeps a typo from allocating the world).
pub const MAX_HOSTS: u64 = 1_000_000;

/// Why a fleet cannot be used.
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
        /// serde's words, with line and column.
        message: String,
    },
    /// A topology source could not be read.
    #[error("host group {group}: topology {source_name:?}: {message}")]
    Topology {
        /// Position of the group in `hosts`, 0-based.
        group: usize,
        /// The source as written.
        source_name: String,
        /// The reader's words.
        message: String,
    },
    /// A topology has no online CPU or no memory on any node.
    #[error("host group {group}: topology {source_name:?} has no {missing} to place VMs on")]
    Unusable {
        /// Position of the group.
        group: usize,
        /// The source as written.
        source_name: String,
        /// `CPUs in NUMA nodes` or `memory`.
        missing: &'static str,
    },
    /// An overcommit ratio below 1 or not a number.
    #[error("host group {group}: cpu_overcommit {value} must be a number from 1 to 64")]
    Overcommit {
        /// Position of the group.
        group: usize,
        /// The value given.
        value: f64,
    },
    /// No hosts at all, or too many.
    #[error("the fleet has {hosts} hosts; it needs 1 to {MAX_HOSTS}")]
    Size {
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

/// A fleet: host kinds and, for every host, its kind.
#[derive(Clone, Debug)]
pub struct Fleet {
    /// Distinct kinds.
    pub kinds: Vec<HostKind>,
    /// Kind position of each host; a host's id is its position here.
    pub hosts: Vec<usize>,
}

impl Fleet {
    /// `count` identical hosts.
    pub fn uniform(source: &str, topology: Topology, count: usize, cpu_overcommit: f64) -> Fleet {
        Fleet {
            kinds: vec![HostKind { source: source.to_string(), topology: Arc::new(topology), cpu_overcommit }],
            hosts: vec![0; count],
        }
    }

    /// Parses fleet JSON; `file` names it in errors.
    pub fn parse_doc(file: &str, text: &str) -> Result<FleetDoc, FleetError> {
        serde_json::from_str(text).map_err(|e| FleetError::Json { file: file.to_string(), message: e.to_string() })
    }

    /// Builds a fleet, reading each distinct topology source once with
    /// `read` (which resolves and opens it).
    pub fn from_doc<F>(doc: &FleetDoc, mut read: F) -> Result<Fleet, FleetError>
    where
        F: FnMut(&str) -> Result<Topology, String>,
    {
        let total: u64 = doc.hosts.iter().map(|g| u64::from(g.count)).sum();
        if total == 0 || total > MAX_HOSTS {
            return Err(FleetError::Size { hosts: total });
        }
        let mut topologies: BTreeMap<String, Arc<Topology>> = BTreeMap::new();
        let mut kinds: Vec<HostKind> = Vec::new();
        let mut hosts = Vec::with_capacity(total as usize);
        for (group, g) in doc.hosts.iter().enumerate() {
            let oc = g.cpu_overcommit;
            if !(oc.is_finite() && (1.0..=64.0).contains(&oc)) {
                return Err(FleetError::Overcommit { group, value: oc });
            }
            let topology = match topologies.get(&g.topology) {
                Some(t) => Arc::clone(t),
                None => {
                    let t = read(&g.topology).map_err(|message| FleetError::Topology {
                        group,
                        source_name: g.topology.clone(),
                        message,
                    })?;
                    let unusable = |missing| FleetError::Unusable { group, source_name: g.topology.clone(), missing };
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
        Ok(Fleet { kinds, hosts })
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
        let doc = Fleet::parse_doc(
            "f.json",
            r#"{"hosts": [{"topology": "a", "count": 2}, {"topology": "a", "count": 3, "cpu_overcommit": 2.0}]}"#,
        )
        .unwrap();
        let mut reads = 0;
        let fleet = Fleet::from_doc(&doc, |_| {
            reads += 1;
            Ok(tiny())
        })
        .unwrap();
        assert_eq!(reads, 1);
        assert_eq!(fleet.len(), 5);
        assert_eq!(fleet.kinds.len(), 2);
        assert_eq!(fleet.hosts, vec![0, 0, 1, 1, 1]);
    }

    #[test]
    fn refuses_bad_fleets() {
        let e = Fleet::parse_doc("f.json", r#"{"hosts": [{"topology": "a", "count": 2, "extra": 1}]}"#).unwrap_err();
        assert!(matches!(e, FleetError::Json { .. }));
        let doc =
            Fleet::parse_doc("f.json", r#"{"hosts": [{"topology": "a", "count": 1, "cpu_overcommit": 0.5}]}"#).unwrap();
        assert_eq!(Fleet::from_doc(&doc, |_| Ok(tiny())).unwrap_err(), FleetError::Overcommit { group: 0, value: 0.5 });
        let doc = Fleet::parse_doc("f.json", r#"{"hosts": []}"#).unwrap();
        assert_eq!(Fleet::from_doc(&doc, |_| Ok(tiny())).unwrap_err(), FleetError::Size { hosts: 0 });
        let doc = Fleet::parse_doc("f.json", r#"{"hosts": [{"topology": "nope", "count": 1}]}"#).unwrap();
        let e = Fleet::from_doc(&doc, |_| Err("no such file".to_string())).unwrap_err();
        assert_eq!(e.to_string(), "host group 0: topology \"nope\": no such file");
    }
}
