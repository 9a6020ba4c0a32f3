//! RL.ADMITALL against a real server: one request through several limiters
//! of any algorithm, all admitted or none consumed.
//!
//! Calls whose expectations depend on the clock run inside one MULTI/EXEC:
//! the server's time is frozen there, so a limiter answers RL.ADMITALL and
//! RL.ADMIT (on a COPY of its key) from the same state at the same time.

use crate::common;

use std::time::Duration;

use crate::common::{
    cmd_err, cmd_raw, dump, exec, int, ints, pexpiretime, raw_state, repl_offset, run, snapshot,
    split, wait_replica_offset, words, Server, QUIET,
};
use redis::{Commands, Connection, Value};

fn bytes(v: &Value) -> Option<Vec<u8>> {
    match v {
        Value::Nil => None,
        Value::BulkString(b) => Some(b.clone()),
        other => panic!("expected a string, got {other:?}"),
    }
}

/// An RL.ADMITALL reply.
#[derive(Debug, PartialEq, Eq)]
struct All {
    admitted: i64,
    refused_by: i64,
    retry_after_ms: i64,
    each: Vec<Vec<i64>>,
}

fn all(v: &Value) -> All {
    match v {
        Value::Array(items) if items.len() == 4 => All {
            admitted: int(&items[0]),
            refused_by: int(&items[1]),
            retry_after_ms: int(&items[2]),
            each: match &items[3] {
                Value::Array(each) => each.iter().map(ints).collect(),
                other => panic!("expected the limiters' replies, got {other:?}"),
            },
        },
        other => panic!("expected an RL.ADMITALL reply, got {other:?}"),
    }
}

/// `RL.ADMITALL numkeys key... [COST n] POLICY ... [POLICY ...]`.
fn admit_all(keys: &[&str], cost: Option<i64>, policies: &[Vec<String>]) -> Vec<String> {
    let mut cmd = c!["RL.ADMITALL", keys.len()];
    cmd.extend(keys.iter().map(|k| k.to_string()));
    if let Some(cost) = cost {
        cmd.extend(c!["COST", cost]);
    }
    for p in policies {
        cmd.push("POLICY".into());
        cmd.extend_from_slice(p);
    }
    cmd
}

fn admit(key: &str, policy: &[String], cost: i64) -> Vec<String> {
    let mut cmd = c!["RL.ADMIT", key];
    cmd.extend_from_slice(policy);
    cmd.extend(c!["COST", cost]);
    cmd
}

/// The limiter that decides a refusal: the longest back-off, -1 (never)
/// beating any wait, the first one on a tie. 1-based; 0 when all admit.
fn decider(each: &[Vec<i64>]) -> (i64, i64) {
    let mut best: Option<(usize, i64)> = None;
    for (i, d) in each.iter().enumerate() {
        if d[0] == 1 {
            continue;
        }
        let better = match best {
            None => true,
            Some((_, longest)) => longest >= 0 && (d[3] < 0 || d[3] > longest),
        };
        if better {
            best = Some((i, d[3]));
        }
    }
    // Admitted: the caller proceeds after the longest wait (a leaky delay).
    let longest_delay = each.iter().map(|d| d[3]).max().unwrap_or(0).max(0);
    best.map_or((0, longest_delay), |(i, wait)| (i as i64 + 1, wait))
}

/// One limiter of each algorithm.
fn mixed() -> (Vec<&'static str>, Vec<Vec<String>>) {
    (
        vec!["a:sliding", "a:token", "a:leaky", "a:gcra", "a:fixed"],
        vec![
            c!["ALGO", "sliding", "LIMIT", 3, "WINDOW", 60_000],
            c!["ALGO", "token", "LIMIT", 10, "WINDOW", 10_000, "BURST", 2],
            c!["ALGO", "leaky", "LIMIT", 10, "WINDOW", 10_000, "BURST", 1],
            c!["ALGO", "gcra", "LIMIT", 5, "WINDOW", 10_000, "BURST", 3],
            c!["LIMIT", 4, "WINDOW", 60_000],
        ],
    )
}

