//! The Node.js package (`clients/node`) as people use it, against real
//! servers this file starts: its ValkeyStore against express-rate-limit's
//! own MemoryStore, request by request over real HTTP (the differential),
//! the skipFailedRequests bypass and the limit of 0, outages (stopped,
//! black-holed, restarted), the library it ships and loads, limits chosen
//! per request and by a META hash, every client it supports, the durability
//! option, the unit tests of its pure core, and what `npm pack` ships. The
//! test programs in `clients/node/test/` make the checks and print one
//! `ok <check>` line each; this file starts the servers, runs the programs
//! and checks that every expected line came, then `PASS`.
//!
//! Their dependencies come from `dev/client-deps.sh` (.ci/run runs
//! it). Without them these tests fail when `$CI` is set and are skipped,
//! with a note on stderr, otherwise.

use crate::common;
use crate::common::backend::{library_path, Backend, BOTH};
use crate::common::{Scratch, Server};

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

const REPO: &str = env!("CARGO_MANIFEST_DIR");
/// A test program that runs longer than this is hung.
const RUN_TIMEOUT: Duration = Duration::from_secs(180);

fn package_dir() -> PathBuf {
    Path::new(REPO).join("clients/node")
}

/// `node` in the package's directory, with its dev dependencies installed
/// (`npm ci`); None (skipped, or a panic under CI) when they are missing.
fn node() -> Option<Command> {
    let installed = package_dir().join("node_modules/express-rate-limit");
    let found = installed.is_dir()
        && Command::new("node")
            .arg("--version")
            .output()
            .is_ok_and(|o| o.status.success());
    if !found {
        let msg = format!(
            "node or {} is missing; install the package's test dependencies with \
             `scripts/setup.sh test` (make test runs it)",
            installed.display()
        );
        if common::missing_tool_fails() {
            panic!("{msg} (RL_ALLOW_SKIP=1 skips instead)");
        }
        eprintln!("SKIPPED: {msg}");
        return None;
    }
    let mut cmd = Command::new("node");
    cmd.current_dir(package_dir())
        .env("VALKEY_SERVER", common::server_binary())
        .env("RL_MODULE", common::module_path())
        .env_remove("RL_EXPECT_BACKEND")
        .env_remove("VALKEY_PORT");
    Some(cmd)
}

fn name(backend: Backend) -> &'static str {
    match backend {
        Backend::Module => "module",
        Backend::Functions => "functions",
    }
}

/// `node <file> <phase>` against `server`, which runs `backend`.
fn program(file: &str, phase: &str, server: &Server, backend: Backend) -> Option<Command> {
    let mut cmd = node()?;
    cmd.args([file, phase])
        .env("VALKEY_HOST", "127.0.0.1")
        .env("VALKEY_PORT", server.port.to_string())
        .env("RL_EXPECT_BACKEND", name(backend));
    Some(cmd)
}

/// Runs `cmd`; every line of `expected` starts some line of its output, and
/// the program printed `pass`.
fn run_expecting(cmd: Command, expected: &[String], pass: &str) -> String {
    let out = common::run_to_completion(cmd, RUN_TIMEOUT);
    for line in expected {
        assert!(
            out.lines().any(|l| l.starts_with(line.as_str())),
            "no `{line}` line in the output:\n{out}"
        );
    }
    assert!(out.lines().any(|l| l == pass), "no `{pass}` line:\n{out}");
    out
}

/// The differential: at least 300 random sequences, every status code the
/// same as MemoryStore's.
fn matches_memory_store(backend: Backend) {
    let server = backend.start();
    let Some(cmd) = program("test/differential.test.js", "sequences", &server, backend) else {
        return;
    };
    let out = run_expecting(
        cmd,
        &[format!("ok {}: 300 sequences", name(backend))],
        "PASS node differential sequences",
    );
    assert!(
        out.contains(" 0 differing status codes"),
        "the differential must report 0 differing status codes:\n{out}"
    );
}

#[test]
fn node_store_matches_memory_store_request_by_request_on_the_module() {
    matches_memory_store(Backend::Module);
}

#[test]
fn node_store_matches_memory_store_request_by_request_on_the_function_library() {
    matches_memory_store(Backend::Functions);
}

