"""The transcript loader: validation with file:line errors, turn splitting, replay steps."""

import json

import pytest

from pipecat_summarizer_cli.replay.transcript import (
    TranscriptError,
    build_steps,
    load_probes,
    load_transcript,
    transcript_from_messages,
)

SYSTEM = {"role": "system", "content": "You are a coach."}
CALL = {
    "role": "assistant",
    "content": "Let me check.",
    "tool_calls": [
        {
            "id": "call_1",
            "type": "function",
            "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
        }
    ],
}
RESULT = {"role": "tool", "tool_call_id": "call_1", "content": '{"temp_c": 18}'}


def write(tmp_path, lines, name="t.jsonl"):
    path = tmp_path / name
    path.write_text(
        "\n".join(line if isinstance(line, str) else json.dumps(line) for line in lines) + "\n",
        encoding="utf-8",
    )
    return path


def error_of(tmp_path, lines) -> TranscriptError:
    path = write(tmp_path, lines)
    with pytest.raises(TranscriptError) as info:
        load_transcript(path)
    return info.value


def test_loads_and_splits_turns(tmp_path):
    path = write(
        tmp_path,
        [
            SYSTEM,
            {"role": "assistant", "content": "Hi, I'm Sage."},
            "",
            {"role": "user", "content": "Hello"},
            {"role": "assistant", "content": "Hi!"},
            {"role": "user", "content": "Weather?"},
            CALL,
            RESULT,
            {"role": "assistant", "content": "18 C."},
        ],
    )
    t = load_transcript(path)
    assert t.name == "t"
    assert [m["role"] for m in t.preamble] == ["system", "assistant"]
    assert len(t.turns) == 2
    assert t.turns[0].user_message["content"] == "Hello"
    assert t.turns[0].line == 4  # the blank line is counted
    assert [s.text for s in t.turns[0].steps] == ["Hi!"]
    steps = t.turns[1].steps
    assert len(steps) == 2
    assert steps[0].text == "Let me check."
    assert [(c.id, c.name, c.arguments) for c in steps[0].tool_calls] == [
        ("call_1", "get_weather", {"city": "Paris"})
    ]
    assert steps[0].results == {"call_1": {"temp_c": 18}}
    assert steps[1].text == "18 C." and not steps[1].tool_calls


def test_invalid_json_names_file_and_line(tmp_path):
    e = error_of(tmp_path, [SYSTEM, {"role": "user", "content": "hi"}, '{"role": "assistant",'])
    assert e.line == 3
    assert str(e).startswith(f"{tmp_path / 't.jsonl'}:3: invalid JSON")


@pytest.mark.parametrize(
    ("bad", "needle"),
    [
        ('["not", "an", "object"]', "expected a JSON object"),
        ({"role": "robot", "content": "x"}, "invalid role 'robot'"),
        ({"content": "x"}, "invalid role None"),
        ({"role": "user", "content": 3}, "user message needs a string or parts content"),
        ({"role": "assistant"}, "neither content nor tool_calls"),
        ({"role": "tool", "tool_call_id": "nope", "content": "x"}, "does not match any earlier"),
        ({"role": "tool", "content": "x"}, "needs a tool_call_id"),
    ],
)
def test_bad_lines_give_the_line_number(tmp_path, bad, needle):
    e = error_of(tmp_path, [SYSTEM, {"role": "user", "content": "hi"}, bad])
    assert e.line == 3
    assert needle in str(e)
    assert ":3: " in str(e)


def test_bad_tool_arguments_and_duplicate_ids(tmp_path):
    bad_args = json.loads(json.dumps(CALL))
    bad_args["tool_calls"][0]["function"]["arguments"] = "{not json"
    e = error_of(tmp_path, [SYSTEM, {"role": "user", "content": "hi"}, bad_args])
    assert e.line == 3 and "arguments are not valid JSON" in str(e)

    e = error_of(tmp_path, [SYSTEM, {"role": "user", "content": "hi"}, CALL, RESULT, CALL])
    assert e.line == 5 and "duplicate tool call id 'call_1' (first on line 3)" in str(e)

    e = error_of(tmp_path, [SYSTEM, {"role": "user", "content": "hi"}, CALL, RESULT, RESULT])
    assert e.line == 5 and "already has a result" in str(e)


def test_unanswered_tool_call_is_reported_at_the_call(tmp_path):
    e = error_of(
        tmp_path,
        [SYSTEM, {"role": "user", "content": "hi"}, CALL, {"role": "user", "content": "?"}],
    )
    assert e.line == 3 and "has no result before the next user message" in str(e)
    e = error_of(tmp_path, [SYSTEM, {"role": "user", "content": "hi"}, CALL])
    assert e.line == 3 and "has no result" in str(e)


def test_whole_file_errors(tmp_path):
    e = error_of(tmp_path, [SYSTEM, {"role": "assistant", "content": "hello?"}])
    assert e.line is None and "no user message" in str(e)
    with pytest.raises(TranscriptError, match="cannot read"):
        load_transcript(tmp_path / "missing.jsonl")
    (tmp_path / "latin1.jsonl").write_bytes(b'{"role": "user", "content": "caf\xe9"}\n')
    with pytest.raises(TranscriptError, match="not UTF-8"):
        load_transcript(tmp_path / "latin1.jsonl")


def test_injected_instructions_go_with_the_nearest_user_turn():
    t = transcript_from_messages(
        [
            SYSTEM,
            {"role": "user", "content": "a"},
            {"role": "developer", "content": "note 1"},
            {"role": "assistant", "content": "A"},
            {"role": "system", "content": "note 2"},
            {"role": "user", "content": "b"},
            {"role": "assistant", "content": "B"},
            {"role": "system", "content": "trailing"},
        ]
    )
    assert [m["content"] for m in t.turns[0].inputs] == ["a", "note 1"]
    assert [m["content"] for m in t.turns[1].inputs] == ["note 2", "b"]
    assert t.warnings and "not replayed" in t.warnings[0]


def test_steps_merge_consecutive_texts_and_end_with_a_final_answer():
    steps = build_steps(
        [
            {"role": "assistant", "content": "One."},
            {"role": "assistant", "content": "Two."},
            CALL,
            {"role": "tool", "tool_call_id": "call_1", "content": "plain text"},
        ]
    )
    assert steps[0].text == "One.\nTwo.\nLet me check."
    assert steps[0].results == {"call_1": "plain text"}
    assert steps[-1].text == "" and not steps[-1].tool_calls
    assert [s.text for s in build_steps([])] == [""]  # a turn without an answer


def test_probes_file(tmp_path):
    path = tmp_path / "p.txt"
    path.write_text("vegetarian\n\n# a comment\n  allergic to peanuts  \n", encoding="utf-8")
    assert load_probes(path) == ["vegetarian", "allergic to peanuts"]
