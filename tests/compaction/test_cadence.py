"""The cadence rules: what a compaction keeps, when the whole context
trips Pipecat's threshold, and the prompt-cache deferral; pure rules, then real pipelines."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pipecat_summarizer import ContextSummarizer, OpenAISummarizer
from pipecat_summarizer._compaction.cadence import (
    AnswerWait,
    CacheCadence,
    kept_messages,
    offers_tools,
    over_context_limit,
)
from pipecat_summarizer._compaction.measure import Measurement
from pipecat_summarizer._compaction.trigger import CompactionTrigger, trigger_reason
from pipecat_summarizer.params import ContextSummarizerParams, TriggerParams
from tests.support.pipeline_utils import (
    USER_LINE,
    Run,
    cfg,
    scripted,
    texts_of,
    turns,
    user_turn,
)
from tests.support.settle import Gap, run_settling


def run_with(server, config, params: ContextSummarizerParams) -> Run:
    """A :class:`Run` whose processor takes grouped ``params``."""
    r = Run(server, config)
    r.processor = ContextSummarizer(
        context=r.context,
        config=config,
        summarizer=OpenAISummarizer(base_url=server.base_url, model="cheap"),
        params=params,
    )

    @r.processor.event_handler("on_context_compacted")
    async def _applied(_, event):
        r.applied.append(event)

    return r


# -- kept messages -----------------------------------------------------------------------------


def test_the_answer_on_its_way_counts_among_the_kept_messages():
    assert kept_messages(4, answer_pending=True) == 3
    assert kept_messages(4, answer_pending=False) == 4  # backlog, manual: nothing pending
    assert kept_messages(1, answer_pending=True) == 1  # the question stays with its answer
    assert kept_messages(0, answer_pending=True) == 0


# -- waiting for the answer's shape ---------------------------------------------------------------


def test_without_the_companion_a_due_compaction_starts_on_its_request():
    wait = AnswerWait()
    assert wait.request("messages") == "messages"
    assert wait.ended() is None


def test_without_tools_the_answer_is_one_message_and_nothing_waits():
    wait = AnswerWait(enabled=True)
    assert wait.request("messages") == "messages"  # waiting would only start it later
    assert wait.request("tokens", tools_offered=False) == "tokens"


def test_once_the_llm_has_called_a_tool_its_answers_may_be_tool_rounds():
    wait = AnswerWait(enabled=True)
    wait.request(None)
    wait.tool_call()  # the context declares no tools, yet the LLM called one
    wait.ended()
    assert wait.request("messages") is None


def test_what_offers_tools():
    from pipecat.adapters.llm.schemas.function_schema import FunctionSchema
    from pipecat.adapters.llm.schemas.tools_schema import ToolsSchema
    from pipecat.processors.aggregators.llm_context import NOT_GIVEN

    schema = FunctionSchema(name="f", description="d", properties={}, required=[])
    assert offers_tools(ToolsSchema(standard_tools=[schema]))
    assert offers_tools([{"type": "function", "function": {"name": "f"}}])
    assert not offers_tools(ToolsSchema(standard_tools=[]))
    assert not offers_tools(NOT_GIVEN) and not offers_tools(None) and not offers_tools([])


def test_a_text_answer_starts_the_compaction_at_the_responses_end():
    wait = AnswerWait(enabled=True)
    assert wait.request("messages", tools_offered=True) is None  # the answer's shape is unknown
    wait.text()
    assert wait.ended() == "messages" and wait.answered
    assert wait.ended() is None  # once


def test_a_tool_round_leaves_the_decision_to_its_follow_up():
    wait = AnswerWait(enabled=True)
    assert wait.request("tokens", tools_offered=True) is None
    wait.tool_call()
    assert wait.ended() is None  # the call and its result come first
    assert wait.request("tokens", tools_offered=True) is None  # the follow-up decides again
    wait.text()
    assert wait.ended() == "tokens"


def test_a_response_without_text_keeps_one_more_message():
    wait = AnswerWait(enabled=True)
    wait.request("messages", tools_offered=True)
    assert wait.ended() == "messages" and not wait.answered  # no answer on its way


def test_reasons_without_an_answer_and_nothing_due_never_wait():
    wait = AnswerWait(enabled=True)
    assert wait.request("backlog", tools_offered=True) == "backlog"
    assert wait.request("manual", tools_offered=True) == "manual"
    assert wait.request(None, tools_offered=True) is None
    assert wait.ended() is None


@given(
    st.lists(st.sampled_from(["messages", "tokens", None, "text", "tool_call", "end"])),
    st.booleans(),
)
def test_a_due_compaction_is_never_held_past_the_next_request(events, tools_offered):
    """Liveness: whatever the companion reports or misses (an interrupted response, a
    companion that cannot see the LLM), what waits starts at its response's end or, at the
    latest, on the next request."""
    wait = AnswerWait(enabled=True)
    waiting = False
    for event in events:
        if event == "text":
            wait.text()
        elif event == "tool_call":
            wait.tool_call()
        elif event == "end":
            started = wait.ended()
            assert started is None or waiting
            waiting = False
        else:
            started = wait.request(event, tools_offered=tools_offered)
            if waiting and event is not None:
                assert started == event  # the earlier wait never saw its end: start now
            waiting = started is None and event is not None
        assert (wait.reason is not None) == waiting


# -- Pipecat's threshold on the whole context ----------------------------------------------------


def test_whole_context_threshold_applies_unless_the_system_prompt_is_large():
    assert over_context_limit(8000, 5000, 8000)  # 3,000 protected: Pipecat's limit holds
    assert not over_context_limit(7999, 4999, 8000)
    assert not over_context_limit(12_000, 500, 8000)  # the head alone is over half
    config = cfg(tokens=8000, messages=20)
    # reducible 5,000 is under the soft 6,400, but the request is at Pipecat's 8,000
    assert trigger_reason(config, Measurement(8000, 5000, 3, 10), soft=0.8) == "tokens"
    assert trigger_reason(config, Measurement(12_000, 500, 3, 10), soft=0.8) is None


@given(st.integers(0, 20_000), st.integers(0, 20_000), st.integers(100, 50_000))
def test_whole_context_threshold_never_fires_below_pipecats(reducible, protected, limit):
    total = reducible + protected
    if over_context_limit(total, reducible, limit):
        assert total >= limit and protected <= limit / 2


# -- the prompt-cache deferral ------------------------------------------------------------------


def cycle(cadence: CacheCadence, base: int, growth: int, turns: int) -> list[bool]:
    """After a compaction, ``turns`` turns growing by ``growth``: is the message threshold
    deferred on each?"""
    cadence.compacted()
    out = []
    for k in range(turns):
        cadence.observe(base + k * growth)
        out.append(cadence.defer("messages"))
    return out


def test_no_discount_never_defers():
    c = CacheCadence()
    assert cycle(c, 2000, 200, 10) == [False] * 10


def test_the_first_compaction_follows_pipecats_thresholds():
    c = CacheCadence(0.9)
    c.observe(5000)
    assert not c.defer("messages")  # no compaction yet: no measured prefix to weigh


def test_defers_until_carrying_costs_as_much_as_rewriting():
    c = CacheCadence(0.9)
    deferred = cycle(c, base=2000, growth=200, turns=20)
    # rewrite: 0.9 * 2000 = 1800; carried after k turns: 0.1 * 200 * k(k-1)/2 >= 1800 at k=14
    assert deferred == [True] * 13 + [False] * 7
    assert c.carry_cost() >= c.rewrite_cost()


def test_only_the_message_threshold_waits():
    c = CacheCadence(0.9)
    cycle(c, base=2000, growth=0, turns=3)
    assert c.defer("messages")
    assert not c.defer("tokens")  # requests stay under max_context_tokens
    assert not c.defer("backlog") and not c.defer("manual") and not c.defer(None)


@given(
    st.floats(0.01, 0.99),
    st.integers(0, 20_000),
    st.lists(st.integers(0, 30_000), min_size=1, max_size=60),
)
def test_once_it_pays_it_stays_due_until_the_next_compaction(discount, base, sizes):
    c = CacheCadence(discount)
    c.compacted()
    c.observe(base)
    due_seen = False
    for size in sizes:
        c.observe(size)
        deferred = c.defer("messages")
        assert deferred == (c.carry_cost() < c.rewrite_cost())
        if due_seen:
            assert not deferred  # carried tokens only grow
        due_seen = due_seen or not deferred


@pytest.mark.parametrize("bad", [1.0, -0.1, math.nan, math.inf])
def test_bad_discount_is_rejected_by_name(bad):
    with pytest.raises(ValueError, match="cached_input_discount"):
        TriggerParams(cached_input_discount=bad)
    with pytest.raises(ValueError, match="discount"):
        CacheCadence(bad)


def test_trigger_defers_message_compactions_with_a_cache_discount():
    t = CompactionTrigger(cfg(tokens=8000, messages=20), TriggerParams(cached_input_discount=0.9))

    def due(reducible, since):
        return t.due(Measurement(reducible + 500, reducible, since, since + 2), now=0.0,
                     in_flight=False, pending=False)  # fmt: skip

    assert due(2500, 20) == "messages"  # the first compaction: Pipecat's thresholds
    t.summary_applied()
    assert due(1500, 5) is None  # the base: 1,500 rewritten
    assert due(1700, 20) is None  # carrying 20 at a tenth: cheaper than 1,350 rewritten
    assert due(7000, 40) == "tokens"  # the token threshold never waits
    assert t.due(Measurement(1900, 1400, 22, 30), now=0.0, in_flight=False, pending=True) == (
        "backlog"
    )


# -- through a real pipeline ---------------------------------------------------------------------


def after_summary(request: dict) -> list[dict]:
    """The messages of a main-LLM request after the summary message."""
    msgs = request["messages"]
    at = next(
        i
        for i, m in enumerate(msgs)
        if isinstance(m.get("content"), str) and m["content"].startswith("Conversation summary")
    )
    return msgs[at + 1 :]


async def test_a_compaction_keeps_exactly_min_messages_after_summary(openai_server):
    """keep=4: once the summary lands, the 4 most recent messages follow it (the answer to
    the turn that triggered it among them), then the next user turn. Counting the 4 before
    the answer kept a whole exchange more on every request. The threshold (8) trips on the
    fourth turn's request, whose answer brings the count to 8."""
    openai_server.handler = scripted()
    r = Run(openai_server, cfg(messages=8, keep=4))
    said = [f"user message number {i}" for i in range(5)]
    await r.run(turns(said, gap=0.2))
    assert len(r.applied) == 1
    firsts = [b for b in openai_server.chat_requests if "Conversation summary" in str(b)]
    tail = after_summary(firsts[0])
    assert [m["role"] for m in tail] == ["user", "assistant", "user", "assistant", "user"]
    assert [m["content"] for m in tail if m["role"] == "user"] == [
        "user message number 2",
        "user message number 3",
        "user message number 4",
    ]
    # nothing lost: every earlier user line is in the summary (the echo summarizer keeps them)
    final = texts_of(openai_server.chat_requests[-1]["messages"])
    assert {int(x.rsplit(" ", 1)[1]) for x in USER_LINE.findall(final)} == set(range(5))


