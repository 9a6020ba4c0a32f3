//! The differential oracle: the module against its FUNCTION library
//! (`functions/ratelimit.lua`, what users without modules run), loaded on
//! the same server. Every call goes to both, on two copies of each limiter
//! key (`lib:` and `mod:`), and they must agree exactly: the reply (errors
//! by their text), the stored value and the absolute expiry of every key.
//!
//! Time: each step is one MULTI/EXEC holding the library's FCALL, the
//! module's call, and GET and PEXPIRETIME of every key both touched. Inside
//! a transaction the server's clock is frozen, for `TIME` in a function as
//! for the module's cached clock, so both decide at the same microsecond
//! (`server_time_is_frozen_inside_multi_exec` checks this). Real sleeps
//! between steps (some shorter than a ms, and policies refilling every
//! 500 µs) move the clock on, so refills, sliding windows and expiry are
//! exercised; the timings vary from run to run, the comparison stays
//! exact.

use crate::common;

use std::fmt::Write as _;
use std::path::Path;
use std::thread::sleep;
use std::time::{Duration, Instant};

use crate::common::{cmd_raw, exec, int, words, Rng, Server};
use redis::{Connection, Value};

/// A reply reduced to what is compared.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Reply {
    Ints(Vec<i64>),
    Error(String),
    Other(String),
}

impl Reply {
    fn of(value: &Value) -> Reply {
        match value {
            Value::Array(items) => {
                let ints: Option<Vec<i64>> = items
                    .iter()
                    .map(|v| match v {
                        Value::Int(n) => Some(*n),
                        _ => None,
                    })
                    .collect();
                match ints {
                    Some(ints) => Reply::Ints(ints),
                    None => Reply::Other(format!("{items:?}")),
                }
            }
            Value::Int(n) => Reply::Ints(vec![*n]),
            Value::ServerError(e) => Reply::Error(match e.details() {
                Some(detail) => format!("{} {detail}", e.code()),
                None => e.code().to_string(),
            }),
            other => Reply::Other(format!("{other:?}")),
        }
    }
}

/// A string reply or nil, for GET.
fn text(value: &Value) -> Option<String> {
    match value {
        Value::BulkString(b) => Some(String::from_utf8_lossy(b).into_owned()),
        Value::SimpleString(s) => Some(s.clone()),
        _ => None,
    }
}

/// `functions/ratelimit.lua`, loaded (again) into the server.
fn load_library(con: &mut Connection) {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("functions/ratelimit.lua");
    let body =
        std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
    let name: String = redis::cmd("FUNCTION")
        .arg("LOAD")
        .arg("REPLACE")
        .arg(body)
        .query(con)
        .unwrap_or_else(|e| panic!("FUNCTION LOAD functions/ratelimit.lua: {e}"));
    assert_eq!(name, "ratelimit");
}

/// Limiter keys in a module call are written as these placeholders; each
/// side gets its own copy (`lib:K1`, `mod:K1`). Any other key (a META hash)
/// is shared: both only read it.
const PLACEHOLDERS: [&str; 4] = ["K1", "K2", "K3", "K4"];

fn side(word: &str, prefix: &str) -> String {
    match PLACEHOLDERS.contains(&word) {
        true => format!("{prefix}:{word}"),
        false => word.to_string(),
    }
}

/// The library's FCALL for a module call (placeholders as given): META
/// moves into KEYS, as the library's calling convention has it.
fn fcall_of(module: &[String]) -> Vec<String> {
    let command = module[0].to_ascii_uppercase();
    let function = command.to_ascii_lowercase().replace('.', "_");
    let fcall = match command.as_str() {
        "RL.TTL" | "RL.LIMIT" => "FCALL_RO",
        _ => "FCALL",
    };
    let mut out = words(&[fcall, &function]);
    match command.as_str() {
        "RL.ADMIT" | "RL.REFUND" | "RL.TTL" => {
            let mut rest = Vec::new();
            let mut meta = None;
            let mut at = 2;
            while at < module.len() {
                if module[at].eq_ignore_ascii_case("META")
                    && meta.is_none()
                    && at + 1 < module.len()
                {
                    meta = module.get(at + 1).cloned();
                    at += 2;
                } else {
                    rest.push(module[at].clone());
                    at += 1;
                }
            }
            out.push(if meta.is_some() { "2" } else { "1" }.into());
            out.push(module[1].clone());
            out.extend(meta);
            out.extend(rest);
        }
        "RL.ADMITALL" => {
            let n: usize = module[1].parse().expect("numkeys");
            let counters = &module[2..2 + n];
            let rest = &module[2 + n..];
            let mut metas: Vec<String> = Vec::new();
            for pair in rest.windows(2) {
                if pair[0].eq_ignore_ascii_case("META") && !metas.contains(&pair[1]) {
                    metas.push(pair[1].clone());
                }
            }
            out.push((n + metas.len()).to_string());
            out.extend(counters.iter().cloned());
            out.extend(metas);
            out.extend(rest.iter().cloned());
        }
        _ => {
            out.push("1".into());
            out.extend(module[1..].iter().cloned());
        }
    }
    out
}

/// What a run went through, so a test can insist on its coverage.
#[derive(Debug, Default)]
struct Coverage {
    calls: usize,
    admitted: usize,
    /// Admitted with a delay (the leaky queue).
    delayed: usize,
    refused_wait: usize,
    refused_never: usize,
    peeks: usize,
    errors: usize,
    /// Calls that changed a stored value or an expiry.
    writes: usize,
}

/// The module and the library, side by side on one server.
struct Oracle {
    con: Connection,
    log: String,
    mismatches: Vec<String>,
    seen: Coverage,
}

impl Oracle {
    fn new(server: &Server) -> Oracle {
        let mut con = server.client();
        load_library(&mut con);
        Oracle {
            con,
            log: String::new(),
            mismatches: Vec::new(),
            seen: Coverage::default(),
        }
    }

    /// The same command on both copies of the limiter keys in one
    /// transaction (placeholders as in a call), e.g. a counter left
    /// without a TTL by another client.
    fn both(&mut self, args: &[&str]) {
        let on = |prefix: &str| -> Vec<String> { args.iter().map(|a| side(a, prefix)).collect() };
        let replies = exec(&mut self.con, &[on("lib"), on("mod")]);
        assert_eq!(
            replies[0], replies[1],
            "{args:?} answered differently on the two copies"
        );
        let _ = writeln!(self.log, "  both: {args:?}");
    }

