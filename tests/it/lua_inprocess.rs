//! The FUNCTION library in-process: `functions/ratelimit.lua` runs in an
//! embedded Lua 5.1 (mlua, the version Valkey embeds) against a fake
//! `server` over an in-memory keyspace with a settable clock, and every
//! reply, stored value, expiry and write is compared with what `src/algo`
//! decides for the same policy, state, cost and time. No server, no round
//! trip: random policies, states, costs and clocks (the edges near 2^53 ms
//! and the ns clock's end included), over 100,000 cases in seconds.
//!
//! The fake is strict where the library could go wrong unnoticed: the load
//! sees only `server.register_function` (as FUNCTION LOAD does), globals
//! are read-only and an unknown one is an error, numbers handed to
//! `server.call` must be integers (Valkey would print others in exponent
//! form), replies must be integers, and a function flagged `no-writes`
//! may not write. What only a server shows (replication, ACL, cluster,
//! RESP3) stays in the live suites (functions_*.rs, lua_oracle.rs).

use crate::common::{seed, Rng};

use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::rc::Rc;

use mlua::{Function, Lua, MultiValue, Table, Value};
use valkey_ratelimit::algo::lease::{self, Held, WantedId};
use valkey_ratelimit::algo::{
    self, fixed, throttle, Algo, Charge, Decision, Now, Policy, Slot, State, Write,
};
use valkey_ratelimit::args::{self, read_options, AdmitAll, OptSet, Options};
use valkey_ratelimit::error::{RlError, BURST_RANGE, NON_NEGATIVE, POSITIVE};
use valkey_ratelimit::num::parse_i64;

// ------------------------------------------------------------ the fake server

/// A reply as a client would read it.
#[derive(Debug, Clone, PartialEq)]
enum Reply {
    Int(i64),
    Bulk(Vec<u8>),
    Nil,
    Status(String),
    Error(String),
    Array(Vec<Reply>),
    /// A RESP3 map, sorted by key (Lua's order is not the library's promise).
    Map(Vec<(Reply, Reply)>),
    /// Something no server would send as the library's answer (a number
    /// that is not an integer, a Lua runtime error): never expected.
    Bad(String),
}

const WRONGTYPE: &str = "WRONGTYPE Operation against a key holding the wrong kind of value";

#[derive(Debug, Clone, PartialEq)]
enum Val {
    Str(Vec<u8>),
    Hash(BTreeMap<Vec<u8>, Vec<u8>>),
    /// member -> score
    Zset(BTreeMap<Vec<u8>, f64>),
}

#[derive(Debug, Clone, PartialEq)]
struct Entry {
    val: Val,
    /// Absolute expiry (ms); the key exists while now <= at.
    at: Option<i64>,
}

/// The keyspace, the clock and what the current call propagated.
#[derive(Default)]
struct Db {
    keys: BTreeMap<Vec<u8>, Entry>,
    now_us: i64,
    /// Every effective write, as a command line.
    writes: Vec<String>,
    /// The running function is flagged no-writes.
    read_only: bool,
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn int_of(b: &[u8]) -> Option<i64> {
    parse_i64(b)
}

/// A score as Valkey prints one: an integral double as an integer.
fn score_text(f: f64) -> Vec<u8> {
    if f.is_infinite() {
        return if f > 0.0 {
            b"inf".to_vec()
        } else {
            b"-inf".to_vec()
        };
    }
    if f.fract() == 0.0 && f.abs() < 4.6e18 {
        return (f as i64).to_string().into_bytes();
    }
    format!("{f}").into_bytes()
}

/// A score or range bound: (value, exclusive).
fn bound(b: &[u8]) -> Option<(f64, bool)> {
    let (s, excl) = match b.first() {
        Some(b'(') => (&b[1..], true),
        _ => (b, false),
    };
    let s = std::str::from_utf8(s).ok()?;
    let v = match s.to_ascii_lowercase().as_str() {
        "inf" | "+inf" => f64::INFINITY,
        "-inf" => f64::NEG_INFINITY,
        _ => s.parse::<f64>().ok().filter(|v| !v.is_nan())?,
    };
    Some((v, excl))
}

fn above(v: f64, (b, excl): (f64, bool)) -> bool {
    if excl {
        v > b
    } else {
        v >= b
    }
}

fn below(v: f64, (b, excl): (f64, bool)) -> bool {
    if excl {
        v < b
    } else {
        v <= b
    }
}

impl Db {
    fn now_ms(&self) -> i64 {
        self.now_us.div_euclid(1000)
    }

    /// The key, unless it has expired (then it is gone).
    fn live(&mut self, key: &[u8]) -> Option<&mut Entry> {
        let now = self.now_ms();
        if matches!(self.keys.get(key), Some(Entry { at: Some(at), .. }) if now > *at) {
            self.keys.remove(key);
        }
        self.keys.get_mut(key)
    }

    fn wrote(&mut self, args: &[Vec<u8>]) {
        let line: Vec<String> = args.iter().map(|a| text(a)).collect();
        self.writes.push(line.join(" "));
    }

    /// The members of a sorted set in order (score, then member).
    fn zsorted(z: &BTreeMap<Vec<u8>, f64>) -> Vec<(Vec<u8>, f64)> {
        let mut v: Vec<(Vec<u8>, f64)> = z.iter().map(|(m, s)| (m.clone(), *s)).collect();
        v.sort_by(|a, b| a.1.partial_cmp(&b.1).unwrap().then_with(|| a.0.cmp(&b.0)));
        v
    }

    /// The sorted set at `key` (None: no key), or WRONGTYPE.
    fn zset(&mut self, key: &[u8]) -> Result<Option<&mut BTreeMap<Vec<u8>, f64>>, Reply> {
        match self.live(key) {
            None => Ok(None),
            Some(Entry {
                val: Val::Zset(z), ..
            }) => Ok(Some(z)),
            Some(_) => Err(Reply::Error(WRONGTYPE.into())),
        }
    }

    fn command(&mut self, args: Vec<Vec<u8>>) -> Reply {
        let name = text(&args[0]).to_ascii_uppercase();
        const WRITES: &[&str] = &[
            "SET",
            "DEL",
            "PEXPIREAT",
            "PEXPIRE",
            "INCRBY",
            "ZADD",
            "ZREM",
            "ZREMRANGEBYSCORE",
        ];
        if self.read_only && WRITES.contains(&name.as_str()) {
            return Reply::Error(
                "ERR Write commands are not allowed from read-only scripts.".into(),
            );
        }
        let n = args.len();
        let now = self.now_ms();
        match name.as_str() {
            "TIME" => Reply::Array(vec![
                Reply::Bulk(self.now_us.div_euclid(1_000_000).to_string().into_bytes()),
                Reply::Bulk(self.now_us.rem_euclid(1_000_000).to_string().into_bytes()),
            ]),
            "GET" if n == 2 => match self.live(&args[1]) {
                None => Reply::Nil,
                Some(Entry {
                    val: Val::Str(s), ..
                }) => Reply::Bulk(s.clone()),
                Some(_) => Reply::Error(WRONGTYPE.into()),
            },
            "SET" if n >= 3 => {
                let mut at = None;
                let mut keep = false;
                let mut i = 3;
                while i < n {
                    let opt = text(&args[i]).to_ascii_uppercase();
                    let value = args.get(i + 1).and_then(|v| int_of(v));
                    match (opt.as_str(), value) {
                        ("KEEPTTL", _) => {
                            keep = true;
                            i += 1;
                            continue;
                        }
                        (_, Some(v)) if v <= 0 => {
                            return Reply::Error("ERR invalid expire time in 'set' command".into())
                        }
                        ("PXAT", Some(v)) => at = Some(v),
                        ("PX", Some(v)) => at = Some(now + v),
                        ("EX", Some(v)) => at = Some(now + v * 1000),
                        _ => return Reply::Error("ERR syntax error".into()),
                    }
                    i += 2;
                }
                let old = self.live(&args[1]).and_then(|e| e.at);
                self.wrote(&args);
                match at {
                    Some(at) if at <= now => {
                        self.keys.remove(&args[1]);
                    }
                    _ => {
                        let at = if keep { old } else { at };
                        self.keys.insert(
                            args[1].clone(),
                            Entry {
                                val: Val::Str(args[2].clone()),
                                at,
                            },
                        );
                    }
                }
                Reply::Status("OK".into())
            }
            "INCRBY" if n == 3 => {
                let Some(by) = int_of(&args[2]) else {
                    return Reply::Error("ERR value is not an integer or out of range".into());
                };
                let (old, at) = match self.live(&args[1]) {
                    None => (0, None),
                    Some(Entry {
                        val: Val::Str(s),
                        at,
                    }) => match int_of(s) {
                        Some(v) => (v, *at),
                        None => {
                            return Reply::Error(
                                "ERR value is not an integer or out of range".into(),
                            )
                        }
                    },
                    Some(_) => return Reply::Error(WRONGTYPE.into()),
                };
                let Some(new) = old.checked_add(by) else {
                    return Reply::Error("ERR increment or decrement would overflow".into());
                };
                self.wrote(&args);
                self.keys.insert(
                    args[1].clone(),
                    Entry {
                        val: Val::Str(new.to_string().into_bytes()),
                        at,
                    },
                );
                Reply::Int(new)
            }
            "DEL" if n >= 2 => {
                let mut gone = 0;
                for k in &args[1..] {
                    if self.live(k).is_some() {
                        self.keys.remove(k);
                        gone += 1;
                    }
                }
                if gone > 0 {
                    self.wrote(&args);
                }
                Reply::Int(gone)
            }
            "PEXPIREAT" | "PEXPIRE" if n == 3 => {
                let Some(v) = int_of(&args[2]) else {
                    return Reply::Error("ERR value is not an integer or out of range".into());
                };
                let at = if name == "PEXPIRE" { now + v } else { v };
                if self.live(&args[1]).is_none() {
                    return Reply::Int(0);
                }
                self.wrote(&args);
                if at <= now {
                    self.keys.remove(&args[1]);
                } else if let Some(e) = self.live(&args[1]) {
                    e.at = Some(at);
                }
                Reply::Int(1)
            }
            "PEXPIRETIME" | "PTTL" if n == 2 => match self.live(&args[1]) {
                None => Reply::Int(-2),
                Some(Entry { at: None, .. }) => Reply::Int(-1),
                Some(Entry { at: Some(at), .. }) if name == "PTTL" => Reply::Int(*at - now),
                Some(Entry { at: Some(at), .. }) => Reply::Int(*at),
            },
            "TYPE" if n == 2 => Reply::Status(
                match self.live(&args[1]) {
                    None => "none",
                    Some(Entry {
                        val: Val::Str(_), ..
                    }) => "string",
                    Some(Entry {
                        val: Val::Hash(_), ..
                    }) => "hash",
                    Some(Entry {
                        val: Val::Zset(_), ..
                    }) => "zset",
                }
                .into(),
            ),
            "HMGET" if n >= 3 => match self.live(&args[1]) {
                None => Reply::Array(vec![Reply::Nil; n - 2]),
                Some(Entry {
                    val: Val::Hash(h), ..
                }) => Reply::Array(
                    args[2..]
                        .iter()
                        .map(|f| h.get(f).map_or(Reply::Nil, |v| Reply::Bulk(v.clone())))
                        .collect(),
                ),
                Some(_) => Reply::Error(WRONGTYPE.into()),
            },
            "ZCARD" if n == 2 => match self.zset(&args[1]) {
                Err(e) => e,
                Ok(z) => Reply::Int(z.map_or(0, |z| z.len() as i64)),
            },
            "ZSCORE" if n == 3 => match self.zset(&args[1]) {
                Err(e) => e,
                Ok(z) => z
                    .and_then(|z| z.get(&args[2]))
                    .map_or(Reply::Nil, |s| Reply::Bulk(score_text(*s))),
            },
            "ZADD" if n >= 4 && n.is_multiple_of(2) => {
                let mut pairs = Vec::new();
                for p in args[2..].chunks(2) {
                    match bound(&p[0]) {
                        Some((s, false)) => pairs.push((s, p[1].clone())),
                        _ => return Reply::Error("ERR value is not a valid float".into()),
                    }
                }
                let z = match self.zset(&args[1]) {
                    Err(e) => return e,
                    Ok(Some(z)) => z,
                    Ok(None) => {
                        self.keys.insert(
                            args[1].clone(),
                            Entry {
                                val: Val::Zset(BTreeMap::new()),
                                at: None,
                            },
                        );
                        match self.keys.get_mut(&args[1]) {
                            Some(Entry {
                                val: Val::Zset(z), ..
                            }) => z,
                            _ => unreachable!(),
                        }
                    }
                };
                let (mut added, mut changed) = (0, false);
                for (s, m) in pairs {
                    match z.insert(m, s) {
                        None => {
                            added += 1;
                            changed = true;
                        }
                        Some(old) => changed |= old != s,
                    }
                }
                if changed {
                    self.wrote(&args);
                }
                Reply::Int(added)
            }
            "ZREM" if n >= 3 => {
                let removed = match self.zset(&args[1]) {
                    Err(e) => return e,
                    Ok(None) => 0,
                    Ok(Some(z)) => {
                        args[2..].iter().filter(|m| z.remove(*m).is_some()).count() as i64
                    }
                };
                self.drop_empty_zset(&args[1]);
                if removed > 0 {
                    self.wrote(&args);
                }
                Reply::Int(removed)
            }
            "ZCOUNT" | "ZREMRANGEBYSCORE" if n == 4 => {
                let (Some(lo), Some(hi)) = (bound(&args[2]), bound(&args[3])) else {
                    return Reply::Error("ERR min or max is not a float".into());
                };
                let gone = match self.zset(&args[1]) {
                    Err(e) => return e,
                    Ok(None) => 0,
                    Ok(Some(z)) => {
                        let hit: Vec<Vec<u8>> = z
                            .iter()
                            .filter(|(_, s)| above(**s, lo) && below(**s, hi))
                            .map(|(m, _)| m.clone())
                            .collect();
                        if name == "ZREMRANGEBYSCORE" {
                            for m in &hit {
                                z.remove(m);
                            }
                        }
                        hit.len() as i64
                    }
                };
                if name == "ZREMRANGEBYSCORE" {
                    self.drop_empty_zset(&args[1]);
                    if gone > 0 {
                        self.wrote(&args);
                    }
                }
                Reply::Int(gone)
            }
            "ZRANGE" | "ZRANGEBYSCORE" if n >= 4 => self.zrange(&name, &args),
            _ => panic!(
                "the fake server has no {}: add it to tests/it/lua_inprocess.rs",
                args.iter().map(|a| text(a)).collect::<Vec<_>>().join(" ")
            ),
        }
    }

