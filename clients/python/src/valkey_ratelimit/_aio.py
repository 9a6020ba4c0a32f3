"""AsyncLimiter: the limiter on an asyncio client (valkey-py's
valkey.asyncio, redis-py's redis.asyncio, valkey-glide's GlideClient), and
its leases. One call per decision, every call under a deadline; the backend
(module, else library, else the bundled library loaded) is found on first
use and found again when the server changes.

This file is the source: _sync.py is generated from it by
scripts/unasync.py (`make lint` checks that they agree)."""

from __future__ import annotations

import asyncio
import logging
import random
import time
from typing import Any, Callable, List, Optional, Sequence, Tuple, Union

from . import _core, _library, _options, _reservation
from ._health import Health
from ._concurrency import AsyncBeats, AsyncCaller, AsyncSlotSleep
from ._core import Decision, Decisions, Lease, LeaseLost, LeaseRefused
from ._options import Key, Policy

log = logging.getLogger("valkey_ratelimit")


class AsyncTransport:
    """How one client sends a command: valkey-py and redis-py through
    ``execute_command``, each call routed to its key's node on a cluster
    client (which spares their COMMAND GETKEYS before every call)."""

    def __init__(self, client: Any) -> None:
        self.client = client
        self.cluster = hasattr(client, "get_node_from_key")

    @staticmethod
    def of(client: Any) -> "AsyncTransport":
        if type(client).__module__.split(".")[0] in ("glide", "glide_sync"):
            return AsyncGlideTransport(client)
        return AsyncTransport(client)

    async def _route(self, key: Optional[Key]) -> dict:
        if key is None or not self.cluster:
            return {}
        if hasattr(self.client, "initialize"):
            # The asyncio cluster client reads its slot table on first use.
            await self.client.initialize()
        return {"target_nodes": self.client.get_node_from_key(key)}

    async def send(self, words: Sequence[Any], key: Optional[Key]) -> Any:
        return await self.client.execute_command(*words, **await self._route(key))

    async def send_then_wait(self, words: Sequence[Any], replicas: int, timeout_ms: int) -> Tuple[Any, int]:
        """The call, then ``WAIT replicas timeout_ms`` on the same
        connection (WAIT counts the replicas that have this connection's
        writes): one pipeline."""
        pipe = self.client.pipeline(transaction=False)
        pipe.execute_command(*words)
        pipe.execute_command("WAIT", str(replicas), str(timeout_ms))
        reply, acks = await pipe.execute(raise_on_error=False)
        for item in (reply, acks):
            if isinstance(item, BaseException):
                raise item
        return reply, _core.to_int(acks)

    async def load_library(self, source: str) -> None:
        """FUNCTION LOAD REPLACE (a cluster client sends it to every primary)."""
        await self.client.function_load(source, replace=True)


class AsyncGlideTransport(AsyncTransport):
    """valkey-glide: ``custom_command``, routed by slot on a cluster client."""

    def __init__(self, client: Any) -> None:
        self.client = client
        self.cluster = type(client).__name__ == "GlideClusterClient"

    async def send(self, words: Sequence[Any], key: Optional[Key]) -> Any:
        if self.cluster and key is not None:
            from glide_shared import SlotIdRoute, SlotType

            route = SlotIdRoute(SlotType.PRIMARY, _core.key_slot(key))
            return await self.client.custom_command(list(words), route)
        return await self.client.custom_command(list(words))

    async def send_then_wait(self, words: Sequence[Any], replicas: int, timeout_ms: int) -> Tuple[Any, int]:
        # Never reached: wait_replicas is refused for glide when the
        # limiter is built (its one multiplexed connection would block on WAIT).
        raise NotImplementedError

    async def load_library(self, source: str) -> None:
        await self.client.function_load(source, True)


