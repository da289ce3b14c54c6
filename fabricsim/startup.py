"""Start-up: jobs that restart and initialize NCCL, with slow inits and ranks stuck in bootstrap.

On when a fault spec names a start-up kind (``STARTUP_KINDS``, ``STARTUP_BENIGN_KINDS`` in
faults.py); ``default`` leaves it off. A fleet of training jobs, one per block of hosts of
1, 2, 4, 8 and 16 hosts (8 GPUs, 8 ranks each), restarts every few minutes, as jobs do after
a failure or a checkpoint-restart. Each launch initializes its world communicator; the plan
lists, per rank, when it reaches each init step (``Init START``, bootstrap done, topology
detected, connecting, ``Init COMPLETE``) and NCCL's ``Init timings`` phases, which
:class:`graywire.fabricsim.nccl_writer.InitLogWriter` writes as NCCL_DEBUG=INFO lines.

The model (an assumption of fabricsim, stated in docs/phases/start-up.md): processes start over a
fraction of a second (the launcher); every rank waits in bootstrap for the last one; after it
the init takes ``0.4 s + 0.015 s * nranks^0.8`` (kernels and allocation, then the bootstrap
ring, allgathers and connections, which grow with size: about 2.6 s at 512 ranks, 4 minutes
at 10,000), times a lognormal spread of 8%.

Faults: ``nccl_init_slow`` multiplies a job's inits in its window by its magnitude;
``nccl_bootstrap_stall`` makes one rank of the job's first launch in its window stop: with
magnitude 0 it never logs ``Init START`` (and every other rank waits in bootstrap), with 1
it hangs after bootstrap (topology detection) while the others wait in the next allgather;
with 2 the world communicator comes up and the job's split of it (``ncclCommSplit``, no
``commId``) hangs on that rank's host: its ranks log the split's ``Init START`` and never its
``Init COMPLETE`` (NCCL's last init step is a barrier within each node), while every other
host's ranks complete it. The launch stays stuck until the fault ends (the job is killed) and
the job then restarts.
``big_job_init`` (benign) adds a job of every host, restarting through its window: its inits
are long and normal for its size.

Layout: every launch's lines say what each host's topology probe found (``Launch.layout``):
healthy, an 8-GPU NVSwitch host with a NIC per GPU (ring graph ``nChannels 16, type NVL/PIX``,
``P2P/CUMEM`` between local GPUs, ``NET/IB/<n>/GDRDMA``, NVLS available).
``nccl_topology_mismatch`` gives one host of a multi-host job, in its window, a wrong probe:
magnitude 0, the probe missed NVLink peer access (``SHM/direct`` between local GPUs, ring graph
``nChannels 4, type SYS/...``, no NVLS); 1, its NICs seen across the CPU interconnect (network
type ``SYS``, no GPUDirect RDMA). As in NCCL (``src/init.cc``), the communicator then agrees on
the fewest channels, so every host of the job prints the cut ``coll channels``.
``topology_layout_shared`` (benign) gives every host, through its window, magnitude 0's layout:
a fleet of such hosts, where peers agree.
"""

from __future__ import annotations

import bisect
import hashlib
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

import numpy as np

from graywire.collectors.model import Fabric

if TYPE_CHECKING:
    from graywire.fabricsim.faults import Fault

BLOCK_HOSTS = (1, 2, 4, 8, 16)
BIG_JOB = "train-big"
RESTART_PERIOD_S = 150.0
#: Steps a rank reaches in order (collectors/nccl/debug_log.py INIT_STAGES).
START, BOOTSTRAP, TOPOLOGY, CONNECT, COMPLETE = range(5)


def host_names(fabric: Fabric) -> list[str]:
    return [n for n, r in zip(fabric.node_names, fabric.node_roles, strict=True) if r == "host"]


def startup_jobs(hosts: list[str]) -> dict[str, list[str]]:
    """The fleet: contiguous blocks of 1, 2, 4, 8, 16 hosts, over and over, as far as hosts go."""
    jobs: dict[str, list[str]] = {}
    i = 0
    while i < len(hosts):
        size = BLOCK_HOSTS[len(jobs) % len(BLOCK_HOSTS)]
        jobs[f"train-{len(jobs):02d}"] = hosts[i : i + size]
        i += size
    return jobs


def init_model_s(nranks: int) -> float:
    """Init time after the last rank arrived, without noise (see the module docstring)."""
    return 0.4 + 0.015 * nranks**0.8


