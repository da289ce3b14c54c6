"""The service side of the host agent: :class:`AgentCollector` and the source config that
lists the agents to scrape (the wire format is :mod:`~graywire.collectors.host.agent_wire`)."""

from __future__ import annotations

import asyncio
import json
import time

import httpx
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from graywire.collectors.base import SKIP_REASONS, ScrapeResult, failed, redact_url
from graywire.collectors.host.agent_wire import ARROW_STREAM, SKIPPED_KEY, SOURCE
from graywire.collectors.http import fetch_bounded, scrape_client
from graywire.collectors.schemas import (
    COUNTER_BITS_KEY,
    GPU_NIC_PATH,
    NCCL_RANK_STATE,
    PORT_COUNTERS,
    PORT_SAMPLE,
    SATURATING_KEY,
    RecordKind,
    record_kind,
)

MAX_BODY_BYTES = 16 * 2**20  # a host has tens of ports; a bigger body is not an agent's


def _skipped_metadata(meta: dict[bytes, bytes]) -> dict[str, int]:
    """An agent's skip counts, checked: only known reasons and counts (labels stay bounded)."""
    raw = meta.get(SKIPPED_KEY)
    if raw is None:
        return {}
    got = json.loads(raw)
    if not isinstance(got, dict) or not all(
        r in SKIP_REASONS and isinstance(n, int) and not isinstance(n, bool) and 0 <= n < 2**32
        for r, n in got.items()
    ):
        raise ValueError(f"bad {SKIPPED_KEY.decode()} metadata")
    return got


def _width_metadata(meta: dict[bytes, bytes]) -> dict[bytes, bytes]:
    """The counter-width keys of an agent's schema, checked: they steer wrap/reset decisions."""
    out: dict[bytes, bytes] = {}
    if COUNTER_BITS_KEY in meta:
        bits = json.loads(meta[COUNTER_BITS_KEY])
        if not isinstance(bits, dict) or not all(
            c in PORT_COUNTERS and isinstance(b, int) and 1 <= b < 64 for c, b in bits.items()
        ):
            raise ValueError(f"bad {COUNTER_BITS_KEY.decode()} metadata")
        out[COUNTER_BITS_KEY] = meta[COUNTER_BITS_KEY]
    if SATURATING_KEY in meta:
        sat = json.loads(meta[SATURATING_KEY])
        if not isinstance(sat, list) or not all(c in PORT_COUNTERS for c in sat):
            raise ValueError(f"bad {SATURATING_KEY.decode()} metadata")
        out[SATURATING_KEY] = meta[SATURATING_KEY]
    return out


