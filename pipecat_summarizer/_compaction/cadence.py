"""How much to keep and when to compact, so that compaction pays, prompt cache included.

Pure rules, no asyncio, no Pipecat frames.

Four rules:

* :func:`kept_messages`: a compaction planned on a user turn is planned *before* the main
  LLM's answer is in the context, and its summary lands seconds later, after the answer.
  Counted at planning time, ``min_messages_after_summary`` messages plus the answer would
  stay verbatim: one message more than asked for, on every request until the next
  compaction, and the message threshold, which counts the kept messages, trips one exchange
  sooner. The answer on its way is therefore counted among the kept messages.
* :class:`AnswerWait`: the answer may not be one message. When it is a tool round (a call,
  its result, then the answer), a plan made on the user turn's request keeps the call and
  the result on top of the tail it counted: two messages more than asked for, on every
  request until the next compaction. So, when the main LLM can answer with a tool round (the
  context offers tools, or it has called one in this call), a compaction due on a request
  starts once its response has ended (the companion after the LLM reports it, before the
  answer reaches the context): a text answer is then the one message on its way; after tool
  calls, the follow-up request decides again, with the call and the result already in the
  context. Without tools the answer is one message: waiting would only start it later.
* :class:`CacheCadence`: with a prompt cache, a compaction is not free even when its summary
  is: the request after it rewrites the prefix after the system prompt, billed at the full
  input price, while carrying the unsummarized messages only costs the cached price. So,
  given the provider's cached-input discount, a compaction the *message* threshold calls for
  waits until the cache cost of carrying what it would remove has reached the extra cost of
  rewriting the prefix (the economic-order-quantity balance: it minimizes the cost per turn
  of a cycle whose carrying cost grows with every turn). The token threshold is never
  deferred, so requests stay under ``max_context_tokens`` exactly as without a cache.
* :func:`over_context_limit`: the token threshold compares what summarization can reduce
  (a large system prompt must not make it fire every turn), so on its own it lets a request
  grow to ``max_context_tokens`` plus the system prompt. Pipecat's own threshold, on the
  whole context, therefore also applies whenever the protected messages leave at least half
  of ``max_context_tokens``: a compaction never starts later than Pipecat's would.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from pipecat_summarizer._validation import validate_numeric_fields
from pipecat_summarizer.events import Reason

# The reasons a compaction is due on a request the main LLM is about to answer.
ANSWERED_REASONS: frozenset[str] = frozenset({"tokens", "messages"})

ResponseEvent = Literal["text", "tool_call", "end"]
"""What the companion after the main LLM reports of a response as it passes."""


def kept_messages(keep: int, *, answer_pending: bool) -> int:
    """The number of existing messages to keep verbatim when planning a compaction.

    Args:
        keep: ``min_messages_after_summary``: messages that must follow the summary.
        answer_pending: The plan is made on a request the main LLM is about to answer (a
            user turn's context frame or a tool follow-up): its answer lands before the
            summary and is one of
            the kept messages.

    Returns:
        ``keep - 1`` when an answer is pending and ``keep`` is at least 2 (the current
        user message always stays verbatim with its answer), else ``keep``.
    """
    if answer_pending and keep >= 2:
        return keep - 1
    return keep


@dataclass
class AnswerWait:
    """Holds a compaction due on a request until the main LLM's response has ended.

    The processor calls :meth:`request` on every request it prepares, with the reason the
    trigger gave (or ``None``) and whether the context offers tools; the companion after the
    LLM reports the response as it passes: :meth:`text` for answer text, :meth:`tool_call`
    for a function call, and :meth:`ended` at its end, before the answer reaches the context.
    Only a request whose answer may be a tool round waits (the context offers tools, or the
    LLM has called one in this call): otherwise the answer is one message, and waiting would
    only start the compaction later. Without the companion (``enabled=False``) nothing
    waits: a compaction starts on the request, its answer counted as one message. A
    response whose end never came (interrupted, or a companion that cannot see the LLM's
    frames) holds nothing back for long: the next request starts what waited at once, as
    without the companion.

    Parameters:
        enabled: The companion reports responses.
        reason: The compaction waiting for the response to end (``None``: none).
        answered: The response carried text (an answer message on its way to the context).
        tools: The response called tools (a follow-up request comes, and decides again).
        called: The LLM has called a tool in this call (its answers may be tool rounds even
            when the context declares no tools).
    """

    enabled: bool = False
    reason: Reason | None = None
    answered: bool = False
    tools: bool = False
    called: bool = False

    def request(self, reason: Reason | None, *, tools_offered: bool = False) -> Reason | None:
        """A request is on its way to the main LLM; ``reason``: a compaction is due.

        Args:
            reason: Why a compaction is due on this request, or ``None``.
            tools_offered: The request offers the LLM tools (:func:`offers_tools`).

        Returns:
            The reason to start now, or ``None``: nothing is due, or it waits for the
            response's end. It starts now without the companion, when the answer cannot be
            a tool round, for a reason no answer follows (backlog), and when an earlier
            request's wait never saw its response end.
        """
        unended = self.reason is not None
        self.answered = self.tools = False
        may_call = tools_offered or self.called
        if not self.enabled or not may_call or reason not in ANSWERED_REASONS or unended:
            self.reason = None
            return reason
        self.reason = reason
        return None

    def text(self) -> None:
        """The response carries answer text."""
        self.answered = True

    def tool_call(self) -> None:
        """The response calls a tool: its follow-up request decides."""
        self.tools = self.called = True

    def ended(self) -> Reason | None:
        """The response ended; its answer (if any) is not in the context yet.

        Returns:
            The waiting reason to start now (the answer is the one message on its way:
            :attr:`answered`), or ``None`` when nothing waits or the response called tools.
        """
        reason, self.reason = self.reason, None
        return None if self.tools else reason


def offers_tools(tools: Any) -> bool:
    """Whether a context's tools let the LLM call any: a ``ToolsSchema`` with standard or
    custom tools, or a non-empty provider list (``NOT_GIVEN``, ``None``, empty: no)."""
    if isinstance(tools, list | tuple):
        return bool(tools)
    return bool(getattr(tools, "standard_tools", None) or getattr(tools, "custom_tools", None))


def over_context_limit(
    total_tokens: float, reducible_tokens: float, max_context_tokens: int
) -> bool:
    """Pipecat's token threshold on the whole context, where it cannot fire every turn.

    Args:
        total_tokens: Tokens of every message in the context.
        reducible_tokens: Tokens summarization can act on (the rest is protected: the
            system prompt, pinned application facts, injected system messages).
        max_context_tokens: Pipecat's ``max_context_tokens``.

    Returns:
        True when the context has reached ``max_context_tokens`` and the protected messages
        take at most half of it (a larger system prompt would trip the threshold again right
        after every compaction: then only the reducible threshold applies).
    """
    protected = total_tokens - reducible_tokens
    return total_tokens >= max_context_tokens and protected <= max_context_tokens / 2


@dataclass
class CacheCadence:
    """Defers message-threshold compactions while the prompt cache makes waiting cheaper.

    The processor calls :meth:`observe` on every request it prepares (user turns and tool
    follow-ups, each billed) with the context's reducible tokens (what summarization can act
    on), :meth:`defer` when the message threshold trips, and :meth:`compacted` when a summary
    lands.

    The first reducible count after a compaction is the ``base``: what the rewritten prefix
    holds (summary, noted facts, kept tail). Rewriting it again costs ``discount * base``
    more than reading it from the cache. Every turn carries ``reducible - base`` tokens that
    the next compaction would remove, at ``1 - discount`` of the price. The message threshold
    compacts only once ``(1 - discount) * carried >= discount * base``; before the first
    compaction (no base measured yet) it compacts as Pipecat's thresholds say.

    Parameters:
        discount: The provider's cached-input discount, a share of the input price (0.9 when
            a cached token costs a tenth); 0 disables the deferral.
        base: Reducible tokens on the first turn after the last compaction (``None`` until
            measured).
        carried: Sum over turns since then of the reducible tokens above ``base``.
    """

    discount: float = 0.0
    base: int | None = None
    carried: int = 0
    _after_compaction: bool = False

    def __post_init__(self):
        """Validate the discount."""
        validate_numeric_fields(self)
        if not 0 <= self.discount < 1:
            raise ValueError("cached_input_discount must be in [0, 1)")

    @property
    def enabled(self) -> bool:
        """True when a cache discount is given."""
        return self.discount > 0

    def observe(self, reducible_tokens: int) -> None:
        """One request (a user turn or a tool follow-up), with the reducible tokens it
        carries."""
        if self._after_compaction:
            self.base, self.carried, self._after_compaction = reducible_tokens, 0, False
            return
        if self.base is not None:
            self.carried += max(0, reducible_tokens - self.base)

    def compacted(self) -> None:
        """A summary landed: the next observed turn sets the new base."""
        self._after_compaction = True
        self.carried = 0

    def rewrite_cost(self) -> float:
        """Extra cost, in full-price input tokens, of rewriting the prefix once more."""
        return self.discount * (self.base or 0)

    def carry_cost(self) -> float:
        """Cost so far, in full-price input tokens, of carrying the unsummarized growth."""
        return (1 - self.discount) * self.carried

    def defer(self, reason: str | None) -> bool:
        """Whether a compaction for ``reason`` should wait for a later turn.

        Only the message threshold is deferred, only with a discount and a measured base,
        and only while carrying costs less than rewriting. The token threshold, manual
        requests and the ceiling's backlog never wait.
        """
        if reason != "messages" or not self.enabled or self.base is None:
            return False
        return self.carry_cost() < self.rewrite_cost()
