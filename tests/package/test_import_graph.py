"""The house's imports run one way, and this test is what keeps them so.

* No import cycle: no module reaches itself through the others.
* The layers (``LAYERS``, bottom first, quoted in ARCHITECTURE.md): a module imports its own
  layer and the ones below, never one above; the bottom layer imports nothing of the package
  but its own modules.
* The command line (``pipecat_summarizer_cli``) sits beside the library, on top of it: the
  library never imports it, and it imports only the library's public names (``__all__`` of
  ``pipecat_summarizer``, ``pipecat_summarizer.store``, ``pipecat_summarizer.summarizers``).

Every import statement counts, including the ones inside functions (a lazy import is still an
arrow), and so does a module named in a string (``importlib.import_module("...")``, a table of
lazy exports). Only ``if TYPE_CHECKING:`` imports are left out of the library's cycles and
layers (they never run); the two rules about the command line count them too. Each rule has a
companion test that shows it failing on a small package written for it.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "pipecat_summarizer"
CLI = ROOT / "pipecat_summarizer_cli"


@dataclass(frozen=True)
class Layer:
    """One floor of the house: the top-level modules and packages on it, and what it holds."""

    name: str
    members: frozenset[str]
    holds: str


#: The layers of ``pipecat_summarizer``, bottom first. A module may import from its own layer
#: and the layers below it, never from a layer above; a new module goes on the lowest layer
#: whose imports it needs (and a new top-level module fails this test until it is placed).
LAYERS: tuple[Layer, ...] = (
    Layer(
        "bottom",
        frozenset({"_text", "_validation", "errors"}),
        "one text vocabulary and token estimate, numeric checks, the error tree; "
        "they import nothing of the package",
    ),
    Layer(
        "terms",
        frozenset({"params", "events"}),
        "what a user writes and receives: every parameter group, the events and frames",
    ),
    Layer(
        "features",
        frozenset({"_compaction", "_record", "_recall", "store", "summarizers"}),
        "the pure rules and the backends: when and what to compact, the conversation "
        "record, recall, the durable memory store, the summarizers",
    ),
    Layer(
        "call",
        frozenset({"_session", "tools", "guard", "tracing"}),
        "one call's state and companions: the context's owner and the store's recorder, "
        "the LLM tools, the request guard after the main LLM, the spans in Pipecat's trace",
    ),
    Layer("processor", frozenset({"processor"}), "the frame processor: frames, tasks, events"),
    Layer(
        "face",
        frozenset({"__init__"}),
        "the public face, pipecat_summarizer's __all__ (loaded lazily; nothing imports it)",
    ),
)

#: Layers whose members import no module of the package but their own.
SELF_CONTAINED = ("bottom",)

#: What the command line may import from: these modules' ``__all__``.
PUBLIC_MODULES = (
    "pipecat_summarizer",
    "pipecat_summarizer.store",
    "pipecat_summarizer.summarizers",
)

#: Internal names the command line still imports, each waiting for a public name in the face
#: (pipecat_summarizer's ``__all__``): name -> why a user of the library would want it too.
#: The test tolerates exactly these and fails once one is no longer imported, so the list
#: only shrinks.
AWAITING_A_PUBLIC_NAME: dict[str, str] = {}

# a module named in a string: a dotted identifier and nothing else (prose has spaces)
_MODULE_STRING = re.compile(r"pipecat_summarizer(_cli)?(\.[A-Za-z_]\w*)*")


# -- reading the imports ------------------------------------------------------------------


def _modules(package: Path) -> dict[str, Path]:
    out = {}
    for path in package.rglob("*.py"):
        parts = path.relative_to(package.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        out[name] = path
    return out


@dataclass(frozen=True)
class Arrow:
    """One import: the module imported from, the name taken from it (None for ``import m``
    or a module named in a string), the line, and whether it only runs for type checkers."""

    module: str
    name: str | None
    line: int
    type_checking: bool


def _arrows(path: Path, module: str) -> Iterator[Arrow]:
    """Every import in the file of ``module`` (relative ones made absolute)."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    tree = ast.parse(path.read_text())
    docstrings = {
        id(n.body[0].value)
        for n in ast.walk(tree)
        if isinstance(n, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
        and n.body
        and isinstance(n.body[0], ast.Expr)
    }

    def visit(node: ast.AST, typing_only: bool) -> Iterator[Arrow]:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                for branch, typed in ((child.body, True), (child.orelse, typing_only)):
                    for statement in branch:
                        yield from visit(ast.Module(body=[statement], type_ignores=[]), typed)
                continue
            if isinstance(child, ast.ImportFrom):
                source = child.module or ""
                if child.level:
                    base = package.split(".")[: len(package.split(".")) - child.level + 1]
                    source = ".".join([*base, *([source] if source else [])])
                for alias in child.names:
                    yield Arrow(source, alias.name, child.lineno, typing_only)
            elif isinstance(child, ast.Import):
                for alias in child.names:
                    yield Arrow(alias.name, None, child.lineno, typing_only)
            elif (
                isinstance(child, ast.Constant)
                and isinstance(child.value, str)
                and id(child) not in docstrings
                and _MODULE_STRING.fullmatch(child.value)
            ):
                yield Arrow(child.value, None, child.lineno, typing_only)
            yield from visit(child, typing_only)

    yield from visit(tree, False)


def _targets(arrow: Arrow, modules: dict[str, Path]) -> str | None:
    """The module of the package an arrow points at (``from pkg import submodule`` points
    at the submodule), or None if it leaves the package."""
    if arrow.name is not None and f"{arrow.module}.{arrow.name}" in modules:
        return f"{arrow.module}.{arrow.name}"
    return arrow.module if arrow.module in modules else None


def import_graph(package: Path = PACKAGE) -> dict[str, set[str]]:
    """Module -> the modules of the package it imports at run time (lazily too)."""
    modules = _modules(package)
    graph: dict[str, set[str]] = {}
    for m, path in modules.items():
        arrows = (a for a in _arrows(path, m) if not a.type_checking)
        graph[m] = {t for a in arrows if (t := _targets(a, modules)) not in (None, m)}
    return graph


# -- the rules ----------------------------------------------------------------------------


def import_cycles(package: Path = PACKAGE) -> list[list[str]]:
    """Strongly connected groups of more than one module (Tarjan)."""
    graph = import_graph(package)
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


def _member(module: str) -> str:
    """The top-level module or package a module belongs to (``__init__`` for the face)."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def layer_violations(package: Path = PACKAGE, layers: tuple[Layer, ...] = LAYERS) -> list[str]:
    """Every arrow that goes up a layer, leaves a self-contained layer, or starts or ends
    in a top-level module no layer names."""
    floor = {member: i for i, layer in enumerate(layers) for member in layer.members}
    closed = {m for layer in layers if layer.name in SELF_CONTAINED for m in layer.members}
    out = []
    for source, targets in sorted(import_graph(package).items()):
        here = _member(source)
        if here not in floor:
            out.append(f"{source}: {here!r} is on no layer (add it to LAYERS)")
            continue
        for target in sorted(targets):
            there = _member(target)
            if there == here:
                continue
            if there not in floor:
                out.append(f"{source} -> {target}: {there!r} is on no layer (add it to LAYERS)")
            elif floor[there] > floor[here]:
                up = f"{layers[floor[here]].name} -> {layers[floor[there]].name}"
                out.append(f"{source} -> {target}: imports upward ({up})")
            elif here in closed:
                out.append(f"{source} -> {target}: {here} imports nothing of the package")
    return out


def library_imports_of_cli(package: Path = PACKAGE, cli: str = CLI.name) -> list[str]:
    """Every place in the library that imports the command line, or names one of its
    modules for a dynamic import; type-only imports included."""
    out = []
    for m, path in sorted(_modules(package).items()):
        for a in _arrows(path, m):
            if a.module == cli or a.module.startswith(cli + "."):
                out.append(f"{path.relative_to(package.parent)}:{a.line}: {a.module}")
    return out


def _public_names(module: str, root: Path) -> set[str]:
    """The names in ``module``'s literal ``__all__`` (read, not imported)."""
    path = root.joinpath(*module.split("."), "__init__.py")
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets
        ):
            return set(ast.literal_eval(node.value))
    return set()


