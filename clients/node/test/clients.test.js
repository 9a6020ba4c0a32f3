// The package through every client it supports: iovalkey, ioredis,
// node-redis and @valkey/valkey-glide. Each runs the express store (over real
// HTTP) and the plain Limiter (limits, leases, headers), has its error
// replies raised and not failed open, and its outage answered within the
// deadline, with service back after a restart. On a server this program
// starts itself, with the module or with only the library (which the package
// loads itself).
//
//   VALKEY_SERVER=<valkey-server> RL_MODULE=<module .so> RL_EXPECT_BACKEND=module|functions \
//     node test/clients.test.js
"use strict";

const assert = require("node:assert/strict");
const { rateLimit } = require("express-rate-limit");
const { ValkeyStore, Limiter, headers } = require("..");
const { ok, sleep, serve, get, loopLag, OwnServer, runMain, expectedBackend } = require("./support");

const BOUND_MS = 250 + 100;
// The deadline of the checks that are not about outages: a busy machine gets time.
const LIVE_MS = 5000;
// The whole HTTP exchange, in the same process as the app and its client.
// Both bounds also allow for an event loop held up by a busy machine (measured).
const HTTP_BOUND_MS = BOUND_MS + 400;

// Each client: how to connect, how to send one command, how to close.
const CLIENTS = {
  async iovalkey(port) {
    const Valkey = require("iovalkey");
    const c = new Valkey({ port, host: "127.0.0.1", maxRetriesPerRequest: 1, retryStrategy: () => 50 });
    c.on("error", () => {});
    return { send: (...args) => c.call(...args), close: () => c.disconnect() };
  },
  async ioredis(port) {
    const Redis = require("ioredis");
    const c = new Redis({ port, host: "127.0.0.1", maxRetriesPerRequest: 1, retryStrategy: () => 50 });
    c.on("error", () => {});
    return { send: (...args) => c.call(...args), close: () => c.disconnect() };
  },
  async "node-redis"(port) {
    const { createClient } = require("redis");
    const c = createClient({ socket: { host: "127.0.0.1", port, reconnectStrategy: () => 50 } });
    c.on("error", () => {});
    await c.connect();
    return { send: (...args) => c.sendCommand(args), close: () => c.destroy() };
  },
  async "valkey-glide"(port) {
    const { GlideClient, Logger } = require("@valkey/valkey-glide");
    Logger.init("off");
    const c = await GlideClient.createClient({ addresses: [{ host: "127.0.0.1", port }], requestTimeout: 200 });
    return { send: (...args) => c.customCommand(args), close: () => c.close() };
  },
};

