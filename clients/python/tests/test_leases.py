"""The lease helpers against the server the harness started (module or
library only): Limiter/AsyncLimiter's acquire, release, extend and
in_flight, and the context managers ``with limiter.lease(...)`` / ``async
with``, checked against the sorted set the server keeps (member = lease
id, score = deadline in ms)."""

from __future__ import annotations

import asyncio
import random
import re
import threading
import time
from typing import Any

import pytest
from conftest import HOST, TIMEOUT, server_ms

from valkey_ratelimit import ConfigError, Limiter

GENERATED_ID = re.compile(r"^[0-9a-f]+-[0-9a-f]{16}$")


def wait_for(what: str, cond, timeout_s: float = 5.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not cond():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.01)


@pytest.fixture
def limiter(sync: Any, expect: str) -> Limiter:
    lim = Limiter(sync, prefix="lease:", timeout=TIMEOUT)
    assert lim.backend() == expect
    return lim


def test_plain_calls(sync: Any, limiter: Limiter, expect: str, port: int) -> None:
    from valkey_ratelimit import Lease

    key = "lease:plain"
    t0 = server_ms(sync)
    a = limiter.acquire("plain", limit=2, ttl_ms=5000)
    t1 = server_ms(sync)
    assert (a.acquired, a.limit, a.in_flight, a.retry_after_ms, a.backend) == (True, 2, 1, 0, expect), a
    assert GENERATED_ID.match(a.lease_id), a.lease_id
    deadline = int(sync.zscore(key, a.lease_id))
    assert t0 + 5000 <= deadline <= t1 + 5000, (t0, deadline, t1)
    assert sync.pexpiretime(key) == deadline, "the key expires with its latest lease"
    # Renew by ID: no second slot.
    b = limiter.acquire("plain", limit=2, ttl_ms=5000, lease_id="job-7")
    again = limiter.acquire("plain", limit=2, ttl_ms=9000, lease_id="job-7")
    assert b.acquired and again.acquired and again.lease_id == "job-7" and again.in_flight == 2, again
    refused = limiter.acquire("plain", limit=2, ttl_ms=5000)
    assert refused == Lease(False, 2, 2, refused.retry_after_ms, None, expect), refused
    assert 0 < refused.retry_after_ms <= deadline - t0, refused
    assert limiter.in_flight("plain") == 2
    assert limiter.extend("plain", "job-7", 20_000) is True
    assert int(sync.zscore(key, "job-7")) >= t1 + 20_000 - 1000
    assert limiter.release("plain", "job-7") is True
    assert limiter.release("plain", "job-7") is False, "released twice"
    assert limiter.extend("plain", "job-7", 1000) is False, "extend of a released lease"
    assert limiter.release("plain", "nobody") is False
    assert limiter.release("plain", a.lease_id) is True
    assert limiter.in_flight("plain") == 0 and sync.exists(key) == 0, "no lease left: key gone"

    # No limit given (and none in a META hash): acquired with an id, nothing stored.
    u = limiter.acquire("free")
    assert u.acquired and u.limit == 0 and u.in_flight == 0 and u.retry_after_ms == 0, u
    assert GENERATED_ID.match(u.lease_id), u
    with limiter.lease("free", ttl_ms=1000) as held:
        assert held.lease.limit == 0
    assert sync.exists("lease:free") == 0
    # Limit and TTL as data: a META hash.
    sync.hset("lease:meta", mapping={"max": 1, "ttl": 4000})
    m = limiter.acquire("m", meta="lease:meta")
    assert m.acquired and m.limit == 1, m
    assert not limiter.acquire("m", meta="lease:meta").acquired
    assert limiter.release("m", m.lease_id) is True
    # A limit of 0 is an error, as on the server: it never means "no limit".
    with pytest.raises(ConfigError, match=r"^limit must be an integer from 1 to 9007199254740991 \(got 0\)$"):
        limiter.acquire("zero", limit=0, ttl_ms=1000)
    with pytest.raises(ConfigError):
        limiter.lease("zero", limit=0, ttl_ms=1000)

    # RESP3: the module answers a map, the library an array; both read alike.
    import valkey

    c3 = valkey.Valkey(host=HOST, port=port, protocol=3)
    l3 = Limiter(c3, prefix="lease:", timeout=TIMEOUT)
    r3 = l3.acquire("resp3", limit=1, ttl_ms=5000, lease_id="x")
    assert (r3.acquired, r3.limit, r3.in_flight, r3.lease_id) == (True, 1, 1, "x"), r3
    r3 = l3.acquire("resp3", limit=1, ttl_ms=5000)
    assert (r3.acquired, r3.lease_id) == (False, None) and r3.retry_after_ms > 0, r3
    assert l3.release("resp3", "x") is True
    c3.close()


