//! The floor of the server-facing layer: the raw module API's types, and
//! the one list of the API functions the command path calls, from which
//! come both the `api!` accessor every FFI call goes through and the
//! load-time check that the functions it reaches exist. Raw FFI (not redis-module's safe
//! layer) because the command path counts every instruction per call.

use std::os::raw::c_int;

use redis_module::raw;

pub type Ctx = *mut raw::RedisModuleCtx;
pub type Str = *mut raw::RedisModuleString;

/// A command's entry point as the server calls it.
pub type Handler = extern "C" fn(Ctx, *mut Str, c_int) -> c_int;

pub const OK: c_int = raw::REDISMODULE_OK as c_int;
pub const ERR: c_int = raw::REDISMODULE_ERR as c_int;

/// The module-API functions the command path calls, written once: this
/// generates `api!`, which accepts only these names, and `check_api`, which
/// refuses to load without any of them. An accessor that load time does not
/// check cannot be written: `api!` on another name does not compile.
macro_rules! checked_api {
    ($($name:ident,)+) => {
        /// A module-API function of the list above, as a plain fn pointer.
        macro_rules! api {
            $(($name) => {{
                // SAFETY: the server fills the API table once, in
                // RedisModule_Init, before any of our code runs, and it is
                // only read after; `check_api` refused to load unless this
                // entry is set, so it is `Some` (this is on every call's
                // path, where a check per API call adds up).
                #[allow(unused_unsafe)]
                unsafe {
                    redis_module::raw::$name.unwrap_unchecked()
                }
            }};)+
        }
        pub(crate) use api;

        /// At load: the first function of the list the server lacks.
        pub fn check_api() -> Result<(), &'static str> {
            $(
                // SAFETY: read once the server filled the table (after Init).
                if unsafe { raw::$name }.is_none() {
                    return Err(stringify!($name));
                }
            )+
            Ok(())
        }
    };
}

checked_api! {
    RedisModule_OpenKey,
    RedisModule_CloseKey,
    RedisModule_KeyType,
    RedisModule_StringDMA,
    RedisModule_StringTruncate,
    RedisModule_StringSet,
    RedisModule_CreateString,
    RedisModule_DeleteKey,
    RedisModule_IsKeysPositionRequest,
    RedisModule_KeyAtPosWithFlags,
    RedisModule_GetAbsExpire,
    RedisModule_SetAbsExpire,
    RedisModule_HashGet,
    RedisModule_StringPtrLen,
    RedisModule_FreeString,
    RedisModule_Replicate,
    RedisModule_NotifyKeyspaceEvent,
    RedisModule_SignalModifiedKey,
    RedisModule_CachedMicroseconds,
    RedisModule_ReplyWithArray,
    RedisModule_ReplyWithMap,
    RedisModule_GetContextFlags,
    RedisModule_ReplyWithSimpleString,
    RedisModule_ReplyWithLongLong,
    RedisModule_ReplyWithError,
    RedisModule_WrongArity,
    RedisModule_ValueLength,
    RedisModule_ZsetFirstInScoreRange,
    RedisModule_ZsetRangeEndReached,
    RedisModule_ZsetRangeCurrentElement,
    RedisModule_ZsetRangeNext,
    RedisModule_ZsetRangePrev,
    RedisModule_ZsetLastInScoreRange,
    RedisModule_ZsetScore,
    RedisModule_ZsetRangeStop,
    RedisModule_ZsetAdd,
    RedisModule_ZsetRem,
    RedisModule_ReplyWithStringBuffer,
    RedisModule_ReplyWithNull,
    RedisModule_Call,
    RedisModule_CallReplyType,
    RedisModule_CallReplyInteger,
    RedisModule_FreeCallReply,
    RedisModule_BlockClientOnKeysWithFlags,
    RedisModule_SignalKeyAsReady,
    RedisModule_GetBlockedClientPrivateData,
    RedisModule_IsBlockedTimeoutRequest,
    RedisModule_CreateTimer,
    RedisModule_StopTimer,
    RedisModule_GetSelectedDb,
    RedisModule_SelectDb,
}

/// The bytes of a server string, borrowed as long as the handle `s` is:
/// the caller's handle (an argv slot, a value it frees later) must outlive
/// the use, which the borrow makes the compiler check.
pub fn str_bytes(s: &Str) -> &[u8] {
    let mut len = 0usize;
    // SAFETY: `*s` is a live string the server handed us (an argument of
    // the running call, or a value we own until we free it).
    let p = unsafe { api!(RedisModule_StringPtrLen)(*s, &mut len) };
    if p.is_null() {
        return &[];
    }
    // SAFETY: the server guarantees `len` readable bytes at `p`, unchanged
    // while the string lives, and the borrow of `s` bounds the slice.
    unsafe { std::slice::from_raw_parts(p.cast::<u8>(), len) }
}
