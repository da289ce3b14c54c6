"""Where an incident sits in the fabric, for the ``switch`` and ``rail`` labels of its alerts.

Alertmanager routes, groups and inhibits by label, so an alert about a host link must name
the switch at the far end of that link: a ``GraywireSwitchFailure`` for that switch then
inhibits it by ``switch`` (``deploy/alertmanager/alertmanager.yml``). The answer depends only on
the incident row and the fabric model, both fixed over an incident's life, so the labels stay
the same from trigger to resolve.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np
import pyarrow as pa

from graywire.collectors.keys import link_ends, node_of_key
from graywire.collectors.model import ROLES, Fabric
from graywire.detectors.findings import Kind
from graywire.service.alerts.events import Place

#: Rows looked up at most once per process while they stay in this many recent ones: the sync
#: describes every firing incident on every pass.
_CACHE = 1 << 16


class FabricPlaces:
    """The switch an incident is on or behind, and its rail, from the fabric model.

    - ``switch_failure``: the failing switch itself (its entity).
    - An incident on a port: the first switch among the port's own node, the node at the
      other end of the incident's link, and the node at the other end of the port's cable in
      the model. A host NIC's incident names the leaf it is cabled to; a leaf port's, the leaf;
      an NCCL hop (a NIC-to-NIC "link") the sender's leaf. This is the switch the drain policy
      counts the link against (``detectors.correlate``).
    - A link without a port: its lower-tier switch end (leaf before spine).
    - A node only: the node, if it is a switch (an NCCL slow path names its leaf); a host's
      own incidents (a straggler, a job) name no switch.

    ``rail`` is the port's rail, else its cable peer's, else the switch's when all its railed
    ports are on one rail (a rail-optimized leaf).
    """

    def __init__(self, fabric: Fabric) -> None:
        self.fabric = fabric
        self._role = dict(zip(fabric.node_names, fabric.node_roles, strict=True))
        self._node_rails = _single_rail_per_node(fabric)
        self.place = lru_cache(maxsize=_CACHE)(self._place)  # type: ignore[method-assign]

    def _is_switch(self, node: str | None) -> bool:
        return node is not None and self._role.get(node, "host") != "host"

    def _port_index(self, port: str) -> int:
        f = self.fabric
        i = int(f.lookup(pa.array([port], type=pa.string()))[0])
        return i if i >= 0 else f.resolve_alias(port)

    def _place(self, kind: str, entity: str, node: str | None, port: str | None, link: str | None) -> Place:
        if kind == Kind.SWITCH_FAILURE:
            switch = node or entity
            return Place(switch, self._node_rails.get(switch))
        f = self.fabric
        ends = link_ends(link)
        switch: str | None = None
        rail: str | None = None
        if port:
            i = self._port_index(port)
            candidates = [f.node_of(i) if i >= 0 else node_of_key(port)]
            if port in ends and len(ends) == 2:
                candidates.append(node_of_key(ends[1] if ends[0] == port else ends[0]))
            peer = int(f.peer[i]) if i >= 0 else -1
            if peer >= 0:
                candidates.append(f.node_of(peer))
            switch = next((n for n in candidates if self._is_switch(n)), None)
            if i >= 0 and f.rail[i] >= 0:
                rail = str(int(f.rail[i]))
            elif peer >= 0 and f.rail[peer] >= 0:
                rail = str(int(f.rail[peer]))
        elif ends:
            switches = [n for n in (node_of_key(e) for e in ends) if self._is_switch(n)]
            switch = min(switches, key=lambda n: ROLES.index(self._role[n]), default=None)
        elif self._is_switch(node):
            switch = node
        if rail is None and switch is not None:
            rail = self._node_rails.get(switch)
        return Place(switch, rail)


def _single_rail_per_node(fabric: Fabric) -> dict[str, str]:
    """Nodes whose railed ports are all on one rail -> that rail."""
    railed = fabric.rail >= 0
    if not railed.any():
        return {}
    nodes = fabric.node_of_port[railed].astype(np.int64)
    rails = fabric.rail[railed].astype(np.int64)
    pairs = np.unique(nodes * (int(rails.max()) + 1) + rails)
    node_of_pair = pairs // (int(rails.max()) + 1)
    counts = np.bincount(node_of_pair, minlength=len(fabric.node_names))
    single = pairs[counts[node_of_pair] == 1]
    width = int(rails.max()) + 1
    return {fabric.node_names[int(p // width)]: str(int(p % width)) for p in single}
