"""Service configuration: a YAML file, overridden by ``GRAYWIRE_*`` environment variables.

Every setting has an embedded default, so ``graywire serve`` with no file runs SQLite and the
built-in synthetic fabric under ``./graywire-data``.
"""

from __future__ import annotations

import difflib
import os
from dataclasses import dataclass
from datetime import timedelta
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal

import yaml
from ClusterShell.NodeSet import NodeSet
from pydantic import (
    BaseModel,
    ConfigDict,
    Discriminator,
    Field,
    Tag,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic_settings import (
    BaseSettings,
    NoDecode,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    YamlConfigSettingsSource,
)

from graywire.collectors import extras
from graywire.collectors.discovery import ExpectRule, PurposeRule
from graywire.collectors.host.config import AgentSourceConfig
from graywire.collectors.nccl import NcclSourceConfig
from graywire.collectors.nccl.config import NcclRasSourceConfig
from graywire.collectors.prometheus import PrometheusSourceConfig
from graywire.collectors.snmp import SnmpSourceConfig
from graywire.collectors.ufm import UfmSourceConfig
from graywire.collectors.units import Duration, PositiveDuration
from graywire.detectors.findings import Severity
from graywire.service.alert_settings import AlertsSettings
from graywire.service.schedsync.slurm import parse_hostlist
from graywire.service.simulated import FabricSimSource

if TYPE_CHECKING:
    from importlib.resources.abc import Traversable


def _source_type(v: Any) -> str | None:
    """The ``type`` of a source entry. It is required: a UFM entry missing it must not quietly
    become a simulated fabric."""
    return v.get("type") if isinstance(v, dict) else getattr(v, "type", None)


SourceConfig = Annotated[
    Annotated[FabricSimSource, Tag("fabricsim")]
    | Annotated[NcclSourceConfig, Tag("nccl")]
    | Annotated[AgentSourceConfig, Tag("agent")]
    | Annotated[SnmpSourceConfig, Tag("snmp")]
    | Annotated[UfmSourceConfig, Tag("ufm")]
    | Annotated[PrometheusSourceConfig, Tag("prometheus")]
    | Annotated[NcclRasSourceConfig, Tag("nccl_ras")],
    Discriminator(
        _source_type,
        custom_error_type="source_type",
        custom_error_message=(
            "each source needs a type: fabricsim, ufm, snmp, agent, nccl, nccl_ras or prometheus"
        ),
    ),
]


class ArchiveSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")
    enabled: bool = True
    retention: Duration = timedelta(hours=72)
    roll: Duration = timedelta(minutes=5)


class MetricsSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")
    #: Per-port and per-rank series. Off on very large fabrics: leaf/rail/channel aggregates stay.
    per_port: bool = True
    #: With per-port series: the sources' cumulative counters too (``graywire_port_*_total``,
    #: one series per port and source), so Prometheus's ``rate()`` works at any scrape interval.
    raw_counters: bool = True


class StatusPageSettings(BaseModel):
    """The status page at ``/`` (README, Status page)."""

    model_config = ConfigDict(extra="forbid")
    #: Grafana's base URL (e.g. ``http://grafana:3000``): each incident links to its port on the
    #: Port detail dashboard. None: no link.
    grafana_url: str | None = Field(None, pattern=r"^https?://[^\s/?#]+[^\s?#]*$", max_length=500)

    @field_validator("grafana_url")
    @classmethod
    def _no_trailing_slash(cls, v: str | None) -> str | None:
        return v.rstrip("/") if v else v


class DrainSettings(BaseModel):
    """The drain policy (docs/drain.md): shadow mode, circuit breaker, clean window, cooldown."""

    model_config = ConfigDict(extra="forbid")
    #: Recommend, never act: every item says ``shadow: true`` and the sync tools only report.
    #: On until set: a first install watches what it would do before it does it (docs/drain.md).
    shadow: bool = True
    #: Circuit breaker: at most ``max(min_nodes, max_fraction × hosts)`` hosts newly drained
    #: within ``window``, and at most ``max_nodes`` when set.
    max_fraction: float = Field(0.10, gt=0, le=1)
    min_nodes: int = Field(2, ge=1)
    max_nodes: int | None = Field(None, ge=1)
    #: Positive: a zero window would count no earlier drain, so the cap would apply per poll.
    window: PositiveDuration = timedelta(minutes=10)
    #: A drained node returns to service after this long without any verdict.
    clean_window: Duration = timedelta(minutes=10)
    #: A node that returned to service is only watched, not drained, for this long.
    cooldown: Duration = timedelta(minutes=30)
    #: Host and link verdicts at or above this severity drain; below it they are watched.
    min_severity: Severity = Severity.WARNING
    #: Timings a job pushed (``POST /api/v1/ingest/nccl``) are the least trusted input: alone
    #: they only put a host on watch. True lets them drain like collected data.
    trust_pushed: bool = False


class HttpSettings(BaseModel):
    """Limits of the HTTP server (uvicorn) itself (docs/security.md)."""

    model_config = ConfigDict(extra="forbid")
    #: Connections (and tasks) served at once; past it new requests get a 503 at once.
    max_connections: int = Field(1000, ge=1)
    #: Connections one peer address may hold at once; past it a new one gets a 503 and is
    #: closed. Behind a proxy every client has the proxy's address: raise it there, or 0 (none).
    max_connections_per_client: int = Field(128, ge=0)
    #: An idle keep-alive connection is closed after this long.
    keep_alive: PositiveDuration = timedelta(seconds=5)
    #: A connection must deliver each request head (request line and headers) this soon after
    #: it opens or its first byte, or it is closed: slow clients cannot hold connections.
    header_timeout: PositiveDuration = timedelta(seconds=10)
    #: Largest request headers; bigger ones are a 431 before any route runs.
    max_header_bytes: int = Field(16 * 1024, ge=1024)
    #: A line per request (uvicorn's access log). Off by default: at hundreds of requests a
    #: second it is about half of each request's CPU, and a fronting proxy logs them anyway.
    access_log: bool = False
    #: How long a rendered drain or incident list may be served again. Any write through this
    #: process drops it at once; the limit is for writes by another process on the database.
    #: ``0s``: never serve a rendered list again.
    read_cache_ttl: Duration = timedelta(seconds=1)


class TlsSettings(BaseModel):
    """TLS on the API (docs/security.md, Tokens in transit): a certificate and its key turn it
    on; a client CA makes it mutual (every client must present a certificate it signed)."""

    model_config = ConfigDict(extra="forbid")
    #: The server's certificate chain (PEM), and its private key (PEM).
    certfile: Path | None = None
    keyfile: Path | None = None
    #: Clients must present a certificate signed by this CA (PEM): mutual TLS. Replicas then
    #: present ``certfile`` to the leader, so it must allow client authentication too.
    client_ca: Path | None = None
    #: The CA (PEM) a replica trusts for the leader's certificate when it relays a request;
    #: default: the system's trust store.
    ca: Path | None = None

    @model_validator(mode="after")
    def _complete(self) -> TlsSettings:
        if (self.certfile is None) != (self.keyfile is None):
            raise ValueError("tls.certfile and tls.keyfile go together: give both, or neither")
        if self.certfile is None and (self.client_ca is not None or self.ca is not None):
            raise ValueError("tls.client_ca and tls.ca need tls.certfile and tls.keyfile (TLS on)")
        for name in ("certfile", "keyfile", "client_ca", "ca"):
            path = getattr(self, name)
            if path is not None and not Path(path).is_file():
                raise ValueError(f"tls.{name}: no such file: {path}")
        return self

    @property
    def enabled(self) -> bool:
        return self.certfile is not None


class ClusterSettings(BaseModel):
    """Several replicas (docs/architecture.md, Replicas): each scrapes a share of the targets and
    publishes it to NATS JetStream; one leader, holding a lease in PostgreSQL, judges every poll
    and decides (incidents, drains, alerts); every replica serves the read API and /metrics.

    Timings left unset follow ``poll_interval`` (``Settings.cluster_timing``).
    """

    model_config = ConfigDict(extra="forbid")
    #: The NATS server(s) with JetStream: ``nats://host:4222``, or a list of a cluster's servers
    #: (in ``GRAYWIRE_CLUSTER__NATS_URL``, comma-separated).
    nats_url: Annotated[list[str], NoDecode] = Field(min_length=1)
    #: A NATS credentials file (``.creds``: the user's JWT and NKey seed), if the server wants one.
    nats_credentials: Path | None = None
    #: This replica's name among the members; default: ``<hostname>:<port>``. A restarted
    #: replica keeps its share of the targets by keeping its name.
    member_id: str | None = Field(None, min_length=1, max_length=200, pattern=r"^[^\s]+$")
    #: Where the other replicas reach this one's API (requests only the leader answers are
    #: forwarded there); default: ``http://<hostname>:<port>``.
    advertise_url: str | None = Field(None, pattern=r"^https?://[^\s/?#]+[^\s?#]*$", max_length=500)
    #: May hold the decision lease (false: a collector-only member).
    lead: bool = True
    #: Scrapes a share of the targets (false: a member that only decides and serves).
    collect: bool = True
    #: How long the leader's lease lasts unrenewed: a dead leader is replaced this long after its
    #: last renewal. Default 1.25 poll intervals (at least 2 s).
    lease_ttl: PositiveDuration | None = None
    #: How long a member counts as alive after its last heartbeat: a dead member's targets move
    #: to the others this long after it stopped. Default 1.25 poll intervals (at least 2 s).
    member_ttl: PositiveDuration | None = None
    #: How long the stream keeps scrapes: a new leader replays this much to warm its detectors
    #: up (30 minutes covers every default detector's window but BER's 125-minute ones), and a
    #: leader that falls behind catches up within it.
    history: PositiveDuration = timedelta(minutes=30)
    #: How much of that a new leader replays before it judges live (default: all of it). The
    #: replay runs at the leader's judging speed: a large fabric judged in seconds a poll
    #: replays 30 minutes (180 polls at 10 s) in minutes, and decides nothing meanwhile.
    warmup: PositiveDuration | None = None
    #: The JetStream stream, its subjects' first token, and its replicas on a NATS cluster.
    stream: str = Field("GRAYWIRE", pattern=r"^[A-Za-z0-9_-]{1,64}$")
    subject_prefix: str = Field("graywire", pattern=r"^[A-Za-z0-9_-]{1,64}$")
    stream_replicas: int = Field(1, ge=1, le=5)
    #: The stream's size limit; its oldest scrapes go first.
    stream_max_bytes: int = Field(8 * 2**30, ge=2**20)

    @field_validator("nats_url", mode="before")
    @classmethod
    def _one_or_many(cls, v: Any) -> Any:
        return [u.strip() for u in v.split(",") if u.strip()] if isinstance(v, str) else v

    @field_validator("nats_url")
    @classmethod
    def _nats_urls(cls, v: list[str]) -> list[str]:
        for url in v:
            if not url.startswith(("nats://", "tls://", "ws://", "wss://")):
                raise ValueError(f"{url!r} is not a NATS URL (nats://host:4222)")
        return v

    @model_validator(mode="after")
    def _has_a_part(self) -> ClusterSettings:
        if not self.lead and not self.collect:
            raise ValueError(
                "a member must lead, collect, or both (cluster.lead and cluster.collect are false)"
            )
        return self


class RateLimit(BaseModel):
    """A token bucket per token that pushes: ``requests_per_second`` refill, ``burst`` capacity.

    Rows are limited too when ``rows_per_second`` is set: a push needs as many row tokens as it
    has rows, from a bucket holding ``rows_burst`` (default: ten seconds' worth).
    """

    model_config = ConfigDict(extra="forbid")
    requests_per_second: float = Field(10.0, gt=0)
    burst: int = Field(20, ge=1)
    rows_per_second: float | None = Field(None, gt=0)
    rows_burst: int | None = Field(None, ge=1)

    @model_validator(mode="after")
    def _rows_burst_needs_a_rate(self) -> RateLimit:
        if self.rows_burst is not None and self.rows_per_second is None:
            raise ValueError("rows_burst needs rows_per_second")
        return self

    @property
    def row_capacity(self) -> float | None:
        if self.rows_per_second is None:
            return None
        return float(self.rows_burst) if self.rows_burst is not None else 10 * self.rows_per_second


class IngestSettings(BaseModel):
    """What ``POST /api/v1/ingest/nccl`` accepts (docs/security.md)."""

    model_config = ConfigDict(extra="forbid")
    #: A push naming hosts outside the fabric model: refuse it whole (422), or drop those rows
    #: and count them (``graywire_rejected_rows{reason="unknown_host"}``).
    unknown_hosts: Literal["reject", "drop"] = "reject"
    #: A push dated further ahead of graywire's clock than this is refused: data never decides
    #: what "now" is.
    max_clock_skew: PositiveDuration = timedelta(minutes=5)
    #: A push older than this is refused (its incidents would open in the past).
    max_age: PositiveDuration = timedelta(hours=1)
    #: Communicators pushes may keep alive at once (each one grows the push detectors' state); a push that
    #: would add more is refused. One is forgotten ``max_age`` after its last push.
    max_communicators: int = Field(4096, ge=1)
    #: The same, per job: one job's flood cannot use up the room every other job pushes into.
    max_communicators_per_job: int = Field(1024, ge=1)
    #: Each token that pushes gets its own bucket (a token's own ``rate_limit`` replaces this);
    #: null: no limit.
    rate_limit: RateLimit | None = Field(default_factory=RateLimit)


class TokenScope(BaseModel):
    """The jobs an ``ingest`` token may push for, and the hosts those pushes may name.

    A push's ``job`` must match one of ``jobs`` (shell patterns); every host it names must be in
    ``hosts`` or, with ``scheduler``, one the scheduler says that job runs on now.
    """

    model_config = ConfigDict(extra="forbid")
    jobs: list[str] = Field(default_factory=lambda: ["*"], min_length=1)
    #: Hostlist expressions (``gpu-00[01-16]``), or a list of them.
    hosts: list[str] = Field(default_factory=list)
    scheduler: Literal["slurm", "slurmrest", "kubernetes"] | None = None

    @field_validator("hosts", mode="before")
    @classmethod
    def _one_or_many(cls, v: Any) -> Any:
        return [v] if isinstance(v, str) else v

    @field_validator("jobs")
    @classmethod
    def _patterns(cls, v: list[str]) -> list[str]:
        if any(not p.strip() for p in v):
            raise ValueError("a job pattern may not be empty")
        return v

    @field_validator("hosts")
    @classmethod
    def _hostlists(cls, v: list[str]) -> list[str]:
        for expr in v:
            parse_hostlist(expr)
        return v

    @model_validator(mode="after")
    def _some_host(self) -> TokenScope:
        if not self.hosts and self.scheduler is None:
            raise ValueError("a scope needs hosts, a scheduler, or both: otherwise it allows no host")
        return self

    @property
    def static_hosts(self) -> NodeSet:
        return parse_hostlist(",".join(self.hosts)) if self.hosts else NodeSet()


class ApiToken(BaseModel):
    """A bearer token and what it may do. ``token`` or ``token_file`` (one line), not both."""

    model_config = ConfigDict(extra="forbid")
    name: str = Field(min_length=1, description="who the token belongs to; named in the audit log")
    role: Literal["reader", "ingest", "operator"]
    token: str | None = Field(None, min_length=16)
    token_file: Path | None = None
    #: ``ingest`` tokens only: the jobs and hosts its pushes may name (none: any fabric host).
    scope: TokenScope | None = None
    #: Replaces ``ingest.rate_limit`` for this token.
    rate_limit: RateLimit | None = None

    @model_validator(mode="after")
    def _one_secret(self) -> ApiToken:
        if (self.token is None) == (self.token_file is None):
            raise ValueError(f"token {self.name!r}: give exactly one of token and token_file")
        if self.scope is not None and self.role != "ingest":
            raise ValueError(f"token {self.name!r}: a scope applies to ingest tokens, not {self.role}")
        return self


class AuthSettings(BaseModel):
    """Bearer tokens for the API (README, HTTP API; docs/security.md). Changing state always needs a token."""

    model_config = ConfigDict(extra="forbid")
    #: Whether read endpoints (GET) answer without a token.
    read_open: bool = True
    tokens: list[ApiToken] = Field(default_factory=list)


class SlurmCliSettings(BaseModel):
    """Slurm's commands, as graywire runs them (``SLURM_CONF`` applies)."""

    model_config = ConfigDict(extra="forbid")
    squeue: str = "squeue"


class SlurmRestSettings(BaseModel):
    """slurmrestd, with the JWT headers ``slurm-sync --slurmrestd`` sends.

    ``token_file`` is read again at every lookup, so a JWT renewed on disk is picked up.
    """

    model_config = ConfigDict(extra="forbid")
    url: str = Field(min_length=1)
    user: str | None = None
    token: str | None = None
    token_file: Path | None = None
    api_version: str = Field("v0.0.41", pattern=r"^v\d+\.\d+\.\d+$")

    @model_validator(mode="after")
    def _at_most_one_secret(self) -> SlurmRestSettings:
        if self.token is not None and self.token_file is not None:
            raise ValueError("give at most one of token and token_file")
        return self


class KubernetesSettings(BaseModel):
    """The API server (kubeconfig or the pod's service account), as ``k8s-sync`` reaches it.

    A job is found by its pods: ``job_label=<job>`` in ``namespace`` (a push's ``job`` may
    also be ``<namespace>/<name>``), and its hosts are the ``spec.nodeName`` of running ones.
    """

    model_config = ConfigDict(extra="forbid")
    kubeconfig: Path | None = None
    context: str | None = None
    in_cluster: bool = False
    namespace: str = "default"
    job_label: str = "batch.kubernetes.io/job-name"


class SchedulerSettings(BaseModel):
    """How graywire itself asks a scheduler where a job runs (ingest token scopes)."""

    model_config = ConfigDict(extra="forbid")
    #: An answer is reused this long, so a push flood does not ask the scheduler per request.
    cache: Duration = timedelta(seconds=30)
    timeout: PositiveDuration = timedelta(seconds=10)
    slurm: SlurmCliSettings = Field(default_factory=SlurmCliSettings)
    slurmrest: SlurmRestSettings | None = None
    kubernetes: KubernetesSettings = Field(default_factory=KubernetesSettings)


@dataclass(frozen=True, slots=True)
class ClusterTiming:
    """Seconds: the lease's and a heartbeat's lifetime, and how often both are renewed."""

    lease_ttl: float
    member_ttl: float
    tick: float


class ConfigFile(YamlConfigSettingsSource):
    """The YAML file, refused with a message naming it when it is not a mapping of settings."""

    def _read_file(self, file_path: Path | Traversable) -> dict[str, Any]:
        try:
            doc = super()._read_file(file_path)
        except yaml.YAMLError as e:
            raise ValueError(f"config {file_path} is not valid YAML: {e}") from e
        if not isinstance(doc, dict):
            raise ValueError(f"config {file_path} must be a mapping of settings")
        return doc


ENV_PREFIX = "GRAYWIRE_"


class DiscoverySettings(BaseModel):
    """Rules for ``inventory: discover`` (the same as ``graywire inventory discover``'s flags)."""

    model_config = ConfigDict(extra="forbid")
    #: ``GLOB=PURPOSE``: host port labels matching GLOB are compute, storage or management.
    purpose: list[str] = Field(default_factory=list)
    #: ``SELECTORS:SPEED[/WIDTH]``: expected speed/width of matching ports, first rule wins.
    expect: list[str] = Field(default_factory=list)

    @field_validator("purpose")
    @classmethod
    def _purpose(cls, v: list[str]) -> list[str]:
        for rule in v:
            PurposeRule.parse(rule)
        return v

    @field_validator("expect")
    @classmethod
    def _expect(cls, v: list[str]) -> list[str]:
        for rule in v:
            ExpectRule.parse(rule)
        return v


class Settings(BaseSettings):
    model_config = SettingsConfigDict(
        env_prefix=ENV_PREFIX, env_nested_delimiter="__", extra="forbid", yaml_file=None
    )

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        """Highest first: arguments, ``GRAYWIRE_*`` variables, the YAML file (``yaml_file``);
        so GRAYWIRE_PORT=9000 beats ``port:`` in the file, and ``--port`` beats both."""
        return init_settings, env_settings, ConfigFile(settings_cls)

    host: str = "127.0.0.1"
    port: int = Field(8000, ge=1, le=65_535)
    data_dir: Path = Path("graywire-data")
    database_url: str | None = None
    poll_interval: PositiveDuration = timedelta(seconds=10)
    #: Per-scrape time limit; default: 80% of the poll interval.
    scrape_timeout: PositiveDuration | None = None
    #: Scrapes running at once in this process; the rest of a poll's targets wait their turn
    #: (within the scrape timeout).
    max_concurrent_scrapes: int = Field(256, ge=1)
    #: Longest wait before retrying a failing target (backoff doubles from one interval).
    max_backoff: PositiveDuration = timedelta(minutes=5)
    #: A target's ports are stale once its last good scrape is older than this many polls.
    stale_after_polls: int = Field(1, ge=1)
    #: The fabric model: an inventory file, or ``discover`` to build it from the sources.
    inventory: Literal["discover"] | Path | None = None
    #: Beside a declared inventory: discover at start-up too and compare (the file stays the
    #: model), and have the snmp sources send LLDP link views unless they say otherwise.
    discover: bool = False
    discovery: DiscoverySettings = Field(default_factory=DiscoverySettings)
    #: NVIDIA's field BER thresholds CSV (UFM PDR plugin's Field_BER_Thresholds.csv).
    ber_thresholds: Path | None = None
    #: Add the IsolationForest port-outlier detector (opt-in, see docs/detectors.md).
    multivariate_outliers: bool = False
    #: Detector settings other than their defaults: ``{detector: {setting: value}}``
    #: (detectors/tuning.py; every setting is in docs/detectors.md).
    detectors: dict[str, dict[str, Any]] = Field(default_factory=dict)
    #: What to collect from. No default: a service with nothing configured is an error, never a
    #: silent simulation (``type: fabricsim`` runs the built-in synthetic fabric, when asked).
    sources: list[SourceConfig] = Field(default_factory=list)
    #: Largest body accepted by the NCCL push endpoint.
    max_push_bytes: int = Field(16 * 2**20, ge=1024)
    ingest: IngestSettings = Field(default_factory=IngestSettings)
    http: HttpSettings = Field(default_factory=HttpSettings)
    tls: TlsSettings = Field(default_factory=TlsSettings)
    archive: ArchiveSettings = Field(default_factory=ArchiveSettings)
    metrics: MetricsSettings = Field(default_factory=MetricsSettings)
    drain: DrainSettings = Field(default_factory=DrainSettings)
    auth: AuthSettings = Field(default_factory=AuthSettings)
    scheduler: SchedulerSettings = Field(default_factory=SchedulerSettings)
    alerts: AlertsSettings = Field(default_factory=AlertsSettings)
    status_page: StatusPageSettings = Field(default_factory=StatusPageSettings)
    #: Several replicas sharing collection and one decision leader; None: one process does all.
    cluster: ClusterSettings | None = None

    @field_validator("detectors")
    @classmethod
    def _known_detector_settings(cls, v: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
        from graywire.detectors.tuning import check

        check(v)  # an unknown detector or setting stops start-up, naming it
        return v

    @model_validator(mode="after")
    def _discover_has_an_inventory(self) -> Settings:
        if self.discover and self.inventory is None:
            raise ValueError("discover: true compares discovery with a declared inventory: set `inventory:` "
                             "to the file, or to `discover` to take the model from discovery")  # fmt: skip
        return self

    @model_validator(mode="after")
    def _scopes_have_their_scheduler(self) -> Settings:
        for t in self.auth.tokens:
            if t.scope is not None and t.scope.scheduler == "slurmrest" and self.scheduler.slurmrest is None:
                raise ValueError(f"token {t.name!r}: scope scheduler slurmrest needs scheduler.slurmrest.url")
        return self

    @model_validator(mode="after")
    def _relays_over_tls(self) -> Settings:
        url = self.cluster.advertise_url if self.cluster is not None else None
        if self.tls.enabled and url is not None and not url.startswith("https://"):
            raise ValueError(
                f"cluster.advertise_url {url!r}: with tls on, replicas reach each other over "
                "https:// only (a relayed request carries the client's token)"
            )
        return self

    @model_validator(mode="after")
    def _cluster_shares_postgres(self) -> Settings:
        if self.cluster is not None and not (self.database_url or "").startswith("postgresql"):
            raise ValueError(
                "cluster: needs database_url on PostgreSQL (postgresql+psycopg://...): the replicas "
                "share their membership, the leader's lease and every decision through it; SQLite "
                "serves one replica only"
            )
        return self

    def check_extras(self) -> None:
        """Raise ``MissingExtra`` (one line per feature) when a configured feature needs an
        optional dependency that is not installed: at start-up, before any source runs."""
        needs = [(m, f) for m, f in self._optional_features() if not extras.available(m)]
        if needs:
            lines = [extras.missing_message(m, f) for m, f in needs]
            raise extras.MissingExtra("\n".join(lines), name=needs[0][0])

    def _optional_features(self) -> list[tuple[str, str]]:
        """(module, what needs it) for every configured feature that needs an optional extra."""
        out = []
        for i, src in enumerate(self.sources):
            if isinstance(src, SnmpSourceConfig):
                names = [t.name or t.host for t in src.targets]
                shown = ", ".join(names[:3]) + (f", ... ({len(names)} switches)" if len(names) > 3 else "")
                out.append(("pysnmp", f"sources.{i} (type snmp: {shown})"))
        if self.multivariate_outliers:
            out.append(("sklearn", "multivariate_outliers: true"))
        if self.cluster is not None:
            out.append(("nats", "cluster (NATS JetStream)"))
        if self.database_url and self.database_url.startswith(("postgresql+psycopg", "postgresql:")):
            out.append(("psycopg", "database_url (PostgreSQL)"))
        for t in self.auth.tokens:
            if t.scope is not None and t.scope.scheduler == "kubernetes":
                out.append(("kubernetes", f"token {t.name!r} (scope scheduler kubernetes)"))
        return out

    @property
    def scrape_timeout_seconds(self) -> float:
        return (self.scrape_timeout or 0.8 * self.poll_interval).total_seconds()

    @property
    def poll_seconds(self) -> float:
        return self.poll_interval.total_seconds()

    @property
    def cluster_timing(self) -> ClusterTiming:
        """The cluster's lease and membership timings, defaults filled in from the poll interval."""
        c = self.cluster
        if c is None:
            raise ValueError("no cluster: section in the settings")
        default = max(1.25 * self.poll_seconds, 2.0)
        lease = c.lease_ttl.total_seconds() if c.lease_ttl else default
        member = c.member_ttl.total_seconds() if c.member_ttl else default
        return ClusterTiming(lease, member, min(lease, member) / 4)

    @property
    def db_url(self) -> str:
        return self.database_url or f"sqlite:///{self.data_dir / 'graywire.db'}"

    @property
    def archive_dir(self) -> Path:
        return self.data_dir / "archive"


def env_setting(name: str) -> str | None:
    """One top-level setting's ``GRAYWIRE_*`` variable as text (None: unset or empty), for the
    offline commands that need that one alone: they must not fail on the service's others."""
    if name not in Settings.model_fields:
        raise KeyError(f"no setting {name!r}")
    return os.environ.get(ENV_PREFIX + name.upper()) or None


@lru_cache(maxsize=16)
def _reading(path: Path) -> type[Settings]:
    """Settings whose YAML source reads ``path``. pydantic-settings takes the file from the
    model config, not from an argument, so each file gets a subclass that names it."""

    class FileSettings(Settings):
        model_config = SettingsConfigDict(yaml_file=path)

    return FileSettings


def load_settings(path: str | Path | None = None, **overrides: Any) -> Settings:
    """Settings from an optional YAML file plus overrides (None: not given); errors name the
    bad key."""
    settings_cls = Settings
    if path is not None:
        p = Path(path)
        try:
            p.open("rb").close()  # the YAML source skips a missing file; a named one must exist
        except OSError as e:
            raise ValueError(f"cannot read config {p}: {e.strerror}") from e
        settings_cls = _reading(p)
    try:
        return settings_cls(**{k: v for k, v in overrides.items() if v is not None})
    except ValidationError as e:
        lines = [f"  {'.'.join(str(x) for x in err['loc'])}: {_explain(err)}" for err in e.errors()]
        raise ValueError("invalid configuration:\n" + "\n".join(lines)) from None


SOURCE_TYPES = ("fabricsim", "ufm", "snmp", "agent", "nccl", "nccl_ras", "prometheus")


def _known_keys(model: Any = None, seen: set[Any] | None = None) -> set[str]:
    """Every key any part of the configuration takes (for "did you mean")."""
    model, seen = model or Settings, seen if seen is not None else set()
    if model in seen:
        return set()
    seen.add(model)
    keys: set[str] = set()
    for name, info in model.model_fields.items():
        keys.add(name)
        stack = [info.annotation]
        while stack:
            tp = stack.pop()
            if isinstance(tp, type) and issubclass(tp, BaseModel):
                keys |= _known_keys(tp, seen)
            stack.extend(getattr(tp, "__args__", ()) or ())
            stack.extend((getattr(tp, "__metadata__", ()) and ()) or ())
            origin = getattr(tp, "__origin__", None)
            if origin is not None and origin is not tp:
                stack.append(origin)
    return keys


#: Keys a reader of the design might expect that are deliberately not settings, and why.
_NOT_SETTINGS = {
    ("cluster", "members_table"): (
        "the members are rows of the table cluster_members, made by the migrations with the rest "
        "of the schema (docs/architecture.md, Replicas); remove the key"
    ),
}


def _explain(err: Any) -> str:
    """pydantic's message, with what the user most likely meant where a name is wrong."""
    if err["type"] == "source_type":
        given = err["input"].get("type") if isinstance(err.get("input"), dict) else None
        if given is None:
            return err["msg"]
        near = difflib.get_close_matches(str(given), SOURCE_TYPES, n=1)
        hint = f" (did you mean {near[0]}?)" if near else ""
        return f"unknown source type {given!r}{hint}; use one of {', '.join(SOURCE_TYPES)}"
    if err["type"] == "extra_forbidden":
        name = str(err["loc"][-1])
        why = _NOT_SETTINGS.get(tuple(map(str, err["loc"])))
        if why:
            return f"{name!r} is not a setting: {why}"
        near = difflib.get_close_matches(name, sorted(_known_keys()), n=1, cutoff=0.75)
        return f"unknown key {name!r}" + (f" (did you mean {near[0]!r}?)" if near else "")
    return err["msg"]