/// Each limiter answers exactly what RL.ADMIT alone would (on a copy of its
/// key, at the same instant); when all admit every key is written as
/// RL.ADMIT would write it, and when one refuses no key changes.
#[test]
fn each_limiter_answers_as_alone_and_all_or_none_is_written() {
    let server = Server::start();
    let mut con = server.client();
    let (keys, policies) = mixed();
    let n = keys.len();
    let (mut admitted, mut refused) = (0, 0);
    for (round, cost) in [1, 1, 0, 2, 1, 1, 3, 0, 1].into_iter().enumerate() {
        let mut cmds = vec![];
        for k in &keys {
            cmds.push(c!["DEL", format!("x:{k}")]);
            cmds.push(c!["COPY", k, format!("x:{k}")]);
            cmds.push(c!["DUMP", k]);
            cmds.push(c!["PEXPIRETIME", k]);
        }
        let at = cmds.len();
        cmds.push(admit_all(&keys, Some(cost), &policies));
        for (k, p) in keys.iter().zip(&policies) {
            cmds.push(admit(&format!("x:{k}"), p, cost));
        }
        for k in &keys {
            cmds.push(c!["DUMP", k]);
            cmds.push(c!["PEXPIRETIME", k]);
            cmds.push(c!["DUMP", format!("x:{k}")]);
            cmds.push(c!["PEXPIRETIME", format!("x:{k}")]);
        }
        let r = exec(&mut con, &cmds);
        let reply = all(&r[at]);
        let alone: Vec<Vec<i64>> = (0..n).map(|i| ints(&r[at + 1 + i])).collect();
        let all_admit = alone.iter().all(|d| d[0] == 1);
        if all_admit {
            assert_eq!(reply.each, alone, "round {round}, cost {cost}");
        } else {
            // Refusing members answer as alone; the others were not charged,
            // so they show at least the budget RL.ADMIT alone left.
            for (got, solo) in reply.each.iter().zip(&alone) {
                match solo[0] {
                    0 => assert_eq!(got, solo, "round {round}"),
                    _ => assert!(
                        got[0] == 1 && got[2] >= solo[2],
                        "round {round}: {got:?} vs {solo:?}"
                    ),
                }
            }
        }
        assert_eq!(reply.admitted, i64::from(all_admit), "round {round}");
        let (by, wait) = decider(&alone);
        assert_eq!(reply.refused_by, by, "round {round}: {reply:?}");
        assert_eq!(reply.retry_after_ms, wait, "round {round}: {reply:?}");
        for (i, k) in keys.iter().enumerate() {
            let before = (bytes(&r[4 * i + 2]), int(&r[4 * i + 3]));
            let after_at = at + 1 + n + 4 * i;
            let after = (bytes(&r[after_at]), int(&r[after_at + 1]));
            let copy = (bytes(&r[after_at + 2]), int(&r[after_at + 3]));
            if all_admit {
                assert_eq!(
                    after, copy,
                    "round {round}: {k} written as RL.ADMIT writes it"
                );
            } else {
                assert_eq!(after, before, "round {round}: {k} changed by a refusal");
            }
        }
        if all_admit {
            admitted += 1;
        } else {
            refused += 1;
        }
    }
    assert!(
        admitted >= 3 && refused >= 3,
        "{admitted} admitted, {refused} refused"
    );
}

