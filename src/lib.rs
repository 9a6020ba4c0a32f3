//! valkey-ratelimit: native rate limiting for Valkey.
//!
//! This file is the registration table: one entry per command, with its
//! syntax in the doc comment, and the module's load and unload. A call
//! flows one way: `entry` (the FFI boundary) -> `commands` -> `args` (the
//! grammar) -> `resolve` (META) -> `algo` (pure decisions) -> `plan` (pure
//! effects) and `receipt` (pure: events, INFO counters) -> `store`
//! (keyspace, replication, events), `stats` and `reply`.
//! Raw FFI for load: `redis_module!` decodes each command's arguments per
//! call, takes key-specs and docs only from `#[command]` attributes (not
//! this table), and its `ModuleOptions` lacks Valkey's option bits.

// Pure code, public for tests and fuzzing.
pub mod algo;
pub mod args;
pub mod error;
pub mod keyword;
pub mod num;
pub mod plan;
pub mod receipt;
pub mod time;

// The server-facing layer.
mod block;
mod clock;
mod commands;
mod config;
mod entry;
mod ffi;
mod getkeys;
mod registry;
mod reply;
mod resolve;
mod stats;
mod store;

use std::ffi::{CStr, CString};
use std::os::raw::c_int;

use redis_module::{raw, InfoContext};

use args::{Opt, ADMIT, LEASE, POLICY};
use entry::{
    rl_acquire, rl_acquire_wake, rl_admit, rl_admit_wake, rl_admitall, rl_extend, rl_inflight,
    rl_limit, rl_refund, rl_release, rl_reset, rl_throttle, rl_ttl,
};
use ffi::{ERR, OK};
use registry::{
    option_args, Arg, ArgKind, Command, COUNTERS_RW, COUNTER_RM, COUNTER_RO, COUNTER_RW,
    LEASE_META_RO, METAS_RO, META_RO,
};

const COMMANDS: &[Command] = &[
    RL_ADMIT,
    RL_ADMITALL,
    RL_TTL,
    RL_LIMIT,
    RL_REFUND,
    RL_RESET,
    RL_THROTTLE,
    RL_ACQUIRE,
    RL_RELEASE,
    RL_EXTEND,
    RL_INFLIGHT,
];

/// The policy options every limiter command takes; META is key-spec 1.
const POLICY_ARGS: [Arg; POLICY.len()] = option_args(POLICY, 1);
const COST_ARG: Arg = option_args::<1>(&[Opt::Cost], 1)[0];

/// RL.TTL's arguments: the key and the policy options.
const TTL_ARGS: [Arg; POLICY.len() + 1] = {
    let mut args = [Arg::key(c"key", 0); POLICY.len() + 1];
    let mut i = 0;
    while i < POLICY.len() {
        args[i + 1] = POLICY_ARGS[i];
        i += 1;
    }
    args
};
/// RL.ADMIT's and RL.REFUND's: RL.TTL's, then COST.
const LIMITER_ARGS: [Arg; TTL_ARGS.len() + 1] = {
    let mut args = [COST_ARG; TTL_ARGS.len() + 1];
    let mut i = 0;
    while i < TTL_ARGS.len() {
        args[i] = TTL_ARGS[i];
        i += 1;
    }
    args
};

/// RL.REFUND's: RL.TTL's, then COST and AT.
const REFUND_ARGS: [Arg; TTL_ARGS.len() + 2] = {
    let at = option_args::<1>(&[Opt::At], 1)[0];
    let mut args = [at; TTL_ARGS.len() + 2];
    let mut i = 0;
    while i < LIMITER_ARGS.len() {
        args[i] = LIMITER_ARGS[i];
        i += 1;
    }
    args
};

/// RL.ADMIT's: the policy options and COST, then BLOCK, FORCE and RESERVE
/// (ADMIT's words past the limiters').
const ADMIT_ARGS: [Arg; TTL_ARGS.len() + ADMIT.len() - POLICY.len()] = {
    let own = option_args::<{ ADMIT.len() }>(ADMIT, 1);
    let mut args = [COST_ARG; TTL_ARGS.len() + ADMIT.len() - POLICY.len()];
    let mut i = 0;
    while i < TTL_ARGS.len() {
        args[i] = TTL_ARGS[i];
        i += 1;
    }
    while i < args.len() {
        args[i] = own[i - TTL_ARGS.len() + POLICY.len()];
        i += 1;
    }
    args
};

