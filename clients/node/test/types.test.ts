// Compile-time checks of index.d.ts (tsc --noEmit, strict): ValkeyStore is
// an express-rate-limit Store, and the plain API's types say what index.js
// returns. Run by tests/frameworks.rs; nothing here executes.
import type { Store } from "express-rate-limit";
import { rateLimit } from "express-rate-limit";
import type { Request } from "express";
import {
  ALGORITHMS,
  BackendMissingError,
  ConfigError,
  LinkEvent,
  UnavailableError,
  bundledLibrary,
  Decision,
  HeldLease,
  Lease,
  LeaseLostError,
  LeaseRefusedError,
  Limiter,
  TimeoutError,
  ValkeyStore,
  headers,
} from "..";

declare const client: { call(...args: string[]): Promise<unknown> };

const store: Store = new ValkeyStore({
  sendCommand: (...args: string[]) => client.call(...args),
  prefix: "rl:",
  algorithm: "sliding",
  backend: "auto",
  failure: "closed",
  failureStatus: 503,
  timeoutMs: 250,
  waitReplicas: 1,
  waitTimeoutMs: 100,
  unconfirmed: "refuse",
  onError: (event: LinkEvent) => (event.state === "down" ? String(event.error) : event.downForMs),
});
rateLimit({ windowMs: 10_000, limit: 3, standardHeaders: "draft-8", store });
const perRequest: Store = new ValkeyStore({
  sendCommand: (...args: string[]) => client.call(...args),
  meta: (req: Request) => `plans:${req.get("x-plan") ?? "free"}`,
  library: false,
});
rateLimit({ windowMs: 60_000, limit: (req: Request) => (req.get("x-plan") === "pro" ? 100 : 10), store: perRequest });
const trial: Store = new ValkeyStore({
  sendCommand: (...args: string[]) => client.call(...args),
  shadow: true,
  penalty: 30_000,
  onShadowRefusal: (key: string, d: Decision) => console.log(key, d.shadow, d.retryAfterMs),
});
rateLimit({ windowMs: 60_000, limit: 100, store: trial });
const daily: Store = new ValkeyStore({ sendCommand: (...args: string[]) => client.call(...args), calendar: "day", tz: "-08:00" });
rateLimit({ windowMs: 86_400_000, limit: 1000, store: daily });

async function plain(): Promise<string> {
  const limiter = new Limiter({ sendCommand: (...args) => client.call(...args), library: "#!lua name=ratelimit" });
  const backend: "module" | "functions" = await limiter.backend();
  const d: Decision = await limiter.admit("k", { limit: 10, windowMs: 1000, cost: 2, algorithm: "token", burst: 5 });
  const admitted: boolean = d.admitted;
  const fields: Record<string, string> = headers(d, { windowMs: 1000, name: "api" });
  const plain: Record<string, string> = headers(d);
  const defaults = new Limiter({ sendCommand: (...args) => client.call(...args), limit: 5, windowMs: 1000, name: "api" });
  const viaDefaults: Decision = await defaults.admit("k");
  const shadowed: boolean = (await limiter.admit("k", { limit: 3, windowMs: 1000, shadow: true, align: true })).shadow;
  await limiter.admit("k", { limit: 3, calendar: "month", tz: "+05:30", penalty: 1000 });
  const waited: Decision = await limiter.wait("k", { algorithm: "gcra", limit: 10, windowMs: 1000, waitMs: 2000, signal: AbortSignal.timeout(500) });
  const slot: number | undefined = waited.atMs;
  const slept: number | undefined = waited.delayMs;
  await limiter.wait("k", { algorithm: "gcra", limit: 10, windowMs: 1000, waitMs: 2000, block: true });
  void shadowed;
  const unconfirmed: number | undefined = viaDefaults.unconfirmed;
  const lib = bundledLibrary();
  const version: string | null = lib === null ? null : lib.version;
  const c: TypeError = new ConfigError("limit", "a safe integer >= 0", "3");
  const u: number = new UnavailableError("down", { status: 503 }).status;
  const ttl: number = await limiter.ttl("k", { limit: 10, windowMs: 1000 });
  const existed: boolean = await limiter.reset("k");
  const refunded: Decision = await limiter.refund("k", { limit: 10, windowMs: 1000 });
  const e: Error = new BackendMissingError();
  const t: Error = new TimeoutError();
  return [backend, admitted, fields, plain, ttl, existed, refunded, e, t, ALGORITHMS.join(), unconfirmed, version, c, u].join();
}
void plain;

async function leases(): Promise<number> {
  const limiter = new Limiter({ sendCommand: (...args) => client.call(...args) });
  const lease: Lease = await limiter.acquire("gpu", { limit: 4, ttlMs: 30_000, id: "job-1" });
  const trial: Lease = await limiter.acquire("gpu", { limit: 4, ttlMs: 30_000, shadow: true });
  const wouldRefuse: boolean = trial.shadow;
  const id: string | null = lease.leaseId;
  const released: boolean = id !== null && (await limiter.release("gpu", id));
  const extended: boolean = await limiter.extend("gpu", "job-1", 30_000);
  const n: number = await limiter.inFlight("gpu");
  const doubled: number = await limiter.withLease("gpu", { limit: 4, ttlMs: 30_000 }, async (held: HeldLease) => {
    const signal: AbortSignal = held.signal;
    return held.lost || signal.aborted ? 0 : held.lease.inFlight * 2;
  });
  try {
    await limiter.withLease("gpu", { meta: "gpu:meta", heartbeat: false }, () => "sync result");
  } catch (e) {
    if (e instanceof LeaseRefusedError) return e.retryAfterMs;
    if (e instanceof LeaseLostError) return e.leaseId.length;
  }
  return n + doubled + Number(released) + Number(extended);
}
void leases;

// @ts-expect-error: an unknown algorithm is a type error.
new ValkeyStore({ sendCommand: () => null, algorithm: "cell" });
// @ts-expect-error: calendar takes day, week, month or year.
new ValkeyStore({ sendCommand: () => null, calendar: "fortnight" });