    fn drop_empty_zset(&mut self, key: &[u8]) {
        if matches!(self.keys.get(key), Some(Entry { val: Val::Zset(z), .. }) if z.is_empty()) {
            self.keys.remove(key);
        }
    }

    /// ZRANGE key start stop [BYSCORE] [REV] [LIMIT offset count] [WITHSCORES],
    /// and ZRANGEBYSCORE key min max [WITHSCORES] [LIMIT offset count].
    fn zrange(&mut self, name: &str, args: &[Vec<u8>]) -> Reply {
        let (mut by_score, mut rev, mut scores, mut limit) =
            (name == "ZRANGEBYSCORE", false, false, None);
        let mut i = 4;
        while i < args.len() {
            match text(&args[i]).to_ascii_uppercase().as_str() {
                "BYSCORE" => by_score = true,
                "REV" => rev = true,
                "WITHSCORES" => scores = true,
                "LIMIT" if i + 2 < args.len() => {
                    let (Some(o), Some(c)) = (int_of(&args[i + 1]), int_of(&args[i + 2])) else {
                        return Reply::Error("ERR value is not an integer or out of range".into());
                    };
                    limit = Some((o, c));
                    i += 2;
                }
                _ => return Reply::Error("ERR syntax error".into()),
            }
            i += 1;
        }
        let all = match self.zset(&args[1]) {
            Err(e) => return e,
            Ok(None) => Vec::new(),
            Ok(Some(z)) => Db::zsorted(z),
        };
        let mut picked: Vec<(Vec<u8>, f64)> = if by_score {
            let (a, b) = if rev {
                (&args[3], &args[2])
            } else {
                (&args[2], &args[3])
            };
            let (Some(lo), Some(hi)) = (bound(a), bound(b)) else {
                return Reply::Error("ERR min or max is not a float".into());
            };
            let mut v: Vec<_> = all
                .into_iter()
                .filter(|(_, s)| above(*s, lo) && below(*s, hi))
                .collect();
            if rev {
                v.reverse();
            }
            v
        } else {
            let (Some(start), Some(stop)) = (int_of(&args[2]), int_of(&args[3])) else {
                return Reply::Error("ERR value is not an integer or out of range".into());
            };
            let mut all = all;
            if rev {
                all.reverse();
            }
            let len = all.len() as i64;
            let start = if start < 0 {
                (len + start).max(0)
            } else {
                start
            };
            let stop = if stop < 0 {
                len + stop
            } else {
                stop.min(len - 1)
            };
            if start > stop || start >= len {
                Vec::new()
            } else {
                all[start as usize..=stop as usize].to_vec()
            }
        };
        if let Some((o, c)) = limit {
            let o = o.max(0) as usize;
            picked = picked
                .into_iter()
                .skip(o)
                .take(if c < 0 { usize::MAX } else { c as usize })
                .collect();
        }
        let mut out = Vec::new();
        for (m, s) in picked {
            out.push(Reply::Bulk(m));
            if scores {
                out.push(Reply::Bulk(score_text(s)));
            }
        }
        Reply::Array(out)
    }
}

// ------------------------------------------------------------ the Lua host

/// The library loaded into a Lua 5.1 state the way FUNCTION LOAD loads it.
struct Host {
    lua: Lua,
    db: Rc<RefCell<Db>>,
    /// name -> (callback, flagged no-writes)
    functions: Rc<RefCell<HashMap<String, (Function, bool)>>>,
    invoke: Function,
    /// Lua instructions the current call has run, in 100,000s.
    budget: Rc<std::cell::Cell<u32>>,
}

/// Server and Lua glue written in Lua: `server.call` raises what
/// `server.pcall` returns as an error table; `error_reply` shapes its text
/// as Valkey does ("-CODE msg", a bare message gets ERR).
const GLUE: &str = r#"
local impl, api_run, strict = ...
local server = {}
server.pcall = function(...) local _, v = impl(...) return v end
server.call = function(...)
  local ok, v = impl(...)
  if not ok then error(v, 0) end
  return v
end
server.error_reply = function(msg)
  if type(msg) ~= 'string' then error('wrong number or type of arguments', 0) end
  if string.sub(msg, 1, 1) == '-' then msg = string.sub(msg, 2) end
  local space = string.find(msg, ' ', 1, true)
  if not space then return {err = 'ERR ' .. msg} end
  return {err = msg}
end
server.status_reply = function(msg) return {ok = msg} end
server.log = function() end
server.LOG_DEBUG, server.LOG_VERBOSE, server.LOG_NOTICE, server.LOG_WARNING = 0, 1, 2, 3
for _, name in ipairs({'string', 'math', 'table', 'type', 'tonumber', 'tostring', 'pcall',
    'xpcall', 'error', 'setmetatable', 'getmetatable', 'unpack', 'pairs', 'ipairs', 'next',
    'select', 'rawget', 'rawset', 'rawequal', 'assert', '_VERSION'}) do
  api_run[name] = _G[name]
end
api_run.server, api_run.redis = server, server
setmetatable(api_run, strict)
local invoke = function(f, keys, args)
  local ok, r = pcall(f, keys, args)
  return ok, r
end
return invoke
"#;

impl Host {
    fn load(db: Rc<RefCell<Db>>) -> Host {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("functions/ratelimit.lua");
        let source = std::fs::read_to_string(&path).expect("read functions/ratelimit.lua");
        let first = source.lines().next().unwrap_or("");
        assert!(
            first.starts_with("#!lua name=ratelimit"),
            "the library's first line: {first}"
        );
        // FUNCTION LOAD takes the body after the shebang line; keep the
        // line numbers.
        let body = format!("\n{}", &source[first.len()..].trim_start_matches('\n'));
        let lua = Lua::new();
        // A busy script is a failure, not a hang: at most about 20 million
        // Lua instructions per call (the library runs a few thousand).
        let budget = Rc::new(std::cell::Cell::new(0u32));
        let spent = budget.clone();
        let hook = lua.set_hook(
            mlua::HookTriggers::new().every_nth_instruction(100_000),
            move |_, _| {
                spent.set(spent.get() + 1);
                match spent.get() > 200 {
                    true => Err(mlua::Error::RuntimeError(
                        "busy: the call ran over 20 million Lua instructions".into(),
                    )),
                    false => Ok(mlua::VmState::Continue),
                }
            },
        );
        hook.expect("set the busy-script hook");
        let functions: Rc<RefCell<HashMap<String, (Function, bool)>>> = Rc::default();
        let fns = functions.clone();
        let register = lua
            .create_function(move |_, args: MultiValue| {
                let spec = match args.into_iter().next() {
                    Some(Value::Table(t)) => t,
                    _ => {
                        return Err(mlua::Error::RuntimeError(
                            "register_function takes a table here".into(),
                        ))
                    }
                };
                let name: String = spec.get("function_name")?;
                let callback: Function = spec.get("callback")?;
                let flags: Option<Table> = spec.get("flags")?;
                let mut no_writes = false;
                if let Some(flags) = flags {
                    for flag in flags.sequence_values::<String>() {
                        let flag = flag?;
                        assert!(
                            [
                                "no-writes",
                                "allow-oom",
                                "allow-stale",
                                "no-cluster",
                                "allow-cross-slot-keys"
                            ]
                            .contains(&flag.as_str()),
                            "unknown flag {flag}"
                        );
                        no_writes |= flag == "no-writes";
                    }
                }
                fns.borrow_mut().insert(name, (callback, no_writes));
                Ok(())
            })
            .unwrap();
        let d = db.clone();
        let imp = lua
            .create_function(move |lua, args: MultiValue| {
                let mut words = Vec::new();
                for a in args {
                    words.push(match a {
                        Value::String(s) => s.as_bytes().to_vec(),
                        Value::Integer(i) => i.to_string().into_bytes(),
                        Value::Number(f) => {
                            // Valkey prints an integral double as an integer,
                            // any other in the shortest exponent form, which
                            // no command of the library's takes.
                            assert!(
                                f.fract() == 0.0 && f.abs() <= 4.611686018427388e18,
                                "server.call got the number {f}: pass an integer or a string"
                            );
                            (f as i64).to_string().into_bytes()
                        }
                        other => panic!("server.call got {other:?}: Valkey refuses it"),
                    });
                }
                assert!(!words.is_empty(), "server.call without a command");
                let reply = d.borrow_mut().command(words);
                let ok = !matches!(reply, Reply::Error(_));
                Ok((ok, to_lua(lua, &reply)?))
            })
            .unwrap();
        // Globals: read-only, and an unknown name is an error, at load as
        // when running (Valkey's protected global table).
        let strict = lua
            .load(
                "return {__index = function(_, k) error(\"Script attempted to access nonexistent global variable '\" .. tostring(k) .. \"'\", 2) end,
                         __newindex = function(_, k) error(\"Attempt to modify a readonly table: \" .. tostring(k), 2) end}",
            )
            .eval::<Table>()
            .unwrap();
        let load_server = lua.create_table().unwrap();
        load_server.set("register_function", register).unwrap();
        load_server
            .set(
                "log",
                lua.create_function(|_, _: MultiValue| Ok(())).unwrap(),
            )
            .unwrap();
        let api_load = lua.create_table().unwrap();
        api_load.set("server", load_server.clone()).unwrap();
        api_load.set("redis", load_server).unwrap();
        api_load.set_metatable(Some(strict.clone())).unwrap();
        let api_run = lua.create_table().unwrap();
        let invoke: Function = lua
            .load(GLUE)
            .call((imp, api_run.clone(), strict.clone()))
            .unwrap();
        let env = lua.create_table().unwrap();
        let env_meta = lua.create_table().unwrap();
        env_meta.set("__index", api_load).unwrap();
        env_meta
            .set("__newindex", strict.get::<Function>("__newindex").unwrap())
            .unwrap();
        env.set_metatable(Some(env_meta.clone())).unwrap();
        lua.load(body)
            .set_name("@user_function")
            .set_environment(env)
            .exec()
            .unwrap_or_else(|e| panic!("FUNCTION LOAD of functions/ratelimit.lua: {e}"));
        env_meta.set("__index", api_run).unwrap();
        Host {
            lua,
            db,
            functions,
            invoke,
            budget,
        }
    }

    /// FCALL name numkeys keys... args...: the reply, and what it propagated.
    fn call(&self, name: &str, keys: &[Vec<u8>], args: &[Vec<u8>]) -> (Reply, Vec<String>) {
        let (f, no_writes) = self
            .functions
            .borrow()
            .get(name)
            .cloned()
            .unwrap_or_else(|| panic!("the library registers no {name}"));
        {
            let mut db = self.db.borrow_mut();
            db.writes.clear();
            db.read_only = no_writes;
        }
        self.budget.set(0);
        let table = |items: &[Vec<u8>]| {
            let t = self.lua.create_table().unwrap();
            for (i, item) in items.iter().enumerate() {
                t.raw_set(i + 1, self.lua.create_string(item).unwrap())
                    .unwrap();
            }
            t
        };
        let (ok, result): (bool, Value) = self
            .invoke
            .call((f, table(keys), table(args)))
            .unwrap_or_else(|e| {
                (
                    false,
                    Value::String(self.lua.create_string(e.to_string()).unwrap()),
                )
            });
        let reply = match (ok, &result) {
            (true, v) => from_lua(v),
            (false, Value::Table(t)) => match t.raw_get::<Value>("err").unwrap() {
                Value::String(s) => Reply::Error(text(&s.as_bytes())),
                other => Reply::Bad(format!("error value {other:?}")),
            },
            (false, v) => Reply::Bad(format!("Lua error: {v:?}")),
        };
        let writes = std::mem::take(&mut self.db.borrow_mut().writes);
        (reply, writes)
    }
}

/// A server reply as Lua sees it from `server.call`.
fn to_lua(lua: &Lua, r: &Reply) -> mlua::Result<Value> {
    Ok(match r {
        Reply::Int(n) => Value::Number(*n as f64),
        Reply::Bulk(b) => Value::String(lua.create_string(b)?),
        Reply::Nil => Value::Boolean(false),
        Reply::Status(s) => {
            let t = lua.create_table()?;
            t.set("ok", s.as_str())?;
            Value::Table(t)
        }
        Reply::Error(s) => {
            let t = lua.create_table()?;
            t.set("err", s.as_str())?;
            Value::Table(t)
        }
        Reply::Array(items) => {
            let t = lua.create_table()?;
            for (i, item) in items.iter().enumerate() {
                t.raw_set(i + 1, to_lua(lua, item)?)?;
            }
            Value::Table(t)
        }
        Reply::Map(_) | Reply::Bad(_) => unreachable!("the fake server sends neither"),
    })
}

/// A function's return value as Valkey replies it (luaReplyToRedisReply).
fn from_lua(v: &Value) -> Reply {
    match v {
        Value::String(s) => Reply::Bulk(s.as_bytes().to_vec()),
        Value::Boolean(true) => Reply::Int(1),
        Value::Boolean(false) | Value::Nil => Reply::Nil,
        Value::Integer(i) => Reply::Int(*i),
        Value::Number(f) if f.fract() == 0.0 && f.abs() < 9.2e18 => Reply::Int(*f as i64),
        Value::Number(f) => Reply::Bad(format!("the number {f}, which the server would truncate")),
        Value::Table(t) => {
            if let Ok(Value::String(e)) = t.raw_get::<Value>("err") {
                return Reply::Error(text(&e.as_bytes()));
            }
            if let Ok(Value::String(s)) = t.raw_get::<Value>("ok") {
                return Reply::Status(text(&s.as_bytes()));
            }
            if let Ok(Value::Table(m)) = t.raw_get::<Value>("map") {
                let mut pairs: Vec<(Reply, Reply)> = m
                    .pairs::<Value, Value>()
                    .map(|kv| {
                        let (k, v) = kv.unwrap();
                        (from_lua(&k), from_lua(&v))
                    })
                    .collect();
                pairs.sort_by_key(|(k, _)| format!("{k:?}"));
                return Reply::Map(pairs);
            }
            let mut items = Vec::new();
            for i in 1.. {
                match t.raw_get::<Value>(i).unwrap() {
                    Value::Nil => break,
                    item => items.push(from_lua(&item)),
                }
            }
            Reply::Array(items)
        }
        other => Reply::Bad(format!("{other:?}")),
    }
}

// ------------------------------------------------------------ the model

/// The largest integer a double holds exactly: the library's range.
const EXACT: i128 = (1 << 53) - 1;
const BEYOND_DOUBLES: &str = "ERR the policy is beyond the library's exact range (Lua numbers are exact below 2^53, see docs/managed-valkey.md); the module computes it";
const STATE_BEYOND_DOUBLES: &str = "ERR limiter key holds counts beyond the library's exact range (Lua numbers are exact below 2^53); the module computes it";

/// What a call may answer: exactly one reply, or (beyond the library's
/// exact range) any of a few errors.
#[derive(Debug)]
enum Expect {
    Reply(Reply),
    /// One of these error texts, or the reply when there is one: the
    /// library may refuse what it cannot compute exactly, naming another
    /// of the module's errors than the module would.
    OneOf(Vec<String>, Option<Reply>),
}

fn err(e: RlError) -> Reply {
    Reply::Error(e.to_string())
}

fn ints(v: &[i64]) -> Reply {
    Reply::Array(v.iter().map(|&n| Reply::Int(n)).collect())
}

fn decision_reply(d: &Decision) -> Reply {
    ints(&[
        i64::from(d.admitted),
        d.limit,
        d.remaining,
        d.retry_after_ms,
        d.reset_after_ms,
    ])
}

/// The reply as FORMAT map gives it.
fn as_map(names: &[&str], reply: Reply) -> Reply {
    let Reply::Array(values) = reply else {
        return reply;
    };
    let mut pairs: Vec<(Reply, Reply)> = names
        .iter()
        .map(|n| Reply::Status(n.to_string()))
        .zip(values)
        .collect();
    pairs.sort_by_key(|(k, _)| format!("{k:?}"));
    Reply::Map(pairs)
}

const DECISION_FIELDS: [&str; 5] = [
    "admitted",
    "limit",
    "remaining",
    "retry_after_ms",
    "reset_after_ms",
];
const RESERVED_FIELDS: [&str; 7] = [
    "admitted",
    "limit",
    "remaining",
    "retry_after_ms",
    "reset_after_ms",
    "delay_ms",
    "at_ms",
];
const THROTTLE_FIELDS: [&str; 5] = [
    "limited",
    "limit",
    "remaining",
    "retry_after",
    "reset_after",
];

/// The META hash's fields as the call finds them (None: no META key).
#[derive(Default, Clone)]
struct Meta {
    max: Option<Vec<u8>>,
    duration: Option<Vec<u8>>,
    algorithm: Option<Vec<u8>>,
    burst: Option<Vec<u8>>,
}

fn meta_int(
    field: &Option<Vec<u8>>,
    name: &'static str,
    min: i64,
    must: &'static str,
) -> Result<Option<i64>, RlError> {
    match field {
        None => Ok(None),
        Some(raw) => match parse_i64(raw) {
            Some(v) if v >= min => Ok(Some(v)),
            _ => Err(RlError::BadMetaField(name, must)),
        },
    }
}

/// src/resolve.rs `Resolved`, rebuilt here: that module reads the META
/// hash through the server API.
struct Resolved {
    algo: Algo,
    limit: i64,
    window: Option<(i64, &'static str)>,
    burst: Option<(i64, bool)>,
}

fn resolve(opts: &Options, meta: Option<&Meta>) -> Result<Option<Resolved>, RlError> {
    let algo = match (opts.algo, meta.and_then(|m| m.algorithm.as_ref())) {
        (Some(a), _) => a,
        (None, Some(raw)) => {
            Algo::parse(raw).ok_or(RlError::BadMetaField("algorithm", Algo::NAMES))?
        }
        (None, None) => Algo::Fixed,
    };
    if opts.burst.is_some() && !algo.uses_burst() {
        return Err(RlError::NotForAlgo("BURST", algo.name()));
    }
    let limit = match opts.limit {
        Some(l) => l,
        None => meta
            .map_or(Ok(None), |m| meta_int(&m.max, "max", 0, NON_NEGATIVE))?
            .unwrap_or(0),
    };
    if limit == 0 {
        return Ok(None);
    }
    let window = match opts.window {
        Some(w) => Some((w, "WINDOW")),
        None => meta
            .map_or(Ok(None), |m| meta_int(&m.duration, "duration", 1, POSITIVE))?
            .map(|d| (d, "META field 'duration'")),
    };
    let burst = match (opts.burst, algo.uses_burst()) {
        (Some(b), _) => Some((b, false)),
        (None, true) => meta
            .map_or(Ok(None), |m| meta_int(&m.burst, "burst", 0, BURST_RANGE))?
            .map(|b| (b, true)),
        (None, false) => None,
    };
    Ok(Some(Resolved {
        algo,
        limit,
        window,
        burst,
    }))
}

impl Resolved {
    fn policy(&self, now_ms: i64) -> Result<Policy, RlError> {
        let (window, source) = self.window.ok_or(RlError::NoWindow)?;
        if now_ms.checked_add(window).is_none() {
            return Err(RlError::WindowOverflow(source));
        }
        if let Some((_, from_meta)) = self.burst.filter(|&(b, _)| b < self.algo.min_burst()) {
            return Err(match from_meta {
                true => RlError::BadMetaField("burst", BURST_RANGE),
                false => RlError::BadValue("BURST", BURST_RANGE),
            });
        }
        // The booking horizon: the library's default, the module config's.
        Policy::new(
            self.algo,
            self.limit,
            window,
            self.burst.map(|b| b.0),
            now_ms,
        )
        .map(|p| Policy {
            horizon_ns: 60_000 * 1_000_000,
            ..p
        })
    }

