#!/usr/bin/env python3
"""Benchmark of the ratelimit module against INCR, its FUNCTION library and a hand-rolled script.

Starts its own valkey-server (scripts/valkey-server.sh or $VALKEY_SERVER) with
the module loaded on a free loopback port, drives it with redis-benchmark
(50 clients, pipelining 1 and 16, one hot key and 1,000,000 random keys),
and prints a Markdown report that it also saves as
bench/results/results-YYYY-MM-DD-valkey-<version>[-quick].md. See bench/README.md.

Environment:
  BENCH_QUICK=1      ~30 s smoke run (2 rounds, small -n)
  BENCH_ROUNDS=N     rounds per row (default: 3 to 9, as many as fit in
                     BENCH_BUDGET_S=200 s of throughput runs; quick: 2)
  BENCH_N_P1=N       requests per run at -P 1 (default 50000; quick 5000)
  BENCH_N_P16=N      requests per run at -P 16 (default 200000; quick 30000)
  BENCH_ROWS=REGEX   only the rows whose id matches (INCR always runs)
  BENCH_OUT=PATH     where to save the report
  BENCH_STRICT=1     exit 3 when a bar is missed
  VALKEY_SERVER, RL_MODULE   server binary and module .so to use
  RL_API_FLOOR       the control module bench/api_floor.rs (default
                     target/release/examples/libapi_floor.so; `make bench`
                     builds it); without it the FLOOR.ADMIT rows are skipped
  REDIS_BENCHMARK    redis-benchmark binary (default: on PATH)

Exit status: 0 when the run completed (bars may be missed: that is a result),
1 when a row failed unexpectedly.
"""

import csv
import datetime
import io
import os
import platform
import re
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass

sys.dont_write_bytecode = True  # no __pycache__ in bench/
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import valkey_harness as vh  # noqa: E402
import lease_bench  # noqa: E402

QUICK = os.environ.get("BENCH_QUICK", "") not in ("", "0")
# Rounds: at least MIN_ROUNDS; more while the throughput phase stays within
# BUDGET_S (judged from the rounds so far), at most MAX_ROUNDS. BENCH_ROUNDS
# fixes the number instead.
FIXED_ROUNDS = int(os.environ.get("BENCH_ROUNDS") or 0)
MIN_ROUNDS = FIXED_ROUNDS or (2 if QUICK else 3)
MAX_ROUNDS = FIXED_ROUNDS or (2 if QUICK else 9)
BUDGET_S = float(os.environ.get("BENCH_BUDGET_S") or (20 if QUICK else 200))
N_BY_P = {
    1: int(os.environ.get("BENCH_N_P1") or (5000 if QUICK else 50000)),
    16: int(os.environ.get("BENCH_N_P16") or (30000 if QUICK else 200000)),
}
PIPELINES = (1, 16)
KEYMODES = ("hot", "rand", "warm")
CLIENTS = 50
KEYSPACE = 1000000
EXPIRY_WINDOW_MS = 2000
EXPIRY_WAIT_S = 10
REDIS_BENCHMARK = os.environ.get("REDIS_BENCHMARK", "redis-benchmark")
# Fills keys start .. start+n-1 with one command each (the key at word `at`).
FILL_SCRIPT = """
local start, n, prefix, at = tonumber(ARGV[1]), tonumber(ARGV[2]), ARGV[3], tonumber(ARGV[4])
local cmd = {}
for i = 5, #ARGV do cmd[#cmd + 1] = ARGV[i] end
for i = start, start + n - 1 do
  cmd[at] = string.format('%s%012d', prefix, i)
  server.call(unpack(cmd))
end
return n
"""
FILL_CHUNK = 100000

# ---------------------------------------------------------------------------
# The rows. Add a workload by adding a line.
#
# id     4 characters, unique; also the key tag, so every key name has the same
#        length: hot key b:<id>:000000000000, random keys b:<id>:__rand_int__
#        (redis-benchmark replaces __rand_int__ by 12 digits).
# cmd    the command; KEY stands for the key. A first word lib:FUNCTION runs
#        FCALL FUNCTION 1 KEY ... of the FUNCTION library
#        functions/ratelimit.lua (FUNCTION LOADed first); lua:NAME runs
#        EVALSHA of bench/lua/NAME.lua (SCRIPT LOADed first) with KEY as its
#        one key.
# kind   floor (INCR) | native | lua (library, hand-rolled script) | refuse
#        | info (no bar)
# algo   groups rows for the bars; a native row names its library twin in
#        `lua`.
# expect what a probe call must answer before the row is run:
#        int, ok (+OK), admit (reply[0] == 1), refuse (reply[0] == 0),
#        allowed0 (RL.THROTTLE / CL.THROTTLE: reply[0] == 0 means allowed).
# prefill a command run on the key before each run (hot key only).
# keys   the key modes the row runs in: hot, rand, and warm (random keys over
#        a keyspace the row's own command has first filled: every key exists,
#        as for 1M limiters in place).
# calls  profiled calls (`make profile`, the instruction budget), for a row
#        whose prefill is sized for them; 0: the profiler's default.
# A row whose probe gets "unknown option" / "unknown command" is skipped,
# with the server's answer in the report.
#
# The library's functions take the module command's arguments after
# `FCALL rl_<command> 1 key` and answer its reply (docs/managed-valkey.md).
# ---------------------------------------------------------------------------


@dataclass
class Row:
    id: str
    label: str
    cmd: str
    kind: str
    algo: str = ""
    lua: str = ""
    expect: str = "admit"
    keys: str = "hot rand"
    prefill: str = ""
    calls: int = 0
    # A library row: the id of the hand-written script of its shape.
    shape: str = ""
    # A pair row (profiled only, keys ""): the command sent after `cmd`,
    # each pair's __n__ in both replaced by its number (a lease id).
    pair: str = ""


