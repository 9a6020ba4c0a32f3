"""The HTTP layer, for Starlette and FastAPI: RateLimitMiddleware (every
request of an app), RouteLimit (``limiter.limit("5/minute")``: one route,
as a FastAPI dependency or as an endpoint decorator), the request keys
(the client address; X-Forwarded-For behind trusted proxies), and the one
refusal both answer: 429 with the RateLimit header fields and a
problem+json body, or 503 with Retry-After when the store cannot answer
and the limiter fails closed.

It builds on the core limiters and nothing in the core imports it: the
public ``limiter.limit(...)`` reaches it from _limiters.py."""

from __future__ import annotations

import functools
import inspect
import json
import logging
import typing
from typing import Any, Awaitable, Callable, Dict, List, Optional, Sequence, Tuple, Union

try:
    import anyio.from_thread
    from starlette.concurrency import run_in_threadpool
    from starlette.exceptions import HTTPException
    from starlette.requests import Request
    from starlette.responses import Response
except ImportError as missing:
    raise ImportError(
        "valkey_ratelimit.asgi (RateLimitMiddleware, limiter.limit(...)) needs Starlette, "
        f"the package's asgi extra: pip install 'valkey-ratelimit[asgi]' ({missing})",
        name=missing.name,
    ) from missing

from . import _options
from ._aio import AsyncLimiter
from ._core import Decision, Decisions
from ._options import ConfigError, Key, Policy, Rate
from ._sync import Limiter

log = logging.getLogger("valkey_ratelimit")

Outcome = Union[Decision, Decisions]
KeyFunc = Callable[[Request], Union[Optional[Key], Awaitable[Optional[Key]]]]
RefusalHandler = Callable[[Request, Outcome], Union[Response, Awaitable[Response]]]
ShadowHook = Callable[[Key, Outcome], Union[None, Awaitable[None]]]


# --- keys ------------------------------------------------------------------


def client_address(request: Request) -> str:
    """The default key: the peer's address ("unknown" when the server
    gives none)."""
    return request.client.host if request.client else "unknown"


def forwarded_for(trusted_proxies: int) -> Callable[[Request], str]:
    """A key function for an app behind ``trusted_proxies`` proxies that
    each append to X-Forwarded-For: the address the outermost trusted proxy
    saw, i.e. the ``trusted_proxies``-th entry from the right. Entries
    further left are the client's own words and are ignored. A request with
    fewer entries did not come through the proxies: its peer address is
    the key."""
    count = _options.integer("trusted_proxies", trusted_proxies, 1, 64)

    def key(request: Request) -> str:
        hops = [h.strip() for v in request.headers.getlist("x-forwarded-for") for h in v.split(",")]
        hops = [h for h in hops if h]
        return hops[-count] if len(hops) >= count else client_address(request)

    return key


async def _maybe_await(value: Any) -> Any:
    return await value if inspect.isawaitable(value) else value


def _check_key(value: Any) -> Optional[Key]:
    """A key function's answer: a key, or None to exempt the request."""
    return None if value is None else _options.key("key function's answer", value)


# --- deciding ---------------------------------------------------------------


class RateLimitExceeded(HTTPException):
    """A RouteLimit dependency refused the request. ``response`` is the
    refusal (problem+json, or the custom handler's): register
    ``rate_limit_exceeded_handler`` for it to be sent as is; without it
    FastAPI answers the same status and headers with its own JSON body."""

    def __init__(self, response: Response, outcome: Outcome) -> None:
        headers = {k: v for k, v in response.headers.items() if k not in ("content-length", "content-type")}
        super().__init__(response.status_code, detail=_title(response), headers=headers)
        self.response = response
        self.outcome = outcome


def _title(response: Response) -> str:
    try:
        return str(json.loads(bytes(response.body))["title"])
    except Exception:
        return "Too Many Requests" if response.status_code == 429 else "Service Unavailable"


async def rate_limit_exceeded_handler(request: Request, exc: Exception) -> Response:
    """``app.add_exception_handler(RateLimitExceeded, rate_limit_exceeded_handler)``."""
    assert isinstance(exc, RateLimitExceeded)
    return exc.response


