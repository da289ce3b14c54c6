"""``perfquery`` text (infiniband-diags) -> canonical ``port_sample`` batches.

perfquery prints one block per port and attribute, a ``#`` header then ``Name:....value`` lines
(libibmad's ``mad_dump_field``: the name padded with dots to 32 columns)::

    # Port counters: Lid 12 port 1 (CapMask: 0x1400)             perfquery        (PortCounters)
    # Port extended counters: Lid 1719 port 1 (CapMask: 0x5300 CapMask2: 0x0000002)   perfquery -x
    # PortRcvErrorDetails counters: Lid 1719 port 1                                    perfquery -E
    # Port extended speeds RS-FEC counters: Lid 3 port 1                         perfquery -X/-T

The width of a value is that of the attribute its block holds, not of its name: ``perfquery -x``
prints the 64-bit PortCountersExtended error counters as ``SymbolErrorCounter`` etc., while the
same name in a PortCounters block is the 16-bit saturating field (widths in
:mod:`graywire.collectors.ib.counters`). A column is declared narrow in the batch metadata when every value
in it came from a narrow field of one width; a device that fills a legacy field with a wider
value is recognized by the rates stage (the value exceeds the width). Data counters are 4-octet
words (×4 for bytes). PortRcvErrorDetails fields have no canonical column and stay in
:attr:`PerfqueryBlock.values`.

perfquery has no port state and no timestamps: a batch's ``time`` is when the command ran. The
host agent can run it per InfiniBand port (``graywire agent --perfquery perfquery``) to replace
sysfs's saturating 16-bit error counters with the 64-bit Extended ones.
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Literal

import numpy as np
import pyarrow as pa

from graywire.collectors.base import OUT_OF_RANGE, Skips
from graywire.collectors.host.sysfs import PortReading
from graywire.collectors.ib.counters import CounterSpec, iba_spec
from graywire.collectors.schemas import PORT_SAMPLE, TS, make_batch, with_counter_widths

BlockKind = Literal["legacy", "extended", "rcv_error_details", "extended_speeds", "other"]

_HEADER = re.compile(r"^#\s*(?P<what>.+?)\s*:\s*Lid\s+(?P<lid>\d+)\s+port\s+(?P<port>\d+)", re.IGNORECASE)
_FIELD = re.compile(r"^(?P<name>[A-Za-z][\w\[\]]*):\.*\s*(?P<value>0x[0-9a-fA-F]+|\d+)\s*$")


@dataclass(slots=True)
class PerfqueryBlock:
    """One ``#``-headed block: which attribute, the port it names, and every numeric field."""

    kind: BlockKind
    lid: int | None
    port: int | None
    header: str
    values: dict[str, int] = field(default_factory=dict)


def _kind(what: str) -> BlockKind:
    w = what.lower()
    if "rcverrordetails" in w.replace(" ", ""):
        return "rcv_error_details"
    if "extended speeds" in w:
        return "extended_speeds"
    if "extended" in w:
        return "extended"
    if w.startswith("port counters"):
        return "legacy"
    return "other"


def parse_perfquery(text: str) -> list[PerfqueryBlock]:
    """Every block of a perfquery output (several commands' outputs may be concatenated).

    Lines before the first header, blank lines and non-numeric fields are skipped; a field
    line outside any block raises ValueError (the text is not perfquery output).
    """
    blocks: list[PerfqueryBlock] = []
    cur: PerfqueryBlock | None = None
    for raw in text.splitlines():
        line = raw.strip()
        if not line:
            continue
        if line.startswith("#"):
            m = _HEADER.match(line)
            if m:
                cur = PerfqueryBlock(_kind(m["what"]), int(m["lid"]), int(m["port"]), line)
            else:
                cur = PerfqueryBlock("other", None, None, line)
            blocks.append(cur)
            continue
        m = _FIELD.match(line)
        if m is None:
            continue
        if cur is None:
            raise ValueError(f"not perfquery output: field before any '#' header: {line!r}")
        v = m["value"]
        cur.values[m["name"]] = int(v, 16) if v.startswith("0x") else int(v)
    return blocks


def block_specs(block: PerfqueryBlock) -> list[tuple[CounterSpec, int]]:
    """The canonical counters of one block, with their widths (``CounterSelect`` etc. skipped)."""
    if block.kind not in ("legacy", "extended", "extended_speeds"):
        return []
    out = []
    for name, value in block.values.items():
        spec = iba_spec(name, extended=block.kind == "extended")
        if spec is not None:
            out.append((spec, value))
    return out


