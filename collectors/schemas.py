"""Canonical Arrow record schemas (see docs/records.md).

One batch holds many entities at one poll. Counters stay cumulative; rates are computed later
by ``graywire.detectors.rates``. Units are base units, named in the column. A counter a source lacks is
null, never 0.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from enum import StrEnum
from typing import Any

import pyarrow as pa

TS = pa.timestamp("us", tz="UTC")

# Port state codes follow the InfiniBand PortInfo encodings; Ethernet sources map onto them
# (ifOperStatus up -> phys 5 / logical 4, down -> phys 3 / logical 1).
PHYS_LINK_UP = 5
PHYS_POLLING = 2
PHYS_DISABLED = 3
LOGICAL_DOWN = 1
LOGICAL_ACTIVE = 4

PFC_PRIORITIES = range(8)

#: Cumulative counters of a port sample; the rates stage turns each into ``<name>_per_second``.
PORT_COUNTERS: tuple[str, ...] = (
    "rx_bytes",
    "tx_bytes",
    "rx_packets",
    "tx_packets",
    "symbol_errors",
    "link_downed",
    "link_recovery",
    "rcv_errors",
    "rcv_remote_physical_errors",
    "rcv_switch_relay_errors",
    "rcv_constraint_errors",
    "local_link_integrity_errors",
    "excessive_buffer_overrun_errors",
    "crc_errors",
    "symbol_error_packets",
    "xmit_discards",
    "xmit_constraint_errors",
    "vl15_dropped",
    "xmit_wait_ticks",
    "fec_corrected_blocks",
    "fec_uncorrectable_blocks",
    "fec_corrected_symbols",
    "fec_corrected_bits",
    "phy_received_bits",
    "ecn_marked_packets",
    "cnp_sent",
    "cnp_handled",
    *(f"pfc{p}_{d}_pause_frames" for p in PFC_PRIORITIES for d in ("rx", "tx")),
    *(f"pfc{p}_{d}_pause_seconds" for p in PFC_PRIORITIES for d in ("rx", "tx")),
)

_FLOAT_COUNTERS = {c for c in PORT_COUNTERS if c.endswith("_seconds")}

PORT_SAMPLE = pa.schema(
    [
        pa.field("time", TS, nullable=False),
        pa.field("port", pa.dictionary(pa.int32(), pa.string()), nullable=False),
        pa.field("source", pa.dictionary(pa.int8(), pa.string()), nullable=False),
        # When the source itself sampled the row's counters, where it says (UFM Telemetry's
        # per-line timestamps); rates use it over ``time`` so scrape jitter does not alias.
        pa.field("source_time", TS),
        pa.field("phys_state", pa.uint8()),
        pa.field("logical_state", pa.uint8()),
        pa.field("speed_bps", pa.int64()),
        pa.field("width", pa.uint8()),
        pa.field("fec_mode", pa.uint8()),
        *(pa.field(c, pa.float64() if c in _FLOAT_COUNTERS else pa.uint64()) for c in PORT_COUNTERS),
        pa.field("fec_lane_errors", pa.list_(pa.uint64())),
        pa.field("temperature_celsius", pa.float32()),
    ],
    metadata={"graywire.record": "port_sample", "graywire.version": "1"},
)

LINK = pa.schema(
    [
        pa.field("a_port", pa.string(), nullable=False),
        pa.field("b_port", pa.string(), nullable=False),
        pa.field("source", pa.string(), nullable=False),
    ],
    metadata={"graywire.record": "link", "graywire.version": "1"},
)

NCCL_TIMING = pa.schema(
    [
        pa.field("time", TS, nullable=False),
        pa.field("job", pa.dictionary(pa.int32(), pa.string()), nullable=False),
        pa.field("communicator", pa.dictionary(pa.int32(), pa.string()), nullable=False),
        pa.field("rank", pa.int32(), nullable=False),
        pa.field("nranks", pa.int32()),
        pa.field("host", pa.dictionary(pa.int32(), pa.string())),
        pa.field("device", pa.int16()),
        pa.field("collective", pa.dictionary(pa.int8(), pa.string()), nullable=False),
        pa.field("seq", pa.int64()),
        pa.field("message_bytes", pa.int64()),
        pa.field("channel", pa.int16()),
        #: When this rank entered the collective (whole rows) or started the channel's kernel
        #: (channel rows), on the rank's host clock: arrival skew across ranks, where clocks agree.
        pa.field("start_time", TS),
        pa.field("duration_seconds", pa.float64(), nullable=False),
        pa.field("bus_bandwidth_bps", pa.float64()),
        pa.field("transport", pa.dictionary(pa.int8(), pa.string())),
    ],
    metadata={"graywire.record": "nccl_timing", "graywire.version": "1"},
)

#: How each rank of a communicator is wired, as its NCCL_DEBUG=INFO lines say: one row per
#: (communicator, rank) per view. A view replaces the previous one for the communicators it
#: lists. ``net_transport`` is the worst network transport of the rank's connections
#: (``NET/Socket`` over ``NET/IB``), null when none leaves the host; ``network`` is the
#: process's ``Using network X`` choice.
NCCL_TRANSPORT = pa.schema(
    [
        pa.field("time", TS, nullable=False),
        pa.field("job", pa.dictionary(pa.int32(), pa.string()), nullable=False),
        pa.field("communicator", pa.dictionary(pa.int32(), pa.string()), nullable=False),
        pa.field("rank", pa.int32(), nullable=False),
        pa.field("nranks", pa.int32()),
        pa.field("host", pa.dictionary(pa.int32(), pa.string())),
        pa.field("pid", pa.int64()),
        pa.field("device", pa.int16()),
        pa.field("port", pa.string()),
        pa.field("network", pa.dictionary(pa.int8(), pa.string())),
        pa.field("net_transport", pa.dictionary(pa.int8(), pa.string())),
        pa.field("net_connections", pa.int32()),
        pa.field("gdrdma_connections", pa.int32()),
        pa.field("channels", pa.int16()),
    ],
    metadata={"graywire.record": "nccl_transport", "graywire.version": "1"},
)

#: What each host's NCCL topology probe found for one communicator (collectors/nccl/transport.py
#: ``layout_batch``): one row per (communicator, host) per view, its ranks on that host summed.
#: ``intra_p2p``/``intra_shm`` count its intra-node connections by transport; ``graph_*`` are
#: its ranks' own ring graphs (the fewest channels, the farthest path types, null without
#: NCCL_GRAPH); ``coll_channels`` is what the communicator agreed on; ``nvls`` whether NVLS
#: multicast is available on all its ranks; ``collnet`` connected, fallback or disabled;
#: ``started_at`` the reader's clock at its first ``Init START`` (the newest init of a host wins).
NCCL_LAYOUT = pa.schema(
    [
        pa.field("time", TS, nullable=False),
        pa.field("job", pa.dictionary(pa.int32(), pa.string()), nullable=False),
        pa.field("communicator", pa.dictionary(pa.int32(), pa.string()), nullable=False),
        pa.field("host", pa.dictionary(pa.int32(), pa.string()), nullable=False),
        pa.field("started_at", TS),
        pa.field("nranks", pa.int32()),
        pa.field("nnodes", pa.int32()),
        pa.field("local_ranks", pa.int16()),
        pa.field("net_devices", pa.int16()),
        pa.field("intra_p2p", pa.int32()),
        pa.field("intra_shm", pa.int32()),
        pa.field("net_connections", pa.int32()),
        pa.field("gdrdma_connections", pa.int32()),
        pa.field("pxn_connections", pa.int32()),
        pa.field("graph_channels", pa.int16()),
        pa.field("graph_cross_nic", pa.int8()),
        pa.field("graph_type_intra", pa.dictionary(pa.int8(), pa.string())),
        pa.field("graph_type_inter", pa.dictionary(pa.int8(), pa.string())),
        pa.field("coll_channels", pa.int16()),
        pa.field("nvls", pa.bool_()),
        pa.field("nvls_channels", pa.int16()),
        pa.field("collnet", pa.dictionary(pa.int8(), pa.string())),
    ],
    metadata={"graywire.record": "nccl_layout", "graywire.version": "1"},
)

#: How far each rank of a communicator got through NCCL init, as its NCCL_DEBUG=INFO lines
#: say: one row per (communicator, rank) per view (collectors/nccl/bootstrap.py). ``stage`` is
#: the last step seen (start, bootstrap, topology, connect, complete); ``*_at`` are the
#: reader's clock (NCCL's INFO lines carry no time); ``init_seconds`` and the phase columns are
#: NCCL's own ``Init timings`` (2.22+), null before that release or before the init completes.
NCCL_INIT = pa.schema(
    [
        pa.field("time", TS, nullable=False),
        pa.field("job", pa.dictionary(pa.int32(), pa.string()), nullable=False),
        pa.field("communicator", pa.dictionary(pa.int32(), pa.string()), nullable=False),
        pa.field("rank", pa.int32(), nullable=False),
        pa.field("nranks", pa.int32()),
        pa.field("nnodes", pa.int32()),
        pa.field("host", pa.dictionary(pa.int32(), pa.string())),
        pa.field("pid", pa.int64()),
        pa.field("device", pa.int16()),
        pa.field("stage", pa.dictionary(pa.int8(), pa.string()), nullable=False),
        pa.field("started_at", TS),
        pa.field("completed_at", TS),
        pa.field("last_line_at", TS),
        pa.field("init_seconds", pa.float64()),
        pa.field("bootstrap_seconds", pa.float64()),
        pa.field("topo_seconds", pa.float64()),
        pa.field("connect_seconds", pa.float64()),
    ],
    metadata={"graywire.record": "nccl_init", "graywire.version": "1"},
)

#: The NCCL profiler plugin's per-peer network steps (ProxyOp + its ProxySteps, v4/v5): one row
#: per (rank, channel, peer, direction) per collective, its steps' wait states summed. The wait
#: columns of the other direction are null (a send has no RecvWait), never 0.
NCCL_PROXY_WAITS: tuple[str, ...] = (
    "send_gpu_wait_seconds",
    "send_peer_wait_seconds",
    "send_wait_seconds",
    "recv_wait_seconds",
    "recv_flush_wait_seconds",
    "recv_gpu_wait_seconds",
)
NCCL_PROXY = pa.schema(
    [
        pa.field("time", TS, nullable=False),
        pa.field("job", pa.dictionary(pa.int32(), pa.string()), nullable=False),
        pa.field("communicator", pa.dictionary(pa.int32(), pa.string()), nullable=False),
        pa.field("rank", pa.int32(), nullable=False),
        pa.field("host", pa.dictionary(pa.int32(), pa.string())),
        pa.field("device", pa.int16()),
        pa.field("pid", pa.int64()),
        pa.field("collective", pa.dictionary(pa.int8(), pa.string()), nullable=False),
        pa.field("seq", pa.int64()),
        pa.field("channel", pa.int16(), nullable=False),
        pa.field("peer", pa.int32(), nullable=False),
        pa.field("direction", pa.dictionary(pa.int8(), pa.string()), nullable=False),
        pa.field("steps", pa.int32()),
        pa.field("bytes", pa.int64()),
        pa.field("duration_seconds", pa.float64()),
        *(pa.field(c, pa.float64()) for c in NCCL_PROXY_WAITS),
        pa.field("port", pa.string()),
        pa.field("net_device", pa.int16()),
        pa.field("qp_num", pa.int64()),
        pa.field("qps", pa.int16()),
    ],
    metadata={"graywire.record": "nccl_proxy", "graywire.version": "1"},
)

#: What each port is enabled and able to run at (UFM REST's ``enabled_*``/``supported_*`` speed
#: and width lists, as maxima): the second source of a port's expected speed and width, after the
#: inventory. A batch is a *view*, sent by a collector when it changed since its last good scrape.
PORT_CAPABILITY = pa.schema(
    [
        pa.field("time", TS, nullable=False),
        pa.field("port", pa.string(), nullable=False),
        pa.field("enabled_speed_bps", pa.int64()),
        pa.field("enabled_width", pa.uint8()),
        pa.field("supported_speed_bps", pa.int64()),
        pa.field("supported_width", pa.uint8()),
        pa.field("max_speed_bps", pa.int64()),  # enabled where the source lists it, else supported
    ],
    metadata={"graywire.record": "port_capability", "graywire.version": "1"},
)

#: What NCCL's RAS subsystem, PyTorch's Flight Recorder or the ProcessGroupNCCL watchdog says
#: about one rank (or, for a RAS process event, one process) at one time. ``state`` is ``running``,
#: ``init``, ``finalize``, ``abort`` or ``nocomm`` (a member that left: a clean tear-down),
#: ``unresponsive`` (RAS could not reach it), ``dead`` (RAS gave up after 60 s: PEER_DEAD),
#: or ``timeout`` (the watchdog timed out its collective). ``rank`` and ``communicator`` are null
#: for a process-level event; ``seq`` is the collectives the rank launched (RAS) or the timed-out
#: collective's sequence number (PyTorch); ``source`` is ``ras``, ``ras_monitor``,
#: ``flight_recorder`` or ``watchdog``.
NCCL_RANK_STATE = pa.schema(
    [
        pa.field("time", TS, nullable=False),
        pa.field("job", pa.dictionary(pa.int32(), pa.string()), nullable=False),
        pa.field("communicator", pa.dictionary(pa.int32(), pa.string())),
        pa.field("rank", pa.int32()),
        pa.field("nranks", pa.int32()),
        pa.field("host", pa.dictionary(pa.int32(), pa.string())),
        pa.field("pid", pa.int64()),
        pa.field("device", pa.int16()),
        pa.field("state", pa.dictionary(pa.int8(), pa.string()), nullable=False),
        pa.field("collective", pa.dictionary(pa.int8(), pa.string())),
        pa.field("seq", pa.int64()),
        pa.field("source", pa.dictionary(pa.int8(), pa.string()), nullable=False),
        pa.field("detail", pa.string()),
    ],
    metadata={"graywire.record": "nccl_rank_state", "graywire.version": "1"},
)

#: How far each GPU of a host is from each RDMA NIC (``nvidia-smi topo -m``, else the PCIe tree
#: and NUMA nodes in sysfs): one row per (GPU, NIC). A batch is one host's whole view and replaces
#: its last one; a host without GPUs sends none. ``path`` is nvidia-smi's level (``PIX``, ``PXB``,
#: ``PHB``, ``NODE``, ``SYS``, ``NV`` for any NVLink count), null where nothing says; ``source`` is
#: ``nvidia-smi`` or ``sysfs``. NUMA nodes are null where the platform reports none (``-1``).
GPU_NIC_PATH = pa.schema(
    [
        pa.field("time", TS, nullable=False),
        pa.field("host", pa.dictionary(pa.int32(), pa.string()), nullable=False),
        pa.field("gpu", pa.int16(), nullable=False),
        pa.field("gpu_bus_id", pa.string()),
        pa.field("gpu_numa", pa.int16()),
        pa.field("nic", pa.string(), nullable=False),
        pa.field("nic_numa", pa.int16()),
        pa.field("path", pa.dictionary(pa.int8(), pa.string())),
        pa.field("source", pa.dictionary(pa.int8(), pa.string())),
    ],
    metadata={"graywire.record": "gpu_nic_path", "graywire.version": "1"},
)


class RecordKind(StrEnum):
    """Every canonical record, by the name its schema carries (``graywire.record``)."""

    PORT_SAMPLE = "port_sample"
    PORT_CAPABILITY = "port_capability"
    NCCL_TIMING = "nccl_timing"
    NCCL_TRANSPORT = "nccl_transport"
    NCCL_PROXY = "nccl_proxy"
    NCCL_INIT = "nccl_init"
    LINK = "link"
    NCCL_RANK_STATE = "nccl_rank_state"
    GPU_NIC_PATH = "gpu_nic_path"
    NCCL_LAYOUT = "nccl_layout"


SCHEMAS: dict[str, pa.Schema] = {
    RecordKind.PORT_SAMPLE: PORT_SAMPLE,
    RecordKind.LINK: LINK,
    RecordKind.PORT_CAPABILITY: PORT_CAPABILITY,
    RecordKind.NCCL_TIMING: NCCL_TIMING,
    RecordKind.NCCL_TRANSPORT: NCCL_TRANSPORT,
    RecordKind.NCCL_PROXY: NCCL_PROXY,
    RecordKind.NCCL_RANK_STATE: NCCL_RANK_STATE,
    RecordKind.GPU_NIC_PATH: GPU_NIC_PATH,
    RecordKind.NCCL_INIT: NCCL_INIT,
    RecordKind.NCCL_LAYOUT: NCCL_LAYOUT,
}

#: Batch metadata key: JSON object {counter column: bit width} for counters narrower than 64
#: bits (SNMP Counter32, legacy IB counters), so the rates stage can tell a wrap from a reset.
COUNTER_BITS_KEY = b"graywire.counter_bits"
#: Batch metadata key: JSON list of counter columns that saturate at their maximum (legacy IB).
SATURATING_KEY = b"graywire.saturating"


def record_kind(schema: pa.Schema) -> str:
    """Name of the canonical record a schema carries (from its metadata)."""
    meta = schema.metadata or {}
    kind = meta.get(b"graywire.record")
    if kind is None:
        raise ValueError("schema carries no graywire.record metadata")
    return kind.decode()


def with_counter_widths(
    schema: pa.Schema, bits: dict[str, int], saturating: tuple[str, ...] = ()
) -> pa.Schema:
    """Attach counter widths / saturation to a port_sample schema's metadata."""
    meta = dict(schema.metadata or {})
    if bits:
        meta[COUNTER_BITS_KEY] = json.dumps(bits).encode()
    if saturating:
        meta[SATURATING_KEY] = json.dumps(list(saturating)).encode()
    return schema.with_metadata(meta)


