//! Integration-test harness: starts throwaway valkey-server processes with the
//! module loaded, plus small helpers for talking to them.
//!
//! `tests/it/main.rs` declares it first, with `#[macro_use]`, so its macros
//! reach every test module; each module uses a subset of it, hence the one
//! `#![allow(dead_code)]` below.
//!
//! Environment:
//! - `RL_MODULE`: module to load (default `target/release/libvalkey_ratelimit.so`).
//! - `VALKEY_SERVER`: server binary (default: whatever `scripts/valkey-server.sh` prints).
//! - `RL_KEEP_TEST_DIRS`: keep each server's directory (data files, server.log).

#![allow(dead_code)]

/// A command from words of any printable type: `c!["RL.ADMIT", key, "LIMIT", 5]`.
#[allow(unused_macros)]
macro_rules! c {
    ($($w:expr),* $(,)?) => { vec![$($w.to_string()),*] };
}

use std::collections::BTreeMap;
use std::fs::{self, File, OpenOptions};
use std::io::Read;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::OnceLock;
use std::thread;
use std::time::{Duration, Instant};

use redis::{Connection, ConnectionLike, Value};

pub mod backend;
pub mod cluster;

/// Binds `$pubsub`, a subscription to the keyspace events matching
/// `$pattern` on `$server`, whose reads time out after 5 s. A macro, not a
/// function: a `PubSub` borrows the connection it runs on, and that
/// connection must live in the caller's scope.
#[allow(unused_macros)]
macro_rules! subscribe {
    ($pubsub:ident = $server:expr, $pattern:expr) => {
        let mut subscriber = $server.client();
        subscriber
            .set_read_timeout(Some(std::time::Duration::from_secs(5)))
            .unwrap();
        let mut $pubsub = subscriber.as_pubsub();
        $pubsub.psubscribe($pattern).unwrap();
    };
}
#[allow(unused_imports)]
pub(crate) use subscribe;

/// How long a server may take to answer PING, a replica to link up, etc.
const WAIT_TIMEOUT: Duration = Duration::from_secs(10);
/// Graceful shutdown may wait for replicas (shutdown-timeout defaults to 10 s).
const STOP_TIMEOUT: Duration = Duration::from_secs(30);
/// Attempts at finding a free port; another process may grab the one we picked.
const START_ATTEMPTS: usize = 5;

/// Whether a test whose tool or library is missing fails (the default:
/// `make test` runs scripts/setup.sh, which installs them all) or skips,
/// saying so, when a developer opts out on purpose with `RL_ALLOW_SKIP=1`
/// (`make test SKIP_CLIENTS=1` skips the package tests by name instead).
pub fn missing_tool_fails() -> bool {
    std::env::var("RL_ALLOW_SKIP").map_or(true, |v| v != "1")
}

/// The module under test: `$RL_MODULE` or the release build in this repo.
pub fn module_path() -> PathBuf {
    let path = match std::env::var_os("RL_MODULE") {
        Some(p) => PathBuf::from(p),
        None => Path::new(env!("CARGO_MANIFEST_DIR")).join("target/release/libvalkey_ratelimit.so"),
    };
    if !path.is_file() {
        panic!(
            "module not found at {}: run `cargo build --release` first (or set RL_MODULE)",
            path.display()
        );
    }
    // valkey resolves relative paths from its own cwd, so hand it an absolute one.
    path.canonicalize().expect("canonicalize module path")
}

/// The valkey-server binary: `$VALKEY_SERVER`, else what `scripts/valkey-server.sh` prints.
/// Resolved once per test binary (the script may pip-install on first use).
pub fn server_binary() -> PathBuf {
    static BINARY: OnceLock<PathBuf> = OnceLock::new();
    BINARY
        .get_or_init(|| {
            if let Some(p) = std::env::var_os("VALKEY_SERVER") {
                if !p.is_empty() {
                    return PathBuf::from(p);
                }
            }
            let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/valkey-server.sh");
            let out = Command::new(&script)
                .output()
                .unwrap_or_else(|e| panic!("cannot run {}: {e}", script.display()));
            let stdout = String::from_utf8_lossy(&out.stdout).trim().to_string();
            if !out.status.success() || stdout.is_empty() {
                panic!(
                    "{} failed ({}): {}",
                    script.display(),
                    out.status,
                    String::from_utf8_lossy(&out.stderr)
                );
            }
            PathBuf::from(stdout)
        })
        .clone()
}

/// A fresh, empty directory for one server: `<tmp>/rl-tests/<pid>-<counter>`.
fn new_server_dir() -> PathBuf {
    static COUNTER: AtomicUsize = AtomicUsize::new(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let dir = std::env::temp_dir()
        .join("rl-tests")
        .join(format!("{}-{n}", std::process::id()));
    // Left over from an earlier run whose pid was reused.
    let _ = fs::remove_dir_all(&dir);
    fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("create {}: {e}", dir.display()));
    dir
}

/// A fresh directory for a test's build artifacts
/// (`<tmp>/rl-tests/<name>-<pid>`), removed by `Drop`.
pub struct Scratch(pub PathBuf);

