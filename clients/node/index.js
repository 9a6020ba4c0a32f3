// valkey-ratelimit for Node.js: the client side of the limiter. One call
// per decision, sent through the caller's own client (`sendCommand`), to the
// module (RL.*) or, where modules are not allowed, to the FUNCTION library
// (FCALL rl_*); the backend is found on first use and remembered per client.
// On top of it: `Limiter` (plain API, and the concurrency leases: acquire,
// release, extend, inFlight, withLease), `ValkeyStore` (express-rate-limit 8
// Store) and `headers()` (the IETF RateLimit header fields).
"use strict";

const ALGORITHMS = ["fixed", "sliding", "token", "gcra", "leaky"];
const BACKENDS = ["auto", "module", "functions"];
const FAILURE_POLICIES = ["open", "closed"];
// How long a fail-closed refusal tells the caller to wait.
const FAIL_CLOSED_RETRY_MS = 1000;
// Error codes of a server that is there but cannot answer now: treated as
// unreachable, like a refused connection or a timeout.
const UNAVAILABLE_CODES = ["LOADING", "BUSY", "MASTERDOWN", "CLUSTERDOWN", "TRYAGAIN"];

const LOAD_HINT =
  "the valkey-ratelimit module is not loaded and neither is its FUNCTION library: " +
  "load functions/ratelimit.lua (`make functions HOST=.. PORT=..`, or " +
  "`valkey-cli FUNCTION LOAD \"$(cat functions/ratelimit.lua)\"`; on a cluster " +
  "scripts/load-functions-cluster.sh), or pass its source as the `library` option " +
  "to have this client load it";

/** Raised when neither backend is available and the library may not be loaded. */
class BackendMissingError extends Error {
  constructor(cause) {
    super(LOAD_HINT);
    this.name = "BackendMissingError";
    this.cause = cause;
  }
}

/** Raised when Valkey does not answer within `timeoutMs`. */
class TimeoutError extends Error {
  constructor(ms) {
    super(`valkey-ratelimit: no reply from Valkey within ${ms} ms`);
    this.name = "TimeoutError";
  }
}

/** withLease found every slot taken: `fn` did not run. */
class LeaseRefusedError extends Error {
  constructor(key, lease) {
    super(
      `valkey-ratelimit: lease on ${key} refused: ${lease.inFlight} of ${lease.limit} in flight, ` +
        `retry after ${lease.retryAfterMs} ms`,
    );
    this.name = "LeaseRefusedError";
    this.key = key;
    this.lease = lease;
    this.retryAfterMs = lease.retryAfterMs;
  }
}

/** The lease is no longer live (RL.EXTEND or RL.RELEASE answered 0): its slot may be someone else's. */
class LeaseLostError extends Error {
  constructor(key, leaseId) {
    super(`valkey-ratelimit: lease ${leaseId} on ${key} was lost: its slot may be someone else's now`);
    this.name = "LeaseLostError";
    this.key = key;
    this.leaseId = leaseId;
  }
}

// The message of a thrown value, whatever the client threw.
const messageOf = (e) => String(e && e.message !== undefined ? e.message : e);

const isUnknownCommand = (e) => /unknown command/i.test(messageOf(e));
const isFunctionMissing = (e) => /function not found/i.test(messageOf(e));

// An error reply from the server (`ERR ...`, `WRONGTYPE ...`, ...): the server
// answered, so the failure policy does not apply, except for the codes of a
// server that cannot answer now. Anything else (refused connection, closed
// socket, timeout) means Valkey is unreachable.
function isUnreachable(e) {
  if (e instanceof TimeoutError) return true;
  const code = /^([A-Z][A-Z0-9_]*)(\s|$)/.exec(messageOf(e));
  const reply = (e && e.name === "ReplyError") || code !== null;
  if (!reply) return true;
  return code !== null && UNAVAILABLE_CODES.includes(code[1]);
}

