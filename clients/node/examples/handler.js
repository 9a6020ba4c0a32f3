#!/usr/bin/env node
// Rate-limit an HTTP handler with valkey-ratelimit's Limiter, on iovalkey.
//
// handleRequest() is what an Express/Fastify handler would call: one
// Limiter.admit per request against the client's limiter, and headers() for
// the IETF RateLimit header fields (draft-ietf-httpapi-ratelimit-headers):
//
//   RateLimit-Policy: "default";q=100;w=60   the quota: q requests per w seconds
//   RateLimit: "default";r=42;t=17           r remaining, t seconds to the reset
//   Retry-After: 17                          only on 429, seconds, rounded up
//
// (With Express, the package's ValkeyStore under express-rate-limit does this
// for every request.) Run it against a server with the module loaded
// (`make run`), after `make client-deps` (npm ci in clients/node):
//
//   node clients/node/examples/handler.js --port 6379 --client acme --limit 3 -n 4
//
// It prints the N responses as HTTP/1.1 text. The port also comes from
// $VALKEY_PORT, the host from $VALKEY_HOST. --cluster uses Valkey.Cluster.
//
// With --queue N the policy shapes instead of capping: a leaky bucket
// (algorithm "leaky", burst N) lets requests proceed --limit per --window,
// one interval apart, with up to N waiting. An admitted request told to wait
// (retryAfterMs > 0) is held that long, then served; only a request that
// would find the queue full is refused (429).
//
// With --lease N the handler caps work in flight instead of its rate: each
// request runs inside limiter.withLease() on the client's semaphore
// rl:{<client id>}:inflight (at most N at once, each lease lasting --ttl ms
// and kept alive by the heartbeat while the work, --work ms, runs), and is
// released when it ends. A request that finds all N slots taken gets 429
// with Retry-After: the seconds until the earliest lease would end by itself.
"use strict";

const { parseArgs } = require("node:util");
const Valkey = require("iovalkey");
const { Limiter, LeaseRefusedError, headers: rateLimitHeaders } = require("..");

// The counter's key: rl:{<client id>}:<policy>. The braces are a cluster hash
// tag, so all keys of one client share a slot (see the Python example).
function limiterKey(clientId, policy) {
  if (/[{}]/.test(clientId)) {
    throw new Error("client id must not contain '{' or '}'");
  }
  return `rl:{${clientId}}:${policy.name}`;
}

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

// Limiter.admit's policy: a fixed window of policy.limit per policy.windowS
// seconds, or, with policy.queue, that rate as a leaky bucket with
// policy.queue places to wait.
function admitOptions(policy) {
  const opts = { limit: policy.limit, windowMs: policy.windowS * 1000 };
  if (policy.queue == null) {
    return opts;
  }
  return { ...opts, algorithm: "leaky", burst: policy.queue };
}

// Admit or refuse one request of clientId: resolves to {status, headers, body}.
async function handleRequest(limiter, clientId, policy) {
  let key;
  try {
    key = limiterKey(clientId, policy);
  } catch (e) {
    return {
      status: 400,
      headers: { "Content-Type": "application/json" },
      body: JSON.stringify({ error: e.message }),
    };
  }
  const decision = await limiter.admit(key, admitOptions(policy));
  // While Valkey is unreachable the Limiter's default failure policy admits
  // (decision.backend "unavailable"), and reports the outage once, not here.
  let headers = rateLimitHeaders(decision, { windowMs: policy.windowS * 1000, name: policy.name });
  if (policy.queue != null) {
    // A leaky bucket's limit is its queue, not a quota: only Retry-After.
    headers = "Retry-After" in headers ? { "Retry-After": headers["Retry-After"] } : {};
  }
  let status, body;
  if (decision.admitted && policy.queue != null) {
    // Shaping: wait for this request's turn, then serve it.
    await sleep(decision.retryAfterMs);
    status = 200;
    body = { ok: true, client: clientId, waited_ms: decision.retryAfterMs };
  } else if (decision.admitted) {
    status = 200;
    body = { ok: true, client: clientId };
  } else if (!("Retry-After" in headers)) {
    // The request costs more than the whole quota: waiting will not help.
    status = 429;
    body = { error: "request exceeds the quota" };
  } else {
    status = 429;
    body = { error: "rate limited", retry_after: Number(headers["Retry-After"]) };
  }
  headers["Content-Type"] = "application/json";
  return { status, headers, body: JSON.stringify(body) };
}

// The client's semaphore: rl:{<client id>}:inflight, in the slot of its limiters.
function leaseKey(clientId) {
  if (/[{}]/.test(clientId)) {
    throw new Error("client id must not contain '{' or '}'");
  }
  return `rl:{${clientId}}:inflight`;
}

