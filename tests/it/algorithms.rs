//! The sliding window, token bucket, GCRA and leaky bucket against a real
//! server: every reply compared to the math (an independent model of each
//! algorithm, kept here), the state and absolute expiry as stored, peeks,
//! refunds, resets, keyspace events and replication.
//!
//! Calls whose expectations depend on the clock run inside one MULTI/EXEC
//! together with TIME: the server's time is frozen for the whole
//! transaction, so TIME there is exactly the `now` the module used. The
//! windows read it in ms, the buckets in µs (`timed_us`).

use crate::common;

use std::thread::sleep;
use std::time::Duration;

use crate::common::{
    cmd_err, cmd_ints, cmd_raw, exec, get, int, ints, pttl, raw_state, repl_offset, server_time_ms,
    snapshot, text, timed, timed_us, wait_replica_offset, Rng, Server, QUIET,
};
use redis::{Commands, Connection, Value};
use serial_test::serial;
use valkey_ratelimit::algo::ceil_ms;

const NS_PER_MS: i128 = 1_000_000;

/// The clock (µs) in ns.
fn ns(now_us: i64) -> i128 {
    i128::from(now_us) * 1_000
}

/// The key expiry of a state `span_ns` after `now_us`: that time, rounded
/// up to the ms.
fn expiry(now_us: i64, span_ns: i128) -> i64 {
    let at = ns(now_us) + span_ns;
    ((at + NS_PER_MS - 1) / NS_PER_MS) as i64
}

/// A token bucket's value: the credit, the last refill's ms and the ns
/// into it.
fn token_value(credit: i128, now_us: i64) -> String {
    let (ms, us) = (now_us.div_euclid(1_000), now_us.rem_euclid(1_000));
    format!("token:{credit}:{ms}:{}", us * 1_000)
}

// ---------------------------------------------------------------------------
// Talking to the server
// ---------------------------------------------------------------------------

fn exists(con: &mut Connection, key: &str) -> bool {
    con.exists(key).unwrap()
}

// ---------------------------------------------------------------------------
// The sliding window, as the spec states it
// ---------------------------------------------------------------------------

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Sliding {
    start: i64,
    current: i64,
    previous: i64,
}

impl Sliding {
    fn encode(self) -> String {
        format!("sliding:{}:{}:{}", self.start, self.current, self.previous)
    }
}

/// The counts in view at `now`: windows are aligned to multiples of `w`.
fn in_view(state: Option<Sliding>, w: i64, now: i64) -> Sliding {
    let start = now - now.rem_euclid(w);
    match state {
        Some(s) if s.start == start => s,
        Some(s) if s.start == start - w => Sliding {
            start,
            current: 0,
            previous: s.current,
        },
        _ => Sliding {
            start,
            current: 0,
            previous: 0,
        },
    }
}

/// The weighted count times the window: previous*(W-elapsed) + current*W.
fn weighted(v: Sliding, w: i64, now: i64) -> i128 {
    i128::from(v.previous) * i128::from(v.start + w - now) + i128::from(v.current) * i128::from(w)
}

fn sliding_fits(state: Option<Sliding>, limit: i64, w: i64, cost: i64, now: i64) -> bool {
    let v = in_view(state, w, now);
    cost <= limit
        && weighted(v, w, now) + i128::from(cost) * i128::from(w)
            <= i128::from(limit) * i128::from(w)
}

/// The reply to RL.ADMIT and the state written (if any). The back-off and
/// the reset are found by brute force over every ms ahead, independently of
/// the closed forms the module uses.
fn sliding_expect(
    state: Option<Sliding>,
    limit: i64,
    w: i64,
    cost: i64,
    now: i64,
) -> ([i64; 5], Option<Sliding>) {
    let v = in_view(state, w, now);
    let admitted = sliding_fits(state, limit, w, cost, now);
    let after = match admitted {
        true => Sliding {
            current: v.current + cost,
            ..v
        },
        false => v,
    };
    let free = (i128::from(limit) * i128::from(w) - weighted(after, w, now)).max(0) / i128::from(w);
    let retry = if admitted {
        0
    } else if cost > limit {
        -1
    } else {
        (1..=2 * w + 1)
            .find(|&t| sliding_fits(state, limit, w, cost, now + t))
            .expect("fits within two windows")
    };
    let reset = (0..=2 * w + 1)
        .find(|&t| weighted(in_view(Some(after), w, now + t), w, now + t) == 0)
        .expect("empty within two windows");
    let write = (admitted && cost > 0).then_some(after);
    (
        [i64::from(admitted), limit, free as i64, retry, reset],
        write,
    )
}

// ---------------------------------------------------------------------------
// Token bucket, GCRA and leaky bucket: one meter of debt in ns
// ---------------------------------------------------------------------------

/// The booking horizon's default (`ratelimit.max-reserve-ms`), in ns.
const HORIZON: i128 = 60_000 * NS_PER_MS;

#[derive(Debug, Clone, Copy)]
struct Meter {
    interval: i128,
    capacity: i128,
    burst: i64,
    leaky: bool,
}

impl Meter {
    /// `limit` per `window_ms`; `burst` requests of capacity (the queue
    /// size for leaky, whose request being served takes one more slot).
    fn new(limit: i64, window_ms: i64, burst: i64, leaky: bool) -> Meter {
        let window_ns = i128::from(window_ms) * NS_PER_MS;
        let interval = (window_ns + i128::from(limit) - 1) / i128::from(limit);
        let slots = i128::from(burst) + i128::from(leaky);
        Meter {
            interval,
            capacity: slots * interval,
            burst,
            leaky,
        }
    }

    fn room(&self, debt: i128) -> i64 {
        let room = ((self.capacity - debt).max(0) / self.interval) as i64;
        match self.leaky {
            true => room.min(self.burst),
            false => room,
        }
    }

    /// The debt (ns) a bucket whose debt runs out at `tat` holds at
    /// `now_us`: kept up to the capacity plus the booking horizon (the
    /// default 60 s), read as a full bucket beyond it.
    fn debt(&self, tat: Option<i128>, now_us: i64) -> i128 {
        match tat.map(|t| t - ns(now_us)) {
            Some(ahead) if ahead > self.capacity + HORIZON => self.capacity,
            Some(ahead) => ahead.max(0),
            None => 0,
        }
    }

