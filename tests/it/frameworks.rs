//! The Node.js framework package in `clients/node` against real servers
//! with real HTTP: an Express app with express-rate-limit 8 and
//! `ValkeyStore`, hit with fetch. It runs once against a server with the
//! module and once against a server with only the FUNCTION library, then
//! again with that server stopped (fail-open, fail-closed, timeouts). The
//! test program (`clients/node/test/frameworks.test.js`) makes the HTTP
//! checks; this file starts the servers, runs it, and checks its exit
//! status and that every check reported `ok`. The lease helper
//! (`withLease`) runs the same way, on both backends
//! (`clients/node/test/leases.test.js`). The `npm pack` test and the other
//! Node suites run from `node_package.rs`; the Python package's from
//! `python_package.rs`.
//!
//! Their dependencies come from `scripts/setup.sh test` (make test runs
//! it). Without them these tests fail; `make test SKIP_CLIENTS=1` leaves
//! them out by name and says how many.

use crate::common;
use crate::common::cluster;

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use crate::common::backend::Backend;

const REPO: &str = env!("CARGO_MANIFEST_DIR");
/// A test program that runs longer than this is hung.
const RUN_TIMEOUT: Duration = Duration::from_secs(120);

/// A dependency is missing: fail, or skip (return None) with RL_ALLOW_SKIP=1.
fn unavailable<T>(what: &str) -> Option<T> {
    let msg = format!(
        "{what}; install the client packages' test dependencies with \
         `scripts/setup.sh test` (make test runs it)"
    );
    if common::missing_tool_fails() {
        panic!("{msg} (RL_ALLOW_SKIP=1 skips instead)");
    }
    eprintln!("SKIPPED: {msg}");
    None
}

/// Runs a command to completion (killed after `RUN_TIMEOUT`): its stdout
/// if it succeeded, else a panic with stdout and stderr.
fn run(cmd: Command) -> String {
    common::run_to_completion(cmd, RUN_TIMEOUT)
}

/// `node`, with the package's dev dependencies installed by `npm ci`.
fn node() -> Option<Command> {
    let installed = Path::new(REPO).join("clients/node/node_modules/express-rate-limit");
    if !installed.is_dir() {
        return unavailable(&format!("{} is missing", installed.display()));
    }
    let version = Command::new("node").arg("--version").output();
    if !version.is_ok_and(|o| o.status.success()) {
        return unavailable("node is not on PATH");
    }
    let mut cmd = Command::new("node");
    cmd.current_dir(Path::new(REPO).join("clients/node"));
    Some(cmd)
}

/// A test program's command for `phase` against 127.0.0.1:`port`.
fn program(lang: &str, phase: &str, port: u16, backend: Option<Backend>) -> Option<Command> {
    let mut cmd = match lang {
        "node" => {
            let mut cmd = node()?;
            cmd.arg("test/frameworks.test.js");
            cmd
        }
        other => panic!("no framework program for {other}"),
    };
    cmd.arg(phase)
        .env("VALKEY_HOST", "127.0.0.1")
        .env("VALKEY_PORT", port.to_string());
    match backend {
        Some(Backend::Module) => cmd.env("RL_EXPECT_BACKEND", "module"),
        Some(Backend::Functions) => cmd.env("RL_EXPECT_BACKEND", "functions"),
        None => cmd.env_remove("RL_EXPECT_BACKEND"),
    };
    Some(cmd)
}

/// Every line of `out` that starts with one of `expected` is there, and
/// the program reported its PASS line.
fn assert_reported(out: &str, expected: &[&str], pass: &str) {
    for line in expected {
        assert!(
            out.lines().any(|l| l.starts_with(line)),
            "no `{line}` line in the output:\n{out}"
        );
    }
    assert!(out.lines().any(|l| l == pass), "no `{pass}` line:\n{out}");
}

/// The `ok` lines a live run prints on `backend`, by language.
fn live_checks(lang: &str, backend: Backend) -> Vec<String> {
    let name = match backend {
        Backend::Module => "module",
        Backend::Functions => "functions",
    };
    let mut checks: Vec<String> = (1..=3)
        .map(|i| format!("ok {name}: request {i} admitted"))
        .collect();
    checks.push(format!("ok {name}: request 4 refused"));
    checks.push(format!(
        "ok {name}: 50 concurrent requests, exactly 20 admitted"
    ));
    match lang {
        "node" => {
            checks.push(format!("ok {name}: store.get peeks 3 hits"));
            checks.push(format!("ok {name}: resetKey admits again"));
            checks.push(format!("ok {name}: decrement refunds"));
            checks.push(format!("ok {name}: Limiter admit/ttl/refund/reset/headers"));
            checks.push(format!(
                "ok {name}: server errors are raised, not failed open"
            ));
        }
        other => panic!("no framework program for {other}"),
    }
    if backend == Backend::Functions {
        checks.push("ok functions: without the library, BackendMissingError".into());
        checks.push("ok functions: opted in, the client loads the library itself".into());
    }
    checks
}

