"""ContextSummarizer driven through real Pipecat pipelines against a real local HTTP server."""

from __future__ import annotations

import asyncio
import re
import time

import pytest
from pipecat.frames.frames import (
    InterruptionFrame,
    LLMContextFrame,
    LLMMessagesAppendFrame,
    LLMMessagesUpdateFrame,
    LLMSummarizeContextFrame,
)
from pipecat.processors.aggregators.llm_context import LLMContext
from pipecat.tests.utils import run_test

from pipecat_summarizer import (
    ContextCompactedFrame,
    ContextSummarizer,
    LLMContextSummaryConfig,
    OpenAISummarizer,
    PipecatLLMSummarizer,
    SummarizerOptions,
)
from pipecat_summarizer._compaction.prompt import parse_request
from tests.support.openai_server import Reply, is_summary_request
from tests.support.pipeline_utils import (
    Run,
    build,
    cfg,
    echo_summary,
    main_llm,
    scripted,
    texts_of,
    turns,
    user_texts,
    user_turn,
)
from tests.support.settle import Gap, run_settling

# -- a. barge-in ---------------------------------------------------------------------------


async def test_barge_in_every_turn_does_not_discard_slow_summaries(openai_server, logs):
    in_flight, peak = 0, 0

    async def handler(body):
        nonlocal in_flight, peak
        if not is_summary_request(body):
            return Reply("Sure thing.")
        in_flight += 1
        peak = max(peak, in_flight)
        await asyncio.sleep(0.75)  # a summary spans five turns
        in_flight -= 1
        return Reply(echo_summary(body))

    openai_server.handler = handler
    r = Run(openai_server, cfg(messages=16, keep=4))
    said = [f"user message number {i}" for i in range(24)]
    await r.run(turns(said, gap=0.15, interrupt=True), tail=1.0)

    requests = len(openai_server.summary_requests)
    assert 1 <= requests <= 5
    assert peak == 1  # never a second request while one is in flight
    assert len(r.applied) >= requests - 1
    final = texts_of(r.context.messages)
    assert all(text in final for text in said)
    assert len(openai_server.chat_requests) == len(said)
    lines = [x for x in logs if "context compacted" in x["message"]]
    assert len(lines) == len(r.applied)
    print(
        f"barge-in: {requests} summary requests, {len(r.applied)} applied, "
        f"{len(r.context.messages)} messages at the end"
    )


# -- b. appended while in flight -------------------------------------------------------------


async def test_messages_appended_while_in_flight_are_kept_in_order(openai_server):
    openai_server.handler = scripted(delay=0.4)  # five turns arrive while it is in flight
    r = Run(openai_server, cfg(messages=6, keep=2))
    said = [f"user message number {i}" for i in range(12)]
    await r.run(turns(said, gap=0.08), tail=0.6)
    assert r.applied
    msgs = r.context.messages
    summary_at = next(
        i for i, m in enumerate(msgs) if str(m.get("content")).startswith("Conversation summary")
    )
    after = [int(t.rsplit(" ", 1)[1]) for t in user_texts(msgs[summary_at + 1 :])]
    assert after == sorted(after) and after[-1] == 11
    assert all(t in texts_of(msgs) for t in said)
    assert msgs[0]["role"] == "system"


# -- c. context replaced while in flight -------------------------------------------------------


async def test_context_replaced_while_in_flight_discards_the_summary(openai_server, logs):
    openai_server.handler = scripted(delay=0.6)
    r = Run(openai_server, cfg(messages=6, keep=2))
    said = [f"user message number {i}" for i in range(4)]
    reset = [{"role": "system", "content": "New node."}, {"role": "user", "content": "fresh"}]
    frames = turns(said, gap=0.1) + [
        LLMMessagesUpdateFrame(messages=reset, run_llm=False),
        Gap(sleep=0.8),
    ]
    await r.run(frames)
    assert len(openai_server.summary_requests) == 1
    assert r.applied == []
    assert [m["content"] for m in r.context.messages] == ["New node.", "fresh"]
    assert any("summary discarded" in x["message"] for x in logs)


# -- d. tool calls ---------------------------------------------------------------------------


def _call(*ids):
    return {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": i, "type": "function", "function": {"name": "lookup", "arguments": "{}"}}
            for i in ids
        ],
    }


def _result(i, content="found it"):
    return {"role": "tool", "tool_call_id": i, "content": content}


