"""Metrics, costs and the report: pure functions over what the replay recorded.

Definitions (all token figures use the package's ``EstimateTokenCounter``):

* A request's tokens are the sum of ``count_message`` over the messages it was sent, plus
  the system instruction (counted as one system message) when the LLM had one.
* ``input_tokens`` sums every main-LLM request; ``summary_input_tokens`` and
  ``summary_output_tokens`` sum what the summarizer was sent (its system prompt and user
  message, counted as two messages) and what it returned.
* ``prefix_stable_fraction``: among requests after the first, the share whose message list
  begins byte-identically with the whole previous request (a prompt-cache hit).
* ``cost_usd``: main-LLM input and summarizer input at the input price, summarizer output
  at the output price. The main LLM's own output (the replayed answers, the same for every
  strategy) is reported as ``output_tokens`` but not billed.
* ``cost_usd_with_cache``: the same, except that in each request the longest message
  prefix shared with the previous request is billed at the cached-input price.
* ``probes_retained``: probes found, case-insensitively, in the text of the final request.
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from pipecat_summarizer.tokens import EstimateTokenCounter, TokenCounter, message_texts

STRATEGIES = ("full_buffer", "pipecat_builtin", "pipecat_summarizer")

REPORT_KEYS = (
    "input_tokens",
    "summary_input_tokens",
    "summary_output_tokens",
    "summaries_applied",
    "max_request_tokens",
    "mean_request_tokens",
    "prefix_stable_fraction",
    "cost_usd",
    "cost_usd_with_cache",
    "probes_retained",
    "probes_total",
    "hot_path_us_p50",
    "hot_path_us_p99",
)


@dataclass(frozen=True)
class Prices:
    """Prices in dollars per million tokens."""

    input: float = 3.0
    output: float = 15.0
    cached_input: float = 0.3


@dataclass
class RequestTokens:
    """One main-LLM request, reduced to what the metrics need.

    Parameters:
        turn: The user turn it belongs to.
        messages: The serialized messages (for prefix comparison).
        message_tokens: Tokens of each message.
        system_tokens: Tokens of the system instruction (0 if none).
        answer_tokens: Tokens of the replayed answer.
    """

    turn: int
    messages: tuple[str, ...]
    message_tokens: tuple[int, ...]
    system_tokens: int = 0
    answer_tokens: int = 0

    @property
    def total(self) -> int:
        """Tokens sent."""
        return sum(self.message_tokens) + self.system_tokens


@dataclass
class StrategyResult:
    """Everything measured for one strategy on one transcript.

    Parameters:
        strategy: The strategy name.
        requests: The main-LLM requests in order.
        summary_calls: ``(input_tokens, output_tokens)`` of each summarizer call.
        summaries_applied: Summaries spliced into the context.
        hot_path_ns: Per-context-frame time in the strategy's summarization code.
        final_text: The text of the final request (for probes and answer recall).
        turns: User turns replayed.
        extra: Anything else to report for this strategy.
    """

    strategy: str
    requests: list[RequestTokens]
    summary_calls: list[tuple[int, int]] = field(default_factory=list)
    summaries_applied: int = 0
    hot_path_ns: list[int] = field(default_factory=list)
    final_text: str = ""
    turns: int = 0
    extra: dict[str, Any] = field(default_factory=dict)


class TokenTable:
    """Counts serialized messages once each (requests repeat most of their messages)."""

    def __init__(self, counter: TokenCounter | None = None):
        """Initialize with a counter (the package estimate by default)."""
        self.counter = counter or EstimateTokenCounter()
        self._cache: dict[str, int] = {}

    def message(self, serialized: str) -> int:
        """Tokens of one serialized message."""
        tokens = self._cache.get(serialized)
        if tokens is None:
            tokens = self.counter.count_message(json.loads(serialized))
            self._cache[serialized] = tokens
        return tokens

    def text(self, text: str | None) -> int:
        """Tokens of a bare string (no message overhead)."""
        if not text:
            return 0
        return self.counter.count_message({"role": "user", "content": text}) - (
            self.counter.count_message({"role": "user", "content": ""})
        )

    def system(self, text: str | None) -> int:
        """Tokens of a system instruction counted as one system message (0 if none)."""
        if not text:
            return 0
        return self.counter.count_message({"role": "system", "content": text})


def common_prefix_length(a: Sequence[str], b: Sequence[str]) -> int:
    """Number of leading messages ``a`` and ``b`` share."""
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


def prefix_stable(previous: Sequence[str], current: Sequence[str]) -> bool:
    """True when ``current`` begins with every message of ``previous``."""
    return len(current) >= len(previous) and common_prefix_length(previous, current) == len(
        previous
    )


def prefix_stable_fraction(requests: Sequence[RequestTokens]) -> float:
    """Share of requests after the first that begin with the whole previous request."""
    if len(requests) < 2:
        return 1.0 if requests else 0.0
    hits = sum(
        prefix_stable(prev.messages, cur.messages)
        for prev, cur in zip(requests, requests[1:], strict=False)
    )
    return hits / (len(requests) - 1)


def cached_tokens(requests: Sequence[RequestTokens]) -> list[int]:
    """Per request, the tokens of the message prefix shared with the previous request.

    The system instruction counts as part of the prefix when it is unchanged.
    """
    out = []
    prev: RequestTokens | None = None
    for req in requests:
        if prev is None:
            out.append(0)
        else:
            n = common_prefix_length(prev.messages, req.messages)
            shared = sum(req.message_tokens[:n])
            if req.system_tokens and req.system_tokens == prev.system_tokens:
                shared += req.system_tokens
            out.append(shared)
        prev = req
    return out


def compaction_points(requests: Sequence[RequestTokens]) -> list[int]:
    """Indices of requests that do not extend the previous one (the context was rewritten)."""
    return [
        i
        for i in range(1, len(requests))
        if not prefix_stable(requests[i - 1].messages, requests[i].messages)
    ]


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q``-th percentile (0-100) by linear interpolation; 0.0 for no values."""
    if not values:
        return 0.0
    data = sorted(values)
    if len(data) == 1:
        return float(data[0])
    pos = (len(data) - 1) * q / 100
    lo = int(pos)
    hi = min(lo + 1, len(data) - 1)
    return float(data[lo] + (data[hi] - data[lo]) * (pos - lo))


