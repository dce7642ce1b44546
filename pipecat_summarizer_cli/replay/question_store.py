"""The measured store as the question calls see it (:class:`QuestionStore`): reads go through,
writes are dropped, so the measurement never archives its own questions into the memory it
measures (:mod:`~pipecat_summarizer_cli.replay.question_calls`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pipecat_summarizer.store import MemoryStore


class QuestionStore(MemoryStore):
    """The store as the calls that ask the questions see it: every read goes to the
    measured store, every write is dropped (counted in :attr:`dropped`).

    A question call archives its own turns (a question and its answer leave the context
    when the next question replaces it, and the last one is archived at the call's end), and
    the strategies share one caller's store: without this, a question asked of one strategy
    (or earlier of the same one) came back in a later question's recalled block. A
    measurement must never archive its own questions into the memory it measures.
    """

    def __init__(self, inner: MemoryStore):
        self._inner = inner
        self.backend = inner.backend
        self.dropped = 0
        if getattr(inner.search, "reads_replies", False):
            # a read: the store's own search, so recall reads the first hits' replies in the
            # search's own trip as it does on that store (wrapped, it made two)
            self.search = inner.search  # type: ignore[method-assign]

    async def open(self) -> None:
        await self._inner.open()

    async def close(self) -> None:
        """Nothing: the measurement closes the store it measures."""

    async def write(self, records: Sequence[Any]) -> None:
        self.dropped += len(records)

    async def calls(self, user_id: str | None = None, *, limit: int = 50) -> list[Any]:
        return await self._inner.calls(user_id, limit=limit)

    async def call(self, call_id: str) -> Any:
        return await self._inner.call(call_id)

    async def compactions(self, call_id: str) -> list[Any]:
        return await self._inner.compactions(call_id)

    async def messages(self, call_id: str, *, compaction: int | None = None) -> list[Any]:
        return await self._inner.messages(call_id, compaction=compaction)

    async def message(self, call_id: str, position: int) -> Any:
        return await self._inner.message(call_id, position)

    async def messages_at(self, keys: Sequence[tuple[str, int]]) -> list[Any]:
        return await self._inner.messages_at(keys)

    async def fact_history(
        self, *, call_id: str | None = None, user_id: str | None = None
    ) -> list[Any]:
        return await self._inner.fact_history(call_id=call_id, user_id=user_id)

    async def search(
        self,
        query: str,
        *,
        user_id: str | None = None,
        call_id: str | None = None,
        limit: int = 10,
        any_word: bool = False,
    ) -> list[Any]:
        return await self._inner.search(
            query, user_id=user_id, call_id=call_id, limit=limit, any_word=any_word
        )

    async def caller_memory(self, user_id: str, *, max_calls: int = 5) -> Any:
        return await self._inner.caller_memory(user_id, max_calls=max_calls)

    async def forget(self, user_id: str) -> int:
        raise RuntimeError("a question call never forgets the memory it measures")

    async def purge_older_than(self, days: float) -> int:
        raise RuntimeError("a question call never purges the memory it measures")

    def forget_generation(self, user_id: str) -> int:
        return self._inner.forget_generation(user_id)

    async def forgotten_at(self, user_id: str) -> float | None:
        return await self._inner.forgotten_at(user_id)

    async def noticed_forget(self, user_id: str, since: float) -> bool:
        return await self._inner.noticed_forget(user_id, since)
