//! Turns the command table of `lib.rs` into server registrations: the
//! command itself, its key-specs (for cluster routing, CROSSSLOT and ACL
//! key patterns), its docs (argument trees derived from the vocabulary
//! tables) and its ACL category. Raw FFI: redis-module sets key-specs and
//! docs only for the `#[command]` functions in its link-time list.

use std::ffi::{CStr, CString};
use std::os::raw::c_int;
use std::ptr;

use redis_module::raw;

use crate::ffi::Handler;

mod docs;
use docs::arg_array;
pub use docs::{option_args, Arg, ArgKind};

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
    /// Deleted, as DEL does: an ACL user with write-only access may.
    Remove,
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
pub const COUNTER_RM: KeySpec = KeySpec {
    at: KeyAt::Index(1),
    access: Access::Remove,
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
/// RL.ACQUIRE's META hash: a lease id may itself be the word `META`
/// (`ID META META m`), which a keyword search would take for the keyword,
/// so the command reports its keys itself (for ACL too).
pub const LEASE_META_RO: KeySpec = KeySpec {
    at: KeyAt::AfterKeyword(c"META"),
    access: Access::ReadOnly,
    incomplete: true,
};
/// A lease key's ticket key (QUEUE): a lease id may be the word `QUEUE`,
/// so the command reports its keys itself.
pub const TICKETS_RW: KeySpec = KeySpec {
    at: KeyAt::AfterKeyword(c"QUEUE"),
    access: Access::ReadWrite,
    incomplete: true,
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
    /// Server flags; `getkeys-api` is added where the key-specs need it.
    pub flags: &'static CStr,
    /// Negative: at least that many arguments, command name included.
    pub arity: i32,
    pub keys: &'static [KeySpec],
    /// Legacy (first, last, step) key range; key-specs refine it.
    pub key_range: (i32, i32, i32),
    pub args: &'static [Arg],
    pub summary: &'static CStr,
    pub complexity: &'static CStr,
}

/// The ACL category every RL command belongs to.
pub const ACL_CATEGORY: &CStr = c"ratelimit";
/// Cargo.toml's version: every command is as old as this release.
const SINCE: &CStr =
    match CStr::from_bytes_with_nul(concat!(env!("CARGO_PKG_VERSION"), "\0").as_bytes()) {
        Ok(version) => version,
        Err(_) => panic!("the package version has no NUL"),
    };

/// Registers the ACL category, where the server supports custom ones. The
/// server keeps a category after MODULE UNLOAD, so on a reload it already
/// exists, and is just as usable. Called from OnLoad, the only EBUSY the
/// server gives is "already exists".
pub fn add_acl_category(ctx: *mut raw::RedisModuleCtx) -> bool {
    // SAFETY: read at load, after Init filled the API table.
    let Some(add) = (unsafe { raw::RedisModule_AddACLCategory }) else {
        return false;
    };
    // SAFETY: the load's context and a C string.
    let added = unsafe { add(ctx, ACL_CATEGORY.as_ptr()) } == raw::REDISMODULE_OK as c_int;
    let errno = std::io::Error::last_os_error().raw_os_error();
    added || matches!(errno, Some(libc::EBUSY | libc::EEXIST))
}

/// Whether the server must ask the command itself where its keys are
/// (getkeys-api). ACL and COMMAND GETKEYS read complete key-specs, but
/// cluster routing reads only the legacy (first, last, step) range, so a
/// keyword key needs the callback in cluster mode. In standalone mode the
/// callback is skipped: the server asks for keys before every call.
fn needs_getkeys_api(cmd: &Command, cluster: bool) -> bool {
    cmd.keys
        .iter()
        .any(|spec| spec.incomplete || (cluster && matches!(spec.at, KeyAt::AfterKeyword(_))))
}

pub fn is_cluster(ctx: *mut raw::RedisModuleCtx) -> bool {
    // SAFETY: read after Init filled the API table; called with the load's
    // context.
    let flags = unsafe { raw::RedisModule_GetContextFlags }.map_or(0, |f| unsafe { f(ctx) });
    flags & raw::REDISMODULE_CTX_FLAGS_CLUSTER as c_int != 0
}

pub fn register(
    ctx: *mut raw::RedisModuleCtx,
    cmd: &Command,
    with_acl_category: bool,
    cluster: bool,
) -> Result<(), String> {
    let fail = |what: &str| format!("{}: {what} failed", cmd.name.to_string_lossy());
    let mut flags = cmd.flags.to_bytes().to_vec();
    if needs_getkeys_api(cmd, cluster) {
        flags.extend_from_slice(b" getkeys-api");
    }
    let Ok(flags) = CString::new(flags) else {
        return Err(fail("flags"));
    };
    // SAFETY: read at load, after Init filled the API table.
    let (Some(create), Some(get), Some(set_info)) = (
        unsafe { raw::RedisModule_CreateCommand },
        unsafe { raw::RedisModule_GetCommand },
        unsafe { raw::RedisModule_SetCommandInfo },
    ) else {
        return Err("the server lacks the command registration API".into());
    };
    // SAFETY: the load's context, C strings, and a handler that lives as
    // long as the library.
    let rc = unsafe {
        create(
            ctx,
            cmd.name.as_ptr(),
            Some(cmd.handler),
            flags.as_ptr(),
            cmd.key_range.0,
            cmd.key_range.1,
            cmd.key_range.2,
        )
    };
    if rc != raw::REDISMODULE_OK as c_int {
        return Err(fail("CreateCommand"));
    }
    // SAFETY: the load's context and a C string.
    let command = unsafe { get(ctx, cmd.name.as_ptr()) };
    if command.is_null() {
        return Err(fail("GetCommand"));
    }

    let mut specs: Vec<raw::RedisModuleCommandKeySpec> = cmd.keys.iter().map(key_spec).collect();
    // SAFETY: a plain C struct of integers, pointers and unions, for which
    // all zeroes is valid: the terminator the server looks for.
    specs.push(unsafe { std::mem::zeroed() });
    let version = raw::RedisModuleCommandInfoVersion {
        version: 1,
        sizeof_historyentry: std::mem::size_of::<raw::RedisModuleCommandHistoryEntry>(),
        sizeof_keyspec: std::mem::size_of::<raw::RedisModuleCommandKeySpec>(),
        sizeof_arg: std::mem::size_of::<raw::RedisModuleCommandArg>(),
    };
    let mut arrays = Vec::new();
    let args = arg_array(cmd.args, &mut arrays);
    let info = raw::RedisModuleCommandInfo {
        version: &version,
        summary: cmd.summary.as_ptr(),
        complexity: cmd.complexity.as_ptr(),
        since: SINCE.as_ptr(),
        history: ptr::null_mut(),
        tips: ptr::null(),
        arity: cmd.arity,
        key_specs: specs.as_mut_ptr(),
        args,
    };
    // SAFETY: a command we just created; every pointer in `info` (specs,
    // the argument arrays in `arrays`, C strings) outlives the call, and
    // the server copies what it keeps.
    if unsafe { set_info(command, &info) } != raw::REDISMODULE_OK as c_int {
        return Err(fail("SetCommandInfo"));
    }
    // SAFETY: read at load, after Init filled the API table.
    if let Some(set_acl) = unsafe { raw::RedisModule_SetCommandACLCategories } {
        let Ok(categories) = CString::new(acl_categories(cmd.flags, with_acl_category)) else {
            return Err(fail("ACL categories"));
        };
        // SAFETY: a command we just created, and a C string.
        if unsafe { set_acl(command, categories.as_ptr()) } != raw::REDISMODULE_OK as c_int {
            return Err(fail("SetCommandACLCategories"));
        }
    }
    Ok(())
}

/// The ACL categories of a command with server flags `flags`: the ones the
/// server gives its own commands by their flags (`@write`, `@read`, `@fast`,
/// else `@slow`), which it does not give module commands, so that rules such
/// as `+@all -@write` or `+@read` cover ours as they cover SET and GET; plus
/// `@ratelimit` where the server supports custom categories.
fn acl_categories(flags: &CStr, with_acl_category: bool) -> String {
    let has = |flag: &str| {
        flags
            .to_bytes()
            .split(|&b| b == b' ')
            .any(|f| f == flag.as_bytes())
    };
    let mut categories = Vec::new();
    if with_acl_category {
        categories.push(ACL_CATEGORY.to_str().unwrap_or("ratelimit"));
    }
    if has("write") {
        categories.push("write");
    }
    if has("readonly") {
        categories.push("read");
    }
    categories.push(if has("fast") { "fast" } else { "slow" });
    categories.join(" ")
}

fn key_spec(spec: &KeySpec) -> raw::RedisModuleCommandKeySpec {
    // SAFETY: a plain C struct of integers, pointers and unions, for which
    // all zeroes is valid.
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
            Access::Remove => raw::REDISMODULE_CMD_KEY_RM | raw::REDISMODULE_CMD_KEY_DELETE,
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
