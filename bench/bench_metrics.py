"""Cost of ``GET /metrics`` on a large fabric, with per-port series off, on without the raw
counters, and on with them (the default).

Run: ``python bench/bench_metrics.py [--hosts 4096] [--polls 3] [--renders 3]``. For each
``metrics.per_port`` / ``metrics.raw_counters`` setting it starts the service over the built-in
fabricsim source (32 ports per 8-GPU host: 4,096 hosts are 131,072 ports) with a link downgrade
and a slow NCCL channel, runs the polls, then times a whole scrape through the HTTP app and the
exposition alone (``render``).
A scrape reads the fabric state the last poll published and takes no lock, so it never blocks a
poll. It prints series, bytes, seconds (best and median) and peak RSS.
"""

from __future__ import annotations

import argparse
import resource
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from fastapi.testclient import TestClient

from graywire.service.app import create_app
from graywire.service.config import load_settings
from graywire.service.metrics.exporter import make_registry
from graywire.service.metrics.exposition import render

FAULTS = "speed_downgrade@15s+300s:gpu-0002/mlx5_5,slow_channel@5s+300s=0.3"


def timed(fn: Callable[[], object], n: int) -> tuple[list[float], object]:
    times, out = [], None
    for _ in range(n):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return times, out


def fmt(times: list[float]) -> str:
    return f"best {min(times):8.3f} s  median {statistics.median(times):8.3f} s"


def rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def bench(hosts: int, per_port: bool, raw_counters: bool, polls: int, renders: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        settings = load_settings(
            None,
            data_dir=Path(tmp),
            poll_interval="10s",
            sources=[{"type": "fabricsim", "hosts": hosts, "seed": 3, "faults": FAULTS}],
            metrics={"per_port": per_port, "raw_counters": raw_counters},
            archive={"enabled": False},
        )
        app = create_app(settings, run_loop=False)
        with TestClient(app) as client:
            t0 = time.perf_counter()
            for _ in range(polls):
                app.state.runner.tick()
            poll_s = (time.perf_counter() - t0) / polls
            state = app.state.fabric_state
            registry = make_registry(state)
            render_times, body = timed(lambda: render(registry), renders)
            http_times, resp = timed(lambda: client.get("/metrics"), renders)
        assert isinstance(body, bytes)
        assert resp.status_code == 200  # type: ignore[attr-defined]
        series = sum(1 for line in body.splitlines() if line and not line.startswith(b"#"))
        print(
            f"hosts {hosts:6d}  ports {state.fabric.n_ports:8d}  per_port {'on ' if per_port else 'off'}"
            f"  raw_counters {'on ' if per_port and raw_counters else 'off'}"
            f"  poll {poll_s:6.2f} s  series {series:9d}  {len(body) / 1e6:7.1f} MB"
        )
        print(f"  render (exposition only)  {fmt(render_times)}  {series / min(render_times):,.0f} series/s")
        print(f"  GET /metrics (HTTP app)   {fmt(http_times)}  peak RSS {rss_mb():,.0f} MB")
        sys.stdout.flush()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hosts", type=int, default=4096)
    ap.add_argument("--polls", type=int, default=3)
    ap.add_argument("--renders", type=int, default=3)
    args = ap.parse_args()
    for per_port, raw_counters in ((False, False), (True, False), (True, True)):
        bench(args.hosts, per_port, raw_counters, args.polls, args.renders)


if __name__ == "__main__":
    main()
