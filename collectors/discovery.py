"""From discovered ports and cables to a :class:`Fabric` and a reviewable inventory document.

Sources differ in what they say, so discovery takes two tables: *port facts*
(:data:`PORT_FACTS`: a port's key, node, kind, GUID, number, the speed and width it runs at and,
where the source knows it, the most it is enabled for) and cables as canonical ``link`` records
(``collectors/schemas.py``). ``ibnetdiscover`` (:func:`facts_from_ibnetdiscover`) and UFM REST
(:func:`facts_from_ufm`) produce both; any source that yields the same two tables (LLDP, say)
plugs in the same way.

Every inference is recorded beside the port or node it is about (:meth:`Discovery.to_yaml`
writes it as YAML comments), so a person can review the file before graywire judges a fabric
against it. The rules are in docs/inventory.md ("Discovery"). Everything per port is numpy over
the port arrays; the Python that remains is per distinct label, node or rule.
"""

from __future__ import annotations

import fnmatch
import json
import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from graywire.collectors.ib.ibnetdiscover import IbEnd, IbnetdiscoverResult
from graywire.collectors.keys import (
    alias_keys,
    by_alias,
    label_of_key,
    node_of_key,
    normalize_guid,
    port_key,
    split_port_key,
)
from graywire.collectors.model import Fabric, PortSpec
from graywire.collectors.schemas import LINK
from graywire.collectors.ufm.rest import port_speed_bps, speed_name_gbps, width_lanes
from graywire.collectors.units import format_speed, parse_speed

if TYPE_CHECKING:  # pysnmp loads only when LLDP is walked
    from graywire.collectors.snmp.lldp import LldpDiscovery

#: What a source knows about each port it saw. ``kind`` is ``host`` (a CA port) or ``switch``;
#: ``speed_bps``/``width`` are what the port negotiated (null when down or unknown);
#: ``max_speed_bps``/``max_width`` the most it is enabled (else supported) for, when the
#: source says (UFM does, ibnetdiscover does not).
PORT_FACTS = pa.schema(
    [
        pa.field("port", pa.string(), nullable=False),
        pa.field("node", pa.string(), nullable=False),
        pa.field("label", pa.string(), nullable=False),
        pa.field("kind", pa.string(), nullable=False),
        pa.field("guid", pa.string()),
        pa.field("num", pa.int32()),
        pa.field("lid", pa.int32()),
        pa.field("speed_bps", pa.int64()),
        pa.field("width", pa.int16()),
        pa.field("max_speed_bps", pa.int64()),
        pa.field("max_width", pa.int16()),
        pa.field("aliases", pa.list_(pa.string())),  # other names on its node (netdev, MAC)
    ],
    metadata={"graywire.record": "port_fact", "graywire.version": "1"},
)
PURPOSES = ("compute", "storage", "management")
#: Below the compute class, a NIC at or above this speed is storage, below it management.
STORAGE_MIN_BPS = 100 * 10**9
#: Share of host compute ports whose NIC order matches their leaf's for a rail-optimized fabric.
RAIL_AGREEMENT = 0.9
_MAX_LISTED = 20  # port notes listed by name in the header; the rest are counted


# -- operator rules ---------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class PurposeRule:
    """``mlx5_[89]=storage``: host ports whose label matches (fnmatch) get that purpose."""

    pattern: str
    purpose: str

    @classmethod
    def parse(cls, text: str) -> PurposeRule:
        pattern, sep, purpose = text.rpartition("=")
        if not sep or not pattern.strip() or purpose.strip() not in PURPOSES:
            raise ValueError(f"--purpose {text!r}: use LABEL_GLOB=PURPOSE, PURPOSE one of {PURPOSES}")
        return cls(pattern.strip(), purpose.strip())


_SELECTORS = ("role", "purpose", "node", "label")


@dataclass(frozen=True, slots=True)
class ExpectRule:
    """``role=host,purpose=compute:800G/4``: ports matching every selector (fnmatch) expect that."""

    match: tuple[tuple[str, str], ...]
    speed_bps: int
    width: int | None
    text: str

    @classmethod
    def parse(cls, text: str) -> ExpectRule:
        sel, sep, value = text.rpartition(":")
        usage = f"--expect {text!r}: use SELECTORS:SPEED[/WIDTH], e.g. role=host,purpose=compute:800G/4"
        if not sep:
            raise ValueError(usage)
        match = []
        for part in filter(None, (p.strip() for p in sel.split(","))):
            if part == "*":
                continue
            k, eq, v = part.partition("=")
            if not eq or k.strip() not in _SELECTORS or not v.strip():
                raise ValueError(f"{usage} (selectors: {', '.join(_SELECTORS)})")
            match.append((k.strip(), v.strip()))
        speed, _, width = value.partition("/")
        try:
            bps = parse_speed(speed.strip())
            w = int(width) if width.strip() else None
        except ValueError as e:
            raise ValueError(f"{usage}: {e}") from None
        if bps <= 0 or (w is not None and not 0 < w <= 32):
            raise ValueError(usage)
        return cls(tuple(match), bps, w, text)


