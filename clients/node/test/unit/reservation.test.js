// Unit tests of waiting's pure core (lib/reservation.js) and of its sleep
// (lib/waiting.js): no server, no network.
//   node --test test/unit/
"use strict";

const test = require("node:test");
const assert = require("node:assert/strict");
const { performance } = require("node:perf_hooks");
const r = require("../../lib/reservation");
const waiting = require("../../lib/waiting");

const GCRA = { algorithm: "gcra", limit: 10, windowMs: 1000, burst: 1 };

test("the 7-field RESP2 reply: the five fields, then delayMs and atMs", () => {
  const d = r.parseReservation([1, 1, 0, 0, 1000, 300, 1700000000300], "functions", GCRA);
  assert.equal(d.admitted, true);
  assert.equal(d.shadow, false);
  assert.equal(d.retryAfterMs, 0);
  assert.equal(d.delayMs, 300);
  assert.equal(d.atMs, 1700000000300);
  assert.equal(d.windowMs, 1000);
  assert.ok(Object.isFrozen(d));
  // Strings and bigints, as some clients give them.
  const s = r.parseReservation(["0", "1", "0", "4200", "4200", "-1", "-1"], "module", GCRA);
  assert.equal(s.admitted, false);
  assert.equal(s.retryAfterMs, 4200);
  assert.deepEqual([s.delayMs, s.atMs], [-1, -1]);
  const b = r.parseReservation([1n, 1n, 0n, 0n, 100n, 7n, 1700000000007n], "module", GCRA);
  assert.deepEqual([b.delayMs, b.atMs], [7, 1700000000007]);
});

test("a leaky admission's delay stays in retryAfterMs: not a shadow refusal", () => {
  const d = r.parseReservation([1, 5, 0, 120, 600, 120, 1700000000120], "functions", { ...GCRA, algorithm: "leaky" });
  assert.equal(d.shadow, false);
  assert.equal(d.retryAfterMs, 120);
  assert.equal(d.delayMs, 120);
});

test("the RESP3 map in every shape a client gives it", () => {
  const fields = { admitted: 1, limit: 1, remaining: 0, retry_after_ms: 0, reset_after_ms: 1000, delay_ms: 250, at_ms: 1700000000250 };
  const shapes = [
    new Map(Object.entries(fields)),
    fields,
    Object.entries(fields).flat(), // ioredis's flat array
    Object.entries(fields).map(([key, value]) => ({ key, value })), // valkey-glide's records
  ];
  for (const reply of shapes) {
    const d = r.parseReservation(reply, "module", GCRA);
    assert.equal(d.admitted, true);
    assert.equal(d.shadow, false);
    assert.deepEqual([d.delayMs, d.atMs, d.resetAfterMs], [250, 1700000000250, 1000]);
  }
  const refused = r.parseReservation(new Map(Object.entries({ ...fields, admitted: 0, retry_after_ms: 900, delay_ms: -1, at_ms: -1 })), "module", GCRA);
  assert.deepEqual([refused.admitted, refused.retryAfterMs, refused.delayMs, refused.atMs], [false, 900, -1, -1]);
});

test("a reply that is neither shape is a bad reply, never an outage", () => {
  for (const reply of [[1, 1, 0, 0, 1000], [1, 1, 0, 0, 1000, 5], null, "OK", new Map([["admitted", 1]])]) {
    assert.throws(() => r.parseReservation(reply, "module", GCRA), (e) => e.unreachable === false, String(reply));
  }
});

test("the sleep: a booked grant's delayMs, else nothing", () => {
  const base = { admitted: true, shadow: false, delayMs: 0, atMs: 1 };
  assert.equal(r.sleepMsOf({ ...base, delayMs: 480 }), 480);
  assert.equal(r.sleepMsOf(base), 0);
  assert.equal(r.sleepMsOf({ ...base, admitted: false, delayMs: -1 }), 0);
  assert.equal(r.sleepMsOf({ ...base, shadow: true, delayMs: 50 }), 0);
  assert.equal(r.sleepMsOf({ admitted: true, shadow: false }), 0, "a decision without a booking");
});

