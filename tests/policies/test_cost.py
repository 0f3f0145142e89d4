"""Pricing an engine's step: vLLM's per-batch K table
(``num_speculative_tokens_per_batch_size``), and batches its profile has not measured."""

from __future__ import annotations

import random
from dataclasses import replace

import pytest

from policies.adaptive import AdaptivePolicy
from policies.adaptive_settings import AdaptiveSettings
from policies.base import (
    ClassLearned,
    DecisionInput,
    LearnedAcceptance,
    ModeLoad,
    pooled_acceptance,
)
from policies.cost import (
    ClassShare,
    Pricing,
    drafted_per_step,
    estimate,
    estimate_mix,
    rounds,
    tokens_per_step,
)
from policies.step_model import Calibration, calibrate, step_time, verified_step

SETTINGS = AdaptiveSettings()
# K = 3 alone, 2 from batch 4, none from batch 16 on (a gap 8-15 keeps K = 2).
TABLE = ((1, 3, 3), (4, 7, 2), (16, 256, 0))
LEARNED = LearnedAcceptance(mean_accepted_length=3.2, acceptance_rate=0.7, requests=100,
                            drafts=5000)


def eagle3(batch: int = 0, table: tuple[tuple[int, int, int], ...] = TABLE) -> ModeLoad:
    return ModeLoad(mode="eagle3", up=True, batch_size=batch, speculative=True,
                    method="eagle3", num_speculative_tokens=3, k_schedule=table)


def test_the_table_is_read_as_vllm_reads_it() -> None:
    load = eagle3()
    assert [load.draft_length(b) for b in (1, 3, 4, 7, 8, 15, 16, 300)] == \
        [3, 3, 2, 2, 2, 2, 0, 0]
    # Never above the engine's num_speculative_tokens; no table: the fixed K.
    assert eagle3(table=((1, 256, 9),)).draft_length(5) == 3
    assert eagle3(table=()).draft_length(100) == 3
    plain = ModeLoad(mode="standard", up=True, batch_size=0, speculative=False)
    assert plain.draft_length(1) == 0


def test_at_k0_an_engine_with_a_table_yields_one_token_a_step() -> None:
    load = eagle3()
    assert tokens_per_step(load, LEARNED, SETTINGS, batch=1) > 3.0
    assert tokens_per_step(load, LEARNED, SETTINGS, batch=5) <= 3.0      # at most 1 + K
    assert tokens_per_step(load, LEARNED, SETTINGS, batch=16) == 1.0
    # What was learned at a longer K is capped by the K the table gives.
    assert tokens_per_step(eagle3(table=((1, 256, 1),)), LEARNED, SETTINGS, batch=1) == 2.0


def test_the_prior_step_verifies_the_tables_k() -> None:
    """Past the knee a step's cost grows with the tokens it verifies: at K = 0 the
    table's engine is priced like plain decoding's step, at K = 3 like a K = 3 step."""
    fixed = eagle3(table=())
    table = eagle3()
    cal = Calibration()
    assert step_time(table, 200, SETTINGS, cal) < step_time(fixed, 200, SETTINGS, cal)
    assert step_time(table, 2, SETTINGS, cal) == step_time(fixed, 2, SETTINGS, cal)


def test_a_tables_ranges_are_timed_apart() -> None:
    """Measured drafting alone (K = 3, 60 ms) and at eight without drafting (K = 0,
    30 ms): a batch of four, which does not draft, is priced from the step that did not
    draft, not halfway along a line between the two."""
    table = ((1, 2, 3), (3, 256, 0))
    load = replace(eagle3(table=table), step_profile=((1, 0.060, 20), (8, 0.030, 20)))
    cal = Calibration()
    assert step_time(load, 4, SETTINGS, cal) <= 0.030
    assert step_time(load, 1, SETTINGS, cal) == pytest.approx(0.060)
    # Beyond the measured K = 3 point, its range grows from it, not towards K = 0's.
    assert step_time(load, 2, SETTINGS, cal) >= 0.060
    # Without a table the two points are one line.
    line = replace(load, k_schedule=())
    assert step_time(line, 4, SETTINGS, cal) == pytest.approx(0.060 - 0.030 * 3 / 7)


