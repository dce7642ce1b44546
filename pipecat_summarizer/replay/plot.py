"""The PNG: request tokens per turn for each strategy, compaction points marked.

Needs matplotlib (the ``plot`` extra). Two panels share the turn axis: the top one shows
every strategy on one scale (the full buffer's growth), the bottom one zooms on the
summarizing strategies around the token threshold, where the compactions are visible.
When set, the ceiling (``max_request_tokens``) is a solid black line, ours' evictions under it
are ticks, and a summarizer outage is a shaded span.
"""

from __future__ import annotations

import textwrap
from collections.abc import Sequence
from pathlib import Path

from pipecat_summarizer.replay.report import StrategyResult, compaction_points, per_turn_tokens

STYLE = {
    "full_buffer": {"color": "#7f7f7f", "label": "full buffer (no summarization)"},
    "pipecat_builtin": {"color": "#ff7f0e", "label": "Pipecat built-in summarization"},
    "pipecat_summarizer": {"color": "#1f77b4", "label": "pipecat-summarizer (ours)"},
}


def _compaction_turns(result: StrategyResult) -> list[int]:
    """Turns whose request rewrote the context, except rewrites by a ceiling eviction."""
    evicted = set(result.eviction_turns)
    return sorted({result.requests[i].turn for i in compaction_points(result.requests)} - evicted)


def _short(n: float) -> str:
    if n >= 1e6:
        return f"{n / 1e6:.2f}M"
    if n >= 1e3:
        return f"{n / 1e3:.0f}k"
    return f"{n:.0f}"


def plot_results(
    results: Sequence[StrategyResult],
    path: str | Path,
    *,
    title: str,
    threshold: int | None = None,
    turns: int | None = None,
    ceiling: int | None = None,
    outage: tuple[int, int] | None = None,
) -> Path:
    """Write the PNG and return its path.

    Args:
        results: The strategies' results.
        path: Where to write the PNG (parent folders are created).
        title: The figure title (the transcript name, usually).
        threshold: ``max_context_tokens``, drawn as a dashed line.
        turns: Number of turns (defaults to the largest turn seen).
        ceiling: ``max_request_tokens``, drawn as a solid line.
        outage: ``(first turn, first turn after)`` of a summarizer outage, shaded.

    Raises:
        RuntimeError: If matplotlib is not installed.
    """
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        from matplotlib.ticker import FuncFormatter
    except ImportError as e:  # pragma: no cover - depends on the environment
        raise RuntimeError(
            "plotting needs matplotlib: pip install 'pipecat-summarizer[plot]'"
        ) from e

    n_turns = turns or max((r.turn for res in results for r in res.requests), default=0)
    x = list(range(1, n_turns + 1))
    summarizing = [r for r in results if r.strategy != "full_buffer"]
    panels = 2 if summarizing and len(results) > len(summarizing) else 1
    fig, axes = plt.subplots(
        panels, 1, figsize=(11, 4.2 * panels + 0.6), sharex=True, squeeze=False, dpi=150
    )
    axes = [a[0] for a in axes]

    def draw(ax, shown: Sequence[StrategyResult], markers: bool) -> float:
        top = 0.0
        for res in shown:
            style = STYLE.get(res.strategy, {"color": None, "label": res.strategy})
            y = per_turn_tokens(res.requests, n_turns)
            total = sum(r.total for r in res.requests)
            ax.plot(
                x,
                y,
                color=style["color"],
                linewidth=1.6,
                label=f"{style['label']}: {_short(total)} input tokens",
            )
            top = max(top, max(y, default=0))
            if markers:
                points = _compaction_turns(res)
                if points:
                    ax.plot(
                        points,
                        [y[t - 1] for t in points],
                        linestyle="none",
                        marker="v",
                        markersize=6,
                        color=style["color"],
                        markeredgecolor="black",
                        markeredgewidth=0.5,
                        label=f"  compactions ({len(points)})",
                    )
                evictions = sorted(set(res.eviction_turns))
                if evictions:
                    ax.plot(
                        evictions,
                        [y[t - 1] for t in evictions],
                        linestyle="none",
                        marker="|",
                        markersize=7,
                        color="black",
                        label=f"  ceiling evictions ({len(evictions)} turns)",
                    )
        if threshold:
            ax.axhline(
                threshold,
                linestyle="--",
                color="#d62728",
                linewidth=1.1,
                label=f"max_context_tokens = {threshold:,}",
            )
        if ceiling:
            ax.axhline(
                ceiling,
                linestyle="-",
                color="#000000",
                linewidth=1.3,
                label=f"ceiling: max_request_tokens = {ceiling:,}",
            )
        if outage:
            start, end = outage
            ax.axvspan(
                start - 0.5,
                min(end, n_turns + 1) - 0.5,
                color="#d62728",
                alpha=0.1,
                linewidth=0,
                label=f"summarizer down (turns {start}-{end - 1})",
            )
        ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: _short(v)))
        ax.set_ylabel("tokens sent (largest request of the turn)")
        ax.grid(True, alpha=0.3)
        ax.legend(loc="upper left", fontsize=8.5, framealpha=0.9)
        return top

    if panels == 2:
        draw(axes[0], results, markers=False)
        axes[0].set_title("All strategies", fontsize=10, loc="left")
        top = draw(axes[1], summarizing, markers=True)
        axes[1].set_title(
            "Summarizing strategies (zoom), compactions marked", fontsize=10, loc="left"
        )
        axes[1].set_ylim(0, max(top, threshold or 0, ceiling or 0) * 1.25)
    else:
        top = draw(axes[0], results, markers=True)
        axes[0].set_ylim(0, max(top, threshold or 0, ceiling or 0) * 1.15)
    axes[-1].set_xlabel("user turn")
    axes[-1].set_xlim(1, max(n_turns, 2))
    fig.suptitle("\n".join(textwrap.wrap(title, 110)), fontsize=11)
    fig.tight_layout()
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=150)
    plt.close(fig)
    return out
