#!/usr/bin/env python3
"""Checks the FUNCTION library (functions/ratelimit.lua) against the module,
for the calls the benchmark measures: the same deterministic call sequence
goes through `FCALL rl_<command>` on key A and the module command on key B,
and everything must agree exactly.

Each pair of calls runs in one MULTI/EXEC together with GET and PEXPIRETIME
of both keys: the server's clock is frozen inside a transaction, for `TIME`
in a function as for the module, so both sides decide at the same
millisecond. Compared per call: the reply (or the error text), the stored
value (the library keeps the module's state format) and the absolute
expiry. Short sleeps between some calls move the clock on.

The same check, with random sequences over every command, crafted state
and coverage assertions, is tests/lua_oracle.rs in the Rust suite
(`cargo test --release --test lua_oracle`); this one is what bench.py runs
before measuring.

    python3 bench/oracle_check.py            # starts its own valkey-server
    python3 bench/oracle_check.py --port N   # uses a running server

Exits 1 on any mismatch.
"""

import argparse
import os
import sys
import time

sys.dont_write_bytecode = True  # no __pycache__ in bench/
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import valkey_harness as vh  # noqa: E402

KEY_LIB = "oracle:lib:{t}"
KEY_MOD = "oracle:mod:{t}"
# The benchmark rows' arguments (bench.py takes them from here): windows and
# fixed counters with a limit never reached, and buckets at 10 per 60 s with a
# bucket of 1,000,000 (never refused within a run; keys live for seconds).
BIG = "1000000000"
RATE, BUCKET = "10", "1000000"


def fixed_steps():
    """bench's original sequence: 50 calls, limit 7, window 60 s, costs 0..9
    (8 and 9 exceed the limit), with state changes applied to both keys: a
    new window (DEL) and counters left without a TTL by some other client
    (adopted by the next call)."""
    events = {
        15: [("DEL",)],
        24: [("SET", "3")],          # TTL-less counter, then admits
        33: [("DEL",)],
        40: [("SET", "5")],          # TTL-less counter, then cost > limit
        44: [("SET", "12")],         # TTL-less counter already over the limit
    }
    # Pinned costs: cost > limit right after a TTL-less counter, and cost 0
    # on a counter already over the limit.
    cost_at = {41: 9, 45: 0, 46: 1}
    out = []
    for i in range(50):
        for ev in events.get(i, []):
            out.append(("state",) + ev)
        out.append(("call", cost_at.get(i, (i * 7 + 3) % 10), 0))
    return out


def bucket_steps(max_cost, n=24):
    """A burst without pauses, then costs 0..max_cost with pauses of 0-60 ms."""
    out = [("call", 1, 0)] * (max_cost + 1)
    sleeps = (0, 0, 0, 5, 20, 60)
    for i in range(n):
        if i == 16:
            out.append(("state", "DEL"))
        out.append(("call", (i * 5 + 2) % (max_cost + 1), sleeps[(i * 7) % len(sleeps)]))
    return out


def admit(algo, limit, window, burst=None):
    """(library call, module call) builders for RL.ADMIT ALGO algo."""
    def build(cost):
        args = ["LIMIT", limit, "WINDOW", window, "COST", cost]
        if algo != "fixed":
            args += ["ALGO", algo]
        if burst is not None:
            args += ["BURST", burst]
        return ["FCALL", "rl_admit", 1, KEY_LIB] + args, ["RL.ADMIT", KEY_MOD] + args
    return build


def throttle(max_burst, count, period):
    def build(q):
        args = [max_burst, count, period, q]
        return ["FCALL", "rl_throttle", 1, KEY_LIB] + args, ["RL.THROTTLE", KEY_MOD] + args
    return build


