"""EAGLE-3 drafter for training, mirroring vLLM's ``llama_eagle3.py`` (one or more layers).

At position i the drafter reads the target's auxiliary hidden states at i
(through ``fc``) and the token at i+1, and predicts the token at i+2. Each
further draft step feeds back the layer's pre-norm output and the previous
draft token one position later. Training unrolls those steps ("training-time
test"): step k at index i sees step-0 keys at positions <= i, plus its own
earlier steps' keys at i, which is exactly what vLLM's KV cache holds when it
drafts.

Further layers (``Eagle3Shape.layers`` > 1) are plain Llama layers over the first
one's output, as vLLM stacks them: each keeps its own keys per step under the same
mask, and the last one's pre-norm output is what the next step reads.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from training.layers import MLP, Distillable, RMSNorm, Rope, distill_ce


@dataclass(frozen=True)
class Eagle3Shape:
    hidden: int
    inter: int
    heads: int
    kv_heads: int
    head_dim: int
    eps: float
    rope_theta: float
    num_aux: int
    draft_vocab: int
    layers: int = 1  # the first reads [embedding, hidden]; the others the residual stream


class _Attention(nn.Module):
    def __init__(self, s: Eagle3Shape, inputs: int) -> None:
        super().__init__()
        self.s = s
        self.q_proj = nn.Linear(inputs, s.heads * s.head_dim, bias=False)
        self.k_proj = nn.Linear(inputs, s.kv_heads * s.head_dim, bias=False)
        self.v_proj = nn.Linear(inputs, s.kv_heads * s.head_dim, bias=False)
        self.o_proj = nn.Linear(s.heads * s.head_dim, s.hidden, bias=False)


class _UpperLayer(nn.Module):
    """A further layer: a plain pre-norm Llama layer over the residual stream."""

    def __init__(self, s: Eagle3Shape, inputs: int | None = None) -> None:
        super().__init__()
        self.self_attn = _Attention(s, inputs or s.hidden)
        self.mlp = MLP(s.hidden, s.inter)
        self.input_layernorm = RMSNorm(s.hidden, s.eps)
        self.post_attention_layernorm = RMSNorm(s.hidden, s.eps)


class _Layer(_UpperLayer):
    """The first layer: its attention reads [norm(embedding), hidden_norm(hidden)]."""

    def __init__(self, s: Eagle3Shape) -> None:
        super().__init__(s, 2 * s.hidden)
        self.hidden_norm = RMSNorm(s.hidden, s.eps)


class Eagle3Drafter(Distillable):
    embed: torch.Tensor

    def __init__(self, s: Eagle3Shape, embed: torch.Tensor) -> None:
        super().__init__()
        self.s = s
        self.midlayer = _Layer(s)
        # Named as vLLM names them: the first layer is ``midlayer`` (its ``layers.0``),
        # further ones ``layers.1``, ``layers.2``, ...
        self.upper = [_UpperLayer(s) for _ in range(1, s.layers)]
        self.layers = nn.ModuleDict({str(i): m for i, m in enumerate(self.upper, start=1)})
        self.fc = nn.Linear(s.num_aux * s.hidden, s.hidden, bias=False)
        self.norm = RMSNorm(s.hidden, s.eps)
        self.lm_head = nn.Linear(s.hidden, s.draft_vocab, bias=False)
        self.register_buffer("embed", embed, persistent=False)  # the target's, frozen
        self.rope = Rope(s.head_dim, s.rope_theta)

    def forward(self, tokens: torch.Tensor, feats: torch.Tensor, labels: torch.Tensor,
                steps: int, final: torch.Tensor | None = None,
                distill: float = 0.0) -> tuple[torch.Tensor,
                                               list[tuple[torch.Tensor, torch.Tensor]]]:
        """tokens [B, T] target ids; feats [B, T, A*H]; labels [B, T] draft ids (-1: no loss)
        where labels[:, j] is the draft id of tokens[:, j]; final [B, T, H] the target's
        normed last hidden state (its logits at j predict token j+1), read with weight
        ``distill`` through ``teacher_head``.

        Returns the weighted loss and per step (summed loss, correct count)."""
        total = feats.new_zeros(())
        per_step = []
        soft = final if distill > 0 else None
        for k, out in enumerate(self._outputs(tokens, feats, steps)):
            target = _shift(labels, 2 + k, fill=-1)
            keep = target >= 0
            # The output head (the drafter's largest matrix) only where a label is.
            teacher = None if soft is None else self.teacher_logits(_shift(soft, 1 + k, 0)[keep])
            loss, correct = distill_ce(self.lm_head(self.norm(out[keep])), target[keep],
                                       teacher, distill)
            per_step.append((loss.detach(), correct))
            total = total + loss * (0.8 ** k)
        return total, per_step

    def unroll(self, tokens: torch.Tensor, feats: torch.Tensor,
               steps: int) -> list[torch.Tensor]:
        """Draft logits [B, T, V_draft] per step; step k at index i predicts token i+2+k."""
        return [self.lm_head(self.norm(out)) for out in self._outputs(tokens, feats, steps)]

    def _outputs(self, tokens: torch.Tensor, feats: torch.Tensor,
                 steps: int) -> list[torch.Tensor]:
        """The layer's pre-norm output [B, T, H] per draft step."""
        s, layer = self.s, self.midlayer
        b, t = tokens.shape
        pos = torch.arange(t, device=tokens.device).expand(b, t)
        h = self.fc(feats)
        # Per layer, the keys and values of every step so far (vLLM's KV cache).
        keys: list[list[torch.Tensor]] = [[] for _ in range(s.layers)]
        values: list[list[torch.Tensor]] = [[] for _ in range(s.layers)]
        outs = []
        for k in range(steps):
            tok_in = _shift(tokens, 1 + k, fill=0)
            emb = layer.input_layernorm(F.embedding(tok_in, self.embed))
            x = torch.cat([emb, layer.hidden_norm(h)], dim=-1)
            out = self._block(layer, x, h, pos + k, keys[0], values[0])
            for n, upper in enumerate(self.upper, start=1):
                x = upper.input_layernorm(out)
                out = self._block(upper, x, out, pos + k, keys[n], values[n])
            outs.append(out)
            h = out  # the pre-norm output is the next step's hidden state
        return outs

    def _block(self, layer: _UpperLayer, x: torch.Tensor, residual: torch.Tensor,
               pos: torch.Tensor, keys: list[torch.Tensor],
               values: list[torch.Tensor]) -> torch.Tensor:
        """Attention (this step's keys appended to the layer's) and MLP, residuals added."""
        s, a = self.s, layer.self_attn
        b, t = x.shape[:2]
        q = self.rope(a.q_proj(x).view(b, t, s.heads, s.head_dim), pos)
        keys.append(self.rope(a.k_proj(x).view(b, t, s.kv_heads, s.head_dim), pos))
        values.append(a.v_proj(x).view(b, t, s.kv_heads, s.head_dim))
        attn = _ttt_attention(q, keys, values, s.heads // s.kv_heads)
        residual = a.o_proj(attn.reshape(b, t, -1)) + residual
        out: torch.Tensor = layer.mlp(layer.post_attention_layernorm(residual)) + residual
        return out


def _shift(x: torch.Tensor, by: int, fill: int) -> torch.Tensor:
    out = torch.full_like(x, fill)
    if by < x.shape[1]:
        out[:, :x.shape[1] - by] = x[:, by:]
    return out


def _ttt_attention(q: torch.Tensor, keys: list[torch.Tensor], values: list[torch.Tensor],
                   groups: int) -> torch.Tensor:
    """q [B, T, Hq, d]; keys/values per step [B, T, Hkv, d] -> [B, T, Hq, d].

    One fused attention over the steps' keys laid end to end: step-0 keys causally,
    each later step's keys only at the query's own index (a [T, steps * T] mask shared
    by the batch), so no [B, H, T, T] score tensor is ever materialised."""
    t = q.shape[1]
    idx = torch.arange(t, device=q.device)
    blocks = [idx[None, :] <= idx[:, None]]
    blocks += [torch.eye(t, dtype=torch.bool, device=q.device)] * (len(keys) - 1)
    k = torch.cat(keys, dim=1).transpose(1, 2)
    v = torch.cat(values, dim=1).transpose(1, 2)
    out = F.scaled_dot_product_attention(q.transpose(1, 2), k, v,
                                         attn_mask=torch.cat(blocks, dim=1),
                                         enable_gqa=groups > 1)
    return out.transpose(1, 2)
