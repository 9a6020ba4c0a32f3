//! Module configuration: `CONFIG SET/GET ratelimit.*`, `ratelimit.*` lines
//! in the config file, and `loadmodule <path> [name value ...]` arguments.
//! The arguments are the configs' defaults: config lines and `CONFIG SET`
//! override them, so a `CONFIG REWRITE` keeps what `CONFIG GET` shows (the
//! server writes a line for every value that differs from the default).
//! Raw FFI: redis-module's config layer rejects values with its own
//! messages and cannot take module arguments as the configs' defaults.

use std::os::raw::{c_char, c_int, c_void};
use std::ptr;
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering::Relaxed};

use redis_module::raw;

use crate::algo::{Algo, ALGORITHMS};

static DEFAULT_ALGO: AtomicU8 = AtomicU8::new(BUILT_IN.algo as u8);
static HIT_EVENTS: AtomicBool = AtomicBool::new(BUILT_IN.hit_events);

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

extern "C" fn get_algo(_name: *const c_char, _data: *mut c_void) -> c_int {
    c_int::from(DEFAULT_ALGO.load(Relaxed))
}

extern "C" fn set_algo(
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

extern "C" fn get_hit_events(_name: *const c_char, _data: *mut c_void) -> c_int {
    c_int::from(HIT_EVENTS.load(Relaxed))
}

extern "C" fn set_hit_events(
    _name: *const c_char,
    value: c_int,
    _data: *mut c_void,
    _err: *mut *mut raw::RedisModuleString,
) -> c_int {
    HIT_EVENTS.store(value != 0, Relaxed);
    OK
}

/// Reads the `loadmodule` arguments (pairs of name and value) as defaults,
/// registers the configs with them, then loads config-file values.
pub fn register(ctx: *mut raw::RedisModuleCtx, args: &[&[u8]]) -> Result<(), String> {
    let defaults = Defaults::from_module_args(args)?;
    DEFAULT_ALGO.store(defaults.algo as u8, Relaxed);
    HIT_EVENTS.store(defaults.hit_events, Relaxed);
    // SAFETY: read at load, after Init filled the API table.
    let (Some(enum_config), Some(bool_config), Some(load)) = (
        unsafe { raw::RedisModule_RegisterEnumConfig },
        unsafe { raw::RedisModule_RegisterBoolConfig },
        unsafe { raw::RedisModule_LoadConfigs },
    ) else {
        return Err("this server lacks module configuration".into());
    };
    let mut names: Vec<*const c_char> = ALGORITHMS.iter().map(|a| a.name.as_ptr()).collect();
    let values: Vec<c_int> = (0..Algo::ALL.len() as c_int).collect();
    let flags = raw::REDISMODULE_CONFIG_DEFAULT;
    // SAFETY: the load's context; `names` and `values` hold as many entries
    // as passed, and the server copies them; the callbacks live as long as
    // the library.
    let rc = unsafe {
        enum_config(
            ctx,
            c"default-algorithm".as_ptr(),
            defaults.algo as c_int,
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
    // SAFETY: the load's context; the callbacks live as long as the library.
    let rc = unsafe {
        bool_config(
            ctx,
            c"hit-events".as_ptr(),
            c_int::from(defaults.hit_events),
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
    // SAFETY: the load's context, once every config is registered.
    if unsafe { load(ctx) } != OK {
        return Err("loading ratelimit.* configuration failed".into());
    }
    Ok(())
}

/// The configs' defaults: built in, or given as module arguments.
struct Defaults {
    algo: Algo,
    hit_events: bool,
}

/// The defaults when no module argument sets them.
const BUILT_IN: Defaults = Defaults {
    algo: Algo::Fixed,
    hit_events: true,
};

impl Defaults {
    /// `loadmodule <path> default-algorithm sliding hit-events no`.
    fn from_module_args(args: &[&[u8]]) -> Result<Defaults, String> {
        if !args.len().is_multiple_of(2) {
            return Err("module arguments come in pairs: <name> <value>".into());
        }
        let mut defaults = BUILT_IN;
        for pair in args.chunks(2) {
            let (name, value) = (pair[0], pair[1]);
            let name = name.strip_prefix(b"ratelimit.").unwrap_or(name);
            match name {
                b"default-algorithm" => {
                    defaults.algo = Algo::parse(value)
                        .ok_or_else(|| format!("default-algorithm must be {}", Algo::NAMES))?;
                }
                b"hit-events" if value.eq_ignore_ascii_case(b"yes") => defaults.hit_events = true,
                b"hit-events" if value.eq_ignore_ascii_case(b"no") => defaults.hit_events = false,
                b"hit-events" => return Err("hit-events must be yes or no".into()),
                _ => {
                    return Err(format!(
                        "unknown module argument '{}'",
                        String::from_utf8_lossy(name)
                    ))
                }
            }
        }
        Ok(defaults)
    }
}
