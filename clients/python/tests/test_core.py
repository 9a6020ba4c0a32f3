"""The pure core, without a server: the header fields against the draft's
examples and the rules of item 6 of issue 25, the rate strings against the
`limits` library itself, every option's rule and message, the library's
version order, cluster slots against valkey-py's, and the generated sync
limiter being up to date."""

from __future__ import annotations

import math
import pathlib
import subprocess
import sys

import pytest

from valkey_ratelimit import QUOTA_EXCEEDED_TYPE, ConfigError, Decision, Decisions, Policy, parse_rates
from valkey_ratelimit._core import key_slot
from valkey_ratelimit._library import bundled_source, is_older, source_version
from valkey_ratelimit._options import Rate

PACKAGE = pathlib.Path(__file__).resolve().parents[1]


def test_headers_give_the_drafts_examples() -> None:
    # draft-ietf-httpapi-ratelimit-headers, 3.2 and 4.2, with their names.
    d = Decision(True, 100, 50, 0, 30_000)
    assert d.headers(name="default", window_ms=10_000) == {
        "RateLimit-Policy": '"default";q=100;w=10',
        "RateLimit": '"default";r=50;t=30',
    }
    d = Decision(True, 50, 1, 0, 7_000, window_ms=60_000)
    assert d.headers(name="permin") == {"RateLimit-Policy": '"permin";q=50;w=60', "RateLimit": '"permin";r=1;t=7'}
    d = Decision(True, 300_000_000, 300_000_000, 0, 60_000, name="default")
    assert d.headers(partition_key=b"App-999")["RateLimit"] == '"default";r=300000000;t=60;pk=:QXBwLTk5OQ==:'
    assert d.headers(partition_key=b"App-999")["RateLimit-Policy"] == '"default";q=300000000;pk=:QXBwLTk5OQ==:'


def test_the_default_policy_name_is_express_rate_limits() -> None:
    # Agreed with the Node package: "<q>-in-<ceil(w s)>sec".
    d = Decision(True, 3, 2, 0, 10_000, window_ms=10_000)
    assert d.headers() == {"RateLimit-Policy": '"3-in-10sec";q=3;w=10', "RateLimit": '"3-in-10sec";r=2;t=10'}
    assert Decision(True, 5, 4, 0, 200, window_ms=200).policy_name == "5-in-1sec"
    assert Decision(True, 5, 4, 0, 1_500, window_ms=1_500).policy_name == "5-in-2sec"
    # The window came from a META hash: not known here.
    assert Decision(True, 5, 4, 0, 1_500).policy_name == "default"


def test_times_are_whole_seconds_rounded_up() -> None:
    assert Decision(True, 5, 1, 0, 6_001, name="p").headers()["RateLimit"] == '"p";r=1;t=7'
    for retry, seconds in [(1, "1"), (999, "1"), (1_000, "1"), (1_001, "2"), (9_989, "10")]:
        h = Decision(False, 3, 0, retry, retry, window_ms=10_000).headers()
        assert h["Retry-After"] == seconds, (retry, h)
        assert h["RateLimit"] == f'"3-in-10sec";r=0;t={seconds}', h
    # Refused, the effective window ends at the retry, never after Retry-After.
    h = Decision(False, 10, 0, 2_500, 9_000, window_ms=10_000).headers()
    assert h == {"RateLimit-Policy": '"10-in-10sec";q=10;w=10', "RateLimit": '"10-in-10sec";r=0;t=3', "Retry-After": "3"}
    # A window under a second is still w=1: the draft's w is a non-zero integer.
    assert Decision(True, 5, 4, 0, 200, window_ms=200).headers()["RateLimit-Policy"] == '"5-in-1sec";q=5;w=1'


