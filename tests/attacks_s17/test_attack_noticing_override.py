"""S17 attack round (helper A): an application's store class that overrides
``search_noticing`` itself (to audit or filter what recall reads), through a real pipeline.

The CHANGELOG says a recall turn that searches itself uses ``search_noticing``. A turn
calls it only when the method carries the backends' private mark (``one_trip``): an
override (which calls ``super()``) is never called, so an application's audit or filter
there was silently bypassed (S17-A-8, fixed: a class's own ``search_noticing`` is called as
it is). The control: the backend's own method is called.

A real pipeline: the real ``LLMContextAggregatorPair``, ``ContextSummarizer`` on a SQLite
file, Pipecat's OpenAI service against the local server.
"""

from __future__ import annotations

import time

from pipecat.pipeline.pipeline import Pipeline
from pipecat.processors.aggregators.llm_context import LLMContext
from pipecat.processors.aggregators.llm_response_universal import LLMContextAggregatorPair

from pipecat_summarizer import ContextSummarizer, OpenAISummarizer
from pipecat_summarizer._recall.render import is_recall_message
from pipecat_summarizer.params import MemoryParams, RecallParams, WriterParams
from pipecat_summarizer.store import SQLiteMemoryStore
from pipecat_summarizer.store.records import ArchivedMessage, CallRecord
from tests.support.openai_server import Reply
from tests.support.pipeline_utils import cfg, main_llm, user_turn
from tests.support.settle import Gap, run_settling

FAST = WriterParams(flush_interval_s=0.05, max_backoff_s=0.2, write_timeout_s=5)
LINES = ["My locker code at the gym is 4471.", "Noted, locker code 4471."]


class Audited(SQLiteMemoryStore):
    """An application's store: every recall trip is audited (counted here)."""

    audited = 0

    async def search_noticing(self, query, **kwargs):
        type(self).audited += 1
        return await super().search_noticing(query, **kwargs)


class Counted(SQLiteMemoryStore):
    """The control: the backend's own method, counted through a wrapper of the class's."""

    calls = 0


_own = SQLiteMemoryStore.search_noticing


async def _counted(self, query, **kwargs):
    Counted.calls += 1
    return await _own(self, query, **kwargs)


async def _call(server, store) -> list[list[str]]:
    now = time.time()
    await store.write(
        [
            CallRecord("c1", user_id="al", started_at=now - 900, ended_at=now - 600),
            *[
                ArchivedMessage(
                    "c1",
                    i,
                    "user" if i % 2 == 0 else "assistant",
                    t,
                    "{}",
                    turn=i // 2,
                    at=now - 900 + i,
                    user_id="al",
                )
                for i, t in enumerate(LINES)
            ],
        ]
    )
    context = LLMContext(messages=[{"role": "system", "content": "You are a hotel desk."}])
    summarizer = OpenAISummarizer(base_url=server.base_url, model="cheap")
    processor = ContextSummarizer(
        context=context,
        config=cfg(messages=40, keep=4),
        summarizer=summarizer,
        store=store,
        call_id="c2",
        user_id="al",
        memory=MemoryParams(writer=FAST),
        recall=RecallParams(latency_budget_s=2.0),
    )
    pair = LLMContextAggregatorPair(context)
    pipeline = Pipeline([pair.user(), processor, main_llm(server.base_url), pair.assistant()])
    frames = [user_turn("What was my locker code again?"), Gap(sleep=1.5)]
    try:
        await run_settling(pipeline, frames_to_send=frames)
    finally:
        await summarizer.aclose()
        if processor.recall_step is not None:
            await processor.recall_step.close()
        await store.close()
    return [
        [str(m["content"]) for m in body["messages"] if is_recall_message(m)]
        for body in server.chat_requests
    ]


async def test_the_backends_own_search_noticing_serves_the_turn(
    openai_server, tmp_path, monkeypatch
):
    """The control: a turn's search is the backend's ``search_noticing``."""
    openai_server.handler = lambda body: Reply("Sure.")
    _counted.one_trip = True  # type: ignore[attr-defined]  # the backend's marks, kept
    _counted.serial = True  # type: ignore[attr-defined]
    monkeypatch.setattr(Counted, "search_noticing", _counted, raising=False)
    Counted.calls = 0
    blocks = await _call(openai_server, Counted(tmp_path / "m.db"))
    assert Counted.calls == 1 and any("4471" in b for b in blocks[-1])


async def test_attack_an_applications_override_of_search_noticing_is_called(
    openai_server, tmp_path
):
    openai_server.handler = lambda body: Reply("Sure.")
    Audited.audited = 0
    blocks = await _call(openai_server, Audited(tmp_path / "m.db"))
    assert any("4471" in b for b in blocks[-1])
    assert Audited.audited == 1