/// Exhaust one limiter at a time: the call is refused by it, names it, waits
/// as long as it says, and changes no key nor sends anything to replicas.
#[test]
fn a_refusal_by_any_member_changes_no_key_and_replicates_nothing() {
    let mut args = QUIET.to_vec();
    args.extend(["--notify-keyspace-events", "Ed"]);
    let primary = Server::start_with(&args);
    let replica = Server::start();
    replica.replica_of(&primary);
    let mut con = primary.client();
    common::subscribe!(pubsub = primary, "__keyevent@*__:rl.hit");

    let keys = ["m:sliding", "m:token", "m:gcra", "m:leaky"];
    let policies = vec![
        c!["ALGO", "sliding", "LIMIT", 3, "WINDOW", 60_000],
        c!["ALGO", "token", "LIMIT", 3, "WINDOW", 60_000],
        c!["ALGO", "gcra", "LIMIT", 6, "WINDOW", 60_000, "BURST", 3],
        c!["ALGO", "leaky", "LIMIT", 3, "WINDOW", 60_000, "BURST", 2],
    ];
    let call = admit_all(&keys, None, &policies);
    for (i, key) in keys.iter().enumerate() {
        for k in keys {
            cmd_raw(&mut con, &["RL.RESET", k]);
        }
        let first = all(&run(&mut con, &call));
        assert_eq!(
            (first.admitted, first.refused_by, first.retry_after_ms),
            (1, 0, 0)
        );
        // Exhaust this one alone.
        let mut alone = 0;
        while ints(&run(&mut con, &admit(key, &policies[i], 1)))[0] == 1 {
            alone += 1;
            assert!(alone < 10, "{key} never fills");
        }
        let hit = pubsub.get_message().unwrap();
        assert_eq!(hit.get_channel_name(), "__keyevent@0__:rl.hit");
        assert_eq!(hit.get_payload::<String>().unwrap(), *key);
        wait_replica_offset(&primary, &replica);
        let before = raw_state(&mut con, &keys);
        let offset_before = repl_offset(&mut con);

        let mut ttl = c!["RL.TTL", key];
        ttl.extend_from_slice(&policies[i]);
        let r = exec(&mut con, &[call.clone(), ttl, call.clone()]);
        let reply = all(&r[0]);
        assert_eq!(reply.admitted, 0, "{key}");
        assert_eq!(reply.refused_by, i as i64 + 1, "{key}: {reply:?}");
        assert!(reply.retry_after_ms > 0, "{key}: {reply:?}");
        assert_eq!(reply.retry_after_ms, int(&r[1]), "{key}: its own back-off");
        assert_eq!(reply.retry_after_ms, reply.each[i][3]);
        for (j, d) in reply.each.iter().enumerate() {
            assert_eq!(d[0], i64::from(j != i), "{key}: limiter {j} in {reply:?}");
        }
        assert_eq!(
            all(&r[2]),
            reply,
            "{key}: the refusal left the state as it was"
        );
        assert_eq!(raw_state(&mut con, &keys), before, "{key}: a key changed");
        assert_eq!(
            repl_offset(&mut con),
            offset_before,
            "{key}: something was propagated"
        );
        for _ in 0..2 {
            let hit = pubsub.get_message().unwrap();
            assert_eq!(hit.get_channel_name(), "__keyevent@0__:rl.hit");
            assert_eq!(
                hit.get_payload::<String>().unwrap(),
                *key,
                "only the refuser"
            );
        }
    }
    // An admission writes every key and reaches the replica.
    for k in keys {
        cmd_raw(&mut con, &["RL.RESET", k]);
    }
    let offset_before = repl_offset(&mut con);
    assert_eq!(all(&run(&mut con, &call)).admitted, 1);
    assert!(repl_offset(&mut con) > offset_before);
    wait_replica_offset(&primary, &replica);
    let on_primary = snapshot(&mut con, &keys);
    assert_eq!(on_primary, snapshot(&mut replica.client(), &keys));
    assert!(
        on_primary.iter().all(|(_, v, _)| v.is_some()),
        "{on_primary:?}"
    );
}