def test_what_is_not_advertised() -> None:
    # A cost that can never pass: no Retry-After.
    assert "Retry-After" not in Decision(False, 3, 3, -1, 0).headers()
    # The server's unlimited (no limit anywhere): no quota to advertise.
    assert Decision(True, 0, 0, 0, 0).headers() == {}
    # The package's limit of 0 refuses, with q=0, and no Retry-After: waiting never helps.
    assert Decision(False, 0, 0, -1, 0, window_ms=60_000).headers() == {
        "RateLimit-Policy": '"0-in-60sec";q=0;w=60',
        "RateLimit": '"0-in-60sec";r=0;t=0',
    }
    # The failure policy's answers advertise no quota, only the retry.
    closed = Decision(False, 3, 0, 1_000, 0, 10_000, "unavailable", ConnectionError("down"))
    assert closed.headers() == {"Retry-After": "1"}
    assert closed.problem() == {"type": "about:blank", "title": "The rate limiter cannot reach its store", "status": 503}
    assert Decision(True, 3, 3, 0, 0, 10_000, "unavailable", ConnectionError("down")).headers() == {}


def test_several_policies_are_list_items() -> None:
    parts = (
        Decision(True, 10, 9, 0, 1_000, window_ms=1_000),
        Decision(False, 100, 0, 3_600, 3_600_000 - 5, window_ms=3_600_000),
    )
    h = Decisions(False, 1, 3_600, parts).headers()
    assert h == {
        "RateLimit-Policy": '"10-in-1sec";q=10;w=1, "100-in-3600sec";q=100;w=3600',
        "RateLimit": '"10-in-1sec";r=9;t=1, "100-in-3600sec";r=0;t=4',
        "Retry-After": "4",
    }
    assert Decisions(False, 1, 3_600, parts).problem()["violated-policies"] == ["100-in-3600sec"]


def test_problem_body_and_frozen_decision() -> None:
    problem = Decision(False, 3, 0, 1_000, 1_000).problem("api")
    assert problem == {
        "type": QUOTA_EXCEEDED_TYPE,
        "title": "Request cannot be satisfied as assigned quota has been exceeded",
        "status": 429,
        "violated-policies": ["api"],
    }
    assert QUOTA_EXCEEDED_TYPE == "https://iana.org/assignments/http-problem-types#quota-exceeded"
    with pytest.raises(AttributeError):
        Decision(True, 3, 2, 0, 1_000).remaining = 0  # type: ignore[misc]


# --- rate strings, against the `limits` library ---------------------------------

RATE_STRINGS = [
    "5/minute",
    "10 per second",
    "100/hour;10/second",
    "1/day, 5/7 days|2 per 10 seconds",
    "3 PER MINUTES",
    "0/second",
    "7/2 month",
    "1/year",
    " 4 / 3 hours ",
    "12/15minutes",
]
BAD_RATE_STRINGS = ["", "5", "5/fortnight", "five/minute", "5/minute;", "-1/second", "5//minute", "5/minute 3/second"]


@pytest.mark.parametrize("text", RATE_STRINGS)
def test_rate_strings_read_as_limits_reads_them(text: str) -> None:
    from limits import parse_many

    expected = tuple(Rate(item.amount, item.get_expiry() * 1000) for item in parse_many(text))
    assert parse_rates(text) == expected


@pytest.mark.parametrize("text", BAD_RATE_STRINGS)
def test_rate_strings_limits_refuses_are_refused(text: str) -> None:
    from limits import parse_many

    with pytest.raises(ValueError):
        parse_many(text)
    with pytest.raises(ConfigError, match=r"^rate must be a rate string such as .* \(got "):
        parse_rates(text)


def test_rate_string_examples() -> None:
    assert parse_rates("100/hour;10/second") == (Rate(100, 3_600_000), Rate(10, 1_000))
    assert parse_rates("10 per second") == (Rate(10, 1_000),)
    # `limits` reads "n/0 seconds" as per 1 second; a window of 0 is refused here.
    with pytest.raises(ConfigError, match="window of at least 1 unit"):
        parse_rates("5/0 seconds")


# --- configuration errors: one message shape, the real rule ---------------------

SAFE = "9007199254740991"


@pytest.mark.parametrize(
    "build, message",
    [
        (lambda: Policy(3, -5), f"window_ms must be an integer from 1 to {SAFE} (got -5)"),
        (lambda: Policy("3", 1000), f"limit must be an integer from 0 to {SAFE} (got '3')"),
        (lambda: Policy(2**53, 1000), f"limit must be an integer from 0 to {SAFE} (got 9007199254740992)"),
        (lambda: Policy(True, 1000), f"limit must be an integer from 0 to {SAFE} (got True)"),
        (lambda: Policy(3, 1000, "fixed", 5), "burst must be left out with algorithm 'fixed' (got 5)"),
        (lambda: Policy(3, 1000, "bucket"), "algorithm must be one of 'fixed', 'sliding', 'token', 'gcra', 'leaky' (got 'bucket')"),
        (lambda: Policy(3), "window_ms must be given when there is no META hash (meta=) (got None)"),
    ],
)
def test_a_bad_policy_names_its_rule(build, message: str) -> None:
    with pytest.raises(ConfigError) as e:
        build()
    assert str(e.value) == message


