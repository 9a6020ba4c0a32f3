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

// PENALTY ---------------------------------------------------------------

use crate::common::backend::{preset, run_scenario, Step};
use crate::common::wait_replica_offset;
use std::thread::sleep;
use std::time::Duration;

/// A scenario: its name, steps, the module's replies and keys' state.
type Scenario = (
    &'static str,
    Vec<Step>,
    Vec<&'static str>,
    Vec<&'static str>,
);

/// Scenarios on a frozen clock, the same transcript from both backends:
/// a refusal starts the penalty (the key takes the penalty's form and its
/// expiry); in it every call is refused with what is left of it, even after
/// the window turned, and its refusals do not extend it; RL.TTL tells it;
/// a refund gives back to the state but leaves it; a policy without
/// PENALTY still meets it; once it ended the state is written plainly.
#[test]
fn penalty_scenarios_agree_and_hold() {
    let fixed = ["LIMIT", "1", "WINDOW", "1000", "PENALTY", "5000"];
    let call = |head: &[&str], tail: &[&str]| -> Step {
        Step::Call(head.iter().chain(tail).map(|w| w.to_string()).collect())
    };
    let scenarios: Vec<Scenario> = vec![
        (
            "a refusal starts it",
            vec![
                call(&["RL.ADMIT", "k"], &fixed),
                call(&["RL.ADMIT", "k"], &fixed),
                call(&["RL.ADMIT", "k"], &fixed),
                call(&["RL.TTL", "k"], &fixed),
            ],
            vec![
                "[1, 1, 0, 0, 1000]",
                "[0, 1, 0, 5000, 5000]",
                "[0, 1, 0, 5000, 5000]",
                "5000",
            ],
            vec!["k +string penalty:ms+5000:ms+1000:1 now+5000"],
        ),
        (
            "after the window turned, still refused, not extended",
            vec![
                preset("k", "penalty:{ms+3000}:{ms-5}:1", Some(3000)),
                call(&["RL.ADMIT", "k"], &fixed),
                call(&["RL.ADMIT", "k", "LIMIT", "1", "WINDOW", "1000"], &[]),
                call(&["RL.TTL", "k", "LIMIT", "1"], &[]),
                call(&["RL.REFUND", "k"], &fixed),
                call(&["RL.ADMITALL", "1", "k", "POLICY"], &fixed),
            ],
            vec![
                "[0, 1, 0, 3000, 3000]",
                "[0, 1, 0, 3000, 3000]",
                "3000",
                "[0, 1, 0, 3000, 3000]",
                "[0, 1, 3000, [[0, 1, 0, 3000, 3000]]]",
            ],
            vec!["k +string penalty:ms+3000:ms-5:1 now+3000"],
        ),
        (
            "a refund gives back to the state, the penalty stays",
            vec![
                preset("k", "penalty:{ms+3000}:{ms+800}:2", Some(3000)),
                call(
                    &[
                        "RL.REFUND",
                        "k",
                        "LIMIT",
                        "2",
                        "WINDOW",
                        "1000",
                        "PENALTY",
                        "5000",
                    ],
                    &[],
                ),
            ],
            vec!["[0, 2, 0, 3000, 3000]"],
            vec!["k +string penalty:ms+3000:ms+800:1 now+3000"],
        ),
        (
            "at its end, admitted and written plainly",
            vec![
                preset("k", "penalty:{ms+0}:{ms+500}:1", Some(500)),
                call(
                    &[
                        "RL.ADMIT", "k", "LIMIT", "2", "WINDOW", "1000", "PENALTY", "5000",
                    ],
                    &[],
                ),
            ],
            vec!["[1, 2, 0, 0, 500]"],
            vec!["k +string 2 now+500"],
        ),
        (
            "RL.RESET lifts it",
            vec![
                preset("k", "penalty:{ms+3000}:{ms+800}:1", Some(3000)),
                call(&["RL.RESET", "k"], &[]),
                call(&["RL.ADMIT", "k"], &fixed),
            ],
            vec!["1", "[1, 1, 0, 0, 1000]"],
            vec!["k +string 1 now+1000"],
        ),
        (
            "sliding, and a penalty shorter than the algorithm's wait",
            vec![
                call(
                    &[
                        "RL.ADMIT", "s", "ALGO", "sliding", "LIMIT", "1", "WINDOW", "1000",
                        "PENALTY", "10",
                    ],
                    &[],
                ),
                call(
                    &[
                        "RL.ADMIT", "s", "ALGO", "sliding", "LIMIT", "1", "WINDOW", "1000",
                        "PENALTY", "10",
                    ],
                    &[],
                ),
            ],
            vec!["[1, 1, 0, 0, 2000]", "[0, 1, 0, 2000, 2000]"],
            vec![],
        ),
        (
            "in shadow mode it evolves, and nothing is refused",
            vec![
                call(&["RL.ADMIT", "k", "SHADOW"], &fixed),
                call(&["RL.ADMIT", "k", "SHADOW"], &fixed),
                call(&["RL.ADMIT", "k", "SHADOW"], &fixed),
            ],
            vec![
                "[1, 1, 0, 0, 1000]",
                "[1, 1, 0, 5000, 5000]",
                "[1, 1, 0, 5000, 5000]",
            ],
            vec!["k +string penalty:ms+5000:ms+1000:1 now+5000"],
        ),
        (
            "a corrupt penalty is an error, for a policy with or without PENALTY",
            vec![
                preset("k", "penalty:x:1:", None),
                call(&["RL.ADMIT", "k"], &fixed),
                call(&["RL.ADMIT", "k", "LIMIT", "1", "WINDOW", "1000"], &[]),
            ],
            vec![
                "!ERR limiter key holds a corrupt penalty",
                "!ERR limiter key holds a corrupt penalty",
            ],
            vec!["k +string penalty:x:1: -1"],
        ),
    ];
    let servers: Vec<(Backend, Server)> = BOTH.iter().map(|&b| (b, b.start())).collect();
    for (name, steps, replies, state) in &scenarios {
        let keys: Vec<&str> = match name.starts_with("sliding") {
            true => vec!["s"],
            false => vec!["k"],
        };
        let mut transcripts = Vec::new();
        for (backend, server) in &servers {
            let mut con = server.client();
            // The sliding window's numbers depend on the clock's phase.
            let pin = name.starts_with("sliding").then_some((1000, 0));
            transcripts.push(run_scenario(*backend, &mut con, steps, &keys, pin));
        }
        let module = &transcripts[0];
        assert_eq!(&module.replies, replies, "{name}");
        if !state.is_empty() {
            assert_eq!(&module.state, state, "{name}");
        }
        assert_eq!(module, &transcripts[1], "{name}: the library differs");
    }
}

