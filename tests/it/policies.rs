//! The policies of issue 27 on real servers, both backends where a call can
//! show it: SHADOW (never refuses, state as enforced, counted apart).
//! INFO counters, events, RESP3 maps unasked, COMMAND DOCS and getkeys are
//! the module's alone (`module_only_...`).

use redis::{Connection, Value};

use crate::common::backend::{Backend, BOTH};
use crate::common::{self, cmd_ints, info_field, pexpiretime, show, Server};

/// `calls` in one MULTI/EXEC (one frozen clock), each in the backend's form;
/// their replies.
fn exec(backend: Backend, con: &mut Connection, calls: &[Vec<String>]) -> Vec<Value> {
    let mut pipe = redis::pipe();
    pipe.atomic();
    for call in calls {
        let words: Vec<&str> = call.iter().map(String::as_str).collect();
        let form = backend.call(&words);
        let mut cmd = redis::cmd(&form[0]);
        for w in &form[1..] {
            cmd.arg(w);
        }
        pipe.add_command(cmd);
    }
    pipe.query(con).unwrap()
}

fn words(line: &str) -> Vec<String> {
    line.split(' ').map(str::to_string).collect()
}

const ALGOS: [&str; 5] = ["fixed", "sliding", "token", "gcra", "leaky"];

/// With LIMIT 3, ten calls in shadow mode are all admitted, those from the
/// fourth with their would-be wait; the key is then exactly what three
/// enforced calls leave (value and absolute expiry), for every algorithm.
#[test]
fn shadow_admits_every_call_and_keeps_the_state_of_the_enforced_ones() {
    for backend in BOTH {
        let server = backend.start();
        let mut con = server.client();
        for algo in ALGOS {
            // Three requests fit each (a leaky queue holds BURST + 1).
            let policy = match algo {
                "fixed" | "sliding" => format!("ALGO {algo} LIMIT 3 WINDOW 60000"),
                "leaky" => format!("ALGO {algo} LIMIT 3 WINDOW 60000 BURST 2"),
                _ => format!("ALGO {algo} LIMIT 3 WINDOW 60000 BURST 3"),
            };
            let (shadow, enforced) = (format!("s-{algo}"), format!("e-{algo}"));
            let mut calls = Vec::new();
            for _ in 0..10 {
                calls.push(words(&format!("RL.ADMIT {shadow} {policy} SHADOW")));
            }
            for _ in 0..3 {
                calls.push(words(&format!("RL.ADMIT {enforced} {policy}")));
            }
            calls.push(words(&format!("RL.ADMIT {enforced} {policy}")));
            let replies = exec(backend, &mut con, &calls);
            let ints: Vec<Vec<i64>> = replies.iter().map(common::ints).collect();
            for (i, d) in ints[..10].iter().enumerate() {
                assert_eq!(d[0], 1, "{backend:?} {algo} call {}: {d:?}", i + 1);
                if i >= 3 {
                    assert!(d[3] > 0, "{backend:?} {algo} call {}: {d:?}", i + 1);
                } else if algo != "leaky" {
                    // (a leaky queue's admission tells its delay)
                    assert_eq!(d[3], 0, "{backend:?} {algo} call {}: {d:?}", i + 1);
                }
            }
            // The enforced fourth call is refused with the same numbers but
            // `admitted`: a shadow refusal is the refusal, admitted.
            let refused = &ints[13];
            assert_eq!(refused[0], 0, "{backend:?} {algo}");
            assert_eq!(&ints[9][1..], &refused[1..], "{backend:?} {algo}");
            let get = |con: &mut Connection, k: &str| -> Option<String> {
                redis::cmd("GET").arg(k).query(con).unwrap()
            };
            assert_eq!(
                get(&mut con, &shadow),
                get(&mut con, &enforced),
                "{backend:?} {algo}"
            );
            assert_eq!(
                pexpiretime(&mut con, &shadow),
                pexpiretime(&mut con, &enforced),
                "{backend:?} {algo}"
            );
        }
    }
}

/// `HSET <meta> shadow 1` trials a policy on live traffic, and `shadow 0`
/// enforces it again, with no change to the calls; the flag and the field
/// read the same (the flag wins over a `0`).
#[test]
fn the_meta_field_turns_shadow_mode_on_and_off() {
    for backend in BOTH {
        let server = backend.start();
        let mut con = server.client();
        common::cmd_raw(
            &mut con,
            &["HSET", "m", "max", "2", "duration", "60000", "shadow", "1"],
        );
        let admit = ["RL.ADMIT", "k", "META", "m"];
        let call = |con: &mut Connection, words: &[&str]| -> Vec<i64> {
            common::ints(&common::run(con, &backend.call(words)))
        };
        for left in [1, 0] {
            assert_eq!(call(&mut con, &admit)[..4], [1, 2, left, 0], "{backend:?}");
        }
        let d = call(&mut con, &admit);
        assert_eq!((d[0], d[2]), (1, 0), "{backend:?}: {d:?}");
        assert!(d[3] > 0, "{backend:?}: {d:?}");
        common::cmd_raw(&mut con, &["HSET", "m", "shadow", "0"]);
        let d = call(&mut con, &admit);
        assert_eq!(d[0], 0, "{backend:?}: {d:?}");
        // The flag inline wins over the field's 0.
        let d = call(&mut con, &["RL.ADMIT", "k", "SHADOW", "META", "m"]);
        assert_eq!(d[0], 1, "{backend:?}: {d:?}");
        assert!(d[3] > 0, "{backend:?}: {d:?}");
        // RL.TTL tells the would-be wait in shadow mode too.
        let ttl = common::int(&common::run(
            &mut con,
            &backend.call(&["RL.TTL", "k", "META", "m", "SHADOW"]),
        ));
        assert!(ttl > 0 && ttl <= 60000, "{backend:?}: {ttl}");
    }
}

