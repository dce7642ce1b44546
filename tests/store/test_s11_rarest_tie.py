"""Two question words with as many matches each, only one of which fits: both backends
rank the same one (the first by word), and so find the same messages.

Recall's any-word search by caller ranks the question's rarest words while their matches
stay within ``KEEP_MATCHES``. SQLite orders words of equal count by the word
(``_sqlite_search.rarest``); PostgreSQL ordered them by their oldest match first, so with
"bravo" said before "alpha" it ranked "bravo" where SQLite ranked "alpha".
"""

from __future__ import annotations

import json

from pipecat_summarizer.store import open_store
from pipecat_summarizer.store._postgres_search import KEEP_MATCHES
from pipecat_summarizer.store.records import ArchivedMessage

T0 = 1_700_000_000.0


def _msg(i: int, text: str) -> ArchivedMessage:
    return ArchivedMessage(
        call_id=f"al-{i // 50}",
        position=i % 50,
        role="user",
        content=text,
        message_json=json.dumps({"role": "user", "content": text}),
        turn=(i % 50) // 2,
        at=T0 + i,
        user_id="al",
    )


async def test_words_of_equal_count_rank_by_word_on_both_backends(store_target):
    each = KEEP_MATCHES // 2 + 100  # two of them do not fit together
    archive = [_msg(i, f"The bravo account {i}.") for i in range(each)]
    archive += [_msg(each + i, f"The alpha account {i}.") for i in range(each)]
    store = open_store(store_target)
    try:
        await store.write(archive)
        hits = await store.search("alpha bravo", user_id="al", any_word=True, limit=10)
    finally:
        await store.close()
    assert len(hits) == 10
    assert all("alpha" in h.content for h in hits), [h.content for h in hits[:3]]