def test_a_request_is_priced_at_the_k_of_the_batch_it_joins() -> None:
    modes = {"eagle3": eagle3(batch=15)}
    joined = estimate(modes["eagle3"], modes, 100, 200, LEARNED, SETTINGS, Calibration())
    assert joined.tokens_per_step == 1.0          # it makes the batch 16: K = 0
    small = {"eagle3": eagle3(batch=0)}
    alone = estimate(small["eagle3"], small, 100, 200, LEARNED, SETTINGS, Calibration())
    assert alone.tokens_per_step > 3.0


def test_a_class_seldom_served_reads_near_the_modes_level_on_every_class() -> None:
    """Thin (or faded) evidence on a class blends with the prior. Once the mode has
    been measured on other classes, the discounted published prior gives way to that
    measured level: up for a drafter that accepts more, down for a weak one. Exploring
    keeps the full published prior (it is how a guess gets measured at all)."""
    load = eagle3(table=())
    thin = LearnedAcceptance(3.4, 0.6, requests=1, drafts=20)
    strong = LearnedAcceptance(3.6, 0.65, requests=200, drafts=8000)
    weak = LearnedAcceptance(1.5, 0.15, requests=200, drafts=8000)
    alone = tokens_per_step(load, thin, SETTINGS, batch=1)
    assert tokens_per_step(load, thin, SETTINGS, batch=1, pooled=strong) > alone + 0.3
    assert tokens_per_step(load, None, SETTINGS, batch=1, pooled=weak) < \
        tokens_per_step(load, None, SETTINGS, batch=1) - 0.2
    assert tokens_per_step(load, None, SETTINGS, optimistic=True, batch=1, pooled=weak) == \
        tokens_per_step(load, None, SETTINGS, optimistic=True, batch=1)


def test_a_modes_level_weights_each_class_by_its_evidence() -> None:
    classes = {
        "math": ClassLearned({"eagle3": LearnedAcceptance(4.0, 0.75, 10, 300)}),
        "chat": ClassLearned({"eagle3": LearnedAcceptance(2.0, 0.25, 10, 100),
                              "dflash": LearnedAcceptance(2.5, 0.4, 1, 40)}),
        "code": ClassLearned(),
    }
    pooled = pooled_acceptance(classes)
    assert pooled["eagle3"].mean_accepted_length == pytest.approx(3.5)
    assert pooled["eagle3"].acceptance_rate == pytest.approx(0.625)
    assert (pooled["eagle3"].drafts, pooled["eagle3"].requests) == (400, 20)
    assert pooled["dflash"].mean_accepted_length == 2.5
    assert set(pooled) == {"eagle3", "dflash"}


# --- steps the profile has not measured: the plain engine's curve --------------------

def _measured(mode: str, method: str | None, k: int,
              profile: tuple[tuple[int, float, int], ...], batch: int = 0) -> ModeLoad:
    return ModeLoad(mode=mode, up=True, batch_size=batch, speculative=method is not None,
                    method=method, num_speculative_tokens=k, step_profile=profile)


def test_a_drafter_measured_alone_is_priced_at_batch_16_at_this_hardwares_growth() -> None:
    """On a CPU every verified token costs: plain decoding measured 0.059 s at batch 1
    and 0.086 s at 16 (a copy-heavy policy trace), and EAGLE-3 (K = 3), measured only
    alone, stepped 0.29 s at batch 15. The prior's growth per verified token,
    calibrated on plain decoding's measured slope, prices its step at 16 (64 tokens)
    far above its batch-1 step; the prior scaled by one factor read it at 0.12 s."""
    plain = _measured("standard", None, 0, ((1, 0.059, 31), (11, 0.072, 19), (16, 0.086, 12)))
    eagle = _measured("eagle3", "eagle3", 3, ((1, 0.0605, 13),))
    cal = calibrate({"standard": plain, "eagle3": eagle}, SETTINGS)
    # Plain decoding's own profile is reproduced by the calibrated prior.
    for batch, seconds in ((1, 0.059), (16, 0.086)):
        assert step_time(replace(plain, step_profile=()), batch, SETTINGS, cal) == \
            pytest.approx(seconds, rel=0.05)
    # Per verified token the CPU costs more, against the prior, than its fixed part.
    assert cal.slope > 1.2 * cal.scale
    assert step_time(eagle, 16, SETTINGS, cal) > 2.5 * 0.0605
    # Where its own profile covers the batch, the measurement decides.
    assert step_time(eagle, 1, SETTINGS, cal) == pytest.approx(0.0605)


