"""API latency under load while polls run: the drain and ports routes at a fixed request rate.

Run: ``python bench/bench_api_load.py [--hosts 1024] [--rate 500] [--seconds 20] [--poll 2s]
[--routes /api/v1/drain,/api/v1/ports]``.

It starts ``graywire serve`` as its own process on a free port, over the built-in fabricsim
source (32 ports per 8-GPU host: 16,384 hosts are 524,288 ports) with gray failures injected,
so the database holds open incidents and a drain list, with the archive on and polls back to
back (a scrape may take a minute: a large fabric's simulator step is never cut short). Once a
few polls have run it sends requests open-loop: request *i* is due at ``i / rate`` seconds,
alternating the routes (``GET /api/v1/drain`` and ``GET /api/v1/ports`` unless ``--routes``
says otherwise), and its latency is counted from when it was due, not from when it went out,
so a stalled server cannot hide its queue; the first ``--warmup`` seconds of load are not
counted (new connections, the generator's own start). The same routes are first timed one at a
time with nothing else in flight: that is the limit measured in this run. It prints p50/p99/max per
route, the ratio of p99 under load to that limit and to the 20 ms target, and how many polls
completed during the loaded window. It reads the service's progress from ``/healthz``, never
``/metrics``: at 524,288 ports a scrape is gigabytes.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import httpx

from graywire.fabricsim.topology import host_name

ROUTES = ["/api/v1/drain", "/api/v1/ports"]  # --routes replaces them
TARGET_P99_MS = 20.0


def faults(hosts: int) -> str:
    """Gray failures of every kind the drain policy acts on, one link named by its host."""
    return (
        f"speed_downgrade@5s+1h:{host_name(2, hosts)}/mlx5_5,ber_ramp@5s+1h,slow_channel@5s+1h=0.3,"
        "pfc_storm@5s+1h,straggler@5s+1h"
    )


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def polls(client: httpx.AsyncClient) -> int:
    """Polls the service has completed (``/healthz``)."""
    return int((await client.get("/healthz")).json()["polls"])


def service_peak_rss(pid: int) -> int:
    """The process's peak resident set (VmHWM) in bytes, 0 where /proc does not say."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def pct(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(q * len(s)))]


