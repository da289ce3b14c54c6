"""Real processes for the cluster tests: ``graywire fakes`` and ``graywire serve`` replicas.

Each is a subprocess of the installed ``graywire`` command with a log file of its own, so a
replica can be killed with SIGKILL, paused with SIGSTOP and resumed, as an operator's tools or a
kernel would, and its log read back when an assertion fails.
"""

from __future__ import annotations

import contextlib
import copy
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import yaml

from graywire.fabricsim.live import snmpsim_binary
from tests.fabricsim.test_live import free_port, free_run
from tests.service.alerts.receiver import Recorder, serve_recorder

GRAYWIRE = str(Path(sys.executable).parent / "graywire")
OPERATOR_TOKEN = "operator-token-for-the-cluster-tests"


def wait_until(what: str, predicate: Callable[[], Any], timeout: float, every: float = 0.2) -> Any:
    """``predicate()``'s first truthy value, polled until ``timeout`` seconds passed."""
    deadline = time.monotonic() + timeout
    last_error: Exception | None = None
    while time.monotonic() < deadline:
        try:
            value = predicate()
        except (httpx.HTTPError, ValueError, KeyError) as e:  # a replica starting or stopping
            last_error, value = e, None
        if value:
            return value
        time.sleep(every)
    raise AssertionError(
        f"timed out after {timeout:.0f} s waiting for {what}" + (f" ({last_error})" if last_error else "")
    )


@dataclass
class Fakes:
    """``graywire fakes``: one simulated fabric behind UFM, snmpsim, agents and NCCL files."""

    out: Path
    proc: subprocess.Popen[bytes]
    #: Wall time the simulation started (fault times count from it).
    started: float
    config: dict[str, Any]

    @classmethod
    def start(
        cls, out: Path, *, hosts: int, interval: float, faults: str, ports: dict[str, int], agents: int
    ) -> Fakes:
        out.mkdir(parents=True, exist_ok=True)
        log = (out / "fakes.log").open("wb")
        cmd = [GRAYWIRE, "fakes", "--out", str(out / "fakes"), "--hosts", str(hosts),
               "--interval", f"{interval:g}s", "--faults", faults, "--seed", "5",
               "--ufm-port", str(ports["ufm"]), "--snmp-port", str(ports["snmp"]),
               "--agent-port", str(ports["agent"]), "--agent-hosts", str(agents)]  # fmt: skip
        started = time.time()
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        config_path = out / "fakes" / "graywire.yaml"
        wait_until(
            "graywire fakes to write its config", lambda: proc.poll() is None and config_path.exists(), 60
        )
        if proc.poll() is not None:
            raise AssertionError(f"graywire fakes exited: {(out / 'fakes.log').read_text()}")
        return cls(out, proc, started, yaml.safe_load(config_path.read_text()))

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()


@dataclass
class Replica:
    """One ``graywire serve`` process of the cluster."""

    name: str
    port: int
    config_path: Path
    log_path: Path
    proc: subprocess.Popen[bytes] | None = None
    logs: list[Path] = field(default_factory=list)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> Replica:
        n = len(self.logs)
        path = self.log_path.with_suffix(f".{n}.log")
        self.logs.append(path)
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        with path.open("wb") as log:
            self.proc = subprocess.Popen(
                [GRAYWIRE, "serve", "--config", str(self.config_path)],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=env,
            )
        return self

    def get(self, path: str, **params: Any) -> Any:
        r = httpx.get(self.url + path, params=params, timeout=10)
        r.raise_for_status()
        return r.json() if "json" in r.headers.get("content-type", "") else r.text

    def up(self) -> bool:
        try:
            return self.get("/api/v1/cluster")["enabled"] is True
        except httpx.HTTPError:
            return False

    def signal(self, sig: int) -> None:
        assert self.proc is not None
        os.kill(self.proc.pid, sig)

    def kill(self) -> None:
        """SIGKILL: no graceful stop, no lease released, no membership left."""
        self.signal(signal.SIGKILL)
        assert self.proc is not None
        self.proc.wait(timeout=10)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            try:
                os.kill(self.proc.pid, signal.SIGCONT)
            except ProcessLookupError:
                return
            self.proc.terminate()
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()

    def log_text(self) -> str:
        return "\n".join(f"--- {p.name}\n{p.read_text(errors='replace')}" for p in self.logs if p.exists())


