"""LoCoMo at question time: answer recall on the request the main LLM receives for each
question, asked as the caller's next turn (``pipecat-summarizer questions --locomo PATH``).

Two measurements, each through real Pipecat pipelines (a real ``LLMContextAggregatorPair``,
the replay LLM recording what it is sent, the offline extractive summarizer):

* **Question time** (one call): the conversation is replayed as one call per strategy
  (instant mode: every summary lands before the next turn). Then each question is sent as
  the next user turn on its own copy of the final context, and answer recall is measured on
  the request the main LLM receives for it. Ours archives into a store (SQLite, in memory
  by default) during the call; at question time a ``ContextSummarizer`` with
  ``recall=RecallParams(...)`` searches it (its own summaries off: a question never changes
  the state the next question sees; a summary started at that turn would not change that
  turn's request anyway).
* **Across calls**: each LoCoMo session is replayed as a separate call of the same caller
  through the store (resume on: the next call starts with the caller's pinned facts and
  "earlier calls" summary); the questions are asked in a final call, each on its own copy of
  that call's state after a greeting turn. The full buffer (every session in one context)
  is the ceiling; Pipecat's built-in keeps nothing across calls.

Strategies: ``full_buffer``, ``pipecat_builtin``, ``ours`` (``ContextSummarizer`` without
recall), ``ours_recall`` (lexical recall; with ``--semantic``, semantic recall fused with it:
the ``semantic`` extra). Answer recall is the share of an answer's content words found in
the request (:func:`~pipecat_summarizer_cli.replay.locomo.answer_recall`), by LoCoMo category and
overall (item-weighted); ``input`` is the questions' requests' tokens against the full
buffer's. The scoring (shares, per-strategy scores, the table) is in
:mod:`~pipecat_summarizer_cli.replay.question_scores`; the calls are run by
:mod:`~pipecat_summarizer_cli.replay.question_calls`; this module is the command.

``--json PATH`` writes the scores and, under ``"questions"``, one row per conversation,
measurement, strategy and question: what its request held (the answer's share, the block's
tokens and snippets, each evidence id held or not, a late search; see
:mod:`~pipecat_summarizer_cli.replay.question_rows`). Across calls, the full buffer's rows are
question time's (the same run, reused as the ceiling).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import fields, replace
from typing import Any

from pipecat_summarizer import RecallParams, SemanticRecallParams, load_semantic_model
from pipecat_summarizer.store import MemoryStore
from pipecat_summarizer_cli.replay.call_driver import Speech
from pipecat_summarizer_cli.replay.gold_answers import Corrections, load_answers
from pipecat_summarizer_cli.replay.locomo import convert, load_samples, select_samples
from pipecat_summarizer_cli.replay.question_calls import (
    ANSWER_PAUSE_S,
    GREETING,
    GREETING_PAUSE_S,
    Plan,
    across_calls,
    question_time,
    sessions,
)
from pipecat_summarizer_cli.replay.question_scores import STRATEGIES, Scores, table

__all__ = [
    "GREETING",
    "GREETING_PAUSE_S",
    "PRESETS",
    "Plan",
    "across_calls",
    "question_time",
    "recall_params",
    "register",
    "run",
    "sessions",
    "table",
]


# -- command ---------------------------------------------------------------------------------

#: ``--recall-preset``: the recall params the options start from.
PRESETS: dict[str, Callable[[], RecallParams]] = {
    "default": RecallParams,
    "small": RecallParams.small,
    "broad": RecallParams.broad,
}


def register(subparsers: Any) -> None:
    """Register ``pipecat-summarizer questions``."""
    p = subparsers.add_parser(
        "questions",
        help="LoCoMo answer recall at question time (and across calls), with and without recall",
        description=__doc__.split("\n\n")[0],
    )
    p.add_argument("--locomo", required=True, metavar="PATH", help="locomo10.zip, JSON or folder")
    p.add_argument("--locomo-id", action="append", default=[], metavar="ID")
    p.add_argument("--locomo-index", type=int, metavar="I")
    p.add_argument("--across-calls", action="store_true", help="also the across-calls table")
    p.add_argument("--store", metavar="DSN", help="a postgresql:// DSN (default: SQLite in memory)")
    p.add_argument(
        "--recall-preset",
        choices=sorted(PRESETS),
        default="default",
        help="the recall params to start from: RecallParams(), RecallParams.small() or "
        "RecallParams.broad() (the options below override them)",
    )
    p.add_argument("--recall-tokens", type=int, metavar="N", help="max_tokens (preset's)")
    p.add_argument("--recall-snippets", type=int, metavar="N", help="max_snippets (preset's)")
    p.add_argument("--recall-min-score", type=float, default=RecallParams.min_score)
    p.add_argument("--recall-budget-ms", type=float, default=RecallParams.latency_budget_s * 1000)
    p.add_argument("--recall-search-limit", type=int, metavar="N", help="search_limit (preset's)")
    p.add_argument("--recall-snippet-tokens", type=int, default=RecallParams.max_snippet_tokens)
    p.add_argument(
        "--recall-request-tokens",
        type=_request_tokens,
        default=argparse.SUPPRESS,
        metavar="N",
        help="request_tokens: what the context and an adaptive block share; 'none': the cap "
        "is always max_tokens (preset's)",
    )
    p.add_argument(
        "--recall-min-tokens",
        type=int,
        metavar="N",
        help="min_tokens: an adaptive block's least size (preset's)",
    )
    p.add_argument(
        "--recall-no-fill",
        action="store_true",
        help="strong matches only (no filling of the block with weaker hits)",
    )
    p.add_argument(
        "--recall-set",
        action="append",
        default=[],
        type=_field_value,
        metavar="FIELD=VALUE",
        help="any other RecallParams field, e.g. adaptive=false, gather=false, "
        "max_question_words=0 (repeatable; applied last)",
    )
    p.add_argument(
        "--semantic",
        action="store_true",
        help="semantic recall fused with the lexical one (the 'semantic' extra)",
    )
    p.add_argument(
        "--min-similarity",
        type=float,
        default=None,
        metavar="X",
        help="with --semantic: least cosine for a hit by meaning (default: SemanticRecallParams's)",
    )
    p.add_argument(
        "--candidates",
        type=int,
        default=None,
        metavar="N",
        help="with --semantic: hits taken from the ranking by meaning "
        "(default: SemanticRecallParams's)",
    )
    p.add_argument(
        "--compact-at-end",
        action="store_true",
        help="across calls: end each call with a manual compaction of the whole conversation",
    )
    p.add_argument(
        "--pause-ms",
        type=_milliseconds,
        default=ANSWER_PAUSE_S * 1000,
        help="the pause before each question a recalling strategy is asked (the caller "
        "hears the last answer; default %(default)s)",
    )
    p.add_argument(
        "--spoken",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="a recalling strategy's questions are spoken, as a speech-to-text service "
        "delivers them, through a pipeline with RecallPrefetch before the user aggregator "
        "(recall's search starts on the words): the turn starts, an interim transcription of "
        "all but the last word arrives, --spoken-word-ms later an interim of every word "
        "(formatted as the final one), --spoken-lead-ms later the final transcription and "
        "the turn's end (Pipecat's default turn detection ends a turn on the finalized "
        "transcription once VAD's 0.2 s of silence and the smart-turn model agree; an STT's "
        "final result comes ~0.2-0.4 s after the words). The seconds of speech before are "
        "not replayed. --no-spoken: each question is appended as a message and the search "
        "starts when the turn ends (the figures before this option; default: spoken)",
    )
    p.add_argument(
        "--spoken-word-ms",
        type=_milliseconds,
        default=Speech.word_s * 1000,
        help="from the interim of all but the last word to the interim of every word "
        "(default %(default)s)",
    )
    p.add_argument(
        "--spoken-lead-ms",
        type=_milliseconds,
        default=Speech.lead_s * 1000,
        help="from the interim of every word to the final transcription and the end of the "
        "turn (default %(default)s)",
    )
    p.add_argument(
        "--answers",
        metavar="PATH",
        help="also score against corrected gold answers, beside LoCoMo's: a JSON in "
        "LoCoMo's format (sample_id and qa per conversation) or the LoCoMo audit's errors "
        "list (question_id locomo_<i>_qa<n>, i the conversation's index in the --locomo file; "
        "error_type, correct_answer); a question it lacks keeps LoCoMo's answer",
    )
    p.add_argument(
        "--json",
        metavar="PATH",
        help="also write the scores as JSON, with a row per strategy and question "
        '("questions": what each request held, see replay/question_rows.py)',
    )
    p.set_defaults(run=run)


#: The longest wait an option in milliseconds takes (a minute).
_MAX_MS = 60_000.0


def _milliseconds(value: str) -> float:
    """A wait in milliseconds: a finite number from 0 to :data:`_MAX_MS`."""
    try:
        ms = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected milliseconds, got {value!r}") from None
    if not 0 <= ms <= _MAX_MS:  # NaN fails too
        raise argparse.ArgumentTypeError(f"expected 0 to {_MAX_MS:.0f} ms, got {value!r}")
    return ms


def _request_tokens(value: str) -> int | None:
    """``--recall-request-tokens``: a number, or ``none`` (the cap is always ``max_tokens``)."""
    if value.strip().lower() == "none":
        return None
    try:
        return int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer or 'none', got {value!r}") from None


#: ``--recall-set``'s fields: the plain settings (``semantic`` has its own options; a
#: recalling strategy with ``enabled`` off would never recall under its recalling name).
_SETTABLE = frozenset(f.name for f in fields(RecallParams)) - {"semantic", "enabled"}


def _field_value(value: str) -> tuple[str, Any]:
    """``--recall-set FIELD=VALUE``: the field and its value, read as the type of the
    field's default (``none`` for a field that may be ``None``); the params check the range."""
    name, sep, text = value.partition("=")
    name, text = name.strip(), text.strip()
    if not sep or name not in _SETTABLE:
        raise argparse.ArgumentTypeError(
            f"expected FIELD=VALUE with FIELD one of {', '.join(sorted(_SETTABLE))}, got {value!r}"
        )
    default = getattr(RecallParams, name)
    if text.lower() == "none" and name == "request_tokens":
        return name, None
    if isinstance(default, bool):
        if text.lower() not in ("true", "false"):
            raise argparse.ArgumentTypeError(f"{name} must be true or false, got {text!r}")
        return name, text.lower() == "true"
    try:
        return name, float(text) if isinstance(default, float) else int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{name} must be a number, got {text!r}") from None


