// The limiter: valkey-ratelimit's calls sent through the caller's own client
// (`sendCommand`), to the module (RL.*) or to the FUNCTION library
// (FCALL rl_*), found on first use and remembered per client; the library
// loaded from this package's copy where it is missing or older; the failure
// policy and the durability option (WAIT) applied to each answer. The words
// and replies are the pure core's (core.js); the deadline and the up/down
// state are the link's (link.js).
"use strict";

const core = require("./core");
const { bundledLibrary } = require("./library");
const { Link } = require("./link");
const { BackendMissingError, LeaseRefusedError, LeaseLostError } = require("./errors");

const { CALLS } = core;

// The backend found for each sendCommand function: a promise of 'module' or 'functions'.
const detected = new WeakMap();

function checkLeaseId(id) {
  if (typeof id !== "string" || id === "") throw new core.ConfigError("id", "a non-empty string", id);
  return id;
}

class Limiter {
  /**
   * Options: sendCommand (required), prefix, backend, failure, timeoutMs,
   * library, onError, waitReplicas, waitTimeoutMs, unconfirmed, and a default
   * policy (limit, windowMs, algorithm, burst, meta, cost, name) that each
   * call's own options complete. Every option is checked here.
   */
  constructor(options = {}) {
    if (options === null || typeof options !== "object") throw new core.ConfigError("options", "an object", options);
    const {
      sendCommand,
      prefix = "",
      backend = "auto",
      failure = "open",
      timeoutMs = core.DEFAULT_TIMEOUT_MS,
      library,
      onError,
      waitReplicas,
      waitTimeoutMs = 100,
      unconfirmed = "refuse",
      ...policy
    } = options;
    core.fn("sendCommand", sendCommand);
    this.sendCommand = sendCommand;
    this.prefix = core.keyPart("prefix", prefix);
    this.backendOption = core.oneOf("backend", backend, core.BACKENDS);
    this.failure = core.oneOf("failure", failure, [...core.FAILURE_POLICIES, "throw"]);
    core.safeInteger("timeoutMs", timeoutMs, 1);
    if (library !== undefined && library !== false) core.string("library", library);
    this.library = library === false ? null : library === undefined ? bundledLibrary() : librarySource(library);
    if (onError !== undefined) core.fn("onError", onError);
    if (waitReplicas !== undefined) core.safeInteger("waitReplicas", waitReplicas, 1);
    this.waitReplicas = waitReplicas;
    this.waitTimeoutMs = core.safeInteger("waitTimeoutMs", waitTimeoutMs, 1);
    this.unconfirmed = core.oneOf("unconfirmed", unconfirmed, core.UNCONFIRMED_POLICIES);
    const unknown = Object.keys(policy).find((k) => !POLICY_OPTIONS.includes(k));
    if (unknown !== undefined) throw core.ConfigError.unknown(unknown, "Limiter");
    this.defaults = core.checkPolicy(policy, { needsRate: false });
    this.link = new Link({ timeoutMs, failure: this.failure, onError });
  }

  /** The backend in use: 'module' or 'functions'; detected on first use. */
  async backend() {
    return this.link.run(() => this.detect());
  }

  // The words one command takes: through the client, as strings.
  send(words) {
    return this.sendCommand(...words);
  }

  detect() {
    if (this.backendOption !== "auto") return this.backendOption;
    let found = detected.get(this.sendCommand);
    if (!found) {
      found = this.probe();
      detected.set(this.sendCommand, found);
      // A failed probe is not remembered: the next call probes again.
      found.catch(() => detected.get(this.sendCommand) === found && detected.delete(this.sendCommand));
    }
    return found;
  }

  // The module if it answers, else the library (loaded or brought up to
  // this package's version when that is allowed).
  async probe() {
    try {
      await this.send([CALLS.limit.command, `${this.prefix}valkey-ratelimit:probe`]);
      return "module";
    } catch (e) {
      if (!core.isUnknownCommand(e)) throw e;
    }
    let version;
    try {
      version = String(await this.send(["FCALL_RO", "rl_version", "0"]));
    } catch (e) {
      if (!core.isFunctionMissing(e)) throw e;
      // No rl_version: a library older than any this package ships, or none.
      try {
        await this.send(["FCALL_RO", CALLS.limit.fn, "1", `${this.prefix}valkey-ratelimit:probe`]);
        version = null;
      } catch (e2) {
        if (!core.isFunctionMissing(e2)) throw e2;
        await this.loadLibrary(false, e2);
        return "functions";
      }
    }
    if (this.library && core.compareVersions(version, this.library.version) < 0) await this.loadLibrary(true);
    return "functions";
  }