/// Every algorithm starts a penalty and holds it past its own wait, on
/// both backends; at its end a call is admitted. By the server's clock (the
/// calls run in MULTI/EXEC after TIME): a call in the penalty is told
/// exactly what is left of it, and one past its end is admitted. The only
/// bound a busy machine could break is the call in the penalty landing in
/// it at all (250 ms in, 350 ms to spare): a run stalled past the end
/// proves nothing and is run again on a fresh key, up to 5 times.
#[test]
fn penalty_holds_for_every_algorithm_in_real_time() {
    for backend in BOTH {
        let server = backend.start();
        let mut con = server.client();
        for algo in ALGOS {
            let held = (0..5).find_map(|attempt| penalty_held(backend, &mut con, algo, attempt));
            assert!(
                held.is_some(),
                "{backend:?} {algo}: 5 runs stalled past the penalty"
            );
        }
    }
}

/// One run of `penalty_holds_for_every_algorithm_in_real_time` on a key of
/// its own; None when the call meant to land in the penalty came after it.
fn penalty_held(backend: Backend, con: &mut Connection, algo: &str, attempt: u32) -> Option<()> {
    let key = format!("p-{algo}-{attempt}");
    let burst = if algo == "leaky" { "0" } else { "1" };
    let mut call = vec![
        "RL.ADMIT", &key, "ALGO", algo, "LIMIT", "1", "WINDOW", "100", "PENALTY", "600",
    ];
    if algo != "fixed" && algo != "sliding" {
        call.extend(["BURST", burst]);
    }
    let admit = |con: &mut Connection| -> (i64, Vec<i64>) {
        let (now, replies) = timed(backend, con, &[&call]);
        (now, common::ints(&replies[0]))
    };
    assert_eq!(admit(con).1[0], 1, "{backend:?} {algo}");
    let (started, refused) = admit(con);
    assert_eq!(
        (refused[0], refused[3]),
        (0, 600),
        "{backend:?} {algo}: {refused:?}"
    );
    let value: String = redis::cmd("GET").arg(&key).query(con).unwrap();
    assert!(value.starts_with("penalty:"), "{backend:?} {algo}: {value}");
    let until = started + 600;
    assert!(
        value.starts_with(&format!("penalty:{until}:")),
        "{backend:?} {algo}: {value}"
    );
    // Past the algorithm's own wait (the window, one interval).
    sleep(Duration::from_millis(250));
    let (now, held) = admit(con);
    if now >= until {
        println!(
            "{backend:?} {algo}: stalled {} ms past the penalty, again",
            now - until
        );
        return None;
    }
    assert_eq!(held[0], 0, "{backend:?} {algo}: {held:?}");
    assert_eq!(held[3], until - now, "{backend:?} {algo}: {held:?}");
    sleep(Duration::from_millis((until - now) as u64 + 1));
    let (now, after) = admit(con);
    assert!(now >= until);
    assert_eq!(after[0], 1, "{backend:?} {algo}: {after:?}");
    let value: String = redis::cmd("GET").arg(&key).query(con).unwrap();
    assert!(
        !value.starts_with("penalty:"),
        "{backend:?} {algo}: {value}"
    );
    Some(())
}

