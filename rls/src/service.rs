//! The decision room: `ShouldRateLimit`. A request's descriptors are matched
//! (`limits`), the limited ones decided together by RL.ADMITALL, one call
//! per slot (`valkey`), with a give-back (RL.REFUND) of what admitted slots
//! consumed when another refuses; then the response and the metrics.

use std::collections::HashSet;
use std::sync::{Arc, RwLock};

use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::{
    rate_limit::Unit as PbUnit, Code, DescriptorStatus, RateLimit as PbRateLimit,
};
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_server::RateLimitService;
use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use envoy_types::pb::google::protobuf::Duration as PbDuration;
use futures_util::future::join_all;
use redis::cluster_routing::Slot;
use tonic::{Request, Response, Status};

use crate::config::{Config, Limit, Unit};
use crate::limits;
use crate::metrics::{self, Metrics};
use crate::valkey::{Error, Limiter, Reply, Valkey};

/// What the service answers when Valkey fails.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailureMode {
    /// A gRPC error: Envoy's `failure_mode_deny` decides (the default).
    Error,
    /// OK for every descriptor.
    Allow,
    /// OVER_LIMIT for every limited descriptor.
    Deny,
}

/// The share of a limit past which an admitted hit counts as `near_limit`
/// (the reference's NEAR_LIMIT_RATIO default).
const NEAR_LIMIT_RATIO: f64 = 0.8;
/// RL.ADMITALL takes at most 256 words: limiters a call, at most.
const MAX_ARGS: usize = 250;

pub struct Shared {
    pub config: RwLock<Arc<Config>>,
    pub valkey: Valkey,
    pub metrics: Arc<Metrics>,
    pub prefix: String,
    pub failure_mode: FailureMode,
    pub cluster: bool,
}

impl Shared {
    pub fn config(&self) -> Arc<Config> {
        self.config
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }
}

#[derive(Clone)]
pub struct Service(pub Arc<Shared>);

/// One limited descriptor of a request.
struct Planned {
    index: usize,
    limit: Arc<Limit>,
    stat: String,
    limiter: Limiter,
}

fn pb_unit(u: Unit) -> PbUnit {
    match u {
        Unit::Second => PbUnit::Second,
        Unit::Minute => PbUnit::Minute,
        Unit::Hour => PbUnit::Hour,
        Unit::Day => PbUnit::Day,
        Unit::Week => PbUnit::Week,
    }
}

fn unit_of(pb: i32) -> Option<Unit> {
    match PbUnit::try_from(pb).ok()? {
        PbUnit::Second => Some(Unit::Second),
        PbUnit::Minute => Some(Unit::Minute),
        PbUnit::Hour => Some(Unit::Hour),
        PbUnit::Day => Some(Unit::Day),
        PbUnit::Week => Some(Unit::Week),
        _ => None,
    }
}

/// Whole seconds, rounded up: Envoy's `x-ratelimit-reset` takes the
/// seconds and drops the rest, and a client that waits that long must
/// never be early.
fn duration_ms(ms: i64) -> PbDuration {
    PbDuration {
        seconds: (ms.max(0) + 999) / 1000,
        nanos: 0,
    }
}

fn clamp_u32(v: i64) -> u32 {
    v.clamp(0, u32::MAX as i64) as u32
}

