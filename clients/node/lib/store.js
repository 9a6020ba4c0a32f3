// ValkeyStore: an express-rate-limit 8 Store on the limiter. Two ways to
// count, chosen at construction:
//
// - express-rate-limit's own (the default: the fixed window, no META hash):
//   every hit is counted, refused or not, in a fixed window of `windowMs`
//   (RL.ADMIT with a LIMIT no count reaches), and the middleware compares the
//   count with its `limit`, exactly as it does with its MemoryStore. A limit
//   that is a function of the request, a limit of 0 and the skip options
//   then behave as they do there, and a skipped request only ever gives back
//   the hit it made.
// - the server's (another algorithm, a META hash, shadow or penalty):
//   RL.ADMIT decides with the real policy, and refuses without counting.
//
// In shadow mode (shadow: true, or a META hash's `shadow 1`) the server
// never refuses: a would-be refusal is admitted, consumes nothing, is
// reported to express-rate-limit as exactly the limit (never over it, so the
// request passes and is not counted as limited), and is told to
// onShadowRefusal(key, decision).
//
// Either way a request that express-rate-limit skips afterwards
// (skipFailedRequests: a 429 is a failure) gives back only a hit it made: the
// store remembers, per request, which of its increments counted nothing (a
// refusal, or an answer of the failure policy).
"use strict";

const core = require("./core");
const { Limiter, POLICY_OPTIONS } = require("./limiter");
const { UnavailableError } = require("./errors");
const { followRequests, currentRequest } = require("./context");

// The status of a request refused for want of Valkey: an HTTP error status.
const HTTP_ERROR_STATUS = { rule: "an HTTP status from 400 to 599", ok: (v) => Number.isInteger(v) && v >= 400 && v <= 599 };
const BUCKETS = ["token", "gcra", "leaky"];
// The policy options of issue 27 the store passes through to every call.
const PASSED = ["shadow", "penalty", "align", "calendar", "tz", "escalate"];

// The reset time handed to express-rate-limit: `ms` from now, rounded up to
// a whole second, so that the middleware's own rounding a moment later
// (ceil((resetTime - now) / 1000)) still gives exactly ceil(ms / 1000).
const resetAt = (ms) => new Date(Date.now() + core.ceilSeconds(Math.max(0, ms)) * 1000);

function requestOf(context, option) {
  if (!context) {
    throw new Error(`valkey-ratelimit: ${option} is a function of the request, but this call is not part of an HTTP request`);
  }
  return [context.request, context.response];
}

class ValkeyStore {
  /**
   * Options: sendCommand (required), prefix (default "rl:"), algorithm,
   * burst, meta (a META hash key, or a function of the request giving one),
   * shadow, penalty, align, calendar, tz, escalate (the server's policy options),
   * onShadowRefusal (told of each shadow refusal: (key, decision)),
   * failureStatus (default 503), and the Limiter's: backend, failure,
   * timeoutMs, library, onError, waitReplicas, waitTimeoutMs, unconfirmed.
   * express-rate-limit's limit and windowMs are the policy (init); with
   * calendar, the period is the window and windowMs only sizes the
   * bookkeeping.
   */
  constructor(options = {}) {
    if (options === null || typeof options !== "object") throw new core.ConfigError("options", "an object", options);
    const {
      prefix = "rl:",
      algorithm,
      burst,
      meta,
      failureStatus = core.UNAVAILABLE_STATUS,
      onShadowRefusal,
      shadow,
      penalty,
      align,
      calendar,
      tz,
      escalate,
      ...limiterOptions
    } = options;
    const policyOption = Object.keys(limiterOptions).find((k) => POLICY_OPTIONS.includes(k));
    if (policyOption !== undefined) {
      throw core.ConfigError.unknown(policyOption, "ValkeyStore (express-rate-limit's limit and windowMs are the policy)");
    }
    this.limiter = new Limiter({ ...limiterOptions, prefix });
    this.prefix = prefix;
    this.algorithm = algorithm === undefined ? undefined : core.oneOf("algorithm", algorithm, core.ALGORITHMS);
    if (burst !== undefined) {
      core.safeInteger("burst", burst, 0);
      if (meta === undefined && !BUCKETS.includes(algorithm)) {
        throw new core.ConfigError("burst", "left out unless algorithm is token, gcra or leaky", burst);
      }
    }
    this.burst = burst;
    this.meta = meta === undefined ? undefined : core.valueOrFunction("meta", meta, core.KEY);
    this.failureStatus = core.check("failureStatus", failureStatus, HTTP_ERROR_STATUS);
    this.onShadowRefusal = onShadowRefusal === undefined ? undefined : core.fn("onShadowRefusal", onShadowRefusal);
    // Checked now, as each call would (the META hash, perhaps a function of
    // the request, stands for itself: TZ may go with its calendar field).
    const checked = core.checkPolicy(
      { algorithm, meta: meta === undefined ? undefined : "meta", shadow, penalty, align, calendar, tz, escalate },
      { needsRate: false },
    );
    this.passed = {};
    for (const k of PASSED) if (checked[k] !== undefined) this.passed[k] = checked[k];
    // Who decides: the middleware (counting every hit) or the server (which
    // alone can refuse, or shadow-refuse, or hold a penalty).
    this.decides =
      meta !== undefined ||
      (algorithm !== undefined && algorithm !== "fixed") ||
      this.passed.shadow === true ||
      this.passed.penalty !== undefined;
    followRequests();
    // Keys live in Valkey, shared by every instance.
    this.localKeys = false;
    this.windowMs = undefined;
    this.limit = undefined;
    this.initError = undefined;
    // Which increments counted nothing: per request where there is one, else
    // per key for at most two windows (express-rate-limit decrements in the
    // process that incremented, right after the response).
    this.marks = new WeakMap();
    this.uncounted = [new Map(), new Map()];
    this.sweeper = undefined;
  }

