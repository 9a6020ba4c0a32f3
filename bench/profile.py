#!/usr/bin/env python3
"""Instructions per call, under valgrind's callgrind: the bench's hot-key rows
on one server, with the module's own code split from the server's.

Counts are collected only inside the server's call() (the command, its reply
and its propagation; not reading or writing sockets), zeroed before each row
and dumped after its N calls (redis-benchmark, 4 clients, -P 16), so a row is
(instructions) / N. Unlike the bench's timings these counts do not drift with
the machine's load: three runs agreed within 0.2% per row.

Columns, per call:
  module code   the module's own instructions (and the libc it calls itself)
  reply         inside the module API's ReplyWith* calls
  replicate     inside RM_Replicate
  key access    inside OpenKey/CloseKey/StringDMA/expiry and other key calls
  other API     every other module-API call (argument bytes, time, signals)
  server        the rest: the server's command dispatch and bookkeeping, or
                the whole command for INCR, SET, FCALL and EVALSHA

Saves bench/profile-YYYY-MM-DD-valkey-<version>.md (BENCH_OUT to change).
Needs valgrind (apt-get install valgrind) and redis-benchmark.

Environment: PROFILE_CALLS=N (default 20000), PROFILE_ROWS=REGEX (row ids;
INCR always runs), and bench.py's VALKEY_SERVER, RL_MODULE, RL_API_FLOOR,
REDIS_BENCHMARK.
"""

import datetime
import glob
import os
import re
import shutil
import subprocess
import sys
import time
from collections import defaultdict

sys.dont_write_bytecode = True  # no __pycache__ in bench/
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench  # noqa: E402
import valkey_harness as vh  # noqa: E402

CALLS = int(os.environ.get("PROFILE_CALLS") or 20000)
COLUMNS = ("module code", "reply", "replicate", "key access", "other API", "server")
KEY_API = re.compile(
    r"^(OpenKey|CloseKey|StringDMA|StringTruncate|StringSet|KeyType|ValueLength|"
    r"DeleteKey|UnlinkKey|KeyExists|HashGet|ListPush|(Get|Set)(Abs)?Expire)$")


def api_column(fn):
    """The column of a call into the module API (VM_/RM_ name), else None."""
    m = re.match(r"^(VM|RM)_(\w+)$", fn)
    if not m:
        return None
    name = m.group(2)
    if name.startswith("ReplyWith"):
        return "reply"
    if name.startswith("Replicate"):
        return "replicate"
    if KEY_API.match(name):
        return "key access"
    return "other API"


def split_costs(path, module_objects):
    """Reads one callgrind dump: its total Ir, and the columns. A module's
    own code is its functions' self cost plus the calls it makes outside the
    module API (libc); a call from a module into the API goes to the API's
    column, whole (the API's own callees included)."""
    names = {"ob": {}, "fl": {}, "fn": {}}
    kinds = {"ob": "ob", "cob": "ob", "fl": "fl", "fi": "fl", "fe": "fl",
             "cfi": "fl", "cfl": "fl", "fn": "fn", "cfn": "fn"}
    cols = defaultdict(int)
    total = None
    ob = cob = cfn = None
    in_call = False
    spec = re.compile(r"^(\w+)=(?:\((\d+)\))?\s*(.*)$")
    with open(path, errors="replace") as f:
        for line in f:
            line = line.rstrip("\n")
            if not line or line.startswith("#"):
                continue
            if line[0].isdigit() or line[0] in "+-*":
                fields = line.split()
                cost = int(fields[1]) if len(fields) > 1 else 0
                mine = ob in module_objects
                if in_call:
                    in_call = False
                    callee_ob = cob if cob is not None else ob
                    column = api_column(cfn or "") if mine else None
                    if column:
                        cols[column] += cost
                    elif mine and callee_ob not in module_objects:
                        cols["module code"] += cost
                    cob = None
                elif mine:
                    cols["module code"] += cost
                continue
            if line.startswith("totals:"):
                total = int(line.split()[1])
                continue
            if line.startswith("calls="):
                in_call = True
                continue
            m = spec.match(line)
            if not m or m.group(1) not in kinds:
                continue
            key, ident, name = m.group(1), m.group(2), m.group(3)
            table = names[kinds[key]]
            if ident is not None:
                if name:
                    table[ident] = name
                name = table.get(ident, name)
            if key == "ob":
                ob = os.path.basename(name)
            elif key == "cob":
                cob = os.path.basename(name)
            elif key == "fn":
                cob = None
            elif key == "cfn":
                cfn = name
    if total is None:
        raise RuntimeError("%s: no totals line" % path)
    attributed = sum(cols.values())
    cols["server"] = total - attributed
    return total, cols


