"""What a class with little evidence borrows: its family's evidence, the drafter's
card, and other kinds' evidence only where it is lower than the prior."""

from __future__ import annotations

import pytest

from policies.adaptive import AdaptivePolicy
from policies.adaptive_settings import AdaptiveSettings
from policies.auto_decision import decide_auto
from policies.base import ClassLearned, DecisionKind, LearnedAcceptance, ModeLoad
from policies.class_prior import CARD_STEPS, borrowed, family
from policies.cost import tokens_per_step
from policies.routing_memory import RoutingMemory
from policies.shared_state import SharedPolicyState
from policies.store.memory import MemoryStore

NOW = 100.0


def acc(tau: float, drafts: float) -> LearnedAcceptance:
    return LearnedAcceptance(tau, (tau - 1) / 4, drafts / 10, drafts)


def test_families_are_the_feature_kinds_and_labels_have_none() -> None:
    assert family("auto:doc:s") == "auto:doc"
    assert family("auto:code:l:raw") == "auto:code"
    assert family("chat") is None
    assert family("json") is None


def test_a_feature_class_pools_its_family_and_not_other_kinds() -> None:
    classes = {"auto:doc:s": ClassLearned({"ngram": acc(3.5, 100)}),
               "auto:doc:m": ClassLearned({"ngram": acc(2.5, 100)}),
               "auto:text:s": ClassLearned({"eagle3": acc(1.8, 50)})}
    copy = borrowed(classes, "auto:doc:l", {})
    assert copy["ngram"].mean_accepted_length == pytest.approx(3.0)
    assert not copy["ngram"].transferred
    assert copy["eagle3"].transferred          # chat's level, for copy
    chat = borrowed(classes, "auto:text:m", {})
    assert chat["ngram"].transferred and chat["ngram"].mean_accepted_length == 3.0


def test_a_label_pools_every_class_as_before() -> None:
    classes = {"math": ClassLearned({"eagle3": acc(4.0, 30)}),
               "chat": ClassLearned({"eagle3": acc(2.0, 10)})}
    pooled = borrowed(classes, "code", {"eagle3": {"code": 9.0}})
    assert pooled["eagle3"].mean_accepted_length == pytest.approx(3.5)
    assert not pooled["eagle3"].transferred


def test_the_card_is_the_prior_of_a_family_the_mode_has_not_served() -> None:
    classes = {"auto:code:s": ClassLearned({"eagle3": acc(1.4, 80)})}
    card = {"eagle3": {"code": 2.3, "copy": 2.2, "chat": 1.9}}
    chat = borrowed(classes, "auto:text:s", card)["eagle3"]
    assert (chat.mean_accepted_length, chat.drafts) == (1.9, CARD_STEPS)
    # Measured on the family: the measurement, not the card.
    assert borrowed(classes, "auto:code:m", card)["eagle3"].mean_accepted_length == 1.4


def test_a_cards_gain_is_discounted_like_the_prior() -> None:
    """Held-out prompts are not the traffic at hand: a card reads above what live
    requests of its kind accept, and taken at face value it sends a burst of chat to a
    drafter at a batch where plain decoding is faster. The policy takes the card's
    gain at ``1 - cold_start_discount``."""
    card = {"eagle3": {"chat": 1.9}}
    chat = borrowed({}, "auto:text:s", card, card_discount=0.5)["eagle3"]
    assert chat.mean_accepted_length == pytest.approx(1.45)
    assert AdaptivePolicy(AdaptiveSettings(cold_start_discount=0.4)).card_discount == 0.4


def speculative(mode: str, method: str, k: int) -> ModeLoad:
    return ModeLoad(mode=mode, up=True, batch_size=0, speculative=True, method=method,
                    num_speculative_tokens=k)


def fresh_state() -> SharedPolicyState:
    return SharedPolicyState(MemoryStore(clock=lambda: NOW), "r1", AdaptiveSettings(),
                             clock=lambda: NOW)


