"""A silent 800G -> 400G downgrade, end to end: fabricsim -> fake UFM over HTTP -> collectors ->
pipeline -> incident store; and the pipeline joining a poll's REST and telemetry rows per port."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pyarrow as pa
import pytest

from graywire.collectors.schemas import record_kind
from graywire.collectors.ufm import UfmHttpSettings, UfmRestCollector, UfmTelemetryCollector
from graywire.detectors.findings import Finding
from graywire.detectors.pipeline import Pipeline
from graywire.fabricsim.ufm_server import FakeUfm
from graywire.service.models.engine import make_engine, upgrade
from graywire.service.store import IncidentStore

G = 10**9


def collectors(
    fake: FakeUfm, url: str, telemetry_path: str
) -> tuple[UfmRestCollector, UfmTelemetryCollector]:
    """Both collectors on simulated time (UFM REST has no timestamps of its own)."""
    rest = UfmRestCollector(
        url, fake.fabric, UfmHttpSettings(auth="token", token="tok-abc123"), clock=lambda: fake.step.time
    )
    telemetry = UfmTelemetryCollector(url + telemetry_path, fake.fabric, clock=lambda: fake.step.time)
    return rest, telemetry


async def poll(rest: UfmRestCollector, telemetry: UfmTelemetryCollector) -> list[pa.RecordBatch]:
    """One poll: both endpoints concurrently, their batches as they came (REST's ports apart
    from Telemetry's counters)."""
    r, t = await asyncio.gather(rest.scrape(), telemetry.scrape())
    assert r.ok, r.error
    assert t.ok, t.error
    return [*r.batches, *t.batches]


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
                polled = pipeline.process_poll(await poll(rest, telemetry))
                assert polled.port_rates is not None
                assert polled.port_rates.num_rows == fake.fabric.n_ports  # one row a port
                store.apply(polled.findings)
                found += polled.findings
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


def test_rest_speed_and_telemetry_counters_become_one_row_a_port(fake: FakeUfm, ufm_url: str) -> None:
    """UFM Telemetry has no speed; the pipeline carries REST's into its rows: one row a port
    with REST's state and speed and Telemetry's rates."""
    rest, telemetry = collectors(fake, ufm_url, "/metrics")
    pipeline = Pipeline(fake.fabric)

    async def two_polls() -> list[pa.RecordBatch]:
        out = []
        try:
            for k in range(2):
                if k:
                    fake.advance()
                out.append(await poll(rest, telemetry))
        finally:
            await rest.aclose()
            await telemetry.aclose()
        return out

    polls = asyncio.run(two_polls())
    key = "gpu-0001/mlx5_4"

    def row(batch: pa.RecordBatch) -> dict:
        return next(r for r in batch.to_pylist() if r["port"] == key)

    def counters(batches: list[pa.RecordBatch]) -> list[pa.RecordBatch]:
        ports = [b for b in batches if record_kind(b.schema) == "port_sample"]
        return [b for b in ports if row(b)["tx_bytes"] is not None]

    tele = counters(polls[1])
    assert [row(b)["speed_bps"] for b in tele] == [None]  # Telemetry alone: no speed
    pipeline.process_poll(polls[0])
    rates = pipeline.process_poll(polls[1]).port_rates
    assert rates is not None and rates.num_rows == fake.fabric.n_ports
    got = row(rates)
    sent = row(tele[0])["tx_bytes"] - row(counters(polls[0])[0])["tx_bytes"]
    assert (got["speed_bps"], got["width"], got["logical_state"]) == (800 * G, 4, 4)  # from REST ...
    assert got["tx_bytes_per_second"] == pytest.approx(sent / 10.0)  # ... with Telemetry's rates
    assert sent > 10 * 10**10  # a busy 800G link moved more than 100 GB in the 10 s
