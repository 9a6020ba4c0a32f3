// ValkeyStore against express-rate-limit's own MemoryStore, the oracle,
// request by request, through real Express apps over real HTTP.
//
//   VALKEY_PORT=<port> RL_EXPECT_BACKEND=module|functions node test/differential.test.js sequences
//   VALKEY_PORT=<port> RL_EXPECT_BACKEND=module|functions node test/differential.test.js bypass
//
// `sequences` drives random request sequences (RL_SEQUENCES of them, 300 by
// default; RL_SEED replays a run) through two rate limiters that differ only
// in their store: random response statuses, limits of 0, 1 and n, limits as
// sync and async functions of the request (varying request by request),
// skipFailedRequests, skipSuccessfulRequests, requestWasSuccessful, skip,
// identifier, prefix, validate, header drafts, resetKey and getKey. Every
// status code must be the same; so must the header fields (the seconds of
// `t`, Retry-After and the legacy reset within the time the sequence took),
// getKey's hit count, and what express-rate-limit's validations log. Some
// sequences run the store in its other mode (the server deciding, through a
// META hash with the same limit), which must agree as well.
// `bypass` pins the skipFailedRequests bypass and the limit of 0.
"use strict";

const assert = require("node:assert/strict");
const express = require("express");
const { rateLimit, MemoryStore } = require("express-rate-limit");
const { ValkeyStore } = require("..");
const support = require("./support");

const { ok, client, sendVia, listen, get, random, seedOf, runMain, expectedBackend } = support;

const WINDOW_MS = 600_000;
const STATUSES = [200, 200, 200, 201, 204, 302, 400, 404, 429, 500, 503];
const LIMITS = [0, 1, 1, 2, 3, 5];

// Counts the store calls still running per key, so that the driver can wait
// for the decrement express-rate-limit sends after a response.
function tracked(store) {
  const pending = new Map();
  const idle = new Map();
  const settle = (key) => {
    const n = pending.get(key) - 1;
    pending.set(key, n);
    if (n === 0) for (const resolve of idle.get(key) || []) resolve();
    if (n === 0) idle.delete(key);
  };
  const proxy = new Proxy(store, {
    get(target, prop) {
      const value = Reflect.get(target, prop);
      if (!["increment", "decrement", "resetKey", "get"].includes(prop)) return value;
      return (key) => {
        pending.set(key, (pending.get(key) || 0) + 1);
        return Promise.resolve(value.call(target, key)).finally(() => settle(key));
      };
    },
  });
  const quiet = (key) =>
    pending.get(key) ? new Promise((resolve) => idle.set(key, [...(idle.get(key) || []), resolve])) : undefined;
  return { proxy, quiet };
}

// The app both limiters of each sequence live in: /:side/:seq goes to that
// sequence's limiter for that side (m: MemoryStore, v: ValkeyStore), then to
// a handler that answers the status the request asks for (x-status), or
// throws (x-throw). `done(id)` resolves once the response with that x-id is
// closed and what express-rate-limit does after it has been started.
function app(limiters) {
  const closed = new Map();
  const a = express();
  a.use((req, res, next) => {
    const id = req.get("x-id");
    res.on("close", () => setImmediate(() => closed.get(id)?.resolve()));
    next();
  });
  a.use("/:side/:seq", (req, res, next) => limiters.get(`${req.params.side}/${req.params.seq}`)(req, res, next));
  a.use((req, res, next) => {
    if (req.get("x-throw")) return next(new Error("the handler failed"));
    res.status(Number(req.get("x-status"))).send("done");
  });
  a.use((err, req, res, next) => {
    res.status(500).send("error");
  });
  const done = (id) => {
    let resolve;
    const p = new Promise((r) => (resolve = r));
    closed.set(id, { resolve });
    return p.finally(() => closed.delete(id));
  };
  return { app: a, done };
}

