"""S19 attack: a forget of the caller on PostgreSQL while a search its turn has let go is
still running (``_recall/search.py`` ``ArchiveSearch._hits``: a search past the turn's
budget runs on as the call's late answer; ``store/_postgres_pool.py`` ``run_on``: a search
its caller leaves runs on up to ``CANCEL_AFTER_S``).

A real pipeline (the admin's ``Forgetter`` in the frame stream, a real
``LLMContextAggregatorPair``, ``ContextSummarizer`` on the real PostgreSQL, Pipecat's OpenAI
service against the local OpenAI-protocol server) of alice, a returning caller: her first
question's search reads her rows on the server (the turn's own one-trip search, her
tombstone read in the same statement) and its answer is held until after the forget (a
loop busy elsewhere, a slow network): the turn lets it go at its budget. Her data is
forgotten (through the call's own store object, as an admin tool of this process, or
through another store object on the same database, as another process would), then the
held answer lands with the rows read before the forget. Her second question's own search is
held too (so the late answer is what that turn would serve), her third is not.

Held, both ways: the forget completes (with the held search still holding its rows and
its connection), the held answer did carry her forgotten hotel, and no later turn placed
any of her forgotten rows in a recalled block (nor bob's); with another store object the
call noticed the forget from the tombstone.
"""

from __future__ import annotations

import asyncio

import pytest
from pipecat.pipeline.pipeline import Pipeline
from pipecat.processors.aggregators.llm_response_universal import LLMContextAggregatorPair

pytest.importorskip("asyncpg")

from pipecat_summarizer.params import RecallParams  # noqa: E402
from pipecat_summarizer.store import PostgresMemoryStore  # noqa: E402
from tests.support.early_search import Forget, Forgetter, recall_blocks, seed_trips  # noqa: E402
from tests.support.openai_server import Reply, is_summary_request  # noqa: E402
from tests.support.pipeline_utils import main_llm, user_turn  # noqa: E402
from tests.support.recall_calls import travel_desk  # noqa: E402
from tests.support.settle import Gap, Until, run_settling  # noqa: E402

GUARD_S = 30.0  # a guard against a hang only
FORGOTTEN = ("Marquis", "418", "Fiat", "Avis")  # alice's earlier call (early_search's)
BOBS = ("Pensao", "Flor")


class HeldAnswers(PostgresMemoryStore):
    """The real PostgreSQL store; a search of ``lisbon`` reads its rows on the server as
    ever, then its answer waits for ``release`` while ``hold`` is on. ``answered``: the
    texts of each held answer, as it was given back."""

    hold = True

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.release = asyncio.Event()
        self.held = 0
        self.answered: list[str] = []

    async def _searched(self, conn, query, words, tombstone=None):
        rows, statement, at = await super()._searched(conn, query, words, tombstone)
        if self.hold and "lisbon" in query:
            self.held += 1
            release = self.release
            await release.wait()
            self.answered.append(" ".join(str(v) for r in rows for v in tuple(r)))
        return rows, statement, at


@pytest.mark.parametrize("backend", ["postgres"], indirect=True)
@pytest.mark.parametrize("forget_by", ["this_store", "another_store"])
async def test_attack_a_forget_beside_a_let_go_search(openai_server, store_target, forget_by):
    openai_server.handler = lambda body: Reply("Sure.")
    store = HeldAnswers(store_target)
    admin = store if forget_by == "this_store" else PostgresMemoryStore(store_target)
    context, processor, summarizer = travel_desk(
        openai_server, store, RecallParams(latency_budget_s=0.3), call_id="now-alice"
    )
    step = processor.recall_step
    forgetter = Forgetter(admin)
    state: dict = {}

    def released() -> bool:
        store.release.set()
        return len(store.answered) >= 1

    def armed() -> bool:
        state["after_forget"] = len(openai_server.chat_requests)
        store.release = asyncio.Event()  # the next question's own search is held too
        return True

    def unheld() -> bool:
        store.hold = False
        store.release.set()
        return True

    frames = [
        user_turn("Which hotel did I book in Lisbon?"),
        Until(sleep=10.0, done=lambda: store.held >= 1 and step.missed >= 1),
        Gap(sleep=0.5),
        Forget("alice"),
        Until(sleep=GUARD_S, done=lambda: bool(forgetter.forgotten)),
        Until(sleep=10.0, done=released),  # the let-go search answers after the forget
        Until(sleep=1.0, done=armed),
        user_turn("Which hotel in Lisbon was it again?"),
        Until(sleep=10.0, done=lambda: store.held >= 2 and step.missed >= 2),
        Gap(sleep=0.5),
        Until(sleep=1.0, done=unheld),
        user_turn("Tell me about my Lisbon hotel booking, the room too."),
        Gap(sleep=0.5),
    ]
    pair = LLMContextAggregatorPair(context)
    pipeline = Pipeline(
        [forgetter, pair.user(), processor, main_llm(openai_server.base_url), pair.assistant()]
    )
    try:
        await seed_trips(store)
        await asyncio.wait_for(run_settling(pipeline, frames_to_send=frames), GUARD_S * 2)
    finally:
        store.hold = False
        store.release.set()
        await summarizer.aclose()
        await store.close()
        if admin is not store:
            await admin.close()
    # the forget completed, beside the held search
    assert len(forgetter.forgotten) == 1 and forgetter.forgotten[0] > 0
    # the held answer landed after it, with her rows read before it
    assert any("Marquis" in a for a in store.answered)
    assert step.turns == 3 and step.missed >= 2
    chats = [b for b in openai_server.chat_requests if not is_summary_request(b)]
    assert len(chats) == 3  # every question was answered
    blocks = recall_blocks(chats)
    for block in blocks:
        assert not any(w in block for w in FORGOTTEN + BOBS), block
    assert step.late_served == 0 and step.recalled == 0
    if forget_by == "another_store":
        assert store.forget_generation("alice") != 0  # the call noticed it (its tombstone)
