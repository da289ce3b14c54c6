"""``POST /api/v1/ingest/nccl``: training jobs push NCCL Inspector records instead of writing files.

The body is JSON lines (or a JSON array) of Inspector records; it is parsed strictly, so a bad
record rejects the whole request with a 422 naming the line, and nothing half-parsed is kept.
Accepted rows are queued and go through the detectors with the next poll.
"""

from __future__ import annotations

import asyncio

from fastapi import APIRouter, HTTPException, Query, Request
from pydantic import BaseModel

from collectors.nccl import parse_push
from service.runner import Runner


class IngestOut(BaseModel):
    accepted_rows: int
    job: str


def make_ingest_router(runner: Runner, max_bytes: int) -> APIRouter:
    router = APIRouter(prefix="/api/v1/ingest", tags=["ingest"])

    @router.post("/nccl", response_model=IngestOut, status_code=202)
    async def ingest_nccl(
        request: Request,
        job: str = Query(..., min_length=1, max_length=200, description="job id the records belong to"),
        gpus_per_host: int | None = Query(None, ge=1, le=64),
    ) -> IngestOut:
        """Queue Inspector records (application/x-ndjson, application/jsonl or application/json)."""
        declared = request.headers.get("content-length")
        if declared is not None and declared.isdigit() and int(declared) > max_bytes:
            raise HTTPException(413, f"body of {declared} bytes is over the {max_bytes}-byte limit")
        body = bytearray()
        async for chunk in request.stream():
            body += chunk
            if len(body) > max_bytes:
                raise HTTPException(413, f"body is over the {max_bytes}-byte limit")
        content_type = request.headers.get("content-type", "application/x-ndjson")
        try:
            # Up to max_push_bytes of JSON: parse off the event loop so scrapes and the API go on.
            batch = await asyncio.to_thread(
                parse_push, bytes(body), content_type, job=job, gpus_per_host=gpus_per_host
            )
        except ValueError as e:
            raise HTTPException(422, str(e)) from None
        except RecursionError:  # e.g. 100,000 "[": a few bytes, deeper than the JSON parser goes
            raise HTTPException(422, "body is nested too deeply to be NCCL Inspector records") from None
        if batch.num_rows:
            runner.push(batch)
        return IngestOut(accepted_rows=batch.num_rows, job=job)

    return router
