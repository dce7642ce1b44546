"""The memory record's sections: parsing (tolerant) and rendering."""

from __future__ import annotations

from collections.abc import Iterable

from pipecat_summarizer.summarizers.extractive import parse_sections, render_sections

__all__ = ["parse_sections", "render_sections", "without_items"]


def without_items(text: str, drop: Iterable[str], normalize) -> str:
    """The record ``text`` without the items in ``drop`` (compared after ``normalize``).

    Empty sections are left out; a record with nothing left says so in one line.
    """
    gone = {normalize(d) for d in drop}
    sections = parse_sections(text)
    kept = {
        name: [i for i in items if normalize(i) not in gone] for name, items in sections.items()
    }
    if not any(kept.values()):
        return "(everything known so far is in the pinned facts)"
    lines: list[str] = []
    for name, items in kept.items():
        if items:
            lines.append(f"{name}:")
            lines.extend(f"- {i}" for i in items)
    return "\n".join(lines)
