//! Counters behind `INFO ratelimit`. Commands run on the main thread, but
//! INFO may be asked from a crash report, so plain relaxed atomics.

use std::ffi::CStr;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use redis_module::raw;

use crate::algo::Algo;

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

/// `CONFIG RESETSTAT`.
pub fn reset() {
    for c in COUNTERS.admitted.iter().chain(&COUNTERS.refused) {
        c.store(0, Relaxed);
    }
    COUNTERS.backoff_ms.store(0, Relaxed);
    COUNTERS.errors.store(0, Relaxed);
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
