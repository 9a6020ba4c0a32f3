//! The two backends of the limiter behind one test API: the module (`RL.*`
//! on a server started with it) and the FUNCTION library
//! `functions/ratelimit.lua` (`FCALL rl_*` on a server started without the
//! module, with `enable-module-command no`). Scenarios are written once, in
//! the module's syntax; `fcall_form` turns a call into the library's.
//!
//! Also here: `run_scenario`, which runs calls in one MULTI/EXEC (the clock
//! frozen), presets keys relative to that frozen `now`, and returns a
//! transcript with every absolute time rewritten relative to `now`, so the
//! transcripts of two servers compare exactly.

use std::fs;
use std::path::{Path, PathBuf};
use std::thread;
use std::time::Instant;

use redis::{Connection, ConnectionLike, Value};

use super::{cmd_raw, show, Server};

/// Which implementation answers the calls.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    /// The module, `RL.*`.
    Module,
    /// The FUNCTION library, `FCALL rl_*`, on a server without the module.
    Functions,
}

/// Both, module first.
pub const BOTH: [Backend; 2] = [Backend::Module, Backend::Functions];

/// The server arguments every library server gets: no module can be loaded.
pub const NO_MODULES: &[&str] = &["--enable-module-command", "no"];

impl Backend {
    /// A server for this backend with the default test configuration.
    pub fn start(self) -> Server {
        self.start_with(&[])
    }

    /// A server for this backend with extra config arguments: the module
    /// loaded, or no module, `enable-module-command no` and the library
    /// loaded.
    pub fn start_with(self, extra: &[&str]) -> Server {
        match self {
            Backend::Module => Server::start_with(extra),
            Backend::Functions => {
                let server = start_without_module(extra);
                load_library(&mut server.client());
                server
            }
        }
    }

    /// A server for this backend whose clock stands still at `at` (UTC,
    /// `YYYY-MM-DD hh:mm:ss[.fff]`, see `Server::start_frozen_at`); `None`
    /// when libfaketime is missing and the test may skip.
    pub fn start_frozen_at(self, at: &str) -> Option<Server> {
        match self {
            Backend::Module => Server::start_frozen_at(at, &[], true),
            Backend::Functions => {
                let server = Server::start_frozen_at(at, NO_MODULES, false)?;
                load_library(&mut server.client());
                Some(server)
            }
        }
    }

    /// Graceful stop and start again with the same port, dir and arguments,
    /// without loading anything: what survives is what the server persisted
    /// (the library included).
    pub fn restart(self, server: &mut Server) {
        server.restart();
    }

    /// The call this backend runs for a call written in the module's syntax.
    pub fn call(self, module_call: &[&str]) -> Vec<String> {
        match self {
            Backend::Module => module_call.iter().map(|w| w.to_string()).collect(),
            Backend::Functions => fcall_form(module_call),
        }
    }

    /// `call`, for a call held as owned words.
    pub fn call_owned(self, module_call: &[String]) -> Vec<String> {
        let words: Vec<&str> = module_call.iter().map(String::as_str).collect();
        self.call(&words)
    }

    /// Runs a call written in the module's syntax; the raw reply (an error
    /// reply as `Value::ServerError`).
    pub fn raw(self, con: &mut Connection, module_call: &[&str]) -> Value {
        let words = self.call(module_call);
        let words: Vec<&str> = words.iter().map(String::as_str).collect();
        cmd_raw(con, &words)
    }
}

/// `functions/ratelimit.lua` in this repo.
pub fn library_path() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("functions/ratelimit.lua")
}

/// The library's source; panics with a clear message when it is missing.
pub fn library_source() -> String {
    let path = library_path();
    fs::read_to_string(&path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()))
}

/// `FUNCTION LOAD REPLACE` of the library; the server must answer its name.
pub fn load_library(con: &mut Connection) {
    let reply = cmd_raw(con, &["FUNCTION", "LOAD", "REPLACE", &library_source()]);
    assert_eq!(
        reply,
        Value::BulkString(b"ratelimit".to_vec()),
        "FUNCTION LOAD REPLACE functions/ratelimit.lua"
    );
}

