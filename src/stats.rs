//! Counters behind `INFO ratelimit`. Commands run on the main thread, but
//! INFO may be asked from a crash report, so plain relaxed atomics.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use redis_module::raw;

static ADMITTED: AtomicU64 = AtomicU64::new(0);
static REFUSED: AtomicU64 = AtomicU64::new(0);
static BACKOFF_MS: AtomicU64 = AtomicU64::new(0);
static ERRORS: AtomicU64 = AtomicU64::new(0);

pub fn admitted() {
    ADMITTED.fetch_add(1, Relaxed);
}

pub fn refused(backoff_ms: i64) {
    REFUSED.fetch_add(1, Relaxed);
    BACKOFF_MS.fetch_add(backoff_ms.max(0) as u64, Relaxed);
}

pub fn error() {
    ERRORS.fetch_add(1, Relaxed);
}

/// The `ratelimit_stats` section of `INFO ratelimit`.
pub fn add_info(ctx: *mut raw::RedisModuleInfoCtx) {
    let (Some(section), Some(field)) = (unsafe { raw::RedisModule_InfoAddSection }, unsafe {
        raw::RedisModule_InfoAddFieldULongLong
    }) else {
        return;
    };
    unsafe {
        if section(ctx, c"stats".as_ptr()) != raw::REDISMODULE_OK as i32 {
            return;
        }
        for (name, value) in [
            (c"calls_admitted", &ADMITTED),
            (c"calls_refused", &REFUSED),
            (c"backoff_ms_total", &BACKOFF_MS),
            (c"errors", &ERRORS),
        ] {
            field(ctx, name.as_ptr(), value.load(Relaxed));
        }
    }
}
