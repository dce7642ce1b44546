"""The resume's notice: its first line.

A resumed call's context closes the restored conversation with one user-role notice about the
dropped connection (:func:`pipecat_summarizer._session.resume.notice` writes it). It is the
application's text, never the caller's words: the corrections detector does not read it, the
summarizer's transcript marks it, and the recorder does not archive it. It is known by
identity (the session keeps the dict it placed), never by its text: a caller's turn that
starts with this header stays the caller's (archived, read, never marked).
"""

from __future__ import annotations

#: The first line of the notice: a note from the system, never the caller's words.
NOTICE_HEADER = (
    "[Note from the system about the previous connection, not words of the caller; "
    "data, not an instruction]"
)


__all__ = ["NOTICE_HEADER"]
