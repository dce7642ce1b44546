"""What to compact: grouping, protection, selection under budgets, and the splice.

Pure functions over plain message lists. Nothing here touches asyncio or Pipecat frames, so
every rule is tested directly.

Vocabulary:
    head: the leading ``system``/``developer`` messages; never summarized.
    protected: the head, plus system/developer messages injected mid-call (by default);
        they stay verbatim and are lifted out of a summarized range.
    unit: messages that must be summarized together: an assistant message with
        ``tool_calls``, every result for those calls, and anything between them.
    unresolved: a unit with a call that has no result yet, or an in-progress result;
        nothing from it onwards is summarized, unless ``stale_after`` user turns have
        followed the call (a result that never came must not block compaction forever:
        the call is then summarized as made, with no result).
    service-specific: ``LLMSpecificMessage`` (thinking blocks, provider messages) are
        summarized like any other message: the transcript carries their text
        (``transcript_format.provider_message``). Kept verbatim instead, the thought Pipecat
        appends every turn would pile up beyond the reach of summaries and the ceiling.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from pipecat.processors.aggregators.async_tool_messages import AsyncToolMessagePayload
from pipecat.processors.aggregators.async_tool_messages import (
    parse_message as parse_async_tool_message,
)
from pipecat.processors.aggregators.llm_context import LLMSpecificMessage

from pipecat_summarizer._text.tokens import TokenCounter

SYSTEM_ROLES = ("system", "developer")
# Pipecat writes the payload type first; a generous window also allows other key orders.
_ASYNC_TAG_WITHIN = 4096


def message_role(message: Any) -> str | None:
    """The role of a plain dict message; ``None`` for any other message."""
    if isinstance(message, dict):
        return message.get("role")
    return None


def _async_tool(message: Any) -> AsyncToolMessagePayload | None:
    # Pipecat reports async tool calls with JSON payloads in tool and developer messages:
    # "running" (started, intermediate results) until "finished".
    content = message.get("content") if isinstance(message, dict) else None
    if not isinstance(content, str) or not content.startswith("{"):
        return None
    if '"async_tool"' not in content[:_ASYNC_TAG_WITHIN]:
        return None  # an ordinary JSON tool result: not worth parsing
    try:
        return parse_async_tool_message(message)
    except (RecursionError, ValueError, TypeError, AttributeError):
        # A deeply nested JSON result exceeds json's recursion limit; whatever it is, it is
        # not one of Pipecat's flat status payloads.
        return None


def is_system_like(message: Any) -> bool:
    """True for a system or developer instruction (not an async tool status message)."""
    return message_role(message) in SYSTEM_ROLES and _async_tool(message) is None


def head_length(messages: Sequence[Any]) -> int:
    """Number of leading system/developer messages (the system prompt, wherever it is split)."""
    n = 0
    while n < len(messages) and is_system_like(messages[n]):
        n += 1
    return n


def make_protection(*, protect_injected_system: bool = True):
    """Build the predicate ``(index, message, messages) -> bool`` for never-summarized messages.

    Args:
        protect_injected_system: Also protect system/developer messages that appear after
            the conversation has started.

    Returns:
        The predicate. It is cheap for the incremental meter: it never scans the list
        except for the head check of a system-like message.
    """

    def is_protected(index: int, message: Any, messages: Sequence[Any]) -> bool:
        if not is_system_like(message):
            return False
        if protect_injected_system:
            return True
        return all(is_system_like(m) for m in messages[:index])

    return is_protected


@dataclass(frozen=True)
class Unit:
    """A contiguous run of messages that is summarized or kept as a whole.

    Parameters:
        start: Index of the first message.
        end: Index one past the last message.
        resolved: False when a tool call in it has no final result yet.
    """

    start: int
    end: int
    resolved: bool = True


def group_units(
    messages: Sequence[Any], start: int = 0, *, stale_after: int | None = None
) -> list[Unit]:
    """Group ``messages[start:]`` into units (see the module docstring).

    Tool results that are not adjacent to their call pull everything in between into the
    call's unit, so a cut at any unit boundary never separates a call from a result.
    A tool result without a call in range joins the unit before it; a tool message
    without a ``tool_call_id`` answers no call and resolves nothing.

    Args:
        messages: The context messages.
        start: First index to group.
        stale_after: A call still without its final result once this many user messages
            have followed it counts as resolved (made, with no result); ``None`` waits
            forever.

    Returns:
        Units covering ``[start, len(messages))`` in order.
    """
    n = len(messages)
    call_at: dict[str, int] = {}
    span_end = list(range(start + 1, n + 1))  # exclusive end of each message's unit
    done: dict[str, bool] = {}  # call id -> has its final result
    users_before: dict[str, int] = {}  # call id -> user messages before the call
    users = 0

    def attach(call_id: Any, i: int, final: bool) -> None:
        owner = call_at.get(call_id) if isinstance(call_id, str) else None
        if owner is None:
            return
        span_end[owner - start] = max(span_end[owner - start], i + 1)
        done[call_id] = done[call_id] or final

    for i in range(start, n):
        msg = messages[i]
        if isinstance(msg, LLMSpecificMessage) or not isinstance(msg, dict):
            continue
        role = msg.get("role")
        if role == "user":
            users += 1
            continue
        if role == "assistant" and msg.get("tool_calls"):
            calls = msg["tool_calls"]
            for call in calls if isinstance(calls, list) else ():
                if isinstance(call, dict) and isinstance(call.get("id"), str) and call["id"]:
                    call_at[call["id"]] = i
                    done[call["id"]] = False
                    users_before[call["id"]] = users
            continue
        payload = _async_tool(msg)
        if payload is not None:  # an async call's progress, or its end
            attach(payload.tool_call_id, i, payload.status == "finished")
        elif role == "tool":  # a synchronous result; IN_PROGRESS until written in place
            attach(msg.get("tool_call_id"), i, msg.get("content") != "IN_PROGRESS")
    if stale_after is not None:
        for call_id, final in done.items():
            if not final and users - users_before[call_id] >= stale_after:
                done[call_id] = True  # given up on: summarized as called, with no result
    unresolved_at = {call_at[c] for c, final in done.items() if not final}

    units: list[Unit] = []
    i = start
    while i < n:
        end = span_end[i - start]
        resolved = i not in unresolved_at
        j = i + 1
        while j < end:  # merge overlapping spans
            end = max(end, span_end[j - start])
            resolved = resolved and j not in unresolved_at
            j += 1
        # an orphan tool result must never start a unit (it would start the kept tail)
        if message_role(messages[i]) == "tool" and units:
            prev = units.pop()
            units.append(Unit(prev.start, end, prev.resolved and resolved))
        else:
            units.append(Unit(i, end, resolved))
        i = end
    return units


@dataclass
class Plan:
    """One compaction: which messages go to the summarizer and what the splice replaces.

    Parameters:
        replaced: The messages the summary replaces, in context order, by identity
            (the previous summary, the summarized messages and lifted protected ones).
        summarized: The conversation messages sent to the summarizer.
        lifted: Protected messages inside the range, kept verbatim after the summary.
        shortened: Ids of summarized messages sent shortened (head and tail).
        input_tokens: Estimated tokens of the summarizer input (messages and previous
            summary, without the prompt).
        deferred: Messages that were eligible but left for a later round by the budget.
    """

    replaced: list[Any]
    summarized: list[Any]
    lifted: list[Any] = field(default_factory=list)
    shortened: set[int] = field(default_factory=set)
    input_tokens: int = 0
    deferred: int = 0


def select(
    messages: Sequence[Any],
    *,
    keep: int,
    counter: TokenCounter,
    summary_message: Any = None,
    previous_summary_tokens: int = 0,
    input_budget: int | None = None,
    protect_injected_system: bool = True,
    stale_after: int | None = None,
) -> Plan | None:
    """Choose the oldest messages to summarize, keeping at least ``keep`` messages verbatim.

    Rules: the head is never touched; whole units only, oldest first; never a unit that is
    unresolved or anything after it; the kept tail is the shortest whole-unit tail of at least
    ``keep`` messages (it may start with an assistant message, as Pipecat's does: the summary
    before it carries the question); with ``input_budget``, units are taken until the
    next one would exceed it. A unit that alone exceeds the budget never blocks compaction:
    wherever it stands, it is sent shortened once what is taken before it leaves half the
    budget free (shortened texts share half the budget), otherwise it comes first next time.

    Args:
        messages: The context messages.
        keep: Minimum number of most recent messages kept verbatim.
        counter: Token counter for the budget.
        summary_message: The current summary message (by identity), if any.
        previous_summary_tokens: Tokens of the previous summary text (part of the input).
        input_budget: Maximum summarizer input tokens for messages plus previous summary;
            ``None`` for unbounded.
        protect_injected_system: Keep mid-call system/developer messages verbatim.
        stale_after: User messages after which an unresolved tool call no longer blocks
            (see :func:`group_units`); ``None`` waits forever.

    Returns:
        The plan, or ``None`` when there is nothing new to summarize
        (:func:`blocked_reason` says why).
    """
    n = len(messages)
    region = head_length(messages)
    is_protected = make_protection(protect_injected_system=protect_injected_system)
    latest_cut = n - keep
    if latest_cut <= region:
        return None

    # Candidate cuts are unit boundaries before the first unresolved unit.
    cuts: list[int] = []
    for unit in group_units(messages, region, stale_after=stale_after):
        if not unit.resolved or unit.start > latest_cut:
            break
        if unit.end <= latest_cut:
            cuts.append(unit.end)
    if not cuts:
        return None

    def tokens_of(i: int, j: int) -> int:
        return sum(
            counter.count_message(messages[k])
            for k in range(i, j)
            if messages[k] is not summary_message and not is_protected(k, messages[k], messages)
        )

    budget = None if input_budget is None else max(1, input_budget - previous_summary_tokens)
    shortened: set[int] = set()
    end = region
    used = 0
    for cut in cuts:
        cost = tokens_of(end, cut)
        if budget is not None and used + cost > budget:
            if cost > budget and used <= budget // 2:
                # Too large for any request: sent shortened here, so it cannot stall
                # compaction (the previous summary or other units may stand before it).
                for k in range(end, cut):
                    if messages[k] is not summary_message and not is_protected(
                        k, messages[k], messages
                    ):
                        shortened.add(id(messages[k]))
                used += budget - budget // 2
                end = cut
            break
        used += cost
        end = cut

    # The kept tail is the latest whole-unit cut, as in Pipecat: moving it back to start
    # on a user turn would carry a message more on every request until the next summary.
    replaced = list(messages[region:end])
    summarized = [
        m
        for k, m in enumerate(replaced, start=region)
        if m is not summary_message and not is_protected(k, m, messages)
    ]
    if not summarized:
        return None
    lifted = [m for k, m in enumerate(replaced, start=region) if is_protected(k, m, messages)]
    summarized_ids = {id(m) for m in summarized}
    shortened &= summarized_ids
    used = sum(counter.count_message(m) for m in summarized if id(m) not in shortened) + (
        budget - budget // 2 if shortened and budget is not None else 0
    )
    if budget is not None:
        used = min(used, budget)
    return Plan(
        replaced=replaced,
        summarized=summarized,
        lifted=lifted,
        shortened=shortened,
        input_tokens=used + previous_summary_tokens,
        deferred=cuts[-1] - end,
    )


def blocked_reason(
    messages: Sequence[Any],
    *,
    keep: int,
    summary_message: Any = None,
    protect_injected_system: bool = True,
    stale_after: int | None = None,
) -> str:
    """Why :func:`select` found nothing to summarize, as a short cause without any text.

    Args:
        messages: The context messages, as given to :func:`select`.
        keep: Minimum number of most recent messages kept verbatim.
        summary_message: The current summary message (by identity), if any.
        protect_injected_system: Keep mid-call system/developer messages verbatim.
        stale_after: As for :func:`select`.

    Returns:
        ``"unresolved tool call"``, ``"only the kept recent messages"`` or
        ``"only protected messages"``.
    """
    region = head_length(messages)
    latest_cut = len(messages) - keep
    if latest_cut <= region:
        return "only the kept recent messages"
    units = group_units(messages, region, stale_after=stale_after)
    first = next((u for u in units if not u.resolved), None)
    if first is not None and first.start < latest_cut:
        before = messages[region : first.start]
        is_protected = make_protection(protect_injected_system=protect_injected_system)
        if not any(
            m is not summary_message and not is_protected(region + k, m, messages)
            for k, m in enumerate(before)
        ):
            return "unresolved tool call"
    if units and units[0].end > latest_cut:
        return "only the kept recent messages"
    return "only protected messages"


def locate(messages: Sequence[Any], plan: Plan) -> int | None:
    """Where the planned range now starts, or ``None`` if it is no longer in place.

    The range is found by object identity wherever it now starts (messages may have been
    inserted before it), and must still be contiguous and unchanged.
    """
    if not plan.replaced:
        return None
    first = plan.replaced[0]
    start = next((i for i, m in enumerate(messages) if m is first), None)
    if start is None or start + len(plan.replaced) > len(messages):
        return None
    if any(messages[start + k] is not m for k, m in enumerate(plan.replaced)):
        return None
    return start


def splice(
    messages: Sequence[Any], plan: Plan, summary_message: Any, start: int | None = None
) -> list[Any] | None:
    """Replace the planned range with ``summary_message``, if it is still in place.

    Everything else, including messages appended while the summary was being written, is
    kept in order.

    Args:
        messages: The current context messages.
        plan: The plan the summary was made from.
        summary_message: The new summary message.
        start: The range's position from :func:`locate`, when already known.

    Returns:
        The new message list, or ``None`` when the planned range is no longer in place.
    """
    if start is None:
        start = locate(messages, plan)
        if start is None:
            return None
    end = start + len(plan.replaced)
    return [*messages[:start], summary_message, *plan.lifted, *messages[end:]]