def stop_all(replicas: list[Replica]) -> None:
    """SIGTERM every replica at once (each stops gracefully: lease released, membership left),
    then wait for them all."""
    running = [r for r in replicas if r.proc is not None and r.proc.poll() is None]
    for r in running:
        with contextlib.suppress(ProcessLookupError):
            r.signal(signal.SIGCONT)
            r.signal(signal.SIGTERM)
    for r in running:
        assert r.proc is not None
        try:
            r.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            r.proc.kill()


def replica_configs(
    fakes: Fakes,
    out: Path,
    *,
    database_url: str,
    nats_url: str,
    stream: str,
    ports: list[int],
    lead: list[bool],
    extra: dict[str, Any] | None = None,
) -> list[Replica]:
    """One config per replica from the fakes' own (same sources, same fabric model)."""
    replicas = []
    for i, (port, may_lead) in enumerate(zip(ports, lead, strict=True)):
        c = copy.deepcopy(fakes.config)
        c |= {
            "host": "127.0.0.1",
            "port": port,
            "data_dir": str(out / f"replica-{i}"),
            "database_url": database_url,
            "cluster": {
                "nats_url": nats_url,
                "stream": stream,
                "subject_prefix": stream.lower(),
                "member_id": f"gw-{i}",
                "lead": may_lead,
            },
        }
        c |= copy.deepcopy(extra or {})
        path = out / f"replica-{i}.yaml"
        path.write_text(yaml.safe_dump(c, sort_keys=False))
        replicas.append(Replica(f"gw-{i}", port, path, out / f"replica-{i}"))
    return replicas


@contextlib.contextmanager
def fakes_and_replicas(
    out: Path,
    *,
    database_url: str,
    nats_url: str,
    stream: str,
    poll: float,
    faults: list[tuple[str, int]],
    lead: list[bool],
) -> Iterator[tuple[Fakes, list[Replica], Recorder]]:
    """``graywire fakes`` with ``faults`` (port, seconds after the start: a speed downgrade
    each), and one replica config per ``lead`` flag, paging a PagerDuty-style recorder. The
    replicas are not started; everything stops at the end, and a failure prints their logs."""
    try:
        snmpsim_binary()
    except RuntimeError as e:
        raise AssertionError(str(e)) from None  # a dev install has it: never a skip
    spec = ",".join(f"speed_downgrade@{at}s+2h:{port}" for port, at in faults)
    ports = {"ufm": free_port(), "snmp": free_port(socket.SOCK_DGRAM), "agent": free_run(8)}
    fakes = Fakes.start(out, hosts=8, interval=poll, faults=spec, ports=ports, agents=8)
    replicas: list[Replica] = []
    with serve_recorder() as pager:
        extra = {
            "auth": {"tokens": [{"name": "oncall", "role": "operator", "token": OPERATOR_TOKEN}]},
            "drain": {"shadow": False},
            "alerts": {
                "group_wait": "0s",
                "receivers": [
                    {"name": "pager", "type": "pagerduty", "url": f"{pager.url}/pd", "routing_key": "k" * 32}
                ],
            },
        }
        try:
            replicas = replica_configs(
                fakes,
                out,
                database_url=database_url,
                nats_url=nats_url,
                stream=stream,
                ports=[free_port() for _ in lead],
                lead=lead,
                extra=extra,
            )
            yield fakes, replicas, pager
        except BaseException:
            for r in replicas:
                print(r.log_text()[-20000:])
            raise
        finally:
            stop_all(replicas)
            fakes.stop()
