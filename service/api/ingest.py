"""``POST /api/v1/ingest/nccl``: training jobs push NCCL Inspector records instead of writing files.

The body is JSON lines (or a JSON array) of Inspector records. Every check a push must pass,
in order, is :class:`~graywire.service.ingest.admission.Admission`'s; this route reads the
request into it and answers its refusals. Accepted rows go through their own detectors with
the next poll; alone they put a host on watch, never drain it.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, HTTPException, Query, Request

from graywire.service.api.deps import AdmissionDep, Ingester
from graywire.service.api.schemas import ErrorOut, IngestOut
from graywire.service.ingest.admission import Refused

RESPONSES: dict[int | str, dict[str, Any]] = {
    403: {
        "model": ErrorOut,
        "description": "the token's role may not push, or the job or a host is outside its scope",
    },
    429: {
        "model": ErrorOut,
        "description": "over the token's rate limit (ingest.rate_limit); retry after Retry-After seconds",
        "headers": {"Retry-After": {"description": "seconds to wait", "schema": {"type": "integer"}}},
    },
    503: {
        "model": ErrorOut,
        "description": "database unavailable, or the scheduler a scoped token needs cannot be asked; "
        "retry after Retry-After seconds",
        "headers": {"Retry-After": {"description": "seconds to wait", "schema": {"type": "integer"}}},
    },
}
#: The body, read raw (not by FastAPI): NCCL Inspector records, never empty. Whether they are
#: admitted depends on the fabric model, the token's scope and graywire's clock (a 422 says why).
BODY: dict[str, Any] = {
    "requestBody": {
        "required": True,
        "description": "NCCL Inspector records: JSON lines, or one JSON record or an array of them",
        "content": {
            media: {"schema": {"type": "string", "minLength": 1}}
            for media in ("application/x-ndjson", "application/jsonl", "text/plain")
        }
        | {"application/json": {"schema": {"type": ["object", "array"]}}},
    }
}
router = APIRouter(prefix="/api/v1", tags=["ingest"])


@router.post(
    "/ingest/nccl", response_model=IngestOut, status_code=202, responses=RESPONSES, openapi_extra=BODY
)
async def ingest_nccl(
    request: Request,
    admission: AdmissionDep,
    principal: Ingester,
    job: str = Query(..., min_length=1, max_length=200, description="job id the records belong to"),
    gpus_per_host: int | None = Query(None, ge=1, le=64),
) -> IngestOut:
    """Queue Inspector records (application/x-ndjson, application/jsonl or application/json)."""
    try:
        rows = await admission.admit(
            principal,
            job,
            request.stream(),
            content_type=request.headers.get("content-type"),
            declared_length=request.headers.get("content-length"),
            gpus_per_host=gpus_per_host,
        )
    except Refused as e:
        raise HTTPException(e.status, e.detail, headers=e.headers) from None
    return IngestOut(accepted_rows=rows, job=job)
