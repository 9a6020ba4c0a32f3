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
const { giveBackArgs } = require("./reservation");
const waiting = require("./waiting");

const { CALLS } = core;

// The backend found for each sendCommand function: 'module' or 'functions'.
const detected = new WeakMap();
// The library being made ready through each sendCommand function: a promise.
const preparing = new WeakMap();

function checkLeaseId(id) {
  if (typeof id !== "string" || id === "") throw new core.ConfigError("id", "a non-empty string", id);
  return id;
}

class Limiter {
  /**
   * Options: sendCommand (required), prefix, backend, failure, timeoutMs,
   * library, onError, waitReplicas, waitTimeoutMs, unconfirmed, and a default
   * policy (limit, windowMs, algorithm, burst, meta, cost, name, shadow,
   * penalty, align, calendar, tz, escalate) that each call's own options complete. Every option is checked here.
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
    this.failure = core.oneOf("failure", failure, core.FAILURE_POLICIES);
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
    // Whether this limiter was refused FUNCTION LOAD, for the error that follows.
    this.loadRefused = false;
  }

  /**
   * The backend in use: 'module' or 'functions'. Known after the first call;
   * before it, found with a read-only RL.LIMIT on `<prefix>valkey-ratelimit:probe`.
   */
  async backend() {
    if (this.backendOption !== "auto") return this.backendOption;
    return this.link.run(async () => {
      const known = detected.get(this.sendCommand);
      if (known) return known;
      const probe = [CALLS.limit, [`${this.prefix}valkey-ratelimit:probe`], []];
      return (await this.discover(...probe)).backend;
    });
  }

  // The words one command takes: through the client, as strings.
  send(words) {
    return this.sendCommand(...words);
  }

  // One call on the backend known for this client; found by the call itself
  // the first time, and again when the backend went away (module unloaded,
  // library flushed by a restart without persistence).
  async call(call, keys, args) {
    const backend = this.backendOption !== "auto" ? this.backendOption : detected.get(this.sendCommand);
    if (backend === undefined) return this.discover(call, keys, args);
    try {
      return { reply: await this.send(core.callWords(backend, call, keys, args)), backend };
    } catch (e) {
      const gone =
        (backend === "functions" && core.isFunctionMissing(e)) || (backend === "module" && core.isUnknownCommand(e));
      if (!gone || this.backendOption === "module") throw e;
      if (this.backendOption === "functions") {
        await this.readyLibrary();
        return { reply: await this.send(core.callWords(backend, call, keys, args)), backend };
      }
      if (detected.get(this.sendCommand) === backend) detected.delete(this.sendCommand);
      return this.discover(call, keys, args);
    }
  }

  // The call itself is the probe, so that no key but the caller's is ever
  // touched (an ACL may allow no other): the module's form first; on
  // "unknown command", the library, made ready, and its form.
  async discover(call, keys, args) {
    try {
      const reply = await this.send(core.callWords("module", call, keys, args));
      detected.set(this.sendCommand, "module");
      return { reply, backend: "module" };
    } catch (e) {
      if (!core.isUnknownCommand(e)) throw e;
    }
    await this.readyLibrary();
    try {
      const reply = await this.send(core.callWords("functions", call, keys, args));
      detected.set(this.sendCommand, "functions");
      return { reply, backend: "functions" };
    } catch (e) {
      if (!core.isFunctionMissing(e)) throw e;
      const reason = !this.library
        ? "loading it is turned off (library: false)"
        : this.loadRefused
          ? "this user may not FUNCTION LOAD"
          : "FUNCTION LOAD reached another server (on a cluster, load it into every primary)";
      throw new BackendMissingError(reason, this.library && this.library.path, e);
    }
  }

  // The library, brought up to this package's copy where it is missing or
  // older (one without rl_version counts as older than any), never over a
  // newer one. One client's concurrent first calls share the work.
  readyLibrary() {
    let ready = preparing.get(this.sendCommand);
    if (!ready) {
      ready = this.prepareLibrary().finally(() => preparing.delete(this.sendCommand));
      preparing.set(this.sendCommand, ready);
    }
    return ready;
  }

  async prepareLibrary() {
    this.loadRefused = false;
    const version = await this.loadedVersion();
    if (!this.library) return;
    if (version !== undefined) {
      if (core.compareVersions(version, this.library.version) < 0) await this.loadLibrary(true);
      return;
    }
    // None, or one older than rl_version: loading without REPLACE tells them apart.
    if (await this.loadLibrary(false)) return;
    const now = await this.loadedVersion(); // another client's, loaded a moment ago?
    if (now === undefined || core.compareVersions(now, this.library.version) < 0) await this.loadLibrary(true);
  }

  // The loaded library's version, or undefined when it states none (or there is none).
  async loadedVersion() {
    try {
      return String(await this.send(["FCALL_RO", "rl_version", "0"]));
    } catch (e) {
      if (!core.isFunctionMissing(e)) throw e;
      return undefined;
    }
  }

