#!/usr/bin/env python3
"""Lease benchmark: RL.ACQUIRE + RL.RELEASE pairs against the FUNCTION
library's rl_acquire + rl_release and the hand-rolled scripts
bench/lua/lease_acquire.lua + lease_release.lua, in one run, interleaved;
and the memory a live lease costs.

bench.py runs it as its last phase (`make bench`); alone:

    python3 bench/lease_bench.py            # starts its own server
    BENCH_QUICK=1 python3 bench/lease_bench.py

and saves bench/results/results-YYYY-MM-DD-valkey-<version>-leases[-quick].md.

The pairs. Each of CLIENTS connections owns a semaphore key and sends
batches of P acquires (ids c<conn>-0 .. c<conn>-<P-1>, LIMIT 1e9, TTL 60 s:
never refused) followed by the P releases, one batch in flight per
connection. Every reply of a batch is known in advance (after the k-th
acquire k leases are in flight; every release answers 1), so the driver
compares the reply bytes to the expected ones and counts pairs without
parsing: the client side costs little next to the server's. Pairs/s is
what the driver completed; server µs/pair comes from INFO commandstats
(RL.ACQUIRE + RL.RELEASE, FCALL, or EVALSHA, divided by the pairs).

Environment: BENCH_QUICK=1 (2 rounds of 2 s), BENCH_ROUNDS=N,
BENCH_LEASE_S=seconds per run, BENCH_OUT=path (standalone only).
"""

import datetime
import multiprocessing
from dataclasses import dataclass
import os
import selectors
import socket
import statistics
import sys
import time

sys.dont_write_bytecode = True  # no __pycache__ in bench/
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import valkey_harness as vh  # noqa: E402

QUICK = os.environ.get("BENCH_QUICK", "") not in ("", "0")
ROUNDS = int(os.environ.get("BENCH_ROUNDS") or (2 if QUICK else 3))
RUN_S = float(os.environ.get("BENCH_LEASE_S") or (2 if QUICK else 5))

@dataclass(frozen=True)
class Shape:
    """How a connection's batch is laid out. ``p`` pairs per batch;
    ``nested``: the P acquires first, then the P releases (up to P leases
    live per key), else acquire, release, acquire, ... (one live at a time);
    ``held``: leases of other holders the key keeps throughout (TTL 1 h)."""

    name: str
    p: int
    nested: bool = False
    held: int = 0


SHAPES = (
    Shape("P1", 1),
    Shape("P16", 16),
    Shape("P16 nested", 16, nested=True),
    Shape("P16, 100 held", 16, held=100),
)
# The shape of the bar: pairs, pipelined, as a job lane or connection pool runs them.
BAR_SHAPE = "P16"
CLIENTS = 50
# Client processes: the server has one core to itself on a 2-core machine
# only if the driver stays in one.
WORKERS = int(os.environ.get("BENCH_LEASE_WORKERS") or 1)
LIMIT = "1000000000"
TTL_MS = "60000"
# Memory: leases per key, and keys with one lease each.
MEM_LEASES = (1, 16, 128, 129, 1000, 10000)
MEM_KEYS = 20000 if QUICK else 100000
TARGET = 3.0  # the bar: pairs/s at least 3x the hand-rolled script's

ROWS = (
    ("hand", "hand-rolled script: EVALSHA lease_acquire.lua + lease_release.lua"),
    ("lib", "library: FCALL rl_acquire + rl_release"),
    ("mod", "module: RL.ACQUIRE + RL.RELEASE"),
)


def log(msg):
    print(msg, file=sys.stderr, flush=True)


def encode(words):
    return vh.Client._encode(words)


def pair(row, shas, key, lease_id):
    """The acquire and release words of one pair."""
    if row == "mod":
        return (["RL.ACQUIRE", key, "LIMIT", LIMIT, "TTL", TTL_MS, "ID", lease_id],
                ["RL.RELEASE", key, lease_id])
    if row == "lib":
        return (["FCALL", "rl_acquire", "1", key, "LIMIT", LIMIT, "TTL", TTL_MS, "ID", lease_id],
                ["FCALL", "rl_release", "1", key, lease_id])
    return (["EVALSHA", shas["acquire"], "1", key, LIMIT, TTL_MS, lease_id],
            ["EVALSHA", shas["release"], "1", key, lease_id])


