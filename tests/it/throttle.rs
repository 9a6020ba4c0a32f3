//! RL.THROTTLE against a real server: redis-cell's CL.THROTTLE reference
//! sequence, its own state format, peeks, very high rates, bad input,
//! events and replication.
//!
//! Calls whose expectations depend on the clock run inside one MULTI/EXEC
//! together with TIME (or inside one script): the server's time is frozen
//! there, so TIME is exactly the `now` the module used, to the µs.

use crate::common;

use crate::common::{
    assert_refused_naming, cmd_ints, cmd_raw, dump, int, ints, pexpiretime, repl_offset,
    server_time_ms, snapshot, text, timed, timed_us, wait_replica_offset, Server, QUIET,
};
use redis::{Commands, Connection, Value};
use valkey_ratelimit::algo::ceil_ms;

const NS_PER_MS: i128 = 1_000_000;
const NS_PER_S: i128 = 1_000_000_000;

fn throttle(key: &str, burst: i64, count: i64, period: i64, quantity: i64) -> Vec<String> {
    c!["RL.THROTTLE", key, burst, count, period, quantity]
}

/// The clock (µs) in ns.
fn ns(now_us: i64) -> i128 {
    i128::from(now_us) * 1_000
}

/// The ms an absolute ns time falls in, rounded up: a key expiring then
/// outlives it.
fn ms_at(at_ns: i128) -> i64 {
    ceil_ms(at_ns)
}

fn ceil_s(ns: i128) -> i64 {
    ((ns.max(0) + NS_PER_S - 1) / NS_PER_S) as i64
}

/// CL.THROTTLE's GCRA as redis-cell documents it, in ns, at `now_us`: the
/// reply and the new theoretical arrival time when one is stored.
fn model(
    tat: Option<i128>,
    (max_burst, count, period): (i64, i64, i64),
    quantity: i64,
    now_us: i64,
) -> ([i64; 5], Option<i128>) {
    let interval = i128::from(period) * NS_PER_S / i128::from(count);
    let tolerance = interval * i128::from(max_burst + 1);
    let now = ns(now_us);
    let tat = tat.unwrap_or(now).clamp(now, now + tolerance);
    let increment = i128::from(quantity) * interval;
    let new_tat = tat + increment;
    let allowed = increment <= tolerance && new_tat - tolerance <= now;
    let ttl = if allowed { new_tat - now } else { tat - now };
    let retry = match (allowed, increment <= tolerance) {
        (true, _) | (false, false) => -1,
        (false, true) => ceil_s(new_tat - tolerance - now),
    };
    let reply = [
        i64::from(!allowed),
        max_burst + 1,
        ((tolerance - ttl) / interval) as i64,
        retry,
        ceil_s(ttl),
    ];
    (reply, (allowed && quantity > 0).then_some(new_tat))
}

