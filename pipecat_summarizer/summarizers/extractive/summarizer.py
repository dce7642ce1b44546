"""The extractive summarizer: the user's facts, constraints, decisions and open questions,
kept verbatim, merged into the previous record and trimmed to the budget.

Also :func:`pinnable_facts`, the narrow entry point the processor uses to pin the salient
facts of messages that leave the context unsummarized.
"""

from __future__ import annotations

import asyncio
from collections.abc import Collection, Sequence
from typing import Any

from pipecat.processors.aggregators.llm_context import LLMSpecificMessage

from pipecat_summarizer._compaction.prompt import SummaryRequest
from pipecat_summarizer._compaction.transcript import provider_message
from pipecat_summarizer._record.authority import is_instruction_like
from pipecat_summarizer._record.corrections import applied, find_correction
from pipecat_summarizer._record.sections import parse_sections
from pipecat_summarizer._text.vocabulary import (
    CONSTRAINTS,
    CORRECTED_MARK,
    DECISIONS,
    FACTS,
    OPEN_QUESTIONS,
    fold,
    topic_words,
)
from pipecat_summarizer.summarizers.base import SummaryResult
from pipecat_summarizer.summarizers.extractive.classify import (
    classify_user,
    is_announcement,
    is_correction,
    is_echo,
    is_fact,
    is_small_talk,
    split_sentences,
)
from pipecat_summarizer.summarizers.extractive.lexicon import (
    ACTION_TOOL_RE,
    ASSISTANT_DECISION_RE,
    DECISION_WORDS,
    ID_RE,
    PENDING_RESULT_RE,
    READ_TOOL_RE,
)
from pipecat_summarizer.summarizers.extractive.record import (
    Record,
    compact,
    fit,
    instruction_note,
    looks_like_record,
    pin_worthy,
    text_of,
)

# Larger inputs are summarized in a worker thread (about 0.2 ms per message).
INLINE_MESSAGES = 300


