"""A real single-node Slurm on localhost: munged, slurmctld and slurmd from the Debian packages.

Everything lives in one temporary directory (munge key and socket, JWT key, slurm.conf, state,
spool, logs) on free ports, so it runs beside any other Slurm and leaves nothing behind.
Start-up takes about a second; readiness is polled, never slept for. slurmctld also accepts
JWTs (``AuthAltTypes=auth/jwt``), so :meth:`SlurmCluster.start_restd` can serve slurmrestd.
"""

from __future__ import annotations

import getpass
import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

BINARIES = ("munged", "mungekey", "slurmctld", "slurmd", "scontrol", "squeue", "sbatch", "scancel")
NODE = "gpu-0001"
#: The JWT identity slurmrestd serves: slurmrestd refuses tokens of root and of SlurmUser.
RESTD_USER = "nobody"


def missing_binaries() -> list[str]:
    """Binaries searched on PATH plus the sbin directories Debian installs daemons in."""
    path = os.pathsep.join([os.environ.get("PATH", ""), "/usr/sbin", "/sbin"])
    return [b for b in BINARIES if shutil.which(b, path=path) is None]


def _which(name: str) -> str:
    path = os.pathsep.join([os.environ.get("PATH", ""), "/usr/sbin", "/sbin"])
    found = shutil.which(name, path=path)
    assert found, name
    return found


def _listening(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1):
            return True
    except OSError:
        return False


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
        from graywire.service.schedsync.slurm import parse_fields

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
        jwt_key = self.root / "jwt.key"
        jwt_key.write_bytes(os.urandom(32))
        jwt_key.chmod(0o600)
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
AuthAltTypes=auth/jwt
AuthAltParameters=jwt_key={jwt_key}
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

    def _spawn(self, name: str, *args: str, env: dict[str, str] | None = None) -> None:
        out = (self.root / "log" / f"{name}.out").open("wb")
        self.procs.append(
            subprocess.Popen([_which(name), *args], stdout=out, stderr=subprocess.STDOUT, env=env or self.env)
        )

    def token(self, user: str = RESTD_USER, lifespan: int = 3600) -> str:
        """A JWT for ``user`` (``scontrol token``), as slurmrestd's callers send it."""
        out = self.scontrol("token", f"username={user}", f"lifespan={lifespan}").strip()
        return out.removeprefix("SLURM_JWT=")

    def start_restd(self, timeout: float = 30.0) -> tuple[str, str]:
        """slurmrestd on a free port, JWT auth: (its URL, the newest API version it serves).

        Only the plugins that need no slurmdbd are loaded. ``SLURM_JWT=daemon`` makes it pass
        callers' JWTs on; ``disable_user_check`` lets it run as root, which tests here are.
        """
        env = {**self.env, "SLURM_JWT": "daemon", "SLURMRESTD_SECURITY": "disable_user_check"}
        listed = subprocess.run(
            [_which("slurmrestd"), "-f", str(self.conf), "-s", "list"],
            env=env, capture_output=True, text=True, timeout=20,
        )  # fmt: skip
        versions = sorted(
            {m.group(1) for m in re.finditer(r"openapi/(v\d+\.\d+\.\d+)\b", listed.stdout + listed.stderr)},
            key=lambda v: tuple(int(x) for x in v[1:].split(".")),
        )
        if not versions:
            raise SlurmStartError(f"slurmrestd -s list named no openapi/vX.Y.Z plugin:\n{listed.stderr}")
        port = _free_port()
        self._spawn(
            "slurmrestd", "-f", str(self.conf), "-a", "rest_auth/jwt",
            "-s", ",".join(f"openapi/{v}" for v in versions), f"127.0.0.1:{port}", env=env,
        )  # fmt: skip
        self._wait(lambda: _listening(port), timeout, "slurmrestd to listen")
        return f"http://127.0.0.1:{port}", versions[-1]

    def submit(self, *args: str) -> str:
        """``sbatch --parsable`` with ``args``; the job id. Output goes nowhere."""
        done = subprocess.run(
            [_which("sbatch"), "--parsable", f"--chdir={self.root}", "--output=/dev/null", *args],
            env=self.env, capture_output=True, text=True, timeout=20,
        )  # fmt: skip
        if done.returncode != 0:
            raise RuntimeError(f"sbatch {' '.join(args)}: {done.stderr.strip()}")
        return done.stdout.strip().split(";")[0]

    def job_state(self, job: str) -> str:
        """The job's state as squeue shows it ("" once it has left the queue)."""
        done = subprocess.run(
            [_which("squeue"), "--noheader", f"--jobs={job}", "--format=%T"],
            env=self.env, capture_output=True, text=True, timeout=20,
        )  # fmt: skip
        return done.stdout.strip()

    def wait_for_job(self, job: str, predicate: Callable[[str], bool], timeout: float = 30.0) -> str:
        deadline = time.monotonic() + timeout
        state = self.job_state(job)
        while not predicate(state):
            if time.monotonic() > deadline:
                raise AssertionError(f"job {job} never reached the expected state: {state!r}\n{self.logs()}")
            time.sleep(0.1)
            state = self.job_state(job)
        return state

    def cancel(self, job: str) -> None:
        """Cancel ``job``; once the queue is empty, wait for the node to be free (the next test may
        drain it, and a node still completing a job would only be DRAINING)."""
        subprocess.run([_which("scancel"), job], env=self.env, capture_output=True, timeout=20, check=False)
        self.wait_for_job(job, lambda s: s in ("", "CANCELLED"))
        queue = subprocess.run(
            [_which("squeue"), "--noheader"], env=self.env, capture_output=True, text=True, timeout=20
        )
        if not queue.stdout.strip():
            self.wait_for_state(lambda f: f.get("State") in ("IDLE", "DRAINED", "DOWN"))

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
