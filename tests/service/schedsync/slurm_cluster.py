"""A real single-node Slurm on localhost: munged, slurmctld and slurmd from the Debian packages.

Everything lives in one temporary directory (munge key and socket, slurm.conf, state, spool,
logs) on free ports, so it runs beside any other Slurm and leaves nothing behind. Start-up
takes about a second; readiness is polled, never slept for.
"""

from __future__ import annotations

import getpass
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

BINARIES = ("munged", "mungekey", "slurmctld", "slurmd", "scontrol")
NODE = "gpu-0001"


def missing_binaries() -> list[str]:
    """Binaries searched on PATH plus the sbin directories Debian installs daemons in."""
    path = os.pathsep.join([os.environ.get("PATH", ""), "/usr/sbin", "/sbin"])
    return [b for b in BINARIES if shutil.which(b, path=path) is None]


def _which(name: str) -> str:
    path = os.pathsep.join([os.environ.get("PATH", ""), "/usr/sbin", "/sbin"])
    found = shutil.which(name, path=path)
    assert found, name
    return found


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class SlurmStartError(RuntimeError):
    pass


@dataclass
class SlurmCluster:
    root: Path
    node: str = NODE
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)

    @property
    def conf(self) -> Path:
        return self.root / "slurm.conf"

    @property
    def env(self) -> dict[str, str]:
        return {**os.environ, "SLURM_CONF": str(self.conf)}

    def scontrol(self, *args: str) -> str:
        done = subprocess.run(
            [_which("scontrol"), *args], env=self.env, capture_output=True, text=True, timeout=20
        )
        if done.returncode != 0:
            raise RuntimeError(f"scontrol {' '.join(args)}: {done.stderr.strip() or done.stdout.strip()}")
        return done.stdout

    def node_fields(self) -> dict[str, str]:
        from service.schedsync.slurm import parse_fields

        return parse_fields(self.scontrol("--oneliner", "show", "node", self.node).strip())

    def logs(self) -> str:
        parts = []
        for name in ("munged.log", "slurmctld.log", "slurmd.log"):
            p = self.root / "log" / name
            if p.exists():
                parts.append(f"--- {name}\n" + "\n".join(p.read_text(errors="replace").splitlines()[-20:]))
        return "\n".join(parts)

    def start(self, timeout: float = 30.0) -> None:
        user = getpass.getuser()
        munge_dir, log_dir = self.root / "munge", self.root / "log"
        for d in ("munge", "log", "state", "spool"):
            (self.root / d).mkdir()
        munge_dir.chmod(0o755)
        key = self.root / "munge.key"
        subprocess.run([_which("mungekey"), "--create", "--keyfile", str(key)], check=True, timeout=20)
        key.chmod(0o600)
        sock = munge_dir / "munge.socket"
        self._spawn(
            "munged", "--foreground", "--force", f"--socket={sock}", f"--key-file={key}",
            f"--log-file={log_dir / 'munged.log'}", f"--pid-file={munge_dir / 'munged.pid'}",
            f"--seed-file={self.root / 'munged.seed'}",
        )  # fmt: skip
        self._wait(lambda: sock.exists(), timeout, "munged socket")
        ctld_port, slurmd_port = _free_port(), _free_port()
        host = socket.gethostname().split(".")[0]
        self.conf.write_text(
            f"""ClusterName=graywiretest
SlurmctldHost={host}(127.0.0.1)
SlurmctldPort={ctld_port}
SlurmdPort={slurmd_port}
SlurmUser={user}
SlurmdUser={user}
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={sock}
StateSaveLocation={self.root / "state"}
SlurmdSpoolDir={self.root / "spool"}
SlurmctldPidFile={self.root / "slurmctld.pid"}
SlurmdPidFile={self.root / "slurmd.pid"}
SlurmctldLogFile={log_dir / "slurmctld.log"}
SlurmdLogFile={log_dir / "slurmd.log"}
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SchedulerType=sched/builtin
SelectType=select/linear
MpiDefault=none
ReturnToService=2
NodeName={self.node} NodeHostname={host} NodeAddr=127.0.0.1 CPUs=1 State=UNKNOWN
PartitionName=debug Nodes={self.node} Default=YES MaxTime=INFINITE State=UP
"""
        )
        self._spawn("slurmctld", "-D", "-f", str(self.conf))
        self._wait(lambda: self._ok("ping"), timeout, "slurmctld to answer scontrol ping")
        self._spawn("slurmd", "-D", "-N", self.node, "-f", str(self.conf))
        self._wait(self._node_idle, timeout, f"node {self.node} to register as IDLE")

    def _spawn(self, name: str, *args: str) -> None:
        out = (self.root / "log" / f"{name}.out").open("wb")
        self.procs.append(
            subprocess.Popen([_which(name), *args], stdout=out, stderr=subprocess.STDOUT, env=self.env)
        )

    def _ok(self, *args: str) -> bool:
        try:
            self.scontrol(*args)
        except (RuntimeError, subprocess.TimeoutExpired):
            return False
        return True

    def _node_idle(self) -> bool:
        try:
            state = self.node_fields().get("State", "")
        except (RuntimeError, subprocess.TimeoutExpired):
            return False
        return state == "IDLE"

    def _wait(self, ready: Callable[[], bool], timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for p in self.procs:
                if p.poll() is not None:
                    raise SlurmStartError(f"{p.args[0]} exited with {p.returncode}\n{self.logs()}")
            if ready():
                return
            time.sleep(0.1)
        raise SlurmStartError(f"timed out after {timeout:.0f} s waiting for {what}\n{self.logs()}")

    def wait_for_state(
        self, predicate: Callable[[dict[str, str]], bool], timeout: float = 15.0
    ) -> dict[str, str]:
        """Poll the node until ``predicate(fields)`` holds (Slurm applies some changes asynchronously)."""
        deadline = time.monotonic() + timeout
        fields = self.node_fields()
        while not predicate(fields):
            if time.monotonic() > deadline:
                raise AssertionError(f"node never reached the expected state: {fields}")
            time.sleep(0.1)
            fields = self.node_fields()
        return fields

    def stop(self) -> None:
        for p in reversed(self.procs):
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in reversed(self.procs):
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(timeout=5)
        self.procs.clear()


def start_cluster() -> SlurmCluster:
    cluster = SlurmCluster(Path(tempfile.mkdtemp(prefix="gw-slurm-")))  # short path: socket limit
    try:
        cluster.start()
    except BaseException:
        cluster.stop()
        raise
    return cluster


def remove_cluster(cluster: SlurmCluster) -> None:
    cluster.stop()
    shutil.rmtree(cluster.root, ignore_errors=True)
