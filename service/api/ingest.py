"""``POST /api/v1/ingest/nccl``: training jobs push NCCL Inspector records instead of writing files.

The body is JSON lines (or a JSON array) of Inspector records; it is parsed strictly, so a bad
record rejects the whole request with a 422 naming the line, and nothing half-parsed is kept.
Pushed data is the least trusted input (docs/security.md): a push must name hosts of the
fabric model and be dated within ``ingest.max_age`` behind and ``ingest.max_clock_skew``
ahead of graywire's own clock. A token with a scope may push only for its jobs and name only
its hosts (a static list and/or where the scheduler runs the job), and every token is rate
limited. Accepted rows are queued and go through their own detectors with the next poll;
alone they put a host on watch, never drain it.
"""

from __future__ import annotations

import asyncio
import functools
import math
import time
from collections.abc import Collection
from datetime import UTC, datetime
from fnmatch import fnmatchcase
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from ClusterShell.NodeSet import NodeSet, NodeSetException
from fastapi import APIRouter, HTTPException, Query, Request

from graywire.collectors.nccl import parse_push
from graywire.collectors.units import format_duration
from graywire.service.api.deps import GuardsDep, Ingester, RunnerDep
from graywire.service.api.schemas import ErrorOut, IngestOut
from graywire.service.auth import Principal
from graywire.service.config import TokenScope
from graywire.service.ingest.limits import IngestGuards, retry_after
from graywire.service.ingest.scope import SchedulerUnavailable
from graywire.service.runner import Runner
from graywire.service.schedsync.slurm import parse_hostlist

#: A scheduler that cannot be asked is usually back within seconds (a controller failing over).
SCHEDULER_RETRY_AFTER = "5"

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
router = APIRouter(prefix="/api/v1", tags=["ingest"])


