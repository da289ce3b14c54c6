"""A fake UFM that speaks UFM's documented wire formats, generated from a :class:`FabricSim`.

Tests cannot run a real UFM, so this stands in for one over real HTTP, with the same payloads a
UFM Enterprise server and its UFM Telemetry endpoint send:

* REST ``GET /ufmRest/resources/ports|links`` (basic auth) and ``/ufmRestV3/…`` (access token
  sent as ``Authorization: Basic <token>``), with UFM's field names (``guid``, ``number``,
  ``physical_state: "Link Up"``, ``active_speed: "XDR"``, ``active_width: "4x"``, both null on a
  port that is not up, …);
* UFM Telemetry ``GET /metrics`` (Prometheus text, ``node_guid``/``port_guid``/``port_num``
  labels with the GUID spelled differently in each, trailing millisecond timestamps),
  ``GET /csv[/…]`` (a header row of counter names) and ``GET /json[/…]`` (the TFS stream
  document ``{"timestamp", "type", "values": [...]}``).

GUIDs come from the fabric model: an HCA port has its own GUID (port number 1), switch ports
share their node's GUID and differ by port number. Every request reads the current simulated
step; tests move time with :meth:`FakeUfm.advance`. Rendering is vectorized (Arrow string
kernels), so a fabric of hundreds of thousands of ports renders in seconds.
"""

from __future__ import annotations

import asyncio
import base64
import gzip
import json
import secrets
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response

from graywire.collectors.keys import split_port_key
from graywire.collectors.model import Fabric
from graywire.collectors.schemas import PHYS_LINK_UP
from graywire.collectors.ufm.rest import LANE_GBPS, SPEED_ORDER
from graywire.fabricsim.sim import FabricSim, SimStep

#: Canonical column -> (UFM Telemetry counter name, divisor from base units). Data counters go
#: out in 4-octet words, as devices count them.
TELEMETRY_NAMES: dict[str, tuple[str, int]] = {
    "tx_bytes": ("PortXmitDataExtended", 4),
    "rx_bytes": ("PortRcvDataExtended", 4),
    "tx_packets": ("PortXmitPktsExtended", 1),
    "rx_packets": ("PortRcvPktsExtended", 1),
    "symbol_errors": ("SymbolErrorCounterExtended", 1),
    "link_downed": ("LinkDownedCounterExtended", 1),
    "link_recovery": ("LinkErrorRecoveryCounterExtended", 1),
    "rcv_errors": ("PortRcvErrorsExtended", 1),
    "xmit_discards": ("PortXmitDiscardsExtended", 1),
    "xmit_wait_ticks": ("PortXmitWaitExtended", 1),
    "phy_received_bits": ("phy_received_bits", 1),
    "fec_corrected_bits": ("phy_corrected_bits", 1),
    "fec_corrected_blocks": ("rs_fec_corrected_blocks", 1),
    "fec_uncorrectable_blocks": ("rs_fec_uncorrectable_blocks", 1),
    "fec_mode": ("fec_mode_active", 1),
}
#: The TFS stream's names for UFM's monitoring counters (as in the real TFS sample).
TFS_NAMES: dict[str, tuple[str, int]] = {
    "tx_bytes": ("Infiniband_MBOut_u_Gb", 4),
    "rx_bytes": ("Infiniband_MBIn_u_Gb", 4),
    "tx_packets": ("Infiniband_PckOut_u_Packets", 1),
    "rx_packets": ("Infiniband_PckIn_u_Packets", 1),
    "symbol_errors": ("Infiniband_SymbolErrors_u_Errors", 1),
    "link_recovery": ("Infiniband_LinkRecovers_u_Errors", 1),
    "link_downed": ("Infiniband_LinkDowned_u_Errors", 1),
    "rcv_errors": ("Infiniband_RcvErrors_u_Errors", 1),
    "xmit_discards": ("Infiniband_XmtDiscards_u_Errors", 1),
    "xmit_wait_ticks": ("Infiniband_XmitWait_u_Ticks", 1),
}
_NAME_OF_LANE = {v: k for k, v in reversed(list(LANE_GBPS.items()))}  # 10 Gb/s -> QDR, not FDR10
_PHYS_TEXT = {1: "Sleep", 2: "Polling", 3: "Disabled", 4: "PortConfigurationTraining", 5: "Link Up",
              6: "LinkErrorRecovery", 7: "PhyTest"}  # fmt: skip
