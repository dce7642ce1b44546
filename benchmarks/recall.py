"""Recall latency: the archive's answer time at 1k, 10k, 100k and 1M archived messages.

For each size and backend (a SQLite file, and a throwaway PostgreSQL server when the Debian
binaries are there, up to ``--pg-max`` messages), the archive holds one caller's messages
spread over calls of 60 lines (plus as many of other callers, at most 100,000, so the
caller filter has work to do), then for each query two times are taken: the store's
``search`` alone (the ranked any-word search of the caller's archive, as recall sends it),
and the recall step's archive work for one turn (that search and the batched read of the
messages that followed the first hits, ``RecallStep.hits_for_turn`` with an unlimited
budget); p50/p99 over the queries. The per-turn budget is 10 ms by default
(``RecallParams.latency_budget_s``). ``--phases`` adds, on SQLite, the CPU time of each phase
of a turn on the store's thread (the choice of the words ranked, warm and cold, the window's
edge, the ranking, the replies' read); ``--quality``, on SQLite, how often the hits hold a
message with all the question's words (the answer, in the voice corpus).

What a bot would see, not the benchmark's own state: a SQLite file is read into the OS page
cache before it is timed (a cached archive's pages were otherwise wherever the machine's
last hours left them: at 1M a call's new question then read ~320 KiB from storage on
average, and their p99 was 40-70 ms where it is 10 ms warm); ``--cold`` takes the file
out of the page cache before the new questions instead (a call after the machine's memory
went to other work). Every
SQLite size is timed before PostgreSQL's server starts, so nothing of its work after a bulk
load (autovacuum, the checkpointer, its files written back) runs beside SQLite's timings.
Below the table, the slowest 1% of each pass is split into CPU time (by thread; garbage
collections apart), the wait for a CPU while other processes ran, and the rest (storage
reads), beside the p99 without the waits for a CPU (benchmarks/_tail.py): nothing is left
out of the p99s.

The archive is written through the store's own write path (``store.write``, 20,000
records per transaction); SQLite files are kept under ``--cache`` (default ``/tmp/G``, by
corpus and size: a 1M archive takes minutes to write once) and reused. PostgreSQL's are
written again each run and settled before the timing (below); with ``--no-pg-settle`` they
are timed right after the bulk load: no ANALYZE has run (autovacuum may come by during the
timing), the least favourable state for its planner. On PostgreSQL
recall's search (any word, by caller) reads the callers' word index (schema v5,
``message_words``); the line per size gives its size on disk beside the messages'. Right
after the bulk load none of the index's pages is all-visible (at most what an autovacuum
pass during the load marked), so its index-only scans also read each row from the table;
``--pg-vacuum`` times each PostgreSQL archive again (the ``PG vacuumed`` row) once its word
index is vacuumed, as the store's autovacuum settings keep it (all but the latest ~5,000
rows), the server restarted in between (its shared buffers empty). Since the twelfth round
the archive is settled first by default (``--no-pg-settle``: as above): the whole archive
vacuumed and analyzed after the load (its pages all-visible, hint bits set, the planner's
statistics), then a checkpoint, a deployed store's steady state. Unsettled, what was timed
depended on whether autovacuum had passed during the load: at 100k a search not vacuumed
read ~3,250 shared buffers with 6,254 heap fetches, vacuumed ~350 and none.

    .venv/bin/python benchmarks/recall.py [--sizes 1000 10000 100000 1000000] [--queries 500]
    .venv/bin/python benchmarks/recall.py --sizes 1000000 --no-postgres --phases
    .venv/bin/python benchmarks/recall.py --sizes 1000000 --no-postgres --cold
    .venv/bin/python benchmarks/recall.py --sizes 100000 --pg-vacuum --no-rules
    .venv/bin/python benchmarks/recall.py --sizes 100000 --no-rules --no-pg-settle
    .venv/bin/python benchmarks/recall.py --corpus synthetic
    .venv/bin/python benchmarks/recall.py --corpus /path/to/locomo10.zip

The default corpus (``voice``, benchmarks/voice_corpus.py) is voice-agent calls at six
desks with a returning caller's questions. ``synthetic`` is the earlier word salad (a
150-word topic vocabulary: every topic word is in ~3% of the messages, a pessimistic case
for an any-word ranked search). A LoCoMo path takes the messages and the questions from
LoCoMo (its ~6,000 dialog lines, repeated across calls up to the size; each question as
the turn's query).
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import os
import random
import statistics
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import voice_corpus  # noqa: E402
from _recall_sqlite import PHASES, sqlite_phases, sqlite_quality  # noqa: E402
from _settle import vacuumed  # noqa: E402
from _tail import Spent, TurnClock, pool_backends, tail_line  # noqa: E402
from loguru import logger  # noqa: E402

from pipecat_summarizer._recall.step import RecallStep, search_words  # noqa: E402
from pipecat_summarizer.params import RecallParams  # noqa: E402
from pipecat_summarizer.store import SQLiteMemoryStore, open_store  # noqa: E402
from pipecat_summarizer.store import _sqlite_search as sqlite_search  # noqa: E402
from pipecat_summarizer.store.base import query_words  # noqa: E402
from pipecat_summarizer.store.records import ArchivedMessage  # noqa: E402

WORDS = (
    "hotel booking room breakfast dinner flight train ticket refund invoice doctor appointment "
    "allergy peanut medication insurance policy claim address street city lisbon paris berlin "
    "madrid rome tokyo account password email phone number order parcel delivery courier "
    "monday tuesday wednesday thursday friday saturday sunday morning evening tonight "
    "birthday wedding anniversary gift daughter son wife husband dog cat garden kitchen car "
    "bike repair engine battery tyre warranty receipt store jacket shoes size colour blue red "
    "green concert theatre museum gallery painting guitar piano lesson teacher school exam"
).split()
#: Another caller's messages in the archive: as many as the caller's, at most this many.
OTHERS_MAX = 100_000
#: Bumped when a corpus changes: cached archives of another version are not reused.
CORPUS_VERSION = 1
FILLER = "I think that we could maybe do it later if it works for you and the team".split()


def sentence(rng: random.Random) -> str:
    topic = rng.sample(WORDS, 4)
    filler = rng.sample(FILLER, 6)
    words = topic + filler
    rng.shuffle(words)
    return " ".join(words).capitalize() + (
        "?" if rng.random() < 0.3 else f". Reference {rng.randint(1000, 99999)}."
    )


def locomo_corpus(path: str) -> tuple[list[str], list[str]]:
    """LoCoMo's dialog lines and questions."""
    from pipecat_summarizer_cli.replay.locomo import load_samples

    lines, questions = [], []
    for _sid, sample in load_samples(path):
        conversation = sample.get("conversation", sample)
        for key, value in conversation.items():
            if key.startswith("session_") and isinstance(value, list):
                lines += [str(t.get("text") or "") for t in value if t.get("text")]
        questions += [str(q.get("question")) for q in sample.get("qa", []) if q.get("question")]
    return lines, questions


