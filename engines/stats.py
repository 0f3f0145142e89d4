"""Live load and speculative-decoding counters of one engine."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True, slots=True)
class SpecDecodeCounters:
    """Cumulative counters since the engine started."""

    num_drafts: int = 0
    num_draft_tokens: int = 0
    num_accepted_tokens: int = 0
    accepted_per_position: tuple[int, ...] = ()

    @property
    def acceptance_rate(self) -> float | None:
        if not self.num_draft_tokens:
            return None
        return self.num_accepted_tokens / self.num_draft_tokens


@dataclass(frozen=True, slots=True)
class EngineStats:
    mode: str
    up: bool
    # Requests the adapter has handed to the engine and not yet seen finish:
    # exact and immediate, unlike the scheduler's counts that arrive per step.
    in_flight: int = 0
    running: int = 0
    waiting: int = 0
    kv_cache_usage: float = 0.0
    spec: SpecDecodeCounters | None = None
    # Acceptance over the recent window (None until something was drafted).
    recent_acceptance_rate: float | None = None
    recent_mean_accepted_length: float | None = None
    # Decode step time by batch size: ((batch bucket, mean seconds, samples), ...).
    step_profile: tuple[tuple[int, float, int], ...] = ()
    # Measured device seconds to prefill a request (``PrefillCost``); None until a
    # prefill step was timed.
    prefill_s: float | None = None
    # What each draft token a step verifies costs, and the draft tokens per sequence
    # ``step_profile`` is reported at (``StepTimeProfile``); 0: unmeasured or constant.
    draft_token_s: float = 0.0
    step_drafted: float = 0.0

    @property
    def batch_size(self) -> int:
        """The batch a new request would join."""
        return max(self.running + self.waiting, self.in_flight)

    def load(self) -> dict[str, float]:
        """The engine's load as every reader shows it (``/ready``, ``/metrics``, the
        replica load shared through the policy store): ``LOAD_FIELDS`` as numbers."""
        return {name: float(getattr(self, name)) for name in LOAD_FIELDS}

    def report(self) -> dict[str, Any]:
        """``load()`` with its natural types, plus the speculative-decoding counters:
        what ``/ready`` shows per engine."""
        body: dict[str, Any] = {name: getattr(self, name) for name in LOAD_FIELDS}
        body["kv_cache_usage"] = round(self.kv_cache_usage, 4)
        if self.spec is not None:
            body["spec_decode"] = {
                "drafts": self.spec.num_drafts, "draft_tokens": self.spec.num_draft_tokens,
                "accepted_tokens": self.spec.num_accepted_tokens,
                "recent_acceptance_rate": self.recent_acceptance_rate}
        return body


LOAD_FIELDS = ("up", "running", "waiting", "in_flight", "kv_cache_usage")


@dataclass(slots=True)
class _Step:
    at: float
    drafts: int
    draft_tokens: int
    accepted: int


@dataclass(slots=True)
class AcceptanceWindow:
    """Acceptance over the last ``horizon_s`` seconds of verification steps.

    A window rather than the lifetime total so that the number follows the
    traffic the engine serves now, not what it served an hour ago.
    """

    horizon_s: float = 60.0
    max_steps: int = 4096
    _steps: deque[_Step] = field(default_factory=deque)

    def add(self, at: float, drafts: int, draft_tokens: int, accepted: int) -> None:
        if drafts <= 0:
            return
        self._steps.append(_Step(at, drafts, draft_tokens, accepted))
        while len(self._steps) > self.max_steps:
            self._steps.popleft()

    def snapshot(self, now: float) -> tuple[float | None, float | None]:
        """(acceptance rate, mean accepted length incl. bonus token)."""
        while self._steps and now - self._steps[0].at > self.horizon_s:
            self._steps.popleft()
        drafts = sum(s.drafts for s in self._steps)
        draft_tokens = sum(s.draft_tokens for s in self._steps)
        accepted = sum(s.accepted for s in self._steps)
        if not drafts or not draft_tokens:
            return None, None
        return accepted / draft_tokens, 1.0 + accepted / drafts


def batch_bucket(batch: int) -> int:
    """1, 2, 3, 4, 6, 8, 12, 16, 24, 32, ...: fine where step time bends, coarse beyond."""
    if batch <= 4:
        return max(batch, 1)
    power = 1 << (batch.bit_length() - 1)
    return power if batch < power + power // 2 else power + power // 2


@dataclass(slots=True)
class StepTimeProfile:
    """Mean decode-step time per batch bucket, an exponential moving average so
    that it follows the machine (thermal, co-located load) without a window.

    Each bucket reports the mean batch of its samples, not its lower bound: a
    bucket spans up to half its size (48 holds 48..63), and a time measured at 63
    but placed at 48 doubles the slope the policy extrapolates from it.

    Where a step's draft tokens are given (``add``'s ``draft_tokens``), the profile
    also measures what each draft token a step verifies costs (``draft_token_s``): a
    least-squares slope of step time on draft tokens among steps of one batch size.
    N-gram drafts only where the text repeats, so its step at one batch costs more
    on copy-heavy prompts than on free text; each bucket is then reported at the
    engine's mean draft tokens per sequence (``drafted``), and the policy prices a
    class at its own (docs/policy.md, "n-gram's step depends on the class"). A
    drafter that drafts ``K`` tokens every step has no spread to measure: its slope
    stays 0 and its profile is as timed.

    The cost of a draft token is the hardware's, not the traffic's, so the slope has a
    longer memory than the profile: each batch size's steps are fitted in windows of
    ``SLOPE_WINDOW`` (local in time, so the machine's drift between windows does not
    bias it), and each window's slope joins a precision-weighted mean (weight: the
    window's spread of draft tokens over its residual variance). A window without
    spread (free text, where n-gram drafts on few steps) adds nothing and forgets
    nothing; a noisy one weighs little beside a copy-heavy window's clear slope."""

    alpha: float = 0.05
    # bucket -> [mean seconds, samples, mean batch, mean draft tokens per sequence]
    _buckets: dict[int, list[float]] = field(default_factory=dict)
    # exact batch -> the open window's sums [n, D, s, D*D, D*s, s*s] (D: the step's
    # draft tokens): the slope is taken within a batch size, so that the batch's own
    # cost does not read as the drafts'.
    _windows: dict[int, list[float]] = field(default_factory=dict)
    # The closed windows' slopes: [sum of precision x slope, sum of precision].
    _slope: list[float] = field(default_factory=lambda: [0.0, 0.0])
    _drafted: list[float] = field(default_factory=lambda: [0.0, 0.0])   # [mean, samples]

    # Steps of one batch size fitted together; what the slope's mean keeps of the
    # windows before at each window with spread (about 20 such windows' memory).
    SLOPE_WINDOW = 32
    SLOPE_MEMORY = 0.95
    # Residual noise never read below this share of the step (timer resolution), so
    # that a window fitting exactly does not outweigh every other.
    NOISE_FLOOR = 1e-3

    def add(self, batch: int, seconds: float, draft_tokens: int | None = None) -> None:
        if batch <= 0 or seconds <= 0:
            return
        per_seq = draft_tokens / batch if draft_tokens is not None else 0.0
        entry = self._buckets.setdefault(batch_bucket(batch),
                                         [seconds, 0.0, float(batch), per_seq])
        n = entry[1] + 1
        # Plain mean for the first samples, then the moving average.
        weight = max(1.0 / n, self.alpha)
        entry[0] += weight * (seconds - entry[0])
        entry[2] += weight * (batch - entry[2])
        entry[3] += weight * (per_seq - entry[3])
        entry[1] = n
        if draft_tokens is None:
            return
        drafted = self._drafted
        drafted[1] += 1
        drafted[0] += max(1.0 / drafted[1], self.alpha) * (per_seq - drafted[0])
        w = self._windows.setdefault(batch, [0.0] * 6)
        d = float(draft_tokens)
        for i, value in enumerate((1.0, d, seconds, d * d, d * seconds, seconds * seconds)):
            w[i] += value
        if w[0] >= self.SLOPE_WINDOW:
            self._close_window(w)
            w[:] = [0.0] * 6

    def _close_window(self, w: list[float]) -> None:
        """Fold one batch size's window of steps into the slope's precision-weighted
        mean, if its draft tokens varied."""
        n, sd, ss, sdd, sds, sss = w
        sxx = sdd - sd * sd / n
        if sxx <= 1e-9:
            return
        slope = (sds - sd * ss / n) / sxx
        resid = (sss - ss * ss / n - slope * slope * sxx) / max(n - 2, 1.0)
        noise = max(resid, (self.NOISE_FLOOR * ss / n) ** 2)
        precision = sxx / noise
        acc = self._slope
        acc[0] = self.SLOPE_MEMORY * acc[0] + precision * slope
        acc[1] = self.SLOPE_MEMORY * acc[1] + precision

    @property
    def draft_token_s(self) -> float:
        """Seconds a step spends per draft token it verifies (never negative); 0 until
        a window of one batch size's steps has seen its draft tokens vary."""
        total, precision = self._slope
        return max(total / precision, 0.0) if precision > 0 else 0.0

    @property
    def drafted(self) -> float:
        """Mean draft tokens per sequence a timed step verified (0 without drafts):
        what every bucket of ``snapshot`` is reported at."""
        return self._drafted[0]

    def snapshot(self) -> tuple[tuple[int, float, int], ...]:
        """(mean batch, mean seconds, samples) per bucket; with a measured cost per
        draft token, each bucket's seconds as at ``drafted`` draft tokens per
        sequence rather than its own mean, so that buckets measured on different
        traffic line up."""
        beta, drafted = self.draft_token_s, self.drafted
        return tuple((round(mean_batch), mean + beta * mean_batch * (drafted - per_seq), int(n))
                     for _, (mean, n, mean_batch, per_seq) in sorted(self._buckets.items()))

    def seconds_at(self, batch: int) -> float | None:
        """The mean decode step at ``batch``'s bucket, as timed; None while unmeasured."""
        entry = self._buckets.get(batch_bucket(batch))
        return entry[0] if entry is not None and entry[1] > 0 else None