async def test_a_cache_discount_compacts_less_often_and_loses_nothing(openai_server):
    said = [f"user message number {i}, " + "about my week " * 10 for i in range(16)]
    counts = {}
    for discount in (0.0, 0.9):
        openai_server.handler = scripted()
        openai_server.requests.clear()
        params = ContextSummarizerParams(trigger=TriggerParams(cached_input_discount=discount))
        r = run_with(openai_server, cfg(messages=8, keep=4), params)
        await r.run(turns(said, gap=0.2))
        counts[discount] = len(r.applied)
        assert all(e.reason == "messages" for e in r.applied)
        final = texts_of(openai_server.chat_requests[-1]["messages"])
        assert {int(x.rsplit(" ", 1)[1]) for x in USER_LINE.findall(final)} == set(range(len(said)))
    assert counts[0.0] >= 4
    assert 1 <= counts[0.9] < counts[0.0]


async def _tool_round_at_the_threshold(server, *, guard: bool) -> list[dict]:
    """Four turns, the fourth answered by a tool round (a call, its result, then the answer);
    the message threshold (7) trips on the fourth turn's request. Returns the main-LLM
    request of the fifth turn."""

    from tests.support.openai_server import Reply, is_summary_request
    from tests.support.pipeline_utils import lookup_tool_pipeline

    def handler(body):
        if is_summary_request(body):
            return Reply("FACTS:\n- the user asked four things", delay=0.05)
        last = body["messages"][-1]
        if last["role"] == "user" and last["content"] == "four: look it up":
            call = {"id": "call_4", "type": "function",
                    "function": {"name": "lookup", "arguments": "{}"}}  # fmt: skip
            return Reply(None, tool_calls=[call])
        return Reply("Found it." if last["role"] == "tool" else "Sure.")

    server.handler = handler
    pipeline = lookup_tool_pipeline(server, cfg(messages=7, keep=4), guard=guard)
    said = ["one", "two", "three", "four: look it up", "five"]
    await run_settling(
        pipeline,
        # the tool turn has two answers (the call, then "Found it."): its pause waits for
        # both, else "five" could come while the round was still on its way (seen under load)
        frames_to_send=[
            *turns(said[:3], gap=0.5),
            user_turn(said[3]),
            Gap(sleep=0.5, answers=5),
            *turns(said[4:], gap=0.5),
            Gap(sleep=0.3),
        ],
    )
    assert server.summary_requests
    return next(b for b in server.chat_requests if b["messages"][-1]["content"] == "five")


