"""Time the UFM Telemetry parsers (Prometheus text and CSV) against pyarrow's raw CSV read.

Builds a rail-optimized fat tree with about ``--ports`` ports and one scrape of ``--counters``
counters per port, written twice with the same values: as UFM Telemetry Prometheus text (UFM's
label layout: ``source``, ``node_guid``, ``port_guid``, ``port_num``, each GUID spelled
differently, millisecond timestamps) and as UFM Telemetry CSV (wide: one row per port, one
column per counter, microsecond timestamps). Then, in the same run:

* the reference: ``pyarrow.csv.read_csv`` of the CSV bytes (types inferred);
* the floor of any Prometheus parser built on Arrow: ``read_csv`` of the Prometheus text cut
  at ``}`` (one pass over the text, which is about nine times the CSV's size);
* ``parse_prometheus`` and ``parse_csv``, text -> canonical ``port_sample`` batch, cold (a fresh
  port-key table and label cache: every port's GUIDs normalized and resolved) and warm (ports
  from the cache, as on every later poll), each with its ratio to the reference;
* optionally ``prometheus_client.parser.text_string_to_metric_families`` on the first
  ``--prom-ports`` ports of the Prometheus text, extrapolated per sample to the whole payload.

Every figure is the best of ``--repeat`` runs, in wall time and in CPU time of all threads (on a
shared machine the best run is the least disturbed, and CPU time the steadier). Nothing fails
on a number.

Run: ``python bench/bench_ufm_parse.py [--ports 500000] [--counters 30] [--repeat 3] [--prom-ports 5000]``.
"""

from __future__ import annotations

import argparse
import math
import resource
import time
from collections.abc import Callable

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pcsv

from graywire.collectors.model import Fabric
from graywire.collectors.ufm.ports import PortKeys, SpellingCache
from graywire.collectors.ufm.telemetry import parse_csv, parse_prometheus
from graywire.fabricsim.topology import TopologySpec, build_fabric
from graywire.fabricsim.ufm_server import _bytes_of, _hex, _join, _Ports, prometheus_text

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
TS_MS = 1_767_571_240_000


def scrape(n_ports: int, n_counters: int, seed: int = 0) -> tuple[Fabric, bytes, bytes]:
    """One scrape of a fabric with about ``n_ports`` ports: (fabric, Prometheus text, CSV)."""
    hosts = max(1, math.ceil(n_ports / 32))  # 8 NICs + 16 leaf + 8 spine ports per 8-GPU host
    fabric = build_fabric(TopologySpec(hosts=hosts))
    ports = _Ports(fabric)
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
        metrics.append((name, pc.cast(vals, pa.string())))
    prom = prometheus_text(metrics, ports.labels, TS_MS)
    # UFM's CSV header and spellings: the source id with 0x and zeros, the GUIDs bare.
    header = ["timestamp", "source_id", "tag", "node_guid", "port_guid", "port_num", *names]
    short = _hex(ports.guid, "", 1)
    row: list[pa.Array | str] = [f"{TS_MS * 1000},", _hex(ports.guid, "0x", 16), ",,", short, ",", short, ","]
    row.append(pc.cast(pa.array(ports.num), pa.string()))
    for _, vals in metrics:
        row += [",", vals]
    row.append("\n")
    csv = (",".join(header) + "\n").encode() + _bytes_of(_join(row))
    return fabric, prom, csv


def best_of(
    repeat: int, run: Callable[[], object], setup: Callable[[], object] | None = None
) -> tuple[float, float]:
    """The shortest wall time and the shortest CPU time (all threads) of ``repeat`` calls of
    ``run`` (``setup`` untimed before each). CPU time is the steadier figure on a shared machine."""
    wall = cpu = math.inf
    for _ in range(repeat):
        if setup is not None:
            setup()
        t0, c0 = time.perf_counter(), time.process_time()
        run()
        wall, cpu = min(wall, time.perf_counter() - t0), min(cpu, time.process_time() - c0)
    return wall, cpu


def time_parse(
    parse: Callable[..., pa.RecordBatch], text: bytes, fabric: Fabric, repeat: int
) -> tuple[tuple[float, float], tuple[float, float]]:
    """(cold, warm) (wall, CPU) seconds: cold with a fresh port-key table and cache each run,
    warm reusing one."""
    state: list[tuple[PortKeys, SpellingCache]] = []

    def fresh() -> None:
        state[:] = [(PortKeys(fabric), SpellingCache())]

    def run() -> None:
        batch = parse(text, *state[0])
        assert batch.num_rows == fabric.n_ports, batch.num_rows

    return best_of(repeat, run, fresh), best_of(repeat, run)


