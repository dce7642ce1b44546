"""The PNG: what each strategy costs, sends and remembers over the call, turn by turn.

Needs matplotlib (the ``replay`` extra). Three panels share the turn axis:

1. **Cost so far**: the cumulative dollars billed (main LLM input at its price, summarizer
   input and output at the summarizer's), with each strategy's total at the end of its line:
   the full buffer's cost grows with the square of the call, the summarizing ones' linearly.
2. **Request size**: the largest request of each turn for the summarizing strategies (the
   full buffer is off the scale and named in the panel), the ``max_context_tokens`` threshold,
   and under the lines one row of marks per strategy: a tick for each summary requested and a
   triangle for each one applied, so requests without a triangle are the discarded ones. With a
   ceiling, it is a solid line; a summarizer outage is a shaded span.
3. **Facts kept**: for each turn, how many of the probes stated so far its request still
   carries (only with probes).

Each legend entry carries the strategy's figures (summaries requested / applied /
discarded, largest request), so the plot reads without the table.
"""

from __future__ import annotations

import textwrap
from collections.abc import Sequence
from pathlib import Path

from pipecat_summarizer.replay.report import (
    Prices,
    StrategyResult,
    per_turn_tokens,
    probes_per_turn,
    request_probes,
)

STYLE: dict[str, dict[str, str | None]] = {
    "full_buffer": {"color": "#8c8c8c", "label": "full buffer (no summarization)"},
    "pipecat_builtin": {"color": "#e6730f", "label": "Pipecat built-in"},
    "pipecat_summarizer": {"color": "#1f5fb4", "label": "pipecat-summarizer (ours)"},
}
PLOT_INSTALL_HINT = 'pip install "pipecat-summarizer[replay]"'


def _style(strategy: str) -> dict[str, str | None]:
    return STYLE.get(strategy, {"color": None, "label": strategy})


def _short(n: float) -> str:
    if n >= 1e6:
        return f"{n / 1e6:.2f}M"
    if n >= 1e3:
        return f"{n / 1e3:.0f}k"
    return f"{n:.0f}"