/// A replica holds the penalty's form with the same absolute expiry, and a
/// restart from the AOF keeps it: refused there still. The same for the
/// ladder's form (ESCALATE) and its longer expiry.
#[test]
fn penalty_and_its_ladder_survive_a_replica_and_an_aof_restart() {
    for backend in BOTH {
        let mut primary = backend.start_with(&["--appendonly", "yes", "--appendfsync", "always"]);
        let replica = backend.start();
        replica.replica_of(&primary);
        let mut con = primary.client();
        let call = [
            "RL.ADMIT", "k", "LIMIT", "1", "WINDOW", "500", "PENALTY", "60000",
        ];
        let admit = |con: &mut Connection| -> Vec<i64> {
            common::ints(&common::run(con, &backend.call(&call)))
        };
        admit(&mut con);
        assert_eq!(admit(&mut con)[..4], [0, 1, 0, 60000], "{backend:?}");
        let value: String = redis::cmd("GET").arg("k").query(&mut con).unwrap();
        let at = pexpiretime(&mut con, "k");
        // The ladder's key: its second penalty (twice the first, preset as
        // ended 1 s ago), kept cap_ms past its end.
        let ladder = [
            "RL.ADMIT", "l", "LIMIT", "1", "WINDOW", "500", "PENALTY", "60000", "ESCALATE",
            "600000",
        ];
        let now = common::time_ms(&common::cmd_raw(&mut con, &["TIME"]));
        // The state (a full fixed window) lasts 30 s, not the window's
        // 500 ms, so a busy machine cannot let it end before the call.
        let preset = format!("penalty:{}/60000:{}:1", now - 1000, now + 30_000);
        common::cmd_raw(
            &mut con,
            &["SET", "l", &preset, "PXAT", &(now + 599_000).to_string()],
        );
        let second = common::ints(&common::run(&mut con, &backend.call(&ladder)));
        assert_eq!(second[..4], [0, 1, 0, 120000], "{backend:?}");
        let ladder_value: String = redis::cmd("GET").arg("l").query(&mut con).unwrap();
        let ladder_at = pexpiretime(&mut con, "l");
        let until: i64 = ladder_value["penalty:".len()..]
            .split('/')
            .next()
            .unwrap()
            .parse()
            .unwrap();
        assert!(
            ladder_value.contains("/120000:"),
            "{backend:?}: {ladder_value}"
        );
        assert_eq!(ladder_at, until + 600_000, "{backend:?}");
        wait_replica_offset(&primary, &replica);
        let mut rcon = replica.client();
        let on_replica: String = redis::cmd("GET").arg("k").query(&mut rcon).unwrap();
        assert_eq!(on_replica, value, "{backend:?}");
        assert_eq!(pexpiretime(&mut rcon, "k"), at, "{backend:?}");
        let on_replica: String = redis::cmd("GET").arg("l").query(&mut rcon).unwrap();
        assert_eq!(on_replica, ladder_value, "{backend:?}");
        assert_eq!(pexpiretime(&mut rcon, "l"), ladder_at, "{backend:?}");
        drop(con);
        drop(rcon);
        drop(replica);

        primary.stop();
        sleep(Duration::from_millis(600)); // the window turns meanwhile
        backend.restart(&mut primary);
        let mut con = primary.client();
        let after: String = redis::cmd("GET").arg("k").query(&mut con).unwrap();
        assert_eq!(after, value, "{backend:?}");
        assert_eq!(pexpiretime(&mut con, "k"), at, "{backend:?}");
        // Told exactly what is left of the penalty by the server's clock,
        // however long the restart took.
        let until: i64 = value["penalty:".len()..]
            .split(':')
            .next()
            .unwrap()
            .parse()
            .unwrap();
        let (now, replies) = timed(backend, &mut con, &[&call]);
        let held = common::ints(&replies[0]);
        assert_eq!(held[0], 0, "{backend:?}: {held:?}");
        assert_eq!(held[3], until - now, "{backend:?}: {held:?}");
        let after: String = redis::cmd("GET").arg("l").query(&mut con).unwrap();
        assert_eq!(after, ladder_value, "{backend:?}");
        assert_eq!(pexpiretime(&mut con, "l"), ladder_at, "{backend:?}");
    }
}

// ESCALATE --------------------------------------------------------------

/// The ladder's scenarios on a frozen clock, the same transcript and bytes
/// from both backends (earlier penalties preset in the key): a first
/// penalty of `ms`, twice the last one's within cap_ms of its end, at most
/// cap_ms, `ms` again cap_ms after it; a form without a length counts as
/// `ms`; the form is kept (and the key until `until + cap_ms`) while the
/// ladder remembers; a policy without ESCALATE writes plainly; a refund or
/// RL.TTL in the penalty leave it; RL.RESET clears it.
#[test]
fn escalation_scenarios_agree_and_hold() {
    let ladder = [
        "RL.ADMIT", "k", "LIMIT", "1", "WINDOW", "50", "PENALTY", "200", "ESCALATE", "700",
    ];
    let call =
        |words: &[&str]| -> Step { Step::Call(words.iter().map(|w| w.to_string()).collect()) };
    let scenarios: Vec<Scenario> = vec![
        (
            "the first penalty is ms, the key kept cap_ms past its end",
            vec![call(&ladder), call(&ladder), call(&ladder)],
            vec![
                "[1, 1, 0, 0, 50]",
                "[0, 1, 0, 200, 200]",
                "[0, 1, 0, 200, 200]",
            ],
            vec!["k +string penalty:ms+200/200:ms+50:1 now+900"],
        ),
        (
            "within cap_ms of the last one's end: twice its length",
            vec![
                preset("k", "penalty:{ms-100}/200:{ms+30}:1", Some(600)),
                call(&ladder),
            ],
            vec!["[0, 1, 0, 400, 400]"],
            vec!["k +string penalty:ms+400/400:ms+30:1 now+1100"],
        ),
        (
            "at most cap_ms",
            vec![
                preset("k", "penalty:{ms-100}/400:{ms+30}:1", Some(600)),
                call(&ladder),
                call(&["RL.TTL", "k", "LIMIT", "1", "WINDOW", "50"]),
            ],
            vec!["[0, 1, 0, 700, 700]", "700"],
            vec!["k +string penalty:ms+700/700:ms+30:1 now+1400"],
        ),
        (
            "cap_ms after the last one's end: ms again",
            vec![
                preset("k", "penalty:{ms-700}/700:{ms+30}:1", Some(30)),
                call(&ladder),
            ],
            vec!["[0, 1, 0, 200, 200]"],
            vec!["k +string penalty:ms+200/200:ms+30:1 now+900"],
        ),
        (
            "a form without a length counts as ms",
            vec![
                preset("k", "penalty:{ms-100}:{ms+30}:1", Some(30)),
                call(&ladder),
            ],
            vec!["[0, 1, 0, 400, 400]"],
            vec!["k +string penalty:ms+400/400:ms+30:1 now+1100"],
        ),
        (
            "an admission the ladder remembers keeps the form",
            vec![
                preset("k", "penalty:{ms-100}/400:0:", Some(600)),
                call(&ladder),
                call(&["RL.TTL", "k", "LIMIT", "1", "WINDOW", "50"]),
            ],
            vec!["[1, 1, 0, 0, 50]", "50"],
            vec!["k +string penalty:ms-100/400:ms+50:1 now+600"],
        ),
        (
            "a policy without ESCALATE writes the state plainly",
            vec![
                preset("k", "penalty:{ms-100}/400:0:", Some(600)),
                call(&ladder[..8]),
            ],
            vec!["[1, 1, 0, 0, 50]"],
            vec!["k +string 1 now+50"],
        ),
        (
            "a refund and RL.ADMITALL in the penalty leave it",
            vec![
                preset("k", "penalty:{ms+300}/400:{ms+30}:2", Some(300)),
                call(&[
                    "RL.REFUND",
                    "k",
                    "LIMIT",
                    "2",
                    "WINDOW",
                    "50",
                    "PENALTY",
                    "200",
                    "ESCALATE",
                    "700",
                ]),
                call(&[
                    "RL.ADMITALL",
                    "1",
                    "k",
                    "POLICY",
                    "LIMIT",
                    "2",
                    "WINDOW",
                    "50",
                    "PENALTY",
                    "200",
                    "ESCALATE",
                    "700",
                ]),
            ],
            vec!["[0, 2, 0, 300, 300]", "[0, 1, 300, [[0, 2, 0, 300, 300]]]"],
            vec!["k +string penalty:ms+300/400:ms+30:1 now+1000"],
        ),
        (
            "RL.RESET clears the ladder",
            vec![
                preset("k", "penalty:{ms-100}/400:{ms+30}:1", Some(600)),
                call(&["RL.RESET", "k"]),
                call(&ladder),
                call(&ladder),
            ],
            vec!["1", "[1, 1, 0, 0, 50]", "[0, 1, 0, 200, 200]"],
            vec!["k +string penalty:ms+200/200:ms+50:1 now+900"],
        ),
        (
            "a corrupt length is an error",
            vec![preset("k", "penalty:1/0:0:", None), call(&ladder)],
            vec!["!ERR limiter key holds a corrupt penalty"],
            vec!["k +string penalty:1/0:0: -1"],
        ),
    ];
    let servers: Vec<(Backend, Server)> = BOTH.iter().map(|&b| (b, b.start())).collect();
    for (name, steps, replies, state) in &scenarios {
        let mut transcripts = Vec::new();
        for (backend, server) in &servers {
            let mut con = server.client();
            transcripts.push(run_scenario(*backend, &mut con, steps, &["k"], None));
        }
        let module = &transcripts[0];
        assert_eq!(&module.replies, replies, "{name}");
        assert_eq!(&module.state, state, "{name}");
        assert_eq!(module, &transcripts[1], "{name}: the library differs");
    }
}

