// The errors valkey-ratelimit throws, one class per thing a caller may want
// to tell apart. ConfigError (a bad option) lives in core.js with the rules.
"use strict";

const { LOAD_COMMAND, UNAVAILABLE_STATUS, UNAVAILABLE_RETRY_MS, ceilSeconds } = require("./core");

/** Neither the module nor the library is there, and the library may not be loaded. */
class BackendMissingError extends Error {
  constructor(reason, libraryPath, cause) {
    super(
      `valkey-ratelimit: the valkey-ratelimit module is not loaded and neither is its FUNCTION library ` +
        `(${reason}); load the library as an admin: \`${LOAD_COMMAND}\`` +
        (libraryPath ? ` (this package's copy: ${libraryPath})` : "") +
        `; on a cluster, into every primary (scripts/load-functions-cluster.sh)`,
    );
    this.name = "BackendMissingError";
    this.unreachable = false;
    this.cause = cause;
  }
}

/** Valkey did not answer within the deadline (`timeoutMs`). */
class TimeoutError extends Error {
  constructor(ms) {
    super(`valkey-ratelimit: no reply from Valkey within ${ms} ms`);
    this.name = "TimeoutError";
    this.unreachable = true;
  }
}

/**
 * Valkey is known to be down and another call is already probing it: this
 * one is answered at once rather than queued behind it.
 */
class DownError extends Error {
  constructor(cause) {
    super(`valkey-ratelimit: Valkey is unreachable${cause ? ` (${cause.message})` : ""}`);
    this.name = "DownError";
    this.unreachable = true;
    this.cause = cause;
  }
}

/**
 * A request refused because Valkey could not decide (fail-closed), or could
 * not confirm a grant on enough replicas. It carries the HTTP status (503
 * unless configured) and a Retry-After header, which Express's error handler
 * answers with.
 */
class UnavailableError extends Error {
  constructor(message, { status = UNAVAILABLE_STATUS, retryAfterMs = UNAVAILABLE_RETRY_MS, cause } = {}) {
    super(`valkey-ratelimit: ${message}`);
    this.name = "UnavailableError";
    this.status = status;
    this.statusCode = status;
    this.expose = true;
    this.headers = { "Retry-After": String(Math.max(1, ceilSeconds(retryAfterMs))) };
    this.cause = cause;
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

module.exports = {
  BackendMissingError,
  TimeoutError,
  DownError,
  UnavailableError,
  LeaseRefusedError,
  LeaseLostError,
};
