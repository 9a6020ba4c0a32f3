// Waiting (issue 38): one call that books the caller's turn
// (RL.ADMIT ... RESERVE), then a local sleep until it, with no connection
// held and no retry; BLOCK where the caller asked for it on the module;
// sleep-and-retry where the server cannot book (a window's algorithm, a
// server without RESERVE) and for leases on the library. The words and the
// reply are reservation.js's; the limiter is passed in (its run, call,
// link and backend), never required, so nothing here imports upward.
"use strict";

const { performance } = require("node:perf_hooks");
const core = require("./core");
const reservation = require("./reservation");

/**
 * One admit that waits up to `waitMs`: { reply, backend } as the limiter's
 * run gives it, or { decision, backend } for a reservation (its reply read
 * already, with delayMs and atMs). The server call is under the limiter's
 * deadline; the sleep on a booked slot is the caller's (sleepOnSlot).
 */
async function admitWaiting(limiter, { keys, args, waitMs, policy, block, signal }) {
  const backend = await limiter.backend();
  const mode = reservation.waitMode(policy, { backend, block });
  if (mode === "block") return blocking(limiter, core.CALLS.admit, keys, args, waitMs);
  if (mode !== "retry") {
    try {
      const answer = await limiter.run(core.CALLS.admit, keys, reservation.reserveArgs(args, waitMs));
      return { decision: reservation.parseReservation(answer.reply, answer.backend, policy), backend: answer.backend };
    } catch (e) {
      // A window's algorithm named by the META hash, or a server older than RESERVE.
      if (!reservation.isReserveUnsupported(e)) throw e;
    }
  }
  return retrying(limiter, core.CALLS.admit, keys, args, waitMs, signal);
}

/** One acquire that waits up to `waitMs`: BLOCK on the module, sleep-and-retry on the library. */
async function acquireWaiting(limiter, { keys, args, waitMs, signal }) {
  if ((await limiter.backend()) === "module") return blocking(limiter, core.CALLS.acquire, keys, args, waitMs);
  return retrying(limiter, core.CALLS.acquire, keys, args, waitMs, signal);
}

// RL.ADMIT / RL.ACQUIRE ... BLOCK: answered when granted or at waitMs, so
// its deadline is waitMs longer.
function blocking(limiter, call, keys, args, waitMs) {
  return limiter.link.run(() => limiter.call(call, keys, [...args, "BLOCK", String(waitMs)]), waitMs);
}

// Tries until granted, never grantable (retry_after_ms -1) or out of time,
// sleeping retry_after_ms times a random factor in [1, 1.5) between tries.
async function retrying(limiter, call, keys, args, waitMs, signal) {
  const deadline = Date.now() + waitMs;
  for (;;) {
    const answer = await limiter.run(call, keys, args);
    const granted = Number(String(answer.reply[0]));
    const retryAfterMs = Number(String(answer.reply[3]));
    const left = deadline - Date.now();
    if (granted === 1 || retryAfterMs < 0 || left <= 0) return answer;
    await sleep(Math.min(Math.max(retryAfterMs, 1) * (1 + Math.random() / 2), left), signal);
  }
}

/**
 * Sleeps `ms` by the monotonic clock (a timer that fires early is set
 * again for what is left), or rejects with `signal.reason` once `signal`
 * aborts. Nothing outlives it: the timer and the listener go when it settles.
 */
function sleep(ms, signal) {
  return new Promise((resolve, reject) => {
    if (signal && signal.aborted) {
      reject(signal.reason);
      return;
    }
    const end = performance.now() + ms;
    let timer;
    const onAbort = () => {
      clearTimeout(timer);
      reject(signal.reason);
    };
    const tick = () => {
      const left = end - performance.now();
      if (left > 0) {
        timer = setTimeout(tick, Math.ceil(left));
        return;
      }
      if (signal) signal.removeEventListener("abort", onAbort);
      resolve();
    };
    if (signal) signal.addEventListener("abort", onAbort, { once: true });
    tick();
  });
}

/**
 * After a waiting admit's reply: sleeps on a booked slot (delayMs, from the
 * reply's arrival) and resolves; an abort before it ends (or one already
 * fired during the call) gives the grant back once through `giveBack()`
 * (RL.REFUND ... AT atMs for a booked slot) and rejects with the abort's
 * reason. A give-back that fails is not the caller's error: the abort is.
 */
async function sleepOnSlot(decision, signal, giveBack) {
  const aborted = () => signal !== undefined && signal.aborted;
  const granted = decision.admitted && !decision.shadow;
  try {
    await sleep(reservation.sleepMsOf(decision), signal);
    if (aborted()) throw signal.reason;
  } catch (e) {
    if (granted && aborted()) await giveBack().catch(() => {});
    throw e;
  }
}

/** The `signal` option: undefined, or an AbortSignal. */
function signalOption(signal) {
  if (signal === undefined || signal === null) return undefined;
  const ok = typeof signal === "object" && typeof signal.aborted === "boolean" && typeof signal.addEventListener === "function";
  if (!ok) throw new core.ConfigError("signal", "an AbortSignal", signal);
  return signal;
}

module.exports = { admitWaiting, acquireWaiting, sleep, sleepOnSlot, signalOption };
