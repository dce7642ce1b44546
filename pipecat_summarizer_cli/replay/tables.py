"""The comparison tables and the merge of several reports (pure functions over reports).

:func:`format_table` prints one column per strategy; :func:`conditions_table` compares the
summarizing strategies across the conditions of ``replay --compare-busy`` (the calm and the
busy call) and :func:`takeaway` says in words what that comparison shows; :func:`merge_reports`
combines the reports of several conversations (LoCoMo) into one. The metrics themselves are
defined in :mod:`pipecat_summarizer_cli.replay.report`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pipecat_summarizer_cli.replay.report import REPORT_KEYS, percentile


def _fmt_int(n: float) -> str:
    return f"{int(round(n)):,}"


def format_table(report: dict[str, Any]) -> str:
    """A fixed-width comparison table of the strategies in ``report``."""
    strategies = report["strategies"]
    names = list(strategies)
    base = strategies.get("full_buffer")
    rows: list[tuple[str, list[str]]] = []

    def row(label: str, fn) -> None:
        rows.append((label, [fn(strategies[n]) for n in names]))

    row("input tokens (main LLM)", lambda s: _fmt_int(s["input_tokens"]))
    row(
        "summarizer in / out",
        lambda s: f"{_fmt_int(s['summary_input_tokens'])} / {_fmt_int(s['summary_output_tokens'])}",
    )
    if base:
        total_base = base["input_tokens"] + base["summary_input_tokens"]
        row(
            "billed input vs full buffer",
            lambda s: (
                f"{100 * (s['input_tokens'] + s['summary_input_tokens']) / total_base:.1f}%"
                if total_base
                else "-"
            ),
        )
    row(
        "summaries requested / applied / discarded",
        lambda s: (
            f"{s.get('summaries_requested', s.get('summary_calls', 0))} / "
            f"{s['summaries_applied']} / {s.get('summaries_discarded', 0)}"
        ),
    )
    if any(s.get("summary_failures") for s in strategies.values()):
        row("summary failures", lambda s: str(s.get("summary_failures", 0)))
    row(
        "largest / mean request",
        lambda s: f"{_fmt_int(s['max_request_tokens'])} / {_fmt_int(s['mean_request_tokens'])}",
    )
    row("prefix-stable requests", lambda s: f"{100 * s['prefix_stable_fraction']:.1f}%")
    row("cost (no cache)", lambda s: f"${s['cost_usd']:.4f}")
    row("cost (prompt cache)", lambda s: f"${s['cost_usd_with_cache']:.4f}")
    if any(s["probes_total"] for s in strategies.values()):
        row("probes retained", lambda s: f"{s['probes_retained']}/{s['probes_total']}")
        row(
            "probes retained every turn",
            lambda s: f"{s.get('probes_retained_every_turn', 0)}/{s['probes_total']}",
        )
    if any("probes_asked" in s for s in strategies.values()):  # the clearing figure
        row("tool results cleared", lambda s: str(s.get("tool_results_cleared", 0)))
        row(
            "details back when asked",
            lambda s: f"{s.get('probes_back_when_asked', 0)}/{s.get('probes_asked', 0)}",
        )
    if any(s.get("ceiling_violations") is not None for s in strategies.values()):
        row(
            "ceiling violations",
            lambda s: (
                "-" if s.get("ceiling_violations") is None else f"{s['ceiling_violations']:,}"
            ),
        )
    if any(
        s.get("ceiling_violations") is not None or s.get("pending_max_messages")
        for s in strategies.values()
    ):
        row(
            "pending max / final (msgs)",
            lambda s: f"{s.get('pending_max_messages', 0)} / {s.get('pending_final_messages', 0)}",
        )
    if any("answer_recall" in s for s in strategies.values()):
        row("answer recall", lambda s: f"{100 * s.get('answer_recall', 0):.1f}%")
    row(
        "hot path p50 / p99 (us)",
        lambda s: (
            f"{s['hot_path_us_p50']:.1f} / {s['hot_path_us_p99']:.1f}"
            if s.get("hot_path_frames", 1)
            else "-"
        ),
    )

    return _layout(names, rows)


def _layout(names: Sequence[str], rows: Sequence[tuple[str, Sequence[str]]]) -> str:
    label_w = max(len(label) for label, _ in rows)
    col_w = [max(len(n), *(len(vals[i]) for _, vals in rows)) for i, n in enumerate(names)]
    lines = [
        " " * label_w + "  " + "  ".join(n.rjust(w) for n, w in zip(names, col_w, strict=True)),
        "-" * (label_w + 2 + sum(col_w) + 2 * (len(names) - 1)),
    ]
    for label, vals in rows:
        lines.append(
            label.ljust(label_w)
            + "  "
            + "  ".join(v.rjust(w) for v, w in zip(vals, col_w, strict=True))
        )
    return "\n".join(lines)


SHORT_NAMES = {
    "full_buffer": "full buffer",
    "pipecat_builtin": "built-in",
    "pipecat_summarizer": "ours",
}
"""The strategies' names in the condition table and the takeaway."""


