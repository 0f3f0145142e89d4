"""The training forward passes compute what vLLM computes when it drafts.

Each reference below drafts the way vLLM's proposers do, one query at a time
against an explicit KV list (EAGLE-3: a first pass over the context, then one
token per step; DFlash: context keys from the target features, then one block
pass). If training and inference disagree, acceptance collapses silently in
the engine, so these compare logits numerically on a tiny random model.
"""

from __future__ import annotations

import math
from typing import Any

import pytest
import torch
import torch.nn.functional as F

from training.dflash import DFlashDrafter, DFlashShape
from training.eagle3 import Eagle3Drafter, Eagle3Shape
from training.layers import repeat_kv
from training.train import start_from
from training.vocab import DraftVocab

H, HEADS, KV, HD, V = 32, 4, 2, 8, 50
# Pure CPU arithmetic, a few seconds alone; on a machine busy with vLLM engines
# (the real tier runs beside it in CI) it can take minutes.
pytestmark = pytest.mark.timeout(240)


def _eagle(std: float = 0.3, layers: int = 1) -> Eagle3Drafter:
    torch.manual_seed(0)
    s = Eagle3Shape(H, 48, HEADS, KV, HD, 1e-5, 10000.0, 3, V, layers)
    model = Eagle3Drafter(s, torch.randn(V, H))
    for p in model.parameters():
        if p.dim() == 2:
            torch.nn.init.normal_(p, std=std)
    return model


