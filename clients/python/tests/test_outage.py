"""Outages, through real HTTP: Valkey stopped, black-holed (a listener
that accepts connections and never answers), frozen (SIGSTOP: the kernel
still accepts, the server answers nothing) and each time brought back,
under one app that is never restarted. Every request, in every phase,
answers within the default deadline (250 ms) plus 100 ms (plus however
late a busy machine ran this process, measured: `Lateness`), sync and
asyncio; fail-open admits, fail-closed answers 503 with Retry-After; each
limiter logs each outage and each recovery once; a server restarted
without its library gets it back from the bundled copy.

These tests start and stop their own servers: the harness passes the
binary ($RL_VALKEY_SERVER) and the module ($RL_MODULE)."""

from __future__ import annotations

import json
import logging
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
from typing import Any, Dict, Iterator, List, Optional

import httpx
import pytest
from conftest import Uvicorn, env
from fastapi import Depends, FastAPI, Request
from starlette.applications import Starlette
from starlette.responses import PlainTextResponse
from starlette.routing import Route

from valkey_ratelimit import AsyncLimiter, Limiter, RateLimitExceeded, RateLimitMiddleware, rate_limit_exceeded_handler

DEADLINE_S = 0.25  # the limiters' default
BOUND_S = DEADLINE_S + 0.1


class Lateness:
    """How late this process ran, as the Node tests' event-loop delay: a
    thread sleeping 10 ms at a time records its worst oversleep. A machine
    busy with other work delays a request by about that much and no more,
    so the bound is the deadline plus 100 ms plus what was measured; a
    limiter that waited past its deadline (on a socket, or holding an event
    loop) is still caught, as this thread keeps running meanwhile."""

    def __init__(self) -> None:
        self.worst = 0.0
        self.lock = threading.Lock()
        threading.Thread(target=self._run, daemon=True).start()

    def _run(self) -> None:
        while True:
            before = time.monotonic()
            time.sleep(0.01)
            late = time.monotonic() - before - 0.01
            with self.lock:
                self.worst = max(self.worst, late)

    def take(self) -> float:
        """The worst lateness since the last take, in s."""
        with self.lock:
            worst, self.worst = self.worst, 0.0
        return worst


LATENESS = Lateness()


def within_bound(started: float, what: str) -> float:
    """The time since `started`, asserted within the deadline plus 100 ms
    plus how late the process ran meanwhile."""
    took = time.monotonic() - started
    late = LATENESS.take()
    assert took <= BOUND_S + late, f"{what} took {took * 1000:.0f} ms > {BOUND_S * 1000:.0f} ms + {late * 1000:.0f} ms late"
    return took


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ValkeyProcess:
    """A valkey-server of our own on a fixed port: the module loaded, or
    modules refused and nothing loaded (the limiter loads the library)."""

    def __init__(self, backend: str) -> None:
        self.binary = env("RL_VALKEY_SERVER")
        self.module = env("RL_MODULE") if backend == "module" else None
        self.port = free_port()
        self.dir = tempfile.mkdtemp(prefix="rl-outage-")
        self.proc: Optional[subprocess.Popen] = None

    def start(self) -> None:
        args = [self.binary, "--port", str(self.port), "--bind", "127.0.0.1", "--dir", self.dir]
        args += ["--save", "", "--appendonly", "no"]
        args += ["--loadmodule", self.module] if self.module else ["--enable-module-command", "no"]
        log = open(os.path.join(self.dir, "server.log"), "ab")
        self.proc = subprocess.Popen(args, stdout=log, stderr=log, stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + 10
        while True:
            assert self.proc.poll() is None, open(os.path.join(self.dir, "server.log")).read()
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5) as s:
                    s.sendall(b"PING\r\n")
                    if s.recv(16).startswith(b"+PONG"):
                        return
            except OSError:
                pass
            assert time.monotonic() < deadline, "valkey-server did not start"
            time.sleep(0.02)

    def stop(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGCONT)
        self.proc.terminate()
        self.proc.wait(10)

    def freeze(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGSTOP)

    def thaw(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGCONT)

    def close(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)
        shutil.rmtree(self.dir, ignore_errors=True)


