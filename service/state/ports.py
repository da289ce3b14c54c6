"""One consistent view of every port and link: the model, the latest readings and open incidents.

The ports API and the status page read the fabric through this. Everything is vectorized
over the fabric's port arrays: filtering 500,000 ports is a handful of numpy masks, and only
the page being returned becomes Python objects.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import cached_property
from typing import Any

import numpy as np

from graywire.collectors.keys import keys_named
from graywire.collectors.model import Fabric
from graywire.collectors.schemas import LOGICAL_ACTIVE, PHYS_LINK_UP
from graywire.detectors.findings import PORT_HEALTH
from graywire.service.models import ACTIVE_STATUSES
from graywire.service.state.fabric import FabricState, ports_without_data
from graywire.service.state.figures import INCIDENT_HEALTH, NO_DATA

STATES = ("up", "init", "down", "unknown")
#: Cell flags in the compact grid (a bit mask, so the page needs no per-cell objects).
FLAG_STALE, FLAG_DOWN, FLAG_DEGRADED, FLAG_NO_DATA = 1, 2, 4, 8


class FabricLayout:
    """What never changes for a fabric: key lookup, each port's switch, the status grid rows."""

    def __init__(self, fabric: Fabric) -> None:
        self.fabric = fabric
        self.key_index = {k: i for i, k in enumerate(fabric.keys)}
        self.node_index = {n: j for j, n in enumerate(fabric.node_names)}
        node_is_switch = np.array([r != "host" for r in fabric.node_roles], dtype=bool)
        port_is_switch = node_is_switch[fabric.node_of_port]
        peer = fabric.peer
        peer_node = fabric.node_of_port[np.maximum(peer, 0)]
        peer_is_switch = (peer >= 0) & port_is_switch[np.maximum(peer, 0)]
        #: The switch a port sits on or is cabled to (node index), -1 for none.
        self.switch_of = np.where(
            port_is_switch, fabric.node_of_port, np.where(peer_is_switch, peer_node, -1)
        ).astype(np.int32)
        #: Node at the other end of each port's cable, -1 where unlinked.
        self.peer_node = np.where(peer >= 0, peer_node, -1).astype(np.int32)
        self.node_is_switch = node_is_switch
        self.port_is_switch = port_is_switch
        self.port_role = np.asarray(fabric.port_role)

    def link_of(self, name: str) -> int | None:
        """Link number for a link label (``a<->b``) or a port key on it; None if unknown."""
        ports = keys_named(name)
        idx = [self.key_index.get(p) for p in ports]
        if any(i is None for i in idx):
            return None
        first = idx[0]
        assert first is not None
        hit = np.flatnonzero((self.fabric.link_a == first) | (self.fabric.link_b == first))
        if hit.size == 0:
            return None
        link = int(hit[0])
        if len(idx) == 2 and {int(self.fabric.link_a[link]), int(self.fabric.link_b[link])} != set(idx):
            return None
        return link

    @cached_property
    def grid_rows(self) -> list[tuple[int, np.ndarray, np.ndarray]]:
        """Rows of the status grid: (node index, the row's ports, the port cabled to each or -1).

        A switch's row has one cell per switch port, coloured by the worse of its two ends, so
        a host NIC shows in the cell of the switch port it plugs into. Ports on no switch at all
        (a host-only inventory) get a row per node. Switches come first, leaves before spines.
        """
        f = self.fabric
        order = {"leaf": 0, "spine": 1, "core": 2, "host": 3}
        names, roles = f.node_names, f.node_roles
        nodes = sorted(range(len(names)), key=lambda j: (order.get(roles[j], 4), names[j]))
        by_node: dict[int, list[int]] = defaultdict(list)
        for i in np.flatnonzero(self.port_is_switch | (self.switch_of < 0)).tolist():
            by_node[int(f.node_of_port[i])].append(i)
        rows: list[tuple[int, np.ndarray, np.ndarray]] = []
        for j in nodes:
            main = np.array(by_node.get(j, []), dtype=np.int32)
            if main.size:
                rows.append((j, main, f.peer[main].astype(np.int32)))
        return rows


