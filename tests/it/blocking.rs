//! BLOCK on RL.ADMIT and RL.ACQUIRE (module only: the FUNCTION library
//! cannot block and refuses the option, see bad_input): callers wait,
//! first come first served per key, are woken by the head's timer or a
//! release, time out with the ordinary refusal, leave the queue when they
//! go away, never block where Valkey's own blocking commands do not, and
//! replicate only the effect of their admission.
//!
//! Each waiter runs on its own thread with its own connection; the main
//! thread waits until the server has run its call (CLIENT LIST names it as
//! the connection's last command) before the next one is sent, so arrival
//! order is the order of sending.
//!
//! Times are the server's: each waiter's connection sends TIME right behind
//! its call, which the server runs as soon as the call is answered (in the
//! same event-loop cycle), so that TIME is no earlier than the answer by
//! the module's clock. A busy machine only makes the server's timer late:
//! lower bounds (never early) are exact on these times, upper bounds are
//! generous and over a whole run, and "woken by X, not by a timer" is
//! proved by INFO's timer count, not by a tight latency.

use std::io::Write;
use std::net::TcpStream;
use std::thread::{self, JoinHandle};
use std::time::Duration;

use redis::{Connection, Value};

use crate::common::{
    cmd_int, cmd_raw, error_text, info_field, pipeline, show, time_us, wait_replica_offset,
    wait_until, Server,
};

/// An exhausted GCRA limiter admitting one call every 500 ms.
const PACED: &[&str] = &["ALGO", "gcra", "LIMIT", "2", "WINDOW", "1000", "BURST", "1"];

fn words<'a>(head: &[&'a str], tail: &[&'a str]) -> Vec<String> {
    head.iter().chain(tail).map(|w| w.to_string()).collect()
}

fn blocked(con: &mut Connection) -> i64 {
    info_field(con, "ratelimit", "ratelimit_blocked_clients")
        .and_then(|v| v.parse().ok())
        .unwrap_or(-1)
}

fn info_count(con: &mut Connection, field: &str) -> i64 {
    info_field(con, "ratelimit", field)
        .and_then(|v| v.parse().ok())
        .unwrap_or(-1)
}

fn wait_blocked(con: &mut Connection, n: i64) {
    wait_until(Duration::from_secs(5), &format!("{n} blocked"), || {
        blocked(con) == n
    });
}

/// A call on its own connection and thread, with TIME (and any `then`
/// commands) pipelined behind it.
struct Waiter {
    id: i64,
    handle: JoinHandle<Vec<Value>>,
}

impl Waiter {
    fn send(server: &Server, call: Vec<String>) -> Waiter {
        Waiter::send_then(server, call, vec![])
    }

    fn send_then(server: &Server, call: Vec<String>, then: Vec<Vec<String>>) -> Waiter {
        let mut cmds = vec![call, vec!["TIME".to_string()]];
        cmds.extend(then);
        Waiter::send_all(server, cmds)
    }

    /// `cmds` as they are (no TIME: for a waiter the server disconnects).
    fn send_all(server: &Server, cmds: Vec<Vec<String>>) -> Waiter {
        let mut con = server.client();
        let id = cmd_int(&mut con, &["CLIENT", "ID"]);
        let handle = thread::spawn(move || {
            pipeline(&mut con, &cmds).unwrap_or_else(|e| panic!("a waiter's connection: {e}"))
        });
        Waiter { id, handle }
    }

    /// Its reply and the server's time (µs) just after it was answered.
    fn join(self) -> (Value, i64) {
        let mut replies = self.join_all();
        let at = time_us(&replies[1]);
        (replies.swap_remove(0), at)
    }

    /// The call's reply, TIME's, then those of the `then` commands.
    fn join_all(self) -> Vec<Value> {
        self.handle.join().expect("a waiter thread")
    }
}