    /// One module call (placeholders for the limiter keys) and the
    /// library's equivalent, at the same frozen millisecond. `cost` is for
    /// the coverage counts. Returns the module's reply.
    fn call(&mut self, label: &str, module: &[String], cost: i64) -> Reply {
        let lib = fcall_of(module);
        self.pair(label, &lib, module, cost)
    }

    /// `lib` and `module` as given (placeholders for the limiter keys).
    fn pair(&mut self, label: &str, lib: &[String], module: &[String], cost: i64) -> Reply {
        let keys: Vec<&str> = PLACEHOLDERS
            .iter()
            .copied()
            .filter(|k| module.iter().any(|w| w == k))
            .collect();
        let mut commands = vec![
            lib.iter().map(|w| side(w, "lib")).collect::<Vec<_>>(),
            module.iter().map(|w| side(w, "mod")).collect::<Vec<_>>(),
        ];
        for k in &keys {
            for prefix in ["lib", "mod"] {
                commands.push(words(&["GET", &side(k, prefix)]));
                commands.push(words(&["PEXPIRETIME", &side(k, prefix)]));
            }
        }
        let before = self.state(&keys);
        let replies = exec(&mut self.con, &commands);
        let (a, b) = (Reply::of(&replies[0]), Reply::of(&replies[1]));
        self.seen.calls += 1;
        let n = self.seen.calls;
        let mut problems = Vec::new();
        if a != b {
            problems.push("replies differ".to_string());
        }
        let mut after = Vec::new();
        for (i, k) in keys.iter().enumerate() {
            let at = 2 + 4 * i;
            let (va, ea) = (text(&replies[at]), int(&replies[at + 1]));
            let (vb, eb) = (text(&replies[at + 2]), int(&replies[at + 3]));
            if va != vb {
                problems.push(format!("{k}: stored {va:?} / {vb:?}"));
            }
            if ea != eb {
                problems.push(format!("{k}: expiry {ea} / {eb}"));
            }
            after.push((vb, eb));
        }
        if before != after {
            self.seen.writes += 1;
        }
        let line = format!("{n:4} {label}: {module:?}\n     lib {a:?}\n     mod {b:?}; {after:?}");
        let _ = writeln!(self.log, "{line}");
        if !problems.is_empty() {
            self.mismatches
                .push(format!("{line}\n     <- {}", problems.join(", ")));
        }
        self.count(&b, cost, module[0].eq_ignore_ascii_case("RL.THROTTLE"));
        b
    }

    /// A malformed call the server itself may refuse before queueing it
    /// (a module command's arity): sent outside a transaction, to both.
    fn malformed(&mut self, label: &str, module: &[String]) {
        let on = |words: &[String], prefix: &str| -> Vec<String> {
            words.iter().map(|w| side(w, prefix)).collect()
        };
        let (lib, module) = (on(&fcall_of(module), "lib"), on(module, "mod"));
        let send = |con: &mut Connection, words: &[String]| {
            let words: Vec<&str> = words.iter().map(String::as_str).collect();
            Reply::of(&cmd_raw(con, &words))
        };
        let (a, b) = (send(&mut self.con, &lib), send(&mut self.con, &module));
        self.seen.calls += 1;
        let line = format!(
            "{:4} {label}: {module:?}\n     lib {a:?}\n     mod {b:?}",
            self.seen.calls
        );
        let _ = writeln!(self.log, "{line}");
        if a != b || !matches!(b, Reply::Error(_)) {
            self.mismatches
                .push(format!("{line}\n     <- replies differ, or no error"));
        }
        self.seen.errors += 1;
    }

    /// The module copies' values and expiries.
    fn state(&mut self, keys: &[&str]) -> Vec<(Option<String>, i64)> {
        keys.iter()
            .map(|k| {
                let key = side(k, "mod");
                let v: Option<String> = redis::cmd("GET").arg(&key).query(&mut self.con).unwrap();
                let e: i64 = redis::cmd("PEXPIRETIME")
                    .arg(&key)
                    .query(&mut self.con)
                    .unwrap();
                (v, e)
            })
            .collect()
    }

    fn count(&mut self, reply: &Reply, cost: i64, throttle: bool) {
        match reply {
            Reply::Ints(v) if v.len() == 5 => {
                let admitted = (v[0] == 1) != throttle;
                if cost == 0 {
                    self.seen.peeks += 1;
                }
                match (admitted, v[3]) {
                    (true, r) if r > 0 && !throttle => self.seen.delayed += 1,
                    (true, _) => {}
                    (false, -1) => self.seen.refused_never += 1,
                    (false, _) => self.seen.refused_wait += 1,
                }
                self.seen.admitted += usize::from(admitted);
            }
            Reply::Error(_) => self.seen.errors += 1,
            _ => {}
        }
    }

    /// Panics with the disagreements (and the log's tail) when any step
    /// disagreed.
    fn verdict(&self, what: &str) {
        if !self.mismatches.is_empty() {
            let tail: Vec<&str> = self.log.lines().collect();
            let tail = tail[tail.len().saturating_sub(60)..].join("\n");
            panic!(
                "{what}: {} of {} calls disagree:\n{}\nlog tail:\n{tail}",
                self.mismatches.len(),
                self.seen.calls,
                self.mismatches[..self.mismatches.len().min(20)].join("\n"),
            );
        }
        eprintln!("{what}: {} calls agree; {:?}", self.seen.calls, self.seen);
    }
}

/// Sleeps between calls (µs): often none, so bursts hit the limit, and
/// sometimes a fraction of an interval (of a ms, too) up to a few intervals.
const SLEEPS_US: [u64; 15] = [
    0, 0, 0, 0, 0, 150, 420, 730, 3_000, 11_000, 29_000, 60_000, 97_000, 150_000, 260_000,
];

/// The module's call for one cost.
type Build = dyn Fn(i64) -> Vec<String>;

