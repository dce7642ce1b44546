"""A child process for the store tests: ``python -m tests.support.store_worker MODE TARGET ...``.

``write TARGET USER CALL N``: writes N archived messages and N fact events for one call of
USER through a ``StoreWriter``, then flushes and exits 0.

``call TARGET USER CALL``: runs a real pipeline (user aggregator, ``ContextSummarizer`` with
the offline extractive summarizer and a store, assistant aggregator) turn after turn,
forever, until it is killed. Prints ``ready`` once the pipeline runs.
"""

from __future__ import annotations

import asyncio
import sys

from pipecat_summarizer.params import WriterParams
from pipecat_summarizer.store import StoreWriter, open_store
from pipecat_summarizer.store.records import ArchivedMessage, CallRecord, FactEvent


async def write(target: str, user: str, call: str, n: int) -> None:
    store = open_store(target)
    writer = StoreWriter(store, WriterParams(flush_interval_s=0.02, batch_size=50))
    writer.start()
    writer.submit(CallRecord(call, user))
    for i in range(n):
        writer.submit(
            ArchivedMessage(call, i, "user", f"{call} message {i} about apples", "{}", user_id=user)
        )
        writer.submit(FactEvent(call, i + 1, f"k{i % 7}", "pinned", f"fact {i}", user_id=user))
        if i % 25 == 0:
            await asyncio.sleep(0.005)  # interleave with the other processes
    ok = await writer.close(timeout=60)
    await store.close()
    sys.exit(0 if ok else 3)


async def call(target: str, user: str, call_id: str) -> None:
    from pipecat.frames.frames import LLMMessagesAppendFrame
    from pipecat.pipeline.pipeline import Pipeline
    from pipecat.pipeline.runner import PipelineRunner
    from pipecat.pipeline.task import PipelineTask
    from pipecat.processors.aggregators.llm_context import LLMContext
    from pipecat.processors.aggregators.llm_response_universal import LLMContextAggregatorPair

    from pipecat_summarizer import ContextSummarizer, ExtractiveSummarizer
    from pipecat_summarizer.params import MemoryParams
    from tests.support.pipeline_utils import cfg

    store = open_store(target)
    context = LLMContext(messages=[{"role": "system", "content": "You are helpful."}])
    summarizer = ContextSummarizer(
        context=context,
        config=cfg(messages=8, keep=2),
        summarizer=ExtractiveSummarizer(),
        store=store,
        call_id=call_id,
        user_id=user,
        memory=MemoryParams(writer=WriterParams(flush_interval_s=0.1)),
    )
    pair = LLMContextAggregatorPair(context)
    task = PipelineTask(Pipeline([pair.user(), summarizer, pair.assistant()]))

    async def feed() -> None:
        await asyncio.sleep(0.2)
        print("ready", flush=True)
        i = 0
        while True:
            i += 1
            await task.queue_frame(
                LLMMessagesAppendFrame(
                    messages=[
                        {"role": "user", "content": f"My order number {i} is for {i} apples."},
                        {"role": "assistant", "content": f"Noted order {i}."},
                    ],
                    run_llm=True,
                )
            )
            await asyncio.sleep(0.01)

    feeder = asyncio.create_task(feed())
    await PipelineRunner(handle_sigint=False).run(task)
    feeder.cancel()


if __name__ == "__main__":
    mode, target, *rest = sys.argv[1:]
    if mode == "write":
        asyncio.run(write(target, rest[0], rest[1], int(rest[2])))
    else:
        asyncio.run(call(target, rest[0], rest[1]))
