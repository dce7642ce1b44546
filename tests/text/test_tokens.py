"""Token counting: compatible with Pipecat's estimate where Pipecat is right, better elsewhere."""

from pipecat.processors.aggregators.llm_context import LLMContext, LLMSpecificMessage
from pipecat.utils.context.llm_context_summarization import LLMContextSummarizationUtil

from pipecat_summarizer._compaction.measure import ContextMeter
from pipecat_summarizer._compaction.plan import make_protection
from pipecat_summarizer._text.tokens import (
    CachedCounter,
    EstimateTokenCounter,
    TokenizerCounter,
    count_text,
    estimate_text_tokens,
)

C = EstimateTokenCounter()


def test_matches_pipecat_on_plain_chat():
    msgs = [
        {"role": "user", "content": "What's the weather like in Lisbon tomorrow afternoon?"},
        {"role": "assistant", "content": "Sunny, about twenty-two degrees."},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "c1",
                    "type": "function",
                    "function": {"name": "weather", "arguments": '{"city": "Lisbon"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": '{"temp": 22}'},
        {"role": "user", "content": [{"type": "text", "text": "and the day after?"}]},
    ]
    ours = sum(C.count_message(m) for m in msgs)
    assert ours == LLMContextSummarizationUtil.estimate_context_tokens(LLMContext(msgs))


def test_counts_what_pipecat_misses():
    input_text = {"role": "user", "content": [{"type": "input_text", "text": "x" * 400}]}
    assert C.count_message(input_text) >= 110
    dict_args = {
        "role": "assistant",
        "tool_calls": [{"id": "c", "function": {"name": "f", "arguments": {"q": "y" * 400}}}],
    }
    assert C.count_message(dict_args) >= 100  # Pipecat raises TypeError here
    specific = LLMSpecificMessage(llm="anthropic", message={"thinking": "z" * 400})
    assert C.count_message(specific) >= 100


def test_cjk_is_not_undercounted():
    text = "我对花生过敏，而且我吃素。" * 10
    assert estimate_text_tokens(text) >= len(text) * 0.9
    assert estimate_text_tokens("abcd" * 10) == 10


def test_tokenizer_counter_uses_encode_or_callable():
    class WordTokenizer:
        def encode(self, s):
            return s.split()

    exact = TokenizerCounter(WordTokenizer(), overhead_per_message=3)
    assert exact.count_message({"role": "user", "content": "one two three"}) == 6
    by_fn = TokenizerCounter(lambda s: len(s), overhead_per_message=0)
    assert by_fn.count_message({"role": "user", "content": "abc"}) == 3
    assert count_text(exact, "a b c d") == 4


def test_cached_counter_recounts_a_result_rewritten_in_place():
    cached = CachedCounter(C)
    msg = {"role": "tool", "tool_call_id": "c", "content": "IN_PROGRESS"}
    first = cached.count_message(msg)
    msg["content"] = "r" * 4000
    assert cached.count_message(msg) > first + 900


def test_meter_incremental_equals_full_recount():
    protected = make_protection()
    meter = ContextMeter(C, protected)
    msgs = [{"role": "system", "content": "s" * 4000}]
    for k in range(50):
        msgs.append({"role": "user", "content": f"user {k} " * 5})
        msgs.append({"role": "assistant", "content": f"reply {k} " * 9})
        m = meter.measure(msgs)
        fresh = ContextMeter(C, protected).measure(msgs)
        assert m == fresh
    system_tokens = C.count_message(msgs[0])
    assert m.total_tokens - m.reducible_tokens == system_tokens
    assert m.messages_since_summary == 100


def test_meter_counts_messages_since_summary_and_notices_splices():
    protected = make_protection()
    meter = ContextMeter(C, protected)
    summary = {"role": "user", "content": "summary"}
    msgs = [{"role": "system", "content": "s"}, summary] + [
        {"role": "user", "content": str(k)} for k in range(7)
    ]
    assert meter.measure(msgs, summary).messages_since_summary == 7
    msgs[1:4] = [{"role": "user", "content": "new summary"}]
    new = meter.measure(msgs, msgs[1])
    assert new == ContextMeter(C, protected).measure(msgs, msgs[1])
    assert new.messages_since_summary == 5
