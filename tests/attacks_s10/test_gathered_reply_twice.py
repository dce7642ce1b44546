"""A question that gathers: the second search (on the first hits' names, "fiat avis") finds
the desk's answer that the first hit already carries as its reply; the block must not quote
that answer twice (once as the reply, once as a snippet of its own). Real pipeline, with and
without ``RecallPrefetch`` (the early work and the turn's own share the fault)."""

from __future__ import annotations

import pytest

from tests.attacks_s10.early_harness import CAR_ASK, one_call
from tests.support.early_search import spoken_turn

ANSWER = '"Noted, a red Fiat."'


@pytest.mark.parametrize("early", [True, False], ids=["early", "turn"])
async def test_the_first_hits_reply_is_not_quoted_again(openai_server, tmp_path, early):
    outcome = await one_call(
        openai_server, str(tmp_path / "m.db"), spoken_turn(CAR_ASK), early=early
    )
    (block,) = outcome.blocks
    assert block is not None and "I rented a red Fiat" in block
    assert block.count(ANSWER) == 1, block
