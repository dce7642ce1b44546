"""The fault matrix: each summarizer fault for a stretch of turns, then healthy, twice.

Each row plays one fault kind through the fuzzer's real pipeline (``harness.run_schedule``
with a fixed schedule): a healthy warm-up, then ``OUTAGE_TURNS`` user turns with the fault,
then healthy turns until a summary lands, and the same again (two streaks), so the single
ERROR per streak is seen to re-arm after a recovery.

``python -m tests.fuzz.matrix`` prints the table;
``tests/pipeline/test_fault_matrix.py`` asserts it.
"""

from __future__ import annotations

import asyncio
import re
import sys
from dataclasses import dataclass, field

from tests.fuzz import harness
from tests.fuzz.fault_server import FAILING, FAULTS
from tests.fuzz.harness import Event, Params, Result, Schedule, TurnPlan, run_schedule

OUTAGE_TURNS = 9  # a timing-out streak fails three times by the sixth turn (ERROR_AFTER)
HEALTHY_TURNS = 2  # a summary lands on the first; the second is margin
STREAKS = 2
BACKOFF_V = 0.4  # virtual seconds: 0.02 s real, doubled per failure
MAX_BACKOFF_V = 3.2  # 0.16 s real
ERROR_AFTER = 3
GAP_V = 1.2  # between turns: 0.06 s real
MATRIX_FAULTS = tuple(f for f in FAULTS if f != "ok")

FAILURE_WARNING = re.compile(r"summary failed")


def matrix_schedule(fault: str | tuple[str, ...]) -> Schedule:
    """The fixed schedule of one matrix row (``STREAKS`` streaks of ``fault``), or of several
    rows in one call (a tuple: one streak of each fault, in turn)."""
    kinds = (fault,) * STREAKS if isinstance(fault, str) else fault
    params = Params(
        max_context_tokens=None,
        max_messages=4,
        keep=2,
        ceiling=None,
        input_budget=8000,
        backoff_v=BACKOFF_V,
        max_backoff_v=MAX_BACKOFF_V,
        error_after=ERROR_AFTER,
        timeout_v=2.0,  # 0.1 s real: a timing-out streak still fails often enough
        summary_role="user",
        auto=True,
        guard=True,
    )
    events: list[Event] = []
    plans: dict[int, TurnPlan] = {}
    n = 0

    def turn(text: str) -> None:
        nonlocal n
        n += 1
        plans[n] = TurnPlan()
        events.append(Event("user", f"#u{n} {text}"))
        events.append(Event("wait", GAP_V))

    for _ in range(3):
        turn("warm-up: my booking reference is BK-1042")
    for kind in kinds:
        events.append(Event("fault", kind))
        for _ in range(OUTAGE_TURNS):
            turn("during the outage: I am allergic to peanuts")
        events.append(Event("fault", "ok"))
        events.append(Event("wait", 2 * MAX_BACKOFF_V))  # the backoff runs out
        for _ in range(HEALTHY_TURNS):
            turn("after the outage: a window seat please")
    events.append(Event("wait", 2.0))  # the last streak's summary lands (0.3 s real)
    return Schedule(seed=-1, params=params, events=events, plans=plans, latency_v=[0.0])


def backoff_bound(elapsed_s: float) -> int:
    """Most automatic attempts a streak can make in ``elapsed_s`` under the backoff.

    Attempt k+1 cannot start before the k-th failure's delay has passed, so n attempts need
    at least the sum of the first n-1 delays between the first and the last attempt.
    """
    n, spent = 1, 0.0
    while True:
        delay = min(MAX_BACKOFF_V, BACKOFF_V * 2 ** (n - 1)) * harness.SCALE
        if spent + delay > elapsed_s + 1e-6:
            return n
        spent += delay
        n += 1


@dataclass
class Streak:
    """One outage and the recovery after it."""

    calls: int  # summarizer attempts during the outage
    server_calls: int  # requests the server received (0 when it refuses connections)
    span_s: float  # first to last attempt
    bound: int  # most attempts the backoff allows in that span
    warnings: int  # failure WARNINGs
    other_warnings: list[str]
    errors: int
    recovered: bool


@dataclass
class Row:
    """One fault kind."""

    fault: str
    turns: int
    streaks: list[Streak]
    violations: list[str] = field(default_factory=list)
    result: Result | None = None

    @property
    def calls(self) -> int:
        """Summarizer attempts during the outages."""
        return sum(s.calls for s in self.streaks)

    @property
    def warnings(self) -> int:
        """Failure WARNINGs during the outages."""
        return sum(s.warnings for s in self.streaks)

    @property
    def errors(self) -> int:
        """ERRORs during the outages."""
        return sum(s.errors for s in self.streaks)

    @property
    def recovered(self) -> str:
        """Streaks after which a summary was applied, out of all."""
        return f"{sum(s.recovered for s in self.streaks)}/{len(self.streaks)}"