async def test_tool_units_are_never_split_and_unresolved_calls_never_summarized(openai_server):
    openai_server.handler = scripted(summary="FACTS:\n- tools happened")
    # within the bound on unresolved calls (4 user turns follow it here)
    r = Run(
        openai_server,
        cfg(messages=6, keep=3),
        options=SummarizerOptions(unresolved_tool_call_turns=5),
    )
    history = [
        {"role": "user", "content": "first"},
        _call("p1", "p2"),  # parallel calls
        _result("p1"),
        {"role": "user", "content": "an aside while p2 runs"},  # results not adjacent
        _result("p2"),
        {"role": "assistant", "content": "both done"},
        {"role": "user", "content": "second"},
        _call("open"),
        _result("open", "IN_PROGRESS"),  # unresolved
        {"role": "assistant", "content": "working on it"},
    ]
    frames = [
        LLMMessagesAppendFrame(messages=history, run_llm=False),
        *turns([f"user message number {i}" for i in range(4)], gap=0.1),
    ]
    await r.run(frames, tail=0.5)
    assert r.applied, "a summary should have been applied"
    sent = openai_server.summary_requests[0]["messages"][1]["content"]
    transcript, _ = parse_request(sent)
    tool_ids = {m.get("tool_call_id") for m in transcript.messages if m["role"] == "tool"}
    assert {"p1", "p2"} <= tool_ids
    assert '"open"' not in sent and "working on it" not in sent
    msgs = r.context.messages
    ids_left = {m.get("tool_call_id") for m in msgs if m.get("role") == "tool"}
    calls_left = {c["id"] for m in msgs if m.get("tool_calls") for c in m["tool_calls"]}
    assert ids_left <= calls_left  # no orphaned result
    assert "open" in calls_left
    summary_at = next(i for i, m in enumerate(msgs) if "tools happened" in str(m.get("content")))
    assert msgs[summary_at + 1]["role"] != "tool"


# -- e. system prompt ------------------------------------------------------------------------


async def test_system_prompt_wherever_it_lives_is_never_summarized(openai_server):
    openai_server.handler = scripted(summary="FACTS:\n- summarized")
    r = Run(
        openai_server,
        cfg(messages=6, keep=2),
        system="LEADING SYSTEM PROMPT",
        llm_settings={"system_instruction": "SERVICE INSTRUCTION"},
    )
    r.context.add_message({"role": "developer", "content": "LEADING DEVELOPER PROMPT"})
    injected = {"role": "system", "content": "INJECTED MID-CALL"}
    frames = [
        *turns([f"user message number {i}" for i in range(2)], gap=0.1),
        LLMMessagesAppendFrame(messages=[injected], run_llm=False),
        *turns([f"user message number {i}" for i in range(2, 8)], gap=0.1),
    ]
    await r.run(frames, tail=0.4)
    assert r.applied
    for body in openai_server.summary_requests:
        sent = body["messages"][1]["content"]
        for protected in (
            "LEADING SYSTEM",
            "LEADING DEVELOPER",
            "SERVICE INSTRUCTION",
            "INJECTED MID-CALL",
        ):
            assert protected not in sent
    msgs = r.context.messages
    assert msgs[0]["content"] == "LEADING SYSTEM PROMPT"
    assert msgs[1]["content"] == "LEADING DEVELOPER PROMPT"
    assert any(m is injected for m in msgs)
    last_chat = str(openai_server.chat_requests[-1]["messages"])
    assert "SERVICE INSTRUCTION" in last_chat and "INJECTED MID-CALL" in last_chat


# -- f. no re-trigger loops --------------------------------------------------------------------


async def test_large_system_prompt_does_not_fire_every_turn(openai_server):
    r = Run(openai_server, cfg(tokens=8000, messages=None, keep=4), system="rule. " * 6700)
    await r.run(turns([f"user message number {i}" for i in range(10)], gap=0.05))
    assert openai_server.summary_requests == []


async def test_message_trigger_counts_since_last_summary(openai_server):
    openai_server.handler = scripted()
    r = Run(openai_server, cfg(messages=10, keep=4))
    await r.run(turns([f"user message number {i}" for i in range(20)], gap=0.08), tail=0.3)
    # 40 conversation messages, a summary every ~6 turns' worth once keep is subtracted
    assert 2 <= len(openai_server.summary_requests) <= 7
    assert len(r.applied) == len(openai_server.summary_requests)


def test_config_that_fires_every_turn_is_rejected():
    with pytest.raises(ValueError, match="every turn"):
        ContextSummarizer(
            context=LLMContext(),
            config=cfg(messages=4, keep=4),
            summarizer=OpenAISummarizer(base_url="http://127.0.0.1:9/v1"),
        )


