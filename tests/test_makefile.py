"""The README's two commands: ``make run`` (with ``PORT=`` to pick the demo's port) and ``make test``."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def dry_run(*args: str) -> list[str]:
    """The recipe lines ``make`` would run, without running them (the venv is up to date)."""
    if shutil.which("make") is None:
        pytest.fail("make is not installed")
    out = subprocess.run(["make", "-n", *args], cwd=REPO, capture_output=True, text=True, check=True).stdout
    return [line.rstrip() for line in out.splitlines() if "graywire demo" in line or "pytest" in line]


def test_make_run_serves_the_demo_on_the_port_it_is_given() -> None:
    (line,) = dry_run("run", "PORT=9123")
    assert line.endswith("graywire demo --port 9123")


def test_make_run_without_a_port_leaves_it_to_the_demo() -> None:
    (line,) = dry_run("run")
    assert line.endswith("graywire demo")  # the demo's default: $GRAYWIRE_PORT, else 8000


def test_make_test_runs_every_test_once() -> None:
    """Most tests on every core, then the ``alone`` ones: the two selections are complements."""
    lines = dry_run("test")
    assert [line.split(" || ")[0] for line in lines] == [
        '.venv/bin/pytest -m "not alone" -n auto --maxprocesses 4 --dist loadfile',
        ".venv/bin/pytest -m alone",
    ]


@pytest.mark.parametrize(
    ("first", "second", "passes"), [(0, 0, True), (1, 0, False), (0, 5, False), (2, 1, False)]
)
def test_make_test_runs_the_alone_phase_whatever_the_first_gave(
    tmp_path: Path, first: int, second: int, passes: bool
) -> None:
    """A failure in the parallel phase still runs the ``alone`` one; either failing (pytest's 5,
    no tests collected, too) fails the target."""
    calls = tmp_path / "calls"
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "ruff").write_text("#!/bin/sh\nexit 0\n")
    (fake / "pytest").write_text(
        f'#!/bin/sh\necho "$*" >> {calls}\n'
        f'case "$*" in *"not alone"*) exit {first};; *) exit {second};; esac\n'
    )
    for tool in ("ruff", "pytest"):
        (fake / tool).chmod(0o755)
    stamp = tmp_path / "stamp"
    stamp.touch()
    if shutil.which("make") is None:
        pytest.fail("make is not installed")
    command = ["make", "-s", "test", f"BIN={fake}", f"STAMP={stamp}"]
    run = subprocess.run(command, cwd=REPO, capture_output=True, text=True)
    assert calls.read_text().splitlines() == [
        "-m not alone -n auto --maxprocesses 4 --dist loadfile",
        "-m alone",
    ]
    assert (run.returncode == 0) == passes, run.stderr
    if not passes:
        assert f"parallel phase: exit {first}, alone phase: exit {second}" in run.stderr
