"""What the model sees besides the verbatim turns: the conversation record (pinned facts, the
rolling summary and its sections) and the rules of authority.

Internal: nothing here is public API (see ``pipecat_summarizer.__all__``).
"""
