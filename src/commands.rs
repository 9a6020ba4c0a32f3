//! Command handlers: arguments into a typed request, the policy resolved,
//! the algorithm called, and the result written back through `store`.

use std::ffi::CStr;
use std::os::raw::c_int;
use std::panic::{catch_unwind, AssertUnwindSafe};

use crate::algo::{fixed, Decision};
use crate::args::{parse_options, Opt, Options, MAX_ARGS};
use crate::error::{RlError, NON_NEGATIVE, POSITIVE};
use crate::stats;
use crate::store::{self, arg_bytes, Ctx, Key, KeyKind, Str};

pub type Handler = extern "C" fn(Ctx, *mut Str, c_int) -> c_int;

/// A command body: the raw arguments and their bytes in, a reply sent or an error out.
type Body = fn(Ctx, &[Str], &[&[u8]]) -> Result<(), RlError>;

/// Wraps a handler body so that a bug can only become an error reply:
/// a panic never unwinds into the server.
macro_rules! entry_point {
    ($name:ident => $body:path) => {
        pub extern "C" fn $name(ctx: Ctx, argv: *mut Str, argc: c_int) -> c_int {
            run(ctx, argv, argc, $body)
        }
    };
}

entry_point!(rl_admit => admit);
entry_point!(rl_ttl => ttl);
entry_point!(rl_limit => limit);

fn run(ctx: Ctx, argv: *mut Str, argc: c_int, body: Body) -> c_int {
    let outcome = catch_unwind(AssertUnwindSafe(|| {
        let argc = usize::try_from(argc).unwrap_or(0);
        if argc > MAX_ARGS {
            return Err(RlError::TooManyArguments);
        }
        let argv: &[Str] = if argv.is_null() || argc == 0 {
            &[]
        } else {
            unsafe { std::slice::from_raw_parts(argv, argc) }
        };
        let mut bytes: [&[u8]; MAX_ARGS] = [&[]; MAX_ARGS];
        for (slot, &s) in bytes.iter_mut().zip(argv) {
            *slot = arg_bytes(s);
        }
        body(ctx, argv, &bytes[..argc])
    }));
    match outcome {
        Ok(Ok(())) => {}
        Ok(Err(err)) => {
            stats::error();
            store::reply_error(ctx, &err);
        }
        Err(_) => {
            stats::error();
            store::reply_error_text(
                ctx,
                c"ERR ratelimit internal error; the call was not applied",
            );
        }
    }
    raw_ok()
}

fn raw_ok() -> c_int {
    redis_module::raw::REDISMODULE_OK as c_int
}

const ADMIT_OPTIONS: &[Opt] = &[Opt::Limit, Opt::Window, Opt::Meta, Opt::Cost];
const TTL_OPTIONS: &[Opt] = &[Opt::Limit, Opt::Meta];

/// A resolved fixed-window policy; `None` from `resolve` means unlimited.
struct Policy {
    limit: i64,
    window_ms: i64,
}

/// RL.ADMIT key [LIMIT max] [WINDOW ms] [META metakey] [COST n]
fn admit(ctx: Ctx, argv: &[Str], args: &[&[u8]]) -> Result<(), RlError> {
    if args.len() < 2 {
        return Err(RlError::WrongArity("rl.admit"));
    }
    let opts = parse_options(args, 2, ADMIT_OPTIONS)?;
    let cost = opts.cost.unwrap_or(1);
    let now = store::now_ms();
    let Some(policy) = resolve(ctx, argv, &opts, now)? else {
        stats::admitted();
        reply(ctx, &Decision::UNLIMITED);
        return Ok(());
    };

    let name = argv[1];
    let mut key = Key::write(ctx, name);
    let found = key.read_counter()?.map(|count| fixed::Counter {
        count,
        expires_at: key.expires_at(),
    });
    let (decision, write) = fixed::admit(found, policy.limit, policy.window_ms, cost, now);

    match write {
        fixed::Write::Nothing => {}
        fixed::Write::Count { count, expires_at } => {
            key.write_counter(count);
            if found.and_then(|c| c.expires_at) != Some(expires_at) {
                key.set_expires_at(expires_at);
            }
            store::replicate_counter(ctx, name, count, expires_at);
            store::signal_modified(ctx, name);
        }
        fixed::Write::Expiry { expires_at } => {
            key.set_expires_at(expires_at);
            store::replicate_expiry(ctx, name, expires_at);
            store::signal_modified(ctx, name);
        }
    }
    drop(key);
    record(ctx, name, &decision);
    reply(ctx, &decision);
    Ok(())
}

