"""The request ceiling (``CeilingParams.max_request_tokens``): what a request carries besides
the context messages.

Pure counting: the main LLM's ``system_instruction`` and the tool schemas, as close to the
wire format as known. The processor and its guard import this module; it imports neither.
"""

from __future__ import annotations

import json
from typing import Any

from loguru import logger
from pipecat.adapters.llm.schemas.tools_schema import ToolsSchema
from pipecat.services.llm_service import LLMService

from pipecat_summarizer.tokens import TokenCounter, count_text


def tool_schemas(tools: Any, llm: LLMService | None = None) -> list[Any]:
    """The tool definitions a request carries, as close to the wire format as known.

    Args:
        tools: The context's tools (a ``ToolsSchema``, a provider list, or not given).
        llm: The main LLM, whose adapter converts the schema (and adds Pipecat's built-in
            tools, such as the async-tool cancel tool) exactly as it will be sent.

    Returns:
        A list of JSON-serializable tool definitions (empty when there are none).
    """
    if llm is not None:
        try:
            converted = llm.get_llm_adapter().from_standard_tools(tools)
        except Exception as e:  # an adapter quirk must not break metering
            logger.debug(f"tool schema conversion failed ({type(e).__name__}); using defaults")
        else:
            return list(converted) if isinstance(converted, (list, tuple)) else []
    if isinstance(tools, ToolsSchema):
        schemas: list[Any] = [s.to_default_dict() for s in tools.standard_tools]
        for custom in (tools.custom_tools or {}).values():
            schemas.extend(custom)
        return schemas
    return list(tools) if isinstance(tools, (list, tuple)) else []


def request_overhead(
    counter: TokenCounter,
    *,
    system_instruction: str | None = None,
    tools: Any = None,
    llm: LLMService | None = None,
) -> int:
    """Tokens a request carries besides the context messages.

    Args:
        counter: The per-message token counter (use the raw counter, not a cache: the
            texts counted here are temporary).
        system_instruction: The service's effective ``system_instruction`` (Pipecat appends
            its async-tool instructions to it), sent as a leading system message.
        tools: The context's tools.
        llm: The main LLM, for its adapter's tool conversion.

    Returns:
        The estimated tokens of the system instruction and the tool schemas.
    """
    total = 0
    if system_instruction:
        total += counter.count_message({"role": "system", "content": system_instruction})
    schemas = tool_schemas(tools, llm)
    if schemas:
        total += count_text(counter, json.dumps(schemas, default=str, ensure_ascii=False))
    return total


def overhead_key(system_instruction: str | None, tools: Any, llm: LLMService | None) -> tuple:
    """A cheap key that changes whenever :func:`request_overhead` may change."""
    builtin: tuple = ()
    if llm is not None:
        builtin = tuple(getattr(llm.get_llm_adapter(), "builtin_tools", None) or ())
    standard = getattr(tools, "standard_tools", None)
    names = tuple(s.name for s in standard) if standard is not None else id(tools)
    custom = getattr(tools, "custom_tools", None)
    return (system_instruction, id(tools), names, id(custom), builtin)
