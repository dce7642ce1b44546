"""Recall latency: the archive's answer time at 1k, 10k and 100k archived messages.

For each size and backend (SQLite file, and a throwaway PostgreSQL server when the Debian
binaries are there), the archive is filled with synthetic conversation messages of one
caller spread over calls (plus as many of other callers, so the caller filter has work to
do), then the recall step's archive work for one turn is timed: the ranked any-word search
of the caller's archive and the reads of the messages that followed the first hits, exactly
as ``RecallStep`` does it (``RecallStep.hits_for_turn`` with an unlimited budget), p50/p99
over the queries. The per-turn budget is 10 ms by default (``RecallParams.latency_budget_s``).
The stores are created by this code (schema v3: the caller inside the full-text index;
on PostgreSQL a GIN index without a pending list). The timing starts right after the bulk
load: no ANALYZE has run on PostgreSQL (autovacuum may come by during the timing), the
least favourable state for its planner.

    .venv/bin/python benchmarks/recall.py [--sizes 1000 10000 100000] [--queries 300]
    .venv/bin/python benchmarks/recall.py --corpus /path/to/locomo10.zip

The default corpus is synthetic (a 150-word topic vocabulary: every topic word is in ~3% of
the messages, a pessimistic case for an any-word ranked search). ``--corpus`` takes the
messages and the questions from LoCoMo instead (its ~6,000 dialog lines, repeated across
calls up to the size; each question as the turn's query).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from pipecat_summarizer._recall.step import RecallStep  # noqa: E402
from pipecat_summarizer.params import RecallParams  # noqa: E402
from pipecat_summarizer.store import open_store  # noqa: E402
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
    n: int, user_id: str, rng: random.Random, *, calls: int = 20, lines: list[str] | None = None
) -> list:
    per_call = max(1, n // calls)
    out = []
    for i in range(n):
        call = f"{user_id}-call-{i // per_call}"
        text = lines[i % len(lines)] if lines else sentence(rng)
        role = "user" if i % 2 == 0 else "assistant"
        out.append(
            ArchivedMessage(
                call_id=call,
                position=i % per_call,
                role=role,
                content=text,
                message_json=json.dumps({"role": role, "content": text}),
                turn=(i % per_call) // 2,
                at=1_700_000_000 + i,
                user_id=user_id,
            )
        )
    return out


async def fill(store, n: int, rng: random.Random, lines: list[str] | None = None) -> None:
    batch = 2000
    records = messages(n, "caller", rng, lines=lines) + messages(n, "other", rng, lines=lines)
    for i in range(0, len(records), batch):
        await store.write(records[i : i + batch])


async def time_recall(
    store, queries: int, rng: random.Random, questions: list[str] | None = None
) -> list[float]:
    step = RecallStep(
        store, RecallParams(latency_budget_s=60.0), call_id="caller-call-0", user_id="caller"
    )
    for _ in range(10):  # warm caches and the connection
        await step.hits_for_turn(" ".join(rng.sample(WORDS, 3)))
    samples = []
    for _ in range(queries):
        if questions:
            query = rng.choice(questions)
        else:
            query = f"What was the {' '.join(rng.sample(WORDS, 3))} again?"
        t0 = time.perf_counter()
        (hits, _replies), how = await step.hits_for_turn(query)
        samples.append((time.perf_counter() - t0) * 1000)
        assert how == "on_time"
    return samples


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
    return statistics.quantiles(values, n=100, method="inclusive")[int(q) - 1]


async def run(
    sizes: list[int], queries: int, postgres: bool, corpus: str | None = None
) -> list[tuple]:
    lines, questions = locomo_corpus(corpus) if corpus else (None, None)
    rows = []
    targets: dict[str, str] = {}
    server = None
    with tempfile.TemporaryDirectory() as tmp:
        try:
            if postgres:
                try:
                    from tests.support.pg_server import PgServer

                    server = PgServer()
                except Exception as e:  # noqa: BLE001 (a benchmark: say why and go on)
                    print(f"PostgreSQL skipped: {e}", file=sys.stderr)
            for n in sizes:
                targets = {"SQLite": str(Path(tmp) / f"recall_{n}.db")}
                if server is not None:
                    targets["PostgreSQL"] = server.create_database(f"recall_{n}")
                for backend, target in targets.items():
                    rng = random.Random(n)
                    store = open_store(target)
                    try:
                        t0 = time.perf_counter()
                        await fill(store, n, rng, lines)
                        filled = time.perf_counter() - t0
                        samples = await time_recall(store, queries, rng, questions)
                    finally:
                        await store.close()
                    row = (
                        backend,
                        n,
                        statistics.median(samples),
                        pct(samples, 99),
                        max(samples),
                        filled,
                    )
                    rows.append(row)
                    print(
                        f"{backend:10s} {n:>7,} archived: p50 {row[2]:.2f} ms  p99 {row[3]:.2f} ms"
                        f"  max {row[4]:.2f} ms  (filled in {filled:.1f}s)",
                        file=sys.stderr,
                        flush=True,
                    )
        finally:
            if server is not None:
                server.destroy()
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1000, 10000, 100000])
    parser.add_argument("--queries", type=int, default=300)
    parser.add_argument("--no-postgres", action="store_true")
    parser.add_argument("--corpus", metavar="LOCOMO", help="LoCoMo zip/JSON: real lines, questions")
    args = parser.parse_args(argv)
    rules = {n: asyncio.run(time_rules(n)) for n in (20, 60)}
    rows = asyncio.run(run(args.sizes, args.queries, not args.no_postgres, args.corpus))
    budget = RecallParams().latency_budget_s * 1000
    corpus = "LoCoMo lines and questions" if args.corpus else "synthetic"
    print(
        f"recall step's archive work per turn ({corpus}; {args.queries} queries; "
        f"budget {budget:.0f} ms)"
    )
    print(f"{'backend':<11}{'archived':>10}{'p50 ms':>10}{'p99 ms':>10}{'max ms':>10}")
    for backend, n, p50, p99, worst, _ in rows:
        print(f"{backend:<11}{n:>10,}{p50:>10.2f}{p99:>10.2f}{worst:>10.2f}")
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    print(f"(load average at the end: {load} on {os.cpu_count()} CPUs: a shared machine's tails)")
    print("recall step's own rules per turn (an archive answering at once, 20 hits)")
    for n, samples in rules.items():
        print(
            f"{n} messages in context: p50 {statistics.median(samples):.2f} ms, "
            f"p99 {pct(samples, 99):.2f} ms"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
