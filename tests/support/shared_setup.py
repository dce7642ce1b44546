"""Setup work every pipeline test repeats, done once per test process.

Two things that Pipecat and the OpenAI client build afresh for every pipeline cost more CPU
than many tests' own work (profiled: about 0.4 s of a typical pipeline test's 0.6 s):

- Each HTTP client (``AsyncOpenAI``: the main LLM's, every summarizer's) loads the system's
  CA certificates into a new SSL context, ~50 ms each, several per test. The tests' servers
  are plain HTTP on 127.0.0.1: the context is never used. One is built per process and
  shared (an ``ssl.SSLContext`` is made to be shared between clients).
- Each ``LLMContextAggregatorPair`` with the default turn strategies builds a
  ``LocalSmartTurnAnalyzerV3``, which loads the smart-turn ONNX model into a new inference
  session, ~70 ms. The session is stateless between runs (ONNX Runtime's ``run`` may be
  called from several threads): one per model file and options is built and shared; each
  analyzer keeps its own state as before.

The objects the product builds (clients, transports, aggregators, analyzers) are unchanged;
only these two loads are shared. :func:`share_setup` is called once, from ``conftest.py``.
"""

from __future__ import annotations

import os
import ssl
import threading
from collections.abc import Callable
from typing import Any

_lock = threading.Lock()
_installed = False


def _shared_ssl_context(build: Callable[..., ssl.SSLContext]) -> Callable[..., ssl.SSLContext]:
    """``httpcore2.default_ssl_context``, built once per environment's CA settings."""
    contexts: dict[tuple, ssl.SSLContext] = {}

    def default_ssl_context(*, _trust_env: bool = True) -> ssl.SSLContext:
        key = (_trust_env, os.environ.get("SSL_CERT_FILE"), os.environ.get("SSL_CERT_DIR"))
        with _lock:
            if key not in contexts:
                contexts[key] = build(_trust_env=_trust_env)
            return contexts[key]

    return default_ssl_context


class _SharedSessions:
    """Stands in for ``onnxruntime`` in Pipecat's smart-turn module: ``InferenceSession`` is
    built once per model file and session options; everything else is ``onnxruntime``'s."""

    def __init__(self, ort: Any) -> None:
        self._ort = ort
        self._sessions: dict[tuple, Any] = {}

    def __getattr__(self, name: str) -> Any:
        return getattr(self._ort, name)

    def InferenceSession(self, path: str, sess_options: Any = None, **kwargs: Any) -> Any:  # noqa: N802
        """One session per (model, options); other arguments get a session of their own."""
        if kwargs or sess_options is None:
            return self._ort.InferenceSession(path, sess_options=sess_options, **kwargs)
        o = sess_options
        key = (
            str(path),
            o.execution_mode,
            o.inter_op_num_threads,
            o.intra_op_num_threads,
            o.graph_optimization_level,
        )
        with _lock:
            if key not in self._sessions:
                self._sessions[key] = self._ort.InferenceSession(path, sess_options=o)
            return self._sessions[key]


def share_setup() -> None:
    """Share the SSL context and the smart-turn ONNX session in this process (once)."""
    global _installed
    if _installed:
        return
    import httpcore2
    from pipecat.audio.turn.smart_turn import local_smart_turn_v3

    httpcore2.default_ssl_context = _shared_ssl_context(httpcore2.default_ssl_context)
    local_smart_turn_v3.ort = _SharedSessions(local_smart_turn_v3.ort)
    _installed = True
