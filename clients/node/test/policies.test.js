// Issue 27's policy options through the package, against the real server
// the Rust harness started (module or library): shadow mode through
// express-rate-limit over real HTTP (every request passes, onShadowRefusal
// told of each would-be refusal, the state that of the enforced calls), the
// penalty box holding after the window turned, aligned windows and calendar
// periods ending at their boundary (PEXPIRETIME), and bad values refused by
// the core before any call.
//
//   VALKEY_PORT=<port> RL_EXPECT_BACKEND=module|functions node test/policies.test.js
"use strict";

const assert = require("node:assert/strict");
const { rateLimit } = require("express-rate-limit");
const { ValkeyStore, Limiter, ConfigError } = require("..");
const { ok, client, sendVia, serve, get, sleep, timeMs, runMain, expectedBackend } = require("./support");

const DAY = 86400000;

// The end of the calendar period that holds `t` (ms), `offset` ms east of UTC.
function boundary(period, t, offset = 0) {
  const day = Math.floor((t + offset) / DAY);
  if (period === "day") return (day + 1) * DAY - offset;
  if (period === "week") return (day - ((day + 3) % 7) + 7) * DAY - offset;
  const d = new Date(day * DAY);
  const end = period === "month" ? Date.UTC(d.getUTCFullYear(), d.getUTCMonth() + 1, 1) : Date.UTC(d.getUTCFullYear() + 1, 0, 1);
  return end - offset;
}