function withTimeout(promise, ms) {
  if (!ms) return promise;
  let timer;
  const timeout = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new TimeoutError(ms)), ms);
  });
  return Promise.race([promise, timeout]).finally(() => clearTimeout(timer));
}

// A reply integer from any client: number, bigint or numeric string.
function toInt(v) {
  const n = typeof v === "bigint" ? Number(v) : Number(v);
  if (!Number.isSafeInteger(n)) {
    throw new Error(`valkey-ratelimit: expected an integer in the reply, got ${String(v)}`);
  }
  return n;
}

const FIELDS = ["admitted", "limit", "remaining", "retry_after_ms", "reset_after_ms"];

// RL.ADMIT / RL.REFUND reply: a RESP2 array, or the module's RESP3 map (a
// Map or a plain object, depending on the client).
function parseDecision(reply, backend) {
  let values;
  if (Array.isArray(reply)) {
    values = reply;
  } else if (reply instanceof Map) {
    values = FIELDS.map((f) => reply.get(f));
  } else if (reply && typeof reply === "object") {
    values = FIELDS.map((f) => reply[f]);
  } else {
    throw new Error(`valkey-ratelimit: unexpected reply ${String(reply)}`);
  }
  const [admitted, limit, remaining, retryAfterMs, resetAfterMs] = values.map(toInt);
  return Object.freeze({
    admitted: admitted === 1,
    limit,
    remaining,
    retryAfterMs,
    resetAfterMs,
    backend,
  });
}

const LEASE_FIELDS = ["acquired", "limit", "in_flight", "retry_after_ms", "lease_id"];

// RL.ACQUIRE reply: a RESP2 array, or the module's RESP3 map.
function parseLease(reply, backend) {
  let values;
  if (Array.isArray(reply)) {
    values = reply;
  } else if (reply instanceof Map) {
    values = LEASE_FIELDS.map((f) => reply.get(f));
  } else if (reply && typeof reply === "object") {
    values = LEASE_FIELDS.map((f) => reply[f]);
  } else {
    throw new Error(`valkey-ratelimit: unexpected RL.ACQUIRE reply ${String(reply)}`);
  }
  if (values.length !== 5) throw new Error(`valkey-ratelimit: unexpected RL.ACQUIRE reply ${String(reply)}`);
  const [acquired, limit, inFlight, retryAfterMs] = values.slice(0, 4).map(toInt);
  const id = values[4];
  return Object.freeze({
    acquired: acquired === 1,
    limit,
    inFlight,
    retryAfterMs,
    leaseId: id === null || id === undefined ? null : String(id),
    backend,
  });
}

function checkLeaseId(id) {
  if (typeof id !== "string" || id === "") {
    throw new TypeError(`valkey-ratelimit: a lease id must be a non-empty string, got ${String(id)}`);
  }
  return id;
}

function checkInt(name, v, min) {
  if (!Number.isSafeInteger(v) || v < min) {
    throw new TypeError(`valkey-ratelimit: ${name} must be an integer >= ${min}, got ${String(v)}`);
  }
}

// The policy options of a call, in the order both backends take them.
function policyArgs(policy) {
  const args = [];
  const algorithm = policy.algorithm;
  if (algorithm !== undefined && algorithm !== null) {
    if (!ALGORITHMS.includes(algorithm)) {
      throw new TypeError(`valkey-ratelimit: algorithm must be one of ${ALGORITHMS.join(", ")}`);
    }
    args.push("ALGO", algorithm);
  }
  // With a META hash, limit and window may come from its fields instead
  // (inline options win over the hash).
  const fromMeta = policy.meta !== undefined && policy.meta !== null;
  if (!fromMeta || policy.limit !== undefined) {
    checkInt("limit", policy.limit, 0);
    args.push("LIMIT", String(policy.limit));
  }
  if (!fromMeta || policy.windowMs !== undefined) {
    checkInt("windowMs", policy.windowMs, 1);
    args.push("WINDOW", String(policy.windowMs));
  }
  if (policy.burst !== undefined && policy.burst !== null) {
    checkInt("burst", policy.burst, 0);
    args.push("BURST", String(policy.burst));
  }
  return args;
}