@dataclass(slots=True)
class PrefillCost:
    """Seconds of device time an engine spends prefilling one request, measured (a
    moving average over the steps that prefilled).

    A step that prefills rides along the decodes of the running batch; what it takes
    beyond a decode-only step at that batch (``StepTimeProfile``) is the prefill's.
    Measured per engine because it is not the prior's: a CPU prefills far slower
    against its decode than a GPU does, and a speculative engine prefills its drafter
    too. Per request, not per prompt token: what a prefill computes depends on the
    prefix cache (a prompt found there schedules a token or two, yet costs a forward
    pass), which the gateway cannot see, so the mean over the traffic served is the
    better guess for the next request. Every request a batch holds waits through the
    prefills of the others, so on short answers this is what makes speculation lose
    at a batch where its decode steps alone would still win (docs/policy.md)."""

    alpha: float = 0.05
    seconds: float | None = None         # None until a prefill step was timed
    samples: int = 0

    def add(self, requests: int, seconds: float, decodes: int,
            profile: StepTimeProfile) -> None:
        """A step of ``seconds`` that prefilled ``requests`` beside ``decodes`` running
        ones. Skipped without any: nothing then ran on from the step before, so the
        engine may have sat idle in between."""
        decode = profile.seconds_at(decodes) if decodes > 0 else None
        if requests <= 0 or seconds <= 0 or decode is None:
            return
        each = max(seconds - decode, 0.0) / requests
        self.samples += 1
        weight = max(1.0 / self.samples, self.alpha)
        self.seconds = each if self.seconds is None else \
            self.seconds + weight * (each - self.seconds)
