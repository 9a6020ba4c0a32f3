"""The pure core both limiters share: the answers (Decision, Decisions,
Lease), their header fields and problem bodies, the words of each call on
either backend, how a reply is read, and which failures mean "Valkey is
unreachable". No I/O here: _aio (and _sync, generated from it) send."""

from __future__ import annotations

import base64
import math
import re
from dataclasses import dataclass, field, replace
import inspect
from typing import Any, Dict, List, Optional, Sequence, Tuple

from . import _options
from ._options import Key

# How long a fail-closed refusal tells the caller to wait.
FAIL_CLOSED_RETRY_MS = 1000
# Error replies of a server that is there but cannot answer now: treated as
# unreachable, like a refused connection or a timeout.
UNAVAILABLE_CODES = ("LOADING", "BUSY", "MASTERDOWN", "CLUSTERDOWN", "TRYAGAIN")
# The problem type the RateLimit header fields draft registers for a 429.
QUOTA_EXCEEDED_TYPE = "https://iana.org/assignments/http-problem-types#quota-exceeded"
QUOTA_EXCEEDED_TITLE = "Request cannot be satisfied as assigned quota has been exceeded"
UNAVAILABLE_TITLE = "The rate limiter cannot reach its store"

FIELDS = ("admitted", "limit", "remaining", "retry_after_ms", "reset_after_ms")
ALL_FIELDS = ("admitted", "refused_by", "retry_after_ms", "limiters")
LEASE_FIELDS = ("acquired", "limit", "in_flight", "retry_after_ms", "lease_id")
PROBE_KEY = "valkey-ratelimit:probe"


class BackendMissingError(RuntimeError):
    """Neither the module nor the FUNCTION library is on the server, and
    this client could not load the library: the message names the command
    that does."""


class LimiterTimeout(TimeoutError):
    """Valkey did not answer within the limiter's deadline."""


class ReplicationUnconfirmed(RuntimeError):
    """``wait_replicas``: fewer replicas than asked confirmed a grant within
    ``wait_timeout_ms``; with ``unconfirmed="refuse"`` it was given back."""


def _ceil_seconds(ms: int) -> int:
    return math.ceil(ms / 1000)


@dataclass(frozen=True)
class Decision:
    """One limiter's answer. ``retry_after_ms``: refused, ms until the same
    call would pass (-1: never); admitted, 0 (``leaky``: the delay).
    ``reset_after_ms``: ms until the limiter is back to its full budget.
    ``remaining``: requests of cost 1 that would be admitted now."""

    admitted: bool
    limit: int
    remaining: int
    retry_after_ms: int
    reset_after_ms: int
    #: The policy's window, for the ``w`` of RateLimit-Policy.
    window_ms: Optional[int] = None
    #: "module" or "functions"; "unavailable" when the failure policy
    #: answered; None when no call was needed (a limit of 0).
    backend: Optional[str] = None
    #: Why Valkey could not answer (the failure policy answered), or
    #: ReplicationUnconfirmed: the HTTP layers then answer 503, not 429.
    error: Optional[BaseException] = field(default=None, compare=False)
    #: The RateLimit-Policy name the limiter gave it.
    name: Optional[str] = None
    #: A shadow refusal (``shadow=True``, or a META hash's ``shadow 1``):
    #: admitted, though the limit would have refused it; ``retry_after_ms``
    #: is the would-be wait. See ``is_shadow_refusal``.
    shadow: bool = False
    #: A wait that booked its turn (RESERVE): ms the caller slept before
    #: going ahead (0: admitted at once), and the slot's time by the
    #: server's clock, ms since the epoch; both -1 when it could not be
    #: booked within ``wait_ms``; None when no booking was asked.
    delay_ms: Optional[int] = None
    at_ms: Optional[int] = None

    @property
    def policy_name(self) -> str:
        """The given name, else ``"<q>-in-<w>sec"`` (express-rate-limit's
        draft-8 naming), else ``"default"`` when the window is not known
        here (it came from a META hash)."""
        if self.name is not None:
            return self.name
        if self.window_ms is not None:
            return f"{self.limit}-in-{max(1, _ceil_seconds(self.window_ms))}sec"
        return "default"

    def headers(
        self,
        name: Optional[str] = None,
        window_ms: Optional[int] = None,
        partition_key: Optional[bytes] = None,
    ) -> Dict[str, str]:
        """The IETF RateLimit header fields (draft-ietf-httpapi-ratelimit-headers)."""
        d = self
        if window_ms is not None:
            d = replace(d, window_ms=window_ms)
        if name is not None:
            d = replace(d, name=name)
        return header_fields([d], d.retry_after_ms, partition_key)

    def problem(self, name: Optional[str] = None) -> Dict[str, Any]:
        """The application/problem+json body of a refusal."""
        return problem_body([name if name is not None else self.policy_name], self.error)