class BlackHole:
    """Accepts every connection on the port and never answers."""

    def __init__(self, port: int) -> None:
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", port))
        self.sock.listen(128)
        self.accepted: List[socket.socket] = []
        self.thread = threading.Thread(target=self._accept, daemon=True)
        self.thread.start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.accepted.append(conn)

    def close(self) -> None:
        self.sock.close()
        for conn in self.accepted:
            conn.close()


# The routes: each its own limiter, sync or asyncio, failing open or closed.
ROUTES = {
    "/a-open": "open",
    "/a-closed": "closed",
    "/s-open": "open",
    "/s-closed": "closed",
    "/mw-open/": "open",
}
CLOSED_STATUS = {"/a-closed": 503, "/s-closed": 500}


def make_app(port: int) -> FastAPI:
    import valkey
    import valkey.asyncio

    def alimiter(failure: str) -> AsyncLimiter:
        return AsyncLimiter(valkey.asyncio.Valkey(host="127.0.0.1", port=port), failure=failure)

    def slimiter(failure: str) -> Limiter:
        return Limiter(valkey.Valkey(host="127.0.0.1", port=port), failure=failure)

    app = FastAPI()
    app.add_exception_handler(RateLimitExceeded, rate_limit_exceeded_handler)

    @app.get("/a-open", dependencies=[Depends(alimiter("open").limit("1000/minute"))])
    async def a_open() -> Dict[str, bool]:
        return {"ok": True}

    @app.get("/a-closed", dependencies=[Depends(alimiter("closed").limit("1000/minute"))])
    async def a_closed() -> Dict[str, bool]:
        return {"ok": True}

    @app.get("/s-open")
    @slimiter("open").limit("1000/minute")
    def s_open(request: Request) -> Dict[str, bool]:
        return {"ok": True}

    @app.get("/s-closed")
    @slimiter("closed").limit("1000/minute", closed_status=500)
    def s_closed(request: Request) -> Dict[str, bool]:
        return {"ok": True}

    inner = Starlette(routes=[Route("/{p:path}", lambda request: PlainTextResponse("mw"))])
    app.mount("/mw-open", RateLimitMiddleware(inner, alimiter("open"), limit=1000, window_ms=60_000))
    return app


@pytest.fixture(params=["module", "functions"])
def server(request: Any) -> Iterator[ValkeyProcess]:
    s = ValkeyProcess(request.param)
    s.start()
    yield s
    s.close()


SLOWEST: Dict[str, float] = {}
PHASE = ["up"]


def round_of_requests(http: httpx.Client) -> Dict[str, httpx.Response]:
    """One request to every route, each answered within the bound."""
    out = {}
    for path in ROUTES:
        LATENESS.take()
        started = time.monotonic()
        res = http.get(path)
        took = within_bound(started, f"{path} ({PHASE[0]})")
        SLOWEST[path] = max(SLOWEST.get(path, 0.0), took)
        out[path] = res
    return out


def assert_served(answers: Dict[str, httpx.Response]) -> None:
    for path, res in answers.items():
        assert res.status_code == 200, (path, res.status_code, res.text)
        assert res.headers["ratelimit-policy"] == '"1000-in-60sec";q=1000;w=60', (path, res.headers)


def assert_outage(answers: Dict[str, httpx.Response]) -> None:
    for path, res in answers.items():
        if ROUTES[path] == "open":
            assert res.status_code == 200 and "ratelimit" not in res.headers, (path, res.status_code, res.headers)
            continue
        status = CLOSED_STATUS[path]
        assert res.status_code == status and res.headers["retry-after"] == "1", (path, res.status_code, res.headers)
        assert res.headers["content-type"] == "application/problem+json"
        body = json.loads(res.content)
        assert body["status"] == status and body["title"] == "The rate limiter cannot reach its store", body