/// The sequence for one policy: a burst without pauses (refusals for sure),
/// then `calls` calls with costs 0..=max_cost and pauses from `SLEEPS_MS`,
/// with the `events` (applied to both copies) at their call numbers.
#[allow(clippy::too_many_arguments)]
fn run_sequence(
    oracle: &mut Oracle,
    label: &str,
    build: &Build,
    max_cost: i64,
    calls: usize,
    seed: u64,
    events: &[(usize, Vec<String>)],
) {
    let _ = writeln!(oracle.log, "{label}");
    let mut rng = Rng::new(seed);
    for _ in 0..=max_cost {
        oracle.call(label, &build(1), 1);
    }
    for i in 0..calls {
        for (at, event) in events {
            if *at == i {
                let words: Vec<&str> = event.iter().map(String::as_str).collect();
                oracle.both(&words);
            }
        }
        let cost = rng.below(max_cost as usize + 1) as i64;
        oracle.call(label, &build(cost), cost);
        sleep(Duration::from_micros(rng.pick(&SLEEPS_US)));
    }
    // Start the next policy from a fresh limiter.
    oracle.both(&["DEL", "K1"]);
}

/// `SET K1 value` on both copies (no TTL: state left by some other client).
fn set(value: &str) -> Vec<String> {
    words(&["SET", "K1", value])
}

fn del() -> Vec<String> {
    words(&["DEL", "K1"])
}

/// `PERSIST K1`: the state as it stands, left without a TTL, which the
/// next refusal repairs (an expiry, or a delete once spent).
fn persist() -> Vec<String> {
    words(&["PERSIST", "K1"])
}

/// RL.ADMIT ... ALGO `algo` for each (limit, window_ms, burst) policy.
fn check_algorithm(
    algo: &'static str,
    policies: &[(i64, i64, Option<i64>)],
    events: &[(usize, Vec<String>)],
) -> Coverage {
    let server = Server::start();
    let mut oracle = Oracle::new(&server);
    for (n, &(limit, window, burst)) in policies.iter().enumerate() {
        let build = move |cost: i64| {
            let (limit, window) = (limit.to_string(), window.to_string());
            let mut module = words(&[
                "RL.ADMIT", "K1", "ALGO", algo, "LIMIT", &limit, "WINDOW", &window,
            ]);
            if let Some(b) = burst {
                module.extend(["BURST".into(), b.to_string()]);
            }
            module.extend(["COST".into(), cost.to_string()]);
            module
        };
        // Up to one more than ever fits: the burst (+1, the request being
        // served, for leaky) or the limit.
        let fits = burst.unwrap_or(limit) + i64::from(algo == "leaky");
        let label = format!("{algo} limit {limit} window {window} burst {burst:?}");
        run_sequence(
            &mut oracle,
            &label,
            &build,
            fits + 1,
            45,
            0x9e37_79b9_7f4a_7c15 ^ (n as u64 + 1),
            events,
        );
    }
    oracle.verdict(algo);
    let seen = std::mem::take(&mut oracle.seen);
    assert!(seen.admitted > 0, "{algo}: no call was admitted: {seen:?}");
    assert!(
        seen.refused_wait > 0,
        "{algo}: no refusal with a wait: {seen:?}"
    );
    assert!(
        seen.refused_never > 0,
        "{algo}: no never-fits refusal: {seen:?}"
    );
    assert!(seen.peeks > 0, "{algo}: no peek: {seen:?}");
    seen
}

/// State another client could have left: far future, far past, corrupt.
fn edge_events(prefix: &str) -> Vec<(usize, Vec<String>)> {
    vec![
        (6, persist()),
        (12, set(&format!("{prefix}:9223372036854775807"))),
        (16, set(&format!("{prefix}:-5"))),
        (20, set("junk")),
        (21, del()),
        (34, persist()),
    ]
}

#[test]
fn server_time_is_frozen_inside_multi_exec() {
    let server = Server::start();
    let mut con = server.client();
    load_library(&mut con);
    let clock = "return redis.call('TIME')";
    // A script busy for tens of ms between two reads of the clock.
    let busy = "local t = redis.call('TIME') local s = 0 \
                for i = 1, 5000000 do s = s + i end \
                local u = redis.call('TIME') return {t[1], t[2], u[1], u[2]}";
    let admit = |key: &str| words(&["RL.ADMIT", key, "LIMIT", "10", "WINDOW", "100000"]);
    let fcall = words(&[
        "FCALL", "rl_admit", "1", "f3", "LIMIT", "10", "WINDOW", "100000",
    ]);
    let started = Instant::now();
    let replies = exec(
        &mut con,
        &[
            words(&["EVAL", clock, "0"]),
            admit("f1"),
            words(&["EVAL", busy, "0"]),
            admit("f2"),
            fcall,
            words(&["EVAL", clock, "0"]),
            words(&["PEXPIRETIME", "f1"]),
            words(&["PEXPIRETIME", "f2"]),
            words(&["PEXPIRETIME", "f3"]),
        ],
    );
    let took = started.elapsed();
    let times = |v: &Value| -> Vec<i64> {
        let Value::Array(items) = v else {
            panic!("{v:?}")
        };
        items
            .iter()
            .map(|i| text(i).expect("bulk").parse().expect("integer"))
            .collect()
    };
    let (first, middle, last) = (times(&replies[0]), times(&replies[2]), times(&replies[5]));
    assert!(
        took >= Duration::from_millis(5),
        "the transaction took {took:?}: too short to show a moving clock"
    );
    assert_eq!(middle[..2], first[..], "TIME moved within the busy script");
    assert_eq!(middle[2..], first[..], "TIME moved within the busy script");
    assert_eq!(last, first, "TIME moved across the transaction");
    let script_ms = first[0] * 1000 + first[1] / 1000;
    for (i, what) in [
        (6, "module, 1st call"),
        (7, "module, 2nd call"),
        (8, "library"),
    ] {
        assert_eq!(int(&replies[i]) - 100_000, script_ms, "{what}");
    }
}

