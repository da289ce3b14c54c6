"""A push's admission: every check NCCL timings a job POSTs must pass, in order, and their state.

Pushed data is the least trusted input (docs/security.md). :meth:`Admission.admit` runs the
checks cheapest first, the first two before the body is read, so a flood costs no parsing:

1. the token's request rate (429 with ``Retry-After``);
2. the token's jobs (403);
3. the body's size (413), then its parse, strict (422 naming the line);
4. the token's row rate (429; 413 for more rows than its burst holds);
5. the clock: dated within ``ingest.max_age`` behind and ``ingest.max_clock_skew`` ahead of
   graywire's own (422). Judged here only: admitted rows are stamped with their receipt time,
   so the poll loop never takes a caller's clock for "now";
6. hosts of the fabric model, not switches (422, or dropped: ``ingest.unknown_hosts``);
7. a scoped token's hosts: its static list, and where its scheduler runs the job now (403 or
   dropped; 503 while the scheduler cannot be asked: unknown is not trusted);
8. the communicators pushes may keep live at once, in all and per job (422).

A refusal is :class:`Refused` (the HTTP status, a message that names the problem, headers);
its rows are counted in ``graywire_rejected_rows`` and the push in
``graywire_ingest_refused_pushes_total``. What passes goes to the poll loop through
:class:`PushSink`, which this room knows only by that protocol.
"""

from __future__ import annotations

import asyncio
import functools
import math
import time
from collections.abc import AsyncIterable, Collection
from dataclasses import dataclass, field
from datetime import UTC, datetime
from fnmatch import fnmatchcase
from typing import Protocol

import pyarrow as pa
import pyarrow.compute as pc
from ClusterShell.NodeSet import NodeSet, NodeSetException

from graywire.collectors.model import Fabric
from graywire.collectors.nccl.push import parse_push
from graywire.collectors.schemas import RecordKind
from graywire.collectors.units import format_duration
from graywire.service.auth import Principal
from graywire.service.config import Settings, TokenScope
from graywire.service.ingest.limits import RateLimiter, RefusedPushes, retry_after
from graywire.service.ingest.scope import JobPlacement, SchedulerUnavailable
from graywire.service.schedsync.slurm import parse_hostlist
from graywire.service.state.fabric import StateBoard

#: A scheduler that cannot be asked is usually back within seconds (a controller failing over).
SCHEDULER_RETRY_AFTER = "5"
RECORD = RecordKind.NCCL_TIMING
#: A push without a Content-Type header: the Inspector's own JSON lines.
DEFAULT_CONTENT_TYPE = "application/x-ndjson"


@dataclass
class Refused(Exception):
    """A push refused: the HTTP status to answer, and why in words a job's owner can act on."""

    status: int
    detail: str
    headers: dict[str, str] | None = field(default=None)

    def __str__(self) -> str:
        return f"{self.status}: {self.detail}"


class PushSink(Protocol):
    """Where admitted rows go: the poll loop, judged with its next poll."""

    #: Changes when the receiver starts over (a replica taking the lead): what was admitted
    #: under an earlier term, such as the live communicators, is not this one's to go on.
    term: int

    def push(self, batch: pa.RecordBatch) -> None: ...


