//! Replicas and the AOF receive effects with absolute expiry, never the
//! time-dependent command: after any run of calls they agree exactly, on
//! both backends (the module, and the FUNCTION library on a server without
//! it). After a random workload (every algorithm, throttle, admitall,
//! refund, reset, peeks; and leases), a replica and an AOF-restarted primary
//! hold the same value (for leases: members and scores) and PEXPIRETIME for
//! every key, and refusals, peeks and reads leave `master_repl_offset` alone.

use crate::common;

use std::collections::BTreeMap;
use std::thread::sleep;
use std::time::Duration;

use crate::common::backend::{Backend, BOTH};
use crate::common::{
    aof_commands, cmd_ints, cmd_raw, error_text, ints, pexpiretime, repl_offset, show, snapshot,
    wait_replica_offset, Rng, Server, QUIET,
};
use redis::{Commands, Connection, Value};

#[test]
fn a_replica_holds_the_same_values_and_expiries() {
    for backend in BOTH {
        let primary = backend.start_with(QUIET);
        let replica = backend.start();
        replica.replica_of(&primary);
        let mut con = primary.client();

        let _: () = con
            .hset_multiple("meta", &[("max", "4"), ("duration", "30000")])
            .unwrap();
        let _: () = con.set("legacy", 1).unwrap(); // an INCR-made counter without TTL
        let mut keys: Vec<String> = (0..20).map(|i| format!("lim:{i}")).collect();
        keys.push("legacy".into());
        for round in 0..8 {
            for (i, key) in keys.iter().enumerate() {
                let window = (1_000 * (i + 1)).to_string();
                let cost = ((round + i) % 3).to_string();
                let call = match i % 2 {
                    0 => vec!["RL.ADMIT", key, "META", "meta", "COST", &cost],
                    _ => vec![
                        "RL.ADMIT", key, "LIMIT", "5", "WINDOW", &window, "COST", &cost,
                    ],
                };
                ints(&backend.raw(&mut con, &call));
            }
            sleep(Duration::from_millis(3)); // let the clock move between rounds
        }
        wait_replica_offset(&primary, &replica);
        let on_primary = snapshot(&mut con, &keys);
        let on_replica = snapshot(&mut replica.client(), &keys);
        assert_eq!(on_primary, on_replica, "{backend:?}");
        assert!(
            on_primary.iter().all(|(_, v, at)| v.is_some() && *at > 0),
            "{backend:?}: {on_primary:?}"
        );
    }
}

const ALGOS: [&str; 5] = ["fixed", "sliding", "token", "gcra", "leaky"];

