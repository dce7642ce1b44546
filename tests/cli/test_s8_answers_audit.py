"""``questions --answers PATH`` in the LoCoMo audit's format, and both answer sets scored in
one run (replay/gold_answers.py, replay/question_scores.py). The audit entries here are
invented, in the audit's shape; the command runs through real pipelines on the tiny
LoCoMo-like conversation of test_questions."""

from __future__ import annotations

import json

import pytest

from pipecat_summarizer_cli.replay.gold_answers import (
    CorrectedQA,
    corrected_answer,
    load_answers,
)
from pipecat_summarizer_cli.replay.locomo import QAItem, convert
from pipecat_summarizer_cli.replay.question_scores import Scores
from tests.cli.test_question_relevance import _command, _with_evidence
from tests.cli.test_questions import DETAILS


def _entry(i: int, n: int, question: str, golden: str, kind: str, correct: str) -> dict:
    return {
        "question_id": f"locomo_{i}_qa{n}",
        "question": question,
        "golden_answer": golden,
        "category": 4,
        "error_type": kind,
        "cited_evidence": ["D1:1"],
        "correct_evidence": ["D1:2"],
        "reasoning": "invented for the test",
        "correct_answer": correct,
    }


AUDIT = [
    # wrong answer: scored against the correction, its evidence id dropped
    _entry(0, 1, DETAILS[0][1], "salty", "HALLUCINATION", "far too much pepper (D1:1)"),
    # only the citation is wrong: LoCoMo's answer stays, however the audit words it
    _entry(0, 2, DETAILS[1][1], "blue", "WRONG_CITATION", "blue, or maybe grey"),
    # the same answer once its aside is gone: nothing changes
    _entry(0, 3, DETAILS[2][1], "dishwasher hose", "TEMPORAL_ERROR", "dishwasher hose (in June)"),
    # no answer in the transcript: out of the corrected column
    _entry(0, 4, DETAILS[3][1], "cardboard castles", "AMBIGUOUS", "Cannot be determined here."),
    _entry(0, 9, "A question nobody asked?", "x", "HALLUCINATION", "y"),
    _entry(3, 1, DETAILS[0][1], "salty", "HALLUCINATION", "sweet"),  # past the file
]


def test_audit_answers_scored_beside_locomo_answers_in_one_run(tmp_path, capsys):
    answers = tmp_path / "errors.json"
    answers.write_text(json.dumps(AUDIT), encoding="utf-8")
    code, report, printed = _command(tmp_path, capsys, "--answers", str(answers))
    assert code == 0, printed
    # LoCoMo's answers: the full buffer finds each; the corrected set: not the pepper, and
    # the question without an answer is left out
    assert report["question_time"]["full_buffer"]["4"] == [1.0, 1.0, 1.0, 1.0]
    assert report["question_time_corrected"]["full_buffer"]["4"] == [0.0, 1.0, 1.0]
    assert report["question_time_corrected"]["ours_recall"]["4"] == [0.0, 1.0, 1.0]
    conv = report["conversations"]["t1"]["full_buffer"]
    assert conv["recall"] == 1.0 and conv["recall_corrected"] == pytest.approx(2 / 3)
    assert report["answers"] == {
        "path": str(answers),
        "format": "audit",
        "matched": 3,
        "corrected": 1,
        "no_answer": 1,
        "unmatched": 1,
        "not_measured": 0,
        "questions": len(DETAILS),
        "citation_only": 1,
        "past_file": 1,
    }
    # side by side in the table: each recall row, then the same against the corrected set
    lines = printed.splitlines()
    overall = next(i for i, line in enumerate(lines) if line.startswith("recall overall (4)"))
    assert lines[overall + 1].split()[:4] == ["against", "corrected", "answers", "(3)"]
    assert lines[overall + 1].split()[4] == "66.7%"  # the full buffer's column
    assert "1 of 4 questions scored against a corrected answer, 1 left out" in printed
    assert "1 citation-only (LoCoMo's answer kept), 1 past the LoCoMo file's" in printed
    # the relevance figures stay (LoCoMo's evidence ids, one set for both columns)
    relevance = report["relevance"]["question_time"]["ours_recall"]
    assert set(relevance["block_tokens"]) == {"mean", "p50", "p90"}
    assert relevance["evidence_recall"] == 1.0
    assert "snippets holding an evidence turn" in printed and "evidence recall" in printed


