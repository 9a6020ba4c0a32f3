//! Concurrency leases against real servers: RL.ACQUIRE, RL.RELEASE,
//! RL.EXTEND and RL.INFLIGHT as docs/reference.md pins them, the ceiling
//! under concurrent load, crash safety (slots free exactly at their
//! deadlines), bad input, replication, AOF, failover and cluster routing;
//! and the module against the FUNCTION library, scenario by scenario.
//!
//! Calls whose expectations depend on the clock run inside one MULTI/EXEC
//! after TIME (`common::timed`): the server's time is frozen there, so TIME
//! is exactly the `now` the module used.

use crate::common;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use crate::common::backend::{Backend, BOTH};
use crate::common::cluster::Cluster;
use crate::common::{
    cmd_err, cmd_int, cmd_raw, dump, error_text, exec, generated_id_ms, ids_with_ms, info_field,
    is_generated_id, pexpiretime, repl_offset, run, server_time_ms, show, split, time_ms, timed,
    wait_replica_offset, without_ids, Rng, Server, QUIET,
};
use redis::{Connection, Value};

/// `template` with `{now}` and `{now+N}` replaced by the time.
fn at(template: &str, now: i64) -> String {
    let mut out = String::new();
    let mut rest = template;
    while let Some(start) = rest.find("{now") {
        out.push_str(&rest[..start]);
        let end = start + rest[start..].find('}').expect("a closing brace");
        let offset = rest[start + 4..end].trim_start_matches('+');
        let offset: i64 = if offset.is_empty() {
            0
        } else {
            offset.parse().unwrap()
        };
        out.push_str(&(now + offset).to_string());
        rest = &rest[end + 1..];
    }
    out.push_str(rest);
    out
}

/// A call written as one line in the module's syntax, for `backend`.
fn line(backend: Backend, call: &str) -> Vec<String> {
    backend.call(&split(call))
}

/// Runs `table` (call, expected reply as `show` writes it, a generated id
/// as `"<id@ms>"`) on `backend` in one timed transaction and checks every
/// reply.
fn check_table(backend: Backend, con: &mut Connection, table: &[(&str, &str)]) {
    let calls: Vec<Vec<String>> = table.iter().map(|(call, _)| line(backend, call)).collect();
    let (now, replies) = timed(con, &calls);
    for ((call, want), got) in table.iter().zip(&replies) {
        assert_eq!(ids_with_ms(&show(got)), at(want, now), "{backend:?} {call}");
    }
}

/// An RL.ACQUIRE reply: (acquired, limit, in_flight, retry_after_ms, id).
fn acquired(v: &Value) -> (i64, i64, i64, i64, Option<String>) {
    let Value::Array(items) = v else {
        panic!("not an RL.ACQUIRE reply: {v:?}")
    };
    let int = |i: usize| common::int(&items[i]);
    (int(0), int(1), int(2), int(3), common::text(&items[4]))
}

/// Members and scores of a sorted set, and its PEXPIRETIME.
fn lease_state(con: &mut Connection, key: &str) -> (Vec<(String, i64)>, i64) {
    let members: Vec<(String, i64)> = redis::cmd("ZRANGE")
        .arg(&[key, "0", "-1", "WITHSCORES"])
        .query(con)
        .unwrap();
    (members, pexpiretime(con, key))
}

fn leases_info(con: &mut Connection) -> [i64; 5] {
    ["acquired", "refused", "released", "extended", "reclaimed"].map(|what| {
        info_field(con, "ratelimit", &format!("ratelimit_leases_{what}"))
            .expect("a lease counter")
            .parse()
            .unwrap()
    })
}

#[test]
fn replies_follow_the_contract() {
    for backend in BOTH {
        replies_follow_the_contract_on(backend);
    }
}

fn replies_follow_the_contract_on(backend: Backend) {
    let server = backend.start();
    let mut con = server.client();
    check_table(
        backend,
        &mut con,
        &[
            ("RL.ACQUIRE s LIMIT 2 TTL 1000 ID a", "[1, 2, 1, 0, \"a\"]"),
            (
                "RL.ACQUIRE s LIMIT 2 TTL 500",
                "[1, 2, 2, 0, \"<id@{now}>\"]",
            ),
            ("RL.ACQUIRE s LIMIT 2 TTL 1000", "[0, 2, 2, 500, nil]"),
            // Renewing a live id takes no second slot, even at the limit.
            ("RL.ACQUIRE s limit 2 ttl 2000 id a", "[1, 2, 2, 0, \"a\"]"),
            ("RL.INFLIGHT s", "2"),
            ("ZCARD s", "2"),
            ("ZSCORE s a", "\"{now+2000}\""),
            ("PEXPIRETIME s", "{now+2000}"),
            ("RL.ACQUIRE s LIMIT 3 TTL 100 ID b", "[1, 3, 3, 0, \"b\"]"),
            ("RL.RELEASE s a", "1"),
            ("RL.RELEASE s a", "0"),
            ("RL.RELEASE s nobody", "0"),
            ("RL.EXTEND s a TTL 100", "0"),
            ("RL.EXTEND s b ttl 700", "1"),
            ("ZSCORE s b", "\"{now+700}\""),
            ("PEXPIRETIME s", "{now+700}"),
            ("RL.INFLIGHT s", "2"),
            // A missing key.
            ("RL.INFLIGHT missing", "0"),
            ("RL.RELEASE missing x", "0"),
            ("RL.EXTEND missing x TTL 5", "0"),
            ("EXISTS missing", "0"),
            // Unlimited: admitted, nothing written, no TTL needed.
            ("RL.ACQUIRE u", "[1, 0, 0, 0, \"<id@{now}>\"]"),
            ("RL.ACQUIRE u ID job-7", "[1, 0, 0, 0, \"job-7\"]"),
            ("HSET m0 max 0 ttl 5", "2"),
            ("RL.ACQUIRE u META m0 ID j", "[1, 0, 0, 0, \"j\"]"),
            (
                "RL.ACQUIRE u META nothing-here",
                "[1, 0, 0, 0, \"<id@{now}>\"]",
            ),
            ("EXISTS u", "0"),
            // Limits as data; inline options win.
            ("HSET m max 2 ttl 1500", "2"),
            ("RL.ACQUIRE v META m ID x", "[1, 2, 1, 0, \"x\"]"),
            ("ZSCORE v x", "\"{now+1500}\""),
            ("RL.ACQUIRE v META m LIMIT 1", "[0, 1, 1, 1500, nil]"),
            ("RL.ACQUIRE v META m TTL 10 ID y", "[1, 2, 2, 0, \"y\"]"),
            ("ZSCORE v y", "\"{now+10}\""),
            ("PEXPIRETIME v", "{now+1500}"),
            // The last release deletes the key.
            ("RL.RELEASE v x", "1"),
            ("RL.RELEASE v y", "1"),
            ("EXISTS v", "0"),
        ],
    );
    // Generated ids never repeat for a key, even within one ms.
    let calls = vec![line(backend, "RL.ACQUIRE g LIMIT 100 TTL 60000"); 50];
    let (now, replies) = timed(&mut con, &calls);
    let mut ids: Vec<String> = replies.iter().map(|r| acquired(r).4.unwrap()).collect();
    assert!(
        ids.iter().all(|id| generated_id_ms(id) == Some(now)),
        "{backend:?}: {ids:?}"
    );
    // Released and taken again in the same ms: still a new id each time.
    let mut again = Vec::new();
    for id in &ids {
        again.push(backend.call(&["RL.RELEASE", "g", id]));
        again.push(line(backend, "RL.ACQUIRE g LIMIT 100 TTL 60000"));
    }
    let replies = exec(&mut con, &again);
    for pair in replies.chunks(2) {
        assert_eq!(pair[0], Value::Int(1));
        ids.push(acquired(&pair[1]).4.unwrap());
    }
    let distinct: std::collections::BTreeSet<&String> = ids.iter().collect();
    assert_eq!(distinct.len(), 100, "{backend:?}: {ids:?}");
}

/// Module only: the library answers a map when asked (`FORMAT map`, see
/// `acquire_maps_match_for_resp3`), not by the protocol.
#[test]
fn module_only_resp3_clients_get_a_map() {
    let server = Server::start();
    let mut con = server.client();
    let _: Value = redis::cmd("HELLO").arg(3).query(&mut con).unwrap();
    check_table(
        Backend::Module,
        &mut con,
        &[
            (
                "RL.ACQUIRE r LIMIT 1 TTL 800 ID a",
                "{+acquired: 1, +limit: 1, +in_flight: 1, +retry_after_ms: 0, +lease_id: \"a\"}",
            ),
            (
                "RL.ACQUIRE r LIMIT 1 TTL 800",
                "{+acquired: 0, +limit: 1, +in_flight: 1, +retry_after_ms: 800, +lease_id: nil}",
            ),
            (
                "RL.ACQUIRE free",
                "{+acquired: 1, +limit: 0, +in_flight: 0, +retry_after_ms: 0, +lease_id: \"<id@{now}>\"}",
            ),
            ("RL.RELEASE r a", "1"),
            ("RL.INFLIGHT r", "0"),
        ],
    );
}

/// Module only: INFO counters and events are the module's.
#[test]
fn module_only_info_counts_leases_and_a_refusal_fires_rl_hit() {
    let server = Server::start_with(&["--notify-keyspace-events", "Ed"]);
    let mut con = server.client();
    common::subscribe!(pubsub = server, "__keyevent@*__:rl.*");
    assert_eq!(leases_info(&mut con), [0; 5]);
    let acquire = split("RL.ACQUIRE k LIMIT 1 TTL 60000 ID a");
    let other = split("RL.ACQUIRE k LIMIT 1 TTL 60000 ID b");
    for (call, want) in [
        (&acquire, "[1, 1, 1, 0, \"a\"]"),
        (&acquire, "[1, 1, 1, 0, \"a\"]"),
        (&other, "[0, 1, 1, "),
        (&split("RL.EXTEND k a TTL 60000"), "1"),
        (&split("RL.EXTEND k b TTL 60000"), "0"),
        (&split("RL.RELEASE k a"), "1"),
        (&split("RL.RELEASE k a"), "0"),
        (&split("RL.ACQUIRE unlimited"), "[1, 0, 0, 0, "),
    ] {
        let got = show(&cmd_raw(&mut con, call));
        assert!(got.starts_with(want), "{call:?}: {got}");
    }
    // Two short leases expire and are reclaimed by the next call.
    check_table(
        Backend::Module,
        &mut con,
        &[
            ("RL.ACQUIRE e LIMIT 5 TTL 1 ID x", "[1, 5, 1, 0, \"x\"]"),
            ("RL.ACQUIRE e LIMIT 5 TTL 1 ID y", "[1, 5, 2, 0, \"y\"]"),
            ("RL.ACQUIRE e LIMIT 5 TTL 60000 ID z", "[1, 5, 3, 0, \"z\"]"),
        ],
    );
    thread::sleep(Duration::from_millis(5));
    assert_eq!(show(&cmd_raw(&mut con, &split("RL.RELEASE e x"))), "0");
    assert_eq!(cmd_int(&mut con, &["ZCARD", "e"]), 1);
    // acquired (a renewal counts), refused, released, extended, reclaimed.
    assert_eq!(leases_info(&mut con), [5, 1, 1, 1, 2]);
    // Exactly one event: the refusal of b.
    let msg = pubsub.get_message().unwrap();
    assert_eq!(msg.get_channel_name(), "__keyevent@0__:rl.hit");
    assert_eq!(msg.get_payload::<String>().unwrap(), "k");
    let _: () = redis::cmd("CONFIG")
        .arg(&["SET", "ratelimit.hit-events", "no"])
        .query(&mut con)
        .unwrap();
    cmd_raw(
        &mut con,
        &["RL.ACQUIRE", "k2", "LIMIT", "1", "TTL", "60000"],
    );
    cmd_raw(
        &mut con,
        &["RL.ACQUIRE", "k2", "LIMIT", "1", "TTL", "60000"],
    );
    let _: () = redis::cmd("CONFIG")
        .arg(&["SET", "ratelimit.hit-events", "yes"])
        .query(&mut con)
        .unwrap();
    cmd_raw(
        &mut con,
        &["RL.ACQUIRE", "k3", "LIMIT", "1", "TTL", "60000"],
    );
    cmd_raw(
        &mut con,
        &["RL.ACQUIRE", "k3", "LIMIT", "1", "TTL", "60000"],
    );
    let msg = pubsub.get_message().unwrap();
    assert_eq!(
        msg.get_payload::<String>().unwrap(),
        "k3",
        "no event while hit-events is off"
    );
}

