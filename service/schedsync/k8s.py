"""Kubernetes: cordon, taint and flag nodes on the drain list with the official client.

A drained node gets ``spec.unschedulable``, the taint ``graywire.io/fabric-degraded=true:NoSchedule``,
the status condition ``FabricLinkDegraded=True``, and graywire's ownership marks: the label
``graywire.io/drained=true`` (to find its nodes with one selector) and annotations with the
reason and whether graywire set the cordon. Undoing removes only what those marks say graywire
added: a node a person cordoned stays cordoned, other taints and conditions stay as they are.

Patches are strategic merge patches (the client's default for object bodies): conditions merge
by ``type``; the taint list has no merge key, so it is written whole, guarded by the node's
``resourceVersion`` so a concurrent change makes the patch fail (409) instead of losing it.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from graywire.collectors.extras import require
from graywire.service.schedsync.drainlist import DrainList
from graywire.service.schedsync.plan import Action, Plan, SchedulerError, tagged_reason

TAINT_KEY = "graywire.io/fabric-degraded"
CONDITION = "FabricLinkDegraded"
OWNER_LABEL = "graywire.io/drained"
REASON_ANNOTATION = "graywire.io/drain-reason"
CORDON_ANNOTATION = "graywire.io/cordoned"
#: What a missing client is reported as: it is the optional extra graywire[k8s], loaded by
#: ``load_core_api`` (every other use of it follows one).
FEATURE = "the Kubernetes backend (k8s-sync, scheduler kubernetes)"


#: A label value (what a job name must be to be selected by it) and a namespace name.
_LABEL_VALUE = re.compile(r"^(?:[A-Za-z0-9](?:[-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)$")
_NAMESPACE = re.compile(r"^[a-z0-9](?:[-a-z0-9]{0,61}[a-z0-9])?$")


def _taint() -> dict[str, str]:
    return {"key": TAINT_KEY, "value": "true", "effect": "NoSchedule"}


@dataclass(frozen=True)
class KubeNode:
    """The parts of a Node (its JSON form) the sync reads."""

    name: str
    resource_version: str = ""
    unschedulable: bool = False
    taints: tuple[dict[str, Any], ...] = ()
    labels: Mapping[str, str] = field(default_factory=dict)
    annotations: Mapping[str, str] = field(default_factory=dict)
    condition: Mapping[str, Any] | None = None

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> KubeNode:
        meta, spec, status = obj.get("metadata") or {}, obj.get("spec") or {}, obj.get("status") or {}
        conditions = [c for c in status.get("conditions") or [] if c.get("type") == CONDITION]
        return cls(
            name=meta["name"],
            resource_version=meta.get("resourceVersion") or "",
            unschedulable=bool(spec.get("unschedulable")),
            taints=tuple(spec.get("taints") or ()),
            labels=dict(meta.get("labels") or {}),
            annotations=dict(meta.get("annotations") or {}),
            condition=conditions[0] if conditions else None,
        )

    @property
    def owned(self) -> bool:
        return self.labels.get(OWNER_LABEL) == "true" or any(t.get("key") == TAINT_KEY for t in self.taints)

    @property
    def we_cordoned(self) -> bool:
        return self.annotations.get(CORDON_ANNOTATION) == "true"

    @property
    def fully_drained(self) -> bool:
        return (
            self.labels.get(OWNER_LABEL) == "true"
            and self.unschedulable
            and _taint() in [{k: t.get(k) for k in ("key", "value", "effect")} for t in self.taints]
            and (self.condition or {}).get("status") == "True"
        )


def plan_k8s(drain_list: DrainList, nodes: Iterable[KubeNode]) -> Plan:
    """Drain listed nodes not yet fully drained; undo graywire's marks on nodes no longer listed."""
    plan = Plan()
    by_name = {n.name: n for n in nodes}
    want = drain_list.drain()
    for name, entry in sorted(want.items()):
        node = by_name.get(name)
        if node is None:
            plan.notes.append(f"{name}: on the drain list but not a Kubernetes node")
        elif not node.fully_drained:
            plan.actions.append(Action(name, "drain", tagged_reason(entry.reason)))
    keep = set(want) | drain_list.held()
    for name, node in sorted(by_name.items()):
        if node.owned and name not in keep:
            plan.actions.append(Action(name, "resume"))
    return plan


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _condition(node: KubeNode, degraded: bool, message: str, now: str) -> dict[str, Any]:
    status = "True" if degraded else "False"
    old = node.condition or {}
    return {
        "type": CONDITION,
        "status": status,
        "reason": "FabricLinkDegraded" if degraded else "FabricLinkHealthy",
        "message": message,
        "lastHeartbeatTime": now,
        "lastTransitionTime": old.get("lastTransitionTime", now) if old.get("status") == status else now,
    }