/// limit 2 with skipFailedRequests, ten requests: 200 200 and eight 429s,
/// in every mode of the store, as MemoryStore; a limit of 0 refuses all.
#[test]
fn node_skip_failed_requests_frees_no_slot_and_limit_0_refuses() {
    for backend in BOTH {
        let server = backend.start();
        let Some(cmd) = program("test/differential.test.js", "bypass", &server, backend) else {
            return;
        };
        let n = name(backend);
        run_expecting(
            cmd,
            &[
                format!("ok {n}: skipFailedRequests: a refused request frees no slot"),
                format!("ok {n}: limit 0 refuses every request, as MemoryStore"),
            ],
            "PASS node differential bypass",
        );
    }
}

/// The pure core (options, call words, replies, headers, versions) under
/// `node --test`, no server.
#[test]
fn node_unit_tests_of_the_pure_core() {
    let Some(mut cmd) = node() else {
        return;
    };
    cmd.args(["--test", "test/unit/"]);
    let out = common::run_to_completion(cmd, RUN_TIMEOUT);
    assert!(
        out.lines().any(|l| l == "# fail 0"),
        "node --test did not report `# fail 0`:\n{out}"
    );
    let pass: usize = out
        .lines()
        .find_map(|l| l.strip_prefix("# pass "))
        .and_then(|n| n.parse().ok())
        .unwrap_or(0);
    assert!(pass >= 20, "only {pass} unit tests passed:\n{out}");
}

/// `npm pack` ships the code, its types and the library, copied at pack
/// time from the repo's one `functions/ratelimit.lua` (byte for byte, and
/// removed again from the source tree afterwards); the packed package loads
/// and finds its own copy.
#[test]
fn npm_pack_ships_the_library_byte_for_byte() {
    let Some(_) = node() else {
        return;
    };
    let scratch = Scratch::new("npm-pack-node");
    let mut pack = Command::new("npm");
    pack.current_dir(package_dir())
        .args(["pack", "--silent", "--pack-destination"])
        .arg(&scratch.0);
    common::run_to_completion(pack, RUN_TIMEOUT);
    let tarball = scratch.0.join("valkey-ratelimit-0.1.0.tgz");
    assert!(tarball.is_file(), "{} missing", tarball.display());
    assert!(
        !package_dir().join("ratelimit.lua").exists(),
        "postpack leaves no copy of the library in the source tree"
    );
    let mut untar = Command::new("tar");
    untar.arg("xzf").arg(&tarball).arg("-C").arg(&scratch.0);
    common::run_to_completion(untar, RUN_TIMEOUT);
    let package = scratch.0.join("package");
    for file in [
        "index.js",
        "index.d.ts",
        "lib/core.js",
        "lib/limiter.js",
        "lib/store.js",
        "ratelimit.lua",
        "README.md",
        "CHANGELOG.md",
        "package.json",
    ] {
        assert!(
            package.join(file).is_file(),
            "{file} missing from the tarball"
        );
    }
    assert!(
        !package.join("test").exists(),
        "the tests are not part of the package"
    );
    let shipped = fs::read(package.join("ratelimit.lua")).expect("read the shipped library");
    let source = fs::read(library_path()).expect("read functions/ratelimit.lua");
    assert!(
        shipped == source,
        "the shipped ratelimit.lua differs from functions/ratelimit.lua"
    );
    let mut load = Command::new("node");
    load.arg("-e")
        .arg(
            "const m = require(process.argv[1]); const b = m.bundledLibrary(); \
             console.log(Object.keys(m).sort().join(' ')); \
             console.log(require('path').relative(process.argv[1], b.path), b.version)",
        )
        .arg(&package);
    let out = common::run_to_completion(load, RUN_TIMEOUT);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(
        lines,
        [
            "ALGORITHMS BackendMissingError ConfigError LeaseLostError LeaseRefusedError Limiter \
             TimeoutError UnavailableError ValkeyStore bundledLibrary headers",
            "ratelimit.lua 0.1.0",
        ]
    );
}

