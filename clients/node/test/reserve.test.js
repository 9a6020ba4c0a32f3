// Fair waiting (issue 38) through the package, on the backend the harness
// started (RL_EXPECT_BACKEND). tests/it/node_package.rs runs it.
//
//   node test/reserve.test.js live    one call books the turn, the caller
//                                     wakes no sooner than at_ms by the
//                                     server's clock; a PING on the same
//                                     iovalkey client answers while a wait
//                                     sleeps; an AbortSignal gives the slot back
//   node test/reserve.test.js share   one of the four processes that share a
//                                     limiter (RL_SHARE_KEY, RL_SHARE_N,
//                                     RL_SHARE_START): prints `addr <a>`, then
//                                     `slot <a> <admitted> <atMs> <delayMs> <TIME µs after waking>`
"use strict";

const assert = require("node:assert/strict");
const { performance } = require("node:perf_hooks");
const { Limiter } = require("..");
const { client, ok, sleep } = require("./support");

const GCRA = { algorithm: "gcra", burst: 1 };

const timeUs = async (c) => {
  const [s, us] = await c.call("TIME");
  return Number(s) * 1e6 + Number(us);
};

// The calls the server counted of the waiting command: RL.ADMIT, or every FCALL.
async function calls(c, expect, command) {
  const name = expect === "module" ? `cmdstat_${command}` : "cmdstat_fcall";
  const info = await c.call("INFO", "commandstats");
  const line = info.split(/\r?\n/).find((l) => l.startsWith(`${name}:`));
  return line ? Number(/calls=(\d+)/.exec(line)[1]) : 0;
}

async function pingMs(c) {
  const t = performance.now();
  assert.equal(await c.call("PING"), "PONG");
  return performance.now() - t;
}

const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];

// One call per admission; the caller goes ahead no sooner than at_ms by the
// server's clock; a turn beyond waitMs is refused at once, in one call.
async function booking(c, limiter, expect) {
  const policy = { ...GCRA, limit: 10, windowMs: 1000 };
  await c.call("CONFIG", "RESETSTAT");
  const first = await limiter.wait("r:book", { ...policy, waitMs: 5000 });
  assert.equal(first.admitted, true);
  assert.equal(first.delayMs, 0);
  const second = await limiter.wait("r:book", { ...policy, waitMs: 5000 });
  const woke = await timeUs(c);
  assert.equal(second.admitted, true);
  // at_ms rounds up, the call's own ms down: 101 at most.
  assert.ok(second.delayMs > 50 && second.delayMs <= 101, `delayMs ${second.delayMs}`);
  assert.ok(woke >= second.atMs * 1000, `woke at ${woke} µs, before at_ms ${second.atMs}`);
  const t = performance.now();
  const refused = await limiter.wait("r:book", { ...policy, waitMs: 20 });
  const took = performance.now() - t;
  assert.equal(refused.admitted, false);
  assert.ok(refused.retryAfterMs > 20, `retryAfterMs ${refused.retryAfterMs}`);
  assert.deepEqual([refused.delayMs, refused.atMs], [-1, -1]);
  assert.equal(await calls(c, expect, "RL.ADMIT"), 3, "one call per wait");
  ok(`${expect}: one call per wait; woke ${Math.round(woke / 1000 - second.atMs)} ms after at_ms; a turn beyond waitMs refused in ${Math.round(took)} ms`);
}

// No connection held while a caller sleeps: a PING on the same iovalkey
// client during a 2 s wait answers as fast as one before it (the median of
// 5, within the slowest of 5 before plus 5 ms: a held connection would make
// it wait the whole 2 s, and the median shrugs off one scheduling stall of
// a loaded machine).
async function noConnectionHeld(c, limiter, expect) {
  const policy = { ...GCRA, limit: 1, windowMs: 2000 };
  assert.equal((await limiter.admit("r:ping", policy)).admitted, true);
  const before = [];
  for (let i = 0; i < 5; i++) before.push(await pingMs(c));
  const t = performance.now();
  const pending = limiter.wait("r:ping", { ...policy, waitMs: 3000 });
  await sleep(200);
  const during = [];
  for (let i = 0; i < 5; i++) during.push(await pingMs(c));
  const decision = await pending;
  const waited = performance.now() - t;
  assert.equal(decision.admitted, true);
  assert.ok(decision.delayMs >= 1500, `delayMs ${decision.delayMs}`);
  assert.ok(waited >= decision.delayMs, `woke after ${waited} ms`);
  const bound = Math.max(...before) + 5;
  assert.ok(median(during) <= bound, `PING during the wait: median ${median(during)} ms > ${bound} ms`);
  ok(
    `${expect}: PING during a ${decision.delayMs} ms wait on the same client: median ${median(during).toFixed(2)} ms, ` +
      `bound ${bound.toFixed(2)} ms (slowest of 5 before + 5)`,
  );
}

