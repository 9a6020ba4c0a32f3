// The durability option (waitReplicas): a primary and a replica whose link
// runs through a proxy in this program, which can cut it (drop everything,
// both ways: a partitioned replica). With the link cut, a grant the replica
// never hears of is a grant a failover forgets: promoted, the replica hands
// the same slot out again, and a LIMIT 1 lease has two holders. With
// waitReplicas, WAIT sees no replica confirm the grant, and the package gives
// it back and refuses: after the failover there is one holder.
//
//   VALKEY_PORT=<primary> RL_REPLICA_PORT=<replica> RL_EXPECT_BACKEND=module|functions \
//     node test/durability.test.js
"use strict";

const assert = require("node:assert/strict");
const net = require("node:net");
const { rateLimit } = require("express-rate-limit");
const { Limiter, ValkeyStore } = require("..");
const { ok, sleep, client, sendVia, serve, get, PORT, runMain, expectedBackend } = require("./support");

const REPLICA_PORT = Number(process.env.RL_REPLICA_PORT);

// A TCP proxy to `port` that forwards both ways until cut, then drops all.
function proxy(port) {
  let cut = false;
  const server = net.createServer((downstream) => {
    const upstream = net.connect(port, "127.0.0.1");
    for (const s of [downstream, upstream]) s.on("error", () => {});
    downstream.on("data", (d) => cut || upstream.write(d));
    upstream.on("data", (d) => cut || downstream.write(d));
    downstream.on("close", () => upstream.destroy());
    upstream.on("close", () => downstream.destroy());
  });
  return new Promise((resolve) =>
    server.listen(0, "127.0.0.1", () =>
      resolve({
        port: server.address().port,
        cut: () => {
          cut = true;
        },
        close: () => server.close(),
      }),
    ),
  );
}

async function waitFor(what, check, ms = 10000) {
  const deadline = Date.now() + ms;
  while (!(await check())) {
    assert.ok(Date.now() < deadline, `timed out waiting for ${what}`);
    await sleep(20);
  }
}

const info = async (c, field) => new RegExp(`^${field}:(.*)$`, "m").exec(await c.info("replication"))?.[1]?.trim();

async function durability(expect) {
  assert.ok(REPLICA_PORT, "RL_REPLICA_PORT must name the replica's port");
  const primary = client();
  const replica = client({}, REPLICA_PORT);
  const link = await proxy(PORT);
  await replica.call("REPLICAOF", "127.0.0.1", String(link.port));
  await waitFor("the replica's link", async () => (await info(replica, "master_link_status")) === "up");

  const send = sendVia(primary);
  const base = { sendCommand: send, timeoutMs: 5000 };
  const durable = new Limiter({ ...base, waitReplicas: 1, waitTimeoutMs: 200 });
  const keeping = new Limiter({ ...base, waitReplicas: 1, waitTimeoutMs: 200, unconfirmed: "keep" });
  const plain = new Limiter(base);
  const store = new ValkeyStore({ ...base, waitReplicas: 1, waitTimeoutMs: 200, prefix: "http:" });
  const app = await serve({ "/api": rateLimit({ windowMs: 60000, limit: 10, keyGenerator: () => "k", store }) });
  try {
    // Linked: every grant is confirmed.
    const lease = await durable.acquire("warm", { limit: 1, ttlMs: 60000 });
    assert.equal(lease.acquired, true);
    assert.equal(lease.unconfirmed, undefined);
    assert.equal((await durable.admit("warm:count", { limit: 1, windowMs: 60000 })).admitted, true);
    assert.equal((await get(`${app.base}/api`)).status, 200);
    ok(`${expect}: linked: WAIT 1 confirms every grant (acquire, admit, the store)`);

    link.cut();
    // Without the option: granted, though the replica will never know.
    const control = await plain.acquire("gpu:control", { limit: 1, ttlMs: 60000 });
    assert.equal(control.acquired, true);
    // With it: WAIT 1 200 answers 0, the lease is released and refused.
    const refused = await durable.acquire("gpu:durable", { limit: 1, ttlMs: 60000 });
    assert.equal(refused.acquired, false);
    assert.equal(refused.leaseId, null);
    assert.equal(refused.unconfirmed, 0);
    assert.equal(await primary.zcard("gpu:durable"), 0, "the unconfirmed lease was released");
    const admitted = await durable.admit("count", { limit: 5, windowMs: 60000 });
    assert.equal(admitted.admitted, false);
    assert.equal(admitted.unconfirmed, 0);
    assert.equal(await primary.get("count"), null, "the unconfirmed hit was refunded");
    const kept = await keeping.acquire("gpu:kept", { limit: 1, ttlMs: 60000 });
    assert.equal(kept.acquired, true);
    assert.equal(kept.unconfirmed, 0);
    assert.equal(await primary.zcard("gpu:kept"), 1, "unconfirmed: 'keep' keeps it");
    const res = await get(`${app.base}/api`);
    assert.equal(res.status, 503, "the store refuses an unconfirmed grant with 503");
    assert.equal(res.headers.get("retry-after"), "1");
    ok(`${expect}: link cut: an unconfirmed lease is released and refused, a hit refunded and refused, the store answers 503; 'keep' keeps it`);

    // Failover: the replica, promoted, has never heard of any of it.
    await replica.call("REPLICAOF", "NO", "ONE");
    const promoted = new Limiter({ sendCommand: sendVia(replica), timeoutMs: 5000 });
    const again = await promoted.acquire("gpu:control", { limit: 1, ttlMs: 60000 });
    assert.equal(again.acquired, true, "the promoted replica hands the slot out again");
    const holders = (await primary.zcard("gpu:control")) + (await replica.zcard("gpu:control"));
    assert.equal(holders, 2, "without waitReplicas: two holders of a LIMIT 1 lease");
    const one = await promoted.acquire("gpu:durable", { limit: 1, ttlMs: 60000 });
    assert.equal(one.acquired, true);
    const durableHolders = (await primary.zcard("gpu:durable")) + (await replica.zcard("gpu:durable"));
    assert.equal(durableHolders, 1, "with waitReplicas: one holder");
    ok(`${expect}: after the failover, LIMIT 1: ${holders} holders without waitReplicas, ${durableHolders} with it`);
  } finally {
    await app.close();
    link.close();
    primary.disconnect();
    replica.disconnect();
  }
}

runMain("durability", async () => {
  await durability(expectedBackend());
});
