"""Fair waiting (issue 38) against the server the harness started: ``wait``
books the caller's turn in one call (RL.ADMIT ... RESERVE), sleeps, and
goes ahead no sooner than ``at_ms`` by the server's clock; a turn beyond
``wait_ms`` is refused at once; a cancelled asyncio waiter gives its slot
back once (RL.REFUND ... AT), so the next waiter takes it."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
from conftest import HOST, TIMEOUT

from valkey_ratelimit import AsyncLimiter, Limiter

GCRA = dict(algorithm="gcra", burst=1)


def calls(c: Any, expect: str, command: str = "RL.ADMIT") -> int:
    """The calls the server counted of ``command``, or of every FCALL."""
    name = f"cmdstat_{command}" if expect == "module" else "cmdstat_fcall"
    stats = c.info("commandstats")
    return int(stats[name]["calls"]) if name in stats else 0


def time_us(c: Any) -> int:
    s, us = c.time()
    return int(s) * 1_000_000 + int(us)


def test_one_call_per_wait_and_no_go_ahead_before_at_ms(sync: Any, expect: str) -> None:
    limiter = Limiter(sync, timeout=TIMEOUT)
    assert limiter.backend() == expect
    policy = dict(GCRA, limit=10, window_ms=1000)
    sync.config_resetstat()
    first = limiter.wait("r:book", wait_ms=5000, **policy)
    assert first.admitted and first.delay_ms == 0, first
    second = limiter.wait("r:book", wait_ms=5000, **policy)
    woke = time_us(sync)
    # at_ms rounds up, the call's own ms down: 101 at most.
    assert second.admitted and 50 < second.delay_ms <= 101, second
    assert woke >= second.at_ms * 1000, (woke, second.at_ms)
    t = time.monotonic()
    refused = limiter.wait("r:book", wait_ms=20, **policy)
    took = time.monotonic() - t
    assert not refused.admitted and refused.retry_after_ms > 20, refused
    assert (refused.delay_ms, refused.at_ms) == (-1, -1)
    assert took < 1.0, f"refused after {took:.3f} s: at once, not at wait_ms"
    assert calls(sync, expect) == 3, "one call per wait"


def test_a_window_still_waits_by_retrying(sync: Any, expect: str) -> None:
    # fixed (the default) cannot book a later window's slot: sleep and retry.
    limiter = Limiter(sync, timeout=TIMEOUT)
    assert limiter.admit("r:fixed", limit=1, window_ms=300).admitted
    d = limiter.wait("r:fixed", limit=1, window_ms=300, wait_ms=2000)
    assert d.admitted and d.delay_ms is None, d


def test_a_cancelled_async_waiter_gives_its_slot_back_once(sync: Any, expect: str, port: int) -> None:
    import valkey.asyncio

    policy = dict(GCRA, limit=1, window_ms=1000)

    async def main() -> None:
        c = valkey.asyncio.Valkey(host=HOST, port=port)
        try:
            limiter = AsyncLimiter(c, timeout=TIMEOUT)
            assert await limiter.backend() == expect
            t0 = time_us(sync)
            assert (await limiter.admit("r:cancel", **policy)).admitted
            t1 = time_us(sync)
            sync.config_resetstat()
            waiter = asyncio.ensure_future(limiter.wait("r:cancel", wait_ms=5000, **policy))
            await asyncio.sleep(0.1)
            waiter.cancel()
            with pytest.raises(asyncio.CancelledError):
                await waiter
            nxt = await limiter.wait("r:cancel", wait_ms=5000, **policy)
            # The admission's slot ran to t + 1000; the cancelled booking
            # would have pushed the next one to t + 2000.
            assert t0 // 1000 + 1000 <= nxt.at_ms <= -(-t1 // 1000) + 1001, (t0, t1, nxt)
            refunds = calls(sync, expect, "RL.REFUND") if expect == "module" else calls(sync, expect) - 2
            assert refunds == 1, "one RL.REFUND ... AT"
        finally:
            await c.aclose()

    asyncio.run(main())
