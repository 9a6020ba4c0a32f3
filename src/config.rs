//! Module configuration: `CONFIG SET/GET ratelimit.*`, `ratelimit.*` lines
//! in the config file, and `loadmodule <path> [name value ...]` arguments.
//! The arguments are the configs' defaults: config lines and `CONFIG SET`
//! override them, so a `CONFIG REWRITE` keeps what `CONFIG GET` shows (the
//! server writes a line for every value that differs from the default).
//! Registered through redis-module's config layer (the server itself
//! checks names and values); the values live in atomics the command path
//! reads. Raw FFI: `RedisModule_LoadConfigs`, which redis-module calls only
//! inside `redis_module!`, and the check for the API its layer unwraps.

use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU8, Ordering::Relaxed};

use redis_module::configuration::{
    register_bool_configuration, register_enum_configuration, register_i64_configuration,
    ConfigurationContext, ConfigurationFlags,
};
use redis_module::{raw, ConfigurationValue, Context, EnumConfigurationValue, RedisError};

use crate::algo::{Algo, ALGORITHMS};

static DEFAULT_ALGO: AtomicU8 = AtomicU8::new(BUILT_IN.algo as u8);
static HIT_EVENTS: AtomicBool = AtomicBool::new(BUILT_IN.hit_events);
static MAX_WAITERS: AtomicI64 = AtomicI64::new(BUILT_IN.max_waiters);
static MAX_RESERVE_MS: AtomicI64 = AtomicI64::new(BUILT_IN.max_reserve_ms);

/// The algorithm used when neither ALGO nor the META hash names one.
pub fn default_algo() -> Algo {
    Algo::ALL[usize::from(DEFAULT_ALGO.load(Relaxed)).min(Algo::ALL.len() - 1)]
}

/// Whether refusals fire the `rl.hit` keyspace event.
pub fn hit_events() -> bool {
    HIT_EVENTS.load(Relaxed)
}

/// How many callers may wait (BLOCK) on one key at once.
pub fn max_waiters() -> i64 {
    MAX_WAITERS.load(Relaxed)
}

/// The booking horizon (ms): how far past a full bucket a limiter's state
/// may run ahead of now (RESERVE, FORCE), unless META says otherwise.
pub fn max_reserve_ms() -> i64 {
    MAX_RESERVE_MS.load(Relaxed)
}

/// The configs' names; a config's index is its bit in `APPLIED`.
const CONFIGS: [&str; 4] = [
    "default-algorithm",
    "hit-events",
    "max-waiters",
    "max-reserve-ms",
];
const ALGO_CONFIG: usize = 0;
const HIT_EVENTS_CONFIG: usize = 1;
const MAX_WAITERS_CONFIG: usize = 2;
const MAX_RESERVE_CONFIG: usize = 3;
/// `ratelimit.max-waiters`' range.
const MAX_WAITERS_RANGE: (i64, i64) = (1, 1_000_000);
/// `ratelimit.max-reserve-ms`' range: up to one day.
pub const MAX_RESERVE_RANGE: (i64, i64) = (0, 86_400_000);

/// Which configs the server has set since `register` began. The config
/// layer drops the server's answer to each registration, but
/// `RedisModule_LoadConfigs` sets every registered config (to its config
/// line or its default), so a config never set here failed to register.
static APPLIED: AtomicU8 = AtomicU8::new(0);

fn applied(config: usize) {
    APPLIED.fetch_or(1 << config, Relaxed);
}

/// `ratelimit.default-algorithm` as the config layer holds it.
struct DefaultAlgorithm;

/// One of its values; the names and numbers come from `ALGORITHMS`.
#[derive(Clone, Copy)]
struct AlgoChoice(Algo);

impl TryFrom<i32> for AlgoChoice {
    type Error = RedisError;

    fn try_from(value: i32) -> Result<AlgoChoice, RedisError> {
        let algo = usize::try_from(value).ok().and_then(|i| Algo::ALL.get(i));
        algo.map(|&a| AlgoChoice(a))
            .ok_or(RedisError::Str("no such algorithm"))
    }
}

impl From<AlgoChoice> for i32 {
    fn from(choice: AlgoChoice) -> i32 {
        choice.0 as i32
    }
}

impl EnumConfigurationValue for AlgoChoice {
    fn get_options(&self) -> (Vec<String>, Vec<i32>) {
        let rows = ALGORITHMS
            .iter()
            .map(|a| (a.algo.name().to_owned(), a.algo as i32));
        rows.unzip()
    }
}

impl ConfigurationValue<AlgoChoice> for DefaultAlgorithm {
    fn get(&self, _: &ConfigurationContext) -> AlgoChoice {
        AlgoChoice(default_algo())
    }

    fn set(&self, _: &ConfigurationContext, choice: AlgoChoice) -> Result<(), RedisError> {
        DEFAULT_ALGO.store(choice.0 as u8, Relaxed);
        applied(ALGO_CONFIG);
        Ok(())
    }
}

/// `ratelimit.hit-events` as the config layer holds it.
struct HitEvents;

impl ConfigurationValue<bool> for HitEvents {
    fn get(&self, _: &ConfigurationContext) -> bool {
        hit_events()
    }

