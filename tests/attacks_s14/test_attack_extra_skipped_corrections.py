"""The README's promise "corrected details that win in the facts, the summary and recall"
when a turn's extra searches are not started (b9e0f39, ``ExtraCost``): which path keeps an
old value out of recall when the stated values' searches (the search for a later correction)
never answer in time, then stop being started?

Through real pipelines (as tests/pipeline/test_superseded.py: ``ExtractiveSummarizer``,
Pipecat's OpenAI service against the local server, SQLite and PostgreSQL): the correction
made in an earlier call is pinned as a fact ("... (corrected from 14 March)") and restored
into the next call, whose values' searches never answer (held, let go, then not started).
Held: no block shows 14 March unmarked. Not by ``render``'s ``supersede(snippets, in_view)``
alone: with ``in_view`` emptied (a mutant, checked by hand) it still holds, the blocks
recalling the correction's line ("Make that 21 March ...") and not the booking's. So this
guards the promise end to end, not one path; the path no other covers (a correction only
the values' searches bring, not pinned) is S14-A-3's.
"""

from __future__ import annotations

import pytest

from pipecat_summarizer._recall.render import is_recall_message
from pipecat_summarizer.params import RecallParams
from pipecat_summarizer.store import open_store
from tests.pipeline.test_extra_searches_in_time import Started, _held
from tests.pipeline.test_superseded import BOOKING, FILLER, _call

ASKED = [
    "Hello again.",
    "When is our anniversary dinner?",
    "What day is the anniversary dinner again?",
    "Remind me of the anniversary dinner date?",
    "Which date did we book the anniversary dinner for?",
]


@pytest.mark.parametrize("backend", ["sqlite", "postgres"], indirect=True)
async def test_attack_extra_skipped_the_pinned_correction_still_wins(
    openai_server, store_target, monkeypatch
):
    said = [BOOKING, "Make that 21 March for the anniversary dinner.", *FILLER, "Is there a gym?"]
    store = open_store(store_target)
    try:
        await _call(openai_server, store, said, call_id="call-1", recall=RecallParams())
    finally:
        await store.close()
    first = len(openai_server.chat_requests)
    # the next call: every search of "march" (the values' searches) never answers
    store = _held(store_target, held="march")
    started, steps = Started(), []
    from pipecat_summarizer._recall import step as step_module

    made = step_module.RecallStep.__init__

    def observed(self, *args, **kwargs):
        made(self, *args, **kwargs)
        self.add_observer(started)
        steps.append(self)

    monkeypatch.setattr(step_module.RecallStep, "__init__", observed)
    try:
        await _call(
            openai_server,
            store,
            ASKED,
            call_id="call-2",
            recall=RecallParams(latency_budget_s=1.0),
        )
    finally:
        await store.close()
    values = [w for w in started.searches if "march" in w.lower()]
    blocks = [
        str(m["content"])
        for body in openai_server.chat_requests[first:]
        for m in body["messages"]
        if is_recall_message(m)
    ]
    (step,) = steps
    skipped, let_go = step.extras_skipped, step.extras_let_go
    print(
        f"\nsearches of march: {values}; blocks: {len(blocks)}; skipped {skipped}, let go {let_go}"
    )
    # the premise: every block came without a values' search answering (each held one let
    # go, cancelled later; the later turns start none: not expected in time, or a let-go
    # one still held)
    assert len(blocks) >= 3
    assert let_go >= 2
    for block in blocks:
        assert "21 March" in block
        assert not [
            line
            for line in block.splitlines()
            if "14 March" in line.replace("(corrected from 14 March)", "")
            and "superseded" not in line
        ]
