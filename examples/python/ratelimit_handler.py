#!/usr/bin/env python3
"""Rate-limit an HTTP handler with RL.ADMIT, using valkey-py.

`handle_request` is what a web framework's middleware would call: it counts
the request against the client's limiter with one RL.ADMIT and maps the reply
onto the IETF RateLimit header fields (draft-ietf-httpapi-ratelimit-headers):

    RateLimit-Policy: "default";q=100;w=60     the quota: q requests per w seconds
    RateLimit: "default";r=42;t=17             r remaining, t seconds to the reset
    Retry-After: 17                            only on 429, seconds, rounded up

Run it against a server with the module loaded (`make run`):

    python3 examples/python/ratelimit_handler.py --port 6379 --client acme --limit 3 -n 4

It prints the N responses as HTTP/1.1 text. The port also comes from
$VALKEY_PORT, the host from $VALKEY_HOST. `--cluster` uses the cluster client
(see `cluster_client`).

With `--queue N` the policy shapes instead of capping: a leaky bucket
(`ALGO leaky BURST N`) lets requests proceed `--limit` per `--window`, one
interval apart, with up to N waiting. An admitted request told to wait
(`retry_after_ms` > 0) is held that long, then served; only a request that
would find the queue full is refused (429).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from dataclasses import dataclass
from typing import Optional

import valkey
from valkey.cluster import ValkeyCluster


@dataclass(frozen=True)
class Policy:
    """One quota: `limit` requests per `window_s` seconds, fixed window; or,
    with `queue`, that rate as a leaky bucket with `queue` places to wait."""

    name: str = "default"
    limit: int = 100
    window_s: int = 60
    queue: Optional[int] = None

    def options(self) -> list:
        """RL.ADMIT's policy options."""
        opts = ["LIMIT", self.limit, "WINDOW", self.window_s * 1000]
        if self.queue is not None:
            opts = ["ALGO", "leaky", *opts, "BURST", self.queue]
        return opts


# RL.ADMIT's reply, in order (RESP2 array) or by name (RESP3 map).
ADMIT_FIELDS = ("admitted", "limit", "remaining", "retry_after_ms", "reset_after_ms")


def limiter_key(client_id: str, policy: Policy) -> str:
    """The counter's key: `rl:{<client id>}:<policy>`.

    The braces are a cluster hash tag: only `<client id>` is hashed, so every
    key of one client (its per-second and per-day limiters, a META hash with
    its configured cap) lands in the same slot. That is what lets
    `RL.ADMIT ... META rl:{acme}:policy` and `RL.ADMITALL 2 rl:{acme}:sec
    rl:{acme}:day ...` run in a cluster instead of failing with CROSSSLOT.
    A client id must therefore not contain braces itself.
    """
    if "{" in client_id or "}" in client_id:
        raise ValueError("client id must not contain '{' or '}'")
    return f"rl:{{{client_id}}}:{policy.name}"


def ceil_seconds(ms: int) -> int:
    """Milliseconds to whole seconds, rounded up: a client that waits that long is never early."""
    return -(-ms // 1000)


def to_json(value) -> str:
    return json.dumps(value, separators=(",", ":"))


def handle_request(client, client_id: str, policy: Policy = Policy()):
    """Admit or refuse one request of `client_id`: returns (status, headers, body).

    `client` is a `valkey.Valkey` or a `valkey.cluster.ValkeyCluster`.
    """
    try:
        key = limiter_key(client_id, policy)
    except ValueError as e:
        return 400, {"Content-Type": "application/json"}, to_json({"error": str(e)})
    # A cluster client left to itself asks the server for a module command's
    # keys (COMMAND GETKEYS: RL.ADMIT has movable keys, its META option)
    # before every call. Naming the node that owns the key's slot spares that
    # round trip; MOVED and ASK are still followed while slots migrate.
    route = {}
    if isinstance(client, ValkeyCluster):
        route["target_nodes"] = client.get_node_from_key(key)
    reply = client.execute_command("RL.ADMIT", key, *policy.options(), **route)
    if isinstance(reply, dict):
        # RESP3 (protocol=3): a map with the fields by name.
        reply = {k.decode() if isinstance(k, bytes) else k: v for k, v in reply.items()}
        reply = [reply[field] for field in ADMIT_FIELDS]
    admitted, limit, remaining, retry_after_ms, reset_after_ms = reply
    headers = {}
    # A quota to advertise (a leaky bucket's `limit` is its queue, not a quota).
    if limit > 0 and policy.queue is None:
        headers["RateLimit-Policy"] = f'"{policy.name}";q={limit};w={policy.window_s}'
        headers["RateLimit"] = f'"{policy.name}";r={remaining};t={ceil_seconds(reset_after_ms)}'
    if admitted and policy.queue is not None:
        # Shaping: wait for this request's turn, then serve it.
        time.sleep(retry_after_ms / 1000)
        status, body = 200, {"ok": True, "client": client_id, "waited_ms": retry_after_ms}
    elif admitted:
        status, body = 200, {"ok": True, "client": client_id}
    elif retry_after_ms < 0:
        # The request costs more than the whole quota: waiting will not help.
        status, body = 429, {"error": "request exceeds the quota"}
    else:
        retry_after = max(1, ceil_seconds(retry_after_ms))
        headers["Retry-After"] = str(retry_after)
        status, body = 429, {"error": "rate limited", "retry_after": retry_after}
    headers["Content-Type"] = "application/json"
    return status, headers, to_json(body)


def standalone_client(host: str, port: int, protocol: int = 2) -> valkey.Valkey:
    """A client for one server (or a primary behind a proxy)."""
    return valkey.Valkey(host=host, port=port, socket_timeout=5, protocol=protocol)


def cluster_client(host: str, port: int, protocol: int = 2) -> ValkeyCluster:
    """A cluster-aware client: give it any node, it discovers the others.

    It computes each command's slot from its key and sends it to the node that
    owns the slot, following MOVED/ASK redirections when slots migrate. The
    limiter of one client lives on one node; `limiter_key`'s `{client id}`
    hash tag keeps all of that client's keys together there, so multi-key
    calls (META, RL.ADMITALL) stay on a single node.
    """
    return ValkeyCluster(host=host, port=port, socket_timeout=5, protocol=protocol)


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
    p.add_argument("-n", "--requests", type=int, default=1, help="how many requests to send")
    args = p.parse_args(argv)

    policy = Policy(args.policy, args.limit, args.window, args.queue)
    make = cluster_client if args.cluster else standalone_client
    client = make(args.host, args.port, args.protocol)
    try:
        for _ in range(args.requests):
            print(format_response(*handle_request(client, args.client, policy)), flush=True)
    finally:
        client.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
