"""Metrics, costs and the report: pure functions over what the replay recorded.

Definitions (all token figures use the package's ``EstimateTokenCounter``):

* A request's tokens are the sum of ``count_message`` over the messages it was sent, plus
  the system instruction (counted as one system message) when the LLM had one.
* ``input_tokens`` sums every main-LLM request; ``summary_input_tokens`` and
  ``summary_output_tokens`` sum what the summarizer was sent (its system prompt and user
  message, counted as two messages) and what it returned.
* ``prefix_stable_fraction``: among requests after the first, the share whose message list
  begins byte-identically with the whole previous request (a prompt-cache hit).
* ``cost_usd``: main-LLM input at the main model's input price; summarizer input and output at
  the summarizer's own prices (a small model's, by default). The main LLM's own output (the
  replayed answers, the same for every strategy) is reported as ``output_tokens`` but not
  billed.
* ``cost_usd_with_cache``: the same, except that in each request the longest message
  prefix shared with the previous request is billed at the cached-input price.
* ``probes_retained``: probes found, case-insensitively, in the text of the final request.
* ``probes_retained_every_turn``: probes that, from the first request whose text contains
  them (the turn they were stated) on, are in the text of every later request. A probe
  never seen in any request does not count.
* ``ceiling_violations``: requests whose tokens exceed ``max_request_tokens`` (``None``
  when no ceiling was set). The ceiling is enforced by ours only; the others are measured
  against the same figure.
* ``pending_max_messages`` / ``pending_final_messages``: ours' queue of messages evicted
  under the ceiling and not yet summarized, at its largest and at the end (0 for others).
* ``summaries_requested``: requests that reached the summarizer (``summary_calls``);
  ``summaries_discarded``: those that came back and were never applied;
  ``summaries_unfinished``: those still running when the call ended.
* ``probes_per_turn``: for each turn, the probes already stated that its largest request
  carries (the plot's facts panel).

The table and the merge of several reports are in :mod:`pipecat_summarizer_cli.replay.tables`.
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from pipecat_summarizer import EstimateTokenCounter, TokenCounter, message_texts
from pipecat_summarizer_cli.replay.arguments import MAIN_PRICES, SUMMARY_PRICES

STRATEGIES = ("full_buffer", "pipecat_builtin", "pipecat_summarizer")

REPORT_KEYS = (
    "input_tokens",
    "summary_input_tokens",
    "summary_output_tokens",
    "summaries_requested",
    "summaries_applied",
    "summaries_discarded",
    "max_request_tokens",
    "mean_request_tokens",
    "prefix_stable_fraction",
    "cost_usd",
    "cost_usd_with_cache",
    "probes_retained",
    "probes_retained_every_turn",
    "probes_total",
    "ceiling_violations",
    "pending_max_messages",
    "pending_final_messages",
    "hot_path_us_p50",
    "hot_path_us_p99",
)


@dataclass(frozen=True)
class Prices:
    """Prices in dollars per million tokens.

    Parameters:
        input: The main LLM's input.
        output: The main LLM's output (reported, not billed: the same for every strategy).
        cached_input: The main LLM's cached input (the prompt-cache cost).
        summary_input: The summarizer's input.
        summary_output: The summarizer's output.
    """

    input: float = MAIN_PRICES[0]
    output: float = MAIN_PRICES[1]
    cached_input: float = MAIN_PRICES[2]
    summary_input: float = SUMMARY_PRICES[0]
    summary_output: float = SUMMARY_PRICES[1]


@dataclass
class RequestTokens:
    """One main-LLM request, reduced to what the metrics need.

    Parameters:
        turn: The user turn it belongs to.
        messages: The serialized messages (for prefix comparison).
        message_tokens: Tokens of each message.
        system_tokens: Tokens of the system instruction (0 if none).
        answer_tokens: Tokens of the replayed answer.
        system_instruction: The system instruction itself (for probe matching).
        step: The 0-based request within the turn (1 and up: after tool calls).
    """

    turn: int
    messages: tuple[str, ...]
    message_tokens: tuple[int, ...]
    system_tokens: int = 0
    answer_tokens: int = 0
    system_instruction: str | None = None
    step: int = 0

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
        pending_per_turn: Ours: messages in the pending queue after each turn.
        pending_max_messages: Ours: the largest pending queue seen (after a turn or an
            eviction).
        eviction_turns: Ours: the turn of each eviction under the ceiling.
        summaries_discarded: Summaries that came back and were never applied.
        summaries_unfinished: Summaries still running when the call ended.
        applied_turns: The turn of each applied summary.
        requested_turns: The turn of each summarizer request.
        extra: Anything else to report for this strategy.
    """

    strategy: str
    requests: list[RequestTokens]
    summary_calls: list[tuple[int, int]] = field(default_factory=list)
    summaries_applied: int = 0
    hot_path_ns: list[int] = field(default_factory=list)
    final_text: str = ""
    turns: int = 0
    pending_per_turn: list[int] = field(default_factory=list)
    pending_max_messages: int = 0
    eviction_turns: list[int] = field(default_factory=list)
    summaries_discarded: int = 0
    summaries_unfinished: int = 0
    applied_turns: list[int] = field(default_factory=list)
    requested_turns: list[int] = field(default_factory=list)
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


