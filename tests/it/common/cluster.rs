//! A small Valkey Cluster for tests: primaries of either backend started
//! through the harness (`Backend::start_with`: the module loaded, or the
//! library on a server without it), slots assigned with `CLUSTER ADDSLOTSRANGE`, nodes
//! joined with `CLUSTER MEET`, replicas added with `CLUSTER REPLICATE`, and a
//! manual router that asks the node owning a key's slot and follows `MOVED`.
//!
//! `common::cluster`; the cluster tests of both backends use it.

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::net::TcpListener;
use std::sync::atomic::{AtomicU16, Ordering};
use std::time::Duration;

use redis::{Connection, Value};

use crate::common::backend::Backend;
use crate::common::{cmd_raw, info_field, try_ints, try_text, wait_until, Server};

const SLOTS: u16 = 16384;

/// A cluster bus port below the ephemeral range (the default bus port is
/// port + 10000, which overflows for ephemeral data ports).
fn bus_port() -> u16 {
    static NEXT: AtomicU16 = AtomicU16::new(0);
    let base = 20_000 + (std::process::id() % 1_000) as u16 * 10;
    for _ in 0..2_000 {
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let port = 20_000 + (base - 20_000 + n) % 12_000;
        if TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
    panic!("no free cluster bus port between 20000 and 32000");
}

pub struct Cluster {
    pub nodes: Vec<Server>,
    pub ids: Vec<String>,
    /// Server arguments every node gets, replicas added later included.
    extra: Vec<String>,
    /// What answers the calls `route` sends.
    backend: Backend,
}

impl Cluster {
    /// `n` primaries sharing the slots evenly (for 3: 0-5460, 5461-10922,
    /// 10923-16383), up once every node reports `cluster_state:ok`.
    pub fn start(n: usize) -> Cluster {
        Self::start_with(n, &[])
    }

    /// `start`, every node (and every replica added later) started with the
    /// server arguments `extra` too.
    pub fn start_with(n: usize, extra: &[&str]) -> Cluster {
        Self::start_on(Backend::Module, n, extra)
    }

    /// `start_with` on `backend`: every node a server with the module, or
    /// one without it that has the library loaded (Valkey does not spread
    /// FUNCTION LOAD across shards; a replica gets it from its primary).
    pub fn start_on(backend: Backend, n: usize, extra: &[&str]) -> Cluster {
        let extra: Vec<String> = extra.iter().map(|s| s.to_string()).collect();
        let nodes: Vec<Server> = (0..n).map(|_| start_node(backend, &extra)).collect();
        let ids: Vec<String> = nodes.iter().map(my_id).collect();
        let per = SLOTS as usize / n;
        for (i, node) in nodes.iter().enumerate() {
            let first = i * per + i.min(SLOTS as usize % n);
            let last = first + per - 1 + usize::from(i < SLOTS as usize % n);
            let (a, b) = (first.to_string(), last.to_string());
            let r = cmd_raw(
                &mut node.client(),
                &["CLUSTER", "ADDSLOTSRANGE", a.as_str(), b.as_str()],
            );
            assert_eq!(r, Value::Okay, "ADDSLOTSRANGE {a} {b}");
        }
        for node in &nodes[1..] {
            meet(&nodes[0], node);
        }
        let cluster = Cluster {
            nodes,
            ids,
            extra,
            backend,
        };
        cluster.wait_ok();
        cluster
    }

    /// Starts one more node, makes it a replica of node `primary` and waits
    /// for its initial sync and for `cluster_state:ok` everywhere. Returns
    /// the new node's index.
    pub fn add_replica(&mut self, primary: usize) -> usize {
        let node = start_node(self.backend, &self.extra);
        let id = my_id(&node);
        meet(&self.nodes[0], &node);
        let mut con = node.client();
        let primary_id = self.ids[primary].clone();
        // CLUSTER REPLICATE needs the primary known to the new node first.
        wait_until(
            Duration::from_secs(30),
            "the new node knows the primary",
            || {
                let v = cmd_raw(&mut con, &["CLUSTER", "NODES"]);
                try_text(&v).is_some_and(|t| t.contains(primary_id.as_str()))
            },
        );
        let r = cmd_raw(&mut con, &["CLUSTER", "REPLICATE", primary_id.as_str()]);
        assert_eq!(r, Value::Okay, "CLUSTER REPLICATE");
        wait_until(Duration::from_secs(30), "master_link_status:up", || {
            info_field(&mut con, "replication", "master_link_status").as_deref() == Some("up")
        });
        self.nodes.push(node);
        self.ids.push(id);
        self.wait_ok();
        self.nodes.len() - 1
    }

    /// A connection that has sent `READONLY`: on a replica it may read the
    /// slots of its primary.
    pub fn readonly_client(&self, node: usize) -> Connection {
        let mut con = self.client(node);
        assert_eq!(cmd_raw(&mut con, &["READONLY"]), Value::Okay, "READONLY");
        con
    }

    /// `master` or `slave` (INFO replication `role`).
    pub fn role(&self, node: usize) -> String {
        info_field(&mut self.client(node), "replication", "role").unwrap_or_default()
    }

    /// Every node sees every other node, all slots covered, state ok.
    pub fn wait_ok(&self) {
        let n = self.nodes.len().to_string();
        let mut cons: Vec<Connection> = self.nodes.iter().map(|s| s.client()).collect();
        wait_until(
            Duration::from_secs(30),
            "cluster_state:ok on every node",
            || {
                cons.iter_mut().all(|c| {
                    info_field(c, "cluster", "cluster_enabled").as_deref() == Some("1")
                        && cluster_info(c, "cluster_state").as_deref() == Some("ok")
                        && cluster_info(c, "cluster_known_nodes").as_deref() == Some(n.as_str())
                        && cluster_info(c, "cluster_slots_ok").as_deref() == Some("16384")
                })
            },
        );
    }

    pub fn client(&self, node: usize) -> Connection {
        self.nodes[node].client()
    }

    /// What answers the calls: the module, or the library.
    pub fn backend(&self) -> Backend {
        self.backend
    }

    /// `args` (in the module's syntax) sent to `node` as its backend takes
    /// them; the raw reply, MOVED and ASK included.
    pub fn raw(&self, node: usize, args: &[&str]) -> Value {
        self.backend.raw(&mut self.client(node), args)
    }

    pub fn keyslot(&self, key: &str) -> u16 {
        redis::cmd("CLUSTER")
            .arg("KEYSLOT")
            .arg(key)
            .query(&mut self.nodes[0].client())
            .expect("CLUSTER KEYSLOT")
    }

    /// The node that owns `slot` according to `asker`'s view (CLUSTER SLOTS).
    pub fn owner_seen_by(&self, asker: usize, slot: u16) -> usize {
        let v = cmd_raw(&mut self.client(asker), &["CLUSTER", "SLOTS"]);
        let Value::Array(ranges) = v else {
            panic!("CLUSTER SLOTS: {v:?}")
        };
        for r in ranges {
            let Value::Array(parts) = r else { continue };
            let (Value::Int(a), Value::Int(b)) = (&parts[0], &parts[1]) else {
                continue;
            };
            if (*a..=*b).contains(&i64::from(slot)) {
                let Value::Array(primary) = &parts[2] else {
                    panic!("{parts:?}")
                };
                let Value::Int(port) = primary[1] else {
                    panic!("{primary:?}")
                };
                return self.by_port(port as u16);
            }
        }
        panic!("slot {slot} not served according to node {asker}");
    }

    pub fn by_port(&self, port: u16) -> usize {
        self.nodes
            .iter()
            .position(|s| s.port == port)
            .unwrap_or_else(|| panic!("no node on port {port}"))
    }

    /// Sends `args` (in the module's syntax, for the cluster's backend) to
    /// the node owning the slot of `key` and follows MOVED (at most 3
    /// hops). Returns the reply and the node that gave it.
    pub fn route(&self, key: &str, args: &[&str]) -> (Value, usize) {
        let mut node = self.owner_seen_by(0, self.keyslot(key));
        for _ in 0..3 {
            let v = self.backend.raw(&mut self.client(node), args);
            if let Some(port) = redirect(&v, "MOVED") {
                node = self.by_port(port);
                continue;
            }
            return (v, node);
        }
        panic!("{args:?}: too many redirections");
    }

    /// `route`, for a command that must answer an array of integers.
    pub fn route_ints(&self, key: &str, args: &[&str]) -> Vec<i64> {
        let (v, _) = self.route(key, args);
        try_ints(&v).unwrap_or_else(|| panic!("{args:?}: {v:?}"))
    }

    /// Every migration this node knows of, as field -> value maps.
    pub fn slot_migrations(&self, node: usize) -> Vec<BTreeMap<String, String>> {
        let v = cmd_raw(&mut self.client(node), &["CLUSTER", "GETSLOTMIGRATIONS"]);
        let Value::Array(items) = v else {
            panic!("GETSLOTMIGRATIONS: {v:?}")
        };
        items
            .into_iter()
            .map(|item| {
                let pairs: Vec<(Value, Value)> = match item {
                    Value::Array(flat) => flat
                        .chunks(2)
                        .map(|c| (c[0].clone(), c[1].clone()))
                        .collect(),
                    Value::Map(m) => m,
                    other => panic!("migration entry {other:?}"),
                };
                pairs
                    .into_iter()
                    .map(|(k, v)| (try_text(&k).unwrap_or_default(), value_text(&v)))
                    .collect()
            })
            .collect()
    }
}

/// A cluster-enabled node of `backend` (its bus port below the ephemeral
/// range).
fn start_node(backend: Backend, extra: &[String]) -> Server {
    let bus = bus_port().to_string();
    let mut args = vec![
        "--cluster-enabled",
        "yes",
        "--cluster-config-file",
        "nodes.conf",
        "--cluster-node-timeout",
        "3000",
        "--cluster-port",
        &bus,
    ];
    args.extend(extra.iter().map(String::as_str));
    backend.start_with(&args)
}

fn my_id(node: &Server) -> String {
    redis::cmd("CLUSTER")
        .arg("MYID")
        .query(&mut node.client())
        .expect("CLUSTER MYID")
}

/// `CLUSTER MEET` sent to `known` about `new`.
fn meet(known: &Server, new: &Server) {
    let bus: String = redis::cmd("CONFIG")
        .arg("GET")
        .arg("cluster-port")
        .query::<Vec<String>>(&mut new.client())
        .expect("cluster-port")[1]
        .clone();
    let port = new.port.to_string();
    let r = cmd_raw(
        &mut known.client(),
        &["CLUSTER", "MEET", "127.0.0.1", port.as_str(), bus.as_str()],
    );
    assert_eq!(r, Value::Okay, "CLUSTER MEET");
}

/// One field of `CLUSTER INFO`.
pub fn cluster_info(con: &mut Connection, field: &str) -> Option<String> {
    let text: String = redis::cmd("CLUSTER").arg("INFO").query(con).ok()?;
    text.lines().find_map(|line| {
        let (k, v) = line.split_once(':')?;
        (k == field).then(|| v.trim_end().to_string())
    })
}

/// The port of a `MOVED <slot> <host>:<port>` or `ASK ...` error.
pub fn redirect(v: &Value, kind: &str) -> Option<u16> {
    let Value::ServerError(e) = v else {
        return None;
    };
    if e.code() != kind {
        return None;
    }
    let detail = e.details()?;
    detail.rsplit(':').next()?.trim().parse().ok()
}

fn value_text(v: &Value) -> String {
    match v {
        Value::Int(n) => n.to_string(),
        Value::Nil => String::new(),
        other => try_text(other).unwrap_or_else(|| format!("{other:?}")),
    }
}