def drain_patches(
    node: KubeNode, reason: str, now: str | None = None
) -> tuple[dict[str, Any], dict[str, Any]]:
    """(node patch, status patch) that cordon, taint and flag ``node``, recording what graywire did."""
    now = now or _now()
    cordon_ours = node.we_cordoned or not node.unschedulable
    taints = [t for t in node.taints if t.get("key") != TAINT_KEY] + [_taint()]
    node_patch = {
        "metadata": {
            "resourceVersion": node.resource_version,
            "labels": {OWNER_LABEL: "true"},
            "annotations": {REASON_ANNOTATION: reason, CORDON_ANNOTATION: str(cordon_ours).lower()},
        },
        "spec": {"unschedulable": True, "taints": taints},
    }
    return node_patch, {"status": {"conditions": [_condition(node, True, reason, now)]}}


def undo_patches(node: KubeNode, now: str | None = None) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """(node patch, status patch or None) that remove graywire's marks and nothing else."""
    now = now or _now()
    spec: dict[str, Any] = {"taints": [t for t in node.taints if t.get("key") != TAINT_KEY]}
    if node.we_cordoned:
        spec["unschedulable"] = False
    node_patch = {
        "metadata": {
            "resourceVersion": node.resource_version,
            "labels": {OWNER_LABEL: None},
            "annotations": {REASON_ANNOTATION: None, CORDON_ANNOTATION: None},
        },
        "spec": spec,
    }
    if node.condition is None:
        return node_patch, None
    message = tagged_reason("no longer on the drain list")
    return node_patch, {"status": {"conditions": [_condition(node, False, message, now)]}}


def load_core_api(kubeconfig: str | None = None, context: str | None = None, in_cluster: bool = False) -> Any:
    """A ``CoreV1Api`` from the pod's service account or a kubeconfig (``$KUBECONFIG``, ~/.kube/config)."""
    client = require("kubernetes.client", FEATURE)
    config = require("kubernetes.config", FEATURE)

    try:
        if in_cluster:
            cfg = client.Configuration()
            config.load_incluster_config(client_configuration=cfg)
            return client.CoreV1Api(client.ApiClient(cfg))
        return client.CoreV1Api(config.new_client_from_config(config_file=kubeconfig, context=context))
    except config.ConfigException as e:
        raise ValueError(f"no Kubernetes configuration: {e}") from e


class KubernetesBackend:
    """Reads the listed nodes and graywire's own (one label selector), patches one node at a time."""

    name = "kubernetes"

    def __init__(self, api: Any) -> None:
        self.api = api

    def _call(self, what: str, fn: Any, *args: Any, missing_ok: bool = False, **kw: Any) -> Any:
        """The API call's result; None for a 404 when ``missing_ok``; other failures as SchedulerError."""
        from kubernetes.client.exceptions import ApiException
        from urllib3.exceptions import HTTPError

        try:
            return fn(*args, **kw)
        except ApiException as e:
            if missing_ok and e.status == 404:
                return None
            raise SchedulerError(f"{what}: HTTP {e.status} {e.reason}") from e
        except HTTPError as e:
            raise SchedulerError(f"{what}: {e}") from e

    def _json(self, obj: Any) -> dict[str, Any]:
        return self.api.api_client.sanitize_for_serialization(obj)

    def job_hosts(
        self, namespace: str, job_label: str, job: str, timeout: float | None = None
    ) -> frozenset[str] | None:
        """Nodes of the job's running pods (``job_label=<job>`` in ``namespace``); None when the
        name cannot be a label value or the namespace a namespace, so the selector stays one term."""
        if not _LABEL_VALUE.match(job) or not _NAMESPACE.match(namespace):
            return None
        pods = self._call(
            f"list pods of job {namespace}/{job}",
            self.api.list_namespaced_pod,
            namespace,
            label_selector=f"{job_label}={job}",
            field_selector="status.phase=Running",
            _request_timeout=timeout,
        )
        items = self._json(pods).get("items") or []
        return frozenset(
            str(p["spec"]["nodeName"])
            for p in items
            if (p.get("status") or {}).get("phase") == "Running" and (p.get("spec") or {}).get("nodeName")
        )

    def node(self, name: str) -> KubeNode | None:
        obj = self._call(f"read node {name}", self.api.read_node, name, missing_ok=True)
        return None if obj is None else KubeNode.from_json(self._json(obj))

    def plan(self, drain_list: DrainList) -> Plan:
        nodes: dict[str, KubeNode] = {}
        listed = self._call("list nodes", self.api.list_node, label_selector=OWNER_LABEL)
        for item in self._json(listed).get("items") or []:
            node = KubeNode.from_json(item)
            nodes[node.name] = node
        for name in sorted(set(drain_list.drain()) - set(nodes)):
            node = self.node(name)
            if node is not None:
                nodes[name] = node
        return plan_k8s(drain_list, nodes.values())

    def apply(self, action: Action) -> str | None:
        """Patch from a fresh read of the node, so the taint list written is the current one."""
        node = self.node(action.node)
        if node is None:
            return "node no longer exists"
        if action.verb == "drain":
            node_patch, status_patch = drain_patches(node, action.reason)
        elif not node.owned:
            return "no longer marked by graywire"
        else:
            node_patch, status_patch = undo_patches(node)  # type: ignore[assignment]
        self._call(f"patch node {node.name}", self.api.patch_node, node.name, node_patch)
        if status_patch is not None:
            self._call(f"patch node {node.name} status", self.api.patch_node_status, node.name, status_patch)
        return None