/// The ladder in real time (PENALTY 200 ESCALATE 700 on LIMIT 1 WINDOW
/// 50), both backends: a client that comes back as each penalty ends gets
/// 200, 400, 700, 700 ms; after 700 clean ms, 200 again.
///
/// By the server's clock: each admission and the refusal behind it run in
/// one MULTI/EXEC after TIME, so every penalty's start and end are known
/// and each length is checked exactly against the ladder's rule (twice the
/// last within 700 ms of its end, else 200). A busy machine can only make
/// a client come back late, which the rule then answers with 200: such a
/// run is still checked step by step, and the climb is run again (up to 5
/// times) until one run shows the whole of it.
#[test]
fn the_ladder_climbs_to_its_cap_and_resets_in_real_time() {
    for backend in BOTH {
        let server = backend.start();
        let mut con = server.client();
        let climbed = (0..5).any(|attempt| ladder_run(backend, &mut con, attempt));
        assert!(climbed, "{backend:?}: 5 runs stalled off the ladder");
    }
}

/// One run of the ladder on a key of its own: whether it climbed to the
/// cap without a stall.
fn ladder_run(backend: Backend, con: &mut Connection, attempt: u32) -> bool {
    const MS: i64 = 200;
    const CAP: i64 = 700;
    let key = format!("e{attempt}");
    let call = [
        "RL.ADMIT", &key, "LIMIT", "1", "WINDOW", "50", "PENALTY", "200", "ESCALATE", "700",
    ];
    // Admitted, then refused at the same instant: the refusal's time, its
    // penalty.
    let once = |con: &mut Connection| -> (i64, Vec<i64>) {
        let (now, replies) = timed(backend, con, &[&call, &call]);
        let admitted = common::ints(&replies[0]);
        assert_eq!(admitted[0], 1, "{backend:?}: {admitted:?}");
        let refused = common::ints(&replies[1]);
        assert_eq!(refused[..3], [0, 1, 0], "{backend:?}: {refused:?}");
        (now, refused)
    };
    let mut seen = Vec::new();
    let mut last: Option<(i64, i64)> = None; // (end, length)
    for _ in 0..4 {
        let (now, refused) = once(con);
        let want = match last {
            Some((end, length)) if now - end < CAP => (2 * length).clamp(MS, CAP),
            _ => MS,
        };
        assert_eq!(
            refused[3],
            want,
            "{backend:?}: after {seen:?}, {} ms past the last end",
            last.map_or(0, |(end, _)| now - end)
        );
        seen.push(want);
        last = Some((now + want, want));
        sleep(Duration::from_millis(want as u64 + 60));
    }
    // 700 clean ms after the last end forget it (a late return only more so).
    let (end, _) = last.unwrap();
    sleep(Duration::from_millis(700));
    let (now, refused) = once(con);
    assert!(now - end >= CAP);
    assert_eq!(refused[3], MS, "{backend:?}");
    if seen != [200, 400, 700, 700] {
        println!("{backend:?}: a busy machine broke the climb: {seen:?}, again");
        return false;
    }
    true
}

// ALIGN -----------------------------------------------------------------

