"""Prometheus text exposition that stays fast for per-port and per-rank series.

``prometheus_client.generate_latest`` formats every sample from a label dict (sort, escape,
join): about 12 µs a line, 1.7 s for an 8,192-port fabric's 140,000 series. Families with a
series per port, rank, leaf, rail or scrape target are :class:`ArrayFamily` instead: numpy
values plus the rows' label strings, rendered once (per fabric, per poll for ranks, per target
set) and shared by every family, joined into lines by Arrow's string kernels, which run
without the interpreter lock (tens of nanoseconds a line). Every other family goes through
``generate_latest`` unchanged, and an ``ArrayFamily`` still materializes ordinary samples for
any other consumer of the registry. :func:`aiter_render` runs all of it on a thread of its own
for the HTTP server, which only sends the pieces.

A line of an array family puts the part's extra labels first (``x{source="ufm",node="…",
port="…"} 1``): label order means nothing to Prometheus, and it lets every part of every
family share one array of row labels, so a line costs Arrow a single two-string join.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
import threading
from collections.abc import AsyncIterator, Collection, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import Executor, ThreadPoolExecutor

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from prometheus_client import generate_latest
from prometheus_client.core import Metric
from prometheus_client.samples import Sample

from graywire.collectors.model import Fabric

#: What :func:`render` writes: the classic text format every Prometheus 2.x and 3.x scrapes.
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

#: The extra (name, value) labels one part of a family adds to every row's own labels.
Extra = tuple[tuple[str, str], ...]

#: A piece of the exposition: a view of an Arrow buffer, or bytes written here.
Piece = bytes | memoryview

#: Most bytes :func:`aiter_render` hands the server at once: the event loop copies each piece
#: into the connection's buffers, so a bounded piece is a bounded pause of the loop.
PIECE_BYTES = 1 << 20

#: How much nicer the render thread is than the process: under CPU contention a poll gets the
#: core first (CFS gives a thread 10 steps nicer about a tenth of the other's share).
RENDER_NICER_BY = 10

#: Largest magnitude written as an integer: every integral float below it fits an int64.
_INT_LIMIT = float(2**63)


def escape_label_value(v: str) -> str:
    return v.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")


def _escaped(values: pa.Array) -> pa.Array:
    """:func:`escape_label_value` over a whole string array (backslashes first, as there)."""
    for old, new in (("\\", r"\\"), ("\n", r"\n"), ('"', r"\"")):
        values = pc.replace_substring(values, old, new)
    return values


def _text(s: str) -> pa.Scalar:
    return pa.scalar(s, type=pa.large_string())


class RowLabels:
    """The labels of every row of some families (a fabric port, a rank's channel, a leaf),
    rendered once, in column order, as the end of each line up to its value: ``a="…",b="…"} ``.

    An empty value of a column named in ``optional`` is left out; elsewhere it is written, as
    ``generate_latest`` does. The first column is never optional, so no row's labels are empty.
    """

    def __init__(self, columns: Mapping[str, pa.Array], optional: Collection[str] = ()) -> None:
        self.columns = {name: pc.cast(col, pa.string()).fill_null("") for name, col in columns.items()}
        self.optional = frozenset(optional)
        self.names: tuple[str, ...] = tuple(self.columns)
        if not self.names or self.names[0] in self.optional:
            raise ValueError("the first label column must always be written")
        fragments = []
        for name, col in self.columns.items():
            fragment = pc.binary_join_element_wise(f'{name}="', _escaped(col), '"', "")
            if name in self.optional:  # null: skipped by the join below, comma and all
                fragment = pc.if_else(pc.equal(col, ""), pa.scalar(None, pa.string()), fragment)
            fragments.append(fragment)
        joined = pc.binary_join_element_wise(*fragments, ",", null_handling="skip")
        closed = pc.binary_join_element_wise(joined, "} ", "")
        self.strings: pa.Array = pc.cast(closed, pa.large_string())

    def __len__(self) -> int:
        return len(self.strings)

    def values(self, i: int) -> dict[str, str]:
        """Row ``i``'s labels as a dict (what ``generate_latest`` is given)."""
        out = {}
        for name, col in self.columns.items():
            v = col[i].as_py()
            if v or name not in self.optional:
                out[name] = v
        return out


