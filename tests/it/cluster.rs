//! Valkey Cluster, every scenario on both backends (the module, and the
//! library loaded into every primary): routing by the declared keys
//! (counters and META hashes), CROSSSLOT for RL.ADMITALL and META across
//! slots, and limiters moved between nodes, by the classic
//! `SETSLOT`/`MIGRATE` procedure and by Valkey 9's atomic `CLUSTER
//! MIGRATESLOTS`; a replica in cluster mode (exact copies, READONLY reads,
//! redirected writes, manual failovers); numbered databases in cluster mode
//! (Valkey 9's `cluster-databases`); and every reply alike from both.

use crate::common;

use std::collections::BTreeMap;
use std::thread::sleep;
use std::time::{Duration, Instant};

use crate::common::backend::{Backend, BOTH};
use crate::common::cluster::{redirect, Cluster};
use crate::common::{cmd_raw, error_text, pexpiretime, show, split, try_ints, try_text, Server};
use redis::{Connection, Value};

const ALGOS: [&str; 5] = ["fixed", "sliding", "token", "gcra", "leaky"];

/// A limiter living in one slot: its key and how it is called.
struct Lim {
    key: String,
    args: Vec<String>,
}

impl Lim {
    fn call(&self, cmd: &str) -> Vec<String> {
        let mut c = vec![cmd.to_string(), self.key.clone()];
        c.extend(self.args.iter().cloned());
        c
    }
}

fn strs(v: &[String]) -> Vec<&str> {
    v.iter().map(String::as_str).collect()
}