/// The outage program on its own server (it stops, black-holes and
/// restarts it): every request within the deadline plus 100 ms, service
/// back without an app restart, each transition reported once.
fn outages(backend: Backend) {
    let Some(_) = node() else {
        return;
    };
    let n = name(backend);
    for failure in ["open", "closed"] {
        let mut cmd = node().expect("checked above");
        cmd.args(["test/outage.test.js", failure])
            .env("RL_EXPECT_BACKEND", n);
        let status = if failure == "open" { "200" } else { "503" };
        let mut expected = vec![
            format!("ok {n} fail-{failure}: stopped: "),
            format!("ok {n} fail-{failure}: black-holed: "),
            format!("ok {n} fail-{failure}: restarted: served by Valkey again, no app restart"),
            format!(
                "ok {n} fail-{failure}: onError told once of the fall and once of the recovery"
            ),
        ];
        if backend == Backend::Functions {
            expected[2].push_str(", the vanished library reloaded from the package's copy");
        }
        let out = run_expecting(cmd, &expected, &format!("PASS node outage {failure}"));
        for line in out
            .lines()
            .filter(|l| l.contains("requests, each waited at most 350 ms"))
        {
            assert!(line.ends_with(&format!("HTTP {status}")), "{line}");
        }
    }
    let mut cmd = node().expect("checked above");
    cmd.args(["test/outage.test.js", "defaults"])
        .env("RL_EXPECT_BACKEND", n);
    run_expecting(
        cmd,
        &[format!(
            "ok {n}: without onError, one warning per transition"
        )],
        "PASS node outage defaults",
    );
}

#[test]
fn node_outages_are_answered_within_the_deadline_on_the_module() {
    outages(Backend::Module);
}

#[test]
fn node_outages_are_answered_within_the_deadline_on_the_function_library() {
    outages(Backend::Functions);
}

/// Auto-detection and the shipped library: the module first; else the
/// loaded library, replaced when older (or without rl_version) and never
/// when newer; else the package's copy, loaded when the user may; else an
/// error naming the admin command. The minimal ACL user works on both
/// (the first call is the probe: no key but the caller's is touched).
#[test]
fn node_detects_the_backend_and_loads_its_library_only_over_an_older_one() {
    for backend in BOTH {
        let server = backend.start();
        let n = name(backend);
        let Some(cmd) = program("test/library.test.js", n, &server, backend) else {
            return;
        };
        let expected: Vec<String> = match backend {
            Backend::Module => vec![
                "ok module: the module wins over a loaded library".into(),
                "ok module: the minimal ACL user (-@all +@ratelimit, ~app:*) admits and leases; \
                 iovalkey quiet with enableReadyCheck: false or +info, warns without"
                    .into(),
            ],
            Backend::Functions => vec![
                "ok functions: none -> loads 0.1.0; 0.0.1 and one without rl_version -> replaced by 0.1.0; \
                 9.9.9 -> kept (never over a newer one); 0.1.0 -> kept"
                    .into(),
                "ok functions: 10 first calls at once on a bare server load it once".into(),
                "ok functions: not allowed to load it: BackendMissingError names \
                 `valkey-cli -x FUNCTION LOAD REPLACE < ratelimit.lua`"
                    .into(),
                "ok functions: not allowed to load it, an older library stays in use".into(),
                "ok functions: the minimal ACL user (-@all +fcall +fcall_ro ".into(),
            ],
        };
        run_expecting(cmd, &expected, &format!("PASS node library {n}"));
    }
}

/// Limits chosen at run time: an operator's `HSET <meta> max N` at the next
/// request, META per request, limit functions with the server deciding, and
/// the header fields of the buckets against what would really pass.
#[test]
fn node_meta_and_limit_functions_take_effect_at_the_next_request() {
    for backend in BOTH {
        let server = backend.start();
        let n = name(backend);
        let Some(cmd) = program("test/dynamic.test.js", "", &server, backend) else {
            return;
        };
        let mut expected = vec![
            format!("ok {n}: HSET <meta> max N changes the cap at the next request"),
            format!("ok {n}: HSET <meta> duration sets the window"),
            format!("ok {n}: meta as an async function of the request: free 1, pro 3"),
            format!("ok {n}: limit as a function of the request with the server deciding"),
            format!("ok {n}: a token bucket (3 per 10 s, burst 5) through express-rate-limit"),
            format!("ok {n}: Limiter.admit with meta: HSET max 2 admits the next call"),
        ];
        for bucket in [
            "token burst 5",
            "gcra burst 5",
            "leaky burst 5",
            "token burst 2",
            "gcra burst 1",
            "leaky burst 1",
        ] {
            expected.push(format!(
                "ok {n}: headers() of {bucket}: r is what would pass now"
            ));
        }
        run_expecting(cmd, &expected, "PASS node dynamic");
    }
}

