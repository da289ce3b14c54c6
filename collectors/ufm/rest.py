"""UFM REST: ``/resources/ports`` -> port state, speed and width; ``/resources/links`` -> cables.

Field names follow UFM's own payloads (UFM REST API guide; sample responses in NVIDIA's
ufm_sdk_3.0 repository): a port has ``guid`` (the port GUID of an HCA port, the node GUID of a
switch), ``number``, ``name`` (``<guid>_<number>``), ``dname``, ``system_name``,
``physical_state`` (``"Link Up"``), ``logical_state`` (``"Active"``), ``active_speed`` (a lane
rate name: ``"HDR"``), ``active_width`` (``"4x"``), ``enabled_speed``/``supported_speed``
(lists of names), ``enabled_width``/``supported_width`` and the ``peer_*`` fields; a link has
``source_guid``, ``source_port``, ``destination_guid``, ``destination_port``, ``width`` and
``severity``.

A speed name is a per-lane signalling rate: a 4x HDR port runs at 200G, 4x NDR at 400G, 4x XDR
at 800G (and 4x EDR 100G, 4x FDR 56G); ``speed_bps`` is the lane rate times the active width.
UFM gives no number, so an unknown name leaves the speed null rather than guessed. Only a port
whose physical state is LinkUp reports a speed and width (records.md: a port that is down says
nothing about its speed).

The maximum speed a port *could* run at (its highest enabled speed times its widest enabled
width) is its ``port_capability`` record, which the collector sends beside the port samples when
it changed since its last good scrape; :func:`expected_from_capabilities` turns it into an
expected speed for the ports the inventory leaves at 0 (unknown): the lower of the two ends of
each link, since a link trains to what both ends enable.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

import httpx
import numpy as np
import pyarrow as pa

from graywire.collectors.base import BAD_PORT, ScrapeResult, Skips, guarded_scrape, redact_url
from graywire.collectors.model import Fabric
from graywire.collectors.schemas import (
    LINK,
    LOGICAL_ACTIVE,
    PHYS_LINK_UP,
    PORT_CAPABILITY,
    PORT_SAMPLE,
    TS,
    RecordKind,
    make_batch,
    record_kind,
)
from graywire.collectors.ufm.http import REST_PREFIX, UfmHttp, UfmHttpSettings
from graywire.collectors.ufm.ports import BAD, PortKeys

#: Per-lane data rate of each InfiniBand speed name, in Gb/s (sysfs spells 4X FDR "56 Gb/sec").
LANE_GBPS: dict[str, float] = {
    "SDR": 2.5,
    "DDR": 5,
    "QDR": 10,
    "FDR10": 10,
    "FDR": 14,
    "EDR": 25,
    "HDR": 50,
    "NDR": 100,
    "XDR": 200,
}
#: Speed names in rising order (what a port that supports one usually also enables).
SPEED_ORDER: tuple[str, ...] = ("SDR", "DDR", "QDR", "FDR10", "FDR", "EDR", "HDR", "NDR", "XDR")

#: physical_state strings -> IB PortPhysicalState codes (spaces and case ignored).
PHYS_STATES: dict[str, int] = {
    "sleep": 1,
    "polling": 2,
    "disabled": 3,
    "portconfigurationtraining": 4,
    "linkup": PHYS_LINK_UP,
    "linkerrorrecovery": 6,
    "phytest": 7,
}
#: logical_state strings -> IB PortState codes.
LOGICAL_STATES: dict[str, int] = {
    "down": 1,
    "init": 2,
    "initialize": 2,
    "arm": 3,
    "armed": 3,
    "active": LOGICAL_ACTIVE,
}


def speed_name_gbps(name: Any) -> float | None:
    """Lane rate of a UFM speed name (``"NDR"``, ``"ndr"``, ``"NDR 400G"``), None when unknown."""
    if not isinstance(name, str) or not name.strip():
        return None
    return LANE_GBPS.get(name.strip().split()[0].upper())


#: More lanes than any port has (IB widths are 1x, 2x, 4x, 8x, 12x; the column is uint8).
MAX_LANES = 255


def width_lanes(width: Any) -> int | None:
    """Lanes of a UFM width (``"4x"``, ``"4X"``, 4), None when unknown or absurd (0, 300)."""
    if isinstance(width, str):
        w = width.strip().lower().removesuffix("x")
        width = int(w) if w.isascii() and w.isdigit() and len(w) < 4 else None  # "²".isdigit() too
    if not isinstance(width, int) or isinstance(width, bool):
        return None
    return width if 0 < width <= MAX_LANES else None


def port_speed_bps(speed: Any, width: Any) -> int | None:
    lane, lanes = speed_name_gbps(speed), width_lanes(width)
    if lane is None or lanes is None:
        return None
    return round(lane * lanes * 1e9)


def _max_speed(speeds: Any, widths: Any) -> tuple[int | None, int | None]:
    """Best lane rate times widest width of a port's enabled (or supported) lists."""
    lanes = [x for x in (speed_name_gbps(s) for s in speeds or []) if x] if isinstance(speeds, list) else []
    ws = [x for x in (width_lanes(w) for w in widths or []) if x] if isinstance(widths, list) else []
    if not lanes or not ws:
        return None, max(ws) if ws else None
    return round(max(lanes) * max(ws) * 1e9), max(ws)


