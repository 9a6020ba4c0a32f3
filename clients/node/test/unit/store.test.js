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
  const client = scripted((words) => (words[0] === "RL.ADMIT" ? [admitted ? 1 : 0, 2, 0, 500, 900] : [1, 2, 1, 0, 900]));
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

test("fail-closed: an UnavailableError with the configured status and Retry-After", async () => {
  const client = scripted(() => [1, 1e12, 1e12 - 1, 0, 1000]);
  client.state.down = true;
  const s = store(client, { failure: "closed", failureStatus: 500 });
  await assert.rejects(s.increment("k"), (e) => e.name === "UnavailableError" && e.status === 500 && e.headers["Retry-After"] === "1");
  s.shutdown();
});
