"""The few facts about a target model that drafters (and their training) must match."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class TargetShape:
    """The few facts about the target model a drafter has to match."""

    hidden_size: int
    intermediate_size: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    num_hidden_layers: int
    vocab_size: int
    max_position_embeddings: int
    rms_norm_eps: float
    rope_theta: float

    @classmethod
    def from_model_dir(cls, model_dir: Path) -> TargetShape:
        cfg = json.loads((model_dir / "config.json").read_text())
        rope = cfg.get("rope_parameters") or {}
        return cls(
            hidden_size=cfg["hidden_size"],
            intermediate_size=cfg["intermediate_size"],
            num_attention_heads=cfg["num_attention_heads"],
            num_key_value_heads=cfg.get("num_key_value_heads", cfg["num_attention_heads"]),
            head_dim=cfg.get("head_dim") or cfg["hidden_size"] // cfg["num_attention_heads"],
            num_hidden_layers=cfg["num_hidden_layers"],
            vocab_size=cfg["vocab_size"],
            max_position_embeddings=cfg["max_position_embeddings"],
            rms_norm_eps=cfg["rms_norm_eps"],
            rope_theta=float(rope.get("rope_theta", cfg.get("rope_theta", 10000.0))),
        )


def eagle3_aux_layer_ids(num_target_layers: int) -> list[int]:
    """vLLM's own default for Llama, written down so the checkpoint is explicit.

    vLLM numbering: 0 is the embedding output, i the output of layer i-1.
    """
    return [2, num_target_layers // 2, num_target_layers - 3]


def dflash_target_layer_ids(num_target_layers: int, count: int = 3) -> list[int]:
    """Evenly spaced 0-based layers from 1 to L-3, the DFlash reference spacing."""
    start, end = 1, num_target_layers - 3
    if count == 1:
        return [num_target_layers // 2]
    return [round(start + i * (end - start) / (count - 1)) for i in range(count)]


def special_token_id(model_dir: Path, content: str) -> int:
    """Id of an added special token, read from tokenizer.json without transformers."""
    tok = json.loads((model_dir / "tokenizer.json").read_text())
    for added in tok.get("added_tokens", []):
        if added.get("content") == content:
            return int(added["id"])
    raise KeyError(f"{content!r} is not a special token of {model_dir}")
