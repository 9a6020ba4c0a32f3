//! The waiting room: callers of RL.ADMIT and RL.ACQUIRE given `BLOCK` that
//! cannot be admitted at once wait here, first come first served per key.
//! Nothing here decides admission: a waiter is woken by re-running its own
//! command (the server hands the blocked client's arguments back), and the
//! command asks `mode` whether it runs fresh, woken, or timed out.
//!
//! The server's blocking-on-keys machinery (`BlockClientOnKeysWithFlags`)
//! does the rest of what BLPOP gets: timeouts, CLIENT UNBLOCK, a
//! disconnect, `-UNBLOCKED` on a role change and `-MOVED` when the slot
//! leaves. This room keeps the order (one queue per key, in arrival order)
//! and one timer, set to the earliest moment a queue needs looking at: its
//! head's computed admission time or a waiter's timeout. A key with no
//! waiters has no entry. Everything runs on the main thread; the lock is
//! never held across a module-API call. Raw FFI: the blocking and timer
//! API are not in redis-module's safe layer.

use std::collections::{HashMap, VecDeque};
use std::os::raw::{c_int, c_void};
use std::ptr;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::Relaxed};
use std::sync::{Mutex, MutexGuard, OnceLock};

use redis_module::raw;

use crate::error::RlError;
use crate::ffi::{api, str_bytes, Ctx, Handler, Str, ERR, OK};
use crate::{clock, config, stats};

/// How many callers wait, over all keys: the commands' fast path reads
/// only this (no waiters, nothing else to look at).
static WAITING: AtomicUsize = AtomicUsize::new(0);
/// Set while the server runs one of our wake callbacks.
static IN_WAKE: AtomicBool = AtomicBool::new(false);
/// Set by a woken command that is still not admitted: the callback then
/// tells the server to keep the client blocked.
static STAY: AtomicBool = AtomicBool::new(false);

/// Which command a waiter runs again when woken.
#[derive(Debug, Clone, Copy)]
pub enum Waits {
    Admit = 0,
    Acquire = 1,
}

/// The wake callbacks (`entry`'s), one per `Waits`, set at load.
static WAKE: OnceLock<[Handler; 2]> = OnceLock::new();

/// At load: the callbacks that run a woken waiter's command again.
pub fn init(admit: Handler, acquire: Handler) {
    let _ = WAKE.set([admit, acquire]);
}

/// A waiter's place: the key it waits on and its number. Owned by the
/// server as the blocked client's private data, freed by `free_ticket`.
pub struct Ticket {
    db: c_int,
    key: Vec<u8>,
    id: u64,
}

