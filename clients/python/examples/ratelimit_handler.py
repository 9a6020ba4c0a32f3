#!/usr/bin/env python3
"""Rate-limit an HTTP handler with valkey_ratelimit's Limiter, on valkey-py.

`handle_request` is what a web framework's handler would call: one
`Limiter.admit` per request against the client's limiter, and
`Decision.headers()` for the IETF RateLimit header fields
(draft-ietf-httpapi-ratelimit-headers):

    RateLimit-Policy: "default";q=100;w=60     the quota: q requests per w seconds
    RateLimit: "default";r=42;t=17             r remaining, t seconds to the reset
    Retry-After: 17                            only on 429, seconds, rounded up

(For Starlette and FastAPI, `valkey_ratelimit.asgi.RateLimitMiddleware` does
this for every request.) Run it against a server with the module loaded
(`make run`), after `make client-deps`:

    PYTHONPATH=clients/python/src .deps/clients-venv/bin/python \\
        clients/python/examples/ratelimit_handler.py --port 6379 --client acme --limit 3 -n 4

It prints the N responses as HTTP/1.1 text. The port also comes from
$VALKEY_PORT, the host from $VALKEY_HOST. `--cluster` uses valkey-py's
cluster client, which the Limiter routes by key.

With `--queue N` the policy shapes instead of capping: a leaky bucket
(`algorithm="leaky", burst=N`) lets requests proceed `--limit` per
`--window`, one interval apart, with up to N waiting. An admitted request
told to wait (`retry_after_ms` > 0) is held that long, then served; only a
request that would find the queue full is refused (429).

With `--lease N` the handler caps work in flight instead of its rate: each
request runs inside `limiter.lease(...)` on the client's semaphore
`rl:{<client id>}:inflight` (at most N at once, each lease lasting `--ttl`
ms and kept alive by the heartbeat while the work, `--work` ms, runs), and
is released when it ends. A request that finds all N slots taken gets 429
with Retry-After: the seconds until the earliest lease would end by itself.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from dataclasses import dataclass
from typing import Optional

import valkey
from valkey.cluster import ValkeyCluster
from valkey_ratelimit import LeaseRefused, Limiter


@dataclass(frozen=True)
class Policy:
    """One quota: `limit` requests per `window_s` seconds, fixed window; or,
    with `queue`, that rate as a leaky bucket with `queue` places to wait."""

    name: str = "default"
    limit: int = 100
    window_s: int = 60
    queue: Optional[int] = None

    def options(self) -> dict:
        """Limiter.admit's policy arguments."""
        if self.queue is None:
            return dict(limit=self.limit, window_ms=self.window_s * 1000)
        return dict(limit=self.limit, window_ms=self.window_s * 1000, algorithm="leaky", burst=self.queue)


def limiter_key(client_id: str, policy: Policy) -> str:
    """The limiter's key: `rl:{<client id>}:<policy>`.

    The braces are a cluster hash tag: only `<client id>` is hashed, so every
    key of one client (its per-second and per-day limiters, a META hash with
    its configured cap) lands in the same slot, and multi-key calls (META,
    RL.ADMITALL) run in a cluster instead of failing with CROSSSLOT. A client
    id must therefore not contain braces itself.
    """
    if "{" in client_id or "}" in client_id:
        raise ValueError("client id must not contain '{' or '}'")
    return f"rl:{{{client_id}}}:{policy.name}"


def to_json(value) -> str:
    return json.dumps(value, separators=(",", ":"))


def handle_request(limiter: Limiter, client_id: str, policy: Policy = Policy()):
    """Admit or refuse one request of `client_id`: returns (status, headers, body)."""
    try:
        key = limiter_key(client_id, policy)
    except ValueError as e:
        return 400, {"Content-Type": "application/json"}, to_json({"error": str(e)})
    decision = limiter.admit(key, **policy.options())
    if decision.error is not None:
        # The Limiter's default failure policy: admit while Valkey is unreachable.
        print(f"valkey unreachable, failing open: {decision.error}", file=sys.stderr)
    headers = decision.headers(name=policy.name)
    if policy.queue is not None:
        # A leaky bucket's limit is its queue, not a quota: only Retry-After.
        headers = {k: v for k, v in headers.items() if k == "Retry-After"}
    if decision.admitted and policy.queue is not None:
        # Shaping: wait for this request's turn, then serve it.
        time.sleep(decision.retry_after_ms / 1000)
        status, body = 200, {"ok": True, "client": client_id, "waited_ms": decision.retry_after_ms}
    elif decision.admitted:
        status, body = 200, {"ok": True, "client": client_id}
    elif "Retry-After" not in headers:
        # The request costs more than the whole quota: waiting will not help.
        status, body = 429, {"error": "request exceeds the quota"}
    else:
        status, body = 429, {"error": "rate limited", "retry_after": int(headers["Retry-After"])}
    headers["Content-Type"] = "application/json"
    return status, headers, to_json(body)


