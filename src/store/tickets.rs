//! The keyspace for lease tickets (docs/reference.md "tickets"): a ticket
//! key is a sorted set of `q:<id>` (place) and `d:<id>` (minus deadline)
//! members. Reads what a call with QUEUE needs, before anything is
//! written; carries out its ticket writes after the lease key's, and
//! tells replicas and the AOF the effect with absolute values. The reads
//! and their order are the library's (`read_tickets`, `store_tickets`).

use std::os::raw::{c_char, c_longlong};
use std::ptr;

use redis_module::raw;

use super::leases::{scan, Member, Range};
use super::replicate::replicate_expiry;
use super::{signal_modified, Key};
use crate::algo::tickets::{self, DROP_MAX};
use crate::error::{RlError, NOT_A_TICKET};
use crate::ffi::{api, Ctx, Str};

const NOT_A_TICKET_ERR: RlError = RlError::Ticket(NOT_A_TICKET);

/// What a call with QUEUE read of its ticket key.
#[derive(Debug, Default)]
pub struct Queue {
    /// Lapsed tickets to drop: `q:<id>`, `d:<id>` pairs, the earliest
    /// deadlines first (at most `DROP_MAX` tickets).
    pub drop: Vec<Vec<u8>>,
    /// The caller's ticket's place (None: no live ticket).
    pub place: Option<i64>,
    /// The live tickets ahead of the caller (of a caller without a ticket:
    /// all of them), the lapsed ones dropped here excluded.
    pub ahead: i64,
}

impl Key {
    /// The ticket key's state at `now_ms` for the caller holding id `id`.
    pub fn read_queue(
        &self,
        ctx: Ctx,
        name: Str,
        now_ms: i64,
        id: Option<&[u8]>,
    ) -> Result<Queue, RlError> {
        let Some(key) = self.lease_set()? else {
            return Ok(Queue::default());
        };
        let mut queue = Queue::default();
        let mut mine_lapsed = false;
        scan(
            ctx,
            key,
            Range::Down(-(now_ms as f64), 0.0),
            |member, score| {
                tickets::deadline_of(score).ok_or(NOT_A_TICKET_ERR)?;
                let who = member.strip_prefix(b"d:").ok_or(NOT_A_TICKET_ERR)?;
                mine_lapsed |= id == Some(who);
                queue.drop.push(tickets::place_member(who));
                queue.drop.push(member.to_vec());
                Ok(queue.drop.len() < 2 * DROP_MAX)
            },
        )?;
        if let Some(id) = id.filter(|_| !mine_lapsed) {
            if let Some(score) = self.score_of(ctx, &tickets::place_member(id)) {
                queue.place = Some(tickets::place_of(score).ok_or(NOT_A_TICKET_ERR)?);
            }
        }
        let mut ahead = count_places(ctx, name, queue.place)?;
        for pair in queue.drop.chunks(2) {
            if let Some(score) = self.score_of(ctx, &pair[0]) {
                let place = tickets::place_of(score).ok_or(NOT_A_TICKET_ERR)?;
                ahead -= i64::from(queue.place.is_none_or(|mine| place < mine));
            }
        }
        queue.ahead = ahead;
        Ok(queue)
    }

    /// The earliest deadline among the first `owed` live tickets ahead of
    /// the caller, or None.
    pub fn read_owed(
        &self,
        ctx: Ctx,
        queue: &Queue,
        owed: i64,
        now_ms: i64,
    ) -> Result<Option<i64>, RlError> {
        let Some(key) = self.lease_set()? else {
            return Ok(None);
        };
        let upto = queue.place.map_or(f64::INFINITY, |p| (p - 1) as f64);
        let limit = owed.saturating_add(queue.drop.len() as i64 / 2);
        let mut firsts = Vec::new();
        scan(ctx, key, Range::From(1.0, upto), |member, _| {
            firsts.push(member.to_vec());
            Ok((firsts.len() as i64) < limit)
        })?;
        let (mut earliest, mut seen) = (None::<i64>, 0);
        for member in firsts {
            if seen == owed {
                break;
            }
            let who = member.get(2..).unwrap_or_default();
            if let Some(score) = self.score_of(ctx, &tickets::deadline_member(who)) {
                let deadline = tickets::deadline_of(score).ok_or(NOT_A_TICKET_ERR)?;
                if deadline > now_ms {
                    seen += 1;
                    earliest = Some(earliest.map_or(deadline, |e| e.min(deadline)));
                }
            }
        }
        Ok(earliest)
    }

