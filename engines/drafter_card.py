"""What a trained drafter's model card says about it, for routing.

``specgate train-drafter`` writes the card into the drafter's ``config.json``
(``specgate_training``); ``heldout_tau`` there is its measured mean acceptance
length on the held-out prompts by kind (``code``, ``copy``, ``chat``), as
``python -m bench.acceptance`` reports it. The policy takes it as the prior of a
kind of request the mode has not served yet (``policies/class_prior.py``).
"""

from __future__ import annotations

import json
import math
from pathlib import Path


def heldout_tau(drafter_dir: str | Path) -> dict[str, float]:
    """The card's held-out acceptance by kind; empty when the card has none."""
    try:
        config = json.loads((Path(drafter_dir) / "config.json").read_text())
    except (OSError, ValueError):
        return {}
    card = config.get("specgate_training") if isinstance(config, dict) else None
    figures = card.get("heldout_tau") if isinstance(card, dict) else None
    if not isinstance(figures, dict):
        return {}
    return {str(kind): float(tau) for kind, tau in figures.items()
            if isinstance(tau, int | float) and math.isfinite(tau) and tau >= 1.0}