def messages(
    n: int,
    user_id: str,
    rng: random.Random,
    *,
    per_call: int = 60,
    lines: list[str] | None = None,
    legacy: bool = False,
) -> Iterator[ArchivedMessage]:
    """``n`` archived messages of ``user_id``, in calls of ``per_call`` lines, a day apart
    (``legacy``: a second apart, as this benchmark wrote them before)."""
    for i in range(n):
        call = f"{user_id}-call-{i // per_call}"
        text = lines[i % len(lines)] if lines else sentence(rng)
        role = "user" if i % 2 == 0 else "assistant"
        at = (
            1_700_000_000 + i if legacy else 1_600_000_000 + (i // per_call) * 86_400 + i % per_call
        )
        yield ArchivedMessage(
            call_id=call,
            position=i % per_call,
            role=role,
            content=text,
            message_json=json.dumps({"role": role, "content": text}),
            turn=(i % per_call) // 2,
            at=at,
            user_id=user_id,
        )


def corpus_lines(corpus: str, n: int, seed: int) -> list[str] | None:
    """The lines of ``n`` messages of a corpus (``None``: the synthetic word salad)."""
    if corpus == "voice":
        return voice_corpus.lines(n, seed)
    if corpus == "synthetic":
        return None
    return locomo_corpus(corpus)[0]


async def fill(store, n: int, corpus: str | random.Random = "voice", batch: int = 20_000) -> None:
    """The caller's ``n`` messages and ``min(n, 100k)`` of another caller's, written through
    ``store.write`` in transactions of ``batch`` records. A ``random.Random`` for
    ``corpus`` (frame_delay.py's template) writes the synthetic corpus drawn from it as
    this benchmark did before: 20 calls per caller, as many of the other caller's, 2,000
    records per transaction."""
    if isinstance(corpus, random.Random):
        per_call = max(1, n // 20)
        records = itertools.chain(
            messages(n, "caller", corpus, per_call=per_call, legacy=True),
            messages(n, "other", corpus, per_call=per_call, legacy=True),
        )
        batch = 2000
    else:
        records = itertools.chain.from_iterable(
            messages(count, user_id, rng, lines=corpus_lines(corpus, count, seed))
            for user_id, count, seed in (("caller", n, n), ("other", min(n, OTHERS_MAX), n + 1))
            for rng in (random.Random(seed),)
        )
    while chunk := list(itertools.islice(records, batch)):
        await store.write(chunk)


def corpus_questions(corpus: str, rng: random.Random, n: int) -> list[str]:
    """The turns' queries."""
    if corpus == "voice":
        return voice_corpus.questions(n, rng.randrange(1 << 30))
    if corpus == "synthetic":
        return [f"What was the {' '.join(rng.sample(WORDS, 3))} again?" for _ in range(n)]
    questions = locomo_corpus(corpus)[1]
    return [rng.choice(questions) for _ in range(n)]


async def time_recall(
    store,
    queries: list[str],
    repeat: int = 3,
    fresh: Sequence[str] = (),
    before_new: Callable[[], None] | None = None,
) -> tuple[list[float], list[float], list[float], list[float], dict[str, list[Spent]]]:
    """Per query (ms): the store's search alone, the step's archive work, and its
    uncontended time (what a machine running nothing else would take): on SQLite the
    search's CPU time on the store's thread; on PostgreSQL the CPU time of the step's
    archive work on the server's backends and on this thread, the least of ``repeat``
    runs (network and scheduling waits are not in it). Then the step's archive work for
    ``fresh`` queries, none asked before in this process, timed first: a call's new
    question, where the other passes repeat one (its pages and word counts already read);
    ``before_new`` runs before them (``--cold``: the file out of the page cache). Last,
    where the new and the turn passes' wall time went (see ``_tail``)."""
    params = RecallParams(latency_budget_s=60.0)
    step = RecallStep(store, params, call_id="caller-call-0", user_id="caller")
    for query in queries[:10]:  # warm caches and the connection
        await step.hits_for_turn(query)
    pids: list[int] = []
    if not isinstance(store, SQLiteMemoryStore):
        pids = await pool_backends(store)
    clock = TurnClock(pids)
    spent: dict[str, list[Spent]] = {"new": [], "turn": []}
    new = []
    if before_new is not None:
        before_new()
    try:
        for query in fresh:
            started = clock.start()
            (_hits, _replies), how = await step.hits_for_turn(query)
            spent["new"].append(clock.stop(started))
            new.append(spent["new"][-1].wall)
            assert how == "on_time"
        search, turn, least = [], [], []
        # separate passes (the second in another order): a query's pages just read by one
        # would flatter the other
        for query in queries:
            words = search_words(query)
            t0 = time.perf_counter()
            await store.search(words, user_id="caller", limit=params.search_limit, any_word=True)
            search.append((time.perf_counter() - t0) * 1000)
        for query in reversed(queries):
            started = clock.start()
            (_hits, _replies), how = await step.hits_for_turn(query)
            spent["turn"].append(clock.stop(started))
            turn.append(spent["turn"][-1].wall)
            assert how == "on_time"
    finally:
        clock.close()
    if isinstance(store, SQLiteMemoryStore):
        # the search's CPU time on the store's thread: what it takes on a machine running
        # nothing else (a shared machine's preemption is not in it; the pages are cached)
        least = []
        for query in queries:
            words = query_words(search_words(query))

            def find(conn, words=words) -> float:
                t0 = time.thread_time()
                sqlite_search.find(
                    conn, store._df, words, "caller", None, params.search_limit, True
                )
                return (time.thread_time() - t0) * 1000

            least.append(await store._run(find))
        return search, turn, least, new, spent
    # PostgreSQL: the CPU time of the turn's archive work, on the server's backends (their
    # /proc schedstat) and on this thread (the step, asyncpg's decoding)
    for query in queries:
        runs = []
        for _ in range(repeat):
            s0 = _server_cpu_ns(pids)
            t0 = time.thread_time()
            await step.hits_for_turn(query)
            t1 = time.thread_time()
            runs.append((t1 - t0) * 1000 + (_server_cpu_ns(pids) - s0) / 1e6)
        least.append(min(runs))
    return search, turn, least, new, spent


async def _pg_sizes(store) -> str:
    """The PostgreSQL archive's size on disk: the messages (with their GIN index) and the
    callers' word index that recall's search reads (schema v5), when there is one."""
    rows = await store._fetch(
        "SELECT relname, pg_total_relation_size(oid) FROM pg_class "
        "WHERE relname IN ('messages', 'message_words') AND relkind = 'r'"
    )
    sizes = {r[0]: r[1] / 2**20 for r in rows}
    words = sizes.get("message_words")
    index = f", word index {words:.0f} MB" if words is not None else ""
    return f"messages {sizes.get('messages', 0):.0f} MB{index}"


#: The row of a PostgreSQL archive timed again after a VACUUM of the word index (--pg-vacuum).
VACUUM_LABEL = "PG vacuumed"


async def _vacuumed(server, dsn: str) -> None:
    """The archive's word index vacuumed (its pages all-visible: a search's index-only
    scans read no row from the table; what autovacuum does within a minute of the writes
    with the store's settings, ``_postgres_schema.WORDS_AUTOVACUUM``), then the server
    restarted: no page either pass read is left in its shared buffers (the OS page cache
    keeps them, as for the first pass, whose pages were just written)."""
    import asyncpg

    conn = await asyncpg.connect(dsn)
    try:
        await conn.execute("VACUUM message_words")
    finally:
        await conn.close()
    server.stop()
    server.start()


async def _settled(dsn: str) -> str:
    """``--pg-settle``: the archive as autovacuum leaves it (:func:`_settle.vacuumed`)."""
    return f"; vacuumed, analyzed, checkpointed in {await vacuumed(dsn):.1f}s"


def _server_cpu_ns(pids: list[int]) -> int:
    """Nanoseconds the processes ``pids`` have run on a CPU (Linux schedstat)."""
    total = 0
    for pid in pids:
        try:
            total += int(Path(f"/proc/{pid}/schedstat").read_text().split()[0])
        except (OSError, ValueError, IndexError):
            pass
    return total


class _InstantArchive:
    """Answers at once with 20 hits (and their next messages): times the rules alone."""

    def __init__(self, rng: random.Random):
        self.rng = rng

    async def search(self, query, **kwargs):
        from pipecat_summarizer.store.records import SearchHit

        return [
            SearchHit("c0", i, 1, 1.0, "user", sentence(self.rng), "summarized", 1.0, "caller")
            for i in range(20)
        ]

    async def message(self, call_id, position):
        return None


async def time_rules(context_messages: int, turns: int = 300) -> list[float]:
    """The recall step's own work on a turn (query, in-view filter, render, placement) with
    an archive that answers at once: what recall adds besides waiting for the archive."""
    rng = random.Random(context_messages)
    messages = [{"role": "system", "content": "You are a helpful assistant."}]
    step = RecallStep(_InstantArchive(rng), RecallParams(latency_budget_s=60.0), call_id="c1")
    samples = []
    for i in range(turns):
        messages.append({"role": "assistant" if i % 2 else "user", "content": sentence(rng)})
        messages = messages[-context_messages:]
        messages.append({"role": "user", "content": f"What was the {rng.choice(WORDS)} again?"})
        step.message = None
        t0 = time.perf_counter()
        await step.prepare(lambda m=messages: m, lambda: ["A summary of the call. " * 40])
        samples.append((time.perf_counter() - t0) * 1000)
        messages.pop()
    return samples


def pct(values: list[float], q: float) -> float:
    """The ``q``-th percentile."""
    return statistics.quantiles(values, n=100, method="inclusive")[int(q) - 1]


def page_cache(path: str, cold: bool) -> None:
    """The SQLite file's pages in the OS page cache (read through once: a machine where
    the archive stays in memory), or out of it (``cold``: a call after the machine's memory
    went to other work; clean pages only, as the kernel drops them)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        if cold:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        else:
            while os.read(fd, 1 << 20):
                pass
    finally:
        os.close(fd)


async def run(
    sizes: list[int],
    n_queries: int,
    postgres: bool,
    corpus: str,
    cache: Path,
    pg_max: int,
    repeat: int = 3,
    phases: dict[int, dict[str, list[float]]] | None = None,
    quality: dict[int, tuple[int, float, float, float]] | None = None,
    cold: bool = False,
    pg_vacuum: bool = False,
    pg_settle: bool = False,
) -> list[tuple]:
    rows = []
    server = None
    name = corpus if corpus in ("voice", "synthetic") else "locomo"
    cache.mkdir(parents=True, exist_ok=True)
    # every SQLite size first: PostgreSQL's work after a bulk load (autovacuum, the
    # checkpointer) must not run beside SQLite's timings
    plan = [("SQLite", n) for n in sizes]
    pg = [("PostgreSQL", n) for n in sizes if n <= pg_max] if postgres else []
    # --pg-vacuum: each PostgreSQL archive timed again once vacuumed (VACUUM_LABEL)
    plan += [b for backend in pg for b in [backend, (VACUUM_LABEL, backend[1])][: 1 + pg_vacuum]]
    try:
        for backend, n in plan:
            if backend == "SQLite":
                target = str(cache / f"recall_{name}_v{CORPUS_VERSION}_{n}.db")
            else:
                if server is None:
                    try:
                        from tests.support.pg_server import PgServer

                        server = PgServer()
                    except Exception as e:  # noqa: BLE001 (a benchmark: say why and go on)
                        print(f"PostgreSQL skipped: {e}", file=sys.stderr)
                        break
                if backend == VACUUM_LABEL:
                    target = server.dsn_for(f"recall_{n}")
                    await _vacuumed(server, target)
                else:
                    target = server.create_database(f"recall_{n}")
            cached = backend == VACUUM_LABEL or backend == "SQLite" and Path(target).exists()
            store = open_store(target)
            try:
                t0 = time.perf_counter()
                if not cached:
                    partial = Path(target + ".partial")
                    if backend == "SQLite":  # written aside: a killed run leaves no half
                        partial.unlink(missing_ok=True)
                        store = open_store(str(partial))
                    await fill(store, n, corpus)
                    if backend == "SQLite":
                        await store.close()
                        partial.rename(target)
                        store = open_store(target)
                filled = time.perf_counter() - t0
                settled = ""
                if pg_settle and backend == "PostgreSQL":
                    settled = await _settled(target)
                queries = corpus_questions(corpus, random.Random(n), n_queries)
                # questions of another seed, none asked before in this process
                # (another seed for the vacuumed archive's pass: none asked in the first)
                seed = n + (2 if backend == VACUUM_LABEL else 1)
                fresh = [
                    q
                    for q in corpus_questions(corpus, random.Random(seed), n_queries)
                    if q not in set(queries)
                ]
                if backend == "SQLite":
                    # a stated page cache, not what the machine's last hour left in it
                    page_cache(target, cold=False)
                evict = (lambda t=target: page_cache(t, cold=True)) if cold else None
                search, turn, least, new, spent = await time_recall(
                    store, queries, repeat, fresh, evict if backend == "SQLite" else None
                )
                if phases is not None and backend == "SQLite":
                    phases[n] = await sqlite_phases(store, queries, RecallParams())
                if quality is not None and backend == "SQLite":
                    quality[n] = await sqlite_quality(store, queries, RecallParams())
                if backend != "SQLite":
                    how_big = await _pg_sizes(store)
            finally:
                await store.close()
            row = (backend, n, search, turn, least, new, spent)
            rows.append(row)
            how = ("cached" if cached else f"written in {filled:.1f}s") + settled
            if backend != "SQLite":
                how += f"; {how_big}"
            print(
                f"{backend:10s} {n:>9,} archived: search p50 {pct(search, 50):.2f} ms "
                f"p99 {pct(search, 99):.2f} ms; turn p50 {pct(turn, 50):.2f} ms "
                f"p99 {pct(turn, 99):.2f} ms; quiet p99 {pct(least, 99):.2f} ms "
                f"({how})",
                file=sys.stderr,
                flush=True,
            )
    finally:
        if server is not None:
            server.destroy()
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1000, 10_000, 100_000, 1_000_000])
    parser.add_argument("--queries", type=int, default=500)
    parser.add_argument("--no-postgres", action="store_true")
    parser.add_argument(
        "--pg-max", type=int, default=100_000, help="largest size measured on PostgreSQL"
    )
    parser.add_argument(
        "--corpus",
        default="voice",
        metavar="CORPUS",
        help="voice (default), synthetic, or a LoCoMo zip/JSON: its lines and questions",
    )
    parser.add_argument("--cache", type=Path, default=Path("/tmp/G"), help="SQLite archives")
    parser.add_argument("--no-rules", action="store_true", help="skip the step's own rules")
    parser.add_argument(
        "--repeat", type=int, default=3, help="back-to-back runs per query for the least time"
    )
    parser.add_argument(
        "--phases", action="store_true", help="SQLite: the CPU time of each phase of a turn"
    )
    parser.add_argument(
        "--quality", action="store_true", help="SQLite: how often the hits hold the answer"
    )
    parser.add_argument(
        "--cold",
        action="store_true",
        help="SQLite: the file out of the OS page cache before the new questions (default: "
        "read into it before timing)",
    )
    parser.add_argument(
        "--pg-vacuum",
        action="store_true",
        help="PostgreSQL: each archive timed again after a VACUUM of its word index (the "
        "first pass is right after the bulk load, no page all-visible)",
    )
    parser.add_argument(
        "--pg-settle",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="PostgreSQL: the whole archive vacuumed and analyzed, then a checkpoint, before "
        "anything is timed (a deployed store's steady state; --no-pg-settle: timed right "
        "after the bulk load, as before the twelfth round, where whether autovacuum had "
        "passed depends on how long the load took: bugs S15-F-4)",
    )
    args = parser.parse_args(argv)
    logger.remove()
    logger.add(sys.stderr, level="WARNING")
    rules = {} if args.no_rules else {n: asyncio.run(time_rules(n)) for n in (20, 60)}
    phases: dict[int, dict[str, list[float]]] | None = {} if args.phases else None
    quality: dict[int, tuple[int, float, float, float]] | None = {} if args.quality else None
    rows = asyncio.run(
        run(
            args.sizes,
            args.queries,
            not args.no_postgres,
            args.corpus,
            args.cache,
            args.pg_max,
            args.repeat,
            phases,
            quality,
            args.cold,
            args.pg_vacuum,
            args.pg_settle,
        )
    )
    budget = RecallParams().latency_budget_s * 1000
    print(
        f"recall's archive work per turn ({args.corpus} corpus; {args.queries} queries; "
        f"budget {budget:.0f} ms). search: the store's ranked search alone; turn: the "
        "search and the read of the hits' next messages (what the turn waits for); quiet: "
        "uncontended: the CPU time (SQLite: the search, on the store's thread; PostgreSQL: "
        "the turn's archive work, on the server's backends and the client, least of "
        f"{args.repeat} runs); new: the turn's archive work for questions not asked before in "
        "this process, timed first (the other columns repeat a question already asked). "
        "SQLite's file is read into the OS page cache before timing"
        + ("; out of it before the new questions (--cold)" if args.cold else "")
    )
    print(
        f"{'backend':<11}{'archived':>10}{'search p50':>12}{'search p99':>12}"
        f"{'turn p50':>10}{'turn p99':>10}{'turn max':>10}{'quiet p50':>11}{'quiet p99':>11}"
        f"{'new p50':>10}{'new p99':>10}"
    )
    for backend, n, search, turn, least, new, _spent in rows:
        print(
            f"{backend:<11}{n:>10,}{pct(search, 50):>12.2f}{pct(search, 99):>12.2f}"
            f"{pct(turn, 50):>10.2f}{pct(turn, 99):>10.2f}{max(turn):>10.2f}"
            f"{pct(least, 50):>11.2f}{pct(least, 99):>11.2f}"
            f"{pct(new, 50) if new else 0:>10.2f}{pct(new, 99) if new else 0:>10.2f}"
        )
    print(
        "where the slowest turns' time went (ms): CPU of this process (and of PostgreSQL's "
        "backends; garbage collections included), waiting for a CPU (other processes ran), "
        "other (blocked: storage reads, the threads' hand-over); nothing left out"
    )
    for backend, n, *_times, spent in rows:
        for name, turns in spent.items():
            print(f"{backend} {n:,} {name}: {tail_line(turns)}")
    if phases:
        print("SQLite, CPU time of each phase of a turn on the store's thread, p50 / p99 (ms)")
        print(f"{'archived':>10}" + "".join(f"{name:>18}" for name in PHASES))
        for n, by_phase in phases.items():
            print(
                f"{n:>10,}"
                + "".join(
                    f"{pct(by_phase[k], 50):>10.2f} / {pct(by_phase[k], 99):<5.2f}" for k in PHASES
                )
            )
    if quality:
        print(
            "SQLite, the questions whose words all stand in one of the caller's messages: "
            "the share whose hits hold one"
        )
        for n, (asked, top10, top_snippets, latest) in quality.items():
            print(
                f"{n:>10,}: {asked} questions; in the first 10 hits {top10:.1%}, in the "
                f"first {RecallParams().max_snippets} {top_snippets:.1%}; the latest one in "
                f"the first 10 {latest:.1%}"
            )
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    print(f"(load average at the end: {load} on {os.cpu_count()} CPUs: a shared machine's tails)")
    if rules:
        print("recall step's own rules per turn (an archive answering at once, 20 hits)")
    for n, samples in rules.items():
        print(
            f"{n} messages in context: p50 {statistics.median(samples):.2f} ms, "
            f"p99 {pct(samples, 99):.2f} ms"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
