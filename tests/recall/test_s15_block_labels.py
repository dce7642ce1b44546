"""The recalled block says a call's label once for a run of its lines (S15, helper Q).

A label (``call of 8 May 2023, 13:56 UTC``, about 15 tokens) was repeated on every line of a
block: on LoCoMo 9% of a block's tokens were labels that repeated the line above. Now each
call's lines are listed together, the first with the label, the next ones ``same call``;
what a line quotes is unchanged. Pure: ``render_recall`` only (the pipeline's case is in
test_s15_block_labels_pipeline.py).
"""

from __future__ import annotations

import re

from hypothesis import given, settings
from hypothesis import strategies as st

from pipecat_summarizer._recall.render import (
    RECALL_HEADER,
    SAME_CALL,
    render_recall,
    snippet_when,
)
from pipecat_summarizer._recall.select import Snippet
from pipecat_summarizer._text.tokens import estimate_text_tokens

MAY_4 = 1683208800.0  # 4 May 2023, 14:00 UTC
DAY = 86400.0
LABEL = re.compile(r"^- \[([^\]]*)\] ")


def _snippet(call: str, position: int, at: float, text: str, reply: str | None = None) -> Snippet:
    return Snippet(
        call_id=call,
        position=position,
        turn=position // 2,
        at=at,
        role="user",
        content=text,
        relevance=1.0,
        rank=position,
        reply_role="assistant" if reply else None,
        reply=reply,
    )


def _lines(block: str) -> list[str]:
    return [line for line in block.splitlines() if line.startswith("- [")]


def _labels(block: str) -> list[str]:
    return [LABEL.match(line).group(1) for line in _lines(block)]  # type: ignore[union-attr]


def _render(snippets, query="Which hotel in Lisbon?", max_tokens=2000, now=None, **kw) -> str:
    text = render_recall(
        snippets,
        query=query,
        call_id="now",
        max_tokens=max_tokens,
        max_snippet_tokens=120,
        now=now,
        **kw,
    )
    assert text is not None
    return text


def test_a_calls_label_is_said_once_for_its_lines():
    snippets = [
        _snippet("c1", p, MAY_4, f"The hotel in Lisbon, detail number {p}.") for p in range(8)
    ]
    block = _render(snippets)
    labels = _labels(block)
    assert len(labels) == 8
    assert labels[0] == snippet_when(snippets[0], "now") == "call of 4 May 2023, 14:00 UTC"
    assert labels[1:] == [SAME_CALL] * 7
    # every quote is still there, in position order
    for p, line in enumerate(_lines(block)):
        assert f"detail number {p}." in line


def test_two_calls_lines_are_grouped_by_call_whatever_the_ranking():
    # best first: the calls alternate; the block lists each call's lines together, the
    # earlier call first, each group under its own label once
    older, newer = MAY_4 - 30 * DAY, MAY_4
    snippets = []
    for p in range(4):
        snippets.append(_snippet("new", p, newer, f"Lisbon hotel, the new call's line {p}."))
        snippets.append(_snippet("old", p, older, f"Lisbon hotel, the old call's line {p}."))
    block = _render(snippets)
    labels = _labels(block)
    lines = _lines(block)
    assert labels == [
        "call of 4 April 2023, 14:00 UTC",
        *[SAME_CALL] * 3,
        "call of 4 May 2023, 14:00 UTC",
        *[SAME_CALL] * 3,
    ]
    assert all("old call's" in line for line in lines[:4])
    assert all("new call's" in line for line in lines[4:])


def test_this_calls_turns_keep_their_own_labels():
    # this call's lines are labelled by turn: only lines of the same turn share one
    snippets = [
        _snippet("now", p, MAY_4, f"The Lisbon hotel, said at position {p}.") for p in range(4)
    ]
    labels = _labels(_render(snippets))
    assert labels == ["this call, by turn 0", SAME_CALL, "this call, by turn 1", SAME_CALL]


