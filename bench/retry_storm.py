#!/usr/bin/env python3
"""The retry storm (issue 28): CLIENTS clients share one GCRA limiter of
RATE/s for SECONDS, each sending one request at a time, again as soon as it
is admitted. Two runs on one server:

- retry: RL.ADMIT without BLOCK; a refused client sleeps retry_after_ms
  times a random factor in [1, 1.5) (jitter, so that refused clients do not
  all wake together) and tries again;
- block: RL.ADMIT ... BLOCK 30000, answered when admitted (first come,
  first served per key).

Reported per run: server calls per admitted request; the spread of waits
(first attempt to admission: median, p99, max); the pace (gaps between
consecutive admissions); and the longest any request waited beyond its
fair share, where its fair share is the admission time it would have had
in first-come order: the i-th request to arrive gets the i-th admission
time of the run (so the extra wait is 0 for a perfect FIFO, and measures
overtaking otherwise).

    python3 bench/retry_storm.py           # 200 clients, 100/s, 10 s
    STORM_CLIENTS=50 STORM_SECONDS=3 python3 bench/retry_storm.py

Saves bench/results/retry-storm-YYYY-MM-DD-valkey-<version>.md (BENCH_OUT
overrides the path). Not a test: the figures depend on the machine.
"""

import datetime
import os
import random
import statistics
import sys
import threading
import time

sys.dont_write_bytecode = True  # no __pycache__ in bench/
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import valkey_harness as vh  # noqa: E402

CLIENTS = int(os.environ.get("STORM_CLIENTS", "200"))
RATE = int(os.environ.get("STORM_RATE", "100"))
SECONDS = float(os.environ.get("STORM_SECONDS", "10"))
BURST = os.environ.get("STORM_BURST", "1")
POLICY = ("ALGO", "gcra", "LIMIT", str(RATE), "WINDOW", "1000", "BURST", BURST)


def client_loop(port, key, blocking, stop_at, out, lock, seed):
    rng = random.Random(seed)
    con = vh.Client(port)
    calls, done = 0, []
    args = ("RL.ADMIT", key) + POLICY + (("BLOCK", "30000") if blocking else ())
    try:
        while time.monotonic() < stop_at:
            first = time.monotonic()
            while True:
                reply = con.call(*args)
                calls += 1
                if reply[0] == 1:
                    done.append((first, time.monotonic()))
                    break
                wait_ms = max(reply[3], 1)
                time.sleep(wait_ms * rng.uniform(1.0, 1.5) / 1000.0)
    finally:
        con.close()
    with lock:
        out["calls"] += calls
        out["requests"].extend(done)


def admit_calls(con):
    """RL.ADMIT's calls so far, from INFO commandstats."""
    for field, value in con.info("commandstats").items():
        if field.lower() == "cmdstat_rl.admit":
            return int(value.split("calls=")[1].split(",")[0])
    return 0


def run(server, blocking):
    key = "storm:%s" % ("block" if blocking else "retry")
    setup = server.client()
    setup.call("DEL", key)
    # Start on an exhausted limiter, as a storm does.
    setup.call("RL.ADMIT", key, *POLICY)
    before = admit_calls(setup)
    out, lock = {"calls": 0, "requests": []}, threading.Lock()
    start = time.monotonic()
    stop_at = start + SECONDS
    threads = [
        threading.Thread(target=client_loop, args=(server.port, key, blocking, stop_at, out, lock, i))
        for i in range(CLIENTS)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    after = admit_calls(setup)
    setup.close()
    reqs = sorted(out["requests"])
    admitted_at = sorted(a for _, a in reqs)
    waits = sorted((a - f) * 1000 for f, a in reqs)
    # Fair share: the i-th to arrive gets the i-th admission time.
    extra = [(a - fair) * 1000 for (_, a), fair in zip(reqs, admitted_at)]
    gaps = [(b - a) * 1000 for a, b in zip(admitted_at, admitted_at[1:])]
    n = len(reqs)
    return {
        "mode": "BLOCK" if blocking else "sleep retry_after_ms x [1, 1.5)",
        "admitted": n,
        "calls": out["calls"],
        # INFO commandstats counts a call that blocked twice (when it
        # blocks and when it is answered), so the calls are the clients'.
        "stats_calls": after - before,
        "per_admission": out["calls"] / n if n else float("nan"),
        "wait_p50": statistics.median(waits) if waits else 0,
        "wait_p99": waits[int(0.99 * (n - 1))] if waits else 0,
        "wait_max": waits[-1] if waits else 0,
        "gap_mean": statistics.mean(gaps) if gaps else 0,
        "gap_sd": statistics.pstdev(gaps) if gaps else 0,
        "extra_max": max(extra) if extra else 0,
        "late": sum(1 for e in extra if e > 1000.0 / RATE),
    }


def main():
    with vh.Server() as server:
        version = server.version()
        results = [run(server, False), run(server, True)]
    interval = 1000.0 / RATE
    lines = [
        "# Retry storm: %d clients share %d/s for %g s (valkey %s)" % (CLIENTS, RATE, SECONDS, version),
        "",
        "`python3 bench/retry_storm.py`; one GCRA limiter (LIMIT %d WINDOW 1000 BURST %s), every client"
        " one request at a time. Fair share: the i-th request to arrive gets the i-th admission"
        " time; one admission interval is %.0f ms. Calls are the clients' RL.ADMIT calls (INFO"
        " commandstats counts a call that blocked twice, and is shown beside)." % (RATE, BURST, interval),
        "",
        "| mode | admitted | calls (commandstats) | calls per admission | wait p50 ms | wait p99 ms | wait max ms"
        " | gap mean ms | gap sd ms | worst extra wait ms | requests later than 1 interval |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        lines.append(
            "| %s | %d | %d (%d) | %.2f | %.0f | %.0f | %.0f | %.2f | %.2f | %.0f | %d |"
            % (r["mode"], r["admitted"], r["calls"], r["stats_calls"], r["per_admission"], r["wait_p50"],
               r["wait_p99"], r["wait_max"], r["gap_mean"], r["gap_sd"], r["extra_max"], r["late"])
        )
    text = "\n".join(lines) + "\n"
    print(text)
    day = datetime.date.today().isoformat()
    path = os.environ.get("BENCH_OUT") or os.path.join(
        vh.BENCH_DIR, "results", "retry-storm-%s-valkey-%s-burst%s.md" % (day, version, BURST))
    with open(path, "w") as f:
        f.write(text)
    print("saved", path)


if __name__ == "__main__":
    main()
