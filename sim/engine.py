"""One simulated vLLM engine: a scheduler with continuous batching, a KV cache
of fixed size, and a stat logger that records what the real one records.

The stat logger reuses ``engines.stats`` (the step-time profile by batch
bucket and the acceptance window the gateway's vLLM logger keeps), so the
policy sees signals of exactly the same shape and smoothing as in production.
"""

from __future__ import annotations

import random
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field

from engines.stats import AcceptanceWindow, PrefillCost, StepTimeProfile
from sim.acceptance import AcceptanceSampler, alpha_for, engine_tau
from sim.params import ModeSpec, SimParams
from sim.steptime import StepShape, StepTimeModel
from sim.workload import SimRequest

GIB = 1024 ** 3


def kv_capacity_tokens(params: SimParams, mode: ModeSpec, memory_share: float) -> int:
    """Tokens of KV cache an engine gets from its share of the device."""
    hw = params.hardware
    drafter = params.drafters.get(mode.method) if mode.method is not None else None
    free = memory_share * hw.memory_gib - hw.weights_gib - hw.activation_reserve_gib
    free -= drafter.weights_gib if drafter is not None else 0.0
    per_token = hw.kv_bytes_per_token * (1.0 + (drafter.kv_share if drafter else 0.0))
    return max(0, int(free * GIB / per_token))


@dataclass(slots=True)
class StatLogger:
    """What the gateway's per-engine vLLM stat logger collects."""

    steps: StepTimeProfile = field(default_factory=StepTimeProfile)
    prefill: PrefillCost = field(default_factory=PrefillCost)
    window: AcceptanceWindow = field(default_factory=AcceptanceWindow)
    num_steps: int = 0
    busy_s: float = 0.0


@dataclass(frozen=True, slots=True)
class StepResult:
    duration: float
    finished: list[SimRequest]
    tokens: int
    batch: int


