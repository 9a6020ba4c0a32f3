//! Reliability under faults and load: replication under a random workload
//! (paused and late replicas included), failover, every persistence path,
//! ACLs, OOM, transactions and scripts, exactness under concurrency, and
//! state written with far-future clocks.
//!
//! The random workloads print their seed; rerun one with `RL_SEED=<n>`.

use crate::common;

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Barrier};
use std::thread::{self, sleep};
use std::time::{Duration, Instant};

use crate::common::{
    cmd_err, cmd_ints, cmd_raw, error_text, get, info_field, keyspace, pexpiretime, pipeline,
    raw_state, run, seed, server_time_ms, split, timed, try_ints, try_text, wait_replica_offset,
    words, Rng, Server, Snap, QUIET,
};
use redis::{Connection, Value};

const ALGOS: [&str; 5] = ["fixed", "sliding", "token", "gcra", "leaky"];

// ---------------------------------------------------------------------------
// Small shared helpers
// ---------------------------------------------------------------------------

fn is_err(v: &Value) -> bool {
    matches!(v, Value::ServerError(_))
}

fn signal(pid: u32, sig: libc::c_int) {
    // SAFETY: kill(2) on the pid of a server this test started and still owns.
    let rc = unsafe { libc::kill(pid as libc::pid_t, sig) };
    assert_eq!(rc, 0, "kill({pid}, {sig})");
}

// ---------------------------------------------------------------------------
// Comparing whole keyspaces across nodes
// ---------------------------------------------------------------------------

struct Compared {
    /// Keys present on every node with identical value and PEXPIRETIME.
    equal: usize,
    /// Keys missing somewhere only because they expired between the reads.
    expired_meanwhile: usize,
}

/// Asserts that every node holds the same keys, values and absolute expiries.
/// A key may be missing on some nodes only if it was due to expire by the
/// time the last snapshot ended.
fn assert_same_keyspace(nodes: &[(&str, &Server)]) -> Compared {
    let snaps: Vec<(Snap, i64)> = nodes
        .iter()
        .map(|(_, s)| keyspace(&mut s.client()))
        .collect();
    let latest_end = snaps.iter().map(|s| s.1).max().unwrap();
    let all_keys: BTreeSet<&String> = snaps.iter().flat_map(|s| s.0.keys()).collect();
    let mut equal = 0;
    let mut expired_meanwhile = 0;
    let mut problems = Vec::new();
    for key in all_keys {
        let entries: Vec<Option<&(String, Vec<String>, i64)>> =
            snaps.iter().map(|s| s.0.get(key)).collect();
        if entries.iter().all(|e| e.is_some()) {
            if entries.windows(2).all(|w| w[0] == w[1]) {
                equal += 1;
            } else {
                problems.push(format!("{key}: {entries:?}"));
            }
            continue;
        }
        let present: Vec<&(String, Vec<String>, i64)> = entries.iter().flatten().copied().collect();
        let due = present.iter().all(|e| e.2 > 0 && e.2 <= latest_end + 1);
        let same = present.windows(2).all(|w| w[0] == w[1]);
        if due && same {
            expired_meanwhile += 1;
        } else {
            problems.push(format!("{key} (missing somewhere): {entries:?}"));
        }
    }
    let names: Vec<&str> = nodes.iter().map(|n| n.0).collect();
    assert!(
        problems.is_empty(),
        "{} keys differ between {names:?}:\n{}",
        problems.len(),
        problems[..problems.len().min(20)].join("\n")
    );
    Compared {
        equal,
        expired_meanwhile,
    }
}

// ---------------------------------------------------------------------------
// The random workload
// ---------------------------------------------------------------------------

const WINDOWS: [i64; 6] = [50, 200, 1_000, 5_000, 60_000, 600_000];
const KEYS_PER_ALGO: usize = 60;

#[derive(Default, Debug)]
struct Tally {
    calls: usize,
    admitted: usize,
    refused: usize,
    errors: usize,
    other: usize,
}

impl Tally {
    fn add(&mut self, cmd: &[String], reply: &Value) {
        self.calls += 1;
        if is_err(reply) {
            let e = error_text(reply).unwrap_or_default();
            assert!(
                !e.contains("internal error"),
                "a panic inside the module: {cmd:?} -> {e}"
            );
            self.errors += 1;
            return;
        }
        let name = cmd[0].to_ascii_uppercase();
        let first = match reply {
            Value::Array(items) => match items.first() {
                Some(Value::Int(n)) => Some(*n),
                _ => None,
            },
            _ => None,
        };
        match (name.as_str(), first) {
            ("RL.THROTTLE", Some(0)) => self.admitted += 1,
            ("RL.THROTTLE", Some(_)) => self.refused += 1,
            ("RL.ADMIT" | "RL.ADMITALL", Some(1)) => self.admitted += 1,
            ("RL.ADMIT" | "RL.ADMITALL", Some(0)) => self.refused += 1,
            _ => self.other += 1,
        }
    }
}

/// A limiter of the workload: its key and an inline policy that is stable
/// per key most of the time (so that budgets run out and refusals happen),
/// and now and then a different one (a policy change).
fn limiter(rng: &mut Rng, algo: usize) -> (String, Vec<String>) {
    let i = rng.below(KEYS_PER_ALGO);
    let key = format!("w:{}:{i}", ALGOS[algo]);
    let (limit, window) = if rng.pct(90) {
        (1 + i % 7, WINDOWS[i % WINDOWS.len()])
    } else {
        (1 + rng.below(10), rng.pick(&WINDOWS))
    };
    let mut policy = words(&[
        "ALGO",
        ALGOS[algo],
        "LIMIT",
        &limit.to_string(),
        "WINDOW",
        &window.to_string(),
    ]);
    if algo >= 2 && rng.pct(50) {
        let burst = if algo == 4 { i % 4 } else { 1 + i % 4 };
        policy.extend(words(&["BURST", &burst.to_string()]));
    }
    (key, policy)
}

fn cost(rng: &mut Rng) -> String {
    match rng.below(100) {
        0..=9 => "0".into(),   // peek
        10..=69 => "1".into(), // the usual
        70..=94 => (2 + rng.below(2)).to_string(),
        _ => "1000".into(), // never admittable
    }
}

/// One random call of the workload.
fn random_call(rng: &mut Rng) -> Vec<String> {
    let algo = rng.below(5);
    match rng.below(100) {
        0..=39 => {
            let (key, policy) = limiter(rng, algo);
            let mut c = vec!["RL.ADMIT".to_string(), key];
            c.extend(policy);
            if rng.pct(70) {
                c.extend(["COST".to_string(), cost(rng)]);
            }
            c
        }
        40..=49 => {
            // Through the META hash of the same algorithm.
            let (key, _) = limiter(rng, algo);
            let mut c = words(&["RL.ADMIT", &key, "META", &format!("w:meta:{}", ALGOS[algo])]);
            if rng.pct(50) {
                c.extend(["COST".to_string(), cost(rng)]);
            }
            c
        }
        50..=57 => {
            let (key, policy) = limiter(rng, algo);
            let mut c = vec!["RL.REFUND".to_string(), key];
            c.extend(policy);
            c.extend(["COST".to_string(), (1 + rng.below(3)).to_string()]);
            c
        }
        58..=60 => {
            let (key, _) = limiter(rng, algo);
            words(&["RL.RESET", &key])
        }
        61..=70 => {
            let i = rng.below(20);
            let mut c = words(&[
                "RL.THROTTLE",
                &format!("w:thr:{i}"),
                &(i % 5).to_string(),
                &(1 + i % 10).to_string(),
                &(1 + i % 3).to_string(),
            ]);
            if rng.pct(60) {
                c.push(rng.below(4).to_string());
            }
            c
        }
        71..=80 => {
            let n = 2 + rng.below(2);
            let mut keys = Vec::new();
            let mut policies = Vec::new();
            while keys.len() < n {
                let a = rng.below(5);
                let (key, policy) = limiter(rng, a);
                if !keys.contains(&key) {
                    keys.push(key);
                    policies.push(policy);
                }
            }
            let mut c = vec!["RL.ADMITALL".to_string(), n.to_string()];
            c.extend(keys);
            if rng.pct(50) {
                c.extend(["COST".to_string(), (1 + rng.below(2)).to_string()]);
            }
            for p in policies {
                c.push("POLICY".into());
                c.extend(p);
            }
            c
        }
        81..=85 => {
            let (key, policy) = limiter(rng, algo);
            let mut c = vec!["RL.TTL".to_string(), key];
            c.extend(policy);
            c
        }
        86..=87 => words(&["RL.LIMIT", &format!("w:meta:{}", ALGOS[algo])]),
        88..=90 => {
            // An operator changes a cap.
            words(&[
                "HSET",
                &format!("w:meta:{}", ALGOS[algo]),
                "max",
                &(1 + rng.below(8)).to_string(),
                "duration",
                &rng.pick(&WINDOWS).to_string(),
            ])
        }
        91..=93 => {
            // A counter shared with an INCR client: found without a TTL.
            let i = rng.below(10);
            if rng.pct(50) {
                words(&["INCR", &format!("w:legacy:{i}")])
            } else {
                words(&[
                    "RL.ADMIT",
                    &format!("w:legacy:{i}"),
                    "LIMIT",
                    "3",
                    "WINDOW",
                    "1000",
                ])
            }
        }
        94..=96 => {
            // Another algorithm's state, or a hash, as a counter: an error.
            let (key, _) = limiter(rng, algo);
            let other = ALGOS[(algo + 1 + rng.below(4)) % 5];
            if rng.pct(50) {
                words(&[
                    "RL.ADMIT", &key, "ALGO", other, "LIMIT", "3", "WINDOW", "1000",
                ])
            } else {
                words(&[
                    "RL.ADMIT",
                    &format!("w:meta:{other}"),
                    "LIMIT",
                    "3",
                    "WINDOW",
                    "1000",
                ])
            }
        }
        _ => {
            // Malformed.
            let (key, _) = limiter(rng, algo);
            words(&["RL.ADMIT", &key, "LIMIT", "-3", "WINDOW", "1000"])
        }
    }
}