def place_startup(
    f: Fault, target: str | None, fabric: Fabric, used: set[int], gpus: int, rng: np.random.Generator
) -> Fault:
    """Draw (or read from ``target``) the job, and for a stall the host and GPU of the stuck rank.

    Targets: ``JOB`` for ``nccl_init_slow``; ``HOST[/GPU]`` for ``nccl_bootstrap_stall``. Drawn,
    a job whose hosts no other fault uses: 8 hosts or more for a slow init (its inits take
    seconds), 2 or more for a stall (the others wait for the stuck rank).
    """
    hosts = host_names(fabric)
    jobs = startup_jobs(hosts)
    if f.kind == "big_job_init":
        return replace(f, job=BIG_JOB)
    if f.kind == "topology_layout_shared":
        return replace(f, node="*")
    nic_of = {h: np.flatnonzero(fabric.host_port & (fabric.node_of_port == fabric.node_names.index(h)))
              for h in hosts}  # fmt: skip
    gpu = None
    if target:
        host, _, gpu_s = target.partition("/")
        if f.kind == "nccl_init_slow":
            if target not in jobs:
                raise ValueError(f"{f.kind}: unknown start-up job {target!r}; jobs: {', '.join(jobs)}")
            job = target
        else:
            job = next((j for j, hs in jobs.items() if host in hs), "")
            if not job:
                raise ValueError(f"{f.kind}: {host!r} is not a host")
            gpu = int(gpu_s.removeprefix("mlx5_")) if gpu_s else None
            if gpu is not None and not 0 <= gpu < gpus:
                raise ValueError(f"{f.kind}: {target!r} names GPU {gpu}, hosts have {gpus}")
    else:
        least = 8 if f.kind == "nccl_init_slow" else 2
        free = [
            j
            for j, hs in jobs.items()
            if len(hs) >= least and not any(set(nic_of[h].tolist()) & used for h in hs)
        ]
        if not free:
            raise ValueError("fabric too small for that many start-up faults")
        job = free[int(rng.integers(len(free)))]
        host = jobs[job][int(rng.integers(len(jobs[job])))]
    for h in jobs[job]:
        used.update(nic_of[h].tolist())
    if f.kind == "nccl_init_slow":
        return replace(f, job=job)
    if f.kind == "nccl_topology_mismatch":
        if f.magnitude not in (0.0, 1.0):
            raise ValueError(f"{f.kind}: magnitude 0 (P2P missed) or 1 (cross-NUMA NET), not {f.magnitude:g}")
        return replace(f, job=job, node=host, port=None)
    if f.magnitude not in (0.0, 1.0, 2.0):
        raise ValueError(
            f"{f.kind}: magnitude 0 (never starts), 1 (hangs after bootstrap) or 2 (its host hangs in the "
            f"split), not {f.magnitude:g}"
        )
    if gpu is None:
        gpu = int(rng.integers(gpus))
    rank = jobs[job].index(host) * gpus + gpu
    return replace(f, job=job, node=host, rank=rank, port=None)


@dataclass
class Launch:
    """One start of one job: its world communicator and its ranks' processes."""

    job: str
    index: int
    hosts: list[str]
    gpus: int
    start_s: float
    pid_base: int
    comm_id: int = 0
    #: Host -> what its topology probe got wrong (0 P2P/NVLink missed, 1 cross-NUMA NET); absent: right.
    layout: dict[str, int] = field(default_factory=dict)

    @property
    def nranks(self) -> int:
        return len(self.hosts) * self.gpus

    @property
    def name(self) -> str:
        return f"{self.job}-{self.index:03d}"


@dataclass(frozen=True, slots=True)
class InitEvent:
    """Rank ``rank`` of ``launch`` reached ``step`` at ``time_s``; COMPLETE carries its timings."""

    time_s: float
    launch: Launch
    rank: int
    step: int
    timings: dict[str, float] | None = None
    #: At COMPLETE: the rank then starts the job's split and never completes it (a stall, 2).
    split_hangs: bool = False