# The rows' limits: windows and fixed counters with a limit never reached,
# and buckets at 10 per 60 s with a bucket of 1,000,000 (never refused within
# a run; keys live for seconds). tests/it/lua_inprocess.rs checks the
# library on these very arguments.
BIG = "1000000000"
RATE, BUCKET = "10", "1000000"
# The buckets (token, gcra, leaky, RL.THROTTLE) run at 10 per 60 s (one
# emission interval = 6 s) with a bucket of 1,000,000: no call is ever refused
# within a run, every admit leaves a key that lives for seconds (like the
# INCR and window rows' keys, unlike a 1e9-per-minute rate whose keys would
# expire 1 ms after each call), and the capacity (6e15 ns) stays below 2^53,
# where the library's doubles are exact.
BUCKET_ARGS = "LIMIT %s WINDOW 60000 BURST %s" % (RATE, BUCKET)
# The client's clock (ms) the hand-written sliding and token shapes take.
CLIENT_MS = 1764000000000
ROWS = [
    Row("incr", "INCR", "INCR KEY", "floor", expect="int", keys="hot rand warm"),
    # Not a bar: the cost of any module command (RL.LIMIT on a missing META
    # key reads nothing, writes nothing, replies 0), to explain the others.
    Row("mfl0", "RL.LIMIT, missing key (module-call floor)", "RL.LIMIT KEY", "info",
        expect="int"),
    # Not a bar: bench/api_floor.rs makes the module-API calls of RL.ADMIT's
    # fixed-window admit and nothing else, to show what those calls cost.
    Row("aflr", "FLOOR.ADMIT: RL.ADMIT fixed's API calls alone (control)",
        "FLOOR.ADMIT KEY LIMIT %s WINDOW 60000" % BIG, "info", keys="hot rand warm"),
    # Not a bar: the server's own write of a key with a TTL (what every limiter
    # call does at least), quoted beside the fixed-window and scale bars.
    Row("setp", "SET KEY 1 PX 60000 (server's own TTL write, reference)",
        "SET KEY 1 PX 60000", "info", expect="ok", keys="hot rand warm"),
    # Not bars, budget rows (keys "": no throughput runs): the lease calls a
    # key full of expired leases once made slow (issue 30). The prefill
    # (bench/lua/lease_expired.lua) leaves one live lease and N expired
    # ones; each RL.ACQUIRE reclaims 128 of them, so 100,000 + 320 * 128
    # keep each of its 320 profiled calls on a key holding >= 100k.
    Row("infl", "RL.INFLIGHT, 1 live and 100k expired leases", "RL.INFLIGHT KEY", "info",
        expect="int", keys="", prefill="lua:lease_expired KEY 100000"),
    Row("acqx", "RL.ACQUIRE, >= 100k expired leases (reclaims 128)",
        "RL.ACQUIRE KEY LIMIT 1000000 TTL 3600000", "info", keys="",
        prefill="lua:lease_expired KEY 140960", calls=320),
    # Not bars, budget rows: an acquire and the release of the lease it
    # took, on a key holding no other (issue 32's lease pair): the module's,
    # the library's, and the hand-rolled ZSET scripts' (bench/lua/lease_*.lua).
    Row("mpar", "RL.ACQUIRE + RL.RELEASE pair", "RL.ACQUIRE KEY LIMIT %s TTL 60000 ID c__n__" % BIG,
        "info", keys="", pair="RL.RELEASE KEY c__n__"),
    Row("lpar", "FCALL rl_acquire + rl_release pair (library)",
        "lib:rl_acquire KEY LIMIT %s TTL 60000 ID c__n__" % BIG, "info", keys="",
        pair="lib:rl_release KEY c__n__", shape="hpar"),
    Row("hpar", "lease_acquire.lua + lease_release.lua pair (ZSET scripts)",
        "lua:lease_acquire KEY %s 60000 c__n__" % BIG, "info", keys="",
        pair="lua:lease_release KEY c__n__"),
    # The hand-rolled INCR + PEXPIRE script (bench/lua/fixed_incr.lua): not the
    # module's equal (no cost, no reset time, a refusal still counts), the
    # baseline of what applications run without a limiter of their own.
    Row("hand", "fixed_incr.lua (EVALSHA, hand-rolled INCR + PEXPIRE)",
        "lua:fixed_incr KEY %s 60000" % BIG, "lua", "fixed"),
    Row("lfix", "FCALL rl_admit fixed (library)",
        "lib:rl_admit KEY LIMIT %s WINDOW 60000" % BIG, "lua", "fixed", shape="hfix"),
    Row("fixd", "RL.ADMIT fixed, admit", "RL.ADMIT KEY LIMIT %s WINDOW 60000" % BIG,
        "native", "fixed", lua="lfix", keys="hot rand warm"),
    Row("rcnt", "RL.ADMIT fixed, refuse: count at limit (pre-filled key)",
        "RL.ADMIT KEY LIMIT 1 WINDOW 3600000", "refuse", "fixed", expect="refuse",
        keys="hot", prefill="RL.ADMIT KEY LIMIT 1 WINDOW 3600000"),
    # Not a bar, a budget row: an admissible call given BLOCK answers at
    # once, through the out-of-line path that checks the key's queue.
    Row("fixb", "RL.ADMIT fixed, admit, BLOCK given (answers at once)",
        "RL.ADMIT KEY LIMIT %s WINDOW 60000 BLOCK 1000" % BIG, "info", "fixed", keys=""),
    Row("rcst", "RL.ADMIT fixed, refuse: COST 2 > LIMIT 1 (no state)",
        "RL.ADMIT KEY LIMIT 1 WINDOW 60000 COST 2", "refuse", "fixed", expect="refuse"),
    Row("lsld", "FCALL rl_admit ALGO sliding (library)",
        "lib:rl_admit KEY LIMIT %s WINDOW 60000 ALGO sliding" % BIG, "lua", "sliding", shape="hsld"),
    Row("asld", "RL.ADMIT ALGO sliding", "RL.ADMIT KEY LIMIT %s WINDOW 60000 ALGO sliding" % BIG,
        "native", "sliding", lua="lsld"),
    Row("ltok", "FCALL rl_admit ALGO token (library)",
        "lib:rl_admit KEY %s ALGO token" % BUCKET_ARGS, "lua", "token", shape="htok"),
    Row("atok", "RL.ADMIT ALGO token", "RL.ADMIT KEY %s ALGO token" % BUCKET_ARGS,
        "native", "token", lua="ltok"),
    Row("lgcr", "FCALL rl_admit ALGO gcra (library)",
        "lib:rl_admit KEY %s ALGO gcra" % BUCKET_ARGS, "lua", "gcra", shape="hgcr"),
    Row("agcr", "RL.ADMIT ALGO gcra", "RL.ADMIT KEY %s ALGO gcra" % BUCKET_ARGS,
        "native", "gcra", lua="lgcr"),
    Row("llky", "FCALL rl_admit ALGO leaky (library)",
        "lib:rl_admit KEY %s ALGO leaky" % BUCKET_ARGS, "lua", "leaky", shape="hgcr"),
    Row("alky", "RL.ADMIT ALGO leaky", "RL.ADMIT KEY %s ALGO leaky" % BUCKET_ARGS,
        "native", "leaky", lua="llky"),
    # CL.THROTTLE's arguments: max_burst count_per_period period_s quantity.
    Row("lthr", "FCALL rl_throttle (library)",
        "lib:rl_throttle KEY %s %s 60 1" % (BUCKET, RATE), "lua", "throttle",
        expect="allowed0", shape="hgcr"),
    Row("thrt", "RL.THROTTLE", "RL.THROTTLE KEY %s %s 60 1" % (BUCKET, RATE),
        "native", "throttle", lua="lthr", expect="allowed0"),
    # RESERVE admissible now (issue 38): a booking call where no wait is
    # needed costs about what the plain call does (hot key only, no bars).
    Row("agrs", "RL.ADMIT ALGO gcra RESERVE 5000, admissible now",
        "RL.ADMIT KEY %s ALGO gcra RESERVE 5000" % BUCKET_ARGS, "info", "gcra", keys="hot"),
    Row("lgrs", "FCALL rl_admit ALGO gcra RESERVE 5000, admissible now (library)",
        "lib:rl_admit KEY %s ALGO gcra RESERVE 5000" % BUCKET_ARGS, "info", "gcra", keys="hot"),
    # The library's refusals: a counter at its limit, a bucket whose debt
    # a COST beyond its room cannot fit (hot key only, no bars).
    Row("lrfx", "FCALL rl_admit fixed, refuse: count at limit (library)",
        "lib:rl_admit KEY LIMIT 1 WINDOW 3600000", "info", "fixed", expect="refuse",
        keys="hot", prefill="lib:rl_admit KEY LIMIT 1 WINDOW 3600000"),
    Row("lrgc", "FCALL rl_admit ALGO gcra, refuse: full bucket (library)",
        "lib:rl_admit KEY LIMIT 1 WINDOW 3600000 ALGO gcra BURST 1", "info", "gcra",
        expect="refuse", keys="hot",
        prefill="lib:rl_admit KEY LIMIT 1 WINDOW 3600000 ALGO gcra BURST 1"),
    # The hand-written scripts of each library row's shape (bench/lua/hand_*.lua,
    # the shapes peers' libraries run; each file says how it is not the
    # library's equal), at the same rates, hot key only, no bars. The
    # sliding and token shapes take the client's clock: a fixed ms here.
    Row("hfix", "hand_fixed.lua (INCRBY, PEXPIRE when new)",
        "lua:hand_fixed KEY %s 60000 1" % BIG, "info", "fixed", keys="hot"),
    Row("hfpt", "hand_fixed_pttl.lua (INCR, PTTL)",
        "lua:hand_fixed_pttl KEY 60000", "info", "fixed", expect="int_list", keys="hot"),
    Row("hsld", "hand_sliding.lua (GET, GET, INCRBY)",
        "lua:hand_sliding KEY KEY:prev %s %d 60000 1" % (BIG, CLIENT_MS), "info", "sliding",
        expect="int", keys="hot"),
    Row("htok", "hand_token.lua (HMGET, HSET, PEXPIRE)",
        "lua:hand_token KEY %s 6000 1 %d 1" % (BUCKET, CLIENT_MS), "info", "token",
        expect="int_list", keys="hot"),
    Row("hgcr", "hand_gcra.lua (TIME, GET, SET EX)",
        "lua:hand_gcra KEY %s %s 60 1" % (BUCKET, RATE), "info", "gcra", keys="hot"),
]

