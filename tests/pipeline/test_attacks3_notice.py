"""Attack on the resume notice known by identity: the caller types the notice's text
verbatim, word for word the one the session places (its duration pinned, so the two are
equal strings), in a dropped call and again in the call that resumes it. Through real
pipelines (Pipecat's OpenAI service against the local server, real aggregators) on a real
SQLite store, three calls, each dropped: every typed copy stays the caller's message
(archived, restored once by each resume, never dropped nor duplicated), and each resumed
call holds exactly one notice of the session's, the last restored message."""

from __future__ import annotations

import pytest

from pipecat_summarizer._session import resume
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


async def test_a_caller_typing_the_notice_verbatim_stays_the_caller(openai_server, tmp_path, typed):
    target = str(tmp_path / "m.db")
    openai_server.handler = handler
    await call(openai_server, target, "room-1", [HELLO, typed], end="cancel", messages=40)
    assert await _archived_said(target, "room-1") == [HELLO, typed]

    openai_server.requests.clear()
    await call(openai_server, target, "room-2", [AGAIN, typed], end="cancel", messages=40)
    first = openai_server.chat_requests[0]["messages"]
    # restored: the first call's two turns (the typed copy once), then the one notice
    users = [m["content"] for m in first if m.get("role") == "user"]
    assert users == [HELLO, typed, typed, AGAIN], users
    # the session's notice is the one just before the new turn; the caller's copy is the
    # second message restored, and the new call archives only what was said in it
    assert await _archived_said(target, "room-2") == [AGAIN, typed]

    openai_server.requests.clear()
    await call(openai_server, target, "room-3", [AGAIN], end="cancel", messages=40)
    first = openai_server.chat_requests[0]["messages"]
    users = [m["content"] for m in first if m.get("role") == "user"]
    # both calls' words, each typed copy once, the second call's notice gone, one new one
    assert users == [HELLO, typed, AGAIN, typed, typed, AGAIN], users


async def test_the_notice_keeps_its_identity_through_a_compaction_of_the_resumed_call(
    openai_server, tmp_path, typed
):
    """The resumed call compacts (its context is rebuilt around the summary): the
    session's notice must still be known by identity, so it is neither archived as the
    caller's words nor restored by the next resume beside the next notice."""
    target = str(tmp_path / "m.db")
    openai_server.handler = handler
    await call(openai_server, target, "room-1", [HELLO], end="cancel")
    said = [AGAIN, "It should come on Monday.", "I paid for delivery."]
    await call(openai_server, target, "room-2", said, end="cancel", messages=4)
    assert openai_server.summary_requests, "the resumed call compacted"
    assert typed not in await _archived_said(target, "room-2")
    openai_server.requests.clear()
    await call(openai_server, target, "room-3", [AGAIN], end="cancel")
    first = openai_server.chat_requests[0]["messages"]
    assert [m for m in first if m.get("content") == typed] == [first[-2]]  # one, the new
