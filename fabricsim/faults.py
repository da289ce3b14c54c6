"""Faults the simulator injects, their ground truth, and the ``--faults`` spec language.

Spec: a comma-separated list of ``KIND[@START][+DURATION][=MAGNITUDE][:TARGET]``, for example
``speed_downgrade@10m+20m:gpu-0003/mlx5_2,slow_channel@5m+30m=0.3``. Times take s/m/h suffixes.
A missing target is drawn from the fabric with the run's seed. ``default`` expands to one of
every fault and benign event spread over the run; ``none`` is no faults.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field, replace
from typing import Any

import numpy as np
import pyarrow as pa

from graywire.collectors.keys import split_port_key
from graywire.collectors.model import Fabric
from graywire.collectors.units import parse_duration
from graywire.fabricsim.startup import place_startup

#: Faults that are real gray failures, and the detector finding kinds that count as catching them.
FAULT_KINDS: dict[str, tuple[str, ...]] = {
    "speed_downgrade": ("speed_downgrade",),
    "width_downgrade": ("width_downgrade",),
    "ber_ramp": ("ber_degradation",),
    "pfc_storm": ("pfc_storm",),
    "ecn_hotspot": ("ecn_hotspot",),
    "credit_starvation": ("xmit_wait_hotspot",),
    "link_flap": ("link_flap",),
    "slow_channel": ("nccl_channel_slow",),
    "slow_nic": ("nccl_channel_slow",),
    "straggler": ("nccl_straggler",),
    "nccl_slow_path": ("nccl_path_slow",),
    "job_slowdown": ("nccl_job_slowdown",),
    "nccl_transport_fallback": ("nccl_transport_fallback",),
    "nccl_gdrdma_missing": ("nccl_gdrdma_missing",),
    "slow_hop": ("nccl_hop_slow",),
    "cable_moved": ("cabling_changed",),
    "cable_missing": ("link_missing",),
    "rail_miscabled": ("rail_miscabled",),
    "nic_cross_numa": ("gpu_nic_affinity",),
    "checkpoint_on_compute": ("checkpoint_on_compute",),
    "ecmp_polarization": ("uplink_imbalance",),
    # Start-up (fabricsim/startup.py): not in `default`, scored by the start-up scenarios.
    "nccl_init_slow": ("nccl_init_slow",),
    "nccl_bootstrap_stall": ("nccl_bootstrap_stall",),
    # The fault path (fabricsim/ras.py): not in `default`, scored by the fault-path scenarios.
    "rank_dead": ("nccl_rank_dead",),
    "nccl_topology_mismatch": ("nccl_topology_mismatch",),
}
#: Events that happen on healthy fabrics and must not raise a finding.
BENIGN_KINDS = (
    "counter_reset", "counter_wrap", "short_retrain", "collector_outage", "checkpoint_burst", "slow_step",
    "nic_layout_shared", "driver_reload",
)  # fmt: skip
#: NCCL faults that change how a host's ranks are wired (what NCCL_DEBUG lines show).
TRANSPORT_KINDS = ("nccl_transport_fallback", "nccl_gdrdma_missing")
#: Faults that change the cabling (what the sources' ``link`` views and port states show). Not in
#: ``default``: its spread of the other kinds stays as it was; name them to inject them.
CABLING_KINDS = ("cable_moved", "cable_missing", "rail_miscabled")
#: Where the GPUs and NICs sit in each host (``gpu_nic_path`` views, fabricsim/gpu_layout.py): a
#: NIC moved to the other socket, and its benign twin, a host model wired otherwise on every host.
#: Not in ``default`` either; the simulator sends layout views only when one of them is named.
DATAPATH_KINDS = ("nic_cross_numa",)
DATAPATH_BENIGN_KINDS = ("nic_layout_shared",)
#: Checkpoint traffic and multipath faults (docs/phases): kept out of ``default`` as the cabling
#: kinds are, and scored in scenarios of their own (a checkpoint on the compute rails needs a
#: fabric with storage NICs, ``TopologySpec.storage_nics``).
PHASE_KINDS = ("checkpoint_on_compute", "ecmp_polarization")
#: A checkpoint's burst within each period (seconds): what a synchronous save of a large model
#: to a parallel file system takes.
CHECKPOINT_BURST_S = 60.0
#: Start-up faults and their benign twin (fabricsim/startup.py): jobs that restart and
#: initialize NCCL communicators, written as NCCL_DEBUG init lines. Not in ``default``; a spec
#: naming any of them turns the start-up simulation on. ``big_job_init``: a job far larger than
#: the rest restarts in the window; its long inits are normal for its size.
STARTUP_KINDS = ("nccl_init_slow", "nccl_bootstrap_stall", "nccl_topology_mismatch")
STARTUP_BENIGN_KINDS = ("big_job_init", "topology_layout_shared")
#: The fault path (fabricsim/ras.py): a host NIC's link fails for good and the rank on it dies
#: (``rank_dead``); its benign twin, a job whose ranks finalize and leave (``job_end``). Not in
#: ``default``; a spec naming either turns on NCCL RAS reports of every job.
FAULT_PATH_KINDS = ("rank_dead",)
FAULT_PATH_BENIGN_KINDS = ("job_end",)
#: What only a spec naming it injects (never ``default``): each phase's kinds, scored in
#: scenarios of their own beside their benign twins (evaluation/suite.py).
NAMED_ONLY_KINDS = frozenset(
    {*CABLING_KINDS, *DATAPATH_KINDS, *PHASE_KINDS, *STARTUP_KINDS, *FAULT_PATH_KINDS}
)
NAMED_ONLY_BENIGN_KINDS = frozenset({*DATAPATH_BENIGN_KINDS, *STARTUP_BENIGN_KINDS, *FAULT_PATH_BENIGN_KINDS})
OWN_STREAM_KINDS = frozenset(
    {
        *CABLING_KINDS,
        "nccl_slow_path",
        "job_slowdown",
        "slow_step",
        "credit_starvation",
        "straggler",
        "slow_hop",
        *TRANSPORT_KINDS,
        *DATAPATH_KINDS,
        *DATAPATH_BENIGN_KINDS,
        *PHASE_KINDS,
        *STARTUP_KINDS,
        *STARTUP_BENIGN_KINDS,
        *FAULT_PATH_KINDS,
        *FAULT_PATH_BENIGN_KINDS,
    }
)
#: Jobs the NCCL profiler plugin runs in (the first ones): fabricsim's ``nccl_proxy`` rows come
#: from these, so a ``slow_hop`` is drawn in one of them.
PROFILED_JOBS = 2

DEFAULT_MAGNITUDE = {
    "speed_downgrade": 0.5,  # negotiated speed as a fraction of expected (800G -> 400G)
    "width_downgrade": 0.5,  # lanes as a fraction of expected (4x -> 2x)
    "ber_ramp": 10.0,  # final pre-FEC BER as a multiple of the field "Error" threshold
    "pfc_storm": 1.0,  # share of the interval the NIC holds its rail paused
    "ecn_hotspot": 200.0,  # ECN mark rate as a multiple of the healthy rate
    "credit_starvation": 0.3,  # share of the interval the leaf port waits for the NIC's credits
    "link_flap": 4.0,  # number of flaps in the window
    "slow_channel": 0.3,  # extra duration on one (rank, channel): 30% slower
    "slow_nic": 0.2,  # extra duration on every channel of one rank (its NIC's hops)
    "straggler": 0.1,  # one rank enters every collective this share of its duration late
    "nccl_slow_path": 0.3,  # extra duration on one channel of every rank behind one leaf
    "job_slowdown": 0.2,  # extra duration on every rank of one job (step-time shift)
    "nccl_transport_fallback": 0.5,  # a host's ranks on NET/Socket: this much slower
    "nccl_gdrdma_missing": 0.1,  # a host's ranks on NET/IB without GPUDirect RDMA
    "slow_hop": 0.5,  # one ring hop (sender NIC -> receiver NIC) this much slower on the wire
    "slow_step": 1.0,  # one poll of one job this much slower (a checkpoint step)
    "cable_moved": 20.0,  # seconds the cable is out before it is plugged into its new port
    "cable_missing": 0.0,
    "rail_miscabled": 0.0,
    "nic_cross_numa": 0.0,
    "nccl_topology_mismatch": 0.0,  # 0: the probe missed P2P (SHM, fewer channels); 1: cross-NUMA NET
    "topology_layout_shared": 0.0,
    "nic_layout_shared": 0.0,  # 0: every NIC on its GPU's socket off the CPU (NODE); 1: the other socket
    "counter_reset": 0.0,
    # A host's NIC driver reloaded: every counter of its NICs starts again near 0 in one sample.
    # Its FEC corrected-bit counters stood, before it, below 2^31 (0), between 2^31 and 2^32
    # (1: what a reading as a 32-bit wrap turned into a false BER) or above 2^32 (2).
    "driver_reload": 1.0,
    "counter_wrap": 0.0,
    "short_retrain": 20.0,  # seconds the link is down
    "collector_outage": 0.0,
    "checkpoint_burst": 1.0,
    "checkpoint_on_compute": 300.0,  # seconds between checkpoints, each bursting CHECKPOINT_BURST_S
    "ecmp_polarization": 0.25,  # share of a leaf's uplinks its upward traffic hashes onto
    "nccl_init_slow": 3.0,  # the job's inits take this many times as long (bootstrap and set-up)
    # The init step the stuck rank stops at: 0 never starts, 1 after bootstrap, 2 its host in the split.
    "nccl_bootstrap_stall": 0.0,
    "big_job_init": 0.0,
    "rank_dead": 0.0,
    "job_end": 0.0,
}

#: What `graywire fakes` injects unless told otherwise: one silent downgrade, one slow channel.
LIVE_DEFAULT_FAULTS = "speed_downgrade@1m+1h:gpu-0003/mlx5_2,slow_channel@90s+1h=0.3"

_ITEM = re.compile(
    r"^(?P<kind>[a-z_]+)(?:@(?P<start>[\d.]+[smhd]?))?(?:\+(?P<dur>[\d.]+[smhd]?))?"
    r"(?:=(?P<mag>[\d.eE+-]+))?(?::(?P<target>\S+))?$"
)


@dataclass(frozen=True, slots=True)
class Fault:
    """One injected event with its ground truth location.

    ``port`` is a port key (for link faults, the host-side end; ``peer`` is the other end);
    ``node`` is the node to blame; NCCL faults also name ``job``, ``rank`` and ``channel``.
    """

    id: str
    kind: str
    start_s: float
    end_s: float
    magnitude: float
    port: str | None = None
    peer: str | None = None
    node: str | None = None
    job: str | None = None
    rank: int | None = None
    channel: int | None = None
    benign: bool = False
    extra: dict[str, Any] = field(default_factory=dict)

    def active(self, t: float) -> bool:
        return self.start_s <= t < self.end_s

    def to_json(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if v is not None and v != {}}


@dataclass(frozen=True, slots=True)
class FaultRequest:
    """A parsed spec item before a target has been drawn."""

    kind: str
    start_s: float | None
    duration_s: float | None
    magnitude: float | None
    target: str | None


def parse_spec(spec: str) -> list[FaultRequest]:
    spec = spec.strip()
    if spec in ("", "none"):
        return []
    out = []
    for item in spec.split(","):
        item = item.strip()
        if item == "default":
            out.append(FaultRequest("default", None, None, None, None))
            continue
        m = _ITEM.match(item)
        if not m:
            raise ValueError(f"bad fault spec item {item!r}: use KIND[@START][+DURATION][=MAG][:TARGET]")
        kind = m.group("kind")
        benign_kinds = (*BENIGN_KINDS, *STARTUP_BENIGN_KINDS, *FAULT_PATH_BENIGN_KINDS)
        if kind not in FAULT_KINDS and kind not in benign_kinds:
            known = ", ".join([*FAULT_KINDS, *benign_kinds])
            raise ValueError(f"unknown fault kind {kind!r}; known: {known}")
        out.append(
            FaultRequest(
                kind,
                parse_duration(m.group("start")) if m.group("start") else None,
                parse_duration(m.group("dur")) if m.group("dur") else None,
                float(m.group("mag")) if m.group("mag") else None,
                m.group("target"),
            )
        )
    return out


def default_requests(duration_s: float) -> list[FaultRequest]:
    """One of every fault and benign event, spread over the run without overlapping in time."""
    kinds = [
        "speed_downgrade", "counter_reset", "slow_channel", "width_downgrade", "short_retrain",
        "ber_ramp", "counter_wrap", "pfc_storm", "checkpoint_burst", "slow_nic", "collector_outage",
        "ecn_hotspot", "link_flap", "nccl_slow_path", "slow_step", "nccl_transport_fallback",
        "nccl_gdrdma_missing", "credit_starvation", "straggler", "job_slowdown", "slow_hop", "driver_reload",
    ]  # fmt: skip
    slot = duration_s / len(kinds)
    reqs = []
    for i, k in enumerate(kinds):
        start = i * slot + 0.1 * slot
        dur = {
            "short_retrain": 20.0,
            "counter_reset": slot * 0.5,
            "driver_reload": slot * 0.5,
            "counter_wrap": slot * 0.8,
            "collector_outage": min(120.0, slot * 0.5),
            "checkpoint_burst": min(120.0, slot * 0.5),
            "slow_step": 1.0,
            # A step-time shift is judged over minutes: it lasts long enough to be one.
            "job_slowdown": max(slot * 0.7, 600.0),
        }.get(k, slot * 0.7)
        if k == "job_slowdown":
            start = min(start, max(0.0, duration_s - dur - slot * 0.1))
        reqs.append(FaultRequest(k, start, dur, None, None))
    return reqs


def resolve_faults(
    requests: list[FaultRequest],
    fabric: Fabric,
    duration_s: float,
    interval_s: float,
    jobs: dict[str, list[int]],
    gpus: int,
    channels: int,
    rng: np.random.Generator,
) -> list[Fault]:
    """Draw targets and times for the requests; targets of real faults do not overlap."""
    expanded: list[FaultRequest] = []
    for r in requests:
        expanded.extend(default_requests(duration_s) if r.kind == "default" else [r])
    host_nics = np.flatnonzero(fabric.host_port)
    if fabric.purpose:  # faults of the compute rails are drawn on compute NICs
        host_nics = host_nics[[fabric.purpose[i] in (None, "compute") for i in host_nics.tolist()]]
    used: set[int] = set()
    faults: list[Fault] = []
    # The NCCL path, job, transport and credit faults draw from their own stream, so adding them
    # to a spec leaves every other fault's target, and the simulated fabric, as they were.
    seq = getattr(rng.bit_generator, "seed_seq", None)
    own = np.random.default_rng(np.random.SeedSequence(seq.entropy, spawn_key=(0x4E43,))) if seq else rng
    base_rng = rng
    for i, r in enumerate(expanded):
        rng = own if r.kind in OWN_STREAM_KINDS else base_rng
        start = r.start_s if r.start_s is not None else float(rng.uniform(0.1, 0.5) * duration_s)
        dur = r.duration_s if r.duration_s is not None else max(10 * interval_s, 0.3 * duration_s)
        if r.kind in (*DATAPATH_KINDS, *DATAPATH_BENIGN_KINDS):
            # Built so: from boot unless the spec says when (a NIC moved at a maintenance reboot).
            start = r.start_s if r.start_s is not None else 0.0
            dur = r.duration_s if r.duration_s is not None else duration_s - start
        if r.kind in (*FAULT_PATH_KINDS, *FAULT_PATH_BENIGN_KINDS) and r.duration_s is None:
            dur = duration_s - start  # a failed link, and a job that ended, stay so
        if r.kind == "rail_miscabled":
            # Cabled so from the start: the spec's start is ignored; it lasts the run unless told.
            start, dur = 0.0, r.duration_s if r.duration_s is not None else duration_s
        if r.kind == "short_retrain":
            # The magnitude is the outage length; `+D` alone says the same thing.
            mag = r.magnitude if r.magnitude is not None else (r.duration_s or DEFAULT_MAGNITUDE[r.kind])
            if not 0 < mag < 30:
                raise ValueError(f"short_retrain lasts under 30 s, not {mag:g} s (use link_flap for longer)")
            dur = mag
        else:
            mag = r.magnitude if r.magnitude is not None else DEFAULT_MAGNITUDE[r.kind]
            if r.kind == "credit_starvation" and not 0 < mag <= 1:
                raise ValueError(f"credit_starvation is a share of the interval in (0, 1], not {mag:g}")
            if r.kind == "ecmp_polarization" and not 0 < mag < 1:
                raise ValueError(f"ecmp_polarization is a share of the uplinks in (0, 1), not {mag:g}")
            if r.kind == "checkpoint_on_compute" and mag < 2 * CHECKPOINT_BURST_S:
                raise ValueError(
                    f"checkpoint_on_compute's magnitude is its period, at least "
                    f"{2 * CHECKPOINT_BURST_S:g} s, not {mag:g}"
                )
        f = Fault(id=f"f{i:03d}", kind=r.kind, start_s=start, end_s=start + dur, magnitude=mag,
                  benign=r.kind in (*BENIGN_KINDS, *STARTUP_BENIGN_KINDS, *FAULT_PATH_BENIGN_KINDS),
                  )  # fmt: skip
        placed = _place(f, r.target, fabric, host_nics, used, jobs, gpus, channels, rng)
        if placed.kind == "pfc_storm" and placed.peer:
            # Its leaf pauses every port that feeds it: what is reported there is this storm.
            placed = replace(placed, extra={"spreads_to": split_port_key(placed.peer)[0]})
        faults.append(placed)
    return faults


def _place_path(
    f: Fault,
    target: str | None,
    fabric: Fabric,
    used: set[int],
    jobs: dict[str, list[int]],
    channels: int,
    rng: np.random.Generator,
) -> Fault:
    """A slow leaf (or its uplinks): one channel of every rank whose NIC hangs off it.

    Target ``LEAF[:CHANNEL]``; drawn, a leaf of a job whose NICs no other fault uses.
    """
    host_nics = np.flatnonzero(fabric.host_port)
    leaf_of = {int(i): fabric.node_of(int(fabric.peer[i])) for i in host_nics.tolist() if fabric.peer[i] >= 0}
    by_leaf: dict[str, list[int]] = {}
    for nic, leaf in leaf_of.items():
        by_leaf.setdefault(leaf, []).append(nic)
    if target:
        leaf, _, ch_s = target.partition(":")
        if leaf not in by_leaf:
            raise ValueError(f"{f.kind}: {leaf!r} is not a leaf with hosts")
        ch = int(ch_s) if ch_s else int(rng.integers(channels))
        if not 0 <= ch < channels:
            raise ValueError(f"{f.kind}: {target!r} names channel {ch}, ranks have {channels} channels")
    else:
        free = [lf for lf in sorted(by_leaf) if not any(n in used for n in by_leaf[lf])]
        if not free:
            raise ValueError("fabric too small for that many faults")
        leaf = free[int(rng.integers(len(free)))]
        ch = int(rng.integers(channels))
    nics = by_leaf[leaf]
    for n in nics:
        used.update((n, int(fabric.peer[n])))
    hosts = sorted({fabric.node_of(n) for n in nics})
    host_ids = {fabric.node_names.index(h) for h in hosts}
    job = next((j for j, hs in jobs.items() if host_ids & set(hs)), None)
    if job is None:
        raise ValueError(f"{f.kind}: no job runs behind {leaf!r}")
    return replace(f, node=leaf, job=job, channel=ch, extra={"hosts": hosts})


def _pick_nic(host_nics: np.ndarray, used: set[int], rng: np.random.Generator, fabric: Fabric) -> int:
    free = [int(i) for i in rng.permutation(host_nics)[:64] if int(i) not in used]
    if not free:
        raise ValueError("fabric too small for that many faults")
    idx = free[0]
    used.add(idx)
    used.add(int(fabric.peer[idx]))
    return idx


def _place(
    f: Fault,
    target: str | None,
    fabric: Fabric,
    host_nics: np.ndarray,
    used: set[int],
    jobs: dict[str, list[int]],
    gpus: int,
    channels: int,
    rng: np.random.Generator,
) -> Fault:
    if f.kind in ("checkpoint_burst", *DATAPATH_BENIGN_KINDS):
        return replace(f, node="*")
    if f.kind in DATAPATH_KINDS:
        return _place_nic(f, target, fabric, host_nics, used, rng)
    if f.kind == "checkpoint_on_compute":
        if "storage" not in fabric.purpose:
            raise ValueError(f"{f.kind}: the fabric has no storage NICs (TopologySpec.storage_nics)")
        # Every host's checkpoint rides its compute NICs: the compute network is the place.
        return replace(f, node="*", extra={"network": "compute", "burst_s": CHECKPOINT_BURST_S})
    if f.kind == "ecmp_polarization":
        return _place_polarized(f, target, fabric, used, rng)
    if f.kind in ("job_slowdown", "slow_step"):
        job = target or str(rng.choice(list(jobs)))
        if job not in jobs:
            raise ValueError(f"{f.kind}: unknown job {job!r}; jobs: {', '.join(jobs)}")
        return replace(f, job=job)
    if f.kind == "nccl_slow_path":
        return _place_path(f, target, fabric, used, jobs, channels, rng)
    if f.kind == "slow_hop":
        return _place_hop(f, target, fabric, used, jobs, gpus, channels, rng)
    if f.kind in CABLING_KINDS:
        return _place_cable(f, target, fabric, host_nics, used, gpus, rng)
    if f.kind in FAULT_PATH_KINDS or f.kind in FAULT_PATH_BENIGN_KINDS:
        return _place_fault_path(f, target, fabric, host_nics, used, jobs, gpus, rng)
    if f.kind in STARTUP_KINDS or f.kind in STARTUP_BENIGN_KINDS:
        return place_startup(f, target, fabric, used, gpus, rng)
    if f.kind in TRANSPORT_KINDS:
        if target:
            if target not in fabric.node_names:
                raise ValueError(f"{f.kind}: unknown host {target!r}")
            host = target
        else:
            host = fabric.node_of(_pick_nic(host_nics, used, rng, fabric))
        h = fabric.node_names.index(host)
        for i in np.flatnonzero(fabric.host_port & (fabric.node_of_port == h)).tolist():
            used.update((i, int(fabric.peer[i])))
        job = next((j for j, hosts in jobs.items() if h in hosts), None)
        if job is None:
            raise ValueError(f"{f.kind}: host {host!r} runs no job")
        return replace(f, node=host, job=job)
    if f.kind in ("counter_reset", "collector_outage", "driver_reload"):
        if target:
            if target not in fabric.node_names:
                raise ValueError(f"{f.kind}: unknown node {target!r}")
            node = target
        else:
            roles = np.array(fabric.node_roles)
            pool = np.flatnonzero(roles == ("leaf" if f.kind == "collector_outage" else "host"))
            node = fabric.node_names[int(rng.choice(pool))]
        return replace(f, node=node)
    if f.kind in ("slow_channel", "slow_nic", "straggler"):
        if target:
            host, _, rest = target.partition("/")
            gpu_s, _, ch_s = rest.partition(":")
            gpu = int(gpu_s.removeprefix("mlx5_")) if gpu_s else 0
            ch = int(ch_s) if ch_s else int(rng.integers(channels))
            if not 0 <= gpu < gpus:
                raise ValueError(f"{f.kind}: {target!r} names GPU {gpu}, hosts have {gpus} (0..{gpus - 1})")
            if not 0 <= ch < channels:
                raise ValueError(f"{f.kind}: {target!r} names channel {ch}, ranks have {channels} channels")
        else:
            nic = _pick_nic(host_nics, used, rng, fabric)
            host = fabric.node_of(nic)
            gpu = int(fabric.rail[nic])
            ch = int(rng.integers(channels))
        for job, hosts in jobs.items():
            names = [fabric.node_names[h] for h in hosts]
            if host in names:
                rank = names.index(host) * gpus + gpu
                return replace(f, node=host, port=f"{host}/mlx5_{gpu}", job=job, rank=rank,
                               channel=ch if f.kind == "slow_channel" else None)  # fmt: skip
        raise ValueError(f"{f.kind}: host {host!r} runs no job")
    # Link / port faults: target a host NIC port (the link to its leaf).
    if target:
        idx_arr = fabric.lookup(pa.array([target]))
        idx = int(idx_arr[0])
        if idx < 0:
            raise ValueError(f"{f.kind}: unknown port {target!r}")
        used.update((idx, int(fabric.peer[idx])))
    else:
        idx = _pick_nic(host_nics, used, rng, fabric)
    peer = int(fabric.peer[idx])
    return replace(f, port=fabric.keys[idx], peer=fabric.keys[peer] if peer >= 0 else None,
                   node=fabric.node_of(idx))  # fmt: skip


def _place_hop(
    f: Fault,
    target: str | None,
    fabric: Fabric,
    used: set[int],
    jobs: dict[str, list[int]],
    gpus: int,
    channels: int,
    rng: np.random.Generator,
) -> Fault:
    """A slow hop: the ring connection from one rank's NIC to the next host's NIC on its rail.

    Target ``HOST/mlx5_G[:CHANNEL]`` names the sender; drawn, a sender in a profiled job whose
    NIC and receiver NIC no other fault uses. Without a channel every channel of the hop is slow
    (a degraded cable or NIC pair carries all of them). Truth names both NIC ports.
    """
    names = fabric.node_names
    profiled = list(jobs)[:PROFILED_JOBS]
    ch: int | None = None
    if target:
        port, _, ch_s = target.partition(":")
        host, _, nic = port.partition("/")
        job = next((j for j in profiled if host in [names[h] for h in jobs[j]]), None)
        if job is None:
            raise ValueError(f"{f.kind}: {host!r} runs no profiled job ({', '.join(profiled)})")
        gpu = int(nic.removeprefix("mlx5_") or 0)
        if not 0 <= gpu < gpus:
            raise ValueError(f"{f.kind}: {target!r} names GPU {gpu}, hosts have {gpus}")
        if ch_s:
            ch = int(ch_s)
            if not 0 <= ch < channels:
                raise ValueError(f"{f.kind}: {target!r} names channel {ch}, ranks have {channels} channels")
        pos = [names[h] for h in jobs[job]].index(host)
    else:
        cands = []
        for j in profiled:
            hs = jobs[j]
            for pos in range(len(hs)):
                for gpu in range(gpus):
                    a, b = hs[pos] * gpus + gpu, hs[(pos + 1) % len(hs)] * gpus + gpu
                    ends = {a, b, int(fabric.peer[a]), int(fabric.peer[b])}
                    if len(hs) > 1 and not ends & used:
                        cands.append((j, pos, gpu))
        if not cands:
            raise ValueError("fabric too small for that many faults")
        job, pos, gpu = cands[int(rng.integers(len(cands)))]
    hs = jobs[job]
    if len(hs) < 2:
        raise ValueError(f"{f.kind}: job {job} runs on one host: its ring has no network hop")
    a, b = hs[pos] * gpus + gpu, hs[(pos + 1) % len(hs)] * gpus + gpu
    used.update((a, b, int(fabric.peer[a]), int(fabric.peer[b])))
    nxt = (pos + 1) % len(hs)
    src, dst = pos * gpus + gpu, nxt * gpus + gpu
    return replace(f, port=fabric.keys[a], peer=fabric.keys[b], job=job, rank=src, channel=ch,
                   extra={"dst_rank": dst, "hosts": [names[hs[pos]], names[hs[nxt]]]})  # fmt: skip


def _place_cable(
    f: Fault,
    target: str | None,
    fabric: Fabric,
    host_nics: np.ndarray,
    used: set[int],
    gpus: int,
    rng: np.random.Generator,
) -> Fault:
    """A host NIC's cable: unplugged (``cable_missing``), moved to the down port of another host
    NIC of its rail, preferably on another leaf, whose cable is pulled to make room
    (``cable_moved``), or swapped with the host's next-rail NIC (``rail_miscabled``)."""
    if target:
        nic = int(fabric.lookup(pa.array([target]))[0])
        if nic < 0 or not fabric.host_port[nic] or fabric.peer[nic] < 0:
            raise ValueError(f"{f.kind}: {target!r} is not a cabled host NIC")
        used.update((nic, int(fabric.peer[nic])))
    else:
        nic = _pick_nic(host_nics, used, rng, fabric)
    old = int(fabric.peer[nic])
    base = replace(f, port=fabric.keys[nic], peer=fabric.keys[old], node=fabric.node_of(nic))
    if f.kind == "cable_missing":
        return base
    rail = fabric.rail
    if f.kind == "rail_miscabled":
        host = fabric.node_of_port[nic]
        other_rail = (int(rail[nic]) + 1) % max(gpus, 1)
        mate = np.flatnonzero((fabric.node_of_port == host) & fabric.host_port & (rail == other_rail))
        if not mate.size or int(mate[0]) == nic or fabric.peer[mate[0]] < 0 or int(mate[0]) in used:
            raise ValueError(
                f"{f.kind}: {fabric.keys[nic]} has no free NIC on rail {other_rail} to swap with"
            )
        m = int(mate[0])
        used.update((m, int(fabric.peer[m])))
        return replace(base, peer=fabric.keys[m], extra={"swapped_with": fabric.keys[m],
                       "ports": [fabric.keys[int(fabric.peer[m])], fabric.keys[old]]})  # fmt: skip
    same = np.flatnonzero(fabric.host_port & (rail == rail[nic]) & (fabric.peer >= 0))
    same = same[(same != nic) & ~np.isin(same, list(used)) & ~np.isin(fabric.peer[same], list(used))]
    if not same.size:
        raise ValueError("fabric too small for that many faults")
    leaf = fabric.node_of_port[old]
    other_leaf = same[fabric.node_of_port[fabric.peer[same]] != leaf]
    pool = other_leaf if other_leaf.size else same
    y = int(pool[int(rng.integers(pool.size))])
    q = int(fabric.peer[y])
    used.update((y, q))
    return replace(base, extra={"to": fabric.keys[q], "displaced": fabric.keys[y]})


