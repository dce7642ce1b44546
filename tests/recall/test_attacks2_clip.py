"""Attack: the 2,000-character read of a long hit (``gather.clip``) and the query's tail
(``query.tail``, ``MAX_QUERY_CHARS``) at awkward boundaries.

Pure rules, so direct and Hypothesis tests: a hit of exactly 2,000 / 2,001 characters, a
searched word absent from the text, boundaries inside combining sequences and astral
characters, text without spaces, and text whose lower case is longer than itself (Turkish
dotted capital I: ``"İ".lower()`` is two characters), which shifts the place found.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipecat_summarizer._recall.gather import MAX_HIT_CHARS, clip
from pipecat_summarizer._recall.query import MAX_QUERY_CHARS, tail

WORD = "marquis"


def test_a_hit_of_exactly_the_limit_is_whole_and_one_more_is_cut_at_a_space():
    exact = ("abcd " * (MAX_HIT_CHARS // 5))[:MAX_HIT_CHARS]
    assert len(exact) == MAX_HIT_CHARS and clip(exact, [WORD]) == exact
    longer = exact + "e"
    out = clip(longer, [WORD])
    assert len(out) < MAX_HIT_CHARS and longer.startswith(out) and not out.endswith(" ")


def test_a_searched_word_absent_from_the_text_reads_its_start():
    text = "the caller spoke at length " * 200
    out = clip(text, ["absent", ""])
    assert text.startswith(out) and 0 < len(out) <= MAX_HIT_CHARS


def test_a_text_with_no_space_is_cut_hard_but_stays_a_substring():
    text = "x" * 3000 + WORD + "y" * 3000
    out = clip(text, [WORD])
    assert len(out) == MAX_HIT_CHARS and out in text and WORD in out


@pytest.mark.parametrize(
    "unit",
    [
        "e\u0301",  # a combining accent after its letter
        "\U0001f600",  # an astral emoji (one code point in Python)
        "\U0001f468\u200d\U0001f469\u200d\U0001f467",  # a ZWJ family sequence
        "\u0928\u093f",  # Devanagari consonant + vowel sign
    ],
)
def test_a_boundary_inside_a_grapheme_keeps_the_hit_and_the_limit(unit):
    text = unit * 1500 + f" the Hotel {WORD.title()} " + unit * 1500
    out = clip(text, [WORD])
    assert out in text and len(out) <= MAX_HIT_CHARS and WORD.title() in out
    q = tail(unit * 3000, MAX_QUERY_CHARS)
    assert len(q) <= MAX_QUERY_CHARS and (unit * 3000).endswith(q)


def test_the_read_holds_the_word_after_characters_whose_lower_case_is_longer():
    text = "İ" * 1800 + " the Hotel Marquis by the river " + "x " * 2000
    out = clip(text, [WORD])
    assert "Marquis" in out


@settings(max_examples=200, deadline=None)
@given(
    before=st.text(alphabet=st.characters(exclude_characters="İ"), max_size=4000),
    after=st.text(max_size=4000),
)
def test_the_read_is_a_bounded_substring_holding_the_word(before, after):
    """Wherever the word is, the read is a substring of the text, at most 2,000 characters,
    and holds the word whole (the word is found by its first four letters, a quarter of
    the read before it)."""
    text = f"{before} {WORD} {after}"
    out = clip(text, [WORD])
    assert out in text and len(out) <= MAX_HIT_CHARS
    if len(text) > MAX_HIT_CHARS and WORD[:4] not in before.lower():
        assert WORD in out


@settings(max_examples=200, deadline=None)
@given(text=st.text(max_size=6000))
def test_the_querys_tail_is_a_bounded_suffix(text):
    q = tail(text, MAX_QUERY_CHARS)
    assert len(q) <= MAX_QUERY_CHARS and text.endswith(q)
    if len(text) <= MAX_QUERY_CHARS:
        assert q == text