def lease_key(client_id: str) -> str:
    """The client's semaphore: `rl:{<client id>}:inflight`, in the slot of its limiters."""
    if "{" in client_id or "}" in client_id:
        raise ValueError("client id must not contain '{' or '}'")
    return f"rl:{{{client_id}}}:inflight"


def handle_leased_request(limiter: Limiter, client_id: str, slots: int, ttl_ms: int, work_ms: int = 0):
    """Run one request of `client_id` under a lease, at most `slots` at once:
    returns (status, headers, body)."""
    headers = {"Content-Type": "application/json"}
    try:
        key = lease_key(client_id)
    except ValueError as e:
        return 400, headers, to_json({"error": str(e)})
    try:
        # Acquired here; extended every ttl_ms / 3 while the block runs;
        # released when it ends, also on an exception.
        with limiter.lease(key, limit=slots, ttl_ms=ttl_ms) as held:
            time.sleep(work_ms / 1000)  # the request's work
            body = {"ok": True, "client": client_id, "in_flight": held.lease.in_flight}
            return 200, headers, to_json(body)
    except LeaseRefused as e:
        # All slots taken: the earliest lease ends by itself in retry_after_ms
        # (a holder that finishes first frees its slot sooner).
        retry = max(1, math.ceil(e.retry_after_ms / 1000))
        headers = {"Retry-After": str(retry), **headers}
        return 429, headers, to_json({"error": "too many in flight", "retry_after": retry})


REASONS = {200: "OK", 400: "Bad Request", 429: "Too Many Requests"}


def format_response(status: int, headers: dict, body: str) -> str:
    lines = [f"HTTP/1.1 {status} {REASONS.get(status, '')}".rstrip()]
    lines += [f"{name}: {value}" for name, value in headers.items()]
    return "\n".join(lines) + "\n\n" + body + "\n"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--host", default=os.environ.get("VALKEY_HOST", "127.0.0.1"))
    p.add_argument("--port", type=int, default=int(os.environ.get("VALKEY_PORT", "6379")))
    p.add_argument("--cluster", action="store_true", help="use the cluster-aware client")
    p.add_argument("--protocol", type=int, choices=(2, 3), default=2, help="RESP version")
    p.add_argument("--client", default="anonymous", help="client id (API key, tenant, IP)")
    p.add_argument("--policy", default="default", help="policy name")
    p.add_argument("--limit", type=int, default=100, help="requests per window")
    p.add_argument("--window", type=int, default=60, help="window in seconds")
    p.add_argument("--queue", type=int, help="shape as a leaky bucket with this many waiting")
    p.add_argument("--lease", type=int, help="cap work in flight at this many leases instead")
    p.add_argument("--ttl", type=int, default=30_000, help="lease time to live in ms (--lease)")
    p.add_argument("--work", type=int, default=0, help="ms each leased request works (--lease)")
    p.add_argument("-n", "--requests", type=int, default=1, help="how many requests to send")
    args = p.parse_args(argv)

    policy = Policy(args.policy, args.limit, args.window, args.queue)
    make = ValkeyCluster if args.cluster else valkey.Valkey
    client = make(host=args.host, port=args.port, socket_timeout=5, protocol=args.protocol)
    limiter = Limiter(client)
    try:
        for _ in range(args.requests):
            if args.lease is not None:
                response = handle_leased_request(limiter, args.client, args.lease, args.ttl, args.work)
            else:
                response = handle_request(limiter, args.client, policy)
            print(format_response(*response), flush=True)
    finally:
        client.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