/// The server's time (µs) and the reply of `call` run right after it.
fn timed(con: &mut Connection, call: &[&str]) -> (i64, Value) {
    let mut replies = pipeline(con, &[vec!["TIME"], call.to_vec()]).expect("TIME and a call");
    let reply = replies.pop().unwrap();
    (time_us(&replies[0]), reply)
}

/// Whether the server has run the call client `id` sent after CLIENT ID.
fn arrived(con: &mut Connection, id: i64) -> bool {
    let list = cmd_raw(con, &["CLIENT", "LIST", "ID", &id.to_string()]);
    let Value::BulkString(line) = list else {
        panic!("CLIENT LIST: {}", show(&list))
    };
    let line = String::from_utf8_lossy(&line);
    let cmd = line.split(' ').find_map(|f| f.strip_prefix("cmd="));
    !matches!(cmd, Some("client|id"))
}

/// Sends each call in turn, each once the server has run the one before
/// it (blocked it, or already answered it: a paced limiter may admit the
/// head while later ones are still being sent).
fn queue_up(server: &Server, con: &mut Connection, calls: Vec<Vec<String>>) -> Vec<Waiter> {
    let calls = calls.into_iter().map(|c| (c, vec![])).collect();
    queue_up_then(server, con, calls)
}

/// `queue_up`, each call with its own `then` commands behind it.
fn queue_up_then(
    server: &Server,
    con: &mut Connection,
    calls: Vec<(Vec<String>, Vec<Vec<String>>)>,
) -> Vec<Waiter> {
    let mut waiters = Vec::new();
    for (call, then) in calls {
        waiters.push(wait_arrived(con, Waiter::send_then(server, call, then)));
    }
    waiters
}

/// `waiter`, once the server has run its call.
fn wait_arrived(con: &mut Connection, waiter: Waiter) -> Waiter {
    wait_until(Duration::from_secs(10), "a waiter's call to arrive", || {
        arrived(con, waiter.id)
    });
    thread::sleep(Duration::from_millis(10));
    waiter
}

fn first_int(v: &Value) -> i64 {
    match v {
        Value::Array(items) => match items.first() {
            Some(Value::Int(n)) => *n,
            _ => panic!("{}", show(v)),
        },
        _ => panic!("{}", show(v)),
    }
}

fn lease_id(v: &Value) -> String {
    match v {
        Value::Array(items) => match items.last() {
            Some(Value::BulkString(id)) => String::from_utf8_lossy(id).into_owned(),
            _ => panic!("no lease id in {}", show(v)),
        },
        _ => panic!("{}", show(v)),
    }
}