// The backend found for each sendCommand function: 'module' or 'functions'.
const detected = new WeakMap();

/**
 * The plain limiter: `admit`, `ttl`, `refund`, `reset` on one client.
 */
class Limiter {
  constructor(options = {}) {
    const { sendCommand, prefix = "", backend = "auto", failure = "open", timeoutMs = 0, library, onError } =
      options;
    if (typeof sendCommand !== "function") {
      throw new TypeError(
        "valkey-ratelimit: sendCommand must be a function, e.g. (...args) => client.call(...args)",
      );
    }
    if (!BACKENDS.includes(backend)) {
      throw new TypeError(`valkey-ratelimit: backend must be one of ${BACKENDS.join(", ")}`);
    }
    if (!FAILURE_POLICIES.includes(failure)) {
      throw new TypeError(`valkey-ratelimit: failure must be 'open' or 'closed'`);
    }
    checkInt("timeoutMs", timeoutMs, 0);
    if (library !== undefined && typeof library !== "string") {
      throw new TypeError("valkey-ratelimit: library must be the source of functions/ratelimit.lua");
    }
    this.sendCommand = sendCommand;
    this.prefix = String(prefix);
    this.backendOption = backend;
    this.failure = failure;
    this.timeoutMs = timeoutMs;
    this.library = library;
    this.onError = onError;
  }

  /** The backend in use: 'module' or 'functions'; detected on first use. */
  async backend() {
    if (this.backendOption !== "auto") return this.backendOption;
    const known = detected.get(this.sendCommand);
    if (known) return known;
    // A read-only probe on a key nobody uses: the module answers it, a server
    // without the module answers "unknown command".
    try {
      await this.send(["RL.LIMIT", `${this.prefix}valkey-ratelimit:probe`]);
      detected.set(this.sendCommand, "module");
      return "module";
    } catch (e) {
      if (!isUnknownCommand(e)) throw e;
    }
    try {
      await this.send(["FCALL_RO", "rl_limit", "1", `${this.prefix}valkey-ratelimit:probe`]);
    } catch (e) {
      if (!isFunctionMissing(e)) throw e;
      await this.loadLibrary(e);
    }
    detected.set(this.sendCommand, "functions");
    return "functions";
  }

  async loadLibrary(cause) {
    if (this.library === undefined) throw new BackendMissingError(cause);
    try {
      await this.send(["FUNCTION", "LOAD", this.library]);
    } catch (e) {
      // Someone else loaded it meanwhile: fine.
      if (!/already exists/i.test(messageOf(e))) throw e;
    }
  }

  send(words) {
    return withTimeout(Promise.resolve().then(() => this.sendCommand(...words)), this.timeoutMs);
  }

  // One limiter call: `command` is the module's name, `fn` the library's
  // function (called with FCALL_RO when `readOnly`); `keys` the key and an
  // optional META hash.
  async call(command, fn, readOnly, keys, args) {
    const words = (backend) =>
      backend === "module"
        ? [command, keys[0], ...args, ...(keys.length > 1 ? ["META", keys[1]] : [])]
        : [readOnly ? "FCALL_RO" : "FCALL", fn, String(keys.length), ...keys, ...args];
    let backend = await this.backend();
    try {
      return { reply: await this.send(words(backend)), backend };
    } catch (e) {
      const stale =
        (backend === "functions" && isFunctionMissing(e)) || (backend === "module" && isUnknownCommand(e));
      if (this.backendOption !== "auto" || !stale) throw e;
      // The server changed since detection (module unloaded, library
      // flushed): detect again, once.
      detected.delete(this.sendCommand);
      backend = await this.backend();
      return { reply: await this.send(words(backend)), backend };
    }
  }

