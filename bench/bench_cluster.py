"""Collection throughput of 1, 2 and 3 replicas sharing host-agent targets through NATS JetStream.

fabricsim builds a fabric of ``--hosts`` hosts; each host's ports become one host agent's
answer (the Arrow IPC batch ``graywire agent`` serves), and one small HTTP server in a process
of its own serves them all, so the only graywire code running is the replicas'. For each
member count, ``graywire serve`` replicas start with ``cluster:`` on PostgreSQL and NATS
(``GRAYWIRE_BENCH_PG_URL``, ``GRAYWIRE_BENCH_NATS_URL``; a stream of the run's own), share the
agent targets by rendezvous hashing, scrape their share every ``--interval`` and publish it;
the leader judges every poll. Over ``--slots`` polls it reads each replica's
``graywire_cluster_scrapes_total``, its process CPU time (``/proc``), the stream's bytes, and the
leader's polls judged.

Each member scrapes its share at the start of every slot (at most ``max_concurrent_scrapes`` at
once) and publishes each scrape as it completes; how long that takes
(``graywire_cluster_slot_seconds``, read after each slot) bounds how many targets it can take a
poll. Printed per member count: the targets a second scraped and published, and those that
failed (a share that does not fit its poll times out); the slowest slot; the capacity, the sum
of each member's share over its slot (while none failed); ports a second at that rate and its
ratio to the limit; a follower's CPU milliseconds per target it scraped; the cores the leader
used (its own share, and the judging of every poll); the bytes the stream stored per scrape
(size NATS by it); and the leader's polls judged against the polls due. The limit, measured in
the same run by this process: one process scraping every target, as the single-process service
does (``AgentCollector.scrape``: the fetch and the decode, nothing published), in targets a
second and CPU milliseconds a target. Run: ``python bench/bench_cluster.py [--hosts 512]
[--interval 10] [--slots 4] [--members 1,2,3]``.
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing as mp
import os
import re
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import httpx
import pyarrow as pa
import pyarrow.compute as pc
import sqlalchemy as sa
import yaml

from graywire.collectors.base import ScrapeResult
from graywire.collectors.host.agent_client import AgentCollector
from graywire.collectors.host.agent_wire import SOURCE, to_ipc
from graywire.fabricsim.sim import FabricSim, SimConfig
from graywire.fabricsim.topology import TopologySpec

GRAYWIRE = str(Path(sys.executable).parent / "graywire")
TICK = os.sysconf("SC_CLK_TCK")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def agent_bodies(hosts: int, out: Path) -> tuple[dict[str, bytes], int]:
    """Each host's agent answer (its ports' batch as Arrow IPC), and the ports in all; the
    fabric model goes to ``out/inventory.json``."""
    sim = FabricSim(SimConfig(topology=TopologySpec(hosts=hosts), duration_s=20.0, seed=1, faults="none"))
    sim.fabric.write_inventory(out / "inventory.json")
    batch = next(iter(sim.run())).port_sample
    hosts_of = [k.split("/", 1)[0] for k in batch.column("port").cast(pa.string()).to_pylist()]
    by_host: dict[str, list[int]] = {}
    for i, h in enumerate(hosts_of):
        if h.startswith("gpu-"):  # fabricsim's hosts; the switches have no agent
            by_host.setdefault(h, []).append(i)
    field = batch.schema.field("source")
    bodies: dict[str, bytes] = {}
    ports = 0
    for h, rows in by_host.items():
        part = pa.Table.from_batches([batch.take(rows)])
        part = part.set_column(
            part.schema.get_field_index("source"), field, pa.array([SOURCE] * part.num_rows, field.type)
        )
        # A host's own dictionary of its own ports, as an agent sends (a slice keeps the whole
        # fabric's: every answer would carry every port key).
        i = part.schema.get_field_index("port")
        port = part.schema.field(i)
        keys = part.column(i).cast(port.type.value_type).combine_chunks()
        part = part.set_column(i, port, pc.dictionary_encode(keys).cast(port.type))
        bodies[h] = to_ipc(part.combine_chunks().to_batches()[0])
        ports += part.num_rows
    return bodies, ports


def serve_agents(bodies: dict[str, bytes], port: int, ready: mp.synchronize.Event) -> None:  # type: ignore[name-defined]
    """A minimal HTTP/1.1 server (keep-alive) answering ``/<host>/v1/port_sample`` with the
    host's batch and 404 otherwise: as cheap as possible, so it is not what is measured."""
    path = re.compile(rb"^GET /([^/ ]+)/v1/port_sample ")

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                m = path.match(head)
                body = bodies.get(m.group(1).decode()) if m else None
                if body is None:
                    writer.write(b"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\n\r\n")
                else:
                    writer.write(
                        b"HTTP/1.1 200 OK\r\ncontent-type: application/vnd.apache.arrow.stream\r\n"
                        + f"content-length: {len(body)}\r\n\r\n".encode()
                        + body
                    )
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    async def main() -> None:
        server = await asyncio.start_server(handle, "127.0.0.1", port, backlog=1024)
        ready.set()
        async with server:
            await server.serve_forever()

    asyncio.run(main())


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def idle_share() -> tuple[float, float]:
    parts = [float(x) for x in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    return parts[3] + parts[4], sum(parts)


def metric(text: str, name: str, **labels: str) -> float:
    total = 0.0
    for line in text.splitlines():
        if not line.startswith(name):
            continue
        head, _, value = line.rpartition(" ")
        if all(f'{k}="{v}"' in head for k, v in labels.items()) and (
            head == name or head.startswith(name + "{")
        ):
            total += float(value)
    return total


def single_process(urls: list[str]) -> tuple[float, float]:
    """The limit, in this process: every agent scraped, 256 at once, as the single-process service
    scrapes them (``AgentCollector.scrape``: fetch and decode, no publishing), after a warm-up
    round. Targets a second (all of them over the round's wall time) and CPU ms a target."""
    collectors = [AgentCollector(u, timeout=60.0) for u in urls]

    async def main() -> tuple[float, float]:
        turns = asyncio.Semaphore(256)  # the service's max_concurrent_scrapes

        async def one(c: AgentCollector) -> ScrapeResult:
            async with turns:
                return await c.scrape()

        await asyncio.gather(*(one(c) for c in collectors))
        walls, cpus = [], []
        for _ in range(3):
            t0, c0 = time.perf_counter(), time.process_time()
            results = await asyncio.gather(*(one(c) for c in collectors))
            walls.append(time.perf_counter() - t0)
            cpus.append(time.process_time() - c0)
            if not all(r.ok for r in results):
                raise RuntimeError(f"{sum(not r.ok for r in results)} scrapes failed in the single process")
        for c in collectors:
            await c.aclose()
        return len(urls) / statistics.median(walls), 1000 * statistics.median(cpus) / len(urls)

    return asyncio.run(main())


def run_members(
    n: int, args: argparse.Namespace, work: Path, urls: list[str], ports: int
) -> dict[str, float]:
    """``n`` replicas over the agents: per member, the seconds its slots take to scrape and
    publish its share (the slot's own gauge, read after each slot) and its CPU per target."""
    stream = f"GWBENCH_{uuid.uuid4().hex[:8].upper()}"
    reset(args.pg)
    procs: list[tuple[subprocess.Popen[bytes], int]] = []
    for i in range(n):
        port = free_port()
        config = {
            "host": "127.0.0.1",
            "port": port,
            "data_dir": str(work / f"m{n}-{i}"),
            "database_url": args.pg,
            "inventory": str(work / "inventory.json"),
            "poll_interval": f"{args.interval:g}s",
            # A share must be scraped within the slot: the measure is how long that takes.
            "scrape_timeout": f"{0.95 * args.interval:g}s",
            "archive": {"enabled": False},
            "metrics": {"per_port": False},
            "sources": [{"type": "agent", "urls": urls}],
            "cluster": {
                "nats_url": args.nats, "stream": stream, "subject_prefix": stream.lower(),
                "member_id": f"gw-{i}",
            },
        }  # fmt: skip
        path = work / f"m{n}-{i}.yaml"
        path.write_text(yaml.safe_dump(config))
        log = (work / f"m{n}-{i}.log").open("wb")
        proc = subprocess.Popen(
            [GRAYWIRE, "serve", "--config", str(path)], stdout=log, stderr=subprocess.STDOUT
        )
        procs.append((proc, port))

    def scrape(port: int) -> str:
        return httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=30).text

    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                texts = [scrape(p) for _, p in procs]
                if all(metric(t, "graywire_cluster_members") == n for t in texts) and any(
                    metric(t, "graywire_cluster_leader") == 1 for t in texts
                ):
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"{n} members did not come up; see {work}")
            time.sleep(0.5)
        time.sleep(2 * args.interval)  # every share scraped once or twice, the leader warmed up
        before = [scrape(p) for _, p in procs]
        stored0 = stream_bytes(args.nats, stream)
        cpu0 = [cpu_seconds(p.pid) for p, _ in procs]
        slots: list[list[float]] = [[] for _ in procs]
        owned = [0.0] * n
        t0 = time.monotonic()
        for _ in range(args.slots):
            # Read each member's last slot just before the next one begins.
            time.sleep(args.interval - (time.time() % args.interval) + 0.9 * args.interval)
            for i, (_, p) in enumerate(procs):
                text = scrape(p)
                slots[i].append(metric(text, "graywire_cluster_slot_seconds"))
                owned[i] = metric(text, "graywire_cluster_targets_owned")
        elapsed = time.monotonic() - t0
        after = [scrape(p) for _, p in procs]
        stored1 = stream_bytes(args.nats, stream)
        cpu1 = [cpu_seconds(p.pid) for p, _ in procs]
        # After the CPU figures (the reads cost CPU too), while the polls go on.
        leader = next(i for i, t in enumerate(after) if metric(t, "graywire_cluster_leader") == 1)
        reads = {"leader": read_latency(procs[leader][1])}
        if n > 1:
            reads["follower"] = read_latency(procs[(leader + 1) % n][1])
    finally:
        for proc, _ in procs:
            proc.send_signal(signal.SIGTERM)
        for proc, _ in procs:
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
        drop_stream(args.nats, stream)
    name = "graywire_cluster_scrapes_total"
    ok = [
        metric(a, name, result="ok") - metric(b, name, result="ok")
        for a, b in zip(after, before, strict=True)
    ]
    failed = sum(
        metric(a, name, result="failed") - metric(b, name, result="failed")
        for a, b in zip(after, before, strict=True)
    )
    judged = metric(after[leader], "graywire_cluster_polls_judged_total") - metric(
        before[leader], "graywire_cluster_polls_judged_total"
    )
    slot_s = [statistics.median(x) for x in slots]
    cpu_ms = [1000 * (c1 - c0) / max(k, 1) for c0, c1, k in zip(cpu0, cpu1, ok, strict=True)]
    others = [i for i in range(n) if i != leader] or [leader]
    return {
        "scraped": sum(ok) / elapsed,
        "failed_per_s": failed / elapsed,
        # What the members could take a poll, from how long their shares took: meaningful while
        # every slot ends within the interval (else the shares did not fit).
        "capacity": sum(owned[i] / slot_s[i] for i in range(n))
        if not failed and max(slot_s) < args.interval
        else None,
        "slot_max": max(slot_s),
        "member_ms": statistics.median(cpu_ms[i] for i in others),
        "leader_cores": (cpu1[leader] - cpu0[leader]) / elapsed,
        "failed": failed,
        "judged": judged,
        "due_polls": elapsed / args.interval,
        "ports_per_target": ports / len(urls),
        # What the stream keeps per scrape (payload and JetStream's own record): size it by this.
        "stored_per_target": (stored1[0] - stored0[0]) / max(sum(ok), 1),
        "reads": reads,
    }