def _window(result: Result, k: int) -> tuple[float, float, float]:
    """(outage start, outage end, next outage start or end of run) of streak ``k``."""
    switches = [t for t, f in result.marks if f != "ok"]
    ends = [t for t, f in result.marks if f == "ok"]
    start, end = switches[k], ends[k]
    after = switches[k + 1] if k + 1 < len(switches) else float("inf")
    return start, end, after


def _streak(result: Result, k: int, fault: str) -> Streak:
    """Measure streak ``k`` of ``result``, an outage of ``fault``."""
    start, end, after = _window(result, k)
    # A failure is reported when its attempt ends: a timeout can end just after the
    # switch back to healthy, so the streak's window runs until recovery is possible.
    failed = [t for t in result.failed_at if start <= t < after]
    applied = [t for t in result.applied_at if end <= t < after]
    first_ok = min(applied, default=after)
    streak_failed = [t for t in failed if t <= first_ok]
    calls = [c for c in result.calls if start <= c.started <= end]
    failing_calls = [c for c in calls if c.fault in FAILING]
    attempt_times = [c.started for c in failing_calls] if fault != "refused" else streak_failed
    span = (max(attempt_times) - min(attempt_times)) if attempt_times else 0.0
    logs = [r for r in result.records if start <= r["t"] <= first_ok + 0.05]
    warnings = [
        r for r in logs if r["level"] == "WARNING" and r["name"].startswith("pipecat_summarizer")
    ]
    return Streak(
        calls=len(streak_failed),
        server_calls=len(failing_calls),
        span_s=span,
        bound=backoff_bound(span),
        warnings=sum(1 for r in warnings if FAILURE_WARNING.search(r["msg"])),
        other_warnings=[r["msg"][:100] for r in warnings if not FAILURE_WARNING.search(r["msg"])],
        errors=sum(1 for r in logs if r["level"] in ("ERROR", "CRITICAL")),
        recovered=bool(applied),
    )


async def run_row(fault: str) -> Row:
    """Play one matrix row and measure each streak."""
    result = await run_schedule(matrix_schedule(fault), time_limit=60)
    return Row(
        fault=fault,
        turns=OUTAGE_TURNS,
        streaks=[_streak(result, k, fault) for k in range(STREAKS)],
        violations=[str(v) for v in result.violations],
        result=result,
    )


async def run_rows(faults: tuple[str, ...]) -> list[Row]:
    """Play several rows in one call: one streak of each fault in turn, each after the
    previous one's recovery (so every streak but the first also shows the single ERROR
    re-armed); one row per fault, each with the call's violations."""
    result = await run_schedule(matrix_schedule(faults), time_limit=60 + 10 * len(faults))
    violations = [str(v) for v in result.violations]
    return [
        Row(fault=f, turns=OUTAGE_TURNS, streaks=[_streak(result, k, f)], violations=violations)
        for k, f in enumerate(faults)
    ]


async def run_matrix(faults: tuple[str, ...] = MATRIX_FAULTS) -> list[Row]:
    """Every row, one after the other."""
    return [await run_row(f) for f in faults]


def format_table(rows: list[Row]) -> str:
    """The matrix as a Markdown table (sums over the streaks)."""
    lines = [
        f"Fault matrix: {STREAKS} streaks of {OUTAGE_TURNS} turns per fault, then healthy; backoff "
        f"{BACKOFF_V * harness.SCALE:.2f}s doubling to {MAX_BACKOFF_V * harness.SCALE:.2f}s, "
        "ERROR after "
        f"{ERROR_AFTER} in a row",
        "",
        "| fault | turns | summarizer calls | backoff bound | warnings | errors | recovered "
        "| violations |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for r in rows:
        lines.append(
            f"| {r.fault} | {r.turns * len(r.streaks)} | {r.calls} "
            f"| {sum(s.bound for s in r.streaks)} | {r.warnings} | {r.errors} | {r.recovered} "
            f"| {len(r.violations)} |"
        )
    return "\n".join(lines)


def main() -> int:
    """Print the matrix."""
    from loguru import logger

    logger.remove()
    faults = tuple(sys.argv[1:]) or MATRIX_FAULTS
    rows = asyncio.run(run_matrix(faults))
    print(format_table(rows))
    for r in rows:
        for v in r.violations[:3]:
            print(f"{r.fault}: {v}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