/// 50 clients take turns at 5 slots: acquire, hold a few ms, release. A
/// sampler never sees more than 5 in flight; every lease releases with 1.
#[test]
fn the_ceiling_holds_under_concurrent_load() {
    for backend in BOTH {
        the_ceiling_holds_under_concurrent_load_on(backend);
    }
}

fn the_ceiling_holds_under_concurrent_load_on(backend: Backend) {
    const CLIENTS: usize = 50;
    const ROUNDS: usize = 60;
    const LIMIT: i64 = 5;
    let server = backend.start();
    let done = Arc::new(AtomicBool::new(false));
    let samples = Arc::new(AtomicUsize::new(0));
    let sampler = {
        let (done, samples) = (done.clone(), samples.clone());
        let mut con = server.client();
        thread::spawn(move || {
            let mut most = 0;
            while !done.load(Ordering::Relaxed) {
                let in_flight = common::int(&backend.raw(&mut con, &["RL.INFLIGHT", "pool"]));
                let card = cmd_int(&mut con, &["ZCARD", "pool"]);
                assert!(in_flight <= LIMIT && card <= LIMIT, "{in_flight} / {card}");
                most = most.max(in_flight);
                samples.fetch_add(1, Ordering::Relaxed);
            }
            most
        })
    };
    let started = Instant::now();
    let workers: Vec<_> = (0..CLIENTS)
        .map(|w| {
            let mut con = server.client();
            thread::spawn(move || {
                let (mut refused, mut rng) = (0, Rng::new(w as u64 + 1));
                let acquire = split("RL.ACQUIRE pool LIMIT 5 TTL 30000");
                for _ in 0..ROUNDS {
                    let id = loop {
                        let (ok, limit, in_flight, retry, id) =
                            acquired(&backend.raw(&mut con, &acquire));
                        assert_eq!(limit, LIMIT);
                        assert!((1..=LIMIT).contains(&in_flight), "in flight {in_flight}");
                        if ok == 1 {
                            assert_eq!(retry, 0);
                            break id.unwrap();
                        }
                        assert!(retry > 0 && retry <= 30_000, "retry {retry}");
                        refused += 1;
                        thread::sleep(Duration::from_micros(200 + rng.below(800) as u64));
                    };
                    thread::sleep(Duration::from_millis(1 + rng.below(3) as u64));
                    let released =
                        common::int(&backend.raw(&mut con, &["RL.RELEASE", "pool", &id]));
                    assert_eq!(released, 1, "{id}");
                }
                refused
            })
        })
        .collect();
    let refused: usize = workers.into_iter().map(|w| w.join().unwrap()).sum();
    done.store(true, Ordering::Relaxed);
    let most = sampler.join().unwrap();
    let mut con = server.client();
    assert_eq!(
        cmd_int(&mut con, &["EXISTS", "pool"]),
        0,
        "{backend:?}: the key is gone"
    );
    if backend == Backend::Module {
        // INFO's lease counters are the module's.
        let [acquired, refused_info, released, ..] = leases_info(&mut con);
        assert_eq!(acquired, (CLIENTS * ROUNDS) as i64);
        assert_eq!(released, (CLIENTS * ROUNDS) as i64);
        assert_eq!(refused_info, refused as i64);
    }
    assert!(
        most >= 1 && refused > 0,
        "{backend:?}: the slots were contended"
    );
    println!(
        "{backend:?}: {} leases by {CLIENTS} clients in {:?}: {refused} refusals, {} samples, at most {most} in flight",
        CLIENTS * ROUNDS,
        started.elapsed(),
        samples.load(Ordering::Relaxed)
    );
}

/// Holders that never release (killed) free their slots exactly at their
/// deadlines: every call before a deadline is refused with the exact wait,
/// and a call at or after it is admitted.
#[test]
fn abandoned_leases_free_their_slots_exactly_at_their_deadlines() {
    for backend in BOTH {
        abandoned_leases_free_their_slots_on(backend);
    }
}

fn abandoned_leases_free_their_slots_on(backend: Backend) {
    let server = backend.start();
    let mut con = server.client();
    // Two holders on their own connections, which then go away.
    let mut deadlines = Vec::new();
    for (id, ttl) in [("first", 300), ("second", 600)] {
        let mut holder = server.client();
        let call = backend.call(&[
            "RL.ACQUIRE",
            "gpu",
            "LIMIT",
            "2",
            "TTL",
            &ttl.to_string(),
            "ID",
            id,
        ]);
        let (now, replies) = timed(&mut holder, &[call]);
        assert_eq!(acquired(&replies[0]).0, 1);
        deadlines.push(now + ttl);
        drop(holder);
    }
    let (members, expiry) = lease_state(&mut con, "gpu");
    assert_eq!(
        members,
        [
            ("first".into(), deadlines[0]),
            ("second".into(), deadlines[1])
        ]
    );
    assert_eq!(expiry, deadlines[1]);
    let probe = line(backend, "RL.ACQUIRE gpu LIMIT 2 TTL 60000 ID newcomer");
    for (i, &deadline) in deadlines.iter().enumerate() {
        // Well before the deadline: refused, told the exact wait.
        let (now, replies) = timed(&mut con, std::slice::from_ref(&probe));
        assert_eq!(
            show(&replies[0]),
            format!("[0, 2, 2, {}, nil]", deadline - now)
        );
        // Sleep to just before the deadline, then ask without pause.
        let wait = deadline - server_time_ms(&mut con) - 100;
        if wait > 0 {
            thread::sleep(Duration::from_millis(wait as u64));
        }
        let (mut last_refused, mut refusals) = (None, 0);
        let admitted_at = loop {
            let (now, replies) = timed(&mut con, std::slice::from_ref(&probe));
            let (ok, _, in_flight, retry, _) = acquired(&replies[0]);
            if ok == 1 {
                break now;
            }
            // Refused: only before the deadline, told exactly how long.
            assert!(now < deadline, "refused at {now}, deadline {deadline}");
            assert_eq!(retry, deadline - now);
            assert_eq!(in_flight, 2);
            last_refused = Some(now);
            refusals += 1;
        };
        assert!(
            admitted_at >= deadline,
            "admitted at {admitted_at} < {deadline}"
        );
        assert!(last_refused.is_none_or(|at| at < deadline));
        // The expired holder's lease is gone, the newcomer holds its slot.
        let (members, _) = lease_state(&mut con, "gpu");
        let ids: Vec<&str> = members.iter().map(|(id, _)| id.as_str()).collect();
        match i {
            0 => assert_eq!(ids, ["second", "newcomer"]),
            _ => assert_eq!(ids, ["third", "newcomer"]),
        }
        if i == 0 {
            // The newcomer leaves again, so that the second deadline is
            // the next one to free a slot.
            let release = backend.raw(&mut con, &["RL.RELEASE", "gpu", "newcomer"]);
            assert_eq!(release, Value::Int(1), "{backend:?}");
            let third = line(backend, "RL.ACQUIRE gpu LIMIT 2 TTL 60000 ID third");
            assert_eq!(acquired(&run(&mut con, &third)).0, 1);
        }
        println!("{backend:?}: deadline {deadline}: {refusals} refusals up to {last_refused:?}, admitted at {admitted_at}");
    }
    // A lease that was reclaimed cannot be released or extended.
    let release = backend.raw(&mut con, &["RL.RELEASE", "gpu", "first"]);
    assert_eq!(release, Value::Int(0), "{backend:?}");
    let extend = backend.raw(&mut con, &["RL.EXTEND", "gpu", "second", "TTL", "1000"]);
    assert_eq!(extend, Value::Int(0), "{backend:?}");
}

#[test]
fn a_heartbeat_keeps_a_lease_past_its_first_ttl() {
    for backend in BOTH {
        a_heartbeat_keeps_a_lease_past_its_first_ttl_on(backend);
    }
}

fn a_heartbeat_keeps_a_lease_past_its_first_ttl_on(backend: Backend) {
    let server = backend.start();
    let mut con = server.client();
    let (start, r) = timed(
        &mut con,
        &[line(backend, "RL.ACQUIRE job LIMIT 1 TTL 500 ID w")],
    );
    assert_eq!(acquired(&r[0]).0, 1);
    // Beat every 50 ms for three times the TTL (a beat may come late by up to 450 ms).
    while server_time_ms(&mut con) < start + 1500 {
        thread::sleep(Duration::from_millis(50));
        let (now, r) = timed(
            &mut con,
            &[
                line(backend, "RL.EXTEND job w TTL 500"),
                line(backend, "ZSCORE job w"),
                line(backend, "RL.ACQUIRE job LIMIT 1 TTL 500"),
            ],
        );
        assert_eq!(r[0], Value::Int(1), "{backend:?}: the beat at {now}");
        assert_eq!(show(&r[1]), format!("\"{}\"", now + 500));
        assert_eq!(acquired(&r[2]).0, 0, "the slot stays taken");
    }
    // The beats stop: past the deadline, the holder learns it lost the slot.
    let deadline: i64 = redis::cmd("ZSCORE")
        .arg(&["job", "w"])
        .query(&mut con)
        .unwrap();
    while server_time_ms(&mut con) <= deadline {
        thread::sleep(Duration::from_millis(20));
    }
    let extend = backend.raw(&mut con, &["RL.EXTEND", "job", "w", "TTL", "300"]);
    assert_eq!(extend, Value::Int(0), "{backend:?}");
    let release = backend.raw(&mut con, &["RL.RELEASE", "job", "w"]);
    assert_eq!(release, Value::Int(0), "{backend:?}");
    assert_eq!(cmd_int(&mut con, &["EXISTS", "job"]), 0);
}