/// A refusal consumes nothing, but a refusing limiter whose stored state
/// would block for good gets the same one repair RL.ADMIT makes, on the
/// replica too; the members that would have passed are left as they are.
#[test]
fn a_refusing_member_with_foreign_state_is_repaired_as_alone() {
    let primary = Server::start_with(QUIET);
    let replica = Server::start();
    replica.replica_of(&primary);
    let mut con = primary.client();
    let now = common::server_time_ms(&mut con);
    let far_ns = (now + 100_000_000) as i128 * 1_000_000;
    // A counter over its limit with no TTL; one with far more time left
    // than its window; a GCRA time far in the future; and one that passes.
    let _: () = con.set("r:nottl", 100).unwrap();
    let _: () = redis::cmd("SET")
        .arg("r:long")
        .arg(9)
        .arg("PX")
        .arg(100_000_000)
        .query(&mut con)
        .unwrap();
    let _: () = con.set("r:gcra", format!("gcra:{far_ns}")).unwrap();
    let keys = ["r:nottl", "r:long", "r:gcra", "r:ok"];
    let policies = vec![
        c!["LIMIT", 5, "WINDOW", 1_000],
        c!["LIMIT", 3, "WINDOW", 500],
        c!["ALGO", "gcra", "LIMIT", 10, "WINDOW", 1_000],
        c!["LIMIT", 5, "WINDOW", 60_000],
    ];
    let reply = all(&run(&mut con, &admit_all(&keys, None, &policies)));
    assert_eq!(reply.admitted, 0, "{reply:?}");
    assert_eq!(reply.each[3][0], 1, "the last one would pass: {reply:?}");
    let now = common::server_time_ms(&mut con);
    let nottl = pexpiretime(&mut con, "r:nottl");
    assert!(nottl > now && nottl <= now + 1_000, "TTL-less: {nottl}");
    let long = pexpiretime(&mut con, "r:long");
    assert!(long > now && long <= now + 500, "too long: {long}");
    let gcra: String = con.get("r:gcra").unwrap();
    let tat: i128 = gcra.strip_prefix("gcra:").unwrap().parse().unwrap();
    assert!(tat < far_ns, "the future time was pulled back: {gcra}");
    // Their values (the counts) are untouched; nothing was consumed.
    assert_eq!(con.get::<_, i64>("r:nottl").unwrap(), 100);
    assert_eq!(con.get::<_, i64>("r:long").unwrap(), 9);
    assert_eq!(
        dump(&mut con, "r:ok"),
        None,
        "the passing member is unwritten"
    );
    wait_replica_offset(&primary, &replica);
    assert_eq!(
        snapshot(&mut con, &keys),
        snapshot(&mut replica.client(), &keys)
    );
    // Each blocks no longer than it said.
    let back_off = reply.each[..3].iter().map(|d| d[3]).max().unwrap();
    assert!(back_off <= 1_000, "{reply:?}");
    std::thread::sleep(Duration::from_millis(back_off as u64 + 50));
    let again = all(&run(&mut con, &admit_all(&keys, None, &policies)));
    assert_eq!(again.admitted, 1, "{again:?}");
}