  // FUNCTION LOAD of this package's library: over an older one (`replace`),
  // or where there is none. Refused for want of permission, an older library
  // stays in use; a missing one is an error that names the admin command.
  async loadLibrary(replace, cause) {
    if (!this.library) {
      if (replace) return;
      throw new BackendMissingError("loading it is turned off (library: false)", null, cause);
    }
    try {
      await this.send(["FUNCTION", "LOAD", ...(replace ? ["REPLACE"] : []), this.library.source]);
    } catch (e) {
      if (core.isLibraryExists(e)) return; // another client loaded it meanwhile
      if (replace && core.isNoPermission(e)) return;
      if (core.isNoPermission(e)) {
        throw new BackendMissingError("this user may not FUNCTION LOAD", this.library.path, e);
      }
      throw e;
    }
  }

  // One call, its backend detected first. A backend that went away since
  // (module unloaded, library flushed by a restart without persistence) is
  // detected, and the library loaded, again, once.
  async call(call, keys, args) {
    let backend = await this.detect();
    try {
      return { reply: await this.send(core.callWords(backend, call, keys, args)), backend };
    } catch (e) {
      const stale =
        (backend === "functions" && core.isFunctionMissing(e)) || (backend === "module" && core.isUnknownCommand(e));
      if (this.backendOption !== "auto" || !stale) throw e;
      detected.delete(this.sendCommand);
      backend = await this.detect();
      return { reply: await this.send(core.callWords(backend, call, keys, args)), backend };
    }
  }

  // `call` through the link: under the deadline, with the up/down state kept.
  run(call, keys, args) {
    return this.link.run(() => this.call(call, keys, args));
  }

  // The key with the prefix, and the META hash if any. Strings stay
  // strings; a Buffer key or prefix makes the whole key a Buffer.
  keysOf(key, meta) {
    core.keyPart("key", key);
    const k =
      typeof key === "string" && typeof this.prefix === "string"
        ? this.prefix + key
        : Buffer.concat([Buffer.from(this.prefix), Buffer.from(key)]);
    return meta === undefined ? [k] : [k, meta];
  }

  /** The call's policy: its own options over the limiter's defaults, checked. */
  policyOf(options, needsRate = true) {
    if (options === null || typeof options !== "object") throw new core.ConfigError("options", "an object", options);
    return core.checkPolicy({ ...this.defaults, ...definedOnly(options) }, { needsRate });
  }

  /**
   * Counts a request of `cost` (default 1) against `key`: a Decision.
   * `cost: 0` is a peek. An unreachable Valkey gets the failure policy's
   * answer (`failure`, also per call: "open", "closed", or "throw").
   */
  async admit(key, options = {}) {
    const policy = this.policyOf(options);
    const failure = options.failure === undefined ? this.failure : core.oneOf("failure", options.failure, [...core.FAILURE_POLICIES, "throw"]);
    const cost = policy.cost ?? 1;
    const args = [...core.policyArgs(policy), "COST", String(cost)];
    const keys = this.keysOf(key, policy.meta);
    let answer;
    try {
      answer = await this.run(CALLS.admit, keys, args);
    } catch (e) {
      if (failure === "throw" || core.errorKind(e) !== "unreachable") throw e;
      return core.unavailableDecision(policy, failure === "open", e);
    }
    const decision = core.parseDecision(answer.reply, answer.backend, policy);
    if (!decision.admitted || cost === 0 || decision.limit === 0 || this.waitReplicas === undefined) return decision;
    const acks = await this.confirmed();
    if (acks >= this.waitReplicas) return decision;
    if (this.unconfirmed === "keep") return Object.freeze({ ...decision, unconfirmed: acks });
    await this.run(CALLS.refund, keys, args).catch(() => {});
    return core.unconfirmedDecision(decision, acks);
  }

  // WAIT for the durability option: how many replicas have the grant. An
  // unreachable Valkey confirms nothing.
  async confirmed() {
    try {
      const words = ["WAIT", String(this.waitReplicas), String(this.waitTimeoutMs)];
      return core.toInt(await this.link.run(() => this.send(words), this.waitTimeoutMs));
    } catch (e) {
      if (core.errorKind(e) !== "unreachable") throw e;
      return 0;
    }
  }