def _matches(values: Sequence[str | None], pattern: str) -> np.ndarray:
    """fnmatch over an array of strings, once per distinct value."""
    uniq, inv = np.unique(np.array([v or "" for v in values], dtype=object), return_inverse=True)
    hit = np.array([fnmatch.fnmatchcase(str(u), pattern) for u in uniq], dtype=bool)
    return hit[inv] if len(values) else np.zeros(0, bool)


# -- naming ---------------------------------------------------------------------------------------
_UNSAFE = re.compile(r"[\s/]+")


def switch_name(description: str, guid: str) -> str:
    """A switch's node name from its node description (``MF0;leaf01:MQM8700/U1`` -> ``leaf01``)."""
    d = description.strip()
    if ";" in d and ":" in d.split(";", 1)[1]:
        d = d.split(";", 1)[1].split(":", 1)[0]
    d = _UNSAFE.sub("-", d.strip()).strip("-")
    return d or f"sw-{guid[2:]}"


def ca_name(description: str, num: int, guid: str) -> tuple[str, str]:
    """(host, label) from a CA's node description: ``gpu001 mlx5_0`` port 1 -> (gpu001, mlx5_0).

    The kernel sets a CA's description to ``<hostname> <device>``; a second port of the device
    is ``<device>:<port>`` (the host agent's label for it).
    """
    tokens = description.split()
    host = _UNSAFE.sub("-", tokens[0]) if tokens else f"ca-{guid[2:]}"
    dev = _UNSAFE.sub("_", "_".join(tokens[1:])) or f"hca-{guid[-6:]}"
    return host, dev if num == 1 else f"{dev}:{num}"


@dataclass
class _FactRows:
    """Port facts keyed by (GUID, port number), first sighting wins, later ones fill gaps."""

    rows: dict[tuple[str, int], dict[str, Any]] = field(default_factory=dict)
    cables: list[tuple[tuple[str, int], tuple[str, int]]] = field(default_factory=list)

    def add(self, ident: tuple[str, int], row: dict[str, Any]) -> None:
        have = self.rows.get(ident)
        if have is None:
            self.rows[ident] = row
        else:
            for k, v in row.items():
                if have.get(k) is None:
                    have[k] = v


def _named(rows: dict[tuple[str, int], dict[str, Any]], notes: list[str]) -> tuple[pa.Table, dict]:
    """Give every port a unique key; colliding names fall back to GUIDs (with a note)."""
    # Switch names per GUID, unique across switches.
    owner: dict[str, str] = {}
    sw_name: dict[str, str] = {}
    for (guid, _), r in rows.items():
        if r["kind"] != "switch" or guid in sw_name:
            continue
        name = r["node"]
        if owner.get(name, guid) != guid:
            notes.append(
                f"switch description {name!r} is shared by several switches: {guid} named {name}-{guid[-6:]}"
            )
            name = f"{name}-{guid[-6:]}"
        owner.setdefault(name, guid)
        sw_name[guid] = name
    keys: Counter[str] = Counter()
    for (guid, _), r in rows.items():
        if r["kind"] == "switch":
            r["node"] = sw_name[guid]
        r["port"] = port_key(r["node"], r["label"])
        keys[r["port"]] += 1
    for (guid, _), r in rows.items():
        if keys[r["port"]] > 1 and r["kind"] == "host":
            notes.append(
                f"{r['port']} names several CA ports (node descriptions not set?): {guid} named ca-{guid[2:]}"
            )
            r["node"] = f"ca-{guid[2:]}"
            r["port"] = port_key(r["node"], r["label"])
    table = pa.Table.from_pylist([{k: r.get(k) for k in PORT_FACTS.names} for r in rows.values()], PORT_FACTS)
    key_of = {ident: r["port"] for ident, r in rows.items()}
    return table, key_of


def _links_table(cables: Iterable[tuple[str, str]], source: str) -> pa.Table:
    a, b = zip(*cables, strict=True) if cables else ((), ())
    return pa.table({"a_port": list(a), "b_port": list(b), "source": [source] * len(a)}, schema=LINK)


def facts_from_ibnetdiscover(parsed: IbnetdiscoverResult) -> tuple[pa.Table, pa.Table, list[str]]:
    """Port facts, ``link`` records and naming notes from a parsed ibnetdiscover output.

    A port's negotiated speed is only kept when it is cabled (a port without a peer shows
    whatever its PortInfo last held, often ``SDR``); a peer seen only from the other end takes
    the speed of the line that names it (both ends of a cable run at one speed).
    """
    facts = _FactRows()
    notes: list[str] = []

    def row(end: IbEnd, width: int | None, speed: int | None) -> tuple[tuple[str, int], dict[str, Any]]:
        if end.type == "SW":
            node, label, kind = switch_name(end.description, end.guid), f"p{end.num}", "switch"
        else:
            (node, label), kind = ca_name(end.description, end.num, end.guid), "host"
        return (end.guid, end.num), {
            "node": node,
            "label": label,
            "kind": kind,
            "guid": end.guid,
            "num": end.num,
            "lid": end.lid,
            "speed_bps": speed,
            "width": width,
        }

    for p in parsed.ports:
        cabled = p.peer is not None
        ident, r = row(p.end, p.width if cabled else None, p.speed_bps if cabled else None)
        facts.add(ident, r)
        if p.peer is not None:
            pid, pr = row(p.peer, p.width, p.speed_bps)
            facts.add(pid, pr)
            facts.cables.append((ident, pid))
    table, key_of = _named(facts.rows, notes)
    links = _links_table([(key_of[a], key_of[b]) for a, b in facts.cables], "ibnetdiscover")
    return table, links, notes


