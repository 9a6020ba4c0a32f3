//! Replicas and the AOF receive effects with absolute expiry, never the
//! time-dependent command: after any run of calls they agree exactly.

use std::thread::sleep;
use std::time::Duration;

use crate::common::{
    cmd_ints, pexpiretime, repl_offset, snapshot, wait_replica_offset, Server, QUIET,
};
use redis::Commands;

#[test]
fn a_replica_holds_the_same_values_and_expiries() {
    let primary = Server::start_with(QUIET);
    let replica = Server::start();
    replica.replica_of(&primary);
    let mut con = primary.client();

    let _: () = con
        .hset_multiple("meta", &[("max", "4"), ("duration", "30000")])
        .unwrap();
    let _: () = con.set("legacy", 1).unwrap(); // an INCR-made counter without TTL
    let mut keys: Vec<String> = (0..20).map(|i| format!("lim:{i}")).collect();
    keys.push("legacy".into());
    for round in 0..8 {
        for (i, key) in keys.iter().enumerate() {
            let window = (1_000 * (i + 1)).to_string();
            let cost = ((round + i) % 3).to_string();
            if i % 2 == 0 {
                cmd_ints(&mut con, &["RL.ADMIT", key, "META", "meta", "COST", &cost]);
            } else {
                cmd_ints(
                    &mut con,
                    &[
                        "RL.ADMIT", key, "LIMIT", "5", "WINDOW", &window, "COST", &cost,
                    ],
                );
            }
        }
        sleep(Duration::from_millis(3)); // let the clock move between rounds
    }
    wait_replica_offset(&primary, &replica);
    let on_primary = snapshot(&mut con, &keys);
    let on_replica = snapshot(&mut replica.client(), &keys);
    assert_eq!(on_primary, on_replica);
    assert!(
        on_primary.iter().all(|(_, v, at)| v.is_some() && *at > 0),
        "{on_primary:?}"
    );
}

const ALGOS: [&str; 5] = ["fixed", "sliding", "token", "gcra", "leaky"];

/// Refusals, peeks (`COST 0`, a refund of nothing too) and reads.
#[test]
fn refusals_peeks_and_reads_replicate_nothing() {
    let primary = Server::start_with(QUIET);
    let replica = Server::start();
    replica.replica_of(&primary);
    let mut con = primary.client();
    let admit = ["RL.ADMIT", "k", "LIMIT", "2", "WINDOW", "60000"];
    cmd_ints(&mut con, &admit);
    cmd_ints(&mut con, &admit);
    let _: () = con
        .hset_multiple("m", &[("max", "2"), ("duration", "60000")])
        .unwrap();
    for algo in ALGOS {
        let key = format!("{algo}-k");
        cmd_ints(
            &mut con,
            &[
                "RL.ADMIT", &key, "ALGO", algo, "LIMIT", "2", "WINDOW", "60000",
            ],
        );
    }
    wait_replica_offset(&primary, &replica);

    let before = repl_offset(&mut con);
    for _ in 0..20 {
        assert_eq!(cmd_ints(&mut con, &admit)[0], 0);
        cmd_ints(&mut con, &["RL.ADMIT", "k", "META", "m"]);
        cmd_ints(
            &mut con,
            &[
                "RL.ADMIT", "k", "LIMIT", "2", "WINDOW", "60000", "COST", "0",
            ],
        );
        cmd_ints(
            &mut con,
            &[
                "RL.ADMIT", "fresh", "LIMIT", "2", "WINDOW", "60000", "COST", "0",
            ],
        );
        cmd_ints(
            &mut con,
            &[
                "RL.ADMIT", "k", "LIMIT", "2", "WINDOW", "60000", "COST", "9",
            ],
        );
        cmd_ints(&mut con, &["RL.ADMIT", "unlimited"]);
        for algo in ALGOS {
            let key = format!("{algo}-k");
            cmd_ints(
                &mut con,
                &[
                    "RL.REFUND",
                    &key,
                    "ALGO",
                    algo,
                    "LIMIT",
                    "2",
                    "WINDOW",
                    "60000",
                    "COST",
                    "0",
                ],
            );
        }
        let _: i64 = redis::cmd("RL.TTL")
            .arg(&["k", "LIMIT", "2"])
            .query(&mut con)
            .unwrap();
        let _: i64 = redis::cmd("RL.LIMIT").arg("m").query(&mut con).unwrap();
        let _ = redis::cmd("RL.ADMIT")
            .arg(&["k", "LIMIT", "x"])
            .query::<redis::Value>(&mut con);
    }
    assert_eq!(repl_offset(&mut con), before, "nothing was propagated");
    let admitted = cmd_ints(
        &mut con,
        &["RL.ADMIT", "other", "LIMIT", "2", "WINDOW", "60000"],
    );
    assert_eq!(admitted[0], 1);
    assert!(
        repl_offset(&mut con) > before,
        "an admission does propagate"
    );
}

