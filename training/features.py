"""Stage 2: the target's hidden states over prompt + answer, saved in shards.

Both drafters read the same layers (``FEATURE_LAYERS``, Hugging Face numbering:
0 is the embedding output, k the residual stream after layer k-1, which is
vLLM's auxiliary-layer numbering too), so one pass serves EAGLE-3 and DFlash.
Computed from the float32 target (the embedded default's served precision), with
matrix products in bf16 where the hardware has bf16 units (``training.device``:
GPUs, AMX CPUs; the residual stream stays float32), stored as fp16, one
safetensors shard per ``shard_size`` samples; a rerun skips shards already written.
With ``final``, each shard also holds the target's normed last hidden state (its
logits, through the output head, are the teacher for distillation); the whole
target then runs, not only the layers read.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from training.answers import Sample
from training.device import bf16_autocast
from training.progress import Progress


def feature_layers(num_target_layers: int) -> list[int]:
    """Low, middle and high layers, as vLLM's EAGLE-3 default picks them."""
    return [2, num_target_layers // 2, num_target_layers - 3]


@dataclass
class Shard:
    """Samples packed end to end: ``offsets[i]:offsets[i+1]`` is sample i."""

    tokens: torch.Tensor  # [N] int64
    feats: torch.Tensor  # [N, len(layers) * hidden] fp16
    offsets: list[int]
    prompt_lens: list[int]
    final: torch.Tensor | None = None  # [N, hidden] fp16, where extracted with ``final``

    def __len__(self) -> int:
        return len(self.prompt_lens)

    def sample(self, i: int) -> tuple[torch.Tensor, torch.Tensor, int]:
        a, b = self.offsets[i], self.offsets[i + 1]
        return self.tokens[a:b], self.feats[a:b], self.prompt_lens[i]

    def final_of(self, i: int) -> torch.Tensor | None:
        return None if self.final is None else self.final[self.offsets[i]:self.offsets[i + 1]]


def extract_features(model_dir: Path, samples: Sequence[Sample], out_dir: Path, *,
                     layers: Sequence[int], shard_size: int = 128, batch_tokens: int = 4096,
                     device: str = "cpu", final: bool = False) -> list[Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    shards = [samples[i:i + shard_size] for i in range(0, len(samples), shard_size)]
    paths = [out_dir / f"shard-{n:04d}.safetensors" for n in range(len(shards))]
    # A shard is reused only if it holds these samples at these layers: a rerun with
    # more prompts refills a last shard that was short, another layer set redoes all,
    # and one without the final state is redone where it is asked for.
    todo = [(p, s) for p, s in zip(paths, shards, strict=True)
            if not _reusable(_stamp(s, layers, final), _stamp_of(p))]
    if not todo:
        return paths
    model = _target(model_dir, device, keep_layers=None if final else max(layers) + 1)
    total = sum(len(x.prompt_ids) + len(x.answer_ids) for _, s in todo for x in s)
    bar = Progress("features", total=total, unit="tok")
    began, seen = time.monotonic(), 0
    for path, shard in todo:
        feats: list[tuple[torch.Tensor, torch.Tensor | None]] = []
        for group in _length_batches(shard, batch_tokens):
            feats += _forward(model, group, layers, device, final)
            n = sum(len(x.prompt_ids) + len(x.answer_ids) for x in group)
            seen += n
            bar.advance(n, note=f"{seen / (time.monotonic() - began):.0f} tok/s")
        order = {id(x): f for x, f in zip(_length_sorted(shard), feats, strict=True)}
        _save(path, shard, [order[id(x)] for x in shard], layers, final)
    bar.close()
    return paths


def features_on_device(model_dir: Path, samples: Sequence[Sample], *, layers: Sequence[int],
                       device: str, batch_tokens: int = 16384,
                       final: bool = False) -> list[Shard]:
    """Stage 2 without the disk, for a GPU with memory for every feature: one shard per
    forward batch, its features left in device memory (fp16, as saved shards hold them)
    and its tokens on the host. Nothing is resumable, and nothing needs to be: on a
    GPU the stage takes about a minute, while shards of the whole prompt set (3.4 kB
    per token for the embedded model) would take tens of gigabytes to write and read
    back, and every step would copy its features to the device again."""
    model = _target(model_dir, device, keep_layers=None if final else max(layers) + 1)
    total = sum(len(x.prompt_ids) + len(x.answer_ids) for x in samples)
    bar = Progress("features", total=total, unit="tok")
    began, seen = time.monotonic(), 0
    out: list[Shard] = []
    for group in _length_batches(samples, batch_tokens):
        shard = _pack(group, _forward(model, group, layers, device, final, keep_on=device),
                      final)
        out.append(shard)
        n = shard.offsets[-1]
        seen += n
        bar.advance(n, note=f"{seen / (time.monotonic() - began):.0f} tok/s")
    bar.close()
    return out


def load_shard(path: Path) -> Shard:
    from safetensors import safe_open

    with safe_open(str(path), framework="pt") as f:
        meta = json.loads(f.metadata()["specgate"])
        final = f.get_tensor("final") if "final" in f.keys() else None
        return Shard(f.get_tensor("tokens"), f.get_tensor("feats"), meta["offsets"],
                     meta["prompt_lens"], final)


def _target(model_dir: Path, device: str, keep_layers: int | None) -> Any:
    """The target in float32, as the embedded default serves it, cut after the last layer
    read unless the final state is wanted (``keep_layers`` None): layers above it cannot
    change the features (one more is kept so that entry ``max(layers)`` is a plain
    residual stream, never the final norm's output)."""
    from transformers import AutoModelForCausalLM

    model: Any = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=torch.float32)
    if keep_layers is not None:
        model.model.layers = model.model.layers[:keep_layers]
    return model.to(device).eval()


def _length_sorted(shard: Sequence[Sample]) -> list[Sample]:
    return sorted(shard, key=lambda x: len(x.prompt_ids) + len(x.answer_ids))


def _length_batches(shard: Sequence[Sample], batch_tokens: int) -> Iterator[list[Sample]]:
    group: list[Sample] = []
    for x in _length_sorted(shard):
        longest = len(x.prompt_ids) + len(x.answer_ids)
        if group and longest * (len(group) + 1) > batch_tokens:
            yield group
            group = []
        group.append(x)
    if group:
        yield group


@torch.inference_mode()
def _forward(model: Any, group: list[Sample], layers: Sequence[int], device: str,
             final: bool, keep_on: str = "cpu") -> list[tuple[torch.Tensor,
                                                               torch.Tensor | None]]:
    seqs = [x.prompt_ids + x.answer_ids for x in group]
    width = max(map(len, seqs))
    ids = torch.zeros(len(seqs), width, dtype=torch.long)
    mask = torch.zeros(len(seqs), width, dtype=torch.long)
    for i, s in enumerate(seqs):  # right padding: causal attention never sees it
        ids[i, :len(s)] = torch.tensor(s)
        mask[i, :len(s)] = 1
    with torch.autocast(device_type=device.split(":")[0], dtype=torch.bfloat16,
                        enabled=bf16_autocast(device)):
        out = model.model(input_ids=ids.to(device), attention_mask=mask.to(device),
                          output_hidden_states=True)
    stacked = torch.cat([out.hidden_states[k] for k in layers], dim=-1)
    last = out.last_hidden_state  # after the final norm: logits = lm_head(last)
    return [(stacked[i, :len(s)].to(keep_on, torch.float16),
             last[i, :len(s)].to(keep_on, torch.float16) if final else None)
            for i, s in enumerate(seqs)]


def _stamp(shard: Sequence[Sample], layers: Sequence[int], final: bool) -> dict[str, Any]:
    return {"ids": [x.id for x in shard], "layers": list(layers), "final": final}


def _reusable(wanted: dict[str, Any], have: dict[str, Any] | None) -> bool:
    """Same samples and layers, and the final state where it is wanted (one that has
    it serves a run that does not need it)."""
    return (have is not None and have["ids"] == wanted["ids"]
            and have["layers"] == wanted["layers"] and (have["final"] or not wanted["final"]))


def _stamp_of(path: Path) -> dict[str, Any] | None:
    if not path.exists():
        return None
    from safetensors import safe_open

    with safe_open(str(path), framework="pt") as f:
        meta = json.loads(f.metadata()["specgate"])
    return {"ids": meta.get("ids"), "layers": meta.get("layers"),
            "final": bool(meta.get("final", False))}


def _pack(samples: Sequence[Sample], feats: list[tuple[torch.Tensor, torch.Tensor | None]],
          final: bool) -> Shard:
    """Samples and their features (in the samples' order) packed end to end."""
    offsets = [0]
    for f, _ in feats:
        offsets.append(offsets[-1] + f.shape[0])
    tokens = torch.tensor([t for x in samples for t in x.prompt_ids + x.answer_ids])
    last = torch.cat([g for _, g in feats if g is not None]) if final else None
    return Shard(tokens, torch.cat([f for f, _ in feats]), offsets,
                 [len(x.prompt_ids) for x in samples], last)


def _save(path: Path, samples: Sequence[Sample],
          feats: list[tuple[torch.Tensor, torch.Tensor | None]], layers: Sequence[int],
          final: bool) -> None:
    from safetensors.torch import save_file

    shard = _pack(samples, feats, final)
    meta = {"offsets": shard.offsets, "prompt_lens": shard.prompt_lens,
            **_stamp(samples, layers, final)}
    tensors = {"tokens": shard.tokens, "feats": shard.feats.contiguous()}
    if shard.final is not None:
        tensors["final"] = shard.final.contiguous()
    tmp = path.with_suffix(".tmp")
    save_file(tensors, str(tmp), metadata={"specgate": json.dumps(meta)})
    tmp.replace(path)
