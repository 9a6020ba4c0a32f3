"""Limiter: the limiter on a synchronous valkey-py client (valkey.Valkey or
valkey.ValkeyCluster). One call per decision; the backend is found on
first use and remembered per client."""

from __future__ import annotations

import concurrent.futures
import threading
import weakref
from typing import Any, Optional, Sequence

from . import _core
from ._core import BackendMissingError, Decision, Lease, LeaseLost, LeaseRefused, LimiterTimeout

# The backend found for each client: "module" or "functions".
_detected: "weakref.WeakKeyDictionary[Any, str]" = weakref.WeakKeyDictionary()
# Runs calls that have a timeout. A call that timed out keeps its thread
# until the client's own socket timeout ends it.
_pool = concurrent.futures.ThreadPoolExecutor(max_workers=8, thread_name_prefix="valkey-ratelimit")


class Limiter:
    """``admit``, ``ttl``, ``refund`` and ``reset`` on one valkey-py client;
    and the leases: ``acquire``, ``release``, ``extend``, ``in_flight`` and
    the context manager ``lease``.

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

    def _send(self, words: Sequence[str], key: Optional[str]) -> Any:
        route = _core.route(self.client, key) if key is not None else {}
        if self.timeout is None:
            return self.client.execute_command(*words, **route)
        future = _pool.submit(self.client.execute_command, *words, **route)
        try:
            return future.result(timeout=self.timeout)
        except concurrent.futures.TimeoutError:
            raise LimiterTimeout(f"no reply from Valkey within {self.timeout} s") from None

    def backend(self) -> str:
        """The backend in use: "module" or "functions"."""
        if self.backend_option != "auto":
            return self.backend_option
        known = _detected.get(self.client)
        if known:
            return known
        probe = self.prefix + _core.PROBE_KEY
        try:
            self._send(("RL.LIMIT", probe), probe)
            found = "module"
        except Exception as e:
            if not _core.is_unknown_command(e):
                raise
            try:
                self._send(("FCALL_RO", "rl_limit", "1", probe), probe)
            except Exception as e2:
                if not _core.is_function_missing(e2):
                    raise
                self._load_library()
            found = "functions"
        _detected[self.client] = found
        return found

    def _load_library(self) -> None:
        if self.library is None:
            raise BackendMissingError()
        try:
            # Not routed: the client's own routing for FUNCTION LOAD.
            self._send(("FUNCTION", "LOAD", self.library), None)
        except Exception as e:
            # Someone else loaded it meanwhile: fine.
            if "already exists" not in str(e):
                raise

    def _call(self, module_name: str, function: str, read_only: bool, keys: Sequence[str], args: Sequence[str]) -> Any:
        backend = self.backend()
        words = _core.command(backend, module_name, function, read_only, keys, args)
        try:
            return self._send(words, keys[0]), backend
        except Exception as e:
            if self.backend_option == "auto" and (
                (backend == "functions" and _core.is_function_missing(e))
                or (backend == "module" and _core.is_unknown_command(e))
            ):
                # The server changed since detection: detect again.
                _detected.pop(self.client, None)
                backend = self.backend()
                words = _core.command(backend, module_name, function, read_only, keys, args)
                return self._send(words, keys[0]), backend
            raise

    def _keys(self, key: str, meta: Optional[str]) -> list:
        return [self.prefix + key] + ([meta] if meta is not None else [])

    def admit(
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
            reply, backend = self._call("RL.ADMIT", "rl_admit", False, self._keys(key, meta), args)
        except Exception as e:
            if isinstance(e, BackendMissingError) or not _core.is_unreachable(e):
                raise
            return _core.failed_decision(self.failure, limit, window_ms, e)
        return _core.parse_decision(reply, backend, window_ms)

    def refund(
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
        reply, backend = self._call("RL.REFUND", "rl_refund", False, self._keys(key, meta), args)
        return _core.parse_decision(reply, backend, window_ms)

    def ttl(
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
        reply, _ = self._call("RL.TTL", "rl_ttl", True, self._keys(key, meta), args)
        return _core.to_int(reply)

    def reset(self, key: str) -> bool:
        """Deletes the limiter's state: True if there was one."""
        reply, _ = self._call("RL.RESET", "rl_reset", False, [self.prefix + key], [])
        return _core.to_int(reply) == 1

    # -- leases ---------------------------------------------------------------
    # A lease call is not covered by the failure policy: an unreachable
    # Valkey raises, since no slot can be promised without it.

    def acquire(
        self,
        key: str,
        limit: Optional[int] = None,
        ttl_ms: Optional[int] = None,
        meta: Optional[str] = None,
        lease_id: Optional[str] = None,
    ) -> Lease:
        """Takes one of ``limit`` slots on ``key`` for ``ttl_ms`` (RL.ACQUIRE).
        ``lease_id`` names the lease (a job id, say; re-acquiring it renews
        it); else the server makes one. Refused, ``acquired`` is False and
        ``retry_after_ms`` says when the earliest lease ends by itself."""
        args = _core.lease_args(limit, ttl_ms, lease_id)
        reply, backend = self._call("RL.ACQUIRE", "rl_acquire", False, self._keys(key, meta), args)
        return _core.parse_lease(reply, backend)

    def release(self, key: str, lease_id: str) -> bool:
        """Ends the lease (RL.RELEASE): True if it was live, False if it had
        expired, was released already, or is unknown."""
        args = [_core.check_lease_id(lease_id)]
        reply, _ = self._call("RL.RELEASE", "rl_release", False, [self.prefix + key], args)
        return _core.to_int(reply) == 1

    def extend(self, key: str, lease_id: str, ttl_ms: int) -> bool:
        """Moves a live lease's deadline to now + ``ttl_ms`` (RL.EXTEND).
        False: the lease is no longer live and its holder must stop."""
        args = [_core.check_lease_id(lease_id)] + _core.ttl_arg(ttl_ms)
        reply, _ = self._call("RL.EXTEND", "rl_extend", False, [self.prefix + key], args)
        return _core.to_int(reply) == 1

    def in_flight(self, key: str) -> int:
        """The number of live leases on ``key`` (RL.INFLIGHT; reads only)."""
        reply, _ = self._call("RL.INFLIGHT", "rl_inflight", True, [self.prefix + key], [])
        return _core.to_int(reply)

    def lease(
        self,
        key: str,
        limit: Optional[int] = None,
        ttl_ms: Optional[int] = None,
        meta: Optional[str] = None,
        lease_id: Optional[str] = None,
        heartbeat: bool = True,
    ) -> "HeldLease":
        """A context manager around one lease::

            with limiter.lease("gpu", limit=4, ttl_ms=30_000) as held:
                run(job)            # check held.lost between steps

        Entering acquires, or raises ``LeaseRefused`` (with
        ``retry_after_ms``) without running the block. While the block runs,
        a thread extends the lease every ``ttl_ms / 3`` (``heartbeat=False``:
        no thread, the lease lasts ``ttl_ms``). Leaving releases it, on an
        exception too. If an extend finds the lease gone, the beats stop,
        ``held.lost`` turns True (``held.check()`` raises), and leaving the
        block raises ``LeaseLost`` unless another exception is under way;
        likewise when the release finds the lease expired. A thread cannot
        be stopped from outside: the block sees the loss only through
        ``held.lost`` / ``held.check()``."""
        interval = _core.heartbeat_s(ttl_ms, heartbeat)
        return HeldLease(self, key, dict(limit=limit, ttl_ms=ttl_ms, meta=meta, lease_id=lease_id), interval)


