"""Reading sentences: splitting, what kind of item a user sentence is, and how salient a
bullet is. Pure functions over the patterns of :mod:`.lexicon`.
"""

from __future__ import annotations

import re

from pipecat_summarizer._record.corrections import is_marked
from pipecat_summarizer._text.vocabulary import (
    CONSTRAINTS,
    CORRECTED_MARK,
    DECISIONS,
    FACTS,
    ITEM_SPEAKER_RE,
    OPEN_QUESTIONS,
    fold,
    sentence_words,
    topic_words,
)
from pipecat_summarizer.summarizers.extractive.lexicon import (
    ABBREV_RE,
    ANNOUNCEMENT_WORDS,
    AVAILABILITY_RE,
    CALENDAR_WORDS,
    CORRECTION_KEYS,
    CORRECTION_RE,
    DATE_RE,
    DECISION_WORDS,
    DIET_RE,
    DIGIT_RE,
    EMAIL_RE,
    ENERGY_RE,
    ENGLISH_MARKERS,
    FOOD_RE,
    FOREIGN_MARKERS,
    FULL_NAME_RE,
    HEDGE_RE,
    ID_RE,
    LIKE_THAT_RE,
    LIMIT_RE,
    MEDICAL_RE,
    MONEY_RE,
    MONTH_RE,
    NAME_RE,
    NUMBER_PHRASE_RE,
    PHONE_RE,
    PREFERENCE_RE,
    PROPER_SKIP,
    REACTION_RE,
    REACTION_WORDS,
    RULE_KEYS,
    RULE_RE,
    SELF_FACT_RE,
    SELF_STATEMENT_RE,
    SHORTENED_RE,
    SMALL_TALK_WORDS,
    THIN_WORDS,
    TIME_LIMIT_RE,
    TIME_RE,
    USER_DECISION_RE,
    WEEKDAY_RE,
    WEIGHT_RE,
)

# Budget trimming drops whole bullets in this order: questions go first, constraints last.
DROP_ORDER = (OPEN_QUESTIONS, DECISIONS, FACTS, CONSTRAINTS)


def split_sentences(text: str) -> list[str]:
    """Split text into trimmed sentences, keeping abbreviations and decimals intact."""
    text = SHORTENED_RE.sub(" ", text or "")
    sentences: list[str] = []
    for block in re.split(r"\s*\n\s*", text):
        block = block.strip()
        if not block:
            continue
        parts = re.split(r"(?<=[.!?…])\s+|(?<=[。！？])", block)
        merged: list[str] = []
        for part in parts:
            part = part.strip()
            if not part:
                continue
            # "p.m. on Friday" or "Dr. Lee": no sentence break before a lowercase word or
            # after an abbreviation.
            if merged and (
                part[0].islower()
                or (merged[-1][-1] == "." and ABBREV_RE.search(merged[-1].rsplit(None, 1)[-1]))
            ):
                merged[-1] = f"{merged[-1]} {part}"
            else:
                merged.append(part)
        sentences.extend(merged)
    return sentences


def is_small_talk(sentence: str) -> bool:
    found = sentence_words(sentence)
    return all(w in SMALL_TALK_WORDS for w in found)


def topic_keys(text: str) -> set[str]:
    keys = set()
    for key, pattern in (
        ("id", ID_RE),
        ("phone", PHONE_RE),
        ("email", EMAIL_RE),
        ("money", MONEY_RE),
        ("weight", WEIGHT_RE),
        ("energy", ENERGY_RE),
        ("time", TIME_RE),
        ("weekday", WEEKDAY_RE),
        ("month", MONTH_RE),
    ):
        if pattern.search(text):
            keys.add(key)
    return keys


def has_proper_noun(sentence: str) -> bool:
    """A capitalized word after the first (not "I", a weekday, a month or "ID")."""
    for word in sentence.split()[1:]:
        word = word.strip("\"'()[],.;:!?—-")
        if not word or not word[0].isupper() or word in PROPER_SKIP:
            continue
        head = word.split("'")[0].split("’")[0]
        if head.lower() in CALENDAR_WORDS:
            continue
        if any(c.islower() for c in head) or (len(head) >= 3 and head.isalpha()):
            return True
    return False


def has_amount(sentence: str, low: str) -> bool:
    """A number outside identifiers, or a number word with a unit ("two hours")."""
    if DIGIT_RE.search(sentence):
        rest = ID_RE.sub(" ", sentence) if ID_RE.search(sentence) else sentence
        if DIGIT_RE.search(rest):
            return True
    return bool(NUMBER_PHRASE_RE.search(low))


def has_date(sentence: str, low: str) -> bool:
    return bool(
        TIME_RE.search(low)
        or WEEKDAY_RE.search(low)
        or MONTH_RE.search(sentence)
        or DATE_RE.search(low)
    )


def is_self_statement(sentence: str, low: str) -> bool:
    if not SELF_STATEMENT_RE.search(low) or HEDGE_RE.search(low) or LIKE_THAT_RE.search(low):
        return False
    return len(topic_words(sentence) - THIN_WORDS) >= 4


