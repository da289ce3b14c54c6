"""How a user configures a UFM source, and the collectors it becomes.

Example (service YAML)::

    sources:
      - type: ufm
        url: https://ufm.example.com          # REST: port state, speed, width, links
        auth: token                            # or basic (username + password)
        token_file: /etc/graywire/ufm-token
        ca_file: /etc/graywire/ufm-ca.pem      # TLS is verified; verify: false to opt out
        telemetry_url: http://ufm.example.com:9001/metrics   # counters (or .../csv/..., .../json)
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator, model_validator

from graywire.collectors.base import Collector
from graywire.collectors.model import Fabric
from graywire.collectors.ufm.http import UfmHttpSettings
from graywire.collectors.ufm.rest import UfmRestCollector
from graywire.collectors.ufm.telemetry import UfmTelemetryCollector


def _http_url(v: str | None) -> str | None:
    if v is not None and not v.startswith(("http://", "https://")):
        raise ValueError(f"must be an http:// or https:// URL, not {v!r}")
    return v


class UfmSourceConfig(BaseModel):
    """One UFM Enterprise server: REST (state, speed, links) and/or its telemetry endpoint (counters)."""

    model_config = ConfigDict(extra="forbid")

    type: Literal["ufm"] = "ufm"
    #: UFM base URL for REST (``https://ufm.example.com``); None = telemetry only.
    url: str | None = None
    #: ``basic`` (``/ufmRest`` + user/password) or ``token`` (``/ufmRestV3`` + access token).
    auth: Literal["basic", "token"] = "basic"
    username: str | None = None
    password: SecretStr | None = None
    password_file: Path | None = None
    token: SecretStr | None = None
    token_file: Path | None = None
    #: Verify TLS certificates (default). ``ca_file`` trusts a private CA or a self-signed UFM.
    verify: bool = True
    ca_file: Path | None = None
    #: Also read ``/resources/links`` (the cables as UFM discovered them).
    links: bool = True
    #: UFM Telemetry endpoint: ``http://ufm:9001/metrics`` (Prometheus), ``…/csv/…`` or ``…/json``.
    telemetry_url: str | None = None
    telemetry_format: Literal["auto", "prometheus", "csv", "json"] = "auto"
    #: Send the REST credentials to the telemetry endpoint too (it is usually unauthenticated).
    telemetry_auth: bool = False
    connect_timeout: float = Field(5.0, gt=0, le=300)
    #: Longest wait for the next bytes of a response.
    read_timeout: float = Field(30.0, gt=0, le=3600)
    #: Deadline for one whole scrape (all requests of it).
    timeout: float = Field(120.0, gt=0, le=3600)
    #: Largest response body read from UFM; a bigger one fails the scrape unread.
    max_body_bytes: int = Field(1 << 30, ge=1 << 16)
    #: How many times its size on the wire a compressed body may inflate (past 16 MiB).
    max_decompression_ratio: float = Field(100.0, ge=2)

    _url = field_validator("url", "telemetry_url")(classmethod(lambda cls, v: _http_url(v)))

    @model_validator(mode="after")
    def _check(self) -> UfmSourceConfig:
        if self.url is None and self.telemetry_url is None:
            raise ValueError("set url (UFM REST), telemetry_url, or both")
        if self.ca_file is not None and not self.verify:
            raise ValueError("ca_file is set but verify is false: choose one")
        if self.password is not None and self.password_file is not None:
            raise ValueError("set password or password_file, not both")
        if self.token is not None and self.token_file is not None:
            raise ValueError("set token or token_file, not both")
        if self.url is not None or self.telemetry_auth:
            if self.auth == "basic" and (
                not self.username or (self.password is None and not self.password_file)
            ):
                raise ValueError("auth basic needs username and password (or password_file)")
            if self.auth == "token" and self.token is None and self.token_file is None:
                raise ValueError("auth token needs token (or token_file)")
        return self

    def _secret(self, value: SecretStr | None, path: Path | None) -> str | None:
        if value is not None:
            return value.get_secret_value()
        if path is not None:
            try:
                return path.read_text().strip()
            except OSError as e:
                raise ValueError(f"cannot read {path}: {e}") from None
        return None

    def http_settings(self, *, authenticated: bool = True) -> UfmHttpSettings:
        """HTTP settings for one endpoint; secrets are read from their files here."""
        common = {
            "verify": self.verify,
            "ca_file": self.ca_file,
            "connect_timeout_s": self.connect_timeout,
            "read_timeout_s": self.read_timeout,
            "total_timeout_s": self.timeout,
            "max_body_bytes": self.max_body_bytes,
            "max_decompression_ratio": self.max_decompression_ratio,
        }
        if not authenticated:
            return UfmHttpSettings(auth="none", **common)  # type: ignore[arg-type]
        if self.auth == "token":
            return UfmHttpSettings(auth="token", token=self._secret(self.token, self.token_file), **common)  # type: ignore[arg-type]
        return UfmHttpSettings(
            auth="basic",
            username=self.username,
            password=self._secret(self.password, self.password_file),
            **common,  # type: ignore[arg-type]
        )


def build_collectors(cfg: UfmSourceConfig, fabric: Fabric | None) -> list[Collector]:
    """A REST collector for ``url`` and a telemetry collector for ``telemetry_url`` (each if set).

    Both resolve GUIDs through ``fabric`` (unknown GUIDs keep ``0x<guid>/<port>`` keys) and share
    its port dictionary; the pipeline joins their rows per port
    (:mod:`graywire.detectors.port_state`): REST's speed and state into Telemetry's counters.
    """
    out: list[Collector] = []
    if cfg.url is not None:
        out.append(UfmRestCollector(cfg.url, fabric, cfg.http_settings(), links=cfg.links))
    if cfg.telemetry_url is not None:
        out.append(
            UfmTelemetryCollector(
                cfg.telemetry_url,
                fabric,
                cfg.http_settings(authenticated=cfg.telemetry_auth),
                fmt=cfg.telemetry_format,
            )
        )
    return out
