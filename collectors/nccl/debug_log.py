"""NCCL_DEBUG=INFO logs -> the communicators' wiring: who is which GPU, and which NIC each channel uses.

NCCL prints every line as ``host:pid:tid [cudaDev] NCCL INFO <message>`` (optionally behind a
``[timestamp]`` and, for WARN, a ``file.cc:line``). The lines that describe the wiring are:

- ``... comm 0x55d0 rank 3 nranks 16 cudaDev 3 nvmlDev 3 busId 3f000 commId 0x9a.. - Init START``
  (also ``Init COMPLETE``, ``Destroy COMPLETE``, and the split variant with ``parent``/``color``)
- ``comm 0x55d0 rank 3 nRanks 16 nNodes 2 localRanks 8 localRank 3 MNNVL 0``
- ``Channel 03/0 : 5[5] -> 6[6] via NET/IB/3/GDRDMA`` with optional ``[send]``/``[receive]``,
  PXN ``NET/IB/3(7)``, ``(PCI)``/``/Shared`` suffixes, ``via P2P/CUMEM``, ``via SHM/direct/direct``;
  older releases print ``Channel 03 : 5[3f000] -> ...`` (bus ids in the brackets)
- ``Ring 00 : 1 -> 0 -> 1`` (prev -> me -> next), ``Tree 0 : -1 -> 0 -> 1/-1/-1``
- ``NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/RoCE [RO]; OOB eth0:10.0.0.1<0>``: NCCL's NET
  device index -> HCA name, which is what turns ``NET/IB/3`` into a port key ``host/mlx5_3``.

What the rank's own topology probe found (for the start-up layout check, collectors/nccl/
transport.py ``layout_batch``): ``Pattern 4, crossNic 0, nChannels 16, bw 40.000000/40.000000,
type NVL/PIX, sameChannels 1`` (``src/graph/search.cc`` ncclTopoPrintGraph, NCCL_GRAPH; the
first is the ring graph, printed before the ranks agree on the minimum, so it is this host's
own result); ``16 coll channels, 16 collnet channels, 0 nvls channels, 32 p2p channels, 2 p2p
channels per peer`` (``src/init.cc``, after the agreement: the communicator's); ``NVLS multicast
support is [not ]available on dev 3`` (``src/transport/nvls.cc``); ``rank 3 Connected
CollNet``, ``Cannot initialize CollNet, using point-to-point network instead`` (a WARN) and
``... less than CollNet node threshold ..., disabling CollNet`` (``src/transport/coll_net.cc``,
``src/transport.cc``, ``src/init.cc``).

A rank's way through init (``src/init.cc``, ``src/bootstrap.cc``) is kept as its *stage*, for
the start-up checks: ``Init START``; ``Bootstrap timings total ...`` (2.22+: the bootstrap ring
is up); ``Rank 3: 8 Net devices`` (2.30+) or the ``nRanks ... nNodes`` line (topology detected, peer
info exchanged); a ``Channel`` line (connecting); ``Init COMPLETE``. ``Init timings - <func>:
rank 3 nranks 16 total 1.23 (kernels ..., bootstrap ..., connections ..., rest ...)`` (2.22+)
is NCCL's own measure of the init. NCCL's INFO lines carry no time by default, so
:meth:`NcclTopology.feed` takes the reader's clock (``now``) and stamps when it first read a
rank's START and COMPLETE and last read a line of its process.

Channel lines carry no communicator, so they are attributed to the communicator the same
thread last initialized (else the process's last one). The communicator is named by its
``commId`` hash when an Init line gave it (the same on every rank), else ``host:pid:comm-pointer``.
That hash is not the profiler/Inspector ``commHash``; the Inspector joins on (host, pid) instead.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime

import pyarrow as pa

from graywire.collectors.nccl.common import fitted_array
from graywire.collectors.text import plain_text

#: NCCL's own prefix, wherever it starts: launchers and collectors put theirs in front (mpirun's
#: ``[1,0]<stdout>:``, ``srun -l``'s ``0: ``, Ray's ``(RayWorker pid=12)``, a timestamp).
_PREFIX = re.compile(
    r"(?<![^\s:>)\]])(?P<host>[^\s:\[\]<>(),]+):(?P<pid>\d{1,9}):(?P<tid>\d{1,9})\s+\[(?P<dev>-?\d{1,9})\]\s+"
    r"(?:\S+:\d+\s+)?NCCL\s+(?P<level>INFO|WARN|TRACE|ABORT|VERSION)\b\s?(?P<msg>.*?)\s*$"
)
_CHANNEL = re.compile(
    r"^Channel (?P<ch>\d{1,9})(?:/(?P<conn>\d{1,9}))? : (?P<src>\d{1,9})\[(?P<srcdev>[0-9a-fA-Fx]+)\] -> "
    r"(?P<dst>\d{1,9})\[(?P<dstdev>[0-9a-fA-Fx]+)\](?: \[(?P<dir>send|receive)\])? via (?P<via>.+)$"
)
_OLD_RING_CONN = re.compile(
    r"^Ring (?P<ch>\d{1,9}) : (?P<src>\d{1,9}) -> (?P<dst>\d{1,9}) \[(?P<dir>send|receive)\] via (?P<via>.+)$"
)
_RING = re.compile(r"^Ring (?P<ch>\d{1,9}) : (?P<prev>-?\d{1,9}) -> (?P<me>\d{1,9}) -> (?P<next>-?\d{1,9})$")
#: ``Channel 00/02 :    0   1   2   3``: a ring's order, the same on every rank (2.x, INIT).
_RING_ORDER = re.compile(r"^Channel (?P<ch>\d{1,9})/(?P<of>\d{1,9}) :(?P<order>(?:\s+-?\d{1,9})+)\s*$")
#: ``Trees [0] -1/-1/-1->1->0 [1] 0/-1/-1->1->-1``: per tree, children -> me -> parent.
_TREES = re.compile(
    r"\[(?P<ch>\d{1,9})\] (?P<down>-?\d{1,9}(?:/-?\d{1,9})*)->(?P<me>\d{1,9})->(?P<up>-?\d{1,9})"
)
_TREE = re.compile(
    r"^Tree (?P<ch>\d{1,9}) : (?P<up>-?\d{1,9}) -> (?P<me>\d{1,9}) -> (?P<down>-?\d{1,9}(?:/-?\d{1,9})*)$"
)
_INIT = re.compile(
    r"(?:^|\s)comm (?P<ptr>\S+) rank (?P<rank>\d{1,9}) nranks (?P<nranks>\d{1,9}) cudaDev (?P<dev>-?\d{1,9})"
    r"(?: nvmlDev (?P<nvml>-?\d{1,9}))? busId (?P<bus>\S+)(?P<rest>.*?)\s*-\s*"
    r"(?P<what>Init START|Init COMPLETE|Destroy COMPLETE)"
)
_COMMID = re.compile(r"\bcommId (\S+)")
#: ``ncclCommSplit … parent 0x… splitCount 2 color 0 key 0- Init START``: no commId; the parent is
#: the parent's comm pointer in the same process.
_SPLIT = re.compile(r"\bparent (?P<parent>\S+) splitCount (?P<count>-?\d{1,9}) color (?P<color>-?\d{1,10})")
_COMM_INFO = re.compile(
    r"^comm (?P<ptr>\S+) rank (?P<rank>\d{1,9}) nRanks (?P<nranks>\d{1,9}) nNodes (?P<nnodes>\d{1,9}) "
    r"localRanks (?P<lranks>\d{1,9}) localRank (?P<lrank>\d{1,9})"
)
_NET_USING = re.compile(r"^NET/(?P<net>IB\w*|Socket) : Using(?P<devs>.*?)(?:;\s*OOB\s+(?P<oob>\S+))?$")
_NET_DEV = re.compile(r"\[(?P<idx>\d{1,9})\](?P<body>\{[^}]*\}|[^\s\[]+)")
_HCA = re.compile(r"([^\s:{},]+):(\d{1,9})/(\w+)")
_USING_NETWORK = re.compile(r"^Using network (\S+)")
_NIC = re.compile(r"^(?P<nic>\d{1,9})(?:\((?P<proxy>\d{1,9})\))?(?!\d)")
_F = r"(-?\d+(?:\.\d+)?)"
_BOOT_TIMINGS = re.compile(rf"^Bootstrap timings total {_F}")
#: ``Init timings - ncclCommInitRankConfig: rank 3 nranks 16 total 1.23 (kernels …, alloc …, …)``
#: (2.23+); 2.22 prints ``Init timings: rank 3 nranks 16 total … (kernels …, bootstrap …, …)``.
_INIT_TIMINGS = re.compile(
    rf"^Init timings(?: - (?P<func>\S+?))?: rank (?P<rank>\d{{1,9}}) nranks (?P<nranks>\d{{1,9}}) "
    rf"total {_F} \((?P<phases>[^)]*)\)"
)
_PHASE = re.compile(rf"(?P<name>[a-z]+) {_F}")
_NET_DEVICES = re.compile(r"^Rank (?P<rank>\d{1,9}): (?P<n>\d{1,9}) Net devices")
_GRAPH = re.compile(
    r"^Pattern (?P<pattern>\d{1,3}), crossNic (?P<cross>\d{1,3}), nChannels (?P<nch>\d{1,4}), "
    rf"bw {_F}/{_F}, type (?P<intra>[A-Z0-9]+)/(?P<inter>[A-Z0-9]+)"
)
_COLL_CHANNELS = re.compile(
    r"^(?P<coll>\d{1,4}) coll channels, (?:\d{1,4} collnet channels, )?(?P<nvls>\d{1,4}) nvls channels, "
    r"(?P<p2p>\d{1,4}) p2p channels"
)
_NVLS_SUPPORT = re.compile(r"^NVLS multicast support is (?P<not>not )?available on dev -?\d{1,9}")
#: NCCL's path types, nearest first (``src/graph/paths.cc`` topoPathTypeStr): a graph's
#: ``type`` names the farthest hop of its intra-node and its network paths.
PATH_TYPES = ("LOC", "NVL", "NVB", "C2C", "PIX", "PXB", "P2C", "PXN", "PHB", "SYS", "NET", "DIS")
#: How far a rank got through init, in order (``RankInfo.stage`` indexes this).
INIT_STAGES = ("start", "bootstrap", "topology", "connect", "complete")
#: The phases of NCCL's ``Init timings`` line, in its order.
INIT_PHASES = (
    "total",
    "kernels",
    "alloc",
    "bootstrap",
    "allgathers",
    "topo",
    "graphs",
    "connections",
    "rest",
)

ProcKey = tuple[str, int]  # (host, pid)


@dataclass(slots=True)
class RankInfo:
    """One rank of one communicator, as its Init/comm lines describe it."""

    communicator: str
    rank: int
    nranks: int | None
    host: str
    pid: int
    device: int | None
    nvml_device: int | None = None
    bus_id: str | None = None
    nnodes: int | None = None
    local_rank: int | None = None
    local_ranks: int | None = None
    net_devices: int | None = None  # ``Rank N: K Net devices`` (2.30+)
    state: str = "init"  # init, complete, destroyed
    stage: int = 0  # index into INIT_STAGES
    started_at: datetime | None = None  # reader's clock: when its Init START was first read
    completed_at: datetime | None = None  # ... its Init COMPLETE
    #: NCCL's ``Init timings`` phases (seconds, INIT_PHASES), or only ``bootstrap`` from the
    #: ``Bootstrap timings`` line; empty before 2.22 or until the init completes.
    timings: dict[str, float] = field(default_factory=dict)
    #: This rank's own ring graph (its first ``Pattern`` line, before the ranks agree):
    #: (nChannels, crossNic, intra-node path type, network path type); None without NCCL_GRAPH.
    graph: tuple[int, int, str, str] | None = None
    coll_channels: int | None = None  # the communicator's, after the agreement
    nvls_channels: int | None = None
    nvls_support: bool | None = None
    collnet: str | None = None  # connected, fallback (could not set up), disabled (too few nodes)


@dataclass(slots=True)
class ChannelLink:
    """One connection of one channel: ``from_rank`` sends to ``to_rank`` over ``transport``.

    ``rank`` is the rank whose process logged it: its communicator's rank when known, else the
    sender for ``[send]`` and P2P/SHM lines and the receiver for ``[receive]``. ``nic`` is
    NCCL's NET device index, ``nic_name`` the HCA it maps to (from ``NET/IB : Using``) and
    ``port`` its port key ``host/nic_name``.
    """

    communicator: str
    host: str
    pid: int
    rank: int
    channel: int
    conn_index: int | None
    from_rank: int
    to_rank: int
    direction: str | None
    via: str
    transport: str
    nic: int | None = None
    proxy_rank: int | None = None
    gdrdma: bool = False
    nic_name: str | None = None
    port: str | None = None


@dataclass(frozen=True, slots=True)
class TransportIssue:
    """A connection that fell back from what the fabric should give: later detectors page on it.

    ``kind`` is ``net_fallback`` (e.g. NET/Socket where NET/IB is expected: traffic crosses
    the host's TCP stack), ``no_gdrdma`` (NET/IB without GPUDirect RDMA: every step bounces
    through host memory) or ``network_fallback`` (a process chose ``Using network Socket``).
    """

    kind: str
    communicator: str | None
    host: str
    pid: int
    rank: int | None
    channel: int | None
    via: str  # what NCCL chose: ``NET/Socket/0``, ``NET/IB/3``, or the process's network name
    expected: str
    nic: int | None = None
    port: str | None = None
    peer_rank: int | None = None


def process_of(line: str) -> tuple[str, int] | None:
    """The (host, pid) of an NCCL line, wherever its prefix starts; None for any other line."""
    if "NCCL" not in line:
        return None
    m = _PREFIX.search(line)
    return (m.group("host"), int(m.group("pid"))) if m else None


def net_name(plugin: str) -> str:
    """A NET plugin's name as graywire compares it: the IB plugins (``IB``, the SHARP plugin's
    ``IBext_v8``) are ``IB``; others (``Socket``, ``Libfabric``, ``AWS Libfabric``) as printed."""
    return "IB" if plugin.startswith("IB") else plugin


def split_via(via: str) -> tuple[str, int | None, int | None, bool]:
    """``NET/IB/3(7)/GDRDMA(PCI)/Shared`` -> (``NET/IB``, 3, 7, True); ``P2P/CUMEM`` -> (``P2P``, ...).
    The SHARP plugin's ``NET/IBext_v8/1`` is ``NET/IB`` (the same verbs, the same HCAs)."""
    parts = via.strip().split("/")
    kind = parts[0]
    gdr = "GDRDMA" in via
    if kind == "NET" and len(parts) >= 2:
        nic = proxy = None
        if len(parts) >= 3:
            m = _NIC.match(parts[2])
            if m:
                nic = int(m.group("nic"))
                proxy = int(m.group("proxy")) if m.group("proxy") else None
        return f"NET/{net_name(parts[1])}", nic, proxy, gdr
    return kind, None, None, gdr


