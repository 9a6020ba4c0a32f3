//! Cluster routing for both backends: every key of a call is a key, so a
//! node that does not own it answers MOVED, keys of different slots get the
//! server's CROSSSLOT, and the owner answers as a standalone server would.
//! The library is loaded into every primary (Valkey does not spread
//! FUNCTION LOAD across shards).

use std::net::TcpListener;
use std::time::Duration;

use crate::common::backend::{load_library, show, start_without_module, Backend, BOTH};
use crate::common::cluster::{cluster_info, err_line, redirect};
use crate::common::{cmd_raw, wait_until, Server};
use redis::Value;

/// Two primaries of `backend`, slots split in half.
fn two_primaries(backend: Backend) -> Vec<Server> {
    let nodes: Vec<Server> = (0..2)
        .map(|_| {
            // A free bus port (the default, port + 10000, overflows for
            // ephemeral data ports).
            let bus = TcpListener::bind("127.0.0.1:0")
                .and_then(|l| l.local_addr())
                .map(|a| a.port().to_string())
                .expect("a free port");
            let args = [
                "--cluster-enabled",
                "yes",
                "--cluster-config-file",
                "nodes.conf",
                "--cluster-node-timeout",
                "3000",
                "--cluster-port",
                &bus,
            ];
            match backend {
                Backend::Module => Server::start_with(&args),
                Backend::Functions => start_without_module(&args),
            }
        })
        .collect();
    for (node, (a, b)) in nodes.iter().zip([("0", "8191"), ("8192", "16383")]) {
        let r = cmd_raw(&mut node.client(), &["CLUSTER", "ADDSLOTSRANGE", a, b]);
        assert_eq!(r, Value::Okay);
    }
    let bus: Vec<String> = redis::cmd("CONFIG")
        .arg(&["GET", "cluster-port"])
        .query(&mut nodes[1].client())
        .unwrap();
    let port = nodes[1].port.to_string();
    let r = cmd_raw(
        &mut nodes[0].client(),
        &["CLUSTER", "MEET", "127.0.0.1", &port, &bus[1]],
    );
    assert_eq!(r, Value::Okay);
    for node in &nodes {
        let mut con = node.client();
        wait_until(Duration::from_secs(30), "cluster_state:ok", || {
            cluster_info(&mut con, "cluster_state").as_deref() == Some("ok")
                && cluster_info(&mut con, "cluster_known_nodes").as_deref() == Some("2")
        });
        if backend == Backend::Functions {
            load_library(&mut con);
        }
    }
    nodes
}

fn slot(con: &mut redis::Connection, key: &str) -> i64 {
    redis::cmd("CLUSTER")
        .arg("KEYSLOT")
        .arg(key)
        .query(con)
        .unwrap()
}

/// What a call got from each node: the owner's reply, and from the other a
/// MOVED to the owner, or the same error (CROSSSLOT) from both.
fn routed(backend: Backend, nodes: &[Server], call: &[&str], key: &str) -> String {
    let mut con = nodes[0].client();
    let owner = usize::from(slot(&mut con, key) >= 8192);
    let mut out = String::new();
    for (i, node) in nodes.iter().enumerate() {
        let reply = backend.raw(&mut node.client(), call);
        let line = match redirect(&reply, "MOVED") {
            Some(port) => {
                assert_eq!(
                    port, nodes[owner].port,
                    "{backend:?} {call:?}: MOVED elsewhere"
                );
                assert_ne!(i, owner, "{backend:?} {call:?}: the owner redirected");
                "MOVED to the owner".to_string()
            }
            None => match err_line(&reply) {
                Some(e) => format!("!{e}"),
                None => {
                    assert_eq!(
                        i, owner,
                        "{backend:?} {call:?}: a non-owner answered {reply:?}"
                    );
                    show(&reply)
                }
            },
        };
        out += &format!("node{}: {line}; ", if i == owner { "=owner" } else { "" });
    }
    out
}

