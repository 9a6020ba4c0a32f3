//! Replies: RESP2 clients get positional arrays, RESP3 clients maps with
//! named fields. Raw FFI: every call replies, on the hot path.

use std::ffi::CStr;
use std::os::raw::c_longlong;

use redis_module::raw;

use crate::algo::lease::Acquired;
use crate::algo::throttle;
use crate::algo::{Decision, Slot};
use crate::error::RlError;
use crate::ffi::{api, Ctx};

/// RESP3 clients get maps with named fields; RESP2 keeps positional arrays.
fn speaks_resp3(ctx: Ctx) -> bool {
    // SAFETY: the running call's context.
    let flags = unsafe { api!(RedisModule_GetContextFlags)(ctx) } as u32;
    flags & raw::REDISMODULE_CTX_FLAGS_RESP3 != 0
}

/// Field names of the five-integer reply, in order.
const DECISION_FIELDS: [&CStr; 5] = [
    c"admitted",
    c"limit",
    c"remaining",
    c"retry_after_ms",
    c"reset_after_ms",
];

/// Field names of a RESERVE's reply: the decision's, then the slot's.
const RESERVED_FIELDS: [&CStr; 7] = [
    c"admitted",
    c"limit",
    c"remaining",
    c"retry_after_ms",
    c"reset_after_ms",
    c"delay_ms",
    c"at_ms",
];

/// Field names of RL.THROTTLE's reply, in order.
const THROTTLE_FIELDS: [&CStr; 5] = [
    c"limited",
    c"limit",
    c"remaining",
    c"retry_after",
    c"reset_after",
];

fn ints(ctx: Ctx, values: &[i64]) {
    // SAFETY: the running call's context; an array of exactly as many
    // integers as announced.
    unsafe {
        api!(RedisModule_ReplyWithArray)(ctx, values.len() as _);
        for &v in values {
            api!(RedisModule_ReplyWithLongLong)(ctx, v as c_longlong);
        }
    }
}

/// Integers as an array (RESP2) or as a map of `names` (RESP3).
fn named_ints<const N: usize>(ctx: Ctx, names: &[&CStr; N], values: &[i64; N]) {
    if !speaks_resp3(ctx) {
        return ints(ctx, values);
    }
    // SAFETY: the running call's context; a map of exactly as many pairs as
    // announced, each a C-string name and an integer.
    unsafe {
        api!(RedisModule_ReplyWithMap)(ctx, values.len() as _);
        for (name, &v) in names.iter().zip(values) {
            api!(RedisModule_ReplyWithSimpleString)(ctx, name.as_ptr());
            api!(RedisModule_ReplyWithLongLong)(ctx, v as c_longlong);
        }
    }
}

/// RL.ADMIT and RL.REFUND: the five integers of a decision. In shadow
/// mode (`shadow`) a refusal is answered as admitted, with its would-be
/// wait, and a RESP3 map adds `shadow 1`.
pub fn decision(ctx: Ctx, d: &Decision, shadow: bool) {
    if shadow && !d.admitted {
        return shadowed(ctx, d);
    }
    let values = [
        i64::from(d.admitted),
        d.limit,
        d.remaining,
        d.retry_after_ms,
        d.reset_after_ms,
    ];
    named_ints(ctx, &DECISION_FIELDS, &values);
}

/// RL.ADMIT with RESERVE: the decision's five integers, then the slot's
/// `delay_ms` and `at_ms` (-1 and -1 for a refusal).
#[cold]
pub fn reserved(ctx: Ctx, d: &Decision, slot: Slot) {
    let values = [
        i64::from(d.admitted),
        d.limit,
        d.remaining,
        d.retry_after_ms,
        d.reset_after_ms,
        slot.delay_ms,
        slot.at_ms,
    ];
    named_ints(ctx, &RESERVED_FIELDS, &values);
}

/// A shadow refusal: admitted, with the refusal's numbers (`decision`).
#[cold]
fn shadowed(ctx: Ctx, d: &Decision) {
    let values = [1, d.limit, d.remaining, d.retry_after_ms, d.reset_after_ms];
    if !speaks_resp3(ctx) {
        return ints(ctx, &values);
    }
    // SAFETY: the running call's context; a map of exactly as many pairs as
    // announced, each a C-string name and an integer.
    unsafe {
        api!(RedisModule_ReplyWithMap)(ctx, (values.len() + 1) as _);
        for (name, &v) in DECISION_FIELDS.iter().zip(&values) {
            api!(RedisModule_ReplyWithSimpleString)(ctx, name.as_ptr());
            api!(RedisModule_ReplyWithLongLong)(ctx, v as c_longlong);
        }
        api!(RedisModule_ReplyWithSimpleString)(ctx, c"shadow".as_ptr());
        api!(RedisModule_ReplyWithLongLong)(ctx, 1);
    }
}

/// RL.THROTTLE: CL.THROTTLE's five integers.
pub fn throttle(ctx: Ctx, answer: &throttle::Reply) {
    let values = [
        i64::from(answer.limited),
        answer.limit,
        answer.remaining,
        answer.retry_after_s,
        answer.reset_after_s,
    ];
    named_ints(ctx, &THROTTLE_FIELDS, &values);
}

