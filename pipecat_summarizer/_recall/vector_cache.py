"""The process's cache of semantic vectors, and how a forget reaches it from anywhere.

:func:`cached_vectors` keeps each model's recent vectors by a hash of the text, so a
returning caller's archive embedded in their earlier call is not embedded again; each vector
knows the callers whose messages it embeds. A forget drops them (:func:`forget_vectors`):
this process's own forget tells it at once (``store.base.on_forget``); another process's
forget (an admin tool, another worker) is read from the store's tombstones by
:func:`sweep_tombstones`, at most every :data:`TOMBSTONE_CHECK_S` per store whatever the
number of calls: started by a semantic index's kick (a call's start, each turn) as a task of
its own, then on a timer while any index that reads the store is open, and run after each
refresh of an index. A process with no call open sweeps again at the next call's start.

The sweep asks the store about the callers the cache holds vectors of, by the hash the
tombstones store (:func:`~pipecat_summarizer.store.records.user_hash`), in batches of
:data:`SWEEP_BATCH` (one indexed read each: the tombstone table's primary key), and drops a
caller's vectors when their tombstone is one it has not seen: by its value, never by a
comparison of clocks, so no clock skew between processes hides one. A tombstone seen for the
first time drops them too (it may predate the vectors, or not: the cost is one embedding
more). No schema change, and a read-only store is read the same way.
"""

from __future__ import annotations

import asyncio
import hashlib
import threading
import time
import weakref
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from loguru import logger

from pipecat_summarizer.store.base import error_reason, on_forget
from pipecat_summarizer.store.records import user_hash

#: Vectors kept per model across calls in this process (~1.5 KB each with MiniLM: ~30 MB):
#: a returning caller's archive, embedded during their earlier call, is not embedded again.
VECTOR_CACHE_ROWS = 20_000

#: Least time between two reads of one store's tombstones by this process (seconds): a forget
#: run by another process leaves this process's cache within this long (plus one sweep's
#: reads) while a semantic index that reads the store is open here; otherwise at the next
#: call's start.
TOMBSTONE_CHECK_S = 5.0

#: Callers asked about per read: a read holds a SQLite store's one thread for ~1-2 ms.
SWEEP_BATCH = 500

#: Least wait between two sweeps on the timer (seconds; ``TOMBSTONE_CHECK_S`` is the wait).
TIMER_FLOOR_S = 0.05
#: How long a refresh waits for the sweep it starts (seconds): a slower tombstone read (a
#: locked table, a stalling store) goes on alone, and the call's next words are indexed.
SWEEP_WAIT_S = 1.0

#: How long after a caller's forget is seen the sweep keeps dropping their vectors (seconds):
#: a chunk of their archive read before the forget and embedded after it (by a call here
#: that has not seen the forget) is put in the cache after the first drop.
REDROP_S = 60.0

#: Tombstones remembered per store for callers out of the cache (a returning caller forgotten
#: long ago keeps the cache's use); past it, only the cached callers' are kept.
SEEN_MOST = 100_000


def unit_rows(vectors: np.ndarray) -> np.ndarray:
    """``vectors`` as float32 rows of unit length (zero rows stay zero)."""
    v = np.nan_to_num(np.asarray(vectors, dtype=np.float64), nan=0.0, posinf=0.0, neginf=0.0)
    if v.ndim == 1:
        v = v[None, :]
    # in float64: a float32 row of tiny values (1e-22) squares to subnormals and its norm is off
    norms = np.linalg.norm(v, axis=1, keepdims=True)
    norms[norms == 0] = 1.0
    return (v / norms).astype(np.float32)


