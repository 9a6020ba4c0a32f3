//! Rate-limit an HTTP handler with RL.ADMIT, using the `redis` crate.
//!
//! `handle_request` is what a web framework's middleware would call: it counts
//! the request against the client's limiter with one RL.ADMIT and maps the
//! reply onto the IETF RateLimit header fields
//! (draft-ietf-httpapi-ratelimit-headers):
//!
//! ```text
//! RateLimit-Policy: "default";q=100;w=60   the quota: q requests per w seconds
//! RateLimit: "default";r=42;t=17           r remaining, t seconds to the reset
//! Retry-After: 17                          only on 429, seconds, rounded up
//! ```
//!
//! Run it against a server with the module loaded (`make run`):
//!
//! ```sh
//! cargo run --release --example rust_handler -- --port 6379 --client acme --limit 3 -n 4
//! ```
//!
//! It prints the N responses as HTTP/1.1 text. The port also comes from
//! `$VALKEY_PORT`, the host from `$VALKEY_HOST`.
//!
//! With `--queue N` the policy shapes instead of capping: a leaky bucket
//! (`ALGO leaky BURST N`) lets requests proceed `--limit` per `--window`, one
//! interval apart, with up to N waiting. An admitted request told to wait
//! (`retry_after_ms` > 0) is held that long, then served; only a request that
//! would find the queue full is refused (429).
//!
//! With `--lease N` the handler caps work in flight instead of its rate:
//! `with_lease` takes one of N slots on the client's semaphore
//! `rl:{<client id>}:inflight` (RL.ACQUIRE, lasting `--ttl` ms), runs the
//! work, and gives the slot back (RL.RELEASE). A request that finds all N
//! slots taken gets 429 with Retry-After: the seconds until the earliest
//! lease would end by itself. A handler that crashes mid-work frees its slot
//! at the lease's deadline; work longer than a TTL would call
//! `RL.EXTEND key id TTL ms` every TTL / 3 and stop when it answers 0.
//!
//! `--cluster` connects with the `redis` crate's cluster client (its
//! `cluster` feature): give it any node, it finds the others and sends each
//! RL.ADMIT to the node that owns its key's slot (a command it does not know
//! is routed by its first argument, which is RL.ADMIT's key). The key carries
//! the client id as a `{hash tag}`, so all of one client's keys share a slot.

use std::env;
use std::process::ExitCode;
use std::thread;
use std::time::Duration;

use redis::ConnectionLike;

/// One quota: `limit` requests per `window_s` seconds, fixed window; or,
/// with `queue`, that rate as a leaky bucket with `queue` places to wait.
struct Policy {
    name: String,
    limit: u64,
    window_s: u64,
    queue: Option<u64>,
}

impl Policy {
    /// RL.ADMIT's policy options.
    fn options(&self) -> Vec<String> {
        let mut opts = vec![
            "LIMIT".to_string(),
            self.limit.to_string(),
            "WINDOW".to_string(),
            self.window_s.saturating_mul(1000).to_string(),
        ];
        if let Some(queue) = self.queue {
            let leaky = ["ALGO", "leaky", "BURST", &queue.to_string()].map(String::from);
            opts.extend(leaky);
        }
        opts
    }
}

