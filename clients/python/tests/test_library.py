"""The FUNCTION library this package ships, on a bare server the harness
started (no module, no library, modules not allowed): loaded on first use,
over an older copy or one without rl_version but never over a newer one,
reloaded when it vanishes, and, where this client may not load it, a clear
error that names the administrator's command."""

from __future__ import annotations

import asyncio
import logging
import re
from typing import Any, Iterator

import httpx
import pytest
from conftest import HOST, LIBRARY, TIMEOUT, Uvicorn, statuses

from valkey_ratelimit import AsyncLimiter, BackendMissingError, Limiter, RateLimitMiddleware

OURS = "0.1.0"
ADMIN_COMMAND = "valkey-cli -x FUNCTION LOAD REPLACE < ratelimit.lua"


@pytest.fixture
def bare(sync: Any) -> Iterator[Any]:
    sync.function_flush("SYNC")
    assert sync.function_list() == []
    yield sync
    sync.function_flush("SYNC")


def loaded_version(c: Any) -> Any:
    try:
        return c.execute_command("FCALL_RO", "rl_version", "0").decode()
    except Exception as e:
        return str(e)


def variant(version: str = OURS, with_rl_version: bool = True) -> str:
    source = LIBRARY.read_text()
    source, n = re.subn(r"^local VERSION = '[^']*'$", f"local VERSION = '{version}'", source, flags=re.MULTILINE)
    assert n == 1
    if not with_rl_version:
        source, n = re.subn(r"^server\.register_function\{function_name = 'rl_version'.*$", "", source, flags=re.MULTILINE)
        assert n == 1
    return source


def fresh_limiter(port: int, **options: Any) -> Limiter:
    import valkey

    return Limiter(valkey.Valkey(host=HOST, port=port), timeout=TIMEOUT, **options)


def test_the_server_has_neither_backend(bare: Any) -> None:
    with pytest.raises(Exception, match="unknown command"):
        bare.execute_command("RL.LIMIT", "x")
    with pytest.raises(Exception, match="(?i)function not found"):
        bare.execute_command("FCALL_RO", "rl_version", "0")


def test_loaded_on_first_use(bare: Any, port: int) -> None:
    limiter = fresh_limiter(port)
    d = limiter.admit("k", limit=2, window_ms=5000)
    assert d.admitted and d.backend == "functions"
    assert loaded_version(bare) == OURS
    assert b"ratelimit" in repr(bare.function_list()).encode()


def test_an_older_library_is_replaced(bare: Any, port: int) -> None:
    bare.function_load(variant("0.0.9"))
    assert loaded_version(bare) == "0.0.9"
    assert fresh_limiter(port).admit("k", limit=2, window_ms=5000).admitted
    assert loaded_version(bare) == OURS


def test_a_library_without_rl_version_is_replaced(bare: Any, port: int) -> None:
    bare.function_load(variant(with_rl_version=False))
    assert "not found" in loaded_version(bare).lower()
    assert fresh_limiter(port).admit("k", limit=2, window_ms=5000).admitted
    assert loaded_version(bare) == OURS


def test_a_newer_library_is_never_replaced(bare: Any, port: int) -> None:
    bare.function_load(variant("99.0.0"))
    d = fresh_limiter(port).admit("k", limit=2, window_ms=5000)
    assert d.admitted and d.backend == "functions"
    assert loaded_version(bare) == "99.0.0"


def test_library_false_never_loads(bare: Any, port: int) -> None:
    with pytest.raises(BackendMissingError) as e:
        fresh_limiter(port, library=False).admit("k", limit=2, window_ms=5000)
    assert ADMIN_COMMAND in str(e.value) and "library=False" in str(e.value)
    assert bare.function_list() == []


def test_a_client_that_may_not_load_gets_the_admin_command(bare: Any, port: int, caplog: Any) -> None:
    import valkey

    bare.execute_command("ACL", "SETUSER", "app", "on", ">pw", "~*", "+@all", "-function")
    try:
        client = valkey.Valkey(host=HOST, port=port, username="app", password="pw")
        with pytest.raises(BackendMissingError) as e:
            Limiter(client, timeout=TIMEOUT).admit("k", limit=2, window_ms=5000)
        message = str(e.value)
        assert ADMIN_COMMAND in message and "no permissions to run the 'function|load' command" in message, message
        assert bare.function_list() == []
        # An older copy that this client cannot replace is used, with a warning.
        bare.function_load(variant("0.0.9"))
        with caplog.at_level(logging.WARNING, logger="valkey_ratelimit"):
            assert Limiter(client, timeout=TIMEOUT).admit("k", limit=2, window_ms=5000).admitted
        assert loaded_version(bare) == "0.0.9"
        assert any("older than this package's" in r.getMessage() for r in caplog.records), caplog.records
    finally:
        bare.execute_command("ACL", "DELUSER", "app")


def test_a_vanished_library_is_reloaded(bare: Any, port: int) -> None:
    import valkey.asyncio

    limiter = fresh_limiter(port, prefix="v:")
    assert limiter.admit("k", limit=3, window_ms=60_000).admitted
    bare.function_flush("SYNC")
    d = limiter.admit("k", limit=3, window_ms=60_000)
    assert d.admitted and d.remaining == 1, "reloaded, and the count kept"
    assert loaded_version(bare) == OURS

    async def main() -> None:
        a = AsyncLimiter(valkey.asyncio.Valkey(host=HOST, port=port), prefix="v:", timeout=TIMEOUT)
        assert (await a.admit("k", limit=3, window_ms=60_000)).remaining == 0
        bare.function_flush("SYNC")
        d = await a.admit("k", limit=3, window_ms=60_000)
        assert not d.admitted and d.backend == "functions", d
        assert loaded_version(bare) == OURS

    asyncio.run(main())


def test_the_middleware_on_a_bare_server(bare: Any, port: int) -> None:
    """A fresh app on a fresh server: no setup, the first request loads the library."""
    import valkey.asyncio
    from starlette.applications import Starlette
    from starlette.responses import PlainTextResponse
    from starlette.routing import Route

    limiter = AsyncLimiter(valkey.asyncio.Valkey(host=HOST, port=port), timeout=TIMEOUT)
    inner = Starlette(routes=[Route("/", lambda request: PlainTextResponse("hello"))])
    app = RateLimitMiddleware(inner, limiter, limit=2, window_ms=10_000)
    with Uvicorn(app) as base, httpx.Client(base_url=base) as http:
        answers = [http.get("/") for _ in range(3)]
        assert statuses(answers) == [200, 200, 429]
        assert answers[0].headers["ratelimit-policy"] == '"2-in-10sec";q=2;w=10'
        assert loaded_version(bare) == OURS
        # Gone again (a restart without persistence): loaded again, no 500.
        bare.function_flush("SYNC")
        bare.delete("127.0.0.1")
        assert statuses([http.get("/") for _ in range(3)]) == [200, 200, 429]
