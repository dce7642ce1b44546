"""A store object's forget bookkeeping: how many forgets of each caller this process counted
(its own, and other processes' read from their tombstones), the forgets under way, the
tombstones already counted, the live calls' baselines; and the process's forget listeners.

``MemoryStore`` holds one :class:`Forgets` (made on first use) and its public methods
(``forget_generation``, ``forget_baseline``, ``noticed_forget``) delegate to it; the backends'
``forget`` count through it. Nothing here reads a database: the readers are passed in.
"""

from __future__ import annotations

import asyncio
import os
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

    def baseline_pending(self, user_id: str, since: float) -> bool:
        """Whether the baseline read of this call is under way (started, not answered): a
        tombstone read now might come before it (see :meth:`noticed`)."""
        found = self._baselines.get((user_id, since))
        return found is not None and not found.done()

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
#: caches within about this long while the store is open in a running event loop (its
#: timer); without a timer, at the next call's start or turn here after it.
DELETES_CHECK_S = 5.0
#: The shortest wait of a store's removals timer, seconds (``DELETES_CHECK_S`` set lower, in
#: a test, never makes it spin).
TIMER_FLOOR_S = 0.05

#: What a timer reads through: the store's removals read, or ``None`` once the store is
#: closed or gone (the timer then stops). A function of the store's weak reference: a
#: timer never keeps a store the application dropped alive.
Reader = Callable[[], "Callable[[], Awaitable[int | None]] | None"]


class Deletes:
    """What a store object last read of its database's removals (schema v8: a count bumped by
    every transaction that deletes archived messages, summed on PostgreSQL), to learn of
    deletes run by other processes: a forget of a caller with no live call here, which no
    call's watch (``noticed``) sees (S14-S-1). The caches keyed by conversation text
    (``_text.text_caches``) hold every caller's entries together, so any such delete
    empties them; a purge does too (its old messages' text goes as well).

    Read when the store opens (the baseline, in the opening's own work: no trip of a turn's),
    then every :data:`DELETES_CHECK_S` by a timer while the store is open in a running event
    loop (:meth:`watch`: one ``call_later`` handle per store object, never a task a turn
    waits for; each read is a short task of its own on the store's thread or pool), whether
    or not a call is live; and, only while no timer runs (a store not open yet, no loop the
    timer could start on), at a call's start and turns (``MemoryStore.forget_baseline``,
    ``noticed_forget``) when one is due: with the timer, no read starts on a turn's path.
    At most one read is under way at a time, and at
    most one starts per :data:`DELETES_CHECK_S` whoever asks. A failed read is logged once
    (a WARNING, then DEBUG until a read answers again) and tried again when due; nothing
    raises into the application.
    """

    def __init__(self) -> None:
        """Nothing read yet."""
        self._due = 0.0
        self._seen: int | None = None
        self._tasks: set[asyncio.Task] = set()
        self._failing = False
        self._timer: asyncio.TimerHandle | None = None
        self._timer_loop: asyncio.AbstractEventLoop | None = None
        self._pid = os.getpid()  # the process the timer was armed in
        #: Reads answered (a value or ``None``), failed ones aside: what a test waits on.
        self.reads = 0

    def watch(self, reader: Reader, empty: Callable[[], None]) -> None:
        """Start the timer on the running loop, unless one is already armed on it (or on
        another loop still running: a store shared by two threads' loops keeps one). No
        loop running: no timer. A timer left on a loop that stopped or closed is replaced."""
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return
        if self.watching:
            return
        if self._timer is not None:
            self._timer.cancel()  # its loop no longer runs (or not in this process): never fires
        if self._pid != os.getpid():
            self._tasks = set()  # a forked child: the parent's reads under way never end here
        self._timer_loop = loop
        self._arm(loop, reader, empty)

    def stop(self) -> None:
        """Stop the timer (the store closes). Reads under way finish on their own."""
        timer, self._timer = self._timer, None
        if timer is None:
            return
        loop = self._timer_loop
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if loop is None or loop is running or loop.is_closed() or not loop.is_running():
            timer.cancel()
        else:  # a close from another thread's loop: cancelled on the timer's own
            loop.call_soon_threadsafe(timer.cancel)

    @property
    def watching(self) -> bool:
        """Whether a timer is armed on a loop that runs (this thread's, or another's)."""
        loop = self._timer_loop
        return (
            self._pid == os.getpid()  # (a forked child's copy of a running loop runs nothing)
            and self._timer is not None
            and not self._timer.cancelled()
            and loop is not None
            and not loop.is_closed()
            and loop.is_running()
        )

    def _arm(
        self, loop: asyncio.AbstractEventLoop, reader: Reader, empty: Callable[[], None]
    ) -> None:
        self._pid = os.getpid()
        delay = max(self._due - time.monotonic(), TIMER_FLOOR_S)
        self._timer = loop.call_later(delay, self._tick, loop, reader, empty)

    def _tick(
        self, loop: asyncio.AbstractEventLoop, reader: Reader, empty: Callable[[], None]
    ) -> None:
        read = reader()
        if read is None:  # the store closed or gone: the timer ends (an opening starts one)
            self._timer = None
            return
        self.check(read, empty)
        self._arm(loop, reader, empty)

    def check(self, read: Callable[[], Awaitable[int | None]], empty: Callable[[], None]) -> None:
        """Start a read of the removals (``read``) if one is due and none is under way, and
        ``empty`` the caches once it answers a value other than the one read before (the
        first read is the baseline). Never raises (see the class's docstring)."""
        now = time.monotonic()
        if now < self._due or self._tasks:
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
        except Exception as e:  # a closed store, an outage, a refused role: never raised
            why = type(e).__name__
            sqlstate = getattr(e, "sqlstate", None)
            if isinstance(sqlstate, str):
                why = f"{why}, SQLSTATE {sqlstate}"
            if self._failing:
                logger.debug(f"the store's removals not read ({why})")
            else:
                self._failing = True
                logger.warning(
                    f"the store's removals not read ({why}): another process's forget "
                    f"reaches this process's caches once a read answers (tried every "
                    f"{DELETES_CHECK_S:g} s; logged once)"
                )
            return
        if self._failing:
            self._failing = False
            logger.info("the store's removals read again")
        self.reads += 1
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