def _short_name(strategy: str) -> str:
    return SHORT_NAMES.get(strategy, strategy)


def conditions_table(reports: dict[str, dict[str, Any]]) -> str:
    """The summarizing strategies side by side across conditions (``{name: report}``, in
    order): one column per condition and strategy, the figures that differ between them."""
    cols = [
        (cond, name)
        for cond, rep in reports.items()
        for name in rep["strategies"]
        if name != "full_buffer"
    ]
    names = [f"{cond}: {_short_name(name)}" for cond, name in cols]
    rows: list[tuple[str, list[str]]] = []

    def row(label: str, fn) -> None:
        rows.append(
            (label, [fn(reports[cond], reports[cond]["strategies"][n]) for cond, n in cols])
        )

    row("barge-ins in the call", lambda _r, s: str(s.get("barge_ins", "-")))
    row(
        "summaries requested / applied / discarded",
        lambda _r, s: (
            f"{s['summaries_requested']} / {s['summaries_applied']} / {s['summaries_discarded']}"
        ),
    )

    def billed(rep: dict[str, Any], s: dict[str, Any]) -> str:
        base = rep["strategies"].get("full_buffer")
        if not base or not base["input_tokens"]:
            return "-"
        total = base["input_tokens"] + base["summary_input_tokens"]
        return f"{100 * (s['input_tokens'] + s['summary_input_tokens']) / total:.1f}%"

    row("billed input vs full buffer", billed)
    row("largest request (tokens)", lambda _r, s: _fmt_int(s["max_request_tokens"]))
    row("cost (no cache)", lambda _r, s: f"${s['cost_usd']:.4f}")
    row("cost (prompt cache)", lambda _r, s: f"${s['cost_usd_with_cache']:.4f}")
    if any(s["probes_total"] for rep in reports.values() for s in rep["strategies"].values()):
        row(
            "probes retained every turn",
            lambda _r, s: f"{s.get('probes_retained_every_turn', 0)}/{s['probes_total']}",
        )
    return _layout(names, rows)


def _applied(s: dict[str, Any]) -> str:
    text = f"applies {s['summaries_applied']} of {s['summaries_requested']} summaries"
    return text + (f" ({s['summaries_discarded']} discarded)" if s["summaries_discarded"] else "")


def takeaway(reports: dict[str, dict[str, Any]]) -> list[str]:
    """What the conditions show, in words, from the figures alone: the conclusion first, then
    one line per condition (built-in against ours). Empty without both summarizing
    strategies."""
    pairs = [
        (cond, rep["strategies"]["pipecat_builtin"], rep["strategies"]["pipecat_summarizer"])
        for cond, rep in reports.items()
        if {"pipecat_builtin", "pipecat_summarizer"} <= set(rep["strategies"])
    ]
    if not pairs:
        return []
    lines = []
    for cond, b, o in pairs:
        lines.append(
            f"{cond}: built-in {_applied(b)}, ours {_applied(o)}; largest request "
            f"{_fmt_int(b['max_request_tokens'])} vs {_fmt_int(o['max_request_tokens'])} tokens; "
            f"with a prompt cache ${b['cost_usd_with_cache']:.2f} vs "
            f"${o['cost_usd_with_cache']:.2f}"
        )
    return [_conclusion(pairs), *lines]


