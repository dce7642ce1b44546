"""The questions replay speaks a recalling strategy's questions (interim transcriptions, the
final one, then the end of the turn) through a pipeline with ``RecallPrefetch`` before the
user aggregator, so recall's search starts on the caller's words: real pipelines (the replay's
``CallDriver``, a real ``LLMContextAggregatorPair``, ``ContextSummarizer``), a real SQLite
store whose search is slower than the turn's budget."""

from __future__ import annotations

import argparse
import asyncio
import json

import pytest
from pipecat.processors.aggregators.llm_context import LLMContext

from pipecat_summarizer import RecallPrefetch, is_recall_message
from pipecat_summarizer.params import RecallParams
from pipecat_summarizer.store import SQLiteMemoryStore
from pipecat_summarizer_cli.replay import questions
from pipecat_summarizer_cli.replay.call_driver import Speech
from pipecat_summarizer_cli.replay.question_calls import Plan, _asking, _early, _ours
from pipecat_summarizer_cli.replay.question_store import QuestionStore
from pipecat_summarizer_cli.replay.recorder import Recorder
from pipecat_summarizer_cli.replay.report import TokenTable
from tests.support.recall_calls import archived_call

ASK = "Which hotel did I book with you last time?"
SEARCH_S = 0.15  # the archive's answer time: three times the turn's budget
BUDGET_S = 0.05
# the words come slower than the search answers, so each interim starts its own search (the
# replay's default is faster; LoCoMo's in-memory archive answers in a few ms)
SPEECH = Speech(word_s=0.3, lead_s=0.3)


class SlowSQLite(SQLiteMemoryStore):
    """A real store whose search answers after ``SEARCH_S`` (a loaded database)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.queries: list[str] = []

    async def search(self, query, **kwargs):
        self.queries.append(query)
        await asyncio.sleep(SEARCH_S)
        return await super().search(query, **kwargs)


class SlowReads(SlowSQLite):
    """Its replies' read answers after ``SEARCH_S`` too (a loaded database)."""

    async def messages_at(self, keys):
        await asyncio.sleep(SEARCH_S)
        return await super().messages_at(keys)


async def _ask(speech: Speech | None, recall: bool = True, store_type=SlowSQLite) -> tuple:
    store = store_type()
    lines = [
        "We are staying at the Hotel Marquis in Lisbon, room 418, arriving Friday.",
        "Noted, the Hotel Marquis in Lisbon, with the late check-in you asked for.",
    ]
    await store.write(archived_call(lines, user_id="alice"))
    plan = Plan(recall=RecallParams(latency_budget_s=BUDGET_S), speech=speech)
    context = LLMContext(messages=[{"role": "system", "content": "You are a travel desk."}])
    q = _ours(
        plan,
        context,
        Recorder(),
        TokenTable(),
        store=store,
        call_id="questions",
        user_id="alice",
        recall=plan.recall if recall else None,
        summarize=False,
    )
    asking = _asking(plan, context, q)
    try:
        await asking.start()
        request = [json.loads(m) for m in await asking.ask(ASK)]
        await asking.end()
    finally:
        await store.close()
    return request, asking, q, store


def _block(request: list[dict]) -> str:
    return "\n".join(str(m["content"]) for m in request if is_recall_message(m))


async def test_a_spoken_question_is_searched_on_its_words_and_recalled_on_time():
    request, asking, q, store = await _ask(SPEECH)
    # the companion is in the replay's pipeline, before the user aggregator
    assert [type(p) for p in asking.head] == [RecallPrefetch]
    # the interims reached it: the words but the last, then every word, searched early
    assert len(store.queries) >= 2 and store.queries[0] != store.queries[-1]
    # the turn's search was answered by the early one, within the 50 ms budget
    assert _early(asking) == 1
    assert q.recall_step.missed == 0 and q.recall_step.recalled == 1
    assert "Hotel Marquis" in _block(request)
    # the aggregator wrote the final transcription as the caller's turn
    assert request[-1] == {"role": "user", "content": ASK}


async def test_without_the_companion_the_same_question_misses_the_budget():
    # the old replay (the question appended as a message): the search starts at the turn's
    # end, answers after 150 ms, and the turn goes without recall
    request, asking, q, _ = await _ask(None)
    assert asking.head == [] and _early(asking) == 0
    assert q.recall_step.missed == 1 and _block(request) == ""
    assert request[-1] == {"role": "user", "content": ASK}


async def test_a_strategy_without_recall_is_asked_as_before():
    request, asking, q, store = await _ask(SPEECH, recall=False)
    assert asking.head == [] and asking.speech is None and q.recall_step is None
    assert store.queries == [] and request[-1] == {"role": "user", "content": ASK}


@pytest.mark.parametrize("value", ["-1", "nan", "inf", "1e9", "soon"])
def test_a_bad_speech_timing_exits_2_naming_the_option(value, capsys):
    parser = argparse.ArgumentParser()
    questions.register(parser.add_subparsers())
    with pytest.raises(SystemExit) as exit_:
        parser.parse_args(["questions", "--locomo", "x", "--spoken-lead-ms", value])
    assert exit_.value.code == 2 and "--spoken-lead-ms" in capsys.readouterr().err


def test_questions_are_spoken_by_default_and_not_with_no_spoken():
    parser = argparse.ArgumentParser()
    questions.register(parser.add_subparsers())
    assert parser.parse_args(["questions", "--locomo", "x"]).spoken is True
    assert parser.parse_args(["questions", "--locomo", "x", "--no-spoken"]).spoken is False


async def test_the_replies_are_read_with_the_early_search():
    # the hits' replies (the assistant's answer to the caller's line) take another 150 ms
    # to read: read while the caller speaks, with the early search, the turn reads none
    request, asking, q, _ = await _ask(SPEECH, store_type=SlowReads)
    assert _early(asking) == 1 and q.recall_step.missed == 0
    block = _block(request)
    assert "Hotel Marquis" in block and "late check-in" in block


async def test_the_question_store_keeps_the_stores_one_trip_search():
    # recall reads the first hits' replies in the search's own trip on SQLite; the replay's
    # read-only view of the store keeps that (wrapped, every turn made a second trip)
    inner = SQLiteMemoryStore()
    lines = ["We are staying at the Hotel Marquis in Lisbon.", "Noted, the Hotel Marquis."]
    try:
        await inner.write(archived_call(lines, user_id="alice"))
        view = QuestionStore(inner)
        assert getattr(view.search, "reads_replies", False)
        found = await view.search("Marquis", user_id="alice", any_word=True, _replies=2)
        assert sorted(h.position for h in found) == [0, 1]
        assert found.replies[("c1", 0)] == ("assistant", lines[1])
        await view.write(archived_call(["asked now"], call_id="q", user_id="alice"))
        assert view.dropped == 1 and len(await inner.messages("q")) == 0
    finally:
        await inner.close()
