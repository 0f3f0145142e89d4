"""Stage 4: write a trained drafter in the native format vLLM 0.32 loads.

EAGLE-3 loads as ``LlamaForCausalLMEagle3`` (``llama_eagle3.py``), DFlash as
``DFlashDraftModel`` (``qwen3_dflash.py``). Both carry their own output head
over the draft vocabulary plus ``d2t``; embeddings are the target's (vLLM
shares them when a checkpoint has none). Layer ids: EAGLE-3 counts 0 as the
embedding output; DFlash's ``target_layer_ids`` count one less (vLLM adds 1).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from torch import nn

from engines.embedded.target_shape import TargetShape
from training.vocab import DraftVocab

CARD = "README.md"


def export_drafter(method: str, model: nn.Module, vocab: DraftVocab, target_dir: Path,
                   layers: Sequence[int], out_dir: Path, *, block: int, mask_token_id: int,
                   card: dict[str, Any], window: int | None = None) -> None:
    from safetensors.torch import save_file

    t = TargetShape.from_model_dir(target_dir)
    tensors = {k: v.detach().to(torch.bfloat16).contiguous()
               for k, v in model.state_dict().items()}
    tensors["d2t"] = vocab.d2t().contiguous()
    shape: Any = model.s
    config = _config(method, t, vocab.size, list(layers), int(shape.layers), block,
                     mask_token_id, window, int(shape.kv_heads))
    config["specgate_training"] = card
    out_dir.mkdir(parents=True, exist_ok=True)
    save_file(tensors, str(out_dir / "model.safetensors"), metadata={"format": "pt"})
    (out_dir / "config.json").write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
    (out_dir / CARD).write_text(model_card(method, card))


def read_drafter(method: str, src: Path) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
    """Weights (float32, as training holds them) and ``d2t`` of a drafter written by
    ``export_drafter``: the starting point of a fine-tune (``--init-from``)."""
    from safetensors.torch import load_file

    config = json.loads((src / "config.json").read_text())
    wanted = {"eagle3": "LlamaForCausalLMEagle3", "dflash": "DFlashDraftModel"}[method]
    if config.get("architectures") != [wanted]:
        raise ValueError(f"{src} holds {config.get('architectures')}, not a {method} drafter "
                         f"({wanted})")
    tensors = load_file(str(src / "model.safetensors"))
    d2t = tensors.pop("d2t")
    return {k: v.float() for k, v in tensors.items()}, d2t


def _config(method: str, t: TargetShape, draft_vocab: int, layers: list[int], depth: int,
            block: int, mask_token_id: int, window: int | None,
            kv_heads: int) -> dict[str, Any]:
    base: dict[str, Any] = {
        "hidden_size": t.hidden_size, "intermediate_size": t.intermediate_size,
        "num_attention_heads": t.num_attention_heads,
        "num_key_value_heads": kv_heads, "head_dim": t.head_dim,
        "vocab_size": t.vocab_size, "draft_vocab_size": draft_vocab,
        "max_position_embeddings": t.max_position_embeddings, "rms_norm_eps": t.rms_norm_eps,
        "rope_theta": t.rope_theta,
        "rope_parameters": {"rope_type": "default", "rope_theta": t.rope_theta},
        "hidden_act": "silu", "attention_bias": False, "tie_word_embeddings": False,
        "dtype": "bfloat16", "target_hidden_size": t.hidden_size,
    }
    if method == "eagle3":
        return {**base, "architectures": ["LlamaForCausalLMEagle3"], "model_type": "llama",
                "num_hidden_layers": depth, "norm_before_residual": False,
                "eagle_aux_hidden_state_layer_ids": layers,
                "eagle_config": {"eagle_aux_hidden_state_layer_ids": layers,
                                 "use_aux_hidden_state": True}}
    kind = "full_attention" if window is None else "sliding_attention"
    dflash: dict[str, Any] = {"mask_token_id": mask_token_id, "causal": False,
                              "target_layer_ids": [k - 1 for k in layers]}
    if window is not None:
        dflash["swa_window_size"] = window
    # Trained with bidirectional attention inside the block: "causal" says so
    # explicitly (vLLM would otherwise infer it from the layer types). Every layer
    # is of one kind: mixed sliding/full drafters are refused on the CPU build.
    return {**base, "architectures": ["DFlashDraftModel"], "model_type": "qwen3",
            "num_hidden_layers": depth, "layer_types": [kind] * depth,
            "use_sliding_window": window is not None, "sliding_window": window,
            "block_size": block, "dflash_config": dflash}


def model_card(method: str, card: dict[str, Any]) -> str:
    name = {"eagle3": "EAGLE-3", "dflash": "DFlash"}[method]
    rows = "\n".join(f"| {k} | {v} |" for k, v in card.items())
    return (f"# {name} drafter for SmolLM2-135M-Instruct (SpecGate)\n\n"
            "Trained by `specgate train-drafter` on the target's own greedy answers to the\n"
            "built-in offline prompt set (stdlib documentation, docstrings and source,\n"
            "templated chat); the held-out prompts (training/data/heldout.jsonl) were\n"
            "never used in training.\n\n| | |\n|---|---|\n" + rows + "\n")
