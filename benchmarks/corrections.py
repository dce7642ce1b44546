"""What reading corrections costs on the frame: the bundled calls' spoken turns, cold.

Each frame of a call reads the messages added since the last one for a correction's cue
(``_record/corrections.py``: ``has_cue``, then ``find_correction`` on the few that have a cue
and a value). This replays the user and assistant messages of the three bundled calls
(``nutrition_call``, ``orders_call``, ``support_call``) through
``ConversationRecord.correct`` two at a time, as a frame brings them (a caller's turn and the
answer before it), with a pinned fact and a summary in place, and prints:

* per message: ``has_cue`` on a string never seen (its cache misses, as a new turn does);
* per frame: ``ConversationRecord.correct`` on the frame's new messages (what
  ``SharedContext.read_said`` runs on each context frame).

Each figure is the best of ``--repeat`` timings of the same item (the machine's noise only
adds), in microseconds: p50, p90, p99 and the mean over the items; CPU time is the process's
(``time.process_time_ns``), wall time ``perf_counter_ns``.

    .venv/bin/python benchmarks/corrections.py [--repeat 7]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

from pipecat_summarizer import LLMContextSummaryConfig
from pipecat_summarizer._record import corrections
from pipecat_summarizer._record.record import ConversationRecord
from pipecat_summarizer._text.messages import spoken_text

DATA = Path(__file__).resolve().parents[1] / "pipecat_summarizer_cli" / "replay" / "data"
CALLS = ("nutrition_call", "orders_call", "support_call")
SUMMARY = "FACTS:\n- The caller's appointment is on 14 March at 3pm.\n- Order 4417, 2 tickets."


def spoken(call: str) -> list[dict]:
    """The call's user and assistant messages with text, in order."""
    out = []
    for line in (DATA / f"{call}.jsonl").read_text().splitlines():
        m = json.loads(line) if line.strip() else None
        if isinstance(m, dict) and m.get("role") in ("user", "assistant"):
            if isinstance(m.get("content"), str) and m["content"].strip():
                out.append({"role": m["role"], "content": m["content"]})
    return out


def best(run: Callable[[], object], repeat: int) -> tuple[float, float]:
    """The least CPU and wall time of ``repeat`` runs, in microseconds."""
    cpu, wall = [], []
    for _ in range(repeat):
        corrections._said.cache_clear()  # a new turn's text: never seen
        c0, w0 = time.process_time_ns(), time.perf_counter_ns()
        run()
        cpu.append(time.process_time_ns() - c0)
        wall.append(time.perf_counter_ns() - w0)
    return min(cpu) / 1000, min(wall) / 1000


def row(name: str, samples: list[tuple[float, float]]) -> str:
    def stats(values: list[float]) -> str:
        values = sorted(values)
        pick = [values[min(len(values) - 1, int(q * len(values)))] for q in (0.5, 0.9, 0.99)]
        return " ".join(f"{v:7.1f}" for v in (*pick, statistics.mean(values)))

    cpu, wall = [s[0] for s in samples], [s[1] for s in samples]
    return f"{name:<22}{len(samples):>6}  {stats(cpu)}   {stats(wall)}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=7, help="timings of each item (best)")
    args = parser.parse_args()
    messages = [m for call in CALLS for m in spoken(call)]
    texts = [spoken_text(m) for m in messages]
    cued = sum(1 for t in texts if corrections.has_cue(t))
    per_message = [best(partial(corrections.has_cue, t), args.repeat) for t in texts]

    per_frame = []
    for call in CALLS:
        said = spoken(call)
        record = ConversationRecord(LLMContextSummaryConfig())
        record.facts.pin("appointment", "The appointment is on 14 March", source="llm")
        context: list = [{"role": "user", "content": f"Conversation summary: {SUMMARY}"}]
        record.summary_message, record.summary_text = context[0], SUMMARY
        for i in range(0, len(said), 2):
            fresh = said[i : i + 2]
            context.extend(fresh)
            frame = [dict(m) for m in fresh]  # the frame's messages (their texts uncached)
            run = partial(record.correct, context, frame, (), in_flight=True)
            per_frame.append(best(run, args.repeat))
    print(
        f"{len(texts)} spoken messages of {', '.join(CALLS)}; {cued} with a cue and a value; "
        f"best of {args.repeat} per item"
    )
    print(f"{'':<22}{'items':>6}  {'CPU us: p50     p90     p99    mean':<36}  wall us: same")
    print(row("has_cue per message", per_message))
    print(row("correct per frame", per_frame))


if __name__ == "__main__":
    main()
