"""A benchmark's questions spoken, as a speech-to-text service delivers them, for a pipeline
with ``RecallPrefetch`` before its user aggregator (Pipecat's external turn strategies: the
STT's frames end the turn).

As the ``questions`` replay's spoken questions (``pipecat_summarizer_cli.replay.call_driver``'s
``Speech``): the turn starts, an interim transcription of all but the last word arrives,
``word_s`` later an interim of every word, ``lead_s`` later the final transcription and,
once the user aggregator holds it, the turn's end (Pipecat's default turn detection ends a
turn on the finalized transcription; an STT's final result comes ~0.2-0.4 s after the
words). The seconds the caller takes to say the words are not replayed. With ``raw``, the
interims read as many STTs deliver them (lower case, no punctuation) and only the final is
formatted: the early work redone on the final's words, at the turn's end.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterator

from pipecat.frames.frames import (
    Frame,
    InterimTranscriptionFrame,
    TranscriptionFrame,
    UserStartedSpeakingFrame,
    UserStoppedSpeakingFrame,
)
from pipecat.tests.utils import SleepFrame

#: The caller's user id on the transcriptions.
CALLER = "caller"


def _stamp() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime())


def unformatted(text: str) -> str:
    """``text`` as an STT's raw interim reads it: lower case, no punctuation."""
    return " ".join(re.sub(r"[^\w\s']", " ", text).lower().split())


def spoken_turn(
    text: str,
    held: Callable[[], bool],
    *,
    word_s: float = 0.1,
    lead_s: float = 0.2,
    raw: bool = False,
) -> Iterator[Frame]:
    """One spoken question's frames for ``run_test``; ``held()`` says whether the user
    aggregator holds the final words yet (the turn's end waits for it: a stop frame, a
    system frame, queued at once would overtake the transcription)."""
    interim = unformatted(text) if raw else text
    words = interim.split()
    yield UserStartedSpeakingFrame()
    if len(words) > 1:
        yield InterimTranscriptionFrame(" ".join(words[:-1]), CALLER, _stamp())
        yield SleepFrame(sleep=word_s)
    yield InterimTranscriptionFrame(interim, CALLER, _stamp())
    yield SleepFrame(sleep=lead_s)
    yield TranscriptionFrame(text, CALLER, _stamp(), finalized=True)
    waited = time.monotonic() + 5.0
    while not held() and time.monotonic() < waited:
        yield SleepFrame(sleep=0.001)
    yield UserStoppedSpeakingFrame()
