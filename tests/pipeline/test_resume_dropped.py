"""A dropped call resumes: the caller's next call within ``resume_dropped_within_s`` starts
with the messages the dropped call had in view (verbatim), its summary and its pinned facts,
and a user-role note about the dropped connection naming the tool call left pending; the
request is valid (every tool call paired). Real pipelines (Pipecat's OpenAI service against
the local server, real aggregators), SQLite and PostgreSQL."""

from __future__ import annotations

import asyncio
import json

import asyncpg
from pipecat.adapters.llm.schemas.function_schema import FunctionSchema
from pipecat.adapters.llm.schemas.tools_schema import ToolsSchema
from pipecat.frames.frames import CancelFrame
from pipecat.processors.aggregators.llm_context import LLMContext

from pipecat_summarizer import ContextSummarizer, OpenAISummarizer
from pipecat_summarizer._session.resume import LOST_RESULT, NOTICE_HEADER
from pipecat_summarizer.params import MemoryParams, WriterParams
from pipecat_summarizer.store import open_store
from tests.support.openai_server import Reply, is_summary_request
from tests.support.pipeline_utils import build, cfg, main_llm, turns
from tests.support.settle import Gap, run_settling

FAST = WriterParams(flush_interval_s=0.05, max_backoff_s=0.2, write_timeout_s=5)
SYSTEM = {"role": "system", "content": "You are a helpful voice assistant."}
TOOL = "lookup_order"
SUMMARY = "FACTS:\n- The caller's order number is 4417."
CALL_1 = [
    "Hello, I have a question about my order.",
    "My order number is 4417.",
    "It was supposed to arrive on Monday.",
    "And I paid for express delivery.",
    "Can you look up where the order is now?",
]
AGAIN = "Hi, it's me again, we got cut off."


def handler(body: dict) -> Reply:
    """Summaries are scripted; the main LLM calls the tool when asked to look something up."""
    if is_summary_request(body):
        return Reply(SUMMARY)
    last = body["messages"][-1]
    if last.get("role") == "user" and "look up" in str(last.get("content")):
        call = {"id": "call_lookup_1", "type": "function"}
        call["function"] = {"name": TOOL, "arguments": json.dumps({"order": "4417"})}
        return Reply(None, tool_calls=[call], finish_reason="tool_calls")
    return Reply("Sure.")


async def call(
    server,
    target: str,
    call_id: str,
    texts: list[str],
    *,
    user: str = "alice",
    end: str = "end",
    window: float = 120.0,
    pins=(),
    messages: int = 6,
    resume: bool = True,
) -> ContextSummarizer:
    """One call of ``user`` on the store at ``target``: a pause (the caller connects), the
    turns, then ``end``: ``"end"`` (a goodbye, EndFrame), ``"cancel"`` (a CancelFrame, the
    transport dropped) or ``"mark"`` (``mark_dropped()``, then an EndFrame). A summary is due
    past ``messages`` messages. The store is opened first (a loaded machine's PostgreSQL
    connection takes longer than the pause), so the caller's memory has loaded by the turn."""
    store = open_store(target)
    await store.calls(user, limit=1)
    context = LLMContext(messages=[dict(SYSTEM)])
    context.set_tools(
        ToolsSchema(
            standard_tools=[
                FunctionSchema(
                    name=TOOL,
                    description="Where an order is.",
                    properties={"order": {"type": "string"}},
                    required=["order"],
                )
            ]
        )
    )
    processor = ContextSummarizer(
        context=context,
        config=cfg(messages=messages, keep=2),
        summarizer=OpenAISummarizer(base_url=server.base_url, model="cheap"),
        store=store,
        call_id=call_id,
        user_id=user,
        memory=MemoryParams(writer=FAST, resume=resume, resume_dropped_within_s=window),
    )
    for key, text in pins:
        processor.pin(key, text)
    llm = main_llm(server.base_url)
    never = asyncio.Event()

    async def lookup(params):  # the courier's system is slow: the call drops first
        await never.wait()

    llm.register_function(TOOL, lookup)
    frames = [Gap(sleep=0.5), *turns(texts, gap=0.4)]  # each pause ends once settled
    if end == "cancel":
        frames.append(CancelFrame())
    if end == "mark":
        processor.mark_dropped()
    try:
        await run_settling(
            build(context, processor, llm),
            frames_to_send=frames,
            send_end_frame=end != "cancel",
        )
    finally:
        await store.close()
    return processor


async def in_view_at_end(target: str, user: str) -> list[dict]:
    """The messages the caller's latest call archived as in view at its end, in order."""
    store = open_store(target)
    try:
        latest = (await store.calls(user, limit=1))[0]
        archived = await store.messages(latest.call_id)
    finally:
        await store.close()
    at_end = sorted(
        (a for a in archived if a.removed_by == "in_context_at_end"), key=lambda a: a.position
    )
    return [json.loads(a.message_json) for a in at_end]


