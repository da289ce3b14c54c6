"""A silent 800G -> 400G downgrade, end to end: fabricsim -> fake UFM over HTTP -> collectors ->
pipeline -> incident store; and why a poll's REST and telemetry rows are merged first."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pyarrow as pa
import pytest

from graywire.collectors.schemas import record_kind
from graywire.collectors.ufm import HttpSettings, UfmRestCollector, UfmTelemetryCollector, merge_port_samples
from graywire.detectors.findings import Finding
from graywire.detectors.pipeline import Pipeline
from graywire.detectors.rates import CounterRates
from graywire.fabricsim.ufm_server import FakeUfm
from graywire.service.db import make_engine, upgrade
from graywire.service.store import IncidentStore

G = 10**9


def collectors(
    fake: FakeUfm, url: str, telemetry_path: str
) -> tuple[UfmRestCollector, UfmTelemetryCollector]:
    """Both collectors on simulated time (UFM REST has no timestamps of its own)."""
    rest = UfmRestCollector(
        url, fake.fabric, HttpSettings(auth="token", token="tok-abc123"), clock=lambda: fake.step.time
    )
    telemetry = UfmTelemetryCollector(url + telemetry_path, fake.fabric, clock=lambda: fake.step.time)
    return rest, telemetry


async def poll(rest: UfmRestCollector, telemetry: UfmTelemetryCollector) -> pa.RecordBatch:
    """One poll: both endpoints concurrently, their port rows merged."""
    r, t = await asyncio.gather(rest.scrape(), telemetry.scrape())
    assert r.ok, r.error
    assert t.ok, t.error
    ports = [b for b in r.batches if record_kind(b.schema) == "port_sample"]
    return merge_port_samples([*ports, *t.batches])


@pytest.mark.parametrize("telemetry_path", ["/metrics", "/csv/xcset/low_freq_debug"])
def test_silent_downgrade_becomes_one_open_incident(
    fake: FakeUfm, ufm_url: str, tmp_path: Path, telemetry_path: str
) -> None:
    db = f"sqlite:///{tmp_path / 'graywire.db'}"
    upgrade(db)
    engine = make_engine(db)
    store = IncidentStore(engine)
    pipeline = Pipeline(fake.fabric)
    rest, telemetry = collectors(fake, ufm_url, telemetry_path)

    async def run() -> list[Finding]:
        found: list[Finding] = []
        try:
            for k in range(6):  # polls at 0..50 s; the link renegotiates to 400G at 30 s
                if k:
                    fake.advance()
                batch = await poll(rest, telemetry)
                assert batch.num_rows == fake.fabric.n_ports
                step = pipeline.process(batch)
                store.apply(step)
                found += step
        finally:
            await rest.aclose()
            await telemetry.aclose()
        return found

    try:
        found = asyncio.run(run())
        assert [(f.kind, f.status, f.port, f.time) for f in found] == [
            ("speed_downgrade", "firing", "gpu-0003/mlx5_2", fake.sim.time_of(4))  # confirmed on 2 polls
        ]
        (incident,) = store.list_incidents(status="open")
        assert incident["kind"] == "speed_downgrade"
        assert incident["port"] == "gpu-0003/mlx5_2"
        assert incident["node"] == "gpu-0003"
        assert incident["link"] == "gpu-0003/mlx5_2<->leaf-r2-000/p4"
        assert incident["evidence"]["expected"] == {"speed_bps": 800 * G, "width": 4}
        assert incident["evidence"]["actual"]["gpu-0003/mlx5_2"] == {"speed_bps": 400 * G, "width": 4}
    finally:
        engine.dispose()


def test_merged_polls_keep_counter_rates_that_separate_batches_lose(fake: FakeUfm, ufm_url: str) -> None:
    rest, telemetry = collectors(fake, ufm_url, "/metrics")

    async def two_polls() -> list[tuple[list[pa.RecordBatch], pa.RecordBatch]]:
        out = []
        try:
            for k in range(2):
                if k:
                    fake.advance()
                r, t = await asyncio.gather(rest.scrape(), telemetry.scrape())
                separate = [r.batches[0], t.batches[0]]
                out.append((separate, merge_port_samples(separate)))
        finally:
            await rest.aclose()
            await telemetry.aclose()
        return out

    polls = asyncio.run(two_polls())
    key = "gpu-0001/mlx5_4"

    def rate(batch: pa.RecordBatch, column: str) -> float | None:
        row = next(r for r in batch.to_pylist() if r["port"] == key)
        return row[column]

    merged_rates = CounterRates()
    merged_rates.observe(polls[0][1])
    out = merged_rates.observe(polls[1][1])
    sent = rate(polls[1][1], "tx_bytes") - rate(polls[0][1], "tx_bytes")  # type: ignore[operator]
    assert rate(out, "speed_bps") == 800 * G  # state from REST ...
    assert rate(out, "tx_bytes_per_second") == pytest.approx(sent / 10.0)  # ... counters from telemetry
    assert sent > 10 * 10**10  # a busy 800G link moved more than 100 GB in the 10 s
    # Fed one after the other (as the service does, one collector at a time), the REST batch
    # carries no counters and leaves the baselines alone: the telemetry batch gets the same rate.
    split_rates = CounterRates()
    for batch in polls[0][0] + polls[1][0]:
        last = split_rates.observe(batch)
    assert rate(last, "tx_bytes_per_second") == pytest.approx(sent / 10.0)
