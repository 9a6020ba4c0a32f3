// Outages: an Express app with ValkeyStore (and a plain Limiter) on an
// iovalkey client with its default settings (offline queue on, 20 retries),
// through a server this program starts itself, then kills (stopped), then
// replaces with a listener that accepts connections and never answers
// (black-holed), then starts again, empty (restarted: no persistence, so on
// a library-only server the library is gone too).
//
//   VALKEY_SERVER=<valkey-server> RL_MODULE=<module .so> RL_EXPECT_BACKEND=module|functions \
//     node test/outage.test.js open|closed
//
// No request may wait on Valkey longer than the deadline (250 ms by default)
// plus 100 ms (the store's increment, timed; the whole HTTP exchange gets
// another 400 ms; both also get whatever the event loop was held up by a
// machine busy with other tests, measured), fail-open with 200 and
// fail-closed with 503 and Retry-After;
// service must come back without restarting the app, the library reloaded
// from the package's copy; and onError must hear of the fall and of the
// recovery once each, not once per request.
"use strict";

const assert = require("node:assert/strict");
const net = require("node:net");
const { rateLimit } = require("express-rate-limit");
const Valkey = require("iovalkey");
const { ValkeyStore, Limiter, bundledLibrary } = require("..");
const { ok, sleep, client, get, serve, loopLag, OwnServer, runMain, expectedBackend } = require("./support");

const DEADLINE_MS = 250;
const BOUND_MS = DEADLINE_MS + 100;
// The whole HTTP exchange, in the same process as the app and its client.
const HTTP_BOUND_MS = BOUND_MS + 400;

// The store, with the time each increment waited recorded by key.
function timed(store, waits) {
  return new Proxy(store, {
    get(target, prop) {
      const value = Reflect.get(target, prop);
      if (prop !== "increment") return value;
      return async (key) => {
        const started = performance.now();
        try {
          return await value.call(target, key);
        } finally {
          waits.set(key, performance.now() - started);
        }
      };
    },
  });
}

// A listener on `port` that takes every connection and never answers.
function blackHole(port) {
  const sockets = new Set();
  const server = net.createServer((socket) => {
    sockets.add(socket);
    socket.on("error", () => {});
  });
  return new Promise((resolve, reject) => {
    server.once("error", reject);
    server.listen(port, "127.0.0.1", () =>
      resolve({
        accepted: () => sockets.size,
        close: () =>
          new Promise((r) => {
            for (const s of sockets) s.destroy();
            server.close(r);
          }),
      }),
    );
  });
}