// 8 clients rather than the issue's 20: the same order and spacing, in
// 4 s of wall time instead of 10.
//
// GCRA with a burst of 1 admits only once its TAT has passed, and each
// admission moves the TAT 500 ms past it: the i-th waiter is admitted no
// sooner than the first admission + i x 500 ms by the server's clock,
// however late the timer fires on a loaded machine. That, and the order,
// are exact; the whole run is bounded generously (a stall of the server
// delays every admission after it; one of the test process, as in the
// 3 s stall that once answered three waiters together, moves no server
// time at all).
#[test]
fn module_only_waiters_are_admitted_in_arrival_order_one_every_interval() {
    const INTERVAL_US: i64 = 500_000;
    let server = Server::start();
    let mut con = server.client();
    let first: Vec<String> = words(&["RL.ADMIT", "k"], PACED);
    let first: Vec<&str> = first.iter().map(String::as_str).collect();
    let (start, admitted) = timed(&mut con, &first);
    assert_eq!(first_int(&admitted), 1);
    let call = words(&["RL.ADMIT", "k"], &[PACED, &["BLOCK", "20000"]].concat());
    let waiters = queue_up(&server, &mut con, vec![call; 8]);
    // A call without BLOCK while they wait: refused, told at least the
    // head's wait, and it consumes nothing.
    let plain: Vec<String> = words(&["RL.ADMIT", "k"], PACED);
    let plain: Vec<&str> = plain.iter().map(String::as_str).collect();
    let refused = cmd_raw(&mut con, &plain);
    match &refused {
        Value::Array(v) => {
            assert_eq!(v[0], Value::Int(0), "{}", show(&refused));
            assert!(
                matches!(v[3], Value::Int(ms) if ms > 0 && ms <= 500),
                "{}",
                show(&refused)
            );
        }
        _ => panic!("{}", show(&refused)),
    }
    // Each waiter's admission, µs after the first admission (server clock).
    let after: Vec<i64> = waiters
        .into_iter()
        .map(|w| {
            let (reply, at) = w.join();
            assert_eq!(first_int(&reply), 1, "{}", show(&reply));
            at - start
        })
        .collect();
    let ms: Vec<i64> = after.iter().map(|us| us / 1000).collect();
    println!("8 waiters, 500 ms apart: admitted at {ms:?} ms (server clock)");
    assert!(
        after.windows(2).all(|p| p[0] < p[1]),
        "answered out of arrival order: {ms:?} ms"
    );
    for (i, &us) in after.iter().enumerate() {
        let due = (i as i64 + 1) * INTERVAL_US;
        assert!(
            us >= due,
            "waiter {i} admitted {us} µs in, before {due}: {ms:?}"
        );
    }
    assert!(
        after[7] < 8 * INTERVAL_US + 10_000_000,
        "the 8 took {} ms",
        after[7] / 1000
    );
    assert_eq!(info_count(&mut con, "ratelimit_waits_served"), 8);
    assert_eq!(blocked(&mut con), 0);
    // The timer fires at each head's time, not more often: about once per
    // admission (a fire a ms early for the cached clock at most doubles
    // it; a late one still fires once).
    let fires = info_count(&mut con, "ratelimit_wait_timer_fires");
    println!("8 admissions after waiting: the timer fired {fires} times");
    assert!(
        (8..=16).contains(&fires),
        "{fires} timer fires for 8 admissions"
    );
}

// The server times a wait out by its own clock: TIME before the call and
// TIME behind it are at least BLOCK apart (exact), and the answer comes
// (a refusal, not a hang) within a generous bound.
#[test]
fn module_only_a_wait_times_out_with_the_refusal_and_consumes_nothing() {
    let server = Server::start();
    let mut con = server.client();
    let policy = ["LIMIT", "1", "WINDOW", "2000"];
    let first = cmd_raw(&mut con, &[&["RL.ADMIT", "t"][..], &policy].concat());
    assert_eq!(first_int(&first), 1);
    let before = cmd_raw(&mut con, &["GET", "t"]);
    let call = [&["RL.ADMIT", "t"][..], &policy, &["BLOCK", "300"]].concat();
    let replies = pipeline(&mut con, &[vec!["TIME"], call, vec!["TIME"]]).unwrap();
    let took = time_us(&replies[2]) / 1000 - time_us(&replies[0]) / 1000;
    assert_eq!(first_int(&replies[1]), 0, "{}", show(&replies[1]));
    println!("BLOCK 300: answered after {took} ms (server clock)");
    assert!((300..5000).contains(&took), "answered after {took} ms");
    assert_eq!(cmd_raw(&mut con, &["GET", "t"]), before);
    assert_eq!(info_count(&mut con, "ratelimit_waits_timed_out"), 1);
    assert_eq!(blocked(&mut con), 0);
}

