//! The getkeys-api protocol: whether the server only asks where a call's
//! keys are (cluster routing, ACL, COMMAND GETKEYS), and the answer, one
//! key at a time. Where the keys are is each command's grammar (`args`).

use std::os::raw::c_int;

use redis_module::raw;

use crate::ffi::{api, str_bytes, Ctx, Str};

/// Where a command's keys are: `key(position, read_only)` for each.
pub type Keys = fn(&[&[u8]], &mut dyn FnMut(usize, bool));

/// True when the server only asks which arguments are keys.
pub fn is_request(ctx: Ctx) -> bool {
    // SAFETY: the running call's context.
    unsafe { api!(RedisModule_IsKeysPositionRequest)(ctx) != 0 }
}

/// Answers a getkeys request for a call of `argv`, whose keys `keys` finds.
pub fn answer(ctx: Ctx, argv: &[Str], keys: Keys) {
    let args: Vec<&[u8]> = argv.iter().map(str_bytes).collect();
    keys(&args, &mut |pos, read_only| key_at(ctx, pos, read_only));
}

/// The argument at `pos` is a key, read-only or read-write.
fn key_at(ctx: Ctx, pos: usize, read_only: bool) {
    let flags = match read_only {
        true => raw::REDISMODULE_CMD_KEY_RO | raw::REDISMODULE_CMD_KEY_ACCESS,
        false => {
            raw::REDISMODULE_CMD_KEY_RW
                | raw::REDISMODULE_CMD_KEY_ACCESS
                | raw::REDISMODULE_CMD_KEY_UPDATE
        }
    };
    // SAFETY: only called while answering a getkeys request, with a
    // position inside its arguments.
    unsafe { api!(RedisModule_KeyAtPosWithFlags)(ctx, pos as c_int, flags as c_int) };
}
