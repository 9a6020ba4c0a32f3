//! The integration scenarios run against both backends: the module (`RL.*`)
//! and the FUNCTION library (`FCALL rl_*` on a server without the module).
//!
//! Each scenario is a list of calls in the module's syntax, run in one
//! MULTI/EXEC on a flushed database (the clock frozen, state preset relative
//! to it), followed by the type, value and expiry of the keys it names
//! (`common::backend::run_scenario`). The module's transcript and the
//! library's must be identical: replies, error texts, stored values and
//! expiries, exactly. Where a scenario gives the replies the module must
//! answer, the module is checked against them too, so the table also pins
//! what the two agree on.

use crate::common;

use crate::common::backend::{call, preset, run_scenario, Backend, Step, Transcript, BOTH};
use crate::common::show;
use crate::common::Server;

/// A sliding window of 100 ms, seen at phase 37 on every server.
const PIN: Option<(i64, i64)> = Some((100, 37));

struct Scenario {
    name: String,
    steps: Vec<Step>,
    keys: &'static [&'static str],
    /// The clock phase the scenario needs (window-aligned algorithms).
    pin: Option<(i64, i64)>,
    /// The module's replies, one per call, when the table pins them.
    want: &'static [&'static str],
}

fn scenario(name: impl Into<String>, keys: &'static [&'static str], steps: Vec<Step>) -> Scenario {
    Scenario {
        name: name.into(),
        steps,
        keys,
        pin: None,
        want: &[],
    }
}

impl Scenario {
    fn want(mut self, replies: &'static [&'static str]) -> Scenario {
        self.want = replies;
        self
    }
    fn pinned(mut self) -> Scenario {
        self.pin = PIN;
        self
    }
}

/// Runs every scenario on both backends (one server each) and fails with
/// every difference at once.
fn check(scenarios: Vec<Scenario>) {
    let servers: Vec<(Backend, Server)> = BOTH.iter().map(|&b| (b, b.start())).collect();
    let mut cons: Vec<_> = servers.iter().map(|(_, s)| s.client()).collect();
    let mut problems = Vec::new();
    for s in &scenarios {
        let runs: Vec<Transcript> = servers
            .iter()
            .zip(cons.iter_mut())
            .map(|((b, _), con)| run_scenario(*b, con, &s.steps, s.keys, s.pin))
            .collect();
        let module = &runs[0];
        if !s.want.is_empty() && module.replies != s.want {
            problems.push(format!(
                "{}: the module answered\n  {:?}\nwanted\n  {:?}",
                s.name, module.replies, s.want
            ));
        }
        for (i, (b, _)) in servers.iter().enumerate().skip(1) {
            if runs[i] != *module {
                problems.push(format!(
                    "{}: {b:?} differs from the module\n{}",
                    s.name,
                    diff(&s.steps, module, &runs[i])
                ));
            }
        }
    }
    assert!(problems.is_empty(), "\n{}", problems.join("\n\n"));
}

/// The calls and state lines where two transcripts differ.
fn diff(steps: &[Step], a: &Transcript, b: &Transcript) -> String {
    let calls = steps.iter().filter_map(|s| match s {
        Step::Call(words) => Some(words.join(" ")),
        Step::Preset { .. } => None,
    });
    let mut out = String::new();
    for (call, (x, y)) in calls.zip(a.replies.iter().zip(&b.replies)) {
        if x != y {
            out += &format!("  call   {call}\n  module {x}\n  other  {y}\n");
        }
    }
    for (x, y) in a.state.iter().zip(&b.state) {
        if x != y {
            out += &format!("  state module {x}\n        other  {y}\n");
        }
    }
    out
}

fn repeat(n: usize, step: Step) -> Vec<Step> {
    vec![step; n]
}

fn cat(parts: Vec<Vec<Step>>) -> Vec<Step> {
    parts.concat()
}

