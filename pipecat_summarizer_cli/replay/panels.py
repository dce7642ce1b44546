"""The panels of the replay's PNG: one column per condition, drawn on the axes it is given.

Each strategy keeps one colour and one line style (:data:`STYLE`) in every panel. The panels
(cost so far, ours against the built-in, request size, summaries, probes kept) are described
in :mod:`pipecat_summarizer_cli.replay.plot`, which lays out the figure and writes it.
"""

from __future__ import annotations

import textwrap
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from pipecat_summarizer_cli.replay.report import (
    Prices,
    StrategyResult,
    cached_tokens,
    per_turn_tokens,
    probes_per_turn,
    request_probes,
)

STYLE: dict[str, dict[str, Any]] = {
    "full_buffer": {
        "color": "#8c8c8c",
        "label": "full buffer (no summarization)",
        "short": "full buffer",
        "linestyle": ":",
    },
    "pipecat_builtin": {
        "color": "#e6730f",
        "label": "Pipecat built-in",
        "short": "built-in",
        "linestyle": "--",
    },
    "pipecat_summarizer": {
        "color": "#1f5fb4",
        "label": "pipecat-summarizer (ours)",
        "short": "ours",
        "linestyle": "-",
    },
}
PROBES_EXPLAINED = (
    "Probes kept: a probe is a fact planted in the call ({examples}) and looked for in every "
    "request from the turn it is stated; a line under the dotted one is a fact lost"
)


@dataclass(frozen=True)
class Condition:
    """One column of the plot: the strategies' results under one way the call unfolds.

    Parameters:
        name: The column's heading (e.g. ``"calm call"``; empty for a plain replay).
        description: How time was modelled (call length, barge-ins, summarizer speed).
        results: The strategies' results.
        minutes: The minute each user turn starts, then the call's end (``turns + 1``
            values; ``None``: no minute axis).
        outage: ``(first turn, first turn after)`` of a summarizer outage, shaded.
    """

    name: str
    description: str
    results: Sequence[StrategyResult]
    minutes: Sequence[float] | None = None
    outage: tuple[int, int] | None = None


def _style(strategy: str) -> dict[str, Any]:
    return STYLE.get(
        strategy, {"color": None, "label": strategy, "short": strategy, "linestyle": "-"}
    )


def _short(n: float) -> str:
    if n >= 1e6:
        return f"{n / 1e6:.2f}M"
    if n >= 1e3:
        return f"{n / 1e3:.0f}k"
    return f"{n:.0f}"


def _dollars(value: float, digits: int) -> str:
    """``-$0.02`` rather than ``$-0.02``."""
    return f"{'-' if value < 0 else ''}${abs(value):.{digits}f}"


def cumulative_cost(
    result: StrategyResult, prices: Prices, turns: int, *, cache: bool = False
) -> list[float]:
    """Dollars billed by the end of each turn 1..``turns``.

    Args:
        result: One strategy's results.
        prices: Prices per million tokens.
        turns: Number of turns.
        cache: Bill each request's prefix shared with the previous request at the cached
            price (as ``cost_usd_with_cache``); otherwise every input token at the full price
            (as ``cost_usd``).
    """
    per_turn = [0.0] * turns
    cached = cached_tokens(result.requests) if cache else [0] * len(result.requests)
    for r, hit in zip(result.requests, cached, strict=True):
        if 1 <= r.turn <= turns:
            per_turn[r.turn - 1] += (
                (r.total - hit) * prices.input + hit * prices.cached_input
            ) / 1e6
    for (sent, got), turn in zip(result.summary_calls, result.requested_turns, strict=False):
        i = min(max(turn, 1), turns) - 1
        per_turn[i] += (sent * prices.summary_input + got * prices.summary_output) / 1e6
    out, total = [], 0.0
    for cost in per_turn:
        total += cost
        out.append(total)
    return out