/// RL.ADMITALL: admitted, which limiter refused (1-based, 0: none), the
/// longest back-off, then every limiter's own five integers (each with
/// whether its policy is in shadow mode).
pub fn admit_all(
    ctx: Ctx,
    admitted: bool,
    refused_by: i64,
    retry_after_ms: i64,
    each: &[(Decision, bool)],
) {
    let resp3 = speaks_resp3(ctx);
    let values = [i64::from(admitted), refused_by, retry_after_ms];
    let names = [c"admitted", c"refused_by", c"retry_after_ms"];
    // SAFETY: the running call's context; four elements as announced (the
    // last an array of `each.len()` decisions, replied below), names as
    // C strings.
    unsafe {
        match resp3 {
            true => api!(RedisModule_ReplyWithMap)(ctx, 4),
            false => api!(RedisModule_ReplyWithArray)(ctx, 4),
        };
        for (name, v) in names.iter().zip(values) {
            if resp3 {
                api!(RedisModule_ReplyWithSimpleString)(ctx, name.as_ptr());
            }
            api!(RedisModule_ReplyWithLongLong)(ctx, v as c_longlong);
        }
        if resp3 {
            api!(RedisModule_ReplyWithSimpleString)(ctx, c"limiters".as_ptr());
        }
        api!(RedisModule_ReplyWithArray)(ctx, each.len() as _);
    }
    for (d, shadow) in each {
        decision(ctx, d, *shadow);
    }
}

/// Field names of RL.ACQUIRE's reply, in order.
const ACQUIRE_FIELDS: [&CStr; 5] = [
    c"acquired",
    c"limit",
    c"in_flight",
    c"retry_after_ms",
    c"lease_id",
];

/// RL.ACQUIRE: four integers and the lease id (null when refused).
pub fn acquired(ctx: Ctx, a: &Acquired) {
    let resp3 = speaks_resp3(ctx);
    let values = [
        i64::from(a.acquired),
        a.limit,
        a.in_flight,
        a.retry_after_ms,
    ];
    // SAFETY: the running call's context; five elements as announced
    // (each after its C-string name for RESP3), the id a buffer of its
    // own length.
    unsafe {
        match resp3 {
            true => api!(RedisModule_ReplyWithMap)(ctx, ACQUIRE_FIELDS.len() as _),
            false => api!(RedisModule_ReplyWithArray)(ctx, ACQUIRE_FIELDS.len() as _),
        };
        for (name, v) in ACQUIRE_FIELDS.iter().zip(values) {
            if resp3 {
                api!(RedisModule_ReplyWithSimpleString)(ctx, name.as_ptr());
            }
            api!(RedisModule_ReplyWithLongLong)(ctx, v as c_longlong);
        }
        if resp3 {
            api!(RedisModule_ReplyWithSimpleString)(ctx, ACQUIRE_FIELDS[4].as_ptr());
        }
        match &a.lease_id {
            Some(id) => api!(RedisModule_ReplyWithStringBuffer)(ctx, id.as_ptr().cast(), id.len()),
            None => api!(RedisModule_ReplyWithNull)(ctx),
        };
    }
}

/// RL.ACQUIRE's shadow refusal: acquired 1, the refusal's limit, in-flight
/// count and wait, the would-be id; a RESP3 map adds `shadow 1`.
#[cold]
pub fn acquired_in_shadow(ctx: Ctx, a: &Acquired) {
    let Some(id) = &a.lease_id else {
        return acquired(ctx, a);
    };
    let resp3 = speaks_resp3(ctx);
    let values = [1, a.limit, a.in_flight, a.retry_after_ms];
    let len = ACQUIRE_FIELDS.len() + usize::from(resp3);
    // SAFETY: the running call's context; `len` elements as announced (each
    // after its C-string name for RESP3, which adds `shadow`), the id a
    // buffer of its own length.
    unsafe {
        match resp3 {
            true => api!(RedisModule_ReplyWithMap)(ctx, len as _),
            false => api!(RedisModule_ReplyWithArray)(ctx, len as _),
        };
        for (name, v) in ACQUIRE_FIELDS.iter().zip(values) {
            if resp3 {
                api!(RedisModule_ReplyWithSimpleString)(ctx, name.as_ptr());
            }
            api!(RedisModule_ReplyWithLongLong)(ctx, v as c_longlong);
        }
        if resp3 {
            api!(RedisModule_ReplyWithSimpleString)(ctx, ACQUIRE_FIELDS[4].as_ptr());
        }
        api!(RedisModule_ReplyWithStringBuffer)(ctx, id.as_ptr().cast(), id.len());
        if resp3 {
            api!(RedisModule_ReplyWithSimpleString)(ctx, c"shadow".as_ptr());
            api!(RedisModule_ReplyWithLongLong)(ctx, 1);
        }
    }
}

pub fn int(ctx: Ctx, value: i64) {
    // SAFETY: the running call's context.
    unsafe { api!(RedisModule_ReplyWithLongLong)(ctx, value as c_longlong) };
}

pub fn error(ctx: Ctx, err: &RlError) {
    if let RlError::WrongArity(_) = err {
        // SAFETY: the running call's context.
        unsafe { api!(RedisModule_WrongArity)(ctx) };
        return;
    }
    let text = std::ffi::CString::new(err.to_string())
        .unwrap_or_else(|_| c"ERR invalid argument".to_owned());
    error_text(ctx, &text);
}

pub fn error_text(ctx: Ctx, text: &CStr) {
    // SAFETY: the running call's context; the server copies the C string.
    unsafe { api!(RedisModule_ReplyWithError)(ctx, text.as_ptr()) };
}