def test_calibrated_on_a_prior_that_fits_the_hardware_nothing_moves() -> None:
    """A GPU whose operator set the prior from its data sheet (the simulator's case):
    plain decoding measures what the prior says, both scales are 1, and a drafter
    measured alone is extrapolated as the prior has it."""
    settings = AdaptiveSettings(step_fixed_s=0.010, step_per_seq_s=0.0001,
                                step_per_token_s=0.00002, step_knee_tokens=200.0)
    plain = _measured("standard", None, 0,
                      tuple((b, 0.010 + 0.0001 * b, 50) for b in (1, 8, 32, 64)))
    cal = calibrate({"standard": plain}, settings)
    assert (cal.scale, cal.slope) == (pytest.approx(1.0), pytest.approx(1.0))
    eagle = _measured("eagle3", "eagle3", 3, ((1, 0.0136, 50),))
    # Its measured step is the prior's (fixed 0.010 x 1.35 drafting overhead, plus
    # one sequence), so at 64 it is the prior's: 256 tokens, 56 beyond the knee.
    expected = 0.0135 + 0.0001 * 64 + 0.00002 * (256 - 200)
    assert step_time(eagle, 64, settings, cal) == pytest.approx(expected, rel=1e-6)


def test_a_batch_of_copy_prompts_stays_on_ngram_rather_than_a_drafter_measured_alone() -> None:
    """With a batch of copy prompts on n-gram, a drafter measured only at batch 1 must
    not look cheaper: priced along plain decoding's curve, EAGLE-3 at batch 16 is
    dearer than n-gram, and n-gram wins on cost alone (no incumbent to hold)."""
    copy = {"ngram": LearnedAcceptance(3.65, 0.87, 46.0, 368.0),
            "eagle3": LearnedAcceptance(1.94, 0.31, 2.9, 23.0),
            "dflash": LearnedAcceptance(1.45, 0.11, 0.9, 7.5)}
    modes = {
        "standard": _measured("standard", None, 0,
                              ((1, 0.0593, 31), (11, 0.0716, 19), (16, 0.0863, 12))),
        "ngram": _measured("ngram", "ngram", 4, ((1, 0.0495, 7), (5, 0.1027, 6),
                                                 (10, 0.167, 3), (15, 0.251, 15),
                                                 (16, 0.273, 6)), batch=15),
        "eagle3": _measured("eagle3", "eagle3", 3, ((1, 0.0605, 13),)),
        "dflash": _measured("dflash", "dflash", 4, ((1, 0.0559, 22),)),
    }
    modes = {name: replace(m, prefill_s=0.2) for name, m in modes.items()}
    inputs = DecisionInput(modes=modes, prompt_tokens=400, max_tokens=32, now=0.0,
                           workload_class="copy", acceptance=copy,
                           expected_output_tokens=26.0, in_flight={"ngram": {"copy": 15}},
                           classes={"copy": ClassLearned(copy, 26.0, 50.0)},
                           mode_acceptance=copy)
    decision = AdaptivePolicy(AdaptiveSettings(speculation_margin=0.0)).decide(inputs)
    assert decision.mode == "ngram", decision.reason


# --- n-gram's step depends on the class it serves ------------------------------------

def _ngram(batch: int = 0) -> ModeLoad:
    """N-gram (K = 4) measured 0.063 s at batch 16 while drafting 1.5 tokens per
    sequence, and 1.25 ms per draft token a step verifies."""
    return ModeLoad(mode="ngram", up=True, batch_size=batch, speculative=True,
                    method="ngram", num_speculative_tokens=4,
                    step_profile=((1, 0.030, 40), (16, 0.063, 40)),
                    draft_token_s=0.00125, step_drafted=1.5)


