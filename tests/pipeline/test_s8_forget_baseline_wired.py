"""The call's baseline read is wired (the recorder reads it at the call's start with recall's
key): another process's forget stamped by a clock further behind than the no-baseline margin
is still honoured, in a real pipeline."""

from __future__ import annotations

from pipecat_summarizer.store.base import FORGET_SKEW_S
from tests.pipeline.test_s8_attack_skewed_forget import (
    test_a_forget_by_a_process_whose_clock_is_behind_is_honoured as _behind,
)


async def test_a_forget_by_a_clock_behind_beyond_the_margin_is_honoured(openai_server, tmp_path):
    await _behind(openai_server, tmp_path, 2 * FORGET_SKEW_S)
