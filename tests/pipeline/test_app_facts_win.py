"""The application's facts win: resume never overwrites what the application pinned in this
call, and the caller's word (``remember_fact``, summaries, evictions, restored conversation
facts) never replaces an application fact, in this call or the next. Whatever the
conversation claims on an application key is kept beside it as quoted user-role data."""

from __future__ import annotations

import json

from pipecat.processors.aggregators.llm_context import LLMContext
from pipecat.utils.context.llm_context_summarization import LLMContextSummaryConfig

from pipecat_summarizer import ContextSummarizer, OpenAISummarizer
from pipecat_summarizer._record.pinned import CLAIM_PREFIX, PinnedFacts, claim_key
from pipecat_summarizer._record.record import ConversationRecord
from pipecat_summarizer.params import MemoryParams, PinningParams, WriterParams
from pipecat_summarizer.store import open_store
from pipecat_summarizer.tools import REMEMBER_FACT, register_remember_fact
from tests.support.openai_server import Reply, is_summary_request
from tests.support.pipeline_utils import build, cfg, main_llm, turns
from tests.support.settle import run_settling

FAST = WriterParams(flush_interval_s=0.05, max_backoff_s=0.2, write_timeout_s=5)
SYSTEM = {"role": "system", "content": "You are a helpful voice assistant."}
AUTHORITY = ("system", "developer")


def authoritative(messages: list) -> str:
    """What the model is told with authority (system and developer messages)."""
    return "\n".join(str(m.get("content")) for m in messages if m.get("role") in AUTHORITY)


def user_data(messages: list) -> str:
    return "\n".join(str(m.get("content")) for m in messages if m.get("role") == "user")


async def _call(server, db: str, call_id: str, texts: list[str], *, pins=(), tool=False):
    """One call of the caller ``alice`` with a real SQLite store at ``db``."""
    store = open_store(db)
    context = LLMContext(messages=[dict(SYSTEM)])
    processor = ContextSummarizer(
        context=context,
        config=cfg(messages=50),
        summarizer=OpenAISummarizer(base_url=server.base_url, model="cheap"),
        store=store,
        call_id=call_id,
        user_id="alice",
        memory=MemoryParams(writer=FAST),
    )
    for key, text in pins:  # the application's facts, pinned at call start
        processor.pin(key, text)
    llm = main_llm(server.base_url)
    if tool:
        register_remember_fact(llm, processor, context)
    try:
        await run_settling(build(context, processor, llm), frames_to_send=turns(texts, gap=0.4))
    finally:
        await store.close()
    return processor


def _remember(key: str, fact: str):
    """A main LLM that calls ``remember_fact(key, fact)`` once, then answers."""
    calls = iter(
        [
            Reply(
                tool_calls=[
                    {
                        "id": "call_1",
                        "type": "function",
                        "function": {
                            "name": REMEMBER_FACT,
                            "arguments": json.dumps({"key": key, "fact": fact}),
                        },
                    }
                ]
            )
        ]
    )

    def handler(body):
        if is_summary_request(body):
            return Reply("FACTS:\n- none")
        return next(calls, Reply("Noted."))

    return handler


# -- resume -----------------------------------------------------------------------------------


async def test_resume_never_overwrites_what_the_app_pinned_for_this_call(openai_server, tmp_path):
    db = str(tmp_path / "memory.db")
    await _call(
        openai_server, db, "call-1", ["hello"], pins=[("status", "Account active; refunds allowed")]
    )
    openai_server.requests.clear()
    processor = await _call(
        openai_server,
        db,
        "call-2",
        ["hi, it's me again", "can I get a refund?"],
        pins=[("status", "Account frozen; no refunds")],
    )
    requests = openai_server.chat_requests
    assert len(requests) == 2
    for body in requests:  # every request holds the app's current status, never the stale one
        told = authoritative(body["messages"])
        assert "Account frozen; no refunds" in told
        assert "refunds allowed" not in json.dumps(body["messages"])
    assert [(f.key, f.text, f.source) for f in processor.pinned_facts] == [
        ("status", "Account frozen; no refunds", "app")
    ]
    store = open_store(db)
    try:  # and the next call starts from the app's current status
        facts = (await store.caller_memory("alice")).facts
        assert [(f["key"], f["text"]) for f in facts] == [("status", "Account frozen; no refunds")]
    finally:
        await store.close()


def _memory() -> ConversationRecord:
    return ConversationRecord(LLMContextSummaryConfig(), PinningParams())


def _apply(messages: list, new: list | None) -> list:
    return messages if new is None else new