def local_modes(eagle3: bool = False) -> dict[str, ModeLoad]:
    """Plain decoding and n-gram (K = 4), with EAGLE-3 (K = 3) if asked."""
    modes = {"standard": ModeLoad(mode="standard", up=True, batch_size=0, speculative=False),
             "ngram": speculative("ngram", "ngram", 4)}
    if eagle3:
        modes["eagle3"] = speculative("eagle3", "eagle3", 3)
    return modes


def test_a_level_measured_high_on_another_kind_does_not_raise_the_prior() -> None:
    settings = AdaptiveSettings()
    ngram = speculative("ngram", "ngram", 4)
    cold = tokens_per_step(ngram, None, settings)
    high = LearnedAcceptance(3.5, 0.6, 10, 400, transferred=True)
    low = LearnedAcceptance(1.02, 0.01, 10, 400, transferred=True)
    assert tokens_per_step(ngram, None, settings, pooled=high) == cold
    assert tokens_per_step(ngram, None, settings, pooled=low) < cold
    # The same level measured on the class's own family counts either way.
    own = LearnedAcceptance(3.5, 0.6, 10, 400)
    assert tokens_per_step(ngram, None, settings, pooled=own) > 3.0


def test_prompt_lookup_measured_on_copy_does_not_raise_its_price_for_chat() -> None:
    """Copy-heavy requests taught the policy that n-gram accepts 3.5 tokens a step;
    for a chat request of a kind n-gram never served, it is priced as if unmeasured,
    while a copy request of another length takes the copy family's evidence."""
    modes = local_modes()

    def ngram_cost(state: SharedPolicyState, cls: str) -> float:
        _, decision = decide_auto(AdaptivePolicy(), state, RoutingMemory(), modes,
                                  prompt_tokens=80, max_tokens=128, workload_class=cls,
                                  now=NOW, in_flight={}, explore_draw=0.99)
        return decision.scores["ngram"]

    taught = fresh_state()
    for _ in range(8):
        taught.observe("ngram", "auto:doc:m", drafts=40, draft_tokens=160, accepted=100,
                       completion_tokens=141, now=NOW)
    cold = fresh_state()
    assert ngram_cost(taught, "auto:text:s") == pytest.approx(ngram_cost(cold, "auto:text:s"))
    assert ngram_cost(taught, "auto:doc:s") < 0.7 * ngram_cost(cold, "auto:doc:s")


def explored_modes(state: SharedPolicyState, modes: dict[str, ModeLoad], cls: str,
                   card: dict[str, dict[str, float]]) -> set[str]:
    """The modes a cold request of ``cls`` explores over draws of the boosted share
    (past the 3% of stale explorations)."""
    out = set()
    for draw in (0.05, 0.1, 0.2, 0.3, 0.4):
        _, d = decide_auto(AdaptivePolicy(), state, RoutingMemory(), modes,
                           prompt_tokens=80, max_tokens=128, workload_class=cls,
                           now=NOW, in_flight={}, explore_draw=draw, card_tau=card)
        if d.kind is DecisionKind.EXPLORE:
            out.add(d.mode)
    return out


def test_a_mode_measured_on_the_kind_is_not_explored_and_a_carded_one_is() -> None:
    """The first requests of a new size of a kind: n-gram was measured on the kind, so
    it is not explored as unmeasured. EAGLE-3's card prices it but measures nothing
    here: on ShareGPT conversations its discounted chat figure priced it just above
    plain decoding, no request ever went to it, and it was never measured where it
    served 1.3x plain decoding's speed. It is explored on a kind until measured, where
    its card prices it within the speculation margin of the best: not on a document,
    where its card puts it 2.5x behind prompt lookup measured on the kind."""
    state = fresh_state()
    for _ in range(4):
        state.observe("ngram", "auto:doc:s", drafts=40, draft_tokens=160, accepted=100,
                      completion_tokens=141, now=NOW)
    modes = local_modes(eagle3=True)
    card = {"eagle3": {"code": 2.3, "copy": 2.2, "chat": 1.9}}

    def explored(cls: str) -> set[str]:
        return explored_modes(state, modes, cls, card)

    assert explored("auto:doc:m") == set()
    assert explored("auto:text:m") == {"eagle3"}       # the first of two unmeasured
    # Once EAGLE-3 has served the kind, neither is explored on a new size of it.
    state.observe("eagle3", "auto:doc:s", drafts=60, draft_tokens=180, accepted=70,
                  completion_tokens=128, now=NOW)
    assert explored("auto:doc:l") == set()
    # A label sees no kind: every mode it has not measured is explored, as before.
    assert "eagle3" in explored("chat")


