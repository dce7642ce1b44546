"""benchmarks/frame_bound.py's rows and what it prints of them: the table, and where the
slowest frames' time went (by phase, benchmarks/_phases.py; by thread and wait,
benchmarks/_tail.py)."""

from __future__ import annotations

from dataclasses import dataclass, field

from _phases import FramePhases, FrameTrips, Trip, phases_line, trip_costs_line, trips_line
from _tail import Spent, Step, cause, tail_line
from frame_delay import percentile


@dataclass
class Row:
    """One backend and size: the timed frames and how recall's searches ended."""

    backend: str
    archived: int
    built: str
    prefetch: bool = False
    wall_ms: list[float] = field(default_factory=list)
    hop_ms: list[float] = field(default_factory=list)
    cpu_ms: list[float] = field(default_factory=list)
    searches: dict[str, int] = field(default_factory=dict)
    spent: list[Spent] = field(default_factory=list)
    phases: list[FramePhases] = field(default_factory=list)
    #: per frame: an early search answered it; the early block was placed
    early: list[tuple[bool, bool]] = field(default_factory=list)
    #: per frame: the long event-loop steps during it (benchmarks/_tail.py's LoopSteps)
    steps: list[list[Step]] = field(default_factory=list)
    #: per frame, with --trips: the store's trips and the step's timed waits during it
    trips: list[FrameTrips] = field(default_factory=list)
    #: with --other-writes: the other calls' messages written during the call
    other_written: int = 0
    #: with --trips: every trip of the call (the first, untimed turn's included)
    all_trips: list[Trip] = field(default_factory=list)
    #: the margin (s) the recall step kept back of its budget at the call's end (learned from
    #: the call's frames); None for a commit before it was learned
    margin_s: float | None = None


def mode(row: Row) -> str:
    """The row's mode, as the table prints it."""
    return "prefetch" if row.prefetch else "no prefetch"


def line(row: Row) -> str:
    """One row's figures, printed as it ends."""
    return (
        f"{row.backend} {row.archived:,} {mode(row)}: wall p50 "
        f"{percentile(row.wall_ms, 0.5):.2f} p99 {percentile(row.wall_ms, 0.99):.2f} ms, "
        f"CPU p99 {percentile(row.cpu_ms, 0.99):.2f} ms "
        f"({row.built})"
    )


def margin(row: Row) -> str:
    """The margin (ms) the recall step kept back of its budget at the call's end (learned
    from the call's frames), or "-" for a commit before it was learned."""
    return "-" if row.margin_s is None else f"{row.margin_s * 1000:.2f}"


def over_at(row: Row, budget_ms: float) -> str:
    """Which timed turns' frames ran past the budget, and by how much (ms): a margin
    learned from the call's frames can only answer for the ones after the first."""
    over = [(i + 1, w - budget_ms) for i, w in enumerate(row.wall_ms) if w > budget_ms]
    if not over:
        return f"no frame over {budget_ms:g} ms"
    listed = ", ".join(f"{i} (+{ms:.2f})" for i, ms in over)
    return f"frames over {budget_ms:g} ms at turns {listed} of {len(row.wall_ms)}"


def table(rows: list[Row], budget_ms: float) -> str:
    """The fixed-width table."""
    head = [
        "backend",
        "archived",
        "mode",
        "frames",
        "wall p50",
        "wall p99",
        "wall max",
        "hop p99",
        "CPU p50",
        "CPU p99",
        f"> {budget_ms:g} ms",
        "on time",
        "missed",
        "early search",
        "early block",
        "margin",
        "archive",
    ]
    body = []
    for r in rows:
        over = sum(w > budget_ms for w in r.wall_ms) / len(r.wall_ms)
        asked = r.searches["asked"]
        n = len(r.early)
        early_search = f"{sum(s for s, _ in r.early) / n:.0%}" if r.prefetch and n else "-"
        early_block = f"{sum(b for _, b in r.early) / n:.0%}" if r.prefetch and n else "-"
        body.append(
            [
                r.backend,
                f"{r.archived:,}",
                mode(r),
                str(len(r.wall_ms)),
                f"{percentile(r.wall_ms, 0.5):.2f}",
                f"{percentile(r.wall_ms, 0.99):.2f}",
                f"{max(r.wall_ms):.2f}",
                f"{percentile(r.hop_ms, 0.99):.2f}",
                f"{percentile(r.cpu_ms, 0.5):.2f}",
                f"{percentile(r.cpu_ms, 0.99):.2f}",
                f"{over:.1%}",
                f"{asked - r.searches['missed']}/{asked}",
                str(r.searches["missed"]),
                early_search,
                early_block,
                margin(r),
                r.built,
            ]
        )
    widths = [max(len(x[i]) for x in [head, *body]) for i in range(len(head))]
    lines = ["  ".join(c.rjust(w) for c, w in zip(head, widths, strict=True))]
    lines.append("-" * (sum(widths) + 2 * (len(widths) - 1)))
    lines += ["  ".join(c.rjust(w) for c, w in zip(x, widths, strict=True)) for x in body]
    return "\n".join(lines)


