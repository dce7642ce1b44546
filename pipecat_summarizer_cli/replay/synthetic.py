"""The article's scenario as a transcript: a nutrition-coaching call of N exchanges.

Shape (token figures are the harness's estimate, ``EstimateTokenCounter``):

* a fixed prefix of exactly 3,000 tokens (the system prompt: coaching guidelines);
* N exchanges of exactly 480 tokens each (a 120-token user message and a 360-token
  assistant reply, per-message overhead included);
* message 2 (the first user message) says "I'm vegetarian, and I'm allergic to peanuts."

The article bills the request at turn N as ``3,000 + 480 N``. In a replay, the request of
turn N carries the prefix, the N-1 earlier exchanges and the new user message, so it is
``3,000 + 480 (N - 1) + 120``; over 200 turns that is 10,176,000 tokens against the
article's 10,248,000 (-0.70%).
"""

from __future__ import annotations

import random

# Pipecat's estimate, which the package's agrees with on plain ASCII chat
from pipecat.utils.context.llm_context_summarization import (
    CHARS_PER_TOKEN,
    TOKEN_OVERHEAD_PER_MESSAGE,
)

from pipecat_summarizer_cli.replay.transcript import Transcript, transcript_from_messages

PREFIX_TOKENS = 3000
EXCHANGE_TOKENS = 480
USER_TOKENS = 120
ASSISTANT_TOKENS = EXCHANGE_TOKENS - USER_TOKENS
ALLERGY = "I'm vegetarian, and I'm allergic to peanuts."
PROBES = ("vegetarian", "allergic to peanuts")

HYBRID_THRESHOLDS = {
    "max_context_tokens": 15000,
    "max_unsummarized_messages": 40,
    "keep": 20,
    "target_tokens": 700,
}
"""The article's hybrid, the ``--synthetic`` default: compact when 20 exchanges (40
messages) have accumulated, keep the last 10 (20 messages) verbatim, a ~700-token summary.
``max_context_tokens`` is the article's budget for the whole request, the 3,000-token prefix
plus 12,000 for history; a request at 20 exchanges carries about 13,700, so the message
threshold decides when to compact, as in the article. (With 12,000 for the whole request
the token threshold trips at about 17 exchanges instead: 20 compactions in 200 turns
rather than 18.)"""

_GUIDELINES = [
    "Greet the client by name when they share it and keep a warm, practical tone.",
    "Ask about dietary restrictions, allergies and intolerances before suggesting any food.",
    "Never recommend a food that conflicts with a stated restriction or allergy.",
    "Prefer whole foods, simple recipes and ingredients found in an ordinary supermarket.",
    "Give protein targets in grams per day and explain how a meal contributes to them.",
    "When the client reports a meal, estimate its protein, fibre and energy roughly.",
    "Keep each answer short enough to be spoken aloud in under a minute.",
    "Suggest one concrete next step at the end of each answer.",
    "If the client mentions a medical condition, recommend they confirm changes with a doctor.",
    "Do not shame the client about any food choice; focus on the next meal.",
    "Track the weekly plan the client agreed to and refer back to it when useful.",
    "Offer meat-free and plant-based swaps when the client asks for alternatives.",
]

_MEALS = [
    "a lentil soup with rye bread",
    "a chickpea and spinach curry with rice",
    "oatmeal with berries and yoghurt",
    "a tofu stir-fry with broccoli",
    "a black bean burrito bowl",
    "scrambled eggs on toast with tomatoes",
    "a quinoa salad with feta and cucumber",
    "a tempeh sandwich with avocado",
    "a pasta with tomato sauce and white beans",
    "Greek yoghurt with oats and an apple",
    "a halloumi and roasted vegetable wrap",
    "a vegetable omelette with a side salad",
]

_QUESTIONS = [
    "How can I get more protein into my lunches this week?",
    "Is that enough fibre for the day, or should I add something?",
    "What could I prepare on Sunday to save time on weekdays?",
    "Could you suggest a snack for the afternoon slump?",
    "How should I adjust dinner on days I go running?",
    "What is a quick breakfast that keeps me full until noon?",
    "Which of these meals should I repeat next week?",
    "Is it fine to eat the same lunch three days in a row?",
]

_ADVICE = [
    "That meal gives you roughly {p} grams of protein, a solid share of your daily target.",
    "Lentils, chickpeas and beans are cheap, filling and rich in both protein and fibre.",
    "Adding a spoon of seeds or a portion of Greek yoghurt raises the protein without much effort.",
    "Batch-cooking grains and a tray of roasted vegetables on Sunday covers three lunches.",
    "Tofu and tempeh take on any marinade, so one block can become two quite different dinners.",
    "For the afternoon, a piece of fruit with cottage cheese or a boiled egg keeps energy steady.",
    "On running days, add a portion of rice or potatoes at dinner to refill your glycogen.",
    "Eggs and dairy are fine for you, and they make breakfasts quick and filling.",
    "Keep an eye on sauces and dressings: they add energy quickly but little protein.",
    "Repeating a lunch you enjoy is perfectly fine if the week as a whole stays varied.",
    "Sunflower seed butter is a safe swap wherever a recipe calls for a nut butter.",
    "Frozen vegetables are as nutritious as fresh ones and save a lot of chopping.",
    "A glass of milk or a soy drink with dinner adds about eight grams of protein.",
    "Edamame makes a quick side dish and freezes well, so keep a bag in the freezer.",
    "Aim for a palm-sized portion of protein at each of your three main meals.",
    "Wholegrain bread and brown rice keep you full longer than their white versions.",
    "If you snack late, choose something small with protein rather than something sweet.",
    "Drinking a glass of water before each meal helps you notice when you are full.",
    "Hummus with carrot sticks is a good snack and it fits your restrictions.",
    "A handful of pumpkin seeds adds iron and zinc, which a meat-free diet can lack.",
    "Check labels on granola bars and sauces for allergens and for traces of them.",
    "Plan your shopping list around the three lunches we agreed on for this week.",
]

