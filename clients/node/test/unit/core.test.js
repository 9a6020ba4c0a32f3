// Unit tests of the pure core (lib/core.js): no server, no network.
//   node --test test/unit/
"use strict";

const test = require("node:test");
const assert = require("node:assert/strict");
const core = require("../../lib/core");

const decision = (fields) => ({
  admitted: true,
  limit: 3,
  remaining: 2,
  retryAfterMs: 0,
  resetAfterMs: 10000,
  backend: "module",
  ...fields,
});

test("options break their rule with one message shape: <option> must be <rule> (got <value>)", () => {
  const cases = [
    [() => core.checkPolicy({ limit: 3, windowMs: -5 }), "windowMs must be a safe integer >= 1 (got -5)"],
    [() => core.checkPolicy({ limit: "3", windowMs: 1000 }), 'limit must be a safe integer >= 0 (got "3")'],
    [() => core.checkPolicy({ limit: 2 ** 53, windowMs: 1000 }), "limit must be a safe integer >= 0 (got 9007199254740992)"],
    [() => core.checkPolicy({ limit: 1, windowMs: 1, cost: 2 ** 63 }), "cost must be a safe integer >= 0 (got 9223372036854775808)"],
    [() => core.checkPolicy({ limit: 1, windowMs: 1, name: "café" }), 'name must be an ASCII string without " or \\ (got "café")'],
    [() => core.checkPolicy({ limit: 1, windowMs: 1, algorithm: "cell" }), 'algorithm must be one of fixed, sliding, token, gcra, leaky (got "cell")'],
    [() => core.checkPolicy({ limit: 1.5, windowMs: 1 }), "limit must be a safe integer >= 0 (got 1.5)"],
    [() => core.checkPolicy({ limit: 1, windowMs: 1, burst: -1 }), "burst must be a safe integer >= 0 (got -1)"],
    [() => core.checkPolicy({ limit: 1, windowMs: 1, meta: 7 }), "meta must be a string (got 7)"],
    [() => core.valueOrFunction("limit", "3", core.SAFE_INTEGER(0)), 'limit must be a safe integer >= 0, or a function of the request (got "3")'],
  ];
  for (const [call, message] of cases) {
    assert.throws(call, (e) => e instanceof core.ConfigError && e instanceof TypeError && e.message === message, message);
  }
});

test("a policy needs a limit and, unless unlimited, a window; a META hash may give both", () => {
  assert.throws(() => core.checkPolicy({}), { message: "limit must be a safe integer >= 0, unless meta is given (got undefined)" });
  assert.throws(() => core.checkPolicy({ limit: 5 }), { message: "windowMs must be a safe integer >= 1, unless meta or calendar is given (got undefined)" });
  assert.deepEqual(core.checkPolicy({ limit: 0 }), { limit: 0 });
  assert.deepEqual(core.checkPolicy({ meta: "m" }), { meta: "m" });
  assert.deepEqual(core.checkPolicy({}, { needsRate: false }), {});
  assert.deepEqual(core.checkPolicy({ limit: 5, windowMs: 1000, algorithm: "token", burst: 2, cost: 0, name: "api" }), {
    limit: 5,
    windowMs: 1000,
    algorithm: "token",
    burst: 2,
    cost: 0,
    name: "api",
  });
  assert.deepEqual(core.checkPolicy({ limit: 5, windowMs: 1000, algorithm: null, burst: undefined }), { limit: 5, windowMs: 1000 });
});

test("a function of the request passes where one is allowed", () => {
  const f = () => 1;
  assert.equal(core.valueOrFunction("limit", f, core.SAFE_INTEGER(0)), f);
  assert.equal(core.valueOrFunction("meta", "m", core.KEY), "m");
});

test("values in messages: strings quoted, large integers exact", () => {
  assert.equal(core.show("x"), '"x"');
  assert.equal(core.show(2 ** 64), "18446744073709551616");
  assert.equal(core.show(10n), "10n");
  assert.equal(core.show(undefined), "undefined");
  assert.equal(core.show(() => 1), "a function");
  assert.equal(core.show({}), "an object");
});

