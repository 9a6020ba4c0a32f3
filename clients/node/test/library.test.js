// Which backend the package uses, and the library it ships: the module if
// it is loaded; else the library if it is loaded, brought up to the
// package's version when older (or without rl_version), never replaced when
// newer; else the package's copy, loaded with FUNCTION LOAD when the user
// may; else an error naming the admin command.
//
//   VALKEY_PORT=<server with the module> RL_EXPECT_BACKEND=module node test/library.test.js module
//   VALKEY_PORT=<server without it> RL_EXPECT_BACKEND=functions node test/library.test.js functions
"use strict";

const assert = require("node:assert/strict");
const { Limiter, BackendMissingError, bundledLibrary } = require("..");
const { ok, client, sendVia, PORT, runMain, expectedBackend } = require("./support");

const bundled = bundledLibrary();

// The bundled library, stating another version.
const withVersion = (v) => bundled.source.replace(/^local VERSION = '[^']*'/m, `local VERSION = '${v}'`);
// The bundled library as it was before rl_version.
const withoutVersion = () => bundled.source.replace(/^server\.register_function\{function_name = 'rl_version'.*$/m, "");

const policy = { limit: 2, windowMs: 10000 };

async function loaded(c) {
  try {
    return String(await c.call("FCALL_RO", "rl_version", "0"));
  } catch (e) {
    if (/function not found/i.test(e.message)) {
      const libs = await c.call("FUNCTION", "LIST", "LIBRARYNAME", "ratelimit");
      return libs.length === 0 ? "none" : "no rl_version";
    }
    throw e;
  }
}

// A new limiter on its own connection, so nothing it finds is cached.
function fresh(options = {}) {
  const c = client(options.client);
  const limiter = new Limiter({ sendCommand: sendVia(c), timeoutMs: 5000, ...options.limiter });
  return { c, limiter };
}

// The minimal ACL user (docs/managed-valkey.md's rule for the library; the
// module's commands are its @ratelimit category): the package finds its
// backend with no key but the caller's. iovalkey's ready check runs INFO,
// which the rule denies: without `enableReadyCheck: false` (or +info in the
// rule) iovalkey warns on every connect.
const MINIMAL = {
  functions: "-@all +fcall +fcall_ro +time +get +set +del +pexpireat +pexpiretime +hmget +type +zrange +zcard +zscore +zadd +zrem",
  module: "-@all +@ratelimit",
};

async function minimalUser(backend) {
  const admin = client();
  await admin.call("ACL", "SETUSER", "app", "reset", "on", ">app-password", "resetkeys", "~app:*", "resetchannels", ...MINIMAL[backend].split(" "));
  const warnings = [];
  const warn = console.warn;
  console.warn = (...args) => warnings.push(args.join(" "));
  try {
    for (const [readyCheck, extra] of [[false, []], [true, ["+info"]], [true, []]]) {
      await admin.call("ACL", "SETUSER", "app", ...(extra.length ? extra : ["-info"]));
      warnings.length = 0;
      const c = client({ username: "app", password: "app-password", enableReadyCheck: readyCheck });
      await c.call("PING").catch(() => {});
      const limiter = new Limiter({ sendCommand: sendVia(c), prefix: "app:", timeoutMs: 5000 });
      const d = await limiter.admit(`acl:${readyCheck}:${extra}`, policy);
      assert.equal(d.admitted, true);
      assert.equal(d.backend, backend);
      const lease = await limiter.acquire(`acl-lease:${readyCheck}:${extra}`, { limit: 1, ttlMs: 1000 });
      assert.equal(lease.acquired, true);
      await assert.rejects(new Limiter({ sendCommand: sendVia(c), timeoutMs: 5000 }).admit("other", policy), /NOPERM/);
      const skipped = warnings.filter((w) => /Skipping the ready check/.test(w)).length;
      if (readyCheck && extra.length === 0) assert.ok(skipped > 0, "iovalkey warns when INFO is denied");
      else assert.equal(skipped, 0, `no warning (enableReadyCheck ${readyCheck}, ${extra.join(" ") || "no +info"})`);
      c.disconnect();
    }
  } finally {
    console.warn = warn;
    await admin.call("ACL", "DELUSER", "app");
    admin.disconnect();
  }
  ok(
    `${backend}: the minimal ACL user (${MINIMAL[backend]}, ~app:*) admits and leases; ` +
      "iovalkey quiet with enableReadyCheck: false or +info, warns without",
  );
}

async function moduleFirst() {
  const c = client();
  await c.call("FUNCTION", "LOAD", "REPLACE", withVersion("0.0.1"));
  const { c: c1, limiter } = fresh();
  assert.equal(await limiter.backend(), "module");
  assert.equal((await limiter.admit("k", policy)).backend, "module");
  assert.equal(await loaded(c), "0.0.1", "a loaded library is left alone when the module answers");
  ok("module: the module wins over a loaded library, which is left as it was");
  c.disconnect();
  c1.disconnect();
}

async function functions() {
  const c = client();
  assert.ok(bundled && bundled.version, "the package has its library");
  const cases = [
    ["none", null, bundled.version],
    ["0.0.1", withVersion("0.0.1"), bundled.version],
    ["no rl_version", withoutVersion(), bundled.version],
    ["9.9.9", withVersion("9.9.9"), "9.9.9"],
    [bundled.version, bundled.source, bundled.version],
  ];
  for (const [before, source, after] of cases) {
    await c.call("FUNCTION", "FLUSH");
    if (source !== null) await c.call("FUNCTION", "LOAD", source);
    assert.equal(await loaded(c), before);
    const { c: c1, limiter } = fresh();
    const d = await limiter.admit(`k:${before}`, policy);
    assert.equal(d.backend, "functions");
    assert.equal(d.admitted, true);
    assert.equal(await loaded(c), after, `with ${before} loaded`);
    c1.disconnect();
  }
  ok(
    `functions: none -> loads ${bundled.version}; 0.0.1 and one without rl_version -> replaced by ${bundled.version}; ` +
      `9.9.9 -> kept (never over a newer one); ${bundled.version} -> kept`,
  );

  // Many first calls at once on a bare server: one library, every call answered.
  await c.call("FUNCTION", "FLUSH");
  const crowd = Array.from({ length: 10 }, () => fresh());
  const decisions = await Promise.all(crowd.map(({ limiter }, i) => limiter.admit(`crowd:${i}`, policy)));
  assert.ok(decisions.every((d) => d.admitted && d.backend === "functions"));
  assert.equal(await loaded(c), bundled.version);
  for (const { c: ci } of crowd) ci.disconnect();
  ok("functions: 10 first calls at once on a bare server load it once, all answered");

  // Loading it is the user's to allow.
  await c.call("FUNCTION", "FLUSH");
  const off = fresh({ limiter: { library: false } });
  await assert.rejects(off.limiter.admit("k", policy), (e) => e instanceof BackendMissingError && /library: false/.test(e.message));
  assert.equal(await loaded(c), "none");
  off.c.disconnect();
  // A user who may call the functions but not load them (the minimal ACL of docs/managed-valkey.md, plus FUNCTION LOAD denied).
  await c.call("ACL", "SETUSER", "app", "reset", "on", ">secret", "~*", "+@all", "-function");
  const limited = fresh({ client: { username: "app", password: "secret" } });
  await assert.rejects(limited.limiter.admit("k", policy), (e) => {
    assert.ok(e instanceof BackendMissingError, String(e));
    assert.ok(e.message.includes("valkey-cli -x FUNCTION LOAD REPLACE < ratelimit.lua"), e.message);
    assert.ok(e.message.includes(bundled.path), e.message);
    assert.ok(/may not FUNCTION LOAD/.test(e.message), e.message);
    return true;
  });
  assert.equal(await loaded(c), "none");
  limited.c.disconnect();
  ok("functions: not allowed to load it: BackendMissingError names `valkey-cli -x FUNCTION LOAD REPLACE < ratelimit.lua`");
  // Allowed to call but not to load, an older library stays in use.
  await c.call("FUNCTION", "LOAD", withVersion("0.0.1"));
  const old = fresh({ client: { username: "app", password: "secret" } });
  assert.equal((await old.limiter.admit("k", policy)).admitted, true);
  assert.equal(await loaded(c), "0.0.1");
  old.c.disconnect();
  ok("functions: not allowed to load it, an older library stays in use");
  await c.call("ACL", "DELUSER", "app");
  await c.call("FUNCTION", "LOAD", "REPLACE", bundled.source);
  c.disconnect();
}

runMain(`library ${process.argv[2]}`, async () => {
  const expect = expectedBackend();
  const phase = process.argv[2];
  assert.equal(phase, expect, `phase ${phase} on a ${expect} server (port ${PORT})`);
  if (phase === "module") await moduleFirst();
  else await functions();
  await minimalUser(phase);
});