def _place_nic(
    f: Fault,
    target: str | None,
    fabric: Fabric,
    host_nics: np.ndarray,
    used: set[int],
    rng: np.random.Generator,
) -> Fault:
    """A host NIC (``HOST/mlx5_R``, or drawn) moved to a slot on its GPU's other socket. The
    host's other NICs are left to other faults: only this NIC's GPU loses its path."""
    if target:
        nic = int(fabric.lookup(pa.array([target]))[0])
        if nic < 0 or not fabric.host_port[nic] or fabric.rail[nic] < 0:
            raise ValueError(f"{f.kind}: {target!r} is not a host NIC on a rail")
        used.update((nic, int(fabric.peer[nic])))
    else:
        nic = _pick_nic(host_nics, used, rng, fabric)
    return replace(f, port=fabric.keys[nic], node=fabric.node_of(nic), extra={"rail": int(fabric.rail[nic])})


def _place_polarized(
    f: Fault, target: str | None, fabric: Fabric, used: set[int], rng: np.random.Generator
) -> Fault:
    """A leaf whose upward traffic hashes onto a share (``magnitude``) of its spine uplinks.

    Target ``LEAF``; drawn, a compute leaf with hosts whose ports no other fault uses. Truth
    names the leaf and the uplinks that stay in use (the hot ones), chosen as a hash would:
    scattered over the leaf's uplinks, not its first ones.
    """
    roles = np.asarray(fabric.node_roles)
    role = roles[fabric.node_of_port]
    peer = fabric.peer
    is_up = (role == "leaf") & (peer >= 0) & (role[np.maximum(peer, 0)] == "spine")
    host_leaf = (role == "leaf") & (peer >= 0) & (role[np.maximum(peer, 0)] == "host")
    if fabric.purpose:
        compute_nic = np.asarray([p == "compute" for p in fabric.purpose])
        host_leaf &= compute_nic[np.maximum(peer, 0)]
    leaves = sorted({fabric.node_of(int(i)) for i in np.flatnonzero(host_leaf).tolist()})
    if target:
        if target not in leaves:
            raise ValueError(f"{f.kind}: {target!r} is not a leaf of compute hosts")
        leaf = target
    else:
        node_of = fabric.node_of_port
        free = [
            lf for lf in leaves
            if not (set(np.flatnonzero(node_of == fabric.node_names.index(lf)).tolist()) & used)
        ]  # fmt: skip
        if not free:
            raise ValueError("fabric too small for that many faults")
        leaf = free[int(rng.integers(len(free)))]
    ports = np.flatnonzero(fabric.node_of_port == fabric.node_names.index(leaf))
    used.update(ports.tolist())
    ups = ports[is_up[ports]]
    if ups.size < 2:
        raise ValueError(f"{f.kind}: {leaf!r} has {ups.size} spine uplink(s); polarization needs two or more")
    k = min(ups.size - 1, max(1, round(f.magnitude * ups.size)))
    hot = np.sort(rng.choice(ups, size=k, replace=False))
    return replace(f, node=leaf, extra={"hot_uplinks": [fabric.keys[int(i)] for i in hot]})


