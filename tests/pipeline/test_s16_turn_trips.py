"""A recall turn that searches the archive itself reads the caller's forget tombstone (its
forget watch) in the same trip to the store as its search: on SQLite the same job on the
store's one thread, before the search's statements; on PostgreSQL the search's own statement.
Before, the watch was a trip of its own beside the search (S15-F-3): on SQLite a second job
queued behind the search on the one thread, on PostgreSQL a second round trip.

Real pipelines (a real ``LLMContextAggregatorPair``, ``ContextSummarizer``, Pipecat's OpenAI
service against the local server) on a SQLite file and the real PostgreSQL. The store's
reads are counted by the statements each trip ran (SQLite: the store connection's trace
callback during each job; PostgreSQL: each leased connection's statements), never by time.
"""

from __future__ import annotations

import asyncio
import sys

import pytest

from pipecat_summarizer._recall.hooks import RecallObserver
from pipecat_summarizer.params import RecallParams
from pipecat_summarizer.store import PostgresMemoryStore, SQLiteMemoryStore, _forgets
from pipecat_summarizer.store.base import MemoryStore
from tests.recall.test_attacks_dates import archived, plain, utc
from tests.recall.test_attacks_gather import _blocks
from tests.support.pipeline_utils import build, main_llm, turns, user_turn
from tests.support.recall_calls import travel_desk
from tests.support.settle import Until, run_settling

EARLIER = [
    "My sister Marta lives in Porto and we plan a visit.",
    "Lovely, Porto in spring.",
    "My passport number ends in 7731 and expires in June.",
    "Noted, the passport expires in June.",
    "Our dog Biscuit stays with the neighbour Ines.",
    "Biscuit with Ines, noted.",
]
QUESTIONS = [
    "Where does Marta live again?",
    "When does my passport expire?",
    "Who looks after Biscuit?",
]
#: A loaded machine: the budget never binds here (what is counted is the trips, not time).
BUDGET = RecallParams(latency_budget_s=5.0)


def _tombstone(sql: str) -> bool:
    """A read of one caller's tombstone (not the call's baseline: a read of a batch)."""
    low = " ".join(sql.lower().split())  # (SQLite traces it with its values bound)
    one = "from forgotten where user_hash =" in low and "= any(" not in low
    return one or "pcs_forgotten_at(" in low


def _baseline(sql: str) -> bool:
    """The call's baseline read (``forget_baseline``: a read of a batch of tombstones)."""
    low = " ".join(sql.lower().split())
    return "from forgotten where user_hash in (" in low or "user_hash = any(" in low


def _search(sql: str) -> bool:
    low = sql.lower()
    return "messages_fts match" in low or "pcs_caller_search(" in low or "message_words" in low


class _SpiedSQLite(SQLiteMemoryStore):
    """A SQLite store recording the statements of each job on its thread."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.trips: list[list[str]] = []

    async def _run(self, fn, *, read=False):
        statements: list[str] = []

        def traced(conn):
            conn.set_trace_callback(statements.append)
            try:
                return fn(conn)
            finally:
                conn.set_trace_callback(None)

        try:
            return await super()._run(traced, read=read)
        finally:
            self.trips.append(statements)


class _Spy:
    """A leased PostgreSQL connection recording its statements."""

    def __init__(self, conn, statements: list[str]):
        self._conn = conn
        self._statements = statements

    def __getattr__(self, name):
        return getattr(self._conn, name)

    async def fetch(self, sql, *args, **kwargs):
        self._statements.append(sql)
        return await self._conn.fetch(sql, *args, **kwargs)

    async def fetchval(self, sql, *args, **kwargs):
        self._statements.append(sql)
        return await self._conn.fetchval(sql, *args, **kwargs)

    async def execute(self, sql, *args, **kwargs):
        self._statements.append(sql)
        return await self._conn.execute(sql, *args, **kwargs)


class _SpiedPostgres(PostgresMemoryStore):
    """A PostgreSQL store recording the statements of each read on a leased connection."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.trips: list[list[str]] = []

    async def _read(self, use):
        statements: list[str] = []
        try:
            return await super()._read(lambda conn: use(_Spy(conn, statements)))
        finally:
            self.trips.append(statements)


