// The package against a real server, through a real Express app with
// express-rate-limit 8 and real HTTP (node's fetch), on 127.0.0.1.
//
//   VALKEY_HOST=127.0.0.1 VALKEY_PORT=6379 RL_EXPECT_BACKEND=module node test/frameworks.test.js live
//   VALKEY_PORT=<the same port, server stopped> node test/frameworks.test.js down
//   VALKEY_PORT=<a node of a cluster with the module and library> node test/frameworks.test.js cluster
//
// `live` expects a running server with the module (RL_EXPECT_BACKEND=module)
// or with only the FUNCTION library loaded (functions); `down` expects
// nothing listening on the port. Prints one `ok <check>` line per check and
// exits non-zero on the first failure.
"use strict";

const assert = require("node:assert/strict");
const crypto = require("node:crypto");
const express = require("express");
const { rateLimit } = require("express-rate-limit");
const Valkey = require("iovalkey");
const { Limiter, ValkeyStore, BackendMissingError, TimeoutError, headers } = require("..");

const HOST = process.env.VALKEY_HOST || "127.0.0.1";
const PORT = Number(process.env.VALKEY_PORT || "6379");

const ok = (what) => console.log(`ok ${what}`);

function client(options = {}) {
  const c = new Valkey({ host: HOST, port: PORT, maxRetriesPerRequest: 1, ...options });
  c.on("error", () => {});
  return c;
}

// An Express app on a loopback port with one limited route per limiter:
// resolves to { base, close }.
function serve(limiters) {
  const app = express();
  for (const [route, limiter] of Object.entries(limiters)) {
    app.get(route, limiter, (req, res) => res.json({ ok: true }));
  }
  return new Promise((resolve) => {
    const server = app.listen(0, "127.0.0.1", () => {
      resolve({
        base: `http://127.0.0.1:${server.address().port}`,
        close: () => new Promise((r) => server.close(r)),
      });
    });
  });
}

// Server time in ms.
async function timeMs(c) {
  const [s, us] = await c.call("TIME");
  return Number(s) * 1000 + Math.floor(Number(us) / 1000);
}

// express-rate-limit's draft-8 partition key for a limiter key.
function partitionKey(key) {
  const hex = crypto.createHash("sha256").update(key).digest("hex").slice(0, 12);
  return Buffer.from(hex).toString("base64");
}

// The whole seconds a response may state for an expiry at `expireAt` when
// the server answered between `t0` and `t1`.
function secondsBetween(expireAt, t0, t1) {
  return [Math.ceil((expireAt - t1) / 1000), Math.ceil((expireAt - t0) / 1000)];
}

function assertSecondsIn(value, [lo, hi], what) {
  const n = Number(value);
  assert.ok(Number.isInteger(n) && n >= lo && n <= hi, `${what}: ${value} not in [${lo}, ${hi}]`);
}

function limiterFor(c, extra = {}) {
  const { rateLimit: rateLimitOptions, ...storeOptions } = extra;
  const store = new ValkeyStore({ sendCommand: (...args) => c.call(...args), timeoutMs: 5000, ...storeOptions });
  const middleware = rateLimit({
    windowMs: 10000,
    limit: 3,
    standardHeaders: "draft-8",
    legacyHeaders: false,
    keyGenerator: (req) => req.get("x-client") || "anonymous",
    store,
    ...(rateLimitOptions || {}),
  });
  return { store, middleware };
}

