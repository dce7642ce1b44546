"""The timing of a voice call, for the replay in simulated real time (pure, no Pipecat).

A :class:`CallModel` describes what happens between the frames of a real call: how long the
user speaks, how long the end of their turn takes to detect, how long the bot takes to start
answering (speech-to-text, main LLM, text-to-speech), how long it then speaks, how long the
user pauses before the next turn, how often the user barges in while the bot is still
speaking, and how long the summarizer takes: a first-token delay drawn from a distribution,
plus the time to generate the summary at the model's output rate. :func:`plan_call` turns the
model and a transcript into one :class:`TurnTiming` per user turn, from a seeded random
generator, so every strategy replays the same call. Speaking times follow the words said;
when the transcript has timestamps (``"timestamp"`` on user messages), the user turns start
at those instants instead, and a turn that starts while the bot is still speaking is a
barge-in.

Defaults: 2.5 words a second (150 a minute, conversational speech), 0.5 s to detect the end
of a user turn (Pipecat's VAD ``stop_secs`` plus turn analysis), 0.8-1.6 s to the bot's
first word, answers generated at 100 tokens a second (they reach the context when complete, as
Pipecat's assistant aggregator adds them at the response's end), a 0.4-2 s pause before the
user answers, a barge-in on 20% of the bot's answers
after 20-70% of the answer was spoken, and a summarizer that starts answering after 0.5-3 s
and then writes 100 tokens a second (an assumption in the range small hosted models serve;
``--summary-tokens-per-second 0`` drops it, for the 0.5-3 s alone).

:func:`busy` makes the busy call of ``replay --compare-busy`` (and ``make demo``) from a calm
one: the same call with a summarizer writing 40 tokens a second and a barge-in on half the
bot's answers (:data:`BUSY_SUMMARY_TOKENS_PER_SECOND`, :data:`BUSY_BARGE_IN_SHARE` say why).
"""

from __future__ import annotations

import json
import math
import random
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from pipecat_summarizer_cli.replay.transcript import Step, Transcript, message_words


@dataclass(frozen=True)
class Span:
    """A uniform distribution of seconds (or of a fraction) between ``low`` and ``high``.

    Parameters:
        low: The smallest value.
        high: The largest value.
    """

    low: float
    high: float

    def __post_init__(self):
        """Validate the bounds."""
        if not (math.isfinite(self.low) and math.isfinite(self.high)):
            raise ValueError("a span's bounds must be finite numbers")
        if not 0 <= self.low <= self.high:
            raise ValueError(f"a span needs 0 <= low <= high, got {self.low}-{self.high}")

    def draw(self, rng: random.Random) -> float:
        """One value."""
        return self.low if self.low == self.high else rng.uniform(self.low, self.high)

    @classmethod
    def parse(cls, text: str) -> Span:
        """``"0.5-3"`` (or a single number) as a span.

        Raises:
            ValueError: On anything else.
        """
        parts = text.replace(" ", "").split("-")
        try:
            values = [float(p) for p in parts]
        except ValueError:
            raise ValueError(f"expected LOW-HIGH seconds, e.g. 0.5-3, got {text!r}") from None
        if len(values) == 1:
            values *= 2
        if len(values) != 2:
            raise ValueError(f"expected LOW-HIGH seconds, e.g. 0.5-3, got {text!r}")
        return cls(values[0], values[1])

    def __str__(self) -> str:
        return f"{self.low:g}-{self.high:g}"