/// Limiters of every algorithm in the slot of hash tag `tag`: spent,
/// partly used, refunded, configured through a META hash in the same slot;
/// plus RL.THROTTLE and an INCR-made counter. Returns the limiters and every
/// key written.
fn populate_slot(c: &Cluster, tag: &str) -> (Vec<Lim>, Vec<String>) {
    let meta = format!("{{{tag}}}:meta");
    let (v, _) = c.route(
        &meta,
        &[
            "HSET",
            &meta,
            "max",
            "4",
            "duration",
            "40000",
            "algorithm",
            "gcra",
        ],
    );
    assert_eq!(v, Value::Int(3));
    let mut lims = Vec::new();
    for algo in ALGOS {
        let mut args: Vec<String> = ["ALGO", algo, "LIMIT", "3", "WINDOW", "30000"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        if algo != "fixed" && algo != "sliding" {
            args.extend(["BURST".to_string(), "2".to_string()]);
        }
        let spent = Lim {
            key: format!("{{{tag}}}:{algo}:spent"),
            args: args.clone(),
        };
        for _ in 0..4 {
            c.route_ints(&spent.key, &strs(&spent.call("RL.ADMIT")));
        }
        let refused = c.route_ints(&spent.key, &strs(&spent.call("RL.ADMIT")));
        assert_eq!(refused[0], 0, "{algo}: {refused:?}");
        let part = Lim {
            key: format!("{{{tag}}}:{algo}:part"),
            args: args.clone(),
        };
        assert_eq!(c.route_ints(&part.key, &strs(&part.call("RL.ADMIT")))[0], 1);
        let refunded = Lim {
            key: format!("{{{tag}}}:{algo}:refunded"),
            args,
        };
        c.route_ints(&refunded.key, &strs(&refunded.call("RL.ADMIT")));
        c.route_ints(&refunded.key, &strs(&refunded.call("RL.ADMIT")));
        c.route_ints(&refunded.key, &strs(&refunded.call("RL.REFUND")));
        lims.extend([spent, part, refunded]);
        sleep(Duration::from_millis(2));
    }
    let via_meta = Lim {
        key: format!("{{{tag}}}:viameta"),
        args: vec!["META".into(), meta.clone()],
    };
    c.route_ints(&via_meta.key, &strs(&via_meta.call("RL.ADMIT")));
    lims.push(via_meta);
    let thr = format!("{{{tag}}}:thr");
    for _ in 0..4 {
        c.route_ints(&thr, &["RL.THROTTLE", &thr, "2", "3", "60"]);
    }
    let legacy = format!("{{{tag}}}:legacy");
    c.route(&legacy, &["SET", &legacy, "9"]);
    let legacy_lim = Lim {
        key: legacy.clone(),
        args: vec!["LIMIT".into(), "5".into(), "WINDOW".into(), "30000".into()],
    };
    assert_eq!(
        c.route_ints(&legacy, &strs(&legacy_lim.call("RL.ADMIT")))[0],
        0
    );
    lims.push(legacy_lim);
    let mut keys: Vec<String> = lims.iter().map(|l| l.key.clone()).collect();
    keys.extend([meta, thr]);
    keys.sort();
    (lims, keys)
}

/// key -> (value words, PEXPIRETIME) on one node; missing keys are absent.
fn state_on(c: &Cluster, node: usize, keys: &[String]) -> BTreeMap<String, (Vec<String>, i64)> {
    state_of(&mut c.client(node), keys)
}

/// `state_on`, through a given connection (e.g. one that sent READONLY).
fn state_of(con: &mut Connection, keys: &[String]) -> BTreeMap<String, (Vec<String>, i64)> {
    let mut out = BTreeMap::new();
    for k in keys {
        let kind = try_text(&cmd_raw(con, &["TYPE", k])).unwrap_or_else(|| panic!("TYPE {k}"));
        let value = match kind.as_str() {
            "none" => continue,
            "string" => vec![try_text(&cmd_raw(con, &["GET", k])).unwrap()],
            "hash" => {
                let mut pairs: Vec<String> = match cmd_raw(con, &["HGETALL", k]) {
                    Value::Array(items) => items.iter().filter_map(try_text).collect(),
                    Value::Map(m) => m
                        .iter()
                        .flat_map(|(a, b)| [try_text(a), try_text(b)])
                        .flatten()
                        .collect(),
                    other => panic!("HGETALL {k}: {other:?}"),
                };
                pairs.sort();
                pairs
            }
            other => panic!("{k}: type {other}"),
        };
        out.insert(k.clone(), (value, pexpiretime(con, k)));
    }
    out
}

/// RL.TTL of every limiter (its back-off now) on the owner of `slot`, with
/// the server time of each reading (MULTI { TIME; RL.TTL }).
fn backoffs(c: &Cluster, slot: u16, lims: &[Lim]) -> Vec<(i64, i64)> {
    let owner = c.owner_seen_by(0, slot);
    backoffs_on(c.backend(), &mut c.client(owner), lims)
}

/// `backoffs`, through a given connection (e.g. one that sent READONLY).
fn backoffs_on(backend: Backend, con: &mut Connection, lims: &[Lim]) -> Vec<(i64, i64)> {
    lims.iter()
        .map(|l| {
            let ttl = l.call("RL.TTL");
            let v = cmd_raw(con, &["MULTI"]);
            assert_eq!(v, Value::Okay);
            cmd_raw(con, &["TIME"]);
            backend.raw(con, &strs(&ttl));
            let Value::Array(exec) = cmd_raw(con, &["EXEC"]) else {
                panic!("EXEC")
            };
            let Value::Array(t) = &exec[0] else {
                panic!("{exec:?}")
            };
            let secs: i64 = try_text(&t[0]).unwrap().parse().unwrap();
            let micros: i64 = try_text(&t[1]).unwrap().parse().unwrap();
            match exec[1] {
                Value::Int(n) => (n, secs * 1000 + micros / 1000),
                ref other => panic!("RL.TTL {}: {other:?}", l.key),
            }
        })
        .collect()
}

fn keys_in_slot(c: &Cluster, node: usize, slot: u16) -> i64 {
    redis::cmd("CLUSTER")
        .arg("COUNTKEYSINSLOT")
        .arg(slot)
        .query(&mut c.client(node))
        .expect("COUNTKEYSINSLOT")
}

fn set_slot(c: &Cluster, node: usize, slot: u16, how: &str, id: &str) {
    let slot = slot.to_string();
    let v = cmd_raw(
        &mut c.client(node),
        &["CLUSTER", "SETSLOT", slot.as_str(), how, id],
    );
    assert_eq!(v, Value::Okay, "SETSLOT {slot} {how} on node {node}");
}

fn migrate(c: &Cluster, from: usize, to: usize, keys: &[String]) {
    let port = c.nodes[to].port.to_string();
    let mut args = vec![
        "MIGRATE",
        "127.0.0.1",
        port.as_str(),
        "",
        "0",
        "5000",
        "KEYS",
    ];
    args.extend(keys.iter().map(String::as_str));
    let v = cmd_raw(&mut c.client(from), &args);
    assert_eq!(v, Value::Okay, "MIGRATE: {v:?}");
}

#[test]
fn routing_crossslot_and_a_setslot_migration_keep_every_limiter() {
    for backend in BOTH {
        routing_and_a_setslot_migration_on(backend);
    }
}

fn routing_and_a_setslot_migration_on(backend: Backend) {
    let c = Cluster::start_on(backend, 3, &[]);
    let b = backend;
    let p = ["LIMIT", "5", "WINDOW", "60000"];

    // Routing follows the counter's slot: the owner answers, others MOVE.
    for key in ["alpha", "beta", "gamma", "delta", "{t}x"] {
        let mut args = vec!["RL.ADMIT", key];
        args.extend(p);
        let (v, owner) = c.route(key, &args);
        assert_eq!(try_ints(&v).unwrap()[..3], [1, 5, 4], "{key}");
        assert_eq!(owner, c.owner_seen_by(owner, c.keyslot(key)));
        for other in (0..3).filter(|&n| n != owner) {
            let moved = c.raw(other, &args);
            assert_eq!(
                redirect(&moved, "MOVED"),
                Some(c.nodes[owner].port),
                "{moved:?}"
            );
            let ttl = c.raw(other, &["RL.TTL", key, "LIMIT", "5"]);
            assert_eq!(
                redirect(&ttl, "MOVED"),
                Some(c.nodes[owner].port),
                "{ttl:?}"
            );
        }
    }
    // A META hash in the counter's slot is read on the slot's owner.
    let (_, t_owner) = c.route("{t}x", &split("HSET {t}meta max 2 duration 60000"));
    let (v, _) = c.route("{t}y", &["RL.ADMIT", "{t}y", "META", "{t}meta"]);
    assert_eq!(try_ints(&v).unwrap()[..3], [1, 2, 1]);
    let v = c.raw(t_owner, &["RL.LIMIT", "{t}meta"]);
    assert_eq!(v, Value::Int(2));

    // RL.ADMITALL: keys in different slots are refused by the server ...
    let cross =
        split("RL.ADMITALL 2 alpha beta POLICY LIMIT 5 WINDOW 60000 POLICY LIMIT 5 WINDOW 60000");
    assert_ne!(c.keyslot("alpha"), c.keyslot("beta"));
    for node in 0..3 {
        let v = c.raw(node, &cross);
        let e = error_text(&v).unwrap_or_default();
        assert!(e.starts_with("CROSSSLOT"), "node {node}: {v:?}");
    }
    // ... and so is a META hash in another slot than its counters ...
    let mixed = split("RL.ADMITALL 2 {t}a {t}b POLICY META {t}meta POLICY META {u}meta");
    let v = c.route("{t}a", &mixed).0;
    assert!(
        error_text(&v).unwrap_or_default().starts_with("CROSSSLOT"),
        "{v:?}"
    );
    // ... while a shared hash tag works, on the tag's owner.
    let tagged = split(
        "RL.ADMITALL 3 {t}a {t}b {t}c POLICY LIMIT 5 WINDOW 60000 \
         POLICY ALGO gcra LIMIT 2 WINDOW 60000 POLICY META {t}meta",
    );
    for round in 0..3 {
        let (v, node) = c.route("{t}a", &tagged);
        assert_eq!(node, t_owner);
        let Value::Array(items) = &v else {
            panic!("{v:?}")
        };
        let admitted = if round < 2 { 1 } else { 0 };
        assert_eq!(items[0], Value::Int(admitted), "round {round}: {v:?}");
    }

    // Move the slot of {mig}, holding limiters of every algorithm, with the
    // classic procedure: IMPORTING/MIGRATING, MIGRATE ... KEYS, SETSLOT NODE.
    let slot = c.keyslot("{mig}");
    let (lims, keys) = populate_slot(&c, "mig");
    let src = c.owner_seen_by(0, slot);
    let dst = (src + 1) % 3;
    let before = state_on(&c, src, &keys);
    assert_eq!(before.len(), keys.len(), "every key is on the source");
    let backoff_before = backoffs(&c, slot, &lims);

    set_slot(&c, dst, slot, "IMPORTING", &c.ids[src]);
    set_slot(&c, src, slot, "MIGRATING", &c.ids[dst]);
    let (first, rest) = keys.split_at(keys.len() / 2);
    migrate(&c, src, dst, first);
    // Mid-migration: a moved limiter is asked for on the target, a limiter
    // still here is served here, and a call spanning both must retry.
    let moved = lims.iter().find(|l| first.contains(&l.key)).unwrap();
    let here = lims.iter().find(|l| rest.contains(&l.key)).unwrap();
    let v = c.raw(src, &strs(&moved.call("RL.ADMIT")));
    assert_eq!(redirect(&v, "ASK"), Some(c.nodes[dst].port), "{v:?}");
    let v = c.raw(src, &strs(&here.call("RL.TTL")));
    assert!(matches!(v, Value::Int(_)), "{v:?}");
    let mut con = c.client(dst);
    let _: () = redis::cmd("ASKING").query(&mut con).unwrap();
    let mut peek = moved.call("RL.ADMIT");
    peek.extend(["COST".to_string(), "0".to_string()]);
    let v = b.raw(&mut con, &strs(&peek));
    assert!(try_ints(&v).is_some(), "ASKING + peek on the target: {v:?}");
    let both = format!(
        "RL.ADMITALL 2 {} {} POLICY LIMIT 9 WINDOW 1000 POLICY LIMIT 9 WINDOW 1000",
        moved.key, here.key
    );
    let v = c.raw(src, &split(&both));
    assert!(
        error_text(&v).unwrap_or_default().starts_with("TRYAGAIN"),
        "{v:?}"
    );
    migrate(&c, src, dst, rest);
    for node in [dst, src, 3 - src - dst] {
        set_slot(&c, node, slot, "NODE", &c.ids[dst]);
    }
    let moved_in = Instant::now();
    common::wait_until(
        Duration::from_secs(10),
        "every node sees the new owner",
        || (0..3).all(|n| c.owner_seen_by(n, slot) == dst),
    );

    let after = state_on(&c, dst, &keys);
    assert_eq!(keys_in_slot(&c, src, slot), 0, "nothing left on the source");
    assert_eq!(keys_in_slot(&c, dst, slot), keys.len() as i64);
    // MIGRATE ships a relative TTL (RESTORE-ASKING key <ttl>), so the
    // target's expiry can land a few ms later than the source's: a server
    // property. Values (and the absolute times inside them) are exact.
    let mut drift = 0;
    assert_eq!(after.len(), before.len(), "every key arrived");
    for (k, (value, at)) in &before {
        let (v2, at2) = after
            .get(k)
            .unwrap_or_else(|| panic!("{k} missing on the target"));
        assert_eq!(value, v2, "{k}: value");
        assert_eq!(*at > 0, *at2 > 0, "{k}: expiry {at} -> {at2}");
        assert!(
            at2 - at >= 0 && at2 - at <= 50,
            "{k}: PEXPIRETIME {at} -> {at2}"
        );
        drift = drift.max(at2 - at);
    }
    // Spent budgets stay spent; back-offs shrank exactly with time.
    let backoff_after = backoffs(&c, slot, &lims);
    for ((l, (b, t0)), (a, t1)) in lims.iter().zip(&backoff_before).zip(&backoff_after) {
        let want = (b - (t1 - t0)).max(0);
        assert!(
            (a - want).abs() <= 2 + drift,
            "{}: back-off {b}, {} ms later {a} (want {want})",
            l.key,
            t1 - t0
        );
    }
    let refused = backoff_after.iter().filter(|b| b.0 > 0).count();
    assert!(refused >= 6, "{backoff_after:?}");
    let (v, node) = c.route(&lims[0].key, &strs(&lims[0].call("RL.ADMIT")));
    assert_eq!(node, dst);
    assert_eq!(try_ints(&v).unwrap()[0], 0, "still spent on the new owner");
    println!(
        "{backend:?} SETSLOT/MIGRATE: slot {slot} moved node {src} -> {dst}: {} keys ({} limiters of every \
         algorithm), values identical, PEXPIRETIME later by at most {drift} ms (MIGRATE ships \
         relative TTLs), {refused} still refusing, routed again {} ms after SETSLOT NODE",
        keys.len(),
        lims.len(),
        moved_in.elapsed().as_millis()
    );
}

/// A META hash in another slot than its counter is CROSSSLOT, on either
/// node. Valkey's cluster routing (`clusterSlotByCommand` ->
/// `getKeysFromCommand`) ignores key-specs of module commands: without
/// `getkeys-api` it sees only the legacy key range (1, 1, 1), the counter,
/// and the call used to run as *unlimited* on the counter's node, the META
/// hash being absent there.
#[test]
fn a_meta_hash_in_another_slot_is_crossslot() {
    for backend in BOTH {
        a_meta_hash_in_another_slot_is_crossslot_on(backend);
    }
}

fn a_meta_hash_in_another_slot_is_crossslot_on(backend: Backend) {
    let c = Cluster::start_on(backend, 3, &[]);
    // Two tags whose slots live on different nodes.
    let (a, b) = ["{a}", "{b}", "{c}", "{d}", "{e}", "{f}", "{g}"]
        .iter()
        .flat_map(|x| ["{a}", "{b}", "{c}", "{d}", "{e}", "{f}", "{g}"].map(|y| (*x, y)))
        .find(|(x, y)| c.owner_seen_by(0, c.keyslot(x)) != c.owner_seen_by(0, c.keyslot(y)))
        .unwrap();
    let meta = format!("{b}meta");
    let counter = format!("{a}counter");
    c.route(&meta, &["HSET", &meta, "max", "1", "duration", "60000"]);
    let mut outcomes = Vec::new();
    for call in [
        vec!["RL.ADMIT", counter.as_str(), "META", meta.as_str()],
        vec!["RL.TTL", counter.as_str(), "META", meta.as_str()],
        vec!["RL.REFUND", counter.as_str(), "META", meta.as_str()],
    ] {
        // Asked on the counter's owner, and on the META hash's owner.
        for node in [
            c.owner_seen_by(0, c.keyslot(&counter)),
            c.owner_seen_by(0, c.keyslot(&meta)),
        ] {
            let v = c.raw(node, &call);
            let e = error_text(&v).unwrap_or_default();
            if !e.starts_with("CROSSSLOT") {
                outcomes.push(format!("{call:?} on node {node}: {v:?}"));
            }
        }
    }
    assert!(
        outcomes.is_empty(),
        "{backend:?}: not CROSSSLOT:\n{}",
        outcomes.join("\n")
    );
}

/// What `CLUSTER MIGRATESLOTS` did: Err(message) if refused at once.
fn atomic_migrate(c: &Cluster, src: usize, dst: usize, slot: u16) -> Result<(), String> {
    let s = slot.to_string();
    let v = cmd_raw(
        &mut c.client(src),
        &[
            "CLUSTER",
            "MIGRATESLOTS",
            "SLOTSRANGE",
            s.as_str(),
            s.as_str(),
            "NODE",
            c.ids[dst].as_str(),
        ],
    );
    match error_text(&v) {
        Some(e) => Err(e),
        None => {
            assert_eq!(v, Value::Okay);
            Ok(())
        }
    }
}

/// Waits for the migration to end on the source; its final state and message.
fn wait_migration(c: &Cluster, src: usize) -> (String, String) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let jobs = c.slot_migrations(src);
        if let Some(job) = jobs.last() {
            let state = job.get("state").cloned().unwrap_or_default();
            if ["success", "failed", "cancelled"].contains(&state.as_str()) {
                return (state, job.get("message").cloned().unwrap_or_default());
            }
        }
        assert!(
            Instant::now() < deadline,
            "migration still running: {jobs:?}"
        );
        sleep(Duration::from_millis(50));
    }
}