class _Limits:
    """What a middleware or a route limit decides per request: its
    policies (fixed when built, or functions of the request), the key, the
    cost, and the responses. Every fixed option is checked here, when the
    middleware or route limit is built."""

    def __init__(
        self,
        limiter: Any,
        *,
        rate: Any = None,
        limit: Any = None,
        window_ms: Any = None,
        key: Any = client_address,
        meta: Any = None,
        cost: Any = 1,
        algorithm: Optional[str] = None,
        burst: Optional[int] = None,
        name: Any = None,
        headers: bool = True,
        on_refused: Optional[RefusalHandler] = None,
        closed_status: int = 503,
        partition_key: bool = False,
        shadow: bool = False,
        penalty: Optional[int] = None,
        align: bool = False,
        calendar: Optional[str] = None,
        tz: Optional[str] = None,
        escalate: Optional[int] = None,
        on_shadow_refusal: Optional[ShadowHook] = None,
    ) -> None:
        if not isinstance(limiter, (AsyncLimiter, Limiter)):
            raise _options.bad("limiter", "an AsyncLimiter or a Limiter", limiter)
        self.limiter = limiter
        self.key = key if callable(key) else _constant(_options.key("key", key))
        self.rate = rate
        self.limit = limit
        self.window_ms = window_ms
        self.meta = meta
        self.cost = cost
        self.algorithm = algorithm
        self.burst = burst
        self.name = name
        if not isinstance(headers, bool):
            raise _options.bad("headers", "True or False", headers)
        self.headers = headers
        if on_refused is not None and not callable(on_refused):
            raise _options.bad("on_refused", "a function of (request, decision) that returns a Response", on_refused)
        self.on_refused = on_refused
        self.closed_status = _options.integer("closed_status", closed_status, 400, 599)
        self.partition_key = bool(partition_key)
        if on_shadow_refusal is not None and not callable(on_shadow_refusal):
            raise _options.bad("on_shadow_refusal", "a function of (key, decision)", on_shadow_refusal)
        self.on_shadow_refusal = on_shadow_refusal
        # Issue 27's options, checked as a policy would check them (the META
        # hash stands for itself: tz may go with its calendar field).
        self.extra: Dict[str, Any] = dict(
            shadow=shadow, penalty=penalty, align=align, calendar=calendar, tz=tz, escalate=escalate
        )
        Policy(1, None if calendar is not None else 1, algorithm, None, "meta" if meta is not None else None, **self.extra)
        if calendar is not None and (rate is not None or window_ms is not None):
            raise _options.bad("calendar", "left out with a rate or window_ms (the period is the window)", calendar)
        if rate is not None and (limit is not None or window_ms is not None):
            raise _options.bad("rate", "left out when limit and window_ms are given", rate)
        if not callable(cost):
            _options.integer("cost", cost, 0)
        if meta is not None and not callable(meta):
            _options.key("meta", meta)
        # Everything fixed is checked now: one policy set made up front.
        if not any(callable(v) for v in (rate, limit, window_ms, meta)):
            self._fixed: Optional[Tuple[List[Policy], List[Optional[str]]]] = self._make(rate, limit, window_ms, meta)
        else:
            self._fixed = None
            if not callable(rate) and rate is not None:
                _options.parse_rates(rate)
            if not callable(limit) and limit is not None:
                _options.integer("limit", limit, 0)
            if not callable(window_ms) and window_ms is not None:
                _options.integer("window_ms", window_ms, 1)
            if algorithm is not None:
                _options.one_of("algorithm", algorithm, _options.ALGORITHMS)
            _options.optional_integer("burst", burst, 0)
            for one in [name] if isinstance(name, str) else list(name or []):
                _options.policy_name(one)

    def _make(self, rate: Any, limit: Any, window_ms: Any, meta: Any) -> Tuple[List[Policy], List[Optional[str]]]:
        calendar = self.extra["calendar"]
        if rate is not None:
            rates: Sequence[Rate] = _options.parse_rates(rate)
        elif limit is None and window_ms is None and meta is not None:
            rates = []
        elif calendar is not None and limit is not None and window_ms is None:
            # The calendar period is the window.
            one = Policy(_options.integer("limit", limit, 0), None, self.algorithm, self.burst, meta, **self.extra)
            return [one], self._names(self.name, 1)
        else:
            if limit is None or window_ms is None:
                missing = "limit" if limit is None else "window_ms"
                raise _options.bad(missing, "given (or a rate string, or a META hash alone)", None)
            rates = [Rate(_options.integer("limit", limit, 0), _options.integer("window_ms", window_ms, 1))]
        if rates:
            policies = [Policy(r.limit, r.window_ms, self.algorithm, self.burst, meta, **self.extra) for r in rates]
        else:
            policies = [Policy(None, None, self.algorithm, self.burst, meta, **self.extra)]
        return policies, self._names(self.name, len(policies))

    @staticmethod
    def _names(name: Any, count: int) -> List[Optional[str]]:
        if name is None:
            return [None] * count
        if isinstance(name, str):
            if count != 1:
                raise _options.bad("name", f"a list of {count} names, one per rate", name)
            return [_options.policy_name(name)]
        names = list(name) if isinstance(name, (list, tuple)) else None
        if names is None or len(names) != count:
            raise _options.bad("name", f"a str, or a list of {count} names, one per rate", name)
        return [_options.policy_name(n) for n in names]

    async def _policies(self, request: Request) -> Tuple[List[Policy], List[Optional[str]]]:
        if self._fixed is not None:
            return self._fixed
        values = []
        for option in (self.rate, self.limit, self.window_ms, self.meta):
            values.append(await _maybe_await(option(request)) if callable(option) else option)
        return self._make(*values)

    def counter_keys(self, key: Key, policies: List[Policy], scope: Optional[str]) -> List[Key]:
        """The limiter keys of one request: the key alone (a middleware with
        one policy), else the key with its scope and each policy's rate,
        all behind one hash tag so that they share a cluster slot."""
        if scope is None and len(policies) == 1:
            return [key]
        head = _options.join(_options.join("{", key), "}:" + (scope or "app"))
        return [_options.join(head, f":{p.limit}/{p.window_ms}" if p.limit is not None else ":meta") for p in policies]

    async def decide(self, request: Request, scope: Optional[str]) -> Optional[Tuple[Outcome, Key]]:
        """The request's outcome and key; None when the key function
        exempts it."""
        key = _check_key(await _maybe_await(self.key(request)))
        if key is None:
            return None
        policies, names = await self._policies(request)
        cost = await _maybe_await(self.cost(request)) if callable(self.cost) else self.cost
        keys = self.counter_keys(key, policies, scope)
        if len(policies) == 1:
            call: Callable[..., Any] = self.limiter.decide
            args: Tuple[Any, ...] = (keys[0], policies[0], cost, names[0])
        else:
            call, args = self.limiter.admit_all, (keys, policies, cost, names)
        if isinstance(self.limiter, AsyncLimiter):
            outcome = await call(*args)
        else:
            outcome = await run_in_threadpool(call, *args)
        if outcome.shadow:
            await self.shadow_refused(key, outcome)
        return outcome, key

    async def shadow_refused(self, key: Key, outcome: Outcome) -> None:
        """Tells ``on_shadow_refusal`` (the request passes all the same);
        what it raises is logged, never the request's failure."""
        if self.on_shadow_refusal is None:
            return
        try:
            await _maybe_await(self.on_shadow_refusal(key, outcome))
        except Exception:
            log.exception("valkey_ratelimit: on_shadow_refusal raised")

    def fields(self, outcome: Outcome, key: Key) -> Dict[str, str]:
        pk = None
        if self.partition_key:
            pk = key.encode() if isinstance(key, str) else key
        fields = outcome.headers(partition_key=pk)
        if not self.headers:
            fields = {k: v for k, v in fields.items() if k == "Retry-After"}
        return fields

    async def refusal(self, request: Request, outcome: Outcome, fields: Dict[str, str]) -> Response:
        if self.on_refused is not None:
            response = await _maybe_await(self.on_refused(request, outcome))
            for k, v in fields.items():
                if k not in response.headers:
                    response.headers[k] = v
            return response
        body = outcome.problem()
        status = 429
        if outcome.error is not None:
            status = body["status"] = self.closed_status
        return Response(json.dumps(body), status_code=status, headers=fields, media_type="application/problem+json")


