"""The detector interface and the pieces every detector shares.

A detector keeps per-entity state in arrays and turns a batch into findings in three steps,
as an anomaly filter sits apart from its scorer: a scoring step gives the poll's judged
entities their scores, evidence and verdicts (:class:`Scores`); the shared hysteresis decides
(:meth:`Hysteresis.decide`: open after ``open_after`` bad polls in a row, close after
``close_after`` good ones); findings are built only for the entities that opened or closed
(:class:`Decision`). The decision rule can so be tuned without touching the statistics.
"""

from __future__ import annotations

import weakref
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from functools import lru_cache
from itertools import repeat
from typing import Any, ClassVar, Final, Protocol, runtime_checkable

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from graywire.collectors.model import Fabric
from graywire.collectors.schemas import RecordKind
from graywire.detectors.findings import Finding, Severity, Status

#: The rates stage's output (detectors/rates.py), which the port detectors read: not a canonical
#: record, so not a ``RecordKind``.
PORT_RATES: Final = "port_rates"


class Detector(Protocol):
    """``consumes`` is the record a detector reads: ``PORT_RATES`` or a ``RecordKind``."""

    name: ClassVar[str]
    version: ClassVar[str]
    consumes: ClassVar[RecordKind | str]
    kinds: ClassVar[tuple[str, ...]]  # finding kinds it can emit

    def observe(self, batch: pa.RecordBatch) -> list[Finding]: ...


#: Where a run of polls stops counting (:class:`Hysteresis` keeps runs in int16).
RUN_MAX = int(np.iinfo(np.int16).max)


@dataclass(frozen=True, slots=True)
class HysteresisConfig:
    open_after: int = 2
    close_after: int = 2

    def __post_init__(self) -> None:
        for name in ("open_after", "close_after"):
            if not 1 <= getattr(self, name) <= RUN_MAX:
                raise ValueError(f"{name} must be 1 to {RUN_MAX} polls, not {getattr(self, name)!r}")


@dataclass(frozen=True, slots=True, kw_only=True)
class Scores:
    """A scoring step's output for one poll: the entities judged and their verdicts.

    ``ids`` are the entities with data this poll; an unknown one is left out, since unknown is
    not healthy and a missing sample neither opens nor closes anything. ``bad[i]`` is the
    verdict on ``ids[i]``. ``holding``, when given, is the laxer verdict that keeps an entity
    that is already open open (hysteresis on the threshold as well as in time). Detectors
    subclass it with their score and evidence arrays, aligned with ``ids`` unless they say.
    """

    ids: np.ndarray
    bad: np.ndarray
    holding: np.ndarray | None = None


@dataclass(frozen=True, slots=True)
class Decision:
    """The entities a poll opened and closed, and where each sits in its :class:`Scores`.

    ``opened_at[i]`` is the position of ``opened[i]`` in the scores' ``ids`` (its last one,
    should an entity be judged twice in a poll), so findings read the evidence arrays directly.
    """

    opened: np.ndarray
    closed: np.ndarray
    opened_at: np.ndarray
    closed_at: np.ndarray

    def __bool__(self) -> bool:
        return bool(self.opened.size or self.closed.size)

    def changes(self) -> Iterator[tuple[Status, int, int]]:
        """(status, entity, position) of every change: the openings, then the closings."""
        yield from zip(repeat("firing"), self.opened.tolist(), self.opened_at.tolist(), strict=False)
        yield from zip(repeat("cleared"), self.closed.tolist(), self.closed_at.tolist(), strict=False)


def _last_position(ids: np.ndarray, which: np.ndarray) -> np.ndarray:
    """Position in ``ids`` of the last occurrence of each of ``which`` (all present)."""
    order = np.argsort(ids, kind="stable")
    return order[np.searchsorted(ids[order], which, side="right") - 1]