#[test]
fn the_longest_backoff_decides_and_never_beats_any_wait() {
    let server = Server::start();
    let mut con = server.client();
    let second = c!["ALGO", "gcra", "LIMIT", 10, "WINDOW", 10_000, "BURST", 1]; // 1 s
    let minute = c!["ALGO", "token", "LIMIT", 1, "WINDOW", 60_000, "BURST", 1]; // 60 s
    let three = c!["ALGO", "gcra", "LIMIT", 10, "WINDOW", 10_000, "BURST", 3];
    let open = c!["ALGO", "sliding", "LIMIT", 10, "WINDOW", 60_000];
    let r = exec(
        &mut con,
        &[
            admit("x", &second, 1),
            admit("x2", &second, 1),
            admit("y", &minute, 1),
            admit("w", &three, 3),
            c!["DUMP", "x"],
            c!["DUMP", "y"],
            c!["DUMP", "w"],
            admit_all(
                &["x", "y", "z"],
                None,
                &[second.clone(), minute.clone(), open.clone()],
            ),
            admit_all(
                &["y", "x", "z"],
                None,
                &[minute.clone(), second.clone(), open.clone()],
            ),
            admit_all(&["z", "x"], None, &[open.clone(), second.clone()]),
            // A tie: the first of the longest.
            admit_all(&["x", "x2"], None, &[second.clone(), second.clone()]),
            // COST 2 is beyond x's and y's burst: never; w would wait 2 s.
            admit_all(
                &["x", "y", "z"],
                Some(2),
                &[second.clone(), minute.clone(), open.clone()],
            ),
            admit_all(&["w", "x"], Some(2), &[three.clone(), second.clone()]),
            admit_all(&["x", "w"], Some(2), &[second.clone(), three.clone()]),
            admit_all(&["w", "z"], Some(2), &[three.clone(), open.clone()]),
            c!["DUMP", "x"],
            c!["DUMP", "y"],
            c!["DUMP", "w"],
            c!["EXISTS", "z"],
        ],
    );
    let head = |v: &Value| {
        let a = all(v);
        (a.admitted, a.refused_by, a.retry_after_ms)
    };
    assert_eq!(head(&r[7]), (0, 2, 60_000));
    assert_eq!(head(&r[8]), (0, 1, 60_000));
    assert_eq!(head(&r[9]), (0, 2, 1_000));
    assert_eq!(all(&r[9]).each[0][0], 1, "z alone would pass");
    assert_eq!(head(&r[10]), (0, 1, 1_000));
    assert_eq!(head(&r[11]), (0, 1, -1));
    assert_eq!(all(&r[11]).each[1][3], -1);
    assert_eq!(head(&r[12]), (0, 2, -1));
    assert_eq!(all(&r[12]).each[0][3], 2_000);
    assert_eq!(head(&r[13]), (0, 1, -1));
    assert_eq!(head(&r[14]), (0, 1, 2_000));
    for (before, after) in [(4, 15), (5, 16), (6, 17)] {
        assert_eq!(bytes(&r[before]), bytes(&r[after]), "a refusal wrote a key");
    }
    assert_eq!(int(&r[18]), 0, "z was never written");
}

#[test]
fn the_cost_applies_to_every_limiter_and_zero_peeks() {
    let server = Server::start();
    let mut con = server.client();
    let keys = ["c:sliding", "c:token", "c:leaky"];
    let policies = vec![
        c!["ALGO", "sliding", "LIMIT", 5, "WINDOW", 60_000],
        c!["ALGO", "token", "LIMIT", 10, "WINDOW", 10_000, "BURST", 5],
        c!["ALGO", "leaky", "LIMIT", 10, "WINDOW", 10_000, "BURST", 4],
    ];
    let peek = all(&run(&mut con, &admit_all(&keys, Some(0), &policies)));
    assert_eq!((peek.admitted, peek.refused_by), (1, 0));
    assert_eq!(
        peek.each.iter().map(|d| d[2]).collect::<Vec<_>>(),
        [5, 5, 4],
        "full budgets"
    );
    for k in keys {
        assert!(!con.exists::<_, bool>(k).unwrap(), "a peek created {k}");
    }
    let three = all(&run(&mut con, &admit_all(&keys, Some(3), &policies)));
    assert_eq!(three.admitted, 1);
    assert_eq!(
        three.each.iter().map(|d| d[2]).collect::<Vec<_>>(),
        [2, 2, 2],
        "3 spent from each (the leaky queue: 1 served, 2 of 4 waiting)"
    );
    assert_eq!(
        three.each[2][3], 0,
        "the first in an empty queue goes at once"
    );
    let before = raw_state(&mut con, &keys);
    let peek = all(&run(&mut con, &admit_all(&keys, Some(0), &policies)));
    assert_eq!(peek.admitted, 1);
    assert_eq!(
        peek.each.iter().map(|d| d[2]).collect::<Vec<_>>(),
        [2, 2, 2]
    );
    assert_eq!(raw_state(&mut con, &keys), before, "a peek changed a key");
    // 3 more: beyond the sliding window's 2 and the bucket's 2 tokens.
    let over = all(&run(&mut con, &admit_all(&keys, Some(3), &policies)));
    assert_eq!(over.admitted, 0);
    assert_eq!(over.each[0][0], 0);
    assert_eq!(over.each[1][0], 0);
    assert_eq!(
        raw_state(&mut con, &keys),
        before,
        "a refusal changed a key"
    );
}

