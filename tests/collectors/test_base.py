"""The collector contract: scrape results, parses that stop with their scrape, and GUID -> port
key resolution."""

from __future__ import annotations

import asyncio
import threading
import time

import pyarrow as pa
import pytest

from graywire.collectors.base import (
    KeyResolver,
    ScrapeResult,
    Skips,
    failed,
    guarded_scrape,
    raise_if_abandoned,
)
from graywire.fabricsim.topology import TopologySpec, build_fabric


def test_resolver_uses_port_guid_for_hcas_and_guid_plus_number_for_switches() -> None:
    fabric = build_fabric(TopologySpec(hosts=8))
    r = KeyResolver.from_fabric(fabric)
    assert r.resolve("0xB8CEF60300000003", 1) == "gpu-0000/mlx5_3"
    assert r.resolve("b8cef60300000003") == "gpu-0000/mlx5_3"  # an HCA GUID alone is enough
    leaf = fabric.keys.index("leaf-r2-000/p5")
    assert r.resolve(fabric.guids[leaf], 5) == "leaf-r2-000/p5"
    # A switch GUID without a port number is ambiguous: it keeps a key of its own.
    assert r.resolve(fabric.guids[leaf]) == f"{fabric.guids[leaf]}/1"
    assert r.resolve("0x2c903000abcd", 7) == "0x00002c903000abcd/7"


def test_failed_scrape_carries_a_readable_reason() -> None:
    res = failed("ufm", "https://ufm:443", TimeoutError("read timed out"), 5.0)
    assert (res.ok, res.error, res.samples, res.duration_s) == (False, "TimeoutError: read timed out", 0, 5.0)
    ok = ScrapeResult("agent", "h:9", True, (pa.record_batch({"x": [1, 2]}),))
    assert ok.samples == 2


def test_a_parse_stops_with_the_scrape_that_gave_up_on_it() -> None:
    """The poll's own timeout cancels a scrape while its parse runs in a worker thread: the parse
    stops at its next stage instead of running on, holding its memory, into the next poll."""
    started, stopped = threading.Event(), threading.Event()

    def parse(payload: bytes, skipped: Skips) -> tuple[pa.RecordBatch, ...]:
        started.set()
        try:
            while True:  # a long parse's stages
                raise_if_abandoned()
                time.sleep(0.01)
        finally:
            stopped.set()

    async def fetch() -> bytes:
        return b"payload"

    async def poll() -> None:
        task = asyncio.create_task(guarded_scrape("ufm", "t", 60.0, fetch, parse))
        assert await asyncio.to_thread(started.wait, 30)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(poll())
    assert stopped.wait(30), "the parse ran on after its scrape was cancelled"


def test_raise_if_abandoned_is_silent_outside_a_scrape() -> None:
    raise_if_abandoned()  # a parse called directly (replay, tests, the CLI) runs to its end