/// RL.ADMIT key [policy options] [COST n] [BLOCK timeout_ms] [FORCE] [RESERVE max_ms]
const RL_ADMIT: Command = Command {
    name: c"RL.ADMIT",
    handler: rl_admit,
    flags: c"write deny-oom fast blocking",
    arity: -2,
    keys: &[COUNTER_RW, META_RO],
    key_range: (1, 1, 1),
    args: &ADMIT_ARGS,
    summary: c"Counts a request against a limiter and answers whether it is admitted",
    complexity: c"O(1)",
};

/// RL.ADMITALL numkeys key [key ...] [COST n] POLICY [ALGO name] [LIMIT max] [WINDOW ms] [BURST n] [META metakey] [POLICY ...]
const RL_ADMITALL: Command = Command {
    name: c"RL.ADMITALL",
    handler: rl_admitall,
    flags: c"write deny-oom",
    arity: -4,
    keys: &[COUNTERS_RW, METAS_RO],
    key_range: (0, 0, 0),
    args: &[
        Arg::int(c"numkeys"),
        Arg::key(c"key", 0).multiple(),
        COST_ARG,
        Arg::option(c"POLICY", c"policy", ArgKind::Block(&POLICY_ARGS))
            .required()
            .multiple(),
    ],
    summary: c"Admits a request through several limiters at once, or consumes none of them",
    complexity: c"O(N) where N is the number of limiters; at most 256 arguments in all: 42 limiters with inline LIMIT and WINDOW, 63 with META",
};

/// RL.TTL key [ALGO name] [LIMIT max] [WINDOW ms] [BURST n] [META metakey]
const RL_TTL: Command = Command {
    name: c"RL.TTL",
    handler: rl_ttl,
    flags: c"readonly fast",
    arity: -2,
    keys: &[COUNTER_RO, META_RO],
    key_range: (1, 1, 1),
    args: &TTL_ARGS,
    summary: c"Returns the back-off in ms a request would be told now, 0 when it would pass",
    complexity: c"O(1)",
};

/// RL.LIMIT metakey
const RL_LIMIT: Command = Command {
    name: c"RL.LIMIT",
    handler: rl_limit,
    flags: c"readonly fast",
    arity: 2,
    keys: &[COUNTER_RO],
    key_range: (1, 1, 1),
    args: &[Arg::key(c"metakey", 0)],
    summary: c"Returns the limit configured in field 'max' of a META hash, or 0",
    complexity: c"O(1)",
};

/// RL.REFUND key [ALGO name] [LIMIT max] [WINDOW ms] [BURST n] [META metakey] [COST n]
const RL_REFUND: Command = Command {
    name: c"RL.REFUND",
    handler: rl_refund,
    flags: c"write deny-oom fast",
    arity: -2,
    keys: &[COUNTER_RW, META_RO],
    key_range: (1, 1, 1),
    args: &REFUND_ARGS,
    summary: c"Gives back consumption to a limiter, never below empty",
    complexity: c"O(1)",
};

/// RL.RESET key
const RL_RESET: Command = Command {
    name: c"RL.RESET",
    handler: rl_reset,
    flags: c"write fast",
    arity: 2,
    keys: &[COUNTER_RM],
    key_range: (1, 1, 1),
    args: &[Arg::key(c"key", 0)],
    summary: c"Clears a limiter's state",
    complexity: c"O(1)",
};

/// RL.THROTTLE key max_burst count_per_period period [quantity]
const RL_THROTTLE: Command = Command {
    name: c"RL.THROTTLE",
    handler: rl_throttle,
    flags: c"write deny-oom fast",
    arity: -5,
    keys: &[COUNTER_RW],
    key_range: (1, 1, 1),
    args: &[
        Arg::key(c"key", 0),
        Arg::int(c"max_burst"),
        Arg::int(c"count_per_period"),
        Arg::int(c"period"),
        Arg::int(c"quantity").optional(),
    ],
    summary: c"A drop-in for redis-cell's CL.THROTTLE (GCRA), exact and replica-safe",
    complexity: c"O(1)",
};

/// RL.ACQUIRE's arguments: the key, then its options (META is key-spec 1).
const ACQUIRE_ARGS: [Arg; LEASE.len() + 1] = {
    let options: [Arg; LEASE.len()] = option_args(LEASE, 1);
    let mut args = [Arg::key(c"key", 0); LEASE.len() + 1];
    let mut i = 0;
    while i < options.len() {
        args[i + 1] = options[i];
        i += 1;
    }
    args
};
const LEASE_ID: Arg = Arg::string(c"lease-id");