def test_limiters_check_their_options_when_built() -> None:
    import valkey
    import valkey.asyncio

    from valkey_ratelimit import AsyncLimiter, Limiter

    client = valkey.Valkey(port=1)  # never connected: building sends nothing
    cases = [
        (dict(timeout=0), "timeout must be a positive number of seconds (got 0)"),
        (dict(timeout=None), "timeout must be a positive number of seconds (got None)"),
        (dict(failure="shut"), "failure must be one of 'open', 'closed' (got 'shut')"),
        (dict(backend="lua"), "backend must be one of 'auto', 'module', 'functions' (got 'lua')"),
        (dict(prefix=5), "prefix must be a str or bytes (got 5)"),
        (dict(wait_replicas=-1), "wait_replicas must be an integer from 0 to 2147483647 (got -1)"),
        (dict(unconfirmed="drop"), "unconfirmed must be one of 'keep', 'refuse' (got 'drop')"),
        (dict(library="return 1"), "library must be True (the bundled copy), False (never load) or a library's source (got 'return 1')"),
    ]
    for options, message in cases:
        with pytest.raises(ConfigError) as e:
            Limiter(client, **options)
        assert str(e.value) == message
    with pytest.raises(ConfigError, match=r"^client must be an asyncio client .* for AsyncLimiter \(got "):
        AsyncLimiter(client)
    with pytest.raises(ConfigError, match=r"^client must be a synchronous client .* for Limiter \(got "):
        Limiter(valkey.asyncio.Valkey(port=1))
    with pytest.raises(ConfigError, match=r"^client must be a valkey-py, redis-py or valkey-glide client \(got 'x'\)"):
        Limiter("x")


def test_the_http_layers_check_their_options_when_built() -> None:
    import valkey.asyncio

    from valkey_ratelimit import AsyncLimiter, RateLimitMiddleware

    limiter = AsyncLimiter(valkey.asyncio.Valkey(port=1))
    app = object()
    cases = [
        (lambda: RateLimitMiddleware(app, limiter, limit=3, window_ms=-5), f"window_ms must be an integer from 1 to {SAFE} (got -5)"),
        (lambda: RateLimitMiddleware(app, limiter, limit="3", window_ms=1000), f"limit must be an integer from 0 to {SAFE} (got '3')"),
        (lambda: RateLimitMiddleware(app, limiter, limit=2**53, window_ms=1000), f"limit must be an integer from 0 to {SAFE} (got 9007199254740992)"),
        (lambda: RateLimitMiddleware(app, limiter, limit=3, window_ms=1000, name="café"), "name must be non-empty printable ASCII text without '\"' or '\\' (got 'café')"),
        (lambda: RateLimitMiddleware(app, limiter, limit=3, window_ms=1000, cost=2**63), f"cost must be an integer from 0 to {SAFE} (got 9223372036854775808)"),
        (lambda: RateLimitMiddleware(app, limiter, limit=3, window_ms=1000, key=b""), "key must be a non-empty str or bytes (got b'')"),
        (lambda: RateLimitMiddleware(app, limiter, limit=3, window_ms=1000, exempt="/health"), "exempt must be a list of paths, each starting with '/' (got '/health')"),
        (lambda: RateLimitMiddleware(app, limiter, limit=3), "window_ms must be given (or a rate string, or a META hash alone) (got None)"),
        (lambda: RateLimitMiddleware(app, limiter, limit=3, window_ms=1000, closed_status=200), "closed_status must be an integer from 400 to 599 (got 200)"),
        (lambda: limiter.limit("5/fortnight"), 'rate must be a rate string such as "5/minute", "10 per second" or "100/hour;10/second" (units: second, minute, hour, day, month, year) (got \'5/fortnight\')'),
        (lambda: limiter.limit("5/minute;1/second", name="one"), "name must be a list of 2 names, one per rate (got 'one')"),
        (lambda: limiter.limit("5/minute", cost=-1), f"cost must be an integer from 0 to {SAFE} (got -1)"),
        (lambda: limiter.limit(None), 'rate must be a rate string such as "5/minute", "10 per second" or "100/hour;10/second", or a META hash (meta=) (got None)'),
    ]
    for build, message in cases:
        with pytest.raises(ConfigError) as e:
            build()
        assert str(e.value) == message


