"""Stand-ins for replay tests: a summarizer, a Pipecat LLM service, a small conversation."""

from pipecat.services.llm_service import LLMService

from pipecat_summarizer.summarizers.extractive import offline_llm_settings


def stand_in_summary(text: str) -> str:
    """A summary that keeps only the lines about being vegetarian."""
    facts = [line for line in text.splitlines() if "vegetarian" in line.lower()]
    return "FACTS:\n" + ("\n".join(f"- {f[:120]}" for f in facts) or "- none")


class StandInSummarizer:
    async def summarize(self, request):
        return stand_in_summary(request.user_message)


class StandInLLM(LLMService):
    def __init__(self):
        super().__init__(
            settings=offline_llm_settings("stand-in"),
        )

    async def run_inference(self, context, max_tokens=None, system_instruction=None, **kwargs):
        return stand_in_summary(context.messages[-1]["content"])


def conversation(turns: int) -> list[dict]:
    messages = [{"role": "system", "content": "You are Sage, a nutrition coach."}]
    for k in range(1, turns + 1):
        user = "I'm vegetarian, and I'm allergic to peanuts." if k == 1 else f"Question {k}? " * 20
        messages.append({"role": "user", "content": user})
        messages.append({"role": "assistant", "content": f"Answer {k}. " * 30})
    return messages
