"""The question-time measurement's questions are asked on the call's clock (S13-F-1): the call
that asks them continues the replayed call's conversation clock, so a time question's "how
long ago" is measured from after every message the call archived. Dated from the call's
start instead, a question's "now" fell before or after a message by how long the replay
took to reach it, and the label ("call less than an hour ago" or none) changed from one run
to the next. On the replay's simulated clock (real pipelines, the offline summarizer, a
SQLite store in memory), with the call's turns modelled a minute apart."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from pipecat_summarizer.params import RecallParams
from pipecat_summarizer.store import SQLiteMemoryStore
from pipecat_summarizer_cli.replay import clock, question_calls
from pipecat_summarizer_cli.replay.call_driver import CallDriver
from pipecat_summarizer_cli.replay.locomo import convert
from pipecat_summarizer_cli.replay.questions import Plan, question_time
from pipecat_summarizer_cli.replay.store_sink import HeldClockStore
from pipecat_summarizer_cli.replay.strategies import Thresholds
from pipecat_summarizer_cli.replay.transcript import Turn

SOUP = "honestly the soup was too salty, but the bread was fine"
FILLER = [
    ("How was your weekend?", "Quiet, we watched a film."),
    ("Did the rain stop?", "Yes, by noon it was sunny."),
    ("Any plans for dinner?", "Maybe pasta tonight."),
    ("Work is busy lately.", "Same here, lots of meetings."),
    ("I started jogging again.", "Good for you, keep it up."),
    ("The garden needs water.", "I will do it tonight."),
]
TIME_QUESTION = "When did I say the soup was too salty?"
TURN_GAP_S = 60.0  # the call's turns, a modelled minute apart


def _sample() -> dict:
    pairs = [(SOUP, "Good to know!"), *FILLER, *FILLER[::-1]]
    lines = []
    for a, b in pairs:
        lines += [{"speaker": "Ann", "text": a}, {"speaker": "Bob", "text": b}]
    return {
        "sample_id": "clock",
        "conversation": {
            "speaker_a": "Ann",
            "speaker_b": "Bob",
            "session_1": lines,
            "session_1_date_time": "1:56 pm on 8 May, 2023",
        },
        "qa": [{"question": TIME_QUESTION, "answer": "8 May 2023", "category": 2}],
    }


def test_a_time_question_is_asked_after_every_message_the_call_archived(monkeypatch):
    """Every recalled snippet of the time question reads "call less than an hour ago": the
    question comes after the whole call (13 modelled minutes), not ~0 s after its start
    (where a message archived minutes into the call was in the question's future: no
    relative label)."""

    async def with_pauses(
        call: CallDriver,
        turns: Sequence[Turn],
        offset: int = 0,
        connect_pause_s: float = 0.0,
        sessions: question_calls.SessionClock | None = None,
    ) -> None:
        # the caller's turns a modelled minute apart (the measurement replays them at once)
        await call.start()
        for i, turn in enumerate(turns):
            await asyncio.sleep(TURN_GAP_S)
            if sessions is not None:
                sessions.turn(turn)
            await call.turn(turn.inputs, offset + i + 1)

    monkeypatch.setattr(question_calls, "_replay", with_pauses)
    plan = Plan(
        thresholds=Thresholds(max_context_tokens=None, max_unsummarized_messages=6, keep=2),
        recall=RecallParams(latency_budget_s=5.0),
        # the store's I/O holds the simulated clock (as the replay's --store does)
        store_factory=lambda: HeldClockStore(SQLiteMemoryStore()),  # type: ignore[call-arg]
    )
    scores = clock.run(question_time(convert(_sample()), plan))
    rows = scores["ours_recall"].rows
    assert len(rows) == 1 and rows[0]["recalled"]
    snippets = rows[0]["snippets"]
    assert any("too salty" in s for s in snippets)
    labels = [s.split("]", 1)[0] for s in snippets]
    assert labels and all(
        label.startswith("- [call less than an hour ago, on 8 May 2023, 1") for label in labels
    ), labels
