//! One limiter: RL.ADMIT, RL.REFUND, RL.TTL, RL.LIMIT and RL.RESET. The
//! registered arities guarantee the key (and RL.LIMIT's and RL.RESET's
//! exact count), so only the options are checked here.

use super::Call;
use crate::algo::penalty::{self, Penalty, Plan};
use crate::algo::Now;
use crate::algo::{
    self, fixed, Algo, Charge, Decide, Decision, Found, Outcome, Policy, Slot, Write,
};
use crate::args::{self, read_options, Opt, OptSet, Options, POLICY_SET};
use crate::block::{self, Mode, Ticket, Waits};
use crate::error::RlError;
use crate::receipt::{Event, Source, Tally};
use crate::resolve::{meta_limit, resolve, Resolved};
use crate::store::{self, Key, KeyKind};
use crate::{clock, reply, stats};

/// RL.ADMIT takes every option; RL.REFUND all but BLOCK.
const ADMIT_OPTIONS: OptSet = args::ADMIT_SET;
const REFUND_OPTIONS: OptSet = args::REFUND_SET;

/// RL.ADMIT key [ALGO name] [LIMIT max] [WINDOW ms] [BURST n] [META metakey] [SHADOW] [PENALTY ms] [ESCALATE cap_ms]
/// [ALIGN] [CALENDAR period] [TZ offset] [COST n] [BLOCK timeout_ms]
/// (a shadow refusal is answered as an admission, so it never waits)
pub fn admit(call: &Call) -> Result<(), RlError> {
    let mut opts = Options::default();
    read_options(call.args, 2, ADMIT_OPTIONS, &mut opts)?;
    if opts.extended {
        args::check_charge(&opts)?;
        if opts.reserve.is_some() {
            return admit_reserve(call, &opts);
        }
        if opts.force {
            // Usage that already happened: it lands whoever waits.
            return answer(call, update(call, &opts, clock::now(), algo::admit, false)?);
        }
    }
    // Anyone waiting anywhere: out of line, so that the usual call keeps
    // its cost.
    if block::anyone_waits() {
        return admit_in_turn(call, &opts);
    }
    let updated = update(call, &opts, clock::now(), algo::admit, false)?;
    if let (
        Some(timeout),
        Some(Updated {
            decision: d,
            shadow: false,
            ..
        }),
    ) = (opts.block, &updated)
    {
        if !d.admitted && d.retry_after_ms >= 0 && block::may_block(call.ctx) {
            return wait_for_turn(call, timeout, d.retry_after_ms);
        }
    }
    answer(call, updated)
}

/// RL.ADMIT with RESERVE: booked at once or refused, never waiting. Behind
/// callers waiting on the key (BLOCK) it books nothing, so that it never
/// overtakes them.
#[cold]
#[inline(never)]
fn admit_reserve(call: &Call, opts: &Options) -> Result<(), RlError> {
    let now = clock::now();
    let behind = block::anyone_waits() && block::queued(call.ctx, call.key(), now.ms).is_some();
    let decide: Decide = if behind { peek } else { algo::admit };
    match update(call, opts, now, decide, behind)? {
        None => {
            stats::count(Tally::Admitted(Source::Unlimited));
            let slot = Slot {
                delay_ms: 0,
                at_ms: now.ms,
            };
            reply::reserved(call.ctx, &Decision::UNLIMITED, slot);
        }
        Some(Updated {
            algo,
            cost,
            decision: d,
            ..
        }) => {
            let source = Source::Algo(algo);
            let admitted = (d.admitted, false);
            super::record(
                call.ctx,
                call.key(),
                source,
                admitted,
                d.retry_after_ms,
                cost,
            );
            let slot = if d.admitted { d.slot } else { Slot::NONE };
            reply::reserved(call.ctx, &d, slot);
        }
    }
    Ok(())
}

