//! The metrics room: counters the service keeps and their Prometheus text.
//! Per-limit counters carry the reference's names
//! (`ratelimit.service.rate_limit.<domain>.<key>.<stat>` becomes
//! `ratelimit_service_rate_limit_<stat>{domain, key}`); their series are
//! bounded by the config (keys are config paths unless `detailed_metric`)
//! and by a hard cap.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Duration;

/// The five per-limit counters, in the reference's order.
pub const STATS: [&str; 5] = [
    "total_hits",
    "over_limit",
    "near_limit",
    "within_limit",
    "shadow_mode",
];
pub const TOTAL_HITS: usize = 0;
pub const OVER_LIMIT: usize = 1;
pub const NEAR_LIMIT: usize = 2;
pub const WITHIN_LIMIT: usize = 3;
pub const SHADOW_MODE: usize = 4;

/// Series beyond this many (domain, key) pairs are counted under the key
/// `_overflow`, so a `detailed_metric` on a high-cardinality key cannot
/// exhaust memory.
const MAX_SERIES: usize = 10_000;

/// Valkey call latency buckets, in µs.
const BUCKETS_US: [u64; 12] = [
    100, 250, 500, 1_000, 2_500, 5_000, 10_000, 25_000, 50_000, 100_000, 250_000, 1_000_000,
];

#[derive(Default)]
pub struct Metrics {
    limits: Mutex<BTreeMap<(String, String), [u64; 5]>>,
    pub requests: AtomicU64,
    pub reloads: AtomicU64,
    pub reload_errors: AtomicU64,
    pub grpc_errors: AtomicU64,
    pub giveback: AtomicU64,
    valkey_errors: Mutex<BTreeMap<&'static str, u64>>,
    latency: [AtomicU64; BUCKETS_US.len() + 1],
    latency_sum_us: AtomicU64,
}

impl Metrics {
    pub fn add(&self, domain: &str, key: &str, stat: usize, n: u64) {
        let mut map = self.limits.lock().unwrap_or_else(|p| p.into_inner());
        let id = (domain.to_string(), key.to_string());
        if !map.contains_key(&id) && map.len() >= MAX_SERIES {
            map.entry((domain.to_string(), "_overflow".to_string()))
                .or_default()[stat] += n;
            return;
        }
        map.entry(id).or_default()[stat] += n;
    }

    pub fn valkey_error(&self, kind: &'static str) {
        *self
            .valkey_errors
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .entry(kind)
            .or_default() += 1;
    }

    pub fn valkey_latency(&self, d: Duration) {
        let us = d.as_micros().min(u64::MAX as u128) as u64;
        let i = BUCKETS_US
            .iter()
            .position(|b| us <= *b)
            .unwrap_or(BUCKETS_US.len());
        self.latency[i].fetch_add(1, Ordering::Relaxed);
        self.latency_sum_us.fetch_add(us, Ordering::Relaxed);
    }

    /// The Prometheus text exposition.
    pub fn render(&self) -> String {
        let mut out = String::new();
        let limits = self
            .limits
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        for (i, stat) in STATS.iter().enumerate() {
            let _ = writeln!(
                out,
                "# HELP ratelimit_service_rate_limit_{stat} ratelimit.service.rate_limit.<domain>.<key>.{stat}\n# TYPE ratelimit_service_rate_limit_{stat} counter"
            );
            for ((domain, key), v) in &limits {
                let _ = writeln!(
                    out,
                    "ratelimit_service_rate_limit_{stat}{{domain=\"{}\",key=\"{}\"}} {}",
                    label(domain),
                    label(key),
                    v[i]
                );
            }
        }
        let counter = |out: &mut String, name: &str, help: &str, v: u64| {
            let _ = writeln!(
                out,
                "# HELP {name} {help}\n# TYPE {name} counter\n{name} {v}"
            );
        };
        counter(
            &mut out,
            "ratelimit_service_should_rate_limit_total",
            "ShouldRateLimit calls",
            self.requests.load(Ordering::Relaxed),
        );
        counter(
            &mut out,
            "ratelimit_service_should_rate_limit_error_total",
            "ShouldRateLimit calls answered with an error (Valkey failed)",
            self.grpc_errors.load(Ordering::Relaxed),
        );
        counter(
            &mut out,
            "ratelimit_service_config_load_success_total",
            "config loads (the first and every reload)",
            self.reloads.load(Ordering::Relaxed),
        );
        counter(
            &mut out,
            "ratelimit_service_config_load_error_total",
            "config loads refused (the old config stayed in force)",
            self.reload_errors.load(Ordering::Relaxed),
        );
        counter(
            &mut out,
            "ratelimit_service_giveback_total",
            "cross-slot requests whose admitted slots were refunded",
            self.giveback.load(Ordering::Relaxed),
        );
        let _ = writeln!(
            out,
            "# HELP ratelimit_service_valkey_errors_total Valkey calls failed, by kind\n# TYPE ratelimit_service_valkey_errors_total counter"
        );
        for (kind, v) in self
            .valkey_errors
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
        {
            let _ = writeln!(
                out,
                "ratelimit_service_valkey_errors_total{{kind=\"{kind}\"}} {v}"
            );
        }
        let _ = writeln!(
            out,
            "# HELP ratelimit_service_valkey_call_seconds Valkey call latency\n# TYPE ratelimit_service_valkey_call_seconds histogram"
        );
        let mut cumulative = 0;
        for (i, b) in BUCKETS_US.iter().enumerate() {
            cumulative += self.latency[i].load(Ordering::Relaxed);
            let _ = writeln!(
                out,
                "ratelimit_service_valkey_call_seconds_bucket{{le=\"{}\"}} {cumulative}",
                *b as f64 / 1e6
            );
        }
        cumulative += self.latency[BUCKETS_US.len()].load(Ordering::Relaxed);
        let _ = writeln!(
            out,
            "ratelimit_service_valkey_call_seconds_bucket{{le=\"+Inf\"}} {cumulative}\nratelimit_service_valkey_call_seconds_sum {}\nratelimit_service_valkey_call_seconds_count {cumulative}",
            self.latency_sum_us.load(Ordering::Relaxed) as f64 / 1e6
        );
        out
    }
}

/// A label value as the text format wants it.
fn label(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c if c.is_control() => out.push('_'),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_reference_names_with_escaped_labels() {
        let m = Metrics::default();
        m.add("d", "tenant_a\"b", TOTAL_HITS, 3);
        m.valkey_latency(Duration::from_micros(300));
        let text = m.render();
        assert!(
            text.contains(
                "ratelimit_service_rate_limit_total_hits{domain=\"d\",key=\"tenant_a\\\"b\"} 3"
            ),
            "{text}"
        );
        assert!(text.contains("ratelimit_service_valkey_call_seconds_bucket{le=\"0.0005\"} 1"));
    }
}
