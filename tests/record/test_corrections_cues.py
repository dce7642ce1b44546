"""The cue of a correction is read only where a cue word starts (the hot path's pre-filter):
what it finds is exactly what scanning the whole text with the cue regex finds, on the bundled
calls' turns and on Hypothesis texts mixing cue words, values, punctuation, case and non-ASCII
letters. Its cost is measured by ``benchmarks/corrections.py``, not here."""

from __future__ import annotations

import json
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from pipecat_summarizer._record import corrections
from pipecat_summarizer._record.corrections import _CUES, _NOT_OLD, _Said, cue_starts, values
from pipecat_summarizer._text.messages import spoken_text
from pipecat_summarizer._text.vocabulary import topic_words

DATA = Path(corrections.__file__).resolve().parents[2] / "pipecat_summarizer_cli/replay/data"


def scanned(text: str) -> _Said | None:
    """The reference: the cue regex scanned along the whole text (``finditer``)."""
    for m in _CUES.finditer(text):
        phrase = next(m.group(g) for g in ("new1", "new2", "new3", "new4", "new5") if m.group(g))
        topic_text = m.group("topic2") or m.group("topic3") or ""
        old = None
        not_old = _NOT_OLD.search(phrase)
        if not_old:
            old = not_old.group("old").strip()
            phrase = phrase[: not_old.start()]
        new = values(phrase)
        if new:
            return _Said(new, old, frozenset(topic_words(topic_text)))
    return None


def said(text: str) -> _Said | None:
    return corrections._said.__wrapped__(text)  # uncached: each text read afresh


def test_the_bundled_calls_read_the_same_cues():
    texts = []
    for path in sorted(DATA.glob("*.jsonl")):
        for line in path.read_text().splitlines():
            m = json.loads(line) if line.strip() else None
            if isinstance(m, dict) and isinstance(m.get("content"), str):
                texts.append(spoken_text(m))
    assert len(texts) > 400
    found = [t for t in texts if said(t) is not None]
    assert found  # the calls do make corrections
    assert [said(t) for t in texts] == [scanned(t) for t in texts]


@settings(max_examples=400, deadline=None)
@given(
    st.lists(
        st.one_of(
            st.sampled_from(
                [
                    "make that",
                    "Make it",
                    "change the date to",
                    "moved it to",
                    "set it for",
                    "No,",
                    "no",
                    "not",
                    "know",
                    "NO!",
                    "actually",
                    "Actually,",
                    "sorry",
                    "correction:",
                    "wait",
                    "I meant",
                    "i  meant",
                    "meant",
                    "input",
                    "settle",
                    "remove",
                    "exchange",
                    "the",
                    "my booking reference is",
                    "it's",
                    "there are",
                    "21 March",
                    "3pm",
                    "$40",
                    "3 tickets",
                    "two",
                    "AB-1234",
                    "Lisbon",
                    "Ines",
                    "not 2",
                    "instead of Friday",
                    "Tuesday",
                    ".",
                    ",",
                    "?",
                    "-",
                    "_",
                    "'",
                    "ſet",
                    "Ķ",
                    "é",
                    "İ",
                    "—",
                    "’",
                    "\n",
                ]
            ),
            st.text(max_size=6),
        ),
        max_size=14,
    ),
    st.sampled_from(["", " ", "_", "x", "é"]),
)
def test_reading_only_where_a_cue_word_starts_finds_what_a_scan_finds(pieces, glue):
    text = glue.join(pieces) if glue else " ".join(pieces)
    assert said(text) == scanned(text)


def test_cue_starts_are_the_cue_words_at_word_boundaries():
    text = "No, I know. Actually not now: settle it, i meant make_that, set."
    assert [text[i : i + 5] for i in cue_starts(text)] == ["No, I", "Actua", "i mea", "set."]
    assert cue_starts("input exchange removed knots") == []
    assert cue_starts("Café, actually") == [6]  # not ASCII: the regex finds the places
