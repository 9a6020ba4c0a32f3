//! Issue 38 on both backends: RESERVE books the caller's slot (in arrival
//! order, one interval apart, never past max_ms or the horizon), plain
//! calls respect bookings, FORCE consumes over the limit (capped at the
//! horizon), and malformed calls get the same error from both, writing
//! nothing.

use crate::common::backend::{Backend, BOTH};
use crate::common::{dump, error_text, info_field, pexpiretime, show, split, Server};
use redis::{Connection, Value};

/// The integers of an RL.ADMIT reply (panics on anything else).
fn ints(reply: &Value) -> Vec<i64> {
    match reply {
        Value::Array(items) => items
            .iter()
            .map(|v| match v {
                Value::Int(n) => *n,
                other => panic!("not an integer: {other:?} in {}", show(reply)),
            })
            .collect(),
        other => panic!("not an array: {}", show(other)),
    }
}

fn admit(backend: Backend, con: &mut Connection, call: &str) -> Vec<i64> {
    ints(&backend.raw(con, &split(call)))
}

/// The call and the server's ms for it, in one MULTI (the clock stands
/// still within it, for the module and the library alike).
fn admit_timed(backend: Backend, con: &mut Connection, call: &str) -> (Vec<i64>, i64) {
    let words = backend.call(&split(call));
    let mut pipe = redis::pipe();
    pipe.atomic().cmd("TIME");
    let mut cmd = redis::cmd(&words[0]);
    for w in &words[1..] {
        cmd.arg(w);
    }
    pipe.add_command(cmd);
    let (time, reply): (Vec<String>, Value) = pipe.query(con).expect("MULTI");
    let ms = time[0].parse::<i64>().unwrap() * 1_000 + time[1].parse::<i64>().unwrap() / 1_000;
    (ints(&reply), ms)
}

/// The calls of this backend's command that reached the server.
fn calls(backend: Backend, con: &mut Connection) -> i64 {
    let field = match backend {
        Backend::Module => "cmdstat_RL.ADMIT",
        Backend::Functions => "cmdstat_fcall",
    };
    info_field(con, "commandstats", field)
        .and_then(|v| v.split(',').next()?.strip_prefix("calls=")?.parse().ok())
        .unwrap_or(0)
}

/// The key's value and absolute expiry.
fn state(con: &mut Connection, key: &str) -> (Option<Vec<u8>>, i64) {
    (dump(con, key), pexpiretime(con, key))
}

/// 12 callers, each on its own connection, book in arrival order 100 ms
/// apart on an exhausted limiter of 10/s with room for one.
fn books_in_arrival_order(backend: Backend, server: &Server, policy: &str) {
    let mut con = server.client();
    let key = format!("order:{}", policy.replace(' ', ":"));
    let first = admit(backend, &mut con, &format!("RL.ADMIT {key} {policy}"));
    assert_eq!(first[0], 1, "{policy}: {first:?}");
    let _: () = redis::cmd("CONFIG")
        .arg("RESETSTAT")
        .query(&mut con)
        .unwrap();
    let mut slots = vec![];
    for caller in 0..12 {
        let mut own = server.client();
        let call = format!("RL.ADMIT {key} {policy} RESERVE 5000");
        let (reply, now_ms) = admit_timed(backend, &mut own, &call);
        assert_eq!(reply.len(), 7, "{backend:?} {policy}: {reply:?}");
        assert_eq!(
            reply[0], 1,
            "{backend:?} {policy} caller {caller}: {reply:?}"
        );
        let (delay, at) = (reply[5], reply[6]);
        assert_eq!(
            delay,
            at - now_ms,
            "{backend:?} {policy}: {reply:?} at {now_ms}"
        );
        assert!(delay > 0, "{backend:?} {policy}: booked ahead: {reply:?}");
        slots.push(at);
    }
    for pair in slots.windows(2) {
        let gap = pair[1] - pair[0];
        assert!((99..=101).contains(&gap), "{backend:?} {policy}: {slots:?}");
    }
    assert_eq!(calls(backend, &mut con), 12, "{backend:?} {policy}");
}

#[test]
fn bookings_follow_arrival_order_one_interval_apart() {
    for backend in BOTH {
        let server = backend.start();
        for policy in [
            "ALGO gcra LIMIT 10 WINDOW 1000 BURST 1",
            "ALGO token LIMIT 10 WINDOW 1000 BURST 1",
            "ALGO leaky LIMIT 10 WINDOW 1000 BURST 0",
        ] {
            books_in_arrival_order(backend, &server, policy);
        }
    }
}