class Hysteresis:
    """Vectorized open/close state machine over a growing set of entities."""

    def __init__(self, cfg: HysteresisConfig, size: int = 0) -> None:
        self.cfg = cfg
        # Consecutive polls, saturating at RUN_MAX (3.8 days at 10 s; every threshold is far
        # below): int16, since each detector keeps two per port.
        self.bad_run = np.zeros(size, dtype=np.int16)
        self.good_run = np.zeros(size, dtype=np.int16)
        self.is_open = np.zeros(size, dtype=bool)

    def grow(self, n: int) -> None:
        if n > self.is_open.size:
            extra = n - self.is_open.size
            self.bad_run = np.concatenate([self.bad_run, np.zeros(extra, np.int16)])
            self.good_run = np.concatenate([self.good_run, np.zeros(extra, np.int16)])
            self.is_open = np.concatenate([self.is_open, np.zeros(extra, bool)])

    def update(self, idx: np.ndarray, bad: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Feed one poll's verdicts for entities ``idx``; return (newly opened, newly closed).

        Entities not in ``idx`` (no data this poll) keep their runs: a collector outage
        neither opens nor closes anything.
        """
        if idx.size:
            self.grow(int(idx.max()) + 1)
        self.bad_run[idx] = np.where(bad, np.minimum(self.bad_run[idx], RUN_MAX - 1) + 1, 0)
        self.good_run[idx] = np.where(bad, 0, np.minimum(self.good_run[idx], RUN_MAX - 1) + 1)
        was = self.is_open[idx]
        opens = ~was & (self.bad_run[idx] >= self.cfg.open_after)
        closes = was & (self.good_run[idx] >= self.cfg.close_after)
        self.is_open[idx[opens]] = True
        self.is_open[idx[closes]] = False
        return idx[opens], idx[closes]

    def decide(self, scores: Scores) -> Decision:
        """Feed one poll's :class:`Scores`: an open entity is judged by ``holding`` when given."""
        ids = scores.ids
        bad = scores.bad
        if scores.holding is not None:
            if ids.size:
                self.grow(int(ids.max()) + 1)
            bad = np.where(self.is_open[ids], scores.holding, bad)
        opened, closed = self.update(ids, bad)
        if not opened.size and not closed.size:
            return Decision(opened, closed, opened, closed)
        return Decision(opened, closed, _last_position(ids, opened), _last_position(ids, closed))

    def keep(self, mask: np.ndarray) -> None:
        """Keep only the entities where ``mask`` is true, renumbered densely (compaction)."""
        n = mask.size
        self.bad_run, self.good_run = self.bad_run[:n][mask], self.good_run[:n][mask]
        self.is_open = self.is_open[:n][mask]


class RollingWindow:
    """The last ``window`` values of each entity (a ring buffer per row), for windowed medians.

    A value is judged once its entity has a full window; an entity with no value this poll
    keeps its window as it was (no data is not a healthy sample).
    """

    def __init__(self, window: int, size: int = 0) -> None:
        self.window = window
        self.hist = np.full((size, window), np.nan)
        self.count = np.zeros(size, dtype=np.int64)

    def grow(self, n: int) -> None:
        if n > self.count.size:
            extra = n - self.count.size
            self.hist = np.vstack([self.hist, np.full((extra, self.window), np.nan)])
            self.count = np.concatenate([self.count, np.zeros(extra, np.int64)])

    def push(self, ids: np.ndarray, values: np.ndarray) -> None:
        """Add one value per (distinct) entity."""
        self.hist[ids, self.count[ids] % self.window] = values
        self.count[ids] += 1

    def full(self, ids: np.ndarray) -> np.ndarray:
        return self.count[ids] >= self.window

    def median(self, ids: np.ndarray) -> np.ndarray:
        return np.median(self.hist[ids], axis=1)

    def keep(self, mask: np.ndarray) -> None:
        """Keep only the entities where ``mask`` is true, renumbered densely (compaction)."""
        n = mask.size
        self.hist, self.count = self.hist[:n][mask], self.count[:n][mask]


class EntityIndex:
    """Stable integer ids for string entity keys that appear over time (e.g. NCCL ranks).

    Known keys are found with one vectorized hash lookup; only keys never seen before go
    through Python, once each. With a ``capacity``, keys past it get -1 (their rows are the
    caller's to count); :meth:`keep` forgets keys and renumbers densely, order kept.
    """

    def __init__(self, capacity: int | None = None) -> None:
        self.capacity = capacity
        self.keys: list[str] = []
        self._known = pa.array([], type=pa.string())

    def ids(self, keys: pa.Array) -> np.ndarray:
        """Ids for an array of string keys, assigning new ids in first-seen order."""
        if pa.types.is_dictionary(keys.type):
            keys = keys.cast(pa.string())
        found = pc.index_in(keys, value_set=self._known)
        if found.null_count:
            new = pc.unique(keys.filter(pc.is_null(found)))
            if self.capacity is not None:
                new = new.slice(0, max(0, self.capacity - len(self.keys)))
            if len(new):
                self.keys.extend(new.to_pylist())
                self._known = pa.concat_arrays([self._known, new.cast(pa.string())])
                found = pc.index_in(keys, value_set=self._known)
        return found.fill_null(-1).to_numpy(zero_copy_only=False).astype(np.int64)

    def find(self, keys: pa.Array) -> np.ndarray:
        """Ids of known keys, -1 for the others (nothing is assigned)."""
        if pa.types.is_dictionary(keys.type):
            keys = keys.cast(pa.string())
        return (
            pc.index_in(keys, value_set=self._known)
            .fill_null(-1)
            .to_numpy(zero_copy_only=False)
            .astype(np.int64)
        )

    def keep(self, mask: np.ndarray) -> None:
        """Keep only the keys where ``mask`` is true, renumbered densely like :meth:`RollingWindow.keep`."""
        self._known = self._known.filter(pa.array(mask))
        self.keys = self._known.to_pylist()


class KeyIndex:
    """Dense row ids for int64 keys (packed tuples), at most ``capacity`` of them.

    A poll's keys are found with one binary search over the sorted keys. New keys are added
    in first-seen or sorted order; past the capacity they get -1, and with ``group`` given a
    group's new keys are taken all or none, so no group is judged on part of its members.
    :meth:`keep` drops rows and renumbers densely, order kept (compaction).
    """

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.key_of = np.zeros(0, dtype=np.int64)  # id -> key
        self._sorted = np.zeros(0, dtype=np.int64)
        self._id_at = np.zeros(0, dtype=np.int64)

    @property
    def n(self) -> int:
        return int(self.key_of.size)

    def find(self, packed: np.ndarray) -> np.ndarray:
        """Ids of known keys, -1 for the others."""
        if not self._sorted.size:
            return np.full(packed.size, -1, dtype=np.int64)
        pos = np.minimum(np.searchsorted(self._sorted, packed), self._sorted.size - 1)
        return np.where(self._sorted[pos] == packed, self._id_at[pos], -1)

    def ids(self, packed: np.ndarray, group: np.ndarray | None = None, first_seen: bool = True) -> np.ndarray:
        """Ids for ``packed``, new keys added (first-seen order, else sorted) while they fit."""
        found = self.find(packed)
        miss = np.flatnonzero(found < 0)
        if not miss.size:
            return found
        new, first = np.unique(packed[miss], return_index=True)
        if first_seen:
            order = np.argsort(first, kind="stable")
            new, first = new[order], first[order]
        room = self.capacity - self.n
        if new.size > room:
            new = new[:room] if group is None else new[_whole_groups(group[miss[first]], room)]
        if new.size:
            self.rekey(np.concatenate([self.key_of, new]))
            found = self.find(packed)
        return found

    def keep(self, mask: np.ndarray) -> None:
        self.rekey(self.key_of[: mask.size][mask])

    def rekey(self, key_of: np.ndarray) -> None:
        """Replace every row's key (ids stay): after renumbering what the keys are packed from."""
        self.key_of = key_of
        self._id_at = np.argsort(key_of, kind="stable")
        self._sorted = key_of[self._id_at]


def _whole_groups(group: np.ndarray, room: int) -> np.ndarray:
    """Which new keys fit, taking whole groups in first-seen order while their sizes fit ``room``."""
    _, first, inv, counts = np.unique(group, return_index=True, return_inverse=True, return_counts=True)
    order = np.argsort(first, kind="stable")
    fits = np.empty(order.size, dtype=bool)
    fits[order] = np.cumsum(counts[order]) <= room
    return fits[inv.ravel()]


def _same_buffers(a: pa.Array, b: pa.Array) -> bool:
    """Same length, offset and buffers: the same dictionary object reused by a collector."""
    if len(a) != len(b) or a.offset != b.offset:
        return False
    return [x.address if x else 0 for x in a.buffers()] == [x.address if x else 0 for x in b.buffers()]


class _PortCache:
    """What every :class:`PortIndexer` of one fabric shares: the last dictionary's mapping and
    the last port column's indices, so the detectors of a poll, which all read the rates
    stage's one ``port`` column, pay for one lookup and one gather between them."""

    def __init__(self) -> None:
        self.dictionary: tuple[pa.Array, np.ndarray] | None = None
        self.column: tuple[pa.Array, np.ndarray] | None = None
        #: Earlier dictionaries, newest last, for an indexer that reads several a poll.
        self.older: list[tuple[pa.Array, np.ndarray]] = []


_SHARED: weakref.WeakKeyDictionary[Fabric, _PortCache] = weakref.WeakKeyDictionary()


def _same_column(a: pa.DictionaryArray, b: pa.DictionaryArray) -> bool:
    return _same_buffers(a.indices, b.indices) and (
        a.dictionary is b.dictionary or _same_buffers(a.dictionary, b.dictionary)
    )


class PortIndexer:
    """Maps a batch's port column to fabric port indices, caching per dictionary.

    Collectors reuse one dictionary every poll, so the hash lookup runs once and each later
    poll costs a ``take``, once per poll for every detector of the fabric. The cached arrays
    are kept alive so their buffers cannot be reused by different ones at the same address;
    the indices returned are read-only, since they are shared.
    """

    def __init__(self, fabric: Fabric, *, slots: int = 1) -> None:
        """``slots`` > 1: a cache of its own holding that many dictionaries, for a stage that
        reads every source's batch of a poll (each with its own dictionary) rather than the
        one joined column the detectors share."""
        self.fabric = fabric
        self.slots = slots
        self._cache = _SHARED.setdefault(fabric, _PortCache()) if slots == 1 else _PortCache()

    def __call__(self, ports: pa.Array | pa.ChunkedArray) -> np.ndarray:
        if isinstance(ports, pa.ChunkedArray):
            ports = ports.combine_chunks()
        if not pa.types.is_dictionary(ports.type):
            return self.fabric.lookup(ports)
        cache = self._cache
        last = cache.column
        d = ports.dictionary
        if last is not None and (last[0] is ports or _same_column(last[0], ports)):
            return last[1]
        known = cache.dictionary
        if known is None or not (known[0] is d or _same_buffers(known[0], d)):
            hit = next((k for k in cache.older if k[0] is d or _same_buffers(k[0], d)), None)
            if self.slots > 1 and known is not None:
                older = [k for k in cache.older if k is not hit]
                older.append(known)
                cache.older = older[-(self.slots - 1) :]
            cache.dictionary = known = hit if hit is not None else (d, self.fabric.lookup(d))
        idx = known[1][ports.indices.to_numpy(zero_copy_only=False)]
        idx.flags.writeable = False
        cache.column = (ports, idx)
        return idx


_LINK_OF_PORT: weakref.WeakKeyDictionary[Fabric, np.ndarray] = weakref.WeakKeyDictionary()


class LinkEntities:
    """Both ends of a link share one entity id (the lower port index): a bad cable is one finding.

    ``place(entity)`` says where a person acts: the host end when there is one (the node to
    drain, the NIC to reseat), else the lower tier, plus the link's label and the other end.
    """

    def __init__(self, fabric: Fabric) -> None:
        self.fabric = fabric
        #: Entity of each port: one read-only int32 array per fabric, shared by its detectors.
        self.of_port = _LINK_OF_PORT.get(fabric)
        if self.of_port is None:
            peer = fabric.peer
            idx = np.arange(fabric.n_ports, dtype=np.int32)
            self.of_port = np.where(peer >= 0, np.minimum(idx, peer), idx).astype(np.int32)
            self.of_port.flags.writeable = False
            _LINK_OF_PORT[fabric] = self.of_port

    def ends(self, entity: int) -> list[int]:
        """The link's ports, its host end first (:meth:`Fabric.host_end`), else the entity."""
        f = self.fabric
        main = f.host_end(entity)
        main = entity if main < 0 else main
        peer = int(f.peer[main])
        return [main] + ([peer] if peer >= 0 else [])

    def place(self, entity: int) -> dict[str, str | None]:
        f = self.fabric
        ends = self.ends(entity)
        main = ends[0]
        return {
            "entity": f.link_label(main) or f.keys[main],
            "node": f.node_of(main),
            "port": f.keys[main],
            "link": f.link_label(main),
            "peer_port": f.keys[ends[1]] if len(ends) > 1 else None,
        }


@runtime_checkable
class Resumable(Protocol):
    """A detector that takes back the open incidents of its kinds after a restart.

    Its state starts empty, so without this it would never close what it opened before: a
    repaired link would keep its host drained. ``resume`` marks each incident's entity open, as
    if it had just opened it; the entity's next healthy polls close it, as always, and an
    entity no source reports again stays open (unknown is not healthy). It returns the
    incidents it took.
    """

    kinds: ClassVar[tuple[str, ...]]

    def resume(self, incidents: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]: ...


def open_ports(
    fabric: Fabric, incidents: Sequence[Mapping[str, Any]], kinds: Iterable[str]
) -> tuple[np.ndarray, list[Mapping[str, Any]]]:
    """The port index of each incident of ``kinds`` about a port the model knows (a cable's
    incident names its host end, or its lower port: :meth:`LinkEntities.place`), and those
    incidents, in order."""
    wanted = set(kinds)
    index = fabric.key_index
    taken = [i for i in incidents if i.get("kind") in wanted and index.get(str(i.get("port")), -1) >= 0]
    return np.array([index[str(i["port"])] for i in taken], dtype=np.int64), taken


def resume_open(hyst: Hysteresis, entities: np.ndarray) -> None:
    """Mark ``entities`` open with no healthy poll yet: ``close_after`` healthy polls close them."""
    if entities.size:
        hyst.grow(int(entities.max()) + 1)
        hyst.is_open[entities] = True
        hyst.good_run[entities] = 0


def port_place(fabric: Fabric, port: int) -> dict[str, str | None]:
    """Where a finding about one port of the model is: the port itself (its key the entity),
    its node and its cable. :meth:`LinkEntities.place` is the same for a cable's finding."""
    key = fabric.keys[port]
    return {"entity": key, "node": fabric.node_of(port), "port": key, "link": fabric.link_label(port)}


def port_finding(
    detector: Detector,
    kind: str,
    place: Mapping[str, str | None],
    status: Status,
    now: datetime,
    severity: Severity,
    summary: str,
    score: float,
    evidence: dict[str, Any],
) -> Finding:
    """A finding about a port, a cable or a switch at ``place`` (:func:`port_place`,
    :meth:`LinkEntities.place`, or ``entity``/``node``/``port``/``link`` given by hand)."""
    return Finding(
        kind=kind,
        entity=str(place["entity"]),
        status=status,
        time=now,
        severity=severity,
        summary=summary,
        detector=f"{detector.name}/{detector.version}",
        node=place.get("node"),
        port=place.get("port"),
        link=place.get("link"),
        score=score,
        evidence=evidence,
    )


@lru_cache(maxsize=4)
def index_range(n: int) -> np.ndarray:
    """``arange(n)``, read-only and shared (what a full poll's port indices are)."""
    out = np.arange(n, dtype=np.int64)
    out.flags.writeable = False
    return out


def judged_rows(
    idx: np.ndarray, ok: np.ndarray, n_ports: int
) -> tuple[np.ndarray | slice, np.ndarray | slice]:
    """``(p, rows)``: where a poll's judged rows sit in per-port state, and which batch rows.

    Normally ``p = idx[ok]`` and ``rows = ok``. When the batch is every port of the fabric in
    index order and every row is judged (the usual full poll of one collector), both are
    ``slice(None)``: state updates become in-place views, not gathers and scatters.
    """
    if idx.size == n_ports and bool(ok.all()) and np.array_equal(idx, index_range(n_ports)):
        return slice(None), slice(None)
    return idx[ok], ok


def decay_add(state: np.ndarray, p: np.ndarray | slice, decay: np.ndarray, *values: np.ndarray) -> None:
    """Exponentially weighted sums: ``state[i, p] = state[i, p] * decay + values[i]``, in place.

    Both ways take the same steps in the state's own type (multiply, round; add, round), so a
    float32 state reads the same whatever order the rows came in."""
    if isinstance(p, slice):
        for i, v in enumerate(values):
            row = state[i, p]
            row *= decay
            row += v
    else:
        part = state[: len(values), p]  # a copy: fancy indexing
        part *= decay
        part += np.vstack(values)
        state[: len(values), p] = part


def column(batch: pa.RecordBatch, name: str, fill: float = np.nan) -> np.ndarray:
    """A numeric column as float64 numpy, nulls (and absent columns) as ``fill``."""
    if name not in batch.schema.names:
        return np.full(batch.num_rows, fill)
    arr = batch.column(name)
    if not pa.types.is_floating(arr.type):
        arr = arr.cast(pa.float64())  # unsigned columns cannot hold a negative fill value
    if arr.null_count and not np.isnan(fill):
        arr = arr.fill_null(fill)
    return arr.to_numpy(zero_copy_only=False).astype(np.float64, copy=False)
