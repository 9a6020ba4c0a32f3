//! The seed scenarios of the fixed window, against a real server.

use crate::common;

use std::thread::sleep;
use std::time::Duration;

use crate::common::{cmd_err, cmd_int, cmd_ints, dump, pexpiretime, pttl, server_time_ms, Server};
use redis::Commands;
use serial_test::serial;

const ORDERS_META: &str = "emq:{orders}:meta";
const ORDERS: &str = "emq:{orders}:limiter";

#[test]
#[serial]
fn first_hit_opens_a_window_of_the_given_length() {
    let server = Server::start();
    let mut con = server.client();
    let before = server_time_ms(&mut con);
    assert_eq!(
        cmd_ints(&mut con, &["RL.ADMIT", "k", "LIMIT", "3", "WINDOW", "400"]),
        [1, 3, 2, 0, 400]
    );
    let after = server_time_ms(&mut con);
    let ttl = pttl(&mut con, "k");
    assert!((380..=400).contains(&ttl), "pttl {ttl}");
    let at = pexpiretime(&mut con, "k");
    assert!(
        at >= before + 400 && at <= after + 400,
        "pexpiretime {at} not in [{before}+400, {after}+400]"
    );
    let value: String = con.get("k").unwrap();
    assert_eq!(value, "1");
}

/// New counters start from one shared `1`: counting, INCR or APPEND on one
/// of them never shows in another.
#[test]
#[serial]
fn new_counters_never_share_their_value() {
    let server = Server::start();
    let mut con = server.client();
    let admit = |con: &mut redis::Connection, key: &str| {
        cmd_ints(con, &["RL.ADMIT", key, "LIMIT", "9", "WINDOW", "60000"])
    };
    for key in ["a", "b", "c", "d"] {
        assert_eq!(admit(&mut con, key)[0], 1);
    }
    admit(&mut con, "a");
    admit(&mut con, "a");
    let _: i64 = con.incr("b", 5).unwrap();
    let _: i64 = con.append("c", "0").unwrap();
    admit(&mut con, "e");
    let values: Vec<String> = con.mget(&["a", "b", "c", "d", "e"]).unwrap();
    assert_eq!(values, ["3", "6", "10", "1", "1"]);
}

#[test]
#[serial]
fn counts_up_then_refuses_with_the_keys_pttl() {
    let server = Server::start();
    let mut con = server.client();
    let admit = ["RL.ADMIT", "k", "LIMIT", "3", "WINDOW", "500"];
    assert_eq!(cmd_ints(&mut con, &admit)[..3], [1, 3, 2]);
    assert_eq!(cmd_ints(&mut con, &admit)[..3], [1, 3, 1]);
    assert_eq!(cmd_ints(&mut con, &admit)[..4], [1, 3, 0, 0]);
    let expiry_before = pexpiretime(&mut con, "k");
    let refused = cmd_ints(&mut con, &admit);
    let ttl = pttl(&mut con, "k");
    assert_eq!(refused[..3], [0, 3, 0]);
    assert!(
        (refused[3] - ttl).abs() <= 5,
        "retry_after {} vs pttl {ttl}",
        refused[3]
    );
    assert_eq!(
        refused[3], refused[4],
        "reset equals retry for a full window"
    );
    let count: i64 = con.get("k").unwrap();
    assert_eq!(count, 3, "a refusal changes nothing");
    assert_eq!(
        pexpiretime(&mut con, "k"),
        expiry_before,
        "a refusal keeps the window"
    );
}

#[test]
#[serial]
fn a_new_window_opens_after_expiry() {
    let server = Server::start();
    let mut con = server.client();
    let admit = ["RL.ADMIT", "k", "LIMIT", "2", "WINDOW", "200"];
    cmd_ints(&mut con, &admit);
    cmd_ints(&mut con, &admit);
    assert_eq!(cmd_ints(&mut con, &admit)[0], 0);
    sleep(Duration::from_millis(260));
    assert_eq!(cmd_ints(&mut con, &admit), [1, 2, 1, 0, 200]);
    let count: i64 = con.get("k").unwrap();
    assert_eq!(count, 1);
    let ttl = pttl(&mut con, "k");
    assert!((180..=200).contains(&ttl), "pttl {ttl}");
}