#[test]
fn follows_the_cl_throttle_reference_sequence() {
    let server = Server::start();
    let mut con = server.client();
    let (now, r) = timed_us(
        &mut con,
        &[
            throttle("t", 4, 1, 1, 6),
            throttle("t", 4, 1, 1, 1),
            throttle("t", 4, 1, 1, 1),
            throttle("t", 4, 1, 1, 1),
            throttle("t", 4, 1, 1, 1),
            throttle("t", 4, 1, 1, 1),
            throttle("t", 4, 1, 1, 1),
            c!["RL.THROTTLE", "t", 4, 1, 1],
            c!["GET", "t"],
            c!["PEXPIRETIME", "t"],
        ],
    );
    assert_eq!(ints(&r[0]), [1, 5, 5, -1, 0], "more than the burst: never");
    assert_eq!(ints(&r[1]), [0, 5, 4, -1, 1]);
    assert_eq!(ints(&r[2]), [0, 5, 3, -1, 2]);
    assert_eq!(ints(&r[3]), [0, 5, 2, -1, 3]);
    assert_eq!(ints(&r[4]), [0, 5, 1, -1, 4]);
    assert_eq!(ints(&r[5]), [0, 5, 0, -1, 5]);
    assert_eq!(ints(&r[6]), [1, 5, 0, 1, 5]);
    assert_eq!(ints(&r[7]), [1, 5, 0, 1, 5], "quantity defaults to 1");
    let tat = ns(now) + 5 * NS_PER_S;
    assert_eq!(text(&r[8]).unwrap(), format!("gcra:{tat}"));
    assert_eq!(int(&r[9]), ms_at(tat), "expires when the bucket is empty");

    // The reference goes on 3 s later: stand in for the wait by moving the
    // stored arrival time 3 s back.
    let now0 = server_time_ms(&mut con);
    let moved = i128::from(now0) * NS_PER_MS + 2 * NS_PER_S;
    let (now, r) = timed_us(
        &mut con,
        &[
            c!["SET", "t", format!("gcra:{moved}")],
            throttle("t", 4, 1, 1, 1),
            throttle("t", 4, 1, 1, 0),
            throttle("t", 4, 1, 1, 2),
            throttle("t", 4, 1, 1, 1),
        ],
    );
    let params = (4, 1, 1);
    let mut tat = Some(moved);
    for (i, q) in [1, 0, 2, 1].into_iter().enumerate() {
        let (want, next) = model(tat, params, q, now);
        assert_eq!(ints(&r[1 + i]).to_vec(), want, "call {i}, quantity {q}");
        tat = next.or(tat);
    }
    if now / 1_000 - now0 < 1_000 {
        assert_eq!(ints(&r[1]), [0, 5, 2, -1, 3]);
        assert_eq!(ints(&r[2]), [0, 5, 2, -1, 3]);
        assert_eq!(ints(&r[3]), [0, 5, 0, -1, 5]);
        assert_eq!(ints(&r[4]), [1, 5, 0, 1, 5]);
    }
}

#[test]
fn times_are_rounded_up_to_whole_seconds() {
    let server = Server::start();
    let mut con = server.client();
    // 3 per 10 s: one every 3.33 s; no burst beyond the one.
    let (now, r) = timed_us(
        &mut con,
        &[
            throttle("t", 0, 3, 10, 1),
            throttle("t", 0, 3, 10, 1),
            c!["PEXPIRETIME", "t"],
        ],
    );
    assert_eq!(ints(&r[0]), [0, 1, 0, -1, 4]);
    assert_eq!(ints(&r[1]), [1, 1, 0, 4, 4]);
    assert_eq!(
        int(&r[2]),
        ms_at(ns(now) + 3_333_333_333),
        "the key's expiry is in ms, rounded up"
    );
}

#[test]
fn quantity_zero_peeks_and_writes_nothing() {
    let server = Server::start();
    let mut con = server.client();
    assert_eq!(
        cmd_ints(&mut con, &["RL.THROTTLE", "t", "4", "1", "1", "0"]),
        [0, 5, 5, -1, 0]
    );
    assert!(!con.exists::<_, bool>("t").unwrap());
    cmd_ints(&mut con, &["RL.THROTTLE", "t", "4", "1", "10", "3"]);
    let before = (dump(&mut con, "t"), pexpiretime(&mut con, "t"));
    let (now, r) = timed_us(
        &mut con,
        &[
            throttle("t", 4, 1, 10, 0),
            throttle("t", 4, 1, 10, 0),
            c!["GET", "t"],
        ],
    );
    assert_eq!(ints(&r[0]), ints(&r[1]));
    let stored: i128 = text(&r[2]).unwrap()["gcra:".len()..].parse().unwrap();
    assert_eq!(
        ints(&r[0]).to_vec(),
        model(Some(stored), (4, 1, 10), 0, now).0
    );
    assert_eq!(ints(&r[0])[..3], [0, 5, 2]);
    assert_eq!((dump(&mut con, "t"), pexpiretime(&mut con, "t")), before);
}

