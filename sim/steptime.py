"""How long one engine step takes on the GPU.

A step runs the target model once over every running sequence: one token per
plain sequence, ``verify`` tokens per speculative sequence, and the prompt
tokens of requests admitted in this step (chunked prefill). Below the
roofline knee the step is bound by reading the weights; past it, by compute,
which is why wide verification loses at high batch. Drafting comes on top:
EAGLE-3 runs ``depth`` small passes one after the other, DFlash drafts the
whole block in one pass.
"""

from __future__ import annotations

from dataclasses import dataclass

from sim.params import DrafterCost, ModeSpec, SimParams


@dataclass(frozen=True, slots=True)
class StepShape:
    """What one step has to do: ``k`` is the draft length used (0: a plain step).
    Counts may be fractional: the calibration uses steady-state averages."""

    decode_seqs: float
    prefill_tokens: float = 0
    k: int | None = None                   # None: the mode's configured length


class StepTimeModel:
    def __init__(self, params: SimParams) -> None:
        self.params = params

    def target(self, seqs: float, tokens: float, speculative: bool) -> float:
        c = self.params.steps
        roof = max(c.weight_read_s, c.compute_per_token_s * tokens)
        spec = c.spec_per_seq_s * seqs if speculative else 0.0
        return c.fixed_s + c.per_seq_s * seqs + roof + spec

    def step(self, mode: ModeSpec, shape: StepShape) -> float:
        seqs, prefill = shape.decode_seqs, shape.prefill_tokens
        k = self.draft_length(mode, shape.k)
        if mode.method is None or k == 0 or seqs == 0:
            plain = self.target(seqs, seqs + prefill, speculative=False)
            if mode.per_batch_k and seqs > 0:   # a K table at K = 0 is not a plain engine
                plain *= 1.0 + self.params.k_table.k0_overhead(seqs)
            return plain + self._drafter_prefill(mode, prefill)
        verify, passes, width = self.shape_of(mode, k)
        drafter = self.drafter(mode)
        per_token = drafter.flops_share * self.params.steps.compute_per_token_s
        draft = passes * (drafter.pass_s + per_token * seqs * width)
        graphs = self._piecewise_graphs() if mode.per_batch_k else 0.0
        return self.target(seqs, seqs * verify + prefill, speculative=True) + draft + \
            graphs + self._drafter_prefill(mode, prefill)

    def _piecewise_graphs(self) -> float:
        """A K table forces piecewise CUDA graphs: launch time that does not grow
        with the batch, sized as a share of a plain single-stream step."""
        return self.params.k_table.piecewise_graphs * self.target(1, 1, speculative=False)

    @staticmethod
    def draft_length(mode: ModeSpec, k: int | None) -> int:
        if mode.method is None:
            return 0
        if k is None:
            return mode.fixed_k or mode.depth
        return max(0, min(k, mode.depth))

    @staticmethod
    def shape_of(mode: ModeSpec, k: int) -> tuple[int, int, int]:
        """(verified tokens per sequence, draft passes, tokens per sequence per pass)."""
        if not mode.per_batch_k and not mode.fixed_k:
            passes = 1 if mode.method == "dflash" else mode.depth
            return mode.verify, passes, mode.width
        if mode.method == "dflash":      # a block of k + 1 drafted in one pass
            return k + 1, 1, k + 1
        return k + 1, k, 1               # a chain: k passes of one token each

    def drafter(self, mode: ModeSpec) -> DrafterCost:
        assert mode.method is not None
        return self.params.drafters[mode.method]

    def _drafter_prefill(self, mode: ModeSpec, prefill: float) -> float:
        if mode.method is None or prefill == 0:
            return 0.0
        c = self.params.steps
        return c.prefill_drafter_share * c.compute_per_token_s * prefill