@dataclass(frozen=True)
class Decisions:
    """Several limiters decided together (RL.ADMITALL): all admitted, or
    none consumed. ``refused_by``: the index of the limiter with the longest
    back-off, None when admitted; ``retry_after_ms``: that back-off."""

    admitted: bool
    refused_by: Optional[int]
    retry_after_ms: int
    decisions: Tuple[Decision, ...]
    backend: Optional[str] = None
    error: Optional[BaseException] = field(default=None, compare=False)

    @property
    def shadow(self) -> bool:
        """Admitted, though some limiter in shadow mode would have refused."""
        return self.admitted and any(d.shadow for d in self.decisions)

    def headers(self, partition_key: Optional[bytes] = None) -> Dict[str, str]:
        return header_fields(list(self.decisions), self.retry_after_ms, partition_key, self.admitted, self.error)

    def problem(self) -> Dict[str, Any]:
        violated = [d.policy_name for d in self.decisions if not d.admitted] or [
            d.policy_name for d in self.decisions
        ]
        return problem_body(violated, self.error)


def header_fields(
    decisions: Sequence[Decision],
    retry_after_ms: int,
    partition_key: Optional[bytes] = None,
    admitted: Optional[bool] = None,
    error: Optional[BaseException] = None,
) -> Dict[str, str]:
    """``RateLimit-Policy`` (q, w) and ``RateLimit`` (r, t), one list item
    per policy, with ``pk`` when a partition key is given, and
    ``Retry-After`` in whole seconds, rounded up, on a refusal that waiting
    can cure. ``q`` is the most the limiter holds (the bucket, for the
    buckets), ``r`` the requests of cost 1 it would admit now, ``t`` the
    seconds until it is whole again (refused: until the retry, so that
    Retry-After never points before it). A limiter with no limit (the
    server's unlimited) and the failure policy's answers advertise no
    quota, only the Retry-After."""
    if admitted is None:
        admitted = all(d.admitted for d in decisions)
    if error is None:
        error = next((d.error for d in decisions if d.error is not None), None)
    pk = ""
    if partition_key is not None:
        pk = ";pk=:" + base64.b64encode(partition_key).decode("ascii") + ":"
    policies: List[str] = []
    states: List[str] = []
    for d in decisions:
        if error is not None or (d.limit == 0 and d.admitted):
            continue
        name = d.policy_name
        policy = f'"{name}";q={d.limit}'
        if d.window_ms is not None:
            policy += f";w={max(1, _ceil_seconds(d.window_ms))}"
        policies.append(policy + pk)
        waits = not d.admitted and d.retry_after_ms >= 0
        t = _ceil_seconds(d.retry_after_ms if waits else d.reset_after_ms)
        states.append(f'"{name}";r={d.remaining};t={t}' + pk)
    out: Dict[str, str] = {}
    if policies:
        out["RateLimit-Policy"] = ", ".join(policies)
        out["RateLimit"] = ", ".join(states)
    if not admitted and retry_after_ms >= 0:
        out["Retry-After"] = str(max(1, _ceil_seconds(retry_after_ms)))
    return out


def problem_body(violated: List[str], error: Optional[BaseException] = None) -> Dict[str, Any]:
    """A refusal's application/problem+json body: quota-exceeded (429), or,
    when the store could not answer (fail-closed), a plain 503."""
    if error is not None:
        return {"type": "about:blank", "title": UNAVAILABLE_TITLE, "status": 503}
    return {
        "type": QUOTA_EXCEEDED_TYPE,
        "title": QUOTA_EXCEEDED_TITLE,
        "status": 429,
        "violated-policies": violated,
    }


# --- the calls ---------------------------------------------------------------


def command(
    backend: str, module_name: str, function: str, read_only: bool, keys: Sequence[Key], args: Sequence[str]
) -> Tuple[Any, ...]:
    """The words of one call: ``RL.X key ... [META metakey]`` for the module,
    ``FCALL[_RO] rl_x numkeys key [metakey] ...`` for the library."""
    if backend == "module":
        meta = ["META", keys[1]] if len(keys) > 1 else []
        return (module_name, keys[0], *args, *meta)
    return ("FCALL_RO" if read_only else "FCALL", function, str(len(keys)), *keys, *args)


