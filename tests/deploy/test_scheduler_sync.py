"""deploy/ for the scheduler helpers: the k8s-sync Deployment and its RBAC, and the slurm-sync unit.

The RBAC check is behavioural: the Deployment's own command line runs against a Kubernetes API
server speaking the Node wire format, every request it makes is turned into the (verb, resource)
the API server would authorize, and the ClusterRole must allow each one and grant nothing else.
"""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml

from graywire.service.auth import Auth
from graywire.service.cli import build_parser, main
from graywire.service.config import ApiToken
from graywire.service.schedsync.cli import with_environment
from graywire.service.schedsync.k8s import TAINT_KEY
from tests.deploy.test_manifests import k8s, parses, pod_env, settings_from_text, unit
from tests.service.schedsync.conftest import DrainApi, drain_api, drain_entry  # noqa: F401 (fixture)
from tests.service.schedsync.fake_kube_api import FakeKubeApi, make_node, serve

SYNC = "Deployment/graywire-k8s-sync"
ROLE = "ClusterRole/graywire-k8s-sync"


def container(manifests: dict[str, dict[str, Any]], name: str) -> dict[str, Any]:
    (c,) = manifests[name]["spec"]["template"]["spec"]["containers"]
    return c


def option(argv: list[str], flag: str) -> str:
    return argv[argv.index(flag) + 1]


def secret_env(manifests: dict[str, dict[str, Any]], c: dict[str, Any], name: str) -> str:
    """The value the container's env var ``name`` gets from its Secret."""
    ref = next(e for e in c["env"] if e["name"] == name)["valueFrom"]["secretKeyRef"]
    return manifests[f"Secret/{ref['name']}"]["stringData"][ref["key"]]


def authorization(method: str, path: str) -> tuple[str, str]:
    """(verb, resource) of a core/v1 request, as the API server's RequestInfo derives them."""
    parts = path.strip("/").split("/")
    assert parts[:2] == ["api", "v1"], path
    resource, rest = parts[2], parts[3:]
    if not rest:
        verb = {"GET": "list", "POST": "create", "DELETE": "deletecollection"}[method]
        return verb, resource
    if len(rest) == 2:
        resource = f"{resource}/{rest[1]}"
    verb = {"GET": "get", "PATCH": "patch", "PUT": "update", "DELETE": "delete"}[method]
    return verb, resource


def granted(role: dict[str, Any]) -> set[tuple[str, str]]:
    out = set()
    for rule in role["rules"]:
        assert rule["apiGroups"] == [""], "nodes are in the core API group"
        assert "*" not in rule["verbs"] and "*" not in rule["resources"]
        out |= {(v, r) for v in rule["verbs"] for r in rule["resources"]}
    return out


# -- Kubernetes -----------------------------------------------------------------------------------
def test_k8s_sync_deployment_runs_in_cluster_against_the_service(deploy_dir: Path) -> None:
    m = k8s(deploy_dir)
    dep = m[SYNC]
    assert dep["spec"]["replicas"] == 1 and dep["spec"]["strategy"]["type"] == "Recreate"
    pod = dep["spec"]["template"]
    assert dep["spec"]["selector"]["matchLabels"].items() <= pod["metadata"]["labels"].items()
    svc = m["Service/graywire"]
    assert not svc["spec"]["selector"].items() <= pod["metadata"]["labels"].items(), "not a backend"
    c = container(m, SYNC)
    args = c["args"]
    parses(args)
    assert args[0] == "k8s-sync" and "--in-cluster" in args and "--once" not in args
    assert "--dry-run" in args, "it ships report-only; docs say when to remove it"
    doc = (deploy_dir.parent / "docs/scheduler.md").read_text()
    assert f'"path":"/spec/template/spec/containers/0/args/{args.index("--dry-run")}"' in doc
    url = urlsplit(option(args, "--url"))
    assert (url.hostname, url.port) == ("graywire", svc["spec"]["ports"][0]["port"])
    # It tolerates graywire's own taint, so a drained node does not strand the sync that undoes it.
    tolerations = pod["spec"]["tolerations"]
    assert any(t["key"] == TAINT_KEY and t["operator"] == "Exists" for t in tolerations)


