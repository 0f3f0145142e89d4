"""Accepted draft tokens per verification step.

Each draft position is accepted with probability ``alpha`` given that the
previous one was (the usual model of speculative decoding), so a step with
``k`` draft positions accepts ``A`` tokens with ``P(A >= j) = alpha ** j``,
``j <= k``, and yields ``A + 1`` tokens (the bonus token). ``alpha`` is solved
from a published mean accepted length ``tau`` at a configuration's depth;
the same ``alpha`` then gives ``tau`` at any shorter draft length (vLLM's
per-batch-size ``K`` table).
"""

from __future__ import annotations

import bisect
import random
from functools import lru_cache

from sim.params import ModeSpec, SimParams


def mean_accepted_length(alpha: float, k: int) -> float:
    """Tokens per step, bonus included: sum of alpha ** j for j = 0..k."""
    return float(sum(alpha ** j for j in range(k + 1)))


@lru_cache(maxsize=256)
def alpha_for(tau: float, depth: int) -> float:
    """The per-position acceptance that gives mean accepted length ``tau`` at ``depth``."""
    if depth <= 0 or tau <= 1.0:
        return 0.0
    if tau >= depth + 1:
        return 1.0
    lo, hi = 0.0, 1.0
    for _ in range(60):
        mid = (lo + hi) / 2
        if mean_accepted_length(mid, depth) < tau:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


def engine_tau(mode: ModeSpec, published_tau: float, params: SimParams) -> float:
    """The mean accepted length this engine sees at its full depth: the published
    (tree) figure, or a chain's share of its accepted drafts (``KTableCosts``)."""
    if not mode.chain_drafted:
        return published_tau
    return 1.0 + params.k_table.chain_accept_ratio * (published_tau - 1.0)


class AcceptanceSampler:
    """Draws accepted draft tokens for one (family, workload) at draft length ``k``."""

    def __init__(self, alpha: float, k: int) -> None:
        self.alpha = alpha
        self.k = k
        # cdf[j] = P(A <= j); inverse-transform sampling with one uniform draw.
        survive = [alpha ** j for j in range(k + 2)]
        self._cdf = [1.0 - survive[j + 1] for j in range(k)]

    @property
    def mean(self) -> float:
        return mean_accepted_length(self.alpha, self.k)

    def sample(self, rng: random.Random) -> int:
        return bisect.bisect_right(self._cdf, rng.random())
