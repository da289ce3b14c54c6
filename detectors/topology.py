"""Cabling drift: the cables the sources report against the cables the fabric model declares.

The inventory is the declared intent. A cable that disappears, appears or moves is a finding,
never a silent model update, and in a rail-optimized fabric a host NIC cabled to a leaf of
another rail (or two NICs of one host on one leaf) turns rail-local traffic into spine traffic
without anything going down. This reads ``link`` views (``a_port``, ``b_port``, ``source``; the
pipeline stamps each with its poll's ``time``) and keeps per-cable state in arrays:

- ``link_missing``: a modelled cable a *complete* view that covers both its ends does not
  report, for ``missing.open_after`` such views in a row. A view is complete when it is not
  empty and holds at least ``min_view_share`` of the cables its source's last complete view
  held (a UFM server still discovering, or a truncated answer, is partial). What a view covers
  depends on its source: a whole-fabric source (UFM's links, an ibnetdiscover sweep) covers
  every node it names on either end; any other source (LLDP) covers the nodes on its reporting
  side, ``a_port``. A partial view, or no view (a failed scrape), opens and closes nothing.
- ``cabling_changed``: a reported cable the model does not declare, one end of which the model
  cables elsewhere (moved to another port or switch); the modelled cables it displaces are its
  evidence, not findings of their own.
- ``link_unexpected``: a reported cable between ports the model leaves uncabled.
- ``rail_miscabled``: a host NIC whose rail differs from its leaf's (the rail most of the
  leaf's modelled host cables serve), or two NICs of one host on one leaf. Judged on every
  cable of the first view and of the model itself (a declared inventory can be miscabled),
  then on every cable that appears; it takes the place of ``cabling_changed`` for that cable.

Scores are computed with numpy over the model's port and link arrays; only cables that open
or close a finding go through Python.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from graywire.collectors.keys import link_label, normalize_guid, split_port_key
from graywire.collectors.model import Fabric
from graywire.collectors.schemas import RecordKind
from graywire.detectors.base import Hysteresis, HysteresisConfig, KeyIndex, Scores
from graywire.detectors.findings import Finding, Kind, Severity

#: Sources whose link view is the whole fabric (the subnet manager's or a full sweep's).
WHOLE_FABRIC_SOURCES = frozenset({"ufm", "ibnetdiscover", "fabricsim"})

_SHIFT = np.int64(32)
_LOW = np.int64((1 << 32) - 1)

#: Kinds of a cable entity, by code.
_CHANGED, _UNEXPECTED, _RAIL = 0, 1, 2
_CABLE_KINDS = (Kind.CABLING_CHANGED, Kind.LINK_UNEXPECTED, Kind.RAIL_MISCABLED)
_SEVERITY: dict[str, Severity] = {
    Kind.LINK_MISSING: Severity.CRITICAL,
    Kind.CABLING_CHANGED: Severity.WARNING,
    Kind.LINK_UNEXPECTED: Severity.WARNING,
    Kind.RAIL_MISCABLED: Severity.CRITICAL,
}


@dataclass(frozen=True, slots=True)
class TopologyConfig:
    #: A modelled cable is missing after this many complete views in a row without it, and
    #: present again as soon as one view reports it.
    missing: HysteresisConfig = field(default_factory=lambda: HysteresisConfig(open_after=3, close_after=1))
    #: A cable that is there is there: one view opens it; two complete views without it close it.
    changed: HysteresisConfig = field(default_factory=lambda: HysteresisConfig(open_after=1, close_after=2))
    #: A view with fewer cables than this share of its source's last complete one is partial.
    min_view_share: float = 0.5
    whole_fabric_sources: frozenset[str] = WHOLE_FABRIC_SOURCES
    #: Cables outside the model tracked at most (rows past it are counted in ``over_capacity``).
    max_cables: int = 1 << 20


def _pack(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    lo, hi = np.minimum(a, b).astype(np.int64), np.maximum(a, b).astype(np.int64)
    return (lo << _SHIFT) | hi


def _unpack(key: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    return key >> _SHIFT, key & _LOW


@dataclass(frozen=True, slots=True, kw_only=True)
class _MissingScores(Scores):
    """Per modelled link in ``ids``: missing (``bad``) or reported / explained."""


@dataclass(frozen=True, slots=True, kw_only=True)
class _CableScores(Scores):
    """Per cable entity in ``ids``: reported (``bad``: it is a finding) or judged absent."""


class TopologyDetector:
    """Compares each poll's ``link`` views with the fabric model's cables."""

    name = "topology"
    version = "1"
    consumes = RecordKind.LINK
    kinds = (Kind.LINK_MISSING, Kind.CABLING_CHANGED, Kind.LINK_UNEXPECTED, Kind.RAIL_MISCABLED)

    def __init__(
        self,
        fabric: Fabric,
        cfg: TopologyConfig | None = None,
        clock: Callable[[], datetime] | None = None,
    ) -> None:
        self.fabric = f = fabric
        self.cfg = cfg or TopologyConfig()
        self.clock = clock or (lambda: datetime.now(UTC))
        P = f.n_ports
        self.n_ports = P
        self.node = f.node_of_port.astype(np.int64)
        self.is_host = f.host_port.astype(bool)
        self.model_key = _pack(f.link_a, f.link_b)
        self.la, self.lb = f.link_a.astype(np.int64), f.link_b.astype(np.int64)
        self.model_peer = f.peer.astype(np.int64)
        #: What each modelled port is cabled to as far as the views said (model ids, -1 none).
        self.peer_now = self.model_peer.copy()
        self.leaf_rail = self._leaf_rails()
        self.missing = Hysteresis(self.cfg.missing, len(self.la))
        self.cables = KeyIndex(self.cfg.max_cables)
        self.cable_kind = np.zeros(0, np.int8)
        self.cable_from = np.zeros(0, np.int8)  # 0 a view, 1 the inventory alone
        self.changed = Hysteresis(self.cfg.changed)
        self.over_capacity = 0
        self._started = False
        self._last_complete: dict[str, int] = {}
        #: Ports the model does not know, by key: ids from ``n_ports`` on.
        self._unknown: dict[str, int] = {}
        self._unknown_keys: list[str] = []
        self._guid_index: tuple[dict[tuple[str, int], int], dict[str, int]] | None = None
        self._ids_cache: dict[str, tuple[pa.Array, np.ndarray]] = {}
        self._last_time: datetime | None = None
        #: Host ports by node (CSR), for the same-leaf check of one cable.
        order = np.argsort(self.node, kind="stable")
        self._by_node = order
        self._node_start = np.searchsorted(self.node[order], np.arange(len(f.node_names) + 1))

    # -- the model --------------------------------------------------------------------------
    def _leaf_rails(self) -> np.ndarray:
        """Per node, the rail most of its modelled host cables serve (-1: none, or a tie)."""
        f = self.fabric
        n_nodes = len(f.node_names)
        rails = f.rail.astype(np.int64)
        n_rails = int(rails.max()) + 1 if rails.size and rails.max() >= 0 else 0
        out = np.full(n_nodes, -1, np.int64)
        if not n_rails:
            return out
        nic = np.flatnonzero(self.is_host & (self.model_peer >= 0) & (rails >= 0))
        nic = nic[~self.is_host[self.model_peer[nic]]]
        leaf = self.node[self.model_peer[nic]]
        counts = np.bincount(leaf * n_rails + rails[nic], minlength=n_nodes * n_rails).reshape(
            n_nodes, n_rails
        )
        best = counts.argmax(axis=1)
        top = counts.max(axis=1)
        ties = (counts == top[:, None]).sum(axis=1) > 1
        return np.where((top > 0) & ~ties, best, -1)

    def _rail_bad(self, nics: np.ndarray, peers: np.ndarray, peer_all: np.ndarray) -> np.ndarray:
        """Whether host NICs ``nics`` cabled to model ports ``peers`` are miscabled for their rail.

        ``peer_all`` is every port's current peer, for the two-NICs-on-one-leaf rule.
        """
        f = self.fabric
        ok = (peers >= 0) & (peers < self.n_ports)
        safe = np.where(ok, peers, 0)
        leaf = self.node[safe]
        switch = ok & ~self.is_host[safe]
        rail = f.rail.astype(np.int64)[nics]
        lr = self.leaf_rail[leaf]
        wrong_rail = switch & (rail >= 0) & (lr >= 0) & (rail != lr)
        # Two NICs of one host on one leaf: count (host, leaf) pairs over the whole cabling.
        n_nodes = np.int64(len(f.node_names))
        nic_all = np.flatnonzero(self.is_host & (peer_all >= 0) & (peer_all < self.n_ports))
        nic_all = nic_all[~self.is_host[peer_all[nic_all]]]
        pairs, counts = np.unique(
            self.node[nic_all] * n_nodes + self.node[peer_all[nic_all]], return_counts=True
        )
        shared = np.zeros(nics.size, bool)
        if pairs.size:
            mine = self.node[nics] * n_nodes + leaf
            pos = np.minimum(np.searchsorted(pairs, mine), pairs.size - 1)
            shared = switch & (pairs[pos] == mine) & (counts[pos] > 1)
        return wrong_rail | shared

    # -- keys -----------------------------------------------------------------------------------
    def _ids(self, name: str, keys: pa.Array) -> np.ndarray:
        """Port ids of a key column: model ports first, then unknown ports; cached by content."""
        if isinstance(keys, pa.ChunkedArray):
            keys = keys.combine_chunks()
        if pa.types.is_dictionary(keys.type):
            keys = keys.cast(pa.string())
        cached = self._ids_cache.get(name)
        if cached is not None and cached[0].equals(keys):
            return cached[1]
        ids = self.fabric.lookup(keys).astype(np.int64)
        miss = np.flatnonzero(ids < 0)
        if miss.size:
            strs = keys.take(pa.array(miss))
            uniq = pc.unique(strs)
            resolved = {k: self._resolve(k) for k in uniq.to_pylist()}
            ids[miss] = [resolved[k] for k in strs.to_pylist()]
        self._ids_cache[name] = (keys, ids)
        return ids

    def _resolve(self, key: str) -> int:
        """An unknown key: a port the model knows by an alias (a NIC's netdev or MAC, as its own
        LLDP agent names it), a GUID-addressed port (``0x<guid>/<num>``), else a new id."""
        if (alias := self.fabric.resolve_alias(key)) >= 0:
            return alias
        try:
            node, num = split_port_key(key)
            guid = normalize_guid(node)
        except ValueError:
            guid = None
        if guid is not None:
            by_port, by_guid = self._guids()
            hit = by_port.get((guid, int(num))) if num.isdigit() else None
            if hit is None:
                hit = by_guid.get(guid)
            if hit is not None:
                return hit
            key = f"{guid}/{num}"  # one spelling per unknown GUID port
        i = self._unknown.get(key)
        if i is None:
            i = self._unknown[key] = self.n_ports + len(self._unknown_keys)
            self._unknown_keys.append(key)
        return i

    def _guids(self) -> tuple[dict[tuple[str, int], int], dict[str, int]]:
        if self._guid_index is None:
            f = self.fabric
            nums = f.port_num if f.port_num is not None else np.zeros(f.n_ports, np.int16)
            by_port: dict[tuple[str, int], int] = {}
            by_guid: dict[str, int] = {}
            shared: set[str] = set()
            for i, g in enumerate(f.guids):
                if not g:
                    continue
                g = normalize_guid(g)
                if nums[i]:
                    by_port[(g, int(nums[i]))] = i
                if g in by_guid:
                    shared.add(g)  # a switch's ports share its node GUID
                by_guid[g] = i
            for g in shared:
                del by_guid[g]
            self._guid_index = (by_port, by_guid)
        return self._guid_index

    def key_of(self, i: int) -> str:
        return self.fabric.keys[i] if i < self.n_ports else self._unknown_keys[i - self.n_ports]

    def _node_of(self, ids: np.ndarray) -> np.ndarray:
        known = (ids >= 0) & (ids < self.n_ports)
        return np.where(known, self.node[np.where(known, ids, 0)], -1)

    # -- one poll -------------------------------------------------------------------------------
    def observe(self, batch: pa.RecordBatch) -> list[Finding]:
        if batch.num_rows == 0:
            return []  # an empty view is no view: a server that lists no cable says nothing
        now = batch.column("time")[0].as_py() if "time" in batch.schema.names else None
        now = now or self._last_time or self.clock()
        self._last_time = now
        a = self._ids("a_port", batch.column("a_port"))
        b = self._ids("b_port", batch.column("b_port"))
        src = pc.dictionary_encode(batch.column("source").cast(pa.string()))
        if isinstance(src, pa.ChunkedArray):
            src = src.combine_chunks()
        codes = src.indices.to_numpy(zero_copy_only=False).astype(np.int64)
        names = src.dictionary.to_pylist()
        # A cable with an end the model does not know (a NIC its LLDP agent names by netdev or
        # MAC, a device the inventory leaves out) says nothing certain about its known end:
        # that end's modelled cable is neither present nor missing, and nothing opens on it.
        unknown_end = (a >= self.n_ports) | (b >= self.n_ports) | (a < 0) | (b < 0)
        unsure = np.zeros(self.n_ports, bool)
        for end in (a[unknown_end], b[unknown_end]):
            unsure[end[(end >= 0) & (end < self.n_ports)]] = True
        ok = (a != b) & ~unknown_end
        key = _pack(a, b)
        present = np.unique(key[ok])
        # Which nodes each complete view covers, and which modelled cables that lets us judge.
        n_nodes = len(self.fabric.node_names)
        judged_both = np.zeros(n_nodes, bool)  # covered by a whole-fabric view
        judged_one = np.zeros(n_nodes, bool)  # the reporting side of another complete view
        complete: list[str] = []
        for s, source in enumerate(names):
            rows = (codes == s) & ok
            count = int(np.unique(key[rows]).size)
            last = self._last_complete.get(source)
            if count == 0 or (last is not None and count < self.cfg.min_view_share * last):
                continue  # partial: what it shows counts, what it leaves out does not
            self._last_complete[source] = count
            complete.append(source)
            if source in self.cfg.whole_fabric_sources:
                for ends in (a[rows], b[rows]):
                    nodes = self._node_of(ends)
                    judged_both[nodes[nodes >= 0]] = True
            else:
                nodes = self._node_of(a[rows])
                judged_one[nodes[nodes >= 0]] = True
        is_model = np.isin(present, self.model_key)
        new = present[~is_model]
        new_lo, new_hi = _unpack(new)
        in_new = np.zeros(self.n_ports, bool)
        for end in (new_lo, new_hi):
            in_new[end[end < self.n_ports]] = True
        present_model = np.isin(self.model_key, present)
        na, nb = self.node[self.la], self.node[self.lb]
        judged = ((judged_both[na] & judged_both[nb]) | judged_one[na] | judged_one[nb]) & ~(
            unsure[self.la] | unsure[self.lb]
        )
        # What each port is now cabled to, as far as anyone can tell.
        absent = judged & ~present_model
        self.peer_now[self.la[absent & ~in_new[self.la]]] = -1
        self.peer_now[self.lb[absent & ~in_new[self.lb]]] = -1
        for x, y in ((new_lo, new_hi), (new_hi, new_lo)):
            known = x < self.n_ports
            self.peer_now[x[known]] = y[known]
        self.peer_now[self.la[present_model]] = self.lb[present_model]
        self.peer_now[self.lb[present_model]] = self.la[present_model]

        findings: list[Finding] = []
        ids = np.flatnonzero(judged | present_model)
        explained = in_new[self.la[ids]] | in_new[self.lb[ids]]
        scores = _MissingScores(ids=ids, bad=~present_model[ids] & ~explained)
        decision = self.missing.decide(scores)
        for status, link, _ in decision.changes():
            findings.append(self._missing_finding(link, status, now, complete))

        cable_ids, bad = self._cable_scores(new, present, judged_both, judged_one)
        decision = self.changed.decide(_CableScores(ids=cable_ids, bad=bad))
        for status, e, _ in decision.changes():
            rows = np.flatnonzero(key == self.cables.key_of[e])
            reporters = sorted({names[int(c)] for c in codes[rows].tolist()})
            findings.append(self._cable_finding(e, status, now, reporters))
        self._started = True
        return findings

    def _cable_scores(
        self,
        new: np.ndarray,
        present: np.ndarray,
        judged_both: np.ndarray,
        judged_one: np.ndarray,
    ) -> tuple[np.ndarray, np.ndarray]:
        """The cable entities judged this poll: reported ones (bad) and open ones judged absent."""
        keys = [new]
        from_model = np.zeros(0, np.int64)
        if not self._started:
            # The first view and the model itself: every cable miscabled for its rail, and the
            # model's own ones whether reported or not (the inventory is the intent; it can be wrong).
            nics = np.flatnonzero(self.is_host & (self.model_peer >= 0))
            bad = nics[self._rail_bad(nics, self.model_peer[nics], self.model_peer)]
            from_model = _pack(bad, self.model_peer[bad])
            seen = np.flatnonzero(self.is_host & (self.peer_now >= 0) & (self.peer_now < self.n_ports))
            bad = seen[self._rail_bad(seen, self.peer_now[seen], self.peer_now)]
            keys += [from_model, _pack(bad, self.peer_now[bad])]
        else:
            # A modelled cable found miscabled at start-up stays one while it is reported.
            known = self.cables.key_of[self.cable_kind == _RAIL]
            keys.append(known[np.isin(known, present)])
        cand = np.unique(np.concatenate(keys))
        before = self.cables.n
        ids = self.cables.ids(cand)
        self.over_capacity += int(np.count_nonzero(ids < 0))
        cand, ids = cand[ids >= 0], ids[ids >= 0]
        if self.cables.n > before:
            self._classify(before)
        reported = ids[np.isin(cand, present) | np.isin(cand, from_model)]
        # Open cables no longer reported, where a complete view covers their known ends.
        self.changed.grow(self.cables.n)
        is_open = np.flatnonzero(self.changed.is_open[: self.cables.n])
        gone = is_open[~np.isin(is_open, reported)]
        if gone.size:
            lo, hi = _unpack(self.cables.key_of[gone])
            nl, nh = self._node_of(lo), self._node_of(hi)
            sl, sh = np.maximum(nl, 0), np.maximum(nh, 0)
            whole = np.where(nl >= 0, judged_both[sl], True) & np.where(nh >= 0, judged_both[sh], True)
            whole &= (nl >= 0) | (nh >= 0)
            one = ((nl >= 0) & judged_one[sl]) | ((nh >= 0) & judged_one[sh])
            gone = gone[whole | one]
        ids = np.concatenate([reported, gone])
        bad = np.concatenate([np.ones(reported.size, bool), np.zeros(gone.size, bool)])
        return ids, bad

    def _classify(self, start: int) -> None:
        """Kind of each cable entity from ``start`` on (fixed by its ends and the model)."""
        keys = self.cables.key_of[start:]
        lo, hi = _unpack(keys)
        P = self.n_ports
        kind = np.full(keys.size, _UNEXPECTED, np.int8)
        has_peer = np.zeros(keys.size, bool)
        for end in (lo, hi):
            known = end < P
            has_peer |= known & (self.model_peer[np.where(known, end, 0)] >= 0)
        kind[has_peer] = _CHANGED
        # Rail: the host end of a host-switch cable, judged against the current cabling.
        for nic, other in ((lo, hi), (hi, lo)):
            known = (nic < P) & (other < P)
            host = known & self.is_host[np.where(known, nic, 0)]
            if host.any():
                rows = np.flatnonzero(host)
                bad = self._rail_bad(nic[rows], other[rows], self.peer_now)
                kind[rows[bad]] = _RAIL
        in_model = np.isin(keys, self.model_key)
        source = np.where(in_model, 1, 0).astype(np.int8)
        self.cable_kind = np.concatenate([self.cable_kind, kind])
        self.cable_from = np.concatenate([self.cable_from, source])

    # -- findings -------------------------------------------------------------------------------
    def _ends(self, x: int, y: int) -> tuple[int, int]:
        """The cable's ends, the one where a person acts first: a model host port, else a model port."""

        def rank(p: int) -> tuple[bool, bool, int]:
            known = p < self.n_ports
            return (not known, not (known and bool(self.is_host[p])), p)

        return tuple(sorted((x, y), key=rank))  # type: ignore[return-value]

    def _label(self, x: int, y: int) -> str:
        return link_label(self.key_of(x), self.key_of(y))

    def _missing_finding(self, link: int, status: str, now: datetime, complete: list[str]) -> Finding:
        f = self.fabric
        main, other = self._ends(int(self.la[link]), int(self.lb[link]))
        label = self._label(main, other)
        if status == "firing":
            summary = (
                f"cable {label} declared by the inventory is not reported by "
                f"{', '.join(complete) or 'the link sources'} for "
                f"{self.cfg.missing.open_after} complete views (link down or cable removed)"
            )
        else:
            summary = f"cable {label} reported again"
        return Finding(
            kind=Kind.LINK_MISSING,
            entity=label,
            status=status,  # type: ignore[arg-type]
            time=now,
            severity=_SEVERITY[Kind.LINK_MISSING],
            summary=summary,
            detector=f"{self.name}/{self.version}",
            node=f.node_of(main),
            port=f.keys[main],
            link=label,
            score=1.0,
            evidence={
                "expected": {"a_port": f.keys[main], "b_port": f.keys[other]},
                "sources": complete,
                "views_without": int(self.missing.bad_run[link]),
                "peer_port": f.keys[other],
            },
        )

    def _cable_finding(self, e: int, status: str, now: datetime, reporters: list[str]) -> Finding:
        f, P = self.fabric, self.n_ports
        key = int(self.cables.key_of[e])
        kind = _CABLE_KINDS[int(self.cable_kind[e])]
        main, other = self._ends(key >> 32, key & ((1 << 32) - 1))
        label = self._label(main, other)
        evidence: dict[str, Any] = {
            "ends": [self.key_of(main), self.key_of(other)],
            "from": "inventory" if self.cable_from[e] == 1 else "view",
            "sources": reporters,
        }
        was: dict[str, str | None] = {}
        displaced = []
        for p, q in ((main, other), (other, main)):
            if p < P:
                mp = int(self.model_peer[p])
                was[self.key_of(p)] = f.keys[mp] if mp >= 0 else None
                if mp >= 0 and mp != q:
                    displaced.append(self._label(p, mp))
        evidence["expected_peer"] = was
        evidence["displaced"] = sorted(set(displaced))
        main_key, other_key = self.key_of(main), self.key_of(other)
        if kind == Kind.RAIL_MISCABLED and main < P and other < P:
            rail = int(f.rail[main])
            leaf = int(self.node[other])
            mp = int(self.model_peer[main])
            same = self._same_leaf_nics(main, leaf)
            evidence |= {
                "nic_rail": rail,
                "actual_leaf": f.node_names[leaf],
                "actual_leaf_rail": int(self.leaf_rail[leaf]) if self.leaf_rail[leaf] >= 0 else None,
                "expected_leaf": f.node_of(mp) if mp >= 0 and self.node[mp] != leaf else None,
                "same_leaf_nics": same,
            }
            why = (
                f"{len(same) + 1} NICs of {f.node_of(main)} on {f.node_names[leaf]}"
                if same
                else f"rail {rail} NIC on {f.node_names[leaf]} (rail {int(self.leaf_rail[leaf])})"
            )
            exp = evidence["expected_leaf"]
            what = f"{main_key} cabled to {other_key}: {why}" + (f", expected on {exp}" if exp else "")
        elif kind == Kind.CABLING_CHANGED:
            moved = [
                f"{p} was cabled to {q}"
                for p, q in was.items()
                if q is not None and q not in (main_key, other_key)
            ]
            what = f"{main_key} now cabled to {other_key} ({'; '.join(moved)})"
        else:
            what = f"cable {label} not declared by the inventory"
        summary = what if status == "firing" else f"cable {label} no longer reported"
        return Finding(
            kind=kind,
            entity=label,
            status=status,  # type: ignore[arg-type]
            time=now,
            severity=_SEVERITY[kind],
            summary=summary,
            detector=f"{self.name}/{self.version}",
            node=f.node_of(main) if main < P else None,
            port=main_key,
            link=label,
            score=1.0,
            evidence=evidence,
        )

    def _same_leaf_nics(self, nic: int, leaf: int) -> list[str]:
        """Other NICs of ``nic``'s host now cabled to ``leaf``."""
        h = int(self.node[nic])
        ports = self._by_node[self._node_start[h] : self._node_start[h + 1]]
        peers = self.peer_now[ports]
        ok = (peers >= 0) & (peers < self.n_ports) & (ports != nic)
        hit = ports[ok][self.node[peers[ok]] == leaf]
        return [self.fabric.keys[int(p)] for p in np.sort(hit)]
