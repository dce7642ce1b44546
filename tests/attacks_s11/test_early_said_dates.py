"""The said dates and the early block (``RecallPrefetch``): the early block serves a question
about time only when it names the same dates as the turn's own block would. A spoken turn on
both backends, with the companion and without it (each on its own archive): the blocks the
LLM receives must be the same, and carry the dates."""

from __future__ import annotations

import uuid
from dataclasses import replace

import pytest

from tests.attacks_s10.early_harness import RECALL, one_call
from tests.recall.test_attacks_dates import archived, utc
from tests.support.early_search import spoken_turn

RENTAL = [
    "Yesterday I rented a red Fiat from Avis at the airport.",
    "Noted, a red Fiat; you said last Tuesday that you wanted a small car.",
]


# the promise is the dates, not the timing: the turn that searches itself must not miss the
# real 10 ms budget on a loaded machine (its block was then None, failing the comparison)
ON_TIME = replace(RECALL, latency_budget_s=5.0)


async def _seed(store) -> None:
    await store.write(archived(RENTAL, call_id="a1", at=utc(2026, 5, 6, 23, 59), user_id="alice"))


def _target(request, backend: str, tmp_path, name: str) -> str:
    if backend == "sqlite":
        return str(tmp_path / f"{name}.db")
    server = request.getfixturevalue("pg_server")
    return server.create_database(f"s11_early_{name}_{uuid.uuid4().hex[:12]}")


@pytest.mark.parametrize(
    "interim, final",
    [
        (None, "When did I rent the Fiat?"),
        # the interim words do not ask about time, the final ones do: a block made early
        # without the dates must not serve the final question
        ("I rented the Fiat", "When did I rent the Fiat?"),
        # and the other way round: the early words asked when, the final ones do not
        ("When did I rent the Fiat", "Which Fiat did I rent?"),
    ],
)
async def test_the_early_block_names_the_same_dates_as_the_turns(
    request, backend, openai_server, tmp_path, interim, final
):
    frames = spoken_turn(final, interim=interim)
    early = await one_call(
        openai_server,
        _target(request, backend, tmp_path, "early"),
        frames,
        seed=_seed,
        recall=ON_TIME,
    )
    plain = await one_call(
        openai_server,
        _target(request, backend, tmp_path, "plain"),
        frames,
        seed=_seed,
        early=False,
        recall=ON_TIME,
    )
    assert early.blocks == plain.blocks
    if interim is None:  # control: the early block served the turn
        assert early.kept and early.reused == (1, 0)
    block = str(early.blocks[-1])
    assert "red Fiat" in block
    dated = '"yesterday" = 5 May 2026' in block and '"last tuesday" = Tuesday 5 May 2026' in block
    assert dated == final.startswith("When"), block
