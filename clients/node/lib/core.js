// The pure core of valkey-ratelimit for Node.js: the rules every option must
// meet, the words of each call on either backend, replies read into frozen
// objects, the IETF RateLimit header fields, the kinds of errors a client
// throws, and library versions. No I/O and no state: every function here is a
// function of its arguments (test/unit/core.test.js tests them alone).
"use strict";

const ALGORITHMS = Object.freeze(["fixed", "sliding", "token", "gcra", "leaky"]);
// The algorithms with a window (ALIGN, CALENDAR), and those with a bucket.
const WINDOWS = Object.freeze(["fixed", "sliding"]);
// CALENDAR's periods: the window is the day, the ISO week, the month or the year.
const CALENDAR_PERIODS = Object.freeze(["day", "week", "month", "year"]);
const BACKENDS = Object.freeze(["auto", "module", "functions"]);
const FAILURE_POLICIES = Object.freeze(["open", "closed"]);
// One call may also ask to have an unreachable Valkey thrown, not answered for.
const CALL_FAILURE_POLICIES = Object.freeze([...FAILURE_POLICIES, "throw"]);
// What happens to a grant that WAIT did not see on enough replicas.
const UNCONFIRMED_POLICIES = Object.freeze(["keep", "refuse"]);

// Every call's deadline unless the caller sets another.
const DEFAULT_TIMEOUT_MS = 250;
// How long a refusal for want of Valkey tells the caller to wait.
const UNAVAILABLE_RETRY_MS = 1000;
// The HTTP status of a request refused for want of Valkey (fail-closed).
const UNAVAILABLE_STATUS = 503;
// The LIMIT of a fixed window that counts every hit and refuses none, as
// express-rate-limit's MemoryStore does (the middleware decides): 10^12 hits
// in one window, far from 2^53, which some clients' RESP3 parsers do not
// read exactly.
const COUNT_EVERY_HIT = 1e12;

// Error codes of a server that is there but cannot answer now (and the kinds
// valkey-glide reports them as): treated as unreachable.
const UNAVAILABLE_CODES = Object.freeze(["LOADING", "BUSY", "MASTERDOWN", "CLUSTERDOWN", "TRYAGAIN"]);
const UNAVAILABLE_KINDS = Object.freeze(["BusyLoadingError", "ClusterDown", "MasterDown", "TryAgain"]);

// The admin command that loads the bundled library, for the error that asks for it.
const LOAD_COMMAND = "valkey-cli -x FUNCTION LOAD REPLACE < ratelimit.lua";

/** An option that breaks its rule: raised when the limiter or store is built. */
class ConfigError extends TypeError {
  constructor(option, rule, value) {
    super(`${option} must be ${rule} (got ${show(value)})`);
    this.name = "ConfigError";
    this.option = option;
  }

  /** An option the object does not take (a misspelling, most likely). */
  static unknown(option, owner) {
    const e = new ConfigError(option, "", undefined);
    e.message = `${option} is not an option of ${owner}`;
    return e;
  }
}

// A value as an error message shows it: strings quoted, the rest as JavaScript writes them.
function show(value) {
  if (typeof value === "string") return JSON.stringify(value);
  if (typeof value === "bigint") return `${value}n`;
  // An integer past 2^53 as the exact value the double holds.
  if (typeof value === "number" && Number.isInteger(value) && !Number.isSafeInteger(value)) return BigInt(value).toString();
  if (typeof value === "function") return "a function";
  if (Array.isArray(value)) return "an array";
  if (value !== null && typeof value === "object") return "an object";
  return String(value);
}

// ----------------------------------------------------------------- rules