#[test]
fn redis_cells_own_integer_state_is_read() {
    let server = Server::start();
    let mut con = server.client();
    // redis-cell stores the TAT as a plain integer of ns.
    let now0 = server_time_ms(&mut con);
    let tat = i128::from(now0) * NS_PER_MS + 3 * NS_PER_S;
    let _: () = redis::cmd("SET")
        .arg(&["cell", &tat.to_string(), "PX", "60000"])
        .query(&mut con)
        .unwrap();
    let before = (dump(&mut con, "cell"), pexpiretime(&mut con, "cell"));
    let (now, r) = timed_us(&mut con, &[throttle("cell", 4, 1, 1, 0)]);
    assert_eq!(ints(&r[0]).to_vec(), model(Some(tat), (4, 1, 1), 0, now).0);
    if now / 1_000 - now0 < 1_000 {
        assert_eq!(ints(&r[0]), [0, 5, 2, -1, 3]);
    }
    assert_eq!(
        (dump(&mut con, "cell"), pexpiretime(&mut con, "cell")),
        before,
        "a peek leaves redis-cell's value as it was"
    );
    let (now, r) = timed_us(
        &mut con,
        &[
            throttle("cell", 4, 1, 1, 1),
            c!["GET", "cell"],
            c!["PEXPIRETIME", "cell"],
        ],
    );
    let (want, next) = model(Some(tat), (4, 1, 1), 1, now);
    assert_eq!(ints(&r[0]).to_vec(), want);
    let next = next.expect("admitted");
    assert_eq!(text(&r[1]).unwrap(), format!("gcra:{next}"));
    assert_eq!(int(&r[2]), ms_at(next), "the expiry follows the new state");
    // A TAT in the past (or 0) is an empty bucket; one far ahead is clamped.
    for (value, want) in [
        ("0", [0, 5, 4, -1, 1]),
        ("-5", [0, 5, 4, -1, 1]),
        ("9223372036854775807", [1, 5, 0, 1, 5]),
    ] {
        let _: () = con.set("old", value).unwrap();
        let (_, r) = timed(&mut con, &[throttle("old", 4, 1, 1, 1)]);
        assert_eq!(ints(&r[0]), want, "{value}");
    }
}

#[test]
fn the_state_is_shared_with_rl_admit_gcra() {
    let server = Server::start();
    let mut con = server.client();
    // max_burst 4 at 1/s is GCRA with a burst of 5, one per 1000 ms.
    let (_, r) = timed(
        &mut con,
        &[
            throttle("t", 4, 1, 1, 3),
            c!["RL.ADMIT", "t", "ALGO", "gcra", "LIMIT", 1, "WINDOW", 1_000, "BURST", 5, "COST", 0],
            c!["RL.ADMIT", "t", "ALGO", "gcra", "LIMIT", 1, "WINDOW", 1_000, "BURST", 5, "COST", 2],
            throttle("t", 4, 1, 1, 0),
            throttle("t", 4, 1, 1, 1),
            c!["RL.TTL", "t", "ALGO", "gcra", "LIMIT", 1, "WINDOW", 1_000, "BURST", 5],
        ],
    );
    assert_eq!(ints(&r[0]), [0, 5, 2, -1, 3]);
    assert_eq!(ints(&r[1]), [1, 5, 2, 0, 3_000]);
    assert_eq!(ints(&r[2]), [1, 5, 0, 0, 5_000]);
    assert_eq!(ints(&r[3]), [0, 5, 0, -1, 5]);
    assert_eq!(ints(&r[4]), [1, 5, 0, 1, 5]);
    assert_eq!(int(&r[5]), 1_000);
}

