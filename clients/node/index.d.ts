// Types of valkey-ratelimit (index.js and lib/), written by hand and checked
// by `tsc --strict` against test/types.test.ts and express-rate-limit's Store.

/** Sends one command through any client, e.g. `(...args) => client.call(...args)`. */
export type SendCommand = (...args: string[]) => unknown | Promise<unknown>;

export type Algorithm = "fixed" | "sliding" | "token" | "gcra" | "leaky";
export type BackendOption = "auto" | "module" | "functions";
export type FailurePolicy = "open" | "closed";
/** CALENDAR's periods: the day, the ISO week (from Monday), the month, the year. */
export type CalendarPeriod = "day" | "week" | "month" | "year";

export const ALGORITHMS: readonly Algorithm[];

/** What onError is told: once when Valkey becomes unreachable, once when it answers again. */
export type LinkEvent =
  | { readonly state: "down"; readonly error: unknown; readonly failure: FailurePolicy }
  | { readonly state: "up"; readonly downForMs: number };

export interface Policy {
  /** Requests per window (the rate, for the buckets); optional with `meta`. 0: unlimited. */
  limit?: number;
  /** The window in ms; optional with `meta`. */
  windowMs?: number;
  algorithm?: Algorithm;
  /** Bucket size (token, gcra) or queue size (leaky). */
  burst?: number;
  /** A META hash, whose `max`/`duration`/`algorithm`/`burst` fields apply where no option is given. */
  meta?: string;
  /** The policy's name in the header fields. Default "<limit>-in-<window s>sec". */
  name?: string;
  /** SHADOW: decide and keep state as enforced, but never refuse (a would-be refusal is `shadow: true`). */
  shadow?: boolean;
  /** PENALTY ms: a refusal refuses every call for this long from it, even after the window turns. */
  penalty?: number;
  /** ALIGN: windows start at multiples of windowMs since the epoch, UTC (fixed and sliding). */
  align?: boolean;
  /** CALENDAR: the window is this calendar period (fixed or sliding; no windowMs, no align). */
  calendar?: CalendarPeriod;
  /** TZ, with calendar: where its boundaries fall, a fixed offset such as "+05:30" or "-08:00", or an IANA zone name such as "Europe/Berlin". */
  tz?: string;
  /** ESCALATE ms, with penalty: a penalty starting within this long of the last one's end is twice as long, at most this. */
  escalate?: number;
}

export interface AdmitOptions extends Policy {
  /** Default 1; 0 is a peek. */
  cost?: number;
  /** This call's failure policy; "throw" rejects with the client's error instead. */
  failure?: FailurePolicy | "throw";
}

export interface LimiterOptions extends Policy {
  sendCommand: SendCommand;
  /** Prepended to every limiter key. Default "" (ValkeyStore: "rl:"). */
  prefix?: string;
  /** Default "auto": the module if loaded, else the FUNCTION library (loaded or upgraded from this package's copy). */
  backend?: BackendOption;
  /** When Valkey is unreachable or times out: "open" (default) admits, "closed" refuses. */
  failure?: FailurePolicy;
  /** Every call's deadline in ms, whatever the client queues. Default 250. */
  timeoutMs?: number;
  /** The library to load where it is missing or older: its source; false never loads. Default: this package's ratelimit.lua. */
  library?: string | false;
  /** Told of each down and up transition, once. Default: one console.warn line each. */
  onError?: (event: LinkEvent) => void;
  /** After a grant (admit, acquire): WAIT until this many replicas have it. */
  waitReplicas?: number;
  /** WAIT's timeout in ms. Default 100. */
  waitTimeoutMs?: number;
  /** A grant WAIT did not confirm: "refuse" (default: given back and refused) or "keep". */
  unconfirmed?: "keep" | "refuse";
  /** Default cost of admit. */
  cost?: number;
}

export interface Decision {
  readonly admitted: boolean;
  /** The limit the server applied: LIMIT, or BURST for the buckets; 0 when unlimited. */
  readonly limit: number;
  /** Requests of cost 1 that would still pass now. */
  readonly remaining: number;
  /** Refused: ms until the same call would pass, -1 if never. Admitted: 0 (leaky: the delay). */
  readonly retryAfterMs: number;
  /** ms until the limiter is back to its full budget. */
  readonly resetAfterMs: number;
  /**
   * A shadow refusal: admitted (shadow mode never refuses), though the limit
   * would have refused it; retryAfterMs is the would-be wait.
   */
  readonly shadow: boolean;
  /** Who answered; "unavailable" when the failure policy did; null when no call was made (a store's limit of 0 in shadow mode). */
  readonly backend: "module" | "functions" | "unavailable" | null;
  /** The window and name of the policy, when known: headers() uses them. */
  readonly windowMs?: number;
  readonly name?: string;
  /** Set when the failure policy answered: why Valkey could not. */
  readonly error?: unknown;
  /** With waitReplicas: the replicas that confirmed, when fewer than asked. */
  readonly unconfirmed?: number;
  /**
   * A wait that booked its turn (RESERVE): ms the caller slept before going
   * ahead (0: admitted at once), and the slot's time by the server's clock
   * (ms since the epoch); both -1 when it could not be booked within waitMs.
   */
  readonly delayMs?: number;
  readonly atMs?: number;
}

