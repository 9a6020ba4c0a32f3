//! The client examples, run as subprocesses against a real server: Python
//! (`clients/python/examples`, the valkey_ratelimit Limiter on valkey-py),
//! Node.js (`clients/node/examples`, the valkey-ratelimit Limiter on
//! iovalkey) and Rust (`examples/`, the `redis` crate). Each prints its HTTP
//! responses; every one is checked for the status, the IETF
//! `RateLimit-Policy` / `RateLimit` fields and `Retry-After`. With `--lease`
//! each caps work in flight with a lease helper (RL.ACQUIRE / RL.RELEASE),
//! checked against the semaphore's sorted set.
//!
//! The Python and Node.js libraries come from `dev/client-deps.sh`
//! (`make client-deps`; `.ci/run` runs it). Without them these tests fail
//! when `$CI` is set and are skipped, with a note on stderr, otherwise.

use crate::common;
use crate::common::cluster;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::common::backend::Backend;
use crate::common::{cmd_raw, wait_until, Server};
use redis::Commands;

const REPO: &str = env!("CARGO_MANIFEST_DIR");
/// An example that runs longer than this is hung (the Rust one may build first).
const RUN_TIMEOUT: Duration = Duration::from_secs(300);

/// A client library is missing: fail, or skip (return None) with RL_ALLOW_SKIP=1.
fn unavailable<T>(what: &str) -> Option<T> {
    let msg = format!(
        "{what}; install the examples' client libraries with `scripts/setup.sh test` \
         (make test runs it)"
    );
    if common::missing_tool_fails() {
        panic!("{msg} (RL_ALLOW_SKIP=1 skips instead)");
    }
    eprintln!("SKIPPED: {msg}");
    None
}

/// Run a command from the repo root to completion (killed after
/// `RUN_TIMEOUT`); stdout on success, a panic with stdout and stderr
/// otherwise.
fn run(mut cmd: Command) -> String {
    cmd.current_dir(REPO);
    common::run_to_completion(cmd, RUN_TIMEOUT)
}

/// The three examples, as commands that take the same options.
#[derive(Clone, Copy, Debug)]
enum Lang {
    Python,
    Node,
    Rust,
}

impl Lang {
    /// The command for this example, without its options; None if its
    /// runtime or client library is missing (and this is not CI).
    fn command(self) -> Option<Command> {
        match self {
            Lang::Python => {
                let python = python()?;
                let mut cmd = Command::new(python);
                cmd.arg("clients/python/examples/ratelimit_handler.py")
                    .env("PYTHONPATH", Path::new(REPO).join("clients/python/src"));
                Some(cmd)
            }
            Lang::Node => {
                let module =
                    Path::new(REPO).join("clients/node/node_modules/iovalkey/package.json");
                if !module.is_file() {
                    return unavailable(&format!(
                        "iovalkey is not installed ({} missing)",
                        module.display()
                    ));
                }
                let version = Command::new("node").arg("--version").output();
                if !version.is_ok_and(|o| o.status.success()) {
                    return unavailable("node is not on PATH");
                }
                let mut cmd = Command::new("node");
                cmd.arg("clients/node/examples/handler.js");
                Some(cmd)
            }
            Lang::Rust => {
                // The release profile, as `make build-test` builds every
                // example, so an up-to-date build is reused.
                let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
                let mut cmd = Command::new(cargo);
                cmd.args([
                    "run",
                    "--quiet",
                    "--release",
                    "--example",
                    "rust_handler",
                    "--",
                ]);
                Some(cmd)
            }
        }
    }

    /// Run the example's CLI against `port` with `args`; its parsed responses.
    fn run(self, port: u16, args: &[&str]) -> Option<Vec<Response>> {
        let mut cmd = self.command()?;
        cmd.args(["--port", &port.to_string()]).args(args);
        // The port comes from the argument, not from a stray environment.
        cmd.env_remove("VALKEY_PORT").env_remove("VALKEY_HOST");
        let out = run(cmd);
        Some(parse_responses(&out))
    }
}