def probes_found(text: str, probes: Iterable[str]) -> list[str]:
    """The probes present in ``text`` (case-insensitive substring match)."""
    low = text.lower()
    return [p for p in probes if p.lower() in low]


def request_text(messages: Iterable[Any]) -> str:
    """All the text a list of messages carries (content parts, tool names and arguments)."""
    parts: list[str] = []
    for msg in messages:
        parts.extend(message_texts(msg))
    return "\n".join(parts)


def strategy_metrics(
    result: StrategyResult, *, prices: Prices, probes: Sequence[str]
) -> dict[str, Any]:
    """The report entry of one strategy (the required keys first, then extras)."""
    requests = result.requests
    totals = [r.total for r in requests]
    input_tokens = sum(totals)
    summary_in = sum(c[0] for c in result.summary_calls)
    summary_out = sum(c[1] for c in result.summary_calls)
    cached = sum(cached_tokens(requests))
    summary_cost = (summary_in * prices.input + summary_out * prices.output) / 1e6
    cost = input_tokens * prices.input / 1e6 + summary_cost
    cost_cache = ((input_tokens - cached) * prices.input + cached * prices.cached_input) / 1e6
    hot_us = [ns / 1000 for ns in result.hot_path_ns]
    found = probes_found(result.final_text, probes)
    entry: dict[str, Any] = {
        "input_tokens": input_tokens,
        "summary_input_tokens": summary_in,
        "summary_output_tokens": summary_out,
        "summaries_applied": result.summaries_applied,
        "max_request_tokens": max(totals, default=0),
        "mean_request_tokens": round(statistics.fmean(totals), 1) if totals else 0.0,
        "prefix_stable_fraction": round(prefix_stable_fraction(requests), 4),
        "cost_usd": round(cost, 6),
        "cost_usd_with_cache": round(cost_cache + summary_cost, 6),
        "probes_retained": len(found),
        "probes_total": len(probes),
        "hot_path_us_p50": round(percentile(hot_us, 50), 2),
        "hot_path_us_p99": round(percentile(hot_us, 99), 2),
        # extras
        "requests": len(requests),
        "summary_calls": len(result.summary_calls),
        "cached_input_tokens": cached,
        "output_tokens": sum(r.answer_tokens for r in requests),
        "final_request_tokens": totals[-1] if totals else 0,
        "probes_missing": [p for p in probes if p not in found],
        "hot_path_frames": len(hot_us),
    }
    entry.update(result.extra)
    return entry


