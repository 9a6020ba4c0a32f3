//! Fair lease waiting on both backends (docs/reference.md "tickets"):
//! RL.ACQUIRE ... QUEUE ticketkey [WAIT ms] and RL.RELEASE ... QUEUE.
//! Only the earliest live tickets take free slots; a plain call naming
//! the queue cannot jump it; dead waiters' tickets lapse; releases publish
//! a wake-up. Eight workers contend for LIMIT 2 with releases and with
//! expiries, and the test prints calls per acquisition, how long a free
//! slot stays idle while a ticket waits, and order inversions (0).

use crate::common;

use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use crate::common::backend::{Backend, BOTH};
use crate::common::{cmd_raw, dump, error_text, server_time_ms, split, wait_replica_offset};
use redis::{Connection, Value};

fn call(backend: Backend, con: &mut Connection, line: &str) -> Value {
    backend.raw(con, &split(line))
}

/// (acquired, limit, in_flight, retry_after_ms, lease_id, ahead, channel)
fn reply(v: &Value) -> (i64, i64, i64, i64, Option<String>, i64, String) {
    let Value::Array(items) = v else {
        panic!("not a queued RL.ACQUIRE reply: {v:?}")
    };
    assert_eq!(items.len(), 7, "{v:?}");
    let int = |i: usize| common::int(&items[i]);
    (
        int(0),
        int(1),
        int(2),
        int(3),
        common::text(&items[4]),
        int(5),
        common::text(&items[6]).unwrap(),
    )
}

fn zrange(con: &mut Connection, key: &str) -> Vec<(String, i64)> {
    redis::cmd("ZRANGE")
        .arg(&[key, "0", "-1", "WITHSCORES"])
        .query(con)
        .unwrap()
}

