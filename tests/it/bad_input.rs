//! Malformed calls get a clear error, change nothing, and never take the
//! server down. Every malformed call, and every call on a bad stored value,
//! gets the module's exact error text from both backends, and changes
//! nothing on either (every key's DUMP and PEXPIRETIME before and after).

use crate::common;

use crate::common::backend::{Backend, BOTH};
use crate::common::{assert_refused_naming, dump, error_text, pexpiretime, show, split, Server};
use redis::{Commands, Connection};

const KEYS: &[&str] = &[
    "c",
    "m",
    "badmax",
    "negmax",
    "baddur",
    "zerodur",
    "hugedur",
    "badalgo",
    "badburst",
    "zeroburst",
    "text",
    "list",
    "sliding",
    "new",
    "a",
    "b",
    "t",
    "badshadow",
    "negshadow",
    "wordshadow",
    "badpenalty",
    "zeropenalty",
    "escalatealone",
    "escalatebelow",
    "badescalate",
    "corrupt",
    "alignedtoken",
    "badalign",
    "badcalendar",
    "badtz",
    "calendarwindowalign",
];

/// The same keys on each server.
fn fixtures(con: &mut Connection) {
    let setup: &[&[&str]] = &[
        &["SET", "c", "2", "PX", "60000"],
        &["HSET", "m", "max", "3", "duration", "60000"],
        &["HSET", "badmax", "max", "many", "duration", "1000"],
        &["HSET", "negmax", "max", "-1", "duration", "1000"],
        &["HSET", "baddur", "max", "3", "duration", "1.5"],
        &["HSET", "zerodur", "max", "3", "duration", "0"],
        &[
            "HSET",
            "hugedur",
            "max",
            "3",
            "duration",
            "9223372036854775807",
        ],
        &[
            "HSET",
            "badalgo",
            "max",
            "3",
            "duration",
            "1000",
            "algorithm",
            "magic",
        ],
        &[
            "HSET",
            "badburst",
            "max",
            "3",
            "duration",
            "1000",
            "algorithm",
            "token",
            "burst",
            "lots",
        ],
        &[
            "HSET",
            "zeroburst",
            "max",
            "3",
            "duration",
            "1000",
            "algorithm",
            "gcra",
            "burst",
            "0",
        ],
        &["SET", "text", "hello"],
        &["RPUSH", "list", "x"],
        &["SET", "sliding", "sliding:0:1:0"],
        &[
            "HSET",
            "badshadow",
            "max",
            "3",
            "duration",
            "1000",
            "shadow",
            "2",
        ],
        &[
            "HSET",
            "negshadow",
            "max",
            "3",
            "duration",
            "1000",
            "shadow",
            "-1",
        ],
        &[
            "HSET",
            "wordshadow",
            "max",
            "3",
            "duration",
            "1000",
            "shadow",
            "yes",
        ],
        &[
            "HSET",
            "badpenalty",
            "max",
            "3",
            "duration",
            "1000",
            "penalty",
            "soon",
        ],
        &[
            "HSET",
            "zeropenalty",
            "max",
            "3",
            "duration",
            "1000",
            "penalty",
            "0",
        ],
        &[
            "HSET",
            "escalatealone",
            "max",
            "3",
            "duration",
            "1000",
            "escalate",
            "5000",
        ],
        &[
            "HSET",
            "escalatebelow",
            "max",
            "3",
            "duration",
            "1000",
            "penalty",
            "5000",
            "escalate",
            "4999",
        ],
        &[
            "HSET",
            "badescalate",
            "max",
            "3",
            "duration",
            "1000",
            "penalty",
            "5000",
            "escalate",
            "-1",
        ],
        &["SET", "corrupt", "penalty:1:x:", "PX", "60000"],
        &[
            "HSET",
            "alignedtoken",
            "max",
            "3",
            "duration",
            "1000",
            "algorithm",
            "token",
            "align",
            "1",
        ],
        &[
            "HSET", "badalign", "max", "3", "duration", "1000", "align", "yes",
        ],
        &["HSET", "badcalendar", "max", "3", "calendar", "hour"],
        &[
            "HSET",
            "badtz",
            "max",
            "3",
            "calendar",
            "day",
            "tz",
            "europe/berlin",
        ],
        &[
            "HSET",
            "calendarwindowalign",
            "max",
            "3",
            "duration",
            "10",
            "calendar",
            "day",
            "align",
            "1",
        ],
    ];
    for cmd in setup {
        let r = common::cmd_raw(con, cmd);
        assert!(error_text(&r).is_none(), "{cmd:?}: {r:?}");
    }
}

fn state(con: &mut Connection) -> Vec<(Option<Vec<u8>>, i64)> {
    KEYS.iter()
        .map(|k| (dump(con, k), pexpiretime(con, k)))
        .collect()
}

