"""The recalled block's window around the query's words: the widest that fits, found with few
token counts (a snippet's text was counted once per word it grew by)."""

from __future__ import annotations

from pipecat_summarizer._recall.query import topic_terms
from pipecat_summarizer._recall.render import window
from pipecat_summarizer._text.tokens import estimate_text_tokens


def test_a_long_texts_window_takes_few_counts_and_is_the_widest_that_fits():
    words = [f"word{i % 7}" for i in range(1_500)]
    words[900] = "Marquis"
    text = " ".join(words)
    counted: list[int] = []

    def count(s: str) -> int:
        counted.append(len(s))
        return estimate_text_tokens(s)

    cut = window(text, topic_terms("the marquis hotel"), 60, count)
    assert "Marquis" in cut and cut.startswith("…") and cut.endswith("…")
    inner = cut.strip("…")
    assert estimate_text_tokens(inner) + 2 <= 60
    # one more word either side would not fit
    at = text.index(inner)
    wider = text[max(0, text.rfind(" ", 0, at - 1) + 1) : text.find(" ", at + len(inner) + 1)]
    assert estimate_text_tokens(wider) + 2 > 60
    assert len(counted) <= 30  # was 80: a count per word grown, each of the whole window


def test_a_window_keeps_the_text_whole_when_it_fits_and_cuts_one_enormous_word():
    assert window("the Marquis  hotel", ["marqui"], 20, estimate_text_tokens) == "the Marquis hotel"
    huge = "x" * 5_000
    cut = window(f"{huge} Marquis", ["marqui"], 10, estimate_text_tokens)
    assert len(cut) <= 10 * 3 + 2
