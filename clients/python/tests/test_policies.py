"""Issue 27's options through the package, against the server the harness
started (module or library): shadow mode through the ASGI middleware over
real HTTP (every request passes, ``on_shadow_refusal`` told of each
would-be refusal, the state that of the enforced calls), over RESP3 too;
the penalty box holding after the window turned; aligned windows and
calendar periods ending at their boundary (PEXPIRETIME); bad values
refused before any call."""

from __future__ import annotations

import asyncio
import datetime
import time
from typing import Any, List, Tuple

import httpx
import pytest
from conftest import HOST, TIMEOUT, Uvicorn, close_async, make_async_client, make_sync_client, server_ms
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.routing import Route

from valkey_ratelimit import AsyncLimiter, ConfigError, Decision, Limiter, Policy, RateLimitMiddleware

DAY = 86_400_000


def boundary(period: str, t: int, offset: int = 0) -> int:
    """The end (ms) of the calendar period that holds ``t``, ``offset`` ms east of UTC."""
    day = (t + offset) // DAY
    if period == "day":
        end = day + 1
    elif period == "week":
        end = day - (day + 3) % 7 + 7
    else:
        d = datetime.date(1970, 1, 1) + datetime.timedelta(days=day)
        nxt = datetime.date(d.year + 1, 1, 1) if period == "year" or d.month == 12 else datetime.date(d.year, d.month + 1, 1)
        end = (nxt - datetime.date(1970, 1, 1)).days
    return end * DAY - offset


async def hello(request: Request) -> PlainTextResponse:
    return PlainTextResponse("hello")


def test_shadow_over_http_passes_ten_and_tells_seven(port: int, sync: Any, expect: str) -> None:
    import valkey.asyncio

    told: List[Tuple[Any, Decision]] = []

    async def on_shadow_refusal(key: Any, decision: Decision) -> None:
        told.append((key, decision))

    limiter = AsyncLimiter(valkey.asyncio.Valkey(host=HOST, port=port), prefix="sh:", timeout=TIMEOUT)
    app = Starlette(routes=[Route("/", hello)])
    app.add_middleware(
        RateLimitMiddleware,
        limiter=limiter,
        limit=3,
        window_ms=60_000,
        key=lambda request: "trial",
        shadow=True,
        on_shadow_refusal=on_shadow_refusal,
    )
    with Uvicorn(app) as base:
        codes = [httpx.get(base + "/").status_code for _ in range(10)]
    assert codes == [200] * 10
    assert len(told) == 7, told
    for key, decision in told:
        assert key == "trial"
        assert decision.admitted and decision.shadow and decision.retry_after_ms > 0, decision
        assert decision.backend == expect
    assert int(sync.get("sh:trial")) == 3, "the state of three enforced calls"
    # Enforced, the same state refuses.
    assert not Limiter(sync, prefix="sh:", timeout=TIMEOUT).admit("trial", limit=3, window_ms=60_000).admitted


@pytest.mark.parametrize("protocol", [2, 3])
def test_shadow_through_the_limiters(port: int, sync: Any, expect: str, protocol: int) -> None:
    """Admitted ten times, shadow from the fourth; RESP3 reads the map's
    ``shadow`` field (sync and asyncio)."""
    client = make_sync_client("valkey", port, protocol)
    limiter = Limiter(client, prefix=f"s{protocol}:", timeout=TIMEOUT)
    seen = [limiter.admit("k", limit=3, window_ms=60_000, shadow=True) for _ in range(10)]
    assert all(d.admitted for d in seen)
    assert [d.shadow and d.retry_after_ms > 0 for d in seen] == [False] * 3 + [True] * 7, seen
    assert int(sync.get(f"s{protocol}:k")) == 3
    # A META hash's shadow 1, and RL.ADMITALL.
    sync.hset("plan:trial", mapping={"max": 1, "duration": 60_000, "shadow": 1})
    assert [limiter.admit("m", meta="plan:trial").shadow for _ in range(3)] == [False, True, True]
    both = limiter.admit_all(["{a}:1", "{a}:2"], [Policy(1, 60_000, shadow=True), Policy(10, 60_000)])
    both = limiter.admit_all(["{a}:1", "{a}:2"], [Policy(1, 60_000, shadow=True), Policy(10, 60_000)])
    assert both.admitted and both.shadow and [d.shadow for d in both.decisions] == [True, False], both
    client.close()

    async def flavour() -> None:
        c = await make_async_client("valkey.asyncio", port, protocol)
        a = AsyncLimiter(c, prefix=f"a{protocol}:", timeout=TIMEOUT)
        got = [await a.admit("k", limit=1, window_ms=60_000, shadow=True) for _ in range(3)]
        assert [d.shadow for d in got] == [False, True, True] and all(d.admitted for d in got)
        await close_async(c)

    asyncio.run(flavour())


def test_a_limit_of_0_in_shadow_mode_passes_and_is_told(port: int, sync: Any) -> None:
    """A limit of 0 refuses everything without a call; in shadow mode it
    is a shadow refusal: the request passes, the hook is told."""
    told: List[Decision] = []
    app = Starlette(routes=[Route("/", hello)])
    app.add_middleware(
        RateLimitMiddleware,
        limiter=Limiter(sync, prefix="z:", timeout=TIMEOUT),
        limit=0,
        window_ms=1000,
        shadow=True,
        on_shadow_refusal=lambda key, decision: told.append(decision),
    )
    with Uvicorn(app) as base:
        assert [httpx.get(base + "/").status_code for _ in range(2)] == [200, 200]
    assert len(told) == 2 and all(d.shadow and d.retry_after_ms == -1 for d in told), told
    assert sync.keys("z:*") == []