#[test]
fn fixed_window_seed_scenarios_agree() {
    let admit3 = call!["RL.ADMIT", "k", "LIMIT", 3, "WINDOW", 500];
    check(vec![
        scenario(
            "first hit opens a window",
            &["k"],
            vec![call!["RL.ADMIT", "k", "LIMIT", 3, "WINDOW", 400]],
        )
        .want(&["[1, 3, 2, 0, 400]"]),
        scenario(
            "counts up, then refuses with the key's pttl",
            &["k"],
            cat(vec![
                repeat(4, admit3.clone()),
                vec![
                    call!["RL.TTL", "k", "LIMIT", 3, "WINDOW", 500],
                    call!["RL.TTL", "k", "LIMIT", 3],
                ],
            ]),
        )
        .want(&[
            "[1, 3, 2, 0, 500]",
            "[1, 3, 1, 0, 500]",
            "[1, 3, 0, 0, 500]",
            "[0, 3, 0, 500, 500]",
            "500",
            "500",
        ]),
        scenario(
            "the limit comes from META and inline options win",
            &["emq:{o}:limiter", "emq:{o}:meta", "free"],
            vec![
                call!["HSET", "emq:{o}:meta", "max", 3, "duration", 10000],
                call!["RL.ADMIT", "emq:{o}:limiter", "META", "emq:{o}:meta"],
                call!["RL.ADMIT", "emq:{o}:limiter", "META", "emq:{o}:meta"],
                call!["RL.ADMIT", "emq:{o}:limiter", "META", "emq:{o}:meta"],
                call!["RL.ADMIT", "emq:{o}:limiter", "META", "emq:{o}:meta"],
                call![
                    "RL.ADMIT",
                    "emq:{o}:limiter",
                    "META",
                    "emq:{o}:meta",
                    "LIMIT",
                    5
                ],
                call![
                    "RL.ADMIT",
                    "emq:{o}:limiter",
                    "LIMIT",
                    5,
                    "META",
                    "emq:{o}:meta"
                ],
                call!["HSET", "emq:{o}:meta", "max", 10],
                call!["RL.ADMIT", "emq:{o}:limiter", "META", "emq:{o}:meta"],
                call!["RL.TTL", "emq:{o}:limiter", "META", "emq:{o}:meta"],
                call!["RL.LIMIT", "emq:{o}:meta"],
                call!["RL.LIMIT", "no:such:meta"],
                call!["RL.ADMIT", "free", "META", "no:such:meta"],
                call!["RL.ADMIT", "free"],
                call!["RL.TTL", "free"],
            ],
        )
        .want(&[
            "2",
            "[1, 3, 2, 0, 10000]",
            "[1, 3, 1, 0, 10000]",
            "[1, 3, 0, 0, 10000]",
            "[0, 3, 0, 10000, 10000]",
            "[1, 5, 1, 0, 10000]",
            "[1, 5, 0, 0, 10000]",
            "0",
            "[1, 10, 4, 0, 10000]",
            "0",
            "10",
            "0",
            "[1, 0, 0, 0, 0]",
            "[1, 0, 0, 0, 0]",
            "0",
        ]),
        scenario(
            "costs, peeks and a cost that can never fit",
            &["k"],
            vec![
                call!["RL.ADMIT", "k", "LIMIT", 5, "WINDOW", 1000, "COST", 2],
                call!["RL.ADMIT", "k", "LIMIT", 5, "WINDOW", 1000, "COST", 0],
                call!["RL.ADMIT", "k", "LIMIT", 5, "WINDOW", 1000, "COST", 3],
                call!["RL.ADMIT", "k", "LIMIT", 5, "WINDOW", 1000, "COST", 0],
                call!["RL.ADMIT", "k", "LIMIT", 4, "WINDOW", 1000, "COST", 0],
                call!["RL.ADMIT", "k", "LIMIT", 5, "WINDOW", 1000, "COST", 6],
                call!["RL.ADMIT", "new", "LIMIT", 5, "WINDOW", 1000, "COST", 6],
            ],
        )
        .want(&[
            "[1, 5, 3, 0, 1000]",
            "[1, 5, 3, 0, 1000]",
            "[1, 5, 0, 0, 1000]",
            "[1, 5, 0, 0, 1000]",
            "[0, 4, 0, 1000, 1000]",
            "[0, 5, 0, -1, 1000]",
            "[0, 5, 5, -1, 0]",
        ]),
        scenario(
            "INCR clients share the counter",
            &["a", "b"],
            vec![
                call!["RL.ADMIT", "a", "LIMIT", 9, "WINDOW", 60000],
                call!["INCRBY", "a", 5],
                call!["RL.ADMIT", "a", "LIMIT", 9, "WINDOW", 60000],
                call!["RL.ADMIT", "b", "LIMIT", 9, "WINDOW", 60000],
                call!["APPEND", "b", "0"],
                call!["RL.ADMIT", "b", "LIMIT", 9, "WINDOW", 60000],
            ],
        ),
        scenario(
            "a counter without a TTL, or with more than a window left, gets one window",
            &["bare", "long", "bare_ok"],
            vec![
                preset("bare", "5", None),
                preset("long", "2", Some(50_000)),
                preset("bare_ok", "1", None),
                call!["RL.TTL", "bare", "LIMIT", 3, "WINDOW", 1000],
                call!["RL.TTL", "bare", "LIMIT", 3],
                call!["RL.ADMIT", "bare", "LIMIT", 3, "WINDOW", 1000],
                call!["RL.ADMIT", "long", "LIMIT", 3, "WINDOW", 1000],
                call!["RL.ADMIT", "long", "LIMIT", 3, "WINDOW", 1000],
                call!["RL.ADMIT", "bare_ok", "LIMIT", 3, "WINDOW", 1000],
            ],
        ),
        scenario(
            "a narrower window cuts the current one short, a wider one waits",
            &["narrow", "wide"],
            vec![
                preset("narrow", "1", Some(800)),
                preset("wide", "1", Some(800)),
                call!["RL.ADMIT", "narrow", "LIMIT", 5, "WINDOW", 300],
                call!["RL.ADMIT", "wide", "LIMIT", 5, "WINDOW", 5000],
                call!["RL.REFUND", "wide", "LIMIT", 5, "WINDOW", 5000],
            ],
        ),
    ]);
}

