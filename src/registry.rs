//! Turns the command table of `lib.rs` into server registrations: the
//! command itself, its key-specs (for cluster routing, CROSSSLOT and ACL
//! key patterns), its docs and its ACL category.

use std::ffi::{CStr, CString};
use std::os::raw::c_int;
use std::ptr;

use redis_module::raw;

use crate::commands::Handler;

/// How a command reaches one of its keys.
#[derive(Clone, Copy)]
pub enum KeyAt {
    /// The argument at this position.
    Index(i32),
    /// The argument after this keyword, searched from position 2.
    AfterKeyword(&'static CStr),
    /// `numkeys` at position 1, then that many keys.
    NumKeys,
}

#[derive(Clone, Copy)]
pub enum Access {
    /// Read and updated in place.
    ReadWrite,
    ReadOnly,
}

#[derive(Clone, Copy)]
pub struct KeySpec {
    pub at: KeyAt,
    pub access: Access,
    /// The spec may miss keys: the server then asks the command (getkeys-api).
    pub incomplete: bool,
}

pub const COUNTER_RW: KeySpec = KeySpec {
    at: KeyAt::Index(1),
    access: Access::ReadWrite,
    incomplete: false,
};
pub const COUNTER_RO: KeySpec = KeySpec {
    at: KeyAt::Index(1),
    access: Access::ReadOnly,
    incomplete: false,
};
pub const META_RO: KeySpec = KeySpec {
    at: KeyAt::AfterKeyword(c"META"),
    access: Access::ReadOnly,
    incomplete: false,
};
pub const COUNTERS_RW: KeySpec = KeySpec {
    at: KeyAt::NumKeys,
    access: Access::ReadWrite,
    incomplete: false,
};
/// RL.ADMITALL may name several META hashes; the command reports them all.
pub const METAS_RO: KeySpec = KeySpec {
    at: KeyAt::AfterKeyword(c"META"),
    access: Access::ReadOnly,
    incomplete: true,
};

pub struct Command {
    pub name: &'static CStr,
    pub handler: Handler,
    pub flags: &'static CStr,
    /// Negative: at least that many arguments, command name included.
    pub arity: i32,
    pub keys: &'static [KeySpec],
    /// Legacy (first, last, step) key range; key-specs refine it.
    pub key_range: (i32, i32, i32),
    pub summary: &'static CStr,
    pub complexity: &'static CStr,
}

/// The ACL category every RL command belongs to.
pub const ACL_CATEGORY: &CStr = c"ratelimit";
const SINCE: &CStr = c"0.1.0";

/// Registers the ACL category, where the server supports custom ones.
pub fn add_acl_category(ctx: *mut raw::RedisModuleCtx) -> bool {
    match unsafe { raw::RedisModule_AddACLCategory } {
        Some(add) => unsafe { add(ctx, ACL_CATEGORY.as_ptr()) == raw::REDISMODULE_OK as c_int },
        None => false,
    }
}

pub fn register(
    ctx: *mut raw::RedisModuleCtx,
    cmd: &Command,
    with_acl_category: bool,
) -> Result<(), String> {
    let fail = |what: &str| format!("{}: {what} failed", cmd.name.to_string_lossy());
    let (Some(create), Some(get), Some(set_info)) = (
        unsafe { raw::RedisModule_CreateCommand },
        unsafe { raw::RedisModule_GetCommand },
        unsafe { raw::RedisModule_SetCommandInfo },
    ) else {
        return Err("the server lacks the command registration API".into());
    };
    let rc = unsafe {
        create(
            ctx,
            cmd.name.as_ptr(),
            Some(cmd.handler),
            cmd.flags.as_ptr(),
            cmd.key_range.0,
            cmd.key_range.1,
            cmd.key_range.2,
        )
    };
    if rc != raw::REDISMODULE_OK as c_int {
        return Err(fail("CreateCommand"));
    }
    let command = unsafe { get(ctx, cmd.name.as_ptr()) };
    if command.is_null() {
        return Err(fail("GetCommand"));
    }

    let mut specs: Vec<raw::RedisModuleCommandKeySpec> = cmd.keys.iter().map(key_spec).collect();
    specs.push(unsafe { std::mem::zeroed() }); // terminator
    let version = raw::RedisModuleCommandInfoVersion {
        version: 1,
        sizeof_historyentry: std::mem::size_of::<raw::RedisModuleCommandHistoryEntry>(),
        sizeof_keyspec: std::mem::size_of::<raw::RedisModuleCommandKeySpec>(),
        sizeof_arg: std::mem::size_of::<raw::RedisModuleCommandArg>(),
    };
    let info = raw::RedisModuleCommandInfo {
        version: &version,
        summary: cmd.summary.as_ptr(),
        complexity: cmd.complexity.as_ptr(),
        since: SINCE.as_ptr(),
        history: ptr::null_mut(),
        tips: ptr::null(),
        arity: cmd.arity,
        key_specs: specs.as_mut_ptr(),
        args: ptr::null_mut(),
    };
    if unsafe { set_info(command, &info) } != raw::REDISMODULE_OK as c_int {
        return Err(fail("SetCommandInfo"));
    }
    if with_acl_category {
        if let Some(set_acl) = unsafe { raw::RedisModule_SetCommandACLCategories } {
            let categories = CString::from(ACL_CATEGORY);
            if unsafe { set_acl(command, categories.as_ptr()) } != raw::REDISMODULE_OK as c_int {
                return Err(fail("SetCommandACLCategories"));
            }
        }
    }
    Ok(())
}

fn key_spec(spec: &KeySpec) -> raw::RedisModuleCommandKeySpec {
    let mut out: raw::RedisModuleCommandKeySpec = unsafe { std::mem::zeroed() };
    let incomplete = match spec.incomplete {
        true => raw::REDISMODULE_CMD_KEY_INCOMPLETE,
        false => 0,
    };
    out.flags = u64::from(incomplete)
        | u64::from(match spec.access {
            Access::ReadWrite => {
                raw::REDISMODULE_CMD_KEY_RW
                    | raw::REDISMODULE_CMD_KEY_ACCESS
                    | raw::REDISMODULE_CMD_KEY_UPDATE
            }
            Access::ReadOnly => raw::REDISMODULE_CMD_KEY_RO | raw::REDISMODULE_CMD_KEY_ACCESS,
        });
    match spec.at {
        KeyAt::Index(pos) => {
            out.begin_search_type =
                raw::RedisModuleKeySpecBeginSearchType_REDISMODULE_KSPEC_BS_INDEX;
            out.bs.index.pos = pos;
        }
        KeyAt::NumKeys => {
            out.begin_search_type =
                raw::RedisModuleKeySpecBeginSearchType_REDISMODULE_KSPEC_BS_INDEX;
            out.bs.index.pos = 1;
            out.find_keys_type = raw::RedisModuleKeySpecFindKeysType_REDISMODULE_KSPEC_FK_KEYNUM;
            out.fk.keynum.keynumidx = 0;
            out.fk.keynum.firstkey = 1;
            out.fk.keynum.keystep = 1;
            return out;
        }
        KeyAt::AfterKeyword(word) => {
            out.begin_search_type =
                raw::RedisModuleKeySpecBeginSearchType_REDISMODULE_KSPEC_BS_KEYWORD;
            out.bs.keyword.keyword = word.as_ptr();
            out.bs.keyword.startfrom = 2;
        }
    }
    out.find_keys_type = raw::RedisModuleKeySpecFindKeysType_REDISMODULE_KSPEC_FK_RANGE;
    out.fk.range.lastkey = 0;
    out.fk.range.keystep = 1;
    out.fk.range.limit = 0;
    out
}