def _conclusion(pairs: list[tuple[str, dict[str, Any], dict[str, Any]]]) -> str:
    def cheaper(b: dict[str, Any], o: dict[str, Any]) -> str:
        bc, oc = b["cost_usd_with_cache"], o["cost_usd_with_cache"]
        pct = 100 * (bc - oc) / bc if bc else 0.0
        if abs(pct) < 1:
            return "costs the same with a prompt cache (within 1%)"
        return f"costs {abs(pct):.0f}% {'less' if pct > 0 else 'more'} with a prompt cache"

    alike = [(c, b, o) for c, b, o in pairs if b["summaries_discarded"] == o["summaries_discarded"]]
    apart = [(c, b, o) for c, b, o in pairs if b["summaries_discarded"] > o["summaries_discarded"]]
    parts = []
    for cond, b, o in alike:
        discarded = b["summaries_discarded"]
        parts.append(
            f"on the {cond} call both summarizers "
            + (f"discard {discarded} summaries" if discarded else "apply every summary")
            + f" and ours {cheaper(b, o)}"
        )
    for cond, b, o in apart:
        parts.append(
            f"on the {cond} call the built-in discards {b['summaries_discarded']} of its "
            f"{b['summaries_requested']} summaries and its requests grow to "
            f"{_fmt_int(b['max_request_tokens'])} tokens; ours discards "
            f"{o['summaries_discarded'] or 'none'}, sends at most "
            f"{_fmt_int(o['max_request_tokens'])} and {cheaper(b, o)}"
        )
    others = [c for c, b, o in pairs if b["summaries_discarded"] < o["summaries_discarded"]]
    if others:
        parts.append(f"on the {' and '.join(others)} call ours discards more than the built-in")
    text = "; ".join(parts) + "."
    return text[0].upper() + text[1:]


def merge_reports(
    reports: Sequence[dict[str, Any]], hot_path_ns: dict[str, list[int]] | None = None
) -> dict[str, Any]:
    """Combine per-conversation reports into one ``{"turns", "strategies"}`` report.

    Token, call, cost, probe and violation figures are summed (``ceiling_violations``
    stays ``None`` without a ceiling); ``max_request_tokens`` and ``pending_max_messages``
    are the maximum; ``mean_request_tokens`` is over all requests; ``prefix_stable_fraction``
    is weighted by the requests that have a predecessor; ``answer_recall`` (when present) is
    weighted by QA items; hot-path percentiles come from the pooled samples in
    ``hot_path_ns``.
    """
    names: list[str] = []
    for rep in reports:
        names += [n for n in rep["strategies"] if n not in names]
    merged: dict[str, Any] = {"turns": sum(r["turns"] for r in reports), "strategies": {}}
    summed = (
        "input_tokens",
        "summary_input_tokens",
        "summary_output_tokens",
        "summaries_requested",
        "summaries_applied",
        "summaries_discarded",
        "summaries_unfinished",
        "cost_usd",
        "cost_usd_with_cache",
        "probes_retained",
        "probes_total",
        "requests",
        "summary_calls",
        "cached_input_tokens",
        "output_tokens",
        "summary_failures",
        "probes_retained_every_turn",
        "pending_final_messages",
    )
    for name in names:
        entries = [r["strategies"][name] for r in reports if name in r["strategies"]]
        out: dict[str, Any] = {}
        for key in summed:
            if all(key in e for e in entries):
                total = sum(e[key] for e in entries)
                out[key] = round(total, 6) if isinstance(total, float) else total
        requests = sum(e["requests"] for e in entries)
        out["max_request_tokens"] = max(e["max_request_tokens"] for e in entries)
        out["pending_max_messages"] = max(e.get("pending_max_messages", 0) for e in entries)
        violations = [e.get("ceiling_violations") for e in entries]
        out["ceiling_violations"] = (
            None if all(v is None for v in violations) else sum(v or 0 for v in violations)
        )
        out["mean_request_tokens"] = round(out["input_tokens"] / requests, 1) if requests else 0.0
        pairs = sum(max(0, e["requests"] - 1) for e in entries)
        stable = sum(e["prefix_stable_fraction"] * max(0, e["requests"] - 1) for e in entries)
        out["prefix_stable_fraction"] = round(stable / pairs, 4) if pairs else 0.0
        pooled = [ns / 1000 for ns in (hot_path_ns or {}).get(name, [])]
        out["hot_path_us_p50"] = round(percentile(pooled, 50), 2)
        out["hot_path_us_p99"] = round(percentile(pooled, 99), 2)
        out["hot_path_frames"] = len(pooled)
        if all("answer_recall" in e for e in entries):
            items = sum(e["qa_items"] for e in entries)
            out["answer_recall"] = (
                round(sum(e["answer_recall"] * e["qa_items"] for e in entries) / items, 4)
                if items
                else 0.0
            )
            out["qa_items"] = items
        merged["strategies"][name] = {k: out[k] for k in REPORT_KEYS if k in out} | {
            k: v for k, v in out.items() if k not in REPORT_KEYS
        }
    return merged
