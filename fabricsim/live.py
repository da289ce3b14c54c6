"""``graywire fakes``: one simulated fabric behind every real source format, live.

Each interval the simulation steps once and every fake moves with it: the fake UFM (REST +
Telemetry over HTTP), snmpsim serving ``.snmprec`` recordings of every switch (UDP SNMP),
host agents reading simulated sysfs trees (HTTP, Arrow IPC), and NCCL Inspector files with
their NCCL_DEBUG logs. It writes a ``graywire.yaml`` that points ``graywire serve`` at all of
them, so the service crosses the same protocols and parsers production data crosses.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import uvicorn
import yaml
from fastapi import FastAPI

from graywire.collectors.host.agent_server import AgentConfig, create_agent_app
from graywire.fabricsim.faults import LIVE_DEFAULT_FAULTS
from graywire.fabricsim.hostfs import HostTreeWriter
from graywire.fabricsim.nccl_writer import InspectorWriter
from graywire.fabricsim.sim import FabricSim, SimConfig, truth_document
from graywire.fabricsim.snmprec import write_snmprec
from graywire.fabricsim.topology import TopologySpec
from graywire.fabricsim.ufm_server import FakeUfm

UFM_USER, UFM_PASSWORD = "admin", "graywire-fake"


@dataclass(frozen=True, slots=True)
class FakesConfig:
    out: Path
    hosts: int = 16
    seed: int = 0
    faults: str = LIVE_DEFAULT_FAULTS
    interval_s: float = 10.0
    ufm_port: int = 9701
    snmp_port: int = 1161
    agent_port: int = 9470  # first agent; the next hosts take the next ports
    agent_hosts: int = 4
    service_port: int = 8000
    #: Write ``inventory: discover`` into graywire.yaml: the service builds its model from the
    #: fake UFM, as it would from a real one (inventory.json stays beside it, as the truth).
    discover: bool = False


def recording_mtime(simulated: float, last: float, now: float) -> float:
    """The mtime to stamp on a new switch recording, in whole seconds.

    snmpsim re-reads a recording when its mtime changes, but rebuilds the recording's index
    only when the recording is no older than the index (``snmpsim.record.search.database``,
    ``create``). An index newer than the recording is taken as fresh, though it was built from
    the file before, and its offsets then point into the wrong lines: a walk gets the OID it
    asked about back as the next one. So the stamp is the latest of: the simulated time; a
    second past the last stamp (steps may come faster than a second); and two seconds on from
    now, so it is newer than every index built from the recordings before it.
    """
    return float(max(math.floor(simulated), math.floor(last) + 1, math.ceil(now) + 1))


@contextlib.contextmanager
def serve_app(
    app: FastAPI,
    port: int = 0,
    *,
    lifespan: str = "auto",
    certfile: Path | None = None,
    keyfile: Path | None = None,
    log_level: str = "warning",
) -> Iterator[str]:
    """Run an ASGI app on 127.0.0.1 in a thread until the block ends; yields its base URL.

    ``port`` 0 takes a free one; a certificate makes it HTTPS.
    """
    config = uvicorn.Config(
        app,
        host="127.0.0.1",
        port=port,
        log_level=log_level,
        lifespan=lifespan,
        timeout_graceful_shutdown=1,  # a client left hanging must not hold the shutdown
        ssl_certfile=str(certfile) if certfile else None,
        ssl_keyfile=str(keyfile) if keyfile else None,
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError(f"could not listen on 127.0.0.1:{port} (in use?)")
        time.sleep(0.005)
    bound = server.servers[0].sockets[0].getsockname()[1]
    try:
        yield f"{'https' if certfile else 'http'}://127.0.0.1:{bound}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)


def snmpsim_binary() -> str:
    found = shutil.which("snmpsim-command-responder") or str(
        Path(sys.executable).parent / "snmpsim-command-responder"
    )
    if not Path(found).exists():
        raise RuntimeError("snmpsim-command-responder not found: pip install 'graywire[fakes]'")
    return found


#: An SNMPv3 USM user snmpsim accepts: (user, auth protocol, auth key, priv protocol, priv key).
V3User = tuple[str, str, str, str | None, str | None]


@contextlib.contextmanager
def run_snmpsim(data_dir: Path, port: int, log: Path, v3_users: Iterable[V3User] = ()) -> Iterator[None]:
    cache = data_dir.parent / "snmpsim-cache"
    cache.mkdir(parents=True, exist_ok=True)
    # snmpsim reads its options in order: an engine id comes before the endpoints it serves.
    engine = ["--v3-engine-id=auto"] if v3_users else []
    cmd = [snmpsim_binary(), f"--cache-dir={cache}", "--log-level=error", *engine, f"--data-dir={data_dir}",
           f"--agent-udpv4-endpoint=127.0.0.1:{port}"]  # fmt: skip
    for user, auth_proto, auth_key, priv_proto, priv_key in v3_users:
        cmd += [f"--v3-user={user}", f"--v3-auth-key={auth_key}", f"--v3-auth-proto={auth_proto}"]
        if priv_key:
            cmd += [f"--v3-priv-key={priv_key}", f"--v3-priv-proto={priv_proto}"]
    env = {**os.environ, "SNMPSIM_ALLOW_ROOT": "true"}  # snmpsim refuses root unless told
    with log.open("wb") as fh:
        proc = subprocess.Popen(cmd, stdout=fh, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env)
    try:
        time.sleep(1.0)
        if proc.poll() is not None:
            raise RuntimeError(f"snmpsim exited with {proc.returncode}; see {log}")
        yield
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()


def service_config(cfg: FakesConfig, switches: list[str], agent_urls: list[str]) -> dict:
    """The ``graywire serve`` configuration that reads every fake."""
    ufm = f"http://127.0.0.1:{cfg.ufm_port}"
    return {
        "port": cfg.service_port,
        "data_dir": str(cfg.out / "graywire-data"),
        "poll_interval": f"{cfg.interval_s:g}s",
        "inventory": "discover" if cfg.discover else str(cfg.out / "inventory.json"),
        "sources": [
            {
                "type": "ufm",
                "url": ufm,
                "username": UFM_USER,
                "password": UFM_PASSWORD,
                "telemetry_url": f"{ufm}/metrics",
            },
            {
                "type": "snmp",
                "version": "2c",
                "targets": [
                    {"host": "127.0.0.1", "port": cfg.snmp_port, "name": s, "community": s} for s in switches
                ],
            },
            {"type": "agent", "urls": agent_urls},
            {
                "type": "nccl",
                "directory": str(cfg.out / "nccl"),
                "pattern": "*/*-pid*.log",
                "debug_pattern": "*/nccl.*",
            },
        ],
    }


def run_fakes(
    cfg: FakesConfig,
    steps: int | None = None,
    say: Callable[[str], object] = print,
    on_step: Callable[[int, Path], object] | None = None,
) -> Path:
    """Run every fake until interrupted (or ``steps`` polls); returns the config file path.

    ``on_step(k, config_path)`` runs after step ``k`` is served (k = 0 before the first advance),
    so a test can poll the fakes in lockstep instead of by the clock.
    """
    out = cfg.out
    out.mkdir(parents=True, exist_ok=True)
    start = datetime.now(UTC).replace(microsecond=0)
    topo = TopologySpec(hosts=cfg.hosts)
    forever = 10 * 365 * 86400.0
    sim = FabricSim(
        SimConfig(
            topology=topo,
            interval_s=cfg.interval_s,
            duration_s=forever,
            seed=cfg.seed,
            start=start,
            faults=cfg.faults,
        )
    )
    fabric = sim.fabric
    fabric.write_inventory(out / "inventory.json")
    fake = FakeUfm(sim, username=UFM_USER, password=UFM_PASSWORD)
    snmp_dir = out / "snmp"
    snmp_dir.mkdir(exist_ok=True)
    hosts_writer = HostTreeWriter(out / "hosts", fabric)
    agent_hosts = [fabric.node_names[i] for i in range(min(cfg.agent_hosts, cfg.hosts))]
    # The job's files come once it starts; the directory is there from the first poll, so the
    # nccl source reads "nothing yet", not "no such directory".
    (out / "nccl").mkdir(exist_ok=True)
    nccl = InspectorWriter(out / "nccl", debug_log=True)

    stamps = [0.0]  # the last recordings' mtime

    def write_all() -> None:
        step = fake.step
        stamps[0] = recording_mtime(step.time.timestamp(), stamps[0], time.time())
        write_snmprec(step.port_sample, fabric, snmp_dir, mtime=stamps[0])
        hosts_writer.write(step.port_sample, hosts=agent_hosts)
        if step.nccl_timing is not None:
            nccl.write(step.nccl_timing)

    write_all()
    switches = sorted(p.stem for p in snmp_dir.glob("*.snmprec"))
    with contextlib.ExitStack() as stack:
        stack.enter_context(serve_app(fake.app, cfg.ufm_port))
        stack.enter_context(run_snmpsim(snmp_dir, cfg.snmp_port, out / "snmpsim.log"))
        urls = []
        for i, h in enumerate(agent_hosts):
            app = create_agent_app(AgentConfig(sysfs_root=hosts_writer.host_root(h), hostname=h,
                                               ethtool_dir=hosts_writer.ethtool_dir(h)))  # fmt: skip
            urls.append(stack.enter_context(serve_app(app, cfg.agent_port + i)))
        config_path = out / "graywire.yaml"
        config_path.write_text(yaml.safe_dump(service_config(cfg, switches, urls), sort_keys=False))
        say(f"fabricsim fakes: {cfg.hosts} hosts, {fabric.n_ports} ports, a poll every {cfg.interval_s:g} s")
        say(f"  UFM REST + Telemetry  http://127.0.0.1:{cfg.ufm_port}  (user {UFM_USER})")
        say(
            f"  SNMP (snmpsim)        udp 127.0.0.1:{cfg.snmp_port}, {len(switches)} switches, "
            "community = switch name"
        )
        say(f"  host agents           {', '.join(urls)}")
        say(f"  NCCL Inspector files  {out / 'nccl'}")
        # The ground truth, as `graywire sim` writes it: what was injected where, from when.
        (out / "truth.json").write_text(json.dumps(truth_document(sim), indent=1))
        for fl in sorted(sim.faults, key=lambda f: f.start_s):
            lasts = f" for {fl.end_s - fl.start_s:.0f} s" if fl.end_s - fl.start_s < forever / 2 else ""
            detail = f" channel {fl.channel} (rank {fl.rank})" if fl.channel is not None else ""
            say(f"  injected t+{fl.start_s:.0f}s{lasts} {fl.kind} {fl.port or fl.node}{detail}")
        say(f"  ground truth          {out / 'truth.json'} (times from {start.isoformat()})")
        say(f"then: graywire serve --config {config_path}")
        if on_step:
            on_step(0, config_path)
        k = 0
        t0 = time.monotonic()
        while steps is None or k < steps:
            k += 1
            delay = t0 + k * cfg.interval_s - time.monotonic()
            if delay > 0 and on_step is None:
                time.sleep(delay)
            fake.advance()
            write_all()
            if on_step:
                on_step(k, config_path)
    return out / "graywire.yaml"