#[test]
fn an_aof_restart_keeps_every_value_and_absolute_expiry() {
    let mut server = Server::start_with(&["--appendonly", "yes", "--appendfsync", "always"]);
    let mut con = server.client();
    let _: () = con
        .hset_multiple("meta", &[("max", "3"), ("duration", "20000")])
        .unwrap();
    let keys: Vec<String> = (0..10).map(|i| format!("lim:{i}")).collect();
    for (i, key) in keys.iter().enumerate() {
        for _ in 0..=i % 4 {
            cmd_ints(&mut con, &["RL.ADMIT", key, "META", "meta"]);
        }
        sleep(Duration::from_millis(2));
    }
    // lim:3 and lim:7 took 4 calls against a limit of 3: over budget.
    assert_eq!(
        cmd_ints(&mut con, &["RL.ADMIT", "lim:3", "META", "meta"])[0],
        0
    );
    let before = snapshot(&mut con, &keys);
    drop(con);

    server.stop();
    sleep(Duration::from_millis(1_000));
    server.restart();
    let mut con = server.client();
    let after = snapshot(&mut con, &keys);
    assert_eq!(
        before, after,
        "a restart neither resets nor extends a window"
    );

    let refused = cmd_ints(&mut con, &["RL.ADMIT", "lim:3", "META", "meta"]);
    assert_eq!(refused[0], 0, "still over budget after the restart");
    let at = pexpiretime(&mut con, "lim:3");
    let (secs, micros): (i64, i64) = redis::cmd("TIME").query(&mut con).unwrap();
    let now = secs * 1000 + micros / 1000;
    assert!(
        (refused[3] - (at - now)).abs() <= 5,
        "retry {} vs {}",
        refused[3],
        at - now
    );
}

/// The commands an AOF holds, each as its words (RESP arrays of bulk strings).
fn aof_commands(dir: &std::path::Path) -> Vec<Vec<String>> {
    let aof_dir = dir.join("appendonlydir");
    let mut files: Vec<_> = std::fs::read_dir(&aof_dir)
        .expect("appendonlydir")
        .map(|e| e.expect("dir entry").path())
        .filter(|p| p.to_string_lossy().ends_with(".incr.aof"))
        .collect();
    files.sort();
    let mut commands = Vec::new();
    for file in files {
        let text = std::fs::read_to_string(&file).expect("a text AOF");
        let mut lines = text.split("\r\n");
        while let Some(header) = lines.next() {
            let Some(n) = header.strip_prefix('*') else {
                continue;
            };
            let n: usize = n.parse().expect("array length");
            let words = (0..n)
                .map(|_| {
                    lines.next().expect("bulk length");
                    lines.next().expect("bulk").to_string()
                })
                .collect();
            commands.push(words);
        }
    }
    commands
}

/// What the fixed window propagates: a new window is `SET … PXAT`, a call in
/// the same window only the counter's delta, and a refusal nothing.
#[test]
fn a_fixed_window_propagates_set_pxat_then_only_deltas() {
    let server = Server::start_with(&["--appendonly", "yes", "--appendfsync", "always"]);
    let mut con = server.client();
    let admit = ["RL.ADMIT", "fw", "LIMIT", "3", "WINDOW", "60000"];
    cmd_ints(&mut con, &admit);
    let at = pexpiretime(&mut con, "fw");
    cmd_ints(&mut con, &[&admit[..], &["COST", "2"]].concat());
    assert_eq!(cmd_ints(&mut con, &admit)[0], 0, "over the limit");
    cmd_ints(
        &mut con,
        &["RL.REFUND", "fw", "LIMIT", "3", "WINDOW", "60000"],
    );
    let value: String = con.get("fw").unwrap();
    assert_eq!(value, "2");

    let ours: Vec<Vec<String>> = aof_commands(&server.dir)
        .into_iter()
        .filter(|c| c.get(1).map(String::as_str) == Some("fw"))
        .collect();
    let words = |c: &[&str]| c.iter().map(|w| w.to_string()).collect::<Vec<_>>();
    assert_eq!(
        ours,
        vec![
            words(&["SET", "fw", "1", "PXAT", &at.to_string()]),
            words(&["INCRBY", "fw", "2"]),
            words(&["INCRBY", "fw", "-1"]),
        ]
    );
}

/// Another algorithm whose expiry holds (the sliding window, within one
/// window) restates only its value: `SET … KEEPTTL`. Replicas still agree.
#[test]
fn an_unchanged_expiry_propagates_as_keepttl() {
    let primary = Server::start_with(&["--appendonly", "yes", "--appendfsync", "always"]);
    let replica = Server::start();
    replica.replica_of(&primary);
    let mut con = primary.client();
    let admit = [
        "RL.ADMIT", "sw", "ALGO", "sliding", "LIMIT", "5", "WINDOW", "60000",
    ];
    cmd_ints(&mut con, &admit);
    let at = pexpiretime(&mut con, "sw");
    cmd_ints(&mut con, &admit);
    let second: String = con.get("sw").unwrap();
    assert_eq!(pexpiretime(&mut con, "sw"), at, "the window's expiry held");

    let ours: Vec<Vec<String>> = aof_commands(&primary.dir)
        .into_iter()
        .filter(|c| c.get(1).map(String::as_str) == Some("sw"))
        .collect();
    assert_eq!(ours.len(), 2, "{ours:?}");
    assert_eq!(ours[0][3..], ["PXAT".to_string(), at.to_string()]);
    assert_eq!(ours[1], ["SET", "sw", &second, "KEEPTTL"]);

    wait_replica_offset(&primary, &replica);
    let mut rcon = replica.client();
    let on_replica: String = rcon.get("sw").unwrap();
    assert_eq!(on_replica, second);
    assert_eq!(pexpiretime(&mut rcon, "sw"), at);
}