/// Refusals, peeks (`COST 0`, a refund of nothing too), reads and errors,
/// each checked on its own and then repeated: nothing reaches the replica
/// until an admission does.
#[test]
fn refusals_peeks_and_reads_propagate_nothing() {
    for backend in BOTH {
        let primary = backend.start_with(QUIET);
        let replica = backend.start();
        replica.replica_of(&primary);
        let mut con = primary.client();
        // Full limiters of every kind, written by admissions.
        let fill: Vec<Vec<&str>> = vec![
            vec!["RL.ADMIT", "f", "LIMIT", "1", "WINDOW", "60000"],
            vec![
                "RL.ADMIT", "s", "ALGO", "sliding", "LIMIT", "1", "WINDOW", "60000",
            ],
            vec![
                "RL.ADMIT", "k", "ALGO", "token", "LIMIT", "1", "WINDOW", "60000",
            ],
            vec![
                "RL.ADMIT", "g", "ALGO", "gcra", "LIMIT", "1", "WINDOW", "60000",
            ],
            vec![
                "RL.ADMIT", "l", "ALGO", "leaky", "LIMIT", "1", "WINDOW", "60000", "BURST", "0",
            ],
            vec!["RL.THROTTLE", "t", "0", "1", "60"],
            vec!["HSET", "m", "max", "1", "duration", "60000"],
            // A fixed window at 2 of 2, its policy in `m2` too, and a limiter
            // of every algorithm with one of two used.
            vec!["RL.ADMIT", "two", "LIMIT", "2", "WINDOW", "60000"],
            vec!["RL.ADMIT", "two", "LIMIT", "2", "WINDOW", "60000"],
            vec!["HSET", "m2", "max", "2", "duration", "60000"],
        ];
        for call in &fill {
            let r = backend.raw(&mut con, call);
            assert!(error_text(&r).is_none(), "{backend:?} {call:?}: {r:?}");
        }
        let half: Vec<String> = ALGOS.iter().map(|algo| format!("{algo}-k")).collect();
        for (algo, key) in ALGOS.iter().zip(&half) {
            let call = [
                "RL.ADMIT", key, "ALGO", algo, "LIMIT", "2", "WINDOW", "60000",
            ];
            assert_eq!(ints(&backend.raw(&mut con, &call))[0], 1, "{backend:?}");
        }
        wait_replica_offset(&primary, &replica);
        let offset = repl_offset(&mut con);
        let mut quiet: Vec<Vec<&str>> = vec![
            vec!["RL.ADMIT", "f", "LIMIT", "1", "WINDOW", "60000"],
            vec!["RL.ADMIT", "f", "META", "m"],
            vec![
                "RL.ADMIT", "s", "ALGO", "sliding", "LIMIT", "1", "WINDOW", "60000",
            ],
            vec![
                "RL.ADMIT", "k", "ALGO", "token", "LIMIT", "1", "WINDOW", "60000",
            ],
            vec![
                "RL.ADMIT", "g", "ALGO", "gcra", "LIMIT", "1", "WINDOW", "60000",
            ],
            vec![
                "RL.ADMIT", "l", "ALGO", "leaky", "LIMIT", "1", "WINDOW", "60000", "BURST", "0",
            ],
            vec![
                "RL.ADMIT", "g", "ALGO", "gcra", "LIMIT", "1", "WINDOW", "60000", "COST", "0",
            ],
            vec![
                "RL.ADMIT", "new", "ALGO", "token", "LIMIT", "1", "WINDOW", "60000", "COST", "0",
            ],
            vec![
                "RL.ADMIT", "new", "ALGO", "token", "LIMIT", "1", "WINDOW", "60000", "COST", "5",
            ],
            vec!["RL.ADMIT", "free"],
            // Issue 38: a booking beyond max_ms, an error, a cancel of a
            // slot reached.
            vec![
                "RL.ADMIT", "g", "ALGO", "gcra", "LIMIT", "1", "WINDOW", "60000", "RESERVE", "10",
            ],
            vec![
                "RL.ADMIT", "f", "LIMIT", "1", "WINDOW", "60000", "RESERVE", "10",
            ],
            vec![
                "RL.REFUND",
                "g",
                "ALGO",
                "gcra",
                "LIMIT",
                "1",
                "WINDOW",
                "60000",
                "AT",
                "1",
            ],
            vec!["RL.THROTTLE", "t", "0", "1", "60"],
            vec!["RL.THROTTLE", "t", "0", "1", "60", "0"],
            vec!["RL.TTL", "f", "LIMIT", "1", "WINDOW", "60000"],
            vec![
                "RL.TTL", "k", "ALGO", "token", "LIMIT", "1", "WINDOW", "60000",
            ],
            vec!["RL.LIMIT", "m"],
            vec![
                "RL.REFUND",
                "f",
                "LIMIT",
                "1",
                "WINDOW",
                "60000",
                "COST",
                "0",
            ],
            vec![
                "RL.REFUND",
                "new",
                "ALGO",
                "gcra",
                "LIMIT",
                "1",
                "WINDOW",
                "60000",
            ],
            vec!["RL.RESET", "new"],
            vec![
                "RL.ADMITALL",
                "2",
                "x",
                "f",
                "POLICY",
                "LIMIT",
                "1",
                "WINDOW",
                "60000",
                "POLICY",
                "LIMIT",
                "1",
                "WINDOW",
                "60000",
            ],
            vec![
                "RL.ADMITALL",
                "2",
                "x",
                "y",
                "COST",
                "0",
                "POLICY",
                "LIMIT",
                "1",
                "WINDOW",
                "9",
                "POLICY",
                "META",
                "m",
            ],
            vec!["RL.ADMIT", "f", "LIMIT", "x", "WINDOW", "60000"],
            vec!["RL.ADMIT", "two", "META", "m2"],
            vec![
                "RL.ADMIT", "two", "LIMIT", "2", "WINDOW", "60000", "COST", "0",
            ],
            vec![
                "RL.ADMIT", "fresh", "LIMIT", "2", "WINDOW", "60000", "COST", "0",
            ],
            vec![
                "RL.ADMIT", "two", "LIMIT", "2", "WINDOW", "60000", "COST", "9",
            ],
            vec!["RL.ADMIT", "unlimited"],
            vec!["RL.TTL", "two", "LIMIT", "2"],
            vec!["RL.LIMIT", "m2"],
            vec!["RL.ADMIT", "two", "LIMIT", "x"],
        ];
        for (algo, key) in ALGOS.iter().zip(&half) {
            quiet.push(vec![
                "RL.REFUND",
                key,
                "ALGO",
                algo,
                "LIMIT",
                "2",
                "WINDOW",
                "60000",
                "COST",
                "0",
            ]);
        }
        // Each call alone, then the lot again and again as the clock moves.
        for round in 0..20 {
            let refused = ["RL.ADMIT", "two", "LIMIT", "2", "WINDOW", "60000"];
            assert_eq!(ints(&backend.raw(&mut con, &refused))[0], 0, "{backend:?}");
            for call in &quiet {
                let reply = backend.raw(&mut con, call);
                if matches!(call[..2], ["RL.TTL", "two"] | ["RL.LIMIT", "m2"]) {
                    assert!(
                        matches!(reply, Value::Int(_)),
                        "{backend:?} {call:?}: {reply:?}"
                    );
                }
                if round == 0 {
                    assert_eq!(
                        repl_offset(&mut con),
                        offset,
                        "{backend:?}: {call:?} propagated"
                    );
                }
            }
        }
        assert_eq!(
            repl_offset(&mut con),
            offset,
            "{backend:?}: nothing was propagated"
        );
        let admitted = ["RL.ADMIT", "other", "LIMIT", "2", "WINDOW", "60000"];
        assert_eq!(ints(&backend.raw(&mut con, &admitted))[0], 1, "{backend:?}");
        assert!(
            repl_offset(&mut con) > offset,
            "{backend:?}: an admission does propagate"
        );
    }
}

