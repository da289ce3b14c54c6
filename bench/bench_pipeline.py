"""Throughput of the streaming pipeline at fabric scale: port samples and NCCL timings.

Run: ``python bench/bench_pipeline.py [--ports 10000,100000,500000] [--polls N]``.

For each size a rail-optimized fat tree with about that many ports is built (32 ports per
8-GPU host: 16,384 hosts give 524,288 ports), and ``port_sample`` batches in the canonical
schema are synthesized the way a collector sends them: one dictionary of port keys reused every
poll, every counter cumulative, speed/width/state gauges. After warm-up polls (the first builds
the key maps), ``--polls`` polls are timed through ``Pipeline.process`` with every default
detector (``default_detectors``: rates, then every port detector); a few links drop to half
speed mid-run so findings are built too. Batch construction is not timed.

The limit each poll is held to is measured on the same batches in the same run: one numpy pass
over the schema's counters (each column to float64, the delta from the last poll times 1/dt,
one threshold test folded into a mask), the least any rate-then-detect design must do.
The ratio printed is the pipeline's time over that limit's.

The NCCL line times the ``nccl_timing`` detectors (channel outlier, straggler, step time) on
ranks x channels rows per poll, one collective instance per poll, in communicators of 256
ranks, with one slow channel.
"""

from __future__ import annotations

import argparse
import math
import resource
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta

import numpy as np
import pyarrow as pa

from graywire.collectors.model import Fabric
from graywire.collectors.schemas import (
    LOGICAL_ACTIVE,
    NCCL_TIMING,
    PHYS_LINK_UP,
    PORT_COUNTERS,
    PORT_SAMPLE,
    TS,
    make_batch,
)
from graywire.detectors.pipeline import Pipeline, default_detectors, nccl_timing_detectors
from graywire.fabricsim.port_views import UFM_DEFAULT
from graywire.fabricsim.topology import TopologySpec, build_fabric
from graywire.service.memory_habits import keep_freed_memory

T0 = datetime(2026, 1, 5, tzinfo=UTC)
POLL_S = 10.0
G = 10**9


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


