"""Merge the ``port_sample`` batches of one poll that describe the same ports from different endpoints.

UFM splits what a port is between two endpoints: REST says its state, speed and width, the
telemetry endpoint its counters. Fed to the rates stage as two batches, the second one at the
same time would see an interval of 0 and the first would wipe the counter baselines (its
counters are all null), so every rate would come out null. One merged row per port keeps both.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from graywire.collectors.schemas import COUNTER_BITS_KEY, PORT_SAMPLE, SATURATING_KEY, make_batch, record_kind


def merge_port_samples(batches: Sequence[pa.RecordBatch]) -> pa.RecordBatch:
    """One ``port_sample`` row per port from several batches of one poll.

    For every column the first batch (in the order given) with a non-null value for the port
    wins; ``time`` is the latest of the batches. Counter widths declared by a batch are kept for
    the columns that batch supplied. The port dictionary of the first batch is reused when it
    holds every port (so downstream dictionary caches stay warm).
    """
    if not batches:
        raise ValueError("nothing to merge")
    for b in batches:
        if record_kind(b.schema) != "port_sample":
            raise ValueError(f"merge_port_samples takes port_sample batches, not {record_kind(b.schema)}")
    if len(batches) == 1:
        return batches[0]
    ports = [pc.cast(b.column("port"), pa.string()) for b in batches]
    uniq = pc.unique(pa.concat_arrays(ports))
    n = len(uniq)
    pos = [pc.index_in(p, value_set=uniq).to_numpy() for p in ports]
    offsets = np.cumsum([0] + [b.num_rows for b in batches])
    cols: dict[str, pa.Array] = {}
    supplied: dict[str, int] = {}
    for field in PORT_SAMPLE:
        name = field.name
        if name in ("time", "port"):
            continue
        src = np.full(n, -1, np.int64)
        for k, b in enumerate(batches):
            arr = b.column(name)
            if arr.null_count == len(arr):
                continue
            valid = arr.is_valid().to_numpy(zero_copy_only=False)
            rows = np.flatnonzero(valid)
            free = src[pos[k][rows]] < 0
            src[pos[k][rows[free]]] = offsets[k] + rows[free]
            supplied.setdefault(name, k)
        if (src < 0).all():
            continue
        whole = pa.concat_arrays([b.column(name).cast(field.type) for b in batches])
        cols[name] = whole.take(pa.array(src, mask=src < 0))
    latest = max(pc.max(b.column("time")).value for b in batches)
    cols["time"] = pa.array(np.full(n, latest, dtype="datetime64[us]"), type=PORT_SAMPLE.field("time").type)
    first = batches[0].column("port")
    idx = pc.index_in(uniq, value_set=first.dictionary)
    if idx.null_count == 0:
        cols["port"] = pa.DictionaryArray.from_arrays(idx.cast(pa.int32()), first.dictionary)
    else:
        cols["port"] = pa.DictionaryArray.from_arrays(pa.array(np.arange(n, dtype=np.int32)), uniq)
    bits: dict[str, int] = {}
    sat: list[str] = []
    for k, b in enumerate(batches):
        meta = b.schema.metadata or {}
        for c, w in json.loads(meta.get(COUNTER_BITS_KEY, b"{}")).items():
            if supplied.get(c) == k:
                bits[c] = w
        sat += [c for c in json.loads(meta.get(SATURATING_KEY, b"[]")) if supplied.get(c) == k]
    schema = PORT_SAMPLE
    if bits:
        from graywire.collectors.schemas import with_counter_widths

        schema = with_counter_widths(PORT_SAMPLE, bits, tuple(sat))
    return make_batch(schema, n, cols)