/// 6000 per second with a burst of 6000: redis-cell's float arithmetic never
/// limits this. In one transaction (time frozen) the 6002nd call is limited.
#[test]
fn very_high_rates_still_limit() {
    let server = Server::start();
    let mut con = server.client();
    let params = (6000, 6000, 1);
    let calls: Vec<Vec<String>> = (0..6002)
        .map(|_| throttle("fast", 6000, 6000, 1, 1))
        .collect();
    let (now, r) = timed_us(&mut con, &calls);
    let mut tat = None;
    for (i, reply) in r.iter().enumerate() {
        let (want, next) = model(tat, params, 1, now);
        assert_eq!(ints(reply).to_vec(), want, "call {i}");
        tat = next.or(tat);
    }
    let limited: Vec<usize> = r
        .iter()
        .enumerate()
        .filter(|(_, v)| ints(v)[0] == 1)
        .map(|(i, _)| i)
        .collect();
    assert_eq!(limited, [6001], "exactly the call beyond burst + 1");
    assert_eq!(ints(&r[6000])[..3], [0, 6001, 0]);

    // The same inside a script, where time is frozen too.
    let script = r"
        local limited = 0
        for i = 1, 6001 do
            limited = limited + redis.call('RL.THROTTLE', KEYS[1], '6000', '6000', '1')[1]
        end
        local last = redis.call('RL.THROTTLE', KEYS[1], '6000', '6000', '1')
        return {limited, last[1], last[2], last[3], last[4]}
    ";
    let got: Vec<i64> = redis::cmd("EVAL")
        .arg(script)
        .arg(1)
        .arg("scripted")
        .query(&mut con)
        .unwrap();
    // interval 166666 ns: the next one fits in under a second; the bucket
    // is empty again after 6001 intervals, just over a second.
    assert_eq!(got, [0, 1, 6001, 0, 1]);
}

#[test]
fn bad_input_is_an_error_that_changes_nothing() {
    let server = Server::start();
    let mut con = server.client();
    let _: () = con.rpush("list", "x").unwrap();
    let _: () = con.set("text", "hello").unwrap();
    let _: () = con.set("float", "1.5").unwrap();
    let _: () = con.hset("hash", "f", "v").unwrap();
    let _: () = con.set("sliding", "sliding:0:1:0").unwrap();
    let _: () = con.set("token", "token:5:1").unwrap();
    cmd_ints(&mut con, &["RL.THROTTLE", "ok", "4", "1", "10"]);
    let keys = [
        "list", "text", "float", "hash", "sliding", "token", "ok", "new",
    ];
    let state = |con: &mut Connection| -> Vec<(Option<Vec<u8>>, i64)> {
        keys.iter()
            .map(|k| (dump(con, k), pexpiretime(con, k)))
            .collect()
    };
    let before = state(&mut con);
    let max = "9223372036854775807";
    let cases: &[(&[&str], &str)] = &[
        (
            &["RL.THROTTLE", "new", "1", "1"],
            "wrong number of arguments",
        ),
        (
            &["RL.THROTTLE", "new", "1", "1", "1", "1", "1"],
            "wrong number of arguments",
        ),
        (&["RL.THROTTLE", "ok", "4", "1", "10", "-1"], "quantity"),
        (&["RL.THROTTLE", "ok", "-1", "1", "10"], "max_burst"),
        (&["RL.THROTTLE", "ok", "4", "0", "10"], "count_per_period"),
        (&["RL.THROTTLE", "ok", "4", "-3", "10"], "count_per_period"),
        (&["RL.THROTTLE", "ok", "4", "1", "0"], "period"),
        (&["RL.THROTTLE", "ok", "4", "1", "-10"], "period"),
        (&["RL.THROTTLE", "ok", "4.5", "1", "10"], "max_burst"),
        (&["RL.THROTTLE", "ok", "4", "1.5", "10"], "count_per_period"),
        (&["RL.THROTTLE", "ok", "4", "1", "1e3"], "period"),
        (&["RL.THROTTLE", "ok", "4", "1", "10", "one"], "quantity"),
        (&["RL.THROTTLE", "ok", "4", "1", "10", ""], "quantity"),
        (&["RL.THROTTLE", "ok", " 4", "1", "10"], "max_burst"),
        (
            &["RL.THROTTLE", "new", max, "1", "1"],
            "max_burst is too large",
        ),
        (
            &["RL.THROTTLE", "new", "9223372036854775806", "1", "1"],
            "max_burst is too large",
        ),
        (
            &["RL.THROTTLE", "new", "1", max, "1"],
            "count_per_period is too large",
        ),
        (
            &["RL.THROTTLE", "new", "0", "2000000000", "1"],
            "count_per_period is too large",
        ),
        (
            &["RL.THROTTLE", "new", "1", "1", max],
            "period is too large",
        ),
        (
            &["RL.THROTTLE", "new", max, max, max],
            "max_burst is too large",
        ),
        (
            &["RL.THROTTLE", "new", "99999999999999999999", "1", "1"],
            "max_burst",
        ),
        (&["RL.THROTTLE", "list", "4", "1", "10"], "WRONGTYPE"),
        (&["RL.THROTTLE", "hash", "4", "1", "10"], "WRONGTYPE"),
        (&["RL.THROTTLE", "text", "4", "1", "10"], "gcra state"),
        (&["RL.THROTTLE", "float", "4", "1", "10"], "gcra state"),
        (&["RL.THROTTLE", "sliding", "4", "1", "10"], "gcra state"),
        (&["RL.THROTTLE", "token", "4", "1", "10", "0"], "gcra state"),
    ];
    for (call, mention) in cases {
        assert_refused_naming(&mut con, call, mention);
    }
    assert_eq!(state(&mut con), before, "no bad call touched a key");

    // Extreme but valid: a quantity that can never pass, a huge period.
    let never = cmd_ints(&mut con, &["RL.THROTTLE", "new", "4", "1", "10", max]);
    assert_eq!(never, [1, 5, 5, -1, 0]);
    // One per 100 years.
    let slow = cmd_ints(&mut con, &["RL.THROTTLE", "slow", "0", "1", "3153600000"]);
    assert_eq!(slow, [0, 1, 0, -1, 3_153_600_000]);
    let again = cmd_ints(&mut con, &["RL.THROTTLE", "slow", "0", "1", "3153600000"]);
    assert_eq!(again[..4], [1, 1, 0, 3_153_600_000]);
    assert!(!con.exists::<_, bool>("new").unwrap());
    let pong: String = redis::cmd("PING").query(&mut con).unwrap();
    assert_eq!(pong, "PONG");
}

