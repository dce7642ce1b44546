"""Corrected gold answers for the ``questions`` command (``--answers PATH``).

LoCoMo's published audit found some of its gold answers wrong. With ``--answers`` every
question keeps LoCoMo's answer and also gets the file's, and one run scores both (the
tables print them side by side). Two formats, told apart by shape:

* **LoCoMo's own**: a JSON list of samples (or one sample), each with its ``sample_id`` and a
  ``qa`` list of ``{"question": ..., "answer": ...}`` (other fields ignored), like
  ``locomo10.json``. A question is matched by its conversation's id (``conv-30`` and ``30``
  alike) and its text; the file's answer is the corrected one, as given.
* **The audit's**: a JSON list of error entries, each with ``question_id``
  (``locomo_<i>_qa<n>``: ``i`` is the conversation's 0-based index in the LoCoMo file the
  run reads), ``question``, ``golden_answer``, ``error_type`` and ``correct_answer``. A
  question is matched by that conversation and its text (``n`` is not used). The rules:

  - ``WRONG_CITATION`` (the audit says the answer is right, only its evidence ids are
    wrong): LoCoMo's answer stays, even where ``correct_answer`` restates it in other words.
  - Any other type (the answer is wrong): the corrected answer is ``correct_answer`` without
    its parenthesized remarks (evidence ids, "but ..." asides), whitespace and trailing
    punctuation aside; where that equals LoCoMo's answer, nothing changes.
  - A corrected answer opening with a statement that the transcript holds no answer
    (:data:`NO_ANSWER`: "Cannot be determined ...", "Unknown ...", "Unclear ...") leaves
    the question out of the corrected column: LoCoMo's answer is wrong and there is none
    to find. Other prose stays whole: answer recall counts its content words.
  - ``correct_evidence`` is not used: the relevance figures (evidence recall) stay on
    LoCoMo's evidence ids, one set for both columns.

A question the file does not hold keeps LoCoMo's answer in both columns. Pure but for
reading the file.
"""

from __future__ import annotations

import json
import re
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from pipecat_summarizer_cli.replay.locomo import LocomoConversation, QAItem

Key = tuple[str, str]

#: The audit's error types whose answer is wrong (``WRONG_CITATION``: only the evidence is).
ANSWER_ERRORS = frozenset(
    {"HALLUCINATION", "TEMPORAL_ERROR", "ATTRIBUTION_ERROR", "AMBIGUOUS", "INCOMPLETE"}
)
CITATION_ERRORS = frozenset({"WRONG_CITATION"})

#: How a corrected answer that says there is no answer opens (case aside).
NO_ANSWER = ("cannot be", "unknown", "unclear", "uncertain", "contradictory")

# ASCII digits only, and few of them: a conversation index, never a 5,000-digit int()
_AUDIT_ID = re.compile(r"locomo_([0-9]{1,9})_qa[0-9]{1,9}")
_REMARK = re.compile(r"\s*\([^()]*\)")


def question_key(sample_id: str, question: str) -> Key:
    """How a question is matched: its conversation's id (its digits when it has any:
    ``locomo10.json`` says ``conv-30`` where the per-conversation files say ``30``) and its
    text, whitespace and case aside."""
    sid = str(sample_id)
    text = unicodedata.normalize("NFC", " ".join(question.split()))  # "Zoe\u0308" is "Zoë"
    return (re.sub(r"\D", "", sid) or sid, text.casefold())


def _same(a: str, b: str) -> bool:
    def norm(s: str) -> str:
        return " ".join(s.split()).strip(" .;,").casefold()

    return norm(a) == norm(b)


def corrected_answer(correct_answer: str) -> str | None:
    """The audit's ``correct_answer`` as an answer to score (see the module): without its
    parenthesized remarks; ``None`` when it says the transcript holds no answer."""
    text = correct_answer
    while True:  # innermost remarks first: "(see (D1:2))"
        stripped = _REMARK.sub("", text)
        if stripped == text:
            break
        text = stripped
    text = " ".join(text.split()).strip(" .;,") or " ".join(correct_answer.split())
    if text.casefold().startswith(NO_ANSWER):
        return None
    return text


@dataclass
class CorrectedQA(QAItem):
    """A question with both answers: ``answer`` is LoCoMo's, ``corrected`` the file's
    (``None``: the question has no answer to score in the corrected column)."""

    corrected: str | None = None


