"""The features stage: resumable, and never reusing a shard that holds other data."""

from __future__ import annotations

from pathlib import Path

import pytest

from training.answers import Sample
from training.features import extract_features, load_shard

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def tiny_target(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from transformers import LlamaConfig, LlamaForCausalLM

    path = tmp_path_factory.mktemp("tiny-llama")
    config = LlamaConfig(vocab_size=64, hidden_size=16, intermediate_size=32,
                         num_hidden_layers=4, num_attention_heads=2, num_key_value_heads=1,
                         max_position_embeddings=64, tie_word_embeddings=True)
    LlamaForCausalLM(config).save_pretrained(path)
    return path


def samples(n: int) -> list[Sample]:
    return [Sample(f"p{i}", "chat", [1, 2 + i, 3], [4, 5, 6 + i]) for i in range(n)]


def test_more_prompts_refill_a_short_last_shard(tiny_target: Path, tmp_path: Path) -> None:
    """A run on 3 samples leaves a last shard of 1; a rerun on 4 (``--limit`` raised)
    must not take that shard as done, or a sample silently goes missing."""
    out = tmp_path / "features"
    first = extract_features(tiny_target, samples(3), out, layers=[0, 1, 2], shard_size=2)
    assert [len(load_shard(p).prompt_lens) for p in first] == [2, 1]
    stamp = first[0].stat().st_mtime_ns
    again = extract_features(tiny_target, samples(4), out, layers=[0, 1, 2], shard_size=2)
    assert [len(load_shard(p).prompt_lens) for p in again] == [2, 2]
    assert again[0].stat().st_mtime_ns == stamp          # the full shard was reused
    tokens = load_shard(again[1]).tokens.tolist()
    assert tokens == [1, 4, 3, 4, 5, 8, 1, 5, 3, 4, 5, 9]


def test_other_layers_are_recomputed(tiny_target: Path, tmp_path: Path) -> None:
    out = tmp_path / "features"
    (path,) = extract_features(tiny_target, samples(2), out, layers=[0, 1, 2])
    width = load_shard(path).feats.shape[-1]
    (path,) = extract_features(tiny_target, samples(2), out, layers=[1, 2])
    assert load_shard(path).feats.shape[-1] == width * 2 // 3


def test_distillation_features_hold_the_targets_final_state(tiny_target: Path,
                                                            tmp_path: Path) -> None:
    """With ``final`` the shard also holds the normed last hidden state, from which the
    target's own logits come back exactly; a shard without it is redone where it is
    asked for, and one with it serves a run that does not need it."""
    import torch
    from transformers import AutoModelForCausalLM

    out = tmp_path / "features"
    (path,) = extract_features(tiny_target, samples(2), out, layers=[0, 1, 2])
    assert load_shard(path).final is None
    (path,) = extract_features(tiny_target, samples(2), out, layers=[0, 1, 2], final=True)
    shard = load_shard(path)
    assert shard.final is not None and shard.final.shape == (shard.tokens.numel(), 16)
    stamp = path.stat().st_mtime_ns
    (path,) = extract_features(tiny_target, samples(2), out, layers=[0, 1, 2])
    assert path.stat().st_mtime_ns == stamp

    model = AutoModelForCausalLM.from_pretrained(str(tiny_target), dtype=torch.float32)
    tokens, _, _ = shard.sample(1)
    last = shard.final_of(1)
    assert last is not None
    with torch.no_grad():
        logits = model(input_ids=tokens[None]).logits[0]
    torch.testing.assert_close(last.float() @ model.lm_head.weight.T, logits,
                               atol=2e-2, rtol=2e-2)
