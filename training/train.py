"""Stage 3: train a drafter on the saved features; resumable from its last save.

The drafter starts from the target where shapes allow (its output head from
the target's tied embeddings restricted to the draft vocabulary, its final
norm from the target's, its layers from the target's last layers), so it
begins close to "what would the top of the target say" and learns the rest.
"""

from __future__ import annotations

import json
import math
import random
import time
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from engines.embedded.target_shape import TargetShape
from training.device import bf16_autocast
from training.dflash import DFlashDrafter, DFlashShape
from training.eagle3 import Eagle3Drafter, Eagle3Shape
from training.features import Shard, load_shard
from training.progress import Progress
from training.vocab import DraftVocab


@dataclass(frozen=True)
class TrainConfig:
    method: str  # "eagle3" | "dflash"
    epochs: float = 2.0
    lr: float = 1e-3
    batch_tokens: int = 6144
    max_len: int = 640
    steps_ahead: int = 3  # EAGLE-3: draft tokens per step (K); DFlash: masked slots (K)
    dflash_layers: int = 2
    eagle3_layers: int = 1
    dflash_window: int | None = 32
    # DFlash key/value heads (None: the target's). The target's hidden states reach the
    # block only through the k/v projections; more heads widen that path.
    dflash_kv_heads: int | None = None
    anchors_per_seq: int = 64
    seed: int = 0
    save_every: int = 25
    # A wall-clock budget for the training stage (None: the epochs alone decide): the
    # learning-rate schedule then runs on whichever of steps and time is further along,
    # and the stage ends when either is spent, as on a GPU rented by the minute.
    max_seconds: float | None = None
    val_fraction: float = 0.04
    # Weight of the soft term (the target's distribution over the draft vocabulary)
    # against the target's greedy token; needs features extracted with the final state.
    distill: float = 0.0


@dataclass
class Example:
    tokens: torch.Tensor
    feats: torch.Tensor
    labels: torch.Tensor
    final: torch.Tensor | None = None  # the target's normed last hidden state


def load_examples(shards: Sequence[Path | Shard], vocab: DraftVocab, max_len: int,
                  final: bool = False) -> list[Example]:
    """Examples from saved shards, or from shards held in memory (``features_on_device``),
    whose features stay where they are: a step then gathers its batch on the device."""
    out = []
    for path in shards:
        shard = path if isinstance(path, Shard) else load_shard(path)
        if final and shard.final is None:
            raise ValueError(f"{path} holds no final hidden states: extract features with "
                             "final=True to distill")
        for i in range(len(shard)):
            tokens, feats, prompt_len = shard.sample(i)
            tokens, feats = tokens[:max_len], feats[:max_len]
            labels = vocab.to_draft(tokens)
            labels[:prompt_len] = -1  # the drafter only ever proposes answer tokens
            last = shard.final_of(i) if final else None
            out.append(Example(tokens, feats, labels,
                               None if last is None else last[:max_len]))
    return out


def build_model(cfg: TrainConfig, target_dir: Path, vocab: DraftVocab, num_aux: int,
                mask_token_id: int) -> nn.Module:
    from safetensors.torch import load_file

    t = TargetShape.from_model_dir(target_dir)
    w = load_file(str(target_dir / "model.safetensors"))
    embed = w["model.embed_tokens.weight"].float()
    model: nn.Module
    if cfg.method == "eagle3":
        model = Eagle3Drafter(Eagle3Shape(
            t.hidden_size, t.intermediate_size, t.num_attention_heads, t.num_key_value_heads,
            t.head_dim, t.rms_norm_eps, t.rope_theta, num_aux, vocab.size, cfg.eagle3_layers),
            embed)
        layers = {"midlayer": t.num_hidden_layers - 1}
    else:
        model = DFlashDrafter(DFlashShape(
            t.hidden_size, t.intermediate_size, t.num_attention_heads,
            cfg.dflash_kv_heads or t.num_key_value_heads,
            t.head_dim, t.rms_norm_eps, t.rope_theta, num_aux, vocab.size, cfg.dflash_layers,
            cfg.steps_ahead + 1, mask_token_id, cfg.dflash_window), embed)
        # DFlash starts from scratch: copied late target layers (and the target's
        # output head) swamp the anchor token's small embedding in the residual
        # stream, and its draft positions then learn nothing but token frequencies.
        layers = {}
    torch.manual_seed(cfg.seed)
    for p in model.parameters():
        if p.dim() == 2:
            nn.init.normal_(p, std=0.02)
    if cfg.distill > 0:
        head = w.get("lm_head.weight", w["model.embed_tokens.weight"]).float()
        model.set_teacher(head[vocab.draft_to_target])
    own = model.state_dict()
    with torch.no_grad():
        if cfg.method == "eagle3":
            own["lm_head.weight"].copy_(embed[vocab.draft_to_target])
            own["norm.weight"].copy_(w["model.norm.weight"].float())
        for mine, theirs in layers.items():
            for name in ("mlp.gate_proj", "mlp.up_proj", "mlp.down_proj", "self_attn.o_proj",
                         "input_layernorm", "post_attention_layernorm"):
                own[f"{mine}.{name}.weight"].copy_(w[f"model.layers.{theirs}.{name}.weight"])
        # EAGLE-3's further layers start as identities (their residual branches
        # zeroed): the drafter starts as its first layer alone, and a fine-tune from
        # a shallower drafter starts exactly where that one ended.
        if cfg.method == "eagle3":
            for name, tensor in own.items():
                if name.startswith("layers.") and name.endswith(("o_proj.weight",
                                                                 "down_proj.weight")):
                    tensor.zero_()
    return model