#[test]
fn only_the_earliest_tickets_take_free_slots_and_a_plain_call_cannot_jump() {
    for backend in BOTH {
        let server = backend.start();
        let mut con = server.client();
        let q = " QUEUE {j}:t";
        let acq = |con: &mut Connection, rest: &str| {
            reply(&call(
                backend,
                con,
                &format!("RL.ACQUIRE {{j}} LIMIT 2 TTL 60000 {rest}{q}"),
            ))
        };
        // Two holders fill the slots.
        assert_eq!(acq(&mut con, "ID h1").0, 1);
        assert_eq!(acq(&mut con, "ID h2").0, 1);
        // Three waiters take tickets in order.
        for (i, w) in ["a", "b", "c"].iter().enumerate() {
            let r = acq(&mut con, &format!("ID {w} WAIT 5000"));
            assert_eq!(
                (r.0, r.2, r.4.clone(), r.5, r.6.as_str()),
                (0, 2, None, i as i64, "{j}:t"),
                "{backend:?}"
            );
            assert!(r.3 > 59_000, "{backend:?} retry {r:?}");
        }
        let tickets = zrange(&mut con, "{j}:t");
        let places: Vec<_> = tickets
            .iter()
            .filter(|(m, _)| m.starts_with("q:"))
            .collect();
        assert_eq!(
            places
                .iter()
                .map(|(m, s)| (m.as_str(), *s))
                .collect::<Vec<_>>(),
            [("q:a", 1), ("q:b", 2), ("q:c", 3)],
            "{backend:?}"
        );
        // One release frees one slot: owed to `a`. A plain call naming the
        // queue (no ticket), and `b` and `c`, are refused; `a` takes it.
        let released = call(backend, &mut con, "RL.RELEASE {j} h1 QUEUE {j}:t");
        assert_eq!(common::int(&released), 1, "{backend:?}");
        let plain = acq(&mut con, "");
        assert_eq!(
            (plain.0, plain.2, plain.5),
            (0, 1, 3),
            "{backend:?} plain {plain:?}"
        );
        assert!(
            plain.3 >= 4000 && plain.3 <= 5000,
            "{backend:?} owed deadline {plain:?}"
        );
        let before = zrange(&mut con, "{j}:t");
        assert_eq!(acq(&mut con, "ID b WAIT 5000").5, 1, "{backend:?}");
        assert_eq!(acq(&mut con, "ID c WAIT 5000").0, 0, "{backend:?}");
        let a = acq(&mut con, "ID a WAIT 5000");
        assert_eq!(
            (a.0, a.2, a.4.as_deref(), a.5),
            (1, 2, Some("a"), 0),
            "{backend:?}"
        );
        // `a` left the queue; `b` is first now.
        let after = zrange(&mut con, "{j}:t");
        assert!(
            after.iter().all(|(m, _)| !m.ends_with(":a")),
            "{backend:?} {after:?}"
        );
        assert_eq!(before.len(), after.len() + 2, "{backend:?}");
        // A release and a ticket given up: `c` gives up, `b` takes the slot.
        assert_eq!(
            common::int(&call(backend, &mut con, "RL.RELEASE {j} c QUEUE {j}:t")),
            0
        );
        assert_eq!(
            common::int(&call(backend, &mut con, "RL.RELEASE {j} h2 QUEUE {j}:t")),
            1
        );
        assert_eq!(acq(&mut con, "ID b WAIT 5000").0, 1, "{backend:?}");
        assert_eq!(
            zrange(&mut con, "{j}:t"),
            Vec::<(String, i64)>::new(),
            "{backend:?}"
        );
        // A call without QUEUE replies as before: five fields.
        let Value::Array(plain) = call(backend, &mut con, "RL.ACQUIRE {j} LIMIT 2 TTL 60000")
        else {
            panic!()
        };
        assert_eq!(plain.len(), 5);
        // Unlimited with QUEUE: nothing written.
        let r = reply(&call(
            backend,
            &mut con,
            "RL.ACQUIRE {u} ID x QUEUE {u}:t WAIT 100",
        ));
        assert_eq!((r.0, r.4.as_deref(), r.5), (1, Some("x"), 0));
        assert_eq!(
            cmd_raw(&mut con, &["EXISTS", "{u}", "{u}:t"]),
            Value::Int(0)
        );
    }
}

#[test]
fn the_ticket_key_expires_and_a_dead_waiters_ticket_lapses() {
    for backend in BOTH {
        let server = backend.start();
        let mut con = server.client();
        let acq = |con: &mut Connection, rest: &str| {
            reply(&call(
                backend,
                con,
                &format!("RL.ACQUIRE {{k}} LIMIT 1 TTL 60000 {rest} QUEUE {{k}}:t"),
            ))
        };
        assert_eq!(acq(&mut con, "ID h").0, 1);
        // `dead` takes a ticket of 300 ms and never calls again.
        assert_eq!(acq(&mut con, "ID dead WAIT 300").0, 0);
        let t0 = server_time_ms(&mut con);
        let expiry = common::pexpiretime(&mut con, "{k}:t");
        assert!(
            expiry > t0 && expiry <= t0 + 300,
            "{backend:?} {expiry} {t0}"
        );
        assert_eq!(acq(&mut con, "ID live WAIT 5000").5, 1);
        assert_eq!(
            common::int(&call(backend, &mut con, "RL.RELEASE {k} h QUEUE {k}:t")),
            1
        );
        // The slot is owed to `dead` until its ticket lapses; the refusal
        // says when.
        let r = acq(&mut con, "ID live WAIT 5000");
        assert_eq!((r.0, r.5), (0, 1), "{backend:?}");
        assert!(r.3 >= 1 && r.3 <= 300, "{backend:?} {r:?}");
        thread::sleep(Duration::from_millis(r.3 as u64 + 5));
        let r = acq(&mut con, "ID live WAIT 5000");
        assert_eq!(
            (r.0, r.4.as_deref(), r.5),
            (1, Some("live"), 0),
            "{backend:?} {r:?}"
        );
        assert_eq!(
            zrange(&mut con, "{k}:t"),
            Vec::<(String, i64)>::new(),
            "{backend:?}"
        );
    }
}

