"""A message's content as the summarizer's transcript shows it: its text, media parts as
placeholders (``[image]``, ``[audio, 31 KB]``: a summary can say one was there), and the texts
of a provider-specific message (a thinking block, Gemini content). Pure.
"""

from __future__ import annotations

from typing import Any

from pipecat.processors.aggregators.llm_context import LLMSpecificMessage

from pipecat_summarizer._text.messages import TEXT_PART_TYPES

# Media parts become placeholders in the transcript, so the summary can say one was there.
_MEDIA_LABELS = {
    "image_url": "image",
    "image": "image",
    "input_image": "image",
    "input_audio": "audio",
    "audio": "audio",
    "file": "file",
    "file_base64": "file",
    "file_url": "file",
    "input_file": "file",
}


def _size_label(size: int) -> str:
    return f"{size} bytes" if size < 1024 else f"{size / 1024:.0f} KB"


def _base64_size(data: Any) -> int | None:
    """Decoded size of inline base64 ``data`` (a data URL's payload too), if it is inline."""
    if not isinstance(data, str) or not data:
        return None
    if data.startswith("data:"):
        data = data.partition(",")[2]
    elif "://" in data[:12]:
        return None  # a URL: size unknown
    return len(data.rstrip("=")) * 3 // 4


def part_placeholder(part: dict[str, Any]) -> str:
    """The transcript's stand-in for a non-text content part: ``[image]``, ``[audio, 31 KB]``.

    Args:
        part: An OpenAI-format content part that is not text.

    Returns:
        A bracketed label with the part's kind, its file name and its size when known.
    """
    kind = str(part.get("type", "content"))
    label = _MEDIA_LABELS.get(kind, kind)
    inner = part.get(kind)
    inner = inner if isinstance(inner, dict) else part
    details = []
    name = inner.get("filename") or inner.get("name")
    if isinstance(name, str) and name:
        details.append(name)
    data = inner.get("data") or inner.get("file_data")
    if data is None and isinstance(inner.get("url"), str):
        data = inner["url"]
    if data is None and isinstance(part.get(kind), str):
        data = part[kind]
    size = _base64_size(data)
    if size is not None:
        details.append(_size_label(size))
    return f"[{', '.join([label, *details])}]"


def content_text(content: Any) -> str:
    """The text of a message's content, with placeholders for media parts.

    Args:
        content: A string, a list of content parts, or anything else (no text).

    Returns:
        The text; list parts are joined with spaces.
    """
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        return ""
    texts = []
    for part in content:
        if isinstance(part, str):
            texts.append(part)
        elif isinstance(part, dict):
            if part.get("type") in TEXT_PART_TYPES:
                texts.append(str(part.get("text", "")))
            else:
                texts.append(part_placeholder(part))
    return " ".join(t for t in texts if t)


_PROVIDER_TEXT_KEYS = ("text", "thinking", "reasoning", "reasoning_content", "content", "parts")


def _provider_texts(value: Any, depth: int = 0) -> list[str]:
    if depth > 20:
        return []
    if isinstance(value, str):
        return [value]
    if isinstance(value, list | tuple):
        return [t for v in value for t in _provider_texts(v, depth + 1)]
    if not isinstance(value, dict):
        dump = getattr(value, "model_dump", None) or getattr(value, "to_json_dict", None)
        try:
            value = dump() if callable(dump) else vars(value)
        except (TypeError, ValueError):
            return []
        if not isinstance(value, dict):
            return []
    kind = value.get("type")
    if kind in _MEDIA_LABELS:
        return [part_placeholder(value)]
    return [
        t for k in _PROVIDER_TEXT_KEYS if k in value for t in _provider_texts(value[k], depth + 1)
    ]


def provider_message(message: LLMSpecificMessage) -> tuple[str, str]:
    """The role and text of a provider-specific message (a thinking block, Gemini content).

    Args:
        message: The ``LLMSpecificMessage``.

    Returns:
        ``(role, text)``: the inner message's role (``"unknown"`` if it has none) and its
        texts (thinking included, signatures and raw data left out) joined with spaces, or
        ``"[provider-specific content]"`` when it carries no text.
    """
    inner = message.message
    role = inner.get("role") if isinstance(inner, dict) else getattr(inner, "role", None)
    try:
        texts = [t for t in _provider_texts(inner) if t.strip()]
    except RecursionError:
        texts = []
    return str(role or "unknown"), " ".join(texts) or "[provider-specific content]"


__all__ = ["content_text", "part_placeholder", "provider_message"]
