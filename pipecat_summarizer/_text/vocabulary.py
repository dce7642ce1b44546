"""The memory record's shared vocabulary: its sections, marks, and how its words are compared.

One home for what the request builder, the record parser, the pinned facts and the
extractive summarizer must agree on: the four section names, the correction mark, the
speaker prefixes a bullet may carry, and the two ways text is reduced for comparison:

- :func:`normalize` and :func:`content_words` identify a *fact* (is this bullet the one
  already pinned? how much does a correction overlap it?);
- :func:`fold`, :func:`words` and :func:`topic_words` read a *sentence* (what is it about,
  does a reply repeat a question?), with light stemming and the words that only announce a
  correction removed.

Both drop the same :data:`STOPWORDS`. Pure; no Pipecat imports.

The replay's LoCoMo recall metric keeps its own word list on purpose: an evaluation metric
must not move when the system under test changes its vocabulary.
"""

from __future__ import annotations

import re

SECTIONS = ("FACTS", "CONSTRAINTS", "DECISIONS", "OPEN QUESTIONS")
FACTS, CONSTRAINTS, DECISIONS, OPEN_QUESTIONS = SECTIONS

#: Appended to a bullet that replaces what the user said before.
CORRECTED_MARK = "(corrected)"
#: The correction mark as written by any backend ("(corrected)", "(Correction)").
CORRECTED_RE = re.compile(r"\s*\((?:corrected|correction)\)\s*", re.IGNORECASE)
#: A speaker prefix on a bullet ("User: ...", "Caller: ...").
SPEAKER_RE = re.compile(r"^(?:user|assistant|caller|customer|agent)\s*:\s*", re.IGNORECASE)
#: The speaker prefix the extractive summarizer writes on its items ("User: ", "Tool: ").
ITEM_SPEAKER_RE = re.compile(r"^(?:user|assistant|tool)\s*:\s*", re.IGNORECASE)

STOPWORDS = frozenset(
    """a an the and or but so to of in on at for with by from about as into is are was were be
    been being am i i'm im me my mine you your yours we our us it it's its this that these those
    there here do does did done have has had will would can could should shall may might just
    also too very really please then than if when what which who whom how why where user
    assistant tool not no yes oh um uh well okay ok i'll i'd i've let let's s t some any all
    get got one""".split()
)
# The pinned store's comparison also ignores third persons: "her allergy" is "allergy".
_FACT_STOPWORDS = STOPWORDS | frozenset(
    "they them their he she his her actually correction corrected sorry meant".split()
)
#: Words that only say "this is a correction"; they carry no topic.
CORRECTION_WORDS = frozenset(
    "actually correction sorry meant mean wrong mistake oops wait instead correct make change "
    "scratch earlier said".split()
)

_WORD_RE = re.compile(r"\w+(?:['\-.:/]\w+)*")


def normalize(text: str) -> str:
    """Lower-case, drop a speaker prefix, the correction mark and punctuation, fold spaces.

    Args:
        text: A fact or bullet.

    Returns:
        The text's identity for deduplication.
    """
    text = SPEAKER_RE.sub("", CORRECTED_RE.sub(" ", text).strip())
    return " ".join(re.sub(r"[^\w\s$%.-]", " ", text.lower()).split()).strip(" .")


def content_words(text: str) -> set[str]:
    """Words of a fact that carry meaning (numbers included), for topic overlap.

    Args:
        text: A fact or bullet.

    Returns:
        Its normalized words without stop words.
    """
    return {w for w in re.findall(r"[\w$%.-]+", normalize(text)) if w not in _FACT_STOPWORDS}


def fold(text: str) -> str:
    """Lower-case with straight apostrophes, the form the sentence patterns match on."""
    return text.replace("’", "'").replace("‘", "'").lower()


def words(text: str) -> list[str]:
    """The words of ``text`` (contractions, hyphenated words and times kept whole), folded."""
    return _WORD_RE.findall(fold(text))


def stem(word: str) -> str:
    """Strip a possessive and a plain plural ``s`` ("orders" -> "order", not "class")."""
    if word.endswith("'s"):
        word = word[:-2]
    if len(word) > 3 and word.endswith("s") and not word.endswith("ss") and not word[0].isdigit():
        word = word[:-1]
    return word


def topic_words(text: str) -> set[str]:
    """What a sentence is about: its stemmed words without stop words or correction words.

    Args:
        text: A sentence or bullet.

    Returns:
        The set of topic words (single digits kept, other one-letter words dropped).
    """
    return {
        stem(w)
        for w in words(text)
        if w not in STOPWORDS and w not in CORRECTION_WORDS and (len(w) > 1 or w.isdigit())
    }
