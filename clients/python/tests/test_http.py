"""Real HTTP: FastAPI and Starlette apps under uvicorn on a loopback port,
hit with httpx, against the server the harness started (module or library
only). Per-route limits (dependency and decorator), per-request limits,
META changes taking effect, several limits on one route all or nothing,
the middleware's options, and the header fields against the server's
state."""

from __future__ import annotations

import asyncio
import json
import math
import time
from typing import Any, Dict, Iterator

import httpx
import pytest
from conftest import HOST, TIMEOUT, Uvicorn, server_ms, statuses
from fastapi import Depends, FastAPI, Request, Response
from starlette.applications import Starlette
from starlette.responses import JSONResponse, PlainTextResponse
from starlette.routing import Route

from valkey_ratelimit import (
    AsyncLimiter,
    Limiter,
    RateLimitExceeded,
    RateLimitMiddleware,
    forwarded_for,
    rate_limit_exceeded_handler,
)

QUOTA = {
    "type": "https://iana.org/assignments/http-problem-types#quota-exceeded",
    "title": "Request cannot be satisfied as assigned quota has been exceeded",
    "status": 429,
}


def by_client(request: Request) -> str:
    return request.headers.get("x-client", "anonymous")


@pytest.fixture
def alimiter(port: int, sync: Any) -> Iterator[AsyncLimiter]:
    import valkey.asyncio

    # A client per event loop: uvicorn's, in its thread.
    yield AsyncLimiter(valkey.asyncio.Valkey(host=HOST, port=port), prefix="h:", timeout=TIMEOUT)


def counters(sync: Any, pattern: str) -> Dict[str, int]:
    return {k.decode(): int(sync.get(k)) for k in sync.keys(pattern)}


def fastapi_app(limiter: AsyncLimiter, sync_limiter: Limiter, with_handler: bool = True) -> FastAPI:
    app = FastAPI()
    if with_handler:
        app.add_exception_handler(RateLimitExceeded, rate_limit_exceeded_handler)

    @app.get("/dep", dependencies=[Depends(limiter.limit("3/minute", key=by_client))])
    async def dep() -> Dict[str, bool]:
        return {"ok": True}

    @app.get("/deco")
    @limiter.limit("2/minute", key=by_client)
    async def deco() -> Dict[str, bool]:
        return {"ok": True}

    @app.get("/deco-response")
    @limiter.limit("2/minute", key=by_client)
    async def deco_response(request: Request) -> PlainTextResponse:
        return PlainTextResponse("own response")

    @app.get("/sync-deco")
    @sync_limiter.limit("2/minute", key=by_client)
    def sync_deco(request: Request) -> Dict[str, bool]:
        return {"ok": True}

    @app.get("/sync-dep", dependencies=[Depends(sync_limiter.limit("2/minute", key=by_client))])
    def sync_dep() -> Dict[str, bool]:
        return {"ok": True}

    @app.get("/default-key", dependencies=[Depends(limiter.limit("1/minute"))])
    async def default_key() -> Dict[str, bool]:
        return {"ok": True}

    # A window of 3 s: long enough for three requests on a loaded machine.
    @app.get("/multi", dependencies=[Depends(limiter.limit("2/3 seconds;3/minute", key=by_client))])
    async def multi() -> Dict[str, bool]:
        return {"ok": True}

    def tier(request: Request) -> str:
        return "5/minute" if request.headers.get("x-tier") == "gold" else "1/minute"

    @app.get("/tier", dependencies=[Depends(limiter.limit(tier, key=by_client))])
    async def tiered() -> Dict[str, bool]:
        return {"ok": True}

    @app.get("/meta", dependencies=[Depends(limiter.limit(meta="h:{route}:meta", key=by_client, name="meta-route"))])
    async def meta() -> Dict[str, bool]:
        return {"ok": True}

    async def admins_free(request: Request) -> Any:
        who = request.headers.get("x-client")
        return None if who == "admin" else who

    @app.get("/exempt", dependencies=[Depends(limiter.limit("1/minute", key=admins_free))])
    async def exempt() -> Dict[str, bool]:
        return {"ok": True}

    @app.get("/xff", dependencies=[Depends(limiter.limit("1/minute", key=forwarded_for(1)))])
    async def xff() -> Dict[str, bool]:
        return {"ok": True}

    @app.get("/quiet", dependencies=[Depends(limiter.limit("1/minute", key=by_client, headers=False))])
    async def quiet() -> Dict[str, bool]:
        return {"ok": True}

    def teapot(request: Request, outcome: Any) -> Response:
        return JSONResponse({"slow": "down", "retry_ms": outcome.retry_after_ms}, status_code=418)

    @app.get("/custom", dependencies=[Depends(limiter.limit("1/minute", key=by_client, on_refused=teapot))])
    async def custom() -> Dict[str, bool]:
        return {"ok": True}

    @app.get("/shared-a", dependencies=[Depends(limiter.limit("2/minute", key=by_client, scope="shared"))])
    async def shared_a() -> Dict[str, bool]:
        return {"ok": True}

    @app.get("/shared-b", dependencies=[Depends(limiter.limit("2/minute", key=by_client, scope="shared"))])
    async def shared_b() -> Dict[str, bool]:
        return {"ok": True}

    @app.get("/crowd", dependencies=[Depends(limiter.limit("20/minute", key=by_client))])
    async def crowd() -> Dict[str, bool]:
        return {"ok": True}

    @app.get("/zero", dependencies=[Depends(limiter.limit("0/minute", key=by_client))])
    async def zero() -> Dict[str, bool]:
        return {"ok": True}

    return app


