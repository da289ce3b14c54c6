"""The fabric model: nodes, ports, links and each port's expected speed and width.

Columnar on purpose: a 100,000-GPU fabric has ~500,000 ports, so the model is a set of
aligned arrays indexed by port number, and lookups from a batch's port keys are one
vectorized hash join (:meth:`Fabric.lookup`), never a Python loop per sample.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import yaml

from graywire.collectors.keys import (
    alias_keys,
    by_alias,
    link_label,
    normalize_guid,
    normalize_mac,
    port_key,
    split_port_key,
)
from graywire.collectors.units import parse_speed

ROLES = ("host", "leaf", "spine", "core")
#: What a host NIC carries (``purpose`` in the inventory).
PURPOSES = ("compute", "storage", "management")

log = logging.getLogger("graywire.inventory")


#: The fabric model's file name beside a simulation or an archive (``graywire replay`` reads it).
INVENTORY = "inventory.json"


@dataclass(frozen=True, slots=True)
class PortSpec:
    """One port as the inventory declares it."""

    node: str
    label: str
    expected_speed_bps: int | None = None
    expected_width: int | None = None
    guid: str | None = None
    rail: int | None = None
    media: str | None = None
    num: int | None = None  # port number on its node (IB port number, ifIndex-like)
    purpose: str | None = None  # compute, storage or management (host NICs)
    #: Other names of the port on its node: its netdev, its MAC (what LLDP may call it).
    aliases: tuple[str, ...] = ()

    @property
    def key(self) -> str:
        return port_key(self.node, self.label)


@dataclass(eq=False)
class Fabric:
    """Aligned per-port arrays plus node roles and links (by port index)."""

    keys: list[str]
    node_of_port: np.ndarray  # int32 index into node_names
    node_names: list[str]
    node_roles: list[str]
    expected_speed_bps: np.ndarray  # int64, 0 = unknown
    expected_width: np.ndarray  # int16, 0 = unknown
    rail: np.ndarray  # int16, -1 = none
    link_a: np.ndarray  # int32 port index
    link_b: np.ndarray  # int32 port index
    guids: list[str | None] = field(default_factory=list)  # port GUID (HCA) or node GUID (switch)
    media: list[str | None] = field(default_factory=list)
    port_num: np.ndarray | None = None  # int16 port number on its node, 0 = unknown
    purpose: list[str | None] = field(default_factory=list)
    aliases: list[tuple[str, ...]] = field(default_factory=list)
    #: What loading found worth a look but not wrong (a host on fewer rails than its peers).
    warnings: list[str] = field(default_factory=list)

    # -- construction -------------------------------------------------------------------------
    @classmethod
    def from_specs(
        cls,
        nodes: Mapping[str, str],
        ports: Sequence[PortSpec],
        links: Iterable[tuple[str, str]],
    ) -> Fabric:
        """Build from node roles, port specs and links given as port-key pairs."""
        node_names = list(nodes)
        node_idx = {n: i for i, n in enumerate(node_names)}
        for name, role in nodes.items():
            if role not in ROLES:
                raise ValueError(f"node {name}: role must be one of {ROLES}, not {role!r}")
        keys = [p.key for p in ports]
        if len(set(keys)) != len(keys):
            dup = sorted({k for k in keys if keys.count(k) > 1})[:5]
            raise ValueError(f"duplicate ports in inventory: {dup}")
        missing = {p.node for p in ports} - set(node_idx)
        if missing:
            raise ValueError(f"ports reference undeclared nodes: {sorted(missing)[:5]}")
        index = {k: i for i, k in enumerate(keys)}
        la: list[int] = []
        lb: list[int] = []
        seen: set[int] = set()
        for a, b in links:
            try:
                ia, ib = index[a], index[b]
            except KeyError as e:
                raise ValueError(f"link {a} <-> {b} names an undeclared port {e.args[0]}") from None
            if ia == ib or ia in seen or ib in seen:
                raise ValueError(f"link {a} <-> {b}: a port can be on one link only")
            seen.update((ia, ib))
            la.append(ia)
            lb.append(ib)
        return cls(
            keys=keys,
            node_of_port=np.array([node_idx[p.node] for p in ports], dtype=np.int32),
            node_names=node_names,
            node_roles=[nodes[n] for n in node_names],
            expected_speed_bps=np.array([p.expected_speed_bps or 0 for p in ports], dtype=np.int64),
            expected_width=np.array([p.expected_width or 0 for p in ports], dtype=np.int16),
            rail=np.array([-1 if p.rail is None else p.rail for p in ports], dtype=np.int16),
            link_a=np.array(la, dtype=np.int32),
            link_b=np.array(lb, dtype=np.int32),
            guids=[p.guid for p in ports],
            media=[p.media for p in ports],
            port_num=np.array([p.num or 0 for p in ports], dtype=np.int16),
            purpose=[p.purpose for p in ports],
            aliases=[p.aliases for p in ports],
        )

    # -- derived views --------------------------------------------------------------------------
    @property
    def n_ports(self) -> int:
        return len(self.keys)

    @cached_property
    def alias_index(self) -> dict[str, int]:
        """``node/alias`` and each bare MAC alias -> port index: the names a NIC's own LLDP agent
        gives its port (netdev, MAC) where the model names it by RDMA device."""
        out: dict[str, int] = {}
        for i, names in enumerate(self.aliases):
            out.update(dict.fromkeys(alias_keys(self.node_names[int(self.node_of_port[i])], names), i))
        return out

    def resolve_alias(self, key: str) -> int:
        """The port a key names through an alias (``host/ens1f0np0``, ``host/aa:bb:…``, or any
        node with a MAC the model knows), else -1."""
        i = by_alias(self.alias_index, key)
        return -1 if i is None else i

    @cached_property
    def key_array(self) -> pa.Array:
        return pa.array(self.keys, type=pa.string())

    @cached_property
    def peer(self) -> np.ndarray:
        """Port index at the other end of each port's link, -1 where unlinked."""
        peer = np.full(self.n_ports, -1, dtype=np.int32)
        peer[self.link_a] = self.link_b
        peer[self.link_b] = self.link_a
        return peer

    @cached_property
    def port_role(self) -> np.ndarray:
        """Role of the node each port sits on, as an array of strings."""
        roles = np.array(self.node_roles, dtype=object)
        return roles[self.node_of_port]

    @cached_property
    def port_role_code(self) -> np.ndarray:
        """Role of each port's node as a small int (roles sorted by name): peers by role, vectorized."""
        _, code = np.unique(np.array(self.node_roles, dtype=object), return_inverse=True)
        return code.astype(np.int64)[self.node_of_port]

    @cached_property
    def host_port(self) -> np.ndarray:
        """True for ports on hosts (the end a node verdict is about)."""
        return self.port_role == "host"

    def node_of(self, idx: int) -> str:
        return self.node_names[int(self.node_of_port[idx])]

    def host_end(self, idx: int) -> int:
        """The host end of the cable port ``idx`` is on: the port itself when it is on a host,
        else its peer when that is, else -1 (a switch-to-switch or uncabled switch port). It is
        where a person acts on a bad cable (the node to drain, the NIC to reseat)."""
        if self.host_port[idx]:
            return idx
        peer = int(self.peer[idx])
        return peer if peer >= 0 and self.host_port[peer] else -1

    def lookup(self, keys: pa.Array | pa.ChunkedArray) -> np.ndarray:
        """Port indices for an array of port keys; -1 for keys the model does not know."""
        if isinstance(keys, pa.ChunkedArray):
            keys = keys.combine_chunks()
        if pa.types.is_dictionary(keys.type):
            dict_idx = self.lookup(keys.dictionary)
            codes = keys.indices.to_numpy(zero_copy_only=False)
            return dict_idx[codes]
        if len(keys) * 8 < self.n_ports:
            # index_in hashes the whole key set on every call (~0.2 s at half a million ports):
            # a few keys are cheaper through a dict built once.
            index = self.key_index
            return np.fromiter((index.get(k, -1) for k in keys.to_pylist()), np.int32, len(keys))
        idx = pc.index_in(keys, value_set=self.key_array)
        return idx.fill_null(-1).to_numpy(zero_copy_only=False).astype(np.int32, copy=False)

    @cached_property
    def key_index(self) -> dict[str, int]:
        """Port key -> index, built once per model (a dict over every port is too slow to build
        per poll at half a million ports)."""
        return {k: i for i, k in enumerate(self.keys)}

    def link_label(self, idx: int) -> str | None:
        p = int(self.peer[idx])
        if p < 0:
            return None
        return link_label(self.keys[idx], self.keys[p])

    def guid_index(self) -> dict[str, int]:
        """Normalized GUID -> port index, for GUID-addressed sources."""
        return {normalize_guid(g): i for i, g in enumerate(self.guids) if g}

    def links_table(self, source: str = "inventory") -> pa.Table:
        from graywire.collectors.schemas import LINK

        ka = [self.keys[i] for i in self.link_a]
        kb = [self.keys[i] for i in self.link_b]
        return pa.table({"a_port": ka, "b_port": kb, "source": [source] * len(ka)}, schema=LINK)

    # -- inventory files ------------------------------------------------------------------------
    def to_inventory(self) -> dict[str, Any]:
        """The inventory document (see docs/inventory.md) describing this fabric."""
        by_node: dict[int, list[dict[str, Any]]] = {}
        for i, key in enumerate(self.keys):
            _, label = split_port_key(key)
            entry: dict[str, Any] = {"label": label}
            if self.expected_speed_bps[i]:
                entry["speed_bps"] = int(self.expected_speed_bps[i])
            if self.expected_width[i]:
                entry["width"] = int(self.expected_width[i])
            if self.rail[i] >= 0:
                entry["rail"] = int(self.rail[i])
            if self.guids and self.guids[i]:
                entry["guid"] = self.guids[i]
            if self.media and self.media[i]:
                entry["media"] = self.media[i]
            if self.port_num is not None and self.port_num[i]:
                entry["num"] = int(self.port_num[i])
            if self.purpose and self.purpose[i]:
                entry["purpose"] = self.purpose[i]
            if self.aliases and self.aliases[i]:
                entry["aliases"] = list(self.aliases[i])
            by_node.setdefault(int(self.node_of_port[i]), []).append(entry)
        nodes = [
            {"name": n, "role": r, "ports": by_node.get(j, [])}
            for j, (n, r) in enumerate(zip(self.node_names, self.node_roles, strict=True))
        ]
        links = [[self.keys[a], self.keys[b]] for a, b in zip(self.link_a, self.link_b, strict=True)]
        return {"version": 1, "nodes": nodes, "links": links}

    def write_inventory(self, path: str | Path) -> None:
        Path(path).write_text(json.dumps(self.to_inventory(), separators=(",", ":")))


