"""The replay behind ``pipecat-summarizer replay`` (the ``replay`` extra: tqdm, matplotlib).

Nothing in the core package imports it. Its parts, from input to output:

* ``transcript``: loads and validates JSONL conversations (optional timestamps);
  ``synthetic`` generates the article's scenario; ``locomo`` converts LoCoMo conversations.
* ``timing``: the call model (turn cadence, barge-ins, summarizer latency), pure.
* ``clock``: the simulated-clock event loop every replay runs on.
* ``replay_llm``: the recording replay LLM; ``backends``: the summarizer backends and the
  meter their calls go through; ``recorder``: one strategy's counters.
* ``strategies``: the three strategies, one class each; ``runner``: drives one pipeline per
  strategy, instantly or in simulated real time.
* ``report``: metrics and costs; ``tables``: the printed table and merged reports;
  ``plot``: the PNG.
* ``arguments``, ``command``, ``output``: the subcommand (parse, run, print).
"""
