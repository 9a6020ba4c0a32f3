//! RL.ADMITALL numkeys key [key ...] [COST n] POLICY [ALGO name] [LIMIT max]
//! [WINDOW ms] [BURST n] [META metakey] [SHADOW] [POLICY ...]
//!
//! One POLICY per key, in order. All are admitted, or none is consumed. A
//! POLICY in shadow mode never refuses: its would-be refusal consumes
//! nothing (it makes only the repair a refusal makes) and blocks no other.

use super::Call;
use crate::algo::penalty::{self, Penalty, Plan, Read};
use crate::algo::{self, Charge, Decision, Policy, Slot, Write};
use crate::args::{AdmitAll, Opt};
use crate::error::RlError;
use crate::ffi::{Ctx, Str};
use crate::receipt::{self, Source};
use crate::resolve::resolve;
use crate::store::{self, Key};
use crate::{clock, config, reply, stats};

pub fn admit_all(call: &Call) -> Result<(), RlError> {
    let ctx = call.ctx;
    let request = AdmitAll::parse(call.args)?;
    let now = clock::now();
    let mut limiters = Vec::with_capacity(request.keys);
    for (i, opts) in request.policies.iter().enumerate() {
        let (policy, shadow, penalty) = match resolve(ctx, call.argv, opts)? {
            Some(r) => (Some(r.policy(now.ms)?), r.shadow, r.penalty(now.ms)?),
            None => (None, false, Penalty::default()),
        };
        if let (Some(_), Some(policy)) = (request.reserve, &policy) {
            books(policy, shadow, opts.shadow)?;
        }
        limiters.push((call.argv[2 + i], policy, shadow, penalty));
    }
    if let Some(max_ms) = request.reserve {
        book_all(ctx, &mut limiters, request.cost, max_ms, now)?;
    }
    let mut members = Vec::with_capacity(limiters.len());
    for &(name, policy, shadow, penalty) in &limiters {
        let Some(policy) = policy else {
            members.push(Member {
                name,
                policy: None,
                shadow,
                penalty,
                now_ms: now.ms,
                read: Read::plain(None),
                decision: Decision::UNLIMITED,
                plan: Plan::Plain(Write::Nothing),
            });
            continue;
        };
        // Each key is closed as soon as it is read: opening the next may
        // fire an event (`expired`) whose subscriber writes to any of them.
        let read = Key::write(ctx, name).read_limiter(policy.algo, now.ms)?;
        let (decision, plan) = penalty::decide(
            algo::admit,
            read,
            &policy,
            penalty,
            request.cost,
            now,
            false,
        );
        members.push(Member {
            name,
            policy: Some(policy),
            shadow,
            penalty,
            now_ms: now.ms,
            read,
            decision,
            plan,
        });
    }
    let all_admitted = members.iter().all(|m| m.decision.admitted || m.shadow);
    let (mut refused_by, mut longest) = (0, 0i64);
    let (mut hits, mut shadows) = (Vec::new(), Vec::new());
    for (i, m) in members.iter_mut().enumerate() {
        let wait = m.decision.retry_after_ms;
        if m.shadow && !m.decision.admitted {
            // A would-be refusal: as an enforced refusal, it consumes
            // nothing but makes its repair; its wait is not the caller's.
            m.apply(ctx);
            shadows.push(m.name);
        } else if all_admitted {
            // The caller proceeds after the longest wait (a leaky queue's delay).
            longest = longest.max(wait);
            m.apply(ctx);
        } else if !m.decision.admitted {
            // A refusal consumes nothing, but still makes the one repair
            // RL.ADMIT would (an expiry for a TTL-less counter, a stored
            // time pulled back), or a corrupt state would block for good.
            m.apply(ctx);
            hits.push(m.name);
            if refused_by == 0 || longest >= 0 && (wait < 0 || wait > longest) {
                refused_by = i + 1;
                longest = wait;
            }
        } else if let Some(policy) = &m.policy {
            // Nothing was consumed: report this member as it stands.
            let policy = &Policy {
                charge: Charge::Plain,
                ..*policy
            };
            let peek = penalty::decide(algo::admit, m.read, policy, m.penalty, 0, now, false);
            m.decision = peek.0;
        }
    }
    let decisions: Vec<(Decision, bool)> = members.iter().map(|m| (m.decision, m.shadow)).collect();
    // The call counts once: refused, else shadow-refused if any member
    // would have refused, else admitted. Each refusing member fires its
    // refusal's event, each would-be refusal `rl.shadow`.
    let verdict = (all_admitted && shadows.is_empty(), all_admitted);
    let (tally, event) = receipt::of_decision(
        Source::AdmitAll,
        verdict,
        longest,
        request.cost,
        config::hit_events(),
    );
    if let Some(event) = event {
        for name in hits {
            store::notify(ctx, event, name);
        }
    }
    let (_, shadow_event) = receipt::of_decision(
        Source::AdmitAll,
        (false, true),
        0,
        request.cost,
        config::hit_events(),
    );
    if let Some(event) = shadow_event {
        for name in shadows {
            store::notify(ctx, event, name);
        }
    }
    stats::count(tally);
    let slot = request.reserve.map(|_| {
        let at = members.iter().find_map(|m| m.policy.map(|p| p.charge));
        match (all_admitted, at) {
            (true, Some(Charge::BookAt { at_ms })) => (Slot { at_ms }, now.ms),
            (true, _) => (Slot { at_ms: now.ms }, now.ms),
            (false, _) => (Slot::NONE, now.ms),
        }
    });
    reply::admit_all(
        ctx,
        all_admitted,
        refused_by as i64,
        longest,
        &decisions,
        slot,
    );
    Ok(())
}