#[test]
fn plain_calls_and_overlong_waits_leave_bookings_standing() {
    for backend in BOTH {
        let server = backend.start();
        let mut con = server.client();
        for algo in ["gcra BURST 1", "token BURST 1", "leaky BURST 0"] {
            let key = format!("stand:{algo}").replace(' ', ":");
            let policy = format!("ALGO {algo} LIMIT 10 WINDOW 1000");
            admit(backend, &mut con, &format!("RL.ADMIT {key} {policy}"));
            for _ in 0..5 {
                let booked = admit(
                    backend,
                    &mut con,
                    &format!("RL.ADMIT {key} {policy} RESERVE 5000"),
                );
                assert_eq!(booked[0], 1, "{backend:?} {algo}: {booked:?}");
            }
            let before = state(&mut con, &key);
            // A plain call is refused with at least the booked wait.
            let plain = admit(backend, &mut con, &format!("RL.ADMIT {key} {policy}"));
            assert_eq!(
                (plain[0], plain.len()),
                (0, 5),
                "{backend:?} {algo}: {plain:?}"
            );
            assert!(plain[3] >= 400, "{backend:?} {algo}: {plain:?}");
            assert_eq!(state(&mut con, &key), before, "{backend:?} {algo}");
            // Beyond max_ms: refused, -1 -1, nothing written.
            let short = admit(
                backend,
                &mut con,
                &format!("RL.ADMIT {key} {policy} RESERVE 100"),
            );
            assert_eq!(
                (short[0], short[5], short[6]),
                (0, -1, -1),
                "{backend:?} {algo}: {short:?}"
            );
            assert_eq!(state(&mut con, &key), before, "{backend:?} {algo}");
        }
        // Beyond the horizon (META field max_reserve_ms 250): refused.
        let _: () = redis::cmd("HSET")
            .arg(&[
                "m",
                "max",
                "10",
                "duration",
                "1000",
                "algorithm",
                "gcra",
                "burst",
                "1",
            ])
            .arg(&["max_reserve_ms", "250"])
            .query(&mut con)
            .unwrap();
        let mut booked = 0;
        for _ in 0..6 {
            let reply = admit(backend, &mut con, "RL.ADMIT h META m RESERVE 60000");
            if reply[0] == 1 {
                booked += 1;
            } else {
                assert_eq!((reply[5], reply[6]), (-1, -1), "{backend:?}: {reply:?}");
            }
        }
        // Now, then 100 and 200 ms ahead (300 ms of debt: 100 + 250 at most).
        assert_eq!(booked, 3, "{backend:?}");
    }
}

#[test]
fn force_consumes_over_the_limit_up_to_the_horizon() {
    for backend in BOTH {
        let server = backend.start();
        let mut con = server.client();
        // The windows: the count grows past the limit, GET shows it.
        let fixed = admit(
            backend,
            &mut con,
            "RL.ADMIT f LIMIT 2 WINDOW 60000 COST 5 FORCE",
        );
        assert_eq!(&fixed[..3], &[0, 2, 0], "{backend:?}: {fixed:?}");
        let got: Option<String> = redis::cmd("GET").arg("f").query(&mut con).unwrap();
        assert_eq!(got.as_deref(), Some("5"), "{backend:?}");
        let more = admit(backend, &mut con, "RL.ADMIT f LIMIT 2 WINDOW 60000 FORCE");
        assert_eq!(more[0], 0);
        let got: Option<String> = redis::cmd("GET").arg("f").query(&mut con).unwrap();
        assert_eq!(got.as_deref(), Some("6"), "{backend:?}");
        admit(
            backend,
            &mut con,
            "RL.ADMIT s ALGO sliding LIMIT 2 WINDOW 60000 COST 3 FORCE",
        );
        let got: String = redis::cmd("GET").arg("s").query(&mut con).unwrap();
        assert!(
            got.starts_with("sliding:") && got.ends_with(":3:0"),
            "{backend:?}: {got}"
        );
        // The buckets: the wait grows by the cost.
        let _: () = redis::cmd("HSET")
            .arg(&[
                "g",
                "max",
                "10",
                "duration",
                "1000",
                "algorithm",
                "gcra",
                "burst",
                "2",
            ])
            .arg(&["max_reserve_ms", "1000"])
            .query(&mut con)
            .unwrap();
        let (forced, now_ms) = admit_timed(backend, &mut con, "RL.ADMIT gk META g COST 5 FORCE");
        assert_eq!(&forced[..4], &[0, 2, 0, 400], "{backend:?}: {forced:?}");
        let expiry = pexpiretime(&mut con, "gk");
        assert!(
            (now_ms + 500..=now_ms + 501).contains(&expiry),
            "{backend:?}: {expiry} {now_ms}"
        );
        // At the horizon the charge is capped: 200 ms of bucket + 1000.
        let (capped, now_ms) = admit_timed(backend, &mut con, "RL.ADMIT gk META g COST 1000 FORCE");
        assert_eq!(capped[0], 0);
        assert!(
            (1_099..=1_100).contains(&capped[3]),
            "{backend:?}: {capped:?}"
        );
        let expiry = pexpiretime(&mut con, "gk");
        assert!(
            (now_ms + 1_199..=now_ms + 1_201).contains(&expiry),
            "{backend:?}: {expiry} {now_ms}"
        );
        // Within the limit, FORCE is a plain admission.
        let fits = admit(
            backend,
            &mut con,
            "RL.ADMIT t ALGO token LIMIT 10 WINDOW 1000 FORCE",
        );
        assert_eq!(fits, vec![1, 10, 9, 0, 100], "{backend:?}");
    }
}