/// Module only: it also checks the INFO counters (no lease counted, the
/// errors counted); the contract's texts from both backends are
/// `bad_input::every_malformed_lease_call_gets_the_contracts_error_and_changes_nothing`.
#[test]
fn module_only_every_malformed_call_is_an_error_counted_in_info_that_changes_nothing() {
    let server = Server::start();
    let mut con = server.client();
    for setup in [
        "SET str text",
        "ZADD frac 1.5 a",
        "ZADD neg -1 a",
        "ZADD big 9007199254740994 a",
        "ZADD inf inf a",
        "SET metastr text",
        "HSET metabad max x ttl 100",
        "HSET metanottl max 2",
        "HSET metattl max 2 ttl 0",
        "HSET metattlx max 2 ttl 1.5",
        "HSET metabig max 2 ttl 9007199254740993",
    ] {
        let v = run(&mut con, &common::words(&split(setup)));
        assert!(!matches!(v, Value::ServerError(_)), "{setup}: {v:?}");
    }
    cmd_raw(&mut con, &split("RL.ACQUIRE held LIMIT 1 TTL 600000 ID a"));
    let keys = [
        "str",
        "frac",
        "neg",
        "big",
        "inf",
        "metastr",
        "metabad",
        "metanottl",
        "metattl",
        "metattlx",
        "metabig",
        "held",
        "new",
    ];
    let positive = "must be an integer from 1 to 9223372036854775807";
    let not_deadline = "ERR lease key holds a score that is not a deadline in ms";
    let wrongtype = "WRONGTYPE Operation against a key holding the wrong kind of value";
    let mut cases: Vec<(Vec<&str>, String)> = vec![
        (
            split("RL.ACQUIRE new BOGUS 1"),
            "ERR unknown option 'BOGUS'".into(),
        ),
        (
            split("RL.ACQUIRE new LIMIT 1 TTL 5 cost 1"),
            "ERR unknown option 'cost'".into(),
        ),
        (
            split("RL.ACQUIRE new LIMIT"),
            "ERR LIMIT needs a value".into(),
        ),
        (
            split("RL.ACQUIRE new LIMIT 1 TTL"),
            "ERR TTL needs a value".into(),
        ),
        (
            split("RL.ACQUIRE new META"),
            "ERR META needs a value".into(),
        ),
        (
            split("RL.ACQUIRE new LIMIT 1 TTL 5 ID"),
            "ERR ID needs a value".into(),
        ),
        (
            split("RL.ACQUIRE new TTL 5 LIMIT 1 ttl 5"),
            "ERR TTL is given more than once".into(),
        ),
        (
            split("RL.ACQUIRE new LIMIT 1 limit 1 TTL 5"),
            "ERR LIMIT is given more than once".into(),
        ),
        (
            split("RL.ACQUIRE new LIMIT 0 TTL 5"),
            format!("ERR LIMIT {positive}"),
        ),
        (
            split("RL.ACQUIRE new LIMIT -1 TTL 5"),
            format!("ERR LIMIT {positive}"),
        ),
        (
            split("RL.ACQUIRE new LIMIT 1.5 TTL 5"),
            format!("ERR LIMIT {positive}"),
        ),
        (
            split("RL.ACQUIRE new LIMIT 1 TTL 0"),
            format!("ERR TTL {positive}"),
        ),
        (
            split("RL.ACQUIRE new LIMIT 1 TTL -5"),
            format!("ERR TTL {positive}"),
        ),
        (
            split("RL.ACQUIRE new LIMIT 1 TTL 9223372036854775808"),
            format!("ERR TTL {positive}"),
        ),
        (
            split("RL.ACQUIRE new LIMIT 1 TTL 9223372036854775807"),
            "ERR TTL is too large: the lease deadline passes 2^53 ms".into(),
        ),
        (
            split("RL.ACQUIRE new LIMIT 1 TTL 9007199254740992"),
            "ERR TTL is too large: the lease deadline passes 2^53 ms".into(),
        ),
        (
            split("RL.ACQUIRE new META metabig"),
            "ERR TTL is too large: the lease deadline passes 2^53 ms".into(),
        ),
        (
            vec!["RL.ACQUIRE", "new", "LIMIT", "1", "TTL", "5", "ID", ""],
            "ERR ID must be a non-empty string".into(),
        ),
        (
            split("RL.ACQUIRE new LIMIT 1"),
            "ERR a limit is set but no TTL: give TTL or set field 'ttl' in the META hash".into(),
        ),
        (
            split("RL.ACQUIRE new META metanottl"),
            "ERR a limit is set but no TTL: give TTL or set field 'ttl' in the META hash".into(),
        ),
        (
            split("RL.ACQUIRE new META metabad"),
            "ERR META hash field 'max' must be an integer from 0 to 9223372036854775807".into(),
        ),
        (
            split("RL.ACQUIRE new META metattl"),
            format!("ERR META hash field 'ttl' {positive}"),
        ),
        (
            split("RL.ACQUIRE new META metattlx"),
            format!("ERR META hash field 'ttl' {positive}"),
        ),
        (
            split("RL.ACQUIRE new META metastr"),
            "WRONGTYPE META key does not hold a hash".into(),
        ),
        (split("RL.ACQUIRE str LIMIT 1 TTL 5"), wrongtype.into()),
        (split("RL.RELEASE str a"), wrongtype.into()),
        (split("RL.EXTEND str a TTL 5"), wrongtype.into()),
        (split("RL.INFLIGHT str"), wrongtype.into()),
        (
            vec!["RL.RELEASE", "held", ""],
            "ERR lease-id must be a non-empty string".into(),
        ),
        (
            vec!["RL.EXTEND", "held", "", "TTL", "5"],
            "ERR lease-id must be a non-empty string".into(),
        ),
        (
            split("RL.EXTEND held a TIME 5"),
            "ERR unknown option 'TIME'".into(),
        ),
        (
            split("RL.EXTEND held a TTL 0"),
            format!("ERR TTL {positive}"),
        ),
        (
            split("RL.EXTEND held a TTL x"),
            format!("ERR TTL {positive}"),
        ),
        (
            split("RL.EXTEND held a TTL 9007199254740992"),
            "ERR TTL is too large: the lease deadline passes 2^53 ms".into(),
        ),
        (
            split("RL.RELEASE held"),
            "ERR wrong number of arguments for 'RL.RELEASE' command".into(),
        ),
        (
            split("RL.RELEASE held a b"),
            "ERR wrong number of arguments for 'RL.RELEASE' command".into(),
        ),
        (
            split("RL.EXTEND held a TTL"),
            "ERR wrong number of arguments for 'RL.EXTEND' command".into(),
        ),
        (
            split("RL.INFLIGHT"),
            "ERR wrong number of arguments for 'RL.INFLIGHT' command".into(),
        ),
        (
            split("RL.INFLIGHT held x"),
            "ERR wrong number of arguments for 'RL.INFLIGHT' command".into(),
        ),
        (
            split("RL.ACQUIRE"),
            "ERR wrong number of arguments for 'RL.ACQUIRE' command".into(),
        ),
    ];
    let score_calls: Vec<String> = ["frac", "neg", "big", "inf"]
        .iter()
        .flat_map(|key| {
            [
                format!("RL.ACQUIRE {key} LIMIT 5 TTL 1000"),
                format!("RL.ACQUIRE {key} LIMIT 5 TTL 1000 ID a"),
                format!("RL.RELEASE {key} a"),
                format!("RL.EXTEND {key} a TTL 1000"),
                format!("RL.INFLIGHT {key}"),
            ]
        })
        .collect();
    for call in &score_calls {
        cases.push((split(call), not_deadline.into()));
    }
    let counters_before = leases_info(&mut con);
    let before: Vec<_> = keys
        .iter()
        .map(|k| (dump(&mut con, k), pexpiretime(&mut con, k)))
        .collect();
    let errors_before: i64 = info_field(&mut con, "ratelimit", "ratelimit_errors")
        .unwrap()
        .parse()
        .unwrap();
    for (call, want) in &cases {
        assert_eq!(&cmd_err(&mut con, call), want, "{call:?}");
    }
    let after: Vec<_> = keys
        .iter()
        .map(|k| (dump(&mut con, k), pexpiretime(&mut con, k)))
        .collect();
    for ((key, b), a) in keys.iter().zip(&before).zip(&after) {
        assert_eq!(b, a, "{key} changed");
    }
    assert_eq!(cmd_int(&mut con, &["EXISTS", "new"]), 0);
    assert_eq!(leases_info(&mut con), counters_before, "no lease counted");
    let errors: i64 = info_field(&mut con, "ratelimit", "ratelimit_errors")
        .unwrap()
        .parse()
        .unwrap();
    assert!(errors > errors_before);
}

/// Random acquire/release/extend calls on a few keys, with short leases
/// so that calls reclaim; then one long lease per key so that every key
/// outlives the checks. Returns the keys.
fn random_workload(
    backend: Backend,
    con: &mut Connection,
    rng: &mut Rng,
    calls: usize,
) -> Vec<String> {
    let keys: Vec<String> = (0..4).map(|i| format!("lease:{i}")).collect();
    let ids = ["a", "b", "c", "d", "e", "f"];
    for _ in 0..calls {
        let key = &keys[rng.below(keys.len())];
        let id = rng.pick(&ids);
        let ttl = match rng.below(3) {
            0 => 1 + rng.below(20),
            1 => 50 + rng.below(200),
            _ => 30_000 + rng.below(30_000),
        }
        .to_string();
        let call = match rng.below(5) {
            0 => backend.call(&["RL.ACQUIRE", key, "LIMIT", "3", "TTL", &ttl]),
            1 => backend.call(&["RL.ACQUIRE", key, "LIMIT", "3", "TTL", &ttl, "ID", id]),
            2 => backend.call(&["RL.RELEASE", key, id]),
            3 => backend.call(&["RL.EXTEND", key, id, "TTL", &ttl]),
            _ => backend.call(&["RL.INFLIGHT", key]),
        };
        let v = run(con, &call);
        assert!(!matches!(v, Value::ServerError(_)), "{call:?}: {v:?}");
        if rng.pct(5) {
            thread::sleep(Duration::from_millis(rng.below(15) as u64));
        }
    }
    for key in &keys {
        let anchor = backend.call(&[
            "RL.ACQUIRE",
            key,
            "LIMIT",
            "100",
            "TTL",
            "120000",
            "ID",
            "anchor",
        ]);
        assert_eq!(acquired(&run(con, &anchor)).0, 1);
    }
    keys
}

type Leases = BTreeMap<String, (Vec<(String, i64)>, i64)>;

fn all_leases(con: &mut Connection, keys: &[String]) -> Leases {
    keys.iter()
        .map(|k| (k.clone(), lease_state(con, k)))
        .collect()
}

#[test]
fn replicas_aof_and_failover_hold_the_same_leases() {
    for backend in BOTH {
        replicas_aof_and_failover_on(backend);
    }
}

fn replicas_aof_and_failover_on(backend: Backend) {
    let mut primary = backend.start_with(&["--appendonly", "yes", "--appendfsync", "always"]);
    let replica = backend.start();
    replica.replica_of(&primary);
    let mut con = primary.client();
    let mut rng = Rng::new(common::seed(
        "replicas_aof_and_failover_hold_the_same_leases",
    ));
    let keys = random_workload(backend, &mut con, &mut rng, 1500);
    wait_replica_offset(&primary, &replica);
    let on_primary = all_leases(&mut con, &keys);
    assert!(
        on_primary.values().all(|(m, at)| !m.is_empty() && *at > 0),
        "{on_primary:?}"
    );
    assert_eq!(
        all_leases(&mut replica.client(), &keys),
        on_primary,
        "{backend:?}: the replica"
    );
    if backend == Backend::Module {
        // INFO's lease counters are the module's.
        let [acquired_n, _, released, extended, reclaimed] = leases_info(&mut con);
        assert!(acquired_n > 0 && released > 0 && extended > 0 && reclaimed > 0);
    }

    // The AOF holds the effects, never the commands (nor, but in the
    // library's own FUNCTION LOAD, any word naming one).
    let aof: Vec<Vec<String>> = common::aof_commands(&primary.dir)
        .into_iter()
        .filter(|words| !words[0].eq_ignore_ascii_case("FUNCTION"))
        .collect();
    for effect in ["ZADD", "ZREM", "PEXPIREAT"] {
        assert!(
            aof.iter()
                .any(|words| words[0].eq_ignore_ascii_case(effect)),
            "{backend:?}: the AOF lacks {effect}"
        );
    }
    let words = aof.iter().flatten().map(|w| w.to_uppercase());
    for word in words {
        assert!(!word.contains("RL."), "the AOF holds a module command");
        assert!(!word.contains("FCALL"), "the AOF holds a library call");
    }

    // A restart from the AOF holds the same.
    backend.restart(&mut primary);
    let mut con = primary.client();
    assert_eq!(
        all_leases(&mut con, &keys),
        on_primary,
        "{backend:?}: after the AOF restart"
    );

    // Failover: the replica takes over with the leases held.
    let mut promoted = replica.client();
    let _: () = redis::cmd("REPLICAOF")
        .arg(&["NO", "ONE"])
        .query(&mut promoted)
        .unwrap();
    assert_eq!(
        all_leases(&mut promoted, &keys),
        on_primary,
        "{backend:?}: the promoted replica"
    );
    for (key, (members, _)) in &on_primary {
        let live = members.len() as i64;
        let now = server_time_ms(&mut promoted);
        let still = members.iter().filter(|(_, d)| *d > now + 1000).count() as i64;
        let in_flight = common::int(&backend.raw(&mut promoted, &["RL.INFLIGHT", key]));
        assert!(
            (still..=live).contains(&in_flight),
            "{backend:?} {key}: {in_flight}"
        );
        let release = backend.raw(&mut promoted, &["RL.RELEASE", key, "anchor"]);
        assert_eq!(release, Value::Int(1), "{backend:?} {key}");
    }
}

#[test]
fn a_lease_that_expired_while_the_server_was_down_is_reclaimed_without_extension() {
    for backend in BOTH {
        expired_while_down_on(backend);
    }
}

fn expired_while_down_on(backend: Backend) {
    let mut server = backend.start_with(&["--appendonly", "yes", "--appendfsync", "always"]);
    let mut con = server.client();
    let (now, _) = timed(
        &mut con,
        &[
            line(backend, "RL.ACQUIRE down LIMIT 2 TTL 600 ID short"),
            line(backend, "RL.ACQUIRE down LIMIT 2 TTL 600000 ID long"),
        ],
    );
    server.stop();
    thread::sleep(Duration::from_millis(700));
    backend.restart(&mut server);
    let mut con = server.client();
    // Still stored as it was, and not live.
    let (members, expiry) = lease_state(&mut con, "down");
    assert_eq!(
        members,
        [("short".into(), now + 600), ("long".into(), now + 600_000)]
    );
    assert_eq!(expiry, now + 600_000);
    let in_flight = backend.raw(&mut con, &["RL.INFLIGHT", "down"]);
    assert_eq!(in_flight, Value::Int(1), "{backend:?}");
    let extend = backend.raw(&mut con, &["RL.EXTEND", "down", "short", "TTL", "600000"]);
    assert_eq!(extend, Value::Int(0), "{backend:?}");
    let (members, _) = lease_state(&mut con, "down");
    assert_eq!(
        members,
        [("long".into(), now + 600_000)],
        "{backend:?}: reclaimed, not extended"
    );
    let v = backend.raw(&mut con, &split("RL.ACQUIRE down LIMIT 2 TTL 1000 ID next"));
    assert_eq!(acquired(&v).0, 1, "{backend:?}");
}