/// `calls` in one MULTI/EXEC after TIME: the server's ms, and the replies.
fn timed(backend: Backend, con: &mut Connection, calls: &[&[&str]]) -> (i64, Vec<Value>) {
    let mut all = vec![vec!["TIME".to_string()]];
    all.extend(
        calls
            .iter()
            .map(|c| c.iter().map(|w| w.to_string()).collect()),
    );
    let mut replies = exec(backend, con, &all);
    let now = common::time_ms(&replies.remove(0));
    (now, replies)
}

/// Two keys first hit at different moments of one window expire at the
/// same multiple of WINDOW since the epoch, the window's end; the META
/// field does as the flag.
#[test]
fn aligned_windows_end_at_the_same_multiple_of_the_window() {
    for backend in BOTH {
        let server = backend.start();
        let mut con = server.client();
        common::cmd_raw(
            &mut con,
            &["HSET", "m", "max", "5", "duration", "1000", "align", "1"],
        );
        let w = 1000;
        let mut seen = 0;
        for _ in 0..20 {
            common::cmd_raw(&mut con, &["DEL", "a", "b"]);
            let a = ["RL.ADMIT", "a", "LIMIT", "5", "WINDOW", "1000", "ALIGN"];
            let (t1, r1) = timed(backend, &mut con, &[&a, &["PEXPIRETIME", "a"]]);
            sleep(Duration::from_millis(120));
            let b = ["RL.ADMIT", "b", "META", "m"];
            let (t2, r2) = timed(backend, &mut con, &[&b, &["PEXPIRETIME", "b"]]);
            let (at_a, at_b) = (common::int(&r1[1]), common::int(&r2[1]));
            let end = |t: i64| t - t % w + w;
            assert_eq!(at_a, end(t1), "{backend:?}");
            assert_eq!(at_b, end(t2), "{backend:?}");
            assert_eq!(
                common::ints(&r1[0])[4],
                end(t1) - t1,
                "{backend:?}: reset_after_ms"
            );
            if t1 / w == t2 / w {
                assert_eq!(at_a, at_b, "{backend:?}");
                assert_eq!(at_a % w, 0, "{backend:?}");
                seen += 1;
                if seen == 2 {
                    break;
                }
            }
        }
        assert_eq!(seen, 2, "{backend:?}: two calls never fell in one window");
    }
}

/// A request just before the boundary and one just after it land in
/// different windows: with LIMIT 1 both are admitted, while without
/// ALIGN the second would be refused.
#[test]
fn aligned_windows_turn_at_the_boundary() {
    for backend in BOTH {
        let server = backend.start();
        let mut con = server.client();
        let w = 1000;
        let mut done = false;
        for _ in 0..40 {
            common::cmd_raw(&mut con, &["DEL", "k", "plain"]);
            let now = common::server_time_ms(&mut con);
            // Wait for the last 60 ms of a window.
            let wait = (w - 60 - now % w).rem_euclid(w);
            sleep(Duration::from_millis(wait as u64));
            let aligned = ["RL.ADMIT", "k", "LIMIT", "1", "WINDOW", "1000", "ALIGN"];
            let plain = ["RL.ADMIT", "plain", "LIMIT", "1", "WINDOW", "1000"];
            let (t1, before) = timed(backend, &mut con, &[&aligned, &plain]);
            if t1 % w < 900 {
                continue; // the machine stalled: try again
            }
            sleep(Duration::from_millis((w - t1 % w + 20) as u64));
            let (t2, after) = timed(
                backend,
                &mut con,
                &[&aligned, &plain, &["PEXPIRETIME", "k"]],
            );
            if t2 / w != t1 / w + 1 || t2 - t1 >= w {
                continue;
            }
            assert_eq!(common::ints(&before[0])[0], 1, "{backend:?}");
            assert_eq!(
                common::ints(&after[0])[..3],
                [1, 1, 0],
                "{backend:?}: a new window"
            );
            assert_eq!(
                common::ints(&after[1])[0],
                0,
                "{backend:?}: the first-hit window holds"
            );
            assert_eq!(common::int(&after[2]), t2 - t2 % w + w, "{backend:?}");
            done = true;
            break;
        }
        assert!(done, "{backend:?}: never caught a boundary");
    }
}

// CALENDAR --------------------------------------------------------------

/// Chosen instants (UTC), their ms, and the next boundary (PEXPIRETIME)
/// for day, week, month, year: in UTC, at +05:30 and at -08:00. Computed
/// apart, with Python's datetime.
const INSTANTS: &[(&str, i64, [[i64; 4]; 3])] = &[
    // The last ms of February in a leap year (a Thursday).
    (
        "2024-02-29 23:59:59.999",
        1709251199999,
        [
            [1709251200000, 1709510400000, 1709251200000, 1735689600000],
            [1709317800000, 1709490600000, 1711909800000, 1735669800000],
            [1709280000000, 1709539200000, 1709280000000, 1735718400000],
        ],
    ),
    // The last ms of December (a Wednesday).
    (
        "2025-12-31 23:59:59.999",
        1767225599999,
        [
            [1767225600000, 1767571200000, 1767225600000, 1767225600000],
            [1767292200000, 1767551400000, 1769884200000, 1798741800000],
            [1767254400000, 1767600000000, 1767254400000, 1767254400000],
        ],
    ),
    // A Sunday 23:59:59.999.
    (
        "2025-03-16 23:59:59.999",
        1742169599999,
        [
            [1742169600000, 1742169600000, 1743465600000, 1767225600000],
            [1742236200000, 1742754600000, 1743445800000, 1767205800000],
            [1742198400000, 1742198400000, 1743494400000, 1767254400000],
        ],
    ),
];

