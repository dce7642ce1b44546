"""A deterministic, offline summarizer that keeps sentences instead of writing new ones.

:class:`ExtractiveSummarizer` picks the user's facts, constraints, decisions and open
questions out of the transcript by pattern, keeps them verbatim, merges them into the
previous record and trims the result to the token budget, least salient bullets first. With
the text it returns the few bullets worth pinning. It needs no network and no model, so it
is a safe fallback, a baseline for evaluation, and a way to run tests offline.

:class:`ExtractiveLLMService` wraps it as a Pipecat ``LLMService`` so Pipecat's built-in
context summarization (``LLMContextSummaryConfig(llm=...)``) and
:class:`~pipecat_summarizer.summarizers.pipecat_llm.PipecatLLMSummarizer` can use it like any
other LLM.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pipecat.processors.aggregators.llm_context import LLMContext, LLMSpecificMessage
from pipecat.services.llm_service import LLMService
from pipecat.services.settings import LLMSettings

from pipecat_summarizer.prompt import SECTIONS, SummaryRequest
from pipecat_summarizer.sections import (
    _heading_of,
    parse_sections,
    render_sections,
)
from pipecat_summarizer.summarizers.base import SummaryResult
from pipecat_summarizer.tokens import CHARS_PER_TOKEN, _is_wide, estimate_text_tokens

FACTS, CONSTRAINTS, DECISIONS, OPEN_QUESTIONS = SECTIONS
CORRECTED_MARK = "(corrected)"
# Larger inputs are summarized in a worker thread (about 0.2 ms per message).
_INLINE_MESSAGES = 300

# Budget trimming drops whole bullets in this order: questions go first, constraints last.
_DROP_ORDER = (OPEN_QUESTIONS, DECISIONS, FACTS, CONSTRAINTS)

# ---------------------------------------------------------------------------------------
# Parsing and rendering the record
# ---------------------------------------------------------------------------------------


def _render_compact(sections: Mapping[str, Sequence[str]]) -> str:
    # Only for budgets too small for the four-heading skeleton: empty sections are left out.
    lines: list[str] = []
    for name in SECTIONS:
        items = [i for i in sections.get(name, ()) if i and i.strip()]
        if items:
            lines.append(f"{name}:")
            lines.extend(f"- {i}" for i in items)
    return "\n".join(lines)


def _looks_like_record(text: str) -> bool:
    """Whether ``text`` is a memory record (a previous summary), not conversation."""
    lines = [line for line in text.splitlines() if line.strip()]
    headings = [i for i, line in enumerate(lines) if _heading_of(line)]
    return len(headings) >= 2 or (len(headings) == 1 and headings[0] == 0)


# ---------------------------------------------------------------------------------------
# Sentence handling
# ---------------------------------------------------------------------------------------

_SHORTENED_RE = re.compile(r"\[\.\.\. shortened for the summary: \d+ characters omitted \.\.\.\]")
_ABBREV_RE = re.compile(
    r"(?:\b(?:mr|mrs|ms|dr|prof|sr|jr|st|no|vs|etc|approx|inc|ltd|co|ave|apt|dept|"
    r"jan|feb|mar|apr|jun|jul|aug|sep|sept|oct|nov|dec)|"
    r"\b[a-z]\.[a-z]|\b[a-z])\.$",
    re.IGNORECASE,
)


def _split_sentences(text: str) -> list[str]:
    """Split text into trimmed sentences, keeping abbreviations and decimals intact."""
    text = _SHORTENED_RE.sub(" ", text or "")
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
                or (merged[-1][-1] == "." and _ABBREV_RE.search(merged[-1].rsplit(None, 1)[-1]))
            ):
                merged[-1] = f"{merged[-1]} {part}"
            else:
                merged.append(part)
        sentences.extend(merged)
    return sentences


def _norm(text: str) -> str:
    return text.replace("’", "'").replace("‘", "'").lower()


_WORD_RE = re.compile(r"\w+(?:['\-.:/]\w+)*")
_STOPWORDS = frozenset(
    """a an the and or but so to of in on at for with by from about as into is are was were be
    been being am i i'm im me my mine you your yours we our us it it's its this that these those
    there here do does did done have has had will would can could should shall may might just
    also too very really please then than if when what which who whom how why where user
    assistant tool not no yes oh um uh well okay ok i'll i'd i've let let's s t some any all
    get got one""".split()
)
# Words that only say "this is a correction"; they carry no topic.
_CORRECTION_WORDS = frozenset(
    "actually correction sorry meant mean wrong mistake oops wait instead correct make change "
    "scratch earlier said".split()
)
_SMALL_TALK_WORDS = frozenset(
    """hi hello hey hiya thanks thank you thx ok okay sure great cool good morning afternoon
    evening night bye goodbye yes yeah yep yup no nope please alright right awesome perfect nice
    wonderful excellent fine well how are doing you i i'm im am it's its that's thats sounds
    sound so that is a the and too very much all got it gotcha see understood hmm um uh oh ah
    wow lol haha welcome appreciate appreciated really know don't dont not think mind worries
    problem bit just there hope day today your me we glad to be lovely talk speak again
    cheers""".split()
)
_ENGLISH_MARKERS = frozenset(
    """the a an i you is to and my it of in for on me we that this with be are have can i'm
    i've i'll i'd it's that's there's what's don't can't won't isn't doesn't didn't they
    they're them their our your he she his her was were been not yes but or if then than
    just really very too also about all some any more most much one what when where why how
    who which would could should will does did has had get got make like good great oh well
    now here there though thanks sounds think know need want""".split()
)
# Function words of a few other languages written in Latin letters.
_FOREIGN_MARKERS = frozenset(
    """ich und der die das ist nicht ein eine mit auf je et le la les est pas une des du
    el los las es soy yo que por para con muy il di che non sono ik het een niet eu não
    com um uma são""".split()
)


def _words(text: str) -> list[str]:
    return _WORD_RE.findall(_norm(text))


def _stem(word: str) -> str:
    if word.endswith("'s"):
        word = word[:-2]
    if len(word) > 3 and word.endswith("s") and not word.endswith("ss") and not word[0].isdigit():
        word = word[:-1]
    return word


def _content_words(text: str) -> set[str]:
    return {
        _stem(w)
        for w in _words(text)
        if w not in _STOPWORDS and w not in _CORRECTION_WORDS and (len(w) > 1 or w.isdigit())
    }


def _is_small_talk(sentence: str) -> bool:
    words = _words(sentence)
    return all(w in _SMALL_TALK_WORDS for w in words)


# ---------------------------------------------------------------------------------------
# Classification patterns (matched on lowercased text with straight apostrophes)
# ---------------------------------------------------------------------------------------

# "May" and "March" are also ordinary words, so only their capitalized forms count.
_MONTHS = (
    "[Jj]anuary|[Ff]ebruary|March|[Aa]pril|May|[Jj]une|[Jj]uly|[Aa]ugust|[Ss]eptember|"
    "[Oo]ctober|[Nn]ovember|[Dd]ecember"
)
_WEEKDAYS = "monday|tuesday|wednesday|thursday|friday|saturday|sunday"
_NUMBER_WORDS = (
    "two|three|four|five|six|seven|eight|nine|ten|eleven|twelve|fifteen|twenty|thirty|"
    "forty|fifty|sixty|hundred|thousand|million|dozen|twice"
)
# Words that look like plurals after a number word but name nothing ("two things").
_VAGUE_PLURALS = (
    "things|ones|questions|ideas|reasons|points|options|words|this|was|has|his|yes|less|"
    "always|sometimes|across|plus|perhaps|unless|does|goes|its|thus|minutes? ago"
)
_UNITS = (
    "second|minute|hour|day|night|week|month|year|time|kilo|kg|gram|pound|lb|ounce|cup|"
    "serving|portion|meal|dollar|euro|mile|km|percent"
)

# An identifier: letters and digits joined by hyphens ("NC-48213", not "10-minute"), a code
# such as "P1234567" or "QX99" (not "B12"), or a long number.
_ID_RE = re.compile(
    r"\b(?!\d+-[a-z]+\b)(?=[A-Za-z0-9-]*\d)(?=[A-Za-z0-9-]*[A-Za-z])[A-Za-z0-9]+"
    r"(?:-[A-Za-z0-9]+)+\b|\b(?:[A-Z]{2,6}\d{2,}|[A-Z]\d{3,})[A-Za-z0-9]*\b|\b\d{5,}\b"
)
_PHONE_RE = re.compile(r"(?:\+|\b)\d[\d ().-]{6,}\d\b")
_EMAIL_RE = re.compile(r"\b[\w.+-]+@[\w-]+\.[\w.]+\b")
_MONEY_RE = re.compile(
    r"[$€£¥₹]\s?\d|\b\d+(?:[.,]\d+)?\s?(?:dollars?|euros?|pounds?|usd|eur|gbp|bucks)\b", re.I
)
_WEIGHT_RE = re.compile(r"\b\d+(?:[.,]\d+)?\s?(?:kg|kgs|kilos?|kilograms?|lbs?|g|grams?)\b", re.I)
_ENERGY_RE = re.compile(r"\b\d+(?:[.,]\d+)?\s?(?:kcal|calories|cal)\b", re.I)
_TIME_RE = re.compile(
    r"\b\d{1,2}(?::\d{2})?\s?(?:am|pm|a\.m\.|p\.m\.)|\b\d{1,2}:\d{2}\b|\bnoon\b|\bmidnight\b"
    r"|\bo'clock\b",
    re.I,
)
_MONTH_RE = re.compile(rf"\b(?:{_MONTHS})\b")
_WEEKDAY_RE = re.compile(rf"\b(?:{_WEEKDAYS})\b", re.I)
# Dates that stay meaningful later ("yesterday", "next week"); "today" and "tonight" alone
# are small talk by the time the summary is read.
_DATE_RE = re.compile(
    r"\b(?:tomorrow|yesterday|(?:last|next) (?:week|month|year|weekend|time|"
    rf"{_WEEKDAYS})|(?:days?|weeks?|months?|years?) ago)\b"
    r"|\b\d{1,4}[/.-]\d{1,2}[/.-]\d{1,4}\b|\b\d{1,2}(?:st|nd|rd|th)\b",
    re.I,
)
# Any number (for correction topics); an amount worth keeping needs a unit after a word.
_NUMBER_RE = re.compile(rf"\d|\b(?:{_NUMBER_WORDS})\b", re.I)
_NUMBER_PHRASE_RE = re.compile(
    rf"\b(?:{_NUMBER_WORDS}|one(?! more\b)|half)\b"
    rf"(?:[\s-]+(?:and\s+)?(?:an?\s+half|one|{_NUMBER_WORDS}))*"
    rf"(?:\s+[a-z]+)?\s+(?:(?!(?:{_VAGUE_PLURALS})\b)[a-z]{{2,}}s|(?:{_UNITS}))\b"
)
_DIGIT_RE = re.compile(r"\d")
# The user's own name; other capitalized words count as names of lesser weight.
_NAME_RE = re.compile(
    r"(?i:\bmy name(?:'s| is)\b|\bcall me\b)|\b(?:I'm|I am|[Tt]his is|[Ii]t's) "
    rf"(?!(?:{_MONTHS}|{_WEEKDAYS.title()})\b)[A-Z][a-z]+"
)
# Capitalized words that name no one.
_PROPER_SKIP = frozenset(
    """I I'm I'll I've I'd OK Okay Ok Mom Mum Dad God Hi Hello Hey Yes No Thanks Sir Madam Oh
    Ha Wow User Assistant Tool""".split()
)
_CALENDAR_WORDS = frozenset(
    """january february march april may june july august september october november december
    monday tuesday wednesday thursday friday saturday sunday""".split()
)
_SELF_FACT_RE = re.compile(
    r"\b(?:my name|call me|i'm called|i am called|i live|i'm from|i am from|i come from|"
    r"i was born|i grew up|i work (?:as|at|for|in|from)|i'm retired|i am retired|"
    r"i(?:'m| am) (?:married|divorced|single|engaged|widowed)|years? old|"
    r"i(?:'m| am) an? (?!(?:bit|little|lot|big fan|huge fan|fan)\b)\w+|"
    r"i have (?:a|an|\d+|two|three|four|five) (?:\w+ )?(?:sons?|daughters?|kids?|children|"
    r"husband|wife|partner|boyfriend|girlfriend|brothers?|sisters?|dogs?|cats?|pets?)\b|"
    r"my (?!(?:god|goodness|bad|pleasure|gosh)\b)(?:(?!(?:problem|issue|thing|question|point|"
    r"worry|concern|guess|fear|weakness|fault|feeling|impression|excuse|mind|head|heart|"
    r"advice|understanding|bet|hope)\b)[\w']+ ){1,3}?(?:is|are|was|were)\b)"
)

# Constraints need substance: a diet, allergy or health condition, a medication, a limit
# with a number, a rule for the assistant, or a firm preference about something.
_FOODS = (
    "meat|red meat|pork|beef|chicken|lamb|fish|seafood|shellfish|shrimp|nuts|peanuts?|"
    "tree nuts|dairy|milk|cheese|eggs?|gluten|wheat|lactose|soy|sesame|sugar|salt|sodium|"
    "alcohol|caffeine|coffee|spicy food|gelatin|onions?|garlic|cilantro|mushrooms?|carbs"
)
_DIET_RE = re.compile(
    r"\b(?:allerg\w*|intoleran\w*|vegetarian\w*|vegan\w*|pescatarian\w*|halal|kosher|"
    r"celiac|coeliac|diabet\w*|pregnan\w*|breastfeeding|epi-?pens?|anaphyla\w*|"
    r"cross[- ]contaminat\w*)"
    rf"|\b(?:(?:{_FOODS})[- ]free|no (?:{_FOODS}))\b"
)
_FOOD_RE = re.compile(rf"\b(?:{_FOODS})\b")
# Drug names by their endings: atorvastatin, lisinopril, metoprolol, losartan, omeprazole...
_MEDICAL_RE = re.compile(
    r"(?:statins?|\w\w\wpril|olol|sartan|prazole|oxetine)\b"
    r"|\b(?:medications?|medicines?|meds|prescri\w*|pills?|insulin|inhalers?|"
    r"metformin|warfarin|aspirin|ibuprofen|"
    r"paracetamol|acetaminophen|antibiotics?|antidepressants?|blood thinners?|blood pressure|"
    r"(?:levo)?thyroxine|prednisone|chemo\w*|dialysis|pacemaker|asthma|epilep\w*|hypertension|"
    r"heart condition|kidney disease|wheelchair|hearing aids?|gout|crohn's|colitis)\b"
)
_LIMIT_VALUE = rf"(?:\W+\w+){{0,3}}?\W+(?:[$€£¥₹]\s?\d|\d|(?:{_NUMBER_WORDS})\b|noon|midnight)"
_LIMIT_RE = re.compile(
    r"\b(?:budget|no more than|not more than|at most|at least|under|below|less than|"
    r"fewer than|max(?:imum)?|min(?:imum)?|limit(?:ed)?|up to|no later than|deadline|only|"
    rf"afford)\b{_LIMIT_VALUE}"
)
# "before 9", "by 7:15" are limits only for someone who has to, or is free or busy.
_TIME_LIMIT_RE = re.compile(rf"\b(?:within|before|after|by|until|till|between)\b{_LIMIT_VALUE}")
_AVAILABILITY_RE = re.compile(
    r"\b(?:have to|has to|need to|needs to|must|can't|cannot|can only|free|available|busy|"
    r"unavailable|at work|working|latest|earliest|due)\b"
)
_RULE_RE = re.compile(
    r"(?:^|\bplease\s+|\bso\s+|,\s*|\band\s+)(?:please\s+)?(?:don't|do not|never|always|stop|"
    r"avoid)\s+(?:ever\s+|again\s+|even\s+)?(?:\w+\s+)?(?:suggest|recommend|call|ring|phone|"
    r"text|e-?mail|message|contact|mention|bring up|give|send|book|schedule|use|include|add|"
    r"offer|remind|put|order|charge|share|talk|say|tell|ask|transfer|sell|sign|subscribe|"
    r"spam|leave|speak)\w*\b"
    r"|\bi (?:don't|do not) want you to\b|\bi'd (?:rather|prefer) you (?:didn't|don't|not)\b"
    r"|\bplease (?:only|always|never|don't|do not)\b|\bmake sure (?:you|to) (?:don't|never|"
    r"always|only|avoid)\b|\bno (?:calls|emails|texts|messages)\b"
)
_PREFERENCE_RE = re.compile(
    r"\b(?:i|we)\s+(?:(?:really|just|absolutely|strongly|also|totally|honestly|completely|"
    r"strictly|still|generally|usually|definitely)\s+)*(?:hate|hated|dislike|detest|loathe|"
    r"can't stand|cannot stand|don't like|do not like|don't eat|do not eat|don't drink|"
    r"do not drink|can't eat|cannot eat|can't have|cannot have|can't drink|cannot drink|"
    r"won't eat|will not eat|won't drink|never eat|never drink|avoid|stay away from|prefer|"
    r"must not|mustn't|can't tolerate|cannot tolerate|don't do|do not do|don't touch|"
    r"refuse to)\s+(?!(?:enough|much|that|this|it|them|those|these|so|too|very|well|about|"
    r"anymore|either)\b)\w+"
    r"|\bi'd (?:rather|prefer)\b(?! (?:not say|you))|\bi(?:'m| am) not (?:allowed|supposed) to\b"
)
_HEDGE_RE = re.compile(
    r"\b(?:maybe|perhaps|might|i guess|not sure|i wonder|probably|i suppose|i think|"
    r"kind of|sort of)\b"
)
_USER_DECISION_RE = re.compile(
    r"\blet's\b(?!\s+(?:see|think|talk|chat|start|begin|say|plan|do|move|switch|focus|look|"
    r"discuss|go over|go back|continue|turn|get back))|\blet us\b|"
    r"\bi'll (?:take|go with|have|book|do|get|order|choose|pick|try|pay|stick with)\b|"
    r"\bi'd like to (?:go with|book|order|take|schedule|reserve|confirm|cancel|buy)\b|"
    r"\bi (?:will|want to) (?:take|go with|book|order|choose|cancel)\b|\bgo with\b|"
    r"\bi(?:'ve| have) decided\b|\bi choose\b|\bbook it\b|"
    r"\bplease (?:book|schedule|reserve|order|cancel|confirm|log|add)\b"
)
# Words that only say "a decision was made"; a decision needs something besides them.
_DECISION_WORDS = frozenset(
    """take go have book booked do get order choose pick try pay stick let let's okay yes sure
    yeah say plan talk move some up it time week thing stuff way now then actual log logged
    done confirmed noted added saved set updated all everything that's fine good great""".split()
)
_ASSISTANT_DECISION_RE = re.compile(
    r"\b(?:booked|scheduled|rescheduled|confirmed|reserved|logged|reference|confirmation|"
    r"credit|credited|refund|refunded|ordered|placed|cancel(?:l)?ed|"
    r"i(?:'ve| have) (?:added|set|sent|updated|created|noted|saved|applied|changed|recorded|"
    r"submitted|registered|arranged)|will be (?:delivered|sent|charged|shipped|credited|"
    r"refunded|applied))\b"
)
# A correction: "actually" only where it opens the sentence ("Oh no, actually ..."), not
# as an intensifier ("it's actually safe").
_CORRECTION_RE = re.compile(
    r"(?:^(?:(?:oh|no|wait|sorry|um|uh|hmm|well|and|but|so|oh no|hold on|ok|okay)[,!.]?\s+)*"
    r"actually\b|\bactually,)(?!,?\s+(?:while|one more|by the way|also|another|speaking|"
    r"before i forget|that reminds|now that|quick question|i was wondering|can|could|do|is|"
    r"what|how)\b)|,\s*not\s+[\w$€£.,-]+[.!]?$|\bcorrection\b|\bi meant\b|\bi mean,|"
    r"\bsorry,? (?:it's|it is|i meant|that's|that is|make (?:that|it))\b|\bi was wrong\b|"
    r"\bi made a mistake\b|"
    r"\blet me correct\b|\bto correct\b|\bnot\b[^.?!]{1,40}\bbut\b|\bmake (?:that|it)\b|"
    r"\bchange (?:that|it) to\b|\bscratch that\b|\binstead of\b|\bi misspoke\b"
)
# Words of a correction that only announces itself: "Actually, I need to correct that."
_ANNOUNCEMENT_WORDS = frozenset(
    "need needs want let quick small little thing something one bit fix update correcting "
    "wrong earlier before told said made mistake oh no hold on sorry that this there".split()
)
_READ_TOOL_RE = re.compile(
    r"^(?:get|lookup|look_up|search|find|check|list|fetch|query|read|show|retrieve|describe|"
    r"is|has|can|verify|validate|estimate|calculate|compute)(?:_|$|[A-Z])"
)
_ACTION_TOOL_RE = re.compile(
    r"book|reserv|schedul|confirm|order|purchas|buy|pay|cancel|refund|credit|log|record|"
    r"create|add|update|set|save|submit|register|transfer|appoint|assign|change|modify|send|"
    r"place|issue|apply|escalat|ticket",
    re.IGNORECASE,
)
_PENDING_RESULT_RE = re.compile(r"^\s*\"?(?:in_progress|in progress|started)\"?\s*$", re.I)


