"""Synthetic voice-agent calls for the recall benchmarks: what a caller with years of calls
has in the archive, and what they ask.

Five desks (travel, clinic, insurance claim, bank dispute, tutoring, plus the internet support
desk) with templated caller and agent lines whose slots draw on names, places, dates, numbers
and items; the usual voice-call chatter ("Yeah, okay.", "Can you hold on a second?") between
them, and the bundled support and nutrition calls' lines mixed in. So the words have a voice
call's spread: a few very common ("okay", "booking", "appointment"), most rare (a claim
number, a street name). Deterministic for a seed.

The questions are a returning caller's ("What was the hotel in Lisbon you booked for me?"),
drawn from the same slots, so most share a rare word and a common one with some message.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
_DATA = ROOT / "pipecat_summarizer_cli" / "replay" / "data"

FIRST = (
    "Ines Maria Daniel Sofia Tomas Ana Pedro Lucia Marco Elena Omar Priya Chen Yuki Amara "
    "Kofi Lars Freya Mateo Valentina Noah Leila Hugo Clara Felix Nadia Ravi Zara Oscar Mila "
    "Jonas Alma Iris Bruno Carmen Diego Eva Farid Greta Hana"
).split()
LAST = (
    "Silva Okafor Novak Costa Moreau Tanaka Rossi Schmidt Haddad Kowalski Lindqvist Mendes "
    "Ferreira Dubois Nakamura Petrov Ibrahim Jensen Alvarez Varga"
).split()
CITIES = (
    "Lisbon Porto Madrid Seville Paris Lyon Berlin Munich Rome Milan Vienna Prague Krakow "
    "Budapest Athens Dublin Edinburgh Amsterdam Brussels Copenhagen Oslo Stockholm Helsinki "
    "Tokyo Osaka Seoul Toronto Boston Chicago Denver Austin Seattle Lima Bogota Nairobi Cairo"
).split()
HOTELS = (
    "Riverside Grand Harbour Palace Old Town Inn Central Suites Garden Lodge Bayview Plaza "
    "Hillside Manor Marina Bay Tower Royal Park"
).split("  ") + ["the Alcazar", "Casa Azul", "the Linden", "Hotel Mar", "the Belvedere"]
STREETS = (
    "Rua Augusta|Oak Lane|Maple Street|Harbour Road|Station Road|Elm Avenue|Calle Mayor|"
    "Kings Road|Mill Lane|Church Street|Park Avenue|Bridge Street|Queens Walk|Rosal Street"
).split("|")
DOCTORS = [f"Dr. {x}" for x in LAST]
SPECIALTIES = (
    "dermatology cardiology physiotherapy dentistry pediatrics orthopedics allergy "
    "ophthalmology nutrition neurology"
).split()
DRUGS = (
    "ibuprofen amoxicillin metformin lisinopril cetirizine omeprazole salbutamol "
    "sertraline levothyroxine atorvastatin"
).split()
ITEMS = (
    "laptop fridge washing machine phone sofa bicycle camera television dishwasher boiler "
    "roof window car bumper windscreen suitcase watch guitar piano"
).split()
SUBJECTS = (
    "algebra geometry calculus chemistry physics biology French Spanish essay history "
    "statistics programming"
).split()
SCHOOLS = (
    "Colegio Rosal|St Mary's|Northfield Academy|Lakeside High|Escola Verde|Riverside Primary|"
    "the International School"
).split("|")
MERCHANTS = (
    "Amazon|a petrol station|Netflix|a hotel in Rome|an airline|a pharmacy|a supermarket|"
    "an electronics shop|a restaurant|a taxi company|a gym"
).split("|")
MONTHS = (
    "January February March April May June July August September October November December"
).split()
DAYS = "Monday Tuesday Wednesday Thursday Friday Saturday Sunday".split()
RELATIVES = "daughter son wife husband mother father sister brother partner".split()
ALLERGIES = "peanuts shellfish penicillin gluten lactose pollen latex eggs".split()

CHATTER = (
    "Yeah, okay.|Okay, thanks.|Sure.|Hmm, let me think.|Can you hold on a second?|Sorry, "
    "can you repeat that?|Yes, that's right.|No, that's not it.|Perfect, thank you so much.|"
    "Hello? Can you hear me?|Sorry, the line is bad.|Great, that works for me.|Alright.|"
    "Thanks, that's all for today.|Just a moment, I'm checking.|Okay, go ahead.|One more thing.|"
    "I see, thank you.|Let me write that down.|Could you spell that for me?"
).split("|")
AGENT_CHATTER = (
    "Of course, take your time.|Thank you for your patience.|I'm still here.|Let me check "
    "that for you.|Is there anything else I can help you with today?|You're welcome, have a "
    "good day.|I understand, let me look into it.|Thanks for confirming.|Could you confirm "
    "your date of birth please?|I'm pulling up your account now."
).split("|")


def _slots(rng: random.Random) -> dict[str, str]:
    return {
        "name": f"{rng.choice(FIRST)} {rng.choice(LAST)}",
        "first": rng.choice(FIRST),
        "city": rng.choice(CITIES),
        "city2": rng.choice(CITIES),
        "hotel": rng.choice(HOTELS),
        "street": f"{rng.randint(1, 240)} {rng.choice(STREETS)}",
        "doctor": rng.choice(DOCTORS),
        "spec": rng.choice(SPECIALTIES),
        "drug": rng.choice(DRUGS),
        "mg": str(rng.choice((5, 10, 20, 50, 100, 250, 500))),
        "item": rng.choice(ITEMS),
        "subject": rng.choice(SUBJECTS),
        "school": rng.choice(SCHOOLS),
        "merchant": rng.choice(MERCHANTS),
        "month": rng.choice(MONTHS),
        "day": rng.choice(DAYS),
        "date": f"{rng.randint(1, 28)} {rng.choice(MONTHS)}",
        "time": f"{rng.randint(7, 18)}:{rng.choice(('00', '15', '30', '45'))}",
        "rel": rng.choice(RELATIVES),
        "allergy": rng.choice(ALLERGIES),
        "num": f"{rng.choice('ABCDEFGHKLMNPRSTW')}{rng.randint(100, 999)}-{rng.randint(1, 9999)}",
        "amount": f"{rng.randint(12, 2400)} euros",
        "nights": str(rng.randint(1, 14)),
        "flight": f"{rng.choice(('TP', 'IB', 'LH', 'AF', 'KL', 'BA'))}{rng.randint(100, 2999)}",
    }


# (caller line, agent reply) per desk; {slot}s filled per exchange
DESKS: dict[str, list[tuple[str, str]]] = {
    "travel": [
        (
            "I'd like to book a hotel in {city} for {nights} nights from {date}.",
            "I can offer {hotel} in {city}, {nights} nights from {date}, breakfast included.",
        ),
        (
            "Can you change my flight to {city2}? It's {flight} on {day}.",
            "Flight {flight} to {city2} is moved to {day} at {time}; no change fee.",
        ),
        (
            "My booking reference is {num}, I need a taxi from the airport in {city}.",
            "A taxi will meet you at {city} airport at {time}, booking {num}.",
        ),
        (
            "I'm travelling with my {rel} {first}, we need two rooms next to each other.",
            "Two adjoining rooms at {hotel} for you and {first}, noted.",
        ),
        (
            "Is there a train from {city} to {city2} on {day} morning?",
            "There's a train at {time} from {city} arriving in {city2} before noon.",
        ),
        (
            "Please cancel the {hotel} booking, the trip to {city} is off.",
            "The booking at {hotel} is cancelled; the refund of {amount} takes five days.",
        ),
    ],
    "clinic": [
        (
            "I need an appointment with {doctor}, preferably {day} afternoon.",
            "{doctor} can see you on {day} {date} at {time} in {spec}.",
        ),
        (
            "I'm allergic to {allergy}, is that in my file?",
            "Yes, the {allergy} allergy is on your file now.",
        ),
        (
            "The pharmacy says my {drug} prescription ran out, {mg} milligrams.",
            "I've renewed {drug} {mg} mg for three months, send it to your pharmacy.",
        ),
        (
            "My {rel} {first} has a fever since {day}, can {doctor} call us back?",
            "{doctor} will call you back about {first} today before {time}.",
        ),
        (
            "Can you move my {spec} check-up? I can't make it on {date}.",
            "Your {spec} check-up moves from {date} to {day} at {time}.",
        ),
    ],
    "insurance": [
        (
            "I want to open a claim, my {item} was damaged in a storm on {date}.",
            "Claim {num} is open for the {item}; an assessor visits {day}.",
        ),
        (
            "The assessor for claim {num} never showed up on {day}.",
            "Sorry about that, the assessor is rebooked for {date} at {time}.",
        ),
        (
            "The repair quote for the {item} is {amount}, is that covered?",
            "Your policy covers up to {amount} for the {item}, minus the excess.",
        ),
        (
            "I moved to {street} in {city}, please update my policy address.",
            "Your policy address is now {street}, {city}.",
        ),
    ],
    "bank": [
        (
            "There's a payment of {amount} to {merchant} on {date} that I didn't make.",
            "I've opened dispute {num} for {amount} to {merchant} and blocked the card.",
        ),
        (
            "When will the new card arrive at {street}?",
            "The new card ships to {street} and should arrive by {day}.",
        ),
        (
            "What happened with dispute {num}? It's been two weeks.",
            "Dispute {num} is approved; {amount} is credited back on {date}.",
        ),
        (
            "I need to raise my transfer limit, I'm paying a deposit in {city}.",
            "Your transfer limit is raised for the deposit in {city} until {date}.",
        ),
    ],
    "tutoring": [
        (
            "My {rel} {first} starts at {school} in {month} and needs help with {subject}.",
            "We can give {first} two {subject} lessons a week before {school} starts.",
        ),
        (
            "Can we move {first}'s {subject} lesson to {day} at {time}?",
            "{first}'s {subject} lesson is now on {day} at {time}.",
        ),
        (
            "{first} has a {subject} exam on {date}, can the tutor focus on that?",
            "The tutor will prepare {first} for the {subject} exam on {date}.",
        ),
    ],
    "support": [
        (
            "My internet has been down since {day} night and I work from home.",
            "I see an outage near {street}; a technician can come {date} at {time}.",
        ),
        (
            "The router light is red again, ticket {num} was supposed to fix that.",
            "I've reopened ticket {num} and a new router ships to {street}.",
        ),
        (
            "I was charged {amount} twice on my last bill.",
            "You're right, {amount} is refunded and shows on the {month} bill.",
        ),
    ],
}

# what a returning caller asks, by desk
QUESTIONS: dict[str, list[str]] = {
    "travel": [
        "What was the hotel in {city} you booked for me?",
        "Sorry, remind me: which flight to {city2} am I on?",
        "When does my train to {city2} leave?",
        "How many nights did I book in {city}?",
    ],
    "clinic": [
        "When is my appointment with {doctor} again?",
        "What dose of {drug} was renewed?",
        "Did you note my {allergy} allergy?",
        "When is my {spec} check-up now?",
    ],
    "insurance": [
        "What's the status of my {item} claim?",
        "When is the assessor coming for claim {num}?",
        "Is the {item} repair covered?",
    ],
    "bank": [
        "What happened with the {merchant} payment I disputed?",
        "When does my new card arrive?",
        "Was the {amount} refunded?",
    ],
    "tutoring": [
        "When is {first}'s {subject} lesson?",
        "Which school is {first} going to?",
        "When is the {subject} exam?",
    ],
    "support": [
        "When is the technician coming?",
        "What was my ticket number for the router?",
        "Did you refund the double charge?",
    ],
}


def bundled_lines() -> list[str]:
    """The bundled support and nutrition calls' user and assistant lines."""
    out = []
    for name in ("support_call.jsonl", "nutrition_call.jsonl"):
        path = _DATA / name
        if not path.exists():
            continue
        for line in path.read_text().splitlines():
            m = json.loads(line)
            if m.get("role") in ("user", "assistant") and isinstance(m.get("content"), str):
                out.append(m["content"])
    return out