def admit_all_command(backend: str, counters: Sequence[Key], policies: Sequence[Any], cost: int) -> Tuple[Any, ...]:
    """RL.ADMITALL numkeys counter... COST n POLICY ... [META m] ...; the
    library takes each META hash as a key too, after the counters."""
    groups: List[Any] = []
    metas: List[Key] = []
    for policy in policies:
        groups += ["POLICY", *policy.args()]
        if policy.meta is not None:
            groups += ["META", policy.meta]
            if policy.meta not in metas:
                metas.append(policy.meta)
    tail = ["COST", str(cost), *groups]
    if backend == "module":
        return ("RL.ADMITALL", str(len(counters)), *counters, *tail)
    keys = [*counters, *metas]
    return ("FCALL", "rl_admitall", str(len(keys)), *keys, *tail)


def text(v: Any) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


def to_int(v: Any) -> int:
    if isinstance(v, bool) or not isinstance(v, (int, bytes, str)):
        raise ValueError(f"expected an integer in the reply, got {v!r}")
    return int(v)


def _read(reply: Any, names: Tuple[str, ...], what: str) -> Tuple[List[Any], Optional[Dict[str, Any]]]:
    """A RESP2 array or the module's RESP3 map: the values in ``names``
    order, and the map (by field name) when the reply was one."""
    if isinstance(reply, dict):
        by_name = {text(k): v for k, v in reply.items()}
        if all(n in by_name for n in names):
            return [by_name[n] for n in names], by_name
    elif isinstance(reply, (list, tuple)) and len(reply) == len(names):
        return list(reply), None
    raise ValueError(f"unexpected {what} reply {reply!r}")


def _fields(reply: Any, names: Tuple[str, ...], what: str) -> List[Any]:
    """A RESP2 array or the module's RESP3 map, as a list in ``names`` order."""
    return _read(reply, names, what)[0]


def is_shadow_refusal(admitted: bool, retry_after_ms: int, by_name: Optional[Dict[str, Any]], algorithm: Optional[str]) -> bool:
    """Whether a decision is a shadow refusal. One rule, the Node package's
    too: a map reply (RESP3) says it with its ``shadow`` field, present on
    a shadow refusal only; an array reply (RESP2) is one when it is
    admitted with ``retry_after_ms`` -1 (a cost that can never fit) or
    > 0, except for a call that named algorithm "leaky", whose admissions
    carry their delay there (a leaky shadow refusal is told only by the
    module's RESP3 map; the library answers arrays)."""
    if not admitted:
        return False
    if by_name is not None:
        return "shadow" in by_name and to_int(by_name["shadow"]) == 1
    return retry_after_ms == -1 or (retry_after_ms > 0 and algorithm != "leaky")


def parse_decision(
    reply: Any, backend: str, window_ms: Optional[int], name: Optional[str] = None, algorithm: Optional[str] = None
) -> Decision:
    """RL.ADMIT / RL.REFUND reply. ``algorithm``: the one the call named,
    for telling a shadow refusal."""
    values, by_name = _read(reply, FIELDS, "limiter")
    admitted, limit, remaining, retry, reset = (to_int(v) for v in values)
    shadow = is_shadow_refusal(admitted == 1, retry, by_name, algorithm)
    return Decision(admitted == 1, limit, remaining, retry, reset, window_ms, backend, None, name, shadow)


def parse_decisions(
    reply: Any,
    backend: str,
    windows: Sequence[Optional[int]],
    names: Sequence[Optional[str]],
    algorithms: Optional[Sequence[Optional[str]]] = None,
) -> Decisions:
    """RL.ADMITALL reply: admitted, refused_by (1-based, 0 when admitted),
    retry_after_ms, and each limiter's own reply."""
    admitted, refused_by, retry, parts = _fields(reply, ALL_FIELDS, "RL.ADMITALL")
    if not isinstance(parts, (list, tuple)) or len(parts) != len(windows):
        raise ValueError(f"unexpected RL.ADMITALL reply {reply!r}")
    algos = list(algorithms) if algorithms is not None else [None] * len(windows)
    decisions = tuple(parse_decision(p, backend, w, n, a) for p, w, n, a in zip(parts, windows, names, algos))
    by = to_int(refused_by)
    return Decisions(to_int(admitted) == 1, by - 1 if by > 0 else None, to_int(retry), decisions, backend)


