"""Session-10 attacks on the early block: something the block depended on changes between
``RecallPrefetch``'s early work and the turn's end (a fact unpinned, a summary spliced in, a
Flows-style context reset, a forget by another process, the clock crossing midnight for a
question about time, final words that differ from the interim ones by case and
punctuation). The oracle: the block the turn places is the one it places without the
companion (it makes it itself), and an early block was made before the change (the attack
ran). Every request is checked too: one block at most, a user message, within the ceiling.
Real pipelines (a real user aggregator fed transcriptions, ``ContextSummarizer``, Pipecat's
OpenAI service against the local server) on SQLite files."""

from __future__ import annotations

import asyncio
import datetime as dt

from pipecat.frames.frames import (
    InterimTranscriptionFrame,
    LLMMessagesUpdateFrame,
    TranscriptionFrame,
    UserStartedSpeakingFrame,
    UserStoppedSpeakingFrame,
)

from tests.attacks_s10.early_harness import CAR_ASK, CAR_FACT, Act, early_kept, one_call
from tests.support.early_search import seed_sister, seed_trips, spoken_turn, watched_store
from tests.support.settle import Gap

SYSTEM = {"role": "system", "content": "You are a travel desk; the caller is alice."}


async def _both(server, tmp_path, frames, **kwargs):
    """The call with the companion and without it (each on its own archive)."""
    early = await one_call(server, str(tmp_path / "early.db"), frames, **kwargs)
    plain = await one_call(server, str(tmp_path / "plain.db"), frames, early=False, **kwargs)
    return early, plain


async def test_control_the_early_block_is_taken(openai_server, tmp_path):
    # nothing changes: the early block serves the turn (the attacks below would otherwise
    # prove nothing) and is the turn's own
    early, plain = await _both(openai_server, tmp_path, spoken_turn(CAR_ASK))
    assert early.kept and early.reused == (1, 0)
    assert early.blocks == plain.blocks and "red Fiat" in str(early.blocks[0])


async def test_a_fact_unpinned_after_the_early_work_is_quoted_again(openai_server, tmp_path):
    # the rental is a pinned fact when the early block is chosen (left out: the model sees
    # it); the application unpins it before the turn ends: the turn must quote it again
    frames = spoken_turn(CAR_ASK, between=[early_kept(), Act(lambda p: p.unpin("car"))])
    early, plain = await _both(
        openai_server, tmp_path, frames, setup=lambda p: p.pin("car", CAR_FACT)
    )
    assert early.kept and all("red Fiat" not in (b.text or "") for b in early.kept)
    assert early.blocks == plain.blocks
    assert "red Fiat" in str(early.blocks[-1])


def _earlier_turns(p) -> None:
    # a conversation of four earlier exchanges (nothing the archive matches), so a summary
    # has messages to cover and the keep window leaves the last ones
    talk = [
        "Good morning.",
        "Good morning, how can I help?",
        "I would like to plan something.",
        "Of course.",
        "Nothing urgent though.",
        "Understood.",
        "Let me think for a second.",
        "Take your time.",
    ]
    roles = ["user", "assistant"] * 4
    p.context.set_messages(
        [SYSTEM, *({"role": r, "content": t} for r, t in zip(roles, talk, strict=True))]
    )


SUMMARY = (
    "FACTS:\n- The caller said: I rented a red Fiat from Avis at the airport.\n"
    "- The desk said: Noted, a red Fiat."
)
RENTAL = "I rented a red Fiat from Avis at the airport."


async def _summarized(p) -> None:
    # the application asks for a summary and holds the stream until it is in the context
    p.request_manual_summary()
    for _ in range(500):
        if p.summary_text is not None and not p.summary_in_flight:
            return
        await asyncio.sleep(0.01)
    raise AssertionError("the summary never landed")


async def test_a_summary_spliced_after_the_early_work_is_seen(openai_server, tmp_path):
    # a summary quoting the rental lands between the early work and the turn's end: the
    # turn sees it (in view) and leaves that quote out, as without the companion
    frames = spoken_turn(CAR_ASK, between=[early_kept(), Act(_summarized)])
    early, plain = await _both(
        openai_server, tmp_path, frames, setup=_earlier_turns, summary=SUMMARY
    )
    assert early.kept and any(RENTAL in (b.text or "") for b in early.kept)
    assert "Conversation summary" in str(early.requests[-1])  # it landed before the turn
    assert early.blocks == plain.blocks
    assert all(RENTAL not in (b or "") for b in early.blocks)
    assert early.reused == (0, 0)


async def test_control_with_earlier_turns_the_early_block_is_taken(openai_server, tmp_path):
    early = await one_call(
        openai_server, str(tmp_path / "c.db"), spoken_turn(CAR_ASK), setup=_earlier_turns
    )
    assert early.reused == (1, 0)