  // The failure policy for a decision: open admits, closed refuses.
  failed(e, policy) {
    if (e instanceof BackendMissingError || !isUnreachable(e)) throw e;
    if (typeof this.onError === "function") this.onError(e);
    const open = this.failure === "open";
    const limit = policy.limit ?? 0;
    return Object.freeze({
      admitted: open,
      limit,
      remaining: open ? limit : 0,
      retryAfterMs: open ? 0 : FAIL_CLOSED_RETRY_MS,
      resetAfterMs: 0,
      backend: "unavailable",
      error: e,
    });
  }

  keysOf(key, meta) {
    const keys = [this.prefix + String(key)];
    if (meta !== undefined && meta !== null) keys.push(String(meta));
    return keys;
  }

  /**
   * Counts a request of `cost` (default 1) against `key`: a Decision.
   * `cost: 0` is a peek.
   */
  async admit(key, policy = {}) {
    const args = policyArgs(policy);
    const cost = policy.cost ?? 1;
    checkInt("cost", cost, 0);
    args.push("COST", String(cost));
    let result;
    try {
      result = await this.call("RL.ADMIT", "rl_admit", false, this.keysOf(key, policy.meta), args);
    } catch (e) {
      return this.failed(e, policy);
    }
    return parseDecision(result.reply, result.backend);
  }

  /** Gives back `cost` (default 1): the state afterwards, as a peek sees it. */
  async refund(key, policy = {}) {
    const args = policyArgs(policy);
    const cost = policy.cost ?? 1;
    checkInt("cost", cost, 0);
    args.push("COST", String(cost));
    const { reply, backend } = await this.call("RL.REFUND", "rl_refund", false, this.keysOf(key, policy.meta), args);
    return parseDecision(reply, backend);
  }

  /** The back-off (ms) a request of cost 1 would be told now; 0 if it would pass. */
  async ttl(key, policy = {}) {
    const args = policyArgs(policy);
    const { reply } = await this.call("RL.TTL", "rl_ttl", true, this.keysOf(key, policy.meta), args);
    return toInt(reply);
  }

  /** Deletes the limiter's state: true if there was one. */
  async reset(key) {
    const { reply } = await this.call("RL.RESET", "rl_reset", false, this.keysOf(key), []);
    return toInt(reply) === 1;
  }

  // Leases. No failure policy here: an unreachable Valkey throws, since no
  // slot can be promised without it.

  /**
   * Takes one of `limit` slots on `key` for `ttlMs` (RL.ACQUIRE). `id` names
   * the lease (a job id; re-acquiring it renews it), else the server makes
   * one. Refused: `acquired` false, `retryAfterMs` until the earliest lease
   * ends by itself.
   */
  async acquire(key, options = {}) {
    const args = [];
    if (options.limit !== undefined && options.limit !== null) {
      checkInt("limit", options.limit, 1);
      args.push("LIMIT", String(options.limit));
    }
    if (options.ttlMs !== undefined && options.ttlMs !== null) {
      checkInt("ttlMs", options.ttlMs, 1);
      args.push("TTL", String(options.ttlMs));
    }
    if (options.id !== undefined && options.id !== null) args.push("ID", checkLeaseId(options.id));
    const { reply, backend } = await this.call("RL.ACQUIRE", "rl_acquire", false, this.keysOf(key, options.meta), args);
    return parseLease(reply, backend);
  }

  /** Ends a lease (RL.RELEASE): true if it was live. */
  async release(key, id) {
    const { reply } = await this.call("RL.RELEASE", "rl_release", false, this.keysOf(key), [checkLeaseId(id)]);
    return toInt(reply) === 1;
  }

  /** Moves a live lease's deadline to now + ttlMs (RL.EXTEND); false: lost, stop. */
  async extend(key, id, ttlMs) {
    checkInt("ttlMs", ttlMs, 1);
    const args = [checkLeaseId(id), "TTL", String(ttlMs)];
    const { reply } = await this.call("RL.EXTEND", "rl_extend", false, this.keysOf(key), args);
    return toInt(reply) === 1;
  }

