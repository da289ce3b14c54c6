"""A real HTTP server for tests: uvicorn on 127.0.0.1 with an ephemeral port, in a thread."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from fastapi import FastAPI

from graywire.fabricsim.live import serve_app


@contextmanager
def serve(app: FastAPI) -> Iterator[str]:
    """Run ``app`` until the block ends; yields its base URL."""
    with serve_app(app, lifespan="off") as url:
        yield url