impl Scratch {
    pub fn new(name: &str) -> Scratch {
        let dir = std::env::temp_dir()
            .join("rl-tests")
            .join(format!("{name}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("create {}: {e}", dir.display()));
        Scratch(dir)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

/// A port that was free a moment ago. The server may still lose a race for it,
/// which `Server::start_with` handles by retrying with another port.
fn free_port() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
    listener.local_addr().expect("local_addr").port()
}

/// Poll `check` every 20 ms until it returns true; panic with `what` after `timeout`.
pub fn wait_until(timeout: Duration, what: &str, mut check: impl FnMut() -> bool) {
    let start = Instant::now();
    while !check() {
        if start.elapsed() > timeout {
            panic!("timed out after {timeout:?} waiting for {what}");
        }
        thread::sleep(Duration::from_millis(20));
    }
}

/// Wait up to `timeout` for the process to exit.
fn wait_exit(child: &mut Child, timeout: Duration) -> Option<ExitStatus> {
    let start = Instant::now();
    loop {
        if let Ok(Some(status)) = child.try_wait() {
            return Some(status);
        }
        if start.elapsed() > timeout {
            return None;
        }
        thread::sleep(Duration::from_millis(20));
    }
}

/// The last `n` lines of a log text.
fn tail(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

/// Why a start attempt failed.
enum StartError {
    /// Someone else had the port; worth another try with a new port.
    PortTaken,
    /// Anything else; the message includes the log tail.
    Fatal(String),
}

/// A valkey-server child process with the module loaded, on 127.0.0.1.
///
/// Dropping it kills the process (SIGKILL) and removes `dir`, also when the
/// test panics. Set `RL_KEEP_TEST_DIRS=1` to keep the directory.
pub struct Server {
    pub port: u16,
    /// Working directory: data files and `server.log`.
    pub dir: PathBuf,
    child: Child,
    /// Extra arguments given to `start_with`, reused by `restart`.
    extra: Vec<String>,
    /// Whether it loads the module (`start_without_module` starts one that
    /// does not), at the start and at every `restart`.
    with_module: bool,
    /// Environment for the process (the frozen clock's `LD_PRELOAD` and
    /// `FAKETIME`, see `start_frozen_at`), at every start.
    env: Vec<(String, String)>,
}

impl Server {
    /// A server with the default test configuration.
    pub fn start() -> Server {
        Server::start_with(&[])
    }

    /// A server with extra config arguments appended after the defaults,
    /// e.g. `&["--appendonly", "yes"]` (valkey keeps the last value given).
    pub fn start_with(extra: &[&str]) -> Server {
        Server::start_loading_module(extra, true)
    }

    /// A server with no module loaded, with extra config arguments; its
    /// restarts load none either.
    pub fn start_without_module(extra: &[&str]) -> Server {
        Server::start_loading_module(extra, false)
    }

    /// A server (with the module or not) whose clock stands still at `at`,
    /// a UTC time `YYYY-MM-DD hh:mm:ss[.fff]`: libfaketime (Debian's
    /// `faketime` package, which scripts/setup.sh installs) preloaded with
    /// the clock at `at` and a speed of 0. `None` when libfaketime is
    /// missing and `RL_ALLOW_SKIP=1` lets the caller skip.
    pub fn start_frozen_at(at: &str, extra: &[&str], with_module: bool) -> Option<Server> {
        let Some(lib) = faketime_library() else {
            let msg = "no libfaketime: apt-get install faketime (scripts/setup.sh test does)";
            assert!(
                !missing_tool_fails(),
                "{msg} (RL_ALLOW_SKIP=1 skips instead)"
            );
            eprintln!("SKIPPED: {msg}");
            return None;
        };
        let env = vec![
            ("LD_PRELOAD".to_string(), lib.display().to_string()),
            ("FAKETIME".to_string(), format!("@{at} x0")),
            // The clock is UTC whatever the machine's zone.
            ("TZ".to_string(), "UTC".to_string()),
        ];
        Some(Server::start_with_env(extra, with_module, env))
    }

    /// A server whose clock stands still at the instant `clock` holds, a
    /// file the test rewrites to move it (`@YYYY-MM-DD hh:mm:ss[.fff] x0`):
    /// libfaketime's FAKETIME_TIMESTAMP_FILE, read again at every clock
    /// read (FAKETIME_NO_CACHE). `None` as `start_frozen_at`.
    pub fn start_with_clock_file(clock: &Path, with_module: bool) -> Option<Server> {
        let Some(lib) = faketime_library() else {
            let msg = "no libfaketime: apt-get install faketime (scripts/setup.sh test does)";
            assert!(
                !missing_tool_fails(),
                "{msg} (RL_ALLOW_SKIP=1 skips instead)"
            );
            eprintln!("SKIPPED: {msg}");
            return None;
        };
        let env = vec![
            ("LD_PRELOAD".to_string(), lib.display().to_string()),
            (
                "FAKETIME_TIMESTAMP_FILE".to_string(),
                clock.display().to_string(),
            ),
            ("FAKETIME_NO_CACHE".to_string(), "1".to_string()),
            ("TZ".to_string(), "UTC".to_string()),
        ];
        Some(Server::start_with_env(&[], with_module, env))
    }

    fn start_loading_module(extra: &[&str], with_module: bool) -> Server {
        Server::start_with_env(extra, with_module, Vec::new())
    }

    fn start_with_env(extra: &[&str], with_module: bool, env: Vec<(String, String)>) -> Server {
        // These panic with a clear message if missing; do it before creating a dir.
        server_binary();
        if with_module {
            module_path();
        }
        let dir = new_server_dir();
        let extra: Vec<String> = extra.iter().map(|s| s.to_string()).collect();
        for _ in 0..START_ATTEMPTS {
            let port = free_port();
            match launch(port, &dir, &extra, with_module, &env) {
                Ok(child) => {
                    return Server {
                        port,
                        dir,
                        child,
                        extra,
                        with_module,
                        env,
                    }
                }
                Err(StartError::PortTaken) => continue,
                Err(StartError::Fatal(msg)) => {
                    remove_dir(&dir);
                    panic!("{msg}");
                }
            }
        }
        remove_dir(&dir);
        panic!("valkey-server: no free port after {START_ATTEMPTS} attempts");
    }

    /// Graceful stop, then start again with the same port, dir and arguments.
    /// Data survives only through what the server persisted (AOF, or an RDB
    /// written by SAVE: the default `save ""` writes none at shutdown).
    pub fn restart(&mut self) {
        self.stop();
        match launch(
            self.port,
            &self.dir,
            &self.extra,
            self.with_module,
            &self.env,
        ) {
            Ok(child) => self.child = child,
            Err(StartError::PortTaken) => {
                panic!("restart: port {} was taken by another process", self.port)
            }
            Err(StartError::Fatal(msg)) => panic!("restart: {msg}"),
        }
    }

    /// Graceful stop: SIGTERM (same as SHUTDOWN without arguments), then wait.
    pub fn stop(&mut self) {
        if let Ok(Some(_)) = self.child.try_wait() {
            return;
        }
        // SAFETY: plain kill(2) on our own child's pid; it has not been reaped
        // (try_wait above returned None), so the pid cannot have been reused.
        unsafe {
            libc::kill(self.child.id() as libc::pid_t, libc::SIGTERM);
        }
        if wait_exit(&mut self.child, STOP_TIMEOUT).is_none() {
            self.kill();
            panic!(
                "valkey-server did not stop within {STOP_TIMEOUT:?}; log tail:\n{}",
                tail(&self.log(), 30)
            );
        }
    }

    /// Hard stop (SIGKILL): nothing is flushed, as in a crash.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// A new connection. Reads time out after 30 s so a hung server fails the
    /// test instead of hanging it.
    pub fn client(&self) -> Connection {
        connect(self.port, Duration::from_secs(5))
            .unwrap_or_else(|e| panic!("connect to 127.0.0.1:{}: {e}", self.port))
    }

    /// Everything the server wrote to stdout/stderr, across restarts.
    pub fn log(&self) -> String {
        fs::read(self.dir.join("server.log"))
            .map(|b| String::from_utf8_lossy(&b).into_owned())
            .unwrap_or_default()
    }

    /// Make this server a replica of `primary` and wait until the link is up
    /// (initial sync done).
    pub fn replica_of(&self, primary: &Server) {
        let mut con = self.client();
        let port = primary.port.to_string();
        let reply: String = redis::cmd("REPLICAOF")
            .arg("127.0.0.1")
            .arg(&port)
            .query(&mut con)
            .expect("REPLICAOF");
        assert!(reply.starts_with("OK"), "REPLICAOF replied {reply:?}");
        wait_until(WAIT_TIMEOUT, "master_link_status:up", || {
            info_field(&mut con, "replication", "master_link_status").as_deref() == Some("up")
        });
    }
}

/// Wait until `replica` has applied everything `primary` has propagated so far.
pub fn wait_replica_offset(primary: &Server, replica: &Server) {
    let mut p = primary.client();
    let mut r = replica.client();
    let start = Instant::now();
    loop {
        let want = info_field(&mut p, "replication", "master_repl_offset");
        let got = info_field(&mut r, "replication", "slave_repl_offset")
            .or_else(|| info_field(&mut r, "replication", "master_repl_offset"));
        if want.is_some() && want == got {
            return;
        }
        if start.elapsed() > WAIT_TIMEOUT {
            panic!(
                "replica offset did not catch up in {WAIT_TIMEOUT:?}: \
                 primary {want:?}, replica {got:?}"
            );
        }
        thread::sleep(Duration::from_millis(20));
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if thread::panicking() {
            // The test output is shown on failure: make the server's view visible.
            eprintln!(
                "--- valkey-server on port {} (dir {}), log tail:\n{}",
                self.port,
                self.dir.display(),
                tail(&self.log(), 30)
            );
        }
        remove_dir(&self.dir);
    }
}

fn remove_dir(dir: &Path) {
    if std::env::var_os("RL_KEEP_TEST_DIRS").is_some() {
        eprintln!("keeping test dir {}", dir.display());
    } else {
        let _ = fs::remove_dir_all(dir);
    }
}

fn connect(port: u16, timeout: Duration) -> redis::RedisResult<Connection> {
    let client = redis::Client::open(format!("redis://127.0.0.1:{port}/"))?;
    let con = client.get_connection_with_timeout(timeout)?;
    con.set_read_timeout(Some(Duration::from_secs(30)))?;
    con.set_write_timeout(Some(Duration::from_secs(30)))?;
    Ok(con)
}

/// Spawn valkey-server on `port` and wait until it answers PING.
/// On failure the process is killed before returning.
/// libfaketime, as Debian's `libfaketime` package installs it.
pub fn faketime_library() -> Option<PathBuf> {
    let lib = fs::read_dir("/usr/lib").ok()?.flatten().find_map(|dir| {
        let lib = dir.path().join("faketime/libfaketime.so.1");
        lib.exists().then_some(lib)
    });
    lib.or_else(|| {
        let lib = PathBuf::from("/usr/lib/faketime/libfaketime.so.1");
        lib.exists().then_some(lib)
    })
}

fn launch(
    port: u16,
    dir: &Path,
    extra: &[String],
    with_module: bool,
    env: &[(String, String)],
) -> Result<Child, StartError> {
    let log_path = dir.join("server.log");
    // Appended to, so the log of a restarted server keeps its earlier life.
    let log = OpenOptions::new()
        .create(true)
        .append(true)
        .open(&log_path)
        .expect("open server.log");
    let log_start = log.metadata().map(|m| m.len()).unwrap_or(0) as usize;
    let log_err: File = log.try_clone().expect("clone log handle");

    let binary = server_binary();
    let mut cmd = Command::new(&binary);
    cmd.current_dir(dir)
        .args(["--port", &port.to_string()])
        .args(["--bind", "127.0.0.1"])
        .arg("--dir")
        .arg(dir)
        .args(["--save", ""])
        .args(["--appendonly", "no"])
        // DEBUG RELOAD and friends are handy in tests; loopback clients only.
        .args(["--enable-debug-command", "local"])
        // A primary waits 5 s by default before a full sync; no need in tests.
        .args(["--repl-diskless-sync-delay", "0"]);
    if with_module {
        cmd.arg("--loadmodule").arg(module_path());
    }
    cmd.args(extra)
        .envs(env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::null())
        .stdout(log)
        .stderr(log_err);
    let mut child = match cmd.spawn() {
        Ok(child) => child,
        Err(e) => {
            return Err(StartError::Fatal(format!(
                "spawn {}: {e}",
                binary.display()
            )))
        }
    };

    let fail = |child: &mut Child, what: String| -> StartError {
        let _ = child.kill();
        let _ = child.wait();
        let text = fs::read(&log_path).unwrap_or_default();
        let this_run = String::from_utf8_lossy(&text[log_start.min(text.len())..]).into_owned();
        if this_run.contains("Address already in use") {
            return StartError::PortTaken;
        }
        StartError::Fatal(format!(
            "valkey-server ({}) on port {port} {what}; log tail ({}):\n{}",
            binary.display(),
            log_path.display(),
            tail(&this_run, 30)
        ))
    };

    let start = Instant::now();
    loop {
        if let Ok(Some(status)) = child.try_wait() {
            return Err(fail(
                &mut child,
                format!("exited during startup ({status})"),
            ));
        }
        // PONG alone is not enough: if we lost the port race, another test's
        // server may be answering on it. Check that the pid is ours.
        if ping_pid(port) == Some(child.id()) {
            return Ok(child);
        }
        if start.elapsed() > WAIT_TIMEOUT {
            return Err(fail(
                &mut child,
                format!("did not answer PING within {WAIT_TIMEOUT:?}"),
            ));
        }
        thread::sleep(Duration::from_millis(20));
    }
}

/// The server's pid if it answers PING with PONG (not e.g. -LOADING).
fn ping_pid(port: u16) -> Option<u32> {
    let mut con = connect(port, Duration::from_millis(500)).ok()?;
    let pong: String = redis::cmd("PING").query(&mut con).ok()?;
    if pong != "PONG" {
        return None;
    }
    info_field(&mut con, "server", "process_id")?.parse().ok()
}

/// Build a command from its words, e.g. `&["SET", "k", "v"]`.
pub fn make_cmd(args: &[&str]) -> redis::Cmd {
    let (name, rest) = args.split_first().expect("empty command");
    let mut cmd = redis::cmd(name);
    for a in rest {
        cmd.arg(*a);
    }
    cmd
}

/// Run a command and return the raw reply; an error reply comes back as
/// `Value::ServerError` instead of `Err`.
pub fn cmd_raw(con: &mut Connection, args: &[&str]) -> Value {
    con.req_command(&make_cmd(args))
        .unwrap_or_else(|e| panic!("{args:?}: connection error: {e}"))
}

/// Run a command that must reply with an array of integers.
pub fn cmd_ints(con: &mut Connection, args: &[&str]) -> Vec<i64> {
    match cmd_raw(con, args) {
        Value::Array(items) => items
            .into_iter()
            .map(|v| match v {
                Value::Int(n) => n,
                other => panic!("{args:?}: expected integers, got element {other:?}"),
            })
            .collect(),
        other => panic!("{args:?}: expected an array of integers, got {other:?}"),
    }
}

/// Run a command that must fail; returns the error text exactly as the server
/// sent it, e.g. `"ERR wrong number of arguments ..."` or `"WRONGTYPE ..."`.
pub fn cmd_err(con: &mut Connection, args: &[&str]) -> String {
    let reply = cmd_raw(con, args);
    error_text(&reply).unwrap_or_else(|| panic!("{args:?}: expected an error reply, got {reply:?}"))
}

/// The exact error line of an error reply (`"ERR ..."`, `"WRONGTYPE ..."`,
/// `"CROSSSLOT ..."`), or `None` for any other reply. redis-rs splits the
/// line at its first space into code and detail, which rejoin to the
/// original.
pub fn error_text(v: &Value) -> Option<String> {
    match v {
        Value::ServerError(e) => Some(match e.details() {
            Some(detail) => format!("{} {detail}", e.code()),
            None => e.code().to_string(),
        }),
        _ => None,
    }
}

/// A call refused with an `ERR`/`WRONGTYPE` reply that names `mention`,
/// after which the server still answers PING.
pub fn assert_refused_naming(con: &mut Connection, call: &[&str], mention: &str) {
    let err = cmd_err(con, call);
    assert!(
        err.starts_with("ERR ") || err.starts_with("WRONGTYPE "),
        "{call:?} gave {err:?}"
    );
    assert!(
        err.contains(mention),
        "{call:?} gave {err:?}, expected it to mention {mention:?}"
    );
    let pong: String = redis::cmd("PING").query(con).unwrap();
    assert_eq!(pong, "PONG");
}

/// PTTL of a key: ms left, -1 without expiry, -2 when missing.
pub fn pttl(con: &mut Connection, key: &str) -> i64 {
    redis::cmd("PTTL").arg(key).query(con).expect("PTTL")
}

/// PEXPIRETIME of a key: absolute unix ms, -1 without expiry, -2 when missing.
pub fn pexpiretime(con: &mut Connection, key: &str) -> i64 {
    redis::cmd("PEXPIRETIME")
        .arg(key)
        .query(con)
        .expect("PEXPIRETIME")
}

/// DUMP of a key (serialized value, for byte-for-byte comparisons), None when missing.
pub fn dump(con: &mut Connection, key: &str) -> Option<Vec<u8>> {
    redis::cmd("DUMP").arg(key).query(con).expect("DUMP")
}

/// One `field:value` line of `INFO <section>`.
pub fn info_field(con: &mut Connection, section: &str, field: &str) -> Option<String> {
    let text: String = redis::cmd("INFO").arg(section).query(con).ok()?;
    text.lines().find_map(|line| {
        let (k, v) = line.split_once(':')?;
        (k == field).then(|| v.trim_end().to_string())
    })
}

// Replies as text, to compare and to print.

/// A reply as one line: integers, `[..]` arrays, `{k: v}` maps, strings
/// quoted, error replies as `!` and their exact text.
pub fn show(v: &Value) -> String {
    match v {
        Value::Int(n) => n.to_string(),
        Value::Nil => "nil".into(),
        Value::Okay => "OK".into(),
        Value::SimpleString(s) => format!("+{s}"),
        Value::BulkString(b) => format!("{:?}", String::from_utf8_lossy(b)),
        Value::Array(items) | Value::Set(items) => format!(
            "[{}]",
            items.iter().map(show).collect::<Vec<_>>().join(", ")
        ),
        Value::Map(pairs) => format!(
            "{{{}}}",
            pairs
                .iter()
                .map(|(k, v)| format!("{}: {}", show(k), show(v)))
                .collect::<Vec<_>>()
                .join(", ")
        ),
        Value::ServerError(e) => format!("!{}", error_text(v).unwrap_or_else(|| format!("{e:?}"))),
        other => format!("{other:?}"),
    }
}

/// The hex ms of a generated lease id, when `s` has its shape: the
/// contract's `^[0-9a-f]+-[0-9a-f]{16}$`, the ms before the dash.
fn generated_id_hex_ms(s: &str) -> Option<&str> {
    let hex = |part: &str| part.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'));
    let (ms, nonce) = s.split_once('-')?;
    (!ms.is_empty() && hex(ms) && nonce.len() == 16 && hex(nonce)).then_some(ms)
}

/// Whether `s` is a generated lease id.
pub fn is_generated_id(s: &str) -> bool {
    generated_id_hex_ms(s).is_some()
}

/// The ms a generated lease id was made in.
pub fn generated_id_ms(s: &str) -> Option<i64> {
    i64::from_str_radix(generated_id_hex_ms(s)?, 16).ok()
}

/// `show`'s line with every quoted generated lease id as `"<id>"`: the two
/// backends generate different ids, in the same form.
pub fn without_ids(line: &str) -> String {
    map_generated_ids(line, |_| "<id>".to_string())
}

/// `show`'s line with every quoted generated lease id as `"<id@ms>"`, the
/// ms it was made in: comparable with the `now` of a frozen clock.
pub fn ids_with_ms(line: &str) -> String {
    map_generated_ids(line, |ms| match ms {
        Some(ms) => format!("<id@{ms}>"),
        None => "<id@?>".to_string(),
    })
}

/// `line` with each quoted generated id replaced by `with(the ms it was
/// made in)`.
fn map_generated_ids(line: &str, with: impl Fn(Option<i64>) -> String) -> String {
    let mut out = String::new();
    let mut rest = line;
    while let Some(open) = rest.find('"') {
        out.push_str(&rest[..=open]);
        rest = &rest[open + 1..];
        let close = rest.find('"').unwrap_or(rest.len());
        let quoted = &rest[..close];
        match is_generated_id(quoted) {
            true => out.push_str(&with(generated_id_ms(quoted))),
            false => out.push_str(quoted),
        }
        rest = &rest[close..];
        if let Some(after) = rest.strip_prefix('"') {
            out.push('"');
            rest = after;
        }
    }
    out.push_str(rest);
    out
}

// Reading replies (`redis::Value`) in tests.

pub fn bulk_i64(v: &redis::Value) -> i64 {
    match v {
        redis::Value::BulkString(b) => String::from_utf8_lossy(b).parse().expect("integer"),
        other => panic!("expected a bulk integer, got {other:?}"),
    }
}

/// A TIME reply, in ms.
pub fn time_ms(v: &redis::Value) -> i64 {
    match v {
        redis::Value::Array(parts) => bulk_i64(&parts[0]) * 1000 + bulk_i64(&parts[1]) / 1000,
        other => panic!("TIME replied {other:?}"),
    }
}

/// A TIME reply, in µs: the clock the module's buckets read.
pub fn time_us(v: &redis::Value) -> i64 {
    match v {
        redis::Value::Array(parts) => bulk_i64(&parts[0]) * 1_000_000 + bulk_i64(&parts[1]),
        other => panic!("TIME replied {other:?}"),
    }
}

pub fn server_time_ms(con: &mut redis::Connection) -> i64 {
    time_ms(&cmd_raw(con, &["TIME"]))
}

pub fn ints(v: &redis::Value) -> Vec<i64> {
    match v {
        redis::Value::Array(items) => items
            .iter()
            .map(|i| match i {
                redis::Value::Int(n) => *n,
                other => panic!("expected integers, got element {other:?} of {v:?}"),
            })
            .collect(),
        other => panic!("expected an array of integers, got {other:?}"),
    }
}

pub fn int(v: &redis::Value) -> i64 {
    match v {
        redis::Value::Int(n) => *n,
        other => panic!("expected an integer, got {other:?}"),
    }
}

/// A GET reply.
pub fn text(v: &redis::Value) -> Option<String> {
    match v {
        redis::Value::Nil => None,
        redis::Value::BulkString(b) => Some(String::from_utf8_lossy(b).into_owned()),
        other => panic!("expected a string, got {other:?}"),
    }
}

/// An array of integers, or `None` for any other reply (an error included).
pub fn try_ints(v: &Value) -> Option<Vec<i64>> {
    match v {
        Value::Array(items) => items
            .iter()
            .map(|i| match i {
                Value::Int(n) => Some(*n),
                _ => None,
            })
            .collect(),
        _ => None,
    }
}

/// A string-like reply (bulk, simple, OK), or `None` for any other.
pub fn try_text(v: &Value) -> Option<String> {
    match v {
        Value::BulkString(b) => Some(String::from_utf8_lossy(b).into_owned()),
        Value::SimpleString(s) => Some(s.clone()),
        Value::Okay => Some("OK".into()),
        _ => None,
    }
}

/// xorshift64*: a tiny deterministic generator, so that a failing run can
/// be replayed from its seed.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed.max(1))
    }

    pub fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// Uniform enough in `0..n` (0 when `n` is 0).
    pub fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }

    /// Uniform enough in `0..n`, for arithmetic in i64 (0 when `n` < 1).
    pub fn below_i64(&mut self, n: i64) -> i64 {
        (self.next() % n.max(1) as u64) as i64
    }

    /// True `p` percent of the time.
    pub fn pct(&mut self, p: usize) -> bool {
        self.below(100) < p
    }

    pub fn pick<T: Copy>(&mut self, items: &[T]) -> T {
        items[self.below(items.len())]
    }

    /// Up to `max_len` random bytes.
    pub fn bytes(&mut self, max_len: usize) -> Vec<u8> {
        let len = self.below(max_len + 1);
        (0..len).map(|_| self.next() as u8).collect()
    }
}

/// The primary's `master_repl_offset`: it moves only when something is
/// propagated.
pub fn repl_offset(con: &mut Connection) -> i64 {
    info_field(con, "replication", "master_repl_offset")
        .expect("master_repl_offset")
        .parse()
        .expect("an integer offset")
}

/// The words of a command (or a list) written as one line.
pub fn split(line: &str) -> Vec<&str> {
    line.split_whitespace().collect()
}

/// The words of a command, owned.
pub fn words(args: &[&str]) -> Vec<String> {
    args.iter().map(|s| s.to_string()).collect()
}

/// `cmd_raw` for a command held as owned words.
pub fn run(con: &mut Connection, cmd: &[String]) -> Value {
    let args: Vec<&str> = cmd.iter().map(String::as_str).collect();
    cmd_raw(con, &args)
}

/// Run a command that must reply with an integer.
pub fn cmd_int(con: &mut Connection, args: &[&str]) -> i64 {
    match cmd_raw(con, args) {
        Value::Int(n) => n,
        other => panic!("{args:?}: expected an integer, got {other:?}"),
    }
}

/// GET of a key.
pub fn get(con: &mut Connection, key: &str) -> Option<String> {
    redis::cmd("GET").arg(key).query(con).expect("GET")
}

/// RESP encoding of one command, whose words may be any bytes.
pub fn pack<A: AsRef<[u8]>>(args: &[A]) -> Vec<u8> {
    let mut out = format!("*{}\r\n", args.len()).into_bytes();
    for a in args {
        let a = a.as_ref();
        out.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
        out.extend_from_slice(a);
        out.extend_from_slice(b"\r\n");
    }
    out
}

/// Sends all commands at once and returns every reply (errors included, as
/// `Value::ServerError`).
pub fn pipeline<A: AsRef<[u8]>>(
    con: &mut Connection,
    cmds: &[Vec<A>],
) -> redis::RedisResult<Vec<Value>> {
    let mut packed = Vec::new();
    for c in cmds {
        packed.extend(pack(c));
    }
    con.req_packed_commands(&packed, 0, cmds.len())
}

// Snapshots of state, to compare before and after, or a replica with its
// primary.

/// DUMP and PEXPIRETIME of each key, in one round trip: the serialized value
/// (None when missing) and the absolute expiry, for byte-for-byte comparisons.
pub fn raw_state<K: AsRef<str>>(con: &mut Connection, keys: &[K]) -> Vec<(Option<Vec<u8>>, i64)> {
    let cmds: Vec<Vec<&str>> = keys
        .iter()
        .flat_map(|k| [vec!["DUMP", k.as_ref()], vec!["PEXPIRETIME", k.as_ref()]])
        .collect();
    let replies = pipeline(con, &cmds).expect("DUMP/PEXPIRETIME");
    replies
        .chunks(2)
        .zip(keys)
        .map(|(r, k)| {
            let k = k.as_ref();
            let dumped = match &r[0] {
                Value::Nil => None,
                Value::BulkString(b) => Some(b.clone()),
                other => panic!("DUMP {k}: {other:?}"),
            };
            let at = match r[1] {
                Value::Int(n) => n,
                ref other => panic!("PEXPIRETIME {k}: {other:?}"),
            };
            (dumped, at)
        })
        .collect()
}

/// key -> (type, value words, PEXPIRETIME)
pub type Snap = BTreeMap<String, (String, Vec<String>, i64)>;

/// Every key of a node: its type, value (string, or sorted hash fields) and
/// absolute expiry; plus the server time when the snapshot ended.
pub fn keyspace(con: &mut Connection) -> (Snap, i64) {
    let keys: Vec<String> = redis::cmd("KEYS").arg("*").query(con).expect("KEYS");
    let mut meta_cmds = Vec::new();
    for k in &keys {
        meta_cmds.push(words(&["TYPE", k]));
        meta_cmds.push(words(&["PEXPIRETIME", k]));
    }
    let meta = pipeline(con, &meta_cmds).expect("TYPE/PEXPIRETIME");
    let mut value_cmds = Vec::new();
    let mut kept = Vec::new();
    for (i, k) in keys.iter().enumerate() {
        let kind = try_text(&meta[2 * i]).unwrap_or_default();
        let at = match meta[2 * i + 1] {
            Value::Int(n) => n,
            ref other => panic!("PEXPIRETIME {k}: {other:?}"),
        };
        let cmd = match kind.as_str() {
            "string" => words(&["GET", k]),
            "hash" => words(&["HGETALL", k]),
            "none" => continue, // expired between KEYS and TYPE
            other => panic!("unexpected type {other} for {k}"),
        };
        value_cmds.push(cmd);
        kept.push((k.clone(), kind, at));
    }
    let values = pipeline(con, &value_cmds).expect("values");
    let end = server_time_ms(con);
    let mut snap = Snap::new();
    for ((k, kind, at), v) in kept.into_iter().zip(values) {
        let mut vals: Vec<String> = match &v {
            Value::Array(items) => items.iter().filter_map(try_text).collect(),
            Value::Map(pairs) => pairs
                .iter()
                .flat_map(|(a, b)| [try_text(a), try_text(b)])
                .flatten()
                .collect(),
            Value::Nil => continue, // expired meanwhile
            other => vec![try_text(other).unwrap_or_else(|| format!("{other:?}"))],
        };
        if kind == "hash" {
            let mut pairs: Vec<(String, String)> = vals
                .chunks(2)
                .map(|c| (c[0].clone(), c.get(1).cloned().unwrap_or_default()))
                .collect();
            pairs.sort();
            vals = pairs.into_iter().flat_map(|(a, b)| [a, b]).collect();
        }
        snap.insert(k, (kind, vals, at));
    }
    (snap, end)
}

/// Every command in the incremental AOF files of the server in `dir`, in
/// order, as its words (RESP arrays of bulk strings, read by their lengths).
pub fn aof_commands(dir: &Path) -> Vec<Vec<String>> {
    let aof_dir = dir.join("appendonlydir");
    let mut files: Vec<_> = fs::read_dir(&aof_dir)
        .unwrap_or_else(|e| panic!("{}: {e}", aof_dir.display()))
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.to_string_lossy().ends_with(".incr.aof"))
        .collect();
    files.sort();
    let mut out = Vec::new();
    for file in files {
        let bytes = fs::read(file).expect("an AOF file");
        let mut at = 0;
        let line = |at: &mut usize| -> String {
            let end = *at + bytes[*at..].windows(2).position(|w| w == b"\r\n").unwrap();
            let text = String::from_utf8_lossy(&bytes[*at..end]).into_owned();
            *at = end + 2;
            text
        };
        while at < bytes.len() {
            let n: usize = line(&mut at).trim_start_matches('*').parse().unwrap();
            let mut words = Vec::new();
            for _ in 0..n {
                let len: usize = line(&mut at).trim_start_matches('$').parse().unwrap();
                words.push(String::from_utf8_lossy(&bytes[at..at + len]).into_owned());
                at += len + 2;
            }
            out.push(words);
        }
    }
    out
}