// A rule: what the message says, and the test.
const SAFE_INTEGER = (min) => ({
  rule: `a safe integer >= ${min}`,
  ok: (v) => typeof v === "number" && Number.isSafeInteger(v) && v >= min,
});
const ONE_OF = (allowed) => ({ rule: `one of ${allowed.join(", ")}`, ok: (v) => allowed.includes(v) });
const STRING = { rule: "a string", ok: (v) => typeof v === "string" };
// A key or key prefix: a string, or a Buffer sent as it is.
const KEY = { rule: "a string", ok: (v) => typeof v === "string" || Buffer.isBuffer(v) };
// A header field's quoted policy name: printable ASCII, no quote or backslash.
const POLICY_NAME = {
  rule: 'an ASCII string without " or \\',
  ok: (v) => typeof v === "string" && /^[\x20-\x7e]*$/.test(v) && !/["\\]/.test(v),
};
const FUNCTION = { rule: "a function", ok: (v) => typeof v === "function" };
const BOOLEAN = { rule: "true or false", ok: (v) => typeof v === "boolean" };
// TZ: a fixed offset from UTC, as both backends read it (hours 00 to 23), or
// what has the shape of an IANA zone name (the server knows which exist).
const TZ_OFFSET = {
  rule: 'a fixed offset from UTC such as "+05:30" or "-08:00", or an IANA zone name such as "Europe/Berlin"',
  ok: (v) => typeof v === "string" && /^(?:[+-](?:[01][0-9]|2[0-3]):[0-5][0-9]|[A-Za-z][A-Za-z0-9_+-]*(?:\/[A-Za-z0-9_+-]+)*)$/.test(v),
};

function check(option, value, { rule, ok }) {
  if (!ok(value)) throw new ConfigError(option, rule, value);
  return value;
}

const safeInteger = (option, value, min) => check(option, value, SAFE_INTEGER(min));
const oneOf = (option, value, allowed) => check(option, value, ONE_OF(allowed));
const string = (option, value) => check(option, value, STRING);
const keyPart = (option, value) => check(option, value, KEY);
const policyName = (option, value) => check(option, value, POLICY_NAME);
const fn = (option, value) => check(option, value, FUNCTION);
const bool = (option, value) => check(option, value, BOOLEAN);

// A value given directly, or a function of the request that gives it.
function valueOrFunction(option, value, { rule, ok }) {
  return check(option, value, { rule: `${rule}, or a function of the request`, ok: (v) => typeof v === "function" || ok(v) });
}

const given = (v) => v !== undefined && v !== null;

/**
 * The policy options of one call, checked: { algorithm, limit, windowMs,
 * burst, meta, cost, name, shadow, penalty, align, calendar, tz, escalate }, each
 * left out when not given (shadow and align: when not true). With a META
 * hash, limit and window may come from its fields (options that are given
 * win). The combinations the server refuses are refused here too, before
 * any call: ALIGN and CALENDAR only with a window algorithm (CALENDAR:
 * fixed), CALENDAR without windowMs or ALIGN, TZ only with CALENDAR (or a
 * META hash, whose `calendar` field it may go with), escalate only with
 * penalty (or a META hash, whose `penalty` field it may go with) and not
 * below it.
 */
function checkPolicy(policy, { needsRate = true } = {}) {
  const out = {};
  if (given(policy.algorithm)) out.algorithm = oneOf("algorithm", policy.algorithm, ALGORITHMS);
  if (given(policy.meta)) out.meta = keyPart("meta", policy.meta);
  if (given(policy.limit)) out.limit = safeInteger("limit", policy.limit, 0);
  if (given(policy.windowMs)) out.windowMs = safeInteger("windowMs", policy.windowMs, 1);
  if (given(policy.burst)) out.burst = safeInteger("burst", policy.burst, 0);
  if (given(policy.cost)) out.cost = safeInteger("cost", policy.cost, 0);
  if (given(policy.name)) out.name = policyName("name", policy.name);
  if (given(policy.shadow) && bool("shadow", policy.shadow)) out.shadow = true;
  if (given(policy.penalty)) out.penalty = safeInteger("penalty", policy.penalty, 1);
  if (given(policy.align) && bool("align", policy.align)) out.align = true;
  if (given(policy.calendar)) out.calendar = oneOf("calendar", policy.calendar, CALENDAR_PERIODS);
  if (given(policy.tz)) out.tz = check("tz", policy.tz, TZ_OFFSET);
  if (given(policy.escalate)) out.escalate = safeInteger("escalate", policy.escalate, 1);
  const windowed = (what, value) => {
    if (out.algorithm !== undefined && !WINDOWS.includes(out.algorithm)) {
      throw new ConfigError(what, `left out with algorithm ${show(out.algorithm)} (it applies only to fixed and sliding)`, value);
    }
  };
  if (out.align) windowed("align", true);
  if (out.calendar !== undefined) {
    windowed("calendar", out.calendar);
    if (out.windowMs !== undefined) throw new ConfigError("windowMs", "left out with calendar (the period is the window)", out.windowMs);
    if (out.align) throw new ConfigError("align", "left out with calendar (calendar periods are aligned)", true);
  }
  if (out.tz !== undefined && out.calendar === undefined && out.meta === undefined) {
    throw new ConfigError("tz", "left out without calendar (or a META hash whose calendar field it goes with)", out.tz);
  }
  if (out.escalate !== undefined) {
    if (out.penalty === undefined && out.meta === undefined) {
      throw new ConfigError("escalate", "left out without penalty (or a META hash whose penalty field it goes with)", out.escalate);
    }
    if (out.penalty !== undefined && out.escalate < out.penalty) {
      throw new ConfigError("escalate", `at least penalty (${out.penalty})`, out.escalate);
    }
  }
  if (needsRate && out.meta === undefined) {
    if (out.limit === undefined) throw new ConfigError("limit", "a safe integer >= 0, unless meta is given", policy.limit);
    if (out.windowMs === undefined && out.calendar === undefined && out.limit > 0) {
      throw new ConfigError("windowMs", "a safe integer >= 1, unless meta or calendar is given", policy.windowMs);
    }
  }
  return out;
}

// ------------------------------------------------------------- the calls

// Each call: the module's command, the library's function, whether the
// library's is read-only (FCALL_RO).
const CALLS = Object.freeze({
  admit: { command: "RL.ADMIT", fn: "rl_admit", readOnly: false },
  refund: { command: "RL.REFUND", fn: "rl_refund", readOnly: false },
  ttl: { command: "RL.TTL", fn: "rl_ttl", readOnly: true },
  limit: { command: "RL.LIMIT", fn: "rl_limit", readOnly: true },
  reset: { command: "RL.RESET", fn: "rl_reset", readOnly: false },
  acquire: { command: "RL.ACQUIRE", fn: "rl_acquire", readOnly: false },
  release: { command: "RL.RELEASE", fn: "rl_release", readOnly: false },
  extend: { command: "RL.EXTEND", fn: "rl_extend", readOnly: false },
  inflight: { command: "RL.INFLIGHT", fn: "rl_inflight", readOnly: true },
});

/** The policy options of a checked policy, in the order both backends take them. */
function policyArgs(policy) {
  const args = [];
  if (policy.algorithm !== undefined) args.push("ALGO", policy.algorithm);
  if (policy.limit !== undefined) args.push("LIMIT", String(policy.limit));
  if (policy.windowMs !== undefined) args.push("WINDOW", String(policy.windowMs));
  if (policy.burst !== undefined) args.push("BURST", String(policy.burst));
  if (policy.shadow) args.push("SHADOW");
  if (policy.penalty !== undefined) args.push("PENALTY", String(policy.penalty));
  if (policy.align) args.push("ALIGN");
  if (policy.calendar !== undefined) args.push("CALENDAR", policy.calendar);
  if (policy.tz !== undefined) args.push("TZ", policy.tz);
  if (policy.escalate !== undefined) args.push("ESCALATE", String(policy.escalate));
  return args;
}

/**
 * The words of one call on `backend`: `keys` is the key and, for the limiter
 * calls, an optional META hash (an option of the module's commands, a second
 * key of the library's functions).
 */
function callWords(backend, call, keys, args) {
  if (backend === "module") {
    return [call.command, keys[0], ...args, ...(keys.length > 1 ? ["META", keys[1]] : [])];
  }
  return [call.readOnly ? "FCALL_RO" : "FCALL", call.fn, String(keys.length), ...keys, ...args];
}

// ------------------------------------------------------------- the replies

/** A reply this package cannot read: raised, never taken for an outage. */
function badReply(message) {
  const e = new Error(`valkey-ratelimit: ${message}`);
  e.unreachable = false;
  return e;
}

/** A reply integer from any client: number, bigint or numeric string. */
function toInt(v) {
  const n = typeof v === "bigint" ? Number(v) : Number(v);
  if (v === null || v === undefined || v === "" || !Number.isSafeInteger(n)) {
    throw badReply(`expected an integer in the reply, got ${show(v)}`);
  }
  return n;
}

// valkey-glide's map: [{ key, value }, ...].
const isRecordList = (reply) =>
  Array.isArray(reply) && reply.length > 0 && reply.every((x) => x !== null && typeof x === "object" && "key" in x && "value" in x);

// The fields of a RESP2 array, or of the module's RESP3 map: a Map, a plain
// object, the flat [name, value, ...] array ioredis makes of it, or
// valkey-glide's list of { key, value } records. A map may also carry the
// fields of `optional` (a shadow refusal's `shadow`): { values, extra,
// named }, where `named` says the reply was a map.
function readFields(reply, names, what, optional = []) {
  const known = [...names, ...optional];
  let byName;
  if (isRecordList(reply)) byName = new Map(reply.map(({ key, value }) => [String(key), value]));
  else if (
    Array.isArray(reply) &&
    reply.length % 2 === 0 &&
    reply.length >= 2 * names.length &&
    reply.length <= 2 * known.length &&
    reply.every((x, i) => i % 2 === 1 || known.includes(String(x))) &&
    names.every((f) => reply.some((x, i) => i % 2 === 0 && String(x) === f))
  ) {
    byName = new Map();
    for (let i = 0; i < reply.length; i += 2) byName.set(String(reply[i]), reply[i + 1]);
  } else if (reply instanceof Map) byName = new Map([...reply].map(([k, v]) => [String(k), v]));
  else if (reply && typeof reply === "object" && !Array.isArray(reply)) byName = new Map(Object.entries(reply));
  if (byName) {
    const values = names.map((f) => byName.get(f));
    const extra = {};
    for (const f of optional) if (byName.has(f)) extra[f] = byName.get(f);
    return { values, extra, named: true };
  }
  if (!Array.isArray(reply) || reply.length !== names.length) throw badReply(`unexpected ${what} reply ${show(reply)}`);
  return { values: reply, extra: {}, named: false };
}

const fieldsOf = (reply, names, what) => readFields(reply, names, what).values;

const DECISION_FIELDS = ["admitted", "limit", "remaining", "retry_after_ms", "reset_after_ms"];

/**
 * Whether a decision is a shadow refusal (SHADOW, or a META hash's
 * `shadow 1`): admitted, yet the limit would have refused it. One rule,
 * the Python package's too: a map reply (RESP3) says it with its `shadow`
 * field, present on a shadow refusal only; an array reply (RESP2) is one
 * when it is admitted with retry_after_ms -1 (a cost that can never fit)
 * or > 0, except for a call that named algorithm "leaky", whose admissions
 * carry their delay there (a leaky shadow refusal is told only by the
 * module's RESP3 map; the library answers arrays).
 */
function isShadowRefusal(admitted, retryAfterMs, { named, extra }, algorithm) {
  if (!admitted) return false;
  if (named) return extra.shadow !== undefined && toInt(extra.shadow) === 1;
  return retryAfterMs === -1 || (retryAfterMs > 0 && algorithm !== "leaky");
}

/**
 * RL.ADMIT / RL.REFUND's reply as a frozen Decision. `policy` (the call's
 * checked policy) gives the decision its window and name, for headers(),
 * and its algorithm, for telling a shadow refusal (`shadow: true`).
 */
function parseDecision(reply, backend, policy = {}) {
  const read = readFields(reply, DECISION_FIELDS, "RL.ADMIT", ["shadow"]);
  const [admitted, limit, remaining, retryAfterMs, resetAfterMs] = read.values.map(toInt);
  return Object.freeze({
    admitted: admitted === 1,
    limit,
    remaining,
    retryAfterMs,
    resetAfterMs,
    shadow: isShadowRefusal(admitted === 1, retryAfterMs, read, policy.algorithm),
    backend,
    ...(policy.windowMs !== undefined ? { windowMs: policy.windowMs } : {}),
    ...(policy.name !== undefined ? { name: policy.name } : {}),
  });
}

/**
 * The decision of the failure policy when Valkey cannot be reached: open
 * admits, closed refuses and asks for a retry after 1 s.
 */
function unavailableDecision(policy, open, error) {
  const limit = policy.limit ?? 0;
  return Object.freeze({
    admitted: open,
    limit,
    remaining: open ? limit : 0,
    retryAfterMs: open ? 0 : UNAVAILABLE_RETRY_MS,
    resetAfterMs: 0,
    shadow: false,
    backend: "unavailable",
    ...(policy.windowMs !== undefined ? { windowMs: policy.windowMs } : {}),
    ...(policy.name !== undefined ? { name: policy.name } : {}),
    error,
  });
}

/**
 * The shadow refusal of a limit of 0 where it refuses everything
 * (express-rate-limit's): admitted, never passable, no call made.
 */
function zeroLimitShadowRefusal(policy) {
  return Object.freeze({
    admitted: true,
    limit: 0,
    remaining: 0,
    retryAfterMs: -1,
    resetAfterMs: 0,
    shadow: true,
    backend: null,
    ...(policy.windowMs !== undefined ? { windowMs: policy.windowMs } : {}),
    ...(policy.name !== undefined ? { name: policy.name } : {}),
  });
}

/** A granted decision WAIT did not confirm, as refused (its grant given back). */
function unconfirmedDecision(decision, replicas) {
  return Object.freeze({
    ...decision,
    admitted: false,
    remaining: 0,
    retryAfterMs: UNAVAILABLE_RETRY_MS,
    shadow: false,
    unconfirmed: replicas,
  });
}

const LEASE_FIELDS = ["acquired", "limit", "in_flight", "retry_after_ms", "lease_id"];

/**
 * RL.ACQUIRE's reply as a frozen Lease. `shadow`: a shadow refusal (SHADOW,
 * or the META hash's `shadow 1`): acquired, yet the ceiling would have
 * refused it, and no lease was taken. A map says it with its `shadow`
 * field; an array by `acquired` 1 with `retry_after_ms` > 0, which only a
 * shadow refusal answers.
 */
function parseLease(reply, backend) {
  const read = readFields(reply, LEASE_FIELDS, "RL.ACQUIRE", ["shadow"]);
  const { values } = read;
  const [acquired, limit, inFlight, retryAfterMs] = values.slice(0, 4).map(toInt);
  const id = values[4];
  const shadow = read.named
    ? read.extra.shadow !== undefined && toInt(read.extra.shadow) === 1
    : acquired === 1 && retryAfterMs > 0;
  return Object.freeze({
    acquired: acquired === 1,
    limit,
    inFlight,
    retryAfterMs,
    leaseId: id === null || id === undefined ? null : String(id),
    shadow,
    backend,
  });
}

// ------------------------------------------------------------- the headers

const ceilSeconds = (ms) => Math.ceil(ms / 1000);

/**
 * The name of a policy in the header fields: the user's, else
 * "<limit>-in-<window in whole seconds>sec" (express-rate-limit's draft-8
 * naming for windows under a minute), or "<limit>" with no known window.
 */
function defaultPolicyName(limit, windowMs) {
  return windowMs === undefined ? String(limit) : `${limit}-in-${ceilSeconds(windowMs)}sec`;
}

/**
 * The IETF RateLimit header fields for a decision
 * (draft-ietf-httpapi-ratelimit-headers): RateLimit-Policy (q: the limit
 * the server applied, w: the window) and RateLimit (r: cost-1 requests that
 * would pass now; t: seconds until the quota is whole again, or, refused,
 * until the request would pass), plus Retry-After (whole seconds, rounded up)
 * on a refusal that waiting cures. A decision of the failure policy, or of an
 * unlimited policy, advertises no quota. Window and name come from the
 * decision unless given here.
 */
function headers(decision, options = {}) {
  const windowMs = given(options.windowMs) ? safeInteger("windowMs", options.windowMs, 1) : decision.windowMs;
  const name = given(options.name) ? policyName("name", options.name) : decision.name;
  const out = {};
  const waits = !decision.admitted && decision.retryAfterMs >= 0;
  if (decision.limit > 0 && decision.backend !== "unavailable") {
    const label = name ?? defaultPolicyName(decision.limit, windowMs);
    const w = windowMs === undefined ? "" : `;w=${ceilSeconds(windowMs)}`;
    out["RateLimit-Policy"] = `"${label}";q=${decision.limit}${w}`;
    const t = ceilSeconds(waits ? decision.retryAfterMs : decision.resetAfterMs);
    out["RateLimit"] = `"${label}";r=${decision.remaining};t=${t}`;
  }
  if (waits) out["Retry-After"] = String(Math.max(1, ceilSeconds(decision.retryAfterMs)));
  return out;
}

// ----------------------------------------------------------- the errors

// The message of a thrown value, whatever the client threw.
const messageOf = (e) => String(e && e.message !== undefined ? e.message : e);

// valkey-glide reports a server's error reply as "An error was signalled by
// the server: - <Kind>: <text>", without the reply's code.
const GLIDE_REPLY = /An error was signalled by the server: - (\w+): ?(.*)$/s;

/**
 * What an error from the client means: "reply" (the server answered with an
 * error, or something is wrong here: raise it), or "unreachable" (no answer,
 * or a server that cannot answer now: the failure policy applies).
 */
function errorKind(e) {
  // This package's own errors say; a JavaScript error is a bug, never an outage.
  if (e && typeof e.unreachable === "boolean") return e.unreachable ? "unreachable" : "reply";
  if (e instanceof TypeError || e instanceof RangeError || e instanceof ReferenceError || e instanceof SyntaxError) {
    return "reply";
  }
  const text = messageOf(e);
  const glide = GLIDE_REPLY.exec(text);
  if (glide) return UNAVAILABLE_KINDS.includes(glide[1]) || /^(LOADING|BUSY|MASTERDOWN)\b/.test(glide[2]) ? "unreachable" : "reply";
  const code = /^([A-Z][A-Z0-9_]*)(\s|$)/.exec(text);
  if (code) return UNAVAILABLE_CODES.includes(code[1]) ? "unreachable" : "reply";
  const name = e && (e.name || (e.constructor && e.constructor.name));
  if (["ReplyError", "ErrorReply", "SimpleError", "BlobError"].includes(name)) return "reply";
  return "unreachable";
}

const isUnknownCommand = (e) => /unknown command/i.test(messageOf(e));
const isFunctionMissing = (e) => /function not found/i.test(messageOf(e));
const isLibraryExists = (e) => /already exists/i.test(messageOf(e));
const isNoPermission = (e) => /NOPERM|no permissions/i.test(messageOf(e));

// ------------------------------------------------------------- versions

/** The version a library source states (`local VERSION = 'x.y.z'`), or null. */
function libraryVersion(source) {
  const m = /^local VERSION = '([0-9]+\.[0-9]+\.[0-9]+)'/m.exec(source);
  return m ? m[1] : null;
}

/** -1, 0 or 1 as version `a` is older than, the same as or newer than `b`; null (no version) is oldest. */
function compareVersions(a, b) {
  if (a === b) return 0;
  if (a === null) return -1;
  if (b === null) return 1;
  const pa = a.split(".").map(Number);
  const pb = b.split(".").map(Number);
  for (let i = 0; i < Math.max(pa.length, pb.length); i++) {
    const d = (pa[i] ?? 0) - (pb[i] ?? 0);
    if (d !== 0) return d < 0 ? -1 : 1;
  }
  return 0;
}

module.exports = {
  ALGORITHMS,
  WINDOWS,
  CALENDAR_PERIODS,
  BACKENDS,
  FAILURE_POLICIES,
  CALL_FAILURE_POLICIES,
  UNCONFIRMED_POLICIES,
  DEFAULT_TIMEOUT_MS,
  UNAVAILABLE_RETRY_MS,
  UNAVAILABLE_STATUS,
  COUNT_EVERY_HIT,
  LOAD_COMMAND,
  ConfigError,
  show,
  check,
  safeInteger,
  oneOf,
  string,
  policyName,
  keyPart,
  fn,
  bool,
  valueOrFunction,
  SAFE_INTEGER,
  KEY,
  checkPolicy,
  CALLS,
  policyArgs,
  callWords,
  toInt,
  badReply,
  parseDecision,
  isShadowRefusal,
  unavailableDecision,
  zeroLimitShadowRefusal,
  unconfirmedDecision,
  parseLease,
  ceilSeconds,
  defaultPolicyName,
  headers,
  messageOf,
  errorKind,
  isUnknownCommand,
  isFunctionMissing,
  isLibraryExists,
  isNoPermission,
  libraryVersion,
  compareVersions,
};