// Woken by the release itself, not by a timer or a poll: the waiters'
// leases and timeouts are far off, so nothing else could admit them, and
// INFO's timer count stays still while the releases are answered (that,
// not a latency bound, is what a loaded machine cannot break). The expired
// holder's successor is admitted no sooner than its deadline (exact, by the
// server's clock) and by the timer, within a generous bound.
#[test]
fn module_only_each_release_wakes_exactly_the_head_and_an_expired_holder_its_deadline() {
    let server = Server::start();
    let mut con = server.client();
    let holder = cmd_raw(&mut con, &["RL.ACQUIRE", "L", "LIMIT", "1", "TTL", "60000"]);
    let mut holding = lease_id(&holder);
    let calls = (0..5)
        .map(|i| {
            let id = format!("w{i}");
            // w3 holds for 400 ms and never releases.
            let ttl = if i == 3 { "400" } else { "60000" };
            let call = words(
                &["RL.ACQUIRE", "L", "LIMIT", "1", "TTL", ttl, "ID"],
                &[&id, "BLOCK", "30000"],
            );
            (call, vec![words(&["ZSCORE", "L"], &[&id])])
        })
        .collect();
    let mut waiters = queue_up_then(&server, &mut con, calls);
    waiters.reverse();
    let fires = info_count(&mut con, "ratelimit_wait_timer_fires");
    let mut w3_deadline = 0;
    for i in 0..4 {
        let (released, reply) = timed(&mut con, &["RL.RELEASE", "L", &holding]);
        assert_eq!(reply, Value::Int(1));
        let id = format!("w{i}");
        // Its own lease's deadline, read right behind its admission.
        let replies = waiters.pop().unwrap().join_all();
        let (reply, at) = (&replies[0], time_us(&replies[1]));
        assert_eq!(lease_id(reply), id, "{}", show(reply));
        println!(
            "release {i}: the head answered {} µs later (server clock)",
            at - released
        );
        assert!(at >= released, "waiter {i} answered before the release");
        assert_eq!(blocked(&mut con), 4 - i as i64);
        w3_deadline = crate::common::text(&replies[2])
            .and_then(|ms| ms.parse::<i64>().ok())
            .unwrap_or_else(|| panic!("{id}'s deadline: {}", show(&replies[2])));
        holding = id;
    }
    assert_eq!(
        info_count(&mut con, "ratelimit_wait_timer_fires"),
        fires,
        "a timer, not the releases, woke the waiters"
    );
    // w3 holds the slot for 400 ms and never releases: w4 gets it when
    // that lease ends, woken by the timer.
    let (reply, at) = waiters.pop().unwrap().join();
    assert_eq!(lease_id(&reply), "w4", "{}", show(&reply));
    let late = at / 1000 - w3_deadline;
    println!("expired holder: w4 answered {late} ms after the deadline (server clock)");
    assert!(
        (0..10_000).contains(&late),
        "woken {late} ms after the deadline"
    );
    assert!(info_count(&mut con, "ratelimit_wait_timer_fires") > fires);
}

#[test]
fn module_only_200_waiters_do_not_spin_the_server() {
    let server = Server::start();
    let mut con = server.client();
    let policy = ["LIMIT", "1", "WINDOW", "60000"];
    cmd_raw(&mut con, &[&["RL.ADMIT", "s"][..], &policy].concat());
    // BLOCK 5000: room for connecting 200 clients on a busy machine before
    // the 1.5 s measured (server CPU time, which a busy machine does not
    // inflate), all before the first timeout.
    let call = words(
        &["RL.ADMIT", "s"],
        &[&policy[..], &["BLOCK", "5000"]].concat(),
    );
    let waiters: Vec<Waiter> = (0..200)
        .map(|_| Waiter::send(&server, call.clone()))
        .collect();
    wait_blocked(&mut con, 200);
    let cpu = |con: &mut Connection| -> f64 {
        ["used_cpu_sys", "used_cpu_user"]
            .iter()
            .map(|f| info_field(con, "cpu", f).unwrap().parse::<f64>().unwrap())
            .sum()
    };
    let before = cpu(&mut con);
    thread::sleep(Duration::from_millis(1500));
    let used = cpu(&mut con) - before;
    // A busy loop takes 1.5 s of CPU in 1.5 s: under 5% of it is 75 ms.
    let fires = info_count(&mut con, "ratelimit_wait_timer_fires");
    println!(
        "200 waiters, 1.5 s: {:.1} ms of server CPU, {fires} timer fires",
        used * 1000.0
    );
    assert!(used < 0.075, "{used} s of CPU while 200 clients waited");
    for w in waiters {
        assert_eq!(first_int(&w.join().0), 0);
    }
    assert_eq!(info_count(&mut con, "ratelimit_waits_timed_out"), 200);
}