/// Each key with its value (GET) and PEXPIRETIME, to compare a replica with
/// its primary.
pub fn snapshot<K: AsRef<str>>(
    con: &mut Connection,
    keys: &[K],
) -> Vec<(String, Option<String>, i64)> {
    keys.iter()
        .map(|k| {
            let k = k.as_ref();
            let value = redis::cmd("GET").arg(k).query(con).expect("GET");
            (k.to_string(), value, pexpiretime(con, k))
        })
        .collect()
}

/// `$RL_SEED`, or a fresh one; printed either way, so a failing random run
/// can be replayed.
pub fn seed(test: &str) -> u64 {
    let seed = std::env::var("RL_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos() as u64
        });
    println!("{test}: RL_SEED={seed}");
    seed
}

/// Primary options for tests that watch the replication offset: the
/// primary's replication PINGs would move it on their own.
pub const QUIET: &[&str] = &["--repl-ping-replica-period", "3600"];

/// Runs `cmds` in one MULTI/EXEC and returns each reply; an error reply of
/// one command comes back as `Value::ServerError` in its place.
pub fn exec(con: &mut redis::Connection, cmds: &[Vec<String>]) -> Vec<redis::Value> {
    assert_eq!(cmd_raw(con, &["MULTI"]), redis::Value::Okay);
    for cmd in cmds {
        let words: Vec<&str> = cmd.iter().map(String::as_str).collect();
        let queued = cmd_raw(con, &words);
        assert!(
            matches!(&queued, redis::Value::SimpleString(s) if s == "QUEUED"),
            "{words:?} was not queued: {queued:?}"
        );
    }
    match cmd_raw(con, &["EXEC"]) {
        redis::Value::Array(replies) => {
            assert_eq!(replies.len(), cmds.len());
            replies
        }
        other => panic!("EXEC replied {other:?}"),
    }
}