def test_ngram_is_priced_at_the_draft_tokens_of_the_class_it_serves() -> None:
    """A policy trace: n-gram's step at batch 16 read 0.063 s after free text and
    0.081 s after copy-heavy prompts. Each class is priced at its own drafts."""
    load, cal = _ngram(), Calibration()
    as_measured = step_time(load, 16, SETTINGS, cal)
    assert as_measured == pytest.approx(0.063)
    copy = step_time(load, 16, SETTINGS, cal, drafted=2.4)     # drafts on most steps
    free = step_time(load, 16, SETTINGS, cal, drafted=0.3)     # seldom finds a match
    assert copy == pytest.approx(0.063 + 0.00125 * 16 * 0.9)
    assert free == pytest.approx(0.063 - 0.00125 * 16 * 1.2)
    # Never beyond the K a step drafts, never below a third of the measured step.
    assert step_time(load, 16, SETTINGS, cal, drafted=50.0) == \
        pytest.approx(0.063 + 0.00125 * 16 * 2.5)
    steep = replace(load, draft_token_s=1.0)
    assert step_time(steep, 16, SETTINGS, cal, drafted=0.0) == pytest.approx(0.063 / 3)


def test_ngram_at_a_large_batch_costs_at_least_plain_decoding_over_its_tokens() -> None:
    """A trace on the 2-core machine: n-gram's profile and its slope per draft token were
    measured at small batches (a warm-up on text it drafts nothing on, then requests
    alone), where verified tokens are nearly free. At batch 12 on follow-ups it drafts
    two tokens a sequence, 36 tokens a step, and the slope priced it below plain
    decoding's step at 12, where its own server ran well behind plain decoding's. Its
    step is at least what plain decoding's fitted steps give 36 tokens, the target
    model's share of it."""
    plain = ModeLoad(mode="standard", up=True, batch_size=0, speculative=False,
                     step_profile=((1, 0.040, 40), (16, 0.090, 40)))
    ngram = ModeLoad(mode="ngram", up=True, batch_size=0, speculative=True, method="ngram",
                     num_speculative_tokens=4, replayed=True,
                     step_profile=((1, 0.041, 40), (8, 0.055, 40)),
                     draft_token_s=0.0002, step_drafted=0.3)
    pricing = Pricing({"standard": plain, "ngram": ngram}, SETTINGS)
    over_36 = verified_step(12, 2.0, SETTINGS, pricing.cal)
    assert over_36 > 0.090                         # beyond plain decoding's batch 16
    assert pricing.step(ngram, 12, 2.0) == pytest.approx(over_36)
    # Alone, three tokens cost little more than one.
    assert pricing.step(ngram, 1, 2.0) == pytest.approx(max(
        0.041 + 0.0002 * 1.7, verified_step(1, 2.0, SETTINGS, pricing.cal)))
    assert pricing.step(ngram, 1, 2.0) < 1.2 * pricing.step(plain, 1)
    # Until plain decoding has measured its steps, the slope is all there is.
    alone = Pricing({"ngram": ngram}, SETTINGS)
    assert alone.step(ngram, 12, 2.0) < over_36
    # A follow-up batch n-gram accepts 1.6 tokens a step on goes to plain decoding
    # at batch 12, and to n-gram alone.
    follow = ClassShare(1.0, 128.0, {"ngram": LearnedAcceptance(1.6, 0.3, 50.0, 2000.0,
                                                                 2.0)})
    at_12 = {m.mode: pricing.estimate_mix(m, 12, [follow], 300).total_s
             for m in (plain, ngram)}
    at_1 = {m.mode: pricing.estimate_mix(m, 1, [follow], 300).total_s
            for m in (plain, ngram)}
    assert at_12["standard"] < at_12["ngram"]
    assert at_1["ngram"] < at_1["standard"]


