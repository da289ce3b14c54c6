"""Time the UFM Telemetry Prometheus parser against prometheus_client on one scrape.

Builds a rail-optimized fat tree with about ``--ports`` ports, renders one UFM Telemetry
Prometheus scrape of ``--counters`` counters per port (UFM's label layout: ``source``,
``node_guid``, ``port_guid``, ``port_num``, each GUID spelled differently, millisecond
timestamps), then times:

* ``parse_prometheus`` cold (first scrape: every port's GUIDs normalized and resolved to port
  keys) and warm (the next scrapes: ports come from the label cache), text -> canonical batch;
* ``prometheus_client.parser.text_string_to_metric_families`` on the first ``--prom-ports`` ports
  of the same payload (it is too slow for the whole of it), iterating every sample, and
  extrapolated to the full payload per sample.

Run: ``python bench/bench_ufm_parse.py [--ports 500000] [--counters 30] [--prom-ports 20000]``.
"""

from __future__ import annotations

import argparse
import math
import resource
import time

import numpy as np
import pyarrow as pa

from graywire.collectors.ufm.ports import PortKeys, SpellingCache
from graywire.collectors.ufm.telemetry import parse_prometheus
from graywire.fabricsim.topology import TopologySpec, build_fabric
from graywire.fabricsim.ufm_server import _Ports, prometheus_text

#: 30 counters as UFM Telemetry names them: PM extended counters, PHY statistics, FEC, gauges.
COUNTERS = (
    "PortXmitDataExtended", "PortRcvDataExtended", "PortXmitPktsExtended", "PortRcvPktsExtended",
    "SymbolErrorCounterExtended", "LinkErrorRecoveryCounterExtended", "LinkDownedCounterExtended",
    "PortRcvErrorsExtended", "PortXmitDiscardsExtended", "PortXmitWaitExtended",
    "PortRcvRemotePhysicalErrorsExtended", "PortRcvSwitchRelayErrorsExtended",
    "LocalLinkIntegrityErrorsExtended", "ExcessiveBufferOverrunErrorsExtended",
    "phy_received_bits", "phy_corrected_bits", "phy_symbol_errors", "phy_effective_errors",
    "phy_raw_errors_lane0", "phy_raw_errors_lane1", "phy_raw_errors_lane2", "phy_raw_errors_lane3",
    "rs_fec_corrected_blocks", "rs_fec_uncorrectable_blocks", "raw_ber", "eff_ber", "symbol_ber",
    "fec_mode_active", "CableInfo_Temperature", "PortXmitWait",
)  # fmt: skip
FLOATS = {"raw_ber", "eff_ber", "symbol_ber"}


def payload(n_ports: int, n_counters: int, seed: int = 0) -> tuple[bytes, object, int]:
    """One scrape of a fabric with about ``n_ports`` ports; returns (text, fabric, lines)."""
    hosts = max(1, math.ceil(n_ports / 32))  # 8 NICs + 16 leaf + 8 spine ports per 8-GPU host
    fabric = build_fabric(TopologySpec(hosts=hosts))
    labels = _Ports(fabric).labels
    rng = np.random.default_rng(seed)
    names = [COUNTERS[i % len(COUNTERS)] + ("" if i < len(COUNTERS) else f"_{i}") for i in range(n_counters)]
    metrics = []
    for name in names:
        if name in FLOATS:
            vals = pa.array(rng.uniform(1, 9, fabric.n_ports) * 1e-9)
        elif name == "fec_mode_active":
            vals = pa.array(np.full(fabric.n_ports, 14, np.uint64))
        else:
            vals = pa.array(rng.integers(0, 10**13, fabric.n_ports, dtype=np.uint64))
        metrics.append((name, vals))
    text = prometheus_text(metrics, labels, 1_767_571_240_000)
    return text, fabric, fabric.n_ports * n_counters


def head_of(text: bytes, n_ports_total: int, n_keep: int) -> tuple[bytes, int]:
    """The first ``n_keep`` ports of every family (a smaller, equally shaped payload)."""
    out, lines = [], 0
    for block in text.split(b"# HELP ")[1:]:
        rows = block.split(b"\n")
        out.append(b"# HELP " + b"\n".join(rows[: 2 + n_keep]) + b"\n")
        lines += min(n_keep, n_ports_total)
    return b"".join(out), lines


def rss_gb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ports", type=int, default=500_000)
    ap.add_argument("--counters", type=int, default=30)
    ap.add_argument("--warm", type=int, default=2, help="warm (cached) parses to time")
    ap.add_argument("--prom-ports", type=int, default=20_000, help="ports given to prometheus_client")
    args = ap.parse_args(argv)

    t0 = time.perf_counter()
    text, fabric, lines = payload(args.ports, args.counters)
    print(
        f"payload: {fabric.n_ports:,} ports x {args.counters} counters = {lines:,} samples, "
        f"{len(text) / 1e9:.2f} GB, rendered in {time.perf_counter() - t0:.1f} s"
    )

    keys, cache = PortKeys(fabric), SpellingCache()
    t0 = time.perf_counter()
    batch = parse_prometheus(text, keys, cache)
    cold = time.perf_counter() - t0
    warm = []
    for _ in range(args.warm):
        t0 = time.perf_counter()
        batch = parse_prometheus(text, keys, cache)
        warm.append(time.perf_counter() - t0)
    best = min(warm) if warm else cold
    print(f"graywire parse_prometheus: cold {cold:.2f} s ({lines / cold / 1e6:.2f} M samples/s), "
          f"warm {best:.2f} s ({lines / best / 1e6:.2f} M samples/s); "
          f"{batch.num_rows:,} ports in the batch; peak RSS {rss_gb():.1f} GB")  # fmt: skip

    from prometheus_client.parser import text_string_to_metric_families

    n_keep = min(args.prom_ports, fabric.n_ports)
    small, _ = head_of(text, fabric.n_ports, n_keep)
    small_str = small.decode()
    t0 = time.perf_counter()
    count = sum(len(fam.samples) for fam in text_string_to_metric_families(small_str))
    prom = time.perf_counter() - t0
    rate = count / prom
    full = lines / rate
    note = ""
    if n_keep < fabric.n_ports:
        note = f" (measured on {n_keep:,} ports = {count:,} samples, extrapolated)"
    print(f"prometheus_client: {rate / 1e6:.3f} M samples/s, {full:.1f} s for the full payload{note}")
    print(f"ratio: graywire warm is {full / best:.0f}x faster, cold {full / cold:.0f}x")


if __name__ == "__main__":
    main()