class _TwoCallsSQLite(_SpiedSQLite):
    """A store whose ``search_noticing`` is the base class's (a store of another kind that
    does not read the tombstone in its search's trip): the two calls."""

    search_noticing = MemoryStore.search_noticing


def _spied(target: str, kind: type | None = None):
    if "://" in target:
        return _SpiedPostgres(target)
    return (kind or _SpiedSQLite)(target)


class _Outcomes(RecallObserver):
    """How each turn's recall went (for the assertions' messages)."""

    def __init__(self) -> None:
        self.seen: list[str] = []

    def on_recall(self, outcome) -> None:
        self.seen.append(f"{outcome.outcome}/{outcome.hits}/{outcome.snippets}")


async def _call(server, store) -> _Outcomes:
    await store.write(archived(EARLIER, call_id="a1", at=utc(2026, 4, 1)))
    context, processor, summarizer = travel_desk(server, store, BUDGET)
    outcomes = _Outcomes()
    assert processor.recall_step is not None
    processor.recall_step.add_observer(outcomes)
    store.trips.clear()  # the call's own trips from here
    try:
        await run_settling(
            build(context, processor, main_llm(server.base_url)),
            # the first question once the call's baseline was read (a turn before it reads
            # its watch beside its search: the tombstone must be read after the baseline)
            frames_to_send=[
                Until(sleep=5.0, done=lambda: _read_baseline(store)),
                *turns(QUESTIONS, gap=0.3),
            ],
        )
    finally:
        await summarizer.aclose()
    return outcomes


def _recalled(server, outcomes: _Outcomes) -> None:
    """Every turn searched and recalled, or found only what is in view (never a watch late,
    a turn missed or failed); the first one's block is there."""
    assert len(outcomes.seen) == len(QUESTIONS), outcomes.seen
    kinds = {seen.split("/")[0] for seen in outcomes.seen}
    assert kinds <= {"recalled", "nothing_new"}, outcomes.seen
    blocks = _blocks(server)
    assert blocks and "Porto" in blocks[0], outcomes.seen


def _read_baseline(store) -> bool:
    return any(_baseline(s) for trip in store.trips for s in trip)


def _split(trips: list[list[str]]) -> tuple[list[list[str]], list[list[str]]]:
    """(the search trips that read the tombstone too, the trips that read it alone)."""
    both = [t for t in trips if any(map(_tombstone, t)) and any(map(_search, t))]
    alone = [t for t in trips if any(map(_tombstone, t)) and not any(map(_search, t))]
    return both, alone


@pytest.mark.parametrize("backend", ["sqlite", "postgres"], indirect=True)
async def test_a_turns_own_search_reads_the_forget_watch_in_its_own_trip(
    openai_server, store_target
):
    openai_server.handler = plain
    store = _spied(store_target)
    try:
        outcomes = await _call(openai_server, store)
    finally:
        await store.close()
    both, alone = _split(store.trips)
    # the turns recalled (the watch answered: a block is placed only then); under load the
    # selection may find a turn's hits nothing new (before and after this change): it is
    # never the watch
    _recalled(openai_server, outcomes)
    # one trip per turn for its search and its watch; none for the watch alone
    assert alone == []
    assert len(both) == len(QUESTIONS)
    if store.backend == "postgres":
        # the same statement (not two on one lease): one round trip
        assert all(sum(map(_tombstone, t)) == 1 and len(t) == 1 for t in both)
    else:
        # the same job, the tombstone read before the search's statements
        for trip in both:
            first_search = next(i for i, s in enumerate(trip) if _search(s))
            assert any(_tombstone(s) for s in trip[:first_search])


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
async def test_a_store_without_the_one_trip_read_keeps_the_watch_beside_the_search(
    openai_server, store_target
):
    # the base class's search_noticing (two calls) has no one-trip mark: the step keeps the
    # watch a trip of its own, as before, and the turns still recall
    openai_server.handler = plain
    store = _spied(store_target, _TwoCallsSQLite)
    try:
        outcomes = await _call(openai_server, store)
    finally:
        await store.close()
    both, alone = _split(store.trips)
    _recalled(openai_server, outcomes)
    assert both == []
    assert len(alone) == len(QUESTIONS)


