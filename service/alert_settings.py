"""Alerting configuration: where incidents are sent, how hard delivery is retried.

Secrets (webhook HMAC keys, PagerDuty routing keys) may be given inline or, better, by naming
an environment variable (``secret_env``, ``routing_key_env``) so the YAML file holds none.
"""

from __future__ import annotations

import os
import re
from datetime import timedelta
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator, model_validator

from graywire.collectors.units import Duration, PositiveDuration
from graywire.detectors.findings import Severity

#: Labels graywire sets on every alert itself: ``alerts.labels`` may not override them.
RESERVED_LABELS = frozenset(
    {"alertname", "severity", "kind", "entity", "incident_id", "node", "port", "link"}
    | {"switch", "rail", "job", "instance"}
)
#: The runbooks' folder in the repository, one ``<kind>.md`` per kind; the default base of the
#: ``runbook_url`` annotation (``alerts.runbook_base_url`` points it at where they are served).
RUNBOOK_DIR = "docs/runbooks"

ReceiverType = Literal["alertmanager", "webhook", "pagerduty", "slack"]
PAGERDUTY_EVENTS_URL = "https://events.pagerduty.com/v2/enqueue"
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:/@-]{0,127}$")
#: Prometheus label names (``__``-prefixed ones are reserved for internal use).
_LABEL_NAME = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")


def _http_url(v: str) -> str:
    if not re.match(r"^https?://[^\s/]+", v):
        raise ValueError(f"{v!r} is not an http(s) URL")
    return v.rstrip("/")


def _from_env(inline: SecretStr | None, env: str | None, what: str) -> str | None:
    if inline is not None:
        return inline.get_secret_value()
    if env is None:
        return None
    value = os.environ.get(env)
    if not value:
        raise ValueError(f"{what}: environment variable {env} is not set")
    return value