#[test]
fn bad_input_gets_the_same_error_on_both_backends_and_writes_nothing() {
    let cases: &[(&str, &str)] = &[
        (
            "RL.ACQUIRE {b} LIMIT 1 TTL 100 ID x WAIT 10",
            "ERR WAIT needs QUEUE: a ticket is kept in the ticket key",
        ),
        (
            "RL.ACQUIRE {b} LIMIT 1 TTL 100 QUEUE {b}:t WAIT 10",
            "ERR WAIT needs ID: a ticket is held under the caller's lease id",
        ),
        (
            "RL.ACQUIRE {b} LIMIT 1 TTL 100 ID x SHADOW QUEUE {b}:t WAIT 10",
            "ERR WAIT cannot be combined with SHADOW: a shadow call never waits",
        ),
        (
            "RL.ACQUIRE {b} LIMIT 1 TTL 100 ID x QUEUE {b}:t WAIT 0",
            "ERR WAIT must be an integer from 1 to 9223372036854775807",
        ),
        (
            "RL.ACQUIRE {b} LIMIT 1 TTL 100 ID x QUEUE {b}:t WAIT -1",
            "ERR WAIT must be an integer from 1 to 9223372036854775807",
        ),
        (
            "RL.ACQUIRE {b} LIMIT 1 TTL 100 ID x QUEUE {b}:t WAIT x",
            "ERR WAIT must be an integer from 1 to 9223372036854775807",
        ),
        (
            "RL.ACQUIRE {b} LIMIT 1 TTL 100 ID x QUEUE {b}:t WAIT 1 WAIT 2",
            "ERR WAIT is given more than once",
        ),
        (
            "RL.ACQUIRE {b} LIMIT 1 TTL 100 ID x QUEUE {b}:t WAIT 9007199254740992",
            "ERR WAIT is too large: the ticket deadline passes 2^53 ms",
        ),
        (
            "RL.ACQUIRE {b} LIMIT 1 TTL 100 ID x QUEUE {b} WAIT 10",
            "ERR QUEUE must name a key other than the lease key",
        ),
        (
            "RL.ACQUIRE {b} LIMIT 1 TTL 100 ID x QUEUE {b}:s WAIT 10",
            "WRONGTYPE Operation against a key holding the wrong kind of value",
        ),
        (
            "RL.ACQUIRE {b} LIMIT 1 TTL 100 ID x QUEUE {b}:c WAIT 10",
            "ERR ticket key holds a score that is not a ticket",
        ),
        (
            "RL.RELEASE {b} x QUEUE {b}",
            "ERR QUEUE must name a key other than the lease key",
        ),
        ("RL.RELEASE {b} x TTL {b}:t", "ERR unknown option 'TTL'"),
        (
            "RL.RELEASE {b} x QUEUE {b}:s",
            "WRONGTYPE Operation against a key holding the wrong kind of value",
        ),
    ];
    for backend in BOTH {
        let server = backend.start();
        let mut con = server.client();
        cmd_raw(&mut con, &["SET", "{b}:s", "x"]);
        cmd_raw(&mut con, &["ZADD", "{b}:c", "-1.5", "d:y", "1", "q:y"]);
        cmd_raw(&mut con, &["ZADD", "{b}", "99999999999999", "h"]);
        let keys = ["{b}", "{b}:t", "{b}:s", "{b}:c"];
        let before: Vec<_> = keys.iter().map(|k| dump(&mut con, k)).collect();
        for (line, want) in cases {
            let got = call(backend, &mut con, line);
            assert_eq!(
                error_text(&got).as_deref(),
                Some(*want),
                "{backend:?} {line}"
            );
            let now: Vec<_> = keys.iter().map(|k| dump(&mut con, k)).collect();
            assert_eq!(now, before, "{backend:?} {line} wrote");
        }
    }
}