  /** Called by express-rate-limit with its options: takes `limit` and `windowMs`. */
  init(options) {
    try {
      this.windowMs = core.safeInteger("windowMs", options.windowMs, 1);
      this.limit = core.valueOrFunction("limit", options.limit ?? options.max, core.SAFE_INTEGER(0));
      this.initError = undefined;
    } catch (e) {
      // express-rate-limit only logs an error of init: every request raises it too.
      this.initError = e;
      throw e;
    }
    if (this.sweeper === undefined) {
      this.sweeper = setInterval(() => this.uncounted.unshift(new Map()) && this.uncounted.pop(), this.windowMs);
      if (typeof this.sweeper.unref === "function") this.sweeper.unref();
    }
  }

  ready() {
    if (this.initError) throw this.initError;
    if (this.windowMs === undefined) {
      throw new Error("valkey-ratelimit: ValkeyStore used before init(): pass it to rateLimit({ store })");
    }
  }

  // The policy of a call the server decides: the META hash's (its max and
  // duration), or express-rate-limit's limit and windowMs; with the store's
  // algorithm and burst.
  async serverPolicy(context) {
    const policy = { ...this.passed };
    if (this.algorithm !== undefined) policy.algorithm = this.algorithm;
    if (this.burst !== undefined) policy.burst = this.burst;
    if (this.meta !== undefined) {
      policy.meta =
        typeof this.meta === "function" ? core.keyPart("meta", await this.meta(...requestOf(context, "meta"))) : this.meta;
      return policy;
    }
    if (this.passed.calendar === undefined) policy.windowMs = this.windowMs;
    policy.limit = await this.limitFor(context);
    return policy;
  }

  // The policy of express-rate-limit's way: a LIMIT no count reaches, in
  // its window (or the calendar period), aligned if asked.
  countPolicy() {
    const policy = { ...this.passed, limit: core.COUNT_EVERY_HIT };
    if (this.passed.calendar === undefined) policy.windowMs = this.windowMs;
    return policy;
  }

  // Tells onShadowRefusal; what it throws or rejects with is reported, never
  // the request's failure.
  shadowRefused(key, decision) {
    if (this.onShadowRefusal === undefined) return;
    const warn = (e) => console.warn(`valkey-ratelimit: onShadowRefusal threw: ${core.messageOf(e)}`);
    try {
      const out = this.onShadowRefusal(key, decision);
      if (out && typeof out.then === "function") out.then(undefined, warn);
    } catch (e) {
      warn(e);
    }
  }

  // express-rate-limit's limit for this request.
  async limitFor(context) {
    if (typeof this.limit !== "function") return this.limit;
    return core.safeInteger("limit", await this.limit(...requestOf(context, "limit")), 0);
  }

  // RL.ADMIT with the store's failure policy: null when failing open; a
  // refusal for want of Valkey, or of replicas, is an UnavailableError.
  async admit(key, policy) {
    let decision;
    try {
      decision = await this.limiter.admit(key, { ...policy, failure: "throw" });
    } catch (e) {
      if (core.errorKind(e) !== "unreachable") throw e;
      if (this.limiter.failure === "open") return null;
      throw new UnavailableError(`Valkey is unreachable (${core.messageOf(e)}): failing closed`, {
        status: this.failureStatus,
        cause: e,
      });
    }
    if (!decision.admitted && decision.unconfirmed !== undefined) {
      throw new UnavailableError(
        `the grant was confirmed by ${decision.unconfirmed} of ${this.limiter.waitReplicas} replicas: refused`,
        { status: this.failureStatus },
      );
    }
    return decision;
  }

  async increment(key) {
    this.ready();
    return this.decides ? this.decide(key) : this.count(key);
  }