def recovered(http: httpx.Client) -> Dict[str, httpx.Response]:
    """Rounds until every route is served again (the first request after
    a restart may still meet a dead pooled connection); within 5 s."""
    deadline = time.monotonic() + 5
    while True:
        answers = round_of_requests(http)
        if all(r.status_code == 200 and "ratelimit-policy" in r.headers for r in answers.values()):
            return answers
        assert time.monotonic() < deadline, {p: (r.status_code, dict(r.headers)) for p, r in answers.items()}
        time.sleep(0.05)


def count(caplog: Any, text: str) -> int:
    return sum(1 for r in caplog.records if r.name == "valkey_ratelimit" and text in r.getMessage())


def test_outages_are_bounded_reported_once_and_recovered(server: ValkeyProcess, caplog: Any) -> None:
    import valkey

    caplog.set_level(logging.INFO, logger="valkey_ratelimit")
    limiters = len(ROUTES)
    with Uvicorn(make_app(server.port)) as base, httpx.Client(base_url=base, timeout=10) as http:
        assert_served(recovered(http))
        outages = [
            ("stopped", lambda: server.stop(), lambda: server.start()),
            ("black hole", None, None),
            ("frozen", lambda: server.freeze(), lambda: server.thaw()),
        ]
        for n, (what, down, up) in enumerate(outages, start=1):
            PHASE[0] = what
            hole = None
            if what == "black hole":
                server.stop()
                hole = BlackHole(server.port)
            else:
                assert down is not None
                down()
            for _ in range(4):
                assert_outage(round_of_requests(http))
            assert count(caplog, "is unreachable") == n * limiters, (what, caplog.text)
            if hole is not None:
                hole.close()
                server.start()
            else:
                assert up is not None
                up()
            PHASE[0] = f"after {what}"
            assert_served(recovered(http))
            for _ in range(2):
                assert_served(round_of_requests(http))
            assert count(caplog, "answers again, after") == n * limiters, (what, "\n".join(r.getMessage()[:90] for r in caplog.records))
            assert count(caplog, "is unreachable") == n * limiters, (what, caplog.text)
        if server.module is None:
            # Each restart came back without the library: it was loaded again.
            c = valkey.Valkey(host="127.0.0.1", port=server.port)
            assert c.execute_command("FCALL_RO", "rl_version", "0") == b"0.1.0"
            assert count(caplog, "loaded the FUNCTION library") >= 3
    print("slowest request per route (ms):", {p: round(t * 1000) for p, t in SLOWEST.items()})


def test_the_plain_limiters_answer_within_the_deadline(server: ValkeyProcess) -> None:
    """Without HTTP, sync and asyncio: each call on a black hole returns
    the failure policy's answer within the deadline plus 100 ms."""
    import asyncio

    import valkey
    import valkey.asyncio

    server.stop()
    hole = BlackHole(server.port)
    try:
        for failure in ("open", "closed"):
            limiter = Limiter(valkey.Valkey(host="127.0.0.1", port=server.port), failure=failure)
            for _ in range(3):
                LATENESS.take()
                started = time.monotonic()
                d = limiter.admit("k", limit=3, window_ms=1000)
                within_bound(started, "Limiter.admit")
                assert d.admitted == (failure == "open") and d.backend == "unavailable"
                assert "within 250 ms" in str(d.error)

            async def main() -> None:
                a = AsyncLimiter(valkey.asyncio.Valkey(host="127.0.0.1", port=server.port), failure=failure)
                for _ in range(3):
                    LATENESS.take()
                    started = time.monotonic()
                    d = await a.admit("k", limit=3, window_ms=1000)
                    within_bound(started, "AsyncLimiter.admit")
                    assert d.admitted == (failure == "open") and d.backend == "unavailable"
                # Lease calls have no failure policy: they raise, as promptly.
                LATENESS.take()
                started = time.monotonic()
                with pytest.raises(TimeoutError):
                    await a.acquire("l", limit=1, ttl_ms=1000)
                within_bound(started, "AsyncLimiter.acquire")

            asyncio.run(main())
    finally:
        hole.close()