def test_a_question_about_time_keeps_each_lines_dates():
    snippets = [
        _snippet("c1", 0, MAY_4, "We flew to Lisbon yesterday."),
        _snippet("c1", 1, MAY_4, "The Lisbon hotel was booked last week."),
    ]
    labels = _labels(_render(snippets, query="When did we fly to Lisbon?", now=MAY_4 + 7 * DAY))
    assert labels[0].startswith("call a week ago, on 4 May 2023, 14:00 UTC")
    assert labels[0].endswith('"yesterday" = 3 May 2023')
    assert labels[1].startswith(SAME_CALL + '; "last week" = ')


def test_the_labels_said_once_leave_room_for_more_lines():
    # the same budget holds more lines when each call's label is said once
    snippets = [
        _snippet("c1", p, MAY_4, f"Lisbon hotel note {p}: the room faces the river.")
        for p in range(30)
    ]
    budget = 400
    block = _render(snippets, max_tokens=budget)
    assert estimate_text_tokens(block) <= budget
    one_label = snippet_when(snippets[0], "now")
    # what the old rendering (the label on every line) could hold at this budget
    full_line = f'- [{one_label}] caller: "Lisbon hotel note 10: the room faces the river."'
    header = estimate_text_tokens(RECALL_HEADER) + 1
    old_most = (budget - header) // (estimate_text_tokens(full_line) + 1)
    assert len(_lines(block)) > old_most


_calls = st.sampled_from(["a", "b", "c", "now"])
_ats = st.sampled_from([MAY_4 - 40 * DAY, MAY_4 - 3 * DAY, MAY_4 - 3 * DAY + 90, MAY_4])


@settings(max_examples=100, deadline=None)
@given(
    items=st.lists(
        st.tuples(_calls, st.integers(0, 40), _ats, st.booleans(), st.integers(1, 60)),
        min_size=1,
        max_size=25,
        unique_by=lambda t: (t[0], t[1]),
    ),
    max_tokens=st.integers(60, 1500),
    asks_when=st.booleans(),
)
def test_labels_said_once_hold_every_block(items, max_tokens, asks_when):
    """Any snippets, any budget: the block fits, every line's quote is as the old rendering
    cut it (only labels changed), each run of a call's lines opens with the call's label,
    a call's lines are together, and ``same call`` only follows a line of the same label."""
    snippets = [
        _snippet(
            call,
            pos,
            at + pos,  # within a call, later positions left later (an archive in order)
            " ".join(["Lisbon hotel", f"id{call}n{pos}"] + [f"w{i}" for i in range(n)])
            + " yesterday",
            reply="Noted, the Lisbon hotel." if has_reply else None,
        )
        for call, pos, at, has_reply, n in items
    ]
    query = "When was the Lisbon hotel?" if asks_when else "Which Lisbon hotel?"
    text = render_recall(
        snippets,
        query=query,
        call_id="now",
        max_tokens=max_tokens,
        max_snippet_tokens=60,
        now=MAY_4 + DAY,
    )
    if text is None:
        return
    assert text.startswith(RECALL_HEADER)
    assert estimate_text_tokens(text) <= max_tokens
    by_id = {f"id{s.call_id}n{s.position}": s for s in snippets}
    previous_call = previous_label = None
    calls_done: set[str] = set()
    for line in _lines(text):
        label = LABEL.match(line).group(1)  # type: ignore[union-attr]
        quote = line[LABEL.match(line).end() :]  # type: ignore[union-attr]
        tag = re.search(r"\bid\w+n\d+\b", quote)
        if tag is None:  # a quote cut to its first words: the line is not identified
            previous_call = previous_label = None
            continue
        s = by_id[tag.group()]
        own = snippet_when(s, "now", now=MAY_4 + DAY, relative=asks_when)
        if label.split(";")[0] == SAME_CALL:
            assert previous_call in (None, s.call_id) and previous_label in (None, own)
        else:
            assert label.split(";")[0] == own
        if s.call_id != previous_call:
            assert s.call_id not in calls_done  # a call's lines are together
            if previous_call is not None:
                calls_done.add(previous_call)
        previous_call, previous_label = s.call_id, own
