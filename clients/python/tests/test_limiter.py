"""Limiter and AsyncLimiter against the server the harness started (module
or library only), through every client library they take: valkey-py sync
and asyncio, redis-py sync and asyncio, valkey-glide (glide_sync, glide).
Each decision is checked against the state the server holds."""

from __future__ import annotations

import asyncio
import inspect
import pathlib
import subprocess
import sys
import time
from typing import Any

import pytest
from conftest import (
    ASYNC_CLIENTS,
    HOST,
    SYNC_CLIENTS,
    TIMEOUT,
    close_async,
    make_async_client,
    make_sync_client,
    server_ms,
)

from valkey_ratelimit import AsyncLimiter, Decision, Limiter, Policy


async def v(value: Any) -> Any:
    """One scenario for both flavours: a sync limiter's answer, or an
    async one's, awaited."""
    return await value if inspect.isawaitable(value) else value


async def scenario(limiter: Any, sync: Any, expect: str, p: str) -> None:
    """admit, ttl, refund, reset, admit_all, META and a peek, each against
    the keys the server holds (prefix ``p``)."""
    assert await v(limiter.backend()) == expect
    t0 = server_ms(sync)
    d = await v(limiter.admit("k", limit=2, window_ms=5000))
    t1 = server_ms(sync)
    assert (d.admitted, d.limit, d.remaining, d.retry_after_ms, d.backend) == (True, 2, 1, 0, expect), d
    expire_at = sync.pexpiretime(f"{p}k")
    assert expire_at - t1 <= d.reset_after_ms <= expire_at - t0 + 1, (d, expire_at, t0, t1)
    assert int(sync.get(f"{p}k")) == 1
    await v(limiter.admit("k", limit=2, window_ms=5000))
    d = await v(limiter.admit("k", limit=2, window_ms=5000))
    assert not d.admitted and sync.pttl(f"{p}k") <= d.retry_after_ms <= 5000 and int(sync.get(f"{p}k")) == 2, d
    assert 0 < await v(limiter.ttl("k", limit=2, window_ms=5000)) <= d.retry_after_ms
    assert (await v(limiter.refund("k", limit=2, window_ms=5000))).remaining == 1
    assert (await v(limiter.admit("k", limit=2, window_ms=5000, cost=0))).remaining == 1, "a peek changes nothing"
    assert int(sync.get(f"{p}k")) == 1
    assert await v(limiter.reset("k")) is True and await v(limiter.reset("k")) is False
    assert sync.exists(f"{p}k") == 0

    # Several limiters at once: all admitted, or none consumed.
    keys, policies = ["{u}:sec", "{u}:min"], [Policy(1, 10_000), Policy(5, 60_000)]
    both = await v(limiter.admit_all(keys, policies))
    assert both.admitted and [d.remaining for d in both.decisions] == [0, 4], both
    refused = await v(limiter.admit_all(keys, policies))
    assert not refused.admitted and refused.refused_by == 0 and refused.retry_after_ms > 0, refused
    assert int(sync.get(f"{p}{{u}}:min")) == 1, "the limiter that would have admitted was not consumed"
    assert refused.problem()["violated-policies"] == ["1-in-10sec"]

    # META: the cap is data; HSET changes it at the next request.
    sync.hset(f"{p}meta", mapping={"max": 1, "duration": 10_000})
    meta = f"{p}meta"
    assert (await v(limiter.admit("m", meta=meta))).admitted
    assert not (await v(limiter.admit("m", meta=meta))).admitted
    sync.hset(meta, "max", 3)
    d = await v(limiter.admit("m", meta=meta))
    assert d.admitted and d.limit == 3 and d.remaining == 1, d

    # A limit of 0 admits nothing, and asks nothing of Valkey.
    d = await v(limiter.admit("zero", limit=0, window_ms=1000))
    assert d == Decision(False, 0, 0, -1, 0, 1000) and sync.exists(f"{p}zero") == 0
    assert await v(limiter.ttl("zero", limit=0, window_ms=1000)) == -1

    # Bytes keys take the prefix too.
    d = await v(limiter.admit(b"\xffbin", limit=1, window_ms=5000))
    assert d.admitted and sync.get(p.encode() + b"\xffbin") == b"1"

    # A cost that can never pass: refused, retry -1, no Retry-After.
    d = await v(limiter.admit("big", limit=2, window_ms=5000, cost=3))
    assert not d.admitted and d.retry_after_ms == -1 and "Retry-After" not in d.headers()

    # Any other server error is raised, never failed open.
    sync.set(f"{p}wrong", "not a counter")
    with pytest.raises(Exception) as e:
        await v(limiter.admit("wrong", limit=2, window_ms=5000))
    assert "integer counter" in str(e.value)


@pytest.mark.parametrize("kind", SYNC_CLIENTS)
def test_limiter_on_every_sync_client(kind: str, port: int, expect: str, sync: Any) -> None:
    client = make_sync_client(kind, port)
    try:
        asyncio.run(scenario(Limiter(client, prefix=f"{kind}:", timeout=TIMEOUT), sync, expect, f"{kind}:"))
    finally:
        client.close()