#[test]
fn malformed_bookings_get_one_error_and_write_nothing() {
    let cases: &[(&str, &str)] = &[
        ("RL.ADMIT k ALGO gcra LIMIT 5 WINDOW 1000 RESERVE -1", "ERR RESERVE must be an integer from 0 to 9223372036854775807"),
        ("RL.ADMIT k ALGO gcra LIMIT 5 WINDOW 1000 RESERVE 1.5", "ERR RESERVE must be an integer from 0 to 9223372036854775807"),
        ("RL.ADMIT k ALGO gcra LIMIT 5 WINDOW 1000 RESERVE", "ERR RESERVE needs a value"),
        ("RL.ADMIT k ALGO gcra LIMIT 5 WINDOW 1000 RESERVE 1 RESERVE 2", "ERR RESERVE is given more than once"),
        ("RL.ADMIT k ALGO gcra LIMIT 5 WINDOW 1000 RESERVE 1 BLOCK 10", "ERR RESERVE and BLOCK exclude each other: a booking answers at once with its slot"),
        ("RL.ADMIT k ALGO gcra LIMIT 5 WINDOW 1000 BLOCK 10 RESERVE 1", "ERR RESERVE and BLOCK exclude each other: a booking answers at once with its slot"),
        ("RL.ADMIT k ALGO gcra LIMIT 5 WINDOW 1000 SHADOW RESERVE 1", "ERR RESERVE and SHADOW exclude each other: a trial must never make a caller wait"),
        ("RL.ADMIT k ALGO gcra LIMIT 5 WINDOW 1000 RESERVE 1 FORCE", "ERR RESERVE and FORCE exclude each other: a forced charge is consumed now, a booking later"),
        ("RL.ADMIT k ALGO gcra LIMIT 5 WINDOW 1000 FORCE COST 0", "ERR FORCE needs a COST of at least 1"),
        ("RL.ADMIT k ALGO gcra LIMIT 5 WINDOW 1000 FORCE FORCE", "ERR FORCE is given more than once"),
        ("RL.ADMIT k ALGO fixed LIMIT 5 WINDOW 1000 RESERVE 10", "ERR RESERVE needs ALGO gcra, token or leaky: a window's count cannot book a slot in a later window"),
        ("RL.ADMIT k ALGO sliding LIMIT 5 WINDOW 1000 RESERVE 10", "ERR RESERVE needs ALGO gcra, token or leaky: a window's count cannot book a slot in a later window"),
        ("RL.ADMIT k META shadowed RESERVE 10", "ERR RESERVE and META field 'shadow' exclude each other: a trial must never make a caller wait"),
        ("RL.ADMIT k META badhorizon", "ERR META hash field 'max_reserve_ms' must be an integer from 0 to 86400000"),
        ("RL.REFUND k ALGO gcra LIMIT 5 WINDOW 1000 FORCE", "ERR unknown option 'FORCE'"),
        ("RL.REFUND k ALGO gcra LIMIT 5 WINDOW 1000 RESERVE 10", "ERR unknown option 'RESERVE'"),
    ];
    let mut texts = vec![];
    for backend in BOTH {
        let server = backend.start();
        let mut con = server.client();
        let _: () = redis::cmd("HSET")
            .arg(&[
                "shadowed",
                "max",
                "5",
                "duration",
                "1000",
                "algorithm",
                "gcra",
                "shadow",
                "1",
            ])
            .query(&mut con)
            .unwrap();
        let _: () = redis::cmd("HSET")
            .arg(&[
                "badhorizon",
                "max",
                "5",
                "duration",
                "1000",
                "algorithm",
                "gcra",
            ])
            .arg(&["max_reserve_ms", "86400001"])
            .query(&mut con)
            .unwrap();
        for (call, want) in cases {
            let reply = backend.raw(&mut con, &split(call));
            assert_eq!(
                error_text(&reply).as_deref(),
                Some(*want),
                "{backend:?} {call}: {}",
                show(&reply)
            );
            assert_eq!(dump(&mut con, "k"), None, "{backend:?} {call}: wrote");
            texts.push(error_text(&reply));
        }
    }
}