/// The policy options of each algorithm for a limiter of 3 per second
/// (bucket 2 for the buckets; sliding: 3 per 100 ms, the pinned period).
fn policy(algo: &str) -> Vec<String> {
    let window = if algo == "sliding" { "100" } else { "1000" };
    let mut p: Vec<String> = ["ALGO", algo, "LIMIT", "3", "WINDOW", window]
        .iter()
        .map(|s| s.to_string())
        .collect();
    if matches!(algo, "token" | "gcra" | "leaky") {
        p.extend(["BURST".to_string(), "2".to_string()]);
    }
    p
}

fn with(head: &[&str], policy: &[String], tail: &[&str]) -> Step {
    let mut words: Vec<String> = head.iter().map(|s| s.to_string()).collect();
    words.extend(policy.iter().cloned());
    words.extend(tail.iter().map(|s| s.to_string()));
    Step::Call(words)
}

#[test]
fn every_algorithm_agrees_on_fresh_and_crafted_state() {
    let mut scenarios = Vec::new();
    for algo in ["fixed", "sliding", "token", "gcra", "leaky"] {
        let p = policy(algo);
        let steps = cat(vec![
            vec![with(&["RL.ADMIT", "k"], &p, &["COST", "0"])],
            repeat(4, with(&["RL.ADMIT", "k"], &p, &[])),
            vec![
                with(&["RL.TTL", "k"], &p, &[]),
                with(&["RL.ADMIT", "k"], &p, &["COST", "0"]),
                with(&["RL.REFUND", "k"], &p, &[]),
                with(&["RL.REFUND", "k"], &p, &["COST", "0"]),
                with(&["RL.ADMIT", "k"], &p, &["COST", "2"]),
                with(&["RL.ADMIT", "big"], &p, &["COST", "9"]),
                with(&["RL.REFUND", "k"], &p, &["COST", "9"]),
                with(&["RL.ADMIT", "k"], &p, &[]),
                with(&["RL.RESET", "k"], &[], &[]),
                with(&["RL.RESET", "k"], &[], &[]),
            ],
        ]);
        let mut s = scenario(
            format!("{algo}: fresh state, peeks, refunds, reset"),
            &["k", "big"],
            steps,
        );
        if algo == "sliding" {
            s = s.pinned();
        }
        scenarios.push(s);
    }
    let sliding = policy("sliding");
    scenarios.push(
        scenario(
            "sliding: previous window weighted, future window, foreign counts",
            &["prev", "cur", "future", "stale", "bare"],
            vec![
                preset("prev", "sliding:{win 100-100}:3:0", Some(150)),
                preset("cur", "sliding:{win 100+0}:2:4", Some(150)),
                preset("future", "sliding:{win 100+300}:1:1", Some(900)),
                preset("stale", "sliding:{win 100-300}:3:3", Some(10)),
                preset("bare", "sliding:{win 100+0}:1:0", None),
                with(&["RL.TTL", "prev"], &sliding, &[]),
                with(&["RL.ADMIT", "prev"], &sliding, &[]),
                with(&["RL.ADMIT", "cur"], &sliding, &[]),
                with(&["RL.REFUND", "cur"], &sliding, &["COST", "2"]),
                with(&["RL.ADMIT", "future"], &sliding, &[]),
                with(&["RL.ADMIT", "stale"], &sliding, &[]),
                with(&["RL.ADMIT", "bare"], &sliding, &["COST", "0"]),
                with(&["RL.ADMIT", "bare"], &sliding, &["COST", "3"]),
            ],
        )
        .pinned(),
    );
    for algo in ["token", "gcra"] {
        let p = policy(algo);
        let state = |ns: &str| {
            if algo == "token" {
                format!("token:{ns}:{{at-120}}")
            } else {
                format!("gcra:{{ns+{ns}}}")
            }
        };
        scenarios.push(scenario(
            format!("{algo}: crafted state, refills, far future, missing TTL"),
            &["a", "b", "far", "bare", "other"],
            vec![
                preset("a", &state("100000000"), Some(700)),
                preset("b", &state("700000000"), Some(200)),
                preset("far", &state("900000000000"), Some(1_000_000)),
                preset("bare", &state("300000000"), None),
                preset("other", "leaky:{ns+1}", Some(1000)),
                with(&["RL.TTL", "a"], &p, &[]),
                with(&["RL.ADMIT", "a"], &p, &[]),
                with(&["RL.ADMIT", "b"], &p, &[]),
                with(&["RL.ADMIT", "far"], &p, &[]),
                with(&["RL.ADMIT", "bare"], &p, &[]),
                with(&["RL.ADMIT", "bare"], &p, &["COST", "3"]),
                with(&["RL.ADMIT", "a"], &policy(algo)[..6], &["BURST", "1"]),
                with(
                    &["RL.ADMIT", "b"],
                    &["ALGO", algo, "LIMIT", "100", "WINDOW", "1000"].map(String::from),
                    &[],
                ),
                with(&["RL.ADMIT", "other"], &p, &[]),
            ],
        ));
    }
    let leaky = policy("leaky");
    scenarios.push(scenario(
        "leaky: queueing delays, BURST 0, refund shortens the queue",
        &["q", "none", "old"],
        vec![
            with(&["RL.ADMIT", "q"], &leaky, &[]),
            with(&["RL.ADMIT", "q"], &leaky, &[]),
            with(&["RL.ADMIT", "q"], &leaky, &[]),
            with(&["RL.ADMIT", "q"], &leaky, &[]),
            with(&["RL.REFUND", "q"], &leaky, &[]),
            with(&["RL.TTL", "q"], &leaky, &[]),
            with(
                &["RL.ADMIT", "none"],
                &policy("leaky")[..6],
                &["BURST", "0"],
            ),
            with(
                &["RL.ADMIT", "none"],
                &policy("leaky")[..6],
                &["BURST", "0"],
            ),
            preset("old", "leaky:{ns-5000000000}", None),
            with(&["RL.ADMIT", "old"], &leaky, &[]),
        ],
    ));
    scenarios.push(scenario(
        "META chooses algorithm and burst; a field is judged only when used",
        &["m", "k", "j"],
        vec![
            call![
                "HSET",
                "m",
                "max",
                4,
                "duration",
                2000,
                "algorithm",
                "token",
                "burst",
                2,
                "queue",
                "x"
            ],
            call!["RL.ADMIT", "k", "META", "m"],
            call!["RL.ADMIT", "k", "META", "m", "ALGO", "gcra"],
            call!["RL.ADMIT", "j", "META", "m", "BURST", 3],
            call!["RL.ADMIT", "j", "META", "m", "ALGO", "fixed", "LIMIT", 2],
            call!["RL.TTL", "k", "META", "m"],
            call!["RL.REFUND", "k", "META", "m"],
            call!["RL.LIMIT", "m"],
        ],
    ));
    check(scenarios);
}