class HeldLease:
    """``Limiter.lease``'s context manager; inside the block: ``lease`` (the
    RL.ACQUIRE answer), ``id``, ``lost`` and ``check()``."""

    def __init__(self, limiter: Limiter, key: str, acquire: dict, interval: Optional[float]) -> None:
        self._limiter = limiter
        self.key = key
        self._acquire = acquire
        self._interval = interval
        self._stop = threading.Event()
        self._lost = threading.Event()
        self._thread: Optional[threading.Thread] = None
        self.lease: Optional[Lease] = None

    @property
    def id(self) -> Optional[str]:
        return self.lease.lease_id if self.lease else None

    @property
    def lost(self) -> bool:
        """True once a heartbeat found the lease no longer live."""
        return self._lost.is_set()

    def check(self) -> None:
        """Raises ``LeaseLost`` if the lease is lost: call it between steps."""
        if self.lost:
            raise LeaseLost(self.key, self.id)

    def __enter__(self) -> "HeldLease":
        lease = self._limiter.acquire(self.key, **self._acquire)
        if not lease.acquired:
            raise LeaseRefused(self.key, lease)
        self.lease = lease
        # Unlimited (limit 0): nothing was stored, so nothing to keep alive.
        if self._interval is not None and lease.limit > 0:
            self._thread = threading.Thread(target=self._beat, name="valkey-ratelimit-lease", daemon=True)
            self._thread.start()
        return self

    def _beat(self) -> None:
        assert self.lease is not None and self.lease.lease_id is not None
        ttl_ms = self._acquire["ttl_ms"]
        while not self._stop.wait(self._interval):
            try:
                alive = self._limiter.extend(self.key, self.lease.lease_id, ttl_ms)
            except Exception:
                # Unreachable for now: the next beat tries again; if the
                # deadline passes meanwhile, that beat answers 0.
                continue
            if not alive:
                self._lost.set()
                return

    def __exit__(self, exc_type, exc, tb) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        assert self.lease is not None and self.lease.lease_id is not None
        if self.lease.limit > 0 and not self.lost:
            try:
                # False: the lease ran out before the block ended.
                if not self._limiter.release(self.key, self.lease.lease_id):
                    self._lost.set()
            except Exception:
                # Never mask the block's own exception; the lease ends at
                # its deadline anyway.
                if exc_type is None:
                    raise
        if self.lost and exc_type is None:
            raise LeaseLost(self.key, self.id)
