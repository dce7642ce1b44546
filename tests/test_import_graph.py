"""The package's imports run one way: no module reaches itself through the others.

Every ``from pipecat_summarizer... import`` counts, including the ones inside functions (a
lazy import is still an arrow); only ``if TYPE_CHECKING:`` imports are left out.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "pipecat_summarizer"


def _modules(package: Path) -> dict[str, Path]:
    out = {}
    for path in package.rglob("*.py"):
        parts = path.relative_to(package.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        out[name] = path
    return out


def _imports(path: Path, modules: dict[str, Path]) -> set[str]:
    found: set[str] = set()

    def visit(node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                continue
            if isinstance(child, ast.ImportFrom) and (child.module or "").startswith(
                "pipecat_summarizer"
            ):
                for alias in child.names:
                    full = f"{child.module}.{alias.name}"
                    found.add(full if full in modules else str(child.module))
            elif isinstance(child, ast.Import):
                found.update(a.name for a in child.names if a.name in modules)
            visit(child)

    visit(ast.parse(path.read_text()))
    return found


def import_cycles(package: Path = PACKAGE) -> list[list[str]]:
    """Strongly connected groups of more than one module (Tarjan)."""
    modules = _modules(package)
    graph = {
        m: {i for i in _imports(p, modules) if i in modules and i != m} for m, p in modules.items()
    }
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    cycles: list[list[str]] = []

    def connect(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph[v]:
            if w not in index:
                connect(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                cycles.append(sorted(group))

    for v in graph:
        if v not in index:
            connect(v)
    return cycles


def test_the_package_has_no_import_cycle():
    assert import_cycles() == []


def test_the_check_sees_a_lazy_import(tmp_path):
    # the guard used to import the processor inside __init__, the processor the guard
    a = tmp_path / "pipecat_summarizer"
    a.mkdir()
    (a / "__init__.py").write_text("")
    (a / "x.py").write_text("from pipecat_summarizer.y import f\n")
    (a / "y.py").write_text("def f():\n    from pipecat_summarizer.x import g\n")
    assert import_cycles(a) == [["pipecat_summarizer.x", "pipecat_summarizer.y"]]