#[test]
fn throttle_agrees_with_the_cl_throttle_reference() {
    let t = |q: i64| call!["RL.THROTTLE", "t", 4, 1, 1, q];
    check(vec![
        scenario(
            "the CL.THROTTLE reference sequence",
            &["t"],
            vec![
                t(6),
                t(1),
                t(1),
                t(1),
                t(1),
                t(1),
                t(1),
                call!["RL.THROTTLE", "t", 4, 1, 1],
            ],
        )
        .want(&[
            "[1, 5, 5, -1, 0]",
            "[0, 5, 4, -1, 1]",
            "[0, 5, 3, -1, 2]",
            "[0, 5, 2, -1, 3]",
            "[0, 5, 1, -1, 4]",
            "[0, 5, 0, -1, 5]",
            "[1, 5, 0, 1, 5]",
            "[1, 5, 0, 1, 5]",
        ]),
        scenario(
            "3 s later, quantities 1, 0, 2, 1",
            &["t"],
            vec![
                preset("t", "gcra:{ns+2000000000}", Some(2000)),
                t(1),
                t(0),
                t(2),
                t(1),
            ],
        )
        .want(&[
            "[0, 5, 2, -1, 3]",
            "[0, 5, 2, -1, 3]",
            "[0, 5, 0, -1, 5]",
            "[1, 5, 0, 1, 5]",
        ]),
        scenario(
            "redis-cell's plain integer state, foreign and far-future state, fast rates",
            &["cell", "bare", "past", "far", "fast", "shared"],
            vec![
                preset("cell", "{ns+1500000000}", Some(1500)),
                preset("bare", "gcra:{ns+3000000000}", None),
                preset("past", "gcra:{ns-9000000000}", None),
                preset("far", "gcra:{ns+90000000000}", Some(90_000)),
                call!["RL.THROTTLE", "cell", 2, 1, 1],
                call!["RL.THROTTLE", "bare", 0, 1, 1],
                call!["RL.THROTTLE", "bare", 0, 1, 1, 0],
                call!["RL.THROTTLE", "past", 0, 1, 1, 5],
                call!["RL.THROTTLE", "far", 3, 1, 2],
                call!["RL.THROTTLE", "fast", 6000, 6000, 1],
                call!["RL.THROTTLE", "fast", 6000, 6000, 1, 6000],
                call!["RL.THROTTLE", "shared", 2, 3, 1],
                call!["RL.ADMIT", "shared", "ALGO", "gcra", "LIMIT", 3, "WINDOW", 1000, "BURST", 3],
            ],
        ),
    ]);
}