#[test]
fn the_limit_comes_from_meta_and_inline_overrides_it() {
    let server = Server::start();
    let mut con = server.client();
    let _: () = con
        .hset_multiple(ORDERS_META, &[("max", "3"), ("duration", "10000")])
        .unwrap();
    let admit = ["RL.ADMIT", ORDERS, "META", ORDERS_META];
    assert_eq!(cmd_ints(&mut con, &admit), [1, 3, 2, 0, 10000]);
    assert_eq!(cmd_ints(&mut con, &admit)[..3], [1, 3, 1]);
    assert_eq!(cmd_ints(&mut con, &admit)[..3], [1, 3, 0]);
    let refused = cmd_ints(&mut con, &admit);
    assert_eq!(refused[..3], [0, 3, 0]);
    assert!(refused[3] > 9_000 && refused[3] <= 10_000);

    // An inline LIMIT wins over `max`; the window still comes from `duration`.
    let wider = ["RL.ADMIT", ORDERS, "META", ORDERS_META, "LIMIT", "5"];
    assert_eq!(cmd_ints(&mut con, &wider)[..3], [1, 5, 1]);

    // An operator raises the cap in the hash: it applies at once.
    let _: () = con.hset(ORDERS_META, "max", "10").unwrap();
    assert_eq!(cmd_ints(&mut con, &admit)[..3], [1, 10, 5]);

    // An unconfigured limiter admits and writes nothing.
    assert_eq!(
        cmd_ints(&mut con, &["RL.ADMIT", "free", "META", "no:such:meta"]),
        [1, 0, 0, 0, 0]
    );
    assert_eq!(cmd_ints(&mut con, &["RL.ADMIT", "free"]), [1, 0, 0, 0, 0]);
    assert_eq!(
        cmd_ints(&mut con, &["RL.ADMIT", "free", "LIMIT", "0"]),
        [1, 0, 0, 0, 0]
    );
    let _: () = con.hset("nomax", "duration", "1000").unwrap();
    assert_eq!(
        cmd_ints(&mut con, &["RL.ADMIT", "free", "META", "nomax"]),
        [1, 0, 0, 0, 0]
    );
    let exists: bool = con.exists("free").unwrap();
    assert!(!exists);
    // Fields the limiter does not use are ignored.
    let _: () = con.hset("busy:meta", "max", "1").unwrap();
    let _: () = con.hset("busy:meta", "duration", "1000").unwrap();
    let _: () = con.hset("busy:meta", "paused", "yes").unwrap();
    assert_eq!(
        cmd_ints(&mut con, &["RL.ADMIT", "busy", "META", "busy:meta"])[..2],
        [1, 1]
    );
}

#[test]
fn a_limit_without_a_window_is_an_error() {
    let server = Server::start();
    let mut con = server.client();
    let err = cmd_err(&mut con, &["RL.ADMIT", "k", "LIMIT", "3"]);
    assert!(err.starts_with("ERR ") && err.contains("window"), "{err}");
    let _: () = con.hset("m", "max", "3").unwrap();
    let err = cmd_err(&mut con, &["RL.ADMIT", "k", "META", "m"]);
    assert!(err.contains("duration"), "{err}");
    assert!(!con.exists::<_, bool>("k").unwrap());
}

#[test]
fn cost_spends_several_and_zero_peeks() {
    let server = Server::start();
    let mut con = server.client();
    let base = ["RL.ADMIT", "k", "LIMIT", "10", "WINDOW", "60000", "COST"];
    let with_cost = |c: &'static str| -> Vec<&str> { base.iter().copied().chain([c]).collect() };

    // A peek on an empty limiter: full budget, no window to reset, nothing
    // written.
    assert_eq!(cmd_ints(&mut con, &with_cost("0")), [1, 10, 10, 0, 0]);
    assert!(!con.exists::<_, bool>("k").unwrap());

    assert_eq!(cmd_ints(&mut con, &with_cost("4"))[..3], [1, 10, 6]);
    assert_eq!(cmd_ints(&mut con, &with_cost("6"))[..3], [1, 10, 0]);
    let before = dump(&mut con, "k");
    let ttl_before = pexpiretime(&mut con, "k");
    // Full: a peek reports the state and changes nothing.
    assert_eq!(cmd_ints(&mut con, &with_cost("0"))[..3], [1, 10, 0]);
    let refused = cmd_ints(&mut con, &with_cost("1"));
    assert_eq!(refused[..3], [0, 10, 0]);
    assert!(refused[3] > 59_000);
    assert_eq!(dump(&mut con, "k"), before);
    assert_eq!(pexpiretime(&mut con, "k"), ttl_before);

    // A cost above the limit can never be admitted.
    let never = cmd_ints(
        &mut con,
        &[
            "RL.ADMIT", "other", "LIMIT", "10", "WINDOW", "1000", "COST", "11",
        ],
    );
    assert_eq!(never[..4], [0, 10, 10, -1]);
    assert!(!con.exists::<_, bool>("other").unwrap());
}