    /// Whether any quantity of this policy at `now_ms` is beyond the
    /// library's exact range (docs/managed-valkey.md): there it refuses.
    fn beyond(&self, now_ms: i64) -> bool {
        let (limit, now) = (i128::from(self.limit), i128::from(now_ms));
        let window = i128::from(self.window.map_or(1, |w| w.0));
        let burst = i128::from(self.burst.map_or(self.limit, |b| b.0));
        match self.algo {
            // The fixed window reads no clock: it works in ms left.
            Algo::Fixed => limit > EXACT || window > EXACT,
            Algo::Sliding => limit * window > EXACT || now + 2 * window > EXACT,
            algo => {
                let interval = (window * 1_000_000 + limit - 1) / limit;
                let slots = if algo == Algo::Leaky {
                    burst + 1
                } else {
                    burst
                };
                window * 1_000_000 + limit - 1 > EXACT
                    || burst > EXACT
                    || slots.max(0).saturating_mul(interval) > EXACT
            }
        }
    }
}

/// The policy stage: the policy, or what the library must answer instead.
fn expect_policy(r: &Resolved, now_ms: i64) -> Result<Policy, Expect> {
    let beyond = r.beyond(now_ms);
    match r.policy(now_ms) {
        Ok(p) if !beyond => Ok(p),
        Ok(_) => Err(Expect::Reply(Reply::Error(BEYOND_DOUBLES.into()))),
        Err(e @ (RlError::NoWindow | RlError::BadMetaField(..) | RlError::BadValue(..)))
            if !beyond =>
        {
            Err(Expect::Reply(err(e)))
        }
        Err(e) => {
            let (_, source) = r.window.unwrap_or((0, "WINDOW"));
            let mut any: Vec<String> = [
                e,
                RlError::WindowOverflow(source),
                RlError::PolicyTooLarge,
                RlError::NoWindow,
                RlError::BadMetaField("burst", BURST_RANGE),
                RlError::BadValue("BURST", BURST_RANGE),
            ]
            .iter()
            .map(ToString::to_string)
            .collect();
            any.push(BEYOND_DOUBLES.into());
            Err(Expect::OneOf(any, None))
        }
    }
}

/// A limiter key as `algo` reads it: None for no key, or the state and
/// expiry, or the error.
fn read_state(db: &mut Db, key: &[u8], algo: Algo) -> Result<algo::Found, RlError> {
    match db.live(key) {
        None => Ok(None),
        Some(Entry {
            val: Val::Str(s),
            at,
        }) => Ok(Some((State::decode(algo, s)?, *at))),
        Some(_) => Err(RlError::WrongType),
    }
}

/// Whether the library may refuse this state as beyond its exact range:
/// counts that, with the policy's own numbers, pass 2^53.
fn state_beyond(found: &algo::Found, p: &Policy) -> bool {
    let Some((state, _)) = found else {
        return false;
    };
    let f: Vec<i128> = state.fields().iter().map(|&v| i128::from(v)).collect();
    let (limit, window) = (i128::from(p.limit), i128::from(p.window_ms));
    match p.algo {
        Algo::Fixed => f[0].abs() + limit > EXACT,
        Algo::Sliding => (f[1] + f[2] + limit).saturating_mul(window) > EXACT,
        _ => false,
    }
}

/// `db` after a decision's write.
fn apply(db: &mut Db, key: &[u8], write: Write) {
    let now = db.now_ms();
    match write {
        Write::Nothing => {}
        Write::Delete => {
            db.keys.remove(key);
        }
        Write::State { state, expires_at } => {
            let mut buf = [0u8; algo::state::MAX_LEN];
            let bytes = state.encode(&mut buf).to_vec();
            if expires_at <= now {
                db.keys.remove(key);
            } else {
                db.keys.insert(
                    key.to_vec(),
                    Entry {
                        val: Val::Str(bytes),
                        at: Some(expires_at),
                    },
                );
            }
        }
        Write::Expiry { expires_at } => {
            if expires_at <= now {
                db.keys.remove(key);
            } else if let Some(e) = db.live(key) {
                e.at = Some(expires_at);
            }
        }
    }
}

// ------------------------------------------------------------ generators

const KEY: &[u8] = b"k";
const META_KEY: &[u8] = b"m";

/// The latest clock the cases use: 2^53 ms and a little more (the clock
/// past 2^53 is one no server will read, but the library must still
/// refuse rather than round there).
const LAST_US: i64 = ((1 << 53) + 1_000_000) * 1000;

/// A clock: mostly today's, often at the edges the library must refuse
/// rather than round (2^53 ms, the ns clock's end in 2262), sometimes 0.
fn gen_now_us(rng: &mut Rng) -> i64 {
    let ms = match rng.below(100) {
        0..=79 => 1_764_000_000_000 + rng.below(1 << 40) as i64,
        80..=85 => (1i64 << 53) - 300_000 + rng.below(1_300_000) as i64,
        86..=89 => (1i64 << 53) - rng.below(1 << 45) as i64,
        90..=93 => 9_223_372_036_854 - rng.below(1 << 33) as i64,
        94..=96 => rng.below(1 << 20) as i64,
        _ => rng.below(1 << 53) as i64,
    };
    ms * 1000 + rng.below(1000) as i64
}

/// An integer: small, realistic, or at the edges of 2^53 and i64.
fn gen_int(rng: &mut Rng, min: i64) -> i64 {
    let v = match rng.below(40) {
        0..=15 => rng.below(12) as i64,
        16..=25 => rng.below(1000) as i64,
        26..=28 => 60_000,
        29..=33 => rng.below(1 << 30) as i64,
        34 => (1i64 << 53) - 2 + rng.below(4) as i64,
        35 => (1i64 << 53) / (1 + rng.below(2_000_000) as i64),
        36 => i64::MAX - rng.below(3) as i64,
        37 => rng.next() as i64 & i64::MAX,
        _ => rng.below(100_000) as i64,
    };
    v.max(min)
}

/// An integer option's value: mostly valid, sometimes not an integer the
/// server accepts.
fn gen_int_text(rng: &mut Rng, min: i64) -> Vec<u8> {
    if rng.pct(4) {
        let bad: &[&str] = &[
            "-1",
            "01",
            "+5",
            " 5",
            "1e3",
            "",
            "abc",
            "9223372036854775808",
            "-0",
            "5 ",
        ];
        return rng.pick(bad).as_bytes().to_vec();
    }
    gen_int(rng, min).to_string().into_bytes()
}

fn gen_case(rng: &mut Rng, word: &str) -> Vec<u8> {
    match rng.below(4) {
        0 => word.to_ascii_lowercase().into_bytes(),
        1 => {
            let mut w: Vec<u8> = word.bytes().collect();
            w[0] = w[0].to_ascii_lowercase();
            w
        }
        _ => word.as_bytes().to_vec(),
    }
}

/// A stored value for `algo`'s state (or another algorithm's, or
/// garbage), relative to now.
fn gen_state(rng: &mut Rng, algo: Algo, now_us: i64) -> Vec<u8> {
    let now_ms = now_us.div_euclid(1000);
    let near_ms = |rng: &mut Rng| now_ms.saturating_add(rng.below(400_000) as i64 - 200_000);
    let near_ns = |rng: &mut Rng| {
        let span = match rng.below(3) {
            0 => rng.below(1 << 20) as i64,
            1 => rng.below(1 << 40) as i64,
            _ => rng.below(1 << 55) as i64,
        };
        let ns = i128::from(now_us) * 1000 + i128::from(span) - (1 << 38);
        ns.clamp(i128::from(i64::MIN), i128::from(i64::MAX)) as i64
    };
    let algo = if rng.pct(3) {
        rng.pick(&Algo::ALL)
    } else {
        algo
    };
    let text = match (algo, rng.below(40)) {
        (_, 0) => {
            let junk: &[&str] = &[
                "",
                "x",
                "gcra:",
                "token:1",
                "sliding:1:2",
                "gcra:01",
                "leaky:+5",
                "12a",
                "gcra:1:2",
                "token:1:2:1000000",
                "sliding:-1:0:0",
                "token:-1:5:0",
                " 7",
                "gcra:-",
            ];
            rng.pick(junk).to_string()
        }
        (_, 1) => format!("{}", rng.next() as i64),
        (Algo::Fixed, _) => match rng.below(4) {
            0 => format!("{}", gen_int(rng, 0)),
            1 => format!("-{}", rng.below(100)),
            _ => format!("{}", rng.below(20)),
        },
        (Algo::Sliding, k) => {
            let start = if k < 4 {
                gen_int(rng, 0)
            } else {
                near_ms(rng).max(0)
            };
            let count = |rng: &mut Rng| {
                if rng.pct(10) {
                    gen_int(rng, 0)
                } else {
                    rng.below(30) as i64
                }
            };
            format!("sliding:{}:{}:{}", start, count(rng), count(rng))
        }
        (Algo::Token, k) => {
            let ns = near_ns(rng);
            let credit = if k < 4 {
                gen_int(rng, 0)
            } else {
                rng.below(1 << 45) as i64
            };
            match k {
                2 => format!("token:{}:{}", credit, ns.div_euclid(1_000_000)),
                _ => format!(
                    "token:{}:{}:{}",
                    credit,
                    ns.div_euclid(1_000_000),
                    ns.rem_euclid(1_000_000)
                ),
            }
        }
        (Algo::Gcra | Algo::Leaky, k) => {
            let ns = if k < 3 {
                rng.next() as i64
            } else {
                near_ns(rng)
            };
            format!("{}:{}", algo.name(), ns)
        }
    };
    text.into_bytes()
}

/// Puts a random limiter key (or none, or the wrong type) at KEY.
fn gen_key(rng: &mut Rng, db: &mut Db, algo: Algo) {
    let now_ms = db.now_ms();
    db.keys.remove(KEY);
    let at = match rng.below(6) {
        0 => None,
        1 => Some(now_ms),
        2 => Some(now_ms + 1 + rng.below(1 << 40) as i64),
        _ => Some(now_ms + 1 + rng.below(200_000) as i64),
    };
    let val = match rng.below(20) {
        0..=3 => return,
        4 => Val::Hash(BTreeMap::new()),
        5 => Val::Zset(BTreeMap::from([(b"x".to_vec(), 1.0)])),
        _ => Val::Str(gen_state(rng, algo, db.now_us)),
    };
    db.keys.insert(KEY.to_vec(), Entry { val, at });
}

/// A limiter policy as options, in a random order and case; sometimes a
/// META hash as well.
struct PolicyArgs {
    words: Vec<Vec<u8>>,
    /// Where each option pair starts, and whether it is FORMAT (the
    /// library's own option, which the module does not take).
    format: Option<&'static str>,
    meta: Option<Meta>,
}

/// `with_cost`: COST and FORMAT are options here (not for rl_ttl).
fn gen_policy(rng: &mut Rng, pool: &[Vec<Vec<u8>>], with_cost: bool) -> PolicyArgs {
    let mut pairs: Vec<(Vec<u8>, Vec<u8>)> = Vec::new();
    if !pool.is_empty() && rng.pct(50) {
        let fixed = rng.pick_ref(pool);
        for p in fixed.chunks(2) {
            pairs.push((p[0].clone(), p[1].clone()));
        }
    } else {
        let algo = rng.pick(&Algo::ALL);
        if rng.pct(85) {
            let name = if rng.pct(3) {
                b"fast".to_vec()
            } else {
                gen_case(rng, algo.name())
            };
            pairs.push((gen_case(rng, "ALGO"), name));
        }
        if rng.pct(92) {
            pairs.push((gen_case(rng, "LIMIT"), gen_int_text(rng, 0)));
        }
        if rng.pct(92) {
            pairs.push((gen_case(rng, "WINDOW"), gen_int_text(rng, 1)));
        }
        if (algo.uses_burst() && rng.pct(60)) || rng.pct(3) {
            pairs.push((gen_case(rng, "BURST"), gen_int_text(rng, 0)));
        }
        if rng.pct(2) && !pairs.is_empty() {
            let dup = pairs[rng.below(pairs.len())].clone();
            pairs.push(dup);
        }
        if rng.pct(1) {
            pairs.push((b"SPEED".to_vec(), b"1".to_vec()));
        }
    }
    if with_cost && rng.pct(60) {
        let cost = match rng.below(6) {
            0 => b"0".to_vec(),
            1..=3 => (1 + rng.below(4)).to_string().into_bytes(),
            _ => gen_int_text(rng, 0),
        };
        pairs.push((gen_case(rng, "COST"), cost));
    }
    let mut format = None;
    let truncated = rng.pct(1);
    if with_cost && !truncated && rng.pct(15) {
        let f = if rng.pct(70) { "map" } else { "array" };
        pairs.push((gen_case(rng, "FORMAT"), gen_case(rng, f)));
        format = Some(f);
    }
    // Shuffle the pairs.
    for i in (1..pairs.len()).rev() {
        let j = rng.below(i + 1);
        pairs.swap(i, j);
    }
    let mut words = Vec::new();
    for (k, v) in pairs {
        words.push(k);
        words.push(v);
    }
    if truncated && !words.is_empty() {
        words.pop(); // an option without its value
    }
    let meta = rng.pct(12).then(|| {
        let field = |rng: &mut Rng, min: i64| rng.pct(50).then(|| gen_int_text(rng, min));
        Meta {
            max: field(rng, 0),
            duration: field(rng, 1),
            algorithm: rng.pct(40).then(|| {
                let name = rng_algo(rng);
                gen_case(rng, name)
            }),
            burst: field(rng, 0),
        }
    });
    PolicyArgs {
        words,
        format,
        meta,
    }
}

fn rng_algo(rng: &mut Rng) -> &'static str {
    if rng.pct(5) {
        "slow"
    } else {
        rng.pick(&Algo::ALL).name()
    }
}

trait PickRef {
    fn pick_ref<'a, T>(&mut self, items: &'a [T]) -> &'a T;
}

impl PickRef for Rng {
    fn pick_ref<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len())]
    }
}

