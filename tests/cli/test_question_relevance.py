"""Honest figures of the question-time measurement (replay/question_calls.py): no question
reaches the archive it measures, the relevance of the recalled block (tokens, evidence), and
scoring against corrected answers (replay/gold_answers.py). Real pipelines, the offline
summarizer, an in-memory SQLite store, on the tiny LoCoMo-like conversation of
test_recall_replay."""

from __future__ import annotations

import asyncio
import json

import pytest

from pipecat_summarizer.params import RecallParams
from pipecat_summarizer_cli.replay.locomo import convert
from pipecat_summarizer_cli.replay.question_calls import Plan, across_calls, question_time
from pipecat_summarizer_cli.replay.question_relevance import (
    evidence_ids,
    holds,
    percentile,
    snippet_quotes,
)
from pipecat_summarizer_cli.replay.strategies import Thresholds
from tests.cli.test_questions import DETAILS, _sample

ASKED = [q for _, q, _ in DETAILS]


def _with_evidence() -> dict:
    """The sample with dialog ids, and each question's evidence: its detail's line."""
    sample = _sample()
    conv = sample["conversation"]
    for session in ("session_1", "session_2"):
        n = session[-1]
        for i, line in enumerate(conv[session], 1):
            line["dia_id"] = f"D{n}:{i}"
    for k, item in enumerate(sample["qa"]):
        item["evidence"] = [f"D1:{2 * k + 1}"]  # Ann's detail k is line 2k+1 of session 1
    return sample


@pytest.fixture
def plan():
    return Plan(
        thresholds=Thresholds(max_context_tokens=None, max_unsummarized_messages=6, keep=2),
        recall=RecallParams(latency_budget_s=5.0),  # what is recalled, not how fast
    )