class AsyncLimiter:
    """``admit``, ``admit_all``, ``ttl``, ``refund`` and ``reset`` on one
    client, and the leases: ``acquire``, ``release``, ``extend``,
    ``in_flight`` and the context manager ``lease``. (The public class,
    ``valkey_ratelimit.AsyncLimiter``, adds ``limit(...)``: the HTTP layer
    builds on this one, never the other way round.)

    backend: "auto" (the module if loaded, else the FUNCTION library),
    "module" or "functions". failure: "open" (default: admit while Valkey is
    unreachable) or "closed" (refuse). timeout: each call's deadline in
    seconds (0.25), whatever the client does with its own queues and
    retries. library: True loads the bundled FUNCTION library where neither
    backend is there, or over an older copy (never over a newer one); False
    never loads; or a library's source. wait_replicas: after a grant,
    ``WAIT wait_replicas wait_timeout_ms``; a grant fewer replicas confirm
    is kept (unconfirmed="keep") or given back and refused ("refuse").
    """

    def __init__(
        self,
        client: Any,
        *,
        prefix: Key = "",
        backend: str = "auto",
        failure: str = "open",
        timeout: float = _options.DEFAULT_TIMEOUT_S,
        library: Union[bool, str] = True,
        wait_replicas: int = 0,
        wait_timeout_ms: int = 100,
        unconfirmed: str = "refuse",
    ) -> None:
        _core.check_client(client, asynchronous=True)
        self.client = client
        self.prefix = _options.prefix(prefix)
        self.backend_option = _options.one_of("backend", backend, _options.BACKENDS)
        self.failure = _options.one_of("failure", failure, _options.FAILURE_POLICIES)
        self.timeout = _options.seconds("timeout", timeout)
        self.library = _options.library(library)
        self.wait_replicas = _options.integer("wait_replicas", wait_replicas, 0, 2**31 - 1)
        self.wait_timeout_ms = _options.integer("wait_timeout_ms", wait_timeout_ms, 1, 2**31 - 1)
        self.unconfirmed = _options.one_of("unconfirmed", unconfirmed, _options.UNCONFIRMED_POLICIES)
        self._transport = AsyncTransport.of(client)
        if self.wait_replicas and (isinstance(self._transport, AsyncGlideTransport) or self._transport.cluster):
            raise _options.bad("wait_replicas", "0 on a cluster or valkey-glide client (WAIT needs one connection)", wait_replicas)
        # A grant waits for its replicas too: the deadline covers both.
        self._caller = AsyncCaller(self.timeout + (self.wait_timeout_ms / 1000 if self.wait_replicas else 0))
        self._health = Health(log, self.failure)
        self._backend: Optional[str] = None

    def __repr__(self) -> str:
        return f"<{type(self).__name__} prefix={self.prefix!r} backend={self._backend or self.backend_option}>"

    # -- sending ----------------------------------------------------------------

    async def _run_waiting(self, wait_ms: int, fn: Callable[..., Any], *args: Any) -> Any:
        """``_run`` with the deadline ``wait_ms`` later (BLOCK waits that long)."""
        try:
            result = await self._caller.call_within(self._caller.timeout + wait_ms / 1000, fn, *args)
        except Exception as e:
            if _core.is_unreachable(e):
                self._health.down(e)
            raise
        self._health.up()
        return result

    async def _run(self, fn: Callable[..., Any], *args: Any) -> Any:
        """One operation under the deadline; each change of reachability is
        logged once."""
        try:
            result = await self._caller.call(fn, *args)
        except Exception as e:
            if _core.is_unreachable(e):
                self._health.down(e)
            raise
        self._health.up()
        return result

    async def _ensure_backend(self) -> str:
        if self._backend is None:
            if self.backend_option == "module":
                self._backend = "module"
            else:
                if self.backend_option == "auto" and await self._module_loaded():
                    self._backend = "module"
                else:
                    await self._ensure_library()
                    self._backend = "functions"
        return self._backend

    async def _module_loaded(self) -> bool:
        probe = _options.join(self.prefix, _core.PROBE_KEY)
        try:
            await self._transport.send(("RL.LIMIT", probe), probe)
        except Exception as e:
            if not _core.is_unknown_command(e):
                raise
            return False
        return True

    async def _ensure_library(self) -> None:
        """The library is there and not older than ours, or ours is loaded
        (FUNCTION LOAD REPLACE) if this client may."""
        probe = _options.join(self.prefix, _core.PROBE_KEY)
        loaded: Optional[str] = None
        present = False
        try:
            loaded = _core.text(await self._transport.send(("FCALL_RO", "rl_version", "0"), probe))
            present = True
        except Exception as e:
            if not _core.is_function_missing(e):
                raise
            try:
                # A library older than rl_version?
                await self._transport.send(("FCALL_RO", "rl_limit", "1", probe), probe)
                present = True
            except Exception as e2:
                if not _core.is_function_missing(e2):
                    raise
        source = self._library_source()
        if present and (source is None or not _library.is_older(loaded, _library.source_version(source))):
            return
        if source is None:
            raise _library.missing("and library=False: this client does not load it")
        try:
            await self._transport.load_library(source)
        except Exception as e:
            if _core.is_unreachable(e):
                raise
            if not present:
                raise _library.missing(f"loading it was refused: {type(e).__name__}: {e}") from e
            log.warning(
                "valkey_ratelimit: the loaded FUNCTION library (version %s) is older than this package's (%s)"
                " and could not be replaced (%s); using it",
                loaded or "without rl_version",
                _library.source_version(source),
                e,
            )
            return
        log.info("valkey_ratelimit: loaded the FUNCTION library %s", _library.source_version(source))

    def _library_source(self) -> Optional[str]:
        if self.library is False:
            return None
        return _library.bundled_source() if self.library is True else self.library

    async def _request(
        self, module_name: str, function: str, read_only: bool, keys: Sequence[Key], args: Sequence[str], wait: bool = False
    ) -> Tuple[Any, Optional[int], str]:
        """One call on the backend in use: (reply, replicas that confirmed
        it or None, backend)."""

        def words(backend: str) -> Tuple[Any, ...]:
            return _core.command(backend, module_name, function, read_only, keys, args)

        return await self._request_words(words, keys[0], wait)

    async def _request_words(
        self, words: Callable[[str], Sequence[Any]], key: Key, wait: bool
    ) -> Tuple[Any, Optional[int], str]:
        """The call ``words(backend)`` makes. A server that lost the backend
        since it was found (a restart without the library, a module
        unloaded) is probed again, the library reloaded, and the call sent
        once more."""
        backend = await self._ensure_backend()
        try:
            reply, acks = await self._send_words(words(backend), key, wait)
        except Exception as e:
            vanished = (backend == "functions" and _core.is_function_missing(e)) or (
                backend == "module" and self.backend_option == "auto" and _core.is_unknown_command(e)
            )
            if not vanished:
                raise
            self._backend = None
            backend = await self._ensure_backend()
            reply, acks = await self._send_words(words(backend), key, wait)
        return reply, acks, backend

    async def _send(
        self, backend: str, module_name: str, function: str, read_only: bool, keys: Sequence[Key], args: Sequence[str]
    ) -> Any:
        """One call on a backend already found (the give-back of a grant)."""
        words = _core.command(backend, module_name, function, read_only, keys, args)
        reply, _ = await self._send_words(words, keys[0], False)
        return reply

    async def _send_words(self, words: Sequence[Any], key: Key, wait: bool) -> Tuple[Any, Optional[int]]:
        if wait and self.wait_replicas:
            return await self._transport.send_then_wait(words, self.wait_replicas, self.wait_timeout_ms)
        return await self._transport.send(words, key), None

    def _key(self, key: Any) -> Key:
        return _options.join(self.prefix, _options.key("key", key))

    def _keys(self, key: Any, meta: Optional[Key]) -> List[Key]:
        return [self._key(key)] + ([meta] if meta is not None else [])

    def _confirmed(self, acks: Optional[int]) -> bool:
        return acks is None or acks >= self.wait_replicas or self.unconfirmed == "keep"

    # -- limiters ----------------------------------------------------------------

    async def backend(self) -> str:
        """The backend in use: "module" or "functions"."""
        return await self._run(self._ensure_backend)

    async def admit(
        self,
        key: Key,
        limit: Optional[int] = None,
        window_ms: Optional[int] = None,
        algorithm: Optional[str] = None,
        burst: Optional[int] = None,
        cost: int = 1,
        meta: Optional[Key] = None,
        *,
        name: Optional[str] = None,
        shadow: bool = False,
        penalty: Optional[int] = None,
        align: bool = False,
        calendar: Optional[str] = None,
        tz: Optional[str] = None,
        escalate: Optional[int] = None,
    ) -> Decision:
        """Counts a request of ``cost`` against ``key``; ``cost=0`` peeks.
        Applies the failure policy when Valkey is unreachable. A ``limit``
        of 0 refuses without a call. ``shadow``, ``penalty``, ``align``,
        ``calendar``, ``tz`` and ``escalate`` are the server's options of those names
        (see Policy); a shadow refusal is admitted with ``shadow`` True."""
        policy = Policy(limit, window_ms, algorithm, burst, meta, shadow, penalty, align, calendar, tz, escalate)
        return await self.decide(key, policy, cost, name)

    async def decide(self, key: Key, policy: Policy, cost: int = 1, name: Optional[str] = None) -> Decision:
        """``admit`` with a checked Policy (what the HTTP layers call)."""
        cost = _options.integer("cost", cost, 0)
        if name is not None:
            _options.policy_name(name)
        if policy.refuses_all:
            return _core.refused_by_zero(policy.window_ms, name, policy.shadow)
        try:
            return await self._run(self._admit, self._key(key), policy, cost, name)
        except Exception as e:
            if not _core.is_unreachable(e):
                raise
            return _core.failed_decision(self.failure, policy.limit, policy.window_ms, e, name)

    async def wait(
        self,
        key: Key,
        limit: Optional[int] = None,
        window_ms: Optional[int] = None,
        algorithm: Optional[str] = None,
        burst: Optional[int] = None,
        cost: int = 1,
        meta: Optional[Key] = None,
        *,
        wait_ms: int,
        block: bool = False,
        name: Optional[str] = None,
        shadow: bool = False,
        penalty: Optional[int] = None,
        align: bool = False,
        calendar: Optional[str] = None,
        tz: Optional[str] = None,
        escalate: Optional[int] = None,
    ) -> Decision:
        """``admit`` that waits up to ``wait_ms`` (at least 1) to be
        admitted, first come first served on both backends, with no
        connection held: one ``RL.ADMIT ... RESERVE wait_ms`` books the
        caller's turn (gcra, token, leaky) and the caller sleeps here until
        it (``delay_ms``; ``at_ms`` by the server's clock). One that cannot
        be booked within ``wait_ms`` is refused at once, with its
        ``retry_after_ms``. Cancelled while it sleeps (an asyncio task's
        cancel; Ctrl-C in the synchronous limiter), the slot is given back
        once (``RL.REFUND ... AT at_ms``) and the cancel goes on. The
        deadline (``timeout``) covers the call, not the sleep.
        ``block=True`` sends ``RL.ADMIT ... BLOCK wait_ms`` instead where
        the module is loaded: it holds its connection until admitted (the
        client's ``socket_timeout`` must outlast the wait; valkey-glide's
        one connection holds every other call behind it). A window (fixed,
        the default, and sliding) cannot book a later window's slot: it
        sleeps ``retry_after_ms`` with jitter and tries again until
        ``wait_ms`` has passed."""
        policy = Policy(limit, window_ms, algorithm, burst, meta, shadow, penalty, align, calendar, tz, escalate)
        cost = _options.integer("cost", cost, 0)
        wait_ms = _options.integer("wait_ms", wait_ms, 1, 2**31 - 1)
        block = _options.flag("block", block)
        if name is not None:
            _options.policy_name(name)
        if policy.refuses_all:
            return _core.refused_by_zero(policy.window_ms, name, policy.shadow)
        counter = self._key(key)
        try:
            decision = await self._wait_call(counter, policy, cost, name, wait_ms, block)
        except Exception as e:
            if not _core.is_unreachable(e):
                raise
            return _core.failed_decision(self.failure, policy.limit, policy.window_ms, e, name)
        seconds = _reservation.sleep_s(decision)
        if seconds > 0:
            await AsyncSlotSleep.sleep(seconds, lambda: self._give_back(counter, policy, cost, decision))
        return decision

    async def _wait_call(
        self, key: Key, policy: Policy, cost: int, name: Optional[str], wait_ms: int, block: bool
    ) -> Decision:
        """The server's part of ``wait``: BLOCK (asked for, on the module),
        RESERVE, or tries until admitted (a window, or a server that
        cannot book). A RESERVE cancelled before its reply gives back what
        it booked when the reply comes."""
        backend = await self._run(self._ensure_backend)
        mode = _reservation.wait_mode(policy.algorithm, policy.meta, backend, block)
        if mode == "block":
            return await self._run_waiting(wait_ms, self._admit, key, policy, cost, name, wait_ms)
        if mode != "retry":

            async def late(decision: Decision) -> None:
                if decision.admitted and not decision.shadow and cost > 0 and decision.limit > 0:
                    await self._give_back(key, policy, cost, decision)

            try:
                return await AsyncSlotSleep.book(lambda: self._run(self._reserve, key, policy, cost, name, wait_ms), late)
            except Exception as e:
                # A window's algorithm named by the META hash, or a server older than RESERVE.
                if not _reservation.is_reserve_unsupported(e):
                    raise
        return await self._run_waiting(wait_ms, self._retrying, self._admit, wait_ms, key, policy, cost, name)

    async def _give_back(self, key: Key, policy: Policy, cost: int, decision: Decision) -> None:
        """Gives a waiter's grant back: ``RL.REFUND ... AT at_ms`` for a
        booked slot, a plain refund for one granted now."""
        keys = [key] + ([policy.meta] if policy.meta is not None else [])
        args = _reservation.give_back_args(policy.args() + ["COST", str(cost)], decision)
        backend = decision.backend
        assert backend is not None  # a grant came from a server
        await self._run(self._send, backend, "RL.REFUND", "rl_refund", False, keys, args)

    async def _reserve(self, key: Key, policy: Policy, cost: int, name: Optional[str], wait_ms: int) -> Decision:
        """One ``RL.ADMIT ... RESERVE wait_ms``: the decision with its
        ``delay_ms`` and ``at_ms``. A grant fewer replicas confirm than
        asked is given back (``AT at_ms`` for a booked slot)."""
        keys = [key] + ([policy.meta] if policy.meta is not None else [])
        args = policy.args() + ["COST", str(cost)]
        words = _reservation.reserve_args(args, wait_ms)
        reply, acks, backend = await self._request("RL.ADMIT", "rl_admit", False, keys, words, wait=cost > 0)
        decision = _reservation.parse_reservation(reply, backend, policy.window_ms, name, policy.algorithm)
        if decision.admitted and not decision.shadow and cost > 0 and not self._confirmed(acks):
            await self._send(backend, "RL.REFUND", "rl_refund", False, keys, _reservation.give_back_args(args, decision))
            return _core.unconfirmed_decision(decision, acks, self.wait_replicas)
        return decision

    async def _waiting(self, once: Callable[..., Any], wait_ms: int, *args: Any) -> Any:
        """``once(*args, block_ms)`` waiting up to ``wait_ms`` (a lease):
        one BLOCK call on the module, tries on the library."""
        if await self._ensure_backend() == "module":
            return await once(*args, wait_ms)
        return await self._retrying(once, wait_ms, *args)

    async def _retrying(self, once: Callable[..., Any], wait_ms: int, *args: Any) -> Any:
        """``once(*args)`` until admitted (acquired), never admissible
        (retry_after_ms -1) or out of time, sleeping retry_after_ms times a
        random factor in [1, 1.5) between tries."""
        deadline = time.monotonic() + wait_ms / 1000
        while True:
            answer = await once(*args)
            granted = answer.admitted if isinstance(answer, Decision) else answer.acquired
            left = deadline - time.monotonic()
            if granted or answer.retry_after_ms < 0 or left <= 0:
                return answer
            await asyncio.sleep(min(max(answer.retry_after_ms, 1) / 1000 * random.uniform(1.0, 1.5), left))

    async def _admit(
        self, key: Key, policy: Policy, cost: int, name: Optional[str], block_ms: Optional[int] = None
    ) -> Decision:
        keys = [key] + ([policy.meta] if policy.meta is not None else [])
        args = policy.args() + ["COST", str(cost)]
        words = args + (["BLOCK", str(block_ms)] if block_ms is not None else [])
        reply, acks, backend = await self._request("RL.ADMIT", "rl_admit", False, keys, words, wait=cost > 0)
        decision = _core.parse_decision(reply, backend, policy.window_ms, name, policy.algorithm)
        # A shadow refusal consumed nothing: no grant to confirm or give back.
        if decision.admitted and not decision.shadow and cost > 0 and not self._confirmed(acks):
            await self._send(backend, "RL.REFUND", "rl_refund", False, keys, args)
            return _core.unconfirmed_decision(decision, acks, self.wait_replicas)
        return decision

    async def admit_all(
        self, keys: Sequence[Key], policies: Sequence[Policy], cost: int = 1, names: Optional[Sequence[Optional[str]]] = None
    ) -> Decisions:
        """One request through several limiters at once (RL.ADMITALL): all
        admitted, or none consumed. ``keys[i]`` takes ``policies[i]``; on a
        cluster they must share a slot (a common ``{hash tag}``)."""
        cost = _options.integer("cost", cost, 0)
        if len(keys) != len(policies) or not keys:
            raise _options.bad("policies", f"one per key ({len(keys)} keys)", list(policies))
        names = list(names) if names is not None else [None] * len(keys)
        windows = [p.window_ms for p in policies]
        # A limit of 0 refuses without a call (in shadow mode too: RL.ADMITALL
        # cannot take it, and the package does not split the call).
        zero = next((i for i, p in enumerate(policies) if p.refuses_all), None)
        if zero is not None:
            decisions = tuple(_core.refused_by_zero(w, n) for w, n in zip(windows, names))
            return Decisions(False, zero, -1, decisions)
        counters = [self._key(k) for k in keys]
        try:
            return await self._run(self._admit_all, counters, list(policies), cost, names)
        except Exception as e:
            if not _core.is_unreachable(e):
                raise
            decisions = tuple(
                _core.failed_decision(self.failure, p.limit, p.window_ms, e, n) for p, n in zip(policies, names)
            )
            admitted = self.failure == "open"
            retry = 0 if admitted else _core.FAIL_CLOSED_RETRY_MS
            return Decisions(admitted, None if admitted else 0, retry, decisions, "unavailable", e)

    async def _admit_all(self, counters: List[Key], policies: List[Policy], cost: int, names: List[Optional[str]]) -> Decisions:
        windows = [p.window_ms for p in policies]

        def words(backend: str) -> Tuple[Any, ...]:
            return _core.admit_all_command(backend, counters, policies, cost)

        reply, acks, backend = await self._request_words(words, counters[0], cost > 0)
        decisions = _core.parse_decisions(reply, backend, windows, names, [p.algorithm for p in policies])
        if decisions.admitted and cost > 0 and not self._confirmed(acks):
            for counter, policy, part in zip(counters, policies, decisions.decisions):
                if part.shadow:
                    continue  # a shadow refusal consumed nothing
                keys = [counter] + ([policy.meta] if policy.meta is not None else [])
                args = policy.args() + ["COST", str(cost)]
                await self._send(backend, "RL.REFUND", "rl_refund", False, keys, args)
            parts = tuple(_core.unconfirmed_decision(d, acks, self.wait_replicas) for d in decisions.decisions)
            return Decisions(False, 0, _core.FAIL_CLOSED_RETRY_MS, parts, backend, parts[0].error)
        return decisions

    async def refund(
        self,
        key: Key,
        limit: Optional[int] = None,
        window_ms: Optional[int] = None,
        algorithm: Optional[str] = None,
        burst: Optional[int] = None,
        cost: int = 1,
        meta: Optional[Key] = None,
        *,
        shadow: bool = False,
        penalty: Optional[int] = None,
        align: bool = False,
        calendar: Optional[str] = None,
        tz: Optional[str] = None,
        escalate: Optional[int] = None,
    ) -> Decision:
        """Gives back ``cost``: the state afterwards, as a peek sees it
        (a penalty holds: a refund does not lift it)."""
        policy = Policy(limit, window_ms, algorithm, burst, meta, shadow, penalty, align, calendar, tz, escalate)
        cost = _options.integer("cost", cost, 0)
        if policy.refuses_all:
            return _core.refused_by_zero(window_ms, None)
        args = policy.args() + ["COST", str(cost)]
        reply, _, backend = await self._run(self._request, "RL.REFUND", "rl_refund", False, self._keys(key, meta), args)
        return _core.parse_decision(reply, backend, window_ms, None, algorithm)

    async def ttl(
        self,
        key: Key,
        limit: Optional[int] = None,
        window_ms: Optional[int] = None,
        algorithm: Optional[str] = None,
        burst: Optional[int] = None,
        meta: Optional[Key] = None,
        *,
        shadow: bool = False,
        penalty: Optional[int] = None,
        align: bool = False,
        calendar: Optional[str] = None,
        tz: Optional[str] = None,
        escalate: Optional[int] = None,
    ) -> int:
        """The back-off in ms a request of cost 1 would be told now; 0 if it
        would pass; -1 if it never can (a limit of 0). A held penalty
        counts."""
        policy = Policy(limit, window_ms, algorithm, burst, meta, shadow, penalty, align, calendar, tz, escalate)
        if policy.refuses_all:
            return -1
        reply, _, _ = await self._run(self._request, "RL.TTL", "rl_ttl", True, self._keys(key, meta), policy.args())
        return _core.to_int(reply)

    async def reset(self, key: Key) -> bool:
        """Deletes the limiter's state: True if there was one."""
        reply, _, _ = await self._run(self._request, "RL.RESET", "rl_reset", False, [self._key(key)], [])
        return _core.to_int(reply) == 1

    # -- leases ------------------------------------------------------------------
    # No failure policy: an unreachable Valkey raises LimiterTimeout or the
    # client's connection error, since no slot can be promised without it.

    async def acquire(
        self,
        key: Key,
        limit: Optional[int] = None,
        ttl_ms: Optional[int] = None,
        meta: Optional[Key] = None,
        lease_id: Optional[str] = None,
        wait_ms: Optional[int] = None,
        shadow: bool = False,
    ) -> Lease:
        """Takes one of ``limit`` slots on ``key`` for ``ttl_ms`` (RL.ACQUIRE).
        ``wait_ms``: wait up to that long for a slot: BLOCK on the module
        (first come first served; it holds its connection while it waits),
        sleeping ``retry_after_ms`` with jitter and trying again on the
        library (a later caller may take a freed slot first).
        ``lease_id`` names the lease (a job id, say; re-acquiring it renews
        it); else the server makes one. Refused, ``acquired`` is False and
        ``retry_after_ms`` says when the earliest lease ends by itself. No
        ``limit`` (and no ``max`` in the META hash): no limit; ``limit=0``
        is an error. ``shadow=True`` (SHADOW) trials the ceiling: never
        refused, a would-be refusal is acquired with ``shadow`` True (and
        its wait) but takes no lease."""
        args = _core.lease_args(limit, ttl_ms, lease_id, shadow)
        if wait_ms is not None:
            wait_ms = _options.integer("wait_ms", wait_ms, 1, 2**31 - 1)
            return await self._run_waiting(wait_ms, self._waiting, self._acquire, wait_ms, self._keys(key, meta), args)
        return await self._run(self._acquire, self._keys(key, meta), args)

    async def _acquire(self, keys: List[Key], args: List[str], block_ms: Optional[int] = None) -> Lease:
        words = args + (["BLOCK", str(block_ms)] if block_ms is not None else [])
        reply, acks, backend = await self._request("RL.ACQUIRE", "rl_acquire", False, keys, words, wait=True)
        lease = _core.parse_lease(reply, backend)
        # A shadow refusal took no lease: nothing to confirm.
        if lease.acquired and not lease.shadow and lease.limit > 0 and not self._confirmed(acks):
            assert lease.lease_id is not None
            await self._send(backend, "RL.RELEASE", "rl_release", False, keys[:1], [lease.lease_id])
            return _core.unconfirmed_lease(lease, acks, self.wait_replicas)
        return lease

    async def release(self, key: Key, lease_id: str) -> bool:
        """Ends the lease (RL.RELEASE): True if it was live, False if it had
        expired, was released already, or is unknown."""
        args = [_core.check_lease_id(lease_id)]
        reply, _, _ = await self._run(self._request, "RL.RELEASE", "rl_release", False, [self._key(key)], args)
        return _core.to_int(reply) == 1

    async def extend(self, key: Key, lease_id: str, ttl_ms: int) -> bool:
        """Moves a live lease's deadline to now + ``ttl_ms`` (RL.EXTEND).
        False: the lease is no longer live and its holder must stop."""
        args = [_core.check_lease_id(lease_id), "TTL", str(_options.integer("ttl_ms", ttl_ms, 1))]
        reply, _, _ = await self._run(self._request, "RL.EXTEND", "rl_extend", False, [self._key(key)], args)
        return _core.to_int(reply) == 1

    async def in_flight(self, key: Key) -> int:
        """The number of live leases on ``key`` (RL.INFLIGHT; reads only)."""
        reply, _, _ = await self._run(self._request, "RL.INFLIGHT", "rl_inflight", True, [self._key(key)], [])
        return _core.to_int(reply)

    def lease(
        self,
        key: Key,
        limit: Optional[int] = None,
        ttl_ms: Optional[int] = None,
        meta: Optional[Key] = None,
        lease_id: Optional[str] = None,
        heartbeat: bool = True,
        shadow: bool = False,
    ) -> "AsyncHeldLease":
        """A context manager around one lease::

            async with limiter.lease("gpu", limit=4, ttl_ms=30_000) as held:
                await run(job)

        Entering acquires, or raises ``LeaseRefused`` (with
        ``retry_after_ms``) without running the block. While the block runs,
        the heartbeat extends the lease every ``ttl_ms / 3``
        (``heartbeat=False``: none, the lease lasts ``ttl_ms``): a task
        under asyncio, a thread otherwise. Leaving releases it, on an
        exception too. If an extend finds the lease gone, ``held.lost``
        turns True (``held.check()`` raises) and leaving the block raises
        ``LeaseLost``, unless another exception is under way; under asyncio
        the block is also cancelled at its next await, with ``LeaseLost``
        in place of the cancellation. A release that finds the lease
        expired raises ``LeaseLost`` too. ``shadow=True``: never refused; on
        a shadow refusal the block runs with no lease taken, so there is
        nothing to extend or release."""
        _core.lease_args(limit, ttl_ms, lease_id, shadow)
        interval = _core.heartbeat_s(ttl_ms, heartbeat)
        acquire = dict(limit=limit, ttl_ms=ttl_ms, meta=meta, lease_id=lease_id, shadow=shadow)
        return AsyncHeldLease(self, key, acquire, interval)


