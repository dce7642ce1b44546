"""LoCoMo conversations as replay transcripts, and answer recall on the final request.

LoCoMo (Maharana et al., ACL 2024) has ten very long two-person conversations, each with
question/answer items. It is benchmark input only: point the CLI at your copy
(``replay --locomo PATH``); nothing of it ships with this package.

Conversion (one LoCoMo sample to one transcript):

* a one-line system message naming the two speakers;
* speaker A speaks as ``user``, speaker B as ``assistant``; consecutive lines of one speaker
  are joined into one message; a shared photo becomes ``[shares a photo: <caption>]``;
* the first user message of each session starts with a note such as
  ``[Session 3 — 8 May 2023, 1:56 pm]``; a session that B opens gets a user message holding
  only the note, so the conversation stays in user/assistant order.

Answer recall: for each QA item with an ``answer`` (the adversarial category 5 has none), the
share of the answer's content words (lower-cased, stop words removed) found among the words
of the final request; averaged over items. The full buffer's figure is the ceiling.
"""

from __future__ import annotations

import json
import re
import zipfile
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pipecat_summarizer_cli.replay.transcript import Transcript, transcript_from_messages

# The answer-recall metric's own words and stop words, not the library's text vocabulary
# (``pipecat_summarizer._text.vocabulary``) on purpose: an evaluation metric must not move when
# the system under test changes how it reads text, and this package imports only the library's
# public names. ASCII words (``[a-z0-9]+``) and these 129 English function words (all of them
# also in recall's list) are the metric as measured since the first LoCoMo figures.
STOPWORDS = frozenset(
    """a about above after again against all am an and any are as at be because been before
    being below between both but by can could did do does doing down during each few for from
    further had has have having he her here hers herself him himself his how i if in into is it
    its itself just me more most my myself no nor not now of off on once only or other our ours
    ourselves out over own same she should so some such than that the their theirs them
    themselves then there these they this those through to too under until up very was we were
    what when where which while who whom why will with would you your yours yourself
    yourselves s t also""".split()
)

_WORD_RE = re.compile(r"[a-z0-9]+")
_SESSION_RE = re.compile(r"^session_(\d+)$")


@dataclass
class QAItem:
    """One LoCoMo question with its gold answer.

    Parameters:
        question: The question.
        answer: The gold answer (as text).
        category: LoCoMo's category (1-4 here; 5 has no answer and is skipped).
        evidence: The dialog ids holding the evidence.
    """

    question: str
    answer: str
    category: int | None = None
    evidence: list[str] = field(default_factory=list)


@dataclass
class LocomoConversation:
    """A converted conversation.

    Parameters:
        sample_id: LoCoMo's id (the file stem, or ``sample_id``).
        speaker_a: The user side.
        speaker_b: The assistant side.
        transcript: The replay transcript.
        qa: The answerable QA items.
        sessions: Number of sessions.
        dialog_turns: Number of LoCoMo dialog lines.
        lines: Each dialog line's text by its ``dia_id`` (what a question's ``evidence``
            names), as it appears in the transcript's messages.
    """

    sample_id: str
    speaker_a: str
    speaker_b: str
    transcript: Transcript
    qa: list[QAItem]
    sessions: int
    dialog_turns: int
    lines: dict[str, str] = field(default_factory=dict)


def words(text: str) -> list[str]:
    """Lower-cased ASCII alphanumeric words of ``text`` (``'s`` and other apostrophes split
    off): the metric's words (see :data:`STOPWORDS` for why not the library's)."""
    return _WORD_RE.findall(text.lower().replace("’", "'"))


def content_words(text: str) -> list[str]:
    """The distinct non-stop-words of ``text``, in order."""
    seen: dict[str, None] = {}
    for w in words(text):
        if w not in STOPWORDS:
            seen.setdefault(w, None)
    return list(seen)