#[test]
fn an_aof_restart_keeps_every_value_and_absolute_expiry() {
    for backend in BOTH {
        let mut server = backend.start_with(&["--appendonly", "yes", "--appendfsync", "always"]);
        let mut con = server.client();
        let _: () = con
            .hset_multiple("meta", &[("max", "3"), ("duration", "20000")])
            .unwrap();
        let admit = |con: &mut Connection, key: &str| -> Vec<i64> {
            ints(&backend.raw(con, &["RL.ADMIT", key, "META", "meta"]))
        };
        let keys: Vec<String> = (0..10).map(|i| format!("lim:{i}")).collect();
        for (i, key) in keys.iter().enumerate() {
            for _ in 0..=i % 4 {
                admit(&mut con, key);
            }
            sleep(Duration::from_millis(2));
        }
        // lim:3 and lim:7 took 4 calls against a limit of 3: over budget.
        assert_eq!(admit(&mut con, "lim:3")[0], 0, "{backend:?}");
        let before = snapshot(&mut con, &keys);
        drop(con);

        server.stop();
        sleep(Duration::from_millis(1_000));
        backend.restart(&mut server);
        let mut con = server.client();
        let after = snapshot(&mut con, &keys);
        assert_eq!(
            before, after,
            "{backend:?}: a restart neither resets nor extends a window"
        );

        let refused = admit(&mut con, "lim:3");
        assert_eq!(
            refused[0], 0,
            "{backend:?}: still over budget after the restart"
        );
        let at = pexpiretime(&mut con, "lim:3");
        let (secs, micros): (i64, i64) = redis::cmd("TIME").query(&mut con).unwrap();
        let now = secs * 1000 + micros / 1000;
        assert!(
            (refused[3] - (at - now)).abs() <= 5,
            "{backend:?}: retry {} vs {}",
            refused[3],
            at - now
        );
    }
}

/// What the module's fixed window propagates: a new window is `SET … PXAT`,
/// a call in the same window only the counter's delta, and a refusal
/// nothing. Module only: the library restates every write as `SET … PXAT`.
#[test]
fn module_only_a_fixed_window_propagates_set_pxat_then_only_deltas() {
    let server = Server::start_with(&["--appendonly", "yes", "--appendfsync", "always"]);
    let mut con = server.client();
    let admit = ["RL.ADMIT", "fw", "LIMIT", "3", "WINDOW", "60000"];
    cmd_ints(&mut con, &admit);
    let at = pexpiretime(&mut con, "fw");
    cmd_ints(&mut con, &[&admit[..], &["COST", "2"]].concat());
    assert_eq!(cmd_ints(&mut con, &admit)[0], 0, "over the limit");
    cmd_ints(
        &mut con,
        &["RL.REFUND", "fw", "LIMIT", "3", "WINDOW", "60000"],
    );
    let value: String = con.get("fw").unwrap();
    assert_eq!(value, "2");

    let ours: Vec<Vec<String>> = aof_commands(&server.dir)
        .into_iter()
        .filter(|c| c.get(1).map(String::as_str) == Some("fw"))
        .collect();
    let words = |c: &[&str]| c.iter().map(|w| w.to_string()).collect::<Vec<_>>();
    assert_eq!(
        ours,
        vec![
            words(&["SET", "fw", "1", "PXAT", &at.to_string()]),
            words(&["INCRBY", "fw", "2"]),
            words(&["INCRBY", "fw", "-1"]),
        ]
    );
}