_LOGICAL_TEXT = {1: "Down", 2: "Init", 3: "Arm", 4: "Active"}


def speed_name(speed_bps: int | None, width: int | None) -> str:
    """UFM's name of the lane rate of a port running at ``speed_bps`` on ``width`` lanes."""
    if not speed_bps or not width:
        return "N/A"
    return _NAME_OF_LANE.get(round(speed_bps / width / 1e9, 4), "N/A")


def _join(pieces: Sequence[pa.Array | str]) -> pa.Array:
    """Element-wise concatenation of string arrays and literals (null where any piece is null)."""
    return pc.binary_join_element_wise(*pieces, "")


def _bytes_of(arr: pa.Array) -> bytes:
    """The concatenated text of a string array: its data buffer between its first and last offsets."""
    arr = arr.drop_null()
    if len(arr) == 0:
        return b""
    width = 8 if arr.type == pa.large_string() else 4
    off = np.frombuffer(arr.buffers()[1], f"<i{width}", len(arr) + 1, arr.offset * width)
    return arr.buffers()[2][int(off[0]) : int(off[-1])].to_pybytes()


def prometheus_text(
    metrics: Sequence[tuple[str, pa.Array]], labels: pa.Array, ts_ms: int | None, help_text: bool = True
) -> bytes:
    """Prometheus exposition text: one family per ``(name, values)``, one line per non-null value.

    ``labels`` holds each row's label block (the text between the braces) and ``values`` the
    row's value as numbers or strings; families are written in order, as a UFM does.
    """
    tail = f" {ts_ms}\n" if ts_ms is not None else "\n"
    out: list[bytes] = []
    for name, values in metrics:
        text = values if pa.types.is_string(values.type) else pc.cast(values, pa.string())
        if help_text:
            out.append(f"# HELP {name} {name}\n# TYPE {name} counter\n".encode())
        out.append(_bytes_of(_join([f"{name}{{", labels, "} ", text, tail])))
    return b"".join(out)


def _hex(values: np.ndarray, prefix: str, width: int) -> pa.Array:
    return pa.array([f"{prefix}{v:0{width}x}" for v in values.tolist()], pa.string())


@dataclass
class _Ports:
    """Static per-port facts of a fabric, in the wire spellings."""

    fabric: Fabric

    @cached_property
    def guid(self) -> np.ndarray:
        return np.array([int(g, 16) if g else 0 for g in self.fabric.guids], dtype=np.uint64)

    @cached_property
    def num(self) -> np.ndarray:
        f = self.fabric
        nums = f.port_num if f.port_num is not None else np.ones(f.n_ports, np.int16)
        return np.where(nums > 0, nums, 1).astype(np.int64)

    @cached_property
    def labels(self) -> pa.Array:
        """Prometheus label blocks, each GUID spelled a different way (as UFM Telemetry does)."""
        src = _hex(self.guid, "0x", 16)
        short = _hex(self.guid, "", 1)
        num = pc.cast(pa.array(self.num), pa.string())
        pieces = [
            'source="',
            src,
            '", node_guid="',
            short,
            '", port_guid="',
            short,
            '", port_num="',
            num,
            '"',
        ]
        return _join(pieces)

    @cached_property
    def guid16(self) -> list[str]:
        return [f"{g:016x}" for g in self.guid.tolist()]


def _node_description(f: Fabric, i: int, num: int) -> str:
    """UFM's node description of a port's end: ``host mlx5_N`` for an HCA, ``switch:port``."""
    node, label = split_port_key(f.keys[i])
    return f"{node} {label}" if f.host_port[i] else f"{node}:{num}"