class ReceiverConfig(BaseModel):
    """One direct webhook: a generic Alertmanager-v4-style webhook, PagerDuty or Slack."""

    model_config = ConfigDict(extra="forbid")

    name: str
    type: Literal["webhook", "pagerduty", "slack"]
    #: PagerDuty defaults to the public Events API v2 endpoint.
    url: str | None = None
    #: HMAC-SHA256 key for generic webhooks (``X-Graywire-Signature: sha256=<hex>``).
    secret: SecretStr | None = None
    secret_env: str | None = None
    #: PagerDuty integration (routing) key.
    routing_key: SecretStr | None = None
    routing_key_env: str | None = None
    #: PagerDuty ``dedup_key`` = ``<prefix>-incident-<id>``. Give each graywire deployment that
    #: shares a routing key its own prefix, or one cluster's resolve closes another's page.
    dedup_prefix: str = Field("graywire", pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
    #: Overrides ``alerts.min_severity`` for this receiver.
    min_severity: Severity | None = None
    timeout: PositiveDuration = timedelta(seconds=10)

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        if not _NAME.match(v):
            raise ValueError("use letters, digits and _.:/@- (at most 128 characters)")
        return v

    @field_validator("url")
    @classmethod
    def _url(cls, v: str | None) -> str | None:
        return None if v is None else _http_url(v)

    @model_validator(mode="after")
    def _complete(self) -> ReceiverConfig:
        if self.type != "pagerduty" and self.url is None:
            raise ValueError(f"receiver {self.name}: url is required for type {self.type}")
        if self.type == "pagerduty":
            if self.routing_key is None and self.routing_key_env is None:
                raise ValueError(f"receiver {self.name}: pagerduty needs routing_key or routing_key_env")
            self.routing_key_value()  # a named but unset variable fails at start-up, not at 3 am
        if (self.secret or self.secret_env) and self.type != "webhook":
            raise ValueError(f"receiver {self.name}: secret applies to type webhook only")
        self.secret_value()
        return self

    def secret_value(self) -> str | None:
        return _from_env(self.secret, self.secret_env, f"receiver {self.name} secret")

    def routing_key_value(self) -> str | None:
        return _from_env(self.routing_key, self.routing_key_env, f"receiver {self.name} routing_key")

    @property
    def endpoint(self) -> str:
        return self.url or PAGERDUTY_EVENTS_URL


class AlertmanagerConfig(BaseModel):
    """Alertmanager instances; each gets every alert (send to all members of an HA cluster)."""

    model_config = ConfigDict(extra="forbid")

    urls: list[str] = Field(default_factory=list)
    #: Firing alerts are re-posted this often; each carries endsAt = now + 4 × this interval,
    #: so Alertmanager resolves them by itself if graywire stops refreshing (as with Prometheus).
    refresh_interval: PositiveDuration = timedelta(minutes=1)
    timeout: PositiveDuration = timedelta(seconds=10)

    @field_validator("urls")
    @classmethod
    def _urls(cls, v: list[str]) -> list[str]:
        urls = [_http_url(u) for u in v]
        if len(set(urls)) != len(urls):
            raise ValueError("duplicate Alertmanager URL")
        return urls


class RetryConfig(BaseModel):
    """Exponential backoff between delivery attempts of one message, capped, with jitter."""

    model_config = ConfigDict(extra="forbid")

    initial_backoff: PositiveDuration = timedelta(seconds=2)
    max_backoff: PositiveDuration = timedelta(minutes=5)
    #: Each delay is shortened by a random fraction up to this, so receivers that come back
    #: are not hit by every sender at once; the cap is never exceeded.
    jitter: float = Field(0.2, ge=0.0, le=1.0)


class AlertsSettings(BaseModel):
    """The ``alerts:`` section of the service configuration."""

    model_config = ConfigDict(extra="forbid")

    #: Base URL of this service as on-call reaches it (generatorURL, links in messages).
    external_url: str | None = None
    #: Labels every alert carries (``cluster: eu-1``), for routing and inhibition.
    labels: dict[str, str] = Field(default_factory=dict)
    #: The ``instance`` label: this deployment. Default: the host (and port) of
    #: ``external_url`` when set, else this machine's hostname and the service port. Replicas
    #: sharing a database must share one value, or their alerts change labels between syncs.
    instance: str | None = Field(None, min_length=1, max_length=256, pattern=r"^\S+$")
    #: The ``runbook_url`` annotation is ``<runbook_base_url>/<kind>.md``: where your copy of
    #: ``docs/runbooks`` is served (a Git host's view of that folder, a wiki). The default is the
    #: repository path, which receivers show as text, not as a link.
    runbook_base_url: str = RUNBOOK_DIR
    #: Incidents below this severity are not sent anywhere.
    min_severity: Severity = Severity.WARNING
    alertmanager: AlertmanagerConfig = Field(default_factory=AlertmanagerConfig)
    receivers: list[ReceiverConfig] = Field(default_factory=list)
    retry: RetryConfig = Field(default_factory=RetryConfig)
    #: How often incidents are compared with what was sent (new triggers, resolves, refreshes).
    sync_interval: PositiveDuration = timedelta(seconds=2)
    #: Delivered messages are deleted after this long.
    retention: PositiveDuration = timedelta(days=7)
    #: Direct receivers: a new incident's first trigger waits until it is this old, so the
    #: switch incident of a whole failing switch can still inhibit its host links ("0s": off).
    group_wait: Duration = timedelta(seconds=30)
    #: Pending messages kept per receiver. A receiver away for hours makes its queue grow; past
    #: this the oldest superseded and already-over messages are dropped first, firing pages
    #: last and critical ones after every lower one (``graywire_alert_outbox_dropped_total``).
    max_outbox: int = Field(10_000, ge=10)

    @field_validator("external_url")
    @classmethod
    def _external(cls, v: str | None) -> str | None:
        return None if v is None else _http_url(v)

    @field_validator("labels", mode="before")
    @classmethod
    def _label_values(cls, v: Any) -> Any:
        """Numbers are fine as values (``rack: 12``), written as YAML gives them."""
        if not isinstance(v, dict):
            return v
        out = {}
        for name, value in v.items():
            if isinstance(value, bool) or not isinstance(value, str | int | float):
                raise ValueError(f"label {name}: the value must be a string or a number, not {value!r}")
            out[name] = str(value)
        return out

    @field_validator("labels")
    @classmethod
    def _label_names(cls, v: dict[str, str]) -> dict[str, str]:
        for name, value in v.items():
            if not _LABEL_NAME.match(name) or name.startswith("__"):
                raise ValueError(
                    f"label {name!r} is not a valid label name: use [a-zA-Z_][a-zA-Z0-9_]*, "
                    "not starting with __"
                )
            if name == "instance":
                raise ValueError("label instance is graywire's own: set alerts.instance instead")
            if name in RESERVED_LABELS:
                raise ValueError(
                    f"label {name} is set by graywire on every alert and cannot be overridden "
                    f"(reserved: {', '.join(sorted(RESERVED_LABELS))})"
                )
            if not value:
                raise ValueError(f"label {name}: an empty value means no label to Alertmanager; drop it")
        return v

    @field_validator("runbook_base_url")
    @classmethod
    def _runbook_base(cls, v: str) -> str:
        if re.match(r"^[a-zA-Z][a-zA-Z0-9+.-]*:", v):
            return _http_url(v)
        if not v or re.search(r"\s", v):
            raise ValueError(f"{v!r} is neither an http(s) URL nor a path")
        return v.rstrip("/")

    @model_validator(mode="after")
    def _unique_names(self) -> AlertsSettings:
        names = [r.name for r in self.receivers]
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            raise ValueError(f"receiver names must be unique: {', '.join(dup)}")
        return self

    @property
    def enabled(self) -> bool:
        return bool(self.alertmanager.urls or self.receivers)