@pytest.mark.parametrize("backend", ["sqlite", "postgres"], indirect=True)
async def test_the_base_search_noticing_makes_the_two_calls(store_target):
    # a store of another kind inherits the default: the search and the watch, both answered
    store = _spied(store_target)
    try:
        await store.write(archived(EARLIER, call_id="a1", at=utc(2026, 4, 1)))
        since = utc(2026, 4, 2)
        await store.forget_baseline("alice", since)
        hits, noticed = await MemoryStore.search_noticing(
            store, "Marta Porto", user_id="alice", since=since, any_word=True
        )
        assert [h.content for h in hits][:1] == [EARLIER[0]]
        assert noticed is False
        other = _spied(store_target)
        try:
            await other.forget("alice")
        finally:
            await other.close()
        hits, noticed = await MemoryStore.search_noticing(
            store, "Marta Porto", user_id="alice", since=since, any_word=True
        )
        assert hits == [] and noticed is True
        # and the backend's own, in one trip: a forget by another process noticed
        hits, noticed = await store.search_noticing(
            "Marta Porto", user_id="alice", since=since, any_word=True
        )
        assert hits == [] and noticed is False  # counted already, by the read above
    finally:
        await store.close()


@pytest.mark.parametrize("backend", ["sqlite", "postgres"], indirect=True)
async def test_the_one_trip_read_notices_another_process_forget(store_target):
    # the backend's own search_noticing: a forget by another store object (as another
    # process's) after the call's baseline is noticed by the read in the search's trip
    store = _spied(store_target)
    try:
        await store.write(archived(EARLIER, call_id="a1", at=utc(2026, 4, 1)))
        since = utc(2026, 4, 2)
        await store.forget_baseline("alice", since)
        generation = store.forget_generation("alice")
        hits, noticed = await store.search_noticing(
            "Marta Porto", user_id="alice", since=since, any_word=True, _replies=3
        )
        assert hits and hits[0].content == EARLIER[0] and noticed is False
        assert hits.replies  # read in the same trip, as search's
        # the same hits, in the same order, with the same replies and befores as search's
        words = "Marta Porto passport June Biscuit Ines neighbour"
        alone = await store.search(words, user_id="alice", any_word=True, _replies=3)
        joined, _ = await store.search_noticing(
            words, user_id="alice", since=since, any_word=True, _replies=3
        )
        assert len(alone) > 3
        assert [(h.call_id, h.position, h.score) for h in joined] == [
            (h.call_id, h.position, h.score) for h in alone
        ]
        assert joined.replies == alone.replies and joined.befores == alone.befores
        # more words than the PostgreSQL search function takes (SLOTS): the statement itself,
        # the tombstone read before it on the same lease (one trip, two statements)
        many = f"{words} sister visit spring dog number expires"
        alone = await store.search(many, user_id="alice", any_word=True, _replies=3)
        store.trips.clear()
        joined, _ = await store.search_noticing(
            many, user_id="alice", since=since, any_word=True, _replies=3
        )
        assert [(h.call_id, h.position) for h in joined] == [(h.call_id, h.position) for h in alone]
        assert len(store.trips) == 1 and _split(store.trips)[0] == store.trips
        store.trips.clear()
        other = _spied(store_target)
        try:
            await other.forget("alice")
        finally:
            await other.close()
        hits, noticed = await store.search_noticing(
            "Marta Porto", user_id="alice", since=since, any_word=True, _replies=3
        )
        assert hits == [] and noticed is True
        assert store.forget_generation("alice") != generation
        both, alone = _split(store.trips)
        assert len(both) == 1 and alone == []
    finally:
        await store.close()


