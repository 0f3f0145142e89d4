"""``specgate train-drafter`` end to end on a tiny slice: every stage runs, the loss
falls, and both checkpoints load in vLLM and generate (``bench.acceptance``)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from training.answers import read_samples, save_known_answers


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, *args], capture_output=True, text=True,
                          timeout=800, env={**os.environ, "HF_HUB_OFFLINE": "1"})


def test_train_drafter_smoke_then_vllm_loads_both(tmp_path: Path) -> None:
    work, out = tmp_path / "work", tmp_path / "drafters"
    none = tmp_path / "no-known-answers.jsonl.gz"     # generate every answer here
    r = run("-m", "gateway.cli", "train-drafter", "--method", "both", "--limit", "6",
            "--max-answer-tokens", "48", "--epochs", "12", "--draft-vocab", "1024",
            "--work-dir", str(work), "--out", str(out), "--known-answers", str(none))
    assert r.returncode == 0, r.stderr[-4000:]
    for method in ("eagle3", "dflash"):
        metrics = json.loads((work / f"{method}-n6" / "metrics.json").read_text())
        assert metrics["loss_last"] < 0.8 * metrics["loss_first"], (method, metrics)
        cfg = json.loads((out / method / "config.json").read_text())
        assert cfg["draft_vocab_size"] == 1024
        assert (out / method / "README.md").exists()
    # Resuming is a no-op: every stage finds its output.
    again = run("-m", "gateway.cli", "train-drafter", "--method", "eagle3", "--limit", "6",
                "--max-answer-tokens", "48", "--epochs", "12", "--draft-vocab", "1024",
                "--work-dir", str(work), "--out", str(out))
    assert again.returncode == 0, again.stderr[-4000:]
    assert "answers:" not in again.stderr and "features:" not in again.stderr

    # Known answers (what the project ships for its embedded model) are reused: a
    # fresh work directory needs no engine for stage 1. This run also fine-tunes the
    # drafter trained above (--init-from): it starts from that drafter's weights, on
    # a slice of the prompts that leaves out the first two (--skip), one layer deeper
    # (the new layer starts as an identity, so the start is still that drafter).
    known = tmp_path / "known.jsonl.gz"
    save_known_answers(read_samples(work / "answers.jsonl"), known)
    fresh = tmp_path / "fresh"
    reused = run("-m", "gateway.cli", "train-drafter", "--method", "eagle3", "--skip", "2",
                 "--limit", "4", "--max-answer-tokens", "48", "--epochs", "1",
                 "--draft-vocab", "1024", "--work-dir", str(fresh),
                 "--out", str(tmp_path / "again"),
                 "--known-answers", str(known), "--init-from", str(out / "eagle3"),
                 "--eagle3-layers", "2")
    assert reused.returncode == 0, reused.stderr[-4000:]
    scratch = json.loads((work / "eagle3-n6" / "metrics.json").read_text())
    # Its own state and features, not the base's or a run from the first prompt.
    (tuned_dir,) = fresh.glob("eagle3-n4-from-eagle3-*-2layers-from2")
    tuned = json.loads((tuned_dir / "metrics.json").read_text())
    assert tuned["loss_first"] < 0.8 * scratch["loss_first"], (tuned, scratch)
    assert (fresh / "features-from2").is_dir() and not (fresh / "features").exists()
    assert "starting from" in reused.stdout
    assert "reused from" in reused.stdout and "answers:" not in reused.stderr
    assert read_samples(fresh / "answers.jsonl") == read_samples(work / "answers.jsonl")[2:]

    deeper = tmp_path / "again" / "eagle3"
    assert json.loads((deeper / "config.json").read_text())["num_hidden_layers"] == 2

    # vLLM loads and drafts with both the two-layer EAGLE-3 and the DFlash drafter.
    acc = tmp_path / "acceptance.json"
    r = run("-m", "bench.acceptance", "--eagle3", str(deeper), "--dflash",
            str(out / "dflash"), "--limit", "1", "--max-tokens", "16", "--out", str(acc))
    assert r.returncode == 0, r.stderr[-4000:]
    rows = {row["method"]: row for row in json.loads(acc.read_text())}
    for method in ("eagle3", "dflash"):
        assert rows[method]["tokens"] > 0 and rows[method]["drafts"] > 0, rows[method]

