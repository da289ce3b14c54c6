"""Cost of ``GET /metrics`` on a large fabric, and whether a scrape delays a poll.

Run: ``python bench/bench_metrics.py [--hosts 4096] [--warmup 2] [--polls 3] [--renders 3]
[--settings off,on,raw]``.

For each ``metrics.per_port`` / ``metrics.raw_counters`` setting (off; on without the raw
counters; on with them, the default) it builds the service over the built-in fabricsim source
(32 ports per 8-GPU host: 4,096 hosts are 131,072 ports, 16,384 are 524,288) with a link
downgrade and a slow NCCL channel, serves it with the server configuration of ``graywire
serve`` on a free port, runs ``--warmup`` polls on the server's event loop as the service does,
then:

- renders the exposition in-process ``--renders`` times, consuming the pieces as a server
  would (each dropped once counted). Its reference is a copy of as many bytes (the least any
  renderer writes);
- times ``GET /metrics`` with curl (another process reading the socket as Prometheus would),
  against that render;
- times ``--polls`` polls with nothing else running (before the renders), then as many while
  curl scrapes back to back, and prints both (median and max) and their ratio, with the event
  loop's lag (how late a 5 ms timer on the server's loop fires) in each phase.

It prints series, bytes, seconds (best and median) and peak RSS. Numbers are the machine's
and move with other load; compare figures from one run.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import resource
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

import numpy as np
import uvicorn

from graywire.fabricsim.topology import host_name
from graywire.service.app import create_app
from graywire.service.cli import server_config
from graywire.service.config import load_settings
from graywire.service.metrics.exporter import make_registry
from graywire.service.metrics.exposition import iter_render


def faults(hosts: int) -> str:
    """A link downgrade on the third host's sixth NIC and a slow NCCL channel."""
    return f"speed_downgrade@15s+300s:{host_name(2, hosts)}/mlx5_5,slow_channel@5s+300s=0.3"


SETTINGS = {"off": (False, False), "on": (True, False), "raw": (True, True)}


def rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def fmt(times: list[float]) -> str:
    return f"best {min(times):7.3f} s  median {statistics.median(times):7.3f} s"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def consume(registry: object) -> int:
    """Render and drop every piece, as a streaming server does; the bytes rendered."""
    return sum(len(piece) for piece in iter_render(registry))


def series(registry: object) -> int:
    """Sample lines: every line but each family's HELP and TYPE (only bytes pieces hold those)."""
    lines = headers = 0
    for piece in iter_render(registry):
        lines += int(np.count_nonzero(np.frombuffer(piece, dtype=np.uint8) == ord("\n")))
        if isinstance(piece, bytes):
            headers += piece.count(b"# TYPE ")
    return lines - 2 * headers


class Served:
    """The app under the service's own uvicorn configuration, on an event loop in a thread."""

    def __init__(self, app: Any, settings: Any) -> None:
        self.loop = asyncio.new_event_loop()
        self.server = uvicorn.Server(server_config(app, settings, log_level="warning", access_log=False))
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.serving = self.run(self.server.serve(), wait=False)
        while not self.server.started:
            time.sleep(0.05)

    def run(self, coro: Coroutine[Any, Any, Any], wait: bool = True) -> Any:
        future = asyncio.run_coroutine_threadsafe(coro, self.loop)
        return future.result() if wait else future

    def close(self) -> None:
        self.server.should_exit = True
        self.serving.result(timeout=60)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=10)


class LoopLag:
    """How late a 5 ms sleep on the server's loop wakes up: the loop's stalls, sampled."""

    def __init__(self, served: Served) -> None:
        self.samples: list[float] = []
        self.stop = False
        self.task = served.run(self._probe(), wait=False)

    async def _probe(self) -> None:
        while not self.stop:
            t = time.perf_counter()
            await asyncio.sleep(0.005)
            self.samples.append(time.perf_counter() - t - 0.005)

    def take(self) -> list[float]:
        out, self.samples = self.samples, []
        return out


def curl(url: str) -> float:
    """Seconds for one whole ``GET`` (curl's own clock; the body goes nowhere)."""
    out = subprocess.run(
        ["curl", "-sS", "-o", "/dev/null", "-w", "%{time_total}", url],
        capture_output=True,
        text=True,
        check=True,
    )
    return float(out.stdout)