def private_imports(
    cli: Path = CLI, library: str = PACKAGE.name, public: tuple[str, ...] = PUBLIC_MODULES
) -> list[str]:
    """Every import of the command line that reaches past the library's public names."""
    root = cli.parent
    allowed = {m: _public_names(m, root) for m in public}
    out = []
    for m, path in sorted(_modules(cli).items()):
        for a in _arrows(path, m):
            if a.module != library and not a.module.startswith(library + "."):
                continue
            if a.module in allowed and (
                a.name is None
                or a.name in allowed[a.module]
                or f"{a.module}.{a.name}" in allowed  # `from pkg import store`
            ):
                continue
            what = a.module if a.name is None else f"{a.module}.{a.name}"
            out.append(f"{path.relative_to(root)}:{a.line}: {what}")
    return out


# -- the tests ----------------------------------------------------------------------------


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


def test_no_module_imports_a_higher_layer():
    assert layer_violations() == []


def test_every_layer_member_exists():
    # a renamed package would leave its old name here, and the rule would guard nothing
    present = {_member(m) for m in _modules(PACKAGE)}
    named = {m for layer in LAYERS for m in layer.members}
    assert named - present == set()


def test_the_layer_check_sees_an_upward_and_a_sideways_arrow(tmp_path):
    a = tmp_path / "pipecat_summarizer"
    (a / "store").mkdir(parents=True)
    (a / "_text").mkdir()
    (a / "__init__.py").write_text("")
    (a / "processor.py").write_text("")
    (a / "guard.py").write_text("")
    (a / "tools.py").write_text("")
    (a / "events.py").write_text("")
    (a / "_validation.py").write_text("")
    (a / "store" / "__init__.py").write_text("")
    # a feature reaching up to the guard lazily, and to the processor in the branch type
    # checkers skip (its type-only import of the tools is no arrow)
    (a / "store" / "base.py").write_text(
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n"
        "    from pipecat_summarizer.tools import register_recall_memory\n"
        "else:\n"
        "    import pipecat_summarizer.processor\n"
        "def f():\n"
        "    import pipecat_summarizer.guard\n"
    )
    (a / "_text" / "__init__.py").write_text("")
    # the bottom layer importing its neighbour on the same floor, and its own module
    (a / "_text" / "tokens.py").write_text(
        "from pipecat_summarizer._validation import check\nfrom pipecat_summarizer._text import x\n"
    )
    # a module on no layer, and a name of the face taken from inside the library
    (a / "replay.py").write_text("")
    (a / "events.py").write_text("from pipecat_summarizer import ContextSummarizer\n")
    assert layer_violations(a) == [
        "pipecat_summarizer._text.tokens -> pipecat_summarizer._validation: "
        "_text imports nothing of the package",
        "pipecat_summarizer.events -> pipecat_summarizer: imports upward (terms -> face)",
        "pipecat_summarizer.replay: 'replay' is on no layer (add it to LAYERS)",
        "pipecat_summarizer.store.base -> pipecat_summarizer.guard: "
        "imports upward (features -> call)",
        "pipecat_summarizer.store.base -> pipecat_summarizer.processor: "
        "imports upward (features -> processor)",
    ]