test("unknown options are named", () => {
  assert.equal(core.ConfigError.unknown("windowMS", "Limiter").message, "windowMS is not an option of Limiter");
});

test("policy options in the order both backends take them", () => {
  assert.deepEqual(core.policyArgs({ algorithm: "gcra", limit: 10, windowMs: 1000, burst: 3, meta: "m", cost: 2 }), [
    "ALGO", "gcra", "LIMIT", "10", "WINDOW", "1000", "BURST", "3",
  ]);
  assert.deepEqual(core.policyArgs({}), []);
});

test("the words of a call on each backend: META an option of the module, a key of the library", () => {
  const args = ["LIMIT", "1", "WINDOW", "10"];
  assert.deepEqual(core.callWords("module", core.CALLS.admit, ["k"], args), ["RL.ADMIT", "k", ...args]);
  assert.deepEqual(core.callWords("module", core.CALLS.admit, ["k", "m"], args), ["RL.ADMIT", "k", ...args, "META", "m"]);
  assert.deepEqual(core.callWords("functions", core.CALLS.admit, ["k", "m"], args), ["FCALL", "rl_admit", "2", "k", "m", ...args]);
  assert.deepEqual(core.callWords("functions", core.CALLS.ttl, ["k"], []), ["FCALL_RO", "rl_ttl", "1", "k"]);
  assert.deepEqual(core.callWords("functions", core.CALLS.inflight, ["k"], []), ["FCALL_RO", "rl_inflight", "1", "k"]);
  assert.deepEqual(core.callWords("module", core.CALLS.release, ["k"], ["id"]), ["RL.RELEASE", "k", "id"]);
});

test("RL.ADMIT replies from every client shape: RESP2 array, RESP3 Map, plain object, strings, bigints", () => {
  const want = { admitted: true, limit: 5, remaining: 4, retryAfterMs: 0, resetAfterMs: 999, shadow: false, backend: "module" };
  const fields = { admitted: 1, limit: 5, remaining: 4, retry_after_ms: 0, reset_after_ms: 999 };
  assert.deepEqual({ ...core.parseDecision([1, 5, 4, 0, 999], "module") }, want);
  assert.deepEqual({ ...core.parseDecision(["1", "5", "4", "0", "999"], "module") }, want);
  assert.deepEqual({ ...core.parseDecision([1n, 5n, 4n, 0n, 999n], "module") }, want);
  assert.deepEqual({ ...core.parseDecision(new Map(Object.entries(fields)), "module") }, want);
  assert.deepEqual({ ...core.parseDecision(fields, "module") }, want);
  assert.deepEqual({ ...core.parseDecision(Object.entries(fields).flat(), "module") }, want);
  const records = Object.entries(fields).map(([key, value]) => ({ key, value }));
  assert.deepEqual({ ...core.parseDecision(records, "module") }, want);
  const d = core.parseDecision([0, 5, 0, 1500, 2000], "functions", { windowMs: 60000, name: "api", limit: 5 });
  assert.ok(Object.isFrozen(d));
  assert.equal(d.windowMs, 60000);
  assert.equal(d.name, "api");
  assert.equal(d.admitted, false);
  assert.throws(() => core.parseDecision([1, 2, 3], "module"), /unexpected RL.ADMIT reply/);
  assert.throws(() => core.parseDecision("OK", "module"), /unexpected RL.ADMIT reply/);
  assert.throws(() => core.parseDecision([1, 5, 4, 0, 2 ** 60], "module"), /expected an integer/);
  assert.throws(() => core.parseDecision([1, 5, null, 0, 1], "module"), /expected an integer/);
  // A reply that cannot be read is raised, never taken for an outage.
  assert.throws(() => core.parseDecision([1, 2, 3], "module"), (e) => core.errorKind(e) === "reply");
});

