"""The layout's rules, read from the sources with ``ast`` (nothing is imported): the product never imports its
test doubles (``movers.testing``), the modules of ``movers``, ``tasks``, ``flows`` and ``localcluster`` import
each other without cycles, and the cluster double (``localcluster``) never imports the orchestration
(``flows``, ``tasks``). Imports under ``if TYPE_CHECKING:`` count: a cycle there is a cycle of the design."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("movers", "tasks", "flows", "localcluster")

# Cycles other helpers of issue 22 are removing while this test is written; the lead empties this list once their
# work is merged (each is then an unexpected pass, and the test is strict).
KNOWN_CYCLES: list[frozenset[str]] = [
    frozenset({"movers.cli", "movers.cli_keys"}),
    frozenset({"movers.repo.retention", "movers.repo.runretention"}),
]
# Package-level cycles being removed likewise: (package, package) pairs that import each other through any module.
KNOWN_PACKAGE_CYCLES: list[frozenset[str]] = [
    frozenset({"movers.cbt", "movers.kube", "movers.policy"}),
    frozenset({"movers.repo", "movers.repo.store"}),
]


def _modules() -> dict[str, Path]:
    found = {}
    for root in PACKAGES:
        for path in sorted((ROOT / root).rglob("*.py")):
            name = ".".join(path.relative_to(ROOT).with_suffix("").parts)
            found[name.removesuffix(".__init__")] = path
    return found


MODULES = _modules()


def _imports(name: str, path: Path) -> set[str]:
    """The modules of ``MODULES`` that ``name`` imports (an imported name resolves to its longest known module)."""
    targets = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            wanted = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
                package = package[: len(package) - node.level + 1]
                base = ".".join(package + ([base] if base else []))
            wanted = [base] + [f"{base}.{alias.name}" for alias in node.names]
        else:
            continue
        for target in wanted:
            while target and target not in MODULES:
                target = target.rpartition(".")[0]
            if target and target != name and not name.startswith(target + "."):
                targets.add(target)
    return targets


GRAPH = {name: _imports(name, path) for name, path in MODULES.items()}


def _cycles(graph: dict[str, set[str]]) -> list[frozenset[str]]:
    """The strongly connected components of more than one node (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []
    for start in graph:
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, edges = work[-1]
            for succ in edges:
                if succ not in index:
                    index[succ] = low[succ] = len(index)
                    stack.append(succ)
                    on_stack.add(succ)
                    work.append((succ, iter(sorted(graph.get(succ, ())))))
                    break
                if succ in on_stack:
                    low[node] = min(low[node], index[succ])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = set()
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.add(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        found.append(frozenset(component))
    return found


def _package(name: str) -> str:
    """The node of a module in the package graph: a package's modules count as the package (``movers.kube.apply``
    as ``movers.kube``); a package and a module straight under a top-level one (``movers.policy``) as themselves."""
    if MODULES[name].name == "__init__.py" or name.count(".") < 2:
        return name
    return name.rpartition(".")[0]


def _package_graph() -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {}
    for name, targets in GRAPH.items():
        mine = _package(name)
        graph.setdefault(mine, set()).update(_package(t) for t in targets if _package(t) != mine)
    for targets in list(graph.values()):
        for target in targets:
            graph.setdefault(target, set())
    return graph


def test_the_product_never_imports_its_test_doubles():
    offenders = {
        name: sorted(t for t in targets if t == "movers.testing" or t.startswith("movers.testing."))
        for name, targets in GRAPH.items()
        if not (name == "movers.testing" or name.startswith("movers.testing."))
    }
    assert {name: found for name, found in offenders.items() if found} == {}


def test_the_cluster_double_never_imports_the_orchestration():
    offenders = {
        name: sorted(t for t in targets if t.split(".")[0] in ("flows", "tasks"))
        for name, targets in GRAPH.items()
        if name.split(".")[0] == "localcluster"
    }
    assert {name: found for name, found in offenders.items() if found} == {}


@pytest.mark.parametrize(
    "known",
    [pytest.param(cycle, marks=pytest.mark.xfail(strict=True, reason="being removed")) for cycle in KNOWN_CYCLES],
    ids=["<->".join(sorted(cycle)) for cycle in KNOWN_CYCLES],
)
def test_a_known_module_cycle_is_gone(known):
    assert known not in _cycles(GRAPH)


def test_no_other_module_imports_in_a_cycle():
    assert [sorted(c) for c in _cycles(GRAPH) if c not in KNOWN_CYCLES] == []


@pytest.mark.parametrize(
    "known",
    [
        pytest.param(cycle, marks=pytest.mark.xfail(strict=True, reason="being removed"))
        for cycle in KNOWN_PACKAGE_CYCLES
    ],
    ids=["<->".join(sorted(cycle)) for cycle in KNOWN_PACKAGE_CYCLES],
)
def test_a_known_package_cycle_is_gone(known):
    assert not any(known <= cycle for cycle in _cycles(_package_graph()))


def test_no_other_packages_import_in_a_cycle():
    known = set().union(*KNOWN_PACKAGE_CYCLES, *KNOWN_CYCLES)  # a module cycle is a package cycle too
    assert [sorted(c) for c in _cycles(_package_graph()) if not c <= known] == []
