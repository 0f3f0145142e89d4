"""DFlash (block-diffusion) drafter for training, mirroring vLLM's ``qwen3_dflash.py``.

When the target has verified tokens up to position p-1 and sampled the token
at p (the anchor), vLLM runs one pass over the block ``[x_p, mask, ..., mask]``
at positions p..p+K. Every layer's queries attend, bidirectionally inside the
block, to the block's own keys and to context keys made from the target's
hidden states at positions < p (``hidden_norm(fc(features))`` through that
layer's k/v projections, k-norm and RoPE, no input norm). The output at block
slot j predicts the token at p+j. Training samples anchors in the answer part
of each sequence and scores all K slots at once.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from training.layers import MLP, Distillable, RMSNorm, Rope, distill_ce, repeat_kv


@dataclass(frozen=True)
class DFlashShape:
    hidden: int
    inter: int
    heads: int
    kv_heads: int
    head_dim: int
    eps: float
    rope_theta: float
    num_aux: int
    draft_vocab: int
    layers: int
    block: int  # anchor + K masked slots
    mask_token_id: int
    # Sliding-window attention (every layer): a query at position q sees keys at
    # positions > q - window. Attention over a short recent context is what
    # makes a small drafter learnable quickly, and vLLM runs it the same way.
    window: int | None = None


class _Attention(nn.Module):
    def __init__(self, s: DFlashShape) -> None:
        super().__init__()
        self.q_proj = nn.Linear(s.hidden, s.heads * s.head_dim, bias=False)
        self.k_proj = nn.Linear(s.hidden, s.kv_heads * s.head_dim, bias=False)
        self.v_proj = nn.Linear(s.hidden, s.kv_heads * s.head_dim, bias=False)
        self.o_proj = nn.Linear(s.heads * s.head_dim, s.hidden, bias=False)
        self.q_norm = RMSNorm(s.head_dim, s.eps)
        self.k_norm = RMSNorm(s.head_dim, s.eps)


class _Layer(nn.Module):
    def __init__(self, s: DFlashShape) -> None:
        super().__init__()
        self.self_attn = _Attention(s)
        self.mlp = MLP(s.hidden, s.inter)
        self.input_layernorm = RMSNorm(s.hidden, s.eps)
        self.post_attention_layernorm = RMSNorm(s.hidden, s.eps)


class DFlashDrafter(Distillable):
    embed: torch.Tensor

    def __init__(self, s: DFlashShape, embed: torch.Tensor) -> None:
        super().__init__()
        self.s = s
        self.blocks = [_Layer(s) for _ in range(s.layers)]
        self.layers = nn.ModuleList(self.blocks)
        self.fc = nn.Linear(s.num_aux * s.hidden, s.hidden, bias=False)
        self.hidden_norm = RMSNorm(s.hidden, s.eps)
        self.norm = RMSNorm(s.hidden, s.eps)
        self.lm_head = nn.Linear(s.hidden, s.draft_vocab, bias=False)
        self.register_buffer("embed", embed, persistent=False)  # the target's, frozen
        self.rope = Rope(s.head_dim, s.rope_theta)

    def forward(self, tokens: torch.Tensor, feats: torch.Tensor, labels: torch.Tensor,
                anchors: torch.Tensor, final: torch.Tensor | None = None,
                distill: float = 0.0) -> tuple[torch.Tensor, list[tuple[torch.Tensor,
                                                                        torch.Tensor]]]:
        """tokens/labels [B, T] (labels: draft ids, -1 = no loss); feats [B, T, A*H];
        anchors [B, N] anchor positions (-1 = padding); final [B, T, H] the target's
        normed last hidden state, read with weight ``distill`` through ``teacher_head``.
        Returns the weighted loss and, per block slot 1..K, (summed loss, correct count)."""
        t = tokens.shape[1]
        logits = self.block_logits(tokens, feats, anchors)
        blk_pos = anchors.clamp(min=0).unsqueeze(-1) + torch.arange(self.s.block,
                                                                    device=tokens.device)
        lab = torch.gather(labels, 1, blk_pos.clamp(max=t - 1).flatten(1)).view_as(blk_pos)
        lab = lab.masked_fill((blk_pos >= t) | (anchors < 0).unsqueeze(-1), -1)
        soft = final if distill > 0 else None
        total = logits.new_zeros(())
        per_slot = []
        for j in range(self.s.block - 1):
            teacher = None
            if soft is not None:
                # Slot j+1 predicts token p+1+j: the target said so from position p+j.
                rows = blk_pos[:, :, j].clamp(max=t - 1).unsqueeze(-1)
                teacher = self.teacher_logits(
                    torch.gather(soft, 1, rows.expand(-1, -1, soft.shape[-1])))
            loss, correct = distill_ce(logits[:, :, j], lab[:, :, j + 1], teacher, distill)
            per_slot.append((loss.detach(), correct))
            total = total + loss * (0.8 ** j)
        return total, per_slot

    def block_logits(self, tokens: torch.Tensor, feats: torch.Tensor,
                     anchors: torch.Tensor) -> torch.Tensor:
        """Logits [B, N, K, V_draft]: slot j+1 of the block at anchor p predicts token p+1+j."""
        s = self.s
        b, t = tokens.shape
        n, blk = anchors.shape[1], s.block
        dev = tokens.device
        ctx = self.hidden_norm(self.fc(feats))  # [B, T, H]
        p = anchors.clamp(min=0)
        offs = torch.arange(blk, device=dev)
        blk_pos = p.unsqueeze(-1) + offs  # [B, N, blk]
        anchor_tok = torch.gather(tokens, 1, p)
        blk_tok = torch.full((b, n, blk), s.mask_token_id, device=dev, dtype=tokens.dtype)
        blk_tok[..., 0] = anchor_tok
        # Context keys at positions < anchor only, and inside each query's window: every
        # block reads the shared [B, T] context under its own mask, never a per-block copy
        # of it (with full attention that copy would be B x N x T keys). A step costs the
        # same as gathering each block's window keys did and needs no separate path for
        # full attention.
        every = torch.arange(t, device=dev)
        ctx_mask = (every < p[..., None, None]).expand(b, n, blk, t)  # [B, N, blk, T]
        if s.window is not None:
            ctx_mask = ctx_mask & (blk_pos.unsqueeze(-1) - every < s.window)

        x = F.embedding(blk_tok, self.embed)  # [B, N, blk, H]
        residual: torch.Tensor | None = None
        for layer in self.blocks:
            if residual is None:
                residual = x
            else:
                residual = x + residual
            h = layer.input_layernorm(residual)
            x = self._attention(layer.self_attn, h, blk_pos, ctx, ctx_mask)
            residual = x + residual
            x = layer.mlp(layer.post_attention_layernorm(residual))
        assert residual is not None
        out = self.norm(x + residual)
        logits: torch.Tensor = self.lm_head(out[:, :, 1:])  # slots 1..K
        return logits

    def _attention(self, a: _Attention, h: torch.Tensor, blk_pos: torch.Tensor,
                   ctx: torch.Tensor, ctx_mask: torch.Tensor) -> torch.Tensor:
        """ctx [B, T, H]; ctx_mask [B, N, blk, T] which context positions each slot sees."""
        s = self.s
        b, n, blk, _ = h.shape
        t = ctx.shape[1]
        g = s.heads // s.kv_heads
        q = self.rope(a.q_norm(a.q_proj(h).view(b, n, blk, s.heads, s.head_dim)), blk_pos)
        kb = self.rope(a.k_norm(a.k_proj(h).view(b, n, blk, s.kv_heads, s.head_dim)), blk_pos)
        vb = a.v_proj(h).view(b, n, blk, s.kv_heads, s.head_dim)
        pos = torch.arange(t, device=ctx.device).expand(b, t)
        kc = self.rope(a.k_norm(a.k_proj(ctx).view(b, t, s.kv_heads, s.head_dim)), pos)
        vc = a.v_proj(ctx).view(b, t, s.kv_heads, s.head_dim)
        scale = 1.0 / math.sqrt(s.head_dim)
        sc = torch.einsum("bnqhd,bthd->bnhqt", q, repeat_kv(kc, g)) * scale
        sc = sc.masked_fill(~ctx_mask[:, :, None], float("-inf"))
        sb = torch.einsum("bnqhd,bnkhd->bnhqk", q, repeat_kv(kb, g)) * scale
        probs = torch.softmax(torch.cat([sc, sb], dim=-1).float(), dim=-1).to(q.dtype)
        out = (torch.einsum("bnhqt,bthd->bnqhd", probs[..., :t], repeat_kv(vc, g))
               + torch.einsum("bnhqk,bnkhd->bnqhd", probs[..., t:], repeat_kv(vb, g)))
        projected: torch.Tensor = a.o_proj(out.reshape(b, n, blk, -1))
        return projected