class ExtractiveSummarizer:
    """Summarizes by keeping the important sentences verbatim, with no model at all.

    User sentences that name something (a name, a number, an amount, a date, an ID, "my X
    is ...") go to FACTS; sentences with substance about what must or must not happen (a
    diet, an allergy or a health condition, a medication, a limit with a number, a rule for
    the assistant, a firm preference such as "I don't eat pork") to CONSTRAINTS; bookings
    and confirmations (from the assistant's words and from the results of action tools) and
    the user's choices to DECISIONS; the user's latest unanswered questions to OPEN
    QUESTIONS. Questions, filler and hedged remarks are not facts or constraints. A user
    correction ("actually", "I meant", ...) replaces the earlier statement it corrects and is
    marked "(corrected)"; a correction that only announces itself ("Actually, I need to
    correct that.") marks the sentence that follows instead. The previous record is merged
    in first, so facts survive any number of rolls until the budget forces them out.

    Over the budget, the least salient bullets go first (see :func:`salience`: the user's
    name, IDs, health details and corrections rank high, generic remarks and old questions
    low), the oldest first among equals, with questions, then decisions, then facts, then
    constraints as the last tie-breaker.

    The result is deterministic and always within ``request.max_tokens`` as counted by
    :func:`~pipecat_summarizer._text.tokens.estimate_text_tokens`. :meth:`summarize` also returns
    the bullets worth pinning (:attr:`SummaryResult.sections`), so a processor that pins
    facts takes only those rather than every FACTS and CONSTRAINTS bullet.

    Args:
        max_open_questions: How many of the latest unanswered questions to keep.
        max_item_chars: Longer sentences and tool results are shortened to this many
            characters.
        pin_tokens: About how many tokens the pin-worthy bullets may take in total.
    """

    def __init__(
        self, *, max_open_questions: int = 3, max_item_chars: int = 400, pin_tokens: int = 250
    ):
        """Initialize the summarizer."""
        self.max_open_questions = max(0, max_open_questions)
        self.max_item_chars = max(40, max_item_chars)
        self.pin_tokens = max(0, pin_tokens)

    async def summarize(self, request: SummaryRequest) -> SummaryResult:
        """Build the updated memory record for ``request``.

        Args:
            request: The summary request; ``messages``, ``previous_summary`` and
                ``max_tokens`` are used, the prompts are not.

        Returns:
            The record (``FACTS:``, ``CONSTRAINTS:``, ``DECISIONS:`` and
            ``OPEN QUESTIONS:``, each followed by ``- `` bullets or ``- none``) as ``text``,
            and in ``sections`` the FACTS and CONSTRAINTS bullets worth pinning: the most
            salient ones, verbatim from the text, about ``pin_tokens`` in total.
        """
        return await self.summarize_result_async(
            request.messages,
            previous_summary=request.previous_summary,
            max_tokens=request.max_tokens,
            unresolved_calls=request.unresolved_calls,
            interrupted=request.interrupted,
        )

    async def summarize_result_async(
        self,
        messages: Sequence[Any],
        *,
        previous_summary: str | None,
        max_tokens: int,
        unresolved_calls: Collection[str] = frozenset(),
        interrupted: Collection[int] = frozenset(),
    ) -> SummaryResult:
        """Run :meth:`summarize_messages_result`, off the event loop when the input is large.

        Args:
            messages: OpenAI-format messages, oldest first.
            previous_summary: The record being rolled forward, or ``None``.
            max_tokens: The output budget.
            unresolved_calls: Ids of tool calls whose result never arrived.
            interrupted: Indices (in ``messages``) of answers a barge-in cut off.

        Returns:
            The record and its pin-worthy bullets.
        """
        size = len(messages) + len(previous_summary or "") // 2000
        if size <= INLINE_MESSAGES:
            return self.summarize_messages_result(
                messages,
                previous_summary=previous_summary,
                max_tokens=max_tokens,
                unresolved_calls=unresolved_calls,
                interrupted=interrupted,
            )
        # A few thousand messages take about a second; keep the audio pipeline running.
        return await asyncio.to_thread(
            self.summarize_messages_result,
            list(messages),
            previous_summary=previous_summary,
            max_tokens=max_tokens,
            unresolved_calls=unresolved_calls,
            interrupted=interrupted,
        )

    def summarize_messages_result(
        self,
        messages: Sequence[Any],
        *,
        previous_summary: str | None,
        max_tokens: int,
        unresolved_calls: Collection[str] = frozenset(),
        interrupted: Collection[int] = frozenset(),
    ) -> SummaryResult:
        """Synchronous core of :meth:`summarize`.

        Instruction-like sentences (``authority.is_instruction_like``)
        never become FACTS, CONSTRAINTS or DECISIONS: they are kept under OPEN QUESTIONS as
        what their speaker said, and never pinned.

        Args:
            messages: OpenAI-format messages, oldest first; provider-specific messages
                count as their inner role's text.
            previous_summary: The record being rolled forward, or ``None``.
            max_tokens: The output budget (values below 1 are treated as 1).
            unresolved_calls: Ids of tool calls whose result never arrived; an action
                tool's such call is noted under OPEN QUESTIONS.
            interrupted: Indices (in ``messages``) of answers a barge-in cut off: the caller
                heard only part of them, so they make no decision and no fact.

        Returns:
            The record text, and in ``sections`` its pin-worthy FACTS and CONSTRAINTS.
        """
        record = Record()
        if previous_summary and previous_summary.strip():
            record.merge(self._parse_previous(previous_summary))
        self._extract(messages, record, frozenset(unresolved_calls), frozenset(interrupted))
        if record.is_empty():
            first = self._first_user_sentence(messages)
            if first:
                record.add(FACTS, first)
        text, kept = fit(record, max(1, int(max_tokens)))
        return SummaryResult(text=text, sections=pin_worthy(kept, self.pin_tokens))

    # -- extraction ----------------------------------------------------------------------

    def _parse_previous(self, text: str) -> dict[str, list[str]]:
        sections = parse_sections(text)
        if not any(sections.values()):
            # A free-form summary (another backend, an edited one): carry it forward as facts.
            sections[FACTS] = [self._shorten(s) for s in split_sentences(text)]
        return sections

    def _shorten(self, text: str) -> str:
        limit = self.max_item_chars
        if len(text) <= limit:
            return text
        head = limit * 2 // 3
        return f"{text[:head].rstrip()} … {text[len(text) - (limit - head - 3) :].lstrip()}"

    def _extract(
        self,
        messages: Sequence[Any],
        record: Record,
        unresolved: frozenset[str],
        interrupted: frozenset[int] = frozenset(),
    ) -> None:
        calls: dict[str, tuple[str, str]] = {}
        unmatched: list[tuple[str, str]] = []  # calls without a usable id, first in first out
        questions: list[tuple[int, str]] = []
        assistant_texts: list[tuple[int, str]] = []
        user_ids: set[str] = set()
        # After "Actually, I need to correct that.": how many more user sentences may carry
        # the correction it announced.
        announced = 0
        reply = ""  # the latest assistant text
        pending: list[tuple[str, str]] = []  # action calls whose result never arrived
        for index, message in enumerate(messages):
            if isinstance(message, LLMSpecificMessage):
                message = _plain(message)
            if not isinstance(message, dict):
                continue
            role = str(message.get("role", ""))
            text = text_of(message.get("content"))
            if text and role != "tool" and looks_like_record(text):
                # A summary message already in the context (Pipecat's built-in flow); a tool
                # result is never one, whatever headings it carries.
                record.merge(parse_sections(text))
                continue
            if role == "user":
                for sentence in split_sentences(text):
                    user_ids.update(m.group(0) for m in ID_RE.finditer(sentence))
                    announced = self._add_user_sentence(
                        sentence, index, record, questions, announced, reply
                    )
            elif role == "assistant":
                # a cut answer was heard only in part: no decision, fact or correction
                sentences = [] if index in interrupted else split_sentences(text)
                if text.strip():
                    assistant_texts.append((index, text))
                    reply = text
                for sentence in sentences:
                    self._add_assistant_sentence(sentence, record, user_ids)
                for call in message.get("tool_calls") or []:
                    if not isinstance(call, dict):
                        continue
                    func = call.get("function") or {}
                    entry = (str(func.get("name") or "?"), compact(func.get("arguments", ""), 160))
                    call_id = call.get("id")
                    if call_id:
                        calls[str(call_id)] = entry
                    unmatched.append(entry)
                    if call_id in unresolved and ACTION_TOOL_RE.search(entry[0]):
                        pending.append(entry)
            elif role == "tool":
                call_id = str(message.get("tool_call_id") or "")
                called = calls.get(call_id)
                if called is None and unmatched:
                    called = unmatched[0]  # Pipecat's own transcript drops call ids
                if called in unmatched:
                    unmatched.remove(called)
                self._add_tool_result(called, message.get("content"), record)
        self._add_open_questions(questions, assistant_texts, record)
        for name, args in pending:  # after the trim: an action left hanging is worth keeping
            record.add(OPEN_QUESTIONS, self._shorten(f"Tool {name}({args}) was called; no result"))

    def _add_user_sentence(
        self,
        sentence: str,
        index: int,
        record: Record,
        questions: list[tuple[int, str]],
        announced: int,
        reply: str,
    ) -> int:
        """Record one user sentence.

        Returns:
            How many more user sentences may carry the content of an announced correction.
        """
        if is_instruction_like(sentence):
            # What the caller said, never a fact or a rule: noted, not pinned.
            record.add(OPEN_QUESTIONS, instruction_note(f"User: {self._shorten(sentence)}"))
            return announced
        if self._correct(sentence, record):
            return 0  # "make that 21 March": the detail it names, with the new value
        section = classify_user(sentence)
        if section == OPEN_QUESTIONS:
            questions.append((index, sentence))
            return announced
        low = fold(sentence)
        corrected = is_correction(low)
        if corrected and is_announcement(sentence):
            return 2  # the content comes next: "Actually, I need to correct that. I said..."
        if section is None:
            if corrected:
                # A correction without a kind of its own still replaces what it matches.
                section = record.apply_correction(sentence)
                if section is not None:
                    record.add(section, f"User: {self._shorten(sentence)} {CORRECTED_MARK}")
            return max(0, announced - 1)
        if corrected or announced:
            record.apply_correction(sentence)
            record.add(section, f"User: {self._shorten(sentence)} {CORRECTED_MARK}")
            return 0
        if section == FACTS and is_echo(sentence, low, reply):
            return announced
        record.add(section, f"User: {self._shorten(sentence)}")
        return 0

    def _correct(self, sentence: str, record: Record) -> bool:
        """Replace the earlier detail ``sentence`` corrects (:func:`find_correction`) with
        itself at the new value, marked "(corrected from OLD)"; True if one was."""
        details = [
            (name, i, item)
            for name in (FACTS, CONSTRAINTS, DECISIONS)
            for i, item in enumerate(record.sections[name])
            if not item.lower().startswith("tool ")
        ]
        found = find_correction(sentence, [(None, item) for _, _, item in details])
        if found is None:  # said again after it was applied: nothing more to replace
            return applied(sentence, (item for _, _, item in details))
        name, i, _ = next(d for d in details if d[2] == found.target)
        record.remove(name, i)
        record.add(name, self._shorten(found.text))
        return True

    def _add_assistant_sentence(self, sentence: str, record: Record, user_ids: set[str]) -> None:
        if sentence.rstrip().endswith(("?", "？")):
            return  # offers and clarifying questions are not commitments
        if self._correct(sentence, record):
            return  # "I've moved it to 21 March"
        low = fold(sentence)
        if ASSISTANT_DECISION_RE.search(low):
            if len(topic_words(sentence) - DECISION_WORDS) >= 2 or is_fact(sentence, low):
                record.add(DECISIONS, f"Assistant: {self._shorten(sentence)}")
        elif any(m.group(0) not in user_ids for m in ID_RE.finditer(sentence)):
            # An identifier the assistant introduced (an order found by lookup, say).
            record.add(FACTS, f"Assistant: {self._shorten(sentence)}")

    def _add_tool_result(self, entry: tuple[str, str] | None, content: Any, record: Record) -> None:
        if entry is None:
            return
        name, args = entry
        result = text_of(content) if not isinstance(content, str) else content
        if not result or PENDING_RESULT_RE.match(result):
            return
        if READ_TOOL_RE.match(name) or not ACTION_TOOL_RE.search(name):
            return
        item = f"Tool {name}({args}) -> {compact(result, 200)}"
        record.add(DECISIONS, self._shorten(item))

    def _add_open_questions(
        self,
        questions: list[tuple[int, str]],
        assistant_texts: list[tuple[int, str]],
        record: Record,
    ) -> None:
        # Newest first, and only the last few: older questions were most likely handled.
        open_questions: list[str] = []
        for index, sentence in reversed(questions[-4 * self.max_open_questions :]):
            if len(open_questions) >= self.max_open_questions:
                break
            words = topic_words(sentence)
            needed = max(2, (len(words) + 1) // 2)
            answered = False
            for later, reply in reversed(assistant_texts):
                if later <= index:
                    break
                if len(words & topic_words(reply)) >= needed:
                    answered = True  # a later reply that repeats most of the question
                    break
            if not answered:
                open_questions.append(f"User: {self._shorten(sentence)}")
        for item in reversed(open_questions):
            record.add(OPEN_QUESTIONS, item)
        # Older questions from earlier records were most likely answered since.
        record.trim(OPEN_QUESTIONS, self.max_open_questions)

    @staticmethod
    def _first_user_sentence(messages: Sequence[Any]) -> str | None:
        first = None
        for message in messages:
            if not isinstance(message, dict) or message.get("role") != "user":
                continue
            for sentence in split_sentences(text_of(message.get("content"))):
                if not is_small_talk(sentence):
                    return f"User: {sentence}"
                first = first or f"User: {sentence}"
        return first


def _plain(message: LLMSpecificMessage) -> dict[str, Any]:
    """A provider-specific message as a plain one of its role (Gemini's "model" is the
    assistant), so its text is summarized like any other."""
    role, text = provider_message(message)
    return {"role": "assistant" if role == "model" else role, "content": text}


def pinnable_facts(messages: Sequence[Any], max_tokens: int) -> dict[str, list[str]]:
    """The salient facts and constraints of ``messages``, to pin when they leave the context
    without a summary (the ceiling evicted them).

    Instruction-like sentences are never among them.

    Args:
        messages: OpenAI-format messages, oldest first.
        max_tokens: The pinned block's budget; the facts found take at most half of it, so
            one eviction cannot push every earlier fact out.

    Returns:
        ``{"FACTS": [...], "CONSTRAINTS": [...]}``: verbatim bullets, possibly empty lists.
    """
    budget = max(1, int(max_tokens))
    found = ExtractiveSummarizer(pin_tokens=budget // 2).summarize_messages_result(
        messages, previous_summary=None, max_tokens=budget
    )
    return dict(found.sections or {})
