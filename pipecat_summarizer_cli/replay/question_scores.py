"""Scoring for the question-time measurement (:mod:`~pipecat_summarizer_cli.replay.questions`).

Answer recall is the share of an answer's content words found in the request the main LLM
receives for its question; :class:`Scores` collects one strategy's shares by LoCoMo
category, and beside them what the recalled block costs and holds (tokens per question, the
share of its snippets holding one of LoCoMo's evidence lines, and evidence recall: see
:mod:`~pipecat_summarizer_cli.replay.question_relevance`); :func:`table` prints them side by
side. With corrected answers (``--answers``), each question is scored against both answer
sets on the same request, and :func:`table` prints both. Pure: no pipeline, no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from pipecat_summarizer_cli.replay.gold_answers import CorrectedQA
from pipecat_summarizer_cli.replay.locomo import QAItem, content_words, words
from pipecat_summarizer_cli.replay.question_relevance import percentile

STRATEGIES = ("full_buffer", "pipecat_builtin", "ours", "ours_recall")
CATEGORIES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop"}


def answer_share(text: str, answer: str) -> float | None:
    """Share of ``answer``'s content words among the words of ``text`` (``None`` when the
    answer has no content word)."""
    cw = content_words(answer)
    if not cw:
        return None
    vocabulary = set(words(text))
    return sum(w in vocabulary for w in cw) / len(cw)


@dataclass
class Scores:
    """One strategy's answer recall and input tokens over questions.

    Parameters:
        shares: Per LoCoMo category, each question's answer share (LoCoMo's answers).
        corrected: Per LoCoMo category, each question's share against the corrected answer
            (the same share where the question has no correction; a question without an
            answer in the corrected set is left out).
        input_tokens: Tokens of the questions' requests (main LLM input).
        recalled: Questions whose request carried a recalled block.
        missed: Recall searches that missed the latency budget.
        early: Recall searches answered by one started on the caller's words before the
            turn ended (``RecallPrefetch``; 0 when the questions are not spoken).
        block_tokens: Per question scored, the tokens of its recalled block (0 without one);
            empty for a strategy without recall.
        snippets: Snippets of the recalled blocks.
        evidence_snippets: Of those, the snippets holding one of their question's evidence
            lines.
        evidence: Per question with evidence lines, the share of them its request carries
            (in view or in the recalled block).
        blocks: Per question scored, ``(question, recalled block text or "")`` (for reading
            a run; not in the JSON report).
        rows: Per question scored, its row (see
            :func:`~pipecat_summarizer_cli.replay.question_rows.question_row`): the JSON
            report's ``"questions"``.
    """

    shares: dict[int, list[float]] = field(default_factory=dict)
    corrected: dict[int, list[float]] = field(default_factory=dict)
    input_tokens: int = 0
    recalled: int = 0
    missed: int = 0
    early: int = 0
    block_tokens: list[int] = field(default_factory=list)
    snippets: int = 0
    evidence_snippets: int = 0
    evidence: list[float] = field(default_factory=list)
    blocks: list[tuple[str, str]] = field(default_factory=list, repr=False)
    rows: list[dict[str, Any]] = field(default_factory=list, repr=False)

    def add(self, category: int | None, share: float, corrected: float | None = None) -> None:
        """One question's share (``corrected``: its share against a corrected answer, the
        same when not given)."""
        self.shares.setdefault(int(category or 0), []).append(share)
        self.add_corrected(category, share if corrected is None else corrected)

    def add_corrected(self, category: int | None, share: float | None) -> None:
        """One question's share against the corrected answers (``None``: left out)."""
        if share is not None:
            self.corrected.setdefault(int(category or 0), []).append(share)

    def score(self, item: QAItem, text: str) -> bool:
        """Score ``item`` on its request's ``text`` against its answer and, for a
        :class:`~pipecat_summarizer_cli.replay.gold_answers.CorrectedQA`, its corrected
        answer, each column on its own (a LoCoMo "No" corrected to "Yes, to Paris" counts in
        the corrected column only). ``False`` when LoCoMo's answer has no content word: the
        question is then not in the original column, nor in the input and relevance figures."""
        share = answer_share(text, item.answer)
        if share is not None:
            self.shares.setdefault(int(item.category or 0), []).append(share)
        if not isinstance(item, CorrectedQA):
            self.add_corrected(item.category, share)
        elif item.corrected is not None:
            # no content word in the corrected answer: nothing to find, left out
            self.add_corrected(item.category, answer_share(text, item.corrected))
        return share is not None

    def merge(self, other: Scores) -> None:
        """Add another conversation's scores."""
        for c, s in other.shares.items():
            self.shares.setdefault(c, []).extend(s)
        for c, s in other.corrected.items():
            self.corrected.setdefault(c, []).extend(s)
        self.input_tokens += other.input_tokens
        self.recalled += other.recalled
        self.missed += other.missed
        self.early += other.early
        self.block_tokens.extend(other.block_tokens)
        self.snippets += other.snippets
        self.evidence_snippets += other.evidence_snippets
        self.evidence.extend(other.evidence)
        self.blocks.extend(other.blocks)
        self.rows.extend(other.rows)

    def recall(self, category: int | None = None, *, corrected: bool = False) -> float:
        """Mean share (of one category, or item-weighted over all; ``corrected``: against
        the corrected answers)."""
        shares = self.corrected if corrected else self.shares
        values = (
            [v for s in shares.values() for v in s]
            if category is None
            else shares.get(category, [])
        )
        return sum(values) / len(values) if values else 0.0

    @property
    def questions(self) -> int:
        """Questions scored."""
        return sum(len(s) for s in self.shares.values())

    def evidence_recall(self) -> float | None:
        """Mean share of a question's evidence lines in its request (``None``: no question
        with evidence)."""
        return sum(self.evidence) / len(self.evidence) if self.evidence else None

    def evidence_snippet_share(self) -> float | None:
        """Share of recalled snippets holding an evidence line (``None``: no snippet)."""
        return self.evidence_snippets / self.snippets if self.snippets else None

    def relevance(self) -> dict[str, object]:
        """The relevance figures as JSON-ready values (block tokens only with recall)."""
        out: dict[str, object] = {
            "questions": self.questions,
            "input_tokens": self.input_tokens,
            "evidence_recall": self.evidence_recall(),
            "questions_with_evidence": len(self.evidence),
        }
        if self.block_tokens:
            t = self.block_tokens
            out["block_tokens"] = {
                "mean": sum(t) / len(t),
                "p50": percentile(t, 50),
                "p90": percentile(t, 90),
            }
            out["recalled_blocks"] = self.recalled
            out["searches_late"] = self.missed
            out["searches_started_on_the_words"] = self.early
            out["snippets"] = self.snippets
            out["evidence_snippets"] = self.evidence_snippets
            out["evidence_snippet_share"] = self.evidence_snippet_share()
        return out


