"""The streaming pipeline: counters -> rates -> detectors -> findings, one batch at a time.

I/O free on purpose: the service feeds it live batches, ``graywire replay`` feeds it an
archive or a simulation, and both get the same findings from the same data.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Protocol, runtime_checkable

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from graywire.collectors.model import Fabric
from graywire.collectors.schemas import TS, RecordKind, record_kind
from graywire.detectors.base import PORT_RATES, Detector, Resumable
from graywire.detectors.ber import BerDetector
from graywire.detectors.ber_thresholds import ThresholdTable
from graywire.detectors.checkpoint import CheckpointTrafficDetector
from graywire.detectors.congestion import EcnHotspotDetector, PfcStormDetector, XmitWaitDetector
from graywire.detectors.findings import Finding
from graywire.detectors.link_flap import LinkFlapDetector
from graywire.detectors.link_state import LinkDowngradeDetector
from graywire.detectors.multivariate import MultivariateOutlier
from graywire.detectors.nccl_bootstrap import NcclBootstrapDetector
from graywire.detectors.nccl_channel import NcclChannelOutlier
from graywire.detectors.nccl_fault import NcclFaultDetector
from graywire.detectors.nccl_peer import NcclHopDetector
from graywire.detectors.nccl_step import NcclStepTime
from graywire.detectors.nccl_straggler import NcclStraggler
from graywire.detectors.nccl_topology import NcclTopologyDetector
from graywire.detectors.nccl_transport import NcclTransportDetector
from graywire.detectors.nic_affinity import NicAffinityDetector
from graywire.detectors.port_state import PortStateBook, has_counters
from graywire.detectors.rates import CounterRates
from graywire.detectors.saturation import CounterSaturationDetector
from graywire.detectors.topology import TopologyDetector
from graywire.detectors.tuning import Tuning, config
from graywire.detectors.uplink_balance import JobPulses, UplinkBalanceDetector

#: The records that reach their detectors as they came, in the order a poll routes them (after
#: the port rates, which the rates stage makes of ``port_sample``; capabilities configure the
#: detectors instead, and cables are dated first).
ROUTED: tuple[RecordKind, ...] = (
    RecordKind.NCCL_TIMING,
    RecordKind.NCCL_TRANSPORT,
    RecordKind.NCCL_PROXY,
    RecordKind.LINK,
    RecordKind.NCCL_RANK_STATE,
    RecordKind.GPU_NIC_PATH,
    RecordKind.NCCL_INIT,
    RecordKind.NCCL_LAYOUT,
)


def default_detectors(
    fabric: Fabric,
    ber_table: ThresholdTable | None = None,
    multivariate: bool = False,
    tuning: Tuning | None = None,
) -> list[Detector]:
    """Every detector with its documented defaults (docs/detectors.md), or the settings
    ``tuning`` gives some of them (detectors/tuning.py: the service's ``detectors:`` key).

    The IsolationForest outlier detector is opt-in: a fault already present while it trains
    becomes part of a port's normal, and the port is flagged once it is repaired.
    """

    def cfg(name: str) -> Any:
        return config(name, tuning)

    detectors: list[Detector] = [
        LinkDowngradeDetector(fabric, cfg("link_downgrade")),
        LinkFlapDetector(fabric, cfg("link_flap")),
        BerDetector(fabric, ber_table, cfg("ber")),
        PfcStormDetector(fabric, cfg("pfc_storm")),
        EcnHotspotDetector(fabric, cfg("ecn_hotspot")),
        XmitWaitDetector(fabric, cfg("xmit_wait_hotspot")),
        CounterSaturationDetector(fabric, cfg("counter_saturation")),
        *nccl_timing_detectors(fabric, tuning),
        NcclTransportDetector(cfg("nccl_transport")),
        NcclHopDetector(fabric, cfg("nccl_hop")),
        TopologyDetector(fabric, cfg("topology")),
        NcclFaultDetector(fabric, cfg("nccl_fault")),  # the fault path: RAS, Flight Recorder, watchdog
        NicAffinityDetector(fabric, cfg("nic_affinity")),
        NcclBootstrapDetector(cfg("nccl_bootstrap")),
        NcclTopologyDetector(cfg("nccl_topology")),
    ]
    # Checkpoint traffic and multipath health (docs/phases); the uplink detector reads the jobs'
    # pulses from the NCCL timings.
    pulses = JobPulses(fabric)
    detectors += [
        CheckpointTrafficDetector(fabric, cfg("checkpoint")),
        pulses,
        UplinkBalanceDetector(fabric, pulses, cfg("uplink_balance")),
    ]
    if multivariate:
        detectors.append(MultivariateOutlier(fabric, cfg("multivariate_outlier")))
    return detectors


def nccl_timing_detectors(fabric: Fabric, tuning: Tuning | None = None) -> list[Detector]:
    """The detectors of ``nccl_timing`` rows: also what judges timings a job pushed, apart
    from the ones graywire collected itself (pushed data is the least trusted input)."""
    return [
        NcclChannelOutlier(fabric, config("nccl_channel_outlier", tuning)),
        NcclStraggler(config("nccl_straggler", tuning)),
        NcclStepTime(config("nccl_step_time", tuning)),
    ]


@runtime_checkable
class CapabilityConsumer(Protocol):
    """A detector that also reads ``port_capability`` views (what each port is enabled to run
    at), beside the record it ``consumes``. The pipeline hands it every view before the poll's
    other records, so a new expectation already applies to the samples that came with it."""

    def set_capabilities(self, caps: pa.RecordBatch) -> None: ...


@dataclass
class StageStats:
    batches: int = 0
    rows: int = 0
    seconds: float = 0.0
    findings: int = 0
    #: Rows a detector left out because its state was full (None: it has no such bound).
    over_capacity: int | None = None


@dataclass
class Pipeline:
    fabric: Fabric
    detectors: Sequence[Detector] = ()
    rates: CounterRates = field(default_factory=CounterRates)
    #: One rates stage per source after the first: UFM and a host agent may both report a
    #: port, and their counters (cleared at different times) must not be differenced together.
    other_rates: dict[str, CounterRates] = field(default_factory=dict)
    _first_source: str | None = field(default=None, init=False, repr=False)
    stats: dict[str, StageStats] = field(default_factory=dict)
    #: The dictionaries of the last joined view per (record, column): reused when unchanged.
    _dicts: dict[tuple[str, str], pa.Array] = field(default_factory=dict, repr=False)
    #: The latest poll time seen: a ``link`` view carries none and is dated by its poll.
    _poll_time: datetime | None = field(default=None, init=False, repr=False)
    #: Each modelled port's last known state, speed and width, whichever source said it.
    port_state: PortStateBook | None = None

    def __post_init__(self) -> None:
        if not self.detectors:
            self.detectors = default_detectors(self.fabric)
        if self.port_state is None:
            self.port_state = PortStateBook(self.fabric)

    @property
    def kinds(self) -> list[str]:
        """Every finding kind the configured detectors can emit (what scoring may expect)."""
        return sorted({k for d in self.detectors for k in d.kinds})

    def resume(self, incidents: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
        """Hand the incidents a restart left open back to the detectors that own their kinds
        (:class:`~graywire.detectors.base.Resumable`); returns those no detector took."""
        taken: set[int] = set()
        for det in self.detectors:
            if isinstance(det, Resumable):
                taken.update(id(i) for i in det.resume(incidents))
        return [i for i in incidents if id(i) not in taken]

    def _timed(self, name: str, rows: int, t0: float, found: int = 0) -> None:
        s = self.stats.setdefault(name, StageStats())
        s.batches += 1
        s.rows += rows
        s.seconds += time.perf_counter() - t0
        s.findings += found

    def _rates_for(self, batch: pa.RecordBatch) -> CounterRates:
        source = batch.column("source")[0].as_py() if batch.num_rows else None
        if self._first_source is None:
            self._first_source = source
        if source == self._first_source or source is None:
            return self.rates
        return self.other_rates.setdefault(source, CounterRates())

    def process(self, batch: pa.RecordBatch) -> list[Finding]:
        """Feed one poll of one record; returns the findings it opened or closed."""
        return self.process_poll([batch]).findings

    def process_poll(self, batches: Sequence[pa.RecordBatch]) -> PollResult:
        """Feed everything one poll brought, from every source, as one view of the fabric.

        Each source's port samples go through that source's rates stage; the detectors then
        see the rates of all sources in one batch, so a link judged by a host agent on one
        end and SNMP on the other is one verdict, and peers are the whole fabric, not one
        collector's share of it. A malformed batch is dropped with its reason; the rest go on.
        """
        result = PollResult()
        rates: list[pa.RecordBatch] = []
        parts_of: dict[str, list[pa.RecordBatch]] = {kind: [] for kind in RecordKind}
        for batch in batches:
            kind = record_kind(batch.schema)
            if kind != RecordKind.LINK and batch.num_rows and "time" in batch.schema.names:
                t = batch.column("time")[0].as_py()
                if t is not None and (self._poll_time is None or t > self._poll_time):
                    self._poll_time = t
            if kind in parts_of:
                parts_of[kind].append(batch)
            else:
                *others, last = RecordKind
                takes = f"{', '.join(others)} or {last}"
                result.dropped.append((kind, batch.num_rows, f"the pipeline takes {takes}, not {kind}"))
        for parts in self._joined_sources(parts_of[RecordKind.PORT_SAMPLE], result):
            rates += parts
        # One view at a time, in the order the sources sent them (a port a view leaves out keeps
        # what an earlier one said).
        for view in parts_of[RecordKind.PORT_CAPABILITY]:
            for det in self.detectors:
                if isinstance(det, CapabilityConsumer):
                    det.set_capabilities(view)
        links = parts_of[RecordKind.LINK]
        parts_of[RecordKind.LINK] = [self._dated_links(links)] if links else []
        routes = ((PORT_RATES, rates), *((kind, parts_of[kind]) for kind in ROUTED))
        for consumes, parts in routes:
            if not parts:
                continue
            inputs = self._stable_dictionaries(consumes, _one_batch(parts)) if len(parts) > 1 else parts[0]
            if consumes == PORT_RATES:
                result.port_rates = inputs
            for det in self.detectors:
                if det.consumes != consumes:
                    continue
                t0 = time.perf_counter()
                found = det.observe(inputs)
                self._timed(det.name, inputs.num_rows, t0, len(found))
                if (full := getattr(det, "over_capacity", None)) is not None:
                    self.stats[det.name].over_capacity = int(full)
                result.findings.extend(found)
        if len(batches) == 1 and result.dropped:
            raise ValueError(result.dropped[0][2])
        return result

    def _joined_sources(
        self, batches: list[pa.RecordBatch], result: PollResult
    ) -> list[list[pa.RecordBatch]]:
        """Each source's port samples of the poll as one batch (by source, counter widths and
        whether it carries counters), joined across sources per port (UFM REST's state and
        speed into UFM Telemetry's rows: :mod:`graywire.detectors.port_state`), each then
        through its source's rates stage. Returns the rates, a list per group."""
        groups: dict[tuple[str | None, tuple[tuple[bytes, bytes], ...], bool], list[pa.RecordBatch]] = {}
        for batch in batches:
            # By source and counter widths (the schema's metadata; hashing whole schemas costs
            # more than the stage saves).
            source = batch.column("source")[0].as_py() if batch.num_rows else None
            widths = tuple(sorted((batch.schema.metadata or {}).items()))
            groups.setdefault((source, widths, has_counters(batch)), []).append(batch)
        keys = list(groups)
        whole = [
            self._stable_dictionaries(f"port_sample|{k[0]}|{k[2]}", _one_batch(groups[k]))
            if len(groups[k]) > 1
            else groups[k][0]
            for k in keys
        ]
        assert self.port_state is not None
        joined = self.port_state.join(whole)
        out = []
        for key, batch in zip(keys, joined, strict=True):
            if batch is not None:
                out.append(self._rates_of(groups[key], batch, result))
        return out

    def _rates_of(
        self, parts: list[pa.RecordBatch], joined: pa.RecordBatch, result: PollResult
    ) -> list[pa.RecordBatch]:
        """One source's port samples of the poll (one schema) through its rates stage, as one
        batch: thousands of host agents are thousands of small batches a poll, and the stage's
        cost is mostly per batch (2 ms each for eight ports). Rows keep their own times. Should
        the joined batch be refused (a port twice), each batch goes alone, and only the bad one
        is dropped."""
        stage = self._rates_for(parts[0])
        t0 = time.perf_counter()
        try:
            out = [stage.observe(joined)]
        except ValueError as e:
            if len(parts) == 1:
                result.dropped.append((RecordKind.PORT_SAMPLE, joined.num_rows, str(e)))
                return []
        else:
            self._timed("rates", joined.num_rows, t0)
            return out
        assert self.port_state is not None
        out = []
        for batch in parts:
            t0 = time.perf_counter()
            try:
                out.append(stage.observe(self.port_state.fill(batch)))
            except ValueError as e:
                result.dropped.append((RecordKind.PORT_SAMPLE, batch.num_rows, str(e)))
                continue
            self._timed("rates", batch.num_rows, t0)
        return out

    def _dated_links(self, parts: list[pa.RecordBatch]) -> pa.RecordBatch:
        """Every source's ``link`` view of the poll as one batch, with the poll's ``time``.

        A link record has no time of its own; it is dated by the poll's other records (the
        latest seen so far), so findings about cables sit on the same clock as the rest.
        """
        table = pa.Table.from_batches([p.select(["a_port", "b_port", "source"]) for p in parts])
        table = table.combine_chunks()
        n = table.num_rows
        when = self._poll_time
        if when is None:
            return table.to_batches()[0] if n else pa.RecordBatch.from_pylist([], schema=table.schema)
        stamp = pa.array(np.full(n, np.datetime64(when.astimezone(UTC).replace(tzinfo=None), "us")), TS)
        table = table.append_column("time", stamp)
        return table.to_batches()[0] if n else pa.RecordBatch.from_pylist([], schema=table.schema)

    def _stable_dictionaries(self, consumes: str, batch: pa.RecordBatch) -> pa.RecordBatch:
        """Give a joined view last poll's dictionary objects when their contents are unchanged.

        Joining sources unifies their port dictionaries into a new array every poll; the
        detectors' port indexers cache by dictionary identity, so without this every
        multi-source poll would hash every port key again. Comparing contents is a memcmp.
        """
        columns = list(batch.columns)
        changed = False
        for i, (name, col) in enumerate(zip(batch.schema.names, columns, strict=True)):
            if not pa.types.is_dictionary(col.type):
                continue
            key = (consumes, name)
            last = self._dicts.get(key)
            if last is not None and last is not col.dictionary and last.equals(col.dictionary):
                columns[i] = pa.DictionaryArray.from_arrays(col.indices, last)
                changed = True
            else:
                self._dicts[key] = col.dictionary
        return pa.RecordBatch.from_arrays(columns, schema=batch.schema) if changed else batch


@dataclass
class PollResult:
    findings: list[Finding] = field(default_factory=list)
    #: (record, rows, reason) of batches left out
    dropped: list[tuple[str, int, str]] = field(default_factory=list)
    #: The poll's port rates, every source in one batch (what the metrics snapshot shows)
    port_rates: pa.RecordBatch | None = None


def _one_batch(parts: list[pa.RecordBatch]) -> pa.RecordBatch:
    """Concatenate same-schema batches; their dictionary columns (ports, sources) come out
    encoded once over the whole. They are joined decoded: unifying one dictionary per part costs
    quadratic time in the parts (51 s for 4,096 host agents' batches, 0.4 s this way)."""
    if len(parts) == 1:
        return parts[0]
    schema = parts[0].schema
    parts = [p if p.schema.equals(schema) else p.cast(schema) for p in parts]
    table = pa.Table.from_batches(parts, schema=schema)
    coded = [(i, f) for i, f in enumerate(schema) if pa.types.is_dictionary(f.type)]
    for i, f in coded:
        plain = pa.field(f.name, f.type.value_type, f.nullable)
        table = table.set_column(i, plain, table.column(i).cast(f.type.value_type))
    table = table.combine_chunks()
    for i, f in coded:
        table = table.set_column(i, f, pc.dictionary_encode(table.column(i)).cast(f.type))
    batches = table.to_batches()
    return (
        batches[0] if len(batches) == 1 else pa.Table.from_batches(batches).combine_chunks().to_batches()[0]
    )