/// The 256-argument bound counts what the module's call holds: the ticket
/// key once (QUEUE's value), META's word and hash when given. At 256 words
/// the call is judged on (its repeated SHADOW refused), at 257 it is too
/// long, on both backends alike, with or without META and QUEUE.
#[test]
fn the_argument_bound_counts_the_ticket_key_once_on_both_backends() {
    let heads: [&[&str]; 3] = [
        &["RL.ACQUIRE", "{n}", "QUEUE", "{n}:t"],
        &["RL.ACQUIRE", "{n}", "META", "{n}:m", "QUEUE", "{n}:t"],
        &["RL.ACQUIRE", "{n}", "META", "{n}:m"],
    ];
    for backend in BOTH {
        let server = backend.start();
        let mut con = server.client();
        for head in heads {
            for (argc, want) in [
                (256, "ERR SHADOW is given more than once"),
                (257, "ERR too many arguments"),
            ] {
                let words = [head, &vec!["SHADOW"; argc - head.len()][..]].concat();
                assert_eq!(words.len(), argc);
                let got = backend.raw(&mut con, &words);
                assert_eq!(
                    error_text(&got).as_deref(),
                    Some(want),
                    "{backend:?} {head:?} + SHADOW to {argc} words"
                );
            }
        }
        let keys = cmd_raw(&mut con, &["DBSIZE"]);
        assert_eq!(keys, Value::Int(0), "{backend:?} wrote");
    }
}

/// With both a META hash and a ticket key (the library's three keys), the
/// policy is the META hash's, on both backends.
#[test]
fn a_queued_acquire_reads_its_meta_hash() {
    for backend in BOTH {
        let server = backend.start();
        let mut con = server.client();
        cmd_raw(&mut con, &split("HSET {m}:m max 1 ttl 60000"));
        let acq = |con: &mut Connection, id: &str| {
            reply(&call(
                backend,
                con,
                &format!("RL.ACQUIRE {{m}} META {{m}}:m ID {id} QUEUE {{m}}:t"),
            ))
        };
        let first = acq(&mut con, "a");
        assert_eq!(
            (first.0, first.1, first.2),
            (1, 1, 1),
            "{backend:?} {first:?}"
        );
        let second = acq(&mut con, "b");
        assert_eq!(
            (second.0, second.1, second.2, second.4.clone()),
            (0, 1, 1, None),
            "{backend:?} {second:?}"
        );
        assert!(second.3 > 59_000, "{backend:?} retry {second:?}");
    }
}

#[test]
fn module_only_wait_with_block_is_refused() {
    let server = Backend::Module.start();
    let mut con = server.client();
    let got = cmd_raw(
        &mut con,
        &split("RL.ACQUIRE k LIMIT 1 TTL 100 ID x QUEUE t WAIT 10 BLOCK 10"),
    );
    assert_eq!(
        error_text(&got).as_deref(),
        Some("ERR WAIT cannot be combined with BLOCK: BLOCK waits in the server, a ticket on the caller's side")
    );
}