#[test]
fn rl_ttl_answers_the_backoff_only_at_or_over_the_limit() {
    let server = Server::start();
    let mut con = server.client();
    let _: () = con
        .hset_multiple("m", &[("max", "2"), ("duration", "5000")])
        .unwrap();
    assert_eq!(
        cmd_int(&mut con, &["RL.TTL", "k", "META", "m"]),
        0,
        "no counter yet"
    );
    cmd_ints(&mut con, &["RL.ADMIT", "k", "META", "m"]);
    assert_eq!(
        cmd_int(&mut con, &["RL.TTL", "k", "META", "m"]),
        0,
        "under the limit"
    );
    cmd_ints(&mut con, &["RL.ADMIT", "k", "META", "m"]);
    let backoff = cmd_int(&mut con, &["RL.TTL", "k", "META", "m"]);
    let ttl = pttl(&mut con, "k");
    assert!(
        backoff > 0 && (backoff - ttl).abs() <= 5,
        "{backoff} vs {ttl}"
    );
    // Inline LIMIT instead of META.
    assert!(cmd_int(&mut con, &["RL.TTL", "k", "LIMIT", "2"]) > 0);
    assert_eq!(cmd_int(&mut con, &["RL.TTL", "k", "LIMIT", "3"]), 0);
    // Unconfigured: 0.
    assert_eq!(cmd_int(&mut con, &["RL.TTL", "k"]), 0);
    assert_eq!(cmd_int(&mut con, &["RL.TTL", "k", "META", "nothing"]), 0);
    assert_eq!(cmd_int(&mut con, &["RL.TTL", "k", "LIMIT", "0"]), 0);
}

/// Given a window, RL.TTL reads foreign state as RL.ADMIT does: a counter
/// at its limit without a TTL, or with more time left than one window,
/// blocks one window, not for ever or for its whole TTL.
#[test]
fn rl_ttl_with_a_window_agrees_with_rl_admit_on_foreign_counters() {
    let server = Server::start();
    let mut con = server.client();
    let _: () = con.set("nottl", 100).unwrap();
    let _: () = redis::cmd("SET")
        .arg(&["long", "9", "PX", "100000000"])
        .query(&mut con)
        .unwrap();
    for (key, limit, window) in [("nottl", "5", "1000"), ("long", "3", "500")] {
        let policy = ["LIMIT", limit, "WINDOW", window];
        let ttl: Vec<&str> = ["RL.TTL", key].iter().chain(&policy).copied().collect();
        let admit: Vec<&str> = ["RL.ADMIT", key].iter().chain(&policy).copied().collect();
        // One MULTI: the server's clock stands still inside it.
        let (told, refused): (i64, Vec<i64>) = redis::pipe()
            .atomic()
            .cmd(ttl[0])
            .arg(&ttl[1..])
            .cmd(admit[0])
            .arg(&admit[1..])
            .query(&mut con)
            .unwrap();
        assert_eq!(refused[0], 0, "{key}");
        assert_eq!(
            told, refused[3],
            "{key}: RL.TTL {told} vs RL.ADMIT {refused:?}"
        );
        assert_eq!(told.to_string(), window, "{key}");
    }
    // Without a window, RL.TTL is the key's PTTL at the limit, as before.
    let _: () = redis::cmd("SET")
        .arg(&["plain", "3", "PX", "100000000"])
        .query(&mut con)
        .unwrap();
    assert!(cmd_int(&mut con, &["RL.TTL", "plain", "LIMIT", "3"]) > 99_000_000);
}