/// In the module, another algorithm whose expiry holds (the sliding window,
/// within one window) restates only its value: `SET … KEEPTTL`. Replicas
/// still agree. Module only, as above.
#[test]
fn module_only_an_unchanged_expiry_propagates_as_keepttl() {
    let primary = Server::start_with(&["--appendonly", "yes", "--appendfsync", "always"]);
    let replica = Server::start();
    replica.replica_of(&primary);
    let mut con = primary.client();
    let admit = [
        "RL.ADMIT", "sw", "ALGO", "sliding", "LIMIT", "5", "WINDOW", "60000",
    ];
    cmd_ints(&mut con, &admit);
    let at = pexpiretime(&mut con, "sw");
    cmd_ints(&mut con, &admit);
    let second: String = con.get("sw").unwrap();
    assert_eq!(pexpiretime(&mut con, "sw"), at, "the window's expiry held");

    let ours: Vec<Vec<String>> = aof_commands(&primary.dir)
        .into_iter()
        .filter(|c| c.get(1).map(String::as_str) == Some("sw"))
        .collect();
    assert_eq!(ours.len(), 2, "{ours:?}");
    assert_eq!(ours[0][3..], ["PXAT".to_string(), at.to_string()]);
    assert_eq!(ours[1], ["SET", "sw", &second, "KEEPTTL"]);

    wait_replica_offset(&primary, &replica);
    let mut rcon = replica.client();
    let on_replica: String = rcon.get("sw").unwrap();
    assert_eq!(on_replica, second);
    assert_eq!(pexpiretime(&mut rcon, "sw"), at);
}

// Random workloads on both backends.

/// Each limiter key with its algorithm; the META hash `m0` is not written
/// by any call and not compared (GET cannot read a hash).
const LIMITERS: &[(&str, &str)] = &[
    ("f0", "fixed"),
    ("f1", "fixed"),
    ("s0", "sliding"),
    ("s1", "sliding"),
    ("k0", "token"),
    ("k1", "token"),
    ("g0", "gcra"),
    ("g1", "gcra"),
    ("l0", "leaky"),
    ("l1", "leaky"),
];
const THROTTLED: &[&str] = &["t0", "t1"];

fn all_keys() -> Vec<&'static str> {
    LIMITERS
        .iter()
        .map(|(k, _)| *k)
        .chain(THROTTLED.iter().copied())
        .collect()
}

/// Policy options for a limiter of `algo`: short windows (gone a second
/// after the workload) or long ones (still there at the comparison).
fn policy(rng: &mut Rng, algo: &str) -> Vec<String> {
    let limit = rng.pick(&[2, 3, 5]);
    let window = rng.pick(&[150, 150, 20_000, 60_000]);
    let mut p = vec![
        "ALGO".to_string(),
        algo.to_string(),
        "LIMIT".to_string(),
        limit.to_string(),
        "WINDOW".to_string(),
        window.to_string(),
    ];
    if matches!(algo, "token" | "gcra" | "leaky") && rng.pct(50) {
        let low = if algo == "leaky" { 0 } else { 1 };
        p.push("BURST".into());
        p.push((low + rng.below(limit as usize) as i64).to_string());
    }
    p
}

