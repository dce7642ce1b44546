"""The one text vocabulary: how words are split, stemmed, normalised and dropped.

Every module that compares text reads it through the functions here. Where two purposes need
different rules, both functions sit here side by side, named for the purpose, with the reason:

- splitting: :func:`words` (letters and digits; what recall and the store's search send to
  the archive, whose full-text tokenizers split the same way) and :func:`sentence_words`
  (contractions, hyphenated words and times kept whole; the extractive summarizer's sentence
  patterns match ``"it's"``, ``"10:30"``, ``"e-mail"`` as units);
- stemming: :func:`search_stem` (a light Porter-like stem, so recall's query compares with the
  archive's Porter/FTS stemmer: ``painting`` -> ``paint``) and :func:`sentence_stem` (only a
  possessive and a plural ``s``: a fact's and a sentence's identity, where ``painting`` and
  ``paint`` are different things said);
- normalising: :func:`normalize_fact` (a fact's identity: no speaker prefix, correction mark
  or punctuation) and :func:`normalize_verbatim` (case and spacing only: is this text in view
  word for word?);
- stop words: one list of English function words, :data:`STOPWORDS`, extended for each
  reading: :data:`RECALL_STOPWORDS` (the words of asking about the past, and the pieces a
  split contraction leaves) and :data:`SENTENCE_STOPWORDS` (contractions kept whole, speaker
  names); :data:`FACT_STOPWORDS` adds third persons and correction words for fact overlap.

The replay's LoCoMo answer-recall metric (``pipecat_summarizer_cli.replay.locomo``) keeps its
own word list on purpose: an evaluation metric must not move when the system under test
changes its vocabulary, and the CLI imports only the library's public names.

Also the memory record's marks: its four section names, the correction mark, the speaker
prefixes a bullet may carry. Pure; no Pipecat imports.
"""

from __future__ import annotations

import re

from pipecat_summarizer._text.text_caches import text_cache

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

# -- stop words --------------------------------------------------------------------------

#: English function words: every reading of text drops these.
STOPWORDS = frozenset(
    """a about all also am an and any are as at be been being but by can could did do does
    done for from get got had has have here how i if in into is it its just let me my no not
    of oh ok okay on one or our please really s should so some t than that the then there
    these this those to too us very was we well were what when where which who whom why will
    with would yes you your yours""".split()
)
#: Recall's: plus more function words, the words people use to ask about the past ("do you
#: remember the hotel I mentioned?", which would match everything) and the pieces
#: :func:`words` leaves of a contraction ("didn", "ll").
RECALL_STOPWORDS = STOPWORDS | frozenset(
    """above after again against ago anything aren because before below between both couldn
    d describe described didn doesn doing don down during each earlier ever few further go
    going happen happened having he hello her hers herself hey hi him himself his isn itself
    kind kinds know last like likely ll lot m many mention mentioned more most much myself
    name named nor now off often once only other ours ourselves out over own previous
    previously re reason reasons recall remember remembered said same say says she shouldn
    since something sort such tell thank thanks their theirs them themselves they thing things
    think thought through time times told type types under until up ve wasn way went weren
    while won wouldn yeah yourself yourselves""".split()
)
#: Sentences' (the memory record, the extractive summarizer): plus the contractions
#: :func:`sentence_words` keeps whole, hesitations, modals and the speaker names.
SENTENCE_STOPWORDS = STOPWORDS | frozenset(
    "assistant i'd i'll i'm i've im it's let's may might mine shall tool uh um user".split()
)
#: A fact's comparison also ignores third persons ("her allergy" is "allergy") and the words
#: that announce a correction.
FACT_STOPWORDS = SENTENCE_STOPWORDS | frozenset(
    "they them their he she his her actually correction corrected sorry meant".split()
)
#: Words that only say "this is a correction"; they carry no topic.
CORRECTION_WORDS = frozenset(
    "actually correction sorry meant mean wrong mistake oops wait instead correct make change "
    "scratch earlier said".split()
)

# -- splitting ---------------------------------------------------------------------------

_WORD = re.compile(r"[^\W_]+", re.UNICODE)
_SENTENCE_WORD = re.compile(r"\w+(?:['\-.:/]\w+)*")
_SPACE = re.compile(r"\s+")


def fold(text: str) -> str:
    """Lower-case with straight apostrophes, the form the sentence patterns match on."""
    return text.replace("’", "'").replace("‘", "'").lower()


def words(text: str) -> list[str]:
    """Lower-cased words of ``text``: runs of letters and digits of any script.

    The one splitter of recall and of the store's search: an apostrophe, a hyphen, an
    underscore or a colon ends a word (``"it's 10:30, e-mail"`` -> ``it s 10 30 e mail``), as
    the archive's full-text tokenizers (SQLite's unicode61, PostgreSQL's parser) split it.
    """
    return _WORD.findall(text.lower().replace("’", "'"))