/// A refund that empties a fixed window deletes its counter, as for every
/// other algorithm, and the reply is that of no state.
#[test]
fn a_refund_to_empty_deletes_the_counter() {
    let server = Server::start();
    let mut con = server.client();
    let policy = ["LIMIT", "5", "WINDOW", "60000"];
    let with = |cmd: &'static str, extra: &[&'static str]| -> Vec<&'static str> {
        [cmd, "k"]
            .iter()
            .chain(&policy)
            .chain(extra)
            .copied()
            .collect()
    };
    cmd_ints(&mut con, &with("RL.ADMIT", &["COST", "2"]));
    let left = cmd_ints(&mut con, &with("RL.REFUND", &[]));
    assert_eq!(left[..3], [1, 5, 4]);
    assert!(left[4] > 59_000, "the window stays: {left:?}");
    assert_eq!(con.get::<_, i64>("k").unwrap(), 1);
    assert_eq!(
        cmd_ints(&mut con, &with("RL.REFUND", &["COST", "3"])),
        [1, 5, 5, 0, 0]
    );
    assert!(!con.exists::<_, bool>("k").unwrap());
}

#[test]
fn rl_limit_reads_the_cap() {
    let server = Server::start();
    let mut con = server.client();
    assert_eq!(cmd_int(&mut con, &["RL.LIMIT", "m"]), 0);
    let _: () = con.hset("m", "duration", "1000").unwrap();
    assert_eq!(cmd_int(&mut con, &["RL.LIMIT", "m"]), 0);
    let _: () = con.hset("m", "max", "42").unwrap();
    assert_eq!(cmd_int(&mut con, &["RL.LIMIT", "m"]), 42);
    let _: () = con.hset("m", "max", "lots").unwrap();
    let err = cmd_err(&mut con, &["RL.LIMIT", "m"]);
    assert!(err.starts_with("ERR ") && err.contains("'max'"), "{err}");
    let _: () = con.set("s", "x").unwrap();
    assert!(cmd_err(&mut con, &["RL.LIMIT", "s"]).starts_with("WRONGTYPE"));
}

#[test]
fn the_counter_is_a_plain_integer_shared_with_incr_clients() {
    let server = Server::start();
    let mut con = server.client();
    // An INCR client made the counter and forgot its TTL: it gets one now.
    let _: () = con.set("k", 2).unwrap();
    assert_eq!(
        cmd_ints(
            &mut con,
            &["RL.ADMIT", "k", "LIMIT", "5", "WINDOW", "60000"]
        )[..3],
        [1, 5, 2]
    );
    let ttl = pttl(&mut con, "k");
    assert!(ttl > 59_000, "adopted counter got pttl {ttl}");
    let n: i64 = con.incr("k", 1).unwrap();
    assert_eq!(n, 4);
    assert_eq!(
        cmd_ints(
            &mut con,
            &["RL.ADMIT", "k", "LIMIT", "5", "WINDOW", "60000"]
        )[..3],
        [1, 5, 0]
    );
    assert_eq!(
        cmd_ints(
            &mut con,
            &["RL.ADMIT", "k", "LIMIT", "5", "WINDOW", "60000"]
        )[0],
        0
    );

    // Over budget and without a TTL: refused, and given a TTL so it cannot block forever.
    let _: () = con.set("stuck", 99).unwrap();
    let refused = cmd_ints(
        &mut con,
        &["RL.ADMIT", "stuck", "LIMIT", "5", "WINDOW", "1000"],
    );
    assert_eq!(refused[..4], [0, 5, 0, 1000]);
    assert!(pttl(&mut con, "stuck") > 900);
}

#[test]
fn wrong_types_and_non_integers_are_refused_unchanged() {
    let server = Server::start();
    let mut con = server.client();
    let _: () = con.lpush("list", "a").unwrap();
    let _: () = con.set("text", "hello").unwrap();
    let _: () = con.set("float", "1.5").unwrap();
    for key in ["list", "text", "float"] {
        let before = dump(&mut con, key);
        let admit = cmd_err(&mut con, &["RL.ADMIT", key, "LIMIT", "3", "WINDOW", "1000"]);
        let ttl = cmd_err(&mut con, &["RL.TTL", key, "LIMIT", "3"]);
        if key == "list" {
            assert!(
                admit.starts_with("WRONGTYPE") && ttl.starts_with("WRONGTYPE"),
                "{admit} / {ttl}"
            );
        } else {
            assert!(
                admit.starts_with("ERR ") && admit.contains("integer"),
                "{admit}"
            );
            assert!(ttl.starts_with("ERR "), "{ttl}");
        }
        assert_eq!(dump(&mut con, key), before);
        assert_eq!(pttl(&mut con, key), -1);
    }
    let err = cmd_err(&mut con, &["RL.ADMIT", "k", "META", "text"]);
    assert!(err.starts_with("WRONGTYPE"), "{err}");
}