@pytest.fixture
def fastapi_base(alimiter: AsyncLimiter, sync: Any, port: int) -> Iterator[httpx.Client]:
    import valkey

    app = fastapi_app(alimiter, Limiter(valkey.Valkey(host=HOST, port=port), prefix="h:", timeout=TIMEOUT))
    with Uvicorn(app) as base, httpx.Client(base_url=base, timeout=10) as http:
        yield http


def get(http: httpx.Client, path: str, client: str = "acme", **headers: str) -> httpx.Response:
    return http.get(path, headers={"x-client": client, **headers})


def test_a_route_dependency_limits_that_route(fastapi_base: httpx.Client, sync: Any) -> None:
    answers = [get(fastapi_base, "/dep") for _ in range(4)]
    assert statuses(answers) == [200, 200, 200, 429]
    for i, res in enumerate(answers[:3]):
        assert res.json() == {"ok": True}
        assert res.headers["ratelimit-policy"] == '"3-in-60sec";q=3;w=60'
        assert res.headers["ratelimit"].startswith(f'"3-in-60sec";r={2 - i};t=')
        assert "retry-after" not in res.headers
    refused = answers[3]
    assert refused.headers["content-type"] == "application/problem+json"
    assert json.loads(refused.content) == {**QUOTA, "violated-policies": ["3-in-60sec"]}
    assert refused.headers["ratelimit"].startswith('"3-in-60sec";r=0;t=')
    assert 1 <= int(refused.headers["retry-after"]) <= 60
    (key, count), = counters(sync, "h:{acme}:*dep*").items()
    assert count == 3, "the refused request was not counted"
    assert key.startswith("h:{acme}:") and key.endswith(":3/60000"), key
    # Another route, another client: counts of their own.
    assert get(fastapi_base, "/deco").status_code == 200
    assert get(fastapi_base, "/dep", client="other").status_code == 200


def test_the_decorator_limits_and_sets_the_headers(fastapi_base: httpx.Client, sync: Any) -> None:
    answers = [get(fastapi_base, "/deco") for _ in range(3)]
    assert statuses(answers) == [200, 200, 429]
    assert answers[0].headers["ratelimit"].startswith('"2-in-60sec";r=1;t=')
    assert answers[0].json() == {"ok": True}
    assert json.loads(answers[2].content)["violated-policies"] == ["2-in-60sec"]
    # An endpoint that returns its own Response gets the fields on it.
    own = [get(fastapi_base, "/deco-response") for _ in range(3)]
    assert statuses(own) == [200, 200, 429] and own[0].text == "own response"
    assert own[1].headers["ratelimit"].startswith('"2-in-60sec";r=0;t=')
    # Sync endpoints and a sync Limiter, as decorator and as dependency.
    assert statuses([get(fastapi_base, "/sync-deco") for _ in range(3)]) == [200, 200, 429]
    sync_dep = [get(fastapi_base, "/sync-dep") for _ in range(3)]
    assert statuses(sync_dep) == [200, 200, 429]
    assert sync_dep[0].headers["ratelimit"].startswith('"2-in-60sec";r=1;t=')


