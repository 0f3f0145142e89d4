"""The drafter card's held-out acceptance by kind, as routing reads it."""

from __future__ import annotations

import json
from pathlib import Path

from engines.drafter_card import heldout_tau
from engines.embedded.prepare import TRAINED_DIR


def test_the_shipped_drafters_cards_carry_their_held_out_acceptance() -> None:
    for drafter in ("eagle3", "dflash"):
        tau = heldout_tau(TRAINED_DIR / f"SmolLM2-135M-Instruct-{drafter}")
        assert set(tau) >= {"code", "copy", "chat"}
        assert all(1.0 <= t <= 5.0 for t in tau.values())


def test_a_card_without_figures_or_with_bad_ones_gives_nothing(tmp_path: Path) -> None:
    assert heldout_tau(tmp_path) == {}
    (tmp_path / "config.json").write_text("{not json")
    assert heldout_tau(tmp_path) == {}
    card = {"specgate_training": {"heldout_tau": {"code": 2.1, "copy": "high",
                                                  "chat": 0.5, "all": float("nan")}}}
    (tmp_path / "config.json").write_text(json.dumps(card))
    assert heldout_tau(tmp_path) == {"code": 2.1}