/// The commands in an AOF's incremental files, without MULTI, EXEC, SELECT
/// and the library's FUNCTION LOAD, as lines of words.
fn aof_lines(server: &Server) -> Vec<String> {
    common::aof_commands(&server.dir)
        .into_iter()
        .filter(|words| {
            !["MULTI", "EXEC", "SELECT", "FUNCTION"].contains(&words[0].to_uppercase().as_str())
        })
        .map(|words| words.join(" "))
        .collect()
}

/// The effects, byte for byte: ZREM, then ZADD, then PEXPIREAT, each with
/// absolute values and only when it applies.
#[test]
fn each_call_propagates_exactly_its_effects() {
    for backend in BOTH {
        each_call_propagates_exactly_its_effects_on(backend);
    }
}

fn each_call_propagates_exactly_its_effects_on(backend: Backend) {
    let server = backend.start_with(&["--appendonly", "yes", "--appendfsync", "always"]);
    let mut con = server.client();
    let (first, _) = timed(
        &mut con,
        &[
            line(backend, "RL.ACQUIRE k LIMIT 2 TTL 1 ID gone"),
            line(backend, "RL.ACQUIRE k LIMIT 2 TTL 600000 ID a"),
        ],
    );
    thread::sleep(Duration::from_millis(5));
    let calls = [
        "RL.ACQUIRE k LIMIT 1 TTL 1000",
        "RL.ACQUIRE k LIMIT 1 TTL 1000",
        "RL.INFLIGHT k",
        "RL.RELEASE k nobody",
        "RL.EXTEND k nobody TTL 5",
        "RL.ACQUIRE k",
        "RL.EXTEND k a TTL 700000",
        "RL.ACQUIRE k LIMIT 5 TTL 100 ID b",
        "RL.RELEASE k a",
        "RL.RELEASE k b",
    ];
    let calls: Vec<Vec<String>> = calls.iter().map(|c| line(backend, c)).collect();
    let (now, replies) = timed(&mut con, &calls);
    assert_eq!(
        show(&replies[0]),
        format!("[0, 1, 1, {}, nil]", first + 600_000 - now)
    );
    let want = [
        format!("ZADD k {} gone", first + 1),
        format!("PEXPIREAT k {}", first + 1),
        format!("ZADD k {} a", first + 600_000),
        format!("PEXPIREAT k {}", first + 600_000),
        // The refusal that reclaims.
        "ZREM k gone".to_string(),
        format!("PEXPIREAT k {}", first + 600_000),
        // The refusal with nothing to reclaim, the read, the dead release
        // and extend and the unlimited acquire: nothing.
        format!("ZADD k {} a", now + 700_000),
        format!("PEXPIREAT k {}", now + 700_000),
        format!("ZADD k {} b", now + 100),
        format!("PEXPIREAT k {}", now + 700_000),
        "ZREM k a".to_string(),
        format!("PEXPIREAT k {}", now + 100),
        // The last lease: the key is gone, no expiry to set.
        "ZREM k b".to_string(),
    ];
    assert_eq!(aof_lines(&server), want, "{backend:?}");
    assert_eq!(cmd_int(&mut con, &["EXISTS", "k"]), 0);
}

#[test]
fn refusals_and_reads_propagate_nothing() {
    for backend in BOTH {
        refusals_and_reads_propagate_nothing_on(backend);
    }
}

fn refusals_and_reads_propagate_nothing_on(backend: Backend) {
    let primary = backend.start_with(QUIET);
    let replica = backend.start();
    replica.replica_of(&primary);
    let mut con = primary.client();
    backend.raw(&mut con, &split("RL.ACQUIRE full LIMIT 1 TTL 600000 ID a"));
    cmd_raw(&mut con, &split("HSET free max 0"));
    let before = repl_offset(&mut con);
    for call in [
        "RL.ACQUIRE full LIMIT 1 TTL 1000",
        "RL.ACQUIRE full LIMIT 1 TTL 1000 ID b",
        "RL.INFLIGHT full",
        "RL.INFLIGHT nothing",
        "RL.ACQUIRE nothing",
        "RL.ACQUIRE nothing META free ID x",
        "RL.RELEASE full b",
        "RL.RELEASE nothing b",
        "RL.EXTEND full b TTL 1000",
        "RL.ACQUIRE full LIMIT 0 TTL 5",
    ] {
        run(&mut con, &line(backend, call));
    }
    assert_eq!(
        repl_offset(&mut con),
        before,
        "{backend:?}: nothing was propagated"
    );
    wait_replica_offset(&primary, &replica);
    let keys = ["full".to_string(), "nothing".to_string()];
    assert_eq!(
        all_leases(&mut replica.client(), &keys),
        all_leases(&mut con, &keys)
    );
}

#[test]
fn a_refusal_that_reclaims_replicates_the_reclaim_only() {
    for backend in BOTH {
        a_refusal_that_reclaims_replicates_the_reclaim_only_on(backend);
    }
}

fn a_refusal_that_reclaims_replicates_the_reclaim_only_on(backend: Backend) {
    let primary = backend.start_with(QUIET);
    let replica = backend.start();
    replica.replica_of(&primary);
    let mut con = primary.client();
    let (now, _) = timed(
        &mut con,
        &[
            line(backend, "RL.ACQUIRE k LIMIT 2 TTL 1 ID gone"),
            line(backend, "RL.ACQUIRE k LIMIT 2 TTL 600000 ID kept"),
        ],
    );
    thread::sleep(Duration::from_millis(5));
    // LIMIT 1: the expired lease is reclaimed, and the call still refused.
    let before = repl_offset(&mut con);
    let v = backend.raw(&mut con, &split("RL.ACQUIRE k LIMIT 1 TTL 600000"));
    assert_eq!(acquired(&v).0, 0);
    let after = repl_offset(&mut con);
    assert!(after > before, "{backend:?}: the reclaim is propagated");
    // The same refusal again has nothing to reclaim.
    let v = backend.raw(&mut con, &split("RL.ACQUIRE k LIMIT 1 TTL 600000"));
    assert_eq!(acquired(&v).0, 0);
    assert_eq!(repl_offset(&mut con), after);
    wait_replica_offset(&primary, &replica);
    let want = (vec![("kept".to_string(), now + 600_000)], now + 600_000);
    assert_eq!(lease_state(&mut con, "k"), want);
    assert_eq!(lease_state(&mut replica.client(), "k"), want);
}

#[test]
fn cluster_routes_by_key_and_refuses_a_meta_in_another_slot() {
    for backend in BOTH {
        cluster_routes_by_key_on(backend);
    }
}

fn cluster_routes_by_key_on(backend: Backend) {
    let c = Cluster::start_on(backend, 3, &[]);
    // Keys on every node: each call runs where its key lives.
    for key in ["{a}pool", "{b}pool", "{c}pool", "{d}pool"] {
        let (v, node) = c.route(
            key,
            &["RL.ACQUIRE", key, "LIMIT", "1", "TTL", "60000", "ID", "w"],
        );
        assert_eq!(show(&v), "[1, 1, 1, 0, \"w\"]", "{key}");
        assert_eq!(node, c.owner_seen_by(0, c.keyslot(key)));
        let (v, _) = c.route(key, &["RL.INFLIGHT", key]);
        assert_eq!(v, Value::Int(1));
        let (v, _) = c.route(key, &["RL.EXTEND", key, "w", "TTL", "60000"]);
        assert_eq!(v, Value::Int(1));
        let (v, _) = c.route(key, &["RL.RELEASE", key, "w"]);
        assert_eq!(v, Value::Int(1));
    }
    // A META hash in the key's slot is read; one in another slot is CROSSSLOT.
    let (a, b) = ["{a}", "{b}", "{c}", "{d}", "{e}", "{f}"]
        .iter()
        .flat_map(|x| ["{a}", "{b}", "{c}", "{d}", "{e}", "{f}"].map(|y| (*x, y)))
        .find(|(x, y)| c.owner_seen_by(0, c.keyslot(x)) != c.owner_seen_by(0, c.keyslot(y)))
        .unwrap();
    let (key, near, far) = (format!("{a}pool"), format!("{a}meta"), format!("{b}meta"));
    for meta in [&near, &far] {
        c.route(meta, &["HSET", meta, "max", "1", "ttl", "60000"]);
    }
    let (v, _) = c.route(&key, &["RL.ACQUIRE", &key, "META", &near, "ID", "m"]);
    assert_eq!(show(&v), "[1, 1, 1, 0, \"m\"]");
    for node in [
        c.owner_seen_by(0, c.keyslot(&key)),
        c.owner_seen_by(0, c.keyslot(&far)),
    ] {
        let v = backend.raw(&mut c.client(node), &["RL.ACQUIRE", &key, "META", &far]);
        let e = error_text(&v).unwrap_or_default();
        assert!(e.starts_with("CROSSSLOT"), "{backend:?} node {node}: {v:?}");
    }
}

/// ACL key patterns see the lease key and the META hash, wherever META is.
/// Module only: the `@ratelimit` category and the key-specs are its.
#[test]
fn module_only_acl_key_patterns_cover_the_lease_key_and_its_meta() {
    let server = Server::start();
    let mut admin = server.client();
    // `%R~META`: a keyword search that took the id META for the keyword
    // would check the key `META` instead of the hash after it.
    let rule = split("ACL SETUSER app on nopass +@ratelimit ~lease:* %R~meta:* %R~META");
    assert_eq!(cmd_raw(&mut admin, &rule), Value::Okay);
    cmd_raw(&mut admin, &split("HSET meta:ok max 1 ttl 60000"));
    cmd_raw(&mut admin, &split("HSET secret max 7 ttl 60000"));
    let mut app = server.client();
    cmd_raw(&mut app, &split("AUTH app x"));
    let ok = cmd_raw(&mut app, &split("RL.ACQUIRE lease:a META meta:ok ID META"));
    assert_eq!(show(&ok), "[1, 1, 1, 0, \"META\"]");
    for call in [
        "RL.ACQUIRE lease:b META secret",
        "RL.ACQUIRE lease:b ID META META secret",
        "RL.ACQUIRE other LIMIT 1 TTL 5",
        "RL.RELEASE other x",
        "RL.EXTEND other x TTL 5",
        "RL.INFLIGHT other",
        "RL.ACQUIRE meta:ok LIMIT 1 TTL 5",
    ] {
        let e = cmd_err(&mut app, &split(call));
        assert!(e.starts_with("NOPERM"), "{call}: {e}");
    }
    assert_eq!(cmd_int(&mut app, &["RL.INFLIGHT", "lease:a"]), 1);
}

/// A refusal with nothing to reclaim leaves a WATCH on its key alone; an
/// acquire, a release and an extend touch it.
#[test]
fn only_writes_touch_a_watched_lease_key() {
    for backend in BOTH {
        only_writes_touch_a_watched_lease_key_on(backend);
    }
}

fn only_writes_touch_a_watched_lease_key_on(backend: Backend) {
    let server = backend.start();
    let mut con = server.client();
    backend.raw(&mut con, &split("RL.ACQUIRE w LIMIT 1 TTL 60000 ID a"));
    let watched = |con: &mut Connection, call: &str| -> bool {
        assert_eq!(cmd_raw(con, &["WATCH", "w"]), Value::Okay);
        let v = backend.raw(con, &split(call));
        assert!(!matches!(v, Value::ServerError(_)), "{call}: {v:?}");
        assert_eq!(cmd_raw(con, &["MULTI"]), Value::Okay);
        cmd_raw(con, &["PING"]);
        cmd_raw(con, &["EXEC"]) == Value::Nil
    };
    for (call, touches) in [
        ("RL.ACQUIRE w LIMIT 1 TTL 60000", false),
        ("RL.INFLIGHT w", false),
        ("RL.RELEASE w nobody", false),
        ("RL.EXTEND w nobody TTL 5", false),
        ("RL.EXTEND w a TTL 60000", true),
        ("RL.ACQUIRE w LIMIT 1 TTL 60000 ID a", true),
        ("RL.RELEASE w a", true),
    ] {
        assert_eq!(watched(&mut con, call), touches, "{backend:?} {call}");
    }
}

