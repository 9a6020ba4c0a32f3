//! Module configuration: `CONFIG SET/GET ratelimit.*`, `ratelimit.*` lines
//! in the config file, and `loadmodule <path> [name value ...]` arguments
//! (applied last, so they win).

use std::ffi::CStr;
use std::os::raw::{c_char, c_int, c_void};
use std::ptr;
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering::Relaxed};
use std::sync::{Mutex, PoisonError};

use redis_module::raw;

use crate::algo::Algo;
use crate::{stats, store};

static DEFAULT_ALGO: AtomicU8 = AtomicU8::new(Algo::Fixed as u8);
static HIT_EVENTS: AtomicBool = AtomicBool::new(true);

/// The algorithm used when neither ALGO nor the META hash names one.
pub fn default_algo() -> Algo {
    Algo::ALL[usize::from(DEFAULT_ALGO.load(Relaxed)).min(Algo::ALL.len() - 1)]
}

/// Whether refusals fire the `rl.hit` keyspace event.
pub fn hit_events() -> bool {
    HIT_EVENTS.load(Relaxed)
}

const OK: c_int = raw::REDISMODULE_OK as c_int;
const ERR: c_int = raw::REDISMODULE_ERR as c_int;

unsafe extern "C" fn get_algo(_name: *const c_char, _data: *mut c_void) -> c_int {
    c_int::from(DEFAULT_ALGO.load(Relaxed))
}

unsafe extern "C" fn set_algo(
    _name: *const c_char,
    value: c_int,
    _data: *mut c_void,
    _err: *mut *mut raw::RedisModuleString,
) -> c_int {
    match u8::try_from(value) {
        Ok(v) if usize::from(v) < Algo::ALL.len() => {
            DEFAULT_ALGO.store(v, Relaxed);
            OK
        }
        _ => ERR,
    }
}

unsafe extern "C" fn get_hit_events(_name: *const c_char, _data: *mut c_void) -> c_int {
    c_int::from(HIT_EVENTS.load(Relaxed))
}

unsafe extern "C" fn set_hit_events(
    _name: *const c_char,
    value: c_int,
    _data: *mut c_void,
    _err: *mut *mut raw::RedisModuleString,
) -> c_int {
    HIT_EVENTS.store(value != 0, Relaxed);
    OK
}

/// Registers the configs, loads config-file values, then applies the
/// `loadmodule` arguments (pairs of name and value).
pub fn register(ctx: *mut raw::RedisModuleCtx, args: &[&[u8]]) -> Result<(), String> {
    let (Some(enum_config), Some(bool_config), Some(load)) = (
        unsafe { raw::RedisModule_RegisterEnumConfig },
        unsafe { raw::RedisModule_RegisterBoolConfig },
        unsafe { raw::RedisModule_LoadConfigs },
    ) else {
        return Err("this server lacks module configuration".into());
    };
    let mut names: Vec<*const c_char> = ALGO_NAMES.iter().map(|n| n.as_ptr()).collect();
    let values: Vec<c_int> = (0..Algo::ALL.len() as c_int).collect();
    let flags = raw::REDISMODULE_CONFIG_DEFAULT;
    let rc = unsafe {
        enum_config(
            ctx,
            c"default-algorithm".as_ptr(),
            Algo::Fixed as c_int,
            flags,
            names.as_mut_ptr(),
            values.as_ptr(),
            values.len() as c_int,
            Some(get_algo),
            Some(set_algo),
            None,
            ptr::null_mut(),
        )
    };
    if rc != OK {
        return Err("registering ratelimit.default-algorithm failed".into());
    }
    let rc = unsafe {
        bool_config(
            ctx,
            c"hit-events".as_ptr(),
            1,
            flags,
            Some(get_hit_events),
            Some(set_hit_events),
            None,
            ptr::null_mut(),
        )
    };
    if rc != OK {
        return Err("registering ratelimit.hit-events failed".into());
    }
    if unsafe { load(ctx) } != OK {
        return Err("loading ratelimit.* configuration failed".into());
    }
    apply_module_args(args)
}

const ALGO_NAMES: [&CStr; 5] = [c"fixed", c"sliding", c"token", c"gcra", c"leaky"];

/// `loadmodule <path> default-algorithm sliding hit-events no`.
fn apply_module_args(args: &[&[u8]]) -> Result<(), String> {
    if !args.len().is_multiple_of(2) {
        return Err("module arguments come in pairs: <name> <value>".into());
    }
    for pair in args.chunks(2) {
        let (name, value) = (pair[0], pair[1]);
        let name = name.strip_prefix(b"ratelimit.").unwrap_or(name);
        match name {
            b"default-algorithm" => {
                let algo = Algo::parse(value)
                    .ok_or_else(|| format!("default-algorithm must be {}", Algo::NAMES))?;
                DEFAULT_ALGO.store(algo as u8, Relaxed);
            }
            b"hit-events" => {
                let on = match value {
                    b"yes" => true,
                    b"no" => false,
                    _ => return Err("hit-events must be yes or no".into()),
                };
                HIT_EVENTS.store(on, Relaxed);
            }
            _ => {
                return Err(format!(
                    "unknown module argument '{}'",
                    String::from_utf8_lossy(name)
                ))
            }
        }
    }
    Ok(())
}