/// Limit 7, window 60 s, costs 0..9, new windows and TTL-less counters;
/// then a short window that passes between calls, and a corrupt counter.
#[test]
fn fixed_window_agrees() {
    let server = Server::start();
    let mut oracle = Oracle::new(&server);
    let admit = |limit: &str, window: &str, cost: i64| {
        words(&[
            "RL.ADMIT",
            "K1",
            "LIMIT",
            limit,
            "WINDOW",
            window,
            "COST",
            &cost.to_string(),
        ])
    };
    for i in 0..50usize {
        match i {
            15 | 33 => oracle.both(&["DEL", "K1"]),
            24 => oracle.both(&["SET", "K1", "3"]), // TTL-less counter, then admits
            40 => oracle.both(&["SET", "K1", "5"]), // TTL-less counter, then cost > limit
            44 => oracle.both(&["SET", "K1", "12"]), // TTL-less counter over the limit
            _ => {}
        }
        let cost: i64 = match i {
            41 => 9,
            45 => 0,
            46 => 1,
            _ => (i as i64 * 7 + 3) % 10,
        };
        oracle.call("fixed 7/60000", &admit("7", "60000", cost), cost);
    }
    for i in 0..30usize {
        if i == 20 {
            oracle.both(&["SET", "K1", "junk"]);
        }
        if i == 21 {
            oracle.both(&["DEL", "K1"]);
        }
        let cost = (i as i64 * 3 + 1) % 5;
        oracle.call("fixed 3/120", &admit("3", "120", cost), cost);
        sleep(Duration::from_millis([0, 0, 7, 40, 90][i % 5]));
    }
    oracle.verdict("fixed");
    let seen = &oracle.seen;
    assert_eq!(seen.calls, 80);
    assert!(seen.admitted > 0 && seen.refused_wait > 0 && seen.refused_never > 0);
    assert!(seen.peeks > 0 && seen.errors > 0, "{seen:?}");
}

#[test]
fn sliding_window_agrees() {
    // Windows of 300 and 170 ms: the sleeps cross many window starts.
    let events = vec![
        (6, persist()),
        (12, set("sliding:0:3:9")),
        (20, set("junk")),
        (21, del()),
        (26, set("sliding:9999999999999:2:1")), // a window after now
        (34, persist()),
    ];
    check_algorithm("sliding", &[(5, 300, None), (4, 170, None)], &events);
}

#[test]
fn token_bucket_agrees() {
    // Intervals of 200 ms, 333.333334 ms (not a whole ms), 125 ms and
    // 500 µs (refilled between two calls in the same ms).
    let events = vec![
        (6, persist()),
        (12, set("token:0:9000000000000")), // last refill in the future
        (16, set("token:999999999999999:0")),
        (20, set("junk")),
        (21, del()),
        (24, set("token:0:9000000000000:999000")),
        (30, set("token:5:1")),
        (32, set("token:5:1:250000")),
        (34, persist()),
    ];
    check_algorithm(
        "token",
        &[
            (5, 1000, Some(3)),
            (3, 1000, Some(2)),
            (4, 500, None),
            (2000, 1000, Some(2)),
        ],
        &events,
    );
}

#[test]
fn gcra_agrees() {
    check_algorithm(
        "gcra",
        &[
            (5, 1000, Some(3)),
            (3, 1000, Some(2)),
            (4, 500, None),
            (2000, 1000, Some(2)),
        ],
        &edge_events("gcra"),
    );
}

#[test]
fn leaky_bucket_agrees() {
    // Queue of 3, of 2 with a 333.333334 ms interval, none at all, and one
    // draining every 500 µs.
    let seen = check_algorithm(
        "leaky",
        &[
            (5, 1000, Some(3)),
            (3, 1000, Some(2)),
            (4, 500, Some(0)),
            (2000, 1000, Some(2)),
        ],
        &edge_events("leaky"),
    );
    assert!(seen.delayed > 0, "no admitted call had to wait: {seen:?}");
}

#[test]
fn throttle_agrees() {
    let server = Server::start();
    let mut oracle = Oracle::new(&server);
    // (max_burst, count, period_s): 100 ms, 333.333333 ms and 500 µs
    // intervals.
    for (n, (max_burst, count, period)) in [(2i64, 10i64, 1i64), (4, 3, 1), (2, 2000, 1)]
        .into_iter()
        .enumerate()
    {
        let build = move |q: i64| {
            let mut module = words(&["RL.THROTTLE", "K1"]);
            module.extend([max_burst, count, period, q].map(|v| v.to_string()));
            module
        };
        let events = vec![
            (12, set("9223372036854775807")), // redis-cell's bare ns integer
            (14, set("1")),
            (16, set("gcra:9223372036854775807")),
            (20, set("junk")),
            (21, del()),
            (34, persist()),
        ];
        run_sequence(
            &mut oracle,
            &format!("throttle {max_burst} {count} {period}"),
            &build,
            max_burst + 3,
            45,
            0x2545_f491_4f6c_dd1d ^ (n as u64 + 1),
            &events,
        );
    }
    oracle.verdict("throttle");
    let seen = &oracle.seen;
    assert!(seen.admitted > 0 && seen.refused_wait > 0 && seen.refused_never > 0);
    assert!(seen.peeks > 0 && seen.errors > 0, "{seen:?}");
}

/// The algorithms and their policies the random run draws from: short
/// windows, so that a run of a few seconds crosses many of them.
const ALGOS: [&str; 5] = ["fixed", "sliding", "token", "gcra", "leaky"];
const WINDOWS: [i64; 6] = [5, 13, 40, 97, 250, 1000];

/// META hashes the random run names: complete, partial, corrupt, and a key
/// of the wrong type.
fn meta_fixtures(con: &mut Connection) {
    let setup: &[&[&str]] = &[
        &[
            "HSET",
            "meta:gcra",
            "max",
            "4",
            "duration",
            "40",
            "algorithm",
            "gcra",
            "burst",
            "2",
        ],
        &[
            "HSET",
            "meta:sliding",
            "max",
            "3",
            "duration",
            "13",
            "algorithm",
            "Sliding",
        ],
        &[
            "HSET",
            "meta:leaky",
            "max",
            "6",
            "duration",
            "97",
            "algorithm",
            "leaky",
            "burst",
            "0",
        ],
        &["HSET", "meta:max", "max", "5"],
        &["HSET", "meta:off", "max", "0", "duration", "x"],
        &["HSET", "meta:bad", "max", "5", "duration", "0"],
        &[
            "HSET",
            "meta:badalgo",
            "max",
            "5",
            "duration",
            "10",
            "algorithm",
            "magic",
        ],
        &[
            "HSET",
            "meta:badburst",
            "max",
            "5",
            "duration",
            "10",
            "algorithm",
            "token",
            "burst",
            "0",
        ],
        &["SET", "meta:string", "x"],
        &[
            "HSET",
            "meta:shadow",
            "max",
            "2",
            "duration",
            "40",
            "algorithm",
            "gcra",
            "shadow",
            "1",
        ],
        &[
            "HSET",
            "meta:badshadow",
            "max",
            "2",
            "duration",
            "40",
            "shadow",
            "7",
        ],
        &[
            "HSET",
            "meta:penalty",
            "max",
            "2",
            "duration",
            "13",
            "penalty",
            "97",
        ],
        &[
            "HSET",
            "meta:badpenalty",
            "max",
            "2",
            "duration",
            "13",
            "penalty",
            "-4",
        ],
        &[
            "HSET",
            "meta:escalate",
            "max",
            "2",
            "duration",
            "13",
            "penalty",
            "40",
            "escalate",
            "250",
        ],
        &[
            "HSET",
            "meta:badescalate",
            "max",
            "2",
            "duration",
            "13",
            "escalate",
            "250",
        ],
    ];
    for cmd in setup {
        let _: Value = redis::cmd(cmd[0]).arg(&cmd[1..]).query(con).unwrap();
    }
}