async def test_a_flows_reset_after_the_early_work_is_seen(openai_server, tmp_path):
    # a Flows node change with RESET (LLMMessagesUpdateFrame) replaces the context with a
    # new system message and a note stating the rental: the turn leaves it out
    reset = LLMMessagesUpdateFrame(
        messages=[
            {"role": "system", "content": "You are the returns desk; the caller is alice."},
            {"role": "assistant", "content": CAR_FACT},
        ],
        run_llm=False,
    )
    frames = spoken_turn(CAR_ASK, between=[early_kept(), reset])
    early, plain = await _both(openai_server, tmp_path, frames)
    assert early.kept and any("red Fiat" in (b.text or "") for b in early.kept)
    assert "returns desk" in str(early.requests[-1])  # the reset landed before the turn
    assert early.blocks == plain.blocks
    assert all("red Fiat" not in (b or "") for b in early.blocks)


async def test_a_forget_by_another_process_after_the_early_work_places_nothing(
    openai_server, store_target
):
    # an admin tool with its own store object (another process's forget: this store's
    # forget count does not move) forgets alice between the early work and the turn's end;
    # on PostgreSQL the turn's watch reads the tombstone through the wait's function
    async def forget_elsewhere(_p) -> None:
        other = watched_store(store_target)
        try:
            assert await other.forget("alice") > 0
        finally:
            await other.close()

    frames = spoken_turn(CAR_ASK, between=[early_kept(), Act(forget_elsewhere)])
    early = await one_call(openai_server, store_target, frames)
    assert early.kept and any("red Fiat" in (b.text or "") for b in early.kept)
    assert early.blocks == [None]
    assert "Fiat" not in str(early.requests)


WHEN_ASK = "When did I rent the red Fiat at the airport?"
# the rental's call (tests.support.early_search.CAR) is dated 25 April 2026
BEFORE_MIDNIGHT = dt.datetime(2026, 4, 26, 23, 59, 50, tzinfo=dt.UTC).timestamp()
AFTER_MIDNIGHT = BEFORE_MIDNIGHT + 20.0


async def test_the_clock_crossing_midnight_relabels_the_block(openai_server, tmp_path):
    # a question about time: the early block says "yesterday" (26 April); the turn ends on
    # the 27th: its block must say "two days ago", as the block made then does
    clock = [BEFORE_MIDNIGHT]

    def setup(p) -> None:
        p.recall_step.now = lambda: clock[0]

    def tick(_p) -> None:
        clock[0] = AFTER_MIDNIGHT

    frames = spoken_turn(WHEN_ASK, between=[early_kept(), Act(tick)])
    early = await one_call(openai_server, str(tmp_path / "e.db"), frames, setup=setup)
    clock[0] = AFTER_MIDNIGHT
    plain = await one_call(
        openai_server, str(tmp_path / "p.db"), spoken_turn(WHEN_ASK), early=False, setup=setup
    )
    assert early.kept and "yesterday" in str(early.kept[-1].text)
    assert early.blocks == plain.blocks
    assert "two days ago" in str(early.blocks[0]) and "yesterday" not in str(early.blocks[0])
    assert early.reused == (0, 1)  # the choice served, the text was rendered again


async def test_final_words_differing_by_case_and_punctuation(openai_server, tmp_path):
    # the interim words are the final ones in lower case without the question mark: the
    # same search; the turn's block is its own whatever of the early work it reuses
    frames = [
        UserStartedSpeakingFrame(),
        InterimTranscriptionFrame(CAR_ASK.lower().rstrip("?"), "alice", "t0"),
        Gap(sleep=0.1),
        TranscriptionFrame(CAR_ASK.upper(), "alice", "t0"),
        Gap(sleep=0.1),
        UserStoppedSpeakingFrame(),
        Gap(sleep=0.15),
    ]
    early, plain = await _both(openai_server, tmp_path, frames)
    assert early.kept
    assert early.blocks == plain.blocks and "red Fiat" in str(early.blocks[0])


async def test_final_words_differing_by_a_number(openai_server, tmp_path):
    # interim "April 4", final "April 14": another search; the turn's block is its own
    ask = "What did we plan with my sister for April {}?"
    frames = [
        UserStartedSpeakingFrame(),
        InterimTranscriptionFrame(ask.format(4), "alice", "t0"),
        Gap(sleep=0.1),
        TranscriptionFrame(ask.format(14), "alice", "t0"),
        Gap(sleep=0.1),
        UserStoppedSpeakingFrame(),
        Gap(sleep=0.15),
    ]
    early, plain = await _both(openai_server, tmp_path, frames, seed=seed_sister)
    assert early.kept
    assert early.blocks == plain.blocks and early.blocks[0] is not None


async def test_another_callers_forget_costs_alice_nothing(openai_server, tmp_path):
    # bob is forgotten through the call's own store between alice's early work and her
    # turn's end: her early block still serves (a forget count is per caller)
    async def forget_bob(p) -> None:
        assert await p.recall_step.archive.forget("bob") > 0

    async def seed(store) -> None:
        await seed_sister(store)
        await seed_trips(store)

    frames = spoken_turn(CAR_ASK, between=[early_kept(), Act(forget_bob)])
    early = await one_call(openai_server, str(tmp_path / "e.db"), frames, seed=seed)
    assert early.reused == (1, 0)
    assert "red Fiat" in str(early.blocks[0])