#: One all-null array per type, the longest asked for; shorter ones are slices of it.
_NULLS: dict[pa.DataType, pa.Array] = {}


def null_array(typ: pa.DataType, n: int) -> pa.Array:
    """``n`` nulls of ``typ``, sharing their buffers with every other null column of that type.

    ``pa.nulls`` allocates a zeroed data buffer each time: with UFM Telemetry's default counter
    set, 46 of a port batch's 59 counter columns are null, and so are their rates, which cost
    8 bytes per port each, more than the counters that are there. Arrow arrays are immutable,
    so one buffer serves them all.
    """
    have = _NULLS.get(typ)
    if have is None or len(have) < n:
        have = _NULLS[typ] = pa.nulls(max(n, 1024), type=typ)
    return have if len(have) == n else have.slice(0, n)


def empty_columns(schema: pa.Schema, n: int, present: dict[str, pa.Array]) -> list[pa.Array]:
    """Columns for ``schema`` in order: the ones given, null arrays for the rest."""
    cols = []
    for f in schema:
        arr = present.get(f.name)
        if arr is None:
            if not f.nullable:
                raise ValueError(f"column {f.name} is required")
            arr = null_array(f.type, n)
        elif arr.type != f.type:
            arr = arr.cast(f.type)
        cols.append(arr)
    return cols


