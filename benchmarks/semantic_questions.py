"""LoCoMo at question time with semantic recall: ``pipecat-summarizer questions`` with
``RecallParams(semantic=SemanticRecall(...))`` for ``ours_recall`` (the ``semantic`` extra).

Takes every option of ``pipecat-summarizer questions`` plus ``--min-similarity`` and
``--candidates``::

    .venv/bin/python benchmarks/semantic_questions.py --locomo /path/to/locomo10.zip
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from dataclasses import replace

from pipecat_summarizer.recall import RecallParams
from pipecat_summarizer.replay import questions
from pipecat_summarizer.replay.locomo import load_samples, select_samples
from pipecat_summarizer.semantic import SemanticRecall


def main(argv: list[str] | None = None) -> int:
    """Run the measurement; prints the tables of ``pipecat-summarizer questions``."""
    parser = argparse.ArgumentParser(prog="semantic_questions")
    sub = parser.add_subparsers(dest="command")
    questions.register(sub)
    raw = list(sys.argv[1:] if argv is None else argv)
    extra = argparse.ArgumentParser(add_help=False)
    extra.add_argument("--min-similarity", type=float, default=SemanticRecall.min_similarity)
    extra.add_argument("--candidates", type=int, default=SemanticRecall.candidates)
    extra.add_argument("--lexical", action="store_true", help="semantic off (the baseline)")
    mine, rest = extra.parse_known_args(raw)
    args = parser.parse_args(["questions", *rest])
    recall = RecallParams(
        max_tokens=args.recall_tokens,
        max_snippets=args.recall_snippets,
        min_score=args.recall_min_score,
        latency_budget_s=args.recall_budget_ms / 1000,
        search_limit=args.recall_search_limit,
        max_snippet_tokens=args.recall_snippet_tokens,
    )
    if not mine.lexical:
        semantic = SemanticRecall(min_similarity=mine.min_similarity, candidates=mine.candidates)
        semantic.embedder.load()  # type: ignore[union-attr]  # once, before the first call
        recall = replace(recall, semantic=semantic)
    samples = select_samples(load_samples(args.locomo), ids=args.locomo_id, index=args.locomo_index)
    plan = questions.Plan(recall=recall, tag=f"{int(time.time())}:")
    if args.store:
        from pipecat_summarizer.store.opening import open_store

        plan.store_factory = lambda: open_store(args.store)
    return asyncio.run(questions._main(samples, plan, args))


if __name__ == "__main__":
    sys.exit(main())