    /// The reply to `cost` with `debt` in the bucket, and the debt after.
    fn decide(&self, debt: i128, cost: i64) -> ([i64; 5], i128) {
        let increment = i128::from(cost) * self.interval;
        if increment <= self.capacity && debt + increment <= self.capacity {
            let after = debt + increment;
            let delay = if self.leaky { ceil_ms(debt) } else { 0 };
            (
                [1, self.burst, self.room(after), delay, ceil_ms(after)],
                after,
            )
        } else {
            let retry = match increment > self.capacity {
                true => -1,
                false => ceil_ms(debt + increment - self.capacity),
            };
            ([0, self.burst, self.room(debt), retry, ceil_ms(debt)], debt)
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Token,
    Gcra,
    Leaky,
}

impl Kind {
    const ALL: [Kind; 3] = [Kind::Token, Kind::Gcra, Kind::Leaky];

    fn name(self) -> &'static str {
        match self {
            Kind::Token => "token",
            Kind::Gcra => "gcra",
            Kind::Leaky => "leaky",
        }
    }

    /// The stored value for `debt` written at `now_us`.
    fn encode(self, meter: &Meter, debt: i128, now_us: i64) -> String {
        match self {
            Kind::Token => token_value(meter.capacity - debt, now_us),
            Kind::Gcra => format!("gcra:{}", ns(now_us) + debt),
            Kind::Leaky => format!("leaky:{}", ns(now_us) + debt),
        }
    }
}

/// A bucket's policy options for RL.ADMIT / RL.TTL / RL.REFUND.
fn bucket_opts(kind: Kind, limit: i64, window: i64, burst: i64) -> Vec<String> {
    c![
        "ALGO",
        kind.name(),
        "LIMIT",
        limit,
        "WINDOW",
        window,
        "BURST",
        burst
    ]
}

fn with(head: Vec<String>, tail: impl AsRef<[String]>) -> Vec<String> {
    let mut all = head;
    all.extend_from_slice(tail.as_ref());
    all
}

// ---------------------------------------------------------------------------
// Sliding window
// ---------------------------------------------------------------------------

#[test]
fn sliding_counts_in_aligned_windows_and_refuses_with_the_exact_backoff() {
    let server = Server::start();
    let mut con = server.client();
    let w = 60_000;
    let admit = c!["RL.ADMIT", "s", "ALGO", "sliding", "LIMIT", 3, "WINDOW", w];
    let peek = with(admit.clone(), c!["COST", 0]);
    let (now, r) = timed(
        &mut con,
        &[
            peek.clone(),
            admit.clone(),
            admit.clone(),
            admit.clone(),
            admit.clone(),
            c!["GET", "s"],
            c!["PEXPIRETIME", "s"],
        ],
    );
    let start = now - now.rem_euclid(w);
    let left = start + w - now;
    assert_eq!(ints(&r[0]), [1, 3, 3, 0, 0], "a peek on nothing");
    assert_eq!(ints(&r[1]), [1, 3, 2, 0, left + w]);
    assert_eq!(ints(&r[2]), [1, 3, 1, 0, left + w]);
    assert_eq!(ints(&r[3]), [1, 3, 0, 0, left + w]);
    // 3 in this window: a 4th fits once a third of the next window has
    // passed, when 3 * 2/3 + 1 = 3.
    assert_eq!(ints(&r[4]), [0, 3, 0, left + w / 3, left + w]);
    assert_eq!(text(&r[5]).unwrap(), format!("sliding:{start}:3:0"));
    assert_eq!(
        int(&r[6]),
        start + 2 * w,
        "expires when both windows have passed"
    );

    // Peeks and refusals change nothing.
    let before = raw_state(&mut con, &["s"]);
    let (now, r) = timed(&mut con, &[peek.clone(), admit.clone()]);
    let state = Sliding {
        start,
        current: 3,
        previous: 0,
    };
    assert_eq!(
        ints(&r[0]).to_vec(),
        sliding_expect(Some(state), 3, w, 0, now).0
    );
    assert_eq!(
        ints(&r[1]).to_vec(),
        sliding_expect(Some(state), 3, w, 1, now).0
    );
    assert_eq!(raw_state(&mut con, &["s"]), before);

    // A cost above the limit can never pass, and writes nothing.
    let (_, r) = timed(
        &mut con,
        &[c![
            "RL.ADMIT", "big", "ALGO", "sliding", "LIMIT", 3, "WINDOW", w, "COST", 4
        ]],
    );
    assert_eq!(ints(&r[0]), [0, 3, 3, -1, 0]);
    assert!(!exists(&mut con, "big"));

    // A lower limit applies at once (3 used of 2: even a peek is refused);
    // a higher one too.
    let lower = c!["RL.ADMIT", "s", "ALGO", "sliding", "LIMIT", 2, "WINDOW", w, "COST", 0];
    let higher = c!["RL.ADMIT", "s", "ALGO", "sliding", "LIMIT", 5, "WINDOW", w];
    let (now, r) = timed(&mut con, &[lower, higher]);
    let (want_lower, _) = sliding_expect(Some(state), 2, w, 0, now);
    let (want_higher, _) = sliding_expect(Some(state), 5, w, 1, now);
    assert_eq!(ints(&r[0]).to_vec(), want_lower);
    assert_eq!(ints(&r[1]).to_vec(), want_higher);
    if now - now.rem_euclid(w) == start {
        assert_eq!(want_lower[..3], [0, 2, 0]);
        assert_eq!(want_higher[..3], [1, 5, 1]);
    }
}

fn cmd_ints_strs(con: &mut Connection, cmd: &[String]) -> Vec<i64> {
    let words: Vec<&str> = cmd.iter().map(String::as_str).collect();
    cmd_ints(con, &words)
}

fn cmd_err_strs(con: &mut Connection, cmd: &[String]) -> String {
    let words: Vec<&str> = cmd.iter().map(String::as_str).collect();
    cmd_err(con, &words)
}

#[test]
fn sliding_weights_the_previous_window_by_what_is_left_of_it() {
    let server = Server::start();
    let mut con = server.client();
    let (w, limit) = (10_000, 1_000);
    // Previous window full (1000), 998 in this one: the 999th fits only once
    // W/1000 = 10 ms more of the previous window has slid out of view.
    let mut checked_branch = false;
    for attempt in 0..5 {
        let now0 = server_time_ms(&mut con);
        let start0 = now0 - now0.rem_euclid(w);
        let state = Sliding {
            start: start0,
            current: 998,
            previous: 1_000,
        };
        let key = format!("p:{attempt}");
        let (now, r) = timed(
            &mut con,
            &[
                c!["SET", key, state.encode()],
                c!["RL.ADMIT", key, "ALGO", "sliding", "LIMIT", limit, "WINDOW", w],
                c!["RL.TTL", key, "ALGO", "sliding", "LIMIT", limit, "WINDOW", w],
            ],
        );
        let (want, _) = sliding_expect(Some(state), limit, w, 1, now);
        assert_eq!(ints(&r[1]).to_vec(), want, "state {state:?} at {now}");
        assert_eq!(int(&r[2]), want[3].max(0), "RL.TTL is the same back-off");
        let left = start0 + w - now;
        if now - now.rem_euclid(w) == start0 && left > 20 {
            // The previous window weighs `left` ms: 1000*left + 999*W > 1000*W.
            assert_eq!(want[0], 0);
            assert_eq!(want[3], left - w / limit, "within this window");
            assert_eq!(want[2], 0);
            checked_branch = true;
            break;
        }
    }
    assert!(checked_branch, "never landed inside one window");

    // The previous window's count, partly in view: a state written one
    // window ago becomes the previous count.
    let now0 = server_time_ms(&mut con);
    let start0 = now0 - now0.rem_euclid(w);
    let old = Sliding {
        start: start0 - w,
        current: 600,
        previous: 999,
    };
    let (now, r) = timed(
        &mut con,
        &[
            c!["SET", "old", old.encode()],
            c!["RL.ADMIT", "old", "ALGO", "sliding", "LIMIT", limit, "WINDOW", w, "COST", 5],
            c!["GET", "old"],
            c!["PEXPIRETIME", "old"],
        ],
    );
    let (want, write) = sliding_expect(Some(old), limit, w, 5, now);
    assert_eq!(ints(&r[1]).to_vec(), want);
    if let Some(s) = write {
        assert_eq!(text(&r[2]).unwrap(), s.encode());
        assert_eq!(int(&r[3]), s.start + 2 * w);
        if s.start == start0 {
            assert_eq!(
                (s.current, s.previous),
                (5, 600),
                "the old current became previous"
            );
        }
    }
}

/// Many crafted states (current window, previous window, stale, none) and
/// costs: every reply, stored value and expiry must match the model.
#[test]
fn sliding_matches_the_model_on_crafted_states() {
    let server = Server::start();
    let mut con = server.client();
    let mut rng = Rng::new(0x5eed_0001);
    // How many cases took each path: (admitted, peeks, never, wait within
    // this window, wait into the next, refunds deleting, refunds writing).
    let mut seen = [0; 7];
    for case in 0..300 {
        // Windows of many lengths, so the server clock falls early, midway
        // and late in them whatever time the test runs at: every path is
        // taken on any run.
        let w = 10_000 + rng.below_i64(50_000);
        let limit = rng.below_i64(12) + 1;
        let now0 = server_time_ms(&mut con);
        let start0 = now0 - now0.rem_euclid(w);
        let state = match rng.below_i64(8) {
            0 => None,
            back => Some(Sliding {
                start: start0 - [0, 0, 0, 0, 1, 1, 2][back as usize - 1] * w,
                current: rng.below_i64(limit + 3),
                // Often none: a refund can only empty a limiter then.
                previous: rng.below_i64(limit + 3) * rng.below_i64(2),
            }),
        };
        let cost = rng.below_i64(limit + 2);
        let amount = rng.below_i64(4);
        let key = format!("s:{case}");
        let back = format!("s:{case}:refund");
        let setup = |k: &str| match state {
            Some(s) => c!["SET", k, s.encode()],
            None => c!["DEL", k],
        };
        let policy = c!["ALGO", "sliding", "LIMIT", limit, "WINDOW", w];
        let (now, r) = timed(
            &mut con,
            &[
                setup(&key),
                with(with(c!["RL.ADMIT", key], &policy), c!["COST", cost]),
                c!["GET", key],
                c!["PEXPIRETIME", key],
                setup(&back),
                with(with(c!["RL.REFUND", back], &policy), c!["COST", amount]),
                c!["GET", back],
                c!["PEXPIRETIME", back],
            ],
        );
        let (want, write) = sliding_expect(state, limit, w, cost, now);
        let what =
            format!("case {case}: {state:?}, limit {limit}, window {w}, cost {cost}, now {now}");
        assert_eq!(ints(&r[1]).to_vec(), want, "{what}");
        match write {
            Some(s) => {
                assert_eq!(text(&r[2]), Some(s.encode()), "{what}");
                assert_eq!(int(&r[3]), s.start + 2 * w, "{what}");
                assert_eq!(int(&r[3]), now + want[4], "expires when reset: {what}");
            }
            None => {
                // A crafted state has no TTL: a real refusal gives it one
                // that lasts until its reset, or deletes it if spent.
                let refused = want[0] == 0 && cost > 0;
                let (value, expiry) = match state {
                    None => (None, -2),
                    Some(_) if refused && want[4] == 0 => (None, -2),
                    Some(s) if refused => (Some(s.encode()), now + want[4]),
                    Some(s) => (Some(s.encode()), -1),
                };
                assert_eq!(text(&r[2]), value, "unchanged: {what}");
                assert_eq!(int(&r[3]), expiry, "{what}");
            }
        }
        let left = now - now.rem_euclid(w) + w - now;
        let path = match (want[0], cost, want[3]) {
            (1, 0, _) => 1,
            (1, _, _) => 0,
            (_, _, -1) => 2,
            (_, _, t) if t < left => 3,
            _ => 4,
        };
        seen[path] += 1;

        // RL.REFUND gives back from the current window, never below 0, and
        // answers the state after as a peek sees it.
        let v = in_view(state, w, now);
        let after = Sliding {
            current: (v.current - amount).max(0),
            ..v
        };
        let peek = sliding_expect(Some(after), limit, w, 0, now).0;
        let what = format!("refund {amount}: {what}");
        assert_eq!(ints(&r[5]).to_vec(), peek, "{what}");
        match state {
            None => assert_eq!((text(&r[6]), int(&r[7])), (None, -2), "{what}"),
            // Refunding nothing, or from an empty current window, gives
            // nothing back: the crafted value stays as set.
            Some(s) if amount == 0 || v.current == 0 => {
                assert_eq!((text(&r[6]), int(&r[7])), (Some(s.encode()), -1), "{what}")
            }
            Some(_) if after.current == 0 && after.previous == 0 => {
                assert_eq!((text(&r[6]), int(&r[7])), (None, -2), "deleted: {what}");
                seen[5] += 1;
            }
            Some(_) => {
                assert_eq!(text(&r[6]), Some(after.encode()), "{what}");
                assert_eq!(int(&r[7]), now + peek[4], "expires when reset: {what}");
                seen[6] += 1;
            }
        }
    }
    assert!(seen.iter().all(|&n| n >= 5), "paths taken: {seen:?}");
}

#[test]
fn sliding_refund_gives_back_from_the_current_window() {
    let server = Server::start_with(&["--notify-keyspace-events", "Ed"]);
    let mut con = server.client();
    common::subscribe!(pubsub = server, "__keyevent@*__:rl.*");

    let w = 60_000;
    let policy = c!["ALGO", "sliding", "LIMIT", 5, "WINDOW", w];
    let admit = with(c!["RL.ADMIT", "r"], &policy);
    let refund = |n: i64| with(c!["RL.REFUND", "r"], with(policy.clone(), c!["COST", n]));
    let (now, r) = timed(
        &mut con,
        &[
            with(admit.clone(), c!["COST", 3]),
            refund(2),
            c!["GET", "r"],
            c!["PEXPIRETIME", "r"],
            with(c!["RL.REFUND", "r"], &policy),
            c!["GET", "r"],
            refund(100),
            c!["EXISTS", "r"],
            refund(1),
        ],
    );
    let start = now - now.rem_euclid(w);
    let left = start + w - now;
    assert_eq!(ints(&r[0]), [1, 5, 2, 0, left + w]);
    assert_eq!(
        ints(&r[1]),
        [1, 5, 4, 0, left + w],
        "the state after, as a peek sees it"
    );
    assert_eq!(text(&r[2]).unwrap(), format!("sliding:{start}:1:0"));
    assert_eq!(int(&r[3]), start + 2 * w);
    assert_eq!(
        ints(&r[4]),
        [1, 5, 5, 0, 0],
        "a cost of 1 by default: empty"
    );
    assert_eq!(text(&r[5]), None, "an empty limiter is deleted");
    assert_eq!(ints(&r[6]), [1, 5, 5, 0, 0]);
    assert_eq!(int(&r[7]), 0);
    assert_eq!(ints(&r[8]), [1, 5, 5, 0, 0], "nothing to refund");

    // Two refunds that changed something: two events, none for the no-ops.
    for _ in 0..2 {
        let msg = pubsub.get_message().unwrap();
        assert_eq!(msg.get_channel_name(), "__keyevent@0__:rl.refund");
        assert_eq!(msg.get_payload::<String>().unwrap(), "r");
    }

    // With the previous window in view, a refund never goes below empty in
    // this window and the key lives only as long as the previous count counts.
    let now0 = server_time_ms(&mut con);
    let start0 = now0 - now0.rem_euclid(w);
    let state = Sliding {
        start: start0,
        current: 2,
        previous: 4,
    };
    let (now, r) = timed(
        &mut con,
        &[
            c!["SET", "r", state.encode()],
            refund(7),
            c!["GET", "r"],
            c!["PEXPIRETIME", "r"],
        ],
    );
    let v = in_view(Some(state), w, now);
    let after = Sliding { current: 0, ..v };
    assert_eq!(
        ints(&r[1]).to_vec(),
        sliding_expect(Some(after), 5, w, 0, now).0
    );
    if v.previous > 0 {
        assert_eq!(text(&r[2]), Some(after.encode()));
        assert_eq!(
            int(&r[3]),
            after.start + w,
            "gone when the previous count is"
        );
        assert_eq!(int(&r[3]), now + ints(&r[1])[4]);
    } else {
        assert_eq!(text(&r[2]), None);
    }
    let msg = pubsub.get_message().unwrap();
    assert_eq!(msg.get_channel_name(), "__keyevent@0__:rl.refund");
}

// ---------------------------------------------------------------------------
// Token bucket
// ---------------------------------------------------------------------------

#[test]
fn token_bucket_spends_refills_and_stores_its_credit() {
    let server = Server::start();
    let mut con = server.client();
    // 10 per 10 s: one token a second; 3 at most.
    let opts = bucket_opts(Kind::Token, 10, 10_000, 3);
    let admit = with(c!["RL.ADMIT", "t"], &opts);
    let (now, r) = timed_us(
        &mut con,
        &[
            admit.clone(),
            admit.clone(),
            admit.clone(),
            admit.clone(),
            with(c!["RL.TTL", "t"], &opts),
            c!["GET", "t"],
            c!["PEXPIRETIME", "t"],
        ],
    );
    assert_eq!(ints(&r[0]), [1, 3, 2, 0, 1000]);
    assert_eq!(ints(&r[1]), [1, 3, 1, 0, 2000]);
    assert_eq!(ints(&r[2]), [1, 3, 0, 0, 3000]);
    assert_eq!(ints(&r[3]), [0, 3, 0, 1000, 3000]);
    assert_eq!(int(&r[4]), 1000);
    assert_eq!(text(&r[5]).unwrap(), token_value(0, now));
    assert_eq!(
        int(&r[6]),
        expiry(now, 3_000 * NS_PER_MS),
        "expires when full again"
    );

    // Later: refilled continuously, to the µs.
    let meter = Meter::new(10, 10_000, 3, false);
    let tat = Some(ns(now) + meter.capacity);
    let (later, r) = timed_us(
        &mut con,
        &[
            admit.clone(),
            with(c!["RL.TTL", "t"], &opts),
            c!["GET", "t"],
        ],
    );
    let debt = meter.debt(tat, later);
    let (want, after) = meter.decide(debt, 1);
    assert_eq!(ints(&r[0]).to_vec(), want, "{} µs later", later - now);
    if later - now < 1_000_000 {
        let wait = ceil_ms(1_000 * NS_PER_MS - ns(later - now));
        assert_eq!(want[..4], [0, 3, 0, wait]);
    }
    assert_eq!(int(&r[1]), meter.decide(after, 1).0[3].max(0));

    // A bucket left alone for long is full, never more than full (its
    // value in the form builds with a ms clock wrote).
    let now0 = server_time_ms(&mut con);
    let (now, r) = timed_us(
        &mut con,
        &[
            c!["SET", "t", format!("token:0:{}", now0 - 60_000)],
            with(with(c!["RL.ADMIT", "t"], &opts), c!["COST", 0]),
            with(with(c!["RL.ADMIT", "t"], &opts), c!["COST", 3]),
            c!["GET", "t"],
        ],
    );
    assert_eq!(ints(&r[1]), [1, 3, 3, 0, 0]);
    assert_eq!(ints(&r[2]), [1, 3, 0, 0, 3000]);
    assert_eq!(text(&r[3]).unwrap(), token_value(0, now));
}

#[test]
fn token_burst_defaults_to_the_limit_and_is_validated() {
    let server = Server::start();
    let mut con = server.client();
    let (now, r) = timed_us(
        &mut con,
        &[
            c!["RL.ADMIT", "t", "ALGO", "token", "LIMIT", 5, "WINDOW", 10_000],
            c!["GET", "t"],
        ],
    );
    assert_eq!(ints(&r[0]), [1, 5, 4, 0, 2000]);
    assert_eq!(text(&r[1]).unwrap(), token_value(8_000_000_000, now));
    for algo in ["token", "gcra"] {
        let err = cmd_err(
            &mut con,
            &[
                "RL.ADMIT", "z", "ALGO", algo, "LIMIT", "5", "WINDOW", "10000", "BURST", "0",
            ],
        );
        assert!(err.starts_with("ERR BURST must be"), "{err}");
    }
    for algo in ["fixed", "sliding"] {
        let err = cmd_err(
            &mut con,
            &[
                "RL.ADMIT", "z", "ALGO", algo, "LIMIT", "5", "WINDOW", "10000", "BURST", "2",
            ],
        );
        assert_eq!(err, format!("ERR BURST does not apply to ALGO {algo}"));
    }
    assert!(!exists(&mut con, "z"));
}

#[test]
fn token_lowering_the_burst_caps_the_tokens_at_once() {
    let server = Server::start();
    let mut con = server.client();
    let wide = bucket_opts(Kind::Token, 10, 10_000, 10);
    let narrow = bucket_opts(Kind::Token, 10, 10_000, 3);
    let (now, r) = timed_us(
        &mut con,
        &[
            with(with(c!["RL.ADMIT", "t"], &wide), c!["COST", 2]),
            with(with(c!["RL.ADMIT", "t"], &narrow), c!["COST", 0]),
            with(c!["RL.ADMIT", "t"], &narrow),
            c!["GET", "t"],
            c!["PEXPIRETIME", "t"],
            with(with(c!["RL.ADMIT", "t"], &wide), c!["COST", 0]),
        ],
    );
    assert_eq!(ints(&r[0]), [1, 10, 8, 0, 2000]);
    assert_eq!(
        ints(&r[1]),
        [1, 3, 3, 0, 0],
        "8 tokens, capped to the new burst of 3"
    );
    assert_eq!(ints(&r[2]), [1, 3, 2, 0, 1000]);
    assert_eq!(text(&r[3]).unwrap(), token_value(2_000_000_000, now));
    assert_eq!(
        int(&r[4]),
        expiry(now, 1_000 * NS_PER_MS),
        "full again under the new burst"
    );
    // Raising the burst again does not bring the capped tokens back.
    assert_eq!(ints(&r[5]), [1, 10, 2, 0, 8000]);

    // The rate too: a slower refill applies to the credit already stored.
    let slow = bucket_opts(Kind::Token, 1, 10_000, 3);
    let (_, r) = timed(
        &mut con,
        &[with(with(c!["RL.ADMIT", "t"], &slow), c!["COST", 0])],
    );
    // 2 tokens' worth of credit at 1 s each is 0.2 tokens at 10 s each.
    assert_eq!(ints(&r[0])[..3], [1, 3, 0]);
}

/// One token every 100 µs, one at most, hammered by pipelined calls: each
/// call is a command of its own, so the server's clock moves between them.
/// Each admission's time, to the µs, is read back from the state it wrote.
/// A clock read in ms refills once per ms: it admits at most once in any
/// one ms, so its admissions number no more than the distinct ms they fall
/// in. Read in µs, the bucket refills every 100 µs and admits several times
/// a ms while the server is busy. Both bounds come from the server's own
/// times, whatever the machine's load (a loaded server idles between
/// batches, which only spreads the admissions out): never faster than the
/// rate, and well beyond what a ms clock allows.
#[test]
fn buckets_refill_to_the_microsecond() {
    let server = Server::start();
    let mut con = server.client();
    let cases: [(&str, Vec<String>); 3] = [
        (
            "token",
            with(
                c!["RL.ADMIT", "us"],
                bucket_opts(Kind::Token, 10_000, 1_000, 1),
            ),
        ),
        (
            "gcra",
            with(
                c!["RL.ADMIT", "us"],
                bucket_opts(Kind::Gcra, 10_000, 1_000, 1),
            ),
        ),
        // max_burst 0: one request of tolerance, 10,000 per second.
        ("throttle", c!["RL.THROTTLE", "us", 0, 10_000, 1]),
    ];
    let interval = 100_000; // ns
    for (what, call) in cases {
        let _: () = con.del("us").unwrap();
        // Each call and the GET of what it wrote in one transaction: the
        // key may expire 0.1 ms after an admission, and a server preempted
        // between two pipelined commands would find it gone. EXEC runs on
        // one snapshot of the clock, so its GET sees what its call wrote.
        let mut batch = vec![c!["TIME"]];
        for _ in 0..1_000 {
            batch.push(c!["MULTI"]);
            batch.push(call.clone());
            batch.push(c!["GET", "us"]);
            batch.push(c!["EXEC"]);
        }
        batch.push(c!["TIME"]);
        // The time (ns) of every admission, from the state it wrote.
        let mut admitted: Vec<i128> = Vec::new();
        let mut busy_us = 0;
        while busy_us < 50_000 {
            let replies = common::pipeline(&mut con, &batch).expect("pipeline");
            let n = replies.len();
            busy_us += common::time_us(&replies[n - 1]) - common::time_us(&replies[0]);
            for transaction in replies[1..n - 1].chunks(4) {
                let redis::Value::Array(pair) = &transaction[3] else {
                    panic!("{what}: EXEC answered {:?}", transaction[3]);
                };
                let r = ints(&pair[0]);
                // RL.THROTTLE answers `limited`, the others `admitted`.
                if (r[0] == 1) == (what == "throttle") {
                    continue;
                }
                let value = text(&pair[1]).expect("an admission writes its state");
                let fields: Vec<i128> = value
                    .split(':')
                    .skip(1)
                    .map(|f| f.parse().unwrap())
                    .collect();
                admitted.push(match fields[..] {
                    // token:0:<ms>:<ns into it>: the bucket emptied then.
                    [0, ms, into] => ms * NS_PER_MS + into,
                    // gcra:<tat>: one interval after the admission.
                    [tat] => tat - interval,
                    _ => panic!("{what}: {value}"),
                });
            }
        }
        for pair in admitted.windows(2) {
            assert!(
                pair[1] - pair[0] >= interval,
                "{what}: admitted at {} and {} ns: faster than one per 100 µs",
                pair[0],
                pair[1]
            );
        }
        let mut ms: Vec<i128> = admitted.iter().map(|t| t / NS_PER_MS).collect();
        ms.dedup();
        let (count, ms_clock_ceiling) = (admitted.len(), ms.len());
        eprintln!(
            "{what}: {count} admitted within {ms_clock_ceiling} distinct ms \
             over {busy_us} µs of calls"
        );
        assert!(
            count >= ms_clock_ceiling + (ms_clock_ceiling / 4).max(20),
            "{what}: {count} admitted within {ms_clock_ceiling} distinct ms: \
             hardly more than a ms clock allows ({ms_clock_ceiling})"
        );
    }
}

// ---------------------------------------------------------------------------
// GCRA
// ---------------------------------------------------------------------------

#[test]
fn gcra_stores_one_arrival_time_and_refunds_against_it() {
    let server = Server::start_with(&["--notify-keyspace-events", "Ed"]);
    let mut con = server.client();
    let opts = bucket_opts(Kind::Gcra, 10, 10_000, 3);
    let admit = with(c!["RL.ADMIT", "g"], &opts);
    let (now, r) = timed_us(
        &mut con,
        &[
            with(admit.clone(), c!["COST", 2]),
            c!["GET", "g"],
            c!["PEXPIRETIME", "g"],
            admit.clone(),
            admit.clone(),
            with(admit.clone(), c!["COST", 4]),
            with(c!["RL.TTL", "g"], &opts),
            with(c!["RL.REFUND", "g"], &opts),
            c!["GET", "g"],
            c!["PEXPIRETIME", "g"],
            with(with(c!["RL.REFUND", "g"], &opts), c!["COST", 9]),
            c!["EXISTS", "g"],
        ],
    );
    let now_ns = ns(now);
    assert_eq!(ints(&r[0]), [1, 3, 1, 0, 2000]);
    assert_eq!(
        text(&r[1]).unwrap(),
        format!("gcra:{}", now_ns + 2_000_000_000)
    );
    assert_eq!(int(&r[2]), expiry(now, 2_000_000_000));
    assert_eq!(ints(&r[3]), [1, 3, 0, 0, 3000]);
    assert_eq!(ints(&r[4]), [0, 3, 0, 1000, 3000]);
    assert_eq!(
        ints(&r[5]),
        [0, 3, 0, -1, 3000],
        "a cost beyond the burst never fits"
    );
    assert_eq!(int(&r[6]), 1000);
    assert_eq!(ints(&r[7]), [1, 3, 1, 0, 2000]);
    assert_eq!(
        text(&r[8]).unwrap(),
        format!("gcra:{}", now_ns + 2_000_000_000)
    );
    assert_eq!(int(&r[9]), expiry(now, 2_000_000_000));
    assert_eq!(ints(&r[10]), [1, 3, 3, 0, 0]);
    assert_eq!(int(&r[11]), 0, "empty: deleted");

    // A state far in the future (past the bucket and the booking
    // horizon) blocks for one bucket at most.
    let _: () = con.set("g", "gcra:9223372036854775807").unwrap();
    let refused = cmd_ints_strs(&mut con, &admit);
    assert_eq!(refused, [0, 3, 0, 1000, 3000]);
    // A lower burst keeps the debt within the horizon: 3 s of debt, burst
    // 1 (1 s) waits the 2 s past it and 1 s for the request.
    let one = bucket_opts(Kind::Gcra, 10, 10_000, 1);
    let (_, r) = timed(&mut con, &[with(c!["RL.ADMIT", "g"], &one)]);
    assert_eq!(ints(&r[0]), [0, 1, 0, 3000, 3000]);

    common::subscribe!(pubsub = server, "__keyevent@*__:rl.*");
    cmd_ints_strs(&mut con, &with(c!["RL.REFUND", "g"], &opts));
    let msg = pubsub.get_message().unwrap();
    assert_eq!(msg.get_channel_name(), "__keyevent@0__:rl.refund");
    assert_eq!(msg.get_payload::<String>().unwrap(), "g");
}

/// The same calls on a token bucket and a GCRA with the same parameters, in
/// one transaction per round so both see the same time: identical replies
/// and expiries, both matching the model, while real time refills them.
#[test]
#[serial]
fn gcra_answers_exactly_like_the_token_bucket() {
    let server = Server::start();
    let mut con = server.client();
    let (limit, window, burst) = (40, 10_000, 4); // one per 250 ms
    let meter = Meter::new(limit, window, burst, false);
    let token = with(
        c!["RL.ADMIT", "tk"],
        bucket_opts(Kind::Token, limit, window, burst),
    );
    let gcra = with(
        c!["RL.ADMIT", "gk"],
        bucket_opts(Kind::Gcra, limit, window, burst),
    );
    let mut rng = Rng::new(0x5eed_0002);
    let mut tat: Option<i128> = None;
    let (mut admitted, mut refused) = (0, 0);
    for round in 0..30 {
        let costs: Vec<i64> = (0..1 + rng.below_i64(4))
            .map(|_| rng.below_i64(burst + 2))
            .collect();
        let mut cmds = vec![];
        for &cost in &costs {
            cmds.push(with(token.clone(), c!["COST", cost]));
            cmds.push(with(gcra.clone(), c!["COST", cost]));
        }
        cmds.push(c!["PEXPIRETIME", "tk"]);
        cmds.push(c!["PEXPIRETIME", "gk"]);
        let (now, r) = timed_us(&mut con, &cmds);
        let mut debt = meter.debt(tat, now);
        for (i, &cost) in costs.iter().enumerate() {
            let (t, g) = (ints(&r[2 * i]), ints(&r[2 * i + 1]));
            assert_eq!(t, g, "round {round}, call {i}, cost {cost}");
            let (want, after) = meter.decide(debt, cost);
            assert_eq!(t.to_vec(), want, "round {round}, call {i}, cost {cost}");
            if want[0] == 1 && cost > 0 {
                admitted += 1;
                tat = Some(ns(now) + after);
            } else if want[0] == 0 {
                refused += 1;
            }
            debt = after;
        }
        let n = r.len();
        assert_eq!(int(&r[n - 2]), int(&r[n - 1]), "round {round}: same expiry");
        sleep(Duration::from_millis(40 + 40 * rng.below_i64(6) as u64));
    }
    assert!(
        admitted > 5 && refused > 5,
        "{admitted} admitted, {refused} refused"
    );
}

// ---------------------------------------------------------------------------
// Token, GCRA and leaky against the model, on crafted states
// ---------------------------------------------------------------------------

#[test]
fn buckets_match_the_model_on_crafted_states() {
    let server = Server::start();
    let mut con = server.client();
    let mut rng = Rng::new(0x5eed_0003);
    let mut seen = [0; 7];
    for case in 0..300 {
        let kind = Kind::ALL[case % 3];
        let limit = 1 + rng.below_i64(30);
        let window = [10_000, 15_000, 60_000, 7][rng.below_i64(4) as usize];
        let burst = rng.below_i64(6) + i64::from(kind != Kind::Leaky);
        let meter = Meter::new(limit, window, burst, kind == Kind::Leaky);
        let cap_ms = ceil_ms(meter.capacity).max(1);
        let now0 = server_time_ms(&mut con);
        let now0_ns = i128::from(now0) * NS_PER_MS;
        // The stored state, and what it means as a debt-free instant (TAT).
        let stored: Option<String> = match rng.below_i64(6) {
            0 => None,
            _ => Some(match kind {
                Kind::Token => {
                    let credit = rng.below_i64(cap_ms * 2 + 1) as i128 * NS_PER_MS / 2;
                    let last = now0 - rng.below_i64(cap_ms * 2) + rng.below_i64(3);
                    // Both forms: with the ns into the ms, and without
                    // (what builds with a ms clock wrote).
                    match rng.below_i64(2) {
                        0 => format!("token:{credit}:{last}"),
                        _ => format!("token:{credit}:{last}:{}", rng.below_i64(1_000_000)),
                    }
                }
                Kind::Gcra | Kind::Leaky => {
                    let tat = now0_ns
                        + i128::from(rng.below_i64(cap_ms * 3) - cap_ms) * NS_PER_MS
                        + i128::from(rng.below_i64(1_000_000));
                    format!("{}:{tat}", kind.name())
                }
            }),
        };
        let costs: Vec<i64> = (0..1 + rng.below_i64(3))
            .map(|_| rng.below_i64(burst + 3))
            .collect();
        let amount = rng.below_i64(4);
        let key = format!("b:{case}");
        let back = format!("b:{case}:refund");
        let opts = bucket_opts(kind, limit, window, burst);
        let setup = |k: &str| match &stored {
            Some(s) => c!["SET", k, s],
            None => c!["DEL", k],
        };
        let mut cmds = vec![
            setup(&back),
            with(with(c!["RL.REFUND", back], &opts), c!["COST", amount]),
            c!["GET", back],
            c!["PEXPIRETIME", back],
            setup(&key),
        ];
        for &cost in &costs {
            cmds.push(with(with(c!["RL.ADMIT", key], &opts), c!["COST", cost]));
        }
        cmds.push(with(c!["RL.TTL", key], &opts));
        cmds.push(c!["GET", key]);
        cmds.push(c!["PEXPIRETIME", key]);
        let (now, r) = timed_us(&mut con, &cmds);

        // A token bucket's credit and last refill (ns).
        let token_parts = |s: &str| {
            let parts: Vec<i128> = s.split(':').skip(1).map(|p| p.parse().unwrap()).collect();
            (
                parts[0],
                parts[1] * NS_PER_MS + parts.get(2).copied().unwrap_or(0),
            )
        };
        let debt_at_start = match (&stored, kind) {
            (None, _) => 0,
            (Some(s), Kind::Token) => {
                let (credit, last) = token_parts(s);
                let refill = (ns(now) - last).max(0);
                let level = (credit + refill).min(meter.capacity);
                match level < -HORIZON {
                    true => meter.capacity,
                    false => meter.capacity - level,
                }
            }
            (Some(s), _) => meter.debt(Some(s.split(':').nth(1).unwrap().parse().unwrap()), now),
        };
        // A stored time beyond a full bucket (gcra, leaky) or a refill time in
        // the future (token) is written back by the first real refusal.
        let beyond_at_start = match (&stored, kind) {
            (None, _) => false,
            (Some(s), Kind::Token) => {
                let (credit, last) = token_parts(s);
                let level = (credit + (ns(now) - last).max(0)).min(meter.capacity);
                last > ns(now) || level < -HORIZON
            }
            (Some(s), _) => {
                let tat: i128 = s.split(':').nth(1).unwrap().parse().unwrap();
                tat - ns(now) > meter.capacity + HORIZON
            }
        };
        let what = format!(
            "case {case}: {} limit {limit} window {window} burst {burst}, state {stored:?}, costs {costs:?}, now {now}",
            kind.name()
        );

        // RL.REFUND: `amount` requests' worth of debt given back, never
        // below empty; the reply is what a peek then sees.
        let refunded = (debt_at_start - i128::from(amount) * meter.interval).max(0);
        let peek = meter.decide(refunded, 0).0;
        assert_eq!(ints(&r[1]).to_vec(), peek, "refund {amount}: {what}");
        let stored_back = (text(&r[2]), int(&r[3]));
        match (&stored, refunded) {
            (None, _) => assert_eq!(stored_back, (None, -2), "refund {amount}: {what}"),
            // Refunding nothing, or to a bucket with no debt, gives nothing
            // back: the crafted value stays as it was set, without a TTL.
            (Some(s), _) if amount == 0 || debt_at_start == 0 => {
                assert_eq!(stored_back, (Some(s.clone()), -1), "refund 0: {what}")
            }
            (Some(_), 0) => {
                assert_eq!(stored_back, (None, -2), "emptied: deleted: {what}");
                seen[5] += 1;
            }
            (Some(_), _) => {
                let value = kind.encode(&meter, refunded, now);
                assert_eq!(
                    stored_back,
                    (Some(value), expiry(now, refunded)),
                    "refund {amount}: {what}"
                );
                seen[6] += 1;
            }
        }

        let mut debt = debt_at_start;
        let mut written = None;
        let mut beyond = beyond_at_start;
        for (i, &cost) in costs.iter().enumerate() {
            let (want, after) = meter.decide(debt, cost);
            assert_eq!(ints(&r[5 + i]).to_vec(), want, "call {i}: {what}");
            if want[0] == 1 && cost > 0 {
                written = Some((Some(kind.encode(&meter, after, now)), expiry(now, after)));
                beyond = false;
            } else if want[0] == 0 && cost > 0 && beyond {
                // Written back as it stands; a full token bucket is no state.
                written = match (kind, debt) {
                    (Kind::Token, 0) => Some((None, -2)),
                    _ => Some((Some(kind.encode(&meter, debt, now)), expiry(now, debt))),
                };
                beyond = false;
            } else if want[0] == 0 && cost > 0 && want[4] == 0 {
                // No debt: a crafted state still there (no TTL) is deleted,
                // as its expiry would have.
                if written.is_none() && stored.is_some() {
                    written = Some((None, -2));
                }
            } else if want[0] == 0 && cost > 0 && want[4] > 0 {
                // A state that would expire before its reset (a crafted one
                // has no TTL) is given that expiry by a real refusal.
                let unset = if stored.is_some() { -1 } else { -2 };
                // It ends when the debt is paid, rounded up to the ms.
                let (value, at) = written.clone().unwrap_or((stored.clone(), unset));
                if at < expiry(now, debt) {
                    written = Some((value, expiry(now, debt)));
                }
            }
            seen[match (want[0], cost, want[3]) {
                (1, 0, _) => 1,
                (1, _, _) => 0,
                (_, _, -1) => 2,
                _ => 3,
            }] += 1;
            if kind == Kind::Leaky && want[0] == 1 && want[3] > 0 {
                seen[4] += 1;
            }
            debt = after;
        }
        let n = r.len();
        let ttl = meter.decide(debt, 1).0[3].max(0);
        assert_eq!(int(&r[n - 3]), ttl, "RL.TTL: {what}");
        match written {
            Some((value, at)) => {
                assert_eq!(text(&r[n - 2]), value, "{what}");
                assert_eq!(int(&r[n - 1]), at, "{what}");
            }
            None => {
                assert_eq!(text(&r[n - 2]), stored, "unchanged: {what}");
                let none = if stored.is_some() { -1 } else { -2 };
                assert_eq!(int(&r[n - 1]), none, "{what}");
            }
        }
    }
    // (admitted, peeks, never, refused with a wait, leaky delays, refunds
    // emptying, refunds leaving some)
    assert!(seen.iter().all(|&n| n >= 10), "paths taken: {seen:?}");
}

// ---------------------------------------------------------------------------
// Leaky bucket
// ---------------------------------------------------------------------------

#[test]
fn leaky_bucket_delays_queued_requests_and_refuses_beyond_the_queue() {
    let server = Server::start();
    let mut con = server.client();
    for (window, interval) in [(1_000, 100), (10_000, 1_000)] {
        let key = format!("q:{window}");
        let opts = bucket_opts(Kind::Leaky, 10, window, 2);
        let admit = with(c!["RL.ADMIT", key], &opts);
        let ttl = with(c!["RL.TTL", key], &opts);
        let (now, r) = timed_us(
            &mut con,
            &[
                ttl.clone(),
                admit.clone(),
                ttl.clone(),
                admit.clone(),
                admit.clone(),
                admit.clone(),
                ttl.clone(),
                with(admit.clone(), c!["COST", 0]),
                c!["GET", key],
                c!["PEXPIRETIME", key],
                with(admit.clone(), c!["COST", 4]),
            ],
        );
        let i = interval;
        assert_eq!(int(&r[0]), 0, "an empty queue: no wait");
        assert_eq!(ints(&r[1]), [1, 2, 2, 0, i]);
        assert_eq!(int(&r[2]), i, "RL.TTL is the delay the next would get");
        assert_eq!(ints(&r[3]), [1, 2, 1, i, 2 * i]);
        assert_eq!(ints(&r[4]), [1, 2, 0, 2 * i, 3 * i]);
        assert_eq!(ints(&r[5]), [0, 2, 0, i, 3 * i]);
        assert_eq!(int(&r[6]), i);
        assert_eq!(
            ints(&r[7]),
            [1, 2, 0, 3 * i, 3 * i],
            "a peek: the wait, no slot"
        );
        let drained = ns(now) + i128::from(3 * i) * NS_PER_MS;
        assert_eq!(text(&r[8]).unwrap(), format!("leaky:{drained}"));
        assert_eq!(int(&r[9]), expiry(now, i128::from(3 * i) * NS_PER_MS));
        assert_eq!(
            ints(&r[10]),
            [0, 2, 0, -1, 3 * i],
            "more than the queue holds"
        );
    }

    // No queue: one at a time, the next refused until the interval passes.
    let opts = bucket_opts(Kind::Leaky, 10, 10_000, 0);
    let admit = with(c!["RL.ADMIT", "q0"], &opts);
    let (_, r) = timed(&mut con, &[admit.clone(), admit.clone()]);
    assert_eq!(ints(&r[0]), [1, 0, 0, 0, 1000]);
    assert_eq!(ints(&r[1]), [0, 0, 0, 1000, 1000]);

    // The queue defaults to the limit.
    let (_, r) = timed(
        &mut con,
        &[c![
            "RL.ADMIT", "qd", "ALGO", "leaky", "LIMIT", 4, "WINDOW", 10_000
        ]],
    );
    assert_eq!(ints(&r[0]), [1, 4, 4, 0, 2500]);
}

#[test]
fn leaky_refund_shortens_the_queue() {
    let server = Server::start();
    let mut con = server.client();
    let opts = bucket_opts(Kind::Leaky, 10, 10_000, 3);
    let admit = with(c!["RL.ADMIT", "q"], &opts);
    let (now, r) = timed_us(
        &mut con,
        &[
            with(admit.clone(), c!["COST", 3]),
            with(c!["RL.REFUND", "q"], &opts),
            admit.clone(),
            with(with(c!["RL.REFUND", "q"], &opts), c!["COST", 2]),
            c!["GET", "q"],
            c!["PEXPIRETIME", "q"],
            with(with(c!["RL.REFUND", "q"], &opts), c!["COST", 5]),
            c!["EXISTS", "q"],
        ],
    );
    assert_eq!(ints(&r[0]), [1, 3, 1, 0, 3000]);
    // 2 s of queue left: a peek would wait 2 s.
    assert_eq!(ints(&r[1]), [1, 3, 2, 2000, 2000]);
    assert_eq!(ints(&r[2]), [1, 3, 1, 2000, 3000]);
    assert_eq!(ints(&r[3]), [1, 3, 3, 1000, 1000]);
    assert_eq!(
        text(&r[4]).unwrap(),
        format!("leaky:{}", ns(now) + 1_000 * NS_PER_MS)
    );
    assert_eq!(int(&r[5]), expiry(now, 1_000 * NS_PER_MS));
    assert_eq!(ints(&r[6]), [1, 3, 3, 0, 0]);
    assert_eq!(int(&r[7]), 0);
}

// ---------------------------------------------------------------------------
// Every algorithm
// ---------------------------------------------------------------------------

/// Policy options making a limiter of each algorithm that admits two
/// requests at once, with the limit field of its replies and its remaining
/// count when empty and after one request. (A leaky queue of 1: one served
/// at once, one waiting.)
fn two_of_each() -> Vec<(&'static str, Vec<String>, i64, [i64; 2])> {
    vec![
        (
            "sliding",
            c!["ALGO", "sliding", "LIMIT", 2, "WINDOW", 60_000],
            2,
            [2, 1],
        ),
        (
            "token",
            c!["ALGO", "token", "LIMIT", 2, "WINDOW", 60_000],
            2,
            [2, 1],
        ),
        (
            "gcra",
            c!["ALGO", "gcra", "LIMIT", 2, "WINDOW", 60_000],
            2,
            [2, 1],
        ),
        (
            "leaky",
            c!["ALGO", "leaky", "LIMIT", 2, "WINDOW", 60_000, "BURST", 1],
            1,
            [1, 1],
        ),
    ]
}

#[test]
fn peeks_change_nothing_for_any_algorithm() {
    let server = Server::start();
    let mut con = server.client();
    for (name, opts, lim, rem) in two_of_each() {
        let admit = with(c!["RL.ADMIT", name], &opts);
        let peek = with(admit.clone(), c!["COST", 0]);
        let first = cmd_ints_strs(&mut con, &peek);
        assert_eq!(first[..4], [1, lim, rem[0], 0], "{name}: a peek on nothing");
        assert!(!exists(&mut con, name), "{name}: a peek writes nothing");
        assert_eq!(cmd_ints_strs(&mut con, &admit)[0], 1, "{name}");
        let before = raw_state(&mut con, &[name]);
        // Both in one transaction: same time, so the peek equals the
        // admission's view before it.
        let r = exec(&mut con, &[peek.clone(), peek.clone(), c!["RL.TTL", name]]);
        assert_eq!(ints(&r[0]), ints(&r[1]), "{name}");
        assert_eq!(ints(&r[0])[..3], [1, lim, rem[1]], "{name}");
        assert_eq!(raw_state(&mut con, &[name]), before, "{name}: unchanged");
        assert_eq!(cmd_ints_strs(&mut con, &admit)[0], 1, "{name}");
        let before = raw_state(&mut con, &[name]);
        let r = exec(&mut con, &[peek.clone(), admit.clone()]);
        assert_eq!(
            ints(&r[0])[..3],
            [1, lim, 0],
            "{name}: peeks pass even when full"
        );
        assert_eq!(ints(&r[1])[0], 0, "{name}: full");
        assert!(ints(&r[1])[3] > 0, "{name}: a back-off");
        assert_eq!(
            raw_state(&mut con, &[name]),
            before,
            "{name}: refusal changed it"
        );
    }
}

#[test]
fn reset_clears_any_limiter_and_only_strings() {
    let server = Server::start_with(&["--notify-keyspace-events", "Ed"]);
    let mut con = server.client();
    common::subscribe!(pubsub = server, "__keyevent@*__:rl.*");
    for (name, opts, lim, rem) in two_of_each() {
        let admit = with(c!["RL.ADMIT", name], &opts);
        cmd_ints_strs(&mut con, &admit);
        cmd_ints_strs(&mut con, &admit);
        assert_eq!(cmd_ints_strs(&mut con, &admit)[0], 0, "{name}: full");
        let hit = pubsub.get_message().unwrap();
        assert_eq!(hit.get_channel_name(), "__keyevent@0__:rl.hit");
        assert_eq!(hit.get_payload::<String>().unwrap(), name);

        assert_eq!(
            common::cmd_raw(&mut con, &["RL.RESET", name]),
            Value::Int(1)
        );
        assert!(!exists(&mut con, name), "{name}");
        let msg = pubsub.get_message().unwrap();
        assert_eq!(msg.get_channel_name(), "__keyevent@0__:rl.reset");
        assert_eq!(msg.get_payload::<String>().unwrap(), name);
        assert_eq!(
            common::cmd_raw(&mut con, &["RL.RESET", name]),
            Value::Int(0)
        );
        assert_eq!(
            cmd_ints_strs(&mut con, &admit)[..3],
            [1, lim, rem[1]],
            "{name}: fresh"
        );
    }
    // Any string counts (a limiter key is a plain string); other types are refused.
    let _: () = con.set("plain", "whatever").unwrap();
    assert_eq!(
        common::cmd_raw(&mut con, &["RL.RESET", "plain"]),
        Value::Int(1)
    );
    let _: () = con.rpush("list", "x").unwrap();
    let _: () = con.hset("hash", "max", "1").unwrap();
    for key in ["list", "hash"] {
        let err = cmd_err(&mut con, &["RL.RESET", key]);
        assert!(err.starts_with("WRONGTYPE"), "{err}");
        assert!(exists(&mut con, key));
    }
    // The only events: a hit and a reset per algorithm, and the plain reset.
    let msg = pubsub.get_message().unwrap();
    assert_eq!(msg.get_channel_name(), "__keyevent@0__:rl.reset");
    assert_eq!(msg.get_payload::<String>().unwrap(), "plain");
}

#[test]
fn a_refusal_fires_rl_hit_for_every_algorithm() {
    let server = Server::start_with(&["--notify-keyspace-events", "Ed"]);
    let mut con = server.client();
    common::subscribe!(pubsub = server, "__keyevent@*__:rl.*");
    for (name, opts, _, _) in two_of_each() {
        let admit = with(c!["RL.ADMIT", name], &opts);
        // Admissions, peeks, RL.TTL and a no-op refund fire nothing.
        cmd_ints_strs(&mut con, &with(c!["RL.REFUND", name], &opts));
        cmd_ints_strs(&mut con, &admit);
        cmd_ints_strs(&mut con, &with(admit.clone(), c!["COST", 0]));
        cmd_ints_strs(&mut con, &admit);
        common::cmd_raw(&mut con, &["RL.TTL", name]);
        assert_eq!(
            cmd_ints_strs(&mut con, &with(admit.clone(), c!["COST", 9]))[3],
            -1
        );
        let msg = pubsub.get_message().unwrap();
        assert_eq!(msg.get_channel_name(), "__keyevent@0__:rl.hit", "{name}");
        assert_eq!(msg.get_payload::<String>().unwrap(), name);
        assert_eq!(cmd_ints_strs(&mut con, &admit)[0], 0);
        let msg = pubsub.get_message().unwrap();
        assert_eq!(msg.get_channel_name(), "__keyevent@0__:rl.hit", "{name}");
    }
}

#[test]
fn another_algorithms_state_is_an_error_and_left_alone() {
    let server = Server::start();
    let mut con = server.client();
    let now = server_time_ms(&mut con);
    let start = now - now.rem_euclid(60_000);
    let states = [
        ("fixed", "5".to_string()),
        ("sliding", format!("sliding:{start}:1:0")),
        ("token", format!("token:1000000:{now}")),
        ("gcra", format!("gcra:{}", i128::from(now) * NS_PER_MS)),
        ("leaky", format!("leaky:{}", i128::from(now) * NS_PER_MS)),
        ("text", "hello".to_string()),
    ];
    for (holder, value) in &states {
        let key = format!("k:{holder}");
        let _: () = con.set(&key, value).unwrap();
    }
    let keys: Vec<String> = states.iter().map(|(h, _)| format!("k:{h}")).collect();
    let key_refs: Vec<&str> = keys.iter().map(String::as_str).collect();
    let before = raw_state(&mut con, &key_refs);
    for (holder, _) in &states {
        let key = format!("k:{holder}");
        for algo in ["fixed", "sliding", "token", "gcra", "leaky"] {
            if algo == *holder {
                continue;
            }
            let want = match algo {
                "fixed" => "ERR limiter key does not hold an integer counter".to_string(),
                _ => format!("ERR limiter key does not hold {algo} state"),
            };
            let opts = c!["ALGO", algo, "LIMIT", 5, "WINDOW", 60_000];
            for cmd in ["RL.ADMIT", "RL.TTL", "RL.REFUND"] {
                let err = cmd_err_strs(&mut con, &with(c![cmd, key], &opts));
                assert_eq!(err, want, "{cmd} {algo} on a key holding {holder}");
            }
            let peek = with(with(c!["RL.ADMIT", key], &opts), c!["COST", 0]);
            assert_eq!(
                cmd_err_strs(&mut con, &peek),
                want,
                "peek {algo} on {holder}"
            );
        }
    }
    assert_eq!(raw_state(&mut con, &key_refs), before);
    // Corrupt states of the right prefix are errors too.
    for bad in [
        "sliding:1:2",
        "token:-5:1:x",
        "gcra:",
        "leaky:x",
        "gcra:1:2",
    ] {
        let algo = bad.split(':').next().unwrap();
        let _: () = con.set("bad", bad).unwrap();
        let err = cmd_err(
            &mut con,
            &[
                "RL.ADMIT", "bad", "ALGO", algo, "LIMIT", "5", "WINDOW", "60000",
            ],
        );
        assert_eq!(
            err,
            format!("ERR limiter key does not hold {algo} state"),
            "{bad}"
        );
        assert_eq!(get(&mut con, "bad").unwrap(), bad);
    }
    let pong: String = redis::cmd("PING").query(&mut con).unwrap();
    assert_eq!(pong, "PONG");
}

#[test]
fn meta_hashes_choose_the_algorithm_and_burst_and_inline_options_win() {
    let server = Server::start();
    let mut con = server.client();
    let _: () = con
        .hset_multiple(
            "m:token",
            &[
                ("algorithm", "token"),
                ("max", "10"),
                ("duration", "10000"),
                ("burst", "3"),
            ],
        )
        .unwrap();
    let (now_us, r) = timed_us(
        &mut con,
        &[
            c!["RL.ADMIT", "a", "META", "m:token"],
            c!["GET", "a"],
            // Inline options win: a different algorithm (burst still from
            // META), a different burst.
            c!["RL.ADMIT", "b", "META", "m:token", "ALGO", "gcra"],
            c!["RL.ADMIT", "c", "META", "m:token", "BURST", 5],
            c!["RL.ADMIT", "d", "META", "m:token", "ALGO", "leaky"],
            c!["RL.ADMIT", "e", "META", "m:token", "ALGO", "sliding"],
            c!["RL.ADMIT", "f", "META", "m:token", "LIMIT", 0],
            c!["RL.TTL", "a", "META", "m:token"],
        ],
    );
    assert_eq!(ints(&r[0]), [1, 3, 2, 0, 1000]);
    assert_eq!(text(&r[1]).unwrap(), token_value(2_000_000_000, now_us));
    assert_eq!(ints(&r[2]), [1, 3, 2, 0, 1000]);
    assert_eq!(ints(&r[3]), [1, 5, 4, 0, 1000]);
    assert_eq!(ints(&r[4]), [1, 3, 3, 0, 1000], "leaky: 3 may wait");
    let (now, w) = (now_us.div_euclid(1_000), 10_000);
    let left = now - now.rem_euclid(w) + w - now;
    assert_eq!(
        ints(&r[5]),
        [1, 10, 9, 0, left + w],
        "sliding ignores the burst field"
    );
    assert_eq!(ints(&r[6]), [1, 0, 0, 0, 0], "LIMIT 0 is unlimited");
    assert_eq!(int(&r[7]), 0);
    assert!(!exists(&mut con, "f"));

    // Fields the algorithm does not use are never judged.
    let _: () = con
        .hset_multiple(
            "m:sliding",
            &[
                ("algorithm", "sliding"),
                ("max", "2"),
                ("duration", "10000"),
                ("burst", "lots"),
            ],
        )
        .unwrap();
    assert_eq!(
        cmd_ints(&mut con, &["RL.ADMIT", "s", "META", "m:sliding"])[..3],
        [1, 2, 1]
    );
    let err = cmd_err(
        &mut con,
        &["RL.ADMIT", "s2", "META", "m:sliding", "ALGO", "token"],
    );
    assert!(err.contains("'burst'"), "{err}");
    let err = cmd_err(
        &mut con,
        &["RL.ADMIT", "s", "META", "m:sliding", "BURST", "1"],
    );
    assert_eq!(err, "ERR BURST does not apply to ALGO sliding");
    // A leaky queue of 0 from META.
    let _: () = con
        .hset_multiple(
            "m:leaky",
            &[
                ("algorithm", "leaky"),
                ("max", "10"),
                ("duration", "10000"),
                ("burst", "0"),
            ],
        )
        .unwrap();
    let r = exec(
        &mut con,
        &[
            c!["RL.ADMIT", "l", "META", "m:leaky"],
            c!["RL.ADMIT", "l", "META", "m:leaky"],
        ],
    );
    assert_eq!(ints(&r[0]), [1, 0, 0, 0, 1000]);
    assert_eq!(ints(&r[1]), [0, 0, 0, 1000, 1000]);
    // No max: unlimited, nothing written.
    let _: () = con
        .hset_multiple(
            "m:free",
            &[("algorithm", "gcra"), ("duration", "1000"), ("burst", "2")],
        )
        .unwrap();
    assert_eq!(
        cmd_ints(&mut con, &["RL.ADMIT", "free", "META", "m:free"]),
        [1, 0, 0, 0, 0]
    );
    assert!(!exists(&mut con, "free"));
    // The operator changes the algorithm: the old state is not silently reused.
    let _: () = con.hset("m:token", "algorithm", "gcra").unwrap();
    let err = cmd_err(&mut con, &["RL.ADMIT", "a", "META", "m:token"]);
    assert_eq!(err, "ERR limiter key does not hold gcra state");
}

#[test]
fn a_cost_beyond_the_capacity_is_refused_for_good() {
    let server = Server::start();
    let mut con = server.client();
    let cases: &[(&str, Vec<String>, i64, [i64; 5])] = &[
        (
            "sliding",
            c!["ALGO", "sliding", "LIMIT", 5, "WINDOW", 10_000],
            6,
            [0, 5, 5, -1, 0],
        ),
        (
            "token",
            bucket_opts(Kind::Token, 5, 10_000, 3),
            4,
            [0, 3, 3, -1, 0],
        ),
        (
            "gcra",
            bucket_opts(Kind::Gcra, 5, 10_000, 3),
            4,
            [0, 3, 3, -1, 0],
        ),
        // The leaky capacity is the queue plus the request being served.
        (
            "leaky",
            bucket_opts(Kind::Leaky, 5, 10_000, 2),
            4,
            [0, 2, 2, -1, 0],
        ),
    ];
    for (name, opts, cost, want) in cases {
        let call = with(with(c!["RL.ADMIT", name], opts), c!["COST", cost]);
        assert_eq!(cmd_ints_strs(&mut con, &call), want, "{name}");
        assert!(!exists(&mut con, name), "{name}");
        // One less fits (an empty leaky queue: the head goes at once, the rest wait).
        let call = with(with(c!["RL.ADMIT", name], opts), c!["COST", cost - 1]);
        assert_eq!(cmd_ints_strs(&mut con, &call)[0], 1, "{name}");
    }
}

/// State is kept in ns since the epoch, and i64 ns end in April 2262. A
/// policy whose bucket spans past that (here one request per 1000 years)
/// must either be refused as too large or work exactly; today it is
/// accepted (the check is done in ms) and the stored time is clamped to
/// i64::MAX, so the debt read back is ~235 years instead of 1000-2000:
/// gcra and leaky admit every call, and token refuses its second token.
#[test]

fn a_bucket_beyond_the_ns_clock_is_refused_or_exact() {
    let server = Server::start();
    let mut con = server.client();
    let window = 31_536_000_000_000i64; // 1000 years in ms
    for (kind, burst) in [(Kind::Gcra, 2), (Kind::Leaky, 1), (Kind::Token, 2)] {
        let key = kind.name();
        let admit = with(c!["RL.ADMIT", key], bucket_opts(kind, 1, window, burst));
        let r = exec(&mut con, &[admit.clone(), admit.clone(), admit.clone()]);
        if let Value::ServerError(_) = &r[0] {
            for v in &r {
                let err = format!("{v:?}");
                assert!(err.contains("too large"), "{key}: {err}");
            }
            continue;
        }
        let replies: Vec<Vec<i64>> = r.iter().map(ints).collect();
        let admitted: Vec<i64> = replies.iter().map(|d| d[0]).collect();
        assert_eq!(
            admitted,
            [1, 1, 0],
            "{key}: two fit, then one per 1000 years: {replies:?}"
        );
        assert_eq!(
            replies[2][3], window,
            "{key}: the wait is one interval: {replies:?}"
        );
    }
}

// ---------------------------------------------------------------------------
// Replication
// ---------------------------------------------------------------------------

#[test]
fn a_replica_holds_the_same_state_and_expiry_for_every_algorithm() {
    let primary = Server::start_with(QUIET);
    let replica = Server::start();
    replica.replica_of(&primary);
    let mut con = primary.client();
    let _: () = con
        .hset_multiple(
            "meta",
            &[
                ("algorithm", "gcra"),
                ("max", "6"),
                ("duration", "120000"),
                ("burst", "3"),
            ],
        )
        .unwrap();
    // Intervals of 10 s or more: no key expires while the sides are compared.
    let policies: Vec<Vec<String>> = vec![
        c!["ALGO", "sliding", "LIMIT", 4, "WINDOW", 60_000],
        c!["ALGO", "sliding", "LIMIT", 9, "WINDOW", 30_000],
        bucket_opts(Kind::Token, 7, 100_000, 3),
        bucket_opts(Kind::Token, 3, 45_000, 5),
        bucket_opts(Kind::Gcra, 7, 100_000, 3),
        c!["META", "meta"],
        bucket_opts(Kind::Leaky, 5, 100_000, 2),
        bucket_opts(Kind::Leaky, 9, 180_000, 0),
    ];
    let keys: Vec<String> = (0..policies.len() * 2)
        .map(|i| format!("lim:{i}"))
        .collect();
    let mut rng = Rng::new(0x5eed_0004);
    for round in 0..12 {
        for (i, key) in keys.iter().enumerate() {
            let opts = &policies[i % policies.len()];
            let call = match (round + i) % 7 {
                0 => with(
                    c!["RL.REFUND", key],
                    with(opts.clone(), c!["COST", rng.below_i64(3)]),
                ),
                1 if round > 8 => c!["RL.RESET", key],
                _ => with(
                    c!["RL.ADMIT", key],
                    with(opts.clone(), c!["COST", rng.below_i64(4)]),
                ),
            };
            let words: Vec<&str> = call.iter().map(String::as_str).collect();
            let reply = cmd_raw(&mut con, &words);
            assert!(
                !matches!(reply, Value::ServerError(_)),
                "{words:?}: {reply:?}"
            );
        }
        sleep(Duration::from_millis(3)); // let the clock move between rounds
    }
    wait_replica_offset(&primary, &replica);
    let on_primary = snapshot(&mut con, &keys);
    let on_replica = snapshot(&mut replica.client(), &keys);
    assert_eq!(on_primary, on_replica);
    let live = on_primary
        .iter()
        .filter(|(_, v, at)| v.is_some() && *at > 0)
        .count();
    assert!(live >= keys.len() / 2, "{on_primary:?}");
    for prefix in ["sliding:", "token:", "gcra:", "leaky:"] {
        assert!(
            on_primary
                .iter()
                .any(|(_, v, _)| v.as_deref().is_some_and(|v| v.starts_with(prefix))),
            "no {prefix} state in {on_primary:?}"
        );
    }
}

#[test]
fn refusals_peeks_reads_and_empty_refunds_replicate_nothing() {
    let primary = Server::start_with(QUIET);
    let replica = Server::start();
    replica.replica_of(&primary);
    let mut con = primary.client();
    for (name, opts, _, _) in two_of_each() {
        let admit = with(c!["RL.ADMIT", name], &opts);
        cmd_ints_strs(&mut con, &admit);
        cmd_ints_strs(&mut con, &admit);
    }
    wait_replica_offset(&primary, &replica);
    let before = repl_offset(&mut con);
    for _ in 0..5 {
        for (name, opts, _, _) in two_of_each() {
            let admit = with(c!["RL.ADMIT", name], &opts);
            assert_eq!(cmd_ints_strs(&mut con, &admit)[0], 0, "{name}");
            cmd_ints_strs(&mut con, &with(admit.clone(), c!["COST", 0]));
            cmd_ints_strs(&mut con, &with(admit.clone(), c!["COST", 99]));
            let fresh = with(c!["RL.ADMIT", "fresh"], with(opts.clone(), c!["COST", 0]));
            cmd_ints_strs(&mut con, &fresh);
            common::cmd_raw(&mut con, &["RL.TTL", name]);
            let ttl = with(c!["RL.TTL", name], &opts);
            let words: Vec<&str> = ttl.iter().map(String::as_str).collect();
            assert!(matches!(cmd_raw(&mut con, &words), Value::Int(n) if n > 0));
            // Nothing to give back on a missing key; nothing to reset.
            cmd_ints_strs(&mut con, &with(c!["RL.REFUND", "missing"], &opts));
            assert_eq!(cmd_raw(&mut con, &["RL.RESET", "missing"]), Value::Int(0));
            // Errors neither.
            let other = if name == "gcra" { "token" } else { "gcra" };
            let wrong = c!["RL.ADMIT", name, "ALGO", other, "LIMIT", 2, "WINDOW", 60_000];
            cmd_err_strs(&mut con, &wrong);
        }
    }
    assert_eq!(repl_offset(&mut con), before, "nothing was propagated");
    assert!(!exists(&mut con, "fresh") && !exists(&mut con, "missing"));
}

#[test]
fn refunds_and_resets_reach_the_replica() {
    let primary = Server::start_with(QUIET);
    let replica = Server::start();
    replica.replica_of(&primary);
    let mut con = primary.client();
    let mut rcon = replica.client();
    for (name, opts, lim, _) in two_of_each() {
        let admit = with(c!["RL.ADMIT", name], &opts);
        cmd_ints_strs(&mut con, &with(admit.clone(), c!["COST", 2]));
        let before = repl_offset(&mut con);
        let refund = with(c!["RL.REFUND", name], &opts);
        let after = cmd_ints_strs(&mut con, &refund);
        assert_eq!(after[..2], [1, lim], "{name}");
        assert!(
            repl_offset(&mut con) > before,
            "{name}: a refund propagates"
        );
        wait_replica_offset(&primary, &replica);
        let keys = [name.to_string()];
        assert_eq!(
            snapshot(&mut con, &keys),
            snapshot(&mut rcon, &keys),
            "{name}"
        );
        assert!(exists(&mut rcon, name), "{name}: one left");
        assert_eq!(cmd_raw(&mut con, &["RL.RESET", name]), Value::Int(1));
        wait_replica_offset(&primary, &replica);
        assert!(!exists(&mut rcon, name), "{name}: reset on the replica too");
        // A refund that empties the limiter deletes the key everywhere.
        cmd_ints_strs(&mut con, &admit);
        cmd_ints_strs(&mut con, &with(refund.clone(), c!["COST", 5]));
        assert!(!exists(&mut con, name), "{name}");
        wait_replica_offset(&primary, &replica);
        assert!(!exists(&mut rcon, name), "{name}: deleted on the replica");
    }
}

/// WATCH sees refunds and resets that change a key, and nothing else.
#[test]
fn only_real_changes_break_a_watch() {
    let server = Server::start();
    let mut con = server.client();
    let opts = bucket_opts(Kind::Token, 3, 60_000, 3);
    cmd_ints_strs(&mut con, &with(c!["RL.ADMIT", "k"], &opts));
    let watched = |con: &mut Connection, call: Vec<String>, key: &str| -> bool {
        assert_eq!(cmd_raw(con, &["WATCH", key]), Value::Okay);
        let reply = {
            let words: Vec<&str> = call.iter().map(String::as_str).collect();
            cmd_raw(con, &words)
        };
        assert!(
            !matches!(reply, Value::ServerError(_)),
            "{call:?}: {reply:?}"
        );
        assert_eq!(cmd_raw(con, &["MULTI"]), Value::Okay);
        cmd_raw(con, &["PING"]);
        cmd_raw(con, &["EXEC"]) == Value::Nil
    };
    assert!(!watched(&mut con, c!["RL.RESET", "missing"], "missing"));
    assert!(!watched(
        &mut con,
        with(c!["RL.REFUND", "missing"], &opts),
        "missing"
    ));
    assert!(!watched(
        &mut con,
        with(c!["RL.ADMIT", "k"], with(opts.clone(), c!["COST", 0])),
        "k"
    ));
    assert!(!watched(
        &mut con,
        with(c!["RL.ADMIT", "k"], with(opts.clone(), c!["COST", 9])),
        "k"
    ));
    assert!(!watched(&mut con, with(c!["RL.TTL", "k"], &opts), "k"));
    assert!(
        watched(&mut con, with(c!["RL.REFUND", "k"], &opts), "k"),
        "a refund"
    );
    cmd_ints_strs(&mut con, &with(c!["RL.ADMIT", "k"], &opts));
    assert!(watched(&mut con, c!["RL.RESET", "k"], "k"), "a reset");
}

/// A refusal reports when the limiter is full again, and the state lives
/// that long, even when it was written under another policy: a token
/// bucket whose rate was slowed, a sliding window widened (here a state
/// whose TTL is from a narrower window).
#[test]
fn a_refused_state_lives_until_the_reset_it_reports() {
    let server = Server::start();
    let mut con = server.client();
    let fast = c!["ALGO", "token", "LIMIT", 10, "WINDOW", 1_000, "BURST", 1];
    let slow = c!["ALGO", "token", "LIMIT", 1, "WINDOW", 1_000, "BURST", 1];
    assert_eq!(
        cmd_ints_strs(&mut con, &with(c!["RL.ADMIT", "t"], &fast))[0],
        1
    );

    let now0 = server_time_ms(&mut con);
    let w = 10_000;
    let start = now0 - now0.rem_euclid(w);
    let _: () = redis::cmd("SET")
        .arg(&["s", &format!("sliding:{start}:3:0"), "PX", "50"])
        .query(&mut con)
        .unwrap();
    let sliding = c!["ALGO", "sliding", "LIMIT", 3, "WINDOW", w];

    for (key, policy) in [("t", &slow), ("s", &sliding)] {
        let call = with(c!["RL.ADMIT", key], policy);
        let (now_us, r) = timed_us(
            &mut con,
            &[c!["GET", key], call.clone(), c!["PEXPIRETIME", key]],
        );
        let refused = ints(&r[1]);
        assert_eq!(refused[0], 0, "{key}: {refused:?}");
        assert!(refused[4] > 500, "{key}: {refused:?}");
        // The reset ends when the state is spent: the window at its ms; the
        // bucket when its debt is paid, to the µs, rounded up to the ms (a
        // ms later than now + reset when the clock is between two ms).
        let lives_until = match key {
            "t" => {
                let value = text(&r[0]).unwrap();
                let parts: Vec<i128> = value
                    .split(':')
                    .skip(1)
                    .map(|p| p.parse().unwrap())
                    .collect();
                let (credit, last) = (parts[0], parts[1] * NS_PER_MS + parts[2]);
                let capacity = 1_000 * NS_PER_MS;
                let level = (credit + (ns(now_us) - last).max(0)).min(capacity);
                expiry(now_us, capacity - level)
            }
            _ => now_us.div_euclid(1_000) + refused[4],
        };
        assert_eq!(int(&r[2]), lives_until, "{key}: lives until its reset");
        // A second refusal has nothing more to write.
        let (_, r) = timed(&mut con, &[call.clone(), c!["PEXPIRETIME", key]]);
        assert_eq!(ints(&r[0])[0], 0);
        assert_eq!(int(&r[1]), lives_until);
    }
    // Past the old policy's expiry, both still refuse, as they said.
    sleep(Duration::from_millis(200));
    for (key, policy) in [("t", &slow), ("s", &sliding)] {
        let again = cmd_ints_strs(&mut con, &with(c!["RL.ADMIT", key], policy));
        assert_eq!(again[0], 0, "{key}: forgot early: {again:?}");
    }
}

/// A key left without a TTL by another writer, holding a state long spent
/// (equal to none), refused only because the cost can never fit (reset 0):
/// the refusal deletes it, as its expiry would have, on the replica too, so
/// no limiter key is left without a TTL. RL.THROTTLE does the same.
#[test]
fn a_refusal_deletes_a_spent_state_left_without_a_ttl() {
    let primary = Server::start();
    let replica = Server::start();
    replica.replica_of(&primary);
    let mut con = primary.client();
    let spent = [
        ("sliding", "sliding:1000:3:0"),
        ("token", "token:0:1000"),
        ("gcra", "gcra:0"),
        ("leaky", "leaky:0"),
    ];
    for (algo, value) in spent {
        let _: () = con.set(algo, value).unwrap();
        let call = c!["RL.ADMIT", algo, "ALGO", algo, "LIMIT", 5, "WINDOW", 1_000, "COST", 1_000];
        // Peeking writes nothing.
        let peek = c!["RL.ADMIT", algo, "ALGO", algo, "LIMIT", 5, "WINDOW", 1_000, "COST", 0];
        let _ = cmd_ints_strs(&mut con, &peek);
        assert_eq!(pttl(&mut con, algo), -1, "{algo}: a peek writes nothing");
        assert_eq!(
            cmd_ints_strs(&mut con, &call)[..5],
            [0, 5, 5, -1, 0],
            "{algo}"
        );
        let exists: i64 = con.exists(algo).unwrap();
        assert_eq!(exists, 0, "{algo}: deleted");
    }
    let _: () = con.set("cell", "0").unwrap();
    let limited = cmd_ints(&mut con, &["RL.THROTTLE", "cell", "0", "1", "10", "5"]);
    assert_eq!(limited[0], 1, "quantity 5 never fits");
    let exists: i64 = con.exists("cell").unwrap();
    assert_eq!(exists, 0, "RL.THROTTLE: deleted");

    wait_replica_offset(&primary, &replica);
    let mut on_replica = replica.client();
    let left: i64 = on_replica
        .exists(&["sliding", "token", "gcra", "leaky", "cell"])
        .unwrap();
    assert_eq!(left, 0, "the replica deleted them too");
}