#[test]
fn unlimited_members_pass_and_are_never_written() {
    let server = Server::start();
    let mut con = server.client();
    let limited = c!["ALGO", "token", "LIMIT", 1, "WINDOW", 60_000];
    let policies = vec![c!["LIMIT", 0], limited.clone(), c!["META", "no:such:meta"]];
    let keys = ["u:free", "u:one", "u:meta"];
    let first = all(&run(&mut con, &admit_all(&keys, None, &policies)));
    assert_eq!(
        (first.admitted, first.refused_by, first.retry_after_ms),
        (1, 0, 0)
    );
    assert_eq!(first.each[0], [1, 0, 0, 0, 0]);
    assert_eq!(first.each[1], [1, 1, 0, 0, 60_000]);
    assert_eq!(first.each[2], [1, 0, 0, 0, 0]);
    let second = all(&run(&mut con, &admit_all(&keys, None, &policies)));
    assert_eq!((second.admitted, second.refused_by), (0, 2));
    assert_eq!(second.each[0], [1, 0, 0, 0, 0]);
    assert!(!con.exists::<_, bool>("u:free").unwrap());
    assert!(!con.exists::<_, bool>("u:meta").unwrap());
}

#[test]
fn meta_policies_and_declared_keys() {
    let server = Server::start();
    let mut con = server.client();
    let metas: [(&str, &[(&str, &str)]); 2] = [
        (
            "m:1",
            &[
                ("algorithm", "token"),
                ("max", "10"),
                ("duration", "10000"),
                ("burst", "2"),
            ],
        ),
        (
            "m:2",
            &[
                ("algorithm", "sliding"),
                ("max", "1"),
                ("duration", "60000"),
            ],
        ),
    ];
    for (key, fields) in metas {
        let _: () = con.hset_multiple(key, fields).unwrap();
    }
    let call = words(&split(
        "RL.ADMITALL 3 c:1 c:2 c:3 POLICY META m:1 POLICY META m:2 POLICY META m:1 BURST 5",
    ));
    let first = all(&run(&mut con, &call));
    assert_eq!(first.admitted, 1);
    assert_eq!(first.each[0][..3], [1, 2, 1], "token, burst 2 from META");
    assert_eq!(first.each[1][..3], [1, 1, 0], "sliding from META");
    assert_eq!(first.each[2][..3], [1, 5, 4], "inline BURST wins");
    let second = all(&run(&mut con, &call));
    assert_eq!((second.admitted, second.refused_by), (0, 2));

    // (call, the keys COMMAND GETKEYS reports for it)
    for (call, keys) in [
        (
            "RL.ADMITALL 2 a b POLICY LIMIT 1 WINDOW 10 META m1 POLICY META m2",
            "a b m1 m2",
        ),
        ("RL.ADMITALL 1 a COST 3 POLICY META m", "a m"),
        ("RL.ADMITALL 1 a POLICY ALGO gcra LIMIT 1 WINDOW 9", "a"),
    ] {
        let got: Vec<String> = redis::cmd("COMMAND")
            .arg("GETKEYS")
            .arg(split(call))
            .query(&mut con)
            .unwrap();
        assert_eq!(got, split(keys), "{call}");
    }

    // ACLs follow the declared keys: counters read-write, META read-only.
    let rule = "ACL SETUSER tenant on nopass +@all ~c:* %R~m:*";
    assert_eq!(cmd_raw(&mut con, &split(rule)), Value::Okay);
    let mut tenant = server.client();
    let _: () = redis::cmd("AUTH")
        .arg(&["tenant", "x"])
        .query(&mut tenant)
        .unwrap();
    let ok = words(&split(
        "RL.ADMITALL 2 c:4 c:5 POLICY META m:1 POLICY META m:2",
    ));
    assert_eq!(all(&run(&mut tenant, &ok)).admitted, 1);
    for bad in [
        "RL.ADMITALL 2 c:6 other POLICY META m:1 POLICY META m:2",
        "RL.ADMITALL 1 c:6 POLICY META other",
        "RL.ADMITALL 1 m:1 POLICY LIMIT 1 WINDOW 10",
    ] {
        let err = cmd_err(&mut tenant, &split(bad));
        assert!(err.starts_with("NOPERM"), "{bad:?}: {err}");
    }
    assert!(!con.exists::<_, bool>("c:6").unwrap());
}

