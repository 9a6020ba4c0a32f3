//! The store room: the connection to Valkey (a standalone server through a
//! small pool of self-reconnecting multiplexed connections, or a Cluster
//! through redis-rs's cluster client), which backend answers (the module's
//! RL.* commands, else the FUNCTION library's `rl_*`, found as the packages
//! find it), and the two calls the service makes, RL.ADMITALL and
//! RL.REFUND, each under the deadline.

use std::sync::atomic::{AtomicU8, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::cluster::ClusterClientBuilder;
use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::{Route, RoutingInfo, SingleNodeRoutingInfo, SlotAddr};
use redis::{Cmd, Value};
use tokio::sync::RwLock;

use crate::metrics::Metrics;

/// Which commands the server answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    Module,
    Functions,
}

const UNKNOWN: u8 = 0;
const MODULE: u8 = 1;
const FUNCTIONS: u8 = 2;

/// One limiter of a decision: its key, its policy words (after `POLICY`),
/// its META hash if any, and the cost.
#[derive(Debug, Clone)]
pub struct Limiter {
    pub key: String,
    pub words: Vec<String>,
    pub meta: Option<String>,
    pub cost: u64,
}

/// A limiter's five integers: admitted, limit, remaining, retry_after_ms,
/// reset_after_ms.
pub type Reply = [i64; 5];

#[derive(Debug)]
pub struct Error(pub String);

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

enum Conn {
    Single {
        pool: Vec<ConnectionManager>,
        next: AtomicUsize,
    },
    Cluster(Arc<RwLock<Option<ClusterConnection>>>),
}

pub struct Valkey {
    conn: Conn,
    backend: AtomicU8,
    pub deadline: Duration,
    probe_key: String,
    metrics: Arc<Metrics>,
}

