"""What the package's tests share: the servers the Rust harness started
(tests/it/python_package.rs passes them in the environment), the clients
of every supported library, an app under uvicorn on a loopback port, and
the server's clock.

    VALKEY_HOST, VALKEY_PORT     a server (RL_EXPECT_BACKEND: module | functions)
    VALKEY_REPLICA_PORT          its replica (test_durability.py)
    RL_VALKEY_SERVER, RL_MODULE  for the tests that start and stop their own servers (test_outage.py)

A test that needs a server the harness did not give fails; none is skipped."""

from __future__ import annotations

import asyncio
import os
import pathlib
import socket
import threading
import time
from typing import Any, Callable, Iterator, List, Tuple

import pytest

HOST = os.environ.get("VALKEY_HOST", "127.0.0.1")
REPO = pathlib.Path(__file__).resolve().parents[3]
LIBRARY = REPO / "functions" / "ratelimit.lua"
# The deadline of the limiters in tests that are not about deadlines: a
# loaded test machine may take longer than the 250 ms default now and then.
TIMEOUT = 5.0


def env(name: str) -> str:
    value = os.environ.get(name)
    if not value:
        pytest.fail(f"${name} is not set: run these tests through `cargo test --test it python_package`")
    return value


@pytest.fixture(scope="session")
def port() -> int:
    return int(env("VALKEY_PORT"))


@pytest.fixture(scope="session")
def expect() -> str:
    value = env("RL_EXPECT_BACKEND")
    assert value in ("module", "functions")
    return value


@pytest.fixture
def sync(port: int) -> Iterator[Any]:
    """A plain valkey-py client on the server, flushed."""
    import valkey

    c = valkey.Valkey(host=HOST, port=port)
    c.flushall()
    yield c
    c.close()


def server_ms(c: Any) -> int:
    s, us = c.time()
    return int(s) * 1000 + int(us) // 1000


# --- every client library the limiters take -----------------------------------

SYNC_CLIENTS = ("valkey", "redis", "glide_sync")
ASYNC_CLIENTS = ("valkey.asyncio", "redis.asyncio", "glide")


def make_sync_client(kind: str, port: int, protocol: int = 2) -> Any:
    if kind == "valkey":
        import valkey

        return valkey.Valkey(host=HOST, port=port, protocol=protocol)
    if kind == "redis":
        import redis

        return redis.Redis(host=HOST, port=port, protocol=protocol)
    if kind == "glide_sync":
        from glide_sync import GlideClient, GlideClientConfiguration, NodeAddress

        return GlideClient.create(GlideClientConfiguration([NodeAddress(HOST, port)], request_timeout=2000))
    raise ValueError(kind)


async def make_async_client(kind: str, port: int, protocol: int = 2) -> Any:
    if kind == "valkey.asyncio":
        import valkey.asyncio

        return valkey.asyncio.Valkey(host=HOST, port=port, protocol=protocol)
    if kind == "redis.asyncio":
        import redis.asyncio

        return redis.asyncio.Redis(host=HOST, port=port, protocol=protocol)
    if kind == "glide":
        from glide import GlideClient, GlideClientConfiguration, NodeAddress

        return await GlideClient.create(GlideClientConfiguration([NodeAddress(HOST, port)], request_timeout=2000))
    raise ValueError(kind)


def close_sync(c: Any) -> None:
    c.close()


async def close_async(c: Any) -> None:
    if hasattr(c, "aclose"):
        await c.aclose()
    else:
        await c.close()


# --- an app under uvicorn --------------------------------------------------------


class Uvicorn:
    """An ASGI app under uvicorn on 127.0.0.1, in a thread with its own loop."""

    def __init__(self, app: Any) -> None:
        import uvicorn

        # IPPROTO_TCP named: asyncio sets TCP_NODELAY on the accepted
        # sockets only then (with proto 0 every response waits ~40 ms for
        # a delayed ACK between its header and body segments).
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
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

    def __exit__(self, *exc: Any) -> None:
        self.server.should_exit = True
        self.thread.join(10)


def run(coro: Any) -> Any:
    return asyncio.run(coro)


def statuses(responses: List[Any]) -> List[int]:
    return [r.status_code for r in responses]


def timed(fn: Callable[[], Any]) -> Tuple[Any, float]:
    started = time.monotonic()
    out = fn()
    return out, time.monotonic() - started
