"""Question time replays a LoCoMo conversation as one call; each session's lines are dated
by that session (the replay moves the call's conversation clock as a session starts:
``question_calls.SessionClock``), though they leave the context sessions later. Before, every
line carried session 1's date, and a quote's "yesterday" was resolved against it (S17-Q-1).
On the replay's simulated clock (real pipelines, the offline summarizer, a SQLite store in
memory)."""

from __future__ import annotations

from pipecat_summarizer.params import RecallParams
from pipecat_summarizer.store import SQLiteMemoryStore
from pipecat_summarizer_cli.replay import clock
from pipecat_summarizer_cli.replay.locomo import convert
from pipecat_summarizer_cli.replay.questions import Plan, question_time
from pipecat_summarizer_cli.replay.store_sink import HeldClockStore
from pipecat_summarizer_cli.replay.strategies import Thresholds

SOUP = "honestly the soup was too salty, but the bread was fine"
PUPPY = "we got a beagle puppy yesterday and named him Rex"
FILLER = [
    ("How was your weekend?", "Quiet, we watched a film."),
    ("Did the rain stop?", "Yes, by noon it was sunny."),
    ("Any plans for dinner?", "Maybe pasta tonight."),
    ("Work is busy lately.", "Same here, lots of meetings."),
]


def _session(pairs: list[tuple[str, str]]) -> list[dict]:
    lines = []
    for a, b in pairs:
        lines += [{"speaker": "Ann", "text": a}, {"speaker": "Bob", "text": b}]
    return lines


def _sample() -> dict:
    return {
        "sample_id": "sessions",
        "conversation": {
            "speaker_a": "Ann",
            "speaker_b": "Bob",
            "session_1": _session([(SOUP, "Good to know!"), *FILLER]),
            "session_1_date_time": "1:56 pm on 8 May, 2023",
            "session_2": _session([(PUPPY, "How lovely!"), *FILLER[::-1]]),
            "session_2_date_time": "10:05 am on 20 July, 2023",
        },
        "qa": [
            {
                "question": "When did I say the soup was too salty?",
                "answer": "8 May 2023",
                "category": 2,
            },
            {
                "question": "When did we get the beagle puppy Rex?",
                "answer": "19 July 2023",
                "category": 2,
            },
        ],  # fmt: skip
    }


def _label(rows: list[dict], words: str) -> str:
    found = [s for row in rows for s in row["snippets"] if words in s]
    assert found, [row["snippets"] for row in rows]
    return found[0].split("]", 1)[0]


def test_each_sessions_lines_carry_that_sessions_date():
    plan = Plan(
        # compacts as session 2 goes on: session 1's lines leave the context in July
        thresholds=Thresholds(max_context_tokens=None, max_unsummarized_messages=6, keep=2),
        recall=RecallParams(latency_budget_s=5.0),
        store_factory=lambda: HeldClockStore(SQLiteMemoryStore()),  # type: ignore[call-arg]
    )
    rows = clock.run(question_time(convert(_sample()), plan))["ours_recall"].rows
    soup, puppy = _label(rows, "too salty"), _label(rows, "beagle puppy")
    assert "on 8 May 2023" in soup and "July" not in soup
    assert "on 20 July 2023" in puppy
    assert '"yesterday" = 19 July 2023' in puppy
