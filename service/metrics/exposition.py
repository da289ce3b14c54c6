"""Prometheus text exposition that stays fast for per-port series.

``prometheus_client.generate_latest`` formats every sample from a label dict (sort, escape,
join): about 12 µs a line, 1.7 s for an 8,192-port fabric's 140,000 series. Per-port families
here are :class:`PortFamily`: numpy values plus the ports' label strings, rendered once per
fabric and shared by every family, joined into lines by Arrow's string kernels (no Python per
sample: about 0.1 µs a line). Every other family goes through ``generate_latest`` unchanged,
and a ``PortFamily`` still materializes ordinary samples for any other consumer of the registry.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from prometheus_client import generate_latest
from prometheus_client.core import Metric
from prometheus_client.samples import Sample

from graywire.collectors.model import Fabric

#: What :func:`render` writes: the classic text format every Prometheus 2.x and 3.x scrapes.
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

#: The extra (name, value) labels one part of a family adds to every port's own labels.
Extra = tuple[tuple[str, str], ...]


def escape_label_value(v: str) -> str:
    return v.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")


class PortLabels:
    """The labels of every fabric port (``node``, ``port``, and any per-port ``columns``),
    rendered once per fabric as ``node="…",port="…"``; an empty value is left out.

    Families add their own extra labels (``direction``, ``source``…) after these, so one
    array of strings serves every family and variant.
    """

    def __init__(self, fabric: Fabric, columns: Mapping[str, Sequence[str]] | None = None) -> None:
        self.fabric = fabric
        self.columns = dict(columns or {})
        self.names: tuple[str, ...] = ("node", "port", *self.columns)
        nodes = [escape_label_value(n) for n in fabric.node_names]
        rows = [
            f'node="{nodes[n]}",port="{escape_label_value(k)}"'
            for k, n in zip(fabric.keys, fabric.node_of_port.tolist(), strict=True)
        ]
        for name, values in self.columns.items():
            rows = [
                r + (f',{name}="{escape_label_value(v)}"' if v else "")
                for r, v in zip(rows, values, strict=True)
            ]
        self.strings = pa.array(rows, type=pa.large_string())

    def values(self, i: int) -> dict[str, str]:
        f = self.fabric
        out = {"node": f.node_names[int(f.node_of_port[i])], "port": f.keys[i]}
        out.update((name, v[i]) for name, v in self.columns.items() if v[i])
        return out


def _text(s: str) -> pa.Scalar:
    return pa.scalar(s, type=pa.large_string())


_NEWLINE, _NOTHING = _text("\n"), _text("")


def _go_floats(values: np.ndarray) -> pa.Array:
    """Finite floats as Arrow prints them (shortest round trip: ``4e+12``, ``1.5e-07``, as Go's
    ``strconv.FormatFloat(v, 'g', -1, 64)`` does); infinities as the format spells them."""
    text = pc.cast(pa.array(values), pa.large_string())
    inf = np.isinf(values)
    if inf.any():
        text = pc.if_else(pa.array(inf), pa.array(np.where(values > 0, "+Inf", "-Inf")), text)
    return text


def _joined(lines: pa.Array) -> bytes:
    """The characters of a string array end to end (one copy of its data buffer)."""
    offsets = np.frombuffer(lines.buffers()[1], dtype=np.int64, count=lines.offset + len(lines) + 1)
    start, stop = int(offsets[lines.offset]), int(offsets[-1])
    return memoryview(lines.buffers()[2])[start:stop].tobytes()


class PortFamily(Metric):
    """A gauge or counter family whose samples are numpy arrays over the fabric's ports.

    Each part holds the extra labels of one variant and a value per port, NaN where the port
    has no sample (unknown is absent, never 0). A counter's samples are named ``<name>_total``.
    """

    def __init__(self, name: str, documentation: str, typ: str, labels: PortLabels) -> None:
        super().__init__(name, documentation, typ)
        self.labels = labels
        self.parts: list[tuple[Extra, str, np.ndarray]] = []

    @property
    def sample_name(self) -> str:
        return f"{self.name}_total" if self.type == "counter" else self.name

    def add(self, extra: Extra, values: np.ndarray) -> None:
        suffix = "".join(f',{k}="{escape_label_value(v)}"' for k, v in extra)
        self.parts.append((extra, suffix, values))

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

    def lines(self) -> bytes:
        """Every sample line, ``name{labels} value``, of every part."""
        out = []
        for _, suffix, values in self.parts:
            idx = np.flatnonzero(~np.isnan(values))
            if not idx.size:
                continue
            labels = self.labels.strings
            if idx.size < len(labels):
                labels = labels.take(pa.array(idx))
            lines = pc.binary_join_element_wise(
                _text(f"{self.sample_name}{{"), labels, _text(f"{suffix}}} "), _go_floats(values[idx]),
                _NEWLINE, _NOTHING,
            )  # fmt: skip
            out.append(_joined(lines))
        return b"".join(out)


class _One:
    def __init__(self, metrics: list[Metric]) -> None:
        self.metrics = metrics

    def collect(self) -> list[Metric]:
        return self.metrics


def iter_render(collector: object) -> Iterator[bytes]:
    """The text exposition (format 0.0.4) of everything ``collector.collect()`` yields, family by
    family, so a caller can stream it to a slow client (collectors must not hold locks across it).
    """
    pending: list[Metric] = []

    def flush() -> bytes:
        out = generate_latest(_One(list(pending)))  # type: ignore[arg-type]
        pending.clear()
        return out

    for m in collector.collect():  # type: ignore[attr-defined]
        if isinstance(m, PortFamily):
            if pending:
                yield flush()
            yield m.header() + m.lines()
        else:
            pending.append(m)
    if pending:
        yield flush()


def render(collector: object) -> bytes:
    """The whole text exposition of ``collector`` (see :func:`iter_render`)."""
    return b"".join(iter_render(collector))