# MEMORY USAGE of one limiter key after one admit (key names all the same
# length: m:<id>:000000000000). The first row is the baseline.
@dataclass
class MemRow:
    id: str
    label: str
    cmds: tuple
    algo: str = ""


MEM_ROWS = [
    MemRow("incr", "INCR + PEXPIRE 60000 (int counter with TTL)",
           ("INCR KEY", "PEXPIRE KEY 60000")),
    MemRow("fixd", "RL.ADMIT fixed", ("RL.ADMIT KEY LIMIT 100 WINDOW 60000",), "fixed"),
    MemRow("lfix", "FCALL rl_admit fixed (library, for reference)",
           ("lib:rl_admit KEY LIMIT 100 WINDOW 60000",)),
    MemRow("asld", "RL.ADMIT ALGO sliding",
           ("RL.ADMIT KEY LIMIT 100 WINDOW 60000 ALGO sliding",), "sliding"),
    MemRow("atok", "RL.ADMIT ALGO token",
           ("RL.ADMIT KEY LIMIT 100 WINDOW 60000 ALGO token BURST 100",), "token"),
    MemRow("agcr", "RL.ADMIT ALGO gcra",
           ("RL.ADMIT KEY LIMIT 100 WINDOW 60000 ALGO gcra BURST 100",), "gcra"),
    MemRow("alky", "RL.ADMIT ALGO leaky",
           ("RL.ADMIT KEY LIMIT 100 WINDOW 60000 ALGO leaky BURST 100",), "leaky"),
    MemRow("thrt", "RL.THROTTLE", ("RL.THROTTLE KEY 100 100 60 1",), "throttle"),
    # A key the module updates again is kept as a raw string (updated in
    # place): what a hot limiter costs. Bars too, like the rows above.
    MemRow("fix2", "RL.ADMIT fixed, after a second admit (hot key)",
           ("RL.ADMIT KEY LIMIT 100 WINDOW 60000",) * 2, "fixed"),
    MemRow("flr2", "FLOOR.ADMIT, after a second call (control: API calls alone)",
           ("FLOOR.ADMIT KEY LIMIT 100 WINDOW 60000",) * 2),
    MemRow("sld2", "RL.ADMIT ALGO sliding, after a second admit (hot key)",
           ("RL.ADMIT KEY LIMIT 100 WINDOW 60000 ALGO sliding",) * 2, "sliding"),
    MemRow("tok2", "RL.ADMIT ALGO token, after a second admit (hot key)",
           ("RL.ADMIT KEY LIMIT 100 WINDOW 60000 ALGO token BURST 100",) * 2, "token"),
    MemRow("gcr2", "RL.ADMIT ALGO gcra, after a second admit (hot key)",
           ("RL.ADMIT KEY LIMIT 100 WINDOW 60000 ALGO gcra BURST 100",) * 2, "gcra"),
    MemRow("lky2", "RL.ADMIT ALGO leaky, after a second admit (hot key)",
           ("RL.ADMIT KEY LIMIT 100 WINDOW 60000 ALGO leaky BURST 100",) * 2, "leaky"),
    MemRow("thr2", "RL.THROTTLE, after a second call (hot key)",
           ("RL.THROTTLE KEY 100 100 60 1",) * 2, "throttle"),
    # The library keeps the module's state format: its keys, for reference.
    MemRow("lsld", "FCALL rl_admit ALGO sliding (library, for reference)",
           ("lib:rl_admit KEY LIMIT 100 WINDOW 60000 ALGO sliding",)),
    MemRow("ltok", "FCALL rl_admit ALGO token (library, for reference)",
           ("lib:rl_admit KEY LIMIT 100 WINDOW 60000 ALGO token BURST 100",)),
    MemRow("lgcr", "FCALL rl_admit ALGO gcra (library, for reference)",
           ("lib:rl_admit KEY LIMIT 100 WINDOW 60000 ALGO gcra BURST 100",)),
    MemRow("llky", "FCALL rl_admit ALGO leaky (library, for reference)",
           ("lib:rl_admit KEY LIMIT 100 WINDOW 60000 ALGO leaky BURST 100",)),
    MemRow("lthr", "FCALL rl_throttle (library, for reference)",
           ("lib:rl_throttle KEY 100 100 60 1",)),
]

NOT_IMPLEMENTED = re.compile(r"unknown (option|command|subcommand)", re.I)


def log(msg):
    print(msg, file=sys.stderr, flush=True)


def hot_key(prefix, rid):
    return "%s:%s:%012d" % (prefix, rid, 0)