/// iovalkey, ioredis, node-redis and @valkey/valkey-glide: each runs the
/// store over HTTP and the Limiter (limits, leases, headers), raises error
/// replies, and fails open within the deadline while its server is down.
fn every_client(backend: Backend) {
    let Some(mut cmd) = node() else {
        return;
    };
    let n = name(backend);
    cmd.arg("test/clients.test.js").env("RL_EXPECT_BACKEND", n);
    let mut expected = Vec::new();
    for client in ["iovalkey", "ioredis", "node-redis", "valkey-glide"] {
        expected.push(format!(
            "ok {n} {client}: ValkeyStore over HTTP: 200 200 429"
        ));
        expected.push(format!(
            "ok {n} {client}: Limiter admit/refund/ttl/reset/headers, leases"
        ));
        expected.push(format!("ok {n} {client}: down: fail-open within 350 ms"));
    }
    run_expecting(cmd, &expected, "PASS node clients");
}

#[test]
fn node_every_client_on_the_module() {
    every_client(Backend::Module);
}

#[test]
fn node_every_client_on_the_function_library() {
    every_client(Backend::Functions);
}

/// waitReplicas (issue 30): a primary and a replica whose link the program
/// cuts (through its own proxy); an unconfirmed lease is released and
/// refused, so a failover to the replica leaves one holder of a LIMIT 1
/// lease where, without the option, there are two.
#[test]
fn node_wait_replicas_turns_the_double_holder_into_a_refusal() {
    for backend in BOTH {
        let primary = backend.start();
        let replica = backend.start();
        let n = name(backend);
        let Some(mut cmd) = program("test/durability.test.js", "", &primary, backend) else {
            return;
        };
        cmd.env("RL_REPLICA_PORT", replica.port.to_string());
        run_expecting(
            cmd,
            &[
                format!("ok {n}: linked: WAIT 1 confirms every grant"),
                format!(
                    "ok {n}: link cut: an unconfirmed lease is released and refused, a hit \
                     refunded and refused, the store answers 503"
                ),
                format!(
                    "ok {n}: after the failover, LIMIT 1: 2 holders without waitReplicas, 1 with it"
                ),
            ],
            "PASS node durability",
        );
    }
}

/// Issue 27's options through the package (test/policies.test.js): SHADOW
/// with limit 3 over real HTTP lets 10 requests through and tells
/// onShadowRefusal 7 times; PENALTY refuses after the window turned and
/// admits at its end; ALIGN and CALENDAR (with TZ) reach the server
/// (PEXPIRETIME at the boundary); bad values are refused by the core.
#[test]
fn node_policies_shadow_penalty_align_calendar() {
    for backend in BOTH {
        let server = backend.start();
        let n = name(backend);
        let Some(cmd) = program("test/policies.test.js", "", &server, backend) else {
            return;
        };
        run_expecting(
            cmd,
            &[
                format!(
                    "ok {n}: SHADOW limit 3 over HTTP: 10 x 200, onShadowRefusal told 7 times, the counter at 3"
                ),
                format!("ok {n}: Limiter SHADOW: admitted 10 times, shadow (retryAfterMs > 0) from the 4th"),
                format!("ok {n}: PENALTY over HTTP: 429 after the window turned"),
                format!("ok {n}: Limiter PENALTY: refused through the penalty after the window turned, admitted at its end"),
                format!("ok {n}: ALIGN WINDOW 3600000: PEXPIRETIME a multiple of 3600000 (store and Limiter)"),
                format!("ok {n}: CALENDAR: PEXPIRETIME at the next boundary: day TZ +05:30 -> "),
                format!(
                    "ok {n}: RESP3 (node-redis): a fixed shadow refusal is told; leaky, by the module's map only"
                ),
                format!("ok {n}: bad values (penalty -1, "),
            ],
            "PASS node policies",
        );
    }
}

/// Issue 38 through the Node package (test/reserve.test.js): `wait` books
/// its turn in one call and wakes no sooner than `at_ms` by the server's
/// clock; a turn beyond `waitMs` is refused at once; a PING on the same
/// iovalkey client answers during a 2 s wait as fast as before it (no
/// connection held); an AbortSignal fired during the sleep gives the slot
/// back with one RL.REFUND ... AT, and the next wait takes it.
#[test]
fn node_wait_books_its_turn_and_holds_no_connection() {
    for backend in BOTH {
        let server = backend.start();
        let n = name(backend);
        let Some(cmd) = program("test/reserve.test.js", "live", &server, backend) else {
            return;
        };
        run_expecting(
            cmd,
            &[
                format!("ok {n}: one call per wait; woke "),
                format!("ok {n}: PING during a "),
                format!("ok {n}: an aborted waiter's slot is given back once"),
            ],
            "PASS node reserve live",
        );
    }
}