def assert_paired(messages: list[dict]) -> None:
    """OpenAI's rule: each assistant tool_calls message is followed by one tool message per
    id (before any other message), and a tool message only answers such a call."""
    open_ids: list[str] = []
    for m in messages:
        if m.get("role") == "tool":
            assert m.get("tool_call_id") in open_ids, f"orphan tool result {m}"
            open_ids.remove(m["tool_call_id"])
            continue
        assert not open_ids, f"tool calls {open_ids} not answered before {m.get('role')}"
        open_ids = [c["id"] for c in m.get("tool_calls") or []]
    assert not open_ids


def notices(messages: list[dict]) -> list[dict]:
    return [m for m in messages if str(m.get("content", "")).startswith(NOTICE_HEADER)]


def first_request(server) -> list[dict]:
    return server.chat_requests[0]["messages"]


def content(messages: list[dict]) -> str:
    return "\n".join(str(m.get("content")) for m in messages)


async def test_a_dropped_call_with_a_pending_tool_call_resumes_verbatim(
    openai_server, store_target
):
    openai_server.handler = handler
    first = await call(
        openai_server,
        store_target,
        "room-1",
        CALL_1,
        end="cancel",
        pins=[("plan", "Gold plan customer")],
    )
    assert first.summary_text is not None  # call 1 summarized its start before the drop
    dropped = await in_view_at_end(store_target, "alice")
    pending = {"role": "tool", "content": "IN_PROGRESS", "tool_call_id": "call_lookup_1"}
    assert dropped[-1] == pending
    openai_server.requests.clear()

    await call(openai_server, store_target, "room-2", [AGAIN])
    assert_resumed(first_request(openai_server), dropped)


def assert_resumed(sent: list[dict], dropped: list[dict]) -> None:
    """``sent`` (call 2's first request) resumes the dropped call: the system prompt, the
    app's facts and the summary, once each, then the messages in view at the drop verbatim
    (the pending tool call's placeholder settled as lost), the note naming the pending call,
    then this call's turn; every tool call paired."""
    assert_paired(sent)
    expected = [*dropped[:-1], {**dropped[-1], "content": LOST_RESULT}]
    start = next(i for i, m in enumerate(sent) if m == expected[0])
    assert sent[start : start + len(expected)] == expected  # verbatim, in order
    (note,) = notices(sent)
    assert sent[start + len(expected)] is note and sent[-1] == {"role": "user", "content": AGAIN}
    assert note["role"] == "user" and TOOL in note["content"] and "4417" in note["content"]
    head = sent[:start]  # the head: the system prompt, the app's facts, the summary
    assert head[0] == SYSTEM
    assert "Gold plan customer" in content(h for h in head if h["role"] in ("system", "developer"))
    assert content(head).count("order number is 4417") == 1  # the summary, once
    assert content(sent).count("Gold plan customer") == 1


def returning_caller(sent: list[dict]) -> None:
    """Today's returning caller, exactly: the system prompt, the stored facts, the "earlier
    calls" summary, then this call's turn; nothing of the dropped call verbatim, no note."""
    assert [m["role"] for m in sent] == ["system", "developer", "user", "user"]
    assert "Gold plan customer" in sent[1]["content"]
    earlier = sent[2]["content"]
    assert earlier.startswith("Conversation summary: From earlier calls with this caller:\nCall of")
    assert "order number is 4417" in earlier
    assert sent[3] == {"role": "user", "content": AGAIN}


async def test_after_a_goodbye_the_caller_gets_what_a_returning_caller_gets(
    openai_server, tmp_path
):
    db = str(tmp_path / "memory.db")
    openai_server.handler = handler
    pins = [("plan", "Gold plan customer")]
    await call(openai_server, db, "room-1", CALL_1[:-1], end="end", pins=pins)
    openai_server.requests.clear()
    await call(openai_server, db, "room-2", [AGAIN])  # at once: well within the window
    returning_caller(first_request(openai_server))


async def test_outside_the_window_or_off_the_caller_gets_what_a_returning_caller_gets(
    openai_server, tmp_path
):
    openai_server.handler = handler
    pins = [("plan", "Gold plan customer")]
    for name, window in (("late", 0.1), ("off", 0.0)):
        db = str(tmp_path / f"{name}.db")
        await call(openai_server, db, "room-1", CALL_1, end="cancel", pins=pins)
        await asyncio.sleep(0.3)  # the caller calls back after the window
        openai_server.requests.clear()
        await call(openai_server, db, "room-2", [AGAIN], window=window)
        returning_caller(first_request(openai_server))


async def test_a_call_marked_dropped_resumes_though_an_end_frame_ended_it(openai_server, tmp_path):
    db = str(tmp_path / "memory.db")
    openai_server.handler = handler
    await call(openai_server, db, "room-1", CALL_1[:2], end="mark")
    dropped = await in_view_at_end(db, "alice")
    openai_server.requests.clear()
    await call(openai_server, db, "room-2", [AGAIN])
    sent = first_request(openai_server)
    assert sent[1 : 1 + len(dropped)] == dropped
    (note,) = notices(sent)
    assert "No tool call was pending" in note["content"]


