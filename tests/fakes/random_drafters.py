"""Random-initialised EAGLE-3 and DFlash drafter checkpoints: a test fixture only.

The product ships trained drafters (engines/embedded/trained/); these random
ones, in the exact on-disk format vLLM 0.32 loads, let tests build drafter
directories for any tiny target without training.
Formats follow ``vllm/model_executor/models/llama_eagle3.py`` and
``qwen3_dflash.py``; embeddings and LM head are left out so vLLM shares the
target's (it does so whenever a drafter checkpoint lacks them).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from engines.embedded.target_shape import (
    TargetShape,
    dflash_target_layer_ids,
    eagle3_aux_layer_ids,
)

UNTRAINED_NOTE = "random-initialised drafter, not trained; accepts ~nothing"
INIT_STD = 0.02


def write_eagle3_drafter(out_dir: Path, target: TargetShape, *, seed: int = 0) -> None:
    aux_ids = eagle3_aux_layer_ids(target.num_hidden_layers)
    # vLLM feeds the target's embeddings into the drafter's layer, so the
    # drafter's width must equal the target's.
    h = target.hidden_size
    config = {
        **_size_keys(target),
        "architectures": ["LlamaForCausalLMEagle3"],
        "model_type": "llama",
        "num_hidden_layers": 1,
        "draft_vocab_size": target.vocab_size,  # same vocab: no d2t table
        "target_hidden_size": h,
        "eagle_aux_hidden_state_layer_ids": aux_ids,
        "eagle_config": {"eagle_aux_hidden_state_layer_ids": aux_ids,
                         "use_aux_hidden_state": True},
    }
    q, kv = _q_kv_sizes(target)
    shapes: dict[str, tuple[int, ...]] = {
        # The single layer attends over [embedding; hidden], hence 2*h inputs.
        "midlayer.self_attn.q_proj.weight": (q, 2 * h),
        "midlayer.self_attn.k_proj.weight": (kv, 2 * h),
        "midlayer.self_attn.v_proj.weight": (kv, 2 * h),
        "midlayer.self_attn.o_proj.weight": (h, q),
        **_mlp_shapes("midlayer.mlp", h, target.intermediate_size),
        "midlayer.input_layernorm.weight": (h,),
        "midlayer.hidden_norm.weight": (h,),
        "midlayer.post_attention_layernorm.weight": (h,),
        "norm.weight": (h,),
        "fc.weight": (h, len(aux_ids) * h),
    }
    _write(out_dir, config, shapes, seed, "EAGLE-3")


def write_dflash_drafter(out_dir: Path, target: TargetShape, *, mask_token_id: int,
                         num_layers: int = 2, block_size: int = 5, seed: int = 0) -> None:
    """vLLM ignores ``block_size``; serve with num_speculative_tokens = block_size - 1."""
    if not 0 <= mask_token_id < target.vocab_size:
        raise ValueError(f"mask_token_id {mask_token_id} outside vocab {target.vocab_size}")
    layer_ids = dflash_target_layer_ids(target.num_hidden_layers)
    h = target.hidden_size
    config = {
        **_size_keys(target),
        "architectures": ["DFlashDraftModel"],
        "model_type": "qwen3",  # vLLM's DFlash head is Qwen3-shaped whatever the target
        "num_hidden_layers": num_layers,
        # All full attention: mixed sliding/full drafters are refused on CPU.
        "layer_types": ["full_attention"] * num_layers,
        "use_sliding_window": False,
        "sliding_window": None,
        "target_hidden_size": h,
        "block_size": block_size,
        "dflash_config": {"mask_token_id": mask_token_id, "target_layer_ids": layer_ids},
    }
    q, kv = _q_kv_sizes(target)
    shapes: dict[str, tuple[int, ...]] = {}
    for i in range(num_layers):
        p = f"layers.{i}"
        shapes |= {
            f"{p}.self_attn.q_proj.weight": (q, h),
            f"{p}.self_attn.k_proj.weight": (kv, h),
            f"{p}.self_attn.v_proj.weight": (kv, h),
            f"{p}.self_attn.o_proj.weight": (h, q),
            f"{p}.self_attn.q_norm.weight": (target.head_dim,),
            f"{p}.self_attn.k_norm.weight": (target.head_dim,),
            **_mlp_shapes(f"{p}.mlp", h, target.intermediate_size),
            f"{p}.input_layernorm.weight": (h,),
            f"{p}.post_attention_layernorm.weight": (h,),
        }
    shapes |= {"norm.weight": (h,), "hidden_norm.weight": (h,),
               "fc.weight": (h, len(layer_ids) * h)}
    _write(out_dir, config, shapes, seed, "DFlash")


def _q_kv_sizes(target: TargetShape) -> tuple[int, int]:
    return (target.num_attention_heads * target.head_dim,
            target.num_key_value_heads * target.head_dim)


def _size_keys(target: TargetShape) -> dict[str, Any]:
    return {
        "hidden_size": target.hidden_size,
        "intermediate_size": target.intermediate_size,
        "num_attention_heads": target.num_attention_heads,
        "num_key_value_heads": target.num_key_value_heads,
        "head_dim": target.head_dim,
        "vocab_size": target.vocab_size,
        "max_position_embeddings": target.max_position_embeddings,
        "rms_norm_eps": target.rms_norm_eps,
        "rope_theta": target.rope_theta,
        "rope_parameters": {"rope_type": "default", "rope_theta": target.rope_theta},
        "hidden_act": "silu",
        "attention_bias": False,
        "tie_word_embeddings": False,
        "dtype": "bfloat16",
        "specgate_untrained": True,
        "specgate_note": UNTRAINED_NOTE,
    }


def _mlp_shapes(prefix: str, hidden: int, inter: int) -> dict[str, tuple[int, ...]]:
    return {f"{prefix}.gate_proj.weight": (inter, hidden),
            f"{prefix}.up_proj.weight": (inter, hidden),
            f"{prefix}.down_proj.weight": (hidden, inter)}


def _write(out_dir: Path, config: dict[str, Any], shapes: dict[str, tuple[int, ...]],
           seed: int, kind: str) -> None:
    import torch
    from safetensors.torch import save_file

    # One generator drawn in sorted-name order: same seed, same bytes on disk.
    gen = torch.Generator().manual_seed(seed)
    tensors = {}
    for name in sorted(shapes):
        shape = shapes[name]
        if len(shape) == 1:  # RMSNorm weights: identity scaling
            t = torch.ones(shape)
        else:
            t = torch.randn(shape, generator=gen) * INIT_STD
        tensors[name] = t.to(torch.bfloat16).contiguous()
    out_dir.mkdir(parents=True, exist_ok=True)
    save_file(tensors, str(out_dir / "model.safetensors"), metadata={"format": "pt"})
    (out_dir / "config.json").write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
    (out_dir / "README.md").write_text(
        f"# Untrained {kind} drafter (SpecGate)\n\n"
        f"This is a {UNTRAINED_NOTE}. It exists only so the gateway can run\n"
        f"vLLM's {kind} speculative-decoding path where no trained drafter can\n"
        "be downloaded. Outputs stay correct (speculative decoding is lossless),\n"
        "but it makes generation slower, not faster. Weights: normal(0, "
        f"{INIT_STD}) with seed {seed}; norms are ones.\n"
    )