async function withClient(name, server, expect) {
  const { send, close } = await CLIENTS[name](server.port);
  try {
    // The store, through Express.
    const events = [];
    const store = new ValkeyStore({ sendCommand: send, prefix: `${name}:`, timeoutMs: LIVE_MS });
    const middleware = rateLimit({ windowMs: 10000, limit: 2, standardHeaders: "draft-8", legacyHeaders: false, keyGenerator: () => "k", store });
    const sliding = rateLimit({
      windowMs: 10000,
      limit: 2,
      skipFailedRequests: true,
      keyGenerator: () => "k",
      store: new ValkeyStore({ sendCommand: send, prefix: `${name}:s:`, timeoutMs: LIVE_MS, algorithm: "sliding" }),
    });
    // /down: the limiter of the outage check, set in place when it starts.
    const limited = { current: null, set(m) { this.current = m; } };
    const app = await serve({ "/api": middleware, "/sliding": sliding, "/down": (req, res, next) => limited.current(req, res, next) });
    try {
      const seen = [];
      for (let i = 0; i < 3; i++) seen.push((await get(`${app.base}/api`)).status);
      assert.deepEqual(seen, [200, 200, 429]);
      assert.equal((await store.get("k")).totalHits, 3);
      await middleware.resetKey("k");
      assert.equal(await store.get("k"), undefined);
      const slid = [];
      for (let i = 0; i < 4; i++) slid.push((await get(`${app.base}/sliding`)).status);
      assert.deepEqual(slid, [200, 200, 429, 429]);
      assert.equal(await store.limiter.backend(), expect);
      ok(`${expect} ${name}: ValkeyStore over HTTP: 200 200 429, get, resetKey; sliding 200 200 429 429`);

      // The plain limiter.
      const limiter = new Limiter({ sendCommand: send, prefix: `${name}:plain:`, timeoutMs: LIVE_MS, limit: 2, windowMs: 5000 });
      let d = await limiter.admit("k");
      assert.equal(d.admitted, true);
      assert.equal(d.remaining, 1);
      assert.equal(d.backend, expect);
      await limiter.admit("k");
      d = await limiter.admit("k");
      assert.equal(d.admitted, false);
      assert.ok(d.retryAfterMs > 0 && d.retryAfterMs <= 5000);
      assert.equal(headers(d)["RateLimit-Policy"], '"2-in-5sec";q=2;w=5');
      assert.ok((await limiter.ttl("k")) > 0);
      assert.equal((await limiter.refund("k")).remaining, 1);
      assert.equal(await limiter.reset("k"), true);
      const lease = await limiter.acquire("jobs", { limit: 1, ttlMs: 5000, id: "job-1" });
      assert.equal(lease.acquired, true);
      assert.equal(lease.leaseId, "job-1");
      assert.equal((await limiter.acquire("jobs", { limit: 1, ttlMs: 5000 })).acquired, false);
      assert.equal(await limiter.inFlight("jobs"), 1);
      assert.equal(await limiter.extend("jobs", "job-1", 5000), true);
      assert.equal(await limiter.release("jobs", "job-1"), true);
      assert.equal(await limiter.withLease("jobs", { limit: 1, ttlMs: 3000 }, (held) => held.lease.inFlight), 1);
      // An error reply is raised, not taken for an outage.
      await send("SET", `${name}:plain:w`, "not a counter");
      await assert.rejects(limiter.admit("w"), (e) => /WRONGTYPE|ERR|ResponseError/.test(e.message));
      ok(`${expect} ${name}: Limiter admit/refund/ttl/reset/headers, leases, error replies raised`);

      // Down: answered by the failure policy within the deadline, then back.
      // With the default deadline, 250 ms.
      const downStore = new ValkeyStore({ sendCommand: send, prefix: `${name}:d:`, onError: (e) => events.push(e.state) });
      const downLimiter = new Limiter({ sendCommand: send, prefix: `${name}:plain:`, limit: 2, windowMs: 5000 });
      limited.set(rateLimit({ windowMs: 10000, limit: 2, keyGenerator: () => "k", store: downStore }));
      await server.stop();
      let slowest = 0;
      const lag = loopLag();
      for (let i = 0; i < 5; i++) {
        lag.reset();
        const res = await get(`${app.base}/down`);
        assert.equal(res.status, 200, "fail-open");
        assert.ok(res.ms <= HTTP_BOUND_MS + lag.maxMs(), `${name}: a request took ${res.ms.toFixed(0)} ms while Valkey was down`);
        lag.reset();
        const started = performance.now();
        assert.equal((await downLimiter.admit("down")).backend, "unavailable");
        const waited = performance.now() - started;
        slowest = Math.max(slowest, waited);
        assert.ok(waited <= BOUND_MS + lag.maxMs(), `${name}: Limiter.admit waited ${waited.toFixed(0)} ms while Valkey was down`);
      }
      lag.stop();
      await server.start();
      const back = Date.now() + 15000;
      while ((await downLimiter.admit("back")).backend === "unavailable") {
        assert.ok(Date.now() < back, `${name}: no service 15 s after the restart`);
        await sleep(50);
      }
      while (!events.includes("up")) {
        assert.ok(Date.now() < back, `${name}: the store saw no recovery`);
        await get(`${app.base}/down`);
        await sleep(50);
      }
      assert.deepEqual(events, ["down", "up"]);
      ok(`${expect} ${name}: down: fail-open within ${BOUND_MS} ms (slowest wait ${slowest.toFixed(0)} ms), back after a restart`);
    } finally {
      await app.close();
    }
  } finally {
    await close();
  }
}

runMain("clients", async () => {
  const expect = expectedBackend();
  const only = process.argv[2];
  for (const name of Object.keys(CLIENTS)) {
    if (only && only !== name) continue;
    const server = await new OwnServer({ module: expect === "module" }).start();
    try {
      await withClient(name, server, expect);
    } finally {
      await server.dispose();
    }
  }
});
