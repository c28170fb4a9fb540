//! Why no host took a VM, summarised over the fleet: each host counted
//! once, under the step that ruled it out, and the nearest host's own
//! reason from the planner.

use crate::summary::Short;
use crate::{Fleet, FleetHost, Place, Ranking};
use numaplace_plan::{RejectReason, Request};
use std::collections::BTreeMap;
use std::fmt;

/// Why one host did not take the VM.
#[derive(Clone, Debug, PartialEq)]
pub enum HostSkip {
    /// The host is drained.
    Drained,
    /// The request names other hosts.
    NotNamed,
    /// The host is to be left (a move's source).
    Avoided,
    /// The host lacks a label the request asks for.
    Label {
        /// The label.
        key: String,
        /// The value asked.
        value: String,
    },
    /// The host runs a VM of the request's anti-affinity group.
    AntiAffinity {
        /// The group.
        group: String,
        /// A VM of the group on the host.
        vm: String,
    },
    /// The per-node summary shows the host cannot hold the VM.
    Short(Short),
    /// The planner refused it.
    Planner(RejectReason),
}

impl HostSkip {
    /// A stable code for programs: the constraint's, the prefilter's or
    /// the planner's.
    pub fn code(&self) -> &'static str {
        match self {
            HostSkip::Drained => "drained",
            HostSkip::NotNamed => "not-named",
            HostSkip::Avoided => "source-host",
            HostSkip::Label { .. } => "label",
            HostSkip::AntiAffinity { .. } => "anti-affinity",
            HostSkip::Short(s) => s.code(),
            HostSkip::Planner(r) => r.code(),
        }
    }

    /// Whether the host was ruled out for lack of capacity (not by a
    /// constraint).
    pub fn is_capacity(&self) -> bool {
        matches!(self, HostSkip::Short(_) | HostSkip::Planner(_))
    }
}

impl fmt::Display for HostSkip {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HostSkip::Drained => f.write_str("drained"),
            HostSkip::NotNamed => f.write_str("not among the hosts the request names"),
            HostSkip::Avoided => f.write_str("the host the VM leaves"),
            HostSkip::Label { key, value } => write!(f, "lacks label {key}={value}"),
            HostSkip::AntiAffinity { group, vm } => write!(f, "runs {vm} of anti-affinity group {group}"),
            HostSkip::Short(s) => s.fmt(f),
            HostSkip::Planner(r) => r.fmt(f),
        }
    }
}

/// Hosts ruled out for one reason.
#[derive(Clone, Debug, PartialEq)]
pub struct SkipCount {
    /// The reason's code.
    pub code: &'static str,
    /// How many hosts.
    pub hosts: usize,
    /// The first such host in rank order.
    pub example_host: String,
    /// Its reason, with its figures.
    pub example: HostSkip,
}

/// No host took the VM: why, over the whole fleet.
#[derive(Clone, Debug, PartialEq)]
pub struct FleetRejection {
    /// The VM.
    pub vm: String,
    /// Hosts in the fleet.
    pub hosts: usize,
    /// Hosts per reason, most hosts first (then by code).
    pub counts: Vec<SkipCount>,
    /// The host with the most free capacity that was short of it, and the
    /// planner's reason there (with its per-node figures).
    pub nearest: Option<(String, HostSkip)>,
}