def test_missing_summarizer_is_a_clear_error():
    with pytest.raises(ValueError, match="needs a summarizer"):
        ContextSummarizer(context=LLMContext(), config=cfg())


# -- g. bounded input --------------------------------------------------------------------------


async def test_summarizer_input_is_bounded_and_the_rest_waits(openai_server):
    openai_server.handler = scripted(summary="FACTS:\n- x")
    r = Run(
        openai_server,
        cfg(messages=30, keep=2),
        options=SummarizerOptions(max_summary_input_tokens=400),
    )
    long = [
        {"role": "user" if k % 2 == 0 else "assistant", "content": f"m{k} " + "w" * 600}
        for k in range(20)
    ]
    huge = {"role": "user", "content": "HUGE " + "h" * 20_000 + " END"}
    frames = [
        LLMMessagesAppendFrame(
            messages=[huge, {"role": "assistant", "content": "ok"}, *long], run_llm=False
        ),
        LLMSummarizeContextFrame(),
        Gap(sleep=0.3),
        LLMSummarizeContextFrame(),
        Gap(sleep=0.3),
    ]
    await r.run(frames)
    first, second = openai_server.summary_requests[:2]
    assert "shortened" in first["messages"][1]["content"]
    assert len(first["messages"][1]["content"]) < 400 * 4 + 1000
    assert len(second["messages"][1]["content"]) < 400 * 4 + 1000
    assert len(r.applied) == 2
    # what was not sent is still verbatim in the context
    assert "m19 " in texts_of(r.context.messages)


# -- h. rolling summary ------------------------------------------------------------------------


async def test_previous_summary_is_rolled_into_the_next(openai_server):
    openai_server.handler = scripted()
    r = Run(openai_server, cfg(messages=6, keep=2))
    await r.run(turns([f"user message number {i}" for i in range(12)], gap=0.08))
    assert len(openai_server.summary_requests) >= 2
    second = openai_server.summary_requests[1]["messages"][1]["content"]
    _, previous = parse_request(second)  # the previous record, in its own delimiter
    assert previous is not None and "user message number 0" in previous  # only known from it
    assert "user message number 0" in texts_of(r.context.messages)


# -- i. failures -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "reply",
    [Reply(status=500), Reply(status=429), Reply(""), Reply("   \n "), Reply(delay=1.0)],
    ids=["http500", "http429", "empty", "whitespace", "timeout"],
)
async def test_failures_leave_the_context_untouched(openai_server, logs, reply):
    def handler(body):
        return reply if is_summary_request(body) else Reply("Sure thing.")

    openai_server.handler = handler
    r = Run(
        openai_server,
        cfg(messages=6, keep=2, summarization_timeout=0.3),
        options=SummarizerOptions(retry_backoff_s=0),
    )
    said = [f"user message number {i}" for i in range(6)]
    await r.run(turns(said, gap=0.1), tail=0.6)  # the 0.3 s timeout has fired by then
    assert r.applied == [] and r.failed
    assert user_texts(r.context.messages) == said
    assert len(openai_server.chat_requests) == 6
    warnings = [
        x for x in logs if x["level"].name == "WARNING" and "summary failed" in x["message"]
    ]
    assert len(warnings) == len(r.failed)


async def test_connection_refused_then_escalation_once_then_reset(logs):
    from tests.support.openai_server import FakeOpenAIServer

    chat = FakeOpenAIServer()
    await chat.start()
    try:
        dead = OpenAISummarizer(base_url="http://127.0.0.1:9/v1", model="cheap")
        r = Run(
            chat,
            cfg(messages=4, keep=1),
            summarizer=dead,
            options=SummarizerOptions(retry_backoff_s=0),
        )
        await r.run(turns([f"user message number {i}" for i in range(8)], gap=2.0))
        assert len(r.failed) >= 4
        assert [f.consecutive_failures for f in r.failed] == list(range(1, len(r.failed) + 1))
        errors = [x for x in logs if x["level"].name == "ERROR" and "in a row" in x["message"]]
        assert len(errors) == 1
        assert user_texts(r.context.messages) == [f"user message number {i}" for i in range(8)]
    finally:
        await chat.stop()


async def test_backoff_keeps_a_dead_summarizer_from_being_called_every_turn(openai_server):
    openai_server.handler = scripted(status=503)
    r = Run(openai_server, cfg(messages=4, keep=1), options=SummarizerOptions(retry_backoff_s=30))
    await r.run(turns([f"user message number {i}" for i in range(10)], gap=0.05))
    assert len(openai_server.summary_requests) == 1
    assert r.failed[0].retry_in_s == 30