def split_prometheus(text: bytes) -> pa.Table:
    """pyarrow's CSV reader over the Prometheus text cut at "}" (comments skipped): the one pass
    over the whole text that a parser built on it cannot avoid."""
    return pcsv.read_csv(
        pa.py_buffer(text),
        read_options=pcsv.ReadOptions(column_names=["head", "tail"], block_size=4 << 20),
        parse_options=pcsv.ParseOptions(
            delimiter="}", quote_char=False, escape_char=False, invalid_row_handler=lambda row: "skip"
        ),
        convert_options=pcsv.ConvertOptions(column_types={"head": pa.string(), "tail": pa.string()}),
    )


def rss_gb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ports", type=int, default=500_000)
    ap.add_argument("--counters", type=int, default=30)
    ap.add_argument("--repeat", type=int, default=3, help="runs of each timing; the best is printed")
    ap.add_argument(
        "--prom-ports", type=int, default=5_000, help="ports given to prometheus_client (0: skip it)"
    )
    args = ap.parse_args(argv)

    t0 = time.perf_counter()
    fabric, prom, csv = scrape(args.ports, args.counters)
    samples = fabric.n_ports * args.counters
    print(
        f"payload: {fabric.n_ports:,} ports x {args.counters} counters = {samples:,} samples; "
        f"Prometheus text {len(prom) / 1e6:,.0f} MB, CSV {len(csv) / 1e6:,.0f} MB; "
        f"rendered in {time.perf_counter() - t0:.1f} s"
    )

    ref, ref_cpu = best_of(args.repeat, lambda: pcsv.read_csv(pa.py_buffer(csv)))
    print(
        f"reference, read_csv of the CSV: {ref * 1e3:7,.0f} ms (CPU {ref_cpu * 1e3:,.0f} ms), "
        f"{samples / ref / 1e6:.1f} M samples/s"
    )
    floor, floor_cpu = best_of(args.repeat, lambda: split_prometheus(prom))
    print(
        f"floor of Prometheus, read_csv of its text cut at '}}': {floor * 1e3:,.0f} ms "
        f"(CPU {floor_cpu * 1e3:,.0f} ms), {floor / ref:.1f}x the reference (CPU {floor_cpu / ref_cpu:.1f}x)"
    )
    t0 = time.perf_counter()
    PortKeys(fabric)
    print(f"port-key table of the fabric (once per collector): {(time.perf_counter() - t0) * 1e3:,.0f} ms")

    warm: dict[str, float] = {}
    for label, parse, text in (("prometheus", parse_prometheus, prom), ("csv", parse_csv, csv)):
        cold, hot = time_parse(parse, text, fabric, args.repeat)
        warm[label] = hot[0]
        for kind, (s, c) in (("cold", cold), ("warm", hot)):
            print(
                f"parse {label:<10} {kind}: {s * 1e3:7,.0f} ms  {samples / s / 1e6:6.1f} M samples/s  "
                f"{s / ref:5.1f}x the reference  (CPU {c * 1e3:,.0f} ms, {c / ref_cpu:.1f}x)"
            )
    print(f"peak RSS {rss_gb():.1f} GB")

    if args.prom_ports <= 0:
        return
    from prometheus_client.parser import text_string_to_metric_families

    n_keep = min(args.prom_ports, fabric.n_ports)
    families = prom.split(b"# HELP ")[1:]  # the first n_keep ports of every family
    small = b"".join(b"# HELP " + b"\n".join(f.split(b"\n")[: 2 + n_keep]) + b"\n" for f in families).decode()
    t0 = time.perf_counter()
    count = sum(len(fam.samples) for fam in text_string_to_metric_families(small))
    rate = count / (time.perf_counter() - t0)
    print(
        f"prometheus_client: {rate / 1e6:.3f} M samples/s on the first {n_keep:,} ports; "
        f"{samples / rate:,.0f} s for the whole payload, {samples / rate / warm['prometheus']:,.0f}x "
        "parse_prometheus warm"
    )


if __name__ == "__main__":
    main()
