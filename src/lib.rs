//! valkey-ratelimit: native rate limiting for Valkey.
//!
//! This file is the registration table: one entry per command, with its
//! syntax in the doc comment. The algorithms live in `algo`, argument
//! parsing in `args`, handlers in `commands`, and all keyspace access in
//! `store`.

// Pure code, public for tests and fuzzing.
pub mod algo;
pub mod args;
pub mod error;
pub mod keyword;
pub mod num;

// The server-facing layer.
mod commands;
mod config;
mod registry;
mod stats;
mod store;

use std::ffi::{CStr, CString};
use std::os::raw::c_int;

use redis_module::raw;

use commands::{rl_admit, rl_admitall, rl_limit, rl_refund, rl_reset, rl_throttle, rl_ttl};
use registry::{
    Arg, ArgKind, Command, COUNTERS_RW, COUNTER_RM, COUNTER_RO, COUNTER_RW, METAS_RO, META_RO,
};

const COMMANDS: &[Command] = &[
    RL_ADMIT,
    RL_ADMITALL,
    RL_TTL,
    RL_LIMIT,
    RL_REFUND,
    RL_RESET,
    RL_THROTTLE,
];

/// The commands' names, for their `cmdstat_` fields in `INFO commandstats`.
pub(crate) const COMMAND_NAMES: [&CStr; COMMANDS.len()] = {
    let mut names = [c""; COMMANDS.len()];
    let mut i = 0;
    while i < names.len() {
        names[i] = COMMANDS[i].name;
        i += 1;
    }
    names
};

const ALGORITHMS: &[Arg] = &[
    Arg::word(c"fixed"),
    Arg::word(c"sliding"),
    Arg::word(c"token"),
    Arg::word(c"gcra"),
    Arg::word(c"leaky"),
];

/// The policy options every limiter command takes; META is key-spec 1.
const POLICY_ARGS: [Arg; 5] = [
    Arg::option(c"ALGO", c"algorithm", ArgKind::OneOf(ALGORITHMS)),
    Arg::option(c"LIMIT", c"max", ArgKind::Integer),
    Arg::option(c"WINDOW", c"ms", ArgKind::Integer),
    Arg::option(c"BURST", c"n", ArgKind::Integer),
    Arg::option(c"META", c"metakey", ArgKind::Key(1)),
];
const COST_ARG: Arg = Arg::option(c"COST", c"n", ArgKind::Integer);

const LIMITER_ARGS: &[Arg] = &[
    Arg::key(c"key", 0),
    POLICY_ARGS[0],
    POLICY_ARGS[1],
    POLICY_ARGS[2],
    POLICY_ARGS[3],
    POLICY_ARGS[4],
    COST_ARG,
];
const TTL_ARGS: &[Arg] = LIMITER_ARGS.split_at(6).0;

/// RL.ADMIT key [ALGO name] [LIMIT max] [WINDOW ms] [BURST n] [META metakey] [COST n]
const RL_ADMIT: Command = Command {
    name: c"RL.ADMIT",
    handler: rl_admit,
    flags: c"write deny-oom fast",
    arity: -2,
    keys: &[COUNTER_RW, META_RO],
    key_range: (1, 1, 1),
    args: LIMITER_ARGS,
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
    complexity: c"O(N) where N is the number of limiters",
};

/// RL.TTL key [ALGO name] [LIMIT max] [WINDOW ms] [BURST n] [META metakey]
const RL_TTL: Command = Command {
    name: c"RL.TTL",
    handler: rl_ttl,
    flags: c"readonly fast",
    arity: -2,
    keys: &[COUNTER_RO, META_RO],
    key_range: (1, 1, 1),
    args: TTL_ARGS,
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
    args: LIMITER_ARGS,
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

/// Called by the server on `MODULE LOAD` / `loadmodule`.
///
/// # Safety
/// Only the server calls this, with a valid context.
#[no_mangle]
pub unsafe extern "C" fn RedisModule_OnLoad(
    ctx: *mut raw::RedisModuleCtx,
    argv: *mut *mut raw::RedisModuleString,
    argc: c_int,
) -> c_int {
    let ok = raw::REDISMODULE_OK as c_int;
    let err = raw::REDISMODULE_ERR as c_int;
    if unsafe { raw::Export_RedisModule_Init(ctx, c"ratelimit".as_ptr(), MODULE_VERSION, 1) } != ok
    {
        return err;
    }
    if let Err(missing) = store::check_api() {
        log(
            ctx,
            c"warning",
            &format!(
                "this server lacks {missing}; Valkey 7.2 or later is required (tested: 8.1, 9.1)"
            ),
        );
        return err;
    }
    if let Some(set_options) = unsafe { raw::RedisModule_SetModuleOptions } {
        unsafe { set_options(ctx, MODULE_OPTIONS) };
    }
    // From here on, a failed load frees what the load made: the server
    // closes the library and would lose it.
    let fail = || {
        store::free_shared_strings();
        err
    };
    if let Err(failed) = store::init_shared_strings() {
        log(ctx, c"warning", &format!("{failed} failed at load"));
        return fail();
    }
    let args: Vec<&[u8]> = match (argv.is_null(), usize::try_from(argc)) {
        (false, Ok(n)) => unsafe { std::slice::from_raw_parts(argv, n) }
            .iter()
            .map(|&s| store::arg_bytes(s))
            .collect(),
        _ => Vec::new(),
    };
    if let Err(e) = config::register(ctx, &args) {
        log(ctx, c"warning", &e);
        return fail();
    }
    stats::init();
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
    if let Some(register_info) = unsafe { raw::RedisModule_RegisterInfoFunc } {
        unsafe { register_info(ctx, Some(info)) };
    }
    ok
}

/// Called by the server on `MODULE UNLOAD` (and at shutdown): frees what
/// loading made, so that unloading and loading again leaks nothing. Refused
/// from inside one of our own calls.
///
/// # Safety
/// Only the server calls this.
#[no_mangle]
pub unsafe extern "C" fn RedisModule_OnUnload(_ctx: *mut raw::RedisModuleCtx) -> c_int {
    if commands::in_a_call() {
        return raw::REDISMODULE_ERR as c_int;
    }
    store::free_shared_strings();
    raw::REDISMODULE_OK as c_int
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
const MODULE_VERSION: c_int = 100;

extern "C" fn info(ctx: *mut raw::RedisModuleInfoCtx, for_crash_report: c_int) {
    // A crash report asks the server nothing more.
    if for_crash_report == 0 {
        stats::settle_reset();
    }
    stats::add_info(ctx);
}

fn log(ctx: *mut raw::RedisModuleCtx, level: &CStr, message: &str) {
    let Some(log) = (unsafe { raw::RedisModule_Log }) else {
        return;
    };
    if let Ok(text) = CString::new(format!("ratelimit: {message}")) {
        unsafe { log(ctx, level.as_ptr(), c"%s".as_ptr(), text.as_ptr()) };
    }
}