class PortLabels(RowLabels):
    """The labels of every fabric port: ``node``, ``port``, then any per-port ``columns``
    (their empty values left out), built once per fabric."""

    def __init__(self, fabric: Fabric, columns: Mapping[str, Sequence[str] | pa.Array] | None = None) -> None:
        self.fabric = fabric
        extra = {name: pa.array(v, type=pa.string()) for name, v in (columns or {}).items()}
        node = pa.array(fabric.node_names, type=pa.string()).take(pa.array(fabric.node_of_port))
        super().__init__({"node": node, "port": fabric.key_array, **extra}, optional=extra)


def value_text(values: np.ndarray) -> pa.Array:
    """Sample values (no NaN) as the text format spells them, one string each.

    All integral (counters, counts, states): as integers, exact, and twice as fast for Arrow
    to write. Otherwise the shortest string that reads back as the same float (``4e+12``,
    ``1.5e-7``, as Go's ``strconv.FormatFloat(v, 'g', -1, 64)`` does), and ``+Inf``/``-Inf``.
    """
    with np.errstate(invalid="ignore"):
        integral = bool(((np.trunc(values) == values) & (np.abs(values) < _INT_LIMIT)).all())
    if integral:
        return pc.cast(pa.array(values.astype(np.int64)), pa.large_string())
    text = pc.cast(pa.array(values), pa.large_string())
    inf = np.isinf(values)
    if inf.any():
        text = pc.if_else(pa.array(inf), pa.array(np.where(values > 0, "+Inf", "-Inf")), text)
    return text


def _characters(lines: pa.Array) -> memoryview:
    """The characters of a string array end to end: a view of its data buffer, not a copy."""
    offsets = np.frombuffer(lines.buffers()[1], dtype=np.int64, count=lines.offset + len(lines) + 1)
    start, stop = int(offsets[lines.offset]), int(offsets[-1])
    return memoryview(lines.buffers()[2])[start:stop]


class ArrayFamily(Metric):
    """A gauge or counter family whose samples are numpy arrays over rows with :class:`RowLabels`.

    Each part holds the extra labels of one variant and a value per row, NaN where the row has
    no sample (unknown is absent, never 0). A counter's samples are named ``<name>_total``.
    """

    def __init__(
        self,
        name: str,
        documentation: str,
        typ: str,
        labels: RowLabels,
        parts: Iterable[tuple[Extra, np.ndarray]] = (),
    ) -> None:
        super().__init__(name, documentation, typ)
        self.labels = labels
        self.parts: list[tuple[Extra, str, np.ndarray]] = []
        for extra, values in parts:
            self.add(extra, values)

    @property
    def sample_name(self) -> str:
        return f"{self.name}_total" if self.type == "counter" else self.name

    def add(self, extra: Extra, values: np.ndarray) -> None:
        """A part: ``extra`` labels on every row's, and a value per row (NaN: no sample)."""
        labels = "".join(f'{k}="{escape_label_value(v)}",' for k, v in extra)
        self.parts.append((extra, f"{self.sample_name}{{{labels}", np.asarray(values, dtype=np.float64)))

    @property  # type: ignore[override]
    def samples(self) -> list[Sample]:
        name = self.sample_name
        out = []
        for extra, _, values in self.parts:
            idx = np.flatnonzero(~np.isnan(values))
            for i, v in zip(idx.tolist(), values[idx].tolist(), strict=True):
                out.append(Sample(name, {**self.labels.values(i), **dict(extra)}, v))
        return out

    @samples.setter
    def samples(self, value: list[Sample]) -> None:
        """Metric.__init__ assigns an empty list; the arrays are the samples."""

    def header(self) -> bytes:
        name = self.sample_name  # a counter's HELP and TYPE name it with _total, as generate_latest does
        doc = self.documentation.replace("\\", r"\\").replace("\n", r"\n")
        return f"# HELP {name} {doc}\n# TYPE {name} {self.type}\n".encode()

    def chunks(self) -> Iterator[Piece]:
        """The header, then every part's sample lines (``name{extra,labels} value``).

        Each row Arrow joins is one line's value, the newline and the next line up to its
        value (the name, the part's extra labels, the row's labels): two strings and one
        separator, its cheapest join. The first line's start and the last line's end come
        apart, and the joined lines are a view of Arrow's buffer, not a copy.
        """
        yield self.header()
        for _, start, values in self.parts:
            idx = np.flatnonzero(~np.isnan(values))
            if not idx.size:
                continue
            labels = self.labels.strings
            if idx.size < len(labels):
                labels = labels.take(pa.array(idx))
                values = values[idx]
            text = value_text(values)
            yield (start + labels[0].as_py()).encode()
            if len(text) > 1:
                lines = pc.binary_join_element_wise(text[:-1], labels[1:], _text(f"\n{start}"))
                yield _characters(lines)
            yield (text[-1].as_py() + "\n").encode()


