"""The import rules between graywire's packages (docs/architecture.md), read from the source.

Data flows collectors → detectors → service; fabricsim stands in for the sources and so sits
beside detectors, on collectors alone; the evaluation scores detectors on fabricsim. Each rule
below is checked on every import a module makes, at module level or inside a function, so a
lazy import cannot hide a dependency; the module-level graph (what runs at import time) must
also have no cycle.
"""

from __future__ import annotations

import ast
import itertools
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
NAMESPACE = "graywire"

#: package -> the graywire packages its modules may import (itself always allowed).
MAY_IMPORT: dict[str, frozenset[str]] = {
    "collectors": frozenset(),
    "detectors": frozenset({"collectors"}),
    "fabricsim": frozenset({"collectors"}),
    "evaluation": frozenset({"collectors", "detectors", "fabricsim"}),
    "service": frozenset({"collectors", "detectors"}),
    "migrations": frozenset({"service"}),
}
#: The service modules that may also run the simulator or the evaluation: the CLI (sim, replay,
#: eval, fakes, demo) and the built-in synthetic source.
SIM_SEAMS = frozenset({f"{NAMESPACE}.service.cli", f"{NAMESPACE}.service.simulated"})
SIM_PACKAGES = frozenset({"fabricsim", "evaluation"})
#: The migrations need the service's tables, its engine and its settings (the one default
#: database URL), nothing else of it; the service's engine module in turn runs them, and needs
#: their package only to find the scripts.
MIGRATIONS_MAY_USE = frozenset(
    {f"{NAMESPACE}.service.models", f"{NAMESPACE}.service.models.engine", f"{NAMESPACE}.service.config"}
)
MIGRATION_RUNNER = (f"{NAMESPACE}.service.models.engine", f"{NAMESPACE}.migrations")


@dataclass(frozen=True, slots=True)
class Import:
    module: str  # the importing module, graywire.package.name
    target: str  # the imported module (or package), absolute
    path: Path
    line: int
    at_import_time: bool  # module level and outside ``if TYPE_CHECKING:``, so it runs on import

    def where(self) -> str:
        return f"{self.module} ({self.path.relative_to(ROOT)}:{self.line}) imports {self.target}"


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join((NAMESPACE, *parts))


MODULES: dict[str, Path] = {
    _module_name(p): p for package in MAY_IMPORT for p in sorted((ROOT / package).rglob("*.py"))
}


def _is_type_checking(node: ast.If) -> bool:
    t = node.test
    return (isinstance(t, ast.Name) and t.id == "TYPE_CHECKING") or (
        isinstance(t, ast.Attribute) and t.attr == "TYPE_CHECKING"
    )


def _imports_of(module: str, path: Path) -> Iterator[Import]:
    tree = ast.parse(path.read_text(), filename=str(path))
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]

    def visit(node: ast.AST, at_import_time: bool) -> Iterator[Import]:
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield Import(module, alias.name, path, node.lineno, at_import_time)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join([*up, *([base] if base else [])])
            for alias in node.names:
                # ``from pkg import mod`` imports the module pkg.mod when there is one.
                sub = f"{base}.{alias.name}"
                yield Import(module, sub if sub in MODULES else base, path, node.lineno, at_import_time)
        for child in ast.iter_child_nodes(node):
            runs = at_import_time and not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
            if isinstance(node, ast.If) and _is_type_checking(node) and child in node.body:
                runs = False
            yield from visit(child, runs)

    yield from visit(tree, True)


IMPORTS: list[Import] = [imp for module, path in MODULES.items() for imp in _imports_of(module, path)]


def _package(name: str) -> str | None:
    """The graywire package a module name is in, or None for anything else."""
    parts = name.split(".")
    return parts[1] if parts[0] == NAMESPACE and len(parts) > 1 else None


def _violation(imp: Import) -> str | None:
    top = imp.target.split(".")[0]
    if top in MAY_IMPORT:
        return f"{imp.where()}: a bare name; import {NAMESPACE}.{imp.target}"
    if top != NAMESPACE:
        return None  # the standard library or a third-party package
    source, target = _package(imp.module), _package(imp.target)
    assert source is not None
    if target == source:
        return None
    if source == "service" and target in SIM_PACKAGES:
        if imp.module in SIM_SEAMS:
            return None
        return (
            f"{imp.where()}: only {', '.join(sorted(SIM_SEAMS))} may import "
            f"{' or '.join(sorted(SIM_PACKAGES))}"
        )
    if (imp.module, imp.target) == MIGRATION_RUNNER and not imp.at_import_time:
        return None
    if source == "migrations" and target == "service" and imp.target not in MIGRATIONS_MAY_USE:
        return (
            f"{imp.where()}: migrations may use only {', '.join(sorted(MIGRATIONS_MAY_USE))} of the service"
        )
    allowed = MAY_IMPORT[source]
    if target not in allowed:
        may = ", ".join(sorted(allowed)) or "no other graywire package"
        return f"{imp.where()}: {source} may import {may}"
    return None


@pytest.mark.parametrize("package", sorted(MAY_IMPORT))
def test_each_package_imports_only_what_it_may(package: str) -> None:
    bad = [v for imp in IMPORTS if _package(imp.module) == package and (v := _violation(imp))]
    assert not bad, "\n".join(bad)


