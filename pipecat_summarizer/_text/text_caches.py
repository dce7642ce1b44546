"""The process's caches keyed by conversation text, emptied together when a caller is forgotten.

The pure rules that read message text again turn after turn (recall's selection, query and
superseded values, the vocabulary's stems, the correction rule, the summary's items) keep
``functools.lru_cache``s keyed by that text. Each returns only what its input holds (no
caller reads another's entry), but a forgotten caller's words would stay in the process's
memory until evicted. :func:`text_cache` is ``lru_cache`` that also registers the cache;
:func:`empty_text_caches` empties every registered one: the store calls it when this
process runs a forget (after its deletes commit) and when it notices another process's
forget (``MemoryStore.noticed_forget``). The caches hold every caller's entries together
and know no caller, so all of them go: the other calls read their texts again once (tens of
microseconds a message), and a forget is rare.

Only caches keyed by conversation text belong here: one keyed by the application's own
text (its system prompt) holds no caller's words.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")

#: Every cache made by :func:`text_cache`, in the order they were made.
_CACHES: list[functools._lru_cache_wrapper[Any]] = []


def text_cache(
    maxsize: int,
) -> Callable[[Callable[..., T]], functools._lru_cache_wrapper[T]]:
    """``functools.lru_cache(maxsize=maxsize)``, registered so that a forget empties it
    (:func:`empty_text_caches`). Use it on functions whose arguments are conversation text."""

    def register(function: Callable[..., T]) -> functools._lru_cache_wrapper[T]:
        cached = functools.lru_cache(maxsize=maxsize)(function)
        _CACHES.append(cached)
        return cached

    return register


def text_caches() -> tuple[functools._lru_cache_wrapper[Any], ...]:
    """The registered caches (each an ``lru_cache`` wrapper: ``cache_info()``,
    ``cache_clear()``, ``__wrapped__``)."""
    return tuple(_CACHES)


def empty_text_caches() -> None:
    """Empty every cache keyed by conversation text (a forget: see the module's docstring),
    and the ``re`` module's cache of patterns (recall's ``gather.clip`` searches a long hit
    for the first letters of the query's words, a pattern made of the caller's words).
    Synchronous and quick: nothing is recomputed until read again."""
    for cache in _CACHES:
        cache.cache_clear()
    re.purge()  # compiled module-level patterns are held by their modules: untouched


__all__ = ["empty_text_caches", "text_cache", "text_caches"]