def _topic_keys(text: str) -> set[str]:
    keys = set()
    for key, pattern in (
        ("id", _ID_RE),
        ("phone", _PHONE_RE),
        ("email", _EMAIL_RE),
        ("money", _MONEY_RE),
        ("weight", _WEIGHT_RE),
        ("energy", _ENERGY_RE),
        ("time", _TIME_RE),
        ("weekday", _WEEKDAY_RE),
        ("month", _MONTH_RE),
    ):
        if pattern.search(text):
            keys.add(key)
    return keys


def _has_proper_noun(sentence: str) -> bool:
    """A capitalized word after the first (not "I", a weekday, a month or "ID")."""
    for word in sentence.split()[1:]:
        word = word.strip("\"'()[],.;:!?—-")
        if not word or not word[0].isupper() or word in _PROPER_SKIP:
            continue
        head = word.split("'")[0].split("’")[0]
        if head.lower() in _CALENDAR_WORDS:
            continue
        if any(c.islower() for c in head) or (len(head) >= 3 and head.isalpha()):
            return True
    return False


# Two capitalized words in a row after the first word: a full name or a street.
_FULL_NAME_RE = re.compile(r"(?<=\S)\s+(?!(?:I|I'm|I'll|I've|I'd)\b)[A-Z][a-z]+\s+[A-Z][a-z]+")


