"""The package as users install it: the sdist and the wheel are built from this tree, the wheel
is installed into a fresh virtualenv, and its CLI shows its help and replays a bundled call.

Offline and fast: the fresh virtualenv has no pip of its own, and gets the dependencies through
a ``.pth`` file naming this project's site-packages (the wheel is installed with ``--no-deps``).
The test checks that ``pipecat_summarizer`` is imported from the fresh virtualenv, not from the
checkout, so the bundled data is found only if the wheel ships it.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import tarfile
import venv
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BUNDLED = ("nutrition_call", "support_call")
IGNORED = (".venv", ".git", "out", "build", "dist", "__pycache__", "*.egg-info", ".*_cache")


def _run(cmd: list[str], cwd: Path, env: dict | None = None) -> subprocess.CompletedProcess:
    done = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, f"{cmd} failed ({done.returncode}):\n{done.stdout}\n{done.stderr}"
    return done


def _build_and_install(base: Path) -> dict[str, Path]:
    """The sdist and wheel of this working tree (built from a copy: the shared checkout keeps
    no build/ or egg-info changes), and a fresh virtualenv with the wheel installed."""
    src = base / "src"
    shutil.copytree(ROOT, src, ignore=shutil.ignore_patterns(*IGNORED))
    dist = base / "dist"
    _run([sys.executable, "-m", "build", "--no-isolation", "--outdir", str(dist), "."], src)
    (sdist,) = dist.glob("*.tar.gz")
    (wheel,) = dist.glob("*.whl")

    env_dir = base / "fresh"
    venv.EnvBuilder(with_pip=False).create(env_dir)
    python = env_dir / "bin" / "python"
    site = _run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], base
    ).stdout.strip()
    # the dependencies (pipecat, openai, tqdm...) from this project's environment, after
    # the fresh site-packages on sys.path, so the installed wheel wins over anything there
    Path(site, "project_deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    _run(
        [sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps"]
        + ["--no-index", "--quiet", str(wheel)],
        base,
    )
    return {"sdist": sdist, "wheel": wheel, "env": env_dir, "site": Path(site), "cwd": base}


def test_built_package_installs_and_runs_from_a_fresh_virtualenv(tmp_path):
    """One build for every check (a build per test would multiply under pytest-xdist)."""
    built = _build_and_install(tmp_path)
    _check_sdist(built)
    _check_wheel(built)
    _check_installed_cli(built)


def _check_sdist(built: dict[str, Path]) -> None:
    with tarfile.open(built["sdist"]) as tar:
        names = {n.split("/", 1)[1] for n in tar.getnames() if "/" in n}
    for needed in (
        "pyproject.toml",
        "LICENSE",
        "README.md",
        "CHANGELOG.md",
        "ARCHITECTURE.md",
        "docs/README.md",
        "Makefile",
        "tests/conftest.py",
        "tests/support/openai_server.py",
        "tests/support/pipeline_utils.py",
        "tests/package/test_packaging.py",
        "examples/voice_bot.py",
        "examples/client/index.html",
        *(f"pipecat_summarizer_cli/replay/data/{n}.jsonl" for n in BUNDLED),
        *(f"pipecat_summarizer_cli/replay/data/{n}.probes.txt" for n in BUNDLED),
    ):
        assert needed in names, f"{needed} missing from the sdist"


def _check_wheel(built: dict[str, Path]) -> None:
    with zipfile.ZipFile(built["wheel"]) as whl:
        names = set(whl.namelist())
        (entry_points,) = [n for n in names if n.endswith(".dist-info/entry_points.txt")]
        scripts = whl.read(entry_points).decode()
        (metadata,) = [n for n in names if n.endswith(".dist-info/METADATA")]
        meta = whl.read(metadata).decode()
    for n in BUNDLED:
        assert f"pipecat_summarizer_cli/replay/data/{n}.jsonl" in names
        assert f"pipecat_summarizer_cli/replay/data/{n}.probes.txt" in names
    assert "pipecat_summarizer/py.typed" in names
    # both packages whole: the library (its private modules too) and the command line beside it
    for package in ("pipecat_summarizer", "pipecat_summarizer_cli"):
        sources = {p.relative_to(ROOT).as_posix() for p in (ROOT / package).rglob("*.py")}
        assert f"{package}/__init__.py" in sources
        assert sources <= names, f"missing from the wheel: {sorted(sources - names)}"
    assert "pipecat-summarizer = pipecat_summarizer_cli.main:main" in scripts
    assert not any(n.startswith(("tests/", "examples/", "benchmarks/")) for n in names)
    assert "License-Expression: BSD-2-Clause" in meta


def _check_installed_cli(built: dict[str, Path]) -> None:
    env_bin = built["env"] / "bin"
    cwd = built["cwd"]  # not the checkout: '' on sys.path must not find the source tree
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    # one interpreter imports both packages (a start each would double the import time)
    imports = (
        "import pipecat_summarizer as a, pipecat_summarizer_cli as b\n"
        "print(a.__file__)\nprint(b.__file__)"
    )
    wheres = _run([str(env_bin / "python"), "-c", imports], cwd, env).stdout.splitlines()
    assert len(wheres) == 2, wheres
    for where in wheres:
        assert Path(where).resolve().is_relative_to(built["site"].resolve()), where

    help_text = _run([str(env_bin / "pipecat-summarizer"), "--help"], cwd, env).stdout
    assert "replay" in help_text and "inspect" in help_text

    report = cwd / "report.json"
    out = _run(
        [str(env_bin / "pipecat-summarizer"), "replay", "support_call", "--instant"]
        + ["--no-progress", "--report", str(report)],
        cwd,
        env,
    ).stdout
    assert "support_call" in out
    data = json.loads(report.read_text())
    assert data["transcript"] == "support_call" and data["turns"] == 46
    # the bundled probes came with the name (no --probes-file given)
    assert data["strategies"]["pipecat_summarizer"]["probes_total"] == 6


def test_replay_takes_a_bundled_name_and_rejects_an_unknown_one(capsys):
    from pipecat_summarizer_cli.main import main
    from pipecat_summarizer_cli.replay.bundled import bundled_conversations

    assert set(BUNDLED) <= set(bundled_conversations())
    assert main(["replay", "no_such_call", "--instant"]) == 2
    err = capsys.readouterr().err
    assert "no_such_call" in err and "nutrition_call" in err
    # a path that does not exist keeps the file error (not the name one)
    assert main(["replay", "missing/call.jsonl", "--instant"]) == 2
    assert "bundled" not in capsys.readouterr().err