def test_a_drafter_known_from_its_warm_up_costs_at_least_plain_decoding_over_its_tokens(
        ) -> None:
    """A trace on the 2-core machine: EAGLE-3 (K = 3) was timed only in its warm-up,
    on a short prompt, at batch 1 and 8; interpolated at batch 4 its step read cheap
    enough to take a batch of chat at 4 requests, where it ran well behind plain
    decoding. At batch 4 it verifies 16 tokens a step: at least what plain decoding's
    steps, measured on the traffic it served, give 16 tokens. Alone it verifies 4,
    which cost little more than one, and its own measurement stands."""
    plain = ModeLoad(mode="standard", up=True, batch_size=0, speculative=False,
                     step_profile=((1, 0.035, 40), (4, 0.040, 40), (16, 0.075, 40)))
    drafter = ModeLoad(mode="eagle3", up=True, batch_size=0, speculative=True,
                       method="eagle3", num_speculative_tokens=3,
                       step_profile=((1, 0.047, 15), (8, 0.091, 15)), step_drafted=3.0)
    pricing = Pricing({"standard": plain, "eagle3": drafter}, SETTINGS)
    over_16 = verified_step(4, 3.0, SETTINGS, pricing.cal)
    assert over_16 > 0.070 > 0.047 + (0.091 - 0.047) * 3 / 7     # as interpolated
    assert pricing.step(drafter, 4) == pytest.approx(over_16)
    assert pricing.step(drafter, 4, 3.0) == pytest.approx(over_16)
    assert pricing.step(drafter, 1) == pytest.approx(0.047)


def test_a_batch_the_engine_timed_on_traffic_stands_as_measured() -> None:
    """A trace on the 2-core machine: n-gram (K = 4) had just served questions over a
    memo at batch 4, timing that bucket on hundreds of steps. The bound on verified
    tokens, fitted to plain decoding's long conversations at 16, priced its 20 tokens
    a step about a quarter above what it had measured, and follow-ups n-gram served
    1.5x faster went to plain decoding. A bucket timed on traffic stands; one known
    from the warm-up, or a batch beyond what traffic timed, keeps the bound."""
    plain = ModeLoad(mode="standard", up=True, batch_size=0, speculative=False,
                     step_profile=((1, 0.035, 400), (4, 0.040, 400), (16, 0.075, 400)))

    def ngram(samples: int) -> ModeLoad:
        return ModeLoad(mode="ngram", up=True, batch_size=0, speculative=True,
                        method="ngram", num_speculative_tokens=4,
                        step_profile=((1, 0.040, 400), (4, 0.048, samples),
                                      (8, 0.100, 16)), step_drafted=4.0)

    timed = Pricing({"standard": plain, "ngram": ngram(300)}, SETTINGS)
    over_20 = verified_step(4, 4.0, SETTINGS, timed.cal)
    assert over_20 > 0.048 * 1.1
    assert timed.step(ngram(300), 4) == pytest.approx(0.048)
    assert timed.step(ngram(300), 4, 4.0) == pytest.approx(0.048)
    assert timed.step(ngram(300), 3) == pytest.approx(0.040 + 0.008 * 2 / 3)
    # Between batch 4 and the warm-up's batch 8, and from the warm-up alone: bounded.
    assert timed.step(ngram(300), 6) >= verified_step(6, 4.0, SETTINGS, timed.cal)
    warm = Pricing({"standard": plain, "ngram": ngram(16)}, SETTINGS)
    assert warm.step(ngram(16), 4) == pytest.approx(over_20)
    # Setting it to 0 always applies the bound.
    always = Pricing({"standard": plain, "ngram": ngram(300)},
                     SETTINGS.model_copy(update={"step_traffic_samples": 0}))
    assert always.step(ngram(300), 4) == pytest.approx(over_20)


def test_a_drafter_timed_on_traffic_carries_its_share_to_batches_it_has_not_served(
        ) -> None:
    """A trace on the 2-core machine: DFlash (K = 4) served chat one and two requests at
    a time, then took a burst at 4, known there only from its warm-up, priced at the
    target model's bare pass over its 20 verified tokens: 5% ahead of plain decoding,
    where it ran 16% behind. Its steps timed on traffic at batch 2 measured 1.3x that
    pass (its drafter, its rejection sampling): at batch 4 it is priced at 1.3x too."""
    plain = ModeLoad(mode="standard", up=True, batch_size=0, speculative=False,
                     step_profile=((1, 0.045, 400), (4, 0.052, 400), (16, 0.080, 400)))
    pricing = Pricing({"standard": plain}, SETTINGS)
    at_2 = 1.3 * verified_step(2, 4.0, SETTINGS, pricing.cal)
    dflash = ModeLoad(mode="dflash", up=True, batch_size=0, speculative=True,
                      method="dflash", num_speculative_tokens=4, step_drafted=4.0,
                      step_profile=((1, 0.060, 300), (2, at_2, 200), (8, 0.120, 16)))
    pricing = Pricing({"standard": plain, "dflash": dflash}, SETTINGS)
    assert pricing.step(dflash, 2) == pytest.approx(at_2)           # as measured
    assert pricing.step(dflash, 4) == pytest.approx(
        1.3 * verified_step(4, 4.0, SETTINGS, pricing.cal))
    # Known from its warm-up alone: the bare pass.
    warm = replace(dflash, step_profile=((1, 0.060, 16), (8, 0.120, 16)))
    assert Pricing({"standard": plain, "dflash": warm}, SETTINGS).step(warm, 4) == \
        pytest.approx(verified_step(4, 4.0, SETTINGS, pricing.cal))


