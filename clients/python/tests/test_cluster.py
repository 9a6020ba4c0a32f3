"""A cluster of three primaries the harness started, with the module and
the library loaded on each: the limiters through the cluster clients
(valkey-py and redis-py, sync and asyncio; valkey-glide), keys on every
shard, a META hash next to its counter by hash tag, a route limit with two
rates (one slot, by the hash tag the package puts around the request's
key), once through the module and once through FCALL."""

from __future__ import annotations

import asyncio
from typing import Any, Dict

import httpx
import pytest
from conftest import HOST, TIMEOUT, Uvicorn, statuses
from fastapi import Depends, FastAPI, Request

from valkey_ratelimit import AsyncLimiter, Limiter, Policy, RateLimitExceeded, rate_limit_exceeded_handler

BACKENDS = [("module", "auto"), ("functions", "functions")]


def sync_cluster(kind: str, port: int) -> Any:
    if kind == "valkey":
        import valkey

        return valkey.ValkeyCluster(host=HOST, port=port)
    import redis

    return redis.RedisCluster(host=HOST, port=port)


@pytest.mark.parametrize("kind", ["valkey", "redis"])
@pytest.mark.parametrize("backend, option", BACKENDS)
def test_sync_cluster_clients_route_by_key(kind: str, backend: str, option: str, port: int) -> None:
    c = sync_cluster(kind, port)
    limiter = Limiter(c, backend=option, prefix=f"{kind}:{backend}:", timeout=TIMEOUT)
    assert limiter.backend() == backend
    nodes = set()
    for tag in "abcdefgh":
        key = f"{{{tag}}}:k"
        got = [limiter.admit(key, limit=2, window_ms=10_000).admitted for _ in range(3)]
        assert got == [True, True, False], (key, got)
        full = f"{kind}:{backend}:{key}"
        assert int(c.get(full)) == 2
        nodes.add(c.get_node_from_key(full).name)
        assert limiter.reset(key) is True
    assert len(nodes) == 3, "keys on every shard"
    meta = f"{kind}:{backend}:{{acme}}:meta"
    c.hset(meta, mapping={"max": 1, "duration": 10_000})
    assert [limiter.admit("{acme}:k", meta=meta).admitted for _ in range(2)] == [True, False]
    both = [limiter.admit_all(["{u}:s", "{u}:m"], [Policy(1, 10_000), Policy(3, 60_000)]).admitted for _ in range(2)]
    assert both == [True, False]
    with limiter.lease("{l}:slots", limit=1, ttl_ms=5000) as held:
        assert held.lease.acquired and limiter.in_flight("{l}:slots") == 1
    c.close()


@pytest.mark.parametrize("backend, option", BACKENDS)
def test_glide_cluster_client_routes_by_slot(backend: str, option: str, port: int) -> None:
    from glide import GlideClusterClient, GlideClusterClientConfiguration, NodeAddress

    async def main() -> None:
        c = await GlideClusterClient.create(GlideClusterClientConfiguration([NodeAddress(HOST, port)], request_timeout=2000))
        limiter = AsyncLimiter(c, backend=option, prefix=f"glide:{backend}:", timeout=TIMEOUT)
        assert await limiter.backend() == backend
        for tag in "abcdef":
            got = [(await limiter.admit(f"{{{tag}}}:k", limit=2, window_ms=10_000)).admitted for _ in range(3)]
            assert got == [True, True, False]
        both = (await limiter.admit_all(["{u}:s", "{u}:m"], [Policy(1, 10_000), Policy(3, 60_000)])).admitted
        assert both
        await c.close()

    asyncio.run(main())


@pytest.mark.parametrize("backend, option", BACKENDS)
def test_a_route_with_two_rates_on_a_cluster(backend: str, option: str, port: int) -> None:
    import valkey
    import valkey.asyncio

    app = FastAPI()
    app.add_exception_handler(RateLimitExceeded, rate_limit_exceeded_handler)
    limiter = AsyncLimiter(valkey.asyncio.ValkeyCluster(host=HOST, port=port), backend=option, prefix=f"http:{backend}:", timeout=TIMEOUT)

    def by_client(request: Request) -> str:
        return request.headers["x-client"]

    @app.get("/", dependencies=[Depends(limiter.limit("2/minute;3/hour", key=by_client))])
    async def root() -> Dict[str, bool]:
        return {"ok": True}

    with Uvicorn(app) as base, httpx.Client(base_url=base) as http:
        for client in ("alpha", "beta", "gamma"):
            assert statuses([http.get("/", headers={"x-client": client}) for _ in range(3)]) == [200, 200, 429]
    c = valkey.ValkeyCluster(host=HOST, port=port)
    keys = [k for node_keys in [c.keys(f"http:{backend}:*", target_nodes=valkey.ValkeyCluster.ALL_NODES)] for k in node_keys]
    assert len(keys) == 6
    c.close()