/// A refused RL.ADMIT given BLOCK, with nobody waiting: it waits.
#[cold]
#[inline(never)]
fn wait_for_turn(call: &Call, timeout: i64, in_ms: i64) -> Result<(), RlError> {
    block::wait(call.ctx, call.key(), Waits::Admit, timeout, in_ms)
}

/// RL.ADMIT while callers wait (on any key): a woken or timed-out waiter,
/// a call behind a queue, or any other (which may block).
#[cold]
#[inline(never)]
fn admit_in_turn(call: &Call, opts: &Options) -> Result<(), RlError> {
    match block::mode(call.ctx) {
        Mode::Fresh => {}
        Mode::Woken(ticket) => return admit_woken(call, opts, ticket),
        Mode::TimedOut(ticket) => {
            block::timed_out(call.ctx, ticket);
            return answer(call, update(call, opts, clock::now(), peek, true)?);
        }
    }
    let now = clock::now();
    // BLOCK where the server allows blocking: the timeout (the context is
    // asked only when the call would wait).
    let wait = || opts.block.filter(|_| block::may_block(call.ctx));
    // First come, first served: while others wait on the key, a call
    // joins them, or is refused with the wait the queue's head has.
    if let Some(head_at) = block::queued(call.ctx, call.key(), now.ms) {
        if let Some(timeout) = wait() {
            return block::wait(
                call.ctx,
                call.key(),
                Waits::Admit,
                timeout,
                head_at - now.ms,
            );
        }
        let mut updated = update(call, opts, now, peek, true)?;
        if let Some(Updated { decision: d, .. }) = &mut updated {
            if d.retry_after_ms >= 0 {
                d.retry_after_ms = d.retry_after_ms.max(head_at - now.ms).max(1);
            }
        }
        return answer(call, updated);
    }
    let updated = update(call, opts, now, algo::admit, false)?;
    if let Some(Updated {
        decision: d,
        shadow: false,
        ..
    }) = &updated
    {
        // Refused, and admissible some day: wait for it.
        let waits = !d.admitted && d.retry_after_ms >= 0;
        if let Some(timeout) = wait().filter(|_| waits) {
            let in_ms = d.retry_after_ms;
            return block::wait(call.ctx, call.key(), Waits::Admit, timeout, in_ms);
        }
    }
    answer(call, updated)
}

/// A waiting RL.ADMIT woken: the head is admitted if it can be, else it
/// (and everyone behind it) waits on.
fn admit_woken(call: &Call, opts: &Options, ticket: &Ticket) -> Result<(), RlError> {
    if !block::is_head(ticket) || !block::serves_key(call.ctx, call.key()) {
        block::stay(call.ctx, ticket, None);
        return Ok(());
    }
    let updated = match update(call, opts, clock::now(), algo::admit, false) {
        Ok(updated) => updated,
        Err(err) => {
            block::served(call.ctx, ticket, call.key());
            return Err(err);
        }
    };
    if let Some(Updated {
        decision: d,
        shadow: false,
        ..
    }) = &updated
    {
        if !d.admitted && d.retry_after_ms >= 0 {
            block::stay(call.ctx, ticket, Some(d.retry_after_ms));
            return Ok(());
        }
    }
    block::served(call.ctx, ticket, call.key());
    answer(call, updated)
}

