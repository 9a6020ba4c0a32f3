//! The one place that touches the keyspace: opens keys, reads and writes
//! limiter state, applies absolute expiry, replicates effects and fires
//! notifications. Every raw module API call of the command path lives here.

use std::ffi::CStr;
use std::os::raw::{c_char, c_int, c_longlong};
use std::ptr;
use std::sync::atomic::{AtomicPtr, Ordering};

use redis_module::raw;

use crate::algo::{Algo, Decision, State};
use crate::error::RlError;

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
        RedisModule_GetServerInfo,
        RedisModule_ServerInfoGetFieldC,
        RedisModule_FreeServerInfo
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
        let Some(key) = self.live() else {
            return KeyKind::Empty;
        };
        match unsafe { api!(RedisModule_KeyType)(key) } as isize {
            raw::REDISMODULE_KEYTYPE_EMPTY => KeyKind::Empty,
            raw::REDISMODULE_KEYTYPE_STRING => KeyKind::String,
            raw::REDISMODULE_KEYTYPE_HASH => KeyKind::Hash,
            _ => KeyKind::Other,
        }
    }

    /// The open key, or `None` when the server opened nothing (a missing key
    /// opened for reading): no API call below ever gets a null key.
    fn live(&self) -> Option<*mut raw::RedisModuleKey> {
        (!self.ptr.is_null()).then_some(self.ptr)
    }

    /// Absolute expiry in ms, or `None` when the key has no TTL.
    pub fn expires_at(&self) -> Option<i64> {
        let at = unsafe { api!(RedisModule_GetAbsExpire)(self.live()?) };
        (at != raw::REDISMODULE_NO_EXPIRE as i64).then_some(at)
    }

    pub fn set_expires_at(&self, at: i64) {
        if let Some(key) = self.live() {
            unsafe { api!(RedisModule_SetAbsExpire)(key, at) };
        }
    }

    /// The string value, without copying. Only call on a string key.
    fn string_bytes(&self) -> &[u8] {
        let mut len = 0usize;
        let mode = raw::REDISMODULE_READ as c_int;
        let Some(key) = self.live() else { return &[] };
        let p = unsafe { api!(RedisModule_StringDMA)(key, &mut len, mode) };
        if p.is_null() {
            return &[];
        }
        unsafe { std::slice::from_raw_parts(p.cast::<u8>(), len) }
    }

    /// The string value for writing in place (the key must be open for write).
    fn string_bytes_mut(&mut self) -> &mut [u8] {
        let mut len = 0usize;
        let mode = raw::REDISMODULE_WRITE as c_int;
        let Some(key) = self.live() else {
            return &mut [];
        };
        let p = unsafe { api!(RedisModule_StringDMA)(key, &mut len, mode) };
        if p.is_null() {
            return &mut [];
        }
        unsafe { std::slice::from_raw_parts_mut(p.cast::<u8>(), len) }
    }

    /// Reads `algo`'s state and the key's expiry: `Ok(None)` when empty.
    pub fn read_state(&self, algo: Algo) -> Result<Option<(State, Option<i64>)>, RlError> {
        match self.kind() {
            KeyKind::Empty => Ok(None),
            KeyKind::String => Ok(Some((
                State::decode(algo, self.string_bytes())?,
                self.expires_at(),
            ))),
            _ => Err(RlError::WrongType),
        }
    }

    /// The raw string value, for formats a command reads itself.
    pub fn read_string(&self) -> Result<Option<&[u8]>, RlError> {
        match self.kind() {
            KeyKind::Empty => Ok(None),
            KeyKind::String => Ok(Some(self.string_bytes())),
            _ => Err(RlError::WrongType),
        }
    }

    pub fn delete(&mut self) {
        if let Some(key) = self.live() {
            unsafe { api!(RedisModule_DeleteKey)(key) };
        }
    }

    /// Overwrites the key's string in place (creating it when empty), so the
    /// key keeps its expiry and no new object is made when the size holds.
    /// A new key's value string is handed back, for replication to reuse.
    pub fn write_bytes(&mut self, ctx: Ctx, bytes: &[u8]) -> Option<Created> {
        let key = self.live()?;
        if self.kind() == KeyKind::Empty {
            // A new key gets a compact string (the server copies it, embedded
            // in the key's object); it turns into an updatable one on its
            // first update in place.
            let (value, owned) = match bytes {
                // A new counter at 1: the shared string (the server keeps its
                // own copy, and unshares a shared value before any write).
                b"1" => (shared(&ONE), false),
                _ => {
                    let ptr = bytes.as_ptr().cast::<c_char>();
                    let value = unsafe { api!(RedisModule_CreateString)(ctx, ptr, bytes.len()) };
                    (value, true)
                }
            };
            // Never a null string into the API: without one, the key is
            // written through the general path below.
            if !value.is_null() {
                unsafe { api!(RedisModule_StringSet)(key, value) };
                return Some(Created { ctx, value, owned });
            }
        }
        let dest = self.string_bytes_mut();
        if dest.len() == bytes.len() {
            dest.copy_from_slice(bytes);
            return None;
        }
        unsafe { api!(RedisModule_StringTruncate)(key, bytes.len()) };
        let dest = self.string_bytes_mut();
        if dest.len() == bytes.len() {
            dest.copy_from_slice(bytes);
        }
        None
    }

    /// Reads up to four fields of a hash key in one lookup and hands each
    /// present value to `each(index, bytes)`.
    pub fn hash_fields(&self, ctx: Ctx, fields: [&CStr; 4], mut each: impl FnMut(usize, &[u8])) {
        let Some(key) = self.live() else { return };
        let mut values: [Str; 4] = [ptr::null_mut(); 4];
        let [v0, v1, v2, v3] = &mut values;
        unsafe {
            api!(RedisModule_HashGet)(
                key,
                raw::REDISMODULE_HASH_CFIELDS as c_int,
                fields[0].as_ptr(),
                v0 as *mut Str,
                fields[1].as_ptr(),
                v1 as *mut Str,
                fields[2].as_ptr(),
                v2 as *mut Str,
                fields[3].as_ptr(),
                v3 as *mut Str,
                ptr::null::<c_char>(),
            )
        };
        for (i, value) in values.into_iter().enumerate() {
            if !value.is_null() {
                each(i, arg_bytes(value));
                unsafe { api!(RedisModule_FreeString)(ctx, value) };
            }
        }
    }
}

