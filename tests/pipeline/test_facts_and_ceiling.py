"""Pinned facts, the hard ceiling and pre-emptive compaction through real pipelines."""

from __future__ import annotations

import json
import re

from pipecat_summarizer import SummarizerOptions
from pipecat_summarizer._text.tokens import EstimateTokenCounter
from pipecat_summarizer.tools import REMEMBER_FACT, register_remember_fact
from tests.support.openai_server import Reply, is_summary_request
from tests.support.pipeline_utils import Run, cfg, echo_summary, scripted, texts_of, turns

C = EstimateTokenCounter()


def request_tokens(body: dict) -> int:
    return sum(C.count_message(m) for m in body["messages"])


async def test_app_pins_are_in_every_request_and_the_prefix_stays_stable(openai_server):
    r = Run(openai_server, cfg(messages=50))
    r.processor.pin("allergy", "The caller is allergic to peanuts")
    frames = turns(["hello", "what can I eat?"], gap=0.1)
    await r.run(frames)
    first, second = openai_server.chat_requests[:2]
    assert first["messages"][1]["content"].endswith("- The caller is allergic to peanuts")
    assert first["messages"][:2] == second["messages"][:2]  # byte-identical prefix
    r.processor.pin("allergy", "The caller is allergic to tree nuts")  # a correction
    assert "tree nuts" in r.context.messages[1]["content"]
    assert "peanuts" not in r.context.messages[1]["content"]
    assert r.processor.unpin("allergy")
    assert all("Pinned facts" not in str(m.get("content")) for m in r.context.messages)


async def test_summary_facts_are_pinned_and_corrections_replace_them(openai_server):
    summaries = iter(
        [
            "FACTS:\n- Training: 3 days a week\nCONSTRAINTS:\n- allergic to peanuts",
            "FACTS:\n- Training: 4 days a week (corrected)\nDECISIONS:\n- follow-up booked",
        ]
    )
    openai_server.handler = scripted(summary=lambda body: next(summaries))
    r = Run(openai_server, cfg(messages=6, keep=2))
    await r.run(turns([f"turn {i}" for i in range(10)], gap=0.08))
    assert len(r.applied) >= 2
    pinned = [f.text for f in r.processor.pinned_facts]
    assert "allergic to peanuts" in pinned  # forgotten by the second summary, still pinned
    assert "Training: 4 days a week (corrected)" in pinned
    assert "Training: 3 days a week" not in pinned
    last = openai_server.chat_requests[-1]["messages"]
    # the user-role summary carries the pinned facts: one message, no separate facts block
    summary = last[1]["content"]
    assert summary.startswith("Conversation summary:") and last[1]["role"] == "user"
    assert "allergic to peanuts" in summary  # forgotten by the summarizer, written back in
    assert "follow-up booked" in summary and "3 days a week" not in summary
    everything = "\n".join(str(m["content"]) for m in last)
    assert everything.count("4 days a week") == 1  # not paid twice
    assert "Training: 4 days a week" in r.processor.summary_text  # the full record rolls on


async def test_pinned_budget_overflow_folds_into_the_summary_with_a_warning(openai_server, logs):
    openai_server.handler = scripted()
    r = Run(openai_server, cfg(messages=50), options=SummarizerOptions(pinned_facts_tokens=40))
    for k in range(6):
        r.processor.pin(f"k{k}", f"important fact number {k} with some words")
    warnings = [x for x in logs if x["level"].name == "WARNING" and "budget" in x["message"]]
    assert warnings
    everything = texts_of(r.context.messages)
    for k in range(6):
        assert f"important fact number {k}" in everything  # pinned, or in the summary
    block = next(m for m in r.context.messages if "Pinned facts" in str(m["content"]))
    assert C.count_message(block) - 10 <= 40 + 5


async def test_remember_fact_tool_through_a_real_pipeline(openai_server):
    calls = iter(
        [
            Reply(
                tool_calls=[
                    {
                        "id": "call_1",
                        "type": "function",
                        "function": {
                            "name": REMEMBER_FACT,
                            "arguments": json.dumps(
                                {"key": "allergy", "fact": "allergic to peanuts"}
                            ),
                        },
                    }
                ]
            ),
        ]
    )

    def handler(body):
        if is_summary_request(body):
            return Reply("FACTS:\n- x")
        return next(calls, Reply("Noted."))

    openai_server.handler = handler
    r = Run(openai_server, cfg(messages=50))
    schema = register_remember_fact(r.llm, r.processor, r.context)
    assert schema.name == REMEMBER_FACT
    await r.run(
        [*turns(["I'm allergic to peanuts, remember that."], gap=0.5), *turns(["thanks"], gap=0.2)]
    )
    assert [f.text for f in r.processor.pinned_facts] == ["allergic to peanuts"]
    assert r.processor.pinned_facts[0].source == "llm"
    assert any(
        t["function"]["name"] == REMEMBER_FACT
        for t in openai_server.chat_requests[0].get("tools", [])
    )
    assert "allergic to peanuts" in openai_server.chat_requests[-1]["messages"][1]["content"]


