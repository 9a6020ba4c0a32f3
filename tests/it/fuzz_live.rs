//! Bad input at scale against a live server: at least 10,000 malformed RL
//! calls (random arity, random bytes, huge and negative numbers, wrong key
//! types, unknown and repeated options, corrupted valid calls). The server
//! stays up, no call reaches the module's panic guard, and every key no
//! accepted call touched is byte-for-byte unchanged (DUMP and PEXPIRETIME).
//!
//! The run prints its seed; replay one with `RL_SEED=<n>`.

use crate::common;

use std::collections::BTreeSet;

use crate::common::{error_text, info_field, pipeline, raw_state, server_time_ms, Rng, Server};
use redis::{Connection, Value};

const COMMANDS: &[&str] = &[
    "RL.ADMIT",
    "RL.ADMITALL",
    "RL.TTL",
    "RL.LIMIT",
    "RL.REFUND",
    "RL.RESET",
    "RL.THROTTLE",
    "rl.admit",
    "Rl.AdmitAll",
    "rl.throttle",
    "RL.ACQUIRE",
    "RL.RELEASE",
    "RL.EXTEND",
    "RL.INFLIGHT",
    "rl.acquire",
];

/// The keys an accepted call may legitimately write: the counters of the
/// commands that write (never a META hash, which is only read).
fn counter_keys(c: &Call) -> &[Vec<u8>] {
    let name = String::from_utf8_lossy(&c[0]).to_ascii_uppercase();
    match name.as_str() {
        "RL.ADMIT" | "RL.REFUND" | "RL.RESET" | "RL.THROTTLE" | "RL.ACQUIRE" | "RL.RELEASE"
        | "RL.EXTEND" => &c[1..c.len().min(2)],
        "RL.ADMITALL" => {
            let n = c
                .get(1)
                .and_then(|n| std::str::from_utf8(n).ok())
                .and_then(|n| n.parse::<usize>().ok())
                .unwrap_or(0);
            &c[2.min(c.len())..n.saturating_add(2).min(c.len())]
        }
        _ => &[],
    }
}

const OPTIONS: &[&str] = &[
    "ALGO", "LIMIT", "WINDOW", "BURST", "META", "COST", "POLICY", "algo", "limit", "window",
    "burst", "meta", "cost", "policy", "TTL", "ID", "ttl", "id", "SHADOW", "shadow", "PENALTY",
    "ALIGN", "CALENDAR", "TZ", "ESCALATE",
];

const UNKNOWN_OPTIONS: &[&str] = &[
    "LIMITS",
    "WINDOWS",
    "COSTS",
    "",
    "ALGO\0",
    "X",
    "BUR ST",
    "PX",
    "EX",
    "NX",
    "KEEPTTL",
    "POLICYPOLICY",
    "META\r\n",
    "LIMIT ",
];

const NUMBERS: &[&str] = &[
    "0",
    "1",
    "2",
    "5",
    "1000",
    "-1",
    "-0",
    "+1",
    " 1",
    "1 ",
    "01",
    "1.0",
    "1.5",
    "1e3",
    "0x10",
    "9223372036854775807",
    "9223372036854775806",
    "9223372036854775808",
    "-9223372036854775808",
    "-9223372036854775809",
    "18446744073709551615",
    "99999999999999999999999999999",
    "4611686018427387904",
    "2147483648",
    "4294967296",
    "nan",
    "inf",
    "-inf",
    "",
    "\0",
    "\u{0661}",
    "1\r\n",
    "86400000000",
    "922337203685477",
];

const ALGO_NAMES: &[&str] = &[
    "fixed",
    "sliding",
    "token",
    "gcra",
    "leaky",
    "FIXED",
    "Gcra",
    "gcra ",
    "token\0",
    "bogus",
    "",
    "leaky-bucket",
    "tokens",
];

/// Keys whose content the fuzz must not change unless a call on them was
/// accepted: limiters of every algorithm, META hashes, keys of other types,
/// and strings that are not valid state.
const SENTINELS: &[&str] = &[
    "s:fixed",
    "s:sliding",
    "s:token",
    "s:gcra",
    "s:leaky",
    "s:thr",
    "s:legacy",
    "s:meta",
    "s:badmeta",
    "s:list",
    "s:set",
    "s:zset",
    "s:text",
    "s:weird:gcra",
    "s:weird:token",
    "s:weird:sliding",
    "s:weird:empty",
    "s:weird:neg",
    "s:lease",
    "s:badlease",
];

