"""How a user configures the host agents as a source (``type: agent``), and the collectors it
becomes: one per agent URL.

Example (service YAML)::

    sources:
      - type: agent
        url_template: http://{host}:9470     # every host of the inventory
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from graywire.collectors.base import Collector
from graywire.collectors.host.agent_client import AgentCollector
from graywire.collectors.model import Fabric


class AgentSourceConfig(BaseModel):
    """Host agents to scrape: explicit ``urls``, and/or ``url_template`` expanded for every host
    of the inventory (``http://{host}:9470``)."""

    model_config = ConfigDict(extra="forbid")

    type: Literal["agent"] = "agent"
    urls: list[str] = Field(default_factory=list)
    url_template: str | None = None
    timeout: float = Field(5.0, gt=0, le=300)

    @field_validator("urls")
    @classmethod
    def _http(cls, v: list[str]) -> list[str]:
        bad = [u for u in v if not u.startswith(("http://", "https://"))]
        if bad:
            raise ValueError(f"agent URLs must start with http:// or https://: {bad[:3]}")
        return v

    @field_validator("url_template")
    @classmethod
    def _template(cls, v: str | None) -> str | None:
        if v is not None and ("{host}" not in v or not v.startswith(("http://", "https://"))):
            raise ValueError("url_template must be an http(s) URL containing {host}")
        return v

    @model_validator(mode="after")
    def _some_target(self) -> AgentSourceConfig:
        if not self.urls and self.url_template is None:
            raise ValueError("set urls, url_template, or both")
        return self


def build_collectors(cfg: AgentSourceConfig, fabric: Fabric | None) -> list[Collector]:
    """One collector per agent URL (explicit ones first, then the template per inventory host)."""
    urls = list(cfg.urls)
    if cfg.url_template is not None:
        if fabric is None:
            raise ValueError("agent url_template needs an inventory to list the hosts")
        urls += [
            cfg.url_template.format(host=name)
            for name, role in zip(fabric.node_names, fabric.node_roles, strict=True)
            if role == "host"
        ]
    return [AgentCollector(u, cfg.timeout) for u in dict.fromkeys(u.rstrip("/") for u in urls)]


__all__ = ["AgentSourceConfig", "build_collectors"]
