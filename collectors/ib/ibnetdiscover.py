"""``ibnetdiscover`` text (infiniband-diags) -> discovered ports and the cables between them.

Two output formats are read, told apart line by line (the source is infiniband-diags'
``ibnetdiscover.c`` in linux-rdma/rdma-core, and the ibnetdiscover(8) man page):

* the ports report, ``ibnetdiscover -p``: one line per port, a cabled one naming its peer::

      CA   134  1 0x7cfe9003003b4bde 4x EDR - SW  1719 10 0x7cfe9003009ce5b0 ( 'o0001 HCA-1' - 'ib-i1l1s01' )
      SW  2052 37 0x506b4b03005c2740 4x ???                                    'ib-i4l1s01'

  type, LID (a switch's LID for every switch port), port number, port GUID (a switch's ports
  share one), active width and speed, then the peer's type, LID, port and GUID and both node
  descriptions;

* the default topology file: a node block (``switchguid=``/``caguid=`` and a ``Switch``/``Ca``
  header with the node description) followed by one ``[port]`` line per cabled port, with the
  peer and the active width and speed run together (``4xHDR``)::

      Switch  36 "S-7cfe900300a5a2c0"     # "MF0;leaf01:MQM8700/U1" enhanced port 0 lid 1 lmc 0
      [1]     "H-98039b03006c5c1a"[1](98039b03006c5c1b)       # "gpu001 mlx5_0" lid 12 4xHDR
      Ca      1 "H-98039b03006c5c1a"      # "gpu001 mlx5_0"
      [1](98039b03006c5c1b)   "S-7cfe900300a5a2c0"[1]         # lid 12 lmc 0 "leaf01" lid 1 4xHDR

A port's GUID is its port GUID on a CA and the switch GUID on a switch (as UFM and the
inventory name them): the topology format prints the switch's node GUID, the ports report its
port-0 GUID, which are the same on NVIDIA switches. The parser is pure (text in, records out):
a line it cannot read is skipped and counted by reason, never raised on.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Literal

from graywire.collectors.ufm.rest import LANE_GBPS

NodeType = Literal["CA", "SW", "RT"]

#: Skip reasons, as counted in :attr:`IbnetdiscoverResult.skipped`.
UNREADABLE = "unreadable_line"
ROUTER = "router_port"
BAD_NUMBER = "bad_number"

_WIDTHS = {"1x": 1, "2x": 2, "4x": 4, "8x": 8, "12x": 12}
_GUID = r"0x[0-9a-fA-F]{1,16}"
_PORTS_LINE = re.compile(
    rf"^(?P<t>CA|SW|RT)\s+(?P<lid>\d+)\s+(?P<num>\d+)\s+(?P<guid>{_GUID})\s+(?P<w>\d+x|\?\?)\s+(?P<s>\w+|\?\?\?)"
    rf"(?:\s+-\s+(?P<pt>CA|SW|RT)\s+(?P<plid>\d+)\s+(?P<pnum>\d+)\s+(?P<pguid>{_GUID})\s+"
    r"\(\s*'(?P<d>.*?)'\s+-\s+'(?P<pd>.*)'\s*\)"
    r"|\s+'(?P<alone>.*)')\s*$"
)
_SWITCH_HEAD = re.compile(
    r'^Switch\s*(?P<n>\d+)\s*"S-(?P<guid>[0-9a-fA-F]{1,16})"\s*#\s*"(?P<d>.*)"\s+'
    r"(?:enhanced|base)\s+port\s+0\s+lid\s+(?P<lid>\d+)"
)
_CA_HEAD = re.compile(r'^(?P<t>Ca|Rt)\s*(?P<n>\d+)\s*"[HR]-(?P<guid>[0-9a-fA-F]{1,16})"\s*#\s*"(?P<d>.*)"')
_PEER = (
    r'"(?P<pt>[SHR])-(?P<pnode>[0-9a-fA-F]{1,16})"\[(?P<pnum>\d+)\](?:\[ext \d+\])?'
    r"\s*(?:\((?P<pguid>[0-9a-fA-F]{1,16})\))?\s*#\s*"
)
_SPEEDS = "|".join(sorted(LANE_GBPS, key=len, reverse=True))
_TAIL = rf'"(?P<pd>.*)"\s+lid\s+(?P<plid>\d+)\s+(?P<w>\d+x|\?\?)(?P<s>{_SPEEDS}|\?\?\?)(?:\s.*)?$'
_SWITCH_PORT = re.compile(rf"^\[(?P<num>\d+)\](?:\[ext \d+\])?\s*{_PEER}{_TAIL}")
_CA_PORT = re.compile(
    rf"^\[(?P<num>\d+)\]\((?P<guid>[0-9a-fA-F]{{1,16}})\)\s*{_PEER}lid\s+(?P<lid>\d+)\s+lmc\s+\d+\s+{_TAIL}"
)
_IGNORED = re.compile(
    r"^(?:#|vendid=|devid=|sysimgguid=|switchguid=|caguid=|rtguid=|Chassis\b|Non-Chassis Nodes|Hostname:)"
)
_TYPE_OF_LETTER: dict[str, NodeType] = {"S": "SW", "H": "CA", "R": "RT"}


@dataclass(frozen=True, slots=True)
class IbEnd:
    """One end of a cable as ibnetdiscover names it."""

    type: NodeType
    guid: str  # normalized: 0x + 16 hex digits
    num: int
    lid: int | None
    description: str


@dataclass(frozen=True, slots=True)
class IbPort:
    """A port line: the port, what it negotiated (None where ``???``), and its peer if cabled."""

    end: IbEnd
    width: int | None
    speed: str | None  # lane rate name: EDR, HDR, NDR, XDR
    peer: IbEnd | None
    line: int

    @property
    def speed_bps(self) -> int | None:
        lane = LANE_GBPS.get(self.speed or "")
        return round(lane * self.width * 1e9) if lane and self.width else None


@dataclass(slots=True)
class IbnetdiscoverResult:
    """Every port line read, the format(s) seen, and the lines skipped by reason."""

    ports: list[IbPort] = field(default_factory=list)
    formats: set[str] = field(default_factory=set)
    skipped: Counter[str] = field(default_factory=Counter)
    skipped_lines: list[int] = field(default_factory=list)  # the first few, for messages


def _guid(text: str) -> str:
    return f"0x{int(text, 16):016x}"


def _width(text: str) -> int | None:
    return _WIDTHS.get(text.lower())


def _speed(text: str) -> str | None:
    return text if text in LANE_GBPS else None


def parse_ibnetdiscover(text: str) -> IbnetdiscoverResult:
    """Read ``ibnetdiscover`` or ``ibnetdiscover -p`` output; never raises on a bad line."""
    out = IbnetdiscoverResult()
    node: IbEnd | None = None  # topology format: the node block the port lines belong to

    def skip(reason: str, lineno: int) -> None:
        out.skipped[reason] += 1
        if len(out.skipped_lines) < 10:
            out.skipped_lines.append(lineno)

    # Lines as a file has them (\n, CRLF too): str.splitlines would also split at \r, \x85 or
    # \u2028 inside a line and put every later line number off.
    for lineno, raw in enumerate(text.split("\n"), 1):
        line = raw.strip()
        if not line or _IGNORED.match(line):
            continue
        try:
            if m := _PORTS_LINE.match(line):
                out.formats.add("ports")
                if m["t"] == "RT" or m["pt"] == "RT":
                    skip(ROUTER, lineno)
                    continue
                desc = m["d"] if m["alone"] is None else m["alone"]
                end = IbEnd(m["t"], _guid(m["guid"]), int(m["num"]), int(m["lid"]), desc)  # type: ignore[arg-type]
                peer = None
                if m["pt"] is not None:
                    peer = IbEnd(m["pt"], _guid(m["pguid"]), int(m["pnum"]), int(m["plid"]), m["pd"])  # type: ignore[arg-type]
                out.ports.append(IbPort(end, _width(m["w"]), _speed(m["s"]), peer, lineno))
            elif m := _SWITCH_HEAD.match(line):
                out.formats.add("topology")
                node = IbEnd("SW", _guid(m["guid"]), 0, int(m["lid"]), m["d"])
            elif m := _CA_HEAD.match(line):
                out.formats.add("topology")
                t: NodeType = "CA" if m["t"] == "Ca" else "RT"
                node = IbEnd(t, _guid(m["guid"]), 0, None, m["d"])
            elif (m := _SWITCH_PORT.match(line) or _CA_PORT.match(line)) is not None:
                if node is None:
                    skip(UNREADABLE, lineno)  # a port line before any node block
                    continue
                pt = _TYPE_OF_LETTER[m["pt"]]
                if node.type == "RT" or pt == "RT":
                    skip(ROUTER, lineno)
                    continue
                if node.type == "CA":
                    if "guid" not in m.groupdict() or m["guid"] is None:
                        skip(UNREADABLE, lineno)  # a CA port line names its own port GUID
                        continue
                    end = IbEnd("CA", _guid(m["guid"]), int(m["num"]), int(m["lid"]), node.description)
                else:
                    end = IbEnd("SW", node.guid, int(m["num"]), node.lid, node.description)
                if pt == "CA" and m["pguid"] is None:
                    skip(UNREADABLE, lineno)  # a CA peer is named by its port GUID
                    continue
                pguid = _guid(m["pguid"]) if pt == "CA" else _guid(m["pnode"])
                peer = IbEnd(pt, pguid, int(m["pnum"]), int(m["plid"]), m["pd"])
                out.ports.append(IbPort(end, _width(m["w"]), _speed(m["s"]), peer, lineno))
            else:
                skip(UNREADABLE, lineno)
        except (ValueError, OverflowError):
            skip(BAD_NUMBER, lineno)
    return out
