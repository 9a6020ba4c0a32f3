"""AsyncLimiter: the limiter on an asyncio valkey-py client
(valkey.asyncio.Valkey or valkey.asyncio.ValkeyCluster); _sync's Limiter
with awaits. One call per decision; the backend is found on first use and
remembered per client."""

from __future__ import annotations

import asyncio
import weakref
from typing import Any, Optional, Sequence

from . import _core
from ._core import BackendMissingError, Decision, Lease, LeaseLost, LeaseRefused, LimiterTimeout

# The backend found for each client: "module" or "functions".
_detected: "weakref.WeakKeyDictionary[Any, str]" = weakref.WeakKeyDictionary()


class AsyncLimiter:
    """``admit``, ``ttl``, ``refund`` and ``reset`` on one valkey.asyncio
    client; and the leases: ``acquire``, ``release``, ``extend``,
    ``in_flight`` and the async context manager ``lease``.

    backend: "auto" (the module if loaded, else the FUNCTION library),
    "module" or "functions". failure: "open" (default: admit while Valkey is
    unreachable) or "closed" (refuse). timeout: seconds to wait for a reply,
    None for the client's own socket timeout. library: the source of
    functions/ratelimit.lua, loaded when neither backend is there.
    """

    def __init__(
        self,
        client: Any,
        *,
        prefix: str = "",
        backend: str = "auto",
        failure: str = "open",
        timeout: Optional[float] = None,
        library: Optional[str] = None,
    ) -> None:
        _core.check_options(backend, failure, timeout)
        self.client = client
        self.prefix = prefix
        self.backend_option = backend
        self.failure = failure
        self.timeout = timeout
        self.library = library

    async def _send(self, words: Sequence[str], key: Optional[str]) -> Any:
        async def call() -> Any:
            route = {}
            if key is not None and hasattr(self.client, "get_node_from_key"):
                # The asyncio cluster client reads its slot table on first use.
                await self.client.initialize()
                route = _core.route(self.client, key)
            return await self.client.execute_command(*words, **route)

        if self.timeout is None:
            return await call()
        try:
            return await asyncio.wait_for(call(), self.timeout)
        except asyncio.TimeoutError:
            raise LimiterTimeout(f"no reply from Valkey within {self.timeout} s") from None

    async def backend(self) -> str:
        """The backend in use: "module" or "functions"."""
        if self.backend_option != "auto":
            return self.backend_option
        known = _detected.get(self.client)
        if known:
            return known
        probe = self.prefix + _core.PROBE_KEY
        try:
            await self._send(("RL.LIMIT", probe), probe)
            found = "module"
        except Exception as e:
            if not _core.is_unknown_command(e):
                raise
            try:
                await self._send(("FCALL_RO", "rl_limit", "1", probe), probe)
            except Exception as e2:
                if not _core.is_function_missing(e2):
                    raise
                await self._load_library()
            found = "functions"
        _detected[self.client] = found
        return found

    async def _load_library(self) -> None:
        if self.library is None:
            raise BackendMissingError()
        try:
            # Not routed: the client's own routing for FUNCTION LOAD.
            await self._send(("FUNCTION", "LOAD", self.library), None)
        except Exception as e:
            # Someone else loaded it meanwhile: fine.
            if "already exists" not in str(e):
                raise

    async def _call(self, module_name: str, function: str, read_only: bool, keys: Sequence[str], args: Sequence[str]) -> Any:
        backend = await self.backend()
        words = _core.command(backend, module_name, function, read_only, keys, args)
        try:
            return await self._send(words, keys[0]), backend
        except Exception as e:
            if self.backend_option == "auto" and (
                (backend == "functions" and _core.is_function_missing(e))
                or (backend == "module" and _core.is_unknown_command(e))
            ):
                # The server changed since detection: detect again.
                _detected.pop(self.client, None)
                backend = await self.backend()
                words = _core.command(backend, module_name, function, read_only, keys, args)
                return await self._send(words, keys[0]), backend
            raise

    def _keys(self, key: str, meta: Optional[str]) -> list:
        return [self.prefix + key] + ([meta] if meta is not None else [])

    async def admit(
        self,
        key: str,
        limit: Optional[int] = None,
        window_ms: Optional[int] = None,
        algorithm: Optional[str] = None,
        burst: Optional[int] = None,
        cost: int = 1,
        meta: Optional[str] = None,
    ) -> Decision:
        """Counts a request of ``cost`` against ``key``; ``cost=0`` peeks.
        Applies the failure policy when Valkey is unreachable."""
        args = _core.policy_args(limit, window_ms, algorithm, burst, meta) + _core.cost_args(cost)
        try:
            reply, backend = await self._call("RL.ADMIT", "rl_admit", False, self._keys(key, meta), args)
        except Exception as e:
            if isinstance(e, BackendMissingError) or not _core.is_unreachable(e):
                raise
            return _core.failed_decision(self.failure, limit, window_ms, e)
        return _core.parse_decision(reply, backend, window_ms)

    async def refund(
        self,
        key: str,
        limit: Optional[int] = None,
        window_ms: Optional[int] = None,
        algorithm: Optional[str] = None,
        burst: Optional[int] = None,
        cost: int = 1,
        meta: Optional[str] = None,
    ) -> Decision:
        """Gives back ``cost``: the state afterwards, as a peek sees it."""
        args = _core.policy_args(limit, window_ms, algorithm, burst, meta) + _core.cost_args(cost)
        reply, backend = await self._call("RL.REFUND", "rl_refund", False, self._keys(key, meta), args)
        return _core.parse_decision(reply, backend, window_ms)

    async def ttl(
        self,
        key: str,
        limit: Optional[int] = None,
        window_ms: Optional[int] = None,
        algorithm: Optional[str] = None,
        burst: Optional[int] = None,
        meta: Optional[str] = None,
    ) -> int:
        """The back-off in ms a request of cost 1 would be told now; 0 if it would pass."""
        args = _core.policy_args(limit, window_ms, algorithm, burst, meta)
        reply, _ = await self._call("RL.TTL", "rl_ttl", True, self._keys(key, meta), args)
        return _core.to_int(reply)

    async def reset(self, key: str) -> bool:
        """Deletes the limiter's state: True if there was one."""
        reply, _ = await self._call("RL.RESET", "rl_reset", False, [self.prefix + key], [])
        return _core.to_int(reply) == 1

    # -- leases ---------------------------------------------------------------
    # As on Limiter: no failure policy, an unreachable Valkey raises.

    async def acquire(
        self,
        key: str,
        limit: Optional[int] = None,
        ttl_ms: Optional[int] = None,
        meta: Optional[str] = None,
        lease_id: Optional[str] = None,
    ) -> Lease:
        """Takes one of ``limit`` slots on ``key`` for ``ttl_ms`` (RL.ACQUIRE);
        see ``Limiter.acquire``."""
        args = _core.lease_args(limit, ttl_ms, lease_id)
        reply, backend = await self._call("RL.ACQUIRE", "rl_acquire", False, self._keys(key, meta), args)
        return _core.parse_lease(reply, backend)

    async def release(self, key: str, lease_id: str) -> bool:
        """Ends the lease (RL.RELEASE): True if it was live."""
        args = [_core.check_lease_id(lease_id)]
        reply, _ = await self._call("RL.RELEASE", "rl_release", False, [self.prefix + key], args)
        return _core.to_int(reply) == 1

    async def extend(self, key: str, lease_id: str, ttl_ms: int) -> bool:
        """Moves a live lease's deadline to now + ``ttl_ms`` (RL.EXTEND).
        False: the lease is no longer live and its holder must stop."""
        args = [_core.check_lease_id(lease_id)] + _core.ttl_arg(ttl_ms)
        reply, _ = await self._call("RL.EXTEND", "rl_extend", False, [self.prefix + key], args)
        return _core.to_int(reply) == 1

    async def in_flight(self, key: str) -> int:
        """The number of live leases on ``key`` (RL.INFLIGHT; reads only)."""
        reply, _ = await self._call("RL.INFLIGHT", "rl_inflight", True, [self.prefix + key], [])
        return _core.to_int(reply)

    def lease(
        self,
        key: str,
        limit: Optional[int] = None,
        ttl_ms: Optional[int] = None,
        meta: Optional[str] = None,
        lease_id: Optional[str] = None,
        heartbeat: bool = True,
    ) -> "AsyncHeldLease":
        """An async context manager around one lease::

            async with limiter.lease("gpu", limit=4, ttl_ms=30_000) as held:
                await run(job)

        Entering acquires, or raises ``LeaseRefused`` (with
        ``retry_after_ms``) without running the block. While the block runs,
        a task extends the lease every ``ttl_ms / 3`` (``heartbeat=False``:
        none). Leaving releases it, on an exception too. If an extend finds
        the lease gone, the block is cancelled at its next await and
        ``LeaseLost`` is raised in its place (``held.lost`` is True); a
        release that finds the lease expired raises ``LeaseLost`` too."""
        interval = _core.heartbeat_s(ttl_ms, heartbeat)
        return AsyncHeldLease(self, key, dict(limit=limit, ttl_ms=ttl_ms, meta=meta, lease_id=lease_id), interval)


