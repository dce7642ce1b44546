"""Summarizer clients are closed when no call needs them, against the
real local aiohttp server: the per-call form leaves no socket behind, the shared form stays
open while any call uses it, and a client the application passed in stays its own."""

from __future__ import annotations

import asyncio
import gc
import warnings

import openai
import pytest

from pipecat_summarizer import OpenAISummarizer, SummarizerError
from pipecat_summarizer._compaction.prompt import build_request
from pipecat_summarizer.summarizers.base import attach_summarizer, detach_summarizer
from tests.support.openai_server import FakeOpenAIServer, Reply

REQUEST = build_request(
    [{"role": "user", "content": "I'm allergic to peanuts."}],
    previous_summary=None,
    max_tokens=123,
)
SUMMARY = "FACTS:\n- peanut allergy"


@pytest.fixture
async def summary_server():
    """A server of its own for summaries: the main LLM's pool (Pipecat's OpenAILLMService
    never closes it) would blur the count of open connections."""
    server = FakeOpenAIServer(lambda body: Reply(SUMMARY))
    await server.start()
    yield server
    await server.stop()


async def settled_connections(server: FakeOpenAIServer, expected: int) -> int:
    """The server's open connections once a close has had a chance to reach it (a closed
    socket is seen by the server a few loop iterations later)."""
    for _ in range(100):
        if server.open_connections == expected:
            break
        await asyncio.sleep(0.01)
    return server.open_connections


async def test_per_call_summarizers_leave_no_connection_open(summary_server):
    for _ in range(3):
        s = OpenAISummarizer(base_url=summary_server.base_url, model="cheap")
        attach_summarizer(s)
        assert (await s.summarize(REQUEST)).text == SUMMARY
        await detach_summarizer(s)
    assert len(summary_server.requests) == 3
    assert await settled_connections(summary_server, 0) == 0


async def test_a_shared_summarizer_stays_usable_while_another_call_still_runs(summary_server):
    def slow(body):
        return Reply(SUMMARY, delay=0.3)

    shared = OpenAISummarizer(base_url=summary_server.base_url, model="cheap")
    attach_summarizer(shared)  # call 1
    attach_summarizer(shared)  # call 2
    assert (await shared.summarize(REQUEST)).text == SUMMARY
    summary_server.handler = slow
    in_flight = asyncio.create_task(shared.summarize(REQUEST))  # call 2's summary
    while not summary_server.in_flight:
        await asyncio.sleep(0.01)
    await detach_summarizer(shared)  # call 1 ends while call 2's request is on the wire
    assert shared.users == 1
    assert (await in_flight).text == SUMMARY
    assert (await shared.summarize(REQUEST)).text == SUMMARY  # call 2 goes on
    assert await settled_connections(summary_server, 1) == 1
    await detach_summarizer(shared)  # call 2 ends: nobody uses it
    assert await settled_connections(summary_server, 0) == 0
    attach_summarizer(shared)  # a later call: the pool opens again
    assert (await shared.summarize(REQUEST)).text == SUMMARY
    await detach_summarizer(shared)
    assert await settled_connections(summary_server, 0) == 0


async def test_the_last_user_leaving_mid_request_closes_the_pool_after_it(summary_server):
    summary_server.handler = lambda body: Reply(SUMMARY, delay=0.3)
    s = OpenAISummarizer(base_url=summary_server.base_url, model="cheap")
    attach_summarizer(s)
    in_flight = asyncio.create_task(s.summarize(REQUEST))  # e.g. the app's own request
    while not summary_server.in_flight:
        await asyncio.sleep(0.01)
    await detach_summarizer(s)
    assert (await in_flight).text == SUMMARY  # not cut off by the close
    assert await settled_connections(summary_server, 0) == 0


async def test_a_client_passed_in_is_never_closed(summary_server):
    client = openai.AsyncOpenAI(base_url=summary_server.base_url, api_key="k")
    s = OpenAISummarizer(client=client, model="cheap")
    attach_summarizer(s)
    assert (await s.summarize(REQUEST)).text == SUMMARY
    await detach_summarizer(s)
    await s.aclose()
    assert not client.is_closed()
    assert (await s.summarize(REQUEST)).text == SUMMARY  # still the application's, still usable
    await client.close()


async def test_aclose_closes_for_good(summary_server):
    s = OpenAISummarizer(base_url=summary_server.base_url, model="cheap")
    attach_summarizer(s)
    assert (await s.summarize(REQUEST)).text == SUMMARY
    await s.aclose()
    with pytest.raises(SummarizerError, match="closed"):
        await s.summarize(REQUEST)
    await detach_summarizer(s)  # a processor ending afterwards is harmless
    assert await settled_connections(summary_server, 0) == 0


async def test_no_resource_warning_from_per_call_summarizers(summary_server):
    gc.collect()  # what earlier tests left behind warns now, not inside the block
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(3):
            s = OpenAISummarizer(base_url=summary_server.base_url, model="cheap")
            attach_summarizer(s)
            await s.summarize(REQUEST)
            await detach_summarizer(s)
            del s
        gc.collect()
        await asyncio.sleep(0.05)
    assert not [w for w in caught if issubclass(w.category, ResourceWarning)]


async def test_summarizers_without_the_hooks_and_failing_hooks_never_break_the_end(logs):
    class Plain:
        async def summarize(self, request):
            return SUMMARY

    class Broken(Plain):
        def attach(self):
            pass

        async def detach(self):
            raise RuntimeError("the caller said: my card is 4111")

    attach_summarizer(Plain())
    await detach_summarizer(Plain())
    attach_summarizer(Broken())
    await detach_summarizer(Broken())
    warning = [r["message"] for r in logs if r["level"].name == "WARNING"]
    assert warning == ["Broken: detach failed (RuntimeError)"]
