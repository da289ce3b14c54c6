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

:meth:`ProfilerParser.proxy_rows` turns each finished ProxyOp into one ``nccl_proxy`` row: its
steps' seconds per wait state summed, the bytes and steps it moved, and the QP it used.
"""

from __future__ import annotations

import re

from graywire.collectors.nccl.profiler_events import WAIT_COLUMN, DeviceOf, EventParser, PortOf, lenient_event

__all__ = [
    "WAIT_COLUMN",
    "DeviceOf",
    "PortOf",
    "ProfilerParser",
    "dump_name_parts",
    "host_from_dump_name",
    "lenient_event",
    "parse_profiler_trace",
]


class ProfilerParser(EventParser):
    """Stateful parser of one trace file (events may arrive across many reads)."""


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