def load_inventory(path: str | Path) -> Fabric:
    """Load an inventory file (JSON or YAML; see docs/inventory.md).

    Errors name the file and where in it (``line N`` in YAML, the JSON path in JSON); warnings
    are logged and kept in :attr:`Fabric.warnings`.
    """
    path = Path(path)
    text = path.read_text()
    where: _Where
    try:
        if path.suffix == ".json":
            doc, where = json.loads(text), _Where()
        else:
            loader = _LineLoader(text)
            try:
                doc = loader.get_single_data()
            finally:
                loader.dispose()
            where = _Where(loader.lines, loader.items)
    except (json.JSONDecodeError, yaml.YAMLError) as e:
        raise ValueError(f"{path}: not valid {path.suffix.lstrip('.') or 'YAML'}: {e}") from e
    try:
        fabric = fabric_from_inventory(doc, where)
    except (ValueError, KeyError, TypeError) as e:
        msg = f"missing key {e.args[0]!r}" if isinstance(e, KeyError) else str(e)
        raise ValueError(f"{path}: {msg}") from e
    for w in fabric.warnings:
        log.warning("%s: %s", path, w)
    return fabric


class _LineLoader(getattr(yaml, "CSafeLoader", yaml.SafeLoader)):  # type: ignore[misc]
    """A safe loader that remembers the line of every mapping and of every sequence item."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self.lines: dict[int, int] = {}
        self.items: dict[int, list[int]] = {}

    def construct_object(self, node: yaml.Node, deep: bool = False) -> Any:
        obj = super().construct_object(node, deep)
        if isinstance(node, yaml.MappingNode):
            self.lines[id(obj)] = node.start_mark.line + 1
        elif isinstance(node, yaml.SequenceNode):
            self.lines[id(obj)] = node.start_mark.line + 1
            self.items[id(obj)] = [c.start_mark.line + 1 for c in node.value]
        return obj


class _Where:
    """Where a part of an inventory document is: its YAML line, else its JSON path."""

    def __init__(self, lines: dict[int, int] | None = None, items: dict[int, list[int]] | None = None):
        self.lines = lines
        self.items = items or {}

    def at(self, parent: Any, index: int, path: str) -> str:
        if self.lines is not None:
            own = self.items.get(id(parent))
            if own is not None and index < len(own):
                return f"line {own[index]}"
        return path


def _speed_as_bps(level: Mapping[str, Any]) -> dict[str, Any]:
    """Fold ``speed`` into ``speed_bps`` at one level, so a port's own speed beats any default."""
    out = dict(level)
    if "speed" in out:
        out["speed_bps"] = out.pop("speed")
    return out