def recall_params(args: argparse.Namespace) -> RecallParams:
    """The ``RecallParams`` the command's options ask for (``--semantic``: with a
    ``SemanticRecallParams`` whose model is loaded now, once for the run).

    Raises:
        ImportError: ``--semantic`` without the ``semantic`` extra (the message says how
            to install it).
        ValueError / TypeError: A bad option (the message names the field).
    """
    semantic = None
    if args.semantic:
        # SemanticRecallParams() raises the install hint without wordllama
        options: dict[str, Any] = {}
        if args.min_similarity is not None:
            options["min_similarity"] = args.min_similarity
        if args.candidates is not None:
            options["candidates"] = args.candidates
        semantic = SemanticRecallParams(**options)
    elif args.min_similarity is not None or args.candidates is not None:
        raise ValueError("--min-similarity and --candidates need --semantic")
    preset = PRESETS[args.recall_preset]()
    chosen = {
        "max_tokens": args.recall_tokens,
        "max_snippets": args.recall_snippets,
        "search_limit": args.recall_search_limit,
        "min_tokens": args.recall_min_tokens,
    }
    given = {k: v for k, v in chosen.items() if v is not None}
    if "recall_request_tokens" in args:  # None is a value here: no request-sized cap
        given["request_tokens"] = args.recall_request_tokens
    recall = replace(
        preset,
        **given,
        min_score=args.recall_min_score,
        latency_budget_s=args.recall_budget_ms / 1000,
        max_snippet_tokens=args.recall_snippet_tokens,
        fill=not args.recall_no_fill,
        semantic=semantic,
    )
    if args.recall_set:
        recall = replace(recall, **dict(args.recall_set))
    if semantic is not None:
        load_semantic_model(semantic)  # once: a call would go lexical meanwhile
    return recall


