"""A Kubernetes API server for Nodes (and a read-only list of Pods), speaking the documented wire format.

Real HTTP (a thread), JSON bodies as the API serves them, and the documented semantics the
sync depends on:

- ``GET /api/v1/nodes`` (``labelSelector``: ``k``, ``!k``, ``k=v``, ``k==v``, ``k!=v``) gives a
  ``NodeList``; ``GET /api/v1/nodes/{name}`` a ``Node``; unknown nodes a 404 ``Status``
  (reason ``NotFound``).
- ``PATCH /api/v1/nodes/{name}`` and ``.../status`` take ``application/strategic-merge-patch+json``
  (lists with a patch merge key, such as ``status.conditions`` by ``type``, merge; others such as
  ``spec.taints`` are replaced; ``null`` deletes) or ``application/merge-patch+json`` (RFC 7386);
  any other type is a 415. The main resource ignores ``status`` and the status subresource
  ignores everything else, as the Node strategy does. A ``metadata.resourceVersion`` in the
  patch is a precondition: a stale one is a 409 ``Conflict``. Every write bumps it.
- ``GET /api/v1/namespaces/{ns}/pods`` (``labelSelector`` as above, ``fieldSelector`` with
  ``k=v``, ``k==v``, ``k!=v`` on dotted paths such as ``status.phase``) gives a ``PodList``;
  an unknown field is a 400, as the API server refuses fields it does not index for pods.
- A bearer token, when set, is required (401 ``Unauthorized`` otherwise).

https://kubernetes.io/docs/reference/using-api/api-concepts/ ,
https://kubernetes.io/docs/tasks/manage-kubernetes-objects/update-api-object-kubectl-patch/
"""

from __future__ import annotations

import copy
import json
import threading
import zlib
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

SMP = "application/strategic-merge-patch+json"
MERGE = "application/merge-patch+json"
# Lists with a patchMergeKey in the Node schema (k8s.io/api/core/v1 types.go).
MERGE_KEYS = {("status", "conditions"): "type", ("status", "addresses"): "type"}
EFFECTS = {"NoSchedule", "PreferNoSchedule", "NoExecute"}


def make_node(name: str, *, unschedulable: bool = False, taints: list[dict[str, Any]] | None = None) -> dict:
    """A Node as a kubelet registers it."""
    ts = "2026-11-29T20:00:00Z"
    spec: dict[str, Any] = {"podCIDR": "10.244.1.0/24", "podCIDRs": ["10.244.1.0/24"]}
    if unschedulable:
        spec["unschedulable"] = True
    if taints:
        spec["taints"] = taints
    return {
        "kind": "Node",
        "apiVersion": "v1",
        "metadata": {
            "name": name,
            "uid": f"0c2a5c9e-0000-4000-8000-{zlib.crc32(name.encode()):012d}",
            "resourceVersion": "1",
            "creationTimestamp": ts,
            "labels": {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux"},
            "annotations": {"node.alpha.kubernetes.io/ttl": "0"},
        },
        "spec": spec,
        "status": {
            "conditions": [
                {
                    "type": "Ready",
                    "status": "True",
                    "lastHeartbeatTime": ts,
                    "lastTransitionTime": ts,
                    "reason": "KubeletReady",
                    "message": "kubelet is posting ready status",
                }
            ],
            "addresses": [
                {"type": "InternalIP", "address": "10.0.0.1"},
                {"type": "Hostname", "address": name},
            ],
            "nodeInfo": {
                "architecture": "amd64",
                "bootID": "b1",
                "containerRuntimeVersion": "containerd://1.7.22",
                "kernelVersion": "6.8.0",
                "kubeProxyVersion": "v1.31.0",
                "kubeletVersion": "v1.31.0",
                "machineID": "m1",
                "operatingSystem": "linux",
                "osImage": "Ubuntu 24.04 LTS",
                "systemUUID": "s1",
            },
        },
    }


#: Pod fields the API server can select on (pkg/registry/core/pod/strategy.go, the ones used here).
POD_FIELDS = {"metadata.name", "metadata.namespace", "spec.nodeName", "status.phase"}


def make_pod(
    name: str, namespace: str, node: str | None, labels: dict[str, str], phase: str = "Running"
) -> dict[str, Any]:
    """A Pod as the API serves it once scheduled (``node``) or still pending (None)."""
    spec: dict[str, Any] = {"containers": [{"name": "trainer", "image": "trainer:1"}]}
    if node is not None:
        spec["nodeName"] = node
    return {
        "kind": "Pod",
        "apiVersion": "v1",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "uid": f"7d1e0c3a-0000-4000-8000-{zlib.crc32(name.encode()):012d}",
            "resourceVersion": "1",
            "creationTimestamp": "2026-11-29T20:00:00Z",
            "labels": labels,
        },
        "spec": spec,
        "status": {"phase": phase},
    }


