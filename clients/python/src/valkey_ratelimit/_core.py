"""The vocabulary both limiters share: the Decision, the policy options,
how each backend spells a call, how a reply is read, and which failures
mean "Valkey is unreachable". No I/O here: _sync and _aio send."""

from __future__ import annotations

import base64
import math
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Sequence, Tuple

ALGORITHMS = ("fixed", "sliding", "token", "gcra", "leaky")
BACKENDS = ("auto", "module", "functions")
FAILURE_POLICIES = ("open", "closed")
# How long a fail-closed refusal tells the caller to wait.
FAIL_CLOSED_RETRY_MS = 1000
# Error replies of a server that is there but cannot answer now: treated as
# unreachable, like a refused connection or a timeout.
UNAVAILABLE_CODES = ("LOADING", "BUSY", "MASTERDOWN", "CLUSTERDOWN", "TRYAGAIN")
# The problem type the RateLimit header fields draft registers for a 429.
QUOTA_EXCEEDED_TYPE = "https://iana.org/assignments/http-problem-types#quota-exceeded"
QUOTA_EXCEEDED_TITLE = "Request cannot be satisfied as assigned quota has been exceeded"

LOAD_HINT = (
    "the valkey-ratelimit module is not loaded and neither is its FUNCTION library: "
    "load functions/ratelimit.lua (`make functions HOST=.. PORT=..`, or "
    '`valkey-cli FUNCTION LOAD "$(cat functions/ratelimit.lua)"`; on a cluster '
    "scripts/load-functions-cluster.sh), or pass its source as library= "
    "to have this client load it"
)

FIELDS = ("admitted", "limit", "remaining", "retry_after_ms", "reset_after_ms")


class BackendMissingError(RuntimeError):
    """Neither the module nor the FUNCTION library is on the server."""

    def __init__(self) -> None:
        super().__init__(LOAD_HINT)


class LimiterTimeout(TimeoutError):
    """Valkey did not answer within the limiter's timeout."""


def _ceil_seconds(ms: int) -> int:
    return math.ceil(ms / 1000)


@dataclass(frozen=True)
class Decision:
    """One limiter answer. ``retry_after_ms``: refused, ms until the same
    call would pass (-1: never); admitted, 0 (``leaky``: the delay).
    ``reset_after_ms``: ms until the limiter is back to its full budget."""

    admitted: bool
    limit: int
    remaining: int
    retry_after_ms: int
    reset_after_ms: int
    #: The policy's window, for the ``w`` of RateLimit-Policy.
    window_ms: Optional[int] = None
    #: "module" or "functions"; "unavailable" when the failure policy answered.
    backend: Optional[str] = None
    #: Why Valkey could not answer, when the failure policy did.
    error: Optional[BaseException] = field(default=None, compare=False)

    def headers(
        self,
        name: str = "default",
        window_ms: Optional[int] = None,
        partition_key: Optional[bytes] = None,
    ) -> Dict[str, str]:
        """The IETF RateLimit header fields (draft-ietf-httpapi-ratelimit-headers):
        ``RateLimit-Policy`` (q, w) and ``RateLimit`` (r, t), with ``pk`` when a
        partition key is given, plus ``Retry-After`` in whole seconds, rounded
        up, on a refusal that waiting can cure. ``t`` is the effective window:
        until the reset when admitted, until the retry when refused (so that
        Retry-After never points before its end). A decision of the failure
        policy advertises no quota, only its Retry-After."""
        if '"' in name or "\\" in name:
            raise ValueError("policy name must not contain '\"' or '\\'")
        out: Dict[str, str] = {}
        window = self.window_ms if window_ms is None else window_ms
        if self.limit > 0 and self.error is None:
            pk = ""
            if partition_key is not None:
                pk = ";pk=:" + base64.b64encode(partition_key).decode("ascii") + ":"
            policy = f'"{name}";q={self.limit}'
            if window is not None:
                policy += f";w={max(1, _ceil_seconds(window))}"
            out["RateLimit-Policy"] = policy + pk
            waits = not self.admitted and self.retry_after_ms >= 0
            t = _ceil_seconds(self.retry_after_ms if waits else self.reset_after_ms)
            out["RateLimit"] = f'"{name}";r={self.remaining};t={t}' + pk
        if not self.admitted and self.retry_after_ms >= 0:
            out["Retry-After"] = str(max(1, _ceil_seconds(self.retry_after_ms)))
        return out

    def problem(self, name: str = "default") -> Dict[str, Any]:
        """The application/problem+json body of a refusal."""
        return {
            "type": QUOTA_EXCEEDED_TYPE,
            "title": QUOTA_EXCEEDED_TITLE,
            "status": 429,
            "violated-policies": [name],
        }


