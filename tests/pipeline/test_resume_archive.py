"""A resumed call never archives again what it restored: each message is archived once, by the
call it was said in, across a dropped call, the call that resumes it and a third that resumes
that one (so recall finds it once, and the call rows count only their own messages). Real
pipelines (Pipecat's OpenAI service against the local server, real aggregators), SQLite and
PostgreSQL."""

from __future__ import annotations

from collections import Counter

from pipecat_summarizer.store import open_store
from tests.pipeline.test_resume_dropped import (
    AGAIN,
    CALL_1,
    assert_paired,
    call,
    first_request,
    handler,
    notices,
)


async def test_each_message_is_archived_once_across_resumed_calls(openai_server, store_target):
    openai_server.handler = handler
    await call(openai_server, store_target, "room-1", CALL_1, end="cancel")  # summarized once
    # resumed; no summary: what it restored is still in view when it drops again
    await call(openai_server, store_target, "room-2", [AGAIN], end="cancel", messages=50)
    openai_server.requests.clear()
    # resumed again (call 1's words come back through call 2), then summarized away
    third = ["Still there?", "Thanks for waiting.", "Is it on its way?", "Great, goodbye."]
    await call(openai_server, store_target, "room-3", third)
    sent = first_request(openai_server)
    assert_paired(sent)
    assert len(notices(sent)) == 1
    said = "\n".join(str(m.get("content")) for m in sent)
    assert CALL_1[-1] in said and AGAIN in said  # the chain still resumes call 1's words
    assert openai_server.summary_requests  # call 3 summarized what it had restored

    store = open_store(store_target)
    try:
        calls = await store.calls("alice", limit=10)
        rows = [r for c in calls for r in await store.messages(c.call_id)]
        hits = await store.search("express delivery", user_id="alice")
    finally:
        await store.close()
    assert len(calls) == 3
    texts = Counter(r.content for r in rows if r.role == "user" and r.content)
    for text in [*CALL_1, AGAIN, *third]:
        assert texts[text] == 1, (text, texts[text])  # archived once, wherever it was said
    assert not any(n > 1 for n in texts.values()), texts
    assert [h.content for h in hits] == [CALL_1[3]]  # recall finds it once
    searchable = [r for r in rows if r.content]
    assert sum(c.messages_archived for c in calls) == len(searchable)  # no inflated counts