def _place_fault_path(
    f: Fault,
    target: str | None,
    fabric: Fabric,
    host_nics: np.ndarray,
    used: set[int],
    jobs: dict[str, list[int]],
    gpus: int,
    rng: np.random.Generator,
) -> Fault:
    """A dead rank: the host NIC (``HOST/mlx5_G``, or drawn) whose link fails, and the rank of
    its job on it; a job end: the job (``JOB``, or drawn). Either takes its whole job: a drawn
    target is in a job whose NICs no other fault uses (a job already dead or gone has no rank
    left to lose, and its timings stop)."""
    names = fabric.node_names
    job_of = {h: j for j, hs in jobs.items() for h in hs}
    nics_of = {
        j: np.flatnonzero(fabric.host_port & np.isin(fabric.node_of_port, hs)) for j, hs in jobs.items()
    }
    free_jobs = [j for j in jobs if not set(nics_of[j].tolist()) & used]
    if f.kind == "job_end":
        if target and target not in jobs:
            raise ValueError(f"{f.kind}: unknown job {target!r}; jobs: {', '.join(jobs)}")
        if not target and not free_jobs:
            raise ValueError("fabric too small for that many fault-path faults")
        job = target or free_jobs[int(rng.integers(len(free_jobs)))]
        used.update(nics_of[job].tolist())
        return replace(f, job=job)
    if target:
        nic = int(fabric.lookup(pa.array([target]))[0])
        if nic < 0 or not fabric.host_port[nic] or fabric.peer[nic] < 0:
            raise ValueError(f"{f.kind}: {target!r} is not a cabled host NIC")
    else:
        pool = host_nics[np.isin(host_nics, np.concatenate([nics_of[j] for j in free_jobs] or [[]]))]
        if not pool.size:
            raise ValueError("fabric too small for that many fault-path faults")
        nic = int(pool[int(rng.integers(pool.size))])
    h = int(fabric.node_of_port[nic])
    job = job_of.get(h)
    if job is None:
        raise ValueError(f"{f.kind}: host {names[h]!r} runs no job")
    used.update(nics_of[job].tolist())
    used.update(int(p) for p in fabric.peer[nics_of[job]].tolist() if p >= 0)
    gpu = max(int(fabric.rail[nic]), 0)
    rank = jobs[job].index(h) * gpus + gpu
    peer = int(fabric.peer[nic])
    return replace(f, port=fabric.keys[nic], peer=fabric.keys[peer], node=names[h], job=job, rank=rank)
