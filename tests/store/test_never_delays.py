"""A slow or locked store never delays a frame: a returning caller's first turn goes to the
LLM without their earlier-calls memory while the store is held, and the memory joins the
context once it has loaded. A real SQLite file held by another connection
(``BEGIN EXCLUSIVE``), a real pipeline, the local OpenAI-protocol server."""

from __future__ import annotations

import sqlite3

from pipecat.processors.aggregators.llm_context import LLMContext

from pipecat_summarizer import ContextSummarizer, OpenAISummarizer
from pipecat_summarizer._session.recorder import EARLIER_CALLS_HEADER
from pipecat_summarizer.params import MemoryParams, WriterParams
from pipecat_summarizer.store import SQLiteMemoryStore
from tests.support.openai_server import Reply, is_summary_request
from tests.support.pipeline_utils import build, cfg, main_llm, turns
from tests.support.settle import run_settling

FAST = WriterParams(flush_interval_s=0.05, max_backoff_s=0.2, write_timeout_s=5)
SYSTEM = "You are a helpful hotel concierge."


async def _call(server, path, texts, *, call_id, options, messages=4):
    store = SQLiteMemoryStore(path)
    context = LLMContext(messages=[{"role": "system", "content": SYSTEM}])
    summarizer = OpenAISummarizer(base_url=server.base_url, model="cheap")
    processor = ContextSummarizer(
        context=context,
        config=cfg(messages=messages, keep=1),
        summarizer=summarizer,
        store=store,
        call_id=call_id,
        user_id="u1",
        memory=options,
    )
    try:
        await run_settling(
            build(context, processor, main_llm(server.base_url)),
            frames_to_send=turns(texts, gap=0.3),
        )
    finally:
        await summarizer.aclose()
        await store.close()


async def test_a_locked_store_never_holds_the_first_turn(openai_server, tmp_path):
    path = tmp_path / "m.db"
    lock: list[sqlite3.Connection] = []
    served: list[tuple[bool, bool]] = []  # per chat request: (store locked, memory in it)

    def handler(body):
        if is_summary_request(body):
            return Reply("FACTS:\n- the caller is in room 418")
        served.append((bool(lock), EARLIER_CALLS_HEADER in str(body["messages"])))
        if len(served) == 2 and lock:  # the store comes back after the first turn
            lock.pop().close()
        return Reply("Sure thing.")

    openai_server.handler = handler
    first = [f"Room 418 detail number {i}, please note it." for i in range(6)]
    await _call(openai_server, path, first, call_id="call-1", options=MemoryParams(writer=FAST))
    served.clear()

    # another process holds the file: readers wait too (WAL lets them read otherwise)
    held = sqlite3.connect(path, isolation_level=None)
    held.execute("PRAGMA locking_mode=EXCLUSIVE")
    held.execute("BEGIN EXCLUSIVE")
    held.execute("DELETE FROM calls WHERE 0")  # takes the lock now
    lock.append(held)
    try:
        await _call(
            openai_server,
            path,
            ["Hello again, it's me.", "Can you check my room?", "And breakfast times?"],
            call_id="call-2",
            # generous: without the fix the first frame waits this long for the store
            options=MemoryParams(writer=FAST, load_timeout_s=3.0),
            messages=20,  # no summary of this call: the earlier calls' takes its place
        )
    finally:
        held.close()
    assert served[0] == (True, False)  # went while the store was held, without the memory
    assert served[-1][1]  # the memory joined once it had loaded