@dataclass
class PortView:
    """Latest readings, staleness and open-incident health of every port, at one moment."""

    layout: FabricLayout
    speed: np.ndarray  # bits/s, NaN = no reading
    width: np.ndarray  # lanes, 0 = unknown
    phys: np.ndarray
    logical: np.ndarray
    updated: np.ndarray  # unix seconds, NaN = never
    stale: np.ndarray
    no_data: np.ndarray  # no reading within the data window (fabric_state.ports_without_data)
    health: np.ndarray  # index into INCIDENT_HEALTH
    incident_ids: dict[int, list[int]]
    kinds: dict[int, set[str]]
    incidents: dict[int, dict[str, Any]]
    last_poll: float | None
    polls: int

    @property
    def fabric(self) -> Fabric:
        return self.layout.fabric

    @cached_property
    def state(self) -> np.ndarray:
        """Index into STATES: up, init (physically up, not active yet), down, unknown."""
        phys_up = self.phys == PHYS_LINK_UP
        logical_ok = (self.logical == LOGICAL_ACTIVE) | (self.logical == 0)
        state = np.full(self.phys.size, 2, dtype=np.int8)
        state[phys_up & logical_ok] = 0
        state[phys_up & ~logical_ok & (self.logical > 1)] = 1
        state[(self.phys == 0) & (self.logical == 0)] = 3
        return state

    @cached_property
    def degraded(self) -> np.ndarray:
        """Reading below what the inventory expects (speed or width), where both are known."""
        f = self.fabric
        exp_s = f.expected_speed_bps.astype(np.float64)
        slow = (exp_s > 0) & (self.speed > 0) & (self.speed < exp_s)
        narrow = (f.expected_width > 0) & (self.width > 0) & (self.width < f.expected_width)
        return slow | narrow

    @cached_property
    def down(self) -> np.ndarray:
        """Down where the model has a cable: an empty switch port is down by design, no problem."""
        return (self.state == 2) & (self.fabric.peer >= 0)

    def flags(self) -> np.ndarray:
        flags = np.zeros(self.fabric.n_ports, dtype=np.int8)
        flags[self.stale] |= FLAG_STALE
        flags[self.down] |= FLAG_DOWN
        flags[self.degraded] |= FLAG_DEGRADED
        flags[self.no_data] |= FLAG_NO_DATA
        return flags

    def health_name(self, i: int) -> str:
        """``ok``, ``warning``, ``critical`` from the open incidents; ``no_data`` for a port with
        none and no reading in the data window: nobody knows it is ok."""
        h = int(self.health[i])
        return NO_DATA if h == 0 and self.no_data[i] else INCIDENT_HEALTH[h]

    def link_health(self) -> tuple[np.ndarray, np.ndarray]:
        """Per link: the worse end's incident health, and whether neither end has data."""
        a, b = self.fabric.link_a, self.fabric.link_b
        return np.maximum(self.health[a], self.health[b]), self.no_data[a] & self.no_data[b]

    def link_health_names(self, links: np.ndarray) -> list[str]:
        worst, blind = self.link_health()
        return [
            NO_DATA if worst[n] == 0 and blind[n] else INCIDENT_HEALTH[int(worst[n])] for n in links.tolist()
        ]

    def link_health_mask(self, names: Iterable[str]) -> np.ndarray:
        worst, blind = self.link_health()
        return _health_mask(names, worst, blind)

    def health_mask(self, names: Iterable[str]) -> np.ndarray:
        """Ports whose :meth:`health_name` is one of ``names``."""
        return _health_mask(names, self.health, self.no_data)

    def with_kind(self, kind: str) -> np.ndarray:
        mask = np.zeros(self.fabric.n_ports, dtype=bool)
        hits = [i for i, kinds in self.kinds.items() if kind in kinds]
        mask[hits] = True
        return mask

    # -- JSON ---------------------------------------------------------------------------------
    def port(self, i: int) -> dict[str, Any]:
        f, lay = self.fabric, self.layout
        peer = int(f.peer[i])
        sw = int(lay.switch_of[i])
        speed = self.speed[i]
        return {
            "key": f.keys[i],
            "node": f.node_of(i),
            "role": str(lay.port_role[i]),
            "switch": f.node_names[sw] if sw >= 0 else None,
            "peer": f.keys[peer] if peer >= 0 else None,
            "link": f.link_label(i),
            "rail": int(f.rail[i]) if f.rail[i] >= 0 else None,
            "speed_bps": int(speed) if not np.isnan(speed) else None,
            "expected_speed_bps": int(f.expected_speed_bps[i]) or None,
            "width": int(self.width[i]) or None,
            "expected_width": int(f.expected_width[i]) or None,
            "degraded": bool(self.degraded[i]),
            "state": STATES[int(self.state[i])],
            "phys_state": int(self.phys[i]) or None,
            "logical_state": int(self.logical[i]) or None,
            "stale": bool(self.stale[i]),
            "health": self.health_name(i),
            "last_update": _ts(self.updated[i]),
            "incident_ids": self.incident_ids.get(i, []),
        }

    def link(self, n: int) -> dict[str, Any]:
        f = self.fabric
        a, b = int(f.link_a[n]), int(f.link_b[n])
        ids = sorted({*self.incident_ids.get(a, []), *self.incident_ids.get(b, [])})
        return {
            "link": f.link_label(a),
            "a": self.port(a),
            "b": self.port(b),
            "health": self.link_health_names(np.array([n]))[0],
            "incident_ids": ids,
            "kinds": sorted(self.kinds.get(a, set()) | self.kinds.get(b, set())),
        }

    def grid(self) -> dict[str, Any]:
        """The compact status grid: per row, cells of [port, cabled peer, health, flags] of the cable."""
        f = self.fabric
        flags = self.flags()
        keys = f.keys
        rows = []
        for j, main, merged in self.layout.grid_rows:
            has = merged >= 0
            other = np.maximum(merged, 0)
            health = np.where(has, np.maximum(self.health[main], self.health[other]), self.health[main])
            cell_flags = np.where(has, flags[main] | flags[other], flags[main])
            cells = [
                [keys[m], keys[p] if p >= 0 else None, h, fl]
                for m, p, h, fl in zip(
                    main.tolist(), merged.tolist(), health.tolist(), cell_flags.tolist(), strict=True
                )
            ]
            rows.append({"node": f.node_names[j], "role": f.node_roles[j], "cells": cells})
        counts = np.bincount(self.health, minlength=len(INCIDENT_HEALTH))
        no_data = int(((self.health == 0) & self.no_data).sum())
        return {
            "generated_at": datetime.now(UTC).isoformat(),
            "last_poll": _ts(self.last_poll),
            "polls": self.polls,
            "ports": f.n_ports,
            "links": int(f.link_a.size),
            "health": {
                h: int(counts[k]) - (no_data if h == "ok" else 0) for k, h in enumerate(INCIDENT_HEALTH)
            }
            | {NO_DATA: no_data},
            "stale": int(self.stale.sum()),
            "down": int(self.down.sum()),
            "degraded": int(self.degraded.sum()),
            "flags": {
                "stale": FLAG_STALE,
                "down": FLAG_DOWN,
                "degraded": FLAG_DEGRADED,
                "no_data": FLAG_NO_DATA,
            },
            "rows": rows,
        }


