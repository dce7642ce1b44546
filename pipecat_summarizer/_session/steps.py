"""The processor's own per-frame steps failing: logged by name and type, stopped at a limit."""

from __future__ import annotations

from loguru import logger

from pipecat_summarizer._compaction.failures import StepFailures

# The same internal step failing on this many frames in a row stops summarization for the
# call: retrying it every turn would only repeat the error.
STEP_FAILURE_LIMIT = 3


class StepGuard:
    """Reports the failures of the processor's own work for a frame (counting, pinning,
    planning, eviction...): one ERROR naming the step and the exception type (never its text,
    which may quote the conversation); the same step failing :data:`STEP_FAILURE_LIMIT`
    frames in a row stops summarization for the call (one more ERROR).

    Args:
        name: How log lines name the processor.
        log_content: Also log the exception with its text, at DEBUG only.
    """

    def __init__(self, name: str, *, log_content: bool = False):
        """Initialize with no failure."""
        self.failures = StepFailures(STEP_FAILURE_LIMIT)
        self._name = name
        self._log_content = log_content

    @property
    def disabled(self) -> bool:
        """Summarization stopped for the call."""
        return self.failures.disabled

    def succeeded(self) -> None:
        """A frame's work completed: the streak resets."""
        failures = self.failures
        if failures.streak:  # nothing to reset on the common frame
            failures.succeeded()

    def failed(self, step: str, error: BaseException) -> bool:
        """Report ``step``'s failure; True exactly once, when it stops summarization."""
        if self._log_content:
            logger.opt(exception=error).debug(f"{self._name}: {step} failed")
        logger.error(
            f"{self._name}: {step} failed ({type(error).__name__}); the frame goes on "
            "unchanged, the next turn tries again"
        )
        if not self.failures.failed(step):
            return False
        logger.error(
            f"{self._name}: {step} failed {self.failures.streak} turns in a row; "
            "summarization stopped for this call (the call goes on, context as it is)"
        )
        return True
