"""valkey-ratelimit for Python: rate limiting on Valkey, one call per
decision, with the valkey-ratelimit module (RL.*) or, where modules are not
allowed, its FUNCTION library (FCALL rl_*).

    Limiter(client)          valkey.Valkey (sync)
    AsyncLimiter(client)     valkey.asyncio.Valkey
    Decision                 the answer, with .headers() (IETF RateLimit fields)
    Lease                    a lease's answer (limiter.acquire); limiter.lease(...)
                             is the context manager: LeaseRefused, LeaseLost
    RateLimitMiddleware      ASGI middleware for Starlette / FastAPI (valkey_ratelimit.asgi)
"""

from ._aio import AsyncLimiter
from ._core import (
    ALGORITHMS,
    QUOTA_EXCEEDED_TYPE,
    BackendMissingError,
    Decision,
    Lease,
    LeaseLost,
    LeaseRefused,
    LimiterTimeout,
)
from ._sync import Limiter

__version__ = "0.1.0"

__all__ = [
    "ALGORITHMS",
    "QUOTA_EXCEEDED_TYPE",
    "AsyncLimiter",
    "BackendMissingError",
    "Decision",
    "Lease",
    "LeaseLost",
    "LeaseRefused",
    "Limiter",
    "LimiterTimeout",
    "RateLimitMiddleware",
]


def __getattr__(name: str):
    # The middleware needs Starlette: imported on first use only.
    if name == "RateLimitMiddleware":
        from .asgi import RateLimitMiddleware

        return RateLimitMiddleware
    raise AttributeError(name)