async function policies(expect) {
  const c = client();
  const send = sendVia(c);
  await c.flushall();
  const limiter = new Limiter({ sendCommand: send, timeoutMs: 5000, prefix: "pol:" });

  // SHADOW, LIMIT 3: ten requests over HTTP, all passed; seven would-be refusals told.
  const told = [];
  const trial = rateLimit({
    windowMs: 60000,
    limit: 3,
    standardHeaders: "draft-8",
    legacyHeaders: false,
    keyGenerator: () => "trial",
    store: new ValkeyStore({
      sendCommand: send,
      timeoutMs: 5000,
      prefix: "pol:",
      shadow: true,
      onShadowRefusal: (key, decision) => told.push({ key, decision }),
    }),
  });
  // PENALTY: limit 1 in 400 ms, refused for 2 s from a refusal.
  const login = rateLimit({
    windowMs: 400,
    limit: 1,
    keyGenerator: () => "login",
    store: new ValkeyStore({ sendCommand: send, timeoutMs: 5000, prefix: "pol:", penalty: 2000 }),
  });
  // ALIGN on express-rate-limit's own way of counting (the store counts every hit).
  const hourly = rateLimit({
    windowMs: 3600000,
    limit: 100,
    keyGenerator: () => "hourly",
    store: new ValkeyStore({ sendCommand: send, timeoutMs: 5000, prefix: "pol:", align: true }),
  });
  const app = await serve({ "/trial": trial, "/login": login, "/hourly": hourly });
  try {
    const statuses = [];
    for (let i = 0; i < 10; i++) statuses.push((await get(`${app.base}/trial`)).status);
    assert.deepEqual(statuses, Array(10).fill(200));
    assert.equal(told.length, 7, `onShadowRefusal told ${told.length} times`);
    for (const { key, decision } of told) {
      assert.equal(key, "trial");
      assert.equal(decision.shadow, true);
      assert.equal(decision.admitted, true);
      assert.equal(decision.backend, expect);
      assert.ok(decision.retryAfterMs > 0, `retryAfterMs ${decision.retryAfterMs}`);
    }
    assert.equal(await c.get("pol:trial"), "3", "the state of three enforced calls");
    ok(`${expect}: SHADOW limit 3 over HTTP: 10 x 200, onShadowRefusal told 7 times, the counter at 3`);

    // The Limiter alike: admitted ten times, shadow from the fourth.
    const shadows = [];
    for (let i = 0; i < 10; i++) {
      const d = await limiter.admit("plain-trial", { limit: 3, windowMs: 60000, shadow: true });
      assert.equal(d.admitted, true);
      shadows.push(d.shadow && d.retryAfterMs > 0);
    }
    assert.deepEqual(shadows, [false, false, false, ...Array(7).fill(true)]);
    assert.equal(await c.get("pol:plain-trial"), "3");
    const enforced = await limiter.admit("plain-trial", { limit: 3, windowMs: 60000 });
    assert.equal(enforced.admitted, false, "without shadow, the same state refuses");
    assert.equal(enforced.shadow, false);
    ok(`${expect}: Limiter SHADOW: admitted 10 times, shadow (retryAfterMs > 0) from the 4th, the state of 3 calls`);

    // PENALTY over HTTP: refused after the window turned, until the penalty ends.
    const before = [];
    for (let i = 0; i < 2; i++) before.push((await get(`${app.base}/login`)).status);
    assert.deepEqual(before, [200, 429]);
    await sleep(600);
    const held = await get(`${app.base}/login`);
    assert.equal(held.status, 429, "the window turned, the penalty holds");
    const left = await limiter.ttl("login", { limit: 1, windowMs: 400 });
    assert.ok(left > 0 && left <= 1400, `RL.TTL reports the penalty: ${left} ms left`);
    await sleep(left + 100);
    assert.equal((await get(`${app.base}/login`)).status, 200, "admitted at its end");
    ok(`${expect}: PENALTY over HTTP: 429 after the window turned, RL.TTL ${left} ms, 200 at its end`);

    // PENALTY through the Limiter: the wait is what is left of the penalty.
    const p = { limit: 1, windowMs: 300, penalty: 1500 };
    assert.equal((await limiter.admit("plain-login", p)).admitted, true);
    const refused = await limiter.admit("plain-login", p);
    assert.equal(refused.admitted, false);
    assert.ok(refused.retryAfterMs > 1000 && refused.retryAfterMs <= 1500, `retryAfterMs ${refused.retryAfterMs}`);
    await sleep(500);
    const still = await limiter.admit("plain-login", p);
    assert.equal(still.admitted, false, "refused after the window turned");
    assert.ok(still.retryAfterMs > 0 && still.retryAfterMs < refused.retryAfterMs, "not extended by a refusal in it");
    await sleep(still.retryAfterMs + 100);
    assert.equal((await limiter.admit("plain-login", p)).admitted, true, "admitted at its end");
    ok(`${expect}: Limiter PENALTY: refused through the penalty after the window turned, admitted at its end`);

    // ALIGN: the key ends at the top of the hour, through the store and the Limiter.
    assert.equal((await get(`${app.base}/hourly`)).status, 200);
    await limiter.admit("aligned", { limit: 100, windowMs: 3600000, align: true });
    await limiter.admit("aligned-sliding", { algorithm: "sliding", limit: 100, windowMs: 3600000, align: true });
    const now = await timeMs(c);
    for (const key of ["pol:hourly", "pol:aligned"]) {
      const at = Number(await c.pexpiretime(key));
      assert.ok(at % 3600000 === 0 && at > now && at <= now + 3600000, `${key}: PEXPIRETIME ${at}`);
    }
    ok(`${expect}: ALIGN WINDOW 3600000: PEXPIRETIME a multiple of 3600000 (store and Limiter)`);
  } finally {
    await app.close();
  }

  // CALENDAR (and TZ): the key expires at the period's end.
  const cases = [
    ["day", "+05:30", 330 * 60000],
    ["week", "-08:00", -480 * 60000],
    ["month", undefined, 0],
    ["year", undefined, 0],
  ];
  const seen = [];
  for (const [period, tz, offset] of cases) {
    const key = `cal-${period}`;
    const t1 = await timeMs(c);
    const d = await limiter.admit(key, { limit: 10, calendar: period, ...(tz ? { tz } : {}) });
    const t2 = await timeMs(c);
    assert.equal(d.admitted, true);
    const at = Number(await c.pexpiretime(`pol:${key}`));
    assert.ok([boundary(period, t1, offset), boundary(period, t2, offset)].includes(at), `${period} ${tz}: PEXPIRETIME ${at}`);
    assert.ok(Math.abs(d.resetAfterMs - (at - t2)) <= t2 - t1 + 5, `${period}: resetAfterMs ${d.resetAfterMs} counts to ${at}`);
    seen.push(`${period}${tz ? ` TZ ${tz}` : ""} -> ${new Date(at).toISOString()}`);
  }
  ok(`${expect}: CALENDAR: PEXPIRETIME at the next boundary: ${seen.join(", ")}`);

  // RESP3 (node-redis): the module's map has a shadow field that tells a
  // leaky delay from a shadow refusal. The library answers an array over
  // RESP3 too, so there a leaky decision is never marked (the documented rule).
  const { createClient } = require("redis");
  const r3 = createClient({ socket: { host: "127.0.0.1", port: Number(process.env.VALKEY_PORT) }, RESP: 3 });
  r3.on("error", () => {});
  await r3.connect();
  try {
    const over3 = new Limiter({ sendCommand: (...w) => r3.sendCommand(w), timeoutMs: 5000, prefix: "pol:" });
    const leaky = { algorithm: "leaky", limit: 1, windowMs: 60000, shadow: true };
    const got = [];
    for (let i = 0; i < 3; i++) got.push(await over3.admit("resp3", leaky));
    assert.ok(got.every((d) => d.admitted && d.backend === expect));
    assert.ok(got[1].retryAfterMs > 0 && !got[1].shadow, "queued: a delay, not a shadow refusal");
    assert.ok(got[2].retryAfterMs > 0, "over the queue: the would-be wait");
    assert.equal(got[2].shadow, expect === "module", "a shadow refusal, told by the module's map only");
    const fixed = [];
    for (let i = 0; i < 2; i++) fixed.push(await over3.admit("resp3-fixed", { limit: 1, windowMs: 60000, shadow: true }));
    assert.deepEqual(fixed.map((d) => d.shadow), [false, true], "fixed: told on both backends");
  } finally {
    await r3.quit();
  }
  ok(`${expect}: RESP3 (node-redis): a fixed shadow refusal is told; leaky, by the module's map only`);

  // Bad values: refused by the core, nothing sent.
  const sent = [];
  const spy = new Limiter({ sendCommand: (...w) => (sent.push(w), send(...w)), timeoutMs: 5000, prefix: "pol:" });
  const bad = [
    [{ limit: 1, windowMs: 1000, penalty: -1 }, /^penalty must be a safe integer >= 1 \(got -1\)$/],
    [{ limit: 1, windowMs: 1000, shadow: "on" }, /^shadow must be true or false/],
    [{ limit: 1, calendar: "fortnight" }, /^calendar must be one of day, week, month, year/],
    [{ limit: 1, calendar: "day", tz: "Europe//Berlin" }, /^tz must be a fixed offset from UTC/],
    [{ limit: 1, windowMs: 1000, tz: "+01:00" }, /^tz must be left out without calendar/],
    [{ limit: 1, windowMs: 1000, calendar: "day" }, /^windowMs must be left out with calendar/],
    [{ limit: 1, windowMs: 1000, algorithm: "gcra", align: true }, /^align must be left out with algorithm "gcra"/],
  ];
  for (const [options, message] of bad) {
    await assert.rejects(spy.admit("bad", options), (e) => e instanceof ConfigError && message.test(e.message), String(message));
  }
  assert.deepEqual(sent, [], "nothing reached the server");
  assert.equal(await c.exists("pol:bad"), 0);
  ok(`${expect}: bad values (penalty -1, shadow "on", calendar "fortnight", tz "Europe/Berlin", tz without calendar, windowMs with calendar, align with gcra) refused by the core, nothing sent`);

  c.disconnect();
}

runMain("policies", () => policies(expectedBackend()));
