//! Checks of the test harness itself (tests/common): server start with the
//! module loaded, restart with persistence, replication, error helpers.

use crate::common::*;

#[test]
fn starts_with_module_loaded() {
    let server = Server::start();
    let mut con = server.client();

    let pong: String = redis::cmd("PING").query(&mut con).unwrap();
    assert_eq!(pong, "PONG");
    assert!(server.log().contains("Module 'ratelimit' loaded"));
    assert_eq!(
        info_field(&mut con, "server", "process_id"),
        Some(server.pid().to_string())
    );

    // Error text comes back exactly as the server sent it.
    let err = cmd_err(&mut con, &["NOSUCHCOMMAND"]);
    assert!(
        err.starts_with("ERR unknown command 'NOSUCHCOMMAND'"),
        "{err}"
    );
    let _: () = redis::cmd("SET").arg("s").arg("v").query(&mut con).unwrap();
    assert_eq!(
        cmd_err(&mut con, &["LPUSH", "s", "x"]),
        "WRONGTYPE Operation against a key holding the wrong kind of value"
    );

    // Key helpers on a plain key.
    assert_eq!(
        cmd_ints(
            &mut con,
            &["BITFIELD", "b", "SET", "u8", "0", "7", "GET", "u8", "0"]
        ),
        [0, 7]
    );
    assert_eq!(pttl(&mut con, "s"), -1);
    assert_eq!(pttl(&mut con, "missing"), -2);
    assert_eq!(pexpiretime(&mut con, "s"), -1);
    assert!(dump(&mut con, "s").is_some());
    assert_eq!(dump(&mut con, "missing"), None);
}

#[test]
fn restart_keeps_data_with_aof() {
    let mut server = Server::start_with(&["--appendonly", "yes"]);
    let (port, dir) = (server.port, server.dir.clone());
    let mut con = server.client();
    let _: () = redis::cmd("SET")
        .arg("k")
        .arg("v")
        .arg("PX")
        .arg(600_000)
        .query(&mut con)
        .unwrap();
    let expires_at = pexpiretime(&mut con, "k");
    let before = dump(&mut con, "k");
    let old_pid = server.pid();

    server.restart();

    assert_eq!((server.port, &server.dir), (port, &dir));
    assert_ne!(server.pid(), old_pid);
    let mut con = server.client();
    let value: String = redis::cmd("GET").arg("k").query(&mut con).unwrap();
    assert_eq!(value, "v");
    assert_eq!(pexpiretime(&mut con, "k"), expires_at);
    assert_eq!(dump(&mut con, "k"), before);

    // After a hard kill too: the AOF is written before the reply is sent.
    server.kill();
    server.restart();
    let mut con = server.client();
    let value: String = redis::cmd("GET").arg("k").query(&mut con).unwrap();
    assert_eq!(value, "v");
}

#[test]
fn replica_follows_primary() {
    let primary = Server::start();
    let replica = Server::start();
    replica.replica_of(&primary);

    let mut p = primary.client();
    for i in 0..100 {
        let _: () = redis::cmd("SET")
            .arg(format!("k{i}"))
            .arg(i)
            .query(&mut p)
            .unwrap();
    }
    wait_replica_offset(&primary, &replica);

    let mut r = replica.client();
    let value: i64 = redis::cmd("GET").arg("k99").query(&mut r).unwrap();
    assert_eq!(value, 99);
    assert_eq!(dump(&mut r, "k42"), dump(&mut p, "k42"));
    assert_eq!(
        info_field(&mut r, "replication", "role").as_deref(),
        Some("slave")
    );
}
