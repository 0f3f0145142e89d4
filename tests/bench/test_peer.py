"""bench.peer: batches and summary (each ratio from set-ups that ran side by side), the
sequential order, latencies, and the held-out workloads."""

from __future__ import annotations

import json

import pytest

from bench.peer import PhaseResult, Run, batches, merged, schedule, summarize
from bench.peer_servers import SETUPS
from bench.peer_workloads import WORKLOADS
from bench.sharegpt import conversations, records
from sim.scenarios import percentile


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


def test_sequential_runs_whole_workloads_back_to_back_in_rotating_order() -> None:
    setups = ["a", "b", "c"]
    assert schedule(setups, 2, "interleaved", 1) == [
        ("a", 0), ("b", 0), ("c", 0), ("b", 1), ("c", 1), ("a", 1)]
    assert schedule(setups, 2, "sequential", 2) == [
        ("a", 0), ("a", 1), ("b", 0), ("b", 1), ("c", 0), ("c", 1),
        ("b", 0), ("b", 1), ("c", 0), ("c", 1), ("a", 0), ("a", 1)]


def test_rounds_merge_into_one_phase_with_its_latencies() -> None:
    one = PhaseResult("p", 100, 10.0, {"standard": 2}, 1.0, [0.1, 0.3], [0.02, 0.04])
    two = PhaseResult("p", 300, 10.0, {"ngram": 1}, 1.0, [0.2], [0.03], moves=3)
    both = merged([one, two])
    assert (both.tokens, both.seconds, both.tokens_per_s) == (400, 20.0, 20.0)
    assert both.served_by == {"standard": 2, "ngram": 1}
    assert both.moves == 3
    assert both.latency() == pytest.approx({"ttft_p50_ms": 200.0, "ttft_p99_ms": 300.0,
                                            "tpot_p50_ms": 30.0, "tpot_p99_ms": 40.0})
    assert percentile([5.0], 0.99) == 5.0


def test_the_office_workload_says_none_of_the_old_classifiers_words() -> None:
    """Held-out traffic: it does not carry the words the keyword classifier (the
    baseline of ``bench.predictor_eval``) was tuned on."""
    from bench.keyword_classes import CODE, COPY

    said = [m["content"] for phase in WORKLOADS["office"] for conv in phase.prompts()
            for m in conv]
    assert said and not [t for t in said if CODE.search(t) or COPY.search(t)]
    follow_up = next(p for p in WORKLOADS["office"] if p.kind == "followups").prompts()[0]
    assert [m["role"] for m in follow_up] == ["user", "assistant", "user"]


def test_sharegpt_reads_the_complete_records_of_a_cut_file() -> None:
    def record(i: int, turns: list[tuple[str, str]]) -> str:
        return json.dumps({"id": str(i), "conversations": [
            {"from": who, "value": text} for who, text in turns]})

    long_q = "How do I plan a garden for a small balcony?"
    text = "[\n" + ",\n".join([
        record(0, [("human", long_q), ("gpt", "Start with pots."),
                   ("human", "Which herbs grow best there?")]),
        record(1, [("gpt", "no human first"), ("human", "ignored question here")]),
        record(2, [("human", "What is the tallest mountain in Europe?")]),
    ]) + ',\n{"id": "3", "conversations": [{"from": "human", "value": "cut her'
    assert [r["id"] for r in records(text)] == ["0", "1", "2"]
    got = conversations(text, count=5, stride=1)
    assert [c[0]["content"] for c in got.first_turns] == [
        long_q, "What is the tallest mountain in Europe?"]
    assert got.follow_ups == (({"role": "user", "content": long_q},
                               {"role": "assistant", "content": "Start with pots."},
                               {"role": "user", "content": "Which herbs grow best there?"}),)


def test_the_sharegpt_workload_comes_from_the_package() -> None:
    phases = WORKLOADS["sharegpt"]
    firsts = [c for p in phases if p.kind == "firsts" for c in p.prompts()]
    follows = [c for p in phases if p.kind == "followup" for c in p.prompts()]
    assert len(set(map(str, firsts))) == len(firsts)        # each phase its own
    assert all(len(c) == 1 for c in firsts) and all(len(c) == 3 for c in follows)
