"""``graywire k8s-sync`` with the official client against an API server speaking Kubernetes' wire format."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from graywire.service.cli import main
from graywire.service.schedsync.k8s import CONDITION, TAINT_KEY, KubeNode, drain_patches, undo_patches
from tests.service.schedsync.conftest import DrainApi, drain_entry
from tests.service.schedsync.fake_kube_api import SMP, FakeKubeApi, make_node, serve

GPU_TAINT = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
OUR_TAINT = {"key": TAINT_KEY, "value": "true", "effect": "NoSchedule"}


@pytest.fixture
def kube() -> Iterator[FakeKubeApi]:
    api = FakeKubeApi(token="kube-token")
    api.add(make_node("gpu-0001", taints=[GPU_TAINT]))
    api.add(make_node("gpu-0002", unschedulable=True))  # cordoned by a person
    api.add(make_node("gpu-0003"))
    server = serve(api)
    try:
        yield api
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
def kubeconfig(kube: FakeKubeApi, tmp_path: Path) -> Path:
    path = tmp_path / "kubeconfig"
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "test", "cluster": {"server": kube.url}}],
                "users": [{"name": "graywire", "user": {"token": kube.token}}],
                "contexts": [{"name": "test", "context": {"cluster": "test", "user": "graywire"}}],
                "current-context": "test",
            }
        )
    )
    return path


def sync(api: DrainApi, kubeconfig: Path, *extra: str) -> int:
    return main(["k8s-sync", "--url", api.url, "--once", "--kubeconfig", str(kubeconfig), *extra])


def condition(node: dict[str, Any], kind: str) -> dict[str, Any] | None:
    return next((c for c in node["status"]["conditions"] if c["type"] == kind), None)


def test_cordons_taints_and_flags_then_undoes_only_its_own(
    kube: FakeKubeApi, kubeconfig: Path, drain_api: DrainApi
) -> None:
    drain_api.entries = [
        drain_entry("gpu-0001", "gpu-0001/mlx5_2 at 400G"),
        drain_entry("gpu-0003", action="watch"),
    ]
    assert sync(drain_api, kubeconfig) == 0
    node = kube.nodes["gpu-0001"]
    assert node["spec"]["unschedulable"] is True
    assert node["spec"]["taints"] == [GPU_TAINT, OUR_TAINT]
    cond = condition(node, CONDITION)
    assert cond is not None
    assert (cond["status"], cond["reason"], cond["message"]) == (
        "True",
        "FabricLinkDegraded",
        "graywire: gpu-0001/mlx5_2 at 400G",
    )
    assert condition(node, "Ready")["status"] == "True", "the kubelet's conditions are merged, not replaced"
    assert node["metadata"]["labels"]["graywire.io/drained"] == "true"
    assert node["metadata"]["annotations"]["graywire.io/cordoned"] == "true"
    assert "unschedulable" not in kube.nodes["gpu-0003"]["spec"], "watch is not drain"
    assert {p["content_type"] for p in kube.patches()} == {SMP}
    assert {p["path"] for p in kube.patches()} == {"/api/v1/nodes/gpu-0001", "/api/v1/nodes/gpu-0001/status"}

    kube.requests.clear()
    assert sync(drain_api, kubeconfig) == 0
    assert kube.patches() == [], "an unchanged list changes nothing"

    drain_api.entries = []
    assert sync(drain_api, kubeconfig) == 0
    node = kube.nodes["gpu-0001"]
    assert node["spec"]["unschedulable"] is False
    assert node["spec"]["taints"] == [GPU_TAINT]
    assert condition(node, CONDITION)["status"] == "False"
    assert condition(node, CONDITION)["reason"] == "FabricLinkHealthy"
    assert "graywire.io/drained" not in node["metadata"]["labels"]
    assert not any(k.startswith("graywire.io/") for k in node["metadata"]["annotations"])
    assert node["metadata"]["labels"]["kubernetes.io/hostname"] == "gpu-0001"


def test_a_cordon_set_by_a_person_survives_the_undo(
    kube: FakeKubeApi, kubeconfig: Path, drain_api: DrainApi
) -> None:
    drain_api.entries = [drain_entry("gpu-0002")]
    assert sync(drain_api, kubeconfig) == 0
    node = kube.nodes["gpu-0002"]
    assert node["spec"]["taints"] == [OUR_TAINT]
    assert node["metadata"]["annotations"]["graywire.io/cordoned"] == "false"

    drain_api.entries = []
    assert sync(drain_api, kubeconfig) == 0
    node = kube.nodes["gpu-0002"]
    assert node["spec"]["unschedulable"] is True, "graywire did not cordon it, so it does not uncordon it"
    assert node["spec"].get("taints") == []


def test_a_node_graywire_never_touched_is_left_alone(
    kube: FakeKubeApi, kubeconfig: Path, drain_api: DrainApi
) -> None:
    kube.nodes["gpu-0003"]["spec"]["taints"] = [
        {"key": "maintenance", "value": "disk", "effect": "NoSchedule"}
    ]
    assert sync(drain_api, kubeconfig) == 0
    assert kube.patches() == []
    assert [r["path"] for r in kube.requests] == ["/api/v1/nodes"], "one selector finds graywire's nodes"


def test_unknown_node_shadow_and_dry_run(
    kube: FakeKubeApi, kubeconfig: Path, drain_api: DrainApi, caplog: pytest.LogCaptureFixture
) -> None:
    drain_api.entries = [drain_entry("gpu-9999"), drain_entry("gpu-0003")]
    with caplog.at_level(logging.INFO):
        assert sync(drain_api, kubeconfig, "--dry-run") == 0
        drain_api.shadow = True
        assert sync(drain_api, kubeconfig) == 0
    assert "gpu-9999: on the drain list but not a Kubernetes node" in caplog.text
    assert "dry run, would drain gpu-0003" in caplog.text
    assert "shadow mode, would drain gpu-0003" in caplog.text
    assert kube.patches() == []
    assert "/api/v1/nodes/gpu-9999" in [r["path"] for r in kube.requests]


def test_concurrent_change_fails_the_pass_and_the_next_pass_completes(
    kube: FakeKubeApi, kubeconfig: Path, drain_api: DrainApi, caplog: pytest.LogCaptureFixture
) -> None:
    drain_api.entries = [drain_entry("gpu-0001")]
    kube.conflict_next_patch = True
    with caplog.at_level(logging.ERROR):
        assert sync(drain_api, kubeconfig) == 3
    assert "HTTP 409" in caplog.text
    assert (
        "taints" not in kube.nodes["gpu-0001"]["spec"]
        or OUR_TAINT not in kube.nodes["gpu-0001"]["spec"]["taints"]
    )
    assert sync(drain_api, kubeconfig) == 0
    assert kube.nodes["gpu-0001"]["spec"]["taints"] == [GPU_TAINT, OUR_TAINT]


def test_unreachable_or_unauthorized_kubernetes_api_fails(
    kube: FakeKubeApi, kubeconfig: Path, drain_api: DrainApi, caplog: pytest.LogCaptureFixture
) -> None:
    kube.token = "rotated"
    with caplog.at_level(logging.ERROR):
        assert sync(drain_api, kubeconfig) == 3
    assert "HTTP 401" in caplog.text
    kubeconfig.write_text(kubeconfig.read_text().replace(kube.url, "http://127.0.0.1:9"))
    assert sync(drain_api, kubeconfig) == 3
    assert "cannot read the scheduler's nodes: list nodes" in caplog.text
    assert main(["k8s-sync", "--url", drain_api.url, "--once", "--kubeconfig", "/nonexistent"]) == 2


def test_patches_are_pure_and_keep_other_taints() -> None:
    node = KubeNode.from_json(make_node("n", unschedulable=True, taints=[GPU_TAINT, OUR_TAINT]))
    node_patch, status_patch = drain_patches(node, "graywire: x", now="2026-11-29T21:00:00Z")
    assert node_patch["spec"]["taints"] == [GPU_TAINT, OUR_TAINT], "no duplicate taint"
    assert node_patch["metadata"]["annotations"]["graywire.io/cordoned"] == "false"
    assert status_patch["status"]["conditions"][0]["lastTransitionTime"] == "2026-11-29T21:00:00Z"
    undo, status_undo = undo_patches(node)
    assert undo["spec"] == {"taints": [GPU_TAINT]} and status_undo is None