def start_from(model: nn.Module, weights: dict[str, torch.Tensor], d2t: torch.Tensor,
               vocab: DraftVocab) -> int:
    """Fine-tune from an exported drafter: its weights, and its output-head rows for the
    draft tokens both vocabularies hold (the rest keep ``build_model``'s start, so a
    vocabulary rebuilt from new data covers it). Returns the rows carried over."""
    own = model.state_dict()
    extra = sorted(set(weights) - set(own))
    if extra:
        raise ValueError(f"the starting drafter has weights this one lacks ({extra[0]}, ...): "
                         "is it deeper? Train at its depth (--eagle3-layers / "
                         "--dflash-layers) or more")
    old_targets = d2t.long() + torch.arange(int(d2t.numel()))
    head = "lm_head.weight"
    shape: Any = model.s
    head_dim = int(shape.head_dim)
    with torch.no_grad():
        for name, tensor in weights.items():
            if name != head:
                own[name].copy_(_widened(name, tensor, own[name].shape, head_dim))
        # A deeper drafter than the start: the layers the start lacks begin as
        # identities (residual branches zeroed), so the fine-tune starts exactly
        # where the starting drafter ended and the new layers learn from there.
        for name, tensor in own.items():
            if (name.startswith("layers.") and name not in weights
                    and name.endswith(("o_proj.weight", "down_proj.weight"))):
                tensor.zero_()
        rows = vocab.target_to_draft[old_targets]
        kept = rows >= 0
        own[head][rows[kept]] = weights[head][kept]
    return int(kept.sum())