/// Calls in the module's syntax that every backend must refuse.
fn cases() -> Vec<Vec<&'static str>> {
    let lim = |algo: &'static str| vec!["ALGO", algo, "LIMIT", "5", "WINDOW", "10000"];
    let cat = |parts: Vec<Vec<&'static str>>| parts.concat();
    let p = "POLICY";
    let mut v: Vec<Vec<&str>> = vec![
        vec!["RL.ADMIT"],
        vec!["RL.TTL"],
        vec!["RL.LIMIT"],
        vec!["RL.LIMIT", "m", "extra"],
        vec!["RL.ADMIT", "c", "LIMIT"],
        vec!["RL.ADMIT", "c", "LIMIT", "abc", "WINDOW", "10"],
        vec!["RL.ADMIT", "c", "LIMIT", "-1", "WINDOW", "10"],
        vec!["RL.ADMIT", "c", "LIMIT", "1.5", "WINDOW", "10"],
        vec![
            "RL.ADMIT",
            "c",
            "LIMIT",
            "99999999999999999999",
            "WINDOW",
            "10",
        ],
        vec!["RL.ADMIT", "c", "LIMIT", " 5", "WINDOW", "10"],
        vec!["RL.ADMIT", "c", "LIMIT", "+5", "WINDOW", "10"],
        vec!["RL.ADMIT", "c", "LIMIT", "0x5", "WINDOW", "10"],
        vec!["RL.ADMIT", "c", "LIMIT", "5e2", "WINDOW", "10"],
        vec!["RL.ADMIT", "c", "LIMIT", "5", "WINDOW", "0"],
        vec!["RL.ADMIT", "c", "LIMIT", "5", "WINDOW", "-10"],
        vec!["RL.ADMIT", "c", "LIMIT", "5", "WINDOW", "ten"],
        vec![
            "RL.ADMIT",
            "c",
            "LIMIT",
            "5",
            "WINDOW",
            "9223372036854775807",
        ],
        vec!["RL.ADMIT", "c", "LIMIT", "5", "WINDOW", "10", "COST", "-1"],
        vec!["RL.ADMIT", "c", "LIMIT", "5", "WINDOW", "10", "COST", "x"],
        vec!["RL.ADMIT", "c", "LIMIT", "5", "WINDOW", "10", "COST"],
        vec!["RL.ADMIT", "c", "LIMIT", "5", "LIMIT", "6", "WINDOW", "10"],
        vec![
            "RL.ADMIT", "c", "LIMIT", "5", "WINDOW", "10", "window", "20",
        ],
        vec!["RL.ADMIT", "c", "META", "m", "META", "m"],
        vec!["RL.ADMIT", "c", "LIMIT", "5", "WINDOW", "10", "BOGUS", "1"],
        vec!["RL.ADMIT", "c", "LIMIT", "5", "WINDOW", "10", "extra"],
        vec!["RL.ADMIT", "new", "LIMIT", "5"],
        vec!["RL.ADMIT", "c", "META", "badmax"],
        vec!["RL.ADMIT", "c", "META", "negmax"],
        vec!["RL.ADMIT", "c", "META", "baddur"],
        vec!["RL.ADMIT", "c", "META", "zerodur"],
        vec!["RL.ADMIT", "c", "META", "hugedur"],
        vec!["RL.ADMIT", "c", "META", "text"],
        vec!["RL.ADMIT", "text", "LIMIT", "5", "WINDOW", "10"],
        vec!["RL.ADMIT", "list", "LIMIT", "5", "WINDOW", "10"],
        vec!["RL.ADMIT", "m", "LIMIT", "5", "WINDOW", "10"],
        vec!["RL.TTL", "c", "COST", "1"],
        vec![
            "RL.ADMIT", "c", "ALGO", "magic", "LIMIT", "5", "WINDOW", "10",
        ],
        vec![
            "RL.ADMIT", "c", "ALGO", "token", "ALGO", "gcra", "LIMIT", "5", "WINDOW", "10",
        ],
        vec!["RL.ADMIT", "c", "LIMIT", "5", "WINDOW", "10", "BURST", "3"],
        vec![
            "RL.ADMIT", "c", "ALGO", "sliding", "LIMIT", "5", "WINDOW", "10", "BURST", "3",
        ],
        vec![
            "RL.ADMIT", "new", "ALGO", "token", "LIMIT", "5", "WINDOW", "10", "BURST", "-1",
        ],
        vec![
            "RL.ADMIT", "new", "ALGO", "gcra", "LIMIT", "5", "WINDOW", "10", "BURST", "0",
        ],
        vec![
            "RL.ADMIT",
            "new",
            "ALGO",
            "token",
            "LIMIT",
            "1",
            "WINDOW",
            "4611686018427387903",
            "BURST",
            "9223372036854775807",
        ],
        vec![
            "RL.ADMIT", "c", "ALGO", "gcra", "LIMIT", "5", "WINDOW", "10",
        ],
        vec![
            "RL.ADMIT", "sliding", "ALGO", "token", "LIMIT", "5", "WINDOW", "10",
        ],
        vec!["RL.ADMIT", "c", "META", "badalgo"],
        vec!["RL.ADMIT", "new", "META", "badburst"],
        vec!["RL.ADMIT", "new", "META", "zeroburst"],
        vec![
            "RL.ADMIT", "new", "ALGO", "token", "LIMIT", "3", "WINDOW", "9", "BURST", "0",
        ],
        vec![
            "RL.ADMIT", "new", "ALGO", "leaky", "LIMIT", "3", "WINDOW", "9", "BURST", "-1",
        ],
        vec!["RL.REFUND", "c", "LIMIT", "5", "WINDOW", "10", "COST", "-2"],
        vec!["RL.REFUND", "list", "LIMIT", "5", "WINDOW", "10"],
        vec!["RL.REFUND", "text", "LIMIT", "5", "WINDOW", "10"],
        vec!["RL.RESET"],
        vec!["RL.RESET", "list"],
        vec!["RL.RESET", "m"],
        vec!["RL.THROTTLE", "t", "1", "1"],
        vec!["RL.THROTTLE", "t", "-1", "1", "1"],
        vec!["RL.THROTTLE", "t", "1", "0", "1"],
        vec!["RL.THROTTLE", "t", "1", "1", "0"],
        vec!["RL.THROTTLE", "t", "1", "1", "1", "-1"],
        vec!["RL.THROTTLE", "t", "1", "1", "1", "1", "1"],
        vec!["RL.THROTTLE", "t", "x", "1", "1"],
        vec!["RL.THROTTLE", "t", "9223372036854775807", "1", "1"],
        vec!["RL.THROTTLE", "t", "1", "1", "9223372036854775807"],
        vec!["RL.THROTTLE", "text", "1", "1", "1"],
        vec!["RL.THROTTLE", "list", "1", "1", "1"],
        vec!["RL.THROTTLE", "sliding", "1", "1", "1"],
        vec!["RL.TTL", "c", "LIMIT", "-3"],
        vec!["RL.TTL", "c", "META", "badmax"],
        vec!["RL.TTL", "list", "LIMIT", "3"],
        vec!["RL.TTL", "text", "LIMIT", "3", "WINDOW", "10"],
        vec!["RL.LIMIT", "badmax"],
        vec!["RL.LIMIT", "list"],
        vec!["RL.ADMITALL", "0", "a", "POLICY"],
        vec!["RL.ADMITALL", "2", "a", "a", "POLICY", "POLICY"],
        vec!["RL.ADMITALL", "2", "a", "b", "POLICY"],
        vec!["RL.ADMITALL", "1", "a", "LIMIT", "3", "POLICY"],
        vec!["RL.ADMITALL", "1", "a", "POLICY", "LIMIT", "x"],
        vec!["RL.ADMITALL", "1", "a", "POLICY", "LIMIT", "3"],
        vec![
            "RL.ADMITALL",
            "1",
            "list",
            "POLICY",
            "LIMIT",
            "3",
            "WINDOW",
            "10",
        ],
        cat(vec![
            vec!["RL.ADMITALL", "2", "a", "a", p],
            lim("token"),
            vec![p],
            lim("token"),
        ]),
        cat(vec![vec!["RL.ADMITALL", "2", "a", "b", p], lim("token")]),
        cat(vec![
            vec!["RL.ADMITALL", "1", "a", "LIMIT", "5", p],
            lim("token"),
        ]),
        vec!["RL.ADMITALL", "2", "a", "b", "BOGUS", "1", p, "LIMIT", "1"],
        cat(vec![
            vec!["RL.ADMITALL", "1", "a", p],
            lim("token"),
            vec!["BOGUS", "1"],
        ]),
        cat(vec![
            vec!["RL.ADMITALL", "1", "a", p],
            lim("sliding"),
            vec!["BURST", "2"],
        ]),
        cat(vec![
            vec!["RL.ADMITALL", "1", "a", "COST", "1", "COST", "2", p],
            lim("token"),
        ]),
        cat(vec![
            vec!["RL.ADMITALL", "2", "a", "list", p],
            lim("token"),
            vec![p],
            lim("token"),
        ]),
        cat(vec![
            vec!["RL.ADMITALL", "3", "a", "b", "sliding", p],
            lim("token"),
            vec![p],
            lim("gcra"),
            vec![p],
            lim("gcra"),
        ]),
        cat(vec![
            vec!["RL.ADMITALL", "2", "a", "b", p],
            lim("token"),
            vec![p, "META", "list"],
        ]),
        cat(vec![
            vec!["RL.ADMITALL", "2", "a", "b", p],
            lim("token"),
            vec![p, "META", "badmax"],
        ]),
        cat(vec![vec!["RL.ADMITALL", "1", "m", p], lim("gcra")]),
    ];
    // More than 256 arguments.
    let mut long = vec!["RL.ADMIT", "c", "LIMIT", "5", "WINDOW", "10"];
    long.extend(std::iter::repeat_n("COST", 260));
    v.push(long);
    v
}

