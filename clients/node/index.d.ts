// Types of valkey-ratelimit (index.js), written by hand.

/** Sends one command through any client, e.g. `(...args) => client.call(...args)`. */
export type SendCommand = (...args: string[]) => unknown | Promise<unknown>;

export type Algorithm = "fixed" | "sliding" | "token" | "gcra" | "leaky";
export type BackendOption = "auto" | "module" | "functions";
export type FailurePolicy = "open" | "closed";

export const ALGORITHMS: readonly Algorithm[];

export interface LimiterOptions {
  sendCommand: SendCommand;
  /** Prepended to every limiter key. Default "" (ValkeyStore: "rl:"). */
  prefix?: string;
  /** Default "auto": the module if loaded, else the FUNCTION library. */
  backend?: BackendOption;
  /** When Valkey is unreachable or times out: "open" (default) admits, "closed" refuses. */
  failure?: FailurePolicy;
  /** Milliseconds to wait for a reply; 0 (default) waits as long as the client does. */
  timeoutMs?: number;
  /** Source of functions/ratelimit.lua: loaded with FUNCTION LOAD when neither backend is there. */
  library?: string;
  /** Called with the error whenever the failure policy answers instead of Valkey. */
  onError?: (error: unknown) => void;
}

export interface Policy {
  /** Requests per window; optional only with `meta`. */
  limit?: number;
  /** The window in ms; optional only with `meta`. */
  windowMs?: number;
  algorithm?: Algorithm;
  burst?: number;
  /** A META hash, whose `max`/`duration`/`algorithm`/`burst` fields apply where no option is given. */
  meta?: string;
}

export interface AdmitOptions extends Policy {
  /** Default 1; 0 is a peek. */
  cost?: number;
}

export interface Decision {
  readonly admitted: boolean;
  readonly limit: number;
  readonly remaining: number;
  /** Refused: ms until the same call would pass, -1 if never. Admitted: 0 (leaky: the delay). */
  readonly retryAfterMs: number;
  /** ms until the limiter is back to its full budget. */
  readonly resetAfterMs: number;
  /** Who answered; "unavailable" when the failure policy did. */
  readonly backend: "module" | "functions" | "unavailable";
  /** Set when the failure policy answered: why Valkey could not. */
  readonly error?: unknown;
}

export interface AcquireOptions {
  /** Most leases live at once; optional with `meta` (field `max`). No limit at all: unlimited. */
  limit?: number;
  /** The lease's time to live in ms; optional with `meta` (field `ttl`). */
  ttlMs?: number;
  /** A META hash whose `max` / `ttl` fields apply where no option is given. */
  meta?: string;
  /** The lease's id (a job id, say): re-acquiring a live id renews it. Default: the server makes one. */
  id?: string;
}

export interface WithLeaseOptions extends AcquireOptions {
  /** Extend the lease every ttlMs / 3 while fn runs (default true; needs ttlMs). */
  heartbeat?: boolean;
}

/** One RL.ACQUIRE answer. */
export interface Lease {
  readonly acquired: boolean;
  /** 0: unlimited (acquired, nothing stored). */
  readonly limit: number;
  /** Live leases after the call. */
  readonly inFlight: number;
  /** Refused: ms until the earliest live lease ends by itself. Acquired: 0. */
  readonly retryAfterMs: number;
  /** The id to release or extend; null when refused. */
  readonly leaseId: string | null;
  readonly backend: "module" | "functions";
}

/** What withLease hands its function. */
export interface HeldLease {
  readonly lease: Lease;
  readonly id: string;
  /** Aborts, with a LeaseLostError as its reason, once the heartbeat finds the lease gone. */
  readonly signal: AbortSignal;
  /** True once the lease is known to be lost. */
  readonly lost: boolean;
}

export class Limiter {
  constructor(options: LimiterOptions);
  /** The backend in use; detected on first use and cached per sendCommand. */
  backend(): Promise<"module" | "functions">;
  admit(key: string, options: AdmitOptions): Promise<Decision>;
  refund(key: string, options: AdmitOptions): Promise<Decision>;
  ttl(key: string, policy: Policy): Promise<number>;
  reset(key: string): Promise<boolean>;
  /** RL.ACQUIRE: one of `limit` slots for `ttlMs`. */
  acquire(key: string, options?: AcquireOptions): Promise<Lease>;
  /** RL.RELEASE: true if the lease was live. */
  release(key: string, id: string): Promise<boolean>;
  /** RL.EXTEND: true if the lease was live and now ends ttlMs from now; false: stop. */
  extend(key: string, id: string, ttlMs: number): Promise<boolean>;
  /** RL.INFLIGHT: the number of live leases. */
  inFlight(key: string): Promise<number>;
  /** Acquire (or throw LeaseRefusedError), heartbeat, run fn, release. */
  withLease<T>(key: string, options: WithLeaseOptions, fn: (held: HeldLease) => T | Promise<T>): Promise<T>;
}

export interface HeaderOptions {
  windowMs: number;
  /** The policy's name in the header fields. Default "default". */
  name?: string;
}

/** RateLimit-Policy, RateLimit and (on a refusal) Retry-After for a decision. */
export function headers(decision: Decision, options: HeaderOptions): Record<string, string>;

export interface ValkeyStoreOptions extends Omit<LimiterOptions, "prefix"> {
  /** Default "rl:". */
  prefix?: string;
  algorithm?: Algorithm;
  burst?: number;
}

export interface ClientRateLimitInfo {
  totalHits: number;
  resetTime: Date | undefined;
}

/** An express-rate-limit 8 Store. */
export class ValkeyStore {
  constructor(options: ValkeyStoreOptions);
  readonly prefix: string;
  readonly localKeys: false;
  readonly limiter: Limiter;
  init(options: { limit?: unknown; max?: unknown; windowMs: number }): void;
  increment(key: string): Promise<ClientRateLimitInfo>;
  decrement(key: string): Promise<void>;
  resetKey(key: string): Promise<void>;
  get(key: string): Promise<ClientRateLimitInfo | undefined>;
}

export class BackendMissingError extends Error {}
export class TimeoutError extends Error {}

/** withLease found every slot taken; fn did not run. */
export class LeaseRefusedError extends Error {
  readonly key: string;
  readonly lease: Lease;
  readonly retryAfterMs: number;
}

/** The lease stopped being live while its holder ran: its slot may be someone else's. */
export class LeaseLostError extends Error {
  readonly key: string;
  readonly leaseId: string;
}