// A random configuration for one sequence.
function configure(rng, seq, seed) {
  const c = { seq, key: `client-${seed}-${seq}`, steps: 4 + rng.below(17) };
  const kind = rng.pick(["number", "number", "number", "sync", "async", "vary", "vary-async"]);
  const n = rng.pick(LIMITS);
  c.limitKind = kind;
  c.limitValue = n;
  c.skipFailedRequests = rng.chance(0.5);
  c.skipSuccessfulRequests = rng.chance(0.35);
  c.requestWasSuccessful = rng.pick([undefined, undefined, "below500", "below500-async", "not429"]);
  c.identifier = rng.pick([undefined, undefined, "fixed", "function"]);
  c.prefix = rng.pick([undefined, `d${seq}:`, `{t${seq}}:`]);
  c.validate = rng.pick([undefined, true, false, { singleCount: false }]);
  c.standardHeaders = rng.pick(["draft-8", "draft-8", "draft-7", "draft-6", false]);
  c.legacyHeaders = rng.chance(0.3);
  c.skip = rng.chance(0.2);
  c.algorithm = rng.pick([undefined, undefined, "fixed"]);
  // The server deciding, through a META hash with the same (constant) limit.
  c.meta = (kind === "number" || kind === "sync") && n > 0 && rng.chance(0.3);
  c.plan = [];
  for (let i = 0; i < c.steps; i++) {
    const r = rng.next();
    if (r < 0.05) c.plan.push({ action: "resetKey" });
    else if (r < 0.13) c.plan.push({ action: "getKey" });
    else {
      c.plan.push({
        action: "request",
        status: rng.pick(STATUSES),
        fail: rng.chance(0.05),
        limit: rng.pick(LIMITS),
        skip: c.skip && rng.chance(0.25),
      });
    }
  }
  return c;
}

// express-rate-limit's options for a sequence, with `store` and a logger
// that keeps what the validations report.
function options(c, store, logged) {
  const limit = {
    number: c.limitValue,
    sync: () => c.limitValue,
    async: async () => c.limitValue,
    vary: (req) => Number(req.get("x-limit")),
    "vary-async": async (req) => Number(req.get("x-limit")),
  }[c.limitKind];
  const requestWasSuccessful = {
    below500: (req, res) => res.statusCode < 500,
    "below500-async": async (req, res) => res.statusCode < 500,
    not429: (req, res) => res.statusCode !== 429,
  }[c.requestWasSuccessful];
  const identifier = { fixed: "api", function: (req) => `id-${req.get("x-limit")}` }[c.identifier];
  const keep = (...args) => logged.push(args.map((a) => (a && a.code) || "").filter(Boolean).join(","));
  const o = {
    windowMs: WINDOW_MS,
    limit,
    skipFailedRequests: c.skipFailedRequests,
    skipSuccessfulRequests: c.skipSuccessfulRequests,
    standardHeaders: c.standardHeaders,
    legacyHeaders: c.legacyHeaders,
    keyGenerator: () => c.key,
    logger: { warn: keep, error: keep },
    store,
  };
  if (requestWasSuccessful) o.requestWasSuccessful = requestWasSuccessful;
  if (identifier !== undefined) o.identifier = identifier;
  if (c.validate !== undefined) o.validate = c.validate;
  if (c.skip) o.skip = (req) => req.get("x-skip") === "1";
  return o;
}

// The fields of a response that must agree; times are compared apart.
function view(res) {
  const h = (name) => res.headers.get(name);
  return {
    status: res.status,
    policy: h("ratelimit-policy"),
    ratelimit: h("ratelimit") && h("ratelimit").replace(/([; ]t=|reset=)\d+/, "$1#"),
    t: h("ratelimit") && Number(/(?:[; ]t=|reset=)(\d+)/.exec(h("ratelimit"))?.[1]),
    limitHeader: h("ratelimit-limit"),
    remaining: h("ratelimit-remaining"),
    reset: h("ratelimit-reset") === null ? null : Number(h("ratelimit-reset")),
    xLimit: h("x-ratelimit-limit"),
    xRemaining: h("x-ratelimit-remaining"),
    xReset: h("x-ratelimit-reset") === null ? null : Number(h("x-ratelimit-reset")),
    retryAfter: h("retry-after") === null ? null : Number(h("retry-after")),
  };
}

function assertClose(a, b, slack, what) {
  if (a === null || b === null || Number.isNaN(a) || Number.isNaN(b)) return assert.equal(a, b, what);
  assert.ok(Math.abs(a - b) <= slack, `${what}: ${a} vs ${b} (slack ${slack})`);
}

