"""RateLimitMiddleware: an ASGI middleware for Starlette and FastAPI. Each
HTTP request is one AsyncLimiter.admit; a refusal is answered here with 429,
the RateLimit header fields and an application/problem+json body; an
admitted request goes on to the app, its response given the header fields."""

from __future__ import annotations

import inspect
import json
from typing import Any, Awaitable, Callable, Optional, Union

from starlette.requests import Request

from ._aio import AsyncLimiter

KeyFunc = Callable[[Request], Union[str, Awaitable[str]]]


def client_host(request: Request) -> str:
    """The default key: the peer's address."""
    return request.client.host if request.client else "unknown"


class RateLimitMiddleware:
    """``RateLimitMiddleware(app, limiter, key=..., limit=..., window_ms=...)``.

    key: the request's limiter key (a function of the Starlette Request, may
    be async); default, the client address. name: the policy's name in the
    header fields. partition_key: also send ``pk`` (the key's bytes).
    """

    def __init__(
        self,
        app: Any,
        limiter: AsyncLimiter,
        *,
        limit: int,
        window_ms: int,
        key: KeyFunc = client_host,
        algorithm: Optional[str] = None,
        burst: Optional[int] = None,
        cost: int = 1,
        name: str = "default",
        partition_key: bool = False,
    ) -> None:
        if not isinstance(limiter, AsyncLimiter):
            raise TypeError("RateLimitMiddleware needs an AsyncLimiter (on a valkey.asyncio client)")
        self.app = app
        self.limiter = limiter
        self.key = key
        self.policy = dict(limit=limit, window_ms=window_ms, algorithm=algorithm, burst=burst, cost=cost)
        self.name = name
        self.partition_key = partition_key

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        key = self.key(Request(scope, receive))
        if inspect.isawaitable(key):
            key = await key
        decision = await self.limiter.admit(key, **self.policy)
        pk = key.encode() if self.partition_key else None
        fields = decision.headers(name=self.name, partition_key=pk)
        headers = [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in fields.items()]
        if not decision.admitted:
            body = json.dumps(decision.problem(self.name)).encode()
            headers += [
                (b"content-type", b"application/problem+json"),
                (b"content-length", str(len(body)).encode()),
            ]
            await send({"type": "http.response.start", "status": 429, "headers": headers})
            await send({"type": "http.response.body", "body": body})
            return

        async def send_with_headers(message: Any) -> None:
            if message["type"] == "http.response.start":
                message = dict(message)
                message["headers"] = list(message.get("headers", [])) + headers
            await send(message)

        await self.app(scope, receive, send_with_headers)
