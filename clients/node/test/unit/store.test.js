// ValkeyStore's bookkeeping against a scripted client (no server): which
// commands a skipped request sends back. A request whose increment counted
// nothing (a refusal of the server, a limit of 0, an answer of the failure
// policy) must give nothing back: a refund would free another request's hit.
//   node --test test/unit/
"use strict";

const test = require("node:test");
const assert = require("node:assert/strict");
const { ValkeyStore } = require("../..");

// A client that answers RL.ADMIT/RL.REFUND with `admit` (a function of the
// words), or fails like a dropped connection while `down`, and records what it was sent.
function scripted(admit) {
  const sent = [];
  const state = { down: false };
  const sendCommand = async (...words) => {
    if (state.down) throw new Error("connect ECONNREFUSED 127.0.0.1:6379");
    sent.push(words.join(" "));
    return admit(words);
  };
  return { sent, state, sendCommand };
}

const store = (client, options = {}) => {
  const s = new ValkeyStore({ sendCommand: client.sendCommand, onError: () => {}, ...options });
  s.init({ windowMs: 1000, limit: 2 });
  return s;
};

test("express-rate-limit's way: a hit failed open is not refunded when Valkey is back", async () => {
  const client = scripted(() => [1, 1e12, 1e12 - 1, 0, 1000]);
  const s = store(client);
  client.state.down = true;
  assert.deepEqual((await s.increment("k")).totalHits, 1);
  client.state.down = false;
  await s.decrement("k");
  assert.deepEqual(client.sent, [], "nothing refunded");
  // A counted hit is (once the store tries Valkey again: 500 ms after it fell).
  await new Promise((resolve) => setTimeout(resolve, 550));
  await s.increment("k");
  await s.decrement("k");
  assert.deepEqual(client.sent.map((w) => w.split(" ")[0]), ["RL.ADMIT", "RL.REFUND"]);
  s.shutdown();
});

test("the server's way: a refusal and a limit of 0 give nothing back; an admission is refunded", async () => {
  let admitted = false;
  // (Admitted, retry_after_ms is 0: admitted with a wait is a shadow refusal.)
  const client = scripted((words) =>
    words[0] === "RL.ADMIT" ? (admitted ? [1, 2, 0, 0, 900] : [0, 2, 0, 500, 900]) : [1, 2, 1, 0, 900],
  );
  const s = store(client, { algorithm: "sliding" });
  const info = await s.increment("k");
  assert.equal(info.totalHits, 3, "refused: limit + 1");
  await s.decrement("k");
  assert.deepEqual(client.sent.map((w) => w.split(" ")[0]), ["RL.ADMIT"], "the refusal gave nothing back");
  admitted = true;
  await s.increment("k");
  await s.decrement("k");
  assert.deepEqual(client.sent.map((w) => w.split(" ")[0]), ["RL.ADMIT", "RL.ADMIT", "RL.REFUND"]);
  const zero = store(client, { algorithm: "sliding" });
  zero.init({ windowMs: 1000, limit: 0 });
  assert.equal((await zero.increment("z")).totalHits, 1, "limit 0: refused, nothing sent");
  await zero.decrement("z");
  assert.equal(client.sent.length, 3, "nothing sent for limit 0");
  s.shutdown();
  zero.shutdown();
});