  // express-rate-limit's way: count the hit, report the count.
  async count(key) {
    const context = currentRequest();
    const policy = this.countPolicy();
    const decision = await this.admit(key, policy);
    this.mark(context, key, policy, decision !== null);
    // Failing open: the first hit of a fresh window.
    if (decision === null) return { totalHits: 1, resetTime: resetAt(this.windowMs) };
    return { totalHits: core.COUNT_EVERY_HIT - decision.remaining, resetTime: resetAt(decision.resetAfterMs) };
  }

  // The server's way: a refusal is reported as the limit + 1 hits, an
  // admission as the hits used (at least 1, at most the limit), against
  // express-rate-limit's limit where it is known. A shadow refusal is an
  // admission: at most the limit, so express-rate-limit lets it pass.
  async decide(key) {
    const context = currentRequest();
    const policy = await this.serverPolicy(context);
    const limit = policy.meta === undefined ? policy.limit : await this.limitFor(context).catch(() => undefined);
    if (policy.limit === 0) {
      // express-rate-limit's limit of 0 refuses everything; RL.ADMIT's would
      // admit. In shadow mode: a shadow refusal (0 hits: it passes), with no call.
      this.mark(context, key, policy, false);
      if (this.passed.shadow) {
        this.shadowRefused(key, core.zeroLimitShadowRefusal(policy));
        return { totalHits: 0, resetTime: resetAt(this.windowMs) };
      }
      return { totalHits: 1, resetTime: resetAt(this.windowMs) };
    }
    const decision = await this.admit(key, policy);
    // A refusal, and a shadow refusal, counted nothing: nothing to give back.
    this.mark(context, key, policy, decision !== null && decision.admitted && !decision.shadow);
    if (decision === null) return { totalHits: 1, resetTime: resetAt(this.windowMs) };
    if (decision.shadow) this.shadowRefused(key, decision);
    if (!decision.admitted) {
      const wait = decision.retryAfterMs >= 0 ? decision.retryAfterMs : decision.resetAfterMs;
      return { totalHits: Math.max(limit ?? 0, decision.limit) + 1, resetTime: resetAt(wait) };
    }
    if (decision.limit === 0) return { totalHits: 1, resetTime: resetAt(this.windowMs) }; // unlimited by its hash
    const cap = Math.max(1, limit ?? decision.limit);
    const used = Math.min(cap, Math.max(1, cap - decision.remaining));
    return { totalHits: used, resetTime: resetAt(decision.resetAfterMs) };
  }

  // Remembers whether this request's increment of `key` counted a hit, for its decrement.
  mark(context, key, policy, counted) {
    if (context) {
      let keys = this.marks.get(context.request);
      if (!keys) this.marks.set(context.request, (keys = new Map()));
      keys.set(key, { counted, policy });
    } else if (!counted) {
      const current = this.uncounted[0];
      current.set(key, (current.get(key) ?? 0) + 1);
    }
  }

  // The mark of this request's increment of `key` (taken: a request is
  // decremented once), or, outside a request, an increment of `key` that
  // counted nothing, if one is pending.
  takeMark(context, key) {
    if (context) {
      const keys = this.marks.get(context.request);
      const mark = keys && keys.get(key);
      if (mark) keys.delete(key);
      return mark;
    }
    for (const generation of this.uncounted) {
      const n = generation.get(key);
      if (n) {
        if (n === 1) generation.delete(key);
        else generation.set(key, n - 1);
        return { counted: false };
      }
    }
    return undefined;
  }

  /**
   * express-rate-limit's skipFailedRequests / skipSuccessfulRequests: gives
   * back the hit the request made (RL.REFUND), and nothing for a request
   * whose increment counted none (refused by the server, or failed open).
   */
  async decrement(key) {
    this.ready();
    const context = currentRequest();
    const mark = this.takeMark(context, key);
    if (mark && !mark.counted) return;
    let policy = mark && mark.policy;
    if (!policy) {
      policy = this.decides ? await this.serverPolicy(context) : this.countPolicy();
    }
    if (policy.limit === 0) return;
    await this.limiter.refund(key, policy);
  }

  async resetKey(key) {
    await this.limiter.reset(key);
  }

  /** A peek (COST 0): undefined when the key has no hits. */
  async get(key) {
    this.ready();
    const policy = this.decides ? await this.serverPolicy(currentRequest()) : this.countPolicy();
    if (policy.limit === 0) return undefined;
    const decision = await this.limiter.admit(key, { ...policy, cost: 0, failure: "throw" });
    const used = decision.limit - decision.remaining;
    if (decision.limit === 0 || used <= 0) return undefined;
    return { totalHits: used, resetTime: resetAt(decision.resetAfterMs) };
  }

  /** Stops the timer that forgets old marks. */
  shutdown() {
    clearInterval(this.sweeper);
    this.sweeper = undefined;
  }
}

module.exports = { ValkeyStore };