def _widened(name: str, tensor: torch.Tensor, shape: torch.Size,
             head_dim: int) -> torch.Tensor:
    """A starting drafter's weight for a drafter with r times its key/value heads: each
    k/v head repeated r times, so new kv head j is old head j // r. Query head h read old
    head h // g; it now reads new head h // (g / r), a copy of that same head, and the
    wider drafter drafts exactly as the narrower one did."""
    if tensor.shape == shape:
        return tensor
    rows, cols = int(tensor.shape[0]), int(tensor.shape[-1])
    if (not name.endswith(("k_proj.weight", "v_proj.weight")) or tensor.dim() != 2
            or cols != shape[1] or shape[0] % rows or rows % head_dim):
        raise ValueError(f"the starting drafter's {name} is {tuple(tensor.shape)}, this "
                         f"one's {tuple(shape)}: train at its shape (--dflash-kv-heads "
                         "may only grow the key/value heads by a whole factor)")
    kv = rows // head_dim
    return (tensor.view(kv, head_dim, cols).repeat_interleave(int(shape[0]) // rows, dim=0)
            .reshape(shape))


def train(cfg: TrainConfig, model: nn.Module, examples: list[Example], state_path: Path,
          device: str) -> dict[str, float]:
    rng = random.Random(cfg.seed)
    order = list(range(len(examples)))
    rng.shuffle(order)
    n_val = max(1, int(len(order) * cfg.val_fraction))
    val = [examples[i] for i in order[:n_val]]
    trainset = [examples[i] for i in order[n_val:]]
    per_epoch = len(list(_batches(trainset, cfg.batch_tokens, random.Random(0))))
    total_steps = max(1, int(per_epoch * cfg.epochs))
    model.to(device)
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=cfg.lr,
                            weight_decay=0.0, betas=(0.9, 0.95))
    step = 0
    # The loss curve travels with the state, so a resumed (or already finished) run
    # reports the whole curve, not only its own steps; so does the time spent, which a
    # wall-clock budget counts.
    losses: list[float] = []
    spent = 0.0
    if state_path.exists():
        saved = torch.load(state_path, map_location=device, weights_only=True)
        model.load_state_dict(saved["model"])
        opt.load_state_dict(saved["opt"])
        step = int(saved["step"])
        losses = [float(x) for x in saved.get("losses", [])]
        spent = float(saved.get("seconds", 0.0))
    bar = Progress(f"train {cfg.method}", total=total_steps, unit="step")
    bar.advance(step)
    began, tokens = time.monotonic(), 0
    epoch = step // per_epoch
    first_step = step

    def seconds() -> float:
        return spent + time.monotonic() - began

    def at() -> float:
        """The schedule's position in steps: the steps taken, or the share of the time
        budget spent in steps, whichever is further along."""
        if cfg.max_seconds is None:
            return float(step)
        return max(float(step), seconds() / cfg.max_seconds * total_steps)

    while at() < total_steps:
        batches = list(_batches(trainset, cfg.batch_tokens, random.Random(cfg.seed + epoch)))
        for batch in batches[step - epoch * per_epoch:]:
            if at() >= total_steps:
                break
            for g in opt.param_groups:
                g["lr"] = _lr(cfg.lr, at(), total_steps)
            loss, per_pos, n = _loss(cfg, model, batch, device, rng)
            opt.zero_grad(set_to_none=True)
            (loss / max(n, 1)).backward()  # type: ignore[no-untyped-call]
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            step += 1
            losses.append(loss.item() / max(n, 1))
            tokens += sum(int(ex.tokens.numel()) for ex in batch)
            accs = " ".join(f"{a:.2f}" for a in per_pos)
            bar.advance(1, note=f"loss {loss.item() / max(n, 1):.2f} acc {accs} "
                                f"{tokens / (time.monotonic() - began):.0f} tok/s")
            if step % cfg.save_every == 0 and at() < total_steps:
                _save(state_path, model, opt, step, losses, seconds())
        epoch += 1
    if step > first_step:
        # The last state, once. A run the clock ended saves a time spent past its budget,
        # so a rerun does not train on.
        _save(state_path, model, opt, step, losses, seconds())
    bar.close()
    window = max(1, min(10, len(losses) // 4))
    curve = ({"loss_first": sum(losses[:window]) / window,
              "loss_last": sum(losses[-window:]) / window} if losses else {})
    return {**curve, "steps": float(step), **evaluate(cfg, model, val, device)}


@torch.no_grad()
def evaluate(cfg: TrainConfig, model: nn.Module, val: list[Example],
             device: str) -> dict[str, float]:
    """Teacher-forced accuracy per draft position on the validation split, and the
    acceptance length it implies for greedy chains (1 + sum of prefix products)."""
    model.eval()
    correct = torch.zeros(cfg.steps_ahead)
    counted = torch.zeros(cfg.steps_ahead)
    rng = random.Random(1)
    for batch in _batches(val, cfg.batch_tokens, random.Random(0)):
        _loss(cfg, model, batch, device, rng, raw=(correct, counted))
    model.train()
    acc = (correct / counted.clamp(min=1)).tolist()
    expected, run = 1.0, 1.0
    for a in acc:
        run *= a
        expected += run
    return {**{f"acc_{i + 1}": a for i, a in enumerate(acc)},
            "teacher_forced_acceptance_length": expected}


def _loss(cfg: TrainConfig, model: nn.Module, batch: list[Example], device: str,
          rng: random.Random, raw: tuple[torch.Tensor, torch.Tensor] | None = None,
          ) -> tuple[torch.Tensor, list[float], int]:
    tokens, feats, labels, final = _pad(batch, device)
    kind = device.split(":")[0]
    with torch.autocast(device_type=kind, dtype=torch.bfloat16, enabled=bf16_autocast(device)):
        if cfg.method == "eagle3":
            loss, per = model(tokens, feats, labels, cfg.steps_ahead, final, cfg.distill)
            counts = [int((_shifted(labels, 2 + k) >= 0).sum()) for k in range(cfg.steps_ahead)]
        else:
            anchors = _anchors(batch, cfg.anchors_per_seq, cfg.steps_ahead, rng).to(device)
            loss, per = model(tokens, feats, labels, anchors, final, cfg.distill)
            counts = _anchor_counts(labels, anchors, cfg.steps_ahead)
    accs = []
    for k, ((_, correct), n) in enumerate(zip(per, counts, strict=True)):
        accs.append(float(correct) / max(n, 1))
        if raw is not None:
            raw[0][k] += float(correct)
            raw[1][k] += n
    return loss, accs, counts[0]


def _shifted(labels: torch.Tensor, by: int) -> torch.Tensor:
    return labels[:, by:]


def _anchor_counts(labels: torch.Tensor, anchors: torch.Tensor, k: int) -> list[int]:
    t = labels.shape[1]
    out = []
    for j in range(1, k + 1):
        pos = anchors + j
        ok = (anchors >= 0) & (pos < t)
        lab = torch.gather(labels, 1, pos.clamp(max=t - 1))
        out.append(int(((lab >= 0) & ok).sum()))
    return out


def _anchors(batch: list[Example], n: int, k: int, rng: random.Random) -> torch.Tensor:
    """Random anchor positions whose first masked slot is an answer token."""
    out = torch.full((len(batch), n), -1, dtype=torch.long)
    for i, ex in enumerate(batch):
        answer = (ex.labels >= 0).nonzero().flatten().tolist()
        candidates = [p - 1 for p in answer if p >= 1]
        picked = rng.sample(candidates, min(n, len(candidates)))
        out[i, :len(picked)] = torch.tensor(picked, dtype=torch.long)
    return out


def _pad(batch: list[Example], device: str,
         ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor | None]:
    t = max(int(ex.tokens.numel()) for ex in batch)
    width = batch[0].feats.shape[1]
    tokens = torch.zeros(len(batch), t, dtype=torch.long)
    labels = torch.full((len(batch), t), -1, dtype=torch.long)
    # Built where the features are: on the device when they are held there.
    home = batch[0].feats.device
    feats = torch.zeros(len(batch), t, width, device=home)
    finals = [ex.final for ex in batch if ex.final is not None]
    final = (torch.zeros(len(batch), t, finals[0].shape[1], device=home)
             if len(finals) == len(batch) else None)
    for i, ex in enumerate(batch):
        n = int(ex.tokens.numel())
        tokens[i, :n] = ex.tokens
        labels[i, :n] = ex.labels
        feats[i, :n] = ex.feats.float()
        if final is not None and ex.final is not None:
            final[i, :n] = ex.final.float()
    return (tokens.to(device), feats.to(device), labels.to(device),
            None if final is None else final.to(device))


def _batches(examples: list[Example], batch_tokens: int,
             rng: random.Random) -> Iterator[list[Example]]:
    ranked = sorted(examples, key=lambda ex: int(ex.tokens.numel()))
    groups: list[list[Example]] = []
    group: list[Example] = []
    for ex in ranked:
        if group and int(ex.tokens.numel()) * (len(group) + 1) > batch_tokens:
            groups.append(group)
            group = []
        group.append(ex)
    if group:
        groups.append(group)
    rng.shuffle(groups)
    yield from groups


def _lr(peak: float, step: float, total: int) -> float:
    warm = max(1, total // 20)
    if step < warm:
        return peak * (step + 1) / warm
    return peak * 0.5 * (1 + math.cos(math.pi * (step - warm) / max(1, total - warm)))


def _save(path: Path, model: nn.Module, opt: torch.optim.Optimizer, step: int,
          losses: list[float], seconds: float) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "step": step,
                "losses": losses, "seconds": seconds}, tmp)
    tmp.replace(path)


def save_metrics(path: Path, cfg: TrainConfig, metrics: dict[str, float]) -> None:
    path.write_text(json.dumps({"config": asdict(cfg), **metrics}, indent=2) + "\n")
