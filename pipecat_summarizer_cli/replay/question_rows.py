"""One row per question of the question-time measurement (``questions --json``'s
``"questions"``): what a strategy's request for the question held, so a run can be read
question by question without a wrapper.

A row says the question (its text, LoCoMo category, gold answer, and the corrected answer with
``--answers``), how much of each answer the request carried (the share of its content words,
as :func:`~pipecat_summarizer_cli.replay.question_scores.answer_share` scores it, and whether
all of them), the request's and the recalled block's tokens, the block's snippets (the block's
lines, as the model read them), each of LoCoMo's evidence ids with whether the block (and the
messages in view) held its line (see
:mod:`~pipecat_summarizer_cli.replay.question_relevance`), and for a strategy that recalls
whether a search of its turn was late (missed the latency budget) or was started on the
caller's words, and how the turn's recall ended as the recall step tells its observers (the
outcome word, the hits it chose from, the snippets placed, over the budget or not): a row
with hits and no snippet says "found, then placed nothing". Pure: no pipeline, no I/O.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pipecat_summarizer import RecallOutcome, is_recall_message
from pipecat_summarizer_cli.replay.gold_answers import CorrectedQA
from pipecat_summarizer_cli.replay.locomo import QAItem
from pipecat_summarizer_cli.replay.question_relevance import (
    evidence_ids,
    holds,
    normalize,
    snippet_quotes,
)
from pipecat_summarizer_cli.replay.question_scores import answer_share
from pipecat_summarizer_cli.replay.report import request_text


@dataclass(frozen=True)
class Request:
    """One question's request to the main LLM, as the measurement reads it.

    Parameters:
        text: The request's text (what the answer shares are scored on).
        in_view: The normalized texts of its messages other than the recalled block.
        recalled: It carries a recalled block.
        block: The recalled block's text (``""``: none).
        quotes: The block's snippets' quotes (``snippet_quotes(block)``).
        tokens: The request's tokens.
        block_tokens: The block's tokens (0 without one).
    """

    text: str
    in_view: list[str]
    recalled: bool
    block: str
    quotes: list[list[str]]
    tokens: int
    block_tokens: int


def read_request(messages: Sequence[str], count: Callable[[str], int]) -> Request:
    """The request of serialized ``messages`` (``count``: one serialized message's tokens)."""
    decoded = [json.loads(m) for m in messages]
    blocks = [s for s, d in zip(messages, decoded, strict=True) if is_recall_message(d)]
    block = "\n".join(str(d["content"]) for d in decoded if is_recall_message(d))
    return Request(
        text=request_text(decoded),
        in_view=[normalize(request_text([d])) for d in decoded if not is_recall_message(d)],
        recalled=bool(blocks),
        block=block,
        quotes=snippet_quotes(block),
        tokens=sum(count(m) for m in messages),
        block_tokens=sum(count(s) for s in blocks),
    )


def snippet_lines(block: str) -> list[str]:
    """The recalled block's snippets as it shows them (``- [when] caller: "…" -> …``): the
    lines :func:`~pipecat_summarizer_cli.replay.question_relevance.snippet_quotes` reads."""
    return [line for line in block.splitlines() if line.startswith("- [")]


def _held(share: float | None) -> bool | None:
    return None if share is None else share >= 1.0


def question_row(
    item: QAItem,
    request: Request,
    lines: Mapping[str, str],
    *,
    late: bool | None = None,
    early: bool | None = None,
    outcome: RecallOutcome | None = None,
) -> dict[str, Any]:
    """The row of one question asked of one strategy.

    Args:
        item: The question (a :class:`~pipecat_summarizer_cli.replay.gold_answers.CorrectedQA`
            with ``--answers``: the row has the corrected answer too).
        request: Its request (see :func:`read_request`).
        lines: The conversation's dialog lines by id.
        late: Whether a search of the turn missed the latency budget (``None``: the
            strategy does not recall).
        early: Whether the turn's search was answered by one started on the caller's words
            (``None``: the strategy does not recall).
        outcome: How the turn's recall ended (``RecallStep``'s observers are told it); the
            row's ``recall_outcome`` (``skipped``, ``recalled``, ``late``, ``error``,
            ``missed_budget``, ``watch_late``, ``nothing_new``), ``recall_hits`` (the hits
            chosen from),
            ``recall_snippets`` (the snippets the step chose for the placed block, 0 when
            none was placed; the block's ``snippets`` lines may be fewer: its rendering
            stops at the block's budget or the frame's deadline) and
            ``recall_over_budget`` (all ``None``: the strategy does not recall, or its step
            told no turn's outcome). Its durations are left out: a row says what the request
            held, and two runs of the same code give the same rows when they place the same
            blocks.
    """
    share = answer_share(request.text, item.answer)
    row: dict[str, Any] = {
        "question": item.question,
        "category": item.category,
        "answer": item.answer,
        "answer_share": share,
        "answer_in_request": _held(share),
    }
    if isinstance(item, CorrectedQA):
        corrected = None if item.corrected is None else answer_share(request.text, item.corrected)
        row["corrected_answer"] = item.corrected
        row["corrected_share"] = corrected
        row["corrected_in_request"] = _held(corrected)
    flat = [q for snippet in request.quotes for q in snippet]
    evidence = []
    for dia_id in evidence_ids(item.evidence):
        line = normalize(lines.get(dia_id, ""))
        evidence.append(
            {
                "id": dia_id,
                # None: LoCoMo names a line the conversation does not have
                "in_block": any(holds(q, line) for q in flat) if line else None,
                "in_view": any(line in m for m in request.in_view) if line else None,
            }
        )
    row.update(
        input_tokens=request.tokens,
        recalled=request.recalled,
        block_tokens=request.block_tokens,
        snippets=snippet_lines(request.block),
        evidence=evidence,
        search_late=late,
        search_early=early,
        recall_outcome=None if outcome is None else outcome.outcome,
        recall_hits=None if outcome is None else outcome.hits,
        recall_snippets=None if outcome is None else outcome.snippets,
        recall_over_budget=None if outcome is None else outcome.over_budget,
    )
    return row