def nic_aliases(ports: Iterable[Mapping[str, Any]]) -> dict[str, str]:
    """``host/netdev``, ``host/mac`` and the bare MAC -> the port's graywire key, from the host
    agents' ``/v1/ports``: a NIC's LLDP agent names its port by netdev or MAC, graywire (and
    NCCL, and the agent's samples) by RDMA device."""
    out: dict[str, str] = {}
    for p in ports:
        key = p.get("port")
        if (node := node_of_key(key)) is not None:
            out.update(dict.fromkeys(alias_keys(node, (p.get("netdev"), p.get("mac"))), key))
    return out


def _renamer(aliases: Mapping[str, str]) -> Any:
    def rename(key: str) -> str:
        found = by_alias(aliases, key)
        return key if found is None else found

    return rename


def facts_from_lldp(
    found: LldpDiscovery, aliases: Mapping[str, str] | None = None
) -> tuple[pa.Table, pa.Table, list[str]]:
    """Port facts, ``link`` records and notes from switches' LLDP neighbours (Ethernet/RoCE).

    Switch ports are the walked interfaces that are cabled or up, at the speed IF-MIB gives
    (ifHighSpeed: the configured speed of a port that is down too). A neighbour that is not a
    walked switch port is a host NIC, keyed as it names itself (``lldpRemSysName`` /
    ``lldpRemPortId``), at its switch port's speed: both ends of a cable run at one speed.
    LLDP carries no lane count, so widths stay unset. ``aliases`` (:func:`nic_aliases`) renames
    a NIC named by netdev or MAC to its RDMA device's key.
    """
    notes = [f"{t}: not walked ({why})" for t, why in sorted(found.errors.items())]
    notes += [f"{t}: no LLDP-MIB answered; its cables are unknown" for t in found.without_lldp]
    links = found.links.select(["a_port", "b_port", "source"]).cast(LINK)
    rename = _renamer(aliases or {})
    if aliases:
        links = pa.table(
            {
                "a_port": [rename(k) for k in links["a_port"].to_pylist()],
                "b_port": [rename(k) for k in links["b_port"].to_pylist()],
                "source": links["source"],
            },
            schema=LINK,
        )
    cabled = set(links["a_port"].to_pylist()) | set(links["b_port"].to_pylist())
    iface = found.interfaces.to_pylist()
    speed_of = {r["port"]: r["speed_bps"] for r in iface}
    rows: dict[str, dict[str, Any]] = {}
    for r in iface:
        if r["port"] in cabled or r["oper_up"]:
            node, label = split_port_key(r["port"])
            rows[r["port"]] = {"port": r["port"], "node": node, "label": label, "kind": "switch",
                               "speed_bps": r["speed_bps"] if r["port"] in cabled else None}  # fmt: skip
    names_of: dict[str, set[str]] = {}
    for alias, port in (aliases or {}).items():
        if (label := label_of_key(alias)) is not None:
            names_of.setdefault(port, set()).add(label)
    unmatched = keyed_by_chassis = 0
    for n in found.neighbors.to_pylist():
        key = rename(n["remote_port"])
        if key in rows or key in speed_of:
            continue
        if key == n["remote_port"]:  # a host NIC named only as its LLDP agent says
            unmatched += 1
            keyed_by_chassis += n["sys_name"] is None
        node, label = split_port_key(key)
        rows[key] = {"port": key, "node": node, "label": label, "kind": "host",
                     "speed_bps": speed_of.get(n["local_port"]),
                     "aliases": sorted(names_of.get(key, ())) or None}  # fmt: skip
    if aliases and unmatched:
        notes.append(f"{unmatched} host NIC(s) match no host agent's netdev or MAC: named as LLDP says")
    if keyed_by_chassis:
        notes.append(
            f"{keyed_by_chassis} neighbour(s) send no system name: their ports are keyed by chassis id, "
            "rename them"
        )
    table = pa.Table.from_pylist([{k: r.get(k) for k in PORT_FACTS.names} for r in rows.values()], PORT_FACTS)
    known = pa.array(list(rows), pa.string())
    both = pc.and_(pc.is_in(links["a_port"], known), pc.is_in(links["b_port"], known))
    return table, links.filter(both), notes


def _max_of(speeds: Any, widths: Any) -> tuple[int | None, int | None]:
    lanes = [x for x in (speed_name_gbps(s) for s in speeds) if x] if isinstance(speeds, list) else []
    ws = [x for x in (width_lanes(w) for w in widths) if x] if isinstance(widths, list) else []
    if not ws:
        return None, None
    return (round(max(lanes) * max(ws) * 1e9) if lanes else None), max(ws)


