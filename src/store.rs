//! The one place that touches the keyspace: opens keys, reads and writes
//! limiter state, applies absolute expiry, replicates effects and fires
//! notifications. Every raw module API call of the command path lives here.

use std::ffi::CStr;
use std::os::raw::{c_char, c_int, c_longlong};
use std::ptr;

use redis_module::raw;

use crate::error::RlError;
use crate::num::{format_i64, parse_i64, MAX_DIGITS};

pub type Ctx = *mut raw::RedisModuleCtx;
pub type Str = *mut raw::RedisModuleString;

/// Calls a module API function; every one used here is checked at load
/// time by `check_api`, so the pointer is always present.
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

/// The API functions this module needs; loading fails without them.
pub fn check_api() -> Result<(), &'static str> {
    macro_rules! need {
        ($($name:ident),*) => {$(
            if unsafe { raw::$name }.is_none() {
                return Err(stringify!($name));
            }
        )*};
    }
    need!(
        RedisModule_OpenKey,
        RedisModule_CloseKey,
        RedisModule_KeyType,
        RedisModule_StringDMA,
        RedisModule_StringTruncate,
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
        RedisModule_ReplyWithLongLong,
        RedisModule_ReplyWithError,
        RedisModule_WrongArity
    );
    Ok(())
}

/// The server's time for this call, in ms. It is frozen for the whole of a
/// command, a MULTI/EXEC or a script, and it is the clock key expiry uses.
pub fn now_ms() -> i64 {
    let micros = unsafe { api!(RedisModule_CachedMicroseconds)() };
    micros / 1000
}

