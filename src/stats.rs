//! The counters behind `INFO ratelimit`: monotonic since the module was
//! loaded (CONFIG RESETSTAT leaves them alone), as scrapers of counters
//! expect. Only the main thread writes them, but INFO may be asked from a
//! crash report, so they are relaxed atomics. INFO is answered through
//! redis-module's `InfoContext` builder.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use redis_module::{InfoContext, RedisResult};

use crate::algo::{Algo, ALGORITHMS};
use crate::receipt::{LeaseOutcome, LeaseTally, Source, Tally};

/// One slot per algorithm, then RL.THROTTLE, RL.ADMITALL and unlimited
/// calls.
const SLOTS: usize = ALGORITHMS.len() + 3;

fn slot(source: Source) -> usize {
    match source {
        Source::Algo(algo) => algo as usize,
        Source::Throttle => ALGORITHMS.len(),
        Source::AdmitAll => ALGORITHMS.len() + 1,
        Source::Unlimited => ALGORITHMS.len() + 2,
    }
}

/// The INFO name of each slot's `<name>_admitted` and `<name>_refused`.
fn slot_name(slot: usize) -> &'static str {
    match slot.checked_sub(ALGORITHMS.len()) {
        None => Algo::ALL[slot].name(),
        Some(0) => "throttle",
        Some(1) => "admitall",
        Some(_) => "unlimited",
    }
}

struct Counters {
    admitted: [AtomicU64; SLOTS],
    refused: [AtomicU64; SLOTS],
    /// Would-be refusals admitted in shadow mode.
    shadow_refused: [AtomicU64; SLOTS],
    backoff_ms: AtomicU64,
    errors: AtomicU64,
    /// By `LEASE_FIELDS`.
    leases: [AtomicU64; LEASE_FIELDS.len()],
    /// BLOCK: callers waiting now, waits served (admitted after waiting)
    /// and waits timed out.
    blocked: AtomicU64,
    waits_served: AtomicU64,
    waits_timed_out: AtomicU64,
    /// Times the waiting room's timer fired.
    wait_timer_fires: AtomicU64,
    /// RESERVE calls admitted (now or at a booked slot), and FORCE calls.
    reserved: AtomicU64,
    forced: AtomicU64,
}

/// The lease counters' INFO names, each after `leases_`.
const LEASE_FIELDS: [&str; 6] = [
    "leases_acquired",
    "leases_refused",
    "leases_released",
    "leases_extended",
    "leases_reclaimed",
    "leases_shadow_refused",
];
const RECLAIMED: usize = 4;

#[allow(clippy::declare_interior_mutable_const)]
const ZERO: AtomicU64 = AtomicU64::new(0);

static COUNTERS: Counters = Counters {
    admitted: [ZERO; SLOTS],
    refused: [ZERO; SLOTS],
    shadow_refused: [ZERO; SLOTS],
    backoff_ms: ZERO,
    errors: ZERO,
    leases: [ZERO; LEASE_FIELDS.len()],
    blocked: ZERO,
    waits_served: ZERO,
    waits_timed_out: ZERO,
    wait_timer_fires: ZERO,
    reserved: ZERO,
    forced: ZERO,
};

/// Adds one to a counter. Only the main thread writes, so a load and a
/// store do (no locked read-modify-write).
fn bump(counter: &AtomicU64, by: u64) {
    counter.store(counter.load(Relaxed).wrapping_add(by), Relaxed);
}

/// Counts a decision.
pub fn count(tally: Tally) {
    match tally {
        Tally::Admitted(source) => bump(&COUNTERS.admitted[slot(source)], 1),
        Tally::Refused(source, backoff_ms) => {
            bump(&COUNTERS.refused[slot(source)], 1);
            bump(&COUNTERS.backoff_ms, backoff_ms.max(0) as u64);
        }
        Tally::ShadowRefused(source) => bump(&COUNTERS.shadow_refused[slot(source)], 1),
    }
}

/// Counts a lease call.
pub fn lease(tally: LeaseTally) {
    let slot = match tally.outcome {
        LeaseOutcome::Acquired => Some(0),
        LeaseOutcome::Refused => Some(1),
        LeaseOutcome::Released => Some(2),
        LeaseOutcome::Extended => Some(3),
        LeaseOutcome::ShadowRefused => Some(5),
        LeaseOutcome::Nothing => None,
    };
    if let Some(slot) = slot {
        bump(&COUNTERS.leases[slot], 1);
    }
    bump(&COUNTERS.leases[RECLAIMED], tally.reclaimed);
}