def _constant(value: Key) -> Callable[[Request], Key]:
    return lambda request: value


def _endpoint_scope(endpoint: Any) -> Optional[str]:
    if endpoint is None:
        return None
    return f"{getattr(endpoint, '__module__', '')}.{getattr(endpoint, '__qualname__', repr(endpoint))}"


# --- the middleware ------------------------------------------------------------


class RateLimitMiddleware:
    """An ASGI middleware: one decision per HTTP request of the app.

    ``RateLimitMiddleware(app, limiter, limit=3, window_ms=10_000)``, or
    ``rate="100/hour;10/second"`` (several limits, decided together), or
    ``meta="api:meta"`` (the policy in a META hash). ``limit``,
    ``window_ms``, ``rate``, ``meta`` and ``cost`` may each be a function
    of the Starlette Request (sync or async). key: a function of the
    request (default: the client address; ``forwarded_for(n)`` behind n
    proxies); None exempts the request. exempt: paths never limited
    (``"/health"``; a trailing ``*`` matches a prefix). headers: False
    sends no RateLimit fields (a refusal keeps its Retry-After).
    on_refused: ``f(request, decision) -> Response`` for refusals.
    closed_status: the status when the limiter fails closed (503).
    name: the RateLimit-Policy name (one per rate). partition_key: ``pk``.
    shadow, penalty, align, calendar, tz, escalate: the server's policy options
    (see Policy); with ``calendar``, ``limit`` alone (the period is the
    window). In shadow mode nothing is refused: a would-be refusal passes,
    and ``on_shadow_refusal(key, decision)`` (sync or async) is told of it.
    """

    def __init__(self, app: Any, limiter: Any, *, exempt: Sequence[str] = (), **options: Any) -> None:
        self.app = app
        self.limits = _Limits(limiter, **options)
        if isinstance(exempt, str) or not all(isinstance(p, str) and p.startswith("/") for p in exempt):
            raise _options.bad("exempt", "a list of paths, each starting with '/'", exempt)
        self._exact = frozenset(p for p in exempt if not p.endswith("*"))
        self._prefixes = tuple(p[:-1] for p in exempt if p.endswith("*"))

    def _exempt(self, path: str) -> bool:
        return path in self._exact or path.startswith(self._prefixes)

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or self._exempt(scope["path"]):
            await self.app(scope, receive, send)
            return
        request = Request(scope, receive)
        decided = await self.limits.decide(request, None)
        if decided is None:
            await self.app(scope, receive, send)
            return
        outcome, key = decided
        fields = self.limits.fields(outcome, key)
        if not outcome.admitted:
            response = await self.limits.refusal(request, outcome, fields)
            await response(scope, receive, send)
            return
        extra = [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in fields.items()]

        async def send_with_fields(message: Any) -> None:
            if message["type"] == "http.response.start" and extra:
                message = dict(message)
                message["headers"] = list(message.get("headers", [])) + extra
            await send(message)

        await self.app(scope, receive, send_with_fields)


