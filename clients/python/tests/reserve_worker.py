"""One of the four processes that share a limiter in the fair-waiting test
(tests/it/node_package.rs, issue 38): not a pytest module.

    python tests/reserve_worker.py sync|async

From RL_SHARE_START (epoch ms) it waits RL_SHARE_N times on RL_SHARE_KEY
with RL_SHARE_POLICY (JSON: limit, window_ms, algorithm, burst), through
``Limiter.wait`` or ``AsyncLimiter.wait`` on one connection of its own.
Prints ``addr <its address as the server sees it>``, then per admission
``slot <addr> <admitted> <at_ms> <delay_ms> <server TIME in µs after waking>``."""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from typing import Any

import valkey
import valkey.asyncio

from valkey_ratelimit import AsyncLimiter, Limiter

HOST = os.environ.get("VALKEY_HOST", "127.0.0.1")
PORT = int(os.environ["VALKEY_PORT"])
KEY = os.environ["RL_SHARE_KEY"]
N = int(os.environ["RL_SHARE_N"])
START = int(os.environ["RL_SHARE_START"])
POLICY = json.loads(os.environ["RL_SHARE_POLICY"])


def addr_of(info: Any) -> str:
    text = info.decode() if isinstance(info, bytes) else str(info)
    return next(part[5:] for part in text.split() if part.startswith("addr="))


def time_us(reply: Any) -> int:
    s, us = reply
    return int(s) * 1_000_000 + int(us)


def line(addr: str, d: Any, woke: int) -> str:
    return f"slot {addr} {int(d.admitted)} {d.at_ms} {d.delay_ms} {woke}"


def run_sync() -> None:
    c = valkey.Valkey(host=HOST, port=PORT, single_connection_client=True)
    limiter = Limiter(c, timeout=5.0)
    limiter.backend()
    addr = addr_of(c.execute_command("CLIENT", "INFO"))
    print(f"addr {addr}", flush=True)
    time.sleep(max(0.0, START / 1000 - time.time()))
    for _ in range(N):
        d = limiter.wait(KEY, wait_ms=30_000, **POLICY)
        print(line(addr, d, time_us(c.execute_command("TIME"))), flush=True)
    c.close()


async def run_async() -> None:
    c = valkey.asyncio.Valkey(host=HOST, port=PORT, single_connection_client=True)
    limiter = AsyncLimiter(c, timeout=5.0)
    await limiter.backend()
    addr = addr_of(await c.execute_command("CLIENT", "INFO"))
    print(f"addr {addr}", flush=True)
    await asyncio.sleep(max(0.0, START / 1000 - time.time()))
    for _ in range(N):
        d = await limiter.wait(KEY, wait_ms=30_000, **POLICY)
        print(line(addr, d, time_us(await c.execute_command("TIME"))), flush=True)
    await c.aclose()


if __name__ == "__main__":
    if sys.argv[1:] == ["sync"]:
        run_sync()
    elif sys.argv[1:] == ["async"]:
        asyncio.run(run_async())
    else:
        sys.exit("usage: reserve_worker.py sync|async")
    print("PASS python reserve share", flush=True)