#[test]
fn malformed_calls_are_errors_that_change_nothing() {
    let server = Server::start();
    let mut con = server.client();
    let _: () = con.rpush("list", "x").unwrap();
    let _: () = con.set("sliding", "sliding:0:1:0").unwrap();
    let _: () = con.hset("hash", "max", "1").unwrap();
    let keys = ["a", "b", "list", "sliding", "hash"];
    let before = raw_state(&mut con, &keys);
    let p = "POLICY";
    let lim = |algo: &str| c!["ALGO", algo, "LIMIT", 5, "WINDOW", 10_000];
    let with = |head: Vec<String>, tail: Vec<String>| [head, tail].concat();
    let cases: Vec<(Vec<String>, &str)> = vec![
        (
            with(
                c!["RL.ADMITALL", 2, "a", "a", p],
                with(lim("token"), with(c![p], lim("token"))),
            ),
            "ERR every key must be distinct",
        ),
        (
            with(c!["RL.ADMITALL", 2, "a", "b", p], lim("token")),
            "ERR one POLICY per key is needed: 2 keys, 1 policies",
        ),
        (
            with(c!["RL.ADMITALL", 1, "a", "LIMIT", 5, p], lim("token")),
            "ERR policy options must follow a POLICY keyword",
        ),
        (
            c!["RL.ADMITALL", 2, "a", "b", "BOGUS", 1, p, "LIMIT", 1],
            "ERR expected POLICY after the 2 keys numkeys counts, got 'BOGUS'",
        ),
        (
            with(
                c!["RL.ADMITALL", 1, "a", p],
                with(lim("token"), c!["BOGUS", 1]),
            ),
            "ERR unknown option 'BOGUS'",
        ),
        (
            with(
                c!["RL.ADMITALL", 1, "a", p],
                with(lim("sliding"), c!["BURST", 2]),
            ),
            "ERR BURST does not apply to ALGO sliding",
        ),
        (
            with(
                c!["RL.ADMITALL", 1, "a", "COST", 1, "COST", 2, p],
                lim("token"),
            ),
            "ERR COST is given more than once",
        ),
        // The first limiter would admit; the second key cannot be read.
        (
            with(
                c!["RL.ADMITALL", 2, "a", "list", p],
                with(lim("token"), with(c![p], lim("token"))),
            ),
            "WRONGTYPE Operation against a key holding the wrong kind of value",
        ),
        (
            with(
                c!["RL.ADMITALL", 3, "a", "b", "sliding", p],
                with(
                    lim("token"),
                    with(c![p], with(lim("gcra"), with(c![p], lim("gcra")))),
                ),
            ),
            "ERR limiter key does not hold gcra state",
        ),
        (
            with(
                c!["RL.ADMITALL", 2, "a", "b", p],
                with(lim("token"), c![p, "META", "list"]),
            ),
            "WRONGTYPE META key does not hold a hash",
        ),
        (
            with(c!["RL.ADMITALL", 1, "hash", p], lim("gcra")),
            "WRONGTYPE Operation against a key holding the wrong kind of value",
        ),
    ];
    for (call, want) in &cases {
        let words: Vec<&str> = call.iter().map(String::as_str).collect();
        assert_eq!(cmd_err(&mut con, &words), *want, "{call:?}");
        let pong: String = redis::cmd("PING").query(&mut con).unwrap();
        assert_eq!(pong, "PONG");
    }
    assert_eq!(raw_state(&mut con, &keys), before, "an error changed a key");
}

