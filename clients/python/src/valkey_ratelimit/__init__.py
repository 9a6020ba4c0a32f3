"""valkey-ratelimit for Python: rate limiting on Valkey, one call per
decision, with the valkey-ratelimit module (RL.*) or, where modules are not
allowed, its FUNCTION library (FCALL rl_*), which this package ships and
loads when it may.

    Limiter(client)          sync: valkey.Valkey, redis.Redis, glide_sync.GlideClient
    AsyncLimiter(client)     asyncio: valkey.asyncio.Valkey, redis.asyncio.Redis, glide.GlideClient
    limiter.limit("5/minute")  a per-route limit: FastAPI dependency or endpoint decorator
                             (valkey_ratelimit.asgi's RouteLimit: needs the asgi extra)
    Decision / Decisions     the answers, with .headers() (IETF RateLimit fields)
    Lease                    a lease's answer (limiter.acquire); limiter.lease(...)
                             is the context manager: LeaseRefused, LeaseLost
    RateLimitMiddleware      ASGI middleware for Starlette / FastAPI (valkey_ratelimit.asgi)
    ConfigError              a bad option, raised when a limiter is built
"""

from ._core import (
    QUOTA_EXCEEDED_TYPE,
    BackendMissingError,
    Decision,
    Decisions,
    Lease,
    LeaseLost,
    LeaseRefused,
    LimiterTimeout,
    ReplicationUnconfirmed,
)
from ._options import ALGORITHMS, ConfigError, Policy, Rate, parse_rates
from ._limiters import AsyncLimiter, Limiter

__version__ = "0.1.0"

__all__ = [
    "ALGORITHMS",
    "QUOTA_EXCEEDED_TYPE",
    "AsyncLimiter",
    "BackendMissingError",
    "ConfigError",
    "Decision",
    "Decisions",
    "Lease",
    "LeaseLost",
    "LeaseRefused",
    "Limiter",
    "LimiterTimeout",
    "Policy",
    "RateLimitExceeded",
    "RateLimitMiddleware",
    "Rate",
    "ReplicationUnconfirmed",
    "RouteLimit",
    "forwarded_for",
    "parse_rates",
    "rate_limit_exceeded_handler",
]

# Need Starlette (the asgi extra): imported on first use only, so the
# package imports without it.
_ASGI = ("RateLimitExceeded", "RateLimitMiddleware", "RouteLimit", "forwarded_for", "rate_limit_exceeded_handler")


def __getattr__(name: str):
    if name in _ASGI:
        from . import asgi

        return getattr(asgi, name)
    raise AttributeError(name)
