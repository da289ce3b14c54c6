"""Refuse input no handler should see: NUL characters, and bodies over a size limit.

PostgreSQL text cannot hold a NUL character; a query or path carrying one would fail deep in
the driver as a 500. It is bad input, so it gets a 422 naming the parameter instead.

FastAPI reads a route's whole JSON body into memory *before* it runs the route's
dependencies, the token check among them. Without a limit, anyone who can reach the port
could make the service buffer gigabytes on a state-changing route and only then be told 401.
``BodyLimit`` refuses an oversized body from its ``Content-Length`` at once, and a chunked
one as soon as it grows past the limit, with a 413 JSON error.
"""

from __future__ import annotations

import json
from collections.abc import Mapping

from fastapi import HTTPException, Request
from fastapi.encoders import jsonable_encoder
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

#: Largest body of any route but the NCCL push: operator actions carry a reason of at most
#: 2,000 characters, which even fully ``\\uXXXX``-escaped stays far below this.
DEFAULT_MAX_BODY = 64 * 1024


async def reject_nul(request: Request) -> None:
    # async: a few string checks, not worth a trip to the thread pool on every request.
    if "\x00" in request.url.path or "%00" in request.url.path:
        raise HTTPException(422, "the path contains a NUL character")
    for key, value in request.query_params.multi_items():
        if "\x00" in key or "\x00" in value:
            raise HTTPException(422, f"query parameter {key!r} contains a NUL character")


def validation_error(request: Request, exc: Exception) -> Response:
    """FastAPI's 422 body, rendered as ASCII JSON.

    The errors echo the offending input, and JSON may carry a lone UTF-16 surrogate
    (``"\\ud800"``) that no UTF-8 text can hold: FastAPI's own handler then failed while
    rendering the 422 and answered 500. Escaped, the echo is valid JSON again.
    """
    assert isinstance(exc, RequestValidationError)
    body = json.dumps({"detail": jsonable_encoder(exc.errors())}, ensure_ascii=True, default=str)
    return Response(body, status_code=422, media_type="application/json")


def _too_large(limit: int) -> str:
    return f"request body is over the {limit}-byte limit"


#: Sent with every answer. The status page loads only its own script and stylesheet, so
#: ``self`` is all it needs; no page may frame it (clickjacking), no type is sniffed.
SECURITY_HEADERS: tuple[tuple[bytes, bytes], ...] = (
    (b"content-security-policy",
     b"default-src 'self'; img-src 'self' data:; frame-ancestors 'none'; base-uri 'none'; "
     b"form-action 'self'"),
    (b"x-content-type-options", b"nosniff"),
    (b"x-frame-options", b"DENY"),
    (b"referrer-policy", b"no-referrer"),
)  # fmt: skip
#: FastAPI's interactive API docs load Swagger UI from a CDN with an inline script: no CSP there.
_DOCS_PATHS = ("/docs", "/redoc")


class SecurityHeaders:
    """ASGI middleware: the security headers on every HTTP answer (the CSP not on the API docs)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        docs = scope["path"].removeprefix(scope.get("root_path", "")).startswith(_DOCS_PATHS)

        async def with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                have = {k.lower() for k, _ in message.get("headers", ())}
                extra = [
                    (k, v)
                    for k, v in SECURITY_HEADERS
                    if k not in have and not (docs and k == b"content-security-policy")
                ]
                message = {**message, "headers": [*message.get("headers", ()), *extra]}
            await send(message)

        await self.app(scope, receive, with_headers)


class BodyLimit:
    """ASGI middleware: at most ``limits[path]`` (else ``default``) bytes of request body, and
    at most ``max_header_bytes`` of headers (431)."""

    def __init__(
        self,
        app: ASGIApp,
        default: int = DEFAULT_MAX_BODY,
        limits: Mapping[str, int] | None = None,
        max_header_bytes: int | None = None,
    ) -> None:
        self.app = app
        self.default = default
        self.limits = dict(limits or {})
        self.max_header_bytes = max_header_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path, root = scope["path"], scope.get("root_path", "")
        if root and path.startswith(root):  # served under a prefix: limits name the app's own paths
            path = path[len(root) :]
        limit = self.limits.get(path, self.default)
        if self.max_header_bytes is not None:
            size = sum(len(k) + len(v) + 4 for k, v in scope.get("headers", ()))
            if size > self.max_header_bytes:
                detail = f"request headers of {size} bytes are over the {self.max_header_bytes}-byte limit"
                await JSONResponse({"detail": detail}, status_code=431)(scope, receive, send)
                return
        for name, value in scope.get("headers", ()):
            if name == b"content-length":
                declared = value.decode("latin-1").strip()
                if not declared.isdigit() or int(declared) > limit:
                    detail = _too_large(limit) if declared.isdigit() else "bad Content-Length header"
                    status = 413 if declared.isdigit() else 400
                    await JSONResponse({"detail": detail}, status_code=status)(scope, receive, send)
                    return
        seen = 0

        async def limited() -> Message:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > limit:
                    # An HTTPException passes through FastAPI's body reading (and the NCCL
                    # push's own streaming) untouched and becomes the 413 JSON answer.
                    raise HTTPException(413, _too_large(limit))
            return message

        await self.app(scope, limited, send)