/// The bytes of a command argument.
pub fn arg_bytes<'a>(s: Str) -> &'a [u8] {
    let mut len = 0usize;
    let p = unsafe { api!(RedisModule_StringPtrLen)(s, &mut len) };
    if p.is_null() {
        return &[];
    }
    unsafe { std::slice::from_raw_parts(p.cast::<u8>(), len) }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyKind {
    Empty,
    String,
    Hash,
    Other,
}

/// An open key, closed on drop.
pub struct Key {
    ptr: *mut raw::RedisModuleKey,
}

impl Key {
    pub fn read(ctx: Ctx, name: Str) -> Key {
        Self::open(ctx, name, raw::REDISMODULE_READ)
    }

    pub fn write(ctx: Ctx, name: Str) -> Key {
        Self::open(ctx, name, raw::REDISMODULE_READ | raw::REDISMODULE_WRITE)
    }

    fn open(ctx: Ctx, name: Str, mode: u32) -> Key {
        let ptr = unsafe { api!(RedisModule_OpenKey)(ctx, name, mode as c_int) };
        Key { ptr }
    }

    pub fn kind(&self) -> KeyKind {
        if self.ptr.is_null() {
            return KeyKind::Empty;
        }
        match unsafe { api!(RedisModule_KeyType)(self.ptr) } as isize {
            raw::REDISMODULE_KEYTYPE_EMPTY => KeyKind::Empty,
            raw::REDISMODULE_KEYTYPE_STRING => KeyKind::String,
            raw::REDISMODULE_KEYTYPE_HASH => KeyKind::Hash,
            _ => KeyKind::Other,
        }
    }

    /// Absolute expiry in ms, or `None` when the key has no TTL.
    pub fn expires_at(&self) -> Option<i64> {
        let at = unsafe { api!(RedisModule_GetAbsExpire)(self.ptr) };
        (at != raw::REDISMODULE_NO_EXPIRE as i64).then_some(at)
    }

    pub fn set_expires_at(&self, at: i64) {
        unsafe { api!(RedisModule_SetAbsExpire)(self.ptr, at) };
    }

    /// The string value, without copying. Only call on a string key.
    fn string_bytes(&self) -> &[u8] {
        let mut len = 0usize;
        let mode = raw::REDISMODULE_READ as c_int;
        let p = unsafe { api!(RedisModule_StringDMA)(self.ptr, &mut len, mode) };
        if p.is_null() {
            return &[];
        }
        unsafe { std::slice::from_raw_parts(p.cast::<u8>(), len) }
    }

    /// The string value for writing in place (the key must be open for write).
    fn string_bytes_mut(&mut self) -> &mut [u8] {
        let mut len = 0usize;
        let mode = raw::REDISMODULE_WRITE as c_int;
        let p = unsafe { api!(RedisModule_StringDMA)(self.ptr, &mut len, mode) };
        if p.is_null() {
            return &mut [];
        }
        unsafe { std::slice::from_raw_parts_mut(p.cast::<u8>(), len) }
    }

    /// Reads an integer counter: `Ok(None)` when the key is empty.
    pub fn read_counter(&self) -> Result<Option<i64>, RlError> {
        match self.kind() {
            KeyKind::Empty => Ok(None),
            KeyKind::String => parse_i64(self.string_bytes())
                .map(Some)
                .ok_or(RlError::NotACounter),
            _ => Err(RlError::WrongType),
        }
    }

    /// Stores `value` as the key's string in place, keeping its expiry.
    pub fn write_counter(&mut self, value: i64) {
        let mut buf = [0u8; MAX_DIGITS];
        self.write_bytes(format_i64(value, &mut buf));
    }

    /// Overwrites the key's string in place (creating it when empty), so the
    /// key keeps its expiry and no new object is made when the size holds.
    pub fn write_bytes(&mut self, bytes: &[u8]) {
        if self.kind() == KeyKind::Empty || self.string_bytes().len() != bytes.len() {
            unsafe { api!(RedisModule_StringTruncate)(self.ptr, bytes.len()) };
        }
        let dest = self.string_bytes_mut();
        if dest.len() == bytes.len() {
            dest.copy_from_slice(bytes);
        }
    }

    /// Reads an integer field of a hash key; `Ok(None)` when it is absent.
    pub fn hash_int(&self, ctx: Ctx, field: &CStr) -> Result<Option<i64>, ()> {
        let mut value: Str = ptr::null_mut();
        unsafe {
            api!(RedisModule_HashGet)(
                self.ptr,
                raw::REDISMODULE_HASH_CFIELDS as c_int,
                field.as_ptr(),
                &mut value as *mut Str,
                ptr::null::<c_char>(),
            )
        };
        if value.is_null() {
            return Ok(None);
        }
        let parsed = parse_i64(arg_bytes(value));
        unsafe { api!(RedisModule_FreeString)(ctx, value) };
        parsed.map(Some).ok_or(())
    }
}

impl Drop for Key {
    fn drop(&mut self) {
        if !self.ptr.is_null() {
            unsafe { api!(RedisModule_CloseKey)(self.ptr) };
        }
    }
}

/// Replicas and the AOF get the effect with its absolute expiry, never the
/// time-dependent command.
pub fn replicate_counter(ctx: Ctx, key: Str, value: i64, expires_at: i64) {
    unsafe {
        api!(RedisModule_Replicate)(
            ctx,
            c"SET".as_ptr(),
            c"slcl".as_ptr(),
            key,
            value as c_longlong,
            c"PXAT".as_ptr(),
            expires_at as c_longlong,
        )
    };
}

pub fn replicate_expiry(ctx: Ctx, key: Str, expires_at: i64) {
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

/// Tells WATCH and client-side caching that the key changed. Implicit
/// signalling is off, so that refusals and peeks touch nothing.
pub fn signal_modified(ctx: Ctx, key: Str) {
    unsafe { api!(RedisModule_SignalModifiedKey)(ctx, key) };
}

/// Keyspace events of this module use the module class: enable them with
/// `notify-keyspace-events Kd` or `Ed` (or `A`).
pub fn notify(ctx: Ctx, event: &CStr, key: Str) {
    unsafe {
        api!(RedisModule_NotifyKeyspaceEvent)(
            ctx,
            raw::REDISMODULE_NOTIFY_MODULE,
            event.as_ptr(),
            key,
        )
    };
}

pub fn reply_ints(ctx: Ctx, values: &[i64]) {
    unsafe {
        api!(RedisModule_ReplyWithArray)(ctx, values.len() as _);
        for &v in values {
            api!(RedisModule_ReplyWithLongLong)(ctx, v as c_longlong);
        }
    }
}

pub fn reply_int(ctx: Ctx, value: i64) {
    unsafe { api!(RedisModule_ReplyWithLongLong)(ctx, value as c_longlong) };
}

pub fn reply_error(ctx: Ctx, err: &RlError) {
    if let RlError::WrongArity(_) = err {
        unsafe { api!(RedisModule_WrongArity)(ctx) };
        return;
    }
    let text = std::ffi::CString::new(err.to_string())
        .unwrap_or_else(|_| c"ERR invalid argument".to_owned());
    unsafe { api!(RedisModule_ReplyWithError)(ctx, text.as_ptr()) };
}

pub fn reply_error_text(ctx: Ctx, text: &CStr) {
    unsafe { api!(RedisModule_ReplyWithError)(ctx, text.as_ptr()) };
}