/// The module's name of a limiter command and the library's function for
/// it, with whether the function is called with FCALL_RO.
const FUNCTIONS: &[(&str, &str, bool)] = &[
    ("RL.ADMIT", "rl_admit", false),
    ("RL.TTL", "rl_ttl", true),
    ("RL.LIMIT", "rl_limit", true),
    ("RL.ADMITALL", "rl_admitall", false),
    ("RL.REFUND", "rl_refund", false),
    ("RL.RESET", "rl_reset", false),
    ("RL.THROTTLE", "rl_throttle", false),
    ("RL.ACQUIRE", "rl_acquire", false),
    ("RL.RELEASE", "rl_release", false),
    ("RL.EXTEND", "rl_extend", false),
    ("RL.INFLIGHT", "rl_inflight", true),
];

/// The options that are a keyword alone (src/args.rs `Value::Flag`).
pub const FLAGS: &[&str] = &["SHADOW", "ALIGN", "FORCE"];

/// A module call as the library takes it: every key a key, so the META hash
/// of RL.ADMIT/TTL/REFUND moves from its option into KEYS[2], and RL.TTL and
/// RL.LIMIT use FCALL_RO. Anything that is not an `RL.*` call (SET, GET, ...)
/// is returned unchanged. A malformed call stays malformed: words are never
/// dropped, only a META that has its value is moved.
pub fn fcall_form(call: &[&str]) -> Vec<String> {
    let Some((name, args)) = call.split_first() else {
        return Vec::new();
    };
    let Some(&(_, function, read_only)) = FUNCTIONS
        .iter()
        .find(|(module, _, _)| module.eq_ignore_ascii_case(name))
    else {
        return call.iter().map(|w| w.to_string()).collect();
    };
    let fcall = if read_only { "FCALL_RO" } else { "FCALL" };
    let mut out: Vec<String> = vec![fcall.into(), function.into()];
    let owned = |words: &[&str]| -> Vec<String> { words.iter().map(|w| w.to_string()).collect() };
    match function {
        "rl_admitall" => out.extend(admitall_form(args)),
        "rl_admit" | "rl_ttl" | "rl_refund" | "rl_acquire" => match args.split_first() {
            None => out.push("0".into()),
            Some((key, options)) => {
                // Options come in name-value pairs, but for the flags
                // (a keyword alone); the first META with a value is the
                // META hash.
                let mut meta_at = None;
                let mut i = 0;
                while i < options.len() {
                    if FLAGS.iter().any(|f| options[i].eq_ignore_ascii_case(f)) {
                        i += 1;
                        continue;
                    }
                    if options[i].eq_ignore_ascii_case("META") && i + 1 < options.len() {
                        meta_at = Some(i);
                        break;
                    }
                    i += 2;
                }
                match meta_at {
                    Some(i) => {
                        out.extend(owned(&["2", key, options[i + 1]]));
                        out.extend(owned(&options[..i]));
                        out.extend(owned(&options[i + 2..]));
                    }
                    None => {
                        out.extend(owned(&["1", key]));
                        out.extend(owned(options));
                    }
                }
            }
        },
        // RL.LIMIT, RL.RESET, RL.THROTTLE and the other lease commands
        // take one key, first.
        _ => match args.split_first() {
            None => out.push("0".into()),
            Some((key, rest)) => {
                out.extend(owned(&["1", key]));
                out.extend(owned(rest));
            }
        },
    }
    out
}

/// RL.ADMITALL's arguments (after the name) in the library's form: the
/// counters and then each META hash a POLICY names (once, in order of
/// appearance) as keys, the options unchanged (a POLICY still names its META
/// hash by key name). A call whose numkeys is not a count of the words that
/// follow goes through unchanged, numkeys included, for the library (or
/// FCALL) to refuse.
fn admitall_form(args: &[&str]) -> Vec<String> {
    let owned = || args.iter().map(|w| w.to_string()).collect::<Vec<String>>();
    let Some(numkeys) = args.first().and_then(|n| n.parse::<usize>().ok()) else {
        return owned();
    };
    if numkeys == 0 || numkeys + 1 > args.len() {
        return owned();
    }
    let counters = &args[1..=numkeys];
    let options = &args[numkeys + 1..];
    let mut metas: Vec<&str> = Vec::new();
    for pair in options.windows(2) {
        if pair[0].eq_ignore_ascii_case("META") && !metas.contains(&pair[1]) {
            metas.push(pair[1]);
        }
    }
    let mut out = vec![(numkeys + metas.len()).to_string()];
    out.extend(
        counters
            .iter()
            .chain(&metas)
            .chain(options)
            .map(|w| w.to_string()),
    );
    out
}