def conn_key(row, conn):
    return "bl:%s:%04d" % (row, conn)


def batch(row, shas, conn, shape):
    """One connection's batch of ``shape.p`` pairs."""
    key = conn_key(row, conn)
    pairs = [pair(row, shas, key, "c%04d-%02d" % (conn, i)) for i in range(shape.p)]
    if shape.nested:
        return b"".join(encode(a) for a, _ in pairs) + b"".join(encode(r) for _, r in pairs)
    return b"".join(encode(a) + encode(r) for a, r in pairs)


def prefill(c, row, shape):
    """The other holders' leases on every connection's key."""
    if not shape.held:
        return
    sec, usec = c.call("TIME")
    deadline = str(int(sec) * 1000 + int(usec) // 1000 + 3600000)
    words = []
    for conn in range(CLIENTS):
        key = conn_key(row, conn)
        for i in range(shape.held):
            words.append(encode(["ZADD", key, deadline, "h-%03d" % i]))
        words.append(encode(["PEXPIRE", key, "3600000"]))
    s = socket.create_connection(("127.0.0.1", c.sock.getpeername()[1]))
    s.sendall(b"".join(words))
    data = b""
    while _count_replies_safe(data) < len(words):
        data += s.recv(1 << 20)
    s.close()


def _count_replies_safe(data):
    try:
        return _count_replies(data)
    except IndexError:
        return -1


def expected_reply(c, port, row, shas, shape):
    """Sends connection 0's batch once, checks every reply (acquired, with
    the in-flight count the layout implies; each release 1), and returns the
    exact reply bytes every later batch must get (in-flight counts and ids
    have the same widths for every connection)."""
    c.call("FLUSHALL", "SYNC")
    prefill(c, row, shape)
    client = vh.Client(port)
    try:
        client.sock.sendall(batch(row, shas, 0, shape))
        replies = [client._reply() for _ in range(2 * shape.p)]
    finally:
        client.close()
    if shape.nested:
        acquires, releases = replies[:shape.p], replies[shape.p:]
    else:
        acquires, releases = replies[0::2], replies[1::2]
    at = 1 if row == "hand" else 2
    for k, r in enumerate(acquires, 1):
        want = shape.held + (k if shape.nested else 1)
        if not (isinstance(r, list) and r[0] == 1 and r[at] == want):
            raise RuntimeError("%s %s: acquire %d answered %r" % (row, shape.name, k, r))
    if releases != [1] * shape.p:
        raise RuntimeError("%s %s: releases answered %r" % (row, shape.name, releases))
    # Again over a raw socket, to capture the bytes.
    s = socket.create_connection(("127.0.0.1", port))
    s.settimeout(10)
    s.sendall(batch(row, shas, 0, shape))
    data = b""
    while _count_replies_safe(data) < 2 * shape.p:
        data += s.recv(65536)
    s.close()
    return data


def expected_for(expected, conn):
    """Connection 0's reply bytes as connection `conn` gets them: the ids the
    module and library echo name the connection (same width)."""
    return expected.replace(b"c0000-", b"c%04d-" % conn)


def _count_replies(data):
    """The number of whole RESP2 replies in data (IndexError if one is cut)."""
    pos, n = 0, 0

    def skip(pos):
        end = data.index(b"\r\n", pos)
        kind, rest = data[pos:pos + 1], data[pos + 1:end]
        pos = end + 2
        if kind == b"$" and int(rest) >= 0:
            if len(data) < pos + int(rest) + 2:
                raise IndexError
            return pos + int(rest) + 2
        if kind == b"*":
            for _ in range(max(0, int(rest))):
                pos = skip(pos)
        return pos

    while pos < len(data):
        try:
            pos = skip(pos)
        except ValueError:
            raise IndexError
        n += 1
    return n


def drive(args):
    """One worker: its connections send their batch, compare the reply to
    the expected bytes and send again, for `seconds`. Returns batches done."""
    port, row, shas, shape, conns, expected, seconds = args
    sel = selectors.DefaultSelector()
    states = []
    for conn in conns:
        s = socket.create_connection(("127.0.0.1", port))
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        s.setblocking(False)
        st = {"sock": s, "out": batch(row, shas, conn, shape), "buf": bytearray(), "done": 0,
              "want": expected_for(expected, conn)}
        states.append(st)
        sel.register(s, selectors.EVENT_READ, st)
    deadline = time.monotonic() + seconds
    for st in states:
        st["sock"].sendall(st["out"])
    bad = 0
    while time.monotonic() < deadline:
        for key, _ in sel.select(timeout=0.5):
            st = key.data
            chunk = st["sock"].recv(262144)
            if not chunk:
                raise ConnectionError("server closed a connection")
            st["buf"] += chunk
            if len(st["buf"]) >= len(st["want"]):
                if bytes(st["buf"]) != st["want"]:
                    bad += 1
                st["buf"] = bytearray()
                st["done"] += 1
                st["sock"].sendall(st["out"])
    # Drain the batches still in flight, so the next run starts clean.
    for st in states:
        st["sock"].setblocking(True)
        st["sock"].settimeout(10)
        while len(st["buf"]) < len(st["want"]):
            st["buf"] += st["sock"].recv(262144)
        st["sock"].close()
    return sum(st["done"] for st in states), bad


def cmdstats(c):
    """INFO commandstats: command -> (calls, usec)."""
    out = {}
    for k, v in c.info("commandstats").items():
        fields = dict(kv.split("=", 1) for kv in v.split(","))
        out[k[len("cmdstat_"):].lower()] = (int(fields["calls"]), int(fields["usec"]))
    return out


STAT_NAMES = {"mod": ("rl.acquire", "rl.release"), "lib": ("fcall",), "hand": ("evalsha",)}


def one_run(c, port, row, shas, shape, expected):
    c.call("FLUSHALL", "SYNC")
    prefill(c, row, shape)
    c.call("CONFIG", "RESETSTAT")
    conns = list(range(CLIENTS))
    parts = [conns[i::WORKERS] for i in range(WORKERS)]
    args = [(port, row, shas, shape, part, expected, RUN_S) for part in parts]
    t0 = time.monotonic()
    if WORKERS == 1:
        results = [drive(args[0])]
    else:
        with multiprocessing.Pool(WORKERS) as pool:
            results = pool.map(drive, args)
    elapsed = time.monotonic() - t0
    batches = sum(r[0] for r in results)
    bad = sum(r[1] for r in results)
    if bad:
        raise RuntimeError("%s %s: %d batches got unexpected replies" % (row, shape.name, bad))
    pairs = batches * shape.p
    stats = cmdstats(c)
    calls = sum(stats.get(n, (0, 0))[0] for n in STAT_NAMES[row])
    usec = sum(stats.get(n, (0, 0))[1] for n in STAT_NAMES[row])
    if calls < 2 * pairs:
        raise RuntimeError("%s %s: server saw %d calls for %d pairs" % (row, shape.name, calls, pairs))
    # Every batch released what it acquired: only the other holders' leases are left.
    left = sum(c.call("ZCARD", conn_key(row, conn)) for conn in range(CLIENTS))
    if left != CLIENTS * shape.held:
        raise RuntimeError("%s %s: %d leases left after the run" % (row, shape.name, left))
    return {"pairs_s": pairs / elapsed, "us_pair": usec / (calls / 2), "pairs": pairs}


def throughput(c, port):
    shas = {"acquire": vh.load_script(c, "lease_acquire"),
            "release": vh.load_script(c, "lease_release")}
    vh.load_library(c)
    expected = {}
    for row, _ in ROWS:
        for shape in SHAPES:
            expected[row, shape.name] = expected_reply(c, port, row, shas, shape)
    results = {}
    for rnd in range(ROUNDS):
        for shape in SHAPES:
            for row, _ in ROWS:
                r = one_run(c, port, row, shas, shape, expected[row, shape.name])
                results.setdefault((row, shape.name), []).append(r)
                log("  round %d %-14s %-4s %9.0f pairs/s  %.2f µs/pair" % (
                    rnd + 1, shape.name, row, r["pairs_s"], r["us_pair"]))
    return {k: {"pairs_s": statistics.median(x["pairs_s"] for x in v),
                "us_pair": statistics.median(x["us_pair"] for x in v),
                "runs": len(v)} for k, v in results.items()}


FILL = """
local start, n, prefix = tonumber(ARGV[1]), tonumber(ARGV[2]), ARGV[3]
for i = start, start + n - 1 do
  local k = KEYS[1]
  if prefix ~= '' then k = string.format('%s%012d', prefix, i) end
  server.call('RL.ACQUIRE', k, 'LIMIT', '1000000000', 'TTL', '3600000')
end
return n
"""


def memory(c):
    """MEMORY USAGE of one key holding N leases (module-generated ids, 28
    bytes), per lease; and used_memory per key for many keys with one
    lease each, next to the same number of `SET key 1 PX` keys."""
    out = {"per_key": [], "many": {}}
    c.call("FLUSHALL", "SYNC")
    for n in MEM_LEASES:
        key = "ml:%06d" % n
        c.call("EVAL", FILL, "1", key, "1", str(n), "")
        if c.call("ZCARD", key) != n:
            raise RuntimeError("memory: %s does not hold %d leases" % (key, n))
        usage = c.call("MEMORY", "USAGE", key, "SAMPLES", "0")
        encoding = c.call("OBJECT", "ENCODING", key)
        out["per_key"].append({"n": n, "bytes": usage, "per_lease": usage / n, "encoding": encoding})
    sample_id = c.call("ZRANGE", "ml:%06d" % 1, "0", "0")[0]
    out["id_len"] = len(sample_id)
    for what in ("lease", "set"):
        c.call("FLUSHALL", "SYNC")
        before = int(c.info("memory")["used_memory"])
        if what == "lease":
            for start in range(0, MEM_KEYS, 10000):
                n = min(10000, MEM_KEYS - start)
                c.call("EVAL", FILL, "1", "mk:", str(start), str(n), "mk:")
        else:
            fill = ("for i = 1, tonumber(ARGV[1]) do server.call('SET', string.format('mk:%012d', i), "
                    "'1', 'PX', '3600000') end")
            c.call("EVAL", fill, "0", str(MEM_KEYS))
        size = c.call("DBSIZE")
        if size != MEM_KEYS:
            raise RuntimeError("memory: %d keys, expected %d" % (size, MEM_KEYS))
        after = int(c.info("memory")["used_memory"])
        out["many"][what] = (after - before) / MEM_KEYS
    c.call("FLUSHALL", "SYNC")
    return out


def fmt_rps(x):
    return "{:,.0f}".format(x)


def section(res, mem):
    """The report's lease section and its bars: (markdown lines, bars)."""
    L = ["## Leases: RL.ACQUIRE + RL.RELEASE pairs", ""]
    L.append("%d connections, each on its own semaphore key, send batches of P acquires "
             "(`ID c<conn>-<i>`, `LIMIT 1e9`, `TTL 60000`: never refused) then their P "
             "releases; one batch in flight per connection; every reply byte-compared with "
             "the known answer. %d rounds of %.0f s per row, interleaved, medians. Server "
             "µs/pair from `INFO commandstats` (RL.ACQUIRE + RL.RELEASE, FCALL, EVALSHA). "
             "The driver is Python in %d process(es) on the same machine, so at P=1 it is "
             "the client that limits pairs/s; P=16 is where the server's cost shows."
             % (CLIENTS, ROUNDS, RUN_S, WORKERS))
    L.append("")
    L.append("| shape | pair | pairs/s | server µs/pair | pairs/s vs script | µs vs script |")
    L.append("|---|---|--:|--:|--:|--:|")
    for shape in SHAPES:
        hand = res[("hand", shape.name)]
        for row, label in ROWS:
            r = res[(row, shape.name)]
            L.append("| %s | %s | %s | %.2f | %.2f× | %.2f× |" % (
                shape.name, label, fmt_rps(r["pairs_s"]), r["us_pair"],
                r["pairs_s"] / hand["pairs_s"], hand["us_pair"] / r["us_pair"]))
    L.append("")
    L.append("Shapes: *P1* one pair per round trip; *P16* 16 pairs per batch, acquire then "
             "release, one lease live per key at a time; *P16 nested* the 16 acquires, then "
             "the 16 releases (up to 16 live per key); *P16, 100 held* as P16 on keys that "
             "also hold 100 other live leases throughout.")
    L.append("")
    L.append("### Memory per live lease")
    L.append("")
    L.append("`MEMORY USAGE key SAMPLES 0` of one key holding N leases with the module's "
             "generated ids (%d bytes each), divided by N:" % mem["id_len"])
    L.append("")
    L.append("| leases | encoding | bytes | bytes/lease |")
    L.append("|--:|---|--:|--:|")
    for m in mem["per_key"]:
        L.append("| %d | %s | %d | %.1f |" % (m["n"], m["encoding"], m["bytes"], m["per_lease"]))
    L.append("")
    L.append("`used_memory` grown by %s keys holding one lease each: **%.0f bytes per key** "
             "(the same number of `SET key 1 PX 3600000` keys: %.0f bytes per key)." % (
                 fmt_rps(MEM_KEYS), mem["many"]["lease"], mem["many"]["set"]))
    L.append("")
    bars = []
    for shape in SHAPES:
        if shape.p == 1:
            continue
        m, h = res[("mod", shape.name)], res[("hand", shape.name)]
        x = m["pairs_s"] / h["pairs_s"]
        y = h["us_pair"] / m["us_pair"]
        bars.append(("%s: RL.ACQUIRE+RL.RELEASE pairs/s ≥ %.0f× the hand-rolled script's" % (
            shape.name, TARGET), "%s/%s pairs/s = %.2f×; server µs/pair %.2f vs %.2f = %.2f×" % (
                fmt_rps(m["pairs_s"]), fmt_rps(h["pairs_s"]), x, m["us_pair"], h["us_pair"], y),
            x >= TARGET))
    return L, bars


def measure(c, port):
    """Both phases on a running server with the module: (lines, bars)."""
    log("leases: pairs, %d rounds x %d rows x %d shapes x %.0f s" % (
        ROUNDS, len(ROWS), len(SHAPES), RUN_S))
    res = throughput(c, port)
    log("leases: memory")
    mem = memory(c)
    return section(res, mem)


def markdown(lines, bars):
    """The section and its bars as Markdown."""
    L = lines + ["### Lease bars", "", "| bar | figures | verdict |", "|---|---|---|"]
    for name, fig, ok in bars:
        L.append("| %s | %s | %s |" % (name, fig, "PASS" if ok else "MISS"))
    L.append("")
    return "\n".join(L) + "\n"


def main():
    started = datetime.datetime.now()
    with vh.Server() as srv:
        version = srv.version()
        log("valkey-server %s on 127.0.0.1:%d" % (version, srv.port))
        c = srv.client()
        lines, bars = measure(c, srv.port)
    head = ["# Lease benchmark, valkey %s, %s" % (version, started.strftime("%Y-%m-%d %H:%M")), "",
            "`%s`; %s cores (%s); load average at the end %.2f." % (
                "BENCH_QUICK=1 python3 bench/lease_bench.py" if QUICK else "python3 bench/lease_bench.py",
                os.cpu_count(), "quick" if QUICK else "full", os.getloadavg()[0]), ""]
    text = "\n".join(head) + "\n" + markdown(lines, bars)
    print(text)
    out = os.environ.get("BENCH_OUT") or os.path.join(
        vh.RESULTS_DIR, "results-%s-valkey-%s-leases%s.md" % (
            started.strftime("%Y-%m-%d"), version, "-quick" if QUICK else ""))
    with open(out, "w") as f:
        f.write(text)
    log("saved %s" % os.path.relpath(out, os.getcwd()))


if __name__ == "__main__":
    try:
        main()
    except KeyboardInterrupt:
        sys.exit(130)