impl Valkey {
    /// Connects lazily: nothing here waits for Valkey, so the service
    /// starts (and answers errors within the deadline) while it is down.
    pub fn new(
        addr: &str,
        cluster: bool,
        connections: usize,
        deadline: Duration,
        prefix: &str,
        metrics: Arc<Metrics>,
    ) -> Result<Valkey, Error> {
        let url = if addr.contains("://") {
            addr.to_string()
        } else {
            format!("redis://{addr}")
        };
        let conn = if cluster {
            let slot = Arc::new(RwLock::new(None));
            let client = ClusterClientBuilder::new(vec![url.clone()])
                .connection_timeout(Duration::from_secs(1))
                .response_timeout(deadline)
                .retries(1)
                .build()
                .map_err(|e| Error(format!("--valkey {addr}: {e}")))?;
            let target = slot.clone();
            tokio::spawn(async move {
                loop {
                    match client.get_async_connection().await {
                        Ok(c) => {
                            *target.write().await = Some(c);
                            tracing::info!(seed = %url, "connected to the Valkey Cluster");
                            return;
                        }
                        Err(e) => {
                            tracing::warn!(seed = %url, error = %e, "Valkey Cluster not reachable yet");
                            tokio::time::sleep(Duration::from_millis(500)).await;
                        }
                    }
                }
            });
            Conn::Cluster(slot)
        } else {
            let client =
                redis::Client::open(url).map_err(|e| Error(format!("--valkey {addr}: {e}")))?;
            let config = ConnectionManagerConfig::new()
                .set_connection_timeout(Some(Duration::from_secs(1)))
                .set_response_timeout(Some(deadline))
                .set_number_of_retries(1)
                .set_max_delay(Duration::from_millis(500));
            let pool = (0..connections.max(1))
                .map(|_| ConnectionManager::new_lazy_with_config(client.clone(), config.clone()))
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| Error(format!("--valkey {addr}: {e}")))?;
            Conn::Single {
                pool,
                next: AtomicUsize::new(0),
            }
        };
        Ok(Valkey {
            conn,
            backend: AtomicU8::new(UNKNOWN),
            deadline,
            probe_key: format!("{prefix}probe"),
            metrics,
        })
    }

    pub fn backend(&self) -> Option<Backend> {
        match self.backend.load(Ordering::Relaxed) {
            MODULE => Some(Backend::Module),
            FUNCTIONS => Some(Backend::Functions),
            _ => None,
        }
    }

    /// One command, routed by `key`, under the deadline.
    async fn call(&self, key: &str, cmd: Cmd) -> Result<Value, Error> {
        let start = Instant::now();
        let result = tokio::time::timeout(self.deadline, async {
            match &self.conn {
                Conn::Single { pool, next } => {
                    let i = next.fetch_add(1, Ordering::Relaxed) % pool.len();
                    let mut c = pool[i].clone();
                    c.send_packed_command(&cmd).await
                }
                Conn::Cluster(slot) => {
                    let c = slot.read().await.clone();
                    let Some(mut c) = c else {
                        return Err(redis::RedisError::from((
                            redis::ErrorKind::Io,
                            "not connected to the Valkey Cluster yet",
                        )));
                    };
                    let route = RoutingInfo::SingleNode(SingleNodeRoutingInfo::SpecificNode(
                        Route::with_key(key, SlotAddr::Master),
                    ));
                    c.route_command(cmd, route).await
                }
            }
        })
        .await;
        self.metrics.valkey_latency(start.elapsed());
        match result {
            Err(_) => {
                self.metrics.valkey_error("timeout");
                Err(Error(format!(
                    "Valkey did not answer within the deadline ({} ms)",
                    self.deadline.as_millis()
                )))
            }
            Ok(Err(e)) => {
                let text = e.to_string();
                let lower = text.to_ascii_lowercase();
                // A backend that went away (module unloaded, library
                // flushed) is looked for again on the next call.
                if lower.contains("unknown command") || lower.contains("function not found") {
                    self.backend.store(UNKNOWN, Ordering::Relaxed);
                }
                self.metrics
                    .valkey_error(if e.is_io_error() || e.is_timeout() {
                        "connection"
                    } else {
                        "reply"
                    });
                Err(Error(format!("Valkey: {text}")))
            }
            Ok(Ok(Value::ServerError(e))) => {
                self.metrics.valkey_error("reply");
                Err(Error(format!("Valkey: {e:?}")))
            }
            Ok(Ok(v)) => Ok(v),
        }
    }

    /// The module if RL.LIMIT is a command, else the library (which must
    /// be loaded: `FCALL_RO rl_version 0`), as the Node and Python packages
    /// find it.
    pub async fn detect(&self) -> Result<Backend, Error> {
        if let Some(b) = self.backend() {
            return Ok(b);
        }
        let mut probe = redis::cmd("RL.LIMIT");
        probe.arg(&self.probe_key);
        let found = match self.call(&self.probe_key, probe).await {
            Ok(_) => Backend::Module,
            Err(e) if e.0.to_ascii_lowercase().contains("unknown command") => {
                let mut v = redis::cmd("FCALL_RO");
                v.arg("rl_version").arg(0);
                match self.call(&self.probe_key, v).await {
                    Ok(_) => Backend::Functions,
                    Err(e) => {
                        return Err(Error(format!(
                            "neither the module (RL.LIMIT) nor the FUNCTION library (rl_version) answers: {e}; \
                             load one (scripts/load-functions.sh for the library)"
                        )))
                    }
                }
            }
            Err(e) => return Err(e),
        };
        tracing::info!(backend = ?found, "Valkey backend found");
        self.backend.store(
            match found {
                Backend::Module => MODULE,
                Backend::Functions => FUNCTIONS,
            },
            Ordering::Relaxed,
        );
        Ok(found)
    }

    /// RL.ADMITALL (or `FCALL rl_admitall`) over `group`, all of one slot
    /// and one cost: (admitted, each limiter's reply).
    pub async fn admit_all(&self, group: &[Limiter]) -> Result<(bool, Vec<Reply>), Error> {
        let backend = self.detect().await?;
        let first = &group[0];
        if group.len() == 1 {
            // One limiter: RL.ADMIT decides the same, at about half the
            // server's cost of RL.ADMITALL (bench/results/rls-*.md).
            let reply = self.one(backend, "RL.ADMIT", "rl_admit", first).await?;
            return Ok((reply[0] == 1, vec![reply]));
        }
        let mut cmd;
        match backend {
            Backend::Module => {
                cmd = redis::cmd("RL.ADMITALL");
                cmd.arg(group.len());
                for l in group {
                    cmd.arg(&l.key);
                }
            }
            Backend::Functions => {
                let mut metas: Vec<&str> = Vec::new();
                for l in group {
                    if let Some(m) = &l.meta {
                        if !metas.contains(&m.as_str()) {
                            metas.push(m);
                        }
                    }
                }
                cmd = redis::cmd("FCALL");
                cmd.arg("rl_admitall").arg(group.len() + metas.len());
                for l in group {
                    cmd.arg(&l.key);
                }
                for m in metas {
                    cmd.arg(m);
                }
            }
        }
        cmd.arg("COST").arg(first.cost);
        for l in group {
            cmd.arg("POLICY");
            for w in &l.words {
                cmd.arg(w);
            }
        }
        let reply = self.call(&first.key, cmd).await?;
        parse_admit_all(&reply, group.len())
    }

    /// RL.REFUND (or `FCALL rl_refund`) of one limiter's cost: the state
    /// afterwards.
    pub async fn refund(&self, l: &Limiter) -> Result<Reply, Error> {
        let backend = self.detect().await?;
        self.one(backend, "RL.REFUND", "rl_refund", l).await
    }

    /// A single-limiter command (`RL.ADMIT`, `RL.REFUND`, or its library
    /// function) with the limiter's policy and cost.
    async fn one(
        &self,
        backend: Backend,
        command: &str,
        function: &str,
        l: &Limiter,
    ) -> Result<Reply, Error> {
        let mut cmd;
        match backend {
            Backend::Module => {
                cmd = redis::cmd(command);
                cmd.arg(&l.key);
                for w in &l.words {
                    cmd.arg(w);
                }
            }
            Backend::Functions => {
                cmd = redis::cmd("FCALL");
                cmd.arg(function);
                match &l.meta {
                    Some(m) => cmd.arg(2).arg(&l.key).arg(m),
                    None => cmd.arg(1).arg(&l.key),
                };
                let mut words = l.words.iter();
                while let Some(w) = words.next() {
                    if w == "META" {
                        words.next();
                    } else {
                        cmd.arg(w);
                    }
                }
            }
        }
        cmd.arg("COST").arg(l.cost);
        let reply = self.call(&l.key, cmd).await?;
        parse_five(&reply)
    }
}

