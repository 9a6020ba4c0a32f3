"""The public Limiter and AsyncLimiter: the core limiters (_sync.py,
_aio.py) with ``limit(...)``, the per-route limit. That one is the HTTP
layer's (asgi.py, on Starlette: the ``asgi`` extra), so the imports run one
way: this module -> asgi.py -> the core. asgi.py is imported on the first
``limit(...)``, so the package imports without Starlette."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from . import _aio, _sync

if TYPE_CHECKING:
    from .asgi import RouteLimit


def _route_limit(limiter: Any, rate: Any, options: Any) -> RouteLimit:
    from .asgi import RouteLimit

    return RouteLimit(limiter, rate, **options)


class AsyncLimiter(_aio.AsyncLimiter):
    __doc__ = _aio.AsyncLimiter.__doc__

    def limit(self, rate: Any = None, **options: Any) -> RouteLimit:
        """A per-route limit for Starlette and FastAPI, usable as a FastAPI
        dependency (``Depends(limiter.limit("5/minute"))``) and as a
        decorator of an endpoint; see ``valkey_ratelimit.asgi.RouteLimit``.
        Needs Starlette (the ``asgi`` extra): ImportError says so."""
        return _route_limit(self, rate, options)


class Limiter(_sync.Limiter):
    __doc__ = _sync.Limiter.__doc__

    def limit(self, rate: Any = None, **options: Any) -> RouteLimit:
        """A per-route limit for Starlette and FastAPI, usable as a FastAPI
        dependency (``Depends(limiter.limit("5/minute"))``) and as a
        decorator of an endpoint; see ``valkey_ratelimit.asgi.RouteLimit``.
        Needs Starlette (the ``asgi`` extra): ImportError says so."""
        return _route_limit(self, rate, options)