#[test]
fn module_only_killed_disconnected_and_unblocked_waiters_free_their_places() {
    let server = Server::start();
    let mut con = server.client();
    let holder = lease_id(&cmd_raw(
        &mut con,
        &["RL.ACQUIRE", "G", "LIMIT", "1", "TTL", "60000"],
    ));
    let call = |id: &str| {
        words(
            &["RL.ACQUIRE", "G", "LIMIT", "1", "TTL", "60000", "ID"],
            &[id, "BLOCK", "30000"],
        )
    };
    let killed = queue_up(&server, &mut con, vec![call("killed")])
        .pop()
        .unwrap();
    // One that hangs up: a raw socket, closed while it waits.
    let mut gone = TcpStream::connect(("127.0.0.1", server.port)).unwrap();
    let resp: String = call("gone")
        .iter()
        .fold(format!("*{}\r\n", call("gone").len()), |acc, w| {
            acc + &format!("${}\r\n{w}\r\n", w.len())
        });
    gone.write_all(resp.as_bytes()).unwrap();
    wait_blocked(&mut con, 2);
    let unblocked = queue_up(&server, &mut con, vec![call("unblocked")])
        .pop()
        .unwrap();
    let last = queue_up(&server, &mut con, vec![call("last")])
        .pop()
        .unwrap();
    assert_eq!(blocked(&mut con), 4);
    let killed_id = killed.id.to_string();
    assert_eq!(cmd_int(&mut con, &["CLIENT", "KILL", "ID", &killed_id]), 1);
    drop(gone);
    let unblocked_id = unblocked.id.to_string();
    assert_eq!(cmd_int(&mut con, &["CLIENT", "UNBLOCK", &unblocked_id]), 1);
    // CLIENT UNBLOCK answers as a timeout does: the refusal.
    assert_eq!(first_int(&unblocked.join().0), 0);
    // The killed client's connection is gone: its thread sees an error.
    assert!(killed.handle.join().is_err());
    wait_blocked(&mut con, 1);
    // The release wakes the one left, itself: no timer fires (the holder's
    // lease and the timeouts are far off), however slow the machine.
    let fires = info_count(&mut con, "ratelimit_wait_timer_fires");
    let (released, reply) = timed(&mut con, &["RL.RELEASE", "G", &holder]);
    assert_eq!(reply, Value::Int(1));
    let (reply, at) = last.join();
    assert_eq!(lease_id(&reply), "last", "{}", show(&reply));
    assert!(at >= released);
    assert_eq!(info_count(&mut con, "ratelimit_wait_timer_fires"), fires);
    assert_eq!(blocked(&mut con), 0);
}