impl fmt::Display for FleetRejection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.hosts == 0 {
            return write!(f, "no host can take {}: the fleet has no hosts", self.vm);
        }
        write!(f, "no host of {} can take {}: ", self.hosts, self.vm)?;
        for (i, c) in self.counts.iter().enumerate() {
            if i > 0 {
                f.write_str("; ")?;
            }
            let one = c.hosts == 1;
            let noun = if one { "host" } else { "hosts" };
            // A constraint's count reads as a sentence ("3 hosts lack a
            // required label"); a capacity's names its code.
            let what = match &c.example {
                HostSkip::Short(_) | HostSkip::Planner(_) => c.code,
                HostSkip::Drained => {
                    if one {
                        "is drained"
                    } else {
                        "are drained"
                    }
                }
                HostSkip::NotNamed => {
                    if one {
                        "is not named by the request"
                    } else {
                        "are not named by the request"
                    }
                }
                HostSkip::Avoided => {
                    if one {
                        "is the host the VM leaves"
                    } else {
                        "are the host the VM leaves"
                    }
                }
                HostSkip::Label { .. } => {
                    if one {
                        "lacks a required label"
                    } else {
                        "lack a required label"
                    }
                }
                HostSkip::AntiAffinity { .. } => {
                    if one {
                        "runs a VM of its anti-affinity group"
                    } else {
                        "run a VM of its anti-affinity group"
                    }
                }
            };
            write!(f, "{} {noun} {what} (e.g. {}: {})", c.hosts, c.example_host, c.example)?;
        }
        if let Some((host, why)) = &self.nearest {
            write!(f, "; nearest: {host}: {why}")?;
        }
        Ok(())
    }
}

/// The running count while hosts are tried.
#[derive(Default)]
pub(crate) struct Tally {
    /// The fleet's ranking: a count's example is its first host in it.
    pub(crate) ranking: Ranking,
    /// Per code, its count with the example's place.
    counts: BTreeMap<&'static str, (SkipCount, Place)>,
    /// The nearest host so far, with its place in the cores-first ranking.
    /// The nearest host of a rejection is the one that fell short on
    /// capacity with the most free (cores first, then threads, then
    /// memory, then the first by name), whatever ranking the fleet walks
    /// in: under a packing ranking the first host refused is the fullest.
    nearest: Option<Place>,
}

impl Tally {
    pub(crate) fn add(&mut self, host: &FleetHost, skip: HostSkip) {
        let place = (self.ranking.key(host.free()), host.name.clone());
        let nearest = skip.is_capacity().then(|| (Ranking::CoresFirst.key(host.free()), host.name.clone()));
        self.add_many(1, &place, skip, nearest);
    }

    /// Counts `hosts` hosts under `skip`'s code at once: `first` is the
    /// first of them in the fleet's ranking, whose reason `skip` is, and
    /// `nearest` the one with the most free under cores-first when the
    /// skip is for capacity. The example of a code is its first host in
    /// rank order, however the hosts were visited.
    pub(crate) fn add_many(&mut self, hosts: usize, first: &Place, skip: HostSkip, nearest: Option<Place>) {
        if hosts == 0 {
            return;
        }
        if let Some(place) = nearest {
            if self.nearest.as_ref().is_none_or(|n| place < *n) {
                self.nearest = Some(place);
            }
        }
        match self.counts.get_mut(skip.code()) {
            Some((count, example)) => {
                count.hosts += hosts;
                if first < example {
                    count.example_host = first.1.clone();
                    count.example = skip;
                    *example = first.clone();
                }
            }
            None => {
                let count = SkipCount { code: skip.code(), hosts, example_host: first.1.clone(), example: skip };
                self.counts.insert(count.code, (count, first.clone()));
            }
        }
    }

    pub(crate) fn finish(self, fleet: &Fleet, request: &Request, decide: &mut crate::Decide<'_>) -> FleetRejection {
        let mut counts: Vec<SkipCount> = self.counts.into_values().map(|(c, _)| c).collect();
        counts.sort_by(|a, b| b.hosts.cmp(&a.hosts).then(a.code.cmp(b.code)));
        // The nearest host's planner's own reason there names nodes and figures, which the
        // prefilter's totals do not.
        let nearest = self.nearest.and_then(|(_, name)| {
            let host = fleet.host(&name)?;
            let why = match decide(host, request) {
                Err(r) => HostSkip::Planner(r.reason),
                Ok(_) => return None,
            };
            Some((name, why))
        });
        FleetRejection { vm: request.name.clone(), hosts: fleet.len(), counts, nearest }
    }
}