  // FUNCTION LOAD of this package's library, over an older one (`replace`)
  // or where there is none: true if loaded. Not permitted, it is left to the
  // call to find the library there (an older one stays in use) or not.
  async loadLibrary(replace) {
    try {
      await this.send(["FUNCTION", "LOAD", ...(replace ? ["REPLACE"] : []), this.library.source]);
      return true;
    } catch (e) {
      if (core.isLibraryExists(e)) return false;
      if (core.isNoPermission(e)) {
        this.loadRefused = true;
        return false;
      }
      throw e;
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
   * With `waitMs`, waits as `wait` does.
   */
  async admit(key, options = {}) {
    const policy = this.policyOf(options);
    const failure = options.failure === undefined ? this.failure : core.oneOf("failure", options.failure, core.CALL_FAILURE_POLICIES);
    const cost = policy.cost ?? 1;
    const args = [...core.policyArgs(policy), "COST", String(cost)];
    const keys = this.keysOf(key, policy.meta);
    const waitMs = waitOption(options);
    const signal = waiting.signalOption(options.signal);
    const block = options.block === undefined || options.block === null ? false : core.bool("block", options.block);
    if (signal && signal.aborted) throw signal.reason;
    let answer;
    try {
      answer = await (waitMs === undefined
        ? this.run(CALLS.admit, keys, args)
        : waiting.admitWaiting(this, { keys, args, waitMs, policy, block, signal }));
    } catch (e) {
      // An abort between a window's tries is the caller's, never an outage.
      if (signal && signal.aborted) throw signal.reason;
      if (failure === "throw" || core.errorKind(e) !== "unreachable") throw e;
      return core.unavailableDecision(policy, failure === "open", e);
    }
    let decision = answer.decision ?? core.parseDecision(answer.reply, answer.backend, policy);
    const giveBack = (granted) => this.run(CALLS.refund, keys, giveBackArgs(policy, cost, granted));
    // A shadow refusal consumed nothing: no grant to confirm or give back.
    const granted = decision.admitted && !decision.shadow && cost > 0 && decision.limit > 0;
    if (granted && this.waitReplicas !== undefined) {
      const acks = await this.confirmed();
      if (acks < this.waitReplicas) {
        if (this.unconfirmed === "keep") decision = Object.freeze({ ...decision, unconfirmed: acks });
        else {
          await giveBack(decision).catch(() => {});
          return core.unconfirmedDecision(decision, acks);
        }
      }
    }
    if (waitMs !== undefined) {
      const held = decision;
      await waiting.sleepOnSlot(decision, signal, () => (granted ? giveBack(held) : Promise.resolve()));
    }
    return decision;
  }

  /**
   * `admit` that waits up to `waitMs` (required, at least 1) to be admitted,
   * first come first served on both backends, with no connection held: one
   * RL.ADMIT ... RESERVE waitMs books the caller's turn (gcra, token, leaky),
   * and the caller sleeps here until it (`delayMs`, `atMs` by the server's
   * clock); one that cannot be booked within waitMs is refused at once,
   * with its retryAfterMs. `signal`: an AbortSignal that, fired while the
   * caller sleeps, gives the booked slot back (RL.REFUND ... AT atMs, once)
   * and rejects with its reason. `block: true` sends RL.ADMIT ... BLOCK
   * instead where the module is loaded (it holds the connection while it
   * waits: give it one of its own). A window (fixed, the default, and
   * sliding) cannot book a later window's slot: it sleeps retryAfterMs with
   * jitter and tries again until waitMs has passed. The deadline
   * (timeoutMs) covers the call, not the sleep.
   */
  async wait(key, options = {}) {
    if (options === null || typeof options !== "object" || options.waitMs === undefined) {
      throw new core.ConfigError("waitMs", "an integer from 1", options && options.waitMs);
    }
    return this.admit(key, options);
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
   * ends by itself. `shadow: true` trials the ceiling: a would-be refusal is
   * acquired with `shadow` true (and its wait), but no lease is taken. With waitReplicas, a lease WAIT did not confirm is
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
    if (options.shadow !== undefined && options.shadow !== null && core.bool("shadow", options.shadow)) args.push("SHADOW");
    const meta = options.meta === undefined || options.meta === null ? undefined : core.keyPart("meta", options.meta);
    const waitMs = waitOption(options);
    const keys = this.keysOf(key, meta);
    const { reply, backend } =
      waitMs === undefined ? await this.run(CALLS.acquire, keys, args) : await waiting.acquireWaiting(this, { keys, args, waitMs });
    const lease = core.parseLease(reply, backend);
    // A shadow refusal took no lease: nothing to confirm.
    if (!lease.acquired || lease.shadow || lease.limit === 0 || this.waitReplicas === undefined) return lease;
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
    // Unlimited (limit 0), or a shadow refusal: nothing was stored, nothing
    // to keep alive or release (fn runs all the same).
    const stored = lease.limit > 0 && !lease.shadow;
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

// The `waitMs` option of admit and acquire: undefined, or an integer from 1.
function waitOption(options) {
  if (options.waitMs === undefined || options.waitMs === null) return undefined;
  return core.safeInteger("waitMs", options.waitMs, 1);
}

const POLICY_OPTIONS = [
  "limit",
  "windowMs",
  "algorithm",
  "burst",
  "meta",
  "cost",
  "name",
  "shadow",
  "penalty",
  "align",
  "calendar",
  "tz",
  "escalate",
];

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