/// The benchmark rows' arguments and a few common policies: called again
/// and again, so the library's memo of validated policies is exercised
/// across clocks.
fn policy_pool() -> Vec<Vec<Vec<u8>>> {
    let words = |s: &str| {
        s.split(' ')
            .map(|w| w.as_bytes().to_vec())
            .collect::<Vec<_>>()
    };
    [
        "LIMIT 1000000000 WINDOW 60000",
        "LIMIT 1000000000 WINDOW 60000 ALGO sliding",
        "LIMIT 10 WINDOW 60000 BURST 1000000 ALGO token",
        "LIMIT 10 WINDOW 60000 BURST 1000000 ALGO gcra",
        "LIMIT 10 WINDOW 60000 BURST 1000000 ALGO leaky",
        "LIMIT 1 WINDOW 3600000",
        "LIMIT 5 WINDOW 1000 ALGO gcra",
        "LIMIT 3 WINDOW 1000 ALGO token BURST 2",
        "ALGO leaky LIMIT 7 WINDOW 7 BURST 0",
        "LIMIT 1000 WINDOW 4503599627370495 ALGO sliding",
        "LIMIT 2 WINDOW 4503599627370000",
        "LIMIT 9007199254740991 WINDOW 1",
        "LIMIT 3 WINDOW 3000000000000 ALGO gcra BURST 3",
    ]
    .iter()
    .map(|s| words(s))
    .collect()
}