/// Runs an atomic migration of the slot of {asm} and checks every limiter
/// arrived intact; or, with `expect_success` off, that the server refuses
/// to start it with the documented error and that nothing changed.
fn atomic_migration(backend: Backend, expect_success: bool) {
    let c = Cluster::start_on(backend, 3, &[]);
    let slot = c.keyslot("{asm}");
    let (lims, keys) = populate_slot(&c, "asm");
    let src = c.owner_seen_by(0, slot);
    let dst = (src + 1) % 3;
    let before = state_on(&c, src, &keys);
    assert_eq!(before.len(), keys.len());

    match atomic_migrate(&c, src, dst, slot) {
        Err(e) => {
            println!("{backend:?}: CLUSTER MIGRATESLOTS refused: {e}");
            assert!(!expect_success, "atomic slot migration refused: {e}");
            // The refusal is clean and names the cause.
            assert!(
                e.contains("does not support atomic slot migrations") && e.contains("ratelimit"),
                "an unexpected refusal: {e}"
            );
            assert_eq!(c.owner_seen_by(src, slot), src);
            assert_eq!(state_on(&c, src, &keys), before, "nothing changed");
            let (v, node) = c.route(&lims[1].key, &strs(&lims[1].call("RL.ADMIT")));
            assert_eq!(node, src);
            assert!(try_ints(&v).is_some(), "{v:?}");
            // The classic procedure remains available (tested above).
        }
        Ok(()) => {
            assert!(expect_success, "MIGRATESLOTS was accepted");
            let (state, message) = wait_migration(&c, src);
            assert_eq!(state, "success", "migration ended {state}: {message}");
            common::wait_until(Duration::from_secs(10), "the new owner is known", || {
                (0..3).all(|n| c.owner_seen_by(n, slot) == dst)
            });
            let after = state_on(&c, dst, &keys);
            assert_eq!(before, after, "every value and PEXPIRETIME preserved");
            assert_eq!(keys_in_slot(&c, src, slot), 0, "nothing left on the source");
            let (v, node) = c.route(&lims[0].key, &strs(&lims[0].call("RL.ADMIT")));
            assert_eq!(node, dst);
            assert_eq!(try_ints(&v).unwrap()[0], 0, "still spent on the new owner");
            println!(
                "{backend:?} CLUSTER MIGRATESLOTS: slot {slot} node {src} -> {dst}: {} keys identical",
                keys.len()
            );
        }
    }
}