async def test_a_tool_round_keeps_no_more_than_a_text_answer(openai_server):
    """keep=4 and the threshold trips on a turn the LLM answers with a tool call: the
    compaction waits for the round's follow-up, so the call, its result and the answer are
    among the 4 kept messages (planned on the user turn's request, the call and the result
    came on top of the 4, on every request until the next summary)."""
    tail = after_summary(await _tool_round_at_the_threshold(openai_server, guard=True))
    assert [m["role"] for m in tail] == ["user", "assistant", "tool", "assistant", "user"]
    assert tail[0]["content"] == "four: look it up" and tail[-1]["content"] == "five"


async def test_without_the_companion_the_plan_on_the_request_keeps_the_round_on_top(
    openai_server,
):
    """Control: without the companion nothing reports the response, so the compaction is
    planned on the fourth turn's request and the call and its result stay on top of the 4."""
    tail = after_summary(await _tool_round_at_the_threshold(openai_server, guard=False))
    assert len(tail) == 7 and tail[-1]["content"] == "five"


async def _in_flight_when_answers_start(server, *, tools: bool) -> list[bool]:
    """Whether a summary is running as each answer of the main LLM starts (a probe after the
    companion); the message threshold (5) trips on the third turn's request; summaries take
    0.5 s, chat answers come at once."""
    from pipecat.adapters.llm.schemas.function_schema import FunctionSchema
    from pipecat.adapters.llm.schemas.tools_schema import ToolsSchema
    from pipecat.frames.frames import LLMFullResponseStartFrame
    from pipecat.pipeline.pipeline import Pipeline
    from pipecat.processors.aggregators.llm_context import LLMContext
    from pipecat.processors.aggregators.llm_response_universal import LLMContextAggregatorPair
    from pipecat.processors.frame_processor import FrameProcessor

    from tests.support.pipeline_utils import main_llm

    server.handler = scripted(summary="FACTS:\n- three turns", delay=0.5)
    context = LLMContext()
    if tools:
        schema = FunctionSchema(name="lookup", description="Look up.", properties={}, required=[])
        context.set_tools(ToolsSchema(standard_tools=[schema]))
    summarizer = ContextSummarizer(
        context=context,
        config=cfg(messages=5, keep=2),
        summarizer=OpenAISummarizer(base_url=server.base_url, model="cheap"),
    )
    seen: list[bool] = []

    class Probe(FrameProcessor):
        # holds nothing: the settled pauses may end early (else they last their full length)
        settled = True

        async def process_frame(self, frame, direction):
            await super().process_frame(frame, direction)
            if isinstance(frame, LLMFullResponseStartFrame):
                seen.append(summarizer.summary_in_flight)
            await self.push_frame(frame, direction)

    pair = LLMContextAggregatorPair(context)
    llm = main_llm(server.base_url)
    await run_settling(
        Pipeline([pair.user(), summarizer, llm, summarizer.after_llm(), Probe(), pair.assistant()]),
        frames_to_send=[*turns(["one", "two", "three"], gap=0.2), Gap(sleep=0.6)],
    )
    return seen


async def test_without_tools_the_compaction_starts_on_the_request(openai_server):
    """No tools: the answer can only be one message, so the compaction due on the third
    turn starts on its request, already running as the answer starts (waiting for the
    answer's end would only start it later); with tools it waits for the end."""
    assert await _in_flight_when_answers_start(openai_server, tools=False) == [False, False, True]
    openai_server.requests.clear()
    assert await _in_flight_when_answers_start(openai_server, tools=True) == [False] * 3