def test_a_mix_is_priced_at_the_draft_tokens_its_classes_bring() -> None:
    """A batch of copy-heavy requests costs n-gram more per step than a batch of free
    text; a class whose drafts are unknown is priced as the profile measured."""
    def share(drafted: float | None) -> ClassShare:
        return ClassShare(1.0, 100.0, {"ngram": LearnedAcceptance(
            2.0, 0.5, 10.0, 400.0, drafted)})
    cal = Calibration()
    copy = estimate_mix(_ngram(), 16, [share(2.4)], 100, SETTINGS, cal)
    free = estimate_mix(_ngram(), 16, [share(0.3)], 100, SETTINGS, cal)
    unknown = estimate_mix(_ngram(), 16, [share(None)], 100, SETTINGS, cal)
    rounds = 99 / copy.tokens_per_step
    assert copy.own_s - free.own_s == pytest.approx(rounds * 0.00125 * 16 * 2.1, rel=1e-6)
    assert free.own_s < unknown.own_s < copy.own_s


def test_what_is_learned_carries_the_draft_tokens_per_step() -> None:
    from policies.learned import LearnedStats

    stats = LearnedStats(lambda: 300.0)
    # 40 tokens: 20 decode steps, 10 of them drafted 4 tokens each, 19 accepted.
    stats.observe("ngram", "copy", drafts=10, draft_tokens=40, accepted=19,
                  completion_tokens=40, now=0.0)
    stats.observe("ngram", "free", drafts=2, draft_tokens=8, accepted=1,
                  completion_tokens=40, now=0.0)
    copy = stats.acceptance_for("copy", 0.0)["ngram"]
    assert copy.draft_tokens_per_step == pytest.approx(40 / 20)
    free = stats.acceptance_for("free", 0.0)["ngram"]
    assert free.draft_tokens_per_step == pytest.approx(8 / 38)
    pooled = pooled_acceptance({"copy": ClassLearned({"ngram": copy}),
                                "free": ClassLearned({"ngram": free})})["ngram"]
    assert pooled.draft_tokens_per_step == pytest.approx(48 / 58)


# --- the mix loop inlines the scalar functions: it must price as they do -------------

def _mix_as_spelt(candidate: ModeLoad, group_batch: int, shares: list[ClassShare],
                  optimistic: bool, pooled: LearnedAcceptance | None) -> tuple[float, float]:
    """``estimate_mix``'s rounds and step, from ``tokens_per_step``, ``rounds``,
    ``drafted_per_step`` and ``step_time`` (tau of the first share; cost less prefill)."""
    total = weight = drafted = drafted_rounds = 0.0
    tau = 1.0
    for i, share in enumerate(shares):
        learned = share.learned.get(candidate.mode)
        t = tokens_per_step(candidate, learned, SETTINGS, optimistic and i == 0,
                            batch=group_batch, pooled=pooled)
        if i == 0:
            tau = t
        n = share.weight * rounds(share.output_tokens, t)
        total += n
        weight += share.weight
        share_drafted = drafted_per_step(learned, pooled)
        if share_drafted is not None:
            drafted += n * share_drafted
            drafted_rounds += n
    step = step_time(candidate, group_batch, SETTINGS, Calibration(),
                     drafted / drafted_rounds if drafted_rounds > 0 else None)
    return tau, step * total / weight