/// Module only: COMMAND DOCS and GETKEYS describe module commands.
#[test]
fn module_only_command_docs_info_and_getkeys_describe_the_lease_commands() {
    let server = Server::start();
    let mut con = server.client();
    let getkeys = |con: &mut Connection, call: &str| -> String {
        let mut words = vec!["COMMAND", "GETKEYSANDFLAGS"];
        words.extend(split(call));
        show(&cmd_raw(con, &words))
    };
    for (call, want) in [
        (
            "RL.ACQUIRE k LIMIT 1 TTL 5 META m ID META",
            "[[\"k\", [+RW, +access, +update]], [\"m\", [+RO, +access]]]",
        ),
        ("RL.ACQUIRE k", "[[\"k\", [+RW, +access, +update]]]"),
        // A lease id may be the word META.
        (
            "RL.ACQUIRE k ID META META m",
            "[[\"k\", [+RW, +access, +update]], [\"m\", [+RO, +access]]]",
        ),
        ("RL.ACQUIRE k ID META", "[[\"k\", [+RW, +access, +update]]]"),
        ("RL.RELEASE k id", "[[\"k\", [+RW, +access, +update]]]"),
        ("RL.EXTEND k id TTL 5", "[[\"k\", [+RW, +access, +update]]]"),
        ("RL.INFLIGHT k", "[[\"k\", [+RO, +access]]]"),
    ] {
        assert_eq!(getkeys(&mut con, call), want, "{call}");
    }
    let docs = cmd_raw(
        &mut con,
        &[
            "COMMAND",
            "DOCS",
            "RL.ACQUIRE",
            "RL.RELEASE",
            "RL.EXTEND",
            "RL.INFLIGHT",
        ],
    );
    let docs = show(&docs);
    for part in [
        "\"arguments\", [[\"name\", \"key\", \"type\", \"key\", \"display_text\", \"key\", \"key_spec_index\", 0], \
         [\"name\", \"max\", \"type\", \"integer\", \"display_text\", \"max\", \"token\", \"LIMIT\", \"flags\", [+optional]], \
         [\"name\", \"ms\", \"type\", \"integer\", \"display_text\", \"ms\", \"token\", \"TTL\", \"flags\", [+optional]], \
         [\"name\", \"metakey\", \"type\", \"key\", \"display_text\", \"metakey\", \"key_spec_index\", 1, \"token\", \"META\", \"flags\", [+optional]], \
         [\"name\", \"lease-id\", \"type\", \"string\", \"display_text\", \"lease-id\", \"token\", \"ID\", \"flags\", [+optional]], \
         [\"name\", \"SHADOW\", \"type\", \"pure-token\", \"display_text\", \"SHADOW\", \"token\", \"SHADOW\", \"flags\", [+optional]], \
         [\"name\", \"timeout_ms\", \"type\", \"integer\", \"display_text\", \"timeout_ms\", \"token\", \"BLOCK\", \"flags\", [+optional]], \
         [\"name\", \"ticketkey\", \"type\", \"key\", \"display_text\", \"ticketkey\", \"key_spec_index\", 2, \"token\", \"QUEUE\", \"flags\", [+optional]], \
         [\"name\", \"ms\", \"type\", \"integer\", \"display_text\", \"ms\", \"token\", \"WAIT\", \"flags\", [+optional]]]]",
        "\"arguments\", [[\"name\", \"key\", \"type\", \"key\", \"display_text\", \"key\", \"key_spec_index\", 0], \
         [\"name\", \"lease-id\", \"type\", \"string\", \"display_text\", \"lease-id\"], \
         [\"name\", \"ticketkey\", \"type\", \"key\", \"display_text\", \"ticketkey\", \"key_spec_index\", 1, \"token\", \"QUEUE\", \"flags\", [+optional]]]]",
        "\"arguments\", [[\"name\", \"key\", \"type\", \"key\", \"display_text\", \"key\", \"key_spec_index\", 0], \
         [\"name\", \"lease-id\", \"type\", \"string\", \"display_text\", \"lease-id\"], \
         [\"name\", \"ms\", \"type\", \"integer\", \"display_text\", \"ms\", \"token\", \"TTL\"]]]",
    ] {
        assert!(docs.contains(part), "{part} not in {docs}");
    }
}

// The module against the library (issue 19): the same calls go to `RL.*` on
// a server with the module and to `FCALL rl_*` on a server without it, each
// scenario in one MULTI/EXEC (one frozen clock) on a flushed server, after
// leases preset relative to that clock. Replies, errors, every key's members
// and scores (ZRANGE WITHSCORES) and its PEXPIRETIME must match, with times
// written relative to the frozen now and generated lease ids (which differ
// by design) matched by the contract's pattern `^[0-9a-f]+-[0-9a-f]{16}$`.

/// A step of a lease scenario.
#[derive(Debug, Clone)]
enum Step {
    /// A call in the module's syntax (translated for the library).
    Call(Vec<String>),
    /// ZADD of `(score, id)` pairs to `key`, a score `now`, `now+N`, `now-N`
    /// relative to the frozen clock or a raw score (`1.5`, `inf`), then the
    /// key's expiry `pxat` ms from now, if any.
    Preset {
        key: String,
        leases: Vec<(String, String)>,
        pxat: Option<i64>,
    },
}

fn call(words: &[&str]) -> Step {
    Step::Call(words.iter().map(|w| w.to_string()).collect())
}

/// A preset step: leases written before the calls.
fn preset(key: &str, leases: &[(&str, &str)], pxat: Option<i64>) -> Step {
    Step::Preset {
        key: key.into(),
        leases: leases
            .iter()
            .map(|(s, id)| (s.to_string(), id.to_string()))
            .collect(),
        pxat,
    }
}

/// ZADDs KEYS[1] ARGV's (score, member) pairs, a score `now+N`/`now-N`
/// being relative to the server's (frozen) now; then PEXPIREAT now +
/// the last ARGV unless it is empty.
const PRESET_SCRIPT: &str = r#"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
for i = 1, #ARGV - 1, 2 do
  local score = ARGV[i]
  local rel = string.match(score, '^now([-+]?%d*)$')
  if rel then score = string.format('%d', now + (tonumber(rel) or 0)) end
  redis.call('ZADD', KEYS[1], score, ARGV[i + 1])