#[test]
fn module_only_block_does_not_block_in_multi_scripts_or_functions() {
    let server = Server::start();
    let mut con = server.client();
    let call = [
        "RL.ADMIT", "n", "LIMIT", "1", "WINDOW", "60000", "BLOCK", "10000",
    ];
    assert_eq!(first_int(&cmd_raw(&mut con, &call)), 1);
    // Nothing waited: no wait ended (INFO), and the server's clock moved
    // less than one BLOCK over all of it (a wait would take 10 s at least,
    // a stall on a busy machine far less).
    let start = crate::common::server_time_ms(&mut con);
    assert_eq!(cmd_raw(&mut con, &["MULTI"]), Value::Okay);
    cmd_raw(&mut con, &call);
    let exec = cmd_raw(&mut con, &["EXEC"]);
    assert!(
        matches!(&exec, Value::Array(v) if first_int(&v[0]) == 0),
        "{}",
        show(&exec)
    );
    let script =
        "return server.call('RL.ADMIT', KEYS[1], 'LIMIT', '1', 'WINDOW', '60000', 'BLOCK', '10000')";
    let eval = cmd_raw(&mut con, &["EVAL", script, "1", "n"]);
    assert_eq!(first_int(&eval), 0, "{}", show(&eval));
    let library = format!(
        "#!lua name=blk\nserver.register_function('blk', function(keys) {} end)",
        script.replace("KEYS[1]", "keys[1]")
    );
    assert!(error_text(&cmd_raw(&mut con, &["FUNCTION", "LOAD", &library])).is_none());
    let fcall = cmd_raw(&mut con, &["FCALL", "blk", "1", "n"]);
    assert_eq!(first_int(&fcall), 0, "{}", show(&fcall));
    let lease = [
        "RL.ACQUIRE",
        "nl",
        "LIMIT",
        "1",
        "TTL",
        "60000",
        "BLOCK",
        "10000",
    ];
    cmd_raw(&mut con, &lease);
    assert_eq!(cmd_raw(&mut con, &["MULTI"]), Value::Okay);
    cmd_raw(&mut con, &lease);
    let exec = cmd_raw(&mut con, &["EXEC"]);
    assert!(
        matches!(&exec, Value::Array(v) if first_int(&v[0]) == 0),
        "{}",
        show(&exec)
    );
    assert_eq!(blocked(&mut con), 0);
    assert_eq!(info_count(&mut con, "ratelimit_waits_timed_out"), 0);
    assert_eq!(info_count(&mut con, "ratelimit_waits_served"), 0);
    let took = crate::common::server_time_ms(&mut con) - start;
    assert!(took < 10_000, "{took} ms");
}

/// Every key's type, value (a string, or a sorted set's members and
/// scores) and absolute expiry.
fn state(con: &mut Connection) -> Vec<(String, String, i64)> {
    let mut keys: Vec<String> = redis::cmd("KEYS").arg("*").query(con).unwrap();
    keys.sort();
    keys.into_iter()
        .map(|k| {
            let kind: String = redis::cmd("TYPE").arg(&k).query(con).unwrap();
            let value = match kind.as_str() {
                "zset" => show(&cmd_raw(con, &["ZRANGE", &k, "0", "-1", "WITHSCORES"])),
                _ => show(&cmd_raw(con, &["GET", &k])),
            };
            let at = cmd_int(con, &["PEXPIRETIME", &k]);
            (k, value, at)
        })
        .collect()
}

#[test]
fn module_only_replica_and_aof_see_only_the_admissions_and_failover_unblocks() {
    let mut primary = Server::start_with(&["--appendonly", "yes", "--appendfsync", "always"]);
    let replica = Server::start();
    replica.replica_of(&primary);
    let mut con = primary.client();
    // Rate limits: 4 waiters on a token bucket refilling one every 300 ms; leases: 3 waiters on
    // one slot, released in turn.
    let rate = ["ALGO", "token", "LIMIT", "2", "WINDOW", "600"];
    for _ in 0..2 {
        cmd_raw(&mut con, &[&["RL.ADMIT", "r"][..], &rate].concat());
    }
    let call = words(
        &["RL.ADMIT", "r"],
        &[&rate[..], &["BLOCK", "5000"]].concat(),
    );
    for w in queue_up(&primary, &mut con, vec![call; 4]) {
        assert_eq!(first_int(&w.join().0), 1);
    }
    let first = lease_id(&cmd_raw(
        &mut con,
        &["RL.ACQUIRE", "q", "LIMIT", "1", "TTL", "60000"],
    ));
    let lease = |i: usize| {
        words(
            &["RL.ACQUIRE", "q", "LIMIT", "1", "TTL", "60000", "ID"],
            &[&format!("l{i}"), "BLOCK", "5000"],
        )
    };
    let mut lease_waiters = queue_up(&primary, &mut con, (0..3).map(lease).collect());
    lease_waiters.reverse();
    let mut holding = first;
    for i in 0..3 {
        cmd_raw(&mut con, &["RL.RELEASE", "q", &holding]);
        assert_eq!(
            lease_id(&lease_waiters.pop().unwrap().join().0),
            format!("l{i}")
        );
        holding = format!("l{i}");
    }
    wait_replica_offset(&primary, &replica);
    let held = state(&mut con);
    assert_eq!(state(&mut replica.client()), held, "replica");
    let aof = crate::common::aof_commands(&primary.dir);
    assert!(
        aof.iter().all(|c| !c[0].to_uppercase().starts_with("RL.")),
        "the AOF holds a module command: {aof:?}"
    );
    // An AOF restart gives back the same state, but for keys that
    // expired meanwhile.
    primary.restart();
    let mut con = primary.client();
    let now = crate::common::server_time_ms(&mut con);
    let live: Vec<_> = held
        .into_iter()
        .filter(|(_, _, at)| *at < 0 || *at > now + 50)
        .collect();
    let mut after = state(&mut con);
    after.retain(|(k, _, _)| live.iter().any(|(h, _, _)| h == k));
    assert_eq!(after, live, "AOF restart");
    // A waiter when the primary becomes a replica: the error BLPOP gets.
    let lease = |i: usize| {
        words(
            &["RL.ACQUIRE", "q", "LIMIT", "1", "TTL", "60000", "ID"],
            &[&format!("l{i}"), "BLOCK", "5000"],
        )
    };
    // No TIME behind it: the server closes the connection after its error.
    let waiter = wait_arrived(&mut con, Waiter::send_all(&primary, vec![lease(9)]));
    let port = replica.port.to_string();
    cmd_raw(&mut replica.client(), &["REPLICAOF", "NO", "ONE"]);
    cmd_raw(&mut con, &["REPLICAOF", "127.0.0.1", &port]);
    let reply = waiter.join_all().remove(0);
    let text = error_text(&reply).unwrap_or_else(|| show(&reply));
    assert!(text.starts_with("UNBLOCKED"), "{text}");
}