def answer_recall(final_text: str, qa: Sequence[QAItem]) -> tuple[float, int]:
    """Mean share of each answer's content words found in ``final_text``.

    Args:
        final_text: The text of the final request.
        qa: The QA items.

    Returns:
        ``(recall, items)``: the mean over items with at least one content word, and how
        many such items there were (recall is 0.0 when there are none).
    """
    vocabulary = set(words(final_text))
    shares = []
    for item in qa:
        cw = content_words(item.answer)
        if cw:
            shares.append(sum(w in vocabulary for w in cw) / len(cw))
    return (sum(shares) / len(shares) if shares else 0.0), len(shares)


def session_note(number: int, date_time: str | None) -> str:
    """``[Session 3 — 8 May 2023, 1:56 pm]`` from LoCoMo's ``"1:56 pm on 8 May, 2023"``."""
    if not date_time:
        return f"[Session {number}]"
    text = str(date_time).strip()
    match = re.match(r"^(?P<time>.+?)\s+on\s+(?P<date>.+)$", text)
    if match:
        text = f"{match.group('date').replace(',', '')}, {match.group('time')}"
    return f"[Session {number} — {text}]"


_NOTE_DATE = re.compile(
    r"^\[Session \d+ — (?P<day>\d{1,2}) (?P<month>[A-Za-z]+),? (?P<year>\d{4}),? "
    r"(?P<hour>\d{1,2}):(?P<minute>\d{2})\s*(?P<ampm>[ap]m)\b",
    re.IGNORECASE,
)
_MONTHS = {
    m: i
    for i, m in enumerate(
        "january february march april may june july august september october november "
        "december".split(),
        1,
    )
}


def session_time(text: str) -> float | None:
    """The date of a session (seconds since the epoch, UTC) from the note its first message
    opens with (``[Session 3 — 8 May 2023, 1:56 pm]``, see :func:`session_note`); ``None``
    without a dated note."""
    match = _NOTE_DATE.match(text)
    month = _MONTHS.get(match.group("month").lower()) if match else None
    if match is None or month is None:
        return None
    hour = int(match.group("hour")) % 12 + (12 if match.group("ampm").lower() == "pm" else 0)
    moment = datetime(
        int(match.group("year")), month, int(match.group("day")), hour,
        int(match.group("minute")), tzinfo=UTC,
    )  # fmt: skip
    return moment.timestamp()


def _line_text(turn: dict) -> str:
    text = str(turn.get("text") or "").strip()
    caption = turn.get("blip_caption")
    if caption:
        text = f"{text} [shares a photo: {caption}]".strip()
    return text


def _sessions(conversation: dict) -> list[tuple[int, list[dict], str | None]]:
    out = []
    for key, value in conversation.items():
        match = _SESSION_RE.match(key)
        if match and isinstance(value, list):
            n = int(match.group(1))
            out.append((n, value, conversation.get(f"session_{n}_date_time")))
    return sorted(out, key=lambda s: s[0])