async function live(expectBackend) {
  const c = client();
  await c.call("FLUSHALL");
  const key = `acme-${process.pid}`;
  const redisKey = `rl:${key}`;
  const { store, middleware } = limiterFor(c);
  const burst = limiterFor(c, { rateLimit: { limit: 20 } });
  const app = await serve({ "/api": middleware, "/burst": burst.middleware });
  try {
    const policy = `"3-in-10sec"; q=3; w=10; pk=:${partitionKey(key)}:`;
    const hit = async () => {
      const t0 = await timeMs(c);
      const res = await fetch(`${app.base}/api`, { headers: { "x-client": key } });
      const t1 = await timeMs(c);
      const expireAt = Number(await c.call("PEXPIRETIME", redisKey));
      const count = Number(await c.call("GET", redisKey));
      return { res, window: secondsBetween(expireAt, t0, t1), count, body: await res.text() };
    };
    for (let i = 1; i <= 3; i++) {
      const { res, window, count } = await hit();
      assert.equal(res.status, 200, `request ${i}`);
      assert.equal(count, i, "the server counted the request");
      assert.equal(res.headers.get("ratelimit-policy"), policy);
      const m = /^"3-in-10sec"; r=(\d+); t=(\d+)$/.exec(res.headers.get("ratelimit"));
      assert.ok(m, `RateLimit: ${res.headers.get("ratelimit")}`);
      assert.equal(Number(m[1]), 3 - count, "r is the limiter's remaining");
      assertSecondsIn(m[2], window, "t");
      assert.equal(res.headers.get("retry-after"), null);
      ok(`${expectBackend}: request ${i} admitted, RateLimit r=${m[1]} t=${m[2]}`);
    }
    {
      const { res, window, count } = await hit();
      assert.equal(res.status, 429, "4th request");
      assert.equal(count, 4, "the refused request was counted, as MemoryStore counts it");
      assert.equal(res.headers.get("ratelimit-policy"), policy);
      const m = /^"3-in-10sec"; r=0; t=(\d+)$/.exec(res.headers.get("ratelimit"));
      assert.ok(m, `RateLimit: ${res.headers.get("ratelimit")}`);
      assertSecondsIn(m[1], window, "t");
      assertSecondsIn(res.headers.get("retry-after"), window, "Retry-After");
      ok(`${expectBackend}: request 4 refused with 429, Retry-After ${res.headers.get("retry-after")}`);
    }
    const peek = await store.get(key);
    assert.equal(peek.totalHits, 4);
    ok(`${expectBackend}: store.get peeks 3 hits and the refused one`);
    await middleware.resetKey(key);
    assert.equal(await c.call("EXISTS", redisKey), 0);
    {
      const { res, count } = await hit();
      assert.equal(res.status, 200, "after resetKey");
      assert.equal(count, 1);
      assert.match(res.headers.get("ratelimit"), /^"3-in-10sec"; r=2; t=(10|9)$/);
      ok(`${expectBackend}: resetKey admits again`);
    }
    await store.decrement(key);
    assert.equal(await c.call("EXISTS", redisKey), 0, "refunded to empty: deleted");
    assert.equal(await store.get(key), undefined);
    ok(`${expectBackend}: decrement refunds`);

    // 50 in flight at once against a limit of 20.
    const statuses = await Promise.all(
      Array.from({ length: 50 }, () =>
        fetch(`${app.base}/burst`, { headers: { "x-client": "crowd" } }).then(async (r) => {
          await r.arrayBuffer();
          return r.status;
        }),
      ),
    );
    assert.equal(statuses.filter((s) => s === 200).length, 20);
    assert.equal(statuses.filter((s) => s === 429).length, 30);
    assert.equal(Number(await c.call("GET", "rl:crowd")), 50, "every hit counted, as MemoryStore counts them");
    ok(`${expectBackend}: 50 concurrent requests, exactly 20 admitted`);
  } finally {
    await app.close();
  }

  // The plain limiter.
  const limiter = new Limiter({ sendCommand: (...args) => c.call(...args), timeoutMs: 5000, prefix: "plain:" });
  assert.equal(await limiter.backend(), expectBackend);
  const policy = { limit: 2, windowMs: 5000 };
  let d = await limiter.admit("k", policy);
  assert.deepEqual({ ...d }, { admitted: true, limit: 2, remaining: 1, retryAfterMs: 0, resetAfterMs: d.resetAfterMs, shadow: false, backend: expectBackend, windowMs: 5000 });
  assert.ok(d.resetAfterMs > 4000 && d.resetAfterMs <= 5000);
  assert.ok(Object.isFrozen(d));
  await limiter.admit("k", policy);
  d = await limiter.admit("k", policy);
  assert.equal(d.admitted, false);
  assert.ok(d.retryAfterMs > 4000 && d.retryAfterMs <= 5000);
  const h = headers(d);
  assert.equal(h["RateLimit-Policy"], '"2-in-5sec";q=2;w=5');
  assert.equal(h["RateLimit"], `"2-in-5sec";r=0;t=${Math.ceil(d.retryAfterMs / 1000)}`);
  assert.equal(h["Retry-After"], String(Math.ceil(d.retryAfterMs / 1000)));
  assert.equal(headers(d, { name: "api" })["RateLimit-Policy"], '"api";q=2;w=5');
  const ttl = await limiter.ttl("k", policy);
  assert.ok(ttl > 0 && ttl <= d.retryAfterMs);
  d = await limiter.refund("k", policy);
  assert.equal(d.remaining, 1);
  d = await limiter.admit("k", { ...policy, cost: 0 });
  assert.equal(d.remaining, 1, "a peek changes nothing");
  assert.equal(await limiter.reset("k"), true);
  assert.equal(await limiter.reset("k"), false);
  d = await limiter.admit("t", { limit: 5, windowMs: 1000, algorithm: "token", burst: 2, cost: 2 });
  assert.equal(d.admitted, true);
  assert.equal(d.limit, 2);
  ok(`${expectBackend}: Limiter admit/ttl/refund/reset/headers`);

  // A server error is not "unreachable": it is thrown, never failed open.
  await c.call("SET", "plain:w", "not a counter");
  await assert.rejects(limiter.admit("w", policy), (e) => /^(ERR|WRONGTYPE) /.test(e.message));
  ok(`${expectBackend}: server errors are raised, not failed open`);

  if (expectBackend === "functions") {
    const forced = new Limiter({ sendCommand: (...args) => c.call(...args), backend: "module" });
    await assert.rejects(forced.admit("k", policy), /unknown command/);
    ok("functions: backend 'module' forced on a library-only server raises unknown command");
    await c.call("FUNCTION", "DELETE", "ratelimit");
    const c2 = client();
    const bare = new Limiter({ sendCommand: (...args) => c2.call(...args), timeoutMs: 5000, library: false });
    await assert.rejects(
      bare.admit("k", policy),
      (e) => e instanceof BackendMissingError && e.message.includes("valkey-cli -x FUNCTION LOAD REPLACE < ratelimit.lua"),
    );
    ok("functions: without the library, BackendMissingError says how to load it (library: false)");
    // The cached answer is stale now: detected again, and the library this
    // package ships loaded back.
    d = await limiter.admit("k2", policy);
    assert.equal(d.admitted, true);
    assert.equal(d.backend, "functions");
    assert.equal(await c.call("FCALL_RO", "rl_version", "0"), require("..").bundledLibrary().version);
    ok("functions: opted in, the client loads the library itself (the bundled copy, by default)");
    c2.disconnect();
  }
  c.disconnect();
}

