//! The keyspace for leases: a lease key is a sorted set (member = lease
//! id, score = deadline in ms). Reads what a lease call needs of it (never
//! the whole set, nor more than `RECLAIM_MAX` + 1 expired leases), carries
//! out a lease plan, and tells replicas and the AOF the effect. Raw FFI:
//! redis-module's safe layer has no sorted-set API, and this is the
//! command path.

use std::os::raw::{c_char, c_longlong};
use std::ptr;

use redis_module::raw;

use super::{replicate_delete, replicate_expiry, signal_modified, Key, KeyKind};
use crate::algo::lease::{deadline_of, Held, Plan, RECLAIM_MAX};
use crate::error::RlError;
use crate::ffi::{api, str_bytes, Ctx, Str, OK};

impl Key {
    /// The open key when it is a sorted set (None for no key); an error for
    /// another type.
    pub(super) fn lease_set(&self) -> Result<Option<*mut raw::RedisModuleKey>, RlError> {
        match self.kind() {
            KeyKind::Empty => Ok(None),
            KeyKind::Zset => Ok(self.live()),
            _ => Err(RlError::WrongType),
        }
    }

    /// What a lease write needs of the key `name` at `now_ms`, read in
    /// O(log n + RECLAIM_MAX): its member count, how many leases expired
    /// and the earliest `RECLAIM_MAX` of them, the last two leases and the
    /// deadline of `named` (a lease id the call gives); not the earliest
    /// live deadline (`read_earliest_live`, for a refusal). Empty for no
    /// key; an error for another type, or for a score read here that is not
    /// a deadline (a call judges the scores it reads: the same ones as the
    /// library's functions).
    pub fn read_held(
        &self,
        ctx: Ctx,
        name: Str,
        now_ms: i64,
        named: Option<Str>,
    ) -> Result<Held, RlError> {
        let Some(key) = self.lease_set()? else {
            return Ok(Held::default());
        };
        let now = now_ms as f64;
        let mut held = Held {
            // SAFETY: an open sorted-set key.
            members: unsafe { api!(RedisModule_ValueLength)(key) } as i64,
            ..Held::default()
        };
        // The earliest expired leases (score <= now), and one more, read
        // and judged only to learn that others follow: then the server
        // counts them all, without reading them.
        let mut more = false;
        scan(
            ctx,
            key,
            Range::From(f64::NEG_INFINITY, now),
            |id, score| {
                deadline_of(score).ok_or(RlError::NotADeadline)?;
                more = held.reclaimable.len() == RECLAIM_MAX;
                if !more {
                    held.reclaimable.push(id.to_vec());
                }
                Ok(!more)
            },
        )?;
        held.expired = match more {
            true => count_expired(ctx, key, name, now_ms)?,
            false => held.reclaimable.len() as i64,
        };
        // The last lease, then the one before it.
        scan(ctx, key, Range::Last, |id, score| {
            let deadline = deadline_of(score).ok_or(RlError::NotADeadline)?;
            match held.last {
                None => {
                    held.last = Some((id.to_vec(), deadline));
                    Ok(true)
                }
                Some(_) => {
                    held.before_last = Some(deadline);
                    Ok(false)
                }
            }
        })?;
        if let Some(id) = named {
            held.named = self.read_named(&held, id)?;
        }
        Ok(held)
    }

    /// What RL.INFLIGHT needs of the key `name` at `now_ms`, in O(log n):
    /// its member count and how many leases expired, counted by the server
    /// without reading them. The first and last leases are read, and
    /// judged, as the library's rl_inflight reads and judges them.
    pub fn read_counts(&self, ctx: Ctx, name: Str, now_ms: i64) -> Result<Held, RlError> {
        let Some(key) = self.lease_set()? else {
            return Ok(Held::default());
        };
        let mut first = None;
        let all = Range::From(f64::NEG_INFINITY, f64::INFINITY);
        scan(ctx, key, all, |_, score| {
            first = Some(deadline_of(score).ok_or(RlError::NotADeadline)?);
            Ok(false)
        })?;
        scan(ctx, key, Range::Last, |_, score| {
            deadline_of(score).ok_or(RlError::NotADeadline)?;
            Ok(false)
        })?;
        let expired = match first {
            Some(at) if at <= now_ms => count_expired(ctx, key, name, now_ms)?,
            _ => 0,
        };
        Ok(Held {
            // SAFETY: an open sorted-set key.
            members: unsafe { api!(RedisModule_ValueLength)(key) } as i64,
            expired,
            ..Held::default()
        })
    }

