#!/usr/bin/env python3
"""The hot path's instruction budget: each row's instructions per call under
callgrind, divided by FLOOR.ADMIT's (the control module that makes only the
module-API calls RL.ADMIT fixed cannot do without), must stay at or under the
ratio in bench/instruction-budget.tsv. A row with a third column is divided
by that row's count instead: the library's FCALL rows by the hand-written
script of their shape (bench/lua/hand_*.lua), in the same run. tests/instruction_budget.rs runs this
in `make test`; a regression of a few percent fails it, noise does not
(three profile runs agree within 0.2%; a row over budget is counted again,
with its base, and the lower counts are judged).

A ratio to the floor, not a raw count, so that a different server build or
compiler moves both sides alike. Rows and arguments are `make bench`'s
(bench.ROWS), counted as `make profile` counts them (profile.Profiler).

Environment: BUDGET_CALLS=N calls per row (default 3200; a multiple of 64, as
redis-benchmark runs 4 clients of 16-call pipelines), and bench.py's
VALKEY_SERVER, RL_MODULE, RL_API_FLOOR, REDIS_BENCHMARK.
Exit status: 0 within budget, 1 over budget, 2 could not measure, 3 the
server is not the version the budget was calibrated on (its `valkey` line).
"""

import glob
import os
import shutil
import sys

sys.dont_write_bytecode = True  # no __pycache__ in bench/
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench  # noqa: E402
import profile as callgrind_profile  # noqa: E402
import valkey_harness as vh  # noqa: E402

BUDGET_FILE = os.path.join(vh.BENCH_DIR, "instruction-budget.tsv")
FLOOR_ROW = "aflr"


def read_budget(path):
    """(the server version it was calibrated on, row id -> the highest
    allowed ratio, row id -> the row it is a ratio to)."""
    version, budget, base = None, {}, {}
    with open(path) as f:
        for line in f:
            line = line.split("#", 1)[0].strip()
            if not line:
                continue
            name, value, *of = line.split()
            if name == "valkey":
                version = value
            else:
                budget[name] = float(value)
                base[name] = of[0] if of else FLOOR_ROW
    if version is None or not budget:
        raise ValueError("%s: needs a `valkey` line and at least one row" % path)
    return version, budget, base


def main():
    for tool in ("valgrind", "callgrind_control"):
        if shutil.which(tool) is None:
            print("%s not found: apt-get install valgrind" % tool)
            return 2
    calibrated_on, budget, base = read_budget(BUDGET_FILE)
    floor = bench.api_floor_args()
    if not floor:
        print("the control module is not built: cargo build --release --example api_floor")
        return 2
    callgrind_profile.CALLS = int(os.environ.get("BUDGET_CALLS") or 3200)
    rows = {r.id: r for r in bench.ROWS}
    measured = set(budget) | set(base.values())
    wanted = [FLOOR_ROW] + sorted(measured - {FLOOR_ROW}, key=list(rows).index)
    tmp_root = os.path.join(vh.BENCH_DIR, "tmp")
    os.makedirs(tmp_root, exist_ok=True)
    out_prefix = os.path.join(tmp_root, "budget-%d.out" % os.getpid())
    wrapper = ["valgrind", "--tool=callgrind", "--toggle-collect=call",
               "--callgrind-out-file=" + out_prefix]
    module_objects = {os.path.basename(p) for p in [vh.module_path()] + floor[1:]}
    counts = {}
    try:
        with vh.Server(extra_args=floor, wrapper=wrapper, start_timeout=120) as srv:
            version = srv.version()
            if version != calibrated_on:
                print("valkey-server %s: the budget is calibrated on %s only"
                      % (version, calibrated_on))
                return 3
            p = callgrind_profile.Profiler(srv, out_prefix, module_objects)
            for rid in wanted:
                reason = p.b.probe(rows[rid])
                if reason:
                    print("%s cannot run: %s" % (rid, reason))
                    return 2
                counts[rid], _ = p.profile(rows[rid])
            # Noise only adds instructions (a server cron tick that lands in
            # a row's calls on a loaded machine: once, 3% on one row), so a
            # row over budget is counted again with its base, and each keeps
            # the lower count. A regression is over in both runs.
            # Each row is counted at most twice (a lower base can put
            # another row over: it is counted again in turn).
            recounted = set()
            while True:
                over = [r for r in budget if counts[r] / counts[base[r]] > budget[r]
                        and not {r, base[r]} <= recounted]
                if not over:
                    break
                for again in sorted({x for r in over for x in (r, base[r])} - recounted):
                    count, _ = p.profile(rows[again])
                    print("%s counted again: %.0f, then %.0f" % (again, counts[again], count))
                    counts[again] = min(counts[again], count)
                    recounted.add(again)
            if p.b.errors:
                print("errors: %s" % "; ".join(p.b.errors))
                return 2
    finally:
        for path in glob.glob(out_prefix + "*"):
            os.remove(path)
    over = []
    print("%-5s %-58s %9s %7s %7s %s" % ("row", "", "instr", "ratio", "budget", "of"))
    for rid in wanted:
        if rid not in budget:
            print("%-5s %-58s %9.0f" % (rid, rows[rid].label[:58], counts[rid]))
            continue
        ratio = counts[rid] / counts[base[rid]]
        verdict = "" if ratio <= budget[rid] else "  OVER BUDGET"
        if verdict:
            over.append(rid)
        print("%-5s %-58s %9.0f %7.3f %7.3f %s%s" % (
            rid, rows[rid].label[:58], counts[rid], ratio, budget[rid], base[rid], verdict))
    if over:
        print("over budget: %s (bench/instruction-budget.tsv; `make profile` "
              "shows where the instructions go)" % ", ".join(over))
        return 1
    print("all %d rows within budget" % len(budget))
    return 0


if __name__ == "__main__":
    sys.exit(main())