def call_lines(rng: random.Random, n: int, bundled: list[str]) -> list[str]:
    """``n`` alternating caller/agent lines of one call: one desk, exchanges about it, and
    chatter between them."""
    desk = rng.choice(list(DESKS))
    out: list[str] = []
    while len(out) < n:
        r = rng.random()
        if r < 0.25:
            out += [rng.choice(CHATTER), rng.choice(AGENT_CHATTER)]
        elif r < 0.30 and bundled:
            i = rng.randrange(len(bundled) - 1)
            out += [bundled[i], bundled[i + 1]]
        else:
            ask, answer = rng.choice(DESKS[desk])
            slots = _slots(rng)
            out += [ask.format(**slots), answer.format(**slots)]
    return out[:n]


def lines(n: int, seed: int, per_call: int = 60) -> list[str]:
    """``n`` lines of consecutive calls of ``per_call`` lines each."""
    rng = random.Random(seed)
    bundled = bundled_lines()
    out: list[str] = []
    while len(out) < n:
        out += call_lines(rng, min(per_call, n - len(out)), bundled)
    return out


def questions(n: int, seed: int) -> list[str]:
    """``n`` returning caller's questions."""
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        desk = rng.choice(list(QUESTIONS))
        out.append(rng.choice(QUESTIONS[desk]).format(**_slots(rng)))
    return out