/// Under a clock frozen at each chosen instant, a calendar limiter's key
/// expires at exactly the next boundary of its period, in UTC and with
/// offsets of both signs, inline and from the META hash, on both backends;
/// `reset_after_ms` counts to it, and RL.TTL too once it is full.
#[test]
fn calendar_periods_end_at_the_exact_next_boundary() {
    const PERIODS: [&str; 4] = ["day", "week", "month", "year"];
    // Names of fixed zones give their offsets (Etc/GMT+8 is 8 hours west:
    // POSIX signs); the index says which column of ends holds.
    const ZONES: [(Option<&str>, usize); 6] = [
        (None, 0),
        (Some("+05:30"), 1),
        (Some("-08:00"), 2),
        (Some("Asia/Kolkata"), 1),
        (Some("Etc/GMT+8"), 2),
        (Some("Etc/UTC"), 0),
    ];
    for backend in BOTH {
        for &(at, now, ends) in INSTANTS {
            let Some(server) = backend.start_frozen_at(at) else {
                return;
            };
            let mut con = server.client();
            assert_eq!(
                common::server_time_ms(&mut con),
                now,
                "{backend:?}: the frozen clock"
            );
            for (z, &(zone, column)) in ZONES.iter().enumerate() {
                for (p, period) in PERIODS.iter().enumerate() {
                    let key = format!("k:{period}:{z}");
                    let mut call = vec!["RL.ADMIT", &key, "LIMIT", "1", "CALENDAR", period];
                    if let Some(zone) = zone {
                        call.extend(["TZ", zone]);
                    }
                    let d = common::ints(&common::run(&mut con, &backend.call(&call)));
                    let want = ends[column][p];
                    let what = format!("{backend:?} {at} {period} {zone:?}");
                    assert_eq!(d[..4], [1, 1, 0, 0], "{what}");
                    assert_eq!(d[4], want - now, "{what}: reset_after_ms");
                    assert_eq!(pexpiretime(&mut con, &key), want, "{what}");
                    // Full: refused until the boundary; RL.TTL says so.
                    let d = common::ints(&common::run(&mut con, &backend.call(&call)));
                    assert_eq!((d[0], d[3]), (0, want - now), "{what}");
                    let ttl = [&["RL.TTL"], &call[1..]].concat();
                    let ttl = common::int(&common::run(&mut con, &backend.call(&ttl)));
                    assert_eq!(ttl, want - now, "{what}: RL.TTL");
                    // The same from the META hash.
                    let meta = format!("m:{period}:{z}");
                    let mut fields = vec!["HSET", &meta, "max", "1", "calendar", period];
                    if let Some(zone) = zone {
                        fields.extend(["tz", zone]);
                    }
                    common::cmd_raw(&mut con, &fields);
                    let by_meta = format!("{key}:meta");
                    let call = ["RL.ADMIT", &by_meta, "META", &meta];
                    common::run(&mut con, &backend.call(&call));
                    assert_eq!(pexpiretime(&mut con, &by_meta), want, "{what}: META");
                }
            }
        }
    }
}

/// The sliding window over calendar periods, on both backends: admitted on
/// the last ms of a leap February, its state lives to the end of March
/// (the next period); 10 days into March (21 of its 31 days still to
/// come), February's count weighs 21/31, and the state then lives to the
/// end of April. The module and the library give identical replies, bytes
/// and expiries.
#[test]
fn sliding_over_calendar_periods_weighs_each_period_by_its_own_length() {
    const DAY: i64 = 86_400_000;
    const FEB_1: i64 = 1_706_745_600_000;
    const MAR_1: i64 = 1_709_251_200_000;
    const APR_1: i64 = 1_711_929_600_000;
    const MAY_1: i64 = 1_714_521_600_000;
    const MAR_11: i64 = 1_710_115_200_000;
    assert_eq!((MAR_1 - FEB_1, APR_1 - MAR_1), (29 * DAY, 31 * DAY));
    fn call(cost: &str) -> [&str; 10] {
        [
            "RL.ADMIT", "s", "ALGO", "sliding", "LIMIT", "100", "CALENDAR", "month", "COST", cost,
        ]
    }
    let mut seen = Vec::new();
    for backend in BOTH {
        let Some(server) = backend.start_frozen_at("2024-02-29 23:59:59.999") else {
            return;
        };
        let mut con = server.client();
        let now = common::server_time_ms(&mut con);
        assert_eq!(now, MAR_1 - 1, "{backend:?}: the frozen clock");
        let mut log = Vec::new();
        let d = common::ints(&common::run(&mut con, &backend.call(&call("100"))));
        // Reset: the 1 ms left of February, then all of March.
        assert_eq!(d[..5], [1, 100, 0, 0, 1 + 31 * DAY], "{backend:?}");
        log.push(d);
        let stored = common::get(&mut con, "s").expect("the state");
        assert_eq!(stored, format!("sliding:{FEB_1}:100:0"), "{backend:?}");
        // Nothing of it is in view once March is over.
        assert_eq!(pexpiretime(&mut con, "s"), APR_1, "{backend:?}");
        let d = common::ints(&common::run(&mut con, &backend.call(&call("1"))));
        // One more fits 31/100 of March in, once February is its previous.
        let retry = 1 + 31 * DAY / 100;
        assert_eq!(
            d[..5],
            [0, 100, 0, retry, 1 + 31 * DAY],
            "{backend:?}: full"
        );
        log.push(d);
        drop(server);

        // Ten days into March, with February's state.
        let Some(server) = backend.start_frozen_at("2024-03-11 00:00:00.000") else {
            return;
        };
        let mut con = server.client();
        assert_eq!(common::server_time_ms(&mut con), MAR_11, "{backend:?}");
        let pxat = APR_1.to_string();
        common::cmd_raw(&mut con, &["SET", "s", &stored, "PXAT", &pxat]);
        // 100 * 21/31 = 67.7 in view: 32 whole requests fit (29 or 30 day
        // months would give 34 or 33).
        let d = common::ints(&common::run(&mut con, &backend.call(&call("0"))));
        assert_eq!(d[..5], [1, 100, 32, 0, 21 * DAY], "{backend:?}: peek");
        log.push(d);
        let d = common::ints(&common::run(&mut con, &backend.call(&call("32"))));
        // Reset: the rest of March, then all of April (30 days).
        assert_eq!(d[..5], [1, 100, 0, 0, 21 * DAY + 30 * DAY], "{backend:?}");
        log.push(d);
        let state = common::get(&mut con, "s").expect("the state");
        assert_eq!(state, format!("sliding:{MAR_1}:32:100"), "{backend:?}");
        assert_eq!(pexpiretime(&mut con, "s"), MAY_1, "{backend:?}");
        // One more fits once 23 days' worth of February's 100 has slid
        // out of view: 100 * t >= 23 days, t = 0.23 days.
        let d = common::ints(&common::run(&mut con, &backend.call(&call("1"))));
        assert_eq!(d[..5], [0, 100, 0, 23 * DAY / 100, 51 * DAY], "{backend:?}");
        log.push(d);
        let ttl = [
            "RL.TTL", "s", "ALGO", "sliding", "LIMIT", "100", "CALENDAR", "month",
        ];
        let ttl = common::int(&common::run(&mut con, &backend.call(&ttl)));
        assert_eq!(ttl, 23 * DAY / 100, "{backend:?}: RL.TTL");
        // January's count is two periods back: forgotten in March.
        let jan_1 = FEB_1 - 31 * DAY;
        common::cmd_raw(&mut con, &["SET", "t", &format!("sliding:{jan_1}:3:0")]);
        let mut t = call("1");
        t[1] = "t";
        let d = common::ints(&common::run(&mut con, &backend.call(&t)));
        assert_eq!(
            d[..3],
            [1, 100, 99],
            "{backend:?}: two periods back is forgotten"
        );
        seen.push((
            log,
            state,
            common::dump(&mut con, "s"),
            pexpiretime(&mut con, "t"),
        ));
    }
    if let [a, b] = &seen[..] {
        assert_eq!(a, b, "the module and the library");
    }
}

