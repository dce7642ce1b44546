"""When and what to compact: the trigger, the cadence, the plan, the summary prompt and transcript,
the request ceiling.

Internal: nothing here is public API (see ``pipecat_summarizer.__all__``).
"""