/// A server with no module loaded and `enable-module-command no` (plus
/// `extra`), on 127.0.0.1, as `Server::start_with` starts one with the
/// module.
pub fn start_without_module(extra: &[&str]) -> Server {
    let args: Vec<&str> = NO_MODULES.iter().chain(extra).copied().collect();
    Server::start_without_module(&args)
}

// Scenarios on a frozen clock.

/// A step of a scenario, in the module's syntax.
#[derive(Debug, Clone)]
pub enum Step {
    /// A call, translated for the backend.
    Call(Vec<String>),
    /// `SET key value`, the value's `{ms+N}`, `{ns+N}`, `{at+N}` and
    /// `{win W+k}` fields resolved against the frozen `now` (ms; ns, from
    /// the clock's µs; N ms from now's µs as a ms and the ns into it, a
    /// token bucket's last refill; the start of the W-aligned window k
    /// windows from now's), with an expiry `pxat` ms from now, or none.
    Preset {
        key: String,
        value: String,
        pxat: Option<i64>,
    },
}

/// A call step from words of any kind: `call!["RL.ADMIT", "k", "LIMIT", 3]`.
#[allow(unused_macros)]
macro_rules! call {
    ($($w:expr),* $(,)?) => {
        $crate::common::backend::Step::Call(vec![$($w.to_string()),*])
    };
}
#[allow(unused_imports)]
pub(crate) use call;

/// A preset step: a key set to a value before or between the calls (not
/// the random generator's seed, `common::seed`).
pub fn preset(key: &str, value: &str, pxat: Option<i64>) -> Step {
    Step::Preset {
        key: key.into(),
        value: value.into(),
        pxat,
    }
}

/// Sets KEYS[1] to ARGV[1] with its time fields resolved against the
/// server's `now` (frozen inside MULTI/EXEC), expiring ARGV[2] ms from
/// then unless ARGV[2] is empty. ns are built as strings: they pass 2^53.
const PRESET_SCRIPT: &str = r#"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local sub = (tonumber(t[2]) % 1000) * 1000
-- now (µs) + off ns, as its ms and the ns into that ms
local function split(off)
  local q = math.floor(off / 1000000)
  local into = off - q * 1000000 + sub
  if into >= 1000000 then q, into = q + 1, into - 1000000 end
  return now + q, into
end
local function ns(off) return string.format('%d%06d', split(off)) end
local v = string.gsub(ARGV[1], '{(%a+)([^}]*)}', function(kind, arg)
  if kind == 'ms' then return string.format('%d', now + tonumber(arg)) end
  if kind == 'ns' then return ns(tonumber(arg)) end
  if kind == 'at' then return string.format('%d:%d', split(tonumber(arg) * 1000000)) end
  if kind == 'win' then
    local w, k = string.match(arg, '^%s*(%d+)%s*([-+]%d+)$')
    w, k = tonumber(w), tonumber(k)
    return string.format('%d', now - now % w + k * w)
  end
  return error('unknown preset field ' .. kind)
end)
if ARGV[2] == '' then return redis.call('SET', KEYS[1], v) end
return redis.call('SET', KEYS[1], v, 'PXAT', now + tonumber(ARGV[2]))
"#;

/// What a scenario did on one backend, with every absolute time relative
/// to the frozen `now`: comparable across servers.
#[derive(Debug, Clone)]
pub struct Transcript {
    /// One line per call step: the reply in `show` form.
    pub replies: Vec<String>,
    /// Per watched key: `key type value expiry`, value and expiry relative.
    pub state: Vec<String>,
    /// Per watched key holding a token bucket: its expiry, in ms from now's
    /// ms (the line ends `~now+K`).
    pub token_expiry: Vec<Option<i64>>,
    /// The ns into its ms the clock stood at (whole µs).
    pub phase: i64,
}