/// The module declares VALKEYMODULE_OPTIONS_HANDLE_ATOMIC_SLOT_MIGRATION
/// (1 << 5); without it Valkey 9 refuses MIGRATESLOTS up front with
/// "ERR The module ratelimit does not support atomic slot migrations. ...".
/// Run with `RL_ASM_EXPECT_REFUSAL=1` against a module built without the
/// option to check that refusal instead (clean, nothing moved): the
/// library, which needs no option, then is not run.
#[test]
fn atomic_slot_migration_keeps_every_limiter() {
    if common::server_major_version() < 9 {
        println!("SKIPPED: CLUSTER MIGRATESLOTS is Valkey 9 and later");
        return;
    }
    match std::env::var_os("RL_ASM_EXPECT_REFUSAL") {
        Some(_) => atomic_migration(Backend::Module, false),
        None => {
            for backend in BOTH {
                atomic_migration(backend, true);
            }
        }
    }
}

/// A node's `INFO commandstats` line for `cmd`, e.g. "calls=0,usec=0,...".
fn cmdstat(c: &Cluster, node: usize, cmd: &str) -> String {
    common::info_field(
        &mut c.client(node),
        "commandstats",
        &format!("cmdstat_{cmd}"),
    )
    .unwrap_or_default()
}

/// Until `replica` has applied everything `primary` has sent: their
/// replication offsets match. (`WAIT` would not do: it waits for the writes
/// of its own connection, and this one made none, so it returns at once.)
fn wait_in_sync(c: &Cluster, primary: usize, replica: usize) {
    common::wait_replica_offset(&c.nodes[primary], &c.nodes[replica]);
}

/// `CLUSTER FAILOVER` on `replica`, then until it is the primary, `primary`
/// its replica, and both route `slot` to it.
fn failover(c: &Cluster, replica: usize, primary: usize, slot: u16) {
    let v = cmd_raw(&mut c.client(replica), &["CLUSTER", "FAILOVER"]);
    assert_eq!(v, Value::Okay, "CLUSTER FAILOVER");
    common::wait_until(Duration::from_secs(10), "the replica took over", || {
        c.role(replica) == "master"
            && c.role(primary) == "slave"
            && c.owner_seen_by(primary, slot) == replica
            && c.owner_seen_by(replica, slot) == replica
    });
}

/// A replica in cluster mode (one primary owning every slot, one replica):
/// it holds every limiter with the primary's exact value and PEXPIRETIME,
/// even when it applies the effects late; with READONLY it answers RL.TTL
/// and RL.LIMIT as the primary does and redirects every write (without
/// READONLY, everything); after `CLUSTER FAILOVER` it holds the same state,
/// keeps refusing spent limiters, and the old primary gets the new writes;
/// after `CLUSTER FAILOVER FORCE` under a stream of RL.ADMIT calls the two
/// nodes agree again and the client saw nothing but MOVED.
///
/// It would fail if a limiter's value or expiry stopped replicating as an
/// absolute effect: the replica is held in `DEBUG SLEEP` while the workload
/// runs, so an expiry sent relative (`PX`) or a command re-run on the
/// replica would land later there, and values and PEXPIRETIMEs are compared
/// exactly (once the offsets match, and again on the promoted replica).
#[test]
fn a_cluster_replica_mirrors_limiters_and_takes_over() {
    for backend in BOTH {
        a_cluster_replica_mirrors_limiters_on(backend);
    }
}

