"""A scrape as NATS messages, and the messages back into scrapes (pure: no I/O).

One scrape of one target is published as:

- each batch as one Arrow IPC stream, compressed whole with zstd, cut into chunks that fit the
  server's ``max_payload``, on ``<prefix>.scrape.<record kind>.<source>.<target token>``;
- then one status message on ``<prefix>.status.<source>.<target token>``: JSON saying which
  target, for which poll slot, whether the scrape succeeded (its error, duration, what the parse
  skipped), and how many chunks each batch has.

Every message carries the scrape's id (``Graywire-Scrape``: member, incarnation, sequence), its
poll slot and sequence on their own (``Graywire-Poll-Time``, ``Graywire-Sequence``), and a
``Nats-Msg-Id`` JetStream de-duplicates a re-sent publish by. A member publishes the status
last, so once it and every chunk it names have arrived the scrape is complete; a scrape whose
member died mid-way never completes and is dropped after a while (:meth:`Assembler.expire`).
The chunks of one batch are concatenated before they are read, so a dictionary-encoded port
column arrives whole, dictionary and all.
"""

from __future__ import annotations

import hashlib
import io
import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from graywire.collectors.base import ScrapeResult
from graywire.collectors.schemas import record_kind

SCRAPE_HEADER = "Graywire-Scrape"
PART_HEADER = "Graywire-Part"
#: Every message also says which poll slot (unix seconds) and which of its member's scrapes.
POLL_TIME_HEADER = "Graywire-Poll-Time"
SEQUENCE_HEADER = "Graywire-Sequence"
MSG_ID_HEADER = "Nats-Msg-Id"
#: Room left in each message for its headers and the protocol line.
HEADROOM = 4096
#: A batch decompressed past this is refused (a status lying about its size cannot make the
#: leader allocate without bound); the largest fabric's scrape is far below it.
MAX_BATCH_BYTES = 8 * 2**30
_UNSAFE = re.compile(r"[^A-Za-z0-9_-]")
#: The whole stream compressed, schema included: a host agent's batch is mostly schema (59
#: columns for 8 ports), which Arrow's per-buffer compression leaves as it is (12.7 KB with LZ4
#: buffers, 2.3 KB with the whole message zstd-compressed).
_ZSTD = pa.Codec("zstd", compression_level=1)
ENCODING = "zstd"


def target_token(source: str, target: str) -> str:
    """A subject token naming one target (targets are URLs and paths: not subject-safe)."""
    return hashlib.blake2b(f"{source}|{target}".encode(), digest_size=8).hexdigest()


def _safe(token: str) -> str:
    return _UNSAFE.sub("_", token) or "_"


def scrape_subject(prefix: str, kind: str, source: str, target: str) -> str:
    return f"{prefix}.scrape.{_safe(kind)}.{_safe(source)}.{target_token(source, target)}"


def status_subject(prefix: str, source: str, target: str) -> str:
    return f"{prefix}.status.{_safe(source)}.{target_token(source, target)}"


def subjects(prefix: str) -> list[str]:
    """Every subject the stream holds."""
    return [f"{prefix}.scrape.>", f"{prefix}.status.>"]


@dataclass(frozen=True, slots=True)
class Outgoing:
    subject: str
    data: bytes
    headers: dict[str, str]


def ipc_bytes(batch: pa.RecordBatch) -> bytes:
    sink = io.BytesIO()
    with pa.ipc.new_stream(sink, batch.schema) as writer:
        writer.write_batch(batch)
    return sink.getvalue()


