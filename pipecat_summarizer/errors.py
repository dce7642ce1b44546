"""The package's exceptions: one base, so one ``except`` catches every error the library raises.

The tree (each error keeps the built-in base it had before the common base existed, so code
that catches ``RuntimeError`` around a summarizer keeps working)::

    Exception
    └── PipecatSummarizerError                 pipecat_summarizer.errors
        ├── SummarizerError (+ RuntimeError)   pipecat_summarizer.summarizers.base
        │     a summarizer backend failed to produce a usable summary
        └── StoreError                         pipecat_summarizer.store.base
              a memory store could not be opened or read (bad path or DSN, newer schema,
              closed store)

Not under it, on purpose: a bad parameter raises ``ValueError`` or ``TypeError`` naming the
field, when the object is built (a programming error, not a runtime failure); a missing
optional extra raises ``ImportError`` with its ``pip install`` line (:data:`SEMANTIC_EXTRA_HINT`),
also when the params that need it are built; and the command-line tool's usage errors are
the tool's own and end as exit status 2.

This module imports nothing, so any layer can raise these without an import cycle.
"""

__all__ = ["SEMANTIC_EXTRA_HINT", "PipecatSummarizerError"]

#: The ``ImportError`` message when semantic recall is asked for without its extra.
SEMANTIC_EXTRA_HINT = (
    "semantic recall needs the 'semantic' extra: pip install 'pipecat-summarizer[semantic]'"
)


class PipecatSummarizerError(Exception):
    """Base of every error the library raises at run time (see the module docstring's tree)."""