def sentence_words(text: str) -> list[str]:
    """The words of a sentence, folded (:func:`fold`), with contractions, hyphenated words
    and times kept whole (``"it's 10:30, e-mail"`` -> ``it's 10:30 e-mail``).

    Not :func:`words`: the extractive summarizer's sentence patterns and word counts treat
    ``"don't"`` or ``"10:30"`` as one word.
    """
    return _SENTENCE_WORD.findall(fold(text))


# -- stemming ----------------------------------------------------------------------------

# longest first; a derivation is tried before the inflections
_DERIVATIONS = ("ations", "ation", "ities", "ity", "ments", "ment", "ness", "ions", "ion")
_INFLECTIONS = (
    ("ingly", ""),
    ("edly", ""),
    ("ings", ""),
    ("ing", ""),
    ("sses", "ss"),
    ("ies", "i"),
    ("ied", "i"),
    ("ed", ""),
    ("es", "e"),
    ("ly", ""),
    ("s", ""),
)


@text_cache(maxsize=65536)
def search_stem(word: str) -> str:
    """A light English stem, enough to compare a query with a hit the archive matched with
    its own (Porter) stemmer: inflections (``painting``, ``painted``, ``paints`` -> ``paint``;
    ``families``, ``family`` -> ``famili``; ``hiking``, ``hikes`` -> ``hik``) and a few
    derivations (``distraction`` -> ``distract``, ``activities`` -> ``activ``). Words with
    digits and words of three letters or fewer are kept as they are.

    Not :func:`sentence_stem`: recall must find what the archive found, so it stems as
    aggressively; a fact's identity must not merge "painting" with "paint"."""
    if len(word) <= 3 or not word.isalpha():
        return word
    w = _derived(word)
    if w == word:
        for suffix, keep in _INFLECTIONS:
            if w.endswith(suffix) and len(w) - len(suffix) >= (5 if suffix == "ly" else 3):
                if suffix == "s" and w[-2] in "sui" or suffix == "ly" and w[-3] == "i":
                    break  # glass, bus, tennis; family (-> famili below)
                w = w[: -len(suffix)] + keep
                break
        # an inflected derivation like its plain form: questioned, vacationing
        w = _derived(w)
        if len(w) > 3 and w[-1] == w[-2] and w[-1] not in "lsz":
            w = w[:-1]  # running -> runn -> run; stuffed and stuff -> stuf
    if len(w) > 3 and w[-1] == "e":
        w = w[:-1]
    elif len(w) > 3 and w[-1] == "y":
        w = w[:-1] + "i"
    return w


def _derived(word: str) -> str:
    for suffix in _DERIVATIONS:
        if word.endswith(suffix) and len(word) - len(suffix) >= 4:
            return word[: -len(suffix)]
    return word


def sentence_stem(word: str) -> str:
    """Strip a possessive and a plain plural ``s`` ("orders" -> "order", not "class").

    Not :func:`search_stem`: a sentence's topic words identify what was said ("painting" is
    not "paint"), and the extractive summarizer's thresholds were set with this stem."""
    if word.endswith("'s"):
        word = word[:-2]
    if len(word) > 3 and word.endswith("s") and not word.endswith("ss") and not word[0].isdigit():
        word = word[:-1]
    return word


# -- normalising -------------------------------------------------------------------------


def normalize_fact(text: str) -> str:
    """A fact's identity: lower-cased, without a speaker prefix, the correction mark or
    punctuation, spaces folded.

    Not :func:`normalize_verbatim`: "User: Peanut allergy (corrected)." and "peanut allergy"
    are the same fact, but not the same words in view.

    Args:
        text: A fact or bullet.

    Returns:
        The text's identity for deduplication.
    """
    text = SPEAKER_RE.sub("", CORRECTED_RE.sub(" ", text).strip())
    return " ".join(re.sub(r"[^\w\s$%.-]", " ", text.lower()).split()).strip(" .")


@text_cache(maxsize=4096)
def normalize_verbatim(text: str) -> str:
    """``text`` lower-cased with runs of whitespace as one space: for "is this said word for
    word already?" checks (recall's view), where punctuation still counts."""
    return _SPACE.sub(" ", text.lower()).strip()


# -- topic words -------------------------------------------------------------------------


def content_words(text: str) -> set[str]:
    """Words of a fact that carry meaning (numbers included), for topic overlap.

    Args:
        text: A fact or bullet.

    Returns:
        Its normalized words without stop words.
    """
    return {w for w in re.findall(r"[\w$%.-]+", normalize_fact(text)) if w not in FACT_STOPWORDS}


def topic_words(text: str) -> set[str]:
    """What a sentence is about: its stemmed words without stop words or correction words.

    Args:
        text: A sentence or bullet.

    Returns:
        The set of topic words (single digits kept, other one-letter words dropped).
    """
    return {
        sentence_stem(w)
        for w in sentence_words(text)
        if w not in SENTENCE_STOPWORDS and w not in CORRECTION_WORDS and (len(w) > 1 or w.isdigit())
    }