def request_probes(requests: Sequence[RequestTokens], probes: Sequence[str]) -> list[set[str]]:
    """For each request, the probes found in its text (as ``probes_found`` on the same text
    the final request is matched on: the system instruction, then every message's text).

    Each distinct message is lower-cased once; a probe missing from every single message
    is looked for in the joined text too, so one spanning two messages still counts.
    """
    if not probes:
        return [set() for _ in requests]
    lowered = [(p, p.lower()) for p in probes]
    cache: dict[str, str] = {}

    def text_of(serialized: str) -> str:
        text = cache.get(serialized)
        if text is None:
            try:
                message = json.loads(serialized)
            except json.JSONDecodeError:  # not a serialized message: match its text
                message = {"content": serialized}
            text = "\n".join(message_texts(message)).lower()
            cache[serialized] = text
        return text

    out = []
    for req in requests:
        texts = [text_of(m) for m in req.messages]
        if req.system_instruction:
            texts.insert(0, req.system_instruction.lower())
        found = {p for p, low in lowered if any(low in t for t in texts)}
        if len(found) < len(lowered):
            joined = "\n".join(texts)
            found |= {p for p, low in lowered if p not in found and low in joined}
        out.append(found)
    return out


def probe_first_misses(
    presence: Sequence[Iterable[str]], turns: Sequence[int], probes: Sequence[str]
) -> dict[str, int | None]:
    """For each probe, the turn of the first request that lacks it after it was first seen.

    Args:
        presence: For each request in order, the probes its text contains.
        turns: For each request, its user turn.
        probes: The probes.

    Returns:
        ``{probe: None}`` for a probe present in every request from the first one that
        contains it on; otherwise the turn of the first request without it after that
        (``0`` when no request ever contained it).
    """
    out: dict[str, int | None] = {}
    sets = [set(p) for p in presence]
    for probe in probes:
        first = next((i for i, found in enumerate(sets) if probe in found), None)
        if first is None:
            out[probe] = 0
            continue
        miss = next((i for i in range(first + 1, len(sets)) if probe not in sets[i]), None)
        out[probe] = None if miss is None else turns[miss]
    return out


def probes_retained_every_turn(
    presence: Sequence[Iterable[str]], probes: Sequence[str]
) -> list[str]:
    """The probes present in every request from the first one that contains them on.

    Args:
        presence: For each request in order, the probes its text contains.
        probes: The probes.
    """
    misses = probe_first_misses(presence, list(range(len(presence))), probes)
    return [p for p in probes if misses[p] is None]


def probes_per_turn(
    requests: Sequence[RequestTokens], presence: Sequence[Iterable[str]], turns: int
) -> list[int]:
    """For each turn 1..``turns``, the probes already stated that the turn's largest request
    carries (a probe counts from the first request that contains it).

    Args:
        requests: The requests in order.
        presence: For each request, the probes its text contains.
        turns: Number of turns.
    """
    stated: set[str] = set()
    best: list[tuple[int, int]] = [(-1, 0)] * turns  # (tokens, probes) of the largest request
    for req, found in zip(requests, presence, strict=True):
        stated |= set(found)
        if 1 <= req.turn <= turns and req.total > best[req.turn - 1][0]:
            best[req.turn - 1] = (req.total, len(stated & set(found)))
    return [p for _, p in best]


def ceiling_violations(requests: Sequence[RequestTokens], ceiling: int | None) -> int | None:
    """Requests whose tokens exceed ``ceiling``; ``None`` when there is no ceiling."""
    if ceiling is None:
        return None
    return sum(1 for r in requests if r.total > ceiling)


