"""The OpenAPI document as the server applies it: what FastAPI derives, plus the rules that
live outside the routes' signatures.

- Reads under ``/api`` need a token when ``auth.read_open`` is false (``Auth.read_guard``, an
  app-wide dependency the routes do not name), so each such operation declares the bearer scheme.
- No query or path value may hold a NUL character (``reject_nul``: PostgreSQL text cannot), so
  every string parameter states it with a pattern.
- A method a path does not have is a 405 whose ``Allow`` lists every method the path has, not
  only those of the first route that matched it (Starlette's answer).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exception_handlers import http_exception_handler
from fastapi.openapi.utils import get_openapi
from fastapi.responses import JSONResponse, Response
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Match

from graywire.service.api.schemas import NO_NUL
from graywire.service.auth import READ_METHODS

BEARER = "HTTPBearer"
METHODS = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE")


def _no_nul(schema: dict[str, Any]) -> None:
    """Give every string (directly, or as one of ``anyOf``) the NUL-free pattern it lacks."""
    for option in schema.get("anyOf", [schema]):
        if option.get("type") == "string" and "pattern" not in option and "enum" not in option:
            option["pattern"] = NO_NUL
        if option.get("type") == "array":
            _no_nul(option.get("items", {}))


def contract_openapi(app: FastAPI, read_open: bool) -> Callable[[], dict[str, Any]]:
    """``app.openapi``: the derived document with the rules above, built once."""

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is not None:
            return app.openapi_schema
        doc = get_openapi(
            title=app.title, version=app.version, summary=app.summary, description=app.description,
            routes=app.routes,
        )  # fmt: skip
        schemes = doc.setdefault("components", {}).setdefault("securitySchemes", {})
        for path, operations in doc.get("paths", {}).items():
            for method, op in operations.items():
                for param in op.get("parameters", []):
                    if param.get("in") in ("query", "path"):
                        _no_nul(param.get("schema", {}))
                if (
                    path.startswith("/api/")
                    and "security" not in op
                    and not (read_open and method.upper() in READ_METHODS)
                ):
                    op["security"] = [{BEARER: []}]
        if BEARER not in schemes:
            schemes[BEARER] = {"type": "http", "scheme": "bearer"}
        app.openapi_schema = doc
        return doc

    return openapi


def method_not_allowed(app: FastAPI) -> Callable[[Request, Exception], Any]:
    """A 405 that lists in ``Allow`` every method some route of the path takes."""

    async def handler(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, StarletteHTTPException)
        if exc.status_code != 405:
            return await http_exception_handler(request, exc)
        allowed = [
            method
            for method in METHODS
            if any(r.matches({**request.scope, "method": method})[0] is Match.FULL for r in app.router.routes)
        ]
        headers = {k: v for k, v in (exc.headers or {}).items() if k.lower() != "allow"}
        if allowed:
            headers["allow"] = ", ".join(allowed)
        return JSONResponse({"detail": exc.detail}, status_code=405, headers=headers)

    return handler
