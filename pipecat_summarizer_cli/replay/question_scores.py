"""Scoring for the question-time measurement (:mod:`~pipecat_summarizer_cli.replay.questions`).

Answer recall is the share of an answer's content words found in the request the main LLM
receives for its question; :class:`Scores` collects one strategy's shares by LoCoMo
category, and :func:`table` prints them side by side. Pure: no pipeline, no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from pipecat_summarizer_cli.replay.locomo import content_words, words

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
        shares: Per LoCoMo category, each question's answer share.
        input_tokens: Tokens of the questions' requests (main LLM input).
        recalled: Questions whose request carried a recalled block.
        missed: Recall searches that missed the latency budget.
    """

    shares: dict[int, list[float]] = field(default_factory=dict)
    input_tokens: int = 0
    recalled: int = 0
    missed: int = 0

    def add(self, category: int | None, share: float) -> None:
        """One question's share."""
        self.shares.setdefault(int(category or 0), []).append(share)

    def merge(self, other: Scores) -> None:
        """Add another conversation's scores."""
        for c, s in other.shares.items():
            self.shares.setdefault(c, []).extend(s)
        self.input_tokens += other.input_tokens
        self.recalled += other.recalled
        self.missed += other.missed

    def recall(self, category: int | None = None) -> float:
        """Mean share (of one category, or item-weighted over all)."""
        values = (
            [v for s in self.shares.values() for v in s]
            if category is None
            else self.shares.get(category, [])
        )
        return sum(values) / len(values) if values else 0.0

    @property
    def questions(self) -> int:
        """Questions scored."""
        return sum(len(s) for s in self.shares.values())


def table(title: str, scores: dict[str, Scores]) -> str:
    """The results as a plain-text table: recall by category and overall, input tokens."""
    names = [s for s in STRATEGIES if s in scores]
    full = scores.get("full_buffer")
    rows = [("", *names)]
    cats = sorted({c for s in scores.values() for c in s.shares})
    for c in cats:
        n = len(next(iter(scores.values())).shares.get(c, []))
        label = f"recall {c} {CATEGORIES.get(c, '?')} ({n})"
        rows.append((label, *(f"{scores[s].recall(c):.1%}" for s in names)))
    any_scores = next(iter(scores.values()))
    rows.append(
        (f"recall overall ({any_scores.questions})", *(f"{scores[s].recall():.1%}" for s in names))
    )
    rows.append(("question input tokens", *(f"{scores[s].input_tokens:,}" for s in names)))
    if full is not None and full.input_tokens:
        rows.append(
            (
                "input vs full buffer",
                *(f"{scores[s].input_tokens / full.input_tokens:.1%}" for s in names),
            )
        )
    rows.append(("questions with a recalled block", *(str(scores[s].recalled) for s in names)))
    if any(scores[s].missed for s in names):
        rows.append(("recall searches over budget", *(str(scores[s].missed) for s in names)))
    width = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = [title]
    for i, r in enumerate(rows):
        lines.append(
            "  ".join(c.rjust(width[j]) if j else c.ljust(width[j]) for j, c in enumerate(r))
        )
        if i == 0:
            lines.append("-" * (sum(width) + 2 * (len(width) - 1)))
    return "\n".join(lines)
