// Bad configuration fails when the limiter or store is built, with one
// message that states the rule: `<option> must be <rule> (got <value>)`.
// No server: building sends nothing.
//   node --test test/unit/
"use strict";

const test = require("node:test");
const assert = require("node:assert/strict");
const { rateLimit } = require("express-rate-limit");
const { Limiter, ValkeyStore, ConfigError } = require("../..");

const sendCommand = () => {
  throw new Error("nothing is sent while building");
};

const fails = (build, message) =>
  assert.throws(build, (e) => {
    assert.ok(e instanceof ConfigError, `${e.name}: ${e.message}`);
    assert.equal(e.message, message);
    return true;
  });

test("Limiter: each bad option is one clear error at construction", () => {
  fails(() => new Limiter({ sendCommand, windowMs: -5 }), "windowMs must be a safe integer >= 1 (got -5)");
  fails(() => new Limiter({ sendCommand, limit: "3" }), 'limit must be a safe integer >= 0 (got "3")');
  fails(() => new Limiter({ sendCommand, limit: 2 ** 53 }), "limit must be a safe integer >= 0 (got 9007199254740992)");
  fails(() => new Limiter({ sendCommand, name: "café" }), 'name must be an ASCII string without " or \\ (got "café")');
  fails(() => new Limiter({ sendCommand, cost: 2 ** 63 }), "cost must be a safe integer >= 0 (got 9223372036854775808)");
  fails(() => new Limiter({}), "sendCommand must be a function (got undefined)");
  fails(() => new Limiter({ sendCommand, timeoutMs: 0 }), "timeoutMs must be a safe integer >= 1 (got 0)");
  fails(() => new Limiter({ sendCommand, failure: "maybe" }), 'failure must be one of open, closed (got "maybe")');
  fails(() => new Limiter({ sendCommand, backend: "lua" }), 'backend must be one of auto, module, functions (got "lua")');
  fails(() => new Limiter({ sendCommand, waitReplicas: 0 }), "waitReplicas must be a safe integer >= 1 (got 0)");
  fails(() => new Limiter({ sendCommand, unconfirmed: "drop" }), 'unconfirmed must be one of keep, refuse (got "drop")');
  fails(() => new Limiter({ sendCommand, library: 42 }), "library must be a string (got 42)");
  fails(() => new Limiter({ sendCommand, prefix: 7 }), "prefix must be a string (got 7)");
  assert.throws(() => new Limiter({ sendCommand, windowMS: 1000 }), { message: "windowMS is not an option of Limiter" });
});

test("Limiter: a call's own bad option is refused before anything is sent", async () => {
  const limiter = new Limiter({ sendCommand });
  await assert.rejects(limiter.admit("k", { limit: 3, windowMs: -5 }), { message: "windowMs must be a safe integer >= 1 (got -5)" });
  await assert.rejects(limiter.admit("k", { limit: 3, windowMs: 10, cost: -1 }), { message: "cost must be a safe integer >= 0 (got -1)" });
  await assert.rejects(limiter.admit(5, { limit: 3, windowMs: 10 }), { message: "key must be a string (got 5)" });
  await assert.rejects(limiter.acquire("k", { limit: 0 }), { message: "limit must be a safe integer >= 1 (got 0)" });
  await assert.rejects(limiter.release("k", ""), { message: 'id must be a non-empty string (got "")' });
});

test("ValkeyStore: its own options are checked at construction", () => {
  fails(() => new ValkeyStore({ sendCommand, prefix: 5 }), "prefix must be a string (got 5)");
  fails(() => new ValkeyStore({ sendCommand, algorithm: "cell" }), 'algorithm must be one of fixed, sliding, token, gcra, leaky (got "cell")');
  fails(() => new ValkeyStore({ sendCommand, burst: 3 }), "burst must be left out unless algorithm is token, gcra or leaky (got 3)");
  fails(() => new ValkeyStore({ sendCommand, failureStatus: 200 }), "failureStatus must be an HTTP status from 400 to 599 (got 200)");
  fails(() => new ValkeyStore({ sendCommand, meta: 5 }), "meta must be a string, or a function of the request (got 5)");
  fails(() => new ValkeyStore({ sendCommand, failure: "throw" }), 'failure must be one of open, closed (got "throw")');
  fails(() => new ValkeyStore({ sendCommand, timeoutMs: -1 }), "timeoutMs must be a safe integer >= 1 (got -1)");
  assert.throws(() => new ValkeyStore({ sendCommand, limit: 5 }), /^ConfigError: limit is not an option of ValkeyStore/);
});

test("ValkeyStore: express-rate-limit's windowMs and limit are checked when rateLimit() is built, and every request raises it", async () => {
  const cases = [
    [{ windowMs: -5, limit: 3 }, "windowMs must be a safe integer >= 1 (got -5)"],
    [{ windowMs: 1000, limit: "3" }, 'limit must be a safe integer >= 0, or a function of the request (got "3")'],
    [{ windowMs: 1000, limit: 2 ** 53 }, "limit must be a safe integer >= 0, or a function of the request (got 9007199254740992)"],
  ];
  for (const [options, message] of cases) {
    const logged = [];
    const store = new ValkeyStore({ sendCommand });
    const keep = (...args) => logged.push(...args.filter((a) => a instanceof Error));
    rateLimit({ ...options, store, logger: { warn: keep, error: keep } });
    assert.equal(logged.length, 1, "logged once, when the limiter is built");
    assert.ok(logged[0] instanceof ConfigError);
    assert.equal(logged[0].message, message);
    // Never failing open: each request gets the error (Express answers 500).
    await assert.rejects(store.increment("k"), { message });
    await assert.rejects(store.decrement("k"), { message });
    await assert.rejects(store.get("k"), { message });
  }
});

test("ValkeyStore: used outside express-rate-limit before init, it says so", async () => {
  await assert.rejects(new ValkeyStore({ sendCommand }).increment("k"), /used before init\(\): pass it to rateLimit\(\{ store \}\)/);
});