/// The module's view of the option words: FORMAT taken out (it is the
/// library's own), then src/args' parser.
fn module_options(words: &[Vec<u8>], allowed: OptSet) -> Result<Options, RlError> {
    let mut argv: Vec<&[u8]> = vec![b"RL.X", KEY];
    let mut i = 0;
    while i < words.len() {
        if words[i].eq_ignore_ascii_case(b"FORMAT") && i + 1 < words.len() {
            i += 2;
            continue;
        }
        argv.push(&words[i]);
        i += 1;
    }
    let mut opts = Options::default();
    read_options(&argv, 2, allowed, &mut opts)?;
    Ok(opts)
}

// ------------------------------------------------------------ the checks

/// One run: the host, its keyspace, and what was compared.
struct Run {
    host: Host,
    db: Rc<RefCell<Db>>,
    rng: Rng,
    pool: Vec<Vec<Vec<u8>>>,
    cases: usize,
    /// How many cases ended in each kind of answer (coverage).
    seen: BTreeMap<&'static str, usize>,
    /// How often each error (its start) was the answer.
    errors: BTreeMap<String, usize>,
    /// The cost of the limiter call being checked.
    last_cost: i64,
}

impl Run {
    fn new(seed: u64) -> Run {
        let db: Rc<RefCell<Db>> = Rc::default();
        Run {
            host: Host::load(db.clone()),
            db,
            rng: Rng::new(seed),
            pool: policy_pool(),
            cases: 0,
            seen: BTreeMap::new(),
            errors: BTreeMap::new(),
            last_cost: 0,
        }
    }

    fn see(&mut self, what: &'static str) {
        *self.seen.entry(what).or_default() += 1;
    }

    /// Calls `function` and checks its reply, the keyspace after it against
    /// `after`, and that it propagated something exactly when it wrote.
    #[allow(clippy::too_many_arguments)]
    fn check(
        &mut self,
        function: &str,
        keys: &[Vec<u8>],
        args: &[Vec<u8>],
        expect: Expect,
        after: BTreeMap<Vec<u8>, Entry>,
        writes: bool,
        context: &str,
    ) {
        self.cases += 1;
        let before: BTreeMap<Vec<u8>, Entry> = self.db.borrow().keys.clone();
        let (reply, propagated) = self.host.call(function, keys, args);
        let show = |a: &[Vec<u8>]| a.iter().map(|w| text(w)).collect::<Vec<_>>().join(" ");
        let call = format!(
            "FCALL {function} {} {} {}\n  now_us {}\n  before {before:?}\n  {context}",
            keys.len(),
            show(keys),
            show(args),
            self.db.borrow().now_us
        );
        let matched = match &expect {
            Expect::Reply(r) => *r == reply,
            Expect::OneOf(errors, r) => {
                matches!(&reply, Reply::Error(e) if errors.contains(e))
                    || r.as_ref() == Some(&reply)
            }
        };
        assert!(
            matched,
            "{call}\n  replied {reply:?}\n  expected {expect:?}"
        );
        if let Reply::Error(e) = &reply {
            *self.errors.entry(e.chars().take(48).collect()).or_default() += 1;
        }
        let is_error = matches!(reply, Reply::Error(_));
        let db = self.db.borrow();
        if is_error {
            assert_eq!(db.keys, before, "{call}\n  an error changed the keyspace");
            assert!(
                propagated.is_empty(),
                "{call}\n  an error propagated {propagated:?}"
            );
            drop(db);
            self.see("error");
            return;
        }
        assert_eq!(
            db.keys, after,
            "{call}\n  replied {reply:?}\n  the keyspace after it"
        );
        if writes {
            assert!(
                !propagated.is_empty(),
                "{call}\n  wrote without propagating"
            );
        } else {
            assert!(propagated.is_empty(), "{call}\n  replied {reply:?}\n  propagated {propagated:?} on a call that writes nothing");
        }
        drop(db);
        self.see(if writes { "wrote" } else { "wrote nothing" });
    }

    fn set_meta(&mut self, meta: &Option<Meta>) -> Option<Meta> {
        let mut db = self.db.borrow_mut();
        db.keys.remove(META_KEY);
        let m = meta.clone()?;
        let mut h = BTreeMap::new();
        for (name, v) in [
            ("max", &m.max),
            ("duration", &m.duration),
            ("algorithm", &m.algorithm),
            ("burst", &m.burst),
        ] {
            if let Some(v) = v {
                h.insert(name.as_bytes().to_vec(), v.clone());
            }
        }
        if !h.is_empty() || self.rng.pct(50) {
            let val = if self.rng.pct(4) {
                Val::Str(b"1".to_vec())
            } else {
                Val::Hash(h)
            };
            db.keys.insert(META_KEY.to_vec(), Entry { val, at: None });
        }
        Some(m)
    }

    /// The META hash as the call will read it: None without a META key,
    /// Err for the wrong type.
    fn read_meta(&mut self, given: bool) -> Result<Option<Meta>, Reply> {
        if !given {
            return Ok(None);
        }
        let mut db = self.db.borrow_mut();
        match db.live(META_KEY) {
            None => Ok(Some(Meta::default())),
            Some(Entry {
                val: Val::Hash(h), ..
            }) => Ok(Some(Meta {
                max: h.get(b"max".as_slice()).cloned(),
                duration: h.get(b"duration".as_slice()).cloned(),
                algorithm: h.get(b"algorithm".as_slice()).cloned(),
                burst: h.get(b"burst".as_slice()).cloned(),
            })),
            Some(_) => Err(Reply::Error(
                "WRONGTYPE META key does not hold a hash".into(),
            )),
        }
    }

    /// A new clock, and most of the time a new key: else the limiter goes on
    /// from where the last call left it, a little later. Keys past their
    /// expiry are gone, as they are for any reader.
    fn step(&mut self, algo_hint: Algo) {
        let fresh = self.rng.pct(55);
        let mut db = self.db.borrow_mut();
        if fresh {
            db.now_us = gen_now_us(&mut self.rng);
            gen_key(&mut self.rng, &mut db, algo_hint);
        } else {
            let advance = match self.rng.below(4) {
                0 => 0,
                1 => self.rng.below(1000) as i64,
                2 => self.rng.below(2_000_000) as i64,
                _ => self.rng.below(200_000_000) as i64,
            };
            db.now_us = db.now_us.saturating_add(advance).min(LAST_US);
        }
        let now = db.now_ms();
        db.keys.retain(|_, e| e.at.is_none_or(|at| now <= at));
    }

    /// rl_admit, rl_refund or rl_ttl with a random policy.
    fn limiter_case(&mut self, function: &'static str) {
        let with_cost = function != "rl_ttl";
        let mut p = gen_policy(&mut self.rng, &self.pool, with_cost);
        let hint = rng_algo_of(&p.words);
        self.step(hint);
        // Issue 38: FORCE, RESERVE max_ms and AT at_ms (near now).
        // (Not past 2^53 ms, where the library's clock is not exact.)
        let now_ms = self.db.borrow().now_ms();
        if with_cost && i128::from(now_ms) < EXACT && self.rng.pct(15) {
            let rng = &mut self.rng;
            let extra = match rng.below(4) {
                0 => vec![gen_case(rng, "FORCE")],
                1 | 2 => vec![
                    gen_case(rng, "RESERVE"),
                    rng.below(3_000).to_string().into(),
                ],
                _ => {
                    let at = now_ms + rng.below(3_000) as i64 - 500;
                    vec![gen_case(rng, "AT"), at.to_string().into()]
                }
            };
            p.words.extend(extra);
        }
        let meta_given = p.meta.is_some();
        self.set_meta(&p.meta);
        let mut keys = vec![KEY.to_vec()];
        if meta_given {
            keys.push(META_KEY.to_vec());
        }
        let (expect, after, writes) = self.expect_limiter(function, &p, meta_given);
        let context = format!("FORMAT {:?}", p.format);
        self.check(function, &keys, &p.words, expect, after, writes, &context);
    }

