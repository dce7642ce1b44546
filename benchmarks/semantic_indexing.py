"""Semantic indexing and the event loop: how late a periodic tick runs while a call's
:class:`~pipecat_summarizer._recall.semantic.SemanticIndex` embeds a returning caller's archive.

A real SQLite file holds ``--messages`` archived messages (default 20,000) of one caller, spread
over ``--calls`` ended calls (default 50, the default ``SemanticRecallParams.max_calls``). The real
model (``--model``: WordLlama by default, or MiniLM) is loaded first, as an application does.
Then a coroutine ticks every ``--tick-ms`` (5 ms) and records how late each tick wakes, once
as is and once after crossing ``--hops`` (20) more loop iterations, as a frame does through a
pipeline's queues (work that slices itself on the loop delays every one of them):

* ``idle``: the loop with nothing else to do (the machine's floor);
* ``indexing``: while ``SemanticIndex.refresh`` reads and embeds the whole archive, as at the
  start of a returning caller's call. Every frame of every call in the process waits as long
  as these ticks do.

Run: ``.venv/bin/python benchmarks/semantic_indexing.py`` (``--messages``, ``--calls``,
``--tick-ms``, ``--idle-s``, ``--hops``). Prints the p50, p99 and max lateness of the tick in
each phase (milliseconds), the ticks that ran, and how long indexing took.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from pipecat_summarizer._recall.embedding import load_semantic_model  # noqa: E402
from pipecat_summarizer._recall.semantic import SemanticIndex  # noqa: E402
from pipecat_summarizer.params import SemanticRecallParams  # noqa: E402
from pipecat_summarizer.store import SQLiteMemoryStore  # noqa: E402
from pipecat_summarizer.store.records import ArchivedMessage, CallRecord  # noqa: E402

SUBJECTS = ["my sister", "the dog", "our landlord", "my manager", "the kids", "my doctor"]
VERBS = ["called about", "asked me about", "keeps forgetting", "wants to change", "booked"]
OBJECTS = [
    "the trip to Lisbon in May",
    "a table for six on Friday night",
    "the insurance claim for the broken window",
    "the running plan for the half marathon",
    "a vegetarian lunch without peanuts",
    "the parent-teacher meeting next Tuesday",
]


def _text(i: int) -> str:
    """A voice-call sized message (about 100-200 characters), varied enough to tokenize."""
    s, v, o = SUBJECTS[i % 6], VERBS[(i // 6) % 5], OBJECTS[(i // 30) % 6]
    return f"Yesterday {s} {v} {o}, and I said we would sort it out by the weekend ({i})."


async def build(path: Path, messages: int, calls: int, user_id: str = "u") -> SQLiteMemoryStore:
    """A store with ``messages`` archived messages of ``user_id`` over ``calls`` ended calls."""
    store = SQLiteMemoryStore(path)
    await store.open()
    per_call = max(1, messages // calls)
    now = time.time()
    for c in range(calls):
        call_id = f"earlier-{c}"
        n = per_call if c < calls - 1 else messages - per_call * (calls - 1)
        records: list = [
            CallRecord(call_id, user_id=user_id, started_at=now - 1000 + c, ended_at=now - 999 + c)
        ]
        for p in range(n):
            i = c * per_call + p
            role = "user" if p % 2 == 0 else "assistant"
            records.append(
                ArchivedMessage(call_id, p, role, _text(i), "{}", user_id=user_id, turn=p // 2)
            )
        await store.write(records)
    return store


async def ticks_while(
    work: asyncio.Future | None, tick_s: float, idle_s: float, hops: int = 0
) -> list[float]:
    """Lateness (ms) of a ``tick_s`` periodic tick that then crosses ``hops`` more loop
    iterations (as a frame does through a pipeline's queues), until ``work`` is done (or for
    ``idle_s`` without work)."""
    late: list[float] = []
    end = time.perf_counter() + idle_s
    while (work is not None and not work.done()) or (work is None and time.perf_counter() < end):
        due = time.perf_counter() + tick_s
        await asyncio.sleep(tick_s)
        for _ in range(hops):
            await asyncio.sleep(0)
        late.append((time.perf_counter() - due) * 1000)
    return late


def _row(name: str, late: list[float]) -> str:
    data = sorted(late) or [0.0]
    p99 = data[int(0.99 * (len(data) - 1))]
    return (
        f"{name:<20} ticks {len(late):>6}  p50 {statistics.median(data):7.2f}  "
        f"p99 {p99:7.2f}  max {max(data):7.2f}"
    )


async def main(args: argparse.Namespace) -> None:
    """Build the archive, load the model, then tick idle and while indexing."""
    tick_s = args.tick_ms / 1000
    with tempfile.TemporaryDirectory() as tmp:
        store = await build(Path(tmp) / "bench.db", args.messages, args.calls)
        options = SemanticRecallParams(max_calls=max(args.calls, 1), model=args.model)
        load_semantic_model(options)
        rows = []
        for hops in (0, args.hops):
            idle = await ticks_while(None, tick_s, args.idle_s, hops)
            index = SemanticIndex(options, call_id="live", user_id="u")
            t0 = time.perf_counter()
            work = asyncio.ensure_future(index.refresh(store))
            busy = await ticks_while(work, tick_s, 0, hops)
            embedded = await work
            took = time.perf_counter() - t0
            rows += [_row(f"idle, {hops} hops", idle), _row(f"indexing, {hops} hops", busy)]
            rows.append(f"  ({embedded} messages embedded in {took:.2f} s)")
        await store.close()
    print(
        f"{args.messages} archived messages over {args.calls} calls; a tick every "
        f"{args.tick_ms:g} ms, then n more loop iterations (a frame's hops); lateness in ms"
    )
    print("\n".join(rows))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=20_000)
    parser.add_argument("--calls", type=int, default=50)
    parser.add_argument("--tick-ms", type=float, default=5.0)
    parser.add_argument("--idle-s", type=float, default=2.0)
    parser.add_argument("--hops", type=int, default=20)
    # WordLlama: the figures in benchmarks/README.md; minilm (the default model) indexes
    # ~70-120 messages a second: use --messages 2000 with it
    parser.add_argument("--model", choices=("wordllama", "minilm"), default="wordllama")
    asyncio.run(main(parser.parse_args()))