#[test]
fn admitall_agrees_all_or_none() {
    let p = "POLICY";
    check(vec![
        scenario(
            "each member answers as alone; a refusal consumes none",
            &["a:{x}", "b:{x}", "c:{x}", "m:{x}"],
            vec![
                call![
                    "HSET",
                    "m:{x}",
                    "max",
                    2,
                    "duration",
                    5000,
                    "algorithm",
                    "gcra"
                ],
                call![
                    "RL.ADMITALL",
                    3,
                    "a:{x}",
                    "b:{x}",
                    "c:{x}",
                    p,
                    "LIMIT",
                    3,
                    "WINDOW",
                    1000,
                    p,
                    "ALGO",
                    "token",
                    "LIMIT",
                    5,
                    "WINDOW",
                    1000,
                    "BURST",
                    2,
                    p,
                    "META",
                    "m:{x}"
                ],
                call![
                    "RL.ADMITALL",
                    3,
                    "a:{x}",
                    "b:{x}",
                    "c:{x}",
                    p,
                    "LIMIT",
                    3,
                    "WINDOW",
                    1000,
                    p,
                    "ALGO",
                    "token",
                    "LIMIT",
                    5,
                    "WINDOW",
                    1000,
                    "BURST",
                    2,
                    p,
                    "META",
                    "m:{x}"
                ],
                call![
                    "RL.ADMITALL",
                    3,
                    "a:{x}",
                    "b:{x}",
                    "c:{x}",
                    p,
                    "LIMIT",
                    3,
                    "WINDOW",
                    1000,
                    p,
                    "ALGO",
                    "token",
                    "LIMIT",
                    5,
                    "WINDOW",
                    1000,
                    "BURST",
                    2,
                    p,
                    "META",
                    "m:{x}"
                ],
                call![
                    "RL.ADMITALL",
                    2,
                    "a:{x}",
                    "c:{x}",
                    "COST",
                    0,
                    p,
                    "LIMIT",
                    3,
                    "WINDOW",
                    1000,
                    p,
                    "META",
                    "m:{x}"
                ],
                call![
                    "RL.ADMITALL",
                    2,
                    "a:{x}",
                    "b:{x}",
                    "COST",
                    2,
                    p,
                    "LIMIT",
                    3,
                    "WINDOW",
                    1000,
                    p,
                    "ALGO",
                    "sliding",
                    "LIMIT",
                    1,
                    "WINDOW",
                    100
                ],
                call!["RL.ADMITALL", 1, "a:{x}", p],
                call![
                    "RL.ADMITALL",
                    2,
                    "a:{x}",
                    "u:{x}",
                    p,
                    "LIMIT",
                    9,
                    "WINDOW",
                    1000,
                    p,
                    "LIMIT",
                    0
                ],
            ],
        )
        .pinned(),
        scenario(
            "a refusing member with foreign state is repaired as alone",
            &["a", "bare"],
            vec![
                preset("bare", "7", None),
                call![
                    "RL.ADMITALL",
                    2,
                    "a",
                    "bare",
                    p,
                    "LIMIT",
                    5,
                    "WINDOW",
                    1000,
                    p,
                    "LIMIT",
                    3,
                    "WINDOW",
                    1000
                ],
            ],
        ),
    ]);
}

/// Values no limiter wrote, or wrote differently: each algorithm reads,
/// refuses or repairs them exactly as the module does.
#[test]
fn foreign_and_malformed_stored_values_agree() {
    const VALUES: &[&str] = &[
        "-3",
        "0",
        "007",
        "1.5",
        "99999999999999999999",
        "",
        "token:abc:1",
        "token:1:{ms+0}:1000000",
        "token:1:{ms+0}:0:9",
        "token:-99999999999:{ms+0}",
        "gcra:",
        "gcra:-1",
        "gcra:12x",
        "leaky:{ns+999999999999999999}",
        "sliding:1:2",
        "sliding:{win 100+0}:-1:0",
        "sliding:{win 100+0}:99999999999999999999:0",
    ];
    let mut scenarios = Vec::new();
    for value in VALUES {
        let mut steps = vec![preset("v", value, None), preset("w", value, Some(700))];
        for algo in ["fixed", "sliding", "token", "gcra", "leaky"] {
            let p = policy(algo);
            for key in ["v", "w"] {
                steps.push(with(&["RL.TTL", key], &p, &[]));
                steps.push(with(&["RL.ADMIT", key], &p, &["COST", "0"]));
                steps.push(with(&["RL.REFUND", key], &p, &["COST", "0"]));
            }
        }
        steps.push(call!["RL.THROTTLE", "v", 2, 1, 1, 0]);
        for algo in ["fixed", "sliding", "token", "gcra", "leaky"] {
            steps.push(with(&["RL.ADMIT", "v"], &policy(algo), &[]));
            steps.push(with(&["RL.REFUND", "w"], &policy(algo), &[]));
        }
        steps.push(call!["RL.THROTTLE", "w", 2, 1, 1]);
        scenarios.push(scenario(format!("stored value {value:?}"), &["v", "w"], steps).pinned());
    }
    check(scenarios);
}

/// Real time passing, not a preset state: once a window has expired or a
/// bucket has refilled, each backend answers as it did on the fresh
/// limiter, and both answered the same.
#[test]
fn windows_expire_and_buckets_refill_in_real_time() {
    let mut answers = Vec::new();
    for backend in BOTH {
        let server = backend.start();
        let mut con = server.client();
        let admit = |algo: &'static str| {
            [
                "RL.ADMIT", algo, "ALGO", algo, "LIMIT", "2", "WINDOW", "200",
            ]
        };
        let algos = ["fixed", "token", "gcra", "leaky"];
        let mut fresh = Vec::new();
        for algo in algos {
            fresh.push(show(&backend.raw(&mut con, &admit(algo))));
            let refused = (0..4).any(|_| {
                common::try_ints(&backend.raw(&mut con, &admit(algo))).is_some_and(|r| r[0] == 0)
            });
            assert!(refused, "{backend:?} {algo}: never full");
        }
        std::thread::sleep(std::time::Duration::from_millis(450));
        for (algo, first) in algos.iter().zip(&fresh) {
            let again = show(&backend.raw(&mut con, &admit(algo)));
            assert_eq!(&again, first, "{backend:?} {algo}: after the window");
        }
        answers.push(fresh);
    }
    assert_eq!(
        answers[0],
        [
            "[1, 2, 1, 0, 200]",
            "[1, 2, 1, 0, 100]",
            "[1, 2, 1, 0, 100]",
            "[1, 2, 2, 0, 100]"
        ]
    );
    assert_eq!(answers[1], answers[0]);
}