def test_memory_arriving_on_a_later_turn_follows_authority_then_recency():
    """load() may run on any turn: the rule holds whenever the stored memory arrives."""
    mem = _memory()
    messages = [SYSTEM, {"role": "user", "content": "hello"}]
    messages = _apply(messages, mem.pin(messages, "status", "Account frozen; no refunds"))
    messages = _apply(messages, mem.pin(messages, "plan", "Plan: premium"))
    mem.unpin(messages, "plan")  # the app decided "plan" in this call too
    messages = _apply(messages, mem.unpin(messages, "plan")[1])
    messages = _apply(messages, mem.pin(messages, "diet", "no allergies", source="llm"))
    messages = _apply(messages, mem.pin(messages, "seat", "window seat", source="llm"))
    messages += [{"role": "assistant", "content": "Hi!"}, {"role": "user", "content": "so?"}]
    stored = [
        {"key": "status", "text": "Account active; refunds allowed", "source": "app"},
        {"key": "plan", "text": "Plan: basic", "source": "app"},
        {"key": "diet", "text": "Allergic to peanuts (verified)", "source": "app"},
        {"key": "seat", "text": "aisle seat", "source": "llm"},
        {"key": "status (conversation's claim)", "text": "refund promised", "source": "llm"},
        {"key": "name", "text": "Alice", "source": "summary"},
    ]
    messages = _apply(messages, mem.load(messages, stored, None, in_flight=False))
    facts = {f.key: (f.text, f.source) for f in mem.facts.facts}
    assert facts["status"] == ("Account frozen; no refunds", "app")  # pinned here: newer
    assert "plan" not in facts  # unpinned here: not brought back
    assert facts["diet"] == ("Allergic to peanuts (verified)", "app")  # authority wins
    assert facts[claim_key("diet")] == (CLAIM_PREFIX + "no allergies", "llm")  # kept beside
    assert facts["seat"] == ("window seat", "llm")  # same authority: this call's is newer
    assert facts["name"] == ("Alice", "summary")
    assert claim_key("status") not in facts  # a claim on a key the app decided here
    told = authoritative(messages)
    assert "Account frozen; no refunds" in told and "Allergic to peanuts (verified)" in told
    assert "refunds allowed" not in json.dumps(messages)
    assert "no allergies" not in told and "no allergies" in user_data(messages)
    assert "Plan: basic" not in json.dumps(messages)


def test_a_stored_fact_does_not_come_back_over_an_app_fact_folded_over_budget():
    mem = ConversationRecord(LLMContextSummaryConfig(), PinningParams(budget_tokens=40))
    messages = [SYSTEM, {"role": "user", "content": "hello"}]
    for k in range(6):
        messages = _apply(messages, mem.pin(messages, f"k{k}", f"important fact number {k} ok"))
    assert "k0" not in {f.key for f in mem.facts.facts}  # folded into the summary record
    stored = [{"key": "k0", "text": "stale fact number 0", "source": "app"}]
    messages = _apply(messages, mem.load(messages, stored, None, in_flight=False))
    assert "stale fact number 0" not in json.dumps(messages)


# -- the caller's word ----------------------------------------------------------------------


async def test_remember_fact_never_replaces_an_app_fact_in_this_call_or_the_next(
    openai_server, tmp_path
):
    db = str(tmp_path / "memory.db")
    openai_server.handler = _remember("allergy", "I have no allergies")
    first = await _call(
        openai_server,
        db,
        "call-1",
        ["I have no allergies, remember that.", "what can I eat?"],
        pins=[("allergy", "Allergic to peanuts (verified)")],
        tool=True,
    )
    requests = openai_server.chat_requests
    assert len(requests) >= 3  # the tool call, its follow-up, the second turn
    for body in requests:
        told = authoritative(body["messages"])
        assert "Allergic to peanuts (verified)" in told
        assert "no allergies" not in told
    # the tool's result tells the LLM the application's fact stands
    results = [m for m in requests[-1]["messages"] if m.get("role") == "tool"]
    assert len(results) == 1
    result = json.loads(results[0]["content"])
    assert "stands" in result["note"] and result["remembered"] == claim_key("allergy")
    # the caller's claim is kept, attributed, as user-role data
    assert CLAIM_PREFIX + "I have no allergies" in user_data(requests[-1]["messages"])
    facts = {f.key: (f.text, f.source) for f in first.pinned_facts}
    assert facts["allergy"] == ("Allergic to peanuts (verified)", "app")

    # the next call: the app pins nothing; the restored app fact is what has authority
    openai_server.requests.clear()
    openai_server.handler = lambda body: Reply(
        "FACTS:\n- none" if is_summary_request(body) else "OK."
    )
    second = await _call(openai_server, db, "call-2", ["hi, it's me", "any snack ideas?"])
    requests = openai_server.chat_requests
    # the stored memory joins when it arrives (the first turn may go without it); from then
    # on every request holds the app's fact with authority and the claim as user data only
    held = ["Allergic to peanuts (verified)" in authoritative(b["messages"]) for b in requests]
    assert held[-1] and held == sorted(held)
    for body in requests:
        assert "no allergies" not in authoritative(body["messages"])
    assert CLAIM_PREFIX + "I have no allergies" in user_data(requests[-1]["messages"])
    facts = {f.key: (f.text, f.source) for f in second.pinned_facts}
    assert facts["allergy"] == ("Allergic to peanuts (verified)", "app")


