"""`bench.teacher_forced`'s serving replay for DFlash: a block per verification step,
anchored at the bonus token, the accepted prefix counted and the next block after it."""

from __future__ import annotations

import torch

from bench.teacher_forced import walk_dflash

V, K, PROMPT = 50, 4, 5


class _Drafter:
    """Proposes the true next tokens for the first ``right`` slots of every block, a
    wrong token after that (the interface `walk_dflash` reads: ``block_logits``)."""

    def __init__(self, right: int) -> None:
        self.right = right

    def block_logits(self, tokens: torch.Tensor, feats: torch.Tensor,
                     anchors: torch.Tensor) -> torch.Tensor:
        t = tokens.shape[1]
        logits = torch.zeros(1, anchors.shape[1], K, V)
        for p in anchors[0].tolist():
            for j in range(K):
                nxt = p + 1 + j
                true = int(tokens[0, nxt]) if nxt < t else 0
                logits[0, p, j, true if j < self.right else (true + 1) % V] = 1.0
        return logits


def _walk(right: int, tokens: torch.Tensor, known: torch.Tensor) -> dict[str, float]:
    return walk_dflash(_Drafter(right), [(tokens, torch.zeros(len(tokens), 3))], [PROMPT],
                       known, K)


def test_a_drafter_right_everywhere_has_every_block_accepted_whole() -> None:
    tokens = torch.arange(30) % V
    walked = _walk(K, tokens, torch.arange(V))
    assert walked["acceptance_length"] == K + 1
    assert walked["pos_4"] == 1.0


def test_a_wrong_slot_ends_the_block_and_the_next_starts_after_the_bonus_token() -> None:
    tokens = torch.arange(30) % V
    walked = _walk(1, tokens, torch.arange(V))
    # blocks anchored at 5, 7, ..., 27: the first slot accepted, then the bonus token
    assert walked == {"pos_1": 1.0, "pos_2": 0.0, "pos_3": 0.0, "pos_4": 0.0,
                      "acceptance_length": 2.0}


def test_a_token_outside_the_draft_vocabulary_is_a_miss() -> None:
    tokens = torch.full((30,), 7)
    known = torch.arange(V)
    known[7] = -1                     # the target's token 7 is not a draft token
    assert _walk(K, tokens, known)["acceptance_length"] == 1.0