/// RL.ADMITALL RESERVE: only gcra, token and leaky book, and not in
/// shadow mode (inline, or from META).
fn books(policy: &Policy, shadow: bool, inline_shadow: bool) -> Result<(), RlError> {
    if policy.algo.is_window() {
        return Err(RlError::NeedsBooking(Opt::Reserve.name()));
    }
    if shadow {
        let what = match inline_shadow {
            true => Opt::Shadow.name(),
            false => "META field 'shadow'",
        };
        let why = "a trial must never make a caller wait";
        return Err(RlError::Conflict(Opt::Reserve.name(), what, why));
    }
    Ok(())
}

/// RL.ADMITALL RESERVE: the common start T, the latest of the limiters'
/// earliest slots (so that none is left unused before it); each limiter
/// then books as if admitted at T. Beyond max_ms (or a cost that never
/// fits), each is judged as a RESERVE of its own, which some refuse: the
/// all-or-nothing refusal.
fn book_all(
    ctx: Ctx,
    limiters: &mut [(Str, Option<Policy>, bool, Penalty)],
    cost: i64,
    max_ms: i64,
    now: algo::Now,
) -> Result<(), RlError> {
    let mut start = Some(now.ms);
    for (name, policy, _, _) in limiters.iter() {
        let Some(policy) = policy else { continue };
        let read = Key::write(ctx, *name).read_limiter(policy.algo, now.ms)?;
        let first = algo::first_slot(read.found, policy, cost, now);
        start = start.zip(first).map(|(a, b)| a.max(b));
    }
    let charge = match start {
        Some(at_ms) if at_ms.saturating_sub(now.ms) <= max_ms => Charge::BookAt { at_ms },
        _ => Charge::Reserve { max_ms },
    };
    for (_, policy, _, _) in limiters.iter_mut() {
        if let Some(policy) = policy {
            policy.charge = charge;
        }
    }
    Ok(())
}

/// One limiter of an RL.ADMITALL call.
struct Member {
    name: Str,
    /// `None` for an unlimited member.
    policy: Option<Policy>,
    /// Shadow mode: a refusal is answered as an admission.
    shadow: bool,
    /// The policy's penalty (ms 0: none).
    penalty: Penalty,
    /// The call's clock (ms), to read the key again by.
    now_ms: i64,
    read: Read,
    decision: Decision,
    plan: Plan,
}

impl Member {
    /// Applies the member's write on its key, opened again and closed at
    /// once. Events fired since the key was read (`new` when an earlier
    /// member's key was created, `expired` when a later one was opened) may
    /// have let a subscriber change it: then it is left as that made it,
    /// and nothing is written or propagated for it.
    fn apply(&self, ctx: Ctx) {
        let Some(policy) = &self.policy else { return };
        if self.plan == Plan::Plain(Write::Nothing) {
            return;
        }
        let mut key = Key::write(ctx, self.name);
        if key.read_limiter(policy.algo, self.now_ms).ok() == Some(self.read) {
            super::write_penalised(ctx, &mut key, self.name, self.plan, &self.read);
        }
    }
}
