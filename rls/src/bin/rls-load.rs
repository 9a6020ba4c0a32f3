//! rls-load: the load generator of `make bench-rls` (bench/rls_bench.sh).
//! It drives valkey-rls's `ShouldRateLimit` over gRPC, or makes the same
//! decisions by calling RL.ADMIT / RL.ADMITALL on Valkey directly, from
//! `--concurrency` tasks for `--seconds`, and prints one line of JSON:
//! requests, rps, p50/p99 latency in µs, and the Valkey server's µs per
//! decision (INFO commandstats) and the service's CPU seconds
//! (/proc/<pid>/stat) over the run.

use std::time::{Duration, Instant};

use clap::{value_parser, Arg, Command};
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::{
    rate_limit_descriptor::Entry, RateLimitDescriptor,
};
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;

/// The limits bench/rls_bench.sh's config gives `d1`..`d3`: high enough
/// never to refuse, so every call does the same work.
const LIMIT: &str = "1000000000";
const WINDOW: &str = "60000";

fn cli() -> Command {
    Command::new("rls-load")
        .arg(
            Arg::new("mode")
                .long("mode")
                .default_value("grpc")
                .value_parser(["grpc", "direct"]),
        )
        .arg(
            Arg::new("grpc")
                .long("grpc")
                .default_value("http://127.0.0.1:8081"),
        )
        .arg(
            Arg::new("valkey")
                .long("valkey")
                .default_value("redis://127.0.0.1:6379"),
        )
        .arg(
            Arg::new("descriptors")
                .long("descriptors")
                .default_value("1")
                .value_parser(value_parser!(u8).range(1..=3)),
        )
        .arg(
            Arg::new("concurrency")
                .long("concurrency")
                .default_value("16")
                .value_parser(value_parser!(usize)),
        )
        .arg(
            Arg::new("seconds")
                .long("seconds")
                .default_value("5")
                .value_parser(value_parser!(u64)),
        )
        .arg(
            Arg::new("rls-pid")
                .long("rls-pid")
                .value_parser(value_parser!(u32)),
        )
        .arg(
            Arg::new("tenants")
                .long("tenants")
                .default_value("1000")
                .value_parser(value_parser!(usize)),
        )
}

fn cpu_seconds(pid: u32) -> f64 {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return 0.0;
    };
    // Fields after the command name (which may hold spaces): utime is the
    // 14th field, stime the 15th.
    let after = stat.rsplit_once(')').map_or("", |(_, a)| a);
    let f: Vec<&str> = after.split_whitespace().collect();
    let ticks: f64 = f.get(11).and_then(|v| v.parse().ok()).unwrap_or(0.0)
        + f.get(12).and_then(|v| v.parse().ok()).unwrap_or(0.0);
    ticks / 100.0
}

/// (calls, usec) of the RL.* commands from INFO commandstats.
async fn commandstats(con: &mut redis::aio::MultiplexedConnection) -> (u64, u64) {
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(con)
        .await
        .unwrap_or_default();
    let (mut calls, mut usec) = (0, 0);
    for line in info.lines() {
        // Module commands keep their registered case (cmdstat_RL.ADMIT).
        let lower = line.to_ascii_lowercase();
        let Some(rest) = lower.strip_prefix("cmdstat_rl.admit") else {
            continue;
        };
        let fields = rest.split_once(':').map_or("", |(_, f)| f);
        for kv in fields.split(',') {
            match kv.split_once('=') {
                Some(("calls", v)) => calls += v.parse::<u64>().unwrap_or(0),
                Some(("usec", v)) => usec += v.parse::<u64>().unwrap_or(0),
                _ => {}
            }
        }
    }
    (calls, usec)
}

fn key(d: usize, tenant: usize) -> String {
    // valkey-rls's layout for domain `bench`, descriptor [dN=tenant].
    format!("rls:bench:d{d}=t{tenant}:fixed")
}

