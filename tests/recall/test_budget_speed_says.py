"""The selection's cheaper checks answer as the plain definitions do: ``ContextTerms.says``
(a hit's text verbatim in a context message, looked up through the rarest inner word's
messages, stopping at a word no message has) against ``norm in`` the joined texts, and
``in_view`` against its definition. Pure, no pipeline: the recall pipeline tests run the
step itself."""

from __future__ import annotations

import random

from pipecat_summarizer._recall.query import ContextTerms, topic_terms
from pipecat_summarizer._recall.select import View, in_view
from pipecat_summarizer._text.vocabulary import normalize_verbatim

WORDS = "the hotel marquis lisbon room friday booked ines school rosal dentist at in".split()


def _text(rng: random.Random, n: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(n))


def test_says_answers_as_the_joined_texts_do():
    rng = random.Random(7)
    for _ in range(300):
        messages = [{"role": "user", "content": _text(rng, rng.randint(0, 12))} for _ in range(5)]
        terms = ContextTerms()
        terms.update(messages)
        joined = "\n".join(terms.normalized())
        source = rng.choice(messages)["content"].split()
        lo = rng.randint(0, len(source))
        # a piece of a message (often in view), or a new text (often not)
        probe = " ".join(source[lo : lo + rng.randint(1, 6)]) or _text(rng, 3)
        if rng.random() < 0.5:
            probe = _text(rng, rng.randint(1, 6))
        norm = normalize_verbatim(probe)
        assert terms.says(norm) == (norm in joined), (messages, probe)


def test_in_view_answers_as_its_definition():
    rng = random.Random(11)
    for _ in range(300):
        seen = _text(rng, 8)
        view = View(normalize_verbatim(seen), frozenset(topic_terms(seen)))
        text, query = _text(rng, rng.randint(1, 8)), rng.sample(WORDS, 3)
        norm = normalize_verbatim(text)
        own = [t for t in topic_terms(norm) if t not in set(query)]
        expected = not norm or norm in view.text or all(t in view.terms for t in own)
        assert in_view(text, view, query) == expected, (text, seen, query)
