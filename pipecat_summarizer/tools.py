"""The ``remember_fact`` function tool: lets the main LLM pin facts itself."""

from __future__ import annotations

from typing import TYPE_CHECKING

from loguru import logger
from pipecat.adapters.llm.schemas.function_schema import FunctionSchema
from pipecat.adapters.llm.schemas.tools_schema import ToolsSchema
from pipecat.processors.aggregators.llm_context import LLMContext

if TYPE_CHECKING:
    from pipecat.services.llm_service import FunctionCallParams, LLMService

    from pipecat_summarizer.processor import ContextSummarizer

REMEMBER_FACT = "remember_fact"


def remember_fact_schema() -> FunctionSchema:
    """The function schema of ``remember_fact``."""
    return FunctionSchema(
        name=REMEMBER_FACT,
        description=(
            "Remember a durable fact the conversation must never forget: the user's name, "
            "IDs and reference numbers, allergies, constraints, preferences, decisions. "
            "Call it again with the same key to correct a fact."
        ),
        properties={
            "key": {"type": "string", "description": "A short topic key, e.g. 'allergy'."},
            "fact": {"type": "string", "description": "The fact, in one short sentence."},
            "kind": {"type": "string", "enum": ["fact", "constraint"]},
        },
        required=["key", "fact"],
    )


def register_remember_fact(
    llm: LLMService, summarizer: ContextSummarizer, context: LLMContext | None = None
) -> FunctionSchema:
    """Register the ``remember_fact`` handler on ``llm``, pinning into ``summarizer``.

    Args:
        llm: The main LLM service.
        summarizer: The processor whose pinned facts receive the calls.
        context: If given, the schema is added to this context's tools.

    Returns:
        The function schema (add it to the context's tools if ``context`` was not given).
    """

    async def handler(params: FunctionCallParams) -> None:
        args = params.arguments or {}
        key, fact = str(args.get("key", "")).strip(), str(args.get("fact", "")).strip()
        kind = "constraint" if args.get("kind") == "constraint" else "fact"
        try:
            # refuses an instruction heard in the call: it is not a fact, and never pinned
            summarizer.pin(key, fact, kind=kind, source="llm")
            result = {"remembered": key}
        except ValueError as e:
            logger.warning(f"remember_fact rejected: {e}")
            result = {"error": str(e)}
        await params.result_callback(result)

    llm.register_function(REMEMBER_FACT, handler)
    schema = remember_fact_schema()
    if context is not None:
        tools = context.tools
        existing: list = []
        custom = None
        if isinstance(tools, ToolsSchema):
            # direct functions must go back as functions, or the LLM stops registering them
            direct = {w.name: w.function for w in tools.direct_functions}
            existing = [
                direct.get(t.name, t) for t in tools.standard_tools if t.name != REMEMBER_FACT
            ]
            custom = tools.custom_tools
        context.set_tools(ToolsSchema(standard_tools=[*existing, schema], custom_tools=custom))
    return schema