fn setup(con: &mut Connection) {
    let cmds: Vec<Vec<&str>> = vec![
        vec![
            "RL.ADMIT", "s:fixed", "LIMIT", "5", "WINDOW", "600000", "COST", "2",
        ],
        vec![
            "RL.ADMIT",
            "s:sliding",
            "ALGO",
            "sliding",
            "LIMIT",
            "5",
            "WINDOW",
            "600000",
        ],
        vec![
            "RL.ADMIT", "s:token", "ALGO", "token", "LIMIT", "5", "WINDOW", "600000",
        ],
        vec![
            "RL.ADMIT", "s:gcra", "ALGO", "gcra", "LIMIT", "5", "WINDOW", "600000",
        ],
        vec![
            "RL.ADMIT", "s:leaky", "ALGO", "leaky", "LIMIT", "5", "WINDOW", "600000",
        ],
        vec!["RL.THROTTLE", "s:thr", "3", "5", "600"],
        vec!["SET", "s:legacy", "7"],
        vec![
            "HSET",
            "s:meta",
            "max",
            "5",
            "duration",
            "600000",
            "algorithm",
            "token",
            "burst",
            "3",
        ],
        vec![
            "HSET",
            "s:badmeta",
            "max",
            "many",
            "duration",
            "-1",
            "algorithm",
            "magic",
        ],
        vec!["RPUSH", "s:list", "a", "b"],
        vec!["SADD", "s:set", "x"],
        vec!["ZADD", "s:zset", "1", "x"],
        vec!["SET", "s:text", "hello"],
        vec!["SET", "s:weird:gcra", "gcra:abc"],
        vec!["SET", "s:weird:token", "token:1"],
        vec!["SET", "s:weird:sliding", "sliding:1:2", "PX", "600000"],
        vec!["SET", "s:weird:empty", ""],
        vec!["SET", "s:weird:neg", "-5"],
        vec![
            "RL.ACQUIRE",
            "s:lease",
            "LIMIT",
            "2",
            "TTL",
            "600000",
            "ID",
            "job",
        ],
        vec!["ZADD", "s:badlease", "1.5", "x"],
    ];
    for c in cmds {
        let v = common::cmd_raw(con, &c);
        assert!(!matches!(v, Value::ServerError(_)), "{c:?}: {v:?}");
    }
}

type Call = Vec<Vec<u8>>;

fn b(s: &str) -> Vec<u8> {
    s.as_bytes().to_vec()
}

fn key(rng: &mut Rng) -> Vec<u8> {
    match rng.below(10) {
        0..=4 => b(rng.pick(SENTINELS)),
        5..=7 => format!("z:{}", rng.below(50)).into_bytes(),
        8 => rng.bytes(12),
        _ => vec![b'k'; 1 + rng.below(20_000)],
    }
}

fn value(rng: &mut Rng) -> Vec<u8> {
    match rng.below(10) {
        0..=4 => b(rng.pick(NUMBERS)),
        5 => b(rng.pick(ALGO_NAMES)),
        6 => key(rng),
        7 => rng.bytes(16),
        8 => (rng.next() as i64).to_string().into_bytes(),
        _ => b(rng.pick(OPTIONS)),
    }
}

/// Any token at all.
fn token(rng: &mut Rng) -> Vec<u8> {
    match rng.below(4) {
        0 => b(rng.pick(OPTIONS)),
        1 => b(rng.pick(UNKNOWN_OPTIONS)),
        2 => key(rng),
        _ => value(rng),
    }
}

/// A plausible policy, to corrupt afterwards.
fn policy(rng: &mut Rng, out: &mut Call) {
    if rng.pct(70) {
        out.extend([b("ALGO"), b(rng.pick(&ALGO_NAMES[..5]))]);
    }
    if rng.pct(80) {
        out.extend([b("LIMIT"), b(rng.pick(&NUMBERS[..5]))]);
    }
    if rng.pct(80) {
        out.extend([b("WINDOW"), b(rng.pick(&["1", "1000", "60000"]))]);
    }
    if rng.pct(30) {
        out.extend([b("BURST"), b(rng.pick(&NUMBERS[..5]))]);
    }
    if rng.pct(30) {
        out.extend([
            b("META"),
            b(rng.pick(&["s:meta", "s:badmeta", "s:list", "z:m"])),
        ]);
    }
}