/// One random call in the module's syntax.
fn random_call(rng: &mut Rng) -> Vec<String> {
    let words = |w: &[&str]| w.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    let (key, algo) = rng.pick(LIMITERS);
    match rng.below(100) {
        0..=39 => [words(&["RL.ADMIT", key]), policy(rng, algo)].concat(),
        40..=49 => {
            let cost = rng.below(4).to_string();
            // Issue 38: bookings (the buckets) and forced charges (all).
            let charge = match rng.below(4) {
                0 if matches!(algo, "token" | "gcra" | "leaky") => {
                    words(&["RESERVE", &(rng.below(3) * 1_000).to_string()])
                }
                1 if cost != "0" => words(&["FORCE"]),
                _ => vec![],
            };
            [
                words(&["RL.ADMIT", key]),
                policy(rng, algo),
                words(&["COST", &cost]),
                charge,
            ]
            .concat()
        }
        50..=59 => {
            let cost = rng.below(3).to_string();
            // Issue 38: a cancel of a slot up to 2 s ahead (the test's
            // clock is the server's, near enough for a workload).
            let cancel = match rng.pct(30) && matches!(algo, "token" | "gcra" | "leaky") {
                true => {
                    let now = std::time::SystemTime::now()
                        .duration_since(std::time::UNIX_EPOCH)
                        .map_or(0, |d| d.as_millis() as i64);
                    words(&["AT", &(now + rng.below(2_000) as i64).to_string()])
                }
                false => vec![],
            };
            [
                words(&["RL.REFUND", key]),
                policy(rng, algo),
                words(&["COST", &cost]),
                cancel,
            ]
            .concat()
        }
        60..=63 => words(&["RL.RESET", key]),
        64..=67 => [words(&["RL.TTL", key]), policy(rng, algo)].concat(),
        // m0 holds a token policy: only for the token keys.
        68..=71 => words(&["RL.ADMIT", rng.pick(&["k0", "k1"]), "META", "m0"]),
        72..=81 => {
            let t = rng.pick(THROTTLED);
            let burst = rng.below(3).to_string();
            let period = rng.pick(&["1", "1", "30"]);
            let q = rng.below(3).to_string();
            words(&["RL.THROTTLE", t, &burst, "2", period, &q])
        }
        _ => {
            let (other, other_algo) = rng.pick(LIMITERS);
            if other == key {
                return [
                    words(&["RL.ADMITALL", "1", key, "POLICY"]),
                    policy(rng, algo),
                ]
                .concat();
            }
            let cost = rng.below(3).to_string();
            [
                words(&["RL.ADMITALL", "2", key, other, "COST", &cost, "POLICY"]),
                policy(rng, algo),
                words(&["POLICY"]),
                policy(rng, other_algo),
            ]
            .concat()
        }
    }
}

/// Runs `n` random calls (with a few short sleeps, so windows expire and
/// buckets refill); returns the error replies, counted by text.
fn workload(
    backend: Backend,
    con: &mut Connection,
    rng: &mut Rng,
    n: usize,
) -> BTreeMap<String, usize> {
    let mut errors = BTreeMap::new();
    for _ in 0..n {
        if rng.pct(3) {
            sleep(Duration::from_millis(rng.below(40) as u64));
        }
        let call = random_call(rng);
        let words: Vec<&str> = call.iter().map(String::as_str).collect();
        if let Some(e) = error_text(&backend.raw(con, &words)) {
            *errors.entry(e).or_default() += 1;
        }
    }
    errors
}

/// Primary, replica and the primary's snapshot agree, read when no key
/// expired in between (the primary read twice around the replica).
fn assert_same(primary: &Server, other: &Server, keys: &[&str], what: &str) {
    assert_same_by(|con, keys| snapshot(con, keys), primary, other, keys, what)
}

/// `assert_same`, with the keys read by `snap` (strings or lease sets).
fn assert_same_by<T: PartialEq + std::fmt::Debug>(
    snap: impl Fn(&mut Connection, &[&str]) -> T,
    primary: &Server,
    other: &Server,
    keys: &[&str],
    what: &str,
) {
    let (mut p, mut o) = (primary.client(), other.client());
    for _ in 0..20 {
        let before = snap(&mut p, keys);
        let seen = snap(&mut o, keys);
        if snap(&mut p, keys) == before {
            assert_eq!(seen, before, "{what}");
            return;
        }
    }
    panic!("{what}: the primary never held still");
}

