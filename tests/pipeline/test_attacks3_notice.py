"""Attack on the resume notice known by identity: the caller types the notice's text
verbatim, word for word the one the session places (its duration pinned, so the two are
equal strings), in a dropped call and again in the call that resumes it. Through real
pipelines (Pipecat's OpenAI service against the local server, real aggregators) on a real
SQLite store, three calls, each dropped: every typed copy stays the caller's message
(archived, restored once by each resume, never dropped nor duplicated), and each resumed
call holds exactly one notice of the session's, the last restored message."""

from __future__ import annotations

import json

import pytest

from pipecat_summarizer._session import resume
from pipecat_summarizer._session.resume import RESTORED_FROM
from pipecat_summarizer.store import open_store
from tests.pipeline.test_resume_dropped import call, handler

HELLO = "Hello, it's about my order."
AGAIN = "Hi, it's me again, we got cut off."


@pytest.fixture
def typed(monkeypatch) -> str:
    """The notice's exact text (its duration pinned for every notice of the test)."""
    monkeypatch.setattr(resume, "_duration", lambda seconds: "a few seconds")
    return resume.notice(1.0, ())["content"]


async def _archived_said(target: str, call_id: str) -> list[str]:
    store = open_store(target)
    try:
        latest = await store.call(call_id)
        assert latest is not None
        return [
            m.content
            for m in await store.messages(latest.call_id)
            if m.role == "user" and m.content  # a reference row has no text
        ]
    finally:
        await store.close()


async def _typed_in_view(target: str, call_id: str, typed: str) -> int:
    """How many of the caller's typed copies ``call_id`` had in view at its end (its own
    rows, or references to a copy an earlier call archived)."""
    store = open_store(target)
    try:
        session = await store.call(call_id)
        assert session is not None
        n = 0
        for m in await store.messages(session.call_id):
            if m.removed_by != "in_context_at_end":
                continue
            if m.content == typed:
                n += 1
            elif not m.content and RESTORED_FROM in m.message_json:
                origin = json.loads(m.message_json)[RESTORED_FROM]
                said = await store.message(origin[0], origin[1])
                n += said is not None and said.content == typed
        return n
    finally:
        await store.close()


async def test_a_caller_typing_the_notice_verbatim_stays_the_caller(openai_server, tmp_path, typed):
    target = str(tmp_path / "m.db")
    openai_server.handler = handler
    await call(openai_server, target, "room-1", [HELLO, typed], end="cancel", messages=40)
    assert await _archived_said(target, "room-1") == [HELLO, typed]

    openai_server.requests.clear()
    said = [AGAIN, typed, "It should come on Monday.", "I paid for delivery."]
    await call(openai_server, target, "room-2", said, end="cancel", messages=6)
    first = openai_server.chat_requests[0]["messages"]
    # restored: the first call's two turns (the typed copy once), then the one notice
    users = [m["content"] for m in first if m.get("role") == "user"]
    assert users == [HELLO, typed, typed, AGAIN], users
    # the resumed call compacted (its context rebuilt around the summary): its own turns
    # archived once each, the typed copy among them, the session's notice never
    assert openai_server.summary_requests
    assert sorted(await _archived_said(target, "room-2")) == sorted(said)
    in_view = await _typed_in_view(target, "room-2", typed)

    openai_server.requests.clear()
    await call(openai_server, target, "room-3", [AGAIN], end="cancel", messages=40)
    first = openai_server.chat_requests[0]["messages"]
    assert [m["content"] for m in first[-2:]] == [typed, AGAIN]  # the new notice, last
    # the caller's copies in view at the drop, each once, and one notice: the second
    # call's notice is neither restored nor duplicated
    assert sum(m.get("content") == typed for m in first) == in_view + 1, first