/// Calls in the module's syntax with what the module's error must mention
/// (a call is its words, split at spaces); the library's is the same.
const NAMED: &[(&str, &str)] = &[
    ("RL.ADMIT", "wrong number of arguments"),
    ("RL.TTL", "wrong number of arguments"),
    ("RL.LIMIT", "wrong number of arguments"),
    ("RL.LIMIT m extra", "wrong number of arguments"),
    ("RL.ADMIT c LIMIT", "LIMIT"),
    ("RL.ADMIT c LIMIT abc WINDOW 10", "LIMIT"),
    ("RL.ADMIT c LIMIT -1 WINDOW 10", "LIMIT"),
    ("RL.ADMIT c LIMIT 1.5 WINDOW 10", "LIMIT"),
    ("RL.ADMIT c LIMIT 99999999999999999999 WINDOW 10", "LIMIT"),
    ("RL.ADMIT c LIMIT 5 WINDOW 0", "WINDOW"),
    ("RL.ADMIT c LIMIT 5 WINDOW -10", "WINDOW"),
    ("RL.ADMIT c LIMIT 5 WINDOW ten", "WINDOW"),
    ("RL.ADMIT c LIMIT 5 WINDOW 9223372036854775807", "WINDOW"),
    ("RL.ADMIT c LIMIT 5 WINDOW 10 COST -1", "COST"),
    ("RL.ADMIT c LIMIT 5 WINDOW 10 COST x", "COST"),
    ("RL.ADMIT c LIMIT 5 WINDOW 10 COST", "COST"),
    ("RL.ADMIT c LIMIT 5 LIMIT 6 WINDOW 10", "LIMIT"),
    ("RL.ADMIT c LIMIT 5 WINDOW 10 window 20", "WINDOW"),
    ("RL.ADMIT c META m META m", "META"),
    ("RL.ADMIT c LIMIT 5 WINDOW 10 BOGUS 1", "unknown option"),
    ("RL.ADMIT c LIMIT 5 WINDOW 10 extra", "unknown option"),
    ("RL.ADMIT new LIMIT 5", "window"),
    ("RL.ADMIT c META badmax", "'max'"),
    ("RL.ADMIT c META negmax", "'max'"),
    ("RL.ADMIT c META baddur", "'duration'"),
    ("RL.ADMIT c META zerodur", "'duration'"),
    ("RL.ADMIT c META hugedur", "duration"),
    ("RL.ADMIT c META text", "WRONGTYPE"),
    ("RL.ADMIT text LIMIT 5 WINDOW 10", "integer"),
    ("RL.ADMIT list LIMIT 5 WINDOW 10", "WRONGTYPE"),
    ("RL.TTL c COST 1", "unknown option"),
    ("RL.ADMIT c ALGO magic LIMIT 5 WINDOW 10", "ALGO"),
    ("RL.ADMIT c ALGO token ALGO gcra LIMIT 5 WINDOW 10", "ALGO"),
    ("RL.ADMIT c LIMIT 5 WINDOW 10 BURST 3", "BURST"),
    ("RL.ADMIT c ALGO sliding LIMIT 5 WINDOW 10 BURST 3", "BURST"),
    (
        "RL.ADMIT new ALGO token LIMIT 5 WINDOW 10 BURST -1",
        "BURST",
    ),
    ("RL.ADMIT new ALGO gcra LIMIT 5 WINDOW 10 BURST 0", "BURST"),
    (
        "RL.ADMIT new ALGO token LIMIT 1 WINDOW 4611686018427387903 BURST 9223372036854775807",
        "too large",
    ),
    ("RL.ADMIT c ALGO gcra LIMIT 5 WINDOW 10", "gcra state"),
    ("RL.ADMIT c META badalgo", "'algorithm'"),
    ("RL.ADMIT new META badburst", "'burst'"),
    // A bucket holds at least one request: a 0 from META names the field.
    (
        "RL.ADMIT new META zeroburst",
        "META hash field 'burst' must be an integer from 1 (0 for ALGO leaky)",
    ),
    (
        "RL.ADMIT new ALGO token LIMIT 3 WINDOW 9 BURST 0",
        "BURST must be an integer from 1 (0 for ALGO leaky)",
    ),
    (
        "RL.ADMIT new ALGO leaky LIMIT 3 WINDOW 9 BURST -1",
        "BURST must be an integer from 1 (0 for ALGO leaky)",
    ),
    ("RL.REFUND c LIMIT 5 WINDOW 10 COST -2", "COST"),
    ("RL.REFUND list LIMIT 5 WINDOW 10", "WRONGTYPE"),
    ("RL.RESET", "wrong number of arguments"),
    ("RL.RESET list", "WRONGTYPE"),
    ("RL.THROTTLE t 1 1", "wrong number of arguments"),
    ("RL.THROTTLE t -1 1 1", "max_burst"),
    ("RL.THROTTLE t 1 0 1", "count_per_period"),
    ("RL.THROTTLE t 1 1 0", "period"),
    ("RL.THROTTLE t 1 1 1 -1", "quantity"),
    ("RL.THROTTLE t x 1 1", "max_burst"),
    ("RL.THROTTLE t 9223372036854775807 1 1", "too large"),
    ("RL.THROTTLE text 1 1 1", "gcra state"),
    ("RL.THROTTLE list 1 1 1", "WRONGTYPE"),
    ("RL.ADMITALL 0 a POLICY", "numkeys"),
    ("RL.ADMITALL 5 a b POLICY", "numkeys"),
    ("RL.ADMITALL x a POLICY", "numkeys"),
    // numkeys too large for the keys, but not for the arguments: the
    // options are taken for keys, and the error still says numkeys.
    ("RL.ADMITALL 5 a POLICY LIMIT 1 WINDOW 1", "numkeys"),
    ("RL.ADMITALL 2 a a POLICY POLICY", "distinct"),
    ("RL.ADMITALL 2 a b POLICY", "one POLICY per key"),
    ("RL.ADMITALL 1 a LIMIT 3 POLICY", "POLICY"),
    ("RL.ADMITALL 1 a POLICY LIMIT x", "LIMIT"),
    ("RL.ADMITALL 1 a POLICY LIMIT 3", "window"),
    ("RL.ADMITALL 1 list POLICY LIMIT 3 WINDOW 10", "WRONGTYPE"),
    ("RL.TTL c LIMIT -3", "LIMIT"),
    ("RL.TTL c META badmax", "'max'"),
    ("RL.TTL list LIMIT 3", "WRONGTYPE"),
    ("RL.LIMIT badmax", "'max'"),
    ("RL.LIMIT list", "WRONGTYPE"),
    // SHADOW (issue 27): a flag, once; its META field 0 or 1.
    (
        "RL.ADMIT c LIMIT 5 WINDOW 10 SHADOW SHADOW",
        "SHADOW is given more than once",
    ),
    (
        "RL.ADMIT c LIMIT 5 WINDOW 10 shadow 1",
        "unknown option '1'",
    ),
    ("RL.ADMIT c SHADOW LIMIT 5 WINDOW 10 SHADOW", "SHADOW"),
    ("RL.ADMIT c SHADOW META m SHADOW", "SHADOW"),
    (
        "RL.ADMIT c META badshadow",
        "META hash field 'shadow' must be 0 or 1",
    ),
    (
        "RL.ADMIT c META negshadow",
        "META hash field 'shadow' must be 0 or 1",
    ),
    (
        "RL.ADMIT c META wordshadow",
        "META hash field 'shadow' must be 0 or 1",
    ),
    ("RL.REFUND c META badshadow", "'shadow'"),
    ("RL.TTL c META badshadow", "'shadow'"),
    ("RL.TTL c SHADOW LIMIT 5 SHADOW", "SHADOW"),
    ("RL.ADMITALL 1 a SHADOW POLICY LIMIT 5 WINDOW 10", "POLICY"),
    (
        "RL.ADMITALL 1 a POLICY SHADOW LIMIT 5 WINDOW 10 SHADOW",
        "SHADOW",
    ),
    ("RL.ADMITALL 1 a POLICY META badshadow", "'shadow'"),
    // PENALTY (issue 27): a positive integer of ms, whose end fits the clock.
    (
        "RL.ADMIT c LIMIT 5 WINDOW 10 PENALTY",
        "PENALTY needs a value",
    ),
    (
        "RL.ADMIT c LIMIT 5 WINDOW 10 PENALTY 0",
        "PENALTY must be an integer from 1",
    ),
    (
        "RL.ADMIT c LIMIT 5 WINDOW 10 PENALTY -100",
        "PENALTY must be an integer from 1",
    ),
    (
        "RL.ADMIT c LIMIT 5 WINDOW 10 PENALTY 1.5",
        "PENALTY must be an integer from 1",
    ),
    (
        "RL.ADMIT c LIMIT 5 WINDOW 10 PENALTY soon",
        "PENALTY must be an integer from 1",
    ),
    (
        "RL.ADMIT c LIMIT 5 WINDOW 10 PENALTY 5 penalty 6",
        "PENALTY is given more than once",
    ),
    (
        "RL.ADMIT c LIMIT 5 WINDOW 10 PENALTY 9223372036854775807",
        "PENALTY is too large: the penalty end overflows",
    ),
    (
        "RL.ADMIT c META badpenalty",
        "META hash field 'penalty' must be an integer from 1",
    ),
    (
        "RL.ADMIT c META zeropenalty",
        "META hash field 'penalty' must be an integer from 1",
    ),
    ("RL.TTL c LIMIT 5 PENALTY 0", "PENALTY"),
    (
        "RL.TTL c LIMIT 5 WINDOW 10 PENALTY 9223372036854775807",
        "penalty end overflows",
    ),
    ("RL.REFUND c LIMIT 5 WINDOW 10 PENALTY -1", "PENALTY"),
    (
        "RL.ADMITALL 1 a POLICY LIMIT 5 WINDOW 10 PENALTY x",
        "PENALTY",
    ),
    (
        "RL.ADMITALL 1 a PENALTY 5 POLICY LIMIT 5 WINDOW 10",
        "POLICY",
    ),
    ("RL.ADMIT corrupt LIMIT 5 WINDOW 10", "corrupt penalty"),
    (
        "RL.ADMIT corrupt LIMIT 5 WINDOW 10 PENALTY 100",
        "corrupt penalty",
    ),
    ("RL.TTL corrupt LIMIT 5 WINDOW 10", "corrupt penalty"),
    (
        "RL.ADMITALL 1 corrupt POLICY LIMIT 5 WINDOW 10",
        "corrupt penalty",
    ),
    // ESCALATE (issue 27): a positive integer of ms, only with PENALTY, at
    // least its ms, whose ladder fits the clock.
    (
        "RL.ADMIT c LIMIT 5 WINDOW 10 ESCALATE 5000",
        "ERR ESCALATE applies only with PENALTY",
    ),
    (
        "RL.ADMIT c LIMIT 5 WINDOW 10 PENALTY 100 ESCALATE 99",
        "ERR ESCALATE must be at least the penalty's ms",
    ),
    (
        "RL.ADMIT c LIMIT 5 WINDOW 10 PENALTY 100 ESCALATE",
        "ESCALATE needs a value",
    ),
    (
        "RL.ADMIT c LIMIT 5 WINDOW 10 PENALTY 100 ESCALATE -100",
        "ESCALATE must be an integer from 1",
    ),
    (
        "RL.ADMIT c LIMIT 5 WINDOW 10 PENALTY 100 ESCALATE 0",
        "ESCALATE must be an integer from 1",
    ),
    (
        "RL.ADMIT c LIMIT 5 WINDOW 10 PENALTY 100 ESCALATE later",
        "ESCALATE must be an integer from 1",
    ),
    (
        "RL.ADMIT c LIMIT 5 WINDOW 10 PENALTY 100 ESCALATE 200 escalate 300",
        "ESCALATE is given more than once",
    ),
    (
        "RL.ADMIT c LIMIT 5 WINDOW 10 PENALTY 100 ESCALATE 4611686018427387903",
        "ERR ESCALATE is too large: the penalty end overflows",
    ),
    (
        "RL.ADMIT c META escalatealone",
        "ERR META field 'escalate' applies only with PENALTY",
    ),
    (
        "RL.ADMIT c META escalatebelow",
        "ERR META field 'escalate' must be at least the penalty's ms",
    ),
    (
        "RL.ADMIT c META badescalate",
        "META hash field 'escalate' must be an integer from 1",
    ),
    (
        "RL.ADMIT c META m ESCALATE 5000",
        "ERR ESCALATE applies only with PENALTY",
    ),
    ("RL.TTL c LIMIT 5 WINDOW 10 ESCALATE 5", "ESCALATE applies only with PENALTY"),
    ("RL.REFUND c LIMIT 5 WINDOW 10 PENALTY 9 ESCALATE 8", "at least the penalty's ms"),
    (
        "RL.ADMITALL 1 a POLICY LIMIT 5 WINDOW 10 PENALTY 9 ESCALATE x",
        "ESCALATE must be an integer from 1",
    ),
    (
        "RL.ADMITALL 2 a b POLICY LIMIT 5 WINDOW 10 POLICY LIMIT 5 WINDOW 10 ESCALATE 9",
        "ESCALATE applies only with PENALTY",
    ),
    // ALIGN (issue 27): a flag, once, for the windows only.
    ("RL.ADMIT c LIMIT 5 WINDOW 10 ALIGN ALIGN", "ALIGN is given more than once"),
    ("RL.ADMIT c LIMIT 5 WINDOW 10 ALIGN 1", "unknown option '1'"),
    (
        "RL.ADMIT new ALGO token LIMIT 5 WINDOW 10 ALIGN",
        "ERR ALIGN applies only to the windows (ALGO fixed or sliding), not to ALGO token",
    ),
    ("RL.ADMIT new ALGO gcra LIMIT 5 WINDOW 10 ALIGN", "applies only to the windows"),
    ("RL.ADMIT new ALGO leaky LIMIT 5 WINDOW 10 ALIGN", "applies only to the windows"),
    (
        "RL.ADMIT new META alignedtoken",
        "ERR META field 'align' applies only to the windows (ALGO fixed or sliding), not to ALGO token",
    ),
    ("RL.ADMIT c META badalign", "META hash field 'align' must be 0 or 1"),
    ("RL.TTL new ALGO token LIMIT 5 WINDOW 10 ALIGN", "applies only to the windows"),
    ("RL.REFUND c LIMIT 5 WINDOW 10 ALIGN ALIGN", "ALIGN"),
    ("RL.ADMITALL 1 a POLICY ALGO gcra LIMIT 5 WINDOW 10 ALIGN", "applies only to the windows"),
    ("RL.ADMITALL 1 a ALIGN POLICY LIMIT 5 WINDOW 10", "POLICY"),
    // CALENDAR and TZ (issue 27): a period, a fixed offset, and what
    // excludes them.
    ("RL.ADMIT new LIMIT 5 CALENDAR", "CALENDAR needs a value"),
    ("RL.ADMIT new LIMIT 5 CALENDAR hour", "CALENDAR must be one of day, week, month, year"),
    ("RL.ADMIT new LIMIT 5 CALENDAR -1", "CALENDAR must be one of"),
    ("RL.ADMIT new LIMIT 5 CALENDAR day calendar week", "CALENDAR is given more than once"),
    (
        "RL.ADMIT new LIMIT 5 CALENDAR day WINDOW 10",
        "ERR WINDOW and CALENDAR exclude each other: a calendar period is the window",
    ),
    (
        "RL.ADMIT new LIMIT 5 CALENDAR day ALIGN",
        "ERR ALIGN and CALENDAR exclude each other: calendar periods are aligned",
    ),
    (
        "RL.ADMIT new ALGO token LIMIT 5 CALENDAR day",
        "ERR CALENDAR applies only to the windows (ALGO fixed or sliding), not to ALGO token",
    ),
    ("RL.ADMIT new LIMIT 5 CALENDAR day TZ", "TZ needs a value"),
    (
        "RL.ADMIT new LIMIT 5 CALENDAR day TZ Mars/Olympus",
        "ERR TZ must be a fixed offset from UTC such as +05:30 or -08:00, or an IANA zone name such as Europe/Berlin",
    ),
    // Zone names are exact, as IANA spells them.
    ("RL.ADMIT new LIMIT 5 CALENDAR day TZ europe/berlin", "TZ must be a fixed offset"),
    ("RL.ADMIT new LIMIT 5 CALENDAR day TZ Europe/Berlin/", "TZ must be a fixed offset"),
    ("RL.ADMIT new ALGO sliding LIMIT 5 CALENDAR day TZ Europe", "TZ must be a fixed offset"),
    // Left out of the table: its listed changes are not its rule's.
    ("RL.TTL new LIMIT 5 CALENDAR day TZ America/Havana", "TZ must be a fixed offset"),
    ("RL.ADMIT new LIMIT 5 CALENDAR day TZ Europe/Berlin TZ UTC", "TZ is given more than once"),
    ("RL.ADMIT new LIMIT 5 WINDOW 10 TZ Europe/Berlin", "ERR TZ applies only with CALENDAR"),
    ("RL.ADMIT new LIMIT 5 CALENDAR day TZ +5:30", "TZ must be a fixed offset"),
    ("RL.ADMIT new LIMIT 5 CALENDAR day TZ +24:00", "TZ must be a fixed offset"),
    ("RL.ADMIT new LIMIT 5 CALENDAR day TZ -01:60", "TZ must be a fixed offset"),
    ("RL.ADMIT new LIMIT 5 CALENDAR day TZ +01:00 TZ +02:00", "TZ is given more than once"),
    ("RL.ADMIT new LIMIT 5 WINDOW 10 TZ +01:00", "ERR TZ applies only with CALENDAR"),
    ("RL.ADMIT new META badcalendar", "META hash field 'calendar' must be one of"),
    (
        "RL.ADMIT new META badtz",
        "ERR META hash field 'tz' must be a fixed offset from UTC such as +05:30 or -08:00, or an IANA zone name such as Europe/Berlin",
    ),
    ("RL.ADMIT new META calendarwindowalign", "and CALENDAR exclude each other: calendar periods"),
    ("RL.TTL new LIMIT 5 CALENDAR fortnight", "CALENDAR"),
    ("RL.ADMITALL 1 a POLICY LIMIT 5 CALENDAR day WINDOW 10", "exclude each other"),
];

