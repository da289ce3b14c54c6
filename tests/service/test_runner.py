"""The runner's policy toward misbehaving sources: timeouts, garbage, crashes, backoff, staleness."""

from __future__ import annotations

import asyncio
import threading
import time
from dataclasses import replace
from datetime import timedelta
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from graywire.collectors.base import Collector, ScrapeResult, failed
from graywire.collectors.schemas import PORT_CAPABILITY, TS, make_batch
from graywire.detectors.pipeline import Pipeline
from graywire.service.config import Settings, load_settings
from graywire.service.models.engine import make_engine, upgrade
from graywire.service.runner import Runner
from graywire.service.simulated import FabricSimCollector, FabricSimSource
from graywire.service.state.fabric import StateBoard
from graywire.service.store import IncidentStore


class Misbehaving:
    """Wraps a real source; on the listed scrape numbers it hangs, returns garbage or raises."""

    def __init__(self, inner: FabricSimCollector, bad: dict[int, str]) -> None:
        self.inner, self.bad, self.n = inner, bad, 0
        self.source, self.target = "fabricsim", "flaky"

    async def aclose(self) -> None:
        pass

    async def scrape(self) -> ScrapeResult:
        self.n += 1
        mode = self.bad.get(self.n)
        res = await self.inner.scrape()  # the fabric moves on whether or not we can read it
        if mode == "hang":
            await asyncio.sleep(3600)
        if mode == "garbage":
            return failed(
                self.source, self.target, "ValueError: line 3: expected 'name value', got '\\x00\\x17'"
            )
        if mode == "raise":
            raise RuntimeError("collector bug")
        return res


def make_runner(tmp_path: Path, faults: str, bad: dict[int, str]) -> tuple[Runner, Misbehaving, StateBoard]:
    settings: Settings = load_settings(
        None, data_dir=tmp_path, poll_interval="10s", scrape_timeout="0.3s", archive={"enabled": False}
    )
    url = f"sqlite:///{tmp_path / 'g.db'}"
    upgrade(url)
    sim = FabricSimCollector(FabricSimSource(hosts=8, seed=4, faults=faults), 10.0)
    flaky = Misbehaving(sim, bad)
    metrics = StateBoard(sim.fabric)
    return Runner(settings, sim.fabric, [flaky], IncidentStore(make_engine(url)), metrics), flaky, metrics


@pytest.mark.parametrize("mode", ["hang", "garbage", "raise"])
def test_a_failing_source_marks_its_ports_stale_and_raises_no_finding(tmp_path: Path, mode: str) -> None:
    runner, flaky, metrics = make_runner(tmp_path, "none", {3: mode})
    found = [f for _ in range(3) for f in runner.tick()]
    assert found == []
    status = metrics.current.targets[0]
    assert (status.ok, status.consecutive_failures, status.failures) == (False, 1, 1)
    assert status.error
    if mode == "hang":
        assert status.error == "timed out after 0.3 s"
    assert status.stale_port_count == 256
    assert metrics.current.port_stale is not None and int(metrics.current.port_stale.sum()) == 256
    # The next poll works again: nothing is stale and the gap produced no finding.
    assert runner.tick() == []
    assert (metrics.current.targets[0].ok, metrics.current.targets[0].stale_port_count) == (True, 0)
    assert int(metrics.current.port_stale.sum()) == 0
    assert flaky.n == 4


def test_repeated_failures_back_off(tmp_path: Path) -> None:
    runner, flaky, metrics = make_runner(tmp_path, "none", {i: "garbage" for i in range(1, 50)})
    for _ in range(6):
        runner.tick()
    # First failure retries at once; the second waits 20 s of wall time, so no more tries here.
    assert flaky.n == 2
    assert metrics.current.targets[0].consecutive_failures == 2


def test_a_downgrade_during_an_outage_is_found_when_data_returns(tmp_path: Path) -> None:
    runner, _, _ = make_runner(tmp_path, "speed_downgrade@15s+300s:gpu-0001/mlx5_4", {3: "hang"})
    found = [f for _ in range(7) for f in runner.tick()]
    link = [(f.kind, f.status, f.port) for f in found if f.kind == "speed_downgrade"]
    assert link == [("speed_downgrade", "firing", "gpu-0001/mlx5_4")]


def test_a_counter_reset_is_no_finding(tmp_path: Path) -> None:
    runner, _, metrics = make_runner(tmp_path, "counter_reset@30s:gpu-0002", {})
    assert [f for _ in range(8) for f in runner.tick()] == []
    assert metrics.current.targets[0].failures == 0