/// A refund in shadow mode gives back as enforced, and its reply follows
/// the same rule: never `admitted` 0.
#[test]
fn a_shadow_refusal_consumes_nothing_so_a_refund_gives_back_the_admitted() {
    for backend in BOTH {
        let server = backend.start();
        let mut con = server.client();
        let policy = "LIMIT 2 WINDOW 60000 SHADOW";
        let mut calls = Vec::new();
        for _ in 0..5 {
            calls.push(words(&format!("RL.ADMIT k {policy}")));
        }
        calls.push(words(&format!("RL.REFUND k {policy}")));
        calls.push(words(&format!("RL.ADMIT k {policy}")));
        calls.push(words(&format!("RL.ADMIT k {policy}")));
        let replies: Vec<Vec<i64>> = exec(backend, &mut con, &calls)
            .iter()
            .map(common::ints)
            .collect();
        // After five calls, two consumed; the refund frees one, which the
        // next call takes; the one after would wait again.
        assert_eq!(replies[5][..3], [1, 2, 1], "{backend:?}: {replies:?}");
        assert_eq!(replies[6][..4], [1, 2, 0, 0], "{backend:?}: {replies:?}");
        assert_eq!(replies[7][0], 1, "{backend:?}: {replies:?}");
        assert!(replies[7][3] > 0, "{backend:?}: {replies:?}");
        let count: String = redis::cmd("GET").arg("k").query(&mut con).unwrap();
        assert_eq!(count, "2", "{backend:?}");
    }
}

/// RL.ADMITALL: a POLICY in shadow mode never refuses and blocks no other
/// member; its would-be refusal consumes nothing. A real refusal of
/// another member still consumes nothing anywhere.
#[test]
fn admitall_a_shadow_policy_blocks_nothing() {
    for backend in BOTH {
        let server = backend.start();
        let mut con = server.client();
        let call =
            "RL.ADMITALL 2 a b POLICY LIMIT 1 WINDOW 60000 SHADOW POLICY LIMIT 3 WINDOW 60000";
        let run = |con: &mut Connection| -> Value {
            common::run(con, &backend.call(&common::split(call)))
        };
        let first = show(&run(&mut con));
        assert_eq!(
            first, "[1, 0, 0, [[1, 1, 0, 0, 60000], [1, 3, 2, 0, 60000]]]",
            "{backend:?}"
        );
        for remaining in [1, 0] {
            let Value::Array(reply) = run(&mut con) else {
                panic!()
            };
            assert_eq!(
                (
                    common::int(&reply[0]),
                    common::int(&reply[1]),
                    common::int(&reply[2])
                ),
                (1, 0, 0),
                "{backend:?}: the caller waits for no shadow member"
            );
            let Value::Array(each) = &reply[3] else {
                panic!()
            };
            let (a, b) = (common::ints(&each[0]), common::ints(&each[1]));
            assert_eq!((a[0], a[2]), (1, 0), "{backend:?}: {a:?}");
            assert!(a[3] > 0, "{backend:?}: {a:?}");
            assert_eq!(b[..4], [1, 3, remaining, 0], "{backend:?}: {b:?}");
        }
        // b is full: refused by 2; a (shadow) is not consumed either way.
        let Value::Array(reply) = run(&mut con) else {
            panic!()
        };
        assert_eq!(
            (common::int(&reply[0]), common::int(&reply[1])),
            (0, 2),
            "{backend:?}"
        );
        let get = |con: &mut Connection, k: &str| -> String {
            redis::cmd("GET").arg(k).query(con).unwrap()
        };
        assert_eq!(
            (get(&mut con, "a"), get(&mut con, "b")),
            ("1".into(), "3".into())
        );
    }
}

