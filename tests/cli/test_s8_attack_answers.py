"""Attacks on ``questions --answers`` in the audit's errors-list format (replay/gold_answers.py):
malformed entries, odd ids, duplicates, encodings. Bad input must exit 2 with a message that
names the file and the entry, never a traceback. The command exits before any pipeline runs
when its answers file is refused, so these are fast."""

from __future__ import annotations

import json

import pytest

from pipecat_summarizer_cli.replay.gold_answers import load_answers
from tests.cli.test_question_relevance import _command
from tests.cli.test_questions import DETAILS


def _entry(qid: str = "locomo_0_qa1", **fields) -> dict:
    entry = {
        "question_id": qid,
        "question": DETAILS[0][1],
        "golden_answer": DETAILS[0][2],
        "error_type": "HALLUCINATION",
        "correct_answer": "peppery",
    }
    entry.update(fields)
    return entry


def _write(tmp_path, data, name: str = "errors.json"):
    path = tmp_path / name
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


@pytest.mark.parametrize(
    "entries, where",
    [
        ([_entry(), _entry("locomo_-1_qa1")], "errors.json: [1].question_id"),
        ([_entry("locomo_0_qa")], "errors.json: [0].question_id"),
        ([_entry(qid=7)], "errors.json: [0].question_id"),
        ([_entry(error_type=["HALLUCINATION"])], "errors.json: [0].error_type"),
        ([_entry(golden_answer=None)], "errors.json: [0].golden_answer"),
        ([_entry(question={"text": "x"})], "errors.json: [0].question"),
        ([_entry(correct_answer="   ")], "errors.json: [0].correct_answer"),
        ([_entry(), {"question": "no id"}], "errors.json: [1].question_id"),
        # a LoCoMo-format sample that happens to carry a question_id: read as the audit's,
        # and refused by name (never misread)
        ([{"sample_id": "t1", "question_id": "x", "qa": []}], "errors.json: [0].question_id"),
    ],
)
def test_malformed_audit_entries_exit_2_naming_the_entry(tmp_path, capsys, entries, where):
    answers = _write(tmp_path, entries)
    code, _, printed = _command(tmp_path, capsys, "--answers", str(answers))
    assert code == 2 and where in printed and "Traceback" not in printed


def test_odd_but_valid_ids_and_unicode_questions(tmp_path):
    unicode_q = "¿Qué comió Zoë en Kraków? 🍲"
    path = _write(
        tmp_path,
        [
            _entry("locomo_01_qa999999"),  # a leading zero: the conversation at index 1
            _entry("locomo_0_qa2", question=unicode_q, correct_answer="pierogi (D1:3)"),
            _entry("locomo_2_qa1"),  # past the file's two conversations
        ],
    )
    got = load_answers(path, ["conv-26", "conv-30"])
    assert got.answers == {
        ("30", " ".join(DETAILS[0][1].split()).casefold()): "peppery",
        ("26", unicode_q.casefold()): "pierogi",
    }
    assert got.past_file == 1


def test_a_locomo_file_whose_qa_items_carry_question_ids_stays_locomo(tmp_path):
    qa = [{"question_id": "locomo_0_qa1", "question": "What?", "answer": 7}]
    got = load_answers(_write(tmp_path, [{"sample_id": "conv-26", "qa": qa}]), ["conv-26"])
    assert not got.audit and got.answers == {("26", "what?"): "7"}


def test_deeply_nested_json_exits_2_not_a_traceback(tmp_path, capsys):
    answers = tmp_path / "errors.json"
    answers.write_text("[" * 100_000 + "]" * 100_000, encoding="utf-8")
    try:
        code, _, printed = _command(tmp_path, capsys, "--answers", str(answers))
    except RecursionError:
        pytest.fail("RecursionError escaped the command (a traceback, not exit 2)")
    assert code == 2 and "errors.json" in printed


@pytest.mark.parametrize("kind", ["huge_index", "not_utf8"])
def test_a_huge_index_or_bad_encoding_names_the_file(tmp_path, capsys, kind):
    answers = tmp_path / "errors.json"
    if kind == "huge_index":
        answers.write_text(json.dumps([_entry("locomo_" + "9" * 5000 + "_qa1")]), "utf-8")
    else:
        answers.write_bytes(b"\xff\xfe[]")
    code, _, printed = _command(tmp_path, capsys, "--answers", str(answers))
    assert code == 2 and "errors.json" in printed


def test_only_ascii_digits_make_a_conversation_index(tmp_path):
    # "locomo_١_qa1" (an Arabic-Indic one) silently names conversation 1
    with pytest.raises(ValueError, match=r"\[0\]\.question_id"):
        load_answers(_write(tmp_path, [_entry("locomo_\u0661_qa1")]), ["conv-26", "conv-30"])


@pytest.mark.parametrize(
    "second",
    [
        _entry(correct_answer="far too sweet"),  # another correction of the same question
        _entry(error_type="WRONG_CITATION"),  # the same question also said to be right
    ],
)
def test_a_question_corrected_twice_differently_is_refused_by_name(tmp_path, second):
    path = _write(tmp_path, [_entry(), _entry("locomo_0_qa7", question="Other?"), second])
    with pytest.raises(ValueError, match=r"\[2\]"):
        load_answers(path, ["t1"])


def test_a_question_matches_in_either_unicode_normal_form(tmp_path):
    nfc, nfd = "What did Zoë cook?", "What did Zoe\u0308 cook?"
    got = load_answers(_write(tmp_path, [_entry(question=nfd)]), ["t1"])
    from pipecat_summarizer_cli.replay.gold_answers import question_key

    assert question_key("t1", nfc) in got.answers


def test_the_corrected_column_matches_a_manual_recount():
    """Both columns recounted by hand on one tiny run's requests."""
    from pipecat_summarizer_cli.replay.gold_answers import CorrectedQA
    from pipecat_summarizer_cli.replay.question_scores import Scores, answer_share

    text = "Zoë cooked pierogi in Kraków; the soup was far too peppery"
    items = [
        CorrectedQA("q1", "salty soup", 4, corrected="peppery"),
        CorrectedQA("q2", "pierogi", 4, corrected=None),  # no answer: left out
        CorrectedQA("q3", "Kraków", 1, corrected="Kraków"),
        CorrectedQA("q4", "the", 1, corrected="the"),  # no content word in either
    ]
    scores = Scores()
    assert [scores.score(i, text) for i in items] == [True, True, True, False]
    assert scores.shares == {4: [answer_share(text, "salty soup"), 1.0], 1: [1.0]}
    assert scores.corrected == {4: [1.0], 1: [1.0]}


def test_a_question_whose_locomo_answer_is_a_stop_word_keeps_its_correction():
    """LoCoMo says "No", the audit says "Yes, to Paris": the corrected answer has content
    words, so the corrected column (and a hand recount) scores it."""
    from pipecat_summarizer_cli.replay.gold_answers import CorrectedQA
    from pipecat_summarizer_cli.replay.question_scores import Scores

    scores = Scores()
    scores.score(CorrectedQA("Did she travel?", "No", 3, corrected="Yes, to Paris"), "Paris, yes")
    assert scores.corrected == {3: [1.0]}