class _VectorCache:
    """The most recent ``most`` vectors of one model, by a hash of the text, each with the
    callers whose messages it embeds (so a forget drops them: :func:`forget_vectors`).

    Filled by the indexing thread, emptied of a caller on the event loop: under a lock.
    """

    def __init__(self, most: int):
        self.most = most
        self.rows: OrderedDict[bytes, np.ndarray] = OrderedDict()
        self.owners: dict[bytes, set[str]] = {}
        self.held: dict[str, int] = {}  # owner -> how many vectors name them
        self.lock = threading.Lock()

    def _own(self, key: bytes, owner: str) -> None:
        who = self.owners.setdefault(key, set())
        if owner not in who:
            who.add(owner)
            self.held[owner] = self.held.get(owner, 0) + 1

    def _disown(self, key: bytes) -> None:
        for owner in self.owners.pop(key, ()):
            left = self.held.get(owner, 0) - 1
            if left > 0:
                self.held[owner] = left
            else:
                self.held.pop(owner, None)

    def get(self, key: bytes, owner: str | None = None) -> np.ndarray | None:
        with self.lock:
            row = self.rows.get(key)
            if row is not None:
                self.rows.move_to_end(key)
                if owner is not None:
                    self._own(key, owner)
            return row

    def put(self, key: bytes, row: np.ndarray, owner: str | None = None) -> None:
        with self.lock:
            self.rows[key] = row
            self.rows.move_to_end(key)
            if owner is not None:
                self._own(key, owner)
            while len(self.rows) > self.most:
                old, _ = self.rows.popitem(last=False)
                self._disown(old)

    def drop_owner(self, owner: str) -> int:
        """Drop every vector that embeds a message of ``owner``; how many."""
        with self.lock:
            if owner not in self.held:
                return 0
            keys = [k for k, who in self.owners.items() if owner in who]
            for k in keys:
                self.rows.pop(k, None)
                self._disown(k)
            return len(keys)

    def callers(self) -> list[str]:
        """The callers some vector names."""
        with self.lock:
            return list(self.held)


_CACHES: weakref.WeakKeyDictionary[Any, _VectorCache] = weakref.WeakKeyDictionary()
_CACHES_LOCK = threading.Lock()


def _cache_for(embedder: Any) -> _VectorCache | None:
    try:
        with _CACHES_LOCK:
            cache = _CACHES.get(embedder)
            if cache is None:
                cache = _CACHES[embedder] = _VectorCache(VECTOR_CACHE_ROWS)
            return cache
    except TypeError:  # an embedder of the application's that takes no weak reference
        return None


def _text_key(text: str) -> bytes:
    return hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=16).digest()


def cached_vectors(
    embedder: Any,
    texts: Sequence[str],
    owner: str | None = None,
    *,
    embed: Callable[[list[str]], np.ndarray] | None = None,
) -> tuple[np.ndarray, int]:
    """(Indexing thread.) Unit rows for ``texts``, each text embedded only if this process
    has not embedded it with this model lately; and how many came from the cache.
    ``owner``: the caller whose messages these are (their vectors go with their forget).
    ``embed``: how the texts not cached are embedded (default ``embedder.embed``; the
    index's pieces: :func:`~pipecat_summarizer._recall.semantic_rows.embed_pieces`); when it
    raises, no vector is added to the cache."""
    embed = embedder.embed if embed is None else embed
    cache = _cache_for(embedder)
    if cache is None:
        return unit_rows(embed(list(texts))), 0
    keys = [_text_key(t) for t in texts]
    rows: list[np.ndarray | None] = [cache.get(k, owner) for k in keys]
    missing = [i for i, row in enumerate(rows) if row is None]
    if missing:
        fresh = unit_rows(embed([texts[i] for i in missing]))
        for j, i in enumerate(missing):
            rows[i] = fresh[j].copy()
            cache.put(keys[i], rows[i], owner)  # type: ignore[arg-type]
    return np.stack(rows), len(texts) - len(missing)  # type: ignore[arg-type]


def forget_vectors(owner: str) -> int:
    """Drop every cached vector (of every model) that embeds a message of ``owner``: the
    caller was forgotten, and an embedding of their words must not outlive their text.
    Returns how many were dropped."""
    with _CACHES_LOCK:
        caches = list(_CACHES.values())
    return sum(cache.drop_owner(owner) for cache in caches)


# a forget with no live index of the caller here (their call is over: the usual case) drops
# their vectors too
on_forget(forget_vectors)


