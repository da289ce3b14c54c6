"""The NCCL example profiler plugin's trace dump -> per-channel kernel timings and per-peer proxy steps.

The example plugin (NVIDIA/nccl ``plugins/profiler/example``, ``print_event.cc``) writes, when
a communicator is finalized, ``${NCCL_PROFILE_DUMP_FILE}_<commHash>_<rank>.json`` (``plugin.cc``
``openTraceFile``; its README says ``-hostname-tid.txt``, which the code no longer does): a
Chrome-trace JSON array, one event per line (``{...},``), closed by ``{}]``. Events open
(``"ph": "b"``, with ``args``) and close (``"ph": "e"``) and nest in file order: a ``COLL``
event (args ``SeqNum``, ``CommHash``, ``Rank``, ``Count``, ``Datatype``, ``Algorithm``,
``Protocol``, ``nChannels``) or ``P2P`` event encloses its ``KernelCh`` events (args
``Channel``, ``StartGpuClk``, ``StopGpuClk``: GPU globaltimer, ns) and its ProxyOps
(``ScheduleSend``/``ProgressSend``/``ScheduleRecv``/``ProgressRecv`` with ``Channel``,
``Peer``, ``Steps``, ``ChunkSize``, ``transSize``: the bytes its steps moved), and a
``Progress*`` op encloses its ProxySteps (``cat`` ``NET``: ``SendGpuWait``, ``SendPeerWait``,
``SendWait`` / ``RecvWait``, ``RecvFlushWait``, ``RecvGpuWait`` with ``Step``: one step's
consecutive wait states). Network-plugin events nest inside the step that posted them: the IB
plugin's ``Qp`` (``cat`` ``NET_IB``, args ``device``, ``qp_num``, ``opcode``, ``wr_id``,
``size``: ``ncclProfilerNetIbDescr_v1_t``) inside ``SendWait`` or ``RecvWait``, the socket
plugin's ``Sock`` (``NET_SOCK``: ``sock``, ``op``, ``size``). ``ts`` is CPU microseconds since
the plugin started. Profiler API v4 (NCCL 2.27) wraps collectives in ``GROUP`` events; v5 (2.28+)
adds ``GROUP_API``, ``COLL_API``, ``P2P_API`` and ``KERNEL_LAUNCH`` above them. The proxy lines
are the same in both, so both parse alike; the API events are skipped.

The parser is lenient because dumps are not always valid JSON: older releases printed
pointers and data types unquoted (``"Stream": 0x5020000567d0``, ``"datatype": ncclFloat32``),
the README sample has a typographic quote, and a trace cut short by a crash has no closing
``]``. Each line is repaired on its own and a line that still does not parse is skipped and
counted. Association is by nesting in file order (a step belongs to the innermost open
``Progress`` op of its direction, a QP event to the innermost open step), which is how the
plugin prints them.

A trace is read as columns (:mod:`graywire.collectors.nccl.profiler_columns`: pyarrow reads the
lines that are JSON, the others are repaired one by one, and the nesting is resolved for all
events at once); a read whose nesting the column pass does not model goes on event by event
(:mod:`graywire.collectors.nccl.profiler_events`). Both give the same tables and rows.

:meth:`ProfilerParser.proxy_rows` turns each finished ProxyOp into one ``nccl_proxy`` row: its
steps' seconds per wait state summed, the bytes and steps it moved, and the QP it used.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

import pyarrow as pa

from graywire.collectors.nccl import jsonlines
from graywire.collectors.nccl.common import TimingRows
from graywire.collectors.nccl.profiler_columns import TraceColumns
from graywire.collectors.nccl.profiler_events import WAIT_COLUMN, DeviceOf, EventParser, PortOf, lenient_event
from graywire.collectors.nccl.proxy import ProxyRows

__all__ = [
    "WAIT_COLUMN",
    "ProfilerParser",
    "dump_name_parts",
    "host_from_dump_name",
    "lenient_event",
    "parse_profiler_trace",
]


class ProfilerParser:
    """Stateful parser of one trace file (events may arrive across many reads).

    Reads go through the column pass (:class:`~graywire.collectors.nccl.profiler_columns.TraceColumns`);
    the first read it cannot follow hands the file's state to the per-event parser
    (:class:`~graywire.collectors.nccl.profiler_events.EventParser`), which reads it from then on,
    as it does a trace whose first read is under ``SMALL_BYTES``. Both give the same tables and rows.
    """

    def __init__(self) -> None:
        self._state: TraceColumns | EventParser = TraceColumns()
        self._read = False

    def feed(self, lines: Iterable[str | bytes]) -> None:
        lines = list(lines)
        self._first_read(sum(len(x) + 1 for x in lines))
        if isinstance(self._state, TraceColumns):
            if self._state.feed(lines):
                return
            self._state = self._state.to_events()
        self._state.feed(lines)

    def feed_data(self, data: bytes) -> None:
        """The lines of a buffer (joined by newlines, as a file holds them)."""
        self._first_read(len(data))
        if isinstance(self._state, TraceColumns):
            if self._state.feed_data(data):
                return
            self._state = self._state.to_events()
        self._state.feed(data.split(b"\n"))

    def _first_read(self, size: int) -> None:
        """A trace whose first read is small is read event by event (faster at that size): the
        plugin writes its dump once, at finalize, so that read is most of it."""
        if not self._read and size < jsonlines.SMALL_BYTES:
            self._state = EventParser()
        self._read = True

    @property
    def columnar(self) -> bool:
        """Whether every read so far went through the column pass."""
        return isinstance(self._state, TraceColumns)

    @property
    def skipped(self) -> int:
        """Lines that look like events but do not parse."""
        return self._state.skipped

    @property
    def problems(self) -> list[str]:
        return self._state.problems

    @property
    def colls(self) -> list[dict[str, Any]]:
        s = self._state
        return s.coll_dicts() if isinstance(s, TraceColumns) else s.colls

    @property
    def kernels(self) -> list[dict[str, Any]]:
        s = self._state
        return s.kernel_dicts() if isinstance(s, TraceColumns) else s.kernels

    @property
    def proxy_ops(self) -> list[dict[str, Any]]:
        s = self._state
        return s.op_dicts() if isinstance(s, TraceColumns) else s.proxy_ops

    @property
    def proxy_steps(self) -> list[dict[str, Any]]:
        s = self._state
        return s.step_dicts() if isinstance(s, TraceColumns) else s.proxy_steps

    @property
    def net_events(self) -> list[dict[str, Any]]:
        s = self._state
        return s.net_dicts() if isinstance(s, TraceColumns) else s.net_events

    def kernel_table(self) -> pa.Table:
        """One row per KernelCh: the channel's GPU time and the collective it belongs to."""
        return self._state.kernel_table()

    def proxy_op_table(self) -> pa.Table:
        """One row per ProxyOp phase: channel, peer, direction and its CPU time."""
        return self._state.proxy_op_table()

    def proxy_step_table(self) -> pa.Table:
        """One row per network step state: which peer and channel waited, and how long."""
        return self._state.proxy_step_table()

    def net_table(self) -> pa.Table:
        """One row per network-plugin event: the QP (IB) or socket that carried a step."""
        return self._state.net_table()

    def timing_rows(
        self,
        rows: TimingRows,
        *,
        job: str,
        host: str | None = None,
        device: int | None = None,
        observed_us: int | None = None,
        start: int = 0,
    ) -> int:
        """Add one nccl_timing row per complete KernelCh from ``kernels[start:]``; returns the
        new start. The communicator is the CommHash as ``0x%x`` (how the Inspector names it)."""
        return self._state.timing_rows(
            rows, job=job, host=host, device=device, observed_us=observed_us, start=start
        )

    def proxy_rows(
        self,
        rows: ProxyRows,
        *,
        job: str,
        host: str | None = None,
        device_of: DeviceOf | None = None,
        port_of: PortOf | None = None,
        observed_us: int | None = None,
    ) -> int:
        """Add one nccl_proxy row per finished ``Progress`` op not added before; returns how many.

        An op is finished when its end was printed or its collective closed (a dump cut inside
        an op still gives the steps it has). ``device_of(host, pid, rank)`` and ``port_of(host,
        pid, rank, channel, peer, direction)`` resolve the GPU and NIC from NCCL_DEBUG lines.
        """
        return self._state.proxy_rows(
            rows, job=job, host=host, device_of=device_of, port_of=port_of, observed_us=observed_us
        )