@dataclass
class NcclTopology:
    """Everything the debug lines say about communicators, accumulated line by line.

    Feed it lines as they arrive (:meth:`feed`); queries resolve communicator ids and NIC names
    at read time, so a ``commId`` or a ``NET/IB : Using`` line that comes later still applies.
    """

    _ranks: dict[tuple[str, int, str], RankInfo] = field(default_factory=dict)  # (host, pid, ptr)
    _comm_id: dict[tuple[str, int, str], str] = field(default_factory=dict)
    _thread_comm: dict[tuple[str, int, int], str] = field(default_factory=dict)
    _proc_comm: dict[ProcKey, str] = field(default_factory=dict)
    _dev_comm: dict[tuple[str, int, int], str] = field(default_factory=dict)  # (host, pid, cudaDev)
    #: A split's parent comm pointer, split count and colour, by its own (host, pid, pointer).
    _split: dict[tuple[str, int, str], tuple[str, int, int]] = field(default_factory=dict)
    _ring_orders: list[tuple[tuple[str, int, str] | None, ProcKey, int, tuple[int, ...]]] = field(
        default_factory=list
    )
    _links: list[tuple[tuple[str, int, str] | None, ChannelLink]] = field(default_factory=list)
    _rings: list[tuple[tuple[str, int, str] | None, ProcKey, int, int, int, int]] = field(
        default_factory=list
    )
    _trees: list[tuple[tuple[str, int, str] | None, ProcKey, int, int, int, tuple[int, ...]]] = field(
        default_factory=list
    )
    _proc_devs: dict[ProcKey, set[int]] = field(default_factory=dict)
    last_line_at: dict[ProcKey, datetime] = field(default_factory=dict)  # reader's clock
    #: Bumped per communicator pointer when a rank's init stage or timings change.
    init_changes: dict[tuple[str, int, str], int] = field(default_factory=dict)
    nics: dict[ProcKey, dict[int, list[str]]] = field(default_factory=dict)  # NET/IB index -> HCAs
    socket_nics: dict[ProcKey, dict[int, list[str]]] = field(default_factory=dict)  # NET/Socket -> ifaces
    network: dict[ProcKey, str] = field(default_factory=dict)
    _index_version: int = -1
    _version: int = 0  # bumped when ranks or links change, to rebuild the lookup indexes
    _dev_by_rank: dict[tuple[str, int, int, int | None], set[int | None]] = field(default_factory=dict)
    _net_by_channel: dict[tuple[str, int, int, int], set[str]] = field(default_factory=dict)
    _port_version: int = -1
    _port_by_conn: dict[tuple[str, int, int, int, int], set[str]] = field(default_factory=dict)
    _now: datetime | None = None
    nccl_lines: int = 0
    other_lines: int = 0
    malformed: int = 0  # NCCL lines that look like wiring but do not parse
    warnings: list[str] = field(default_factory=list)  # NCCL WARN messages, newest last (bounded)

    # -- input ------------------------------------------------------------------------------
    def feed(self, lines: Iterable[str], now: datetime | None = None) -> None:
        """Parse lines read at ``now`` (the reader's clock; None: init times stay unknown)."""
        self._now = now
        for line in lines:
            if "\x1b" in line:
                line = plain_text(line)
            m = _PREFIX.search(line)
            if not m:
                self.other_lines += 1
                continue
            self.nccl_lines += 1
            host, pid, tid, dev = (
                m.group("host"),
                int(m.group("pid")),
                int(m.group("tid")),
                int(m.group("dev")),
            )
            self._proc_devs.setdefault((host, pid), set()).add(dev)
            if now is not None:
                self.last_line_at[(host, pid)] = now
            msg = m.group("msg")
            if m.group("level") == "WARN":
                self.warnings.append(f"{host}:{pid} {msg}")
                del self.warnings[:-100]
                if msg.startswith("Cannot initialize CollNet"):
                    self._set_collnet(host, pid, tid, dev, "fallback")
                continue
            self._message(host, pid, tid, dev, msg)

    def _ckey(self, host: str, pid: int, tid: int, dev: int | None = None) -> tuple[str, int, str] | None:
        """The communicator a line of this thread speaks for: the one the thread last
        initialized, unless that one is on another GPU than the line's ``[dev]``; else the one
        last initialized on the line's GPU (a process driving several GPUs, ``ncclCommInitAll``
        or a thread per GPU); else the process's last one."""
        ptr = self._thread_comm.get((host, pid, tid))
        if ptr is not None and dev is not None:
            info = self._ranks.get((host, pid, ptr))
            if info is not None and info.device is not None and info.device != dev:
                ptr = None
        if ptr is None and dev is not None:
            ptr = self._dev_comm.get((host, pid, dev))
        if ptr is None:
            ptr = self._proc_comm.get((host, pid))
        return (host, pid, ptr) if ptr is not None else None

    def _message(self, host: str, pid: int, tid: int, dev: int, msg: str) -> None:
        if msg.startswith(("Channel ", "Ring ")) and " via " in msg:
            m = _CHANNEL.match(msg) or _OLD_RING_CONN.match(msg)
            if not m:
                self.malformed += 1
                return
            self._link(host, pid, tid, dev, m)
            self._advance(self._ckey(host, pid, tid, dev), 3)
            return
        if msg.startswith("Channel ") and (m := _RING_ORDER.match(msg)):
            order = tuple(int(x) for x in m["order"].split())
            self._ring_orders.append((self._ckey(host, pid, tid, dev), (host, pid), int(m["ch"]), order))
            return
        if msg.startswith("Trees "):
            ckey = self._ckey(host, pid, tid, dev)
            for t in _TREES.finditer(msg):
                down = tuple(int(x) for x in t["down"].split("/"))
                self._trees.append((ckey, (host, pid), int(t["ch"]), int(t["me"]), int(t["up"]), down))
            return
        if msg.startswith("Ring "):
            m = _RING.match(msg)
            if m:
                self._rings.append(
                    (
                        self._ckey(host, pid, tid, dev),
                        (host, pid),
                        int(m["ch"]),
                        int(m["me"]),
                        int(m["prev"]),
                        int(m["next"]),
                    )
                )
            return
        if msg.startswith("Tree "):
            m = _TREE.match(msg)
            if m:
                down = tuple(int(x) for x in m["down"].split("/"))
                self._trees.append(
                    (
                        self._ckey(host, pid, tid, dev),
                        (host, pid),
                        int(m["ch"]),
                        int(m["me"]),
                        int(m["up"]),
                        down,
                    )
                )
            return
        if msg.startswith("NET/"):
            m = _NET_USING.match(msg)
            if m:
                devs: dict[int, list[str]] = {}
                for d in _NET_DEV.finditer(m["devs"]):
                    body = d["body"]
                    ib = net_name(m["net"]) == "IB"
                    names = [h[0] for h in _HCA.findall(body)] if ib else [body.split(":")[0]]
                    devs[int(d["idx"])] = names
                (self.nics if net_name(m["net"]) == "IB" else self.socket_nics)[(host, pid)] = devs
                self._version += 1  # NIC names resolve the ports of links already seen
            return
        m = _USING_NETWORK.match(msg)
        if m:
            self.network[(host, pid)] = m.group(1)
            return
        if msg.startswith(("Pattern ", "NVLS multicast")) or " coll channels, " in msg or "CollNet" in msg:
            self._probe(host, pid, tid, dev, msg)
            return
        if msg.startswith(("Bootstrap timings", "Init timings", "Rank ")):
            self._init_progress(host, pid, tid, dev, msg)
            return
        m = _COMM_INFO.match(msg)
        if m:
            info = self._rank(host, pid, tid, m["ptr"], int(m["rank"]), int(m["nranks"]), dev)
            info.nnodes = int(m["nnodes"])
            info.local_rank = int(m["lrank"])
            info.local_ranks = int(m["lranks"])
            self._advance((host, pid, m["ptr"]), 2)
            return
        m = _INIT.search(msg)
        if m:
            ptr = m["ptr"]
            info = self._rank(host, pid, tid, ptr, int(m["rank"]), int(m["nranks"]), int(m["dev"]))
            info.nvml_device = int(m["nvml"]) if m["nvml"] is not None else info.nvml_device
            info.bus_id = m["bus"]
            cid = _COMMID.search(m["rest"])
            if cid:
                self._comm_id[(host, pid, ptr)] = cid.group(1)
            elif sp := _SPLIT.search(m["rest"]):
                self._split[(host, pid, ptr)] = (sp["parent"], int(sp["count"]), int(sp["color"]))
            info.state = {"Init START": "init", "Init COMPLETE": "complete"}.get(m["what"], "destroyed")
            if info.state == "init" and info.started_at is None:
                info.started_at = self._now
            elif info.state == "complete":
                if info.completed_at is None:
                    info.completed_at = self._now
                info.stage = len(INIT_STAGES) - 1
            self.init_changes[(host, pid, ptr)] = self.init_changes.get((host, pid, ptr), 0) + 1

    def _advance(self, ckey: tuple[str, int, str] | None, stage: int) -> None:
        info = self._ranks.get(ckey) if ckey is not None else None
        if info is not None and info.state == "init" and stage > info.stage:
            info.stage = stage
            assert ckey is not None
            self.init_changes[ckey] = self.init_changes.get(ckey, 0) + 1

    def _init_progress(self, host: str, pid: int, tid: int, dev: int, msg: str) -> None:
        """``Bootstrap timings``, ``Rank N: K Net devices`` and ``Init timings`` of the thread's
        communicator (NCCL runs a rank's whole init on one thread)."""
        ckey = self._ckey(host, pid, tid, dev)
        info = self._ranks.get(ckey) if ckey is not None else None
        if info is None or ckey is None:
            return
        if m := _BOOT_TIMINGS.match(msg):
            info.timings.setdefault("bootstrap", float(m.group(1)))
            self._advance(ckey, 1)
        elif m := _NET_DEVICES.match(msg):
            if int(m["rank"]) == info.rank:
                info.net_devices = int(m["n"])
                self._advance(ckey, 2)
        elif m := _INIT_TIMINGS.match(msg):
            if int(m["rank"]) != info.rank or int(m["nranks"]) != info.nranks:
                self.malformed += 1  # timings of a rank this thread did not just initialize
                return
            phases = {p["name"]: float(p[2]) for p in _PHASE.finditer(m["phases"])}
            info.timings = {"total": float(m.group(4))} | {
                k: v for k, v in phases.items() if k in INIT_PHASES
            }
            self.init_changes[ckey] = self.init_changes.get(ckey, 0) + 1
        elif msg.startswith(("Bootstrap timings", "Init timings")):
            self.malformed += 1

    def _probe(self, host: str, pid: int, tid: int, dev: int, msg: str) -> None:
        """What the thread's communicator's topology probe found (graph, channels, NVLS, CollNet)."""
        ckey = self._ckey(host, pid, tid, dev)
        info = self._ranks.get(ckey) if ckey is not None else None
        if info is None:
            return
        if m := _GRAPH.match(msg):
            if m["intra"] not in PATH_TYPES or m["inter"] not in PATH_TYPES:
                self.malformed += 1
            elif info.graph is None:  # the ring graph is printed first
                info.graph = (int(m["nch"]), int(m["cross"]), m["intra"], m["inter"])
        elif m := _COLL_CHANNELS.match(msg):
            info.coll_channels, info.nvls_channels = int(m["coll"]), int(m["nvls"])
        elif m := _NVLS_SUPPORT.match(msg):
            info.nvls_support = m["not"] is None
        elif "Connected CollNet" in msg:
            info.collnet = "connected"
        elif "disabling CollNet" in msg:
            info.collnet = "disabled"
        elif msg.startswith("Pattern ") or " coll channels, " in msg:
            self.malformed += 1
        self._version += 1

    def _set_collnet(self, host: str, pid: int, tid: int, dev: int, state: str) -> None:
        ckey = self._ckey(host, pid, tid, dev)
        info = self._ranks.get(ckey) if ckey is not None else None
        if info is not None:
            info.collnet = state
            self._version += 1

    def _rank(self, host: str, pid: int, tid: int, ptr: str, rank: int, nranks: int, dev: int) -> RankInfo:
        key = (host, pid, ptr)
        self._version += 1
        self._thread_comm[(host, pid, tid)] = ptr
        self._proc_comm[(host, pid)] = ptr
        self._dev_comm[(host, pid, dev)] = ptr
        info = self._ranks.get(key)
        if info is None or info.state == "destroyed":
            # A destroyed communicator's pointer can be reused by a new one.
            info = RankInfo(communicator="", rank=rank, nranks=nranks, host=host, pid=pid, device=dev)
            self._ranks[key] = info
        info.rank, info.nranks, info.device = rank, nranks, dev
        return info

    def _link(self, host: str, pid: int, tid: int, dev: int, m: re.Match[str]) -> None:
        transport, nic, proxy, gdr = split_via(m["via"])
        direction = m["dir"]
        src, dst = int(m["src"]), int(m["dst"])
        conn = m.groupdict().get("conn")
        ckey = self._ckey(host, pid, tid, dev)
        me = self._ranks.get(ckey) if ckey is not None else None
        link = ChannelLink(
            communicator="",
            host=host,
            pid=pid,
            rank=me.rank if me is not None else dst if direction == "receive" else src,
            channel=int(m["ch"]),
            conn_index=int(conn) if conn is not None else None,
            from_rank=src,
            to_rank=dst,
            direction=direction,
            via=m["via"].strip(),
            transport=transport,
            nic=nic,
            proxy_rank=proxy,
            gdrdma=gdr,
        )
        self._links.append((ckey, link))
        self._version += 1

    # -- resolution ---------------------------------------------------------------------------
    def _comm_name(self, ckey: tuple[str, int, str] | None, proc: ProcKey, depth: int = 0) -> str:
        """A communicator's name: its ``commId``; a split's, its parent's name with the split's
        count and colour (the same on every rank of the split: ``0x9a…/split2/color0``); else
        ``host:pid:comm-pointer`` (one rank's own, when no line names it for all)."""
        if ckey is None:
            return f"{proc[0]}:{proc[1]}"
        cid = self._comm_id.get(ckey)
        if cid:
            return cid
        sp = self._split.get(ckey)
        if sp is not None and depth < 8:
            parent = (ckey[0], ckey[1], sp[0])
            if parent in self._ranks:
                return f"{self._comm_name(parent, proc, depth + 1)}/split{sp[1]}/color{sp[2]}"
        return f"{ckey[0]}:{ckey[1]}:{ckey[2]}"

    def process_groups(self) -> dict[ProcKey, str]:
        """Each process's job as its communicators show it: processes that share a communicator
        are one job (one ``commId`` on all its ranks), and a job is named by its largest
        communicator (its world). Processes whose lines name no shared communicator stand alone."""
        parent: dict[object, object] = {}

        def find(x: object) -> object:
            while parent.setdefault(x, x) != x:
                parent[x] = parent[parent[x]]  # type: ignore[index]
                x = parent[x]
            return x

        size: dict[str, int] = {}
        for key, info in self._ranks.items():
            name = self._comm_name(key, (key[0], key[1]))
            if name.startswith(f"{key[0]}:{key[1]}:"):
                find((key[0], key[1]))
                continue  # one rank's own name: it joins nothing
            parent[find((key[0], key[1]))] = find(name)
            if "/split" not in name:
                size[name] = max(size.get(name, 0), info.nranks or 0)
        best: dict[object, tuple[int, str]] = {}
        for name, n in size.items():
            root = find(name)
            if root not in best or n > best[root][0]:
                best[root] = (n, name)
        out: dict[ProcKey, str] = {}
        for key in {(k[0], k[1]) for k in self._ranks}:
            hit = best.get(find(key))
            out[key] = hit[1] if hit else f"{key[0]}:{key[1]}"
        return out

    def nic_name(self, host: str, pid: int, nic: int | None, net: str = "IB") -> str | None:
        """The device behind NCCL's NET index (the first HCA of a merged device)."""
        if nic is None:
            return None
        table = self.nics if net_name(net) == "IB" else self.socket_nics
        names = table.get((host, pid), {}).get(nic)
        return names[0] if names else None

    @property
    def ranks(self) -> list[RankInfo]:
        out = []
        for key, info in self._ranks.items():
            info.communicator = self._comm_name(key, (key[0], key[1]))
            out.append(info)
        return out

    @property
    def links(self) -> list[ChannelLink]:
        out = []
        for ckey, link in self._links:
            link.communicator = self._comm_name(ckey, (link.host, link.pid))
            if link.transport.startswith("NET/"):
                link.nic_name = self.nic_name(link.host, link.pid, link.nic, link.transport[4:])
                link.port = f"{link.host}/{link.nic_name}" if link.nic_name else None
            out.append(link)
        return out

    @property
    def rings(self) -> dict[tuple[str, int], dict[int, tuple[int, int]]]:
        """(communicator, channel) -> {rank: (prev, next)}."""
        out: dict[tuple[str, int], dict[int, tuple[int, int]]] = {}
        for ckey, proc, ch, me, prev, nxt in self._rings:
            out.setdefault((self._comm_name(ckey, proc), ch), {})[me] = (prev, nxt)
        for key, order in self.ring_orders.items():
            ring = out.setdefault(key, {})
            for i, r in enumerate(order):
                ring.setdefault(r, (order[i - 1], order[(i + 1) % len(order)]))
        return out

    @property
    def ring_orders(self) -> dict[tuple[str, int], tuple[int, ...]]:
        """(communicator, channel) -> its ring's ranks in order, from ``Channel NN/MM : r0 r1 …``."""
        return {(self._comm_name(ck, proc), ch): order for ck, proc, ch, order in self._ring_orders}

    @property
    def trees(self) -> dict[tuple[str, int], dict[int, tuple[int, tuple[int, ...]]]]:
        """(communicator, tree channel) -> {rank: (parent, children)}; -1 is none."""
        out: dict[tuple[str, int], dict[int, tuple[int, tuple[int, ...]]]] = {}
        for ckey, proc, ch, me, up, down in self._trees:
            out.setdefault((self._comm_name(ckey, proc), ch), {})[me] = (up, tuple(d for d in down if d >= 0))
        return out

    def _reindex(self) -> None:
        """Hash indexes for the per-row lookups (a job has thousands of ranks and links)."""
        if self._index_version == self._version:
            return
        self._dev_by_rank = {}
        for (h, p, _), i in self._ranks.items():
            self._dev_by_rank.setdefault((h, p, i.rank, i.nranks), set()).add(i.device)
            self._dev_by_rank.setdefault((h, p, i.rank, None), set()).add(i.device)
        self._net_by_channel = {}
        for _, lk in self._links:
            if lk.direction != "receive":
                self._net_by_channel.setdefault((lk.host, lk.pid, lk.from_rank, lk.channel), set()).add(
                    lk.transport
                )
        self._index_version = self._version

    def device_of(
        self, host: str, pid: int, rank: int | None = None, nranks: int | None = None
    ) -> int | None:
        """CUDA device of a process (and rank): from its Init lines, else its one ``[dev]`` prefix."""
        if rank is not None:
            self._reindex()
            hits = self._dev_by_rank.get((host, pid, rank, nranks))
            if hits is not None and len(hits) == 1:
                return next(iter(hits))
        devs = self._proc_devs.get((host, pid))
        if devs is not None and len(devs) == 1:
            return next(iter(devs))
        return None

    def transport_of(self, host: str, pid: int, rank: int, channel: int) -> str | None:
        """What a rank's channel sends over: its network transport when one of its connections
        leaves the host (the hop fabric faults slow), else its one intra-node transport; None
        when unknown or ambiguous (two different network transports)."""
        self._reindex()
        seen = self._net_by_channel.get((host, pid, rank, channel))
        if not seen:
            return None
        net = {t for t in seen if t.startswith("NET/")}
        pick = net or seen
        return next(iter(pick)) if len(pick) == 1 else None

    def net_port(self, host: str, pid: int, rank: int, channel: int, peer: int, direction: str) -> str | None:
        """The NIC port key a rank's network connection to ``peer`` on ``channel`` uses (the
        profiler's ProxyOp names channel and peer; the channel line names the NIC): None when
        the lines do not say, or name two NICs (a NIC name only resolves with ``NET/IB : Using``)."""
        if self._port_version != self._version or self._port_version < 0:
            self._port_by_conn = {}
            for lk in self.links:
                if lk.port is not None:
                    key = (lk.host, lk.pid, lk.from_rank, lk.to_rank, lk.channel)
                    self._port_by_conn.setdefault(key, set()).add(lk.port)
            self._port_version = self._version
        src, dst = (rank, peer) if direction == "send" else (peer, rank)
        ports = self._port_by_conn.get((host, pid, src, dst, channel))
        return next(iter(ports)) if ports is not None and len(ports) == 1 else None

    # -- tables and judgements ----------------------------------------------------------------
    def ranks_table(self) -> pa.Table:
        rows = self.ranks
        return pa.table(
            {
                "communicator": fitted_array([r.communicator for r in rows], pa.string()),
                "rank": fitted_array([r.rank for r in rows], pa.int32()),
                "nranks": fitted_array([r.nranks for r in rows], pa.int32()),
                "host": fitted_array([r.host for r in rows], pa.string()),
                "pid": fitted_array([r.pid for r in rows], pa.int64()),
                "device": fitted_array([r.device for r in rows], pa.int16()),
                "bus_id": fitted_array([r.bus_id for r in rows], pa.string()),
                "nnodes": fitted_array([r.nnodes for r in rows], pa.int32()),
                "local_rank": fitted_array([r.local_rank for r in rows], pa.int32()),
                "state": fitted_array([r.state for r in rows], pa.string()),
            }
        )

    def links_table(self) -> pa.Table:
        rows = self.links
        col = lambda name, typ: fitted_array([getattr(r, name) for r in rows], typ)  # noqa: E731
        return pa.table(
            {
                "communicator": col("communicator", pa.string()),
                "host": col("host", pa.string()),
                "pid": col("pid", pa.int64()),
                "rank": col("rank", pa.int32()),
                "channel": col("channel", pa.int16()),
                "conn_index": col("conn_index", pa.int16()),
                "from_rank": col("from_rank", pa.int32()),
                "to_rank": col("to_rank", pa.int32()),
                "direction": col("direction", pa.string()),
                "transport": col("transport", pa.string()),
                "nic": col("nic", pa.int16()),
                "proxy_rank": col("proxy_rank", pa.int32()),
                "gdrdma": col("gdrdma", pa.bool_()),
                "nic_name": col("nic_name", pa.string()),
                "port": col("port", pa.string()),
                "via": col("via", pa.string()),
            }
        )

    def transport_issues(
        self, expected_net: str | None = None, expect_gdr: bool | None = None
    ) -> list[TransportIssue]:
        """Connections that fell back to a slower transport.

        ``expected_net`` (``"IB"``) names the NET plugin every inter-node link should use; left
        None, the most common NET transport within each communicator is expected. ``expect_gdr``
        True flags every NET/IB link without GDRDMA; None flags them only in a communicator
        where other NET/IB links do have it (the same fabric, one host lacking its GDR module).
        """
        links = self.links
        issues: list[TransportIssue] = []
        by_comm: dict[str, list[ChannelLink]] = {}
        for lk in links:
            if lk.transport.startswith("NET/"):
                by_comm.setdefault(lk.communicator, []).append(lk)
        for comm, net in by_comm.items():
            want = (
                f"NET/{net_name(expected_net)}"
                if expected_net
                else Counter(lk.transport for lk in net).most_common(1)[0][0]
            )
            ib_gdr = any(lk.gdrdma for lk in net if lk.transport == "NET/IB")
            for lk in net:
                peer = lk.to_rank if lk.rank == lk.from_rank else lk.from_rank
                if lk.transport != want:
                    issues.append(
                        TransportIssue(
                            "net_fallback",
                            comm,
                            lk.host,
                            lk.pid,
                            lk.rank,
                            lk.channel,
                            lk.via,
                            want,
                            lk.nic,
                            lk.port,
                            peer,
                        )
                    )
                elif (
                    lk.transport == "NET/IB"
                    and not lk.gdrdma
                    and (expect_gdr or (expect_gdr is None and ib_gdr))
                ):
                    issues.append(
                        TransportIssue(
                            "no_gdrdma",
                            comm,
                            lk.host,
                            lk.pid,
                            lk.rank,
                            lk.channel,
                            lk.via,
                            "NET/IB/<nic>/GDRDMA",
                            lk.nic,
                            lk.port,
                            peer,
                        )
                    )
        if expected_net:
            for (host, pid), network in self.network.items():
                if net_name(network) != net_name(expected_net):
                    issues.append(
                        TransportIssue("network_fallback", None, host, pid, None, None, network, expected_net)
                    )
        return issues
