"""The memory record's sections (FACTS, CONSTRAINTS, DECISIONS, OPEN QUESTIONS): tolerant
parsing and rendering. Pure text functions shared by the processor, the pinned facts and the
summarizer backends.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence

from pipecat_summarizer._text.vocabulary import SECTIONS

FACTS, CONSTRAINTS, DECISIONS, OPEN_QUESTIONS = SECTIONS

_HEADING_NAMES = {
    "fact": FACTS,
    "facts": FACTS,
    "constraint": CONSTRAINTS,
    "constraints": CONSTRAINTS,
    "decision": DECISIONS,
    "decisions": DECISIONS,
    "open question": OPEN_QUESTIONS,
    "open questions": OPEN_QUESTIONS,
}
_HEADING_WORD = r"(?P<name>facts?|constraints?|decisions?|open[ _-]*questions?)"
# A heading line, with optional markdown ("## Facts", "**FACTS:**", "1. Facts"). A prefix
# ending in ":" or ">" is allowed before a heading that has a colon, so Pipecat's
# "Conversation summary: FACTS:" and "<summary>FACTS:" are recognized too.
_HEADING_ALONE_RE = re.compile(
    r"^\s*(?:#{1,6}\s*)?(?:\d+[.)]\s*)?[*_]{0,2}\s*" + _HEADING_WORD + r"\s*[*_]{0,2}\s*:?\s*"
    r"[*_]{0,2}\s*$",
    re.IGNORECASE,
)
_HEADING_INLINE_RE = re.compile(
    r"^\s*(?:[^\n]*?[:>]\s*)?(?:#{1,6}\s*)?(?:\d+[.)]\s*)?[*_]{0,2}\s*"
    + _HEADING_WORD
    + r"\s*[*_]{0,2}\s*:\s*[*_]{0,2}\s*(?P<rest>.*)$",
    re.IGNORECASE,
)
_BULLET_RE = re.compile(r"^\s*(?:[-*•‣◦–—+]|\d+[.)])\s+(?P<text>.*)$")
_NONE_RE = re.compile(
    r"^\(?(?:none|n/?a|nothing|-+)(?:\s+(?:yet|so far|recorded|to record|noted))?\)?\.?$",
    re.IGNORECASE,
)
_TAG_LINE_RE = re.compile(r"^\s*</?[\w-]+>\s*$")


def _heading_of(line: str) -> tuple[str, str] | None:
    """Return ``(section, inline rest)`` if ``line`` is a section heading."""
    if _BULLET_RE.match(line) and not re.match(r"^\s*\d+[.)]", line):
        return None  # "- Facts: ..." is a bullet, never a heading
    match = _HEADING_ALONE_RE.match(line)
    rest = ""
    if not match:
        match = _HEADING_INLINE_RE.match(line)
        if not match:
            return None
        rest = match.group("rest")
    name = re.sub(r"[\s_-]+", " ", match.group("name").lower())
    return _HEADING_NAMES[name], rest


def _strip_item(text: str) -> str:
    text = text.strip()
    bullet = _BULLET_RE.match(text)
    if bullet:
        text = bullet.group("text").strip()
    # A closing tag stuck to the last bullet ("- none</summary>") is not content.
    return re.sub(r"\s*</[\w-]+>\s*$", "", text).strip()


def parse_sections(text: str) -> dict[str, list[str]]:
    """Parse a memory record into its four sections, tolerating loose formatting.

    Headings are matched case-insensitively, with or without a colon, markdown (``## Facts``,
    ``**FACTS**``) or numbering, and singular forms. Bullets may use ``-``, ``*``, ``•`` or
    numbers; unbulleted lines under a heading count as items, indented ones continue the
    previous item. Lines before the first heading, separators and bare tags are ignored, as
    are ``none`` entries.

    Args:
        text: The record text.

    Returns:
        A dict with the keys ``FACTS``, ``CONSTRAINTS``, ``DECISIONS`` and
        ``OPEN QUESTIONS`` (always all four), each a list of item texts in order.
    """
    sections: dict[str, list[str]] = {name: [] for name in SECTIONS}
    current: str | None = None
    for raw in (text or "").splitlines():
        if not raw.strip() or _TAG_LINE_RE.match(raw) or not re.search(r"\w", raw):
            continue
        heading = _heading_of(raw)
        if heading:
            current, rest = heading
            item = _strip_item(rest)
            if item and not _NONE_RE.match(item):
                sections[current].append(item)
            continue
        if current is None:
            continue
        item = _strip_item(raw)
        if not item or _NONE_RE.match(item):
            continue
        items = sections[current]
        if raw[:1].isspace() and not _BULLET_RE.match(raw) and items:
            items[-1] = f"{items[-1]} {item}"  # a wrapped bullet
        else:
            items.append(item)
    return sections


def render_sections(sections: Mapping[str, Sequence[str]]) -> str:
    """Render sections in the record format: the four headings, each with bullets.

    Args:
        sections: Items per section name; missing sections and unknown keys are fine.

    Returns:
        The record, with ``- none`` under every empty section.
    """
    lines: list[str] = []
    for name in SECTIONS:
        lines.append(f"{name}:")
        items = [i for i in sections.get(name, ()) if i and i.strip()]
        if items:
            lines.extend(f"- {i}" for i in items)
        else:
            lines.append("- none")
    return "\n".join(lines)


def record_items(text: str) -> list[str]:
    """Every item of every section of a record (:func:`parse_sections`), in order."""
    return [item for items in parse_sections(text).values() for item in items]


EVERYTHING_PINNED = "(everything known so far is in the pinned facts)"


def without_items(
    text: str,
    drop: Iterable[str],
    normalize: Callable[[str], str],
    *,
    empty: str = EVERYTHING_PINNED,
) -> str:
    """``text`` without the bullet lines whose item is in ``drop`` (compared normalized).

    Everything else is kept exactly as written, prose included; a heading left with no
    items is dropped with them. A record with nothing left is ``empty`` (by default a line
    saying so).
    """
    gone = {normalize(d) for d in drop}
    kept: list[str] = []
    for line in text.splitlines():
        if _BULLET_RE.match(line) and normalize(_strip_item(line)) in gone:
            continue
        kept.append(line)
    # a heading whose items all went is noise
    lines = [
        line
        for i, line in enumerate(kept)
        if not ((h := _heading_of(line)) and not h[1] and _next_is_heading(kept, i))
    ]
    out = "\n".join(lines).strip()
    return out or empty


def _next_is_heading(lines: list[str], i: int) -> bool:
    rest = [line for line in lines[i + 1 :] if line.strip()]
    return not rest or _heading_of(rest[0]) is not None


def with_items(
    text: str, items: Mapping[str, Sequence[str]], normalize: Callable[[str], str]
) -> str:
    """``text`` with ``items`` (per section) appended as bullets, unless already there.

    The text is never re-rendered, so prose and custom formats survive; new items go under
    a repeated heading at the end, which :func:`parse_sections` merges.
    """
    present = {normalize(_strip_item(line)) for line in text.splitlines() if line.strip()}
    blocks: list[str] = []
    for name in SECTIONS:
        new = [i for i in items.get(name, ()) if normalize(i) not in present]
        if new:
            blocks.append(f"{name}:\n" + "\n".join(f"- {i}" for i in new))
    if not blocks:
        return text
    return "\n".join([text.rstrip(), *blocks]) if text.strip() else "\n".join(blocks)
