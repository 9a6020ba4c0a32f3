//! valkey-rls: Envoy's rate limit service (`envoy.service.ratelimit.v3.
//! RateLimitService/ShouldRateLimit`) on valkey-ratelimit. This room wires
//! the others: the command line, the config load and its reloads (SIGHUP
//! and a change of the files), the gRPC server (`service`) and the HTTP
//! server (/metrics, /healthcheck, /config).

mod config;
mod limits;
mod metrics;
mod service;
mod valkey;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::IntoResponse;
use axum::routing::get;
use clap::{value_parser, Arg, ArgAction, Command};
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_server::RateLimitServiceServer;

use crate::metrics::Metrics;
use crate::service::{FailureMode, Service, Shared};
use crate::valkey::Valkey;

fn cli() -> Command {
    Command::new("valkey-rls")
        .about("Envoy's rate limit service on valkey-ratelimit (RL.ADMITALL, or the FUNCTION library)")
        .args_override_self(true)
        .arg(Arg::new("config").long("config").required(true).value_name("FILE|DIR")
            .value_parser(value_parser!(PathBuf))
            .help("envoyproxy/ratelimit YAML: one file, or a directory of *.yaml files (one domain each)"))
        .arg(Arg::new("valkey").long("valkey").default_value("127.0.0.1:6379").value_name("HOST:PORT")
            .help("the Valkey server (with --cluster: a seed node)"))
        .arg(Arg::new("cluster").long("cluster").action(ArgAction::SetTrue)
            .help("--valkey is a node of a Valkey Cluster"))
        .arg(Arg::new("grpc-addr").long("grpc-addr").default_value("127.0.0.1:8081").value_name("HOST:PORT")
            .value_parser(value_parser!(SocketAddr)))
        .arg(Arg::new("http-addr").long("http-addr").default_value("127.0.0.1:8080").value_name("HOST:PORT")
            .value_parser(value_parser!(SocketAddr)))
        .arg(Arg::new("deadline-ms").long("deadline-ms").default_value("50").value_name("MS")
            .value_parser(value_parser!(u64).range(1..=60_000))
            .help("the deadline of every Valkey call"))
        .arg(Arg::new("failure-mode").long("failure-mode").default_value("error")
            .value_parser(["error", "allow", "deny"])
            .help("when Valkey fails: a gRPC error (Envoy's failure_mode_deny decides), OK, or OVER_LIMIT"))
        .arg(Arg::new("key-prefix").long("key-prefix").default_value("rls:").value_name("PREFIX")
            .help("the prefix of every limiter key"))
        .arg(Arg::new("connections").long("connections").default_value("4").value_name("N")
            .value_parser(value_parser!(usize)).help("multiplexed connections to a standalone server"))
        .arg(Arg::new("watch-ms").long("watch-ms").default_value("1000").value_name("MS")
            .value_parser(value_parser!(u64).range(0..=3_600_000))
            .help("how often the config files are checked for a change (0: only on SIGHUP)"))
        .arg(Arg::new("log-level").long("log-level").default_value("info")
            .value_parser(["error", "warn", "info", "debug", "trace"]))
        .arg(Arg::new("log-format").long("log-format").default_value("json")
            .value_parser(["json", "text"]))
}

/// Loads the config at `path` into `shared` if its files changed since
/// `last` (or always, with no `last`); a failed load keeps the old one.
fn reload(shared: &Shared, path: &Path, last: &mut Option<Vec<(PathBuf, Vec<u8>)>>, why: &str) {
    let snap = match config::snapshot(path) {
        Ok(s) => s,
        Err(e) => {
            shared
                .metrics
                .reload_errors
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            tracing::error!(file = %e.file.display(), error = %e.message, trigger = why, "config not reloaded: the old config stays in force");
            return;
        }
    };
    if last.as_ref() == Some(&snap) && why == "change" {
        return;
    }
    match config::load(&snap) {
        Ok(c) => {
            let domains: Vec<String> = c.domains.keys().cloned().collect();
            *shared.config.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(c);
            shared
                .metrics
                .reloads
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            tracing::info!(?domains, trigger = why, "config loaded");
        }
        Err(e) => {
            shared
                .metrics
                .reload_errors
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            tracing::error!(file = %e.file.display(), error = %e.message, trigger = why, "config not reloaded: the old config stays in force");
        }
    }
    *last = Some(snap);
}

async fn metrics_page(State(s): State<Arc<Shared>>) -> impl IntoResponse {
    (
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        s.metrics.render(),
    )
}

async fn healthcheck(State(s): State<Arc<Shared>>) -> impl IntoResponse {
    match s.valkey.detect().await {
        Ok(b) => (StatusCode::OK, format!("OK ({b:?})\n")),
        Err(e) => (StatusCode::SERVICE_UNAVAILABLE, format!("Valkey: {e}\n")),
    }
}

async fn config_page(State(s): State<Arc<Shared>>) -> impl IntoResponse {
    let c = s.config();
    let text = serde_yaml_ng::to_string(&c.sources.values().collect::<Vec<_>>())
        .unwrap_or_else(|e| format!("# cannot show the config: {e}\n"));
    ([(header::CONTENT_TYPE, "text/yaml")], text)
}

