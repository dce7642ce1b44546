"""Attack on the bound of early work (``RecallPrefetch``, ``PrefetchingArchive``): a long turn
spoken in many final transcriptions (an STT that finalizes each phrase) to a slow archive.
Each final part changes the turn's words, so each starts an early search (and, once it
answers, its follow-ups). The promise: early work no turn takes is bounded (``MAX_KEPT``
kept, ``MAX_AGE_S``), so the archive never holds more than that many searches of one call at
once, and the turn's own search is not queued behind dozens of stale ones."""

from __future__ import annotations

from pipecat.frames.frames import (
    TranscriptionFrame,
    UserStartedSpeakingFrame,
    UserStoppedSpeakingFrame,
)
from pipecat.tests.utils import SleepFrame

from pipecat_summarizer._recall.prefetch import MAX_KEPT
from pipecat_summarizer.store import SQLiteMemoryStore
from tests.support.early_search import Watched, early_call, seed_sister

PHRASES = [
    f"and the {w} {v}"
    for w, v in zip(
        "plan trip hotel flight sister wedding car visit dinner train museum beach garden "
        "concert ticket bakery harbour market bridge castle tower river lake forest".split(),
        "Porto Lisbon Marquis Friday Marta Saturday Fiat spring Braga Coimbra Sintra Faro "
        "Evora Douro Minho Tejo Lagos Obidos Nazare Aveiro Tomar Guarda Viseu Leiria".split(),
        strict=True,
    )
]


class _Peak(Watched, SQLiteMemoryStore):
    """Records how many of its searches run at once (each waits ``delay_s``: a slow archive)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.running = 0
        self.peak = 0

    async def search(self, query, **kwargs):
        self.running += 1
        self.peak = max(self.peak, self.running)
        try:
            return await super().search(query, **kwargs)
        finally:
            self.running -= 1


async def test_many_final_parts_to_a_slow_archive_keep_early_work_bounded(openai_server, tmp_path):
    store = _Peak(str(tmp_path / "m.db"))
    store.delay_s = 0.2
    try:
        await seed_sister(store)
        frames: list = [UserStartedSpeakingFrame()]
        for phrase in PHRASES:  # 24 final parts, 5 ms apart
            frames += [TranscriptionFrame(phrase, "alice", "t0"), SleepFrame(sleep=0.005)]
        frames += [SleepFrame(sleep=0.05), UserStoppedSpeakingFrame(), SleepFrame(sleep=0.25)]
        companion, _ = await early_call(openai_server, store, frames)
    finally:
        await store.close()
    assert companion.archive is not None and companion.archive.started >= len(PHRASES) // 2
    assert store.peak <= MAX_KEPT, f"{store.peak} searches of one call ran at once"