fn int(v: &Value) -> Option<i64> {
    match v {
        Value::Int(i) => Some(*i),
        Value::BulkString(b) => std::str::from_utf8(b).ok()?.parse().ok(),
        _ => None,
    }
}

fn parse_five(v: &Value) -> Result<Reply, Error> {
    if let Value::Array(items) = v {
        if items.len() == 5 {
            let mut out = [0i64; 5];
            for (o, i) in out.iter_mut().zip(items) {
                *o = int(i).ok_or_else(|| Error(format!("unexpected limiter reply {v:?}")))?;
            }
            return Ok(out);
        }
    }
    Err(Error(format!("unexpected limiter reply {v:?}")))
}

fn parse_admit_all(v: &Value, n: usize) -> Result<(bool, Vec<Reply>), Error> {
    let bad = || Error(format!("unexpected RL.ADMITALL reply {v:?}"));
    let Value::Array(items) = v else {
        return Err(bad());
    };
    if items.len() != 4 {
        return Err(bad());
    }
    let admitted = int(&items[0]).ok_or_else(bad)? == 1;
    let Value::Array(parts) = &items[3] else {
        return Err(bad());
    };
    if parts.len() != n {
        return Err(bad());
    }
    let replies = parts
        .iter()
        .map(parse_five)
        .collect::<Result<Vec<_>, _>>()?;
    Ok((admitted, replies))
}
