"""bench.peer's batches and summary: each ratio from set-ups that ran side by side."""

from __future__ import annotations

import pytest

from bench.peer import PhaseResult, Run, batches, summarize
from bench.peer_servers import SETUPS


def test_every_setup_runs_once_and_each_comparison_shares_a_batch() -> None:
    got = batches(list(SETUPS))
    everything = [s for b in got for s in b if s != "vllm:plain"]
    assert sorted(everything) == sorted(s for s in SETUPS if s != "vllm:plain")
    assert all("vllm:plain" in b for b in got)
    auto = next(b for b in got if "specgate:auto" in b)
    assert {"vllm:ngram", "vllm:eagle3-ktable"} <= set(auto)
    forced = next(b for b in got if "specgate:standard" in b)
    assert {"vllm:eagle3", "specgate:eagle3"} <= set(forced)
    assert batches(["vllm:plain", "specgate:auto"]) == [["vllm:plain", "specgate:auto"]]
    assert batches(["vllm:plain"]) == [["vllm:plain"]]


def run(setup: str, rates: list[float]) -> Run:
    return Run(setup, "mixed", [PhaseResult(f"p{i}", 100, 100 / r)
                                for i, r in enumerate(rates)])


def test_ratios_come_from_the_batch_that_ran_both_sides() -> None:
    first = [run("vllm:plain", [10, 40]), run("vllm:eagle3", [20, 20]),
             run("specgate:auto", [18, 36])]
    second = [run("vllm:plain", [5, 20]), run("specgate:standard", [5, 19])]
    out = summarize([first, second], ["mixed"])
    # best single: EAGLE-3, 200 tokens in 10 s (plain takes 12.5); ceiling: 5 + 2.5 s.
    assert out["mixed_best_single"] == pytest.approx(20.0)
    assert out["mixed_ceiling"] == pytest.approx(200 / 7.5)
    assert out["peer_auto_vs_best_single"] == pytest.approx((200 / (100 / 18 + 100 / 36)) / 20)
    ours, theirs = 200 / (100 / 5 + 100 / 19), 200 / (100 / 5 + 100 / 20)
    assert out["peer_standard_vs_vllm"] == pytest.approx(ours / theirs)
    assert "peer_eagle3_vs_vllm" not in out      # never side by side