def _aliases(value: Any, what: str) -> tuple[str, ...]:
    """A port's ``aliases``: a list of names (netdev, MAC); MACs are kept in one spelling."""
    if value is None:
        return ()
    if not isinstance(value, list) or not all(isinstance(v, str) and v and "/" not in v for v in value):
        raise ValueError(f"{what}: aliases must be a list of names without '/' (a netdev, a MAC)")
    return tuple(normalize_mac(v) or v for v in value)


def fabric_from_inventory(doc: Mapping[str, Any], where: _Where | None = None) -> Fabric:
    """Build a :class:`Fabric` from a parsed inventory document.

    Problems a person has to fix (a GUID on two ports, a cable naming an unknown port, a port on
    two cables, ...) are all collected and raised as one ValueError, each with its place in the
    file; the first is first in the message.
    """
    where = where or _Where()
    if not isinstance(doc, Mapping) or "nodes" not in doc:
        raise ValueError("inventory must be a mapping with a 'nodes' list")
    defaults = _speed_as_bps(doc.get("defaults") or {})
    nodes: dict[str, str] = {}
    node_at: dict[str, str] = {}
    ports: list[PortSpec] = []
    port_at: list[str] = []
    errors: list[str] = []
    for j, n in enumerate(doc["nodes"]):
        name = str(n["name"])
        at = where.at(doc["nodes"], j, f"nodes[{j}]")
        if name in nodes:
            errors.append(f"node {name} declared twice ({at}; first at {node_at[name]})")
            continue
        nodes[name] = str(n.get("role", "host"))
        node_at[name] = at
        node_defaults = {**defaults, **_speed_as_bps(n.get("port_defaults") or {})}
        plist = n.get("ports", [])
        for k, p in enumerate(plist):
            own = _speed_as_bps(p) if isinstance(p, Mapping) else {"label": p}
            if "label" not in own:
                raise ValueError(
                    f"node {name}: a port has no 'label' ({where.at(plist, k, f'nodes[{j}].ports[{k}]')})"
                )
            p = {**node_defaults, **own}
            speed = p.get("speed_bps")
            purpose = p.get("purpose")
            if purpose is not None and purpose not in PURPOSES:
                raise ValueError(
                    f"port {name}/{p['label']}: purpose must be one of {PURPOSES}, not {purpose!r}"
                )
            ports.append(
                PortSpec(
                    node=name,
                    label=str(p["label"]),
                    expected_speed_bps=parse_speed(speed) if speed is not None else None,
                    expected_width=int(p["width"]) if p.get("width") is not None else None,
                    guid=normalize_guid(p["guid"]) if p.get("guid") else None,
                    rail=int(p["rail"]) if p.get("rail") is not None else None,
                    media=p.get("media"),
                    num=int(p["num"]) if p.get("num") is not None else None,
                    purpose=purpose,
                    aliases=_aliases(p.get("aliases"), f"port {name}/{p['label']}"),
                )
            )
            port_at.append(where.at(plist, k, f"nodes[{j}].ports[{k}]"))
    index: dict[str, int] = {}
    for i, p in enumerate(ports):
        first = index.setdefault(p.key, i)
        if first != i:
            errors.append(f"duplicate ports in inventory: {[p.key]} ({port_at[first]} and {port_at[i]})")
    errors += _guid_errors(ports, port_at)
    links = []
    linked: dict[int, str] = {}
    raw_links = doc.get("links", [])
    for k, pair in enumerate(raw_links):
        at = where.at(raw_links, k, f"links[{k}]")
        if not isinstance(pair, list | tuple) or len(pair) != 2:
            raise ValueError(f"a link must be a pair of port keys, not {pair!r} ({at})")
        a, b = str(pair[0]), str(pair[1])
        missing = [x for x in (a, b) if x not in index]
        if missing:
            errors.append(f"link {a} <-> {b} names an undeclared port {missing[0]} ({at})")
            continue
        ia, ib = index[a], index[b]
        if ia == ib:
            errors.append(f"link {a} <-> {b}: a port can be on one link only, not joined to itself ({at})")
            continue
        again = [x for x, i in ((a, ia), (b, ib)) if i in linked]
        if again:
            errors.append(
                f"link {a} <-> {b}: a port can be on one link only: {again[0]} is already "
                f"on the link at {linked[index[again[0]]]} ({at})"
            )
            continue
        linked[ia] = linked[ib] = at
        links.append((a, b))
    if errors:
        more = f" (and {len(errors) - 10} more)" if len(errors) > 10 else ""
        raise ValueError("\n  ".join(errors[:10]) + more)
    fabric = Fabric.from_specs(nodes, ports, links)
    fabric.warnings.extend(_rail_warnings(fabric, node_at))
    return fabric