def test_bytes_keys_take_a_prefix() -> None:
    from valkey_ratelimit._options import join

    assert join("rl:", b"\xff\x00") == b"rl:\xff\x00"
    assert join(b"rl:", "k") == b"rl:k"
    assert join("rl:", "k") == "rl:k"


# --- the library this package ships --------------------------------------------


def test_the_bundled_library_is_the_repos() -> None:
    source = bundled_source()
    assert source == (PACKAGE.parents[1] / "functions" / "ratelimit.lua").read_text()
    assert source.startswith("#!lua name=ratelimit")
    assert source_version(source) == "0.1.0"


def test_versions_order() -> None:
    assert is_older(None, "0.1.0"), "a library without rl_version is older than any"
    assert is_older("0.0.9", "0.1.0") and is_older("0.1.0", "0.1.1") and is_older("0.9.0", "0.10.0")
    assert not is_older("0.1.0", "0.1.0") and not is_older("0.2.0", "0.1.0") and not is_older("1.0", "0.9.9")
    assert is_older("garbled", "0.1.0")


def test_cluster_slots_match_valkey_pys() -> None:
    from valkey.crc import key_slot as valkey_slot

    for key in ["a", "rl:{acme}:1", b"\xff{x}y", "{}", "{{a}}", "foo{}{bar}", "plain", "{user1000}.following"]:
        assert key_slot(key) == valkey_slot(key.encode() if isinstance(key, str) else key), key