#[tokio::main]
async fn main() {
    let m = cli().get_matches();
    let mode = m.get_one::<String>("mode").cloned().unwrap_or_default();
    let n = usize::from(*m.get_one::<u8>("descriptors").unwrap_or(&1));
    let conc = *m.get_one::<usize>("concurrency").unwrap_or(&16);
    let seconds = *m.get_one::<u64>("seconds").unwrap_or(&5);
    let tenants = (*m.get_one::<usize>("tenants").unwrap_or(&1000)).max(1);
    let valkey = m.get_one::<String>("valkey").cloned().unwrap_or_default();
    let grpc = m.get_one::<String>("grpc").cloned().unwrap_or_default();
    let client = redis::Client::open(valkey).expect("--valkey");
    let mut stats_con = client
        .get_multiplexed_async_connection()
        .await
        .expect("connect to Valkey");
    let before = commandstats(&mut stats_con).await;
    let pid = m.get_one::<u32>("rls-pid").copied();
    let cpu_before = pid.map_or(0.0, cpu_seconds);
    let deadline = Instant::now() + Duration::from_secs(seconds);
    let mut tasks = Vec::new();
    for t in 0..conc {
        let mode = mode.clone();
        let grpc = grpc.clone();
        let client = client.clone();
        tasks.push(tokio::spawn(async move {
            let mut lat: Vec<u32> = Vec::with_capacity(100_000);
            let mut errors = 0u64;
            let mut i = t;
            if mode == "grpc" {
                let mut c = RateLimitServiceClient::connect(grpc)
                    .await
                    .expect("connect to valkey-rls");
                while Instant::now() < deadline {
                    i += conc;
                    let tenant = format!("t{}", i % tenants);
                    let req = RateLimitRequest {
                        domain: "bench".into(),
                        descriptors: (1..=n)
                            .map(|d| RateLimitDescriptor {
                                entries: vec![Entry {
                                    key: format!("d{d}"),
                                    value: tenant.clone(),
                                }],
                                ..Default::default()
                            })
                            .collect(),
                        hits_addend: 1,
                    };
                    let s = Instant::now();
                    match c.should_rate_limit(req).await {
                        Ok(r) if r.get_ref().overall_code == 1 => {
                            lat.push(s.elapsed().as_micros() as u32)
                        }
                        _ => errors += 1,
                    }
                }
            } else {
                let mut con = client
                    .get_multiplexed_async_connection()
                    .await
                    .expect("connect to Valkey");
                while Instant::now() < deadline {
                    i += conc;
                    let tenant = i % tenants;
                    let mut cmd;
                    if n == 1 {
                        cmd = redis::cmd("RL.ADMIT");
                        cmd.arg(key(1, tenant)).arg(&[
                            "ALGO", "fixed", "LIMIT", LIMIT, "WINDOW", WINDOW, "COST", "1",
                        ]);
                    } else {
                        cmd = redis::cmd("RL.ADMITALL");
                        cmd.arg(n);
                        for d in 1..=n {
                            cmd.arg(key(d, tenant));
                        }
                        cmd.arg(&["COST", "1"]);
                        for _ in 1..=n {
                            cmd.arg(&["POLICY", "ALGO", "fixed", "LIMIT", LIMIT, "WINDOW", WINDOW]);
                        }
                    }
                    let s = Instant::now();
                    match cmd.query_async::<redis::Value>(&mut con).await {
                        Ok(redis::Value::Array(_)) => lat.push(s.elapsed().as_micros() as u32),
                        _ => errors += 1,
                    }
                }
            }
            (lat, errors)
        }));
    }
    let mut lat = Vec::new();
    let mut errors = 0;
    for t in tasks {
        if let Ok((l, e)) = t.await {
            lat.extend(l);
            errors += e;
        }
    }
    let after = commandstats(&mut stats_con).await;
    let cpu = pid.map_or(0.0, cpu_seconds) - cpu_before;
    lat.sort_unstable();
    let pct = |p: f64| {
        lat.get(((lat.len() as f64 * p) as usize).min(lat.len().saturating_sub(1)))
            .copied()
            .unwrap_or(0)
    };
    let calls = after.0.saturating_sub(before.0);
    let usec = after.1.saturating_sub(before.1);
    let ok = lat.len() as f64;
    println!(
        "{{\"mode\":\"{mode}\",\"descriptors\":{n},\"concurrency\":{conc},\"requests\":{},\"errors\":{errors},\"rps\":{:.0},\"p50_us\":{},\"p99_us\":{},\"valkey_calls_per_decision\":{:.3},\"valkey_us_per_decision\":{:.2},\"service_cpu_s\":{:.2},\"rps_per_service_core\":{:.0}}}",
        lat.len(),
        ok / seconds as f64,
        pct(0.50),
        pct(0.99),
        if ok > 0.0 { calls as f64 / ok } else { 0.0 },
        if ok > 0.0 { usec as f64 / ok } else { 0.0 },
        cpu,
        if cpu > 0.0 { ok / cpu } else { 0.0 },
    );
}