/// The Python with valkey-py: `$RL_CLIENTS_PYTHON`, else the venv of
/// dev/client-deps.sh, else python3.
fn python() -> Option<PathBuf> {
    let python = match std::env::var_os("RL_CLIENTS_PYTHON") {
        Some(p) if !p.is_empty() => PathBuf::from(p),
        _ => {
            let venv = Path::new(REPO).join(".deps/clients-venv/bin/python");
            if venv.is_file() {
                venv
            } else {
                PathBuf::from("python3")
            }
        }
    };
    let check = Command::new(&python)
        .args(["-c", "import valkey"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
    if !check.is_ok_and(|s| s.success()) {
        return unavailable(&format!(
            "python module valkey is not importable by {}",
            python.display()
        ));
    }
    Some(python)
}

/// One response as the examples print it.
#[derive(Debug)]
struct Response {
    status: u16,
    headers: Vec<(String, String)>,
    body: String,
}

impl Response {
    fn header(&self, name: &str) -> Option<&str> {
        let mut found = self
            .headers
            .iter()
            .filter(|(n, _)| n.eq_ignore_ascii_case(name));
        let first = found.next().map(|(_, v)| v.as_str());
        assert!(found.next().is_none(), "{name} twice in {self:?}");
        first
    }
}

/// Parse `HTTP/1.1 <status> <reason>`, `Name: value` lines, a blank line and
/// a one-line body, repeated.
fn parse_responses(out: &str) -> Vec<Response> {
    let mut responses = Vec::new();
    let mut lines = out.lines().peekable();
    while let Some(line) = lines.next() {
        if line.is_empty() {
            continue;
        }
        let status = line
            .strip_prefix("HTTP/1.1 ")
            .and_then(|rest| rest.split(' ').next())
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| panic!("expected a status line, got {line:?} in:\n{out}"));
        let mut headers = Vec::new();
        for line in lines.by_ref() {
            if line.is_empty() {
                break;
            }
            let (name, value) = line
                .split_once(": ")
                .unwrap_or_else(|| panic!("bad header line {line:?} in:\n{out}"));
            headers.push((name.to_string(), value.to_string()));
        }
        let body = lines.next().unwrap_or("").to_string();
        responses.push(Response {
            status,
            headers,
            body,
        });
    }
    responses
}

/// `"<name>";a=1;b=2` -> ("name", [("a", 1), ("b", 2)]), strictly.
fn parse_item(value: &str) -> (String, Vec<(String, i64)>) {
    let mut parts = value.split(';');
    let name = parts.next().unwrap();
    let name = name
        .strip_prefix('"')
        .and_then(|n| n.strip_suffix('"'))
        .unwrap_or_else(|| panic!("policy name not a quoted string: {value:?}"));
    let params = parts
        .map(|p| {
            let (k, v) = p
                .split_once('=')
                .unwrap_or_else(|| panic!("bad parameter {p:?} in {value:?}"));
            let v = v
                .parse()
                .unwrap_or_else(|_| panic!("parameter {k} not an integer in {value:?}"));
            (k.to_string(), v)
        })
        .collect();
    (name.to_string(), params)
}

/// The checks every language's output must pass: `limit` admitted with
/// remaining counting down, then 429s with Retry-After, for a 60 s window.
fn check_limited(lang: Lang, responses: &[Response], limit: i64, client: &str) {
    let ctx = |i: usize| format!("{lang:?}, response {}: {:?}", i + 1, responses[i]);
    assert!(
        responses.len() > limit as usize,
        "{lang:?}: expected more than {limit} responses, got {responses:#?}"
    );
    for (i, r) in responses.iter().enumerate() {
        let admitted = (i as i64) < limit;
        assert_eq!(r.status, if admitted { 200 } else { 429 }, "{}", ctx(i));
        assert_eq!(
            r.header("RateLimit-Policy"),
            Some(format!("\"default\";q={limit};w=60").as_str()),
            "{}",
            ctx(i)
        );
        let (name, params) = parse_item(r.header("RateLimit").expect("RateLimit header"));
        assert_eq!(name, "default", "{}", ctx(i));
        let keys: Vec<&str> = params.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(keys, ["r", "t"], "{}", ctx(i));
        let (r_left, t) = (params[0].1, params[1].1);
        assert_eq!(
            r_left,
            (limit - 1 - i as i64).max(0),
            "remaining: {}",
            ctx(i)
        );
        // Seconds to the reset, rounded up: the whole window at first, never 0
        // while the window is open.
        assert!((1..=60).contains(&t), "t: {}", ctx(i));
        if i == 0 {
            assert_eq!(t, 60, "t of a fresh window: {}", ctx(i));
        }
        assert_eq!(
            r.header("Content-Type"),
            Some("application/json"),
            "{}",
            ctx(i)
        );
        if admitted {
            assert_eq!(r.header("Retry-After"), None, "{}", ctx(i));
            assert_eq!(
                r.body,
                format!("{{\"ok\":true,\"client\":\"{client}\"}}"),
                "{}",
                ctx(i)
            );
        } else {
            let retry: i64 = r
                .header("Retry-After")
                .unwrap_or_else(|| panic!("no Retry-After: {}", ctx(i)))
                .parse()
                .expect("Retry-After is an integer");
            assert!((1..=60).contains(&retry), "Retry-After: {}", ctx(i));
            // Fixed window: the back-off is the rest of the window.
            assert_eq!(retry, t, "Retry-After vs t: {}", ctx(i));
            assert_eq!(
                r.body,
                format!("{{\"error\":\"rate limited\",\"retry_after\":{retry}}}"),
                "{}",
                ctx(i)
            );
        }
    }
}

/// The standalone scenario for one language: LIMIT 3, five requests, then the
/// counter as the server holds it; an unlimited policy; a bad client id.
fn standalone(lang: Lang) {
    let server = Server::start();
    let client = format!("acme-{lang:?}").to_lowercase();
    let Some(responses) = lang.run(
        server.port,
        &["--client", &client, "--limit", "3", "-n", "5"],
    ) else {
        return;
    };
    check_limited(lang, &responses, 3, &client);

    // The example used the documented key and RL.ADMIT's fixed window: refused
    // calls did not count.
    let mut con = server.client();
    let key = format!("rl:{{{client}}}:default");
    let count: String = con.get(&key).unwrap();
    assert_eq!(count, "3", "{lang:?}: counter {key}");
    let pttl: i64 = con.pttl(&key).unwrap();
    assert!((1..=60_000).contains(&pttl), "{lang:?}: PTTL {pttl}");

    if matches!(lang, Lang::Python) {
        // The Python package's limit of 0 admits nothing: refused without
        // a call, a quota of 0 advertised, no Retry-After (waiting never
        // helps), nothing stored.
        let responses = lang
            .run(server.port, &["--client", "none", "--limit", "0"])
            .unwrap();
        assert_eq!(responses.len(), 1, "{lang:?}: {responses:?}");
        let r = &responses[0];
        assert_eq!(r.status, 429, "{lang:?}: {r:?}");
        assert_eq!(r.header("RateLimit-Policy"), Some("\"default\";q=0;w=60"));
        assert_eq!(r.header("RateLimit"), Some("\"default\";r=0;t=0"));
        assert_eq!(r.header("Retry-After"), None, "{lang:?}: {r:?}");
        let exists: bool = con.exists("rl:{none}:default").unwrap();
        assert!(!exists, "{lang:?}: a limit of 0 stored state");
    } else {
        // LIMIT 0 is unlimited: admitted, nothing advertised, nothing stored.
        let responses = lang
            .run(server.port, &["--client", "free", "--limit", "0"])
            .unwrap();
        assert_eq!(responses.len(), 1, "{lang:?}: {responses:?}");
        let r = &responses[0];
        assert_eq!(r.status, 200, "{lang:?}: {r:?}");
        assert_eq!(r.header("RateLimit-Policy"), None, "{lang:?}: {r:?}");
        assert_eq!(r.header("RateLimit"), None, "{lang:?}: {r:?}");
        let exists: bool = con.exists("rl:{free}:default").unwrap();
        assert!(!exists, "{lang:?}: an unlimited call stored state");
    }

    // A client id with braces would break the hash tag: refused with 400.
    let responses = lang.run(server.port, &["--client", "a}b"]).unwrap();
    assert_eq!(responses.len(), 1, "{lang:?}: {responses:?}");
    assert_eq!(responses[0].status, 400, "{lang:?}: {:?}", responses[0]);
}

#[test]
fn python_example_maps_rl_admit_onto_ratelimit_headers() {
    standalone(Lang::Python);
}

#[test]
fn node_example_maps_rl_admit_onto_ratelimit_headers() {
    standalone(Lang::Node);
}

#[test]
fn rust_example_maps_rl_admit_onto_ratelimit_headers() {
    standalone(Lang::Rust);
}

/// valkey-py with `protocol=3`: RL.ADMIT answers a map, read by field name.
#[test]
fn python_example_over_resp3() {
    let server = Server::start();
    let args = "--protocol 3 --client resp3 --limit 3 -n 5";
    let args: Vec<&str> = args.split(' ').collect();
    if let Some(responses) = Lang::Python.run(server.port, &args) {
        check_limited(Lang::Python, &responses, 3, "resp3");
    }
}

/// A one-node cluster holding every slot, announcing 127.0.0.1 so cluster
/// clients can route to it (a lone node otherwise reports an empty address).
fn one_node_cluster() -> Server {
    let server = Server::start_with(&[
        "--cluster-enabled",
        "yes",
        "--cluster-announce-ip",
        "127.0.0.1",
    ]);
    let mut con = server.client();
    let reply = cmd_raw(&mut con, &["CLUSTER", "ADDSLOTSRANGE", "0", "16383"]);
    assert_eq!(reply, redis::Value::Okay, "CLUSTER ADDSLOTSRANGE");
    wait_until(Duration::from_secs(10), "cluster_state:ok", || {
        let info: String = redis::cmd("CLUSTER").arg("INFO").query(&mut con).unwrap();
        info.lines().any(|l| l.trim_end() == "cluster_state:ok")
    });
    server
}

/// The cluster-aware clients (`--cluster`): the same responses, routed by slot.
fn cluster(lang: Lang) {
    let server = one_node_cluster();
    let client = format!("tenant-{lang:?}").to_lowercase();
    let args = ["--cluster", "--client", &client, "--limit", "2", "-n", "3"];
    let Some(responses) = lang.run(server.port, &args) else {
        return;
    };
    check_limited(lang, &responses, 2, &client);
    let mut con = server.client();
    let count: String = con.get(format!("rl:{{{client}}}:default")).unwrap();
    assert_eq!(count, "2");
}

#[test]
fn python_example_with_the_cluster_client() {
    cluster(Lang::Python);
}

#[test]
fn node_example_with_the_cluster_client() {
    cluster(Lang::Node);
}

#[test]
fn rust_example_with_the_cluster_client() {
    cluster(Lang::Rust);
}

/// A cluster client on three primaries, given only the first node: each
/// client's limiter lands on the node that owns its slot, and no call is
/// redirected. No node is asked `COMMAND GETKEYS`: the Python package's
/// Limiter names the node from the key's slot itself (valkey-py would
/// otherwise ask before every call, as RL.ADMIT has movable keys), and the
/// `redis` crate routes a
/// command it does not know by its first argument.
fn routes_by_key_on_three_primaries(lang: Lang) {
    // Before starting the cluster: the example may not be runnable here.
    if lang.command().is_none() {
        return;
    }
    let c = cluster::Cluster::start(3);
    // Tenants whose limiters live on every node.
    let mut tenants: Vec<(String, usize)> = Vec::new();
    for i in 0.. {
        let tenant = format!("tenant-{i}");
        let owner = c.owner_seen_by(0, c.keyslot(&format!("rl:{{{tenant}}}:default")));
        if tenants.iter().filter(|(_, o)| *o == owner).count() < 2 {
            tenants.push((tenant, owner));
        }
        if tenants.len() == 6 {
            break;
        }
    }
    for node in 0..3 {
        let _: () = redis::cmd("CONFIG")
            .arg("RESETSTAT")
            .query(&mut c.client(node))
            .unwrap();
    }
    for (tenant, owner) in &tenants {
        let args = ["--cluster", "--client", tenant, "--limit", "2", "-n", "3"];
        let responses = lang.run(c.nodes[0].port, &args).unwrap();
        check_limited(lang, &responses, 2, tenant);
        let count: String = c
            .client(*owner)
            .get(format!("rl:{{{tenant}}}:default"))
            .unwrap();
        assert_eq!(count, "2", "{tenant} on node {owner}");
    }
    for node in 0..3 {
        let mut con = c.client(node);
        let moved = common::info_field(&mut con, "errorstats", "errorstat_MOVED");
        assert_eq!(moved, None, "node {node} redirected calls");
        let calls = common::info_field(&mut con, "commandstats", "cmdstat_RL.ADMIT");
        let calls = calls.unwrap_or_default();
        assert!(calls.starts_with("calls=6,"), "node {node}: {calls}");
        let getkeys = common::info_field(&mut con, "commandstats", "cmdstat_command|getkeys");
        assert_eq!(getkeys, None, "node {node} was asked for keys");
    }
}

#[test]
fn python_cluster_client_routes_by_key_on_three_primaries() {
    routes_by_key_on_three_primaries(Lang::Python);
}

#[test]
fn rust_cluster_client_routes_by_key_on_three_primaries() {
    routes_by_key_on_three_primaries(Lang::Rust);
}

/// All three build the same key, so they share one limiter: a client's
/// budget is the same whichever service it calls.
#[test]
fn the_three_examples_share_one_limiter() {
    let server = Server::start();
    let args = ["--client", "shared", "--limit", "3"];
    let mut seen = Vec::new();
    for lang in [Lang::Python, Lang::Node, Lang::Rust, Lang::Python] {
        let Some(mut responses) = lang.run(server.port, &args) else {
            return;
        };
        assert_eq!(responses.len(), 1, "{lang:?}: {responses:?}");
        seen.push((lang, responses.remove(0)));
    }
    let statuses: Vec<u16> = seen.iter().map(|(_, r)| r.status).collect();
    assert_eq!(statuses, [200, 200, 200, 429], "{seen:#?}");
    let remaining: Vec<&str> = seen
        .iter()
        .map(|(_, r)| r.header("RateLimit").unwrap().split(";t=").next().unwrap())
        .collect();
    assert_eq!(
        remaining,
        [
            "\"default\";r=2",
            "\"default\";r=1",
            "\"default\";r=0",
            "\"default\";r=0"
        ],
        "{seen:#?}"
    );
}

/// The three examples with `--queue`: a leaky bucket (4 per
/// second, 2 may wait) shapes requests instead of refusing them. Sent one
/// by one, each after the first is told to wait about one interval, is held
/// that long and served; none is refused. With the queue already full, it
/// answers 429 with a Retry-After.
#[test]
fn python_example_holds_leaky_delays() {
    holds_leaky_delays(Lang::Python);
}

#[test]
fn node_example_holds_leaky_delays() {
    holds_leaky_delays(Lang::Node);
}

#[test]
fn rust_example_holds_leaky_delays() {
    holds_leaky_delays(Lang::Rust);
}

fn holds_leaky_delays(lang: Lang) {
    let server = Server::start();
    let shaping = ["--limit", "4", "--window", "1", "--queue", "2"];
    let started = Instant::now();
    let Some(responses) = lang.run(
        server.port,
        &[&["--client", "shaper", "-n", "4"], &shaping[..]].concat(),
    ) else {
        return;
    };
    let took = started.elapsed();
    let waited: Vec<i64> = responses
        .iter()
        .map(|r| {
            assert_eq!(r.status, 200, "{r:?}");
            let (_, rest) = r.body.split_once("\"waited_ms\":").expect("waited_ms");
            rest.trim_end_matches('}').parse().expect("an integer")
        })
        .collect();
    assert_eq!(waited[0], 0, "an empty queue: served at once");
    for w in &waited[1..] {
        assert!(
            (100..=250).contains(w),
            "held about one interval: {waited:?}"
        );
    }
    assert!(took >= Duration::from_millis(700), "held in all {took:?}");

    // The queue full (one served, two waiting; 1 a minute, so it stays
    // full while the example starts): the next is refused.
    let mut con = server.client();
    let fill = [
        "RL.ADMIT",
        "rl:{full}:default",
        "ALGO",
        "leaky",
        "LIMIT",
        "1",
        "WINDOW",
        "60000",
        "BURST",
        "2",
    ];
    for _ in 0..3 {
        assert_eq!(common::cmd_ints(&mut con, &fill)[0], 1);
    }
    let slow = [
        "--client", "full", "--limit", "1", "--window", "60", "--queue", "2",
    ];
    let responses = lang.run(server.port, &slow).expect("ran before");
    assert_eq!(responses[0].status, 429, "{:?}", responses[0]);
    let retry: i64 = responses[0]
        .header("Retry-After")
        .and_then(|v| v.parse().ok())
        .expect("Retry-After");
    assert!((55..=60).contains(&retry), "{:?}", responses[0]);
}

/// `RL.ACQUIRE key LIMIT n TTL ms ID id` in the words `backend` takes.
fn acquire_words(backend: Backend, key: &str, limit: &str, id: &str) -> Vec<String> {
    let options = ["LIMIT", limit, "TTL", "60000", "ID", id];
    let words: Vec<&str> = match backend {
        Backend::Module => [&["RL.ACQUIRE", key][..], &options].concat(),
        Backend::Functions => [&["FCALL", "rl_acquire", "1", key][..], &options].concat(),
    };
    words.iter().map(|w| w.to_string()).collect()
}

/// The lease helper of `lang` on `backend`: with one slot of two held by
/// someone else, two requests in a row each get the other slot and give it
/// back; with both held, a request gets 429 and a Retry-After that is the
/// earliest holder's deadline, and stores nothing.
fn lease_helper(lang: Lang, backend: Backend) {
    if lang.command().is_none() {
        return;
    }
    let server = backend.start();
    let mut con = server.client();
    let key = "rl:{tenant}:inflight";
    let hold = |con: &mut redis::Connection, id: &str| {
        let words = acquire_words(backend, key, "2", id);
        let words: Vec<&str> = words.iter().map(String::as_str).collect();
        let reply = cmd_raw(con, &words);
        let redis::Value::Array(fields) = &reply else {
            panic!("RL.ACQUIRE answered {reply:?}");
        };
        assert_eq!(fields.first(), Some(&redis::Value::Int(1)), "{reply:?}");
    };
    hold(&mut con, "other");
    let args = [
        "--client", "tenant", "--lease", "2", "--ttl", "5000", "-n", "2",
    ];
    let responses = lang.run(server.port, &args).expect("ran before");
    assert_eq!(responses.len(), 2, "{lang:?}: {responses:?}");
    for r in &responses {
        assert_eq!(r.status, 200, "{lang:?}: {r:?}");
        assert_eq!(
            r.body, "{\"ok\":true,\"client\":\"tenant\",\"in_flight\":2}",
            "{lang:?}: the other holder's lease and its own"
        );
        assert_eq!(r.header("Retry-After"), None, "{lang:?}: {r:?}");
        assert_eq!(
            r.header("RateLimit"),
            None,
            "{lang:?}: a lease is no rate quota"
        );
    }
    let held: Vec<String> = con.zrange(key, 0, -1).unwrap();
    assert_eq!(
        held,
        ["other"],
        "{lang:?}: each request gave its lease back"
    );

    hold(&mut con, "another");
    let deadline: f64 = con.zscore(key, "other").unwrap();
    let args = ["--client", "tenant", "--lease", "2", "--ttl", "5000"];
    let responses = lang.run(server.port, &args).expect("ran before");
    assert_eq!(responses.len(), 1, "{lang:?}: {responses:?}");
    let r = &responses[0];
    assert_eq!(r.status, 429, "{lang:?}: {r:?}");
    let retry: i64 = r
        .header("Retry-After")
        .and_then(|v| v.parse().ok())
        .expect("Retry-After");
    // Seconds until the earliest lease (60 s, taken just before) ends.
    let (s, us): (i64, i64) = redis::cmd("TIME").query(&mut con).unwrap();
    let left_ms = deadline as i64 - (s * 1000 + us / 1000);
    assert!(
        retry >= (left_ms + 999) / 1000 && retry <= 60,
        "{lang:?}: Retry-After {retry} for {left_ms} ms left"
    );
    assert_eq!(
        r.body,
        format!("{{\"error\":\"too many in flight\",\"retry_after\":{retry}}}"),
        "{lang:?}"
    );
    let held: Vec<String> = con.zrange(key, 0, -1).unwrap();
    assert_eq!(
        held,
        ["other", "another"],
        "{lang:?}: a refusal stores nothing"
    );

    let responses = lang.run(server.port, &["--client", "a}b", "--lease", "2"]);
    assert_eq!(responses.expect("ran before")[0].status, 400, "{lang:?}");
}

#[test]
fn python_example_lease_helper_on_the_module() {
    lease_helper(Lang::Python, Backend::Module);
}

#[test]
fn python_example_lease_helper_on_the_function_library() {
    lease_helper(Lang::Python, Backend::Functions);
}

#[test]
fn node_example_lease_helper_on_the_module() {
    lease_helper(Lang::Node, Backend::Module);
}

#[test]
fn node_example_lease_helper_on_the_function_library() {
    lease_helper(Lang::Node, Backend::Functions);
}

/// The Rust example speaks RL.* only: the module.
#[test]
fn rust_example_lease_helper_on_the_module() {
    lease_helper(Lang::Rust, Backend::Module);
}