const METAS: [&str; 15] = [
    "meta:gcra",
    "meta:sliding",
    "meta:leaky",
    "meta:max",
    "meta:off",
    "meta:bad",
    "meta:badalgo",
    "meta:badburst",
    "meta:string",
    "meta:shadow",
    "meta:badshadow",
    "meta:penalty",
    "meta:badpenalty",
    "meta:escalate",
    "meta:badescalate",
];

/// TZ values the random runs draw: fixed offsets, and IANA names with
/// daylight saving of every kind (Santiago and Beirut change at midnight,
/// Lord Howe by 30 minutes, Dublin's is negative), or none.
const TZS: [&str; 10] = [
    "+05:30",
    "-08:00",
    "+00:00",
    "Europe/Berlin",
    "America/Santiago",
    "Asia/Beirut",
    "Australia/Lord_Howe",
    "Europe/Dublin",
    "Asia/Kolkata",
    "UTC",
];

/// Policy options for a random call: mostly a complete inline policy,
/// sometimes from a META hash, sometimes malformed.
fn random_policy(rng: &mut Rng, algo: &str) -> Vec<String> {
    let mut out = Vec::new();
    if rng.pct(15) {
        out.extend(words(&["META", rng.pick(&METAS)]));
        if rng.pct(50) {
            return out;
        }
    }
    let named = rng.pct(95);
    if named {
        out.extend(words(&["ALGO", algo]));
    }
    let limit = rng.below(7) as i64 + usize::from(rng.pct(95)) as i64;
    out.extend(words(&["LIMIT", &limit.to_string()]));
    // Calendar periods (issue 27), over the fixed and the sliding window
    // alike: mostly in place of WINDOW; with it, an error.
    let calendar = rng.pct(8);
    if rng.pct(if calendar { 15 } else { 97 }) {
        out.extend(words(&["WINDOW", &rng.pick(&WINDOWS).to_string()]));
    }
    if named && matches!(algo, "token" | "gcra" | "leaky") && rng.pct(70) {
        let burst = if rng.pct(5) { 0 } else { 1 + rng.below(6) };
        out.extend(words(&["BURST", &burst.to_string()]));
    }
    if calendar {
        out.extend(words(&[
            "CALENDAR",
            rng.pick(&["day", "week", "month", "year"]),
        ]));
        if rng.pct(50) {
            out.extend(words(&["TZ", rng.pick(&TZS)]));
        }
    }
    if rng.pct(10) {
        // The penalty box (issue 27).
        out.extend(words(&["PENALTY", &rng.pick(&WINDOWS).to_string()]));
        if rng.pct(60) {
            // Its ladder (issue 27): a cap below the penalty is an error.
            out.extend(words(&["ESCALATE", &rng.pick(&WINDOWS).to_string()]));
        }
    }
    for flag in ["SHADOW", "ALIGN"] {
        if rng.pct(15) {
            // Shadow mode, aligned windows (issue 27): a flag, anywhere
            // among the options (ALIGN with a bucket is an error).
            let at = 2 * rng.below(out.len() / 2 + 1);
            out.insert(at, flag.to_string());
        }
    }
    if rng.pct(3) {
        // Malformed, in one of the ways the module names.
        let bad: &[&[&str]] = &[
            &["LIMIT", "-1"],
            &["WINDOW", "0"],
            &["BOGUS", "1"],
            &["ALGO", "magic"],
            &["BURST", "1", "ALGO", "fixed"],
            &["COST"],
            &["window", "1.5"],
            &["LIMIT", "01"],
            &["SHADOW", "LIMIT", "1", "SHADOW"],
            &["SHADOW", "1"],
            &["PENALTY", "0"],
            &["PENALTY"],
            &["ESCALATE", "40"],
            &["PENALTY", "40", "ESCALATE"],
            &["PENALTY", "40", "ESCALATE", "-1"],
        ];
        out = words(rng.pick(bad));
    }
    out
}

