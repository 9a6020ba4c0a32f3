//! One limiter: RL.ADMIT, RL.REFUND, RL.TTL, RL.LIMIT and RL.RESET. The
//! registered arities guarantee the key (and RL.LIMIT's and RL.RESET's
//! exact count), so only the options are checked here.

use super::Call;
use crate::algo::penalty::{self, Plan};
use crate::algo::{self, fixed, Algo, Decide, Decision, Write};
use crate::args::{self, read_options, OptSet, Options, POLICY_SET};
use crate::error::RlError;
use crate::receipt::{Event, Source, Tally};
use crate::resolve::{meta_limit, resolve};
use crate::store::{self, Key, KeyKind};
use crate::{clock, reply, stats};

/// RL.ADMIT and RL.REFUND take every option.
const ADMIT_OPTIONS: OptSet = args::LIMITER_SET;

/// RL.ADMIT key [ALGO name] [LIMIT max] [WINDOW ms] [BURST n] [META metakey] [SHADOW] [COST n]
pub fn admit(call: &Call) -> Result<(), RlError> {
    match update(call, algo::admit, false)? {
        None => {
            stats::count(Tally::Admitted(Source::Unlimited));
            reply::decision(call.ctx, &Decision::UNLIMITED, false);
        }
        Some(Updated {
            algo,
            cost,
            decision: d,
            shadow,
            ..
        }) => {
            let source = Source::Algo(algo);
            super::record(
                call.ctx,
                call.key(),
                source,
                (d.admitted, shadow),
                d.retry_after_ms,
                cost,
            );
            reply::decision(call.ctx, &d, shadow);
        }
    }
    Ok(())
}

/// RL.REFUND key [ALGO name] [LIMIT max] [WINDOW ms] [BURST n] [META metakey] [SHADOW] [COST n]
pub fn refund(call: &Call) -> Result<(), RlError> {
    match update(call, algo::refund, true)? {
        None => reply::decision(call.ctx, &Decision::UNLIMITED, false),
        Some(updated) => {
            if updated.wrote {
                store::notify(call.ctx, Event::Refund, call.key());
            }
            reply::decision(call.ctx, &updated.decision, updated.shadow);
        }
    }
    Ok(())
}

/// What RL.ADMIT or RL.REFUND did to a limiter with a limit.
struct Updated {
    algo: Algo,
    cost: i64,
    decision: Decision,
    /// Whether the key was written.
    wrote: bool,
    /// Shadow mode: a refusal is answered as an admission.
    shadow: bool,
}

/// The path RL.ADMIT and RL.REFUND share: options parsed, the policy
/// resolved, the state read, `decide` called and its write carried out.
/// `None`: the limiter has no limit.
// Always inlined into its two callers: its large result then is not
// copied out, and `decide` is a direct call.
#[inline(always)]
fn update(call: &Call, decide: Decide, refund: bool) -> Result<Option<Updated>, RlError> {
    let mut opts = Options::default();
    read_options(call.args, 2, ADMIT_OPTIONS, &mut opts)?;
    let now = clock::now();
    let Some(resolved) = resolve(call.ctx, call.argv, &opts)? else {
        return Ok(None);
    };
    let policy = resolved.policy(now.ms)?;
    let penalty_ms = resolved.penalty(now.ms)?;
    let name = call.key();
    let mut key = Key::write(call.ctx, name);
    let cost = opts.cost.unwrap_or(1);
    // A penalty's form is no state: it comes back as an error, read again
    // by `boxed`, as is any key under a policy with PENALTY.
    let found = match key.read_state(policy.algo) {
        Ok(found) if penalty_ms == 0 => found,
        _ => {
            let (decision, wrote) = boxed(
                call, &mut key, decide, &policy, penalty_ms, cost, now, refund,
            )?;
            return Ok(Some(Updated {
                algo: policy.algo,
                cost,
                decision,
                wrote,
                shadow: resolved.shadow,
            }));
        }
    };
    let outcome = decide(found, &policy, cost, now);
    super::write(call.ctx, &mut key, name, outcome.write, found);
    Ok(Some(Updated {
        algo: policy.algo,
        cost,
        decision: outcome.decision,
        wrote: !matches!(outcome.write, Write::Nothing),
        shadow: resolved.shadow,
    }))
}

/// `update`'s path for a limiter that holds or may start a penalty, out
/// of the plain call's way: the decision, and whether the key was written.
#[cold]
#[inline(never)]
#[allow(clippy::too_many_arguments)]
fn boxed(
    call: &Call,
    key: &mut Key,
    decide: Decide,
    policy: &algo::Policy,
    penalty_ms: i64,
    cost: i64,
    now: algo::Now,
    refund: bool,
) -> Result<(Decision, bool), RlError> {
    // The key read again, its penalty's form included (`algo::penalty`).
    let read = key.read_limiter(policy.algo, now.ms)?;
    let (decision, plan) = penalty::decide(decide, read, policy, penalty_ms, cost, now, refund);
    super::write_penalised(call.ctx, key, call.key(), plan, &read);
    Ok((decision, plan != Plan::Plain(Write::Nothing)))
}

/// RL.TTL key [ALGO name] [LIMIT max] [WINDOW ms] [BURST n] [META metakey] [SHADOW]
/// (in shadow mode too, the wait a request would be told if enforced)
pub fn ttl(call: &Call) -> Result<(), RlError> {
    let mut opts = Options::default();
    read_options(call.args, 2, POLICY_SET, &mut opts)?;
    let now = clock::now();
    let Some(resolved) = resolve(call.ctx, call.argv, &opts)? else {
        reply::int(call.ctx, 0);
        return Ok(());
    };
    // The fixed window's back-off is the counter's PTTL, so it needs no
    // window; given one, foreign state reads as RL.ADMIT reads it.
    let policy = match (resolved.algo, resolved.window) {
        (Algo::Fixed, None) => None,
        _ => Some(resolved.policy(now.ms)?),
    };
    // PENALTY is judged as RL.ADMIT judges it; a held penalty counts
    // whatever the policy says.
    resolved.penalty(now.ms)?;
    let key = Key::read(call.ctx, call.key());
    let read = key.read_limiter(resolved.algo, now.ms)?;
    let found = read.found;
    let own = match policy {
        None => fixed::backoff(fixed::counter_of(found, now.ms), resolved.limit, now.ms),
        // The wait a request of cost 1 would be told now (a leaky queue's
        // delay included).
        Some(policy) => algo::admit(found, &policy, 1, now)
            .decision
            .retry_after_ms
            .max(0),
    };
    // What is left of a penalty, if longer.
    reply::int(call.ctx, penalty::backoff(&read, own, now.ms));
    Ok(())
}

/// RL.LIMIT metakey
pub fn limit(call: &Call) -> Result<(), RlError> {
    reply::int(call.ctx, meta_limit(call.ctx, call.key())?);
    Ok(())
}

/// RL.RESET key
pub fn reset(call: &Call) -> Result<(), RlError> {
    let name = call.key();
    let mut key = Key::write(call.ctx, name);
    let existed = match key.kind() {
        KeyKind::Empty => false,
        KeyKind::String => true,
        _ => return Err(RlError::WrongType),
    };
    if existed {
        super::write(call.ctx, &mut key, name, Write::Delete, None);
        drop(key);
        store::notify(call.ctx, Event::Reset, name);
    }
    reply::int(call.ctx, i64::from(existed));
    Ok(())
}
