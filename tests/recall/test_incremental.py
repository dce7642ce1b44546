"""Recall's per-turn work follows what changed: each context message's text is read once
while it stays in the context, not once per turn (at 5,000 messages the whole-context read
cost a frame 160 ms). The incremental statistics answer as the pure functions do."""

from __future__ import annotations

import json
import random

from pipecat.processors.aggregators.llm_context import LLMContext
from pipecat.tests.utils import run_test

from pipecat_summarizer import ContextSummarizer, OpenAISummarizer
from pipecat_summarizer._recall.query import (
    ContextTerms,
    common_terms,
    instruction_names,
    rare_terms,
)
from pipecat_summarizer._recall.select import context_view, make_view
from pipecat_summarizer._recall.step import RecallStep
from pipecat_summarizer._text.messages import spoken_text
from pipecat_summarizer._text.vocabulary import normalize_verbatim
from pipecat_summarizer.params import MemoryParams, RecallParams, WriterParams
from pipecat_summarizer.store import SQLiteMemoryStore
from pipecat_summarizer.store.records import ArchivedMessage
from tests.support.openai_server import Reply
from tests.support.pipeline_utils import build, cfg, main_llm, turns

T0 = 1_700_000_000.0
CONTEXT = 2_000


class Reads(dict):
    """A context message that counts how often its content is read."""

    count = 0

    def get(self, key, default=None):
        if key == "content":
            Reads.count += 1
        return super().get(key, default)

    def __getitem__(self, key):
        if key == "content":
            Reads.count += 1
        return super().__getitem__(key)


def _filler(n: int, make=dict) -> list:
    topics = ["weather", "parking", "breakfast", "taxi", "museum", "laundry", "wifi"]
    out = [make(role="system", content="You are Ava, a concierge; the caller is John.")]
    for i in range(n - 1):
        role = "user" if i % 2 == 0 else "assistant"
        out.append(make(role=role, content=f"Message {i} about the {topics[i % 7]} today."))
    return out


def _archived(call: str, pos: int, text: str, role: str = "user") -> ArchivedMessage:
    return ArchivedMessage(
        call_id=call,
        position=pos,
        role=role,
        content=text,
        message_json=json.dumps({"role": role, "content": text}),
        compaction=1,
        turn=pos // 2,
        at=T0 + pos,
        user_id="alice",
    )


async def test_a_turn_reads_only_the_messages_new_since_the_last(tmp_path):
    store = SQLiteMemoryStore(tmp_path / "m.db")
    try:
        await store.write(
            [
                _archived("old", 0, "Our hotel is the Grand Budapest, room 12."),
                _archived("old", 1, "Noted: the Grand Budapest, room 12.", role="assistant"),
                _archived("old", 2, "Our train to Vienna leaves Friday at nine."),
            ]
        )
        step = RecallStep(
            store, RecallParams(latency_budget_s=30.0), call_id="now", user_id="alice"
        )
        context = _filler(CONTEXT, Reads)
        context.append(Reads(role="user", content="Which hotel in Budapest did we book?"))
        Reads.count = 0
        placed = await step.prepare(lambda: context, lambda: [])
        first = Reads.count
        assert placed is not None  # recalled: the view and rare-word checks ran too
        context = [
            *context,  # as a turn without its recalled block (replaced each turn)
            Reads(role="assistant", content="The Grand Budapest."),
            Reads(role="user", content="And the train to Vienna, when does it leave?"),
        ]
        Reads.count = 0
        again = await step.prepare(lambda: context, lambda: [])
        second = Reads.count
    finally:
        await store.close()
    assert again is not None and "Vienna" in str(again[-2]["content"])
    assert first >= CONTEXT  # the first turn reads the context once
    assert second <= 12  # the next reads the two new messages (a few times), not 2,000
    assert step.messages_read <= CONTEXT + 3  # each message once