/// The MONITOR stream of a server, read by a thread until `stop`: every
/// line, in the order the server executed the commands.
struct Monitor {
    lines: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    reader: Option<std::thread::JoinHandle<()>>,
}

impl Monitor {
    fn start(port: u16) -> Monitor {
        use std::io::{BufRead, BufReader, Write};
        use std::sync::atomic::Ordering;
        let mut stream =
            std::net::TcpStream::connect(("127.0.0.1", port)).expect("connect for MONITOR");
        stream.write_all(b"MONITOR\r\n").expect("send MONITOR");
        stream
            .set_read_timeout(Some(Duration::from_millis(200)))
            .expect("read timeout");
        let mut reader = BufReader::new(stream);
        let mut first = String::new();
        reader.read_line(&mut first).expect("MONITOR's +OK");
        assert_eq!(first.trim_end(), "+OK");
        let lines = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (into, stopped) = (lines.clone(), stop.clone());
        let handle = std::thread::spawn(move || {
            let mut line = String::new();
            loop {
                match reader.read_line(&mut line) {
                    Ok(0) => return,
                    Ok(_) if line.ends_with('\n') => {
                        into.lock()
                            .expect("monitor lines")
                            .push(line.trim_end().to_string());
                        line.clear();
                    }
                    // A timeout: a partial line stays in `line` for the next read.
                    _ if stopped.load(Ordering::Relaxed) => return,
                    _ => {}
                }
            }
        });
        Monitor {
            lines,
            stop,
            reader: Some(handle),
        }
    }

    fn finish(mut self) -> Vec<String> {
        std::thread::sleep(Duration::from_millis(300));
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        if let Some(handle) = self.reader.take() {
            handle.join().expect("monitor reader");
        }
        std::mem::take(&mut *self.lines.lock().expect("monitor lines"))
    }
}

/// One admission a worker printed: `slot <addr> <admitted> <at_ms> <delay_ms> <TIME µs after waking>`.
struct Slot {
    addr: String,
    admitted: bool,
    at_ms: i64,
    woke_us: i64,
}

fn slots(out: &str) -> Vec<Slot> {
    out.lines()
        .filter_map(|l| l.strip_prefix("slot "))
        .map(|l| {
            let f: Vec<&str> = l.split(' ').collect();
            assert_eq!(f.len(), 5, "slot line {l}");
            let int = |s: &str| s.parse::<i64>().unwrap_or_else(|_| panic!("{s} in {l}"));
            Slot {
                addr: f[0].to_string(),
                admitted: f[1] == "1",
                at_ms: int(f[2]),
                woke_us: int(f[4]),
            }
        })
        .collect()
}