/// BLOCK: how many callers wait now.
pub fn set_blocked(waiting: usize) {
    COUNTERS.blocked.store(waiting as u64, Relaxed);
}

/// BLOCK: a wait ended with an admission (`served`) or a timeout.
pub fn wait_ended(served: bool) {
    match served {
        true => bump(&COUNTERS.waits_served, 1),
        false => bump(&COUNTERS.waits_timed_out, 1),
    }
}

/// BLOCK: the waiting room's timer fired.
/// A RESERVE call admitted (booked), or a FORCE call.
pub fn charged(reserved: bool) {
    match reserved {
        true => bump(&COUNTERS.reserved, 1),
        false => bump(&COUNTERS.forced, 1),
    }
}

pub fn wait_timer_fired() {
    bump(&COUNTERS.wait_timer_fires, 1);
}

/// Counts a call answered with an error.
pub fn error() {
    bump(&COUNTERS.errors, 1);
}

/// At load: the counters start from zero (a module loaded again after an
/// unload starts over, as the server's own stats of its commands do).
pub fn init() {
    let all = COUNTERS.admitted.iter().chain(&COUNTERS.refused);
    let all = all.chain(&COUNTERS.shadow_refused);
    for c in all.chain(&COUNTERS.leases) {
        c.store(0, Relaxed);
    }
    COUNTERS.backoff_ms.store(0, Relaxed);
    COUNTERS.errors.store(0, Relaxed);
    COUNTERS.waits_served.store(0, Relaxed);
    COUNTERS.waits_timed_out.store(0, Relaxed);
    COUNTERS.wait_timer_fires.store(0, Relaxed);
}

fn total(counters: &[AtomicU64; SLOTS]) -> u64 {
    counters.iter().map(|c| c.load(Relaxed)).sum()
}

/// The `ratelimit_stats` section of `INFO ratelimit`. The server leaves
/// it out (the builder skips it) unless INFO asked for it; the crash report
/// asks for it too. Every `InfoContext` API function it calls was checked
/// at load, before the INFO callback was registered.
pub fn add_info(ctx: &InfoContext) -> RedisResult<()> {
    let mut section = ctx
        .builder()
        .add_section("stats")
        .field("calls_admitted", total(&COUNTERS.admitted))?
        .field("calls_refused", total(&COUNTERS.refused))?
        .field("calls_shadow_refused", total(&COUNTERS.shadow_refused))?
        .field("backoff_ms_total", COUNTERS.backoff_ms.load(Relaxed))?
        .field("errors", COUNTERS.errors.load(Relaxed))?
        .field("calls_reserved", COUNTERS.reserved.load(Relaxed))?
        .field("calls_forced", COUNTERS.forced.load(Relaxed))?;
    for (name, counter) in LEASE_FIELDS.iter().zip(&COUNTERS.leases) {
        section = section.field(name, counter.load(Relaxed))?;
    }
    section = section
        .field("blocked_clients", COUNTERS.blocked.load(Relaxed))?
        .field("waits_served", COUNTERS.waits_served.load(Relaxed))?
        .field("waits_timed_out", COUNTERS.waits_timed_out.load(Relaxed))?
        .field("wait_timer_fires", COUNTERS.wait_timer_fires.load(Relaxed))?;
    for at in 0..SLOTS {
        let name = slot_name(at);
        section = section.field(
            &format!("{name}_admitted"),
            COUNTERS.admitted[at].load(Relaxed),
        )?;
        // An unlimited call is never refused: no field for it.
        if at != slot(Source::Unlimited) {
            section = section.field(
                &format!("{name}_refused"),
                COUNTERS.refused[at].load(Relaxed),
            )?;
        }
        // RL.THROTTLE has no shadow mode.
        if at != slot(Source::Unlimited) && at != slot(Source::Throttle) {
            section = section.field(
                &format!("{name}_shadow_refused"),
                COUNTERS.shadow_refused[at].load(Relaxed),
            )?;
        }
    }
    section.build_section()?.build_info()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_slot_has_its_own_name() {
        let names: Vec<&str> = (0..SLOTS).map(slot_name).collect();
        assert_eq!(
            names,
            [
                "fixed",
                "sliding",
                "token",
                "gcra",
                "leaky",
                "throttle",
                "admitall",
                "unlimited"
            ]
        );
        let sources = [Source::Throttle, Source::AdmitAll, Source::Unlimited];
        for (i, source) in sources.into_iter().enumerate() {
            assert_eq!(slot(source), ALGORITHMS.len() + i);
        }
    }
}