/// Random call sequences over every algorithm, RL.THROTTLE, RL.ADMITALL,
/// RL.REFUND, RL.RESET, RL.TTL and RL.LIMIT, with policies changing under
/// the keys, foreign state dropped in, and the clock moving by short
/// sleeps: at least 5,000 paired calls.
#[test]
fn random_calls_agree() {
    let server = Server::start();
    let mut oracle = Oracle::new(&server);
    meta_fixtures(&mut oracle.con);
    let mut rng = Rng::new(common::seed("random_calls_agree"));
    // Each key keeps one algorithm for a stretch, then moves on.
    let mut algo_of = [0usize, 1, 2, 3];
    let foreign = [
        "7",
        "-3",
        "junk",
        "sliding:0:3:9",
        "token:0:9000000000000",
        "token:0:9000000000000:999000",
        "gcra:-5",
        "leaky:9223372036854775807",
        "gcra:1",
        "",
        "penalty:1/5:0:",
        "penalty:1/0:0:",
        "penalty:1:1:3",
    ];
    // The last slot booked (RESERVE), for a cancel to name.
    let mut last_at = 1i64;
    for step in 0..5_200usize {
        let k = rng.below(4);
        let key = PLACEHOLDERS[k];
        if rng.pct(1) {
            algo_of[k] = rng.below(ALGOS.len());
        }
        let algo = ALGOS[algo_of[k]];
        let cost = match rng.below(10) {
            0 => 0,
            1 => rng.below(12) as i64,
            _ => 1 + rng.below(2) as i64,
        };
        let roll = rng.below(100);
        let module: Vec<String> = match roll {
            0..=54 => {
                let mut m = words(&["RL.ADMIT", key]);
                m.extend(random_policy(&mut rng, algo));
                m.extend(words(&["COST", &cost.to_string()]));
                // Issue 38: bookings (a window's refusal, an error) and
                // forced charges.
                match rng.below(10) {
                    0..=1 => m.extend(words(&["RESERVE", &rng.below(3_000).to_string()])),
                    2 => m.push("FORCE".into()),
                    _ => {}
                }
                m
            }
            55..=66 => {
                let mut m = words(&["RL.REFUND", key]);
                m.extend(random_policy(&mut rng, algo));
                if rng.pct(80) {
                    m.extend(words(&["COST", &cost.to_string()]));
                }
                // Issue 38: a cancel of a booked slot (or one reached).
                if rng.pct(25) {
                    let at = if rng.pct(80) { last_at } else { 1 };
                    m.extend(words(&["AT", &at.to_string()]));
                }
                m
            }
            67..=74 => {
                let mut m = words(&["RL.TTL", key]);
                m.extend(random_policy(&mut rng, algo));
                m
            }
            75..=83 => {
                // A gcra key for the throttle, mostly.
                let key = if rng.pct(80) { PLACEHOLDERS[3] } else { key };
                let (b, c, p) = (rng.below(4), 1 + rng.below(40), 1 + rng.below(2));
                let mut m = words(&["RL.THROTTLE", key]);
                m.extend([b, c, p].map(|v| v.to_string()));
                if rng.pct(80) {
                    m.push(cost.to_string());
                }
                m
            }
            84..=93 => {
                let n = 1 + rng.below(3);
                let mut m = words(&["RL.ADMITALL", &n.to_string()]);
                let first = rng.below(4);
                let keys: Vec<usize> = (0..n).map(|i| (first + i) % 4).collect();
                m.extend(keys.iter().map(|&i| PLACEHOLDERS[i].to_string()));
                if rng.pct(60) {
                    m.extend(words(&["COST", &cost.to_string()]));
                }
                for &i in &keys {
                    m.push("POLICY".into());
                    m.extend(random_policy(&mut rng, ALGOS[algo_of[i]]));
                }
                m
            }
            94..=96 => words(&["RL.RESET", key]),
            97 => match rng.below(8) {
                0..=2 => words(&["RL.LIMIT", rng.pick(&METAS)]),
                // Malformed as a whole: arity, a repeated META, too many
                // arguments.
                3 => words(&["RL.LIMIT", rng.pick(&METAS), "extra"]),
                4 => words(&["RL.RESET", key, "extra"]),
                5 => words(&["RL.THROTTLE", key, "1", "1"]),
                6 => words(&[
                    "RL.ADMIT", key, "META", "meta:max", "LIMIT", "2", "META", "meta:max",
                ]),
                _ => {
                    let mut m = words(&["RL.ADMIT", key, "LIMIT", "5", "WINDOW", "10"]);
                    m.extend((0..250 + rng.below(4)).map(|_| "COST".to_string()));
                    m
                }
            },
            _ => {
                // Foreign state, with or without a TTL.
                let value = rng.pick(&foreign);
                let mut cmd = vec!["SET", key, value];
                let px = (1 + rng.below(300)).to_string();
                if rng.pct(70) {
                    cmd.extend(["PX", px.as_str()]);
                }
                oracle.both(&cmd);
                continue;
            }
        };
        if roll == 97 && module.len() != 2 {
            oracle.malformed(&format!("step {step}"), &module);
            continue;
        }
        let reply = oracle.call(&format!("step {step}"), &module, cost);
        if let Reply::Ints(ints) = &reply {
            if ints.len() == 7 && ints[6] > 0 {
                last_at = ints[6];
            }
        }
        // Another algorithm's state blocks a key until it expires: mostly,
        // clear it.
        if matches!(&reply, Reply::Error(e) if e.contains("does not hold")) && rng.pct(60) {
            oracle.both(&["DEL", key]);
        }
        match rng.below(20) {
            0..=13 => {}
            14..=16 => sleep(Duration::from_millis(1 + rng.below(4) as u64)),
            17..=18 => sleep(Duration::from_micros(50 + rng.below(900) as u64)),
            _ => sleep(Duration::from_millis(10 + rng.below(40) as u64)),
        }
    }
    oracle.verdict("random calls");
    let seen = &oracle.seen;
    assert!(seen.calls >= 5_000, "{seen:?}");
    assert!(
        seen.admitted > 500 && seen.refused_wait > 200 && seen.refused_never > 20,
        "{seen:?}"
    );
    assert!(
        seen.delayed > 10 && seen.peeks > 100 && seen.errors > 100 && seen.writes > 1_000,
        "{seen:?}"
    );
}

