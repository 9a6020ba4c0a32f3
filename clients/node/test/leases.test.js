// The lease helpers against a real server: Limiter's acquire, release,
// extend, inFlight and withLease, checked against the sorted set the server
// keeps (member = lease id, score = deadline in ms).
//
//   VALKEY_HOST=127.0.0.1 VALKEY_PORT=6379 RL_EXPECT_BACKEND=module node test/leases.test.js live
//
// `live` expects a running server with the module (RL_EXPECT_BACKEND=module)
// or with only the FUNCTION library (functions). Prints one `ok <check>`
// line per check and exits non-zero on the first failure.
"use strict";

const assert = require("node:assert/strict");
const Valkey = require("iovalkey");
const { Limiter, LeaseRefusedError, LeaseLostError } = require("..");

const HOST = process.env.VALKEY_HOST || "127.0.0.1";
const PORT = Number(process.env.VALKEY_PORT || "6379");
const GENERATED_ID = /^[0-9a-f]+-[0-9a-f]{16}$/;

const ok = (what) => console.log(`ok ${what}`);
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

function client() {
  const c = new Valkey({ host: HOST, port: PORT, maxRetriesPerRequest: 1 });
  c.on("error", () => {});
  return c;
}

async function timeMs(c) {
  const [s, us] = await c.call("TIME");
  return Number(s) * 1000 + Math.floor(Number(us) / 1000);
}

async function waitFor(what, cond, timeoutMs = 5000) {
  const deadline = Date.now() + timeoutMs;
  while (!(await cond())) {
    assert.ok(Date.now() < deadline, `timed out waiting for ${what}`);
    await sleep(10);
  }
}

async function plainCalls(c, limiter, expect) {
  const key = "lease:plain";
  const t0 = await timeMs(c);
  const a = await limiter.acquire("plain", { limit: 2, ttlMs: 5000 });
  const t1 = await timeMs(c);
  assert.deepEqual(
    { ...a, leaseId: "" },
    { acquired: true, limit: 2, inFlight: 1, retryAfterMs: 0, leaseId: "", shadow: false, backend: expect },
  );
  assert.match(a.leaseId, GENERATED_ID);
  const deadline = Number(await c.zscore(key, a.leaseId));
  assert.ok(t0 + 5000 <= deadline && deadline <= t1 + 5000, `${t0} ${deadline} ${t1}`);
  assert.equal(Number(await c.call("PEXPIRETIME", key)), deadline, "the key expires with its latest lease");
  await limiter.acquire("plain", { limit: 2, ttlMs: 5000, id: "job-7" });
  const again = await limiter.acquire("plain", { limit: 2, ttlMs: 9000, id: "job-7" });
  assert.equal(again.acquired, true);
  assert.equal(again.leaseId, "job-7");
  assert.equal(again.inFlight, 2, "renewing an id takes no second slot");
  const refused = await limiter.acquire("plain", { limit: 2, ttlMs: 5000 });
  assert.equal(refused.acquired, false);
  assert.equal(refused.leaseId, null);
  assert.equal(refused.inFlight, 2);
  assert.ok(refused.retryAfterMs > 0 && refused.retryAfterMs <= deadline - t0, String(refused.retryAfterMs));
  assert.equal(await limiter.inFlight("plain"), 2);
  assert.equal(await limiter.extend("plain", "job-7", 20000), true);
  assert.ok(Number(await c.zscore(key, "job-7")) >= t1 + 19000);
  assert.equal(await limiter.release("plain", "job-7"), true);
  assert.equal(await limiter.release("plain", "job-7"), false, "released twice");
  assert.equal(await limiter.extend("plain", "job-7", 1000), false, "extend of a released lease");
  assert.equal(await limiter.release("plain", a.leaseId), true);
  assert.equal(await limiter.inFlight("plain"), 0);
  assert.equal(await c.exists(key), 0, "no lease left: key gone");
  ok(`${expect}: acquire/release/extend/inFlight, renew by id, refusal, key gone at the end`);

  const free = await limiter.acquire("free");
  assert.equal(free.acquired, true);
  assert.equal(free.limit, 0);
  assert.match(free.leaseId, GENERATED_ID);
  assert.equal(await limiter.withLease("free", { ttlMs: 1000 }, (held) => held.lease.limit), 0);
  assert.equal(await c.exists("lease:free"), 0, "unlimited stores nothing");
  await c.hset("lease:meta", "max", "1", "ttl", "4000");
  const m = await limiter.acquire("m", { meta: "lease:meta" });
  assert.equal(m.acquired, true);
  assert.equal(m.limit, 1);
  assert.equal((await limiter.acquire("m", { meta: "lease:meta" })).acquired, false);
  assert.equal(await limiter.release("m", m.leaseId), true);
  ok(`${expect}: unlimited stores nothing; META max/ttl apply`);
}