def test_k8s_sync_service_account_is_bound_to_its_role(deploy_dir: Path) -> None:
    m = k8s(deploy_dir)
    namespace = yaml.safe_load((deploy_dir / "kubernetes/kustomization.yaml").read_text())["namespace"]
    sa = m[SYNC]["spec"]["template"]["spec"]["serviceAccountName"]
    assert f"ServiceAccount/{sa}" in m
    binding = m["ClusterRoleBinding/graywire-k8s-sync"]
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "ClusterRole",
        "name": m[ROLE]["metadata"]["name"],
    }
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": sa, "namespace": namespace}]


def test_k8s_sync_token_is_one_the_cli_sends_and_the_service_accepts(
    deploy_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    m = k8s(deploy_dir)
    c = container(m, SYNC)
    token = secret_env(m, c, "GRAYWIRE_TOKEN")
    ApiToken(name="k8s-sync", role="reader", token=token)  # long enough for the service
    monkeypatch.setenv("GRAYWIRE_TOKEN", token)
    assert with_environment(build_parser().parse_args(c["args"])).token == token, (
        "the CLI reads GRAYWIRE_TOKEN"
    )
    # The service reads the same Secret key from the file its Deployment mounts it as.
    pod_env(deploy_dir, monkeypatch)
    settings = settings_from_text(m["ConfigMap/graywire-config"]["data"]["graywire.yaml"], tmp_path)
    (api_token,) = [t for t in settings.auth.tokens if t.name == "k8s-sync"]
    svc_pod = m["Deployment/graywire"]["spec"]["template"]["spec"]
    (svc,) = svc_pod["containers"]
    ref = next(e for e in c["env"] if e["name"] == "GRAYWIRE_TOKEN")["valueFrom"]["secretKeyRef"]
    mounted = None
    for vol in svc_pod["volumes"]:
        for item in vol.get("secret", {}).get("items", []):
            if vol["secret"]["secretName"] == ref["name"] and item["key"] == ref["key"]:
                (mount,) = [vm for vm in svc["volumeMounts"] if vm["name"] == vol["name"]]
                mounted = f"{mount['mountPath']}/{item['path']}"
    assert str(api_token.token_file) == mounted
    local = tmp_path / "k8s-sync-token"
    local.write_text(token)
    auth = Auth(
        settings.auth.model_copy(update={"tokens": [api_token.model_copy(update={"token_file": local})]})
    )
    principal = auth.check(token, "reader")
    assert (principal.name, principal.role) == ("k8s-sync", "reader")


@pytest.fixture
def kube() -> Any:
    api = FakeKubeApi(token="in-cluster-service-account-token")
    api.add(make_node("gpu-0001"))
    api.add(make_node("gpu-0002", unschedulable=True))  # cordoned by a person
    server = serve(api)
    try:
        yield api
    finally:
        server.shutdown()
        server.server_close()


def test_cluster_role_allows_exactly_the_api_calls_k8s_sync_makes(
    deploy_dir: Path,
    kube: FakeKubeApi,
    drain_api: DrainApi,  # noqa: F811
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    m = k8s(deploy_dir)
    c = container(m, SYNC)
    token = secret_env(m, c, "GRAYWIRE_TOKEN")
    monkeypatch.setenv("GRAYWIRE_TOKEN", token)
    drain_api.token = token
    # The pod's in-cluster config is a server URL and a service account token: a kubeconfig here.
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "c", "cluster": {"server": kube.url}}],
                "users": [{"name": "sa", "user": {"token": kube.token}}],
                "contexts": [{"name": "c", "context": {"cluster": "c", "user": "sa"}}],
                "current-context": "c",
            }
        )
    )
    shipped = list(c["args"])
    shipped[shipped.index("--url") + 1] = drain_api.url
    shipped.remove("--in-cluster")
    shipped += ["--kubeconfig", str(kubeconfig), "--once"]
    armed = [a for a in shipped if a != "--dry-run"]

    drain_api.entries = [drain_entry("gpu-0001"), drain_entry("gpu-0002"), drain_entry("gpu-0404")]
    assert main(shipped) == 0
    assert all(r["method"] == "GET" for r in kube.requests), "--dry-run changes nothing"
    assert main(armed) == 0  # drain: cordon, taint, condition
    assert kube.nodes["gpu-0001"]["spec"]["unschedulable"] is True
    drain_api.entries = []
    assert main(armed) == 0  # undo graywire's marks on both
    assert "graywire.io/drained" not in kube.nodes["gpu-0002"]["metadata"]["labels"]
    assert kube.nodes["gpu-0002"]["spec"]["unschedulable"] is True, "a person's cordon stays"
    assert all(path == "/api/v1/drain" or path == "/api/v1/drain/state" for path, _ in drain_api.requests)
    assert {auth for _, auth in drain_api.requests} == {f"Bearer {token}"}

    used = {authorization(r["method"], r["path"]) for r in kube.requests}
    allowed = granted(m[ROLE])
    assert used <= allowed, f"calls the ClusterRole does not allow: {sorted(used - allowed)}"
    assert allowed <= used, f"rights k8s-sync never uses: {sorted(allowed - used)}"
    assert allowed == {("get", "nodes"), ("list", "nodes"), ("patch", "nodes"), ("patch", "nodes/status")}


