"""Client for graywire's drain API (``GET /api/v1/drain`` and ``/api/v1/drain/state``).

The sync tools act on a cluster's scheduler, so anything short of a complete, well-formed
answer is an error (``DrainListUnavailable``), never an empty list: an empty list would
resume every node graywire drained.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

import httpx

DRAIN_PATH = "/api/v1/drain"
STATE_PATH = "/api/v1/drain/state"


class DrainListUnavailable(RuntimeError):
    """The drain list could not be read or was malformed; the caller must not act."""


@dataclass(frozen=True)
class DrainEntry:
    node: str
    action: Literal["drain", "watch"]
    reason: str
    since: datetime
    incident_ids: tuple[int, ...] = ()
    evidence_url: str = ""
    shadow: bool = False


@dataclass(frozen=True)
class DrainState:
    shadow: bool
    breaker_tripped: bool
    breaker: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class DrainList:
    entries: tuple[DrainEntry, ...]
    state: DrainState

    def drain(self) -> dict[str, DrainEntry]:
        """Nodes to drain now: action ``drain`` and not a shadow recommendation."""
        return {e.node: e for e in self.entries if e.action == "drain" and not e.shadow}

    def held(self) -> set[str]:
        """Nodes still recommended for drain in shadow: keep as they are, neither drain nor resume."""
        return {e.node for e in self.entries if e.action == "drain" and e.shadow}


def _require(obj: dict[str, Any], key: str, kind: type | tuple[type, ...], where: str) -> Any:
    if key not in obj:
        raise DrainListUnavailable(f"{where}: missing {key!r}")
    value = obj[key]
    if not isinstance(value, kind) or (kind is not bool and isinstance(value, bool)):
        raise DrainListUnavailable(f"{where}: {key!r} has the wrong type ({type(value).__name__})")
    return value


def parse_entry(obj: Any, index: int = 0) -> DrainEntry:
    where = f"drain list item {index}"
    if not isinstance(obj, dict):
        raise DrainListUnavailable(f"{where} is not an object")
    node = _require(obj, "node", str, where)
    if not node.strip():
        raise DrainListUnavailable(f"{where}: empty node name")
    action = _require(obj, "action", str, where)
    if action not in ("drain", "watch"):
        raise DrainListUnavailable(f"{where}: unknown action {action!r}")
    since_raw = _require(obj, "since", str, where)
    try:
        since = datetime.fromisoformat(since_raw.replace("Z", "+00:00"))
    except ValueError as e:
        raise DrainListUnavailable(f"{where}: 'since' is not ISO-8601: {since_raw!r}") from e
    ids = obj.get("incident_ids", [])
    if not isinstance(ids, list) or not all(isinstance(i, int) and not isinstance(i, bool) for i in ids):
        raise DrainListUnavailable(f"{where}: 'incident_ids' must be a list of integers")
    evidence = obj.get("evidence_url") or ""
    if not isinstance(evidence, str):
        raise DrainListUnavailable(f"{where}: 'evidence_url' must be a string")
    shadow = obj.get("shadow", False)
    if not isinstance(shadow, bool):
        raise DrainListUnavailable(f"{where}: 'shadow' must be a boolean")
    return DrainEntry(
        node=node.strip(),
        action=action,  # type: ignore[arg-type]
        reason=_require(obj, "reason", str, where),
        since=since,
        incident_ids=tuple(ids),
        evidence_url=evidence,
        shadow=shadow,
    )


def parse_state(obj: Any) -> DrainState:
    if not isinstance(obj, dict):
        raise DrainListUnavailable("drain state is not an object")
    shadow = _require(obj, "shadow", bool, "drain state")
    breaker = _require(obj, "circuit_breaker", dict, "drain state")
    tripped = _require(breaker, "tripped", bool, "drain state circuit_breaker")
    return DrainState(shadow=shadow, breaker_tripped=tripped, breaker=breaker)


def parse_drain_list(entries: Any, state: Any) -> DrainList:
    if not isinstance(entries, list):
        raise DrainListUnavailable("drain list is not a JSON array")
    parsed = tuple(parse_entry(e, i) for i, e in enumerate(entries))
    return DrainList(entries=parsed, state=parse_state(state))


class DrainListClient:
    """Reads the drain list and its state from one graywire API base URL."""

    def __init__(
        self,
        base_url: str,
        token: str | None = None,
        timeout: float = 10.0,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        headers = {"Accept": "application/json"}
        if token:
            headers["Authorization"] = f"Bearer {token}"
        self.base_url = base_url.rstrip("/")
        self._http = httpx.Client(
            base_url=self.base_url, headers=headers, timeout=timeout, transport=transport
        )

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> DrainListClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _get_json(self, path: str) -> Any:
        url = f"{self.base_url}{path}"
        try:
            r = self._http.get(path)
        except httpx.HTTPError as e:
            raise DrainListUnavailable(f"{url} unreachable: {e or type(e).__name__}") from e
        if r.status_code != 200:
            detail = r.text.strip().replace("\n", " ")[:200]
            raise DrainListUnavailable(f"{url} answered HTTP {r.status_code}: {detail}")
        try:
            return r.json()
        except ValueError as e:
            raise DrainListUnavailable(f"{url} did not return JSON") from e

    def fetch(self) -> DrainList:
        """Both documents or an error: a list without its shadow flag must not be acted on."""
        state = self._get_json(STATE_PATH)
        entries = self._get_json(DRAIN_PATH)
        return parse_drain_list(entries, state)