class _One:
    def __init__(self, metrics: list[Metric]) -> None:
        self.metrics = metrics

    def collect(self) -> list[Metric]:
        return self.metrics


def iter_render(collector: object) -> Iterator[Piece]:
    """The text exposition (format 0.0.4) of everything ``collector.collect()`` yields, in
    pieces (an array family's parts are views of Arrow buffers), so a caller can stream it to a
    slow client (collectors must not hold locks across it).
    """
    pending: list[Metric] = []

    def flush() -> bytes:
        out = generate_latest(_One(list(pending)))  # type: ignore[arg-type]
        pending.clear()
        return out

    for m in collector.collect():  # type: ignore[attr-defined]
        if isinstance(m, ArrayFamily):
            if pending:
                yield flush()
            yield from m.chunks()
        else:
            pending.append(m)
    if pending:
        yield flush()


def render(collector: object) -> bytes:
    """The whole text exposition of ``collector`` (see :func:`iter_render`)."""
    return b"".join(iter_render(collector))


def _lower_priority() -> None:
    """Make the calling thread nicer than the rest of the process (Linux: a thread is a task
    with its own niceness; elsewhere the call would name a process, so it is not made)."""
    if sys.platform.startswith("linux"):
        tid = threading.get_native_id()
        with contextlib.suppress(OSError):  # a sandbox may refuse: the render keeps its share
            nicer = min(19, os.getpriority(os.PRIO_PROCESS, tid) + RENDER_NICER_BY)
            os.setpriority(os.PRIO_PROCESS, tid, nicer)


def render_executor() -> ThreadPoolExecutor:
    """The one thread that renders every scrape, at a lower CPU priority than the rest of the
    process: on a busy machine a scrape waits for the core, not the poll. Rendering holds the
    interpreter lock only between Arrow calls, so a descheduled render rarely keeps anyone
    waiting for it."""
    return ThreadPoolExecutor(1, thread_name_prefix="graywire-metrics", initializer=_lower_priority)


async def aiter_render(collector: object, executor: Executor | None = None) -> AsyncIterator[Piece]:
    """:func:`iter_render` for an asyncio server: collecting and rendering run on ``executor``
    (a thread; Arrow and numpy release the interpreter lock while they work) about
    :data:`PIECE_BYTES` at a time, the next batch while the loop sends this one, and the loop
    only slices and sends pieces of at most that size. A slow client holds two batches at most.
    """
    pieces = iter_render(collector)

    def batch() -> list[Piece]:
        out: list[Piece] = []
        size = 0
        for piece in pieces:
            out.append(piece)
            size += len(piece)
            if size >= PIECE_BYTES:
                break
        return out

    loop = asyncio.get_running_loop()
    ahead = loop.run_in_executor(executor, batch)
    try:
        while out := await ahead:
            ahead = loop.run_in_executor(executor, batch)
            for piece in out:
                view = memoryview(piece)
                for i in range(0, len(view), PIECE_BYTES):
                    yield view[i : i + PIECE_BYTES]
    finally:
        ahead.cancel()  # a client gone: the batch under way is dropped when done