def _guid_errors(ports: Sequence[PortSpec], port_at: Sequence[str]) -> list[str]:
    """A GUID names one port: an HCA port's own, or a switch's ports told apart by number.

    Two ports on different nodes with one GUID, or on one node with one GUID and one port
    number, make GUID-addressed sources (UFM, perfquery) put one port's data on the other.
    """
    errors: list[str] = []
    owner: dict[str, int] = {}
    by_num: dict[tuple[str, int], int] = {}
    for i, p in enumerate(ports):
        if not p.guid:
            continue
        first = owner.setdefault(p.guid, i)
        if ports[first].node != p.node:
            errors.append(
                f"duplicate GUID {p.guid}: {ports[first].key} ({port_at[first]}) and {p.key} ({port_at[i]})"
            )
            continue
        if p.num is not None:
            j = by_num.setdefault((p.guid, p.num), i)
            if j != i:
                errors.append(
                    f"duplicate GUID {p.guid} port {p.num}: {ports[j].key} ({port_at[j]}) and "
                    f"{p.key} ({port_at[i]})"
                )
    return errors


def _rail_warnings(fabric: Fabric, node_at: Mapping[str, str]) -> list[str]:
    """Hosts whose compute NICs sit on fewer rails than most hosts' do (a NIC down or miscabled)."""
    host = fabric.host_port & (fabric.rail >= 0)
    if fabric.purpose:
        host &= np.array([p in (None, "compute") for p in fabric.purpose], dtype=bool)
    if not host.any():
        return []
    node = fabric.node_of_port[host].astype(np.int64)
    rail = fabric.rail[host].astype(np.int64)
    pairs = np.unique(node * (int(rail.max()) + 1) + rail)
    per_node = np.bincount(pairs // (int(rail.max()) + 1), minlength=len(fabric.node_names))
    hosts = np.unique(node)
    counts = per_node[hosts]
    values, freq = np.unique(counts, return_counts=True)
    usual = int(values[np.argmax(freq)])
    all_rails = set(np.unique(rail).tolist())
    out = []
    few = hosts[counts < usual]
    for j in few[:20].tolist():
        name = fabric.node_names[j]
        mine = set(rail[node == j].tolist())
        out.append(
            f"host {name} ({node_at.get(name, '?')}) has compute NICs on {int(per_node[j])} rails, most "
            f"hosts on {usual}: no NIC on rail(s) {sorted(all_rails - mine)}"
        )
    if few.size > 20:
        out.append(f"... and {few.size - 20} more hosts on fewer than {usual} rails")
    return out