_FILLERS = ["Sure.", "Noted.", "Okay.", "Got it.", "Right.", "Good.", "Yes."]


def chars_for(tokens: int) -> int:
    """Characters of plain ASCII content that estimate to ``tokens`` for one message."""
    return (tokens - TOKEN_OVERHEAD_PER_MESSAGE) * CHARS_PER_TOKEN


def fill_to(first: str, pool: list[str], length: int, rng: random.Random) -> str:
    """Join ``first`` and sentences from ``pool`` into text of exactly ``length`` characters.

    Sentences are drawn at random while one fits, then short fillers close the gap, and
    the last few characters are padded with spaces after the first sentence.
    """
    text = first
    while True:
        fitting = [s for s in pool if len(text) + 1 + len(s) <= length and s not in text]
        if not fitting:
            break
        sentence = rng.choice(fitting)
        text = f"{text} {sentence}" if text else sentence
    for filler in sorted(_FILLERS, key=len, reverse=True):
        if len(text) + 1 + len(filler) <= length:
            text = f"{text} {filler}"
    if len(text) > length:
        text = text[: length - 1].rstrip() + "."
    gap = length - len(text)
    if gap and ". " in text:
        # Pad inside the text: Pipecat strips the ends of an assistant aggregation.
        text = text.replace(". ", ". " + " " * gap, 1)
    return text.ljust(length)


def system_prompt(tokens: int = PREFIX_TOKENS) -> str:
    """A coaching system prompt of exactly ``tokens`` (as one message)."""
    length = chars_for(tokens)
    parts = ["You are Sage, a nutrition coach on a voice call. Follow these guidelines."]
    n = 0
    while True:
        line = f"{n + 1}. {_GUIDELINES[n % len(_GUIDELINES)]}"
        if len("\n".join(parts)) + 1 + len(line) > length:
            break
        parts.append(line)
        n += 1
    return "\n".join(parts).ljust(length)


def synthetic_messages(
    exchanges: int = 200,
    *,
    prefix_tokens: int = PREFIX_TOKENS,
    user_tokens: int = USER_TOKENS,
    assistant_tokens: int = ASSISTANT_TOKENS,
    seed: int = 7,
) -> list[dict]:
    """The scenario's messages: the system prompt, then ``exchanges`` user/assistant pairs."""
    if exchanges < 1:
        raise ValueError("exchanges must be at least 1")
    rng = random.Random(seed)
    messages = [{"role": "system", "content": system_prompt(prefix_tokens)}]
    for k in range(1, exchanges + 1):
        meal = rng.choice(_MEALS)
        if k == 1:
            first = f"Hi Sage. {ALLERGY} I want to eat better this month."
        else:
            first = f"Day {k}: for lunch I had {meal}. {rng.choice(_QUESTIONS)}"
        user = fill_to(first, _QUESTIONS, chars_for(user_tokens), rng)
        protein = rng.randint(12, 38)
        advice = [a.format(p=protein) for a in _ADVICE]
        opener = (
            "Thanks, I have noted that you are vegetarian and allergic to peanuts."
            if k == 1
            else f"Good choice on day {k}. " + advice[0]
        )
        assistant = fill_to(opener, advice, chars_for(assistant_tokens), rng)
        messages.append({"role": "user", "content": user})
        messages.append({"role": "assistant", "content": assistant})
    return messages


def synthetic_transcript(exchanges: int = 200, **kwargs) -> Transcript:
    """The scenario as a :class:`Transcript` named ``synthetic_<N>``."""
    return transcript_from_messages(
        synthetic_messages(exchanges, **kwargs), name=f"synthetic_{exchanges}"
    )


def article_full_buffer_tokens(
    exchanges: int, prefix: int = PREFIX_TOKENS, per_exchange: int = EXCHANGE_TOKENS
) -> int:
    """The article's total: ``sum(prefix + per_exchange * N for N in 1..exchanges)``."""
    return sum(prefix + per_exchange * n for n in range(1, exchanges + 1))


def replay_full_buffer_tokens(
    exchanges: int,
    prefix: int = PREFIX_TOKENS,
    per_exchange: int = EXCHANGE_TOKENS,
    user: int = USER_TOKENS,
) -> int:
    """What a replay sends: at turn N, the prefix, N-1 exchanges and the new user message."""
    return sum(prefix + per_exchange * (n - 1) + user for n in range(1, exchanges + 1))