def test_shadow_lease_ceiling(sync: Any, limiter: Limiter, expect: str, port: int) -> None:
    """shadow=True (SHADOW) trials a ceiling: never refused; a would-be
    refusal is acquired with ``shadow`` True, its wait and the id it would
    have had, but takes no lease; releasing it is a no-op, and the context
    manager runs its block without extending or releasing it."""
    from valkey_ratelimit import LeaseRefused

    key = "lease:sh"
    first = limiter.acquire("sh", limit=1, ttl_ms=5000, lease_id="real", shadow=True)
    assert (first.acquired, first.shadow, first.retry_after_ms) == (True, False, 0), first
    would = limiter.acquire("sh", limit=1, ttl_ms=5000, shadow=True)
    assert (would.acquired, would.shadow, would.in_flight) == (True, True, 1), would
    assert would.retry_after_ms > 0 and GENERATED_ID.match(would.lease_id), would
    assert sync.zrange(key, 0, -1) == [b"real"], "a shadow refusal takes no lease"
    assert limiter.release("sh", would.lease_id) is False, "releasing a shadow lease: a no-op"
    with limiter.lease("sh", limit=1, ttl_ms=300, shadow=True) as held:
        assert held.lease.shadow
        time.sleep(0.25)
    assert sync.zrange(key, 0, -1) == [b"real"]
    with pytest.raises(LeaseRefused):
        with limiter.lease("sh", limit=1, ttl_ms=300):
            pass
    sync.hset("lease:shmeta", mapping={"max": 1, "ttl": 5000, "shadow": 1})
    assert limiter.acquire("sh", meta="lease:shmeta").shadow
    with pytest.raises(ConfigError, match="shadow"):
        limiter.acquire("sh", limit=1, ttl_ms=5, shadow="yes")
    # RESP3: the module's map says `shadow 1`; the library's array tells by the wait.
    import valkey

    c3 = valkey.Valkey(host=HOST, port=port, protocol=3)
    l3 = Limiter(c3, prefix="lease:", timeout=TIMEOUT)
    r3 = l3.acquire("sh", limit=1, ttl_ms=5000, shadow=True, lease_id="y")
    assert (r3.acquired, r3.shadow, r3.lease_id) == (True, True, "y"), r3
    c3.close()
    assert limiter.release("sh", "real") is True


def test_context_manager(sync: Any, limiter: Limiter) -> None:
    from valkey_ratelimit import LeaseLost, LeaseRefused

    key = "lease:cm"
    with limiter.lease("cm", limit=2, ttl_ms=5000) as held:
        assert held.id and sync.zscore(key, held.id) is not None, "held while the block runs"
        assert limiter.in_flight("cm") == 1 and not held.lost
    assert sync.exists(key) == 0, "released on exit"
    try:
        with limiter.lease("cm", limit=2, ttl_ms=5000) as held:
            assert sync.zcard(key) == 1
            raise KeyError("the work failed")
    except KeyError:
        pass
    assert sync.exists(key) == 0, "released on an exception"

    # Refusal: the block does not run; retry_after_ms is the holder's deadline.
    limiter.acquire("busy", limit=1, ttl_ms=4000, lease_id="holder")
    deadline = int(sync.zscore("lease:busy", "holder"))
    ran = False
    t0 = server_ms(sync)
    try:
        with limiter.lease("busy", limit=1, ttl_ms=4000):
            ran = True
        raise AssertionError("a full semaphore must refuse")
    except LeaseRefused as e:
        t1 = server_ms(sync)
        assert not ran
        assert deadline - t1 <= e.retry_after_ms <= deadline - t0, (t0, t1, deadline, e.retry_after_ms)
        assert e.lease.in_flight == 1 and e.lease.limit == 1 and e.lease.lease_id is None
    assert sync.zcard("lease:busy") == 1

    # Heartbeat: a 300 ms lease lives through 1 s of work.
    with limiter.lease("hb", limit=1, ttl_ms=300) as held:
        first = int(sync.zscore("lease:hb", held.id))
        time.sleep(1.0)
        assert not held.lost and limiter.in_flight("hb") == 1, "alive past its TTL"
        later = int(sync.zscore("lease:hb", held.id))
        assert later > first + 500, (first, later)
        assert not limiter.acquire("hb", limit=1, ttl_ms=300).acquired, "its slot is still taken"
    assert sync.exists("lease:hb") == 0
    # The control: without the heartbeat the same work outlives its lease,
    # which the release finds out.
    try:
        with limiter.lease("nohb", limit=1, ttl_ms=300, heartbeat=False):
            time.sleep(0.6)
            assert limiter.in_flight("nohb") == 0, "expired without beats"
        raise AssertionError("an expired lease must be reported")
    except LeaseLost:
        pass

    # Loss: someone removes the lease; the next beat says so.
    try:
        with limiter.lease("lost", limit=1, ttl_ms=300) as held:
            sync.zrem("lease:lost", held.id)
            wait_for("the heartbeat to notice", lambda: held.lost)
            try:
                held.check()
                raise AssertionError("check() must raise once lost")
            except LeaseLost:
                pass
        raise AssertionError("leaving a lost lease must raise LeaseLost")
    except LeaseLost as e:
        assert e.lease_id == held.id


