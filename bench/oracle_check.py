#!/usr/bin/env python3
"""Checks bench/lua/fixed.lua against RL.ADMIT: the same deterministic call
sequence goes through `EVALSHA fixed.lua` on key A and `RL.ADMIT` on key B,
and the replies must agree.

Compared per call: admitted, limit and remaining exactly; retry_after_ms by
kind (0 when admitted, -1 when it can never succeed, > 0 when refused for
the window), and the two reset/retry times within TOLERANCE_MS of each
other. After the sequence, the counters and TTLs must match too. Everything
runs inside one 60 s window, so timing does not matter.

    python3 bench/oracle_check.py            # starts its own valkey-server
    python3 bench/oracle_check.py --port N   # uses a running server

Exits 1 on any mismatch. (To be ported into the Rust test suite later.)
"""

import argparse
import os
import sys

sys.dont_write_bytecode = True  # no __pycache__ in bench/
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import valkey_harness as vh  # noqa: E402

LIMIT = 7
WINDOW_MS = 60000
TOLERANCE_MS = 1000
KEY_LUA = "oracle:lua:{t}"
KEY_MOD = "oracle:mod:{t}"


def steps():
    """50 calls with costs 0..9 (8 and 9 exceed the limit), plus state
    changes applied to both keys: a new window (DEL), and counters left
    without a TTL by some other client (adopted by the next call)."""
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
        out.append(("call", cost_at.get(i, (i * 7 + 3) % 10)))
    return out


def kind(retry):
    return "never" if retry == -1 else ("now" if retry == 0 else "later")


def run_oracle(client, verbose=False):
    """Returns a list of mismatch descriptions (empty when all agree)."""
    sha = vh.load_script(client, "fixed")
    if sha is None:
        return ["bench/lua/fixed.lua not found"]
    a, b = KEY_LUA, KEY_MOD
    client.call("DEL", a, b)
    bad = []
    n = 0
    for step in steps():
        if step[0] == "state":
            op = step[1:]
            for k in (a, b):
                if op[0] == "DEL":
                    client.call("DEL", k)
                else:
                    client.call("SET", k, op[1])
            continue
        cost = step[1]
        n += 1
        ra = client.call("EVALSHA", sha, 1, a, LIMIT, WINDOW_MS, cost, raise_errors=False)
        rb = client.call("RL.ADMIT", b, "LIMIT", LIMIT, "WINDOW", WINDOW_MS,
                         "COST", cost, raise_errors=False)
        problems = []
        if not (isinstance(ra, list) and isinstance(rb, list) and len(ra) == len(rb) == 5):
            problems.append("reply shape")
        else:
            if ra[:3] != rb[:3]:
                problems.append("admitted/limit/remaining differ")
            if kind(ra[3]) != kind(rb[3]):
                problems.append("retry kind differs")
            if any((r[0] == 1) != (r[3] == 0) for r in (ra, rb)):
                problems.append("retry_after_ms is not 0 exactly when admitted")
            if abs(ra[3] - rb[3]) > TOLERANCE_MS or abs(ra[4] - rb[4]) > TOLERANCE_MS:
                problems.append("times differ by more than %d ms" % TOLERANCE_MS)
        line = "call %2d cost %d: lua %s  module %s" % (n, cost, ra, rb)
        if problems:
            bad.append(line + "  <- " + ", ".join(problems))
        elif verbose:
            print(line)
    va, vb = client.call("GET", a), client.call("GET", b)
    ta, tb = client.call("PTTL", a), client.call("PTTL", b)
    if va != vb:
        bad.append("final counters differ: lua %r, module %r" % (va, vb))
    if (ta < 0) != (tb < 0) or abs(ta - tb) > TOLERANCE_MS:
        bad.append("final PTTL differs: lua %d, module %d" % (ta, tb))
    client.call("DEL", a, b)
    if n != 50:
        bad.append("expected 50 calls, made %d" % n)
    return bad


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
        print("fixed.lua vs RL.ADMIT: %d mismatch(es)" % len(bad))
        for line in bad:
            print("  " + line)
        sys.exit(1)
    print("fixed.lua vs RL.ADMIT: 50 calls agree")


if __name__ == "__main__":
    main()