fn template(rng: &mut Rng) -> Call {
    let name = rng.pick(COMMANDS);
    let mut c = vec![b(name)];
    match name.to_ascii_uppercase().as_str() {
        "RL.ADMIT" | "RL.TTL" | "RL.REFUND" => {
            c.push(key(rng));
            policy(rng, &mut c);
            if rng.pct(40) {
                c.extend([b("COST"), b(rng.pick(&NUMBERS[..6]))]);
            }
        }
        "RL.ADMITALL" => {
            let n = 1 + rng.below(3);
            c.push(n.to_string().into_bytes());
            for _ in 0..n {
                c.push(key(rng));
            }
            if rng.pct(40) {
                c.extend([b("COST"), b(rng.pick(&NUMBERS[..6]))]);
            }
            for _ in 0..n {
                c.push(b("POLICY"));
                policy(rng, &mut c);
            }
        }
        "RL.LIMIT" | "RL.RESET" | "RL.INFLIGHT" => c.push(key(rng)),
        "RL.ACQUIRE" => {
            c.push(key(rng));
            if rng.pct(80) {
                c.extend([b("LIMIT"), b(rng.pick(&NUMBERS[..5]))]);
            }
            if rng.pct(80) {
                c.extend([b("TTL"), b(rng.pick(&["1", "1000", "60000"]))]);
            }
            if rng.pct(30) {
                c.extend([
                    b("META"),
                    b(rng.pick(&["s:meta", "s:badmeta", "s:list", "z:m"])),
                ]);
            }
            if rng.pct(40) {
                c.extend([b("ID"), b(rng.pick(&["job", "x", ""]))]);
            }
        }
        "RL.RELEASE" => c.extend([key(rng), b(rng.pick(&["job", "x", ""]))]),
        "RL.EXTEND" => c.extend([
            key(rng),
            b(rng.pick(&["job", "x", ""])),
            b("TTL"),
            b(rng.pick(&NUMBERS[..8])),
        ]),
        _ => {
            c.push(key(rng));
            for _ in 0..3 + rng.below(2) {
                c.push(b(rng.pick(&NUMBERS[..8])));
            }
        }
    }
    c
}

/// Makes a plausible call (most likely) wrong.
fn corrupt(rng: &mut Rng, c: &mut Call) {
    for _ in 0..1 + rng.below(3) {
        let at = 1 + rng.below(c.len().max(2) - 1);
        match rng.below(7) {
            0 if at < c.len() => c[at] = value(rng),
            1 if at < c.len() => {
                c.remove(at);
            }
            2 => {
                let opt = b(rng.pick(OPTIONS));
                c.insert(at.min(c.len()), value(rng));
                c.insert(at.min(c.len()), opt);
            }
            3 => {
                c.insert(at.min(c.len()), b(rng.pick(UNKNOWN_OPTIONS)));
            }
            4 => c.push(token(rng)),
            5 if c.len() > 2 => {
                let j = 1 + rng.below(c.len() - 1);
                let i = at.min(c.len() - 1);
                c.swap(i, j);
            }
            _ => {
                let n = rng.bytes(8);
                c.insert(at.min(c.len()), n);
            }
        }
    }
}

fn random_call(rng: &mut Rng) -> Call {
    match rng.below(100) {
        // Pure noise: a command name and random tokens.
        0..=34 => {
            let mut c = vec![b(rng.pick(COMMANDS))];
            for _ in 0..rng.below(12) {
                c.push(token(rng));
            }
            c
        }
        // A valid-looking call, corrupted.
        35..=89 => {
            let mut c = template(rng);
            corrupt(rng, &mut c);
            c
        }
        // Extremes: huge arity, huge numkeys, long arguments.
        90..=94 => {
            let mut c = vec![b(rng.pick(COMMANDS))];
            if rng.pct(50) {
                c[0] = b("RL.ADMITALL");
                c.push(b(rng.pick(&["0", "-1", "2147483648", "100000", "5000"])));
            }
            for _ in 0..rng.below(5_000) {
                c.push(token(rng));
            }
            c
        }
        // The getkeys-api path of RL.ADMITALL, fed garbage.
        _ => {
            let mut c = vec![b("COMMAND"), b("GETKEYS"), b("RL.ADMITALL")];
            for _ in 0..rng.below(10) {
                c.push(token(rng));
            }
            c
        }
    }
}