def _state(table: dict[str, int], value: Any) -> int | None:
    if not isinstance(value, str):
        return None
    return table.get(value.replace(" ", "").replace("_", "").lower())


def _require_list(doc: Any, what: str) -> list[dict[str, Any]]:
    if not isinstance(doc, list) or not all(isinstance(x, dict) for x in doc):
        raise ValueError(f"UFM {what}: expected a JSON list of objects, got {type(doc).__name__}")
    return doc


def _num(value: Any, what: str) -> int | None:
    """A port number (0-65535), None when absent; ValueError when it is no port number."""
    if value is None or value == "":
        return None
    if isinstance(value, str) and value.strip().isascii() and value.strip().isdigit():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= 65535:
        raise ValueError(f"{what} is not a port number: {value!r}")
    return value


def parse_ports(
    ports: Any, keys: PortKeys, now: datetime, source: str = "ufm", skipped: Skips | None = None
) -> tuple[pa.RecordBatch, pa.RecordBatch]:
    """``/resources/ports`` JSON -> (``port_sample`` batch of state/speed/width, ``port_capability`` batch).

    Counters are null: UFM REST carries state, the telemetry endpoint carries counters. Raises
    ValueError when the document is not a list of port records, or when no record names a
    usable port; a record without a GUID, with one that is not a GUID or with a port number
    that is none is left out and counted in ``skipped`` as ``bad_port``.
    """
    ports = _require_list(ports, "ports")
    errors: list[str] = []
    guids: list[str | None] = []
    nums: list[int | None] = []
    phys: list[int | None] = []
    logical: list[int | None] = []
    speed: list[int | None] = []
    width: list[int | None] = []
    caps: list[tuple[int | None, int | None, int | None, int | None]] = []
    for p in ports:
        guid = p.get("guid") or p.get("port_guid")
        if not guid:
            name = p.get("name")
            guid = name.rsplit("_", 1)[0] if isinstance(name, str) and "_" in name else None
        try:
            num = _num(p.get("number", p.get("external_number")), f"port {p.get('name')!r} number")
        except ValueError as e:
            errors.append(str(e))
            num, guid = None, None  # no usable port: the record is left out (counted)
        nums.append(num)
        guids.append(str(guid) if guid is not None else None)
        ph = _state(PHYS_STATES, p.get("physical_state"))
        phys.append(ph)
        logical.append(_state(LOGICAL_STATES, p.get("logical_state")))
        up = ph == PHYS_LINK_UP
        speed.append(port_speed_bps(p.get("active_speed"), p.get("active_width")) if up else None)
        width.append(width_lanes(p.get("active_width")) if up else None)
        es, ew = _max_speed(p.get("enabled_speed"), p.get("enabled_width"))
        ss, sw = _max_speed(p.get("supported_speed"), p.get("supported_width"))
        caps.append((es, ew, ss, sw))
    ids = keys.resolve_ids(guids, nums, lenient=True)
    if (ids < 0).any():
        first = int(np.flatnonzero(ids < 0)[0])
        if ids[first] == BAD:
            errors.append(f"not a GUID: {guids[first]!r}")
        errors.append(f"UFM port without a GUID: {json.dumps(ports[first], default=str)[:200]}")
        if not (ids >= 0).any():
            raise ValueError(errors[0])
        if skipped is not None:
            skipped[BAD_PORT] += int(np.count_nonzero(ids < 0))
        ports = [p for p, i in zip(ports, ids.tolist(), strict=True) if i >= 0]
        speed, width, phys, logical, caps = (
            [v for v, i in zip(col, ids.tolist(), strict=True) if i >= 0]
            for col in (speed, width, phys, logical, caps)
        )
        ids = ids[ids >= 0]
    # One row per port: the last entry of a port wins (UFM lists each once; be safe).
    _, last_rev = np.unique(ids[::-1], return_index=True)
    rows = np.sort(len(ids) - 1 - last_rev)
    n = rows.size
    ts = int(now.timestamp() * 1_000_000)
    times = pa.array(np.full(n, ts, dtype="datetime64[us]"), type=TS)

    def col(values: list[int | None], t: pa.DataType) -> pa.Array:
        return pa.array([values[i] for i in rows.tolist()], type=t)

    batch = make_batch(
        PORT_SAMPLE,
        n,
        {
            "time": times,
            "port": keys.port_column(ids[rows]),
            "source": pa.DictionaryArray.from_arrays(pa.array(np.zeros(n, np.int8)), pa.array([source])),
            "phys_state": col(phys, pa.uint8()),
            "logical_state": col(logical, pa.uint8()),
            "speed_bps": col(speed, pa.int64()),
            "width": col(width, pa.uint8()),
        },
    )
    es_, ew_, ss_, sw_ = (
        (list(x) for x in zip(*[caps[i] for i in rows.tolist()], strict=True)) if n else ([],) * 4
    )
    max_speed = [e if e is not None else s for e, s in zip(es_, ss_, strict=True)]
    caps_batch = make_batch(
        PORT_CAPABILITY,
        n,
        {
            "time": times,
            "port": pa.array([keys.keys[i] for i in ids[rows].tolist()], pa.string()),
            "enabled_speed_bps": pa.array(es_, pa.int64()),
            "enabled_width": pa.array(ew_, pa.uint8()),
            "supported_speed_bps": pa.array(ss_, pa.int64()),
            "supported_width": pa.array(sw_, pa.uint8()),
            "max_speed_bps": pa.array(max_speed, pa.int64()),
        },
    )
    return batch, caps_batch


