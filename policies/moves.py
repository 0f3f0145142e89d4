"""When moving requests in flight off a mode is justified (``service/moves.py``).

A cost decision made before the old mode has run at its current batch rests on a
prior, and a move would make it stick: the moved engine never runs that batch, so
its real cost is never measured and the prior never corrected (a cold burst of 128
math requests moved off DFlash to plain decoding stayed there, 0.87x of DFlash,
in the simulator). Requests therefore move off a mode only once its engine has
measured decode steps at (about) the batch it holds now; until then they finish
where they are, and their steps are the measurement.
"""

from __future__ import annotations

from policies.base import ModeLoad


def cost_is_measured(load: ModeLoad) -> bool:
    """``load``'s engine has measured decode steps at half its current batch or more."""
    batch = load.batch_size
    return batch > 0 and any(samples > 0 and 2 * measured >= batch
                             for measured, _, samples in load.step_profile)
