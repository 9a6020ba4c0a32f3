//! A benchmark control, not part of the product: `FLOOR.ADMIT key LIMIT n
//! WINDOW ms` makes the module-API calls that RL.ADMIT's fixed window makes
//! on an admit, and nothing else. It does no policy, no limit check, no
//! stats and no option parsing beyond two numbers. `make bench` loads it
//! next to the module, so the report shows what those API calls cost on
//! their own against INCR, in the same run.
//!
//! The calls: read the arguments, open the key, read its type, value and
//! expiry, write the value in place, replicate `INCRBY key 1` (or `SET key 1
//! PXAT t` for a new key), signal the key, close it, and reply with five
//! integers (a map for RESP3). It always admits.

use std::os::raw::{c_char, c_int, c_longlong};
use std::ptr;
use std::sync::atomic::{AtomicPtr, Ordering};

use redis_module::raw;

type Ctx = *mut raw::RedisModuleCtx;
type Str = *mut raw::RedisModuleString;

const OK: c_int = raw::REDISMODULE_OK as c_int;
const ERR: c_int = raw::REDISMODULE_ERR as c_int;

/// Created at load: the replicated INCRBY delta and SET's PXAT.
static ONE: AtomicPtr<raw::RedisModuleString> = AtomicPtr::new(ptr::null_mut());
static PXAT: AtomicPtr<raw::RedisModuleString> = AtomicPtr::new(ptr::null_mut());

/// The module API's function pointers, all resolved at load.
macro_rules! api {
    ($name:ident) => {{
        #[allow(unused_unsafe)]
        let f = unsafe { raw::$name };
        match f {
            Some(f) => f,
            None => unreachable!(concat!(stringify!($name), " checked at load")),
        }
    }};
}

fn bytes<'a>(s: Str) -> &'a [u8] {
    let mut len = 0usize;
    let p = unsafe { api!(RedisModule_StringPtrLen)(s, &mut len) };
    match p.is_null() {
        true => &[],
        false => unsafe { std::slice::from_raw_parts(p.cast::<u8>(), len) },
    }
}

fn number(digits: &[u8]) -> Option<i64> {
    if digits.is_empty() || digits.len() > 18 || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    Some(digits.iter().fold(0, |n, d| n * 10 + i64::from(d - b'0')))
}

fn reply_error(ctx: Ctx, text: &std::ffi::CStr) -> c_int {
    unsafe { api!(RedisModule_ReplyWithError)(ctx, text.as_ptr()) }
}

unsafe extern "C" fn floor_admit(ctx: Ctx, argv: *mut Str, argc: c_int) -> c_int {
    if argc != 6 || argv.is_null() {
        return unsafe { api!(RedisModule_WrongArity)(ctx) };
    }
    let argv = unsafe { std::slice::from_raw_parts(argv, 6) };
    // RL.ADMIT reads every argument's bytes; so does this.
    let mut args: [&[u8]; 6] = [&[]; 6];
    for (slot, &s) in args.iter_mut().zip(argv) {
        *slot = bytes(s);
    }
    let (Some(limit), Some(window)) = (number(args[3]), number(args[5])) else {
        return reply_error(ctx, c"ERR LIMIT and WINDOW must be 1 to 18 digits");
    };
    let now = unsafe { api!(RedisModule_CachedMicroseconds)() } / 1000;
    let mode = (raw::REDISMODULE_READ | raw::REDISMODULE_WRITE) as c_int;
    let key = unsafe { api!(RedisModule_OpenKey)(ctx, argv[1], mode) };
    if key.is_null() {
        return reply_error(ctx, c"ERR the key could not be opened");
    }
    let kind = unsafe { api!(RedisModule_KeyType)(key) } as isize;
    let done = match kind {
        raw::REDISMODULE_KEYTYPE_EMPTY => Some(create(ctx, key, argv[1], now + window)),
        raw::REDISMODULE_KEYTYPE_STRING => increment(ctx, key, argv[1]),
        _ => None,
    };
    unsafe { api!(RedisModule_CloseKey)(key) };
    let Some((count, expires_at)) = done else {
        return reply_error(ctx, c"WRONGTYPE not a decimal counter");
    };
    let values = [1, limit, limit - count, 0, expires_at - now];
    let resp3 = unsafe { api!(RedisModule_GetContextFlags)(ctx) } as u32
        & raw::REDISMODULE_CTX_FLAGS_RESP3
        != 0;
    unsafe {
        match resp3 {
            true => api!(RedisModule_ReplyWithMap)(ctx, 5),
            false => api!(RedisModule_ReplyWithArray)(ctx, 5),
        };
        for v in values {
            if resp3 {
                api!(RedisModule_ReplyWithSimpleString)(ctx, c"field".as_ptr());
            }
            api!(RedisModule_ReplyWithLongLong)(ctx, v as c_longlong);
        }
    }
    OK
}

