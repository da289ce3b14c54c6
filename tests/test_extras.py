"""Optional extras: scikit-learn (``graywire[ml]``), pysnmp (``[snmp]``) and the Kubernetes
client (``[k8s]``) load only where a configured feature uses them, and a feature configured
without its extra fails at start-up in one line that names the ``pip install``.

Each check runs in a fresh interpreter: the test process itself has imported everything.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import httpx
import pytest

from tests import installs

#: Makes the named top-level packages look not installed: importing them, or finding their spec,
#: raises ModuleNotFoundError as for a package that is not there.
BLOCK = """
import sys
class _NotInstalled:
    def __init__(self, names): self.names = set(names)
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in self.names:
            raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
        return None
sys.meta_path.insert(0, _NotInstalled({names!r}))
"""


def run_python(code: str, cwd: Path, blocked: tuple[str, ...] = ()) -> subprocess.CompletedProcess[str]:
    prelude = BLOCK.format(names=blocked) if blocked else ""
    return subprocess.run(
        [sys.executable, "-c", prelude + textwrap.dedent(code)],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
        env=installs.env_without_python_vars(),
    )


def test_the_demo_app_starts_without_loading_any_extra(tmp_path: Path) -> None:
    """The demo's settings and app, built as `graywire demo` builds them: nothing optional loads."""
    r = run_python(
        f"""
        import sys
        from graywire.service.cli import DEMO_FAULTS, build_parser
        from graywire.service.config import load_settings
        from graywire.service.app import create_app
        build_parser()
        settings = load_settings(None, data_dir={str(tmp_path / "data")!r}, poll_interval="2s",
                                 sources=[{{"type": "fabricsim", "hosts": 8, "faults": DEMO_FAULTS}}])
        create_app(settings, run_loop=False)
        print(sorted({{m.partition(".")[0] for m in sys.modules}} & set({installs.EXTRA_MODULES!r})))
        """,
        tmp_path,
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip().splitlines()[-1] == "[]"


def test_configured_features_without_their_extras_fail_at_start_in_one_line_each(tmp_path: Path) -> None:
    config = tmp_path / "graywire.yaml"
    config.write_text(
        textwrap.dedent(
            f"""
            data_dir: {tmp_path / "data"}
            database_url: postgresql+psycopg://graywire@127.0.0.1:1/graywire
            multivariate_outliers: true
            sources:
              - type: fabricsim
                hosts: 4
              - type: snmp
                targets: [{{host: 10.0.0.1, name: leaf-01}}, {{host: 10.0.0.2, name: leaf-02}}]
            auth:
              tokens:
                - {{name: trainer, role: ingest, token: {"x" * 32}, scope: {{scheduler: kubernetes}}}}
            """
        )
    )
    r = run_python(
        f"""
        import sys
        from graywire.service.cli import main
        sys.exit(main(["serve", "--config", {str(config)!r}]))
        """,
        tmp_path,
        blocked=("pysnmp", "sklearn", "kubernetes", "psycopg"),
    )
    assert r.returncode == 2, r.stderr
    assert "Traceback" not in r.stderr
    assert r.stderr.splitlines() == [
        "graywire: error: sources.1 (type snmp: leaf-01, leaf-02) needs pysnmp: pip install 'graywire[snmp]'",
        "multivariate_outliers: true needs scikit-learn: pip install 'graywire[ml]'",
        "database_url (PostgreSQL) needs psycopg[binary]: pip install 'graywire[postgres]'",
        "token 'trainer' (scope scheduler kubernetes) needs kubernetes: pip install 'graywire[k8s]'",
    ]
    assert not (tmp_path / "data").exists()  # refused before anything started


def test_commands_that_need_an_extra_say_which(tmp_path: Path) -> None:
    """The commands and the code that use an extra directly, past any configuration check."""
    config = tmp_path / "snmp.yaml"
    config.write_text("sources:\n  - type: snmp\n    targets: [{host: 10.0.0.1}]\n")
    r = run_python(
        f"""
        from graywire.service.cli import main
        print(main(["k8s-sync", "--once", "--url", "http://127.0.0.1:9"]))
        print(main(["inventory", "discover", "--snmp", {str(config)!r}]))
        from graywire.collectors.extras import MissingExtra
        from graywire.fabricsim.topology import TopologySpec, build_fabric
        from graywire.detectors.multivariate import MultivariateOutlier  # imports without it
        try:
            MultivariateOutlier(build_fabric(TopologySpec(hosts=4)))
        except MissingExtra as e:
            print(e)
        """,
        tmp_path,
        blocked=("pysnmp", "sklearn", "kubernetes"),
    )
    assert r.returncode == 0, r.stderr
    assert "Traceback" not in r.stderr
    assert r.stderr.splitlines() == [
        "graywire: error: the Kubernetes backend (k8s-sync, scheduler kubernetes) needs kubernetes: "
        "pip install 'graywire[k8s]'",
        "graywire: error: SNMP (polling, LLDP discovery) needs pysnmp: pip install 'graywire[snmp]'",
    ]
    assert r.stdout.splitlines() == [
        "2",
        "2",
        "the multivariate detector (multivariate_outliers: true) needs scikit-learn: "
        "pip install 'graywire[ml]'",
    ]


def test_a_broken_extra_says_what_failed_to_import(tmp_path: Path) -> None:
    """scikit-learn installed but scipy missing: the same fix, and the reason beside it."""
    r = run_python(
        """
        from graywire.collectors.extras import MissingExtra, require
        try:
            require("sklearn.ensemble", "the multivariate detector")
        except MissingExtra as e:
            print(e)
        """,
        tmp_path,
        blocked=("scipy",),
    )
    assert r.returncode == 0, r.stderr
    out = r.stdout.strip()
    assert out.startswith("the multivariate detector needs scikit-learn: pip install 'graywire[ml]' (")
    assert "scipy" in out


def test_features_that_are_configured_load_their_extra(tmp_path: Path) -> None:
    """With the extras installed, a configured feature works: the check passes and the code loads."""
    r = run_python(
        """
        import sys
        from graywire.service.config import Settings
        Settings(multivariate_outliers=True,
                 sources=[{"type": "snmp", "targets": [{"host": "10.0.0.1"}]}]).check_extras()
        from graywire.fabricsim.topology import TopologySpec, build_fabric
        from graywire.detectors.multivariate import MultivariateOutlier
        MultivariateOutlier(build_fabric(TopologySpec(hosts=4)))
        import graywire.collectors.snmp.collector
        print("sklearn" in sys.modules, "pysnmp" in sys.modules)
        """,
        tmp_path,
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["True", "True"]


@pytest.mark.slow
def test_the_wheel_without_extras_serves_the_demo(tmp_path_factory: pytest.TempPathFactory) -> None:
    """`pip install graywire` with no extra: the wheel, its core requirements and nothing else."""
    wheel = installs.build_wheel(tmp_path_factory.mktemp("wheel"))
    tmp = tmp_path_factory.mktemp("core")
    site = installs.install_wheel(wheel, tmp / "site")
    dists = installs.closure(installs.wheel_requirements(site))
    names = set(dists)
    assert not names & {"scikit-learn", "scipy", "kubernetes", "pysnmp", "cryptography", "snmpsim"}, names
    deps = installs.link_distributions(dists.values(), tmp / "deps")
    assert not any((deps / m).exists() for m in installs.EXTRA_MODULES)
    # That interpreter sees the wheel's graywire and cannot import what the extras bring.
    probe = installs.isolated(
        [site, deps],
        "import importlib.util, graywire.service\n"
        "print(graywire.service.__file__)\n"
        f"print([m for m in {installs.EXTRA_MODULES!r} if importlib.util.find_spec(m)])",
    )
    seen = subprocess.run(
        probe, capture_output=True, text=True, check=True, env=installs.env_without_python_vars()
    )
    where, found = seen.stdout.splitlines()
    assert Path(where).is_relative_to(site) and found == "[]", seen.stdout
    port = installs.free_port()
    argv = installs.isolated(
        [site, deps],
        "from graywire.service.cli import main\n"
        f"sys.exit(main(['demo', '--hosts', '8', '--port', '{port}', '--data-dir', 'data']))",
    )
    proc = installs.serve_until_healthy(argv, f"http://127.0.0.1:{port}/healthz", cwd=tmp)
    try:
        assert httpx.get(f"http://127.0.0.1:{port}/api/v1/incidents", timeout=10).status_code == 200
    finally:
        out = installs.stop(proc)
    assert "graywire demo: 8 hosts" in out