class Bench:
    def __init__(self, srv):
        self.srv = srv
        self.c = srv.client()
        self.shas = {}
        self.library = None     # the library's name once FUNCTION LOADed
        self.errors = []        # unexpected failures: make the exit status 1
        self.skipped = {}       # row id -> reason
        self.results = {}       # (row id, keymode, P) -> list of per-round dicts
        self.rounds = 0
        self.throughput_s = 0.0

    # -- commands -----------------------------------------------------------

    def words(self, cmd, key):
        """The command as argument list, or raises LookupError(reason) when
        its Lua script does not exist."""
        w = cmd.split()
        if w[0].startswith("lib:"):
            if self.library is None:
                self.library = vh.load_library(self.c)
            return ["FCALL", w[0][4:], "1", key] + [key if x == "KEY" else x for x in w[2:]]
        if w[0].startswith("lua:"):
            name = w[0][4:]
            if name not in self.shas:
                self.shas[name] = vh.load_script(self.c, name)
            if self.shas[name] is None:
                raise LookupError("bench/lua/%s.lua does not exist yet" % name)
            # Every KEY or KEY:suffix word is one of the script's keys.
            numkeys = sum(1 for x in w[1:] if x.split(":")[0] == "KEY")
            w = ["EVALSHA", self.shas[name], str(numkeys)] + w[1:]
        return [key + x[3:] if x.split(":")[0] == "KEY" else x for x in w]

    @staticmethod
    def stat_name(words):
        return words[0].lower()

    def probe(self, row):
        """Runs the row's command once on a scratch key. Returns None when the
        row can run, else the reason to skip it."""
        key = hot_key("p", row.id)
        try:
            w = self.words(row.cmd, key)
        except LookupError as e:
            return str(e)
        except vh.RespError as e:
            self.errors.append("%s: SCRIPT LOAD failed: %s" % (row.id, e))
            return "SCRIPT LOAD failed: %s" % e
        self.c.call("DEL", key)
        if row.prefill:
            r = self.c.call(*self.words(row.prefill, key), raise_errors=False)
            if isinstance(r, vh.RespError):
                return self._probe_error(row, r)
        r = self.c.call(*w, raise_errors=False)
        self.c.call("DEL", key)
        if isinstance(r, vh.RespError):
            return self._probe_error(row, r)
        ok = {
            "int": lambda r: isinstance(r, int),
            "ok": lambda r: r == "OK",
            "int_list": lambda r: isinstance(r, list) and all(isinstance(x, int) for x in r),
            "admit": lambda r: isinstance(r, list) and len(r) >= 1 and r[0] == 1,
            "refuse": lambda r: isinstance(r, list) and len(r) >= 1 and r[0] == 0,
            "allowed0": lambda r: isinstance(r, list) and len(r) >= 1 and r[0] == 0,
        }[row.expect](r)
        if not ok:
            msg = "probe answered %r, expected %s" % (r, row.expect)
            self.errors.append("%s: %s" % (row.id, msg))
            return "ERROR: " + msg
        return None

    def _probe_error(self, row, err):
        if NOT_IMPLEMENTED.search(str(err)):
            return 'not implemented yet: server says "%s"' % str(err).strip()
        self.errors.append("%s: probe failed: %s" % (row.id, err))
        return "ERROR: probe failed: %s" % err

    # -- one redis-benchmark run --------------------------------------------

    def run(self, row, keymode, pipeline, n, aof=False):
        """One redis-benchmark run on a flushed db (the hot key pre-filled
        when the row says so). With aof=True the AOF size is read just
        before and after the run (rec["aof_bytes"])."""
        self.c.call("FLUSHALL", "SYNC")
        if row.prefill and keymode == "hot":
            self.c.call(*self.words(row.prefill, hot_key("b", row.id)))
        key = hot_key("b", row.id) if keymode == "hot" else "b:%s:__rand_int__" % row.id
        words = self.words(row.cmd, key)
        if keymode == "warm":
            self.fill_keyspace(words, key, "b:%s:" % row.id)
        args = [REDIS_BENCHMARK, "-h", "127.0.0.1", "-p", str(self.srv.port),
                "-c", str(CLIENTS), "-n", str(n), "-P", str(pipeline), "--csv"]
        if keymode in ("rand", "warm"):
            # Without -r redis-benchmark sends __rand_int__ literally: one key.
            args += ["-r", str(KEYSPACE)]
        # CONFIG RESETSTAT clears INFO commandstats (not the module's INFO
        # ratelimit counters, which only grow): readings are differences.
        self.c.call("CONFIG", "RESETSTAT")
        size0 = self.aof_size() if aof else 0
        rl0 = self.c.info("ratelimit") if aof else {}
        off0 = self.repl_offset() if aof else 0
        t0 = time.time()
        out = subprocess.run(args + words, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True, timeout=600)
        elapsed = time.time() - t0
        if out.returncode != 0:
            raise RuntimeError("redis-benchmark failed (%d): %s" % (out.returncode, out.stderr))
        rec = parse_csv(out.stdout)
        st = self.cmdstat(self.stat_name(words))
        rec.update(st)
        rec["elapsed"] = elapsed
        if aof:
            rec["aof_bytes"] = self.aof_size() - size0
            rec["offset"] = self.repl_offset() - off0
            rl1 = self.c.info("ratelimit")
            for f in ("admitted", "refused"):
                k = "ratelimit_calls_" + f
                rec[f] = int(rl1.get(k, 0)) - int(rl0.get(k, 0))
        if st["calls"] < n:
            raise RuntimeError("%s: server saw %d calls, expected %d" % (row.id, st["calls"], n))
        if keymode == "warm":
            # Every call must have hit one of the filled keys, none made a new one.
            size = self.c.call("DBSIZE")
            if size != KEYSPACE:
                raise RuntimeError("%s warm P%d: DBSIZE %d after the run, expected %d" % (
                    row.id, pipeline, size, KEYSPACE))
        if st["failed_calls"] or st["rejected_calls"]:
            self.errors.append("%s %s P%d: %d failed / %d rejected calls" % (
                row.id, keymode, pipeline, st["failed_calls"], st["rejected_calls"]))
        return rec

    def fill_keyspace(self, words, key, prefix):
        """Runs the command once on each of the KEYSPACE keys redis-benchmark's
        -r draws from (prefix + 12 digits), server-side in chunks."""
        at = words.index(key) + 1
        t0 = time.time()
        for start in range(0, KEYSPACE, FILL_CHUNK):
            n = min(FILL_CHUNK, KEYSPACE - start)
            self.c.call("EVAL", FILL_SCRIPT, "0", str(start), str(n), prefix, str(at), *words)
        size = self.c.call("DBSIZE")
        if size != KEYSPACE:
            raise RuntimeError("keyspace fill made %d keys, expected %d" % (size, KEYSPACE))
        log("    filled %d keys in %.1f s" % (size, time.time() - t0))

    def cmdstat(self, name):
        info = self.c.info("commandstats")
        for k, v in info.items():
            if k.lower() == "cmdstat_" + name:
                fields = dict(kv.split("=", 1) for kv in v.split(","))
                return {
                    "calls": int(fields["calls"]),
                    "usec_per_call": float(fields["usec_per_call"]),
                    "failed_calls": int(fields.get("failed_calls", 0)),
                    "rejected_calls": int(fields.get("rejected_calls", 0)),
                }
        return {"calls": 0, "usec_per_call": float("nan"), "failed_calls": 0,
                "rejected_calls": 0}

    # -- the phases ---------------------------------------------------------

    def throughput(self, rows):
        plan = []  # (keymode, P, row) in run order, for one round
        for keymode in KEYMODES:
            for p in PIPELINES:
                for row in rows:
                    if keymode in row.keys.split():
                        plan.append((keymode, p, row))
        t0 = time.time()
        rnd = 0
        while True:
            # Interleaved: every row once per (keys, P) block, then the next
            # round; odd rounds run each block's rows in reverse order so a
            # row is not always the one right after INCR.
            blocks = {}
            for item in plan:
                blocks.setdefault(item[:2], []).append(item)
            done = 0
            for (keymode, p), items in blocks.items():
                if rnd % 2 == 1:
                    items = items[::-1]
                for _, _, row in items:
                    done += 1
                    rec = self.run(row, keymode, p, N_BY_P[p])
                    rec["round"] = rnd
                    self.results.setdefault((row.id, keymode, p), []).append(rec)
                    log("  round %d [%2d/%d] %-4s P%-2d %-4s %10.0f req/s  %6.2f us/call" % (
                        rnd + 1, done, len(plan), keymode, p, row.id, rec["rps"],
                        rec["usec_per_call"]))
            rnd += 1
            spent = time.time() - t0
            if rnd >= MAX_ROUNDS:
                break
            if rnd >= MIN_ROUNDS and spent + spent / rnd > BUDGET_S:
                break
        self.rounds = rnd
        self.throughput_s = time.time() - t0

    def summary(self, rid, keymode, p):
        recs = self.results.get((rid, keymode, p))
        if not recs:
            return None
        base = {r["round"]: r for r in self.results.get(("incr", keymode, p), [])}
        med = statistics.median
        out = {
            "rps": med(r["rps"] for r in recs),
            "p50": med(r["p50"] for r in recs),
            "p99": med(r["p99"] for r in recs),
            "us": med(r["usec_per_call"] for r in recs),
            "rounds": len(recs),
        }
        rps = [r["rps"] for r in recs]
        out["spread"] = (max(rps) - min(rps)) / out["rps"] * 100 if out["rps"] else 0
        # Ratios against INCR of the same round and (keys, P) block.
        rr = [r["rps"] / base[r["round"]]["rps"] for r in recs if r["round"] in base]
        ru = [r["usec_per_call"] / base[r["round"]]["usec_per_call"]
              for r in recs if r["round"] in base and base[r["round"]]["usec_per_call"] > 0]
        out["x_rps"] = med(rr) if rr else float("nan")
        out["x_us"] = med(ru) if ru else float("nan")
        return out

    def memory(self):
        rows = []
        for m in MEM_ROWS:
            key = hot_key("m", m.id)
            self.c.call("DEL", key)
            reason = None
            for cmd in m.cmds:
                try:
                    w = self.words(cmd, key)
                except LookupError as e:
                    reason = str(e)
                    break
                r = self.c.call(*w, raise_errors=False)
                if isinstance(r, vh.RespError):
                    if NOT_IMPLEMENTED.search(str(r)):
                        reason = 'not implemented yet: server says "%s"' % str(r).strip()
                    else:
                        reason = "ERROR: %s" % r
                        self.errors.append("memory %s: %s" % (m.id, r))
                    break
            if reason:
                rows.append({"row": m, "skip": reason})
                continue
            usage = self.c.call("MEMORY", "USAGE", key, "SAMPLES", "0")
            rows.append({
                "row": m,
                "bytes": usage,
                "type": self.c.call("TYPE", key),
                "enc": self.c.call("OBJECT", "ENCODING", key),
                "pttl": self.c.call("PTTL", key),
                "keylen": len(key),
            })
            self.c.call("DEL", key)
        return rows

    def expiry(self):
        """Random-key RL.ADMIT run with a short window, then DBSIZE before
        and after the windows have passed (active expiry only)."""
        self.c.call("DEBUG", "SET-ACTIVE-EXPIRE", "1")
        row = Row("fexp", "RL.ADMIT fixed, WINDOW %d" % EXPIRY_WINDOW_MS,
                  "RL.ADMIT KEY LIMIT %s WINDOW %d" % (BIG, EXPIRY_WINDOW_MS), "native")
        rec = self.run(row, "rand", 16, N_BY_P[16])
        t_end = time.time()
        before = self.c.call("DBSIZE")
        ks = self.c.info("keyspace").get("db0", "")
        expires = int(re.search(r"expires=(\d+)", ks).group(1)) if "expires=" in ks else 0
        after = before
        waited = 0.0
        deadline = t_end + EXPIRY_WINDOW_MS / 1000 + EXPIRY_WAIT_S
        while time.time() < deadline:
            time.sleep(0.25)
            after = self.c.call("DBSIZE")
            waited = time.time() - t_end
            if after == 0:
                break
        self.c.call("FLUSHALL", "SYNC")
        return {"rps": rec["rps"], "n": N_BY_P[16], "before": before, "expires": expires,
                "after": after, "waited": waited}

    def repl_offset(self):
        return int(self.c.info("replication").get("master_repl_offset", 0))

    def aof_size(self):
        time.sleep(0.2)  # let the event loop flush the AOF buffer
        return int(self.c.info("persistence")["aof_current_size"])

    def replication(self, rows_by_id):
        """Refuse runs with the AOF switched on: the AOF gets the same stream
        of effects as replicas (the module's RedisModule_Replicate calls), so
        its size not moving means nothing was propagated. An admit run
        afterwards is the control: the same method must see its writes."""
        c = self.c
        c.call("FLUSHALL", "SYNC")
        c.call("CONFIG", "SET", "appendfsync", "no")
        c.call("CONFIG", "SET", "appendonly", "yes")
        deadline = time.time() + 60
        while time.time() < deadline:
            p = c.info("persistence")
            if (p.get("aof_enabled") == "1" and p.get("aof_rewrite_in_progress") == "0"
                    and p.get("aof_rewrite_scheduled") == "0"):
                break
            time.sleep(0.1)
        else:
            raise RuntimeError("AOF did not switch on within 60 s")
        out = {"backlog": c.info("replication").get("repl_backlog_active", "?")}
        steps = []
        # (row, keys, P, n): the two refusals, then the admit control.
        plan = (("rcnt", "hot", 16, N_BY_P[16]), ("rcst", "rand", 16, N_BY_P[16]),
                ("fixd", "hot", 1, 1000))
        for rid, keymode, p, n in plan:
            row = rows_by_id.get(rid)
            if row is None or rid in self.skipped:
                continue
            rec = self.run(row, keymode, p, n, aof=True)
            steps.append({
                "row": row, "keys": keymode, "P": p, "n": n, "bytes": rec["aof_bytes"],
                "admitted": rec["admitted"], "refused": rec["refused"], "calls": rec["calls"],
                "offset": rec["offset"],
            })
        c.call("CONFIG", "SET", "appendonly", "no")
        out["steps"] = steps
        return out


