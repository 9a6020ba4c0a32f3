//! The command families, each in its own file: a request parsed by `args`,
//! its policy resolved, the algorithm's decision planned by `plan`, carried
//! out by `store`, its receipt (`receipt`) counted by `stats` and fired as
//! an event by `store`, and answered by `reply`.

pub mod admitall;
pub mod lease;
mod lease_shared;
pub mod limiter;
pub mod throttle;
pub mod tickets;

use crate::algo::penalty::{self, Plan, Read};
use crate::algo::{state, Found};
use crate::config;
use crate::ffi::{Ctx, Str};
use crate::plan;
use crate::receipt::{self, Source};
use crate::store::{self, Key};
use crate::{algo, stats};

/// One call, as `entry` hands it over: the context, the raw arguments
/// and their bytes.
pub struct Call<'a> {
    pub ctx: Ctx,
    pub argv: &'a [Str],
    /// One per argument, at its position in `argv`. Only the arguments a
    /// command parses are read: the command name's slot is empty, and so is
    /// the key's (but for RL.ADMITALL, which compares its keys), each read
    /// being a module-API call. The key is `key()`.
    pub args: &'a [&'a [u8]],
}

impl Call<'_> {
    /// The key of a one-key command (its first argument), as the handle
    /// the keyspace takes.
    pub fn key(&self) -> Str {
        self.argv[1]
    }
}

/// Plans and carries out an algorithm's write on an open key.
fn write(ctx: Ctx, key: &mut Key, name: Str, write: algo::Write, before: Found) {
    let mut buf = [0u8; state::MAX_LEN];
    store::execute(ctx, key, name, plan::change(write, before, &mut buf));
}

/// Plans and carries out a penalty's plan (`algo::penalty`) on an open key.
fn write_penalised(ctx: Ctx, key: &mut Key, name: Str, plan: Plan, read: &Read) {
    let mut buf = [0u8; penalty::MAX_LEN];
    store::execute(ctx, key, name, plan::penalised(plan, read, &mut buf));
}

/// The receipt of a decision: its INFO counters and, for a refusal, `rl.hit`
/// (`rl.shadow` in shadow mode). `verdict`: (admitted, shadow mode).
fn record(ctx: Ctx, name: Str, source: Source, verdict: (bool, bool), retry_ms: i64, cost: i64) {
    let (tally, event) =
        receipt::of_decision(source, verdict, retry_ms, cost, config::hit_events());
    stats::count(tally);
    if let Some(event) = event {
        store::notify(ctx, event, name);
    }
}
