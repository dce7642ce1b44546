"""Attack on the text caches emptied by a forget (8c263ad, 92e203f): SQLite's store thread (or
any thread: a forget noticed elsewhere) calls ``empty_text_caches`` while the loop's thread
reads the same texts through every registered cache, ``re``'s pattern cache included: no
crash, and every answer equals the uncached function's (``__wrapped__``). Could fail if a
cached function returned shared mutable data or if emptying raced a read into a wrong
entry; a cache's own lock-free bookkeeping under ``cache_clear`` from another thread is what
is exercised.
"""

from __future__ import annotations

import inspect
import re
import threading

import pipecat_summarizer._recall.query
import pipecat_summarizer._recall.select
import pipecat_summarizer._recall.superseded
import pipecat_summarizer._record.corrections
import pipecat_summarizer._record.summary_text
import pipecat_summarizer._text.vocabulary  # noqa: F401 - each registers its caches
from pipecat_summarizer._text.text_caches import empty_text_caches, text_caches

TEXTS = [
    f"Marta and I fly to Lisbon on {d} March, not {d + 7} March; room {d} booked by Ana."
    for d in range(1, 29)
] + ["Actually, make that 21 March, not 14 March.", "When is the Lisbon trip with Marta?"]


def _argument(cache, text: str):
    params = list(inspect.signature(cache.__wrapped__).parameters.values())
    hint = str(params[0].annotation)
    return tuple(text.lower().split()) if "tuple" in hint else text


def test_attack_caches_emptied_by_another_thread_while_read():
    caches = text_caches()
    assert len(caches) >= 8
    want = {
        (i, k): c.__wrapped__(_argument(c, t))
        for i, c in enumerate(caches)
        for k, t in enumerate(TEXTS)
    }
    stop = threading.Event()
    cleared = [0]

    def emptier() -> None:
        while not stop.is_set():
            empty_text_caches()
            cleared[0] += 1

    thread = threading.Thread(target=emptier)
    thread.start()
    try:
        for _ in range(15):
            for i, c in enumerate(caches):
                for k, t in enumerate(TEXTS):
                    assert c(_argument(c, t)) == want[(i, k)]
                    re.search(re.escape(t[:12]), t)
    finally:
        stop.set()
        thread.join()
    print(f"\ncaches emptied {cleared[0]} times during the reads")
    assert cleared[0] > 10