def parse_csv(text):
    """redis-benchmark 7.x --csv: a header line then one line per test:
    "test","rps","avg_latency_ms","min_latency_ms","p50_latency_ms",
    "p95_latency_ms","p99_latency_ms","max_latency_ms"."""
    rows = [r for r in csv.reader(io.StringIO(text)) if r]
    header = next((r for r in rows if r and r[0] == "test"), None)
    data = [r for r in rows if r and r[0] != "test"]
    if header is None or not data:
        raise RuntimeError("unexpected redis-benchmark output:\n" + text)
    d = dict(zip(header, data[-1]))
    try:
        return {"rps": float(d["rps"]), "p50": float(d["p50_latency_ms"]),
                "p99": float(d["p99_latency_ms"]), "avg": float(d["avg_latency_ms"])}
    except KeyError as e:
        raise RuntimeError("redis-benchmark --csv has no column %s; header %r" % (e, header))


# ---------------------------------------------------------------------------
# Report
# ---------------------------------------------------------------------------

def machine_info(srv, version):
    def sh(*cmd):
        try:
            return subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                  text=True, cwd=vh.REPO).stdout.strip()
        except OSError:
            return ""
    cpu = "?"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    head = sh("git", "rev-parse", "--short", "HEAD")
    dirty = sh("git", "status", "--porcelain", "--", "src", "Cargo.toml", "Cargo.lock")
    mod_time = datetime.datetime.fromtimestamp(os.path.getmtime(srv.module)).strftime(
        "%Y-%m-%d %H:%M:%S")
    return {
        "nproc": sh("nproc") or str(os.cpu_count()),
        "cpu": cpu,
        "kernel": platform.release(),
        "server": "valkey-server %s (%s)" % (version, srv.binary),
        "module": "%s (built %s)" % (os.path.relpath(srv.module, vh.REPO), mod_time),
        "git": (head or "?") + (" + uncommitted changes in src/ or Cargo.*" if dirty else ""),
        "rb": sh(REDIS_BENCHMARK, "--version"),
        "python": platform.python_version(),
    }


def library_table(b, rows):
    """Module, library (FCALL), the hand-written script of the library row's
    shape (bench/lua/hand_*.lua) and INCR side by side: the server µs/call
    at P=1 and P=16 on the hot key, and what moving from the library to the
    module gains (library µs / module µs)."""
    S = b.summary
    by_id = {r.id: r for r in rows}
    lines = ["", "### Module, library, hand-written script, INCR", "",
             "Hot key, server µs/call (`INFO commandstats`) at P=1 / P=16; "
             "gain = the library's µs/call over the module's: how many times less "
             "server time a call costs once the module can be loaded. The "
             "hand-written script is the one of the library row's shape "
             "(`bench/lua/hand_*.lua`, not its equal: see each file).", "",
             "| command | module µs | library µs (FCALL) | gain | hand-written script | its µs | INCR µs |",
             "|---|--:|--:|--:|---|--:|--:|"]
    for row in rows:
        if row.kind != "native" or row.id in b.skipped or row.lua in b.skipped:
            continue
        lib_row = by_id.get(row.lua)
        shape = lib_row.shape if lib_row else ""
        cells = {"mod": [], "lib": [], "gain": [], "hand": [], "incr": []}
        for p in PIPELINES:
            m, lib = S(row.id, "hot", p), S(row.lua, "hot", p)
            hand, incr = S(shape, "hot", p) if shape else None, S("incr", "hot", p)
            if not (m and lib):
                continue
            cells["mod"].append("%.2f" % m["us"])
            cells["lib"].append("%.2f" % lib["us"])
            cells["gain"].append(fmt_x(lib["us"] / m["us"]))
            cells["hand"].append("%.2f" % hand["us"] if hand else "-")
            cells["incr"].append("%.2f" % incr["us"] if incr else "-")
        if cells["mod"]:
            name = by_id[shape].cmd.split()[0][4:] + ".lua" if shape in by_id else "-"
            lines.append("| %s | %s | %s | %s | %s | %s | %s |" % (
                row.label.split(",")[0], " / ".join(cells["mod"]), " / ".join(cells["lib"]),
                " / ".join(cells["gain"]), name, " / ".join(cells["hand"]),
                " / ".join(cells["incr"])))
    return lines