@pytest.mark.parametrize("backend", ["sqlite", "postgres"], indirect=True)
async def test_no_removals_read_starts_on_a_turns_path_while_the_timer_runs(
    openai_server, store_target, monkeypatch
):
    # the database's removals (other processes' deletes, S14-S-1) are read by the store's
    # timer; a call's start and its turns started one too whenever one was due (every
    # turn here: DELETES_CHECK_S is 0), a trip beside the turn's search. Now only the timer
    # starts them while it runs (its reads go on: counted below)
    monkeypatch.setattr(_forgets, "DELETES_CHECK_S", 0.0)
    started: list[str] = []
    check = _forgets.Deletes.check

    def counted(self, read, empty):
        due = not self._tasks
        check(self, read, empty)
        if due and self._tasks:  # a read started: by whom
            started.append(sys._getframe(1).f_code.co_name)

    monkeypatch.setattr(_forgets.Deletes, "check", counted)
    openai_server.handler = plain
    store = _spied(store_target)
    try:
        outcomes = await _call(openai_server, store)
    finally:
        await store.close()
    _recalled(openai_server, outcomes)
    assert started and set(started) == {"_tick"}  # the timer's, none a turn's


class _Holding:
    """A store whose turns' searches listed in ``hold`` (0: the first) wait until released
    (they miss their budget; their answers come late)."""

    def __init__(self, *args, hold: tuple[int, ...] = (0,), **kwargs):
        super().__init__(*args, **kwargs)
        self.releases = {i: asyncio.Event() for i in hold}
        self.answered = 0
        self._asked = 0

    def release(self, i: int) -> None:
        self.releases[i].set()

    async def search_noticing(self, *args, **kwargs):
        asked, self._asked = self._asked, self._asked + 1
        if asked in self.releases:
            await self.releases[asked].wait()
        try:
            return await super().search_noticing(*args, **kwargs)  # type: ignore[misc]
        finally:
            self.answered += 1


class _HoldingSQLite(_Holding, _SpiedSQLite):
    async def search_noticing(self, *args, **kwargs):
        return await _Holding.search_noticing(self, *args, **kwargs)

    # the backend's marks (an override has none of its own)
    search_noticing.one_trip = True  # type: ignore[attr-defined]
    search_noticing.serial = True  # type: ignore[attr-defined]


class _HoldingPostgres(_Holding, _SpiedPostgres):
    async def search_noticing(self, *args, **kwargs):
        return await _Holding.search_noticing(self, *args, **kwargs)

    search_noticing.one_trip = True  # type: ignore[attr-defined]


def _holding(target: str, hold: tuple[int, ...]) -> _Holding:
    kind = _HoldingPostgres if "://" in target else _HoldingSQLite
    return kind(target, hold=hold)


async def _held_call(server, store, frames: list, outcomes: _Outcomes) -> None:
    await store.write(archived(EARLIER, call_id="a1", at=utc(2026, 4, 1)))
    context, processor, summarizer = travel_desk(server, store, RecallParams(latency_budget_s=0.5))
    assert processor.recall_step is not None
    processor.recall_step.add_observer(outcomes)
    store.trips.clear()
    try:
        await run_settling(
            build(context, processor, main_llm(server.base_url)),
            frames_to_send=[Until(sleep=5.0, done=lambda: _read_baseline(store)), *frames],
        )
    finally:
        await summarizer.aclose()