class Profiler:
    def __init__(self, srv, out_prefix, module_objects):
        self.srv = srv
        self.b = bench.Bench(srv)
        self.out_prefix = out_prefix
        self.module_objects = module_objects
        self.dumps = 0

    def control(self, flag):
        subprocess.run(["callgrind_control", flag, str(self.srv.proc.pid)],
                       check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)

    def profile(self, row):
        """N calls of the row on its hot key (CALLS, or the row's own
        `calls`): (instructions per call, columns per call), or raises
        RuntimeError."""
        calls = row.calls or CALLS
        c = self.b.c
        key = bench.hot_key("b", row.id)
        words = self.b.words(row.cmd, key)
        c.call("FLUSHALL", "SYNC")
        if row.prefill:
            c.call(*self.b.words(row.prefill, key))
        c.call("CONFIG", "RESETSTAT")
        self.control("-z")
        if row.pair:
            second = self.b.words(row.pair, key)
            self.pairs(words, second, calls)
            self.control("-d")
            self.dumps += 1
            expected = {}
            for w in (words, second):
                name = self.b.stat_name(w)
                expected[name] = expected.get(name, 0) + calls
        else:
            out = subprocess.run(
                [bench.REDIS_BENCHMARK, "-h", "127.0.0.1", "-p", str(self.srv.port),
                 "-c", "4", "-P", "16", "-n", str(calls), "-q"] + words,
                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, timeout=900)
            self.control("-d")
            self.dumps += 1
            if out.returncode != 0:
                raise RuntimeError("redis-benchmark failed: %s" % out.stderr.strip()[-300:])
            expected = {self.b.stat_name(words): calls}
        for name, n in expected.items():
            stat = self.b.cmdstat(name)
            if stat["calls"] != n or stat["failed_calls"] != 0:
                raise RuntimeError("expected %d %s calls without failures, INFO says %r"
                                   % (n, name, stat))
        path = "%s.%d" % (self.out_prefix, self.dumps)
        deadline = time.time() + 30
        while not os.path.isfile(path) and time.time() < deadline:
            time.sleep(0.1)
        total, cols = split_costs(path, self.module_objects)
        return total / calls, {k: v / calls for k, v in cols.items()}


    def pairs(self, first, second, n):
        """n pairs (first, then second, __n__ numbered), pipelined 32 at a
        time on one connection; an error reply raises."""
        c = self.b.c
        for start in range(0, n, 32):
            batch = []
            for i in range(start, min(start + 32, n)):
                num = str(i)
                batch += [[w.replace("__n__", num) for w in first],
                          [w.replace("__n__", num) for w in second]]
            c.send(*batch)
            for _ in batch:
                c.read()


def report(results, version, started):
    incr = results["incr"][1]
    lines = [
        "# valkey-ratelimit instruction profile, %s, Valkey %s" % (
            started.strftime("%Y-%m-%d"), version),
        "",
        "`make profile` (`bench/profile.py`): callgrind instruction counts per call,",
        "collected inside the server's `call()`, for %d pipelined calls on one hot" % CALLS,
        "key (4 clients, `-P 16`). Arguments as in `make bench`. They count the work,",
        "not the time: a cache miss costs nothing here, and a hot key has none.",
        "",
        "| row | instr/call | × INCR | %s |" % " | ".join(COLUMNS),
        "|---|---:|---:|" + "---:|" * len(COLUMNS),
    ]
    for row, (label, total, cols) in results.items():
        lines.append("| %s | %s | %.2f× | %s |" % (
            label, "{:,.0f}".format(total), total / incr,
            " | ".join("{:,.0f}".format(cols.get(c, 0)) for c in COLUMNS)))
    lines += [
        "",
        "How to read it: `module code` is what the module can still make cheaper.",
        "The columns after it are the server's module API (each call's whole cost,",
        "what it calls included) and the server's own work around the command. The",
        "FLOOR.ADMIT row (`bench/api_floor.rs`) makes RL.ADMIT fixed's API calls and",
        "nothing else. Each row also counts redis-benchmark's opening `CONFIG GET`",
        "and the key's first write: about 16,000 instructions in all, under one per",
        "call at the default 20,000 calls.",
        "",
    ]
    return "\n".join(lines)


def main():
    started = datetime.datetime.now()
    for tool in ("valgrind", "callgrind_control"):
        if shutil.which(tool) is None:
            sys.exit("%s not found: apt-get install valgrind" % tool)
    only = os.environ.get("PROFILE_ROWS")
    rows = [r for r in bench.ROWS if "hot" in r.keys.split()
            and (r.id == "incr" or not only or re.search(only, r.id))]
    tmp_root = os.path.join(vh.BENCH_DIR, "tmp")
    os.makedirs(tmp_root, exist_ok=True)
    out_prefix = os.path.join(tmp_root, "callgrind-%d.out" % os.getpid())
    wrapper = ["valgrind", "--tool=callgrind", "--toggle-collect=call",
               "--callgrind-out-file=" + out_prefix]
    floor = bench.api_floor_args()
    module_objects = {os.path.basename(p) for p in [vh.module_path()] + floor[1:]}
    results = {}
    try:
        with vh.Server(extra_args=floor, wrapper=wrapper, start_timeout=120) as srv:
            version = srv.version()
            bench.log("valkey-server %s under callgrind, pid %d" % (version, srv.proc.pid))
            p = Profiler(srv, out_prefix, module_objects)
            for row in rows:
                reason = p.b.probe(row)
                if reason:
                    bench.log("  skip %s: %s" % (row.id, reason))
                    continue
                total, cols = p.profile(row)
                results[row.id] = (row.label, total, cols)
                bench.log("  %s: %.0f instructions per call" % (row.id, total))
            if p.b.errors:
                sys.exit("errors: %s" % "; ".join(p.b.errors))
    finally:
        for path in glob.glob(out_prefix + "*"):
            os.remove(path)
    if "incr" not in results:
        sys.exit("INCR was not profiled")
    text = report(results, version, started)
    print(text)
    out = os.environ.get("BENCH_OUT") or os.path.join(
        vh.RESULTS_DIR, "profile-%s-valkey-%s.md" % (started.strftime("%Y-%m-%d"), version))
    with open(out, "w") as f:
        f.write(text)
    bench.log("saved %s" % os.path.relpath(out, os.getcwd()))


if __name__ == "__main__":
    try:
        main()
    except KeyboardInterrupt:
        sys.exit(130)