impl Shared {
    /// Decides `limiters` together: one RL.ADMITALL per (slot, cost) group
    /// (one group on a standalone server unless costs differ), all groups at
    /// once; when one refuses, the groups that were admitted are refunded.
    /// Each limiter's reply, and whether all were admitted.
    async fn decide(&self, limiters: &[Limiter]) -> Result<(bool, Vec<Reply>), Error> {
        let mut groups: Vec<(Option<Slot>, u64, Vec<usize>, usize)> = Vec::new();
        for (i, l) in limiters.iter().enumerate() {
            let slot = self.cluster.then(|| Slot::for_key(&l.key));
            let words = 2 + l.words.len() + usize::from(l.meta.is_some());
            match groups
                .iter_mut()
                .find(|g| g.0 == slot && g.1 == l.cost && g.3 + words <= MAX_ARGS)
            {
                Some(g) => {
                    g.2.push(i);
                    g.3 += words;
                }
                None => groups.push((slot, l.cost, vec![i], 4 + words)),
            }
        }
        let calls = groups.iter().map(|(_, _, members, _)| {
            let group: Vec<Limiter> = members.iter().map(|&i| limiters[i].clone()).collect();
            async move { self.valkey.admit_all(&group).await }
        });
        let results = join_all(calls).await;
        let mut replies = vec![[0i64; 5]; limiters.len()];
        let mut all = true;
        let mut failure = None;
        let mut admitted_groups = Vec::new();
        for (g, r) in groups.iter().zip(results) {
            match r {
                Ok((ok, rs)) => {
                    for (&i, rep) in g.2.iter().zip(rs) {
                        replies[i] = rep;
                    }
                    if ok {
                        admitted_groups.push(g);
                    } else {
                        all = false;
                    }
                }
                Err(e) => {
                    all = false;
                    failure = Some(e);
                }
            }
        }
        if !all && !admitted_groups.is_empty() {
            // The give-back: between the admitted group's call and this
            // refund, its limiters held the cost of a request that was
            // refused (rls/README.md, "Cluster").
            self.metrics
                .giveback
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let members: Vec<usize> = admitted_groups
                .iter()
                .flat_map(|g| g.2.iter().copied())
                .collect();
            let refunds = join_all(members.iter().map(|&i| self.valkey.refund(&limiters[i]))).await;
            for (&i, r) in members.iter().zip(refunds) {
                match r {
                    Ok(rep) => replies[i] = [1, rep[1], rep[2], rep[3], rep[4]],
                    Err(e) => {
                        tracing::warn!(key = %limiters[i].key, error = %e, "give-back failed")
                    }
                }
            }
        }
        if let Some(e) = failure {
            return Err(e);
        }
        Ok((all, replies))
    }

    /// Each planned limiter's reply. A limit of 0 (and no META hash)
    /// refuses every request without a call, as in the reference (the
    /// module reads `LIMIT 0` as unlimited); when such a limit is enforced
    /// the others are only peeked at (COST 0), since the request is refused.
    async fn decide_request(&self, planned: &[Planned]) -> Result<Vec<Reply>, Error> {
        const BLOCKED: Reply = [0, 0, 0, -1, 0];
        let blocks =
            |p: &Planned| p.limit.rate.requests_per_unit == 0 && p.limit.rate.meta.is_none();
        let mut replies = vec![BLOCKED; planned.len()];
        let blocked = planned.iter().any(|p| blocks(p) && !p.limit.shadow_mode);
        let live: Vec<usize> = (0..planned.len())
            .filter(|&k| !blocks(&planned[k]))
            .collect();
        if live.is_empty() {
            return Ok(replies);
        }
        let limiters: Vec<Limiter> = live
            .iter()
            .map(|&k| {
                let mut l = planned[k].limiter.clone();
                if blocked {
                    l.cost = 0;
                }
                l
            })
            .collect();
        let (admitted, rs) = self.decide(&limiters).await?;
        for (&k, r) in live.iter().zip(rs) {
            replies[k] = r;
        }
        if admitted || blocked {
            return Ok(replies);
        }
        let refusing: Vec<usize> = live
            .iter()
            .copied()
            .filter(|&k| replies[k][0] == 0)
            .collect();
        if refusing.is_empty() || !refusing.iter().all(|&k| planned[k].limit.shadow_mode) {
            return Ok(replies);
        }
        // Only shadow limits refused: the request goes on, so the enforced
        // limits are decided without them.
        let enforced: Vec<usize> = live
            .iter()
            .copied()
            .filter(|&k| !planned[k].limit.shadow_mode)
            .collect();
        if !enforced.is_empty() {
            let ls: Vec<Limiter> = enforced
                .iter()
                .map(|&k| planned[k].limiter.clone())
                .collect();
            let (_, rs) = self.decide(&ls).await?;
            for (&k, r) in enforced.iter().zip(rs) {
                replies[k] = r;
            }
        }
        Ok(replies)
    }