/// The one documented difference in arithmetic: a stored count at or
/// beyond 2^53 (a Lua number is exact below it) that the call would
/// change is refused by the library with an ERR that says so, never
/// rounded, and left as it is; the module computes it.
#[test]
fn a_count_beyond_the_exact_range_is_an_error_in_the_library_never_rounded() {
    let refund = ["RL.REFUND", "k", "LIMIT", "3", "WINDOW", "1000"];
    for value in ["9007199254740993", "9223372036854775807"] {
        for backend in BOTH {
            let server = backend.start();
            let mut con = server.client();
            let _: () = redis::cmd("SET")
                .arg(&["k", value, "PX", "60000"])
                .query(&mut con)
                .unwrap();
            let expiry = common::pexpiretime(&mut con, "k");
            let reply = backend.raw(&mut con, &refund);
            let stored: String = redis::cmd("GET").arg("k").query(&mut con).unwrap();
            match backend {
                Backend::Module => {
                    assert_eq!(
                        common::try_ints(&reply).map(|r| r[0]),
                        Some(0),
                        "{value}: {reply:?}"
                    );
                    let want = value.parse::<i64>().unwrap() - 1;
                    assert_eq!(
                        stored,
                        want.to_string(),
                        "{value}: the module refunds exactly"
                    );
                }
                Backend::Functions => {
                    assert_eq!(
                        common::error_text(&reply).as_deref(),
                        Some(
                            "ERR limiter key holds counts beyond the library's exact range \
                             (Lua numbers are exact below 2^53); the module computes it"
                        ),
                        "{value}"
                    );
                    assert_eq!(stored, value, "{value}: the library wrote nothing");
                    assert_eq!(common::pexpiretime(&mut con, "k"), expiry);
                }
            }
        }
    }
}

#[test]
fn refund_and_reset_agree() {
    check(vec![scenario(
        "refunds never go below empty; reset deletes only strings",
        &["f", "s", "h", "n"],
        vec![
            preset("f", "3", Some(900)),
            preset("s", "sliding:{win 100+0}:2:5", Some(150)),
            call!["HSET", "h", "max", 1],
            call!["RL.REFUND", "f", "LIMIT", 5, "WINDOW", 1000, "COST", 2],
            call!["RL.REFUND", "f", "LIMIT", 5, "WINDOW", 1000, "COST", 2],
            call![
                "RL.REFUND",
                "s",
                "ALGO",
                "sliding",
                "LIMIT",
                5,
                "WINDOW",
                100
            ],
            call!["RL.REFUND", "n", "LIMIT", 5, "WINDOW", 1000],
            call!["RL.RESET", "s"],
            call!["RL.RESET", "n"],
            call!["RL.RESET", "h"],
        ],
    )
    .pinned()]);
}

#[test]
fn module_only_configs_info_events_have_no_library_equivalent() {
    // What the module has and the library cannot: its configs and INFO section.
    {
        let module = Backend::Module.start();
        let mut con = module.client();
        let got: Vec<String> = redis::cmd("CONFIG")
            .arg(&["GET", "ratelimit.default-algorithm"])
            .query(&mut con)
            .unwrap();
        assert_eq!(got, ["ratelimit.default-algorithm", "fixed"]);
        let info: String = redis::cmd("INFO").arg("ratelimit").query(&mut con).unwrap();
        assert!(info.contains("ratelimit_calls_admitted:"), "{info}");
    }
    let server = Backend::Functions.start_with(&["--notify-keyspace-events", "KEA"]);
    let mut con = server.client();
    // No config of the module exists here: the default algorithm is fixed.
    let got = common::cmd_raw(&mut con, &["CONFIG", "GET", "ratelimit.*"]);
    assert!(
        matches!(&got, redis::Value::Array(a) if a.is_empty())
            || matches!(&got, redis::Value::Map(m) if m.is_empty()),
        "{got:?}"
    );
    let b = Backend::Functions;
    let admit = ["RL.ADMIT", "k", "LIMIT", "1", "WINDOW", "60000"];
    assert_eq!(
        common::try_ints(&b.raw(&mut con, &admit)).unwrap()[..3],
        [1, 1, 0]
    );
    let v: String = redis::cmd("GET").arg("k").query(&mut con).unwrap();
    assert_eq!(v, "1", "the default algorithm is fixed: a plain counter");
    // No `ratelimit` INFO section.
    let info: String = redis::cmd("INFO").arg("ratelimit").query(&mut con).unwrap();
    assert!(!info.contains("ratelimit_"), "{info}");
    // A refusal fires no rl.hit.
    common::subscribe!(events = server, "__key*__:*");
    assert_eq!(common::try_ints(&b.raw(&mut con, &admit)).unwrap()[0], 0);
    let _: () = redis::cmd("SET")
        .arg("marker")
        .arg("1")
        .query(&mut con)
        .unwrap();
    let mut seen = Vec::new();
    loop {
        let msg = events.get_message().expect("an event");
        let payload: String = msg.get_payload().unwrap();
        let channel = msg.get_channel_name().to_string();
        if channel.ends_with(":set") && payload == "marker" {
            break;
        }
        seen.push(format!("{channel} {payload}"));
    }
    // Everything before the marker's own events: the refusal fired nothing.
    assert!(
        seen.iter().all(|e| e.ends_with(":marker set")),
        "a refusal fired events: {seen:?}"
    );
}