def pending_drained_turn(pending_per_turn: Sequence[int]) -> int | None:
    """The turn by whose end the pending queue was last emptied (``None``: it never held
    anything, or it still does at the end).

    Args:
        pending_per_turn: The queue's length after each turn (turn 1 first).
    """
    last = max((i for i, n in enumerate(pending_per_turn) if n), default=None)
    if last is None or last + 1 >= len(pending_per_turn):
        return None
    return last + 2  # 1-based turn of the first empty queue after the last non-empty one


def strategy_metrics(
    result: StrategyResult,
    *,
    prices: Prices,
    probes: Sequence[str],
    ceiling: int | None = None,
) -> dict[str, Any]:
    """The report entry of one strategy (the required keys first, then extras).

    Args:
        result: What was measured.
        prices: Prices per million tokens.
        probes: Facts that must stay known.
        ceiling: ``max_request_tokens`` to count violations against (``None``: not set).
    """
    requests = result.requests
    totals = [r.total for r in requests]
    input_tokens = sum(totals)
    summary_in = sum(c[0] for c in result.summary_calls)
    summary_out = sum(c[1] for c in result.summary_calls)
    cached = sum(cached_tokens(requests))
    summary_cost = (summary_in * prices.summary_input + summary_out * prices.summary_output) / 1e6
    cost = input_tokens * prices.input / 1e6 + summary_cost
    cost_cache = ((input_tokens - cached) * prices.input + cached * prices.cached_input) / 1e6
    hot_us = [ns / 1000 for ns in result.hot_path_ns]
    found = probes_found(result.final_text, probes)
    presence = request_probes(requests, probes)
    misses = probe_first_misses(presence, [r.turn for r in requests], probes)
    pending_final = result.pending_per_turn[-1] if result.pending_per_turn else 0
    entry: dict[str, Any] = {
        "input_tokens": input_tokens,
        "summary_input_tokens": summary_in,
        "summary_output_tokens": summary_out,
        "summaries_requested": len(result.summary_calls),
        "summaries_applied": result.summaries_applied,
        "summaries_discarded": result.summaries_discarded,
        "max_request_tokens": max(totals, default=0),
        "mean_request_tokens": round(statistics.fmean(totals), 1) if totals else 0.0,
        "prefix_stable_fraction": round(prefix_stable_fraction(requests), 4),
        "cost_usd": round(cost, 6),
        "cost_usd_with_cache": round(cost_cache + summary_cost, 6),
        "probes_retained": len(found),
        "probes_retained_every_turn": sum(1 for m in misses.values() if m is None),
        "probes_total": len(probes),
        "ceiling_violations": ceiling_violations(requests, ceiling),
        "pending_max_messages": result.pending_max_messages,
        "pending_final_messages": pending_final,
        "hot_path_us_p50": round(percentile(hot_us, 50), 2),
        "hot_path_us_p99": round(percentile(hot_us, 99), 2),
        # extras
        "requests": len(requests),
        "summary_calls": len(result.summary_calls),
        "cached_input_tokens": cached,
        "output_tokens": sum(r.answer_tokens for r in requests),
        "final_request_tokens": totals[-1] if totals else 0,
        "probes_missing": [p for p in probes if p not in found],
        "probes_dropped_at_turn": {p: t for p, t in misses.items() if t is not None},
        "hot_path_frames": len(hot_us),
        "summaries_unfinished": result.summaries_unfinished,
        "summary_requested_turns": list(result.requested_turns),
        "summary_applied_turns": list(result.applied_turns),
        "probes_per_turn": probes_per_turn(requests, presence, result.turns),
    }
    if ceiling is not None:
        # the requests a turn makes after its tool calls (the assistant aggregator sends
        # them straight back to the LLM, upstream)
        entry["ceiling_violations_after_tool_calls"] = ceiling_violations(
            [r for r in requests if r.step > 0], ceiling
        )
    if result.pending_per_turn:
        entry["pending_drained_turn"] = pending_drained_turn(result.pending_per_turn)
    entry.update(result.extra)
    return entry


def build_report(
    results: Sequence[StrategyResult],
    *,
    turns: int,
    prices: Prices,
    probes: Sequence[str],
    meta: dict[str, Any] | None = None,
    ceiling: int | None = None,
) -> dict[str, Any]:
    """The JSON report: ``{"turns": int, "strategies": {name: entry}}`` plus extras.

    ``ceiling`` is ``max_request_tokens``, if set: every strategy's requests are counted
    against it (``ceiling_violations``).
    """
    report: dict[str, Any] = {
        "turns": turns,
        "strategies": {
            r.strategy: strategy_metrics(r, prices=prices, probes=probes, ceiling=ceiling)
            for r in results
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