/// Instants around daylight-saving changes of 2027 (UTC), their ms, and
/// for day, week, month and year the period's start, end and the next
/// period's end, under the zone's rule from tzdata 2026f. Computed apart
/// with Python's zoneinfo over the PyPI tzdata package: each local
/// midnight at the first UTC minute whose local time is at or after it.
/// Berlin: 2027-03-28 is 23 hours long, 2027-10-31 25. Santiago moves its
/// clocks from 24:00 on Saturday 2027-09-04 to 01:00: Sunday starts at the
/// change (04:00Z) and is 23 hours long. Beirut changes at 00:00 both
/// ways: Sunday 2027-03-28 starts at the change (22:00Z on the 27th), and
/// Saturday 2027-10-30 is 25 hours long (its midnight comes twice: the
/// first is 23:00 again).
#[allow(clippy::type_complexity)]
const DST_INSTANTS: &[(&str, &str, i64, [[i64; 3]; 4])] = &[
    (
        "Europe/Berlin",
        "2027-03-28 00:59:59.999",
        1806195599999,
        [
            [1806188400000, 1806271200000, 1806357600000],
            [1805670000000, 1806271200000, 1806876000000],
            [1803855600000, 1806530400000, 1809122400000],
            [1798758000000, 1830294000000, 1861916400000],
        ],
    ),
    (
        "Europe/Berlin",
        "2027-03-28 01:00:00.000",
        1806195600000,
        [
            [1806188400000, 1806271200000, 1806357600000],
            [1805670000000, 1806271200000, 1806876000000],
            [1803855600000, 1806530400000, 1809122400000],
            [1798758000000, 1830294000000, 1861916400000],
        ],
    ),
    (
        "Europe/Berlin",
        "2027-10-31 00:59:59.999",
        1824944399999,
        [
            [1824933600000, 1825023600000, 1825110000000],
            [1824415200000, 1825023600000, 1825628400000],
            [1822341600000, 1825023600000, 1827615600000],
            [1798758000000, 1830294000000, 1861916400000],
        ],
    ),
    (
        "Europe/Berlin",
        "2027-10-31 01:00:00.000",
        1824944400000,
        [
            [1824933600000, 1825023600000, 1825110000000],
            [1824415200000, 1825023600000, 1825628400000],
            [1822341600000, 1825023600000, 1827615600000],
            [1798758000000, 1830294000000, 1861916400000],
        ],
    ),
    // The last ms of the days before Berlin's 23 and 25-hour days.
    (
        "Europe/Berlin",
        "2027-03-27 22:59:59.999",
        1806188399999,
        [
            [1806102000000, 1806188400000, 1806271200000],
            [1805670000000, 1806271200000, 1806876000000],
            [1803855600000, 1806530400000, 1809122400000],
            [1798758000000, 1830294000000, 1861916400000],
        ],
    ),
    (
        "Europe/Berlin",
        "2027-10-30 21:59:59.999",
        1824933599999,
        [
            [1824847200000, 1824933600000, 1825023600000],
            [1824415200000, 1825023600000, 1825628400000],
            [1822341600000, 1825023600000, 1827615600000],
            [1798758000000, 1830294000000, 1861916400000],
        ],
    ),
    (
        "America/Santiago",
        "2027-09-05 03:59:59.999",
        1820116799999,
        [
            [1820030400000, 1820116800000, 1820199600000],
            [1819598400000, 1820199600000, 1820804400000],
            [1819771200000, 1822359600000, 1825038000000],
            [1798772400000, 1830308400000, 1861930800000],
        ],
    ),
    (
        "America/Santiago",
        "2027-09-05 04:00:00.000",
        1820116800000,
        [
            [1820116800000, 1820199600000, 1820286000000],
            [1819598400000, 1820199600000, 1820804400000],
            [1819771200000, 1822359600000, 1825038000000],
            [1798772400000, 1830308400000, 1861930800000],
        ],
    ),
    (
        "Asia/Beirut",
        "2027-03-27 21:59:59.999",
        1806184799999,
        [
            [1806098400000, 1806184800000, 1806267600000],
            [1805666400000, 1806267600000, 1806872400000],
            [1803852000000, 1806526800000, 1809118800000],
            [1798754400000, 1830290400000, 1861912800000],
        ],
    ),
    (
        "Asia/Beirut",
        "2027-03-27 22:00:00.000",
        1806184800000,
        [
            [1806184800000, 1806267600000, 1806354000000],
            [1805666400000, 1806267600000, 1806872400000],
            [1803852000000, 1806526800000, 1809118800000],
            [1798754400000, 1830290400000, 1861912800000],
        ],
    ),
    (
        "Asia/Beirut",
        "2027-10-30 20:59:59.999",
        1824929999999,
        [
            [1824843600000, 1824933600000, 1825020000000],
            [1824411600000, 1825020000000, 1825624800000],
            [1822338000000, 1825020000000, 1827612000000],
            [1798754400000, 1830290400000, 1861912800000],
        ],
    ),
    (
        "Asia/Beirut",
        "2027-10-30 21:00:00.000",
        1824930000000,
        [
            [1824843600000, 1824933600000, 1825020000000],
            [1824411600000, 1825020000000, 1825624800000],
            [1822338000000, 1825020000000, 1827612000000],
            [1798754400000, 1830290400000, 1861912800000],
        ],
    ),
];