    /// The deadline of lease `id`, if the key holds it; an error for a
    /// score that is not a deadline. `held` as read so far: when `id` is
    /// its last lease (a lone holder's, say), that deadline is known
    /// already and the set is not searched again.
    pub fn read_named(&self, held: &Held, id: Str) -> Result<Option<i64>, RlError> {
        if let Some((last, deadline)) = &held.last {
            if last.as_slice() == str_bytes(&id) {
                return Ok(Some(*deadline));
            }
        }
        self.score(id)
            .map(|score| deadline_of(score).ok_or(RlError::NotADeadline))
            .transpose()
    }

    /// Adds lease `id` with `deadline` unless the key holds that id (ZADD
    /// NX, one search of the set): whether it was added. Only for a call
    /// whose plan puts this id at this deadline whatever the key held, and
    /// after everything it reads is read.
    pub fn put_new(&self, id: Str, deadline: i64) -> bool {
        let Some(key) = self.live() else { return false };
        let mut flags = raw::REDISMODULE_ZADD_NX as i32;
        // SAFETY: open for writing (a missing key is made); a live member
        // string; an integer score, never NaN; `flags` outlives the call.
        let ok = unsafe { api!(RedisModule_ZsetAdd)(key, deadline as f64, id, &mut flags) } == OK;
        ok && flags & raw::REDISMODULE_ZADD_ADDED as i32 != 0
    }

    /// `put_new` for an id made here: None when no server string could be
    /// made (nothing was added).
    pub fn put_new_bytes(&self, ctx: Ctx, id: &[u8], deadline: i64) -> Option<bool> {
        Member::new(ctx, id, None).map(|id| self.put_new(id.s, deadline))
    }

    /// The earliest live deadline at `now_ms` (the first score above it):
    /// what a refused acquire waits for, read only then.
    pub fn read_earliest_live(&self, ctx: Ctx, now_ms: i64) -> Result<Option<i64>, RlError> {
        let Some(key) = self.live() else {
            return Ok(None);
        };
        let mut earliest = None;
        scan(ctx, key, Range::After(now_ms as f64), |_, score| {
            earliest = Some(deadline_of(score).ok_or(RlError::NotADeadline)?);
            Ok(false)
        })?;
        Ok(earliest)
    }

    /// The score of member `id`, if the (sorted-set) key holds it.
    pub fn score(&self, id: Str) -> Option<f64> {
        let key = self.live()?;
        let mut score = 0.0;
        // SAFETY: an open key (ZsetScore fails, harmlessly, for another
        // type) and a live member string.
        let found = unsafe { api!(RedisModule_ZsetScore)(key, id, &mut score) } == OK;
        found.then_some(score)
    }

    /// Whether the (sorted-set) key holds member `id`.
    pub fn holds(&self, ctx: Ctx, id: &[u8]) -> bool {
        Member::new(ctx, id, None).is_some_and(|id| self.score(id.s).is_some())
    }
}

/// How many members of the sorted set `key` (named `name`) score at most
/// `now_ms`: the server's own ZCOUNT, a rank lookup in O(log n), which the
/// module API lacks (its iterators would read every one). Should the call
/// answer anything but a count (it has no reason to), they are counted by
/// a scan instead.
fn count_expired(
    ctx: Ctx,
    key: *mut raw::RedisModuleKey,
    name: Str,
    now_ms: i64,
) -> Result<i64, RlError> {
    let now = now_ms as c_longlong;
    // SAFETY: "scl": a live string, a NUL-terminated literal, a long long.
    // No flags: no replication (a read), no ACL or OOM check (the running
    // command passed them). The reply is freed below, once.
    let reply = unsafe {
        api!(RedisModule_Call)(
            ctx,
            c"ZCOUNT".as_ptr(),
            c"scl".as_ptr(),
            name,
            c"-inf".as_ptr(),
            now,
        )
    };
    if !reply.is_null() {
        // SAFETY: a live reply, read then freed once.
        let count = unsafe {
            let is_int =
                api!(RedisModule_CallReplyType)(reply) == raw::REDISMODULE_REPLY_INTEGER as i32;
            let count = is_int.then(|| api!(RedisModule_CallReplyInteger)(reply));
            api!(RedisModule_FreeCallReply)(reply);
            count
        };
        if let Some(count) = count {
            return Ok(count);
        }
    }
    let mut count = 0;
    scan(
        ctx,
        key,
        Range::From(f64::NEG_INFINITY, now_ms as f64),
        |_, _| {
            count += 1;
            Ok(true)
        },
    )?;
    Ok(count)
}

/// Where a scan of a sorted set starts and which way it goes.
pub(super) enum Range {
    /// Upward over the scores from the first to the second, both included.
    From(f64, f64),
    /// Upward over the scores above this one.
    After(f64),
    /// Downward from the last element.
    Last,
    /// Downward over the scores from the second to the first, both
    /// included.
    Down(f64, f64),
}