fn errors_counter(con: &mut Connection) -> i64 {
    info_field(con, "ratelimit", "ratelimit_errors")
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

#[test]
fn ten_thousand_malformed_calls_change_nothing_and_never_crash() {
    fuzz(10_000);
}

#[test]
#[ignore = "slow: run with make test-all"]
fn two_hundred_thousand_malformed_calls_change_nothing_and_never_crash() {
    fuzz(200_000);
}

fn fuzz(want_malformed: usize) {
    let mut rng = Rng::new(common::seed("bad input at scale"));

    let server = Server::start();
    let mut con = server.client();
    setup(&mut con);
    let pid_before = info_field(&mut con, "server", "process_id");
    let before = raw_state(&mut con, SENTINELS);
    assert!(
        before.iter().all(|(d, _)| d.is_some()),
        "every sentinel exists: {before:?}"
    );
    let module_errors_before = errors_counter(&mut con);

    let mut sent = 0usize;
    let mut malformed = 0usize;
    let mut aimed = 0usize;
    let mut accepted = 0usize;
    let mut checks = 0usize;
    let mut expirations = 0usize;
    let mut touched_ever: BTreeSet<&str> = BTreeSet::new();
    let mut panics = Vec::new();
    let mut last = before;
    while malformed < want_malformed && sent < want_malformed * 6 {
        let batch: Vec<Call> = (0..100).map(|_| random_call(&mut rng)).collect();
        let replies = pipeline(&mut con, &batch)
            .unwrap_or_else(|e| panic!("connection lost after {sent} calls: {e}"));
        // Sentinels an accepted call of this batch may have written.
        let mut touched: BTreeSet<&str> = BTreeSet::new();
        for (c, r) in batch.iter().zip(&replies) {
            sent += 1;
            let sentinels: Vec<&str> = counter_keys(c)
                .iter()
                .filter_map(|arg| SENTINELS.iter().find(|s| s.as_bytes() == &arg[..]))
                .copied()
                .collect();
            match r {
                Value::ServerError(_) => {
                    malformed += 1;
                    aimed += usize::from(!sentinels.is_empty());
                    let text = error_text(r).unwrap_or_default();
                    if text.contains("internal error") {
                        panics.push(format!("{:?} -> {text}", shorten(c)));
                    }
                }
                _ => {
                    accepted += 1;
                    touched.extend(sentinels);
                }
            }
        }
        // Every other sentinel is exactly as it was before the batch.
        let now = raw_state(&mut con, SENTINELS);
        let now_ms = server_time_ms(&mut con);
        for ((name, b), a) in SENTINELS.iter().zip(&last).zip(&now) {
            if touched.contains(name) {
                continue;
            }
            // A sentinel an earlier accepted call rewrote with a short
            // window may expire meanwhile: that is time, not the fuzz.
            let expired = b.1 > 0 && b.1 <= now_ms && a.0.is_none();
            if expired {
                expirations += 1;
                continue;
            }
            checks += 1;
            assert_eq!(b, a, "{name} changed, though no call on it was accepted");
        }
        touched_ever.extend(touched);
        last = now;
    }

    // Still up, still the same process, still answering.
    let pong: String = redis::cmd("PING").query(&mut con).expect("PING");
    assert_eq!(pong, "PONG");
    assert_eq!(
        info_field(&mut server.client(), "server", "process_id"),
        pid_before
    );
    assert!(
        panics.is_empty(),
        "the panic guard fired:\n{}",
        panics.join("\n")
    );
    assert!(
        malformed >= want_malformed,
        "only {malformed} errors in {sent} calls"
    );
    assert!(
        aimed >= want_malformed / 5,
        "only {aimed} bad calls aimed at sentinels"
    );
    let module_errors = errors_counter(&mut con) - module_errors_before;
    assert!(module_errors > 0, "no error reached the module");
    // The checks covered (nearly) every sentinel after (nearly) every batch.
    let batches = sent / 100;
    assert!(
        checks >= batches * SENTINELS.len() * 3 / 4,
        "{checks} checks in {batches} batches"
    );
    // And the limiters still work.
    let r = common::cmd_ints(
        &mut con,
        &["RL.ADMIT", "fresh", "LIMIT", "2", "WINDOW", "1000"],
    );
    assert_eq!(r, [1, 2, 1, 0, 1000]);
    println!(
        "bad input at scale: {sent} calls sent, {malformed} answered with an error \
         ({module_errors} by the module, the rest by the server; {aimed} aimed at a sentinel \
         key), {accepted} accepted; {} sentinel keys, {checks} DUMP+PEXPIRETIME comparisons \
         after each batch of 100, all identical (excused only in batches where an accepted \
         call named them: {touched_ever:?}; {expirations} expiries of such rewritten keys)",
        SENTINELS.len()
    );
}

/// A call, readable and short, for failure messages.
fn shorten(c: &Call) -> Vec<String> {
    c.iter()
        .take(12)
        .map(|a| {
            let s = String::from_utf8_lossy(&a[..a.len().min(40)]).into_owned();
            if a.len() > 40 {
                format!("{s}...({} bytes)", a.len())
            } else {
                s
            }
        })
        .collect()
}
