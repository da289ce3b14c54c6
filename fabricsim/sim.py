"""Step-by-step simulation of a training cluster's fabric counters and NCCL timings.

Every array is indexed by link or by port and advanced for the whole fabric at once, so a
1,024-host fabric (32,768 ports) costs a few milliseconds a step. Counters are cumulative
``uint64`` as devices report them, start from non-zero values, and are presented through the
benign events (resets, 32-bit wrap, collector outages) exactly as a collector would see them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

import numpy as np
import pyarrow as pa

from graywire.collectors.model import Fabric
from graywire.collectors.schemas import (
    LINK,
    LOGICAL_ACTIVE,
    LOGICAL_DOWN,
    NCCL_PROXY,
    NCCL_TIMING,
    NCCL_TRANSPORT,
    PHYS_LINK_UP,
    PHYS_POLLING,
    PORT_SAMPLE,
    TS,
    make_batch,
)
from graywire.fabricsim.faults import (
    CABLING_KINDS,
    CHECKPOINT_BURST_S,
    DATAPATH_BENIGN_KINDS,
    DATAPATH_KINDS,
    FAULT_PATH_BENIGN_KINDS,
    FAULT_PATH_KINDS,
    PROFILED_JOBS,
    STARTUP_BENIGN_KINDS,
    STARTUP_KINDS,
    TRANSPORT_KINDS,
    Fault,
    FaultRequest,
    parse_spec,
    resolve_faults,
)
from graywire.fabricsim.gpu_layout import HostLayout, base_layout, cross_numa, layout_batch
from graywire.fabricsim.ras import RasJob, job_end_view, rank_dead_states, status_document
from graywire.fabricsim.ras import host_names as ras_host_names
from graywire.fabricsim.startup import InitEvent, StartupPlan, host_names
from graywire.fabricsim.topology import TopologySpec, build_fabric

ROCE_PRIORITY = 3
FEC_MODE_PLR = 14  # ETH_Consortium_LL_50G_RS_FEC_PLR (UFM fec_mode_active code)
#: The counters the simulator models, in the row order of its state matrix.
SIM_COUNTERS = (
    "rx_bytes", "tx_bytes", "rx_packets", "tx_packets", "symbol_errors", "link_downed",
    "link_recovery", "rcv_errors", "xmit_discards", "xmit_wait_ticks", "fec_corrected_blocks",
    "fec_uncorrectable_blocks", "fec_corrected_bits", "phy_received_bits", "ecn_marked_packets",
    "cnp_sent", "cnp_handled", f"pfc{ROCE_PRIORITY}_rx_pause_frames", f"pfc{ROCE_PRIORITY}_tx_pause_frames",
    "fec_corrected_symbols", "crc_errors",
)  # fmt: skip
C = {name: i for i, name in enumerate(SIM_COUNTERS)}
PAUSE_SECONDS = (f"pfc{ROCE_PRIORITY}_rx_pause_seconds", f"pfc{ROCE_PRIORITY}_tx_pause_seconds")
HOST_ONLY = ("ecn_marked_packets", "cnp_sent", "cnp_handled", "crc_errors")  # RoCE NIC counters
#: RS(544,514): 10-bit symbols, 544 a codeword, up to 15 corrected (IEEE 802.3 Clause 91). PAM4
#: DFE receivers make errors in bursts, so one erroneous symbol holds ~1.4 bit errors and one
#: corrected codeword ~2.5 (the 802.3bs burst-error studies); both counts track the pre-FEC BER.
BITS_PER_CORRECTED_SYMBOL = 1.4
BITS_PER_CORRECTED_BLOCK = 2.5
WRAP_COUNTERS = ("rx_packets", "tx_packets")
EPOCH = datetime(2026, 1, 5, tzinfo=UTC)
TRANSPORT_REFRESH = 30
XMIT_WAIT_TICKS_PER_SECOND = 2.5e8  # a port waiting the whole interval counts this many ticks a second


@dataclass(frozen=True, slots=True)
class SimConfig:
    topology: TopologySpec = field(default_factory=TopologySpec)
    interval_s: float = 10.0
    duration_s: float = 3600.0
    seed: int = 0
    start: datetime = EPOCH
    job_hosts: int = 32
    channels: int = 4
    faults: str = "default"


@dataclass(frozen=True, slots=True)
class SimStep:
    index: int
    time: datetime
    port_sample: pa.RecordBatch
    nccl_timing: pa.RecordBatch | None
    #: The ranks' wiring (what NCCL_DEBUG lines say): at the first NCCL poll, when a transport
    #: fault starts or ends (the job re-initialized), and every ``TRANSPORT_REFRESH`` polls.
    nccl_transport: pa.RecordBatch | None = None
    #: The NCCL profiler's per-peer proxy steps of the profiled jobs (``PROFILED_JOBS``).
    nccl_proxy: pa.RecordBatch | None = None
    #: The cables the subnet manager sees (``link``): every plugged cable whose link is up, as
    #: UFM's links list shows it (a down link is not discovered), every poll.
    links: pa.RecordBatch | None = None
    #: Every host's GPU<->NIC paths (``gpu_nic_path``, read back from its ``nvidia-smi topo -m``):
    #: at the first poll and when a layout changes; only in runs that name a data-path kind.
    gpu_paths: pa.RecordBatch | None = None
    #: Start-up jobs' NCCL init events since the previous step (fabricsim/startup.py), when a
    #: start-up fault kind is in the spec; written as NCCL_DEBUG lines by InitLogWriter.
    nccl_init_events: list[InitEvent] | None = None
    #: Each job's NCCL RAS ``STATUS`` report (JSON text, fabricsim/ras.py) by job, when a
    #: fault-path kind is in the spec; a job whose RAS is gone (ended, killed) has none.
    ras_status: dict[str, str] | None = None


class FabricSim:
    """A simulated fabric; :meth:`step` yields one poll of every source."""

    def __init__(self, cfg: SimConfig, fault_requests: list[FaultRequest] | None = None) -> None:
        self.cfg = cfg
        self.fabric: Fabric = build_fabric(cfg.topology)
        self.rng = np.random.default_rng(cfg.seed)
        f = self.fabric
        n_hosts = cfg.topology.hosts
        self.jobs: dict[str, list[int]] = {
            f"job-{j:03d}": list(range(s, min(s + cfg.job_hosts, n_hosts)))
            for j, s in enumerate(range(0, n_hosts, cfg.job_hosts))
        }
        reqs = parse_spec(cfg.faults) if fault_requests is None else fault_requests
        self.faults: list[Fault] = resolve_faults(
            reqs, f, cfg.duration_s, cfg.interval_s, self.jobs, cfg.topology.gpus, cfg.channels, self.rng
        )
        self.k = 0
        L, P = len(f.link_a), f.n_ports
        rng = self.rng
        self.port_dict = f.key_array
        self.ends = np.concatenate([f.link_a, f.link_b])  # port index of (link, side) pairs
        self.link_of_port = np.full(P, -1, dtype=np.int64)
        self.link_of_port[self.ends] = np.tile(np.arange(L), 2)
        self._port_cache: dict[str, int] = {}
        self.is_host = f.host_port
        # Per-link health and load.
        self.base_util = rng.uniform(0.35, 0.55, L)
        #: Links of the storage network (``TopologySpec.storage_nics``): idle but for data
        #: loading, until a checkpoint writes over them.
        self.storage_link = _storage_links(f)
        self.base_util[self.storage_link] *= 0.06
        self.ber = 10 ** rng.uniform(-10.0, -8.3, L)  # healthy PAM4 pre-FEC BER, below field "Normal"
        self.temp = (52 + rng.normal(0, 3, P)).astype(np.float32)
        # Cumulative counters (rows: SIM_COUNTERS) and pause time, starting mid-life.
        self.cum = np.zeros((len(SIM_COUNTERS), P), dtype=np.uint64)
        self.cum[C["rx_bytes"]] = rng.integers(10**11, 10**13, P, dtype=np.uint64)
        self.cum[C["tx_bytes"]] = rng.integers(10**11, 10**13, P, dtype=np.uint64)
        self.cum[C["rx_packets"]] = self.cum[C["rx_bytes"]] // np.uint64(4096)
        self.cum[C["tx_packets"]] = self.cum[C["tx_bytes"]] // np.uint64(4096)
        self.cum[C["phy_received_bits"]] = rng.integers(10**15, 10**16, P, dtype=np.uint64)
        self.pause = np.zeros((2, P), dtype=np.float64)
        self.base = np.zeros_like(self.cum)  # subtracted after a counter reset
        self.pause_base = np.zeros_like(self.pause)
        self.wrap_off: dict[tuple[int, int], np.uint64] = {}
        #: Hosts of a ``driver_reload``: the offset their FEC corrected bits start from.
        self.reload_band: dict[str, int] = {}
        self.last_down = np.zeros(L, dtype=bool)
        #: Ports with a cable plugged in at the last step (their link can come up).
        self._plugged = np.zeros(P, dtype=bool)
        self._plugged[self.ends] = True
        # NCCL layout: one communicator per job; rank = host position * gpus + gpu.
        g, ch = cfg.topology.gpus, cfg.channels
        ranks_host, ranks_gpu, ranks_job, ranks_rank = [], [], [], []
        for j, hosts in enumerate(self.jobs.values()):
            hh = np.repeat(np.asarray(hosts), g)
            ranks_host.append(hh)
            ranks_gpu.append(np.tile(np.arange(g), len(hosts)))
            ranks_job.append(np.full(hh.size, j))
            ranks_rank.append(np.arange(hh.size))
        self.r_host = np.concatenate(ranks_host)
        self.r_gpu = np.concatenate(ranks_gpu)
        self.r_job = np.concatenate(ranks_job)
        self.r_rank = np.concatenate(ranks_rank)
        self.r_nranks = np.bincount(self.r_job)[self.r_job]
        self.r_nic = self.r_host * g + self.r_gpu  # host NIC port index (hosts come first)
        self.job_names = list(self.jobs)
        self.msg_bytes = np.int64(512 * 2**20)
        self.job_base = rng.uniform(0.012, 0.016, len(self.jobs))
        self.nccl_channels = ch
        self.seq = 0
        # Arrival at each collective (a fraction of the job's collective time): a small lasting
        # per-rank bias plus per-collective jitter, and each host's clock offset (PTP-grade) in
        # the start times it reports. Drawn from their own stream so the rest stays as it was.
        seq_seed = getattr(rng.bit_generator, "seed_seq", None)
        self.arrival_rng = np.random.default_rng(
            np.random.SeedSequence(seq_seed.entropy if seq_seed else cfg.seed, spawn_key=(0x4152,))
        )
        self.r_bias = self.arrival_rng.normal(0, 0.002, self.r_host.size)
        self.clock_offset_s = self.arrival_rng.normal(0, 100e-6, cfg.topology.hosts)
        # The leaf each rank's NIC hangs off: a slow leaf slows those ranks' crossing channels.
        self.r_leaf = f.node_of_port[np.maximum(f.peer[self.r_nic], 0)]
        self._transport_state: tuple[str, ...] | None = None
        self._transport_age = 0
        self._init_proxy()
        layout_kinds = (*DATAPATH_KINDS, *DATAPATH_BENIGN_KINDS)
        self._layout_faults = [fl for fl in self.faults if fl.kind in layout_kinds]
        self._layout_state: tuple[str, ...] | None = None
        self.burst_rng = np.random.default_rng([cfg.seed, 0x434B])  # its own stream
        # Start-up jobs restarting and initializing NCCL: only when the spec names a start-up kind.
        self.startup: StartupPlan | None = None
        if any(fl.kind in (*STARTUP_KINDS, *STARTUP_BENIGN_KINDS) for fl in self.faults):
            self.startup = StartupPlan(
                host_names(f), cfg.topology.gpus, cfg.duration_s, self.faults, cfg.seed
            )

        # NCCL RAS of every job: only when the spec names a fault-path kind (fabricsim/ras.py).
        self.ras_jobs: dict[str, RasJob] = {}
        self.ras_names: dict[str, str] = {}
        self._job_count: dict[str, int] = {}
        self._frozen_count: dict[str, int] = {}
        if any(fl.kind in (*FAULT_PATH_KINDS, *FAULT_PATH_BENIGN_KINDS) for fl in self.faults):
            self.ras_jobs = {j: RasJob(j, hs, cfg.topology.gpus) for j, hs in self.jobs.items()}
            self.ras_names = ras_host_names(f.node_names, [h for hs in self.jobs.values() for h in hs])

    # -- helpers ----------------------------------------------------------------------------------
    def time_of(self, k: int) -> datetime:
        return self.cfg.start + timedelta(seconds=k * self.cfg.interval_s)

    def active(self, t: float, kind: str) -> list[Fault]:
        return [f for f in self.faults if f.kind == kind and f.active(t)]

    def _checkpoint_on_compute(self, t: float) -> bool:
        """A periodic checkpoint on the compute rails is bursting in the interval ending at ``t``:
        every ``magnitude`` seconds from its start, for ``CHECKPOINT_BURST_S``."""
        dt = self.cfg.interval_s
        for fl in self.active(t - dt / 2, "checkpoint_on_compute"):
            if (t - dt / 2 - fl.start_s) % fl.magnitude < CHECKPOINT_BURST_S:
                return True
        return False

    def _polarized(self, fl: Fault) -> tuple[np.ndarray, np.ndarray]:
        """Links (indices) of a polarized leaf's hot uplinks and of its other uplinks."""
        f = self.fabric
        ports = np.flatnonzero(f.node_of_port == f.node_names.index(fl.node))
        role = f.port_role
        ups = ports[(f.peer[ports] >= 0) & (role[np.maximum(f.peer[ports], 0)] == "spine")]
        hot_ports = [self._port_index(k) for k in fl.extra["hot_uplinks"]]
        hot = self.link_of_port[hot_ports]
        cold = self.link_of_port[ups[~np.isin(ups, hot_ports)]]
        return hot, cold

    def _port_index(self, key: str) -> int:
        idx = self._port_cache.get(key)
        if idx is None:
            idx = self._port_cache[key] = int(self.fabric.lookup(pa.array([key]))[0])
        return idx

    def _link_of_port(self, key: str) -> int:
        return int(self.link_of_port[self._port_index(key)])

    @property
    def n_steps(self) -> int:
        return int(self.cfg.duration_s // self.cfg.interval_s) + 1

    def run(self):
        """Yield every step of the configured duration."""
        for _ in range(self.n_steps):
            yield self.step()

    # -- one step ---------------------------------------------------------------------------------
    def step(self) -> SimStep:
        k = self.k
        self.k += 1
        t = k * self.cfg.interval_s
        now = self.time_of(k)
        if k > 0:
            self._advance(t, self.cfg.interval_s)
        port = self._port_batch(t, now)
        nccl = self._nccl_batch(t, now) if k > 0 else None
        wiring = self._transport_batch(t, now) if k > 0 else None
        proxy = self._proxy_batch(t, now) if k > 0 else None
        nccl = self._hop_pacing(t, nccl)
        ras = None
        if self.ras_jobs:
            stopped = self._stopped_jobs(t)
            nccl, wiring, proxy = (self._drop_jobs(b, stopped) for b in (nccl, wiring, proxy))
            ras = self._ras_reports(t, now, stopped)
        paths = self._gpu_path_batch(t, now) if self._layout_faults else None
        init = self.startup.between(t - self.cfg.interval_s if k else -1.0, t) if self.startup else None
        return SimStep(
            k,
            now,
            port,
            nccl,
            wiring,
            proxy,
            self._links_batch(t),
            gpu_paths=paths,
            nccl_init_events=init,
            ras_status=ras,
        )

    # -- the fault path (fabricsim/ras.py) ----------------------------------------------------------
    def _stopped_jobs(self, t: float) -> set[str]:
        """Jobs whose collectives stopped by ``t``: a rank's NIC link failed, or the job ended."""
        kinds = (*FAULT_PATH_KINDS, *FAULT_PATH_BENIGN_KINDS)
        return {str(fl.job) for fl in self.faults if fl.kind in kinds and fl.start_s <= t}

    def _drop_jobs(self, batch: pa.RecordBatch | None, jobs: set[str]) -> pa.RecordBatch | None:
        if batch is None or not jobs:
            return batch
        codes = [i for i, j in enumerate(self.job_names) if j in jobs]
        keep = ~np.isin(batch.column("job").indices.to_numpy(zero_copy_only=False), codes)
        return batch.filter(pa.array(keep)) if keep.any() else None

    def _ras_reports(self, t: float, now: datetime, stopped: set[str]) -> dict[str, str]:
        """Each job's ``STATUS``: running jobs at their collective count; a stuck job frozen one
        past its last completed collective, its dead rank as RAS sees it; none once it is gone."""
        out = {}
        for name, job in self.ras_jobs.items():
            if name in stopped:
                count = self._frozen_count.setdefault(name, self._job_count.get(name, self.seq) + 1)
            else:
                count = self._job_count[name] = self.seq
            states: dict[int, str] = {}
            finalize = False
            mine = [fl for fl in self.faults if fl.job == name and fl.start_s <= t]
            end = next((fl for fl in mine if fl.kind in FAULT_PATH_BENIGN_KINDS), None)
            dead = next((fl for fl in mine if fl.kind in FAULT_PATH_KINDS), None)
            if end is not None:
                view = job_end_view(end, job, t)
                if view is None:
                    continue
                states, finalize = view
            elif dead is not None:
                if t >= dead.end_s:
                    continue  # the scheduler killed the stuck job
                states = rank_dead_states(dead, t) or {}
            out[name] = status_document(job, now, count, states, finalize)
        return out

    def layouts(self, t: float) -> dict[str, HostLayout]:
        """Each host's PCIe layout at ``t`` (fabricsim/gpu_layout.py)."""
        gpus = self.cfg.topology.gpus
        shared = next((fl.magnitude for fl in self._layout_faults
                       if fl.kind in DATAPATH_BENIGN_KINDS and fl.active(t)), None)  # fmt: skip
        base = base_layout(gpus, shared)
        out = {name: base for name, role in zip(self.fabric.node_names, self.fabric.node_roles, strict=True)
               if role == "host"}  # fmt: skip
        for fl in self._layout_faults:
            if fl.kind in DATAPATH_KINDS and fl.active(t) and fl.node in out:
                out[fl.node] = cross_numa(out[fl.node], int(fl.extra["rail"]))
        return out

    def _gpu_path_batch(self, t: float, now: datetime) -> pa.RecordBatch | None:
        active = tuple(fl.id for fl in self._layout_faults if fl.active(t))
        if active == self._layout_state:
            return None
        self._layout_state = active
        return layout_batch(self.layouts(t), now)

    def _cabling(self, t: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Per modelled link, the two ports its cable joins now and whether it is plugged in.

        The cabling faults rewire it: a missing cable is unplugged; a moved cable is out for
        ``magnitude`` seconds, then joins its NIC to the port of the cable pulled to make room
        (that NIC and the moved cable's old port stay dark); a rail miscabling swaps the switch
        ends of two NICs of one host.
        """
        f = self.fabric
        a, b = f.link_a.copy(), f.link_b.copy()
        plugged = np.ones(a.size, dtype=bool)
        for fl in self.faults:
            if fl.kind not in CABLING_KINDS or not fl.active(t):
                continue
            x = self._port_index(fl.port)
            li = self._link_of_port(fl.port)
            if fl.kind == "cable_missing":
                plugged[li] = False
            elif fl.kind == "rail_miscabled":
                lj = self._link_of_port(fl.peer)
                y = self._port_index(fl.peer)
                px, py = int(f.peer[x]), int(f.peer[y])
                a[li], b[li] = x, py
                a[lj], b[lj] = y, px
            else:  # cable_moved
                lj = self._link_of_port(fl.extra["displaced"])
                plugged[lj] = False
                if t < fl.start_s + fl.magnitude:
                    plugged[li] = False
                else:
                    a[li], b[li] = x, self._port_index(fl.extra["to"])
        return a, b, plugged

    def _links_batch(self, t: float) -> pa.RecordBatch:
        a, b, plugged = self._cabling(t)
        up, _, _, _ = self._link_state(t)
        lit = np.flatnonzero(plugged & up)
        keys = self.fabric.key_array
        return pa.RecordBatch.from_arrays(
            [keys.take(pa.array(a[lit])), keys.take(pa.array(b[lit])), pa.array(["fabricsim"] * lit.size)],
            schema=LINK,
        )

    def _port_ends(self, t: float, per_link: np.ndarray, fill: float = 0) -> np.ndarray:
        """A per-link value on both ends of each cable as plugged now (unplugged ports get ``fill``)."""
        a, b, plugged = self._cabling(t)
        out = np.full(self.fabric.n_ports, fill, dtype=per_link.dtype)
        out[a[plugged]] = per_link[plugged]
        out[b[plugged]] = per_link[plugged]
        return out

    def _link_state(self, t: float) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Per link: up now, up share of the last interval, speed, width."""
        f = self.fabric
        L = len(f.link_a)
        speed = f.expected_speed_bps[f.link_a].astype(np.float64)
        width = f.expected_width[f.link_a].astype(np.int64)
        up = np.ones(L, dtype=bool)
        up_share = np.ones(L)
        dt = self.cfg.interval_s
        for fl in self.active(t, "speed_downgrade"):
            speed[self._link_of_port(fl.port)] *= fl.magnitude
        for fl in self.active(t, "width_downgrade"):
            li = self._link_of_port(fl.port)
            new_w = max(1, round(width[li] * fl.magnitude))
            speed[li] *= new_w / width[li]
            width[li] = new_w
        for kind in ("short_retrain", "link_flap", *FAULT_PATH_KINDS):
            for fl in self.faults:
                if fl.kind != kind:
                    continue
                li = self._link_of_port(fl.port)
                for s, e in _outages(fl):
                    if s <= t < e:
                        up[li] = False
                    overlap = max(0.0, min(e, t) - max(s, t - dt))
                    up_share[li] -= overlap / dt
        return up, np.clip(up_share, 0, 1), speed, width

    def _advance(self, t: float, dt: float) -> None:
        f, rng = self.fabric, self.rng
        L = len(f.link_a)
        _, up_share, speed, _ = self._link_state(t)
        ckpt = bool(self.active(t, "checkpoint_burst"))
        # Traffic per direction: a = link_a end sends to b, b sends to a.
        util = np.clip(self.base_util[None, :] * (1 + rng.normal(0, 0.03, (2, L))), 0.01, 0.97)
        if ckpt:
            # A checkpoint writes over the storage network where there is one, else (one fabric
            # for everything, by design) over every link.
            burst = rng.uniform(0.88, 0.96, (2, L))
            on = self.storage_link if self.storage_link.any() else np.ones(L, dtype=bool)
            util = np.where(on, np.maximum(util, burst), util)
        if self._checkpoint_on_compute(t):
            # The same writes routed out of the compute NICs: the training rails carry them and
            # the storage network stays idle.
            burst = self.burst_rng.uniform(0.88, 0.96, (2, L))
            util = np.where(self.storage_link, util, np.maximum(util, burst))
        for fl in self.active(t, "ecmp_polarization"):
            # The leaf's upward flows hash onto the hot uplinks: its total stays, capped at line
            # rate (what does not fit waits: the job slows), and the others carry a trickle.
            hot, cold = self._polarized(fl)
            total = util[0, hot].sum() + util[0, cold].sum()
            util[0, cold] *= 0.05
            util[0, hot] = np.minimum(0.97, (total - util[0, cold].sum()) / hot.size)
        storms = self.active(t, "pfc_storm")
        storm_links = [self._link_of_port(fl.port) for fl in storms]
        for li in storm_links:
            util[:, li] = 0.01  # a NIC pausing its rail moves almost nothing
        sent = util * (speed * dt / 8)[None, :] * up_share[None, :]
        # Each end's counters: tx of its own direction, rx of the other.
        tx = np.concatenate([sent[0], sent[1]])
        rx = np.concatenate([sent[1], sent[0]])
        ends = self.ends
        inc = np.zeros((len(SIM_COUNTERS), f.n_ports))
        inc[C["tx_bytes"], ends] = tx
        inc[C["rx_bytes"], ends] = rx
        inc[C["tx_packets"], ends] = tx / 4096
        inc[C["rx_packets"], ends] = rx / 4096
        # PHY: bits flow whenever the link is up; FEC corrects at the link's pre-FEC BER.
        ber = self.ber.copy()
        for fl in self.faults:
            if fl.kind == "ber_ramp" and t >= fl.start_s:
                li = self._link_of_port(fl.port)
                if fl.active(t):
                    progress = (t - fl.start_s) / (fl.end_s - fl.start_s)
                    target = fl.magnitude * 1e-6  # field "Error" pre-FEC threshold for ACC links
                    ber[li] = self.ber[li] * (target / self.ber[li]) ** progress
        bits = np.tile(speed * dt * up_share, 2)
        pre = np.tile(ber, 2)
        corr_bits = rng.poisson(bits * pre)
        post = 1e-15 * (pre / 1e-6) ** 4  # post-FEC errors rise steeply once pre-FEC passes ~1e-6
        uncorr = rng.poisson(bits * post / 10)
        inc[C["phy_received_bits"], ends] = bits
        inc[C["fec_corrected_bits"], ends] = corr_bits
        inc[C["fec_corrected_blocks"], ends] = np.ceil(corr_bits / BITS_PER_CORRECTED_BLOCK)
        inc[C["fec_corrected_symbols"], ends] = np.ceil(corr_bits / BITS_PER_CORRECTED_SYMBOL)
        inc[C["fec_uncorrectable_blocks"], ends] = uncorr
        # Symbol errors as PortCounters / PPCNT count them on FEC links: the errors FEC did not
        # correct (mlx5 counters.rst, rx_pcs_symbol_err_phy), so they rise with pre-FEC BER.
        inc[C["symbol_errors"], ends] = rng.poisson(bits * post)
        inc[C["rcv_errors"], ends] = uncorr
        inc[C["crc_errors"], ends] = uncorr  # an uncorrectable codeword corrupts its frame
        # Congestion: ECN marks and PFC pauses grow steeply with load.
        load = np.concatenate([util[1], util[0]])  # load on what each end receives
        p_mark = 2e-7 * (load / 0.5) ** 8
        marks = rng.poisson(rx / 4096 * p_mark)
        for fl in self.active(t, "ecn_hotspot"):
            i = self._port_index(fl.port)
            pos = np.flatnonzero(ends == i)
            marks[pos] = rng.poisson(rx[pos] / 4096 * 2e-7 * fl.magnitude)
        inc[C["ecn_marked_packets"], ends] = marks
        inc[C["cnp_sent"], ends] = np.floor(marks * 0.8)
        inc[C["cnp_handled"], ends] = rng.poisson(np.floor(marks * 0.8) + 0.0)
        pauses = rng.poisson(dt * 30 * load**10)
        pause_s = pauses * rng.uniform(5e-6, 3e-5, pauses.size)
        inc[C["xmit_wait_ticks"], ends] = rng.poisson(dt * 5e3 * load**8)
        inc[C["pfc3_rx_pause_frames"], ends] = pauses
        pause_inc = np.zeros((2, f.n_ports))
        pause_inc[0, ends] = pause_s
        # The sender of a pause counts it as tx at its own end.
        pause_inc[1, np.concatenate([f.link_b, f.link_a])] = pause_s
        inc[C["pfc3_tx_pause_frames"], np.concatenate([f.link_b, f.link_a])] = pauses
        for fl in storms:
            nic = self._port_index(fl.port)
            leaf = int(f.peer[nic])
            frames = dt / 3.3e-6 * fl.magnitude  # pause refreshed every quanta expiry
            inc[C["pfc3_tx_pause_frames"], nic] = frames
            inc[C["pfc3_rx_pause_frames"], leaf] = frames
            pause_inc[1, nic] = dt * 0.995 * fl.magnitude
            pause_inc[0, leaf] = dt * 0.995 * fl.magnitude
            inc[C["xmit_wait_ticks"], leaf] = dt * XMIT_WAIT_TICKS_PER_SECOND
            # The storm spreads (Guo et al., SIGCOMM 2016, 4.3): the leaf cannot send to the
            # NIC, its buffers fill with traffic for it, and it pauses every port that feeds it
            # (its other hosts and its uplinks). Those hosts are victims, not culprits.
            spread = np.flatnonzero(f.node_of_port == f.node_of_port[leaf])
            spread = spread[(spread != leaf) & (f.peer[spread] >= 0)]
            if spread.size:
                inc[C["pfc3_tx_pause_frames"], spread] = frames * 0.97
                inc[C["pfc3_rx_pause_frames"], f.peer[spread]] = frames * 0.97
                pause_inc[1, spread] = dt * 0.97 * fl.magnitude
                pause_inc[0, f.peer[spread]] = dt * 0.97 * fl.magnitude
        for fl in self.active(t, "credit_starvation"):
            # The NIC stops returning credits: its leaf port has data for it and waits. No pause
            # frames and no ECN marks: InfiniBand flow control is credit based.
            leaf = int(f.peer[self._port_index(fl.port)])
            inc[C["xmit_wait_ticks"], leaf] = dt * XMIT_WAIT_TICKS_PER_SECOND * min(fl.magnitude, 1.0)
        # Link down events: count once per outage start, on both ends.
        downs = np.zeros(L)
        for kind in ("short_retrain", "link_flap", *FAULT_PATH_KINDS):
            for fl in self.faults:
                if fl.kind == kind:
                    li = self._link_of_port(fl.port)
                    downs[li] += sum(1 for s, _ in _outages(fl) if t - dt < s <= t)
        inc[C["link_downed"], ends] = np.tile(downs, 2)
        inc[C["link_recovery"], ends] = np.tile(downs, 2)
        # A port without a cable (unplugged, or its cable moved) moves nothing; pulling the
        # cable counts one link down on it.
        plugged = self._port_ends(t, np.ones(L, dtype=bool), False)
        dark = np.flatnonzero(~plugged)
        if dark.size:
            inc[:, dark] = 0
        pulled = self._plugged & ~plugged
        inc[C["link_downed"], pulled] += 1
        self._plugged = plugged
        host_only = [C[c] for c in HOST_ONLY]
        inc[np.ix_(host_only, np.flatnonzero(~self.is_host))] = 0
        self.cum += np.rint(inc).astype(np.uint64)
        self.pause += pause_inc
        self.temp += rng.normal(0, 0.05, f.n_ports).astype(np.float32)

    def _port_batch(self, t: float, now: datetime) -> pa.RecordBatch:
        f = self.fabric
        up, _, speed, width = self._link_state(t)
        P = f.n_ports
        port_up = self._port_ends(t, up, False)
        port_speed = self._port_ends(t, speed.astype(np.int64))
        port_width = self._port_ends(t, width.astype(np.uint8))
        # Benign presentation effects: counter resets, driver reloads and 32-bit devices.
        for fl in self.faults:
            if fl.kind == "driver_reload" and fl.node not in self.reload_band:
                # Before the reload: its FEC corrected bits stand in the band the magnitude names.
                node = f.node_names.index(fl.node)
                ports = np.flatnonzero(f.node_of_port == node)
                band = (2**20, 2**31 + 2**29, 2**33)[min(int(fl.magnitude), 2)]
                self.cum[C["fec_corrected_bits"], ports] += np.uint64(band)
                self.reload_band[fl.node] = band
            reset = fl.kind in ("counter_reset", "driver_reload")
            if reset and fl.start_s <= t < fl.start_s + self.cfg.interval_s:
                node = f.node_names.index(fl.node)
                ports = np.flatnonzero(f.node_of_port == node)
                self.base[:, ports] = self.cum[:, ports]
                self.pause_base[:, ports] = self.pause[:, ports]
        reported = self.cum - self.base
        for fl in self.faults:
            if fl.kind == "counter_wrap" and t >= fl.start_s:
                i = self._port_index(fl.port)
                for name in WRAP_COUNTERS:
                    row = C[name]
                    if (i, row) not in self.wrap_off:
                        step = float(self.base_util.mean()) * f.expected_speed_bps[i] / 8 / 4096
                        start_at = 2**32 - int(2.5 * step * self.cfg.interval_s)
                        self.wrap_off[(i, row)] = np.uint64((start_at - int(reported[row, i])) % 2**64)
                    wrapped = (int(reported[row, i]) + int(self.wrap_off[(i, row)])) % 2**32
                    reported[row, i] = np.uint64(wrapped)
        keep = np.ones(P, dtype=bool)
        for fl in self.active(t, "collector_outage"):
            keep &= f.node_of_port != f.node_names.index(fl.node)
        rows = np.flatnonzero(keep)
        n = rows.size
        cols: dict[str, pa.Array] = {
            "time": pa.array(np.full(n, np.datetime64(now.replace(tzinfo=None), "us")), type=TS),
            "port": pa.DictionaryArray.from_arrays(pa.array(rows.astype(np.int32)), self.port_dict),
            "source": pa.DictionaryArray.from_arrays(
                pa.array(np.zeros(n, dtype=np.int8)), pa.array(["fabricsim"])
            ),
            "phys_state": pa.array(np.where(port_up, PHYS_LINK_UP, PHYS_POLLING)[rows].astype(np.uint8)),
            "logical_state": pa.array(np.where(port_up, LOGICAL_ACTIVE, LOGICAL_DOWN)[rows].astype(np.uint8)),
            "speed_bps": pa.array(port_speed[rows], mask=~port_up[rows]),
            "width": pa.array(port_width[rows], mask=~port_up[rows]),
            "fec_mode": pa.array(np.full(n, FEC_MODE_PLR, dtype=np.uint8)),
            "temperature_celsius": pa.array(self.temp[rows]),
        }
        host_rows = self.is_host[rows]
        for name, row in C.items():
            vals = reported[row, rows]
            cols[name] = pa.array(vals, mask=~host_rows) if name in HOST_ONLY else pa.array(vals)
        pause = self.pause - self.pause_base
        for j, name in enumerate(PAUSE_SECONDS):
            cols[name] = pa.array(pause[j, rows])
        return make_batch(PORT_SAMPLE, n, cols)

    def _nccl_batch(self, t: float, now: datetime) -> pa.RecordBatch:
        rng = self.rng
        R, ch = self.r_host.size, self.nccl_channels
        dt = self.cfg.interval_s
        self.seq += max(1, int(dt / 1.2))  # ~one training step every 1.2 s
        common = np.exp(rng.normal(0, 0.03, len(self.jobs)))[self.r_job]
        if self.active(t, "checkpoint_burst") or self._checkpoint_on_compute(t):
            common = common * 1.3
        work = self.job_base[self.r_job] * common
        # Every channel of a collective starts at its rank's arrival and ends together on every
        # rank, so ranks share each channel's pace and differ little within a channel.
        own = np.exp(0.25 * rng.normal(0, 0.015, (R, ch)))
        pace = np.exp(self.arrival_rng.normal(0, 0.012, (len(self.jobs), ch)))[self.r_job]
        dur = work[:, None] * own * pace
        spikes = rng.random((R, ch)) < 5e-4  # a rare slow poll (the row summarizes a poll)
        dur[spikes] *= rng.uniform(1.2, 1.8, int(spikes.sum()))
        # A NIC negotiated below its expected speed slows every channel of its rank.
        _, _, speed, _ = self._link_state(t)
        f = self.fabric
        nic_speed = np.zeros(f.n_ports)
        nic_speed[self.ends] = np.tile(speed, 2)
        ratio = f.expected_speed_bps[self.r_nic] / np.maximum(nic_speed[self.r_nic], 1.0)
        dur *= (1 + 0.8 * (ratio - 1))[:, None]
        for fl in self.faults:
            if fl.kind not in ("slow_channel", "slow_nic") or not fl.active(t):
                continue
            j = self.job_names.index(fl.job)
            in_job = np.flatnonzero(self.r_job == j)
            r = in_job[fl.rank]
            cols = slice(None) if fl.channel is None else fl.channel
            dur[in_job, cols] *= 1 + 0.15 * fl.magnitude  # peers partly wait for the slow hop
            dur[r, cols] *= (1 + fl.magnitude) / (1 + 0.15 * fl.magnitude)
        socket = np.zeros(R, dtype=bool)
        for fl in self.faults:
            if not fl.active(t):
                continue
            if fl.kind == "nccl_slow_path":
                # One channel of every rank behind the leaf; the rings through it wait a little.
                behind = self.r_leaf == f.node_names.index(fl.node)
                for j in np.unique(self.r_job[behind]).tolist():
                    dur[self.r_job == j, fl.channel] *= 1 + 0.15 * fl.magnitude
                dur[behind, fl.channel] *= (1 + fl.magnitude) / (1 + 0.15 * fl.magnitude)
            elif fl.kind in ("job_slowdown", "slow_step"):
                dur[self.r_job == self.job_names.index(fl.job)] *= 1 + fl.magnitude
            elif fl.kind in TRANSPORT_KINDS:
                on_host = self.r_host == f.node_names.index(fl.node)
                in_job = self.r_job == self.job_names.index(fl.job)
                dur[in_job] *= 1 + 0.15 * fl.magnitude
                dur[on_host] *= (1 + fl.magnitude) / (1 + 0.15 * fl.magnitude)
                if fl.kind == "nccl_transport_fallback":
                    socket |= on_host
        # Collectives are synchronous: a rank that arrives late (a compute straggler) starts its
        # kernels last and runs them shortest, while every other rank's kernels wait for it.
        arrive = self.r_bias + self.arrival_rng.normal(0, 0.004, R)
        for fl in self.faults:
            if fl.kind == "straggler" and fl.active(t):
                arrive[np.flatnonzero(self.r_job == self.job_names.index(fl.job))[fl.rank]] += fl.magnitude
        arrive_s = arrive * work
        last = np.full(len(self.jobs), -np.inf)
        np.maximum.at(last, self.r_job, arrive_s)
        dur += (last[self.r_job] - arrive_s)[:, None]
        end_s = now.timestamp() - 1e-3  # the last kernel ends 1 ms before the poll
        start_s = end_s - dur + self.clock_offset_s[self.r_host][:, None]
        n = R * ch
        busbw = (
            (self.msg_bytes * 2 * (self.r_nranks - 1) / self.r_nranks)[:, None] / dur * 8
        )  # bits per second
        rank_rows = np.repeat(np.arange(R), ch)
        host_names = pa.array(f.node_names)
        return make_batch(
            NCCL_TIMING,
            n,
            {
                "time": pa.array(np.full(n, np.datetime64(now.replace(tzinfo=None), "us")), type=TS),
                "job": pa.DictionaryArray.from_arrays(
                    pa.array(self.r_job[rank_rows].astype(np.int32)), pa.array(self.job_names)
                ),
                "communicator": pa.DictionaryArray.from_arrays(
                    pa.array(self.r_job[rank_rows].astype(np.int32)),
                    pa.array([f"{j}:world" for j in self.job_names]),
                ),
                "rank": pa.array(self.r_rank[rank_rows].astype(np.int32)),
                "nranks": pa.array(self.r_nranks[rank_rows].astype(np.int32)),
                "host": pa.DictionaryArray.from_arrays(
                    pa.array(self.r_host[rank_rows].astype(np.int32)), host_names
                ),
                "device": pa.array(self.r_gpu[rank_rows].astype(np.int16)),
                "collective": pa.DictionaryArray.from_arrays(
                    pa.array(np.zeros(n, dtype=np.int8)), pa.array(["AllReduce"])
                ),
                "seq": pa.array(np.full(n, self.seq, dtype=np.int64)),
                "message_bytes": pa.array(np.full(n, self.msg_bytes, dtype=np.int64)),
                "channel": pa.array(np.tile(np.arange(ch, dtype=np.int16), R)),
                "start_time": pa.array(np.rint(start_s.ravel() * 1e6).astype(np.int64)).cast(TS),
                "duration_seconds": pa.array(dur.ravel()),
                "bus_bandwidth_bps": pa.array(busbw.ravel()),
                "transport": pa.DictionaryArray.from_arrays(
                    pa.array(socket[rank_rows].astype(np.int8)), pa.array(["NET/IB", "NET/Socket"])
                ),
            },
        )

    def _transport_batch(self, t: float, now: datetime) -> pa.RecordBatch | None:
        """Every rank's wiring, when it changed (or is due for a refresh): ring connections
        over NET/IB with GPUDirect RDMA, except on hosts a transport fault is active on."""
        active = tuple(sorted(fl.id for fl in self.faults if fl.kind in TRANSPORT_KINDS and fl.active(t)))
        self._transport_age += 1
        if active == self._transport_state and self._transport_age < TRANSPORT_REFRESH:
            return None
        self._transport_state, self._transport_age = active, 0
        f, R, ch = self.fabric, self.r_host.size, self.nccl_channels
        socket = np.zeros(R, dtype=bool)
        no_gdr = np.zeros(R, dtype=bool)
        for fl in self.faults:
            if fl.id in active:
                on_host = self.r_host == f.node_names.index(fl.node)
                (socket if fl.kind == "nccl_transport_fallback" else no_gdr)[on_host] = True
        conns = np.full(R, 2 * ch, dtype=np.int32)  # a send and a receive per ring channel
        gdr = np.where(socket | no_gdr, 0, conns).astype(np.int32)
        return make_batch(
            NCCL_TRANSPORT,
            R,
            {
                "time": pa.array(np.full(R, np.datetime64(now.replace(tzinfo=None), "us")), type=TS),
                "job": pa.DictionaryArray.from_arrays(
                    pa.array(self.r_job.astype(np.int32)), pa.array(self.job_names)
                ),
                "communicator": pa.DictionaryArray.from_arrays(
                    pa.array(self.r_job.astype(np.int32)), pa.array([f"{j}:world" for j in self.job_names])
                ),
                "rank": pa.array(self.r_rank.astype(np.int32)),
                "nranks": pa.array(self.r_nranks.astype(np.int32)),
                "host": pa.DictionaryArray.from_arrays(
                    pa.array(self.r_host.astype(np.int32)), pa.array(f.node_names)
                ),
                "device": pa.array(self.r_gpu.astype(np.int16)),
                "port": f.key_array.take(pa.array(self.r_nic)).cast(pa.string()),
                "network": pa.DictionaryArray.from_arrays(
                    pa.array(socket.astype(np.int8)), pa.array(["IB", "Socket"])
                ),
                "net_transport": pa.DictionaryArray.from_arrays(
                    pa.array(socket.astype(np.int8)), pa.array(["NET/IB", "NET/Socket"])
                ),
                "net_connections": pa.array(conns),
                "gdrdma_connections": pa.array(gdr),
                "channels": pa.array(np.full(R, ch, dtype=np.int16)),
            },
        )

    # -- the NCCL profiler's proxy steps ------------------------------------------------------------
    def _init_proxy(self) -> None:
        """Ring neighbours of the profiled ranks: rank (host i, GPU g) sends to (host i+1, GPU g)
        over both hosts' rail-g NICs on every channel, and receives from (host i-1, GPU g)."""
        g = self.cfg.topology.gpus
        # Its own random stream: the proxy rows leave every other simulated value as it was.
        self.proxy_rng = np.random.default_rng([self.cfg.seed, 0x5052])
        profiled = np.flatnonzero(self.r_job < PROFILED_JOBS)
        self.p_rank = profiled
        first = np.zeros(len(self.jobs) + 1, dtype=np.int64)
        first[1:] = np.cumsum(np.bincount(self.r_job, minlength=len(self.jobs)))
        start = first[self.r_job[profiled]]
        n = self.r_nranks[profiled]
        pos = self.r_rank[profiled]
        self.p_next = start + (pos + g) % n  # global rank index of the next host's same GPU
        self.p_prev = start + (pos - g) % n
        self.p_ring = self.r_job[profiled] * g + self.r_gpu[profiled]
        self.p_steps = 8

    def _proxy_batch(self, t: float, now: datetime) -> pa.RecordBatch | None:
        """Per profiled rank and channel, a send row (to the ring's next rank) and a receive row
        (from the previous), with wait states as the plugin reports them: ``SendWait`` is the
        hop's wire time; the ring runs at its slowest hop's pace, so on the other hops the GPU
        waits (``SendGPUWait``, ``RecvGPUWait``) take up the slack and ``RecvWait`` grows a little.
        A compute straggler shows as its neighbours' ``RecvWait``/``SendPeerWait`` and its own
        ``SendGPUWait``, never as wire time."""
        r = self.p_rank
        if not r.size:
            return None
        rng, f, ch = self.proxy_rng, self.fabric, self.nccl_channels
        nranks = self.r_nranks[r].astype(np.float64)
        per_channel = float(self.msg_bytes) * 2 * (nranks - 1) / nranks / ch
        _, _, speed, _ = self._link_state(t)
        nic_speed = np.zeros(f.n_ports)
        nic_speed[self.ends] = np.tile(speed, 2)
        hop_speed = np.minimum(nic_speed[self.r_nic[r]], nic_speed[self.r_nic[self.p_next]])
        base = per_channel * 8 * ch / (0.8 * np.maximum(hop_speed, 1.0))  # the channels share the NIC
        wire = base[:, None] * np.exp(rng.normal(0, 0.02, (r.size, ch)))
        common = np.ones(r.size)
        straggle = np.zeros(r.size)  # seconds a rank's GPU is late per channel
        if self.active(t, "checkpoint_burst") or self._checkpoint_on_compute(t):
            common *= 1.3  # fabric-wide: every hop alike
        for fl in self.faults:
            if not fl.active(t):
                continue
            if fl.kind in ("job_slowdown", "slow_step"):
                common[self.r_job[r] == self.job_names.index(fl.job)] *= 1 + fl.magnitude
            elif fl.kind == "slow_hop":
                j = self.job_names.index(fl.job)
                src = np.flatnonzero((self.r_job[r] == j) & (self.r_rank[r] == fl.rank))
                cols = slice(None) if fl.channel is None else fl.channel
                wire[src, cols] *= 1 + fl.magnitude
            elif fl.kind == "nccl_slow_path":
                leaf = f.node_names.index(fl.node)
                behind = (self.r_leaf[r] == leaf) | (self.r_leaf[self.p_next] == leaf)
                wire[behind, fl.channel] *= 1 + fl.magnitude
            elif fl.kind == "straggler" and fl.job in self.job_names[:PROFILED_JOBS]:
                j = self.job_names.index(fl.job)
                straggle[(self.r_job[r] == j) & (self.r_rank[r] == fl.rank)] = fl.magnitude * float(
                    base.mean()
                )
        wire *= common[:, None]
        # The ring's pace: its slowest hop, per channel.
        pace = np.zeros((int(self.p_ring.max()) + 1, ch))
        np.maximum.at(pace, self.p_ring, wire)
        slack = pace[self.p_ring] - wire
        w0 = base[:, None] * common[:, None]
        late = straggle[:, None]
        pos = {int(g): i for i, g in enumerate(r.tolist())}
        nxt = np.array([pos[int(x)] for x in self.p_next.tolist()])  # row of each rank's receiver
        prv = np.array([pos[int(x)] for x in self.p_prev.tolist()])
        noise = lambda: np.exp(rng.normal(0, 0.02, (r.size, ch)))  # noqa: E731
        ring_late = np.zeros((int(self.p_ring.max()) + 1, 1))
        np.maximum.at(ring_late, self.p_ring, late)
        send = {
            "send_gpu_wait_seconds": (0.1 * w0 + 0.9 * slack + late + 0.5 * ring_late[self.p_ring]) * noise(),
            "send_peer_wait_seconds": (0.02 * w0 + late[nxt]) * noise(),  # the receiver frees buffers late
            "send_wait_seconds": wire * np.exp(rng.normal(0, 0.01, (r.size, ch))),
        }
        # Receive rows: rank i receives the hop prev(i) -> i.
        recv = {
            "recv_wait_seconds": (wire[prv] + 0.1 * slack[prv] + late[prv]) * noise(),
            "recv_flush_wait_seconds": 0.01 * w0 * noise(),
            "recv_gpu_wait_seconds": (0.05 * w0 + 0.8 * slack[prv] + 0.5 * ring_late[self.p_ring]) * noise(),
        }
        n = r.size * ch
        both = 2 * n
        rows = np.tile(np.repeat(r, ch), 2)
        chan = np.tile(np.arange(ch, dtype=np.int16), 2 * r.size)
        peer_g = np.concatenate([np.repeat(self.p_next, ch), np.repeat(self.p_prev, ch)])
        is_recv = np.repeat(np.array([0, 1], dtype=np.int8), n)
        cols: dict[str, pa.Array] = {
            "time": pa.array(np.full(both, np.datetime64(now.replace(tzinfo=None), "us")), type=TS),
            "job": pa.DictionaryArray.from_arrays(
                pa.array(self.r_job[rows].astype(np.int32)), pa.array(self.job_names)
            ),
            "communicator": pa.DictionaryArray.from_arrays(
                pa.array(self.r_job[rows].astype(np.int32)), pa.array([f"{j}:world" for j in self.job_names])
            ),
            "rank": pa.array(self.r_rank[rows].astype(np.int32)),
            "host": pa.DictionaryArray.from_arrays(
                pa.array(self.r_host[rows].astype(np.int32)), pa.array(f.node_names)
            ),
            "device": pa.array(self.r_gpu[rows].astype(np.int16)),
            "collective": pa.DictionaryArray.from_arrays(
                pa.array(np.zeros(both, dtype=np.int8)), pa.array(["AllReduce"])
            ),
            "seq": pa.array(np.full(both, self.seq, dtype=np.int64)),
            "channel": pa.array(chan),
            "peer": pa.array(self.r_rank[peer_g].astype(np.int32)),
            "direction": pa.DictionaryArray.from_arrays(pa.array(is_recv), pa.array(["send", "recv"])),
            "steps": pa.array(np.full(both, self.p_steps, dtype=np.int32)),
            "bytes": pa.array(np.tile(np.repeat(per_channel, ch), 2).astype(np.int64)),
            "duration_seconds": pa.array(np.tile((pace[self.p_ring] + late).ravel() * 1.05, 2)),
            "port": f.key_array.take(pa.array(self.r_nic[rows])).cast(pa.string()),
            "net_device": pa.array(np.zeros(both, dtype=np.int16)),
            "qp_num": pa.array(0x100 + rows.astype(np.int64) * 2 * ch + chan * 2 + is_recv),
            "qps": pa.array(np.ones(both, dtype=np.int16)),
        }
        for name, vals in send.items():
            cols[name] = pa.array(np.concatenate([vals.ravel(), np.full(n, np.nan)]), from_pandas=True)
        for name, vals in recv.items():
            cols[name] = pa.array(np.concatenate([np.full(n, np.nan), vals.ravel()]), from_pandas=True)
        return make_batch(NCCL_PROXY, both, cols)

    def _hop_pacing(self, t: float, nccl: pa.RecordBatch | None) -> pa.RecordBatch | None:
        """A slow hop paces its whole ring: its channels run slower on every rank of the job
        (about half a channel's time is the network), which per-rank timings cannot localize."""
        hops = [fl for fl in self.active(t, "slow_hop")]
        if nccl is None or not hops:
            return nccl
        job = nccl.column("job").indices.to_numpy(zero_copy_only=False)
        chan = nccl.column("channel").to_numpy(zero_copy_only=False)
        factor = np.ones(nccl.num_rows)
        for fl in hops:
            hit = job == self.job_names.index(fl.job)
            if fl.channel is not None:
                hit &= chan == fl.channel
            factor[hit] = np.maximum(factor[hit], 1 + 0.5 * fl.magnitude)
        i = nccl.schema.get_field_index("duration_seconds")
        dur = nccl.column(i).to_numpy(zero_copy_only=False) * factor
        return nccl.set_column(i, nccl.schema.field(i), pa.array(dur))


def _storage_links(f: Fabric) -> np.ndarray:
    """Per link: on the storage network (a storage NIC's link, or any link of the switches
    behind the storage NICs, up to their spines)."""
    L = len(f.link_a)
    if "storage" not in f.purpose:
        return np.zeros(L, dtype=bool)
    nic = np.asarray([p == "storage" for p in f.purpose])
    nodes = set(f.node_of_port[f.peer[nic & (f.peer >= 0)]].tolist())
    leaf_ports = np.isin(f.node_of_port, list(nodes))
    up = f.peer[leaf_ports & (f.peer >= 0)]
    nodes |= {int(n) for n in f.node_of_port[up] if f.node_roles[int(n)] != "host"}
    on = nic | np.isin(f.node_of_port, list(nodes))
    return on[f.link_a] | on[f.link_b]


def _outages(fl: Fault) -> list[tuple[float, float]]:
    """Down windows of a retrain (one) or a flap (several, spread over the fault window)."""
    if fl.kind == "short_retrain":
        return [(fl.start_s, fl.start_s + min(fl.magnitude, 29.0))]
    if fl.kind in FAULT_PATH_KINDS:
        return [(fl.start_s, fl.end_s)]  # the rank's NIC link, down for the fault's window
    n = max(1, int(fl.magnitude))
    span = (fl.end_s - fl.start_s) / n
    return [(fl.start_s + i * span, fl.start_s + i * span + min(15.0, span / 2)) for i in range(n)]


def truth_document(sim: FabricSim) -> dict:
    """Ground truth as written to ``truth.json``."""
    cfg = sim.cfg
    return {
        "version": 1,
        "seed": cfg.seed,
        "hosts": cfg.topology.hosts,
        "ports": sim.fabric.n_ports,
        "interval_s": cfg.interval_s,
        "duration_s": cfg.duration_s,
        "start": cfg.start.isoformat(),
        "faults": [f.to_json() for f in sim.faults],
        "polls": math.floor(cfg.duration_s / cfg.interval_s) + 1,
    }