  /** The number of live leases on `key` (RL.INFLIGHT; reads only). */
  async inFlight(key) {
    const { reply } = await this.call("RL.INFLIGHT", "rl_inflight", true, this.keysOf(key), []);
    return toInt(reply);
  }

  /**
   * Runs `fn(held)` under a lease and resolves to its result. Acquires first,
   * or throws LeaseRefusedError (with `retryAfterMs`) without calling fn.
   * While fn runs, extends the lease every ttlMs / 3 (`heartbeat: false`:
   * never); releases it in `finally`. If an extend finds the lease gone,
   * the beats stop, `held.lost` turns true and `held.signal` aborts with a
   * LeaseLostError (pass it on to what fn awaits); withLease then throws
   * LeaseLostError, as it does when the release finds the lease expired.
   */
  async withLease(key, options, fn) {
    const { heartbeat = true, ...acquireOptions } = options || {};
    if (typeof fn !== "function") throw new TypeError("valkey-ratelimit: withLease needs a function to run");
    if (heartbeat && (acquireOptions.ttlMs === undefined || acquireOptions.ttlMs === null)) {
      throw new TypeError("valkey-ratelimit: the heartbeat extends the lease by ttlMs: give ttlMs, or heartbeat: false");
    }
    const lease = await this.acquire(key, acquireOptions);
    if (!lease.acquired) throw new LeaseRefusedError(key, lease);
    const controller = new AbortController();
    const held = { lease, id: lease.leaseId, signal: controller.signal, lost: false };
    const lose = () => {
      held.lost = true;
      controller.abort(new LeaseLostError(key, lease.leaseId));
    };
    // Unlimited (limit 0): nothing was stored, nothing to keep alive or release.
    const stored = lease.limit > 0;
    let timer;
    if (heartbeat && stored) {
      let beating = false;
      timer = setInterval(async () => {
        if (beating || held.lost) return;
        beating = true;
        try {
          if (!(await this.extend(key, lease.leaseId, acquireOptions.ttlMs))) {
            clearInterval(timer);
            lose();
          }
        } catch {
          // Unreachable for now: the next beat tries again.
        } finally {
          beating = false;
        }
      }, acquireOptions.ttlMs / 3);
      if (typeof timer.unref === "function") timer.unref();
    }
    let result;
    let failed = false;
    let failure;
    try {
      result = await fn(held);
    } catch (e) {
      failed = true;
      failure = e;
    }
    clearInterval(timer);
    if (stored && !held.lost) {
      try {
        if (!(await this.release(key, lease.leaseId))) held.lost = true;
      } catch (e) {
        // Never mask fn's own error; the lease ends at its deadline anyway.
        if (!failed) throw e;
      }
    }
    if (failed && controller.signal.aborted) {
      // fn failed after the lease was lost, most likely of the abort.
      const lost = controller.signal.reason;
      if (failure !== lost) lost.cause = failure;
      throw lost;
    }
    if (failed) throw failure;
    if (held.lost) throw new LeaseLostError(key, lease.leaseId);
    return result;
  }
}

const ceilSeconds = (ms) => Math.ceil(ms / 1000);

/**
 * The IETF RateLimit header fields for a decision
 * (draft-ietf-httpapi-ratelimit-headers): RateLimit-Policy and RateLimit,
 * plus Retry-After (whole seconds, rounded up) on a refusal.
 */
function headers(decision, { windowMs, name = "default" } = {}) {
  checkInt("windowMs", windowMs, 1);
  const out = {};
  // A decision of the failure policy advertises no quota.
  if (decision.limit > 0 && decision.backend !== "unavailable") {
    out["RateLimit-Policy"] = `"${name}";q=${decision.limit};w=${ceilSeconds(windowMs)}`;
    // Refused, the effective window ends when the request would pass, so
    // that Retry-After never points before it.
    const waits = !decision.admitted && decision.retryAfterMs >= 0;
    const t = ceilSeconds(waits ? decision.retryAfterMs : decision.resetAfterMs);
    out["RateLimit"] = `"${name}";r=${decision.remaining};t=${t}`;
  }
  if (!decision.admitted && decision.retryAfterMs >= 0) {
    out["Retry-After"] = String(Math.max(1, ceilSeconds(decision.retryAfterMs)));
  }
  return out;
}

