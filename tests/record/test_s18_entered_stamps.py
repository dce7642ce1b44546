"""The recorder dates each message by when it entered the context (``CallRecorder.entered``,
called at each turn): the rule over random schedules of a call's context (turns appending
messages, compactions cutting the oldest, recall blocks replaced each turn, the conversation's
clock moved between turns). Each message keeps the time of the turn it was first seen at,
however long it stays, and what the recorder keeps stays bounded by the context it sees
(ours that left unarchived, a block a turn, are let go)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from pipecat_summarizer._session.recorder import CallRecorder
from pipecat_summarizer.store import SQLiteMemoryStore

DAY = 86400.0

steps = st.lists(
    st.tuples(
        st.integers(min_value=0, max_value=4),  # messages the turn appends
        st.integers(min_value=0, max_value=6),  # the oldest a compaction cuts (0: none)
        st.booleans(),  # a recall block replaced (a new message in the middle)
        st.booleans(),  # the clock moved a day before the turn
    ),
    min_size=1,
    max_size=120,
)


@settings(max_examples=60, deadline=None)
@given(steps)
def test_each_message_keeps_the_time_of_the_turn_it_entered_at(schedule):
    recorder = CallRecorder(SQLiteMemoryStore(), call_id="c", user_id="al")
    clock = recorder.clock
    at = 1_600_000_000.0
    clock.set(at)
    messages: list[dict] = [{"role": "system", "content": "sys"}]
    block: dict | None = None
    entered_at: dict[int, float] = {}
    n = 0
    for appended, cut, replace_block, moved in schedule:
        if moved:
            at += DAY
            clock.set(at)
        if cut:
            del messages[1 : 1 + cut]
        if replace_block:
            if block is not None and block in messages:
                messages.remove(block)
            block = {"role": "user", "content": f"block {n}"}
            messages.insert(max(1, len(messages) - 1), block)
        for _ in range(appended):
            n += 1
            message = {"role": "user", "content": f"m{n}"}
            messages.append(message)
            entered_at[id(message)] = at
        recorder.entered(messages)
        assert len(recorder._entered) <= 2 * len(messages) + 64
    for message in messages:
        if message is block or message["role"] == "system":
            continue
        got = recorder._dated(message, now=-1.0, keep=True)
        assert got >= entered_at[id(message)]
        assert got < entered_at[id(message)] + 1.0  # the turn's time, not a later one's


def test_a_long_call_with_a_block_a_turn_keeps_what_it_holds_bounded():
    # 400 turns: two messages in, two summarized out, a new recall block each turn: the
    # stamps of messages gone (ours: never archived) are let go
    recorder = CallRecorder(SQLiteMemoryStore(), call_id="c", user_id="al")
    messages: list[dict] = [{"role": "system", "content": "sys"}]
    block: dict | None = None
    for n in range(400):
        if block is not None:
            messages.remove(block)
        del messages[1:3]
        block = {"role": "user", "content": f"block {n}"}
        messages += [
            block,
            {"role": "user", "content": f"q{n}"},
            {"role": "assistant", "content": f"a{n}"},
        ]
        recorder.entered(messages)
    assert len(messages) <= 6
    assert len(recorder._entered) <= 2 * len(messages) + 64