class PortCollector:
    """Cumulative port samples for every port of a fabric, one dictionary for every poll.

    The harness keeps a few bytes per port of its own (a per-port load level, a small
    congestion count, a pause share), not the counters: each poll's counter column is computed
    from them, so the RSS this bench reports is the pipeline's and its input batch's, not the
    generator's.
    """

    def __init__(self, fabric: Fabric, counters: tuple[str, ...] = PORT_COUNTERS, seed: int = 0) -> None:
        rng = np.random.default_rng(seed)
        n = fabric.n_ports
        self.n = n
        self.port = pa.DictionaryArray.from_arrays(pa.array(np.arange(n, dtype=np.int32)), fabric.key_array)
        self.source = pa.DictionaryArray.from_arrays(pa.array(np.zeros(n, np.int8)), pa.array(["ufm"]))
        self.phys = pa.array(np.full(n, PHYS_LINK_UP, np.uint8))
        self.logical = pa.array(np.full(n, LOGICAL_ACTIVE, np.uint8))
        self.fec = pa.array(np.full(n, 14, np.uint8))
        self.temp = pa.array(rng.normal(52, 3, n).astype(np.float32))
        self.speed = fabric.expected_speed_bps.copy()
        self.width = fabric.expected_width.astype(np.uint8)
        self.int_cols = [c for c in counters if not c.endswith("_seconds")]
        self.float_cols = [c for c in counters if c.endswith("_seconds")]
        # A healthy fabric under load: each port carries a load level in [300, 600]; bytes grow
        # by level x 1e9 a poll (30-60% of 800G for 10 s), packets of 4 KiB, the pre-FEC BER
        # near 1e-8, a little congestion (0-99 a poll), error counters still, so findings are
        # the injected ones. Each counter starts at its own multiple of the level (1e9-1e13).
        self.level = rng.integers(300, 601, n).astype(np.uint64)
        self.small = rng.integers(0, 100, n).astype(np.uint64)
        self.pause_share = rng.uniform(0, 1e-5, n)
        self.start = {c: np.uint64(rng.integers(3 * 10**6, 10**10)) for c in self.int_cols}
        self.step: dict[str, tuple[np.ndarray, np.uint64]] = {}
        for c in self.int_cols:
            if c.endswith("_bytes"):
                self.step[c] = (self.level, np.uint64(10**9))
            elif c.endswith("_packets") and c[:2] in ("rx", "tx"):
                self.step[c] = (self.level, np.uint64(250_000))
            elif c == "phy_received_bits":
                self.step[c] = (self.level, np.uint64(8 * 10**12 // 450))
            elif c.startswith("fec_corrected"):
                self.step[c] = (self.level, np.uint64(166))
            elif c in ("xmit_wait_ticks", "ecn_marked_packets", "cnp_sent", "cnp_handled") or "pause" in c:
                self.step[c] = (self.small, np.uint64(1))
        self.k = 0

    def batch(self) -> pa.RecordBatch:
        n = self.n
        k = self.k
        t = np.datetime64((T0 + timedelta(seconds=POLL_S * k)).replace(tzinfo=None), "us")
        self.k += 1
        cols: dict[str, pa.Array] = {
            "time": pa.array(np.full(n, t), type=TS),
            "port": self.port,
            "source": self.source,
            "phys_state": self.phys,
            "logical_state": self.logical,
            "speed_bps": pa.array(self.speed),
            "width": pa.array(self.width),
            "fec_mode": self.fec,
            "temperature_celsius": self.temp,
        }
        for c in self.int_cols:
            v = self.level * self.start[c]
            if c in self.step:
                per_port, scale = self.step[c]
                v += per_port * (scale * np.uint64(k))
            cols[c] = pa.array(v)
        for c in self.float_cols:
            cols[c] = pa.array(self.pause_share * k)
        return make_batch(PORT_SAMPLE, n, cols)

    def downgrade(self, fabric: Fabric, links: int) -> None:
        """Drop the first ``links`` host links to half speed, both ends."""
        hosts = np.flatnonzero(fabric.host_port)[: max(0, links)]
        ends = np.concatenate([hosts, fabric.peer[hosts]])
        self.speed[ends] //= 2


class NumpyLimit:
    """The one-pass reference: every counter's rate over the last poll and one test of it."""

    def __init__(self, counters: tuple[str, ...] = PORT_COUNTERS) -> None:
        self.counters = counters
        self.last: dict[str, np.ndarray] = {}
        self.t_last: np.ndarray | None = None

    def observe(self, batch: pa.RecordBatch) -> int:
        t = batch.column("time").cast(pa.int64()).to_numpy().astype(np.float64) * 1e-6
        per_s = 1.0 / (t - self.t_last) if self.t_last is not None else None
        flagged = np.zeros(batch.num_rows, bool)
        for c in self.counters:
            v = batch.column(c).to_numpy(zero_copy_only=False).astype(np.float64)
            if per_s is not None:
                rate = (v - self.last[c]) * per_s
                flagged |= rate > 1e12
            self.last[c] = v
        self.t_last = t
        return int(flagged.sum())


def bench_ports(target: int, polls: int, warmup: int, downgrades: int, counter_set: str = "all") -> None:
    t = time.perf_counter()
    rss0 = peak_rss_mb()
    counters = COUNTER_SETS[counter_set]
    fabric = build_fabric(TopologySpec(hosts=max(1, math.ceil(target / 32))))
    collector = PortCollector(fabric, counters)
    pipe = Pipeline(fabric, detectors=default_detectors(fabric))
    limit = NumpyLimit(counters)
    setup = time.perf_counter() - t

    first = 0.0
    for k in range(warmup):
        batch = collector.batch()
        t = time.perf_counter()
        pipe.process(batch)
        if k == 0:
            first = time.perf_counter() - t
        limit.observe(batch)
    pipe.stats.clear()

    times, limits, findings = [], [], 0
    for k in range(polls):
        if k == polls // 2:
            collector.downgrade(fabric, downgrades)
        batch = collector.batch()
        t = time.perf_counter()
        findings += len(pipe.process(batch))
        times.append(time.perf_counter() - t)
        t = time.perf_counter()
        limit.observe(batch)
        limits.append(time.perf_counter() - t)
        del batch

    n = fabric.n_ports
    mean = float(np.mean(times))
    st = pipe.stats
    per = ", ".join(
        f"{name} {1e3 * s.seconds / s.batches:.1f}"
        for name, s in sorted(st.items(), key=lambda kv: -kv[1].seconds)
        if s.seconds / s.batches >= 5e-4
    )
    median, ref = float(np.median(times)), float(np.median(limits))
    grown = max(0.0, peak_rss_mb() - rss0) * 2**20 / n
    print(
        f"{counter_set} ({len(counters)} counters)  ports {n:>9,}  {n / mean:>13,.0f} port-samples/s  "
        f"{1e3 * mean:8.1f} ms/poll "
        f"(median {1e3 * median:.1f}, max {1e3 * max(times):.1f})  "
        f"numpy one-pass limit {1e3 * ref:.1f} ms  ratio {median / ref:.2f} (target <= 2)  "
        f"first poll {1e3 * first:.0f} ms  findings {findings}  setup {setup:.1f} s  "
        f"peak RSS {peak_rss_mb():,.0f} MB ({grown:,.0f} B/port grown)\n    per stage ms: {per}",
        flush=True,
    )


def bench_nccl(ranks: int, channels: int, polls: int, warmup: int) -> None:
    rng = np.random.default_rng(1)
    hosts = math.ceil(ranks / 8)
    fabric = build_fabric(TopologySpec(hosts=hosts))
    per_comm = 256
    n = ranks * channels
    rank_of_row = np.repeat(np.arange(ranks), channels)
    comm_of_row = (rank_of_row // per_comm).astype(np.int32)
    n_comm = int(comm_of_row.max()) + 1
    names = [f"job-{j:03d}" for j in range(n_comm)]
    static = {
        "job": pa.DictionaryArray.from_arrays(pa.array(comm_of_row), pa.array(names)),
        "communicator": pa.DictionaryArray.from_arrays(
            pa.array(comm_of_row), pa.array([f"{j}:world" for j in names])
        ),
        "rank": pa.array((rank_of_row % per_comm).astype(np.int32)),
        "nranks": pa.array(np.full(n, per_comm, np.int32)),
        "host": pa.DictionaryArray.from_arrays(
            pa.array((rank_of_row // 8).astype(np.int32)), pa.array(fabric.node_names[:hosts])
        ),
        "device": pa.array((rank_of_row % 8).astype(np.int16)),
        "collective": pa.DictionaryArray.from_arrays(pa.array(np.zeros(n, np.int8)), pa.array(["AllReduce"])),
        "message_bytes": pa.array(np.full(n, 512 * 2**20, np.int64)),
        "channel": pa.array(np.tile(np.arange(channels, dtype=np.int16), ranks)),
        "transport": pa.DictionaryArray.from_arrays(pa.array(np.zeros(n, np.int8)), pa.array(["NET/IB"])),
    }
    slow_row = (ranks // 7) * channels + min(1, channels - 1)  # one channel of one rank

    def batch(k: int) -> pa.RecordBatch:
        dur = 0.014 * np.exp(rng.normal(0, 0.015, n))
        if k >= warmup:
            dur[slow_row] *= 1.3
        t = np.datetime64((T0 + timedelta(seconds=POLL_S * (k + 1))).replace(tzinfo=None), "us")
        cols = dict(static, time=pa.array(np.full(n, t), type=TS), duration_seconds=pa.array(dur),
                    seq=pa.array(np.full(n, k, np.int64)))  # fmt: skip
        return make_batch(NCCL_TIMING, n, cols)

    pipe = Pipeline(fabric, detectors=nccl_timing_detectors(fabric))
    for k in range(warmup):
        pipe.process(batch(k))
    times, findings = [], 0
    for k in range(warmup, warmup + polls):
        b = batch(k)
        t = time.perf_counter()
        findings += len(pipe.process(b))
        times.append(time.perf_counter() - t)
    mean, median = float(np.mean(times)), float(np.median(times))
    print(
        f"nccl {ranks:,} ranks x {channels} channels = {n:,} rows  {n / mean:>11,.0f} rows/s  "
        f"{1e3 * mean:8.1f} ms/poll (median {1e3 * median:.1f}, max {1e3 * max(times):.1f})  "
        f"findings {findings}  peak RSS {peak_rss_mb():,.0f} MB"
    )


COUNTER_SETS = {
    "all": PORT_COUNTERS,
    # What UFM Telemetry sends by default (fabricsim.port_views.UFM_DEFAULT): 13 counters.
    "ufm_default": tuple(c for c in PORT_COUNTERS if c in UFM_DEFAULT),
}


def main() -> None:
    keep_freed_memory()  # as the service runs (graywire.service.memory_habits)
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ports", default="10000,100000,500000", help="comma-separated port counts")
    ap.add_argument("--polls", type=int, default=10, help="timed polls per size")
    ap.add_argument("--warmup", type=int, default=2, help="untimed polls first (at least 1)")
    ap.add_argument("--downgrades", type=int, default=4, help="links dropped to half speed mid-run")
    ap.add_argument(
        "--counters",
        default="all,ufm_default",
        help="comma-separated counter sets: all (every counter of the schema), ufm_default",
    )
    ap.add_argument("--nccl-ranks", type=int, default=8192)
    ap.add_argument("--nccl-channels", type=int, default=4)
    ap.add_argument("--one", default=None, help=argparse.SUPPRESS)  # SIZE:SET, in a process of its own
    args = ap.parse_args()
    if args.polls < 1 or args.warmup < 1:
        ap.error("--polls and --warmup must be at least 1")
    sets = [c.strip() for c in args.counters.split(",") if c.strip()]
    if unknown := [c for c in sets if c not in COUNTER_SETS]:
        ap.error(f"unknown counter sets {unknown}; known: {sorted(COUNTER_SETS)}")
    if args.one:
        size, name = args.one.split(":")
        bench_ports(int(size), args.polls, args.warmup, args.downgrades, name)
        return
    # Each size and counter set in a fresh process: the peak RSS is that run's alone, not the
    # high-water mark of the sizes before it (whose freed heap the next would reuse).
    base = [sys.executable, __file__, "--polls", str(args.polls), "--warmup", str(args.warmup),
            "--downgrades", str(args.downgrades)]  # fmt: skip
    for name in sets:
        for size in (int(s) for s in args.ports.split(",") if s.strip()):
            subprocess.run([*base, "--one", f"{size}:{name}"], check=True)
    if args.nccl_ranks > 0:
        bench_nccl(args.nccl_ranks, args.nccl_channels, args.polls, max(args.warmup, 5))


if __name__ == "__main__":
    main()