def table(title: str, scores: dict[str, Scores], *, corrected: bool = False) -> str:
    """The results as a plain-text table: recall by category and overall, input tokens
    (``corrected``: under each recall row, the recall against the corrected answers)."""
    names = [s for s in STRATEGIES if s in scores]
    full = scores.get("full_buffer")
    rows = [("", *names)]
    cats = sorted({c for s in scores.values() for c in s.shares})
    for c in cats:
        n = len(next(iter(scores.values())).shares.get(c, []))
        label = f"recall {c} {CATEGORIES.get(c, '?')} ({n})"
        rows.append((label, *(f"{scores[s].recall(c):.1%}" for s in names)))
        if corrected:
            rows.append(_corrected_row(scores, names, c))
    any_scores = next(iter(scores.values()))
    rows.append(
        (f"recall overall ({any_scores.questions})", *(f"{scores[s].recall():.1%}" for s in names))
    )
    if corrected:
        rows.append(_corrected_row(scores, names, None))
    rows.append(("question input tokens", *(f"{scores[s].input_tokens:,}" for s in names)))
    if full is not None and full.input_tokens:
        rows.append(
            (
                "input vs full buffer",
                *(f"{scores[s].input_tokens / full.input_tokens:.1%}" for s in names),
            )
        )
    rows.append(("questions with a recalled block", *(str(scores[s].recalled) for s in names)))
    rows += _relevance_rows([scores[s] for s in names])
    if any(scores[s].missed for s in names):
        rows.append(("recall searches over budget", *(str(scores[s].missed) for s in names)))
    if any(scores[s].early for s in names):
        rows.append(("searches started on the words", *(str(scores[s].early) for s in names)))
    width = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = [title]
    for i, r in enumerate(rows):
        lines.append(
            "  ".join(c.rjust(width[j]) if j else c.ljust(width[j]) for j, c in enumerate(r))
        )
        if i == 0:
            lines.append("-" * (sum(width) + 2 * (len(width) - 1)))
    return "\n".join(lines)


def _corrected_row(scores: dict[str, Scores], names: list[str], c: int | None) -> tuple[str, ...]:
    """Recall against the corrected answers (of category ``c``, or overall)."""
    n = max(
        (len(v.corrected.get(c, [])) if c is not None else sum(map(len, v.corrected.values())))
        for v in scores.values()
    )
    return (
        f"  against corrected answers ({n})",
        *(f"{scores[s].recall(c, corrected=True):.1%}" for s in names),
    )


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value:.1%}"


def _relevance_rows(columns: list[Scores]) -> list[tuple[str, ...]]:
    """What the recalled block costs and holds (``-`` for a strategy without recall), and
    evidence recall for every strategy."""
    rows: list[tuple[str, ...]] = []
    if any(c.block_tokens for c in columns):

        def block(c: Scores) -> str:
            t = c.block_tokens
            if not t:
                return "-"
            return f"{sum(t) / len(t):.0f} / {percentile(t, 50)} / {percentile(t, 90)}"

        rows.append(("recalled block tokens mean/p50/p90", *(block(c) for c in columns)))
        rows.append(
            (
                "snippets holding an evidence turn",
                *(
                    f"{_pct(c.evidence_snippet_share())} of {c.snippets}" if c.block_tokens else "-"
                    for c in columns
                ),
            )
        )
    if any(c.evidence for c in columns):
        n = max(len(c.evidence) for c in columns)
        rows.append((f"evidence recall ({n})", *(_pct(c.evidence_recall()) for c in columns)))
    return rows
