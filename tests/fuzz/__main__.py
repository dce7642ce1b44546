"""Run fuzz seeds: ``python -m tests.fuzz --seeds 200 --jobs 8`` (``make fuzz SEEDS=200 JOBS=8``).

Prints one line per failing seed with the command that replays it, and a summary line.
Exit status 1 if any seed failed.

Seeds run in ``--jobs`` worker processes, one seed at a time in each: a seed's schedule is a
function of its number only, and each seed has its own event loop, servers, log sink and
task accounting, so a failure found in a pool replays alone with ``--seed N``. A seed spends
most of its time in scheduled sleeps, so more workers than cores pay off.
"""

from __future__ import annotations

import argparse
import asyncio
import faulthandler
import sys
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass, field

from loguru import logger

from tests.fuzz.harness import make_schedule, replay_command, run_schedule


@dataclass
class SeedReport:
    """What the parent needs from one seed's run (small and picklable)."""

    seed: int
    requests: int
    calls: int
    applied: int
    elapsed_s: float
    max_ratio: float
    coverage: dict[str, int]
    violations: list[str] = field(default_factory=list)
    kinds: list[str] = field(default_factory=list)
    snapshot: list[str] = field(default_factory=list)


def _init_worker(keep_logs: bool) -> None:
    if not keep_logs:
        logger.remove()


# The harness's own 60 s limit is an asyncio timeout: it cannot fire if something blocks the
# event loop. Past this, the worker prints every thread's stack and exits, so a hang becomes a
# failing seed with a traceback instead of a pool that never finishes.
HARD_LIMIT_S = 240.0


def run_seed(seed: int) -> SeedReport:
    """Run one seed in a fresh event loop (in a worker process, or in this one)."""
    faulthandler.dump_traceback_later(HARD_LIMIT_S, exit=True)
    try:
        result = asyncio.run(run_schedule(make_schedule(seed)))
    finally:
        faulthandler.cancel_dump_traceback_later()
    return SeedReport(
        seed=seed,
        requests=result.requests,
        calls=result.summary_calls,
        applied=result.applied,
        elapsed_s=result.elapsed_s,
        max_ratio=result.max_ratio,
        coverage=dict(result.coverage),
        violations=[str(v) for v in result.violations],
        kinds=[v.kind for v in result.violations],
        snapshot=list(result.snapshot),
    )


def main(argv: list[str] | None = None) -> int:
    """Run the seeds given on the command line."""
    parser = argparse.ArgumentParser(prog="python -m tests.fuzz")
    parser.add_argument("--seeds", type=int, default=200, help="how many seeds")
    parser.add_argument("--start", type=int, default=0, help="first seed")
    parser.add_argument("--seed", type=int, help="run this one seed (a replay)")
    parser.add_argument("-j", "--jobs", type=int, default=1, help="worker processes")
    parser.add_argument("-v", "--verbose", action="store_true", help="print every violation")
    parser.add_argument("--logs", action="store_true", help="keep the package's log output")
    parser.add_argument("--dump", action="store_true", help="print the first violating request")
    parser.add_argument("--repeat", type=int, default=1, help="run each seed this many times")
    args = parser.parse_args(argv)
    _init_worker(args.logs)
    seeds = [args.seed] if args.seed is not None else range(args.start, args.start + args.seeds)
    runs = [s for s in seeds for _ in range(args.repeat)]
    t0 = time.monotonic()
    failed: list[int] = []
    requests = calls = applied = 0
    kinds: dict[str, int] = {}
    coverage: dict[str, int] = {}
    worst = 0.0

    def take(report: SeedReport) -> None:
        nonlocal requests, calls, applied, worst
        requests += report.requests
        calls += report.calls
        applied += report.applied
        worst = max(worst, report.max_ratio)
        for k, v in report.coverage.items():
            coverage[k] = coverage.get(k, 0) + v
        if not report.violations:
            if args.verbose:
                print(
                    f"seed {report.seed}: ok ({report.requests} requests, {report.calls} "
                    f"summary calls, {report.applied} applied, {report.elapsed_s:.1f}s)"
                )
            return
        failed.append(report.seed)
        for k in report.kinds:
            kinds[k] = kinds.get(k, 0) + 1
        print(
            f"FAIL seed {report.seed}: {len(report.violations)} violations, "
            f"first {report.violations[0]}"
        )
        print(f"  replay: {replay_command(report.seed)}")
        if args.verbose:
            for v in report.violations:
                print(f"  {v}")
        if args.dump:
            print("\n".join(f"  | {line}" for line in report.snapshot))
        sys.stdout.flush()

    if args.jobs <= 1 or len(runs) <= 1:
        for seed in runs:
            take(run_seed(seed))
    else:
        with ProcessPoolExecutor(
            max_workers=args.jobs, initializer=_init_worker, initargs=(args.logs,)
        ) as pool:
            futures = {pool.submit(run_seed, seed): seed for seed in runs}
            for future in as_completed(futures):
                try:
                    take(future.result())
                except Exception as exc:  # a worker that died (hard limit) breaks the pool
                    seed = futures[future]
                    failed.append(seed)
                    kinds["worker died"] = kinds.get("worker died", 0) + 1
                    print(f"FAIL seed {seed}: worker died ({type(exc).__name__})")
                    print(f"  replay: {replay_command(seed)}")
    n = len(runs)
    print(
        f"{n} schedules, {requests} main-LLM requests checked, {calls} summarizer calls, "
        f"{applied} summaries applied, worst request/ceiling {worst:.3f}, "
        f"{len(failed)} failing seeds {sorted(failed)[:50]} "
        f"{dict(sorted(kinds.items()))} in {time.monotonic() - t0:.0f}s ({args.jobs} jobs)"
    )
    print("exercised: " + ", ".join(f"{k}={v}" for k, v in sorted(coverage.items())))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