class AsyncHeldLease:
    """``lease(...)``'s context manager; inside the block: ``lease`` (the
    RL.ACQUIRE answer), ``id``, ``lost`` and ``check()``."""

    def __init__(self, limiter: AsyncLimiter, key: Key, acquire: dict, interval: Optional[float]) -> None:
        self._limiter = limiter
        self.key = key
        self._acquire = acquire
        self._interval = interval
        self._beats: Optional[AsyncBeats] = None
        self._released_late = False
        self.lease: Optional[Lease] = None

    @property
    def id(self) -> Optional[str]:
        return self.lease.lease_id if self.lease else None

    @property
    def lost(self) -> bool:
        """True once a heartbeat (or the release) found the lease no longer live."""
        return self._released_late or (self._beats is not None and self._beats.lost)

    def check(self) -> None:
        """Raises ``LeaseLost`` if the lease is lost: call it between steps."""
        if self.lost:
            raise LeaseLost(self.key, self.id)

    async def __aenter__(self) -> "AsyncHeldLease":
        lease = await self._limiter.acquire(self.key, **self._acquire)
        if not lease.acquired:
            raise LeaseRefused(self.key, lease)
        self.lease = lease
        # No limit, or a shadow refusal: nothing was stored, so nothing to
        # keep alive.
        if self._interval is not None and lease.limit > 0 and not lease.shadow:
            self._beats = AsyncBeats(self._interval, self._beat)
        return self

    async def _beat(self) -> bool:
        assert self.lease is not None and self.lease.lease_id is not None
        return await self._limiter.extend(self.key, self.lease.lease_id, self._acquire["ttl_ms"])

    async def __aexit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        interrupted = False
        if self._beats is not None:
            interrupted = await self._beats.stop(exc_type)
        assert self.lease is not None and self.lease.lease_id is not None
        if self.lease.limit > 0 and not self.lease.shadow and not self.lost:
            try:
                # False: the lease ran out before the block ended.
                if not await self._limiter.release(self.key, self.lease.lease_id):
                    self._released_late = True
            except Exception:
                # Never mask the block's own exception; the lease ends at
                # its deadline anyway.
                if exc_type is None:
                    raise
        if interrupted:
            raise LeaseLost(self.key, self.id) from exc
        if self.lost and exc_type is None:
            raise LeaseLost(self.key, self.id)