@dataclass
class StartupPlan:
    """Every launch of the run and the init events of its ranks, in time order."""

    hosts: list[str]
    gpus: int
    duration_s: float
    faults: list[Any]
    seed: int
    launches: list[Launch] = field(default_factory=list)
    events: list[InitEvent] = field(default_factory=list)

    def __post_init__(self) -> None:
        rng = np.random.default_rng(np.random.SeedSequence(self.seed, spawn_key=(0x5354,)))
        jobs = startup_jobs(self.hosts)
        windows: dict[str, tuple[float, float]] = {}
        for fl in self.faults:
            if fl.kind == "big_job_init":
                jobs[BIG_JOB] = list(self.hosts)
                windows[BIG_JOB] = (fl.start_s, fl.end_s)
        pid = 100_000
        for job, hosts in jobs.items():
            lo, hi = windows.get(job, (0.0, self.duration_s))
            t = lo + float(rng.uniform(0, RESTART_PERIOD_S))
            stalls = [fl for fl in self.faults if fl.kind == "nccl_bootstrap_stall" and fl.job == job]
            while t < min(hi, self.duration_s):
                la = Launch(job, len([x for x in self.launches if x.job == job]), hosts, self.gpus, t, pid)
                la.comm_id = int.from_bytes(
                    hashlib.blake2b(f"{self.seed}:{la.name}".encode(), digest_size=8).digest()
                )
                la.layout = self._layout(hosts, t)
                pid += la.nranks
                self.launches.append(la)
                stall = next((fl for fl in stalls if fl.start_s <= t < fl.end_s), None)
                if stall is not None:
                    stalls.remove(stall)
                    if int(stall.magnitude) == 2:
                        first = int(stall.rank) // self.gpus * self.gpus  # the stuck rank's host
                        self._normal(la, 1.0, rng, split_hangs=range(first, first + self.gpus))
                    else:
                        self._stuck(la, int(stall.rank), int(stall.magnitude), rng)
                    t = stall.end_s + float(rng.uniform(10, 30))
                    continue
                slow = np.prod([f.magnitude for f in self._slow_faults(job) if f.active(t)])
                end = self._normal(la, float(slow), rng)
                t = end + RESTART_PERIOD_S * float(rng.uniform(0.8, 1.2))
        self.events.sort(key=lambda e: e.time_s)
        self._times = [e.time_s for e in self.events]

    def _layout(self, hosts: list[str], t: float) -> dict[str, int]:
        """Per host of a launch at ``t``, what its probe gets wrong (fabricsim's layout faults)."""
        out: dict[str, int] = {}
        for fl in self.faults:
            if fl.kind == "topology_layout_shared" and fl.active(t):
                out.update(dict.fromkeys(hosts, 0))
            elif fl.kind == "nccl_topology_mismatch" and fl.active(t) and fl.node in hosts:
                out[fl.node] = int(fl.magnitude)
        return out

    def _slow_faults(self, job: str) -> list[Any]:
        return [f for f in self.faults if f.kind == "nccl_init_slow" and f.job == job]

    def _offsets(self, la: Launch, rng: np.random.Generator) -> np.ndarray:
        return rng.uniform(0, 0.2 + 0.005 * len(la.hosts), la.nranks)

    def _normal(
        self, la: Launch, slow: float, rng: np.random.Generator, split_hangs: range = range(0)
    ) -> float:
        n = la.nranks
        off = self._offsets(la, rng)
        last = float(off.max())
        base = init_model_s(n) * float(np.exp(rng.normal(0, 0.08))) * slow
        done = last + base + rng.uniform(0, 0.02, n)  # ranks leave the final barrier together
        t0 = la.start_s
        for r in range(n):
            wait = last - off[r]
            boot = wait + 0.1 * base
            timings = {
                "total": float(done[r] - off[r]), "kernels": min(0.28, 0.2 * base), "alloc": 0.03,
                "bootstrap": boot, "allgathers": 0.1 * base, "topo": 0.1 * base, "graphs": 0.05 * base,
            }  # fmt: skip
            timings["connections"] = max(
                0.0, timings["total"] - sum(v for k, v in timings.items() if k != "total")
            )
            timings["rest"] = 0.0
            self.events += [
                InitEvent(t0 + off[r], la, r, START),
                InitEvent(t0 + last + 0.1 * base, la, r, BOOTSTRAP),
                InitEvent(t0 + last + 0.3 * base, la, r, TOPOLOGY),
                InitEvent(t0 + last + 0.4 * base, la, r, CONNECT),
                InitEvent(t0 + float(done[r]), la, r, COMPLETE, timings, r in split_hangs),
            ]
        return t0 + float(done.max())

    def _stuck(self, la: Launch, stuck: int, stops_after: int, rng: np.random.Generator) -> None:
        """Every rank waits on ``stuck``: before bootstrap (0) or in the allgather after topology (1)."""
        off = self._offsets(la, rng)
        base = init_model_s(la.nranks)
        last = float(off.max())
        for r in range(la.nranks):
            t = la.start_s + off[r]
            if r == stuck:
                if stops_after >= 1:
                    self.events += [
                        InitEvent(t, la, r, START),
                        InitEvent(la.start_s + last + 0.1 * base, la, r, BOOTSTRAP),
                    ]
                continue
            self.events.append(InitEvent(t, la, r, START))
            if stops_after >= 1:
                self.events += [
                    InitEvent(la.start_s + last + 0.1 * base, la, r, BOOTSTRAP),
                    InitEvent(la.start_s + last + 0.3 * base, la, r, TOPOLOGY),
                ]

    def between(self, t0: float, t1: float) -> list[InitEvent]:
        """Events with ``t0 < time <= t1``."""
        return self.events[bisect.bisect_right(self._times, t0) : bisect.bisect_right(self._times, t1)]