/// RL.ACQUIRE key [LIMIT n] [TTL ms] [META metakey] [ID lease-id] [BLOCK timeout_ms]
const RL_ACQUIRE: Command = Command {
    name: c"RL.ACQUIRE",
    handler: rl_acquire,
    flags: c"write deny-oom fast blocking",
    arity: -2,
    keys: &[COUNTER_RW, LEASE_META_RO],
    key_range: (1, 1, 1),
    args: &ACQUIRE_ARGS,
    summary:
        c"Takes a lease on one of a limited number of slots, or renews one, until its TTL ends",
    complexity: c"O(log(N)) where N is the number of leases the key holds, plus at most 128 expired leases reclaimed",
};

/// RL.RELEASE key lease-id
const RL_RELEASE: Command = Command {
    name: c"RL.RELEASE",
    handler: rl_release,
    flags: c"write fast",
    arity: 3,
    keys: &[COUNTER_RW],
    key_range: (1, 1, 1),
    args: &[Arg::key(c"key", 0), LEASE_ID],
    summary: c"Ends a live lease, freeing its slot; 0 when it is no longer live",
    complexity: c"O(log(N)) where N is the number of leases the key holds, plus at most 128 expired leases reclaimed",
};

/// RL.EXTEND key lease-id TTL ms
const RL_EXTEND: Command = Command {
    name: c"RL.EXTEND",
    handler: rl_extend,
    flags: c"write fast",
    arity: 5,
    keys: &[COUNTER_RW],
    key_range: (1, 1, 1),
    args: &[
        Arg::key(c"key", 0),
        LEASE_ID,
        option_args::<1>(&[Opt::Ttl], 0)[0].required(),
    ],
    summary:
        c"Moves a live lease's deadline to now + TTL (a heartbeat); 0 when it is no longer live",
    complexity: c"O(log(N)) where N is the number of leases the key holds, plus at most 128 expired leases reclaimed",
};

/// RL.INFLIGHT key
const RL_INFLIGHT: Command = Command {
    name: c"RL.INFLIGHT",
    handler: rl_inflight,
    flags: c"readonly fast",
    arity: 2,
    keys: &[COUNTER_RO],
    key_range: (1, 1, 1),
    args: &[Arg::key(c"key", 0)],
    summary: c"Returns the number of live leases",
    complexity: c"O(log(N)) where N is the number of leases the key holds",
};

/// Called by the server on `MODULE LOAD` / `loadmodule`.
///
/// # Safety
/// Only the server calls this, with a valid context and `argc` arguments.
#[no_mangle]
pub unsafe extern "C" fn RedisModule_OnLoad(
    ctx: *mut raw::RedisModuleCtx,
    argv: *mut *mut raw::RedisModuleString,
    argc: c_int,
) -> c_int {
    // SAFETY: the server's own context; Init fills the API table.
    if unsafe { raw::Export_RedisModule_Init(ctx, c"ratelimit".as_ptr(), MODULE_VERSION, 1) } != OK
    {
        return ERR;
    }
    if let Err(missing) = ffi::check_api() {
        log(
            ctx,
            c"warning",
            &format!(
                "this server lacks {missing}; Valkey 7.2 or later is required (tested: 8.1, 9.1)"
            ),
        );
        return ERR;
    }
    // SAFETY: the table is filled (Init above).
    if let Some(set_options) = unsafe { raw::RedisModule_SetModuleOptions } {
        // SAFETY: the load's context; options are flags.
        unsafe { set_options(ctx, MODULE_OPTIONS) };
    }
    // From here on, a failed load frees what the load made: the server
    // closes the library and would lose it.
    let fail = || {
        store::free_shared_strings();
        ERR
    };
    if let Err(failed) = store::init_shared_strings() {
        log(ctx, c"warning", &format!("{failed} failed at load"));
        return fail();
    }
    let argv: &[ffi::Str] = match (argv.is_null(), usize::try_from(argc)) {
        // SAFETY: the server passes `argc` module arguments at `argv`, alive
        // for the whole load; the slice does not outlive it.
        (false, Ok(n)) => unsafe { std::slice::from_raw_parts(argv, n) },
        _ => &[],
    };
    let args: Vec<&[u8]> = argv.iter().map(ffi::str_bytes).collect();
    if let Err(e) = config::register(ctx, &args) {
        log(ctx, c"warning", &e);
        return fail();
    }
    stats::init();
    block::init(rl_admit_wake, rl_acquire_wake);
    commands::lease::seed_nonces(load_micros());
    let acl_category = registry::add_acl_category(ctx);
    if !acl_category {
        log(
            ctx,
            c"notice",
            "custom ACL categories unsupported; commands keep the built-in ones",
        );
    }
    let cluster = registry::is_cluster(ctx);
    for cmd in COMMANDS {
        if let Err(e) = registry::register(ctx, cmd, acl_category, cluster) {
            log(ctx, c"warning", &e);
            return fail();
        }
    }
    // The INFO builder unwraps the two functions it calls: the callback
    // goes in only where they exist.
    // SAFETY: the table is filled (Init above).
    let info_api = unsafe {
        (
            raw::RedisModule_RegisterInfoFunc,
            raw::RedisModule_InfoAddSection,
            raw::RedisModule_InfoAddFieldULongLong,
        )
    };
    if let (Some(register_info), Some(_), Some(_)) = info_api {
        // SAFETY: the load's context and a callback that lives as long as
        // the library.
        unsafe { register_info(ctx, Some(info)) };
    }
    OK
}

