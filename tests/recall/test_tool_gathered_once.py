"""The ``recall_memory`` tool on a question that gathers (S10-A-2): the second search finds
the first hit's reply itself ("fiat avis" -> "Noted, a red Fiat."); the tool's answer quotes
it once, as the reply (the tool joins the searches with ``with_gathered`` too). A real
SQLite store, the recall step's own lookup."""

from __future__ import annotations

from pipecat_summarizer._recall.hooks import RecallObserver
from pipecat_summarizer._recall.step import RecallStep
from pipecat_summarizer.params import RecallParams
from pipecat_summarizer.store import SQLiteMemoryStore
from tests.attacks_s10.early_harness import CAR_ASK
from tests.support.early_search import seed_sister


async def test_the_tool_quotes_the_first_hits_reply_once(tmp_path):
    store = SQLiteMemoryStore(tmp_path / "m.db")
    seen: list[str] = []
    try:
        await seed_sister(store)
        step = RecallStep(store, RecallParams(tool_timeout_s=5.0), call_id="now", user_id="alice")
        step.add_observer(_Searches(seen))
        found = await step.lookup(CAR_ASK)
    finally:
        await store.close()
    assert len(seen) == 2, seen  # the question gathered: a second search was made
    quotes = [f["text"] for f in found] + [f["reply"]["text"] for f in found if "reply" in f]
    assert "I rented a red Fiat from Avis at the airport." in quotes, found
    assert quotes.count("Noted, a red Fiat.") == 1, found


class _Searches(RecallObserver):
    """Records the words of each search the step starts."""

    def __init__(self, seen: list[str]) -> None:
        self.seen = seen

    def on_search_started(self, words: str) -> None:
        self.seen.append(words)