fn a_cluster_replica_mirrors_limiters_on(backend: Backend) {
    let b = backend;
    let started = Instant::now();
    let mut c = Cluster::start_on(backend, 1, &[]);
    let (p, r) = (0, c.add_replica(0));
    let slot = c.keyslot("{rep}");
    assert_eq!(c.owner_seen_by(r, slot), p);

    // The workload runs while the replica sleeps: it applies it late.
    let mut sleeper = c.client(r);
    let lag = std::thread::spawn(move || cmd_raw(&mut sleeper, &["DEBUG", "SLEEP", "0.3"]));
    sleep(Duration::from_millis(50));
    let (lims, mut keys) = populate_slot(&c, "rep");
    let long_fixed = split("RL.ADMIT {rep}:long:fixed LIMIT 3 WINDOW 600000");
    let long_token = split("RL.ADMIT {rep}:long:token ALGO token LIMIT 3 WINDOW 600000 BURST 2");
    for i in 0..4 {
        assert_eq!(c.route_ints("{rep}", &long_fixed)[0], i64::from(i < 3));
    }
    for i in 0..3 {
        assert_eq!(c.route_ints("{rep}", &long_token)[0], i64::from(i < 2));
    }
    let all = split(
        "RL.ADMITALL 3 {rep}:all:a {rep}:all:b {rep}:all:c \
         POLICY LIMIT 5 WINDOW 60000 POLICY ALGO sliding LIMIT 2 WINDOW 60000 POLICY META {rep}:meta",
    );
    for admitted in [1, 1, 0] {
        let (v, _) = c.route("{rep}", &all);
        let Value::Array(items) = &v else {
            panic!("{v:?}")
        };
        assert_eq!(items[0], Value::Int(admitted), "{v:?}");
    }
    c.route_ints("{rep}", &split("RL.ADMIT {rep}:gone LIMIT 3 WINDOW 60000"));
    let (v, _) = c.route("{rep}", &["RL.RESET", "{rep}:gone"]);
    assert_eq!(v, Value::Int(1));
    keys.extend(
        split("{rep}:long:fixed {rep}:long:token {rep}:all:a {rep}:all:b {rep}:all:c {rep}:gone {rep}:after {rep}:hammer")
            .into_iter()
            .map(String::from),
    );
    assert!(
        matches!(lag.join().unwrap(), Value::Okay),
        "DEBUG SLEEP on the replica"
    );

    // 1. Once in sync, every key is identical on the replica.
    wait_in_sync(&c, p, r);
    let mut ro = c.readonly_client(r);
    let on_primary = state_on(&c, p, &keys);
    assert_eq!(on_primary.len(), keys.len() - 3, "{on_primary:?}");
    assert!(on_primary
        .iter()
        .all(|(k, (_, at))| *at > 0 || k == "{rep}:meta"));
    assert_eq!(state_of(&mut ro, &keys), on_primary, "replica vs primary");

    // 2. READONLY: the reads answer on the replica, as on the primary ...
    let on_p = backoffs(&c, slot, &lims);
    let on_r = backoffs_on(backend, &mut ro, &lims);
    for ((l, (b, t0)), (a, t1)) in lims.iter().zip(&on_p).zip(&on_r) {
        let want = (b - (t1 - t0)).max(0);
        assert!(
            (a - want).abs() <= 2,
            "{}: RL.TTL {b} on the primary, {a} on the replica {} ms later",
            l.key,
            t1 - t0
        );
    }
    assert!(on_r.iter().filter(|b| b.0 > 0).count() >= 6, "{on_r:?}");
    assert_eq!(b.raw(&mut ro, &["RL.LIMIT", "{rep}:meta"]), Value::Int(4));
    // ... and every write is redirected to the primary, with or without it.
    let primary_port = Some(c.nodes[p].port);
    let mut peek = lims[0].call("RL.ADMIT");
    peek.extend(["COST".to_string(), "0".to_string()]);
    let writes: Vec<Vec<String>> = vec![
        lims[0].call("RL.ADMIT"),
        lims[1].call("RL.ADMIT"),
        peek,
        lims[1].call("RL.REFUND"),
        vec!["RL.RESET".into(), lims[1].key.clone()],
        common::words(&split("RL.THROTTLE {rep}:thr 2 3 60")),
        common::words(&all),
    ];
    let mut plain = c.client(r);
    for w in &writes {
        for con in [&mut ro, &mut plain] {
            let v = b.raw(con, &strs(w));
            assert_eq!(redirect(&v, "MOVED"), primary_port, "{w:?}: {v:?}");
        }
    }
    for read in [
        lims[0].call("RL.TTL"),
        vec!["RL.LIMIT".into(), "{rep}:meta".into()],
    ] {
        let v = b.raw(&mut plain, &strs(&read));
        assert_eq!(redirect(&v, "MOVED"), primary_port, "{read:?}: {v:?}");
    }
    // The writes' commands (INFO names a module command as registered, a
    // server command in lower case): the module's, or the library's FCALL.
    let write_commands = match backend {
        Backend::Module => split("RL.ADMIT RL.REFUND RL.RESET RL.THROTTLE RL.ADMITALL"),
        Backend::Functions => vec!["fcall"],
    };
    for cmd in write_commands {
        let stat = cmdstat(&c, r, cmd);
        // Rejected calls count as `rejected_calls`, never as `calls`.
        assert!(
            stat.is_empty() || stat.starts_with("calls=0,"),
            "{backend:?}: {cmd} on the replica: {stat}"
        );
    }
    assert_eq!(state_of(&mut ro, &keys), on_primary, "the replica wrote");

    // 3. A graceful failover: the replica takes over with the same state.
    failover(&c, r, p, slot);
    let promoted = state_on(&c, r, &keys);
    assert_eq!(promoted, on_primary, "the promoted replica's state");
    // The spent limiters stay spent: the fixed window refuses with its
    // PTTL (read in the same transaction, so at the same time) ...
    let v = common::exec(
        &mut c.client(r),
        &[
            backend.call(&long_fixed),
            vec!["PTTL".into(), "{rep}:long:fixed".into()],
        ],
    );
    let pttl = common::int(&v[1]);
    assert!(pttl > 590_000, "{v:?}");
    assert_eq!(try_ints(&v[0]).unwrap(), [0, 3, 0, pttl, pttl]);
    // ... and the token bucket stays empty.
    let (v, node) = c.route("{rep}", &long_token);
    assert_eq!(node, r);
    let d = try_ints(&v).unwrap();
    assert_eq!(d[..3], [0, 2, 0], "{d:?}");
    assert!(d[3] > 190_000, "{d:?}");
    // New writes on the new primary reach the old one.
    let after = split("RL.ADMIT {rep}:after LIMIT 5 WINDOW 60000");
    c.route_ints("{rep}", &after);
    c.route_ints("{rep}", &after);
    c.route_ints("{rep}", &strs(&lims[1].call("RL.REFUND")));
    c.route("{rep}", &["RL.RESET", "{rep}:all:a"]);
    wait_in_sync(&c, r, p);
    let on_new = state_on(&c, r, &keys);
    assert_eq!(on_new["{rep}:after"].0, ["2"]);
    assert!(!on_new.contains_key("{rep}:all:a"));
    let mut ro = c.readonly_client(p);
    assert_eq!(state_of(&mut ro, &keys), on_new, "old primary vs new");

    // A forced failover under load: the old primary takes the slots back.
    let (admitted, calls) = hammer_through_a_forced_failover(&c, p, r);
    wait_in_sync(&c, p, r);
    let final_state = state_on(&c, p, &keys);
    let mut ro = c.readonly_client(r);
    assert_eq!(state_of(&mut ro, &keys), final_state, "after FORCE");
    let counted: i64 = final_state["{rep}:hammer"].0[0].parse().unwrap();
    assert!(
        counted <= admitted && counted > 0,
        "{counted} counted, {admitted} admitted"
    );
    println!(
        "{backend:?} cluster replica: {} keys identical on primary and replica (replica lagging 0.3 s), \
         failover kept them; FORCE under load: {admitted} admitted ({} on the new primary), \
         {counted} counted, {} lost; {} ms in all",
        on_primary.len(),
        calls[0],
        admitted - counted,
        started.elapsed().as_millis()
    );
}