def test_penalty_refuses_after_the_window_turned(port: int, sync: Any, expect: str) -> None:
    import valkey.asyncio

    limiter = AsyncLimiter(valkey.asyncio.Valkey(host=HOST, port=port), prefix="pen:", timeout=TIMEOUT)
    app = Starlette(routes=[Route("/", hello)])
    app.add_middleware(
        RateLimitMiddleware, limiter=limiter, limit=1, window_ms=400, key=lambda request: "login", penalty=2000
    )
    plain = Limiter(sync, prefix="pen:", timeout=TIMEOUT)
    with Uvicorn(app) as base:
        assert [httpx.get(base + "/").status_code for _ in range(2)] == [200, 429]
        time.sleep(0.6)
        held = httpx.get(base + "/")
        assert held.status_code == 429, "the window turned, the penalty holds"
        left = plain.ttl("login", limit=1, window_ms=400)
        assert 0 < left <= 1400, left
        assert int(held.headers["retry-after"]) >= 1
        time.sleep(left / 1000 + 0.1)
        assert httpx.get(base + "/").status_code == 200, "admitted at its end"

    # The Limiter: the wait is what is left of the penalty, not extended by refusals in it.
    p = dict(limit=1, window_ms=300, penalty=1500)
    assert plain.admit("k", **p).admitted
    refused = plain.admit("k", **p)
    assert not refused.admitted and 1000 < refused.retry_after_ms <= 1500, refused
    time.sleep(0.5)
    still = plain.admit("k", **p)
    assert not still.admitted and 0 < still.retry_after_ms < refused.retry_after_ms, still
    time.sleep(still.retry_after_ms / 1000 + 0.1)
    assert plain.admit("k", **p).admitted


def test_align_ends_at_a_multiple_of_the_window(sync: Any, expect: str) -> None:
    limiter = Limiter(sync, prefix="al:", timeout=TIMEOUT)
    limiter.admit("fixed", limit=100, window_ms=3_600_000, align=True)
    limiter.admit("sliding", limit=100, window_ms=3_600_000, algorithm="sliding", align=True)
    now = server_ms(sync)
    at = sync.pexpiretime("al:fixed")
    assert at % 3_600_000 == 0 and now < at <= now + 3_600_000, at
    assert sync.exists("al:sliding") == 1


@pytest.mark.parametrize(
    "period, tz, offset",
    [("day", "+05:30", 330 * 60_000), ("week", "-08:00", -480 * 60_000), ("month", None, 0), ("year", None, 0)],
)
def test_calendar_ends_at_the_period_boundary(sync: Any, expect: str, period: str, tz: Any, offset: int) -> None:
    limiter = Limiter(sync, prefix="cal:", timeout=TIMEOUT)
    t1 = server_ms(sync)
    d = limiter.admit(period, limit=10, calendar=period, tz=tz)
    t2 = server_ms(sync)
    assert d.admitted and d.backend == expect
    at = sync.pexpiretime(f"cal:{period}")
    assert at in (boundary(period, t1, offset), boundary(period, t2, offset)), (period, tz, at)
    assert abs(d.reset_after_ms - (at - t2)) <= t2 - t1 + 5, d


def test_calendar_through_the_middleware(port: int, sync: Any, expect: str) -> None:
    import valkey.asyncio

    limiter = AsyncLimiter(valkey.asyncio.Valkey(host=HOST, port=port), prefix="calm:", timeout=TIMEOUT)
    app = Starlette(routes=[Route("/", hello)])
    app.add_middleware(
        RateLimitMiddleware, limiter=limiter, limit=2, key=lambda request: "c", calendar="day", tz="-08:00"
    )
    t1 = server_ms(sync)
    with Uvicorn(app) as base:
        assert [httpx.get(base + "/").status_code for _ in range(3)] == [200, 200, 429]
    t2 = server_ms(sync)
    at = sync.pexpiretime("calm:c")
    assert at in (boundary("day", t1, -480 * 60_000), boundary("day", t2, -480 * 60_000)), at


def test_bad_values_are_refused_before_any_call(sync: Any) -> None:
    sent: List[Any] = []

    class Spy:
        """A valkey client that records what it is asked to send."""

        def __init__(self, inner: Any) -> None:
            self.inner = inner

        def execute_command(self, *words: Any, **kwargs: Any) -> Any:
            sent.append(words)
            return self.inner.execute_command(*words, **kwargs)

    limiter = Limiter(Spy(sync), prefix="bad:", timeout=TIMEOUT)
    cases = [
        (dict(limit=1, window_ms=1000, penalty=-1), "penalty must be an integer from 1"),
        (dict(limit=1, window_ms=1000, shadow="on"), "shadow must be True or False"),
        (dict(limit=1, calendar="fortnight"), "calendar must be one of"),
        (dict(limit=1, calendar="day", tz="Europe//Berlin"), "tz must be a fixed offset from UTC"),
        (dict(limit=1, window_ms=1000, tz="+01:00"), "tz must be left out without calendar"),
        (dict(limit=1, window_ms=1000, calendar="day"), "window_ms must be left out with calendar"),
        (dict(limit=1, window_ms=1000, algorithm="gcra", align=True), "align must be left out with algorithm 'gcra'"),
    ]
    for kwargs, message in cases:
        with pytest.raises(ConfigError, match=message):
            limiter.admit("k", **kwargs)
    assert sent == [], sent
    with pytest.raises(ConfigError, match="on_shadow_refusal must be a function"):
        RateLimitMiddleware(hello, limiter, limit=1, window_ms=1000, on_shadow_refusal="log")
    with pytest.raises(ConfigError, match="calendar must be left out with a rate"):
        RateLimitMiddleware(hello, limiter, rate="5/minute", calendar="day")
    assert sync.exists("bad:k") == 0
