//! Which server the suite runs against, so a run of the version matrix
//! (`make test-valkey8`) proves it used the server it meant to.
//!
//! `RL_EXPECT_VALKEY_VERSION`, when set, is a prefix the server's
//! `valkey_version` must start with (e.g. `8.1.`); the Makefile sets it for
//! `make test-valkey8`. Unset, the version is only printed.

use crate::common;

use crate::common::{cmd_ints, Server};

#[test]
fn the_server_is_the_expected_version_and_loads_the_module() {
    let server = Server::start();
    let mut con = server.client();
    let version = common::server_version(&mut con).expect("INFO server has no version");
    eprintln!(
        "server {} version {version}",
        common::server_binary().display()
    );
    if let Ok(want) = std::env::var("RL_EXPECT_VALKEY_VERSION") {
        assert!(
            version.starts_with(&want),
            "RL_EXPECT_VALKEY_VERSION={want} but the server is {version} ({})",
            common::server_binary().display()
        );
    }

    // The module is loaded under its name, and answers.
    let modules: Vec<redis::Value> = redis::cmd("MODULE").arg("LIST").query(&mut con).unwrap();
    let listed = format!("{modules:?}");
    assert!(listed.contains("ratelimit"), "MODULE LIST: {listed}");
    assert_eq!(
        cmd_ints(
            &mut con,
            &["RL.ADMIT", "k", "LIMIT", "1", "WINDOW", "60000"]
        )[..3],
        [1, 1, 0]
    );
}