// An AbortSignal fired while the caller sleeps gives its slot back, once:
// the next wait books the cancelled slot, not the one after it.
async function cancel(c, limiter, expect) {
  const policy = { ...GCRA, limit: 1, windowMs: 1000 };
  const t0 = await timeUs(c);
  assert.equal((await limiter.admit("r:cancel", policy)).admitted, true);
  const t1 = await timeUs(c);
  await c.call("CONFIG", "RESETSTAT");
  const controller = new AbortController();
  const cancelled = limiter.wait("r:cancel", { ...policy, waitMs: 5000, signal: controller.signal });
  await sleep(100);
  controller.abort(new Error("gave up"));
  await assert.rejects(cancelled, /gave up/);
  const next = await limiter.wait("r:cancel", { ...policy, waitMs: 5000 });
  // The first admission's slot ran to t + 1000; the cancelled one would have
  // pushed the next to t + 2000.
  assert.ok(
    next.atMs >= Math.floor(t0 / 1000) + 1000 && next.atMs <= Math.ceil(t1 / 1000) + 1001,
    `next at ${next.atMs}, the cancelled slot was [${t0 / 1000 + 1000}, ${t1 / 1000 + 1001}]`,
  );
  const refunds = expect === "module" ? await calls(c, expect, "RL.REFUND") : (await calls(c, expect)) - 2;
  assert.equal(refunds, 1, "one RL.REFUND ... AT");
  // A window cannot book: its wait retries, and an abort between tries
  // rejects with the signal's reason (never the failure policy's answer).
  assert.equal((await limiter.admit("r:window", { limit: 1, windowMs: 60000 })).admitted, true);
  const between = new AbortController();
  setTimeout(() => between.abort(new Error("gave up between tries")), 50);
  await assert.rejects(limiter.wait("r:window", { limit: 1, windowMs: 60000, waitMs: 5000, signal: between.signal }), /between tries/);
  ok(`${expect}: an aborted waiter's slot is given back once: the next wait took it (${next.delayMs} ms)`);
}

async function live(expect) {
  const c = client();
  try {
    await c.call("FLUSHALL");
    const limiter = new Limiter({ sendCommand: (...args) => c.call(...args), timeoutMs: 5000 });
    assert.equal(await limiter.backend(), expect);
    await booking(c, limiter, expect);
    await noConnectionHeld(c, limiter, expect);
    await cancel(c, limiter, expect);
  } finally {
    c.disconnect();
  }
}

// One process of the four sharing RL_SHARE_KEY from RL_SHARE_START (epoch ms).
async function share() {
  const key = process.env.RL_SHARE_KEY;
  const n = Number(process.env.RL_SHARE_N);
  const start = Number(process.env.RL_SHARE_START);
  const policy = JSON.parse(process.env.RL_SHARE_POLICY);
  const c = client();
  try {
    const limiter = new Limiter({ sendCommand: (...args) => c.call(...args), timeoutMs: 5000 });
    await limiter.backend();
    const addr = /addr=(\S+)/.exec(await c.call("CLIENT", "INFO"))[1];
    console.log(`addr ${addr}`);
    await sleep(Math.max(0, start - Date.now()));
    for (let i = 0; i < n; i++) {
      const d = await limiter.wait(key, { ...policy, waitMs: 30000 });
      console.log(`slot ${addr} ${d.admitted ? 1 : 0} ${d.atMs} ${d.delayMs} ${await timeUs(c)}`);
    }
  } finally {
    c.disconnect();
  }
}

async function main() {
  const phase = process.argv[2];
  const expect = process.env.RL_EXPECT_BACKEND;
  assert.ok(expect === "module" || expect === "functions", "RL_EXPECT_BACKEND must be module or functions");
  if (phase === "live") await live(expect);
  else if (phase === "share") await share();
  else throw new Error("usage: reserve.test.js live|share");
  console.log(`PASS node reserve ${phase}`);
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