def encode_scrape(
    result: ScrapeResult,
    *,
    prefix: str,
    scrape_id: str,
    slot: float,
    member: str,
    finished_at: float,
    max_payload: int,
    attempted: bool = True,
) -> list[Outgoing]:
    """The messages that carry ``result`` for poll slot ``slot`` (unix seconds), status last.

    ``attempted`` False says the member did not scrape the target this slot (it is backing off
    after failures): the target is accounted for, with nothing new.
    """
    limit = max_payload - HEADROOM
    common = {
        SCRAPE_HEADER: scrape_id,
        POLL_TIME_HEADER: f"{slot:.3f}",
        SEQUENCE_HEADER: scrape_id.rsplit("/", 1)[-1],
    }
    if limit < 1024:
        raise ValueError(f"the NATS server's max_payload ({max_payload} bytes) is too small to carry scrapes")
    out: list[Outgoing] = []
    layout: list[dict[str, Any]] = []
    for b, batch in enumerate(result.batches):
        kind = record_kind(batch.schema)
        raw = ipc_bytes(batch)
        data = _ZSTD.compress(raw, asbytes=True)
        n = max(1, -(-len(data) // limit))
        subject = scrape_subject(prefix, kind, result.source, result.target)
        for c in range(n):
            part = f"{b}.{c}"
            out.append(
                Outgoing(
                    subject,
                    data[c * limit : (c + 1) * limit],
                    {
                        **common,
                        PART_HEADER: f"{part}/{n}",
                        MSG_ID_HEADER: f"{scrape_id}/{part}",
                    },
                )
            )
        layout.append(
            {"kind": kind, "chunks": n, "rows": batch.num_rows, "encoding": ENCODING, "bytes": len(raw)}
        )
    status = {
        "scrape": scrape_id,
        "source": result.source,
        "target": result.target,
        "slot": slot,
        "member": member,
        "attempted": attempted,
        "ok": result.ok,
        "error": result.error,
        "duration_s": result.duration_s,
        "finished_at": finished_at,
        "skipped": dict(result.skipped),
        "batches": layout,
    }
    out.append(
        Outgoing(
            status_subject(prefix, result.source, result.target),
            json.dumps(status, separators=(",", ":")).encode(),
            {**common, MSG_ID_HEADER: f"{scrape_id}/status"},
        )
    )
    return out


@dataclass(slots=True)
class Report:
    """One member's report of one target for one poll slot, as the leader assembled it."""

    scrape_id: str
    member: str
    slot: float
    finished_at: float
    attempted: bool
    result: ScrapeResult
    #: Stream sequence of the first message (the order reports are judged in).
    first_seq: int
    #: What to acknowledge once the report is judged (the bus's message handles).
    handles: list[Any] = field(default_factory=list)


@dataclass(slots=True)
class _Pending:
    handles: list[Any] = field(default_factory=list)
    chunks: dict[tuple[int, int], bytes] = field(default_factory=dict)
    status: dict[str, Any] | None = None
    first_seq: int = 0
    #: When the first message arrived (the caller's clock), for expiry.
    since: float = 0.0


def _decoded(data: bytes, spec: dict[str, Any]) -> bytes | pa.Buffer:
    """A batch's bytes as they were before the wire encoding its status names."""
    encoding = spec.get("encoding")
    if encoding is None:
        return data
    if encoding != ENCODING:
        raise ValueError(f"unknown encoding {encoding!r}")
    size = int(spec["bytes"])
    if not 0 <= size <= MAX_BATCH_BYTES:
        raise ValueError(f"a batch of {size} bytes is over the {MAX_BATCH_BYTES} a scrape may carry")
    return _ZSTD.decompress(data, decompressed_size=size)


class WireError(ValueError):
    """A message that is not graywire's wire format; ``handles`` are the messages of the scrape
    it spoiled (dropped with it, for the caller to acknowledge)."""

    def __init__(self, message: str, handles: list[Any] | None = None) -> None:
        super().__init__(message)
        self.handles = handles or []


def _parse_part(value: str) -> tuple[int, int, int]:
    try:
        head, n = value.split("/")
        b, c = head.split(".")
        return int(b), int(c), int(n)
    except ValueError:
        raise WireError(f"bad {PART_HEADER} header {value!r}") from None


class Assembler:
    """Collects messages until each scrape is complete, then hands it out as a :class:`Report`."""

    def __init__(self) -> None:
        self._pending: dict[str, _Pending] = {}

    def __len__(self) -> int:
        return len(self._pending)

    def add(
        self, subject: str, headers: Mapping[str, str] | None, data: bytes, seq: int, handle: Any, now: float
    ) -> Report | None:
        """Take one message; the report it completes, if any. Raises :class:`WireError` for a
        message of another format (the caller drops and acknowledges it)."""
        scrape_id = (headers or {}).get(SCRAPE_HEADER)
        if not scrape_id:
            raise WireError(f"message on {subject} has no {SCRAPE_HEADER} header", [handle])
        p = self._pending.get(scrape_id)
        if p is None:
            p = self._pending[scrape_id] = _Pending(first_seq=seq, since=now)
        p.handles.append(handle)
        p.first_seq = min(p.first_seq, seq)
        try:
            part = (headers or {}).get(PART_HEADER)
            if part is None:
                try:
                    status = json.loads(data)
                except ValueError as e:
                    raise WireError(f"bad status message on {subject}: {e}") from None
                if not isinstance(status, dict) or not isinstance(status.get("batches"), list):
                    raise WireError(f"bad status message on {subject}: not a status object")
                p.status = status
            else:
                b, c, _ = _parse_part(part)
                p.chunks[(b, c)] = data
            return self._complete(scrape_id, p)
        except WireError as e:
            self._pending.pop(scrape_id, None)
            raise WireError(str(e), p.handles) from None

    def _complete(self, scrape_id: str, p: _Pending) -> Report | None:
        s = p.status
        if s is None:
            return None
        layout = s["batches"]
        try:
            counts = [int(spec["chunks"]) for spec in layout]
        except (KeyError, TypeError, ValueError) as e:
            raise WireError(f"scrape {scrape_id} has a bad batch layout: {e!r}") from None
        if any((b, c) not in p.chunks for b, n in enumerate(counts) for c in range(n)):
            return None
        del self._pending[scrape_id]
        try:
            batches = tuple(
                pa.ipc.open_stream(
                    _decoded(b"".join(p.chunks[(b, c)] for c in range(int(spec["chunks"]))), spec)
                ).read_next_batch()
                for b, spec in enumerate(layout)
            )
            result = ScrapeResult(
                str(s["source"]),
                str(s["target"]),
                bool(s["ok"]),
                batches,
                s.get("error"),
                float(s.get("duration_s") or 0.0),
                {str(k): int(v) for k, v in (s.get("skipped") or {}).items()},
            )
            report = Report(
                scrape_id,
                str(s.get("member", "")),
                float(s["slot"]),
                float(s.get("finished_at") or s["slot"]),
                bool(s.get("attempted", True)),
                result,
                p.first_seq,
                p.handles,
            )
        except (KeyError, TypeError, ValueError, OSError, pa.ArrowException) as e:
            raise WireError(f"scrape {scrape_id} cannot be read: {e}") from None
        return report

    def expire(self, before: float) -> list[Any]:
        """Drop scrapes whose first message arrived before ``before`` and are still incomplete
        (their member died mid-publish); returns their handles to acknowledge."""
        old = [k for k, p in self._pending.items() if p.since < before]
        return [h for k in old for h in self._pending.pop(k).handles]

    def drop_all(self) -> Iterable[Any]:
        handles = [h for p in self._pending.values() for h in p.handles]
        self._pending.clear()
        return handles
