"""Many calls in one process: N concurrent pipelines through one shared, capped summarizer.

Each call is a real Pipecat pipeline with its own ``ContextSummarizer``; all of them
summarize through ONE ``OpenAISummarizer(max_concurrency=CAP)`` against the local
OpenAI-protocol server (127.0.0.1). Prints the calls, the peak of summary requests in
flight at the server, the connections open while the calls ran and after the application
closed the summarizer, the wall time, and memory per call (tracemalloc). Not a test.

    .venv/bin/python benchmarks/many_calls.py [--calls 200] [--turns 6] [--cap 8]
    .venv/bin/python benchmarks/many_calls.py --per-call-clients   # the pattern to avoid
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path

from loguru import logger

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.support.many_calls_scenario import run_many_calls  # noqa: E402


async def main() -> None:
    """Run the scenario and print its figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--turns", type=int, default=6)
    parser.add_argument("--cap", type=int, default=8)
    parser.add_argument("--summary-delay", type=float, default=0.02)
    parser.add_argument(
        "--per-call-clients",
        action="store_true",
        help="the pattern to avoid: one uncapped OpenAISummarizer per call, never closed",
    )
    args = parser.parse_args()
    logger.remove()
    logger.add(sys.stderr, level="WARNING")
    figures, _, _ = await run_many_calls(
        calls=args.calls,
        turns=args.turns,
        cap=args.cap,
        summary_delay=args.summary_delay,
        per_call_clients=args.per_call_clients,
    )
    print(f"calls                         {figures.calls} ({figures.turns} user turns each)")
    print(f"summary requests / applied    {figures.summary_requests} / {figures.applied}")
    print(f"failed                        {figures.failed}")
    cap = "none" if args.per_call_clients else figures.cap
    print(f"peak in flight at the server  {figures.peak_in_flight} (cap {cap})")
    print(f"connections while running     {figures.connections_during}")
    print(f"connections after the calls   {figures.connections_after_close}")
    print(f"ResourceWarnings              {figures.resource_warnings}")
    print(f"cross-talk / lost turns       {len(figures.cross_talk)} / {len(figures.lost)}")
    print(f"seconds (tracemalloc on)      {figures.seconds:.1f}")
    print(f"KB per call held after run    {figures.per_call_kb:.1f} (all code)")
    print(f"  of which allocated here     {figures.per_call_package_kb:.1f} (pipecat_summarizer)")
    print(f"KB per fresh processor        {figures.per_processor_kb:.1f} (with its context)")


if __name__ == "__main__":
    asyncio.run(main())
