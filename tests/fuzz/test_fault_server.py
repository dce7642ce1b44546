"""The fault server injects what it says, through the real ``OpenAISummarizer`` client, and the
matrix's backoff bound is the arithmetic it claims to be."""

from __future__ import annotations

import openai
import pytest

from pipecat_summarizer import OpenAISummarizer
from pipecat_summarizer._compaction.prompt import build_request
from pipecat_summarizer.summarizers.base import SummarizerError
from tests.fuzz.fault_server import FaultServer, covered_markers
from tests.fuzz.harness import SCALE
from tests.fuzz.matrix import BACKOFF_V, MAX_BACKOFF_V, backoff_bound

MESSAGES = [
    {"role": "user", "content": "#u1 my booking is BK-1"},
    {"role": "assistant", "content": "#a1 noted"},
]

EXPECTED = {
    "http500": openai.InternalServerError,
    "http429": openai.RateLimitError,
    "refused": openai.APIConnectionError,
    "empty": SummarizerError,
    "whitespace": SummarizerError,
    "null": SummarizerError,
    "nochoices": SummarizerError,
    "truncated": SummarizerError,
    "garbage": (openai.APIError, ValueError),
}


@pytest.fixture
async def server():
    s = FaultServer(unit=0.01, timeout_units=5)
    await s.start()
    yield s
    await s.stop()


@pytest.mark.parametrize("fault", sorted(EXPECTED))
async def test_each_fault_fails_the_real_client(server, fault):
    client = OpenAISummarizer(base_url=server.base_url, model="cheap")
    request = build_request(MESSAGES, previous_summary=None, max_tokens=200)
    await server.set_fault(fault)
    with pytest.raises(EXPECTED[fault]):
        await client.summarize(request)
    await server.set_fault("ok")  # reopens the port after "refused"
    text = (await client.summarize(request)).text  # with the server's usage
    assert "covered: #a1 #u1" in text
    await client.aclose()


async def test_slow_succeeds_and_the_in_flight_count_returns_to_zero(server):
    client = OpenAISummarizer(base_url=server.base_url, model="cheap")
    await server.set_fault("slow")
    text = (
        await client.summarize(build_request(MESSAGES, previous_summary=None, max_tokens=200))
    ).text
    assert "#u1" in text
    assert (server.in_flight, server.max_in_flight) == (0, 1)
    await client.aclose()


def test_covered_markers_are_whole_markers():
    assert covered_markers('{"text": "#u12 hi #a3 call_4_1 #u1x call_99"}') == [
        "#a3",
        "#u12",
        "call_4_1",
    ]


def test_backoff_bound():
    first = BACKOFF_V * SCALE
    assert backoff_bound(0) == 1
    assert backoff_bound(first * 0.99) == 1
    assert backoff_bound(first) == 2
    assert backoff_bound(first * 3) == 3  # 1x + 2x
    cap = MAX_BACKOFF_V * SCALE
    assert backoff_bound(first * 15 + cap * 10) == 4 + 1 + 10  # 1+2+4+8, then capped
