//! Concurrency leases against real servers: RL.ACQUIRE, RL.RELEASE,
//! RL.EXTEND and RL.INFLIGHT as LEASE_CONTRACT.md pins them, the ceiling
//! under concurrent load, crash safety (slots free exactly at their
//! deadlines), bad input, replication, AOF, failover and cluster routing.
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

use crate::common::cluster::{err_line, Cluster};
use crate::common::{
    cmd_err, cmd_int, cmd_raw, dump, err_text, exec, info_field, pexpiretime, repl_offset, run,
    server_time_ms, split, timed, wait_replica_offset, Rng, Server, QUIET,
};
use redis::{Connection, Value};

/// Whether `id` has the shape of a generated id: `<ms hex>-<16 hex>`.
fn generated_ms(id: &str) -> Option<i64> {
    let (ms, nonce) = id.split_once('-')?;
    let lower_hex = |s: &str| {
        !s.is_empty()
            && s.bytes()
                .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase())
    };
    (lower_hex(ms) && lower_hex(nonce) && nonce.len() == 16)
        .then(|| i64::from_str_radix(ms, 16).ok())?
}

/// A reply as one line: integers, `nil`, bulk text, `[..]` arrays, `{k:v}`
/// maps and `!ERR ...` errors; a generated id shows as `<id@ms>`.
fn show(v: &Value) -> String {
    let list = |items: Vec<String>| items.join(",");
    match v {
        Value::Int(n) => n.to_string(),
        Value::Nil => "nil".into(),
        Value::Okay => "OK".into(),
        Value::SimpleString(s) => s.clone(),
        Value::BulkString(b) => {
            let s = String::from_utf8_lossy(b).into_owned();
            match generated_ms(&s) {
                Some(ms) => format!("<id@{ms}>"),
                None => s,
            }
        }
        Value::Array(items) => format!("[{}]", list(items.iter().map(show).collect())),
        Value::Map(pairs) => format!(
            "{{{}}}",
            list(
                pairs
                    .iter()
                    .map(|(k, v)| format!("{}:{}", show(k), show(v)))
                    .collect()
            )
        ),
        Value::ServerError(_) => format!("!{}", err_text(v)),
        other => format!("{other:?}"),
    }
}

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