    fn expect_limiter(
        &mut self,
        function: &str,
        p: &PolicyArgs,
        meta_given: bool,
    ) -> (Expect, BTreeMap<Vec<u8>, Entry>, bool) {
        let before = self.db.borrow().keys.clone();
        let same = |e: Expect| (e, before.clone(), false);
        let allowed = match function {
            "rl_ttl" => args::POLICY_SET,
            "rl_admit" => args::ADMIT_SET,
            _ => args::REFUND_SET,
        };
        let opts = match module_options(&p.words, allowed) {
            Ok(o) => o,
            Err(e) => return same(Expect::Reply(err(e))),
        };
        if function == "rl_admit" {
            if let Err(e) = args::check_charge(&opts) {
                return same(Expect::Reply(err(e)));
            }
        }
        let reserve = opts.reserve.is_some();
        let now_us = self.db.borrow().now_us;
        let now = Now::from_us(now_us);
        let meta = match self.read_meta(meta_given) {
            Ok(m) => m,
            Err(e) => return same(Expect::Reply(e)),
        };
        let resolved = match resolve(&opts, meta.as_ref()) {
            Ok(r) => r,
            Err(e) => return same(Expect::Reply(err(e))),
        };
        let format = |reply: Reply| match p.format {
            Some("map") if reserve => as_map(&RESERVED_FIELDS, reply),
            Some("map") if function != "rl_ttl" => as_map(&DECISION_FIELDS, reply),
            _ => reply,
        };
        // RESERVE's reply: the slot after the decision (none when refused).
        let booked = |d: &Decision, slot: Slot| {
            let slot = if d.admitted { slot } else { Slot::NONE };
            ints(&[
                i64::from(d.admitted),
                d.limit,
                d.remaining,
                d.retry_after_ms,
                d.reset_after_ms,
                slot.delay_ms,
                slot.at_ms,
            ])
        };
        let Some(resolved) = resolved else {
            let reply = if function == "rl_ttl" {
                Reply::Int(0)
            } else if reserve {
                let now = Slot {
                    delay_ms: 0,
                    at_ms: now.ms,
                };
                format(booked(&Decision::UNLIMITED, now))
            } else {
                format(decision_reply(&Decision::UNLIMITED))
            };
            return same(Expect::Reply(reply));
        };
        if function == "rl_ttl" && resolved.algo == Algo::Fixed && resolved.window.is_none() {
            // The fixed window's back-off is the counter's PTTL: no window.
            // Refused, never rounded, beyond 2^53.
            if i128::from(resolved.limit) > EXACT {
                return same(Expect::Reply(Reply::Error(BEYOND_DOUBLES.into())));
            }
            let found = match read_state(&mut self.db.borrow_mut(), KEY, Algo::Fixed) {
                Ok(f) => f,
                Err(e) => return same(Expect::Reply(err(e))),
            };
            let wait = fixed::backoff(fixed::counter_of(found, now.ms), resolved.limit, now.ms);
            // A wait past 2^53 ms.
            if matches!(found, Some((_, Some(at))) if i128::from(at) - i128::from(now.ms) > EXACT) {
                return same(Expect::OneOf(
                    vec![STATE_BEYOND_DOUBLES.into()],
                    Some(Reply::Int(wait)),
                ));
            }
            return same(Expect::Reply(Reply::Int(wait)));
        }
        let mut policy = match expect_policy(&resolved, now.ms) {
            Ok(policy) => policy,
            Err(e) => return same(e),
        };
        // As src/commands/limiter.rs `charge_of` (no SHADOW drawn here).
        let booking = match (opts.reserve, opts.at) {
            (Some(_), _) => Some("RESERVE"),
            (None, Some(_)) => Some("AT"),
            (None, None) => None,
        };
        if let Some(what) = booking.filter(|_| policy.algo.is_window()) {
            return same(Expect::Reply(err(RlError::NeedsBooking(what))));
        }
        policy.charge = match (opts.force, opts.reserve, opts.at) {
            (_, None, Some(at_ms)) => Charge::Cancel { at_ms },
            (true, _, _) => Charge::Force,
            (false, Some(max_ms), _) => Charge::Reserve { max_ms },
            _ => Charge::Plain,
        };
        let found = match read_state(&mut self.db.borrow_mut(), KEY, policy.algo) {
            Ok(f) => f,
            Err(e) => return same(Expect::Reply(err(e))),
        };
        let cost = opts.cost.unwrap_or(1);
        self.last_cost = cost;
        let outcome = match function {
            "rl_admit" => {
                let outcome = algo::admit(found, &policy, cost, now);
                self.see(if outcome.decision.admitted {
                    "admitted"
                } else {
                    "refused"
                });
                outcome
            }
            "rl_refund" => algo::refund(found, &policy, cost, now),
            _ => {
                let wait = algo::admit(found, &policy, 1, now)
                    .decision
                    .retry_after_ms
                    .max(0);
                return self.maybe_beyond(
                    &found,
                    &policy,
                    (Expect::Reply(Reply::Int(wait)), before, false),
                );
            }
        };
        let mut after = self.db.borrow().clone_keys();
        apply_to(&mut after, self.db.borrow().now_ms(), KEY, outcome.write);
        let reply = match reserve {
            true => format(booked(&outcome.decision, outcome.decision.slot)),
            false => format(decision_reply(&outcome.decision)),
        };
        self.maybe_beyond(
            &found,
            &policy,
            (Expect::Reply(reply), after, outcome.write != Write::Nothing),
        )
    }

    /// Counts beyond 2^53: the library may refuse them instead.
    fn maybe_beyond(
        &self,
        found: &algo::Found,
        policy: &Policy,
        (expect, after, writes): (Expect, BTreeMap<Vec<u8>, Entry>, bool),
    ) -> (Expect, BTreeMap<Vec<u8>, Entry>, bool) {
        // A forced count that passes 2^53 (or, for the sliding window, its
        // counts times the window): the library refuses it too.
        let cost = self.last_cost;
        let forced = policy.charge == Charge::Force
            && policy.algo.is_window()
            && i128::from(cost).saturating_mul(i128::from(policy.window_ms)) * 2 > EXACT;
        match (state_beyond(found, policy) || forced, expect) {
            (true, Expect::Reply(r)) => (
                Expect::OneOf(vec![STATE_BEYOND_DOUBLES.into()], Some(r)),
                after,
                writes,
            ),
            (_, e) => (e, after, writes),
        }
    }
}

impl Db {
    fn clone_keys(&self) -> BTreeMap<Vec<u8>, Entry> {
        self.keys.clone()
    }
}

/// `apply` on a copy of the keyspace.
fn apply_to(keys: &mut BTreeMap<Vec<u8>, Entry>, now_ms: i64, key: &[u8], write: Write) {
    let mut db = Db {
        keys: std::mem::take(keys),
        now_us: now_ms * 1000,
        ..Db::default()
    };
    apply(&mut db, key, write);
    *keys = db.keys;
}

/// The algorithm the options name, for the state put at the key.
fn rng_algo_of(words: &[Vec<u8>]) -> Algo {
    words
        .chunks(2)
        .find(|p| p[0].eq_ignore_ascii_case(b"ALGO") && p.len() == 2)
        .and_then(|p| Algo::parse(&p[1]))
        .unwrap_or(Algo::Fixed)
}

// ------------------------------------------------------------ the other functions

const LEASE_KEY: &[u8] = b"l";

impl Run {
    /// rl_throttle key max_burst count_per_period period [quantity] [FORMAT f]
    fn throttle_case(&mut self) {
        let rng = &mut self.rng;
        let mut words: Vec<Vec<u8>> = if rng.pct(10) {
            // The benchmark's row (bench/bench.py).
            ["1000000", "10", "60", "1"]
                .iter()
                .map(|w| w.as_bytes().to_vec())
                .collect()
        } else if rng.pct(60) {
            vec![
                rng.below(20).to_string().into_bytes(),
                (1 + rng.below(100)).to_string().into_bytes(),
                (1 + rng.below(120)).to_string().into_bytes(),
            ]
        } else {
            vec![
                gen_int_text(rng, 0),
                gen_int_text(rng, 1),
                gen_int_text(rng, 1),
            ]
        };
        if words.len() == 3 && rng.pct(70) {
            let q = if rng.pct(80) {
                rng.below(4).to_string().into_bytes()
            } else {
                gen_int_text(rng, 0)
            };
            words.push(q);
        }
        let format = rng
            .pct(15)
            .then(|| if rng.pct(70) { "map" } else { "array" });
        if let Some(f) = format {
            words.push(gen_case(rng, "FORMAT"));
            words.push(gen_case(rng, f));
        }
        self.step(Algo::Gcra);
        if self.rng.pct(30) {
            // redis-cell's state: a bare ns time.
            let mut db = self.db.borrow_mut();
            let ns = i128::from(db.now_us) * 1000 + i128::from(self.rng.below(1 << 40) as i64)
                - (1 << 39);
            let at = Some(db.now_ms() + 1 + self.rng.below(100_000) as i64);
            db.keys.insert(
                KEY.to_vec(),
                Entry {
                    val: Val::Str(ns.to_string().into_bytes()),
                    at,
                },
            );
        }
        let (expect, after, writes) = self.expect_throttle(&words, format);
        self.check(
            "rl_throttle",
            &[KEY.to_vec()],
            &words,
            expect,
            after,
            writes,
            "",
        );
    }

    fn expect_throttle(
        &mut self,
        words: &[Vec<u8>],
        format: Option<&str>,
    ) -> (Expect, BTreeMap<Vec<u8>, Entry>, bool) {
        let before = self.db.borrow().keys.clone();
        let same = |e: Expect| (e, before.clone(), false);
        let n = words.len() - if format.is_some() { 2 } else { 0 };
        let mut argv: Vec<&[u8]> = vec![b"RL.THROTTLE", KEY];
        argv.extend(words[..n].iter().map(Vec::as_slice));
        let (params, quantity) = match args::throttle(&argv) {
            Ok(p) => p,
            Err(e) => return same(Expect::Reply(err(e))),
        };
        let now = Now::from_us(self.db.borrow().now_us);
        let period_ns = i128::from(params.period_s) * 1_000_000_000;
        let tolerance =
            (period_ns / i128::from(params.count)).saturating_mul(i128::from(params.max_burst) + 1);
        let beyond = period_ns > EXACT || tolerance > EXACT;
        let meter = match (params.meter(now.ms), beyond) {
            (Ok(m), false) => m,
            (Ok(_), true) => return same(Expect::Reply(Reply::Error(BEYOND_DOUBLES.into()))),
            (Err(e), false) => return same(Expect::Reply(err(e))),
            (Err(e), true) => {
                let clock = "its times would pass the ns clock (the year 2262)";
                let any = [
                    e,
                    RlError::TooLarge("period", clock),
                    RlError::TooLarge("max_burst", clock),
                ]
                .iter()
                .map(ToString::to_string)
                .chain([BEYOND_DOUBLES.to_string()])
                .collect();
                return same(Expect::OneOf(any, None));
            }
        };
        let found = {
            let mut db = self.db.borrow_mut();
            match db.live(KEY) {
                None => None,
                Some(Entry {
                    val: Val::Str(s),
                    at,
                }) => {
                    let state = match State::decode(Algo::Gcra, s) {
                        Ok(state) => state,
                        Err(_) => match parse_i64(s) {
                            Some(ns) => State::new(Algo::Gcra, [ns]),
                            None => return same(Expect::Reply(err(RlError::BadState("gcra")))),
                        },
                    };
                    Some((state, *at))
                }
                Some(_) => return same(Expect::Reply(Reply::Error(WRONGTYPE.into()))),
            }
        };
        let (answer, write) = throttle::throttle(found, &meter, quantity, now);
        let mut after = before.clone();
        apply_to(&mut after, now.ms, KEY, write);
        let mut reply = ints(&[
            i64::from(answer.limited),
            answer.limit,
            answer.remaining,
            answer.retry_after_s,
            answer.reset_after_s,
        ]);
        if format == Some("map") {
            reply = as_map(&THROTTLE_FIELDS, reply);
        }
        (Expect::Reply(reply), after, write != Write::Nothing)
    }