def _has_amount(sentence: str, low: str) -> bool:
    """A number outside identifiers, or a number word with a unit ("two hours")."""
    if _DIGIT_RE.search(sentence):
        rest = _ID_RE.sub(" ", sentence) if _ID_RE.search(sentence) else sentence
        if _DIGIT_RE.search(rest):
            return True
    return bool(_NUMBER_PHRASE_RE.search(low))


def _has_date(sentence: str, low: str) -> bool:
    return bool(
        _TIME_RE.search(low)
        or _WEEKDAY_RE.search(low)
        or _MONTH_RE.search(sentence)
        or _DATE_RE.search(low)
    )


# Something the user did, does, plans or likes, told in a sentence of some substance.
_SELF_STATEMENT_RE = re.compile(
    r"\b(?:i|we)(?:'ve| have|'m| am|'d| was| were)?\s+(?:(?:just|really|finally|recently|"
    r"also|always|usually|still|actually|often|sometimes|never)\s+)*(?:went|go|visited|"
    r"started|joined|signed up|finished|bought|got|adopted|moved|traveled|travelled|ran|run|"
    r"painted|paint|wrote|write|read|watched|played|play|met|took|learned|learning|"
    r"volunteer\w*|graduated|lost|won|attended|celebrated|decided|planning|plan|going to|"
    r"gonna|love|loved|like|enjoy\w*|into|keen on|collect\w*|practic\w*|study\w*|studied|"
    r"work|working|worked|eat|eating|drink|cook\w*|grew up|raised|teach\w*|taught|"
    r"been)\b"
)
_THIN_WORDS = frozenset(
    """never though really lot much way thing things stuff kind sort always usually still
    even sure pretty quite bit something anything everything time""".split()
)
_LIKE_THAT_RE = re.compile(r"\bi (?:really )?(?:like|love) (?:that|it|this|the idea)\b")


