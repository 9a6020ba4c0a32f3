// The pure core of waiting (issue 38): which way a `wait` goes, the words of
// a reservation (RL.ADMIT ... RESERVE max_ms) and of its cancel
// (RL.REFUND ... AT at_ms), the 7-field reply read into a Decision, and how
// long to sleep on a booked slot. No I/O, no timers: waiting.js sleeps.
"use strict";

const core = require("./core");

// The algorithms whose slots have a time, so the server can book one.
const BOOKING_ALGORITHMS = Object.freeze(["gcra", "token", "leaky"]);
const RESERVATION_FIELDS = Object.freeze(["admitted", "limit", "remaining", "retry_after_ms", "reset_after_ms", "delay_ms", "at_ms"]);

/**
 * How a wait of `policy` goes on `backend`:
 * - "block": RL.ADMIT ... BLOCK, only where the module is loaded and the
 *   caller asked for it (`block: true`, on a connection it can spare);
 * - "reserve": one RL.ADMIT ... RESERVE, then a local sleep until the slot;
 * - "retry": a window (fixed, sliding; fixed is the default algorithm)
 *   cannot book a slot in a later window: sleep retryAfterMs and try again;
 * - "reserve-or-retry": the algorithm comes from a META hash: RESERVE, and
 *   "retry" if the server answers that this algorithm cannot book.
 */
function waitMode(policy, { backend, block = false }) {
  if (block && backend === "module") return "block";
  if (policy.algorithm !== undefined) return BOOKING_ALGORITHMS.includes(policy.algorithm) ? "reserve" : "retry";
  return policy.meta === undefined ? "retry" : "reserve-or-retry";
}

/** RL.ADMIT's arguments with `RESERVE waitMs`. */
const reserveArgs = (args, waitMs) => [...args, "RESERVE", String(waitMs)];

/**
 * The arguments that give back a grant of `cost`: the call's own policy
 * options and COST, and `AT atMs` for a slot booked ahead (delayMs > 0),
 * which gives back only what later bookings have not overtaken. A grant
 * for now (delayMs 0) is given back with a plain refund.
 */
function giveBackArgs(policy, cost, decision) {
  const args = [...core.policyArgs(policy), "COST", String(cost)];
  return decision.delayMs > 0 ? [...args, "AT", String(decision.atMs)] : args;
}

/** Whether an error reply says that RESERVE cannot apply here (a window's algorithm, or a server without it). */
const isReserveUnsupported = (e) => /RESERVE needs|unknown option '?RESERVE/i.test(core.messageOf(e));

/**
 * RL.ADMIT ... RESERVE's reply: the usual five fields, then `delay_ms` and
 * `at_ms` (a RESP2 array of 7, or the module's RESP3 map in any of the
 * shapes core.parseDecision reads), as a frozen Decision with `delayMs`
 * and `atMs` (both -1 on a refusal).
 */
function parseReservation(reply, backend, policy = {}) {
  let decision;
  let delay;
  let at;
  const byName = namedFields(reply);
  if (byName) {
    delay = byName.get("delay_ms");
    at = byName.get("at_ms");
    byName.delete("delay_ms");
    byName.delete("at_ms");
    decision = core.parseDecision(byName, backend, policy);
  } else {
    if (!Array.isArray(reply) || reply.length !== RESERVATION_FIELDS.length) {
      throw core.badReply(`unexpected RL.ADMIT ... RESERVE reply ${core.show(reply)}`);
    }
    decision = core.parseDecision(reply.slice(0, 5), backend, policy);
    [delay, at] = reply.slice(5);
  }
  return Object.freeze({ ...decision, delayMs: core.toInt(delay), atMs: core.toInt(at) });
}

// A map reply's fields by name, in any shape a client gives it (a Map, an
// object, glide's { key, value } records, ioredis's flat [name, value, ...]
// array); undefined for a RESP2 array.
function namedFields(reply) {
  if (reply instanceof Map) return new Map([...reply].map(([k, v]) => [String(k), v]));
  if (Array.isArray(reply)) {
    if (reply.length > 0 && reply.every((x) => x !== null && typeof x === "object" && "key" in x && "value" in x)) {
      return new Map(reply.map(({ key, value }) => [String(key), value]));
    }
    const flat =
      reply.length === 2 * RESERVATION_FIELDS.length || reply.length === 2 * RESERVATION_FIELDS.length + 2;
    if (flat && RESERVATION_FIELDS.every((f) => reply.some((x, i) => i % 2 === 0 && String(x) === f))) {
      const out = new Map();
      for (let i = 0; i < reply.length; i += 2) out.set(String(reply[i]), reply[i + 1]);
      return out;
    }
    return undefined;
  }
  if (reply !== null && typeof reply === "object") return new Map(Object.entries(reply));
  return undefined;
}

/**
 * How long (ms) to sleep on a decision before going ahead: the server's
 * delayMs for a booked slot, counted from the reply's arrival (the server
 * read its clock before it answered, so the sleep never ends before atMs
 * by the server's clock); 0 otherwise.
 */
const sleepMsOf = (decision) => (decision.admitted && !decision.shadow && decision.delayMs > 0 ? decision.delayMs : 0);

module.exports = {
  BOOKING_ALGORITHMS,
  RESERVATION_FIELDS,
  waitMode,
  reserveArgs,
  giveBackArgs,
  isReserveUnsupported,
  parseReservation,
  sleepMsOf,
};