/// Runs `table` (call, expected reply) in one timed transaction and checks
/// every reply.
fn check_table(con: &mut Connection, table: &[(&str, &str)]) {
    let calls: Vec<Vec<String>> = table
        .iter()
        .map(|(call, _)| common::words(&split(call)))
        .collect();
    let (now, replies) = timed(con, &calls);
    for ((call, want), got) in table.iter().zip(&replies) {
        assert_eq!(show(got), at(want, now), "{call}");
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
    let server = Server::start();
    let mut con = server.client();
    check_table(
        &mut con,
        &[
            ("RL.ACQUIRE s LIMIT 2 TTL 1000 ID a", "[1,2,1,0,a]"),
            ("RL.ACQUIRE s LIMIT 2 TTL 500", "[1,2,2,0,<id@{now}>]"),
            ("RL.ACQUIRE s LIMIT 2 TTL 1000", "[0,2,2,500,nil]"),
            // Renewing a live id takes no second slot, even at the limit.
            ("RL.ACQUIRE s limit 2 ttl 2000 id a", "[1,2,2,0,a]"),
            ("RL.INFLIGHT s", "2"),
            ("ZCARD s", "2"),
            ("ZSCORE s a", "{now+2000}"),
            ("PEXPIRETIME s", "{now+2000}"),
            ("RL.ACQUIRE s LIMIT 3 TTL 100 ID b", "[1,3,3,0,b]"),
            ("RL.RELEASE s a", "1"),
            ("RL.RELEASE s a", "0"),
            ("RL.RELEASE s nobody", "0"),
            ("RL.EXTEND s a TTL 100", "0"),
            ("RL.EXTEND s b ttl 700", "1"),
            ("ZSCORE s b", "{now+700}"),
            ("PEXPIRETIME s", "{now+700}"),
            ("RL.INFLIGHT s", "2"),
            // A missing key.
            ("RL.INFLIGHT missing", "0"),
            ("RL.RELEASE missing x", "0"),
            ("RL.EXTEND missing x TTL 5", "0"),
            ("EXISTS missing", "0"),
            // Unlimited: admitted, nothing written, no TTL needed.
            ("RL.ACQUIRE u", "[1,0,0,0,<id@{now}>]"),
            ("RL.ACQUIRE u ID job-7", "[1,0,0,0,job-7]"),
            ("HSET m0 max 0 ttl 5", "2"),
            ("RL.ACQUIRE u META m0 ID j", "[1,0,0,0,j]"),
            ("RL.ACQUIRE u META nothing-here", "[1,0,0,0,<id@{now}>]"),
            ("EXISTS u", "0"),
            // Limits as data; inline options win.
            ("HSET m max 2 ttl 1500", "2"),
            ("RL.ACQUIRE v META m ID x", "[1,2,1,0,x]"),
            ("ZSCORE v x", "{now+1500}"),
            ("RL.ACQUIRE v META m LIMIT 1", "[0,1,1,1500,nil]"),
            ("RL.ACQUIRE v META m TTL 10 ID y", "[1,2,2,0,y]"),
            ("ZSCORE v y", "{now+10}"),
            ("PEXPIRETIME v", "{now+1500}"),
            // The last release deletes the key.
            ("RL.RELEASE v x", "1"),
            ("RL.RELEASE v y", "1"),
            ("EXISTS v", "0"),
        ],
    );
    // Generated ids never repeat for a key, even within one ms.
    let calls = vec![common::words(&split("RL.ACQUIRE g LIMIT 100 TTL 60000")); 50];
    let (now, replies) = timed(&mut con, &calls);
    let mut ids: Vec<String> = replies.iter().map(|r| acquired(r).4.unwrap()).collect();
    assert!(
        ids.iter().all(|id| generated_ms(id) == Some(now)),
        "{ids:?}"
    );
    // Released and taken again in the same ms: still a new id each time.
    let mut again = Vec::new();
    for id in &ids {
        again.push(common::words(&["RL.RELEASE", "g", id]));
        again.push(common::words(&split("RL.ACQUIRE g LIMIT 100 TTL 60000")));
    }
    let replies = exec(&mut con, &again);
    for pair in replies.chunks(2) {
        assert_eq!(pair[0], Value::Int(1));
        ids.push(acquired(&pair[1]).4.unwrap());
    }
    let distinct: std::collections::BTreeSet<&String> = ids.iter().collect();
    assert_eq!(distinct.len(), 100, "{ids:?}");
}

#[test]
fn resp3_clients_get_a_map() {
    let server = Server::start();
    let mut con = server.client();
    let _: Value = redis::cmd("HELLO").arg(3).query(&mut con).unwrap();
    check_table(
        &mut con,
        &[
            (
                "RL.ACQUIRE r LIMIT 1 TTL 800 ID a",
                "{acquired:1,limit:1,in_flight:1,retry_after_ms:0,lease_id:a}",
            ),
            (
                "RL.ACQUIRE r LIMIT 1 TTL 800",
                "{acquired:0,limit:1,in_flight:1,retry_after_ms:800,lease_id:nil}",
            ),
            (
                "RL.ACQUIRE free",
                "{acquired:1,limit:0,in_flight:0,retry_after_ms:0,lease_id:<id@{now}>}",
            ),
            ("RL.RELEASE r a", "1"),
            ("RL.INFLIGHT r", "0"),
        ],
    );
}

#[test]
fn info_counts_leases_and_a_refusal_fires_rl_hit() {
    let server = Server::start_with(&["--notify-keyspace-events", "Ed"]);
    let mut con = server.client();
    common::subscribe!(pubsub = server, "__keyevent@*__:rl.*");
    assert_eq!(leases_info(&mut con), [0; 5]);
    let acquire = split("RL.ACQUIRE k LIMIT 1 TTL 60000 ID a");
    let other = split("RL.ACQUIRE k LIMIT 1 TTL 60000 ID b");
    for (call, want) in [
        (&acquire, "[1,1,1,0,a]"),
        (&acquire, "[1,1,1,0,a]"),
        (&other, "[0,1,1,"),
        (&split("RL.EXTEND k a TTL 60000"), "1"),
        (&split("RL.EXTEND k b TTL 60000"), "0"),
        (&split("RL.RELEASE k a"), "1"),
        (&split("RL.RELEASE k a"), "0"),
        (&split("RL.ACQUIRE unlimited"), "[1,0,0,0,"),
    ] {
        let got = show(&cmd_raw(&mut con, call));
        assert!(got.starts_with(want), "{call:?}: {got}");
    }
    // Two short leases expire and are reclaimed by the next call.
    check_table(
        &mut con,
        &[
            ("RL.ACQUIRE e LIMIT 5 TTL 1 ID x", "[1,5,1,0,x]"),
            ("RL.ACQUIRE e LIMIT 5 TTL 1 ID y", "[1,5,2,0,y]"),
            ("RL.ACQUIRE e LIMIT 5 TTL 60000 ID z", "[1,5,3,0,z]"),
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
    const CLIENTS: usize = 50;
    const ROUNDS: usize = 60;
    const LIMIT: i64 = 5;
    let server = Server::start();
    let done = Arc::new(AtomicBool::new(false));
    let samples = Arc::new(AtomicUsize::new(0));
    let sampler = {
        let (done, samples) = (done.clone(), samples.clone());
        let mut con = server.client();
        thread::spawn(move || {
            let mut most = 0;
            while !done.load(Ordering::Relaxed) {
                let in_flight = cmd_int(&mut con, &["RL.INFLIGHT", "pool"]);
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
                            acquired(&cmd_raw(&mut con, &acquire));
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
                    let released = cmd_int(&mut con, &["RL.RELEASE", "pool", &id]);
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
    assert_eq!(cmd_int(&mut con, &["EXISTS", "pool"]), 0, "the key is gone");
    let [acquired, refused_info, released, ..] = leases_info(&mut con);
    assert_eq!(acquired, (CLIENTS * ROUNDS) as i64);
    assert_eq!(released, (CLIENTS * ROUNDS) as i64);
    assert_eq!(refused_info, refused as i64);
    assert!(most >= 1 && refused > 0, "the slots were contended");
    println!(
        "{} leases by {CLIENTS} clients in {:?}: {refused} refusals, {} samples, at most {most} in flight",
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
    let server = Server::start();
    let mut con = server.client();
    // Two holders on their own connections, which then go away.
    let mut deadlines = Vec::new();
    for (id, ttl) in [("first", 300), ("second", 600)] {
        let mut holder = server.client();
        let call = common::words(&[
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
    let probe = common::words(&split("RL.ACQUIRE gpu LIMIT 2 TTL 60000 ID newcomer"));
    for (i, &deadline) in deadlines.iter().enumerate() {
        // Well before the deadline: refused, told the exact wait.
        let (now, replies) = timed(&mut con, std::slice::from_ref(&probe));
        assert_eq!(show(&replies[0]), format!("[0,2,2,{},nil]", deadline - now));
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
            assert_eq!(cmd_int(&mut con, &["RL.RELEASE", "gpu", "newcomer"]), 1);
            let third = common::words(&split("RL.ACQUIRE gpu LIMIT 2 TTL 60000 ID third"));
            assert_eq!(acquired(&run(&mut con, &third)).0, 1);
        }
        println!("deadline {deadline}: {refusals} refusals up to {last_refused:?}, admitted at {admitted_at}");
    }
    // A lease that was reclaimed cannot be released or extended.
    assert_eq!(cmd_int(&mut con, &["RL.RELEASE", "gpu", "first"]), 0);
    assert_eq!(
        cmd_int(&mut con, &["RL.EXTEND", "gpu", "second", "TTL", "1000"]),
        0
    );
}

#[test]
fn a_heartbeat_keeps_a_lease_past_its_first_ttl() {
    let server = Server::start();
    let mut con = server.client();
    let (start, r) = timed(
        &mut con,
        &[common::words(&split("RL.ACQUIRE job LIMIT 1 TTL 500 ID w"))],
    );
    assert_eq!(acquired(&r[0]).0, 1);
    // Beat every 50 ms for three times the TTL (a beat may come late by up to 450 ms).
    while server_time_ms(&mut con) < start + 1500 {
        thread::sleep(Duration::from_millis(50));
        let (now, r) = timed(
            &mut con,
            &[
                common::words(&split("RL.EXTEND job w TTL 500")),
                common::words(&split("ZSCORE job w")),
                common::words(&split("RL.ACQUIRE job LIMIT 1 TTL 500")),
            ],
        );
        assert_eq!(r[0], Value::Int(1), "the beat at {now}");
        assert_eq!(show(&r[1]), (now + 500).to_string());
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
    assert_eq!(
        cmd_int(&mut con, &["RL.EXTEND", "job", "w", "TTL", "300"]),
        0
    );
    assert_eq!(cmd_int(&mut con, &["RL.RELEASE", "job", "w"]), 0);
    assert_eq!(cmd_int(&mut con, &["EXISTS", "job"]), 0);
}

#[test]
fn every_malformed_call_is_an_error_that_changes_nothing() {
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
fn random_workload(con: &mut Connection, rng: &mut Rng, calls: usize) -> Vec<String> {
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
            0 => common::words(&["RL.ACQUIRE", key, "LIMIT", "3", "TTL", &ttl]),
            1 => common::words(&["RL.ACQUIRE", key, "LIMIT", "3", "TTL", &ttl, "ID", id]),
            2 => common::words(&["RL.RELEASE", key, id]),
            3 => common::words(&["RL.EXTEND", key, id, "TTL", &ttl]),
            _ => common::words(&["RL.INFLIGHT", key]),
        };
        let v = run(con, &call);
        assert!(!matches!(v, Value::ServerError(_)), "{call:?}: {v:?}");
        if rng.pct(5) {
            thread::sleep(Duration::from_millis(rng.below(15) as u64));
        }
    }
    for key in &keys {
        let anchor = common::words(&[
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
    let mut primary = Server::start_with(&["--appendonly", "yes", "--appendfsync", "always"]);
    let replica = Server::start();
    replica.replica_of(&primary);
    let mut con = primary.client();
    let mut rng = Rng::new(common::seed(
        "replicas_aof_and_failover_hold_the_same_leases",
    ));
    let keys = random_workload(&mut con, &mut rng, 1500);
    wait_replica_offset(&primary, &replica);
    let on_primary = all_leases(&mut con, &keys);
    assert!(
        on_primary.values().all(|(m, at)| !m.is_empty() && *at > 0),
        "{on_primary:?}"
    );
    assert_eq!(
        all_leases(&mut replica.client(), &keys),
        on_primary,
        "the replica"
    );
    let [acquired_n, _, released, extended, reclaimed] = leases_info(&mut con);
    assert!(acquired_n > 0 && released > 0 && extended > 0 && reclaimed > 0);

    // The AOF holds the effects, never the commands.
    let aof: Vec<u8> = std::fs::read_dir(primary.dir.join("appendonlydir"))
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().contains(".incr."))
        .flat_map(|e| std::fs::read(e.path()).unwrap())
        .collect();
    let aof = String::from_utf8_lossy(&aof).to_uppercase();
    for effect in ["ZADD", "ZREM", "PEXPIREAT"] {
        assert!(aof.contains(effect), "the AOF lacks {effect}");
    }
    assert!(!aof.contains("RL."), "the AOF holds a module command");

    // A restart from the AOF holds the same.
    primary.restart();
    let mut con = primary.client();
    assert_eq!(
        all_leases(&mut con, &keys),
        on_primary,
        "after the AOF restart"
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
        "the promoted replica"
    );
    for (key, (members, _)) in &on_primary {
        let live = members.len() as i64;
        let now = server_time_ms(&mut promoted);
        let still = members.iter().filter(|(_, d)| *d > now + 1000).count() as i64;
        let in_flight = cmd_int(&mut promoted, &["RL.INFLIGHT", key]);
        assert!((still..=live).contains(&in_flight), "{key}: {in_flight}");
        assert_eq!(
            cmd_int(&mut promoted, &["RL.RELEASE", key, "anchor"]),
            1,
            "{key}"
        );
    }
}

#[test]
fn a_lease_that_expired_while_the_server_was_down_is_reclaimed_without_extension() {
    let mut server = Server::start_with(&["--appendonly", "yes", "--appendfsync", "always"]);
    let mut con = server.client();
    let (now, _) = timed(
        &mut con,
        &[
            common::words(&split("RL.ACQUIRE down LIMIT 2 TTL 600 ID short")),
            common::words(&split("RL.ACQUIRE down LIMIT 2 TTL 600000 ID long")),
        ],
    );
    server.stop();
    thread::sleep(Duration::from_millis(700));
    server.restart();
    let mut con = server.client();
    // Still stored as it was, and not live.
    let (members, expiry) = lease_state(&mut con, "down");
    assert_eq!(
        members,
        [("short".into(), now + 600), ("long".into(), now + 600_000)]
    );
    assert_eq!(expiry, now + 600_000);
    assert_eq!(cmd_int(&mut con, &["RL.INFLIGHT", "down"]), 1);
    assert_eq!(
        cmd_int(&mut con, &["RL.EXTEND", "down", "short", "TTL", "600000"]),
        0
    );
    let (members, _) = lease_state(&mut con, "down");
    assert_eq!(
        members,
        [("long".into(), now + 600_000)],
        "reclaimed, not extended"
    );
    let v = cmd_raw(&mut con, &split("RL.ACQUIRE down LIMIT 2 TTL 1000 ID next"));
    assert_eq!(acquired(&v).0, 1);
}

/// The commands in an AOF's incremental files, without MULTI, EXEC and
/// SELECT, as lines of words.
fn aof_commands(server: &Server) -> Vec<String> {
    let dir = server.dir.join("appendonlydir");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.to_string_lossy().ends_with(".incr.aof"))
        .collect();
    files.sort();
    let mut out = Vec::new();
    for file in files {
        let bytes = std::fs::read(file).unwrap();
        let mut at = 0;
        let line = |at: &mut usize| -> String {
            let end = *at + bytes[*at..].windows(2).position(|w| w == b"\r\n").unwrap();
            let text = String::from_utf8_lossy(&bytes[*at..end]).into_owned();
            *at = end + 2;
            text
        };
        while at < bytes.len() {
            let n: usize = line(&mut at).trim_start_matches('*').parse().unwrap();
            let mut words = Vec::new();
            for _ in 0..n {
                let len: usize = line(&mut at).trim_start_matches('$').parse().unwrap();
                words.push(String::from_utf8_lossy(&bytes[at..at + len]).into_owned());
                at += len + 2;
            }
            if !["MULTI", "EXEC", "SELECT"].contains(&words[0].to_uppercase().as_str()) {
                out.push(words.join(" "));
            }
        }
    }
    out
}

/// The effects, byte for byte: ZREM, then ZADD, then PEXPIREAT, each with
/// absolute values and only when it applies.
#[test]
fn each_call_propagates_exactly_its_effects() {
    let server = Server::start_with(&["--appendonly", "yes", "--appendfsync", "always"]);
    let mut con = server.client();
    let (first, _) = timed(
        &mut con,
        &[
            common::words(&split("RL.ACQUIRE k LIMIT 2 TTL 1 ID gone")),
            common::words(&split("RL.ACQUIRE k LIMIT 2 TTL 600000 ID a")),
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
    let calls: Vec<Vec<String>> = calls.iter().map(|c| common::words(&split(c))).collect();
    let (now, replies) = timed(&mut con, &calls);
    assert_eq!(
        show(&replies[0]),
        format!("[0,1,1,{},nil]", first + 600_000 - now)
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
    assert_eq!(aof_commands(&server), want);
    assert_eq!(cmd_int(&mut con, &["EXISTS", "k"]), 0);
}

#[test]
fn refusals_and_reads_propagate_nothing() {
    let primary = Server::start_with(QUIET);
    let replica = Server::start();
    replica.replica_of(&primary);
    let mut con = primary.client();
    cmd_raw(&mut con, &split("RL.ACQUIRE full LIMIT 1 TTL 600000 ID a"));
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
        run(&mut con, &common::words(&split(call)));
    }
    assert_eq!(repl_offset(&mut con), before, "nothing was propagated");
    wait_replica_offset(&primary, &replica);
    let keys = ["full".to_string(), "nothing".to_string()];
    assert_eq!(
        all_leases(&mut replica.client(), &keys),
        all_leases(&mut con, &keys)
    );
}

#[test]
fn a_refusal_that_reclaims_replicates_the_reclaim_only() {
    let primary = Server::start_with(QUIET);
    let replica = Server::start();
    replica.replica_of(&primary);
    let mut con = primary.client();
    let (now, _) = timed(
        &mut con,
        &[
            common::words(&split("RL.ACQUIRE k LIMIT 2 TTL 1 ID gone")),
            common::words(&split("RL.ACQUIRE k LIMIT 2 TTL 600000 ID kept")),
        ],
    );
    thread::sleep(Duration::from_millis(5));
    // LIMIT 1: the expired lease is reclaimed, and the call still refused.
    let before = repl_offset(&mut con);
    let v = cmd_raw(&mut con, &split("RL.ACQUIRE k LIMIT 1 TTL 600000"));
    assert_eq!(acquired(&v).0, 0);
    let after = repl_offset(&mut con);
    assert!(after > before, "the reclaim is propagated");
    // The same refusal again has nothing to reclaim.
    let v = cmd_raw(&mut con, &split("RL.ACQUIRE k LIMIT 1 TTL 600000"));
    assert_eq!(acquired(&v).0, 0);
    assert_eq!(repl_offset(&mut con), after);
    wait_replica_offset(&primary, &replica);
    let want = (vec![("kept".to_string(), now + 600_000)], now + 600_000);
    assert_eq!(lease_state(&mut con, "k"), want);
    assert_eq!(lease_state(&mut replica.client(), "k"), want);
}

#[test]
fn cluster_routes_by_key_and_refuses_a_meta_in_another_slot() {
    let c = Cluster::start(3);
    // Keys on every node: each call runs where its key lives.
    for key in ["{a}pool", "{b}pool", "{c}pool", "{d}pool"] {
        let (v, node) = c.route(
            key,
            &["RL.ACQUIRE", key, "LIMIT", "1", "TTL", "60000", "ID", "w"],
        );
        assert_eq!(show(&v), "[1,1,1,0,w]", "{key}");
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
    assert_eq!(show(&v), "[1,1,1,0,m]");
    for node in [
        c.owner_seen_by(0, c.keyslot(&key)),
        c.owner_seen_by(0, c.keyslot(&far)),
    ] {
        let v = cmd_raw(&mut c.client(node), &["RL.ACQUIRE", &key, "META", &far]);
        let e = err_line(&v).unwrap_or_default();
        assert!(e.starts_with("CROSSSLOT"), "node {node}: {v:?}");
    }
}

/// ACL key patterns see the lease key and the META hash, wherever META is.
#[test]
fn acl_key_patterns_cover_the_lease_key_and_its_meta() {
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
    assert_eq!(show(&ok), "[1,1,1,0,META]");
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
    let server = Server::start();
    let mut con = server.client();
    cmd_raw(&mut con, &split("RL.ACQUIRE w LIMIT 1 TTL 60000 ID a"));
    let watched = |con: &mut Connection, call: &str| -> bool {
        assert_eq!(cmd_raw(con, &["WATCH", "w"]), Value::Okay);
        let v = cmd_raw(con, &split(call));
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
        assert_eq!(watched(&mut con, call), touches, "{call}");
    }
}

#[test]
fn command_docs_info_and_getkeys_describe_the_lease_commands() {
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
            "[[k,[RW,access,update]],[m,[RO,access]]]",
        ),
        ("RL.ACQUIRE k", "[[k,[RW,access,update]]]"),
        // A lease id may be the word META.
        (
            "RL.ACQUIRE k ID META META m",
            "[[k,[RW,access,update]],[m,[RO,access]]]",
        ),
        ("RL.ACQUIRE k ID META", "[[k,[RW,access,update]]]"),
        ("RL.RELEASE k id", "[[k,[RW,access,update]]]"),
        ("RL.EXTEND k id TTL 5", "[[k,[RW,access,update]]]"),
        ("RL.INFLIGHT k", "[[k,[RO,access]]]"),
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
        "arguments,[[name,key,type,key,display_text,key,key_spec_index,0],\
         [name,max,type,integer,display_text,max,token,LIMIT,flags,[optional]],\
         [name,ms,type,integer,display_text,ms,token,TTL,flags,[optional]],\
         [name,metakey,type,key,display_text,metakey,key_spec_index,1,token,META,flags,[optional]],\
         [name,lease-id,type,string,display_text,lease-id,token,ID,flags,[optional]]]]",
        "arguments,[[name,key,type,key,display_text,key,key_spec_index,0],\
         [name,lease-id,type,string,display_text,lease-id]]]",
        "arguments,[[name,key,type,key,display_text,key,key_spec_index,0],\
         [name,lease-id,type,string,display_text,lease-id],\
         [name,ms,type,integer,display_text,ms,token,TTL]]]",
    ] {
        assert!(docs.contains(part), "{part} not in {docs}");
    }
}