    fn score_of(&self, ctx: Ctx, member: &[u8]) -> Option<f64> {
        Member::new(ctx, member, None).and_then(|m| self.score(m.s))
    }

    /// The last place, if any.
    fn last_place(&self, ctx: Ctx) -> Result<Option<i64>, RlError> {
        let Some(key) = self.lease_set()? else {
            return Ok(None);
        };
        let mut last = None;
        scan(ctx, key, Range::Down(1.0, f64::INFINITY), |_, score| {
            last = Some(tickets::place_of(score).ok_or(NOT_A_TICKET_ERR)?);
            Ok(false)
        })?;
        Ok(last)
    }

    /// The latest ticket deadline (the lowest score), if any.
    fn latest_deadline(&self, ctx: Ctx) -> Result<Option<i64>, RlError> {
        let Some(key) = self.lease_set()? else {
            return Ok(None);
        };
        let mut latest = None;
        scan(ctx, key, Range::From(f64::NEG_INFINITY, 0.0), |_, score| {
            latest = Some(tickets::deadline_of(score).ok_or(NOT_A_TICKET_ERR)?);
            Ok(false)
        })?;
        Ok(latest)
    }
}

/// How many places the ticket key `name` holds before `place` (all of
/// them for None): the server's ZCOUNT, O(log n).
fn count_places(ctx: Ctx, name: Str, place: Option<i64>) -> Result<i64, RlError> {
    // SAFETY: "sll"/"slc": a live string, long longs or a NUL-terminated
    // literal. No flags: a read, not replicated. The reply is freed once.
    let reply = unsafe {
        match place {
            Some(place) => api!(RedisModule_Call)(
                ctx,
                c"ZCOUNT".as_ptr(),
                c"sll".as_ptr(),
                name,
                1 as c_longlong,
                (place - 1) as c_longlong,
            ),
            None => api!(RedisModule_Call)(
                ctx,
                c"ZCOUNT".as_ptr(),
                c"slc".as_ptr(),
                name,
                1 as c_longlong,
                c"+inf".as_ptr(),
            ),
        }
    };
    if reply.is_null() {
        return Err(RlError::WrongType);
    }
    // SAFETY: a live reply, read then freed once.
    let count = unsafe {
        let is_int =
            api!(RedisModule_CallReplyType)(reply) == raw::REDISMODULE_REPLY_INTEGER as i32;
        let count = is_int.then(|| api!(RedisModule_CallReplyInteger)(reply));
        api!(RedisModule_FreeCallReply)(reply);
        count
    };
    count.ok_or(RlError::WrongType)
}