async def test_a_forget_between_the_calls_leaves_nothing_to_resume(openai_server, store_target):
    openai_server.handler = handler
    await call(openai_server, store_target, "room-1", CALL_1, end="cancel")
    store = open_store(store_target)
    try:
        await store.forget("alice")
    finally:
        await store.close()
    openai_server.requests.clear()
    await call(openai_server, store_target, "room-2", [AGAIN])
    assert first_request(openai_server) == [SYSTEM, {"role": "user", "content": AGAIN}]


async def test_two_callers_on_one_store_never_resume_each_other(openai_server, tmp_path):
    db = str(tmp_path / "memory.db")
    openai_server.handler = handler
    bob_said = ["Hi, this is about my invoice 9902.", "Can you look up the invoice?"]
    await call(openai_server, db, "room-a1", CALL_1, end="cancel")
    await call(openai_server, db, "room-b1", bob_said, user="bob", end="cancel")
    alice_asked, bob_asked = CALL_1[-1], bob_said[-1]  # each caller's last words at the drop
    for user, own, other in (("alice", alice_asked, bob_asked), ("bob", bob_asked, alice_asked)):
        openai_server.requests.clear()
        await call(openai_server, db, f"room-{user}-2", [AGAIN], user=user)
        sent = first_request(openai_server)
        assert own in content(sent) and other not in content(sent)
        assert len(notices(sent)) == 1
        assert_paired(sent)


async def test_a_resumed_call_that_drops_again_resumes_once_more_without_repeats(
    openai_server, tmp_path
):
    db = str(tmp_path / "memory.db")
    openai_server.handler = handler
    await call(openai_server, db, "room-1", CALL_1, end="cancel")
    # no summary in the later calls: what call 2 had in view is what call 3 gets
    await call(openai_server, db, "room-2", [AGAIN], end="cancel", messages=50)
    openai_server.requests.clear()
    await call(openai_server, db, "room-3", ["Still there?"], messages=50)
    sent = first_request(openai_server)
    assert_paired(sent)
    (note,) = notices(sent)  # this drop's note only; the lost result is no longer pending
    assert "No tool call was pending" in note["content"]
    assert content(sent).count(LOST_RESULT) == 1 and content(sent).count(AGAIN) == 1
    said = [m.get("content") for m in sent]  # call 1's words, call 2's, the note, call 3's
    assert said.index(LOST_RESULT) < said.index(AGAIN) < said.index(note["content"])
    assert sent[-1] == {"role": "user", "content": "Still there?"}


async def test_a_resume_that_loads_after_the_first_turn_goes_before_this_calls_turns(
    openai_server, pg_server
):
    """Frames never wait for the store: the resume joins at the first turn after it has
    loaded, and the dropped call's messages go before this call's own (they are older)."""
    dsn = pg_server.create_database("resume_late")
    openai_server.handler = handler
    await call(openai_server, dsn, "room-1", CALL_1, end="cancel")
    dropped = await in_view_at_end(dsn, "alice")
    locker = await asyncpg.connect(dsn)
    lock = locker.transaction()
    await lock.start()
    await locker.execute("LOCK TABLE caller_facts IN ACCESS EXCLUSIVE MODE")

    released: list[bool] = []

    async def release_after_the_first_turn(body: dict) -> Reply:
        if not released:
            released.append(True)
            await lock.rollback()  # the caller's memory can load now
        return handler(body)

    openai_server.handler = release_after_the_first_turn
    openai_server.requests.clear()
    try:
        await call(openai_server, dsn, "room-2", [AGAIN, "Are you there?"], messages=50)
    finally:
        await locker.close()
    first, second = (r["messages"] for r in openai_server.chat_requests[:2])
    assert first == [SYSTEM, {"role": "user", "content": AGAIN}]  # the store was locked
    assert_paired(second)
    (note,) = notices(second)
    at = second.index(note)
    assert second[at - len(dropped) : at - 1] == dropped[:-1]
    assert second[at - 1] == {**dropped[-1], "content": LOST_RESULT}
    assert second[at + 1 :] == [
        {"role": "user", "content": AGAIN},
        {"role": "assistant", "content": "Sure."},
        {"role": "user", "content": "Are you there?"},
    ]


async def test_a_dropped_call_without_a_summary_resumes_with_the_earlier_calls_summary(
    openai_server, tmp_path
):
    db = str(tmp_path / "memory.db")
    openai_server.handler = handler
    await call(openai_server, db, "room-0", CALL_1[:-1], end="end")  # summarized, a goodbye
    # call 1 loads no memory (resume=False) and never summarizes: no summary at its drop
    said = ["Me again, about the same order.", "Can you look up the order?"]
    await call(openai_server, db, "room-1", said, end="cancel", messages=50, resume=False)
    dropped = await in_view_at_end(db, "alice")
    openai_server.requests.clear()
    await call(openai_server, db, "room-2", [AGAIN])
    sent = first_request(openai_server)
    assert_paired(sent)
    assert sent[1]["content"].startswith("Conversation summary: From earlier calls with this")
    assert "order number is 4417" in sent[1]["content"]  # call 0's summary
    assert sent[2 : 2 + len(dropped) - 1] == dropped[:-1]  # call 1's words, verbatim
    assert len(notices(sent)) == 1 and sent[-1] == {"role": "user", "content": AGAIN}