@dataclass
class Corrections:
    """Corrected answers by question, and what applying them did.

    Parameters:
        path: The file read.
        answers: The corrected answer of each question the file holds (``None``: no
            answer, the question is left out of the corrected column).
        audit: The file is in the audit's format.
        matched: Questions of the measured conversations the file holds.
        corrected: Of those, the questions whose answer the file changes.
        no_answer: Of those, the questions left out of the corrected column.
        questions: Questions of the measured conversations.
        citation_only: Entries of the whole file kept as LoCoMo's answer because only
            their evidence is wrong although their ``correct_answer`` reads otherwise (audit
            format).
        past_file: Entries naming a conversation index the LoCoMo file does not have
            (audit format; not applied).
    """

    path: str
    answers: dict[Key, str | None] = field(default_factory=dict)
    audit: bool = False
    matched: int = 0
    corrected: int = 0
    no_answer: int = 0
    questions: int = 0
    citation_only: int = 0
    past_file: int = 0
    _used: set[Key] = field(default_factory=set, repr=False)
    _measured: set[str] = field(default_factory=set, repr=False)

    def apply(self, conv: LocomoConversation) -> LocomoConversation:
        """``conv`` with each question carrying both answers (counted here)."""
        qa: list[QAItem] = []
        self._measured.add(question_key(conv.sample_id, "")[0])
        for item in conv.qa:
            self.questions += 1
            key = question_key(conv.sample_id, item.question)
            if key not in self.answers:
                qa.append(CorrectedQA(**_fields(item), corrected=item.answer))
                continue
            answer = self.answers[key]
            self.matched += 1
            self._used.add(key)
            if answer is None:
                self.no_answer += 1
            elif not _same(answer, item.answer):
                self.corrected += 1
            else:
                answer = item.answer
            qa.append(CorrectedQA(**_fields(item), corrected=answer))
        return replace(conv, qa=qa)

    @property
    def unmatched(self) -> int:
        """Questions of the file, in a measured conversation, that no question matched (a
        typo, or a question of another version of the conversation)."""
        return sum(k[0] in self._measured and k not in self._used for k in self.answers)

    @property
    def not_measured(self) -> int:
        """Questions of the file in a conversation this run did not measure."""
        return sum(k[0] not in self._measured for k in self.answers)

    def report(self) -> dict[str, Any]:
        """The counts, for the JSON report."""
        out: dict[str, Any] = {
            "path": self.path,
            "format": "audit" if self.audit else "locomo",
            "matched": self.matched,
            "corrected": self.corrected,
            "no_answer": self.no_answer,
            "unmatched": self.unmatched,
            "not_measured": self.not_measured,
            "questions": self.questions,
        }
        if self.audit:
            out["citation_only"] = self.citation_only
            out["past_file"] = self.past_file
        return out

    def line(self) -> str:
        """One line for the printed report."""
        extra = ""
        if self.audit:
            extra = (
                f"; of all its entries, {self.citation_only} citation-only (LoCoMo's answer "
                f"kept), {self.past_file} past the LoCoMo file's conversations"
            )
        return (
            f"answers: {self.corrected} of {self.questions} questions scored against a corrected "
            f"answer, {self.no_answer} left out of the corrected column (no answer) "
            f"({self.path}: {self.matched} matched, {self.unmatched} unmatched, "
            f"{self.not_measured} in conversations not measured{extra})"
        )


def _fields(item: QAItem) -> dict[str, Any]:
    return {
        "question": item.question,
        "answer": item.answer,
        "category": item.category,
        "evidence": item.evidence,
    }


def _fail(where: str, problem: str) -> ValueError:
    return ValueError(f"{where}: {problem}")


def _is_audit(data: Any) -> bool:
    """The audit's shape: a list of objects with ``question_id`` and ``correct_answer`` (one
    with ``question_id`` is enough to read it so: a broken entry is named, not misread)."""
    return isinstance(data, list) and any(isinstance(e, dict) and "question_id" in e for e in data)


def load_answers(path: str | Path, sample_ids: Sequence[str] = ()) -> Corrections:
    """Read a corrections file (see the module).

    Args:
        path: The file.
        sample_ids: The ids of the LoCoMo file's conversations, in its order (the audit
            names a conversation by its index there).

    Raises:
        OSError: The file cannot be read.
        ValueError: It is not JSON in either format; the message names the file and the
            bad entry (``corrected.json: [3].qa[12].answer: expected a string or a number``).
    """
    p = Path(path)
    try:
        data = json.loads(p.read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise _fail(str(p), f"not JSON (line {e.lineno}, column {e.colno})") from None
    except UnicodeDecodeError as e:
        raise _fail(str(p), f"not UTF-8 (byte {e.start})") from None
    except RecursionError:
        raise _fail(str(p), "nested too deeply to be either format") from None
    if _is_audit(data):
        return _load_audit(p, str(path), data, list(sample_ids))
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


def _text(entry: dict, name: str, where: str) -> str:
    value = entry.get(name)
    if not isinstance(value, str) or not value.strip():
        raise _fail(f"{where}.{name}", "expected a string")
    return value


def _load_audit(p: Path, path: str, data: list, sample_ids: list[str]) -> Corrections:
    out = Corrections(path, audit=True)
    known = sorted(ANSWER_ERRORS | CITATION_ERRORS)
    # each question's first entry, and what it says: (citation only, the corrected answer)
    first: dict[Key, tuple[int, tuple[bool, str | None]]] = {}
    for i, entry in enumerate(data):
        where = f"{p}: [{i}]"
        if not isinstance(entry, dict):
            raise _fail(where, "expected an object with question_id and correct_answer")
        qid = entry.get("question_id")
        m = _AUDIT_ID.fullmatch(qid) if isinstance(qid, str) else None
        if m is None:
            raise _fail(f"{where}.question_id", f"expected locomo_<i>_qa<n>, got {qid!r}")
        question = _text(entry, "question", where)
        golden = _text(entry, "golden_answer", where)
        correct = _text(entry, "correct_answer", where)
        kind = entry.get("error_type")
        if kind not in known:
            raise _fail(f"{where}.error_type", f"expected one of {', '.join(known)}, got {kind!r}")
        index = int(m.group(1))
        if index >= len(sample_ids):
            out.past_file += 1
            continue
        key = question_key(sample_ids[index], question)
        citation = kind in CITATION_ERRORS
        says = (citation, None if citation else corrected_answer(correct))
        if key in first:
            if first[key][1] != says:  # the corrected column would depend on the order
                raise _fail(where, f"question also given by [{first[key][0]}] with another answer")
            continue
        first[key] = (i, says)
        if citation:
            out.citation_only += not _same(correct, golden)
            continue  # the answer is right: LoCoMo's stays
        out.answers[key] = says[1]
    return out