def _is_self_statement(sentence: str, low: str) -> bool:
    if not _SELF_STATEMENT_RE.search(low) or _HEDGE_RE.search(low) or _LIKE_THAT_RE.search(low):
        return False
    return len(_content_words(sentence) - _THIN_WORDS) >= 4


def _is_fact(sentence: str, low: str) -> bool:
    """A fact names something: a name, a number, an amount, a date, an ID, or the user."""
    return bool(
        _has_amount(sentence, low)
        or _has_date(sentence, low)
        or _ID_RE.search(sentence)
        or _EMAIL_RE.search(sentence)
        or _has_proper_noun(sentence)
        or _NAME_RE.search(sentence)
        or _SELF_FACT_RE.search(low)
        or _is_self_statement(sentence, low)
    )


# Cheap substring checks that rule out most sentences before the slower patterns run.
_CORRECTION_KEYS = (
    "actually", "correct", "meant", "mean,", "sorry", "wrong", "mistake", ", not", "make ",
    "change", "scratch", "instead", "misspoke",
)  # fmt: skip
_RULE_KEYS = (
    "don't", "do not", "never", "always", "stop", "avoid", "you", "please", "no ", "make sure",
)  # fmt: skip


def _is_correction(low: str) -> bool:
    maybe = any(k in low for k in _CORRECTION_KEYS) or ("not" in low and "but" in low)
    return maybe and bool(_CORRECTION_RE.search(low))


def _is_rule(low: str) -> bool:
    return any(k in low for k in _RULE_KEYS) and bool(_RULE_RE.search(low))


def _is_constraint(low: str) -> bool:
    """A constraint has substance: health, a limit, a rule or a firm preference."""
    if _DIET_RE.search(low) or _MEDICAL_RE.search(low) or _is_rule(low):
        return True
    if _HEDGE_RE.search(low):
        return False
    return bool(
        _PREFERENCE_RE.search(low)
        or _LIMIT_RE.search(low)
        or (_TIME_LIMIT_RE.search(low) and _AVAILABILITY_RE.search(low))
    )


def _is_unclassifiable_language(sentence: str) -> bool:
    # English patterns cannot judge other languages; keep their substantial sentences.
    words = _words(sentence)
    wide = any(ord(ch) > 0x2FFF for ch in sentence)
    if any(w in _ENGLISH_MARKERS for w in words):
        return False
    if wide:
        return len(sentence) >= 6
    foreign = not sentence.isascii() or any(w in _FOREIGN_MARKERS for w in words)
    return foreign and len(words) >= 4


def _is_question(sentence: str) -> bool:
    return sentence.rstrip().endswith(("?", "？"))


def _classify_user(sentence: str) -> str | None:
    """Return the section a user sentence belongs to, or ``None`` to drop it."""
    if _is_small_talk(sentence):
        return None
    if _is_question(sentence):
        # Questions are never facts or constraints, unless they carry an identifier.
        return FACTS if _ID_RE.search(sentence) else OPEN_QUESTIONS
    low = _norm(sentence)
    if _is_constraint(low):
        return CONSTRAINTS
    if _is_user_decision(sentence, low):
        return DECISIONS
    if _is_fact(sentence, low) or _is_unclassifiable_language(sentence):
        return FACTS
    return None


# A reaction that only repeats the assistant: "Six servings is great."
_REACTION_WORDS = frozenset(
    """good great fine nice bad sound sounds perfect genius make makes sense noted love
    amazing isn't is it that okay ok yes yeah right cool awesome lovely clever idea wonderful
    excellent interesting helpful doable handle can do then""".split()
)
_REACTION_RE = re.compile(
    r"\b(?:good|great|fine|nice|bad|sounds?|perfect|genius|makes sense|noted|love|amazing|"
    r"cool|awesome|lovely|clever|wonderful|excellent|interesting|helpful|doable|i can handle|"
    r"i can do|it is)\b"
)


def _is_echo(sentence: str, low: str, reply: str) -> bool:
    """A short reaction made of the assistant's last words, with nothing of the user's."""
    if not reply or len(_words(sentence)) > 10 or not _REACTION_RE.search(low):
        return False
    if (
        _ID_RE.search(sentence)
        or _EMAIL_RE.search(sentence)
        or _PHONE_RE.search(sentence)
        or _MONEY_RE.search(sentence)
        or _NAME_RE.search(sentence)
        or _SELF_FACT_RE.search(low)
    ):
        return False
    words = _content_words(sentence) - _REACTION_WORDS
    return bool(words) and 5 * len(words & _content_words(reply)) >= 3 * len(words)


def _is_user_decision(sentence: str, low: str) -> bool:
    """A choice with an object: "I'll go with the premium plan", not "I'll try it"."""
    return bool(_USER_DECISION_RE.search(low) and _content_words(sentence) - _DECISION_WORDS)


def _is_announcement(sentence: str) -> bool:
    """A correction with no content of its own: "Actually, I need to correct that." """
    words = _content_words(sentence) - _ANNOUNCEMENT_WORDS
    return not words and _is_correction(_norm(sentence))


# ---------------------------------------------------------------------------------------
# Salience: which bullets the budget keeps, and which are pinned
# ---------------------------------------------------------------------------------------

_SECTION_BONUS = {FACTS: 0, CONSTRAINTS: 1, DECISIONS: 0, OPEN_QUESTIONS: -3}
_DROP_RANK = {name: rank for rank, name in enumerate(_DROP_ORDER)}


def _salience(section: str, item: str) -> int:
    """How much a bullet is worth keeping: names, IDs, health and corrections score high.

    The weights are additive, so a bullet carrying several kinds of detail outranks one
    with a single kind; a generic statement scores about zero.
    """
    text = _strip_role(item)
    low = _norm(text)
    score = _SECTION_BONUS.get(section, 0)
    if CORRECTED_MARK in item:
        score += 4
    if _NAME_RE.search(text):
        score += 8
    rule = _is_rule(low)
    preference = not rule and bool(_PREFERENCE_RE.search(low)) and not _HEDGE_RE.search(low)
    food = bool(_FOOD_RE.search(low))
    if _DIET_RE.search(low) or _MEDICAL_RE.search(low) or (food and (rule or preference)):
        score += 8  # health, or a food the user avoids: "I don't eat pork"
    elif food:
        score += 3
    if _ID_RE.search(text) or _EMAIL_RE.search(text) or _PHONE_RE.search(text):
        score += 6
    if _MONEY_RE.search(text):
        score += 3
    elif _has_amount(text, low):
        score += 2
    if _has_date(text, low):
        score += 2
    if _has_proper_noun(text):
        score += 5 if _FULL_NAME_RE.search(text) else 2
    if rule:
        score += 3
    elif preference:
        score += 2
    if _SELF_FACT_RE.search(low):
        score += 1
    return score