    /// rl_admitall numkeys counters... [COST n] POLICY ... [POLICY ...] [FORMAT f]
    fn admitall_case(&mut self) {
        let n = 1 + self.rng.below(3);
        let keys: Vec<Vec<u8>> = (1..=n).map(|i| format!("a{i}").into_bytes()).collect();
        let mut words: Vec<Vec<u8>> = Vec::new();
        let mut algos = Vec::new();
        let policies = n + usize::from(self.rng.pct(3)) - usize::from(n > 1 && self.rng.pct(3));
        for _ in 0..policies {
            words.push(gen_case(&mut self.rng, "POLICY"));
            let p = gen_policy(&mut self.rng, &self.pool, false);
            algos.push(rng_algo_of(&p.words));
            // Its options without FORMAT (a top-level option here), and
            // whole pairs only.
            for pair in p
                .words
                .chunks(2)
                .filter(|p| p.len() == 2 && !p[0].eq_ignore_ascii_case(b"FORMAT"))
            {
                words.extend(pair.iter().cloned());
            }
        }
        if self.rng.pct(50) {
            // COST anywhere between options: at the start, the end, or
            // right before a POLICY.
            let starts: Vec<usize> = (0..words.len())
                .filter(|&i| words[i].eq_ignore_ascii_case(b"POLICY"))
                .chain([words.len()])
                .collect();
            let at = starts[self.rng.below(starts.len())];
            let cost = if self.rng.pct(80) {
                self.rng.below(4).to_string().into_bytes()
            } else {
                gen_int_text(&mut self.rng, 0)
            };
            words.splice(at..at, [gen_case(&mut self.rng, "COST"), cost]);
        }
        let format = self
            .rng
            .pct(15)
            .then(|| if self.rng.pct(70) { "map" } else { "array" });
        if let Some(f) = format {
            words.push(gen_case(&mut self.rng, "FORMAT"));
            words.push(gen_case(&mut self.rng, f));
        }
        let fresh = self.rng.pct(60);
        self.step(Algo::Fixed);
        if fresh {
            for (key, algo) in keys
                .iter()
                .zip(algos.iter().chain(std::iter::repeat(&Algo::Fixed)))
            {
                let mut db = self.db.borrow_mut();
                gen_key(&mut self.rng, &mut db, *algo);
                let e = db.keys.remove(KEY);
                db.keys.remove(key);
                if let Some(e) = e {
                    db.keys.insert(key.clone(), e);
                }
            }
        }
        let (expect, after, writes) = self.expect_admitall(&keys, &words, format);
        self.check("rl_admitall", &keys, &words, expect, after, writes, "");
    }

    fn expect_admitall(
        &mut self,
        keys: &[Vec<u8>],
        words: &[Vec<u8>],
        format: Option<&str>,
    ) -> (Expect, BTreeMap<Vec<u8>, Entry>, bool) {
        let before = self.db.borrow().keys.clone();
        let same = |e: Expect| (e, before.clone(), false);
        let numkeys = keys.len().to_string().into_bytes();
        let mut argv: Vec<&[u8]> = vec![b"RL.ADMITALL", &numkeys];
        argv.extend(keys.iter().map(Vec::as_slice));
        let end = words.len() - if format.is_some() { 2 } else { 0 };
        argv.extend(words[..end].iter().map(Vec::as_slice));
        let request = match AdmitAll::parse(&argv) {
            Ok(r) => r,
            Err(e) => return same(Expect::Reply(err(e))),
        };
        let now = Now::from_us(self.db.borrow().now_us);
        let mut policies = Vec::new();
        for opts in &request.policies {
            match resolve(opts, None) {
                Err(e) => return same(Expect::Reply(err(e))),
                Ok(None) => policies.push(None),
                Ok(Some(r)) => match expect_policy(&r, now.ms) {
                    Ok(p) => policies.push(Some(p)),
                    Err(e) => return same(e),
                },
            }
        }
        let mut members = Vec::new();
        let mut beyond = false;
        for (key, policy) in keys.iter().zip(&policies) {
            let Some(policy) = policy else {
                members.push((
                    None,
                    None,
                    algo::Outcome {
                        decision: Decision::UNLIMITED,
                        write: Write::Nothing,
                        reset_at: now.ms,
                    },
                ));
                continue;
            };
            let found = match (
                read_state(&mut self.db.borrow_mut(), key, policy.algo),
                beyond,
            ) {
                (Ok(f), _) => f,
                (Err(e), false) => return same(Expect::Reply(err(e))),
                // An earlier member the library refuses as beyond 2^53.
                (Err(e), true) => {
                    return same(Expect::OneOf(
                        vec![e.to_string(), STATE_BEYOND_DOUBLES.into()],
                        None,
                    ))
                }
            };
            beyond |= state_beyond(&found, policy);
            members.push((
                Some(*policy),
                found,
                algo::admit(found, policy, request.cost, now),
            ));
        }
        let all = members.iter().all(|m| m.2.decision.admitted);
        let (mut refused_by, mut longest) = (0, 0i64);
        let mut after = before.clone();
        let mut writes = false;
        for (i, (policy, found, outcome)) in members.iter_mut().enumerate() {
            let wait = outcome.decision.retry_after_ms;
            if all {
                longest = longest.max(wait);
            } else if !outcome.decision.admitted {
                if refused_by == 0 || longest >= 0 && (wait < 0 || wait > longest) {
                    refused_by = i + 1;
                    longest = wait;
                }
            } else if let Some(policy) = policy {
                *outcome = algo::admit(*found, policy, 0, now);
                continue;
            }
            writes |= outcome.write != Write::Nothing;
            apply_to(&mut after, now.ms, &keys[i], outcome.write);
        }
        let map = format == Some("map");
        let decisions = members
            .iter()
            .map(|m| {
                let d = decision_reply(&m.2.decision);
                if map {
                    as_map(&DECISION_FIELDS, d)
                } else {
                    d
                }
            })
            .collect();
        let mut reply = Reply::Array(vec![
            Reply::Int(i64::from(all)),
            Reply::Int(refused_by as i64),
            Reply::Int(longest),
            Reply::Array(decisions),
        ]);
        if map {
            reply = as_map(
                &["admitted", "refused_by", "retry_after_ms", "limiters"],
                reply,
            );
        }
        let expect = match beyond {
            true => Expect::OneOf(vec![STATE_BEYOND_DOUBLES.into()], Some(reply)),
            false => Expect::Reply(reply),
        };
        (expect, after, writes)
    }

    /// rl_limit metakey and rl_reset key.
    fn meta_case(&mut self) {
        self.step(Algo::Fixed);
        if self.rng.pct(50) {
            let meta = Meta {
                max: self.rng.pct(80).then(|| gen_int_text(&mut self.rng, 0)),
                ..Meta::default()
            };
            self.set_meta(&Some(meta));
            let before = self.db.borrow().keys.clone();
            let expect = match self.read_meta(true) {
                Err(e) => Expect::Reply(e),
                Ok(m) => match meta_int(&m.unwrap_or_default().max, "max", 0, NON_NEGATIVE) {
                    // A limit a double cannot hold: refused, never rounded.
                    Ok(Some(v)) if i128::from(v) > EXACT => {
                        Expect::Reply(Reply::Error(BEYOND_DOUBLES.into()))
                    }
                    Ok(v) => Expect::Reply(Reply::Int(v.unwrap_or(0))),
                    Err(e) => Expect::Reply(err(e)),
                },
            };
            self.check(
                "rl_limit",
                &[META_KEY.to_vec()],
                &[],
                expect,
                before,
                false,
                "",
            );
        } else {
            let before = self.db.borrow().keys.clone();
            let mut after = before.clone();
            let (expect, writes) = match before.get(KEY) {
                None => (Reply::Int(0), false),
                Some(Entry {
                    val: Val::Str(_), ..
                }) => {
                    after.remove(KEY);
                    (Reply::Int(1), true)
                }
                Some(_) => (Reply::Error(WRONGTYPE.into()), false),
            };
            self.check(
                "rl_reset",
                &[KEY.to_vec()],
                &[],
                Expect::Reply(expect),
                after,
                writes,
                "",
            );
        }
    }

    /// rl_acquire, rl_release, rl_extend and rl_inflight on a sorted set of
    /// deadlines around now.
    fn lease_case(&mut self) {
        self.step(Algo::Fixed);
        let now = {
            let mut db = self.db.borrow_mut();
            // Clocks past 2^53 µs (the year 2255, where the library's
            // generated-id nonce wraps) included; past 2^53 ms (the year
            // 285,000) a generated id's ms prefix is no longer exact.
            db.now_us = db.now_us.min(((1 << 53) - 1) * 1000);
            db.now_ms()
        };
        if self.rng.pct(55) {
            let mut z = BTreeMap::new();
            for _ in 0..self.rng.below(7) {
                let id = self
                    .rng
                    .pick(&["a", "b", "c", "d", "e", "18f3a-00000000000000ff"])
                    .as_bytes()
                    .to_vec();
                let d = (now + self.rng.below(20_000) as i64 - 10_000).clamp(0, 1 << 53);
                z.insert(id, d as f64);
            }
            let latest = z.values().fold(f64::MIN, |a, &b| a.max(b)) as i64;
            let mut db = self.db.borrow_mut();
            db.keys.remove(LEASE_KEY);
            match self.rng.below(12) {
                0 => {
                    db.keys.insert(
                        LEASE_KEY.to_vec(),
                        Entry {
                            val: Val::Str(b"1".to_vec()),
                            at: None,
                        },
                    );
                }
                _ if !z.is_empty() && latest > now => {
                    db.keys.insert(
                        LEASE_KEY.to_vec(),
                        Entry {
                            val: Val::Zset(z),
                            at: Some(latest),
                        },
                    );
                }
                _ => {}
            }
        }
        let id = |rng: &mut Rng| rng.pick(&["a", "b", "c", "z", ""]).as_bytes().to_vec();
        match self.rng.below(4) {
            0 => {
                let mut words = Vec::new();
                if self.rng.pct(85) {
                    let limit = if self.rng.pct(85) {
                        self.rng.below(5).to_string().into_bytes()
                    } else {
                        gen_int_text(&mut self.rng, 0)
                    };
                    words.extend([gen_case(&mut self.rng, "LIMIT"), limit]);
                }
                if self.rng.pct(90) {
                    let ttl = if self.rng.pct(85) {
                        (1 + self.rng.below(20_000)).to_string().into_bytes()
                    } else {
                        gen_int_text(&mut self.rng, 1)
                    };
                    words.extend([gen_case(&mut self.rng, "TTL"), ttl]);
                }
                if self.rng.pct(60) {
                    let id = id(&mut self.rng);
                    words.extend([gen_case(&mut self.rng, "ID"), id]);
                }
                let format = self
                    .rng
                    .pct(15)
                    .then(|| if self.rng.pct(70) { "map" } else { "array" });
                if let Some(f) = format {
                    words.extend([gen_case(&mut self.rng, "FORMAT"), f.as_bytes().to_vec()]);
                }
                self.lease_call("rl_acquire", words, format);
            }
            1 => {
                let id = id(&mut self.rng);
                self.lease_call("rl_release", vec![id], None);
            }
            2 => {
                let ttl = if self.rng.pct(85) {
                    (1 + self.rng.below(20_000)).to_string().into_bytes()
                } else {
                    gen_int_text(&mut self.rng, 1)
                };
                let words = vec![id(&mut self.rng), gen_case(&mut self.rng, "TTL"), ttl];
                self.lease_call("rl_extend", words, None);
            }
            _ => self.lease_call("rl_inflight", Vec::new(), None),
        }
    }

