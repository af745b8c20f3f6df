"""The layout's rules, read from the sources with ``ast`` (nothing is imported): the product never imports its
test doubles (``movers.testing``); each layer imports only what is below it (``FORBIDDEN``: the engine no
orchestration and no Prefect, the cluster double no flows, Kubernetes primitives no use case); no module and no
package of the product, the double or the tooling imports in a cycle. Imports under ``if TYPE_CHECKING:`` count: a
cycle there is a cycle of the design."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("movers", "tasks", "flows", "reporting", "deploy", "demo", "localcluster")
# What each layer may not import: the engine knows no orchestration, the double knows no flows, Kubernetes
# primitives know no use case.
FORBIDDEN = {
    "movers": ("tasks", "flows", "reporting", "deploy", "demo", "localcluster"),
    "localcluster": ("tasks", "flows", "reporting", "deploy", "demo"),
    "reporting": ("flows", "deploy", "demo", "localcluster"),
    "tasks": ("flows", "deploy", "demo", "localcluster"),
    "movers.kube": ("movers.cbt", "movers.policy", "movers.backup", "movers.restore", "movers.cli"),
}


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


def _layer_of(name: str, layer: str) -> bool:
    return name == layer or name.startswith(layer + ".")


@pytest.mark.parametrize("layer", sorted(FORBIDDEN))
def test_each_layer_imports_only_what_is_below_it(layer):
    offenders = {
        name: sorted(t for t in targets if any(_layer_of(t, f) for f in FORBIDDEN[layer]))
        for name, targets in GRAPH.items()
        if _layer_of(name, layer)
    }
    assert {name: found for name, found in offenders.items() if found} == {}


def test_the_engine_never_imports_prefect():
    offenders = set()
    for name, path in MODULES.items():
        if not _layer_of(name, "movers"):
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            modules = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            if isinstance(node, ast.ImportFrom) and not node.level:
                modules = [node.module or ""]
            if any(m == "prefect" or m.startswith("prefect.") for m in modules):
                offenders.add(name)
    assert sorted(offenders) == []


def test_no_module_imports_in_a_cycle():
    assert [sorted(c) for c in _cycles(GRAPH)] == []


def test_no_package_imports_in_a_cycle():
    assert [sorted(c) for c in _cycles(_package_graph())] == []
