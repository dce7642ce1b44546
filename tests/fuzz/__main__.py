"""Run fuzz seeds: ``python -m tests.fuzz --seeds 200`` (``make fuzz SEEDS=200``).

Prints one line per failing seed with the command that replays it, and a summary line.
Exit status 1 if any seed failed.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time

from loguru import logger

from tests.fuzz.harness import make_schedule, replay_command, run_schedule


def main(argv: list[str] | None = None) -> int:
    """Run the seeds given on the command line."""
    parser = argparse.ArgumentParser(prog="python -m tests.fuzz")
    parser.add_argument("--seeds", type=int, default=200, help="how many seeds")
    parser.add_argument("--start", type=int, default=0, help="first seed")
    parser.add_argument("--seed", type=int, help="run this one seed (a replay)")
    parser.add_argument("-v", "--verbose", action="store_true", help="print every violation")
    parser.add_argument("--logs", action="store_true", help="keep the package's log output")
    parser.add_argument("--dump", action="store_true", help="print the first violating request")
    parser.add_argument("--repeat", type=int, default=1, help="run each seed this many times")
    args = parser.parse_args(argv)
    if not args.logs:
        logger.remove()
    seeds = [args.seed] if args.seed is not None else range(args.start, args.start + args.seeds)
    t0 = time.monotonic()
    failed, requests, calls, applied = [], 0, 0, 0
    kinds: dict[str, int] = {}
    coverage: dict[str, int] = {}
    for seed in [s for s in seeds for _ in range(args.repeat)]:
        result = asyncio.run(run_schedule(make_schedule(seed)))
        requests += result.requests
        calls += result.summary_calls
        applied += result.applied
        for k, v in result.coverage.items():
            coverage[k] = coverage.get(k, 0) + v
        if result.ok:
            if args.verbose:
                print(
                    f"seed {seed}: ok ({result.requests} requests, {result.summary_calls} "
                    f"summary calls, {result.applied} applied, {result.elapsed_s:.1f}s)"
                )
            continue
        failed.append(seed)
        for v in result.violations:
            kinds[v.kind] = kinds.get(v.kind, 0) + 1
        first = result.violations[0]
        print(f"FAIL seed {seed}: {len(result.violations)} violations, first {first}")
        print(f"  replay: {replay_command(seed)}")
        if args.verbose:
            for v in result.violations:
                print(f"  {v}")
        if args.dump:
            print("\n".join(f"  | {line}" for line in result.snapshot))
    n = len(seeds)
    print(
        f"{n} schedules, {requests} main-LLM requests checked, {calls} summarizer calls, "
        f"{applied} summaries applied, {len(failed)} failing seeds "
        f"{dict(sorted(kinds.items()))} in {time.monotonic() - t0:.0f}s"
    )
    print("exercised: " + ", ".join(f"{k}={v}" for k, v in sorted(coverage.items())))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