async function sequences(expect) {
  const seed = seedOf();
  const count = Number(process.env.RL_SEQUENCES || 300);
  console.log(`seed ${seed} (RL_SEED=${seed} replays this run), ${count} sequences`);
  const rng = random(seed);
  const c = client();
  const send = sendVia(c);
  const limiters = new Map();
  const { app: a, done } = app(limiters);
  const server = await listen(a);
  const stats = { requests: 0, statuses: 0, refused: 0, meta: 0 };
  let nextId = 0;
  const runOne = async (cfg) => {
    const logged = { m: [], v: [] };
    const memory = tracked(new MemoryStore());
    // The deadline is not what this test is about: a busy machine gets time.
    const storeOptions = { sendCommand: send, timeoutMs: 5000 };
    if (cfg.prefix !== undefined) storeOptions.prefix = cfg.prefix;
    if (cfg.algorithm !== undefined) storeOptions.algorithm = cfg.algorithm;
    if (cfg.meta) {
      const meta = `meta:{${cfg.key}}`;
      await c.hset(meta, "max", String(cfg.limitValue), "duration", String(WINDOW_MS));
      storeOptions.meta = meta;
      stats.meta++;
    }
    const valkey = tracked(new ValkeyStore(storeOptions));
    limiters.set(`m/${cfg.seq}`, rateLimit(options(cfg, memory.proxy, logged.m)));
    const v = rateLimit(options(cfg, valkey.proxy, logged.v));
    limiters.set(`v/${cfg.seq}`, v);
    const m = limiters.get(`m/${cfg.seq}`);
    const key = cfg.key;
    const started = Date.now();
    const seen = [];
    for (const [i, step] of cfg.plan.entries()) {
      const where = `seed ${seed}, sequence ${cfg.seq} ${JSON.stringify({ ...cfg, plan: undefined, key: undefined })}, step ${i} ${JSON.stringify(step)}, statuses so far ${seen.join(" ")}`;
      if (step.action === "resetKey") {
        await Promise.all([m.resetKey(key), v.resetKey(key)]);
        continue;
      }
      if (step.action === "getKey") {
        // With the server deciding, a refusal is not a hit: get counts admitted hits only.
        if (cfg.meta) continue;
        const [gm, gv] = await Promise.all([m.getKey(key), v.getKey(key)]);
        assert.equal(gv?.totalHits ?? 0, gm?.totalHits ?? 0, `getKey: ${where}`);
        continue;
      }
      const headers = {
        "x-status": String(step.status),
        "x-limit": String(step.limit),
        ...(step.fail ? { "x-throw": "1" } : {}),
        ...(step.skip ? { "x-skip": "1" } : {}),
      };
      const results = {};
      for (const side of ["m", "v"]) {
        const id = String(nextId++);
        const closed = done(id);
        results[side] = await get(`${server.base}/${side}/${cfg.seq}`, { ...headers, "x-id": id });
        await closed;
        await (side === "m" ? memory : valkey).quiet(key);
      }
      const [vm, vv] = [view(results.m), view(results.v)];
      const slack = Math.ceil((Date.now() - started) / 1000) + 1;
      for (const f of ["t", "reset", "xReset", "retryAfter"]) {
        assertClose(vv[f], vm[f], slack, `${f}: ${where}`);
        delete vm[f];
        delete vv[f];
      }
      assert.deepEqual(vv, vm, `the response differs: ${where}`);
      seen.push(results.m.status);
      if (results.m.body.startsWith("Too many requests")) stats.refused++;
      stats.requests++;
      stats.statuses += 2;
    }
    assert.deepEqual(logged.v, logged.m, `validation messages differ: seed ${seed}, sequence ${cfg.seq}`);
    if (!cfg.meta && cfg.plan.some((s) => s.action === "request" && !s.skip)) {
      // Every counted hit is in Valkey, under the store's prefix.
      const stored = await c.exists(`${cfg.prefix ?? "rl:"}${key}`);
      const [hits] = [await m.getKey(key)];
      assert.equal(stored, (hits?.totalHits ?? 0) > 0 ? 1 : 0, `the key under its prefix: seed ${seed}, sequence ${cfg.seq}`);
    }
    limiters.delete(`m/${cfg.seq}`);
    limiters.delete(`v/${cfg.seq}`);
  };
  const configs = Array.from({ length: count }, (_, seq) => configure(rng, seq, seed));
  // Sequences run side by side (each on its own key); a sequence's own
  // requests run one after another.
  const workers = Array.from({ length: 12 }, async () => {
    for (let cfg = configs.shift(); cfg; cfg = configs.shift()) await runOne(cfg);
  });
  await Promise.all(workers);
  await server.close();
  assert.equal(await new ValkeyStore({ sendCommand: send }).limiter.backend(), expect);
  c.disconnect();
  ok(
    `${expect}: ${count} sequences (${stats.meta} with the server deciding through META), ` +
      `${stats.requests} requests (${stats.refused} refused by the limiter), ${stats.statuses} responses, 0 differing status codes`,
  );
}

