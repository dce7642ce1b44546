"""The extractive summarizer's word lists and patterns, matched on folded text (lower case,
straight apostrophes; see :func:`pipecat_summarizer._text.vocabulary.fold`) unless noted.

Data only: the rules that use them are in :mod:`.classify`.
"""

from __future__ import annotations

import re

from pipecat_summarizer._compaction.transcript import SHORTENED_MARK

# The mark of a message sent shortened: not part of anything said.
SHORTENED_RE = re.compile(re.escape(SHORTENED_MARK).replace(re.escape("{omitted}"), r"\d+"))
ABBREV_RE = re.compile(
    r"(?:\b(?:mr|mrs|ms|dr|prof|sr|jr|st|no|vs|etc|approx|inc|ltd|co|ave|apt|dept|"
    r"jan|feb|mar|apr|jun|jul|aug|sep|sept|oct|nov|dec)|"
    r"\b[a-z]\.[a-z]|\b[a-z])\.$",
    re.IGNORECASE,
)

SMALL_TALK_WORDS = frozenset(
    """hi hello hey hiya thanks thank you thx ok okay sure great cool good morning afternoon
    evening night bye goodbye yes yeah yep yup no nope please alright right awesome perfect nice
    wonderful excellent fine well how are doing you i i'm im am it's its that's thats sounds
    sound so that is a the and too very much all got it gotcha see understood hmm um uh oh ah
    wow lol haha welcome appreciate appreciated really know don't dont not think mind worries
    problem bit just there hope day today your me we glad to be lovely talk speak again
    cheers""".split()
)
ENGLISH_MARKERS = frozenset(
    """the a an i you is to and my it of in for on me we that this with be are have can i'm
    i've i'll i'd it's that's there's what's don't can't won't isn't doesn't didn't they
    they're them their our your he she his her was were been not yes but or if then than
    just really very too also about all some any more most much one what when where why how
    who which would could should will does did has had get got make like good great oh well
    now here there though thanks sounds think know need want""".split()
)
# Function words of a few other languages written in Latin letters.
FOREIGN_MARKERS = frozenset(
    """ich und der die das ist nicht ein eine mit auf je et le la les est pas une des du
    el los las es soy yo que por para con muy il di che non sono ik het een niet eu não
    com um uma são""".split()
)


# ---------------------------------------------------------------------------------------
# Classification patterns (matched on lowercased text with straight apostrophes)
# ---------------------------------------------------------------------------------------

# "May" and "March" are also ordinary words, so only their capitalized forms count.
MONTHS = (
    "[Jj]anuary|[Ff]ebruary|March|[Aa]pril|May|[Jj]une|[Jj]uly|[Aa]ugust|[Ss]eptember|"
    "[Oo]ctober|[Nn]ovember|[Dd]ecember"
)
WEEKDAYS = "monday|tuesday|wednesday|thursday|friday|saturday|sunday"
NUMBER_WORDS = (
    "two|three|four|five|six|seven|eight|nine|ten|eleven|twelve|fifteen|twenty|thirty|"
    "forty|fifty|sixty|hundred|thousand|million|dozen|twice"
)
# Words that look like plurals after a number word but name nothing ("two things").
VAGUE_PLURALS = (
    "things|ones|questions|ideas|reasons|points|options|words|this|was|has|his|yes|less|"
    "always|sometimes|across|plus|perhaps|unless|does|goes|its|thus|minutes? ago"
)
UNITS = (
    "second|minute|hour|day|night|week|month|year|time|kilo|kg|gram|pound|lb|ounce|cup|"
    "serving|portion|meal|dollar|euro|mile|km|percent"
)