def test_the_module_level_import_graph_has_no_cycle() -> None:
    graph: dict[str, set[str]] = {m: set() for m in MODULES}
    for imp in IMPORTS:
        if imp.at_import_time and imp.target in MODULES and imp.target != imp.module:
            graph[imp.module].add(imp.target)
    done: set[str] = set()
    stack: list[str] = []
    on_stack: set[str] = set()

    def visit(m: str) -> list[str] | None:
        stack.append(m)
        on_stack.add(m)
        for n in sorted(graph[m]):
            if n in on_stack:
                return [*stack[stack.index(n) :], n]
            if n not in done and (cycle := visit(n)):
                return cycle
        stack.pop()
        on_stack.discard(m)
        done.add(m)
        return None

    for m in sorted(graph):
        if m not in done:
            cycle = visit(m)
            assert cycle is None, "import cycle: " + " -> ".join(cycle)


def test_the_scan_sees_function_level_and_type_only_imports() -> None:
    """The rules above are only as good as the scan: it must find lazy imports as well as
    top-level ones, and tell which run at import time."""
    found = {(i.module, i.target): i.at_import_time for i in IMPORTS}
    assert found[(f"{NAMESPACE}.service.cli", f"{NAMESPACE}.evaluation.suite")] is False
    assert found[(f"{NAMESPACE}.service.cluster.forward", f"{NAMESPACE}.service.cluster.node")] is False
    assert found[(f"{NAMESPACE}.service.simulated", f"{NAMESPACE}.fabricsim.sim")] is True
    assert found[(f"{NAMESPACE}.collectors.snmp", f"{NAMESPACE}.collectors.snmp.collector")] is False


#: The service's rooms: each folder of ``service/`` and each module at its top. No import may run
#: back up between rooms (the room graph has no circle, lazy imports included), and these rooms
#: never import those: the state is read by the API, ``/metrics`` and the status page, never the
#: other way; a push's checks sit below the API that runs them, and hand what passes to the poll
#: loop they know only as a protocol; the cluster drives the poll loop, which knows nothing of it.
SERVICE = f"{NAMESPACE}.service"
NEVER_IMPORTS: dict[str, frozenset[str]] = {
    "state": frozenset({"api", "metrics", "status_page", "runner", "cluster", "app", "cli"}),
    "runner": frozenset({"cluster", "api", "metrics", "app", "cli"}),
    "targets": frozenset({"runner", "cluster", "api", "metrics", "app", "cli"}),
    "archive": frozenset({"runner", "cluster", "api", "metrics", "app", "cli"}),
    "metrics": frozenset({"api", "app", "cli"}),
    "ingest": frozenset({"api", "metrics", "runner", "cluster", "app", "cli"}),
}


def _room(module: str) -> str | None:
    """The service room of a module: its folder under ``service/``, or the module itself."""
    if not module.startswith(SERVICE + "."):
        return None
    return module[len(SERVICE) + 1 :].split(".")[0]


def _room_edges() -> dict[tuple[str, str], list[Import]]:
    edges: dict[tuple[str, str], list[Import]] = {}
    for imp in IMPORTS:
        a, b = _room(imp.module), _room(imp.target)
        if a is not None and b is not None and a != b:
            edges.setdefault((a, b), []).append(imp)
    return edges


def test_no_import_runs_back_up_between_the_service_rooms() -> None:
    edges = _room_edges()
    graph: dict[str, set[str]] = {}
    for a, b in edges:
        graph.setdefault(a, set()).add(b)
    state: dict[str, int] = {}  # 1 on the path, 2 done

    def visit(room: str, path: list[str]) -> list[str] | None:
        state[room] = 1
        for nxt in sorted(graph.get(room, ())):
            if state.get(nxt) == 1:
                return [*path[path.index(nxt) :], nxt]
            if nxt not in state and (loop := visit(nxt, [*path, nxt])):
                return loop
        state[room] = 2
        return None

    for room in sorted(graph):
        if room not in state and (loop := visit(room, [room])):
            shown = "\n".join(edges[hop][0].where() for hop in itertools.pairwise(loop))
            raise AssertionError(f"service rooms in a circle: {' -> '.join(loop)}\n{shown}")


@pytest.mark.parametrize("room", sorted(NEVER_IMPORTS))
def test_each_service_room_stays_below_its_readers(room: str) -> None:
    bad = [
        f"{imp.where()}: {room} never imports {other}"
        for (a, other), imps in _room_edges().items()
        if a == room and other in NEVER_IMPORTS[room]
        for imp in imps
    ]
    assert not bad, "\n".join(bad)


#: How many floors the service's rooms may stand on: the longest chain of rooms, each importing
#: the next (cli → app → api → cluster → runner → drain engine → config → alert settings today).
MAX_SERVICE_FLOORS = 8


def test_the_service_rooms_stand_on_at_most_max_floors() -> None:
    graph: dict[str, set[str]] = {}
    for a, b in _room_edges():
        graph.setdefault(a, set()).add(b)
    chain: dict[str, list[str]] = {}
    climbing: set[str] = set()

    def longest(room: str) -> list[str]:
        if room in climbing:
            pytest.fail(f"the service rooms are in a circle through {room}: floors cannot be counted")
        if room not in chain:
            climbing.add(room)
            below = [longest(n) for n in sorted(graph.get(room, ()))]
            climbing.discard(room)
            chain[room] = [room, *max(below, key=len, default=[])]
        return chain[room]

    tallest = max((longest(r) for r in sorted(graph)), key=len)
    assert len(tallest) <= MAX_SERVICE_FLOORS, f"{len(tallest)} floors: {' -> '.join(tallest)}"
