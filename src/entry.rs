//! The FFI boundary: every command enters here. A panic becomes an error
//! reply and never unwinds into the server; the nesting depth (a keyspace
//! event subscriber may call us from inside one of our calls) guards
//! MODULE UNLOAD; the arguments are read once into byte slices; a getkeys
//! request is answered from the command's grammar. Raw FFI: redis-module's
//! `redis_command!` wrapper allocates a Vec and retains every argument on
//! each call.

use std::mem::MaybeUninit;
use std::os::raw::c_int;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::AtomicU32;
use std::sync::atomic::Ordering::Relaxed;

use crate::args::{self, MAX_ARGS};
use crate::commands::{admitall, lease, limiter, throttle, Call};
use crate::error::RlError;
use crate::ffi::{str_bytes, Ctx, Str, OK};
use crate::getkeys::{self, Keys};
use crate::{block, reply, stats};

/// A command body: a reply sent, or an error to reply.
type Body = fn(&Call) -> Result<(), RlError>;

/// A command's entry point: its body, the first argument it reads, and
/// where its keys are when the key-specs cannot say (getkeys-api).
macro_rules! entry_point {
    ($name:ident => $body:path, $read:expr) => {
        pub extern "C" fn $name(ctx: Ctx, argv: *mut Str, argc: c_int) -> c_int {
            run(ctx, argv, argc, $body, $read, None)
        }
    };
    ($name:ident => $body:path, $read:expr, keys: $keys:expr) => {
        pub extern "C" fn $name(ctx: Ctx, argv: *mut Str, argc: c_int) -> c_int {
            const KEYS: Keys = $keys;
            run(ctx, argv, argc, $body, $read, Some(KEYS))
        }
    };
}

/// Which arguments a body reads as bytes: the command name never, the key
/// only where its name matters (RL.ADMITALL's duplicate check), since each
/// read is a module-API call. The others are empty slices in `Call::args`
/// (the key is `Call::key`).
const AFTER_THE_KEY: usize = 2;
const AFTER_THE_NAME: usize = 1;

// The limiters' getkeys: the counter (read-write, read-only for RL.TTL) and
// the META hash (read-only). Cluster routing asks the command itself, not
// its key-specs, so this is what makes a META hash in another slot a
// CROSSSLOT error.
entry_point!(rl_admit => limiter::admit, AFTER_THE_KEY,
    keys: |args, key| args::limiter_keys(args, false, key));
entry_point!(rl_admitall => admitall::admit_all, AFTER_THE_NAME,
    keys: |args, key| args::admit_all_keys(args, key));
entry_point!(rl_ttl => limiter::ttl, AFTER_THE_KEY,
    keys: |args, key| args::limiter_keys(args, true, key));
entry_point!(rl_limit => limiter::limit, AFTER_THE_KEY);
entry_point!(rl_refund => limiter::refund, AFTER_THE_KEY,
    keys: |args, key| args::limiter_keys(args, false, key));
entry_point!(rl_reset => limiter::reset, AFTER_THE_KEY);
entry_point!(rl_throttle => throttle::throttle, AFTER_THE_KEY);
entry_point!(rl_acquire => lease::acquire, AFTER_THE_KEY,
    keys: |args, key| args::lease::acquire_keys(args, key));
entry_point!(rl_release => lease::release, AFTER_THE_KEY,
    keys: |args, key| args::lease::release_keys(args, key));
entry_point!(rl_extend => lease::extend, AFTER_THE_KEY);
entry_point!(rl_inflight => lease::in_flight, AFTER_THE_KEY);

/// The callbacks of a blocked RL.ADMIT or RL.ACQUIRE (BLOCK): when its key
/// may be ready, and when its timeout passes, the server hands back its
/// arguments and the command runs again (see `block`).
pub extern "C" fn rl_admit_wake(ctx: Ctx, argv: *mut Str, argc: c_int) -> c_int {
    block::woken(|| run(ctx, argv, argc, limiter::admit, AFTER_THE_KEY, None))
}
pub extern "C" fn rl_acquire_wake(ctx: Ctx, argv: *mut Str, argc: c_int) -> c_int {
    block::woken(|| run(ctx, argv, argc, lease::acquire, AFTER_THE_KEY, None))
}

/// Arguments a call usually has; longer calls (RL.ADMITALL) use the heap.
const INLINE_ARGS: usize = 16;

/// How many of our calls are running (they nest when a keyspace-event
/// subscriber calls one of ours from inside another).
static CALLS_RUNNING: AtomicU32 = AtomicU32::new(0);

/// Whether one of our commands is running: the module must not be unloaded
/// from inside it (a subscriber's `MODULE UNLOAD`), or the server would
/// return into unmapped code.
pub fn in_a_call() -> bool {
    CALLS_RUNNING.load(Relaxed) > 0
}

fn run(
    ctx: Ctx,
    argv: *mut Str,
    argc: c_int,
    body: Body,
    read_from: usize,
    keys: Option<Keys>,
) -> c_int {
    let argc = usize::try_from(argc).unwrap_or(0);
    let argv: &[Str] = if argv.is_null() || argc == 0 {
        &[]
    } else {
        // SAFETY: the server passes `argc` valid string handles at `argv`,
        // alive and unchanged until this call returns; the slice does not
        // leave it.
        unsafe { std::slice::from_raw_parts(argv, argc) }
    };
    // A getkeys-api request only asks where the keys are: nothing to reply
    // to and nothing to count, even when the call itself is malformed.
    if getkeys::is_request(ctx) {
        if let Some(keys) = keys {
            let _ = catch_unwind(AssertUnwindSafe(|| getkeys::answer(ctx, argv, keys)));
        }
        return OK;
    }
    CALLS_RUNNING.fetch_add(1, Relaxed);
    let outcome = catch_unwind(AssertUnwindSafe(|| {
        if argc > MAX_ARGS {
            return Err(RlError::TooManyArguments);
        }
        if argc <= INLINE_ARGS {
            // Only the slots used are written: filling all 16 first costs
            // more than reading a typical call's 6 to 10 arguments.
            let mut bytes = [MaybeUninit::<&[u8]>::uninit(); INLINE_ARGS];
            let read_from = read_from.min(argc);
            for slot in &mut bytes[..read_from] {
                slot.write(&[]);
            }
            for (slot, s) in bytes[read_from..].iter_mut().zip(&argv[read_from..]) {
                slot.write(str_bytes(s));
            }
            let written: *const [MaybeUninit<&[u8]>] = &bytes[..argc];
            // SAFETY: `argv` has `argc` (at most INLINE_ARGS) handles, so
            // the loops wrote the first `argc` slots; MaybeUninit<T> has T's
            // layout, and the slice borrows `bytes`, which outlives `body`.
            let args = unsafe { &*(written as *const [&[u8]]) };
            body(&Call { ctx, argv, args })
        } else {
            let bytes: Vec<&[u8]> = argv
                .iter()
                .enumerate()
                .map(|(i, s)| if i < read_from { &[][..] } else { str_bytes(s) })
                .collect();
            body(&Call {
                ctx,
                argv,
                args: &bytes,
            })
        }
    }));
    match outcome {
        Ok(Ok(())) => {}
        Ok(Err(err)) => {
            stats::error();
            reply::error(ctx, &err);
        }
        Err(_) => {
            stats::error();
            reply::error_text(
                ctx,
                c"ERR ratelimit internal error; the call was not applied",
            );
        }
    }
    CALLS_RUNNING.fetch_sub(1, Relaxed);
    OK
}
