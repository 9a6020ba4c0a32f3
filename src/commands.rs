//! Command handlers: arguments into a typed request, the policy resolved,
//! the algorithm called, and the result written back through `store`.

use std::os::raw::c_int;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::AtomicU32;
use std::sync::atomic::Ordering::Relaxed;

use crate::algo::{self, fixed, state, throttle, Algo, Decision, Policy, State, Write};
use crate::args::{int_arg, parse_options, unknown, Opt, Options, MAX_ARGS, POLICY};
use crate::config;
use crate::error::{RlError, BURST_RANGE, NON_NEGATIVE, POSITIVE};
use crate::num::parse_i64;
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
            run(ctx, argv, argc, $body, None)
        }
    };
    ($name:ident => $body:path, keys: $keys:path) => {
        pub extern "C" fn $name(ctx: Ctx, argv: *mut Str, argc: c_int) -> c_int {
            run(ctx, argv, argc, $body, Some($keys))
        }
    };
}

entry_point!(rl_admit => admit, keys: limiter_keys_rw);
entry_point!(rl_admitall => admit_all, keys: admit_all_keys);
entry_point!(rl_ttl => ttl, keys: limiter_keys_ro);
entry_point!(rl_limit => limit);
entry_point!(rl_refund => refund, keys: limiter_keys_rw);
entry_point!(rl_reset => reset);
entry_point!(rl_throttle => throttle);

/// Reports where a command's keys are (getkeys-api), from the raw arguments.
type Keys = fn(Ctx, &[Str]);

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

