//! The lease commands, module against library (issue 19): the same calls go
//! to `RL.*` on a server with the module and to `FCALL rl_*` on a server
//! without it, each scenario in one MULTI/EXEC (one frozen clock) on a
//! flushed server, after leases seeded relative to that clock. Replies,
//! errors, every key's members and scores (ZRANGE WITHSCORES) and its
//! PEXPIRETIME must match, with times written relative to the frozen now
//! and generated lease ids (which differ by design) matched by the
//! contract's pattern `^[0-9a-f]+-[0-9a-f]{16}$`.

use crate::common;

use crate::common::backend::{error_text, is_generated_id, show, without_ids, Backend, BOTH};
use crate::common::{cmd_raw, exec, time_ms, Rng, Server};
use redis::{Connection, Value};

/// A step of a lease scenario.
#[derive(Debug, Clone)]
enum Step {
    /// A call in the module's syntax (translated for the library).
    Call(Vec<String>),
    /// ZADD of `(score, id)` pairs to `key`, a score `now`, `now+N`, `now-N`
    /// relative to the frozen clock or a raw score (`1.5`, `inf`), then the
    /// key's expiry `pxat` ms from now, if any.
    Seed {
        key: String,
        leases: Vec<(String, String)>,
        pxat: Option<i64>,
    },
}

fn call(words: &[&str]) -> Step {
    Step::Call(words.iter().map(|w| w.to_string()).collect())
}

fn seed(key: &str, leases: &[(&str, &str)], pxat: Option<i64>) -> Step {
    Step::Seed {
        key: key.into(),
        leases: leases
            .iter()
            .map(|(s, id)| (s.to_string(), id.to_string()))
            .collect(),
        pxat,
    }
}

/// ZADDs KEYS[1] ARGV's (score, member) pairs, a score `now+N`/`now-N`
/// being relative to the server's (frozen) now; then PEXPIREAT now +
/// the last ARGV unless it is empty.
const SEED_SCRIPT: &str = r#"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
for i = 1, #ARGV - 1, 2 do
  local score = ARGV[i]
  local rel = string.match(score, '^now([-+]?%d*)$')
  if rel then score = string.format('%d', now + (tonumber(rel) or 0)) end
  redis.call('ZADD', KEYS[1], score, ARGV[i + 1])
