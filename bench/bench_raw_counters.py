"""Cost of ``metrics.raw_counters`` on a large fabric: per poll and per scrape.

Run: ``python bench/bench_raw_counters.py [--ports 500000] [--polls 3] [--renders 2]
[--profile ib,roce]``.

A rail-optimized fat tree of about ``--ports`` ports (32 per 8-GPU host) is built and one
``port_sample`` batch per poll synthesized as in ``bench_pipeline.py``, with the counters of a
source profile: ``ib`` (what UFM or a host agent reports on InfiniBand: data, packets, the IBA
error counters, xmit wait, RS-FEC; no PFC, ECN or CNP), ``roce`` (Ethernet/RoCE: data,
packets, CRC, discards, FEC bits, ECN and CNP, PFC on one priority) or ``all`` (every counter
of the schema, the worst case). For each profile the published state is updated through
``StateBoard.observe_poll`` with the poll's rates (``CounterRates``) as the service does, with
raw counters off and on; then the exposition of the per-port families is timed with and
without them, the pieces dropped as a streaming server drops them once sent. Prints ms per
poll, series, MB and seconds per render, and peak RSS.
"""

from __future__ import annotations

import argparse
import math
import resource
import statistics
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
from prometheus_client.core import Metric

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_metrics import consume, series
from bench_pipeline import PortCollector

from graywire.collectors.model import Fabric
from graywire.collectors.schemas import PORT_COUNTERS
from graywire.detectors.rates import CounterRates
from graywire.fabricsim.topology import TopologySpec, build_fabric
from graywire.service.metrics.exporter import GraywireExporter
from graywire.service.state.fabric import StateBoard

IB = (
    "rx_bytes", "tx_bytes", "rx_packets", "tx_packets", "symbol_errors", "link_downed", "link_recovery",
    "rcv_errors", "rcv_remote_physical_errors", "rcv_switch_relay_errors", "rcv_constraint_errors",
    "local_link_integrity_errors", "excessive_buffer_overrun_errors", "xmit_discards",
    "xmit_constraint_errors", "vl15_dropped", "xmit_wait_ticks", "fec_corrected_blocks",
    "fec_uncorrectable_blocks", "fec_corrected_symbols",
)  # fmt: skip
ROCE = (
    "rx_bytes", "tx_bytes", "rx_packets", "tx_packets", "rcv_errors", "crc_errors", "xmit_discards",
    "fec_corrected_bits", "phy_received_bits", "fec_uncorrectable_blocks", "ecn_marked_packets",
    "cnp_sent", "cnp_handled", "pfc3_rx_pause_frames", "pfc3_tx_pause_frames", "pfc3_rx_pause_seconds",
    "pfc3_tx_pause_seconds",
)  # fmt: skip
PROFILES = {"ib": IB, "roce": ROCE, "all": PORT_COUNTERS}


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def with_only(batch: pa.RecordBatch, keep: tuple[str, ...]) -> pa.RecordBatch:
    """The batch with every counter outside ``keep`` null (what the source does not report)."""
    drop = set(PORT_COUNTERS) - set(keep)
    cols = [
        pa.nulls(batch.num_rows, f.type) if f.name in drop else batch.column(i)
        for i, f in enumerate(batch.schema)
    ]
    return pa.RecordBatch.from_arrays(cols, schema=batch.schema)


class PerPortOnly:
    """The exporter's per-port families alone (the service-wide ones are the same either way)."""

    def __init__(self, exporter: GraywireExporter) -> None:
        self.exporter = exporter

    def collect(self) -> Iterator[Metric]:
        s = self.exporter.board.current
        yield from self.exporter._ports(s)
        yield from self.exporter._raw_counters(s)


def bench(fabric: Fabric, profile: str, polls: int, renders: int) -> None:
    keep = PROFILES[profile]
    for raw in (False, True):
        collector = PortCollector(fabric)
        rates = CounterRates()
        board = StateBoard(fabric, per_port=True, raw_counters=raw)
        times = []
        for _ in range(polls + 1):
            batch = with_only(collector.batch(), keep)
            port_rates = rates.observe(batch)
            t = time.perf_counter()
            board.observe_poll([batch], port_rates, {}, {}, {})
            times.append(time.perf_counter() - t)
        poll_ms = 1e3 * statistics.median(times[1:])
        exporter = GraywireExporter(board)
        registry = PerPortOnly(exporter)
        render_times, size = [], 0
        for _ in range(renders):
            t = time.perf_counter()
            size = consume(registry)
            render_times.append(time.perf_counter() - t)
        print(
            f"{profile:4s} ports {fabric.n_ports:,}  raw_counters {'on ' if raw else 'off'}  "
            f"observe_poll {poll_ms:7.1f} ms  per-port series {series(registry):>11,}  {size / 1e6:8.1f} MB  "
            f"render best {min(render_times):6.2f} s  peak RSS {peak_rss_mb():,.0f} MB"
        )
        sys.stdout.flush()
        del board, exporter, registry


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ports", type=int, default=500_000)
    ap.add_argument("--polls", type=int, default=3)
    ap.add_argument("--renders", type=int, default=2)
    ap.add_argument("--profile", default="ib,roce")
    args = ap.parse_args()
    fabric = build_fabric(TopologySpec(hosts=max(1, math.ceil(args.ports / 32))))
    for profile in args.profile.split(","):
        bench(fabric, profile, args.polls, args.renders)


if __name__ == "__main__":
    main()
