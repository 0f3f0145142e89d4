"""The simulator reproduces the published GSM8K table from the one parameter file."""

from __future__ import annotations

from dataclasses import replace

from sim.calibrate import analytic_rows, compare, max_speedup_error
from sim.params import PUBLISHED_CONCURRENCY, PUBLISHED_SPEEDUP, SimParams


def test_every_published_speedup_within_ten_percent() -> None:
    rows = compare(SimParams(), scale=2.0)
    assert len([r for r in rows if r.mode in PUBLISHED_SPEEDUP]) == \
        len(PUBLISHED_SPEEDUP) * len(PUBLISHED_CONCURRENCY)
    assert max_speedup_error(rows) <= 0.10, [(r.mode, r.concurrency, round(r.error, 3))
                                             for r in rows]


def test_the_check_can_fail() -> None:
    params = SimParams()
    dflash = params.drafters["dflash"]
    broken = replace(params, drafters={**params.drafters,
                                       "dflash": replace(dflash, pass_s=dflash.pass_s * 3)})
    assert max_speedup_error(analytic_rows(broken)) > 0.10