test("the words: RESERVE after the call's own, the cancel with the same policy, COST and AT", () => {
  assert.deepEqual(r.reserveArgs(["ALGO", "gcra", "COST", "2"], 5000), ["ALGO", "gcra", "COST", "2", "RESERVE", "5000"]);
  const booked = { delayMs: 300, atMs: 1700000000300 };
  assert.deepEqual(r.giveBackArgs({ ...GCRA, penalty: 500 }, 2, booked), [
    "ALGO", "gcra", "LIMIT", "10", "WINDOW", "1000", "BURST", "1", "PENALTY", "500", "COST", "2", "AT", "1700000000300",
  ]);
  // A grant for now is given back with a plain refund.
  assert.deepEqual(r.giveBackArgs(GCRA, 1, { delayMs: 0, atMs: 5 }), ["ALGO", "gcra", "LIMIT", "10", "WINDOW", "1000", "BURST", "1", "COST", "1"]);
  assert.deepEqual(r.giveBackArgs({ meta: "m" }, 1, {}), ["COST", "1"]);
});

test("the way a wait goes: BLOCK only when asked on the module; RESERVE for the buckets; retry for the windows", () => {
  assert.equal(r.waitMode(GCRA, { backend: "module", block: true }), "block");
  assert.equal(r.waitMode(GCRA, { backend: "functions", block: true }), "reserve");
  for (const algorithm of ["gcra", "token", "leaky"]) {
    assert.equal(r.waitMode({ algorithm }, { backend: "module" }), "reserve");
    assert.equal(r.waitMode({ algorithm }, { backend: "functions" }), "reserve");
  }
  assert.equal(r.waitMode({ algorithm: "fixed" }, { backend: "module" }), "retry");
  assert.equal(r.waitMode({ algorithm: "sliding" }, { backend: "functions" }), "retry");
  assert.equal(r.waitMode({ limit: 1, windowMs: 10 }, { backend: "module" }), "retry", "fixed is the default");
  assert.equal(r.waitMode({ meta: "m" }, { backend: "functions" }), "reserve-or-retry");
});

test("which error replies mean RESERVE cannot apply", () => {
  const yes = [
    "ERR RESERVE needs ALGO gcra, token or leaky: a window's count cannot book a slot in a later window",
    "ERR unknown option 'RESERVE'",
  ];
  for (const m of yes) assert.equal(r.isReserveUnsupported(new Error(m)), true, m);
  for (const m of ["ERR RESERVE must be an integer from 0", "WRONGTYPE", "ERR unknown option 'FOO'"]) {
    assert.equal(r.isReserveUnsupported(new Error(m)), false, m);
  }
});

test("the sleep lasts its ms by the monotonic clock, and an abort ends it with the signal's reason", async () => {
  const t0 = performance.now();
  await waiting.sleep(30);
  assert.ok(performance.now() - t0 >= 30);
  const controller = new AbortController();
  const t1 = performance.now();
  setTimeout(() => controller.abort(new Error("stop")), 20);
  await assert.rejects(() => waiting.sleep(5000, controller.signal), /stop/);
  assert.ok(performance.now() - t1 < 2000);
  await assert.rejects(() => waiting.sleep(10, controller.signal), /stop/, "already aborted");
});

test("an abort while sleeping on a slot gives it back once, then rejects", async () => {
  const booked = { admitted: true, shadow: false, delayMs: 5000, atMs: 9 };
  const controller = new AbortController();
  let givenBack = 0;
  setTimeout(() => controller.abort(new Error("cancelled")), 10);
  await assert.rejects(
    () => waiting.sleepOnSlot(booked, controller.signal, async () => void givenBack++),
    /cancelled/,
  );
  assert.equal(givenBack, 1);
  // A refusal booked nothing: nothing to give back.
  await assert.rejects(() => waiting.sleepOnSlot({ ...booked, admitted: false }, controller.signal, async () => void givenBack++));
  assert.equal(givenBack, 1);
  // A give-back that fails does not hide the abort.
  await assert.rejects(() => waiting.sleepOnSlot(booked, controller.signal, async () => { throw new Error("down"); }), /cancelled/);
  // No signal: it just sleeps.
  await waiting.sleepOnSlot({ ...booked, delayMs: 5 }, undefined, async () => void givenBack++);
  assert.equal(givenBack, 1);
  assert.throws(() => waiting.signalOption("yes"), /signal must be an AbortSignal/);
});