def test_the_default_key_is_the_client_address(fastapi_base: httpx.Client, sync: Any) -> None:
    assert statuses([get(fastapi_base, "/default-key", client=c) for c in ("a", "b")]) == [200, 429]
    assert list(counters(sync, "h:*default_key*")) [0].startswith("h:{127.0.0.1}:")


def test_several_limits_are_all_or_nothing(fastapi_base: httpx.Client, sync: Any) -> None:
    def state() -> Dict[str, int]:
        got = counters(sync, "h:{acme}:*multi*")
        return {k.rsplit(":", 1)[1]: v for k, v in got.items()}

    first = [get(fastapi_base, "/multi") for _ in range(3)]
    assert statuses(first) == [200, 200, 429]
    assert first[0].headers["ratelimit-policy"] == '"2-in-3sec";q=2;w=3, "3-in-60sec";q=3;w=60'
    assert first[0].headers["ratelimit"].startswith('"2-in-3sec";r=1;t=3, "3-in-60sec";r=2;t=')
    assert json.loads(first[2].content)["violated-policies"] == ["2-in-3sec"]
    assert state() == {"2/3000": 2, "3/60000": 2}, "the per-minute limit gave nothing for the refusal"
    time.sleep(int(first[2].headers["retry-after"]) + 0.05)
    assert get(fastapi_base, "/multi").status_code == 200
    refused = get(fastapi_base, "/multi")
    assert refused.status_code == 429
    assert json.loads(refused.content)["violated-policies"] == ["3-in-60sec"]
    assert int(refused.headers["retry-after"]) > 50
    time.sleep(3.05)
    assert get(fastapi_base, "/multi").status_code == 429
    # The short window started afresh and was not consumed by the refusals.
    assert state().get("2/3000", 0) == 0 and state()["3/60000"] == 3


def test_the_rate_can_be_a_function_of_the_request(fastapi_base: httpx.Client) -> None:
    gold = [get(fastapi_base, "/tier", client="g", **{"x-tier": "gold"}) for _ in range(6)]
    assert statuses(gold) == [200] * 5 + [429]
    assert gold[0].headers["ratelimit-policy"] == '"5-in-60sec";q=5;w=60'
    assert statuses([get(fastapi_base, "/tier", client="f") for _ in range(2)]) == [200, 429]


def test_a_meta_change_takes_effect_at_the_next_request(fastapi_base: httpx.Client, sync: Any) -> None:
    sync.hset("h:{route}:meta", mapping={"max": 2, "duration": 60_000})
    assert statuses([get(fastapi_base, "/meta") for _ in range(3)]) == [200, 200, 429]
    sync.hset("h:{route}:meta", "max", 4)
    answers = [get(fastapi_base, "/meta") for _ in range(3)]
    assert statuses(answers) == [200, 200, 429]
    assert answers[0].headers["ratelimit-policy"] == '"meta-route";q=4'
    assert answers[1].headers["ratelimit"].startswith('"meta-route";r=0;t=')
    sync.hset("h:{route}:meta", "max", 0)
    # max 0 is the server's "no limit": the operator lifted it.
    assert get(fastapi_base, "/meta").status_code == 200


def test_a_key_function_returning_none_exempts(fastapi_base: httpx.Client) -> None:
    admin = [get(fastapi_base, "/exempt", client="admin") for _ in range(3)]
    assert statuses(admin) == [200, 200, 200] and "ratelimit" not in admin[0].headers
    assert statuses([get(fastapi_base, "/exempt", client="user") for _ in range(2)]) == [200, 429]


def test_x_forwarded_for_behind_one_trusted_proxy(fastapi_base: httpx.Client, sync: Any) -> None:
    def via(chain: str) -> int:
        return fastapi_base.get("/xff", headers={"x-forwarded-for": chain}).status_code

    assert via("198.51.100.1, 203.0.113.5") == 200
    # The client's own words (left of the proxy's entry) change nothing.
    assert via("198.51.100.2, 203.0.113.5") == 429
    assert via("203.0.113.6") == 200
    assert sorted(k.split("}")[0] for k in counters(sync, "h:*xff*")) == ["h:{203.0.113.5", "h:{203.0.113.6"]


def test_headers_off_and_a_custom_refusal(fastapi_base: httpx.Client) -> None:
    quiet = [get(fastapi_base, "/quiet") for _ in range(2)]
    assert statuses(quiet) == [200, 429]
    assert "ratelimit" not in quiet[0].headers and "ratelimit" not in quiet[1].headers
    assert "retry-after" in quiet[1].headers, "a refusal keeps its Retry-After"
    custom = [get(fastapi_base, "/custom") for _ in range(2)]
    assert statuses(custom) == [200, 418]
    body = custom[1].json()
    assert body["slow"] == "down" and 0 < body["retry_ms"] <= 60_000
    assert custom[1].headers["ratelimit"].startswith('"1-in-60sec";r=0;t=') and "retry-after" in custom[1].headers