def early_split(row: Row, budget_ms: float) -> str:
    """With prefetch: the wall p99 of the turns the early block served and of the others."""
    if not row.prefetch:
        return ""
    served = [w for w, (_, b) in zip(row.wall_ms, row.early, strict=True) if b]
    others = [w for w, (_, b) in zip(row.wall_ms, row.early, strict=True) if not b]

    def part(name: str, walls: list[float]) -> str:
        if not walls:
            return f"{name}: none"
        over = sum(w > budget_ms for w in walls)
        return f"{name}: {len(walls)}, p99 {percentile(walls, 0.99):.2f}, > {budget_ms:g} ms {over}"

    return f"; {part('early block', served)}; {part('without', others)}"


def report(rows: list[Row], budget_ms: float) -> None:
    """Print the table, then the slowest frames' phases and their time's parts."""
    print(
        "wall: from the push into the processor to the end of its process_frame (hop: the "
        "part before its process_frame began, outside recall's budget); CPU: this process's "
        "CPU time meanwhile, plus the server backends' on PostgreSQL (ms); early search / "
        "block: the timed turns whose search an early one (RecallPrefetch's) answered, whose "
        "block was the one chosen and rendered early"
    )
    print(table(rows, budget_ms))
    for r in rows:
        print(f"{r.backend} {r.archived:,} {mode(r)}: {over_at(r, budget_ms)}")
    print(
        f"the slowest 1% of frames by phase (ms, means; after |: the time each phase ran past "
        f"{budget_ms:g} ms from the push); other: the step's own code between the phases"
    )
    for r in rows:
        edge = percentile(r.wall_ms, 0.99)
        print(
            f"{r.backend} {r.archived:,} {mode(r)}: "
            f"{phases_line(r.phases, r.wall_ms, budget_ms, edge)}{early_split(r, budget_ms)}"
        )
    print(
        "where the slowest frames' time went (ms): CPU of this process (and of PostgreSQL's "
        "backends; garbage collections included), waiting for a CPU (other processes ran), "
        "other (blocked: storage reads, waits on the store); nothing left out"
    )
    for r in rows:
        print(f"{r.backend} {r.archived:,} {mode(r)}: {tail_line(r.spent, 99, percentile)}")
    print(
        f"why each frame over {budget_ms:g} ms was (benchmarks/_tail.py's cause): a wait for a "
        "CPU or a garbage collection as long as its time past the budget, else the longest "
        "event-loop step over 0.7 ms that ran half that time past it, else the phase it "
        "crossed the budget in"
    )
    for r in rows:
        print(f"{r.backend} {r.archived:,} {mode(r)}: {causes_line(r, budget_ms)}")
    if any(r.trips for r in rows):
        print(
            "the slowest 1% of frames' store trips (ms, means): the turn's own search queued "
            "(for the store's thread, or a connection of the pool), run (the store's CPU in "
            "it: SQLite's thread, PostgreSQL's backend), handed back (until the loop resumed "
            "the step); the other trips the store ran during them (count x ms within the "
            "frame); the step's waits that timed out, how late they resumed past their timeout"
        )
    for r in rows:
        if r.trips:
            edge = percentile(r.wall_ms, 0.99)
            trips = trips_line(r.phases, r.trips, r.wall_ms, edge)
            print(f"{r.backend} {r.archived:,} {mode(r)}: {trips}")
            print(f"  every trip of the call: {trip_costs_line(r.all_trips)}")
            over = sum(w > budget_ms for w in r.wall_ms)
            if over:
                print(
                    f"  over {budget_ms:g} ms: "
                    f"{trips_line(r.phases, r.trips, r.wall_ms, budget_ms + 1e-9)}"
                )
    for r in rows:
        skipped = r.searches.get("extras not started", -1)
        print(
            f"{r.backend} {r.archived:,} {mode(r)}: extra searches (gathered words, stated "
            f"values) let go past the deadline {r.searches.get('extras let go', 0)}, not "
            f"started (not expected in time) {skipped if skipped >= 0 else '-'}; turns whose "
            f"stated values' searches answered in time {r.searches.get('values in time', 0)}"
        )


def causes_line(row: Row, budget_ms: float) -> str:
    """How many of the row's frames over ``budget_ms`` ran past it for each cause."""
    counts: dict[str, int] = {}
    for wall, spent, frame, steps in zip(
        row.wall_ms, row.spent, row.phases, row.steps, strict=False
    ):
        if wall <= budget_ms:
            continue
        past = frame.pushed + budget_ms / 1000
        why = cause(spent, steps, past, frame.ended, frame.crossed_in(past))
        counts[why] = counts.get(why, 0) + 1
    if not counts:
        return "none over the budget"
    return ", ".join(f"{k} {v}" for k, v in sorted(counts.items(), key=lambda kv: -kv[1]))