class Admission:
    """The checks of every push, in order, with the state they keep: rate buckets, the
    scheduler's answers, the refused-push counts and the communicators pushes hold live."""

    def __init__(
        self,
        settings: Settings,
        fabric: Fabric,
        board: StateBoard,
        sink: PushSink,
        limiter: RateLimiter | None = None,
        placement: JobPlacement | None = None,
    ) -> None:
        self.settings = settings
        self.cfg = settings.ingest
        self.max_bytes = settings.max_push_bytes
        self.board = board
        self.sink = sink
        self.limiter = limiter or RateLimiter(settings.ingest.rate_limit)
        self.placement = placement or JobPlacement(settings.scheduler)
        #: ``graywire_ingest_refused_pushes_total`` (the app registers it).
        self.refused = RefusedPushes()
        names = [n for n, role in zip(fabric.node_names, fabric.node_roles, strict=True) if role == "host"]
        self._hosts = pa.array(names, pa.string())
        #: (job, communicator) pushed recently -> when last, for the sink's term.
        self._communicators: dict[tuple[str, str], float] = {}
        self._term = sink.term

    async def admit(
        self,
        principal: Principal,
        job: str,
        body: AsyncIterable[bytes],
        *,
        content_type: str | None = None,
        declared_length: str | None = None,
        gpus_per_host: int | None = None,
    ) -> int:
        """Run every check on one push and hand what passes to the sink; returns the rows
        admitted (hosts outside the model or the scope are dropped when ``ingest.unknown_hosts``
        is ``drop``). Raises :class:`Refused` on the first check that fails."""
        self._check_request(principal, job)
        data = await self._read(body, declared_length)
        try:
            # Up to max_push_bytes of JSON: parse off the event loop so scrapes and the API go on.
            batch = await asyncio.to_thread(
                parse_push, data, DEFAULT_CONTENT_TYPE if content_type is None else content_type,
                job=job, gpus_per_host=gpus_per_host,
            )  # fmt: skip
        except ValueError as e:
            raise Refused(422, str(e)) from None
        except RecursionError:  # e.g. 100,000 "[": a few bytes, deeper than the JSON parser goes
            raise Refused(422, "body is nested too deeply to be NCCL Inspector records") from None
        if batch.num_rows:
            self._check_row_rate(principal, batch)
            self._check_time(batch)
            batch = self._check_hosts(batch)
        if batch.num_rows and principal.scope is not None:
            batch = await self._check_scope(principal, principal.scope, job, batch)
        if batch.num_rows:
            self._check_communicators(batch, job)
            self.sink.push(_received_now(batch))
        return batch.num_rows

    def _reject(self, reason: str, rows: int) -> None:
        self.board.count_rejected(RECORD, reason, rows)

    def _check_request(self, principal: Principal, job: str) -> None:
        """The token's request bucket and its jobs: before the body is read."""
        if wait := self.limiter.request(principal.name, principal.rate_limit):
            self.refused.add(principal.name, "rate_limited")
            after = retry_after(wait)
            raise Refused(
                429,
                f"token {principal.name!r} is over its push rate limit; retry in {after} s",
                {"Retry-After": after},
            )
        scope = principal.scope
        if scope is not None and not any(fnmatchcase(job, p) for p in scope.jobs):
            self.refused.add(principal.name, "job_out_of_scope")
            raise Refused(
                403, f"token {principal.name!r} may push only for jobs matching {', '.join(scope.jobs)}, "
                f"not {job!r}",
            )  # fmt: skip

    async def _read(self, body: AsyncIterable[bytes], declared: str | None) -> bytes:
        """The body, refused as soon as it says or shows it is over ``max_push_bytes``."""
        if declared is not None and declared.isdigit() and int(declared) > self.max_bytes:
            raise Refused(413, f"body of {declared} bytes is over the {self.max_bytes}-byte limit")
        data = bytearray()
        async for chunk in body:
            data += chunk
            if len(data) > self.max_bytes:
                raise Refused(413, f"body is over the {self.max_bytes}-byte limit")
        return bytes(data)

    def _check_row_rate(self, principal: Principal, batch: pa.RecordBatch) -> None:
        """The token's row budget (``rows_per_second``), once the rows are counted."""
        wait = self.limiter.rows(principal.name, principal.rate_limit, batch.num_rows)
        if not wait:
            return
        self._reject("rate_limited", batch.num_rows)
        self.refused.add(principal.name, "rate_limited")
        if math.isinf(wait):
            raise Refused(
                413, f"a push of {batch.num_rows} rows is more than token {principal.name!r}'s row burst "
                "(rate_limit.rows_burst) holds: split it",
            )  # fmt: skip
        after = retry_after(wait)
        raise Refused(
            429,
            f"token {principal.name!r} is over its row rate limit; retry in {after} s",
            {"Retry-After": after},
        )

    def _check_time(self, batch: pa.RecordBatch) -> None:
        """Refuse a push dated ahead of graywire's clock or too long ago: its times cannot be
        checked, and a detector must never take a caller's clock for "now"."""
        cfg = self.cfg
        t = batch.column("time")[0].as_py().timestamp()
        now = time.time()
        if t > now + cfg.max_clock_skew.total_seconds():
            self._reject("clock_ahead", batch.num_rows)
            raise Refused(
                422, f"records are dated {t - now:.0f} s ahead of graywire's clock (ingest.max_clock_skew "
                f"{format_duration(cfg.max_clock_skew)}): check the job's clock",
            )  # fmt: skip
        if t < now - cfg.max_age.total_seconds():
            self._reject("too_old", batch.num_rows)
            raise Refused(
                422,
                f"records are {now - t:.0f} s old (ingest.max_age {format_duration(cfg.max_age)}): "
                "push them as written",
            )

    def _check_hosts(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        """Only hosts of the fabric model (not switches): a push may not invent nodes to page about."""
        hosts = batch.column("host").cast(pa.string())
        known = pc.is_in(hosts, value_set=self._hosts).fill_null(False)
        if pc.all(known).as_py():
            return batch
        bad = pc.unique(hosts.filter(pc.invert(known))).to_pylist()
        shown = ", ".join("(none)" if h is None else repr(h) for h in sorted(bad, key=str)[:5])
        more = f" and {len(bad) - 5} more" if len(bad) > 5 else ""
        n_bad = batch.num_rows - pc.sum(known.cast(pa.int64())).as_py()
        self._reject("unknown_host", n_bad)
        if self.cfg.unknown_hosts == "reject":
            raise Refused(
                422, f"{n_bad} rows name hosts that are not in the fabric model (hosts only): {shown}{more} "
                "(ingest.unknown_hosts: drop counts and drops them instead)",
            )  # fmt: skip
        return batch.filter(known)

    async def _check_scope(
        self, principal: Principal, scope: TokenScope, job: str, batch: pa.RecordBatch
    ) -> pa.RecordBatch:
        """Only the token's hosts: its static ones, and where its scheduler runs ``job`` now. The
        scheduler is asked only for hosts the static list lacks; one it cannot ask refuses the push."""
        static = _static_hosts(tuple(scope.hosts))
        names = pc.unique(batch.column("host").cast(pa.string())).to_pylist()
        outside = [h for h in names if not _holds(static, h)]
        note = ""
        if outside and scope.scheduler is not None:
            try:
                placed = await self.placement.hosts(scope.scheduler, job)
            except SchedulerUnavailable as e:
                self._reject("scheduler_unavailable", batch.num_rows)
                self.refused.add(principal.name, "scheduler_unavailable")
                raise Refused(
                    503, f"cannot tell where job {job!r} runs, so this push is refused: {e}",
                    {"Retry-After": SCHEDULER_RETRY_AFTER},
                ) from None  # fmt: skip
            if not placed:
                note = (
                    f" ({scope.scheduler}: job {job!r} is {'unknown' if placed is None else 'not running'})"
                )
            outside = [h for h in outside if not placed or not _holds(placed, h)]
        if not outside:
            return batch
        bad = pc.is_in(batch.column("host").cast(pa.string()), value_set=pa.array(outside, pa.string()))
        n_bad = pc.sum(bad.cast(pa.int64())).as_py()
        self._reject("out_of_scope", n_bad)
        if self.cfg.unknown_hosts == "reject":
            self.refused.add(principal.name, "host_out_of_scope")
            shown = ", ".join(repr(h) for h in sorted(outside)[:5])
            more = f" and {len(outside) - 5} more" if len(outside) > 5 else ""
            raise Refused(
                403, f"{n_bad} rows name hosts outside token {principal.name!r}'s scope: {shown}{more}{note}"
            )
        return batch.filter(pc.invert(bad))

    def _check_communicators(self, batch: pa.RecordBatch, job: str) -> None:
        """Bound the state pushes create: at most ``ingest.max_communicators`` live at once, and
        ``ingest.max_communicators_per_job`` of them for one job."""
        cfg = self.cfg
        live = self._communicators
        if self._term != self.sink.term:  # the receiver started over: so do its communicators
            live.clear()
            self._term = self.sink.term
        comms = pc.unique(batch.column("communicator").cast(pa.string())).to_pylist()
        now = time.time()
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
            self._reject("communicator_cap", batch.num_rows)
            raise Refused(422, f"this push adds {len(new)} communicators {over}")
        for c in comms:
            live[(job, c)] = now


def _received_now(batch: pa.RecordBatch) -> pa.RecordBatch:
    """The batch timed by graywire's receipt: its detectors' "now" is never the caller's clock
    (the rows' own start times stay, as evidence)."""
    i = batch.schema.get_field_index("time")
    now = pa.scalar(datetime.now(UTC), type=batch.schema.field("time").type)
    return batch.set_column(
        i, batch.schema.field("time"), pa.array([now.value] * batch.num_rows, batch.schema.field("time").type)
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