def _field(obj: dict[str, Any], path: str) -> str:
    cur: Any = obj
    for part in path.split("."):
        cur = cur.get(part) if isinstance(cur, dict) else None
    return "" if cur is None else str(cur)


def field_matches(obj: dict[str, Any], selector: str) -> bool | str:
    """True/False, or the unsupported field's name."""
    for req in filter(None, (r.strip() for r in selector.split(","))):
        neg = "!=" in req
        k, v = req.split("!=" if neg else "=", 1)
        k, v = k.strip(), v.lstrip("=")
        if k not in POD_FIELDS:
            return k
        if (_field(obj, k) == v) == neg:
            return False
    return True


def status(code: int, reason: str, message: str, name: str | None = None) -> dict[str, Any]:
    body: dict[str, Any] = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }
    if name is not None:
        body["details"] = {"name": name, "kind": "nodes"}
    return body


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386: objects merge, null deletes, anything else (lists too) replaces."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    out = dict(target) if isinstance(target, dict) else {}
    for k, v in patch.items():
        if v is None:
            out.pop(k, None)
        else:
            out[k] = merge_patch(out.get(k), v)
    return out


def strategic_merge(target: Any, patch: Any, path: tuple[str, ...] = ()) -> Any:
    """Strategic merge for the Node schema: lists with a merge key merge by it, other lists replace."""
    if isinstance(patch, list) and path in MERGE_KEYS and isinstance(target, list):
        key = MERGE_KEYS[path]
        out = [copy.deepcopy(x) for x in target]
        for item in patch:
            idx = next((i for i, x in enumerate(out) if x.get(key) == item.get(key)), None)
            if idx is None:
                out.append(copy.deepcopy(item))
            else:
                out[idx] = strategic_merge(out[idx], item, (*path, "[]"))
        return out
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    out = dict(target) if isinstance(target, dict) else {}
    for k, v in patch.items():
        if v is None:
            out.pop(k, None)
        else:
            out[k] = strategic_merge(out.get(k), v, (*path, k))
    return out


def matches(labels: dict[str, str], selector: str) -> bool:
    for req in filter(None, (r.strip() for r in selector.split(","))):
        if "!=" in req:
            k, v = req.split("!=", 1)
            if labels.get(k) == v:
                return False
        elif "=" in req:
            k, v = req.replace("==", "=").split("=", 1)
            if labels.get(k) != v:
                return False
        elif req.startswith("!"):
            if req[1:] in labels:
                return False
        elif req not in labels:
            return False
    return True


def validate(node: dict[str, Any]) -> str | None:
    """The Node validation rules the sync could trip over; a message or None."""
    seen = set()
    for t in node.get("spec", {}).get("taints") or []:
        if not t.get("key") or t.get("effect") not in EFFECTS:
            return f"spec.taints: Invalid value: {t!r}"
        if (t["key"], t["effect"]) in seen:
            return f"spec.taints: Duplicate value: {t['key']}:{t['effect']}"
        seen.add((t["key"], t["effect"]))
    for c in node.get("status", {}).get("conditions") or []:
        if not c.get("type") or c.get("status") not in ("True", "False", "Unknown"):
            return f"status.conditions: Invalid value: {c!r}"
    return None


