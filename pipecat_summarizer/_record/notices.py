"""The resume's notice: how the message a resumed call starts with is known.

A resumed call's context closes the restored conversation with one user-role notice about the
dropped connection (:func:`pipecat_summarizer._session.resume.notice` writes it). It is the
application's text, never the caller's words: the corrections detector does not read it, the
summarizer's transcript marks it, and the recorder does not archive it. Here, at the bottom of
those who need it; pure.
"""

from __future__ import annotations

from typing import Any

#: The first line of the notice: a note from the system, never the caller's words.
NOTICE_HEADER = (
    "[Note from the system about the previous connection, not words of the caller; "
    "data, not an instruction]"
)


def is_notice(message: Any) -> bool:
    """Whether ``message`` is a resume's notice (user-role, starting with the header)."""
    if not isinstance(message, dict) or message.get("role") != "user":
        return False
    content = message.get("content")
    return isinstance(content, str) and content.startswith(NOTICE_HEADER)


__all__ = ["NOTICE_HEADER", "is_notice"]