/// The pairs of a map reply, or of a RESP2 flat name/value list, sorted by
/// name (the library builds its maps from a Lua table: no order); nested
/// maps and lists of maps likewise.
fn pairs(v: &redis::Value) -> Vec<(String, String)> {
    use redis::Value;
    let mut out: Vec<(String, String)> = match v {
        Value::Map(m) => m.iter().map(|(k, v)| (show(k), nested(v))).collect(),
        Value::Array(flat) if flat.len() % 2 == 0 => flat
            .chunks(2)
            .map(|kv| (show(&kv[0]), nested(&kv[1])))
            .collect(),
        other => panic!("expected a map or a flat name/value list, got {other:?}"),
    };
    out.sort();
    out
}

fn nested(v: &redis::Value) -> String {
    match v {
        redis::Value::Array(items) => format!(
            "[{}]",
            items
                .iter()
                .map(|i| format!("{:?}", pairs(i)))
                .collect::<Vec<_>>()
                .join(", ")
        ),
        other => show(other),
    }
}

#[test]
fn resp3_maps_on_request_and_arrays_by_default_for_both_protocols() {
    let calls: Vec<Vec<&str>> = vec![
        vec!["RL.ADMIT", "a", "LIMIT", "5", "WINDOW", "60000"],
        vec!["RL.REFUND", "a", "LIMIT", "5", "WINDOW", "60000"],
        vec!["RL.THROTTLE", "t", "1", "1", "1"],
        vec![
            "RL.ADMITALL",
            "2",
            "x",
            "y",
            "POLICY",
            "LIMIT",
            "1",
            "WINDOW",
            "1000",
            "POLICY",
            "ALGO",
            "gcra",
            "LIMIT",
            "2",
            "WINDOW",
            "1000",
        ],
    ];
    let module = Backend::Module.start();
    let library = Backend::Functions.start();
    let (mut m2, mut m3) = (module.client(), module.client());
    let (mut l2, mut l3) = (library.client(), library.client());
    for con in [&mut m3, &mut l3] {
        let _: redis::Value = redis::cmd("HELLO").arg(3).query(con).unwrap();
    }
    for call in &calls {
        // The same frozen-clock answers need fresh keys on each: one call
        // per key and protocol, on a flushed server, in one transaction.
        let plain = Backend::Functions.call(call);
        let mut mapped = plain.clone();
        mapped.extend(["FORMAT".to_string(), "map".to_string()]);
        let module_words: Vec<String> = call.iter().map(|s| s.to_string()).collect();
        let run = |con: &mut redis::Connection, words: &[String]| {
            assert_eq!(common::cmd_raw(con, &["FLUSHALL"]), redis::Value::Okay);
            common::exec(con, &[words.to_vec()]).remove(0)
        };
        let module2 = run(&mut m2, &module_words);
        let module3 = run(&mut m3, &module_words);
        assert!(
            common::try_ints(&module2).is_some() || matches!(&module2, redis::Value::Array(_)),
            "{call:?}: {module2:?}"
        );
        assert!(
            matches!(module3, redis::Value::Map(_)),
            "{call:?}: the module gives RESP3 a map: {module3:?}"
        );
        let want = pairs(&module3);
        // Without FORMAT: the RESP2 array, whatever the protocol.
        for (con, proto) in [(&mut l2, 2), (&mut l3, 3)] {
            let got = run(con, &plain);
            assert_eq!(
                show(&got),
                show(&module2),
                "{call:?}: plain reply to a RESP{proto} client"
            );
        }
        // FORMAT map: the module's RESP3 map; a RESP2 client gets it flat.
        let got3 = run(&mut l3, &mapped);
        assert!(matches!(got3, redis::Value::Map(_)), "{call:?}: {got3:?}");
        assert_eq!(pairs(&got3), want, "{call:?}: FORMAT map to a RESP3 client");
        let got2 = run(&mut l2, &mapped);
        assert!(matches!(got2, redis::Value::Array(_)), "{call:?}: {got2:?}");
        assert_eq!(pairs(&got2), want, "{call:?}: FORMAT map to a RESP2 client");
    }
    // The module knows no FORMAT option: it is the library's own.
    let err = common::cmd_err(
        &mut m2,
        &[
            "RL.ADMIT", "a", "LIMIT", "5", "WINDOW", "60000", "FORMAT", "map",
        ],
    );
    assert_eq!(err, "ERR unknown option 'FORMAT'");
    // Single integers stay integers for both protocols on both backends.
    for (backend, con) in [
        (Backend::Module, &mut m2),
        (Backend::Module, &mut m3),
        (Backend::Functions, &mut l2),
        (Backend::Functions, &mut l3),
    ] {
        let _: () = redis::cmd("HSET")
            .arg(&["meta", "max", "7"])
            .query(con)
            .unwrap();
        let ttl = backend.raw(con, &["RL.TTL", "a", "LIMIT", "5", "WINDOW", "60000"]);
        assert_eq!(ttl, redis::Value::Int(0), "{backend:?}");
        assert_eq!(
            backend.raw(con, &["RL.LIMIT", "meta"]),
            redis::Value::Int(7),
            "{backend:?}"
        );
        assert_eq!(
            backend.raw(con, &["RL.RESET", "none"]),
            redis::Value::Int(0),
            "{backend:?}"
        );
    }
}