def _cached_callers() -> set[str]:
    with _CACHES_LOCK:
        caches = list(_CACHES.values())
    return set().union(*(cache.callers() for cache in caches))


class _Watch:
    """What this process knows of one store's tombstones (for the cache's callers only)."""

    def __init__(self) -> None:
        self.due = 0.0  # monotonic time of the next read
        self.seen: dict[str, float] = {}  # caller -> their tombstone's time, as last read
        self.hashes: dict[str, str] = {}  # caller -> user_hash(caller)
        self.redrop: dict[str, float] = {}  # caller -> monotonic time to stop dropping
        self.failing = False
        self.busy = False  # a sweep is reading
        self.reads = 0  # reads made (a counter for benchmarks and tests)
        self.timer: asyncio.TimerHandle | None = None  # the next sweep's, while an index is open


_WATCHES: weakref.WeakKeyDictionary[Any, _Watch] = weakref.WeakKeyDictionary()
_WATCHES_LOCK = threading.Lock()


_SWEEPS: set[asyncio.Task] = set()  # the sweeps running (a task needs a reference)
# store -> the semantic indexes that read it (kicked at least once): while one is open, the
# store's sweeps follow each other on a timer, turns or not
_LIVE: weakref.WeakKeyDictionary[Any, weakref.WeakSet] = weakref.WeakKeyDictionary()


def sweep_soon(archive: Any, index: Any = None) -> None:
    """Start :func:`sweep_tombstones` as a task of its own if the store's sweep is due (a
    turn's kick: the turn never waits for it, nor for a long refresh of its index); while
    ``index`` (or another index of the store's) is open, the next one starts on a timer."""
    read = getattr(archive, "tombstones", None)
    if not callable(read):
        return
    store = getattr(read, "__self__", archive)
    try:
        with _WATCHES_LOCK:
            if index is not None:
                _LIVE.setdefault(store, weakref.WeakSet()).add(index)
            watch = _WATCHES.get(store)
    except TypeError:
        return
    if watch is not None and _timer_set(watch):
        return
    now = time.monotonic()
    if watch is not None and now < watch.due:
        # not due (a sweep ran shortly before: the call before just ended): the next one
        # on a timer all the same, or a quiet call would never sweep while it is open
        wait = max(watch.due - now, TIMER_FLOOR_S)
        watch.timer = asyncio.get_running_loop().call_later(wait, _timer, archive, store, watch)
        return
    task = asyncio.ensure_future(_sweep_and_again(archive, store))
    _SWEEPS.add(task)
    task.add_done_callback(_SWEEPS.discard)


async def sweep_within(archive: Any, wait_s: float | None = None) -> None:
    """Run :func:`sweep_tombstones` as a task of its own and wait for it up to ``wait_s``
    (:data:`SWEEP_WAIT_S`): a hung read is never the caller's (a refresh of an index)."""
    task = asyncio.ensure_future(sweep_tombstones(archive))
    _SWEEPS.add(task)
    task.add_done_callback(_SWEEPS.discard)
    wait_s = SWEEP_WAIT_S if wait_s is None else wait_s
    if wait_s > 0:
        await asyncio.wait([task], timeout=wait_s)


async def _sweep_and_again(archive: Any, store: Any) -> None:
    await sweep_tombstones(archive)
    with _WATCHES_LOCK:
        live = _LIVE.get(store)
        open_ = live is not None and any(not getattr(i, "_closed", True) for i in live)
        watch = _WATCHES.get(store)
        if not open_ or watch is None or _timer_set(watch):
            return
        wait = max(watch.due - time.monotonic(), TIMER_FLOOR_S)
        watch.timer = asyncio.get_running_loop().call_later(wait, _timer, archive, store, watch)


def _timer_set(watch: _Watch) -> bool:
    """Whether the store's next sweep is on a timer of the running loop (a timer of a loop
    that ended never fires)."""
    timer = watch.timer
    if timer is None or timer.cancelled():
        return False
    try:
        return getattr(timer, "_loop", None) is asyncio.get_running_loop()
    except RuntimeError:
        return False