/// Runs RL.ADMIT in a loop, following MOVED, while `CLUSTER FAILOVER FORCE`
/// on `p` (the replica of `r`) takes the slots back; every call is admitted
/// or redirected, and both nodes served some. Returns the calls admitted and
/// how many each node served, [p, r].
fn hammer_through_a_forced_failover(c: &Cluster, p: usize, r: usize) -> (i64, [u64; 2]) {
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let ports = [c.nodes[p].port, c.nodes[r].port];
    let backend = c.backend();
    let hammer = {
        let stop = stop.clone();
        let mut cons: Vec<Connection> = [p, r].map(|n| c.client(n)).into();
        std::thread::spawn(move || {
            let call = split("RL.ADMIT {rep}:hammer LIMIT 100000000 WINDOW 600000");
            let (mut at, mut admitted, mut calls, mut other) = (1, 0i64, [0u64; 2], Vec::new());
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let v = backend.raw(&mut cons[at], &call);
                if let Some(port) = redirect(&v, "MOVED") {
                    at = ports.iter().position(|&x| x == port).unwrap();
                    continue;
                }
                match try_ints(&v) {
                    Some(d) if d[0] == 1 => {
                        admitted += 1;
                        calls[at] += 1;
                    }
                    _ => other.push(format!("{v:?}")),
                }
            }
            (admitted, calls, other)
        })
    };
    sleep(Duration::from_millis(300));
    let v = cmd_raw(&mut c.client(p), &["CLUSTER", "FAILOVER", "FORCE"]);
    assert_eq!(v, Value::Okay, "CLUSTER FAILOVER FORCE");
    common::wait_until(
        Duration::from_secs(10),
        "the forced failover settled",
        || {
            c.role(p) == "master"
                && c.role(r) == "slave"
                && common::info_field(&mut c.client(r), "replication", "master_link_status")
                    .as_deref()
                    == Some("up")
        },
    );
    sleep(Duration::from_millis(300));
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let (admitted, calls, other) = hammer.join().unwrap();
    assert!(other.is_empty(), "not admitted, not MOVED: {other:?}");
    assert!(
        calls.iter().all(|&n| n > 0),
        "calls on [old, new]: {calls:?}"
    );
    (admitted, calls)
}

/// A connection to `node` that has selected db `n` (after `READONLY`, with
/// `readonly`).
fn in_db(c: &Cluster, node: usize, n: &str, readonly: bool) -> Connection {
    let mut con = match readonly {
        true => c.readonly_client(node),
        false => c.client(node),
    };
    assert_eq!(cmd_raw(&mut con, &["SELECT", n]), Value::Okay, "SELECT {n}");
    con
}

/// Valkey 9's numbered databases in cluster mode (`cluster-databases`): a
/// limiter lives in the db its caller selected, and so do its META hash and
/// RL.ADMITALL's keys; the replica holds each key in the same db, exactly;
/// after a failover the new primary keeps counting there. The same key name
/// in db 0 is another limiter.
///
/// It would fail if an effect reached the replica in another db (its
/// DBSIZEs and states are compared per db) or if a call read or wrote
/// outside the selected db.
#[test]
fn numbered_databases_in_cluster_keep_each_limiter_in_its_db() {
    if common::server_major_version() < 9 {
        println!("SKIPPED: cluster-databases is Valkey 9 and later");
        return;
    }
    for backend in BOTH {
        numbered_databases_on(backend);
    }
}