# -- Slurm: systemd -------------------------------------------------------------------------------
def env_file(path: Path) -> tuple[dict[str, str], set[str]]:
    """(variables set, variables only documented in comments) of a systemd EnvironmentFile."""
    values, commented = {}, set()
    for line in path.read_text().splitlines():
        body = line.lstrip("#").strip()
        name, eq, value = body.partition("=")
        if not eq or not name.isidentifier() or not name.isupper():
            continue
        if line.startswith("#"):
            commented.add(name)
        else:
            values[name] = value
    return values, commented


def test_slurm_sync_unit_runs_the_real_cli_from_its_env_file(deploy_dir: Path) -> None:
    svc = unit(deploy_dir / "systemd/graywire-slurm-sync.service")["Service"]
    assert svc["User"] not in {"root", "0"}
    assert svc["EnvironmentFile"] == "/etc/graywire/slurm-sync.env"
    example = deploy_dir / "systemd/graywire-slurm-sync.env.example"
    values, _ = env_file(example)
    # systemd splits an unbraced $VAR on whitespace into separate arguments.
    argv = [
        w
        for word in shlex.split(svc["ExecStart"])
        for w in (values[word[1:]].split() if word[0] == "$" else [word])
    ]
    assert argv[0] == "/opt/graywire/bin/graywire" and argv[1] == "slurm-sync"
    parses(argv[1:])
    args = build_parser().parse_args(argv[1:])
    assert args.dry_run, "it ships report-only; the env file says how to arm it"
    armed = build_parser().parse_args([a for a in argv[1:] if a != "--dry-run"])
    assert not armed.dry_run and not armed.once
    text = (deploy_dir / "systemd/graywire-slurm-sync.service").read_text()
    assert f"{example.relative_to(deploy_dir.parent)} {svc['EnvironmentFile']}" in text


#: Variables the env file may set that the CLI itself does not read, and who reads them.
NOT_CLI = {"GRAYWIRE_SYNC_ARGS": "the unit's ExecStart", "SLURM_CONF": "scontrol"}


def test_slurm_sync_env_names_are_the_ones_the_cli_reads(
    deploy_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    values, commented = env_file(deploy_dir / "systemd/graywire-slurm-sync.env.example")
    assert {"GRAYWIRE_URL", "GRAYWIRE_TOKEN", "GRAYWIRE_SYNC_ARGS"} <= set(values)
    for name in sorted((set(values) | commented) - set(NOT_CLI)):
        plain = vars(with_environment(build_parser().parse_args(["slurm-sync"])))
        monkeypatch.setenv(name, "sentinel-value-for-the-test")
        args = with_environment(build_parser().parse_args(["slurm-sync"]))
        changed = {k for k, v in vars(args).items() if plain[k] != v}
        monkeypatch.delenv(name)
        assert changed, f"{name} is not read by `graywire slurm-sync`"
    assert (
        "$GRAYWIRE_SYNC_ARGS"
        in unit(deploy_dir / "systemd/graywire-slurm-sync.service")["Service"]["ExecStart"]
    )
