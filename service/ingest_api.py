"""``POST /api/v1/ingest/nccl``: training jobs push NCCL Inspector records instead of writing files.

The body is JSON lines (or a JSON array) of Inspector records; it is parsed strictly, so a bad
record rejects the whole request with a 422 naming the line, and nothing half-parsed is kept.
Pushed data is the least trusted input (docs/security.md): a push must name hosts of the
fabric model and be dated within ``ingest.max_age`` behind and ``ingest.max_clock_skew``
ahead of graywire's own clock. Accepted rows are queued and go through their own detectors
with the next poll; alone they put a host on watch, never drain it.
"""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime

import pyarrow as pa
import pyarrow.compute as pc
from fastapi import APIRouter, HTTPException, Query, Request
from pydantic import BaseModel

from collectors.nccl import parse_push
from fabricsim.faults import parse_duration
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
            _check_time(runner, batch)
            batch = _check_hosts(runner, batch)
        if batch.num_rows:
            _check_communicators(runner, batch)
            runner.push(_received_now(batch))
        return IngestOut(accepted_rows=batch.num_rows, job=job)

    return router


def _received_now(batch: pa.RecordBatch) -> pa.RecordBatch:
    """The batch timed by graywire's receipt: its detectors' "now" is never the caller's clock
    (the rows' own start times stay, as evidence)."""
    i = batch.schema.get_field_index("time")
    now = pa.scalar(datetime.now(UTC), type=batch.schema.field("time").type)
    return batch.set_column(
        i, batch.schema.field("time"), pa.array([now.value] * batch.num_rows, batch.schema.field("time").type)
    )


def _check_time(runner: Runner, batch: pa.RecordBatch) -> None:
    """Refuse a push dated ahead of graywire's clock or too long ago: its times cannot be checked,
    and a detector must never take a caller's clock for "now"."""
    cfg = runner.settings.ingest
    t = batch.column("time")[0].as_py().timestamp()
    now = time.time()
    if t > now + parse_duration(cfg.max_clock_skew):
        runner.reject("nccl_timing", "clock_ahead", batch.num_rows)
        raise HTTPException(
            422, f"records are dated {t - now:.0f} s ahead of graywire's clock (ingest.max_clock_skew "
            f"{cfg.max_clock_skew}): check the job's clock",
        )  # fmt: skip
    if t < now - parse_duration(cfg.max_age):
        runner.reject("nccl_timing", "too_old", batch.num_rows)
        raise HTTPException(
            422, f"records are {now - t:.0f} s old (ingest.max_age {cfg.max_age}): push them as written"
        )


def _check_hosts(runner: Runner, batch: pa.RecordBatch) -> pa.RecordBatch:
    """Only hosts of the fabric model (not switches): a push may not invent nodes to page about."""
    hosts = batch.column("host").cast(pa.string())
    f = runner.fabric
    names = [n for n, role in zip(f.node_names, f.node_roles, strict=True) if role == "host"]
    known = pc.is_in(hosts, value_set=pa.array(names, pa.string())).fill_null(False)
    if pc.all(known).as_py():
        return batch
    bad = pc.unique(hosts.filter(pc.invert(known))).to_pylist()
    shown = ", ".join("(none)" if h is None else repr(h) for h in sorted(bad, key=str)[:5])
    more = f" and {len(bad) - 5} more" if len(bad) > 5 else ""
    n_bad = batch.num_rows - pc.sum(known.cast(pa.int64())).as_py()
    runner.reject("nccl_timing", "unknown_host", n_bad)
    if runner.settings.ingest.unknown_hosts == "reject":
        raise HTTPException(
            422, f"{n_bad} rows name hosts that are not in the fabric model (hosts only): {shown}{more} "
            "(ingest.unknown_hosts: drop counts and drops them instead)",
        )  # fmt: skip
    return batch.filter(known)


def _check_communicators(runner: Runner, batch: pa.RecordBatch) -> None:
    """Bound the state pushes create: at most ``ingest.max_communicators`` live at once."""
    cfg = runner.settings.ingest
    comms = pc.unique(batch.column("communicator").cast(pa.string())).to_pylist()
    now = time.time()
    live = runner.push_communicators
    for c, seen in list(live.items()):
        if seen < now - parse_duration(cfg.max_age):
            del live[c]
    new = [c for c in comms if c not in live]
    if len(live) + len(new) > cfg.max_communicators:
        runner.reject("nccl_timing", "communicator_cap", batch.num_rows)
        raise HTTPException(
            422, f"this push adds {len(new)} communicators to the {len(live)} pushed ones graywire tracks, "
            f"over ingest.max_communicators ({cfg.max_communicators})",
        )  # fmt: skip
    for c in comms:
        live[c] = now
