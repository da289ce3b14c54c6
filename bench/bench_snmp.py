"""SNMP collection cost per switch walk: graywire's CPU and waiting against snmpsim's own answer time.

fabricsim writes one switch of ``--ports`` ports (IF-MIB ifTable and ifXTable, PFC counters in
``--pfc-mib``), snmpsim serves it, and a UDP proxy in its own process sits in front of snmpsim
and timestamps every request and answer. ``SnmpCollector.scrape`` (the walk and the batch built
from it, as the service runs it) polls the switch ``--walks`` times through the proxy, over
SNMPv2c and over SNMPv3 authPriv (SHA, AES). Per walk it prints the collector process's CPU time,
the wall time, snmpsim's answer time summed over the walk's requests (measured at the proxy in
the same run: the limit any client has) and the time graywire adds on top of it, with the
ratios to the targets: 20 ms of CPU per 64-port walk, and a walk of at most 2x snmpsim's time.

Run: ``python bench/bench_snmp.py [--ports 64] [--walks 20] [--pfc-mib arista]
[--max-repetitions 25] [--max-varbinds 64]``.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import multiprocessing as mp
import selectors
import socket
import statistics
import tempfile
import time
from contextlib import ExitStack
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from graywire.collectors.snmp import SnmpCollector, SnmpSession, SnmpSourceConfig
from graywire.fabricsim.live import V3User, run_snmpsim
from graywire.fabricsim.sim import FabricSim, SimConfig
from graywire.fabricsim.snmprec import write_snmprec
from graywire.fabricsim.topology import TopologySpec

SWITCH = "leaf-r0-000"
V3_PRIV: V3User = ("bench-priv", "SHA", "authkey-bench-01", "AES", "privkey-bench-01")
CPU_TARGET_MS = 20.0


def free_udp_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def proxy_main(listen: int, upstream: int, control: Connection) -> None:
    """Forward datagrams between one client and snmpsim, noting when each request came in and
    when its answer came back; ``control`` hands over (and clears) the notes on request."""
    sel = selectors.DefaultSelector()
    front = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    front.bind(("127.0.0.1", listen))
    back = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    back.connect(("127.0.0.1", upstream))
    for s in (front, back, control):
        sel.register(s, selectors.EVENT_READ)
    client: Any = None
    pending: list[float] = []  # requests not answered yet, in order (one client, one at a time)
    notes: list[tuple[float, float | None]] = []  # (request in, answer back or None)
    control.send("ready")
    while True:
        for key, _ in sel.select():
            if key.fileobj is front:
                data, client = front.recvfrom(65_535)
                pending.append(time.monotonic())
                back.send(data)
            elif key.fileobj is back:
                try:
                    data = back.recv(65_535)
                except ConnectionRefusedError:  # snmpsim not listening (yet): the client times out
                    continue
                t = time.monotonic()
                if pending:
                    notes.append((pending.pop(0), t))
                if client is not None:
                    front.sendto(data, client)
            else:
                if control.recv() == "stop":
                    return
                notes += [(t, None) for t in pending]  # unanswered: the client gave up on them
                pending.clear()
                control.send(notes)
                notes = []


class Proxy:
    def __init__(self, upstream: int) -> None:
        self.port = free_udp_port()
        self._conn, child = mp.get_context("spawn").Pipe()
        self._proc = mp.get_context("spawn").Process(
            target=proxy_main, args=(self.port, upstream, child), daemon=True
        )
        self._proc.start()
        assert self._conn.recv() == "ready"

    def take(self) -> list[tuple[float, float | None]]:
        self._conn.send("take")
        notes: list[tuple[float, float | None]] = self._conn.recv()
        return notes

    def stop(self) -> None:
        self._conn.send("stop")
        self._proc.join(timeout=5)


def write_switch(data: Path, ports: int, pfc_mib: str) -> None:
    """One leaf of ``ports`` ports (half down to hosts, half up), as fabricsim records it."""
    half = max(1, ports // 2)
    topo = TopologySpec(hosts=half, gpus=1, hosts_per_leaf=half)
    sim = FabricSim(SimConfig(topology=topo, interval_s=10.0, duration_s=600.0, faults="none"))
    sim.step()
    step = sim.step()
    write_snmprec(step.port_sample, sim.fabric, data, nodes=[SWITCH], pfc_mib=pfc_mib)  # type: ignore[arg-type]


def source(port: int, version: str, args: argparse.Namespace) -> SnmpSourceConfig:
    target: dict[str, Any] = {"host": "127.0.0.1", "port": port, "name": SWITCH}
    extra: dict[str, Any] = {"community": SWITCH}
    if version == "3":
        user, auth_proto, auth_key, priv_proto, priv_key = V3_PRIV
        target["context"] = SWITCH
        extra = {"v3": {"user": user, "auth_protocol": auth_proto, "auth_key": auth_key,
                        "priv_protocol": priv_proto, "priv_key": priv_key}}  # fmt: skip
    return SnmpSourceConfig(
        targets=[target], version=version, timeout_s=30, request_timeout_s=5,
        max_repetitions=args.max_repetitions, max_varbinds=args.max_varbinds, **extra,
    )  # fmt: skip


async def wait_for_agent(collector: SnmpCollector, timeout_s: float = 60.0) -> None:
    """snmpsim indexes its recordings before it answers: poll until a walk succeeds."""
    deadline = time.monotonic() + timeout_s
    while True:
        res = await collector.scrape()
        if res.ok:
            return
        if time.monotonic() > deadline:
            raise SystemExit(f"snmpsim did not answer within {timeout_s:g} s: {res.error}")
        await asyncio.sleep(0.5)


async def walks(collector: SnmpCollector, n: int, proxy: Proxy) -> list[dict[str, float]]:
    out = []
    for i in range(n + 1):
        proxy.take()
        c0, w0 = time.process_time(), time.monotonic()
        res = await collector.scrape()
        c1, w1 = time.process_time(), time.monotonic()
        notes = proxy.take()
        if not res.ok:
            raise SystemExit(f"scrape failed: {res.error}")
        answered = [(a, b) for a, b in notes if b is not None]
        gaps = [nxt[0] - prev[1] for prev, nxt in itertools.pairwise(answered)]
        row = {
            "cpu": c1 - c0,
            "wall": w1 - w0,
            "snmpsim": sum(b - a for a, b in answered),
            "requests": len(notes),
            "gap": statistics.median(gaps) if gaps else 0.0,
            "gaps": sum(gaps),
            "lead": notes[0][0] - w0 if notes else 0.0,
            "tail": w1 - answered[-1][1] if answered else 0.0,
            "samples": res.samples,
        }
        if i:  # the first walk creates the engine (and, for v3, discovers the agent's engine)
            out.append(row)
        else:
            first = row
    print(
        f"  first walk: {first['cpu'] * 1e3:.0f} ms CPU, {first['wall'] * 1e3:.0f} ms wall, "
        f"{first['requests']:.0f} requests"
    )
    return out


def report(label: str, rows: list[dict[str, float]]) -> None:
    def med(k: str) -> float:
        return statistics.median(r[k] for r in rows)

    cpu, wall, sim = med("cpu") * 1e3, med("wall") * 1e3, med("snmpsim") * 1e3
    added = wall - sim
    per_req = sim / med("requests")
    lead, gaps, tail, gap = (med(k) * 1e3 for k in ("lead", "gaps", "tail", "gap"))
    cpu_x, wall_x = cpu / CPU_TARGET_MS, wall / sim
    ports, requests = med("samples"), med("requests")
    print(f"  {label}: {ports:.0f} ports, {requests:.0f} requests a walk (medians of {len(rows)})")
    print(f"    CPU a walk          {cpu:8.1f} ms   target {CPU_TARGET_MS:.0f} ms        ratio {cpu_x:5.2f}")
    print(f"    wall a walk         {wall:8.1f} ms   snmpsim {sim:7.1f} ms   ratio {wall_x:5.2f} (target 2)")
    print(f"    snmpsim per request {per_req:8.1f} ms   (its answer time, at the proxy)")
    print(f"    graywire adds       {added:8.1f} ms   a walk: {lead:.1f} ms before the first request,")
    print(f"      {gaps:.1f} ms between requests (median gap {gap:.1f} ms), {tail:.1f} ms after the last")


async def run_version(version: str, proxy: Proxy, args: argparse.Namespace) -> None:
    cfg = source(proxy.port, version, args)
    session = SnmpSession(cfg.max_concurrency)
    collector = SnmpCollector(cfg, cfg.targets[0], session)
    try:
        await wait_for_agent(SnmpCollector(cfg, cfg.targets[0], SnmpSession(1)))
        rows = await walks(collector, args.walks, proxy)
    finally:
        session.close()
    report("v2c" if version == "2c" else "v3 authPriv SHA/AES", rows)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ports", type=int, default=64)
    ap.add_argument("--walks", type=int, default=20)
    ap.add_argument("--pfc-mib", choices=["arista", "cisco", "ieee"], default="arista")
    defaults = SnmpSourceConfig.model_fields
    ap.add_argument("--max-repetitions", type=int, default=defaults["max_repetitions"].default)
    ap.add_argument("--max-varbinds", type=int, default=defaults["max_varbinds"].default)
    args = ap.parse_args()
    with ExitStack() as stack:
        tmp = Path(stack.enter_context(tempfile.TemporaryDirectory()))
        write_switch(tmp / "data", args.ports, args.pfc_mib)
        agent_port = free_udp_port()
        stack.enter_context(run_snmpsim(tmp / "data", agent_port, tmp / "snmpsim.log", v3_users=[V3_PRIV]))
        proxy = Proxy(agent_port)
        stack.callback(proxy.stop)
        print(
            f"one {args.ports}-port switch (IF-MIB, {args.pfc_mib} PFC) through a UDP proxy to snmpsim; "
            f"max_repetitions {args.max_repetitions}, max_varbinds {args.max_varbinds}"
        )
        for version in ("2c", "3"):
            asyncio.run(run_version(version, proxy, args))


if __name__ == "__main__":
    main()