def host_from_dump_name(name: str) -> str | None:
    """``nccl_profile-gpu-0003-4242.txt`` -> ``gpu-0003``? Ambiguous with dashes in the prefix, so
    only the part after the first dash is taken as the host (``<prefix>-<hostname>-<tid>.txt``)."""
    m = re.match(r"^[^-]+-(?P<host>.+)-(?P<tid>\d+)\.txt$", name)
    return m.group("host") if m else None


_JSON_DUMP = re.compile(r"^(?P<prefix>.*)_(?P<hash>\d+)_(?P<rank>\d+)\.json$")


def dump_name_parts(name: str) -> tuple[str | None, int | None, int | None]:
    """(host, commHash, rank) from a dump's file name, where it says them.

    ``<prefix>_<commHash>_<rank>.json`` is what ``plugin.cc`` writes; the prefix is the last
    part of ``NCCL_PROFILE_DUMP_FILE``, which a launcher sets per host (``.../$(hostname)``),
    so it is taken as the host. ``<prefix>-<host>-<tid>.txt`` is the README's naming.
    """
    m = _JSON_DUMP.match(name)
    if m:
        prefix = m.group("prefix")
        return (prefix or None), int(m.group("hash")), int(m.group("rank"))
    return host_from_dump_name(name), None, None


def parse_profiler_trace(text: str) -> ProfilerParser:
    parser = ProfilerParser()
    parser.feed(text.splitlines())
    return parser