// A shadow lease ceiling (shadow: true): never refused; a would-be refusal
// is acquired with `shadow` true and takes no lease; releasing it, or
// running withLease on it, is a harmless no-op.
async function shadowChecks(c, limiter, expect) {
  const key = "lease:sh";
  const first = await limiter.acquire("sh", { limit: 1, ttlMs: 5000, id: "real", shadow: true });
  assert.deepEqual([first.acquired, first.shadow, first.retryAfterMs], [true, false, 0]);
  const would = await limiter.acquire("sh", { limit: 1, ttlMs: 5000, shadow: true });
  assert.equal(would.acquired, true);
  assert.equal(would.shadow, true);
  assert.ok(would.retryAfterMs > 0, String(would.retryAfterMs));
  assert.match(would.leaseId, GENERATED_ID);
  assert.equal(would.inFlight, 1);
  assert.deepEqual(await c.zrange(key, 0, -1), ["real"], "a shadow refusal takes no lease");
  assert.equal(await limiter.release("sh", would.leaseId), false, "releasing a shadow lease: a no-op");
  const ran = await limiter.withLease("sh", { limit: 1, ttlMs: 300, shadow: true }, async (held) => {
    await sleep(250);
    return held.lease.shadow;
  });
  assert.equal(ran, true, "withLease runs fn on a shadow lease, and neither extends nor releases it");
  assert.equal((await limiter.acquire("sh", { limit: 1, ttlMs: 5000 })).acquired, false, "enforced: refused");
  await c.hset("lease:shmeta", "max", "1", "ttl", "5000", "shadow", "1");
  assert.equal((await limiter.acquire("sh", { meta: "lease:shmeta" })).shadow, true);
  await assert.rejects(limiter.acquire("sh", { limit: 1, ttlMs: 5, shadow: "yes" }), /shadow/);
  assert.equal(await limiter.release("sh", "real"), true);
  ok(`${expect}: shadow acquires never refuse, take no lease, release as a no-op`);
}

