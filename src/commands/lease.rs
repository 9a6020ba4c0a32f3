//! Concurrency leases: RL.ACQUIRE, RL.RELEASE, RL.EXTEND and RL.INFLIGHT.
//! A lease key is a sorted set of lease ids scored by their deadlines;
//! each call reads what it needs of it (`lease::Held`, never the whole
//! set) with the time read once, asks `algo::lease`, and has `store` carry
//! out the plan (reclaiming the earliest expired leases first, at most
//! `lease::RECLAIM_MAX` a call).

pub use super::lease_shared::seed_nonces;
use super::lease_shared::{next_nonce, record};
use super::{tickets, Call};
use crate::algo::lease::{self, Acquired, WantedId};
use crate::args;
use crate::block::{self, Mode, Waits};
use crate::error::{RlError, QUEUE_IS_LEASE};
use crate::ffi::{str_bytes, Str};
use crate::receipt::LeaseOutcome;
use crate::reply;
use crate::resolve::lease_policy;
use crate::store::{self, Key};

pub(super) const DEADLINE_TOO_LATE: RlError =
    RlError::TooLarge("TTL", "the lease deadline passes 2^53 ms");

/// RL.ACQUIRE key [LIMIT n] [TTL ms] [META metakey] [ID lease-id] [SHADOW] [BLOCK timeout_ms]
/// (a shadow refusal is answered as acquired, so it never waits)
pub fn acquire(call: &Call) -> Result<(), RlError> {
    let opts = args::lease::acquire(call.args)?;
    // A waiter (BLOCK) woken or timed out; only the head may take a slot.
    let (ticket, timed_out) = match block::mode(call.ctx) {
        Mode::Fresh => (None, false),
        Mode::Woken(ticket)
            if !block::is_head(ticket) || !block::serves_key(call.ctx, call.key()) =>
        {
            block::stay(call.ctx, ticket, None);
            return Ok(());
        }
        Mode::Woken(ticket) => (Some(ticket), false),
        Mode::TimedOut(ticket) => {
            block::timed_out(call.ctx, ticket);
            (None, true)
        }
    };
    let fresh = ticket.is_none() && !timed_out;
    let result = acquire_once(call, &opts, fresh, timed_out);
    match (ticket, &result) {
        (Some(ticket), Ok(Some(wait))) => block::stay(call.ctx, ticket, Some(*wait)),
        (Some(ticket), _) => block::served(call.ctx, ticket, call.key()),
        _ => {}
    }
    result.map(|_| ())
}

/// One attempt of RL.ACQUIRE: answered, or `Some(wait)` when it waits
/// (BLOCK) that long at most. `fresh`: a client's call, not a woken
/// waiter's; `timed_out`: a waiter's timeout, answered with the refusal
/// and written nothing.
fn acquire_once(
    call: &Call,
    opts: &args::Options,
    fresh: bool,
    timed_out: bool,
) -> Result<Option<i64>, RlError> {
    let now = crate::clock::now().ms;
    let given = opts.id.map(|at| call.args[at]);
    if let Some(at) = opts.queue {
        if call.args[at] == str_bytes(&call.key()) {
            return Err(RlError::Ticket(QUEUE_IS_LEASE));
        }
    }
    let Some(policy) = lease_policy(call.ctx, call.argv, opts)? else {
        let id = given.map_or_else(|| lease::generated_id(now, next_nonce()), <[u8]>::to_vec);
        match opts.queue {
            None => reply::acquired(call.ctx, &Acquired::unlimited(id)),
            Some(at) => {
                reply::acquired_queued(call.ctx, &Acquired::unlimited(id), 0, call.args[at], false)
            }
        }
        return Ok(None);
    };
    let deadline = lease::deadline_after(now, policy.ttl_ms).ok_or(DEADLINE_TOO_LATE)?;
    if let Some(at) = opts.queue {
        return tickets::acquire_queued(call, opts, &policy, now, at, (fresh, timed_out));
    }
    let name = call.argv[1];
    let shadow = policy.shadow;
    // BLOCK where the server allows blocking, and first come, first
    // served: while others wait, a call joins them, or may only renew.
    // (The context is asked only when the call would wait.) A call in
    // shadow mode never waits: its refusal is answered at once.
    let wait = || {
        opts.block
            .filter(|_| fresh && !shadow && block::may_block(call.ctx))
    };
    let queued = match fresh {
        true => block::queued(call.ctx, name, now),
        false => None,
    };
    if let Some((head_at, timeout)) = queued.and_then(|at| Some((at, wait()?))) {
        block::wait(call.ctx, name, Waits::Acquire, timeout, head_at - now)?;
        return Ok(None);
    }
    let behind = queued.is_some() || timed_out;
    let mut key = Key::write(call.ctx, name);
    let given_str = opts.id.map(|at| call.argv[at]);
    let mut held = key.read_held(call.ctx, name, now, None)?;
    // Granted whatever the key holds under the id, and nothing to reclaim:
    // the store adds a new id at once (ZADD NX: one search of the set, not
    // a lookup and then an add) and learns from it whether the id was held.
    // With nothing reclaimed the set never holds more than after the call.
    let put_first = !behind && lease::grants_any_id(&held, policy.limit) && held.expired == 0;
    let mut put_done = false;
    let wanted = match (given, given_str) {
        (Some(id), Some(id_str)) => {
            put_done = put_first && key.put_new(id_str, deadline);
            if !put_done {
                held.named = key.read_named(&held, id_str)?;
            }
            WantedId::Given(id)
        }
        _ => {
            // Whether the key holds a candidate id; when the call puts
            // first, a free one is added on the spot (ZADD NX).
            let taken_else_added = |id: &[u8]| match put_first {
                true => match key.put_new_bytes(call.ctx, id, deadline) {
                    Some(added) => {
                        put_done = added;
                        !added
                    }
                    None => false,
                },
                false => key.holds(call.ctx, id),
            };
            WantedId::Generated(lease::fresh_nonce(now, taken_else_added, next_nonce))
        }
    };
    // Behind waiters, no free slot is taken (a limit of 0 grants only a
    // renewal); the answer still shows the real limit.
    let limit = match behind {
        true => 0,
        false => policy.limit,
    };
    if lease::refuses(&held, now, limit, wanted) {
        held.earliest_live = key.read_earliest_live(call.ctx, now)?;
    }
    let (mut answer, plan) = lease::acquire(&held, now, limit, policy.ttl_ms, wanted);
    answer.limit = policy.limit;
    if !answer.acquired {
        if let Some(timeout) = wait() {
            // Refused, so it waits: the refusal's wait is when the
            // earliest lease ends (a release may come sooner).
            drop(key);
            block::wait(
                call.ctx,
                name,
                Waits::Acquire,
                timeout,
                answer.retry_after_ms,
            )?;
            return Ok(None);
        }
        if !fresh && !timed_out && !shadow {
            return Ok(Some(answer.retry_after_ms));
        }
        if let Some(head_at) = queued {
            answer.retry_after_ms = answer.retry_after_ms.max(head_at - now).max(1);
        }
    }
    if !timed_out {
        store::execute_leases(call.ctx, &mut key, name, &plan, given_str, put_done);
    }
    drop(key);
    if shadow && !answer.acquired {
        shadow_refused(call, name, answer, wanted, now, plan.reclaimed);
        return Ok(None);
    }
    let outcome = match answer.acquired {
        true => LeaseOutcome::Acquired,
        false => LeaseOutcome::Refused,
    };
    record(call, name, outcome, plan.reclaimed);
    reply::acquired(call.ctx, &answer);
    Ok(None)
}

