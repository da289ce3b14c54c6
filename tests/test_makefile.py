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
    assert dry_run("test") == [
        '.venv/bin/pytest -m "not alone" -n auto --maxprocesses 4 --dist loadfile',
        ".venv/bin/pytest -m alone",
    ]
