"""NCCL Inspector plugin output -> nccl_timing rows (JSON) and an aggregate table (Prometheus).

The Inspector (NVIDIA/nccl ``plugins/profiler/inspector``) writes one file per process,
``<dump dir>/<hostname>-pid<pid>.log``, as compact JSON objects, one per line. Its layouts:

- v4.0: every record carries ``header`` (``id`` = communicator hash ``0x%lx``, ``rank``,
  ``n_ranks``, ``nnodes``; later versions add ``comm_name``), ``metadata``
  (``dump_timestamp_us``, ``hostname``, ``pid``, ...) and one body: ``coll_perf`` or ``p2p_perf``.
- v4.2 (and early v4.3 builds): each communicator's dump starts with a ``dump_stats`` marker
  (records written, records the ring overwrote); the records after it still carry header and
  metadata.
- v4.3 as documented, v4.4: the marker carries header and metadata once; the records after it
  are bare ``{"coll_perf": ...}`` / ``{"p2p_perf": ...}`` / ``{"proxy_trace": ...}`` lines that
  inherit them, so the parser keeps that context per file (:class:`InspectorParser`).

``coll_perf``: ``coll`` (``AllReduce``...), ``coll_sn``, ``coll_msg_size_bytes``,
``coll_exec_time_us`` (integer µs), ``coll_algobw_gbs``/``coll_busbw_gbs`` (decimal GB/s,
``"nan"`` for NaN), ``coll_timing_source`` (``kernel_gpu``, ``kernel_cpu``,
``collective_cpu``). With ``NCCL_INSPECTOR_DUMP_VERBOSE=1`` it adds ``event_trace_ts`` with
``coll_start_ts``/``coll_stop_ts`` and ``kernel_events[]`` of ``channel_id``,
``kernel_start_ts``, ``kernel_stop_ts``, ``kernel_record_ts``: all gettimeofday microseconds
(CPU callback times, the same clock as ``dump_timestamp_us``); ``event_trace_sn`` holds the
callbacks' sequence numbers (0 = the callback never came).

Rows: one whole-collective row per ``coll_perf`` (channel null, duration = exec time), plus
one row per channel of a verbose record (duration = kernel stop - start). ``start_time`` is
when the rank arrived: ``coll_start_ts`` for the whole row (else its first kernel start), the
kernel start for a channel row; a rank that enters late starts last and, since the collective
ends together on every rank, runs shortest (see detectors/nccl_straggler.py). A channel row's bus
bandwidth is the collective's scaled to that channel's pace (busbw x exec time / channel
time), so channels compare like with like. A row's time is its collective's last kernel stop
when the record is verbose, else the dump time. The JSON has no GPU index and no job id: the
GPU comes from a resolver (the process's NCCL_DEBUG log, see :mod:`graywire.collectors.nccl.debug_log`)
or from ``gpus_per_host`` (rank % gpus_per_host, only where the communicator spans whole
hosts), and the job from configuration. P2P and proxy records are counted, not made rows.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from graywire.collectors.nccl.common import GBPS_TO_BPS, TimingRows, as_float, as_int, in_range, plausible_us

_I32 = 2**31
_I64 = 2**63
#: A collective longer than a day is not a timing (and would not fit the arithmetic below).
_MAX_EXEC_US = 86_400e6

#: (host, pid, rank, nranks) -> CUDA device index, or None when unknown.
DeviceResolver = Callable[[str, int, int, int | None], int | None]
#: (host, pid, rank, channel) -> transport ("NET/IB", ...), or None when unknown.
TransportResolver = Callable[[str, int, int, int], str | None]


class RecordError(ValueError):
    """A record that cannot become rows; the message says why."""


@dataclass
class InspectorParser:
    """Stateful parser for one Inspector file (or one push body): holds the v4.3 dump context.

    Malformed lines and unusable records are skipped and counted (``skipped``, with the first
    reasons in ``problems``) unless ``strict``, where the first one raises ``RecordError``.
    """

    job: str
    device_of: DeviceResolver | None = None
    transport_of: TransportResolver | None = None
    gpus_per_host: int | None = None
    short_hostnames: bool = False
    whole_rows: bool = True
    channel_rows: bool = True
    strict: bool = False
    header: dict[str, Any] | None = None
    metadata: dict[str, Any] | None = None
    records: int = 0  # coll_perf records turned into rows
    ignored: int = 0  # p2p_perf / proxy_trace / dump_stats records (valid, not timed here)
    skipped: int = 0
    dropped: int = 0  # collectives the Inspector's ring overwrote before dumping (dump_stats)
    problems: list[str] = field(default_factory=list)

    def _problem(self, where: str, reason: str) -> None:
        if self.strict:
            raise RecordError(f"{where}: {reason}" if where else reason)
        self.skipped += 1
        if len(self.problems) < 5:
            self.problems.append(f"{where}: {reason}" if where else reason)

    def feed_lines(
        self, lines: Iterable[bytes | str], rows: TimingRows, where: str = "", first_line: int = 1
    ) -> None:
        """Parse complete JSON lines (blank lines are fine); ``first_line`` numbers them in messages."""
        for i, raw in enumerate(lines, first_line):
            text = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else raw
            text = text.strip()
            if not text:
                continue
            try:
                rec = json.loads(text)
            except json.JSONDecodeError as e:
                self._problem(f"{where}line {i}", f"not JSON ({e.msg} at column {e.colno})")
                continue
            self.feed_record(rec, rows, f"{where}line {i}")

    def feed_record(self, rec: Any, rows: TimingRows, where: str = "") -> None:
        if not isinstance(rec, dict):
            self._problem(where, f"expected a JSON object, got {type(rec).__name__}")
            return
        if "dump_stats" in rec:
            self._marker(rec, where)
            return
        body = rec.get("coll_perf")
        if body is None:
            if any(k in rec for k in ("p2p_perf", "proxy_trace")):
                self.ignored += 1
            else:
                self._problem(
                    where, f"no coll_perf, p2p_perf, proxy_trace or dump_stats in {sorted(rec)[:5]}"
                )
            return
        header = rec.get("header", self.header)
        metadata = rec.get("metadata", self.metadata)
        if not isinstance(header, dict) or not isinstance(metadata, dict):
            self._problem(
                where, "coll_perf record without header/metadata (a v4.3 record before its dump_stats marker)"
            )
            return
        if not isinstance(body, dict):
            self._problem(where, "coll_perf is not an object")
            return
        try:
            self._coll(header, metadata, body, rows)
        except RecordError as e:
            self._problem(where, str(e))
            return
        self.records += 1

    def _marker(self, rec: dict[str, Any], where: str) -> None:
        stats = rec.get("dump_stats")
        if isinstance(rec.get("header"), dict) and isinstance(rec.get("metadata"), dict):
            self.header, self.metadata = rec["header"], rec["metadata"]
        else:
            self._problem(where, "dump_stats marker without header/metadata")
            return
        if isinstance(stats, dict):
            self.dropped += as_int(stats.get("coll_dropped_since_last_dump")) or 0
        self.ignored += 1

    def _coll(
        self, header: dict[str, Any], metadata: dict[str, Any], body: dict[str, Any], rows: TimingRows
    ) -> None:
        comm = header.get("id")
        rank = as_int(header.get("rank"))
        coll = body.get("coll")
        exec_us = as_float(body.get("coll_exec_time_us"))
        if not isinstance(comm, str) or not comm:
            raise RecordError("header.id (communicator hash) missing")
        if rank is None or not 0 <= rank < _I32:
            raise RecordError(f"header.rank {_short(header.get('rank'))} is not a rank")
        if not isinstance(coll, str) or not coll:
            raise RecordError("coll_perf.coll missing")
        if exec_us is None or not 0 <= exec_us <= _MAX_EXEC_US:
            raise RecordError(
                f"coll_perf.coll_exec_time_us {_short(body.get('coll_exec_time_us'))} is not a duration"
            )
        nranks = in_range(as_int(header.get("n_ranks")), 0, _I32)
        nnodes = in_range(as_int(header.get("nnodes")), 0, _I32)
        host = metadata.get("hostname") if isinstance(metadata.get("hostname"), str) else None
        if host and self.short_hostnames:
            host = host.split(".", 1)[0]
        pid = in_range(as_int(metadata.get("pid")), 0, _I64)
        device = None
        if self.device_of is not None and host is not None and pid is not None:
            device = self.device_of(host, pid, rank, nranks)
        g = self.gpus_per_host
        if device is None and g and nranks and nnodes and nnodes * g == nranks:
            device = rank % g  # host-major ranks over whole hosts: local rank = GPU index
        seq = in_range(as_int(body.get("coll_sn")), 0, _I64)
        size = in_range(as_int(body.get("coll_msg_size_bytes")), 0, _I64)
        busbw = as_float(body.get("coll_busbw_gbs"))
        trace = body.get("event_trace_ts") if isinstance(body.get("event_trace_ts"), dict) else {}
        channels = self._channels(body, trace) if self.channel_rows else []
        # When it was observed: the last kernel stop (CPU clock), else the dump that wrote it.
        dumped = as_int(metadata.get("dump_timestamp_us"))
        observed = max((stop for _, _, stop in channels), default=None) or (
            dumped if dumped is not None and plausible_us(dumped) else None
        )
        common = dict(
            job=self.job,
            communicator=comm,
            rank=rank,
            nranks=nranks,
            host=host,
            device=device,
            collective=coll,
            seq=seq,
            message_bytes=size,
            observed_us=observed,
        )
        if self.whole_rows:
            rows.add(
                **common,
                channel=None,
                duration_seconds=exec_us / 1e6,
                bus_bandwidth_bps=busbw * GBPS_TO_BPS if busbw is not None else None,
                start_us=self._arrival(body, trace, channels),
            )
        for ch, start, stop in channels:
            dur = (stop - start) / 1e6
            bw = busbw * GBPS_TO_BPS * (exec_us / 1e6) / dur if busbw is not None and exec_us > 0 else None
            transport = None
            if self.transport_of is not None and host is not None and pid is not None:
                transport = self.transport_of(host, pid, rank, ch)
            rows.add(**common, channel=ch, duration_seconds=dur, bus_bandwidth_bps=bw, transport=transport,
                     start_us=start)  # fmt: skip

    @staticmethod
    def _arrival(
        body: dict[str, Any], trace: dict[str, Any], channels: list[tuple[int, int, int]]
    ) -> int | None:
        """When the rank entered the collective: ``coll_start_ts`` if its callback fired, else
        its first kernel start (both CPU gettimeofday µs on the rank's host)."""
        sn = body.get("event_trace_sn") if isinstance(body.get("event_trace_sn"), dict) else {}
        start = as_int(trace.get("coll_start_ts"))
        if start is not None and plausible_us(start) and as_int(sn.get("coll_start_sn")) != 0:
            return start
        return min((s for _, s, _ in channels), default=None)

    @staticmethod
    def _channels(body: dict[str, Any], trace: dict[str, Any]) -> list[tuple[int, int, int]]:
        """(channel, kernel start µs, kernel stop µs) of the channels whose kernel completed."""
        events = trace.get("kernel_events")
        if not isinstance(events, list):
            return []
        sn = body.get("event_trace_sn") if isinstance(body.get("event_trace_sn"), dict) else {}
        sn_events = sn.get("kernel_events")
        stopped = {
            as_int(e.get("channel_id")): as_int(e.get("kernel_stop_sn"))
            for e in (sn_events if isinstance(sn_events, list) else [])
            if isinstance(e, dict)
        }
        out = []
        for ev in events:
            if not isinstance(ev, dict):
                continue
            ch = in_range(as_int(ev.get("channel_id")), 0, 2**15)
            start, stop = as_int(ev.get("kernel_start_ts")), as_int(ev.get("kernel_stop_ts"))
            if ch is None or start is None or stop is None or not plausible_us(start) or stop <= start:
                continue  # the kernel stop never came (or clocks went backwards): no duration
            if not plausible_us(stop):
                continue
            if stopped.get(ch, 1) == 0:
                continue  # sequence number 0: the stop callback never fired
            out.append((ch, start, stop))
        return out


def _short(value: object) -> str:
    """A caller's value for an error message, cut short (a 400-digit number is not a message)."""
    text = repr(value)
    return text if len(text) <= 40 else f"{text[:37]}..."


def iter_json_values(text: str) -> Iterator[tuple[int, Any]]:
    """(line number, value) for each JSON value in ``text``: JSON lines, pretty-printed objects
    one after another, or one array of records. Raises ``ValueError`` naming the line."""
    dec = json.JSONDecoder()
    i, n = 0, len(text)
    while True:
        while i < n and text[i] in " \t\r\n":
            i += 1
        if i >= n:
            return
        line = text.count("\n", 0, i) + 1
        try:
            value, i = dec.raw_decode(text, i)
        except json.JSONDecodeError as e:
            raise ValueError(f"line {e.lineno} column {e.colno}: not valid JSON ({e.msg})") from None
        if isinstance(value, list):
            for v in value:
                yield line, v
        else:
            yield line, value


def parse_inspector_text(
    text: str,
    job: str,
    *,
    device_of: DeviceResolver | None = None,
    gpus_per_host: int | None = None,
    strict: bool = False,
) -> tuple[TimingRows, InspectorParser]:
    """Parse a whole Inspector document (a file, a README example, a push body)."""
    parser = InspectorParser(job, device_of=device_of, gpus_per_host=gpus_per_host, strict=strict)
    rows = TimingRows()
    for line, value in iter_json_values(text):
        parser.feed_record(value, rows, f"line {line}")
    return rows, parser


# -- Prometheus textfile mode ----------------------------------------------------------------------

_PROM_LINE = re.compile(
    r"^(?P<name>[a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(?P<labels>.*)\})?\s+(?P<value>\S+)(?:\s+\d+)?$"
)
_PROM_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')
_SIZE_BUCKET = re.compile(r"^(?P<lo>\d+)-(?P<hi>\d+)(?P<unit>B|KB|MB|GB|TB)$")
_UNIT = {"B": 1, "KB": 1024, "MB": 1024**2, "GB": 1024**3, "TB": 1024**4}
_GPU = re.compile(r"^GPU(\d+)$")


def parse_size_bucket(label: str) -> tuple[int | None, int | None]:
    """``4-5GB`` -> (4 GiB, 5 GiB): the Inspector buckets sizes by 1024-based units, lower inclusive."""
    if label == "0B":
        return 0, 0
    m = _SIZE_BUCKET.match(label)
    if not m:
        return None, None
    unit = _UNIT[m["unit"]]
    return int(m["lo"]) * unit, int(m["hi"]) * unit


def parse_inspector_prom(text: str, job: str | None = None) -> pa.Table:
    """The Inspector's Prometheus textfile (``nccl_inspector_metrics_<gpu uuid>.prom``) as a table.

    Not nccl_timing rows: each series is an aggregate over the dump interval (mean exec time,
    geometric-mean bandwidth) per node, GPU, communicator name, collective, algorithm/protocol
    and power-of-two size bucket. There is no rank, no sequence number and no exact size, so
    the rank/channel peer comparison cannot run on it; it suits node/GPU-level trends.
    Columns: job, host, device, communicator (``comm_name``), nnodes, nranks, collective
    (``p2p_operation`` for P2P), p2p, algo_proto, message_bytes_min/max, duration_seconds,
    bus_bandwidth_bps. A series missing one of the two metrics has null there.
    """
    series: dict[tuple[tuple[str, str], ...], dict[str, Any]] = {}
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        m = _PROM_LINE.match(line)
        if not m:
            raise ValueError(f"not a Prometheus sample line: {line[:80]!r}")
        labels = dict(_PROM_LABEL.findall(m["labels"] or ""))
        name = m["name"]
        try:
            value = float(m["value"])
        except ValueError:
            raise ValueError(f"{name}: value {m['value']!r} is not a number") from None
        key = tuple(sorted(labels.items()))
        entry = series.setdefault(key, {"labels": labels})
        if name in ("nccl_bus_bandwidth_gbs", "nccl_p2p_bus_bandwidth_gbs"):
            entry["busbw"] = value * GBPS_TO_BPS
            entry["p2p"] = name.startswith("nccl_p2p")
        elif name in ("nccl_collective_exec_time_microseconds", "nccl_p2p_exec_time_microseconds"):
            entry["dur"] = value / 1e6
            entry["p2p"] = name.startswith("nccl_p2p")
    cols: dict[str, list[Any]] = {
        k: []
        for k in (
            "job",
            "host",
            "device",
            "communicator",
            "nnodes",
            "nranks",
            "collective",
            "p2p",
            "algo_proto",
            "message_bytes_min",
            "message_bytes_max",
            "duration_seconds",
            "bus_bandwidth_bps",
        )
    }
    for entry in series.values():
        if "p2p" not in entry:
            continue  # stats counters (nccl_collectives_total ...) are not timings
        lab = entry["labels"]
        g = _GPU.match(lab.get("gpu", ""))
        lo, hi = parse_size_bucket(lab.get("message_size", ""))
        jid = lab.get("slurm_job_id")
        cols["job"].append(jid if jid and jid != "unknown" else job)
        cols["host"].append(lab.get("node"))
        cols["device"].append(int(g.group(1)) if g else None)
        cols["communicator"].append(lab.get("comm_name"))
        cols["nnodes"].append(as_int(lab.get("n_nodes")))
        cols["nranks"].append(as_int(lab.get("nranks")))
        cols["collective"].append(lab.get("p2p_operation") if entry["p2p"] else lab.get("collective"))
        cols["p2p"].append(entry["p2p"])
        cols["algo_proto"].append(lab.get("algo_proto"))
        cols["message_bytes_min"].append(lo)
        cols["message_bytes_max"].append(hi)
        cols["duration_seconds"].append(entry.get("dur"))
        cols["bus_bandwidth_bps"].append(entry.get("busbw"))
    types = {
        "device": pa.int16(),
        "nnodes": pa.int32(),
        "nranks": pa.int32(),
        "p2p": pa.bool_(),
        "message_bytes_min": pa.int64(),
        "message_bytes_max": pa.int64(),
        "duration_seconds": pa.float64(),
        "bus_bandwidth_bps": pa.float64(),
    }
    return pa.table({k: pa.array(v, types.get(k, pa.string())) for k, v in cols.items()})
