"""Building blocks that compute exactly what vLLM's drafter layers compute.

vLLM's RMSNorm with a residual is a fused add-then-norm; RoPE is the neox
(rotate-half) layout of Llama and Qwen3; attention uses grouped KV heads.
Keeping training arithmetic identical to inference is what makes the
acceptance measured in training hold in the engine.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


class RMSNorm(nn.Module):
    def __init__(self, size: int, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(size))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        var = x.float().pow(2).mean(-1, keepdim=True)
        return (x.float() * torch.rsqrt(var + self.eps)).to(x.dtype) * self.weight


class Distillable(nn.Module):
    """A drafter that can read the target's output head as a teacher (``--distill``):
    the head is a buffer set for training only, never exported."""

    teacher_head: torch.Tensor | None

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("teacher_head", None, persistent=False)

    def set_teacher(self, head: torch.Tensor) -> None:
        """head [V_draft, H]: the target's output rows for the draft tokens."""
        self.teacher_head = head

    def teacher_logits(self, final: torch.Tensor) -> torch.Tensor | None:
        """The target's logits over the draft vocabulary from its normed last hidden
        states (rows of ``final``); None where no teacher is set."""
        return None if self.teacher_head is None else final.float() @ self.teacher_head.T


class MLP(nn.Module):
    def __init__(self, hidden: int, inter: int) -> None:
        super().__init__()
        self.gate_proj = nn.Linear(hidden, inter, bias=False)
        self.up_proj = nn.Linear(hidden, inter, bias=False)
        self.down_proj = nn.Linear(inter, hidden, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))
        return out


class Rope:
    """Neox-style rotary embedding, as vLLM's ``get_rope`` for Llama and Qwen3."""

    def __init__(self, head_dim: int, theta: float) -> None:
        self.inv_freq = 1.0 / theta ** (torch.arange(0, head_dim, 2).float() / head_dim)

    def __call__(self, x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """x: [..., T, heads, head_dim]; positions: broadcastable to [..., T]."""
        freqs = positions.float().unsqueeze(-1) * self.inv_freq.to(x.device)
        cos = freqs.cos().unsqueeze(-2).to(x.dtype)
        sin = freqs.sin().unsqueeze(-2).to(x.dtype)
        half = x.shape[-1] // 2
        x1, x2 = x[..., :half], x[..., half:]
        return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1)


def repeat_kv(x: torch.Tensor, groups: int) -> torch.Tensor:
    """[..., kv_heads, d] -> [..., kv_heads * groups, d] (grouped-query attention)."""
    return x if groups == 1 else x.repeat_interleave(groups, dim=-2)


def masked_ce(logits: torch.Tensor, labels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Summed cross-entropy and correct-argmax count over labels >= 0."""
    keep = labels >= 0
    if not keep.any():
        zero = logits.sum() * 0
        return zero, zero.detach()
    picked = logits[keep].float()
    target = labels[keep]
    loss = F.cross_entropy(picked, target, reduction="sum")
    correct = (picked.argmax(-1) == target).sum()
    return loss, correct


def distill_ce(logits: torch.Tensor, labels: torch.Tensor, teacher: torch.Tensor | None,
               weight: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Summed loss and correct-argmax count over rows whose label is >= 0: cross-entropy
    on the labels (the target's greedy tokens), mixed at ``weight`` with the soft
    cross-entropy against the teacher's distribution over the draft vocabulary
    (``teacher``: the target's logits restricted to it, rows aligned with ``logits``).
    The soft term tells the drafter how sure the target was and what it nearly said,
    which one-hot labels do not."""
    hard, correct = masked_ce(logits, labels)
    if teacher is None or weight <= 0.0:
        return hard, correct
    keep = labels >= 0
    if not keep.any():
        return hard, correct
    student = F.log_softmax(logits[keep].float(), dim=-1)
    target = F.softmax(teacher[keep].float(), dim=-1)
    soft = -(target * student).sum()
    return (1.0 - weight) * hard + weight * soft, correct