/// A new key's value string, freed on drop unless it is a shared one.
pub struct Created {
    ctx: Ctx,
    value: Str,
    owned: bool,
}

impl Drop for Created {
    fn drop(&mut self) {
        if self.owned {
            unsafe { api!(RedisModule_FreeString)(self.ctx, self.value) };
        }
    }
}

impl Drop for Key {
    fn drop(&mut self) {
        if let Some(key) = self.live() {
            unsafe { api!(RedisModule_CloseKey)(key) };
        }
    }
}

/// Arguments every replicated write repeats, made once at load and passed
/// by reference, instead of allocated on every write.
static PXAT: AtomicPtr<raw::RedisModuleString> = AtomicPtr::new(ptr::null_mut());
static KEEPTTL: AtomicPtr<raw::RedisModuleString> = AtomicPtr::new(ptr::null_mut());
/// `1`, the usual INCRBY delta.
static ONE: AtomicPtr<raw::RedisModuleString> = AtomicPtr::new(ptr::null_mut());

/// Creates the shared arguments; loading fails without them.
pub fn init_shared_strings() -> Result<(), &'static str> {
    for (slot, text) in [(&PXAT, c"PXAT"), (&KEEPTTL, c"KEEPTTL"), (&ONE, c"1")] {
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
            unsafe { api!(RedisModule_FreeString)(ptr::null_mut(), s) };
        }
    }
}

fn shared(slot: &AtomicPtr<raw::RedisModuleString>) -> Str {
    slot.load(Ordering::Relaxed)
}

/// Replicas and the AOF get the effect with its absolute expiry, never the
/// time-dependent command. `created`, when given, already holds `value` and
/// is passed by reference.
pub fn replicate_set(ctx: Ctx, key: Str, value: &[u8], created: Option<&Created>, expires_at: i64) {
    let (set, pxat) = (c"SET".as_ptr(), shared(&PXAT));
    if let Some(created) = created {
        let (at, fmt) = (expires_at as c_longlong, c"sssl".as_ptr());
        unsafe { api!(RedisModule_Replicate)(ctx, set, fmt, key, created.value, pxat, at) };
        return;
    }
    let (ptr, len) = (value.as_ptr().cast::<c_char>(), value.len());
    unsafe {
        api!(RedisModule_Replicate)(
            ctx,
            set,
            c"sbsl".as_ptr(),
            key,
            ptr,
            len,
            pxat,
            expires_at as c_longlong,
        )
    };
}

/// A new value under an unchanged expiry.
pub fn replicate_set_keep_ttl(ctx: Ctx, key: Str, value: &[u8]) {
    let (ptr, len) = (value.as_ptr().cast::<c_char>(), value.len());
    let (set, keepttl) = (c"SET".as_ptr(), shared(&KEEPTTL));
    unsafe { api!(RedisModule_Replicate)(ctx, set, c"sbs".as_ptr(), key, ptr, len, keepttl) };
}

