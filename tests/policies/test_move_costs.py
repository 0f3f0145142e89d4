"""What a moved request's tokens teach the mode it left (``policies/move_costs.py``)."""

from __future__ import annotations

from policies.base import ModeLoad
from policies.move_costs import ServedBeforeMove, served_before_move


def load(method: str | None, tau: float | None, k: int = 3) -> ModeLoad:
    return ModeLoad(mode="m", up=True, batch_size=4, speculative=method is not None,
                    method=method, num_speculative_tokens=k, mean_accepted_length=tau)


def test_tokens_are_split_into_steps_at_the_engines_measured_acceptance() -> None:
    # 41 tokens: the prefill's first, then 40 decoded at 2.5 a step = 16 steps, 24 accepted.
    assert served_before_move(load("eagle3", 2.5), 41) == ServedBeforeMove(16, 48, 24, 41)


def test_nothing_to_learn_from_plain_decoding_an_unmeasured_engine_or_one_token() -> None:
    assert served_before_move(load(None, None), 41) is None
    assert served_before_move(load("eagle3", None), 41) is None
    assert served_before_move(load("eagle3", 2.5), 1) is None