def test_crowd_of_threads(limiter: Limiter, port: int, holders: int = 20, rounds: int = 8, limit: int = 3) -> None:
    """``holders`` threads each run ``rounds`` leases of LIMIT ``limit``,
    holding a few ms; a sampler reads RL.INFLIGHT and ZCARD meanwhile."""
    import valkey

    sampler_client = valkey.Valkey(host=HOST, port=port)
    from valkey_ratelimit import LeaseRefused

    inside = 0
    most_inside = 0
    lock = threading.Lock()
    done = threading.Event()
    samples = []
    refusals = [0]

    def holder() -> None:
        nonlocal inside, most_inside
        rng = random.Random()
        for _ in range(rounds):
            while True:
                try:
                    with limiter.lease("crowd", limit=limit, ttl_ms=5000):
                        with lock:
                            inside += 1
                            most_inside = max(most_inside, inside)
                        time.sleep(rng.uniform(0.002, 0.008))
                        with lock:
                            inside -= 1
                    break
                except LeaseRefused as e:
                    # A release frees a slot long before retry_after_ms (the
                    # earliest deadline): poll a little instead.
                    assert 0 < e.retry_after_ms <= 5000
                    with lock:
                        refusals[0] += 1
                    time.sleep(rng.uniform(0.001, 0.004))

    def sample() -> None:
        while not done.is_set():
            samples.append(max(limiter.in_flight("crowd"), sampler_client.zcard("lease:crowd")))

    sampler = threading.Thread(target=sample)
    sampler.start()
    threads = [threading.Thread(target=holder) for _ in range(holders)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
        assert not t.is_alive(), "a holder hung"
    done.set()
    sampler.join()
    assert max(samples) <= limit, f"sampled in-flight {max(samples)} > {limit}"
    assert most_inside == limit, f"at most {most_inside} ran at once; the crowd should fill all {limit}"
    assert refusals[0] > 0
    assert sampler_client.exists("lease:crowd") == 0, "every lease released"


def test_async_leases(sync: Any, port: int, expect: str) -> None:
    asyncio.run(async_checks(port, expect))


async def async_checks(port: int, expect: str) -> None:
    import valkey.asyncio

    from valkey_ratelimit import AsyncLimiter, LeaseLost, LeaseRefused

    c = valkey.asyncio.Valkey(host=HOST, port=port)
    limiter = AsyncLimiter(c, prefix="alease:", timeout=TIMEOUT)
    assert await limiter.backend() == expect
    async with limiter.lease("cm", limit=1, ttl_ms=5000) as held:
        assert await c.zscore("alease:cm", held.id) is not None
    assert await c.exists("alease:cm") == 0
    try:
        async with limiter.lease("cm", limit=1, ttl_ms=5000):
            raise KeyError("the work failed")
    except KeyError:
        pass
    assert await c.exists("alease:cm") == 0
    a = await limiter.acquire("busy", limit=1, ttl_ms=3000)
    try:
        async with limiter.lease("busy", limit=1, ttl_ms=3000):
            raise AssertionError("must be refused")
    except LeaseRefused as e:
        assert 0 < e.retry_after_ms <= 3000
    assert await limiter.in_flight("busy") == 1
    assert await limiter.extend("busy", a.lease_id, 3000) is True
    assert await limiter.release("busy", a.lease_id) is True
    assert await limiter.release("busy", a.lease_id) is False

    async with limiter.lease("hb", limit=1, ttl_ms=300) as held:
        await asyncio.sleep(1.0)
        assert not held.lost and await limiter.in_flight("hb") == 1
    assert await c.exists("alease:hb") == 0
    # Loss cancels the block at its next await.
    finished = False
    started = time.monotonic()
    try:
        async with limiter.lease("lost", limit=1, ttl_ms=300) as held:
            await c.zrem("alease:lost", held.id)
            await asyncio.sleep(5)
            finished = True
        raise AssertionError("must raise LeaseLost")
    except LeaseLost:
        pass
    took = time.monotonic() - started
    assert not finished and took < 2, (finished, took)
    task = asyncio.current_task()
    if hasattr(task, "cancelling"):
        assert task.cancelling() == 0, "our own cancel was undone"
    await asyncio.sleep(0)  # no stray cancellation left for the caller

    inside = 0
    most = 0
    samples = []
    stop = asyncio.Event()

    async def holder() -> None:
        nonlocal inside, most
        for _ in range(8):
            while True:
                try:
                    async with limiter.lease("crowd", limit=3, ttl_ms=5000):
                        inside += 1
                        most = max(most, inside)
                        await asyncio.sleep(random.uniform(0.002, 0.008))
                        inside -= 1
                    break
                except LeaseRefused:
                    await asyncio.sleep(random.uniform(0.001, 0.004))

    async def sampler() -> None:
        while not stop.is_set():
            samples.append(await limiter.in_flight("crowd"))

    s = asyncio.ensure_future(sampler())
    await asyncio.gather(*(holder() for _ in range(20)))
    stop.set()
    await s
    assert max(samples) <= 3 and most == 3, (max(samples), most)
    assert await c.exists("alease:crowd") == 0
    await c.aclose()


# -- waiting (issue 28) -----------------------------------------------------------
# wait_ms: acquire BLOCKs on the module, answered at the release; on the
# library it sleeps retry_after_ms with jitter, answered at the next try.
# wait on a fixed window (which cannot book a later window's slot, issue
# 38) sleeps and retries on both.


def test_acquire_and_wait_with_wait_ms(sync: Any, expect: str, port: int) -> None:
    import valkey

    own = valkey.Valkey(host=HOST, port=port)  # the waiter's own connection
    try:
        waiter = Limiter(own, prefix="lease:", timeout=TIMEOUT)
        holder = Limiter(sync, prefix="lease:", timeout=TIMEOUT)
        # t0 before the holder's lease: its 1500 ms end comes no sooner than
        # t0 + 1500, so a slot within 1400 ms came from the release (at 200
        # ms; 1.2 s to spare on a busy machine), and the library's retry,
        # which waits for that end, comes no sooner than 1400.
        t0 = time.monotonic()
        held = holder.acquire("wait", limit=1, ttl_ms=1500)
        assert held.acquired
        released = threading.Timer(0.2, lambda: holder.release("wait", held.lease_id))
        released.start()
        got = waiter.acquire("wait", limit=1, ttl_ms=5000, wait_ms=3000)
        took = (time.monotonic() - t0) * 1000
        released.join()
        assert got.acquired, got
        if expect == "module":
            assert took < 1400, f"BLOCK answered {took:.0f} ms after the start"
        else:
            assert took >= 1400, f"the library's retry came {took:.0f} ms after the start"
        with pytest.raises(ConfigError):
            waiter.acquire("wait", limit=1, ttl_ms=100, wait_ms=0)
        assert holder.admit("rate", limit=1, window_ms=600).admitted
        t1 = time.monotonic()
        admitted = waiter.wait("rate", limit=1, window_ms=600, wait_ms=2000)
        waited = (time.monotonic() - t1) * 1000
        # Upper bounds generous: only "admitted (not timed out)" and "gave
        # up at its wait_ms, not at the 60 s window" are what they check.
        assert admitted.admitted and 200 <= waited < 5000, (admitted, waited)
        t2 = time.monotonic()
        refused = waiter.wait("rate", limit=1, window_ms=60_000, wait_ms=150)
        gave_up = (time.monotonic() - t2) * 1000
        assert not refused.admitted and 100 <= gave_up < 5000, (refused, gave_up)
    finally:
        own.close()


def test_async_wait_with_wait_ms(expect: str, port: int) -> None:
    import valkey.asyncio

    from valkey_ratelimit import AsyncLimiter

    async def main() -> None:
        own = valkey.asyncio.Valkey(host=HOST, port=port)
        other = valkey.asyncio.Valkey(host=HOST, port=port)
        try:
            await other.flushall()
            waiter = AsyncLimiter(own, prefix="lease:", timeout=TIMEOUT)
            holder = AsyncLimiter(other, prefix="lease:", timeout=TIMEOUT)
            t0 = time.monotonic()  # before the lease: see the sync test
            held = await holder.acquire("await", limit=1, ttl_ms=1500)
            pending = asyncio.ensure_future(waiter.acquire("await", limit=1, ttl_ms=5000, wait_ms=3000))
            await asyncio.sleep(0.2)
            assert await holder.release("await", held.lease_id)
            got = await pending
            took = (time.monotonic() - t0) * 1000
            assert got.acquired, got
            assert took < 1400 if expect == "module" else took >= 1400, took
            assert (await holder.admit("arate", limit=1, window_ms=600)).admitted
            admitted = await waiter.wait("arate", limit=1, window_ms=600, wait_ms=2000)
            assert admitted.admitted, admitted
        finally:
            await own.aclose()
            await other.aclose()

    asyncio.run(main())