def test_a_scope_shares_one_count_between_routes(fastapi_base: httpx.Client) -> None:
    assert [get(fastapi_base, p).status_code for p in ("/shared-a", "/shared-b", "/shared-a")] == [200, 200, 429]


def test_a_limit_of_zero_refuses_everything(fastapi_base: httpx.Client, sync: Any) -> None:
    refused = get(fastapi_base, "/zero")
    assert refused.status_code == 429 and "retry-after" not in refused.headers
    assert refused.headers["ratelimit-policy"] == '"0-in-60sec";q=0;w=60'
    assert counters(sync, "h:*zero*") == {}


def test_concurrent_requests_admit_exactly_the_limit(fastapi_base: httpx.Client, sync: Any) -> None:
    base = str(fastapi_base.base_url)

    async def crowd() -> Any:
        async with httpx.AsyncClient(base_url=base, timeout=10) as http:
            return await asyncio.gather(*(http.get("/crowd", headers={"x-client": "crowd"}) for _ in range(50)))

    answers = asyncio.run(crowd())
    assert statuses(answers).count(200) == 20 and statuses(answers).count(429) == 30
    assert list(counters(sync, "h:{crowd}:*crowd*").values()) == [20]


def test_without_the_handler_fastapi_answers_its_own_body(alimiter: AsyncLimiter, port: int) -> None:
    import valkey

    app = fastapi_app(alimiter, Limiter(valkey.Valkey(host=HOST, port=port), prefix="h:"), with_handler=False)
    with Uvicorn(app) as base, httpx.Client(base_url=base) as http:
        answers = [get(http, "/dep", client="nohandler") for _ in range(4)]
    assert statuses(answers) == [200, 200, 200, 429]
    refused = answers[3]
    assert refused.json() == {"detail": QUOTA["title"]}
    assert refused.headers["ratelimit"].startswith('"3-in-60sec";r=0;t=') and "retry-after" in refused.headers
    # The decorator needs no handler: it answers itself.


# --- Starlette: the middleware and the decorator ------------------------------


def starlette_app(limiter: AsyncLimiter, **options: Any) -> Any:
    async def hello(request: Request) -> JSONResponse:
        return JSONResponse({"ok": True})

    inner = Starlette(routes=[Route("/{path:path}", hello)])
    return RateLimitMiddleware(inner, limiter, key=by_client, **options)


def test_middleware_headers_match_the_servers_state(alimiter: AsyncLimiter, sync: Any) -> None:
    app = starlette_app(alimiter, limit=3, window_ms=10_000)
    with Uvicorn(app) as base, httpx.Client(base_url=base) as http:

        def hit() -> Any:
            t0 = server_ms(sync)
            res = get(http, "/api")
            t1 = server_ms(sync)
            expire_at = sync.pexpiretime("h:acme")
            count = int(sync.get("h:acme") or 0)
            return res, (math.ceil((expire_at - t1) / 1000), math.ceil((expire_at - t0) / 1000)), count

        for i in (1, 2, 3):
            res, window, count = hit()
            assert res.status_code == 200 and count == i and res.json() == {"ok": True}
            assert res.headers["ratelimit-policy"] == '"3-in-10sec";q=3;w=10'
            prefix = f'"3-in-10sec";r={3 - count};t='
            assert res.headers["ratelimit"].startswith(prefix)
            assert window[0] <= int(res.headers["ratelimit"][len(prefix):]) <= window[1]
        res, window, count = hit()
        assert res.status_code == 429 and count == 3
        assert res.headers["content-type"] == "application/problem+json"
        assert json.loads(res.content) == {**QUOTA, "violated-policies": ["3-in-10sec"]}
        assert window[0] <= int(res.headers["retry-after"]) <= window[1]
        assert Limiter(sync, prefix="h:").reset("acme") is True
        assert get(http, "/api").status_code == 200