def _check_int(name: str, value: Any, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}")
    return value


def policy_args(
    limit: Optional[int],
    window_ms: Optional[int],
    algorithm: Optional[str] = None,
    burst: Optional[int] = None,
    meta: Optional[str] = None,
) -> List[str]:
    """The policy options, in the order both backends take them. With a
    META hash, limit and window may come from its fields instead (inline
    options win over the hash)."""
    args: List[str] = []
    if algorithm is not None:
        if algorithm not in ALGORITHMS:
            raise ValueError(f"algorithm must be one of {', '.join(ALGORITHMS)}")
        args += ["ALGO", algorithm]
    if meta is None or limit is not None:
        args += ["LIMIT", str(_check_int("limit", limit, 0))]
    if meta is None or window_ms is not None:
        args += ["WINDOW", str(_check_int("window_ms", window_ms, 1))]
    if burst is not None:
        args += ["BURST", str(_check_int("burst", burst, 0))]
    return args


def cost_args(cost: int) -> List[str]:
    return ["COST", str(_check_int("cost", cost, 0))]


def command(
    backend: str, module_name: str, function: str, read_only: bool, keys: Sequence[str], args: Sequence[str]
) -> Tuple[str, ...]:
    """The words of one call: ``RL.X key ... [META metakey]`` for the module,
    ``FCALL[_RO] rl_x numkeys key [metakey] ...`` for the library."""
    if backend == "module":
        meta = ["META", keys[1]] if len(keys) > 1 else []
        return (module_name, keys[0], *args, *meta)
    return ("FCALL_RO" if read_only else "FCALL", function, str(len(keys)), *keys, *args)


def route(client: Any, key: str) -> Dict[str, Any]:
    """execute_command's routing for a call on ``key``: on a cluster client,
    the node owning its slot. Left to itself, valkey-py's cluster client asks
    ``COMMAND GETKEYS`` before every call (RL.* and FCALL report movable
    keys); MOVED and ASK are still followed while slots migrate."""
    if hasattr(client, "get_node_from_key"):
        return {"target_nodes": client.get_node_from_key(key)}
    return {}


def _text(v: Any) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


def to_int(v: Any) -> int:
    if isinstance(v, bool) or not isinstance(v, (int, bytes, str)):
        raise ValueError(f"expected an integer in the reply, got {v!r}")
    return int(v)


def parse_decision(reply: Any, backend: str, window_ms: Optional[int]) -> Decision:
    """RL.ADMIT / RL.REFUND reply: a RESP2 array or the module's RESP3 map."""
    if isinstance(reply, dict):
        by_name = {_text(k): v for k, v in reply.items()}
        values = [by_name[f] for f in FIELDS]
    elif isinstance(reply, (list, tuple)) and len(reply) == 5:
        values = list(reply)
    else:
        raise ValueError(f"unexpected limiter reply {reply!r}")
    admitted, limit, remaining, retry, reset = (to_int(v) for v in values)
    return Decision(admitted == 1, limit, remaining, retry, reset, window_ms, backend)


def failed_decision(policy: str, limit: Optional[int], window_ms: Optional[int], error: BaseException) -> Decision:
    """The failure policy's answer: open admits, closed refuses."""
    limit = limit or 0
    if policy == "open":
        return Decision(True, limit, limit, 0, 0, window_ms, "unavailable", error)
    return Decision(False, limit, 0, FAIL_CLOSED_RETRY_MS, 0, window_ms, "unavailable", error)


def is_unknown_command(e: BaseException) -> bool:
    return "unknown command" in str(e).lower()


def is_function_missing(e: BaseException) -> bool:
    return "function not found" in str(e).lower()


def is_unreachable(e: BaseException) -> bool:
    """Valkey could not be reached or cannot answer now: the failure policy
    applies. Any other error reply is raised."""
    from valkey import exceptions as vx

    if isinstance(e, (LimiterTimeout, vx.ConnectionError, vx.TimeoutError, OSError)):
        return True
    if isinstance(e, vx.ResponseError):
        return str(e).split(" ", 1)[0] in UNAVAILABLE_CODES
    return False


