"""Refuse input no database can store before it reaches a handler.

PostgreSQL text cannot hold a NUL character; a query or path carrying one would fail deep in
the driver as a 500. It is bad input, so it gets a 422 naming the parameter instead.
"""

from __future__ import annotations

from fastapi import HTTPException, Request


def reject_nul(request: Request) -> None:
    if "\x00" in request.url.path or "%00" in request.url.path:
        raise HTTPException(422, "the path contains a NUL character")
    for key, value in request.query_params.multi_items():
        if "\x00" in key or "\x00" in value:
            raise HTTPException(422, f"query parameter {key!r} contains a NUL character")
