"""wait_replicas (issue 30): a primary and its replica the harness started,
the replica's link cut by stopping it (SIGSTOP). A grant the replica does
not confirm within wait_timeout_ms is given back and refused
(unconfirmed="refuse", the default) or kept ("keep"); over HTTP the
refusal is a 503, not a 429. Then a failover: the link is cut (the
replica's connection killed while it is stopped), the primary dies, the
replica is promoted, and a lease kept without confirmation has a second
holder there, while the one refused has none."""

from __future__ import annotations

import os
import signal
import time
from typing import Any, Iterator

import httpx
import pytest
from conftest import HOST, TIMEOUT, Uvicorn, env

from valkey_ratelimit import Limiter, RateLimitMiddleware, ReplicationUnconfirmed

WAIT_MS = 100


@pytest.fixture(scope="module")
def replica_port() -> int:
    return int(env("VALKEY_REPLICA_PORT"))


def pid_of(c: Any) -> int:
    return int(c.info("server")["process_id"])


def caught_up(primary: Any, replica: Any) -> None:
    deadline = time.monotonic() + 10
    while True:
        want = primary.info("replication")["master_repl_offset"]
        got = replica.info("replication").get("slave_repl_offset")
        if got == want:
            return
        assert time.monotonic() < deadline, (want, got)
        time.sleep(0.02)


@pytest.fixture
def pair(port: int, replica_port: int) -> Iterator[Any]:
    import valkey

    primary = valkey.Valkey(host=HOST, port=port)
    replica = valkey.Valkey(host=HOST, port=replica_port)
    assert replica.info("replication")["role"] == "slave"
    yield primary, replica, pid_of(replica)


def limiter(port: int, unconfirmed: str) -> Limiter:
    import valkey

    return Limiter(
        valkey.Valkey(host=HOST, port=port),
        prefix=f"d-{unconfirmed}:",
        timeout=TIMEOUT,
        wait_replicas=1,
        wait_timeout_ms=WAIT_MS,
        unconfirmed=unconfirmed,
    )


def test_an_unconfirmed_grant_is_refused_or_kept(pair: Any, port: int, expect: str) -> None:
    primary, replica, replica_pid = pair
    refuse, keep = limiter(port, "refuse"), limiter(port, "keep")
    for lim in (refuse, keep):
        d = lim.admit("k", limit=5, window_ms=60_000)
        assert d.admitted and d.error is None and d.backend == expect, d
        assert lim.acquire("lease", limit=5, ttl_ms=60_000).acquired
    caught_up(primary, replica)
    os.kill(replica_pid, signal.SIGSTOP)
    try:
        started = time.monotonic()
        d = refuse.admit("k", limit=5, window_ms=60_000)
        took = time.monotonic() - started
        assert not d.admitted and isinstance(d.error, ReplicationUnconfirmed), d
        assert took >= WAIT_MS / 1000, "WAIT waited"
        assert int(primary.get("d-refuse:k")) == 1, "the grant was given back"
        assert d.headers() == {"Retry-After": "1"} and d.problem()["status"] == 503
        lease = refuse.acquire("lease", limit=5, ttl_ms=60_000)
        assert not lease.acquired and lease.lease_id is None and isinstance(lease.error, ReplicationUnconfirmed)
        assert primary.zcard("d-refuse:lease") == 1, "the lease was released"

        d = keep.admit("k", limit=5, window_ms=60_000)
        assert d.admitted and d.error is None and int(primary.get("d-keep:k")) == 2
        assert keep.acquire("lease", limit=5, ttl_ms=60_000).acquired and primary.zcard("d-keep:lease") == 2

        # Over HTTP: 503 with Retry-After, the store's problem, not the client's.
        from starlette.applications import Starlette
        from starlette.responses import PlainTextResponse
        from starlette.routing import Route

        import valkey.asyncio

        from valkey_ratelimit import AsyncLimiter

        alimiter = AsyncLimiter(
            valkey.asyncio.Valkey(host=HOST, port=port), prefix="d-http:", timeout=TIMEOUT, wait_replicas=1, wait_timeout_ms=WAIT_MS
        )
        app = RateLimitMiddleware(Starlette(routes=[Route("/", lambda r: PlainTextResponse("ok"))]), alimiter, limit=5, window_ms=60_000)
        with Uvicorn(app) as base, httpx.Client(base_url=base) as http:
            res = http.get("/")
        assert res.status_code == 503 and res.headers["retry-after"] == "1", (res.status_code, res.headers)
        assert res.json()["status"] == 503
        assert primary.get("d-http:127.0.0.1") in (None, b"0")
    finally:
        os.kill(replica_pid, signal.SIGCONT)
    caught_up(primary, replica)
    assert refuse.admit("k", limit=5, window_ms=60_000).admitted, "confirmed again once the replica is back"


def test_after_a_failover_only_the_kept_lease_has_a_second_holder(pair: Any, port: int) -> None:
    """Runs last: it kills the primary."""
    primary, replica, replica_pid = pair
    refuse, keep = limiter(port, "refuse"), limiter(port, "keep")
    caught_up(primary, replica)
    os.kill(replica_pid, signal.SIGSTOP)
    # The link cut: what the primary writes from now on never leaves it
    # (a stopped replica alone would still find it in its socket buffer).
    primary.execute_command("CLIENT", "KILL", "TYPE", "replica")
    try:
        a = refuse.acquire("gpu", limit=1, ttl_ms=60_000, lease_id="holder-a")
        b = keep.acquire("gpu", limit=1, ttl_ms=60_000, lease_id="holder-b")
        assert not a.acquired and isinstance(a.error, ReplicationUnconfirmed)
        assert b.acquired and b.lease_id == "holder-b"
        os.kill(pid_of(primary), signal.SIGKILL)
    finally:
        os.kill(replica_pid, signal.SIGCONT)
    replica.execute_command("REPLICAOF", "NO", "ONE")
    assert replica.info("replication")["role"] == "master"
    # On the promoted replica nobody holds either semaphore: the kept lease
    # did not survive, so a newcomer takes its one slot while holder-b
    # still believes it holds it; holder-a was told no, so its newcomer is
    # the only holder.
    promoted = Limiter(replica, prefix="d-", timeout=TIMEOUT)
    assert promoted.in_flight("refuse:gpu") == 0 and promoted.in_flight("keep:gpu") == 0
    assert promoted.acquire("keep:gpu", limit=1, ttl_ms=60_000, lease_id="newcomer").acquired, "a second holder (keep)"
    assert promoted.acquire("refuse:gpu", limit=1, ttl_ms=60_000, lease_id="newcomer").acquired, "the only holder (refuse)"