#[test]
fn a_refusal_fires_rl_hit_and_counts_in_info() {
    let server = Server::start_with(&["--notify-keyspace-events", "Ed"]);
    let mut con = server.client();
    common::subscribe!(pubsub = server, "__keyevent@*__:rl.*");

    let admit = ["RL.ADMIT", "hot", "LIMIT", "1", "WINDOW", "60000"];
    assert_eq!(cmd_ints(&mut con, &admit)[0], 1);
    let refused = cmd_ints(&mut con, &admit);
    assert_eq!(refused[0], 0);

    let msg = pubsub.get_message().unwrap();
    assert_eq!(msg.get_channel_name(), "__keyevent@0__:rl.hit");
    let key: String = msg.get_payload().unwrap();
    assert_eq!(key, "hot");

    let info: String = redis::cmd("INFO").arg("ratelimit").query(&mut con).unwrap();
    let field = |name: &str| -> i64 {
        info.lines()
            .find_map(|l| l.strip_prefix(&format!("ratelimit_{name}:")))
            .unwrap_or_else(|| panic!("no {name} in {info}"))
            .trim()
            .parse()
            .unwrap()
    };
    assert_eq!(field("calls_admitted"), 1);
    assert_eq!(field("calls_refused"), 1);
    assert_eq!(field("backoff_ms_total"), refused[3]);
}

#[test]
fn a_refusal_does_not_break_a_watch() {
    let server = Server::start();
    let mut con = server.client();
    let admit = ["RL.ADMIT", "w", "LIMIT", "1", "WINDOW", "60000"];
    cmd_ints(&mut con, &admit);
    let _: () = redis::cmd("WATCH").arg("w").query(&mut con).unwrap();
    assert_eq!(cmd_ints(&mut con, &admit)[0], 0);
    let done: Option<(i64,)> = redis::pipe()
        .atomic()
        .cmd("GET")
        .arg("w")
        .query(&mut con)
        .unwrap();
    assert_eq!(
        done,
        Some((1,)),
        "EXEC ran: the refusal did not touch the key"
    );

    let _: () = redis::cmd("WATCH").arg("w2").query(&mut con).unwrap();
    cmd_ints(
        &mut con,
        &["RL.ADMIT", "w2", "LIMIT", "1", "WINDOW", "60000"],
    );
    let done: Option<(i64,)> = redis::pipe()
        .atomic()
        .cmd("GET")
        .arg("w2")
        .query(&mut con)
        .unwrap();
    assert_eq!(
        done, None,
        "EXEC aborted: the admitted write touched the key"
    );
}

#[test]
fn keys_are_declared_for_routing_and_acl() {
    let server = Server::start();
    let mut con = server.client();
    let keys: Vec<String> = redis::cmd("COMMAND")
        .arg(&[
            "GETKEYS", "RL.ADMIT", "c", "LIMIT", "1", "WINDOW", "10", "META", "m", "COST", "1",
        ])
        .query(&mut con)
        .unwrap();
    assert_eq!(keys, ["c", "m"]);
    let keys: Vec<String> = redis::cmd("COMMAND")
        .arg(&["GETKEYS", "RL.TTL", "c", "META", "m"])
        .query(&mut con)
        .unwrap();
    assert_eq!(keys, ["c", "m"]);

    // Read-write on the counters, read-only on the meta hashes.
    let _: () = redis::cmd("ACL")
        .arg(&[
            "SETUSER", "tenant", "on", "nopass", "+@all", "~c:*", "%R~m:*",
        ])
        .query(&mut con)
        .unwrap();
    let _: () = con
        .hset_multiple("m:1", &[("max", "5"), ("duration", "1000")])
        .unwrap();
    let mut tenant = server.client();
    let _: () = redis::cmd("AUTH")
        .arg(&["tenant", "x"])
        .query(&mut tenant)
        .unwrap();
    assert_eq!(
        cmd_ints(&mut tenant, &["RL.ADMIT", "c:1", "META", "m:1"])[..2],
        [1, 5]
    );
    assert_eq!(cmd_int(&mut tenant, &["RL.LIMIT", "m:1"]), 5);
    let err = cmd_err(
        &mut tenant,
        &["RL.ADMIT", "m:1", "LIMIT", "1", "WINDOW", "10"],
    );
    assert!(err.starts_with("NOPERM"), "{err}");
    let err = cmd_err(&mut tenant, &["RL.ADMIT", "c:1", "META", "other"]);
    assert!(err.starts_with("NOPERM"), "{err}");
}