def test_the_sync_limiter_is_generated_from_the_async_one() -> None:
    result = subprocess.run([sys.executable, str(PACKAGE / "scripts" / "unasync.py"), "--check"], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


# Run first in a fresh interpreter: the asgi extra (Starlette) as if it
# were not installed.
WITHOUT_STARLETTE = "import sys\nsys.modules['starlette'] = None\n"


def run_python(code: str) -> str:
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout


def test_the_core_imports_without_starlette() -> None:
    # Importing the package loads no HTTP layer, even where Starlette is there.
    assert run_python("import sys, valkey_ratelimit\nprint(sorted(m for m in sys.modules if 'starlette' in m or m.endswith('.asgi')))") == "[]\n"
    out = run_python(
        WITHOUT_STARLETTE
        + """
import valkey, valkey.asyncio
import valkey_ratelimit
from valkey_ratelimit import AsyncLimiter, Decision, Limiter, Policy, parse_rates
limiter = Limiter(valkey.Valkey(port=1), backend="module")
AsyncLimiter(valkey.asyncio.Valkey(port=1))
print(parse_rates("5/minute")[0], Policy(5, 60_000).args(), Decision(True, 5, 4, 0, 60_000, window_ms=60_000).headers()["RateLimit"])
attempts = {
    "import valkey_ratelimit.asgi": lambda: __import__("valkey_ratelimit.asgi"),
    "limiter.limit": lambda: limiter.limit("5/minute"),
    "valkey_ratelimit.RateLimitMiddleware": lambda: valkey_ratelimit.RateLimitMiddleware,
}
for what, attempt in attempts.items():
    try:
        attempt()
        print(what, "imported")
    except ImportError as e:
        print(what, "ImportError:", e)
"""
    )
    lines = out.splitlines()
    assert lines[0] == "Rate(limit=5, window_ms=60000) ['LIMIT', '5', 'WINDOW', '60000'] \"5-in-60sec\";r=4;t=60", out
    extra = "needs Starlette, the package's asgi extra: pip install 'valkey-ratelimit[asgi]'"
    assert lines[1:] == [
        f"{what} ImportError: valkey_ratelimit.asgi (RateLimitMiddleware, limiter.limit(...)) {extra} "
        "(No module named 'starlette.concurrency'; 'starlette' is not a package)"
        for what in ("import valkey_ratelimit.asgi", "limiter.limit", "valkey_ratelimit.RateLimitMiddleware")
    ], out


def test_the_unasync_table_catches_leftovers() -> None:
    sys.path.insert(0, str(PACKAGE / "scripts"))
    try:
        import unasync
    finally:
        sys.path.pop(0)
    assert unasync.unasync("async def f():\n    await g()\n") == "def f():\n    g()\n"
    with pytest.raises(SystemExit, match="AsyncNewThing"):
        unasync.unasync("x = AsyncNewThing()\n")


def test_ceil_seconds_of_t() -> None:
    # t is the whole seconds until the quota is whole again, rounded up: a
    # client that waits t finds it whole, and t is never a second more.
    for reset in (1, 999, 1_000, 1_001, 16_667):
        t = int(Decision(True, 5, 4, 0, reset, window_ms=10_000).headers()["RateLimit"].rsplit("=", 1)[1])
        assert t == math.ceil(reset / 1000) and t * 1000 - reset < 1000


# --- issue 27: shadow, penalty, align, calendar, tz ---------------------------


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(limit=1, window_ms=1, shadow="yes"), "shadow must be True or False (got 'yes')"),
        (dict(limit=1, window_ms=1, penalty=0), "penalty must be an integer from 1 to 9007199254740991 (got 0)"),
        (dict(limit=1, window_ms=1, penalty=-5), "penalty must be an integer from 1 to 9007199254740991 (got -5)"),
        (dict(limit=1, window_ms=1, align=1), "align must be True or False (got 1)"),
        (
            dict(limit=1, window_ms=1, penalty=100, escalate=0),
            "escalate must be an integer from 1 to 9007199254740991 (got 0)",
        ),
        (
            dict(limit=1, window_ms=1, escalate=500),
            "escalate must be left out without penalty (or a META hash whose penalty field it goes with) (got 500)",
        ),
        (dict(limit=1, window_ms=1, penalty=100, escalate=99), "escalate must be at least penalty (100) (got 99)"),
        (dict(limit=1, calendar="fortnight"), "calendar must be one of 'day', 'week', 'month', 'year' (got 'fortnight')"),
        (
            dict(limit=1, calendar="day", tz="Europe Berlin"),
            'tz must be a fixed offset from UTC such as "+05:30" or "-08:00", or an IANA zone name such as "Europe/Berlin" (got \'Europe Berlin\')',
        ),
        (
            dict(limit=1, calendar="day", tz="/Berlin"),
            'tz must be a fixed offset from UTC such as "+05:30" or "-08:00", or an IANA zone name such as "Europe/Berlin" (got \'/Berlin\')',
        ),
        (
            dict(limit=1, calendar="day", tz="+24:00"),
            'tz must be a fixed offset from UTC such as "+05:30" or "-08:00", or an IANA zone name such as "Europe/Berlin" (got \'+24:00\')',
        ),
        (
            dict(limit=1, window_ms=1000, tz="+01:00"),
            "tz must be left out without calendar (or a META hash whose calendar field it goes with) (got '+01:00')",
        ),
        (dict(limit=1, window_ms=1000, calendar="day"), "window_ms must be left out with calendar (the period is the window) (got 1000)"),
        (dict(limit=1, calendar="day", align=True), "align must be left out with calendar (calendar periods are aligned) (got True)"),
        (
            dict(limit=1, window_ms=1000, algorithm="gcra", align=True),
            "align must be left out with algorithm 'gcra' (it applies only to fixed and sliding) (got True)",
        ),
        (
            dict(limit=1, algorithm="token", calendar="month"),
            "calendar must be left out with algorithm 'token' (it applies only to fixed and sliding) (got 'month')",
        ),
    ],
)
def test_issue_27_options_are_checked_before_any_call(kwargs, message: str) -> None:
    with pytest.raises(ConfigError) as e:
        Policy(**kwargs)
    assert str(e.value) == message


