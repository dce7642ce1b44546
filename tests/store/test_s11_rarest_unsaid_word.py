"""A question holding a word the caller never said finds what its other words find.

Recall's any-word search by caller ranks the rarest of the question's words (their matches
together within ``KEEP_MATCHES``, the rarest one always). On PostgreSQL a word with no
match in the caller's archive counted as that rarest one: beside words in more than
``KEEP_MATCHES`` of the caller's messages, nothing was ranked and the search found nothing
(SQLite ranks the common word that reaches furthest back, see ``_sqlite_search.rarest``).
"""

from __future__ import annotations

import json

from pipecat_summarizer.store import open_store
from pipecat_summarizer.store._postgres_search import KEEP_MATCHES, SLOTS
from pipecat_summarizer.store.records import ArchivedMessage

T0 = 1_700_000_000.0
UNSAID = "xyzzy plugh zorkmid frobozz quendor gnusto rezrov yomin".split()


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


async def test_an_unsaid_word_beside_common_ones_finds_what_they_find(store_target):
    # "hotel" in more than KEEP_MATCHES of the caller's messages, "train" in a third of them
    n = KEEP_MATCHES + 150
    archive = [
        _msg(i, f"The hotel booking {i}." + (" A train ticket." if i % 3 == 0 else ""))
        for i in range(n)
    ]
    store = open_store(store_target)
    try:
        await store.write(archive)
        found = {}
        for query in (
            "hotel",
            "xyzzy hotel",
            "train hotel",
            "xyzzy train hotel",
            " ".join([*UNSAID, "hotel"]),  # past SLOTS distinct words: the statement itself
        ):
            hits = await store.search(query, user_id="al", any_word=True, limit=10)
            found[query] = [(h.call_id, h.position) for h in hits]
    finally:
        await store.close()
    assert len(UNSAID) + 1 > SLOTS
    assert len(found["hotel"]) == 10
    assert found["xyzzy hotel"] == found["hotel"] == found[" ".join([*UNSAID, "hotel"])]
    assert len(found["train hotel"]) == 10
    assert found["xyzzy train hotel"] == found["train hotel"]
