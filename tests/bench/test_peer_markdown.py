"""The results page ``bench.peer_markdown`` writes from ``bench.peer``'s JSON output."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

from bench.peer import PhaseResult, Run
from bench.peer_markdown import render


def run(setup: str, rates: list[float], tpot_s: float = 0.05) -> dict[str, object]:
    phases = [PhaseResult(f"copy@{i + 1}", 100, 100 / r, {"ngram": 1}, 0.1, [0.2], [tpot_s])
              for i, r in enumerate(rates)]
    return {**asdict(Run(setup, "mixed", phases)), "latency": [p.latency() for p in phases]}


def test_the_page_gives_ratios_within_the_batch_and_the_phases_auto_loses(
        tmp_path: Path) -> None:
    out = tmp_path / "peer.json"
    out.write_text(json.dumps({"batches": [[
        run("vllm:plain", [10, 40]), run("vllm:eagle3", [20, 20], tpot_s=0.04),
        run("specgate:auto", [18, 36])]]}))
    page = render([out], "bench.peer, sequential", "Rerun: make bench-peer")
    # Best single: EAGLE-3, 200 tokens in 10 s; ceiling 200 / (5 + 2.5) s; auto
    # 200 / (100/18 + 100/36) s = 24.0 tok/s.
    row = next(line for line in page.splitlines() if line.startswith("| `mixed`"))
    assert row == ("| `mixed` | 16.0 | **20.0** | 26.7 (1.33x) | 24.0 | 1.20x | 1.50x |")
    assert "copy@1 0.90x (reuses the prompt): served by ngram 1, 0 moves" in page
    assert "copy@2 0.90x" in page
    assert "TPOT p50 above 1.10x the phase's fastest: copy@1 1.25x, copy@2 1.25x" in page
    assert "Rerun: make bench-peer" in page
    assert "specgate:auto          mixed       24.0 tok/s" in page
