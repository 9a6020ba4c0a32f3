// The link to Valkey as one limiter sees it: every operation under a
// deadline, and whether Valkey is up or down. While it is down, one call at a
// time probes it, at most every PROBE_INTERVAL_MS, and the others are
// answered at once (DownError), so an outage neither makes requests wait nor
// piles commands into the client's offline queue. Each transition, down and
// up, is reported once.
"use strict";

const { errorKind, messageOf } = require("./core");
const { TimeoutError, DownError } = require("./errors");

// While Valkey is down, how often a call may try it.
const PROBE_INTERVAL_MS = 500;

/** `promise`, or a TimeoutError once `ms` have passed; the timer never outlives it. */
function withDeadline(promise, ms) {
  let timer;
  const timeout = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new TimeoutError(ms)), ms);
  });
  return Promise.race([promise, timeout]).finally(() => clearTimeout(timer));
}

// Without an onError hook, a transition is one line on stderr.
function warn(event) {
  if (event.state === "down") {
    console.warn(`valkey-ratelimit: Valkey unreachable, failing ${event.failure}: ${messageOf(event.error)}`);
  } else {
    console.warn(`valkey-ratelimit: Valkey reachable again after ${event.downForMs} ms`);
  }
}

class Link {
  /**
   * `failure` names the policy in the reports; `onError(event)` gets
   * { state: "down", error, failure } and { state: "up", downForMs }.
   */
  constructor({ timeoutMs, failure, onError }) {
    this.timeoutMs = timeoutMs;
    this.failure = failure;
    this.report = onError || warn;
    this.downSince = null;
    this.probing = false;
    this.nextProbe = 0;
  }

  get down() {
    return this.downSince !== null;
  }

  /**
   * Runs `work()` (which talks to Valkey) under the deadline, `extraMs` more
   * for a call that waits on purpose (WAIT). An unreachable Valkey rejects
   * with the client's error, a TimeoutError or, while another call probes, a
   * DownError.
   */
  async run(work, extraMs = 0) {
    if (this.down) {
      if (this.probing || Date.now() < this.nextProbe) throw new DownError(this.cause);
      this.probing = true;
    }
    const probe = this.down;
    try {
      const result = await withDeadline(Promise.resolve().then(work), this.timeoutMs + extraMs);
      this.up();
      return result;
    } catch (e) {
      if (errorKind(e) === "unreachable") this.fell(e);
      else this.up(); // the server answered, with an error
      throw e;
    } finally {
      if (probe) {
        this.probing = false;
        this.nextProbe = Date.now() + PROBE_INTERVAL_MS;
      }
    }
  }

  fell(error) {
    this.cause = error;
    if (this.down) return;
    this.downSince = Date.now();
    this.nextProbe = this.downSince + PROBE_INTERVAL_MS;
    this.notify({ state: "down", error, failure: this.failure });
  }

  up() {
    if (!this.down) return;
    const downForMs = Date.now() - this.downSince;
    this.downSince = null;
    this.notify({ state: "up", downForMs });
  }

  notify(event) {
    try {
      this.report(event);
    } catch {
      // A failing hook must not turn into a failed request.
    }
  }
}

module.exports = { Link, withDeadline };
