"""The pure core of waiting (issue 38): which way a ``wait`` goes, the
words of a reservation (RL.ADMIT ... RESERVE max_ms) and of its cancel
(RL.REFUND ... AT at_ms), the 7-field reply read into a Decision, and how
long to sleep on a booked slot. No I/O, no clocks: _aio (and _sync) call
the server, _concurrency sleeps. The Node package's lib/reservation.js
follows the same rules."""

from __future__ import annotations

import re
from dataclasses import replace
from typing import Any, List, Optional, Sequence

from . import _core
from ._core import Decision

# The algorithms whose slots have a time, so the server can book one.
BOOKING_ALGORITHMS = ("gcra", "token", "leaky")
RESERVATION_FIELDS = _core.FIELDS + ("delay_ms", "at_ms")

_UNSUPPORTED = re.compile(r"RESERVE needs|unknown option '?RESERVE", re.IGNORECASE)


def wait_mode(algorithm: Optional[str], meta: Any, backend: str, block: bool) -> str:
    """How a wait goes: "block" (RL.ADMIT ... BLOCK: only where the module
    is loaded and the caller asked for it), "reserve" (one RL.ADMIT ...
    RESERVE, then a local sleep until the slot), "retry" (a window, fixed
    by default or sliding, cannot book a slot in a later window: sleep
    ``retry_after_ms`` and try again), or "reserve-or-retry" (the algorithm
    comes from a META hash: RESERVE, and "retry" if the server answers that
    it cannot book)."""
    if block and backend == "module":
        return "block"
    if algorithm is not None:
        return "reserve" if algorithm in BOOKING_ALGORITHMS else "retry"
    return "retry" if meta is None else "reserve-or-retry"


def reserve_args(args: Sequence[str], wait_ms: int) -> List[str]:
    """RL.ADMIT's arguments with ``RESERVE wait_ms``."""
    return [*args, "RESERVE", str(wait_ms)]


def give_back_args(args: Sequence[str], decision: Decision) -> List[str]:
    """The arguments that give back a grant: the call's own policy options
    and COST (``args``), and ``AT at_ms`` for a slot booked ahead
    (``delay_ms`` > 0), which gives back only what later bookings have not
    overtaken. A grant for now is given back with a plain refund."""
    if decision.delay_ms is not None and decision.delay_ms > 0:
        return [*args, "AT", str(decision.at_ms)]
    return list(args)


def is_reserve_unsupported(e: BaseException) -> bool:
    """Whether an error reply says that RESERVE cannot apply here (a
    window's algorithm, or a server without RESERVE)."""
    return _UNSUPPORTED.search(str(e)) is not None


def parse_reservation(
    reply: Any, backend: str, window_ms: Optional[int], name: Optional[str] = None, algorithm: Optional[str] = None
) -> Decision:
    """RL.ADMIT ... RESERVE's reply: the usual five fields, then
    ``delay_ms`` and ``at_ms`` (a RESP2 array of 7 or the module's RESP3
    map), as a Decision carrying both (-1 and -1 on a refusal)."""
    if isinstance(reply, dict):
        by_name = {_core.text(k): v for k, v in reply.items()}
        if not all(n in by_name for n in RESERVATION_FIELDS):
            raise ValueError(f"unexpected RL.ADMIT ... RESERVE reply {reply!r}")
        delay, at = by_name.pop("delay_ms"), by_name.pop("at_ms")
        decision = _core.parse_decision(by_name, backend, window_ms, name, algorithm)
    elif isinstance(reply, (list, tuple)) and len(reply) == len(RESERVATION_FIELDS):
        delay, at = reply[5], reply[6]
        decision = _core.parse_decision(list(reply[:5]), backend, window_ms, name, algorithm)
    else:
        raise ValueError(f"unexpected RL.ADMIT ... RESERVE reply {reply!r}")
    return replace(decision, delay_ms=_core.to_int(delay), at_ms=_core.to_int(at))


def sleep_s(decision: Decision) -> float:
    """Seconds to sleep on a decision before going ahead: the server's
    ``delay_ms`` for a booked grant, counted from the reply's arrival (the
    server read its clock before it answered, so the sleep never ends
    before ``at_ms`` by the server's clock); 0 otherwise."""
    if decision.admitted and not decision.shadow and decision.delay_ms is not None and decision.delay_ms > 0:
        return decision.delay_ms / 1000
    return 0.0