/// One random call in the module's syntax over a few keys per algorithm
/// (and now and then a key of another algorithm, a META policy, or a
/// throttle on a bucket's key).
fn random_step(rng: &mut common::Rng) -> Step {
    let algo = rng.pick(&["fixed", "sliding", "token", "gcra", "leaky"]);
    let key = if rng.pct(10) {
        rng.pick(&["f", "s", "k", "g", "l", "t"]).to_string()
    } else {
        format!("{}{}", &algo[..1], rng.below(2))
    };
    let limit = (1 + rng.below(5)).to_string();
    let window = if algo == "sliding" {
        "100".to_string()
    } else {
        rng.pick(&["50", "300", "1000", "7000"]).to_string()
    };
    let mut p: Vec<String> = vec![
        "ALGO".into(),
        algo.into(),
        "LIMIT".into(),
        limit,
        "WINDOW".into(),
        window,
    ];
    if matches!(algo, "token" | "gcra" | "leaky") && rng.pct(50) {
        // Now and then 0, which only leaky accepts.
        let burst = if rng.pct(80) { 1 + rng.below(3) } else { 0 };
        p.extend(["BURST".into(), burst.to_string()]);
    }
    let cost = rng.below(4).to_string();
    let words = |w: &[&str]| w.iter().map(|s| s.to_string()).collect::<Vec<String>>();
    Step::Call(match rng.below(100) {
        0..=44 => [words(&["RL.ADMIT", &key]), p].concat(),
        45..=54 => [words(&["RL.ADMIT", &key]), p, words(&["COST", &cost])].concat(),
        55..=64 => [words(&["RL.REFUND", &key]), p, words(&["COST", &cost])].concat(),
        65..=69 => [words(&["RL.TTL", &key]), p].concat(),
        70..=72 => words(&["RL.RESET", &key]),
        73..=76 => words(&["RL.ADMIT", &key, "META", "meta"]),
        77..=86 => {
            let t = rng.pick(&["t", "t", "g0"]);
            let burst = rng.below(4).to_string();
            let count = (1 + rng.below(3)).to_string();
            let period = rng.pick(&["1", "2", "60"]);
            let q = rng.below(4).to_string();
            words(&["RL.THROTTLE", t, &burst, &count, period, &q])
        }
        _ => {
            let other = format!("{}{}", &algo[..1], 1 - rng.below(2));
            let mut w = words(&["RL.ADMITALL", "2", &key, &other, "COST", &cost, "POLICY"]);
            if key == other {
                w = words(&["RL.ADMITALL", "1", &key, "COST", &cost, "POLICY"]);
                w.extend(p);
            } else {
                w.extend(p.clone());
                w.push("POLICY".into());
                if rng.pct(30) {
                    w.extend(words(&["META", "meta"]));
                } else {
                    w.extend(p);
                }
            }
            w
        }
    })
}

/// Seeded random call sequences, each in one transaction over crafted
/// starting state: the two backends' transcripts are identical.
#[test]
fn random_call_sequences_agree() {
    let mut rng = common::Rng::new(common::seed("random_call_sequences_agree"));
    let keys: &[&str] = &[
        "f0", "f1", "s0", "s1", "t0", "t1", "g0", "g1", "l0", "l1", "t",
    ];
    let mut scenarios = Vec::new();
    for n in 0..24 {
        let mut steps = vec![call![
            "HSET",
            "meta",
            "max",
            3,
            "duration",
            1000,
            "algorithm",
            "gcra",
            "burst",
            2
        ]];
        let crafted = [
            ("f0", "2"),
            ("s0", "sliding:{win 100-100}:2:1"),
            ("t0", "token:400000000:{at-90}"),
            ("g0", "gcra:{ns+250000000}"),
            ("l0", "leaky:{ns+150000000}"),
            ("t", "gcra:{ns+1500000000}"),
        ];
        for (key, value) in crafted {
            if rng.pct(60) {
                let ttl = rng.pick(&[None, Some(100), Some(900), Some(5000)]);
                steps.push(preset(key, value, ttl));
            }
        }
        for _ in 0..40 {
            steps.push(random_step(&mut rng));
        }
        scenarios.push(scenario(format!("random sequence {n}"), keys, steps).pinned());
    }
    check(scenarios);
}