class AsyncHeldLease:
    """``AsyncLimiter.lease``'s context manager; inside the block: ``lease``
    (the RL.ACQUIRE answer), ``id``, ``lost`` and ``check()``."""

    def __init__(self, limiter: AsyncLimiter, key: str, acquire: dict, interval: Optional[float]) -> None:
        self._limiter = limiter
        self.key = key
        self._acquire = acquire
        self._interval = interval
        self._beats: Optional["asyncio.Task[None]"] = None
        self._body: Optional["asyncio.Task[Any]"] = None
        self._leaving = False
        self._cancelled = False
        self.lost = False
        self.lease: Optional[Lease] = None

    @property
    def id(self) -> Optional[str]:
        return self.lease.lease_id if self.lease else None

    def check(self) -> None:
        """Raises ``LeaseLost`` if the lease is lost."""
        if self.lost:
            raise LeaseLost(self.key, self.id)

    async def __aenter__(self) -> "AsyncHeldLease":
        lease = await self._limiter.acquire(self.key, **self._acquire)
        if not lease.acquired:
            raise LeaseRefused(self.key, lease)
        self.lease = lease
        # Unlimited (limit 0): nothing was stored, so nothing to keep alive.
        if self._interval is not None and lease.limit > 0:
            self._body = asyncio.current_task()
            self._beats = asyncio.ensure_future(self._beat())
        return self

    async def _beat(self) -> None:
        assert self.lease is not None and self.lease.lease_id is not None
        ttl_ms = self._acquire["ttl_ms"]
        while True:
            await asyncio.sleep(self._interval)  # type: ignore[arg-type]
            try:
                alive = await self._limiter.extend(self.key, self.lease.lease_id, ttl_ms)
            except Exception:
                # Unreachable for now: the next beat tries again.
                continue
            if not alive:
                self.lost = True
                # Same loop, no await since the check: the block has not
                # begun to leave, so the cancel lands inside it.
                if not self._leaving and self._body is not None:
                    self._cancelled = True
                    self._body.cancel()
                return

    async def __aexit__(self, exc_type, exc, tb) -> None:
        self._leaving = True
        if self._beats is not None:
            self._beats.cancel()
            try:
                await self._beats
            except asyncio.CancelledError:
                pass
        assert self.lease is not None and self.lease.lease_id is not None
        if self.lease.limit > 0 and not self.lost:
            try:
                if not await self._limiter.release(self.key, self.lease.lease_id):
                    self.lost = True
            except Exception:
                if exc_type is None:
                    raise
        if self._cancelled and exc_type is asyncio.CancelledError:
            # Our own cancel, not the caller's: undo it and say why.
            uncancel = getattr(self._body, "uncancel", None)
            if uncancel is not None:
                uncancel()
            raise LeaseLost(self.key, self.id) from exc
        if self.lost and exc_type is None:
            raise LeaseLost(self.key, self.id)
