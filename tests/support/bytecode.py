"""The checkout's bytecode, compiled once before the test workers start.

Every pytest-xdist worker collects the whole suite: it imports every test module, rewritten by
pytest for its assertions, and this project's modules. Without cached bytecode (a fresh clone,
or ``PYTHONDONTWRITEBYTECODE`` set, as on the development machine) each worker compiles them
all again: about 9 s of CPU per worker, four times over on two cores, before any test runs
(13 s to collect alone, 4 s with the bytecode cached). :func:`warm` compiles them once, in the
controller, split over ``jobs`` processes, into the usual ``__pycache__`` folders (ignored by
git): pytest's rewritten modules as pytest itself caches them, the others with ``compileall``.
The workers then only read them. Python and pytest check each cached file against its source,
so a file edited since is compiled again as before. Anything that goes wrong here only means
the workers compile for themselves.

pytest also rewrites the modules of its plugins' packages (installed with a ``pytest11`` entry
point: hypothesis, anyio, xdist, ...), 115 of them in each process that collects the suite;
with ``PYTHONDONTWRITEBYTECODE`` none is ever cached, so each worker rewrote them all again
(about 1.2 s of CPU, a seventh of a worker's collection). :func:`warm` caches them too, as
pytest would where it may write bytecode.
"""

from __future__ import annotations

import compileall
import fnmatch
import importlib.util
import multiprocessing
import os
from pathlib import Path
from typing import Any

#: Folders of the checkout whose modules the tests import (or run as scripts).
SOURCES = ("pipecat_summarizer", "pipecat_summarizer_cli", "tests", "examples")

#: Longer than the compilation takes on a loaded machine (4 s with two processes).
TIMEOUT_S = 60.0

_config: Any = None  # the controller's pytest config, inherited by the forked processes
_plugins: frozenset[str] = frozenset()  # the plugins' files pytest rewrites (same)


def _is_rewritten(path: Path, patterns: list[str]) -> bool:
    """pytest rewrites the test modules (``python_files``) and the conftest files."""
    return path.name == "conftest.py" or any(fnmatch.fnmatch(path.name, p) for p in patterns)


def _compile(paths: list[str]) -> int:
    """Compile ``paths``: rewritten as pytest caches them, or plain (those already cached
    are left alone). Returns how many were rewritten."""
    from _pytest.assertion import rewrite

    state = _config.stash[rewrite.assertstate_key]
    patterns = _config.getini("python_files")
    written = 0
    for name in paths:
        path = Path(name)
        if name not in _plugins and not _is_rewritten(path, patterns):
            compileall.compile_file(name, quiet=2)
            continue
        cache_dir = rewrite.get_cache_dir(path)
        pyc = cache_dir / (path.name[:-3] + rewrite.PYC_TAIL)
        if rewrite._read_pyc(path, pyc) is not None or not rewrite.try_makedirs(cache_dir):
            continue
        try:
            source_hash, code = rewrite._rewrite_test(path, _config)
        except (SyntaxError, UnicodeDecodeError, OSError):
            continue  # pytest reports it where it imports it, if it ever does
        rewrite._write_pyc(state, code, source_hash, pyc)
        written += 1
    return written


def _plugin_paths(config: Any, root: Path) -> list[str]:
    """The source files of the modules and packages pytest marked for rewriting outside the
    checkout (its plugins' distributions), or none when they cannot be found."""
    hook = getattr(config.pluginmanager, "rewrite_hook", None)
    names = getattr(hook, "_must_rewrite", None) or ()
    paths: list[str] = []
    for name in sorted(names):
        try:
            spec = importlib.util.find_spec(name)
        except (ImportError, ValueError):
            continue
        if spec is None or spec.origin is None:
            continue
        origin = Path(spec.origin)
        if root in origin.parents:
            continue  # the checkout's own
        if spec.submodule_search_locations:
            paths += [
                str(p)
                for location in spec.submodule_search_locations
                for p in Path(location).rglob("*.py")
                if "__pycache__" not in p.parts
            ]
        elif origin.suffix == ".py":
            paths.append(str(origin))
    return paths


def warm(config: Any, jobs: int = 2) -> int:
    """Compile the checkout's modules (see the module's docstring) with ``jobs`` processes.

    Args:
        config: The controller's pytest config (its rootdir, ``python_files``, assert mode).
        jobs: Processes to compile with.

    Returns:
        How many modules were rewritten (0 when all were cached, or when it could not run).
    """
    global _config, _plugins
    if config.getoption("assertmode", "rewrite") != "rewrite":
        return 0
    root = Path(config.rootpath)
    paths = sorted(
        str(p)
        for folder in SOURCES
        for p in (root / folder).rglob("*.py")
        if "__pycache__" not in p.parts
    )
    plugins = _plugin_paths(config, root)
    paths += plugins
    if not paths:
        return 0
    _config, _plugins = config, frozenset(plugins)
    try:
        # fork: the processes inherit the config (and pytest's rewriter) as they are
        with multiprocessing.get_context("fork").Pool(max(1, jobs)) as pool:
            chunks = [paths[i::jobs] for i in range(jobs)]
            # a stuck process (a lock held across the fork) must not hold the run
            return sum(pool.map_async(_compile, chunks).get(timeout=TIMEOUT_S))
    except Exception:  # an optimisation only: the workers compile for themselves
        return 0
    finally:
        _config, _plugins = None, frozenset()


def jobs_for(workers: int) -> int:
    """Processes to compile with: no more than the machine's cores or the workers."""
    return max(1, min(workers, os.cpu_count() or 1))
