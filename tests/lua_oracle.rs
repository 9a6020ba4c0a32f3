//! The differential oracle: every algorithm's Lua equivalent in `bench/lua/`
//! (what users run today, and what the benchmark measures the module
//! against) and the module run the same call sequence, on two keys, and
//! must agree exactly.
//!
//! Time: each step is one MULTI/EXEC holding the script call on key A, the
//! module call on key B, and GET and PEXPIRETIME of both keys. Inside a
//! transaction the server's clock is frozen, for `redis.call('TIME')` in a
//! script as for the module's cached clock, so both sides decide at the same
//! millisecond (`server_time_is_frozen_inside_multi_exec` checks this). Real
//! sleeps between steps move the clock on, so refills, sliding windows and
//! expiry are exercised; the timings vary from run to run, the comparison
//! stays exact.
//!
//! Compared at every step: the five integers of the reply (all exactly: the
//! scripts' arithmetic is exact, see their headers), error replies (text up
//! to Lua's " script: ..." suffix), the stored value (the scripts keep the
//! module's state format) and the absolute expiry.

mod common;

use std::fmt::Write as _;
use std::path::Path;
use std::thread::sleep;
use std::time::{Duration, Instant};

use common::{make_cmd, Server};
use redis::{Connection, ConnectionLike, Value};

const LUA_KEY: &str = "oracle:lua";
const MOD_KEY: &str = "oracle:mod";

/// A reply reduced to what is compared.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Reply {
    Ints(Vec<i64>),
    Error(String),
    Other(String),
}