def check_options(backend: str, failure: str, timeout: Optional[float]) -> None:
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {', '.join(BACKENDS)}")
    if failure not in FAILURE_POLICIES:
        raise ValueError("failure must be 'open' or 'closed'")
    if timeout is not None and not timeout > 0:
        raise ValueError("timeout must be a positive number of seconds, or None")


PROBE_KEY = "valkey-ratelimit:probe"


# --- Leases (RL.ACQUIRE / RL.RELEASE / RL.EXTEND / RL.INFLIGHT) -------------

LEASE_FIELDS = ("acquired", "limit", "in_flight", "retry_after_ms", "lease_id")


@dataclass(frozen=True)
class Lease:
    """One RL.ACQUIRE answer. ``in_flight``: live leases after the call.
    ``retry_after_ms``: refused, ms until the earliest live lease ends by
    itself (the soonest a slot can free up); acquired, 0. ``lease_id``: the
    id to release or extend, None when refused. ``limit`` 0 means unlimited:
    acquired, and nothing was written (there is nothing to release)."""

    acquired: bool
    limit: int
    in_flight: int
    retry_after_ms: int
    lease_id: Optional[str]
    #: "module" or "functions".
    backend: Optional[str] = None


class LeaseRefused(Exception):
    """``limiter.lease(...)`` found every slot taken: the body did not run.
    ``retry_after_ms`` is when the earliest live lease ends by itself."""

    def __init__(self, key: str, lease: Lease) -> None:
        super().__init__(
            f"lease on {key!r} refused: {lease.in_flight} of {lease.limit} in flight, "
            f"retry after {lease.retry_after_ms} ms"
        )
        self.key = key
        self.lease = lease
        self.retry_after_ms = lease.retry_after_ms


class LeaseLost(Exception):
    """The heartbeat found the lease no longer live (RL.EXTEND answered 0):
    it expired or was removed, and its slot may be someone else's. Raised
    when the ``with`` block ends, or, under ``async with``, into the block
    itself, which is cancelled at its next await."""

    def __init__(self, key: str, lease_id: Optional[str]) -> None:
        super().__init__(f"lease {lease_id!r} on {key!r} was lost: its slot may be someone else's now")
        self.key = key
        self.lease_id = lease_id


def lease_args(limit: Optional[int], ttl_ms: Optional[int], lease_id: Optional[str]) -> List[str]:
    """RL.ACQUIRE's options, as both backends take them (META goes in keys)."""
    args: List[str] = []
    if limit is not None:
        args += ["LIMIT", str(_check_int("limit", limit, 1))]
    if ttl_ms is not None:
        args += ["TTL", str(_check_int("ttl_ms", ttl_ms, 1))]
    if lease_id is not None:
        args += ["ID", check_lease_id(lease_id)]
    return args


def check_lease_id(lease_id: Any) -> str:
    if not isinstance(lease_id, str) or lease_id == "":
        raise ValueError(f"lease_id must be a non-empty string, got {lease_id!r}")
    return lease_id


def ttl_arg(ttl_ms: int) -> List[str]:
    return ["TTL", str(_check_int("ttl_ms", ttl_ms, 1))]


def parse_lease(reply: Any, backend: str) -> Lease:
    """RL.ACQUIRE reply: a RESP2 array or the module's RESP3 map."""
    if isinstance(reply, dict):
        by_name = {_text(k): v for k, v in reply.items()}
        values = [by_name.get(f) for f in LEASE_FIELDS]
    elif isinstance(reply, (list, tuple)) and len(reply) == 5:
        values = list(reply)
    else:
        raise ValueError(f"unexpected RL.ACQUIRE reply {reply!r}")
    acquired, limit, in_flight, retry = (to_int(v) for v in values[:4])
    lease_id = None if values[4] is None else _text(values[4])
    return Lease(acquired == 1, limit, in_flight, retry, lease_id, backend)


def heartbeat_s(ttl_ms: Optional[int], heartbeat: bool) -> Optional[float]:
    """Seconds between two RL.EXTENDs: a third of the TTL, so that two beats
    may fail before the lease runs out. None when there is no heartbeat."""
    if not heartbeat:
        return None
    if ttl_ms is None:
        raise ValueError("the heartbeat extends the lease by ttl_ms: give ttl_ms, or heartbeat=False")
    return _check_int("ttl_ms", ttl_ms, 1) / 3000