def fmt_rps(x):
    return "{:,.0f}".format(x)


def fmt_x(x):
    return "-" if x != x else "%.2f×" % x


def verdict(ok):
    return "**PASS**" if ok else "**MISS**"


def report(b, rows, mem, exp, repl, info, version, started, wall):
    L = []
    today = started.strftime("%Y-%m-%d")
    L.append("# valkey-ratelimit benchmark, %s, Valkey %s%s" % (
        today, version, " (BENCH_QUICK smoke run)" if QUICK else ""))
    L.append("")
    L.append("- Machine: %s cores (`nproc`), CPU %s, Linux %s, Python %s" % (
        info["nproc"], info["cpu"], info["kernel"], info["python"]))
    L.append("- Server: %s, started by the benchmark on a free loopback port with "
             "`--save \"\" --appendonly no`, default config otherwise" % info["server"])
    L.append("- Module: %s; git %s" % (info["module"], info["git"]))
    L.append("- Client: %s: `-c %d -P {1,16} --csv`, `-n %d` at P=1 and `-n %d` at P=16; "
             "random keys with `-r %d` (`__rand_int__` in the key name)" % (
                 info["rb"], CLIENTS, N_BY_P[1], N_BY_P[16], KEYSPACE))
    L.append("- %d rounds (%s) taking %.0f s, interleaved (each round runs every row once per "
             "keys/P block; odd rounds in reverse order); figures are medians over rounds; "
             "the db is flushed "
             "before every run (and, for `warm` runs, filled with 1M keys by the row's own "
             "command, server-side, outside the timing). Server µs/call is `usec_per_call` from `INFO commandstats` "
             "(`CONFIG RESETSTAT` before each run; `cmdstat_fcall` for the library's rows, "
             "`cmdstat_evalsha` for the hand-rolled script). ×INCR "
             "ratios are taken against INCR of the same round and block, then the median. "
             "Started %s, took %.0f s in all." % (
                 b.rounds, "fixed by BENCH_ROUNDS" if FIXED_ROUNDS else
                 "%d to %d, as many as fit in %.0f s" % (MIN_ROUNDS, MAX_ROUNDS, BUDGET_S),
                 b.throughput_s, started.strftime("%H:%M:%S"), wall))
    L.append("- Client and server share the %s cores, so req/s is bounded by redis-benchmark "
             "as well; server µs/call is the cleaner per-command cost. 1-min load average "
             "%.2f before the run, %.2f at its end (anything else running adds noise)." % (
                 info["nproc"], info["load"][0], info["load"][1]))
    L.append("")

    L.append("## Throughput and latency")
    L.append("")
    L.append("| row | keys | P | req/s | p50 ms | p99 ms | server µs/call | ×INCR req/s "
             "| ×INCR µs/call | req/s spread |")
    L.append("|---|---|--:|--:|--:|--:|--:|--:|--:|--:|")
    for row in rows:
        if row.id in b.skipped:
            continue
        for keymode in KEYMODES:
            for p in PIPELINES:
                s = b.summary(row.id, keymode, p)
                if s is None:
                    continue
                L.append("| %s | %s | %d | %s | %.3f | %.3f | %.2f | %s | %s | %.0f%% |" % (
                    row.label, keymode, p, fmt_rps(s["rps"]), s["p50"], s["p99"], s["us"],
                    fmt_x(s["x_rps"]) if row.id != "incr" else "1",
                    fmt_x(s["x_us"]) if row.id != "incr" else "1", s["spread"]))
    L.append("")
    L.append("keys: `hot` = one key (`b:<id>:000000000000`); `rand` = `b:<id>:__rand_int__` "
             "over %s keys, on an empty db (most calls create their key); `warm` = the same "
             "random keys after every one of them was created by the row's command (INCR and "
             "the fixed window only: 1M limiters in place, every call an update; for the fixed "
             "window, each call the first update of its key, see the scale section). "
             "Refuse rows: *count at limit* pre-fills the hot key to LIMIT 1 "
             "with a 1 h window, so every call is refused on the count (the realistic refusal); "
             "*COST 2 > LIMIT 1* is refused before any state is read or written (the "
             "cost-exceeds-limit path), the only refusal that works on random keys without "
             "pre-filling a million keys. Bucket rows (token, gcra, leaky and RL.THROTTLE, "
             "and their library twins) run at %s per 60 s with a bucket of %s: never refused, and "
             "each admit leaves a key that lives for at least one 6 s interval. spread = "
             "(max−min)/median of req/s over rounds."
             % ("{:,}".format(KEYSPACE), RATE, "{:,}".format(int(BUCKET))))
    L.extend(library_table(b, rows))
    if b.skipped:
        L.append("")
        L.append("Skipped rows:")
        for row in rows:
            if row.id in b.skipped:
                L.append("- %s (`%s`): %s" % (row.label, row.cmd, b.skipped[row.id]))
    L.append("")

    L.append("## Scale: 1,000,000 random keys vs one hot key")
    L.append("")
    L.append("| row | P | keys | hot req/s | random req/s | random/hot | hot µs/call "
             "| random µs/call |")
    L.append("|---|--:|---|--:|--:|--:|--:|--:|")
    for row in rows:
        if row.id in b.skipped:
            continue
        for p in PIPELINES:
            for keymode in ("rand", "warm"):
                h, r = b.summary(row.id, "hot", p), b.summary(row.id, keymode, p)
                if h and r:
                    L.append("| %s | %d | %s | %s | %s | %s | %.2f | %.2f |" % (
                        row.label, p, keymode, fmt_rps(h["rps"]), fmt_rps(r["rps"]),
                        fmt_x(r["rps"] / h["rps"]), h["us"], r["us"]))
    L.append("")
    L.append("`rand` mostly creates keys (a new key costs the server a hash-table insert, an "
             "expiry entry and a bigger replicated write); `warm` measures the same calls once "
             "1M limiters exist. The fill touched each key once, and a run draws 200,000 of "
             "the 1M, so nearly every `warm` call is its key's first update. For the fixed "
             "window that is the dearest update: a new counter is stored compact, and the "
             "module API reads a string only by turning it into an updatable (raw) one, once "
             "per key and window. Later updates of a counter skip that step.")
    L.append("")
    if exp:
        L.append("Idle keys expire: `RL.ADMIT b:fexp:__rand_int__ LIMIT %s WINDOW %d`, -P 16, "
                 "-n %d over %s keys (%s req/s), active expiry on (`DEBUG SET-ACTIVE-EXPIRE 1`), "
                 "no client touching the keys afterwards: DBSIZE **%d** right after the run "
                 "(%d with a TTL), **%d** after %.1f s." % (
                     BIG, EXPIRY_WINDOW_MS, exp["n"], "{:,}".format(KEYSPACE),
                     fmt_rps(exp["rps"]), exp["before"], exp["expires"], exp["after"],
                     exp["waited"]))
        L.append("")

    L.append("## Memory per limiter key")
    L.append("")
    base = next((m for m in mem if m["row"].id == "incr" and "bytes" in m), None)
    L.append("| limiter | MEMORY USAGE (bytes) | ×INCR+TTL | type / encoding | key |")
    L.append("|---|--:|--:|---|---|")
    for m in mem:
        if "skip" in m:
            L.append("| %s | - | - | - | skipped: %s |" % (m["row"].label, m["skip"]))
            continue
        x = m["bytes"] / base["bytes"] if base else float("nan")
        L.append("| %s | %d | %s | %s / %s | %d-byte name, PTTL %d |" % (
            m["row"].label, m["bytes"], fmt_x(x), m["type"], m["enc"], m["keylen"],
            m["pttl"]))
    L.append("")
    L.append("One key per limiter after one admit (`MEMORY USAGE key SAMPLES 0`), all key names "
             "the same length. An algorithm that keeps more than one key is under-counted here. "
             "The module creates a key as a compact string (embedded, like SET's); a key it "
             "updates again becomes a raw string it can rewrite in place (the module API has "
             "no in-place update that keeps a string embedded or integer-encoded), hence the "
             "larger *after a second admit* rows: a hot limiter's real cost. Both kinds are "
             "bars.")
    L.append("")

    L.append("## Refuse path: nothing replicated")
    L.append("")
    if repl:
        L.append("Method: with no replica ever connected there is no replication backlog "
                 "(`repl_backlog_active:%s`), so `master_repl_offset` does not count bytes. "
                 "Instead the benchmark switches the AOF on at run time (`CONFIG SET "
                 "appendonly yes`, `appendfsync no`, in the server's temp dir) and compares "
                 "`aof_current_size` (`INFO persistence`) just before and after each run. "
                 "Valkey feeds the AOF and the replicas from the same propagation step (where "
                 "the module's `RedisModule_Replicate` calls end up), so bytes added to the AOF "
                 "are what a replica would have received. An admit run afterwards is the "
                 "control that the method sees writes. With the AOF on, Valkey %s also "
                 "advances `master_repl_offset` (by 1 per propagated write, no backlog "
                 "needed); its change is shown too. The db is flushed and the hot key "
                 "pre-filled before the first reading." % (repl["backlog"], version))
        L.append("")
        L.append("| run | keys | P | calls | admitted | refused | AOF bytes added "
                 "| master_repl_offset change |")
        L.append("|---|---|--:|--:|--:|--:|--:|--:|")
        for s in repl["steps"]:
            L.append("| %s%s | %s | %d | %d | %d | %d | %d | %d |" % (
                s["row"].label, " (control)" if s["row"].id == "fixd" else "", s["keys"],
                s["P"], s["calls"], s["admitted"], s["refused"], s["bytes"], s["offset"]))
        L.append("")

    L.append("## Library")
    L.append("")
    L.append("The library's rows answer as the module does: tests/it/lua_inprocess.rs "
             "checks it in-process against src/algo (100,000 random calls, these rows' "
             "arguments among them), tests/it/lua_oracle.rs live against the module.")
    L.append("")

    bars = evaluate(b, rows, mem, exp, repl)
    L.append("## Bars")
    L.append("")
    L.append("| bar | figures | verdict |")
    L.append("|---|---|---|")
    for name, figures, ok in bars:
        v = "SKIP" if ok is None else verdict(ok)
        L.append("| %s | %s | %s |" % (name, figures, v))
    L.append("")
    misses = [x for x in bars if x[2] is False]
    L.append("%d bars: %d PASS, %d MISS, %d SKIP." % (
        len(bars), sum(1 for x in bars if x[2]), len(misses),
        sum(1 for x in bars if x[2] is None)))
    L.append("")
    return "\n".join(L), misses