def cumulative_cost(result: StrategyResult, prices: Prices, turns: int) -> list[float]:
    """Dollars billed by the end of each turn 1..``turns`` (no prompt cache)."""
    per_turn = [0.0] * turns
    for r in result.requests:
        if 1 <= r.turn <= turns:
            per_turn[r.turn - 1] += r.total * prices.input / 1e6
    for (sent, got), turn in zip(result.summary_calls, result.requested_turns, strict=False):
        i = min(max(turn, 1), turns) - 1
        per_turn[i] += (sent * prices.summary_input + got * prices.summary_output) / 1e6
    out, total = [], 0.0
    for cost in per_turn:
        total += cost
        out.append(total)
    return out


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
) -> Path:
    """Write the PNG and return its path.

    Args:
        results: The strategies' results.
        path: Where to write the PNG (parent folders are created).
        title: The figure title (the transcript and thresholds).
        subtitle: A second line (how time was modelled).
        threshold: ``max_context_tokens``, drawn as a dashed line.
        turns: Number of turns (defaults to the largest turn seen).
        ceiling: ``max_request_tokens``, drawn as a solid line.
        outage: ``(first turn, first turn after)`` of a summarizer outage, shaded.
        probes: The facts that must stay known (the third panel).
        prices: Prices for the cost panel (the defaults if ``None``).

    Raises:
        RuntimeError: If matplotlib is not installed.
    """
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        from matplotlib.ticker import FuncFormatter, MaxNLocator
    except ImportError as e:  # pragma: no cover - depends on the environment
        raise RuntimeError(f"plotting needs matplotlib: {PLOT_INSTALL_HINT}") from e

    prices = prices or Prices()
    n_turns = turns or max((r.turn for res in results for r in res.requests), default=0)
    x = list(range(1, n_turns + 1))
    summarizing = [r for r in results if r.strategy != "full_buffer"] or list(results)
    has_probes = bool(probes)
    heights = [1.0, 1.35] + ([0.7] if has_probes else [])
    fig, axes = plt.subplots(
        len(heights),
        1,
        figsize=(11, 3.0 * sum(heights) + 1.0),
        sharex=True,
        gridspec_kw={"height_ratios": heights},
        dpi=110,
    )
    ax_cost, ax_size = axes[0], axes[1]

    # 1. cost so far, each total written at the end of its line (pushed apart if close)
    finals = []
    for res in results:
        st = _style(res.strategy)
        y = cumulative_cost(res, prices, n_turns)
        ax_cost.plot(x, y, color=st["color"], linewidth=2.2, label=st["label"])
        if y:
            finals.append((y[-1], st["color"]))
    gap = 0.07 * max((v for v, _ in finals), default=0.0)
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
            fontsize=10,
            fontweight="bold",
            color=color,
        )
    ax_cost.set_ylabel("cost so far ($)")
    ax_cost.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"${v:.2f}"))
    ax_cost.set_title(
        "What the call costs: main LLM input + summarizer "
        f"(main ${prices.input:g}/M in; summarizer ${prices.summary_input:g}/M in, "
        f"${prices.summary_output:g}/M out)",
        fontsize=10,
        loc="left",
    )
    ax_cost.legend(loc="upper left", fontsize=9, framealpha=0.9)

    # 2. request size, with requested / applied summaries as marks under the lines
    top = 0.0
    for res in summarizing:
        top = max(top, max(per_turn_tokens(res.requests, n_turns), default=0))
    top = max(top, threshold or 0, ceiling or 0) * 1.12 or 1.0
    rows = len(summarizing)
    row_h = top * 0.07
    for k, res in enumerate(summarizing):
        st = _style(res.strategy)
        sizes = per_turn_tokens(res.requests, n_turns)
        requested = len(res.summary_calls)
        largest = max(sizes, default=0)
        ax_size.plot(
            x,
            sizes,
            color=st["color"],
            linewidth=1.5,
            label=(
                f"{st['label']}: summaries {requested} requested, {res.summaries_applied} "
                f"applied, {res.summaries_discarded} discarded; largest request "
                f"{largest:,} tokens"
            ),
        )
        base = -row_h * (k + 1)
        if res.requested_turns:
            ax_size.plot(
                res.requested_turns,
                [base] * len(res.requested_turns),
                linestyle="none",
                marker="|",
                markersize=9,
                color=st["color"],
            )
        if res.applied_turns:
            ax_size.plot(
                res.applied_turns,
                [base + row_h * 0.45] * len(res.applied_turns),
                linestyle="none",
                marker="v",
                markersize=6,
                color=st["color"],
                markeredgecolor="black",
                markeredgewidth=0.4,
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
                label=f"  ceiling evictions ({len(evictions)} turns)",
            )
    full = next((r for r in results if r.strategy == "full_buffer"), None)
    if full is not None and full is not summarizing[0]:
        peak = max(per_turn_tokens(full.requests, n_turns), default=0)
        ax_size.text(
            0.99,
            0.97,
            f"full buffer: off the scale, up to {peak:,} tokens",
            transform=ax_size.transAxes,
            ha="right",
            va="top",
            fontsize=9,
            color=_style("full_buffer")["color"],
        )
    if threshold:
        ax_size.axhline(
            threshold,
            linestyle="--",
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
    for ax in axes:
        if outage:
            start, end = outage
            ax.axvspan(
                start - 0.5,
                min(end, n_turns + 1) - 0.5,
                color="#c0392b",
                alpha=0.08,
                linewidth=0,
                label=f"summarizer down (turns {start}-{end - 1})" if ax is ax_size else None,
            )
        ax.grid(True, alpha=0.3)
    ax_size.set_ylim(-row_h * (rows + 0.8), top)
    ax_size.yaxis.set_major_formatter(FuncFormatter(lambda v, _: _short(v) if v >= 0 else ""))
    ax_size.set_ylabel("tokens sent (largest request of the turn)")
    ax_size.set_title(
        "Request size; under the lines: | a summary requested, \u25bc a summary applied "
        "(a | without \u25bc was discarded or failed)",
        fontsize=10,
        loc="left",
    )
    ax_size.legend(loc="upper left", fontsize=8.5, framealpha=0.92)

    # 3. facts kept
    if has_probes:
        ax_facts = axes[2]
        for k, res in enumerate(results):
            st = _style(res.strategy)
            presence = request_probes(res.requests, probes)
            kept = probes_per_turn(res.requests, presence, n_turns)
            # a small offset per strategy, so equal lines stay visible side by side
            shift = 0.08 * (k - (len(results) - 1) / 2)
            ax_facts.step(
                x, [v + shift for v in kept], where="mid", color=st["color"], linewidth=1.6
            )
        stated = _stated_per_turn(results, probes, n_turns)
        ax_facts.step(
            x, stated, where="mid", color="black", linewidth=1, linestyle=":", label="stated"
        )
        ax_facts.set_ylim(-0.3, len(probes) + 0.5)
        ax_facts.yaxis.set_major_locator(MaxNLocator(integer=True))
        ax_facts.set_ylabel(f"facts kept (of {len(probes)})")
        ax_facts.set_title(
            "Facts the request still carries (dotted: facts stated so far)",
            fontsize=10,
            loc="left",
        )
    axes[-1].set_xlabel("user turn")
    axes[-1].set_xlim(1, max(n_turns, 2) + max(2, n_turns // 12))
    heading = "\n".join(textwrap.wrap(title, 110))
    if subtitle:
        heading += "\n" + subtitle
    fig.suptitle(heading, fontsize=11)
    fig.tight_layout()
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out)
    plt.close(fig)
    return out


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