def links_json(
    fabric: Fabric, ports: _Ports, links: pa.RecordBatch | None, width: np.ndarray
) -> list[dict[str, Any]]:
    """UFM's ``/resources/links`` for a ``link`` batch (the model's cables when there is none)."""
    f, p = fabric, ports
    if links is None:
        ends = zip(f.link_a.tolist(), f.link_b.tolist(), strict=True)
    else:
        ends = zip(
            f.lookup(links.column("a_port")).tolist(), f.lookup(links.column("b_port")).tolist(), strict=True
        )
    out = []
    for a, b in ends:
        na, nb = int(p.num[a]), int(p.num[b])
        # The v6.20 guide's field set (tests/fixtures/corpus/ufm_rest_links): port names and the
        # ends' node descriptions beside the GUIDs and port numbers.
        out.append(
            {
                "name": f"{p.guid16[a]}_{na}:{p.guid16[b]}_{nb}",
                "source_guid": p.guid16[a],
                "source_port": str(na),
                "source_port_dname": str(na),
                "source_port_name": f"{p.guid16[a]}_{na}",
                "source_port_node_description": _node_description(f, a, na),
                "destination_guid": p.guid16[b],
                "destination_port": str(nb),
                "destination_port_dname": str(nb),
                "destination_port_name": f"{p.guid16[b]}_{nb}",
                "destination_port_node_description": _node_description(f, b, nb),
                "width": f"{int(width[a]) or int(f.expected_width[a])}x",
                "severity": "Info",
                "capabilities": [],
                "cable_info": {},
            }
        )
    return out