def _ufm_kind(p: Mapping[str, Any]) -> str:
    text = f"{p.get('description') or ''} {p.get('dname') or ''}".lower()
    if "switch" in text:
        return "switch"
    return "host" if ("computer" in text or "hca" in text or "host" in text) else "switch"


def facts_from_ufm(ports: Any, links: Any) -> tuple[pa.Table, pa.Table, list[str], Counter[str]]:
    """Port facts and ``link`` records from UFM REST ``/resources/ports`` and ``/resources/links``.

    A host port is named by its ``system_name`` and the device in its ``node_description``
    (``gpu-0001 mlx5_0``), else its ``dname`` (``HCA-1/1``); a switch port is ``p<number>``.
    Records without a usable GUID or number are skipped and counted.
    """
    skipped: Counter[str] = Counter()
    notes: list[str] = []
    facts = _FactRows()
    by_guid: dict[str, tuple[str, int]] = {}
    for p in ports if isinstance(ports, list) else []:
        if not isinstance(p, Mapping):
            skipped["not_a_port"] += 1
            continue
        try:
            guid = normalize_guid(str(p.get("guid") or p.get("port_guid") or ""))
            num = int(p.get("number", p.get("external_number")))
        except (TypeError, ValueError):
            skipped["bad_port"] += 1
            continue
        kind = _ufm_kind(p)
        desc = str(p.get("node_description") or "")
        system = str(p.get("system_name") or "").strip()
        if kind == "switch":
            node, label = switch_name(system or desc.split(":")[0], guid), f"p{num}"
        else:
            host, dev = ca_name(desc, num, guid)
            if len(desc.split()) < 2 and p.get("dname"):
                dev = _UNSAFE.sub("_", str(p["dname"]).split("/")[0])
                dev = dev if num == 1 else f"{dev}:{num}"
            node, label = _UNSAFE.sub("-", system) or host, dev
        up = str(p.get("physical_state", "")).replace(" ", "").lower() == "linkup"
        ms, mw = _max_of(p.get("enabled_speed"), p.get("enabled_width"))
        if ms is None:
            ms, mw = _max_of(p.get("supported_speed"), p.get("supported_width"))
        lid = p.get("lid")
        facts.add(
            (guid, num),
            {
                "node": node,
                "label": label,
                "kind": kind,
                "guid": guid,
                "num": num,
                "lid": lid if isinstance(lid, int) else None,
                "speed_bps": port_speed_bps(p.get("active_speed"), p.get("active_width")) if up else None,
                "width": width_lanes(p.get("active_width")) if up else None,
                "max_speed_bps": ms,
                "max_width": mw,
            },
        )
        by_guid.setdefault(guid, (guid, num))
    table, key_of = _named(facts.rows, notes)
    cables = []
    for link in links if isinstance(links, list) else []:
        try:
            ends = []
            for side in ("source", "destination"):
                g = normalize_guid(str(link.get(f"{side}_guid") or ""))
                n = int(link.get(f"{side}_port"))
                ends.append(key_of.get((g, n)) or key_of[by_guid[g]])
            cables.append((ends[0], ends[1]))
        except (AttributeError, TypeError, ValueError, KeyError):
            skipped["bad_link"] += 1
    return table, _links_table(cables, "ufm"), notes, skipped


# -- the discovery core -----------------------------------------------------------------------
#: How an expected speed and width were chosen (written beside each port).
HOW_RULE, HOW_PEER_RULE, HOW_ENABLED, HOW_SEEN, HOW_NONE = "rule", "peer rule", "enabled", "seen", "none"


