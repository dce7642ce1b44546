"""Through real pipelines: the summarizer's pool is closed when the last call using it ends.
The summaries go to a server of their own, so the main LLM's pool
(Pipecat's OpenAILLMService never closes it) does not blur the count."""

from __future__ import annotations

import asyncio

import pytest
from pipecat.tests.utils import SleepFrame

from pipecat_summarizer import OpenAISummarizer
from pipecat_summarizer._compaction.prompt import build_request
from tests.support.openai_server import FakeOpenAIServer, Reply
from tests.support.pipeline_utils import Run, cfg, turns

SUMMARY = "FACTS:\n- summarized\nCONSTRAINTS:\n- none\nDECISIONS:\n- none\nOPEN QUESTIONS:\n- none"


@pytest.fixture
async def summary_server():
    server = FakeOpenAIServer(lambda body: Reply(SUMMARY))
    await server.start()
    yield server
    await server.stop()


async def settled_connections(server: FakeOpenAIServer, expected: int) -> int:
    for _ in range(100):
        if server.open_connections == expected:
            break
        await asyncio.sleep(0.01)
    return server.open_connections


def words(n: int, start: int = 0) -> list[str]:
    return [f"user message number {i}" for i in range(start, start + n)]


async def test_per_call_summarizers_built_inline_leave_no_connection_open(
    openai_server, summary_server
):
    for _ in range(3):
        inline = OpenAISummarizer(base_url=summary_server.base_url, model="cheap")
        r = Run(openai_server, cfg(messages=4, keep=1), summarizer=inline)
        await r.run(turns(words(4), gap=0.1))
        assert r.applied and not r.failed
    assert len(summary_server.requests) >= 3
    assert await settled_connections(summary_server, 0) == 0


async def test_a_shared_summarizer_serves_a_call_that_outlives_another(
    openai_server, summary_server
):
    shared = OpenAISummarizer(base_url=summary_server.base_url, model="cheap")
    short = Run(openai_server, cfg(messages=4, keep=1), summarizer=shared)
    long = Run(openai_server, cfg(messages=4, keep=1), summarizer=shared)
    short_done = asyncio.Event()
    after_short: list[bool] = []  # per summary the long call applied: had the short ended?

    @long.processor.event_handler("on_context_compacted")
    async def _applied(_, event):
        after_short.append(short_done.is_set())

    async def run_short():
        await short.run(turns(words(4), gap=0.1))
        short_done.set()

    long_call = [*turns(words(4), gap=0.1), SleepFrame(sleep=1.5), *turns(words(4, 4), gap=0.1)]
    await asyncio.gather(run_short(), long.run(long_call))
    assert short.applied and not short.failed
    assert not long.failed
    assert True in after_short, "the long call summarized after the short one ended"
    assert await settled_connections(summary_server, 0) == 0
    # the application can still use it directly: the pool opens again
    request = build_request(
        [{"role": "user", "content": "hi"}], previous_summary=None, max_tokens=50
    )
    assert await shared.summarize(request)
    await shared.aclose()