/// The library's FORMAT map and the module's RESP3 map both add
/// `shadow 1` to a shadow refusal, and only to it.
#[test]
fn a_shadow_refusal_map_says_shadow() {
    let module = Server::start();
    let library = Backend::Functions.start();
    let mut m = module.client();
    let mut l = library.client();
    let _: Value = redis::cmd("HELLO").arg(3).query(&mut m).unwrap();
    let _: Value = redis::cmd("HELLO").arg(3).query(&mut l).unwrap();
    let admit = ["RL.ADMIT", "k", "LIMIT", "1", "WINDOW", "60000", "SHADOW"];
    let mut lib_admit = Backend::Functions.call(&admit);
    lib_admit.extend(["FORMAT".to_string(), "map".to_string()]);
    for call in 0..2 {
        let from_module = common::run(&mut m, &admit.map(String::from));
        let from_library = common::run(&mut l, &lib_admit);
        for (who, reply) in [("module", &from_module), ("library", &from_library)] {
            let Value::Map(fields) = reply else {
                panic!("{who}: {reply:?}")
            };
            let shadow = fields
                .iter()
                .find(|(k, _)| common::try_text(k).as_deref() == Some("shadow"))
                .map(|(_, v)| common::int(v));
            let admitted = fields
                .iter()
                .find(|(k, _)| common::try_text(k).as_deref() == Some("admitted"))
                .map(|(_, v)| common::int(v));
            assert_eq!(admitted, Some(1), "{who} call {call}");
            match call {
                0 => assert_eq!((fields.len(), shadow), (5, None), "{who}"),
                _ => assert_eq!((fields.len(), shadow), (6, Some(1)), "{who}"),
            }
        }
    }
}

/// INFO counts shadow refusals apart (not admitted, not refused), and each
/// fires `rl.shadow`, not `rl.hit`: 7 of 10 calls with LIMIT 3.
#[test]
fn module_only_shadow_refusals_are_counted_apart_and_fire_rl_shadow() {
    let server = Server::start_with(&["--notify-keyspace-events", "Ed"]);
    let mut con = server.client();
    common::subscribe!(pubsub = server, "__keyevent@*__:rl.*");
    for _ in 0..10 {
        let d = cmd_ints(
            &mut con,
            &["RL.ADMIT", "k", "LIMIT", "3", "WINDOW", "60000", "SHADOW"],
        );
        assert_eq!(d[0], 1);
    }
    // One real refusal, to end the events.
    let refused = cmd_ints(
        &mut con,
        &["RL.ADMIT", "k", "LIMIT", "3", "WINDOW", "60000"],
    );
    assert_eq!(refused[0], 0);
    let field = |con: &mut Connection, f: &str| -> i64 {
        info_field(con, "ratelimit", f).unwrap().parse().unwrap()
    };
    assert_eq!(field(&mut con, "ratelimit_fixed_shadow_refused"), 7);
    assert_eq!(field(&mut con, "ratelimit_calls_shadow_refused"), 7);
    assert_eq!(field(&mut con, "ratelimit_fixed_admitted"), 3);
    assert_eq!(field(&mut con, "ratelimit_fixed_refused"), 1);
    // Only the real refusal's back-off is added.
    assert_eq!(field(&mut con, "ratelimit_backoff_ms_total"), refused[3]);
    let mut channels = Vec::new();
    for _ in 0..8 {
        let msg = pubsub.get_message().unwrap();
        channels.push(msg.get_channel_name().to_string());
    }
    let shadows = channels
        .iter()
        .filter(|c| c.ends_with(":rl.shadow"))
        .count();
    assert_eq!(shadows, 7, "{channels:?}");
    assert!(channels[7].ends_with(":rl.hit"), "{channels:?}");

    // RL.ADMITALL counts the call once, as shadow-refused, and fires
    // rl.shadow for its would-be refusing member.
    let all = [
        "RL.ADMITALL",
        "1",
        "k",
        "POLICY",
        "LIMIT",
        "3",
        "WINDOW",
        "60000",
        "SHADOW",
    ];
    let _: Value = common::make_cmd(&all).query(&mut con).unwrap();
    assert_eq!(field(&mut con, "ratelimit_admitall_shadow_refused"), 1);
    assert_eq!(field(&mut con, "ratelimit_admitall_admitted"), 0);
    let msg = pubsub.get_message().unwrap();
    assert!(msg.get_channel_name().ends_with(":rl.shadow"));
}

/// SHADOW is a flag in COMMAND DOCS (a pure token, no value), and getkeys
/// steps over it to find the META hash.
#[test]
fn module_only_shadow_is_a_pure_token_in_the_docs_and_getkeys_steps_over_it() {
    let server = Server::start();
    let mut con = server.client();
    let docs = show(&common::cmd_raw(&mut con, &["COMMAND", "DOCS", "RL.ADMIT"]));
    assert!(
        docs.contains("name, SHADOW, type, pure-token, display_text, SHADOW, token, SHADOW, flags, [optional]")
            || docs.contains("\"name\", \"SHADOW\", \"type\", \"pure-token\""),
        "{docs}"
    );
    for cmd in ["RL.ADMITALL", "RL.TTL", "RL.REFUND"] {
        let docs = show(&common::cmd_raw(&mut con, &["COMMAND", "DOCS", cmd]));
        assert!(docs.contains("SHADOW"), "{cmd}: {docs}");
    }
    let keys = show(&common::cmd_raw(
        &mut con,
        &[
            "COMMAND", "GETKEYS", "RL.ADMIT", "k", "SHADOW", "META", "m", "LIMIT", "3",
        ],
    ));
    assert_eq!(keys, r#"["k", "m"]"#);
}