test("issue 27's options: checked, refused in the combinations the server refuses, and sent as both backends take them", () => {
  const cases = [
    [{ limit: 1, windowMs: 1, shadow: "yes" }, 'shadow must be true or false (got "yes")'],
    [{ limit: 1, windowMs: 1, penalty: 0 }, "penalty must be a safe integer >= 1 (got 0)"],
    [{ limit: 1, windowMs: 1, penalty: -5 }, "penalty must be a safe integer >= 1 (got -5)"],
    [{ limit: 1, windowMs: 1, penalty: "30s" }, 'penalty must be a safe integer >= 1 (got "30s")'],
    [{ limit: 1, windowMs: 1, penalty: 100, escalate: 0 }, "escalate must be a safe integer >= 1 (got 0)"],
    [{ limit: 1, windowMs: 1, escalate: 500 }, "escalate must be left out without penalty (or a META hash whose penalty field it goes with) (got 500)"],
    [{ limit: 1, windowMs: 1, penalty: 100, escalate: 99 }, "escalate must be at least penalty (100) (got 99)"],
    [{ limit: 1, windowMs: 1, align: 1 }, "align must be true or false (got 1)"],
    [{ limit: 1, calendar: "fortnight" }, 'calendar must be one of day, week, month, year (got "fortnight")'],
    [{ limit: 1, calendar: "day", tz: "Europe Berlin" }, 'tz must be a fixed offset from UTC such as "+05:30" or "-08:00", or an IANA zone name such as "Europe/Berlin" (got "Europe Berlin")'],
    [{ limit: 1, calendar: "day", tz: "/Berlin" }, 'tz must be a fixed offset from UTC such as "+05:30" or "-08:00", or an IANA zone name such as "Europe/Berlin" (got "/Berlin")'],
    [{ limit: 1, calendar: "day", tz: "+24:00" }, 'tz must be a fixed offset from UTC such as "+05:30" or "-08:00", or an IANA zone name such as "Europe/Berlin" (got "+24:00")'],
    [{ limit: 1, calendar: "day", tz: "5:30" }, 'tz must be a fixed offset from UTC such as "+05:30" or "-08:00", or an IANA zone name such as "Europe/Berlin" (got "5:30")'],
    [{ limit: 1, windowMs: 1000, tz: "+01:00" }, 'tz must be left out without calendar (or a META hash whose calendar field it goes with) (got "+01:00")'],
    [{ limit: 1, windowMs: 1000, calendar: "day" }, "windowMs must be left out with calendar (the period is the window) (got 1000)"],
    [{ limit: 1, calendar: "day", align: true }, "align must be left out with calendar (calendar periods are aligned) (got true)"],
    [{ limit: 1, windowMs: 1000, algorithm: "gcra", align: true }, 'align must be left out with algorithm "gcra" (it applies only to fixed and sliding) (got true)'],
    [{ limit: 1, algorithm: "token", calendar: "month" }, 'calendar must be left out with algorithm "token" (it applies only to fixed and sliding) (got "month")'],
  ];
  for (const [policy, message] of cases) {
    assert.throws(() => core.checkPolicy(policy), (e) => e instanceof core.ConfigError && e.message === message, message);
  }
  const all = core.checkPolicy({ limit: 5, shadow: true, penalty: 30000, calendar: "week", tz: "-08:00" });
  assert.deepEqual(core.policyArgs(all), ["LIMIT", "5", "SHADOW", "PENALTY", "30000", "CALENDAR", "week", "TZ", "-08:00"]);
  const ladder = core.checkPolicy({ limit: 1, windowMs: 50, penalty: 200, escalate: 700 });
  assert.deepEqual(core.policyArgs(ladder), ["LIMIT", "1", "WINDOW", "50", "PENALTY", "200", "ESCALATE", "700"]);
  // The penalty may come from the META hash.
  assert.deepEqual(core.policyArgs(core.checkPolicy({ meta: "plan", escalate: 700 })), ["ESCALATE", "700"]);
  const aligned = core.checkPolicy({ limit: 5, windowMs: 3600000, algorithm: "sliding", align: true, shadow: false });
  assert.deepEqual(core.policyArgs(aligned), ["ALGO", "sliding", "LIMIT", "5", "WINDOW", "3600000", "ALIGN"]);
  // The sliding window over calendar periods.
  const slidingMonth = core.checkPolicy({ limit: 5, algorithm: "sliding", calendar: "month", tz: "+05:30" });
  assert.deepEqual(core.policyArgs(slidingMonth), ["ALGO", "sliding", "LIMIT", "5", "CALENDAR", "month", "TZ", "+05:30"]);
  // With a META hash, TZ may go with the hash's calendar field.
  assert.deepEqual(core.policyArgs(core.checkPolicy({ meta: "plan", tz: "+05:30" })), ["TZ", "+05:30"]);
  // Zone names go to the server as given (it knows which exist).
  for (const name of ["Europe/Berlin", "America/Argentina/Buenos_Aires", "Etc/GMT+8", "UTC"]) {
    assert.deepEqual(core.policyArgs(core.checkPolicy({ limit: 1, calendar: "day", tz: name })).slice(-2), ["TZ", name]);
  }
  assert.deepEqual(core.callWords("functions", core.CALLS.admit, ["k"], core.policyArgs(all)).slice(0, 5), ["FCALL", "rl_admit", "1", "k", "LIMIT"]);
});