def test_prompt_lookups_card_sends_the_first_copy_request_to_it_and_not_chat() -> None:
    """Before any copy-heavy answer has finished, n-gram's card (half the gain of
    drafting a verbatim copy in full) already prices it above a trained drafter for
    a copy request; a chat request of the same cold start does not go there."""
    from engines.prompt_lookup import LookupParams

    state = fresh_state()
    for _ in range(4):      # replayed on code answers: n-gram drafts little there
        state.observe("ngram", "auto:code:s", drafts=40, draft_tokens=60, accepted=10,
                      completion_tokens=60, now=NOW)
    modes = local_modes(eagle3=True)
    card = {"eagle3": {"code": 2.3, "copy": 2.2, "chat": 1.9},
            "ngram": LookupParams(2, 4, 4).card()}

    def chosen(cls: str) -> str:
        _, d = decide_auto(AdaptivePolicy(), state, RoutingMemory(), modes,
                           prompt_tokens=80, max_tokens=128, workload_class=cls, now=NOW,
                           in_flight={}, explore_draw=0.99, card_tau=card)
        return d.mode

    assert LookupParams(2, 4, 4).card() == {"copy": 5.0}    # 3.0 at the default discount
    assert chosen("auto:doc:s") == "ngram"
    assert chosen("auto:text:s") != "ngram"


def test_the_live_window_of_another_kind_does_not_raise_a_cold_class() -> None:
    """The n-gram engine has just served copy-heavy answers (its live window reads
    3.7 tokens a step): a chat request of a kind it never measured is priced as if
    that window were not there."""
    modes = local_modes()
    busy = {**modes, "ngram": ModeLoad(mode="ngram", up=True, batch_size=0,
                                       speculative=True, method="ngram",
                                       num_speculative_tokens=4,
                                       mean_accepted_length=3.7)}
    state = fresh_state()
    for _ in range(8):
        state.observe("ngram", "auto:doc:s", drafts=40, draft_tokens=160, accepted=110,
                      completion_tokens=150, now=NOW)

    def ngram_cost(loads: dict[str, ModeLoad]) -> float:
        _, d = decide_auto(AdaptivePolicy(), state, RoutingMemory(), loads,
                           prompt_tokens=80, max_tokens=128, workload_class="auto:text:s",
                           now=NOW, in_flight={}, explore_draw=0.99)
        return d.scores["ngram"]

    assert ngram_cost(busy) == pytest.approx(ngram_cost(modes))


def test_a_carded_drafter_is_explored_at_its_card_not_at_its_methods_prior() -> None:
    """DFlash's card puts it far behind prompt lookup on documents, and its method's
    published prior (a large model's figure) well ahead: the card is what is known of
    this drafter on the kind, so no request of a short copy phase is spent measuring
    it."""
    state = fresh_state()
    for _ in range(4):
        state.observe("ngram", "auto:doc:s", drafts=40, draft_tokens=160, accepted=80,
                      completion_tokens=141, now=NOW)
    modes = {**local_modes(), "dflash": speculative("dflash", "dflash", 7)}
    card = {"dflash": {"code": 2.15, "copy": 1.6, "chat": 2.0}}

    def explored(cls: str, cards: dict[str, dict[str, float]]) -> set[str]:
        return explored_modes(state, modes, cls, cards)

    assert explored("auto:doc:s", card) == set()
    # Without a card the method's prior stands, and the first measurement is made.
    assert explored("auto:doc:s", {}) == {"dflash"}