impl Reply {
    fn of(value: Value) -> Reply {
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
            Value::ServerError(e) => {
                let text = match e.details() {
                    Some(detail) => format!("{} {detail}", e.code()),
                    None => e.code().to_string(),
                };
                // A Lua runtime error carries " script: on @user_script:N."
                let text = match text.split_once(" script: ") {
                    Some((head, _)) => head.to_string(),
                    None => text,
                };
                Reply::Error(text)
            }
            other => Reply::Other(format!("{other:?}")),
        }
    }

    fn ints(&self) -> Option<&[i64]> {
        match self {
            Reply::Ints(v) => Some(v),
            _ => None,
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

fn int(value: &Value) -> i64 {
    match value {
        Value::Int(n) => *n,
        other => panic!("expected an integer, got {other:?}"),
    }
}

/// Runs `commands` in one MULTI/EXEC and returns each reply, errors included.
fn transaction(con: &mut Connection, commands: &[Vec<String>]) -> Vec<Value> {
    let mut pipe = redis::pipe();
    pipe.atomic();
    for c in commands {
        let words: Vec<&str> = c.iter().map(String::as_str).collect();
        pipe.add_command(make_cmd(&words));
    }
    let mut replies = con
        .req_packed_commands(&pipe.get_packed_pipeline(), commands.len() + 1, 1)
        .expect("MULTI/EXEC");
    match replies.pop() {
        Some(Value::Array(items)) if items.len() == commands.len() => items,
        other => panic!("EXEC answered {other:?}"),
    }
}

fn load_script(con: &mut Connection, name: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("bench/lua")
        .join(format!("{name}.lua"));
    let body =
        std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
    redis::cmd("SCRIPT")
        .arg("LOAD")
        .arg(body)
        .query(con)
        .unwrap_or_else(|e| panic!("SCRIPT LOAD {name}.lua: {e}"))
}

/// What a sequence went through, so a test can insist on its coverage.
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
}

/// One script against one module command on two keys.
struct Oracle {
    con: Connection,
    sha: String,
    /// The reply's first field means "admitted" (RL.ADMIT) or "limited"
    /// (RL.THROTTLE).
    limited_flag: bool,
    log: String,
    mismatches: Vec<String>,
    seen: Coverage,
}

impl Oracle {
    fn new(server: &Server, script: &str) -> Oracle {
        let mut con = server.client();
        let sha = load_script(&mut con, script);
        let _: () = redis::cmd("DEL")
            .arg(LUA_KEY)
            .arg(MOD_KEY)
            .query(&mut con)
            .unwrap();
        Oracle {
            con,
            sha,
            limited_flag: script == "throttle",
            log: String::new(),
            mismatches: Vec::new(),
            seen: Coverage::default(),
        }
    }

    /// The same change to both keys, in one transaction (`KEY` stands for
    /// the key), e.g. a counter left without a TTL by another client.
    fn both(&mut self, args: &[&str]) {
        let for_key = |key: &str| -> Vec<String> {
            args.iter()
                .map(|a| if *a == "KEY" { key } else { *a }.to_string())
                .collect()
        };
        let replies = transaction(&mut self.con, &[for_key(LUA_KEY), for_key(MOD_KEY)]);
        assert_eq!(
            replies[0], replies[1],
            "{args:?} answered differently on the two keys"
        );
        let _ = writeln!(self.log, "  both: {args:?}");
    }

    /// One call: `script_args` after `EVALSHA sha 1 A`, `module` with `KEY`
    /// standing for key B.
    fn call(&mut self, label: &str, script_args: &[String], module: &[String], cost: i64) {
        let mut lua = vec![
            "EVALSHA".to_string(),
            self.sha.clone(),
            "1".into(),
            LUA_KEY.into(),
        ];
        lua.extend(script_args.iter().cloned());
        let module: Vec<String> = module
            .iter()
            .map(|a| {
                if a == "KEY" {
                    MOD_KEY.into()
                } else {
                    a.clone()
                }
            })
            .collect();
        let read = |cmd: &str, key: &str| vec![cmd.to_string(), key.to_string()];
        let replies = transaction(
            &mut self.con,
            &[
                lua,
                module,
                read("GET", LUA_KEY),
                read("GET", MOD_KEY),
                read("PEXPIRETIME", LUA_KEY),
                read("PEXPIRETIME", MOD_KEY),
            ],
        );
        let (a, b) = (Reply::of(replies[0].clone()), Reply::of(replies[1].clone()));
        let (va, vb) = (text(&replies[2]), text(&replies[3]));
        let (ea, eb) = (int(&replies[4]), int(&replies[5]));
        self.seen.calls += 1;
        let n = self.seen.calls;
        let mut problems = Vec::new();
        if !matches!(a, Reply::Ints(ref v) if v.len() == 5) && !matches!(a, Reply::Error(_)) {
            problems.push("unexpected reply shape");
        }
        if a != b {
            problems.push("replies differ");
        }
        if va != vb {
            problems.push("stored values differ");
        }
        if ea != eb {
            problems.push("expiries differ");
        }
        let line = format!(
            "{n:3} {label} cost {cost}: lua {a:?} module {b:?}; value {va:?} / {vb:?}; \
             expires {ea} / {eb}"
        );
        let _ = writeln!(self.log, "{line}");
        if !problems.is_empty() {
            self.mismatches
                .push(format!("{line}  <- {}", problems.join(", ")));
        }
        match a.ints() {
            Some(v) if v.len() == 5 => {
                let admitted = (v[0] == 1) != self.limited_flag;
                if cost == 0 {
                    self.seen.peeks += 1;
                }
                match (admitted, v[3]) {
                    (true, r) if r > 0 && !self.limited_flag => self.seen.delayed += 1,
                    (true, _) => {}
                    (false, -1) => self.seen.refused_never += 1,
                    (false, _) => self.seen.refused_wait += 1,
                }
                self.seen.admitted += usize::from(admitted);
            }
            _ => self.seen.errors += 1,
        }
    }

    /// Panics with the whole log when any step disagreed.
    fn verdict(&self, what: &str) {
        if !self.mismatches.is_empty() {
            panic!(
                "{what}: {} of {} calls disagree:\n{}\nfull log:\n{}",
                self.mismatches.len(),
                self.seen.calls,
                self.mismatches.join("\n"),
                self.log
            );
        }
        eprintln!("{what}: {} calls agree; {:?}", self.seen.calls, self.seen);
    }
}

/// A small fixed-seed generator, so every run makes the same calls.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

/// Sleeps between calls (ms): often none, so bursts hit the limit, and
/// sometimes a fraction of an interval up to a few intervals.
const SLEEPS_MS: [u64; 12] = [0, 0, 0, 0, 0, 3, 11, 29, 60, 97, 150, 260];

/// How one policy is called: the script's arguments and the module command
/// for a cost.
type Build = dyn Fn(i64) -> (Vec<String>, Vec<String>);

/// The sequence for one policy: a burst without pauses (refusals for sure),
/// then `calls` calls with costs 0..=max_cost and pauses from `SLEEPS_MS`,
/// with the `events` (applied to both keys) at their call numbers.
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
    let mut rng = Rng(seed);
    for _ in 0..=max_cost {
        let (lua, module) = build(1);
        oracle.call(label, &lua, &module, 1);
    }
    for i in 0..calls {
        for (at, event) in events {
            if *at == i {
                let words: Vec<&str> = event.iter().map(String::as_str).collect();
                oracle.both(&words);
            }
        }
        let cost = rng.below(max_cost as u64 + 1) as i64;
        let (lua, module) = build(cost);
        oracle.call(label, &lua, &module, cost);
        sleep(Duration::from_millis(
            SLEEPS_MS[rng.below(SLEEPS_MS.len() as u64) as usize],
        ));
    }
    // Start the next policy from a fresh limiter.
    oracle.both(&["DEL", "KEY"]);
}