async def test_recall_reads_each_context_message_once_through_a_pipeline(openai_server, tmp_path):
    openai_server.handler = lambda body: Reply("Sure thing.")
    store = SQLiteMemoryStore(tmp_path / "m.db")
    context = LLMContext(messages=_filler(CONTEXT))
    summarizer = OpenAISummarizer(base_url=openai_server.base_url, model="cheap")
    processor = ContextSummarizer(
        context=context,
        config=cfg(messages=100_000, keep=2),  # nothing is summarized: the context only grows
        summarizer=summarizer,
        store=store,
        call_id="call-1",
        memory=MemoryParams(writer=WriterParams(flush_interval_s=0.05)),
        recall=RecallParams(latency_budget_s=5.0),
    )
    asked = ["Which hotel did we book?", "What about the museum?", "Is the taxi booked?"]
    try:
        await run_test(
            build(context, processor, main_llm(openai_server.base_url)),
            frames_to_send=turns(asked, gap=0.2),
        )
    finally:
        await summarizer.aclose()
        await store.close()
    step = processor.recall_step
    assert step is not None and step.turns == len(asked)
    # the 2,000 messages once, then per turn what is new (the caller's message, the reply,
    # a recalled block): not 2,000 more per turn
    assert CONTEXT <= step.messages_read <= CONTEXT + 4 * len(asked)


def _pure(messages: list, query: str, terms: list[str], extra: list[str]):
    texts = [spoken_text(m) for m in messages]
    view = make_view([*texts, *extra])
    return (
        common_terms(texts),
        instruction_names(messages),
        rare_terms(query, terms, texts),
        view.text,
        view,
    )


def test_the_kept_statistics_answer_as_the_pure_functions_over_any_edit():
    rng = random.Random(7)
    vocab = ["Gina", "hotel", "Marquis", "room", "418", "train", "Lisbon", "jazz", "ok", "Mozart"]
    query = "Which Marquis room in Lisbon, and the Mozart concert?"
    qterms = ["marqui", "room", "lisbon", "mozart", "concert"]
    kept = ContextTerms()
    messages: list = [{"role": "system", "content": "You are Ava; the caller is Gina."}]
    probe = [*vocab, *qterms, "gina", "hotel", "zzz"]
    for step in range(300):
        op = rng.random()
        text = " ".join(rng.choice(vocab) for _ in range(rng.randint(0, 6)))
        if op < 0.5:  # a new message
            messages.append({"role": rng.choice(["user", "assistant"]), "content": text})
        elif op < 0.6 and len(messages) > 3:  # a summary spliced over the oldest messages
            cut = rng.randint(1, len(messages) - 1)
            messages = [messages[0], {"role": "user", "content": f"Summary: {text}"}] + messages[
                cut:
            ]
        elif op < 0.7 and len(messages) > 2:  # a block placed, or taken out, mid-context
            i = rng.randint(1, len(messages) - 1)
            if rng.random() < 0.5:
                messages = [*messages[:i], {"role": "user", "content": text}, *messages[i:]]
            else:
                messages = [*messages[:i], *messages[i + 1 :]]
        elif op < 0.8:  # a tool result written into its placeholder in place
            tools = [m for m in messages if m.get("role") == "tool"]
            if tools:
                rng.choice(tools)["content"] = text
            else:
                messages.append({"role": "tool", "tool_call_id": "t", "content": "IN_PROGRESS"})
        elif op < 0.85:  # new instructions
            messages.append({"role": "developer", "content": f"The caller is {text}."})
        else:  # the same context again, as a new list
            messages = list(messages)
        kept.update(messages)
        common, names, rare, text_view, view = _pure(messages, query, qterms, ["pinned: jazz"])
        mine = context_view(kept, ["pinned: jazz"])
        assert kept.names() == names, step
        assert kept.rare(query, qterms) == rare, step
        for term in probe:
            t = term.lower()
            assert (t in kept.common()) == (t in common), (step, t)
            assert (t in mine.terms) == (t in view.terms), (step, t)
        # the same verbatim answers: any piece of a message, a word or two, or none
        assert kept.normalized() == [normalize_verbatim(spoken_text(m)) for m in messages]
        for m in rng.sample(messages, min(4, len(messages))):
            norm = normalize_verbatim(spoken_text(m))
            a, b = sorted(rng.randint(0, len(norm)) for _ in range(2))
            for needle in (norm[a:b].strip(), norm, f"{norm} ok", "hotel room", "jazz"):
                if needle:
                    said = needle in mine.text or mine.says is not None and mine.says(needle)
                    assert said == (needle in text_view), (step, needle)
