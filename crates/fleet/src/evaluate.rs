//! What each of a list of hosts would do with one request, changing
//! nothing: the answer an outside scheduler asks for when it chooses the
//! host itself (Nova's filters and weighers, Kubernetes' scheduler
//! extender). Each host gets the filters, the prefilter and the planner
//! the service's own selection applies, in the same order, so a host the
//! service would refuse is refused here for the same typed reason.

use crate::{excluded, prefilter, Constraints, Fleet, HostSkip};
use numaplace_plan::{cost_of, Cost, Rejection, Request};

/// One host's answer to a request.
#[derive(Clone, Debug, PartialEq)]
pub enum Verdict {
    /// The host can take the VM, at this expected cost.
    Fits {
        /// The planner's expected cost there (lower is better).
        cost: Cost,
        /// The host's generation the decision was made against.
        generation: i64,
    },
    /// The host cannot take it, for this reason.
    Refused(HostSkip),
    /// No such host is registered.
    Unknown,
}

/// The hosts' verdicts, and the one the service's own selection would
/// take among them.
#[derive(Clone, Debug, PartialEq)]
pub struct Evaluation {
    /// One verdict per host asked, in that order.
    pub verdicts: Vec<HostVerdict>,
    /// The host [`Fleet::select`] chooses among those asked (its rank
    /// order first, then cost among ties), when any fits.
    pub chosen: Option<String>,
}

/// A host's name and its verdict.
#[derive(Clone, Debug, PartialEq)]
pub struct HostVerdict {
    /// The host, as asked.
    pub host: String,
    /// Its answer.
    pub verdict: Verdict,
}

impl Fleet {
    /// Asks each of `hosts` (in the order given; duplicates answered once
    /// each time they appear) whether it can take `request` under
    /// `constraints`, and at what cost. A request the planner calls wrong
    /// whatever the host is an `Err` with the planner's rejection, as
    /// [`Fleet::select`] answers it.
    pub fn evaluate(
        &self,
        request: &Request,
        constraints: &Constraints,
        hosts: &[String],
    ) -> Result<Evaluation, Rejection> {
        let mut out = Vec::with_capacity(hosts.len());
        for name in hosts {
            let verdict = match self.host(name) {
                None => Verdict::Unknown,
                Some(host) => match excluded(host, constraints) {
                    Some(skip) => Verdict::Refused(skip),
                    None => match prefilter(request, &host.summary) {
                        Err(short) => Verdict::Refused(HostSkip::Short(short)),
                        Ok(()) => match host.session().decide(request) {
                            Ok(decision) => Verdict::Fits {
                                cost: cost_of(&host.state, &decision.placement),
                                generation: host.generation,
                            },
                            Err(r) if r.reason.is_bad_request() => return Err(r),
                            Err(r) => Verdict::Refused(HostSkip::Planner(r.reason)),
                        },
                    },
                },
            };
            out.push(HostVerdict { host: name.clone(), verdict });
        }
        let chosen = if out.iter().any(|v| matches!(v.verdict, Verdict::Fits { .. })) {
            let among = Constraints {
                hosts: out
                    .iter()
                    .filter(|v| matches!(v.verdict, Verdict::Fits { .. }))
                    .map(|v| v.host.clone())
                    .collect(),
                ..constraints.clone()
            };
            self.select(request, &among).ok().map(|c| c.host)
        } else {
            None
        };
        Ok(Evaluation { verdicts: out, chosen })
    }
}

/// Scores on Kubernetes' extender scale, 0 to 10, one per verdict: 0 for
/// a host that does not fit; 10 for `chosen`, the host the service's own
/// selection takes (it ranks hosts by free cores first, so the cheapest is
/// not always the one); the others that fit from 9 for the cheapest down
/// to 1 for the dearest, linear in cost between them.
pub fn scores(verdicts: &[HostVerdict], chosen: Option<&str>) -> Vec<u8> {
    let costs: Vec<Option<u64>> = verdicts
        .iter()
        .map(|v| match &v.verdict {
            Verdict::Fits { cost, .. } => Some(cost.total()),
            _ => None,
        })
        .collect();
    let lo = costs.iter().flatten().min().copied().unwrap_or(0);
    let hi = costs.iter().flatten().max().copied().unwrap_or(0);
    costs
        .iter()
        .zip(verdicts)
        .map(|(c, v)| match c {
            None => 0,
            Some(_) if chosen == Some(v.host.as_str()) => 10,
            Some(_) if hi == lo => 9,
            // 9 at `lo`, 1 at `hi`, rounded to the nearest.
            Some(c) => (9 - ((c - lo) * 8 + (hi - lo) / 2) / (hi - lo)) as u8,
        })
        .collect()
}