def lag_text(lags: list[float]) -> str:
    if not lags:
        return "loop lag n/a"
    s = sorted(lags)
    return f"loop lag p99 {1e3 * s[int(0.99 * (len(s) - 1))]:6.1f} ms  max {1e3 * s[-1]:6.1f} ms"


def bench(hosts: int, per_port: bool, raw: bool, warmup: int, polls: int, renders: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        settings = load_settings(
            None,
            host="127.0.0.1",
            port=free_port(),
            data_dir=Path(tmp),
            poll_interval="10s",
            sources=[{"type": "fabricsim", "hosts": hosts, "seed": 3, "faults": faults(hosts)}],
            metrics={"per_port": per_port, "raw_counters": raw},
            archive={"enabled": False},
        )
        app = create_app(settings, run_loop=False)
        served = Served(app, settings)
        lag = LoopLag(served)
        runner = app.state.runner
        url = f"http://127.0.0.1:{settings.port}/metrics"
        try:

            def poll() -> float:
                t = time.perf_counter()
                served.run(runner.poll_once())
                return time.perf_counter() - t

            for _ in range(warmup):
                poll()
            lag.take()
            poll_times = [poll() for _ in range(polls)]
            idle_lag = lag.take()
            registry = make_registry(app.state.fabric_state)
            n_series = series(registry)
            render_times, size = [], 0
            for _ in range(renders):
                t = time.perf_counter()
                size = consume(registry)
                render_times.append(time.perf_counter() - t)
            copy_times = timed(functools.partial(bytes, bytearray(size)), renders)
            http_times = [curl(url) for _ in range(renders)]
            lag.take()

            # Polls again, now with scrapes back to back.
            stop = threading.Event()
            scraped: list[float] = []

            def scrape() -> None:
                while not stop.is_set():
                    scraped.append(curl(url))

            scraper = threading.Thread(target=scrape, daemon=True)
            scraper.start()
            time.sleep(min(http_times) / 2)  # a scrape under way when the first poll starts
            busy_times = [poll() for _ in range(polls)]
            busy_lag = lag.take()
            stop.set()
            scraper.join()
        finally:
            lag.stop = True
            served.close()
    print(
        f"hosts {hosts:6d}  ports {hosts * 32:8d}  per_port {'on ' if per_port else 'off'}"
        f"  raw_counters {'on ' if per_port and raw else 'off'}  series {n_series:10,d}  {size / 1e6:8.1f} MB"
    )
    best, floor = min(render_times), min(copy_times)
    alone, busy = statistics.median(poll_times), statistics.median(busy_times)
    scrapes = f"{len(scraped)} scrapes, median {statistics.median(scraped):.3f} s"
    print(f"  render            {fmt(render_times)}  {n_series / best:12,.0f} series/s")
    print(f"    reference: copy of {size / 1e6:.0f} MB  {fmt(copy_times)}  render/copy {best / floor:6.1f}")
    print(f"  GET /metrics      {fmt(http_times)}  GET/render {min(http_times) / best:6.2f}")
    print(f"  polls alone       median {alone:7.3f} s  max {max(poll_times):7.3f} s  {lag_text(idle_lag)}")
    print(f"  polls + scrapes   median {busy:7.3f} s  max {max(busy_times):7.3f} s  {lag_text(busy_lag)}")
    print(f"    busy/alone {busy / alone:5.2f}  ({scrapes})")
    print(f"  peak RSS {rss_mb():,.0f} MB")
    sys.stdout.flush()


def timed(fn: Callable[[], object], n: int) -> list[float]:
    times = []
    for _ in range(n):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return times


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hosts", type=int, default=4096)
    ap.add_argument("--warmup", type=int, default=2, help="polls before any timing (the first has no rates)")
    ap.add_argument("--polls", type=int, default=3)
    ap.add_argument("--renders", type=int, default=3)
    ap.add_argument("--settings", default="off,on,raw", help="comma-separated: off, on, raw")
    args = ap.parse_args()
    if shutil.which("curl") is None:
        raise SystemExit("curl is needed: it scrapes the way Prometheus does, from another process")
    for name in args.settings.split(","):
        per_port, raw = SETTINGS[name]
        bench(args.hosts, per_port, raw, args.warmup, args.polls, args.renders)


if __name__ == "__main__":
    main()