fn run(ctx: Ctx, argv: *mut Str, argc: c_int, body: Body, keys: Option<Keys>) -> c_int {
    let argc = usize::try_from(argc).unwrap_or(0);
    let argv: &[Str] = if argv.is_null() || argc == 0 {
        &[]
    } else {
        unsafe { std::slice::from_raw_parts(argv, argc) }
    };
    // A getkeys-api request only asks where the keys are: nothing to reply
    // to and nothing to count, even when the call itself is malformed. The
    // server asks this before every call, so it reads only what it needs.
    if store::is_keys_request(ctx) {
        if let Some(keys) = keys {
            let _ = catch_unwind(AssertUnwindSafe(|| keys(ctx, argv)));
        }
        return redis_module::raw::REDISMODULE_OK as c_int;
    }
    let outer = stats::begin_call();
    CALLS_RUNNING.fetch_add(1, Relaxed);
    let outcome = catch_unwind(AssertUnwindSafe(|| {
        if argc > MAX_ARGS {
            return Err(RlError::TooManyArguments);
        }
        if argc <= INLINE_ARGS {
            let mut bytes: [&[u8]; INLINE_ARGS] = [&[]; INLINE_ARGS];
            for (slot, &s) in bytes.iter_mut().zip(argv) {
                *slot = arg_bytes(s);
            }
            body(ctx, argv, &bytes[..argc])
        } else {
            let bytes: Vec<&[u8]> = argv.iter().map(|&s| arg_bytes(s)).collect();
            body(ctx, argv, &bytes)
        }
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
    CALLS_RUNNING.fetch_sub(1, Relaxed);
    stats::end_call(outer);
    redis_module::raw::REDISMODULE_OK as c_int
}

/// RL.ADMIT and RL.REFUND take every option.
const ADMIT_OPTIONS: &[Opt] = &Opt::ALL;

/// RL.ADMIT key [ALGO name] [LIMIT max] [WINDOW ms] [BURST n] [META metakey] [COST n]
fn admit(ctx: Ctx, argv: &[Str], args: &[&[u8]]) -> Result<(), RlError> {
    match update_limiter(ctx, argv, args, "rl.admit", algo::admit)? {
        Updated::Unlimited => {
            stats::admitted(None);
            reply(ctx, &Decision::UNLIMITED);
        }
        Updated::Limiter {
            name,
            algo,
            cost,
            outcome,
        } => {
            let d = outcome.decision;
            record(ctx, name, Some(algo), d.admitted, d.retry_after_ms, cost);
            reply(ctx, &outcome.decision);
        }
    }
    Ok(())
}

/// What RL.ADMIT and RL.REFUND did to their limiter.
enum Updated {
    Unlimited,
    Limiter {
        name: Str,
        algo: Algo,
        cost: i64,
        outcome: algo::Outcome,
    },
}

/// A limiter's state as read, with the key's absolute expiry (`None`: no TTL).
type Found = Option<(State, Option<i64>)>;

/// Decides a call on one limiter: admit, or refund.
type Decide = fn(Found, &Policy, i64, i64) -> algo::Outcome;

/// The path RL.ADMIT and RL.REFUND share: options parsed, the policy
/// resolved, the state read, `decide` called and its write applied.
fn update_limiter(
    ctx: Ctx,
    argv: &[Str],
    args: &[&[u8]],
    command: &'static str,
    decide: Decide,
) -> Result<Updated, RlError> {
    if args.len() < 2 {
        return Err(RlError::WrongArity(command));
    }
    let opts = parse_options(args, 2, ADMIT_OPTIONS)?;
    let now = store::now_ms();
    let Some(policy) = resolve(ctx, argv, &opts)?
        .map(|r| r.policy(now))
        .transpose()?
    else {
        return Ok(Updated::Unlimited);
    };
    let name = argv[1];
    let mut key = Key::write(ctx, name);
    let found = key.read_state(policy.algo)?;
    let cost = opts.cost.unwrap_or(1);
    let outcome = decide(found, &policy, cost, now);
    apply(ctx, &mut key, name, outcome.write, found);
    Ok(Updated::Limiter {
        name,
        algo: policy.algo,
        cost,
        outcome,
    })
}

/// RL.ADMITALL numkeys key [key ...] [COST n] POLICY [ALGO name] [LIMIT max]
/// [WINDOW ms] [BURST n] [META metakey] [POLICY ...]
///
/// One POLICY per key, in order. All are admitted, or none is consumed.
fn admit_all(ctx: Ctx, argv: &[Str], args: &[&[u8]]) -> Result<(), RlError> {
    let request = AdmitAll::parse(args)?;
    let now = store::now_ms();
    let mut limiters = Vec::with_capacity(request.policies.len());
    for (i, opts) in request.policies.iter().enumerate() {
        let policy = resolve(ctx, argv, opts)?
            .map(|r| r.policy(now))
            .transpose()?;
        limiters.push((argv[2 + i], policy));
    }
    let mut members = Vec::with_capacity(limiters.len());
    for &(name, policy) in &limiters {
        let Some(policy) = policy else {
            members.push(Member {
                name,
                policy: None,
                found: None,
                outcome: algo::Outcome {
                    decision: Decision::UNLIMITED,
                    write: Write::Nothing,
                },
            });
            continue;
        };
        // Each key is closed as soon as it is read: opening the next may
        // fire an event (`expired`) whose subscriber writes to any of them.
        let found = Key::write(ctx, name).read_state(policy.algo)?;
        let outcome = algo::admit(found, &policy, request.cost, now);
        members.push(Member {
            name,
            policy: Some(policy),
            found,
            outcome,
        });
    }
    let all_admitted = members.iter().all(|m| m.outcome.decision.admitted);
    let (mut refused_by, mut longest) = (0, 0i64);
    let mut hits = Vec::new();
    for (i, m) in members.iter_mut().enumerate() {
        let wait = m.outcome.decision.retry_after_ms;
        if all_admitted {
            // The caller proceeds after the longest wait (a leaky queue's delay).
            longest = longest.max(wait);
            m.apply(ctx);
        } else if !m.outcome.decision.admitted {
            // A refusal consumes nothing, but still makes the one repair
            // RL.ADMIT would (an expiry for a TTL-less counter, a stored
            // time pulled back), or a corrupt state would block for good.
            m.apply(ctx);
            hits.push(m.name);
            if refused_by == 0 || longest >= 0 && (wait < 0 || wait > longest) {
                refused_by = i + 1;
                longest = wait;
            }
        } else if let Some(policy) = &m.policy {
            // Nothing was consumed: report this member as it stands.
            m.outcome = algo::admit(m.found, policy, 0, now);
        }
    }
    let decisions: Vec<Decision> = members.iter().map(|m| m.outcome.decision).collect();
    for name in hits {
        notify_hit(ctx, name, request.cost);
    }
    match all_admitted {
        true => stats::admitted(None),
        false => stats::refused(None, longest),
    }
    store::reply_admit_all(ctx, all_admitted, refused_by as i64, longest, &decisions);
    Ok(())
}

/// One limiter of an RL.ADMITALL call.
struct Member {
    name: Str,
    /// `None` for an unlimited member.
    policy: Option<Policy>,
    found: Found,
    outcome: algo::Outcome,
}

impl Member {
    /// Applies the member's write on its key, opened again and closed at
    /// once. Events fired since the key was read (`new` when an earlier
    /// member's key was created, `expired` when a later one was opened) may
    /// have let a subscriber change it: then it is left as that made it,
    /// and nothing is written or propagated for it.
    fn apply(&self, ctx: Ctx) {
        let Some(policy) = &self.policy else { return };
        if self.outcome.write == Write::Nothing {
            return;
        }
        let mut key = Key::write(ctx, self.name);
        if key.read_state(policy.algo).ok() == Some(self.found) {
            apply(ctx, &mut key, self.name, self.outcome.write, self.found);
        }
    }
}

struct AdmitAll {
    cost: i64,
    policies: Vec<Options>,
}

impl AdmitAll {
    fn parse(args: &[&[u8]]) -> Result<AdmitAll, RlError> {
        let numkeys = args
            .get(1)
            .ok_or(RlError::WrongArity("rl.admitall"))
            .and_then(|n| int_arg(n, "numkeys", 1))?;
        let first_option = usize::try_from(numkeys)
            .ok()
            .and_then(|n| n.checked_add(2))
            .filter(|&end| end <= args.len())
            .ok_or(RlError::BadValue(
                "numkeys",
                "at most the number of keys given",
            ))?;
        let keys = &args[2..first_option];
        if keys.iter().enumerate().any(|(i, k)| keys[..i].contains(k)) {
            return Err(RlError::DuplicateKeys);
        }
        let mut cost = None;
        let mut policies: Vec<Options> = Vec::new();
        let mut at = first_option;
        while at < args.len() {
            let word = args[at];
            if word.eq_ignore_ascii_case(b"POLICY") {
                policies.push(Options::default());
                at += 1;
                continue;
            }
            if word.eq_ignore_ascii_case(b"COST") {
                let value = args.get(at + 1).ok_or(RlError::MissingValue("COST"))?;
                if cost.replace(int_arg(value, "COST", 0)?).is_some() {
                    return Err(RlError::Repeated("COST"));
                }
                at += 2;
                continue;
            }
            let Some(opt) = Opt::parse(word, POLICY) else {
                return Err(match unknown(word) {
                    RlError::UnknownOption(shown) if policies.is_empty() => {
                        RlError::NoPolicyAfterKeys(keys.len(), shown)
                    }
                    err => err,
                });
            };
            let group = policies.last_mut().ok_or(RlError::PolicyFirst)?;
            group.set(opt, args, at + 1)?;
            at += 2;
        }
        if policies.len() != keys.len() {
            return Err(RlError::PolicyCount(keys.len(), policies.len()));
        }
        Ok(AdmitAll {
            cost: cost.unwrap_or(1),
            policies,
        })
    }
}

/// getkeys-api for `key [option value ...]`: the counter, and the META hash
/// (read-only). Cluster routing asks the command itself, not its key-specs,
/// so this is what makes a META hash in another slot a CROSSSLOT error.
fn limiter_keys(ctx: Ctx, argv: &[Str], read_only: bool) {
    if argv.len() > 1 {
        store::key_at(ctx, 1, read_only);
    }
    let mut at = 2;
    while at + 1 < argv.len() {
        if arg_bytes(argv[at]).eq_ignore_ascii_case(b"META") {
            store::key_at(ctx, at + 1, true);
        }
        at += 2;
    }
}

fn limiter_keys_rw(ctx: Ctx, argv: &[Str]) {
    limiter_keys(ctx, argv, false)
}

fn limiter_keys_ro(ctx: Ctx, argv: &[Str]) {
    limiter_keys(ctx, argv, true)
}

/// getkeys-api: the counters (read-write) and every META hash (read-only).
fn admit_all_keys(ctx: Ctx, argv: &[Str]) {
    let numkeys = argv.get(1).map(|&n| arg_bytes(n));
    let numkeys = numkeys.and_then(parse_i64).unwrap_or(0).max(0) as usize;
    let end = numkeys.saturating_add(2).min(argv.len());
    for pos in 2..end {
        store::key_at(ctx, pos, false);
    }
    let mut at = end;
    while at < argv.len() {
        if arg_bytes(argv[at]).eq_ignore_ascii_case(b"META") && at + 1 < argv.len() {
            store::key_at(ctx, at + 1, true);
            at += 2;
        } else {
            at += 1;
        }
    }
}

/// RL.TTL key [ALGO name] [LIMIT max] [WINDOW ms] [BURST n] [META metakey]
fn ttl(ctx: Ctx, argv: &[Str], args: &[&[u8]]) -> Result<(), RlError> {
    if args.len() < 2 {
        return Err(RlError::WrongArity("rl.ttl"));
    }
    let opts = parse_options(args, 2, POLICY)?;
    let now = store::now_ms();
    let Some(resolved) = resolve(ctx, argv, &opts)? else {
        store::reply_int(ctx, 0);
        return Ok(());
    };
    // The fixed window's back-off is the counter's PTTL, so it needs no
    // window; given one, foreign state reads as RL.ADMIT reads it.
    let policy = match (resolved.algo, resolved.window) {
        (Algo::Fixed, None) => None,
        _ => Some(resolved.policy(now)?),
    };
    let key = Key::read(ctx, argv[1]);
    let found = key.read_state(resolved.algo)?;
    let backoff = match policy {
        None => fixed::backoff(fixed::counter_of(found, now), resolved.limit, now),
        // The wait a request of cost 1 would be told now (a leaky queue's
        // delay included).
        Some(policy) => algo::admit(found, &policy, 1, now)
            .decision
            .retry_after_ms
            .max(0),
    };
    store::reply_int(ctx, backoff);
    Ok(())
}

/// RL.LIMIT metakey
fn limit(ctx: Ctx, argv: &[Str], args: &[&[u8]]) -> Result<(), RlError> {
    if args.len() != 2 {
        return Err(RlError::WrongArity("rl.limit"));
    }
    let meta = Meta::read(ctx, argv[1])?;
    store::reply_int(ctx, meta.max()?.unwrap_or(0));
    Ok(())
}

/// RL.REFUND key [ALGO name] [LIMIT max] [WINDOW ms] [BURST n] [META metakey] [COST n]
fn refund(ctx: Ctx, argv: &[Str], args: &[&[u8]]) -> Result<(), RlError> {
    match update_limiter(ctx, argv, args, "rl.refund", algo::refund)? {
        Updated::Unlimited => reply(ctx, &Decision::UNLIMITED),
        Updated::Limiter { name, outcome, .. } => {
            if outcome.write != Write::Nothing {
                store::notify(ctx, c"rl.refund", name);
            }
            reply(ctx, &outcome.decision);
        }
    }
    Ok(())
}

/// RL.RESET key
fn reset(ctx: Ctx, argv: &[Str], args: &[&[u8]]) -> Result<(), RlError> {
    if args.len() != 2 {
        return Err(RlError::WrongArity("rl.reset"));
    }
    let name = argv[1];
    let mut key = Key::write(ctx, name);
    let existed = match key.kind() {
        KeyKind::Empty => false,
        KeyKind::String => true,
        _ => return Err(RlError::WrongType),
    };
    if existed {
        apply(ctx, &mut key, name, Write::Delete, None);
        drop(key);
        store::notify(ctx, c"rl.reset", name);
    }
    store::reply_int(ctx, i64::from(existed));
    Ok(())
}

/// RL.THROTTLE key max_burst count_per_period period [quantity]
fn throttle(ctx: Ctx, argv: &[Str], args: &[&[u8]]) -> Result<(), RlError> {
    if !(5..=6).contains(&args.len()) {
        return Err(RlError::WrongArity("rl.throttle"));
    }
    let params = throttle::Params {
        max_burst: int_arg(args[2], "max_burst", 0)?,
        count: int_arg(args[3], "count_per_period", 1)?,
        period_s: int_arg(args[4], "period", 1)?,
    };
    let quantity = match args.get(5) {
        Some(q) => int_arg(q, "quantity", 0)?,
        None => 1,
    };
    let now = store::now_ms();
    let meter = params.meter(now)?;
    let name = argv[1];
    let mut key = Key::write(ctx, name);
    // Our `gcra:<tat_ns>` state, or redis-cell's plain ns integer.
    let found = match key.read_string()? {
        None => None,
        Some(bytes) => match State::decode(Algo::Gcra, bytes) {
            Ok(state) => Some(state),
            Err(_) => Some(State::Gcra {
                tat_ns: i128::from(parse_i64(bytes).ok_or(RlError::BadState("gcra"))?),
            }),
        },
    };
    let before = found.map(|state| (state, key.expires_at()));
    let (answer, write) = throttle::throttle(before, &meter, quantity, now);
    apply(ctx, &mut key, name, write, before);
    drop(key);
    record(
        ctx,
        name,
        None,
        !answer.limited,
        answer.retry_after_ms,
        quantity,
    );
    store::reply_named_ints(
        ctx,
        &store::THROTTLE_FIELDS,
        &[
            i64::from(answer.limited),
            answer.limit,
            answer.remaining,
            answer.retry_after_s,
            answer.reset_after_s,
        ],
    );
    Ok(())
}

/// A policy's parts as given inline or found in META; `None` from
/// `resolve` means unlimited.
struct Resolved {
    algo: Algo,
    limit: i64,
    window: Option<(i64, &'static str)>,
    /// The burst, and whether it came from the META hash.
    burst: Option<(i64, bool)>,
}

impl Resolved {
    fn policy(&self, now: i64) -> Result<Policy, RlError> {
        let (window, source) = self.window.ok_or(RlError::NoWindow)?;
        if now.checked_add(window).is_none() {
            return Err(RlError::WindowOverflow(source));
        }
        // Named as given: the BURST option or the META field.
        if let Some((_, from_meta)) = self.burst.filter(|&(b, _)| b < self.algo.min_burst()) {
            return Err(match from_meta {
                true => RlError::BadMetaField("burst", BURST_RANGE),
                false => RlError::BadValue("BURST", BURST_RANGE),
            });
        }
        let burst = self.burst.map(|(b, _)| b);
        Policy::new(self.algo, self.limit, window, burst, now)
    }
}

/// Inline options win over the META hash; a limit of 0 (or none) means no
/// limit at all. Fields the policy does not use are never read or judged.
fn resolve(ctx: Ctx, argv: &[Str], opts: &Options) -> Result<Option<Resolved>, RlError> {
    let meta = match opts.meta {
        Some(at) => Meta::read(ctx, argv[at])?,
        None => Meta::default(),
    };
    let algo = match opts.algo {
        Some(algo) => algo,
        None => meta.algorithm()?.unwrap_or_else(config::default_algo),
    };
    if opts.burst.is_some() && !algo.uses_burst() {
        return Err(RlError::NotForAlgo("BURST", algo.name()));
    }
    let limit = match opts.limit {
        Some(limit) => limit,
        None => meta.max()?.unwrap_or(0),
    };
    if limit == 0 {
        return Ok(None);
    }
    let window = match opts.window {
        Some(w) => Some((w, "WINDOW")),
        None => meta.duration()?.map(|d| (d, "META field 'duration'")),
    };
    let burst = match (opts.burst, algo.uses_burst()) {
        (Some(b), _) => Some((b, false)),
        (None, true) => meta.burst()?.map(|b| (b, true)),
        (None, false) => None,
    };
    Ok(Some(Resolved {
        algo,
        limit,
        window,
        burst,
    }))
}

/// The META hash fields, as found; each is judged only when used.
#[derive(Default)]
struct Meta {
    max: Option<Option<i64>>,
    duration: Option<Option<i64>>,
    algorithm: Option<Option<Algo>>,
    burst: Option<Option<i64>>,
}

impl Meta {
    fn read(ctx: Ctx, name: Str) -> Result<Meta, RlError> {
        let key = Key::read(ctx, name);
        let mut meta = Meta::default();
        match key.kind() {
            KeyKind::Empty => return Ok(meta),
            KeyKind::Hash => {}
            _ => return Err(RlError::MetaWrongType),
        }
        key.hash_fields(
            ctx,
            [c"max", c"duration", c"algorithm", c"burst"],
            |i, bytes| match i {
                0 => meta.max = Some(parse_i64(bytes)),
                1 => meta.duration = Some(parse_i64(bytes)),
                2 => meta.algorithm = Some(Algo::parse(bytes)),
                _ => meta.burst = Some(parse_i64(bytes)),
            },
        );
        Ok(meta)
    }

    fn max(&self) -> Result<Option<i64>, RlError> {
        int_field(self.max, "max", 0, NON_NEGATIVE)
    }

    fn duration(&self) -> Result<Option<i64>, RlError> {
        int_field(self.duration, "duration", 1, POSITIVE)
    }

    fn burst(&self) -> Result<Option<i64>, RlError> {
        int_field(self.burst, "burst", 0, BURST_RANGE)
    }

    fn algorithm(&self) -> Result<Option<Algo>, RlError> {
        match self.algorithm {
            None => Ok(None),
            Some(Some(algo)) => Ok(Some(algo)),
            Some(None) => Err(RlError::BadMetaField("algorithm", Algo::NAMES)),
        }
    }
}

/// A META field as found: absent, or an integer of at least `min`.
fn int_field(
    field: Option<Option<i64>>,
    name: &'static str,
    min: i64,
    must: &'static str,
) -> Result<Option<i64>, RlError> {
    match field {
        None => Ok(None),
        Some(Some(v)) if v >= min => Ok(Some(v)),
        _ => Err(RlError::BadMetaField(name, must)),
    }
}

/// Writes a decision's effect and replicates it with absolute time.
fn apply(ctx: Ctx, key: &mut Key, name: Str, write: Write, before: Found) {
    match write {
        Write::Nothing => return,
        Write::State { state, expires_at } => {
            let mut buf = [0u8; state::MAX_LEN];
            let bytes = state.encode(&mut buf);
            let created = key.write_bytes(ctx, bytes);
            let (before, expiry_before) = before.unzip();
            let same_expiry = expiry_before == Some(Some(expires_at));
            if !same_expiry {
                key.set_expires_at(expires_at);
            }
            // An unchanged expiry is already on the replicas: the cheaper
            // forms say what changed without restating it. A counter only
            // moved by a delta (INCRBY; a decoded counter's bytes are
            // canonical, so INCRBY gives a replica these very bytes).
            let delta = match (before, state) {
                (Some(State::Fixed { count: old }), State::Fixed { count }) => {
                    count.checked_sub(old)
                }
                _ => None,
            };
            match (same_expiry, delta) {
                (true, Some(delta)) => store::replicate_incrby(ctx, name, delta),
                (true, None) => store::replicate_set_keep_ttl(ctx, name, bytes),
                (false, _) => store::replicate_set(ctx, name, bytes, created.as_ref(), expires_at),
            }
        }
        Write::Expiry { expires_at } => {
            key.set_expires_at(expires_at);
            store::replicate_expiry(ctx, name, expires_at);
        }
        Write::Delete => {
            key.delete();
            store::replicate_delete(ctx, name);
        }
    }
    store::signal_modified(ctx, name);
}

/// The receipt of a decision: INFO counters, and `rl.hit` on refusal.
fn record(ctx: Ctx, name: Str, algo: Option<Algo>, admitted: bool, retry_after_ms: i64, cost: i64) {
    if admitted {
        stats::admitted(algo);
    } else {
        stats::refused(algo, retry_after_ms);
        notify_hit(ctx, name, cost);
    }
}

/// `rl.hit` for a refused limiter, unless switched off. A peek (`cost` 0)
/// refuses nobody, so it fires none.
fn notify_hit(ctx: Ctx, name: Str, cost: i64) {
    if config::hit_events() && cost > 0 {
        store::notify(ctx, c"rl.hit", name);
    }
}

fn reply(ctx: Ctx, d: &Decision) {
    store::reply_decision(ctx, d);
}