# Reference rows quoted beside the fixed-window bars: the API calls alone, and
# the server's own write of a key with a TTL.
REFERENCES = (("aflr", "FLOOR.ADMIT control, RL.ADMIT's API calls alone"),
              ("setp", "SET KEY 1 PX 60000, the server's own TTL write"))


def reference_note(b, ratio, ps=PIPELINES):
    """The same ratio for the reference rows, to quote beside a bar."""
    notes = ""
    for rid, label in REFERENCES:
        items = []
        for k in KEYMODES:
            for p in ps:
                s = b.summary(rid, k, p)
                if s:
                    items.append("%s P%d %s" % (k, p, fmt_x(ratio(k, p, s))))
        if items:
            notes += " (%s: %s)" % (label, "; ".join(items))
    return notes


def evaluate(b, rows, mem, exp, repl):
    """Each bar: (name, figures, True/False/None for skipped)."""
    bars = []
    S = b.summary
    by_id = {r.id: r for r in rows}

    def configs(rid, ps=PIPELINES):
        for keymode in KEYMODES:
            for p in ps:
                s = S(rid, keymode, p)
                if s:
                    yield keymode, p, s

    def all_ok(items, limit, le=True):
        """items: (label, value); returns (figures, ok)."""
        if not items:
            return "no data", None
        ok = all((v <= limit) if le else (v >= limit) for _, v in items)
        return "; ".join("%s %s" % (lab, fmt_x(v)) for lab, v in items), ok

    # 1. fixed admit path vs INCR, server µs.
    if "fixd" in b.skipped:
        bars.append(("RL.ADMIT fixed admit: server µs/call ≤ 2.0× INCR", b.skipped["fixd"], None))
    else:
        items = [("%s P%d: %.2f/%.2f µs =" % (k, p, s["us"], S("incr", k, p)["us"]), s["x_us"])
                 for k, p, s in configs("fixd")]
        fig, ok = all_ok(items, 2.0)
        fig += reference_note(b, lambda k, p, s: s["x_us"])
        bars.append(("RL.ADMIT fixed admit: server µs/call ≤ 2.0× INCR's", fig, ok))
        items = [("%s P%d: %s/%s req/s =" % (k, p, fmt_rps(s["rps"]),
                                              fmt_rps(S("incr", k, p)["rps"])), s["x_rps"])
                 for k, p, s in configs("fixd", (16,))]
        fig, ok = all_ok(items, 0.9, le=False)
        fig += reference_note(b, lambda k, p, s: s["x_rps"], (16,))
        bars.append(("RL.ADMIT fixed admit: P=16 throughput ≥ 0.9× INCR's", fig, ok))

    def bar_name(row):
        """A native row's name in its bars: the fixed window's without ", admit"."""
        return row.label.split(",")[0] if row.algo == "fixed" else row.label

    # 2. every algorithm and RL.THROTTLE: ≤ 4× INCR µs, P16 ≥ 3× its library twin (FCALL).
    for row in rows:
        if row.kind != "native":
            continue
        name = bar_name(row)
        if row.id in b.skipped:
            bars.append(("%s: µs/call ≤ 4× INCR; P=16 req/s ≥ 3× library" % name,
                         b.skipped[row.id], None))
            continue
        items = [("%s P%d" % (k, p), s["x_us"]) for k, p, s in configs(row.id)]
        fig, ok = all_ok(items, 4.0)
        bars.append(("%s: server µs/call ≤ 4× INCR's" % name, fig, ok))
        lua = by_id.get(row.lua)
        lname = lua.label if lua else row.lua
        if not lua or row.lua in b.skipped:
            bars.append(("%s: P=16 throughput ≥ 3× %s" % (name, lname),
                         (b.skipped.get(row.lua) or "no library row"), None))
            continue
        items = []
        for k in KEYMODES:
            s, l = S(row.id, k, 16), S(row.lua, k, 16)
            if s and l:
                items.append(("%s P16: %s/%s req/s =" % (k, fmt_rps(s["rps"]), fmt_rps(l["rps"])),
                              s["rps"] / l["rps"]))
        fig, ok = all_ok(items, 3.0, le=False)
        bars.append(("%s: P=16 throughput ≥ 3× %s's" % (name, lname), fig, ok))

    # 3. refuse path: no slower than admit, nothing replicated.
    if "rcnt" not in b.skipped and "fixd" not in b.skipped:
        items, ok = [], True
        for p in PIPELINES:
            r, a = S("rcnt", "hot", p), S("fixd", "hot", p)
            if r and a:
                ok = ok and r["us"] <= a["us"]
                items.append("hot P%d: %.2f vs %.2f µs/call, %s vs %s req/s" % (
                    p, r["us"], a["us"], fmt_rps(r["rps"]), fmt_rps(a["rps"])))
        bars.append(("Refuse (count at limit) no slower than admit: server µs/call ≤ admit's",
                     "; ".join(items) or "no data", ok if items else None))
    if repl and repl["steps"]:
        refuse = [s for s in repl["steps"] if s["row"].kind == "refuse"]
        control = [s for s in repl["steps"] if s["row"].id == "fixd"]
        ok = all(s["bytes"] == 0 and s["offset"] == 0 and s["admitted"] == 0 for s in refuse)
        if control:
            ok = ok and control[0]["bytes"] > 0
        fig = "; ".join("%s %s P%d: %d calls (%d refused), +%d AOF bytes, offset +%d" % (
            s["row"].id, s["keys"], s["P"], s["calls"], s["refused"], s["bytes"], s["offset"])
            for s in refuse)
        if control:
            fig += "; control admit run: %d calls, +%d AOF bytes, offset +%d" % (
                control[0]["calls"], control[0]["bytes"], control[0]["offset"])
        bars.append(("Refuse path replicates nothing (AOF stream unchanged)", fig, ok))

    # 4. memory.
    base = next((m for m in mem if m["row"].id == "incr" and "bytes" in m), None)
    fixed_key = next((m for m in mem if m["row"].id == "fixd" and "bytes" in m), None)
    for m in mem:
        if not m["row"].algo or base is None:
            continue
        limit = 1.0 if m["row"].algo == "fixed" else 2.0
        name = "Memory: %s key ≤ %s INCR+TTL key" % (
            m["row"].label, "" if limit == 1.0 else "2×")
        name = name.replace("≤  ", "≤ ")
        if "skip" in m:
            bars.append((name, m["skip"], None))
            continue
        x = m["bytes"] / base["bytes"]
        fig = "%d vs %d bytes = %s" % (m["bytes"], base["bytes"], fmt_x(x))
        floor = next((f for f in mem if f["row"].id == "flr2" and "bytes" in f), None)
        if m["row"].id == "fix2" and floor:
            fig += " (FLOOR.ADMIT control after a second call: %d bytes)" % floor["bytes"]
        if fixed_key and m["row"].algo != "fixed":
            fig += " (%s the RL.ADMIT fixed key's %d)" % (
                fmt_x(m["bytes"] / fixed_key["bytes"]), fixed_key["bytes"])
        bars.append((name, fig, x <= limit))

    # 5. scale, for every algorithm and RL.THROTTLE ("the same command on one
    # hot key"): on an empty db (keys being created), and, for the rows that
    # run warm, with 1M limiters in place.
    for row in rows:
        if row.kind != "native" or row.id in b.skipped:
            continue
        name = bar_name(row)
        for keymode, what in (("rand", "1M random keys, empty db"),
                              ("warm", "1M random keys, all in place")):
            if keymode not in row.keys.split():
                continue
            items = []
            for p in PIPELINES:
                h, r = S(row.id, "hot", p), S(row.id, keymode, p)
                if h and r:
                    items.append(("P%d: %s/%s req/s =" % (p, fmt_rps(r["rps"]),
                                                          fmt_rps(h["rps"])),
                                  r["rps"] / h["rps"]))
            fig, ok = all_ok(items, 0.8, le=False)
            # References, not verdicts: what the same key spread costs INCR
            # and SET PX (the server's own key lookups and creations, without
            # and with a TTL), and, for the fixed window, the API calls alone.
            refs = [("INCR itself", "incr"), ("SET … PX itself", "setp")] + (
                [("FLOOR.ADMIT control", "aflr")] if row.id == "fixd" else [])
            for label, ref in refs:
                pairs = [(p, S(ref, "hot", p), S(ref, keymode, p)) for p in PIPELINES]
                ratios = ["P%d %s" % (p, fmt_x(r["rps"] / h["rps"]))
                          for p, h, r in pairs if h and r]
                if ratios:
                    fig += " (%s: %s)" % (label, "; ".join(ratios))
            bars.append(("Scale: %s on %s ≥ 0.8× hot key throughput" % (name, what),
                         fig, ok))
    if exp:
        bars.append(("Scale: DBSIZE falls once the windows pass",
                     "%d → %d after %.1f s (WINDOW %d ms)" % (
                         exp["before"], exp["after"], exp["waited"], EXPIRY_WINDOW_MS),
                     exp["after"] < exp["before"]))
    return bars


