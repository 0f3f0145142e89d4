"""The draft vocabulary (a kept one holds every token the starting drafter proposes),
and the flags that shape it refused up front when they cannot work together."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

from training.answers import Sample, save_known_answers
from training.cli import _vocab


def _target(tmp_path: Path) -> Path:
    target = tmp_path / "target"
    target.mkdir()
    (target / "config.json").write_text(json.dumps({"eos_token_id": 2, "vocab_size": 64}))
    return target


def _drafter(tmp_path: Path, tokens: list[int]) -> Path:
    out = tmp_path / "drafter"
    out.mkdir()
    ids = torch.tensor(sorted(tokens))
    save_file({"d2t": ids - torch.arange(len(tokens))}, str(out / "model.safetensors"))
    return out


def test_a_grown_vocabulary_keeps_the_drafters_tokens_and_adds_the_most_said(
        tmp_path: Path) -> None:
    """Growing 4 -> 8 draft tokens: the drafter's 4 (even a rare one), then the tokens
    the target says most across all answers held, not only in this run's slice."""
    target = _target(tmp_path)
    start = _drafter(tmp_path, [2, 5, 6, 40])
    run = [Sample("a", "chat", [1], [5, 6, 7, 7, 7]), Sample("b", "chat", [1], [8, 5])]
    known = tmp_path / "known.jsonl.gz"
    said = [9] * 6 + [10] * 5 + [11] * 4 + [12] * 3 + [13]
    save_known_answers([*run, Sample("c", "chat", [1], said)], known)
    vocab = _vocab(tmp_path, run, 8, target, init_from=start, known=known)
    assert vocab.draft_to_target.tolist() == [2, 5, 6, 7, 9, 10, 11, 40]
    assert vocab.size == 8


def test_by_default_the_vocabulary_comes_from_this_runs_answers(tmp_path: Path) -> None:
    run = [Sample("a", "chat", [1], [5, 6, 7, 7, 7]), Sample("b", "chat", [1], [8, 5])]
    vocab = _vocab(tmp_path, run, 4, _target(tmp_path))
    assert vocab.draft_to_target.tolist() == [2, 5, 6, 7]


def test_keeping_a_larger_vocabulary_than_asked_is_refused(tmp_path: Path) -> None:
    start = _drafter(tmp_path, [2, 5, 6, 40])
    with pytest.raises(SystemExit, match="--draft-vocab"):
        _vocab(tmp_path, [Sample("a", "chat", [1], [5])], 3, _target(tmp_path),
               init_from=start)


@pytest.mark.parametrize(("flags", "message"), [
    (["--method", "eagle3", "--keep-vocab"], "--keep-vocab keeps the vocabulary of the "
                                             "--init-from drafter"),
    (["--method", "eagle3", "--distill", "1.5"], "--distill takes a weight from 0 to 1"),
    (["--method", "both", "--init-from", "d"], "--init-from takes one --method"),
    (["--method", "eagle3", "--dflash-kv-heads", "9"], "--dflash-kv-heads shapes a DFlash"),
])
def test_impossible_flags_are_refused_before_any_stage_runs(flags: list[str], message: str,
                                                            tmp_path: Path) -> None:
    """Refused up front with the flag to fix, not after an hour of answers; nothing is
    written to the work directory."""
    import argparse

    from training.cli import add_parser, run

    parser = argparse.ArgumentParser()
    add_parser(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["train-drafter", *flags, "--work-dir", str(tmp_path / "w")])
    with pytest.raises(SystemExit, match=message):
        run(args, tmp_path)
    assert not (tmp_path / "w").exists()


@pytest.mark.parametrize("kv", ["4", "0", "-3"])
def test_dflash_kv_heads_that_do_not_divide_the_targets_heads_are_refused_up_front(
        kv: str, tmp_path: Path) -> None:
    """Checked against the target's shape before the prompts, answers or features."""
    import argparse

    from training.cli import add_parser, run

    target = tmp_path / "target"
    target.mkdir()
    (target / "config.json").write_text('{"num_attention_heads": 9}')
    parser = argparse.ArgumentParser()
    add_parser(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["train-drafter", "--method", "dflash", "--target", str(target),
                              "--dflash-kv-heads", kv, "--work-dir", str(tmp_path / "w")])
    with pytest.raises(SystemExit, match="must divide the target's 9 attention heads"):
        run(args, tmp_path)
    assert not (tmp_path / "w").exists()