/// Equal transcripts: the same replies and state lines, but for a token
/// bucket's expiry. That is the ms its state ends in (the end of its debt
/// after its last refill, both to the µs), so it depends on where in its ms
/// each server's clock stood, and the bucket's capacity, which would pin it,
/// is the policy's. Two servers agree when some end fits both: with now at
/// phase p, expiring K ms on says the end is in (K - 1, K] ms - p after now.
impl PartialEq for Transcript {
    fn eq(&self, other: &Transcript) -> bool {
        let ends = |k: i64, phase: i64| (k * 1_000_000 - phase - 1_000_000, k * 1_000_000 - phase);
        let line = |a: &str, b: &str, ka: Option<i64>, kb: Option<i64>| match (ka, kb) {
            (Some(ka), Some(kb)) => {
                let (a_lo, a_hi) = ends(ka, self.phase);
                let (b_lo, b_hi) = ends(kb, other.phase);
                a.rsplit_once(' ').map(|x| x.0) == b.rsplit_once(' ').map(|x| x.0)
                    && a_lo < b_hi
                    && b_lo < a_hi
            }
            _ => a == b,
        };
        self.replies == other.replies
            && self.state.len() == other.state.len()
            && (0..self.state.len()).all(|i| {
                line(
                    &self.state[i],
                    &other.state[i],
                    self.token_expiry[i],
                    other.token_expiry[i],
                )
            })
    }
}

/// Runs `steps` on `backend` in one MULTI/EXEC after TIME, followed by the
/// TYPE, GET and PEXPIRETIME of each of `keys`, on a flushed database. With
/// `pin = Some((period, phase))`, retried (flushing again) until `now %
/// period == phase`, so window-aligned algorithms (sliding) see the same
/// phase on every server.
pub fn run_scenario(
    backend: Backend,
    con: &mut Connection,
    steps: &[Step],
    keys: &[&str],
    pin: Option<(i64, i64)>,
) -> Transcript {
    let mut cmds: Vec<Vec<String>> = vec![vec!["TIME".into()]];
    for step in steps {
        cmds.push(match step {
            Step::Call(words) => backend.call_owned(words),
            Step::Preset { key, value, pxat } => vec![
                "EVAL".into(),
                PRESET_SCRIPT.into(),
                "1".into(),
                key.clone(),
                value.clone(),
                pxat.map(|p| p.to_string()).unwrap_or_default(),
            ],
        });
    }
    for key in keys {
        cmds.push(vec!["TYPE".into(), key.to_string()]);
        cmds.push(vec!["GET".into(), key.to_string()]);
        cmds.push(vec!["PEXPIRETIME".into(), key.to_string()]);
    }
    for _ in 0..10_000 {
        assert_eq!(cmd_raw(con, &["FLUSHALL"]), Value::Okay);
        if let Some((period, phase)) = pin {
            // Sleep until just before the phase, then poll TIME until the
            // phase's ms begins: the transaction sent right then runs in it
            // unless the machine stalls (then this attempt is repeated).
            let now = super::server_time_ms(con);
            let wait = (phase - 2 - now).rem_euclid(period);
            thread::sleep(std::time::Duration::from_millis(wait as u64));
            let poll_start = Instant::now();
            while super::server_time_ms(con).rem_euclid(period) != phase
                && poll_start.elapsed().as_millis() < 5
            {}
        }
        let mut replies = exec_pipelined(con, &cmds);
        let now_us = super::time_us(&replies.remove(0));
        let now = now_us.div_euclid(1_000);
        if pin.is_some_and(|(period, phase)| now.rem_euclid(period) != phase) {
            continue;
        }
        let (steps_part, state_part) = replies.split_at(steps.len());
        let mut out = Transcript {
            replies: Vec::new(),
            state: Vec::new(),
            token_expiry: Vec::new(),
            phase: now_us.rem_euclid(1_000) * 1_000,
        };
        for (step, reply) in steps.iter().zip(steps_part) {
            match step {
                Step::Call(_) => out.replies.push(show(reply)),
                Step::Preset { key, .. } => {
                    assert_eq!(reply, &Value::Okay, "{backend:?}: presetting {key}")
                }
            }
        }
        for (key, parts) in keys.iter().zip(state_part.chunks(3)) {
            let raw = match &parts[1] {
                Value::BulkString(b) => Some(String::from_utf8_lossy(b).into_owned()),
                _ => None,
            };
            let value = match &raw {
                Some(raw) => relative(raw, now_us),
                None => show(&parts[1]),
            };
            // A bucket's times in ns follow the µs of the clock, which
            // differ from server to server, and so does the ms its key
            // expires in: said as what it must be where the value tells (the
            // end of the ms its time falls in), else compared as `eq` says.
            let token = raw.as_deref().is_some_and(|v| v.starts_with("token:"));
            let expiry = match &parts[2] {
                Value::Int(t) if raw.as_deref().and_then(bucket_end) == Some(*t) => {
                    "at the end of its time's ms".to_string()
                }
                Value::Int(t) if *t >= 0 && token => format!("~now{:+}", t - now),
                Value::Int(t) if *t >= 0 => format!("now{:+}", t - now),
                other => show(other),
            };
            out.token_expiry.push(match &parts[2] {
                Value::Int(t) if *t >= 0 && token => Some(t - now),
                _ => None,
            });
            out.state
                .push(format!("{key} {} {value} {expiry}", show(&parts[0])));
        }
        return out;
    }
    panic!("{backend:?}: the clock never showed phase {pin:?}");
}