def parse_links(links: Any, keys: PortKeys, source: str = "ufm") -> pa.Table:
    """``/resources/links`` JSON -> the ``link`` table (port keys of both ends)."""
    links = _require_list(links, "links")
    a_guid, a_num, b_guid, b_num = [], [], [], []
    for link in links:
        for g, n, side in (
            (a_guid, a_num, "source"),
            (b_guid, b_num, "destination"),
        ):
            guid = link.get(f"{side}_guid")
            if not guid:
                raise ValueError(f"UFM link without {side}_guid: {json.dumps(link)[:200]}")
            g.append(str(guid))
            n.append(_num(link.get(f"{side}_port"), f"link {link.get('name')!r} {side}_port"))
    a = keys.resolve_ids(a_guid, a_num)
    b = keys.resolve_ids(b_guid, b_num)
    return pa.table(
        {
            "a_port": pa.array([keys.keys[i] for i in a.tolist()], pa.string()),
            "b_port": pa.array([keys.keys[i] for i in b.tolist()], pa.string()),
            "source": pa.array([source] * len(a), pa.string()),
        },
        schema=LINK,
    )


def expected_from_capabilities(fabric: Fabric, caps: pa.RecordBatch | pa.Table) -> np.ndarray:
    """Expected speed per fabric port: the inventory's where it has one, else what both ends allow.

    For a port the inventory leaves at 0, the expectation is the lower ``max_speed_bps`` of the
    port and its link peer (a link trains to what both ends enable); a port UFM does not list,
    or lists without enabled/supported speeds, stays 0 (not judged).
    """
    best = np.zeros(fabric.n_ports, np.int64)
    idx = fabric.lookup(caps.column("port"))
    vals = caps.column("max_speed_bps").fill_null(0).to_numpy()
    known = idx >= 0
    best[idx[known]] = vals[known]
    peer = fabric.peer
    peer_best = np.where(peer >= 0, best[np.maximum(peer, 0)], 0)
    both = np.where((best > 0) & (peer_best > 0), np.minimum(best, peer_best), best)
    return np.where(fabric.expected_speed_bps > 0, fabric.expected_speed_bps, both).astype(np.int64)