/// Issue 38's package test: four processes, two Node (iovalkey) and two
/// Python (the sync Limiter and the AsyncLimiter), each on one connection
/// of its own, share one gcra limiter (40/s, BURST 1: a slot every 25 ms)
/// through `wait`, 8 admissions each. MONITOR gives the order in which the
/// server received their calls (a worker waits out each turn before its
/// next call, so its k-th call is its k-th slot): the booked `at_ms`
/// values follow it with 0 inversions; every process read the server's
/// TIME after waking no sooner than its `at_ms`; and the server counted
/// one call per admission (INFO commandstats).
fn four_processes_share_one_limiter(backend: Backend) {
    let Some(_) = node() else {
        return;
    };
    let Some(python) = crate::python_package::python_path() else {
        return;
    };
    const PER_PROCESS: usize = 8;
    let server = backend.start();
    let mut con = server.client();
    let key = "fair:{shared}";
    let start_ms = common::server_time_ms(&mut con) + 4000;
    let node_policy = r#"{"algorithm":"gcra","limit":40,"windowMs":1000,"burst":1}"#;
    let python_policy = r#"{"algorithm":"gcra","limit":40,"window_ms":1000,"burst":1}"#;
    let share_env = |cmd: &mut Command, policy: &str| {
        cmd.env("VALKEY_HOST", "127.0.0.1")
            .env("VALKEY_PORT", server.port.to_string())
            .env("RL_EXPECT_BACKEND", name(backend))
            .env("RL_SHARE_KEY", key)
            .env("RL_SHARE_N", PER_PROCESS.to_string())
            .env("RL_SHARE_START", start_ms.to_string())
            .env("RL_SHARE_POLICY", policy);
    };
    let mut workers = Vec::new();
    for _ in 0..2 {
        let mut cmd = node().expect("checked above");
        cmd.args(["test/reserve.test.js", "share"]);
        share_env(&mut cmd, node_policy);
        workers.push((cmd, "PASS node reserve share"));
    }
    for flavour in ["sync", "async"] {
        let mut cmd = Command::new(&python);
        cmd.current_dir(Path::new(REPO).join("clients/python"))
            .env("PYTHONPATH", Path::new(REPO).join("clients/python/src"))
            .args(["tests/reserve_worker.py", flavour]);
        share_env(&mut cmd, python_policy);
        workers.push((cmd, "PASS python reserve share"));
    }
    common::cmd_raw(&mut con, &["CONFIG", "RESETSTAT"]);
    let monitor = Monitor::start(server.port);
    let outputs: Vec<String> = std::thread::scope(|scope| {
        let running: Vec<_> = workers
            .into_iter()
            .map(|(cmd, pass)| scope.spawn(move || run_expecting(cmd, &[], pass)))
            .collect();
        running
            .into_iter()
            .map(|h| h.join().expect("worker"))
            .collect()
    });
    let seen = monitor.finish();
    let all: Vec<Slot> = outputs.iter().flat_map(|o| slots(o)).collect();
    assert_eq!(all.len(), 4 * PER_PROCESS, "{outputs:?}");
    for s in &all {
        assert!(s.admitted, "every wait admitted: {outputs:?}");
        assert!(
            s.woke_us >= s.at_ms * 1000,
            "{} went ahead at {} µs, before its at_ms {}",
            s.addr,
            s.woke_us,
            s.at_ms
        );
    }
    // The server's arrival order of the booking calls, by client address.
    let call = match backend {
        Backend::Module => "\"RL.ADMIT\" \"fair:{shared}\"",
        Backend::Functions => "\"FCALL\" \"rl_admit\"",
    };
    let arrivals: Vec<String> = seen
        .iter()
        .filter(|l| l.contains(call) && l.contains("\"RESERVE\""))
        .filter_map(|l| {
            let addr = l.split_once('[')?.1.split_once(']')?.0.split_once(' ')?.1;
            (addr != "lua").then(|| addr.to_string())
        })
        .collect();
    assert_eq!(
        arrivals.len(),
        all.len(),
        "MONITOR saw every booking call once"
    );
    let mut next: std::collections::HashMap<&str, usize> = std::collections::HashMap::new();
    let booked: Vec<i64> = arrivals
        .iter()
        .map(|addr| {
            let k = next.entry(addr.as_str()).or_insert(0);
            let mine: Vec<&Slot> = all.iter().filter(|s| s.addr == *addr).collect();
            let slot = mine
                .get(*k)
                .unwrap_or_else(|| panic!("{addr} made more calls than it printed"));
            *k += 1;
            slot.at_ms
        })
        .collect();
    let mut inversions = 0;
    for i in 0..booked.len() {
        for j in i + 1..booked.len() {
            if booked[i] > booked[j] {
                inversions += 1;
            }
        }
    }
    assert_eq!(
        inversions, 0,
        "at_ms in the server's arrival order: {booked:?}"
    );
    let stat = match backend {
        Backend::Module => "cmdstat_RL.ADMIT",
        Backend::Functions => "cmdstat_fcall",
    };
    let calls: usize = common::info_field(&mut con, "commandstats", stat)
        .and_then(|v| {
            v.split(',')
                .find_map(|f| f.strip_prefix("calls=")?.parse().ok())
        })
        .unwrap_or(0);
    assert_eq!(
        calls,
        all.len(),
        "server calls per admission must be 1.0 ({calls} calls for {} admissions)",
        all.len()
    );
    let spread = booked.last().copied().unwrap_or(0) - booked.first().copied().unwrap_or(0);
    eprintln!(
        "{}: 4 processes, {} admissions, 0 inversions, 1.0 calls per admission, at_ms spread {spread} ms",
        name(backend),
        all.len()
    );
}

#[test]
fn four_processes_wait_their_booked_turns_in_arrival_order_on_the_module() {
    four_processes_share_one_limiter(Backend::Module);
}

#[test]
fn four_processes_wait_their_booked_turns_in_arrival_order_on_the_function_library() {
    four_processes_share_one_limiter(Backend::Functions);
}