/// A shadow refusal (see docs/reference.md "Shadow mode"): the refusal
/// was carried out (it took no lease, and reclaimed as a refusal does); it
/// is answered as acquired, with the would-be wait and the id the lease
/// would have had, which the key does not hold.
#[cold]
#[inline(never)]
fn shadow_refused(
    call: &Call,
    name: Str,
    mut answer: Acquired,
    wanted: WantedId,
    now: i64,
    reclaimed: usize,
) {
    answer.lease_id = Some(match wanted {
        WantedId::Given(id) => id.to_vec(),
        WantedId::Generated(nonce) => lease::generated_id(now, nonce),
    });
    record(call, name, LeaseOutcome::ShadowRefused, reclaimed);
    reply::acquired_in_shadow(call.ctx, &answer);
}

/// RL.RELEASE key lease-id [QUEUE ticketkey]
pub fn release(call: &Call) -> Result<(), RlError> {
    let (id, queue_at) = args::lease::release(call.args)?;
    let now = crate::clock::now().ms;
    let name = call.argv[1];
    // With QUEUE: the caller's ticket, judged before anything is written.
    let ticket = match queue_at {
        Some(at) if call.args[at] == str_bytes(&call.key()) => {
            return Err(RlError::Ticket(QUEUE_IS_LEASE))
        }
        Some(at) => Some((
            call.argv[at],
            store::holds_ticket(call.ctx, call.argv[at], id)?,
        )),
        None => None,
    };
    let mut key = Key::write(call.ctx, name);
    let held = key.read_held(call.ctx, name, now, Some(call.argv[2]))?;
    let (released, plan) = lease::release(&held, now, id);
    store::execute_leases(call.ctx, &mut key, name, &plan, Some(call.argv[2]), false);
    drop(key);
    if let Some((queue, held_ticket)) = ticket {
        if held_ticket {
            store::drop_ticket(call.ctx, queue, id);
        }
        if released || held_ticket {
            store::publish_wake_up(call.ctx, queue, name);
        }
    }
    if released {
        // The head waiter is served in this same event-loop cycle.
        block::key_changed(call.ctx, name);
    }
    let outcome = match released {
        true => LeaseOutcome::Released,
        false => LeaseOutcome::Nothing,
    };
    record(call, name, outcome, plan.reclaimed);
    reply::int(call.ctx, i64::from(released));
    Ok(())
}

/// RL.EXTEND key lease-id TTL ms
pub fn extend(call: &Call) -> Result<(), RlError> {
    let (id, ttl_ms) = args::lease::extend(call.args)?;
    let now = crate::clock::now().ms;
    lease::deadline_after(now, ttl_ms).ok_or(DEADLINE_TOO_LATE)?;
    let name = call.argv[1];
    let mut key = Key::write(call.ctx, name);
    let held = key.read_held(call.ctx, name, now, Some(call.argv[2]))?;
    let (extended, plan) = lease::extend(&held, now, id, ttl_ms);
    store::execute_leases(call.ctx, &mut key, name, &plan, Some(call.argv[2]), false);
    drop(key);
    let outcome = match extended {
        true => LeaseOutcome::Extended,
        false => LeaseOutcome::Nothing,
    };
    record(call, name, outcome, plan.reclaimed);
    reply::int(call.ctx, i64::from(extended));
    Ok(())
}

/// RL.INFLIGHT key: a read, in O(log n); reclaims nothing.
pub fn in_flight(call: &Call) -> Result<(), RlError> {
    let now = crate::clock::now().ms;
    let key = Key::read(call.ctx, call.argv[1]);
    let held = key.read_counts(call.ctx, call.argv[1], now)?;
    reply::int(call.ctx, lease::in_flight(&held));
    Ok(())
}
