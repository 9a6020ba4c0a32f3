//! The keyspace: opens keys, reads and writes limiter state, applies
//! absolute expiry, replicates effects and fires notifications. Nothing
//! here decides anything: `execute` carries out a planned `Change`. (The
//! clock is `clock`'s, the getkeys-api answer `getkeys`'s.) Raw FFI: this
//! is the command path, where every instruction per call counts.

use std::ffi::CStr;
use std::os::raw::{c_char, c_int};
use std::ptr;

use redis_module::raw;

use crate::algo::{penalty, Algo, State};
use crate::error::RlError;
use crate::ffi::{api, str_bytes, Ctx, Str};
use crate::plan::{Change, Replicate};
use crate::receipt::Event;

mod leases;
mod replicate;
mod tickets;

pub use leases::execute_leases;
pub use replicate::{free_shared_strings, init_shared_strings};
use replicate::{
    replicate_delete, replicate_expiry, replicate_incrby, replicate_set, replicate_set_keep_ttl,
    shared, ONE,
};
pub use tickets::{drop_ticket, execute_tickets, holds_ticket, publish_wake_up};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyKind {
    Empty,
    String,
    Hash,
    Zset,
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
        // SAFETY: `ctx` and `name` are the running call's; the key is
        // closed on drop, before the call returns.
        let ptr = unsafe { api!(RedisModule_OpenKey)(ctx, name, mode as c_int) };
        Key { ptr }
    }

    #[inline(always)]
    pub fn kind(&self) -> KeyKind {
        let Some(key) = self.live() else {
            return KeyKind::Empty;
        };
        // SAFETY: `key` is open (non-null, see `live`).
        match unsafe { api!(RedisModule_KeyType)(key) } as isize {
            raw::REDISMODULE_KEYTYPE_EMPTY => KeyKind::Empty,
            raw::REDISMODULE_KEYTYPE_STRING => KeyKind::String,
            raw::REDISMODULE_KEYTYPE_HASH => KeyKind::Hash,
            raw::REDISMODULE_KEYTYPE_ZSET => KeyKind::Zset,
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
        // SAFETY: the key is open (`live`).
        let at = unsafe { api!(RedisModule_GetAbsExpire)(self.live()?) };
        (at != raw::REDISMODULE_NO_EXPIRE as i64).then_some(at)
    }

    pub fn set_expires_at(&self, at: i64) {
        if let Some(key) = self.live() {
            // SAFETY: the key is open (`live`), for writing where this is
            // called (a planned change runs on a key opened to write).
            unsafe { api!(RedisModule_SetAbsExpire)(key, at) };
        }
    }

    /// The string value, without copying. Only call on a string key.
    fn string_bytes(&self) -> &[u8] {
        let mut len = 0usize;
        let mode = raw::REDISMODULE_READ as c_int;
        let Some(key) = self.live() else { return &[] };
        // SAFETY: the key is open and holds a string (checked by callers).
        let p = unsafe { api!(RedisModule_StringDMA)(key, &mut len, mode) };
        if p.is_null() {
            return &[];
        }
        // SAFETY: DMA gives `len` bytes that stay put while the key is open
        // and unmodified; the slice borrows `self`, so neither can happen.
        unsafe { std::slice::from_raw_parts(p.cast::<u8>(), len) }
    }

    /// The string value for writing in place (the key must be open for write).
    fn string_bytes_mut(&mut self) -> &mut [u8] {
        let mut len = 0usize;
        let mode = raw::REDISMODULE_WRITE as c_int;
        let Some(key) = self.live() else {
            return &mut [];
        };
        // SAFETY: the key is open for writing; DMA in write mode makes
        // the string private to the key (unshared) before handing it out.
        let p = unsafe { api!(RedisModule_StringDMA)(key, &mut len, mode) };
        if p.is_null() {
            return &mut [];
        }
        // SAFETY: `len` writable bytes, ours until the key is touched
        // again; the slice borrows `self` mutably, so it cannot be.
        unsafe { std::slice::from_raw_parts_mut(p.cast::<u8>(), len) }
    }

    /// Reads `algo`'s state and the key's expiry: `Ok(None)` when empty. A
    /// penalty's form is not a state: an error (see `read_limiter`).
    #[inline(always)]
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

    /// Reads a limiter key for `algo` at `now_ms`: its state, plain or
    /// inside a penalty's form (`algo::penalty`).
    pub fn read_limiter(&self, algo: Algo, now_ms: i64) -> Result<penalty::Read, RlError> {
        match self.kind() {
            KeyKind::Empty => Ok(penalty::Read::plain(None)),
            KeyKind::String => penalty::read(algo, self.string_bytes(), self.expires_at(), now_ms),
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
            // SAFETY: the key is open for writing (only a change deletes).
            unsafe { api!(RedisModule_DeleteKey)(key) };
        }
    }

    /// Overwrites the key's string in place (creating it when empty), so the
    /// key keeps its expiry and no new object is made when the size holds.
    /// A new key's value string is handed back, for replication to reuse.
    /// `new_key`: the key is empty (the caller read it so, and nothing ran
    /// since), which saves asking its type again.
    fn write_bytes(&mut self, ctx: Ctx, bytes: &[u8], new_key: bool) -> Option<Created> {
        let key = self.live()?;
        if new_key {
            // A new key gets a compact string (the server copies it, embedded
            // in the key's object); it turns into an updatable one on its
            // first update in place.
            let (value, owned) = match bytes {
                // A new counter at 1: the shared string (the server keeps its
                // own copy, and unshares a shared value before any write).
                b"1" => (shared(&ONE), false),
                _ => {
                    let ptr = bytes.as_ptr().cast::<c_char>();
                    // SAFETY: copies `bytes.len()` readable bytes.
                    let value = unsafe { api!(RedisModule_CreateString)(ctx, ptr, bytes.len()) };
                    (value, true)
                }
            };
            // Never a null string into the API: without one, the key is
            // written through the general path below.
            if !value.is_null() {
                // SAFETY: open for writing, empty, and `value` is live.
                unsafe { api!(RedisModule_StringSet)(key, value) };
                return Some(Created { ctx, value, owned });
            }
        }
        let dest = self.string_bytes_mut();
        if dest.len() == bytes.len() {
            dest.copy_from_slice(bytes);
            return None;
        }
        // SAFETY: an open string key, opened for writing.
        unsafe { api!(RedisModule_StringTruncate)(key, bytes.len()) };
        let dest = self.string_bytes_mut();
        if dest.len() == bytes.len() {
            dest.copy_from_slice(bytes);
        }
        None
    }

    /// Reads up to twelve fields of a hash key in one lookup and hands each
    /// present value to `each(index, bytes)`; fields past the twelfth are
    /// not read.
    pub fn hash_fields(&self, ctx: Ctx, fields: &[&CStr], mut each: impl FnMut(usize, &[u8])) {
        let Some(key) = self.live() else { return };
        let mut names: [*const c_char; 12] = [ptr::null(); 12];
        for (name, field) in names.iter_mut().zip(fields) {
            *name = field.as_ptr();
        }
        let mut values: [Str; 12] = [ptr::null_mut(); 12];
        let [v0, v1, v2, v3, v4, v5, v6, v7, v8, v9, v10, v11] = &mut values;
        // SAFETY: an open hash key; C-string field names, each with a slot
        // for its value; the list ends at the first NULL name (the
        // server reads no further), at the latest the NULL after twelve.
        unsafe {
            api!(RedisModule_HashGet)(
                key,
                raw::REDISMODULE_HASH_CFIELDS as c_int,
                names[0],
                v0 as *mut Str,
                names[1],
                v1 as *mut Str,
                names[2],
                v2 as *mut Str,
                names[3],
                v3 as *mut Str,
                names[4],
                v4 as *mut Str,
                names[5],
                v5 as *mut Str,
                names[6],
                v6 as *mut Str,
                names[7],
                v7 as *mut Str,
                names[8],
                v8 as *mut Str,
                names[9],
                v9 as *mut Str,
                names[10],
                v10 as *mut Str,
                names[11],
                v11 as *mut Str,
                ptr::null::<c_char>(),
            )
        };
        for (i, value) in values.iter().enumerate() {
            if !value.is_null() {
                each(i, str_bytes(value));
                // SAFETY: HashGet gave us this string to free; the bytes
                // borrowed above are no longer used.
                unsafe { api!(RedisModule_FreeString)(ctx, *value) };
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
            // SAFETY: we created it, and free it once, here.
            unsafe { api!(RedisModule_FreeString)(self.ctx, self.value) };
        }
    }
}

impl Drop for Key {
    fn drop(&mut self) {
        if let Some(key) = self.live() {
            // SAFETY: opened by `Key::open`, closed once, here.
            unsafe { api!(RedisModule_CloseKey)(key) };
        }
    }
}

/// Tells WATCH and client-side caching that the key changed. Implicit
/// signalling is off, so that refusals and peeks touch nothing.
fn signal_modified(ctx: Ctx, key: Str) {
    // SAFETY: the running call's context and a live key name.
    unsafe { api!(RedisModule_SignalModifiedKey)(ctx, key) };
}

/// Keyspace events of this module use the module class: enable them with
/// `notify-keyspace-events Kd` or `Ed` (or `A`).
pub fn notify(ctx: Ctx, event: Event, key: Str) {
    let event = event.name();
    // SAFETY: the running call's context, a C string, a live key name.
    unsafe {
        api!(RedisModule_NotifyKeyspaceEvent)(
            ctx,
            raw::REDISMODULE_NOTIFY_MODULE,
            event.as_ptr(),
            key,
        )
    };
}

/// Carries out a planned change on `key` (named `name`, open for writing),
/// tells replicas and the AOF, and signals the key as modified.
// Always inlined: called from two places (a state's write and a
// penalty's), out of line it cost the plain call some 50 instructions.
#[inline(always)]
pub fn execute(ctx: Ctx, key: &mut Key, name: Str, change: Change) {
    match change {
        Change::Nothing => return,
        Change::Value {
            bytes,
            new_key,
            expires_at,
            replicate,
        } => {
            let created = key.write_bytes(ctx, bytes, new_key);
            if let Some(at) = expires_at {
                key.set_expires_at(at);
            }
            match replicate {
                Replicate::IncrBy(delta) => replicate_incrby(ctx, name, delta),
                Replicate::SetKeepTtl => replicate_set_keep_ttl(ctx, name, bytes),
                Replicate::SetPxat(at) => replicate_set(ctx, name, bytes, created.as_ref(), at),
            }
        }
        Change::Expiry(at) => {
            key.set_expires_at(at);
            replicate_expiry(ctx, name, at);
        }
        Change::Delete => {
            key.delete();
            replicate_delete(ctx, name);
        }
    }
    signal_modified(ctx, name);
}