def is_fact(sentence: str, low: str) -> bool:
    """A fact names something: a name, a number, an amount, a date, an ID, or the user."""
    return bool(
        has_amount(sentence, low)
        or has_date(sentence, low)
        or ID_RE.search(sentence)
        or EMAIL_RE.search(sentence)
        or has_proper_noun(sentence)
        or NAME_RE.search(sentence)
        or SELF_FACT_RE.search(low)
        or is_self_statement(sentence, low)
    )


def is_correction(low: str) -> bool:
    maybe = any(k in low for k in CORRECTION_KEYS) or ("not" in low and "but" in low)
    return maybe and bool(CORRECTION_RE.search(low))


def is_rule(low: str) -> bool:
    return any(k in low for k in RULE_KEYS) and bool(RULE_RE.search(low))


def is_constraint(low: str) -> bool:
    """A constraint has substance: health, a limit, a rule or a firm preference."""
    if DIET_RE.search(low) or MEDICAL_RE.search(low) or is_rule(low):
        return True
    if HEDGE_RE.search(low):
        return False
    return bool(
        PREFERENCE_RE.search(low)
        or LIMIT_RE.search(low)
        or (TIME_LIMIT_RE.search(low) and AVAILABILITY_RE.search(low))
    )


def is_unclassifiable_language(sentence: str) -> bool:
    # English patterns cannot judge other languages; keep their substantial sentences.
    found = sentence_words(sentence)
    wide = any(ord(ch) > 0x2FFF for ch in sentence)
    if any(w in ENGLISH_MARKERS for w in found):
        return False
    if wide:
        return len(sentence) >= 6
    foreign = not sentence.isascii() or any(w in FOREIGN_MARKERS for w in found)
    return foreign and len(found) >= 4


def is_question(sentence: str) -> bool:
    return sentence.rstrip().endswith(("?", "？"))


def classify_user(sentence: str) -> str | None:
    """Return the section a user sentence belongs to, or ``None`` to drop it."""
    if is_small_talk(sentence):
        return None
    if is_question(sentence):
        # Questions are never facts or constraints, unless they carry an identifier.
        return FACTS if ID_RE.search(sentence) else OPEN_QUESTIONS
    low = fold(sentence)
    if is_constraint(low):
        return CONSTRAINTS
    if is_user_decision(sentence, low):
        return DECISIONS
    if is_fact(sentence, low) or is_unclassifiable_language(sentence):
        return FACTS
    return None


def is_echo(sentence: str, low: str, reply: str) -> bool:
    """A short reaction made of the assistant's last words, with nothing of the user's."""
    if not reply or len(sentence_words(sentence)) > 10 or not REACTION_RE.search(low):
        return False
    if (
        ID_RE.search(sentence)
        or EMAIL_RE.search(sentence)
        or PHONE_RE.search(sentence)
        or MONEY_RE.search(sentence)
        or NAME_RE.search(sentence)
        or SELF_FACT_RE.search(low)
    ):
        return False
    own = topic_words(sentence) - REACTION_WORDS
    return bool(own) and 5 * len(own & topic_words(reply)) >= 3 * len(own)


def is_user_decision(sentence: str, low: str) -> bool:
    """A choice with an object: "I'll go with the premium plan", not "I'll try it"."""
    return bool(USER_DECISION_RE.search(low) and topic_words(sentence) - DECISION_WORDS)


def is_announcement(sentence: str) -> bool:
    """A correction with no content of its own: "Actually, I need to correct that." """
    rest = topic_words(sentence) - ANNOUNCEMENT_WORDS
    return not rest and is_correction(fold(sentence))


# ---------------------------------------------------------------------------------------
# Salience: which bullets the budget keeps, and which are pinned
# ---------------------------------------------------------------------------------------

SECTION_BONUS = {FACTS: 0, CONSTRAINTS: 1, DECISIONS: 0, OPEN_QUESTIONS: -3}
DROP_RANK = {name: rank for rank, name in enumerate(DROP_ORDER)}


def salience(section: str, item: str) -> int:
    """How much a bullet is worth keeping: names, IDs, health and corrections score high.

    The weights are additive, so a bullet carrying several kinds of detail outranks one
    with a single kind; a generic statement scores about zero.
    """
    text = strip_role(item)
    low = fold(text)
    score = SECTION_BONUS.get(section, 0)
    if is_marked(item):  # "(corrected)" or "(corrected from X)"
        score += 4
    if NAME_RE.search(text):
        score += 8
    rule = is_rule(low)
    preference = not rule and bool(PREFERENCE_RE.search(low)) and not HEDGE_RE.search(low)
    food = bool(FOOD_RE.search(low))
    if DIET_RE.search(low) or MEDICAL_RE.search(low) or (food and (rule or preference)):
        score += 8  # health, or a food the user avoids: "I don't eat pork"
    elif food:
        score += 3
    if ID_RE.search(text) or EMAIL_RE.search(text) or PHONE_RE.search(text):
        score += 6
    if MONEY_RE.search(text):
        score += 3
    elif has_amount(text, low):
        score += 2
    if has_date(text, low):
        score += 2
    if has_proper_noun(text):
        score += 5 if FULL_NAME_RE.search(text) else 2
    if rule:
        score += 3
    elif preference:
        score += 2
    if SELF_FACT_RE.search(low):
        score += 1
    return score


def strip_role(item: str) -> str:
    return ITEM_SPEAKER_RE.sub("", item).replace(CORRECTED_MARK, "")
