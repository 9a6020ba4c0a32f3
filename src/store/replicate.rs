//! How replicas and the AOF are told of a change: the effect with its
//! absolute expiry (`SET ... PXAT`, `SET ... KEEPTTL`, `INCRBY`,
//! `PEXPIREAT`, `DEL`), never the time-dependent command; and the
//! arguments every replicated write repeats, made once at load. Raw FFI:
//! `RedisModule_Replicate` on the command path.

use std::os::raw::{c_char, c_longlong};
use std::ptr;
use std::sync::atomic::{AtomicPtr, Ordering};

use redis_module::raw;

use super::Created;
use crate::ffi::{api, Ctx, Str};
use crate::num::{format_i64, MAX_DIGITS};

/// Arguments every replicated write repeats, made once at load and passed
/// by reference, instead of allocated on every write.
static PXAT: AtomicPtr<raw::RedisModuleString> = AtomicPtr::new(ptr::null_mut());
static KEEPTTL: AtomicPtr<raw::RedisModuleString> = AtomicPtr::new(ptr::null_mut());
/// `1`, the usual INCRBY delta.
pub(super) static ONE: AtomicPtr<raw::RedisModuleString> = AtomicPtr::new(ptr::null_mut());

/// Creates the shared arguments; loading fails without them.
pub fn init_shared_strings() -> Result<(), &'static str> {
    for (slot, text) in [(&PXAT, c"PXAT"), (&KEEPTTL, c"KEEPTTL"), (&ONE, c"1")] {
        // SAFETY: a NUL-terminated literal; no context: not auto-freed.
        let s = unsafe {
            api!(RedisModule_CreateString)(ptr::null_mut(), text.as_ptr(), text.count_bytes())
        };
        if s.is_null() {
            return Err("RedisModule_CreateString");
        }
        slot.store(s, Ordering::Relaxed);
    }
    Ok(())
}

/// Frees the shared arguments: at unload, and when a load fails after
/// making them (the server then closes the library, and would lose them).
pub fn free_shared_strings() {
    for slot in [&PXAT, &KEEPTTL, &ONE] {
        let s = slot.swap(ptr::null_mut(), Ordering::Relaxed);
        if !s.is_null() {
            // SAFETY: made by `init_shared_strings`, taken out of its slot
            // by the swap, so freed once.
            unsafe { api!(RedisModule_FreeString)(ptr::null_mut(), s) };
        }
    }
}

pub(super) fn shared(slot: &AtomicPtr<raw::RedisModuleString>) -> Str {
    slot.load(Ordering::Relaxed)
}

/// Replicas and the AOF get the effect with its absolute expiry, never the
/// time-dependent command. `created`, when given, already holds `value` and
/// is passed by reference.
pub(super) fn replicate_set(
    ctx: Ctx,
    key: Str,
    value: &[u8],
    created: Option<&Created>,
    expires_at: i64,
) {
    let (set, pxat) = (c"SET".as_ptr(), shared(&PXAT));
    // The time goes as bytes formatted here: the server makes one object of
    // a buffer, but two (and its own formatting) of a long long.
    let mut digits = [0u8; MAX_DIGITS];
    let at = format_i64(expires_at, &mut digits);
    let (at_ptr, at_len) = (at.as_ptr().cast::<c_char>(), at.len());
    if let Some(created) = created {
        // SAFETY: "sssb": three live strings, a buffer and its length.
        unsafe {
            api!(RedisModule_Replicate)(
                ctx,
                set,
                c"sssb".as_ptr(),
                key,
                created.value,
                pxat,
                at_ptr,
                at_len,
            )
        };
        return;
    }
    let (ptr, len) = (value.as_ptr().cast::<c_char>(), value.len());
    // SAFETY: "sbsb": a string, a buffer and its length, a string, a buffer
    // and its length.
    unsafe {
        api!(RedisModule_Replicate)(
            ctx,
            set,
            c"sbsb".as_ptr(),
            key,
            ptr,
            len,
            pxat,
            at_ptr,
            at_len,
        )
    };
}

/// A new value under an unchanged expiry.
pub(super) fn replicate_set_keep_ttl(ctx: Ctx, key: Str, value: &[u8]) {
    let (ptr, len) = (value.as_ptr().cast::<c_char>(), value.len());
    let (set, keepttl) = (c"SET".as_ptr(), shared(&KEEPTTL));
    // SAFETY: "sbs": a string, a buffer and its length, a string.
    unsafe { api!(RedisModule_Replicate)(ctx, set, c"sbs".as_ptr(), key, ptr, len, keepttl) };
}

/// A counter moved by `delta` under an unchanged expiry.
pub(super) fn replicate_incrby(ctx: Ctx, key: Str, delta: i64) {
    let incrby = c"INCRBY".as_ptr();
    // SAFETY: "ss" with two live strings, or "sl" with a string and a long long.
    unsafe {
        match delta {
            1 => api!(RedisModule_Replicate)(ctx, incrby, c"ss".as_ptr(), key, shared(&ONE)),
            _ => api!(RedisModule_Replicate)(ctx, incrby, c"sl".as_ptr(), key, delta as c_longlong),
        }
    };
}

pub(super) fn replicate_expiry(ctx: Ctx, key: Str, expires_at: i64) {
    // SAFETY: "sl": a live string and a long long.
    unsafe {
        api!(RedisModule_Replicate)(
            ctx,
            c"PEXPIREAT".as_ptr(),
            c"sl".as_ptr(),
            key,
            expires_at as c_longlong,
        )
    };
}

pub(super) fn replicate_delete(ctx: Ctx, key: Str) {
    // SAFETY: "s": a live string.
    unsafe { api!(RedisModule_Replicate)(ctx, c"DEL".as_ptr(), c"s".as_ptr(), key) };
}
