"""A store object's forget bookkeeping: how many forgets of each caller this process counted
(its own, and other processes' read from their tombstones), the forgets under way, the
tombstones already counted, the live calls' baselines; and the process's forget listeners.

``MemoryStore`` holds one :class:`Forgets` (made on first use) and its public methods
(``forget_generation``, ``forget_baseline``, ``noticed_forget``) delegate to it; the backends'
``forget`` count through it. Nothing here reads a database: the readers are passed in.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable

from loguru import logger

#: A call whose forget baseline was never read (``MemoryStore.forget_baseline``; or its read
#: failed) counts a tombstone stamped up to this many seconds before its start: another
#: process's clock may be behind this one's (a forget is never missed for that; a forget
#: just before the call would stop its recording, the safe side).
FORGET_SKEW_S = 600.0
#: Calls' baselines kept per store object (the oldest go first; see ``forget_baseline``).
MAX_BASELINES = 4096
#: How long a forget watch (or a memory load) waits for its call's baseline read, seconds;
#: then the :data:`FORGET_SKEW_S` margin holds for that watch.
BASELINE_WAIT_S = 2.0
_UNREAD = object()  # no baseline (never read, or the read failed)

#: Told a caller's id each time this process counts a forget of them (its own, or another
#: process's read from the tombstone): what the process keeps of the caller outside the
#: store, whoever holds it (recall's cache of semantic vectors), goes too, even when no call
#: of theirs is live here any more.
_FORGET_LISTENERS: list[tuple[object, Callable[[str], object]]] = []  # (the addition, listener)


def _same(listener: Callable[[str], object]) -> tuple[int, object]:
    """A listener's identity: the object itself, never its equality (two equal holders are
    two listeners); a bound method by its object and function (each ``obj.method`` read is
    a new bound method; a built-in one, ``list.append``, by its name)."""
    owner = getattr(listener, "__self__", None)
    if owner is not None:
        func = getattr(listener, "__func__", None)
        return id(owner), id(func) if func is not None else getattr(listener, "__name__", "")
    return id(listener), 0


def on_forget(listener: Callable[[str], object]) -> Callable[[], None]:
    """Have ``listener(user_id)`` called each time this process counts a forget (once per
    listener, however often it is added). It runs inside the forget: keep it quick; one that
    raises is logged by its exception's type and never fails the forget. Listeners are
    told apart by identity, never by equality.

    Returns:
        A function that stops the calls of this addition (a listener added twice is called
        until both additions are stopped).
    """
    if not callable(listener):
        raise TypeError(f"a forget's listener must be callable, got {type(listener).__name__}")
    addition = object()
    _FORGET_LISTENERS.append((addition, listener))

    def remove() -> None:
        for i, (added, _) in enumerate(_FORGET_LISTENERS):
            if added is addition:
                del _FORGET_LISTENERS[i]
                return

    return remove


def tell_forget(user_id: str) -> None:
    """Tell every forget listener (:func:`on_forget`) that ``user_id`` was forgotten."""
    told: set[tuple[int, object]] = set()
    for _, listener in list(_FORGET_LISTENERS):  # a listener stopped meanwhile is still told
        key = _same(listener)
        if key in told:
            continue
        told.add(key)
        try:
            listener(user_id)
        except (Exception, asyncio.CancelledError) as e:
            # an own forget tells before its rows go: a listener never stops them going
            logger.warning(f"a forget's listener failed ({type(e).__name__})")


def _consumed(read: asyncio.Future) -> None:
    # a failed baseline read is answered by the fallback: never "exception never retrieved"
    if not read.cancelled():
        read.exception()


class Forgets:
    """One store object's forget bookkeeping (see the module's docstring).

    Args:
        tell: Called with a caller's id each time a forget of them is counted, and again
            when a forget under way ends (:func:`tell_forget` by default).
    """

    def __init__(self, tell: Callable[[str], None] = tell_forget):
        """Nothing counted yet."""
        self._tell = tell
        self._generations: dict[str, int] = {}  # forgets counted, by caller
        self._running: dict[str, int] = {}  # forgets under way, by caller
        self._moving = 0  # the last "under way" value answered (they go down)
        self._seen: dict[str, float] = {}  # the last tombstone counted, by caller
        self._baselines: dict[tuple[str, float], asyncio.Future] = {}

    def generation(self, user_id: str) -> int:
        """The forget count of ``user_id``: a token compared for equality only (a reader
        keeps the value it saw and compares a later read with ``==`` / ``!=``, never by
        order). Outside a forget it is how many forgets were counted (0 first, then 1, 2...);
        while a forget of the caller is under way (counted, rows not yet deleted) each read
        answers a new negative value, never answered before or again, so that nothing read
        during the forget (a search reading rows still there) matches any other read: one
        made before it, during it, or after it."""
        if self._running.get(user_id):
            self._moving -= 1
            return self._moving
        return self._generations.get(user_id, 0)

    def baseline(
        self, user_id: str, since: float, read: Callable[[], Awaitable[float | None]]
    ) -> asyncio.Future[float | None]:
        """The baseline read of ``user_id``'s call that started at ``since``: started now with
        ``read()`` (the caller's tombstone), or the one started before for the same key; the
        :data:`MAX_BASELINES` latest calls' are kept."""
        key = (user_id, since)
        found = self._baselines.get(key)
        if found is None:
            found = asyncio.ensure_future(read())
            found.add_done_callback(_consumed)
            self._baselines[key] = found
            while len(self._baselines) > MAX_BASELINES:
                self._baselines.pop(next(iter(self._baselines)))
        return found

    async def _baseline(self, user_id: str, since: float) -> object:
        found = self._baselines.get((user_id, since))
        if found is None:
            return _UNREAD
        if not found.done():  # a slow read: the margin holds meanwhile
            await asyncio.wait([found], timeout=BASELINE_WAIT_S)
        if not found.done() or found.cancelled() or found.exception() is not None:
            return _UNREAD
        return found.result()

    async def noticed(
        self, user_id: str, since: float, read: Callable[[str], Awaitable[float | None]]
    ) -> bool:
        """Whether ``user_id`` was forgotten during their call that started at ``since``:
        their tombstone (``read(user_id)``) differs from the call's baseline (or, without
        one, is at most :data:`FORGET_SKEW_S` older than ``since``) and was not counted
        yet; one seen here for the first time is counted (:meth:`counted`)."""
        base = await self._baseline(user_id, since)
        at = await read(user_id)
        if at is None or at == base:
            return False
        if base is _UNREAD and at < since - FORGET_SKEW_S:
            return False
        if self._seen.get(user_id) == at:
            return False  # seen already, or this process's own forget (counted when it ran)
        self.counted(user_id, at)
        return True

    def counted(self, user_id: str, at: float | None = None) -> float:
        """Count a forget of ``user_id`` and tell the listeners; ``at``: a tombstone read
        back (else now: the time an own forget writes as its tombstone's). The tombstone's
        time is remembered, so reading back this process's own forget does not count it
        twice. Returns that time."""
        self._generations[user_id] = self._generations.get(user_id, 0) + 1
        at = time.time() if at is None else at
        self._seen[user_id] = at
        self._tell(user_id)
        return at

    def under_way(self, user_id: str) -> Callable[[], None]:
        """Mark a forget of ``user_id`` (counted already) as under way until the returned
        function is called (once its deletes are committed; calling it again does nothing):
        meanwhile :meth:`generation` answers values never read again; at the end the
        listeners are told again (a cache filled meanwhile)."""
        running = self._running
        running[user_id] = running.get(user_id, 0) + 1
        ended = False

        def end() -> None:
            nonlocal ended
            if ended:
                return
            ended = True
            running[user_id] -= 1
            if not running[user_id]:
                del running[user_id]
            self._tell(user_id)

        return end


#: Least time between two reads of the database's removals by one store object, seconds
#: (see :class:`Deletes`): a forget run by another process reaches this process's text
#: caches at the next call's start or turn here after it, within this long.
DELETES_CHECK_S = 5.0


class Deletes:
    """What a store object last read of its database's removals (schema v8: a count bumped by
    every transaction that deletes archived messages, summed on PostgreSQL), to learn of
    deletes run by other processes: a forget of a caller with no live call here, which no
    call's watch (``noticed``) sees (S14-S-1). The caches keyed by conversation text
    (``_text.text_caches``) hold every caller's entries together, so any such delete
    empties them; a purge does too (its old messages' text goes as well).

    Read when the store opens (the baseline, in the opening's own work: no trip of a turn's),
    then at a call's start and at its turns (``MemoryStore.forget_baseline``,
    ``noticed_forget``) at most every :data:`DELETES_CHECK_S` after the last read, in a task
    of its own: no turn waits for it. A process with no call here reads nothing: its caches
    hold what they held until its next call (or this process's own forget) empties them.
    """

    def __init__(self) -> None:
        """Nothing read yet."""
        self._due = 0.0
        self._seen: int | None = None
        self._tasks: set[asyncio.Task] = set()

    def check(self, read: Callable[[], Awaitable[int | None]], empty: Callable[[], None]) -> None:
        """Start a read of the removals (``read``) if one is due, and ``empty`` the caches
        once it answers a value other than the one read before (the first read is the
        baseline). Never raises; a failed read is logged at DEBUG and tried when due again."""
        now = time.monotonic()
        if now < self._due:
            return
        self._due = now + DELETES_CHECK_S
        try:
            task = asyncio.get_running_loop().create_task(self._read(read, empty))
        except RuntimeError:  # no loop running: nothing to read on
            return
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _read(
        self, read: Callable[[], Awaitable[int | None]], empty: Callable[[], None]
    ) -> None:
        try:
            value = await read()
        except Exception as e:  # a closed store, an outage: the caches' check only
            logger.debug(f"the store's removals not read ({type(e).__name__})")
            return
        self.saw(value, empty)

    def saw(self, value: int | None, empty: Callable[[], None]) -> None:
        """A read of the removals (``None``: none kept): ``empty`` the caches if it differs
        from the one before; the next read is due :data:`DELETES_CHECK_S` from now."""
        self._due = time.monotonic() + DELETES_CHECK_S
        if value is None:
            return
        if self._seen is not None and value != self._seen:
            empty()
        self._seen = value