test("shadow: the server decides; a shadow refusal passes at the limit, is told to onShadowRefusal, and gives nothing back", async () => {
  const client = scripted(() => [1, 2, 0, 700, 700]);
  const told = [];
  const s = store(client, { shadow: true, penalty: 5000, onShadowRefusal: (key, d) => told.push([key, d.shadow, d.retryAfterMs]) });
  const info = await s.increment("k");
  assert.equal(info.totalHits, 2, "at the limit (2), not over it: express-rate-limit lets it pass");
  assert.deepEqual(told, [["k", true, 700]]);
  assert.deepEqual(client.sent, ["RL.ADMIT rl:k LIMIT 2 WINDOW 1000 SHADOW PENALTY 5000 COST 1"]);
  await s.decrement("k");
  assert.equal(client.sent.length, 1, "a shadow refusal consumed nothing: no refund");
  // A hook that throws is reported, never the request's failure.
  const warned = [];
  const warn = console.warn;
  console.warn = (m) => warned.push(m);
  try {
    const t = store(client, { shadow: true, onShadowRefusal: () => { throw new Error("boom"); } });
    assert.equal((await t.increment("k")).totalHits, 2);
    t.shutdown();
  } finally {
    console.warn = warn;
  }
  assert.match(warned[0], /onShadowRefusal threw: boom/);
  s.shutdown();
  // express-rate-limit's limit of 0 refuses everything; in shadow mode it is
  // a shadow refusal: 0 hits (it passes), told, no call.
  const zero = store(client, { shadow: true, onShadowRefusal: (key, d) => told.push([key, d.shadow, d.retryAfterMs]) });
  zero.init({ windowMs: 1000, limit: 0 });
  assert.equal((await zero.increment("z")).totalHits, 0);
  assert.deepEqual(told.at(-1), ["z", true, -1]);
  assert.equal(client.sent.length, 2, "no call for a limit of 0");
  zero.shutdown();
});

test("calendar and align reach both of the store's ways; bad values are refused when it is built", async () => {
  const client = scripted(() => [1, 1e12, 1e12 - 1, 0, 1000]);
  const counted = store(client, { calendar: "month", tz: "+05:30" });
  await counted.increment("c");
  const aligned = store(client, { align: true });
  await aligned.increment("a");
  assert.deepEqual(client.sent, [
    "RL.ADMIT rl:c LIMIT 1000000000000 CALENDAR month TZ +05:30 COST 1",
    "RL.ADMIT rl:a LIMIT 1000000000000 WINDOW 1000 ALIGN COST 1",
  ]);
  counted.shutdown();
  aligned.shutdown();
  const send = client.sendCommand;
  assert.throws(() => new ValkeyStore({ sendCommand: send, penalty: 0 }), /^ConfigError: penalty must be a safe integer >= 1 \(got 0\)$/);
  assert.throws(() => new ValkeyStore({ sendCommand: send, tz: "+01:00" }), /tz must be left out without calendar/);
  assert.throws(() => new ValkeyStore({ sendCommand: send, escalate: 60000 }), /escalate must be left out without penalty/);
  assert.throws(() => new ValkeyStore({ sendCommand: send, penalty: 5000, escalate: 4000 }), /escalate must be at least penalty \(5000\)/);
  assert.throws(() => new ValkeyStore({ sendCommand: send, calendar: "day", algorithm: "leaky" }), /calendar must be left out with algorithm "leaky"/);
  assert.throws(() => new ValkeyStore({ sendCommand: send, onShadowRefusal: "log" }), /onShadowRefusal must be a function/);
  assert.equal(client.sent.length, 2, "nothing sent for a bad option");
});

test("fail-closed: an UnavailableError with the configured status and Retry-After", async () => {
  const client = scripted(() => [1, 1e12, 1e12 - 1, 0, 1000]);
  client.state.down = true;
  const s = store(client, { failure: "closed", failureStatus: 500 });
  await assert.rejects(s.increment("k"), (e) => e.name === "UnavailableError" && e.status === 500 && e.headers["Retry-After"] === "1");
  s.shutdown();
});

test("escalate: passed to the server with penalty, which then decides", async () => {
  const client = scripted(() => [0, 2, 0, 10000, 10000]);
  const s = store(client, { penalty: 5000, escalate: 60000 });
  const info = await s.increment("k");
  assert.ok(info.totalHits > 2, "refused: over the limit");
  assert.deepEqual(client.sent, ["RL.ADMIT rl:k LIMIT 2 WINDOW 1000 PENALTY 5000 ESCALATE 60000 COST 1"]);
  s.shutdown();
});