class FakeUfm:
    """A simulated fabric behind UFM's REST and telemetry endpoints.

    ``step`` is the simulation step every request reads; :meth:`advance` moves to the next one.
    ``delay_s`` makes every response wait (a hung server), ``truncate_to`` cuts telemetry bodies
    after that many bytes while announcing the full length (or ``declare_length`` bytes, a
    server lying about its size), ``telemetry_body`` replaces the telemetry payload
    (garbage tests) and ``telemetry_encoding`` compresses it.
    """

    def __init__(
        self,
        sim: FabricSim,
        *,
        username: str = "admin",
        password: str = "123456",
        token: str | None = None,
    ) -> None:
        self.sim = sim
        self.fabric = sim.fabric
        self.username = username
        self.password = password
        self.token = token or secrets.token_urlsafe(22)
        self.step: SimStep = sim.step()
        self.delay_s = 0.0
        self.truncate_to: int | None = None
        self.declare_length: int | None = None
        self.telemetry_body: bytes | None = None
        #: ``gzip``: telemetry is sent compressed (``Content-Encoding: gzip``), as a proxy in
        #: front of UFM may; ``telemetry_body`` is then sent as it is, already compressed.
        self.telemetry_encoding: str | None = None
        self.requests: list[str] = []
        self._ports = _Ports(self.fabric)
        self.app = create_app(self)

    def advance(self, steps: int = 1) -> SimStep:
        for _ in range(steps):
            self.step = self.sim.step()
        return self.step

    # -- REST -------------------------------------------------------------------------------------
    def _column(self, name: str) -> tuple[np.ndarray, np.ndarray]:
        """A column of the current step, indexed by fabric port (valid mask for missing rows)."""
        b = self.step.port_sample
        idx = b.column("port").indices.to_numpy(zero_copy_only=False)
        vals = np.zeros(self.fabric.n_ports, dtype=np.float64 if name == "temperature_celsius" else np.uint64)
        ok = np.zeros(self.fabric.n_ports, bool)
        arr = b.column(name)
        valid = arr.is_valid().to_numpy(zero_copy_only=False)
        filled = arr.fill_null(0).to_numpy(zero_copy_only=False)
        vals[idx[valid]] = filled[valid]
        ok[idx[valid]] = True
        return vals, ok

    def ports_json(self) -> list[dict[str, Any]]:
        f, p = self.fabric, self._ports
        phys, has = self._column("phys_state")
        logical, _ = self._column("logical_state")
        speed, _ = self._column("speed_bps")
        width, _ = self._column("width")
        host = f.host_port
        peers = self._peers()
        out = []
        for i in range(f.n_ports):
            if not has[i]:
                continue  # the simulator left this port out of the poll (collector outage)
            node, _ = split_port_key(f.keys[i])
            num = int(p.num[i])
            up = int(phys[i]) == PHYS_LINK_UP
            exp_w = int(f.expected_width[i]) or 4
            exp_name = speed_name(int(f.expected_speed_bps[i]), exp_w)
            enabled = list(SPEED_ORDER[: SPEED_ORDER.index(exp_name) + 1]) if exp_name in SPEED_ORDER else []
            peer = int(peers[i]) if up else -1  # UFM names the peer it discovered, none when down
            entry: dict[str, Any] = {
                "guid": p.guid16[i],
                "name": f"{p.guid16[i]}_{num}",
                "number": num,
                "external_number": num,
                "dname": f"HCA-1/{num}" if host[i] else str(num),
                "description": "Computer IB Port" if host[i] else "Switch IB Port",
                "node_description": _node_description(f, i, num),
                "system_name": node,
                "systemID": p.guid16[i],
                "physical_state": _PHYS_TEXT.get(int(phys[i]), "N/A"),
                "logical_state": _LOGICAL_TEXT.get(int(logical[i]), "N/A"),
                # A port that is not up: JSON null, as the guide's Ports example shows a Polling port
                # (tests/fixtures/corpus/ufm_rest_ports).
                "active_speed": speed_name(int(speed[i]), int(width[i])) if up else None,
                "active_width": f"{int(width[i])}x" if up else None,
                "enabled_speed": enabled,
                "enabled_width": [w for w in ("1x", "2x", "4x") if int(w[0]) <= exp_w],
                "supported_speed": list(SPEED_ORDER),
                "supported_width": ["1x", "2x", "4x", "8x", "12x"],
                "severity": "Info",
                "high_ber_severity": "N/A",
                "peer_port_dname": "N/A",  # replaced below when the port has a peer
                "mtu": 4096,
                "tier": 1 if host[i] else 2,
            }
            if peer >= 0:
                pnode, plabel = split_port_key(f.keys[peer])
                pnum = int(p.num[peer])
                entry |= {
                    "peer": f"{p.guid16[peer]}_{pnum}",
                    "peer_guid": p.guid16[peer],
                    "peer_node_guid": p.guid16[peer],
                    "peer_node_name": pnode,
                    "peer_port_dname": f"HCA-1/{pnum}" if host[peer] else str(pnum),
                    "peer_node_description": f"{pnode} {plabel}" if host[peer] else f"{pnode}:{pnum}",
                }
            out.append(entry)
        return out

    def _peers(self) -> np.ndarray:
        """Each port's peer over the current step's cables (a moved cable's new end, none for an
        unplugged one), the model's where the simulator reports no cables."""
        f, links = self.fabric, self.step.links
        if links is None:
            return f.peer
        a, b = f.lookup(links.column("a_port")), f.lookup(links.column("b_port"))
        ok = (a >= 0) & (b >= 0)
        peers = np.full(f.n_ports, -1, np.int64)
        peers[a[ok]], peers[b[ok]] = b[ok], a[ok]
        return peers

    def links_json(self) -> list[dict[str, Any]]:
        """The cables of the current step (a down or unplugged one is not listed), as UFM does."""
        width, _ = self._column("width")
        return links_json(self.fabric, self._ports, self.step.links, width)

    # -- telemetry --------------------------------------------------------------------------------
    def _rows(self) -> np.ndarray:
        return self.step.port_sample.column("port").indices.to_numpy(zero_copy_only=False)

    def _values(self, column: str, divisor: int) -> pa.Array:
        arr = self.step.port_sample.column(column)
        if divisor != 1:
            arr = pc.divide(arr, pa.scalar(divisor, arr.type))  # integer division: whole words
        return arr

    @property
    def time_us(self) -> int:
        return int(self.step.time.timestamp() * 1_000_000)

    def prometheus(self) -> bytes:
        labels = self._ports.labels.take(pa.array(self._rows()))
        metrics = [(name, self._values(col, div)) for col, (name, div) in TELEMETRY_NAMES.items()]
        temp = self.step.port_sample.column("temperature_celsius")
        metrics.append(("CableInfo_Temperature", pc.round(temp.cast(pa.float64()), 1)))
        return prometheus_text(metrics, labels, self.time_us // 1000)

    def csv(self) -> bytes:
        rows = self._rows()
        g = self._ports.guid[rows]
        guid = _hex(g, "0x", 16)
        header = ["timestamp", "source_id", "tag", "node_guid", "port_guid", "port_num"]
        cols: list[pa.Array | str] = [str(self.time_us), ",", guid, ",,", guid, ",", guid, ","]
        cols.append(pc.cast(pa.array(self._ports.num[rows]), pa.string()))
        for col, (name, div) in TELEMETRY_NAMES.items():
            header.append(name)
            cols += [",", pc.fill_null(pc.cast(self._values(col, div), pa.string()), "")]
        header.append("CableInfo.Temperature")
        temp = pc.round(self.step.port_sample.column("temperature_celsius").cast(pa.float64()), 1)
        cols += [",", pc.fill_null(pc.cast(temp, pa.string()), ""), "\n"]
        return (",".join(header) + "\n").encode() + _bytes_of(_join(cols))

    def tfs_json(self) -> bytes:
        rows = self._rows()
        g = self._ports.guid[rows].tolist()
        nums = self._ports.num[rows].tolist()
        values = {name: self._values(col, div).to_pylist() for col, (name, div) in TFS_NAMES.items()}
        t = self.time_us
        records = []
        for k in range(len(rows)):
            rec: dict[str, Any] = {
                "timestamp": t,
                "source_id": f"0x{g[k]:016x}",
                "node_guid": f"0x{g[k]:016x}",
                "port_guid": f"0x{g[k]:016x}",
                "port_num": nums[k],
            }
            rec |= {name: v[k] for name, v in values.items() if v[k] is not None}
            records.append(rec)
        return json.dumps({"timestamp": self.step.time.strftime("%Y-%m-%d %H:%M:%S"), "type": "full",
                           "values": records}).encode()  # fmt: skip


class _Truncated(Response):
    """Announces ``full`` bytes, sends fewer, then ends: a server dying mid-response."""

    def __init__(self, body: bytes, full: int, media_type: str) -> None:
        super().__init__(content=body, media_type=media_type, headers={"content-length": str(full)})


def _basic_ok(header: str, user: str, password: str) -> bool:
    if not header.startswith("Basic "):
        return False
    try:
        got = base64.b64decode(header[6:], validate=True).decode()
    except ValueError:
        return False
    return secrets.compare_digest(got, f"{user}:{password}")


def create_app(fake: FakeUfm) -> FastAPI:
    """The HTTP face of ``fake``: UFM REST (basic and token) and UFM Telemetry endpoints."""
    app = FastAPI(title="fake UFM", openapi_url=None, docs_url=None, redoc_url=None)
    app.state.ufm = fake

    def unauthorized() -> Response:
        return JSONResponse({"error": "Unauthorized"}, 401, headers={"WWW-Authenticate": 'Basic realm="UFM"'})

    async def pace(request: Request) -> None:
        fake.requests.append(request.url.path)
        if fake.delay_s:
            await asyncio.sleep(fake.delay_s)

    @app.get("/ufmRest/resources/{resource}")
    async def rest_basic(resource: str, request: Request) -> Response:
        await pace(request)
        if not _basic_ok(request.headers.get("authorization", ""), fake.username, fake.password):
            return unauthorized()
        return _resource(resource)

    @app.get("/ufmRestV3/resources/{resource}")
    async def rest_token(resource: str, request: Request) -> Response:
        await pace(request)
        if not secrets.compare_digest(request.headers.get("authorization", ""), f"Basic {fake.token}"):
            return unauthorized()
        return _resource(resource)

    def _resource(resource: str) -> Response:
        if resource == "ports":
            return JSONResponse(fake.ports_json())
        if resource == "links":
            return JSONResponse(fake.links_json())
        return JSONResponse({"error": f"unknown resource {resource}"}, 404)

    def telemetry(body: bytes, media_type: str) -> Response:
        headers = {"content-encoding": "gzip"} if fake.telemetry_encoding == "gzip" else {}
        if fake.telemetry_body is not None:
            body = fake.telemetry_body
        elif headers:
            body = gzip.compress(body, compresslevel=1)
        if fake.truncate_to is not None:
            return _Truncated(body[: fake.truncate_to], fake.declare_length or len(body), media_type)
        return Response(body, media_type=media_type, headers=headers)

    @app.get("/metrics")
    async def metrics(request: Request) -> Response:
        await pace(request)
        return telemetry(await asyncio.to_thread(fake.prometheus), "text/plain; version=0.0.4")

    @app.get("/csv")
    @app.get("/csv/{name:path}")
    async def csv(request: Request, name: str = "") -> Response:
        await pace(request)
        return telemetry(await asyncio.to_thread(fake.csv), "text/plain")

    @app.get("/json")
    @app.get("/json/{name:path}")
    async def tfs(request: Request, name: str = "") -> Response:
        await pace(request)
        return telemetry(await asyncio.to_thread(fake.tfs_json), "application/json")

    return app