/**
 * An express-rate-limit 8 Store. express-rate-limit's `limit` and
 * `windowMs` are the policy; each `increment` is one RL.ADMIT.
 */
class ValkeyStore {
  constructor(options = {}) {
    const { prefix = "rl:", algorithm, burst, ...rest } = options;
    this.limiter = new Limiter({ ...rest, prefix });
    this.prefix = this.limiter.prefix;
    this.algorithm = algorithm;
    this.burst = burst;
    // Keys live in Valkey, shared by every instance.
    this.localKeys = false;
    this.limit = undefined;
    this.windowMs = undefined;
    this.initError = undefined;
  }

  /** Called by express-rate-limit with its options: takes `limit` and `windowMs`. */
  init(options) {
    const limit = options.limit ?? options.max;
    try {
      if (typeof limit !== "number") {
        throw new TypeError(
          "valkey-ratelimit: ValkeyStore needs a numeric `limit` (a function of the request is not supported)",
        );
      }
      // Validate now rather than on the first request.
      policyArgs({ limit, windowMs: options.windowMs, algorithm: this.algorithm, burst: this.burst });
    } catch (e) {
      // express-rate-limit only logs an init error: every request raises it too.
      this.initError = e;
      throw e;
    }
    this.limit = limit;
    this.windowMs = options.windowMs;
  }

  policy() {
    if (this.initError) throw this.initError;
    if (this.limit === undefined) {
      throw new Error("valkey-ratelimit: ValkeyStore used before init(): pass it to rateLimit({ store })");
    }
    return { limit: this.limit, windowMs: this.windowMs, algorithm: this.algorithm, burst: this.burst };
  }

  // express-rate-limit's view of a decision. totalHits is what the limiter
  // has counted; a refusal reports limit + 1 so that the middleware answers
  // 429, although the refused request was not counted. The reset time is the
  // admitted request's reset, or the refused one's retry-after, rounded up to
  // a whole second from now: the middleware computes `t` and Retry-After as
  // ceil((resetTime - Date.now()) / 1000) a little later, which then still
  // gives exactly ceil(ms / 1000).
  toInfo(decision) {
    const limit = this.limit;
    // A fail-open answer is the first hit of a fresh window.
    const failedOpen = decision.admitted && decision.backend === "unavailable";
    const ms = failedOpen ? this.windowMs : decision.admitted ? decision.resetAfterMs : Math.max(0, decision.retryAfterMs);
    const resetTime = new Date(Date.now() + ceilSeconds(ms) * 1000);
    if (!decision.admitted) return { totalHits: limit + 1, resetTime };
    const used = failedOpen ? 1 : decision.limit - decision.remaining;
    return { totalHits: Math.min(limit, Math.max(1, used)), resetTime };
  }

  async increment(key) {
    return this.toInfo(await this.limiter.admit(key, this.policy()));
  }

  /** express-rate-limit's skipFailedRequests/skipSuccessfulRequests: RL.REFUND. */
  async decrement(key) {
    await this.limiter.refund(key, this.policy());
  }

  async resetKey(key) {
    await this.limiter.reset(key);
  }

  /** A peek (COST 0): undefined when the key has no hits. */
  async get(key) {
    const decision = await this.limiter.admit(key, { ...this.policy(), cost: 0 });
    if (decision.backend === "unavailable") return undefined;
    const used = decision.limit - decision.remaining;
    if (used <= 0) return undefined;
    return { totalHits: used, resetTime: new Date(Date.now() + ceilSeconds(decision.resetAfterMs) * 1000) };
  }
}

module.exports = {
  Limiter,
  ValkeyStore,
  headers,
  BackendMissingError,
  TimeoutError,
  LeaseRefusedError,
  LeaseLostError,
  ALGORITHMS,
};