/// `super::exec` in one write: MULTI, the commands and EXEC sent together,
/// so the transaction starts within a fraction of a ms of the send (the
/// clock phase a pinned scenario waited for). Returns EXEC's replies.
fn exec_pipelined(con: &mut Connection, cmds: &[Vec<String>]) -> Vec<Value> {
    let mut pipe = redis::pipe();
    pipe.cmd("MULTI");
    for cmd in cmds {
        let words: Vec<&str> = cmd.iter().map(String::as_str).collect();
        pipe.add_command(super::make_cmd(&words));
    }
    pipe.cmd("EXEC");
    let mut replies = con
        .req_packed_commands(&pipe.get_packed_pipeline(), cmds.len() + 1, 1)
        .unwrap_or_else(|e| panic!("MULTI/EXEC of {} commands: {e}", cmds.len()));
    match replies.pop() {
        Some(Value::Array(replies)) if replies.len() == cmds.len() => replies,
        other => panic!("EXEC replied {other:?}"),
    }
}

/// The ms a GCRA or leaky state's time (ns) falls in, rounded up: its key's
/// expiry. RL.THROTTLE's state may be a bare ns integer.
fn bucket_end(value: &str) -> Option<i64> {
    let tat = ["gcra:", "leaky:", ""]
        .iter()
        .find_map(|prefix| value.strip_prefix(prefix)?.parse::<i128>().ok())?;
    i64::try_from((tat + 999_999).div_euclid(1_000_000)).ok()
}

/// A stored value with its time fields (colon-separated integers within
/// ~115 days of `now`, in ms or in ns) written relative to `now` (µs); a
/// token bucket's last refill, a ms and the ns into it, as one ns time.
pub fn relative(value: &str, now_us: i64) -> String {
    let now_ms = i128::from(now_us.div_euclid(1_000));
    let now_ns = i128::from(now_us) * 1_000;
    let fields: Vec<&str> = value.split(':').collect();
    if let ["token", credit, ms, into] = fields[..] {
        if let (Ok(ms), Ok(into @ 0..=999_999)) = (ms.parse::<i128>(), into.parse::<i128>()) {
            return format!("token:{credit}:ns{:+}", ms * 1_000_000 + into - now_ns);
        }
    }
    let time = |field: &str| match field.parse::<i128>() {
        Ok(v) if (v - now_ms).abs() <= 10_000_000_000 => format!("ms{:+}", v - now_ms),
        Ok(v) if (v - now_ns).abs() <= 10_000_000_000_000_000 => {
            format!("ns{:+}", v - now_ns)
        }
        _ => field.to_string(),
    };
    value
        .split(':')
        .map(|field| match field.split_once('/') {
            // A penalty ladder's `<until>/<length>`: the time relative.
            Some((until, len)) => format!("{}/{len}", time(until)),
            None => time(field),
        })
        .collect::<Vec<_>>()
        .join(":")
}