export interface WaitOptions extends AdmitOptions {
  /** Wait up to this many ms (at least 1) to be admitted. */
  waitMs: number;
  /**
   * Fired while the caller sleeps on its booked slot: the slot is given back
   * (RL.REFUND ... AT atMs, once) and the call rejects with the signal's reason.
   */
  signal?: AbortSignal;
  /**
   * RL.ADMIT ... BLOCK where the module is loaded (it holds the connection
   * until admitted: give this limiter a connection of its own). Default
   * false: RESERVE, then a local sleep, on both backends.
   */
  block?: boolean;
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
  /**
   * Shadow mode (SHADOW): never refused; a would-be refusal answers
   * acquired with `shadow` true and its wait, and takes no lease.
   */
  shadow?: boolean;
  /**
   * Wait up to this many ms for a slot: RL.ACQUIRE ... BLOCK on the module
   * (first come, first served; it holds the connection while it waits),
   * sleeping retryAfterMs with jitter on the library (a later caller may
   * take a freed slot first).
   */
  waitMs?: number;
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
  /**
   * A shadow refusal: acquired (with retryAfterMs > 0 and the id it would
   * have had), but the ceiling would have refused it; no lease was taken,
   * and releasing it is a harmless no-op (false).
   */
  readonly shadow: boolean;
  readonly backend: "module" | "functions";
  /** With waitReplicas: the replicas that confirmed, when fewer than asked. */
  readonly unconfirmed?: number;
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
  readonly prefix: string;
  /** The backend in use; detected on first use and cached per sendCommand. */
  backend(): Promise<"module" | "functions">;
  admit(key: string, options?: AdmitOptions & Partial<WaitOptions>): Promise<Decision>;
  /**
   * `admit` that waits up to `waitMs` to be admitted, first come first
   * served on both backends with no connection held: one RL.ADMIT ...
   * RESERVE books the turn (gcra, token, leaky), the caller sleeps until it;
   * refused at once when it cannot be booked within waitMs. A window
   * (fixed, sliding) sleeps retryAfterMs and tries again.
   */
  wait(key: string, options: WaitOptions): Promise<Decision>;
  refund(key: string, options?: AdmitOptions): Promise<Decision>;
  ttl(key: string, policy?: Policy): Promise<number>;
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
  /** Default: the decision's window. */
  windowMs?: number;
  /** Default: the decision's name, else "<limit>-in-<window s>sec". */
  name?: string;
}

/** RateLimit-Policy, RateLimit and (on a refusal) Retry-After for a decision. */
export function headers(decision: Decision, options?: HeaderOptions): Record<string, string>;

/** The library this package ships (ratelimit.lua), or null. */
export function bundledLibrary(): { readonly path: string; readonly source: string; readonly version: string | null } | null;

/** A request as the store's functions of the request get it (Express's). */
export type RequestOf = any;

export interface ValkeyStoreOptions {
  sendCommand: SendCommand;
  /** Default "rl:". */
  prefix?: string;
  /** Default fixed, counted as express-rate-limit counts; another algorithm lets the server decide. */
  algorithm?: Algorithm;
  /** With token, gcra or leaky. */
  burst?: number;
  /** A META hash (or a function of the request giving one): its max and duration are the policy. */
  meta?: string | ((request: RequestOf, response: RequestOf) => string | Promise<string>);
  /** The status of a request refused for want of Valkey (fail-closed) or of replicas. Default 503. */
  failureStatus?: number;
  /** SHADOW: the server decides, never refuses; each would-be refusal passes and is told to onShadowRefusal. */
  shadow?: boolean;
  /** PENALTY ms (the server decides). */
  penalty?: number;
  /** ALIGN: windows at multiples of windowMs since the epoch. */
  align?: boolean;
  /** CALENDAR: the window is this period (windowMs then only sizes the store's bookkeeping). */
  calendar?: CalendarPeriod;
  /** TZ, with calendar: "+05:30", "-08:00", "Europe/Berlin". */
  tz?: string;
  /** ESCALATE ms, with penalty (the server decides). */
  escalate?: number;
  /** Told of each shadow refusal (the request passes); what it throws is logged, not raised. */
  onShadowRefusal?: (key: string, decision: Decision) => void | Promise<void>;
  backend?: BackendOption;
  failure?: FailurePolicy;
  timeoutMs?: number;
  library?: string | false;
  onError?: (event: LinkEvent) => void;
  waitReplicas?: number;
  waitTimeoutMs?: number;
  unconfirmed?: "keep" | "refuse";
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
  shutdown(): void;
}

/** An option that breaks its rule: `<option> must be <rule> (got <value>)`. */
export class ConfigError extends TypeError {
  constructor(option: string, rule: string, value: unknown);
  readonly option: string;
}
export class BackendMissingError extends Error {}
export class TimeoutError extends Error {}

/** A request refused for want of Valkey (fail-closed) or of replicas: Express answers `status` with `headers`. */
export class UnavailableError extends Error {
  constructor(message: string, options?: { status?: number; retryAfterMs?: number; cause?: unknown });
  readonly status: number;
  readonly statusCode: number;
  readonly headers: Record<string, string>;
}

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