#[test]
fn a_replica_holds_the_same_state_after_any_mix_of_calls() {
    let primary = Server::start_with(QUIET);
    let replica = Server::start();
    replica.replica_of(&primary);
    let mut con = primary.client();
    // Long intervals: no key expires while the two sides are compared.
    let keys = ["r:sliding", "r:token", "r:leaky", "r:gcra", "r:fixed"];
    let policies = [
        c!["ALGO", "sliding", "LIMIT", 20, "WINDOW", 60_000],
        c!["ALGO", "token", "LIMIT", 10, "WINDOW", 200_000, "BURST", 15],
        c!["ALGO", "leaky", "LIMIT", 10, "WINDOW", 200_000, "BURST", 12],
        c!["ALGO", "gcra", "LIMIT", 5, "WINDOW", 100_000, "BURST", 15],
        c!["LIMIT", 20, "WINDOW", 60_000],
    ];
    let mut rng = 0x5eed_u64;
    let (mut writes, mut quiet, mut refusals) = (0, 0, 0);
    for round in 0..40 {
        rng = rng.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
        let pick = (rng >> 33) as usize;
        let cost = if round == 0 { 1 } else { (pick % 3) as i64 };
        // A varying subset of the limiters, in a varying order.
        let mut chosen: Vec<usize> = (0..keys.len())
            .filter(|i| (pick >> (i + 2)) & 1 == 1)
            .collect();
        if chosen.is_empty() {
            chosen.push(round % keys.len());
        }
        if round == 0 {
            chosen = (0..keys.len()).collect();
        }
        let by = pick % chosen.len();
        chosen.rotate_left(by);
        let ks: Vec<&str> = chosen.iter().map(|&i| keys[i]).collect();
        let ps: Vec<Vec<String>> = chosen.iter().map(|&i| policies[i].clone()).collect();
        let before = repl_offset(&mut con);
        let reply = all(&run(&mut con, &admit_all(&ks, Some(cost), &ps)));
        let moved = repl_offset(&mut con) != before;
        if reply.admitted == 1 && cost > 0 {
            assert!(moved, "round {round}: an admission propagates");
            writes += 1;
        } else {
            assert!(
                !moved,
                "round {round}: {reply:?} with cost {cost} propagated"
            );
            quiet += 1;
            refusals += 1 - reply.admitted;
        }
        if round % 10 == 9 {
            std::thread::sleep(Duration::from_millis(5));
        }
    }
    assert!(
        writes >= 5 && quiet >= 5 && refusals >= 3,
        "{writes} writes, {quiet} quiet of which {refusals} refusals"
    );
    wait_replica_offset(&primary, &replica);
    let on_primary = snapshot(&mut con, &keys);
    assert_eq!(on_primary, snapshot(&mut replica.client(), &keys));
    assert!(
        on_primary.iter().all(|(_, v, _)| v.is_some()),
        "a key was never written: {on_primary:?}"
    );
}

/// WATCH sees an admission (every key was written) but not a refusal.
#[test]
fn a_refusal_does_not_break_a_watch_and_an_admission_does() {
    let server = Server::start();
    let mut con = server.client();
    let one = c!["ALGO", "gcra", "LIMIT", 1, "WINDOW", 60_000];
    let five = c!["ALGO", "sliding", "LIMIT", 5, "WINDOW", 60_000];
    run(&mut con, &admit("full", &one, 1));
    let watched_exec = |con: &mut Connection, watch: &str, call: &[String]| -> Value {
        assert_eq!(cmd_raw(con, &["WATCH", watch]), Value::Okay);
        let reply = run(con, call);
        assert!(!matches!(reply, Value::ServerError(_)), "{reply:?}");
        assert_eq!(cmd_raw(con, &["MULTI"]), Value::Okay);
        cmd_raw(con, &["PING"]);
        cmd_raw(con, &["EXEC"])
    };
    let refused = admit_all(&["full", "other"], None, &[one.clone(), five.clone()]);
    for key in ["full", "other"] {
        let done = watched_exec(&mut con, key, &refused);
        assert_ne!(done, Value::Nil, "a refusal aborted a WATCH on {key}");
    }
    let admitted = admit_all(&["free", "other"], None, &[one.clone(), five.clone()]);
    let done = watched_exec(&mut con, "other", &admitted);
    assert_eq!(done, Value::Nil, "an admission must abort a WATCH");
}