// Never early, by the server's clock: the head no sooner than its two
// tokens (600 ms after the bucket was emptied), the one behind it no
// sooner than a third (900 ms); both within a generous bound. The reset
// wakes its waiter itself: on a bucket refilling once a minute nothing
// else could admit it before its BLOCK ends, and the timer stays still.
#[test]
fn module_only_a_costly_head_holds_back_the_rest_and_a_reset_wakes_it() {
    let server = Server::start();
    let mut con = server.client();
    // A token bucket of 2, refilling one every 300 ms, emptied.
    let bucket = ["ALGO", "token", "LIMIT", "2", "WINDOW", "600"];
    let call = |cost: &str| {
        words(
            &["RL.ADMIT", "c"],
            &[&bucket[..], &["COST", cost, "BLOCK", "10000"]].concat(),
        )
    };
    let (emptied_at, emptied) = timed(
        &mut con,
        &[&["RL.ADMIT", "c"][..], &bucket, &["COST", "2"]].concat(),
    );
    assert_eq!(first_int(&emptied), 1);
    let waiters = queue_up(&server, &mut con, vec![call("2"), call("1")]);
    let mut times = Vec::new();
    for w in waiters {
        let (reply, at) = w.join();
        assert_eq!(first_int(&reply), 1, "{}", show(&reply));
        times.push(at - emptied_at);
    }
    println!("COST 2 then COST 1: admitted {times:?} µs after the bucket emptied (server clock)");
    // COST 2 needs two tokens (600 ms); COST 1 behind it, which one token
    // (300 ms) would have admitted, waits for it and then one more.
    assert!(times[0] >= 600_000, "{times:?}");
    assert!(times[1] >= 900_000, "{times:?}");
    assert!(times[1] < 10_000_000, "{times:?}");
    // RL.RESET empties the limiter: the head is admitted at once.
    let slow = ["ALGO", "token", "LIMIT", "2", "WINDOW", "120000"];
    let slow_call = |cost: &str| {
        words(
            &["RL.ADMIT", "s"],
            &[&slow[..], &["COST", cost, "BLOCK", "30000"]].concat(),
        )
    };
    let first = cmd_raw(
        &mut con,
        &[&["RL.ADMIT", "s"][..], &slow, &["COST", "2"]].concat(),
    );
    assert_eq!(first_int(&first), 1);
    let waiter = queue_up(&server, &mut con, vec![slow_call("1")])
        .pop()
        .unwrap();
    let fires = info_count(&mut con, "ratelimit_wait_timer_fires");
    let (reset, reply) = timed(&mut con, &["RL.RESET", "s"]);
    assert_eq!(reply, Value::Int(1));
    let (reply, at) = waiter.join();
    assert_eq!(first_int(&reply), 1, "{}", show(&reply));
    assert!(at >= reset);
    assert_eq!(info_count(&mut con, "ratelimit_wait_timer_fires"), fires);
}