    fn lease_call(&mut self, function: &str, words: Vec<Vec<u8>>, format: Option<&str>) {
        self.cases += 1;
        let before = self.db.borrow().keys.clone();
        let now = self.db.borrow().now_ms();
        let model = self.expect_lease(function, &words, format, now);
        let (reply, propagated) = self.host.call(function, &[LEASE_KEY.to_vec()], &words);
        let call = format!(
            "FCALL {function} 1 l {}\n  now_ms {now}\n  before {before:?}",
            words.iter().map(|w| text(w)).collect::<Vec<_>>().join(" ")
        );
        let after = self.db.borrow().keys.clone();
        let Ok((expect, plan)) = model else {
            let expect = model.unwrap_err();
            assert_eq!(reply, expect, "{call}");
            assert_eq!(after, before, "{call}\n  an error changed the keyspace");
            assert!(
                propagated.is_empty(),
                "{call}\n  an error propagated {propagated:?}"
            );
            self.see("lease error");
            return;
        };
        // A generated id: `<now hex>-<16 hex>`, whatever the nonce.
        let mut expect = expect;
        let mut put = plan.put;
        let got_id = match &reply {
            Reply::Array(got) => got.get(4).cloned(),
            Reply::Map(pairs) => pairs
                .iter()
                .find(|(k, _)| *k == Reply::Status("lease_id".into()))
                .map(|(_, v)| v.clone()),
            _ => None,
        };
        if let Reply::Array(want) = &mut expect {
            if let (Some(Reply::Bulk(id)), Some(Reply::Bulk(generated))) = (&got_id, want.get(4)) {
                if generated.as_slice() == b"<generated>" {
                    let text = text(id);
                    let (ms, nonce) = text
                        .split_once('-')
                        .unwrap_or_else(|| panic!("{call}\n  id {text}"));
                    assert_eq!(
                        i64::from_str_radix(ms, 16).ok(),
                        Some(now),
                        "{call}\n  id {text}"
                    );
                    assert!(
                        nonce.len() == 16 && u64::from_str_radix(nonce, 16).is_ok(),
                        "{call}\n  id {text}"
                    );
                    want[4] = Reply::Bulk(id.clone());
                    if let Some(p) = put.as_mut() {
                        p.0 = id.clone();
                    }
                }
            }
        }
        let expect = match format {
            Some("map") => as_map(
                &[
                    "acquired",
                    "limit",
                    "in_flight",
                    "retry_after_ms",
                    "lease_id",
                ],
                expect,
            ),
            _ => expect,
        };
        assert_eq!(reply, expect, "{call}");
        // Live leases and the key's expiry as the plan leaves them; expired
        // leases it did not reclaim may stay (never new ones).
        let live = |keys: &BTreeMap<Vec<u8>, Entry>| -> BTreeMap<Vec<u8>, i64> {
            match keys.get(LEASE_KEY) {
                Some(Entry {
                    val: Val::Zset(z), ..
                }) => z
                    .iter()
                    .filter(|(_, &s)| s as i64 > now)
                    .map(|(m, &s)| (m.clone(), s as i64))
                    .collect(),
                _ => BTreeMap::new(),
            }
        };
        let mut want_live = live(&before);
        for id in &plan.remove {
            want_live.remove(id);
        }
        if let Some((id, deadline)) = &put {
            want_live.insert(id.clone(), *deadline);
        }
        assert_eq!(live(&after), want_live, "{call}\n  live leases after it");
        if !plan.writes {
            assert_eq!(after, before, "{call}\n  a call that writes nothing");
        } else if let Some(Entry {
            val: Val::Zset(z),
            at,
        }) = after.get(LEASE_KEY)
        {
            let old = match before.get(LEASE_KEY) {
                Some(Entry {
                    val: Val::Zset(old),
                    ..
                }) => old.clone(),
                _ => BTreeMap::new(),
            };
            for (m, &s) in z.iter().filter(|(_, &s)| s as i64 <= now) {
                assert_eq!(
                    old.get(m),
                    Some(&s),
                    "{call}\n  an expired lease {} appeared",
                    text(m)
                );
            }
            assert_eq!(*at, plan.expires_at, "{call}\n  the key's expiry");
        } else {
            assert!(want_live.is_empty(), "{call}\n  the key is gone");
        }
        match plan.writes {
            true => assert!(
                !propagated.is_empty(),
                "{call}\n  wrote without propagating"
            ),
            false => assert!(
                propagated.is_empty(),
                "{call}\n  propagated {propagated:?} on a call that writes nothing"
            ),
        }
        self.see(if plan.writes {
            "lease wrote"
        } else {
            "lease wrote nothing"
        });
    }

    /// The reply (a generated id as `<generated>`) and the plan, or the error.
    fn expect_lease(
        &mut self,
        function: &str,
        words: &[Vec<u8>],
        format: Option<&str>,
        now: i64,
    ) -> Result<(Reply, OwnedPlan), Reply> {
        let mut argv: Vec<&[u8]> = vec![b"RL.X", LEASE_KEY];
        let end = words.len() - if format.is_some() { 2 } else { 0 };
        argv.extend(words[..end].iter().map(Vec::as_slice));
        let nothing = OwnedPlan::default();
        let held = |db: &mut Db, named: Option<&[u8]>| -> Result<Held, Reply> {
            let z = match db.live(LEASE_KEY) {
                None => BTreeMap::new(),
                Some(Entry {
                    val: Val::Zset(z), ..
                }) => z.clone(),
                Some(_) => return Err(Reply::Error(WRONGTYPE.into())),
            };
            let sorted = Db::zsorted(&z);
            let n = sorted.len();
            Ok(Held {
                members: n as i64,
                expired: sorted.iter().filter(|(_, s)| *s as i64 <= now).count() as i64,
                reclaimable: sorted
                    .iter()
                    .filter(|(_, s)| *s as i64 <= now)
                    .take(valkey_ratelimit::algo::lease::RECLAIM_MAX)
                    .map(|(m, _)| m.clone())
                    .collect(),
                earliest_live: sorted.iter().map(|(_, s)| *s as i64).find(|&s| s > now),
                last: sorted.last().map(|(m, s)| (m.clone(), *s as i64)),
                before_last: (n >= 2).then(|| sorted[n - 2].1 as i64),
                named: named.and_then(|id| z.get(id).map(|&s| s as i64)),
            })
        };
        let too_late = RlError::TooLarge("TTL", "the lease deadline passes 2^53 ms");
        let mut db = self.db.borrow_mut();
        match function {
            "rl_acquire" => {
                let opts = args::lease::acquire(&argv).map_err(err)?;
                let given = opts.id.map(|at| argv[at].to_vec());
                let Some(limit) = opts.limit.filter(|&l| l > 0) else {
                    let id = given.unwrap_or_else(|| b"<generated>".to_vec());
                    return Ok((
                        Reply::Array(vec![
                            Reply::Int(1),
                            Reply::Int(0),
                            Reply::Int(0),
                            Reply::Int(0),
                            Reply::Bulk(id),
                        ]),
                        nothing,
                    ));
                };
                let Some(ttl) = opts.ttl else {
                    return Err(err(RlError::NoTtl));
                };
                lease::deadline_after(now, ttl).ok_or(err(too_late))?;
                if i128::from(limit) > EXACT {
                    return Err(Reply::Error(BEYOND_DOUBLES.into()));
                }
                let held = held(&mut db, given.as_deref())?;
                let wanted = match &given {
                    Some(id) => WantedId::Given(id),
                    None => WantedId::Generated(0),
                };
                let (answer, plan) = lease::acquire(&held, now, limit, ttl, wanted);
                let id = match (&answer.lease_id, &given) {
                    (None, _) => Reply::Nil,
                    (Some(_), None) => Reply::Bulk(b"<generated>".to_vec()),
                    (Some(id), Some(_)) => Reply::Bulk(id.clone()),
                };
                let reply = Reply::Array(vec![
                    Reply::Int(i64::from(answer.acquired)),
                    Reply::Int(answer.limit),
                    Reply::Int(answer.in_flight),
                    Reply::Int(answer.retry_after_ms),
                    id,
                ]);
                Ok((reply, OwnedPlan::of(&plan)))
            }
            "rl_release" => {
                let id = args::lease::release(&argv).map_err(err)?;
                let held = held(&mut db, Some(id))?;
                let (released, plan) = lease::release(&held, now, id);
                Ok((Reply::Int(i64::from(released)), OwnedPlan::of(&plan)))
            }
            "rl_extend" => {
                let (id, ttl) = args::lease::extend(&argv).map_err(err)?;
                lease::deadline_after(now, ttl).ok_or(err(too_late))?;
                let held = held(&mut db, Some(id))?;
                let (extended, plan) = lease::extend(&held, now, id, ttl);
                Ok((Reply::Int(i64::from(extended)), OwnedPlan::of(&plan)))
            }
            _ => {
                let held = held(&mut db, None)?;
                Ok((Reply::Int(lease::in_flight(&held)), nothing))
            }
        }
    }
}

/// A lease plan with owned ids.
#[derive(Debug, Default)]
struct OwnedPlan {
    remove: Vec<Vec<u8>>,
    put: Option<(Vec<u8>, i64)>,
    expires_at: Option<i64>,
    writes: bool,
}

impl OwnedPlan {
    fn of(plan: &lease::Plan) -> OwnedPlan {
        OwnedPlan {
            remove: plan.remove.iter().map(|id| id.to_vec()).collect(),
            put: plan.put.clone(),
            expires_at: plan.expires_at,
            writes: plan.writes,
        }
    }
}

// ------------------------------------------------------------ the tests

/// Over 100,000 random calls of every function, each compared with
/// `src/algo`: the reply, the keyspace after it (values and expiries), and
/// that it propagated something exactly when it wrote. The library is
/// loaded again now and then, so its memo starts empty too.
#[test]
fn the_library_in_process_decides_as_src_algo() {
    let seed = seed("the_library_in_process_decides_as_src_algo");
    let mut run = Run::new(seed);
    let cases = std::env::var("RL_LUA_CASES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(100_000);
    let mut next_reload = 20_000;
    while run.cases < cases {
        match run.rng.below(100) {
            0..=44 => run.limiter_case("rl_admit"),
            45..=56 => run.limiter_case("rl_refund"),
            57..=64 => run.limiter_case("rl_ttl"),
            65..=78 => run.throttle_case(),
            79..=85 => run.admitall_case(),
            86..=97 => run.lease_case(),
            _ => run.meta_case(),
        }
        if run.cases >= next_reload {
            run.host = Host::load(run.db.clone());
            next_reload += 20_000;
        }
    }
    println!("{} cases: {:?}", run.cases, run.seen);
    let mut errors: Vec<_> = run.errors.iter().collect();
    errors.sort_by_key(|(_, n)| std::cmp::Reverse(**n));
    for (e, n) in errors.iter().take(12) {
        println!("{n:7}  {e}");
    }
    for (what, least) in [
        ("error", 1000),
        ("wrote", 10_000),
        ("wrote nothing", 5000),
        ("admitted", 5000),
        ("refused", 2000),
        ("lease wrote", 1000),
        ("lease wrote nothing", 1000),
        ("lease error", 100),
    ] {
        let n = run.seen.get(what).copied().unwrap_or(0);
        assert!(
            n * 100_000 >= least * cases,
            "only {n} cases ended as '{what}'"
        );
    }
    for error in [
        &BEYOND_DOUBLES[..48],
        &STATE_BEYOND_DOUBLES[..48],
        &WRONGTYPE[..48],
    ] {
        assert!(run.errors.contains_key(error), "no case answered {error}");
    }
}
