"""The CPU sweep's report: auto against the best forced mode, pooled and per round."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

import pytest

from bench.cpu_sweep import POLICIES, Cell, auto_vs_best, load, markdown, merge, round_ratios


def _cell(policy: str, tokens: int, seconds: float) -> Cell:
    return Cell("free", 2, policy, tokens, seconds, [seconds], {policy: 1})


def _cells(auto: list[tuple[int, float]], best: list[tuple[int, float]]) -> list[Cell]:
    """Four rounds: plain decoding, n-gram and EAGLE-3 slow, DFlash ``best``."""
    cells = []
    for policy in POLICIES:
        parts = {"auto": auto, "dflash": best}.get(policy, [(10, 1.0)] * len(auto))
        cells.append(merge([_cell(policy, t, s) for t, s in parts]))
    return cells


def test_one_slow_round_shows_as_spread_beside_the_pooled_ratio() -> None:
    """A round where the machine stalled auto's block pulls the pooled figure under
    0.90; the per-round figures show the other three level with the best."""
    cells = _cells(auto=[(32, 1.0), (32, 1.0), (32, 1.0), (32, 2.0)],
                   best=[(32, 1.0)] * 4)
    assert auto_vs_best(cells)[("free", 2)] == pytest.approx(128 / 5.0 / 32)
    assert round_ratios(cells)[("free", 2)] == pytest.approx([1.0, 1.0, 1.0, 0.5])
    table = markdown(cells)
    assert "| 0.80 | 0.50–1.00 | auto 4 |" in table


def test_a_sweep_written_before_rounds_were_kept_still_reports(tmp_path: Path) -> None:
    cells = _cells(auto=[(30, 1.0)] * 2, best=[(32, 1.0)] * 2)
    rows = [{k: v for k, v in asdict(c).items() if k != "rounds"} for c in cells]
    path = tmp_path / "cpu_sweep.json"
    path.write_text(json.dumps(rows))
    old = load(path)
    assert round_ratios(old)[("free", 2)] == []
    assert "| 0.94 | – | auto 2 |" in markdown(old)
