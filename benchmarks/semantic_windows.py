"""Recall by meaning over windows of messages: does embedding a line with its neighbour rank
LoCoMo's evidence higher than embedding the line alone?

For each conversation, every line of every session is embedded with the ``semantic`` extra's
model (MiniLM) three ways: the line alone (what the semantic index embeds), the line after
the one said before it, and the line before the one said after it. Each question (categories
1-4) is embedded alone, and each of its evidence lines counts as found when that line's own
vector is among the question's ``k`` nearest ("own"), or when its vector or the vector of the
line before or after it is ("near": recall shows a hit with the reply said after it, and the
first hits with the line said before). Printed: the shares found at ``k`` = 10 and 30 per
variant, and the indexing CPU seconds (this thread's) of each.

This is a ranking probe, not answer recall: the seventeenth round in benchmarks/README.md
also ran the windows through ``questions --semantic`` (with a copy of the index embedding
windows), where they did not help. Run::

    .venv/bin/python benchmarks/semantic_windows.py --locomo /path/to/locomo10.zip --ids 26,30
"""

from __future__ import annotations

import argparse
import json
import time
import zipfile

import numpy as np

from pipecat_summarizer._recall.embedding import MiniLMEmbedder


def _lines(conversation: dict) -> list[tuple[str, str]]:
    """``(dia_id, text)`` of every session's lines, in order."""
    out, n = [], 1
    while f"session_{n}" in conversation:
        out += [(t["dia_id"], t["text"]) for t in conversation[f"session_{n}"]]
        n += 1
    return out


def _variants(texts: list[str]) -> dict[str, list[str]]:
    last = len(texts) - 1
    return {
        "alone": texts,
        "before + line": [(f"{texts[i - 1]} " if i else "") + t for i, t in enumerate(texts)],
        "line + after": [t + (f" {texts[i + 1]}" if i < last else "") for i, t in enumerate(texts)],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--locomo", required=True, help="locomo10.zip")
    parser.add_argument("--ids", default="26,30", help="conversation ids, comma-separated")
    args = parser.parse_args()
    archive = zipfile.ZipFile(args.locomo)
    names = {n.rsplit("/", 1)[-1]: n for n in archive.namelist() if n.endswith(".json")}
    model = MiniLMEmbedder(blas_threads=2)
    found: dict[tuple[str, str, int], list[int]] = {}
    cpu: dict[str, float] = {}
    ids = args.ids.split(",")
    missing = [i for i in ids if f"{i}.json" not in names]
    if missing:
        parser.error(f"no conversation {', '.join(missing)} in {args.locomo}")
    for cid in ids:
        data = json.loads(archive.read(names[f"{cid}.json"]))
        lines = _lines(data.get("conversation", data))
        row = {dia: i for i, (dia, _) in enumerate(lines)}
        qa = [q for q in data["qa"] if q.get("category") in (1, 2, 3, 4) and q.get("evidence")]
        questions = model.embed([q["question"] for q in qa])
        for name, texts in _variants([t for _, t in lines]).items():
            began = time.thread_time()
            vectors = model.embed(texts)
            cpu[name] = cpu.get(name, 0.0) + time.thread_time() - began
            order = np.argsort(-(questions @ vectors.T), axis=1)
            for k in (10, 30):
                own = found.setdefault((name, "own", k), [0, 0])
                near = found.setdefault((name, "near", k), [0, 0])
                for q, ranked in zip(qa, order, strict=True):
                    top = set(ranked[:k].tolist())
                    for i in (row[e] for e in q["evidence"] if e in row):
                        own[0] += i in top
                        near[0] += bool({i - 1, i, i + 1} & top)
                        own[1] += 1
                        near[1] += 1
    for (name, how, k), (hit, total) in sorted(found.items()):
        print(f"{name:14s} {how:4s} top {k}: {hit}/{total} = {100 * hit / total:.1f}%")
    for name, seconds in cpu.items():
        print(f"{name:14s} indexing CPU {seconds:.1f} s")


if __name__ == "__main__":
    main()