def test_middleware_options(alimiter: AsyncLimiter, sync: Any) -> None:
    def limit_of(request: Request) -> int:
        return 1 if request.url.path.startswith("/tight") else 3

    app = starlette_app(
        alimiter,
        limit=limit_of,
        window_ms=60_000,
        exempt=["/health", "/docs*"],
        name="api",
    )
    with Uvicorn(app) as base, httpx.Client(base_url=base) as http:
        assert statuses([get(http, "/health") for _ in range(5)]) == [200] * 5
        assert statuses([get(http, "/docs/openapi.json") for _ in range(5)]) == [200] * 5
        assert "ratelimit" not in get(http, "/health").headers
        assert statuses([get(http, "/tight", client="t") for _ in range(2)]) == [200, 429]
        answers = [get(http, "/x", client="loose") for _ in range(4)]
        assert statuses(answers) == [200, 200, 200, 429]
        assert answers[0].headers["ratelimit-policy"] == '"api";q=3;w=60'
    assert sync.keys("h:*") and not any(b"health" in k for k in sync.keys("*"))


def test_middleware_meta_and_several_rates(alimiter: AsyncLimiter, sync: Any, port: int) -> None:
    import valkey.asyncio

    sync.hset("h:mw:meta", mapping={"max": 1, "duration": 60_000})
    with Uvicorn(starlette_app(alimiter, meta="h:mw:meta")) as base, httpx.Client(base_url=base) as http:
        assert statuses([get(http, "/m", client="m") for _ in range(2)]) == [200, 429]
        sync.hset("h:mw:meta", "max", 3)
        assert statuses([get(http, "/m", client="m") for _ in range(3)]) == [200, 200, 429]
    # Another app, another event loop: another client.
    again = AsyncLimiter(valkey.asyncio.Valkey(host=HOST, port=port), prefix="h:", timeout=TIMEOUT)
    with Uvicorn(starlette_app(again, rate="2/minute;3/hour", headers=False)) as base, httpx.Client(base_url=base) as http:
        answers = [get(http, "/r", client="r") for _ in range(3)]
        assert statuses(answers) == [200, 200, 429] and "ratelimit" not in answers[0].headers
        assert sorted(counters(sync, "h:{r}:*").values()) == [2, 2]


def test_starlette_endpoint_decorator(alimiter: AsyncLimiter, sync: Any) -> None:
    @alimiter.limit("2/minute", key=by_client)
    async def hello(request: Request) -> PlainTextResponse:
        return PlainTextResponse("hi")

    app = Starlette(routes=[Route("/hi", hello)])
    with Uvicorn(app) as base, httpx.Client(base_url=base) as http:
        answers = [get(http, "/hi") for _ in range(3)]
    assert statuses(answers) == [200, 200, 429]
    assert answers[0].text == "hi" and answers[0].headers["ratelimit"].startswith('"2-in-60sec";r=1;t=')
    assert answers[2].headers["content-type"] == "application/problem+json"


def test_the_middleware_takes_a_sync_limiter(port: int, sync: Any) -> None:
    import valkey

    limiter = Limiter(valkey.Valkey(host=HOST, port=port), prefix="h:", timeout=TIMEOUT)
    with Uvicorn(starlette_app(limiter, rate="2/minute")) as base, httpx.Client(base_url=base) as http:
        answers = [get(http, "/s", client="sync-mw") for _ in range(3)]
    assert statuses(answers) == [200, 200, 429]
    assert answers[0].headers["ratelimit"].startswith('"2-in-60sec";r=1;t=')
    assert int(sync.get("h:sync-mw")) == 2


def test_a_dependency_run_on_a_worker_thread_still_decides(alimiter: AsyncLimiter, sync: Any) -> None:
    """A framework that took the route limit for a plain function runs it
    on a worker thread: it still decides, on the event loop, and refuses by
    raising (never a coroutine left unawaited, which would admit all)."""
    import anyio
    import anyio.to_thread

    limit = alimiter.limit("1/minute", key=by_client, scope="threaded")
    scope = {"type": "http", "method": "GET", "path": "/", "headers": [(b"x-client", b"t")], "query_string": b""}

    async def main() -> None:
        response = Response()
        assert await anyio.to_thread.run_sync(limit, Request(scope), response) is None
        assert response.headers["ratelimit"].startswith('"1-in-60sec";r=0;t=')
        with pytest.raises(RateLimitExceeded) as e:
            await anyio.to_thread.run_sync(limit, Request(scope), Response())
        assert e.value.status_code == 429 and e.value.response.headers["content-type"] == "application/problem+json"

    anyio.run(main)
    assert int(sync.get("h:{t}:threaded:1/60000")) == 1
