"""Calibration of the token estimate by the provider's own counts (pure rules).

The estimate (``chars/4`` or a tokenizer that is not the provider's) can be off by tens of
per cent, differently for prose, JSON tool results and other languages. When the main LLM
reports its usage (Pipecat's ``MetricsFrame`` with ``LLMUsageMetricsData``, when usage
metrics are on), each report is matched with the estimate of the request it answers, and
the ratio ``reported input / estimate`` becomes the call's scale:

* **Matching.** Estimates are remembered per request, in order. One LLM answers one request
  at a time, so a report belongs to the latest request sent before it: it takes the newest
  estimate waiting, and drops the older ones (a response cut before its usage arrived never
  reports). A report with no estimate waiting is ignored (counted, not used).
* **The ratio** (:func:`next_ratio`): each sample is clipped to ``[min_ratio, max_ratio]``,
  so one wild report (a misread of the usage, a request the estimate did not see) moves the
  scale by a bounded step; then smoothed (an exponential moving average of weight
  ``smoothing``), so the scale follows a drift in the content mix (tool output arriving)
  without jumping on each sample's noise. The first sample is taken whole: there is no
  earlier value worth averaging with.
* **The ceiling's scale** (:meth:`TokenCalibration.ceiling_scale`): the hard ceiling must
  hold while the ratio lags behind a change, so it uses the largest of the smoothed ratio
  and the last ``window`` clipped samples, times ``1 + margin``. Before the first report
  it is exactly 1: no usage metrics means today's behaviour.

Nothing here reads a frame or a clock: values in, values out.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from pipecat_summarizer.params.compaction import CalibrationParams


def reported_input(usage: Any) -> tuple[int, int] | None:
    """The gross input tokens and the cached ones in a Pipecat ``LLMTokenUsage``.

    Services differ: OpenAI-compatible ones report ``prompt_tokens`` gross of the cache,
    Anthropic and Bedrock net of it. ``total_tokens`` is gross either way, so the input is
    ``total_tokens - completion_tokens`` (never less than ``prompt_tokens``).

    Args:
        usage: An ``LLMTokenUsage`` (or anything with its fields).

    Returns:
        ``(input_tokens, cached_input_tokens)``, or ``None`` when it carries no usable count.
    """
    prompt = _count(getattr(usage, "prompt_tokens", None))
    total = _count(getattr(usage, "total_tokens", None))
    completion = _count(getattr(usage, "completion_tokens", None))
    if prompt is None:
        return None
    gross = prompt
    if total is not None and completion is not None:
        gross = max(prompt, total - completion)
    cached = _count(getattr(usage, "cache_read_input_tokens", None)) or 0
    if gross <= 0:
        return None
    return gross, min(cached, gross)


def _count(value: Any) -> int | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    if not math.isfinite(value) or value < 0:
        return None
    return int(value)


def next_ratio(ratio: float | None, sample: float, params: CalibrationParams) -> float:
    """The smoothed ratio after one sample (clipped, then averaged).

    Args:
        ratio: The ratio so far (``None`` before the first sample).
        sample: ``reported input / estimate`` of one request.
        params: The bounds and the smoothing weight.

    Returns:
        The new ratio, always within ``[min_ratio, max_ratio]``.
    """
    clipped = clip(sample, params)
    if ratio is None:
        return clipped
    return ratio + params.smoothing * (clipped - ratio)


def clip(sample: float, params: CalibrationParams) -> float:
    """``sample`` within ``[min_ratio, max_ratio]``."""
    return min(params.max_ratio, max(params.min_ratio, sample))


def ceiling_scale(ratio: float | None, recent: Iterable[float], params: CalibrationParams) -> float:
    """The scale the ceiling applies: the largest of ``ratio`` and the ``recent`` clipped
    samples, times ``1 + margin``; exactly 1 before any sample (``ratio`` is ``None``)."""
    if ratio is None:
        return 1.0
    return max([ratio, *recent]) * (1 + params.margin)


def percentile(values: list[float], share: float) -> float:
    """The ``share`` percentile of ``values`` (nearest rank; 0 when empty)."""
    if not values:
        return 0.0
    ordered = sorted(values)
    rank = max(1, math.ceil(share * len(ordered)))
    return ordered[rank - 1]


@dataclass(frozen=True)
class TokenCalibrationReport:
    """The calibration of one call: how far the estimate was from the provider's count.

    Errors are relative to the reported input (``|estimate - reported| / reported``). The
    "after" error uses the scale known when the request was sent (before its own report), so
    it is what the thresholds and the ceiling actually ran on.

    Parameters:
        requests_reported: Usage reports matched with a request's estimate.
        reports_ignored: Usage reports with no request waiting (not used).
        mean_error_before: Mean relative error of the raw estimate.
        mean_error_after: Mean relative error of the calibrated estimate.
        p95_error_before: 95th percentile of the raw estimate's relative error.
        p95_error_after: 95th percentile of the calibrated estimate's relative error.
        ratio: The scale now (reported tokens per estimated token; 1.0 before any report).
        ceiling_scale: The scale the ceiling applies now (margin included).
        input_tokens: Input tokens the provider reported, summed.
        cached_input_tokens: Of them, read from the provider's prompt cache.
        cache_hit_rate: ``cached_input_tokens / input_tokens`` (0 without reports).
    """

    requests_reported: int = 0
    reports_ignored: int = 0
    mean_error_before: float = 0.0
    mean_error_after: float = 0.0
    p95_error_before: float = 0.0
    p95_error_after: float = 0.0
    ratio: float = 1.0
    ceiling_scale: float = 1.0
    input_tokens: int = 0
    cached_input_tokens: int = 0
    cache_hit_rate: float = 0.0

    def log_line(self) -> str:
        """One line of numbers: ``token calibration key=value ...``."""
        fields = {
            "requests": self.requests_reported,
            "ignored": self.reports_ignored,
            "error_before": f"{self.mean_error_before:.3f}",
            "error_after": f"{self.mean_error_after:.3f}",
            "p95_before": f"{self.p95_error_before:.3f}",
            "p95_after": f"{self.p95_error_after:.3f}",
            "ratio": f"{self.ratio:.3f}",
            "ceiling_scale": f"{self.ceiling_scale:.3f}",
            "input_tokens": self.input_tokens,
            "cached_input_tokens": self.cached_input_tokens,
            "cache_hit_rate": f"{self.cache_hit_rate:.3f}",
        }
        return "token calibration " + " ".join(f"{k}={v}" for k, v in fields.items())


class TokenCalibration:
    """One call's calibration: the estimates waiting for a report, the ratio, the errors.

    :meth:`request` when a request is built (its estimate), :meth:`report` when its usage
    arrives. :attr:`scale` is what the thresholds and the cadence multiply estimates by,
    :attr:`ceiling_scale` what the ceiling does; both are exactly 1 until a report matched.

    Args:
        params: The calibration's parameters; ``enabled=False`` keeps both scales at 1.
    """

    def __init__(self, params: CalibrationParams | None = None):
        """Nothing calibrated yet."""
        self.params = params or CalibrationParams()
        self._ratio: float | None = None
        self._recent: deque[float] = deque(maxlen=self.params.window)
        # (estimate, the ceiling-free scale when it was sent), newest last
        self._waiting: deque[tuple[Any, float]] = deque(maxlen=8)
        self._before: list[float] = []
        self._after: list[float] = []
        self._ignored = 0
        self._input = 0
        self._cached = 0
        self.scale = 1.0
        self.ceiling_scale = 1.0

    @property
    def enabled(self) -> bool:
        """The parameters allow calibrating."""
        return self.params.enabled

    @property
    def calibrated(self) -> bool:
        """At least one report matched a request."""
        return self._ratio is not None

    def request(self, estimate: Any) -> None:
        """A request was built; ``estimate`` is its token estimate, or a callable that
        returns it (evaluated only when its report arrives, off the request's path)."""
        if self.params.enabled:
            self._waiting.append((estimate, self.scale))

    def report(self, input_tokens: int, cached_tokens: int = 0) -> bool:
        """The provider's usage for the latest request: update the ratio.

        Args:
            input_tokens: Gross input tokens (see :func:`reported_input`).
            cached_tokens: Of them, read from the prompt cache.

        Returns:
            True if it matched a request (False: ignored).
        """
        if not self._waiting or input_tokens <= 0:
            self._ignored += 1
            return False
        estimate, scale = self._waiting.pop()
        self._waiting.clear()  # older requests never reported: their responses were cut
        if callable(estimate):
            estimate = estimate()
        if not estimate or estimate <= 0:
            self._ignored += 1
            return False
        self._input += input_tokens
        self._cached += min(cached_tokens, input_tokens)
        self._before.append(abs(estimate - input_tokens) / input_tokens)
        self._after.append(abs(estimate * scale - input_tokens) / input_tokens)
        sample = input_tokens / estimate
        self._ratio = next_ratio(self._ratio, sample, self.params)
        self._recent.append(clip(sample, self.params))
        self.scale = self._ratio
        self.ceiling_scale = ceiling_scale(self._ratio, self._recent, self.params)
        return True

    def summary(self) -> TokenCalibrationReport:
        """The call's figures so far."""
        n = len(self._before)
        return TokenCalibrationReport(
            requests_reported=n,
            reports_ignored=self._ignored,
            mean_error_before=sum(self._before) / n if n else 0.0,
            mean_error_after=sum(self._after) / n if n else 0.0,
            p95_error_before=percentile(self._before, 0.95),
            p95_error_after=percentile(self._after, 0.95),
            ratio=self.scale,
            ceiling_scale=self.ceiling_scale,
            input_tokens=self._input,
            cached_input_tokens=self._cached,
            cache_hit_rate=self._cached / self._input if self._input else 0.0,
        )