test("a shadow refusal: admitted, with the would-be wait; told by the map's shadow field, else by retry_after_ms", () => {
  // RESP2: admitted with retry_after_ms > 0 (or -1) is a shadow refusal...
  const d = core.parseDecision([1, 3, 0, 5000, 5000], "module", { algorithm: "fixed" });
  assert.equal(d.admitted, true);
  assert.equal(d.shadow, true);
  assert.equal(core.parseDecision([1, 3, 0, -1, 0], "module").shadow, true);
  assert.equal(core.parseDecision([1, 3, 2, 0, 5000], "module").shadow, false);
  assert.equal(core.parseDecision([0, 3, 0, 5000, 5000], "module").shadow, false);
  // ...but for leaky, where an admission carries its delay.
  assert.equal(core.parseDecision([1, 3, 1, 250, 500], "module", { algorithm: "leaky" }).shadow, false);
  // RESP3, every shape: the `shadow` field, present on a shadow refusal only.
  const fields = { admitted: 1, limit: 3, remaining: 0, retry_after_ms: 250, reset_after_ms: 500, shadow: 1 };
  for (const reply of [
    new Map(Object.entries(fields)),
    fields,
    Object.entries(fields).flat(),
    Object.entries(fields).map(([key, value]) => ({ key, value })),
  ]) {
    const s = core.parseDecision(reply, "module", { algorithm: "leaky" });
    assert.equal(s.shadow, true);
    assert.equal(s.retryAfterMs, 250);
  }
  const delay = { admitted: 1, limit: 3, remaining: 1, retry_after_ms: 250, reset_after_ms: 500 };
  assert.equal(core.parseDecision(new Map(Object.entries(delay)), "module").shadow, false);
  assert.equal(core.parseDecision(Object.entries(delay).flat(), "module").shadow, false);
  // A shadow refusal is admitted: no Retry-After.
  assert.equal(core.headers(d)["Retry-After"], undefined);
});

test("RL.ACQUIRE replies: the lease id, or null when refused", () => {
  assert.deepEqual({ ...core.parseLease([1, 3, 1, 0, "job-1"], "module") }, {
    acquired: true, limit: 3, inFlight: 1, retryAfterMs: 0, leaseId: "job-1", shadow: false, backend: "module",
  });
  assert.equal(core.parseLease([0, 3, 3, 100, null], "functions").leaseId, null);
  assert.equal(core.parseLease(new Map([["acquired", 1], ["limit", 0], ["in_flight", 0], ["retry_after_ms", 0], ["lease_id", "x"]]), "module").leaseId, "x");
});

