"""``questions --json``'s rows say how each question's recall ended (S14-R-1): the outcome the
recall step tells its observers (``recall_outcome``), the hits it chose from
(``recall_hits``), the snippets it placed (``recall_snippets``) and whether the turn went
over its budget (``recall_over_budget``). A row with hits and no snippet says "found, then
placed nothing", which a row without them could not tell from "nothing found".

Real pipelines, the offline summarizer, SQLite in memory: through the command on the tiny
LoCoMo-like conversation, and through ``question_time`` on the replay's simulated clock with
a store whose forget watch never answers (the turn finds its hits on time, and its block is
then dropped at the frame's deadline, as ``_watched`` does with a watch answering late).
"""

from __future__ import annotations

import asyncio

from pipecat_summarizer.params import RecallParams
from pipecat_summarizer.store import SQLiteMemoryStore
from pipecat_summarizer_cli.replay import clock
from pipecat_summarizer_cli.replay.locomo import convert
from pipecat_summarizer_cli.replay.questions import Plan, question_time
from pipecat_summarizer_cli.replay.store_sink import HeldClockStore
from pipecat_summarizer_cli.replay.strategies import Thresholds
from tests.cli.test_question_relevance import _command
from tests.cli.test_questions import DETAILS
from tests.cli.test_questions_clock import _sample

FIELDS = ("recall_outcome", "recall_hits", "recall_snippets", "recall_over_budget")


def _fields(row: dict) -> tuple:
    return tuple(row[k] for k in FIELDS)


def test_rows_say_each_questions_recall_outcome(tmp_path, capsys):
    code, report, printed = _command(tmp_path, capsys, "--across-calls")
    assert code == 0, printed
    rows = report["questions"]
    for measurement in ("question_time", "across_calls"):
        got = [r for r in rows if r["measurement"] == measurement]
        # the strategies that do not recall have no outcome
        assert all(_fields(r) == (None,) * 4 for r in got if r["strategy"] != "ours_recall"), (
            measurement
        )
        recalled = [r for r in got if r["strategy"] == "ours_recall"]
        assert len(recalled) == len(DETAILS)
        for r in recalled:
            # the outcome is the request's: a block placed is "recalled" with its snippets
            expected = ("recalled",) if r["recalled"] else ("watch_late", "nothing_new")
            assert r["recall_outcome"] in expected, r
            # the snippets chosen, of which the rendering places some (its budget, the deadline)
            assert r["recall_snippets"] >= len(r["snippets"]), r
            assert (r["recall_snippets"] > 0) == r["recalled"], r
            assert r["recall_hits"] >= r["recall_snippets"], r
            assert r["recall_over_budget"] is False, r  # 5 s: every turn on time
        assert any(r["recall_outcome"] == "recalled" for r in recalled), measurement


def test_rows_say_the_search_missed_the_budget(tmp_path, capsys):
    # no budget and no early search: every turn's search misses it (an in-memory SQLite
    # search runs on the store's thread, never done at once)
    code, report, printed = _command(tmp_path, capsys, "--recall-budget-ms", "0", "--no-spoken")
    assert code == 0, printed
    recalled = [r for r in report["questions"] if r["strategy"] == "ours_recall"]
    assert len(recalled) == len(DETAILS)
    # (hits: a previous question's search answering late may hand this turn its hits)
    assert all(
        (r["recall_outcome"], r["recall_snippets"], r["recall_over_budget"])
        == ("missed_budget", 0, True)
        for r in recalled
    ), recalled


def _silent_watch_store() -> SQLiteMemoryStore:
    """An in-memory SQLite store (holding the simulated clock, as the replay's ``--store``
    does) whose forget tombstone read never answers; every other read answers at once."""

    class SilentWatch(HeldClockStore):  # type: ignore[misc, valid-type]
        async def noticed_forget(self, user_id: str, since: float) -> bool:
            # not held: the simulated clock runs on to the frame's deadline meanwhile
            await asyncio.get_running_loop().create_future()
            raise AssertionError("unreachable")

    return SilentWatch(SQLiteMemoryStore())  # type: ignore[call-arg, return-value]


def _rows(store_factory) -> list[dict]:
    plan = Plan(
        thresholds=Thresholds(max_context_tokens=None, max_unsummarized_messages=6, keep=2),
        recall=RecallParams(latency_budget_s=5.0),
        store_factory=store_factory,
    )
    return clock.run(question_time(convert(_sample()), plan))["ours_recall"].rows


def test_a_row_tells_hits_found_then_dropped_from_nothing_found():
    """The same question, the same archive: with the forget watch answering, the turn places
    its block; with the watch never answering by the frame's deadline, the turn found the
    same hits on time and placed nothing, and the row says so (``watch_late`` with hits,
    no snippet, the search not late)."""
    placed = _rows(lambda: HeldClockStore(SQLiteMemoryStore()))  # type: ignore[call-arg]
    dropped = _rows(_silent_watch_store)
    assert len(placed) == len(dropped) == 1
    ok, gone = placed[0], dropped[0]
    assert ok["recalled"] and ok["recall_outcome"] == "recalled"
    assert ok["recall_snippets"] >= len(ok["snippets"]) > 0
    assert ok["recall_over_budget"] is False
    # found on time (the same hits), then dropped: nothing placed
    assert gone["search_late"] is False
    assert gone["recall_hits"] == ok["recall_hits"] > 0
    assert (gone["recalled"], gone["snippets"], gone["recall_snippets"]) == (False, [], 0)
    assert gone["recall_outcome"] == "watch_late"
    # dropped at the frame's deadline, which falls within the budget (the budget keeps a
    # margin for what follows): not over budget either, as in the S14-R-1 rows
    assert gone["recall_over_budget"] is False
