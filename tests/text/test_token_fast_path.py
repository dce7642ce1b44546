"""The estimate's plain-text fast paths (EstimateTokenCounter and CachedCounter around it)
give exactly the general rule's count, message by message."""

from __future__ import annotations

from typing import Any

import pytest
from pipecat.processors.aggregators.llm_context import LLMSpecificMessage

from pipecat_summarizer._text.tokens import (
    TOKEN_OVERHEAD_PER_MESSAGE,
    CachedCounter,
    EstimateTokenCounter,
    estimate_text_tokens,
    media_tokens,
    message_texts,
)


class _Dict(dict):
    pass


def _general(message: Any) -> int:
    # the rule as documented, without any fast path
    total = TOKEN_OVERHEAD_PER_MESSAGE + media_tokens(message)
    total += sum(estimate_text_tokens(t) for t in message_texts(message))
    if isinstance(message, dict) and "tool_call_id" in message:
        total += TOKEN_OVERHEAD_PER_MESSAGE
    return total


MESSAGES = [
    {"role": "user", "content": "hello there, how are you today?"},
    {"role": "assistant", "content": ""},
    {"role": "user", "content": "abc"},
    {"role": "user", "content": "x" * 4001},
    {"role": "user", "content": "東京の天気はどうですか"},
    {"role": "user", "content": "café au lait"},
    {"role": "tool", "tool_call_id": "c1", "content": "IN_PROGRESS"},
    {
        "role": "assistant",
        "content": "calling",
        "tool_calls": [{"id": "c1", "function": {"name": "f", "arguments": '{"a": 1}'}}],
    },
    {"role": "assistant", "content": "no calls", "tool_calls": []},
    {"role": "user", "content": [{"type": "text", "text": "part"}, {"type": "image_url"}]},
    {"role": "user"},
    {"role": "user", "content": None},
    _Dict(role="user", content="a dict subclass"),
    LLMSpecificMessage(llm="google", message={"role": "user", "parts": [{"text": "hi"}]}),
]


@pytest.mark.parametrize("message", MESSAGES, ids=range(len(MESSAGES)))
def test_fast_paths_count_as_the_general_rule(message):
    expected = _general(message)
    assert EstimateTokenCounter().count_message(message) == expected
    cached = CachedCounter(EstimateTokenCounter())
    assert cached.count_message(message) == expected
    assert cached.count_message(message) == expected  # the cached answer too
