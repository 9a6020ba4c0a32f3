//! Every malformed call, and every call on a bad stored value, gets the
//! module's exact error text from both backends, and changes nothing on
//! either (every key's DUMP and PEXPIRETIME before and after).

mod common;

use common::backend::{error_text, show, Backend, BOTH};
use common::{dump, pexpiretime, Server};
use redis::Connection;

const KEYS: &[&str] = &[
    "c",
    "m",
    "badmax",
    "negmax",
    "baddur",
    "zerodur",
    "hugedur",
    "badalgo",
    "badburst",
    "zeroburst",
    "text",
    "list",
    "sliding",
    "new",
    "a",
    "b",
    "t",
];

/// The same keys on each server.
fn fixtures(con: &mut Connection) {
    let setup: &[&[&str]] = &[
        &["SET", "c", "2", "PX", "60000"],
        &["HSET", "m", "max", "3", "duration", "60000"],
        &["HSET", "badmax", "max", "many", "duration", "1000"],
        &["HSET", "negmax", "max", "-1", "duration", "1000"],
        &["HSET", "baddur", "max", "3", "duration", "1.5"],
        &["HSET", "zerodur", "max", "3", "duration", "0"],
        &[
            "HSET",
            "hugedur",
            "max",
            "3",
            "duration",
            "9223372036854775807",
        ],
        &[
            "HSET",
            "badalgo",
            "max",
            "3",
            "duration",
            "1000",
            "algorithm",
            "magic",
        ],
        &[
            "HSET",
            "badburst",
            "max",
            "3",
            "duration",
            "1000",
            "algorithm",
            "token",
            "burst",
            "lots",
        ],
        &[
            "HSET",
            "zeroburst",
            "max",
            "3",
            "duration",
            "1000",
            "algorithm",
            "gcra",
            "burst",
            "0",
        ],
        &["SET", "text", "hello"],
        &["RPUSH", "list", "x"],
        &["SET", "sliding", "sliding:0:1:0"],
    ];
    for cmd in setup {
        let r = common::cmd_raw(con, cmd);
        assert!(error_text(&r).is_none(), "{cmd:?}: {r:?}");
    }
}

fn state(con: &mut Connection) -> Vec<(Option<Vec<u8>>, i64)> {
    KEYS.iter()
        .map(|k| (dump(con, k), pexpiretime(con, k)))
        .collect()
}

