//! Counters behind `INFO ratelimit`. Commands run on the main thread, but
//! INFO may be asked from a crash report, so plain relaxed atomics.

use std::ffi::{CStr, CString};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::OnceLock;

use redis_module::raw;

use crate::algo::Algo;
use crate::config;
use crate::store::{self, Ctx};

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

fn slot(algo: Option<Algo>) -> usize {
    algo.map_or(OTHER, |a| a as usize)
}

pub fn admitted(algo: Option<Algo>) {
    COUNTERS.admitted[slot(algo)].fetch_add(1, Relaxed);
}

pub fn refused(algo: Option<Algo>, backoff_ms: i64) {
    COUNTERS.refused[slot(algo)].fetch_add(1, Relaxed);
    COUNTERS
        .backoff_ms
        .fetch_add(backoff_ms.max(0) as u64, Relaxed);
}

pub fn error() {
    COUNTERS.errors.fetch_add(1, Relaxed);
}

fn clear() {
    for c in COUNTERS.admitted.iter().chain(&COUNTERS.refused) {
        c.store(0, Relaxed);
    }
    COUNTERS.backoff_ms.store(0, Relaxed);
    COUNTERS.errors.store(0, Relaxed);
}

/// Our command calls since the counters were cleared. The server counts the
/// same calls in `INFO commandstats`, and only a CONFIG RESETSTAT that runs
/// brings its sum below this: a refused one changes nothing.
static CALLS: AtomicU64 = AtomicU64::new(0);
/// A CONFIG RESETSTAT may have run: compare at the next command or INFO.
static RESET_PENDING: AtomicBool = AtomicBool::new(false);
/// `cmdstat_<name>` of each of our commands, in the case they were
/// registered with, as the server spells them.
static CMDSTAT_FIELDS: OnceLock<Vec<CString>> = OnceLock::new();

/// At load. The server's stats of commands just registered start at zero,
/// and so do ours.
pub fn init<'a>(names: impl Iterator<Item = &'a CStr>) {
    CMDSTAT_FIELDS.get_or_init(|| {
        let field = |name: &CStr| {
            let text = format!("cmdstat_{}", name.to_string_lossy());
            CString::new(text).unwrap_or_default()
        };
        names.map(field).collect()
    });
    clear();
    CALLS.store(0, Relaxed);
    RESET_PENDING.store(false, Relaxed);
}

/// Each call of one of our commands (not a getkeys request), before it runs.
#[inline]
pub fn call(ctx: Ctx) {
    if RESET_PENDING.load(Relaxed) {
        // A RESETSTAT queued later in the same EXEC may still run.
        settle_reset(!store::in_exec(ctx));
    }
    // Commands run one at a time: no locked read-modify-write needed.
    CALLS.store(CALLS.load(Relaxed) + 1, Relaxed);
}

pub fn reset_pending() {
    RESET_PENDING.store(true, Relaxed);
}

/// `settle_reset` when a check is pending.
pub fn settle_pending(done: bool) {
    if RESET_PENDING.load(Relaxed) {
        settle_reset(done);
    }
}

/// Clears our counters if a CONFIG RESETSTAT ran since the last look.
/// `done`: no RESETSTAT already sent can still run, so stop looking.
fn settle_reset(done: bool) {
    let fields = CMDSTAT_FIELDS.get().map_or(&[][..], Vec::as_slice);
    let Some(calls) = store::command_calls(fields) else {
        RESET_PENDING.store(false, Relaxed);
        return;
    };
    if calls < CALLS.load(Relaxed) {
        clear();
        CALLS.store(calls, Relaxed);
    }
    if done {
        RESET_PENDING.store(config::exec_postponed(), Relaxed);
    }
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