test("RL.ACQUIRE shadow refusals: a map's shadow field, or acquired 1 with a wait", () => {
  const array = core.parseLease([1, 2, 2, 900, "job-3"], "functions");
  assert.deepEqual([array.acquired, array.shadow, array.leaseId, array.retryAfterMs], [true, true, "job-3", 900]);
  assert.equal(core.parseLease([0, 2, 2, 900, null], "module").shadow, false);
  assert.equal(core.parseLease([1, 2, 1, 0, "a"], "module").shadow, false);
  const fields = [["acquired", 1], ["limit", 2], ["in_flight", 2], ["retry_after_ms", 900], ["lease_id", "x"]];
  assert.equal(core.parseLease(new Map([...fields, ["shadow", 1]]), "module").shadow, true);
  // FORMAT map through RESP2: a flat list, the library's order.
  assert.equal(core.parseLease(["shadow", 1, ...fields.flat()], "functions").shadow, true);
  assert.equal(core.parseLease(new Map(fields), "module").shadow, false);
});

test("headers() needs no arguments: name and window come from the decision", () => {
  const h = core.headers(decision({ windowMs: 10000 }));
  assert.deepEqual(h, { "RateLimit-Policy": '"3-in-10sec";q=3;w=10', RateLimit: '"3-in-10sec";r=2;t=10' });
  assert.deepEqual(core.headers(decision({ windowMs: 10000, name: "api" })), {
    "RateLimit-Policy": '"api";q=3;w=10',
    RateLimit: '"api";r=2;t=10',
  });
  // Given here, they win.
  assert.equal(core.headers(decision({ windowMs: 10000 }), { windowMs: 1500, name: "x" })["RateLimit-Policy"], '"x";q=3;w=2');
  // No window known (a META hash's): no w, the limit as the name.
  assert.deepEqual(core.headers(decision({})), { "RateLimit-Policy": '"3";q=3', RateLimit: '"3";r=2;t=10' });
});

test("headers(): t and Retry-After are whole seconds rounded up; refused, t is the retry", () => {
  const refused = decision({ admitted: false, remaining: 0, retryAfterMs: 4001, resetAfterMs: 9000, windowMs: 10000 });
  assert.deepEqual(core.headers(refused), {
    "RateLimit-Policy": '"3-in-10sec";q=3;w=10',
    RateLimit: '"3-in-10sec";r=0;t=5',
    "Retry-After": "5",
  });
  // A cost that can never pass: no Retry-After, t is the reset.
  const never = decision({ admitted: false, remaining: 0, retryAfterMs: -1, resetAfterMs: 3000, windowMs: 10000 });
  assert.deepEqual(core.headers(never), { "RateLimit-Policy": '"3-in-10sec";q=3;w=10', RateLimit: '"3-in-10sec";r=0;t=3' });
  // A refusal due in under a second still asks for one.
  assert.equal(core.headers(decision({ admitted: false, remaining: 0, retryAfterMs: 1 }))["Retry-After"], "1");
  // Windows that are not whole seconds name the rounded-up second.
  assert.equal(core.headers(decision({ windowMs: 1500 }))["RateLimit-Policy"], '"3-in-2sec";q=3;w=2');
});

test("headers(): a bucket's r is what would pass now, up to its burst, and t the time until it is full", () => {
  // token, LIMIT 3 per 10 s, BURST 5: the server's reply after the first request.
  const d = decision({ limit: 5, remaining: 4, resetAfterMs: 3334, windowMs: 10000 });
  assert.deepEqual(core.headers(d), { "RateLimit-Policy": '"5-in-10sec";q=5;w=10', RateLimit: '"5-in-10sec";r=4;t=4' });
});

test("headers(): nothing advertised when unlimited or when the failure policy answered", () => {
  assert.deepEqual(core.headers(decision({ limit: 0, remaining: 0 })), {});
  const open = core.unavailableDecision({ limit: 3, windowMs: 1000 }, true, new Error("down"));
  assert.deepEqual(core.headers(open), {});
  const closed = core.unavailableDecision({ limit: 3, windowMs: 1000 }, false, new Error("down"));
  assert.deepEqual(core.headers(closed), { "Retry-After": "1" });
  assert.equal(closed.backend, "unavailable");
  assert.equal(closed.admitted, false);
});