/// Calls in the module's syntax that every backend must refuse.
fn cases() -> Vec<Vec<&'static str>> {
    let lim = |algo: &'static str| vec!["ALGO", algo, "LIMIT", "5", "WINDOW", "10000"];
    let cat = |parts: Vec<Vec<&'static str>>| parts.concat();
    let p = "POLICY";
    let mut v: Vec<Vec<&str>> = vec![
        vec!["RL.ADMIT"],
        vec!["RL.TTL"],
        vec!["RL.LIMIT"],
        vec!["RL.LIMIT", "m", "extra"],
        vec!["RL.ADMIT", "c", "LIMIT"],
        vec!["RL.ADMIT", "c", "LIMIT", "abc", "WINDOW", "10"],
        vec!["RL.ADMIT", "c", "LIMIT", "-1", "WINDOW", "10"],
        vec!["RL.ADMIT", "c", "LIMIT", "1.5", "WINDOW", "10"],
        vec![
            "RL.ADMIT",
            "c",
            "LIMIT",
            "99999999999999999999",
            "WINDOW",
            "10",
        ],
        vec!["RL.ADMIT", "c", "LIMIT", " 5", "WINDOW", "10"],
        vec!["RL.ADMIT", "c", "LIMIT", "+5", "WINDOW", "10"],
        vec!["RL.ADMIT", "c", "LIMIT", "0x5", "WINDOW", "10"],
        vec!["RL.ADMIT", "c", "LIMIT", "5e2", "WINDOW", "10"],
        vec!["RL.ADMIT", "c", "LIMIT", "5", "WINDOW", "0"],
        vec!["RL.ADMIT", "c", "LIMIT", "5", "WINDOW", "-10"],
        vec!["RL.ADMIT", "c", "LIMIT", "5", "WINDOW", "ten"],
        vec![
            "RL.ADMIT",
            "c",
            "LIMIT",
            "5",
            "WINDOW",
            "9223372036854775807",
        ],
        vec!["RL.ADMIT", "c", "LIMIT", "5", "WINDOW", "10", "COST", "-1"],
        vec!["RL.ADMIT", "c", "LIMIT", "5", "WINDOW", "10", "COST", "x"],
        vec!["RL.ADMIT", "c", "LIMIT", "5", "WINDOW", "10", "COST"],
        vec!["RL.ADMIT", "c", "LIMIT", "5", "LIMIT", "6", "WINDOW", "10"],
        vec![
            "RL.ADMIT", "c", "LIMIT", "5", "WINDOW", "10", "window", "20",
        ],
        vec!["RL.ADMIT", "c", "META", "m", "META", "m"],
        vec!["RL.ADMIT", "c", "LIMIT", "5", "WINDOW", "10", "BOGUS", "1"],
        vec!["RL.ADMIT", "c", "LIMIT", "5", "WINDOW", "10", "extra"],
        vec!["RL.ADMIT", "new", "LIMIT", "5"],
        vec!["RL.ADMIT", "c", "META", "badmax"],
        vec!["RL.ADMIT", "c", "META", "negmax"],
        vec!["RL.ADMIT", "c", "META", "baddur"],
        vec!["RL.ADMIT", "c", "META", "zerodur"],
        vec!["RL.ADMIT", "c", "META", "hugedur"],
        vec!["RL.ADMIT", "c", "META", "text"],
        vec!["RL.ADMIT", "text", "LIMIT", "5", "WINDOW", "10"],
        vec!["RL.ADMIT", "list", "LIMIT", "5", "WINDOW", "10"],
        vec!["RL.ADMIT", "m", "LIMIT", "5", "WINDOW", "10"],
        vec!["RL.TTL", "c", "COST", "1"],
        vec![
            "RL.ADMIT", "c", "ALGO", "magic", "LIMIT", "5", "WINDOW", "10",
        ],
        vec![
            "RL.ADMIT", "c", "ALGO", "token", "ALGO", "gcra", "LIMIT", "5", "WINDOW", "10",
        ],
        vec!["RL.ADMIT", "c", "LIMIT", "5", "WINDOW", "10", "BURST", "3"],
        vec![
            "RL.ADMIT", "c", "ALGO", "sliding", "LIMIT", "5", "WINDOW", "10", "BURST", "3",
        ],
        vec![
            "RL.ADMIT", "new", "ALGO", "token", "LIMIT", "5", "WINDOW", "10", "BURST", "-1",
        ],
        vec![
            "RL.ADMIT", "new", "ALGO", "gcra", "LIMIT", "5", "WINDOW", "10", "BURST", "0",
        ],
        vec![
            "RL.ADMIT",
            "new",
            "ALGO",
            "token",
            "LIMIT",
            "1",
            "WINDOW",
            "4611686018427387903",
            "BURST",
            "9223372036854775807",
        ],
        vec![
            "RL.ADMIT", "c", "ALGO", "gcra", "LIMIT", "5", "WINDOW", "10",
        ],
        vec![
            "RL.ADMIT", "sliding", "ALGO", "token", "LIMIT", "5", "WINDOW", "10",
        ],
        vec!["RL.ADMIT", "c", "META", "badalgo"],
        vec!["RL.ADMIT", "new", "META", "badburst"],
        vec!["RL.ADMIT", "new", "META", "zeroburst"],
        vec![
            "RL.ADMIT", "new", "ALGO", "token", "LIMIT", "3", "WINDOW", "9", "BURST", "0",
        ],
        vec![
            "RL.ADMIT", "new", "ALGO", "leaky", "LIMIT", "3", "WINDOW", "9", "BURST", "-1",
        ],
        vec!["RL.REFUND", "c", "LIMIT", "5", "WINDOW", "10", "COST", "-2"],
        vec!["RL.REFUND", "list", "LIMIT", "5", "WINDOW", "10"],
        vec!["RL.REFUND", "text", "LIMIT", "5", "WINDOW", "10"],
        vec!["RL.RESET"],
        vec!["RL.RESET", "list"],
        vec!["RL.RESET", "m"],
        vec!["RL.THROTTLE", "t", "1", "1"],
        vec!["RL.THROTTLE", "t", "-1", "1", "1"],
        vec!["RL.THROTTLE", "t", "1", "0", "1"],
        vec!["RL.THROTTLE", "t", "1", "1", "0"],
        vec!["RL.THROTTLE", "t", "1", "1", "1", "-1"],
        vec!["RL.THROTTLE", "t", "1", "1", "1", "1", "1"],
        vec!["RL.THROTTLE", "t", "x", "1", "1"],
        vec!["RL.THROTTLE", "t", "9223372036854775807", "1", "1"],
        vec!["RL.THROTTLE", "t", "1", "1", "9223372036854775807"],
        vec!["RL.THROTTLE", "text", "1", "1", "1"],
        vec!["RL.THROTTLE", "list", "1", "1", "1"],
        vec!["RL.THROTTLE", "sliding", "1", "1", "1"],
        vec!["RL.TTL", "c", "LIMIT", "-3"],
        vec!["RL.TTL", "c", "META", "badmax"],
        vec!["RL.TTL", "list", "LIMIT", "3"],
        vec!["RL.TTL", "text", "LIMIT", "3", "WINDOW", "10"],
        vec!["RL.LIMIT", "badmax"],
        vec!["RL.LIMIT", "list"],
        vec!["RL.ADMITALL", "0", "a", "POLICY"],
        vec!["RL.ADMITALL", "2", "a", "a", "POLICY", "POLICY"],
        vec!["RL.ADMITALL", "2", "a", "b", "POLICY"],
        vec!["RL.ADMITALL", "1", "a", "LIMIT", "3", "POLICY"],
        vec!["RL.ADMITALL", "1", "a", "POLICY", "LIMIT", "x"],
        vec!["RL.ADMITALL", "1", "a", "POLICY", "LIMIT", "3"],
        vec![
            "RL.ADMITALL",
            "1",
            "list",
            "POLICY",
            "LIMIT",
            "3",
            "WINDOW",
            "10",
        ],
        cat(vec![
            vec!["RL.ADMITALL", "2", "a", "a", p],
            lim("token"),
            vec![p],
            lim("token"),
        ]),
        cat(vec![vec!["RL.ADMITALL", "2", "a", "b", p], lim("token")]),
        cat(vec![
            vec!["RL.ADMITALL", "1", "a", "LIMIT", "5", p],
            lim("token"),
        ]),
        vec!["RL.ADMITALL", "2", "a", "b", "BOGUS", "1", p, "LIMIT", "1"],
        cat(vec![
            vec!["RL.ADMITALL", "1", "a", p],
            lim("token"),
            vec!["BOGUS", "1"],
        ]),
        cat(vec![
            vec!["RL.ADMITALL", "1", "a", p],
            lim("sliding"),
            vec!["BURST", "2"],
        ]),
        cat(vec![
            vec!["RL.ADMITALL", "1", "a", "COST", "1", "COST", "2", p],
            lim("token"),
        ]),
        cat(vec![
            vec!["RL.ADMITALL", "2", "a", "list", p],
            lim("token"),
            vec![p],
            lim("token"),
        ]),
        cat(vec![
            vec!["RL.ADMITALL", "3", "a", "b", "sliding", p],
            lim("token"),
            vec![p],
            lim("gcra"),
            vec![p],
            lim("gcra"),
        ]),
        cat(vec![
            vec!["RL.ADMITALL", "2", "a", "b", p],
            lim("token"),
            vec![p, "META", "list"],
        ]),
        cat(vec![
            vec!["RL.ADMITALL", "2", "a", "b", p],
            lim("token"),
            vec![p, "META", "badmax"],
        ]),
        cat(vec![vec!["RL.ADMITALL", "1", "m", p], lim("gcra")]),
    ];
    // More than 256 arguments.
    let mut long = vec!["RL.ADMIT", "c", "LIMIT", "5", "WINDOW", "10"];
    long.extend(std::iter::repeat_n("COST", 260));
    v.push(long);
    v
}

