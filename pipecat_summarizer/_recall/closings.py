"""Closing phrases: an "all" that closes or checks a turn ("Thanks, that's all.", "Did you
get all that?", "I think that covers it all.") rather than asking for every piece. A list
question takes the list's largest block in any context (S12-A-2, S12-B-3), so
:func:`~pipecat_summarizer._recall.query.gathers` reads a question without them. Pure.
"""

from __future__ import annotations

import re

# "all" that closes or checks a turn rather than asking for every piece (S12-A-2: "Thanks,
# that's all" took a list question's largest block in any context)
_NOT_GATHERING = re.compile(
    r"\b(?:that'?s|that is|is that|was that|it'?s|is it|that was|that'?ll be|that will be)"
    r"\s+(?:about\s+|really\s+)?all\b"
    r"(?!\s+(?:of|the|my|your|our|his|her|their|those|these)\b)"
    # "all that" ends a check ("did you get all that?"), not a clause ("all that I ordered")
    r"|\ball\s+that\b(?!\s+(?:i|you|we|he|she|they|my)\b)"
    r"|\ball\s+(?:this|set|good|right|done|clear|fine|okay|ok|sorted)\b"
    r"|\ball the best\b(?!\s+\w)"  # a farewell, not "all the best restaurants"
    r"|\b(?:at|after) all\b|\ball in all\b"
    r"|\bfor all (?:your|the|of your) (?:help|time|trouble)\b|\b(?:bye|thanks|cheers),? all\b",
    re.IGNORECASE,
)

# "all of it" / "it all" ending a clause after a closing verb: "That's all of it, thanks.",
# "I think that covers it all.", "Okay, I got all of it." (S12-B-3); not "did I pay it all
# back?" (a word after it) nor "Is that all of the rooms?". Read with its clause (_it_all).
_IT_ALL = re.compile(
    r"\b(?:(?:that|this|it)(?:'s|\s+is|\s+was|'ll\s+be|\s+will\s+be)|(?:is|was)\s+(?:that|this)"
    r"|covers?|covered|got|get|gotten|have|has|had|'ve|sums?|summed|wraps?|wrapped|heard"
    r"|catch|caught|noted|says?|said)"
    r"\s+(?:(?:about|really|just|pretty\s+much|basically|absolutely|totally|almost|nearly)\s+)?"
    r"(?:all\s+of\s+it|it\s+all)"
    r"(?:\s+(?:down|up|now|then|there|too|today|for\s+(?:now|today)))?"
    # the clause ends: punctuation, the text's end, or thanks / "I think" (speech-to-text
    # often writes no punctuation: "okay I got all of it thank you")
    r"(?=\s*(?:[.,;:!?\u2026\u2013\u2014-]|$)|\s+(?:thanks|thank\s+you|cheers|bye|goodbye"
    r"|i\s+think|i\s+guess|i\s+believe|i\s+hope|right|yeah|ok|okay|lol|haha)\b)",
    re.IGNORECASE,
)
_SENTENCE_ENDS = ".!?\n\u2026"
_CLAUSE_ENDS = _SENTENCE_ENDS + ",;:\u2013\u2014"
_QUESTION_MARK = re.compile(r"\s*\?")
_WH = re.compile(r"\b(?:what|where|which|who|whom|whose|when|why|how)\b", re.IGNORECASE)
_FIRST_PERSON = re.compile(r"\b(?:i|me|my|mine|we|us|our|ours)\b", re.IGNORECASE)
_ASKS = re.compile(
    r"^\W*(?:(?:so|and|but|okay|ok|well|then|oh|um|uh|now)\W+)*(?:did|do|does|have|has|had|is"
    r"|was|were|are|am|can|could|will|would|should|shall|may|might)\b",
    re.IGNORECASE,
)
# what may come around a check in its sentence ("Okay, did you get all of it?"); anything
# else names what is checked ("My allergies, do you have it all?"): a list question
_FILLERS = re.compile(
    r"(?:\W|\b(?:so|and|but|okay|ok|well|then|oh|um|uh|now|great|cool|good|perfect|right"
    r"|alright|yes|yeah|yep|thanks|thank|you|please|lol|haha|sorry|hey|hi|anyway|actually"
    r"|just|one|more|thing|last|quick|check)\b)*",
    re.IGNORECASE,
)
# a question for several things: "What are my allergies?", "Which meds?" (not "Where did I
# park?", "What is my address?": "Where did I park? Did you get all of it?" is a check)
_MANY = re.compile(
    r"\b(?:are|were|these|those|all|both|every|each|any)\b"
    r"|\b(?!(?:does|has|was|this|yes|its|is)\b)\w{2,}[^s\W']s\b",
    re.IGNORECASE,
)
_VOCATIVE = re.compile(r"^\W*[A-Z][a-z]+(?=\W*$)")  # a name addressed: "..., Ava?"


def _asked_for_many(text: str, start: int, end: int) -> bool:
    """Whether the last question of ``text[start:end]`` (its sentences before a check) asks
    for several things."""
    mark = text.rfind("?", start, end)
    if mark < 0:
        return False
    opens = max(text.rfind(c, start, mark) for c in _SENTENCE_ENDS) + 1
    return bool(_MANY.search(text, max(opens, start), mark))


def _it_all(match: re.Match[str]) -> str:
    """A closing "all of it" dropped (``" "``), or the match kept (it still gathers) when
    its clause asks with a question word ("Where did I spend it all?"), or asks about the
    caller ("so did my insurance cover all of it?") or about what its sentence names ("The
    rooms, have you got it all?", "Did you catch all of it, the meds I take?") or when the
    question before it on its line asks for several things ("What are my allergies? Have
    you got it all?")."""
    text, start, end = match.string, match.start(), match.end()
    opens = max(text.rfind(c, 0, start) for c in _CLAUSE_ENDS) + 1
    before = text[opens:start]
    if _WH.search(before):
        return match.group()
    if not (_QUESTION_MARK.match(text, end) or _ASKS.search(text[opens:end])):
        return " "  # said, not asked
    sentence = max(text.rfind(c, 0, start) for c in _SENTENCE_ENDS) + 1
    closes = min(
        (i for i in (text.find(c, end) for c in _SENTENCE_ENDS) if i >= 0), default=len(text)
    )
    named = _FILLERS.fullmatch(text, sentence, opens) is None
    after = _VOCATIVE.sub(" ", text[end:closes])
    named = named or _FILLERS.fullmatch(after) is None
    named = named or _asked_for_many(text, text.rfind("\n", 0, start) + 1, sentence)
    return match.group() if named or _FIRST_PERSON.search(before) else " "


# typographic apostrophes ("that’s all") read as the plain one
_APOSTROPHES = str.maketrans({"\u2019": "'", "\u2018": "'", "\u02bc": "'"})


def without_closings(text: str) -> str:
    """``text`` with its closing and checking "all"s blanked out (each replaced by a space),
    typographic apostrophes read as the plain one."""
    text = _IT_ALL.sub(_it_all, text.translate(_APOSTROPHES))
    return _NOT_GATHERING.sub(" ", text)