@pytest.mark.parametrize("kind", ASYNC_CLIENTS)
def test_async_limiter_on_every_asyncio_client(kind: str, port: int, expect: str, sync: Any) -> None:
    async def main() -> None:
        client = await make_async_client(kind, port)
        try:
            await scenario(AsyncLimiter(client, prefix=f"{kind}:", timeout=TIMEOUT), sync, expect, f"{kind}:")
        finally:
            await close_async(client)

    asyncio.run(main())


def test_the_limiters_work_without_starlette(port: int, expect: str, sync: Any) -> None:
    """The whole scenario, sync and asyncio, in an interpreter where the
    asgi extra (Starlette) cannot be imported: the core needs none of it."""
    code = f"""
import sys
sys.modules["starlette"] = None
sys.path.insert(0, {str(pathlib.Path(__file__).parent)!r})
import asyncio, valkey, valkey.asyncio
from test_limiter import scenario
from valkey_ratelimit import AsyncLimiter, Limiter

sync = valkey.Valkey(host={HOST!r}, port={port})
asyncio.run(scenario(Limiter(valkey.Valkey(host={HOST!r}, port={port}), prefix="bare:", timeout={TIMEOUT}), sync, {expect!r}, "bare:"))

async def main():
    client = valkey.asyncio.Valkey(host={HOST!r}, port={port})
    await scenario(AsyncLimiter(client, prefix="abare:", timeout={TIMEOUT}), sync, {expect!r}, "abare:")
    await client.aclose()

asyncio.run(main())
print(sorted(m for m in sys.modules if m.startswith("starlette") and sys.modules[m] is not None))
"""
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout == "[]\n", result.stdout


def test_resp3_replies_read_the_same(port: int, expect: str, sync: Any) -> None:
    import valkey

    c3 = valkey.Valkey(host=HOST, port=port, protocol=3)
    limiter = Limiter(c3, prefix="r3:", timeout=TIMEOUT)
    d = limiter.admit("k", limit=1, window_ms=5000)
    assert (d.admitted, d.limit, d.remaining, d.backend) == (True, 1, 0, expect)
    assert not limiter.admit("k", limit=1, window_ms=5000).admitted
    both = limiter.admit_all(["{a}1", "{a}2"], [Policy(1, 5000), Policy(2, 5000)])
    assert both.admitted and [d.remaining for d in both.decisions] == [0, 1]
    c3.close()


ALGORITHM_CASES = [
    ("fixed", None),
    ("sliding", None),
    ("token", 5),
    ("token", 2),
    ("gcra", 5),
    ("gcra", 2),
    ("leaky", 5),
    ("leaky", 2),
]


@pytest.mark.parametrize("algorithm, burst", ALGORITHM_CASES)
def test_r_is_what_the_next_requests_get(algorithm: str, burst: Any, sync: Any) -> None:
    """Item 6 of issue 25: after each admission, ``r`` is the number of
    requests of cost 1 admitted next, back to back (at 3 per hour nothing
    refills meanwhile), and never 0 while one would pass."""
    limiter = Limiter(sync, prefix="r:", timeout=TIMEOUT)
    answers = []
    for _ in range(12):
        answers.append(limiter.admit("k", limit=3, window_ms=3_600_000, algorithm=algorithm, burst=burst))
        if not answers[-1].admitted:
            break
    admitted = [d for d in answers if d.admitted]
    assert admitted and not answers[-1].admitted, answers
    for i, d in enumerate(admitted):
        assert d.remaining == len(admitted) - 1 - i, (algorithm, burst, i, answers)
        fields = d.headers()
        assert f";r={d.remaining};" in fields["RateLimit"], fields
    assert answers[-1].remaining == 0


@pytest.mark.parametrize("algorithm, burst", ALGORITHM_CASES)
def test_t_is_when_the_quota_is_whole_again(algorithm: str, burst: Any, sync: Any) -> None:
    """After ``reset_after_ms`` (``t`` is it in whole seconds, rounded up)
    the limiter is whole: a peek finds the whole quota, and ``t`` is never
    a second later than that."""
    limiter = Limiter(sync, prefix="t:", timeout=TIMEOUT)
    last = None
    for _ in range(2):
        last = limiter.admit("k", limit=4, window_ms=1200, algorithm=algorithm, burst=burst)
    assert last is not None and last.admitted
    t = int(last.headers()["RateLimit"].rsplit("t=", 1)[1])
    assert 0 <= t * 1000 - last.reset_after_ms < 1000, (t, last)
    start = server_ms(sync)
    time.sleep(last.reset_after_ms / 1000)
    while server_ms(sync) < start + last.reset_after_ms:
        time.sleep(0.005)
    peek = limiter.admit("k", limit=4, window_ms=1200, algorithm=algorithm, burst=burst, cost=0)
    assert peek.remaining == peek.limit, (algorithm, burst, last, peek)