async function outage(expect, failure) {
  const server = await new OwnServer({ module: expect === "module" }).start();
  const port = server.port;
  // The README's client: iovalkey's defaults, only its error events silenced.
  const valkey = new Valkey({ host: "127.0.0.1", port });
  valkey.on("error", () => {});
  const send = (...args) => valkey.call(...args);
  const events = [];
  const waits = new Map();
  let nextClient = 0;
  const store = timed(new ValkeyStore({ sendCommand: send, failure, onError: (e) => events.push(e) }), waits);
  const limiterEvents = [];
  const limiter = new Limiter({ sendCommand: send, failure, onError: (e) => limiterEvents.push(e) });
  const middleware = rateLimit({
    windowMs: 60_000,
    limit: 1000,
    standardHeaders: "draft-8",
    legacyHeaders: false,
    keyGenerator: (req) => req.get("x-client"),
    store,
  });
  const app = await serve({ "/api": middleware });
  const expectStatus = failure === "open" ? 200 : 503;
  const lag = loopLag();
  let served = 0;
  let maxLate = 0;
  // One request, answered within the bound, with what the failure policy says.
  const during = async (what, i) => {
    const key = `c${nextClient++}`;
    const res = await get(`${app.base}/api`, { "x-client": key });
    const waited = waits.get(key);
    const late = lag.maxMs();
    assert.ok(waited !== undefined, `${what}: request ${i} went through the store`);
    assert.ok(
      waited <= BOUND_MS + late,
      `${what}: request ${i} waited ${waited.toFixed(0)} ms on the store (bound ${BOUND_MS}, the loop ran up to ${late.toFixed(0)} ms late)`,
    );
    assert.ok(res.ms <= HTTP_BOUND_MS + late, `${what}: request ${i} took ${res.ms.toFixed(0)} ms over HTTP (bound ${HTTP_BOUND_MS} + ${late.toFixed(0)})`);
    maxLate = Math.max(maxLate, late);
    lag.reset();
    assert.equal(res.status, expectStatus, `${what}: request ${i}`);
    if (failure === "closed") assert.equal(res.headers.get("retry-after"), "1", `${what}: Retry-After`);
    served++;
    return waited;
  };
  // A plain Limiter call, answered by the failure policy within the bound.
  const plain = async (what) => {
    lag.reset();
    const started = performance.now();
    const d = await limiter.admit("plain", { limit: 5, windowMs: 1000 });
    const ms = performance.now() - started;
    assert.ok(ms <= BOUND_MS + lag.maxMs(), `${what}: Limiter.admit took ${ms.toFixed(0)} ms`);
    assert.equal(d.backend, "unavailable", what);
    assert.equal(d.admitted, failure === "open", what);
    const lease = performance.now();
    await assert.rejects(limiter.acquire("jobs", { limit: 1, ttlMs: 1000 }), what);
    assert.ok(performance.now() - lease <= BOUND_MS + lag.maxMs(), `${what}: acquire took ${(performance.now() - lease).toFixed(0)} ms`);
  };
  try {
    // Up: counted by Valkey.
    for (let i = 0; i < 3; i++) assert.equal((await get(`${app.base}/api`, { "x-client": "c0" })).status, 200);
    assert.equal((await limiter.admit("plain", { limit: 5, windowMs: 1000 })).admitted, true);
    const c = client({}, port);
    assert.equal(Number(await c.get("rl:c0")), 3);
    c.disconnect();

    // Stopped.
    await server.stop();
    lag.reset();
    let slowest = 0;
    for (let i = 0; i < 8; i++) slowest = Math.max(slowest, await during("stopped", i));
    const burst = await Promise.all(Array.from({ length: 20 }, (_, i) => during("stopped, 20 at once", i)));
    slowest = Math.max(slowest, ...burst);
    await plain("stopped");
    ok(`${expect} fail-${failure}: stopped: ${served} requests, each waited at most ${BOUND_MS} ms plus the loop's lateness (slowest ${slowest.toFixed(0)} ms; loop late by up to ${maxLate.toFixed(0)} ms), HTTP ${expectStatus}`);
    maxLate = 0;

    // Black-holed: connections accepted, never answered.
    const hole = await blackHole(port);
    lag.reset();
    served = 0;
    slowest = 0;
    const until = Date.now() + 1500;
    for (let i = 0; Date.now() < until; i++) slowest = Math.max(slowest, await during("black-holed", i));
    const crowd = await Promise.all(Array.from({ length: 20 }, (_, i) => during("black-holed, 20 at once", i)));
    slowest = Math.max(slowest, ...crowd);
    await plain("black-holed");
    assert.ok(hole.accepted() > 0, "the client did connect to the black hole");
    ok(`${expect} fail-${failure}: black-holed: ${served} requests, each waited at most ${BOUND_MS} ms plus the loop's lateness (slowest ${slowest.toFixed(0)} ms; loop late by up to ${maxLate.toFixed(0)} ms), HTTP ${expectStatus}`);
    maxLate = 0;
    await hole.close();

    // Restarted, empty: served by Valkey again without restarting the app.
    await server.start();
    const c2 = client({}, port);
    const back = Date.now() + 15_000;
    for (let i = 0; ; i++) {
      const res = await get(`${app.base}/api`, { "x-client": "after" });
      assert.ok(waits.get("after") <= BOUND_MS + lag.maxMs(), `restarting: request ${i} waited ${waits.get("after").toFixed(0)} ms`);
      assert.ok(res.ms <= HTTP_BOUND_MS + lag.maxMs(), `restarting: request ${i} took ${res.ms.toFixed(0)} ms over HTTP`);
      lag.reset();
      if (events.some((e) => e.state === "up")) break;
      assert.ok(Date.now() < back, "service did not come back within 15 s");
      await sleep(50);
    }
    const counted = Number(await c2.get("rl:after"));
    assert.equal((await get(`${app.base}/api`, { "x-client": "after" })).status, 200);
    assert.equal(Number(await c2.get("rl:after")), counted + 1, "counted by Valkey again");
    if (expect === "functions") {
      assert.equal(await c2.call("FCALL_RO", "rl_version", "0"), bundledLibrary().version, "the library, reloaded");
    }
    // The plain limiter keeps its own view of the link: it tries Valkey
    // again within half a second of its last failed try.
    const plainBack = Date.now() + 1000;
    let d;
    while ((d = await limiter.admit("plain", { limit: 5, windowMs: 1000 })).backend === "unavailable") {
      assert.ok(Date.now() < plainBack, "the Limiter did not try Valkey again within 1 s");
      await sleep(20);
    }
    assert.equal(d.backend, expect);
    ok(
      `${expect} fail-${failure}: restarted: served by Valkey again, no app restart` +
        (expect === "functions" ? ", the vanished library reloaded from the package's copy" : ""),
    );

    assert.deepEqual(
      events.map((e) => e.state),
      ["down", "up"],
      `onError heard each transition once: ${JSON.stringify(events.map((e) => e.state))}`,
    );
    assert.ok(events[0].error instanceof Error);
    assert.equal(events[0].failure, failure);
    assert.ok(events[1].downForMs >= 1500, `down for ${events[1].downForMs} ms`);
    assert.deepEqual(limiterEvents.map((e) => e.state), ["down", "up"]);
    ok(`${expect} fail-${failure}: onError told once of the fall and once of the recovery`);
    c2.disconnect();
  } finally {
    lag.stop();
    await app.close();
    valkey.disconnect();
    await server.dispose();
  }
}

