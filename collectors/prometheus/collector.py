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
from typing import Literal

import pyarrow as pa
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from graywire.collectors.base import Collector, KeyResolver, ScrapeResult, Skips, guarded_scrape, redact_url
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


def _http(url: str) -> str:
    if not url.startswith(("http://", "https://")):
        raise ValueError(f"exporter URLs must start with http:// or https://: {url!r}")
    return url


class PrometheusTarget(BaseModel):
    """One exporter, and the host whose ports it reports (node_exporter; not infiniband_exporter)."""

    model_config = ConfigDict(extra="forbid")

    url: str
    node: str | None = None

    @field_validator("url")
    @classmethod
    def _url(cls, v: str) -> str:
        return _http(v)

    @field_validator("node")
    @classmethod
    def _node(cls, v: str | None) -> str | None:
        if v is not None and (not v.strip() or "/" in v):
            raise ValueError(f"node must be a host name without '/': {v!r}")
        return v


class PrometheusSourceConfig(BaseModel):
    """Exporters to scrape instead of graywire's host agent (``type: prometheus``).

    ``targets`` name each exporter's host; ``urls`` leave it to the exporter
    (``node_uname_info``) or need none (infiniband_exporter); ``url_template`` is expanded for
    every host of the inventory (``http://{host}:9100/metrics``), that host being the node.
    """

    model_config = ConfigDict(extra="forbid")

    type: Literal["prometheus"] = "prometheus"
    targets: list[PrometheusTarget] = Field(default_factory=list)
    urls: list[str] = Field(default_factory=list)
    url_template: str | None = None
    timeout: float = Field(10.0, gt=0, le=300)
    #: Largest body read (a whole-fabric infiniband_exporter is the big one).
    max_bytes: int = Field(64 * 2**20, ge=1024)

    @field_validator("urls")
    @classmethod
    def _urls(cls, v: list[str]) -> list[str]:
        return [_http(u) for u in v]

    @field_validator("url_template")
    @classmethod
    def _template(cls, v: str | None) -> str | None:
        if v is not None and ("{host}" not in v or not v.startswith(("http://", "https://"))):
            raise ValueError("url_template must be an http(s) URL containing {host}")
        return v

    @model_validator(mode="after")
    def _some_target(self) -> PrometheusSourceConfig:
        if not self.targets and not self.urls and self.url_template is None:
            raise ValueError("set targets, urls or url_template")
        return self


def build_collectors(cfg: PrometheusSourceConfig, fabric: Fabric | None) -> list[Collector]:
    """One collector per exporter URL: targets, then urls, then the template per inventory host.
    They share one GUID index of the fabric model."""
    named: dict[str, str | None] = {}
    for t in cfg.targets:
        named.setdefault(t.url, t.node)
    for u in cfg.urls:
        named.setdefault(u, None)
    if cfg.url_template is not None:
        if fabric is None:
            raise ValueError("prometheus url_template needs an inventory to list the hosts")
        for name, role in zip(fabric.node_names, fabric.node_roles, strict=True):
            if role == "host":
                named.setdefault(cfg.url_template.format(host=name), name)
    resolver = KeyResolver.from_fabric(fabric)
    return [
        PrometheusCollector(
            url, node=node, fabric=fabric, resolver=resolver, timeout=cfg.timeout, max_bytes=cfg.max_bytes
        )
        for url, node in named.items()
    ]
