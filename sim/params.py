"""Every number the simulator assumes, in one place, with where it comes from.

Three kinds of values live here:

* **hardware facts** (memory sizes, bandwidth): from data sheets;
* **fitted step-time coefficients**: produced by ``python -m sim calibrate --fit``
  against the published GSM8K table in ``/work/shared/design/ARCHITECTURE.md``
  (Llama-3.1-8B-Instruct, SGLang, one B200) and pasted here; nothing else is
  tuned per cell of that table;
* **acceptance and workload shapes**: derived from the published figures in
  the same document; each derivation is written next to the value.

Units: seconds, tokens, GiB.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType


@dataclass(frozen=True, slots=True)
class Hardware:
    """One B200 serving Llama-3.1-8B-Instruct in bf16 (the published setting)."""

    name: str = "B200 / Llama-3.1-8B-Instruct bf16"
    memory_gib: float = 180.0              # B200 HBM3e usable (data sheet: 192 GB)
    gpu_memory_utilization: float = 0.90   # vLLM's default share of the device
    weights_gib: float = 14.96             # 8.03e9 params x 2 bytes
    activation_reserve_gib: float = 2.0    # CUDA graphs, activations, sampler (assumed)
    # Llama-3.1-8B: 32 layers x 8 KV heads x 128 dims x (K, V) x 2 bytes.
    kv_bytes_per_token: int = 32 * 8 * 128 * 2 * 2
    max_num_seqs: int = 256                # vLLM's default scheduler cap per engine


@dataclass(frozen=True, slots=True)
class StepCoefficients:
    """t_target(seqs, N) = fixed + per_seq*seqs + max(weight_read, compute*N) + spec_per_seq*seqs

    ``N`` counts every token the target runs in the step: one per plain
    sequence, the verified tokens of each speculative sequence, and prefill
    tokens. ``weight_read_s`` is not fitted: 16.06 GB of weights over the
    B200's 8 TB/s. The other values are the least-squares fit (log speedups
    and log plain tokens/s) printed by ``python -m sim calibrate --fit``.
    """

    fixed_s: float = 2.1378e-3             # launch, scheduling, sampling (fitted)
    weight_read_s: float = 2.0e-3          # memory-bound floor: weights / HBM bandwidth
    compute_per_token_s: float = 1.5004e-5 # compute-bound slope, ~1 PFLOP/s effective (fitted)
    per_seq_s: float = 7.2114e-5           # per running sequence: KV reads, bookkeeping (fitted)
    spec_per_seq_s: float = 1.0638e-4     # speculative bookkeeping per sequence (fitted)
    prefill_drafter_share: float = 0.10    # drafter prefill, as a share of the target's
    engine_switch_s: float = 5.0e-5        # time-slicing two processes (assumed, not fitted)


@dataclass(frozen=True, slots=True)
class DrafterCost:
    """One draft pass: ``pass_s + flops_share * compute_per_token_s * tokens in the pass``.

    ``pass_s`` (launches, the drafter's weight reads) is fitted; the per-token part is
    not: it is the target's fitted compute time per token scaled by the drafter's
    FLOPs per drafted token over the target's (``flops_share``, from the layer shapes
    below), so that drafting costs grow with the tokens drafted (batch x block) as
    the hardware says, whatever the fit would prefer. Before this constraint the fit
    put DFlash's per-token cost at 1.4e-9 s, i.e. free: DFlash looked as cheap at
    c = 128 as at c = 1."""

    pass_s: float
    flops_share: float
    weights_gib: float                     # memory the drafter takes from the KV cache
    kv_share: float                        # drafter KV per token, as a share of the target's


@dataclass(frozen=True, slots=True)
class KTableCosts:
    """What vLLM's per-batch K table (``num_speculative_tokens_per_batch_size``)
    costs beside drafting. Source: vLLM issue 49548 (Gemma-4-31B, one H100):
    a table at K = 0 runs +7% TPOT at concurrency 2 and +22% at 189 against an
    engine with no speculation (log-linear between, clamped outside), and a
    table forces piecewise CUDA graphs, about +14% at one stream: modelled as
    a fixed time per K > 0 step, 14% of a plain single-stream step (launch
    cost does not grow with the batch). ``chain_accept_ratio``: a chain
    drafter accepts this share of the accepted drafts of the top-10 tree the
    published tau was measured with (assumed: the EAGLE papers report chains
    well below trees; 0.8 is a documented guess, the report shows 1.0 too)."""

    k0_low: float = 0.07
    k0_low_batch: int = 2
    k0_high: float = 0.22
    k0_high_batch: int = 189
    piecewise_graphs: float = 0.14
    chain_accept_ratio: float = 0.8

    def k0_overhead(self, batch: float) -> float:
        if batch <= self.k0_low_batch:
            return self.k0_low
        if batch >= self.k0_high_batch:
            return self.k0_high
        span = math.log(self.k0_high_batch / self.k0_low_batch)
        return self.k0_low + (self.k0_high - self.k0_low) * math.log(
            batch / self.k0_low_batch) / span


# Fitted per-pass times (``python -m sim calibrate --fit``).
EAGLE3_PASS_S = 7.483e-4
DFLASH_PASS_S = 3.0779e-3


def _drafters() -> Mapping[str, DrafterCost]:
    return MappingProxyType({
        # One decoder layer + 32k-vocabulary head; 7 sequential passes per step. Per
        # drafted token: attention from the 2 x 4096 input (q 8192x4096, k and v
        # 8192x1024, o 4096x4096: 84 M), MLP 3 x 4096 x 14336 (176 M), head 4096 x 32000
        # (131 M): 391 M weights against the target's 7.50 B (8.03 B less the 0.53 B
        # input embedding, which is a lookup): 0.052 of its FLOPs.
        "eagle3": DrafterCost(pass_s=EAGLE3_PASS_S, flops_share=0.052, weights_gib=0.8,
                              kv_share=1 / 32),
        # A few layers drafting the whole block in one pass (needs target features):
        # 2.0 GiB of weights is five Llama-3.1-8B layers (218 M each), and every block
        # position also runs the target's shared LM head (4096 x 128256, 525 M):
        # 1.62 B per drafted token, 0.216 of the target's FLOPs.
        "dflash": DrafterCost(pass_s=DFLASH_PASS_S, flops_share=0.216, weights_gib=2.0,
                              kv_share=5 / 32),
    })


@dataclass(frozen=True, slots=True)
class ModeSpec:
    """One engine configuration, as the gateway would configure it.

    ``depth``: sequential draft passes (EAGLE-3 ``num_steps``; DFlash 1) and the
    most draft tokens one step can accept. ``width``: tokens per sequence in
    each draft pass (EAGLE-3 ``topk``; DFlash the block). ``verify``: tokens
    per sequence the target verifies (EAGLE-3 ``num_draft_tokens``; DFlash
    the block; chains ``K + 1``). ``family`` keys the acceptance table.
    """

    name: str
    method: str | None = None
    depth: int = 0
    width: int = 1
    verify: int = 1
    family: str = ""
    per_batch_k: bool = False              # K may change per step (vLLM's per-batch table)
    # A chain engine with a fixed draft length (vLLM's ``num_speculative_tokens``, no
    # table, full CUDA graphs): K passes of one token each; acceptance still from the
    # family's tau at ``depth`` (a chain's share of it), as for a K table at that K.
    fixed_k: int = 0

    @property
    def chain_drafted(self) -> bool:
        """Whether it drafts a chain (EAGLE-3 with one token per pass) while the
        published tau of its family was measured with a top-10 tree."""
        return self.method == "eagle3" and self.width == 1

    @property
    def num_speculative_tokens(self) -> int:
        """What the policy is told: tokens a step verifies beyond the bonus token."""
        return self.verify - 1


PLAIN = ModeSpec("standard")
EAGLE3_10 = ModeSpec("eagle3", "eagle3", depth=7, width=10, verify=10, family="eagle3_10")
EAGLE3_60 = ModeSpec("eagle3_wide", "eagle3", depth=7, width=10, verify=60, family="eagle3_60")
DFLASH_10 = ModeSpec("dflash", "dflash", depth=9, width=10, verify=10, family="dflash_10")
# vLLM engines with ``num_speculative_tokens_per_batch_size``: chain drafting whose
# K comes from a table by batch size (K = 0 steps are plain steps plus the table's
# cost, ``KTableCosts``).
EAGLE3_CHAIN = ModeSpec("eagle3_dynk", "eagle3", depth=7, width=1, verify=8,
                        family="eagle3_10", per_batch_k=True)
DFLASH_CHAIN = ModeSpec("dflash_dynk", "dflash", depth=9, width=10, verify=10,
                        family="dflash_10", per_batch_k=True)
# vLLM's own EAGLE-3 as most deployments run it: a chain of K = 3 (no tree, no table).
EAGLE3_K3 = ModeSpec("eagle3_chain3", "eagle3", depth=7, width=1, verify=4,
                     family="eagle3_10", fixed_k=3)

STATIC_MODES: tuple[ModeSpec, ...] = (PLAIN, EAGLE3_10, EAGLE3_60, DFLASH_10, EAGLE3_K3)
# SpecGate on one GPU: every static mode as an engine with an equal memory share, the
# chain K = 3 included (docs/simulator.md, "vLLM's chain EAGLE-3").
AUTO_MODES: tuple[ModeSpec, ...] = STATIC_MODES


@dataclass(frozen=True, slots=True)
class WorkloadClass:
    """Lengths are lognormal (mean, sd in tokens), clipped to [lo, hi]."""

    name: str
    prompt_mean: float
    prompt_sd: float
    output_mean: float
    output_sd: float
    output_lo: int
    output_hi: int
    # Mean accepted length (bonus token included) per acceptance family.
    tau: Mapping[str, float]
    # Whether the client sends max_tokens (its value: output_hi); else left open.
    sends_max_tokens: bool = False


# Published GSM8K mean accepted lengths (ARCHITECTURE.md table, last column).
HIGH_TAU: Mapping[str, float] = MappingProxyType(
    {"eagle3_10": 3.49, "eagle3_60": 4.55, "dflash_10": 4.32})
# Open chat, scaled from the same table by published speedup ratios (at batch 1
# the speedup is proportional to tau): DFlash on Qwen3-8B gives 2.75x on
# MT-Bench vs 6.08x on MATH-500 (x 0.452); EAGLE-3 spans 1.76x-2.02x across the
# same benchmarks, taken as chat at the bottom, math at the top (x 0.871).
LOW_TAU: Mapping[str, float] = MappingProxyType(
    {"eagle3_10": round(3.49 * 1.76 / 2.02, 2), "eagle3_60": round(4.55 * 1.76 / 2.02, 2),
     "dflash_10": round(4.32 * 2.75 / 6.08, 2)})

# GSM8K: ~150-token chat-templated question; Llama-3.1-8B-Instruct answers with a
# ~220-token chain of thought (assumed from typical CoT lengths; not published).
MATH = WorkloadClass("math", 150, 40, 220, 80, 32, 512, HIGH_TAU)
CHAT = WorkloadClass("chat", 400, 200, 350, 200, 16, 2048, LOW_TAU)
# Code shares the high-acceptance figures (DFlash and EAGLE-3 report code close
# to math); long outputs.
CODE = WorkloadClass("code", 300, 100, 900, 300, 64, 2048, HIGH_TAU)
# Short answers (classification, extraction): chat acceptance, max_tokens sent.
SHORT = WorkloadClass("short", 300, 100, 10, 5, 1, 16, LOW_TAU, sends_max_tokens=True)

CLASSES: Mapping[str, WorkloadClass] = MappingProxyType(
    {c.name: c for c in (MATH, CHAT, CODE, SHORT)})


@dataclass(frozen=True, slots=True)
class SimParams:
    hardware: Hardware = field(default_factory=Hardware)
    steps: StepCoefficients = field(default_factory=StepCoefficients)
    drafters: Mapping[str, DrafterCost] = field(default_factory=_drafters)
    k_table: KTableCosts = field(default_factory=KTableCosts)


# The published table the step-time model is fitted to (ARCHITECTURE.md).
PUBLISHED_CONCURRENCY: tuple[int, ...] = (1, 4, 8, 16, 32)
PUBLISHED_PLAIN_TPS: tuple[float, ...] = (249, 923, 1739, 3245, 5349)
PUBLISHED_SPEEDUP: Mapping[str, tuple[float, ...]] = MappingProxyType({
    "eagle3": (1.6, 1.5, 1.4, 1.2, 1.0),
    "eagle3_wide": (1.9, 1.6, 1.3, 0.9, 0.6),
    "dflash": (2.4, 2.2, 2.1, 1.8, 1.6),
})
