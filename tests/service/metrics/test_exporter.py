"""/metrics on a real scrape: promtool's lint, naming, bounded labels, the cardinality switch."""

from __future__ import annotations

import asyncio
import os
import sys
import threading
import time
from collections import defaultdict
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from functools import lru_cache
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pyarrow as pa
import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from graywire.collectors.model import Fabric, PortSpec
from graywire.collectors.schemas import PORT_SAMPLE, make_batch
from graywire.detectors.rates import CounterRates
from graywire.service.metrics.exporter import GraywireExporter
from graywire.service.metrics.exposition import render
from graywire.service.state.fabric import StateBoard, TargetStatus
from tests.scrape import run_promtool, scrape

#: Labels a series may carry: each is bounded by the fabric model, the cluster's GPUs or the code.
BOUNDED_LABELS = {
    "port", "node", "direction", "priority", "leaf", "rail", "health", "role", "rank", "channel",
    "source", "target", "record", "kind", "severity", "status", "stage", "action", "receiver", "result",
    "shadow",
}  # fmt: skip
#: Constant labels of the build and the interpreter (one series each).
BUILD_LABELS = {"version", "python", "implementation", "major", "minor", "patchlevel", "generation"}


@pytest.fixture(scope="module")
def full(tmp_path_factory: pytest.TempPathFactory) -> str:
    return scrape(tmp_path_factory.mktemp("full"))


@pytest.fixture(scope="module")
def aggregates_only(tmp_path_factory: pytest.TempPathFactory) -> str:
    return scrape(tmp_path_factory.mktemp("agg"), per_port=False)


@lru_cache(maxsize=4)
def samples(text: str) -> dict[str, list[tuple[dict[str, str], float]]]:
    out: dict[str, list[tuple[dict[str, str], float]]] = defaultdict(list)
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[s.name].append((s.labels, s.value))
    return out


def value(text: str, name: str, **labels: str) -> float:
    (v,) = [v for lv, v in samples(text)[name] if lv == labels]
    return v


@pytest.mark.parametrize("which", ["full", "aggregates_only"])
def test_promtool_check_metrics_passes_on_a_scrape(which: str, request: pytest.FixtureRequest) -> None:
    text = request.getfixturevalue(which)
    r = run_promtool("check", "metrics", stdin=text)
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.strip() == "" and r.stderr.strip() == ""  # no lint warnings either


def test_port_series_show_the_downgrade_in_base_units(full: str) -> None:
    port = {"port": "gpu-0002/mlx5_5", "node": "gpu-0002"}
    assert value(full, "graywire_port_speed_bytes_per_second", **port) == 400e9 / 8
    assert value(full, "graywire_port_expected_speed_bytes_per_second", **port) == 800e9 / 8
    assert value(full, "graywire_port_health", **port) == 2  # critical incident open
    assert value(full, "graywire_port_link_up", **port) == 1
    healthy = {"port": "gpu-0001/mlx5_5", "node": "gpu-0001"}
    assert value(full, "graywire_port_health", **healthy) == 0
    assert value(full, "graywire_port_speed_bytes_per_second", **healthy) == 800e9 / 8
    ber = value(full, "graywire_port_pre_fec_bit_error_ratio", **healthy)
    assert 0 < ber < 1e-6
    assert 0 <= value(full, "graywire_port_pfc_pause_ratio", direction="rx", **healthy) <= 1
    assert value(full, "graywire_port_receive_bytes_per_second", **healthy) > 0


def test_leaf_and_rail_aggregates_count_the_degraded_link(full: str) -> None:
    # The NIC and the leaf port at the other end of its cable: both ends of one link.
    assert value(full, "graywire_leaf_ports", leaf="leaf-r5-000", health="critical") == 2
    assert value(full, "graywire_leaf_ports_below_expected_speed", leaf="leaf-r5-000") == 2
    assert value(full, "graywire_rail_ports", rail="5", health="critical") == 2
    assert value(full, "graywire_leaf_ports", leaf="leaf-r0-000", health="critical") == 0
    per_leaf = samples(full)["graywire_leaf_ports"]
    assert sum(v for _, v in per_leaf) > 0
    assert value(full, "graywire_incidents_open", kind="speed_downgrade", severity="critical") == 1