def test_the_mix_loop_prices_exactly_as_the_scalar_functions() -> None:
    rng = random.Random(7)

    def maybe_learned() -> LearnedAcceptance | None:
        kind = rng.random()
        if kind < 0.2:
            return None
        return LearnedAcceptance(1.0 + 3 * rng.random(), rng.random(), rng.random() * 50,
                                 0.0 if kind < 0.35 else rng.random() * 400,
                                 None if rng.random() < 0.3 else 4 * rng.random())

    candidates = [
        ModeLoad(mode="standard", up=True, batch_size=3, speculative=False, prefill_s=0.01),
        replace(eagle3(batch=2), prefill_s=0.02),
        replace(eagle3(batch=2), prefill_s=0.02, mean_accepted_length=2.2),
        replace(_ngram(batch=5), prefill_s=0.01),
    ]
    for _ in range(300):
        shares = [ClassShare(rng.choice([1.0, 0.5 + rng.random() * 5]),
                             rng.choice([0.0, 1.0, 1.5, 1 + rng.random() * 900]),
                             {m: a for m in ("eagle3", "ngram", "standard")
                              if (a := maybe_learned()) is not None})
                  for _ in range(rng.randint(1, 12))]
        pooled = maybe_learned()
        optimistic = rng.random() < 0.3
        for candidate in candidates:
            batch = rng.choice([1, 4, 16, 40])
            cost = estimate_mix(candidate, batch, shares, 100, SETTINGS, Calibration(),
                                optimistic, pooled=pooled)
            tau, decode = _mix_as_spelt(candidate, batch, shares, optimistic, pooled)
            assert cost.tokens_per_step == tau
            assert cost.own_s == batch * candidate.prefill_s + decode   # bit for bit


def test_one_replayed_answer_does_not_outweigh_the_prior() -> None:
    """Prompt lookup's acceptance is replayed on every finished answer, and one answer's
    steps accept alike: a first chat answer that happens to repeat its prompt must not
    put n-gram ahead of plain decoding for a class whose next answers do not. An answer
    weighs as ``replayed_steps_per_request`` steps at most; answers add up. A trained
    drafter's steps (measured only where it serves) count whole."""
    ngram = ModeLoad(mode="ngram", up=True, batch_size=0, speculative=True, method="ngram",
                     num_speculative_tokens=4, replayed=True)
    prior = tokens_per_step(ngram, None, SETTINGS)
    one = LearnedAcceptance(3.0, 0.5, requests=1.0, drafts=60.0)
    w = 16.0 / (16.0 + SETTINGS.prior_draft_steps)
    assert tokens_per_step(ngram, one, SETTINGS) == pytest.approx(w * 3.0 + (1 - w) * prior)
    unbounded = SETTINGS.model_copy(update={"replayed_steps_per_request": 0.0})
    w_all = 60.0 / (60.0 + SETTINGS.prior_draft_steps)
    assert tokens_per_step(ngram, one, unbounded) == pytest.approx(
        w_all * 3.0 + (1 - w_all) * prior)
    # Answers add up: ten weigh 160 steps, and the prior little.
    ten = LearnedAcceptance(3.0, 0.5, requests=10.0, drafts=600.0)
    w_ten = 160.0 / (160.0 + SETTINGS.prior_draft_steps)
    assert tokens_per_step(ngram, ten, SETTINGS) == pytest.approx(
        w_ten * 3.0 + (1 - w_ten) * prior)
    # Short answers count what steps they have.
    short = LearnedAcceptance(3.0, 0.5, requests=2.0, drafts=10.0)
    assert tokens_per_step(ngram, short, SETTINGS) == tokens_per_step(ngram, short, unbounded)
    # The same answer served by a trained drafter counts all its steps.
    e3 = eagle3(table=())
    assert tokens_per_step(e3, one, SETTINGS) == tokens_per_step(e3, one, unbounded)
    # A device group's mix weighs the classes after the first alike.
    plain = ModeLoad(mode="standard", up=True, batch_size=0, speculative=False)
    pricing = Pricing({"standard": plain, "ngram": ngram}, SETTINGS)
    other = ClassShare(1.0, 128.0, {"ngram": one})
    first = ClassShare(1.0, 128.0, {"ngram": ten})
    mixed = pricing.estimate_mix(ngram, 2, [first, other], 100).total_s
    alike = pricing.estimate_mix(ngram, 2, [first, other._replace(learned={
        "ngram": LearnedAcceptance(3.0, 0.5, requests=1.0, drafts=16.0)})], 100).total_s
    assert mixed == pytest.approx(alike)
