"""deploy/: the Dockerfile, compose stack, Kubernetes manifests and systemd units agree with each
other and with the code: configs load, commands parse with the real CLI, ports and paths match.

No container engine or cluster runs here; these tests check what can be checked without one.
"""

from __future__ import annotations

import configparser
import shlex
import shutil
import subprocess
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml

from graywire.collectors.model import load_inventory
from graywire.service.cli import build_parser
from graywire.service.config import Settings, load_settings

SERVICE_PORT = 8000
AGENT_PORT = 9470
CONFIG_PATH = "/etc/graywire/graywire.yaml"
DATA_DIR = "/var/lib/graywire"


def yaml_docs(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def k8s(deploy_dir: Path) -> dict[str, dict[str, Any]]:
    """Every manifest the kustomization lists, by kind/name."""
    kdir = deploy_dir / "kubernetes"
    kust = yaml.safe_load((kdir / "kustomization.yaml").read_text())
    out = {}
    for res in kust["resources"]:
        for doc in yaml_docs(kdir / res):
            out[f"{doc['kind']}/{doc['metadata']['name']}"] = doc
    return out


def parses(argv: list[str]) -> None:
    """The command line is one the real ``graywire`` CLI accepts (argparse exits otherwise)."""
    args = build_parser().parse_args(argv)
    assert callable(args.func)


def settings_from_text(text: str, tmp_path: Path) -> Settings:
    path = tmp_path / "graywire.yaml"
    path.write_text(text)
    return load_settings(path)


def dockerfile_instructions(deploy_dir: Path, name: str = "Dockerfile") -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    text = (deploy_dir / name).read_text().replace("\\\n", " ")
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            word, _, rest = line.partition(" ")
            out.setdefault(word.upper(), []).append(rest.strip())
    return out


# -- Dockerfile -----------------------------------------------------------------------------------
def test_dockerfile_runs_as_non_root_from_a_slim_base(deploy_dir: Path) -> None:
    ins = dockerfile_instructions(deploy_dir)
    assert all("slim" in base for base in ins["FROM"])
    (user,) = ins["USER"]
    assert user.split(":")[0] not in {"root", "0"}
    assert ins["EXPOSE"] == [f"{SERVICE_PORT} {AGENT_PORT}"]
    assert f"GRAYWIRE_DATA_DIR={DATA_DIR}" in ins["ENV"][-1]
    entry = yaml.safe_load(ins["ENTRYPOINT"][0])
    cmd = yaml.safe_load(ins["CMD"][0])
    assert entry == ["graywire"]
    parses(cmd)
    assert cmd[-1] == CONFIG_PATH
    assert copied_sources(deploy_dir, ins) == {"pyproject.toml", "README.md", *package_folders(deploy_dir)}
    # Every optional feature by default (the service's config may use any), or the ones asked for.
    assert "EXTRAS=all" in ins["ARG"]
    assert any('pip install "/src[${EXTRAS}]"' in r for r in ins["RUN"])


def package_folders(deploy_dir: Path) -> set[str]:
    """The folders the wheel is built from: setuptools fails on a listed one that is missing."""
    cfg = tomllib.loads((deploy_dir.parent / "pyproject.toml").read_text())["tool"]["setuptools"]
    return set(cfg["package-dir"].values())


def copied_sources(deploy_dir: Path, ins: dict[str, list[str]]) -> set[str]:
    """What the build copies from the context (not between stages); each must exist there."""
    copied = {w for c in ins["COPY"] if not c.startswith("--from") for w in c.split()[:-1]}
    for src in copied:
        assert (deploy_dir.parent / src).exists(), src
    return copied


def test_agent_dockerfile_builds_the_agent_alone(deploy_dir: Path) -> None:
    """A slim image: graywire without its dependencies, then the agent's requirement set only."""
    ins = dockerfile_instructions(deploy_dir, "agent.Dockerfile")
    assert all("slim" in base for base in ins["FROM"])
    (user,) = ins["USER"]
    assert user.split(":")[0] not in {"root", "0"}
    assert ins["EXPOSE"] == [str(AGENT_PORT)]
    assert yaml.safe_load(ins["ENTRYPOINT"][0]) == ["graywire"]
    cmd = yaml.safe_load(ins["CMD"][0])
    parses(cmd)
    assert cmd[0] == "agent"
    requirements = "deploy/agent-requirements.txt"
    assert copied_sources(deploy_dir, ins) == {
        "pyproject.toml",
        "README.md",
        requirements,
        *package_folders(deploy_dir),
    }
    (install,) = [r for r in ins["RUN"] if " install " in r and "apt-get" not in r]
    assert "install --no-deps /src" in install and f"install -r /src/{requirements}" in install
    # The context leaves deploy/ out, but for the requirement set the build reads.
    ignored = (deploy_dir.parent / ".dockerignore").read_text().split()
    assert "deploy" in ignored and f"!{requirements}" in ignored
    assert ignored.index(f"!{requirements}") > ignored.index("deploy")  # the later line wins


def test_dockerignore_keeps_the_context_small(deploy_dir: Path) -> None:
    ignored = (deploy_dir.parent / ".dockerignore").read_text().split()
    assert {".git", ".venv", "tests"} <= set(ignored)


# -- compose --------------------------------------------------------------------------------------
def test_compose_wires_the_stack_together(deploy_dir: Path, tmp_path: Path) -> None:
    cdir = deploy_dir / "compose"
    compose = yaml.safe_load((cdir / "docker-compose.yml").read_text())
    services = compose["services"]
    assert set(services) == {"graywire", "postgres", "prometheus", "alertmanager", "grafana"}
    gw = services["graywire"]
    assert (cdir / gw["build"]["context"] / gw["build"]["dockerfile"]).resolve() == (
        deploy_dir / "Dockerfile"
    )
    parses(gw["command"])
    assert f"{SERVICE_PORT}:{SERVICE_PORT}" in gw["ports"]
    assert gw["environment"]["GRAYWIRE_DATABASE_URL"].startswith("postgresql+psycopg://")
    pg = services["postgres"]["environment"]
    assert (
        f"{pg['POSTGRES_USER']}:{pg['POSTGRES_PASSWORD']}@postgres:5432/{pg['POSTGRES_DB']}"
        in (gw["environment"]["GRAYWIRE_DATABASE_URL"])
    )
    mounts = {m.split(":")[1]: (cdir / m.split(":")[0]) for m in gw["volumes"] if m.startswith(".")}
    settings = load_settings(mounts[CONFIG_PATH])
    assert (settings.host, settings.port, str(settings.data_dir)) == ("0.0.0.0", SERVICE_PORT, DATA_DIR)
    # graywire posts incidents to the stack's Alertmanager, where Prometheus sends its alerts too.
    am_port = services["alertmanager"]["ports"][0].split(":")[1]
    assert settings.alerts.alertmanager.urls == [f"http://alertmanager:{am_port}"]
    # Every bind mount of the other services exists in the repository.
    for name in ("prometheus", "alertmanager", "grafana"):
        for m in services[name]["volumes"]:
            src = m.split(":")[0]
            if src.startswith("."):
                assert (cdir / src).exists(), (name, src)
    # Prometheus scrapes graywire by its compose name and port, and alerts to Alertmanager.
    prom_mount = next(m for m in services["prometheus"]["volumes"] if m.endswith(":/etc/prometheus:ro"))
    prom = yaml.safe_load((cdir / prom_mount.split(":")[0] / "prometheus.yml").read_text())
    (job,) = [j for j in prom["scrape_configs"] if j["job_name"] == "graywire"]
    assert job["static_configs"][0]["targets"] == [f"graywire:{SERVICE_PORT}"]
    am = prom["alerting"]["alertmanagers"][0]["static_configs"][0]["targets"]
    assert am == ["alertmanager:9093"] and "9093:9093" in services["alertmanager"]["ports"]
    # Grafana reads the dashboards where the provisioning provider looks for them.
    prov = yaml.safe_load((deploy_dir / "grafana/provisioning/dashboards/graywire.yml").read_text())
    path = prov["providers"][0]["options"]["path"]
    assert any(m.endswith(f":{path}:ro") for m in services["grafana"]["volumes"])
    ds = yaml.safe_load((deploy_dir / "grafana/provisioning/datasources/graywire.yml").read_text())
    assert ds["datasources"][0]["url"] == "http://prometheus:9090"


def test_compose_ha_runs_three_replicas_on_nats_jetstream(
    deploy_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The HA override: NATS with JetStream (the official image), three replicas with their own
    member ids and addresses the others resolve, every one scraped by Prometheus."""
    cdir = deploy_dir / "compose"
    base = yaml.safe_load((cdir / "docker-compose.yml").read_text())["services"]
    ha = yaml.safe_load((cdir / "docker-compose.ha.yml").read_text())["services"]
    nats = ha["nats"]
    assert nats["image"].startswith("nats:") and "--jetstream" in nats["command"]
    replicas = {name: svc for name, svc in ha.items() if name.startswith("graywire")}
    assert len(replicas) == 3
    ids, urls, host_ports = set(), set(), set()
    for name, svc in replicas.items():
        env = {**base.get(name, {}).get("environment", {}), **svc["environment"]}
        for key, value in env.items():
            monkeypatch.setenv(key, value)
        (config,) = [m for m in svc["volumes"] if m.endswith(f":{CONFIG_PATH}:ro")]
        settings = load_settings(cdir / config.split(":")[0])
        cluster = settings.cluster
        assert cluster is not None and cluster.nats_url == ["nats://nats:4222"]
        assert settings.database_url and settings.database_url.startswith("postgresql+psycopg://")
        ids.add(cluster.member_id)
        urls.add(cluster.advertise_url)
        assert cluster.advertise_url == f"http://{name}:{SERVICE_PORT}"  # a compose name resolves
        ports = svc.get("ports") or base[name]["ports"]
        host_ports |= {p.split(":")[0] for p in ports}
        parses(svc.get("command") or base[name]["command"])
    assert len(ids) == len(urls) == len(host_ports) == 3
    (prom_mount,) = ha["prometheus"]["volumes"]
    prom = yaml.safe_load((cdir / prom_mount.split(":")[0]).read_text())
    (job,) = [j for j in prom["scrape_configs"] if j["job_name"] == "graywire"]
    assert sorted(job["static_configs"][0]["targets"]) == sorted(f"{n}:{SERVICE_PORT}" for n in replicas)
    assert (
        prom["rule_files"]
        == yaml.safe_load((deploy_dir / "prometheus/prometheus.yml").read_text())["rule_files"]
    )


def has_compose() -> bool:
    if shutil.which("docker") is None:
        return False
    r = subprocess.run(["docker", "compose", "version"], capture_output=True, timeout=30)
    return r.returncode == 0


def test_compose_config_is_valid(deploy_dir: Path) -> None:
    """Compose's own validation, where the compose plugin is installed (it needs no engine)."""
    if not has_compose():
        pytest.skip("docker compose plugin not installed")
    for files in (["docker-compose.yml"], ["docker-compose.yml", "docker-compose.ha.yml"]):
        args = [a for f in files for a in ("-f", str(deploy_dir / "compose" / f))]
        r = subprocess.run(
            ["docker", "compose", *args, "config", "-q"], capture_output=True, text=True, timeout=60
        )
        assert r.returncode == 0, (files, r.stderr)


# -- Kubernetes -----------------------------------------------------------------------------------
def pod_env(deploy_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The service container's environment as Kubernetes gives it: the Secret's database URL,
    the pod's IP in the variables that name it."""
    m = k8s(deploy_dir)
    (c,) = m["Deployment/graywire"]["spec"]["template"]["spec"]["containers"]
    for e in c["env"]:
        if "value" in e:
            monkeypatch.setenv(e["name"], e["value"].replace("$(POD_IP)", "10.1.2.3"))
        elif "secretKeyRef" in e["valueFrom"]:
            ref = e["valueFrom"]["secretKeyRef"]
            monkeypatch.setenv(e["name"], m[f"Secret/{ref['name']}"]["stringData"][ref["key"]])


def test_kubernetes_configmap_loads_as_settings_and_inventory(
    deploy_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cm = k8s(deploy_dir)["ConfigMap/graywire-config"]
    pod_env(deploy_dir, monkeypatch)
    settings = settings_from_text(cm["data"]["graywire.yaml"], tmp_path)
    assert (settings.host, settings.port, str(settings.data_dir)) == ("0.0.0.0", SERVICE_PORT, DATA_DIR)
    assert settings.alerts.enabled and settings.alerts.alertmanager.urls
    (agent,) = [s for s in settings.sources if s.type == "agent"]
    assert agent.url_template == f"http://{{host}}:{AGENT_PORT}"
    inv = tmp_path / "inventory.yaml"
    inv.write_text(cm["data"]["inventory.yaml"])
    fabric = load_inventory(inv)
    assert fabric.n_ports > 0 and fabric.link_a.size > 0
    # The ConfigMap is mounted where the inventory path and the container's --config point.
    dep = k8s(deploy_dir)["Deployment/graywire"]
    (c,) = dep["spec"]["template"]["spec"]["containers"]
    (mount,) = [m for m in c["volumeMounts"] if m["name"] == "config"]
    assert str(settings.inventory) == f"{mount['mountPath']}/inventory.yaml"
    assert c["args"][-1] == f"{mount['mountPath']}/graywire.yaml" == CONFIG_PATH
    parses(c["args"])


def test_kubernetes_runs_three_replicas_on_a_nats_jetstream_cluster(
    deploy_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The HA layout: replicas rolled one at a time and never disrupted two at once, the
    cluster section pointing at the NATS Service, NATS three servers routed to each other."""
    m = k8s(deploy_dir)
    dep = m["Deployment/graywire"]
    assert dep["spec"]["replicas"] == 3
    assert dep["spec"]["strategy"]["type"] == "RollingUpdate"
    assert dep["spec"]["strategy"]["rollingUpdate"]["maxUnavailable"] == 1
    pdb = m["PodDisruptionBudget/graywire"]
    assert pdb["spec"]["maxUnavailable"] == 1
    labels = dep["spec"]["template"]["metadata"]["labels"]
    assert pdb["spec"]["selector"]["matchLabels"].items() <= labels.items()
    pod_env(deploy_dir, monkeypatch)
    settings = settings_from_text(m["ConfigMap/graywire-config"]["data"]["graywire.yaml"], tmp_path)
    cluster = settings.cluster
    assert cluster is not None and cluster.advertise_url == f"http://10.1.2.3:{SERVICE_PORT}"
    nats_svc, sts = m["Service/nats"], m["StatefulSet/nats"]
    (client,) = nats_svc["spec"]["ports"]
    assert cluster.nats_url == [f"nats://{nats_svc['metadata']['name']}:{client['port']}"]
    assert nats_svc["spec"]["selector"].items() <= sts["spec"]["template"]["metadata"]["labels"].items()
    (c,) = sts["spec"]["template"]["spec"]["containers"]
    assert c["image"].startswith("nats:")  # the official image
    conf = m["ConfigMap/nats-config"]["data"]["nats.conf"]
    assert "jetstream" in conf and "store_dir: /data" in conf
    routes = [r for r in conf.split() if r.startswith("nats://nats-")]
    assert len(routes) == sts["spec"]["replicas"] == 3
    assert all(f".{sts['spec']['serviceName']}:6222" in r for r in routes)
    assert 1 < cluster.stream_replicas <= sts["spec"]["replicas"]
    assert m["PodDisruptionBudget/nats"]["spec"]["selector"]["matchLabels"].items() <= (
        sts["spec"]["template"]["metadata"]["labels"].items()
    )


def test_kubernetes_service_monitor_and_ports_match(deploy_dir: Path) -> None:
    m = k8s(deploy_dir)
    dep, svc, mon = m["Deployment/graywire"], m["Service/graywire"], m["ServiceMonitor/graywire"]
    pod = dep["spec"]["template"]
    (c,) = pod["spec"]["containers"]
    (port,) = c["ports"]
    assert port["containerPort"] == SERVICE_PORT
    assert dep["spec"]["selector"]["matchLabels"].items() <= pod["metadata"]["labels"].items()
    assert svc["spec"]["selector"].items() <= pod["metadata"]["labels"].items()
    (sport,) = svc["spec"]["ports"]
    assert sport["targetPort"] == port["name"] and sport["port"] == SERVICE_PORT
    assert mon["spec"]["selector"]["matchLabels"].items() <= svc["metadata"]["labels"].items()
    (ep,) = mon["spec"]["endpoints"]
    assert ep["port"] == sport["name"] and ep["path"] == "/metrics"
    for probe in ("readinessProbe", "livenessProbe"):
        assert c[probe]["httpGet"]["path"] == "/healthz"
    env = {e["name"]: e for e in c["env"]}
    ref = env["GRAYWIRE_DATABASE_URL"]["valueFrom"]["secretKeyRef"]
    secret = m[f"Secret/{ref['name']}"]
    assert secret["stringData"][ref["key"]].startswith("postgresql+psycopg://")


@pytest.mark.parametrize(
    "name", ["Deployment/graywire", "DaemonSet/graywire-agent", "Deployment/graywire-k8s-sync"]
)
def test_kubernetes_workloads_run_as_non_root(deploy_dir: Path, name: str) -> None:
    spec = k8s(deploy_dir)[name]["spec"]["template"]["spec"]
    assert spec["securityContext"]["runAsNonRoot"] is True
    assert spec["securityContext"]["runAsUser"] != 0
    for c in spec["containers"]:
        assert c["securityContext"]["allowPrivilegeEscalation"] is False
        assert c["securityContext"]["readOnlyRootFilesystem"] is True
        # The agent runs the slim image deploy/agent.Dockerfile builds; the rest the full one.
        assert c["image"] == ("graywire-agent:0.1.0" if name.startswith("DaemonSet") else "graywire:0.1.0")


def test_agent_daemonset_serves_the_port_the_service_scrapes(deploy_dir: Path) -> None:
    ds = k8s(deploy_dir)["DaemonSet/graywire-agent"]
    spec = ds["spec"]["template"]["spec"]
    assert spec["hostNetwork"] is True
    (c,) = spec["containers"]
    args = [a.replace("$(NODE_NAME)", "gpu-0001") for a in c["args"]]
    parses(args)
    assert args[args.index("--port") + 1] == str(AGENT_PORT)
    assert c["ports"][0]["containerPort"] == c["ports"][0]["hostPort"] == AGENT_PORT
    root = args[args.index("--sysfs-root") + 1]
    (mount,) = c["volumeMounts"]
    assert mount["mountPath"] == f"{root}/sys" and mount["readOnly"] is True
    assert {e["name"] for e in c["env"]} >= {"NODE_NAME"}


# -- systemd --------------------------------------------------------------------------------------
def unit(path: Path) -> configparser.ConfigParser:
    cp = configparser.ConfigParser(strict=False, interpolation=None, delimiters=("=",))
    cp.optionxform = str  # type: ignore[assignment,method-assign]
    cp.read(path)
    return cp


def test_systemd_units(deploy_dir: Path) -> None:
    svc = unit(deploy_dir / "systemd/graywire.service")
    argv = shlex.split(svc["Service"]["ExecStart"])
    assert argv[0] == "/opt/graywire/bin/graywire"
    parses(argv[1:])
    assert argv[-1] == CONFIG_PATH
    assert svc["Service"]["User"] not in {"root", "0"}
    assert svc["Service"]["StateDirectory"] == "graywire" and svc["Service"]["WorkingDirectory"] == DATA_DIR
    assert svc["Install"]["WantedBy"] == "multi-user.target"
    agent = unit(deploy_dir / "systemd/graywire-agent.service")
    argv = shlex.split(agent["Service"]["ExecStart"])
    parses(argv[1:])
    assert argv[argv.index("--port") + 1] == str(AGENT_PORT)
    assert agent["Service"]["DynamicUser"] == "yes"


def test_systemd_analyze_verify(deploy_dir: Path, tmp_path: Path) -> None:
    """systemd's own parser, with ExecStart pointed at a binary that exists here."""
    tool = shutil.which("systemd-analyze")
    if tool is None:
        pytest.skip("systemd-analyze not installed")
    exe = shutil.which("true") or "/bin/true"
    names = ("graywire.service", "graywire-agent.service", "graywire-slurm-sync.service")
    for name in names:
        text = (deploy_dir / "systemd" / name).read_text().replace("/opt/graywire/bin/graywire", exe)
        (tmp_path / name).write_text(text)
    r = subprocess.run(
        [tool, "verify", *(str(tmp_path / name) for name in names)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    complaints = [line for line in (r.stdout + r.stderr).splitlines() if "graywire" in line]
    assert r.returncode == 0 and not complaints, r.stdout + r.stderr
