"""Live-tunable settings of the adaptive policy (validated; stored in the policy store)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class MethodPrior(BaseModel):
    """What we assume about a method before measuring it."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    mean_accepted_length: float = Field(ge=1.0, le=64.0, description="tokens per step, "
                                        "bonus token included")
    draft_overhead: float = Field(ge=0.0, le=20.0, description="extra cost of one "
                                  "speculative step over a plain step at the same batch, as "
                                  "a fraction of the plain step's fixed cost (drafting passes)")
    prefill_overhead: float = Field(0.1, ge=0.0, le=10.0, description="extra prefill work "
                                    "for the drafter, as a fraction of the target's prefill")


def _default_priors() -> dict[str, MethodPrior]:
    # Mean accepted lengths from the published GSM8K table (EAGLE-3 (10) 3.49,
    # DFlash 4.32), discounted for open-ended text; n-gram from prompt-lookup
    # reports on chat traffic. Draft overheads: EAGLE-3 runs K sequential
    # draft passes, DFlash drafts a whole block in one pass.
    return {
        "eagle3": MethodPrior(mean_accepted_length=2.5, draft_overhead=0.35),
        "dflash": MethodPrior(mean_accepted_length=3.0, draft_overhead=0.2),
        "ngram": MethodPrior(mean_accepted_length=1.3, draft_overhead=0.02, prefill_overhead=0.0),
        "draft_model": MethodPrior(mean_accepted_length=2.0, draft_overhead=0.5),
    }