class SimEngine:
    def __init__(self, mode: ModeSpec, params: SimParams, memory_share: float,
                 rng: random.Random, k_table: Mapping[int, int] | None = None,
                 gpu_group: str = "0") -> None:
        self.mode = mode
        self.name = mode.name
        self.gpu_group = gpu_group
        self.model = StepTimeModel(params)
        self.kv_capacity = kv_capacity_tokens(params, mode, memory_share)
        self.max_num_seqs = params.hardware.max_num_seqs
        self.rng = rng
        # vLLM's ``num_speculative_tokens_per_batch_size``: batch -> K (largest key <= batch).
        self.k_table = dict(sorted((k_table or {}).items()))
        self.waiting: deque[SimRequest] = deque()
        self.running: list[SimRequest] = []
        self.stats = StatLogger()
        self._samplers: dict[tuple[str, int], AcceptanceSampler] = {}

    @property
    def k_schedule(self) -> tuple[tuple[int, int, int], ...]:
        """The table as vLLM's ``num_speculative_tokens_per_batch_size`` ranges."""
        firsts = list(self.k_table)
        return tuple((first, (firsts[i + 1] - 1) if i + 1 < len(firsts) else 1 << 20,
                      self.k_table[first]) for i, first in enumerate(firsts))

    @property
    def busy(self) -> bool:
        return bool(self.running or self.waiting)

    @property
    def batch_size(self) -> int:
        return len(self.running) + len(self.waiting)

    @property
    def kv_used(self) -> int:
        return sum(self._kv_need(r) for r in self.running)

    def submit(self, request: SimRequest) -> None:
        request.mode = self.name
        self.waiting.append(request)

    def draft_length(self, batch: int) -> int:
        k = self.model.draft_length(self.mode, None)
        for threshold, table_k in self.k_table.items():
            if batch >= threshold:
                k = table_k
        return self.model.draft_length(self.mode, k)

    def step(self, now: float) -> StepResult:
        """Admit what fits, run one step, and return what it produced."""
        self._preempt_if_full()
        prefill, new = self._admit(now)
        decoding = self.running[:len(self.running) - len(new)]   # admitted ones go last
        k = self.draft_length(len(self.running))
        duration = self.model.step(self.mode, StepShape(len(decoding), prefill, k))
        end = now + duration
        tokens = 0
        for r in new:                      # prefill (or recompute) yields one token
            r.generated += 1
            tokens += 1
            if r.first_token_at is None:
                r.first_token_at = end
        for r in decoding:
            tokens += self._advance(r, k, end)
        finished = [r for r in self.running if r.generated >= r.output_tokens]
        for r in finished:
            r.finished_at = end
        if finished:
            self.running = [r for r in self.running if r.finished_at is None]
        if not new and decoding:   # the real logger keeps decode-only steps
            self.stats.steps.add(len(decoding), duration)
        elif new:                  # and times a prefill against them
            self.stats.prefill.add(len(new), duration, len(decoding), self.stats.steps)
        self.stats.num_steps += 1
        self.stats.busy_s += duration
        return StepResult(duration, finished, tokens, len(decoding) + len(new))

    def _advance(self, r: SimRequest, k: int, end: float) -> int:
        before = r.generated
        if k == 0:
            r.generated += 1
        else:
            accepted = self._sampler(r, k).sample(self.rng)
            verify, _, _ = self.model.shape_of(self.mode, k)
            r.drafts += 1
            r.draft_tokens += verify - 1
            r.accepted += accepted
            r.generated = min(r.generated + accepted + 1, r.output_tokens)
            self.stats.window.add(end, 1, verify - 1, accepted)
        return r.generated - before

    def replay(self, r: SimRequest) -> tuple[int, int, int]:
        """(drafts, draft tokens, accepted) this engine would have had on ``r``'s whole
        answer alone: the gateway replays prompt lookup on every finished answer
        (``engines/prompt_lookup.py``), so a prompt-lookup engine learns from
        requests it never served."""
        k = self.draft_length(1)
        rng = random.Random(r.id)       # the engine's own draws stay as they were
        drafts = draft_tokens = accepted = 0
        generated = 1
        if k > 0:
            verify, _, _ = self.model.shape_of(self.mode, k)
            while generated < r.output_tokens:
                got = self._sampler(r, k).sample(rng)
                drafts += 1
                draft_tokens += verify - 1
                accepted += got
                generated += got + 1
        return drafts, draft_tokens, accepted

    def _sampler(self, r: SimRequest, k: int) -> AcceptanceSampler:
        key = (r.cls.name, k)
        sampler = self._samplers.get(key)
        if sampler is None:
            tau = engine_tau(self.mode, r.cls.tau[self.mode.family], self.model.params)
            alpha = alpha_for(tau, self.mode.depth)
            sampler = AcceptanceSampler(alpha, k)
            self._samplers[key] = sampler
        return sampler

    def _kv_need(self, r: SimRequest) -> int:
        return r.prompt_tokens + r.generated + self.mode.verify

    def _admit(self, now: float) -> tuple[int, list[SimRequest]]:
        used = self.kv_used
        prefill = 0
        new: list[SimRequest] = []
        while self.waiting and len(self.running) < self.max_num_seqs:
            r = self.waiting[0]
            need = self._kv_need(r)
            if used + need > self.kv_capacity and self.running:
                break                      # wait for memory; alone it must run anyway
            self.waiting.popleft()
            used += need
            # A preempted request recomputes its prompt and what it had generated.
            prefill += r.prompt_tokens + r.generated
            if r.admitted_at is None:
                r.admitted_at = now
            self.running.append(r)
            new.append(r)
        return prefill, new

    def _preempt_if_full(self) -> None:
        """vLLM's recompute preemption: the newest request goes back to the queue."""
        while len(self.running) > 1 and self.kv_used > self.kv_capacity:
            victim = self.running.pop()
            victim.preemptions += 1
            self.waiting.appendleft(victim)