end
if ARGV[#ARGV] ~= '' then
  redis.call('PEXPIREAT', KEYS[1], string.format('%d', now + tonumber(ARGV[#ARGV])))
end
return redis.status_reply('SEEDED')
"#;

/// What a scenario did on one backend, comparable across servers.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Transcript {
    replies: Vec<String>,
    /// Per key: `key type [(id, score)...] expiry`, sorted by id.
    state: Vec<String>,
}

/// A score or expiry relative to `now` when it is a time near it.
fn relative(text: &str, now: i64) -> String {
    match text.parse::<i64>() {
        Ok(v) if (v - now).abs() <= 10_000_000_000 => format!("now{:+}", v - now),
        _ => text.to_string(),
    }
}

fn text_of(v: &Value) -> String {
    match v {
        Value::BulkString(b) => String::from_utf8_lossy(b).into_owned(),
        other => show(other),
    }
}

/// Runs `steps` on `backend` in one MULTI/EXEC on a flushed server, then
/// reads `keys`.
fn run(backend: Backend, con: &mut Connection, steps: &[Step], keys: &[&str]) -> Transcript {
    assert_eq!(cmd_raw(con, &["FLUSHALL"]), Value::Okay);
    let mut cmds: Vec<Vec<String>> = vec![vec!["TIME".into()]];
    for step in steps {
        cmds.push(match step {
            Step::Call(words) => backend.call_owned(words),
            Step::Seed { key, leases, pxat } => {
                let mut c = vec!["EVAL".into(), SEED_SCRIPT.into(), "1".into(), key.clone()];
                for (score, id) in leases {
                    c.push(score.clone());
                    c.push(id.clone());
                }
                c.push(pxat.map(|p| p.to_string()).unwrap_or_default());
                c
            }
        });
    }
    for key in keys {
        cmds.push(vec!["TYPE".into(), key.to_string()]);
        cmds.push(vec![
            "ZRANGE".into(),
            key.to_string(),
            "0".into(),
            "-1".into(),
            "WITHSCORES".into(),
        ]);
        cmds.push(vec!["PEXPIRETIME".into(), key.to_string()]);
    }
    let mut replies = exec(con, &cmds);
    let now = time_ms(&replies.remove(0));
    let (steps_part, state_part) = replies.split_at(steps.len());
    let mut out = Transcript {
        replies: Vec::new(),
        state: Vec::new(),
    };
    for (step, reply) in steps.iter().zip(steps_part) {
        match step {
            Step::Call(_) => {
                let line = show(reply);
                // A generated id must have the contract's form: only such
                // ids are normalised, any other stays in the line.
                out.replies.push(without_ids(&line));
            }
            Step::Seed { key, .. } => assert_eq!(
                reply,
                &Value::SimpleString("SEEDED".into()),
                "{backend:?}: seeding {key}"
            ),
        }
    }
    for (key, parts) in keys.iter().zip(state_part.chunks(3)) {
        let members = match &parts[1] {
            Value::Array(flat) => {
                let mut pairs: Vec<String> = flat
                    .chunks(2)
                    .map(|p| {
                        let id = text_of(&p[0]);
                        let id = if is_generated_id(&id) {
                            "<id>".into()
                        } else {
                            id
                        };
                        format!("{id}@{}", relative(&text_of(&p[1]), now))
                    })
                    .collect();
                pairs.sort();
                pairs.join(" ")
            }
            other => show(other),
        };
        let expiry = match &parts[2] {
            Value::Int(t) if *t >= 0 => relative(&t.to_string(), now),
            other => show(other),
        };
        out.state
            .push(format!("{key} {} [{members}] {expiry}", show(&parts[0])));
    }
    out
}

/// Both servers: the module's and the library's.
fn servers() -> Vec<(Backend, Server)> {
    BOTH.iter().map(|&b| (b, b.start())).collect()
}

/// Runs each scenario on both backends; every difference, listed.
fn compare(servers: &[(Backend, Server)], scenarios: &[(String, Vec<Step>)], keys: &[&str]) {
    let mut cons: Vec<Connection> = servers.iter().map(|(_, s)| s.client()).collect();
    let mut differences = Vec::new();
    let mut calls = 0;
    for (name, steps) in scenarios {
        let module = run(servers[0].0, &mut cons[0], steps, keys);
        let library = run(servers[1].0, &mut cons[1], steps, keys);
        calls += module.replies.len();
        if module != library {
            let mut lines = vec![format!("{name}:\n  steps   {steps:?}")];
            let pairs = module
                .replies
                .iter()
                .zip(&library.replies)
                .chain(module.state.iter().zip(&library.state));
            for (i, (m, l)) in pairs.enumerate() {
                if m != l {
                    lines.push(format!("  #{i} module  {m}\n  #{i} library {l}"));
                }
            }
            differences.push(lines.join("\n"));
        }
    }
    println!("{} scenarios, {calls} paired calls", scenarios.len());
    assert!(
        differences.is_empty(),
        "{} of {} scenarios ({calls} paired calls) differ:\n{}",
        differences.len(),
        scenarios.len(),
        differences
            .iter()
            .take(5)
            .cloned()
            .collect::<Vec<_>>()
            .join("\n\n")
    );
}

const KEYS: &[&str] = &["L", "M"];

/// Scenarios written by hand: each rule of the contract once.
fn crafted() -> Vec<(String, Vec<Step>)> {
    let a = |rest: &[&str]| call(&[&["RL.ACQUIRE", "L"][..], rest].concat());
    let v: Vec<(&str, Vec<Step>)> = vec![
        (
            "fill, refuse, release, acquire again",
            vec![
                a(&["LIMIT", "2", "TTL", "1000", "ID", "x"]),
                a(&["LIMIT", "2", "TTL", "2000", "ID", "y"]),
                a(&["LIMIT", "2", "TTL", "3000", "ID", "z"]),
                call(&["RL.INFLIGHT", "L"]),
                call(&["RL.RELEASE", "L", "x"]),
                call(&["RL.RELEASE", "L", "x"]),
                a(&["LIMIT", "2", "TTL", "3000", "ID", "z"]),
            ],
        ),
        (
            "generated ids",
            vec![
                a(&["LIMIT", "3", "TTL", "1000"]),
                a(&["LIMIT", "3", "TTL", "1000"]),
                a(&["LIMIT", "3", "TTL", "500"]),
                a(&["LIMIT", "3", "TTL", "500"]),
            ],
        ),
        (
            "renew by ID takes no second slot, even at the limit",
            vec![
                a(&["LIMIT", "1", "TTL", "1000", "ID", "job"]),
                a(&["LIMIT", "1", "TTL", "5000", "ID", "job"]),
                a(&["LIMIT", "1", "TTL", "5000", "ID", "other"]),
            ],
        ),
        (
            "expired leases are reclaimed by an acquire, live ones kept",
            vec![
                seed(
                    "L",
                    &[("now-100", "gone"), ("now", "edge"), ("now+1", "live")],
                    Some(1),
                ),
                a(&["LIMIT", "2", "TTL", "700"]),
            ],
        ),
        (
            "a refusal that reclaims writes the ZREM and PEXPIREAT only",
            vec![
                seed(
                    "L",
                    &[("now-5", "gone"), ("now+40", "p"), ("now+90", "q")],
                    Some(90),
                ),
                a(&["LIMIT", "2", "TTL", "700"]),
            ],
        ),
        (
            "a refusal with nothing to reclaim",
            vec![
                seed("L", &[("now+40", "p"), ("now+90", "q")], Some(90)),
                a(&["LIMIT", "1", "TTL", "700", "ID", "r"]),
            ],
        ),
        (
            "an acquire by the ID of an expired lease takes a new slot",
            vec![
                seed("L", &[("now-1", "job"), ("now+50", "p")], Some(50)),
                a(&["LIMIT", "1", "TTL", "700", "ID", "job"]),
                a(&["LIMIT", "2", "TTL", "700", "ID", "job"]),
            ],
        ),
        (
            "release and extend of expired, unknown and live leases",
            vec![
                seed(
                    "L",
                    &[("now-1", "old"), ("now+30", "p"), ("now+60", "q")],
                    Some(60),
                ),
                call(&["RL.RELEASE", "L", "nobody"]),
                call(&["RL.EXTEND", "L", "old", "TTL", "100"]),
                call(&["RL.EXTEND", "L", "p", "ttl", "20"]),
                call(&["RL.EXTEND", "L", "q", "TTL", "10"]),
                call(&["RL.RELEASE", "L", "q"]),
                call(&["RL.RELEASE", "L", "p"]),
                call(&["RL.INFLIGHT", "L"]),
            ],
        ),
        (
            "release of the last live lease reclaims the rest: the key goes",
            vec![
                seed("L", &[("now-1", "old"), ("now+30", "p")], Some(30)),
                call(&["RL.RELEASE", "L", "p"]),
            ],
        ),
        (
            "a key with only expired leases and no expiry",
            vec![
                seed("L", &[("now-10", "a"), ("now", "b")], None),
                call(&["RL.INFLIGHT", "L"]),
                call(&["RL.EXTEND", "L", "a", "TTL", "10"]),
                call(&["RL.EXTEND", "L", "zz", "TTL", "10"]),
            ],
        ),
        (
            "a live lease whose key has no expiry, or a wrong one",
            vec![
                seed("L", &[("now+100", "a")], None),
                seed("M", &[("now+100", "a")], Some(5)),
                call(&["RL.INFLIGHT", "L"]),
                call(&["RL.RELEASE", "L", "zz"]),
                call(&["RL.RELEASE", "M", "zz"]),
                call(&["RL.ACQUIRE", "M", "LIMIT", "1", "TTL", "10"]),
                call(&["RL.ACQUIRE", "L", "LIMIT", "2", "TTL", "10", "ID", "b"]),
            ],
        ),
        (
            "deadlines at 0 and at 2^53 are deadlines",
            vec![
                seed("L", &[("0", "zero"), ("9007199254740992", "far")], None),
                call(&["RL.INFLIGHT", "L"]),
                a(&["LIMIT", "2", "TTL", "10"]),
                a(&["LIMIT", "3", "TTL", "10", "ID", "n"]),
                call(&["RL.EXTEND", "L", "far", "TTL", "5"]),
            ],
        ),
        (
            "META fields and inline options",
            vec![
                call(&["HSET", "{m}", "max", "1", "ttl", "300"]),
                call(&["HSET", "{z}", "max", "0"]),
                call(&["HSET", "{t}", "ttl", "300"]),
                call(&["RL.ACQUIRE", "L", "META", "{m}", "ID", "a"]),
                call(&["RL.ACQUIRE", "L", "META", "{m}", "ID", "b"]),
                call(&["RL.ACQUIRE", "L", "META", "{m}", "LIMIT", "2", "ID", "b"]),
                call(&["RL.ACQUIRE", "L", "META", "{m}", "LIMIT", "3", "TTL", "50"]),
                call(&["RL.ACQUIRE", "L", "META", "{z}", "ID", "free"]),
                call(&["RL.ACQUIRE", "L", "META", "{z}"]),
                call(&["RL.ACQUIRE", "L", "META", "{t}"]),
                call(&["RL.ACQUIRE", "L", "META", "{t}", "LIMIT", "9"]),
                call(&["RL.ACQUIRE", "L", "META", "{nothing}"]),
                call(&["RL.ACQUIRE", "M", "META", "{nothing}", "LIMIT", "1"]),
                call(&["RL.ACQUIRE", "M", "LIMIT", "1", "TTL", "9", "META", "{z}"]),
            ],
        ),
        (
            "an ID that is the word META",
            vec![
                call(&["HSET", "{m}", "max", "2", "ttl", "300"]),
                a(&["LIMIT", "2", "TTL", "100", "ID", "META"]),
                call(&["RL.ACQUIRE", "L", "ID", "META", "META", "{m}"]),
                call(&["RL.ACQUIRE", "L", "META", "{m}", "ID", "meta"]),
                call(&["RL.EXTEND", "L", "META", "TTL", "50"]),
                call(&["RL.RELEASE", "L", "META"]),
            ],
        ),
        (
            "unlimited reads and writes nothing, whatever the key holds",
            vec![
                call(&["SET", "M", "text"]),
                seed("L", &[("now-1", "old"), ("1.5", "frac")], None),
                call(&["RL.ACQUIRE", "M"]),
                call(&["RL.ACQUIRE", "L", "ID", "x"]),
                call(&["RL.ACQUIRE", "L", "TTL", "1"]),
            ],
        ),
        (
            "scores that are no deadlines, and other types",
            vec![
                seed(
                    "L",
                    &[("now-1", "old"), ("1.5", "frac"), ("now+9", "p")],
                    Some(9),
                ),
                call(&["RL.ACQUIRE", "L", "LIMIT", "5", "TTL", "10"]),
                call(&["RL.RELEASE", "L", "p"]),
                call(&["RL.EXTEND", "L", "p", "TTL", "10"]),
                call(&["RL.INFLIGHT", "L"]),
                seed("M", &[("-1", "neg")], None),
                call(&["RL.INFLIGHT", "M"]),
                call(&["DEL", "M"]),
                seed("M", &[("9007199254740994", "big"), ("inf", "inf")], None),
                call(&["RL.RELEASE", "M", "big"]),
                call(&["DEL", "M"]),
                call(&["RPUSH", "M", "x"]),
                call(&["RL.ACQUIRE", "M", "LIMIT", "1", "TTL", "5"]),
                call(&["RL.INFLIGHT", "M"]),
            ],
        ),
        (
            "bad input in a scenario changes nothing",
            vec![
                seed("L", &[("now-1", "old"), ("now+9", "p")], Some(9)),
                call(&["RL.ACQUIRE", "L", "LIMIT", "0", "TTL", "5"]),
                call(&["RL.ACQUIRE", "L", "LIMIT", "1"]),
                call(&["RL.ACQUIRE", "L", "LIMIT", "1", "TTL", "9007199254740992"]),
                call(&["RL.ACQUIRE", "L", "LIMIT", "1", "TTL", "1", "ID", ""]),
                call(&["RL.ACQUIRE", "L", "LIMIT", "1", "TTL", "1", "BOGUS", "1"]),
                call(&["RL.EXTEND", "L", "p", "FOR", "5"]),
                call(&["RL.EXTEND", "L", "p", "TTL", "0"]),
                call(&["RL.RELEASE", "L", ""]),
            ],
        ),
    ];
    v.into_iter().map(|(n, s)| (n.to_string(), s)).collect()
}

#[test]
fn crafted_lease_scenarios_answer_and_store_alike() {
    compare(&servers(), &crafted(), KEYS);
}

/// A renewal with a shorter TTL than the lease had: the key's expiry is
/// the latest live deadline, which the renewed lease no longer has.
#[test]
fn renewing_with_a_shorter_ttl_moves_the_expiry_back() {
    let a = |rest: &[&str]| call(&[&["RL.ACQUIRE", "L"][..], rest].concat());
    let scenario = vec![
        a(&["LIMIT", "3", "TTL", "9000", "ID", "job"]),
        a(&["LIMIT", "3", "TTL", "1000", "ID", "other"]),
        a(&["LIMIT", "3", "TTL", "2000", "ID", "job"]),
    ];
    let servers = servers();
    let library = run(
        Backend::Functions,
        &mut servers[1].1.client(),
        &scenario,
        KEYS,
    );
    assert_eq!(
        library.state[0],
        "L +zset [job@now+2000 other@now+1000] now+2000"
    );
    compare(&servers, &[("renew shorter".into(), scenario)], KEYS);
}

/// `live` leases `l000`.. ending 10 ms apart from now+10 (the latest
/// last), after `expired` ones `x000`.. that ended 1 ms apart up to now.
fn many(key: &str, live: usize, expired: usize) -> Step {
    let mut leases: Vec<(String, String)> = (0..live)
        .map(|i| (format!("now+{}", 10 * (i + 1)), format!("l{i:03}")))
        .collect();
    leases.extend((0..expired).map(|i| (format!("now-{i}"), format!("x{i:03}"))));
    let pxat = (live > 0).then_some(10 * live as i64);
    Step::Seed {
        key: key.into(),
        leases,
        pxat,
    }
}

/// Keys holding many leases, so that the calls' few reads (the expired
/// range, the count, the earliest live, the last two, the named lease)
/// meet a big set: each expectation is checked on the library, and the
/// module must answer and store the same.
#[test]
fn many_live_leases_answer_and_store_alike() {
    let a = |rest: &[&str]| call(&[&["RL.ACQUIRE", "L"][..], rest].concat());
    let cases: Vec<(&str, Vec<Step>, Vec<&str>, &str)> = vec![
        (
            "a full key refuses until its earliest deadline; INFLIGHT counts",
            vec![
                many("L", 200, 0),
                a(&["LIMIT", "200", "TTL", "5000"]),
                call(&["RL.INFLIGHT", "L"]),
            ],
            vec!["[0, 200, 200, 10, nil]", "200"],
            " now+2000",
        ),
        (
            "release of the latest lease: the one before it is the expiry",
            vec![many("L", 200, 0), call(&["RL.RELEASE", "L", "l199"])],
            vec!["1"],
            " now+1990",
        ),
        (
            "releases of the two latest, then a short extend of the next",
            vec![
                many("L", 200, 0),
                call(&["RL.RELEASE", "L", "l199"]),
                call(&["RL.RELEASE", "L", "l198"]),
                call(&["RL.EXTEND", "L", "l197", "TTL", "5"]),
            ],
            vec!["1", "1", "1"],
            " now+1970",
        ),
        (
            "extend of the latest lease, longer",
            vec![
                many("L", 200, 0),
                call(&["RL.EXTEND", "L", "l199", "TTL", "9000"]),
            ],
            vec!["1"],
            " now+9000",
        ),
        (
            "renew by ID of the latest lease, shorter, at the limit",
            vec![
                many("L", 200, 0),
                a(&["LIMIT", "200", "TTL", "3", "ID", "l199"]),
            ],
            vec!["[1, 200, 200, 0, \"l199\"]"],
            " now+1990",
        ),
        (
            "renew by ID of a lease in the middle takes no second slot",
            vec![
                many("L", 200, 0),
                a(&["LIMIT", "200", "TTL", "3", "ID", "l100"]),
                a(&["LIMIT", "201", "TTL", "3"]),
            ],
            vec!["[1, 200, 200, 0, \"l100\"]", "[1, 201, 201, 0, \"<id>\"]"],
            " now+2000",
        ),
        (
            "one call reclaims many expired leases at once",
            vec![
                many("L", 50, 150),
                a(&["LIMIT", "60", "TTL", "100", "ID", "x010"]),
                call(&["RL.INFLIGHT", "L"]),
            ],
            vec!["[1, 60, 51, 0, \"x010\"]", "51"],
            " now+500",
        ),
        (
            "a refusal that reclaims many keeps the latest live deadline",
            vec![many("L", 50, 150), a(&["LIMIT", "50", "TTL", "100"])],
            vec!["[0, 50, 50, 10, nil]"],
            " now+500",
        ),
        (
            "a dead release and a dead extend reclaim many",
            vec![
                many("L", 20, 180),
                call(&["RL.RELEASE", "L", "x000"]),
                call(&["RL.EXTEND", "L", "x001", "TTL", "5"]),
                call(&["RL.RELEASE", "L", "l019"]),
            ],
            vec!["0", "0", "1"],
            " now+190",
        ),
        (
            "ties at the top: the latest deadline stays while one is left",
            vec![
                many("L", 100, 0),
                seed("L", &[("now+1000", "tie-a"), ("now+1000", "tie-b")], None),
                call(&["RL.RELEASE", "L", "tie-b"]),
            ],
            vec!["1"],
            " now+1000",
        ),
        (
            "a bad score in the middle is not read, under a named id it is",
            vec![
                many("L", 100, 0),
                // Live (year 2096) and not a deadline, below two valid ones.
                seed(
                    "L",
                    &[
                        ("4000000000000.5", "bad"),
                        ("5000000000000", "top1"),
                        ("5000000000000", "top2"),
                    ],
                    None,
                ),
                a(&["LIMIT", "200", "TTL", "5000", "ID", "new"]),
                call(&["RL.RELEASE", "L", "bad"]),
                seed("M", &[("now+10", "m"), ("inf", "top")], None),
                call(&["RL.INFLIGHT", "M"]),
            ],
            vec![
                "[1, 200, 104, 0, \"new\"]",
                "!ERR lease key holds a score that is not a deadline in ms",
                "!ERR lease key holds a score that is not a deadline in ms",
            ],
            " 5000000000000",
        ),
        (
            "only a refusal reads the earliest live deadline",
            vec![
                seed(
                    "L",
                    &[
                        ("4000000000000.5", "bad"),
                        ("5000000000000", "t1"),
                        ("5000000000001", "t2"),
                    ],
                    None,
                ),
                a(&["LIMIT", "3", "TTL", "10"]),
                a(&["LIMIT", "4", "TTL", "10", "ID", "n1"]),
            ],
            vec![
                "!ERR lease key holds a score that is not a deadline in ms",
                "[1, 4, 4, 0, \"n1\"]",
            ],
            " 5000000000001",
        ),
    ];
    let servers = servers();
    for (name, scenario, replies, expiry) in &cases {
        let library = run(
            Backend::Functions,
            &mut servers[1].1.client(),
            scenario,
            KEYS,
        );
        let replies: Vec<String> = replies.iter().map(|r| r.to_string()).collect();
        assert_eq!(library.replies, replies, "{name}");
        assert!(
            library.state[0].ends_with(expiry),
            "{name}: {}",
            library.state[0]
        );
    }
    let scenarios: Vec<(String, Vec<Step>)> = cases
        .into_iter()
        .map(|(name, scenario, ..)| (name.to_string(), scenario))
        .collect();
    compare(&servers, &scenarios, KEYS);
}

/// A random scenario: seeded leases (some expired, some at the edge, a
/// rare bad score), then calls with ids from a small pool.
fn random_scenario(rng: &mut Rng) -> Vec<Step> {
    let mut steps = Vec::new();
    let ids = ["a", "b", "c", "d"];
    for key in KEYS {
        if rng.pct(70) {
            let n = 1 + rng.below(4);
            let mut leases = Vec::new();
            for _ in 0..n {
                let score = if rng.pct(3) {
                    rng.pick(&["1.5", "-1", "inf"]).to_string()
                } else {
                    rng.pick(&["now-100", "now-1", "now", "now+1", "now+50", "now+5000"])
                        .to_string()
                };
                leases.push((score, rng.pick(&ids).to_string()));
            }
            let pxat = if rng.pct(80) {
                Some(rng.pick(&[1, 50, 5000, 100_000]))
            } else {
                None
            };
            steps.push(Step::Seed {
                key: key.to_string(),
                leases,
                pxat,
            });
        }
    }
    if rng.pct(30) {
        let max = rng.pick(&["0", "1", "2", "x"]);
        let ttl = rng.pick(&["1", "300", "0"]);
        steps.push(call(&["HSET", "{meta}", "max", max, "ttl", ttl]));
    }
    for _ in 0..1 + rng.below(10) {
        let key = rng.pick(KEYS);
        let id = rng.pick(&ids);
        let ttl = rng.pick(&["1", "20", "50", "3000", "0", "9007199254740992"]);
        let step = match rng.below(100) {
            0..=39 => {
                let mut w = vec!["RL.ACQUIRE", key];
                if rng.pct(85) {
                    w.extend(["LIMIT", rng.pick(&["1", "2", "3", "0"])]);
                }
                let renews = rng.pct(50);
                if renews || rng.pct(90) {
                    // A renewal may shorten its lease, even the latest one.
                    let ttl = match renews {
                        true => rng.pick(&["9000", "20", "1", "0", "9007199254740992"]),
                        false => ttl,
                    };
                    w.extend(["TTL", ttl]);
                }
                if renews {
                    w.extend(["ID", id]);
                }
                if rng.pct(10) {
                    w.extend(["META", "{meta}"]);
                }
                call(&w)
            }
            40..=59 => call(&["RL.RELEASE", key, id]),
            60..=79 => call(&["RL.EXTEND", key, id, "TTL", ttl]),
            _ => call(&["RL.INFLIGHT", key]),
        };
        steps.push(step);
    }
    steps
}

#[test]
fn random_lease_scenarios_answer_and_store_alike() {
    let seed = common::seed("functions_lease_parity");
    let mut rng = Rng::new(seed);
    let scenarios: Vec<(String, Vec<Step>)> = (0..1000)
        .map(|i| {
            (
                format!("random #{i} (RL_SEED={seed})"),
                random_scenario(&mut rng),
            )
        })
        .collect();
    compare(&servers(), &scenarios, KEYS);
}

/// Generated ids are unique for a key even when every earlier one is gone
/// within the same frozen ms, on both backends.
#[test]
fn generated_ids_never_repeat_for_a_key_within_one_ms() {
    for (backend, server) in servers() {
        let mut con = server.client();
        let mut cmds = Vec::new();
        for _ in 0..50 {
            cmds.push(backend.call(&["RL.ACQUIRE", "L", "LIMIT", "1", "TTL", "60000"]));
            cmds.push(vec!["DEL".to_string(), "L".to_string()]);
        }
        let replies = exec(&mut con, &cmds);
        let mut ids: Vec<String> = replies
            .iter()
            .step_by(2)
            .map(|r| match r {
                Value::Array(items) if items.len() == 5 => text_of(&items[4]),
                other => panic!("{backend:?}: {other:?}"),
            })
            .collect();
        assert!(
            ids.iter().all(|id| is_generated_id(id)),
            "{backend:?}: {ids:?}"
        );
        let prefixes: Vec<&str> = ids.iter().map(|id| id.split('-').next().unwrap()).collect();
        assert!(
            prefixes.windows(2).all(|w| w[0] == w[1]),
            "{backend:?}: one frozen ms: {prefixes:?}"
        );
        ids.sort();
        ids.dedup();
        assert_eq!(ids.len(), 50, "{backend:?}: an id was handed out twice");
    }
}

/// The RESP3 map (module) and `FORMAT map` (library), acquired and refused.
#[test]
fn acquire_maps_match_for_resp3() {
    let servers = servers();
    let mut module = servers[0].1.client();
    let mut library = servers[1].1.client();
    let _: Value = redis::cmd("HELLO").arg(3).query(&mut module).unwrap();
    let _: Value = redis::cmd("HELLO").arg(3).query(&mut library).unwrap();
    let calls = [
        vec!["RL.ACQUIRE", "L", "LIMIT", "1", "TTL", "60000", "ID", "a"],
        vec!["RL.ACQUIRE", "L", "LIMIT", "1", "TTL", "60000", "ID", "b"],
    ];
    let sorted = |v: &Value| -> Vec<(String, String)> {
        match v {
            Value::Map(m) => {
                let mut out: Vec<(String, String)> =
                    m.iter().map(|(k, v)| (show(k), show(v))).collect();
                out.sort();
                out
            }
            other => panic!("not a map: {other:?}"),
        }
    };
    let module_replies = exec(
        &mut module,
        &calls
            .iter()
            .map(|c| Backend::Module.call(c))
            .collect::<Vec<_>>(),
    );
    let library_calls: Vec<Vec<String>> = calls
        .iter()
        .map(|c| {
            let mut words = Backend::Functions.call(c);
            words.extend(["FORMAT".to_string(), "map".to_string()]);
            words
        })
        .collect();
    let library_replies = exec(&mut library, &library_calls);
    for (m, l) in module_replies.iter().zip(&library_replies) {
        assert_eq!(sorted(l), sorted(m));
    }
    let refused = sorted(&library_replies[1]);
    assert!(
        refused.contains(&("+lease_id".to_string(), "nil".to_string())),
        "{refused:?}"
    );
    assert!(error_text(&library_replies[0]).is_none());
}

/// One server with the module and the library: a ceiling driven by both
/// holds, and either releases the other's lease.
#[test]
fn switching_backends_on_one_key_keeps_one_ceiling() {
    let server = Backend::Module.start();
    let mut con = server.client();
    common::backend::load_library(&mut con);
    let both = [Backend::Module, Backend::Functions];
    let mut held = Vec::new();
    for (i, backend) in both.iter().cycle().take(6).enumerate() {
        let r = backend.raw(&mut con, &["RL.ACQUIRE", "L", "LIMIT", "3", "TTL", "60000"]);
        let Value::Array(items) = &r else {
            panic!("{backend:?}: {r:?}")
        };
        let acquired = items[0] == Value::Int(1);
        assert_eq!(acquired, i < 3, "call {i} by {backend:?}: {r:?}");
        if acquired {
            held.push(text_of(&items[4]));
        }
        let in_flight = both
            .iter()
            .map(|b| b.raw(&mut con, &["RL.INFLIGHT", "L"]))
            .collect::<Vec<_>>();
        assert_eq!(in_flight[0], in_flight[1]);
    }
    for (i, id) in held.iter().enumerate() {
        // Released by the backend that did not acquire it.
        let backend = both[(i + 1) % 2];
        let r = backend.raw(&mut con, &["RL.RELEASE", "L", id]);
        assert_eq!(r, Value::Int(1), "{backend:?} releasing {id}");
    }
    assert_eq!(cmd_raw(&mut con, &["EXISTS", "L"]), Value::Int(0));
}

/// Out of memory, a holder can still beat and release (RL.EXTEND and
/// RL.RELEASE lack `deny-oom`; rl_extend and rl_release are `allow-oom`),
/// while a new lease is refused, on both backends.
#[test]
fn out_of_memory_a_holder_still_extends_and_releases() {
    for (backend, server) in servers() {
        let mut con = server.client();
        let r = backend.raw(
            &mut con,
            &["RL.ACQUIRE", "L", "LIMIT", "2", "TTL", "60000", "ID", "a"],
        );
        assert!(error_text(&r).is_none(), "{backend:?}: {r:?}");
        for (name, value) in [("maxmemory-policy", "noeviction"), ("maxmemory", "1")] {
            let r = cmd_raw(&mut con, &["CONFIG", "SET", name, value]);
            assert_eq!(r, Value::Okay, "{backend:?}");
        }
        let r = backend.raw(&mut con, &["RL.ACQUIRE", "L", "LIMIT", "2", "TTL", "60000"]);
        let err = error_text(&r).unwrap_or_default();
        assert!(err.starts_with("OOM "), "{backend:?}: {r:?}");
        let r = backend.raw(&mut con, &["RL.EXTEND", "L", "a", "TTL", "30000"]);
        assert_eq!(r, Value::Int(1), "{backend:?}");
        let r = backend.raw(&mut con, &["RL.INFLIGHT", "L"]);
        assert_eq!(r, Value::Int(1), "{backend:?}");
        let r = backend.raw(&mut con, &["RL.RELEASE", "L", "a"]);
        assert_eq!(r, Value::Int(1), "{backend:?}");
        let r = cmd_raw(&mut con, &["CONFIG", "SET", "maxmemory", "0"]);
        assert_eq!(r, Value::Okay, "{backend:?}");
    }
}
