"""Packaging: the folders install as one namespace, graywire.*, and nothing generic.

`pip install .` must put only ``graywire`` (and its dist-info) into site-packages, every
subpackage must be in the wheel, and the installed copy must work away from the source tree
(static files and migration scripts included).
"""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _setuptools() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]


def test_every_subpackage_is_listed() -> None:
    """A folder with an __init__.py that the package list leaves out would be missing from the wheel."""
    cfg = _setuptools()
    listed = set(cfg["packages"])
    found = set()
    for name, folder in cfg["package-dir"].items():
        for init in (ROOT / folder).rglob("__init__.py"):
            rel = init.parent.relative_to(ROOT / folder)
            found.add(".".join([name, *rel.parts]))
    assert found == listed, f"unlisted: {sorted(found - listed)}; listed but absent: {sorted(listed - found)}"
    assert all(name.startswith("graywire.") for name in listed)


@pytest.mark.slow
def test_install_puts_only_the_graywire_namespace(tmp_path: Path) -> None:
    wheels = tmp_path / "wheels"
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "-w", str(wheels), str(ROOT)],
        check=True,
        cwd=tmp_path,
    )
    (wheel,) = wheels.glob("graywire-*.whl")
    target = tmp_path / "site"
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--target", str(target), str(wheel)],
        check=True,
        cwd=tmp_path,
    )
    top = {p.name for p in target.iterdir() if p.name != "bin"}
    assert {n for n in top if not n.endswith(".dist-info")} == {"graywire"}, sorted(top)
    # The installed copy runs from anywhere: its CLI loads, and it finds its own static files
    # and migration scripts rather than the source tree's.
    probe = (
        "import graywire.service.cli, graywire.service.status_page as s, graywire.migrations as m;"
        "from pathlib import Path;"
        "assert (Path(m.__file__).parent / 'env.py').exists();"
        "assert list((Path(s.__file__).parent / 'static').iterdir());"
        "print(Path(graywire.service.cli.__file__).resolve())"
    )
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    out = subprocess.run(
        [sys.executable, "-I", "-c", f"import sys; sys.path.insert(0, {str(target)!r}); {probe}"],
        check=True,
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=env,
    ).stdout.strip()
    assert Path(out).is_relative_to(target), out