/// Under a clock frozen around each daylight-saving change, with the zone
/// named inline and in the META hash, on both backends: the fixed window's
/// key expires at exactly the period's end (reset_after_ms and RL.TTL
/// count to it); the sliding window stores the period's start (a day that
/// starts in a gap starts at the change) and expires at the next period's
/// end, and one more request fits once 1/100 of the next period (23, 24 or
/// 25 hours, as it is) has passed. The module and the library give
/// identical replies, bytes and expiries.
#[test]
fn calendar_periods_follow_daylight_saving_changes() {
    const PERIODS: [&str; 4] = ["day", "week", "month", "year"];
    let mut seen: Vec<Vec<(Vec<i64>, String, i64)>> = Vec::new();
    for backend in BOTH {
        let mut log = Vec::new();
        for &(zone, at, now, bounds) in DST_INSTANTS {
            let Some(server) = backend.start_frozen_at(at) else {
                return;
            };
            let mut con = server.client();
            assert_eq!(common::server_time_ms(&mut con), now, "{backend:?} {at}");
            for (p, period) in PERIODS.iter().enumerate() {
                let [start, end, next_end] = bounds[p];
                let what = format!("{backend:?} {zone} {at} {period}");
                // The fixed window, inline.
                let key = format!("f:{period}");
                let call = [
                    "RL.ADMIT", &key, "LIMIT", "1", "CALENDAR", period, "TZ", zone,
                ];
                let d = common::ints(&common::run(&mut con, &backend.call(&call)));
                assert_eq!(d[..5], [1, 1, 0, 0, end - now], "{what}");
                assert_eq!(pexpiretime(&mut con, &key), end, "{what}");
                let d = common::ints(&common::run(&mut con, &backend.call(&call)));
                assert_eq!((d[0], d[3]), (0, end - now), "{what}: full");
                let ttl = [&["RL.TTL"], &call[1..]].concat();
                let ttl = common::int(&common::run(&mut con, &backend.call(&ttl)));
                assert_eq!(ttl, end - now, "{what}: RL.TTL");
                // The fixed window, the zone from the META hash.
                let meta = format!("m:{period}");
                let fields = ["HSET", &meta, "max", "1", "calendar", period, "tz", zone];
                common::cmd_raw(&mut con, &fields);
                let by_meta = format!("f:{period}:meta");
                let d = common::ints(&common::run(
                    &mut con,
                    &backend.call(&["RL.ADMIT", &by_meta, "META", &meta]),
                ));
                assert_eq!(d[..5], [1, 1, 0, 0, end - now], "{what}: META");
                assert_eq!(pexpiretime(&mut con, &by_meta), end, "{what}: META");
                // The sliding window: the period's start in its state.
                let key = format!("s:{period}");
                let sliding = |cost: &'static str| {
                    [
                        "RL.ADMIT", &key, "ALGO", "sliding", "LIMIT", "100", "CALENDAR", period,
                        "TZ", zone, "COST", cost,
                    ]
                    .map(str::to_owned)
                };
                let d = common::ints(&common::run(&mut con, &backend.call_owned(&sliding("100"))));
                assert_eq!(d[..5], [1, 100, 0, 0, next_end - now], "{what}: sliding");
                let state = common::get(&mut con, &key).expect("the state");
                assert_eq!(state, format!("sliding:{start}:100:0"), "{what}");
                assert_eq!(pexpiretime(&mut con, &key), next_end, "{what}");
                let retry = end - now + (next_end - end) / 100;
                let d = common::ints(&common::run(&mut con, &backend.call_owned(&sliding("1"))));
                assert_eq!(d[..5], [0, 100, 0, retry, next_end - now], "{what}");
                let ttl = [
                    "RL.TTL", &key, "ALGO", "sliding", "LIMIT", "100", "CALENDAR", period, "TZ",
                    zone,
                ];
                let ttl = common::int(&common::run(&mut con, &backend.call(&ttl)));
                assert_eq!(ttl, retry, "{what}: sliding RL.TTL");
                log.push((d, state, pexpiretime(&mut con, &key)));
            }
        }
        seen.push(log);
    }
    if let [a, b] = &seen[..] {
        assert_eq!(a, b, "the module and the library");
    }
}
