//! RL.ACQUIRE with QUEUE (docs/reference.md "tickets"): the lease rule,
//! and only the earliest live tickets of the ticket key may take free
//! slots; a refused call with WAIT takes or renews its ticket. The
//! library's `acquire_queued` follows this flow step by step.

use super::lease_shared::{next_nonce, record};
use super::Call;
use crate::algo::lease::{self, WantedId};
use crate::algo::tickets;
use crate::args;
use crate::block::{self, Waits};
use crate::error::{RlError, WAIT_AND_SHADOW, WAIT_TOO_LATE};
use crate::ffi::str_bytes;
use crate::receipt::LeaseOutcome;
use crate::reply;
use crate::resolve::LeasePolicy;
use crate::store::{self, Key};

/// One attempt, as `lease::acquire_once` makes it (the same `fresh`,
/// `timed_out` and answer: `Some(wait)` for a woken BLOCK waiter that
/// keeps waiting). `queue_at`: where the ticket key is in the arguments.
pub fn acquire_queued(
    call: &Call,
    opts: &args::Options,
    policy: &LeasePolicy,
    now: i64,
    queue_at: usize,
    (fresh, timed_out): (bool, bool),
) -> Result<Option<i64>, RlError> {
    let shadow = policy.shadow;
    let wait_deadline = match opts.wait {
        Some(_) if shadow => return Err(RlError::Ticket(WAIT_AND_SHADOW)),
        Some(wait) => {
            Some(tickets::deadline_after(now, wait).ok_or(RlError::Ticket(WAIT_TOO_LATE))?)
        }
        None => None,
    };
    let (name, tk_name) = (call.key(), call.argv[queue_at]);
    let given = opts.id.map(|at| call.args[at]);
    let given_str = opts.id.map(|at| call.argv[at]);
    // BLOCK (no WAIT): the waiting room's order, as without QUEUE.
    let wait = || {
        opts.block
            .filter(|_| fresh && !shadow && block::may_block(call.ctx))
    };
    let queued = match fresh && opts.wait.is_none() {
        true => block::queued(call.ctx, name, now),
        false => None,
    };
    if let Some((head_at, timeout)) = queued.and_then(|at| Some((at, wait()?))) {
        block::wait(call.ctx, name, Waits::Acquire, timeout, head_at - now)?;
        return Ok(None);
    }
    let mut tk = Key::write(call.ctx, tk_name);
    let queue = tk.read_queue(call.ctx, tk_name, now, given)?;
    let mut key = Key::write(call.ctx, name);
    let mut held = key.read_held(call.ctx, name, now, given_str)?;
    let wanted = match given {
        Some(id) => WantedId::Given(id),
        None => WantedId::Generated(lease::fresh_nonce(
            now,
            |id| key.holds(call.ctx, id),
            next_nonce,
        )),
    };
    let live = held.live();
    let behind = queued.is_some() || timed_out;
    let limit = match !behind && tickets::entitled(policy.limit, live, queue.ahead) {
        true => policy.limit,
        false => 0,
    };
    if lease::refuses(&held, now, limit, wanted) {
        held.earliest_live = key.read_earliest_live(call.ctx, now)?;
    }
    let (mut answer, plan) = lease::acquire(&held, now, limit, policy.ttl_ms, wanted);
    answer.limit = policy.limit;
    if !answer.acquired {
        // Free slots owed to tickets ahead: when one of them lapses, or,
        // taken now, ends (within this call's TTL, if it asks the same).
        let owed = match live < policy.limit {
            true => tk
                .read_owed(call.ctx, &queue, policy.limit - live, now)?
                .map(|at| at.min(now + policy.ttl_ms)),
            false => None,
        };
        let earliest = held.earliest_live.filter(|_| live > 0);
        answer.retry_after_ms = tickets::retry_after(now, earliest, owed);
        if let Some(timeout) = wait() {
            drop((key, tk));
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
        store::execute_leases(call.ctx, &mut key, name, &plan, given_str, false);
        let (leaves, renews) = match answer.acquired {
            true => (true, None),
            false => (false, wait_deadline),
        };
        store::execute_tickets(call.ctx, &mut tk, tk_name, &queue, given, leaves, renews)?;
    }
    drop((key, tk));
    let shadow_refused = shadow && !answer.acquired;
    if shadow_refused {
        answer.lease_id = Some(match wanted {
            WantedId::Given(id) => id.to_vec(),
            WantedId::Generated(nonce) => lease::generated_id(now, nonce),
        });
    }
    let outcome = match (answer.acquired, shadow_refused) {
        (true, _) => LeaseOutcome::Acquired,
        (false, true) => LeaseOutcome::ShadowRefused,
        (false, false) => LeaseOutcome::Refused,
    };
    record(call, name, outcome, plan.reclaimed);
    let channel = str_bytes(&tk_name);
    reply::acquired_queued(call.ctx, &answer, queue.ahead, channel, shadow_refused);
    Ok(None)
}