class WithCapabilities:
    """A source that, like UFM REST, also says how fast each port is enabled to run."""

    def __init__(self, inner: FabricSimCollector, caps: pa.Table) -> None:
        self.inner, self.caps = inner, caps
        self.source, self.target = "ufm", "caps"

    async def aclose(self) -> None:
        pass

    async def scrape(self) -> ScrapeResult:
        res = await self.inner.scrape()
        n, when = self.caps.num_rows, res.batches[0].column("time")[0].as_py()
        columns = {name: self.caps.column(name).combine_chunks() for name in self.caps.column_names}
        view = make_batch(PORT_CAPABILITY, n, {"time": pa.array([when] * n, TS), **columns})
        return replace(res, batches=(*res.batches, view))


def test_capabilities_reach_the_downgrade_detector(tmp_path: Path) -> None:
    settings: Settings = load_settings(
        None, data_dir=tmp_path, poll_interval="10s", archive={"enabled": False}
    )
    url = f"sqlite:///{tmp_path / 'g.db'}"
    upgrade(url)
    sim = FabricSimCollector(FabricSimSource(hosts=8, seed=4, faults="none"), 10.0)
    # An inventory without levels: expectations come from the source's capabilities.
    fabric = replace(
        sim.fabric,
        expected_speed_bps=np.zeros_like(sim.fabric.expected_speed_bps),
        expected_width=np.zeros_like(sim.fabric.expected_width),
    )
    host, leaf = "gpu-0003/mlx5_2", "leaf-r2-000/p4"
    caps = pa.table(
        {
            "port": [host, leaf],
            "enabled_speed_bps": pa.array([1600 * 10**9] * 2, pa.int64()),
            "enabled_width": pa.array([4, 4], pa.uint8()),
            "supported_speed_bps": pa.array([1600 * 10**9] * 2, pa.int64()),
            "supported_width": pa.array([4, 4], pa.uint8()),
            "max_speed_bps": pa.array([1600 * 10**9] * 2, pa.int64()),
        }
    )
    runner = Runner(settings, fabric, [WithCapabilities(sim, caps)], IncidentStore(make_engine(url)),
                    StateBoard(fabric))  # fmt: skip
    found = [f for _ in range(3) for f in runner.tick()]
    # The link is enabled for 1.6T on both ends and trained at 800G: a downgrade, and only that one.
    assert [(f.kind, f.link, f.evidence["expected_from"]) for f in found] == [
        ("speed_downgrade", f"{host}<->{leaf}", "capabilities")
    ]


class Skipping:
    """A source whose parser left parts out of every scrape: two bad lines, one absurd value."""

    def __init__(self, inner: Collector) -> None:
        self.inner = inner
        self.source, self.target = "ufm", "skipping"

    async def aclose(self) -> None:
        pass

    async def scrape(self) -> ScrapeResult:
        res = await self.inner.scrape()
        return replace(res, source=self.source, skipped={"malformed_line": 2, "out_of_range": 1})


def test_skipped_parts_of_good_scrapes_are_counted_by_source_and_reason(tmp_path: Path) -> None:
    runner, _, metrics = make_runner(tmp_path, "none", {})
    runner.targets[0].collector = Skipping(runner.targets[0].collector)
    runner.tick()
    runner.tick()
    assert dict(metrics.current.parse_skipped) == {("ufm", "malformed_line"): 4, ("ufm", "out_of_range"): 2}
    assert metrics.current.targets[0].ok  # a skipped line is not a failed scrape


def test_a_poll_leaves_the_event_loop_to_the_api_after_its_scrapes(tmp_path: Path) -> None:
    """Accounting for the scrapes (each target's ports over its batches) and processing run in
    the poll's worker thread: the loop only awaits the scrapes."""
    runner, _, state = make_runner(tmp_path, "", {})
    threads: dict[str, int] = {}
    for owner, name in ((runner.book, "record"), (runner, "_process")):
        method = getattr(owner, name)

        def noted(*args: object, _name: str = name, _method: object = method) -> object:
            threads[_name] = threading.get_ident()
            return _method(*args)  # type: ignore[operator]

        setattr(owner, name, noted)

    async def poll() -> int:
        await runner.poll_once()
        return threading.get_ident()

    loop_thread = asyncio.run(poll())
    assert set(threads) == {"record", "_process"} and loop_thread not in threads.values()
    assert state.current.polls == 1 and state.current.targets[0].ok
    assert runner.targets[0].ports.size == runner.fabric.n_ports


