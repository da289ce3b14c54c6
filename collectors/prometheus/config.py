"""How a user configures the ``prometheus`` source, and the collectors it becomes.

Example (service YAML)::

    sources:
      - type: prometheus
        url_template: http://{host}:9100/metrics   # node_exporter on every inventory host
        targets:
          - url: http://ib-exporter:9315/metrics   # treydock/infiniband_exporter: ports by GUID
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from graywire.collectors.base import Collector, KeyResolver
from graywire.collectors.model import Fabric
from graywire.collectors.prometheus.collector import PrometheusCollector


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


__all__ = ["PrometheusSourceConfig", "PrometheusTarget", "build_collectors"]