fn setup_metas(con: &mut Connection) {
    for (i, algo) in ALGOS.iter().enumerate() {
        let _: () = redis::cmd("HSET")
            .arg(format!("w:meta:{algo}"))
            .arg(&[
                "max",
                &(3 + i).to_string(),
                "duration",
                "2000",
                "algorithm",
                algo,
            ])
            .arg(&["burst", "2"])
            .query(con)
            .unwrap();
    }
}

/// Runs `calls` random calls in pipelined batches; `between(done)` runs after
/// each batch (pacing, fault injection).
fn run_workload(
    con: &mut Connection,
    rng: &mut Rng,
    calls: usize,
    batch: usize,
    mut between: impl FnMut(usize),
) -> Tally {
    let mut tally = Tally::default();
    let mut done = 0;
    while done < calls {
        let n = batch.min(calls - done);
        let cmds: Vec<Vec<String>> = (0..n).map(|_| random_call(rng)).collect();
        let replies = pipeline(con, &cmds).expect("workload batch");
        for (c, r) in cmds.iter().zip(&replies) {
            tally.add(c, r);
        }
        done += n;
        between(done);
    }
    tally
}

fn check_tally(tally: &Tally, calls: usize) {
    assert_eq!(tally.calls, calls);
    // The workload must exercise both outcomes and the error path.
    assert!(tally.admitted > calls / 5, "{tally:?}");
    assert!(tally.refused > calls / 20, "{tally:?}");
    assert!(tally.errors > 0 && tally.errors < calls / 5, "{tally:?}");
}

struct Trio {
    primary: Server,
    r1: Server,
    r2: Server,
}

fn trio(late_second: bool) -> Trio {
    let primary = Server::start_with(QUIET);
    let r1 = Server::start();
    let r2 = Server::start();
    r1.replica_of(&primary);
    if !late_second {
        r2.replica_of(&primary);
    }
    Trio { primary, r1, r2 }
}

fn compare_trio(t: &Trio, test: &str, tally: &Tally, faults: &str) {
    wait_replica_offset(&t.primary, &t.r1);
    wait_replica_offset(&t.primary, &t.r2);
    let c = assert_same_keyspace(&[
        ("primary", &t.primary),
        ("replica1", &t.r1),
        ("replica2", &t.r2),
    ]);
    println!(
        "{test}: {} calls ({} admitted, {} refused, {} errors, {} other); faults: {faults}; \
         {} keys identical on 3 nodes, {} expired during the comparison",
        tally.calls,
        tally.admitted,
        tally.refused,
        tally.errors,
        tally.other,
        c.equal,
        c.expired_meanwhile
    );
    assert!(c.equal >= 100, "too few keys compared: {}", c.equal);
}

fn replicate_random(calls: usize, batch: usize, pause_ms: u64, test: &str) {
    let mut rng = Rng::new(seed(test));
    let t = trio(false);
    let mut con = t.primary.client();
    setup_metas(&mut con);
    let tally = run_workload(&mut con, &mut rng, calls, batch, |_| {
        sleep(Duration::from_millis(pause_ms))
    });
    check_tally(&tally, calls);
    compare_trio(&t, test, &tally, "none");
}

#[test]
fn replicas_match_the_primary_after_a_random_workload() {
    replicate_random(10_000, 200, 10, "random workload, 10k");
}

#[test]
#[ignore = "slow: run with make test-all"]
fn replicas_match_the_primary_after_100k_random_calls() {
    replicate_random(100_000, 500, 2, "random workload, 100k");
}

/// SIGSTOP one replica for ~2 s in the middle of the run, then SIGCONT.
fn replicate_with_paused_replica(calls: usize, batch: usize, pace_ms: u64, test: &str) {
    let mut rng = Rng::new(seed(test));
    let t = trio(false);
    let mut con = t.primary.client();
    setup_metas(&mut con);
    let pid = t.r1.pid();
    let mut watch = t.primary.client();
    let mut stopped_at: Option<Instant> = None;
    let mut resumed = false;
    // How far the frozen replica's acknowledged offset fell behind.
    let mut max_gap = 0i64;
    let tally = run_workload(&mut con, &mut rng, calls, batch, |done| {
        if stopped_at.is_none() && done >= calls / 5 {
            signal(pid, libc::SIGSTOP);
            stopped_at = Some(Instant::now());
        }
        if let Some(at) = stopped_at {
            if !resumed {
                max_gap = max_gap.max(replica_gap(&mut watch, t.r1.port));
                if at.elapsed() >= Duration::from_secs(2) {
                    signal(pid, libc::SIGCONT);
                    resumed = true;
                }
            }
        }
        sleep(Duration::from_millis(pace_ms));
    });
    let paused_for = stopped_at.expect("paused").elapsed();
    if !resumed {
        sleep(Duration::from_secs(2).saturating_sub(paused_for));
        signal(pid, libc::SIGCONT);
    }
    check_tally(&tally, calls);
    // The primary went on while the replica was frozen.
    assert!(
        max_gap > 10_000,
        "replica1 fell only {max_gap} bytes behind"
    );
    compare_trio(
        &t,
        test,
        &tally,
        &format!(
            "replica1 SIGSTOPped for ~2 s after {} calls, {max_gap} bytes behind at most",
            calls / 5
        ),
    );
}

