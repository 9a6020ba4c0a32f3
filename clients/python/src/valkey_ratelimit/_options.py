"""Every option a user gives, checked once, where the limiter, middleware
or route limit is built: the rules, the one error they raise, the policy
they make, and the rate strings of the ``limits`` library ("5/minute",
"10 per second", "100/hour;10/second"). Pure: no I/O."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any, List, Optional, Tuple, Union

ALGORITHMS = ("fixed", "sliding", "token", "gcra", "leaky")
BUCKETS = ("token", "gcra", "leaky")
# The algorithms with a window (align, calendar).
WINDOWS = ("fixed", "sliding")
# CALENDAR's periods: the day, the ISO week (from Monday), the month, the year.
CALENDAR_PERIODS = ("day", "week", "month", "year")
# TZ: a fixed offset from UTC, as both backends read it (hours 00 to 23), or
# what has the shape of an IANA zone name (the server knows which exist).
_TZ = re.compile(r"^(?:[+-](?:[01][0-9]|2[0-3]):[0-5][0-9]|[A-Za-z][A-Za-z0-9_+-]*(?:/[A-Za-z0-9_+-]+)*)$")
TZ_RULE = 'a fixed offset from UTC such as "+05:30" or "-08:00", or an IANA zone name such as "Europe/Berlin"'
BACKENDS = ("auto", "module", "functions")
FAILURE_POLICIES = ("open", "closed")
UNCONFIRMED_POLICIES = ("keep", "refuse")
# The FUNCTION library computes in doubles, exact up to here; the module
# takes more, but one rule for both backends.
SAFE_MAX = 2**53 - 1
# Each call's deadline unless the user gives another.
DEFAULT_TIMEOUT_S = 0.25

Key = Union[str, bytes]


class ConfigError(ValueError):
    """An option breaks its rule: ``<option> must be <rule> (got <value>)``.
    Raised when the limiter, middleware or route limit is built (or, for an
    option given as a function of the request, when it answers)."""


def bad(option: str, rule: str, value: Any) -> ConfigError:
    return ConfigError(f"{option} must be {rule} (got {value!r})")


def integer(option: str, value: Any, minimum: int, maximum: int = SAFE_MAX) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not minimum <= value <= maximum:
        raise bad(option, f"an integer from {minimum} to {maximum}", value)
    return value


def flag(option: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise bad(option, "True or False", value)
    return value


def tz(value: Any) -> str:
    if not isinstance(value, str) or not _TZ.match(value):
        raise bad("tz", TZ_RULE, value)
    return value


def optional_integer(option: str, value: Any, minimum: int, maximum: int = SAFE_MAX) -> Optional[int]:
    return None if value is None else integer(option, value, minimum, maximum)


def one_of(option: str, value: Any, choices: Tuple[str, ...]) -> str:
    if not isinstance(value, str) or value not in choices:
        raise bad(option, "one of " + ", ".join(repr(c) for c in choices), value)
    return value


def seconds(option: str, value: Any) -> float:
    """A positive, finite number of seconds."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not (0 < value < math.inf):
        raise bad(option, "a positive number of seconds", value)
    return float(value)


def key(option: str, value: Any) -> Key:
    if not isinstance(value, (str, bytes)) or len(value) == 0:
        raise bad(option, "a non-empty str or bytes", value)
    return value


def prefix(value: Any) -> Key:
    if not isinstance(value, (str, bytes)):
        raise bad("prefix", "a str or bytes", value)
    return value


def join(first: Key, second: Key) -> Key:
    """Two key parts end to end; bytes if either is bytes (str as UTF-8)."""
    if isinstance(first, str) and isinstance(second, str):
        return first + second
    a = first.encode() if isinstance(first, str) else first
    b = second.encode() if isinstance(second, str) else second
    return a + b


_NAME = re.compile(r'^[\x20-\x21\x23-\x5b\x5d-\x7e]+$')


def policy_name(value: Any) -> str:
    """A RateLimit-Policy name: it goes out as a quoted header string."""
    if not isinstance(value, str) or not _NAME.match(value):
        raise bad("name", "non-empty printable ASCII text without '\"' or '\\'", value)
    return value


def library(value: Any) -> Union[bool, str]:
    if isinstance(value, bool) or (isinstance(value, str) and value.startswith("#!lua")):
        return value
    raise bad("library", "True (the bundled copy), False (never load) or a library's source", value)