#[test]
fn a_replica_and_an_aof_restart_hold_every_value_and_expiry() {
    let seed = common::seed("a_replica_and_an_aof_restart_hold_every_value_and_expiry");
    for backend in BOTH {
        let args: Vec<&str> = [QUIET, &["--appendonly", "yes", "--appendfsync", "always"]].concat();
        let mut primary = backend.start_with(&args);
        let replica = backend.start();
        replica.replica_of(&primary);
        let mut con = primary.client();
        let _: () = redis::cmd("HSET")
            .arg(&["m0", "max", "3", "duration", "20000", "algorithm", "token"])
            .query(&mut con)
            .unwrap();
        let mut rng = Rng::new(seed);
        let keys = all_keys();
        let mut errors = BTreeMap::new();
        for round in 0..6 {
            for (e, n) in workload(backend, &mut con, &mut rng, 250) {
                *errors.entry(e).or_default() += n;
            }
            wait_replica_offset(&primary, &replica);
            let what = format!("{backend:?} replica after {} calls", 250 * (round + 1));
            assert_same(&primary, &replica, &keys, &what);
        }
        let failed: usize = errors.values().sum();
        assert!(
            failed < 1500 / 10,
            "{backend:?}: {failed} of 1500 calls failed: {errors:#?}"
        );
        // A last write on every key with a long window, so that most keys
        // are still there after the restart below.
        for (key, algo) in LIMITERS {
            backend.raw(
                &mut con,
                &[
                    "RL.ADMIT", key, "ALGO", algo, "LIMIT", "9", "WINDOW", "60000",
                ],
            );
        }
        for key in THROTTLED {
            backend.raw(&mut con, &["RL.THROTTLE", key, "5", "1", "60"]);
        }
        // The short windows run out; what is left expires well after the
        // restart below.
        sleep(Duration::from_millis(1_200));
        wait_replica_offset(&primary, &replica);
        let held = snapshot(&mut con, &keys);
        let live = held.iter().filter(|(_, v, _)| v.is_some()).count();
        assert!(live >= 4, "{backend:?}: only {live} keys left: {held:?}");
        assert_same(&primary, &replica, &keys, &format!("{backend:?} replica"));

        backend.restart(&mut primary);
        let mut con = primary.client();
        assert_eq!(
            snapshot(&mut con, &keys),
            held,
            "{backend:?}: the AOF gave back other values or expiries"
        );
        if backend == Backend::Functions {
            // The library came back from the AOF as well and still answers.
            let r = backend.raw(&mut con, &["RL.LIMIT", "m0"]);
            assert_eq!(r, redis::Value::Int(3), "{backend:?} after restart");
        }
    }
}

// Leases (issue 19), on both backends: each key is a sorted set of lease
// ids and deadlines, with the latest deadline as its expiry.

const LEASE_KEYS: &[&str] = &["q0", "q1", "q2"];
const LEASE_IDS: &[&str] = &["j0", "j1", "j2", "j3"];

/// Each lease key's members and scores (ZRANGE WITHSCORES) and PEXPIRETIME.
fn lease_snapshot(con: &mut Connection, keys: &[&str]) -> Vec<(String, String, i64)> {
    keys.iter()
        .map(|k| {
            let members = show(&cmd_raw(con, &["ZRANGE", k, "0", "-1", "WITHSCORES"]));
            (k.to_string(), members, pexpiretime(con, k))
        })
        .collect()
}

/// `assert_same` for lease keys.
fn assert_same_leases(primary: &Server, other: &Server, keys: &[&str], what: &str) {
    assert_same_by(lease_snapshot, primary, other, keys, what)
}

/// One random lease call in the module's syntax; `held` are the (key, id)
/// of the leases the workload got (generated ids included), to release and
/// extend.
fn random_lease_call(rng: &mut Rng, held: &[(String, String)]) -> Vec<String> {
    let mut key = rng.pick(LEASE_KEYS).to_string();
    let ttl = rng
        .pick(&["30", "60", "100", "150", "250", "30", "60", "20000"])
        .to_string();
    // Mostly one of the latest leases: those are likely still live.
    let recent = &held[held.len().saturating_sub(8)..];
    let mut id = rng.pick(LEASE_IDS).to_string();
    if !recent.is_empty() && rng.pct(70) {
        (key, id) = recent[rng.below(recent.len())].clone();
    }
    let w = |words: &[&str]| -> Vec<String> { words.iter().map(|s| s.to_string()).collect() };
    match rng.below(100) {
        0..=25 => {
            let limit = rng.pick(&["2", "4", "8"]);
            w(&["RL.ACQUIRE", &key, "LIMIT", limit, "TTL", &ttl])
        }
        // Shadow mode: a would-be refusal takes no lease and propagates
        // nothing (its id, never held, is released or extended with 0).
        26..=29 => {
            let limit = rng.pick(&["1", "2"]);
            w(&["RL.ACQUIRE", &key, "LIMIT", limit, "TTL", &ttl, "SHADOW"])
        }
        30..=44 => {
            let limit = rng.pick(&["1", "2", "4"]);
            let id = rng.pick(LEASE_IDS);
            w(&["RL.ACQUIRE", &key, "LIMIT", limit, "TTL", &ttl, "ID", id])
        }
        45..=49 => w(&["RL.ACQUIRE", &key, "META", "qm"]),
        50..=69 => w(&["RL.RELEASE", &key, &id]),
        70..=89 => w(&["RL.EXTEND", &key, &id, "TTL", &ttl]),
        _ => w(&["RL.INFLIGHT", &key]),
    }
}

