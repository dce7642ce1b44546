"""Semantic recall's model: unit-length vectors for texts, and WordLlama, the model it uses
unless the params name another.

:class:`Embedder` is what semantic recall needs of a model; :class:`WordLlamaEmbedder` is the
default (the ``semantic`` extra: ``pip install 'pipecat-summarizer[semantic]'``): static token
embeddings shipped inside the wheel, numpy on the CPU, no network. :func:`embedder_for` builds
it once per process, where it is used (the params hold settings only);
:func:`load_semantic_model` loads it at the application's start. The index that embeds the
caller's archive is :class:`~pipecat_summarizer._recall.semantic.SemanticIndex`.
"""

from __future__ import annotations

import importlib.util
import logging
import threading
from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

import numpy as np

from pipecat_summarizer.errors import SEMANTIC_EXTRA_HINT as EXTRA_HINT
from pipecat_summarizer.params import SemanticRecallParams

#: Longest text embedded, in characters (a query or message beyond it is cut: the embedding
#: is a mean of token vectors, and this bounds the work a turn does on the event loop).
MAX_EMBED_CHARS = 2000


@runtime_checkable
class Embedder(Protocol):
    """What semantic recall needs of a model: unit-length float32 vectors for texts."""

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """One row per text, each of unit length (a zero row for a text with no token)."""
        ...


def unit_rows(vectors: np.ndarray) -> np.ndarray:
    """``vectors`` as float32 rows of unit length (zero rows stay zero)."""
    v = np.nan_to_num(np.asarray(vectors, dtype=np.float64), nan=0.0, posinf=0.0, neginf=0.0)
    if v.ndim == 1:
        v = v[None, :]
    # in float64: a float32 row of tiny values (1e-22) squares to subnormals and its norm is off
    norms = np.linalg.norm(v, axis=1, keepdims=True)
    norms[norms == 0] = 1.0
    return (v / norms).astype(np.float32)


class WordLlamaEmbedder:
    """WordLlama's default model (``l2_supercat``, 256 dimensions), loaded from the files in
    its wheel. The model loads on first use (about a second), once per embedder: share one
    embedder between calls.

    ``WordLlama.load()`` looks for the bundled tokenizer in a folder the wheel does not
    have and then tries to download it from Hugging Face, so the two files are opened here
    directly: nothing is ever downloaded.

    Args:
        dim: Dimensions kept (the model is trained so that a prefix of its vectors works:
            64, 128 or 256).

    Raises:
        ImportError: If the ``semantic`` extra is not installed.
    """

    def __init__(self, dim: int = 256):
        """Check the package is installed (the model loads on first use)."""
        if importlib.util.find_spec("wordllama") is None:
            raise ImportError(EXTRA_HINT)
        if dim not in (64, 128, 256):
            raise ValueError("semantic.dim must be 64, 128 or 256")
        self.dim = dim
        self._model: Any = None
        self._lock = threading.Lock()

    @property
    def loaded(self) -> bool:
        """Whether the model is in memory."""
        return self._model is not None

    def load(self) -> None:
        """Load the model now (blocking: call it from a worker thread)."""
        with self._lock:
            if self._model is None:
                self._model = _load_wordllama(self.dim)

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Unit-length vectors of ``texts`` (loads the model first if needed)."""
        if self._model is None:
            self.load()
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        cut = [t[:MAX_EMBED_CHARS] for t in texts]
        return unit_rows(self._model.embed(cut))


def _load_wordllama(dim: int) -> Any:
    from importlib.resources import files

    # wordllama.inference calls logging.basicConfig(level=INFO) when imported, which would
    # turn on every library's INFO logging in the application: undo it.
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    try:
        from safetensors import safe_open
        from tokenizers import Tokenizer
        from wordllama.inference import WordLlamaInference
    except ImportError as e:
        raise ImportError(EXTRA_HINT) from e
    finally:
        for h in list(root.handlers):
            if h not in handlers:
                root.removeHandler(h)
        root.setLevel(level)
    package = files("wordllama")
    tokenizer = Tokenizer.from_file(
        str(package / "tokenizers" / "l2_supercat_tokenizer_config.json")
    )
    weights = package / "weights" / "l2_supercat_256.safetensors"
    with safe_open(str(weights), framework="np", device="cpu") as f:
        table = f.get_tensor("embedding.weight")[:, :dim]
    return WordLlamaInference(table, tokenizer)


_shared: WordLlamaEmbedder | None = None
_shared_lock = threading.Lock()


def embedder_for(semantic: SemanticRecallParams) -> Embedder:
    """The model ``semantic`` names: its own ``embedder``, or else WordLlama's, one per process
    (built here, where it is used: the params hold settings only). Cheap: the model itself
    loads on first use, or with :func:`load_semantic_model`."""
    if semantic.embedder is not None:
        return semantic.embedder
    global _shared
    with _shared_lock:
        if _shared is None:
            _shared = WordLlamaEmbedder()
        return _shared


def load_semantic_model(semantic: SemanticRecallParams | None = None) -> None:
    """Load the model semantic recall uses now (blocking, about a second; nothing is
    downloaded): at the application's start, so a call's first turns need not wait for it
    (otherwise the first call loads it in a worker thread, and its turns go lexical only until
    then).

    Args:
        semantic: The params whose model to load; ``None`` for the default (WordLlama, one
            per process, shared by every call whose params name no ``embedder``).

    Raises:
        ImportError: If the ``semantic`` extra is not installed.
    """
    load = getattr(embedder_for(semantic or SemanticRecallParams()), "load", None)
    if callable(load):
        load()


class SemanticRecall(SemanticRecallParams):
    """The 0.2 name of :class:`SemanticRecallParams`, with its ``load()`` (one release; the
    package's ``SemanticRecall`` warns). ``load()`` is :func:`load_semantic_model`."""

    def load(self) -> None:
        """Load the model now (deprecated: :func:`load_semantic_model`)."""
        load_semantic_model(self)


__all__ = [
    "EXTRA_HINT",
    "MAX_EMBED_CHARS",
    "Embedder",
    "SemanticRecall",
    "WordLlamaEmbedder",
    "embedder_for",
    "load_semantic_model",
    "unit_rows",
]