fn numbered_databases_on(backend: Backend) {
    let b = backend;
    let mut c = Cluster::start_on(backend, 1, &["--cluster-databases", "4"]);
    let (p, r) = (0, c.add_replica(0));
    let slot = c.keyslot("{mdb}");

    let mut two = in_db(&c, p, "2", false);
    let fixed = ["RL.ADMIT", "{mdb}:fixed", "LIMIT", "3", "WINDOW", "600000"];
    for remaining in [2, 1] {
        assert_eq!(
            common::ints(&b.raw(&mut two, &fixed))[..3],
            [1, 3, remaining]
        );
    }
    let gcra = [
        "RL.ADMIT",
        "{mdb}:gcra",
        "ALGO",
        "gcra",
        "LIMIT",
        "10",
        "WINDOW",
        "600000",
        "BURST",
        "5",
    ];
    assert_eq!(common::ints(&b.raw(&mut two, &gcra))[..3], [1, 5, 4]);
    let meta = ["HSET", "{mdb}:meta", "max", "2", "duration", "600000"];
    assert_eq!(b.raw(&mut two, &meta), Value::Int(2));
    let metered = ["RL.ADMIT", "{mdb}:metered", "META", "{mdb}:meta"];
    for admitted in [1, 1, 0] {
        assert_eq!(common::ints(&b.raw(&mut two, &metered))[..2], [admitted, 2]);
    }
    let all = [
        "RL.ADMITALL",
        "2",
        "{mdb}:all:a",
        "{mdb}:all:b",
        "POLICY",
        "LIMIT",
        "1",
        "WINDOW",
        "600000",
        "POLICY",
        "META",
        "{mdb}:meta",
    ];
    for admitted in [1, 0] {
        let v = b.raw(&mut two, &all);
        let Value::Array(items) = &v else {
            panic!("{v:?}")
        };
        assert_eq!(items[0], Value::Int(admitted), "{v:?}");
    }
    // The same name in db 0: a limiter of its own, and no META hash there.
    let mut zero = c.client(p);
    assert_eq!(common::ints(&b.raw(&mut zero, &fixed))[..3], [1, 3, 2]);
    assert_eq!(common::ints(&b.raw(&mut zero, &metered)), [1, 0, 0, 0, 0]);

    let keys: Vec<String> = [
        "{mdb}:fixed",
        "{mdb}:gcra",
        "{mdb}:meta",
        "{mdb}:metered",
        "{mdb}:all:a",
        "{mdb}:all:b",
    ]
    .map(String::from)
    .to_vec();
    let on_primary = state_of(&mut two, &keys);
    assert_eq!(on_primary.len(), keys.len(), "{on_primary:?}");
    assert_eq!(on_primary["{mdb}:fixed"].0, ["2"]);
    assert_eq!(on_primary["{mdb}:all:a"].0, ["1"]);
    assert_eq!(b.raw(&mut two, &["DBSIZE"]), Value::Int(6));
    assert_eq!(b.raw(&mut zero, &["DBSIZE"]), Value::Int(1));

    // The replica: the same keys in the same dbs, and the reads answer there.
    wait_in_sync(&c, p, r);
    let mut ro_two = in_db(&c, r, "2", true);
    assert_eq!(
        state_of(&mut ro_two, &keys),
        on_primary,
        "db 2 on the replica"
    );
    assert_eq!(b.raw(&mut ro_two, &["DBSIZE"]), Value::Int(6));
    assert_eq!(
        b.raw(&mut ro_two, &["RL.LIMIT", "{mdb}:meta"]),
        Value::Int(2)
    );
    let mut ro_zero = c.readonly_client(r);
    assert_eq!(b.raw(&mut ro_zero, &["DBSIZE"]), Value::Int(1));
    let in_zero = state_of(&mut ro_zero, &keys);
    assert_eq!(in_zero["{mdb}:fixed"].0, ["1"], "db 0 on the replica");

    // After a failover the new primary counts on in each db.
    failover(&c, r, p, slot);
    let mut new_two = in_db(&c, r, "2", false);
    assert_eq!(common::ints(&b.raw(&mut new_two, &fixed))[..3], [1, 3, 0]);
    assert_eq!(common::ints(&b.raw(&mut new_two, &fixed))[0], 0);
    assert_eq!(common::ints(&b.raw(&mut new_two, &metered))[0], 0);
    let mut new_zero = c.client(r);
    assert_eq!(common::ints(&b.raw(&mut new_zero, &fixed))[..3], [1, 3, 1]);
    wait_in_sync(&c, r, p);
    let mut old_two = in_db(&c, p, "2", true);
    assert_eq!(
        state_of(&mut old_two, &keys),
        state_of(&mut new_two, &keys),
        "db 2, old primary vs new"
    );
    let mut old_zero = c.readonly_client(p);
    assert_eq!(state_of(&mut old_zero, &keys)["{mdb}:fixed"].0, ["2"]);
}

// Both backends: every key of a call is a key, so a node that does not own
// it answers MOVED, keys of different slots get the server's CROSSSLOT, and
// the owner answers as a standalone server would.

/// Two primaries of `backend`, slots split in half (0-8191, 8192-16383).
fn two_primaries(backend: Backend) -> Cluster {
    Cluster::start_on(backend, 2, &[])
}

fn slot_of(con: &mut redis::Connection, key: &str) -> i64 {
    redis::cmd("CLUSTER")
        .arg("KEYSLOT")
        .arg(key)
        .query(con)
        .unwrap()
}

/// What a call got from each node: the owner's reply, and from the other a
/// MOVED to the owner, or the same error (CROSSSLOT) from both.
fn routed(backend: Backend, nodes: &[Server], call: &[&str], key: &str) -> String {
    let mut con = nodes[0].client();
    let owner = usize::from(slot_of(&mut con, key) >= 8192);
    let mut out = String::new();
    for (i, node) in nodes.iter().enumerate() {
        let reply = backend.raw(&mut node.client(), call);
        let line = match redirect(&reply, "MOVED") {
            Some(port) => {
                assert_eq!(
                    port, nodes[owner].port,
                    "{backend:?} {call:?}: MOVED elsewhere"
                );
                assert_ne!(i, owner, "{backend:?} {call:?}: the owner redirected");
                "MOVED to the owner".to_string()
            }
            None => match error_text(&reply) {
                Some(e) => format!("!{e}"),
                None => {
                    assert_eq!(
                        i, owner,
                        "{backend:?} {call:?}: a non-owner answered {reply:?}"
                    );
                    show(&reply)
                }
            },
        };
        out += &format!("node{}: {line}; ", if i == owner { "=owner" } else { "" });
    }
    out
}