#[test]
fn limited_calls_fire_rl_hit_and_only_allowed_ones_replicate() {
    let mut args = QUIET.to_vec();
    args.extend(["--notify-keyspace-events", "Ed"]);
    let primary = Server::start_with(&args);
    let replica = Server::start();
    replica.replica_of(&primary);
    let mut con = primary.client();
    common::subscribe!(pubsub = primary, "__keyevent@*__:rl.*");

    for _ in 0..3 {
        assert_eq!(
            cmd_ints(&mut con, &["RL.THROTTLE", "t", "2", "1", "60"])[0],
            0
        );
    }
    wait_replica_offset(&primary, &replica);
    let on_primary = snapshot(&mut con, &["t"]);
    assert_eq!(on_primary, snapshot(&mut replica.client(), &["t"]));
    assert!(on_primary[0].1.as_deref().unwrap().starts_with("gcra:"));

    let before = repl_offset(&mut con);
    for _ in 0..10 {
        assert_eq!(
            cmd_ints(&mut con, &["RL.THROTTLE", "t", "2", "1", "60"])[0],
            1
        );
        cmd_ints(&mut con, &["RL.THROTTLE", "t", "2", "1", "60", "0"]);
        cmd_ints(&mut con, &["RL.THROTTLE", "fresh", "2", "1", "60", "0"]);
        cmd_ints(&mut con, &["RL.THROTTLE", "t", "2", "1", "60", "9"]);
        let _ = cmd_raw(&mut con, &["RL.THROTTLE", "t", "2", "0", "60"]);
    }
    assert_eq!(repl_offset(&mut con), before, "nothing was propagated");
    for _ in 0..10 {
        let msg = pubsub.get_message().unwrap();
        assert_eq!(msg.get_channel_name(), "__keyevent@0__:rl.hit");
        assert_eq!(msg.get_payload::<String>().unwrap(), "t");
        // The quantity-9 call is limited too (it can never pass).
        let msg = pubsub.get_message().unwrap();
        assert_eq!(msg.get_channel_name(), "__keyevent@0__:rl.hit");
    }
    assert_eq!(
        cmd_ints(&mut con, &["RL.THROTTLE", "u", "2", "1", "60"])[0],
        0
    );
    assert!(repl_offset(&mut con) > before, "an allowed call propagates");
    wait_replica_offset(&primary, &replica);
    let keys = ["t", "u"];
    assert_eq!(
        snapshot(&mut con, &keys),
        snapshot(&mut replica.client(), &keys)
    );
}