def run(args: argparse.Namespace) -> int:
    """Run the command; prints the tables."""
    try:
        recall = recall_params(args)
        every = load_samples(args.locomo)
        samples = select_samples(every, ids=args.locomo_id, index=args.locomo_index)
        # the audit names a conversation by its index in the file read
        answers = load_answers(args.answers, [sid for sid, _ in every]) if args.answers else None
    except (ImportError, ValueError, TypeError, OSError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    factory = None
    if args.store:
        from pipecat_summarizer.store import open_store

        def factory() -> MemoryStore:
            # one database for the run: each conversation's caller id (tagged with the
            # run's start) keeps them apart
            return open_store(args.store)

    plan = Plan(
        recall=recall,
        store_factory=factory,
        tag=f"{int(time.time())}:",
        compact_at_end=args.compact_at_end,
        pause_s=args.pause_ms / 1000,
        speech=(
            Speech(word_s=args.spoken_word_ms / 1000, lead_s=args.spoken_lead_ms / 1000)
            if args.spoken
            else None
        ),
    )
    return asyncio.run(_main(samples, plan, args, answers))


async def _main(
    samples: Sequence[tuple[str, dict]],
    plan: Plan,
    args: argparse.Namespace,
    answers: Corrections | None = None,
) -> int:
    from loguru import logger

    logger.remove()
    logger.add(sys.stderr, level="WARNING")
    total = {s: Scores() for s in STRATEGIES}
    across_total: dict[str, Scores] = {s: Scores() for s in STRATEGIES}
    report: dict[str, Any] = {"conversations": {}}
    rows: list[dict[str, Any]] = []  # per conversation, measurement, strategy and question
    t0 = time.perf_counter()
    for sid, sample in samples:
        conv = convert(sample, sid)
        if answers is not None:
            conv = answers.apply(conv)
        scores = await question_time(conv, plan)
        for s, v in scores.items():
            total[s].merge(v)
        entry: dict[str, Any] = {
            s: {
                "recall": v.recall(),
                "input_tokens": v.input_tokens,
                "evidence_recall": v.evidence_recall(),
            }
            for s, v in scores.items()
        }
        if answers is not None:
            for s, v in scores.items():
                entry[s]["recall_corrected"] = v.recall(corrected=True)
        rows += _rows(sid, "question_time", scores)
        line = "  ".join(f"{s} {v.recall():.1%}" for s, v in scores.items())
        if args.across_calls:
            across = await across_calls(conv, plan, full=scores["full_buffer"])
            for s, v in across.items():
                across_total[s].merge(v)
            rows += _rows(sid, "across_calls", across)  # its full buffer: question time's
            entry["across_calls"] = {
                s: {"recall": v.recall(), "evidence_recall": v.evidence_recall()}
                for s, v in across.items()
            }
            if answers is not None:
                for s, v in across.items():
                    entry["across_calls"][s]["recall_corrected"] = v.recall(corrected=True)
            line += "  | across: " + "  ".join(f"{s} {v.recall():.1%}" for s, v in across.items())
        report["conversations"][sid] = entry
        print(
            f"{sid} ({len(conv.transcript.turns)} turns, {time.perf_counter() - t0:.0f}s): {line}",
            file=sys.stderr,
            flush=True,
        )
    both = answers is not None  # recall against LoCoMo's answers and the corrected ones
    print(
        table(
            "LoCoMo at question time (one call; each question on a copy of the final state)",
            total,
            corrected=both,
        )
    )
    if args.across_calls:
        print()
        print(
            table(
                "LoCoMo across calls (each session a call of one caller; questions in a last call)",
                across_total,
                corrected=both,
            )
        )
    if answers is not None:
        print()
        print(answers.line())
        report["answers"] = answers.report()
    if args.json:
        report["question_time"] = {s: v.shares for s, v in total.items()}
        if both:
            report["question_time_corrected"] = {s: v.corrected for s, v in total.items()}
        report["relevance"] = {"question_time": {s: v.relevance() for s, v in total.items()}}
        if args.across_calls:
            report["across_calls"] = {s: v.shares for s, v in across_total.items()}
            if both:
                report["across_calls_corrected"] = {s: v.corrected for s, v in across_total.items()}
            report["relevance"]["across_calls"] = {
                s: v.relevance() for s, v in across_total.items()
            }
        report["questions"] = rows
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(report, f, indent=1)
    return 0


def _rows(sid: str, measurement: str, scores: dict[str, Scores]) -> list[dict[str, Any]]:
    """One conversation's question rows of ``measurement``, each strategy's, labelled."""
    return [
        {"conversation": sid, "measurement": measurement, "strategy": s, **row}
        for s, v in scores.items()
        for row in v.rows
    ]