def test_nccl_series_name_the_slow_rank_without_a_job_label(full: str) -> None:
    ratios = samples(full)["graywire_nccl_channel_slowdown_ratio"]
    assert ratios and all(set(lv) == {"node", "rank", "channel"} for lv, _ in ratios)
    worst_labels, worst = max(ratios, key=lambda s: s[1])
    assert worst > 1.2
    typical = sorted(v for _, v in ratios)[len(ratios) // 2]
    assert 0.9 < typical < 1.1
    assert value(full, "graywire_nccl_channel_slowdown_ratio_max", channel=worst_labels["channel"]) == worst
    assert value(full, "graywire_nccl_ranks") == 64  # 8 hosts x 8 GPUs


def test_service_figures(full: str) -> None:
    assert value(full, "graywire_polls_total") == 4
    assert value(full, "graywire_poll_batch_rows", record="port_sample") == 256
    assert value(full, "graywire_scrape_success", source="fabricsim", target="fabricsim:8-hosts") == 1
    assert (
        value(full, "graywire_scrape_staleness_seconds", source="fabricsim", target="fabricsim:8-hosts") < 60
    )
    assert value(full, "graywire_pipeline_lag_seconds") >= 0
    # A detector with bounded state says so from the start (0), so rate() works before any drop.
    assert value(full, "graywire_detector_rows_over_capacity_total", stage="nccl_step_time") == 0


def test_one_label_names_a_host_on_every_series(full: str) -> None:
    """Ports, ranks and drains all say ``node``; nothing spells a host another way."""
    for name, rows in samples(full).items():
        for labels, _ in rows:
            assert not set(labels) & {"host", "hostname", "nodename", "instance_host"}, (name, labels)
    ranks = {lv["node"] for lv, _ in samples(full)["graywire_nccl_channel_duration_seconds"]}
    ports = {lv["node"] for lv, _ in samples(full)["graywire_port_health"]}
    assert ranks and ranks <= ports


def test_port_info_places_every_port_on_its_leaf_and_rail(full: str) -> None:
    info = {lv["port"]: lv for lv, v in samples(full)["graywire_port_info"] if v == 1}
    assert len(info) == value(full, "graywire_ports")
    assert info["gpu-0002/mlx5_5"] == {
        "node": "gpu-0002", "port": "gpu-0002/mlx5_5", "leaf": "leaf-r5-000", "rail": "5", "role": "host"
    }  # fmt: skip
    leaf_port = info[next(k for k, lv in info.items() if lv["role"] == "leaf")]
    assert leaf_port["leaf"] == leaf_port["node"]
    assert all("rail" not in lv for lv in info.values() if lv["role"] == "spine")


def test_build_info_and_the_process_metrics(full: str) -> None:
    from importlib.metadata import version

    (build,) = samples(full)["graywire_build_info"]
    assert build[1] == 1 and build[0]["version"] == version("graywire") and build[0]["python"]
    assert value(full, "process_resident_memory_bytes") > 0
    assert value(full, "process_start_time_seconds") > 0
    assert "process_cpu_seconds_total" in samples(full)
    assert len(samples(full)["python_info"]) == 1


@pytest.mark.parametrize("which", ["full", "aggregates_only"])
def test_every_label_is_bounded(which: str, request: pytest.FixtureRequest) -> None:
    for name, rows in samples(request.getfixturevalue(which)).items():
        for labels, _ in rows:
            allowed = BOUNDED_LABELS | (
                BUILD_LABELS if name.startswith(("graywire_build", "python_")) else set()
            )
            assert set(labels) <= allowed, (name, labels)


def test_cardinality_switch_keeps_only_aggregates(full: str, aggregates_only: str) -> None:
    names = set(samples(aggregates_only))
    assert not {n for n in names if n.startswith("graywire_port_")}
    assert "graywire_nccl_channel_slowdown_ratio" not in names
    for kept in ("graywire_leaf_ports", "graywire_rail_ports", "graywire_nccl_channel_slowdown_ratio_max"):
        assert kept in names
    assert value(aggregates_only, "graywire_leaf_ports", leaf="leaf-r5-000", health="critical") == 2
    assert len(aggregates_only) * 5 < len(full)


def test_fast_renderer_matches_prometheus_client(tmp_path: Path) -> None:
    """The array-backed per-port families render exactly what generate_latest would."""
    from fastapi.testclient import TestClient

    from graywire.service.app import create_app
    from graywire.service.config import load_settings
    from graywire.service.metrics.exporter import make_registry

    settings = load_settings(None, data_dir=tmp_path, sources=[{"type": "fabricsim", "hosts": 4}])
    app = create_app(settings, run_loop=False)
    with TestClient(app):
        for _ in range(2):
            app.state.runner.tick()
        registry = make_registry(app.state.fabric_state)
        ours, theirs = render(registry).decode(), generate_latest(registry).decode()
    # Computed at collection time: the ages, and the process's own figures.
    drop_volatile = {"graywire_scrape_staleness_seconds"}

    def parsed(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
        return {
            (s.name, tuple(sorted(s.labels.items()))): s.value
            for f in text_string_to_metric_families(text)
            for s in f.samples
            if s.name not in drop_volatile and not s.name.startswith(("process_", "python_gc_"))
        }

    assert parsed(ours) == parsed(theirs)
    assert len(parsed(ours)) > 1000


def test_a_poll_completes_while_a_scrape_is_still_rendering(tmp_path: Path) -> None:
    """The metrics lock guards the snapshot only: a slow scrape never stalls the poll loop, and it
    renders the state as it was when it started, not a mix of two polls."""
    from fastapi.testclient import TestClient

    from graywire.service.app import create_app
    from graywire.service.config import load_settings
    from graywire.service.metrics.exporter import make_registry
    from graywire.service.metrics.exposition import iter_render

    settings = load_settings(None, data_dir=tmp_path, sources=[{"type": "fabricsim", "hosts": 4}])
    app = create_app(settings, run_loop=False)
    volatile = {"graywire_scrape_staleness_seconds"}

    def parsed(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
        return {
            (s.name, tuple(sorted(s.labels.items()))): s.value
            for f in text_string_to_metric_families(text)
            for s in f.samples
            if s.name not in volatile and not s.name.startswith(("process_", "python_gc_"))
        }

    with TestClient(app):
        for _ in range(2):
            app.state.runner.tick()
        registry = make_registry(app.state.fabric_state)
        before = parsed(render(registry).decode())
        chunks = iter_render(registry)
        head = next(chunks)  # the render is under way; a slow client holds the rest
        assert b"graywire_polls_total" in head and b"graywire_port_speed" not in head, "paused midway"
        poll = threading.Thread(target=app.state.runner.tick, daemon=True)
        poll.start()
        poll.join(timeout=60)
        assert not poll.is_alive(), "the poll waited for the scrape to finish rendering"
        streamed = parsed((head + b"".join(chunks)).decode())
        after = parsed(render(registry).decode())
    assert streamed == before, "the scrape shows the snapshot it started from"
    assert after[("graywire_polls_total", ())] == before[("graywire_polls_total", ())] + 1
    assert after != before


def test_parse_skips_are_a_counter_by_source_and_reason() -> None:
    fabric = Fabric.from_specs({"h": "host", "sw": "leaf"}, [PortSpec("h", "p1"), PortSpec("sw", "p1")], [])
    state = StateBoard(fabric, per_port=False)
    stale = np.zeros(fabric.n_ports, dtype=bool)
    state.set_targets([], stale, {("snmp", "out_of_range"): 3})
    state.set_targets([], stale, {("ufm", "malformed_line"): 1})
    text = render(GraywireExporter(state)).decode()
    assert value(text, "graywire_parse_skipped_total", source="snmp", reason="out_of_range") == 3
    assert value(text, "graywire_parse_skipped_total", source="ufm", reason="malformed_line") == 1
    r = run_promtool("check", "metrics", stdin=text)
    assert r.returncode == 0, r.stdout + r.stderr


def _parsed(text: str, volatile: frozenset[str] = frozenset({"graywire_scrape_staleness_seconds"})) -> dict:
    """Every sample but those computed at collection time (ages, the process's own figures)."""
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for f in text_string_to_metric_families(text)
        for s in f.samples
        if s.name not in volatile and not s.name.startswith(("process_", "python_gc_"))
    }


def test_many_targets_render_as_prometheus_client_does(monkeypatch: pytest.MonkeyPatch) -> None:
    """A host agent per host is thousands of targets: one series each per family, and a figure
    a target does not have yet (never scraped, never succeeded) is absent, never 0."""
    fabric = Fabric.from_specs({"h": "host"}, [PortSpec("h", "p1")], [])
    board = StateBoard(fabric, per_port=False)
    targets = [
        TargetStatus(
            "agent",
            f"gpu-{i:04d}:9101",
            ok=[None, True, False][i % 3],
            scrapes=i,
            failures=i // 2,
            duration_s=0.01 * i,
            samples=32 * i,
            last_success=None if i % 4 == 0 else 1000.0 + i,
            stale_port_count=i % 5,
        )
        for i in range(300)
    ] + [TargetStatus("ufm", 'ufm "a"\\b')]
    board.set_targets(targets, np.zeros(1, dtype=bool))
    monkeypatch.setattr(time, "time", lambda: 2000.0)
    exporter = GraywireExporter(board)
    text = render(exporter).decode()
    assert _parsed(text, frozenset()) == _parsed(generate_latest(exporter).decode(), frozenset())
    never = {"source": "agent", "target": "gpu-0000:9101"}  # not scraped yet, never succeeded
    has = {n for n, rows in samples(text).items() for lv, _ in rows if lv == never}
    assert has == {"graywire_scrape_failures_total", "graywire_stale_ports", "graywire_scrape_unmatched_rows"}
    assert value(text, "graywire_scrape_staleness_seconds", source="agent", target="gpu-0001:9101") == 999
    assert value(text, "graywire_scrape_success", source="agent", target="gpu-0002:9101") == 0
    assert value(text, "graywire_stale_ports", source="ufm", target='ufm "a"\\b') == 0
    r = run_promtool("check", "metrics", stdin=text)
    assert r.returncode == 0, r.stdout + r.stderr


def test_a_leaf_none_of_whose_ports_reported_counts_them_as_no_data() -> None:
    """Changed: a leaf none of whose ports reported had no series, so a dashboard summing ports
    by health showed every reported port ok and the silent ones nowhere."""
    specs = [
        PortSpec("h1", "p1", rail=0),
        PortSpec("h2", "p1", rail=1),
        PortSpec("la", "p1"),
        PortSpec("lb", "p1"),
    ]
    fabric = Fabric.from_specs(
        {"h1": "host", "h2": "host", "la": "leaf", "lb": "leaf"},
        specs,
        [("h1/p1", "la/p1"), ("h2/p1", "lb/p1")],
    )
    board, rates = StateBoard(fabric), CounterRates()
    now = datetime.now(UTC)
    for t, rx in ((now - timedelta(seconds=10), 0), (now, 1000)):
        cols = {
            "time": pa.array([t] * 2),
            "port": pa.array(["h1/p1", "la/p1"]).dictionary_encode(),
            "source": pa.array(["agent"] * 2).dictionary_encode(),
            "rx_bytes": pa.array([rx, rx], pa.uint64()),
        }
        batch = make_batch(PORT_SAMPLE, 2, cols)
        board.observe_poll([batch], rates.observe(batch), {}, {}, {})
        updated = np.full(2, t.timestamp())
        board.record_ports(fabric.lookup(batch.column("port")), np.full(2, 1e11), np.full(2, 4),
                           np.full(2, 5), np.full(2, 4), updated)  # fmt: skip
        board.finish_poll(seconds=0.1, finished_at=t.timestamp(), failed=False, newest_data=t.timestamp(),
                          findings={}, stages={})  # fmt: skip
    exporter = GraywireExporter(board)
    text = render(exporter).decode()
    assert _parsed(text) == _parsed(generate_latest(exporter).decode())
    leaf_ports = samples(text)["graywire_leaf_ports"]
    # lb's ports never reported: counted as no data, not left out.
    assert {(lv["leaf"], lv["health"]): v for lv, v in leaf_ports if v} == {
        ("la", "ok"): 2,
        ("lb", "no_data"): 2,
    }
    assert value(text, "graywire_ports_without_data") == 2
    assert {
        lv["rail"] for lv, v in samples(text)["graywire_rail_ports"] if lv["health"] == "no_data" and v
    } == {"1"}
    assert value(text, "graywire_port_receive_bytes_per_second", node="h1", port="h1/p1") == 100


class _Recording:
    """A collector that notes which thread collects it."""

    def __init__(self, inner: object) -> None:
        self.inner, self.threads = inner, set()

    def collect(self) -> Iterator[object]:
        self.threads.add(threading.get_ident())
        yield from self.inner.collect()  # type: ignore[attr-defined]


def test_served_pieces_are_the_render_rendered_off_the_loop_while_a_poll_runs(tmp_path: Path) -> None:
    """``aiter_render`` renders on its executor, hands the loop pieces of at most PIECE_BYTES,
    and a poll on the same loop runs to the end while a scrape is half sent; the scrape shows
    the state it started from, byte for byte what ``render`` writes of it."""
    from concurrent.futures import ThreadPoolExecutor

    from graywire.service.app import create_app
    from graywire.service.config import load_settings
    from graywire.service.metrics.exposition import PIECE_BYTES, aiter_render

    settings = load_settings(None, data_dir=tmp_path, sources=[{"type": "fabricsim", "hosts": 48, "seed": 3}])
    app = create_app(settings, run_loop=False)
    board, runner = app.state.fabric_state, app.state.runner
    for _ in range(2):
        runner.tick()
    frozen = SimpleNamespace(current=board.current, exported=True)  # the state the scrape starts from
    collector = _Recording(GraywireExporter(board))

    async def scrape_across_a_poll() -> tuple[list[bytes], int, int]:
        with ThreadPoolExecutor(max_workers=1) as pool:
            pieces = aiter_render(collector, pool)
            first = bytes(await anext(pieces))
            polls_before = board.current.polls
            await asyncio.wait_for(runner.poll_once(), timeout=120)  # the scrape is still open
            rest = [bytes(p) async for p in pieces]
        return [first, *rest], polls_before, threading.get_ident()

    pieces, polls_before, loop_thread = asyncio.run(scrape_across_a_poll())
    assert board.current.polls == polls_before + 1, "the poll ran while the scrape was half sent"
    assert max(len(p) for p in pieces) <= PIECE_BYTES < sum(len(p) for p in pieces)
    assert loop_thread not in collector.threads
    text = b"".join(pieces).decode()
    assert _parsed(text) == _parsed(render(GraywireExporter(frozen)).decode())  # type: ignore[arg-type]
    r = run_promtool("check", "metrics", stdin=text)
    assert r.returncode == 0, r.stdout + r.stderr


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="per-thread niceness is Linux's")
def test_the_render_thread_yields_the_cpu_to_the_rest_of_the_process() -> None:
    from graywire.service.metrics.exposition import RENDER_NICER_BY, render_executor

    def niceness() -> int:
        return os.getpriority(os.PRIO_PROCESS, threading.get_native_id())

    with render_executor() as pool:
        assert pool.submit(niceness).result() == min(19, niceness() + RENDER_NICER_BY)
    assert niceness() == os.getpriority(os.PRIO_PROCESS, 0)  # the rest of the process is untouched


def test_a_replica_that_does_not_lead_shows_nothing_of_the_fabric_and_a_reset_forgets() -> None:
    """A follower's empty state (no poll ever, every port unknown) would count beside the
    leader's in a sum across replicas: it is not exported at all."""
    fabric = Fabric.from_specs({"h": "host", "sw": "leaf"}, [PortSpec("h", "p1"), PortSpec("sw", "p1")], [])
    board = StateBoard(fabric, per_port=False)
    board.set_targets([], np.zeros(fabric.n_ports, dtype=bool), {("snmp", "out_of_range"): 3})
    assert "graywire_ports" in render(GraywireExporter(board)).decode()
    board.exported = False
    assert render(GraywireExporter(board)).decode() == ""
    board.reset()
    board.exported = True
    text = render(GraywireExporter(board)).decode()
    assert value(text, "graywire_ports") == 2 and 'reason="out_of_range"' not in text