#[test]
fn a_replica_and_an_aof_restart_agree_after_ticket_traffic() {
    for backend in BOTH {
        let primary = backend.start_with(&["--appendonly", "yes", "--appendfsync", "always"]);
        let replica = backend.start();
        replica.replica_of(&primary);
        let mut con = primary.client();
        let acq = |con: &mut Connection, rest: &str| {
            call(
                backend,
                con,
                &format!("RL.ACQUIRE {{r}} LIMIT 2 TTL 60000 {rest} QUEUE {{r}}:t"),
            )
        };
        acq(&mut con, "ID h1");
        acq(&mut con, "ID h2");
        for w in ["a", "b", "c", "d"] {
            acq(&mut con, &format!("ID {w} WAIT 60000"));
        }
        acq(&mut con, "ID e WAIT 1");
        call(backend, &mut con, "RL.RELEASE {r} h1 QUEUE {r}:t");
        call(backend, &mut con, "RL.RELEASE {r} c QUEUE {r}:t");
        thread::sleep(Duration::from_millis(5));
        acq(&mut con, "ID a WAIT 60000");
        acq(&mut con, "ID b WAIT 60000");
        wait_replica_offset(&primary, &replica);
        let mut rcon = replica.client();
        for key in ["{r}", "{r}:t"] {
            assert_eq!(
                zrange(&mut con, key),
                zrange(&mut rcon, key),
                "{backend:?} {key}"
            );
            assert_eq!(
                common::pexpiretime(&mut con, key),
                common::pexpiretime(&mut rcon, key),
                "{backend:?} {key}"
            );
        }
        let tickets = zrange(&mut con, "{r}:t");
        assert_eq!(
            tickets
                .iter()
                .filter(|(m, _)| m.starts_with("q:"))
                .map(|(m, _)| m.as_str())
                .collect::<Vec<_>>(),
            ["q:b", "q:d"],
            "{backend:?}"
        );
        let state = (zrange(&mut con, "{r}"), zrange(&mut con, "{r}:t"));
        drop(con);
        let mut primary = primary;
        backend.restart(&mut primary);
        let mut con = primary.client();
        assert_eq!(
            (zrange(&mut con, "{r}"), zrange(&mut con, "{r}:t")),
            state,
            "{backend:?} AOF"
        );
    }
}

