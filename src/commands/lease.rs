//! Concurrency leases: RL.ACQUIRE, RL.RELEASE, RL.EXTEND and RL.INFLIGHT.
//! A lease key is a sorted set of lease ids scored by their deadlines;
//! each call reads what it needs of it (`lease::Held`, never the whole
//! set) with the time read once, asks `algo::lease`, and has `store` carry
//! out the plan (reclaiming the earliest expired leases first, at most
//! `lease::RECLAIM_MAX` a call).

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use super::Call;
use crate::algo::lease::{self, Acquired, WantedId};
use crate::args;
use crate::config;
use crate::error::RlError;
use crate::ffi::Str;
use crate::receipt::{self, LeaseOutcome};
use crate::resolve::lease_policy;
use crate::store::{self, Key};
use crate::{reply, stats};

/// The nonce of the next generated id: counted up in this process from a
/// seed taken at load, so one process never repeats one, and the probe in
/// `fresh_nonce` keeps ids unique against what a key holds.
static NEXT_NONCE: AtomicU64 = AtomicU64::new(0);

/// At load: seeds the nonces from the clock's µs, so that a restarted or
/// promoted server does not count from where another began.
pub fn seed_nonces(micros: u64) {
    NEXT_NONCE.store(micros, Relaxed);
}

fn next_nonce() -> u64 {
    NEXT_NONCE.fetch_add(1, Relaxed)
}

const DEADLINE_TOO_LATE: RlError = RlError::TooLarge("TTL", "the lease deadline passes 2^53 ms");

/// RL.ACQUIRE key [LIMIT n] [TTL ms] [META metakey] [ID lease-id]
pub fn acquire(call: &Call) -> Result<(), RlError> {
    let opts = args::lease::acquire(call.args)?;
    let now = crate::clock::now().ms;
    let given = opts.id.map(|at| call.args[at]);
    let Some(policy) = lease_policy(call.ctx, call.argv, &opts)? else {
        let id = given.map_or_else(|| lease::generated_id(now, next_nonce()), <[u8]>::to_vec);
        reply::acquired(call.ctx, &Acquired::unlimited(id));
        return Ok(());
    };
    let deadline = lease::deadline_after(now, policy.ttl_ms).ok_or(DEADLINE_TOO_LATE)?;
    let name = call.argv[1];
    let mut key = Key::write(call.ctx, name);
    let given_str = opts.id.map(|at| call.argv[at]);
    let mut held = key.read_held(call.ctx, name, now, None)?;
    // Granted whatever the key holds under the id, and nothing to reclaim:
    // the store adds a new id at once (ZADD NX: one search of the set, not
    // a lookup and then an add) and learns from it whether the id was held.
    // With nothing reclaimed the set never holds more than after the call.
    let put_first = lease::grants_any_id(&held, policy.limit) && held.expired == 0;
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
    if lease::refuses(&held, now, policy.limit, wanted) {
        held.earliest_live = key.read_earliest_live(call.ctx, now)?;
    }
    let (answer, plan) = lease::acquire(&held, now, policy.limit, policy.ttl_ms, wanted);
    store::execute_leases(call.ctx, &mut key, name, &plan, given_str, put_done);
    drop(key);
    let outcome = match answer.acquired {
        true => LeaseOutcome::Acquired,
        false => LeaseOutcome::Refused,
    };
    record(call, name, outcome, plan.reclaimed);
    reply::acquired(call.ctx, &answer);
    Ok(())
}

/// RL.RELEASE key lease-id
pub fn release(call: &Call) -> Result<(), RlError> {
    let id = args::lease::release(call.args)?;
    let now = crate::clock::now().ms;
    let name = call.argv[1];
    let mut key = Key::write(call.ctx, name);
    let held = key.read_held(call.ctx, name, now, Some(call.argv[2]))?;
    let (released, plan) = lease::release(&held, now, id);
    store::execute_leases(call.ctx, &mut key, name, &plan, Some(call.argv[2]), false);
    drop(key);
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

/// The receipt of a lease call: INFO counters and, for a refusal, `rl.hit`.
fn record(call: &Call, name: Str, outcome: LeaseOutcome, reclaimed: usize) {
    let (tally, event) = receipt::of_lease(outcome, reclaimed, config::hit_events());
    stats::lease(tally);
    if let Some(event) = event {
        store::notify(call.ctx, event, name);
    }
}
