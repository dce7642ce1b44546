"""Which ``search_noticing`` a recall turn passes ``_replies`` to (S17-A-8): a backend's own,
an override that hands its keywords on, one that names it; never one that cannot take it."""

from __future__ import annotations

from typing import Any

from pipecat_summarizer._recall.search import takes_replies
from pipecat_summarizer.store import MemoryStore, SQLiteMemoryStore


class Passing(SQLiteMemoryStore):
    async def search_noticing(self, query: str, **kwargs: Any) -> Any:
        return await super().search_noticing(query, **kwargs)


class Naming:
    async def search_noticing(self, query, *, user_id, since, limit=10, any_word=False, _replies=0):
        return [], False


class Plain:
    async def search_noticing(self, query, *, user_id, since, limit=10, any_word=False):
        return [], False


def test_the_backends_and_overrides_that_pass_keywords_on_take_replies(tmp_path):
    store = SQLiteMemoryStore(tmp_path / "a.db")
    assert takes_replies(store.search_noticing)
    assert takes_replies(Passing(tmp_path / "b.db").search_noticing)
    assert takes_replies(Naming().search_noticing)


def test_a_method_without_the_keyword_is_never_passed_it():
    assert not takes_replies(Plain().search_noticing)
    assert not takes_replies(MemoryStore.search_noticing)
    assert not takes_replies(len)  # a builtin: its signature may be unreadable