/// The `ok` lines of a run against the stopped server.
fn down_checks(lang: &str) -> Vec<String> {
    let mut checks = vec![
        "ok down: fail-open".to_string(),
        "ok down: fail-closed".to_string(),
    ];
    if lang == "node" {
        checks.push("ok down: fail-open after a 300 ms timeout: HTTP 200".into());
        checks.push("ok down: fail-closed after a 300 ms timeout: HTTP 503".into());
    }
    checks
}

/// The live run on a fresh server of `backend`, then the down run once that
/// server is stopped, on its port.
fn live_then_down(lang: &str, backend: Backend) {
    let mut server = backend.start();
    let Some(cmd) = program(lang, "live", server.port, Some(backend)) else {
        return;
    };
    let out = run(cmd);
    let checks = live_checks(lang, backend);
    let checks: Vec<&str> = checks.iter().map(String::as_str).collect();
    assert_reported(&out, &checks, &format!("PASS {lang} live"));

    server.stop();
    let Some(cmd) = program(lang, "down", server.port, None) else {
        return;
    };
    let out = run(cmd);
    let checks = down_checks(lang);
    let checks: Vec<&str> = checks.iter().map(String::as_str).collect();
    assert_reported(&out, &checks, &format!("PASS {lang} down"));
}

#[test]
fn node_express_store_on_the_module() {
    live_then_down("node", Backend::Module);
}

#[test]
fn node_express_store_on_the_function_library() {
    live_then_down("node", Backend::Functions);
}

/// The `ok` lines of a lease run on `backend`, by language.
fn lease_checks(lang: &str, name: &str) -> Vec<String> {
    let mut checks = vec![
        format!("ok {name}: acquire/release/extend/"),
        format!("ok {name}: unlimited stores nothing; META max/ttl apply"),
        format!("ok {name}: shadow acquires never refuse, take no lease, release as a no-op"),
        format!("ok {name}: the heartbeat keeps a 300 ms lease alive through 1 s"),
    ];
    match lang {
        "node" => {
            checks.push(format!(
                "ok {name}: withLease releases after fn, and after fn throws"
            ));
            checks.push(format!(
                "ok {name}: refusal throws LeaseRefusedError with retryAfterMs"
            ));
            checks.push(format!("ok {name}: a lost lease aborts held.signal"));
            checks.push(format!("ok {name}: 20 holders x 8 leases, LIMIT 3:"));
        }
        other => panic!("no lease program for {other}"),
    }
    checks
}

/// The lease program of `lang` against a fresh server of `backend`.
fn leases(lang: &str, backend: Backend) {
    let server = backend.start();
    let (cmd, file) = match lang {
        "node" => (node(), "test/leases.test.js"),
        other => panic!("no lease program for {other}"),
    };
    let Some(mut cmd) = cmd else {
        return;
    };
    let expect = match backend {
        Backend::Module => "module",
        Backend::Functions => "functions",
    };
    cmd.args([file, "live"])
        .env("VALKEY_HOST", "127.0.0.1")
        .env("VALKEY_PORT", server.port.to_string())
        .env("RL_EXPECT_BACKEND", expect);
    let out = run(cmd);
    let checks = lease_checks(lang, expect);
    let checks: Vec<&str> = checks.iter().map(String::as_str).collect();
    assert_reported(&out, &checks, &format!("PASS {lang} leases live"));
}

#[test]
fn node_leases_on_the_module() {
    leases("node", Backend::Module);
}

#[test]
fn node_leases_on_the_function_library() {
    leases("node", Backend::Functions);
}

/// Three primaries with the module, the library loaded into each: the
/// program's `cluster` phase, through iovalkey's Cluster, with the module
/// and with FCALL.
#[test]
fn cluster_clients_route_both_backends_by_key() {
    let Some(mut node_cmd) = node() else {
        return;
    };
    let cluster = cluster::Cluster::start(3);
    for node in &cluster.nodes {
        common::backend::load_library(&mut node.client());
    }
    let port = cluster.nodes[0].port.to_string();
    node_cmd
        .env("VALKEY_HOST", "127.0.0.1")
        .env("VALKEY_PORT", &port)
        .env_remove("RL_EXPECT_BACKEND");
    node_cmd.args(["test/frameworks.test.js", "cluster"]);
    let out = run(node_cmd);
    assert_reported(
        &out,
        &[
            "ok cluster: module: keys on every shard",
            "ok cluster: functions: keys on every shard",
        ],
        "PASS node cluster",
    );
}

#[test]
fn node_types_fit_express_rate_limit() {
    // tsc (strict) on index.d.ts and test/types.test.ts: ValkeyStore is an
    // express-rate-limit Store, and the plain API's types hold.
    let Some(mut cmd) = node() else {
        return;
    };
    cmd.args(["node_modules/typescript/bin/tsc", "-p", "tsconfig.json"]);
    run(cmd);
}