#: The reads a dashboard or a scheduler makes: from the shared database (incidents, drain list),
#: from the leader's state (ports: a follower relays it) and the member's own (cluster).
READS = {
    "incidents": "/api/v1/incidents?status=open&limit=100",
    "drain": "/api/v1/drain",
    "ports": "/api/v1/ports?limit=100",
    "cluster": "/api/v1/cluster",
}


def read_latency(port: int, rounds: int = 40) -> dict[str, tuple[float, float]]:
    """Median and 95th-percentile ms of each read on one member, one request at a time over a
    kept-alive connection, after one warm-up request each."""
    out: dict[str, tuple[float, float]] = {}
    with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=30) as client:
        for name, path in READS.items():
            client.get(path).raise_for_status()
            times = []
            for _ in range(rounds):
                t0 = time.perf_counter()
                client.get(path).raise_for_status()
                times.append(1000 * (time.perf_counter() - t0))
            out[name] = (statistics.median(times), statistics.quantiles(times, n=20)[-1])
    return out


def reset(url: str) -> None:
    base = sa.engine.make_url(url)
    admin = sa.create_engine(base.set(database="postgres"), isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(sa.text(f'DROP DATABASE IF EXISTS "{base.database}" WITH (FORCE)'))
        conn.execute(sa.text(f'CREATE DATABASE "{base.database}"'))
    admin.dispose()


def stream_bytes(url: str, stream: str) -> tuple[int, int]:
    """Bytes and messages the stream holds now."""

    async def go() -> tuple[int, int]:
        import nats

        nc = await nats.connect(url)
        try:
            state = (await nc.jetstream().stream_info(stream)).state
            return int(state.bytes), int(state.messages)
        finally:
            await nc.close()

    return asyncio.run(go())


def drop_stream(url: str, stream: str) -> None:
    async def go() -> None:
        import nats

        nc = await nats.connect(url)
        try:
            await nc.jetstream().delete_stream(stream)
        finally:
            await nc.close()

    asyncio.run(go())


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--hosts", type=int, default=512, help="host agents (targets), 8 ports each")
    p.add_argument("--interval", type=float, default=10.0, help="poll interval, seconds")
    p.add_argument("--slots", type=int, default=4, help="poll slots measured per member count")
    p.add_argument("--members", default="1,2,3", help="member counts to run")
    p.add_argument(
        "--pg",
        default=os.environ.get(
            "GRAYWIRE_BENCH_PG_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/graywire_bench"
        ),
    )
    p.add_argument("--nats", default=os.environ.get("GRAYWIRE_BENCH_NATS_URL", "nats://127.0.0.1:4222"))
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        bodies, ports = agent_bodies(args.hosts, work)
        port = free_port()
        ready = mp.get_context("fork").Event()
        server = mp.get_context("fork").Process(target=serve_agents, args=(bodies, port, ready), daemon=True)
        server.start()
        ready.wait(30)
        urls = [f"http://127.0.0.1:{port}/{h}" for h in sorted(bodies)]
        try:
            alone, alone_ms = single_process(urls)
            print(f"{len(urls):,} host agents ({ports:,} ports), a poll every {args.interval:g} s: "
                  f"{len(urls) / args.interval:,.0f} due a second; {os.cpu_count()} cores")  # fmt: skip
            print(f"limit, one process scraping them all at once (fetch + decode, no publishing): "
                  f"{alone:,.0f} targets/s, {alone_ms:.1f} CPU ms a target")  # fmt: skip
            head = ("members", "scraped/s", "failed/s", "slowest slot", "capacity/s", "ports/s", "ratio",
                    "member ms/t", "leader cores", "B stored/t", "polls judged")  # fmt: skip
            widths = (7, 9, 8, 12, 10, 10, 6, 11, 12, 10, 13)
            print(" ".join(f"{h:>{w}}" for h, w in zip(head, widths, strict=True)))
            for n in (int(x) for x in args.members.split(",")):
                r = run_members(n, args, work, urls, ports)
                cap = r["capacity"]
                cells = (
                    f"{n:>7}", f"{r['scraped']:>9,.0f}", f"{r['failed_per_s']:>8,.0f}",
                    f"{r['slot_max']:>11.2f}s",
                    f"{cap:>10,.0f}" if cap else f"{'over':>10}",
                    f"{(cap or r['scraped']) * r['ports_per_target']:>10,.0f}",
                    f"{(cap or r['scraped']) / alone:>6.2f}",
                    f"{r['member_ms']:>11.1f}", f"{r['leader_cores']:>12.2f}",
                    f"{r['stored_per_target']:>10,.0f}",
                    f"{r['judged']:>6.0f} of {r['due_polls']:<4.0f}",
                )  # fmt: skip
                print(" ".join(cells), flush=True)
                for role, got in r["reads"].items():
                    shown = ", ".join(f"{k} {a:.1f}/{b:.1f}" for k, (a, b) in got.items())
                    print(f"{'':>7} reads on the {role}, ms median/p95: {shown}", flush=True)
        finally:
            server.terminate()
    return 0


if __name__ == "__main__":
    sys.exit(main())
