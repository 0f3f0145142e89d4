"""Training on a GPU rented by the minute: a wall-clock budget ends the training stage,
and the target's hidden states can stay in device memory instead of shards on disk."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest
import torch

from training.answers import Sample
from training.cli import add_parser, check_args
from training.dflash import DFlashDrafter, DFlashShape
from training.features import extract_features, features_on_device
from training.train import Example, TrainConfig, load_examples, train
from training.vocab import DraftVocab

pytestmark = pytest.mark.timeout(180)

V, H = 64, 16


def _vocab() -> DraftVocab:
    ids = torch.arange(V)
    return DraftVocab(ids, ids.clone(), 1.0)


def _examples(n: int) -> list[Example]:
    g = torch.Generator().manual_seed(0)
    out = []
    for _ in range(n):
        tokens = torch.randint(0, V - 1, (24,), generator=g)
        labels = tokens.clone()
        labels[:4] = -1
        out.append(Example(tokens, torch.randn(24, 3 * H, generator=g), labels))
    return out


def _model() -> DFlashDrafter:
    torch.manual_seed(0)
    shape = DFlashShape(H, 32, 2, 1, 8, 1e-5, 10000.0, 3, V, layers=1, block=3,
                        mask_token_id=V - 1)
    return DFlashDrafter(shape, torch.randn(V, H))


def test_a_time_budget_ends_training_early_and_a_rerun_does_not_train_on(
        tmp_path: Path) -> None:
    examples = _examples(40)
    cfg = TrainConfig(method="dflash", epochs=10_000, batch_tokens=48, steps_ahead=2,
                      anchors_per_seq=4, max_seconds=2.0, save_every=1_000_000)
    state = tmp_path / "state.pt"
    first = train(cfg, _model(), examples, state, "cpu")
    # 10,000 epochs of 20 steps would take hours: the clock ended it, after some steps.
    assert 1 <= first["steps"] < 20 * 10_000
    saved = torch.load(state, weights_only=True)
    assert saved["seconds"] >= 2.0 and saved["step"] == first["steps"]
    again = train(cfg, _model(), examples, state, "cpu")
    assert again["steps"] == first["steps"]


def test_without_a_budget_the_epochs_decide(tmp_path: Path) -> None:
    cfg = TrainConfig(method="dflash", epochs=2, batch_tokens=48, steps_ahead=2,
                      anchors_per_seq=4)
    metrics = train(cfg, _model(), _examples(40), tmp_path / "state.pt", "cpu")
    # 39 training examples (one held out) of 24 tokens, two to a 48-token batch: 20
    # steps an epoch.
    assert metrics["steps"] == 40


@pytest.fixture(scope="module")
def tiny_target(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from transformers import LlamaConfig, LlamaForCausalLM

    path = tmp_path_factory.mktemp("tiny-llama")
    config = LlamaConfig(vocab_size=V, hidden_size=H, intermediate_size=32,
                         num_hidden_layers=4, num_attention_heads=2, num_key_value_heads=1,
                         max_position_embeddings=64, tie_word_embeddings=True)
    LlamaForCausalLM(config).save_pretrained(path)
    return path


def test_features_held_in_memory_are_the_features_saved_to_disk(tiny_target: Path,
                                                                tmp_path: Path) -> None:
    samples = [Sample(f"p{i}", "chat", [1, 2 + i, 3], [4, 5, 6 + i] * (1 + i % 3))
               for i in range(7)]
    on_disk = extract_features(tiny_target, samples, tmp_path / "f", layers=[0, 1, 2],
                               shard_size=3)
    held = features_on_device(tiny_target, samples, layers=[0, 1, 2], device="cpu",
                              batch_tokens=20)
    assert len(held) > 1  # several forward batches, each its own shard
    a = load_examples(on_disk, _vocab(), max_len=640)
    b = load_examples(held, _vocab(), max_len=640)
    by_tokens = {tuple(ex.tokens.tolist()): ex for ex in b}
    assert len(a) == len(b) == 7 and len(by_tokens) == 7
    for ex in a:
        twin = by_tokens[tuple(ex.tokens.tolist())]
        assert torch.equal(ex.labels, twin.labels)
        assert ex.labels[:3].tolist() == [-1, -1, -1]  # no loss on the prompt
        torch.testing.assert_close(ex.feats, twin.feats, atol=1e-3, rtol=1e-3)


@pytest.mark.parametrize("minutes", ["0", "-5"])
def test_a_budget_that_is_not_positive_is_refused_before_any_stage(minutes: str) -> None:
    parser = argparse.ArgumentParser()
    add_parser(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["train-drafter", "--method", "dflash",
                              "--max-train-minutes", minutes])
    with pytest.raises(SystemExit, match="--max-train-minutes takes a positive budget"):
        check_args(args)
