"""Checks the simulated clock against the wall clock: the same call, the same event order.

Replays the first turns of the bundled nutrition call with a call model scaled down by
``--factor`` (every duration multiplied by it, so a 35-second exchange takes 0.7 s at 0.02),
once on the replay's simulated clock and once in wall time on a standard event loop, and
prints for each strategy the turns at which summaries were requested and applied, the
requested / applied / discarded counts and the main LLM's input tokens. The two runs agree
when processing stays well below the scaled gaps between events; a mismatch says the factor
is too small for this machine, not that the simulated run is wrong. Not a test: wall-clock
runs depend on the machine's load. It takes about ``turns x 35 x factor`` seconds per strategy.

    .venv/bin/python benchmarks/realtime_order.py --turns 24 --factor 0.02
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path

from loguru import logger

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from pipecat_summarizer_cli.replay import clock  # noqa: E402
from pipecat_summarizer_cli.replay.backends import extractive_backend  # noqa: E402
from pipecat_summarizer_cli.replay.runner import run_all  # noqa: E402
from pipecat_summarizer_cli.replay.timing import CallModel, Span  # noqa: E402
from pipecat_summarizer_cli.replay.transcript import (  # noqa: E402
    load_transcript,
    transcript_from_messages,
)


def figures(results) -> dict[str, tuple]:
    return {
        r.strategy: (
            tuple(r.requested_turns),
            tuple(r.applied_turns),
            (len(r.summary_calls), r.summaries_applied, r.summaries_discarded),
            sum(q.total for q in r.requests),
        )
        for r in results
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--turns", type=int, default=24)
    parser.add_argument("--factor", type=float, default=0.02)
    parser.add_argument(
        "--summary-latency", default="20-40", help="seconds before the scaling (default 20-40)"
    )
    args = parser.parse_args()
    logger.remove()
    full = load_transcript(ROOT / "pipecat_summarizer_cli/replay/data/nutrition_call.jsonl")
    last = full.turns[args.turns - 1] if args.turns < len(full.turns) else None
    messages = full.messages
    if last is not None:  # the messages up to the end of the chosen turn
        end = messages.index(full.turns[args.turns].user_message)
        messages = messages[:end]
    transcript = transcript_from_messages(messages, name=f"nutrition_call[:{args.turns}]")
    model = CallModel(summary_latency_s=Span.parse(args.summary_latency)).scaled(args.factor)
    kwargs = {"backend": extractive_backend(), "model": model}
    simulated = figures(clock.run(run_all(transcript, **kwargs)))
    wall = figures(asyncio.run(run_all(transcript, simulated=False, **kwargs)))
    print(
        f"{transcript.name}, call model x{args.factor:g} "
        f"(summary latency {args.summary_latency} s before scaling)\n"
    )
    for name in simulated:
        same = "same" if simulated[name] == wall[name] else "DIFFERENT"
        for label, f in (("simulated", simulated[name]), ("wall time", wall[name])):
            requested, applied, counts, tokens = f
            print(
                f"{name:<20} {label:<10} requested at {list(requested)}, applied at "
                f"{list(applied)}; requested/applied/discarded {counts}; {tokens:,} tokens"
            )
        print(f"{'':<20} -> {same}\n")


if __name__ == "__main__":
    main()