/// The TAT is kept in ns since the epoch, and i64 ns end in April 2262. A
/// period reaching past that (here one per 10,000 years, burst 1) must
/// either be refused as too large or limit exactly; today it is accepted
/// (the check is done in ms), the stored TAT is clamped to i64::MAX, and
/// every call is allowed.
#[test]

fn a_period_beyond_the_ns_clock_is_refused_or_exact() {
    let server = Server::start();
    let mut con = server.client();
    let call = throttle("far", 1, 1, 315_360_000_000, 1);
    let (_, r) = timed(
        &mut con,
        &[call.clone(), call.clone(), call.clone(), c!["GET", "far"]],
    );
    if let Value::ServerError(_) = &r[0] {
        let err = format!("{:?}", r[0]);
        assert!(err.contains("too large"), "{err}");
        return;
    }
    let limited: Vec<i64> = r[..3].iter().map(|v| ints(v)[0]).collect();
    assert_eq!(
        limited,
        [0, 0, 1],
        "burst 1 + 1, then one per 10,000 years; state {:?}",
        text(&r[3])
    );
}

/// A limited call's state lives until the reset it reports, as for RL.ADMIT
/// ALGO gcra on the same state: a foreign key (redis-cell's plain ns
/// integer, or `gcra:`) left without a TTL, or expiring before its TAT, is
/// given that expiry by the refusal, so it neither lives for ever nor is
/// forgotten early (which would admit before the retry it told).
#[test]
fn a_limited_call_gives_foreign_state_the_expiry_of_its_reset() {
    let server = Server::start();
    let mut con = server.client();
    let now0 = server_time_ms(&mut con);
    // 1 per 10 s, no burst: a TAT 8 s ahead is limited for 8 s.
    let tat = i128::from(now0) * NS_PER_MS + 8 * NS_PER_S;
    let keys = [
        ("cell-nottl", tat.to_string(), None),
        ("gcra-nottl", format!("gcra:{tat}"), None),
        ("cell-short", tat.to_string(), Some("1000")),
    ];
    for (key, value, px) in &keys {
        let mut set = redis::cmd("SET");
        set.arg(key).arg(value);
        if let Some(px) = px {
            set.arg("PX").arg(px);
        }
        let _: () = set.query(&mut con).unwrap();
    }
    for (key, value, _) in &keys {
        let (_, r) = timed(
            &mut con,
            &[
                throttle(key, 0, 1, 10, 1),
                c!["GET", key],
                c!["PEXPIRETIME", key],
            ],
        );
        assert_eq!(ints(&r[0])[0], 1, "{key}: limited");
        assert_eq!(text(&r[1]).as_deref(), Some(value.as_str()), "{key}");
        assert_eq!(int(&r[2]), ms_at(tat), "{key}: expires at its TAT");
    }
    // A peek still writes nothing.
    let _: () = con.set("peeked", tat.to_string()).unwrap();
    assert_eq!(
        cmd_ints(&mut con, &["RL.THROTTLE", "peeked", "0", "1", "10", "0"])[0],
        0
    );
    assert_eq!(pexpiretime(&mut con, "peeked"), -1);
}