# ---------------------------------------------------------------------------------------
# Message access
# ---------------------------------------------------------------------------------------


def _content_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = [
            str(p.get("text", ""))
            for p in content
            if isinstance(p, dict) and p.get("type") in ("text", "input_text", "output_text")
        ]
        return " ".join(p for p in parts if p)
    return ""


def _compact(value: Any, limit: int) -> str:
    if not isinstance(value, str):
        try:
            value = json.dumps(value, ensure_ascii=False, sort_keys=True, default=str)
        except (TypeError, ValueError):
            value = str(value)
    text = " ".join(value.split())
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


def _dedupe_key(item: str) -> str:
    text = _norm(item).replace(CORRECTED_MARK, "")
    return " ".join(re.findall(r"\w+", text))


def _strip_role(item: str) -> str:
    return re.sub(r"^(?:user|assistant|tool)\s*:\s*", "", item, flags=re.IGNORECASE).replace(
        CORRECTED_MARK, ""
    )


# ---------------------------------------------------------------------------------------
# The summarizer
# ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Topic:
    """What a correctable item is about, computed once when it is added."""

    seq: int
    plain_key: str
    words: frozenset[str]
    keys: frozenset[str]
    has_number: bool


def _topic(text: str, seq: int = 0) -> _Topic:
    text = _strip_role(text)
    return _Topic(
        seq,
        _dedupe_key(text),
        frozenset(_content_words(text)),
        frozenset(_topic_keys(text)),
        bool(_NUMBER_RE.search(_norm(text))),
    )


_CORRECTABLE = (FACTS, CONSTRAINTS, DECISIONS)
_NOT_USER_RE = re.compile(r"^(?:assistant\s*:|tool\b)", re.IGNORECASE)


class _Record:
    """The record being built: items per section, oldest first.

    Items are unique by normalized text. The user's own items are indexed by content word
    and topic key, so a correction finds its candidates without scanning the record.
    """

    def __init__(self) -> None:
        self.sections: dict[str, list[str]] = {n: [] for n in SECTIONS}
        self._keys: dict[str, str] = {}  # normalized item -> section
        self._topics: dict[str, _Topic] = {}  # correctable item -> topic
        self._by_word: dict[str, set[str]] = {}
        self._by_key: dict[str, set[str]] = {}
        self._seq = 0
        self.age: dict[str, int] = {}  # normalized item -> order of addition
        self._added = 0

    def add(self, section: str, item: str) -> None:
        key = _dedupe_key(item)
        if not key:
            return
        if key in self._keys:
            # A repeated sentence keeps its place; a correction mark is not lost.
            if CORRECTED_MARK in item:
                items = self.sections[self._keys[key]]
                for i, existing in enumerate(items):
                    if _dedupe_key(existing) == key and CORRECTED_MARK not in existing:
                        self._unindex(existing)
                        items[i] = item
                        self._index(self._keys[key], item)
            return
        self._keys[key] = section
        self.age[key] = self._added
        self._added += 1
        self.sections[section].append(item)
        self._index(section, item)

    def _index(self, section: str, item: str) -> None:
        # Users correct what they said, not what the assistant or a tool recorded.
        if section not in _CORRECTABLE or _NOT_USER_RE.match(item):
            return
        self._seq += 1
        topic = _topic(item, self._seq)
        self._topics[item] = topic
        for word in topic.words:
            self._by_word.setdefault(word, set()).add(item)
        for key in topic.keys:
            self._by_key.setdefault(key, set()).add(item)

    def _unindex(self, item: str) -> None:
        topic = self._topics.pop(item, None)
        if topic is None:
            return
        for word in topic.words:
            self._by_word[word].discard(item)
        for key in topic.keys:
            self._by_key[key].discard(item)

    def remove(self, section: str, index: int) -> None:
        item = self.sections[section].pop(index)
        key = _dedupe_key(item)
        self._keys.pop(key, None)
        self.age.pop(key, None)
        self._unindex(item)

    def trim(self, section: str, keep: int) -> None:
        while len(self.sections[section]) > keep:
            self.remove(section, 0)

    def merge(self, other: Mapping[str, Sequence[str]]) -> None:
        for name in SECTIONS:
            for item in other.get(name, ()):
                self.add(name, item)

    def apply_correction(self, sentence: str) -> str | None:
        """Remove the earlier user item that ``sentence`` corrects, if one matches.

        The match is the item sharing the most content words, helped by shared kinds of
        value (a time, a weekday, an amount...); a short correction such as "sorry, I meant
        Tuesday" may match on the kind of value alone. Ties go to the most recent item.

        Returns:
            The section of the removed item, or ``None`` if nothing matched.
        """
        topic = _topic(sentence)
        elliptical = len(topic.words) <= 2
        candidates: set[str] = set()
        for word in topic.words:
            candidates |= self._by_word.get(word, set())
        if elliptical:
            for key in topic.keys:
                candidates |= self._by_key.get(key, set())
        best: tuple[int, int, str] | None = None
        for item in candidates:
            other = self._topics[item]
            if other.plain_key == topic.plain_key:
                continue  # the correction itself, already recorded
            overlap = len(topic.words & other.words)
            shared_keys = len(topic.keys & other.keys)
            both_numbers = topic.has_number and other.has_number
            eligible = (
                overlap >= 2
                or (overlap >= 1 and (shared_keys or both_numbers))
                or (elliptical and shared_keys >= 1)
            )
            if not eligible:
                continue
            rank = (2 * overlap + shared_keys + int(both_numbers), other.seq, item)
            if best is None or rank > best:
                best = rank
        if best is not None:
            item = best[2]
            section = self._keys[_dedupe_key(item)]
            self.remove(section, self.sections[section].index(item))
            return section
        return None

    def is_empty(self) -> bool:
        return not any(self.sections.values())


