"""Corrected gold answers for the ``questions`` command (``--answers PATH``).

LoCoMo's published audit found some of its gold answers wrong. A corrections file is in
LoCoMo's own format: a JSON list of samples (or one sample), each with its ``sample_id`` and
a ``qa`` list of ``{"question": ..., "answer": ...}`` (other fields are ignored), like
``locomo10.json``. A question is matched by its conversation's id (``conv-30`` and ``30``
alike) and its text (whitespace and case aside); a question the file does not hold keeps
LoCoMo's answer. Pure but for reading the file.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from pipecat_summarizer_cli.replay.locomo import LocomoConversation

Key = tuple[str, str]


def question_key(sample_id: str, question: str) -> Key:
    """How a question is matched: its conversation's id (its digits when it has any:
    ``locomo10.json`` says ``conv-30`` where the per-conversation files say ``30``) and its
    text, whitespace and case aside."""
    sid = str(sample_id)
    return (re.sub(r"\D", "", sid) or sid, " ".join(question.split()).casefold())


@dataclass
class Corrections:
    """Corrected answers by question, and what applying them did.

    Parameters:
        path: The file read.
        answers: The corrected answer of each question the file holds.
        matched: Questions of the measured conversations the file holds.
        corrected: Of those, the questions whose answer the file changes.
        questions: Questions of the measured conversations.
    """

    path: str
    answers: dict[Key, str] = field(default_factory=dict)
    matched: int = 0
    corrected: int = 0
    questions: int = 0
    _used: set[Key] = field(default_factory=set, repr=False)

    def apply(self, conv: LocomoConversation) -> LocomoConversation:
        """``conv`` with its questions' answers corrected (counted here)."""
        qa = []
        for item in conv.qa:
            self.questions += 1
            key = question_key(conv.sample_id, item.question)
            answer = self.answers.get(key)
            if answer is None:
                qa.append(item)
                continue
            self.matched += 1
            self._used.add(key)
            if answer != item.answer:
                self.corrected += 1
            qa.append(replace(item, answer=answer))
        return replace(conv, qa=qa)

    @property
    def unmatched(self) -> int:
        """Questions of the file no measured question matched (a typo, or a conversation
        not measured in this run)."""
        return len(self.answers) - len(self._used)

    def report(self) -> dict[str, Any]:
        """The counts, for the JSON report."""
        return {
            "path": self.path,
            "matched": self.matched,
            "corrected": self.corrected,
            "unmatched": self.unmatched,
            "questions": self.questions,
        }

    def line(self) -> str:
        """One line for the printed report."""
        return (
            f"answers: {self.corrected} of {self.questions} questions scored against a corrected "
            f"answer ({self.path}: {self.matched} matched, {self.unmatched} unmatched)"
        )


def _fail(where: str, problem: str) -> ValueError:
    return ValueError(f"{where}: {problem}")


def load_answers(path: str | Path) -> Corrections:
    """Read a corrections file (see the module).

    Raises:
        OSError: The file cannot be read.
        ValueError: It is not JSON in LoCoMo's format; the message names the file and the
            bad entry (``corrected.json: [3].qa[12].answer: expected a string or a number``).
    """
    p = Path(path)
    try:
        data = json.loads(p.read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise _fail(str(p), f"not JSON (line {e.lineno}, column {e.colno})") from None
    samples = data if isinstance(data, list) else [data]
    prefix = "" if isinstance(data, list) else "(the sample)"
    out = Corrections(str(path))
    for i, sample in enumerate(samples):
        at = f"{p}: {prefix or f'[{i}]'}"
        if not isinstance(sample, dict):
            raise _fail(at, "expected an object with sample_id and qa")
        sid = sample.get("sample_id")
        if not isinstance(sid, (str, int)) or isinstance(sid, bool) or str(sid) == "":
            raise _fail(f"{at}.sample_id", "expected a string")
        qa = sample.get("qa")
        if not isinstance(qa, list):
            raise _fail(f"{at}.qa", "expected a list")
        for j, item in enumerate(qa):
            where = f"{at}.qa[{j}]"
            if not isinstance(item, dict):
                raise _fail(where, "expected an object with question and answer")
            question = item.get("question")
            if not isinstance(question, str) or not question.strip():
                raise _fail(f"{where}.question", "expected a string")
            if "answer" not in item or item["answer"] is None:
                continue  # no answer (LoCoMo's adversarial items): nothing to correct
            answer = item["answer"]
            if isinstance(answer, bool) or not isinstance(answer, (str, int, float)):
                raise _fail(f"{where}.answer", "expected a string or a number")
            out.answers[question_key(str(sid), question)] = str(answer)
    return out
