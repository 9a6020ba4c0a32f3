#!/usr/bin/env python3
"""Leases at scale (issue 30): the server's time (SLOWLOG, µs) for
RL.INFLIGHT and for the write that meets a key's expired leases, at 10k,
100k and 300k expired leases, on the module and on the FUNCTION library.

    python3 bench/lease_scale.py        # starts its own server

Each key gets one live lease (`long`, TTL 600 s, by the backend's own
RL.ACQUIRE) and N expired ones: what N pipelined RL.ACQUIREs with a short
TTL leave once it has run out (generated-form ids, integer deadlines, a
thousand to a ms), written by pipelined ZADDs with deadlines already past
rather than waited for. Then, with every command logged: RL.INFLIGHT
twice; the clearing RL.ACQUIRE (LIMIT 1000000, TTL 600 s) and two more;
and, for reference, the server's own ZREMRANGEBYSCORE over the expired
range of a copy of the key.

RL_MODULE picks the module (default target/release), RL_LIBRARY the
library file (default functions/ratelimit.lua), so that two builds can be
compared.
"""

import os
import sys
import time

sys.dont_write_bytecode = True  # no __pycache__ in bench/
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import valkey_harness as vh  # noqa: E402

SIZES = (10_000, 100_000, 300_000)


def call_form(backend, words):
    """A call in the module's syntax, as `backend` takes it."""
    if backend == "module":
        return list(words)
    name, key, rest = words[0], words[1], list(words[2:])
    fn = {"RL.ACQUIRE": "rl_acquire", "RL.INFLIGHT": "rl_inflight"}[name]
    return ["FCALL_RO" if fn == "rl_inflight" else "FCALL", fn, "1", key] + rest


def logged(c, words):
    """Runs `words` alone; its server time from the slow log (µs)."""
    c.call("SLOWLOG", "RESET")
    reply = c.call(*words)
    for entry in c.call("SLOWLOG", "GET", "32"):
        if entry[3][0].upper() == words[0].upper():
            return entry[2], reply
    raise RuntimeError("%s not in the slow log" % words[0])


def seed(c, backend, key, n):
    c.call(*call_form(backend, ["RL.ACQUIRE", key, "LIMIT", "1000000",
                                "TTL", "600000", "ID", "long"]))
    t = c.call("TIME")
    start = int(t[0]) * 1000 + int(t[1]) // 1000 - 10_000
    out = b""
    for lo in range(0, n, 5_000):
        args = ["ZADD", key]
        for i in range(lo, min(n, lo + 5_000)):
            ms = start + i // 1_000
            args += [str(ms), "%x-%016x" % (ms, i)]
        out += vh.Client._encode(args)
    c.sock.sendall(out)
    for _ in range(0, n, 5_000):
        c._reply()
    return start


def main():
    library = os.environ.get("RL_LIBRARY") or vh.LIBRARY
    rows = []
    with vh.Server(["--slowlog-log-slower-than", "0", "--slowlog-max-len", "128"]) as server:
        c = server.client()
        with open(library, "rb") as f:
            c.call("FUNCTION", "LOAD", "REPLACE", f.read())
        for backend in ("module", "functions"):
            for n in SIZES:
                key = "%s:%d" % (backend, n)
                start = seed(c, backend, key, n)
                inflight = [logged(c, call_form(backend, ["RL.INFLIGHT", key]))[0]
                            for _ in range(2)]
                c.call("COPY", key, key + ":copy")
                writes = [logged(c, call_form(backend, [
                    "RL.ACQUIRE", key, "LIMIT", "1000000", "TTL", "600000"]))[0]
                    for _ in range(3)]
                card = c.call("ZCARD", key)
                zrem, _ = logged(c, ["ZREMRANGEBYSCORE", key + ":copy", "-inf",
                                     str(start + n // 1_000)])
                rows.append((backend, n, inflight, writes, card, zrem))
                c.call("DEL", key, key + ":copy")
        version = server.version()
    print("valkey %s, module %s, library %s" % (version, vh.module_path(), library))
    print("| backend | expired | RL.INFLIGHT x2 (µs) | 3 writes, the first the clearing one (µs)"
          " | ZCARD after | ZREMRANGEBYSCORE (µs) |")
    print("|---|---|---|---|---|---|")
    for backend, n, inflight, writes, card, zrem in rows:
        print("| %s | %d | %s | %s | %d | %d |" % (
            backend, n, ", ".join(map(str, inflight)), ", ".join(map(str, writes)), card, zrem))


if __name__ == "__main__":
    main()