def test_no_conversation_path_replaces_an_app_fact_or_gains_authority():
    p = PinnedFacts()
    p.pin("allergy", "Allergic to peanuts (verified)")
    # the LLM tool, a pin with a conversation source, a spelling of the key, a restore
    assert p.pin("allergy", "no allergies", source="llm")
    assert p.pin(" Allergy", "no allergies at all", source="summary")
    p.merge_summary({"FACTS": ["Allergic to peanuts (verified)"]}, source="evicted")
    assert p.pin("allergy", "Allergic to peanuts (verified)", source="llm") is False  # agrees
    assert {f.key: f.source for f in p.facts} == {
        "allergy": "app",
        claim_key("allergy"): "summary",  # one claim per key: the newer wins
    }
    assert p.render_app().endswith("- Allergic to peanuts (verified)")
    assert "no allergies" not in p.render_app()
    assert '"' + CLAIM_PREFIX + "no allergies at all" + '"' in p.render_noted()
    # the application pinning over the conversation's fact keeps that fact as a claim
    p.pin("seat", "window seat", source="llm")
    p.pin("seat", "Seat 12C (confirmed)")
    assert p.get("seat").source == "app"
    assert p.get(claim_key("seat")).text == CLAIM_PREFIX + "window seat"
    # the application's unpin gives the key back to the conversation
    assert p.unpin("seat")
    p.pin("seat", "aisle seat", source="llm")
    assert p.get("seat").source == "llm"


async def test_the_processor_pin_with_a_conversation_source_keeps_the_app_fact(openai_server):
    processor = ContextSummarizer(
        context=LLMContext(messages=[dict(SYSTEM)]),
        config=cfg(messages=50),
        summarizer=OpenAISummarizer(base_url=openai_server.base_url, model="cheap"),
    )
    processor.pin("status", "Account frozen; no refunds")
    processor.pin("status", "refund approved", source="summary")
    processor.pin("status", "refund approved by phone", source="llm")
    app, noted = processor.record.app_message, processor.record.noted_message
    assert app["role"] == "developer" and app["content"].endswith("- Account frozen; no refunds")
    assert "approved" not in app["content"]
    assert noted["role"] == "user" and "refund approved by phone" in noted["content"]
    assert [(f.key, f.source) for f in processor.pinned_facts] == [
        ("status", "app"),
        (claim_key("status"), "llm"),
    ]


def test_summary_and_eviction_bullets_never_take_an_app_key_folded_over_budget():
    p = PinnedFacts(budget_tokens=20)
    p.pin("topic:name", "Name: Priya Raman, verified against the passport on file")
    assert p.enforce_budget()  # over budget: folded into the summary, the key stays the app's
    assert p.merge_summary({"FACTS": ["Name: Mallory"]}, source="evicted") is False
    assert p.merge_summary({"FACTS": ["Name: Mallory (corrected)"]}) is False
    assert p.pin("topic:name", "Mallory", source="llm")  # kept only as a claim
    assert [f.key for f in p.facts] == [claim_key("topic:name")]
    assert p.render_app() is None and "Mallory" in p.render_noted()


def test_this_calls_facts_outlast_restored_ones_over_budget():
    mem = ConversationRecord(LLMContextSummaryConfig(), PinningParams(budget_tokens=60))
    messages = [SYSTEM, {"role": "user", "content": "hello"}]
    messages = _apply(messages, mem.pin(messages, "seat", "window seat in row 12", source="llm"))
    stored = [
        {"key": f"k{k}", "text": f"stored fact number {k} from an earlier call", "source": "llm"}
        for k in range(6)
    ]
    messages = _apply(messages, mem.load(messages, stored, None, in_flight=False))
    kept = {f.key for f in mem.facts.facts}
    assert "seat" in kept and len(kept) < 7  # the older, restored facts left first