/// A number with a leading space is not a number (its words hold a space).
const LEADING_SPACE: (&[&str], &str) = (&["RL.ADMIT", "c", "LIMIT", " 5", "WINDOW", "10"], "LIMIT");

/// An empty TZ is no zone.
const EMPTY_TZ: (&[&str], &str) = (
    &["RL.ADMIT", "c", "LIMIT", "5", "CALENDAR", "day", "TZ", ""],
    "ERR TZ must be a fixed offset",
);

/// Calls of `NAMED` whose numkeys FCALL itself cannot use: the server
/// refuses them before the library runs, with its own text
/// (`fcall_refuses_a_numkeys_it_cannot_use_before_the_library_runs`).
const FCALL_REFUSES_FIRST: &[&str] = &["RL.ADMITALL 5 a b POLICY", "RL.ADMITALL x a POLICY"];

/// `NAMED` and `LEADING_SPACE`, as words.
fn named_cases() -> Vec<(Vec<&'static str>, &'static str)> {
    let mut cases: Vec<(Vec<&str>, &str)> = NAMED
        .iter()
        .map(|(call, mention)| (split(call), *mention))
        .collect();
    cases.push((LEADING_SPACE.0.to_vec(), LEADING_SPACE.1));
    cases.push((EMPTY_TZ.0.to_vec(), EMPTY_TZ.1));
    cases
}