fn words(items: &[&str]) -> Vec<String> {
    items.iter().map(|s| s.to_string()).collect()
}

/// `SET KEY value` on both keys (no TTL: state left by some other client).
fn set(value: &str) -> Vec<String> {
    words(&["SET", "KEY", value])
}

fn del() -> Vec<String> {
    words(&["DEL", "KEY"])
}

/// `PERSIST KEY`: the state as it stands, left without a TTL, which the
/// next refusal repairs (an expiry, or a delete once spent).
fn persist() -> Vec<String> {
    words(&["PERSIST", "KEY"])
}

/// RL.ADMIT ... ALGO `algo` against `bench/lua/<algo>.lua` for each
/// (limit, window_ms, burst) policy.
fn check_algorithm(
    algo: &'static str,
    policies: &[(i64, i64, Option<i64>)],
    events: &[(usize, Vec<String>)],
) -> Coverage {
    let server = Server::start();
    let mut oracle = Oracle::new(&server, algo);
    for (n, &(limit, window, burst)) in policies.iter().enumerate() {
        let build = move |cost: i64| {
            let mut lua = vec![limit.to_string(), window.to_string(), cost.to_string()];
            let mut module = words(&["RL.ADMIT", "KEY", "ALGO", algo]);
            module.extend([
                "LIMIT".into(),
                limit.to_string(),
                "WINDOW".into(),
                window.to_string(),
            ]);
            if let Some(b) = burst {
                lua.push(b.to_string());
                module.extend(["BURST".into(), b.to_string()]);
            }
            module.extend(["COST".into(), cost.to_string()]);
            (lua, module)
        };
        // Up to one more than ever fits: the burst (+1, the request being
        // served, for leaky) or the limit.
        let fits = burst.unwrap_or(limit) + i64::from(algo == "leaky");
        let max_cost = fits + 1;
        let label = format!("{algo} limit {limit} window {window} burst {burst:?}");
        run_sequence(
            &mut oracle,
            &label,
            &build,
            max_cost,
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
    let clock = "return redis.call('TIME')";
    // A script busy for tens of ms between two reads of the clock.
    let busy = "local t = redis.call('TIME') local s = 0 \
                for i = 1, 5000000 do s = s + i end \
                local u = redis.call('TIME') return {t[1], t[2], u[1], u[2]}";
    let admit = |key: &str| words(&["RL.ADMIT", key, "LIMIT", "10", "WINDOW", "100000"]);
    let started = Instant::now();
    let replies = transaction(
        &mut con,
        &[
            words(&["EVAL", clock, "0"]),
            admit("f1"),
            words(&["EVAL", busy, "0"]),
            admit("f2"),
            words(&["EVAL", clock, "0"]),
            words(&["PEXPIRETIME", "f1"]),
            words(&["PEXPIRETIME", "f2"]),
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
    let (first, middle, last) = (times(&replies[0]), times(&replies[2]), times(&replies[4]));
    assert!(
        took >= Duration::from_millis(5),
        "the transaction took {took:?}: too short to show a moving clock"
    );
    assert_eq!(middle[..2], first[..], "TIME moved within the busy script");
    assert_eq!(middle[2..], first[..], "TIME moved within the busy script");
    assert_eq!(last, first, "TIME moved across the transaction");
    let script_ms = first[0] * 1000 + first[1] / 1000;
    assert_eq!(
        int(&replies[5]) - 100_000,
        script_ms,
        "module clock (1st call)"
    );
    assert_eq!(
        int(&replies[6]) - 100_000,
        script_ms,
        "module clock (2nd call)"
    );
}

/// bench/oracle_check.py's sequence: limit 7, window 60 s, costs 0..9, new
/// windows and TTL-less counters; here also the times, exactly.
#[test]
fn fixed_window_agrees() {
    let server = Server::start();
    let mut oracle = Oracle::new(&server, "fixed");
    let events = |i: usize| -> Option<Vec<String>> {
        match i {
            15 | 33 => Some(del()),
            24 => Some(set("3")),  // TTL-less counter, then admits
            40 => Some(set("5")),  // TTL-less counter, then cost > limit
            44 => Some(set("12")), // TTL-less counter already over the limit
            _ => None,
        }
    };
    for i in 0..50usize {
        if let Some(event) = events(i) {
            let words: Vec<&str> = event.iter().map(String::as_str).collect();
            oracle.both(&words);
        }
        let cost: i64 = match i {
            41 => 9,
            45 => 0,
            46 => 1,
            _ => (i as i64 * 7 + 3) % 10,
        };
        let lua = words(&["7", "60000", &cost.to_string()]);
        let module = words(&[
            "RL.ADMIT",
            "KEY",
            "LIMIT",
            "7",
            "WINDOW",
            "60000",
            "COST",
            &cost.to_string(),
        ]);
        oracle.call("fixed limit 7 window 60000", &lua, &module, cost);
    }
    // A short window that passes between calls, and a corrupt counter.
    for i in 0..30usize {
        if i == 20 {
            oracle.both(&["SET", "KEY", "junk"]);
        }
        if i == 21 {
            oracle.both(&["DEL", "KEY"]);
        }
        let cost = (i as i64 * 3 + 1) % 5;
        let lua = words(&["3", "120", &cost.to_string()]);
        let module = words(&[
            "RL.ADMIT",
            "KEY",
            "LIMIT",
            "3",
            "WINDOW",
            "120",
            "COST",
            &cost.to_string(),
        ]);
        oracle.call("fixed limit 3 window 120", &lua, &module, cost);
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
    // Intervals of 200 ms, 333.333334 ms (not a whole ms) and 125 ms.
    let mut events = vec![
        (12, set("token:0:9000000000000")), // last refill in the future
        (16, set("token:999999999999999:0")),
        (20, set("junk")),
        (21, del()),
    ];
    events.extend([(6, persist()), (30, set("token:5:1")), (34, persist())]);
    check_algorithm(
        "token",
        &[(5, 1000, Some(3)), (3, 1000, Some(2)), (4, 500, None)],
        &events,
    );
}

#[test]
fn gcra_agrees() {
    check_algorithm(
        "gcra",
        &[(5, 1000, Some(3)), (3, 1000, Some(2)), (4, 500, None)],
        &edge_events("gcra"),
    );
}

#[test]
fn leaky_bucket_agrees() {
    // Queue of 3, of 2 with a 333.333334 ms interval, and none at all.
    let seen = check_algorithm(
        "leaky",
        &[(5, 1000, Some(3)), (3, 1000, Some(2)), (4, 500, Some(0))],
        &edge_events("leaky"),
    );
    assert!(seen.delayed > 0, "no admitted call had to wait: {seen:?}");
}

#[test]
fn throttle_agrees_with_cl_throttle_in_lua() {
    let server = Server::start();
    let mut oracle = Oracle::new(&server, "throttle");
    // (max_burst, count, period_s): 100 ms and 333.333333 ms intervals.
    for (n, (max_burst, count, period)) in [(2i64, 10i64, 1i64), (4, 3, 1)].into_iter().enumerate()
    {
        let build = move |q: i64| {
            let args = [max_burst, count, period, q].map(|v| v.to_string());
            let mut module = words(&["RL.THROTTLE", "KEY"]);
            module.extend(args.iter().cloned());
            (args.to_vec(), module)
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

/// Keys another client left, met by a refusal: one without a TTL, or
/// expiring before the reset the refusal reports, is given that expiry;
/// one without a TTL whose state is already spent is deleted by a cost that
/// can never fit; a sliding window stamped after now is written back as the
/// current one. The scripts make the same writes as the module.
#[test]
fn refusals_repair_foreign_keys_alike() {
    let server = Server::start();
    for algo in ["sliding", "token", "gcra", "leaky", "throttle"] {
        let mut oracle = Oracle::new(&server, algo);
        // The script's arguments and the module's call for one cost.
        let build = |cost: i64| -> (Vec<String>, Vec<String>) {
            let c = cost.to_string();
            let (script, module): (Vec<i64>, Vec<&str>) = match algo {
                "throttle" => (
                    vec![2, 5, 1, cost],
                    vec!["RL.THROTTLE", "KEY", "2", "5", "1", &c],
                ),
                "sliding" => (
                    vec![5, 1_000, cost],
                    vec![
                        "RL.ADMIT", "KEY", "ALGO", algo, "LIMIT", "5", "WINDOW", "1000", "COST", &c,
                    ],
                ),
                _ => (
                    vec![5, 1_000, cost, 3],
                    vec![
                        "RL.ADMIT", "KEY", "ALGO", algo, "LIMIT", "5", "WINDOW", "1000", "BURST",
                        "3", "COST", &c,
                    ],
                ),
            };
            (script.iter().map(i64::to_string).collect(), words(&module))
        };
        let call = |oracle: &mut Oracle, cost: i64| {
            let (lua, module) = build(cost);
            oracle.call(algo, &lua, &module, cost);
        };
        let expiry = |oracle: &mut Oracle| -> (i64, i64) {
            let at = |con: &mut Connection, key: &str| -> i64 {
                redis::cmd("PEXPIRETIME").arg(key).query(con).unwrap()
            };
            (at(&mut oracle.con, LUA_KEY), at(&mut oracle.con, MOD_KEY))
        };
        let never = 10;
        // Filled, then left without a TTL: a refusal gives it its reset.
        for _ in 0..5 {
            call(&mut oracle, 1);
        }
        oracle.both(&["PERSIST", "KEY"]);
        call(&mut oracle, 0);
        assert_eq!(
            expiry(&mut oracle),
            (-1, -1),
            "{algo}: a peek repairs nothing"
        );
        call(&mut oracle, 1);
        let (lua, module) = expiry(&mut oracle);
        assert!(lua > 0 && module > 0, "{algo}: no TTL after a refusal");
        // Expiring before the reset: the refusal pushes the expiry out.
        oracle.both(&["PEXPIRE", "KEY", "100"]);
        call(&mut oracle, 1);
        // Spent and left without a TTL: a cost that never fits deletes it.
        let spent = match algo {
            "sliding" => "sliding:0:3:9".to_string(),
            "token" => "token:5:1".to_string(),
            "throttle" => "1".to_string(),
            _ => format!("{algo}:-5"),
        };
        oracle.both(&["SET", "KEY", &spent]);
        call(&mut oracle, 0);
        call(&mut oracle, never);
        assert_eq!(expiry(&mut oracle), (-2, -2), "{algo}: not deleted");
        // Spent, with a TTL: left to it.
        oracle.both(&["SET", "KEY", &spent, "PX", "100000"]);
        call(&mut oracle, never);
        if algo == "sliding" {
            // A window stamped after now is read as the current one.
            oracle.both(&["SET", "KEY", "sliding:9000000000000:4:1"]);
            call(&mut oracle, 0);
            call(&mut oracle, 2);
            call(&mut oracle, 1);
        }
        oracle.verdict(algo);
        let seen = &oracle.seen;
        assert!(
            seen.refused_wait > 0 && seen.refused_never > 0,
            "{algo}: {seen:?}"
        );
    }
}