@dataclass(frozen=True)
class CallModel:
    """How a voice call unfolds in time (see the module docstring for the defaults).

    Parameters:
        summary_latency_s: Seconds before the summarizer starts answering (queueing and
            time to first token).
        summary_tokens_per_second: Its output rate: a summary of N tokens takes N / rate
            seconds more (0: no generation time).
        response_latency_s: Seconds from the end of the user's turn (or from a tool result)
            to the bot's first word.
        answer_tokens_per_second: The main LLM's output rate: an answer streams for its
            tokens / rate seconds (at least one token) after its first, and only its end
            puts it in the context. What starts with a response (the built-in's summary
            selects its messages then) sees the context without the answer, as in a live
            call. 0: the answer arrives in one piece with its first token.
        user_pause_s: Seconds of silence after the bot's answer before the user speaks.
        end_of_turn_s: Seconds to detect that the user has finished speaking.
        words_per_second: Speaking rate of both sides.
        barge_in_share: Share of the bot's answers the user interrupts.
        barge_in_after: How far into the bot's answer the user interrupts (a fraction).
        seed: Seed of the random generator (the same call for every strategy).
    """

    summary_latency_s: Span = Span(0.5, 3.0)
    summary_tokens_per_second: float = 100.0
    response_latency_s: Span = Span(0.8, 1.6)
    answer_tokens_per_second: float = 100.0
    user_pause_s: Span = Span(0.4, 2.0)
    end_of_turn_s: float = 0.5
    words_per_second: float = 2.5
    barge_in_share: float = 0.2
    barge_in_after: Span = field(default=Span(0.2, 0.7))
    seed: int = 0

    def __post_init__(self):
        """Validate the numbers."""
        if not (math.isfinite(self.end_of_turn_s) and self.end_of_turn_s >= 0):
            raise ValueError("end_of_turn_s must be a non-negative number")
        for name in ("summary_tokens_per_second", "answer_tokens_per_second"):
            rate = getattr(self, name)
            if not (math.isfinite(rate) and rate >= 0):
                raise ValueError(f"{name} must be a non-negative number")
        if not (math.isfinite(self.words_per_second) and self.words_per_second > 0):
            raise ValueError("words_per_second must be positive")
        if not 0 <= self.barge_in_share <= 1:
            raise ValueError("barge_in_share must be between 0 and 1")
        if self.barge_in_after.high > 1:
            raise ValueError("barge_in_after is a fraction of the answer: at most 1")

    def scaled(self, factor: float) -> CallModel:
        """The same call with every duration multiplied by ``factor`` (rates divided by it):
        to run it faster, or slower, on a wall clock."""
        if not (math.isfinite(factor) and factor > 0):
            raise ValueError("the factor must be a positive number")

        def span(s: Span) -> Span:
            return Span(s.low * factor, s.high * factor)

        return replace(
            self,
            summary_latency_s=span(self.summary_latency_s),
            summary_tokens_per_second=self.summary_tokens_per_second / factor,
            response_latency_s=span(self.response_latency_s),
            answer_tokens_per_second=self.answer_tokens_per_second / factor,
            user_pause_s=span(self.user_pause_s),
            end_of_turn_s=self.end_of_turn_s * factor,
            words_per_second=self.words_per_second / factor,
        )

    def summary_latency(self) -> Callable[[int], float]:
        """A function from a summary's output tokens to its latency in seconds, drawing the
        first-token delays in request order from its own seeded generator (the n-th request
        of every strategy waits as long)."""
        rng = random.Random(f"{self.seed}:summaries")
        rate = self.summary_tokens_per_second

        def latency(output_tokens: int) -> float:
            first = self.summary_latency_s.draw(rng)
            return first + (output_tokens / rate if rate else 0.0)

        return latency


BUSY_SUMMARY_TOKENS_PER_SECOND = 40.0
"""The busy call's summarizer output rate. Within what hosted models serve: a community test on
OpenAI's forum (2025) measured gpt-4o-mini at 59 tokens/s on average, 46 at its slowest, and
gpt-4o at 32; a small model on a laptop CPU writes less. At 40 tokens/s the bundled
nutrition call's ~970-token summaries take about 25 s, close to the ~30 s a turn of that call
lasts, so the next user turn can overtake a summary."""

BUSY_BARGE_IN_SHARE = 0.5
"""The busy call's share of answers the user interrupts. An assumption, not a published figure
(no measured barge-in rate of voice agents was found to cite): a caller who cuts one long
answer in two short. The calm call's 20% is the default of :class:`CallModel`."""


def busy(model: CallModel) -> CallModel:
    """The same call made busy: the summarizer writes at :data:`BUSY_SUMMARY_TOKENS_PER_SECOND`
    (or slower, if ``model`` already is) and the user interrupts :data:`BUSY_BARGE_IN_SHARE` of
    the answers (or more); everything else, the seed included, stays ``model``'s."""
    rate = model.summary_tokens_per_second
    return replace(
        model,
        summary_tokens_per_second=(
            min(rate, BUSY_SUMMARY_TOKENS_PER_SECOND) if rate else BUSY_SUMMARY_TOKENS_PER_SECOND
        ),
        barge_in_share=max(model.barge_in_share, BUSY_BARGE_IN_SHARE),
    )