// Ten requests with skipFailedRequests at limit 2: MemoryStore gives
// 200 200 and eight 429s, since express-rate-limit decrements the 429s too.
async function bypass(expect) {
  const c = client();
  const send = sendVia(c);
  await c.hset("bypass:meta", "max", "2", "duration", "10000");
  const cases = [
    ["MemoryStore", () => new MemoryStore(), 2],
    ["ValkeyStore", () => new ValkeyStore({ sendCommand: send, timeoutMs: 5000, prefix: "bypass:count:" }), 2],
    ["ValkeyStore (sliding)", () => new ValkeyStore({ sendCommand: send, timeoutMs: 5000, prefix: "bypass:sliding:", algorithm: "sliding" }), 2],
    ["ValkeyStore (token)", () => new ValkeyStore({ sendCommand: send, timeoutMs: 5000, prefix: "bypass:token:", algorithm: "token" }), 2],
    ["ValkeyStore (META)", () => new ValkeyStore({ sendCommand: send, timeoutMs: 5000, prefix: "bypass:meta:", meta: "bypass:meta" }), 2],
  ];
  const expected = [200, 200, ...Array(8).fill(429)];
  const limiters = new Map();
  const { app: a, done } = app(limiters);
  const server = await listen(a);
  let nextId = 0;
  // Ten requests, each answered 200 by the handler unless refused; the next
  // is sent once the decrement of the last has run.
  const ten = async (route, store) => {
    const statuses = [];
    for (let i = 0; i < 10; i++) {
      const id = String(nextId++);
      const closed = done(id);
      statuses.push((await get(`${server.base}/${route}`, { "x-status": "200", "x-id": id })).status);
      await closed;
      await store.quiet("k");
    }
    return statuses;
  };
  for (const [i, [name, make, limit]] of cases.entries()) {
    const store = tracked(make());
    const options = { windowMs: 10000, limit, skipFailedRequests: true, keyGenerator: () => "k", store: store.proxy };
    limiters.set(`b/${i}`, rateLimit(options));
    assert.deepEqual(await ten(`b/${i}`, store), expected, name);
  }
  for (const prefix of ["bypass:count:", "bypass:sliding:", "bypass:token:"]) {
    assert.ok((await c.exists(`${prefix}k`)) === 1, `${prefix}k holds the two admitted requests`);
  }
  assert.equal(Number(await c.get("bypass:count:k")), 2, "the counter holds 2 hits: no 429 gave one back");
  ok(`${expect}: skipFailedRequests: a refused request frees no slot (200 200 then 8 x 429, as MemoryStore)`);

  const zero = [
    ["MemoryStore", () => new MemoryStore()],
    ["ValkeyStore", () => new ValkeyStore({ sendCommand: send, timeoutMs: 5000, prefix: "zero:" })],
    ["ValkeyStore (sliding)", () => new ValkeyStore({ sendCommand: send, timeoutMs: 5000, prefix: "zero-s:", algorithm: "sliding" })],
  ];
  for (const [i, [name, make]] of zero.entries()) {
    const logged = [];
    const keep = (...args) => logged.push(args.map((a) => (a && a.code) || "").join(""));
    const store = tracked(make());
    limiters.set(`z/${i}`, rateLimit({ windowMs: 10000, limit: 0, keyGenerator: () => "k", logger: { warn: keep, error: keep }, store: store.proxy }));
    const statuses = (await ten(`z/${i}`, store)).slice(0, 3);
    assert.deepEqual(statuses, [429, 429, 429], name);
    assert.deepEqual(logged, ["WRN_ERL_MAX_ZERO"], `${name}: only the limit-0 warning`);
  }
  ok(`${expect}: limit 0 refuses every request, as MemoryStore (no ERR_ERL_INVALID_HITS)`);
  await server.close();
  c.disconnect();
}

runMain(`differential ${process.argv[2]}`, async () => {
  const expect = expectedBackend();
  const phase = process.argv[2];
  if (phase === "sequences") await sequences(expect);
  else if (phase === "bypass") await bypass(expect);
  else throw new Error("usage: differential.test.js sequences|bypass");
});