async function down() {
  // One client that fails at once (no offline queue), one that waits for a
  // reconnect and is cut short by timeoutMs.
  const failing = client({ enableOfflineQueue: false, retryStrategy: () => 100 });
  const waiting = client({ maxRetriesPerRequest: null, retryStrategy: () => 50 });
  const cases = [
    ["open", failing, 0],
    ["closed", failing, 0],
    ["open", waiting, 300],
    ["closed", waiting, 300],
  ];
  for (const [failure, c, timeoutMs] of cases) {
    const errors = [];
    const extra = { failure, ...(timeoutMs ? { timeoutMs } : {}), onError: (e) => errors.push(e) };
    const { middleware } = limiterFor(c, extra);
    const app = await serve({ "/api": middleware });
    try {
      const started = Date.now();
      const res = await fetch(`${app.base}/api`, { headers: { "x-client": "x" } });
      await res.text();
      if (failure === "open") {
        assert.equal(res.status, 200);
        // Reported as the first hit of a fresh window.
        assert.equal(res.headers.get("ratelimit"), '"3-in-10sec"; r=2; t=10');
      } else {
        // An outage is not the client's fault: 503, not 429.
        assert.equal(res.status, 503);
        assert.equal(res.headers.get("retry-after"), "1");
      }
      assert.equal(errors.length, 1, "one report of the fall");
      assert.equal(errors[0].state, "down");
      if (timeoutMs) {
        assert.ok(errors[0].error instanceof TimeoutError, String(errors[0].error));
        assert.ok(Date.now() - started < 3000);
      }
      const limiter = new Limiter({ sendCommand: (...args) => c.call(...args), ...extra });
      const d = await limiter.admit("k", { limit: 3, windowMs: 1000 });
      assert.equal(d.admitted, failure === "open");
      assert.equal(d.backend, "unavailable");
      ok(`down: fail-${failure}${timeoutMs ? ` after a ${timeoutMs} ms timeout` : ""}: HTTP ${res.status}`);
    } finally {
      await app.close();
    }
  }
  failing.disconnect();
  waiting.disconnect();
}