# --- per-route limits ----------------------------------------------------------


class RouteLimit:
    """``limiter.limit(rate, *, key=..., meta=..., cost=1, ...)``: a limit on
    one route, in two forms::

        @app.get("/a", dependencies=[Depends(limiter.limit("5/minute"))])
        async def a(): ...

        @app.get("/b")
        @limiter.limit("10 per second;100/hour")
        async def b(request: Request): ...

    rate: a rate string in the ``limits`` grammar (several limits, ``;``
    separated, are decided together: all admitted or none consumed), or a
    function of the request that returns one; None with ``meta`` alone.
    scope: which routes share the count (default: the endpoint, by module
    and name). The other options are the middleware's. On refusal the
    decorator answers itself; the dependency raises RateLimitExceeded, which
    ``rate_limit_exceeded_handler`` turns into the same problem+json answer.
    The admitted response gets the header fields (as a dependency: when
    the endpoint returns data rather than a Response of its own)."""

    def __init__(self, limiter: Any, rate: Any = None, *, scope: Optional[str] = None, **options: Any) -> None:
        if rate is None and options.get("meta") is None:
            raise _options.bad("rate", _options.RATE_RULE + ", or a META hash (meta=)", rate)
        if "limit" in options or "window_ms" in options:
            raise _options.bad("rate", "the way a route limit is given (not limit= / window_ms=)", options)
        self.limits = _Limits(limiter, rate=rate, **options)
        if scope is not None and (not isinstance(scope, str) or not scope):
            raise _options.bad("scope", "a non-empty str", scope)
        self.scope = scope
        # What FastAPI reads to call us as a dependency: an async callable
        # of (request, response).
        self.__wrapped__ = self._dependency
        self.__signature__ = inspect.signature(self._dependency)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        target = args[0] if args else kwargs.get("request")
        if isinstance(target, Request):
            try:
                import asyncio

                asyncio.get_running_loop()
            except RuntimeError:
                # A framework that saw a plain function ran us on a worker
                # thread: decide on the event loop all the same.
                return anyio.from_thread.run(functools.partial(self._dependency, *args, **kwargs))
            return self._dependency(*args, **kwargs)
        if callable(target) and len(args) == 1 and not kwargs:
            return self._decorate(target)
        raise TypeError("a RouteLimit is a FastAPI dependency or an endpoint decorator")

    def _scope_of(self, request: Request) -> str:
        return self.scope or _endpoint_scope(request.scope.get("endpoint")) or request.url.path

    async def _dependency(self, request: Request, response: Response) -> None:
        decided = await self.limits.decide(request, self._scope_of(request))
        if decided is None:
            return
        outcome, key = decided
        fields = self.limits.fields(outcome, key)
        if not outcome.admitted:
            raise RateLimitExceeded(await self.limits.refusal(request, outcome, fields), outcome)
        for k, v in fields.items():
            response.headers[k] = v

    def _decorate(self, endpoint: Callable[..., Any]) -> Callable[..., Any]:
        signature = inspect.signature(endpoint)
        hints = _hints(endpoint)
        params = list(signature.parameters.values())
        request_name = next((p.name for p in params if _is(hints.get(p.name), Request) or p.name == "request"), None)
        response_name = next((p.name for p in params if _is(hints.get(p.name), Response)), None)
        added = []
        if request_name is None:
            added.append(inspect.Parameter("_rl_request", inspect.Parameter.KEYWORD_ONLY, annotation=Request))
        if response_name is None:
            added.append(inspect.Parameter("_rl_response", inspect.Parameter.KEYWORD_ONLY, annotation=Response))
        scope = self.scope or _endpoint_scope(endpoint)
        is_async = inspect.iscoroutinefunction(endpoint)

        @functools.wraps(endpoint)
        async def limited(*args: Any, **kwargs: Any) -> Any:
            request = kwargs.pop("_rl_request", None) if request_name is None else kwargs.get(request_name)
            response = kwargs.pop("_rl_response", None) if response_name is None else kwargs.get(response_name)
            if request is None:
                # Starlette calls endpoint(request), by position.
                request = next((a for a in args if isinstance(a, Request)), None)
            if request is None:
                raise TypeError(f"{scope}: the rate-limited endpoint was called without its Request")
            decided = await self.limits.decide(request, scope)
            fields: Dict[str, str] = {}
            if decided is not None:
                outcome, key = decided
                fields = self.limits.fields(outcome, key)
                if not outcome.admitted:
                    return await self.limits.refusal(request, outcome, fields)
            if is_async:
                result = await endpoint(*args, **kwargs)
            else:
                result = await run_in_threadpool(endpoint, *args, **kwargs)
            target = result if isinstance(result, Response) else response
            if target is not None:
                for k, v in fields.items():
                    target.headers[k] = v
            return result

        limited.__signature__ = signature.replace(parameters=_ordered(params + added))  # type: ignore[attr-defined]
        return limited


def _hints(fn: Any) -> Dict[str, Any]:
    try:
        return typing.get_type_hints(fn)
    except Exception:
        return dict(getattr(fn, "__annotations__", {}))


def _is(annotation: Any, cls: type) -> bool:
    return isinstance(annotation, type) and issubclass(annotation, cls)


def _ordered(params: List[inspect.Parameter]) -> List[inspect.Parameter]:
    """Parameters in a valid order: keyword-only ones (ours) before **kwargs."""
    rank = {
        inspect.Parameter.POSITIONAL_ONLY: 0,
        inspect.Parameter.POSITIONAL_OR_KEYWORD: 1,
        inspect.Parameter.VAR_POSITIONAL: 2,
        inspect.Parameter.KEYWORD_ONLY: 3,
        inspect.Parameter.VAR_KEYWORD: 4,
    }
    return sorted(params, key=lambda p: rank[p.kind])


__all__ = [
    "ConfigError",
    "RateLimitExceeded",
    "RateLimitMiddleware",
    "RouteLimit",
    "client_address",
    "forwarded_for",
    "rate_limit_exceeded_handler",
]
