"""The bottom layer: one text vocabulary (words, stems, stop words, a message's text) and one token
estimate.

Internal: nothing here is public API (see ``pipecat_summarizer.__all__``).
"""