  /** Gives back `cost` (default 1): the state afterwards, as a peek sees it. */
  async refund(key, options = {}) {
    const policy = this.policyOf(options);
    const args = [...core.policyArgs(policy), "COST", String(policy.cost ?? 1)];
    const { reply, backend } = await this.run(CALLS.refund, this.keysOf(key, policy.meta), args);
    return core.parseDecision(reply, backend, policy);
  }

  /** The back-off (ms) a request of cost 1 would be told now; 0 if it would pass. */
  async ttl(key, options = {}) {
    const policy = this.policyOf(options, false);
    const { reply } = await this.run(CALLS.ttl, this.keysOf(key, policy.meta), core.policyArgs(policy));
    return core.toInt(reply);
  }

  /** Deletes the limiter's state: true if there was one. */
  async reset(key) {
    const { reply } = await this.run(CALLS.reset, this.keysOf(key), []);
    return core.toInt(reply) === 1;
  }

  // Leases. No failure policy here: an unreachable Valkey throws, since no
  // slot can be promised without it.

  /**
   * Takes one of `limit` slots on `key` for `ttlMs` (RL.ACQUIRE). `id` names
   * the lease (a job id; re-acquiring it renews it), else the server makes
   * one. Refused: `acquired` false, `retryAfterMs` until the earliest lease
   * ends by itself. With waitReplicas, a lease WAIT did not confirm is
   * released and refused (or kept, with `unconfirmed`).
   */
  async acquire(key, options = {}) {
    const args = [];
    if (options.limit !== undefined && options.limit !== null) {
      args.push("LIMIT", String(core.safeInteger("limit", options.limit, 1)));
    }
    if (options.ttlMs !== undefined && options.ttlMs !== null) {
      args.push("TTL", String(core.safeInteger("ttlMs", options.ttlMs, 1)));
    }
    if (options.id !== undefined && options.id !== null) args.push("ID", checkLeaseId(options.id));
    const meta = options.meta === undefined || options.meta === null ? undefined : core.keyPart("meta", options.meta);
    const { reply, backend } = await this.run(CALLS.acquire, this.keysOf(key, meta), args);
    const lease = core.parseLease(reply, backend);
    if (!lease.acquired || lease.limit === 0 || this.waitReplicas === undefined) return lease;
    const acks = await this.confirmed();
    if (acks >= this.waitReplicas) return lease;
    if (this.unconfirmed === "keep") return Object.freeze({ ...lease, unconfirmed: acks });
    await this.run(CALLS.release, this.keysOf(key), [lease.leaseId]).catch(() => {});
    return Object.freeze({ ...lease, acquired: false, leaseId: null, retryAfterMs: core.UNAVAILABLE_RETRY_MS, unconfirmed: acks });
  }

  /** Ends a lease (RL.RELEASE): true if it was live. */
  async release(key, id) {
    const { reply } = await this.run(CALLS.release, this.keysOf(key), [checkLeaseId(id)]);
    return core.toInt(reply) === 1;
  }

  /** Moves a live lease's deadline to now + ttlMs (RL.EXTEND); false: lost, stop. */
  async extend(key, id, ttlMs) {
    const args = [checkLeaseId(id), "TTL", String(core.safeInteger("ttlMs", ttlMs, 1))];
    const { reply } = await this.run(CALLS.extend, this.keysOf(key), args);
    return core.toInt(reply) === 1;
  }

  /** The number of live leases on `key` (RL.INFLIGHT; reads only). */
  async inFlight(key) {
    const { reply } = await this.run(CALLS.inflight, this.keysOf(key), []);
    return core.toInt(reply);
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
    core.fn("fn", fn);
    if (heartbeat && (acquireOptions.ttlMs === undefined || acquireOptions.ttlMs === null)) {
      throw new core.ConfigError("ttlMs", "a safe integer >= 1 for the heartbeat (or heartbeat: false)", acquireOptions.ttlMs);
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

const POLICY_OPTIONS = ["limit", "windowMs", "algorithm", "burst", "meta", "cost", "name"];

// The options a caller gave, without the undefined ones (which must not hide a default).
function definedOnly(options) {
  const out = {};
  for (const k of POLICY_OPTIONS) if (options[k] !== undefined) out[k] = options[k];
  return out;
}

// A library source the caller passed instead of the bundled copy.
function librarySource(source) {
  return Object.freeze({ path: null, source, version: core.libraryVersion(source) });
}

module.exports = { Limiter, POLICY_OPTIONS };
