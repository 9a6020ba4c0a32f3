"""The package against a real server: a Starlette app with
RateLimitMiddleware under uvicorn on a loopback port, hit with httpx, and
the sync and asyncio limiters directly.

    python tests/test_frameworks.py unit
    VALKEY_PORT=6379 RL_EXPECT_BACKEND=module python tests/test_frameworks.py live
    VALKEY_PORT=<the same port, server stopped> python tests/test_frameworks.py down
    VALKEY_PORT=<a node of a cluster with module and library> python tests/test_frameworks.py cluster

``unit`` needs no server (Decision.headers() against the draft's examples);
``live`` a running server with the module (RL_EXPECT_BACKEND=module) or with
only the FUNCTION library (functions); ``down`` nothing listening on the
port. Prints one ``ok <check>`` line per check; the first failure raises.
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import pathlib
import socket
import sys
import threading
import time

HOST = os.environ.get("VALKEY_HOST", "127.0.0.1")
PORT = int(os.environ.get("VALKEY_PORT", "6379"))
LIBRARY = pathlib.Path(__file__).resolve().parents[3] / "functions" / "ratelimit.lua"


def ok(what: str) -> None:
    print(f"ok {what}", flush=True)


def unit() -> None:
    from valkey_ratelimit import QUOTA_EXCEEDED_TYPE, Decision

    # draft-ietf-httpapi-ratelimit-headers, 3.2 and 4.2.
    d = Decision(True, 100, 50, 0, 30_000)
    assert d.headers(window_ms=10_000) == {
        "RateLimit-Policy": '"default";q=100;w=10',
        "RateLimit": '"default";r=50;t=30',
    }, d.headers(window_ms=10_000)
    d = Decision(True, 50, 1, 0, 7_000, window_ms=60_000)
    assert d.headers(name="permin") == {
        "RateLimit-Policy": '"permin";q=50;w=60',
        "RateLimit": '"permin";r=1;t=7',
    }
    d = Decision(True, 300_000_000, 300_000_000, 0, 60_000)
    assert d.headers(partition_key=b"App-999")["RateLimit"] == '"default";r=300000000;t=60;pk=:QXBwLTk5OQ==:'
    assert d.headers(partition_key=b"App-999")["RateLimit-Policy"] == '"default";q=300000000;pk=:QXBwLTk5OQ==:'
    assert Decision(True, 1000, 999, 0, 0).headers(partition_key=b"trial121323")["RateLimit"].endswith(
        ";pk=:dHJpYWwxMjEzMjM=:"
    )
    ok("unit: Decision.headers() gives the draft's examples")
    # Rounding up, to the second: a client that waits that long is never early.
    assert Decision(True, 5, 1, 0, 6_001).headers()["RateLimit"] == '"default";r=1;t=7'
    for retry, seconds in [(1, "1"), (999, "1"), (1_000, "1"), (1_001, "2"), (9_989, "10")]:
        h = Decision(False, 3, 0, retry, retry, window_ms=10_000).headers()
        assert h["Retry-After"] == seconds, (retry, h)
        assert h["RateLimit"] == f'"default";r=0;t={seconds}', h
    # Refused, the effective window ends at the retry, never after Retry-After.
    h = Decision(False, 10, 0, 2_500, 9_000, window_ms=10_000).headers()
    assert h == {"RateLimit-Policy": '"default";q=10;w=10', "RateLimit": '"default";r=0;t=3', "Retry-After": "3"}
    # A cost that can never pass: no Retry-After.
    assert "Retry-After" not in Decision(False, 3, 3, -1, 0).headers()
    # Unlimited: no quota to advertise.
    assert Decision(True, 0, 0, 0, 0).headers() == {}
    # A window under a second is still w=1: the draft's w is a non-zero integer.
    assert Decision(True, 5, 4, 0, 200, window_ms=200).headers()["RateLimit-Policy"] == '"default";q=5;w=1'
    ok("unit: t, w and Retry-After are whole seconds rounded up")
    problem = Decision(False, 3, 0, 1_000, 1_000).problem("api")
    assert problem["type"] == QUOTA_EXCEEDED_TYPE == "https://iana.org/assignments/http-problem-types#quota-exceeded"
    assert problem["violated-policies"] == ["api"] and problem["status"] == 429
    d = Decision(True, 3, 2, 0, 1_000)
    try:
        d.remaining = 0  # type: ignore[misc]
        raise AssertionError("Decision is not frozen")
    except AttributeError:
        pass
    ok("unit: problem body and frozen Decision")


class Uvicorn:
    """An ASGI app under uvicorn on 127.0.0.1, in a thread with its own loop."""

    def __init__(self, app) -> None:
        import uvicorn

        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        config = uvicorn.Config(app, log_level="warning", lifespan="off")
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [self.sock]}, daemon=True)

    def __enter__(self) -> str:
        self.thread.start()
        deadline = time.monotonic() + 10
        while not self.server.started:
            assert time.monotonic() < deadline, "uvicorn did not start"
            time.sleep(0.01)
        return f"http://127.0.0.1:{self.port}"

    def __exit__(self, *exc) -> None:
        self.server.should_exit = True
        self.thread.join(10)


def app_for(limiter, limit: int, **extra):
    from starlette.applications import Starlette
    from starlette.responses import JSONResponse
    from starlette.routing import Route

    from valkey_ratelimit import RateLimitMiddleware

    async def hello(request):
        return JSONResponse({"ok": True})

    inner = Starlette(routes=[Route("/{path:path}", hello)])
    return RateLimitMiddleware(
        inner,
        limiter,
        key=lambda request: request.headers.get("x-client", "anonymous"),
        limit=limit,
        window_ms=10_000,
        **extra,
    )


def router(routes):
    async def app(scope, receive, send):
        await routes[scope["path"]](scope, receive, send)

    return app


def server_ms(c) -> int:
    s, us = c.time()
    return s * 1000 + us // 1000


def live(expect: str) -> None:
    import httpx
    import valkey
    import valkey.asyncio

    from valkey_ratelimit import AsyncLimiter, BackendMissingError, Limiter

    sync = valkey.Valkey(host=HOST, port=PORT)
    sync.flushall()
    aclient = valkey.asyncio.Valkey(host=HOST, port=PORT)
    limiter = AsyncLimiter(aclient, prefix="rl:")
    app = router({"/api": app_for(limiter, 3), "/burst": app_for(limiter, 20)})
    with Uvicorn(app) as base, httpx.Client(base_url=base) as http:

        def hit(key: str):
            t0 = server_ms(sync)
            res = http.get("/api", headers={"x-client": key})
            t1 = server_ms(sync)
            expire_at = sync.pexpiretime(f"rl:{key}")
            count = int(sync.get(f"rl:{key}") or 0)
            window = (math.ceil((expire_at - t1) / 1000), math.ceil((expire_at - t0) / 1000))
            return res, window, count

        def seconds_in(value: str, window, what: str) -> None:
            assert window[0] <= int(value) <= window[1], f"{what}: {value} not in {window}"

        for i in (1, 2, 3):
            res, window, count = hit("acme")
            assert res.status_code == 200, res
            assert count == i, "the server counted the request"
            assert res.json() == {"ok": True}
            assert res.headers["ratelimit-policy"] == '"default";q=3;w=10'
            prefix = f'"default";r={3 - count};t='
            assert res.headers["ratelimit"].startswith(prefix), res.headers["ratelimit"]
            seconds_in(res.headers["ratelimit"][len(prefix) :], window, "t")
            assert "retry-after" not in res.headers
            ok(f"{expect}: request {i} admitted, RateLimit {res.headers['ratelimit']}")
        res, window, count = hit("acme")
        assert res.status_code == 429
        assert count == 3, "the refused request was not counted"
        assert res.headers["content-type"] == "application/problem+json"
        assert json.loads(res.content) == {
            "type": "https://iana.org/assignments/http-problem-types#quota-exceeded",
            "title": "Request cannot be satisfied as assigned quota has been exceeded",
            "status": 429,
            "violated-policies": ["default"],
        }
        assert res.headers["ratelimit-policy"] == '"default";q=3;w=10'
        assert res.headers["ratelimit"].startswith('"default";r=0;t=')
        seconds_in(res.headers["ratelimit"].rsplit("=", 1)[1], window, "t")
        seconds_in(res.headers["retry-after"], window, "Retry-After")
        ok(f"{expect}: request 4 refused: 429 problem+json, Retry-After {res.headers['retry-after']}")

        # reset admits again (the sync limiter, on the same keys).
        assert Limiter(sync, prefix="rl:").reset("acme") is True
        res, _, count = hit("acme")
        assert res.status_code == 200 and count == 1
        assert res.headers["ratelimit"] in ('"default";r=2;t=10', '"default";r=2;t=9')
        ok(f"{expect}: reset admits again")

        async def crowd():
            async with httpx.AsyncClient(base_url=base) as ahttp:
                return await asyncio.gather(
                    *(ahttp.get("/burst", headers={"x-client": "crowd"}) for _ in range(50))
                )

        statuses = [r.status_code for r in asyncio.run(crowd())]
        assert statuses.count(200) == 20 and statuses.count(429) == 30, statuses
        assert int(sync.get("rl:crowd")) == 20
        ok(f"{expect}: 50 concurrent requests, exactly 20 admitted")

    # The limiters directly, sync and asyncio.
    plain = Limiter(sync, prefix="plain:")
    assert plain.backend() == expect
    d = plain.admit("k", limit=2, window_ms=5000)
    assert (d.admitted, d.limit, d.remaining, d.retry_after_ms, d.backend) == (True, 2, 1, 0, expect)
    assert 4000 < d.reset_after_ms <= 5000
    plain.admit("k", limit=2, window_ms=5000)
    d = plain.admit("k", limit=2, window_ms=5000)
    assert not d.admitted and 4000 < d.retry_after_ms <= 5000
    assert 0 < plain.ttl("k", limit=2, window_ms=5000) <= d.retry_after_ms
    assert plain.refund("k", limit=2, window_ms=5000).remaining == 1
    assert plain.admit("k", limit=2, window_ms=5000, cost=0).remaining == 1, "a peek changes nothing"
    assert plain.reset("k") is True and plain.reset("k") is False
    d = plain.admit("t", limit=5, window_ms=1000, algorithm="token", burst=2, cost=2)
    assert d.admitted and d.limit == 2 and d.remaining == 0
    sync.set("plain:w", "not a counter")
    try:
        plain.admit("w", limit=2, window_ms=5000)
        raise AssertionError("a bad stored value must raise")
    except valkey.exceptions.ResponseError:
        pass
    ok(f"{expect}: Limiter admit/ttl/refund/reset; server errors raised, not failed open")

    async def async_checks():
        c = valkey.asyncio.Valkey(host=HOST, port=PORT)
        lim = AsyncLimiter(c, prefix="aplain:")
        assert await lim.backend() == expect
        d = await lim.admit("k", limit=1, window_ms=5000)
        assert d.admitted
        d = await lim.admit("k", limit=1, window_ms=5000)
        assert not d.admitted and d.retry_after_ms > 0
        assert (await lim.refund("k", limit=1, window_ms=5000)).remaining == 1
        assert await lim.ttl("k", limit=1, window_ms=5000) == 0
        assert await lim.reset("k") is False
        await c.aclose()

    asyncio.run(async_checks())
    ok(f"{expect}: AsyncLimiter admit/ttl/refund/reset")

    if expect == "functions":
        try:
            Limiter(sync, backend="module").admit("k", limit=2, window_ms=5000)
            raise AssertionError("backend='module' must fail without the module")
        except valkey.exceptions.ResponseError as e:
            assert "unknown command" in str(e)
        sync.function_delete("ratelimit")
        # The cached answer is stale now: detected again, and found missing.
        try:
            plain.admit("k", limit=2, window_ms=5000)
            raise AssertionError("a flushed library must be noticed")
        except BackendMissingError:
            pass
        fresh = valkey.Valkey(host=HOST, port=PORT)
        try:
            Limiter(fresh).admit("k", limit=2, window_ms=5000)
            raise AssertionError("no backend must raise")
        except BackendMissingError as e:
            assert "FUNCTION LOAD" in str(e)
        ok("functions: without the library, BackendMissingError says how to load it")
        d = Limiter(fresh, library=LIBRARY.read_text()).admit("k2", limit=2, window_ms=5000)
        assert d.admitted and d.backend == "functions"
        assert sync.function_list(library="ratelimit"), "the library is loaded"
        ok("functions: opted in, the client loads the library itself")


def down() -> None:
    import httpx
    import valkey
    import valkey.asyncio

    from valkey_ratelimit import AsyncLimiter, Limiter, LimiterTimeout

    # A port that accepts connections and never answers: only a timeout ends a call.
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(64)
    silent_port = silent.getsockname()[1]
    cases = [(PORT, None), (silent_port, 0.3)]
    for port, timeout in cases:
        how = f"after a {timeout} s timeout" if timeout else "refused connection"
        for failure in ("open", "closed"):
            sync = Limiter(valkey.Valkey(host=HOST, port=port), failure=failure, timeout=timeout)
            d = sync.admit("k", limit=3, window_ms=1000)
            assert d.admitted == (failure == "open") and d.backend == "unavailable", d
            if timeout:
                assert isinstance(d.error, LimiterTimeout), d.error
            limiter = AsyncLimiter(valkey.asyncio.Valkey(host=HOST, port=port), failure=failure, timeout=timeout)
            with Uvicorn(app_for(limiter, 3)) as base:
                started = time.monotonic()
                res = httpx.get(f"{base}/api", timeout=10)
                assert time.monotonic() - started < 3
            if failure == "open":
                assert res.status_code == 200 and res.json() == {"ok": True}
                assert "ratelimit" not in res.headers
            else:
                assert res.status_code == 429 and res.headers["retry-after"] == "1"
                assert res.headers["content-type"] == "application/problem+json"
            ok(f"down: fail-{failure} ({how}): sync admitted={d.admitted}, HTTP {res.status_code}")
    silent.close()


def cluster() -> None:
    """A cluster of primaries with the module and the library loaded: the
    limiters through valkey-py's cluster clients (sync and asyncio), keys
    on every shard, a META hash next to its counter by hash tag, and the
    middleware, once through the module and once through FCALL."""
    import httpx
    import valkey
    import valkey.asyncio

    from valkey_ratelimit import AsyncLimiter, Limiter

    sync = valkey.ValkeyCluster(host=HOST, port=PORT)
    for backend in ("module", "functions"):
        option = "auto" if backend == "module" else "functions"
        limiter = Limiter(sync, backend=option)
        assert limiter.backend() == backend
        for tag in ("a", "b", "c"):
            key = f"py:{backend}:{{{tag}}}:k"
            got = [limiter.admit(key, limit=2, window_ms=10_000).admitted for _ in range(3)]
            assert got == [True, True, False], (key, got)
            assert int(sync.get(key)) == 2
            assert limiter.reset(key) is True
        meta = f"py:{backend}:{{acme}}:meta"
        sync.hset(meta, mapping={"max": 1, "duration": 10_000})
        got = [limiter.admit(f"py:{backend}:{{acme}}:k", meta=meta).admitted for _ in range(2)]
        assert got == [True, False], "the META hash's max applies"

        aclient = valkey.asyncio.ValkeyCluster(host=HOST, port=PORT)
        alimiter = AsyncLimiter(aclient, backend=option, prefix=f"py:{backend}:{{http}}:")
        with Uvicorn(app_for(alimiter, 3)) as base, httpx.Client(base_url=base) as http:
            statuses = [http.get("/api", headers={"x-client": "acme"}).status_code for _ in range(4)]
        assert statuses == [200, 200, 200, 429], statuses
        ok(f"cluster: {backend}: keys on every shard, META by hash tag, ASGI 200 200 200 429")


def main() -> None:
    phase = sys.argv[1] if len(sys.argv) > 1 else ""
    if phase == "unit":
        unit()
    elif phase == "live":
        expect = os.environ.get("RL_EXPECT_BACKEND")
        assert expect in ("module", "functions"), "RL_EXPECT_BACKEND must be module or functions"
        live(expect)
    elif phase == "down":
        down()
    elif phase == "cluster":
        cluster()
    else:
        sys.exit("usage: test_frameworks.py unit|live|down|cluster")
    print(f"PASS python {phase}", flush=True)


if __name__ == "__main__":
    main()