/// A call as one line, its middle cut when it is long.
fn brief<S: AsRef<str>>(words: &[S]) -> String {
    let words: Vec<&str> = words.iter().map(AsRef::as_ref).collect();
    if words.len() <= 24 {
        return words.join(" ");
    }
    format!(
        "{} ... ({} words) ... {}",
        words[..10].join(" "),
        words.len(),
        words[words.len() - 2..].join(" ")
    )
}

#[test]
fn every_malformed_call_gets_the_modules_error_and_changes_nothing() {
    let named = named_cases();
    let calls: Vec<Vec<&str>> = cases()
        .into_iter()
        .chain(named.iter().map(|(call, _)| call.clone()))
        .collect();
    let servers: Vec<(Backend, Server)> = BOTH.iter().map(|&b| (b, b.start())).collect();
    let mut answers: Vec<Vec<String>> = Vec::new();
    for (backend, server) in &servers {
        let mut con = server.client();
        fixtures(&mut con);
        let before = state(&mut con);
        let mut errors = Vec::new();
        for call in &calls {
            let reply = backend.raw(&mut con, call);
            errors.push(match error_text(&reply) {
                Some(e) => e,
                None => format!("(not an error) {}", show(&reply)),
            });
        }
        assert_eq!(
            state(&mut con),
            before,
            "{backend:?}: an error changed a key"
        );
        let pong: String = redis::cmd("PING").query(&mut con).unwrap();
        assert_eq!(pong, "PONG");
        answers.push(errors);
    }
    for (call, module) in calls.iter().zip(&answers[0]) {
        assert!(
            module.starts_with("ERR ") || module.starts_with("WRONGTYPE "),
            "the module answered {call:?} with {module:?}"
        );
    }
    let module_named = &answers[0][calls.len() - named.len()..];
    for ((call, mention), module) in named.iter().zip(module_named) {
        assert!(
            module.contains(mention),
            "{call:?} gave {module:?}, expected it to mention {mention:?}"
        );
    }
    let mut differences = Vec::new();
    for (i, call) in calls.iter().enumerate() {
        for (b, (backend, _)) in servers.iter().enumerate().skip(1) {
            let fcall_first = FCALL_REFUSES_FIRST.contains(&call.join(" ").as_str());
            if answers[b][i] != answers[0][i] && !fcall_first {
                differences.push(format!(
                    "  call    {}\n  fcall   {}\n  module  {}\n  {backend:?} {}",
                    brief(call),
                    brief(&backend.call(call)),
                    answers[0][i],
                    answers[b][i]
                ));
            }
        }
    }
    assert!(
        differences.is_empty(),
        "{} of {} calls answered differently:\n{}",
        differences.len(),
        calls.len(),
        differences.join("\n\n")
    );
}

/// The module counts each error it replies in INFO (`ratelimit_errors`);
/// the server's own arity errors are not its. Module only: the library has
/// no INFO section.
#[test]
fn module_only_info_counts_every_error_it_replies() {
    let server = Server::start();
    let mut con = server.client();
    fixtures(&mut con);
    let cases = named_cases();
    for (call, mention) in &cases {
        assert_refused_naming(&mut con, call, mention);
    }
    let errors = common::info_field(&mut con, "ratelimit", "ratelimit_errors").unwrap();
    let module_errors = cases
        .iter()
        .filter(|(_, m)| !m.contains("wrong number"))
        .count();
    assert_eq!(
        errors.parse::<usize>().unwrap(),
        module_errors,
        "errors counted"
    );
}

