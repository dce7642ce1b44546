"""A deterministic, offline summarizer that keeps sentences instead of writing new ones.

:class:`ExtractiveSummarizer` picks the user's facts, constraints, decisions and open
questions out of the transcript by pattern, keeps them verbatim, merges them into the
previous record and trims the result to the token budget, least salient bullets first. With
the text it returns the few bullets worth pinning. It needs no network and no model, so it
is a safe fallback, a baseline for evaluation, and a way to run tests offline.

:class:`ExtractiveLLMService` wraps it as a Pipecat ``LLMService``; :func:`pinnable_facts`
is the narrow function the processor uses to pin the facts of evicted messages.

Modules: :mod:`.lexicon` (word lists and patterns), :mod:`.classify` (what a sentence is,
how salient a bullet is), :mod:`.record` (the record being built, fitting it to the
budget), :mod:`.summarizer` (the summarizer), :mod:`.service` (the Pipecat service and the
request parsing it needs). Only the names exported here are public.
"""

from pipecat_summarizer.summarizers.extractive.service import (
    ExtractiveLLMService,
    offline_llm_settings,
    parse_summary_request,
    pipecat_transcript_to_messages,
)
from pipecat_summarizer.summarizers.extractive.summarizer import (
    ExtractiveSummarizer,
    pinnable_facts,
)

__all__ = [
    "ExtractiveLLMService",
    "ExtractiveSummarizer",
    "offline_llm_settings",
    "parse_summary_request",
    "pinnable_facts",
    "pipecat_transcript_to_messages",
]