async def test_ceiling_holds_through_an_outage_and_no_message_is_lost(openai_server):
    ceiling = 900
    ids = re.compile(r"user message number \d+\b")
    violations: list[int] = []
    lost: list[str] = []
    said: set[str] = set()

    def handler(body):
        turn = len(openai_server.chat_requests)
        if is_summary_request(body):
            if 3 <= turn < 20:  # the summarizer is down for 17 turns
                return Reply(status=503)
            return Reply(echo_summary(body))
        if request_tokens(body) > ceiling:
            violations.append(request_tokens(body))
        # at every request: each message said so far is verbatim, in the summary, or pending
        said.update(ids.findall(json.dumps(body["messages"])))
        everything = texts_of(r.context.messages) + (r.processor.summary_text or "")
        everything += texts_of(r.processor.pending_messages)
        lost.extend(s for s in said if not re.search(re.escape(s) + r"\b", everything))
        return Reply("Sure thing.")

    openai_server.handler = handler
    r = Run(
        openai_server,
        cfg(tokens=600, messages=None, keep=2),
        options=SummarizerOptions(
            max_request_tokens=ceiling, retry_backoff_s=0, max_summary_input_tokens=400
        ),
    )
    evictions: list = []

    async def on_evicted(_, event):
        evictions.append(event)

    r.processor.add_event_handler("on_messages_evicted", on_evicted)
    said_texts = [f"user message number {i} " + "blah " * 30 for i in range(30)]
    await r.run(turns(said_texts, gap=0.06), tail=1.0)

    assert len(openai_server.chat_requests) == 30
    assert evictions, "the ceiling should have evicted messages during the outage"
    assert max(e.pending_messages for e in evictions) > 0
    assert violations == []
    assert lost == [] and len(said) == 30
    assert r.failed
    # after recovery the backlog drained, in more than one chunk
    backlog = [e for e in r.applied if e.reason == "backlog"]
    assert backlog and r.processor.pending_messages == []
    final = texts_of(r.context.messages) + (r.processor.summary_text or "")
    assert all(re.search(rf"user message number {i}\b", final) for i in range(30))


async def test_preemptive_summary_lands_before_the_threshold(openai_server):
    threshold = 1200
    at_request: list[int] = []

    def handler(body):
        if is_summary_request(body):
            at_request.append(request_tokens(openai_server.chat_requests[-1]))
            return Reply("FACTS:\n- early", delay=0.1)
        return Reply("Sure thing.")

    openai_server.handler = handler
    r = Run(
        openai_server,
        cfg(tokens=threshold, messages=None, keep=2),
        system=None,
        options=SummarizerOptions(soft_trigger_ratio=0.8),
    )
    said = [f"user message number {i} " + "words " * 40 for i in range(14)]
    await r.run(turns(said, gap=0.3), tail=0.4)
    assert at_request and 0.8 * threshold <= at_request[0] < threshold
    sizes = [request_tokens(b) for b in openai_server.chat_requests]
    assert max(sizes) < threshold  # it landed before any request reached the threshold
    assert r.applied


async def test_summary_facts_pushed_out_of_the_block_reappear_in_the_summary(openai_server):
    openai_server.handler = scripted(summary="FACTS:\n- booking: NC-48213\n- name: Priya Raman")
    # an assistant-role summary leaves the pinned facts to the block (a user-role one
    # carries them itself: see test_summary_facts_are_pinned_and_corrections_replace_them)
    r = Run(
        openai_server,
        cfg(messages=6, keep=2),
        options=SummarizerOptions(pinned_facts_tokens=45, summary_role="assistant"),
    )
    await r.run(turns([f"turn {i}" for i in range(5)], gap=0.08))
    assert r.applied
    summary = r.processor.record.summary_message
    assert "NC-48213" not in summary["content"]  # shown in the block instead
    r.processor.pin("allergy", "The caller is allergic to peanuts and to tree nuts as well")
    everything = texts_of(r.context.messages)
    assert "NC-48213" in everything and "Priya Raman" in everything
    assert "allergic to peanuts" in r.context.messages[1]["content"]
    r.processor.unpin("allergy")
    assert "NC-48213" in texts_of(r.context.messages)


