"""Slurm through slurmrestd (``/slurm/v0.0.41``) instead of ``scontrol``, for hosts without Slurm's CLI.

Same planning as the ``scontrol`` backend (``plan_slurm``); only the transport differs:
``GET /slurm/{v}/nodes`` lists nodes with ``state`` as an array of flags (``["IDLE", "DRAIN"]``),
``POST /slurm/{v}/node/{name}`` with ``{"state": ["DRAIN"], "reason": ...}`` or
``{"state": ["RESUME"]}`` changes one; ``GET /slurm/{v}/job/{id}`` says where a job runs
(``jobs[].nodes``, a hostlist). Authentication is a JWT in ``X-SLURM-USER-TOKEN``
(``scontrol token``) with the user in ``X-SLURM-USER-NAME``.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

import httpx
from ClusterShell.NodeSet import RESOLVER_NOGROUP, NodeSet

from graywire.service.schedsync.drainlist import DrainList
from graywire.service.schedsync.plan import Action, Plan, SchedulerError
from graywire.service.schedsync.slurm import ACTIVE_STATES, JOB_ID, SlurmNode, parse_hostlist, plan_slurm

API_VERSION = "v0.0.41"
#: ESLURM_INVALID_JOB_ID: slurmrestd answers an unknown job with it (22.05: HTTP 500).
INVALID_JOB_ID = 2017


class SlurmRestError(SchedulerError):
    """A failed call, with what slurmrestd said: its HTTP status and Slurm error numbers."""

    def __init__(
        self, message: str, status: int | None = None, numbers: frozenset[int] = frozenset()
    ) -> None:
        super().__init__(message)
        self.status = status
        self.numbers = numbers


def node_from_json(obj: dict[str, Any]) -> SlurmNode:
    state = obj.get("state") or []
    if isinstance(state, str):  # before v0.0.39: a base state string plus "state_flags"
        state = [state, *(obj.get("state_flags") or [])]
    return SlurmNode(name=str(obj["name"]), state="+".join(state), reason=str(obj.get("reason") or ""))


def _errors(body: Any) -> str:
    if isinstance(body, dict):
        errs = body.get("errors") or []
        msgs = [e.get("description") or e.get("error") or str(e) for e in errs if isinstance(e, dict)]
        return "; ".join(m for m in msgs if m)
    return ""


def _error_numbers(body: Any) -> frozenset[int]:
    errs = body.get("errors") if isinstance(body, dict) else None
    return frozenset(
        e["error_number"]
        for e in errs or []
        if isinstance(e, dict) and isinstance(e.get("error_number"), int)
    )


def _job_state(obj: dict[str, Any]) -> set[str]:
    """``job_state``: an array of flags since v0.0.40 (``["RUNNING"]``), a string before."""
    state = obj.get("job_state") or []
    return {state} if isinstance(state, str) else {str(s) for s in state}


class SlurmRestBackend:
    name = "slurm"

    def __init__(
        self,
        url: str,
        user: str | None = None,
        token: str | None = None,
        api_version: str = API_VERSION,
        timeout: float = 30.0,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        headers = {"Accept": "application/json"}
        if user:
            headers["X-SLURM-USER-NAME"] = user
        if token:
            headers["X-SLURM-USER-TOKEN"] = token
        self.prefix = f"/slurm/{api_version}"
        self._http = httpx.Client(
            base_url=url.rstrip("/"), headers=headers, timeout=timeout, transport=transport
        )

    def close(self) -> None:
        self._http.close()

    def _call(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        what = f"slurmrestd {method} {self.prefix}{path}"
        try:
            r = self._http.request(method, f"{self.prefix}{path}", json=body)
        except httpx.HTTPError as e:
            raise SchedulerError(f"{what}: {e or type(e).__name__}") from e
        try:
            data = r.json()
        except ValueError:
            data = None
        errors = _errors(data)
        if r.status_code >= 400 or errors:
            raise SlurmRestError(
                f"{what}: HTTP {r.status_code}: {errors or r.text.strip()[:200]}",
                r.status_code,
                _error_numbers(data),
            )
        if not isinstance(data, dict):
            raise SchedulerError(f"{what}: the answer is not a JSON object")
        return data

    def nodes(self) -> list[SlurmNode]:
        return [node_from_json(n) for n in self._call("GET", "/nodes").get("nodes") or []]

    def node(self, name: str) -> SlurmNode | None:
        try:
            nodes = self._call("GET", f"/node/{quote(name, safe='')}").get("nodes") or []
        except SchedulerError as e:
            if "HTTP 404" in str(e) or "not found" in str(e).lower():
                return None
            raise
        return next((node_from_json(n) for n in nodes if n.get("name") == name), None)

    def use_token(self, token: str) -> None:
        """Send this JWT from now on (a renewed ``scontrol token``)."""
        self._http.headers["X-SLURM-USER-TOKEN"] = token

    def job_hosts(self, job: str) -> NodeSet | None:
        """As ``slurm.job_hosts``, from ``GET /slurm/{v}/job/{job}``: the ``nodes`` hostlist of its
        running or completing entries; None for a job slurmrestd does not know."""
        if not JOB_ID.match(job):
            return None
        try:
            jobs = self._call("GET", f"/job/{quote(job, safe='')}").get("jobs") or []
        except SlurmRestError as e:
            if INVALID_JOB_ID in e.numbers or e.status == 404:
                return None
            raise
        hosts = NodeSet(resolver=RESOLVER_NOGROUP)
        for j in jobs:
            if isinstance(j, dict) and _job_state(j) & ACTIVE_STATES and j.get("nodes"):
                try:
                    hosts.update(parse_hostlist(str(j["nodes"])))
                except ValueError as e:
                    raise SchedulerError(f"slurmrestd gave job {job} an unreadable node list: {e}") from None
        return hosts

    def plan(self, drain_list: DrainList) -> Plan:
        return plan_slurm(drain_list, self.nodes())

    def apply(self, action: Action) -> str | None:
        """As ``ScontrolBackend.apply``: re-read the node, then drain or resume it, or say why not."""
        node = self.node(action.node)
        if node is None:
            return "no longer a Slurm node"
        path = f"/node/{quote(action.node, safe='')}"
        if action.verb == "drain":
            if node.drained or node.down:
                return f"now {node.state} ({node.reason or 'no reason'})"
            self._call("POST", path, {"state": ["DRAIN"], "reason": action.reason})
        else:
            if not (node.drained and node.ours):
                return "no longer drained by graywire"
            self._call("POST", path, {"state": ["RESUME"]})
        return None