def draw_column(
    axes: dict[str, Any],
    condition: Condition,
    *,
    n_turns: int,
    threshold: int | None,
    ceiling: int | None,
    probes: Sequence[str],
    prices: Prices,
    first: bool,
) -> None:
    """Draw one condition's column: every panel, on the axes named by panel.

    Args:
        axes: Panel name (``"cost"``, ``"savings"``, ``"requests"``, ``"summaries"``,
            ``"probes"``) -> its matplotlib axes; each axis gets that name as its ``gid``.
        condition: The column's results, heading, minutes and outage.
        n_turns: Number of turns on the turn axis.
        threshold: ``max_context_tokens``, drawn as a dash-dot line.
        ceiling: ``max_request_tokens``, drawn as a solid line.
        probes: The facts that must stay known (the probes panel).
        prices: Prices for the cost panels.
        first: The leftmost column, which carries the y labels.
    """
    from matplotlib.ticker import FuncFormatter, MaxNLocator

    results = condition.results
    x = list(range(1, n_turns + 1))
    summarizing = [r for r in results if r.strategy != "full_buffer"]
    for panel, ax in axes.items():
        ax.set_gid(panel)
    ax_cost, ax_size, ax_sum = axes["cost"], axes["requests"], axes["summaries"]

    # 1. cost so far: bold with a prompt cache, thin without; the scale fits the bold lines
    # and the summarizing strategies' thin ones (the full buffer's uncached bill is named)
    finals = []
    scale = 0.0
    off_scale = []
    for res in results:
        st = _style(res.strategy)
        cached = cumulative_cost(res, prices, n_turns, cache=True)
        plain = cumulative_cost(res, prices, n_turns)
        ax_cost.plot(
            x,
            cached,
            color=st["color"],
            linestyle=st["linestyle"],
            linewidth=2.4,
            label=f"{st['short']}: ${cached[-1]:.2f} with a prompt cache (${plain[-1]:.2f} without)"
            if cached
            else st["short"],
        )
        ax_cost.plot(x, plain, color=st["color"], linestyle=st["linestyle"], linewidth=1, alpha=0.5)
        if cached:
            finals.append((cached[-1], st["color"]))
            scale = max(scale, cached[-1])
            if res.strategy != "full_buffer" or not summarizing:
                scale = max(scale, plain[-1])
            else:
                off_scale.append((st["short"], plain[-1]))
    top = scale * 1.18 or 1.0
    for name, value in off_scale:
        if value > top:
            ax_cost.text(
                0.99,
                0.04,
                f"{name} without a prompt cache: off the scale, ${value:.2f}",
                transform=ax_cost.transAxes,
                ha="right",
                va="bottom",
                fontsize=8.5,
                color=_style("full_buffer")["color"],
            )
    ax_cost.set_ylim(0, top)
    gap = 0.06 * top
    placed: list[float] = []
    for value, color in sorted(finals):
        at = max([value, *(p + gap for p in placed[-1:])])
        placed.append(at)
        ax_cost.annotate(
            f"${value:.2f}",
            (x[-1], value),
            xytext=(x[-1] + max(1, n_turns // 100), at),
            textcoords="data",
            va="center",
            fontsize=9.5,
            fontweight="bold",
            color=color,
        )
    ax_cost.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"${v:.2f}"))
    if first:
        ax_cost.set_ylabel("cost so far ($)")
    heading = f"{condition.name.upper()}: " if condition.name else ""  # the column's name
    ax_cost.set_title(
        "\n".join(textwrap.wrap(heading + condition.description, 95))
        + "\nCost so far, bold with a prompt cache (cached input "
        f"${prices.cached_input:g}/M, new ${prices.input:g}/M), thin without; summarizer "
        f"${prices.summary_input:g}/M in, ${prices.summary_output:g}/M out",
        fontsize=9.5,
        loc="left",
    )
    ax_cost.legend(loc="upper left", fontsize=8.5, framealpha=0.9)

    # 2. what ours saves against the built-in, so far
    if "savings" in axes:
        ax_save = axes["savings"]
        by_name = {r.strategy: r for r in results}
        builtin, ours = by_name["pipecat_builtin"], by_name["pipecat_summarizer"]
        for cache, width, alpha, label in (
            (True, 2.4, 1.0, "with a prompt cache"),
            (False, 1.0, 0.6, "without"),
        ):
            theirs = cumulative_cost(builtin, prices, n_turns, cache=cache)
            mine = cumulative_cost(ours, prices, n_turns, cache=cache)
            saved = [b - o for b, o in zip(theirs, mine, strict=True)]
            ax_save.plot(
                x,
                saved,
                color="#2a8c4a",
                linewidth=width,
                alpha=alpha,
                label=f"{label}: {_dollars(saved[-1], 3)} by the end" if saved else label,
            )
        ax_save.axhline(0, color="black", linewidth=0.8)
        ax_save.yaxis.set_major_formatter(FuncFormatter(lambda v, _: _dollars(v, 2)))
        if first:
            ax_save.set_ylabel("saved so far ($)")
        ax_save.set_title(
            "What ours has saved against the built-in so far (below zero: ours cost more)",
            fontsize=9.5,
            loc="left",
        )
        ax_save.legend(loc="upper left", fontsize=8.5, framealpha=0.9)

    # 3. request size (never below zero: the summaries have their own axis)
    top_size = 0.0
    for res in summarizing:
        top_size = max(top_size, max(per_turn_tokens(res.requests, n_turns), default=0))
    top_size = max(top_size, threshold or 0, ceiling or 0) * 1.15 or 1.0
    for res in summarizing:
        st = _style(res.strategy)
        sizes = per_turn_tokens(res.requests, n_turns)
        ax_size.plot(
            x,
            sizes,
            color=st["color"],
            linestyle=st["linestyle"],
            linewidth=1.6,
            label=f"{st['short']}: largest request {max(sizes, default=0):,} tokens",
        )
        evictions = sorted(set(res.eviction_turns))
        if evictions:
            ax_size.plot(
                evictions,
                [sizes[t - 1] for t in evictions],
                linestyle="none",
                marker="x",
                markersize=5,
                color="black",
                label=f"ceiling evictions ({len(evictions)} turns)",
            )
    full = next((r for r in results if r.strategy == "full_buffer"), None)
    if full is not None and summarizing:
        peak = max(per_turn_tokens(full.requests, n_turns), default=0)
        ax_size.text(
            0.99,
            0.97,
            f"full buffer: off the scale, up to {peak:,} tokens",
            transform=ax_size.transAxes,
            ha="right",
            va="top",
            fontsize=8.5,
            color=_style("full_buffer")["color"],
        )
    elif full is not None:
        sizes = per_turn_tokens(full.requests, n_turns)
        top_size = max(top_size, max(sizes, default=0) * 1.15)
        ax_size.plot(x, sizes, color=_style("full_buffer")["color"], linestyle=":", linewidth=1.6)
    if threshold:
        ax_size.axhline(
            threshold,
            linestyle="-.",
            color="#c0392b",
            linewidth=1.1,
            label=f"max_context_tokens = {threshold:,}",
        )
    if ceiling:
        ax_size.axhline(
            ceiling,
            color="black",
            linewidth=1.3,
            label=f"ceiling: max_request_tokens = {ceiling:,}",
        )
    ax_size.set_ylim(0, top_size)
    ax_size.yaxis.set_major_formatter(FuncFormatter(lambda v, _: _short(v)))
    if first:
        ax_size.set_ylabel("tokens sent\n(largest request of the turn)")
    ax_size.set_title("Request size", fontsize=9.5, loc="left")

    # 4. summaries requested and applied, one row per summarizing strategy
    labels = []
    for k, res in enumerate(summarizing):
        st = _style(res.strategy)
        y = len(summarizing) - 1 - k  # the first strategy on top
        if res.requested_turns:
            ax_sum.plot(
                res.requested_turns,
                [y + 0.15] * len(res.requested_turns),
                linestyle="none",
                marker="|",
                markersize=11,
                markeredgewidth=1.6,
                color=st["color"],
            )
        if res.applied_turns:
            ax_sum.plot(
                res.applied_turns,
                [y - 0.2] * len(res.applied_turns),
                linestyle="none",
                marker="v",
                markersize=6.5,
                color=st["color"],
                markeredgecolor="black",
                markeredgewidth=0.4,
            )
        labels.append(
            (
                y,
                f"{st['short']}: {len(res.summary_calls)} requested,\n"
                f"{res.summaries_applied} applied, {res.summaries_discarded} discarded",
            )
        )
    ax_sum.set_ylim(-0.6, max(len(summarizing), 1) - 0.4)
    ax_sum.set_yticks([y for y, _ in labels], [text for _, text in labels], fontsize=8)
    ax_sum.set_title(
        "Summaries: | requested, \u25bc applied (a | with no \u25bc after it was discarded "
        "or failed)",
        fontsize=9.5,
        loc="left",
    )

    # 5. probes kept
    if probes:
        ax_facts = axes["probes"]
        for k, res in enumerate(results):
            st = _style(res.strategy)
            presence = request_probes(res.requests, probes)
            kept = probes_per_turn(res.requests, presence, n_turns)
            shift = 0.08 * (k - (len(results) - 1) / 2)  # equal lines side by side
            ax_facts.step(
                x,
                [v + shift for v in kept],
                where="mid",
                color=st["color"],
                linestyle=st["linestyle"],
                linewidth=1.6,
            )
        stated = _stated_per_turn(results, probes, n_turns)
        ax_facts.step(x, stated, where="mid", color="black", linewidth=1, linestyle=":")
        ax_facts.set_ylim(-0.3, len(probes) + 0.5)
        ax_facts.yaxis.set_major_locator(MaxNLocator(integer=True))
        if first:
            ax_facts.set_ylabel(f"probes kept\n(of {len(probes)})")
        examples = ", ".join(f"'{p}'" for p in probes[:3])
        if len(probes) > 3:
            examples += f"... {len(probes)} here"
        ax_facts.set_title(
            "\n".join(textwrap.wrap(PROBES_EXPLAINED.format(examples=examples), 110)),
            fontsize=9.5,
            loc="left",
        )

    for ax in axes.values():
        if condition.outage:
            start, end = condition.outage
            ax.axvspan(
                start - 0.5,
                min(end, n_turns + 1) - 0.5,
                color="#c0392b",
                alpha=0.08,
                linewidth=0,
                label=f"summarizer down (turns {start}-{end - 1})" if ax is ax_size else None,
            )
        ax.grid(True, alpha=0.3)
    ax_size.legend(loc="upper left", fontsize=8.5, framealpha=0.92)  # the outage's label too
    bottom = list(axes.values())[-1]
    bottom.set_xlabel("user turn" + (" (top: minutes into the call)" if condition.minutes else ""))
    bottom.set_xlim(1, max(n_turns, 2) + max(2, n_turns // 10))
    if condition.minutes and len(condition.minutes) == n_turns + 1:
        _minute_axis(ax_cost, condition.minutes)


def _minute_axis(ax: Any, minutes: Sequence[float]) -> None:
    """A top axis reading the turn axis in minutes (turn t starts at ``minutes[t - 1]``)."""
    import numpy as np

    turns = np.arange(1, len(minutes) + 1, dtype=float)
    at = np.asarray(minutes, dtype=float)
    # past either end, the call's average pace (the axis runs a little beyond the call)
    pace = (at[-1] - at[0]) / (turns[-1] - turns[0]) if len(at) > 1 and at[-1] > at[0] else 1.0

    def forward(t: Any) -> Any:
        t = np.asarray(t, dtype=float)
        inside = np.interp(t, turns, at)
        return np.where(
            t > turns[-1],
            at[-1] + (t - turns[-1]) * pace,
            np.where(t < turns[0], at[0] + (t - turns[0]) * pace, inside),
        )

    def inverse(m: Any) -> Any:
        m = np.asarray(m, dtype=float)
        inside = np.interp(m, at, turns)
        return np.where(
            m > at[-1],
            turns[-1] + (m - at[-1]) / pace,
            np.where(m < at[0], turns[0] + (m - at[0]) / pace, inside),
        )

    top = ax.secondary_xaxis("top", functions=(forward, inverse))
    top.set_gid("minutes")
    top.set_xlabel("minutes into the call", fontsize=9)
    top.tick_params(labelsize=8.5)


def _stated_per_turn(
    results: Sequence[StrategyResult], probes: Sequence[str], turns: int
) -> list[int]:
    """Probes stated by each turn (seen in any strategy's requests so far)."""
    first: dict[str, int] = {}
    for res in results:
        for req, found in zip(res.requests, request_probes(res.requests, probes), strict=True):
            for p in found:
                first[p] = min(first.get(p, req.turn), req.turn)
    return [sum(1 for t in first.values() if t <= turn) for turn in range(1, turns + 1)]