def convert(sample: dict, sample_id: str | None = None) -> LocomoConversation:
    """Convert one LoCoMo sample (either layout) to a transcript and its QA items.

    Accepts the per-conversation layout (``speaker_a``, ``session_N``... and ``qa`` at the
    top level) and the ``locomo10.json`` layout (``sample_id``, ``conversation``, ``qa``).

    Args:
        sample: The sample.
        sample_id: Its id, when the sample does not carry one.

    Returns:
        The converted conversation.

    Raises:
        ValueError: If the sample has no speakers or no sessions.
    """
    conversation = sample.get("conversation", sample)
    sid = str(sample.get("sample_id", sample_id or "locomo"))
    a, b = conversation.get("speaker_a"), conversation.get("speaker_b")
    if not a or not b:
        raise ValueError(f"LoCoMo sample {sid}: speaker_a and speaker_b are required")
    sessions = _sessions(conversation)
    if not sessions:
        raise ValueError(f"LoCoMo sample {sid}: no sessions")
    messages: list[dict] = [
        {
            "role": "system",
            "content": (
                f"This is a long-term conversation between {a} and {b}, held over "
                f"{len(sessions)} sessions. You are {b}; the user is {a}."
            ),
        }
    ]
    lines = 0
    by_id: dict[str, str] = {}
    for number, turns, date_time in sessions:
        note = session_note(number, date_time)
        noted = False
        for turn in turns:
            text = _line_text(turn)
            if not text:
                continue
            lines += 1
            if turn.get("dia_id"):
                by_id[str(turn["dia_id"])] = text
            role = "user" if turn.get("speaker") == a else "assistant"
            if not noted:
                noted = True
                if role == "user":
                    text = f"{note} {text}"
                else:
                    messages.append({"role": "user", "content": note})
            last = messages[-1]
            if last["role"] == role and role in ("user", "assistant") and len(messages) > 1:
                last["content"] = f"{last['content']}\n{text}"
            else:
                messages.append({"role": role, "content": text})
    qa = [
        QAItem(
            question=str(q.get("question", "")),
            answer=str(q["answer"]),
            category=q.get("category"),
            evidence=list(q.get("evidence") or []),
        )
        for q in sample.get("qa", [])
        if q.get("answer") not in (None, "")
    ]
    transcript = transcript_from_messages(messages, name=f"locomo_{sid}", source=f"locomo:{sid}")
    return LocomoConversation(sid, a, b, transcript, qa, len(sessions), lines, by_id)


def _samples_from_json(data: Any, stem: str) -> list[tuple[str, dict]]:
    if isinstance(data, list):
        return [(str(s.get("sample_id", f"{stem}[{i}]")), s) for i, s in enumerate(data)]
    if isinstance(data, dict):
        return [(str(data.get("sample_id", stem)), data)]
    raise ValueError(f"{stem}: expected a LoCoMo sample or a list of samples")


def _sort_key(sample_id: str) -> tuple[int, Any]:
    digits = re.sub(r"\D", "", sample_id)
    return (0, int(digits)) if digits else (1, sample_id)


def load_samples(path: str | Path) -> list[tuple[str, dict]]:
    """Read LoCoMo samples from a zip (any ``.json`` inside), a JSON file or a folder.

    Returns:
        ``(sample_id, sample)`` pairs, sorted by id.
    """
    p = Path(path)
    samples: list[tuple[str, dict]] = []
    if p.is_dir():
        for f in sorted(p.rglob("*.json")):
            samples += _samples_from_json(json.loads(f.read_text(encoding="utf-8")), f.stem)
    elif zipfile.is_zipfile(p):
        with zipfile.ZipFile(p) as z:
            for name in sorted(z.namelist()):
                if name.endswith(".json") and not name.startswith("__MACOSX"):
                    samples += _samples_from_json(json.loads(z.read(name)), Path(name).stem)
    else:
        samples = _samples_from_json(json.loads(p.read_text(encoding="utf-8")), p.stem)
    if not samples:
        raise ValueError(f"{p}: no LoCoMo samples found")
    return sorted(samples, key=lambda s: _sort_key(s[0]))


def select_samples(
    samples: Sequence[tuple[str, dict]], *, ids: Iterable[str] = (), index: int | None = None
) -> list[tuple[str, dict]]:
    """Choose samples by id (``"30"`` or ``"conv-30"`` both match ``30``) or 0-based index.

    With neither, every sample is returned.
    """
    ids = [str(i) for i in ids]
    if index is not None:
        if not 0 <= index < len(samples):
            raise ValueError(f"--locomo-index {index} is out of range (0..{len(samples) - 1})")
        return [samples[index]]
    if not ids:
        return list(samples)

    def norm(s: str) -> str:
        return re.sub(r"\D", "", s) or s

    chosen = []
    for wanted in ids:
        match = [s for s in samples if s[0] == wanted or norm(s[0]) == norm(wanted)]
        if not match:
            known = ", ".join(s[0] for s in samples)
            raise ValueError(f"no LoCoMo conversation {wanted!r} (known: {known})")
        chosen += match
    return chosen