def refused_by_zero(window_ms: Optional[int], name: Optional[str], shadow: bool = False) -> Decision:
    """The answer to a limit of 0: nothing may pass, ever; Valkey is not
    asked. In shadow mode, a shadow refusal: admitted, never passable."""
    return Decision(shadow, 0, 0, -1, 0, window_ms, None, None, name, shadow)


def failed_decision(
    policy: str, limit: Optional[int], window_ms: Optional[int], error: BaseException, name: Optional[str] = None
) -> Decision:
    """The failure policy's answer: open admits, closed refuses."""
    limit = limit or 0
    if policy == "open":
        return Decision(True, limit, limit, 0, 0, window_ms, "unavailable", error, name)
    return Decision(False, limit, 0, FAIL_CLOSED_RETRY_MS, 0, window_ms, "unavailable", error, name)


# --- which failures are which --------------------------------------------------


def _names(e: BaseException) -> List[str]:
    return [t.__name__ for t in type(e).__mro__]


def is_unknown_command(e: BaseException) -> bool:
    return "unknown command" in str(e).lower()


def is_function_missing(e: BaseException) -> bool:
    return "function not found" in str(e).lower()


def is_no_permission(e: BaseException) -> bool:
    return str(e).lstrip().upper().startswith("NOPERM") or "noperm" in str(e).lower()


def is_unreachable(e: BaseException) -> bool:
    """Valkey could not be reached or cannot answer now: the failure policy
    applies. Any other error reply is raised. Judged by the exception's
    class names, so valkey-py, redis-py and valkey-glide read alike."""
    if isinstance(e, LimiterTimeout):
        return True
    names = _names(e)
    if any(n in ("ConnectionError", "TimeoutError", "ClosingError", "BusyLoadingError") for n in names):
        return True
    text = str(e).strip()
    if "ResponseError" in names:
        return text.split(" ", 1)[0] in UNAVAILABLE_CODES
    if "RequestError" in names:
        # valkey-glide puts its own words before the server's error.
        return re.search(r"\b(" + "|".join(UNAVAILABLE_CODES) + r")\b", text) is not None
    return False


def unconfirmed_decision(decision: Decision, acks: Optional[int], wanted: int) -> Decision:
    """A grant that fewer than ``wanted`` replicas confirmed, given back:
    refused, with the failure policy's retry."""
    error = ReplicationUnconfirmed(f"{acks} of {wanted} replicas confirmed the grant in time; it was given back")
    return replace(decision, admitted=False, retry_after_ms=FAIL_CLOSED_RETRY_MS, error=error, shadow=False)


def check_client(client: Any, asynchronous: bool) -> None:
    """A valkey-py, redis-py or valkey-glide client of the right flavour."""
    send = getattr(client, "execute_command", None) or getattr(client, "custom_command", None)
    if send is None or isinstance(client, type):
        raise _options.bad("client", "a valkey-py, redis-py or valkey-glide client", client)
    if inspect.iscoroutinefunction(send) != asynchronous:
        rule = (
            "an asyncio client (valkey.asyncio.Valkey, redis.asyncio.Redis, glide.GlideClient) for AsyncLimiter"
            if asynchronous
            else "a synchronous client (valkey.Valkey, redis.Redis, glide_sync.GlideClient) for Limiter"
        )
        raise _options.bad("client", rule, client)


def _crc16(data: bytes) -> int:
    crc = 0
    for byte in data:
        crc ^= byte << 8
        for _ in range(8):
            crc = ((crc << 1) ^ 0x1021) if crc & 0x8000 else crc << 1
            crc &= 0xFFFF
    return crc


def key_slot(key: Key) -> int:
    """The cluster slot of a key (CRC16 of its hash tag, if any, mod 16384)."""
    raw = key.encode() if isinstance(key, str) else key
    start = raw.find(b"{")
    if start >= 0:
        end = raw.find(b"}", start + 1)
        if end > start + 1:
            raw = raw[start + 1 : end]
    return _crc16(raw) % 16384


# --- leases (RL.ACQUIRE / RL.RELEASE / RL.EXTEND / RL.INFLIGHT) -------------