def _leaks(blocks: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """(question, asked question found in its recalled block)."""
    return [(q, other) for q, block in blocks for other in ASKED if other.lower() in block.lower()]


def _no_question_comes_back(scores) -> None:
    # each question is asked of "ours" first, then of "ours_recall", in calls of the same
    # caller on the same store: an archived question would be the best hit for itself
    recalled = scores["ours_recall"]
    assert len(recalled.blocks) == len(DETAILS)
    assert any(block for _, block in recalled.blocks)  # recall did run
    assert _leaks(recalled.blocks) == []
    assert recalled.recall() == 1.0


async def test_question_time_no_question_comes_back_in_a_recalled_block(plan):
    # LoCoMo asks about one detail in several questions: each is asked on a copy of the
    # final state, and the one before it left the context then (the application replaced it)
    sample = _with_evidence()
    sample["qa"] += [
        {**item, "question": item["question"].rstrip("?") + ", exactly?"} for item in sample["qa"]
    ]
    scores = await question_time(convert(sample), plan)
    recalled = scores["ours_recall"]
    assert len(recalled.blocks) == 2 * len(DETAILS)
    assert any(block for _, block in recalled.blocks)
    assert _leaks(recalled.blocks) == []


async def test_relevance_block_tokens_evidence_snippets_and_evidence_recall(plan):
    scores = await question_time(convert(_with_evidence()), plan)
    full, ours, recalled = scores["full_buffer"], scores["ours"], scores["ours_recall"]
    # the full buffer carries every evidence line; the summaries lose most of them
    assert full.evidence == [1.0] * len(DETAILS)
    assert ours.evidence_recall() is not None and ours.evidence_recall() < 0.5
    assert recalled.evidence_recall() == 1.0  # recall brings each back
    # tokens per question of the block, for the strategy with recall only
    assert full.block_tokens == [] and ours.block_tokens == []
    assert len(recalled.block_tokens) == len(DETAILS)
    assert sum(t > 0 for t in recalled.block_tokens) == recalled.recalled > 0
    # each block holds its question's evidence line; the filler beside it does not count
    assert recalled.snippets >= recalled.recalled
    assert 0 < recalled.evidence_snippets <= recalled.snippets
    figures = recalled.relevance()
    assert figures["block_tokens"]["p50"] <= figures["block_tokens"]["p90"]  # type: ignore[index]
    assert figures["evidence_snippet_share"] == recalled.evidence_snippets / recalled.snippets
    assert "block_tokens" not in full.relevance()


def test_relevance_rules():
    block = (
        "Recalled from earlier (archived ...):\n"
        '- [call of 2023-05-08 13:56] caller: "…the plumber said the leak came from the" '
        '-> assistant: "Good to know!"\n'
        '- [this call, by turn 3] caller: "Any plans \\"for\\" dinner?"'
    )
    quotes = snippet_quotes(block)
    assert quotes == [
        ["the plumber said the leak came from the", "Good to know!"],
        ['Any plans "for" dinner?'],
    ]
    line = "the plumber said the leak came from the dishwasher hose"
    assert holds(quotes[0][0], line)  # a window holding most of the line
    assert not holds("Good to know!", line)
    assert not holds("the", line)  # a word in common is not the line
    assert evidence_ids(["D1:3", "D8:6; D9:17", "D1:3"]) == ["D1:3", "D8:6", "D9:17"]
    assert percentile([5, 1, 3, 2, 4], 50) == 3 and percentile([5, 1, 3, 2, 4], 90) == 5
    assert percentile([], 90) == 0


# -- the command: --answers PATH (both answer sets in one run: test_s8_answers_audit) ----------


def _command(tmp_path, capsys, *options: str) -> tuple[int, dict, str]:
    from pipecat_summarizer_cli.main import main

    data = tmp_path / "locomo.json"
    data.write_text(json.dumps([_with_evidence()]), encoding="utf-8")
    out = tmp_path / "scores.json"
    code = main(
        ["questions", "--locomo", str(data), "--json", str(out), "--recall-budget-ms", "5000"]
        + list(options)
    )
    printed = capsys.readouterr()
    report = json.loads(out.read_text(encoding="utf-8")) if code == 0 else {}
    return code, report, printed.out + printed.err


def test_answers_match_by_conversation_and_question_text():
    from pipecat_summarizer_cli.replay.gold_answers import question_key

    # locomo10.json names a conversation conv-30 where its per-conversation file says 30
    assert question_key("conv-30", " When did  Jon lose his job?") == question_key(
        "30", "when did jon lose his job?"
    )
    assert question_key("conv-30", "q") != question_key("conv-26", "q")


@pytest.mark.parametrize(
    "content, where",
    [
        ("{not json", "corrected.json: not JSON"),
        (json.dumps([{"sample_id": "t1", "qa": {}}]), "corrected.json: [0].qa: expected a list"),
        (
            json.dumps([{"sample_id": "t1", "qa": [{"answer": "x"}]}]),
            "corrected.json: [0].qa[0].question: expected a string",
        ),
        (
            json.dumps([{"sample_id": "t1", "qa": [{"question": "q", "answer": ["x"]}]}]),
            "corrected.json: [0].qa[0].answer: expected a string or a number",
        ),
        (json.dumps([{"qa": []}]), "corrected.json: [0].sample_id: expected a string"),
    ],
)
def test_questions_command_answers_file_errors_name_the_entry(tmp_path, capsys, content, where):
    answers = tmp_path / "corrected.json"
    answers.write_text(content, encoding="utf-8")
    code, _, printed = _command(tmp_path, capsys, "--answers", str(answers))
    assert code == 2
    assert where in printed


async def test_across_calls_no_question_comes_back_and_the_memory_is_in_every_state(plan):
    # the caller's memory loads in the background and joins at the first frame after it
    # arrives: a store slower to answer (a loaded machine) must not leave it out of the state
    # the questions start from (it raced the greeting, and joined only the first question)
    from pipecat_summarizer.store import SQLiteMemoryStore

    class SlowToRecall(SQLiteMemoryStore):
        async def caller_memory(self, user_id, *, max_calls=5):
            memory = await super().caller_memory(user_id, max_calls=max_calls)
            if memory.calls == 2:  # the questions' final call (the sessions' calls as before)
                await asyncio.sleep(0.2)
            return memory

    plan.compact_at_end = True
    conv = convert(_with_evidence())
    quick = await across_calls(conv, plan)
    _no_question_comes_back(quick)  # the same run as ever: one replay serves both checks
    plan.store_factory = SlowToRecall
    slow = await across_calls(conv, plan)
    assert quick["ours"].input_tokens > 0
    assert slow["ours"].input_tokens == quick["ours"].input_tokens
    assert slow["ours"].shares == quick["ours"].shares