@dataclass
class Discovery:
    """The discovered fabric, and why each port and node is what it is."""

    fabric: Fabric
    source: str
    expect_how: list[str]
    rail_how: dict[int, str]  # port index -> how its rail was inferred
    node_notes: dict[int, str]  # node index -> why its role
    port_notes: dict[int, str]  # port index -> something to check
    notes: list[str]
    rules: list[str]

    def to_inventory(self) -> dict[str, Any]:
        return self.fabric.to_inventory()

    def to_yaml(self) -> str:
        """The inventory as YAML, every inference beside what it is about (docs/inventory.md)."""
        f = self.fabric
        by_role = ", ".join(f"{n} {r}" for r, n in sorted(Counter(f.node_roles).items()))
        out = [
            f"# graywire inventory, discovered from {self.source}: review it, then serve with it.",
            f"# {len(f.node_names)} nodes ({by_role}), {f.n_ports} ports, {len(f.link_a)} cables.",
            "# Each port's comment says where its expected speed/width came from (rule, peer rule,",
            "# enabled = the most the source says it is enabled for, seen = what it runs at now, none)",
            "# and how its rail was inferred. Rules given:",
        ]
        out += [f"#   {r}" for r in self.rules] or ["#   (none)"]
        for n in self.notes:
            out.append(f"# NOTE: {n}")
        listed = sorted(self.port_notes)[:_MAX_LISTED]
        for i in listed:
            out.append(f"# CHECK {f.keys[i]}: {self.port_notes[i]}")
        if len(self.port_notes) > len(listed):
            out.append(
                f"# CHECK ... and {len(self.port_notes) - len(listed)} more ports (search for CHECK below)"
            )
        out += ["version: 1", "nodes:"]
        order = np.argsort(f.node_of_port, kind="stable")
        bounds = np.searchsorted(f.node_of_port[order], np.arange(len(f.node_names) + 1))
        nums = f.port_num if f.port_num is not None else np.zeros(f.n_ports, np.int16)
        for j, (name, role) in enumerate(zip(f.node_names, f.node_roles, strict=True)):
            note = self.node_notes.get(j)
            out.append(f"  - name: {json.dumps(name)}")
            out.append(f"    role: {role}" + (f"  # {note}" if note else ""))
            out.append("    ports:")
            for i in order[bounds[j] : bounds[j + 1]].tolist():
                label = split_port_key(f.keys[i])[1]
                parts = [f"label: {json.dumps(label)}"]
                if nums[i]:
                    parts.append(f"num: {int(nums[i])}")
                if f.guids[i]:
                    parts.append(f'guid: "{f.guids[i]}"')
                if f.expected_speed_bps[i]:
                    parts.append(f"speed: {_speed_text(int(f.expected_speed_bps[i]))}")
                if f.expected_width[i]:
                    parts.append(f"width: {int(f.expected_width[i])}")
                if f.rail[i] >= 0:
                    parts.append(f"rail: {int(f.rail[i])}")
                if f.purpose and f.purpose[i]:
                    parts.append(f"purpose: {f.purpose[i]}")
                if f.aliases and f.aliases[i]:
                    parts.append(f"aliases: {json.dumps(list(f.aliases[i]))}")
                why = [f"expect: {self.expect_how[i]}"]
                if i in self.rail_how:
                    why.append(f"rail: {self.rail_how[i]}")
                if i in self.port_notes:
                    why.append(f"CHECK: {self.port_notes[i]}")
                out.append(f"      - {{{', '.join(parts)}}}  # {'; '.join(why)}")
        out.append("links:")
        for a, b in zip(f.link_a.tolist(), f.link_b.tolist(), strict=True):
            out.append(f"  - [{json.dumps(f.keys[a])}, {json.dumps(f.keys[b])}]")
        return "\n".join(out) + "\n"


def _speed_text(bps: int) -> str:
    text = format_speed(bps)
    return text if parse_speed(text) == bps else str(bps)


def _col(table: pa.Table, name: str, fill: int) -> np.ndarray:
    return table.column(name).fill_null(fill).to_numpy(zero_copy_only=False).astype(np.int64)


_INDEX = re.compile(r"(\d+)$")
_NAME_RAIL = re.compile(r"(?:^|[^a-z0-9])(?:r|rail)[-_]?(\d+)(?:$|[^0-9])", re.IGNORECASE)


def _trailing_index(labels: Sequence[str]) -> np.ndarray:
    """NIC index from a label's device part (``mlx5_3`` -> 3, ``mlx5_3:2`` -> 3), -1 without one."""
    uniq, inv = np.unique(np.array(labels, dtype=object), return_inverse=True)
    vals = []
    for u in uniq.tolist():
        m = _INDEX.search(u.split(":", 1)[0])
        vals.append(int(m.group(1)) if m and len(m.group(1)) < 6 else -1)
    return np.array(vals, dtype=np.int64)[inv] if len(labels) else np.zeros(0, np.int64)


