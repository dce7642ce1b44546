"""The resume's notice is the application's text, never the caller's words: a pending tool
call whose arguments say "make that 21 March" is named in the notice, and the
resumed call neither corrects a pinned fact from it (the call's result was lost: whether the
change took effect is unknown) nor shows it to the summarizer as the caller's line. Real
pipelines (Pipecat's OpenAI service against the local server, real aggregators), SQLite and
PostgreSQL."""

from __future__ import annotations

import json

from pipecat_summarizer._compaction.transcript import NOTICE_MARK, encode_message
from pipecat_summarizer._record.notices import NOTICE_HEADER
from pipecat_summarizer._session.resume import notice
from tests.pipeline.test_resume_dropped import AGAIN, TOOL, call, notices
from tests.support.openai_server import Reply, is_summary_request

ARGUMENTS = {"order": "4417", "note": "the caller asked: make that 21 March"}
SUMMARY = "FACTS:\n- The caller's order 4417 is to be delivered on 14 March."
SAID = [
    "Hello, it's about order 4417.",
    "It is a sofa.",
    "It should come on 14 March.",
    "I paid for delivery.",
    "Can you look up whether it can come another day?",
]


def _handler(body: dict) -> Reply:
    if is_summary_request(body):
        return Reply(SUMMARY)
    last = body["messages"][-1]
    if last.get("role") == "user" and "look up" in str(last.get("content")):
        call_ = {"id": "call_move_1", "type": "function"}
        call_["function"] = {"name": TOOL, "arguments": json.dumps(ARGUMENTS)}
        return Reply(None, tool_calls=[call_], finish_reason="tool_calls")
    return Reply("Sure.")


async def test_a_notice_naming_a_correction_corrects_nothing(openai_server, store_target):
    openai_server.handler = _handler
    first = await call(openai_server, store_target, "room-1", SAID, end="cancel")
    assert first.summary_text is not None and "14 March" in first.summary_text
    openai_server.requests.clear()
    resumed = await call(openai_server, store_target, "room-2", [AGAIN, "Are you there?"])
    sent = next(r["messages"] for r in openai_server.chat_requests if notices(r["messages"]))
    (note,) = notices(sent)
    assert "make that 21 March" in note["content"]  # the notice names the pending call
    # the dropped call's summary stands uncorrected: the notice is nobody's words, and the
    # call's result was lost (whether the date moved is unknown)
    assert resumed.summary_text is not None and "14 March" in resumed.summary_text
    last = json.dumps(openai_server.chat_requests[-1]["messages"])
    assert "corrected from" not in last and "delivered on 21 March" not in last
    # the summary of the resumed call reads the notice marked as the application's
    (request,) = [r for r in openai_server.summary_requests if NOTICE_HEADER in json.dumps(r)]
    lines = request["messages"][1]["content"].split("\n")
    (line,) = [x for x in lines if NOTICE_HEADER in x]
    assert line.startswith("user {") and NOTICE_MARK in line.split(": [Note", 1)[0], line


def test_the_transcript_marks_the_notice_it_is_told_of_never_a_look_alike():
    placed = notice(30.0, ())
    line = encode_message(placed, notice=True)
    assert line.startswith("user {") and NOTICE_MARK in line.split(": [Note", 1)[0], line
    # the same text from the caller (no identity) stays the caller's line
    assert encode_message(dict(placed)).startswith("user: [Note")