/// Called by the server on `MODULE UNLOAD` (and at shutdown): frees what
/// loading made, so that unloading and loading again leaks nothing but the
/// config layer's 48 bytes (see `config::register`). Refused from inside
/// one of our own calls.
///
/// # Safety
/// Only the server calls this.
#[no_mangle]
pub unsafe extern "C" fn RedisModule_OnUnload(_ctx: *mut raw::RedisModuleCtx) -> c_int {
    if entry::in_a_call() {
        return ERR;
    }
    store::free_shared_strings();
    OK
}

/// Refusals and peeks must not touch WATCHed keys, so writes are signalled
/// explicitly. Our replicated effects (SET ... PXAT, PEXPIREAT, DEL) are
/// well-formed, so the server may skip validating them (Valkey 9). All
/// state is plain keys, so Valkey 9's atomic slot migration moves it whole.
/// Servers that do not know an option ignore it.
const MODULE_OPTIONS: c_int = raw::REDISMODULE_OPTION_NO_IMPLICIT_SIGNAL_MODIFIED as c_int
    | OPTIONS_SKIP_COMMAND_VALIDATION
    | OPTIONS_HANDLE_ATOMIC_SLOT_MIGRATION;
/// `VALKEYMODULE_OPTIONS_SKIP_COMMAND_VALIDATION` (not in the Redis header).
const OPTIONS_SKIP_COMMAND_VALIDATION: c_int = 1 << 4;
/// `VALKEYMODULE_OPTIONS_HANDLE_ATOMIC_SLOT_MIGRATION` (not in the Redis header).
const OPTIONS_HANDLE_ATOMIC_SLOT_MIGRATION: c_int = 1 << 5;

/// Major * 10000 + minor * 100 + patch, as `MODULE LIST` shows it.
const MODULE_VERSION: c_int = module_version(env!("CARGO_PKG_VERSION").as_bytes());

/// "1.2.3" (a pre-release or build suffix ignored) as 10203.
const fn module_version(version: &[u8]) -> c_int {
    let mut parts = [0 as c_int; 3];
    let (mut part, mut i) = (0, 0);
    while i < version.len() && part < 3 {
        match version[i] {
            b'.' => part += 1,
            digit @ b'0'..=b'9' => parts[part] = parts[part] * 10 + (digit - b'0') as c_int,
            _ => break,
        }
        i += 1;
    }
    parts[0] * 10000 + parts[1] * 100 + parts[2]
}

/// The wall clock in µs at load, to seed generated lease ids.
fn load_micros() -> u64 {
    let since_epoch = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH);
    since_epoch.map_or(0, |d| d.as_micros() as u64)
}

extern "C" fn info(ctx: *mut raw::RedisModuleInfoCtx, _for_crash_report: c_int) {
    // INFO has no error reply: a failure can only leave fields out.
    let _ = stats::add_info(&InfoContext::new(ctx));
}

fn log(ctx: *mut raw::RedisModuleCtx, level: &CStr, message: &str) {
    // SAFETY: read after Init filled the table.
    let Some(log) = (unsafe { raw::RedisModule_Log }) else {
        return;
    };
    if let Ok(text) = CString::new(format!("ratelimit: {message}")) {
        // SAFETY: "%s" with one C string.
        unsafe { log(ctx, level.as_ptr(), c"%s".as_ptr(), text.as_ptr()) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_version_comes_from_cargo() {
        assert_eq!(module_version(b"0.1.0"), 100);
        assert_eq!(module_version(b"1.2.30-rc.1"), 10230);
    }
}
