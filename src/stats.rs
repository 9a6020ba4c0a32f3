//! Counters behind `INFO ratelimit`. Commands run on the main thread, but
//! INFO may be asked from a crash report, so plain relaxed atomics.
//!
//! `CONFIG RESETSTAT` clears them too. No hook says when one runs (a command
//! filter sees it before ACL, MULTI and script checks, and not at all when
//! CONFIG is renamed), so the server's own count is the witness: `INFO
//! commandstats` counts our calls as we do, and only a reset that ran brings
//! its sum below ours. What each recent call counted is kept, so after a
//! reset the counters are rebuilt exactly from the calls since. A look at
//! each INFO, and every `RECENT` calls, keeps those within reach.

use std::ffi::CStr;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use redis_module::raw;

use crate::algo::Algo;
use crate::store;

/// Per algorithm, then one slot for calls with no single algorithm
/// (RL.THROTTLE, RL.ADMITALL, unlimited calls).
const SLOTS: usize = 6;
const OTHER: usize = 5;

struct Counters {
    admitted: [AtomicU64; SLOTS],
    refused: [AtomicU64; SLOTS],
    backoff_ms: AtomicU64,
    errors: AtomicU64,
}

#[allow(clippy::declare_interior_mutable_const)]
const ZERO: AtomicU64 = AtomicU64::new(0);

static COUNTERS: Counters = Counters {
    admitted: [ZERO; SLOTS],
    refused: [ZERO; SLOTS],
    backoff_ms: ZERO,
    errors: ZERO,
};

/// What one call counted, in one word: a kind in the top bits (none,
/// admitted or refused per slot, error) and a refusal's back-off below.
pub type Entry = u64;
const KIND_SHIFT: u32 = 60;
const BACKOFF_MASK: u64 = (1 << KIND_SHIFT) - 1;
const NOTHING: Entry = 0;
const ADMITTED: u64 = 1;
const REFUSED: u64 = ADMITTED + SLOTS as u64;
const ERROR: u64 = REFUSED + SLOTS as u64;

/// The entries of the last `RECENT` calls, by call number.
const RECENT: usize = 1 << 14;
#[allow(clippy::declare_interior_mutable_const)]
static HISTORY: [AtomicU64; RECENT] = [ZERO; RECENT];
/// Calls since load: the next entry's number.
static NUMBERED: AtomicU64 = AtomicU64::new(0);
/// The call number at which the server's count was last zero: calls since
/// then are the server's count, unless a reset ran since.
static COUNTED_FROM: AtomicU64 = AtomicU64::new(0);
/// What the call in progress counted.
static CURRENT: AtomicU64 = AtomicU64::new(NOTHING);

fn slot(algo: Option<Algo>) -> u64 {
    algo.map_or(OTHER, |a| a as usize) as u64
}

pub fn admitted(algo: Option<Algo>) {
    CURRENT.store((ADMITTED + slot(algo)) << KIND_SHIFT, Relaxed);
}

pub fn refused(algo: Option<Algo>, backoff_ms: i64) {
    let backoff = (backoff_ms.max(0) as u64).min(BACKOFF_MASK);
    CURRENT.store((REFUSED + slot(algo)) << KIND_SHIFT | backoff, Relaxed);
}

pub fn error() {
    CURRENT.store(ERROR << KIND_SHIFT, Relaxed);
}

/// Adds one call's entry to the counters. Only the main thread writes, so
/// a load and a store do (no locked read-modify-write).
fn count(entry: Entry) {
    let bump = |c: &AtomicU64, by: u64| c.store(c.load(Relaxed).wrapping_add(by), Relaxed);
    let kind = entry >> KIND_SHIFT;
    match kind {
        NOTHING => {}
        k if k < REFUSED => bump(&COUNTERS.admitted[(k - ADMITTED) as usize], 1),
        k if k < ERROR => {
            bump(&COUNTERS.refused[(k - REFUSED) as usize], 1);
            bump(&COUNTERS.backoff_ms, entry & BACKOFF_MASK);
        }
        _ => bump(&COUNTERS.errors, 1),
    }
}

fn clear() {
    for c in COUNTERS.admitted.iter().chain(&COUNTERS.refused) {
        c.store(0, Relaxed);
    }
    COUNTERS.backoff_ms.store(0, Relaxed);
    COUNTERS.errors.store(0, Relaxed);
}