def api_floor_args():
    """--loadmodule for the control module, when it has been built."""
    path = os.environ.get("RL_API_FLOOR") or os.path.join(
        vh.REPO, "target", "release", "examples", "libapi_floor.so")
    if os.path.isfile(path):
        return ["--loadmodule", os.path.abspath(path)]
    log("no %s: the FLOOR.ADMIT rows are skipped (`make bench` builds it)" % path)
    return []


def main():
    started = datetime.datetime.now()
    t0 = time.time()
    load0 = os.getloadavg()[0]
    try:
        subprocess.run([REDIS_BENCHMARK, "--version"], stdout=subprocess.DEVNULL, check=True)
    except (OSError, subprocess.CalledProcessError):
        sys.exit("redis-benchmark not found: apt-get install redis-tools "
                 "(or set REDIS_BENCHMARK)")
    only = os.environ.get("BENCH_ROWS")
    rows = [r for r in ROWS if r.id == "incr" or not only or re.search(only, r.id)]
    assert len({r.id for r in rows}) == len(rows) and all(len(r.id) == 4 for r in rows)

    with vh.Server(extra_args=api_floor_args()) as srv:
        version = srv.version()
        log("valkey-server %s on 127.0.0.1:%d (%s)" % (version, srv.port, srv.dir))
        b = Bench(srv)
        for row in rows:
            reason = b.probe(row)
            if reason:
                b.skipped[row.id] = reason
                log("  skip %s: %s" % (row.id, reason))
        if "incr" in b.skipped:
            raise RuntimeError("INCR does not work: %s" % b.skipped["incr"])
        active = [r for r in rows if r.id not in b.skipped]
        log("throughput: %d rows, %d to %d rounds within %.0f s" % (
            len(active), MIN_ROUNDS, MAX_ROUNDS, BUDGET_S))
        b.throughput(active)
        log("memory")
        mem = b.memory()
        log("expiry")
        exp = b.expiry() if "fixd" not in b.skipped else None
        log("refuse path / AOF")
        repl = b.replication({r.id: r for r in rows})
        # The leases last: their own rows, shapes and bars (bench/lease_bench.py).
        lease_lines, lease_bars = lease_bench.measure(b.c, srv.port)
        info = machine_info(srv, version)
        info["load"] = (load0, os.getloadavg()[0])

    text, misses = report(b, rows, mem, exp, repl, info, version, started,
                          time.time() - t0)
    text += "\n" + lease_bench.markdown(lease_lines, lease_bars)
    misses += [x for x in lease_bars if x[2] is False]
    if b.errors:
        text += "\n## Errors\n\n" + "\n".join("- " + e for e in b.errors) + "\n"
    print(text)
    out = os.environ.get("BENCH_OUT") or os.path.join(
        vh.RESULTS_DIR, "results-%s-valkey-%s%s.md" % (
            started.strftime("%Y-%m-%d"), version, "-quick" if QUICK else ""))
    with open(out, "w") as f:
        f.write(text)
    log("saved %s" % os.path.relpath(out, os.getcwd()))
    if b.errors:
        sys.exit(1)
    if misses and os.environ.get("BENCH_STRICT", "") not in ("", "0"):
        sys.exit(3)


if __name__ == "__main__":
    try:
        main()
    except KeyboardInterrupt:
        sys.exit(130)