end
if ARGV[#ARGV] ~= '' then
  redis.call('PEXPIREAT', KEYS[1], string.format('%d', now + tonumber(ARGV[#ARGV])))
end
return redis.status_reply('PRESET')
"#;

/// What a scenario did on one backend, comparable across servers.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Transcript {
    replies: Vec<String>,
    /// Per key: `key type [(id, score)...] expiry`, sorted by id.
    state: Vec<String>,
}

/// A score or expiry relative to `now` when it is a time near it.
fn relative(text: &str, now: i64) -> String {
    match text.parse::<i64>() {
        Ok(v) if (v - now).abs() <= 10_000_000_000 => format!("now{:+}", v - now),
        _ => text.to_string(),
    }
}

fn text_of(v: &Value) -> String {
    match v {
        Value::BulkString(b) => String::from_utf8_lossy(b).into_owned(),
        other => show(other),
    }
}

/// Runs `steps` on `backend` in one MULTI/EXEC on a flushed server, then
/// reads `keys`.
fn run_scenario(
    backend: Backend,
    con: &mut Connection,
    steps: &[Step],
    keys: &[&str],
) -> Transcript {
    assert_eq!(cmd_raw(con, &["FLUSHALL"]), Value::Okay);
    let mut cmds: Vec<Vec<String>> = vec![vec!["TIME".into()]];
    for step in steps {
        cmds.push(match step {
            Step::Call(words) => backend.call_owned(words),
            Step::Preset { key, leases, pxat } => {
                let mut c = vec!["EVAL".into(), PRESET_SCRIPT.into(), "1".into(), key.clone()];
                for (score, id) in leases {
                    c.push(score.clone());
                    c.push(id.clone());
                }
                c.push(pxat.map(|p| p.to_string()).unwrap_or_default());
                c
            }
        });
    }
    for key in keys {
        cmds.push(vec!["TYPE".into(), key.to_string()]);
        cmds.push(vec![
            "ZRANGE".into(),
            key.to_string(),
            "0".into(),
            "-1".into(),
            "WITHSCORES".into(),
        ]);
        cmds.push(vec!["PEXPIRETIME".into(), key.to_string()]);
    }
    let mut replies = exec(con, &cmds);
    let now = time_ms(&replies.remove(0));
    let (steps_part, state_part) = replies.split_at(steps.len());
    let mut out = Transcript {
        replies: Vec::new(),
        state: Vec::new(),
    };
    for (step, reply) in steps.iter().zip(steps_part) {
        match step {
            Step::Call(_) => {
                let line = show(reply);
                // A generated id must have the contract's form: only such
                // ids are normalised, any other stays in the line.
                out.replies.push(without_ids(&line));
            }
            Step::Preset { key, .. } => assert_eq!(
                reply,
                &Value::SimpleString("PRESET".into()),
                "{backend:?}: presetting {key}"
            ),
        }
    }
    for (key, parts) in keys.iter().zip(state_part.chunks(3)) {
        let members = match &parts[1] {
            Value::Array(flat) => {
                let mut pairs: Vec<String> = flat
                    .chunks(2)
                    .map(|p| {
                        let id = text_of(&p[0]);
                        let id = if is_generated_id(&id) {
                            "<id>".into()
                        } else {
                            id
                        };
                        format!("{id}@{}", relative(&text_of(&p[1]), now))
                    })
                    .collect();
                pairs.sort();
                pairs.join(" ")
            }
            other => show(other),
        };
        let expiry = match &parts[2] {
            Value::Int(t) if *t >= 0 => relative(&t.to_string(), now),
            other => show(other),
        };
        out.state
            .push(format!("{key} {} [{members}] {expiry}", show(&parts[0])));
    }
    out
}

/// Both servers: the module's and the library's.
fn servers() -> Vec<(Backend, Server)> {
    BOTH.iter().map(|&b| (b, b.start())).collect()
}

/// Runs each scenario on both backends; every difference, listed.
fn compare(servers: &[(Backend, Server)], scenarios: &[(String, Vec<Step>)], keys: &[&str]) {
    let mut cons: Vec<Connection> = servers.iter().map(|(_, s)| s.client()).collect();
    let mut differences = Vec::new();
    let mut calls = 0;
    for (name, steps) in scenarios {
        let module = run_scenario(servers[0].0, &mut cons[0], steps, keys);
        let library = run_scenario(servers[1].0, &mut cons[1], steps, keys);
        calls += module.replies.len();
        if module != library {
            let mut lines = vec![format!("{name}:\n  steps   {steps:?}")];
            let pairs = module
                .replies
                .iter()
                .zip(&library.replies)
                .chain(module.state.iter().zip(&library.state));
            for (i, (m, l)) in pairs.enumerate() {
                if m != l {
                    lines.push(format!("  #{i} module  {m}\n  #{i} library {l}"));
                }
            }
            differences.push(lines.join("\n"));
        }
    }
    println!("{} scenarios, {calls} paired calls", scenarios.len());
    assert!(
        differences.is_empty(),
        "{} of {} scenarios ({calls} paired calls) differ:\n{}",
        differences.len(),
        scenarios.len(),
        differences
            .iter()
            .take(5)
            .cloned()
            .collect::<Vec<_>>()
            .join("\n\n")
    );
}

const KEYS: &[&str] = &["L", "M"];

/// Scenarios written by hand: each rule of the contract once.
fn crafted() -> Vec<(String, Vec<Step>)> {
    let a = |rest: &[&str]| call(&[&["RL.ACQUIRE", "L"][..], rest].concat());
    let v: Vec<(&str, Vec<Step>)> = vec![
        (
            "shadow: fill, would-be refusals, release of a shadow id, meta shadow on then off",
            vec![
                a(&["LIMIT", "2", "TTL", "1000", "SHADOW", "ID", "x"]),
                a(&["LIMIT", "2", "TTL", "2000", "SHADOW"]),
                a(&["LIMIT", "2", "TTL", "3000", "SHADOW", "ID", "z"]),
                a(&["LIMIT", "2", "TTL", "3000", "SHADOW"]),
                a(&["SHADOW", "LIMIT", "2", "TTL", "3000", "ID", "x"]),
                call(&["RL.RELEASE", "L", "z"]),
                call(&["RL.EXTEND", "L", "z", "TTL", "50"]),
                call(&["RL.INFLIGHT", "L"]),
                call(&["HSET", "{meta}", "max", "2", "ttl", "300", "shadow", "1"]),
                a(&["META", "{meta}", "ID", "q"]),
                a(&["META", "{meta}", "ID", "q", "SHADOW"]),
                call(&["HSET", "{meta}", "shadow", "0"]),
                a(&["META", "{meta}", "ID", "q"]),
                a(&["META", "{meta}", "ID", "q", "SHADOW"]),
                call(&["HSET", "{meta}", "shadow", "yes"]),
                a(&["META", "{meta}", "ID", "q"]),
                a(&["META", "{meta}", "ID", "q", "SHADOW"]),
                call(&["HSET", "{meta}", "max", "0"]),
                a(&["META", "{meta}", "ID", "q"]),
                a(&["LIMIT", "2", "SHADOW", "1", "TTL", "5"]),
                a(&["LIMIT", "2", "TTL", "5", "SHADOW", "SHADOW"]),
                a(&["LIMIT", "2", "SHADOW", "TTL", "9007199254740992"]),
            ],
        ),
        (
            "fill, refuse, release, acquire again",
            vec![
                a(&["LIMIT", "2", "TTL", "1000", "ID", "x"]),
                a(&["LIMIT", "2", "TTL", "2000", "ID", "y"]),
                a(&["LIMIT", "2", "TTL", "3000", "ID", "z"]),
                call(&["RL.INFLIGHT", "L"]),
                call(&["RL.RELEASE", "L", "x"]),
                call(&["RL.RELEASE", "L", "x"]),
                a(&["LIMIT", "2", "TTL", "3000", "ID", "z"]),
            ],
        ),
        (
            "generated ids",
            vec![
                a(&["LIMIT", "3", "TTL", "1000"]),
                a(&["LIMIT", "3", "TTL", "1000"]),
                a(&["LIMIT", "3", "TTL", "500"]),
                a(&["LIMIT", "3", "TTL", "500"]),
            ],
        ),
        (
            "renew by ID takes no second slot, even at the limit",
            vec![
                a(&["LIMIT", "1", "TTL", "1000", "ID", "job"]),
                a(&["LIMIT", "1", "TTL", "5000", "ID", "job"]),
                a(&["LIMIT", "1", "TTL", "5000", "ID", "other"]),
            ],
        ),
        (
            "expired leases are reclaimed by an acquire, live ones kept",
            vec![
                preset(
                    "L",
                    &[("now-100", "gone"), ("now", "edge"), ("now+1", "live")],
                    Some(1),
                ),
                a(&["LIMIT", "2", "TTL", "700"]),
            ],
        ),
        (
            "a refusal that reclaims writes the ZREM and PEXPIREAT only",
            vec![
                preset(
                    "L",
                    &[("now-5", "gone"), ("now+40", "p"), ("now+90", "q")],
                    Some(90),
                ),
                a(&["LIMIT", "2", "TTL", "700"]),
            ],
        ),
        (
            "a refusal with nothing to reclaim",
            vec![
                preset("L", &[("now+40", "p"), ("now+90", "q")], Some(90)),
                a(&["LIMIT", "1", "TTL", "700", "ID", "r"]),
            ],
        ),
        (
            "an acquire by the ID of an expired lease takes a new slot",
            vec![
                preset("L", &[("now-1", "job"), ("now+50", "p")], Some(50)),
                a(&["LIMIT", "1", "TTL", "700", "ID", "job"]),
                a(&["LIMIT", "2", "TTL", "700", "ID", "job"]),
            ],
        ),
        (
            "release and extend of expired, unknown and live leases",
            vec![
                preset(
                    "L",
                    &[("now-1", "old"), ("now+30", "p"), ("now+60", "q")],
                    Some(60),
                ),
                call(&["RL.RELEASE", "L", "nobody"]),
                call(&["RL.EXTEND", "L", "old", "TTL", "100"]),
                call(&["RL.EXTEND", "L", "p", "ttl", "20"]),
                call(&["RL.EXTEND", "L", "q", "TTL", "10"]),
                call(&["RL.RELEASE", "L", "q"]),
                call(&["RL.RELEASE", "L", "p"]),
                call(&["RL.INFLIGHT", "L"]),
            ],
        ),
        (
            "release of the last live lease reclaims the rest: the key goes",
            vec![
                preset("L", &[("now-1", "old"), ("now+30", "p")], Some(30)),
                call(&["RL.RELEASE", "L", "p"]),
            ],
        ),
        (
            "a key with only expired leases and no expiry",
            vec![
                preset("L", &[("now-10", "a"), ("now", "b")], None),
                call(&["RL.INFLIGHT", "L"]),
                call(&["RL.EXTEND", "L", "a", "TTL", "10"]),
                call(&["RL.EXTEND", "L", "zz", "TTL", "10"]),
            ],
        ),
        (
            "a live lease whose key has no expiry, or a wrong one",
            vec![
                preset("L", &[("now+100", "a")], None),
                preset("M", &[("now+100", "a")], Some(5)),
                call(&["RL.INFLIGHT", "L"]),
                call(&["RL.RELEASE", "L", "zz"]),
                call(&["RL.RELEASE", "M", "zz"]),
                call(&["RL.ACQUIRE", "M", "LIMIT", "1", "TTL", "10"]),
                call(&["RL.ACQUIRE", "L", "LIMIT", "2", "TTL", "10", "ID", "b"]),
            ],
        ),
        (
            "deadlines at 0 and at 2^53 are deadlines",
            vec![
                preset("L", &[("0", "zero"), ("9007199254740992", "far")], None),
                call(&["RL.INFLIGHT", "L"]),
                a(&["LIMIT", "2", "TTL", "10"]),
                a(&["LIMIT", "3", "TTL", "10", "ID", "n"]),
                call(&["RL.EXTEND", "L", "far", "TTL", "5"]),
            ],
        ),
        (
            "META fields and inline options",
            vec![
                call(&["HSET", "{m}", "max", "1", "ttl", "300"]),
                call(&["HSET", "{z}", "max", "0"]),
                call(&["HSET", "{t}", "ttl", "300"]),
                call(&["RL.ACQUIRE", "L", "META", "{m}", "ID", "a"]),
                call(&["RL.ACQUIRE", "L", "META", "{m}", "ID", "b"]),
                call(&["RL.ACQUIRE", "L", "META", "{m}", "LIMIT", "2", "ID", "b"]),
                call(&["RL.ACQUIRE", "L", "META", "{m}", "LIMIT", "3", "TTL", "50"]),
                call(&["RL.ACQUIRE", "L", "META", "{z}", "ID", "free"]),
                call(&["RL.ACQUIRE", "L", "META", "{z}"]),
                call(&["RL.ACQUIRE", "L", "META", "{t}"]),
                call(&["RL.ACQUIRE", "L", "META", "{t}", "LIMIT", "9"]),
                call(&["RL.ACQUIRE", "L", "META", "{nothing}"]),
                call(&["RL.ACQUIRE", "M", "META", "{nothing}", "LIMIT", "1"]),
                call(&["RL.ACQUIRE", "M", "LIMIT", "1", "TTL", "9", "META", "{z}"]),
            ],
        ),
        (
            "an ID that is the word META",
            vec![
                call(&["HSET", "{m}", "max", "2", "ttl", "300"]),
                a(&["LIMIT", "2", "TTL", "100", "ID", "META"]),
                call(&["RL.ACQUIRE", "L", "ID", "META", "META", "{m}"]),
                call(&["RL.ACQUIRE", "L", "META", "{m}", "ID", "meta"]),
                call(&["RL.EXTEND", "L", "META", "TTL", "50"]),
                call(&["RL.RELEASE", "L", "META"]),
            ],
        ),
        (
            "unlimited reads and writes nothing, whatever the key holds",
            vec![
                call(&["SET", "M", "text"]),
                preset("L", &[("now-1", "old"), ("1.5", "frac")], None),
                call(&["RL.ACQUIRE", "M"]),
                call(&["RL.ACQUIRE", "L", "ID", "x"]),
                call(&["RL.ACQUIRE", "L", "TTL", "1"]),
            ],
        ),
        (
            "scores that are no deadlines, and other types",
            vec![
                preset(
                    "L",
                    &[("now-1", "old"), ("1.5", "frac"), ("now+9", "p")],
                    Some(9),
                ),
                call(&["RL.ACQUIRE", "L", "LIMIT", "5", "TTL", "10"]),
                call(&["RL.RELEASE", "L", "p"]),
                call(&["RL.EXTEND", "L", "p", "TTL", "10"]),
                call(&["RL.INFLIGHT", "L"]),
                preset("M", &[("-1", "neg")], None),
                call(&["RL.INFLIGHT", "M"]),
                call(&["DEL", "M"]),
                preset("M", &[("9007199254740994", "big"), ("inf", "inf")], None),
                call(&["RL.RELEASE", "M", "big"]),
                call(&["DEL", "M"]),
                call(&["RPUSH", "M", "x"]),
                call(&["RL.ACQUIRE", "M", "LIMIT", "1", "TTL", "5"]),
                call(&["RL.INFLIGHT", "M"]),
            ],
        ),
        (
            "bad input in a scenario changes nothing",
            vec![
                preset("L", &[("now-1", "old"), ("now+9", "p")], Some(9)),
                call(&["RL.ACQUIRE", "L", "LIMIT", "0", "TTL", "5"]),
                call(&["RL.ACQUIRE", "L", "LIMIT", "1"]),
                call(&["RL.ACQUIRE", "L", "LIMIT", "1", "TTL", "9007199254740992"]),
                call(&["RL.ACQUIRE", "L", "LIMIT", "1", "TTL", "1", "ID", ""]),
                call(&["RL.ACQUIRE", "L", "LIMIT", "1", "TTL", "1", "BOGUS", "1"]),
                call(&["RL.EXTEND", "L", "p", "FOR", "5"]),
                call(&["RL.EXTEND", "L", "p", "TTL", "0"]),
                call(&["RL.RELEASE", "L", ""]),
            ],
        ),
    ];
    v.into_iter().map(|(n, s)| (n.to_string(), s)).collect()
}

#[test]
fn crafted_lease_scenarios_answer_and_store_alike() {
    compare(&servers(), &crafted(), KEYS);
}

/// A renewal with a shorter TTL than the lease had: the key's expiry is
/// the latest live deadline, which the renewed lease no longer has.
#[test]
fn renewing_with_a_shorter_ttl_moves_the_expiry_back() {
    let a = |rest: &[&str]| call(&[&["RL.ACQUIRE", "L"][..], rest].concat());
    let scenario = vec![
        a(&["LIMIT", "3", "TTL", "9000", "ID", "job"]),
        a(&["LIMIT", "3", "TTL", "1000", "ID", "other"]),
        a(&["LIMIT", "3", "TTL", "2000", "ID", "job"]),
    ];
    let servers = servers();
    let library = run_scenario(
        Backend::Functions,
        &mut servers[1].1.client(),
        &scenario,
        KEYS,
    );
    assert_eq!(
        library.state[0],
        "L +zset [job@now+2000 other@now+1000] now+2000"
    );
    compare(&servers, &[("renew shorter".into(), scenario)], KEYS);
}

/// `live` leases `l000`.. ending 10 ms apart from now+10 (the latest
/// last), after `expired` ones `x000`.. that ended 1 ms apart up to now.
fn many(key: &str, live: usize, expired: usize) -> Step {
    let mut leases: Vec<(String, String)> = (0..live)
        .map(|i| (format!("now+{}", 10 * (i + 1)), format!("l{i:03}")))
        .collect();
    leases.extend((0..expired).map(|i| (format!("now-{i}"), format!("x{i:03}"))));
    let pxat = (live > 0).then_some(10 * live as i64);
    Step::Preset {
        key: key.into(),
        leases,
        pxat,
    }
}

/// Keys holding many leases, so that the calls' few reads (the expired
/// range, the count, the earliest live, the last two, the named lease)
/// meet a big set: each expectation is checked on the library, and the
/// module must answer and store the same.
#[test]
fn many_live_leases_answer_and_store_alike() {
    let a = |rest: &[&str]| call(&[&["RL.ACQUIRE", "L"][..], rest].concat());
    let cases: Vec<(&str, Vec<Step>, Vec<&str>, &str)> = vec![
        (
            "a full key refuses until its earliest deadline; INFLIGHT counts",
            vec![
                many("L", 200, 0),
                a(&["LIMIT", "200", "TTL", "5000"]),
                call(&["RL.INFLIGHT", "L"]),
            ],
            vec!["[0, 200, 200, 10, nil]", "200"],
            " now+2000",
        ),
        (
            "release of the latest lease: the one before it is the expiry",
            vec![many("L", 200, 0), call(&["RL.RELEASE", "L", "l199"])],
            vec!["1"],
            " now+1990",
        ),
        (
            "releases of the two latest, then a short extend of the next",
            vec![
                many("L", 200, 0),
                call(&["RL.RELEASE", "L", "l199"]),
                call(&["RL.RELEASE", "L", "l198"]),
                call(&["RL.EXTEND", "L", "l197", "TTL", "5"]),
            ],
            vec!["1", "1", "1"],
            " now+1970",
        ),
        (
            "extend of the latest lease, longer",
            vec![
                many("L", 200, 0),
                call(&["RL.EXTEND", "L", "l199", "TTL", "9000"]),
            ],
            vec!["1"],
            " now+9000",
        ),
        (
            "renew by ID of the latest lease, shorter, at the limit",
            vec![
                many("L", 200, 0),
                a(&["LIMIT", "200", "TTL", "3", "ID", "l199"]),
            ],
            vec!["[1, 200, 200, 0, \"l199\"]"],
            " now+1990",
        ),
        (
            "renew by ID of a lease in the middle takes no second slot",
            vec![
                many("L", 200, 0),
                a(&["LIMIT", "200", "TTL", "3", "ID", "l100"]),
                a(&["LIMIT", "201", "TTL", "3"]),
            ],
            vec!["[1, 200, 200, 0, \"l100\"]", "[1, 201, 201, 0, \"<id>\"]"],
            " now+2000",
        ),
        (
            "one call reclaims many expired leases at once",
            vec![
                many("L", 50, 150),
                a(&["LIMIT", "60", "TTL", "100", "ID", "x010"]),
                call(&["RL.INFLIGHT", "L"]),
            ],
            vec!["[1, 60, 51, 0, \"x010\"]", "51"],
            " now+500",
        ),
        (
            "a refusal that reclaims many keeps the latest live deadline",
            vec![many("L", 50, 150), a(&["LIMIT", "50", "TTL", "100"])],
            vec!["[0, 50, 50, 10, nil]"],
            " now+500",
        ),
        (
            "a dead release and a dead extend reclaim many",
            vec![
                many("L", 20, 180),
                call(&["RL.RELEASE", "L", "x000"]),
                call(&["RL.EXTEND", "L", "x001", "TTL", "5"]),
                call(&["RL.RELEASE", "L", "l019"]),
            ],
            vec!["0", "0", "1"],
            " now+190",
        ),
        (
            "ties at the top: the latest deadline stays while one is left",
            vec![
                many("L", 100, 0),
                preset("L", &[("now+1000", "tie-a"), ("now+1000", "tie-b")], None),
                call(&["RL.RELEASE", "L", "tie-b"]),
            ],
            vec!["1"],
            " now+1000",
        ),
        (
            "a bad score in the middle is not read, under a named id it is",
            vec![
                many("L", 100, 0),
                // Live (year 2096) and not a deadline, below two valid ones.
                preset(
                    "L",
                    &[
                        ("4000000000000.5", "bad"),
                        ("5000000000000", "top1"),
                        ("5000000000000", "top2"),
                    ],
                    None,
                ),
                a(&["LIMIT", "200", "TTL", "5000", "ID", "new"]),
                call(&["RL.RELEASE", "L", "bad"]),
                preset("M", &[("now+10", "m"), ("inf", "top")], None),
                call(&["RL.INFLIGHT", "M"]),
            ],
            vec![
                "[1, 200, 104, 0, \"new\"]",
                "!ERR lease key holds a score that is not a deadline in ms",
                "!ERR lease key holds a score that is not a deadline in ms",
            ],
            " 5000000000000",
        ),
        (
            "only a refusal reads the earliest live deadline",
            vec![
                preset(
                    "L",
                    &[
                        ("4000000000000.5", "bad"),
                        ("5000000000000", "t1"),
                        ("5000000000001", "t2"),
                    ],
                    None,
                ),
                a(&["LIMIT", "3", "TTL", "10"]),
                a(&["LIMIT", "4", "TTL", "10", "ID", "n1"]),
            ],
            vec![
                "!ERR lease key holds a score that is not a deadline in ms",
                "[1, 4, 4, 0, \"n1\"]",
            ],
            " 5000000000001",
        ),
    ];
    let servers = servers();
    for (name, scenario, replies, expiry) in &cases {
        let library = run_scenario(
            Backend::Functions,
            &mut servers[1].1.client(),
            scenario,
            KEYS,
        );
        let replies: Vec<String> = replies.iter().map(|r| r.to_string()).collect();
        assert_eq!(library.replies, replies, "{name}");
        assert!(
            library.state[0].ends_with(expiry),
            "{name}: {}",
            library.state[0]
        );
    }
    let scenarios: Vec<(String, Vec<Step>)> = cases
        .into_iter()
        .map(|(name, scenario, ..)| (name.to_string(), scenario))
        .collect();
    compare(&servers, &scenarios, KEYS);
}

/// A random scenario: preset leases (some expired, some at the edge, a
/// rare bad score), then calls with ids from a small pool.
fn random_scenario(rng: &mut Rng) -> Vec<Step> {
    let mut steps = Vec::new();
    let ids = ["a", "b", "c", "d"];
    for key in KEYS {
        if rng.pct(70) {
            let n = 1 + rng.below(4);
            let mut leases = Vec::new();
            for _ in 0..n {
                let score = if rng.pct(3) {
                    rng.pick(&["1.5", "-1", "inf"]).to_string()
                } else {
                    rng.pick(&["now-100", "now-1", "now", "now+1", "now+50", "now+5000"])
                        .to_string()
                };
                leases.push((score, rng.pick(&ids).to_string()));
            }
            let pxat = if rng.pct(80) {
                Some(rng.pick(&[1, 50, 5000, 100_000]))
            } else {
                None
            };
            steps.push(Step::Preset {
                key: key.to_string(),
                leases,
                pxat,
            });
        }
    }
    if rng.pct(30) {
        let max = rng.pick(&["0", "1", "2", "x"]);
        let ttl = rng.pick(&["1", "300", "0"]);
        let mut w = vec!["HSET", "{meta}", "max", max, "ttl", ttl];
        if rng.pct(40) {
            w.extend(["shadow", rng.pick(&["1", "0", "2", "on"])]);
        }
        steps.push(call(&w));
    }
    for _ in 0..1 + rng.below(10) {
        let key = rng.pick(KEYS);
        let id = rng.pick(&ids);
        let ttl = rng.pick(&["1", "20", "50", "3000", "0", "9007199254740992"]);
        let step = match rng.below(100) {
            0..=39 => {
                let mut w = vec!["RL.ACQUIRE", key];
                if rng.pct(85) {
                    w.extend(["LIMIT", rng.pick(&["1", "2", "3", "0"])]);
                }
                let renews = rng.pct(50);
                if renews || rng.pct(90) {
                    // A renewal may shorten its lease, even the latest one.
                    let ttl = match renews {
                        true => rng.pick(&["9000", "20", "1", "0", "9007199254740992"]),
                        false => ttl,
                    };
                    w.extend(["TTL", ttl]);
                }
                if renews {
                    w.extend(["ID", id]);
                }
                if rng.pct(10) {
                    w.extend(["META", "{meta}"]);
                }
                if rng.pct(20) {
                    w.push("SHADOW");
                }
                call(&w)
            }
            40..=59 => call(&["RL.RELEASE", key, id]),
            60..=79 => call(&["RL.EXTEND", key, id, "TTL", ttl]),
            _ => call(&["RL.INFLIGHT", key]),
        };
        steps.push(step);
    }
    steps
}

#[test]
fn random_lease_scenarios_answer_and_store_alike() {
    let seed = common::seed("random_lease_scenarios_answer_and_store_alike");
    let mut rng = Rng::new(seed);
    let scenarios: Vec<(String, Vec<Step>)> = (0..1000)
        .map(|i| {
            (
                format!("random #{i} (RL_SEED={seed})"),
                random_scenario(&mut rng),
            )
        })
        .collect();
    compare(&servers(), &scenarios, KEYS);
}

/// Generated ids are unique for a key even when every earlier one is gone
/// within the same frozen ms, on both backends.
#[test]
fn generated_ids_never_repeat_for_a_key_within_one_ms() {
    for (backend, server) in servers() {
        let mut con = server.client();
        let mut cmds = Vec::new();
        for _ in 0..50 {
            cmds.push(backend.call(&["RL.ACQUIRE", "L", "LIMIT", "1", "TTL", "60000"]));
            cmds.push(vec!["DEL".to_string(), "L".to_string()]);
        }
        let replies = exec(&mut con, &cmds);
        let mut ids: Vec<String> = replies
            .iter()
            .step_by(2)
            .map(|r| match r {
                Value::Array(items) if items.len() == 5 => text_of(&items[4]),
                other => panic!("{backend:?}: {other:?}"),
            })
            .collect();
        assert!(
            ids.iter().all(|id| is_generated_id(id)),
            "{backend:?}: {ids:?}"
        );
        let prefixes: Vec<&str> = ids.iter().map(|id| id.split('-').next().unwrap()).collect();
        assert!(
            prefixes.windows(2).all(|w| w[0] == w[1]),
            "{backend:?}: one frozen ms: {prefixes:?}"
        );
        ids.sort();
        ids.dedup();
        assert_eq!(ids.len(), 50, "{backend:?}: an id was handed out twice");
    }
}

/// The RESP3 map (module) and `FORMAT map` (library), acquired and refused.
#[test]
fn acquire_maps_match_for_resp3() {
    let servers = servers();
    let mut module = servers[0].1.client();
    let mut library = servers[1].1.client();
    let _: Value = redis::cmd("HELLO").arg(3).query(&mut module).unwrap();
    let _: Value = redis::cmd("HELLO").arg(3).query(&mut library).unwrap();
    let calls = [
        vec!["RL.ACQUIRE", "L", "LIMIT", "1", "TTL", "60000", "ID", "a"],
        vec!["RL.ACQUIRE", "L", "LIMIT", "1", "TTL", "60000", "ID", "b"],
        vec![
            "RL.ACQUIRE",
            "L",
            "LIMIT",
            "1",
            "TTL",
            "60000",
            "ID",
            "c",
            "SHADOW",
        ],
    ];
    let sorted = |v: &Value| -> Vec<(String, String)> {
        match v {
            Value::Map(m) => {
                let mut out: Vec<(String, String)> =
                    m.iter().map(|(k, v)| (show(k), show(v))).collect();
                out.sort();
                out
            }
            other => panic!("not a map: {other:?}"),
        }
    };
    let module_replies = exec(
        &mut module,
        &calls
            .iter()
            .map(|c| Backend::Module.call(c))
            .collect::<Vec<_>>(),
    );
    let library_calls: Vec<Vec<String>> = calls
        .iter()
        .map(|c| {
            let mut words = Backend::Functions.call(c);
            words.extend(["FORMAT".to_string(), "map".to_string()]);
            words
        })
        .collect();
    let library_replies = exec(&mut library, &library_calls);
    for (m, l) in module_replies.iter().zip(&library_replies) {
        assert_eq!(sorted(l), sorted(m));
    }
    let refused = sorted(&library_replies[1]);
    assert!(
        refused.contains(&("+lease_id".to_string(), "nil".to_string())),
        "{refused:?}"
    );
    // A shadow refusal: acquired 1, its would-be id, and `shadow 1`; only
    // it has the field.
    let shadowed = sorted(&module_replies[2]);
    for field in [("+acquired", "1"), ("+lease_id", "\"c\""), ("+shadow", "1")] {
        let field = (field.0.to_string(), field.1.to_string());
        assert!(shadowed.contains(&field), "{shadowed:?}");
    }
    assert!(!refused.iter().any(|(k, _)| k == "+shadow"), "{refused:?}");
    assert!(error_text(&library_replies[0]).is_none());
}

/// One server with the module and the library: a ceiling driven by both
/// holds, and either releases the other's lease.
#[test]
fn switching_backends_on_one_key_keeps_one_ceiling() {
    let server = Backend::Module.start();
    let mut con = server.client();
    common::backend::load_library(&mut con);
    let both = [Backend::Module, Backend::Functions];
    let mut held = Vec::new();
    for (i, backend) in both.iter().cycle().take(6).enumerate() {
        let r = backend.raw(&mut con, &["RL.ACQUIRE", "L", "LIMIT", "3", "TTL", "60000"]);
        let Value::Array(items) = &r else {
            panic!("{backend:?}: {r:?}")
        };
        let acquired = items[0] == Value::Int(1);
        assert_eq!(acquired, i < 3, "call {i} by {backend:?}: {r:?}");
        if acquired {
            held.push(text_of(&items[4]));
        }
        let in_flight = both
            .iter()
            .map(|b| b.raw(&mut con, &["RL.INFLIGHT", "L"]))
            .collect::<Vec<_>>();
        assert_eq!(in_flight[0], in_flight[1]);
    }
    for (i, id) in held.iter().enumerate() {
        // Released by the backend that did not acquire it.
        let backend = both[(i + 1) % 2];
        let r = backend.raw(&mut con, &["RL.RELEASE", "L", id]);
        assert_eq!(r, Value::Int(1), "{backend:?} releasing {id}");
    }
    assert_eq!(cmd_raw(&mut con, &["EXISTS", "L"]), Value::Int(0));
}

/// Out of memory, a holder can still beat and release (RL.EXTEND and
/// RL.RELEASE lack `deny-oom`; rl_extend and rl_release are `allow-oom`),
/// while a new lease is refused, on both backends.
#[test]
fn out_of_memory_a_holder_still_extends_and_releases() {
    for (backend, server) in servers() {
        let mut con = server.client();
        let r = backend.raw(
            &mut con,
            &["RL.ACQUIRE", "L", "LIMIT", "2", "TTL", "60000", "ID", "a"],
        );
        assert!(error_text(&r).is_none(), "{backend:?}: {r:?}");
        for (name, value) in [("maxmemory-policy", "noeviction"), ("maxmemory", "1")] {
            let r = cmd_raw(&mut con, &["CONFIG", "SET", name, value]);
            assert_eq!(r, Value::Okay, "{backend:?}");
        }
        let r = backend.raw(&mut con, &["RL.ACQUIRE", "L", "LIMIT", "2", "TTL", "60000"]);
        let err = error_text(&r).unwrap_or_default();
        assert!(err.starts_with("OOM "), "{backend:?}: {r:?}");
        let r = backend.raw(&mut con, &["RL.EXTEND", "L", "a", "TTL", "30000"]);
        assert_eq!(r, Value::Int(1), "{backend:?}");
        let r = backend.raw(&mut con, &["RL.INFLIGHT", "L"]);
        assert_eq!(r, Value::Int(1), "{backend:?}");
        let r = backend.raw(&mut con, &["RL.RELEASE", "L", "a"]);
        assert_eq!(r, Value::Int(1), "{backend:?}");
        let r = cmd_raw(&mut con, &["CONFIG", "SET", "maxmemory", "0"]);
        assert_eq!(r, Value::Okay, "{backend:?}");
    }
}

/// Shadow mode (issue 27): with LIMIT 2 and SHADOW, five acquires are all
/// answered acquired; the 3rd-5th with the wait for the earliest live
/// lease and the id they would have had, and they take nothing: the key,
/// its deadlines and its expiry are those of two enforced acquires, and
/// nothing of the three is propagated. The shadow ids are not held: a
/// release or extend of one answers 0. META `shadow 1` then `shadow 0`
/// enforces from there.
#[test]
fn shadow_acquires_answer_acquired_and_keep_the_enforced_state() {
    for backend in BOTH {
        shadow_acquires_keep_the_enforced_state_on(backend);
    }
}

fn shadow_acquires_keep_the_enforced_state_on(backend: Backend) {
    let primary = backend.start_with(QUIET);
    let replica = backend.start();
    replica.replica_of(&primary);
    let mut con = primary.client();
    let calls: Vec<Vec<String>> = [
        "RL.ACQUIRE s LIMIT 2 TTL 1000 ID a SHADOW",
        "RL.ACQUIRE s LIMIT 2 TTL 2000 SHADOW ID b",
        "RL.ACQUIRE e LIMIT 2 TTL 1000 ID a",
        "RL.ACQUIRE e LIMIT 2 TTL 2000 ID b",
    ]
    .iter()
    .map(|c| line(backend, c))
    .collect();
    let (first, replies) = timed(&mut con, &calls);
    for (reply, id) in replies.iter().zip(["a", "b", "a", "b"]) {
        assert_eq!(acquired(reply).0, 1, "{backend:?}");
        assert_eq!(acquired(reply).4.as_deref(), Some(id), "{backend:?}");
    }
    wait_replica_offset(&primary, &replica);
    let before = repl_offset(&mut con);
    let calls: Vec<Vec<String>> = [
        "RL.ACQUIRE s LIMIT 2 TTL 5000 SHADOW",
        "RL.ACQUIRE s LIMIT 2 TTL 5000 SHADOW ID mine",
        "RL.ACQUIRE s shadow LIMIT 2 TTL 5000",
    ]
    .iter()
    .map(|c| line(backend, c))
    .collect();
    let (now, replies) = timed(&mut con, &calls);
    let mut ids = Vec::new();
    for reply in &replies {
        let (ok, limit, in_flight, retry, id) = acquired(reply);
        // The wait for the earliest live lease: a's, 1000 ms from `first`.
        assert_eq!((ok, limit, in_flight), (1, 2, 2), "{backend:?}");
        assert_eq!(retry, first + 1000 - now, "{backend:?}");
        assert!(retry > 0, "{backend:?}: {retry}");
        ids.push(id.expect("the would-be id"));
    }
    assert!(
        is_generated_id(&ids[0]) && is_generated_id(&ids[2]),
        "{ids:?}"
    );
    assert_eq!(ids[1], "mine");
    assert_eq!(
        repl_offset(&mut con),
        before,
        "{backend:?}: nothing propagated"
    );
    assert_eq!(cmd_int(&mut con, &["ZCARD", "s"]), 2);
    let state = lease_state(&mut con, "s");
    assert_eq!(state, lease_state(&mut con, "e"), "{backend:?}");
    assert_eq!(state.1, first + 2000, "{backend:?}");
    // The shadow ids are not held.
    for call in [
        "RL.RELEASE s mine".to_string(),
        format!("RL.EXTEND s {} TTL 10", ids[0]),
    ] {
        assert_eq!(show(&run(&mut con, &line(backend, &call))), "0", "{call}");
    }
    assert_eq!(repl_offset(&mut con), before, "{backend:?}");
    wait_replica_offset(&primary, &replica);
    assert_eq!(lease_state(&mut replica.client(), "s"), state);
    // Without SHADOW the same call is refused.
    let v = run(&mut con, &line(backend, "RL.ACQUIRE s LIMIT 2 TTL 5000"));
    assert_eq!((acquired(&v).0, acquired(&v).4), (0, None), "{backend:?}");
    // META shadow 1, then 0: enforced from there.
    cmd_raw(&mut con, &split("HSET m max 2 ttl 5000 shadow 1"));
    let v = run(&mut con, &line(backend, "RL.ACQUIRE s META m"));
    let (ok, _, _, retry, id) = acquired(&v);
    assert!(ok == 1 && retry > 0 && id.is_some(), "{backend:?}: {v:?}");
    cmd_raw(&mut con, &split("HSET m shadow 0"));
    let v = run(&mut con, &line(backend, "RL.ACQUIRE s META m"));
    assert_eq!(acquired(&v).0, 0, "{backend:?}: {v:?}");
    // The inline flag wins over `shadow 0`.
    let v = run(&mut con, &line(backend, "RL.ACQUIRE s META m SHADOW"));
    assert_eq!(acquired(&v).0, 1, "{backend:?}: {v:?}");
    assert_eq!(state, lease_state(&mut con, "s"), "{backend:?}");
    // A free slot in shadow mode is taken as usual.
    let v = run(
        &mut con,
        &line(backend, "RL.ACQUIRE s LIMIT 3 TTL 5000 SHADOW ID c"),
    );
    assert_eq!(acquired(&v), (1, 3, 3, 0, Some("c".into())), "{backend:?}");
    assert_eq!(cmd_int(&mut con, &["ZCARD", "s"]), 3);
    // Bad input: the same errors on both backends.
    for (call, want) in [
        (
            "RL.ACQUIRE s LIMIT 2 TTL 5 SHADOW 1",
            "ERR unknown option '1'",
        ),
        (
            "RL.ACQUIRE s LIMIT 2 TTL 5 SHADOW SHADOW",
            "ERR SHADOW is given more than once",
        ),
    ] {
        let v = run(&mut con, &line(backend, call));
        assert_eq!(error_text(&v).as_deref(), Some(want), "{backend:?} {call}");
    }
    cmd_raw(&mut con, &split("HSET m shadow yes"));
    let v = run(&mut con, &line(backend, "RL.ACQUIRE s META m"));
    assert_eq!(
        error_text(&v).as_deref(),
        Some("ERR META hash field 'shadow' must be 0 or 1"),
        "{backend:?}"
    );
}

/// Shadow refusals of RL.ACQUIRE are counted in `leases_shadow_refused`
/// (not in `leases_refused`, nor in the limiters' `calls_*`), and each
/// fires `rl.shadow`, not `rl.hit`.
#[test]
fn module_only_shadow_acquires_are_counted_apart_and_fire_rl_shadow() {
    let server = Server::start_with(&["--notify-keyspace-events", "Ed"]);
    let mut con = server.client();
    common::subscribe!(pubsub = server, "__keyevent@*__:rl.*");
    for i in 0..5 {
        let v = cmd_raw(&mut con, &split("RL.ACQUIRE k LIMIT 2 TTL 60000 SHADOW"));
        let (ok, _, _, retry, _) = acquired(&v);
        assert_eq!((ok, retry > 0), (1, i >= 2), "#{i}: {v:?}");
    }
    // One real refusal, to end the events.
    let v = cmd_raw(&mut con, &split("RL.ACQUIRE k LIMIT 2 TTL 60000"));
    assert_eq!(acquired(&v).0, 0);
    let field = |con: &mut Connection, f: &str| -> i64 {
        info_field(con, "ratelimit", &format!("ratelimit_{f}"))
            .unwrap()
            .parse()
            .unwrap()
    };
    assert_eq!(field(&mut con, "leases_shadow_refused"), 3);
    assert_eq!(leases_info(&mut con), [2, 1, 0, 0, 0]);
    assert_eq!(field(&mut con, "calls_shadow_refused"), 0);
    let channels: Vec<String> = (0..4)
        .map(|_| pubsub.get_message().unwrap().get_channel_name().to_string())
        .collect();
    let want = ["rl.shadow", "rl.shadow", "rl.shadow", "rl.hit"];
    for (got, want) in channels.iter().zip(want) {
        assert_eq!(got, &format!("__keyevent@0__:{want}"), "{channels:?}");
    }
    // getkeys steps over the flag to find the META hash.
    let keys = cmd_raw(
        &mut con,
        &split("COMMAND GETKEYS RL.ACQUIRE k SHADOW META m LIMIT 1"),
    );
    assert_eq!(show(&keys), "[\"k\", \"m\"]");
}

/// BLOCK with SHADOW: a shadow refusal never waits, even behind a waiter.
#[test]
fn module_only_a_shadow_acquire_with_block_answers_at_once() {
    let server = Server::start();
    let mut con = server.client();
    cmd_raw(&mut con, &split("RL.ACQUIRE k LIMIT 1 TTL 60000 ID a"));
    let v = cmd_raw(
        &mut con,
        &split("RL.ACQUIRE k LIMIT 1 TTL 60000 SHADOW BLOCK 0"),
    );
    let (ok, _, _, retry, _) = acquired(&v);
    assert!(ok == 1 && retry > 0, "{v:?}");
    let blocked = |con: &mut Connection| -> i64 {
        info_field(con, "ratelimit", "ratelimit_blocked_clients")
            .unwrap()
            .parse()
            .unwrap()
    };
    // An enforced waiter, then a shadow call behind it: answered at once.
    let mut waiter_con = server.client();
    let waiter = thread::spawn(move || {
        cmd_raw(
            &mut waiter_con,
            &split("RL.ACQUIRE k LIMIT 1 TTL 60000 ID w BLOCK 0"),
        )
    });
    let start = Instant::now();
    while blocked(&mut con) != 1 {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "the waiter waits"
        );
        thread::sleep(Duration::from_millis(5));
    }
    let v = cmd_raw(
        &mut con,
        &split("RL.ACQUIRE k LIMIT 1 TTL 60000 SHADOW BLOCK 0 ID s"),
    );
    assert_eq!(acquired(&v).0, 1, "{v:?}");
    assert!(acquired(&v).3 > 0, "{v:?}");
    assert_eq!(
        blocked(&mut con),
        1,
        "the shadow call did not join the queue"
    );
    // The shadow call took no slot: the release serves the waiter.
    assert_eq!(cmd_int(&mut con, &["RL.RELEASE", "k", "a"]), 1);
    let served = waiter.join().unwrap();
    assert_eq!(acquired(&served), (1, 1, 1, 0, Some("w".into())));
    assert_eq!(cmd_int(&mut con, &["RL.RELEASE", "k", "s"]), 0);
}
