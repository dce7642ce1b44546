"""The replay harness behind ``pipecat-summarizer replay``.

``transcript`` loads and validates JSONL conversations, ``replay_llm`` is the recording
replay LLM, ``runner`` runs one real Pipecat pipeline per strategy, ``report`` turns the
recorded requests into metrics, costs and the table, ``plot`` draws the PNG, ``synthetic``
generates the article's scenario and ``locomo`` converts LoCoMo conversations.
"""