#[test]
fn leases_on_a_replica_and_after_an_aof_restart_hold_the_same_members_scores_and_expiry() {
    let seed = common::seed("leases_on_a_replica_and_after_an_aof_restart");
    for backend in BOTH {
        let args: Vec<&str> = [QUIET, &["--appendonly", "yes", "--appendfsync", "always"]].concat();
        let mut primary = backend.start_with(&args);
        let replica = backend.start();
        replica.replica_of(&primary);
        let mut con = primary.client();
        let r = cmd_raw(&mut con, &["HSET", "qm", "max", "2", "ttl", "150"]);
        assert_eq!(r, Value::Int(2));
        let mut rng = Rng::new(seed);
        let mut held: Vec<(String, String)> = Vec::new();
        let (mut acquired, mut refused, mut released, mut extended) = (0, 0, 0, 0);
        for round in 0..6 {
            for _ in 0..250 {
                if rng.pct(5) {
                    sleep(Duration::from_millis(rng.below(80) as u64));
                }
                let call = random_lease_call(&mut rng, &held);
                let words: Vec<&str> = call.iter().map(String::as_str).collect();
                let reply = backend.raw(&mut con, &words);
                assert!(
                    error_text(&reply).is_none(),
                    "{backend:?} {call:?}: {reply:?}"
                );
                match (words[0], &reply) {
                    ("RL.ACQUIRE", Value::Array(items)) => match &items[..] {
                        [Value::Int(1), .., Value::BulkString(id)] => {
                            acquired += 1;
                            let id = String::from_utf8_lossy(id).into_owned();
                            held.push((words[1].to_string(), id));
                        }
                        [Value::Int(0), .., Value::Nil] => refused += 1,
                        _ => panic!("{backend:?} {call:?}: {reply:?}"),
                    },
                    ("RL.RELEASE", Value::Int(n)) => released += n,
                    ("RL.EXTEND", Value::Int(n)) => extended += n,
                    _ => {}
                }
            }
            wait_replica_offset(&primary, &replica);
            let what = format!(
                "{backend:?} replica after {} lease calls",
                250 * (round + 1)
            );
            assert_same_leases(&primary, &replica, LEASE_KEYS, &what);
        }
        // The workload did all the things it checks.
        println!("{backend:?}: acquired {acquired}, refused {refused}, released {released}, extended {extended}");
        assert!(
            acquired > 150 && refused > 50 && released > 50 && extended > 50,
            "{backend:?}: acquired {acquired}, refused {refused}, released {released}, extended {extended}"
        );
        // Every key holds a lease long after the restart, and one that
        // ends while the primary is down. The workload's LIMITs are at most
        // 8, so a key holds at most 8 leases: LIMIT 10 always has room
        // for both.
        for key in LEASE_KEYS {
            let long = backend.raw(
                &mut con,
                &["RL.ACQUIRE", key, "LIMIT", "10", "TTL", "60000"],
            );
            assert!(
                matches!(&long, Value::Array(v) if v[0] == Value::Int(1)),
                "{long:?}"
            );
        }
        let short = backend.raw(
            &mut con,
            &[
                "RL.ACQUIRE",
                "q0",
                "LIMIT",
                "10",
                "TTL",
                "400",
                "ID",
                "short",
            ],
        );
        assert!(
            matches!(&short, Value::Array(v) if v[0] == Value::Int(1)),
            "{short:?}"
        );
        wait_replica_offset(&primary, &replica);
        let kept = lease_snapshot(&mut con, LEASE_KEYS);
        assert_same_leases(
            &primary,
            &replica,
            LEASE_KEYS,
            &format!("{backend:?} replica"),
        );

        backend.restart(&mut primary);
        let mut con = primary.client();
        assert_eq!(
            lease_snapshot(&mut con, LEASE_KEYS),
            kept,
            "{backend:?}: the AOF gave back other leases or expiries"
        );
        // The short lease ended while the primary was down (or soon after):
        // from its deadline on it is not live, and the next write reclaims
        // it without extending anything.
        let deadline: i64 = redis::cmd("ZSCORE")
            .arg("q0")
            .arg("short")
            .query(&mut con)
            .unwrap();
        while common::server_time_ms(&mut con) < deadline {
            sleep(Duration::from_millis(20));
        }
        let live_before = backend.raw(&mut con, &["RL.INFLIGHT", "q0"]);
        let expiry_before = pexpiretime(&mut con, "q0");
        let r = backend.raw(&mut con, &["RL.EXTEND", "q0", "short", "TTL", "60000"]);
        assert_eq!(r, Value::Int(0), "{backend:?}: extended an expired lease");
        let gone = cmd_raw(&mut con, &["ZSCORE", "q0", "short"]);
        assert_eq!(
            gone,
            Value::Nil,
            "{backend:?}: the expired lease was not reclaimed"
        );
        assert_eq!(backend.raw(&mut con, &["RL.INFLIGHT", "q0"]), live_before);
        assert_eq!(pexpiretime(&mut con, "q0"), expiry_before, "{backend:?}");
    }
}