async function withLeaseChecks(c, limiter, expect) {
  const key = "lease:cm";
  const result = await limiter.withLease("cm", { limit: 2, ttlMs: 5000 }, async (held) => {
    assert.notEqual(await c.zscore(key, held.id), null, "held while fn runs");
    assert.equal(await limiter.inFlight("cm"), 1);
    return "done";
  });
  assert.equal(result, "done");
  assert.equal(await c.exists(key), 0, "released after fn");
  await assert.rejects(
    limiter.withLease("cm", { limit: 2, ttlMs: 5000 }, async () => {
      assert.equal(await c.zcard(key), 1);
      throw new RangeError("the work failed");
    }),
    RangeError,
  );
  assert.equal(await c.exists(key), 0, "released after fn threw");
  ok(`${expect}: withLease releases after fn, and after fn throws`);

  await limiter.acquire("busy", { limit: 1, ttlMs: 4000, id: "holder" });
  const deadline = Number(await c.zscore("lease:busy", "holder"));
  let ran = false;
  const t0 = await timeMs(c);
  const refusal = await limiter
    .withLease("busy", { limit: 1, ttlMs: 4000 }, () => {
      ran = true;
    })
    .then(
      () => assert.fail("a full semaphore must refuse"),
      (e) => e,
    );
  const t1 = await timeMs(c);
  assert.ok(refusal instanceof LeaseRefusedError, String(refusal));
  assert.equal(ran, false);
  assert.ok(deadline - t1 <= refusal.retryAfterMs && refusal.retryAfterMs <= deadline - t0, `${refusal.retryAfterMs}`);
  assert.equal(refusal.lease.leaseId, null);
  ok(`${expect}: refusal throws LeaseRefusedError with retryAfterMs ${refusal.retryAfterMs} (holder's deadline - now)`);

  await limiter.withLease("hb", { limit: 1, ttlMs: 300 }, async (held) => {
    const first = Number(await c.zscore("lease:hb", held.id));
    await sleep(1000);
    assert.equal(held.lost, false);
    assert.equal(await limiter.inFlight("hb"), 1, "alive past its TTL");
    assert.ok(Number(await c.zscore("lease:hb", held.id)) > first + 500);
    assert.equal((await limiter.acquire("hb", { limit: 1, ttlMs: 300 })).acquired, false);
  });
  assert.equal(await c.exists("lease:hb"), 0);
  // The control: without the heartbeat the lease runs out, and the release says so.
  await assert.rejects(
    limiter.withLease("nohb", { limit: 1, ttlMs: 300, heartbeat: false }, async () => {
      await sleep(600);
      assert.equal(await limiter.inFlight("nohb"), 0, "expired without beats");
    }),
    LeaseLostError,
  );
  ok(`${expect}: the heartbeat keeps a 300 ms lease alive through 1 s (without it: LeaseLostError)`);

  // Loss: the signal aborts with a LeaseLostError; withLease rejects with it.
  let aborted = false;
  const started = Date.now();
  await assert.rejects(
    limiter.withLease("lost", { limit: 1, ttlMs: 300 }, async (held) => {
      await c.zrem("lease:lost", held.id);
      await new Promise((resolve, reject) => {
        const timer = setTimeout(resolve, 5000);
        held.signal.addEventListener("abort", () => {
          aborted = true;
          clearTimeout(timer);
          reject(held.signal.reason);
        });
      });
    }),
    LeaseLostError,
  );
  const took = Date.now() - started;
  assert.ok(aborted && took < 2000, `aborted ${aborted} after ${took} ms`);
  ok(`${expect}: a lost lease aborts held.signal (after ${took} ms) and withLease throws LeaseLostError`);
}

async function crowd(c, limiter, expect) {
  let inside = 0;
  let most = 0;
  let refusals = 0;
  let done = false;
  const samples = [];
  const sampler = (async () => {
    while (!done) {
      const [n, card] = await Promise.all([limiter.inFlight("crowd"), c.zcard("lease:crowd")]);
      samples.push(Math.max(n, Number(card)));
    }
  })();
  const holder = async () => {
    for (let round = 0; round < 8; round++) {
      for (;;) {
        try {
          await limiter.withLease("crowd", { limit: 3, ttlMs: 5000 }, async () => {
            inside += 1;
            most = Math.max(most, inside);
            await sleep(2 + Math.random() * 6);
            inside -= 1;
          });
          break;
        } catch (e) {
          if (!(e instanceof LeaseRefusedError)) throw e;
          assert.ok(e.retryAfterMs > 0 && e.retryAfterMs <= 5000);
          refusals += 1;
          // A release frees a slot long before retryAfterMs: poll a little.
          await sleep(1 + Math.random() * 3);
        }
      }
    }
  };
  await Promise.all(Array.from({ length: 20 }, holder));
  done = true;
  await sampler;
  const max = Math.max(...samples);
  assert.ok(max <= 3, `sampled in-flight ${max} > 3`);
  assert.equal(most, 3, "the crowd fills all 3 slots");
  assert.ok(refusals > 0);
  assert.equal(await c.exists("lease:crowd"), 0, "every lease released");
  ok(`${expect}: 20 holders x 8 leases, LIMIT 3: ${samples.length} samples, max in flight ${max}, ${refusals} refusals`);
}

