"""A semantic query's latency, alone and beside the archive's indexing, by numpy's BLAS threads.

Semantic recall embeds a turn's query in its query thread while the indexing thread may be
embedding the caller's archive (a returning caller's start, or a busy process). Both are the
default model's (all-MiniLM-L6-v2) numpy forward pass, so both run on numpy's BLAS. This
prints, for each BLAS setting, the query's wall time and its thread's CPU time (p50, p99,
max, in milliseconds):

* ``alone``: one query at a time, nothing else embedding;
* ``beside indexing``: the same queries while another thread embeds 64-message chunks
  without pause (as ``SemanticIndex`` does for a returning caller's archive).

Settings: ``blas 1`` is what loading the model sets (``MiniLMEmbedder(blas_threads=1)``);
``blas N`` is OpenBLAS's own default (one thread per core), kept with
``MiniLMEmbedder(blas_threads=None)``. Each setting runs in its own process (the count is
process-wide).

Run: ``nice -n 10 .venv/bin/python benchmarks/semantic_query.py`` (``--queries``, default 40).
On a loaded machine read the CPU columns beside the wall ones.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

QUESTIONS = [
    "What did Caroline say about the adoption agency she talked to?",
    "When did Melanie go camping with her kids?",
    "Which school is my daughter starting at in September?",
    "What was the name of the dog we adopted last spring?",
    "How far did I say I could run before my knee started hurting?",
]
DOCS = [
    "Yesterday my sister called about the trip to Lisbon in May, and I said we would sort "
    f"it out by the weekend, once the kids are back from camp ({i})."
    for i in range(64)
]


def _quantiles(values: list[float]) -> dict[str, float]:
    values = sorted(values)
    return {
        "p50": values[len(values) // 2] * 1000,
        "p99": values[min(len(values) - 1, int(len(values) * 0.99))] * 1000,
        "max": values[-1] * 1000,
    }


def _child(blas: str, queries: int) -> dict:
    """One setting, in this process: the query timings alone and beside indexing."""
    from pipecat_summarizer._recall.embedding import MiniLMEmbedder, blas_threads

    embedder = MiniLMEmbedder(blas_threads=1 if blas == "1" else None)
    embedder.load()
    embedder.embed(QUESTIONS[:1])  # warm
    out: dict = {"blas": blas_threads()}

    def run() -> tuple[list[float], list[float]]:
        walls, cpus = [], []
        for i in range(queries):
            wall, cpu = time.perf_counter(), time.thread_time()
            embedder.embed([QUESTIONS[i % len(QUESTIONS)] + f" ({i})"])
            walls.append(time.perf_counter() - wall)
            cpus.append(time.thread_time() - cpu)
        return walls, cpus

    walls, cpus = run()
    out["alone"] = {"wall": _quantiles(walls), "cpu": _quantiles(cpus)}
    stop = threading.Event()

    def index() -> None:
        while not stop.is_set():
            embedder.embed(DOCS)

    indexing = threading.Thread(target=index, name="semantic-embed")
    indexing.start()
    try:
        time.sleep(0.2)
        walls, cpus = run()
    finally:
        stop.set()
        indexing.join()
    out["beside indexing"] = {"wall": _quantiles(walls), "cpu": _quantiles(cpus)}
    return out


def main(argv: list[str] | None = None) -> int:
    """Run each setting in its own process and print the table."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--queries", type=int, default=40)
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(_child(args.child, args.queries)))
        return 0
    rows = []
    for blas in ("1", "default"):
        done = subprocess.run(
            [sys.executable, __file__, "--child", blas, "--queries", str(args.queries)],
            capture_output=True,
            text=True,
            check=True,
        )
        result = json.loads(done.stdout.strip().splitlines()[-1])
        for phase in ("alone", "beside indexing"):
            w, c = result[phase]["wall"], result[phase]["cpu"]
            rows.append(
                f"| blas {result['blas']} | {phase} | {w['p50']:.1f} / {w['p99']:.1f} / "
                f"{w['max']:.1f} | {c['p50']:.1f} / {c['p99']:.1f} / {c['max']:.1f} |"
            )
    print(f"MiniLM query, {args.queries} queries per phase (ms)")
    print("| BLAS threads | phase | wall p50 / p99 / max | query thread CPU p50 / p99 / max |")
    print("| --- | --- | --- | --- |")
    print("\n".join(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