def test_audit_rules_for_a_corrected_answer():
    assert corrected_answer("2022 (but the title (D1:3) is made up)") == "2022"
    assert corrected_answer("Three (as stated in D25:4).") == "Three"
    assert corrected_answer("On hikes they explore forests (D4:8). Later, more.") == (
        "On hikes they explore forests. Later, more"
    )
    for none in ("Cannot be determined from the transcript", "Unknown - never named", "unclear"):
        assert corrected_answer(none) is None
    assert corrected_answer("(D1:2)") == "(D1:2)"  # nothing but a remark: kept as written


def test_audit_index_names_the_conversation_of_the_file_read(tmp_path):
    path = tmp_path / "errors.json"
    entries = [
        _entry(1, 5, "What was wrong?", "salty", "HALLUCINATION", "peppery"),
        _entry(0, 5, "What was wrong?", "salty", "INCOMPLETE", "salty and cold"),
    ]
    path.write_text(json.dumps(entries), encoding="utf-8")
    got = load_answers(path, ["conv-26", "conv-30"])
    assert got.audit and got.answers == {
        ("30", "what was wrong?"): "peppery",
        ("26", "what was wrong?"): "salty and cold",
    }
    # without the LoCoMo file's ids every entry is past it, none applied
    assert load_answers(path).past_file == 2


def test_scores_keep_both_answer_sets():
    scores = Scores()
    text = "the soup was salty and the jacket blue"
    assert scores.score(CorrectedQA("q1", "salty", 4, corrected="peppery"), text)
    assert scores.score(CorrectedQA("q2", "blue", 4, corrected=None), text)  # left out
    assert scores.score(QAItem("q3", "jacket", 1), text)  # no correction: the same share
    # no content word in LoCoMo's answer: in the corrected column only
    assert not scores.score(CorrectedQA("q4", "the", 4, corrected="x"), text)
    scores.add(1, 0.5)  # the plain path: the same share in both
    assert scores.shares == {4: [1.0, 1.0], 1: [1.0, 0.5]}
    assert scores.corrected == {4: [0.0, 0.0], 1: [1.0, 0.5]}
    other = Scores()
    other.merge(scores)
    assert other.recall(corrected=True) == pytest.approx(1.5 / 4)
    assert other.recall(4, corrected=True) == 0.0 and other.recall(4) == 1.0


def test_locomo_format_answers_give_both_sets(tmp_path):
    path = tmp_path / "corrected.json"
    qa = [
        {"question": DETAILS[0][1], "answer": "far too much pepper"},
        {"question": DETAILS[1][1], "answer": DETAILS[1][2]},
        {"question": "A question nobody asked?", "answer": "x"},
    ]
    path.write_text(json.dumps([{"sample_id": "t1", "qa": qa}]), encoding="utf-8")
    answers = load_answers(path, ["t1"])
    conv = answers.apply(convert(_with_evidence()))
    assert [(q.answer, getattr(q, "corrected", None)) for q in conv.qa] == [
        (a, "far too much pepper" if k == 0 else a) for k, (_, _, a) in enumerate(DETAILS)
    ]
    assert answers.report() == {
        "path": str(path),
        "format": "locomo",
        "matched": 2,
        "corrected": 1,
        "no_answer": 0,
        "unmatched": 1,
        "not_measured": 0,
        "questions": len(DETAILS),
    }
    assert "1 of 4 questions scored against a corrected answer" in answers.line()


@pytest.mark.parametrize(
    "entries, where",
    [
        (
            [{**AUDIT[0], "question_id": "conv-26:1"}],
            "errors.json: [0].question_id: expected locomo_<i>_qa<n>, got 'conv-26:1'",
        ),
        ([{**AUDIT[0], "error_type": "TYPO"}], "errors.json: [0].error_type: expected one of"),
        ([AUDIT[0], {**AUDIT[1], "correct_answer": 3}], "[1].correct_answer: expected a string"),
        ([AUDIT[0], "x"], "errors.json: [1]: expected an object with question_id"),
        ([{**AUDIT[0], "question": ""}], "errors.json: [0].question: expected a string"),
        (
            [AUDIT[0], {k: v for k, v in AUDIT[1].items() if k != "correct_answer"}],
            "errors.json: [1].correct_answer: expected a string",
        ),
    ],
)
def test_a_malformed_audit_file_exits_2_naming_the_entry(tmp_path, capsys, entries, where):
    answers = tmp_path / "errors.json"
    answers.write_text(json.dumps(entries), encoding="utf-8")
    code, _, printed = _command(tmp_path, capsys, "--answers", str(answers))
    assert code == 2
    assert where in printed
