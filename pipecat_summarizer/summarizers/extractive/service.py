"""The extractive summarizer as a Pipecat ``LLMService``, and the request parsing it needs.

:class:`ExtractiveLLMService` lets Pipecat's built-in context summarization
(``LLMContextSummaryConfig(llm=...)``) and
:class:`~pipecat_summarizer.summarizers.pipecat_llm.PipecatLLMSummarizer` use the extractive
summarizer like any other LLM.
"""

from __future__ import annotations

import re
from typing import Any

from pipecat.processors.aggregators.llm_context import LLMContext
from pipecat.services.llm_service import LLMService
from pipecat.services.settings import LLMSettings

from pipecat_summarizer._compaction.prompt import parse_request
from pipecat_summarizer._compaction.transcript import ParsedTranscript
from pipecat_summarizer.summarizers.extractive.record import text_of
from pipecat_summarizer.summarizers.extractive.summarizer import ExtractiveSummarizer

# Pipecat's built-in summarization sends "Conversation history:" and a plain transcript:
# "USER: ...", "TOOL_CALL: name(args)", "TOOL_RESULT[id]: ...". It is not forgery-proof
# (that is Pipecat's format); this package's own request (one escaped line per message) is parsed by
# :func:`pipecat_summarizer._compaction.prompt.parse_request`.
_ROLES = "USER|ASSISTANT|SYSTEM|DEVELOPER|TOOL|UNKNOWN"
_PIPECAT_CALL_RE = re.compile(r"^TOOL_CALL: ?(?P<rest>.*)$")
_PIPECAT_RESULT_RE = re.compile(r"^TOOL_RESULT\[(?P<id>[^\]\n]*)\]: ?(?P<rest>.*)$")
_ROLE_LINE_RE = re.compile(rf"^(?P<role>{_ROLES}): ?(?P<rest>.*)$")
_PIPECAT_HEADER_RE = re.compile(r"^\s*Conversation history:[ \t]*\n?")


def _transcript_entries(text: str) -> list[dict[str, Any]]:
    """Split a transcript into entries; lines without a known prefix continue the last one."""
    entries: list[dict[str, Any]] = []
    for line in text.split("\n"):
        entry: dict[str, Any] | None = None
        if m := _PIPECAT_CALL_RE.match(line):
            entry = {"kind": "call", "id": None, "rest": m.group("rest")}
        elif m := _PIPECAT_RESULT_RE.match(line):
            entry = {"kind": "result", "id": m.group("id"), "rest": m.group("rest")}
        elif m := _ROLE_LINE_RE.match(line):
            entry = {"kind": "role", "role": m.group("role").lower(), "rest": m.group("rest")}
        if entry is not None:
            entries.append(entry)
        elif entries:
            entries[-1]["rest"] += "\n" + line
    for entry in entries:
        entry["rest"] = entry["rest"].strip()
    return entries


def pipecat_transcript_to_messages(text: str) -> list[dict[str, Any]]:
    """Turn Pipecat's summarization transcript back into OpenAI-format messages.

    Args:
        text: The transcript (``USER: ...``, ``TOOL_CALL: name(args)``,
            ``TOOL_RESULT[id]: ...``), without Pipecat's ``Conversation history:`` header.

    Returns:
        The messages, oldest first; tool calls are attached to the assistant message they
        follow.
    """
    messages: list[dict[str, Any]] = []
    for entry in _transcript_entries(text):
        kind, rest = entry["kind"], entry["rest"]
        if kind == "call":
            name, _, args = rest.partition("(")
            args = args[:-1] if args.endswith(")") else args
            call = {"id": entry["id"], "type": "function"}
            call["function"] = {"name": name.strip(), "arguments": args}
            last = messages[-1] if messages else None
            if last is None or last["role"] != "assistant":
                last = {"role": "assistant", "content": None}
                messages.append(last)
            last.setdefault("tool_calls", []).append(call)
        elif kind == "result":
            last = messages[-1] if messages else None
            # Pipecat writes a tool message twice: "TOOL: text", then "TOOL_RESULT[id]: text".
            if last and last["role"] == "tool" and last.get("tool_call_id") is None:
                last["tool_call_id"] = entry["id"]
                last["content"] = rest
            else:
                messages.append({"role": "tool", "tool_call_id": entry["id"], "content": rest})
        else:
            role = entry["role"] if entry["role"] != "unknown" else "user"
            # Pipecat writes an assistant message that only calls tools as "ASSISTANT: None".
            content = None if role == "assistant" and rest == "None" else rest
            message: dict[str, Any] = {"role": role, "content": content}
            if role == "tool":
                message["tool_call_id"] = None
            messages.append(message)
    return messages