/// The module's numkeys is FCALL's own in the library's form: a count that
/// is not a number, or more than the words given, is refused by the server
/// before the library runs, with FCALL's text, and changes nothing.
#[test]
fn fcall_refuses_a_numkeys_it_cannot_use_before_the_library_runs() {
    let server = Backend::Functions.start();
    let mut con = server.client();
    fixtures(&mut con);
    let before = state(&mut con);
    let cases: &[(&str, &str)] = &[
        (FCALL_REFUSES_FIRST[1], "ERR Bad number of keys provided"),
        (
            FCALL_REFUSES_FIRST[0],
            "ERR Number of keys can't be greater than number of args",
        ),
    ];
    for (call, want) in cases {
        let reply = Backend::Functions.raw(&mut con, &split(call));
        assert_eq!(error_text(&reply).as_deref(), Some(*want), "{call:?}");
    }
    assert_eq!(state(&mut con), before);
}

#[test]
fn binary_and_oversized_arguments_are_survived() {
    for backend in BOTH {
        let server = backend.start();
        let mut con = server.client();
        // `RL.ADMIT k`, or `FCALL rl_admit 1 k`, then any bytes.
        let admit_k = |words: &[&[u8]]| {
            let head = backend.call(&["RL.ADMIT", "k"]);
            let mut cmd = redis::cmd(&head[0]);
            for w in &head[1..] {
                cmd.arg(w);
            }
            for w in words {
                cmd.arg(*w);
            }
            cmd
        };
        let nasty: Vec<Vec<u8>> = vec![
            b"\x00\xff\r\n".to_vec(),
            vec![b'9'; 10_000],
            "LIMITé".as_bytes().to_vec(),
            b"-0".to_vec(),
            b"+5".to_vec(),
        ];
        for arg in &nasty {
            for position in 0..4 {
                let mut words: Vec<&[u8]> = vec![b"LIMIT", b"5", b"WINDOW", b"100"];
                words[position] = arg;
                let reply = admit_k(&words).query::<redis::Value>(&mut con);
                assert!(
                    reply.is_err(),
                    "{backend:?}: {arg:?} at {position} was accepted"
                );
            }
        }
        let many: Vec<String> = (0..200).map(|i| i.to_string()).collect();
        let many: Vec<&[u8]> = many.iter().map(|w| w.as_bytes()).collect();
        let err = admit_k(&many).query::<redis::Value>(&mut con);
        assert!(err.is_err(), "{backend:?}");
        let pong: String = redis::cmd("PING").query(&mut con).unwrap();
        assert_eq!(pong, "PONG");
        assert!(!con.exists::<_, bool>("k").unwrap(), "{backend:?}");
    }
}

// Leases (issue 19): the lease contract's exact texts, from both backends.

/// The lease keys of the bad-input table: sets of leases (one expired, which
/// any write would reclaim), sets holding a score that is no deadline, keys
/// of other types and META hashes.
const LEASE_KEYS: &[&str] = &[
    "L", "frac", "neg", "inf", "big", "text", "list", "lm", "lnottl", "lbadmax", "lbadttl",
    "lfracttl", "lhugettl", "lhugemax", "fresh",
];

fn lease_fixtures(con: &mut Connection) {
    let now = common::server_time_ms(con);
    let (a, b) = ((now + 600_000).to_string(), (now + 700_000).to_string());
    let setup: Vec<Vec<&str>> = vec![
        vec!["ZADD", "L", "1000", "old", &a, "a", &b, "b"],
        vec!["PEXPIREAT", "L", &b],
        vec!["ZADD", "frac", "5", "x", "1.5", "y", &a, "z"],
        vec!["ZADD", "neg", "5", "x", "-1", "y"],
        vec!["ZADD", "inf", "5", "x", "inf", "y"],
        vec!["ZADD", "big", "5", "x", "9007199254740994", "y"],
        vec!["SET", "text", "hello"],
        vec!["RPUSH", "list", "x"],
        vec!["HSET", "lm", "max", "2", "ttl", "60000"],
        vec!["HSET", "lnottl", "max", "2"],
        vec!["HSET", "lbadmax", "max", "-1", "ttl", "1000"],
        vec!["HSET", "lbadttl", "max", "2", "ttl", "0"],
        vec!["HSET", "lfracttl", "max", "2", "ttl", "1.5"],
        vec!["HSET", "lhugettl", "max", "2", "ttl", "9223372036854775807"],
        vec!["HSET", "lhugemax", "max", "9007199254740992", "ttl", "1000"],
    ];
    for cmd in &setup {
        let r = common::cmd_raw(con, cmd);
        assert!(error_text(&r).is_none(), "{cmd:?}: {r:?}");
    }
}

fn lease_state(con: &mut Connection) -> Vec<(Option<Vec<u8>>, i64)> {
    common::raw_state(con, LEASE_KEYS)
}

const BAD_DEADLINE: &str = "ERR lease key holds a score that is not a deadline in ms";
const LIMIT_RANGE: &str = "ERR LIMIT must be an integer from 1 to 9223372036854775807";
const TTL_RANGE: &str = "ERR TTL must be an integer from 1 to 9223372036854775807";
const TTL_TOO_LARGE: &str = "ERR TTL is too large: the lease deadline passes 2^53 ms";
const NO_TTL: &str = "ERR a limit is set but no TTL: give TTL or set field 'ttl' in the META hash";
const LEASE_WRONGTYPE: &str = "WRONGTYPE Operation against a key holding the wrong kind of value";