/// A call as one line, its middle cut when it is long.
fn brief<S: AsRef<str>>(words: &[S]) -> String {
    let words: Vec<&str> = words.iter().map(AsRef::as_ref).collect();
    if words.len() <= 24 {
        return words.join(" ");
    }
    format!(
        "{} ... ({} words) ... {}",
        words[..10].join(" "),
        words.len(),
        words[words.len() - 2..].join(" ")
    )
}

#[test]
fn every_malformed_call_gets_the_modules_error_and_changes_nothing() {
    let servers: Vec<(Backend, Server)> = BOTH.iter().map(|&b| (b, b.start())).collect();
    let mut answers: Vec<Vec<String>> = Vec::new();
    for (backend, server) in &servers {
        let mut con = server.client();
        fixtures(&mut con);
        let before = state(&mut con);
        let mut errors = Vec::new();
        for call in cases() {
            let reply = backend.raw(&mut con, &call);
            errors.push(match error_text(&reply) {
                Some(e) => e,
                None => format!("(not an error) {}", show(&reply)),
            });
        }
        assert_eq!(
            state(&mut con),
            before,
            "{backend:?}: an error changed a key"
        );
        let pong: String = redis::cmd("PING").query(&mut con).unwrap();
        assert_eq!(pong, "PONG");
        answers.push(errors);
    }
    for (call, module) in cases().iter().zip(&answers[0]) {
        assert!(
            module.starts_with("ERR ") || module.starts_with("WRONGTYPE "),
            "the module answered {call:?} with {module:?}"
        );
    }
    let mut differences = Vec::new();
    for (i, call) in cases().iter().enumerate() {
        for (b, (backend, _)) in servers.iter().enumerate().skip(1) {
            if answers[b][i] != answers[0][i] {
                differences.push(format!(
                    "  call    {}\n  fcall   {}\n  module  {}\n  {backend:?} {}",
                    brief(call),
                    brief(&backend.call(call)),
                    answers[0][i],
                    answers[b][i]
                ));
            }
        }
    }
    assert!(
        differences.is_empty(),
        "{} of {} calls answered differently:\n{}",
        differences.len(),
        cases().len(),
        differences.join("\n\n")
    );
}

/// The module's numkeys is FCALL's own in the library's form: a count that
/// is not a number, or more than the words given, is refused by the server
/// before the library runs, with FCALL's text, and changes nothing.
#[test]
fn fcall_refuses_a_numkeys_it_cannot_use_before_the_library_runs() {
    let server = Backend::Functions.start();
    let mut con = server.client();
    fixtures(&mut con);
    let before = state(&mut con);
    let cases: &[(&[&str], &str)] = &[
        (
            &["RL.ADMITALL", "x", "a", "POLICY"],
            "ERR Bad number of keys provided",
        ),
        (
            &["RL.ADMITALL", "5", "a", "b", "POLICY"],
            "ERR Number of keys can't be greater than number of args",
        ),
    ];
    for (call, want) in cases {
        let reply = Backend::Functions.raw(&mut con, call);
        assert_eq!(error_text(&reply).as_deref(), Some(*want), "{call:?}");
    }
    assert_eq!(state(&mut con), before);
}
