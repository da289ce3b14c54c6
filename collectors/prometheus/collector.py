"""The ``prometheus`` source: exporters' ``/metrics`` over HTTP, one collector per target.

Each target is one exporter: a host's node_exporter (its ports are that host's: the target's
``node``, or the host ``url_template`` was expanded for, or the exporter's own
``node_uname_info``), or an infiniband_exporter (its ports are named by GUID). Fetch and parse
are apart (:func:`~graywire.collectors.base.guarded_scrape`): the body is read within the
timeout and a size bound, then parsed in a worker thread; a scrape never raises, and an
exporter that answers without any of the families read fails its scrape with the reason
(an exporter up with the wrong collectors is not a healthy host).
"""

from __future__ import annotations

from datetime import UTC, datetime

import pyarrow as pa

from graywire.collectors.base import KeyResolver, ScrapeResult, Skips, guarded_scrape, redact_url
from graywire.collectors.http import fetch_bounded
from graywire.collectors.model import Fabric
from graywire.collectors.prometheus.parse import SOURCE, parse_exposition

#: The classic text format, which every exporter serves (not OpenMetrics, not protobuf).
ACCEPT = "text/plain;version=0.0.4;q=1.0,*/*;q=0.1"
#: Content types that are the text format (an empty one too: some exporters send none).
_TEXT_TYPES = ("text/plain", "")


class PrometheusCollector:
    """Scrapes one exporter's ``/metrics`` and reads it into ``port_sample`` (and ``link``) records."""

    source = SOURCE

    def __init__(
        self,
        url: str,
        *,
        node: str | None = None,
        fabric: Fabric | None = None,
        resolver: KeyResolver | None = None,
        timeout: float = 10.0,
        max_bytes: int = 64 * 2**20,
    ) -> None:
        self.url = url
        self.target = redact_url(url)
        self.node = node
        self.fabric = fabric
        self.resolver = resolver or KeyResolver.from_fabric(fabric)
        self.timeout = timeout
        self.max_bytes = max_bytes

    async def aclose(self) -> None:
        """Nothing to close: each scrape opens and closes its own client."""

    async def scrape(self) -> ScrapeResult:
        return await guarded_scrape(self.source, self.target, self.timeout, self._fetch, self._parse)

    async def _fetch(self) -> tuple[str, datetime]:
        """The body as text and when it was read; an HTTP error or a body past ``max_bytes`` raises."""
        status, ctype, body = await fetch_bounded(self.url, ACCEPT, self.max_bytes, self.timeout)
        if status != 200:
            raise ValueError(f"HTTP {status}: {body[:200].decode(errors='replace')}")
        if ctype not in _TEXT_TYPES:
            raise ValueError(f"content type {ctype!r}, not the Prometheus text format")
        return body.decode("utf-8"), datetime.now(UTC)

    def _parse(self, payload: tuple[str, datetime], skipped: Skips) -> tuple[pa.RecordBatch, ...]:
        text, at = payload
        batches = parse_exposition(
            text, node=self.node, fabric=self.fabric, resolver=self.resolver, time=at, skipped=skipped
        )
        if not batches:
            raise ValueError(
                "no node_infiniband_*, node_ethtool_* or infiniband_*_port_* series: is this a node_exporter "
                "with --collector.infiniband / --collector.ethtool, or an infiniband_exporter?"
            )
        return batches