@dataclass(frozen=True)
class Lease:
    """One RL.ACQUIRE answer. ``in_flight``: live leases after the call.
    ``retry_after_ms``: refused, ms until the earliest live lease ends by
    itself (the soonest a slot can free up); acquired, 0. ``lease_id``: the
    id to release or extend, None when refused. ``limit`` 0 in the reply
    means there was no limit (no ``limit`` given and none in the META
    hash): acquired, and nothing was written. ``shadow``: a shadow refusal
    (``shadow=True``, or ``shadow 1`` in the META hash): acquired, with
    ``retry_after_ms`` > 0 and the id it would have had, but the ceiling
    would have refused it and no lease was taken (releasing it is a
    no-op)."""

    acquired: bool
    limit: int
    in_flight: int
    retry_after_ms: int
    lease_id: Optional[str]
    #: "module" or "functions".
    backend: Optional[str] = None
    #: ReplicationUnconfirmed when ``wait_replicas`` refused the grant.
    error: Optional[BaseException] = field(default=None, compare=False)
    shadow: bool = False


class LeaseRefused(Exception):
    """``limiter.lease(...)`` found every slot taken: the body did not run.
    ``retry_after_ms`` is when the earliest live lease ends by itself."""

    def __init__(self, key: Key, lease: Lease) -> None:
        why = f": {lease.error}" if lease.error is not None else ""
        super().__init__(
            f"lease on {key!r} refused: {lease.in_flight} of {lease.limit} in flight, "
            f"retry after {lease.retry_after_ms} ms{why}"
        )
        self.key = key
        self.lease = lease
        self.retry_after_ms = lease.retry_after_ms


class LeaseLost(Exception):
    """The heartbeat found the lease no longer live (RL.EXTEND answered 0):
    it expired or was removed, and its slot may be someone else's. Raised
    when the ``with`` block ends, or, under ``async with``, into the block
    itself, which is cancelled at its next await."""

    def __init__(self, key: Key, lease_id: Optional[str]) -> None:
        super().__init__(f"lease {lease_id!r} on {key!r} was lost: its slot may be someone else's now")
        self.key = key
        self.lease_id = lease_id


def lease_args(limit: Optional[int], ttl_ms: Optional[int], lease_id: Optional[str], shadow: bool = False) -> List[str]:
    """RL.ACQUIRE's options, as both backends take them (META goes in keys).
    ``limit`` left out means no limit; 0 is an error, as on the server."""
    args: List[str] = ["SHADOW"] if _options.flag("shadow", shadow) else []
    if limit is not None:
        args += ["LIMIT", str(_options.integer("limit", limit, 1))]
    if ttl_ms is not None:
        args += ["TTL", str(_options.integer("ttl_ms", ttl_ms, 1))]
    if lease_id is not None:
        args += ["ID", check_lease_id(lease_id)]
    return args


def check_lease_id(lease_id: Any) -> str:
    if not isinstance(lease_id, str) or lease_id == "":
        raise _options.bad("lease_id", "a non-empty str", lease_id)
    return lease_id


def unconfirmed_lease(lease: Lease, acks: Optional[int], wanted: int) -> Lease:
    """An acquired lease fewer than ``wanted`` replicas confirmed, released:
    refused, with the failure policy's retry."""
    error = ReplicationUnconfirmed(f"{acks} of {wanted} replicas confirmed the lease in time; it was released")
    return Lease(False, lease.limit, max(0, lease.in_flight - 1), FAIL_CLOSED_RETRY_MS, None, lease.backend, error)


def parse_lease(reply: Any, backend: str) -> Lease:
    """RL.ACQUIRE reply."""
    values, by_name = _read(reply, LEASE_FIELDS, "RL.ACQUIRE")
    acquired, limit, in_flight, retry = (to_int(v) for v in values[:4])
    lease_id = None if values[4] is None else text(values[4])
    # Only a shadow refusal is acquired with a wait; a map says it too.
    if by_name is not None:
        shadow = acquired == 1 and "shadow" in by_name and to_int(by_name["shadow"]) == 1
    else:
        shadow = acquired == 1 and retry > 0
    return Lease(acquired == 1, limit, in_flight, retry, lease_id, backend, shadow=shadow)


def heartbeat_s(ttl_ms: Optional[int], heartbeat: bool) -> Optional[float]:
    """Seconds between two RL.EXTENDs: a third of the TTL, so that two beats
    may fail before the lease runs out. None when there is no heartbeat."""
    if not heartbeat:
        return None
    if ttl_ms is None:
        raise _options.bad("ttl_ms", "given for the heartbeat (or heartbeat=False)", None)
    return ttl_ms / 3000