def make_batch(schema: pa.Schema, n: int, present: dict[str, pa.Array]) -> pa.RecordBatch:
    """Build a canonical batch from the columns a source has; the rest are null."""
    unknown = set(present) - set(schema.names)
    if unknown:
        raise ValueError(f"unknown columns for {record_kind(schema)}: {sorted(unknown)}")
    return pa.RecordBatch.from_arrays(empty_columns(schema, n, present), schema=schema)


def _fits(v: Any, typ: pa.DataType) -> Any:
    """``v`` if it is a value of ``typ`` (an in-range integer, a finite float, a string, a list
    of such), else None."""
    if v is None:
        return None
    if pa.types.is_integer(typ):
        if not isinstance(v, int) or isinstance(v, bool):
            return None
        bits = typ.bit_width
        lo, hi = (0, 2**bits) if pa.types.is_unsigned_integer(typ) else (-(2 ** (bits - 1)), 2 ** (bits - 1))
        return v if lo <= v < hi else None
    if pa.types.is_floating(typ):
        if isinstance(v, bool) or not isinstance(v, int | float | str):
            return None
        try:
            f = float(v)  # an int past 1.8e308 overflows: not a usable number
        except (OverflowError, ValueError):
            return None
        return f if math.isfinite(f) else None
    if pa.types.is_list(typ):
        if not isinstance(v, list | tuple):
            return None
        items = [_fits(x, typ.value_type) for x in v]
        return None if any(x is None for x in items) else items
    return v if isinstance(v, str) else None


def fitted_array(values: Sequence[Any], typ: pa.DataType) -> pa.Array:
    """``values`` as an Arrow array of ``typ``; a value that does not fit (an integer past the
    type's range, a float past 1.8e308, a non-number) is null. Parsers hand over whatever the
    source printed; one absurd number must null its cell, not fail the batch."""
    return fitted_array_counted(values, typ)[0]


def fitted_array_counted(values: Sequence[Any], typ: pa.DataType) -> tuple[pa.Array, int]:
    """:func:`fitted_array` and how many values it nulled (for the parse-skip count). The fast
    path is one conversion; the per-value check runs only when that conversion refuses."""
    try:
        return pa.array(values, type=typ), 0
    except (OverflowError, pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError):
        pass
    clean = [_fits(v, typ) for v in values]
    nulled = sum(1 for v, c in zip(values, clean, strict=True) if v is not None and c is None)
    return pa.array(clean, type=typ), nulled