@router.post("/ingest/nccl", response_model=IngestOut, status_code=202, responses=RESPONSES)
async def ingest_nccl(
    request: Request,
    runner: RunnerDep,
    guards: GuardsDep,
    principal: Ingester,
    job: str = Query(..., min_length=1, max_length=200, description="job id the records belong to"),
    gpus_per_host: int | None = Query(None, ge=1, le=64),
) -> IngestOut:
    """Queue Inspector records (application/x-ndjson, application/jsonl or application/json)."""
    if wait := guards.limiter.request(principal.name, principal.rate_limit):
        guards.refused.add(principal.name, "rate_limited")
        after = retry_after(wait)
        raise HTTPException(
            429,
            f"token {principal.name!r} is over its push rate limit; retry in {after} s",
            headers={"Retry-After": after},
        )
    scope = principal.scope
    if scope is not None and not any(fnmatchcase(job, p) for p in scope.jobs):
        guards.refused.add(principal.name, "job_out_of_scope")
        raise HTTPException(
            403, f"token {principal.name!r} may push only for jobs matching {', '.join(scope.jobs)}, "
            f"not {job!r}",
        )  # fmt: skip
    max_bytes = runner.settings.max_push_bytes
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
        _check_row_rate(runner, guards, principal, batch)
        _check_time(runner, batch)
        batch = _check_hosts(runner, batch)
    if batch.num_rows and scope is not None:
        batch = await _check_scope(runner, guards, principal, scope, job, batch)
    if batch.num_rows:
        _check_communicators(runner, batch, job)
        runner.push(_received_now(batch))
    return IngestOut(accepted_rows=batch.num_rows, job=job)


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
    if t > now + cfg.max_clock_skew.total_seconds():
        runner.reject("nccl_timing", "clock_ahead", batch.num_rows)
        raise HTTPException(
            422, f"records are dated {t - now:.0f} s ahead of graywire's clock (ingest.max_clock_skew "
            f"{format_duration(cfg.max_clock_skew)}): check the job's clock",
        )  # fmt: skip
    if t < now - cfg.max_age.total_seconds():
        runner.reject("nccl_timing", "too_old", batch.num_rows)
        raise HTTPException(
            422,
            f"records are {now - t:.0f} s old (ingest.max_age {format_duration(cfg.max_age)}): "
            "push them as written",
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


def _check_row_rate(
    runner: Runner, guards: IngestGuards, principal: Principal, batch: pa.RecordBatch
) -> None:
    """The token's row budget (``rows_per_second``), once the rows are counted."""
    wait = guards.limiter.rows(principal.name, principal.rate_limit, batch.num_rows)
    if not wait:
        return
    runner.reject("nccl_timing", "rate_limited", batch.num_rows)
    guards.refused.add(principal.name, "rate_limited")
    if math.isinf(wait):
        raise HTTPException(
            413, f"a push of {batch.num_rows} rows is more than token {principal.name!r}'s row burst "
            "(rate_limit.rows_burst) holds: split it",
        )  # fmt: skip
    after = retry_after(wait)
    raise HTTPException(
        429,
        f"token {principal.name!r} is over its row rate limit; retry in {after} s",
        headers={"Retry-After": after},
    )


@functools.lru_cache(maxsize=256)
def _static_hosts(exprs: tuple[str, ...]) -> NodeSet:
    return parse_hostlist(",".join(exprs)) if exprs else NodeSet()


def _holds(hosts: Collection[str], name: str) -> bool:
    """Whether ``hosts`` has the host ``name`` (a NodeSet would read "a,b" as two hosts)."""
    if isinstance(hosts, NodeSet):
        if any(c in name for c in ",[]!&^@ "):
            return False
        try:
            return name in hosts
        except NodeSetException:
            return False
    return name in hosts


async def _check_scope(
    runner: Runner,
    guards: IngestGuards,
    principal: Principal,
    scope: TokenScope,
    job: str,
    batch: pa.RecordBatch,
) -> pa.RecordBatch:
    """Only the token's hosts: its static ones, and where its scheduler runs ``job`` now. The
    scheduler is asked only for hosts the static list lacks; one it cannot ask refuses the push."""
    static = _static_hosts(tuple(scope.hosts))
    names = pc.unique(batch.column("host").cast(pa.string())).to_pylist()
    outside = [h for h in names if not _holds(static, h)]
    note = ""
    if outside and scope.scheduler is not None:
        try:
            placed = await guards.placement.hosts(scope.scheduler, job)
        except SchedulerUnavailable as e:
            runner.reject("nccl_timing", "scheduler_unavailable", batch.num_rows)
            guards.refused.add(principal.name, "scheduler_unavailable")
            raise HTTPException(
                503, f"cannot tell where job {job!r} runs, so this push is refused: {e}",
                headers={"Retry-After": SCHEDULER_RETRY_AFTER},
            ) from None  # fmt: skip
        if not placed:
            note = f" ({scope.scheduler}: job {job!r} is {'unknown' if placed is None else 'not running'})"
        outside = [h for h in outside if not placed or not _holds(placed, h)]
    if not outside:
        return batch
    bad = pc.is_in(batch.column("host").cast(pa.string()), value_set=pa.array(outside, pa.string()))
    n_bad = pc.sum(bad.cast(pa.int64())).as_py()
    runner.reject("nccl_timing", "out_of_scope", n_bad)
    if runner.settings.ingest.unknown_hosts == "reject":
        guards.refused.add(principal.name, "host_out_of_scope")
        shown = ", ".join(repr(h) for h in sorted(outside)[:5])
        more = f" and {len(outside) - 5} more" if len(outside) > 5 else ""
        raise HTTPException(
            403, f"{n_bad} rows name hosts outside token {principal.name!r}'s scope: {shown}{more}{note}"
        )
    return batch.filter(pc.invert(bad))


def _check_communicators(runner: Runner, batch: pa.RecordBatch, job: str) -> None:
    """Bound the state pushes create: at most ``ingest.max_communicators`` live at once, and
    ``ingest.max_communicators_per_job`` of them for one job."""
    cfg = runner.settings.ingest
    comms = pc.unique(batch.column("communicator").cast(pa.string())).to_pylist()
    now = time.time()
    live = runner.push_communicators
    horizon = now - cfg.max_age.total_seconds()
    for key in [k for k, seen in live.items() if seen < horizon]:
        del live[key]
    new = [c for c in comms if (job, c) not in live]
    of_job = sum(1 for j, _ in live if j == job)
    over = None
    if of_job + len(new) > cfg.max_communicators_per_job:
        cap = cfg.max_communicators_per_job
        over = f"to job {job!r}'s {of_job}, over ingest.max_communicators_per_job ({cap})"
    elif len(live) + len(new) > cfg.max_communicators:
        cap = cfg.max_communicators
        over = f"to the {len(live)} pushed ones graywire tracks, over ingest.max_communicators ({cap})"
    if over is not None:
        runner.reject("nccl_timing", "communicator_cap", batch.num_rows)
        raise HTTPException(422, f"this push adds {len(new)} communicators {over}")
    for c in comms:
        live[(job, c)] = now