def discover(
    facts: pa.Table,
    links: pa.Table,
    *,
    purpose_rules: Sequence[PurposeRule] = (),
    expect_rules: Sequence[ExpectRule] = (),
    source: str = "discovery",
) -> Discovery:
    """Build the fabric from port facts and cables, inferring roles, purposes, expectations, rails."""
    notes: list[str] = []
    port_notes: dict[int, str] = {}
    # One row per port key: the first, gaps filled from later rows of the same key.
    facts = facts.select(PORT_FACTS.names).cast(PORT_FACTS)
    names_of: dict[str, list[str]] = {}  # lists have no "first" kernel: per key, the first given
    for key, names in zip(facts["port"].to_pylist(), facts["aliases"].to_pylist(), strict=True):
        if names:
            names_of.setdefault(key, names)
    scalar = [c for c in PORT_FACTS.names if c not in ("port", "aliases")]
    facts = facts.group_by("port", use_threads=False).aggregate([(c, "first") for c in scalar])
    facts = facts.rename_columns([c.removesuffix("_first") for c in facts.column_names])
    aliases = pa.array([names_of.get(k) for k in facts["port"].to_pylist()], PORT_FACTS.field("aliases").type)
    facts = facts.append_column("aliases", aliases).select(PORT_FACTS.names)
    keys: list[str] = facts.column("port").to_pylist()
    n = len(keys)
    node_names_per_port = np.array(facts.column("node").to_pylist(), dtype=object)
    node_names, first_at, node_of = np.unique(node_names_per_port, return_index=True, return_inverse=True)
    appearance = np.argsort(first_at, kind="stable")  # nodes in order of first sighting
    rank_of = np.empty_like(appearance)
    rank_of[appearance] = np.arange(appearance.size)
    node_of = rank_of[node_of].astype(np.int32)
    node_names = node_names[appearance].tolist()
    n_nodes = len(node_names)
    is_host_port = np.array(facts.column("kind").to_pylist(), dtype=object) == "host"
    host_node = np.zeros(n_nodes, bool)
    host_node[node_of[is_host_port]] = True
    mixed = np.zeros(n_nodes, bool)
    mixed[node_of[~is_host_port]] = True
    mixed &= host_node
    for j in np.flatnonzero(mixed).tolist():
        notes.append(f"node {node_names[j]} has both CA and switch ports: written as a host")
    is_host_port = host_node[node_of]

    # Cables: both ends known, no self-cables, each unordered pair once, a port on one cable.
    a = pc.index_in(links.column("a_port"), value_set=pa.array(keys, pa.string()))
    b = pc.index_in(links.column("b_port"), value_set=pa.array(keys, pa.string()))
    ia = a.fill_null(-1).to_numpy(zero_copy_only=False).astype(np.int64)
    ib = b.fill_null(-1).to_numpy(zero_copy_only=False).astype(np.int64)
    unknown = (ia < 0) | (ib < 0)
    if unknown.any():
        notes.append(f"{int(unknown.sum())} cable record(s) name a port no source described: left out")
    ok = ~unknown & (ia != ib)
    lo, hi = np.minimum(ia[ok], ib[ok]), np.maximum(ia[ok], ib[ok])
    _, first = np.unique(lo * max(n, 1) + hi, return_index=True)
    first = np.sort(first)
    lo, hi = lo[first], hi[first]
    seen = np.zeros(n, bool)
    keep = np.ones(lo.size, bool)
    ends = np.concatenate([lo, hi])
    if ends.size and np.bincount(ends, minlength=n).max() > 1:
        for k in range(lo.size):  # only when some port has two cables: rare, and kept readable
            x, y = int(lo[k]), int(hi[k])
            if seen[x] or seen[y]:
                keep[k] = False
                for q in (x, y):
                    port_notes[q] = f"on a second cable ({keys[x]} <-> {keys[y]}), left out: which is it?"
            else:
                seen[x] = seen[y] = True
    link_a, link_b = lo[keep].astype(np.int32), hi[keep].astype(np.int32)
    peer = np.full(n, -1, np.int64)
    peer[link_a], peer[link_b] = link_b, link_a

    # Roles: hosts are CAs; a switch is a leaf when cabled to a host, then tiers by distance.
    tier = np.where(host_node, 0, -1)
    k = 0
    la, lb = node_of[link_a], node_of[link_b]
    while True:
        frontier = np.zeros(n_nodes, bool)
        frontier[tier == k] = True
        nxt = np.zeros(n_nodes, bool)
        nxt[lb[frontier[la]]] = True
        nxt[la[frontier[lb]]] = True
        nxt &= tier < 0
        if not nxt.any():
            break
        k += 1
        tier[nxt] = k
    top = int(tier.max(initial=0))
    role_names = np.array(["host", "leaf", "spine"] + ["core"] * max(top - 2, 0), dtype=object)
    roles = np.where(tier >= 0, role_names[np.clip(tier, 0, len(role_names) - 1)], "spine")
    node_notes: dict[int, str] = {}
    host_cables = np.bincount(la[is_host_port[link_b]], minlength=n_nodes) + np.bincount(
        lb[is_host_port[link_a]], minlength=n_nodes
    )
    for j in range(n_nodes):
        if tier[j] == 1:
            node_notes[j] = f"leaf: cabled to {int(host_cables[j])} host port(s)"
        elif tier[j] == 2:
            node_notes[j] = "spine: cabled to leaves, not to hosts"
        elif tier[j] >= 3:
            node_notes[j] = f"core: tier {int(tier[j])}, cabled to spines"
        elif tier[j] < 0:
            node_notes[j] = "role unknown: no cable path to a host; written as spine, check"
    if top >= 3:
        notes.append(f"{top} switch tiers: leaf, spine, then core")
    port_role = roles[node_of]

    # Purpose: operator rules on host port labels, else the speed class.
    labels = [split_port_key(k)[1] for k in keys]
    seen_speed = _col(facts, "speed_bps", 0)
    seen_width = _col(facts, "width", 0)
    max_speed = _col(facts, "max_speed_bps", 0)
    max_width = _col(facts, "max_width", 0)
    purpose = np.full(n, None, dtype=object)
    for rule in purpose_rules:
        hit = _matches(labels, rule.pattern) & is_host_port & (purpose == None)  # noqa: E711
        purpose[hit] = rule.purpose
    klass = np.where(max_speed > 0, max_speed, seen_speed)
    open_host = is_host_port & (purpose == None)  # noqa: E711
    known = open_host & (klass > 0)
    if known.any():
        speeds, counts = np.unique(klass[known], return_counts=True)
        compute_bps = int(speeds[np.argmax(counts)])
        purpose[known & (klass >= compute_bps)] = "compute"
        slow = known & (klass < compute_bps)
        purpose[slow & (klass >= STORAGE_MIN_BPS)] = "storage"
        purpose[slow & (klass < STORAGE_MIN_BPS)] = "management"
        if slow.any():
            notes.append(
                f"purpose by speed class: host NICs at {format_speed(compute_bps)} (the most common) are "
                f"compute; {int(slow.sum())} slower ones are storage (>= 100G) or management"
            )
    purpose[open_host & (klass <= 0)] = "compute"

    # Expected speed and width: a rule, else the peer's rule, else enabled max, else seen.
    exp_speed = np.zeros(n, np.int64)
    exp_width = np.zeros(n, np.int64)
    how = np.full(n, HOW_NONE, dtype=object)
    attrs = {
        "role": port_role.tolist(),
        "purpose": purpose.tolist(),
        "node": node_names_per_port.tolist(),
        "label": labels,
    }
    for rule in expect_rules:
        hit = how == HOW_NONE
        for key, pattern in rule.match:
            hit &= _matches(attrs[key], pattern)
        exp_speed[hit] = rule.speed_bps
        exp_width[hit] = rule.width or 0
        how[hit] = f"{HOW_RULE} {rule.text}"
    ruled = np.char.startswith(how.astype(str), HOW_RULE) if n else np.zeros(0, bool)
    cabled = peer >= 0
    p = np.maximum(peer, 0)
    from_peer = ~ruled & cabled & ruled[p]
    cap = np.where(max_speed > 0, np.minimum(max_speed, exp_speed[p]), exp_speed[p])
    exp_speed[from_peer] = cap[from_peer]
    exp_width[from_peer] = np.where(max_width > 0, np.minimum(max_width, exp_width[p]), exp_width[p])[
        from_peer
    ]
    how[from_peer] = HOW_PEER_RULE
    open_ = ~ruled & ~from_peer
    both = np.where(
        cabled & (max_speed[p] > 0) & (max_speed > 0), np.minimum(max_speed, max_speed[p]), max_speed
    )
    both_w = np.where(
        cabled & (max_width[p] > 0) & (max_width > 0), np.minimum(max_width, max_width[p]), max_width
    )
    en = open_ & (both > 0)
    exp_speed[en], exp_width[en], how[en] = both[en], both_w[en], HOW_ENABLED
    se = open_ & ~en & cabled & (seen_speed > 0)
    exp_speed[se], exp_width[se] = seen_speed[se], seen_width[se]
    how[se] = [
        f"{HOW_SEEN} {format_speed(s)} {w}x"
        for w, s in zip(seen_width[se].tolist(), seen_speed[se].tolist(), strict=True)
    ]
    # A port that runs below what most of its class runs at was probably degraded when seen.
    for cls_role in ("host", "leaf", "spine", "core"):
        for cls_purpose in (*PURPOSES, None):
            m = (port_role == cls_role) & (purpose == cls_purpose) & cabled & (seen_speed > 0)
            if not m.any():
                continue
            speeds, counts = np.unique(seen_speed[m], return_counts=True)
            modal = int(speeds[np.argmax(counts)])
            for i in np.flatnonzero(m & (seen_speed < modal)).tolist():
                port_notes.setdefault(
                    i,
                    f"runs at {format_speed(int(seen_speed[i]))}, below the {format_speed(modal)} "
                    f"most {cls_role} ports run at: degraded now?",
                )
    if (open_ & ~en & ~se).any():
        notes.append(
            f"{int((open_ & ~en & ~se).sum())} port(s) have no expected speed (not cabled, no rule, "
            "nothing enabled known): they are not judged on speed"
        )

    # Rails: the NIC order of each host's compute NICs, where leaves carry one order each.
    rail = np.full(n, -1, np.int64)
    rail_how: dict[int, str] = {}
    compute = is_host_port & (purpose == "compute")
    nic = _trailing_index(labels)
    hp = np.flatnonzero(compute)
    label_code = (
        np.unique(np.array(labels, dtype=object), return_inverse=True)[1] if n else np.zeros(0, np.int64)
    )
    nums = _col(facts, "num", 0)
    order = hp[np.lexsort((nums[hp], label_code[hp], nic[hp], node_of[hp]))]
    rank = np.full(n, -1, np.int64)
    if order.size:
        grp = node_of[order]
        starts = np.r_[True, grp[1:] != grp[:-1]]
        start_at = np.maximum.accumulate(np.where(starts, np.arange(order.size), 0))
        rank[order] = np.arange(order.size) - start_at
    leaf_of = np.where(cabled & (roles[node_of[p]] == "leaf"), node_of[p], -1)
    on_leaf = compute & (leaf_of >= 0)
    leaf_rail = np.full(n_nodes, -1, np.int64)
    rail_optimized = False
    if on_leaf.any():
        r = int(rank.max()) + 1
        combo, counts = np.unique(leaf_of[on_leaf] * r + rank[on_leaf], return_counts=True)
        lf, rk = combo // r, combo % r
        pick = np.lexsort((-counts, lf))
        firsts = pick[np.r_[True, lf[pick][1:] != lf[pick][:-1]]]
        leaf_rail[lf[firsts]] = rk[firsts]
        agree = rank[on_leaf] == leaf_rail[leaf_of[on_leaf]]
        share = float(agree.mean())
        distinct = np.unique(leaf_rail[leaf_rail >= 0]).size
        rail_optimized = distinct > 1 and share >= RAIL_AGREEMENT
        how_leaf = "NIC order"
        if not rail_optimized:
            # Leaf names that carry a rail (leaf-r2-07, rail3-leaf1), on every leaf with hosts.
            named = np.full(n_nodes, -1, np.int64)
            for j in np.unique(leaf_of[on_leaf]).tolist():
                m = _NAME_RAIL.search(node_names[j])
                named[j] = int(m.group(1)) if m else -1
            hosted = np.unique(leaf_of[on_leaf])
            if (named[hosted] >= 0).all() and np.unique(named[hosted]).size > 1:
                leaf_rail, rail_optimized, how_leaf = named, True, "leaf name"
                agree = rank[on_leaf] == leaf_rail[leaf_of[on_leaf]]
        if rail_optimized:
            notes.append(
                f"rail-optimized: {share:.0%} of host compute NICs sit on a leaf whose host NICs share "
                f"their NIC order; rails from the {how_leaf} of each leaf"
            )
            rail[on_leaf] = leaf_rail[leaf_of[on_leaf]]
            for i in np.flatnonzero(on_leaf).tolist():
                rail_how[i] = f"leaf {node_names[leaf_of[i]]}"
            for i in np.flatnonzero(on_leaf)[~agree].tolist():
                port_notes.setdefault(
                    i,
                    f"NIC order {int(rank[i])} on leaf {node_names[leaf_of[i]]} of rail "
                    f"{int(leaf_rail[leaf_of[i]])}: miscabled?",
                )
            sw = ~is_host_port & (leaf_rail[node_of] >= 0)
            rail[sw] = leaf_rail[node_of[sw]]
            for j in np.flatnonzero(leaf_rail >= 0).tolist():
                node_notes[j] = f"{node_notes.get(j, 'leaf')}; rail {int(leaf_rail[j])} ({how_leaf})"
        elif r == 1:
            notes.append("every host has one compute NIC: no rails")
        elif distinct <= 1:
            notes.append("every leaf carries the same NIC order: not rail-optimized, rails left unset")
        else:
            mixed_leaves = int((leaf_rail >= 0).sum())
            notes.append(
                f"not rail-optimized (only {share:.0%} of host compute NICs share their leaf's NIC order "
                f"over {mixed_leaves} leaves with hosts): rails left unset"
            )
    elif hp.size:
        notes.append("no host NIC is cabled to a leaf: rails left unset")

    # Written hosts first, then leaves, spines and cores, each by name (numbers in names by value).
    role_rank = np.array([ROLE_ORDER.index(r) for r in roles.tolist()], np.int64)
    name_rank = _natural_rank(node_names)
    perm = (
        np.lexsort((label_code, nums, name_rank[node_of], role_rank[node_of])) if n else np.zeros(0, np.int64)
    )
    node_perm = np.lexsort((name_rank, role_rank))
    new_of = np.empty(n, np.int64)
    new_of[perm] = np.arange(n)
    guids = facts.column("guid").to_pylist()
    alias_lists = facts.column("aliases").to_pylist() if "aliases" in facts.schema.names else [None] * n
    specs = [
        PortSpec(
            node=str(node_names_per_port[i]),
            label=labels[i],
            expected_speed_bps=int(exp_speed[i]) or None,
            expected_width=int(exp_width[i]) or None,
            guid=guids[i],
            rail=int(rail[i]) if rail[i] >= 0 else None,
            num=int(nums[i]) or None,
            purpose=purpose[i],
            aliases=tuple(alias_lists[i] or ()),
        )
        for i in perm.tolist()
    ]
    fabric = Fabric.from_specs(
        {node_names[j]: str(roles[j]) for j in node_perm.tolist()},
        specs,
        [(keys[x], keys[y]) for x, y in zip(link_a.tolist(), link_b.tolist(), strict=True)],
    )
    node_new = np.empty(n_nodes, np.int64)
    node_new[node_perm] = np.arange(n_nodes)
    rules = [f"--purpose {r.pattern}={r.purpose}" for r in purpose_rules]
    rules += [f"--expect {r.text}" for r in expect_rules]
    return Discovery(
        fabric,
        source,
        [how[i] for i in perm.tolist()],
        {int(new_of[i]): v for i, v in rail_how.items()},
        {int(node_new[j]): v for j, v in node_notes.items()},
        {int(new_of[i]): v for i, v in port_notes.items()},
        notes,
        rules,
    )


ROLE_ORDER = ("host", "leaf", "spine", "core")


def _natural_rank(names: Sequence[str]) -> np.ndarray:
    """Rank of each name in natural order (``gpu2`` before ``gpu10``)."""

    def key(s: str) -> list[Any]:
        return [(0, int(t), "") if t.isdigit() else (1, 0, t) for t in re.split(r"(\d+)", s) if t]

    order = sorted(range(len(names)), key=lambda i: key(names[i]))
    rank = np.empty(len(names), np.int64)
    rank[order] = np.arange(len(names))
    return rank
