"""The PNG: what each strategy costs, sends, summarizes and remembers over the call.

Needs matplotlib (the ``replay`` extra). One column per condition (one for a plain replay;
the calm and the busy call side by side for ``--compare-busy``), rows sharing the turn axis,
with the minutes into the call on top when time was simulated:

1. **Cost so far**: the cumulative dollars billed, bold with a prompt cache (the prefix shared
   with the previous request at the cached price), thin without one; summarizer input and
   output at the summarizer's prices. A line that leaves the scale is named in the panel.
2. **Ours against the built-in** (with both): what ours has saved so far, with and without a
   prompt cache (below zero: ours has cost more), so a gap the cost lines hide still shows.
3. **Request size**: the largest request of each turn for the summarizing strategies, with
   the ``max_context_tokens`` threshold (and the ceiling, when set).
4. **Summaries**: on an axis of their own, one row per summarizing strategy: a tick for each
   summary requested and a triangle for each one applied, so ticks without a triangle are the
   discarded ones.
5. **Probes kept** (only with probes): for each turn, how many of the planted facts stated so
   far its request still carries.

Each strategy keeps one colour and one line style everywhere (the built-in dashed, ours solid,
the full buffer dotted), so lines that overlap stay apart. :func:`build_figure` returns the
matplotlib figure (what the tests inspect); :func:`plot_results` and :func:`plot_conditions`
write it.
"""

from __future__ import annotations

import textwrap
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pipecat_summarizer_cli.replay.panels import Condition, draw_column
from pipecat_summarizer_cli.replay.report import Prices, StrategyResult

PLOT_INSTALL_HINT = 'pip install "pipecat-summarizer[replay]"'


def plot_results(
    results: Sequence[StrategyResult],
    path: str | Path,
    *,
    title: str,
    subtitle: str = "",
    threshold: int | None = None,
    turns: int | None = None,
    ceiling: int | None = None,
    outage: tuple[int, int] | None = None,
    probes: Sequence[str] = (),
    prices: Prices | None = None,
    minutes: Sequence[float] | None = None,
) -> Path:
    """Write the PNG of one replay and return its path.

    Args:
        results: The strategies' results.
        path: Where to write the PNG (parent folders are created).
        title: The figure title (the transcript and thresholds).
        subtitle: A second line (how time was modelled).
        threshold: ``max_context_tokens``, drawn as a dashed line.
        turns: Number of turns (defaults to the largest turn seen).
        ceiling: ``max_request_tokens``, drawn as a solid line.
        outage: ``(first turn, first turn after)`` of a summarizer outage, shaded.
        probes: The facts that must stay known (the last panel).
        prices: Prices for the cost panel (the defaults if ``None``).
        minutes: The minute each turn starts, then the call's end (the top axis).

    Raises:
        RuntimeError: If matplotlib is not installed.
    """
    return plot_conditions(
        [Condition("", subtitle, results, minutes, outage)],
        path,
        title=title,
        threshold=threshold,
        turns=turns,
        ceiling=ceiling,
        probes=probes,
        prices=prices,
    )


def plot_conditions(
    conditions: Sequence[Condition],
    path: str | Path,
    *,
    title: str,
    threshold: int | None = None,
    turns: int | None = None,
    ceiling: int | None = None,
    probes: Sequence[str] = (),
    prices: Prices | None = None,
) -> Path:
    """Write the PNG of several conditions side by side (same scales) and return its path.

    Args:
        conditions: The columns, left to right.
        path: Where to write the PNG (parent folders are created).
        title: The figure title: what is compared and what it shows.
        threshold: ``max_context_tokens``, drawn as a dashed line.
        turns: Number of turns (defaults to the largest turn seen).
        ceiling: ``max_request_tokens``, drawn as a solid line.
        probes: The facts that must stay known (the last panel).
        prices: Prices for the cost panel (the defaults if ``None``).

    Raises:
        RuntimeError: If matplotlib is not installed.
    """
    fig = build_figure(
        conditions,
        title=title,
        threshold=threshold,
        turns=turns,
        ceiling=ceiling,
        probes=probes,
        prices=prices,
    )
    return _save(fig, path)


def _save(fig: Any, path: str | Path) -> Path:
    import matplotlib.pyplot as plt

    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    try:
        fig.savefig(out)
    finally:
        plt.close(fig)
    return out


def build_figure(
    conditions: Sequence[Condition],
    *,
    title: str,
    threshold: int | None = None,
    turns: int | None = None,
    ceiling: int | None = None,
    probes: Sequence[str] = (),
    prices: Prices | None = None,
) -> Any:
    """The matplotlib figure (not saved; close it with ``matplotlib.pyplot.close``).

    Its axes are ``fig.axes``; each has a ``gid`` naming its panel (``"cost"``,
    ``"requests"``, ``"summaries"``, ``"probes"``, ``"minutes"``), so callers and tests find
    them. Arguments as :func:`plot_conditions`.

    Raises:
        RuntimeError: If matplotlib is not installed.
    """
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as e:  # pragma: no cover - depends on the environment
        raise RuntimeError(f"plotting needs matplotlib: {PLOT_INSTALL_HINT}") from e

    prices = prices or Prices()
    n_turns = turns or max(
        (r.turn for c in conditions for res in c.results for r in res.requests), default=0
    )
    names = {r.strategy for c in conditions for r in c.results}
    summarizing_rows = max(
        (sum(1 for r in c.results if r.strategy != "full_buffer") for c in conditions), default=0
    )
    savings = {"pipecat_builtin", "pipecat_summarizer"} <= names
    panels = ["cost", *(["savings"] if savings else []), "requests", "summaries"]
    panels += ["probes"] if probes else []
    height = {"cost": 1.0, "savings": 0.55, "requests": 1.1, "probes": 0.6}
    height["summaries"] = 0.25 + 0.22 * max(summarizing_rows, 1)
    heights = [height[p] for p in panels]
    columns = len(conditions)
    with plt.rc_context({"text.parse_math": False}):  # dollar signs are dollars
        fig, grid = plt.subplots(
            len(heights),
            columns,
            figsize=(9.5 * columns + 1.0, 2.9 * sum(heights) + 1.8),
            sharex="col",
            gridspec_kw={"height_ratios": heights},
            dpi=100,
            squeeze=False,
        )
        for col, condition in enumerate(conditions):
            axes = {panel: grid[row][col] for row, panel in enumerate(panels)}
            draw_column(
                axes,
                condition,
                n_turns=n_turns,
                threshold=threshold,
                ceiling=ceiling,
                probes=probes,
                prices=prices,
                first=col == 0,
            )
        for row in grid:  # one scale per row, so the columns compare at a glance
            _same_scale(list(row))
        heading = "\n".join(
            "\n".join(textwrap.wrap(line, 80 * columns + 40)) for line in title.splitlines()
        )
        fig.suptitle(heading, fontsize=11.5, x=0.01, ha="left")
        fig.tight_layout()
    return fig


def _same_scale(axes: list[Any]) -> None:
    """Give every axis of a row the union of their y ranges."""
    low = min(ax.get_ylim()[0] for ax in axes)
    high = max(ax.get_ylim()[1] for ax in axes)
    for ax in axes:
        ax.set_ylim(low, high)