# An identifier: letters and digits joined by hyphens ("NC-48213", not "10-minute"), a code
# such as "P1234567" or "QX99" (not "B12"), or a long number.
ID_RE = re.compile(
    r"\b(?!\d+-[a-z]+\b)(?=[A-Za-z0-9-]*\d)(?=[A-Za-z0-9-]*[A-Za-z])[A-Za-z0-9]+"
    r"(?:-[A-Za-z0-9]+)+\b|\b(?:[A-Z]{2,6}\d{2,}|[A-Z]\d{3,})[A-Za-z0-9]*\b|\b\d{5,}\b"
)
PHONE_RE = re.compile(r"(?:\+|\b)\d[\d ().-]{6,}\d\b")
EMAIL_RE = re.compile(r"\b[\w.+-]+@[\w-]+\.[\w.]+\b")
MONEY_RE = re.compile(
    r"[$€£¥₹]\s?\d|\b\d+(?:[.,]\d+)?\s?(?:dollars?|euros?|pounds?|usd|eur|gbp|bucks)\b", re.I
)
WEIGHT_RE = re.compile(r"\b\d+(?:[.,]\d+)?\s?(?:kg|kgs|kilos?|kilograms?|lbs?|g|grams?)\b", re.I)
ENERGY_RE = re.compile(r"\b\d+(?:[.,]\d+)?\s?(?:kcal|calories|cal)\b", re.I)
TIME_RE = re.compile(
    r"\b\d{1,2}(?::\d{2})?\s?(?:am|pm|a\.m\.|p\.m\.)|\b\d{1,2}:\d{2}\b|\bnoon\b|\bmidnight\b"
    r"|\bo'clock\b",
    re.I,
)
MONTH_RE = re.compile(rf"\b(?:{MONTHS})\b")
WEEKDAY_RE = re.compile(rf"\b(?:{WEEKDAYS})\b", re.I)
# Dates that stay meaningful later ("yesterday", "next week"); "today" and "tonight" alone
# are small talk by the time the summary is read.
DATE_RE = re.compile(
    r"\b(?:tomorrow|yesterday|(?:last|next) (?:week|month|year|weekend|time|"
    rf"{WEEKDAYS})|(?:days?|weeks?|months?|years?) ago)\b"
    r"|\b\d{1,4}[/.-]\d{1,2}[/.-]\d{1,4}\b|\b\d{1,2}(?:st|nd|rd|th)\b",
    re.I,
)
# Any number (for correction topics); an amount worth keeping needs a unit after a word.
NUMBER_RE = re.compile(rf"\d|\b(?:{NUMBER_WORDS})\b", re.I)
NUMBER_PHRASE_RE = re.compile(
    rf"\b(?:{NUMBER_WORDS}|one(?! more\b)|half)\b"
    rf"(?:[\s-]+(?:and\s+)?(?:an?\s+half|one|{NUMBER_WORDS}))*"
    rf"(?:\s+[a-z]+)?\s+(?:(?!(?:{VAGUE_PLURALS})\b)[a-z]{{2,}}s|(?:{UNITS}))\b"
)
DIGIT_RE = re.compile(r"\d")
# The user's own name; other capitalized words count as names of lesser weight.
NAME_RE = re.compile(
    r"(?i:\bmy name(?:'s| is)\b|\bcall me\b)|\b(?:I'm|I am|[Tt]his is|[Ii]t's) "
    rf"(?!(?:{MONTHS}|{WEEKDAYS.title()})\b)[A-Z][a-z]+"
)
# Capitalized words that name no one.
PROPER_SKIP = frozenset(
    """I I'm I'll I've I'd OK Okay Ok Mom Mum Dad God Hi Hello Hey Yes No Thanks Sir Madam Oh
    Ha Wow User Assistant Tool""".split()
)
CALENDAR_WORDS = frozenset(
    """january february march april may june july august september october november december
    monday tuesday wednesday thursday friday saturday sunday""".split()
)
SELF_FACT_RE = re.compile(
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
FOODS = (
    "meat|red meat|pork|beef|chicken|lamb|fish|seafood|shellfish|shrimp|nuts|peanuts?|"
    "tree nuts|dairy|milk|cheese|eggs?|gluten|wheat|lactose|soy|sesame|sugar|salt|sodium|"
    "alcohol|caffeine|coffee|spicy food|gelatin|onions?|garlic|cilantro|mushrooms?|carbs"
)
DIET_RE = re.compile(
    r"\b(?:allerg\w*|intoleran\w*|vegetarian\w*|vegan\w*|pescatarian\w*|halal|kosher|"
    r"celiac|coeliac|diabet\w*|pregnan\w*|breastfeeding|epi-?pens?|anaphyla\w*|"
    r"cross[- ]contaminat\w*)"
    rf"|\b(?:(?:{FOODS})[- ]free|no (?:{FOODS}))\b"
)
FOOD_RE = re.compile(rf"\b(?:{FOODS})\b")
# Drug names by their endings: atorvastatin, lisinopril, metoprolol, losartan, omeprazole...
MEDICAL_RE = re.compile(
    r"(?:statins?|\w\w\wpril|olol|sartan|prazole|oxetine)\b"
    r"|\b(?:medications?|medicines?|meds|prescri\w*|pills?|insulin|inhalers?|"
    r"metformin|warfarin|aspirin|ibuprofen|"
    r"paracetamol|acetaminophen|antibiotics?|antidepressants?|blood thinners?|blood pressure|"
    r"(?:levo)?thyroxine|prednisone|chemo\w*|dialysis|pacemaker|asthma|epilep\w*|hypertension|"
    r"heart condition|kidney disease|wheelchair|hearing aids?|gout|crohn's|colitis)\b"
)
LIMIT_VALUE = rf"(?:\W+\w+){{0,3}}?\W+(?:[$€£¥₹]\s?\d|\d|(?:{NUMBER_WORDS})\b|noon|midnight)"
LIMIT_RE = re.compile(
    r"\b(?:budget|no more than|not more than|at most|at least|under|below|less than|"
    r"fewer than|max(?:imum)?|min(?:imum)?|limit(?:ed)?|up to|no later than|deadline|only|"
    rf"afford)\b{LIMIT_VALUE}"
)
# "before 9", "by 7:15" are limits only for someone who has to, or is free or busy.
TIME_LIMIT_RE = re.compile(rf"\b(?:within|before|after|by|until|till|between)\b{LIMIT_VALUE}")
AVAILABILITY_RE = re.compile(
    r"\b(?:have to|has to|need to|needs to|must|can't|cannot|can only|free|available|busy|"
    r"unavailable|at work|working|latest|earliest|due)\b"
)
RULE_RE = re.compile(
    r"(?:^|\bplease\s+|\bso\s+|,\s*|\band\s+)(?:please\s+)?(?:don't|do not|never|always|stop|"
    r"avoid)\s+(?:ever\s+|again\s+|even\s+)?(?:\w+\s+)?(?:suggest|recommend|call|ring|phone|"
    r"text|e-?mail|message|contact|mention|bring up|give|send|book|schedule|use|include|add|"
    r"offer|remind|put|order|charge|share|talk|say|tell|ask|transfer|sell|sign|subscribe|"
    r"spam|leave|speak)\w*\b"
    r"|\bi (?:don't|do not) want you to\b|\bi'd (?:rather|prefer) you (?:didn't|don't|not)\b"
    r"|\bplease (?:only|always|never|don't|do not)\b|\bmake sure (?:you|to) (?:don't|never|"
    r"always|only|avoid)\b|\bno (?:calls|emails|texts|messages)\b"
)
PREFERENCE_RE = re.compile(
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
HEDGE_RE = re.compile(
    r"\b(?:maybe|perhaps|might|i guess|not sure|i wonder|probably|i suppose|i think|"
    r"kind of|sort of)\b"
)
USER_DECISION_RE = re.compile(
    r"\blet's\b(?!\s+(?:see|think|talk|chat|start|begin|say|plan|do|move|switch|focus|look|"
    r"discuss|go over|go back|continue|turn|get back))|\blet us\b|"
    r"\bi'll (?:take|go with|have|book|do|get|order|choose|pick|try|pay|stick with)\b|"
    r"\bi'd like to (?:go with|book|order|take|schedule|reserve|confirm|cancel|buy)\b|"
    r"\bi (?:will|want to) (?:take|go with|book|order|choose|cancel)\b|\bgo with\b|"
    r"\bi(?:'ve| have) decided\b|\bi choose\b|\bbook it\b|"
    r"\bplease (?:book|schedule|reserve|order|cancel|confirm|log|add)\b"
)
# Words that only say "a decision was made"; a decision needs something besides them.
DECISION_WORDS = frozenset(
    """take go have book booked do get order choose pick try pay stick let let's okay yes sure
    yeah say plan talk move some up it time week thing stuff way now then actual log logged
    done confirmed noted added saved set updated all everything that's fine good great""".split()
)
ASSISTANT_DECISION_RE = re.compile(
    r"\b(?:booked|scheduled|rescheduled|confirmed|reserved|logged|reference|confirmation|"
    r"credit|credited|refund|refunded|ordered|placed|cancel(?:l)?ed|"
    r"i(?:'ve| have) (?:added|set|sent|updated|created|noted|saved|applied|changed|recorded|"
    r"submitted|registered|arranged)|will be (?:delivered|sent|charged|shipped|credited|"
    r"refunded|applied))\b"
)
# A correction: "actually" only where it opens the sentence ("Oh no, actually ..."), not
# as an intensifier ("it's actually safe").
CORRECTION_RE = re.compile(
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
ANNOUNCEMENT_WORDS = frozenset(
    "need needs want let quick small little thing something one bit fix update correcting "
    "wrong earlier before told said made mistake oh no hold on sorry that this there".split()
)
READ_TOOL_RE = re.compile(
    r"^(?:get|lookup|look_up|search|find|check|list|fetch|query|read|show|retrieve|describe|"
    r"is|has|can|verify|validate|estimate|calculate|compute)(?:_|$|[A-Z])"
)
ACTION_TOOL_RE = re.compile(
    r"book|reserv|schedul|confirm|order|purchas|buy|pay|cancel|refund|credit|log|record|"
    r"create|add|update|set|save|submit|register|transfer|appoint|assign|change|modify|send|"
    r"place|issue|apply|escalat|ticket",
    re.IGNORECASE,
)
PENDING_RESULT_RE = re.compile(r"^\s*\"?(?:in_progress|in progress|started)\"?\s*$", re.I)

# Two capitalized words in a row after the first word: a full name or a street.
FULL_NAME_RE = re.compile(r"(?<=\S)\s+(?!(?:I|I'm|I'll|I've|I'd)\b)[A-Z][a-z]+\s+[A-Z][a-z]+")

# Something the user did, does, plans or likes, told in a sentence of some substance.
SELF_STATEMENT_RE = re.compile(
    r"\b(?:i|we)(?:'ve| have|'m| am|'d| was| were)?\s+(?:(?:just|really|finally|recently|"
    r"also|always|usually|still|actually|often|sometimes|never)\s+)*(?:went|go|visited|"
    r"started|joined|signed up|finished|bought|got|adopted|moved|traveled|travelled|ran|run|"
    r"painted|paint|wrote|write|read|watched|played|play|met|took|learned|learning|"
    r"volunteer\w*|graduated|lost|won|attended|celebrated|decided|planning|plan|going to|"
    r"gonna|love|loved|like|enjoy\w*|into|keen on|collect\w*|practic\w*|study\w*|studied|"
    r"work|working|worked|eat|eating|drink|cook\w*|grew up|raised|teach\w*|taught|"
    r"been)\b"
)
THIN_WORDS = frozenset(
    """never though really lot much way thing things stuff kind sort always usually still
    even sure pretty quite bit something anything everything time""".split()
)
LIKE_THAT_RE = re.compile(r"\bi (?:really )?(?:like|love) (?:that|it|this|the idea)\b")

# Cheap substring checks that rule out most sentences before the slower patterns run.
CORRECTION_KEYS = (
    "actually", "correct", "meant", "mean,", "sorry", "wrong", "mistake", ", not", "make ",
    "change", "scratch", "instead", "misspoke",
)  # fmt: skip
RULE_KEYS = (
    "don't", "do not", "never", "always", "stop", "avoid", "you", "please", "no ", "make sure",
)  # fmt: skip


# A reaction that only repeats the assistant: "Six servings is great."
REACTION_WORDS = frozenset(
    """good great fine nice bad sound sounds perfect genius make makes sense noted love
    amazing isn't is it that okay ok yes yeah right cool awesome lovely clever idea wonderful
    excellent interesting helpful doable handle can do then""".split()
)
REACTION_RE = re.compile(
    r"\b(?:good|great|fine|nice|bad|sounds?|perfect|genius|makes sense|noted|love|amazing|"
    r"cool|awesome|lovely|clever|wonderful|excellent|interesting|helpful|doable|i can handle|"
    r"i can do|it is)\b"
)