/// `exec` with TIME first: the server time (ms), frozen for the whole
/// transaction and so the `now` every command in it saw, and the replies.
pub fn timed(con: &mut redis::Connection, cmds: &[Vec<String>]) -> (i64, Vec<redis::Value>) {
    let mut all = vec![vec!["TIME".to_string()]];
    all.extend_from_slice(cmds);
    let mut replies = exec(con, &all);
    let now = time_ms(&replies.remove(0));
    (now, replies)
}

/// `timed`, with the time in µs.
pub fn timed_us(con: &mut redis::Connection, cmds: &[Vec<String>]) -> (i64, Vec<redis::Value>) {
    let mut all = vec![vec!["TIME".to_string()]];
    all.extend_from_slice(cmds);
    let mut replies = exec(con, &all);
    let now = time_us(&replies.remove(0));
    (now, replies)
}

/// The server's version from `INFO server`: `valkey_version`, or
/// `redis_version` on servers that only report that.
pub fn server_version(con: &mut redis::Connection) -> Option<String> {
    info_field(con, "server", "valkey_version")
        .or_else(|| info_field(con, "server", "redis_version"))
}

/// The major version of the server under test (0 if it reports none).
pub fn server_major_version() -> u32 {
    let server = Server::start();
    server_version(&mut server.client())
        .and_then(|v| v.split('.').next()?.parse().ok())
        .unwrap_or(0)
}

