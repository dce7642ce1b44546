"""``questions --json``'s per-question rows (replay/question_rows.py): through the command, real
pipelines, the offline summarizer and an in-memory SQLite store, on the tiny LoCoMo-like
conversation with evidence ids of test_question_relevance. The rows are checked against what
the run did: the report's own scores, the block each strategy could have, the evidence lines'
texts, and the recall step's late searches."""

from __future__ import annotations

import json

from tests.cli.test_question_relevance import _command
from tests.cli.test_questions import DETAILS

STRATEGIES = ["full_buffer", "pipecat_builtin", "ours", "ours_recall"]
OLD_KEYS = {"conversations", "answers", "question_time", "question_time_corrected", "relevance"}
PEPPER = "far too much pepper"


def _answers(tmp_path) -> str:
    path = tmp_path / "corrected.json"
    qa = [{"question": DETAILS[0][1], "answer": PEPPER}]
    path.write_text(json.dumps([{"sample_id": "t1", "qa": qa}]), encoding="utf-8")
    return str(path)


def _by_strategy(report: dict) -> dict[str, list[dict]]:
    rows = report["questions"]
    assert {r["measurement"] for r in rows} == {"question_time"}
    return {s: [r for r in rows if r["strategy"] == s] for s in STRATEGIES}


def test_rows_say_what_each_request_held(tmp_path, capsys):
    code, report, printed = _command(tmp_path, capsys, "--answers", _answers(tmp_path))
    assert code == 0, printed
    assert set(report) == OLD_KEYS | {"questions"}  # the existing keys are kept
    rows = _by_strategy(report)
    for s in STRATEGIES:
        got = rows[s]
        # one row per question, in the order asked, as LoCoMo and the corrections give them
        assert [(r["conversation"], r["question"], r["category"]) for r in got] == [
            ("t1", q, 4) for _, q, _ in DETAILS
        ]
        assert [r["answer"] for r in got] == [a for _, _, a in DETAILS]
        assert [r["corrected_answer"] for r in got] == [PEPPER] + [a for _, _, a in DETAILS[1:]]
        # the shares are the ones the report scored, question by question
        assert [r["answer_share"] for r in got] == report["question_time"][s]["4"]
        assert [r["corrected_share"] for r in got] == report["question_time_corrected"][s]["4"]
        assert all(r["answer_in_request"] == (r["answer_share"] == 1.0) for r in got)
        figures = report["relevance"]["question_time"][s]
        assert sum(r["input_tokens"] for r in got) == figures["input_tokens"]
        # each question's evidence: the detail's line (D1:1, D1:3, ...), held or not
        assert [[e["id"] for e in r["evidence"]] for r in got] == [
            [f"D1:{2 * k + 1}"] for k in range(len(DETAILS))
        ]
        shares = [float(e["in_view"] or e["in_block"]) for r in got for e in r["evidence"]]
        assert sum(shares) / len(shares) == figures["evidence_recall"]
    # the full buffer: every evidence line in view, no block, no search
    for r in rows["full_buffer"]:
        assert r["evidence"][0]["in_view"] is True and r["evidence"][0]["in_block"] is False
        assert (r["recalled"], r["block_tokens"], r["snippets"]) == (False, 0, [])
        assert (r["search_late"], r["search_early"]) == (None, None)
    # the pepper is in no request; LoCoMo's answer is in every full-buffer request
    assert [r["corrected_in_request"] for r in rows["full_buffer"]] == [False, True, True, True]
    # recall: the block's rows match the report's figures, and each block holds the detail
    recalled = rows["ours_recall"]
    figures = report["relevance"]["question_time"]["ours_recall"]
    assert sum(r["recalled"] for r in recalled) == figures["recalled_blocks"] > 0
    tokens = [r["block_tokens"] for r in recalled]
    assert sum(tokens) / len(tokens) == figures["block_tokens"]["mean"]
    assert sum(len(r["snippets"]) for r in recalled) == figures["snippets"]
    assert sum(r["search_late"] for r in recalled) == figures["searches_late"] == 0
    assert sum(r["search_early"] for r in recalled) == figures["searches_started_on_the_words"]
    for r, (detail, _, _) in zip(recalled, DETAILS, strict=True):
        held = any(detail in line for line in r["snippets"])
        assert r["evidence"][0]["in_block"] == held
        assert r["recalled"] == bool(r["snippets"]) == (r["block_tokens"] > 0)
        assert all(line.startswith("- [") for line in r["snippets"])
    assert any(r["evidence"][0]["in_block"] for r in recalled)
    # without recall there is no block and no search to be late
    assert all(r["snippets"] == [] and r["search_late"] is None for r in rows["ours"])


def test_rows_say_which_searches_were_late(tmp_path, capsys):
    # no budget and no early search: every turn's search misses it (an in-memory SQLite
    # search runs on the store's thread, never done at once)
    code, report, printed = _command(
        tmp_path, capsys, "--recall-budget-ms", "0", "--no-spoken", "--across-calls"
    )
    assert code == 0, printed
    rows = report["questions"]
    assert "corrected_answer" not in rows[0]  # no --answers: LoCoMo's answer only
    for measurement in ("question_time", "across_calls"):
        got = [r for r in rows if r["measurement"] == measurement]
        recalled = [r for r in got if r["strategy"] == "ours_recall"]
        assert len(recalled) == len(DETAILS)
        assert all(r["search_late"] is True and r["search_early"] is False for r in recalled)
        # the run's count of late searches is the rows' (the greeting, across calls, has no
        # topic word to search for)
        assert report["relevance"][measurement]["ours_recall"]["searches_late"] == len(recalled)
        assert [r["answer_share"] for r in recalled] == report[measurement]["ours_recall"]["4"]
