"""Room under the ceiling: evicting the oldest whole units, and the pending queue's places.

Pure functions over plain message lists, like :mod:`plan`: what the ceiling evicts (never the
head, the summary, protected messages, an unresolved unit or the current user turn), and where
each evicted (pending) message sits in the logical conversation until a summary covers it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pipecat_summarizer._compaction.plan import (
    group_units,
    head_length,
    make_protection,
    message_role,
)
from pipecat_summarizer._text.tokens import TokenCounter


def evictable_start(messages: Sequence[Any], summary_message: Any = None) -> int:
    """Index of the first message that may be evicted: after the head and the summary."""
    start = head_length(messages)
    if summary_message is not None and start < len(messages) and messages[start] is summary_message:
        start += 1
    return start


def evict_for_ceiling(
    messages: Sequence[Any],
    *,
    ceiling: int,
    counter: TokenCounter,
    target: int | None = None,
    summary_message: Any = None,
    protect_injected_system: bool = True,
    stale_after: int | None = None,
) -> tuple[list[Any], list[Any]]:
    """Move the oldest whole units out of the context once it exceeds ``ceiling``.

    Evicts down to ``target`` (default: the ceiling) in one step: evicting a little every
    turn would change the request prefix every turn and defeat prompt caching, and the
    headroom also covers requests the processor does not see (a tool call's follow-up).

    Eviction goes on to the next user turn, so the context resumes on one. Never evicted:
    the head (system prompt and pinned block), the summary, protected messages, an
    unresolved tool call's unit (its call, its results and what lies between them: a
    result is never separated from its call), and the current user turn (the last user
    message and what follows it). An unresolved unit is stepped over, not a wall: the
    whole units after it may still leave (a slow tool must not hold the context over the
    ceiling), so the evicted messages need not be a prefix of the context.

    Args:
        messages: The context messages.
        ceiling: Maximum tokens the context may carry.
        counter: Token counter.
        target: Tokens to evict down to once over the ceiling (at most ``ceiling``).
        summary_message: The current summary message, by identity.
        protect_injected_system: Keep mid-call system/developer messages in place.
        stale_after: User messages after which an unresolved tool call no longer blocks
            (see :func:`group_units`).

    Returns:
        ``(remaining, evicted)``: the new context and the evicted messages, in context
        order. ``evicted`` is empty when nothing needs or can be evicted.
    """
    total = sum(counter.count_message(m) for m in messages)
    if total <= ceiling:
        return list(messages), []
    goal = ceiling if target is None else min(target, ceiling)
    start = evictable_start(messages, summary_message)
    users = (i for i in range(start, len(messages)) if message_role(messages[i]) == "user")
    last_user = max(users, default=start)
    is_protected = make_protection(protect_injected_system=protect_injected_system)
    evicted_idx: set[int] = set()
    for unit in group_units(messages, start, stale_after=stale_after):
        if unit.end > last_user:
            break
        if not unit.resolved:
            continue  # stays, with its results; later whole units may still leave
        if total <= goal and message_role(messages[unit.start]) == "user":
            break  # under the goal, and the context now resumes on a user turn
        for k in range(unit.start, unit.end):
            if not is_protected(k, messages[k], messages):
                evicted_idx.add(k)
                total -= counter.count_message(messages[k])
    remaining = [m for k, m in enumerate(messages) if k not in evicted_idx]
    evicted = [messages[k] for k in sorted(evicted_idx)]
    return remaining, evicted


PendingPlaces = dict[int, Any]
"""Where each pending message sits: ``id(message)`` -> the context message it follows
(``None``: right after the head and the summary)."""


def with_pending(
    messages: Sequence[Any],
    pending: Sequence[Any],
    summary_message: Any,
    places: PendingPlaces | None = None,
) -> list:
    """The logical conversation: the context with evicted messages back in their place.

    Evicted messages are the oldest summarizable ones, right after the head and the
    summary, unless eviction stepped over an unresolved tool call: those follow the context
    message recorded in ``places`` (see :func:`pending_places`). A pending message whose
    recorded neighbour has left the context goes back to the front, in queue order.

    Args:
        messages: The context messages.
        pending: The pending queue, in conversation order.
        summary_message: The current summary message, by identity.
        places: Position keys from :func:`pending_places`; ``None``: all at the front.

    Returns:
        The logical message list.
    """
    if not pending:
        return list(messages)
    start = evictable_start(messages, summary_message)
    present = {id(m) for m in messages[start:]}
    front: list[Any] = []
    behind: dict[int, list[Any]] = {}
    for m in pending:
        after = places.get(id(m)) if places else None
        if after is not None and id(after) in present:
            behind.setdefault(id(after), []).append(m)
        else:
            front.append(m)
    out = [*messages[:start], *front]
    for m in messages[start:]:
        out.append(m)
        out.extend(behind.pop(id(m), ()))
    return out


def pending_places(
    logical: Sequence[Any], pending: Sequence[Any], summary_message: Any
) -> PendingPlaces:
    """Position keys for ``pending`` in the logical list: the context message each follows.

    Args:
        logical: The logical conversation (context and pending, in order).
        pending: The pending messages among them.
        summary_message: The summary message in ``logical``, by identity, if any.

    Returns:
        ``id(pending message)`` -> the nearest context message before it, or ``None`` when
        only the head and the summary precede it.
    """
    ids = {id(m) for m in pending}
    context = [m for m in logical if id(m) not in ids]
    start = evictable_start(context, summary_message)
    front = {id(m) for m in context[:start]}
    places: PendingPlaces = {}
    after: Any = None
    for m in logical:
        if id(m) in ids:
            places[id(m)] = after
        elif id(m) not in front:
            after = m
    return places


def split_pending(logical: Sequence[Any], pending: Sequence[Any]) -> tuple[list, list]:
    """Separate a logical list back into ``(context, still_pending)``."""
    ids = {id(m) for m in pending}
    return [m for m in logical if id(m) not in ids], [m for m in logical if id(m) in ids]
