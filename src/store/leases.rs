//! The keyspace for leases: a lease key is a sorted set (member = lease
//! id, score = deadline in ms). Reads its members and deadlines, carries
//! out a lease plan, and tells replicas and the AOF the effect.

use std::os::raw::{c_char, c_longlong};
use std::ptr;

use super::{replicate_delete, replicate_expiry, signal_modified, Key, KeyKind};
use crate::algo::lease::{deadline_of, Plan};
use crate::error::RlError;
use crate::ffi::{api, str_bytes, Ctx, Str, OK};

impl Key {
    /// A lease key's members and deadlines, copied out (the key is written
    /// after): empty when the key is; an error for another type, or for a
    /// score that is not a deadline.
    pub fn read_leases(&self, ctx: Ctx) -> Result<Vec<(Vec<u8>, i64)>, RlError> {
        match self.kind() {
            KeyKind::Empty => return Ok(Vec::new()),
            KeyKind::Zset => {}
            _ => return Err(RlError::WrongType),
        }
        let Some(key) = self.live() else {
            return Ok(Vec::new());
        };
        // SAFETY: an open sorted-set key.
        let len = unsafe { api!(RedisModule_ValueLength)(key) };
        let mut leases = Vec::with_capacity(len);
        let (all_from, all_to) = (f64::NEG_INFINITY, f64::INFINITY);
        // SAFETY: an open sorted-set key; the iterator is stopped below,
        // before the key is written or closed.
        if unsafe { api!(RedisModule_ZsetFirstInScoreRange)(key, all_from, all_to, 0, 0) } != OK {
            return Ok(leases);
        }
        let mut found = Ok(());
        // SAFETY: the iterator started above.
        while unsafe { api!(RedisModule_ZsetRangeEndReached)(key) } == 0 {
            let mut score = 0.0;
            // SAFETY: the iterator is on an element (not at its end).
            let member = unsafe { api!(RedisModule_ZsetRangeCurrentElement)(key, &mut score) };
            if member.is_null() {
                break;
            }
            let id = str_bytes(&member).to_vec();
            // SAFETY: the element string is ours to free (no automatic
            // memory), once, after its bytes were copied.
            unsafe { api!(RedisModule_FreeString)(ctx, member) };
            let Some(deadline) = deadline_of(score) else {
                found = Err(RlError::NotADeadline);
                break;
            };
            leases.push((id, deadline));
            // SAFETY: the iterator started above.
            if unsafe { api!(RedisModule_ZsetRangeNext)(key) } == 0 {
                break;
            }
        }
        // SAFETY: the iterator started above; stopping frees it.
        unsafe { api!(RedisModule_ZsetRangeStop)(key) };
        found.map(|()| leases)
    }
}

/// A server string holding `bytes`, freed on drop.
struct Owned {
    ctx: Ctx,
    s: Str,
}

impl Owned {
    fn new(ctx: Ctx, bytes: &[u8]) -> Option<Owned> {
        let ptr = bytes.as_ptr().cast::<c_char>();
        // SAFETY: copies `bytes.len()` readable bytes.
        let s = unsafe { api!(RedisModule_CreateString)(ctx, ptr, bytes.len()) };
        (!s.is_null()).then_some(Owned { ctx, s })
    }
}

impl Drop for Owned {
    fn drop(&mut self) {
        // SAFETY: made by `new`, freed once, here.
        unsafe { api!(RedisModule_FreeString)(self.ctx, self.s) };
    }
}

/// Carries out a lease plan on `key` (named `name`, open for writing) and
/// tells replicas and the AOF, in this order and with absolute values:
/// `ZREM key id ...`, `ZADD key deadline id`, `PEXPIREAT key latest`.
pub fn execute_leases(ctx: Ctx, key: &mut Key, name: Str, plan: &Plan) {
    if !plan.writes {
        return;
    }
    let Some(open) = key.live() else { return };
    let removed: Vec<Owned> = plan
        .remove
        .iter()
        .filter_map(|id| Owned::new(ctx, id))
        .collect();
    if !removed.is_empty() {
        for id in &removed {
            // SAFETY: open for writing; a live member string. A removal
            // that empties the set deletes the key (the server does).
            unsafe { api!(RedisModule_ZsetRem)(open, id.s, ptr::null_mut()) };
        }
        let mut ids: Vec<Str> = removed.iter().map(|id| id.s).collect();
        // SAFETY: "sv": a live string, then a vector of `ids.len()` live
        // strings (the server takes its own references).
        unsafe {
            api!(RedisModule_Replicate)(
                ctx,
                c"ZREM".as_ptr(),
                c"sv".as_ptr(),
                name,
                ids.as_mut_ptr(),
                ids.len(),
            )
        };
    }
    if let Some((id, deadline)) = &plan.put {
        if let Some(id) = Owned::new(ctx, id) {
            // SAFETY: open for writing (an emptied key is made again); a
            // live member string; an integer score, never NaN.
            unsafe { api!(RedisModule_ZsetAdd)(open, *deadline as f64, id.s, ptr::null_mut()) };
            let at = *deadline as c_longlong;
            // SAFETY: "sls": a live string, a long long, a live string.
            unsafe {
                api!(RedisModule_Replicate)(ctx, c"ZADD".as_ptr(), c"sls".as_ptr(), name, at, id.s)
            };
        }
    }
    match plan.expires_at {
        Some(at) => {
            key.set_expires_at(at);
            replicate_expiry(ctx, name, at);
        }
        // No lease is left, so the set emptied and the server deleted it;
        // a key that somehow remains is deleted here, as replicas are told.
        None if key.kind() != KeyKind::Empty => {
            key.delete();
            replicate_delete(ctx, name);
        }
        None => {}
    }
    signal_modified(ctx, name);
}