/// Visits the elements of `range` in order while `each(id, score)` answers
/// `Ok(true)`; stops at its first `Ok(false)` or error, which it returns.
pub(super) fn scan(
    ctx: Ctx,
    key: *mut raw::RedisModuleKey,
    range: Range,
    mut each: impl FnMut(&[u8], f64) -> Result<bool, RlError>,
) -> Result<(), RlError> {
    let (inf, up) = (
        f64::INFINITY,
        !matches!(range, Range::Last | Range::Down(..)),
    );
    // SAFETY: an open sorted-set key; the iterator is stopped below, before
    // the key is read again, written or closed.
    let started = unsafe {
        match range {
            Range::From(from, to) => api!(RedisModule_ZsetFirstInScoreRange)(key, from, to, 0, 0),
            Range::After(after) => api!(RedisModule_ZsetFirstInScoreRange)(key, after, inf, 1, 0),
            Range::Last => api!(RedisModule_ZsetLastInScoreRange)(key, -inf, inf, 0, 0),
            Range::Down(from, to) => api!(RedisModule_ZsetLastInScoreRange)(key, from, to, 0, 0),
        }
    };
    let mut found = Ok(());
    // SAFETY: the iterator started above.
    while started == OK && unsafe { api!(RedisModule_ZsetRangeEndReached)(key) } == 0 {
        let mut score = 0.0;
        // SAFETY: the iterator is on an element (not at its end).
        let member = unsafe { api!(RedisModule_ZsetRangeCurrentElement)(key, &mut score) };
        if member.is_null() {
            break;
        }
        let more = each(str_bytes(&member), score);
        // SAFETY: the element string is ours to free (no automatic memory),
        // once, after its bytes were used.
        unsafe { api!(RedisModule_FreeString)(ctx, member) };
        match more {
            Ok(true) => {}
            Ok(false) => break,
            Err(e) => {
                found = Err(e);
                break;
            }
        }
        // SAFETY: the iterator started above.
        let moved = unsafe {
            match up {
                true => api!(RedisModule_ZsetRangeNext)(key),
                false => api!(RedisModule_ZsetRangePrev)(key),
            }
        };
        if moved == 0 {
            break;
        }
    }
    // SAFETY: stopping an iterator (started or not) frees it.
    unsafe { api!(RedisModule_ZsetRangeStop)(key) };
    found
}

/// A member id as a server string: the call's own argument when the id is
/// the one it names (no copy), else a copy freed on drop.
pub(super) struct Member {
    pub(super) s: Str,
    /// The context to free the copy with; None for a borrowed argument.
    owner: Option<Ctx>,
}

impl Member {
    pub(super) fn new(ctx: Ctx, bytes: &[u8], named: Option<(Str, &[u8])>) -> Option<Member> {
        if let Some((s, _)) = named.filter(|&(_, named)| named == bytes) {
            return Some(Member { s, owner: None });
        }
        let ptr = bytes.as_ptr().cast::<c_char>();
        // SAFETY: copies `bytes.len()` readable bytes.
        let s = unsafe { api!(RedisModule_CreateString)(ctx, ptr, bytes.len()) };
        (!s.is_null()).then_some(Member {
            s,
            owner: Some(ctx),
        })
    }
}

impl Drop for Member {
    fn drop(&mut self) {
        if let Some(ctx) = self.owner {
            // SAFETY: a copy made by `new`, freed once, here.
            unsafe { api!(RedisModule_FreeString)(ctx, self.s) };
        }
    }
}

/// Carries out a lease plan on `key` (named `name`, open for writing) and
/// tells replicas and the AOF, in this order and with absolute values:
/// `ZREM key id ...`, `ZADD key deadline id`, `PEXPIREAT key latest`.
/// `named` is the call's lease-id argument, used as is where the plan
/// names that id rather than copied. `put_done`: the call already added
/// the plan's `put` (`Key::put_new`), which is then only propagated.
pub fn execute_leases(
    ctx: Ctx,
    key: &mut Key,
    name: Str,
    plan: &Plan,
    named: Option<Str>,
    put_done: bool,
) {
    if !plan.writes {
        return;
    }
    let Some(open) = key.live() else { return };
    let named = named.as_ref().map(|s| (*s, str_bytes(s)));
    let removed: Vec<Member> = plan
        .remove
        .iter()
        .filter_map(|id| Member::new(ctx, id, named))
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
        if let Some(id) = Member::new(ctx, id, named) {
            if !put_done {
                // SAFETY: open for writing (an emptied key is made again);
                // a live member string; an integer score, never NaN.
                unsafe { api!(RedisModule_ZsetAdd)(open, *deadline as f64, id.s, ptr::null_mut()) };
            }
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
