"""The trigger is checked on tool follow-ups too, as Pipecat's built-in checks as every
response starts (ours compacted a turn later when the threshold was crossed within
a tool round, and carried the extra messages for a whole turn).

Through a real pipeline: user aggregator, the processor, the real OpenAILLMService against the
local server, the processor's companion after the LLM, and the assistant aggregator.
"""

from __future__ import annotations

import json

from pipecat_summarizer._compaction.prompt import parse_request
from tests.support.openai_server import Reply, is_summary_request
from tests.support.pipeline_utils import cfg, lookup_tool_pipeline, turns, user_turn
from tests.support.settle import Gap, run_settling

SAID = ["first: my order is 4471", "second: ship it to Lyon", "third: thanks"]


async def _call(server, *, guard: bool) -> list[list[dict]]:
    """Three user turns, each running one tool; the message threshold (7) is crossed within
    the second turn's tool round (its follow-up: 7 messages, and the answer on its way).
    Returns the messages of each summary request's transcript."""
    calls = {"n": 0}

    def handler(body):
        if is_summary_request(body):
            return Reply("FACTS:\n- order 4471")
        if body["messages"][-1]["role"] == "tool":
            return Reply("Done.")
        calls["n"] += 1
        return Reply(
            tool_calls=[
                {
                    "id": f"call_{calls['n']}",
                    "type": "function",
                    "function": {"name": "lookup", "arguments": json.dumps({"n": calls["n"]})},
                }
            ]
        )

    server.handler = handler
    pipeline = lookup_tool_pipeline(server, cfg(messages=7, keep=2), guard=guard)
    await run_settling(
        pipeline,
        frames_to_send=[*turns(SAID, gap=0.4), Gap(sleep=0.3)],
    )
    out = []
    for body in server.summary_requests:
        parsed = parse_request(body["messages"][1]["content"])
        assert parsed is not None
        out.append(parsed[0].messages)
    return out


def _calls(messages: list[dict]) -> list[str]:
    return [c["id"] for m in messages for c in m.get("tool_calls") or []]


async def test_a_threshold_crossed_within_a_tool_round_compacts_at_the_follow_up(openai_server):
    """Seven messages at the second turn's follow-up: the compaction starts within that
    round, so the second call and its result stay verbatim (planned at the third user turn,
    the second round would be summarized too)."""
    summarized = await _call(openai_server, guard=True)
    assert summarized, "a summary should have been requested"
    first = summarized[0]
    assert [m["content"] for m in first if m["role"] == "user"] == [SAID[0], SAID[1]]
    assert _calls(first) == ["call_1"]


async def test_without_the_companion_the_next_user_turn_compacts(openai_server):
    """Control: the follow-up never reaches the processor, so the compaction waits for the
    third user turn and summarizes the second round too."""
    summarized = await _call(openai_server, guard=False)
    assert summarized and _calls(summarized[0]) == ["call_1", "call_2"]


async def _slow_third_turn(server, after: list) -> list[dict]:
    """Three user turns with tools offered (threshold 6, keep 2): the third request's 5
    messages and its answer reach the threshold, so its compaction waits for the response,
    which takes 0.8 s; ``after`` follows the third turn. Returns the summary requests."""
    summaries = []

    def handler(body):
        if is_summary_request(body):
            summaries.append(body)
            return Reply("FACTS:\n- three turns")
        if body["messages"][-1].get("content") == "three":
            return Reply("Sure.", delay=0.8)
        return Reply("Sure.")

    server.handler = handler
    pipeline = lookup_tool_pipeline(server, cfg(messages=6, keep=2), guard=True)
    turns_ = [user_turn("one"), Gap(sleep=0.3), user_turn("two"), Gap(sleep=0.3)]
    await run_settling(pipeline, frames_to_send=[*turns_, user_turn("three"), *after])
    return summaries


async def test_a_response_ending_after_the_call_ended_starts_no_compaction(openai_server, logs):
    """Tools offered, so a compaction due on the last turn's request waits for its response
    to end; the application ends the call while the LLM is still answering: EndFrame passes
    the processor first, the response's end reaches the companion after it. No summary may
    start on a call that is over."""
    summaries = await _slow_third_turn(openai_server, [])  # the call ends while it answers
    assert openai_server.chat_requests[-1]["messages"][-1]["content"] == "three"
    assert summaries == []
    # nor started and failed on the client the call's end closed
    mine = [r["message"] for r in logs if r["name"].startswith("pipecat_summarizer")]
    assert not [m for m in mine if ": summarizing " in m or "summary failed" in m], mine


async def test_a_summary_landing_while_the_response_runs_cancels_the_wait(openai_server):
    """Tools offered, so a compaction due on the third request waits for its response to
    end; meanwhile the application asks for a manual summary, which lands first. The wait
    was for a context that no longer exists: nothing more starts at the response's end (it
    would summarize the one or two messages the manual summary kept)."""
    from pipecat.frames.frames import LLMSummarizeContextFrame

    manual = [Gap(sleep=0.2), LLMSummarizeContextFrame(), Gap(sleep=1.2)]
    summaries = await _slow_third_turn(openai_server, manual)
    assert len(summaries) == 1, [parse_request(b["messages"][1]["content"]) for b in summaries]