// waitMs (issue 28): acquire BLOCKs on the module, answered at the release;
// on the library it sleeps retryAfterMs with jitter, answered at the next
// try. wait on a fixed window (which cannot book a later window's slot,
// issue 38) sleeps and retries on both.
async function waitChecks(c, expect) {
  const own = client(); // a lease's BLOCK holds its connection: one of its own
  try {
    const waiter = new Limiter({ sendCommand: (...args) => own.call(...args), timeoutMs: 5000, prefix: "lease:" });
    const holder = new Limiter({ sendCommand: (...args) => c.call(...args), timeoutMs: 5000, prefix: "lease:" });
    // t0 before the holder's lease: its 1500 ms end comes no sooner than
    // t0 + 1500, so a slot within 1400 ms came from the release (at 200 ms;
    // 1.2 s to spare on a busy machine), and the library's retry, which
    // waits for that end, comes no sooner than 1400.
    const t0 = Date.now();
    const held = await holder.acquire("wait", { limit: 1, ttlMs: 1500 });
    assert.equal(held.acquired, true);
    const pending = waiter.acquire("wait", { limit: 1, ttlMs: 5000, waitMs: 3000 });
    await sleep(200);
    assert.equal(await holder.release("wait", held.leaseId), true);
    const got = await pending;
    const took = Date.now() - t0;
    assert.equal(got.acquired, true);
    if (expect === "module") assert.ok(took < 1400, `BLOCK answered ${took} ms after the start`);
    else assert.ok(took >= 1400, `the library's retry came ${took} ms after the start`);
    await assert.rejects(() => waiter.acquire("wait", { limit: 1, ttlMs: 100, waitMs: 0 }), /waitMs/);
    assert.equal((await holder.admit("rate", { limit: 1, windowMs: 600 })).admitted, true);
    const t1 = Date.now();
    const admitted = await waiter.wait("rate", { limit: 1, windowMs: 600, waitMs: 2000 });
    const waited = Date.now() - t1;
    assert.equal(admitted.admitted, true);
    // Upper bounds generous: only "admitted (not timed out)" and "gave up
    // at its waitMs, not at the 60 s window" are what they check.
    assert.ok(waited >= 200 && waited < 5000, `admitted after ${waited} ms`);
    const t2 = Date.now();
    const refused = await waiter.wait("rate", { limit: 1, windowMs: 60000, waitMs: 150 });
    const gaveUp = Date.now() - t2;
    assert.equal(refused.admitted, false);
    assert.ok(gaveUp >= 100 && gaveUp < 5000, `refused after ${gaveUp} ms`);
    await assert.rejects(() => waiter.wait("rate", { limit: 1, windowMs: 600 }), /waitMs/);
    ok(`${expect}: waitMs: a slot after ${took} ms, admitted after ${waited} ms, refused after ${gaveUp} ms`);
  } finally {
    own.disconnect();
  }
}

async function live(expect) {
  const c = client();
  const sampling = client();
  try {
    await c.call("FLUSHALL");
    const limiter = new Limiter({ sendCommand: (...args) => c.call(...args), timeoutMs: 5000, prefix: "lease:" });
    assert.equal(await limiter.backend(), expect);
    await plainCalls(c, limiter, expect);
    await shadowChecks(c, limiter, expect);
    await withLeaseChecks(c, limiter, expect);
    await crowd(sampling, limiter, expect);
    await waitChecks(c, expect);
  } finally {
    c.disconnect();
    sampling.disconnect();
  }
}

async function main() {
  const phase = process.argv[2];
  if (phase !== "live") throw new Error("usage: leases.test.js live");
  const expect = process.env.RL_EXPECT_BACKEND;
  assert.ok(expect === "module" || expect === "functions", "RL_EXPECT_BACKEND must be module or functions");
  await live(expect);
  console.log(`PASS node leases ${phase}`);
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