def _health_mask(names: Iterable[str], health: np.ndarray, no_data: np.ndarray) -> np.ndarray:
    mask = np.zeros(health.size, dtype=bool)
    for name in names:
        if name == NO_DATA:
            mask |= (health == 0) & no_data
        elif name == "ok":
            mask |= (health == 0) & ~no_data
        else:
            mask |= health == INCIDENT_HEALTH.index(name)
    return mask


def _ts(v: float | None) -> str | None:
    if v is None or np.isnan(v) or not v:
        return None
    return datetime.fromtimestamp(float(v), UTC).isoformat()


def incident_ports(incident: Mapping[str, Any], key_index: Mapping[str, int]) -> set[int]:
    """Ports an incident is about: its port, both ends of its link, or its entity as a port key.

    A link incident marks both ends, since either end's optic or cable may be the cause.
    """
    found: set[int] = set()
    for name in (incident.get("link"), incident.get("port"), incident.get("entity")):
        if not name:
            continue
        for key in keys_named(str(name)):
            if key in key_index:
                found.add(key_index[key])
    return found


def build_view(layout: FabricLayout, state: FabricState, incidents: Iterable[Mapping[str, Any]]) -> PortView:
    """Fold the open incidents into port health over one published state's per-port arrays
    (immutable, so they are read in place, not copied)."""
    n = layout.fabric.n_ports
    speed = _or(state.port_speed_bps, np.full(n, np.nan))
    width = _or(state.port_width, np.zeros(n, dtype=np.int16))
    phys = _or(state.port_phys_state, np.zeros(n, dtype=np.uint8))
    logical = _or(state.port_logical_state, np.zeros(n, dtype=np.uint8))
    updated = _or(state.port_updated, np.full(n, np.nan))
    stale = _or(state.port_stale, np.zeros(n, dtype=bool))
    no_data = ports_without_data(state)
    last_poll = state.last_poll_timestamp or None
    polls = state.polls
    health = np.zeros(n, dtype=np.int8)
    ids: dict[int, list[int]] = defaultdict(list)
    kinds: dict[int, set[str]] = defaultdict(set)
    by_id: dict[int, dict[str, Any]] = {}
    for inc in incidents:
        if inc.get("status") not in ACTIVE_STATUSES:
            continue
        by_id[int(inc["id"])] = dict(inc)
        level = PORT_HEALTH.get(str(inc.get("severity")), 1)
        for i in incident_ports(inc, layout.key_index):
            health[i] = max(health[i], level)
            ids[i].append(int(inc["id"]))
            kinds[i].add(str(inc["kind"]))
    for v in ids.values():
        v.sort()
    return PortView(
        layout=layout,
        speed=speed,
        width=width,
        phys=phys,
        logical=logical,
        updated=updated,
        stale=stale,
        no_data=no_data,
        health=health,
        incident_ids=dict(ids),
        kinds=dict(kinds),
        incidents=by_id,
        last_poll=last_poll,
        polls=polls,
    )


def _or(values: np.ndarray | None, empty: np.ndarray) -> np.ndarray:
    return empty if values is None else values
