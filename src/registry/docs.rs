//! The argument trees `COMMAND DOCS` shows (and `valkey-cli` hints from):
//! one `Arg` per argument, derived from the vocabulary tables where an
//! option is concerned, and laid out as the server's C arrays. Raw FFI:
//! the arrays feed registry.rs's own `SetCommandInfo` call (see its reason).

use std::ffi::CStr;
use std::os::raw::c_int;
use std::ptr;

use redis_module::raw;

use crate::algo::calendar::PERIODS;
use crate::algo::ALGORITHMS;
use crate::args::{Opt, Value};

/// One argument as `COMMAND DOCS` (and so `valkey-cli` hints) shows it.
#[derive(Clone, Copy)]
pub struct Arg {
    pub name: &'static CStr,
    pub kind: ArgKind,
    /// The keyword that introduces it, e.g. `LIMIT`.
    pub token: Option<&'static CStr>,
    pub optional: bool,
    pub multiple: bool,
}

#[derive(Clone, Copy)]
pub enum ArgKind {
    /// A key, described by the key-spec at this index.
    Key(i32),
    Integer,
    /// Any string (a lease id).
    String,
    /// The keyword alone.
    PureToken,
    /// One of these.
    OneOf(&'static [Arg]),
    /// A group of arguments.
    Block(&'static [Arg]),
}

impl Arg {
    pub const fn key(name: &'static CStr, spec: i32) -> Arg {
        Arg {
            name,
            kind: ArgKind::Key(spec),
            token: None,
            optional: false,
            multiple: false,
        }
    }
    pub const fn int(name: &'static CStr) -> Arg {
        Arg {
            name,
            kind: ArgKind::Integer,
            token: None,
            optional: false,
            multiple: false,
        }
    }
    pub const fn string(name: &'static CStr) -> Arg {
        Arg {
            name,
            kind: ArgKind::String,
            token: None,
            optional: false,
            multiple: false,
        }
    }
    pub const fn word(word: &'static CStr) -> Arg {
        Arg {
            name: word,
            kind: ArgKind::PureToken,
            token: Some(word),
            optional: false,
            multiple: false,
        }
    }
    /// `[TOKEN value]`.
    pub const fn option(token: &'static CStr, name: &'static CStr, kind: ArgKind) -> Arg {
        Arg {
            name,
            kind,
            token: Some(token),
            optional: true,
            multiple: false,
        }
    }
    pub const fn optional(self) -> Arg {
        Arg {
            optional: true,
            ..self
        }
    }
    pub const fn multiple(self) -> Arg {
        Arg {
            multiple: true,
            ..self
        }
    }
    pub const fn required(self) -> Arg {
        Arg {
            optional: false,
            ..self
        }
    }
}

/// ALGO's choices, one word per row of `algo::ALGORITHMS`.
const ALGORITHM_WORDS: &[Arg] = &{
    let mut words = [Arg::word(c""); ALGORITHMS.len()];
    let mut i = 0;
    while i < words.len() {
        words[i] = Arg::word(ALGORITHMS[i].name);
        i += 1;
    }
    words
};

/// CALENDAR's choices, one word per row of `calendar::PERIODS`.
const PERIOD_WORDS: &[Arg] = &{
    let mut words = [Arg::word(c""); PERIODS.len()];
    let mut i = 0;
    while i < words.len() {
        words[i] = Arg::word(PERIODS[i].0);
        i += 1;
    }
    words
};

/// `[TOKEN value]` for each of `opts`, from the option table; a key value
/// is described by key-spec `key_spec`.
pub const fn option_args<const N: usize>(opts: &[Opt], key_spec: i32) -> [Arg; N] {
    let mut out = [Arg::word(c""); N];
    let mut i = 0;
    while i < N {
        let spec = opts[i].spec();
        let kind = match spec.value {
            Value::Algorithm => ArgKind::OneOf(ALGORITHM_WORDS),
            Value::Integer => ArgKind::Integer,
            Value::Key => ArgKind::Key(key_spec),
            Value::Text => ArgKind::String,
            Value::Flag => ArgKind::PureToken,
            Value::Period => ArgKind::OneOf(PERIOD_WORDS),
            Value::Zone => ArgKind::String,
        };
        out[i] = match kind {
            // A flag: `[TOKEN]`, named as its META field.
            ArgKind::PureToken => Arg::word(spec.token).optional(),
            _ => Arg::option(spec.token, spec.value_name, kind),
        };
        i += 1;
    }
    out
}

/// Lays `args` out as the server's zero-terminated C arrays; `arrays` owns
/// them (boxed, so they never move) until registration is done.
pub(super) fn arg_array(
    args: &[Arg],
    arrays: &mut Vec<Box<[raw::RedisModuleCommandArg]>>,
) -> *mut raw::RedisModuleCommandArg {
    let mut out: Vec<raw::RedisModuleCommandArg> = Vec::with_capacity(args.len() + 1);
    for arg in args {
        // SAFETY: a plain C struct for which all zeroes is valid (null
        // pointers, no flags).
        let mut c: raw::RedisModuleCommandArg = unsafe { std::mem::zeroed() };
        c.name = arg.name.as_ptr();
        c.token = arg.token.map_or(ptr::null(), |t| t.as_ptr());
        c.key_spec_index = -1;
        c.flags = (if arg.optional {
            raw::REDISMODULE_CMD_ARG_OPTIONAL
        } else {
            0
        } | match (arg.multiple, arg.token) {
            // A repeated option repeats its keyword too (POLICY ... POLICY ...).
            (true, Some(_)) => {
                raw::REDISMODULE_CMD_ARG_MULTIPLE | raw::REDISMODULE_CMD_ARG_MULTIPLE_TOKEN
            }
            (true, None) => raw::REDISMODULE_CMD_ARG_MULTIPLE,
            (false, _) => 0,
        }) as c_int;
        c.type_ = match arg.kind {
            ArgKind::Key(spec) => {
                c.key_spec_index = spec;
                raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_KEY
            }
            ArgKind::Integer => raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_INTEGER,
            ArgKind::String => raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_STRING,
            ArgKind::PureToken => raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_PURE_TOKEN,
            ArgKind::OneOf(sub) => {
                c.subargs = arg_array(sub, arrays);
                raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_ONEOF
            }
            ArgKind::Block(sub) => {
                c.subargs = arg_array(sub, arrays);
                raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_BLOCK
            }
        };
        out.push(c);
    }
    // SAFETY: as above: the all-zero terminator.
    out.push(unsafe { std::mem::zeroed() });
    let mut boxed = out.into_boxed_slice();
    let first = boxed.as_mut_ptr();
    arrays.push(boxed);
    first
}