#[test]
fn every_key_routes_moves_and_crossslots_as_with_the_module() {
    // Every reply is independent of the clock: fresh limiters, full windows.
    let calls: Vec<(Vec<&str>, &str)> = vec![
        (vec!["RL.ADMIT", "a", "LIMIT", "3", "WINDOW", "60000"], "a"),
        (vec!["RL.ADMIT", "b", "LIMIT", "3", "WINDOW", "60000"], "b"),
        (
            vec!["HSET", "{a}:meta", "max", "2", "duration", "60000"],
            "{a}:meta",
        ),
        (vec!["RL.ADMIT", "{a}:x", "META", "{a}:meta"], "{a}:x"),
        (vec!["RL.ADMIT", "b", "META", "{a}:meta"], "b"),
        (vec!["RL.TTL", "a", "META", "{a}:meta"], "a"),
        (vec!["RL.TTL", "b", "META", "{a}:meta"], "b"),
        (vec!["RL.REFUND", "b", "META", "{a}:meta"], "b"),
        (vec!["RL.LIMIT", "{a}:meta"], "{a}:meta"),
        (vec!["RL.THROTTLE", "b", "1", "1", "1"], "b"),
        (vec!["RL.RESET", "a"], "a"),
        (
            vec![
                "RL.ADMITALL",
                "2",
                "u:{a}",
                "v:{a}",
                "POLICY",
                "LIMIT",
                "1",
                "WINDOW",
                "60000",
                "POLICY",
                "META",
                "{a}:meta",
            ],
            "u:{a}",
        ),
        (
            vec![
                "RL.ADMITALL",
                "2",
                "u:{a}",
                "b",
                "POLICY",
                "LIMIT",
                "1",
                "WINDOW",
                "60000",
                "POLICY",
                "LIMIT",
                "1",
                "WINDOW",
                "60000",
            ],
            "u:{a}",
        ),
        (
            vec![
                "RL.ADMITALL",
                "1",
                "b",
                "POLICY",
                "LIMIT",
                "1",
                "WINDOW",
                "60000",
                "META",
                "{a}:meta",
            ],
            "b",
        ),
    ];
    let mut transcripts = Vec::new();
    for backend in BOTH {
        let cluster = two_primaries(backend);
        let nodes = &cluster.nodes;
        {
            let mut con = nodes[0].client();
            assert_ne!(
                slot_of(&mut con, "a") >= 8192,
                slot_of(&mut con, "b") >= 8192,
                "a and b must live on different nodes"
            );
        }
        let lines: Vec<String> = calls
            .iter()
            .map(|(call, key)| format!("{call:?}: {}", routed(backend, nodes, call, key)))
            .collect();
        transcripts.push(lines);
    }
    // The module and the library give every call the same answers.
    for (m, f) in transcripts[0].iter().zip(&transcripts[1]) {
        assert_eq!(m, f);
    }
    // And the answers are what routing means.
    let module = &transcripts[0];
    assert!(module[0].contains("[1, 3, 2, 0, 60000]"), "{}", module[0]);
    assert!(module[3].contains("[1, 2, 1, 0, 60000]"), "{}", module[3]);
    assert!(module[5].contains("owner: 0;"), "{}", module[5]);
    for i in [4, 6, 7, 12, 13] {
        assert!(module[i].contains("!CROSSSLOT"), "{}", module[i]);
    }
    assert!(module[11].contains("[1, 0, 0, "), "{}", module[11]);
}

#[test]
fn lease_calls_route_by_key_and_a_meta_in_another_slot_is_crossslot() {
    let calls: Vec<(Vec<&str>, &str)> = vec![
        (
            vec!["RL.ACQUIRE", "a", "LIMIT", "2", "TTL", "60000", "ID", "j"],
            "a",
        ),
        (vec!["HSET", "{a}:lm", "max", "1", "ttl", "60000"], "{a}:lm"),
        (
            vec!["RL.ACQUIRE", "{a}:x", "META", "{a}:lm", "ID", "k"],
            "{a}:x",
        ),
        (vec!["RL.ACQUIRE", "{a}:x", "META", "{a}:lm"], "{a}:x"),
        (vec!["RL.ACQUIRE", "b", "META", "{a}:lm"], "b"),
        (vec!["RL.ACQUIRE", "b", "META", "{a}:lm", "ID", "k"], "b"),
        (vec!["RL.INFLIGHT", "a"], "a"),
        (vec!["RL.EXTEND", "a", "j", "TTL", "60000"], "a"),
        (vec!["RL.RELEASE", "a", "j"], "a"),
        (vec!["RL.RELEASE", "b", "j"], "b"),
        (vec!["RL.INFLIGHT", "a"], "a"),
    ];
    let mut transcripts = Vec::new();
    for backend in BOTH {
        let cluster = two_primaries(backend);
        let nodes = &cluster.nodes;
        let lines: Vec<String> = calls
            .iter()
            .map(|(call, key)| format!("{call:?}: {}", routed(backend, nodes, call, key)))
            .collect();
        // No call wrote to a node that does not own its key: b is on the
        // other node from a and holds nothing.
        let mut con = nodes[0].client();
        let b_owner = usize::from(slot_of(&mut con, "b") >= 8192);
        let b_keys = cmd_raw(&mut nodes[b_owner].client(), &["DBSIZE"]);
        assert_eq!(b_keys, Value::Int(0), "{backend:?}: {lines:#?}");
        let t = &lines;
        assert!(t[0].contains("owner: [1, 2, 1, 0, \"j\"]"), "{}", t[0]);
        assert!(t[0].contains("MOVED to the owner"), "{}", t[0]);
        assert!(t[2].contains("owner: [1, 1, 1, 0, \"k\"]"), "{}", t[2]);
        assert!(t[3].contains("owner: [0, 1, 1, "), "{}", t[3]);
        for i in [4, 5] {
            assert!(t[i].contains("!CROSSSLOT"), "{}", t[i]);
            assert!(!t[i].contains("owner: ["), "{}", t[i]);
        }
        assert!(t[6].contains("owner: 1;"), "{}", t[6]);
        assert!(t[7].contains("owner: 1;"), "{}", t[7]);
        assert!(t[8].contains("owner: 1;"), "{}", t[8]);
        assert!(t[9].contains("owner: 0;"), "{}", t[9]);
        assert!(t[10].contains("owner: 0;"), "{}", t[10]);
        transcripts.push(lines);
    }
    // Every backend answers every call alike, but for the refusal's wait,
    // which depends on the ms each server took.
    let no_wait = |lines: &Vec<String>| -> Vec<String> {
        lines
            .iter()
            .map(|l| match l.split_once("[0, 1, 1, ") {
                Some((head, tail)) => {
                    let rest = tail.split_once(',').map_or("", |(_, r)| r);
                    format!("{head}[0, 1, 1, <wait>,{rest}")
                }
                None => l.clone(),
            })
            .collect()
    };
    for other in &transcripts[1..] {
        assert_eq!(no_wait(other), no_wait(&transcripts[0]));
    }
}