    pub async fn should_rate_limit(
        &self,
        req: RateLimitRequest,
    ) -> Result<RateLimitResponse, Status> {
        self.metrics
            .requests
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let config = self.config();
        let mut statuses: Vec<DescriptorStatus> = req
            .descriptors
            .iter()
            .map(|_| DescriptorStatus {
                code: Code::Ok as i32,
                limit_remaining: u32::MAX,
                ..Default::default()
            })
            .collect();
        let Some(domain) = config.domains.get(&req.domain) else {
            tracing::debug!(domain = %req.domain, "unknown domain: every descriptor OK");
            return Ok(RateLimitResponse {
                overall_code: Code::Ok as i32,
                statuses,
                ..Default::default()
            });
        };
        let request_cost = u64::from(req.hits_addend.max(1));
        // (descriptor index, its limit, its entries, whether the request gave the limit)
        type Matched = (usize, Arc<Limit>, Vec<(String, String)>, bool);
        let mut matched: Vec<Matched> = Vec::new();
        for (i, d) in req.descriptors.iter().enumerate() {
            if d.entries.is_empty() {
                return Err(Status::invalid_argument("a descriptor with no entries"));
            }
            let entries: Vec<(String, String)> = d
                .entries
                .iter()
                .map(|e| (e.key.clone(), e.value.clone()))
                .collect();
            let base = limits::find(domain, &entries);
            let (limit, overridden) = match &d.limit {
                Some(o) => match unit_of(o.unit) {
                    Some(unit) => (
                        Some(limits::override_limit(
                            base.as_ref(),
                            o.requests_per_unit,
                            unit,
                            &entries,
                        )),
                        true,
                    ),
                    None => (base, false),
                },
                None => (base, false),
            };
            if let Some(limit) = limit {
                matched.push((i, limit, entries, overridden));
            }
        }
        // `replaces`: a limit named by another matched limit does not apply.
        let replaced: HashSet<&str> = matched
            .iter()
            .flat_map(|(_, l, _, _)| l.rate.replaces.iter().map(|r| r.name.as_str()))
            .collect();
        let mut planned = Vec::new();
        let mut refunds = Vec::new();
        for (i, limit, entries, overridden) in &matched {
            if limit
                .rate
                .name
                .as_deref()
                .is_some_and(|n| replaced.contains(n))
            {
                continue;
            }
            let stat = limits::stat_key(limit, entries);
            let cost = req.descriptors[*i]
                .hits_addend
                .as_ref()
                .map_or(request_cost, |h| h.value);
            if req.descriptors[*i].is_negative_hits {
                // A refill (`is_negative_hits`): RL.REFUND gives the cost
                // back; the descriptor is answered OK.
                if !limit.rate.unlimited {
                    refunds.push(Limiter {
                        key: limits::key(&self.prefix, domain, entries, limit, *overridden),
                        words: limits::policy_words(&limit.rate),
                        meta: limit.rate.meta.clone(),
                        cost,
                    });
                }
                continue;
            }
            self.metrics
                .add(&domain.name, &stat, metrics::TOTAL_HITS, cost);
            if limit.rate.unlimited {
                self.metrics
                    .add(&domain.name, &stat, metrics::WITHIN_LIMIT, cost);
                continue;
            }
            planned.push(Planned {
                index: *i,
                limit: limit.clone(),
                stat,
                limiter: Limiter {
                    key: limits::key(&self.prefix, domain, entries, limit, *overridden),
                    words: limits::policy_words(&limit.rate),
                    meta: limit.rate.meta.clone(),
                    cost,
                },
            });
        }
        if !refunds.is_empty() {
            for r in join_all(refunds.iter().map(|l| self.valkey.refund(l))).await {
                if let Err(e) = r {
                    self.metrics
                        .grpc_errors
                        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    if self.failure_mode == FailureMode::Error {
                        return Err(Status::unavailable(e.to_string()));
                    }
                }
            }
        }
        if planned.is_empty() {
            return Ok(RateLimitResponse {
                overall_code: Code::Ok as i32,
                statuses,
                ..Default::default()
            });
        }
        let outcome = self.decide_request(&planned).await;
        let replies = match outcome {
            Ok(r) => r,
            Err(e) => {
                self.metrics
                    .grpc_errors
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                tracing::warn!(domain = %domain.name, error = %e, failure_mode = ?self.failure_mode, "decision failed");
                return match self.failure_mode {
                    FailureMode::Error => Err(Status::unavailable(e.to_string())),
                    FailureMode::Allow => Ok(RateLimitResponse {
                        overall_code: Code::Ok as i32,
                        statuses,
                        ..Default::default()
                    }),
                    FailureMode::Deny => {
                        for p in &planned {
                            statuses[p.index].code = Code::OverLimit as i32;
                        }
                        Ok(RateLimitResponse {
                            overall_code: Code::OverLimit as i32,
                            statuses,
                            ..Default::default()
                        })
                    }
                };
            }
        };
        let mut over = false;
        for (p, r) in planned.iter().zip(&replies) {
            let [admitted, limit, remaining, retry, reset] = *r;
            let refused = admitted == 0;
            let cost = p.limiter.cost;
            let m = &self.metrics;
            if refused {
                m.add(&domain.name, &p.stat, metrics::OVER_LIMIT, cost);
                if p.limit.shadow_mode {
                    m.add(&domain.name, &p.stat, metrics::SHADOW_MODE, cost);
                }
            } else {
                m.add(&domain.name, &p.stat, metrics::WITHIN_LIMIT, cost);
                if limit > 0 && (limit - remaining) as f64 > NEAR_LIMIT_RATIO * limit as f64 {
                    m.add(&domain.name, &p.stat, metrics::NEAR_LIMIT, cost);
                }
            }
            let enforced_refusal = refused && !p.limit.shadow_mode;
            over |= enforced_refusal;
            let rpu = if p.limit.rate.requests_per_unit > 0 {
                p.limit.rate.requests_per_unit as i64
            } else {
                limit
            };
            let s = &mut statuses[p.index];
            s.code = if enforced_refusal {
                Code::OverLimit as i32
            } else {
                Code::Ok as i32
            };
            s.current_limit = Some(PbRateLimit {
                name: p.limit.rate.name.clone().unwrap_or_default(),
                requests_per_unit: clamp_u32(rpu),
                unit: pb_unit(p.limit.rate.unit) as i32,
            });
            s.limit_remaining = clamp_u32(remaining);
            // A refusal tells when the same request would pass.
            let until = if refused && retry >= 0 { retry } else { reset };
            s.duration_until_reset = Some(duration_ms(until));
        }
        Ok(RateLimitResponse {
            overall_code: if over { Code::OverLimit } else { Code::Ok } as i32,
            statuses,
            ..Default::default()
        })
    }
}

#[tonic::async_trait]
impl RateLimitService for Service {
    async fn should_rate_limit(
        &self,
        request: Request<RateLimitRequest>,
    ) -> Result<Response<RateLimitResponse>, Status> {
        let req = request.into_inner();
        tracing::debug!(domain = %req.domain, hits_addend = req.hits_addend, descriptors = ?req.descriptors, "ShouldRateLimit");
        self.0.should_rate_limit(req).await.map(Response::new)
    }
}
