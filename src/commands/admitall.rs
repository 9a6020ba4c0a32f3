//! RL.ADMITALL numkeys key [key ...] [COST n] POLICY [ALGO name] [LIMIT max]
//! [WINDOW ms] [BURST n] [META metakey] [POLICY ...]
//!
//! One POLICY per key, in order. All are admitted, or none is consumed.

use super::Call;
use crate::algo::{self, Decision, Found, Outcome, Policy, Write};
use crate::args::AdmitAll;
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
        let policy = resolve(ctx, call.argv, opts)?
            .map(|r| r.policy(now.ms))
            .transpose()?;
        limiters.push((call.argv[2 + i], policy));
    }
    let mut members = Vec::with_capacity(limiters.len());
    for &(name, policy) in &limiters {
        let Some(policy) = policy else {
            members.push(Member {
                name,
                policy: None,
                found: None,
                outcome: Outcome {
                    decision: Decision::UNLIMITED,
                    write: Write::Nothing,
                    reset_at: now.ms,
                },
            });
            continue;
        };
        // Each key is closed as soon as it is read: opening the next may
        // fire an event (`expired`) whose subscriber writes to any of them.
        let found = Key::write(ctx, name).read_state(policy.algo)?;
        let outcome = algo::admit(found, &policy, request.cost, now);
        members.push(Member {
            name,
            policy: Some(policy),
            found,
            outcome,
        });
    }
    let all_admitted = members.iter().all(|m| m.outcome.decision.admitted);
    let (mut refused_by, mut longest) = (0, 0i64);
    let mut hits = Vec::new();
    for (i, m) in members.iter_mut().enumerate() {
        let wait = m.outcome.decision.retry_after_ms;
        if all_admitted {
            // The caller proceeds after the longest wait (a leaky queue's delay).
            longest = longest.max(wait);
            m.apply(ctx);
        } else if !m.outcome.decision.admitted {
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
            m.outcome = algo::admit(m.found, policy, 0, now);
        }
    }
    let decisions: Vec<Decision> = members.iter().map(|m| m.outcome.decision).collect();
    // The call counts once; its refusal's event is fired for every refusing
    // member.
    let (tally, event) = receipt::of_decision(
        Source::AdmitAll,
        all_admitted,
        longest,
        request.cost,
        config::hit_events(),
    );
    if let Some(event) = event {
        for name in hits {
            store::notify(ctx, event, name);
        }
    }
    stats::count(tally);
    reply::admit_all(ctx, all_admitted, refused_by as i64, longest, &decisions);
    Ok(())
}

/// One limiter of an RL.ADMITALL call.
struct Member {
    name: Str,
    /// `None` for an unlimited member.
    policy: Option<Policy>,
    found: Found,
    outcome: Outcome,
}

impl Member {
    /// Applies the member's write on its key, opened again and closed at
    /// once. Events fired since the key was read (`new` when an earlier
    /// member's key was created, `expired` when a later one was opened) may
    /// have let a subscriber change it: then it is left as that made it,
    /// and nothing is written or propagated for it.
    fn apply(&self, ctx: Ctx) {
        let Some(policy) = &self.policy else { return };
        if self.outcome.write == Write::Nothing {
            return;
        }
        let mut key = Key::write(ctx, self.name);
        if key.read_state(policy.algo).ok() == Some(self.found) {
            super::write(ctx, &mut key, self.name, self.outcome.write, self.found);
        }
    }
}
