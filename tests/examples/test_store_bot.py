"""The example bot remembers a caller who calls back (MEMORY_STORE and CALLER_ID)."""

from __future__ import annotations

from pipecat.tests.utils import run_test

from pipecat_summarizer._session.recorder import EARLIER_CALLS_HEADER
from pipecat_summarizer.store import open_store
from tests.examples.test_voice_bot import bot_env, vb
from tests.support.openai_server import Reply, is_summary_request
from tests.support.pipeline_utils import texts_of, turns

SUMMARY = "FACTS:\n- caller name: Alice\n- trip: Lisbon in May with two children"


def handler(body: dict) -> Reply:
    return Reply(SUMMARY) if is_summary_request(body) else Reply("Sure.")


async def _call(server, env, texts, gap=0.15):
    settings = vb.Settings.from_env(env)
    bot = vb.build_pipeline(settings, llm=vb.create_llm(settings))
    try:
        await run_test(bot.pipeline, frames_to_send=turns(texts, gap=gap))
    finally:
        await bot.summary_backend.aclose()
        if bot.store is not None:
            await bot.store.close()
    return bot


async def test_the_example_bot_remembers_a_caller_who_calls_back(openai_server, tmp_path):
    openai_server.handler = handler
    db = str(tmp_path / "memory.db")
    env = bot_env(
        openai_server,
        MEMORY_STORE=db,
        CALLER_ID="alice",
        SUMMARY_MAX_MESSAGES="6",
        SUMMARY_KEEP_MESSAGES="2",
    )
    assert "memory in" in vb.Settings.from_env(env).describe()
    first = [
        "I'm Alice, planning Lisbon in May with my two children.",
        *(f"question {i} about the trip" for i in range(6)),
    ]
    bot = await _call(openai_server, env, first)
    assert bot.summarizer.summary_text  # the first call compacted

    openai_server.requests.clear()
    # no frame waits for the store: the memory joins at the first turn after it has loaded
    await _call(openai_server, env, ["Hi, it's me again.", "Where was I going?"], gap=0.6)
    request = openai_server.chat_requests[-1]["messages"]
    assert EARLIER_CALLS_HEADER in texts_of(request) and "Lisbon" in texts_of(request)

    store = open_store(db)
    try:
        calls = await store.calls("alice")
        assert len(calls) == 2 and calls[0].resumed and calls[1].compactions >= 1
    finally:
        await store.close()

    # without a caller id, a call starts fresh (and is still recorded)
    openai_server.requests.clear()
    await _call(openai_server, {**env, "CALLER_ID": ""}, ["Hello?"])
    assert "Lisbon" not in texts_of(openai_server.chat_requests[0]["messages"])