def _decode(resource: str, body: bytes) -> Any:
    try:
        return json.loads(body)
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ValueError(f"UFM {resource}: not JSON (truncated?): {e}") from None
    except RecursionError:
        raise ValueError(f"UFM {resource}: JSON nested deeper than any UFM answer") from None


class UfmRestCollector:
    """One UFM server's REST API -> a ``port_sample`` batch (state, speed, width), a ``link`` batch,
    and a ``port_capability`` batch when the ports' capabilities changed."""

    source = "ufm"

    def __init__(
        self,
        url: str,
        fabric: Fabric | None,
        settings: UfmHttpSettings | None = None,
        *,
        links: bool = True,
        transport: httpx.AsyncBaseTransport | None = None,
        clock: Callable[[], datetime] | None = None,
    ) -> None:
        from urllib.parse import urlsplit

        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise ValueError(f"UFM URL must be http(s)://host[:port], not {url!r}")
        self.settings = settings or UfmHttpSettings()
        self.target = redact_url(url.rstrip("/"))
        self.prefix = parts.path.rstrip("/") + REST_PREFIX[self.settings.auth]
        self.links = links
        self.http = UfmHttp(f"{parts.scheme}://{parts.netloc}", self.settings, transport)
        self.keys = PortKeys(fabric)
        #: The ``port_capability`` view last sent (its ``time`` aside, what a new one is compared to).
        self._sent_capabilities: pa.RecordBatch | None = None
        #: The poll time of a batch: UFM REST carries no timestamp, so the scrape's own clock.
        self.clock = clock or (lambda: datetime.now(UTC))

    async def _get_json(self, resource: str) -> Any:
        body, _ = await self.http.get_bytes(f"{self.prefix}/resources/{resource}")
        # Tens of MB of JSON on a large fabric: decoded off the event loop, so the API and the
        # other scrapes never wait for it.
        return await asyncio.to_thread(_decode, resource, body)

    def _parse(
        self, ports: Any, links: Any, now: datetime, skipped: Skips | None = None
    ) -> list[pa.RecordBatch]:
        batch, caps = parse_ports(ports, self.keys, now, self.source, skipped)
        out = [batch, caps]
        if links is not None:
            table = parse_links(links, self.keys, self.source).combine_chunks()
            out.append(
                table.to_batches()[0] if table.num_rows else pa.RecordBatch.from_pylist([], schema=LINK)
            )
        return out

    async def scrape(self) -> ScrapeResult:
        async def fetch() -> tuple[Any, Any]:
            ports = await self._get_json("ports")
            links = await self._get_json("links") if self.links else None
            return ports, links

        def parse(payload: tuple[Any, Any], skipped: Skips) -> tuple[pa.RecordBatch, ...]:
            return tuple(self._parse(*payload, self.clock(), skipped))

        result = await guarded_scrape(self.source, self.target, self.settings.total_timeout_s, fetch, parse)
        return self._unless_unchanged(result) if result.ok else result

    def _unless_unchanged(self, result: ScrapeResult) -> ScrapeResult:
        """``result`` without its ``port_capability`` view when it says what the last one sent did.

        Capabilities change when a cable or a port's configuration does; resending them every
        poll would make every consumer recompute expectations for nothing. Decided here, on the
        event loop, after the scrape succeeded: a parse that finished after a timeout sets nothing.
        """
        kept = []
        for b in result.batches:
            if record_kind(b.schema) == RecordKind.PORT_CAPABILITY:
                view = b.drop_columns(["time"])
                last = self._sent_capabilities
                if b.num_rows == 0 or (last is not None and view.equals(last)):
                    continue
                self._sent_capabilities = view
            kept.append(b)
        return replace(result, batches=tuple(kept))

    async def aclose(self) -> None:
        await self.http.aclose()
