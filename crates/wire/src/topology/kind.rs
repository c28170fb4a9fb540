//! The evidence of a `*-found` warning (issue 48), field by field, so a
//! program can tell which evidence decided without parsing the sentence,
//! and a topology read back from JSON keeps it typed.

use numaplace_topo::{DaxBacking, Figure, FigureSource, KindEvidence, NodeId};
use serde::{Deserialize, Serialize};

/// One piece of evidence: `source` says which, the other fields are those
/// that source has (docs/formats/topology-json.md).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EvidenceDoc {
    /// `hmat`, `memory-tier`, `dax` or `cpu-model`.
    pub source: String,
    /// hmat: `hwloc-memattr`, `sysfs-access0` or `sysfs-access1`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from: Option<String>,
    /// hmat: `bandwidth` or `latency`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub figure: Option<String>,
    /// hmat: the node's own figure.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<u64>,
    /// hmat: the CPU node compared with; cpu-model: the sub-NUMA domain's
    /// node.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub local_node: Option<u32>,
    /// hmat: that node's figure.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub local_value: Option<u64>,
    /// memory-tier: the node's tier and the CPU nodes'.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tier: Option<u32>,
    /// memory-tier: the CPU nodes' tier.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_tier: Option<u32>,
    /// dax: the device (`dax1.0`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device: Option<String>,
    /// dax: `nvdimm`, `cxl` or `soft-reserved`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backing: Option<String>,
    /// cpu-model: the CPU model string.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// cpu-model: how many such nodes, and their size.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nodes: Option<u32>,
    /// cpu-model: the size of each, bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size_bytes: Option<u64>,
}

impl From<&KindEvidence> for EvidenceDoc {
    fn from(e: &KindEvidence) -> Self {
        let mut doc = EvidenceDoc {
            source: e.code().to_string(),
            from: None,
            figure: None,
            value: None,
            local_node: None,
            local_value: None,
            tier: None,
            cpu_tier: None,
            device: None,
            backing: None,
            model: None,
            nodes: None,
            size_bytes: None,
        };
        match e {
            KindEvidence::Hmat { source, figure, value, local, local_value } => {
                doc.from = Some(source.name().to_string());
                doc.figure = Some(figure.name().to_string());
                doc.value = Some(*value);
                doc.local_node = Some(local.0);
                doc.local_value = Some(*local_value);
            }
            KindEvidence::Tier { tier, cpu_tier } => {
                doc.tier = Some(*tier);
                doc.cpu_tier = Some(*cpu_tier);
            }
            KindEvidence::Dax { device, backing } => {
                doc.device = Some(device.clone());
                doc.backing = Some(backing.name().to_string());
            }
            KindEvidence::CpuModel { model, domain, nodes, size_bytes } => {
                doc.model = Some(model.clone());
                doc.local_node = Some(domain.0);
                doc.nodes = Some(*nodes);
                doc.size_bytes = Some(*size_bytes);
            }
        }
        doc
    }
}

impl EvidenceDoc {
    /// The evidence, or `None` when a field its source needs is missing
    /// or names nothing this version knows (the warning is then dropped,
    /// as a newer writer's unknown warning is).
    pub fn to_evidence(&self) -> Option<KindEvidence> {
        Some(match self.source.as_str() {
            "hmat" => KindEvidence::Hmat {
                source: FigureSource::from_name(self.from.as_deref()?)?,
                figure: Figure::from_name(self.figure.as_deref()?)?,
                value: self.value?,
                local: NodeId(self.local_node?),
                local_value: self.local_value?,
            },
            "memory-tier" => KindEvidence::Tier { tier: self.tier?, cpu_tier: self.cpu_tier? },
            "dax" => KindEvidence::Dax {
                device: self.device.clone()?,
                backing: DaxBacking::from_name(self.backing.as_deref()?)?,
            },
            "cpu-model" => KindEvidence::CpuModel {
                model: self.model.clone()?,
                domain: NodeId(self.local_node?),
                nodes: self.nodes?,
                size_bytes: self.size_bytes?,
            },
            _ => return None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every kind of evidence reads back from its document as it was: a
    /// topology JSON read with `--from` keeps why each kind was found.
    #[test]
    fn every_evidence_round_trips() {
        let all = [
            KindEvidence::Hmat {
                source: FigureSource::SysfsAccess1,
                figure: Figure::Latency,
                value: 300,
                local: NodeId(1),
                local_value: 110,
            },
            KindEvidence::Tier { tier: 22, cpu_tier: 4 },
            KindEvidence::Dax { device: "dax0.0".into(), backing: DaxBacking::SoftReserved },
            KindEvidence::CpuModel {
                model: "Intel(R) Xeon(R) CPU Max 9462".into(),
                domain: NodeId(3),
                nodes: 8,
                size_bytes: 16 << 30,
            },
        ];
        for e in all {
            assert_eq!(EvidenceDoc::from(&e).to_evidence(), Some(e.clone()));
        }
        let unknown =
            EvidenceDoc { source: "smell".into(), ..EvidenceDoc::from(&KindEvidence::Tier { tier: 1, cpu_tier: 4 }) };
        assert_eq!(unknown.to_evidence(), None);
    }
}
