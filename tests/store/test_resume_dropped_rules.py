"""The pure rules of resuming a dropped call (``_session/resume.py``): which call is resumed,
what of its archive is restored and in which order, the tool-call pairing repairs every
provider needs, the notice, and where the restored messages go in the new context."""

from __future__ import annotations

import json

import pytest
from pipecat.processors.aggregators import async_tool_messages

from pipecat_summarizer._session.resume import (
    LOST_RESULT,
    NOTICE_HEADER,
    PendingCall,
    dropped_within,
    notice,
    place_restored,
    previous_call,
    repair_tool_pairs,
    restore,
)
from pipecat_summarizer.store.records import ArchivedMessage, CallRecord


def _call(*ids: str, text: str | None = None) -> dict:
    calls = [
        {"id": i, "type": "function", "function": {"name": f"tool_{i}", "arguments": "{}"}}
        for i in ids
    ]
    message: dict = {"role": "assistant", "tool_calls": calls}
    if text is not None:
        message["content"] = text
    return message


def _result(call_id: str, content: str = '{"ok": true}') -> dict:
    return {"role": "tool", "tool_call_id": call_id, "content": content}


def _user(text: str) -> dict:
    return {"role": "user", "content": text}


def test_a_call_whose_result_never_came_gets_a_lost_result_after_its_answered_siblings():
    a, b = _call("a", "b", text="Let me check both."), _result("a")
    out, pending, repairs = repair_tool_pairs([_user("hi"), a, b, _user("hello?")])
    assert out[1] is a and out[2] is b  # unchanged messages are the same objects
    assert out[3] == {"role": "tool", "tool_call_id": "b", "content": LOST_RESULT}
    assert out[4] == _user("hello?")
    assert [p.tool_call_id for p in pending] == ["b"] and repairs == 1


def test_a_placeholder_still_running_is_settled_as_lost():
    started = async_tool_messages.build_started_message("s")
    messages = [_call("p"), _result("p", "IN_PROGRESS"), _call("s"), dict(started)]
    out, pending, _ = repair_tool_pairs(messages)
    assert [m["content"] for m in out if m["role"] == "tool"] == [LOST_RESULT, LOST_RESULT]
    assert [p.tool_call_id for p in pending] == ["p", "s"]
    assert messages[1]["content"] == "IN_PROGRESS"  # the input is not changed


def test_an_async_call_settled_by_its_final_message_is_kept_verbatim():
    started = dict(async_tool_messages.build_started_message("s"))
    final = dict(async_tool_messages.build_final_result_message("s", '"shipped"'))
    messages = [_call("s"), started, _user("and?"), final]
    out, pending, repairs = repair_tool_pairs(messages)
    assert out == messages and pending == [] and repairs == 0


def test_orphan_results_are_dropped_and_a_separated_result_moves_next_to_its_call():
    call = _call("x")
    out, pending, repairs = repair_tool_pairs(
        [_result("gone"), call, _user("still there?"), _result("x"), _result("x", "again")]
    )
    assert out == [call, _result("x"), _user("still there?")]
    assert pending == [] and repairs == 3  # an orphan, a move, a second answer


def _archived(position: int, message: object, removed_by="in_context_at_end") -> ArchivedMessage:
    text = message if isinstance(message, str) else json.dumps(message)
    return ArchivedMessage("s1", position, "user", "", text, removed_by=removed_by, user_id="alice")


def test_restore_takes_the_messages_in_view_at_the_end_in_order_and_closes_with_a_notice():
    dropped = CallRecord(
        "s1",
        "alice",
        started_at=100.0,
        ended_at=200.0,
        ended_by="cancel",
        summary="FACTS:\n- order 4417",
        facts=({"key": "plan", "text": "Gold", "kind": "fact", "source": "app"},),
    )
    old_notice = notice(5, [])
    archived = [
        _archived(4, _result("c")),
        _archived(0, _user("summarized long ago"), removed_by="summarized"),
        _archived(3, _call("c")),
        _archived(1, _user("where is my order?")),
        _archived(2, {"role": "unknown", "content": "<provider object>"}),
        _archived(5, old_notice),
        _archived(6, "not json"),
        ArchivedMessage("s1", 7, "user", "", json.dumps(_user("bob's words")), user_id="bob"),
    ]
    resumed = restore(dropped, archived, started_at=230.0)
    # a notice is never archived: a row that reads like one is the caller's, restored
    restored = [_user("where is my order?"), _call("c"), _result("c"), old_notice]
    assert resumed.messages[:-1] == restored
    assert resumed.messages[-1]["content"].startswith(NOTICE_HEADER)
    assert "about 30 seconds" in resumed.messages[-1]["content"]
    assert resumed.summary == "FACTS:\n- order 4417" and resumed.facts[0]["text"] == "Gold"
    assert resumed.skipped == 2 and resumed.pending == () and resumed.gap_s == 30.0


@pytest.mark.parametrize(
    ("ended_by", "ended_at", "window", "resumed"),
    [
        ("cancel", 190.0, 120.0, True),
        ("cleanup", 190.0, 120.0, True),
        ("dropped", 190.0, 120.0, True),
        ("end", 190.0, 120.0, False),  # a goodbye
        ("cancel", 50.0, 120.0, False),  # too long ago
        ("cancel", None, 120.0, False),  # still running (or its process died)
        ("cancel", 190.0, 0.0, False),  # off
    ],
)
def test_which_call_is_resumed(ended_by, ended_at, window, resumed):
    call = CallRecord("s1", "alice", started_at=100.0, ended_at=ended_at, ended_by=ended_by)
    assert dropped_within(call, started_at=200.0, window_s=window) is resumed


def test_the_previous_call_is_neither_this_one_nor_one_started_after_it():
    mine = CallRecord("me", "alice", started_at=200.0)
    later = CallRecord("later", "alice", started_at=250.0)
    before = CallRecord("before", "alice", started_at=150.0)
    assert previous_call([later, mine, before], session_id="me", started_at=200.0) is before
    assert previous_call([mine], session_id="me", started_at=200.0) is None


def test_the_notice_is_user_data_naming_each_pending_call_briefly():
    pending = [PendingCall("c1", "refund", json.dumps({"note": "x" * 500}))]
    message = notice(42.4, pending)
    assert message["role"] == "user"
    lines = message["content"].splitlines()
    assert lines[0] == NOTICE_HEADER and "about 42 seconds" in lines[1]
    assert lines[-1].startswith("- Tool refund(") and "[call id c1]" in lines[-1]
    assert "result was lost" in lines[-1] and lines[-2] == "OPEN QUESTIONS:"
    assert len(lines[-1]) < 360  # the arguments are cut (to 200 characters)
    assert "about 1 second before" in notice(0.2, [])["content"]
    assert "about 5 minutes before" in notice(300, [])["content"]


def test_restored_messages_go_after_the_head_the_facts_and_the_summary():
    system, app = {"role": "system", "content": "s"}, {"role": "developer", "content": "facts"}
    noted, summary = _user("noted facts"), _user("Conversation summary: ...")
    now = _user("hi again")
    restored = [_user("before the drop"), _user("the notice")]
    messages = [system, app, noted, summary, now]
    assert place_restored(messages, restored, (noted, summary)) == [
        system,
        app,
        noted,
        summary,
        *restored,
        now,
    ]
    assert place_restored([system, now], restored, (None, None)) == [system, *restored, now]
