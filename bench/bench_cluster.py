"""Collection throughput of 1, 2 and 3 replicas sharing host-agent targets through NATS JetStream.

fabricsim builds a fabric of ``--hosts`` hosts; each host's ports become one host agent's
answer (the Arrow IPC batch ``graywire agent`` serves), and one small HTTP server in a process
of its own serves them all, so the only graywire code running is the replicas'. For each
member count, ``graywire serve`` replicas start with ``cluster:`` on PostgreSQL and NATS
(``GRAYWIRE_BENCH_PG_URL``, ``GRAYWIRE_BENCH_NATS_URL``; a stream of the run's own), share the
agent targets by rendezvous hashing, scrape their share every ``--interval`` and publish it;
the leader judges every poll. Over ``--seconds`` it reads each replica's
``graywire_cluster_scrapes_total`` and its process CPU time (``/proc``), and the leader's polls
judged.

Printed per member count: targets scraped and published a second (all members), ports a
second, each member's CPU milliseconds per target, the leader's polls judged against the polls
due, and the machine's idle share. The limit, measured in the same run by this process: the CPU
milliseconds per target of the collection alone, as the single-process service does it
(``AgentCollector.scrape``, the fetch and the decode, no publishing), and the ratio of the
members' figure to it. Run: ``python bench/bench_cluster.py [--hosts 2048] [--interval 2]
[--seconds 30] [--members 1,2,3]``.
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing as mp
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import httpx
import pyarrow as pa
import sqlalchemy as sa
import yaml

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


def floor_ms(urls: list[str]) -> float:
    """CPU ms per target of the collection alone, in this process: every agent scraped once,
    concurrently, as the single-process service scrapes them (after one warm-up round)."""
    collectors = [AgentCollector(u) for u in urls]

    async def round_() -> None:
        await asyncio.gather(*(c.scrape() for c in collectors))

    async def main() -> float:
        await round_()
        t0 = time.process_time()
        for _ in range(3):
            await round_()
        spent = time.process_time() - t0
        for c in collectors:
            await c.aclose()
        return 1000 * spent / (3 * len(collectors))

    return asyncio.run(main())


def run_members(
    n: int, args: argparse.Namespace, work: Path, urls: list[str], ports: int
) -> dict[str, float]:
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
            "archive": {"enabled": False},
            "metrics": {"per_port": False},
            "sources": [{"type": "agent", "urls": urls}],
            "cluster": {
                "nats_url": args.nats,
                "stream": stream,
                "subject_prefix": stream.lower(),
                "member_id": f"gw-{i}",
            },
        }
        path = work / f"m{n}-{i}.yaml"
        path.write_text(yaml.safe_dump(config))
        log = (work / f"m{n}-{i}.log").open("wb")
        proc = subprocess.Popen(
            [GRAYWIRE, "serve", "--config", str(path)], stdout=log, stderr=subprocess.STDOUT
        )
        procs.append((proc, port))
    try:

        def scrape(port: int) -> str:
            return httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=30).text

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
        time.sleep(3 * args.interval)  # every share scraped a few times, the leader warmed up
        before = [scrape(p) for _, p in procs]
        cpu0 = [cpu_seconds(p.pid) for p, _ in procs]
        idle0, total0 = idle_share()
        t0 = time.monotonic()
        time.sleep(args.seconds)
        elapsed = time.monotonic() - t0
        after = [scrape(p) for _, p in procs]
        cpu1 = [cpu_seconds(p.pid) for p, _ in procs]
        idle1, total1 = idle_share()
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
    scraped = [
        metric(a, name, result="ok") - metric(b, name, result="ok")
        for a, b in zip(after, before, strict=True)
    ]
    leader = next(i for i, t in enumerate(after) if metric(t, "graywire_cluster_leader") == 1)
    judged = metric(after[leader], "graywire_cluster_polls_judged_total") - metric(
        before[leader], "graywire_cluster_polls_judged_total"
    )
    per_member = [1000 * (c1 - c0) / max(s, 1) for c0, c1, s in zip(cpu0, cpu1, scraped, strict=True)]
    non_leader = [v for i, v in enumerate(per_member) if i != leader] or per_member
    return {
        "targets_per_s": sum(scraped) / elapsed,
        "ports_per_s": sum(scraped) / elapsed * ports / len(urls),
        "due_per_s": len(urls) / args.interval,
        "member_ms": min(non_leader),
        "leader_ms": per_member[leader],
        "leader_cpu_share": (cpu1[leader] - cpu0[leader]) / elapsed,
        "judged": judged,
        "due_polls": elapsed / args.interval,
        "idle": (idle1 - idle0) / max(total1 - total0, 1.0),
    }


def reset(url: str) -> None:
    base = sa.engine.make_url(url)
    admin = sa.create_engine(base.set(database="postgres"), isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(sa.text(f'DROP DATABASE IF EXISTS "{base.database}" WITH (FORCE)'))
        conn.execute(sa.text(f'CREATE DATABASE "{base.database}"'))
    admin.dispose()


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
    p.add_argument("--hosts", type=int, default=2048, help="host agents (targets), 8 ports each")
    p.add_argument("--interval", type=float, default=2.0, help="poll interval, seconds")
    p.add_argument("--seconds", type=float, default=30.0, help="measured seconds per member count")
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
            floor = floor_ms(urls)
            due = len(urls) / args.interval
            print(f"{len(urls):,} host agents ({ports:,} ports), a poll every {args.interval:g} s: "
                  f"{due:,.0f} targets due a second; {os.cpu_count()} cores")  # fmt: skip
            print(f"limit: the collection alone (fetch + decode, one process, no publishing): "
                  f"{floor:.2f} CPU ms a target")  # fmt: skip
            head = ("members", "targets/s", "ports/s", "member ms/target", "ratio", "leader ms/target",
                    "leader CPU", "polls judged", "idle")  # fmt: skip
            print(" ".join(f"{h:>{w}}" for h, w in zip(head, (7, 10, 10, 17, 6, 17, 10, 13, 5), strict=True)))
            for n in (int(x) for x in args.members.split(",")):
                r = run_members(n, args, work, urls, ports)
                cells = (
                    f"{n:>7}", f"{r['targets_per_s']:>10,.0f}", f"{r['ports_per_s']:>10,.0f}",
                    f"{r['member_ms']:>17.2f}", f"{r['member_ms'] / floor:>6.2f}", f"{r['leader_ms']:>17.2f}",
                    f"{r['leader_cpu_share']:>10.0%}", f"{r['judged']:>6.0f} of {r['due_polls']:<4.0f}",
                    f"{r['idle']:>5.0%}",
                )  # fmt: skip
                print(" ".join(cells), flush=True)
        finally:
            server.terminate()
    return 0


if __name__ == "__main__":
    sys.exit(main())
