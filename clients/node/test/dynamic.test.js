// Limits chosen at run time, through real Express apps over real HTTP: a
// META hash an operator edits (HSET <meta> max N takes effect at the next
// request), a META hash chosen per request, a limit that is a function of the
// request with the server deciding (sliding window), the same through the
// plain Limiter, and the header fields of the buckets with burst != limit.
//
//   VALKEY_PORT=<port> RL_EXPECT_BACKEND=module|functions node test/dynamic.test.js
"use strict";

const assert = require("node:assert/strict");
const { rateLimit } = require("express-rate-limit");
const { ValkeyStore, Limiter, headers } = require("..");
const { ok, client, sendVia, serve, get, runMain, expectedBackend } = require("./support");

const statuses = async (url, n, h = {}) => {
  const out = [];
  for (let i = 0; i < n; i++) out.push((await get(url, h)).status);
  return out;
};

async function dynamic(expect) {
  const c = client();
  const send = sendVia(c);
  const byClient = (req) => req.get("x-client");

  // An operator's HSET changes the cap at the next request.
  await c.hset("plans:ops", "max", "2", "duration", "60000");
  const ops = rateLimit({
    windowMs: 60000,
    limit: 1000,
    keyGenerator: byClient,
    store: new ValkeyStore({ sendCommand: send, timeoutMs: 5000, prefix: "dyn:", meta: "plans:ops" }),
  });
  // A META hash per request: the plan in a header picks it.
  await c.hset("plans:free", "max", "1", "duration", "60000");
  await c.hset("plans:pro", "max", "3", "duration", "60000");
  const perPlan = rateLimit({
    windowMs: 60000,
    limit: 1000,
    keyGenerator: byClient,
    store: new ValkeyStore({ sendCommand: send, timeoutMs: 5000, prefix: "plan:", meta: async (req) => `plans:${req.get("x-plan")}` }),
  });
  // A limit that is a function of the request, with the server deciding.
  const perRequest = rateLimit({
    windowMs: 60000,
    limit: (req) => Number(req.get("x-limit")),
    keyGenerator: byClient,
    skipFailedRequests: true,
    store: new ValkeyStore({ sendCommand: send, timeoutMs: 5000, prefix: "lim:", algorithm: "sliding" }),
  });
  // A token bucket, rate 3 per 10 s, room for 5.
  const bucket = rateLimit({
    windowMs: 10000,
    limit: 3,
    standardHeaders: "draft-8",
    legacyHeaders: false,
    keyGenerator: byClient,
    store: new ValkeyStore({ sendCommand: send, timeoutMs: 5000, prefix: "tok:", algorithm: "token", burst: 5 }),
  });
  const app = await serve({ "/ops": ops, "/plan": perPlan, "/limit": perRequest, "/bucket": bucket });
  try {
    const url = `${app.base}/ops`;
    assert.deepEqual(await statuses(url, 3, { "x-client": "a" }), [200, 200, 429]);
    await c.hset("plans:ops", "max", "4");
    assert.deepEqual(await statuses(url, 3, { "x-client": "a" }), [200, 200, 429]);
    await c.hset("plans:ops", "max", "1");
    assert.deepEqual(await statuses(url, 1, { "x-client": "a" }), [429]);
    assert.deepEqual(await statuses(url, 2, { "x-client": "b" }), [200, 429]);
    ok(`${expect}: HSET <meta> max N changes the cap at the next request (2, then 4, then 1)`);

    await c.hset("plans:ops", "duration", "5000", "max", "10");
    await get(url, { "x-client": "fresh" });
    const pttl = Number(await c.pttl("dyn:fresh"));
    assert.ok(pttl > 0 && pttl <= 5000, `PTTL ${pttl}: the window comes from the hash's duration`);
    ok(`${expect}: HSET <meta> duration sets the window (PTTL ${pttl} ms <= 5000)`);

    const plan = `${app.base}/plan`;
    assert.deepEqual(await statuses(plan, 2, { "x-client": "f", "x-plan": "free" }), [200, 429]);
    assert.deepEqual(await statuses(plan, 4, { "x-client": "p", "x-plan": "pro" }), [200, 200, 200, 429]);
    ok(`${expect}: meta as an async function of the request: free 1, pro 3`);

    const lim = `${app.base}/limit`;
    assert.deepEqual(await statuses(lim, 2, { "x-client": "one", "x-limit": "1" }), [200, 429]);
    assert.deepEqual(await statuses(lim, 4, { "x-client": "three", "x-limit": "3" }), [200, 200, 200, 429]);
    assert.deepEqual(await statuses(lim, 2, { "x-client": "zero", "x-limit": "0" }), [429, 429]);
    assert.equal(await c.exists("lim:zero"), 0, "a limit of 0 counts nothing");
    ok(`${expect}: limit as a function of the request with the server deciding (sliding): 1, 3, and 0 refuses`);

    // The bucket through express-rate-limit: r never 0 while a request
    // would pass (express-rate-limit's r cannot exceed its limit, 3).
    const seen = [];
    for (let i = 0; i < 6; i++) {
      const res = await get(`${app.base}/bucket`, { "x-client": "t" });
      const m = /^"3-in-10sec"; r=(\d+); t=(\d+)$/.exec(res.headers.get("ratelimit"));
      assert.ok(m, res.headers.get("ratelimit"));
      seen.push(`${res.status}:r=${m[1]}`);
      const left = await new Limiter({ sendCommand: send, timeoutMs: 5000, prefix: "tok:" }).admit("t", {
        algorithm: "token",
        limit: 3,
        windowMs: 10000,
        burst: 5,
        cost: 0,
      });
      // Requests that would still pass now, as the server counts them.
      if (left.remaining > 0) assert.ok(Number(m[1]) > 0, `r=0 with ${left.remaining} left: ${seen}`);
      assert.ok(Number(m[2]) <= Math.ceil(Math.max(left.resetAfterMs, left.retryAfterMs) / 1000) + 1, `t past the reset: ${seen}`);
    }
    assert.deepEqual(seen.map((s) => s.split(":")[0]), ["200", "200", "200", "200", "200", "429"]);
    ok(`${expect}: a token bucket (3 per 10 s, burst 5) through express-rate-limit: ${seen.join(" ")}`);
  } finally {
    await app.close();
  }

  // The plain Limiter: META, and the header fields of every bucket.
  const limiter = new Limiter({ sendCommand: send, timeoutMs: 5000, prefix: "plain:" });
  await c.hset("plans:plain", "max", "1", "duration", "60000");
  assert.equal((await limiter.admit("m", { meta: "plans:plain" })).admitted, true);
  assert.equal((await limiter.admit("m", { meta: "plans:plain" })).admitted, false);
  await c.hset("plans:plain", "max", "2");
  assert.equal((await limiter.admit("m", { meta: "plans:plain" })).admitted, true);
  const withDefaults = new Limiter({ sendCommand: send, timeoutMs: 5000, prefix: "plain:", meta: "plans:plain" });
  assert.equal((await withDefaults.admit("m")).admitted, false, "the limiter's own meta");
  ok(`${expect}: Limiter.admit with meta: HSET max 2 admits the next call`);

  for (const [algorithm, burst] of [["token", 5], ["gcra", 5], ["leaky", 5], ["token", 2], ["gcra", 1], ["leaky", 1]]) {
    const key = `h:${algorithm}:${burst}`;
    const policy = { algorithm, limit: 3, windowMs: 10000, burst };
    const rows = [];
    for (let i = 0; i < 8; i++) {
      const d = await limiter.admit(key, policy);
      const h = headers(d);
      const m = /^"(\d+)-in-10sec";r=(\d+);t=(\d+)$/.exec(h.RateLimit);
      assert.ok(m, JSON.stringify(h));
      const r = Number(m[2]);
      const t = Number(m[3]);
      // The truth: how many cost-1 requests pass now, found on a copy of the state.
      const raw = await c.dumpBuffer(`plain:${key}`);
      const ttl = await c.pttl(`plain:${key}`);
      let pass = 0;
      if (raw) {
        await c.restore(`plain:copy`, Math.max(ttl, 1), raw, "REPLACE");
        while (pass < 20 && (await limiter.admit("copy", policy)).admitted) pass++;
        await c.del("plain:copy");
      }
      assert.equal(r, pass, `${algorithm} burst ${burst}, request ${i}: r=${r}, ${pass} would pass`);
      assert.ok(t * 1000 >= (d.admitted ? d.resetAfterMs : Math.max(d.retryAfterMs, 0)), "t rounded up");
      assert.ok(t <= Math.ceil(d.resetAfterMs / 1000), `t=${t} later than the reset (${d.resetAfterMs} ms)`);
      rows.push(`${d.admitted ? "+" : "-"}r${r}t${t}`);
    }
    ok(`${expect}: headers() of ${algorithm} burst ${burst}: r is what would pass now, t never past the reset: ${rows.join(" ")}`);
  }
  c.disconnect();
}

runMain("dynamic", async () => {
  await dynamic(expectedBackend());
});
