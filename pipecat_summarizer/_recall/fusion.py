"""Semantic recall's pure rules: the messages closest in meaning, and one ranking of the
lexical and the semantic hits.

:func:`top_matches` picks the best rows of the cosines; :func:`fuse` puts the archive's
lexical hits first and the hits found by meaning only after them.
:class:`~pipecat_summarizer._recall.semantic.SemanticIndex` computes the cosines.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from pipecat_summarizer._text.messages import ArchivedText


@dataclass(frozen=True)
class SemanticHit(ArchivedText):
    """An archived message in the fused ranking (the fields recall reads of a hit).

    Parameters:
        call_id / position / turn / at / role / content: The message (``ArchivedText``'s).
        similarity: Cosine similarity with the query (``None``: not embedded yet).
        lexical_rank: Its place in the lexical hits (``None``: found by meaning only).
    """

    similarity: float | None = None
    lexical_rank: int | None = None


def top_matches(sims: np.ndarray, k: int, min_similarity: float) -> list[tuple[int, float]]:
    """The best rows of ``sims`` (the cosine of each embedded message with the query):
    ``(row, cosine)``, best first, at most ``k``, each at least ``min_similarity``; ties go
    to the later row (the more recent message)."""
    sims = np.asarray(sims).reshape(-1)
    if k <= 0 or len(sims) == 0:
        return []
    k = min(k, len(sims))
    # every row at least the k-th best value (argpartition: no full sort; ties at the cut
    # all kept), then sorted: best first, the later row first on ties
    kth = np.partition(sims, len(sims) - k)[len(sims) - k]
    rows = np.flatnonzero(sims >= max(kth, np.float32(min_similarity)))
    ranked = sorted(rows.tolist(), key=lambda r: (-float(sims[r]), -r))[:k]
    return [(r, float(sims[r])) for r in ranked if float(sims[r]) >= min_similarity]


def fuse(
    lexical: Sequence[Any],
    semantic: Sequence[SemanticHit],
    similarity: Mapping[tuple[str, int], float],
) -> list[SemanticHit]:
    """The lexical and the semantic rankings as one list of hits, best first.

    Lexical hits come first, in the archive's order, each with its similarity when its
    message is embedded (recall then keeps one that shares too few of the query's words but
    means the same); then the messages found by meaning only, best first. Each message once.

    Measured on LoCoMo (benchmarks/README.md), this "lexical first" order beat reciprocal
    rank fusion: a shared rare word (a name, a number) is a stronger signal than the static
    embeddings' cosine, and RRF let near-misses displace exact hits.

    Args:
        lexical: The archive's hits (``SearchHit`` or anything with its fields).
        semantic: Hits by meaning, best first (see :func:`top_matches`).
        similarity: ``(call_id, position) -> cosine`` of the embedded messages.
    """
    out: list[SemanticHit] = []
    seen: set[tuple[str, int]] = set()
    for rank, hit in enumerate(lexical):
        key = (str(getattr(hit, "call_id", "")), int(getattr(hit, "position", 0)))
        if key in seen:
            continue
        seen.add(key)
        out.append(
            SemanticHit(
                call_id=key[0],
                position=key[1],
                turn=int(getattr(hit, "turn", 0)),
                at=float(getattr(hit, "at", 0.0) or 0.0),
                role=str(getattr(hit, "role", "") or ""),
                content=str(getattr(hit, "content", "") or ""),
                similarity=similarity.get(key),
                lexical_rank=rank,
            )
        )
    for hit in semantic:
        key = (hit.call_id, hit.position)
        if key not in seen:
            seen.add(key)
            out.append(hit)
    return out


__all__ = ["SemanticHit", "fuse", "top_matches"]
