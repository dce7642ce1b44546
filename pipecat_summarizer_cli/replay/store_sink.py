"""``replay --store PATH``: ours archives the replayed call into a real store.

The store's I/O (SQLite on a worker thread, PostgreSQL over a socket) is real work, so the
simulated clock is held while it runs: otherwise the loop, idle while a worker thread
writes, would jump to the writer's own timeout and every write would time out at once.
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from typing import Any

from pipecat_summarizer import MemoryParams, WriterParams
from pipecat_summarizer.store import MemoryStore, open_store
from pipecat_summarizer_cli.replay.clock import real_time


def _held(name: str) -> Callable[..., Coroutine[Any, Any, Any]]:
    async def method(self: Any, *args: Any, **kwargs: Any) -> Any:
        with real_time():
            return await getattr(self._inner, name)(*args, **kwargs)

    method.__name__ = name
    return method


def _init(self: Any, inner: MemoryStore) -> None:
    self._inner = inner
    self.backend = inner.backend


# Every method of the interface, each holding the clock around the real store's.
HeldClockStore: type[MemoryStore] = type(
    "HeldClockStore",
    (MemoryStore,),
    {
        "__init__": _init,
        "__doc__": "A store whose every call holds the simulated clock (see the module).",
        **{name: _held(name) for name in sorted(MemoryStore.__abstractmethods__)},
    },
)


def replay_store(target: str) -> MemoryStore:
    """The store ``--store`` names (a SQLite path or a ``postgresql://`` DSN)."""
    return HeldClockStore(open_store(target))  # type: ignore[call-arg]


#: No caller memory across replayed strategies, and a short flush interval: the replay
#: writes one call per strategy and closes the store when it ends.
REPLAY_MEMORY = MemoryParams(resume=False, writer=WriterParams(flush_interval_s=0.2))
