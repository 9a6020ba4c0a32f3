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
pub mod num;

// The server-facing layer.
mod commands;
mod registry;
mod stats;
mod store;

use redis_module::{raw, redis_module, Context, RedisString, Status};

use commands::{rl_admit, rl_limit, rl_ttl};
use registry::{Command, COUNTER_RO, COUNTER_RW, META_RO};

const COMMANDS: &[Command] = &[RL_ADMIT, RL_TTL, RL_LIMIT];

/// RL.ADMIT key [LIMIT max] [WINDOW ms] [META metakey] [COST n]
const RL_ADMIT: Command = Command {
    name: c"RL.ADMIT",
    handler: rl_admit,
    flags: c"write deny-oom fast",
    arity: -2,
    keys: &[COUNTER_RW, META_RO],
    summary: c"Counts a request against a fixed-window limit and answers whether it is admitted",
    complexity: c"O(1)",
};

/// RL.TTL key [LIMIT max] [META metakey]
const RL_TTL: Command = Command {
    name: c"RL.TTL",
    handler: rl_ttl,
    flags: c"readonly fast",
    arity: -2,
    keys: &[COUNTER_RO, META_RO],
    summary: c"Returns the back-off in ms when the limiter is at or over its limit, else 0",
    complexity: c"O(1)",
};

/// RL.LIMIT metakey
const RL_LIMIT: Command = Command {
    name: c"RL.LIMIT",
    handler: rl_limit,
    flags: c"readonly fast",
    arity: 2,
    keys: &[COUNTER_RO],
    summary: c"Returns the limit configured in field 'max' of a META hash, or 0",
    complexity: c"O(1)",
};

fn init(ctx: &Context, _args: &[RedisString]) -> Status {
    if let Err(missing) = store::check_api() {
        ctx.log_warning(&format!(
            "ratelimit: this server lacks {missing}; Valkey 8.0 or later is required"
        ));
        return Status::Err;
    }
    let raw_ctx = ctx.ctx;
    if let Some(set_options) = unsafe { raw::RedisModule_SetModuleOptions } {
        // Refusals and peeks must not touch WATCHed keys: we signal writes ourselves.
        unsafe {
            set_options(
                raw_ctx,
                raw::REDISMODULE_OPTION_NO_IMPLICIT_SIGNAL_MODIFIED as i32,
            )
        };
    }
    let acl_category = registry::add_acl_category(raw_ctx);
    if !acl_category {
        ctx.log_notice(
            "ratelimit: custom ACL categories unsupported; commands keep the built-in ones",
        );
    }
    if let Some(register_info) = unsafe { raw::RedisModule_RegisterInfoFunc } {
        unsafe { register_info(raw_ctx, Some(info)) };
    }
    for cmd in COMMANDS {
        if let Err(e) = registry::register(raw_ctx, cmd, acl_category) {
            ctx.log_warning(&format!("ratelimit: {e}"));
            return Status::Err;
        }
    }
    Status::Ok
}

extern "C" fn info(ctx: *mut raw::RedisModuleInfoCtx, _for_crash_report: i32) {
    stats::add_info(ctx);
}

// The module allocates nothing that outlives a call (all limiter state is
// plain server strings), so the system allocator serves, and it keeps the
// pure code usable from unit tests and fuzzers outside a server.
redis_module! {
    name: "ratelimit",
    version: 1,
    allocator: (std::alloc::System, std::alloc::System),
    data_types: [],
    init: init,
    commands: [],
}
