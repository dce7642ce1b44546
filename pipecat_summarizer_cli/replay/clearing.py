"""The clearing figure (``--strategies ...,pipecat_summarizer_clearing``): tool results
cleared, and whether a detail the caller asks about again is in the request that answers.

Pure functions over what the replay recorded. A probe's *ask turn* is the last turn whose
recorded answer states it, when an earlier turn already carried it (a tool result, an answer):
the caller asks for it again. The detail is *back when asked* when the first request of that
turn (the one the main LLM answers with it) holds it, verbatim: still in view, in the summary,
or brought back by recall.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from pipecat_summarizer_cli.replay.report import RequestTokens, StrategyResult, request_probes
from pipecat_summarizer_cli.replay.transcript import Transcript

#: How the library's placeholder for a cleared tool result starts.
CLEARED_PREFIX = "[tool result cleared]"

#: The strategy whose presence turns the figure on.
CLEARING_STRATEGY = "pipecat_summarizer_clearing"


def _text(message: dict) -> str:
    parts = [str(message.get("content") or "")]
    parts += [json.dumps(c) for c in message.get("tool_calls") or ()]
    return "\n".join(parts)


def ask_turns(transcript: Transcript, probes: Sequence[str]) -> dict[str, int]:
    """Each probe asked again: the turn whose recorded answer states it for the last time,
    when an earlier turn's responses already carried it."""
    out: dict[str, int] = {}
    for probe in probes:
        low = probe.lower()
        carried = [
            t.index for t in transcript.turns if any(low in _text(m).lower() for m in t.responses)
        ]
        if len(carried) < 2:
            continue
        answered = [
            t.index
            for t in transcript.turns
            if t.index in carried
            and t.responses
            and t.responses[-1].get("role") == "assistant"
            and low in str(t.responses[-1].get("content") or "").lower()
        ]
        if answered and answered[-1] > carried[0]:
            out[probe] = answered[-1]
    return out


def back_when_asked(requests: Sequence[RequestTokens], asks: dict[str, int]) -> list[str]:
    """The probes the first request of their ask turn holds."""
    firsts: dict[int, int] = {}
    for i, r in enumerate(requests):
        firsts.setdefault(r.turn, i)
    presence = request_probes(requests, list(asks))
    return [p for p, turn in asks.items() if turn in firsts and p in presence[firsts[turn]]]


def cleared_results(requests: Sequence[RequestTokens]) -> int:
    """Tool results seen cleared in any request (distinct tool call ids)."""
    ids: set[str] = set()
    for r in requests:
        for raw in r.messages:
            if CLEARED_PREFIX not in raw:
                continue
            message = json.loads(raw)
            content = message.get("content")
            if isinstance(content, str) and content.startswith(CLEARED_PREFIX):
                ids.add(str(message.get("tool_call_id")))
    return len(ids)


def add_clearing_figures(
    report: dict[str, Any],
    results: Sequence[StrategyResult],
    transcript: Transcript,
    probes: Sequence[str],
) -> None:
    """Add each strategy's ``tool_results_cleared``, ``probes_asked`` and
    ``probes_back_when_asked`` to ``report`` (in place)."""
    asks = ask_turns(transcript, probes)
    for r in results:
        entry = report["strategies"][r.strategy]
        entry["tool_results_cleared"] = cleared_results(r.requests)
        back = back_when_asked(r.requests, asks)
        entry["probes_asked"] = len(asks)
        entry["probes_back_when_asked"] = len(back)
        entry["probes_missing_when_asked"] = [p for p in asks if p not in back]