/// `CONFIG RESETSTAT` clears the server's statistics, and ours with them.
/// A filter sees a call before ACL, MULTI queueing and script checks, so it
/// clears nothing: it asks `stats` to check whether the reset ran (for a
/// queued one, once its EXEC is sent). It sees every command, so it
/// compares as little as it can.
unsafe extern "C" fn resetstat_filter(fctx: *mut raw::RedisModuleCommandFilterCtx) {
    let (Some(count), Some(arg)) = (unsafe { raw::RedisModule_CommandFilterArgsCount }, unsafe {
        raw::RedisModule_CommandFilterArgGet
    }) else {
        return;
    };
    let argc = unsafe { count(fctx) };
    if argc != 2 && !(argc == 1 && WATCHING_EXEC.load(Relaxed)) {
        return;
    }
    let word = |pos| store::arg_bytes(unsafe { arg(fctx, pos) });
    if argc == 1 {
        if word(0).eq_ignore_ascii_case(b"exec") {
            exec_sent(store::filter_client_id(fctx));
        }
    } else if word(0).eq_ignore_ascii_case(b"config") && word(1).eq_ignore_ascii_case(b"resetstat")
    {
        resetstat_sent(store::filter_client_id(fctx));
    }
}

/// Clients in MULTI that queued a CONFIG RESETSTAT, and clients whose EXEC
/// of one was sent but may not have run yet (postponed by CLIENT PAUSE).
struct Transactions {
    queued: Vec<u64>,
    /// Some ids were not kept: every EXEC may run a RESETSTAT.
    overflow: bool,
    sent: Vec<u64>,
}

static TRANSACTIONS: Mutex<Transactions> = Mutex::new(Transactions {
    queued: Vec::new(),
    overflow: false,
    sent: Vec::new(),
});
/// Whether the filter compares EXEC: a RESETSTAT is queued somewhere.
static WATCHING_EXEC: AtomicBool = AtomicBool::new(false);
/// Clients in MULTI tracked at once; past that, see `overflow`.
const MAX_TRACKED: usize = 1024;

fn transactions() -> std::sync::MutexGuard<'static, Transactions> {
    TRANSACTIONS.lock().unwrap_or_else(PoisonError::into_inner)
}

fn has_flags(id: u64, flags: u32) -> bool {
    store::client_flags(id).is_some_and(|f| f & flags == flags)
}

const MULTI: u32 = raw::REDISMODULE_CLIENTINFO_FLAG_MULTI;

fn resetstat_sent(id: u64) {
    if !has_flags(id, MULTI) {
        // Runs now or is refused (a script's client has no id to find).
        stats::reset_pending();
        return;
    }
    let mut t = transactions();
    if !t.queued.contains(&id) {
        if t.queued.len() == MAX_TRACKED {
            // Drop discarded, aborted or closed transactions.
            t.queued.retain(|&c| has_flags(c, MULTI));
        }
        match t.queued.len() < MAX_TRACKED {
            true => t.queued.push(id),
            false => t.overflow = true,
        }
    }
    WATCHING_EXEC.store(true, Relaxed);
}

fn exec_sent(id: u64) {
    let mut t = transactions();
    if let Some(pos) = t.queued.iter().position(|&c| c == id) {
        t.queued.swap_remove(pos);
        if t.sent.len() < MAX_TRACKED && !t.sent.contains(&id) {
            t.sent.push(id);
        }
    } else if !t.overflow {
        return;
    }
    WATCHING_EXEC.store(!t.queued.is_empty() || t.overflow, Relaxed);
    stats::reset_pending();
}

/// Whether an EXEC that may run a RESETSTAT was sent and still waits: its
/// client is in MULTI and blocked (a refused EXEC ends the transaction).
pub fn exec_postponed() -> bool {
    let mut t = transactions();
    let waiting = MULTI | raw::REDISMODULE_CLIENTINFO_FLAG_BLOCKED;
    t.sent.retain(|&c| has_flags(c, waiting));
    !t.sent.is_empty()
}

pub fn watch_resetstat(ctx: *mut raw::RedisModuleCtx) {
    if let Some(register) = unsafe { raw::RedisModule_RegisterCommandFilter } {
        unsafe {
            register(
                ctx,
                Some(resetstat_filter),
                raw::REDISMODULE_CMDFILTER_NOSELF as c_int,
            )
        };
    }
}