def perfquery_batch(
    ports: Sequence[tuple[str, Sequence[PerfqueryBlock]]],
    time: datetime,
    source: str = "perfquery",
    skipped: Skips | None = None,
) -> pa.RecordBatch:
    """One ``port_sample`` batch from (port key, that port's blocks) pairs.

    When two blocks give one column for a port (``perfquery`` and ``perfquery -x`` both run),
    the Extended (64-bit) value wins. A value wider than its field (no PMA counter has more
    than 64 bits) is null and counted in ``skipped`` as ``out_of_range``; a 64-bit data
    counter times 4 saturates at 2**64 - 1.
    """
    if time.tzinfo is None:
        raise ValueError("time must be timezone-aware")
    n = len(ports)
    values: dict[str, np.ndarray] = {}
    valid: dict[str, np.ndarray] = {}
    rank: dict[str, np.ndarray] = {}
    width: dict[str, np.ndarray] = {}  # bits of the winning value per row
    for i, (_, blocks) in enumerate(ports):
        for block in blocks:
            for spec, value in block_specs(block):
                if value >= 2**64:
                    if skipped is not None:
                        skipped[OUT_OF_RANGE] += 1
                    continue
                c = spec.column
                if c not in values:
                    values[c] = np.zeros(n, np.uint64)
                    valid[c] = np.zeros(n, bool)
                    rank[c] = np.zeros(n, np.int8)
                    width[c] = np.full(n, 64, np.int8)
                if valid[c][i] and rank[c][i] > spec.rank:
                    continue
                values[c][i] = min(value * spec.scale, 2**64 - 1)
                valid[c][i] = True
                rank[c][i] = spec.rank
                width[c][i] = spec.bits
    keys = pa.array([k for k, _ in ports], pa.string())
    cols: dict[str, pa.Array] = {
        "time": pa.array([time.astimezone(UTC)] * n, type=TS),
        "port": pa.DictionaryArray.from_arrays(pa.array(np.arange(n, dtype=np.int32)), keys),
        "source": pa.DictionaryArray.from_arrays(pa.array(np.zeros(n, np.int8)), pa.array([source])),
    }
    bits: dict[str, int] = {}
    for c, vals in values.items():
        cols[c] = pa.array(vals, mask=~valid[c])
        ws = np.unique(width[c][valid[c]])
        if ws.size == 1 and int(ws[0]) < 64:
            bits[c] = int(ws[0])
    schema = with_counter_widths(PORT_SAMPLE, bits, tuple(sorted(bits)))
    return make_batch(schema, n, cols)


class PerfqueryCommand:
    """Runs ``perfquery -x -C <device> -P <port>`` (the local port's PortCountersExtended).

    Needs access to the umad device (root, or the ``rdma`` group on most distributions). A
    missing binary, a timeout or a non-zero exit gives no blocks and a message.
    """

    def __init__(self, binary: str = "perfquery", timeout: float = 5.0) -> None:
        self.binary = binary
        self.timeout = timeout

    def read(self, device: str, port: int) -> tuple[list[PerfqueryBlock], str | None]:
        args = [self.binary, "-x", "-C", device, "-P", str(port)]
        if device.startswith("-") or "/" in device:
            return [], f"invalid device name {device!r}"
        try:
            p = subprocess.run(args, capture_output=True, text=True, timeout=self.timeout, check=False)
        except subprocess.TimeoutExpired:
            return [], f"{' '.join(args)}: timed out after {self.timeout:g} s"
        except OSError as e:
            return [], f"{' '.join(args)}: {e}"
        if p.returncode != 0:
            msg = (p.stderr or p.stdout).strip().splitlines()
            return [], f"{' '.join(args)}: exit {p.returncode}: {msg[0] if msg else ''}"
        try:
            return parse_perfquery(p.stdout), None
        except ValueError as e:
            return [], f"{' '.join(args)}: {e}"


def apply_perfquery(readings: Sequence[PortReading], cmd: PerfqueryCommand) -> list[str]:
    """Fold each InfiniBand port's 64-bit PortCountersExtended values into its reading.

    sysfs error counters are the legacy, saturating PortCounters fields; ``perfquery -x`` has
    the Extended ones on HCAs that support them, so those replace the narrow values.
    """
    errors: list[str] = []
    for r in readings:
        if r.device is None or r.port_num is None or r.ethernet:
            continue
        blocks, err = cmd.read(r.device, r.port_num)
        if err:
            errors.append(err)
        for block in blocks:
            for spec, value in block_specs(block):
                if spec.bits >= 64:
                    r.set_counter(spec.column, value * spec.scale)
    return errors