/// RL.TTL key [LIMIT max] [META metakey]
fn ttl(ctx: Ctx, argv: &[Str], args: &[&[u8]]) -> Result<(), RlError> {
    if args.len() < 2 {
        return Err(RlError::WrongArity("rl.ttl"));
    }
    let opts = parse_options(args, 2, TTL_OPTIONS)?;
    let limit = match opts.limit {
        Some(limit) => limit,
        None => match opts.meta {
            Some(at) => read_meta(ctx, argv[at], true, false)?.0.unwrap_or(0),
            None => 0,
        },
    };
    if limit == 0 {
        store::reply_int(ctx, 0);
        return Ok(());
    }
    let now = store::now_ms();
    let key = Key::read(ctx, argv[1]);
    let found = key.read_counter()?.map(|count| fixed::Counter {
        count,
        expires_at: key.expires_at(),
    });
    store::reply_int(ctx, fixed::backoff(found, limit, now));
    Ok(())
}

/// RL.LIMIT metakey
fn limit(ctx: Ctx, argv: &[Str], args: &[&[u8]]) -> Result<(), RlError> {
    if args.len() != 2 {
        return Err(RlError::WrongArity("rl.limit"));
    }
    let (max, _) = read_meta(ctx, argv[1], true, false)?;
    store::reply_int(ctx, max.unwrap_or(0));
    Ok(())
}

/// Inline options win over the META hash; a limit of 0 (or none) means
/// no limit at all.
fn resolve(ctx: Ctx, argv: &[Str], opts: &Options, now: i64) -> Result<Option<Policy>, RlError> {
    let need_max = opts.limit.is_none();
    let need_duration = opts.window.is_none();
    let (meta_max, meta_duration) = match opts.meta {
        Some(at) if need_max || need_duration => read_meta(ctx, argv[at], need_max, need_duration)?,
        _ => (None, None),
    };
    let limit = opts.limit.or(meta_max).unwrap_or(0);
    if limit == 0 {
        return Ok(None);
    }
    let (window_ms, source) = match (opts.window, meta_duration) {
        (Some(w), _) => (w, "WINDOW"),
        (None, Some(d)) => (d, "META field 'duration'"),
        (None, None) => return Err(RlError::NoWindow),
    };
    if now.checked_add(window_ms).is_none() {
        return Err(RlError::WindowOverflow(source));
    }
    Ok(Some(Policy { limit, window_ms }))
}

/// Reads `max` and/or `duration` from a META hash. A missing hash or field
/// is `None`; a field that is not a valid integer is an error naming it.
fn read_meta(
    ctx: Ctx,
    name: Str,
    want_max: bool,
    want_duration: bool,
) -> Result<(Option<i64>, Option<i64>), RlError> {
    let meta = Key::read(ctx, name);
    match meta.kind() {
        KeyKind::Empty => return Ok((None, None)),
        KeyKind::Hash => {}
        _ => return Err(RlError::MetaWrongType),
    }
    let max = match want_max {
        true => meta_field(ctx, &meta, c"max", "max", 0)?,
        false => None,
    };
    let duration = match want_duration {
        true => meta_field(ctx, &meta, c"duration", "duration", 1)?,
        false => None,
    };
    Ok((max, duration))
}

fn meta_field(
    ctx: Ctx,
    meta: &Key,
    field: &CStr,
    name: &'static str,
    min: i64,
) -> Result<Option<i64>, RlError> {
    match meta.hash_int(ctx, field) {
        Ok(None) => Ok(None),
        Ok(Some(v)) if v >= min => Ok(Some(v)),
        _ => Err(RlError::BadMetaField(
            name,
            if min == 0 { NON_NEGATIVE } else { POSITIVE },
        )),
    }
}

/// The receipt of a decision: INFO counters, and `rl.hit` on refusal.
fn record(ctx: Ctx, name: Str, decision: &Decision) {
    if decision.admitted {
        stats::admitted();
    } else {
        stats::refused(decision.retry_after_ms);
        store::notify(ctx, c"rl.hit", name);
    }
}

fn reply(ctx: Ctx, d: &Decision) {
    store::reply_ints(
        ctx,
        &[
            i64::from(d.admitted),
            d.limit,
            d.remaining,
            d.retry_after_ms,
            d.reset_after_ms,
        ],
    );
}