/// Keys left by another writer, met by both backends: far-future and
/// far-past state, keys without a TTL or expiring too early, foreign
/// values and another algorithm's state, for every algorithm and for the
/// throttle; each with an admit, a peek, a refund, a never-fitting cost and
/// a TTL read.
#[test]
fn crafted_state_agrees() {
    let server = Server::start();
    let mut oracle = Oracle::new(&server);
    let states: &[&str] = &[
        "0",
        "5",
        "-7",
        "9223372036854775807",
        "-9007199254740000",
        "sliding:0:3:9",
        "sliding:9223372036854775807:1:1",
        "sliding:9999999999999:2:1",
        "sliding:1:0:0",
        "sliding:01:2:3",
        "token:0:0",
        "token:0:9223372036854775807",
        "token:9223372036854775807:-9223372036854775808",
        "token:5:1",
        "token:-1:5",
        "token:5:1:999999",
        "token:0:1764000000000:500000",
        "token:0:9223372036854775807:999999",
        "token:9223372036854775807:-9223372036854775808:0",
        "token:5:1:1000000",
        "token:5:1:-1",
        "token:5:1:2:3",
        "token:5:1:",
        "gcra:0",
        "gcra:-9223372036854775808",
        "gcra:9223372036854775807",
        "gcra:1764000000000000000",
        "gcra:+5",
        "leaky:-5",
        "leaky:9223372036854775807",
        "leaky:123456",
        "leaky:1:2",
        "1",
        "junk",
        "",
    ];
    let calls = |algo: &str| -> Vec<Vec<String>> {
        let policy = words(&["ALGO", algo, "LIMIT", "5", "WINDOW", "1000"]);
        let bucket = if algo == "fixed" || algo == "sliding" {
            vec![]
        } else {
            words(&["BURST", "3"])
        };
        let with = |cmd: &str, cost: Option<&str>| {
            let mut c = words(&[cmd, "K1"]);
            c.extend(policy.iter().cloned());
            c.extend(bucket.iter().cloned());
            if let Some(cost) = cost {
                c.extend(words(&["COST", cost]));
            }
            c
        };
        vec![
            with("RL.TTL", None),
            with("RL.ADMIT", Some("0")),
            with("RL.ADMIT", Some("1")),
            with("RL.ADMIT", Some("50")),
            with("RL.REFUND", Some("2")),
            with("RL.ADMIT", Some("2")),
        ]
    };
    let mut library_only = 0;
    for &state in states {
        for ttl in [None, Some("100"), Some("100000000")] {
            for algo in ALGOS.iter().copied().chain(["throttle"]) {
                let list = match algo {
                    "throttle" => ["0", "1", "9", "1"]
                        .iter()
                        .map(|q| words(&["RL.THROTTLE", "K1", "2", "5", "1", q]))
                        .collect(),
                    _ => calls(algo),
                };
                for call in list {
                    let mut set = vec!["SET", "K1", state];
                    if let Some(px) = ttl {
                        set.extend(["PX", px]);
                    }
                    oracle.both(&set);
                    let label = format!("{state} ttl {ttl:?}");
                    // Counts beyond 2^53 the library refuses, saying so,
                    // and writes nothing: the one documented difference.
                    let lib = fcall_of(&call);
                    let lib_keys = vec![side("K1", "lib")];
                    let before = snapshot(&mut oracle.con, &lib_keys);
                    let lib_words: Vec<String> = lib.iter().map(|w| side(w, "lib")).collect();
                    let lib_words: Vec<&str> = lib_words.iter().map(String::as_str).collect();
                    let probe = cmd_raw(&mut oracle.con, &lib_words);
                    if let Reply::Error(text) = Reply::of(&probe) {
                        if text.contains("exact range") {
                            assert_eq!(before, snapshot(&mut oracle.con, &lib_keys), "{label}");
                            library_only += 1;
                            continue;
                        }
                    }
                    oracle.both(&set);
                    let cost = match call.iter().position(|w| w == "COST") {
                        Some(at) => &call[at + 1],
                        None => call.last().expect("a call"),
                    };
                    let cost = cost.parse().unwrap_or(1);
                    oracle.call(&label, &call, cost);
                }
            }
        }
    }
    oracle.verdict("crafted state");
    let seen = &oracle.seen;
    assert!(
        seen.calls > 1_000 && seen.errors > 100 && seen.writes > 100,
        "{seen:?}"
    );
    assert!(
        library_only > 0,
        "no state beyond the library's range was tried"
    );
}

fn snapshot(con: &mut Connection, keys: &[String]) -> Vec<(String, Option<String>, i64)> {
    common::snapshot(con, keys)
}

/// One limiter driven alternately by the module and the library admits
/// exactly what either alone would: a second key, driven by the module
/// alone at the same frozen milliseconds, answers and stores the same.
#[test]
fn switching_backends_mid_window_changes_nothing() {
    let server = Server::start();
    let mut con = server.client();
    load_library(&mut con);
    let mut rng = Rng::new(0x5eed);
    for algo in ALGOS {
        let policy = words(&["ALGO", algo, "LIMIT", "6", "WINDOW", "300"]);
        let (mut admitted, mut refused) = (0, 0);
        for i in 0..120 {
            let cost = rng.below(3).to_string();
            let module = |key: &str| {
                let mut c = words(&["RL.ADMIT", key]);
                c.extend(policy.iter().cloned());
                c.extend(words(&["COST", &cost]));
                c
            };
            let mixed = match i % 2 {
                0 => module("switch:mixed"),
                _ => {
                    let mut c = words(&["FCALL", "rl_admit", "1", "switch:mixed"]);
                    c.extend(policy.iter().cloned());
                    c.extend(words(&["COST", &cost]));
                    c
                }
            };
            let replies = exec(
                &mut con,
                &[
                    mixed,
                    module("switch:alone"),
                    words(&["GET", "switch:mixed"]),
                    words(&["GET", "switch:alone"]),
                    words(&["PEXPIRETIME", "switch:mixed"]),
                    words(&["PEXPIRETIME", "switch:alone"]),
                ],
            );
            assert_eq!(
                Reply::of(&replies[0]),
                Reply::of(&replies[1]),
                "{algo} call {i}"
            );
            assert_eq!(text(&replies[2]), text(&replies[3]), "{algo} call {i}");
            assert_eq!(int(&replies[4]), int(&replies[5]), "{algo} call {i}");
            match Reply::of(&replies[0]) {
                Reply::Ints(v) if v[0] == 1 && cost != "0" => admitted += 1,
                Reply::Ints(v) if v[0] == 0 => refused += 1,
                _ => {}
            }
            sleep(Duration::from_millis(rng.pick(&[0, 0, 0, 5, 20, 60])));
        }
        assert!(
            admitted > 10 && refused > 10,
            "{algo}: {admitted} admitted, {refused} refused"
        );
        let _: () = redis::cmd("DEL")
            .arg("switch:mixed")
            .arg("switch:alone")
            .query(&mut con)
            .unwrap();
    }
}