async def test_success_after_failures_resets_the_streak(openai_server):
    outcomes = iter([503, 503, 200, 503])

    def handler(body):
        if not is_summary_request(body):
            return Reply("Sure thing.")
        status = next(outcomes, 200)
        return Reply(echo_summary(body), status=status)

    openai_server.handler = handler
    r = Run(openai_server, cfg(messages=4, keep=1), options=SummarizerOptions(retry_backoff_s=0))
    await r.run(turns([f"user message number {i}" for i in range(8)], gap=0.1))
    assert r.applied
    assert [f.consecutive_failures for f in r.failed][:3] == [1, 2, 1]


async def test_end_frame_cancels_the_in_flight_summary(openai_server):
    openai_server.handler = scripted(delay=30)
    r = Run(openai_server, cfg(messages=4, keep=1))
    started = time.monotonic()
    await r.run(turns([f"user message number {i}" for i in range(3)], gap=0.1), tail=0.2)
    assert time.monotonic() - started < 10
    assert len(openai_server.summary_requests) == 1
    assert not r.processor.summary_in_flight and r.applied == []


# -- j. manual ---------------------------------------------------------------------------------


async def test_manual_summary_honours_the_override(openai_server):
    openai_server.handler = scripted(summary="FACTS:\n- manual")
    r = Run(openai_server, cfg(messages=50, keep=4))
    override = LLMContextSummaryConfig(
        min_messages_after_summary=1,
        summary_message_template="<memo>{summary}</memo>",
        summarization_prompt="Custom pirate memory record prompt.",
        target_context_tokens=77,
    )
    frames = [
        *turns([f"user message number {i}" for i in range(3)], gap=0.08),
        LLMSummarizeContextFrame(config=override),
        Gap(sleep=0.3),
    ]
    await r.run(frames)
    assert [e.reason for e in r.applied] == ["manual"]
    body = openai_server.summary_requests[0]
    assert body["messages"][0]["content"].startswith("Custom pirate memory record prompt.")
    assert body["max_tokens"] == 77
    msgs = r.context.messages
    # system prompt, then the summary in the override's template, a user-role message that
    # carries its FACTS itself (conversation facts never gain authority)
    assert msgs[1]["role"] == "user"
    assert msgs[1]["content"] == "<memo>FACTS:\n- manual</memo>"
    # keep=1 (not the default 4): only the last message stays, as Pipecat keeps it
    assert [m["content"] for m in msgs[2:]] == ["Sure thing."]


async def test_manual_frame_is_consumed_not_passed_downstream(openai_server):
    openai_server.handler = scripted(summary="FACTS:\n- manual")
    context = LLMContext(messages=[{"role": "user", "content": f"m{k}"} for k in range(8)])
    processor = ContextSummarizer(
        context=context,
        config=cfg(messages=50, keep=2),
        summarizer=OpenAISummarizer(base_url=openai_server.base_url, model="cheap"),
    )
    down, up = await run_test(
        processor,
        frames_to_send=[LLMSummarizeContextFrame(), Gap(sleep=0.3)],
        expected_down_frames=[],
    )
    assert [type(f) for f in up] == [ContextCompactedFrame]
    assert up[0].message["content"].startswith("Conversation summary: ")
    assert [f.text for f in processor.pinned_facts] == ["manual"]
    assert up[0].event.messages_summarized == 6


# -- events, logs, speculative frames, the LLMService path ----------------------------------------


async def test_applied_event_carries_the_figures_and_one_log_line(openai_server, logs):
    openai_server.handler = scripted()
    r = Run(openai_server, cfg(messages=6, keep=2))  # trips on the third turn's request
    said = [f"user message number {i}, " + "with a long story to tell " * 20 for i in range(4)]
    await r.run(turns(said, gap=0.1))
    assert len(r.applied) == 1
    e = r.applied[0]
    assert e.reason == "messages" and e.compaction == 1
    assert e.messages_before > e.messages_after
    assert e.messages_summarized >= 4 and e.messages_kept >= 2
    assert e.tokens_before > e.tokens_after > 0 and e.summary_tokens > 0
    assert (
        e.input_tokens > 0 and e.latency_s >= 0 and re.fullmatch(r"[0-9a-f]{12}", e.summary_sha256)
    )
    lines = [x["message"] for x in logs if "context compacted" in x["message"]]
    assert len(lines) == 1
    for key in ("reason=messages", "messages_summarized=", "tokens_before=", "summary_sha256="):
        assert key in lines[0]
    assert [type(f) for f in r.up if isinstance(f, ContextCompactedFrame)]


