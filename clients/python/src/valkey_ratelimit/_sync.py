"""Limiter: the limiter on a synchronous valkey-py client (valkey.Valkey or
valkey.ValkeyCluster). One call per decision; the backend is found on
first use and remembered per client."""

from __future__ import annotations

import concurrent.futures
import weakref
from typing import Any, Optional, Sequence

from . import _core
from ._core import BackendMissingError, Decision, LimiterTimeout

# The backend found for each client: "module" or "functions".
_detected: "weakref.WeakKeyDictionary[Any, str]" = weakref.WeakKeyDictionary()
# Runs calls that have a timeout. A call that timed out keeps its thread
# until the client's own socket timeout ends it.
_pool = concurrent.futures.ThreadPoolExecutor(max_workers=8, thread_name_prefix="valkey-ratelimit")


class Limiter:
    """``admit``, ``ttl``, ``refund`` and ``reset`` on one valkey-py client.

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