/// Runs a command to completion, killed after `timeout`: its stdout if it
/// succeeded, else a panic with its stdout and stderr. Both pipes are read
/// while it runs, so a chatty child cannot block on a full pipe.
pub fn run_to_completion(mut cmd: Command, timeout: Duration) -> String {
    let what = format!("{cmd:?}");
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("spawn {what}: {e}"));
    let mut stdout = child.stdout.take().expect("piped stdout");
    let mut stderr = child.stderr.take().expect("piped stderr");
    let out = thread::spawn(move || {
        let mut s = String::new();
        let _ = stdout.read_to_string(&mut s);
        s
    });
    let err = thread::spawn(move || {
        let mut s = String::new();
        let _ = stderr.read_to_string(&mut s);
        s
    });
    let start = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().expect("try_wait") {
            break Some(status);
        }
        if start.elapsed() > timeout {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        thread::sleep(Duration::from_millis(20));
    };
    let (out, err) = (
        out.join().unwrap_or_default(),
        err.join().unwrap_or_default(),
    );
    match status {
        Some(s) if s.success() => out,
        Some(s) => panic!("{what} failed ({s})\n--- stdout:\n{out}\n--- stderr:\n{err}"),
        None => {
            panic!("{what} still running after {timeout:?}\n--- stdout:\n{out}\n--- stderr:\n{err}")
        }
    }
}