@dataclass
class FakeKubeApi:
    nodes: dict[str, dict[str, Any]] = field(default_factory=dict)
    pods: list[dict[str, Any]] = field(default_factory=list)
    token: str | None = None
    url: str = ""
    requests: list[dict[str, Any]] = field(default_factory=list)
    conflict_next_patch: bool = False
    _rv: int = 1
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, node: dict[str, Any]) -> None:
        self.nodes[node["metadata"]["name"]] = node

    def patches(self) -> list[dict[str, Any]]:
        return [r for r in self.requests if r["method"] == "PATCH"]

    def _bump(self, node: dict[str, Any]) -> None:
        self._rv += 1
        node["metadata"]["resourceVersion"] = str(self._rv)

    def handle(self, method: str, raw_path: str, headers: Any, body: bytes) -> tuple[int, dict[str, Any]]:
        url = urlsplit(raw_path)
        ctype = (headers.get("Content-Type") or "").split(";")[0].strip()
        self.requests.append(
            {
                "method": method,
                "path": url.path,
                "content_type": ctype,
                "body": json.loads(body) if body else None,
            }
        )
        if self.token and headers.get("Authorization") != f"Bearer {self.token}":
            return 401, status(401, "Unauthorized", "Unauthorized")
        parts = url.path.strip("/").split("/")
        if parts[:3] == ["api", "v1", "namespaces"] and len(parts) == 5 and parts[4] == "pods":
            return self._pods(method, parts[3], parse_qs(url.query))
        if (
            parts[:3] != ["api", "v1", "nodes"]
            or len(parts) > 5
            or (len(parts) == 5 and parts[4] != "status")
        ):
            return 404, status(404, "NotFound", "the server could not find the requested resource")
        with self._lock:
            if len(parts) == 3:
                if method != "GET":
                    return 405, status(405, "MethodNotAllowed", f"{method} is not supported")
                selector = parse_qs(url.query).get("labelSelector", [""])[0]
                items = [n for n in self.nodes.values() if matches(n["metadata"].get("labels", {}), selector)]
                meta = {"resourceVersion": str(self._rv)}
                return 200, {"kind": "NodeList", "apiVersion": "v1", "metadata": meta, "items": items}
            name = parts[3]
            node = self.nodes.get(name)
            if node is None:
                return 404, status(404, "NotFound", f'nodes "{name}" not found', name)
            if method == "GET":
                return 200, node
            if method != "PATCH":
                return 405, status(405, "MethodNotAllowed", f"{method} is not supported")
            return self._patch(node, ctype, body, subresource=len(parts) == 5)

    def _pods(self, method: str, namespace: str, query: dict[str, list[str]]) -> tuple[int, dict[str, Any]]:
        if method != "GET":
            return 405, status(405, "MethodNotAllowed", f"{method} is not supported")
        labels, fields = query.get("labelSelector", [""])[0], query.get("fieldSelector", [""])[0]
        items = []
        with self._lock:
            for pod in self.pods:
                if pod["metadata"]["namespace"] != namespace:
                    continue
                found = field_matches(pod, fields)
                if isinstance(found, str):
                    msg = f"field label not supported: {found}"
                    return 400, status(400, "BadRequest", msg)
                if found and matches(pod["metadata"].get("labels", {}), labels):
                    items.append(pod)
            meta = {"resourceVersion": str(self._rv)}
        return 200, {"kind": "PodList", "apiVersion": "v1", "metadata": meta, "items": items}

    def _patch(self, node: dict[str, Any], ctype: str, body: bytes, subresource: bool) -> tuple[int, dict]:
        name = node["metadata"]["name"]
        if ctype not in (SMP, MERGE):
            return 415, status(
                415, "UnsupportedMediaType", f"the body of the request was in an unknown format: {ctype}"
            )
        try:
            patch = json.loads(body)
        except ValueError:
            return 400, status(400, "BadRequest", "the body of the request is not valid JSON")
        if not isinstance(patch, dict):
            return 400, status(400, "BadRequest", "a merge patch must be a JSON object")
        if self.conflict_next_patch:  # someone else wrote the node between our read and this patch
            self.conflict_next_patch = False
            self._bump(node)
        want_rv = (patch.get("metadata") or {}).pop("resourceVersion", None)
        if want_rv and want_rv != node["metadata"]["resourceVersion"]:
            msg = (
                f'Operation cannot be fulfilled on nodes "{name}": the object has been modified; '
                "please apply your changes to the latest version and try again"
            )
            return 409, status(409, "Conflict", msg, name)
        apply = strategic_merge if ctype == SMP else merge_patch
        new = apply(node, patch)
        if subresource:  # nodes/status changes status only
            new = {**node, "status": new.get("status", {})}
        else:  # the main resource ignores status
            new["status"] = node["status"]
        if (err := validate(new)) is not None:
            return 422, status(422, "Invalid", f'Node "{name}" is invalid: {err}', name)
        self.nodes[name] = new
        self._bump(new)
        return 200, new


def serve(api: FakeKubeApi) -> ThreadingHTTPServer:
    """Start ``api`` on a free localhost port (``api.url`` is set); call ``shutdown()`` when done."""

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

        def _do(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            code, body = api.handle(self.command, self.path, self.headers, self.rfile.read(length))
            data = json.dumps(body).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        do_GET = do_PATCH = do_PUT = do_POST = do_DELETE = _do

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True).start()
    api.url = f"http://127.0.0.1:{server.server_address[1]}"
    return server