/// A counter moved by `delta` under an unchanged expiry.
pub fn replicate_incrby(ctx: Ctx, key: Str, delta: i64) {
    let incrby = c"INCRBY".as_ptr();
    unsafe {
        match delta {
            1 => api!(RedisModule_Replicate)(ctx, incrby, c"ss".as_ptr(), key, shared(&ONE)),
            _ => api!(RedisModule_Replicate)(ctx, incrby, c"sl".as_ptr(), key, delta as c_longlong),
        }
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

pub fn replicate_delete(ctx: Ctx, key: Str) {
    unsafe { api!(RedisModule_Replicate)(ctx, c"DEL".as_ptr(), c"s".as_ptr(), key) };
}

/// True when the server only asks which arguments are keys (getkeys-api).
pub fn is_keys_request(ctx: Ctx) -> bool {
    unsafe { api!(RedisModule_IsKeysPositionRequest)(ctx) != 0 }
}

/// Answers a getkeys request: the argument at `pos` is a key.
pub fn key_at(ctx: Ctx, pos: usize, read_only: bool) {
    let flags = match read_only {
        true => raw::REDISMODULE_CMD_KEY_RO | raw::REDISMODULE_CMD_KEY_ACCESS,
        false => {
            raw::REDISMODULE_CMD_KEY_RW
                | raw::REDISMODULE_CMD_KEY_ACCESS
                | raw::REDISMODULE_CMD_KEY_UPDATE
        }
    };
    unsafe { api!(RedisModule_KeyAtPosWithFlags)(ctx, pos as c_int, flags as c_int) };
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

/// The `calls=` of the commands `names` in `INFO commandstats`, summed (a
/// missing field is a command not called yet); `None` when the server gives
/// no info. No context is passed: no auto memory, and INFO callbacks have
/// none.
pub fn command_calls(names: &[&CStr]) -> Option<u64> {
    let section = c"commandstats".as_ptr();
    let info = unsafe { api!(RedisModule_GetServerInfo)(ptr::null_mut(), section) };
    if info.is_null() {
        return None;
    }
    let mut sum = Some(0u64);
    for name in names {
        // "cmdstat_<name>\0", on the stack.
        let mut field = [0u8; 64];
        let name = name.to_bytes();
        let Some(end) = name.len().checked_add(9).filter(|&end| end <= field.len()) else {
            sum = None;
            continue;
        };
        field[..8].copy_from_slice(b"cmdstat_");
        field[8..end - 1].copy_from_slice(name);
        let field = field.as_ptr().cast::<c_char>();
        let value = unsafe { api!(RedisModule_ServerInfoGetFieldC)(info, field) };
        if value.is_null() {
            continue;
        }
        // "calls=12,usec=..."
        let value = unsafe { CStr::from_ptr(value) }.to_bytes();
        let calls = value
            .strip_prefix(b"calls=")
            .and_then(|v| v.split(|&b| b == b',').next())
            .and_then(crate::num::parse_i64)
            .and_then(|n| u64::try_from(n).ok());
        sum = sum.zip(calls).and_then(|(a, b)| a.checked_add(b));
    }
    unsafe { api!(RedisModule_FreeServerInfo)(ptr::null_mut(), info) };
    sum
}

/// RESP3 clients get maps with named fields; RESP2 keeps positional arrays.
fn speaks_resp3(ctx: Ctx) -> bool {
    let flags = unsafe { api!(RedisModule_GetContextFlags)(ctx) } as u32;
    flags & raw::REDISMODULE_CTX_FLAGS_RESP3 != 0
}

/// Field names of the five-integer reply, in order.
pub const DECISION_FIELDS: [&CStr; 5] = [
    c"admitted",
    c"limit",
    c"remaining",
    c"retry_after_ms",
    c"reset_after_ms",
];

/// Field names of RL.THROTTLE's reply, in order.
pub const THROTTLE_FIELDS: [&CStr; 5] = [
    c"limited",
    c"limit",
    c"remaining",
    c"retry_after",
    c"reset_after",
];

/// Integers as an array (RESP2) or as a map of `names` (RESP3).
pub fn reply_named_ints(ctx: Ctx, names: &[&CStr], values: &[i64]) {
    if !speaks_resp3(ctx) {
        return reply_ints(ctx, values);
    }
    unsafe {
        api!(RedisModule_ReplyWithMap)(ctx, values.len() as _);
        for (name, &v) in names.iter().zip(values) {
            api!(RedisModule_ReplyWithSimpleString)(ctx, name.as_ptr());
            api!(RedisModule_ReplyWithLongLong)(ctx, v as c_longlong);
        }
    }
}

pub fn reply_decision(ctx: Ctx, d: &Decision) {
    reply_named_ints(ctx, &DECISION_FIELDS, &decision_ints(d));
}

fn decision_ints(d: &Decision) -> [i64; 5] {
    [
        i64::from(d.admitted),
        d.limit,
        d.remaining,
        d.retry_after_ms,
        d.reset_after_ms,
    ]
}

/// RL.ADMITALL: admitted, which limiter refused (1-based, 0: none), the
/// longest back-off, then every limiter's own five integers.
pub fn reply_admit_all(
    ctx: Ctx,
    admitted: bool,
    refused_by: i64,
    retry_after_ms: i64,
    each: &[Decision],
) {
    let resp3 = speaks_resp3(ctx);
    let values = [i64::from(admitted), refused_by, retry_after_ms];
    let names = [c"admitted", c"refused_by", c"retry_after_ms"];
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
    for d in each {
        reply_decision(ctx, d);
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
