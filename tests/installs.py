"""Installs with only some dependencies, offline: the wheel, and the distributions a requirement
set pulls in, taken from the test environment itself.

``pip install graywire`` into a fresh venv needs the package index. Instead, the wheel is built
and installed with ``--no-deps`` into a directory, and every distribution the requirements need
(their closure, following each one's own ``Requires-Dist``) is linked from the running
environment into another directory. A ``python -I -S`` with those two directories on its path
sees the standard library, graywire and those distributions, nothing else: a module an extra
would bring is simply not there, as after a real install without the extra. What this does not
check is pip's resolution itself, and versions other than the ones installed here.
"""

from __future__ import annotations

import importlib.metadata as md
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterable, Sequence
from email.parser import Parser
from pathlib import Path

import httpx
from packaging.markers import default_environment
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[1]
#: What the optional extras bring; none of it may be needed without them.
EXTRA_MODULES = ("sklearn", "scipy", "kubernetes", "pysnmp", "pyasn1", "cryptography", "snmpsim", "pysmi")

_wheels: dict[Path, Path] = {}


def build_wheel(out: Path) -> Path:
    """The graywire wheel, built once per output directory (the first test that asks builds it)."""
    if out not in _wheels:
        subprocess.run(
            [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "-w", str(out), str(ROOT)],
            check=True,
            cwd=out,
            capture_output=True,
        )
        (_wheels[out],) = out.glob("graywire-*.whl")
    return _wheels[out]


def install_wheel(wheel: Path, target: Path) -> Path:
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--target", str(target), str(wheel)],
        check=True,
        capture_output=True,
    )
    return target


def wheel_requirements(target: Path, extras: Iterable[str] = ()) -> list[Requirement]:
    """The installed wheel's own ``Requires-Dist``, those of ``extras`` included."""
    (info,) = target.glob("graywire-*.dist-info")
    meta = Parser().parsestr((info / "METADATA").read_text())
    reqs = [Requirement(r) for r in meta.get_all("Requires-Dist") or []]
    wanted = {"", *extras}
    return [r for r in reqs if r.marker is None or any(_marker_holds(r, e) for e in wanted)]


def read_requirements(path: Path) -> list[Requirement]:
    """A requirements file's lines (no options, no includes)."""
    lines = [line.partition("#")[0].strip() for line in path.read_text().splitlines()]
    return [Requirement(line) for line in lines if line]


def _marker_holds(req: Requirement, extra: str) -> bool:
    env = {**default_environment(), "extra": extra}
    return req.marker is None or req.marker.evaluate(env)


def closure(reqs: Iterable[Requirement]) -> dict[str, md.Distribution]:
    """Every installed distribution ``reqs`` need, by canonical name; each must satisfy its
    requirement's version specifier (the project's lower bounds hold for what is tested)."""
    out: dict[str, md.Distribution] = {}
    todo = [(r, "") for r in reqs]
    seen: set[tuple[str, frozenset[str]]] = set()
    while todo:
        req, extra = todo.pop()
        if not _marker_holds(req, extra):
            continue
        name = canonicalize_name(req.name)
        key = (name, frozenset(req.extras))
        if key in seen:
            continue
        seen.add(key)
        if name == "graywire":  # a self-reference (graywire[snmp]): its extras' requirements
            continue
        dist = md.distribution(req.name)
        assert req.specifier.contains(dist.version, prereleases=True), (str(req), dist.version)
        out[name] = dist
        for r in dist.requires or []:
            dep = Requirement(r)
            for e in ("", *req.extras):
                todo.append((dep, e))
    return out


def link_distributions(dists: Iterable[md.Distribution], target: Path) -> Path:
    """Symlink each distribution's top-level files (packages, modules, dist-info) into ``target``."""
    target.mkdir(parents=True, exist_ok=True)
    for dist in dists:
        files = dist.files
        assert files is not None, f"{dist.metadata['Name']}: no RECORD, cannot tell its files"
        tops = {f.parts[0] for f in files if f.parts and f.parts[0] != ".." and not f.name.endswith(".pth")}
        for top in tops:
            src = Path(str(dist.locate_file(top)))
            dst = target / top
            if src.exists() and not dst.exists():
                dst.symlink_to(src)
    return target


def size_mb(dists: Iterable[md.Distribution]) -> float:
    """What the distributions' files take on disk, in MB."""
    total = 0
    for dist in dists:
        for f in dist.files or []:
            p = Path(str(dist.locate_file(f)))
            if p.is_file():
                total += p.stat().st_size
    return total / 1e6


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def isolated(paths: Sequence[Path], code: str) -> list[str]:
    """``python -I -S -c`` seeing the standard library and ``paths`` alone."""
    head = f"import sys; sys.path[1:1] = {[str(p) for p in paths]!r}\n"
    return [sys.executable, "-I", "-S", "-c", head + code]


def env_without_python_vars() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "GRAYWIRE_"))}


def serve_until_healthy(argv: list[str], url: str, cwd: Path, timeout: float = 45.0) -> subprocess.Popen:
    """Start a server and wait for ``url`` to answer 200; fail with its output if it exits."""
    proc = subprocess.Popen(
        argv,
        cwd=cwd,
        env=env_without_python_vars(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(
                f"exited with {proc.returncode}:\n{proc.stdout.read() if proc.stdout else ''}"
            )
        try:
            if httpx.get(url, timeout=1).status_code == 200:
                return proc
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    stop(proc)
    raise AssertionError(f"{url} did not answer within {timeout} s")


def stop(proc: subprocess.Popen) -> str:
    """Stop a server started here; its output."""
    proc.terminate()
    try:
        out, _ = proc.communicate(timeout=15)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, _ = proc.communicate()
    return out or ""
