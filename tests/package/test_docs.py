"""The docs stay true to the tree: ARCHITECTURE.md names every module of both packages and
none that does not exist, every link between the pages reaches a file, every script, example
or test a page names exists, and the index lists every page."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
ARCHITECTURE = ROOT / "ARCHITECTURE.md"
DOCS = ROOT / "docs"
PACKAGES = ("pipecat_summarizer", "pipecat_summarizer_cli")
GITHUB = "https://github.com/pipecat-summarizer/pipecat-summarizer/blob/main/"


def modules_in_the_tree() -> set[str]:
    """Every module file of both packages, as a path from the repository's root."""
    return {
        str(path.relative_to(ROOT))
        for package in PACKAGES
        for path in (ROOT / package).rglob("*.py")
        if "__pycache__" not in path.parts
    }


def modules_in_the_map(text: str) -> list[str]:
    """The module map's entries: under each ``### `folder/``` heading, the first cell of each
    table row names one module of that folder."""
    named, folder = [], None
    for line in text.splitlines():
        heading = re.match(r"^### `([\w/]+/)`", line)
        if heading:
            folder = heading.group(1)
        elif line.startswith("## "):
            folder = None
        elif folder:
            row = re.match(r"^\| `([\w.]+\.py)` \|", line)
            if row:
                named.append(folder + row.group(1))
    return named


def test_the_map_reader_sees_entries_and_folders():
    sample = (
        "## Module map\n### `pkg/`: x\n| module | what |\n| --- | --- |\n| `a.py` | one |\n"
        "### `pkg/sub/`\n| `b.py` | two |\n## Rules\n| `c.py` | not in the map |\n"
    )
    assert modules_in_the_map(sample) == ["pkg/a.py", "pkg/sub/b.py"]


def test_architecture_names_every_module_and_only_modules_that_exist():
    named = modules_in_the_map(ARCHITECTURE.read_text(encoding="utf-8"))
    tree = modules_in_the_tree()
    assert len(tree) > 50
    assert sorted(tree - set(named)) == [], "modules missing from ARCHITECTURE.md"
    assert sorted(set(named) - tree) == [], "ARCHITECTURE.md names modules that do not exist"
    assert len(named) == len(set(named)), "a module named twice"


def _links(page: Path) -> list[str]:
    return re.findall(r"\]\(([^)\s]+)\)", page.read_text(encoding="utf-8"))


def _pages() -> list[Path]:
    return [ROOT / "README.md", ARCHITECTURE, *sorted(DOCS.glob("*.md"))]


def test_every_link_between_the_pages_reaches_a_file():
    broken = []
    for page in _pages():
        for link in _links(page):
            target = link.split("#", 1)[0]
            if link.startswith(GITHUB):
                path = ROOT / target[len(GITHUB) :]
            elif "://" in link or link.startswith(("#", "mailto:")):
                continue
            else:
                path = (page.parent / target).resolve()
            if not path.exists():
                broken.append(f"{page.relative_to(ROOT)}: {link}")
    assert broken == []


def test_the_index_lists_every_page_and_the_readme_links_the_index():
    index = DOCS / "README.md"
    listed = {link.split("#", 1)[0] for link in _links(index)}
    pages = {p.name for p in DOCS.glob("*.md")} - {"README.md"}
    assert pages and pages <= listed
    readme = ROOT / "README.md"
    assert f"{GITHUB}docs/README.md" in _links(readme)
    assert len(readme.read_text(encoding="utf-8").splitlines()) <= 250


def test_every_file_and_command_module_the_pages_name_exists():
    named = []
    for page in _pages():
        text = page.read_text(encoding="utf-8")
        for path in re.findall(r"(?<![\w/.])((?:benchmarks|tests|examples)/[\w/.-]+\.\w+)", text):
            named.append((page, ROOT / path))
        for module in re.findall(r"-m (tests(?:\.\w+)+)", text):
            named.append((page, ROOT / (module.replace(".", "/") + ".py")))
    assert len(named) >= 10
    missing = [
        f"{page.relative_to(ROOT)}: {path.relative_to(ROOT)}"
        for page, path in named
        if not path.exists()
    ]
    assert missing == []


def layers_in_architecture(text: str) -> list[tuple[str, frozenset[str], str]]:
    """The layer table of ARCHITECTURE.md: (name, members, what it holds), bottom first."""
    section = text.split("### Which layer may import which", 1)[1].split("\n### ", 1)[0]
    rows = re.findall(r"^\| `(\w+)` \| ((?:`\w+`(?:, )?)+) \| (.+) \|$", section, re.M)
    return [
        (name, frozenset(re.findall(r"`(\w+)`", members)), holds) for name, members, holds in rows
    ]


def test_architecture_quotes_the_layers_of_the_import_test():
    from tests.package.test_import_graph import LAYERS

    quoted = layers_in_architecture(ARCHITECTURE.read_text(encoding="utf-8"))
    assert quoted == [(layer.name, layer.members, layer.holds) for layer in LAYERS]