/// Books `n` slots behind an exhausted limiter; their at_ms.
fn book(backend: Backend, con: &mut Connection, key: &str, policy: &str, n: usize) -> Vec<i64> {
    admit(backend, con, &format!("RL.ADMIT {key} {policy}"));
    (0..n)
        .map(|_| {
            let reply = admit(
                backend,
                con,
                &format!("RL.ADMIT {key} {policy} RESERVE 5000"),
            );
            assert_eq!(reply[0], 1, "{backend:?} {policy}: {reply:?}");
            reply[6]
        })
        .collect()
}

#[test]
fn cancelling_gives_back_only_what_later_bookings_do_not_hold() {
    for backend in BOTH {
        let server = backend.start();
        let mut con = server.client();
        for policy in [
            "ALGO gcra LIMIT 10 WINDOW 1000 BURST 1",
            "ALGO token LIMIT 10 WINDOW 1000 BURST 1",
            "ALGO leaky LIMIT 10 WINDOW 1000 BURST 0",
        ] {
            // The last booking cancelled: the next one takes its slot.
            let key = format!("last:{policy}").replace(' ', ":");
            let slots = book(backend, &mut con, &key, policy, 3);
            let last = slots[2];
            let refund = admit(
                backend,
                &mut con,
                &format!("RL.REFUND {key} {policy} AT {last}"),
            );
            assert_eq!(refund.len(), 5, "{backend:?} {policy}: {refund:?}");
            let again = admit(
                backend,
                &mut con,
                &format!("RL.ADMIT {key} {policy} RESERVE 5000"),
            );
            assert!(
                (last..=last + 1).contains(&again[6]),
                "{backend:?} {policy}: {slots:?} {again:?}"
            );
            // A middle one cancelled: nothing a later booking holds comes
            // back, so the next booking still goes after the last.
            let key = format!("middle:{policy}").replace(' ', ":");
            let slots = book(backend, &mut con, &key, policy, 4);
            let before = state(&mut con, &key);
            admit(
                backend,
                &mut con,
                &format!("RL.REFUND {key} {policy} AT {}", slots[1]),
            );
            assert_eq!(
                state(&mut con, &key),
                before,
                "{backend:?} {policy}: gave back"
            );
            let next = admit(
                backend,
                &mut con,
                &format!("RL.ADMIT {key} {policy} RESERVE 5000"),
            );
            assert!(
                next[6] - slots[3] >= 99,
                "{backend:?} {policy}: {slots:?} {next:?}"
            );
            // A slot already reached gives back nothing.
            admit(backend, &mut con, &format!("RL.REFUND {key} {policy} AT 1"));
            assert_ne!(
                state(&mut con, &key),
                before,
                "{backend:?}: the booking above"
            );
            let after = state(&mut con, &key);
            admit(backend, &mut con, &format!("RL.REFUND {key} {policy} AT 1"));
            assert_eq!(state(&mut con, &key), after, "{backend:?} {policy}");
        }
    }
}

#[test]
fn malformed_cancels_get_one_error_and_write_nothing() {
    let cases: &[(&str, &str)] = &[
        ("RL.REFUND k ALGO gcra LIMIT 5 WINDOW 1000 AT", "ERR AT needs a value"),
        ("RL.REFUND k ALGO gcra LIMIT 5 WINDOW 1000 AT -1", "ERR AT must be an integer from 0 to 9223372036854775807"),
        ("RL.REFUND k ALGO gcra LIMIT 5 WINDOW 1000 AT soon", "ERR AT must be an integer from 0 to 9223372036854775807"),
        ("RL.REFUND k ALGO gcra LIMIT 5 WINDOW 1000 AT 1 AT 2", "ERR AT is given more than once"),
        ("RL.REFUND k ALGO fixed LIMIT 5 WINDOW 1000 AT 10", "ERR AT needs ALGO gcra, token or leaky: a window's count cannot book a slot in a later window"),
        ("RL.REFUND k ALGO sliding LIMIT 5 WINDOW 1000 AT 10", "ERR AT needs ALGO gcra, token or leaky: a window's count cannot book a slot in a later window"),
        ("RL.ADMIT k ALGO gcra LIMIT 5 WINDOW 1000 AT 10", "ERR unknown option 'AT'"),
    ];
    for backend in BOTH {
        let server = backend.start();
        let mut con = server.client();
        let _: () = redis::cmd("SET").arg("k").arg("7").query(&mut con).unwrap();
        for (call, want) in cases {
            let reply = backend.raw(&mut con, &split(call));
            assert_eq!(
                error_text(&reply).as_deref(),
                Some(*want),
                "{backend:?} {call}: {}",
                show(&reply)
            );
            let got: Option<String> = redis::cmd("GET").arg("k").query(&mut con).unwrap();
            assert_eq!(got.as_deref(), Some("7"), "{backend:?} {call}");
        }
    }
}