    fn set(&self, _: &ConfigurationContext, on: bool) -> Result<(), RedisError> {
        HIT_EVENTS.store(on, Relaxed);
        applied(HIT_EVENTS_CONFIG);
        Ok(())
    }
}

/// `ratelimit.max-waiters` as the config layer holds it.
struct MaxWaiters;

impl ConfigurationValue<i64> for MaxWaiters {
    fn get(&self, _: &ConfigurationContext) -> i64 {
        max_waiters()
    }

    fn set(&self, _: &ConfigurationContext, max: i64) -> Result<(), RedisError> {
        MAX_WAITERS.store(max, Relaxed);
        applied(MAX_WAITERS_CONFIG);
        Ok(())
    }
}

/// `ratelimit.max-reserve-ms` as the config layer holds it.
struct MaxReserve;

impl ConfigurationValue<i64> for MaxReserve {
    fn get(&self, _: &ConfigurationContext) -> i64 {
        max_reserve_ms()
    }

    fn set(&self, _: &ConfigurationContext, ms: i64) -> Result<(), RedisError> {
        MAX_RESERVE_MS.store(ms, Relaxed);
        applied(MAX_RESERVE_CONFIG);
        Ok(())
    }
}

/// Reads the `loadmodule` arguments (pairs of name and value) as defaults,
/// registers the configs with them, then loads config-file values.
pub fn register(ctx: *mut raw::RedisModuleCtx, args: &[&[u8]]) -> Result<(), String> {
    let defaults = Defaults::from_module_args(args)?;
    DEFAULT_ALGO.store(defaults.algo as u8, Relaxed);
    HIT_EVENTS.store(defaults.hit_events, Relaxed);
    MAX_WAITERS.store(defaults.max_waiters, Relaxed);
    MAX_RESERVE_MS.store(defaults.max_reserve_ms, Relaxed);
    // The config layer unwraps these pointers: an older server must get an
    // error here, not a panic there.
    // SAFETY: read at load, after Init filled the API table.
    let (Some(_), Some(_), Some(_), Some(load)) = (
        unsafe { raw::RedisModule_RegisterEnumConfig },
        unsafe { raw::RedisModule_RegisterBoolConfig },
        unsafe { raw::RedisModule_RegisterNumericConfig },
        unsafe { raw::RedisModule_LoadConfigs },
    ) else {
        return Err("this server lacks module configuration".into());
    };
    APPLIED.store(0, Relaxed);
    // The layer boxes each config's private data (24 bytes) and nothing
    // frees it: every load leaves these 48 bytes of the process's malloc.
    let module = Context::new(ctx);
    register_enum_configuration(
        &module,
        CONFIGS[ALGO_CONFIG],
        &DefaultAlgorithm,
        AlgoChoice(defaults.algo),
        ConfigurationFlags::DEFAULT,
        None,
    );
    register_bool_configuration(
        &module,
        CONFIGS[HIT_EVENTS_CONFIG],
        &HitEvents,
        defaults.hit_events,
        ConfigurationFlags::DEFAULT,
        None,
    );
    register_i64_configuration(
        &module,
        CONFIGS[MAX_WAITERS_CONFIG],
        &MaxWaiters,
        defaults.max_waiters,
        MAX_WAITERS_RANGE.0,
        MAX_WAITERS_RANGE.1,
        ConfigurationFlags::DEFAULT,
        None,
    );
    register_i64_configuration(
        &module,
        CONFIGS[MAX_RESERVE_CONFIG],
        &MaxReserve,
        defaults.max_reserve_ms,
        MAX_RESERVE_RANGE.0,
        MAX_RESERVE_RANGE.1,
        ConfigurationFlags::DEFAULT,
        None,
    );
    // SAFETY: the load's context, once every config is registered.
    if unsafe { load(ctx) } != raw::REDISMODULE_OK as i32 {
        return Err("loading ratelimit.* configuration failed".into());
    }
    let applied = APPLIED.load(Relaxed);
    for (i, name) in CONFIGS.iter().enumerate() {
        if applied & (1 << i) == 0 {
            return Err(format!("registering ratelimit.{name} failed"));
        }
    }
    Ok(())
}

/// The configs' defaults: built in, or given as module arguments.
struct Defaults {
    algo: Algo,
    hit_events: bool,
    max_waiters: i64,
    max_reserve_ms: i64,
}

/// The defaults when no module argument sets them.
const BUILT_IN: Defaults = Defaults {
    algo: Algo::Fixed,
    hit_events: true,
    max_waiters: 1000,
    max_reserve_ms: 60_000,
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
                b"max-waiters" => {
                    defaults.max_waiters = std::str::from_utf8(value)
                        .ok()
                        .and_then(|v| v.parse().ok())
                        .filter(|v| (MAX_WAITERS_RANGE.0..=MAX_WAITERS_RANGE.1).contains(v))
                        .ok_or("max-waiters must be an integer from 1 to 1000000")?;
                }
                b"max-reserve-ms" => {
                    defaults.max_reserve_ms = std::str::from_utf8(value)
                        .ok()
                        .and_then(|v| v.parse().ok())
                        .filter(|v| (MAX_RESERVE_RANGE.0..=MAX_RESERVE_RANGE.1).contains(v))
                        .ok_or("max-reserve-ms must be an integer from 0 to 86400000")?;
                }
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