test("headers() checks what it is given", () => {
  assert.throws(() => core.headers(decision({}), { windowMs: 0 }), { message: "windowMs must be a safe integer >= 1 (got 0)" });
  assert.throws(() => core.headers(decision({}), { name: 'a"b' }), { message: 'name must be an ASCII string without " or \\ (got "a\\"b")' });
});

test("a grant WAIT did not confirm reads as a refusal", () => {
  const d = core.unconfirmedDecision(core.parseDecision([1, 3, 2, 0, 1000], "module"), 0);
  assert.equal(d.admitted, false);
  assert.equal(d.remaining, 0);
  assert.equal(d.unconfirmed, 0);
  assert.equal(d.retryAfterMs, core.UNAVAILABLE_RETRY_MS);
});

test("errors: replies are raised, outages get the failure policy, whatever the client", () => {
  const cases = [
    [Object.assign(new Error("ERR wrong number of arguments"), { name: "ReplyError" }), "reply"],
    [new Error("WRONGTYPE Operation against a key holding the wrong kind of value"), "reply"],
    [new Error("NOPERM this user has no permissions to run the 'fcall' command"), "reply"],
    [new Error("LOADING Valkey is loading the dataset in memory"), "unreachable"],
    [new Error("MASTERDOWN Link with MASTER is down"), "unreachable"],
    [new Error("BUSY Valkey is busy running a script"), "unreachable"],
    [new Error("Connection is closed."), "unreachable"],
    [new Error("connect ECONNREFUSED 127.0.0.1:6379"), "unreachable"],
    [Object.assign(new Error("The client is closed"), { name: "ClientClosedError" }), "unreachable"],
    [new Error("An error was signalled by the server: - ResponseError: unknown command 'RL.ADMIT'"), "reply"],
    [new Error("An error was signalled by the server: - BusyLoadingError: loading"), "unreachable"],
    [new TypeError("client.call is not a function"), "reply"],
    [Object.assign(new Error("x"), { unreachable: true }), "unreachable"],
    [Object.assign(new Error("x"), { unreachable: false }), "reply"],
  ];
  for (const [e, kind] of cases) assert.equal(core.errorKind(e), kind, e.message);
  assert.ok(core.isUnknownCommand(new Error("ERR unknown command 'RL.LIMIT'")));
  assert.ok(core.isFunctionMissing(new Error("An error was signalled by the server: - ResponseError: Function not found")));
  assert.ok(core.isLibraryExists(new Error("ERR Library 'ratelimit' already exists")));
  assert.ok(core.isNoPermission(new Error("NOPERM User x has no permissions to run the 'function|load' command")));
});

test("library versions: read from the source; none is older than any", () => {
  assert.equal(core.libraryVersion("#!lua name=ratelimit\nlocal VERSION = '1.22.3'\n"), "1.22.3");
  assert.equal(core.libraryVersion("#!lua name=ratelimit\n"), null);
  assert.equal(core.compareVersions("0.1.0", "0.1.0"), 0);
  assert.equal(core.compareVersions("0.1.0", "0.2.0"), -1);
  assert.equal(core.compareVersions("0.10.0", "0.9.0"), 1);
  assert.equal(core.compareVersions("1.0.0", "0.99.99"), 1);
  assert.equal(core.compareVersions(null, "0.0.1"), -1);
  assert.equal(core.compareVersions("0.0.1", null), 1);
});

test("the bundled library states the version the package reads", () => {
  const { bundledLibrary } = require("../../lib/library");
  const lib = bundledLibrary();
  assert.ok(lib, "the library is found (the packed copy, or the repository's)");
  assert.match(lib.source, /^#!lua name=ratelimit\n/);
  assert.match(lib.version, /^\d+\.\d+\.\d+$/);
});