/// A new counter at 1 that expires at `at`.
fn create(ctx: Ctx, key: *mut raw::RedisModuleKey, name: Str, at: i64) -> (i64, i64) {
    let one = ONE.load(Ordering::Relaxed);
    unsafe {
        api!(RedisModule_StringSet)(key, one);
        api!(RedisModule_SetAbsExpire)(key, at);
        let fmt = c"sssl".as_ptr();
        let pxat = PXAT.load(Ordering::Relaxed);
        api!(RedisModule_Replicate)(ctx, c"SET".as_ptr(), fmt, name, one, pxat, at);
        api!(RedisModule_SignalModifiedKey)(ctx, name);
    }
    (1, at)
}

/// Adds one to the decimal counter in place; `None` when it is not one.
fn increment(ctx: Ctx, key: *mut raw::RedisModuleKey, name: Str) -> Option<(i64, i64)> {
    let mut len = 0usize;
    let mode = raw::REDISMODULE_WRITE as c_int;
    let p = unsafe { api!(RedisModule_StringDMA)(key, &mut len, mode) };
    if p.is_null() {
        return None;
    }
    let value = unsafe { std::slice::from_raw_parts_mut(p.cast::<u8>(), len) };
    let count = number(value)? + 1;
    let mut text = [0u8; 20];
    let mut at = text.len();
    let mut n = count;
    loop {
        at -= 1;
        text[at] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    let digits = &text[at..];
    if digits.len() == value.len() {
        value.copy_from_slice(digits);
    } else {
        unsafe { api!(RedisModule_StringTruncate)(key, digits.len()) };
        let p = unsafe { api!(RedisModule_StringDMA)(key, &mut len, mode) };
        if p.is_null() || len != digits.len() {
            return None;
        }
        unsafe { std::slice::from_raw_parts_mut(p.cast::<u8>(), len) }.copy_from_slice(digits);
    }
    let expires_at = unsafe { api!(RedisModule_GetAbsExpire)(key) };
    unsafe {
        let one = ONE.load(Ordering::Relaxed);
        api!(RedisModule_Replicate)(ctx, c"INCRBY".as_ptr(), c"ss".as_ptr(), name, one);
        api!(RedisModule_SignalModifiedKey)(ctx, name);
    }
    Some((count, expires_at))
}

/// # Safety
/// Only the server calls this, with a valid context.
#[no_mangle]
pub unsafe extern "C" fn RedisModule_OnLoad(
    ctx: Ctx,
    _argv: *mut *mut raw::RedisModuleString,
    _argc: c_int,
) -> c_int {
    if unsafe { raw::Export_RedisModule_Init(ctx, c"api_floor".as_ptr(), 1, 1) } != OK {
        return ERR;
    }
    macro_rules! need {
        ($($name:ident),*) => {$(
            if unsafe { raw::$name }.is_none() {
                return ERR;
            }
        )*};
    }
    need!(
        RedisModule_StringPtrLen,
        RedisModule_CachedMicroseconds,
        RedisModule_OpenKey,
        RedisModule_KeyType,
        RedisModule_CloseKey,
        RedisModule_StringDMA,
        RedisModule_StringTruncate,
        RedisModule_StringSet,
        RedisModule_SetAbsExpire,
        RedisModule_GetAbsExpire,
        RedisModule_Replicate,
        RedisModule_SignalModifiedKey,
        RedisModule_GetContextFlags,
        RedisModule_ReplyWithMap,
        RedisModule_ReplyWithArray,
        RedisModule_ReplyWithSimpleString,
        RedisModule_ReplyWithLongLong,
        RedisModule_ReplyWithError,
        RedisModule_WrongArity,
        RedisModule_CreateString,
        RedisModule_CreateCommand,
        RedisModule_SetModuleOptions
    );
    for (slot, text) in [(&ONE, c"1"), (&PXAT, c"PXAT")] {
        let s = unsafe {
            api!(RedisModule_CreateString)(ptr::null_mut(), text.as_ptr(), text.count_bytes())
        };
        if s.is_null() {
            return ERR;
        }
        slot.store(s, Ordering::Relaxed);
    }
    // The module's options: keys signalled explicitly, and replicated
    // commands not looked up (`VALKEYMODULE_OPTIONS_SKIP_COMMAND_VALIDATION`).
    let options = raw::REDISMODULE_OPTION_NO_IMPLICIT_SIGNAL_MODIFIED as c_int | 1 << 4;
    unsafe { api!(RedisModule_SetModuleOptions)(ctx, options) };
    let name = c"floor.admit".as_ptr();
    let flags: *const c_char = c"write deny-oom fast".as_ptr();
    unsafe { api!(RedisModule_CreateCommand)(ctx, name, Some(floor_admit), flags, 1, 1, 1) }
}