def _attend(q: torch.Tensor, ks: list[torch.Tensor], vs: list[torch.Tensor]) -> torch.Tensor:
    """One query [heads, d] over explicit keys/values, each [kv_heads, d]."""
    k = repeat_kv(torch.stack(ks), HEADS // KV)  # [n, heads, d]
    v = repeat_kv(torch.stack(vs), HEADS // KV)
    w = torch.softmax(torch.einsum("hd,nhd->hn", q, k) / math.sqrt(HD), dim=-1)
    return torch.einsum("hn,nhd->hd", w, v)


def _eagle_reference(m: Eagle3Drafter, tokens: torch.Tensor, feats: torch.Tensor, i: int,
                     steps: int) -> list[torch.Tensor]:
    """vLLM: a first pass over positions 0..i (token j+1, features j), then each
    draft step one position later, feeding back the last layer's pre-norm output.
    Layers after the first run as vLLM's ``layer_idx > 0`` path: fused add-and-norm
    of the residual stream, attention over that layer's own cache."""
    layer, s = m.midlayer, m.s
    layers: list[Any] = [layer, *m.upper]
    cache_k: list[list[torch.Tensor]] = [[] for _ in layers]
    cache_v: list[list[torch.Tensor]] = [[] for _ in layers]

    def block(n: int, x: torch.Tensor, residual: torch.Tensor, pos: int) -> torch.Tensor:
        a = layers[n].self_attn
        q = m.rope(a.q_proj(x).view(1, s.heads, s.head_dim), torch.tensor([pos]))[0]
        k = m.rope(a.k_proj(x).view(1, s.kv_heads, s.head_dim), torch.tensor([pos]))[0]
        cache_k[n].append(k)
        cache_v[n].append(a.v_proj(x).view(s.kv_heads, s.head_dim))
        residual = a.o_proj(_attend(q, cache_k[n], cache_v[n]).reshape(-1)) + residual
        out: torch.Tensor = layers[n].mlp(layers[n].post_attention_layernorm(residual))
        return out + residual

    def run(tok: int, h: torch.Tensor, pos: int) -> tuple[torch.Tensor, torch.Tensor]:
        emb = layer.input_layernorm(m.embed[tok])
        out = block(0, torch.cat([emb, layer.hidden_norm(h)]), h, pos)
        for n in range(1, len(layers)):
            out = block(n, layers[n].input_layernorm(out), out, pos)
        return m.lm_head(m.norm(out)), out

    for j in range(i + 1):
        logits, out = run(int(tokens[j + 1]), m.fc(feats[j]), j)
    result = [logits]
    for k in range(1, steps):
        logits, out = run(int(tokens[i + 1 + k]), out, i + k)
        result.append(logits)
    return result


def test_a_fine_tune_from_a_deeper_drafter_is_refused_with_the_flag_to_use() -> None:
    shallow, deeper = _eagle(layers=1), _eagle(layers=2)
    d2t = torch.zeros(V, dtype=torch.long)
    vocab = DraftVocab(torch.arange(V), torch.arange(V), 1.0)
    with pytest.raises(ValueError, match="--eagle3-layers"):
        start_from(shallow, deeper.state_dict(), d2t, vocab)
    assert start_from(deeper, shallow.state_dict(), d2t, vocab) == V  # growing is fine


@pytest.mark.parametrize("layers", [1, 2])
def test_eagle3_unrolled_training_matches_step_by_step_drafting(layers: int) -> None:
    m = _eagle(layers=layers)
    t, steps = 12, 3
    tokens = torch.randint(0, V, (1, t))
    feats = torch.randn(1, t, 3 * H)
    with torch.no_grad():
        unrolled = m.unroll(tokens, feats, steps)
        for i in (0, 3, 7):
            ref = _eagle_reference(m, tokens[0], feats[0], i, steps)
            for k in range(steps):
                torch.testing.assert_close(unrolled[k][0, i], ref[k], atol=1e-4, rtol=1e-4)


def _dflash(std: float = 0.3, window: int | None = None, layers: int = 2,
            kv: int = KV) -> DFlashDrafter:
    torch.manual_seed(1)
    s = DFlashShape(H, 48, HEADS, kv, HD, 1e-5, 10000.0, 3, V, layers=layers, block=4,
                    mask_token_id=V - 1, window=window)
    model = DFlashDrafter(s, torch.randn(V, H))
    for p in model.parameters():
        if p.dim() == 2:
            torch.nn.init.normal_(p, std=std)
    return model


def _dflash_reference(m: DFlashDrafter, tokens: torch.Tensor, feats: torch.Tensor,
                      p: int) -> torch.Tensor:
    """vLLM: context K/V = k/v proj of hidden_norm(fc(features)) at positions < p
    (k-norm, RoPE); then one pass of [x_p, mask...] at p..p+K, each layer's
    queries attending to the context and, bidirectionally, to the whole block
    (with a sliding window: only keys at positions > query position - window)."""
    s = m.s
    ctx = m.hidden_norm(m.fc(feats[:p]))
    ctx_pos = torch.arange(p)
    blk_pos = torch.arange(p, p + s.block)
    x = F.embedding(torch.tensor([int(tokens[p])] + [s.mask_token_id] * (s.block - 1)),
                    m.embed)
    residual = None
    for layer in m.layers:
        a = layer.self_attn
        residual = x if residual is None else x + residual
        h = layer.input_layernorm(residual)
        kc = m.rope(a.k_norm(a.k_proj(ctx).view(p, s.kv_heads, s.head_dim)), ctx_pos)
        vc = a.v_proj(ctx).view(p, s.kv_heads, s.head_dim)
        q = m.rope(a.q_norm(a.q_proj(h).view(s.block, s.heads, s.head_dim)), blk_pos)
        kb = m.rope(a.k_norm(a.k_proj(h).view(s.block, s.kv_heads, s.head_dim)), blk_pos)
        vb = a.v_proj(h).view(s.block, s.kv_heads, s.head_dim)
        def seen(j: int, c: int) -> bool:
            return s.window is None or (p + j) - c < s.window

        attn = torch.stack([
            _attend(q[j], [kc[c] for c in range(p) if seen(j, c)] + list(kb),
                    [vc[c] for c in range(p) if seen(j, c)] + list(vb))
            for j in range(s.block)])
        x = a.o_proj(attn.reshape(s.block, -1))
        residual = x + residual
        x = layer.mlp(layer.post_attention_layernorm(residual))
    assert residual is not None
    return m.lm_head(m.norm(x + residual))[1:]


@pytest.mark.parametrize("window", [None, 5])
def test_dflash_block_training_matches_one_block_pass(window: int | None) -> None:
    m = _dflash(window=window)
    t = 14
    tokens = torch.randint(0, V - 1, (1, t))
    feats = torch.randn(1, t, 3 * H)
    anchors = torch.tensor([[2, 9, 5, -1]])
    with torch.no_grad():
        logits = m.block_logits(tokens, feats, anchors)
        for n, p in enumerate((2, 9, 5)):
            torch.testing.assert_close(logits[0, n], _dflash_reference(m, tokens[0], feats[0], p),
                                       atol=1e-4, rtol=1e-4)


def _assert_grown_drafts_alike(start: DFlashDrafter, grown: DFlashDrafter) -> None:
    """``grown``, started from ``start``, gives the same block logits."""
    d2t = torch.zeros(V, dtype=torch.long)
    vocab = DraftVocab(torch.arange(V), torch.arange(V), 1.0)
    assert start_from(grown, start.state_dict(), d2t, vocab) == V
    tokens = torch.randint(0, V - 1, (1, 14))
    feats = torch.randn(1, 14, 3 * H)
    anchors = torch.tensor([[2, 9, 5]])
    with torch.no_grad():
        torch.testing.assert_close(grown.block_logits(tokens, feats, anchors),
                                   start.block_logits(tokens, feats, anchors))


def test_a_deeper_dflash_grown_from_a_shallower_one_drafts_exactly_as_it_did() -> None:
    shallow, deeper = _dflash(window=5), _dflash(window=5, layers=3)
    _assert_grown_drafts_alike(shallow, deeper)
    # and the new layer is there to learn: its input projections are not zero
    assert deeper.blocks[2].self_attn.q_proj.weight.abs().sum() > 0


def test_a_dflash_with_more_kv_heads_grown_from_fewer_drafts_exactly_as_it_did() -> None:
    narrow, wide = _dflash(window=5), _dflash(window=5, kv=HEADS)
    _assert_grown_drafts_alike(narrow, wide)
    d2t = torch.zeros(V, dtype=torch.long)
    vocab = DraftVocab(torch.arange(V), torch.arange(V), 1.0)
    # Narrowing (or growing by a fraction of a head group) is refused with the flag to use.
    with pytest.raises(ValueError, match="--dflash-kv-heads"):
        start_from(narrow, wide.state_dict(), d2t, vocab)
    with pytest.raises(ValueError, match="--dflash-kv-heads"):
        start_from(_dflash(window=5, kv=3), narrow.state_dict(), d2t, vocab)


def test_losses_fall_when_training_on_a_repeated_sequence() -> None:
    """Both drafters can learn: a few steps on one sequence cut the loss."""
    torch.manual_seed(2)
    t = 16
    tokens = torch.randint(0, V - 1, (1, t))
    feats = torch.randn(1, t, 3 * H)
    labels = tokens.clone()
    for model, extra in ((_eagle(0.05), 3), (_dflash(0.05), torch.tensor([[1, 4, 7, 10]]))):
        opt = torch.optim.Adam(model.parameters(), lr=1e-2)
        losses = []
        for _ in range(30):
            loss, _ = model(tokens, feats, labels, extra)
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(loss.item())
        assert losses[-1] < 0.3 * losses[0], (type(model).__name__, losses[0], losses[-1])


def _teacher_ce(model: Any, tokens: torch.Tensor, feats: torch.Tensor, labels: torch.Tensor,
                extra: Any, final: torch.Tensor) -> float:
    """What the drafter lacks of the teacher's distribution: its loss at distill = 1."""
    with torch.no_grad():
        loss, _ = model(tokens, feats, labels, extra, final, 1.0)
    return float(loss)


def test_distillation_teaches_the_targets_whole_distribution() -> None:
    """With ``distill``, both drafters learn how sure the target was and what it nearly
    said (the soft cross-entropy to the teacher falls well below what training on the
    greedy tokens alone reaches), and still learn the greedy token itself."""
    torch.manual_seed(3)
    t = 16
    tokens = torch.randint(0, V - 1, (1, t))
    feats = torch.randn(1, t, 3 * H)
    final = torch.randn(1, t, H)
    labels = tokens.clone()
    head = 0.3 * torch.randn(V, H)  # a soft teacher: several tokens share the mass
    # The teacher's greedy token is the label, as for the target's own greedy answers.
    labels[0, 1:] = (final[0, :-1] @ head.T).argmax(-1)
    tokens = labels.clone()
    for make, extra in ((lambda: _eagle(0.05), 3),
                        (lambda: _dflash(0.05), torch.tensor([[1, 4, 7, 10]]))):
        reached = {}
        for weight in (0.0, 1.0):
            model = make()
            model.set_teacher(head)
            start = _teacher_ce(model, tokens, feats, labels, extra, final)
            opt = torch.optim.Adam(model.parameters(), lr=1e-2)
            for _ in range(40):
                loss, _ = model(tokens, feats, labels, extra, final, weight)
                opt.zero_grad()
                loss.backward()
                opt.step()
            reached[weight] = _teacher_ce(model, tokens, feats, labels, extra, final)
            _, per = model(tokens, feats, labels, extra)
            assert sum(float(c) for _, c in per) > 0, type(model).__name__
        name = type(model).__name__
        assert reached[1.0] < 0.8 * start, (name, start, reached)
        assert reached[1.0] < 0.8 * reached[0.0], (name, reached)


def test_distill_weight_zero_is_plain_cross_entropy() -> None:
    from training.layers import distill_ce, masked_ce

    logits = torch.randn(6, V)
    labels = torch.tensor([1, -1, 3, 4, -1, 7])
    teacher = torch.randn(6, V)
    plain = masked_ce(logits, labels)
    for mixed in (distill_ce(logits, labels, teacher, 0.0), distill_ce(logits, labels, None, 1.0)):
        torch.testing.assert_close(mixed[0], plain[0])
        assert int(mixed[1]) == int(plain[1])
    soft = distill_ce(logits, labels, teacher, 1.0)[0]
    keep = labels >= 0
    expected = -(torch.softmax(teacher[keep], -1) * torch.log_softmax(logits[keep], -1)).sum()
    torch.testing.assert_close(soft, expected)
