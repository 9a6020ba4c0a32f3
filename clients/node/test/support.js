// What the package's test programs share: clients on the server the Rust
// harness started (VALKEY_HOST / VALKEY_PORT), an Express app on a loopback
// port, a seeded random source, servers a program starts and stops itself
// (VALKEY_SERVER, RL_MODULE), and the `ok <check>` lines tests/it reads.
"use strict";

const assert = require("node:assert/strict");
const fs = require("node:fs");
const net = require("node:net");
const os = require("node:os");
const path = require("node:path");
const { spawn } = require("node:child_process");
const express = require("express");
const Valkey = require("iovalkey");

const HOST = process.env.VALKEY_HOST || "127.0.0.1";
const PORT = Number(process.env.VALKEY_PORT || "6379");
const LIBRARY = path.join(__dirname, "..", "..", "..", "functions", "ratelimit.lua");

const ok = (what) => console.log(`ok ${what}`);
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

/** An iovalkey client on `port` whose errors are left to the test. */
function client(options = {}, port = PORT) {
  const c = new Valkey({ host: HOST, port, maxRetriesPerRequest: 1, ...options });
  c.on("error", () => {});
  return c;
}

const sendVia = (c) => (...args) => c.call(...args);

/** An Express app on a loopback port: resolves to { base, close }. */
function listen(app) {
  return new Promise((resolve) => {
    const server = app.listen(0, "127.0.0.1", () => {
      resolve({
        base: `http://127.0.0.1:${server.address().port}`,
        close: () =>
          new Promise((r) => {
            server.closeAllConnections?.();
            server.close(r);
          }),
      });
    });
  });
}

/** An app with one limited route per limiter: route -> middleware. */
function serve(limiters) {
  const app = express();
  for (const [route, limiter] of Object.entries(limiters)) {
    app.get(route, limiter, (req, res) => res.json({ ok: true }));
  }
  return listen(app);
}

/** GET with headers; resolves to { status, headers, body, ms } once the body is read. */
async function get(url, headers = {}) {
  const started = performance.now();
  const res = await fetch(url, { headers });
  const body = await res.text();
  return { status: res.status, headers: res.headers, body, ms: performance.now() - started };
}

/**
 * How late this process's event loop has run since the last reset, in ms:
 * on a machine busy with other tests, a timer set for 250 ms may fire later
 * than that, and no code in the process can answer sooner.
 */
function loopLag() {
  const { monitorEventLoopDelay } = require("node:perf_hooks");
  const h = monitorEventLoopDelay({ resolution: 10 });
  h.enable();
  return {
    maxMs: () => h.max / 1e6,
    reset: () => h.reset(),
    stop: () => h.disable(),
  };
}

/** Server time in ms. */
async function timeMs(c) {
  const [s, us] = await c.call("TIME");
  return Number(s) * 1000 + Math.floor(Number(us) / 1000);
}

/** mulberry32: a small seeded generator, so a failing run can be replayed with its seed. */
function random(seed) {
  let a = seed >>> 0;
  const next = () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
  return {
    next,
    below: (n) => Math.floor(next() * n),
    pick: (items) => items[Math.floor(next() * items.length)],
    chance: (p) => next() < p,
  };
}

/** The seed of this run: $RL_SEED, else a fresh one (printed by the caller). */
function seedOf() {
  const s = process.env.RL_SEED;
  return s ? Number(s) >>> 0 : (Date.now() ^ (process.pid << 16)) >>> 0;
}

function freePort() {
  return new Promise((resolve, reject) => {
    const s = net.createServer();
    s.once("error", reject);
    s.listen(0, "127.0.0.1", () => {
      const { port } = s.address();
      s.close(() => resolve(port));
    });
  });
}

/**
 * A valkey-server this program starts itself ($VALKEY_SERVER), with the
 * module ($RL_MODULE) or without (`module: false`), persisting nothing: it
 * can be stopped and started again on its port, empty.
 */
class OwnServer {
  constructor({ module = true, args = [] } = {}) {
    this.binary = process.env.VALKEY_SERVER;
    this.module = module ? process.env.RL_MODULE : null;
    assert.ok(this.binary, "VALKEY_SERVER must name the valkey-server binary");
    if (module) assert.ok(this.module, "RL_MODULE must name the module");
    this.args = args;
    this.dir = fs.mkdtempSync(path.join(os.tmpdir(), "rl-node-"));
    this.child = null;
  }

  /** Starts it (again, on the same port once it has one); resolves once it answers as itself. */
  async start() {
    for (let attempt = 0; ; attempt++) {
      if (this.port === undefined || (attempt > 0 && !this.started)) this.port = await freePort();
      if (await this.launch()) break;
      assert.ok(attempt < 5 && !this.started, `valkey-server could not start on port ${this.port}`);
    }
    this.started = true;
    return this;
  }

  // One try: false if another process held the port (ours then exits).
  async launch() {
    const args = ["--port", String(this.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"];
    args.push("--dir", this.dir, ...this.args);
    if (this.module) args.push("--loadmodule", this.module);
    else args.push("--enable-module-command", "no");
    const child = spawn(this.binary, args, { stdio: "ignore" });
    this.child = child;
    const exited = new Promise((resolve) => child.once("exit", () => resolve(false)));
    const c = client({ retryStrategy: () => 20, maxRetriesPerRequest: null, enableOfflineQueue: true }, this.port);
    try {
      const deadline = Date.now() + 10000;
      for (;;) {
        if (child.exitCode !== null || child.signalCode !== null) return false;
        try {
          const info = await Promise.race([c.info("server"), sleep(500).then(() => ""), exited]);
          // Someone answers: ours only if its pid is our child's.
          const pid = /process_id:(\d+)/.exec(info || "");
          if (pid) return Number(pid[1]) === child.pid ? true : (child.kill("SIGKILL"), false);
        } catch {
          // not up yet
        }
        assert.ok(Date.now() < deadline, `valkey-server on ${this.port} did not start`);
        await sleep(20);
      }
    } finally {
      c.disconnect();
    }
  }

  /** SIGKILL and wait for the exit: nothing persisted, the port free again. */
  async stop() {
    if (!this.child || this.child.exitCode !== null || this.child.signalCode !== null) return;
    const exited = new Promise((resolve) => this.child.once("exit", resolve));
    this.child.kill("SIGKILL");
    await exited;
  }

  async dispose() {
    await this.stop();
    fs.rmSync(this.dir, { recursive: true, force: true });
  }
}

/**
 * Runs `main`, prints `PASS node <name>`, exits non-zero on a failure, and
 * also when the program would end with `main` still waiting on something
 * that can no longer happen.
 */
function runMain(name, main) {
  process.once("beforeExit", () => {
    console.error(`FAIL node ${name}: the program ran out of work before main() finished`);
    process.exit(1);
  });
  main()
    .then(() => {
      console.log(`PASS node ${name}`);
      process.exit(0);
    })
    .catch((e) => {
      console.error(e);
      process.exit(1);
    });
}

/** RL_EXPECT_BACKEND, checked. */
function expectedBackend() {
  const expect = process.env.RL_EXPECT_BACKEND;
  assert.ok(["module", "functions"].includes(expect), "RL_EXPECT_BACKEND must be module or functions");
  return expect;
}

module.exports = {
  HOST,
  PORT,
  LIBRARY,
  ok,
  sleep,
  client,
  sendVia,
  listen,
  serve,
  get,
  timeMs,
  loopLag,
  random,
  seedOf,
  freePort,
  OwnServer,
  runMain,
  expectedBackend,
};