@pytest.mark.parametrize("backend", ["sqlite", "postgres"], indirect=True)
async def test_after_a_missed_turn_the_watch_is_still_read_in_the_search_trip(
    openai_server, store_target
):
    # the first turn's search misses its budget and answers late, before the next turn:
    # that turn's own search answers in time, its watch read in the same trip (one trip,
    # not two, though a late answer was there to serve it had its search missed)
    openai_server.handler = plain
    store = _holding(store_target, hold=(0,))

    outcomes = _Outcomes()

    def released() -> bool:  # the first turn is over (missed): its search may answer
        if outcomes.seen:
            store.release(0)
        return store.answered >= 1

    try:
        await _held_call(
            openai_server,
            store,
            [user_turn(QUESTIONS[0]), Until(sleep=10.0, done=released), *turns(QUESTIONS[1:2])],
            outcomes,
        )
    finally:
        await store.close()
    assert outcomes.seen[0].startswith("missed_budget"), outcomes.seen
    assert len(outcomes.seen) == 2, outcomes.seen
    both, alone = _split(store.trips)
    assert alone == []
    assert len(both) == 2  # the first turn's (late) and the second's


@pytest.mark.parametrize("backend", ["sqlite", "postgres"], indirect=True)
async def test_a_late_answer_served_gets_a_watch_of_its_own_where_trips_run_side_by_side(
    openai_server, store_target
):
    # the first two turns' searches miss; the first's answer comes between them and serves
    # the second (a late answer), whose own search (and the watch in its trip) is still
    # held: on PostgreSQL that turn reads a watch of its own then (a trip beside the held
    # one); on SQLite it would queue behind the held search: none is started
    openai_server.handler = plain
    store = _holding(store_target, hold=(0, 1))
    outcomes = _Outcomes()

    def first_answered() -> bool:
        if outcomes.seen:
            store.release(0)
        return store.answered >= 1

    def second_over() -> bool:  # then the held search answers (the call ends cleanly)
        if len(outcomes.seen) >= 2:
            store.release(1)
        return store.answered >= 2

    try:
        await _held_call(
            openai_server,
            store,
            [
                user_turn(QUESTIONS[0]),
                Until(sleep=10.0, done=first_answered),
                user_turn(QUESTIONS[0]),  # the same question: the late answer is relevant
                Until(sleep=10.0, done=second_over),
            ],
            outcomes,
        )
    finally:
        await store.close()
    assert len(outcomes.seen) == 2, outcomes.seen
    _, alone = _split(store.trips)
    assert len(alone) == (1 if store.backend == "postgres" else 0), outcomes.seen


class _OwnSearch:
    """A store whose ``search`` is a subclass's (an application's filter or log, a test's
    slow store): the turn's path must call it."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.searched: list[str] = []

    async def search(self, query, **kwargs):
        self.searched.append(query)
        return await super().search(query, **kwargs)  # type: ignore[misc]


class _OwnSearchSQLite(_OwnSearch, _SpiedSQLite):
    pass


class _OwnSearchPostgres(_OwnSearch, _SpiedPostgres):
    pass


@pytest.mark.parametrize("backend", ["sqlite", "postgres"], indirect=True)
async def test_a_subclass_search_is_still_what_a_turn_calls(openai_server, store_target):
    # the one-trip read goes past ``search`` to the backend's own: with ``search``
    # overridden, the turn calls the override (and its watch goes beside it, as before)
    openai_server.handler = plain
    kind = _OwnSearchPostgres if "://" in store_target else _OwnSearchSQLite
    store = kind(store_target)
    try:
        outcomes = await _call(openai_server, store)
        since = utc(2026, 4, 2)
        searched = len(store.searched)
        hits, noticed = await store.search_noticing(
            "Marta Porto", user_id="alice", since=since, any_word=True
        )
    finally:
        await store.close()
    _recalled(openai_server, outcomes)
    assert searched >= len(QUESTIONS)  # every turn's own search (and any follow-up)
    assert len(store.searched) == searched + 1 and hits and noticed is False