/// A slot migrated away while callers wait on a key in it, by the classic
/// procedure or by Valkey 9's atomic `CLUSTER MIGRATESLOTS`: each waiter
/// is answered with the redirect BLPOP gets (-MOVED to the new owner), and
/// none is served on the source when the key leaves it.
#[test]
fn module_only_a_migrated_slot_redirects_its_waiters() {
    for atomic in [false, true] {
        migrated_slot_redirects_its_waiters(atomic);
    }
}

fn migrated_slot_redirects_its_waiters(atomic: bool) {
    use crate::common::cluster::{redirect, Cluster};
    let c = Cluster::start(2);
    let key = "{mv}lease";
    let slot = c.keyslot(key);
    let src = c.owner_seen_by(0, slot);
    let dst = 1 - src;
    let mut con = c.client(src);
    let held = cmd_raw(&mut con, &["RL.ACQUIRE", key, "LIMIT", "1", "TTL", "60000"]);
    assert_eq!(first_int(&held), 1);
    let mut waiters = Vec::new();
    for i in 0..2 {
        let mut wcon = c.client(src);
        let id = format!("w{i}");
        let call = words(
            &["RL.ACQUIRE", key, "LIMIT", "1", "TTL", "60000", "ID"],
            &[&id, "BLOCK", "20000"],
        );
        waiters.push(thread::spawn(move || {
            let words: Vec<&str> = call.iter().map(String::as_str).collect();
            cmd_raw(&mut wcon, &words)
        }));
        wait_blocked(&mut con, i + 1);
    }
    let s = slot.to_string();
    let ok = |node: usize, args: &[&str]| {
        let v = cmd_raw(&mut c.client(node), args);
        assert!(error_text(&v).is_none(), "{args:?} on {node}: {}", show(&v));
    };
    if atomic {
        ok(
            src,
            &[
                "CLUSTER",
                "MIGRATESLOTS",
                "SLOTSRANGE",
                &s,
                &s,
                "NODE",
                &c.ids[dst],
            ],
        );
    } else {
        ok(dst, &["CLUSTER", "SETSLOT", &s, "IMPORTING", &c.ids[src]]);
        ok(src, &["CLUSTER", "SETSLOT", &s, "MIGRATING", &c.ids[dst]]);
        let port = c.nodes[dst].port.to_string();
        ok(
            src,
            &["MIGRATE", "127.0.0.1", &port, "", "0", "5000", "KEYS", key],
        );
        for node in [dst, src] {
            ok(node, &["CLUSTER", "SETSLOT", &s, "NODE", &c.ids[dst]]);
        }
    }
    for w in waiters {
        let reply = w.join().unwrap();
        assert_eq!(
            redirect(&reply, "MOVED"),
            Some(c.nodes[dst].port),
            "atomic {atomic}: {}",
            show(&reply)
        );
    }
    // The lease moved whole: the holder's, and no waiter's.
    let members: Vec<String> = redis::cmd("ZRANGE")
        .arg(key)
        .arg(0)
        .arg(-1)
        .query(&mut c.client(dst))
        .unwrap();
    assert_eq!(members.len(), 1, "atomic {atomic}: {members:?}");
    assert!(!members[0].starts_with('w'), "atomic {atomic}: {members:?}");
    assert_eq!(blocked(&mut con), 0);
}