async def wait_ready(client: httpx.AsyncClient, n: int, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if await polls(client) >= n:
                return
        except httpx.HTTPError:
            pass
        await asyncio.sleep(0.5)
    raise SystemExit(f"the service did not complete {n} polls within {timeout:.0f} s")


class Connection:
    """One kept-alive HTTP/1.1 connection that sends a GET and reads the answer, and little
    else: httpx spends about 4 ms of CPU a request with 32 connections in flight (its pool's
    bookkeeping), so at 500 req/s on the same two cores the load generator, not the service,
    would set the latency. The service answers these routes with a Content-Length."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer

    @classmethod
    async def open(cls, port: int) -> Connection:
        return cls(*await asyncio.open_connection("127.0.0.1", port))

    async def get(self, path: str) -> int:
        """The status of ``GET path``, its body read and dropped."""
        self.writer.write(f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".encode())
        head = (await self.reader.readuntil(b"\r\n\r\n")).decode("latin-1").split("\r\n")
        length = next(int(h.split(":", 1)[1]) for h in head if h.lower().startswith("content-length:"))
        await self.reader.readexactly(length)
        return int(head[0].split()[1])

    def close(self) -> None:
        self.writer.close()


async def serial(port: int, n: int) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {r: [] for r in ROUTES}
    conn = await Connection.open(port)
    for i in range(n):
        route = ROUTES[i % len(ROUTES)]
        t0 = time.perf_counter()
        status = await conn.get(route)
        out[route].append(time.perf_counter() - t0)
        if status != 200:
            raise SystemExit(f"GET {route}: HTTP {status}")
    conn.close()
    return out


async def poll_times(client: httpx.AsyncClient) -> list[float]:
    """Each poll's own time while the load runs, from ``/healthz`` once a second (a handful of
    requests beside hundreds a second); returned when cancelled."""
    seen: dict[int, float] = {}
    try:
        while True:
            body = (await client.get("/healthz")).json()
            if body.get("last_poll_seconds") is not None:
                seen[int(body["polls"])] = float(body["last_poll_seconds"])
            await asyncio.sleep(1.0)
    except asyncio.CancelledError:
        return list(seen.values())


async def open_loop(
    port: int, rate: float, seconds: float, connections: int, warmup: float = 2.0
) -> tuple[dict[str, list[float]], Counter[str]]:
    """Requests at ``rate`` for ``warmup`` + ``seconds``; the latencies of the last ``seconds``.

    The first ``warmup`` seconds are not counted: the connections' first requests and the
    generator's own start-up are not the steady state this measures. The generator's cyclic
    collector is off while it runs (it keeps every task and latency, and a full collection of
    them would be a pause of its own, counted as the service's).
    """
    lat: dict[str, list[float]] = {r: [] for r in ROUTES}
    errors: Counter[str] = Counter()
    free: asyncio.Queue[Connection] = asyncio.Queue()
    for _ in range(connections):
        free.put_nowait(await Connection.open(port))
    start = time.perf_counter()
    counted_from = start + warmup

    async def one(route: str, due: float) -> None:
        conn = await free.get()  # a request waits for a free connection, as a pooled client's does
        try:
            status = await conn.get(route)
            if status != 200:
                errors[f"HTTP {status}"] += 1
            free.put_nowait(conn)
        except (OSError, asyncio.IncompleteReadError, ValueError, StopIteration) as e:
            errors[type(e).__name__] += 1
            conn.close()
            free.put_nowait(await Connection.open(port))
        if due >= counted_from:
            lat[route].append(time.perf_counter() - due)

    tasks = []
    n = int(rate * (warmup + seconds))
    gc.collect()
    gc.disable()
    try:
        for i in range(n):
            due = start + i / rate
            delay = due - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            tasks.append(asyncio.create_task(one(ROUTES[i % len(ROUTES)], due)))
        await asyncio.gather(*tasks)
    finally:
        gc.enable()
    while not free.empty():
        free.get_nowait().close()
    return lat, errors


async def bench(args: argparse.Namespace) -> None:
    port = free_port()
    with tempfile.TemporaryDirectory() as tmp:
        config = Path(tmp) / "graywire.yaml"
        config.write_text(
            f"""
host: 127.0.0.1
port: {port}
data_dir: {tmp}/data
poll_interval: {args.poll}
scrape_timeout: 300s
sources:
  - type: fabricsim
    hosts: {args.hosts}
    seed: 5
    faults: "{faults(args.hosts)}"
"""
        )
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        log = open(Path(tmp) / "service.log", "w")  # noqa: SIM115 - closed below
        proc = subprocess.Popen(
            [sys.executable, "-m", "graywire.service.cli", "serve", "--config", str(config)],
            stdout=log, stderr=subprocess.STDOUT, env=env,
        )  # fmt: skip
        try:
            n = args.connections
            limits = httpx.Limits(max_connections=n, max_keepalive_connections=n)
            base = f"http://127.0.0.1:{port}"
            async with httpx.AsyncClient(base_url=base, limits=limits, timeout=30) as client:
                await wait_ready(client, args.warm_polls, timeout=args.ready_timeout)
                alone = await serial(port, args.serial)
                p0 = await polls(client)
                t0 = time.perf_counter()
                watch = asyncio.create_task(poll_times(client))
                loaded, errors = await open_loop(port, args.rate, args.seconds, args.connections, args.warmup)
                wall = time.perf_counter() - t0
                watch.cancel()
                poll_s = await watch
                ran = await polls(client) - p0
                incidents = (await client.get("/api/v1/incidents")).json()
                drains = (await client.get("/api/v1/drain")).json()
                peak_rss = service_peak_rss(proc.pid)
        finally:
            proc.terminate()
            proc.wait(timeout=30)
            log.close()
        print(
            f"service: fabricsim {args.hosts} hosts ({args.hosts * 32} ports), poll every "
            f"{args.poll}; {incidents.get('total', len(incidents.get('items', [])))} incidents, "
            f"{len(drains)} drain-list entries"
        )
        print(f"load: {args.rate:g} req/s open-loop for {args.seconds:g} s over {args.connections} "
              f"connections, {args.warmup:g} s of it not counted; {sum(map(len, loaded.values()))} "
              f"requests counted, {wall:.1f} s in all, "
              f"{sum(errors.values())} errors {dict(errors) or ''}; "
              f"{ran} polls completed meanwhile ({wall / max(ran, 1):.1f} s each)")  # fmt: skip
        if poll_s:
            print(f"a poll's own time meanwhile (its /healthz last_poll_seconds, {len(poll_s)} polls): "
                  f"median {statistics.median(poll_s):.2f} s, max {max(poll_s):.2f} s")  # fmt: skip
        if peak_rss:
            ports = args.hosts * 32
            print(f"service peak RSS {peak_rss / 2**20:,.0f} MB ({peak_rss / ports:,.0f} B/port, the "
                  "built-in simulator's own state included)")  # fmt: skip
        print(f"{'route':<22}{'alone p50':>10}{'alone p99':>10}{'p50':>9}{'p99':>9}{'max':>9}"
              f"{'p99/alone':>10}{'p99/20ms':>10}")  # fmt: skip
        for route in ROUTES:
            i50, i99 = pct(alone[route], 0.5) * 1e3, pct(alone[route], 0.99) * 1e3
            lat = loaded[route]
            p50, p99, mx = pct(lat, 0.5) * 1e3, pct(lat, 0.99) * 1e3, max(lat) * 1e3
            print(
                f"{route:<22}{i50:>8.1f}ms{i99:>8.1f}ms{p50:>7.1f}ms{p99:>7.1f}ms{mx:>7.0f}ms"
                f"{p99 / i99:>10.2f}{p99 / TARGET_P99_MS:>10.2f}"
            )
        every = [x for v in loaded.values() for x in v]
        print(f"all routes: p50 {statistics.median(every) * 1e3:.1f} ms, p99 {pct(every, 0.99) * 1e3:.1f} ms "
              f"(target {TARGET_P99_MS:g} ms)")  # fmt: skip


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--hosts", type=int, default=1024)
    p.add_argument("--rate", type=float, default=500.0, help="requests per second")
    p.add_argument("--seconds", type=float, default=20.0, help="loaded seconds counted")
    p.add_argument("--warmup", type=float, default=2.0, help="loaded seconds first, not counted")
    p.add_argument("--poll", default="2s", help="poll interval (short, so polls run back to back)")
    p.add_argument("--connections", type=int, default=32)
    p.add_argument("--serial", type=int, default=400, help="requests timed one at a time first")
    p.add_argument("--warm-polls", type=int, default=5)
    p.add_argument("--ready-timeout", type=float, default=1800, help="seconds to wait for the warm polls")
    p.add_argument("--routes", default=",".join(ROUTES), help="comma-separated GET routes to load")
    args = p.parse_args()
    ROUTES[:] = args.routes.split(",")
    asyncio.run(bench(args))


if __name__ == "__main__":
    main()