/// A call's ticket writes on `key` (named `name`, open for writing), after
/// the lease key's: `ZREM` the lapsed tickets and, when the caller `leaves`
/// the queue (it took a slot), its own; with `wait_deadline`, `ZADD` the
/// caller's ticket (a new one at the last place + 1, or its deadline
/// renewed) and `PEXPIREAT` the latest deadline.
pub fn execute_tickets(
    ctx: Ctx,
    key: &mut Key,
    name: Str,
    queue: &Queue,
    id: Option<&[u8]>,
    leaves: bool,
    wait_deadline: Option<i64>,
) -> Result<(), RlError> {
    let mut gone: Vec<Vec<u8>> = queue.drop.clone();
    if let (true, Some(id), Some(_)) = (leaves, id, queue.place) {
        gone.push(tickets::place_member(id));
        gone.push(tickets::deadline_member(id));
    }
    let new_place = match (wait_deadline, queue.place) {
        (Some(_), None) => Some(tickets::next_place(key.last_place(ctx)?).ok_or(NOT_A_TICKET_ERR)?),
        _ => None,
    };
    let mut wrote = false;
    if !gone.is_empty() {
        let members: Vec<Member> = gone
            .iter()
            .filter_map(|m| Member::new(ctx, m, None))
            .collect();
        if let Some(open) = key.live() {
            for m in &members {
                // SAFETY: open for writing; a live member string.
                unsafe { api!(RedisModule_ZsetRem)(open, m.s, ptr::null_mut()) };
            }
        }
        let mut strs: Vec<Str> = members.iter().map(|m| m.s).collect();
        // SAFETY: "sv": a live string, then `strs.len()` live strings.
        unsafe {
            api!(RedisModule_Replicate)(
                ctx,
                c"ZREM".as_ptr(),
                c"sv".as_ptr(),
                name,
                strs.as_mut_ptr(),
                strs.len(),
            )
        };
        wrote = true;
    }
    if let (Some(deadline), Some(id)) = (wait_deadline, id) {
        let d = tickets::deadline_member(id);
        let d_score = -deadline;
        let Some(open) = key.live() else {
            return Ok(());
        };
        let (dp, dl) = (d.as_ptr().cast::<c_char>(), d.len());
        match new_place {
            Some(place) => {
                let q = tickets::place_member(id);
                for (member, score) in [(&q, place), (&d, d_score)] {
                    if let Some(m) = Member::new(ctx, member, None) {
                        // SAFETY: open for writing; a live string; an
                        // integer score, never NaN.
                        unsafe {
                            api!(RedisModule_ZsetAdd)(open, score as f64, m.s, ptr::null_mut())
                        };
                    }
                }
                let (qp, ql) = (q.as_ptr().cast::<c_char>(), q.len());
                // SAFETY: "slblb": a live string, then (long long, buffer
                // and its length) twice.
                unsafe {
                    api!(RedisModule_Replicate)(
                        ctx,
                        c"ZADD".as_ptr(),
                        c"slblb".as_ptr(),
                        name,
                        place as c_longlong,
                        qp,
                        ql,
                        d_score as c_longlong,
                        dp,
                        dl,
                    )
                };
            }
            None => {
                if let Some(m) = Member::new(ctx, &d, None) {
                    // SAFETY: as above.
                    unsafe {
                        api!(RedisModule_ZsetAdd)(open, d_score as f64, m.s, ptr::null_mut())
                    };
                }
                // SAFETY: "slb": a live string, a long long, a buffer and its length.
                unsafe {
                    api!(RedisModule_Replicate)(
                        ctx,
                        c"ZADD".as_ptr(),
                        c"slb".as_ptr(),
                        name,
                        d_score as c_longlong,
                        dp,
                        dl,
                    )
                };
            }
        }
        if let Some(latest) = key.latest_deadline(ctx)? {
            key.set_expires_at(latest);
            replicate_expiry(ctx, name, latest);
        }
        wrote = true;
    }
    if wrote {
        signal_modified(ctx, name);
    }
    Ok(())
}

/// The wake-up of a release: `PUBLISH <ticket key> <lease key>`.
pub fn publish_wake_up(ctx: Ctx, channel: Str, lease_key: Str) {
    // SAFETY: "ss": two live strings. Not replicated (no flag): a message,
    // not a write. The reply is freed once.
    unsafe {
        let reply =
            api!(RedisModule_Call)(ctx, c"PUBLISH".as_ptr(), c"ss".as_ptr(), channel, lease_key);
        if !reply.is_null() {
            api!(RedisModule_FreeCallReply)(reply);
        }
    }
}

/// Whether the ticket key `name` holds ticket `id` (a `q:<id>` place);
/// WRONGTYPE for another type.
pub fn holds_ticket(ctx: Ctx, name: Str, id: &[u8]) -> Result<bool, RlError> {
    let key = Key::read(ctx, name);
    key.lease_set()?;
    Ok(key.score_of(ctx, &tickets::place_member(id)).is_some())
}

/// Removes ticket `id` (a release with QUEUE): `ZREM <tk> q:<id> d:<id>`.
pub fn drop_ticket(ctx: Ctx, name: Str, id: &[u8]) {
    let mut key = Key::write(ctx, name);
    let queue = Queue {
        place: Some(1),
        ..Queue::default()
    };
    // Leaving with no WAIT: the ZREM only, which cannot fail.
    let _ = execute_tickets(ctx, &mut key, name, &queue, Some(id), true, None);
}