def _timer(archive: Any, store: Any, watch: _Watch) -> None:
    # a sweep not due yet (one ran meanwhile, after a refresh) reads nothing and sets the
    # timer again for the time left
    watch.timer = None
    task = asyncio.ensure_future(_sweep_and_again(archive, store))
    _SWEEPS.add(task)
    task.add_done_callback(_SWEEPS.discard)


def _due_watch(store: Any, now: float) -> _Watch | None:
    """The store's watch if its sweep is due (and then not due again for a while)."""
    try:
        with _WATCHES_LOCK:
            watch = _WATCHES.get(store)
            if watch is None:
                watch = _WATCHES[store] = _Watch()
            if now < watch.due or watch.busy:  # a hung read is never joined by another
                return None
            watch.due, watch.busy = now + TOMBSTONE_CHECK_S, True
            return watch
    except TypeError:  # a store that takes no weak reference: swept each time
        return _Watch()


async def sweep_tombstones(archive: Any) -> int:
    """Drop the cached vectors of every caller the store has a tombstone of that this
    process has not seen yet (another process's forget), if the store's last sweep is
    :data:`TOMBSTONE_CHECK_S` old. Never raises: a failing store costs the sweep only (one
    WARNING per outage, no text). Returns how many callers' vectors were dropped."""
    read = getattr(archive, "tombstones", None)
    if not callable(read):
        return 0
    store = getattr(read, "__self__", archive)  # the store itself, not a call's wrapper
    now = time.monotonic()
    watch = _due_watch(store, now)
    if watch is None:
        return 0
    try:
        return await _sweep(watch, read, now)
    finally:
        watch.busy = False


async def _sweep(watch: _Watch, read: Any, now: float) -> int:
    callers = _cached_callers()
    if len(watch.seen) > SEEN_MOST:  # callers long out of the cache: their next vectors
        watch.seen = {c: at for c, at in watch.seen.items() if c in callers}  # count as new
    if len(watch.hashes) > 2 * len(callers) + 1000:  # now and then: a walk of 20,000 takes ~1 ms
        watch.hashes = {c: h for c, h in watch.hashes.items() if c in callers}
    dropped = 0
    for owner, until in list(watch.redrop.items()):
        if now >= until:
            del watch.redrop[owner]
        elif owner in callers and forget_vectors(owner):
            dropped += 1
    order = list(callers)
    try:
        for start in range(0, len(order), SWEEP_BATCH):
            batch = order[start : start + SWEEP_BATCH]
            hashes = [_hash(watch, c) for c in batch]
            found = await read(hashes)
            watch.reads += 1
            if not isinstance(found, dict):  # an archive of the application's, not a store
                raise TypeError(f"tombstones() answered a {type(found).__name__}, not a dict")
            for caller, key in zip(batch, hashes, strict=True):
                at = found.get(key)
                if at is None or watch.seen.get(caller) == at:
                    continue
                watch.seen[caller] = at
                watch.redrop[caller] = time.monotonic() + REDROP_S
                if forget_vectors(caller):
                    dropped += 1
    except Exception as e:  # the sweep is the cache's: never the index's, never a turn's
        if not watch.failing:
            watch.failing = True
            logger.warning(
                f"semantic recall: reading the store's forget tombstones failed "
                f"({error_reason(e)}); another process's forget reaches this process's "
                "cached vectors when the store answers again"
            )
        return dropped  # tried again in TOMBSTONE_CHECK_S
    if watch.failing:
        watch.failing = False
        logger.info("semantic recall: the store's forget tombstones are read again")
    if dropped:
        logger.info(f"semantic recall: another process's forget dropped {dropped} callers' vectors")
    return dropped


def _hash(watch: _Watch, caller: str) -> str:
    key = watch.hashes.get(caller)
    if key is None:
        key = watch.hashes[caller] = user_hash(caller)
    return key


__all__ = [
    "REDROP_S",
    "SWEEP_BATCH",
    "TOMBSTONE_CHECK_S",
    "VECTOR_CACHE_ROWS",
    "cached_vectors",
    "forget_vectors",
    "sweep_soon",
    "sweep_tombstones",
    "unit_rows",
]