# (algorithm, label, builder, steps): the small policies exercise refusals and
# refills; the benchmark's own arguments check that the rows measure
# equivalent work.
def sequences():
    out = [("fixed", "limit 7 window 60000", admit("fixed", 7, 60000), fixed_steps()),
           ("fixed", "the benchmark's arguments", admit("fixed", BIG, 60000),
            [("call", 1, 0)] * 3)]
    for algo in ("sliding", "token", "gcra", "leaky"):
        burst = None if algo == "sliding" else 3
        fits = 5 if algo == "sliding" else (4 if algo == "leaky" else 3)
        out.append((algo, "limit 5 window %d burst %s" % (300 if algo == "sliding" else 1000,
                                                          burst),
                     admit(algo, 5, 300 if algo == "sliding" else 1000, burst),
                     bucket_steps(fits + 1)))
        out.append((algo, "limit 3 window 1000 (interval 333333334 ns)",
                    admit(algo, 3, 1000, None), bucket_steps(3 + (algo == "leaky") + 1, 10)))
        out.append((algo, "the benchmark's arguments",
                    admit(algo, BIG, 60000, None) if algo == "sliding"
                    else admit(algo, RATE, 60000, BUCKET),
                    [("call", 1, 0)] * 3))
    out.append(("throttle", "max_burst 2, 10 per 1 s", throttle(2, 10, 1), bucket_steps(4)))
    out.append(("throttle", "the benchmark's arguments", throttle(BUCKET, RATE, 60),
                [("call", 1, 0)] * 3))
    return out


def pair(client, lib, mod):
    client.call("MULTI")
    for cmd in (lib, mod, ("GET", KEY_LIB), ("GET", KEY_MOD),
                ("PEXPIRETIME", KEY_LIB), ("PEXPIRETIME", KEY_MOD)):
        client.call(*cmd)
    return client.call("EXEC")


def norm(r):
    """Error replies compared by their text."""
    if isinstance(r, vh.RespError):
        return "error: " + str(r)
    return r


def run_oracle(client, verbose=False):
    """Returns a list of mismatch descriptions (empty when all agree); sets
    run_oracle.summary to a one-line account."""
    bad, counts = [], {}
    vh.load_library(client)
    for algo, label, build, steps in sequences():
        client.call("DEL", KEY_LIB, KEY_MOD)
        for step in steps:
            if step[0] == "state":
                for k in (KEY_LIB, KEY_MOD):
                    client.call(step[1], k, *step[2:])
                continue
            _, cost, pause = step
            lib, mod = build(cost)
            r = pair(client, lib, mod)
            if not isinstance(r, list) or len(r) != 6:
                bad.append("%s %s: EXEC answered %r" % (algo, label, r))
                continue
            ra, rb = norm(r[0]), norm(r[1])
            counts[algo] = counts.get(algo, 0) + 1
            problems = []
            if not (isinstance(ra, list) and len(ra) == 5):
                problems.append("reply shape")
            if ra != rb:
                problems.append("replies differ")
            if r[2] != r[3]:
                problems.append("stored values differ")
            if r[4] != r[5]:
                problems.append("expiries differ")
            line = "%s (%s) cost %s: library %s module %s; value %r / %r; expires %s / %s" % (
                algo, label, cost, ra, rb, r[2], r[3], r[4], r[5])
            if problems:
                bad.append(line + "  <- " + ", ".join(problems))
            elif verbose:
                print(line)
            if pause:
                time.sleep(pause / 1000)
        client.call("DEL", KEY_LIB, KEY_MOD)
    run_oracle.summary = "%d calls agree (%s)" % (
        sum(counts.values()), ", ".join("%s %d" % kv for kv in counts.items()))
    if counts.get("fixed") != 53:
        bad.append("expected 53 fixed-window calls, made %d" % counts.get("fixed", 0))
    return bad


run_oracle.summary = ""


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--port", type=int, help="use a running server on 127.0.0.1:PORT")
    ap.add_argument("-v", "--verbose", action="store_true", help="print every call")
    args = ap.parse_args()
    if args.port:
        c = vh.Client(args.port)
        bad = run_oracle(c, args.verbose)
        c.close()
    else:
        with vh.Server() as srv:
            c = srv.client()
            bad = run_oracle(c, args.verbose)
            c.close()
    if bad:
        print("library vs module: %d mismatch(es)" % len(bad))
        for line in bad:
            print("  " + line)
        sys.exit(1)
    print("library vs module: " + run_oracle.summary)


if __name__ == "__main__":
    main()