async def test_speculative_context_frames_are_ignored(openai_server):
    context = LLMContext(messages=[{"role": "user", "content": f"m{k}"} for k in range(30)])
    processor = ContextSummarizer(
        context=context,
        config=cfg(messages=5, keep=2),
        summarizer=OpenAISummarizer(base_url=openai_server.base_url, model="cheap"),
    )
    await run_settling(
        processor,
        frames_to_send=[LLMContextFrame(context=context, speculation=True), Gap(sleep=0.2)],
    )
    assert openai_server.summary_requests == []


async def test_pipecat_llm_service_as_summarizer(openai_server):
    openai_server.handler = scripted()
    service = main_llm(openai_server.base_url)
    r = Run(openai_server, cfg(messages=6, keep=2, llm=service), summarizer=None)
    assert isinstance(r.processor._summarizer, PipecatLLMSummarizer)
    await r.run(turns([f"user message number {i}" for i in range(5)], gap=0.1))
    assert r.applied
    body = openai_server.summary_requests[0]
    assert body["stream"] is False
    assert body.get("max_completion_tokens", body.get("max_tokens")) == 6000


async def test_summary_config_llm_is_used_when_no_summarizer_given(openai_server):
    openai_server.handler = scripted()
    service = main_llm(openai_server.base_url)
    context = LLMContext()
    processor = ContextSummarizer(context=context, config=cfg(llm=service))
    assert isinstance(processor._summarizer, PipecatLLMSummarizer)
    assert processor._summarizer.llm is service


async def test_interruption_alone_does_not_cancel(openai_server):
    openai_server.handler = scripted(delay=0.5)
    r = Run(openai_server, cfg(messages=4, keep=1))
    frames = [
        *turns([f"user message number {i}" for i in range(3)], gap=0.05),
        InterruptionFrame(),
        InterruptionFrame(),
        Gap(sleep=0.7),
    ]
    await r.run(frames)
    assert len(openai_server.summary_requests) == 1
    assert len(r.applied) == 1


def test_deprecated_config_is_accepted():
    from pipecat.utils.context.llm_context_summarization import LLMContextSummarizationConfig

    old = LLMContextSummarizationConfig(max_unsummarized_messages=9, min_messages_after_summary=3)
    p = ContextSummarizer(
        context=LLMContext(),
        config=old,
        summarizer=OpenAISummarizer(base_url="http://127.0.0.1:9/v1"),
    )
    assert p.config.max_unsummarized_messages == 9
    assert p.config.summary_config.min_messages_after_summary == 3


async def test_user_turn_helper_appends(openai_server):
    # guards the helper the other tests rely on: one user turn -> one chat request
    r = Run(openai_server, cfg(messages=50))
    await r.run([user_turn("hello there"), Gap(sleep=0.2)])
    assert user_texts(r.context.messages) == ["hello there"]
    assert r.context.messages[-1]["role"] == "assistant"


async def test_cancel_frame_and_cleanup_cancel_the_in_flight_summary(openai_server):
    from pipecat.frames.frames import CancelFrame

    openai_server.handler = scripted(delay=30)
    r = Run(openai_server, cfg(messages=4, keep=1))
    started = time.monotonic()
    frames = [*turns([f"user message number {i}" for i in range(3)], gap=0.1), CancelFrame()]
    await run_settling(
        build(r.context, r.processor, r.llm), frames_to_send=frames, send_end_frame=False
    )
    assert time.monotonic() - started < 10
    assert len(openai_server.summary_requests) == 1
    assert not r.processor.summary_in_flight and r.applied == []
    await r.processor.cleanup()  # idempotent once cancelled


async def test_manual_override_budget_is_not_capped(openai_server):
    openai_server.handler = scripted(summary="FACTS:\n- manual")
    r = Run(openai_server, cfg(tokens=8000, messages=50, keep=1))
    override = LLMContextSummaryConfig(min_messages_after_summary=1, target_context_tokens=5000)
    frames = [
        *turns([f"user message number {i}" for i in range(3)], gap=0.08),
        LLMSummarizeContextFrame(config=override),
        Gap(sleep=0.3),
        *turns([f"user message number {i}" for i in range(3, 6)], gap=0.08),
        LLMSummarizeContextFrame(),
        Gap(sleep=0.3),
    ]
    await r.run(frames)
    budgets = [b["max_tokens"] for b in openai_server.summary_requests]
    assert budgets == [5000, 2000]  # the override as given; the default capped at 8000 / 4