def test_the_library_never_imports_the_command_line():
    assert library_imports_of_cli() == []


def test_the_direction_check_sees_lazy_typed_and_dynamic_imports(tmp_path):
    a = tmp_path / "pipecat_summarizer"
    a.mkdir()
    (a / "__init__.py").write_text(
        '"""pipecat_summarizer_cli is the command line."""\n'  # prose: not an import
        '_EXPORTS = {"questions": "pipecat_summarizer_cli.replay.questions"}\n'
    )
    (a / "x.py").write_text(
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n"
        "    from pipecat_summarizer_cli.replay import Job\n"
        "def f():\n"
        "    import pipecat_summarizer_cli.main\n"
    )
    assert library_imports_of_cli(a) == [
        "pipecat_summarizer/__init__.py:2: pipecat_summarizer_cli.replay.questions",
        "pipecat_summarizer/x.py:3: pipecat_summarizer_cli.replay",
        "pipecat_summarizer/x.py:5: pipecat_summarizer_cli.main",
    ]


def test_the_command_line_imports_only_public_names():
    found = private_imports()
    awaited = {f for f in found if f.rpartition(".")[2] in AWAITING_A_PUBLIC_NAME}
    assert sorted(set(found) - awaited) == []
    # an awaited name that became public (or is no longer needed) leaves the list
    assert {a.rpartition(".")[2] for a in awaited} == set(AWAITING_A_PUBLIC_NAME)


def test_the_public_names_check_sees_internal_imports(tmp_path):
    lib = tmp_path / "pipecat_summarizer"
    (lib / "store").mkdir(parents=True)
    (lib / "__init__.py").write_text('__all__ = ["ContextSummarizer"]\n')
    (lib / "store" / "__init__.py").write_text('__all__ = ["open_store"]\n')
    (lib / "summarizers").mkdir()
    (lib / "summarizers" / "__init__.py").write_text("__all__ = []\n")
    cli = tmp_path / "pipecat_summarizer_cli"
    cli.mkdir()
    (cli / "__init__.py").write_text("")
    (cli / "ok.py").write_text(
        "from pipecat_summarizer import ContextSummarizer, store\n"
        "from pipecat_summarizer.store import open_store\n"
        "import pipecat_summarizer.store\n"
        "from pipecat_summarizer_cli import ok\n"
    )
    (cli / "bad.py").write_text(
        "from pipecat_summarizer.store import _opening\n"  # a private module
        "from pipecat_summarizer import StoreWriter\n"  # not in __all__
        "def f():\n"
        "    from pipecat_summarizer._text.tokens import message_texts\n"
        "MODULE = 'pipecat_summarizer._record.record'\n"
    )
    assert private_imports(cli) == [
        "pipecat_summarizer_cli/bad.py:1: pipecat_summarizer.store._opening",
        "pipecat_summarizer_cli/bad.py:2: pipecat_summarizer.StoreWriter",
        "pipecat_summarizer_cli/bad.py:4: pipecat_summarizer._text.tokens.message_texts",
        "pipecat_summarizer_cli/bad.py:5: pipecat_summarizer._record.record",
    ]