fn main() {
    let m = cli().get_matches();
    let level = match m.get_one::<String>("log-level").map(String::as_str) {
        Some("error") => tracing::Level::ERROR,
        Some("warn") => tracing::Level::WARN,
        Some("debug") => tracing::Level::DEBUG,
        Some("trace") => tracing::Level::TRACE,
        _ => tracing::Level::INFO,
    };
    let builder = tracing_subscriber::fmt()
        .with_max_level(level)
        .with_writer(std::io::stderr);
    if m.get_one::<String>("log-format").map(String::as_str) == Some("text") {
        builder.init();
    } else {
        builder.json().flatten_event(true).init();
    }
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("valkey-rls: cannot start the runtime: {e}");
            std::process::exit(1);
        }
    };
    if let Err(e) = runtime.block_on(run(m)) {
        tracing::error!(error = %e, "valkey-rls stopped");
        std::process::exit(1);
    }
}

async fn run(m: clap::ArgMatches) -> Result<(), String> {
    let path = m
        .get_one::<PathBuf>("config")
        .cloned()
        .ok_or("--config is required")?;
    // The first load must succeed: there is no old config to keep.
    let snap = config::snapshot(&path).map_err(|e| e.to_string())?;
    let cfg = config::load(&snap).map_err(|e| e.to_string())?;
    let metrics = Arc::new(Metrics::default());
    metrics
        .reloads
        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let deadline = Duration::from_millis(*m.get_one::<u64>("deadline-ms").unwrap_or(&50));
    let cluster = m.get_flag("cluster");
    let prefix = m
        .get_one::<String>("key-prefix")
        .cloned()
        .unwrap_or_default();
    let valkey = Valkey::new(
        m.get_one::<String>("valkey")
            .map(String::as_str)
            .unwrap_or("127.0.0.1:6379"),
        cluster,
        *m.get_one::<usize>("connections").unwrap_or(&4),
        deadline,
        &prefix,
        metrics.clone(),
    )
    .map_err(|e| e.to_string())?;
    let failure_mode = match m.get_one::<String>("failure-mode").map(String::as_str) {
        Some("allow") => FailureMode::Allow,
        Some("deny") => FailureMode::Deny,
        _ => FailureMode::Error,
    };
    tracing::info!(domains = ?cfg.domains.keys().collect::<Vec<_>>(), "config loaded");
    let shared = Arc::new(Shared {
        config: RwLock::new(Arc::new(cfg)),
        valkey,
        metrics,
        prefix,
        failure_mode,
        cluster,
    });

    // Reloads: SIGHUP always reloads; the watcher when the bytes change.
    let (tx, mut rx) = tokio::sync::mpsc::channel::<&'static str>(4);
    let mut hup = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup())
        .map_err(|e| format!("SIGHUP handler: {e}"))?;
    let hup_tx = tx.clone();
    tokio::spawn(async move {
        while hup.recv().await.is_some() {
            let _ = hup_tx.send("SIGHUP").await;
        }
    });
    let watch_ms = *m.get_one::<u64>("watch-ms").unwrap_or(&1000);
    if watch_ms > 0 {
        let tick_tx = tx.clone();
        tokio::spawn(async move {
            let mut every = tokio::time::interval(Duration::from_millis(watch_ms));
            loop {
                every.tick().await;
                if tick_tx.send("change").await.is_err() {
                    return;
                }
            }
        });
    }
    let reloader = shared.clone();
    tokio::spawn(async move {
        let mut last = Some(snap);
        while let Some(why) = rx.recv().await {
            let (s, p, mut l) = (reloader.clone(), path.clone(), last.take());
            last = tokio::task::spawn_blocking(move || {
                reload(&s, &p, &mut l, why);
                l
            })
            .await
            .unwrap_or(None);
        }
    });

    // Find the backend early (a failure here is retried on the first call).
    let probe = shared.clone();
    tokio::spawn(async move {
        for _ in 0..20 {
            if probe.valkey.detect().await.is_ok() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    });

    let http_addr = *m.get_one::<SocketAddr>("http-addr").ok_or("--http-addr")?;
    let grpc_addr = *m.get_one::<SocketAddr>("grpc-addr").ok_or("--grpc-addr")?;
    let app = axum::Router::new()
        .route("/metrics", get(metrics_page))
        .route("/healthcheck", get(healthcheck))
        .route("/config", get(config_page))
        .with_state(shared.clone());
    let listener = tokio::net::TcpListener::bind(http_addr)
        .await
        .map_err(|e| format!("--http-addr {http_addr}: {e}"))?;
    tokio::spawn(async move {
        if let Err(e) = axum::serve(listener, app).await {
            tracing::error!(error = %e, "HTTP server stopped");
        }
    });
    tracing::info!(%grpc_addr, %http_addr, "serving");
    let shutdown = async {
        let mut term =
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(t) => t,
                Err(_) => return std::future::pending().await,
            };
        tokio::select! {
            _ = term.recv() => {},
            _ = tokio::signal::ctrl_c() => {},
        }
        tracing::info!("shutting down");
    };
    tonic::transport::Server::builder()
        .add_service(RateLimitServiceServer::new(Service(shared)))
        .serve_with_shutdown(grpc_addr, shutdown)
        .await
        .map_err(|e| format!("gRPC server on {grpc_addr}: {e}"))
}