@dataclass(frozen=True)
class TurnTiming:
    """The timing of one user turn and of the bot's answer to it.

    Parameters:
        user_speech_s: Seconds the user speaks (then ``end_of_turn_s`` to detect the end).
        response_s: For each request of the turn (more than one after tool calls), seconds
            to the bot's first word.
        generation_s: For each request of the turn, seconds from the answer's first token
            to its end (empty: none).
        bot_speech_s: Seconds the bot's answer takes to speak.
        pause_s: Seconds of silence before the next user turn, when not a barge-in.
        barge_in_after: Fraction of the bot's answer spoken when the next user turn
            starts; ``None`` when the user lets the bot finish.
        starts_at_s: When the transcript has timestamps: the turn's start, in seconds
            from the first user turn.
    """

    user_speech_s: float
    response_s: tuple[float, ...]
    bot_speech_s: float
    pause_s: float
    barge_in_after: float | None = None
    starts_at_s: float | None = None
    generation_s: tuple[float, ...] = ()


def answer_tokens(step: Step) -> int:
    """About how many tokens the main LLM writes for ``step`` (its text and tool calls, at
    4 tokens for 3 words), and at least one."""
    words = len(step.text.split())
    words += sum(1 + len(json.dumps(call.arguments).split()) for call in step.tool_calls)
    return max(1, math.ceil(words * 4 / 3))


def speech_seconds(words: int, words_per_second: float) -> float:
    """Seconds to say ``words`` words."""
    return words / words_per_second


def plan_call(transcript: Transcript, model: CallModel) -> list[TurnTiming]:
    """One :class:`TurnTiming` per user turn of ``transcript``.

    Args:
        transcript: The conversation.
        model: The call's timing.

    Returns:
        The timings, the same for the same transcript and model.
    """
    rng = random.Random(f"{model.seed}:call")
    first = transcript.turns[0].started_at if transcript.turns else None
    out = []
    for turn in transcript.turns:
        user_words = message_words(turn.user_message)
        bot_words = sum(len(step.text.split()) for step in turn.steps)
        responses = tuple(model.response_latency_s.draw(rng) for _ in turn.steps)
        rate = model.answer_tokens_per_second
        generation = tuple(answer_tokens(step) / rate if rate else 0.0 for step in turn.steps)
        pause = model.user_pause_s.draw(rng)
        barge = rng.random() < model.barge_in_share
        after = model.barge_in_after.draw(rng)
        starts_at = None
        if first is not None and turn.started_at is not None:
            starts_at = turn.started_at - first
        out.append(
            TurnTiming(
                user_speech_s=speech_seconds(user_words, model.words_per_second),
                response_s=responses,
                bot_speech_s=speech_seconds(bot_words, model.words_per_second),
                pause_s=pause,
                barge_in_after=after if barge and starts_at is None else None,
                starts_at_s=starts_at,
                generation_s=generation,
            )
        )
    return out


def next_turn_start(
    timing: TurnTiming, answered_at: float, next_timing: TurnTiming | None
) -> tuple[float, bool]:
    """When the user starts the next turn, and whether they barge in.

    Args:
        timing: The turn just answered.
        answered_at: When the bot started speaking its (final) answer.
        next_timing: The next turn (``None`` after the last one).

    Returns:
        ``(start, barge_in)``: the next turn's start on the same clock, and whether the bot
        is still speaking then. With timestamps, the recorded start, but never before the bot
        has started to answer.
    """
    bot_done = answered_at + timing.bot_speech_s
    if next_timing is not None and next_timing.starts_at_s is not None:
        start = max(next_timing.starts_at_s, answered_at)
        return start, start < bot_done
    if timing.barge_in_after is not None and timing.bot_speech_s > 0:
        return answered_at + timing.barge_in_after * timing.bot_speech_s, True
    return bot_done + timing.pause_s, False


def turn_starts(timings: list[TurnTiming], model: CallModel) -> list[float]:
    """Seconds from the call's start to each user turn's start, then the call's end.

    The replay's own schedule (:func:`next_turn_start` after each answer), computed from the
    plan alone: each answer starts after the user's speech, the end-of-turn detection, every
    request's response delay and the streaming of every request but the last (the bot speaks
    from the final answer's first word).

    Args:
        timings: The plan (:func:`plan_call`).
        model: The call model it was planned with.

    Returns:
        ``len(timings) + 1`` instants: turn 1 starts at 0, the last one is the call's end.
    """
    out = [0.0]
    for i, timing in enumerate(timings):
        start = out[-1]
        answered = start + timing.user_speech_s + model.end_of_turn_s + sum(timing.response_s)
        answered += sum(timing.generation_s[:-1])
        following = timings[i + 1] if i + 1 < len(timings) else None
        out.append(next_turn_start(timing, answered, following)[0])
    return out