class AgentCollector:
    """Scrapes one agent: ``GET <url>/v1/port_sample``, checked and re-keyed onto a stable dictionary.

    The port dictionary is kept across polls (new keys are appended), so downstream stages that
    cache lookups by dictionary see the same one every poll. Each scrape opens its own HTTP
    client (a client is bound to the event loop that made it), which the scrape's requests
    share: the side views reuse the port samples' connection. The TLS context is shared.

    Every ``paths_interval`` seconds a scrape also fetches ``/v1/gpu_nic_path`` (the host's
    GPU<->NIC layout, which changes only at a reboot). Its failure costs the port samples
    nothing: that view is simply not sent, and retried next interval; an agent without the
    endpoint (404) is not asked again.

    Every scrape also fetches ``/v1/nccl_rank_state`` (the host's ranks in its local NCCL RAS,
    when the agent runs with ``--ncclras``): a live view, so every poll. An agent without the
    endpoint (404) is not asked again; a 503 (no job, RAS not answering) or a bad stream is no
    view this poll (not "healthy"), and the port samples stand.
    """

    source = SOURCE

    def __init__(self, url: str, timeout: float = 5.0, paths_interval: float = 300.0) -> None:
        self.url = url.rstrip("/")
        self.target = redact_url(self.url)
        self.timeout = timeout
        self._ports = pa.array([], type=pa.string())
        self.paths_interval = paths_interval
        self._paths_next = 0.0  # monotonic time of the next gpu_nic_path fetch
        self._paths_off = False
        self._ranks_off = False
        self.rank_state_error: str | None = None  # why the last rank-state view was not used

    async def aclose(self) -> None:
        """Nothing to close: each scrape opens and closes its own client."""

    async def scrape(self) -> ScrapeResult:
        async with scrape_client(self.timeout) as client:
            return await self._scrape(client)

    async def _scrape(self, client: httpx.AsyncClient) -> ScrapeResult:
        t0 = time.perf_counter()
        try:
            async with asyncio.timeout(self.timeout):
                status, ctype, body = await self._fetch(client)
        except TimeoutError:
            return failed(self.source, self.target, f"timed out after {self.timeout:g} s", self._since(t0))
        except (httpx.HTTPError, httpx.InvalidURL, ValueError) as e:
            return failed(self.source, self.target, e, self._since(t0))
        if status != 200:
            text = body[:200].decode(errors="replace")
            return failed(self.source, self.target, f"HTTP {status}: {text}", self._since(t0))
        if ctype != ARROW_STREAM:
            msg = f"content type {ctype or 'none'!r}, not {ARROW_STREAM}"
            return failed(self.source, self.target, msg, self._since(t0))
        try:
            # Up to MAX_BODY_BYTES of Arrow to check and re-key: off the event loop.
            batch, skipped = await asyncio.to_thread(self._decode, body)
        except Exception as e:  # garbage can fail in many ways; all of them are a failed scrape
            return failed(self.source, self.target, e, self._since(t0))
        batches: tuple[pa.RecordBatch, ...] = (batch,)
        # The side views share what is left of the scrape's one timeout, side by side: a slow
        # one costs itself, never the port samples already read (the runner's own deadline
        # would cancel the whole scrape).
        budget = max(0.0, self.timeout - (time.perf_counter() - t0))
        paths, ranks = await asyncio.gather(self._gpu_paths(client, budget), self._rank_state(client, budget))
        if paths is not None and paths.num_rows:
            batches += (paths,)
        if ranks is not None and ranks.num_rows:
            batches += (ranks,)
        return ScrapeResult(self.source, self.target, True, batches, None, self._since(t0), skipped)

    async def _gpu_paths(self, client: httpx.AsyncClient, budget: float) -> pa.RecordBatch | None:
        """The agent's ``gpu_nic_path`` view when one is due; None when not due or not usable."""
        now = time.monotonic()
        if self._paths_off or now < self._paths_next:
            return None
        self._paths_next = now + self.paths_interval
        try:
            async with asyncio.timeout(budget):
                status, ctype, body = await self._fetch(client, "/v1/gpu_nic_path")
            if status == 404:
                self._paths_off = True
                return None
            if status != 200 or ctype != ARROW_STREAM:
                return None
            return await asyncio.to_thread(decode_gpu_paths, body)
        except Exception:  # a bad layout view is no view; the port samples stand
            return None

    async def _rank_state(self, client: httpx.AsyncClient, budget: float) -> pa.RecordBatch | None:
        """The agent's ``nccl_rank_state`` view; None when it has none or it is not usable."""
        if self._ranks_off:
            return None
        try:
            async with asyncio.timeout(budget):
                status, ctype, body = await self._fetch(client, "/v1/nccl_rank_state")
            if status == 404:
                self._ranks_off = True
                return None
            if status != 200 or ctype != ARROW_STREAM:
                self.rank_state_error = f"HTTP {status}: {body[:200].decode(errors='replace')}"
                return None
            batch = await asyncio.to_thread(decode_rank_state, body)
        except Exception as e:  # a bad rank view is no view; the port samples stand
            self.rank_state_error = f"{type(e).__name__}: {e}"
            return None
        self.rank_state_error = None
        return batch

    async def _fetch(
        self, client: httpx.AsyncClient, path: str = "/v1/port_sample"
    ) -> tuple[int, str, bytes]:
        """Status, content type and body, refusing a body larger than any host's batch."""
        return await fetch_bounded(f"{self.url}{path}", ARROW_STREAM, MAX_BODY_BYTES, self.timeout, client)

    @staticmethod
    def _since(t0: float) -> float:
        return time.perf_counter() - t0

    def _decode(self, body: bytes) -> tuple[pa.RecordBatch, dict[str, int]]:
        with pa.ipc.open_stream(body) as reader:
            batches = list(reader)
            schema = reader.schema
        if (
            record_kind(schema) != RecordKind.PORT_SAMPLE
            or (schema.metadata or {}).get(b"graywire.version") != b"1"
        ):
            raise ValueError("not a port_sample v1 stream")
        if not schema.remove_metadata().equals(PORT_SAMPLE.remove_metadata()):
            raise ValueError("schema differs from port_sample v1")
        if len(batches) != 1 or batches[0].num_rows == 0:
            raise ValueError(f"expected one non-empty batch, got {[b.num_rows for b in batches]}")
        batch = batches[0]
        for name in ("time", "port", "source"):
            if batch.column(name).null_count:
                raise ValueError(f"null {name} values")
        if pc.count_distinct(batch.column("time")).as_py() != 1:
            raise ValueError("rows carry different poll times")
        ports = self._stable_ports(batch.column("port"))
        meta = {**(PORT_SAMPLE.metadata or {}), **_width_metadata(dict(schema.metadata or {}))}
        skipped = _skipped_metadata(dict(schema.metadata or {}))
        cols = [ports if f.name == "port" else batch.column(f.name) for f in PORT_SAMPLE]
        return pa.RecordBatch.from_arrays(cols, schema=PORT_SAMPLE.with_metadata(meta)), skipped

    def _stable_ports(self, ports: pa.DictionaryArray) -> pa.DictionaryArray:
        """The same keys as indices into this collector's own, growing dictionary."""
        d = ports.dictionary
        where = pc.index_in(d, value_set=self._ports)
        if where.null_count:
            new = pc.unique(pc.filter(d, pc.is_null(where)))
            self._ports = pa.concat_arrays([self._ports, new])
            where = pc.index_in(d, value_set=self._ports)
        codes = where.to_numpy(zero_copy_only=False).astype(np.int32)[
            ports.indices.to_numpy(zero_copy_only=False)
        ]
        if np.unique(codes).size != codes.size:
            raise ValueError("duplicate port keys in one poll")
        return pa.DictionaryArray.from_arrays(pa.array(codes, type=pa.int32()), self._ports)


