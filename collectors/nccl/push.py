"""Inspector records a job POSTs (``/api/v1/ingest/nccl``), parsed strictly: a bad body is
refused whole with a ``ValueError`` saying what is wrong, so a client never gets half its rows
stored. The file path (:mod:`graywire.collectors.nccl.tail`) is lenient instead: it skips and
counts a bad line, because a file is written while it is read.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime

import pyarrow as pa

from graywire.collectors.nccl.common import TimingRows
from graywire.collectors.nccl.inspector import InspectorParser

_LINE_TYPES = {
    "application/x-ndjson",
    "application/jsonl",
    "application/json-lines",
    "application/jsonlines",
    "application/ndjson",
    "text/plain",
}
_DOC_TYPES = {"application/json"}


def parse_push(
    body: bytes,
    content_type: str,
    *,
    job: str = "unknown",
    gpus_per_host: int | None = None,
    received: datetime | None = None,
) -> pa.RecordBatch:
    """Inspector records POSTed by a job (``/api/v1/ingest/nccl``) -> one nccl_timing batch.

    ``application/x-ndjson`` (also ``application/jsonl``, ``text/plain``): the Inspector's
    own JSON lines, any version (a v4.3 body must include the ``dump_stats`` markers its records
    belong to). ``application/json``: one record, an array of records, or records one after
    another. The whole body is refused on the first problem (``ValueError`` naming the line and
    the reason) so a client never gets half its rows stored. A body with only markers or P2P
    records gives an empty batch. Rows without a collective time are stamped ``received``.
    """
    if not isinstance(body, bytes | bytearray):
        raise ValueError("body must be bytes")
    media, _, params = (content_type or "").partition(";")
    media = media.strip().lower()
    charset = re.search(r"charset\s*=\s*\"?([\w-]+)", params, re.IGNORECASE)
    if charset and charset.group(1).lower().replace("_", "-") not in ("utf-8", "utf8", "us-ascii"):
        raise ValueError(f"unsupported charset {charset.group(1)!r}: send UTF-8")
    if media not in _LINE_TYPES | _DOC_TYPES:
        raise ValueError(
            f"unsupported content type {media or '(none)'!r}: send application/x-ndjson (Inspector JSON "
            "lines) or application/json"
        )
    try:
        text = bytes(body).decode("utf-8")
    except UnicodeDecodeError as e:
        raise ValueError(f"body is not UTF-8 text (byte {e.start}: {e.reason})") from None
    if not text.strip():
        raise ValueError("empty body: expected NCCL Inspector JSON records")
    parser = InspectorParser(job, gpus_per_host=gpus_per_host, strict=True)
    rows = TimingRows()
    if media in _DOC_TYPES:
        parser.feed_text(text, rows)
    else:
        # JSON lines end at \n only: a JSON string may hold a raw U+2028 or \x85, which
        # str.splitlines would cut the record at.
        parser.feed_data(bytes(body), rows, strict_json=True)
    if not parser.records + parser.ignored:  # strict: every record counts as one or raises
        raise ValueError("no JSON records in body")
    when = received or datetime.now(UTC)
    return rows.to_batch(None if rows.latest_us() is not None else when)


__all__ = ["parse_push"]