// Run one request of clientId under a lease, at most `slots` at once:
// resolves to {status, headers, body}.
async function handleLeasedRequest(limiter, clientId, slots, ttlMs, workMs = 0) {
  const headers = { "Content-Type": "application/json" };
  let key;
  try {
    key = leaseKey(clientId);
  } catch (e) {
    return { status: 400, headers, body: JSON.stringify({ error: e.message }) };
  }
  try {
    // Acquired first; extended every ttlMs / 3 while the work runs; released
    // when it ends, also when it throws.
    const inFlight = await limiter.withLease(key, { limit: slots, ttlMs }, async (held) => {
      await sleep(workMs); // the request's work
      return held.lease.inFlight;
    });
    return { status: 200, headers, body: JSON.stringify({ ok: true, client: clientId, in_flight: inFlight }) };
  } catch (e) {
    if (!(e instanceof LeaseRefusedError)) throw e;
    // All slots taken: the earliest lease ends by itself in retryAfterMs (a
    // holder that finishes first frees its slot sooner).
    const retry = Math.max(1, Math.ceil(e.retryAfterMs / 1000));
    return {
      status: 429,
      headers: { "Retry-After": String(retry), ...headers },
      body: JSON.stringify({ error: "too many in flight", retry_after: retry }),
    };
  }
}

const REASONS = { 200: "OK", 400: "Bad Request", 429: "Too Many Requests" };

function formatResponse({ status, headers, body }) {
  const lines = [`HTTP/1.1 ${status} ${REASONS[status] || ""}`.trimEnd()];
  for (const [name, value] of Object.entries(headers)) {
    lines.push(`${name}: ${value}`);
  }
  return lines.join("\n") + "\n\n" + body + "\n";
}

function makeClient(host, port, cluster) {
  // maxRetriesPerRequest: fail a request after one reconnect attempt instead
  // of queueing it for minutes while the server is down. lazyConnect: connect
  // on the first command (quit() before any is then immediate).
  const options = { maxRetriesPerRequest: 1, connectTimeout: 5000, lazyConnect: true };
  if (cluster) {
    // Any node will do: the client discovers the others and follows
    // MOVED/ASK. It knows the keys of built-in commands only: RL.ADMIT (sent
    // with call()) goes to any node first and is redirected to the one
    // owning its key's slot.
    // clusterRetryStrategy: give up after a few attempts to reach the
    // cluster (the default retries forever). A node that answers with an
    // empty address in CLUSTER SLOTS (a lone node without
    // cluster-announce-ip) cannot be routed to.
    return new Valkey.Cluster([{ host, port }], {
      lazyConnect: true,
      redisOptions: options,
      clusterRetryStrategy: (times) => (times > 3 ? null : 200),
    });
  }
  return new Valkey({ host, port, ...options });
}

async function main() {
  const { values } = parseArgs({
    options: {
      host: { type: "string", default: process.env.VALKEY_HOST || "127.0.0.1" },
      port: { type: "string", default: process.env.VALKEY_PORT || "6379" },
      cluster: { type: "boolean", default: false },
      client: { type: "string", default: "anonymous" },
      policy: { type: "string", default: "default" },
      limit: { type: "string", default: "100" },
      window: { type: "string", default: "60" },
      queue: { type: "string" },
      lease: { type: "string" },
      ttl: { type: "string", default: "30000" },
      work: { type: "string", default: "0" },
      requests: { type: "string", short: "n", default: "1" },
    },
  });
  const int = (name) => {
    const n = Number(values[name]);
    if (!Number.isSafeInteger(n) || n < 0) {
      throw new Error(`--${name} must be a non-negative integer, got ${values[name]}`);
    }
    return n;
  };
  const policy = {
    name: values.policy,
    limit: int("limit"),
    windowS: int("window"),
    queue: values.queue === undefined ? null : int("queue"),
  };
  const client = makeClient(values.host, int("port"), values.cluster);
  // Connection errors also reject the pending command; log them once here
  // instead of as "Unhandled error event".
  client.on("error", (e) => console.error(`valkey: ${e.message}`));
  // Module commands have no method of their own: call() sends any command.
  const limiter = new Limiter({ sendCommand: (...args) => client.call(...args) });
  try {
    for (let i = 0; i < int("requests"); i++) {
      const response =
        values.lease === undefined
          ? await handleRequest(limiter, values.client, policy)
          : await handleLeasedRequest(limiter, values.client, int("lease"), int("ttl"), int("work"));
      process.stdout.write(formatResponse(response) + "\n");
    }
  } finally {
    await client.quit();
  }
}

if (require.main === module) {
  main().catch((e) => {
    console.error(e);
    process.exit(1);
  });
}

module.exports = { handleRequest, handleLeasedRequest, limiterKey, leaseKey, formatResponse };