/// Bytes of replication stream the replica on `port` has not acknowledged.
fn replica_gap(primary: &mut Connection, port: u16) -> i64 {
    let text: String = redis::cmd("INFO")
        .arg("replication")
        .query(primary)
        .unwrap();
    let master: i64 = text
        .lines()
        .find_map(|l| l.strip_prefix("master_repl_offset:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0);
    let acked = text
        .lines()
        .filter(|l| l.starts_with("slave") && l.contains(&format!("port={port},")))
        .find_map(|l| l.split(',').find_map(|f| f.strip_prefix("offset=")))
        .and_then(|v| v.trim().parse::<i64>().ok())
        .unwrap_or(master);
    master - acked
}

#[test]
fn a_replica_paused_mid_run_catches_up_exactly() {
    replicate_with_paused_replica(10_000, 50, 10, "paused replica, 10k");
}

#[test]
#[ignore = "slow: run with make test-all"]
fn a_replica_paused_mid_run_catches_up_exactly_100k() {
    replicate_with_paused_replica(100_000, 500, 4, "paused replica, 100k");
}

/// The second replica joins half-way: a full sync of live limiter state.
fn replicate_with_late_replica(calls: usize, batch: usize, pace_ms: u64, test: &str) {
    let mut rng = Rng::new(seed(test));
    let t = trio(true);
    let mut con = t.primary.client();
    setup_metas(&mut con);
    let full_before: i64 = info_field(&mut con, "stats", "sync_full")
        .unwrap()
        .parse()
        .unwrap();
    let mut joined = false;
    let tally = run_workload(&mut con, &mut rng, calls, batch, |done| {
        if !joined && done >= calls / 2 {
            t.r2.replica_of(&t.primary);
            joined = true;
        }
        sleep(Duration::from_millis(pace_ms));
    });
    check_tally(&tally, calls);
    let full_after: i64 = info_field(&mut con, "stats", "sync_full")
        .unwrap()
        .parse()
        .unwrap();
    assert_eq!(
        full_after,
        full_before + 1,
        "the late replica did a full sync"
    );
    compare_trio(
        &t,
        test,
        &tally,
        &format!("replica2 joined after {} calls (full sync)", calls / 2),
    );
}

#[test]
fn a_replica_that_joins_late_gets_the_same_state() {
    replicate_with_late_replica(10_000, 200, 10, "late replica, 10k");
}

#[test]
#[ignore = "slow: run with make test-all"]
fn a_replica_that_joins_late_gets_the_same_state_100k() {
    replicate_with_late_replica(100_000, 500, 2, "late replica, 100k");
}

// ---------------------------------------------------------------------------
// Failover
// ---------------------------------------------------------------------------

/// The failover limiters: huge, slow budgets, so that every call is admitted
/// and changes the state (each state value appears once in a key's history).
fn failover_calls() -> Vec<Vec<String>> {
    let mut calls: Vec<Vec<String>> = ["fixed", "sliding"]
        .iter()
        .map(|a| {
            words(&[
                "RL.ADMIT",
                &format!("fo:{a}"),
                "ALGO",
                a,
                "LIMIT",
                "10000000",
                "WINDOW",
                "3600000",
            ])
        })
        .collect();
    for a in ["token", "gcra", "leaky"] {
        calls.push(words(&[
            "RL.ADMIT",
            &format!("fo:{a}"),
            "ALGO",
            a,
            "LIMIT",
            "1000",
            "WINDOW",
            "86400000",
            "BURST",
            "10000000",
        ]));
    }
    calls.push(words(&[
        "RL.THROTTLE",
        "fo:thr",
        "10000000",
        "1000",
        "86400",
    ]));
    calls
}

struct FailoverResult {
    acked: usize,
    lost: usize,
    lost_per_key: Vec<(String, usize)>,
}

/// Streams admitted calls to a primary, SIGKILLs it mid-stream, promotes the
/// replica, and counts acknowledged calls whose effect the replica lacks.
/// With `wait`, every call is followed by `WAIT 1 1000` and counts as
/// acknowledged only if the replica confirmed it.
fn failover(wait: bool) -> FailoverResult {
    let mut primary = Server::start_with(QUIET);
    let replica = Server::start();
    replica.replica_of(&primary);
    let mut con = primary.client();

    // A small budget, spent completely before the stream and confirmed.
    for _ in 0..3 {
        let r = cmd_ints(
            &mut con,
            &["RL.ADMIT", "fo:small", "LIMIT", "3", "WINDOW", "3600000"],
        );
        assert_eq!(r[0], 1);
    }
    let w: i64 = redis::cmd("WAIT").arg(1).arg(5000).query(&mut con).unwrap();
    assert_eq!(w, 1);

    let calls = failover_calls();
    let keys: Vec<String> = calls.iter().map(|c| c[1].clone()).collect();
    // Per key, the state after each acknowledged call, in order.
    let mut history: Vec<Vec<String>> = vec![Vec::new(); calls.len()];
    let pid = primary.pid();
    let killer = thread::spawn(move || {
        sleep(Duration::from_millis(400));
        signal(pid, libc::SIGKILL);
    });
    let batch = if wait { 1 } else { 8 };
    let start = Instant::now();
    let mut step = 0usize;
    'stream: while start.elapsed() < Duration::from_secs(20) {
        let mut cmds = Vec::new();
        let mut which = Vec::new();
        for _ in 0..batch {
            let k = step % calls.len();
            step += 1;
            cmds.push(calls[k].clone());
            cmds.push(words(&["GET", &keys[k]]));
            if wait {
                cmds.push(words(&["WAIT", "1", "1000"]));
            }
            which.push(k);
        }
        let Ok(replies) = pipeline(&mut con, &cmds) else {
            break 'stream;
        };
        let per = if wait { 3 } else { 2 };
        for (i, &k) in which.iter().enumerate() {
            let r = try_ints(&replies[per * i]).expect("an admission reply");
            let ok = if k == calls.len() - 1 {
                r[0] == 0
            } else {
                r[0] == 1
            };
            assert!(ok, "{:?} was not admitted: {r:?}", calls[k]);
            let state = try_text(&replies[per * i + 1]).expect("state after the call");
            if wait && replies[per * i + 2] != Value::Int(1) {
                // Not confirmed by the replica: not acknowledged. The
                // primary is dying; stop here.
                break 'stream;
            }
            history[k].push(state);
        }
    }
    killer.join().unwrap();
    primary.kill();

    let mut r = replica.client();
    let reply: String = redis::cmd("REPLICAOF")
        .arg("NO")
        .arg("ONE")
        .query(&mut r)
        .unwrap();
    assert!(reply.starts_with("OK"), "{reply}");

    let acked: usize = history.iter().map(Vec::len).sum();
    let mut lost = 0;
    let mut lost_per_key = Vec::new();
    for (k, key) in keys.iter().enumerate() {
        let on_replica = get(&mut r, key);
        let h = &history[k];
        let missing = match on_replica {
            None => h.len(),
            Some(v) => match h.iter().rposition(|s| *s == v) {
                Some(pos) => h.len() - 1 - pos,
                // A state the client never saw: the reply to a call the
                // primary executed and shipped was lost with it. Newer.
                None => 0,
            },
        };
        lost += missing;
        lost_per_key.push((key.clone(), missing));
    }

    // The promoted replica carries on, and spent budgets stay spent.
    let small = cmd_ints(
        &mut r,
        &["RL.ADMIT", "fo:small", "LIMIT", "3", "WINDOW", "3600000"],
    );
    assert_eq!(
        small[0], 0,
        "a spent budget is still spent after failover: {small:?}"
    );
    let count: i64 = get(&mut r, "fo:fixed")
        .map(|v| v.parse().unwrap())
        .unwrap_or(0);
    let next = cmd_ints(
        &mut r,
        &calls[0].iter().map(String::as_str).collect::<Vec<_>>(),
    );
    assert_eq!(next[0], 1);
    assert_eq!(
        next[2],
        10_000_000 - count - 1,
        "the count carries on from the replica's"
    );
    FailoverResult {
        acked,
        lost,
        lost_per_key,
    }
}

#[test]
fn failover_loses_at_most_what_async_replication_had_not_shipped() {
    let r = failover(false);
    println!(
        "failover (async, pipelined): {} calls acknowledged by the primary before SIGKILL, \
         {} missing on the promoted replica; per key: {:?}",
        r.acked, r.lost, r.lost_per_key
    );
    assert!(r.acked > 100, "the stream ran long enough: {}", r.acked);
    assert!(r.lost <= r.acked);
}

#[test]
fn failover_with_wait_after_each_call_loses_nothing() {
    let r = failover(true);
    println!(
        "failover (WAIT 1 1000 after each call): {} calls acknowledged, {} missing on the \
         promoted replica; per key: {:?}",
        r.acked, r.lost, r.lost_per_key
    );
    assert!(r.acked > 60, "the stream ran long enough: {}", r.acked);
    assert_eq!(r.lost, 0, "{:?}", r.lost_per_key);
}

// ---------------------------------------------------------------------------
// Persistence
// ---------------------------------------------------------------------------

/// A limiter and the policy it is called with.
struct Lim {
    key: String,
    policy: Vec<String>,
}

impl Lim {
    fn call(&self, cmd: &str, cost: Option<i64>) -> Vec<String> {
        let mut c = vec![cmd.to_string(), self.key.clone()];
        c.extend(self.policy.iter().cloned());
        if let Some(n) = cost {
            c.extend(["COST".to_string(), n.to_string()]);
        }
        c
    }
}

/// Limiters of every algorithm in every interesting state: spent (refused),
/// partly used, refunded, configured through META; plus RL.THROTTLE and an
/// INCR-made counter given its expiry by a refusal.
fn populate(con: &mut Connection, prefix: &str) -> Vec<Lim> {
    let mut lims = Vec::new();
    for algo in ALGOS {
        let meta = format!("{prefix}:meta:{algo}");
        let _: () = redis::cmd("HSET")
            .arg(&meta)
            .arg(&["max", "4", "duration", "40000", "algorithm", algo])
            .query(con)
            .unwrap();
        let mut inline = words(&["ALGO", algo, "LIMIT", "3", "WINDOW", "30000"]);
        if algo != "fixed" && algo != "sliding" {
            inline.extend(words(&["BURST", "3"]));
        }
        let spent = Lim {
            key: format!("{prefix}:{algo}:spent"),
            policy: inline.clone(),
        };
        for i in 0..4 {
            let r = try_ints(&run(con, &spent.call("RL.ADMIT", None))).unwrap();
            assert_eq!(
                r[0],
                i64::from(i < 3 || algo == "leaky"),
                "{algo} {i}: {r:?}"
            );
        }
        let part = Lim {
            key: format!("{prefix}:{algo}:part"),
            policy: inline.clone(),
        };
        assert_eq!(
            try_ints(&run(con, &part.call("RL.ADMIT", None))).unwrap()[0],
            1
        );
        let refunded = Lim {
            key: format!("{prefix}:{algo}:refunded"),
            policy: inline,
        };
        assert_eq!(
            try_ints(&run(con, &refunded.call("RL.ADMIT", Some(3)))).unwrap()[0],
            1
        );
        assert!(try_ints(&run(con, &refunded.call("RL.REFUND", Some(1)))).is_some());
        let via_meta = Lim {
            key: format!("{prefix}:{algo}:meta"),
            policy: words(&["META", &meta]),
        };
        assert_eq!(
            try_ints(&run(con, &via_meta.call("RL.ADMIT", Some(2)))).unwrap()[0],
            1
        );
        lims.extend([spent, part, refunded, via_meta]);
        sleep(Duration::from_millis(3)); // distinct times per algorithm
    }
    let thr = format!("{prefix}:thr");
    for _ in 0..4 {
        cmd_ints(con, &["RL.THROTTLE", &thr, "2", "3", "60"]);
    }
    assert_eq!(
        cmd_ints(con, &["RL.THROTTLE", &thr, "2", "3", "60"])[0],
        1,
        "limited"
    );
    let legacy = format!("{prefix}:legacy");
    let _: () = redis::cmd("SET").arg(&legacy).arg(9).query(con).unwrap();
    let r = cmd_ints(con, &["RL.ADMIT", &legacy, "LIMIT", "5", "WINDOW", "30000"]);
    assert_eq!(r[0], 0);
    lims.push(Lim {
        key: legacy,
        policy: words(&["LIMIT", "5", "WINDOW", "30000"]),
    });
    lims
}

/// (value, PEXPIRETIME) of every key, and the back-off RL.TTL gives for each
/// limiter with the server time it was given at.
struct PersistView {
    state: Snap,
    ttls: Vec<(String, i64, i64)>,
}

fn persist_view(con: &mut Connection, lims: &[Lim]) -> PersistView {
    let (state, _) = keyspace(con);
    let ttls = lims
        .iter()
        .map(|l| {
            let (at, replies) = timed(con, &[l.call("RL.TTL", None)]);
            match replies[..] {
                [Value::Int(n)] => (l.key.clone(), n, at),
                ref other => panic!("RL.TTL {}: {other:?}", l.key),
            }
        })
        .collect();
    PersistView { state, ttls }
}

/// After a persistence round trip: every value and absolute expiry
/// unchanged, and every back-off shorter by exactly the time that passed
/// (never extended by the downtime).
fn check_persisted(before: &PersistView, after: &PersistView, what: &str) {
    assert!(before.state.len() >= 27, "{}", before.state.len());
    assert_eq!(
        before.state, after.state,
        "{what}: values or absolute expiries changed"
    );
    let mut waiting = 0;
    let mut elapsed_max = 0;
    for ((key, b, t0), (_, a, t1)) in before.ttls.iter().zip(&after.ttls) {
        let elapsed = t1 - t0;
        elapsed_max = elapsed_max.max(elapsed);
        if *b > 0 {
            waiting += 1;
            let want = (b - elapsed).max(0);
            // ±2 ms: the back-off is rounded up, TIME can be a ms ahead.
            assert!(
                (a - want).abs() <= 2,
                "{what}: {key} back-off {b} ms, {elapsed} ms later {a} ms (want {want})"
            );
        } else {
            assert_eq!(*a, 0, "{what}: {key} passed before, waits now");
        }
    }
    assert!(
        waiting >= 6,
        "{what}: only {waiting} limiters were refusing"
    );
    println!(
        "{what}: {} keys identical (value and PEXPIRETIME) after {elapsed_max} ms; \
         {waiting} back-offs shorter by exactly the elapsed time",
        before.state.len()
    );
}

fn wait_info(con: &mut Connection, field: &str, want: &str) {
    common::wait_until(Duration::from_secs(20), field, || {
        info_field(con, "persistence", field).as_deref() == Some(want)
    });
}

#[test]
fn aof_always_survives_a_crash_with_every_value_and_expiry() {
    let mut server = Server::start_with(&["--appendonly", "yes", "--appendfsync", "always"]);
    let mut con = server.client();
    let lims = populate(&mut con, "p");
    let before = persist_view(&mut con, &lims);
    drop(con);
    server.kill(); // a crash: only what reached the AOF survives
    sleep(Duration::from_secs(1));
    server.restart();
    let after = persist_view(&mut server.client(), &lims);
    check_persisted(&before, &after, "AOF appendfsync always, SIGKILL, restart");
}

#[test]
fn aof_everysec_survives_a_crash_after_one_second() {
    let mut server = Server::start_with(&["--appendonly", "yes", "--appendfsync", "everysec"]);
    let mut con = server.client();
    let lims = populate(&mut con, "p");
    let before = persist_view(&mut con, &lims);
    drop(con);
    sleep(Duration::from_millis(1_200)); // one fsync period
    server.kill();
    sleep(Duration::from_secs(1));
    server.restart();
    let after = persist_view(&mut server.client(), &lims);
    check_persisted(
        &before,
        &after,
        "AOF appendfsync everysec, 1.2 s, SIGKILL, restart",
    );
}

#[test]
fn bgrewriteaof_then_restart_keeps_every_value_and_expiry() {
    let mut server = Server::start_with(&["--appendonly", "yes"]);
    let mut con = server.client();
    let mut lims = populate(&mut con, "p");
    let _: String = redis::cmd("BGREWRITEAOF").query(&mut con).unwrap();
    wait_info(&mut con, "aof_rewrite_scheduled", "0");
    wait_info(&mut con, "aof_rewrite_in_progress", "0");
    assert_eq!(
        info_field(&mut con, "persistence", "aof_last_bgrewrite_status").as_deref(),
        Some("ok")
    );
    // More writes after the rewrite: they live in the incremental file.
    lims.extend(populate(&mut con, "q"));
    let before = persist_view(&mut con, &lims);
    drop(con);
    server.stop();
    sleep(Duration::from_secs(1));
    server.restart();
    let after = persist_view(&mut server.client(), &lims);
    check_persisted(&before, &after, "BGREWRITEAOF + more writes, stop, restart");
}

#[test]
fn debug_reload_keeps_every_value_and_expiry() {
    let server = Server::start();
    let mut con = server.client();
    let lims = populate(&mut con, "p");
    let before = persist_view(&mut con, &lims);
    sleep(Duration::from_millis(300));
    let _: () = redis::cmd("DEBUG").arg("RELOAD").query(&mut con).unwrap();
    let after = persist_view(&mut con, &lims);
    check_persisted(&before, &after, "DEBUG RELOAD");
}

#[test]
fn rdb_save_then_restart_keeps_every_value_and_expiry() {
    let mut server = Server::start_with(&["--appendonly", "no"]);
    let mut con = server.client();
    let lims = populate(&mut con, "p");
    let _: () = redis::cmd("SAVE").query(&mut con).unwrap();
    let before = persist_view(&mut con, &lims);
    // Written after SAVE: proves the restart loads that RDB and nothing else.
    cmd_ints(
        &mut con,
        &["RL.ADMIT", "after-save", "LIMIT", "3", "WINDOW", "60000"],
    );
    drop(con);
    server.stop();
    sleep(Duration::from_secs(1));
    server.restart();
    let mut con = server.client();
    assert_eq!(get(&mut con, "after-save"), None);
    let after = persist_view(&mut con, &lims);
    check_persisted(&before, &after, "RDB SAVE, stop, restart");
}

#[test]
fn debug_loadaof_keeps_every_value_and_expiry() {
    let server = Server::start_with(&["--appendonly", "yes"]);
    let mut con = server.client();
    let lims = populate(&mut con, "p");
    let before = persist_view(&mut con, &lims);
    sleep(Duration::from_millis(300));
    let _: () = redis::cmd("DEBUG").arg("LOADAOF").query(&mut con).unwrap();
    let after = persist_view(&mut con, &lims);
    check_persisted(&before, &after, "DEBUG LOADAOF");
}

// ---------------------------------------------------------------------------
// ACL
// ---------------------------------------------------------------------------

fn login(server: &Server, user: &str) -> Connection {
    let mut con = server.client();
    let ok: String = redis::cmd("AUTH")
        .arg(user)
        .arg("pw")
        .query(&mut con)
        .unwrap();
    assert_eq!(ok, "OK");
    con
}

#[test]
fn acl_key_patterns_cover_counters_and_meta_hashes() {
    let server = Server::start();
    let mut admin = server.client();
    for rule in [
        "ACL SETUSER a on >pw resetkeys ~tenant:a:* +@ratelimit",
        "ACL SETUSER r on >pw resetkeys ~lim:* %R~meta:* +@ratelimit +hset +get +hget",
    ] {
        assert_eq!(cmd_raw(&mut admin, &split(rule)), Value::Okay, "{rule}");
    }
    // Tenant b has state that tenant a must not be able to touch.
    let _: () = redis::cmd("HSET")
        .arg(&["tenant:b:meta", "max", "5", "duration", "60000"])
        .query(&mut admin)
        .unwrap();
    let _: () = redis::cmd("HSET")
        .arg(&["tenant:a:meta", "max", "5", "duration", "60000"])
        .query(&mut admin)
        .unwrap();
    cmd_ints(
        &mut admin,
        &["RL.ADMIT", "tenant:b:k", "META", "tenant:b:meta"],
    );
    cmd_ints(&mut admin, &["RL.THROTTLE", "tenant:b:t", "1", "1", "60"]);
    let b_keys = ["tenant:b:k", "tenant:b:t", "tenant:b:meta"];
    let before = raw_state(&mut admin, &b_keys);

    // Tenant a is refused every call that touches tenant b's keys ...
    let mut a = login(&server, "a");
    for call in [
        "RL.ADMIT tenant:b:k LIMIT 5 WINDOW 60000",
        "RL.ADMIT tenant:a:k META tenant:b:meta",
        "RL.REFUND tenant:b:k LIMIT 5 WINDOW 60000",
        "RL.TTL tenant:b:k LIMIT 5",
        "RL.TTL tenant:a:k META tenant:b:meta",
        "RL.LIMIT tenant:b:meta",
        "RL.RESET tenant:b:k",
        "RL.RESET tenant:b:meta",
        "RL.THROTTLE tenant:b:t 1 1 60",
        "RL.ADMITALL 2 tenant:a:k tenant:b:k POLICY LIMIT 5 WINDOW 60000 POLICY LIMIT 5 WINDOW 60000",
        "RL.ADMITALL 1 tenant:a:k POLICY META tenant:b:meta",
    ] {
        let e = cmd_err(&mut a, &split(call));
        assert!(e.starts_with("NOPERM"), "{call:?}: {e}");
    }
    // ... and the same calls on its own keys pass.
    for call in [
        "RL.ADMIT tenant:a:k LIMIT 5 WINDOW 60000",
        "RL.ADMIT tenant:a:k META tenant:a:meta",
        "RL.REFUND tenant:a:k LIMIT 5 WINDOW 60000",
        "RL.TTL tenant:a:k LIMIT 5",
        "RL.LIMIT tenant:a:meta",
        "RL.THROTTLE tenant:a:t 1 1 60",
        "RL.ADMITALL 2 tenant:a:k tenant:a:j POLICY LIMIT 5 WINDOW 60000 POLICY META tenant:a:meta",
        "RL.RESET tenant:a:k",
    ] {
        let v = cmd_raw(&mut a, &split(call));
        assert!(!is_err(&v), "{call:?}: {v:?}");
    }
    // RL.RESET only deletes, as DEL does: write-only access is enough.
    let rule = "ACL SETUSER w on >pw resetkeys %W~lim:* +@ratelimit";
    assert_eq!(cmd_raw(&mut admin, &split(rule)), Value::Okay);
    cmd_ints(
        &mut admin,
        &["RL.ADMIT", "lim:w", "LIMIT", "5", "WINDOW", "60000"],
    );
    let mut w = login(&server, "w");
    assert_eq!(common::int(&cmd_raw(&mut w, &["RL.RESET", "lim:w"])), 1);
    let e = cmd_err(
        &mut w,
        &["RL.ADMIT", "lim:w", "LIMIT", "5", "WINDOW", "60000"],
    );
    assert!(e.starts_with("NOPERM"), "RL.ADMIT reads the counter: {e}");
    let after = raw_state(&mut admin, &b_keys);
    assert_eq!(before, after, "tenant b's keys are untouched");

    // Read-only access to META hashes is enough to be admitted through them.
    let _: () = redis::cmd("HSET")
        .arg(&["meta:x", "max", "2", "duration", "60000"])
        .query(&mut admin)
        .unwrap();
    let mut r = login(&server, "r");
    let ok = cmd_ints(&mut r, &["RL.ADMIT", "lim:x", "META", "meta:x"]);
    assert_eq!(ok[..3], [1, 2, 1]);
    assert_eq!(
        cmd_ints(&mut r, &["RL.ADMIT", "lim:x", "META", "meta:x"])[0],
        1
    );
    assert_eq!(
        cmd_ints(&mut r, &["RL.ADMIT", "lim:x", "META", "meta:x"])[0],
        0
    );
    assert!(
        matches!(cmd_raw(&mut r, &["RL.TTL", "lim:x", "META", "meta:x"]), Value::Int(n) if n > 0)
    );
    assert_eq!(cmd_raw(&mut r, &["RL.LIMIT", "meta:x"]), Value::Int(2));
    let hget = cmd_raw(&mut r, &["HGET", "meta:x", "max"]);
    assert_eq!(try_text(&hget).as_deref(), Some("2"));
    for call in [
        "HSET meta:x max 100",
        "RL.ADMIT meta:x LIMIT 5 WINDOW 1000",
        "RL.RESET meta:x",
        "RL.ADMIT lim:y META other:x",
    ] {
        let e = cmd_err(&mut r, &split(call));
        assert!(e.starts_with("NOPERM"), "{call:?}: {e}");
    }

    // The category lists every command.
    let cat: Vec<String> = redis::cmd("ACL")
        .arg("CAT")
        .arg("ratelimit")
        .query(&mut admin)
        .unwrap();
    let got: BTreeSet<String> = cat.iter().map(|c| c.to_ascii_uppercase()).collect();
    let want: BTreeSet<String> = common::words(&split(
        "RL.ADMIT RL.ADMITALL RL.TTL RL.LIMIT RL.REFUND RL.RESET RL.THROTTLE \
         RL.ACQUIRE RL.RELEASE RL.EXTEND RL.INFLIGHT",
    ))
    .into_iter()
    .collect();
    assert_eq!(got, want);
}

// ---------------------------------------------------------------------------
// OOM
// ---------------------------------------------------------------------------

#[test]
fn over_maxmemory_writes_are_refused_and_reads_still_work() {
    let server = Server::start();
    let mut con = server.client();
    let _: () = redis::cmd("HSET")
        .arg(&["m", "max", "3", "duration", "60000"])
        .query(&mut con)
        .unwrap();
    let p: &[&str] = &["LIMIT", "3", "WINDOW", "60000"];
    for _ in 0..3 {
        cmd_ints(&mut con, &[&["RL.ADMIT", "k"][..], p].concat());
    }
    cmd_ints(&mut con, &["RL.THROTTLE", "t", "1", "1", "60"]);
    let keys = ["k", "t", "m"];
    let before: Vec<_> = keys
        .iter()
        .map(|k| (common::dump(&mut con, k), pexpiretime(&mut con, k)))
        .collect();
    for args in [
        ["CONFIG", "SET", "maxmemory-policy", "noeviction"],
        ["CONFIG", "SET", "maxmemory", "1"],
    ] {
        assert_eq!(cmd_raw(&mut con, &args), Value::Okay);
    }
    let oom_calls: Vec<Vec<&str>> = vec![
        [&["RL.ADMIT", "k"][..], p].concat(),
        [&["RL.ADMIT", "new"][..], p].concat(),
        [&["RL.REFUND", "k"][..], p].concat(),
        vec!["RL.THROTTLE", "t", "1", "1", "60"],
        [
            &["RL.ADMITALL", "2", "k", "new", "POLICY"][..],
            p,
            &["POLICY"][..],
            p,
        ]
        .concat(),
    ];
    for call in &oom_calls {
        let e = cmd_err(&mut con, call);
        assert!(e.starts_with("OOM"), "{call:?}: {e}");
    }
    // Reads still answer, from the unchanged state.
    let ttl = cmd_raw(&mut con, &["RL.TTL", "k", "LIMIT", "3"]);
    assert!(matches!(ttl, Value::Int(n) if n > 59_000), "{ttl:?}");
    assert_eq!(cmd_raw(&mut con, &["RL.LIMIT", "m"]), Value::Int(3));
    let via_meta = cmd_raw(&mut con, &["RL.TTL", "k", "META", "m"]);
    assert!(
        matches!(via_meta, Value::Int(n) if n > 59_000),
        "{via_meta:?}"
    );
    let after: Vec<_> = keys
        .iter()
        .map(|k| (common::dump(&mut con, k), pexpiretime(&mut con, k)))
        .collect();
    assert_eq!(before, after, "nothing changed while out of memory");
    // Deleting frees memory: RL.RESET stays allowed.
    assert_eq!(cmd_raw(&mut con, &["RL.RESET", "t"]), Value::Int(1));
    assert_eq!(
        cmd_raw(&mut con, &["CONFIG", "SET", "maxmemory", "0"]),
        Value::Okay
    );
    assert_eq!(
        cmd_ints(&mut con, &[&["RL.ADMIT", "new"][..], p].concat())[0],
        1
    );
}

// ---------------------------------------------------------------------------
// MULTI/EXEC and scripts
// ---------------------------------------------------------------------------

const FUNCTION_LIB: &str = "#!lua name=rltest
redis.register_function('rl_thrice', function(keys, args)
  local out = {}
  for i = 1, 3 do
    out[i] = redis.call('RL.ADMIT', keys[1], unpack(args))
  end
  return out
end)";

const EVAL_THRICE: &str = "local out = {}
for i = 1, 3 do out[i] = redis.call('RL.ADMIT', KEYS[1], unpack(ARGV)) end
return out";

fn thrice_replies(v: &Value) -> Vec<Vec<i64>> {
    match v {
        Value::Array(items) => items
            .iter()
            .map(|i| try_ints(i).expect("a reply"))
            .collect(),
        other => panic!("expected three replies, got {other:?}"),
    }
}

#[test]
fn transactions_and_scripts_see_frozen_time_and_replicate_their_effects() {
    let primary = Server::start_with(QUIET);
    let replica = Server::start();
    replica.replica_of(&primary);
    let mut con = primary.client();
    let loaded = cmd_raw(&mut con, &["FUNCTION", "LOAD", FUNCTION_LIB]);
    assert_eq!(try_text(&loaded).as_deref(), Some("rltest"), "{loaded:?}");

    // Windows of a minute: every key still exists when the replica is
    // compared, however slow a loaded machine makes the steps before.
    let policies: Vec<Vec<&str>> = vec![
        vec![
            "ALGO", "token", "LIMIT", "1", "WINDOW", "60000", "BURST", "1",
        ],
        vec![
            "ALGO", "gcra", "LIMIT", "1", "WINDOW", "60000", "BURST", "1",
        ],
        vec![
            "ALGO", "leaky", "LIMIT", "1", "WINDOW", "60000", "BURST", "0",
        ],
        vec!["ALGO", "fixed", "LIMIT", "1", "WINDOW", "60000"],
        vec!["ALGO", "sliding", "LIMIT", "1", "WINDOW", "60000"],
    ];
    for (n, policy) in policies.iter().enumerate() {
        let key = |ctx: &str| format!("mx:{n}:{ctx}");
        // MULTI/EXEC
        let mut cmds = vec![words(&["MULTI"])];
        for _ in 0..3 {
            let mut c = words(&["RL.ADMIT", &key("multi")]);
            c.extend(words(policy));
            cmds.push(c);
        }
        cmds.push(words(&["EXEC"]));
        let replies = pipeline(&mut con, &cmds).unwrap();
        let multi = thrice_replies(replies.last().unwrap());
        // EVAL
        let mut eval = vec!["EVAL", EVAL_THRICE, "1"];
        let k = key("eval");
        eval.push(&k);
        eval.extend(policy);
        let eval = thrice_replies(&cmd_raw(&mut con, &eval));
        // FCALL
        let mut fcall = vec!["FCALL", "rl_thrice", "1"];
        let k = key("fcall");
        fcall.push(&k);
        fcall.extend(policy);
        let fcall = thrice_replies(&cmd_raw(&mut con, &fcall));

        for (what, r) in [("MULTI", &multi), ("EVAL", &eval), ("FCALL", &fcall)] {
            assert_eq!(
                r[0][0], 1,
                "{policy:?} {what}: the first call passes: {r:?}"
            );
            assert_eq!(
                r[1][0], 0,
                "{policy:?} {what}: the second is refused: {r:?}"
            );
            assert!(r[1][3] > 0, "{policy:?} {what}: {r:?}");
            // Time does not move inside one transaction or script.
            assert_eq!(r[1], r[2], "{policy:?} {what}: frozen time, same answer");
        }
        // The three contexts agree with one another: the same decisions and
        // budgets exactly; the times within the ms or two between them (a
        // sliding window's times follow the epoch-aligned clock).
        for (what, other) in [("MULTI vs EVAL", &multi), ("FCALL vs EVAL", &fcall)] {
            for (a, b) in other.iter().zip(&eval) {
                assert_eq!(a[..3], b[..3], "{policy:?}: {what}");
                for i in 3..5 {
                    assert!(
                        (a[i] - b[i]).abs() <= 50,
                        "{policy:?}: {what}: {a:?} vs {b:?}"
                    );
                }
            }
        }
        // And the refusal's back-off is what RL.TTL says right after
        // (give or take the ms that passed).
        let mut ttl = vec!["RL.TTL", &k];
        ttl.extend(policy);
        let Value::Int(t) = cmd_raw(&mut con, &ttl) else {
            panic!("RL.TTL")
        };
        assert!(
            t <= fcall[1][3] && t >= fcall[1][3] - 500,
            "{policy:?}: {t} vs {fcall:?}"
        );
    }

    // RL.ADMITALL and RL.THROTTLE from a script, and a bad call inside one.
    let script = "local a = redis.call('RL.ADMITALL', 2, KEYS[1], KEYS[2], 'POLICY', 'LIMIT', 2, \
                  'WINDOW', 60000, 'POLICY', 'ALGO', 'gcra', 'LIMIT', 2, 'WINDOW', 60000)
                  local t = redis.call('RL.THROTTLE', KEYS[3], 1, 2, 600)
                  local ok, err = pcall(redis.call, 'RL.ADMIT', KEYS[1], 'LIMIT', -1, 'WINDOW', 10)
                  return {a[1], t[1], tostring(err and err.err or err)}";
    let v = cmd_raw(
        &mut con,
        &["EVAL", script, "3", "sx:{a}", "sx:{b}", "sx:thr"],
    );
    let Value::Array(items) = &v else {
        panic!("{v:?}")
    };
    assert_eq!(items[0], Value::Int(1), "{v:?}");
    assert_eq!(items[1], Value::Int(0), "{v:?}");
    assert!(try_text(&items[2]).unwrap().contains("LIMIT"), "{v:?}");
    // A MULTI whose RL call fails at run time still applies the rest.
    let replies = pipeline(
        &mut con,
        &[
            words(&["MULTI"]),
            words(&["RL.ADMIT", "mxe", "LIMIT", "2", "WINDOW", "60000"]),
            words(&[
                "RL.ADMIT", "mxe", "ALGO", "gcra", "LIMIT", "2", "WINDOW", "60000",
            ]),
            words(&["RL.ADMIT", "mxe", "LIMIT", "2", "WINDOW", "60000"]),
            words(&["EXEC"]),
        ],
    )
    .unwrap();
    let Value::Array(exec) = replies.last().unwrap() else {
        panic!("{replies:?}")
    };
    assert_eq!(try_ints(&exec[0]).unwrap()[..3], [1, 2, 1]);
    assert!(is_err(&exec[1]), "{exec:?}");
    assert_eq!(try_ints(&exec[2]).unwrap()[..3], [1, 2, 0]);

    wait_replica_offset(&primary, &replica);
    let c = assert_same_keyspace(&[("primary", &primary), ("replica", &replica)]);
    assert_eq!(c.equal, 19, "every key of this test, on both");
    println!(
        "transactions/scripts: {} keys identical on the replica",
        c.equal
    );
}

// ---------------------------------------------------------------------------
// Exactness under concurrency
// ---------------------------------------------------------------------------

/// One call inside MULTI with TIME: the server's µs clock and the reply.
struct Sample {
    time_us: i64,
    reply: Vec<i64>,
}

/// `threads` clients calling `call` in MULTI { TIME; call } until `run_for`
/// has passed; every sample, sorted by server time (the execution order).
fn hammer(server: &Server, threads: usize, run_for: Duration, call: Vec<String>) -> Vec<Sample> {
    let barrier = Arc::new(Barrier::new(threads));
    let stop = Arc::new(AtomicBool::new(false));
    let handles: Vec<_> = (0..threads)
        .map(|_| {
            let mut con = server.client();
            let barrier = barrier.clone();
            let stop = stop.clone();
            let call = call.clone();
            thread::spawn(move || {
                let cmds = vec![words(&["MULTI"]), words(&["TIME"]), call, words(&["EXEC"])];
                let mut out = Vec::new();
                barrier.wait();
                let start = Instant::now();
                while !stop.load(Ordering::Relaxed) && start.elapsed() < run_for {
                    let replies = pipeline(&mut con, &cmds).expect("hammer");
                    let Value::Array(exec) = &replies[3] else {
                        panic!("{replies:?}")
                    };
                    let Value::Array(t) = &exec[0] else {
                        panic!("{exec:?}")
                    };
                    let secs: i64 = try_text(&t[0]).unwrap().parse().unwrap();
                    let micros: i64 = try_text(&t[1]).unwrap().parse().unwrap();
                    let reply = try_ints(&exec[1]).unwrap_or_else(|| panic!("{exec:?}"));
                    out.push(Sample {
                        time_us: secs * 1_000_000 + micros,
                        reply,
                    });
                }
                out
            })
        })
        .collect();
    let mut all: Vec<Sample> = Vec::new();
    for h in handles {
        all.extend(h.join().expect("hammer thread"));
    }
    stop.store(true, Ordering::Relaxed);
    all.sort_by_key(|s| s.time_us);
    all
}

#[test]
fn fixed_window_admits_exactly_the_limit_per_window_under_50_clients() {
    const L: i64 = 25;
    const W: i64 = 250;
    let server = Server::start();
    let call = words(&[
        "RL.ADMIT",
        "hot",
        "LIMIT",
        &L.to_string(),
        "WINDOW",
        &W.to_string(),
    ]);
    let samples = hammer(&server, 50, Duration::from_millis(1_700), call);
    // Group by window: its end is the call's time plus reset_after.
    let mut windows: Vec<(i64, Vec<&Sample>)> = Vec::new();
    for s in &samples {
        let end = s.time_us / 1000 + s.reply[4];
        match windows.last_mut() {
            Some((e, group)) if (end - *e).abs() <= W / 2 => group.push(s),
            _ => windows.push((end, vec![s])),
        }
    }
    let mut full = 0;
    let mut unsaturated = 0;
    for (i, (end, group)) in windows.iter().enumerate() {
        let admitted: Vec<&&Sample> = group.iter().filter(|s| s.reply[0] == 1).collect();
        let refused = group.len() - admitted.len();
        assert!(
            admitted.len() as i64 <= L,
            "window {i} (end {end}) admitted {}",
            admitted.len()
        );
        // In execution order, the admitted calls count the budget down by
        // one each: remaining L-1, L-2, ..., 0, no repeat, no skip.
        let remaining: Vec<i64> = admitted.iter().map(|s| s.reply[2]).collect();
        let expected: Vec<i64> = (0..admitted.len() as i64).map(|n| L - 1 - n).collect();
        assert_eq!(remaining, expected, "window {i}");
        // Nothing is admitted after the first refusal of a window.
        let first_refusal = group.iter().position(|s| s.reply[0] == 0);
        if let Some(at) = first_refusal {
            assert!(group[at..].iter().all(|s| s.reply[0] == 0), "window {i}");
            full += 1;
            assert_eq!(admitted.len() as i64, L, "window {i}: demand exceeded L");
            assert!(refused > 0);
        } else {
            // Demand did not exceed L here (the last window, cut short by
            // the end of the run, or clients stalled by a loaded machine).
            unsaturated += 1;
        }
        if i + 1 < windows.len() {
            assert!(windows[i + 1].0 - end >= W - 2, "windows do not overlap");
        }
    }
    assert!(full >= 3, "only {full} saturated windows");
    println!(
        "fixed window under 50 clients: {} calls, {} windows, {full} saturated with exactly \
         {L} each, {unsaturated} not saturated (fewer than {L} requests)",
        samples.len(),
        windows.len()
    );
}

fn bucket_exactness(algo: &str) {
    const LIMIT: i64 = 100;
    const WINDOW: i64 = 1_000; // one token per 10 ms
    const BURST: i64 = 10;
    let interval_us = WINDOW * 1000 / LIMIT;
    let server = Server::start();
    let call = words(&[
        "RL.ADMIT",
        "bucket",
        "ALGO",
        algo,
        "LIMIT",
        &LIMIT.to_string(),
        "WINDOW",
        &WINDOW.to_string(),
        "BURST",
        &BURST.to_string(),
    ]);
    let samples = hammer(&server, 50, Duration::from_millis(1_500), call);
    let t0 = samples[0].time_us / 1000;
    assert_eq!(samples[0].reply[0], 1);
    let mut admitted = 0i64;
    for s in &samples {
        admitted += s.reply[0];
        // The module's clock is the call's ms, TIME can be a µs later: ±1 ms.
        let elapsed_ms = s.time_us / 1000 - t0;
        let max = BURST + (elapsed_ms + 1) * 1000 / interval_us;
        assert!(
            admitted <= max,
            "{algo}: {admitted} admitted by +{elapsed_ms} ms, bound {max}"
        );
    }
    let last = samples.last().unwrap();
    let elapsed_ms = last.time_us / 1000 - t0;
    // Saturated: tokens can only be lost while the bucket sits full, which
    // takes (BURST - 1) intervals = 90 ms without a call after a refusal.
    let longest_gap_ms = samples
        .windows(2)
        .map(|w| (w[1].time_us - w[0].time_us) / 1000)
        .max()
        .unwrap_or(0);
    let least = BURST + (elapsed_ms - 1) * 1000 / interval_us - 1;
    if longest_gap_ms < (BURST - 1) * interval_us / 1000 {
        assert!(
            admitted >= least,
            "{algo}: saturated, yet only {admitted} admitted in {elapsed_ms} ms (expected >= {least})"
        );
    } else {
        println!("{algo}: a {longest_gap_ms} ms pause in demand; lower bound not checked");
    }
    println!(
        "{algo} under 50 clients: {} calls, {admitted} admitted in {elapsed_ms} ms \
         (burst {BURST} + 1 per 10 ms: between {least} and {}; longest pause {longest_gap_ms} ms)",
        samples.len(),
        BURST + (elapsed_ms + 1) * 1000 / interval_us
    );
}

#[test]
fn token_bucket_never_exceeds_burst_plus_rate_under_50_clients() {
    bucket_exactness("token");
}

#[test]
fn gcra_never_exceeds_burst_plus_rate_under_50_clients() {
    bucket_exactness("gcra");
}

// ---------------------------------------------------------------------------
// Far-future state (clock jumps, hand-written values)
// ---------------------------------------------------------------------------

/// (key, state written with SET, policy, what bounds the back-off in ms)
fn far_future_cases(now_ms: i64) -> Vec<(String, String, Vec<String>, i64)> {
    let p = |algo: &str| words(&["ALGO", algo, "LIMIT", "10", "WINDOW", "1000"]);
    let hour_ns = (now_ms as i128 + 3_600_000) * 1_000_000;
    let hour_ms = now_ms + 3_600_000;
    vec![
        // As after the clock jumped back an hour: the key's own expiry is
        // an hour away too.
        (
            "cf:fixed:ttl".into(),
            format!("100 PXAT {hour_ms}"),
            p("fixed"),
            1000,
        ),
        (
            "cf:gcra:ttl".into(),
            format!("gcra:{hour_ns} PXAT {hour_ms}"),
            p("gcra"),
            1000,
        ),
        (
            "cf:gcra:max".into(),
            format!("gcra:{}", i64::MAX),
            p("gcra"),
            1000,
        ),
        (
            "cf:gcra:hour".into(),
            format!("gcra:{hour_ns}"),
            p("gcra"),
            1000,
        ),
        (
            "cf:leaky:max".into(),
            format!("leaky:{}", i64::MAX),
            p("leaky"),
            1100,
        ),
        (
            "cf:leaky:hour".into(),
            format!("leaky:{hour_ns}"),
            p("leaky"),
            1100,
        ),
        (
            "cf:token:max".into(),
            format!("token:0:{}", i64::MAX),
            p("token"),
            1000,
        ),
        (
            "cf:token:hour".into(),
            format!("token:0:{}", now_ms + 3_600_000),
            p("token"),
            1000,
        ),
        (
            "cf:sliding:max".into(),
            format!("sliding:{}:50:50", i64::MAX / 2),
            p("sliding"),
            2000,
        ),
        (
            "cf:sliding:hour".into(),
            format!("sliding:{}:50:50", now_ms + 3_600_000),
            p("sliding"),
            2000,
        ),
    ]
}

/// `SET key value`, or `SET key value PXAT t` for a state "value PXAT t".
fn set_state(con: &mut Connection, key: &str, state: &str) {
    let mut cmd = redis::cmd("SET");
    cmd.arg(key);
    match state.split_once(" PXAT ") {
        Some((value, at)) => cmd.arg(value).arg("PXAT").arg(at),
        None => cmd.arg(state),
    };
    let _: () = cmd.query(con).unwrap();
}

#[test]
fn far_future_state_gives_a_bounded_back_off_and_no_error() {
    let server = Server::start();
    let mut con = server.client();
    let now = server_time_ms(&mut con);
    for (key, state, policy, bound) in far_future_cases(now) {
        set_state(&mut con, &key, &state);
        let mut call = words(&["RL.ADMIT", &key]);
        call.extend(policy.clone());
        let r = try_ints(&run(&mut con, &call)).unwrap_or_else(|| panic!("{key}: an error"));
        assert!(
            r[3] >= 0 && r[3] <= bound,
            "{key} ({state}): retry_after {}",
            r[3]
        );
        assert!(r[4] <= bound + 100, "{key} ({state}): reset_after {}", r[4]);
        if r[0] == 1 {
            // Written afresh: the new expiry is within one window/bucket.
            let at = pexpiretime(&mut con, &key);
            assert!(
                at > 0 && at <= now + bound + 1000,
                "{key}: expires at {at}, now {now}"
            );
        }
        let mut ttl = words(&["RL.TTL", &key]);
        ttl.extend(policy);
        let v = run(&mut con, &ttl);
        assert!(
            matches!(v, Value::Int(n) if (0..=bound).contains(&n)),
            "{key}: RL.TTL {v:?}"
        );
    }
    // RL.THROTTLE on redis-cell's plain ns value and on ours.
    for (key, state) in [
        ("cf:thr:cell", i64::MAX.to_string()),
        ("cf:thr:ours", format!("gcra:{}", i64::MAX)),
    ] {
        let _: () = redis::cmd("SET")
            .arg(key)
            .arg(&state)
            .query(&mut con)
            .unwrap();
        let r = cmd_ints(&mut con, &["RL.THROTTLE", key, "4", "10", "1"]);
        assert!(r[3] <= 1 && r[4] <= 1, "{key}: {r:?}");
    }
    // Far-past and negative times are no error either.
    for (key, state, algo) in [
        ("cf:gcra:min", format!("gcra:{}", i64::MIN), "gcra"),
        ("cf:leaky:min", format!("leaky:{}", i64::MIN), "leaky"),
        (
            "cf:token:min",
            format!("token:{}:{}", i64::MAX, i64::MIN),
            "token",
        ),
        (
            "cf:sliding:zero",
            "sliding:0:9223372036854775807:9223372036854775807".into(),
            "sliding",
        ),
    ] {
        let _: () = redis::cmd("SET")
            .arg(key)
            .arg(&state)
            .query(&mut con)
            .unwrap();
        let r = cmd_ints(
            &mut con,
            &[
                "RL.ADMIT", key, "ALGO", algo, "LIMIT", "10", "WINDOW", "1000",
            ],
        );
        assert_eq!(r[0], 1, "{key} ({state}): {r:?}");
        let at = pexpiretime(&mut con, key);
        assert!(at > 0 && at <= now + 5_000, "{key}: expires at {at}");
    }
}

/// The back-off a far-future state gets is bounded (above), and it is true:
/// a caller who waits it out is admitted. (Before the fix, a refusal wrote
/// nothing, so the capped state was never stored, the key kept no expiry,
/// and every call was refused again with the same short back-off, forever.)
#[test]
fn far_future_state_is_admitted_again_after_the_back_off() {
    let server = Server::start();
    let mut con = server.client();
    let now = server_time_ms(&mut con);
    let mut cases: Vec<(String, String, Vec<String>)> = far_future_cases(now)
        .into_iter()
        .map(|(k, s, p, _)| {
            let mut call = words(&["RL.ADMIT", &k]);
            call.extend(p);
            (k, s, call)
        })
        .collect();
    cases.push((
        "cf:thr:cell".into(),
        i64::MAX.to_string(),
        words(&["RL.THROTTLE", "cf:thr:cell", "4", "10", "1"]),
    ));
    let mut stuck = Vec::new();
    for (key, state, call) in &cases {
        set_state(&mut con, key, state);
        let mut admitted = false;
        // Do as told: wait the back-off, then call again; a few rounds.
        for _ in 0..4 {
            let r = try_ints(&run(&mut con, call)).unwrap();
            let (ok, wait_ms) = if call[0] == "RL.THROTTLE" {
                (r[0] == 0, r[3] * 1000)
            } else {
                (r[0] == 1, r[3])
            };
            if ok {
                admitted = true;
                break;
            }
            sleep(Duration::from_millis(wait_ms.clamp(1, 1_100) as u64 + 5));
        }
        if !admitted {
            stuck.push(format!(
                "{key} = {state} (PTTL {})",
                common::pttl(&mut con, key)
            ));
        }
    }
    assert!(
        stuck.is_empty(),
        "still refused after waiting retry_after 4 times:\n{}",
        stuck.join("\n")
    );
}

/// With I/O threads (Valkey 8+ reads and writes client sockets on them;
/// commands still run on the main thread), counts stay exact and a replica
/// stays identical.
#[test]
fn io_threads_keep_counts_exact_and_the_replica_identical() {
    const CLIENTS: usize = 50;
    const ROUNDS: usize = 40;
    const PER_ROUND: usize = 10;
    // Settings for tests that hand every event to the I/O threads, not
    // only those of a busy loop: 8.x scales threads by events per thread,
    // 9.x by how busy the main thread is, which a fast machine may never be.
    let mut threaded = vec!["--io-threads", "2", "--events-per-io-thread", "0"];
    if common::server_major_version() >= 9 {
        threaded.extend(["--io-threads-always-active", "yes"]);
    }
    let primary = Server::start_with(&threaded);
    let replica = Server::start_with(&threaded);
    replica.replica_of(&primary);
    let barrier = Arc::new(Barrier::new(CLIENTS));
    let handles: Vec<_> = (0..CLIENTS)
        .map(|id| {
            let mut con = primary.client();
            let barrier = barrier.clone();
            thread::spawn(move || {
                // Every other call goes to one hot counter that never fills,
                // the rest to 20 token buckets of 10 that do.
                let calls: Vec<Vec<String>> = (0..PER_ROUND)
                    .map(|i| match i % 2 {
                        0 => words(&["RL.ADMIT", "io:hot", "LIMIT", "1000000", "WINDOW", "600000"]),
                        _ => {
                            let key = format!("io:bucket:{}", (id + i) % 20);
                            let token = ["ALGO", "token", "LIMIT", "10", "WINDOW", "600000"];
                            let mut c = words(&["RL.ADMIT", &key]);
                            c.extend(words(&token));
                            c
                        }
                    })
                    .collect();
                let (mut admitted, mut refused) = (0i64, 0i64);
                barrier.wait();
                // One call at a time: the server hands reads to its I/O
                // threads when many clients wait, not for a few pipelines.
                for _ in 0..ROUNDS {
                    for call in &calls {
                        let args: Vec<&str> = call.iter().map(String::as_str).collect();
                        let reply = cmd_raw(&mut con, &args);
                        match try_ints(&reply).map(|r| r[0]) {
                            Some(1) => admitted += 1,
                            Some(0) => refused += 1,
                            _ => panic!("{reply:?}"),
                        }
                    }
                }
                (admitted, refused)
            })
        })
        .collect();
    let (mut admitted, mut refused) = (0, 0);
    for h in handles {
        let (a, r) = h.join().expect("client thread");
        admitted += a;
        refused += r;
    }
    let hot_calls = (CLIENTS * ROUNDS * PER_ROUND / 2) as i64;
    let mut con = primary.client();
    let hot: i64 = redis::cmd("GET").arg("io:hot").query(&mut con).unwrap();
    assert_eq!(hot, hot_calls, "every call on the hot counter counted once");
    // 20 buckets of 10, never refilled within the run: exactly 200 admitted.
    assert_eq!(
        admitted,
        hot_calls + 200,
        "{admitted} admitted, {refused} refused"
    );
    let reads = info_field(&mut con, "stats", "io_threaded_reads_processed");
    let reads: i64 = reads.and_then(|v| v.parse().ok()).unwrap_or(0);
    assert!(
        reads > 0,
        "the I/O threads read nothing: the test ran without them"
    );
    wait_replica_offset(&primary, &replica);
    let c = assert_same_keyspace(&[("primary", &primary), ("replica", &replica)]);
    assert_eq!(c.equal, 21, "the hot counter and 20 buckets, on both");
    println!(
        "I/O threads: {admitted} admitted, {refused} refused, {reads} reads on the I/O \
         threads; {} keys identical on the replica",
        c.equal
    );
}
