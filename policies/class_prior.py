"""What a workload class with little evidence of its own borrows for each mode.

A class a mode has not served yet starts from the mode's prior. Two things sharpen it:

- **The class's family.** Unlabelled requests are classed by what they show
  (``auto:<kind>:<size>``, ``service/request_class.py``): the classes of one kind
  draft alike whatever their prompt length, so each lends its evidence to the others.
- **The drafter's card.** A trained drafter's model card may carry its held-out
  acceptance per kind of prompt (``heldout_tau``), measured on this model: the
  prior of a family the mode has not served. Held-out prompts are not the traffic
  at hand (the shipped cards read well above what live requests of the same kind
  measure: docs/policy.md), so, like the published prior, a card's gain is
  discounted (``cold_start_discount``) until the kind is measured here.

Evidence from other families transfers only downwards. A mode's level on every
class says what its drafter accepts on this hardware, and a drafter measured weak
anywhere is weak on a class it has not served; but acceptance depends on the text
(prompt lookup accepts most of an answer that repeats its prompt and almost nothing
of free chat), so a level measured high on one kind says nothing of another
(``LearnedAcceptance.transferred``; ``policies.cost.tokens_per_step``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from policies.base import ClassLearned, LearnedAcceptance, pooled_acceptance

FEATURE_PREFIX = "auto:"
# The kinds of the held-out prompts a drafter card reports, by feature kind.
CARD_KIND = {"code": "code", "doc": "copy", "turns": "chat", "text": "chat"}
# A card's figure weighs as much as this many verification steps measured here: more
# than the published prior (it is this model's drafter), less than a few requests'
# evidence on this hardware and traffic.
CARD_STEPS = 60.0


def feature_class(kind: str, size: str, raw: bool = False) -> str:
    return f"{FEATURE_PREFIX}{kind}:{size}" + (":raw" if raw else "")


def family(workload_class: str) -> str | None:
    """``auto:<kind>`` for a feature class; None for a caller's label."""
    if not workload_class.startswith(FEATURE_PREFIX):
        return None
    parts = workload_class.split(":")
    return ":".join(parts[:2]) if len(parts) >= 3 else None


def borrowed(classes: Mapping[str, ClassLearned], workload_class: str,
             card_tau: Mapping[str, Mapping[str, float]],
             overall: Mapping[str, LearnedAcceptance] | None = None,
             card_discount: float = 0.0) -> Mapping[str, LearnedAcceptance]:
    """Each mode's acceptance for the prior of ``workload_class``.

    A caller's label pools every class, as a drafter's level. A feature class pools
    its family; a mode the family has not measured takes its card's figure for the
    kind, its gain scaled by ``1 - card_discount`` (worth ``CARD_STEPS`` of evidence),
    else its level on every class, marked as transferred. ``overall``:
    ``pooled_acceptance(classes)``, when the caller has it already."""
    if overall is None:
        overall = pooled_acceptance(classes)
    own = family(workload_class)
    if own is None:
        return overall
    prefix = own + ":"
    result = pooled_acceptance({cls: known for cls, known in classes.items()
                                if cls.startswith(prefix)})
    kind = CARD_KIND.get(own.removeprefix(FEATURE_PREFIX))
    for mode in {*overall, *card_tau}:
        if mode in result:
            continue
        tau = card_tau.get(mode, {}).get(kind or "")
        if tau is not None and tau >= 1.0:
            tau = 1.0 + (tau - 1.0) * (1.0 - card_discount)
            result[mode] = LearnedAcceptance(tau, 0.0, 0.0, CARD_STEPS)
        elif mode in overall:
            result[mode] = replace(overall[mode], transferred=True)
    return result