def test_a_replica_that_does_not_lead_keeps_no_detectors_and_a_new_term_starts_fresh(tmp_path: Path) -> None:
    runner, _, state = make_runner(tmp_path, "none", {})
    follower = Runner(runner.settings, runner.fabric, [], runner.store, StateBoard(runner.fabric), lead=False)
    with pytest.raises(RuntimeError, match="does not lead"):
        follower.pipeline  # noqa: B018
    runner.tick()
    assert state.current.targets[0].scrapes == 1
    runner.new_term(Pipeline(runner.fabric))
    assert runner.targets[0].status.scrapes == 0 and runner.targets[0].ports.size == 0
    assert not runner.has_unstored


def test_a_target_nobody_reported_is_a_failed_scrape_and_its_ports_go_stale(tmp_path: Path) -> None:
    """The leader's accounting: a report judges a target fresh, a missing one stale."""
    runner, _, state = make_runner(tmp_path, "none", {})
    (t,) = runner.targets
    (result,) = asyncio.run(runner.scrape([t]))
    runner.judge([(t, result)], 1000.0)
    assert (state.current.targets[0].ok, state.current.targets[0].last_success) == (True, 1000.0)
    runner.judge([], 1010.0, [(t, "no member reported a scrape for the poll at 00:16:50")])
    s = state.current.targets[0]
    assert (s.ok, s.consecutive_failures, s.scrapes, s.error) == (
        False, 1, 1, "no member reported a scrape for the poll at 00:16:50"
    )  # fmt: skip
    assert s.stale_port_count == runner.fabric.n_ports


def test_warming_up_judges_without_storing_anything(tmp_path: Path) -> None:
    runner, _, state = make_runner(tmp_path, "speed_downgrade@0s+1h", {})
    (t,) = runner.targets
    found = []
    for _ in range(4):
        (result,) = asyncio.run(runner.scrape([t]))
        found += runner.warm([(t, result)], time.time())
    assert [f.kind for f in found if f.status == "firing"].count("speed_downgrade") == 1
    assert runner.store.list_incidents() == []  # the database keeps what a leader decided
    assert state.current.polls == 0 and state.current.targets[0].ok is True


class Sleepy:
    """A target that answers after ``delay`` seconds, counting how many are scraped at once."""

    source = "agent"
    running = 0
    most = 0

    def __init__(self, n: int, delay: float) -> None:
        self.target = f"http://gpu-{n:04d}:9470"
        self.delay = delay

    async def scrape(self) -> ScrapeResult:
        Sleepy.running += 1
        Sleepy.most = max(Sleepy.most, Sleepy.running)
        try:
            await asyncio.sleep(self.delay)
        finally:
            Sleepy.running -= 1
        return ScrapeResult(self.source, self.target, True)

    async def aclose(self) -> None:
        pass


def test_scrapes_are_bounded_and_those_that_never_got_a_turn_say_so(tmp_path: Path) -> None:
    runner, _, _ = make_runner(tmp_path, "none", {})
    settings = runner.settings.model_copy(
        update={"max_concurrent_scrapes": 2, "scrape_timeout": timedelta(seconds=0.35)}
    )
    targets = [Sleepy(i, 0.1) for i in range(12)]
    bounded = Runner(settings, runner.fabric, targets, runner.store, StateBoard(runner.fabric))
    Sleepy.most = 0
    results = asyncio.run(bounded.scrape(bounded.targets))
    assert Sleepy.most == 2
    assert 4 <= sum(r.ok for r in results) <= 6  # two at a time, 0.1 s each, within 0.35 s
    errors = [r.error or "" for r in results if not r.ok]
    queued = [e for e in errors if e.startswith("not scraped within 0.35 s: 2 scrapes of this process")]
    assert len(queued) >= 4 and all(e in queued or e == "timed out after 0.35 s" for e in errors)


def test_a_new_leader_takes_back_the_incidents_the_old_one_left_open(tmp_path: Path) -> None:
    """A takeover starts the detectors empty: the incidents open in the database go back to them
    before the new leader's first judged poll, so a link repaired meanwhile still closes."""
    old, _, _ = make_runner(tmp_path, "speed_downgrade@0s+1h", {})
    for _ in range(4):
        old.tick()
    (incident,) = [i for i in old.store.active_incidents() if i["kind"] == "speed_downgrade"]
    healthy = FabricSimCollector(FabricSimSource(hosts=8, seed=4, faults="none"), 10.0)
    new = Runner(old.settings, old.fabric, [healthy], old.store, StateBoard(old.fabric), lead=False)
    new.new_term(Pipeline(old.fabric))  # the lease is won
    for _ in range(4):
        new.tick()
    assert old.store.get_incident(incident["id"])["status"] == "resolved"