def build_report(
    results: Sequence[StrategyResult],
    *,
    turns: int,
    prices: Prices,
    probes: Sequence[str],
    meta: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The JSON report: ``{"turns": int, "strategies": {name: entry}}`` plus extras."""
    report: dict[str, Any] = {
        "turns": turns,
        "strategies": {
            r.strategy: strategy_metrics(r, prices=prices, probes=probes) for r in results
        },
    }
    if meta:
        report.update(meta)
    return report


def per_turn_tokens(requests: Sequence[RequestTokens], turns: int) -> list[int]:
    """For each turn 1..``turns``, the largest request of the turn (0 if none)."""
    out = [0] * turns
    for r in requests:
        if 1 <= r.turn <= turns:
            out[r.turn - 1] = max(out[r.turn - 1], r.total)
    return out


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
    row("summaries applied", lambda s: str(s["summaries_applied"]))
    if any(s.get("summary_failures") for s in strategies.values()):
        row("summary failures", lambda s: str(s.get("summary_failures", 0)))
    row(
        "max / mean request",
        lambda s: f"{_fmt_int(s['max_request_tokens'])} / {_fmt_int(s['mean_request_tokens'])}",
    )
    row("prefix-stable requests", lambda s: f"{100 * s['prefix_stable_fraction']:.1f}%")
    row("cost (no cache)", lambda s: f"${s['cost_usd']:.4f}")
    row("cost (prompt cache)", lambda s: f"${s['cost_usd_with_cache']:.4f}")
    if any(s["probes_total"] for s in strategies.values()):
        row("probes retained", lambda s: f"{s['probes_retained']}/{s['probes_total']}")
    if any("answer_recall" in s for s in strategies.values()):
        row("answer recall", lambda s: f"{100 * s.get('answer_recall', 0):.1f}%")
    row(
        "hot path p50 / p99 (us)",
        lambda s: f"{s['hot_path_us_p50']:.1f} / {s['hot_path_us_p99']:.1f}",
    )

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


def merge_reports(
    reports: Sequence[dict[str, Any]], hot_path_ns: dict[str, list[int]] | None = None
) -> dict[str, Any]:
    """Combine per-conversation reports into one ``{"turns", "strategies"}`` report.

    Token, call and cost figures are summed; ``max_request_tokens`` is the maximum;
    ``mean_request_tokens`` is over all requests; ``prefix_stable_fraction`` is weighted by
    the requests that have a predecessor; ``answer_recall`` (when present) is weighted by
    QA items; hot-path percentiles come from the pooled samples in ``hot_path_ns``.
    """
    names: list[str] = []
    for rep in reports:
        names += [n for n in rep["strategies"] if n not in names]
    merged: dict[str, Any] = {"turns": sum(r["turns"] for r in reports), "strategies": {}}
    summed = (
        "input_tokens",
        "summary_input_tokens",
        "summary_output_tokens",
        "summaries_applied",
        "cost_usd",
        "cost_usd_with_cache",
        "probes_retained",
        "probes_total",
        "requests",
        "summary_calls",
        "cached_input_tokens",
        "output_tokens",
        "summary_failures",
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
        out["mean_request_tokens"] = round(out["input_tokens"] / requests, 1) if requests else 0.0
        pairs = sum(max(0, e["requests"] - 1) for e in entries)
        stable = sum(e["prefix_stable_fraction"] * max(0, e["requests"] - 1) for e in entries)
        out["prefix_stable_fraction"] = round(stable / pairs, 4) if pairs else 0.0
        pooled = [ns / 1000 for ns in (hot_path_ns or {}).get(name, [])]
        out["hot_path_us_p50"] = round(percentile(pooled, 50), 2)
        out["hot_path_us_p99"] = round(percentile(pooled, 99), 2)
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