// The defaults when no onError is given: one line on stderr per transition.
async function defaults(expect) {
  const server = await new OwnServer({ module: expect === "module" }).start();
  const valkey = new Valkey({ host: "127.0.0.1", port: server.port, enableOfflineQueue: false, maxRetriesPerRequest: 1 });
  valkey.on("error", () => {});
  const limiter = new Limiter({ sendCommand: (...args) => valkey.call(...args) });
  const lines = [];
  const warn = console.warn;
  console.warn = (...args) => lines.push(args.join(" "));
  try {
    await limiter.admit("k", { limit: 5, windowMs: 1000 });
    await server.stop();
    for (let i = 0; i < 10; i++) assert.equal((await limiter.admit("k", { limit: 5, windowMs: 1000 })).admitted, true);
    await server.start();
    const back = Date.now() + 15_000;
    while ((await limiter.admit("k", { limit: 5, windowMs: 1000 })).backend === "unavailable") {
      assert.ok(Date.now() < back, "service did not come back");
      await sleep(50);
    }
  } finally {
    console.warn = warn;
    valkey.disconnect();
    await server.dispose();
  }
  assert.equal(lines.length, 2, lines.join("\n"));
  assert.match(lines[0], /^valkey-ratelimit: Valkey unreachable, failing open: /);
  assert.match(lines[1], /^valkey-ratelimit: Valkey reachable again after \d+ ms$/);
  ok(`${expect}: without onError, one warning per transition (2 lines for 10 requests down)`);
}

runMain(`outage ${process.argv[2]}`, async () => {
  const expect = expectedBackend();
  const phase = process.argv[2];
  if (phase === "open" || phase === "closed") await outage(expect, phase);
  else if (phase === "defaults") await defaults(expect);
  else throw new Error("usage: outage.test.js open|closed|defaults");
});