/// Malformed lease calls in the module's syntax, with the contract's exact
/// error text: the same from the module and from the library.
fn lease_cases() -> Vec<(Vec<&'static str>, &'static str)> {
    let arity = |cmd: &'static str| -> &'static str {
        match cmd {
            "RL.ACQUIRE" => "ERR wrong number of arguments for 'RL.ACQUIRE' command",
            "RL.RELEASE" => "ERR wrong number of arguments for 'RL.RELEASE' command",
            "RL.EXTEND" => "ERR wrong number of arguments for 'RL.EXTEND' command",
            _ => "ERR wrong number of arguments for 'RL.INFLIGHT' command",
        }
    };
    let acquire =
        |rest: &[&'static str]| -> Vec<&'static str> { [&["RL.ACQUIRE"][..], rest].concat() };
    vec![
        (vec!["RL.ACQUIRE"], arity("RL.ACQUIRE")),
        (acquire(&["L", "BOGUS", "1"]), "ERR unknown option 'BOGUS'"),
        (
            acquire(&["L", "LIMIT", "2", "TTL", "5", "bogus"]),
            "ERR unknown option 'bogus'",
        ),
        (
            acquire(&["L", "ALGO", "fixed"]),
            "ERR unknown option 'ALGO'",
        ),
        (
            acquire(&["L", "LIMIT", "2", "TTL", "5", "WINDOW", "5"]),
            "ERR unknown option 'WINDOW'",
        ),
        (acquire(&["L", "LIMIT"]), "ERR LIMIT needs a value"),
        (
            acquire(&["L", "LIMIT", "2", "TTL"]),
            "ERR TTL needs a value",
        ),
        (
            acquire(&["L", "LIMIT", "2", "TTL", "5", "ID"]),
            "ERR ID needs a value",
        ),
        (acquire(&["L", "META"]), "ERR META needs a value"),
        (
            acquire(&["L", "TTL", "5", "ttl", "6", "LIMIT", "2"]),
            "ERR TTL is given more than once",
        ),
        (
            acquire(&["L", "limit", "2", "LIMIT", "2", "TTL", "5"]),
            "ERR LIMIT is given more than once",
        ),
        (
            acquire(&["L", "ID", "j", "id", "j", "LIMIT", "2", "TTL", "5"]),
            "ERR ID is given more than once",
        ),
        (
            acquire(&["L", "META", "lm", "META", "lm"]),
            "ERR META is given more than once",
        ),
        (acquire(&["L", "LIMIT", "0", "TTL", "5"]), LIMIT_RANGE),
        (acquire(&["L", "LIMIT", "-1", "TTL", "5"]), LIMIT_RANGE),
        (acquire(&["L", "LIMIT", "two", "TTL", "5"]), LIMIT_RANGE),
        (acquire(&["L", "LIMIT", "1.5", "TTL", "5"]), LIMIT_RANGE),
        (acquire(&["L", "LIMIT", "+2", "TTL", "5"]), LIMIT_RANGE),
        (
            acquire(&["L", "LIMIT", "99999999999999999999", "TTL", "5"]),
            LIMIT_RANGE,
        ),
        (acquire(&["L", "LIMIT", "2", "TTL", "0"]), TTL_RANGE),
        (acquire(&["L", "LIMIT", "2", "TTL", "-5"]), TTL_RANGE),
        (acquire(&["L", "LIMIT", "2", "TTL", "5s"]), TTL_RANGE),
        (acquire(&["L", "TTL", "0"]), TTL_RANGE),
        (
            acquire(&["L", "LIMIT", "2", "TTL", "9223372036854775807"]),
            TTL_TOO_LARGE,
        ),
        (
            acquire(&["L", "LIMIT", "2", "TTL", "9007199254740992"]),
            TTL_TOO_LARGE,
        ),
        (
            acquire(&["L", "LIMIT", "2", "TTL", "5", "ID", ""]),
            "ERR ID must be a non-empty string",
        ),
        (
            acquire(&["L", "ID", ""]),
            "ERR ID must be a non-empty string",
        ),
        (acquire(&["L", "LIMIT", "2"]), NO_TTL),
        (acquire(&["fresh", "LIMIT", "2", "ID", "j"]), NO_TTL),
        (acquire(&["L", "META", "lnottl"]), NO_TTL),
        (
            acquire(&["L", "META", "lbadmax"]),
            "ERR META hash field 'max' must be an integer from 0 to 9223372036854775807",
        ),
        (
            acquire(&["L", "META", "lbadttl"]),
            "ERR META hash field 'ttl' must be an integer from 1 to 9223372036854775807",
        ),
        (
            acquire(&["L", "META", "lfracttl"]),
            "ERR META hash field 'ttl' must be an integer from 1 to 9223372036854775807",
        ),
        (acquire(&["L", "META", "lhugettl"]), TTL_TOO_LARGE),
        (
            acquire(&["L", "META", "text"]),
            "WRONGTYPE META key does not hold a hash",
        ),
        (
            acquire(&["L", "META", "list", "LIMIT", "2", "TTL", "5"]),
            "WRONGTYPE META key does not hold a hash",
        ),
        (
            acquire(&["text", "LIMIT", "2", "TTL", "5"]),
            LEASE_WRONGTYPE,
        ),
        (acquire(&["list", "META", "lm"]), LEASE_WRONGTYPE),
        (acquire(&["lm", "LIMIT", "2", "TTL", "5"]), LEASE_WRONGTYPE),
        (
            acquire(&["frac", "LIMIT", "5", "TTL", "1000"]),
            BAD_DEADLINE,
        ),
        (
            acquire(&["neg", "LIMIT", "5", "TTL", "1000", "ID", "x"]),
            BAD_DEADLINE,
        ),
        (acquire(&["inf", "META", "lm"]), BAD_DEADLINE),
        (acquire(&["big", "LIMIT", "1", "TTL", "1000"]), BAD_DEADLINE),
        (vec!["RL.RELEASE"], arity("RL.RELEASE")),
        (vec!["RL.RELEASE", "L"], arity("RL.RELEASE")),
        (vec!["RL.RELEASE", "L", "a", "b"], arity("RL.RELEASE")),
        (
            vec!["RL.RELEASE", "L", ""],
            "ERR lease-id must be a non-empty string",
        ),
        (vec!["RL.RELEASE", "text", "a"], LEASE_WRONGTYPE),
        (vec!["RL.RELEASE", "frac", "z"], BAD_DEADLINE),
        (vec!["RL.RELEASE", "big", "y"], BAD_DEADLINE),
        (vec!["RL.EXTEND", "L", "a", "TTL"], arity("RL.EXTEND")),
        (
            vec!["RL.EXTEND", "L", "a", "TTL", "5", "TTL"],
            arity("RL.EXTEND"),
        ),
        (
            vec!["RL.EXTEND", "L", "a", "FOR", "5"],
            "ERR unknown option 'FOR'",
        ),
        (
            vec!["RL.EXTEND", "L", "a", "LIMIT", "5"],
            "ERR unknown option 'LIMIT'",
        ),
        (vec!["RL.EXTEND", "L", "a", "TTL", "0"], TTL_RANGE),
        (vec!["RL.EXTEND", "L", "a", "ttl", "x"], TTL_RANGE),
        (
            vec!["RL.EXTEND", "L", "a", "TTL", "9223372036854775807"],
            TTL_TOO_LARGE,
        ),
        (
            vec!["RL.EXTEND", "L", "", "TTL", "5"],
            "ERR lease-id must be a non-empty string",
        ),
        (vec!["RL.EXTEND", "list", "a", "TTL", "5"], LEASE_WRONGTYPE),
        (vec!["RL.EXTEND", "neg", "x", "TTL", "5"], BAD_DEADLINE),
        (vec!["RL.EXTEND", "inf", "x", "TTL", "5"], BAD_DEADLINE),
        (vec!["RL.INFLIGHT"], arity("RL.INFLIGHT")),
        (vec!["RL.INFLIGHT", "L", "x"], arity("RL.INFLIGHT")),
        (vec!["RL.INFLIGHT", "text"], LEASE_WRONGTYPE),
        (vec!["RL.INFLIGHT", "frac"], BAD_DEADLINE),
        (vec!["RL.INFLIGHT", "big"], BAD_DEADLINE),
        (
            [&["RL.ACQUIRE", "L"][..], &["TTL"; 260]].concat(),
            "ERR too many arguments",
        ),
        (
            // RL.RELEASE's arity is -3 (QUEUE ticketkey may follow).
            [&["RL.RELEASE", "L"][..], &["a"; 260]].concat(),
            "ERR too many arguments",
        ),
        (
            [&["RL.EXTEND", "L", "a", "TTL"][..], &["5"; 260]].concat(),
            arity("RL.EXTEND"),
        ),
        (
            [&["RL.INFLIGHT", "L"][..], &["x"; 260]].concat(),
            arity("RL.INFLIGHT"),
        ),
    ]
}

/// Calls only the library refuses, in its own form: what doubles cannot
/// reply exactly, too many keys, a FORMAT it does not know.
fn library_only_lease_cases() -> Vec<(Vec<&'static str>, &'static str)> {
    let beyond = "ERR the policy is beyond the library's exact range (Lua numbers are exact below 2^53, see docs/managed-valkey.md); the module computes it";
    vec![
        (vec!["FCALL", "rl_acquire", "2", "L", "lhugemax"], beyond),
        (
            vec![
                "FCALL",
                "rl_acquire",
                "1",
                "L",
                "LIMIT",
                "9007199254740992",
                "TTL",
                "5",
            ],
            beyond,
        ),
        (
            vec!["FCALL", "rl_acquire", "3", "L", "lm", "x"],
            "ERR rl_acquire takes 1 or 2 keys: the lease key and its META hash",
        ),
        (
            vec![
                "FCALL",
                "rl_acquire",
                "1",
                "L",
                "LIMIT",
                "2",
                "TTL",
                "5",
                "FORMAT",
                "xml",
            ],
            "ERR FORMAT must be one of map, array",
        ),
        (
            vec!["FCALL", "rl_acquire", "1", "L", "META", "lm"],
            "ERR META is passed as a key in the library: FCALL <function> 2 <key> <metakey> ...",
        ),
        (
            vec!["FCALL", "rl_release", "2", "L", "lm", "a"],
            "ERR wrong number of arguments for 'RL.RELEASE' command",
        ),
        (
            vec!["FCALL", "rl_inflight", "0"],
            "ERR wrong number of arguments for 'RL.INFLIGHT' command",
        ),
    ]
}

#[test]
fn every_malformed_lease_call_gets_the_contracts_error_and_changes_nothing() {
    for backend in BOTH {
        let server = backend.start();
        let mut con = server.client();
        lease_fixtures(&mut con);
        let before = lease_state(&mut con);
        let mut wrong = Vec::new();
        let mut calls: Vec<(Vec<String>, &str)> = lease_cases()
            .into_iter()
            .map(|(call, want)| (backend.call(&call), want))
            .collect();
        if backend == Backend::Functions {
            for (call, want) in library_only_lease_cases() {
                calls.push((call.iter().map(|w| w.to_string()).collect(), want));
            }
        }
        for (call, want) in &calls {
            let words: Vec<&str> = call.iter().map(String::as_str).collect();
            let reply = common::cmd_raw(&mut con, &words);
            let got =
                error_text(&reply).unwrap_or_else(|| format!("(not an error) {}", show(&reply)));
            if got != *want {
                wrong.push(format!(
                    "  {}\n    want {want}\n    got  {got}",
                    brief(call)
                ));
            }
        }
        assert!(
            wrong.is_empty(),
            "{backend:?}: {} of {} lease calls answered otherwise:\n{}",
            wrong.len(),
            calls.len(),
            wrong.join("\n")
        );
        assert_eq!(
            lease_state(&mut con),
            before,
            "{backend:?}: a refused lease call changed a key"
        );
        // The expired lease in L is still there: no refused call reclaimed.
        let score = common::cmd_raw(&mut con, &["ZSCORE", "L", "old"]);
        assert_eq!(show(&score), "\"1000\"", "{backend:?}");
    }
}

/// BLOCK's timeout is a non-negative integer given once, RL.REFUND takes
/// none, and a key's queue holds at most `ratelimit.max-waiters`: each gets
/// a clear error and changes nothing. Module only: the library refuses
/// BLOCK itself (below).
#[test]
fn module_only_bad_block_timeouts_and_a_full_queue_get_a_clear_error() {
    use std::io::Write;
    let server = Server::start();
    let mut con = server.client();
    fixtures(&mut con);
    let cases: &[(&str, &str)] = &[
        (
            "RL.ADMIT c LIMIT 1 WINDOW 60000 BLOCK -1",
            "ERR BLOCK must be an integer from 0",
        ),
        (
            "RL.ADMIT c LIMIT 1 WINDOW 60000 BLOCK 1.5",
            "ERR BLOCK must be an integer from 0",
        ),
        (
            "RL.ADMIT c LIMIT 1 WINDOW 60000 BLOCK soon",
            "ERR BLOCK must be an integer from 0",
        ),
        (
            "RL.ADMIT c LIMIT 1 WINDOW 60000 BLOCK",
            "ERR BLOCK needs a value",
        ),
        (
            "RL.ADMIT c BLOCK 10 LIMIT 1 WINDOW 60000 BLOCK 10",
            "ERR BLOCK is given more than once",
        ),
        (
            "RL.ACQUIRE q LIMIT 1 TTL 1000 BLOCK -5",
            "ERR BLOCK must be an integer from 0",
        ),
        (
            "RL.ACQUIRE q LIMIT 1 TTL 1000 BLOCK 1 BLOCK 1",
            "ERR BLOCK is given more than once",
        ),
        (
            "RL.REFUND c LIMIT 1 WINDOW 60000 BLOCK 10",
            "ERR unknown option 'BLOCK'",
        ),
    ];
    let before = state(&mut con);
    for (call, mention) in cases {
        assert_refused_naming(&mut con, &split(call), mention);
    }
    assert_eq!(state(&mut con), before);
    // A full queue: two wait, the third is refused at once.
    let r = common::cmd_raw(&mut con, &["CONFIG", "SET", "ratelimit.max-waiters", "2"]);
    assert_eq!(r, redis::Value::Okay);
    let call = "*8\r\n$8\r\nRL.ADMIT\r\n$4\r\nfull\r\n$5\r\nLIMIT\r\n$1\r\n1\r\n$6\r\nWINDOW\r\n$5\r\n60000\r\n$5\r\nBLOCK\r\n$5\r\n10000\r\n";
    let words = split("RL.ADMIT full LIMIT 1 WINDOW 60000 BLOCK 10000");
    assert_eq!(common::cmd_ints(&mut con, &words)[0], 1);
    let waiters: Vec<std::net::TcpStream> = (1..=2)
        .map(|n| {
            let mut s = std::net::TcpStream::connect(("127.0.0.1", server.port)).unwrap();
            s.write_all(call.as_bytes()).unwrap();
            common::wait_until(std::time::Duration::from_secs(5), "a waiter", || {
                common::info_field(&mut con, "ratelimit", "ratelimit_blocked_clients")
                    == Some(n.to_string())
            });
            s
        })
        .collect();
    let value: Option<String> = con.get("full").unwrap();
    assert_refused_naming(
        &mut con,
        &words,
        "ERR too many callers wait on this key: ratelimit.max-waiters is 2",
    );
    assert_eq!(con.get::<_, Option<String>>("full").unwrap(), value);
    drop(waiters);
    common::wait_until(
        std::time::Duration::from_secs(5),
        "the waiters gone",
        || {
            common::info_field(&mut con, "ratelimit", "ratelimit_blocked_clients")
                == Some("0".into())
        },
    );
}

/// The FUNCTION library cannot block: BLOCK on rl_admit and rl_acquire is
/// refused naming the module, and changes nothing.
#[test]
fn the_library_refuses_block_naming_the_module() {
    let backend = Backend::Functions;
    let server = backend.start();
    let mut con = server.client();
    fixtures(&mut con);
    let before = state(&mut con);
    for call in [
        "RL.ADMIT c LIMIT 1 WINDOW 60000 BLOCK 100",
        "RL.ADMIT c block 0",
        "RL.ACQUIRE q LIMIT 1 TTL 1000 BLOCK 100",
    ] {
        let reply = backend.raw(&mut con, &split(call));
        assert_eq!(
            error_text(&reply).as_deref(),
            Some("ERR BLOCK needs the module: the function library cannot block"),
            "{call}: {}",
            show(&reply)
        );
    }
    let refund = backend.raw(
        &mut con,
        &split("RL.REFUND c LIMIT 1 WINDOW 60000 BLOCK 10"),
    );
    assert_eq!(
        error_text(&refund).as_deref(),
        Some("ERR unknown option 'BLOCK'")
    );
    assert_eq!(state(&mut con), before);
}