#[test]
fn every_key_routes_moves_and_crossslots_as_with_the_module() {
    // Every reply is independent of the clock: fresh limiters, full windows.
    let calls: Vec<(Vec<&str>, &str)> = vec![
        (vec!["RL.ADMIT", "a", "LIMIT", "3", "WINDOW", "60000"], "a"),
        (vec!["RL.ADMIT", "b", "LIMIT", "3", "WINDOW", "60000"], "b"),
        (
            vec!["HSET", "{a}:meta", "max", "2", "duration", "60000"],
            "{a}:meta",
        ),
        (vec!["RL.ADMIT", "{a}:x", "META", "{a}:meta"], "{a}:x"),
        (vec!["RL.ADMIT", "b", "META", "{a}:meta"], "b"),
        (vec!["RL.TTL", "a", "META", "{a}:meta"], "a"),
        (vec!["RL.TTL", "b", "META", "{a}:meta"], "b"),
        (vec!["RL.REFUND", "b", "META", "{a}:meta"], "b"),
        (vec!["RL.LIMIT", "{a}:meta"], "{a}:meta"),
        (vec!["RL.THROTTLE", "b", "1", "1", "1"], "b"),
        (vec!["RL.RESET", "a"], "a"),
        (
            vec![
                "RL.ADMITALL",
                "2",
                "u:{a}",
                "v:{a}",
                "POLICY",
                "LIMIT",
                "1",
                "WINDOW",
                "60000",
                "POLICY",
                "META",
                "{a}:meta",
            ],
            "u:{a}",
        ),
        (
            vec![
                "RL.ADMITALL",
                "2",
                "u:{a}",
                "b",
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
            "u:{a}",
        ),
        (
            vec![
                "RL.ADMITALL",
                "1",
                "b",
                "POLICY",
                "LIMIT",
                "1",
                "WINDOW",
                "60000",
                "META",
                "{a}:meta",
            ],
            "b",
        ),
    ];
    let mut transcripts = Vec::new();
    for backend in BOTH {
        let nodes = two_primaries(backend);
        {
            let mut con = nodes[0].client();
            assert_ne!(
                slot(&mut con, "a") >= 8192,
                slot(&mut con, "b") >= 8192,
                "a and b must live on different nodes"
            );
        }
        let lines: Vec<String> = calls
            .iter()
            .map(|(call, key)| format!("{call:?}: {}", routed(backend, &nodes, call, key)))
            .collect();
        transcripts.push(lines);
    }
    // The module and the library give every call the same answers.
    for (m, f) in transcripts[0].iter().zip(&transcripts[1]) {
        assert_eq!(m, f);
    }
    // And the answers are what routing means.
    let module = &transcripts[0];
    assert!(module[0].contains("[1, 3, 2, 0, 60000]"), "{}", module[0]);
    assert!(module[3].contains("[1, 2, 1, 0, 60000]"), "{}", module[3]);
    assert!(module[5].contains("owner: 0;"), "{}", module[5]);
    for i in [4, 6, 7, 12, 13] {
        assert!(module[i].contains("!CROSSSLOT"), "{}", module[i]);
    }
    assert!(module[11].contains("[1, 0, 0, "), "{}", module[11]);
}

#[test]
fn lease_calls_route_by_key_and_a_meta_in_another_slot_is_crossslot() {
    let calls: Vec<(Vec<&str>, &str)> = vec![
        (
            vec!["RL.ACQUIRE", "a", "LIMIT", "2", "TTL", "60000", "ID", "j"],
            "a",
        ),
        (vec!["HSET", "{a}:lm", "max", "1", "ttl", "60000"], "{a}:lm"),
        (
            vec!["RL.ACQUIRE", "{a}:x", "META", "{a}:lm", "ID", "k"],
            "{a}:x",
        ),
        (vec!["RL.ACQUIRE", "{a}:x", "META", "{a}:lm"], "{a}:x"),
        (vec!["RL.ACQUIRE", "b", "META", "{a}:lm"], "b"),
        (vec!["RL.ACQUIRE", "b", "META", "{a}:lm", "ID", "k"], "b"),
        (vec!["RL.INFLIGHT", "a"], "a"),
        (vec!["RL.EXTEND", "a", "j", "TTL", "60000"], "a"),
        (vec!["RL.RELEASE", "a", "j"], "a"),
        (vec!["RL.RELEASE", "b", "j"], "b"),
        (vec!["RL.INFLIGHT", "a"], "a"),
    ];
    let mut transcripts = Vec::new();
    for backend in BOTH {
        let nodes = two_primaries(backend);
        let lines: Vec<String> = calls
            .iter()
            .map(|(call, key)| format!("{call:?}: {}", routed(backend, &nodes, call, key)))
            .collect();
        // No call wrote to a node that does not own its key: b is on the
        // other node from a and holds nothing.
        let mut con = nodes[0].client();
        let b_owner = usize::from(slot(&mut con, "b") >= 8192);
        let b_keys = cmd_raw(&mut nodes[b_owner].client(), &["DBSIZE"]);
        assert_eq!(b_keys, Value::Int(0), "{backend:?}: {lines:#?}");
        let t = &lines;
        assert!(t[0].contains("owner: [1, 2, 1, 0, \"j\"]"), "{}", t[0]);
        assert!(t[0].contains("MOVED to the owner"), "{}", t[0]);
        assert!(t[2].contains("owner: [1, 1, 1, 0, \"k\"]"), "{}", t[2]);
        assert!(t[3].contains("owner: [0, 1, 1, "), "{}", t[3]);
        for i in [4, 5] {
            assert!(t[i].contains("!CROSSSLOT"), "{}", t[i]);
            assert!(!t[i].contains("owner: ["), "{}", t[i]);
        }
        assert!(t[6].contains("owner: 1;"), "{}", t[6]);
        assert!(t[7].contains("owner: 1;"), "{}", t[7]);
        assert!(t[8].contains("owner: 1;"), "{}", t[8]);
        assert!(t[9].contains("owner: 0;"), "{}", t[9]);
        assert!(t[10].contains("owner: 0;"), "{}", t[10]);
        transcripts.push(lines);
    }
    // Every backend answers every call alike, but for the refusal's wait,
    // which depends on the ms each server took.
    let no_wait = |lines: &Vec<String>| -> Vec<String> {
        lines
            .iter()
            .map(|l| match l.split_once("[0, 1, 1, ") {
                Some((head, tail)) => {
                    let rest = tail.split_once(',').map_or("", |(_, r)| r);
                    format!("{head}[0, 1, 1, <wait>,{rest}")
                }
                None => l.clone(),
            })
            .collect()
    };
    for other in &transcripts[1..] {
        assert_eq!(no_wait(other), no_wait(&transcripts[0]));
    }
}