/// At load. The server's stats of commands just registered start at zero,
/// and so do ours.
pub fn init() {
    clear();
    NUMBERED.store(0, Relaxed);
    COUNTED_FROM.store(0, Relaxed);
}

/// Before each call of one of our commands (not a getkeys request). Calls
/// nest (a keyspace-event subscriber may call one of ours from inside one),
/// so this hands back the outer call's entry for `end_call` to restore.
pub fn begin_call() -> Entry {
    let outer = CURRENT.load(Relaxed);
    CURRENT.store(NOTHING, Relaxed);
    outer
}

/// After each call: what it counted joins the counters and the history.
/// Every `RECENT` calls, first a look for a reset, so that the calls since
/// one are always still in the history.
pub fn end_call(outer: Entry) {
    let number = NUMBERED.load(Relaxed);
    if number > 0 && number.is_multiple_of(RECENT as u64) {
        settle_reset();
    }
    let entry = CURRENT.load(Relaxed);
    HISTORY[number as usize % RECENT].store(entry, Relaxed);
    count(entry);
    NUMBERED.store(number + 1, Relaxed);
    CURRENT.store(outer, Relaxed);
}

/// If a CONFIG RESETSTAT ran since the last look, the counters become what
/// the calls since it counted. Not from a crash report: it asks the server.
pub fn settle_reset() {
    // Our commands' names, as registered: the server spells `cmdstat_<name>`
    // in that case.
    let Some(server) = store::command_calls(&crate::COMMAND_NAMES) else {
        return;
    };
    let number = NUMBERED.load(Relaxed);
    if server >= number - COUNTED_FROM.load(Relaxed) {
        return;
    }
    clear();
    let since = server.min(number).min(RECENT as u64);
    for n in number - since..number {
        count(HISTORY[n as usize % RECENT].load(Relaxed));
    }
    COUNTED_FROM.store(number.saturating_sub(server), Relaxed);
}

fn total(counters: &[AtomicU64; SLOTS]) -> u64 {
    counters.iter().map(|c| c.load(Relaxed)).sum()
}

/// The `ratelimit_stats` section of `INFO ratelimit`.
pub fn add_info(ctx: *mut raw::RedisModuleInfoCtx) {
    let (Some(section), Some(field)) = (unsafe { raw::RedisModule_InfoAddSection }, unsafe {
        raw::RedisModule_InfoAddFieldULongLong
    }) else {
        return;
    };
    let put = |name: &CStr, value: u64| unsafe {
        field(ctx, name.as_ptr(), value);
    };
    unsafe {
        if section(ctx, c"stats".as_ptr()) != raw::REDISMODULE_OK as i32 {
            return;
        }
    }
    put(c"calls_admitted", total(&COUNTERS.admitted));
    put(c"calls_refused", total(&COUNTERS.refused));
    put(c"backoff_ms_total", COUNTERS.backoff_ms.load(Relaxed));
    put(c"errors", COUNTERS.errors.load(Relaxed));
    let per_algo: [(&CStr, &CStr, usize); SLOTS] = [
        (c"fixed_admitted", c"fixed_refused", Algo::Fixed as usize),
        (
            c"sliding_admitted",
            c"sliding_refused",
            Algo::Sliding as usize,
        ),
        (c"token_admitted", c"token_refused", Algo::Token as usize),
        (c"gcra_admitted", c"gcra_refused", Algo::Gcra as usize),
        (c"leaky_admitted", c"leaky_refused", Algo::Leaky as usize),
        (c"other_admitted", c"other_refused", OTHER),
    ];
    for (admitted, refused, i) in per_algo {
        put(admitted, COUNTERS.admitted[i].load(Relaxed));
        put(refused, COUNTERS.refused[i].load(Relaxed));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_nested_call_keeps_each_calls_entry() {
        let refused_before = total(&COUNTERS.refused);
        let admitted_before = total(&COUNTERS.admitted);
        let backoff_before = COUNTERS.backoff_ms.load(Relaxed);
        let outer = begin_call();
        refused(Some(Algo::Fixed), 250);
        // A keyspace-event subscriber calls one of ours from inside this one.
        let inner = begin_call();
        admitted(None);
        end_call(inner);
        end_call(outer);
        assert_eq!(total(&COUNTERS.refused) - refused_before, 1);
        assert_eq!(total(&COUNTERS.admitted) - admitted_before, 1);
        assert_eq!(COUNTERS.backoff_ms.load(Relaxed) - backoff_before, 250);
        assert_eq!(CURRENT.load(Relaxed), NOTHING);
    }
}