def decode_gpu_paths(body: bytes) -> pa.RecordBatch:
    """An agent's ``gpu_nic_path`` stream, checked: the schema, one host, no null keys."""
    with pa.ipc.open_stream(body) as reader:
        batches = list(reader)
        schema = reader.schema
    if record_kind(schema) != RecordKind.GPU_NIC_PATH or not schema.remove_metadata().equals(
        GPU_NIC_PATH.remove_metadata()
    ):
        raise ValueError("not a gpu_nic_path v1 stream")
    if len(batches) != 1:
        raise ValueError(f"expected one batch, got {len(batches)}")
    batch = batches[0]
    for name in ("time", "host", "gpu", "nic"):
        if batch.column(name).null_count:
            raise ValueError(f"null {name} values")
    if batch.num_rows and pc.count_distinct(batch.column("host").cast(pa.string())).as_py() != 1:
        raise ValueError("one agent speaks for one host")
    return pa.RecordBatch.from_arrays(list(batch.columns), schema=GPU_NIC_PATH)


def decode_rank_state(body: bytes) -> pa.RecordBatch:
    """An agent's ``nccl_rank_state`` stream, checked: the schema, one poll time, one host."""
    with pa.ipc.open_stream(body) as reader:
        batches = list(reader)
        schema = reader.schema
    if record_kind(schema) != RecordKind.NCCL_RANK_STATE or not schema.remove_metadata().equals(
        NCCL_RANK_STATE.remove_metadata()
    ):
        raise ValueError("not a nccl_rank_state v1 stream")
    if len(batches) != 1:
        raise ValueError(f"expected one batch, got {len(batches)}")
    batch = batches[0]
    for name in ("time", "job", "host", "state", "source"):
        if batch.column(name).null_count:
            raise ValueError(f"null {name} values")
    if batch.num_rows and pc.count_distinct(batch.column("time")).as_py() != 1:
        raise ValueError("rows carry different poll times")
    if batch.num_rows and pc.count_distinct(batch.column("host").cast(pa.string())).as_py() != 1:
        raise ValueError("one agent speaks for one host")
    return pa.RecordBatch.from_arrays(list(batch.columns), schema=NCCL_RANK_STATE)