/// RL.ADMIT's answer: its receipt and its reply.
#[inline(always)]
fn answer(call: &Call, updated: Option<Updated>) -> Result<(), RlError> {
    match updated {
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

/// The decision RL.ADMIT would get, as a refusal that writes nothing: a
/// timed-out waiter's answer, and a call refused behind a queue. `update`
/// runs it as it runs a refund (its last argument), so that it starts no
/// penalty either.
fn peek(found: Found, policy: &Policy, cost: i64, now: Now) -> Outcome {
    let mut outcome = algo::admit(found, policy, cost, now);
    outcome.write = Write::Nothing;
    outcome.decision.admitted = false;
    outcome
}

/// RL.REFUND key [ALGO name] [LIMIT max] [WINDOW ms] [BURST n] [META metakey] [SHADOW] [PENALTY ms] [ESCALATE cap_ms]
/// [ALIGN] [CALENDAR period] [TZ offset] [COST n] [AT at_ms]
pub fn refund(call: &Call) -> Result<(), RlError> {
    let mut opts = Options::default();
    read_options(call.args, 2, REFUND_OPTIONS, &mut opts)?;
    match update(call, &opts, clock::now(), algo::refund, true)? {
        None => reply::decision(call.ctx, &Decision::UNLIMITED, false),
        Some(updated) => {
            if updated.wrote {
                store::notify(call.ctx, Event::Refund, call.key());
                block::key_changed(call.ctx, call.key());
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

/// The path RL.ADMIT and RL.REFUND share: the policy
/// resolved, the state read, `decide` called and its write carried out.
/// `None`: the limiter has no limit.
// Always inlined into its two callers: its large result then is not
// copied out, and `decide` is a direct call.
#[inline(always)]
fn update(
    call: &Call,
    opts: &Options,
    now: Now,
    decide: Decide,
    refund: bool,
) -> Result<Option<Updated>, RlError> {
    let Some(resolved) = resolve(call.ctx, call.argv, opts)? else {
        return Ok(None);
    };
    let mut policy = resolved.policy(now.ms)?;
    let penalty = resolved.penalty(now.ms)?;
    if opts.extended {
        policy.charge = charge_of(opts, &resolved, policy.algo)?;
    }
    let name = call.key();
    let mut key = Key::write(call.ctx, name);
    let cost = opts.cost.unwrap_or(1);
    // A penalty's form is no state: it comes back as an error, read again
    // by `boxed`, as is any key under a policy with PENALTY.
    let found = match key.read_state(policy.algo) {
        Ok(found) if penalty.ms == 0 => found,
        _ => {
            let (decision, wrote) =
                boxed(call, &mut key, decide, &policy, penalty, cost, now, refund)?;
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

/// What the call asks beyond the plain decision (FORCE, RESERVE), judged
/// against the resolved policy: RESERVE and AT book, which the windows
/// cannot, and a META hash in shadow mode refuses RESERVE as SHADOW does.
#[cold]
#[inline(never)]
fn charge_of(opts: &Options, resolved: &Resolved, algo: Algo) -> Result<Charge, RlError> {
    let booking = match (opts.reserve, opts.at) {
        (Some(_), _) => Some(Opt::Reserve),
        (None, Some(_)) => Some(Opt::At),
        (None, None) => None,
    };
    if let Some(opt) = booking.filter(|_| algo.is_window()) {
        return Err(RlError::NeedsBooking(opt.name()));
    }
    Ok(match (opts.force, opts.reserve) {
        (_, None) if opts.at.is_some() => Charge::Cancel {
            at_ms: opts.at.unwrap_or(0),
        },
        (true, _) => Charge::Force,
        (false, Some(_)) if resolved.shadow => {
            let why = "a trial must never make a caller wait";
            return Err(RlError::Conflict(
                Opt::Reserve.name(),
                "META field 'shadow'",
                why,
            ));
        }
        (false, Some(max_ms)) => Charge::Reserve { max_ms },
        (false, None) => Charge::Plain,
    })
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
    penalty: Penalty,
    cost: i64,
    now: algo::Now,
    refund: bool,
) -> Result<(Decision, bool), RlError> {
    // The key read again, its penalty's form included (`algo::penalty`).
    let read = key.read_limiter(policy.algo, now.ms)?;
    let (decision, plan) = penalty::decide(decide, read, policy, penalty, cost, now, refund);
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
        block::key_changed(call.ctx, name);
    }
    reply::int(call.ctx, i64::from(existed));
    Ok(())
}
