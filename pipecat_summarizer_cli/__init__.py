"""The ``pipecat-summarizer`` command: the replay, ``questions``, the LoCoMo scorer and ``inspect``.

A sibling of the library in the same distribution: it imports only the library's public names,
and nothing in the library imports it (``tests/package/test_import_graph.py``).
"""