class AdaptiveSettings(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False, validate_assignment=True)

    enabled_modes: list[str] | None = Field(
        None, description="modes auto may choose (None: all configured); forcing a mode "
                          "with x-spec-mode works either way")
    exploration_share: float = Field(0.03, ge=0.0, le=0.5, description="share of auto "
                                     "traffic sent to the least-measured mode")
    exploration_fresh_steps: float = Field(
        200.0, ge=0.0, le=1_000_000.0, description="a mode with at least this much "
        "decayed evidence (verification steps) on the request's class is fresh and not "
        "explored; evidence halves every acceptance_half_life_s, so a mode that stops "
        "winning is explored again once its estimate has aged")
    exploration_max_cost_ratio: float = Field(
        3.0, ge=1.0, le=100.0, description="never explore a mode estimated to cost more "
                                           "than this times the best")
    speculation_margin: float = Field(
        0.15, ge=0.0, le=1.0, description="a speculative mode is chosen over plain decoding "
        "only when its estimated cost is lower by more than this fraction: its estimate "
        "rests on a predicted acceptance and a step profile taken on other prompts, plain "
        "decoding's on neither, and a wrong guess loses speed that not speculating never "
        "loses; 0: compared as estimated")
    speculation_margin_steps: float = Field(
        200.0, ge=0.0, le=1_000_000.0, description="the request's class's own evidence on a "
        "speculative mode (decayed verification steps) at which its speculation_margin has "
        "halved: the margin stands for an acceptance predicted rather than measured, and "
        "falls as the class measures it (margin x steps' / (steps' + evidence)); 0: the "
        "margin stays whole")
    hysteresis: float = Field(0.1, ge=0.0, le=1.0, description="keep the previous winner "
                              "unless another mode is cheaper by more than this fraction")
    hysteresis_floor: float = Field(
        0.03, ge=0.0, le=1.0, description="the margin a challenger needs once it has led "
        "for switch_lead_s without a break: a lead that lasts is not noise, and holding the "
        "old mode against it costs on every request (at most hysteresis)")
    switch_lead_s: float = Field(
        10.0, ge=0.0, le=3600.0, description="seconds of uninterrupted lead over which the "
        "margin a challenger needs falls from hysteresis to hysteresis_floor; 0: hysteresis "
        "alone")
    drain_payback: float = Field(
        0.5, ge=0.0, le=100.0, description="a challenger beyond the margin still waits "
        "while the held engine has requests, until its lead times how long it has led "
        "exceeds this times the device time the held engine's drain would cost (it keeps "
        "stepping beside the new mode until its last request ends) or, where a switch "
        "moves its group's requests, the prefills of the requests it moves; 0: no wait")
    batch_memory_s: float = Field(
        2.0, ge=0.0, le=600.0, description="a device group is priced at no less than its "
        "batch averaged over about this many seconds: closed-loop clients arrive in "
        "waves, and a wave's first request, finding the group empty, would be priced as if "
        "alone while the rest of the wave follows within milliseconds; 0: the batch now")
    externality_weight: float = Field(1.0, ge=0.0, le=10.0, description="weight of the delay "
                                      "a request adds to the others sharing its device")
    unmeasured_exploration_boost: float = Field(
        15.0, ge=1.0, le=100.0, description="exploration_share is multiplied by this (at "
        "most 1) while a speculative mode has less than prior_draft_steps of evidence on the "
        "request's class and its engine is idle, so that each mode is measured early; "
        "exploration_share 0 still turns all exploration off")
    consolidate: bool = Field(True, description="compare modes as if each took its "
                              "device's whole batch (where traffic converges once new requests "
                              "follow) instead of the marginal cost of one more request, which "
                              "locks in the first winner or keeps a device split")
    group_mix: bool = Field(True, description="with consolidate: price each mode on the "
                            "mix of workload classes in flight in its device group (this "
                            "request included), so that the group converges on the one mode "
                            "that serves the whole mix best; false: on this request's class "
                            "alone, which splits a shared device between classes")
    mix_prior_requests: float = Field(
        2.0, ge=0.0, le=10_000.0, description="with group_mix: weight, in requests, of the "
        "recent mix of auto requests (their classes over about mix_memory_s) in a busy "
        "group's mix; the few requests in flight at low concurrency say little about what "
        "comes next")
    mix_memory_s: float = Field(
        2.0, ge=0.0, le=3600.0, description="the recent mix counts the auto requests "
        "that arrived over about this many seconds (each decays by exp(-age / this)): "
        "what traffic is made of now, not over the learning half-life, which kept a "
        "group on the previous phase's mode after the traffic changed")
    cold_start_discount: float = Field(
        0.5, ge=0.0, le=1.0, description="before a (mode, class) has evidence, the prior's "
        "gain (mean_accepted_length - 1) is scaled by 1 - this when choosing where traffic "
        "goes, until the mode's level measured on every class replaces it; a drafter "
        "card's held-out figure for a kind of prompt is discounted alike until the kind "
        "is measured; exploration uses the full prior")
    acceptance_half_life_s: float = Field(300.0, gt=0.0, le=86_400.0, description="learned "
                                          "acceptance and output lengths decay with this "
                                          "half-life, so the policy follows changing traffic")
    prior_draft_steps: float = Field(20.0, ge=0.0, le=1_000_000.0, description="how many "
                                     "measured verification steps the prior is worth")
    replayed_steps_per_request: float = Field(
        16.0, ge=0.0, le=1_000_000.0, description="for a mode whose acceptance is replayed "
        "on every finished answer (prompt lookup), an answer's verification steps weigh "
        "against the prior as at most this many: the steps of one answer accept alike "
        "(one answer repeats its prompt, the next does not), so a class's first answer "
        "would otherwise outweigh the prior on its own; 0: every step counts")
    default_output_tokens: int = Field(256, ge=1, le=1_000_000, description="expected output "
                                       "length before a class has finished requests")
    # Prior step-time model, t(b) = fixed_s + per_seq_s * b
    # + per_token_s * max(tokens in the step - knee_tokens, 0);
    # replaced by each engine's measured profile once it has one.
    step_fixed_s: float = Field(0.008, gt=0.0, le=10.0, description="prior step time: the "
                                "fixed part of one decode step, before an engine has "
                                "measured its own")
    step_per_token_s: float = Field(0.0002, ge=0.0, le=1.0, description="prior step time: "
                                    "per token the step verifies beyond step_knee_tokens")
    step_per_seq_s: float = Field(0.0, ge=0.0, le=1.0, description="prior step time: per "
                                  "running sequence whatever it verifies (KV reads, "
                                  "bookkeeping), which slows plain decoding with batch even "
                                  "while the step is memory-bound")
    step_knee_tokens: float = Field(
        0.0, ge=0.0, le=1_000_000.0, description="tokens per step below which a step is "
        "bound by reading the weights (weights / memory bandwidth over compute per token): "
        "step_per_token_s counts only the tokens beyond it; 0 counts every token")
    step_traffic_samples: int = Field(
        64, ge=0, le=1_000_000, description="steps a speculative engine's profile must "
        "have timed at a batch (more than its warm-up gives) for its own measurement there "
        "to stand without the bound on its verified tokens; 0 always applies the bound")
    prefill_per_token_s: float = Field(0.00005, ge=0.0, le=1.0, description="prior prefill "
                                       "time per prompt token, before an engine has measured "
                                       "its own")
    priors: dict[str, MethodPrior] = Field(default_factory=_default_priors, description="what "
                                           "is assumed of each speculative method before it "
                                           "is measured, by vLLM method name")

    def prior_for(self, method: str | None) -> MethodPrior | None:
        if method is None:
            return None
        known = self.priors.get(method)
        if known is not None:     # on the request path: build the fallback only when needed
            return known
        return MethodPrior(mean_accepted_length=1.5, draft_overhead=0.5)
