"""Recall: archived details brought back into view (the query, the selection, the rendering, the
per-turn step, recall by meaning).

Internal: nothing here is public API (see ``pipecat_summarizer.__all__``).
"""