@dataclass(frozen=True)
class Policy:
    """One limiter's policy, checked: ``limit`` requests per ``window_ms``
    (the rate, for the buckets), ``algorithm``, ``burst`` (buckets only),
    and ``meta``, a META hash whose fields fill in what is left out.
    A ``limit`` of 0 admits nothing: it is refused by the package without
    asking Valkey (to the server, LIMIT 0 means no limit).

    Issue 27's options, passed to the server as they are: ``shadow``
    (decide and keep state as enforced, never refuse), ``penalty`` (ms a
    refusal refuses every call for), ``align`` (windows at multiples of
    ``window_ms`` since the epoch), ``calendar`` (the window is the day,
    week, month or year: no ``window_ms`` then) and ``tz`` (where the
    calendar's boundaries fall, "+05:30"), ``escalate`` (with ``penalty``:
    the ladder's cap in ms; a penalty starting within it of the last one's
    end is twice as long, at most ``escalate``). The combinations the
    server refuses are refused here, before any call."""

    limit: Optional[int] = None
    window_ms: Optional[int] = None
    algorithm: Optional[str] = None
    burst: Optional[int] = None
    meta: Optional[Key] = None
    shadow: bool = False
    penalty: Optional[int] = None
    align: bool = False
    calendar: Optional[str] = None
    tz: Optional[str] = None
    escalate: Optional[int] = None

    def __post_init__(self) -> None:
        optional_integer("limit", self.limit, 0)
        optional_integer("window_ms", self.window_ms, 1)
        optional_integer("burst", self.burst, 0)
        if self.algorithm is not None:
            one_of("algorithm", self.algorithm, ALGORITHMS)
        flag("shadow", self.shadow)
        optional_integer("penalty", self.penalty, 1)
        optional_integer("escalate", self.escalate, 1)
        if self.escalate is not None:
            if self.penalty is None and self.meta is None:
                raise bad(
                    "escalate",
                    "left out without penalty (or a META hash whose penalty field it goes with)",
                    self.escalate,
                )
            if self.penalty is not None and self.escalate < self.penalty:
                raise bad("escalate", f"at least penalty ({self.penalty})", self.escalate)
        flag("align", self.align)
        if self.calendar is not None:
            one_of("calendar", self.calendar, CALENDAR_PERIODS)
        if self.tz is not None:
            tz(self.tz)
        windowed = self.algorithm is None or self.algorithm in WINDOWS
        if self.align and not windowed:
            raise bad("align", f"left out with algorithm {self.algorithm!r} (it applies only to fixed and sliding)", True)
        if self.calendar is not None:
            if not windowed:
                raise bad(
                    "calendar",
                    f"left out with algorithm {self.algorithm!r} (it applies only to fixed and sliding)",
                    self.calendar,
                )
            if self.window_ms is not None:
                raise bad("window_ms", "left out with calendar (the period is the window)", self.window_ms)
            if self.align:
                raise bad("align", "left out with calendar (calendar periods are aligned)", True)
        if self.tz is not None and self.calendar is None and self.meta is None:
            raise bad("tz", "left out without calendar (or a META hash whose calendar field it goes with)", self.tz)
        if self.meta is not None:
            key("meta", self.meta)
        elif self.limit is None or (self.window_ms is None and self.calendar is None):
            missing = "limit" if self.limit is None else "window_ms"
            raise bad(missing, "given when there is no META hash (meta=)", None)
        if self.burst is not None and self.algorithm in ("fixed", "sliding"):
            raise bad("burst", f"left out with algorithm {self.algorithm!r}", self.burst)

    @property
    def refuses_all(self) -> bool:
        return self.limit == 0

    def args(self) -> List[str]:
        """The policy options, as both backends take them (the META hash
        travels as a key)."""
        out: List[str] = []
        if self.algorithm is not None:
            out += ["ALGO", self.algorithm]
        if self.limit is not None:
            out += ["LIMIT", str(self.limit)]
        if self.window_ms is not None:
            out += ["WINDOW", str(self.window_ms)]
        if self.burst is not None:
            out += ["BURST", str(self.burst)]
        if self.shadow:
            out.append("SHADOW")
        if self.penalty is not None:
            out += ["PENALTY", str(self.penalty)]
        if self.align:
            out.append("ALIGN")
        if self.calendar is not None:
            out += ["CALENDAR", self.calendar]
        if self.tz is not None:
            out += ["TZ", self.tz]
        if self.escalate is not None:
            out += ["ESCALATE", str(self.escalate)]
        return out


# --- rate strings, the grammar of the `limits` library ---------------------

_UNIT_S = {"second": 1, "minute": 60, "hour": 3600, "day": 86400, "month": 30 * 86400, "year": 360 * 86400}
_ONE = r"\s*([0-9]+)\s*(?:/|\s*per\s*)\s*([0-9]+)?\s*([a-z]+)\s*"
_SEPARATOR = r"[,;|]"
_MANY = re.compile(rf"^{_ONE}(?:{_SEPARATOR}{_ONE})*$", re.IGNORECASE)
_SINGLE = re.compile(rf"^{_ONE}$", re.IGNORECASE)
RATE_RULE = 'a rate string such as "5/minute", "10 per second" or "100/hour;10/second"'


@dataclass(frozen=True)
class Rate:
    """``limit`` requests per ``window_ms``, from one part of a rate string."""

    limit: int
    window_ms: int


def parse_rates(value: Any, option: str = "rate") -> Tuple[Rate, ...]:
    """``"100/hour;10/second"`` -> (Rate(100, 3600000), Rate(10, 1000)).
    Units: second, minute, hour, day, month (30 days), year (360 days),
    singular or plural, any case; ``"10/5 minutes"`` is 10 per 5 minutes;
    parts are separated by ``;``, ``,`` or ``|``."""
    if not isinstance(value, str) or not _MANY.match(value):
        raise bad(option, RATE_RULE, value)
    rates = []
    for part in re.split(_SEPARATOR, value):
        match = _SINGLE.match(part)
        assert match is not None  # the whole string matched _MANY
        amount, multiples, unit = match.groups()
        unit = unit.lower()
        unit = unit[:-1] if unit.endswith("s") and unit[:-1] in _UNIT_S else unit
        if unit not in _UNIT_S:
            raise bad(option, RATE_RULE + " (units: second, minute, hour, day, month, year)", value)
        count = int(multiples) if multiples else 1
        if count == 0:
            raise bad(option, RATE_RULE + " with a window of at least 1 unit", value)
        rates.append(
            Rate(
                integer(f"{option}'s count", int(amount), 0),
                integer(f"{option}'s window in ms", count * _UNIT_S[unit] * 1000, 1),
            )
        )
    return tuple(rates)