// A cluster of primaries with the module and the library loaded: the store
// and the limiter through iovalkey's Cluster client, with keys on every
// shard, a META hash next to its counter by hash tag, once through the
// module and once through FCALL (backend forced to "functions").
async function cluster() {
  const c = new Valkey.Cluster([{ host: HOST, port: PORT }], {
    redisOptions: { maxRetriesPerRequest: 1 },
    clusterRetryStrategy: (times) => (times > 3 ? null : 200),
  });
  c.on("error", () => {});
  const send = (...args) => c.call(...args);
  for (const backend of ["module", "functions"]) {
    const limiter = new Limiter({ sendCommand: send, timeoutMs: 5000, backend: backend === "module" ? "auto" : "functions" });
    assert.equal(await limiter.backend(), backend);
    // {a}, {b} and {c} hash to slots owned by three different primaries.
    for (const tag of ["a", "b", "c"]) {
      const key = `${backend}:{${tag}}:k`;
      const policy = { limit: 2, windowMs: 10000 };
      const got = [];
      for (let i = 0; i < 3; i++) got.push((await limiter.admit(key, policy)).admitted);
      assert.deepEqual(got, [true, true, false], key);
      assert.equal(Number(await c.get(key)), 2);
      assert.equal(await limiter.reset(key), true);
    }
    const meta = `${backend}:{acme}:meta`;
    await c.hset(meta, "max", "1", "duration", "10000");
    const viaMeta = [];
    for (let i = 0; i < 2; i++) {
      viaMeta.push((await limiter.admit(`${backend}:{acme}:k`, { meta })).admitted);
    }
    assert.deepEqual(viaMeta, [true, false], "the META hash's max applies");
    const { middleware } = limiterFor(c, { backend: backend === "module" ? "auto" : "functions", prefix: `${backend}:{http}:` });
    const app = await serve({ "/api": middleware });
    try {
      const statuses = [];
      for (let i = 0; i < 4; i++) {
        const res = await fetch(`${app.base}/api`, { headers: { "x-client": "acme" } });
        await res.text();
        statuses.push(res.status);
      }
      assert.deepEqual(statuses, [200, 200, 200, 429]);
    } finally {
      await app.close();
    }
    ok(`cluster: ${backend}: keys on every shard, META by hash tag, Express 200 200 200 429`);
  }
  c.disconnect();
}

async function main() {
  const phase = process.argv[2];
  if (phase === "live") {
    const expect = process.env.RL_EXPECT_BACKEND;
    assert.ok(["module", "functions"].includes(expect), "RL_EXPECT_BACKEND must be module or functions");
    await live(expect);
  } else if (phase === "down") {
    await down();
  } else if (phase === "cluster") {
    await cluster();
  } else {
    throw new Error("usage: frameworks.test.js live|down|cluster");
  }
  console.log(`PASS node ${phase}`);
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