def parse_summary_request(text: str) -> tuple[ParsedTranscript, str | None] | None:
    """Recover the transcript and previous record from a summarization prompt.

    Understands this package's request (``prompt.parse_request``)
    and Pipecat's ``"Conversation history:\\n"`` + transcript message.

    Args:
        text: The user message of the summarization request.

    Returns:
        ``(transcript, previous_summary)``, or ``None`` if ``text`` is in neither format.
    """
    ours = parse_request(text)
    if ours is not None:
        return ours
    header = _PIPECAT_HEADER_RE.match(text)
    if header:
        return ParsedTranscript(pipecat_transcript_to_messages(text[header.end() :])), None
    return None


def offline_llm_settings(model: str, system_instruction: str | None = None) -> LLMSettings:
    """Complete ``LLMSettings`` for a service that calls no provider.

    Pipecat checks at start that every settings field has a real value.
    """
    return LLMSettings(
        model=model,
        system_instruction=system_instruction,
        temperature=None,
        max_tokens=None,
        top_p=None,
        top_k=None,
        frequency_penalty=None,
        presence_penalty=None,
        seed=None,
        filter_incomplete_user_turns=False,
        user_turn_completion_config=None,
        use_provider_thinking_default=False,
    )


class ExtractiveLLMService(LLMService):
    """A Pipecat LLM service whose ``run_inference`` returns an extractive summary.

    Use it wherever Pipecat expects a summarization LLM, with no network or model::

        LLMAssistantAggregatorParams(
            enable_auto_context_summarization=True,
            auto_context_summarization_config=LLMAutoContextSummarizationConfig(
                summary_config=LLMContextSummaryConfig(llm=ExtractiveLLMService())
            ),
        )

    or as ``PipecatLLMSummarizer(ExtractiveLLMService())``. It reads Pipecat's
    ``"Conversation history:"`` transcript (treating a summary message already in it as the
    previous record) and this package's delimited request; any other context is summarized
    message by message. The system instruction is ignored. It does not generate replies in
    a pipeline.

    Args:
        summarizer: The summarizer to use; a default :class:`ExtractiveSummarizer` if
            ``None``.
        default_max_tokens: The budget when neither ``run_inference`` nor the settings'
            ``max_tokens`` give one.
        settings: Runtime-updatable settings; only ``max_tokens`` is used.
        **kwargs: Passed to ``LLMService``.
    """

    Settings = LLMSettings

    def __init__(
        self,
        *,
        summarizer: ExtractiveSummarizer | None = None,
        default_max_tokens: int = 1000,
        settings: LLMSettings | None = None,
        **kwargs: Any,
    ):
        """Initialize the service."""
        default_settings = offline_llm_settings("extractive")
        if settings is not None:
            default_settings.apply_update(settings)
        super().__init__(settings=default_settings, **kwargs)
        self.summarizer = summarizer or ExtractiveSummarizer()
        self.default_max_tokens = default_max_tokens

    def can_generate_metrics(self) -> bool:
        """Report no metrics: there is no model to measure."""
        return False

    async def run_inference(
        self,
        context: LLMContext,
        max_tokens: int | None = None,
        system_instruction: str | None = None,
        response_schema: dict[str, Any] | None = None,
    ) -> str | None:
        """Summarize the conversation carried by ``context``.

        Args:
            context: Either a single user message holding a summarization transcript
                (Pipecat's or this package's), or a conversation to summarize directly.
            max_tokens: The output budget; defaults to the settings' ``max_tokens`` or
                ``default_max_tokens``.
            system_instruction: Ignored; the extraction rules are fixed.
            response_schema: Not supported; ignored with a warning.

        Returns:
            The memory record.
        """
        self._check_response_schema(response_schema)
        budget = max_tokens or self._settings.max_tokens or self.default_max_tokens
        messages: list[Any] = list(context.messages)
        previous: str | None = None
        unresolved: frozenset[str] = frozenset()
        interrupted: frozenset[int] = frozenset()
        users = [m for m in messages if isinstance(m, dict) and m.get("role") == "user"]
        parsed = parse_summary_request(text_of(users[-1].get("content"))) if users else None
        if parsed is not None:
            transcript, previous = parsed
            messages, unresolved = transcript.messages, transcript.unresolved
            interrupted = transcript.interrupted
        result = await self.summarizer.summarize_result_async(
            messages,
            previous_summary=previous,
            max_tokens=int(budget),
            unresolved_calls=unresolved,
            interrupted=interrupted,
        )
        return result.text
