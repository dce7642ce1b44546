"""The replay LLM through a real pipeline: it records exactly what it was sent and answers
with the recorded messages, tool calls and results included."""

import json

from pipecat_summarizer_cli.replay.runner import run_strategy
from pipecat_summarizer_cli.replay.transcript import transcript_from_messages

MESSAGES = [
    {"role": "system", "content": "You are a coach."},
    {"role": "user", "content": "Hi, I'm vegetarian."},
    {"role": "assistant", "content": "Noted, vegetarian."},
    {"role": "user", "content": "Weather in Paris and Rome?"},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "call_p",
                "type": "function",
                "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
            },
            {
                "id": "call_r",
                "type": "function",
                "function": {"name": "get_weather", "arguments": '{"city": "Rome"}'},
            },
        ],
    },
    {"role": "tool", "tool_call_id": "call_p", "content": '{"temp_c": 18}'},
    {"role": "tool", "tool_call_id": "call_r", "content": '{"temp_c": 25}'},
    {"role": "assistant", "content": "Paris 18, Rome 25."},
    {"role": "user", "content": "Thanks!"},
    {"role": "assistant", "content": "You're welcome."},
]


def decoded(request):
    return [json.loads(m) for m in request.messages]


async def test_records_each_request_and_replays_tool_calls():
    transcript = transcript_from_messages(MESSAGES)
    result = await run_strategy(transcript, "full_buffer")
    # One request per turn, plus one after the tool results (Pipecat re-runs the LLM).
    assert [(r.turn, len(r.messages)) for r in result.requests] == [
        (1, 2),
        (2, 4),
        (2, 8),
        (3, 10),
    ]
    first, _, after_tools, last = result.requests
    assert decoded(first) == MESSAGES[:2]
    # The tool round went through Pipecat's function-calling path: the assistant
    # aggregator wrote one call message and one result per call.
    tail = decoded(after_tools)[4:]
    assert [m["role"] for m in tail] == ["assistant", "tool", "assistant", "tool"]
    calls = {m["tool_calls"][0]["id"]: m["tool_calls"][0] for m in tail if m["role"] == "assistant"}
    assert calls["call_p"]["function"]["name"] == "get_weather"
    assert json.loads(calls["call_r"]["function"]["arguments"]) == {"city": "Rome"}
    results = {m["tool_call_id"]: json.loads(m["content"]) for m in tail if m["role"] == "tool"}
    assert results == {"call_p": {"temp_c": 18}, "call_r": {"temp_c": 25}}
    # The final answers were written to the context by the real assistant aggregator.
    final = decoded(last)
    assert final[2] == {"role": "assistant", "content": "Noted, vegetarian."}
    assert final[8] == {"role": "assistant", "content": "Paris 18, Rome 25."}
    assert final[9] == {"role": "user", "content": "Thanks!"}
    # Each request extends the previous one byte for byte (no summarization).
    for prev, cur in zip(result.requests, result.requests[1:], strict=False):
        assert cur.messages[: len(prev.messages)] == prev.messages
    assert "vegetarian" in result.final_text.lower()
    assert result.hot_path_ns == [] and result.summary_calls == []


async def test_request_tokens_use_the_package_estimate():
    from pipecat_summarizer._text.tokens import EstimateTokenCounter

    transcript = transcript_from_messages(MESSAGES[:3])
    result = await run_strategy(transcript, "full_buffer")
    (request,) = result.requests
    counter = EstimateTokenCounter()
    assert request.total == sum(counter.count_message(m) for m in MESSAGES[:2])
    assert request.answer_tokens == len("Noted, vegetarian.") // 4


async def test_a_turn_without_a_recorded_answer_gets_an_empty_one():
    transcript = transcript_from_messages(
        [
            {"role": "system", "content": "S"},
            {"role": "user", "content": "one"},
            {"role": "user", "content": "two"},
            {"role": "assistant", "content": "Two."},
        ]
    )
    result = await run_strategy(transcript, "full_buffer")
    assert [len(r.messages) for r in result.requests] == [2, 3]
    assert [m["content"] for m in decoded(result.requests[1])] == ["S", "one", "two"]