class ExtractiveSummarizer:
    """Summarizes by keeping the important sentences verbatim, with no model at all.

    User sentences that name something (a name, a number, an amount, a date, an ID, "my X
    is ...") go to FACTS; sentences with substance about what must or must not happen (a
    diet, an allergy or a health condition, a medication, a limit with a number, a rule for
    the assistant, a firm preference such as "I don't eat pork") to CONSTRAINTS; bookings
    and confirmations (from the assistant's words and from the results of action tools) and
    the user's choices to DECISIONS; the user's latest unanswered questions to OPEN
    QUESTIONS. Questions, filler and hedged remarks are not facts or constraints. A user
    correction ("actually", "I meant", ...) replaces the earlier statement it corrects and is
    marked "(corrected)"; a correction that only announces itself ("Actually, I need to
    correct that.") marks the sentence that follows instead. The previous record is merged
    in first, so facts survive any number of rolls until the budget forces them out.

    Over the budget, the least salient bullets go first (see :func:`_salience`: the user's
    name, IDs, health details and corrections rank high, generic remarks and old questions
    low), the oldest first among equals, with questions, then decisions, then facts, then
    constraints as the last tie-breaker.

    The result is deterministic and always within ``request.max_tokens`` as counted by
    :func:`~pipecat_summarizer.tokens.estimate_text_tokens`. :meth:`summarize` also returns
    the bullets worth pinning (:attr:`SummaryResult.sections`), so a processor that pins
    facts takes only those rather than every FACTS and CONSTRAINTS bullet.

    Args:
        max_open_questions: How many of the latest unanswered questions to keep.
        max_item_chars: Longer sentences and tool results are shortened to this many
            characters.
        pin_tokens: About how many tokens the pin-worthy bullets may take in total.
    """

    def __init__(
        self, *, max_open_questions: int = 3, max_item_chars: int = 400, pin_tokens: int = 250
    ):
        """Initialize the summarizer."""
        self.max_open_questions = max(0, max_open_questions)
        self.max_item_chars = max(40, max_item_chars)
        self.pin_tokens = max(0, pin_tokens)

    async def summarize(self, request: SummaryRequest) -> SummaryResult:
        """Build the updated memory record for ``request``.

        Args:
            request: The summary request; ``messages``, ``previous_summary`` and
                ``max_tokens`` are used, the prompts are not.

        Returns:
            The record (``FACTS:``, ``CONSTRAINTS:``, ``DECISIONS:`` and
            ``OPEN QUESTIONS:``, each followed by ``- `` bullets or ``- none``) as ``text``,
            and in ``sections`` the FACTS and CONSTRAINTS bullets worth pinning: the most
            salient ones, verbatim from the text, about ``pin_tokens`` in total.
        """
        return await self.summarize_result_async(
            request.messages,
            previous_summary=request.previous_summary,
            max_tokens=request.max_tokens,
        )

    async def summarize_result_async(
        self, messages: Sequence[Any], *, previous_summary: str | None, max_tokens: int
    ) -> SummaryResult:
        """Run :meth:`summarize_messages_result`, off the event loop when the input is large.

        Args:
            messages: OpenAI-format messages, oldest first.
            previous_summary: The record being rolled forward, or ``None``.
            max_tokens: The output budget.

        Returns:
            The record and its pin-worthy bullets.
        """
        size = len(messages) + len(previous_summary or "") // 2000
        if size <= _INLINE_MESSAGES:
            return self.summarize_messages_result(
                messages, previous_summary=previous_summary, max_tokens=max_tokens
            )
        # A few thousand messages take about a second; keep the audio pipeline running.
        return await asyncio.to_thread(
            self.summarize_messages_result,
            list(messages),
            previous_summary=previous_summary,
            max_tokens=max_tokens,
        )

    def summarize_messages_result(
        self, messages: Sequence[Any], *, previous_summary: str | None, max_tokens: int
    ) -> SummaryResult:
        """Synchronous core of :meth:`summarize`.

        Args:
            messages: OpenAI-format messages, oldest first.
            previous_summary: The record being rolled forward, or ``None``.
            max_tokens: The output budget (values below 1 are treated as 1).

        Returns:
            The record text, and in ``sections`` its pin-worthy FACTS and CONSTRAINTS.
        """
        record = _Record()
        if previous_summary and previous_summary.strip():
            record.merge(self._parse_previous(previous_summary))
        self._extract(messages, record)
        if record.is_empty():
            first = self._first_user_sentence(messages)
            if first:
                record.add(FACTS, first)
        text, kept = self._fit(record, max(1, int(max_tokens)))
        return SummaryResult(text=text, sections=self._pin_worthy(kept))

    # -- extraction ----------------------------------------------------------------------

    def _parse_previous(self, text: str) -> dict[str, list[str]]:
        sections = parse_sections(text)
        if not any(sections.values()):
            # A free-form summary (another backend, an edited one): carry it forward as facts.
            sections[FACTS] = [self._shorten(s) for s in _split_sentences(text)]
        return sections

    def _shorten(self, text: str) -> str:
        limit = self.max_item_chars
        if len(text) <= limit:
            return text
        head = limit * 2 // 3
        return f"{text[:head].rstrip()} … {text[len(text) - (limit - head - 3) :].lstrip()}"

    def _extract(self, messages: Sequence[Any], record: _Record) -> None:
        calls: dict[str, tuple[str, str]] = {}
        unmatched: list[tuple[str, str]] = []  # calls without a usable id, first in first out
        questions: list[tuple[int, str]] = []
        assistant_texts: list[tuple[int, str]] = []
        user_ids: set[str] = set()
        # After "Actually, I need to correct that.": how many more user sentences may carry
        # the correction it announced.
        announced = 0
        reply = ""  # the latest assistant text
        for index, message in enumerate(messages):
            if isinstance(message, LLMSpecificMessage) or not isinstance(message, dict):
                continue
            role = str(message.get("role", ""))
            text = _content_text(message.get("content"))
            if text and _looks_like_record(text):
                # A summary message already in the context (Pipecat's built-in flow).
                record.merge(parse_sections(text))
                continue
            if role == "user":
                for sentence in _split_sentences(text):
                    user_ids.update(m.group(0) for m in _ID_RE.finditer(sentence))
                    announced = self._add_user_sentence(
                        sentence, index, record, questions, announced, reply
                    )
            elif role == "assistant":
                sentences = _split_sentences(text)
                if text.strip():
                    assistant_texts.append((index, text))
                    reply = text
                for sentence in sentences:
                    self._add_assistant_sentence(sentence, record, user_ids)
                for call in message.get("tool_calls") or []:
                    if not isinstance(call, dict):
                        continue
                    func = call.get("function") or {}
                    entry = (str(func.get("name") or "?"), _compact(func.get("arguments", ""), 160))
                    call_id = call.get("id")
                    if call_id:
                        calls[str(call_id)] = entry
                    unmatched.append(entry)
            elif role == "tool":
                call_id = str(message.get("tool_call_id") or "")
                entry = calls.get(call_id)
                if entry is None and unmatched:
                    entry = unmatched[0]  # Pipecat's own transcript drops call ids
                if entry in unmatched:
                    unmatched.remove(entry)
                self._add_tool_result(entry, message.get("content"), record)
        self._add_open_questions(questions, assistant_texts, record)

    def _add_user_sentence(
        self,
        sentence: str,
        index: int,
        record: _Record,
        questions: list[tuple[int, str]],
        announced: int,
        reply: str,
    ) -> int:
        """Record one user sentence.

        Returns:
            How many more user sentences may carry the content of an announced correction.
        """
        section = _classify_user(sentence)
        if section == OPEN_QUESTIONS:
            questions.append((index, sentence))
            return announced
        low = _norm(sentence)
        corrected = _is_correction(low)
        if corrected and _is_announcement(sentence):
            return 2  # the content comes next: "Actually, I need to correct that. I said..."
        if section is None:
            if corrected:
                # A correction without a kind of its own still replaces what it matches.
                section = record.apply_correction(sentence)
                if section is not None:
                    record.add(section, f"User: {self._shorten(sentence)} {CORRECTED_MARK}")
            return max(0, announced - 1)
        if corrected or announced:
            record.apply_correction(sentence)
            record.add(section, f"User: {self._shorten(sentence)} {CORRECTED_MARK}")
            return 0
        if section == FACTS and _is_echo(sentence, low, reply):
            return announced
        record.add(section, f"User: {self._shorten(sentence)}")
        return 0

    def _add_assistant_sentence(self, sentence: str, record: _Record, user_ids: set[str]) -> None:
        if sentence.rstrip().endswith(("?", "？")):
            return  # offers and clarifying questions are not commitments
        low = _norm(sentence)
        if _ASSISTANT_DECISION_RE.search(low):
            if len(_content_words(sentence) - _DECISION_WORDS) >= 2 or _is_fact(sentence, low):
                record.add(DECISIONS, f"Assistant: {self._shorten(sentence)}")
        elif any(m.group(0) not in user_ids for m in _ID_RE.finditer(sentence)):
            # An identifier the assistant introduced (an order found by lookup, say).
            record.add(FACTS, f"Assistant: {self._shorten(sentence)}")

    def _add_tool_result(
        self, entry: tuple[str, str] | None, content: Any, record: _Record
    ) -> None:
        if entry is None:
            return
        name, args = entry
        result = _content_text(content) if not isinstance(content, str) else content
        if not result or _PENDING_RESULT_RE.match(result):
            return
        if _READ_TOOL_RE.match(name) or not _ACTION_TOOL_RE.search(name):
            return
        item = f"Tool {name}({args}) -> {_compact(result, 200)}"
        record.add(DECISIONS, self._shorten(item))

    def _add_open_questions(
        self,
        questions: list[tuple[int, str]],
        assistant_texts: list[tuple[int, str]],
        record: _Record,
    ) -> None:
        # Newest first, and only the last few: older questions were most likely handled.
        open_questions: list[str] = []
        for index, sentence in reversed(questions[-4 * self.max_open_questions :]):
            if len(open_questions) >= self.max_open_questions:
                break
            words = _content_words(sentence)
            needed = max(2, (len(words) + 1) // 2)
            answered = False
            for later, reply in reversed(assistant_texts):
                if later <= index:
                    break
                if len(words & _content_words(reply)) >= needed:
                    answered = True  # a later reply that repeats most of the question
                    break
            if not answered:
                open_questions.append(f"User: {self._shorten(sentence)}")
        for item in reversed(open_questions):
            record.add(OPEN_QUESTIONS, item)
        # Older questions from earlier records were most likely answered since.
        record.trim(OPEN_QUESTIONS, self.max_open_questions)

    @staticmethod
    def _first_user_sentence(messages: Sequence[Any]) -> str | None:
        first = None
        for message in messages:
            if not isinstance(message, dict) or message.get("role") != "user":
                continue
            for sentence in _split_sentences(_content_text(message.get("content"))):
                if not _is_small_talk(sentence):
                    return f"User: {sentence}"
                first = first or f"User: {sentence}"
        return first

    # -- budget --------------------------------------------------------------------------

    def _fit(self, record: _Record, max_tokens: int) -> tuple[str, dict[str, list[str]]]:
        """Render the record within ``max_tokens``; return the text and the items kept."""
        current = {name: list(record.sections[name]) for name in SECTIONS}

        def fits(text: str) -> bool:
            return estimate_text_tokens(text) <= max_tokens

        full = fits(render_sections({}))
        render = render_sections if full else _render_compact
        count = sum(len(items) for items in current.values())
        size = _RenderedSize(current, full)
        if count > 1 and size.tokens() > max_tokens:
            # Least salient first; among equals the oldest, then by section.
            order = sorted(
                (
                    _salience(name, item),
                    record.age.get(_dedupe_key(item), 0),
                    _DROP_RANK[name],
                    name,
                    item,
                )
                for name in SECTIONS
                for item in current[name]
            )
            dropped: set[tuple[str, str]] = set()
            # Drop by arithmetic first (the estimate adds up per character), so a long
            # record is not re-rendered once per dropped item; then confirm on real text.
            victims = iter(order)
            while count > 1 and size.tokens() > max_tokens:
                *_, name, item = next(victims)
                size.remove(name, item)
                dropped.add((name, item))
                count -= 1
            while True:
                current = {
                    n: [i for i in record.sections[n] if (n, i) not in dropped] for n in SECTIONS
                }
                if count <= 1 or fits(render(current)):
                    break
                *_, name, item = next(victims)
                dropped.add((name, item))
                count -= 1
        text = render(current)
        if text and fits(text):
            return text, current
        # One item left that does not fit whole (or nothing): shorten it, keeping its head.
        name = next((n for n in SECTIONS if current[n]), None)
        if name is not None:
            item = current[name][0]
            lo, hi = 0, len(item)
            while lo < hi:
                mid = (lo + hi + 1) // 2
                current[name][0] = item[:mid].rstrip() + "…"
                if fits(render(current)):
                    lo = mid
                else:
                    hi = mid - 1
            current[name][0] = item[:lo].rstrip() + "…"
            if lo and fits(render(current)):
                return render(current), {}  # a cut sentence is not worth pinning
            if render is render_sections:
                return render_sections({}), {}  # the skeleton fits; the item cannot
            current[name][0] = item
        return _hard_truncate(render(current) or render_sections({}), max_tokens), {}

    def _pin_worthy(self, kept: Mapping[str, Sequence[str]]) -> dict[str, list[str]]:
        """The FACTS and CONSTRAINTS bullets worth pinning, within about ``pin_tokens``.

        Corrections first (an outdated pinned fact must be replaced), then by salience,
        constraints before facts, the newest first; each bullet is counted as the pinned
        block renders it (without the speaker). The chosen bullets keep the record's order.
        """
        candidates = []
        for name in (CONSTRAINTS, FACTS):
            for position, item in enumerate(kept.get(name, ())):
                score = _salience(name, item)
                if score >= _PIN_MIN_SALIENCE:
                    corrected = CORRECTED_MARK in item
                    rank = (not corrected, -score, -_DROP_RANK[name], -position)
                    candidates.append((rank, name, position, item))
        candidates.sort()
        chosen: dict[str, list[tuple[int, str]]] = {FACTS: [], CONSTRAINTS: []}
        used = 0
        for _, name, position, item in candidates:
            cost = estimate_text_tokens(f"- {_PIN_SPEAKER_RE.sub('', item)}\n")
            if used + cost > self.pin_tokens:
                continue
            used += cost
            chosen[name].append((position, item))
        return {name: [item for _, item in sorted(items)] for name, items in chosen.items()}


_PIN_MIN_SALIENCE = 4
_PIN_SPEAKER_RE = re.compile(r"^(?:user|assistant|tool)\s*:\s*", re.IGNORECASE)


class _RenderedSize:
    """The token estimate of a rendering, kept up to date as items are removed."""

    def __init__(self, sections: Mapping[str, list[str]], full: bool):
        self.full = full
        self.chars = {n: sum(len(i) + 2 for i in sections[n]) for n in SECTIONS}
        self.wide = {n: sum(_wide_count(i) for i in sections[n]) for n in SECTIONS}
        self.count = {n: len(sections[n]) for n in SECTIONS}

    def remove(self, name: str, item: str) -> None:
        self.chars[name] -= len(item) + 2
        self.wide[name] -= _wide_count(item)
        self.count[name] -= 1

    def tokens(self) -> int:
        chars = wide = lines = 0
        for name in SECTIONS:
            if self.count[name]:
                chars += len(name) + 1 + self.chars[name]
                wide += self.wide[name]
                lines += 1 + self.count[name]
            elif self.full:
                chars += len(name) + 1 + len("- none")
                lines += 2
        chars += max(0, lines - 1)  # the newlines between lines
        return wide + (chars - wide) // CHARS_PER_TOKEN


def _wide_count(text: str) -> int:
    return 0 if text.isascii() else sum(1 for ch in text if _is_wide(ch))


def _hard_truncate(text: str, max_tokens: int) -> str:
    # Last resort for absurd budgets: the longest prefix that fits (never empty, since any
    # string under 4 ASCII characters estimates to 0 tokens).
    lo, hi = 1, len(text)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if estimate_text_tokens(text[:mid]) <= max_tokens:
            lo = mid
        else:
            hi = mid - 1
    return text[:lo]


# ---------------------------------------------------------------------------------------
# Transcript parsing, for the LLMService wrapper
# ---------------------------------------------------------------------------------------

_DELIMITED_RE = re.compile(r"<(data-[0-9a-f]{8,64})>\n?(.*?)\n?</\1>", re.DOTALL)
_DELIMITED_PREVIOUS_RE = re.compile(
    r"<(data-[0-9a-f]{8,64})-previous>\n?(.*?)\n?</\1-previous>", re.DOTALL
)
_ROLES = "USER|ASSISTANT|SYSTEM|DEVELOPER|TOOL|UNKNOWN"
_OUR_CALL_RE = re.compile(
    r"^(?P<role>[A-Z]+) CALLED (?P<name>.*?) \[(?P<id>[^\]\n]*)\]: ?(?P<rest>.*)$"
)
_OUR_RESULT_RE = re.compile(r"^TOOL RESULT \[(?P<id>[^\]\n]*)\]: ?(?P<rest>.*)$")
_PIPECAT_CALL_RE = re.compile(r"^TOOL_CALL: ?(?P<rest>.*)$")
_PIPECAT_RESULT_RE = re.compile(r"^TOOL_RESULT\[(?P<id>[^\]\n]*)\]: ?(?P<rest>.*)$")
_ROLE_LINE_RE = re.compile(rf"^(?P<role>{_ROLES}): ?(?P<rest>.*)$")
_PIPECAT_HEADER_RE = re.compile(r"^\s*Conversation history:[ \t]*\n?")


def _transcript_entries(text: str, pipecat: bool) -> list[dict[str, Any]]:
    """Split a transcript into entries; lines without a known prefix continue the last one."""
    entries: list[dict[str, Any]] = []
    for line in text.split("\n"):
        entry: dict[str, Any] | None = None
        if pipecat:
            if m := _PIPECAT_CALL_RE.match(line):
                entry = {"kind": "call", "id": None, "rest": m.group("rest")}
            elif m := _PIPECAT_RESULT_RE.match(line):
                entry = {"kind": "result", "id": m.group("id"), "rest": m.group("rest")}
        else:
            if m := _OUR_CALL_RE.match(line):
                entry = {"kind": "call", "id": m.group("id"), "name": m.group("name")}
                entry["rest"] = m.group("rest")
            elif m := _OUR_RESULT_RE.match(line):
                entry = {"kind": "result", "id": m.group("id"), "rest": m.group("rest")}
        if entry is None and (m := _ROLE_LINE_RE.match(line)):
            entry = {"kind": "role", "role": m.group("role").lower(), "rest": m.group("rest")}
        if entry is not None:
            entries.append(entry)
        elif entries:
            entries[-1]["rest"] += "\n" + line
    for entry in entries:
        entry["rest"] = entry["rest"].strip()
    return entries


def transcript_to_messages(text: str, *, pipecat: bool) -> list[dict[str, Any]]:
    """Turn a summarization transcript back into OpenAI-format messages.

    Args:
        text: The transcript, without Pipecat's ``Conversation history:`` header or our
            delimiter tags.
        pipecat: ``True`` for Pipecat's format (``USER: ...``, ``TOOL_CALL: name(args)``,
            ``TOOL_RESULT[id]: ...``), ``False`` for this package's
            (``ASSISTANT CALLED name [id]: args``, ``TOOL RESULT [id]: ...``).

    Returns:
        The messages, oldest first; tool calls are attached to the assistant message they
        follow.
    """
    messages: list[dict[str, Any]] = []
    for entry in _transcript_entries(text, pipecat):
        kind, rest = entry["kind"], entry["rest"]
        if kind == "call":
            if pipecat:
                name, _, args = rest.partition("(")
                args = args[:-1] if args.endswith(")") else args
            else:
                name, args = entry["name"], rest
            call = {"id": entry["id"], "type": "function"}
            call["function"] = {"name": name.strip(), "arguments": args}
            last = messages[-1] if messages else None
            if last is None or last["role"] != "assistant":
                last = {"role": "assistant", "content": None}
                messages.append(last)
            last.setdefault("tool_calls", []).append(call)
        elif kind == "result":
            last = messages[-1] if messages else None
            # Pipecat writes a tool message twice: "TOOL: text", then "TOOL_RESULT[id]: text".
            if last and last["role"] == "tool" and last.get("tool_call_id") is None:
                last["tool_call_id"] = entry["id"]
                last["content"] = rest
            else:
                messages.append({"role": "tool", "tool_call_id": entry["id"], "content": rest})
        else:
            role = entry["role"] if entry["role"] != "unknown" else "user"
            # Pipecat writes an assistant message that only calls tools as "ASSISTANT: None".
            content = None if role == "assistant" and rest == "None" else rest
            message: dict[str, Any] = {"role": role, "content": content}
            if role == "tool":
                message["tool_call_id"] = None
            messages.append(message)
    return messages


def parse_summary_request(text: str) -> tuple[list[dict[str, Any]], str | None] | None:
    """Recover the transcript and previous record from a summarization prompt.

    Understands this package's delimited request (see
    :func:`~pipecat_summarizer.prompt.build_request`) and Pipecat's
    ``"Conversation history:\\n"`` + transcript message.

    Args:
        text: The user message of the summarization request.

    Returns:
        ``(messages, previous_summary)``, or ``None`` if ``text`` is in neither format.
    """
    previous = _DELIMITED_PREVIOUS_RE.search(text)
    transcript = _DELIMITED_RE.search(_DELIMITED_PREVIOUS_RE.sub("", text))
    if transcript:
        return (
            transcript_to_messages(transcript.group(2), pipecat=False),
            previous.group(2).strip() if previous else None,
        )
    header = _PIPECAT_HEADER_RE.match(text)
    if header:
        return transcript_to_messages(text[header.end() :], pipecat=True), None
    return None


def offline_llm_settings(model: str, system_instruction: str | None = None) -> LLMSettings:
    """Complete ``LLMSettings`` for a service that calls no provider.

    Pipecat checks at start that every settings field has a real value.
    """
    return LLMSettings(
        model=model,
        system_instruction=system_instruction,
        temperature=None,
        max_tokens=None,
        top_p=None,
        top_k=None,
        frequency_penalty=None,
        presence_penalty=None,
        seed=None,
        filter_incomplete_user_turns=False,
        user_turn_completion_config=None,
        use_provider_thinking_default=False,
    )


class ExtractiveLLMService(LLMService):
    """A Pipecat LLM service whose ``run_inference`` returns an extractive summary.

    Use it wherever Pipecat expects a summarization LLM, with no network or model::

        LLMAssistantAggregatorParams(
            enable_auto_context_summarization=True,
            auto_context_summarization_config=LLMAutoContextSummarizationConfig(
                summary_config=LLMContextSummaryConfig(llm=ExtractiveLLMService())
            ),
        )

    or as ``PipecatLLMSummarizer(ExtractiveLLMService())``. It reads Pipecat's
    ``"Conversation history:"`` transcript (treating a summary message already in it as the
    previous record) and this package's delimited request; any other context is summarized
    message by message. The system instruction is ignored. It does not generate replies in
    a pipeline.

    Args:
        summarizer: The summarizer to use; a default :class:`ExtractiveSummarizer` if
            ``None``.
        default_max_tokens: The budget when neither ``run_inference`` nor the settings'
            ``max_tokens`` give one.
        settings: Runtime-updatable settings; only ``max_tokens`` is used.
        **kwargs: Passed to ``LLMService``.
    """

    Settings = LLMSettings

    def __init__(
        self,
        *,
        summarizer: ExtractiveSummarizer | None = None,
        default_max_tokens: int = 1000,
        settings: LLMSettings | None = None,
        **kwargs: Any,
    ):
        """Initialize the service."""
        default_settings = offline_llm_settings("extractive")
        if settings is not None:
            default_settings.apply_update(settings)
        super().__init__(settings=default_settings, **kwargs)
        self.summarizer = summarizer or ExtractiveSummarizer()
        self.default_max_tokens = default_max_tokens

    def can_generate_metrics(self) -> bool:
        """Report no metrics: there is no model to measure."""
        return False

    async def run_inference(
        self,
        context: LLMContext,
        max_tokens: int | None = None,
        system_instruction: str | None = None,
        response_schema: dict[str, Any] | None = None,
    ) -> str | None:
        """Summarize the conversation carried by ``context``.

        Args:
            context: Either a single user message holding a summarization transcript
                (Pipecat's or this package's), or a conversation to summarize directly.
            max_tokens: The output budget; defaults to the settings' ``max_tokens`` or
                ``default_max_tokens``.
            system_instruction: Ignored; the extraction rules are fixed.
            response_schema: Not supported; ignored with a warning.

        Returns:
            The memory record.
        """
        self._check_response_schema(response_schema)
        budget = max_tokens or self._settings.max_tokens or self.default_max_tokens
        messages = [m for m in context.messages if not isinstance(m, LLMSpecificMessage)]
        previous: str | None = None
        users = [m for m in messages if isinstance(m, dict) and m.get("role") == "user"]
        parsed = parse_summary_request(_content_text(users[-1].get("content"))) if users else None
        if parsed is not None:
            messages, previous = parsed
        result = await self.summarizer.summarize_result_async(
            messages, previous_summary=previous, max_tokens=int(budget)
        )
        return result.text