/// What the handler answers: status, headers (in order) and body.
struct Response {
    status: u16,
    headers: Vec<(&'static str, String)>,
    body: String,
}

/// The counter's key: `rl:{<client id>}:<policy>`, the client id as hash tag.
fn limiter_key(client_id: &str, policy: &Policy) -> Result<String, String> {
    if client_id.contains(['{', '}']) {
        return Err("client id must not contain '{' or '}'".into());
    }
    Ok(format!("rl:{{{client_id}}}:{}", policy.name))
}

/// Milliseconds to whole seconds, rounded up: a client that waits that long is
/// never early.
fn ceil_seconds(ms: i64) -> i64 {
    (ms + 999).div_euclid(1000)
}

/// A JSON string literal (client ids are caller input).
fn json_string(s: &str) -> String {
    let mut out = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// Admit or refuse one request of `client_id`.
fn handle_request(
    con: &mut impl ConnectionLike,
    client_id: &str,
    policy: &Policy,
) -> redis::RedisResult<Response> {
    let json = ("Content-Type", "application/json".to_string());
    let key = match limiter_key(client_id, policy) {
        Ok(key) => key,
        Err(e) => {
            return Ok(Response {
                status: 400,
                headers: vec![json],
                body: format!("{{\"error\":{}}}", json_string(&e)),
            })
        }
    };
    let reply: Vec<i64> = redis::cmd("RL.ADMIT")
        .arg(&key)
        .arg(policy.options())
        .query(con)?;
    let [admitted, limit, remaining, retry_after_ms, reset_after_ms] = reply[..] else {
        return Err(redis::RedisError::from((
            redis::ErrorKind::TypeError,
            "RL.ADMIT: expected 5 integers",
            format!("{reply:?}"),
        )));
    };
    let name = &policy.name;
    let mut headers = Vec::new();
    if limit > 0 && policy.queue.is_none() {
        // 0: unlimited, nothing to advertise; a leaky bucket's `limit` is its
        // queue, not a quota.
        headers.push((
            "RateLimit-Policy",
            format!("\"{name}\";q={limit};w={}", policy.window_s),
        ));
        headers.push((
            "RateLimit",
            format!(
                "\"{name}\";r={remaining};t={}",
                ceil_seconds(reset_after_ms)
            ),
        ));
    }
    let (status, body) = if admitted == 1 && policy.queue.is_some() {
        // Shaping: wait for this request's turn, then serve it.
        let waited_ms = retry_after_ms.max(0);
        thread::sleep(Duration::from_millis(waited_ms.unsigned_abs()));
        (
            200,
            format!(
                "{{\"ok\":true,\"client\":{},\"waited_ms\":{waited_ms}}}",
                json_string(client_id)
            ),
        )
    } else if admitted == 1 {
        (
            200,
            format!("{{\"ok\":true,\"client\":{}}}", json_string(client_id)),
        )
    } else if retry_after_ms < 0 {
        // The request costs more than the whole quota: waiting will not help.
        (429, "{\"error\":\"request exceeds the quota\"}".to_string())
    } else {
        let retry_after = ceil_seconds(retry_after_ms).max(1);
        headers.push(("Retry-After", retry_after.to_string()));
        (
            429,
            format!("{{\"error\":\"rate limited\",\"retry_after\":{retry_after}}}"),
        )
    };
    headers.push(json);
    Ok(Response {
        status,
        headers,
        body,
    })
}

/// The client's semaphore: `rl:{<client id>}:inflight`, in its limiters' slot.
fn lease_key(client_id: &str) -> Result<String, String> {
    if client_id.contains(['{', '}']) {
        return Err("client id must not contain '{' or '}'".into());
    }
    Ok(format!("rl:{{{client_id}}}:inflight"))
}

/// Runs `work` under one of `slots` leases on `key`, lasting `ttl_ms`:
/// `Ok(Ok(work's result))`, or `Ok(Err(retry_after_ms))` when every slot is
/// taken. `work` gets the number of leases in flight, its own included.
fn with_lease<T>(
    con: &mut impl ConnectionLike,
    key: &str,
    slots: u64,
    ttl_ms: u64,
    work: impl FnOnce(i64) -> T,
) -> redis::RedisResult<Result<T, i64>> {
    // [acquired, limit, in_flight, retry_after_ms, lease_id or nil]
    let (acquired, _limit, in_flight, retry_after_ms, id): (i64, i64, i64, i64, Option<String>) =
        redis::cmd("RL.ACQUIRE")
            .arg(key)
            .arg("LIMIT")
            .arg(slots)
            .arg("TTL")
            .arg(ttl_ms)
            .query(con)?;
    let Some(id) = id.filter(|_| acquired == 1) else {
        return Ok(Err(retry_after_ms));
    };
    let out = work(in_flight);
    let released: i64 = redis::cmd("RL.RELEASE").arg(key).arg(&id).query(con)?;
    if released == 0 {
        // The work outlived the lease: its slot may have been someone else's.
        eprintln!("lease {id} on {key} expired before the work ended");
    }
    Ok(Ok(out))
}

/// Runs one request of `client_id` under a lease, at most `slots` at once.
fn handle_leased_request(
    con: &mut impl ConnectionLike,
    client_id: &str,
    slots: u64,
    ttl_ms: u64,
) -> redis::RedisResult<Response> {
    let json = ("Content-Type", "application/json".to_string());
    let key = match lease_key(client_id) {
        Ok(key) => key,
        Err(e) => {
            return Ok(Response {
                status: 400,
                headers: vec![json],
                body: format!("{{\"error\":{}}}", json_string(&e)),
            })
        }
    };
    // The request's work is only to say how many ran with it.
    let response = match with_lease(con, &key, slots, ttl_ms, |in_flight| {
        format!(
            "{{\"ok\":true,\"client\":{},\"in_flight\":{in_flight}}}",
            json_string(client_id)
        )
    })? {
        Ok(body) => Response {
            status: 200,
            headers: vec![json],
            body,
        },
        Err(retry_after_ms) => {
            let retry_after = ceil_seconds(retry_after_ms).max(1);
            Response {
                status: 429,
                headers: vec![("Retry-After", retry_after.to_string()), json],
                body: format!("{{\"error\":\"too many in flight\",\"retry_after\":{retry_after}}}"),
            }
        }
    };
    Ok(response)
}

fn format_response(r: &Response) -> String {
    let reason = match r.status {
        200 => " OK",
        400 => " Bad Request",
        429 => " Too Many Requests",
        _ => "",
    };
    let mut out = format!("HTTP/1.1 {}{reason}\n", r.status);
    for (name, value) in &r.headers {
        out.push_str(&format!("{name}: {value}\n"));
    }
    out.push('\n');
    out.push_str(&r.body);
    out.push('\n');
    out
}

struct Args {
    host: String,
    port: u16,
    client: String,
    policy: Policy,
    requests: u64,
    cluster: bool,
    /// `--lease N`: at most N requests in flight, instead of the rate policy.
    lease: Option<u64>,
    ttl_ms: u64,
}

const USAGE: &str = "usage: rust_handler [--host H] [--port P] [--client ID] [--policy NAME] \
                     [--limit N] [--window SECONDS] [--queue N] [--lease N] [--ttl MS] \
                     [-n REQUESTS] [--cluster]";

fn parse_args() -> Result<Args, String> {
    let mut args = Args {
        host: env::var("VALKEY_HOST").unwrap_or_else(|_| "127.0.0.1".into()),
        port: match env::var("VALKEY_PORT") {
            Ok(p) => p.parse().map_err(|_| format!("bad $VALKEY_PORT {p:?}"))?,
            Err(_) => 6379,
        },
        client: "anonymous".into(),
        policy: Policy {
            name: "default".into(),
            limit: 100,
            window_s: 60,
            queue: None,
        },
        requests: 1,
        cluster: false,
        lease: None,
        ttl_ms: 30_000,
    };
    let mut it = env::args().skip(1);
    while let Some(flag) = it.next() {
        if flag == "-h" || flag == "--help" {
            println!("{USAGE}");
            std::process::exit(0);
        }
        if flag == "--cluster" {
            args.cluster = true;
            continue;
        }
        let value = it
            .next()
            .ok_or_else(|| format!("{flag} needs a value\n{USAGE}"))?;
        let bad = |_| format!("{flag}: not a valid number: {value:?}");
        match flag.as_str() {
            "--host" => args.host = value,
            "--port" => args.port = value.parse().map_err(bad)?,
            "--client" => args.client = value,
            "--policy" => args.policy.name = value,
            "--limit" => args.policy.limit = value.parse().map_err(bad)?,
            "--window" => args.policy.window_s = value.parse().map_err(bad)?,
            "--queue" => args.policy.queue = Some(value.parse().map_err(bad)?),
            "--lease" => args.lease = Some(value.parse().map_err(bad)?),
            "--ttl" => args.ttl_ms = value.parse().map_err(bad)?,
            "-n" | "--requests" => args.requests = value.parse().map_err(bad)?,
            _ => return Err(format!("unknown option {flag}\n{USAGE}")),
        }
    }
    Ok(args)
}

/// Send `args.requests` requests over `con` and print the responses.
fn serve(con: &mut impl ConnectionLike, args: &Args) -> Result<(), String> {
    for _ in 0..args.requests {
        let response = match args.lease {
            Some(slots) => handle_leased_request(con, &args.client, slots, args.ttl_ms)
                .map_err(|e| format!("RL.ACQUIRE/RL.RELEASE: {e}"))?,
            None => handle_request(con, &args.client, &args.policy)
                .map_err(|e| format!("RL.ADMIT: {e}"))?,
        };
        println!("{}", format_response(&response));
    }
    Ok(())
}

fn run() -> Result<(), String> {
    let args = parse_args()?;
    let url = format!("redis://{}:{}/", args.host, args.port);
    let timeout = Duration::from_secs(5);
    if args.cluster {
        let client = redis::cluster::ClusterClient::builder(vec![url.as_str()])
            .connection_timeout(timeout)
            .response_timeout(timeout)
            .build()
            .map_err(|e| format!("{url}: {e}"))?;
        let mut con = client
            .get_connection()
            .map_err(|e| format!("connect to the cluster at {url}: {e}"))?;
        return serve(&mut con, &args);
    }
    let client = redis::Client::open(url.as_str()).map_err(|e| format!("{url}: {e}"))?;
    let mut con = client
        .get_connection_with_timeout(timeout)
        .map_err(|e| format!("connect to {url}: {e}"))?;
    serve(&mut con, &args)
}

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("rust_handler: {e}");
            ExitCode::FAILURE
        }
    }
}