/// How the running command was called.
pub enum Mode<'a> {
    /// By a client, as usual.
    Fresh,
    /// A waiter woken: its key may be ready.
    Woken(&'a Ticket),
    /// A waiter's BLOCK timeout passed (or CLIENT UNBLOCK).
    TimedOut(&'a Ticket),
}

struct Waiter {
    id: u64,
    /// When its timeout passes (ms), if it has one.
    deadline: Option<i64>,
}

#[derive(Default)]
struct Queue {
    waiters: VecDeque<Waiter>,
    /// When the head can be admitted, as last computed (ms).
    head_at: Option<i64>,
    /// The key was signalled and its head will be looked at: the timer
    /// waits only for timeouts (and the safety net) until it is.
    signalled: bool,
    /// When it was signalled (ms).
    signalled_at: i64,
}

impl Queue {
    /// When this queue needs looking at next (ms), if ever.
    fn wake_at(&self, now: i64) -> Option<i64> {
        // The server times a waiter out once its deadline has passed: a
        // wake 1 ms after it, and never sooner than 1 ms from now.
        let timeouts = self.waiters.iter().filter_map(|w| w.deadline);
        let timeout = timeouts.min().map(|at| at.saturating_add(1).max(now + 1));
        // Signalled, the head is looked at within this event-loop cycle;
        // the safety net below only matters if that look never came.
        let head = match self.signalled {
            true => Some(self.signalled_at.saturating_add(SIGNAL_SAFETY_NET_MS)),
            false => Some(self.head_at.unwrap_or(now)),
        };
        match (head, timeout) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }
}

/// A signalled queue whose head was not looked at by then is signalled
/// again (it never is, but a queue with no timeout must not stall).
const SIGNAL_SAFETY_NET_MS: i64 = 1000;

/// A timeout ending past 2^53 ms waits with no limit (as `BLOCK 0`).
const LATEST_DEADLINE: i64 = 1 << 53;

#[derive(Default)]
struct Room {
    queues: HashMap<(c_int, Vec<u8>), Queue>,
    next_id: u64,
    /// The armed timer and when it fires (ms).
    timer: Option<(raw::RedisModuleTimerID, i64)>,
}

static ROOM: Mutex<Option<Room>> = Mutex::new(None);

fn room() -> MutexGuard<'static, Option<Room>> {
    // Only the main thread locks; a poisoned lock still holds good data
    // (every update below leaves it consistent before any call out).
    ROOM.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Whether anyone waits: when not, a command has nothing to look at here
/// (one load). A waiter's own command runs while it is still counted.
#[inline]
pub fn anyone_waits() -> bool {
    WAITING.load(Relaxed) != 0
}

/// How the running command was called: one load when nobody waits.
#[inline]
pub fn mode<'a>(ctx: Ctx) -> Mode<'a> {
    if !IN_WAKE.load(Relaxed) {
        return Mode::Fresh;
    }
    // SAFETY: the running call's context; null unless the server runs a
    // blocked client's callback in it.
    let data = unsafe { api!(RedisModule_GetBlockedClientPrivateData)(ctx) };
    if data.is_null() {
        return Mode::Fresh;
    }
    // SAFETY: our only private data is a boxed `Ticket` (see `wait`); the
    // server frees it (`free_ticket`) only after the callbacks are done.
    let ticket = unsafe { &*data.cast::<Ticket>() };
    // SAFETY: as above.
    match unsafe { api!(RedisModule_IsBlockedTimeoutRequest)(ctx) } {
        0 => Mode::Woken(ticket),
        _ => Mode::TimedOut(ticket),
    }
}

/// Whether this call may block: not inside MULTI, a script or a function,
/// nor wherever the server denies blocking (as BLPOP does there).
pub fn may_block(ctx: Ctx) -> bool {
    const NO_BLOCKING: c_int = (raw::REDISMODULE_CTX_FLAGS_MULTI
        | raw::REDISMODULE_CTX_FLAGS_LUA
        | raw::REDISMODULE_CTX_FLAGS_DENY_BLOCKING) as c_int;
    // SAFETY: the running call's context.
    let flags = unsafe { api!(RedisModule_GetContextFlags)(ctx) };
    flags & NO_BLOCKING == 0
}

fn place(ctx: Ctx, key: Str) -> (c_int, Vec<u8>) {
    // SAFETY: the running call's context.
    let db = unsafe { api!(RedisModule_GetSelectedDb)(ctx) };
    (db, str_bytes(&key).to_vec())
}

/// Others wait on `key`: then a call that does not join them is refused,
/// told to wait until this time (ms; the head's computed admission time,
/// or `now` when it is being looked at).
pub fn queued(ctx: Ctx, key: Str, now: i64) -> Option<i64> {
    if WAITING.load(Relaxed) == 0 {
        return None;
    }
    let at = place(ctx, key);
    let guard = room();
    let queue = guard.as_ref()?.queues.get(&at)?;
    Some(queue.head_at.unwrap_or(now).max(now))
}

/// Blocks the running call's client on `key` for up to `timeout_ms` (0: no
/// limit), behind whoever waits there. `admit_in_ms`: when the call could
/// be admitted if it were at the head (its refusal's wait; a release may
/// come sooner). Answers nothing: the woken command will.
pub fn wait(
    ctx: Ctx,
    key: Str,
    waits: Waits,
    timeout_ms: i64,
    admit_in_ms: i64,
) -> Result<(), RlError> {
    let Some(&callbacks) = WAKE.get() else {
        return Err(RlError::TooLarge("BLOCK", "blocking is not set up"));
    };
    let now = clock::now().ms;
    let place = place(ctx, key);
    let (timeout_ms, deadline) = match now.checked_add(timeout_ms) {
        Some(_) if timeout_ms == 0 => (0, None),
        Some(at) if at <= LATEST_DEADLINE => (timeout_ms, Some(at)),
        _ => (0, None),
    };
    let ticket = {
        let mut guard = room();
        let room = guard.get_or_insert_with(Room::default);
        let max = config::max_waiters();
        let queue = room.queues.entry(place.clone()).or_default();
        if i64::try_from(queue.waiters.len()).unwrap_or(i64::MAX) >= max {
            if queue.waiters.is_empty() {
                room.queues.remove(&place);
            }
            return Err(RlError::QueueFull(max));
        }
        room.next_id += 1;
        let id = room.next_id;
        if queue.waiters.is_empty() {
            queue.head_at = Some(now.saturating_add(admit_in_ms.max(1)));
            queue.signalled = false;
        }
        queue.waiters.push_back(Waiter { id, deadline });
        WAITING.fetch_add(1, Relaxed);
        Box::new(Ticket {
            db: place.0,
            key: place.1,
            id,
        })
    };
    let data = Box::into_raw(ticket).cast::<c_void>();
    let mut keys = [key];
    let callback = Some(callbacks[waits as usize] as unsafe extern "C" fn(_, _, _) -> _);
    // SAFETY: the running call's context (may_block said it can block);
    // one live key name; our callbacks; `data` is a boxed Ticket the
    // server hands to `free_ticket` once the client is unblocked.
    let blocked = unsafe {
        api!(RedisModule_BlockClientOnKeysWithFlags)(
            ctx,
            callback,
            callback,
            Some(free_ticket),
            timeout_ms,
            keys.as_mut_ptr(),
            1,
            data,
            raw::REDISMODULE_BLOCK_UNBLOCK_DELETED as c_int,
        )
    };
    if blocked.is_null() {
        // SAFETY: the server did not take `data`: it is still ours, once.
        let ticket = unsafe { Box::from_raw(data.cast::<Ticket>()) };
        leave(&ticket);
        return Err(RlError::TooLarge("BLOCK", "the server refused to block"));
    }
    stats::set_blocked(WAITING.load(Relaxed));
    rearm(ctx, now);
    Ok(())
}

/// Whether `ticket` is at the head of its queue (only the head is ever
/// admitted: nobody overtakes).
pub fn is_head(ticket: &Ticket) -> bool {
    let guard = room();
    let head = guard
        .as_ref()
        .and_then(|room| room.queues.get(&(ticket.db, ticket.key.clone())))
        .and_then(|queue| queue.waiters.front().map(|w| w.id));
    head == Some(ticket.id)
}

/// Whether this node still serves `key` for a woken waiter. In cluster
/// mode its slot may be migrating or gone: MIGRATE deleting the key wakes
/// it, and no routing check runs for a blocked client's callback. A module
/// call routes as a client's would, and is refused then; the waiter stays
/// blocked, and the server redirects it (-MOVED) once the slot has moved,
/// as it does BLPOP's.
pub fn serves_key(ctx: Ctx, key: Str) -> bool {
    // SAFETY: the running call's context.
    let flags = unsafe { api!(RedisModule_GetContextFlags)(ctx) };
    if flags & raw::REDISMODULE_CTX_FLAGS_CLUSTER as c_int == 0 {
        return true;
    }
    // SAFETY: the running call's context, a C-string command and format,
    // and one live key name for its one "s"; the reply is freed once.
    unsafe {
        let reply = api!(RedisModule_Call)(ctx, c"EXISTS".as_ptr(), c"s".as_ptr(), key);
        if reply.is_null() {
            return false;
        }
        api!(RedisModule_FreeCallReply)(reply);
    }
    true
}

/// A woken waiter stays blocked: not its turn, or not admissible yet; the
/// head says when it can be (`admit_in_ms`; `None` from one behind it).
pub fn stay(ctx: Ctx, ticket: &Ticket, admit_in_ms: Option<i64>) {
    STAY.store(true, Relaxed);
    let Some(admit_in_ms) = admit_in_ms else {
        return;
    };
    let now = clock::now().ms;
    {
        let mut guard = room();
        let Some(queue) = guard
            .as_mut()
            .and_then(|room| room.queues.get_mut(&(ticket.db, ticket.key.clone())))
        else {
            return;
        };
        if queue.waiters.front().map(|w| w.id) != Some(ticket.id) {
            return;
        }
        queue.head_at = Some(now.saturating_add(admit_in_ms.max(1)));
        queue.signalled = false;
    }
    rearm(ctx, now);
}

/// The head waiter was answered (admitted, or refused for good): it
/// leaves, and the one behind it is looked at in the same cycle.
pub fn served(ctx: Ctx, ticket: &Ticket, key: Str) {
    let next = {
        let mut guard = room();
        let Some(room) = guard.as_mut() else { return };
        let at = (ticket.db, ticket.key.clone());
        let Some(queue) = room.queues.get_mut(&at) else {
            return;
        };
        let Some(pos) = queue.waiters.iter().position(|w| w.id == ticket.id) else {
            return;
        };
        queue.waiters.remove(pos);
        queue.head_at = None;
        queue.signalled = !queue.waiters.is_empty();
        queue.signalled_at = clock::now().ms;
        if queue.waiters.is_empty() {
            room.queues.remove(&at);
            false
        } else {
            true
        }
    };
    WAITING.fetch_sub(1, Relaxed);
    stats::set_blocked(WAITING.load(Relaxed));
    stats::wait_ended(true);
    if next {
        signal(ctx, key);
    }
    rearm(ctx, clock::now().ms);
}

/// A waiter timed out: it leaves (answered with its refusal by the caller).
pub fn timed_out(ctx: Ctx, ticket: &Ticket) {
    if leave(ticket) {
        stats::wait_ended(false);
    }
    rearm(ctx, clock::now().ms);
}

/// A key changed in a way that may admit its head (a release, a refund, a
/// reset): the head is looked at once this command is done.
pub fn key_changed(ctx: Ctx, key: Str) {
    if WAITING.load(Relaxed) == 0 {
        return;
    }
    let at = place(ctx, key);
    let waits = {
        let mut guard = room();
        let queue = guard.as_mut().and_then(|room| room.queues.get_mut(&at));
        match queue {
            Some(queue) => {
                queue.signalled = true;
                queue.signalled_at = clock::now().ms;
                true
            }
            None => false,
        }
    };
    if waits {
        signal(ctx, key);
    }
}

/// Run by `entry`'s wake callbacks around the command: the server keeps
/// the client blocked when the command said `stay`.
pub fn woken(run: impl FnOnce() -> c_int) -> c_int {
    IN_WAKE.store(true, Relaxed);
    STAY.store(false, Relaxed);
    run();
    IN_WAKE.store(false, Relaxed);
    match STAY.swap(false, Relaxed) {
        true => ERR,
        false => OK,
    }
}

/// Takes `ticket` out of its queue; true when it was there. When it was
/// the head, the one behind it is looked at at once (by the timer: the
/// server may be freeing a client, where no key can be signalled).
fn leave(ticket: &Ticket) -> bool {
    let mut guard = room();
    let Some(room) = guard.as_mut() else {
        return false;
    };
    let at = (ticket.db, ticket.key.clone());
    let Some(queue) = room.queues.get_mut(&at) else {
        return false;
    };
    let Some(pos) = queue.waiters.iter().position(|w| w.id == ticket.id) else {
        return false;
    };
    queue.waiters.remove(pos);
    if pos == 0 {
        queue.head_at = None;
        queue.signalled = false;
    }
    if queue.waiters.is_empty() {
        room.queues.remove(&at);
    }
    WAITING.fetch_sub(1, Relaxed);
    stats::set_blocked(WAITING.load(Relaxed));
    true
}

/// The server frees a blocked client's ticket: answered, timed out,
/// unblocked, disconnected or killed. A waiter still queued leaves.
extern "C" fn free_ticket(ctx: Ctx, data: *mut c_void) {
    if data.is_null() {
        return;
    }
    // SAFETY: `data` is the boxed Ticket `wait` gave the server, which
    // hands it here once.
    let ticket = unsafe { Box::from_raw(data.cast::<Ticket>()) };
    if leave(&ticket) {
        rearm(ctx, clock::now().ms);
    }
}

fn signal(ctx: Ctx, key: Str) {
    // SAFETY: a context with a client (a command's or a blocked
    // client's) and a live key name; the server only notes the key.
    unsafe { api!(RedisModule_SignalKeyAsReady)(ctx, key) };
}

/// Sets the one timer to the earliest moment a queue needs looking at, or
/// none when no queue does.
fn rearm(ctx: Ctx, now: i64) {
    let (stop, start) = {
        let mut guard = room();
        let Some(room) = guard.as_mut() else { return };
        let next = room.queues.values().filter_map(|q| q.wake_at(now)).min();
        let current = room.timer.map(|(_, at)| at);
        if next == current {
            return;
        }
        (room.timer.take().map(|(id, _)| id), next)
    };
    if let Some(id) = stop {
        let mut data = ptr::null_mut();
        // SAFETY: a timer we created; its data is null (nothing to free).
        unsafe { api!(RedisModule_StopTimer)(ctx, id, &mut data) };
    }
    if let Some(at) = start {
        let period = at.saturating_sub(now).max(0);
        // SAFETY: a context of this module; the callback is ours and its
        // data null.
        let id =
            unsafe { api!(RedisModule_CreateTimer)(ctx, period, Some(on_timer), ptr::null_mut()) };
        if let Some(room) = room().as_mut() {
            room.timer = Some((id, at));
        }
    }
}

/// The timer: signals every key whose head is due (its command looks at it
/// before the server sleeps again); the server's own timeout check runs
/// then too, for waiters whose deadline passed.
extern "C" fn on_timer(ctx: Ctx, _data: *mut c_void) {
    stats::wait_timer_fired();
    let now = clock::now().ms;
    let due: Vec<(c_int, Vec<u8>)> = {
        let mut guard = room();
        let Some(room) = guard.as_mut() else { return };
        room.timer = None;
        let mut due = Vec::new();
        for (at, queue) in room.queues.iter_mut() {
            // Due within the ms: the timer fires on the monotonic clock,
            // `now` is the server's cached one, which may lag it by a ms.
            let head_due = match queue.signalled {
                // Signalled at least SIGNAL_SAFETY_NET_MS ago (see there).
                true => queue.signalled_at <= now - SIGNAL_SAFETY_NET_MS,
                false => queue.head_at.is_none_or(|t| t <= now + 1),
            };
            if head_due {
                queue.signalled = true;
                queue.signalled_at = now;
                due.push(at.clone());
            }
        }
        due
    };
    for (db, key) in due {
        // SAFETY: the timer's context has a client of its own, whose
        // database this selects; the key name is created, used and freed
        // here.
        unsafe {
            if api!(RedisModule_SelectDb)(ctx, db) != OK {
                continue;
            }
            let name = api!(RedisModule_CreateString)(ctx, key.as_ptr().cast(), key.len());
            if name.is_null() {
                continue;
            }
            api!(RedisModule_SignalKeyAsReady)(ctx, name);
            api!(RedisModule_FreeString)(ctx, name);
        }
    }
    rearm(ctx, now);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn queue(head_at: Option<i64>, signalled: bool, deadlines: &[Option<i64>]) -> Queue {
        Queue {
            waiters: deadlines
                .iter()
                .enumerate()
                .map(|(i, &deadline)| Waiter {
                    id: i as u64,
                    deadline,
                })
                .collect(),
            head_at,
            signalled,
            signalled_at: 1_000,
        }
    }

    #[test]
    fn a_queue_wakes_at_its_heads_time_or_the_first_timeout() {
        assert_eq!(
            queue(Some(1_500), false, &[None, None]).wake_at(1_000),
            Some(1_500)
        );
        // A timeout is looked at 1 ms after it passes (the server's rule).
        assert_eq!(
            queue(Some(9_000), false, &[None, Some(1_200)]).wake_at(1_000),
            Some(1_201)
        );
        // Never sooner than 1 ms from now for a timeout already past.
        assert_eq!(
            queue(Some(9_000), false, &[Some(900)]).wake_at(1_000),
            Some(1_001)
        );
        // Unknown head time: at once.
        assert_eq!(queue(None, false, &[None]).wake_at(1_000), Some(1_000));
    }

    #[test]
    fn a_signalled_queue_waits_for_its_look_then_the_safety_net() {
        let q = queue(Some(1_000), true, &[None]);
        assert_eq!(q.wake_at(1_000), Some(1_000 + SIGNAL_SAFETY_NET_MS));
        let q = queue(Some(1_000), true, &[Some(1_100)]);
        assert_eq!(q.wake_at(1_000), Some(1_101));
    }
}