def test_issue_27_options_go_out_as_both_backends_take_them() -> None:
    p = Policy(5, None, shadow=True, penalty=30000, calendar="week", tz="-08:00")
    assert p.args() == ["LIMIT", "5", "SHADOW", "PENALTY", "30000", "CALENDAR", "week", "TZ", "-08:00"]
    e = Policy(1, 50, penalty=200, escalate=700)
    assert e.args() == ["LIMIT", "1", "WINDOW", "50", "PENALTY", "200", "ESCALATE", "700"]
    # The penalty may come from the META hash.
    assert Policy(meta="plan", escalate=700).args() == ["ESCALATE", "700"]
    a = Policy(5, 3600000, "sliding", align=True)
    assert a.args() == ["ALGO", "sliding", "LIMIT", "5", "WINDOW", "3600000", "ALIGN"]
    # The sliding window over calendar periods.
    s = Policy(5, None, "sliding", calendar="month", tz="+05:30")
    assert s.args() == ["ALGO", "sliding", "LIMIT", "5", "CALENDAR", "month", "TZ", "+05:30"]
    # With a META hash, tz may go with the hash's calendar field.
    assert Policy(meta="plan", tz="+05:30").args() == ["TZ", "+05:30"]
    # Zone names go to the server as given (it knows which exist).
    for name in ("Europe/Berlin", "America/Argentina/Buenos_Aires", "Etc/GMT+8", "UTC"):
        assert Policy(1, None, calendar="day", tz=name).args()[-2:] == ["TZ", name]


def test_a_shadow_refusal_is_told_by_the_map_field_else_by_the_wait() -> None:
    from valkey_ratelimit._core import parse_decision, parse_decisions

    # RESP2: admitted with retry_after_ms > 0 (or -1)...
    d = parse_decision([1, 3, 0, 5000, 5000], "module", 60000, None, "fixed")
    assert d.admitted and d.shadow and d.retry_after_ms == 5000
    assert parse_decision([1, 3, 0, -1, 0], "module", None).shadow
    assert not parse_decision([1, 3, 2, 0, 5000], "module", None).shadow
    assert not parse_decision([0, 3, 0, 5000, 5000], "module", None).shadow
    # ...but for leaky, whose admissions carry their delay.
    assert not parse_decision([1, 3, 1, 250, 500], "module", None, None, "leaky").shadow
    # RESP3: the map's shadow field, present on a shadow refusal only.
    fields = {b"admitted": 1, b"limit": 3, b"remaining": 0, b"retry_after_ms": 250, b"reset_after_ms": 500}
    assert parse_decision({**fields, b"shadow": 1}, "module", None, None, "leaky").shadow
    assert not parse_decision(fields, "module", None, None, "leaky").shadow
    # A shadow refusal passes: no Retry-After.
    assert "Retry-After" not in d.headers()
    both = parse_decisions([1, 0, 0, [[1, 1, 0, 900, 900], [1, 5, 4, 0, 1000]]], "module", [1000, 1000], [None, None])
    assert both.admitted and both.shadow and [x.shadow for x in both.decisions] == [True, False]


def test_a_limit_of_0_in_shadow_mode_is_a_shadow_refusal_without_a_call() -> None:
    from valkey_ratelimit._core import refused_by_zero

    assert refused_by_zero(1000, None) == Decision(False, 0, 0, -1, 0, 1000)
    d = refused_by_zero(1000, None, shadow=True)
    assert d.admitted and d.shadow and d.retry_after_ms == -1 and d.backend is None


def test_a_shadow_lease_is_told_by_its_map_field_or_by_acquired_with_a_wait() -> None:
    from valkey_ratelimit._core import lease_args, parse_lease

    array = parse_lease([1, 2, 2, 900, b"job-3"], "functions")
    assert (array.acquired, array.shadow, array.lease_id, array.retry_after_ms) == (True, True, "job-3", 900)
    assert not parse_lease([0, 2, 2, 900, None], "module").shadow
    assert not parse_lease([1, 2, 1, 0, b"a"], "module").shadow
    fields = {b"acquired": 1, b"limit": 2, b"in_flight": 2, b"retry_after_ms": 900, b"lease_id": b"x"}
    assert parse_lease({**fields, b"shadow": 1}, "module").shadow
    assert not parse_lease(fields, "module").shadow
    assert lease_args(2, 100, None, True) == ["SHADOW", "LIMIT", "2", "TTL", "100"]
    assert lease_args(2, 100, None) == ["LIMIT", "2", "TTL", "100"]
    with pytest.raises(ConfigError, match="shadow"):
        lease_args(2, 100, None, 1)