#[test]
fn lease_refusals_reads_and_dead_calls_propagate_nothing() {
    for backend in BOTH {
        let primary = backend.start_with(QUIET);
        let replica = backend.start();
        replica.replica_of(&primary);
        let mut con = primary.client();
        for call in [
            &["RL.ACQUIRE", "z", "LIMIT", "1", "TTL", "60000", "ID", "a"][..],
            &["HSET", "zero", "max", "0", "ttl", "1000"],
            &["HSET", "one", "max", "1", "ttl", "60000"],
        ] {
            let r = backend.raw(&mut con, call);
            assert!(error_text(&r).is_none(), "{backend:?} {call:?}: {r:?}");
        }
        wait_replica_offset(&primary, &replica);
        // RL.INFLIGHT reads on a replica too (rl_inflight is `no-writes`,
        // FCALL_RO); a write is refused there.
        let mut on_replica = replica.client();
        let r = backend.raw(&mut on_replica, &["RL.INFLIGHT", "z"]);
        assert_eq!(r, Value::Int(1), "{backend:?} on the replica");
        let r = backend.raw(&mut on_replica, &["RL.RELEASE", "z", "a"]);
        let err = error_text(&r).unwrap_or_default();
        assert!(
            err.starts_with("READONLY "),
            "{backend:?} on the replica: {r:?}"
        );
        let offset = repl_offset(&mut con);
        let quiet: Vec<Vec<&str>> = vec![
            vec!["RL.ACQUIRE", "z", "LIMIT", "1", "TTL", "60000"],
            vec!["RL.ACQUIRE", "z", "LIMIT", "1", "TTL", "60000", "ID", "b"],
            vec!["RL.ACQUIRE", "z", "META", "one"],
            vec!["RL.ACQUIRE", "z", "META", "zero"],
            vec!["RL.ACQUIRE", "free"],
            vec!["RL.ACQUIRE", "free", "ID", "x", "TTL", "5"],
            vec!["RL.INFLIGHT", "z"],
            vec!["RL.INFLIGHT", "missing"],
            vec!["RL.RELEASE", "z", "nobody"],
            vec!["RL.RELEASE", "missing", "a"],
            vec!["RL.EXTEND", "z", "nobody", "TTL", "5000"],
            vec!["RL.EXTEND", "missing", "a", "TTL", "5000"],
            vec!["RL.ACQUIRE", "z", "LIMIT", "0", "TTL", "5"],
            vec!["RL.ACQUIRE", "z", "LIMIT", "1"],
            vec!["RL.EXTEND", "z", "a", "TTL", "9223372036854775807"],
        ];
        for call in &quiet {
            backend.raw(&mut con, call);
            assert_eq!(
                repl_offset(&mut con),
                offset,
                "{backend:?}: {call:?} propagated"
            );
        }
        // A refusal that reclaims does propagate, and the replica follows.
        for call in [
            &["RL.ACQUIRE", "y", "LIMIT", "2", "TTL", "30", "ID", "old"][..],
            &[
                "RL.ACQUIRE",
                "y",
                "LIMIT",
                "2",
                "TTL",
                "60000",
                "ID",
                "live",
            ],
        ] {
            let r = backend.raw(&mut con, call);
            assert!(
                matches!(&r, Value::Array(v) if v[0] == Value::Int(1)),
                "{r:?}"
            );
        }
        sleep(Duration::from_millis(60));
        wait_replica_offset(&primary, &replica);
        let offset = repl_offset(&mut con);
        let r = backend.raw(&mut con, &["RL.ACQUIRE", "y", "LIMIT", "1", "TTL", "60000"]);
        assert!(
            matches!(&r, Value::Array(v) if v[0] == Value::Int(0)),
            "{r:?}"
        );
        assert_ne!(
            repl_offset(&mut con),
            offset,
            "{backend:?}: the reclaim was not propagated"
        );
        wait_replica_offset(&primary, &replica);
        assert_same_leases(
            &primary,
            &replica,
            &["y", "z"],
            &format!("{backend:?} reclaim"),
        );
        let members = show(&cmd_raw(&mut con, &["ZRANGE", "y", "0", "-1"]));
        assert_eq!(members, "[\"live\"]", "{backend:?}");
    }
}