/// One contention run: 8 workers, LIMIT 2; a holder keeps its lease
/// `hold_ms` and then releases it (`release`) or lets it expire (TTL =
/// `hold_ms`). Returns (calls per acquisition, idle ms per handover,
/// inversions).
fn contend(backend: Backend, release: bool) -> (f64, Vec<i64>, usize) {
    const WORKERS: usize = 8;
    let hold_ms: i64 = 80;
    let server = backend.start();
    let mut setup = server.client();
    let ttl = if release { 60_000 } else { hold_ms };
    let line = move |id: &str| {
        format!("RL.ACQUIRE {{w}} LIMIT 2 TTL {ttl} ID {id} QUEUE {{w}}:t WAIT 2000")
    };
    // Two holders fill the slots, then each worker takes its ticket, in
    // order: its place is its index.
    let mut holder_ends = Vec::new();
    for h in ["h0", "h1"] {
        assert_eq!(reply(&call(backend, &mut setup, &line(h))).0, 1);
        let end: i64 = redis::cmd("ZSCORE")
            .arg(&["{w}", h])
            .query(&mut setup)
            .unwrap();
        holder_ends.push(end);
    }
    let mut conns = Vec::new();
    for i in 0..WORKERS {
        let mut con = server.client();
        let r = reply(&call(backend, &mut con, &line(&format!("w{i}"))));
        assert_eq!((r.0, r.5), (0, i as i64));
        conns.push(con);
    }
    let admitted: Arc<Mutex<Vec<(usize, i64)>>> = Arc::default();
    let calls: Arc<Mutex<usize>> = Arc::new(Mutex::new(WORKERS));
    let start = Instant::now();
    let mut handles = Vec::new();
    for (i, mut con) in conns.into_iter().enumerate() {
        let (admitted, calls) = (admitted.clone(), calls.clone());
        let sub = server.client();
        let line = line(&format!("w{i}"));
        handles.push(thread::spawn(move || {
            let mut sub = sub;
            let mut pubsub = sub.as_pubsub();
            pubsub.subscribe("{w}:t").unwrap();
            let mut sleep_ms = 1;
            loop {
                pubsub
                    .set_read_timeout(Some(Duration::from_millis(sleep_ms.max(1) as u64)))
                    .unwrap();
                let _ = pubsub.get_message();
                *calls.lock().unwrap() += 1;
                let r = reply(&call(backend, &mut con, &line));
                if r.0 == 1 {
                    // The lease's deadline - TTL is the server's time of
                    // the admission.
                    let deadline: i64 = redis::cmd("ZSCORE")
                        .arg(&["{w}", &format!("w{i}")])
                        .query(&mut con)
                        .unwrap();
                    admitted.lock().unwrap().push((i, deadline - ttl));
                    break;
                }
                sleep_ms = r.3.min(1000);
                assert!(start.elapsed() < Duration::from_secs(30), "stuck");
            }
            if release {
                thread::sleep(Duration::from_millis(hold_ms as u64));
                let freed = server_time_ms(&mut con);
                *calls.lock().unwrap() += 1;
                let got = call(
                    backend,
                    &mut con,
                    &format!("RL.RELEASE {{w}} w{i} QUEUE {{w}}:t"),
                );
                assert_eq!(common::int(&got), 1);
                Some(freed)
            } else {
                None
            }
        }));
    }
    // The first two holders go too.
    thread::sleep(Duration::from_millis(hold_ms as u64));
    let mut freed: Vec<i64> = Vec::new();
    if release {
        for h in ["h0", "h1"] {
            freed.push(server_time_ms(&mut setup));
            call(
                backend,
                &mut setup,
                &format!("RL.RELEASE {{w}} {h} QUEUE {{w}}:t"),
            );
        }
    }
    for h in handles {
        if let Some(at) = h.join().unwrap() {
            freed.push(at);
        }
    }
    // In the server's order of admission (its clock; ties by ticket), an
    // inversion is an admission made while LIMIT or more earlier tickets
    // still waited: one not among the first `free` tickets, which the
    // rule never admits (LIMIT 2 lets the second ticket go first while
    // both are owed a slot).
    let mut admitted = admitted.lock().unwrap().clone();
    admitted.sort_by_key(|&(i, t)| (t, i));
    let order: Vec<usize> = admitted.iter().map(|&(i, _)| i).collect();
    let inversions = (0..order.len())
        .filter(|&k| {
            let waiting_before = (0..order[k]).filter(|i| !order[..k].contains(i)).count();
            waiting_before >= 2
        })
        .count();
    // Idle: each admission against the moment a slot freed, in order (the
    // k-th admission takes the k-th slot freed): a release's time, or the
    // expiry of the lease admitted two places before (the holders' for the
    // first two).
    let mut times: Vec<i64> = admitted.iter().map(|&(_, t)| t).collect();
    times.sort();
    let slots_freed: Vec<i64> = match release {
        true => {
            freed.sort();
            freed
        }
        false => {
            let mut ends = holder_ends;
            ends.extend(times.iter().map(|t| t + ttl));
            ends.sort();
            ends
        }
    };
    let idle: Vec<i64> = times.iter().zip(&slots_freed).map(|(a, f)| a - f).collect();
    let calls = *calls.lock().unwrap() as f64 / WORKERS as f64;
    (calls, idle, inversions)
}

#[test]
fn eight_workers_contend_for_two_slots_in_ticket_order() {
    for backend in BOTH {
        for release in [true, false] {
            let (calls, idle, inversions) = contend(backend, release);
            let how = if release { "releases" } else { "expiries" };
            let max = idle.iter().max().copied().unwrap_or(0);
            let mean = idle.iter().sum::<i64>() as f64 / idle.len().max(1) as f64;
            println!(
                "lease tickets {backend:?} with {how}: {calls:.2} calls per acquisition, \
                 idle slot after a {how}: mean {mean:.1} ms, max {max} ms ({idle:?}), inversions {inversions}"
            );
            assert_eq!(inversions, 0, "{backend:?} {how}");
            assert!(
                idle.iter().all(|&ms| ms >= -1),
                "{backend:?} {how} {idle:?}"
            );
            assert!(max < 1000, "{backend:?} {how} {idle:?}");
        }
    }
}