/// The library refuses, saying so, what it cannot compute exactly, and
/// writes nothing; within its range it answers as the module.
#[test]
fn the_library_refuses_what_doubles_cannot_hold() {
    let server = Server::start();
    let mut con = server.client();
    load_library(&mut con);
    let err = |con: &mut Connection, args: &[&str]| -> String {
        let mut call = vec!["FCALL"];
        call.extend_from_slice(args);
        format!("{:?}", Reply::of(&cmd_raw(con, &call)))
    };
    let beyond = [
        // limit * window for sliding
        &[
            "rl_admit",
            "1",
            "big",
            "ALGO",
            "sliding",
            "LIMIT",
            "1000000000",
            "WINDOW",
            "10000000",
        ][..],
        // window * 1e6 for the buckets (104 days and more)
        &[
            "rl_admit",
            "1",
            "big",
            "ALGO",
            "gcra",
            "LIMIT",
            "1",
            "WINDOW",
            "9007199255",
        ],
        &[
            "rl_admit",
            "1",
            "big",
            "ALGO",
            "fixed",
            "LIMIT",
            "9007199254740992",
            "WINDOW",
            "1",
        ],
        &["rl_throttle", "1", "big", "1", "1", "9007200"],
    ];
    for call in beyond {
        let text = err(&mut con, call);
        assert!(text.contains("exact range"), "{call:?}: {text}");
    }
    let exists: i64 = redis::cmd("EXISTS").arg("big").query(&mut con).unwrap();
    assert_eq!(exists, 0);
    // Just inside: 104 days of window for a bucket.
    let ok = err(
        &mut con,
        &[
            "rl_admit",
            "1",
            "big",
            "ALGO",
            "gcra",
            "LIMIT",
            "1",
            "WINDOW",
            "9007199254",
        ],
    );
    assert!(ok.starts_with("Ints"), "{ok}");
}

/// Calendar periods in zones with daylight saving, at random instants
/// around their changes of 2027 to 2032 (jiff's tzdb lists them): the
/// server's clock moved to each (libfaketime, a file read at every clock
/// read), and fixed and sliding windows over days, weeks, months and years
/// called on both backends, with the zone inline or from a META hash, and
/// with state from the instant before (the clock moving both ways). They
/// must agree exactly: replies, stored bytes and expiries.
#[test]
fn calendar_zones_agree_across_daylight_saving_changes() {
    use jiff::tz::TimeZone;
    use jiff::Timestamp;
    let dir = std::env::temp_dir().join("rl-tests");
    std::fs::create_dir_all(&dir).unwrap();
    let clock = dir.join(format!("clock-{}-zones", std::process::id()));
    let set_clock = |ms: i64| {
        let at = Timestamp::from_millisecond(ms).unwrap();
        // Half a ms more: libfaketime reads the fraction as a double, which
        // may fall just below the ms written.
        let text = format!("@{}5 x0\n", at.strftime("%Y-%m-%d %H:%M:%S%.3f"));
        std::fs::write(&clock, text).unwrap();
    };
    set_clock(1_806_195_599_999);
    let Some(server) = Server::start_with_clock_file(&clock, true) else {
        return;
    };
    let mut oracle = Oracle::new(&server);
    let mut rng = Rng::new(common::seed("calendar_zones_agree"));
    // The changes of the zones that have them.
    let from = Timestamp::from_millisecond(1_798_761_600_000).unwrap(); // 2027-01-01
    let mut changes: Vec<(&str, i64)> = Vec::new();
    for zone in TZS.iter().filter(|z| z.contains('/')) {
        let tz = TimeZone::get(zone).unwrap();
        for t in tz.following(from) {
            let at = t.timestamp().as_millisecond();
            if at >= 1_988_150_400_000 {
                break; // 2033-01-01
            }
            changes.push((zone, at));
        }
    }
    assert!(changes.len() >= 50, "{} changes", changes.len());
    const HOUR: i64 = 3_600_000;
    for step in 0..500usize {
        let (zone, change) = rng.pick(&changes);
        // Near the change: the ms around it, the hours around it (and the
        // midnights there), or anywhere in the days around it.
        let now = match rng.below(4) {
            0 => change + rng.below(3) as i64 - 1,
            1 => change + (rng.below(61) as i64 - 30) * HOUR + rng.below(3) as i64 - 1,
            2 => change + (rng.below(121) as i64 - 60) * HOUR / 2,
            _ => change + rng.below(4 * 24 * HOUR as usize) as i64 - 2 * 24 * HOUR,
        };
        set_clock(now);
        assert_eq!(
            common::server_time_ms(&mut oracle.con),
            now,
            "step {step}: the clock"
        );
        if rng.pct(30) {
            oracle.both(&["DEL", "K1", "K2"]);
        }
        let period = rng.pick(&["day", "week", "month", "year"]);
        let meta = format!("meta:zone:{period}");
        if rng.pct(20) {
            cmd_raw(
                &mut oracle.con,
                &["HSET", &meta, "max", "3", "calendar", period, "tz", zone],
            );
        }
        for _ in 0..1 + rng.below(3) {
            let algo = rng.pick(&["fixed", "sliding"]);
            let key = if algo == "fixed" { "K1" } else { "K2" };
            let cost = rng.below(3) as i64;
            let mut call = match rng.below(10) {
                0 => words(&["RL.TTL", key]),
                _ => words(&["RL.ADMIT", key]),
            };
            let limit = (1 + rng.below(4)).to_string();
            if rng.pct(15) {
                call.extend(words(&["ALGO", algo, "META", &meta]));
            } else {
                call.extend(words(&[
                    "ALGO", algo, "LIMIT", &limit, "CALENDAR", period, "TZ", zone,
                ]));
            }
            if call[0] == "RL.ADMIT" {
                call.extend(words(&["COST", &cost.to_string()]));
            }
            oracle.call(&format!("step {step} at {now}"), &call, cost);
        }
    }
    let _ = std::fs::remove_file(&clock);
    oracle.verdict("calendar zones");
    let seen = &oracle.seen;
    assert!(
        seen.admitted > 0 && seen.refused_wait > 0 && seen.writes > 0,
        "{seen:?}"
    );
}

/// Every name of the module's zone table, given to both backends (a peek
/// over each period, and an admit over the day): the same replies, so the
/// library's table holds the same names with the same zones, as far as
/// the periods around now show.
#[test]
fn every_zone_name_agrees() {
    use valkey_ratelimit::time::tzdb::ZONES;
    let server = Server::start();
    let mut oracle = Oracle::new(&server);
    for (name, _) in ZONES.iter() {
        for period in ["day", "week", "month", "year"] {
            let call = words(&[
                "RL.ADMIT", "K1", "LIMIT", "5", "CALENDAR", period, "TZ", name, "COST", "0",
            ]);
            oracle.call(&format!("{name} {period}"), &call, 0);
        }
        let call = words(&[
            "RL.ADMIT", "K2", "ALGO", "sliding", "LIMIT", "5", "CALENDAR", "day", "TZ", name,
        ]);
        oracle.call(name, &call, 1);
        oracle.both(&["DEL", "K2"]);
    }
    oracle.verdict("every zone name");
    assert!(oracle.seen.calls >= 5 * 594, "{:?}", oracle.seen);
}
