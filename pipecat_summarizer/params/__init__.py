"""Every parameter group of the package, in Pipecat's manner: plain dataclasses named
``*Params``, nested by feature.

``ContextSummarizerParams`` holds what every call needs, with one nested params object per
feature (``trigger``, ``retry``, ``pinning``, and the optional ``ceiling``). The durable
memory across calls and recall come through the processor's own arguments:
``memory=MemoryParams(writer=WriterParams(...))`` (how a call uses its store) and
``recall=RecallParams(semantic=SemanticRecallParams(...))``.

Every field has a safe default and is validated at construction (numbers by annotation, see
:mod:`pipecat_summarizer._validation`), so a bad value fails here, named, not mid-call. A
params object holds settings and does no work: no model is loaded, no store opened, and this
module imports neither Pipecat nor numpy (the features that use the params import them).

``SummarizerOptions``, the flat form of 0.1, still works for one release: it warns
(``DeprecationWarning``) and is converted with :meth:`SummarizerOptions.to_params`.
"""

from pipecat_summarizer.params.compaction import (
    AppFactsRole,
    CalibrationParams,
    CeilingParams,
    ClearingParams,
    ContextSummarizerParams,
    PinningParams,
    RetryParams,
    SummarizerOptions,
    SummaryRole,
    TriggerParams,
    as_params,
    check_flags,
)
from pipecat_summarizer.params.memory import MIN_FLUSH_INTERVAL_S, MemoryParams, WriterParams
from pipecat_summarizer.params.recall import RecallParams, SemanticRecallParams

__all__ = [
    "MIN_FLUSH_INTERVAL_S",
    "AppFactsRole",
    "CalibrationParams",
    "CeilingParams",
    "ClearingParams",
    "ContextSummarizerParams",
    "MemoryParams",
    "PinningParams",
    "RecallParams",
    "RetryParams",
    "SemanticRecallParams",
    "SummarizerOptions",
    "SummaryRole",
    "TriggerParams",
    "WriterParams",
    "as_params",
    "check_flags",
]

# Every group's home is this package, whichever file defines it: reprs, docs and pickles name
# pipecat_summarizer.params.X, the one place a user imports it from.
for _group in (
    CalibrationParams,
    CeilingParams,
    ClearingParams,
    ContextSummarizerParams,
    MemoryParams,
    PinningParams,
    RecallParams,
    RetryParams,
    SemanticRecallParams,
    SummarizerOptions,
    TriggerParams,
    WriterParams,
):
    _group.__module__ = __name__
del _group