async def test_facts_evicted_during_an_outage_stay_in_view():
    from tests.support.openai_server import FakeOpenAIServer

    said = ["Hi, I'm vegetarian, and I'm allergic to peanuts."]
    said += [f"filler turn {i} " + "about lunch ideas and recipes " * 8 for i in range(12)]

    async def run(pin_evicted: bool):
        server = FakeOpenAIServer(scripted(status=503))  # the summarizer is down throughout
        await server.start()
        try:
            r = Run(
                server,
                cfg(tokens=600, messages=None, keep=2),
                options=SummarizerOptions(
                    max_request_tokens=700, retry_backoff_s=0, pin_evicted_facts=pin_evicted
                ),
            )
            await r.run(turns(said, gap=0.06))
            assert said[0] in texts_of(r.processor.pending_messages)  # evicted, not lost
            assert all(request_tokens(b) <= 700 for b in server.chat_requests)
            return [
                "allergic to peanuts" in json.dumps(b["messages"]) for b in server.chat_requests
            ]
        finally:
            await server.stop()

    assert all(await run(pin_evicted=True))
    assert not all(await run(pin_evicted=False))  # without it the allergy drops out of view


async def test_remember_fact_keeps_the_context_s_other_tools(openai_server):
    from pipecat.adapters.llm.schemas.function_schema import FunctionSchema
    from pipecat.adapters.llm.schemas.tools_schema import ToolsSchema

    async def get_weather(params, city: str):
        """Get the weather.

        Args:
            city: The city.
        """

    r = Run(openai_server, cfg(messages=50))
    lookup = FunctionSchema(name="lookup", description="Look up.", properties={}, required=[])
    custom = {"gemini": [{"google_search": {}}]}
    r.context.set_tools(ToolsSchema(standard_tools=[lookup, get_weather], custom_tools=custom))
    register_remember_fact(r.llm, r.processor, r.context)
    tools = r.context.tools
    assert [t.name for t in tools.standard_tools] == ["lookup", "get_weather", REMEMBER_FACT]
    assert [w.name for w in tools.direct_functions] == ["get_weather"]
    assert tools.custom_tools == custom


async def test_folded_facts_survive_a_discarded_summary(openai_server):
    from pipecat.frames.frames import LLMMessagesUpdateFrame

    def handler(body):
        if is_summary_request(body):
            for k in range(6):  # the app pins while the summary is in flight: over budget
                r.processor.pin(f"k{k}", f"important fact number {k} with some words")
            return Reply("FACTS:\n- from the summary", delay=0.4)
        return Reply("Sure thing.")

    openai_server.handler = handler
    r = Run(
        openai_server, cfg(messages=6, keep=2), options=SummarizerOptions(pinned_facts_tokens=40)
    )
    reset = [{"role": "system", "content": "New node."}, {"role": "user", "content": "fresh"}]
    frames = [
        *turns([f"turn {i}" for i in range(4)], gap=0.08),
        LLMMessagesUpdateFrame(messages=reset, run_llm=False),
        *turns(["after the reset"], gap=0.6),  # asked while the summary is still in flight
        *turns(["and once it was discarded"], gap=0.2),
    ]
    await r.run(frames)
    assert len(openai_server.summary_requests) == 1
    assert r.applied == []  # the summary was discarded: its messages were replaced
    for body in openai_server.chat_requests[-2:]:  # every fact in view, before and after
        sent = json.dumps(body["messages"])
        assert all(f"important fact number {k}" in sent for k in range(6))
    block = next(m for m in r.context.messages if "Pinned facts" in str(m["content"]))
    assert C.count_message(block) - 10 <= 40 + 5  # back within budget once it landed


async def test_a_ceiling_that_cannot_be_met_warns_and_never_blocks_the_turn(openai_server, logs):
    r = Run(
        openai_server,
        cfg(messages=50),
        options=SummarizerOptions(max_request_tokens=200),
    )
    huge = "a very long user turn " * 200  # the current turn alone is over the ceiling
    await r.run(turns([huge], gap=0.2))
    assert len(openai_server.chat_requests) == 1  # the reply was not held back
    warnings = [x for x in logs if "nothing more can be evicted" in x["message"]]
    assert len(warnings) == 1
    assert r.processor.pending_messages == []
