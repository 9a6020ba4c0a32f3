//! The managed-service shape: a server where no module can be loaded
//! (`enable-module-command no`), the library loaded by an administrator,
//! and an application user made with exactly the ACL rule that
//! docs/managed-valkey.md gives (read from the doc, so the two cannot
//! drift). That user has no @admin or @dangerous command, reaches only
//! `app:*` keys, can use every function there, and gets NOPERM elsewhere.

use crate::common;

use std::fs;
use std::path::Path;

use crate::common::backend::Backend;
use crate::common::{cmd_raw, error_text, module_path, show};
use redis::{Connection, Value};

/// The user name and the rules of the first `ACL SETUSER` line of the doc.
fn documented_rule() -> (String, Vec<String>) {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/managed-valkey.md");
    let doc = fs::read_to_string(&path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
    let line = doc
        .lines()
        .find_map(|l| l.split_once("ACL SETUSER ").map(|(_, rule)| rule))
        .unwrap_or_else(|| panic!("{} gives no `ACL SETUSER` line", path.display()));
    let mut words = line
        .trim_end()
        .trim_end_matches('`')
        .split_whitespace()
        .map(|w| {
            let unquoted = ['\'', '"']
                .iter()
                .find_map(|q| w.strip_prefix(*q).and_then(|r| r.strip_suffix(*q)));
            unquoted.unwrap_or(w).to_string()
        });
    let user = words.next().expect("a user name");
    (user, words.collect())
}

/// What an operator writes: policies, a counter left without a TTL (its
/// repair needs PEXPIREAT), and keys of another application.
fn fixtures(admin: &mut Connection) {
    for cmd in [
        &["HSET", "app:meta", "max", "2", "duration", "60000"][..],
        &[
            "HSET",
            "app:meta:gcra",
            "max",
            "2",
            "duration",
            "60000",
            "algorithm",
            "gcra",
        ],
        &["SET", "app:bare", "9"],
        &["HSET", "app:lmeta", "max", "1", "ttl", "60000"],
        // A lease key whose earliest lease has expired: RL.INFLIGHT counts
        // the live ones by score (ZCOUNT) on it.
        &["ZADD", "app:aged", "1", "gone", "32503680000000", "live"],
        &["PEXPIREAT", "app:aged", "32503680000000"],
        &["HSET", "other:meta", "max", "2", "duration", "60000"],
        &["SET", "other:k", "1", "PX", "60000"],
    ] {
        assert!(error_text(&cmd_raw(admin, cmd)).is_none(), "{cmd:?}");
    }
}

/// A connection authenticated as `user`.
fn login(port: u16, user: &str, rules: &[String]) -> Connection {
    let password = rules.iter().find_map(|r| r.strip_prefix('>')).unwrap_or("");
    let client = redis::Client::open(format!("redis://127.0.0.1:{port}/")).unwrap();
    let mut con = client.get_connection().unwrap();
    let reply = cmd_raw(&mut con, &["AUTH", user, password]);
    assert_eq!(reply, Value::Okay, "AUTH {user}");
    con
}

#[test]
fn an_application_user_with_the_documented_rule_uses_every_function_on_its_keys_only() {
    let backend = Backend::Functions;
    let server = backend.start();
    let mut admin = server.client();

    // No module can be loaded, and none is.
    let module = module_path();
    let refused = error_text(&cmd_raw(
        &mut admin,
        &["MODULE", "LOAD", module.to_str().unwrap()],
    ));
    assert!(
        refused
            .as_deref()
            .is_some_and(|e| e.starts_with("ERR MODULE command not allowed")),
        "MODULE LOAD: {refused:?}"
    );
    let modules: String = redis::cmd("INFO").arg("modules").query(&mut admin).unwrap();
    assert!(!modules.contains("ratelimit"), "{modules}");

    let (user, rules) = documented_rule();
    let mut setuser = vec!["ACL", "SETUSER", user.as_str()];
    setuser.extend(rules.iter().map(String::as_str));
    assert_eq!(cmd_raw(&mut admin, &setuser), Value::Okay, "{setuser:?}");

    // Nothing of @admin or @dangerous: every such command is denied.
    for category in ["admin", "dangerous"] {
        let names: Vec<String> = redis::cmd("COMMAND")
            .arg(&["LIST", "FILTERBY", "ACLCAT", category])
            .query(&mut admin)
            .unwrap();
        assert!(names.len() > 10, "@{category}: {names:?}");
        for name in names {
            // DRYRUN checks the arity first: pad to it with dummy words.
            let info = cmd_raw(&mut admin, &["COMMAND", "INFO", &name]);
            let arity = match &info {
                Value::Array(entries) => match entries.first() {
                    Some(Value::Array(fields)) => common::int(&fields[1]),
                    other => panic!("COMMAND INFO {name}: {other:?}"),
                },
                other => panic!("COMMAND INFO {name}: {other:?}"),
            };
            let mut words = vec!["ACL", "DRYRUN", user.as_str()];
            words.extend(name.split('|'));
            while words.len() - 3 < arity.unsigned_abs() as usize {
                words.push("x");
            }
            let reply = cmd_raw(&mut admin, &words);
            let text = common::try_text(&reply).unwrap_or_else(|| show(&reply));
            assert!(
                text.contains("no permissions to run the"),
                "{user} may run @{category} command {name}: {text}"
            );
        }
    }

    fixtures(&mut admin);
    let mut app = login(server.port, &user, &rules);
    let window = ["LIMIT", "2", "WINDOW", "60000"];
    let policy = |algo: &'static str| -> Vec<&'static str> {
        let mut p = vec!["ALGO", algo];
        p.extend(window);
        p
    };
    // Every function, through every path that writes (SET, INCRBY,
    // PEXPIRE, PEXPIREAT, DEL) or reads (GET, HMGET, PTTL, PEXPIRETIME,
    // TYPE, TIME).
    let mut allowed: Vec<Vec<&str>> = Vec::new();
    for algo in ["fixed", "sliding", "token", "gcra", "leaky"] {
        let key = match algo {
            "fixed" => "app:fixed",
            "sliding" => "app:sliding",
            "token" => "app:token",
            "gcra" => "app:gcra",
            _ => "app:leaky",
        };
        let p = policy(algo);
        let with = |head: &[&'static str], tail: &[&'static str]| -> Vec<&'static str> {
            [head, &p[..], tail].concat()
        };
        allowed.push(with(&["RL.ADMIT", key], &[]));
        // A second admit: the fixed window counts on an existing counter
        // (INCRBY).
        allowed.push(with(&["RL.ADMIT", key], &[]));
        allowed.push(with(&["RL.ADMIT", key], &["COST", "0"]));
        allowed.push(with(&["RL.ADMIT", key], &["COST", "2"]));
        allowed.push(with(&["RL.TTL", key], &[]));
        allowed.push(with(&["RL.REFUND", key], &[]));
        allowed.push(with(&["RL.REFUND", key], &["COST", "5"]));
        allowed.push(vec!["RL.RESET", key]);
    }
    allowed.extend([
        vec!["RL.ADMIT", "app:m", "META", "app:meta"],
        vec!["RL.ADMIT", "app:g", "META", "app:meta:gcra"],
        vec!["RL.TTL", "app:m", "META", "app:meta"],
        vec!["RL.REFUND", "app:m", "META", "app:meta"],
        vec!["RL.LIMIT", "app:meta"],
        vec!["RL.ADMIT", "app:bare", "LIMIT", "2", "WINDOW", "60000"],
        vec!["RL.THROTTLE", "app:t", "1", "1", "60"],
        vec!["RL.THROTTLE", "app:t", "1", "1", "60", "5"],
        vec![
            "RL.ADMITALL",
            "2",
            "app:a",
            "app:b",
            "POLICY",
            "LIMIT",
            "1",
            "WINDOW",
            "60000",
            "POLICY",
            "META",
            "app:meta",
        ],
        vec!["RL.RESET", "app:t"],
        vec!["RL.RESET", "app:nothing"],
        // Leases: every path (ZRANGE reads, ZADD, ZREM, PEXPIREAT).
        vec!["RL.ACQUIRE", "app:lease", "LIMIT", "2", "TTL", "60000"],
        vec![
            "RL.ACQUIRE",
            "app:lease",
            "LIMIT",
            "2",
            "TTL",
            "60000",
            "ID",
            "job",
        ],
        vec!["RL.ACQUIRE", "app:lease", "LIMIT", "2", "TTL", "60000"],
        vec!["RL.EXTEND", "app:lease", "job", "TTL", "60000"],
        vec!["RL.INFLIGHT", "app:lease"],
        vec!["RL.INFLIGHT", "app:aged"],
        vec!["RL.RELEASE", "app:lease", "job"],
        vec!["RL.ACQUIRE", "app:lease2", "META", "app:lmeta"],
        vec!["RL.ACQUIRE", "app:free"],
    ]);
    for call in &allowed {
        let reply = backend.raw(&mut app, call);
        assert!(
            error_text(&reply).is_none(),
            "{user}: {:?} -> {}",
            backend.call(call),
            show(&reply)
        );
    }
    // The lease calls did what they say under the user's rights.
    let leased = cmd_raw(&mut admin, &["ZCARD", "app:lease"]);
    assert_eq!(leased, Value::Int(1), "app:lease after release");
    let lease_at = common::pexpiretime(&mut admin, "app:lease");
    assert!(lease_at > 0, "app:lease expiry {lease_at}");
    // The repair of the bare counter happened under the user's rights.
    let pttl = common::pttl(&mut admin, "app:bare");
    assert!(pttl > 0 && pttl <= 60_000, "app:bare pttl {pttl}");

    // Any key outside app:*, counter or META hash, is refused before the
    // library runs, and nothing is written.
    let denied: Vec<Vec<&str>> = vec![
        vec!["RL.ADMIT", "other:k", "LIMIT", "2", "WINDOW", "60000"],
        vec!["RL.ADMIT", "app:x", "META", "other:meta"],
        vec!["RL.TTL", "other:k", "LIMIT", "2", "WINDOW", "60000"],
        vec!["RL.LIMIT", "other:meta"],
        vec!["RL.REFUND", "other:k", "LIMIT", "2", "WINDOW", "60000"],
        vec!["RL.RESET", "other:k"],
        vec!["RL.THROTTLE", "other:t", "1", "1", "60"],
        vec![
            "RL.ADMITALL",
            "2",
            "app:y",
            "other:z",
            "POLICY",
            "LIMIT",
            "1",
            "WINDOW",
            "60000",
            "POLICY",
            "LIMIT",
            "1",
            "WINDOW",
            "60000",
        ],
        vec!["RL.ACQUIRE", "other:lease", "LIMIT", "1", "TTL", "60000"],
        vec!["RL.ACQUIRE", "app:x", "META", "other:meta"],
        vec!["RL.RELEASE", "other:lease", "job"],
        vec!["RL.EXTEND", "other:lease", "job", "TTL", "60000"],
        vec!["RL.INFLIGHT", "other:lease"],
    ];
    let watched = [
        "other:k",
        "other:t",
        "other:z",
        "other:lease",
        "app:x",
        "app:y",
    ];
    let before: Vec<_> = watched
        .iter()
        .map(|k| {
            (
                common::dump(&mut admin, k),
                common::pexpiretime(&mut admin, k),
            )
        })
        .collect();
    for call in &denied {
        let reply = backend.raw(&mut app, call);
        let err = error_text(&reply).unwrap_or_default();
        assert!(
            err.starts_with("NOPERM "),
            "{user}: {:?} -> {}",
            backend.call(call),
            show(&reply)
        );
    }
    let after: Vec<_> = watched
        .iter()
        .map(|k| {
            (
                common::dump(&mut admin, k),
                common::pexpiretime(&mut admin, k),
            )
        })
        .collect();
    assert_eq!(before, after, "a refused call wrote");
    // Nor can the user replace or drop the library.
    for call in [
        vec!["FUNCTION", "LOAD", "REPLACE", "#!lua name=ratelimit\n"],
        vec!["FUNCTION", "FLUSH"],
    ] {
        let err = error_text(&cmd_raw(&mut app, &call)).unwrap_or_default();
        assert!(err.starts_with("NOPERM "), "{call:?}: {err}");
    }
    // MODULE is refused to everyone here, before any ACL check.
    let err = error_text(&cmd_raw(
        &mut app,
        &["MODULE", "LOAD", module.to_str().unwrap()],
    ));
    assert_eq!(err, refused, "MODULE LOAD as {user}");

    // The rule is minimal: without any one of the commands it grants, some
    // call above fails.
    for (i, grant) in rules.iter().enumerate() {
        if !grant.starts_with('+') || grant.starts_with("+@") {
            continue;
        }
        assert_eq!(cmd_raw(&mut admin, &["FLUSHALL"]), Value::Okay);
        fixtures(&mut admin);
        let mut fewer: Vec<&str> = vec!["ACL", "SETUSER", "fewer", "reset"];
        fewer.extend(
            rules
                .iter()
                .enumerate()
                .filter(|(j, _)| *j != i)
                .map(|(_, r)| r.as_str()),
        );
        assert_eq!(cmd_raw(&mut admin, &fewer), Value::Okay, "{fewer:?}");
        let mut con = login(server.port, "fewer", &rules);
        let failed = allowed
            .iter()
            .filter(|call| error_text(&backend.raw(&mut con, call)).is_some())
            .count();
        assert!(
            failed > 0,
            "every call passed without {grant}: the rule is not minimal"
        );
    }
}
